#!/bin/sh
# Drivers are loaded in one place: src/core/library.c (ferry__library_open), which
# knows when a program cannot load libraries (a static one) and says why. No other
# object file may call dlopen, dlsym, dlclose or dlerror: not in libferry.a, and
# not in the other archives given, such as libferry_raw.a (the raw baselines of
# `ferry bench` and bench/, whose own driver tables go through ferry__library_open too).
# usage: loading_check.sh NM libferry.a [other.a ...]
set -eu
nm=$1
shift
offenders="" users=0
for lib in "$@"; do
  found=$("$nm" -A -u "$lib" | awk '$NF ~ /^(dlopen|dlsym|dlclose|dlerror|dlmopen|dlvsym)(@.*)?$/ { print $1 $NF }' |
    grep -v '^[^:]*:library\.c\.o:' || true)
  [ -z "$found" ] || offenders="$offenders$found
"
  users=$((users + $("$nm" -A -u "$lib" | awk '$NF ~ /^dlopen(@.*)?$/' | wc -l)))
done
if [ -n "$offenders" ]; then
  echo "FAIL: these objects load libraries themselves; use ferry__library_open and friends (src/core/library.h):"
  printf '%s' "$offenders" | sed 's/^/  /'
  exit 1
fi
[ "$users" -ge 1 ] || { echo "FAIL: nothing in $* calls dlopen: is library.c gone?"; exit 1; }
echo "ok: only library.c.o calls dlopen and its kin (in $# archives)"
