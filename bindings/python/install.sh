#!/bin/sh
# `make install`'s Python step: installs the ferry package (built from the
# repository's sources, see setup.py) into the site-packages folder that
# $PYTHON searches under PREFIX (Debian: PREFIX/lib/python3.X/dist-packages),
# below DESTDIR when that is set. pip runs without network and without build
# isolation (the system's setuptools builds it).
#   usage: install.sh PREFIX      (env: PYTHON, default python3; DESTDIR)
# Without a Python that can build it (headers, setuptools, pip), says so and
# installs nothing, unless FERRY_REQUIRE_PYTHON=1, which makes that an error.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
prefix=${1:-/usr/local}
python=${PYTHON:-python3}
. "$here/tests/find_python.sh"
missing=$(ferry_python_missing "$python" setuptools pip numpy)
if [ -n "$missing" ]; then
  echo "install: the Python package is not installed: $python lacks $missing" \
    "(Debian: apt-get install python3-dev python3-setuptools python3-pip python3-numpy; or PYTHON=...)"
  [ "${FERRY_REQUIRE_PYTHON:-0}" = 1 ] && exit 1
  exit 0
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
echo "install: the ferry Python package is in ${DESTDIR:-}$site (for $python)"
