# Sourced by run_tests.sh, check_pip_install.sh, check_install.sh and ../install.sh.

# What building and installing the package needs, as Debian's packages for its
# own Python (/usr/bin/python3); docs/PYTHON.md lists the same. The tests add
# python3-pytest.
FERRY_PYTHON_DEBIAN_PACKAGES="python3-dev python3-numpy python3-setuptools python3-wheel python3-pip python3-venv"

# ferry_python_missing PYTHON MODULE...: prints what PYTHON lacks of the modules
# and of its own headers (Python.h), comma-separated; nothing when it has all.
ferry_python_missing() {
  _python=$1
  shift
  "$_python" - "$@" <<'PY' 2>/dev/null || echo "a working interpreter"
import importlib.util, os, sys, sysconfig
def has(m):
    if m == "bdist_wheel":  # pip's build of the package: wheel's command, or setuptools' own (70.1 on)
        return importlib.util.find_spec("wheel") is not None or (
            importlib.util.find_spec("setuptools") is not None
            and importlib.util.find_spec("setuptools.command.bdist_wheel") is not None)
    return importlib.util.find_spec(m) is not None
need = [m if m != "bdist_wheel" else "wheel (bdist_wheel)" for m in sys.argv[1:] if not has(m)]
if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
    need.append("Python.h (python3-dev)")
print(", ".join(need))
PY
}

# ferry_find_python TEST: sets PYTHON to the first interpreter (FERRY_PYTHON,
# python3, /usr/bin/python3) that can build and test the package (its headers,
# setuptools, NumPy, pytest), or exits: 77 (skipped, with the reason, as ctest
# expects), or 1 when FERRY_REQUIRE_PYTHON=1.
ferry_find_python() {
  why=""
  for candidate in ${FERRY_PYTHON:-} python3 /usr/bin/python3; do
    command -v "$candidate" >/dev/null 2>&1 || continue
    missing=$(ferry_python_missing "$candidate" numpy pytest setuptools)
    if [ -z "$missing" ]; then
      PYTHON=$candidate
      return 0
    fi
    why="$why${why:+; }$candidate lacks $missing"
  done
  [ -n "$why" ] || why="no python3 found"
  if [ "${FERRY_REQUIRE_PYTHON:-0}" = 1 ]; then
    echo "FAIL $1: FERRY_REQUIRE_PYTHON=1 but no Python can build and test the package: $why"
    exit 1
  fi
  echo "SKIP $1: $why (Debian: apt-get install $FERRY_PYTHON_DEBIAN_PACKAGES python3-pytest; or FERRY_PYTHON=...)"
  exit 77
}

# ferry_python_is_debians PYTHON: true when PYTHON is Debian's own interpreter
# (its packages come from apt), not a venv, pyenv or conda one.
ferry_python_is_debians() {
  "$1" -c 'import os, sys; sys.exit(not (sys.prefix == "/usr" and os.path.isdir("/usr/lib/python3/dist-packages")))' \
    2>/dev/null
}
