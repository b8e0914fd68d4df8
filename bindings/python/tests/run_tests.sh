#!/bin/sh
# The ctest "python": builds the package against a libferry.a of ferry's CMake
# build (seconds, no compiling of libferry again) into a folder of the build
# tree, then runs the tests with pytest on the devices present.
#   usage: run_tests.sh LIBFERRY_A WORK_DIR [pytest arguments]
# Skipped (77) without a Python that has its headers, NumPy and pytest; failed
# then when FERRY_REQUIRE_PYTHON=1 (CI).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
package=$(dirname "$here")
# Relative paths are the caller's: made absolute before the build changes folder.
case $1 in /*) libferry=$1 ;; *) libferry=$PWD/$1 ;; esac
case $2 in /*) work=$2 ;; *) work=$PWD/$2 ;; esac
shift 2
. "$here/find_python.sh"
ferry_find_python python
echo "python: $PYTHON ($("$PYTHON" -c 'import sys, numpy; print(sys.version.split()[0], "numpy", numpy.__version__)'))"
rm -rf "$work"
mkdir -p "$work"
(cd "$package" && FERRY_LIBRARY=$libferry "$PYTHON" setup.py -q build --build-base "$work/build" \
  --build-lib "$work/lib" >"$work/build.log" 2>&1) || { cat "$work/build.log"; exit 1; }
cd "$work"
PYTHONPATH="$work/lib" PYTHONDONTWRITEBYTECODE=1 exec "$PYTHON" -m pytest -q -p no:cacheprovider "$here" "$@"
