#!/bin/sh
# The ctest "python_install": make install's Python step (../install.sh) and the
# documented test command, as a user runs them.
#  1. A Python that lacks what the build needs and is not Debian's (a venv of
#     its own, as pyenv or conda ones are): nothing installed, and the sentence
#     names that Python, what it lacks and how to choose another, not an apt
#     package that would not help it; FERRY_REQUIRE_PYTHON=1 makes it an error.
#  2. A Python that has it all, into a prefix it does not search: installed, and
#     the PYTHONPATH line it prints finds the package.
#  3. run_tests.sh with relative paths (the documented form), one test.
#   usage: check_install.sh SOURCE_ROOT LIBFERRY_A WORK_DIR
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$1
libferry=$2
work=$3
. "$here/find_python.sh"
ferry_find_python python_install
rm -rf "$work"
mkdir -p "$work"
fail() {
  echo "FAIL python_install: $*"
  exit 1
}

# 1.
"$PYTHON" -m venv --without-pip "$work/bare" || fail "$PYTHON -m venv failed (Debian: apt-get install python3-venv)"
# (FERRY_REQUIRE_PYTHON, which CI sets for the whole run, would make this refusal
# an error; that is checked below.)
out=$(PYTHON="$work/bare/bin/python" FERRY_REQUIRE_PYTHON= sh "$root/bindings/python/install.sh" "$work/prefix-bare")
echo "$out"
case $out in *"not installed"*) ;; *) fail "a Python without NumPy was not refused: $out" ;; esac
case $out in *"$work/bare/bin/python"*) ;; *) fail "the sentence does not name the Python: $out" ;; esac
case $out in *"numpy"*) ;; *) fail "the sentence does not say what it lacks: $out" ;; esac
case $out in *"make install PYTHON=/usr/bin/python3"*) ;; *) fail "the sentence does not say how to choose another: $out" ;; esac
case $out in *"not Debian's"*) ;; *) fail "the sentence offers apt packages for a Python they do not serve: $out" ;; esac
[ ! -e "$work/prefix-bare" ] || fail "something was installed for a Python that cannot build the package"
if PYTHON="$work/bare/bin/python" FERRY_REQUIRE_PYTHON=1 sh "$root/bindings/python/install.sh" "$work/prefix-bare" \
  >/dev/null; then
  fail "FERRY_REQUIRE_PYTHON=1 did not make the refusal an error"
fi

# 2.
out=$(PYTHON="$PYTHON" FERRY_LIBRARY="$libferry" sh "$root/bindings/python/install.sh" "$work/prefix")
echo "$out"
path=$(echo "$out" | sed -n 's/.*with PYTHONPATH=\([^ ]*\) it finds the package.*/\1/p')
[ -n "$path" ] || fail "no PYTHONPATH line for a prefix $PYTHON does not search: $out"
(cd "$work" && PYTHONPATH="$path" "$PYTHON" -c "import ferry, sys; assert ferry.__file__.startswith(sys.argv[1]); \
print('python_install: imported from', ferry.__file__)" "$work/prefix") || fail "PYTHONPATH=$path does not find it"

# 3.
rel_lib=$(cd "$root" && "$PYTHON" -c 'import os, sys; print(os.path.relpath(sys.argv[1]))' "$libferry")
rel_work=$(cd "$root" && "$PYTHON" -c 'import os, sys; print(os.path.relpath(sys.argv[1]))' "$work/relative")
(cd "$root" && sh bindings/python/tests/run_tests.sh "$rel_lib" "$rel_work" -k test_version) ||
  fail "run_tests.sh $rel_lib $rel_work (relative paths, from $root) failed"
echo "python_install: refusal, install with its PYTHONPATH line, and relative paths all work"
