#!/bin/sh
# `make install`'s Python step: installs the ferry package (built from the
# repository's sources, see setup.py) for one Python: $PYTHON, default the first
# python3 on PATH (make install PYTHON=/usr/bin/python3 picks Debian's). It goes
# into the site-packages folder that this Python searches under PREFIX (Debian:
# PREFIX/lib/python3.X/dist-packages), below DESTDIR when that is set; when this
# Python does not search any folder of PREFIX, the package goes to
# PREFIX/lib/python3.X/site-packages (dist-packages on Debian) and the last line
# says the PYTHONPATH that finds it. pip runs without network and without build isolation (that Python's
# setuptools builds it).
#   usage: install.sh PREFIX      (env: PYTHON, DESTDIR; FERRY_LIBRARY as setup.py)
# Without what the build needs (Python's headers, setuptools, wheel, pip, NumPy),
# says what that Python lacks and how to get it or choose another, and installs
# nothing, unless FERRY_REQUIRE_PYTHON=1, which makes that an error.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
prefix=${1:-/usr/local}
python=${PYTHON:-python3}
. "$here/tests/find_python.sh"
skip() {
  echo "install: the Python package is not installed: $1"
  [ "${FERRY_REQUIRE_PYTHON:-0}" = 1 ] && exit 1
  exit 0
}
resolved=$(command -v "$python" 2>/dev/null) || skip "there is no $python (choose one: make install PYTHON=/usr/bin/python3)"
which="$python ($resolved, Python $("$python" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null || echo '?'))"
missing=$(ferry_python_missing "$python" setuptools bdist_wheel pip numpy)
if [ -n "$missing" ]; then
  if ferry_python_is_debians "$python"; then
    skip "$which lacks $missing (Debian: apt-get install $FERRY_PYTHON_DEBIAN_PACKAGES)"
  fi
  skip "$which lacks $missing. It is not Debian's Python (a venv, pyenv or conda one?): install those into it \
with its own tools, or choose Debian's, which has them from apt-get install $FERRY_PYTHON_DEBIAN_PACKAGES: \
make install PYTHON=/usr/bin/python3"
fi
# The folder of PREFIX that the interpreter searches (Debian's site module also
# lists PREFIX/local/... and lib/python3/...); else PREFIX/lib/python3.X/...
site=$("$python" - "$prefix" <<'PY'
import site, sys
candidates = site.getsitepackages([sys.argv[1]])
print(next((c for c in candidates if c in sys.path), candidates[-1]))
PY
)
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
  "$python" -m pip install -q --no-build-isolation --no-deps --upgrade --target "${DESTDIR:-}$site" "$here"
rm -rf "$here/build" "$here"/*.egg-info
echo "install: the ferry Python package is in ${DESTDIR:-}$site, for $which"
if ! "$python" -c 'import sys; sys.exit(sys.argv[1] not in sys.path)' "$site"; then
  echo "install: $python does not search $site; with PYTHONPATH=$site it finds the package"
fi
