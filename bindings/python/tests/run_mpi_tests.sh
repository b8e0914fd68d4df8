#!/bin/sh
# The ctest "python_mpi": builds the package with ferry.mpi (its extension
# ferry._mpi) against a libferry.a of ferry's CMake build into a folder of the
# build tree, then runs mpi_check.py under mpirun with 2 ranks on this host.
#   usage: run_mpi_tests.sh LIBFERRY_A WORK_DIR [MPIEXEC]
# Skipped (77, saying why) without a Python that can build the package and
# import mpi4py, without mpicc or without mpirun; failed then when
# FERRY_REQUIRE_MPI=1 (CI).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
package=$(dirname "$here")
case $1 in /*) libferry=$1 ;; *) libferry=$PWD/$1 ;; esac
case $2 in /*) work=$2 ;; *) work=$PWD/$2 ;; esac
mpiexec=${3:-}
case $mpiexec in *NOTFOUND) mpiexec="" ;; esac
debian="Debian: apt-get install libopenmpi-dev openmpi-bin python3-mpi4py"
skip() {
  if [ "${FERRY_REQUIRE_MPI:-0}" = 1 ]; then
    echo "FAIL python_mpi: FERRY_REQUIRE_MPI=1, but $* ($debian)"
    exit 1
  fi
  echo "SKIP python_mpi: $* ($debian)"
  exit 77
}
. "$here/find_python.sh"
# The first Python that can build the package and has mpi4py (Debian's mpi4py
# is for /usr/bin/python3 alone).
PYTHON="" why=""
for candidate in ${FERRY_PYTHON:-} python3 /usr/bin/python3; do
  command -v "$candidate" >/dev/null 2>&1 || continue
  missing=$(ferry_python_missing "$candidate" numpy setuptools mpi4py)
  if [ -z "$missing" ]; then
    PYTHON=$candidate
    break
  fi
  why="$why${why:+; }$candidate lacks $missing"
done
[ -n "$PYTHON" ] || skip "no Python can build ferry.mpi: ${why:-no python3 found}"
command -v "${MPICC:-mpicc}" >/dev/null 2>&1 || skip "no ${MPICC:-mpicc}, which gives MPI's flags to the build"
if [ -z "$mpiexec" ]; then
  mpiexec=$(command -v mpirun || command -v mpiexec || true)
  [ -n "$mpiexec" ] || skip "no mpirun or mpiexec"
fi
echo "python: $PYTHON ($("$PYTHON" -c 'import sys, mpi4py; print(sys.version.split()[0], "mpi4py", mpi4py.__version__)'))"
rm -rf "$work"
mkdir -p "$work"
(cd "$package" && FERRY_LIBRARY=$libferry "$PYTHON" setup.py -q build --build-base "$work/build" \
  --build-lib "$work/lib" >"$work/build.log" 2>&1) || { cat "$work/build.log"; exit 1; }
if ! ls "$work/lib/ferry/"_mpi*.so >/dev/null 2>&1; then
  cat "$work/build.log"
  echo "FAIL python_mpi: mpicc and mpi4py are here, but the build left ferry._mpi out"
  exit 1
fi
# Open MPI refuses root and more ranks than cores unless told (CI: root, 2
# cores), and only shared memory between the ranks (as tests/mpi/run.sh).
extra=""
if "$mpiexec" --version 2>&1 | grep -qiE "open mpi|openrte|open-mpi"; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  extra="--oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none -x PYTHONPATH \
-x PYTHONDONTWRITEBYTECODE"
fi
cd "$work"
PYTHONPATH="$work/lib"
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH PYTHONDONTWRITEBYTECODE
# shellcheck disable=SC2086
exec "$mpiexec" -n 2 $extra "$PYTHON" "$here/mpi_check.py"
