#!/bin/sh
# The ctest "python_pip": installs the package the way the guide says, with pip
# in a virtual environment that sees the system's packages, without network
# and without build isolation (pip builds with the system's setuptools), from a
# copy of the repository's sources, then imports it and runs a transfer and a
# DLPack exchange with NumPy.
#   usage: check_pip_install.sh SOURCE_ROOT WORK_DIR
set -eu
here=$(cd "$(dirname "$0")" && pwd)
case $1 in /*) root=$1 ;; *) root=$PWD/$1 ;; esac
case $2 in /*) work=$2 ;; *) work=$PWD/$2 ;; esac
. "$here/find_python.sh"
ferry_find_python python_pip
rm -rf "$work"
mkdir -p "$work/repo/bindings"
# A copy: pip builds in the source folder, which must stay clean (several
# builds of the tree may test at once).
cp -R "$root/include" "$root/src" "$work/repo/"
cp -R "$root/bindings/python" "$work/repo/bindings/python"
rm -rf "$work/repo/bindings/python/build" "$work/repo/bindings/python"/*.egg-info
"$PYTHON" -m venv --system-site-packages "$work/venv" || {
  echo "FAIL python_pip: $PYTHON -m venv failed (Debian: apt-get install python3-venv)"
  exit 1
}
# NumPy may sit where a virtual environment does not look (the user's site, or a
# PYTHONPATH entry, as on some GPU machines): then the venv is shown that folder,
# so that pip finds the dependency installed instead of asking an index for it.
if ! "$work/venv/bin/python" -c "import numpy" 2>/dev/null; then
  numpy_site=$("$PYTHON" -c "import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))")
  PYTHONPATH="$numpy_site${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONPATH
fi
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$work/venv/bin/python" -m pip install -q \
  --no-build-isolation --no-index "$work/repo/bindings/python"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import os, sys
import numpy as np
import ferry
assert ferry.__file__.startswith(sys.prefix), (ferry.__file__, sys.prefix)  # the venv's copy
dev = next(d for d in ferry.devices() if d.backend in ("native", "checked"))
with dev.alloc(100, np.float32) as buf:
    buf.write(np.arange(100, dtype=np.float32))
    view = np.from_dlpack(buf)
    assert view.sum() == 4950.0
    del view
back = ferry.from_dlpack(np.arange(3.0))
assert back.read().tolist() == [0.0, 1.0, 2.0]
back.free()
print("python_pip: installed in", sys.prefix, "-", ferry.version(), "on", [d.backend for d in ferry.devices()])
PY
