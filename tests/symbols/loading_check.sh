#!/bin/sh
# Drivers are loaded in one place: src/core/library.c (ferry__library_open), which
# knows when a program cannot load libraries (a static one) and says why. No other
# object file of libferry.a may call dlopen, dlsym, dlclose or dlerror.
# usage: loading_check.sh NM libferry.a
set -eu
nm=$1 lib=$2
offenders=$("$nm" -A -u "$lib" | awk '$NF ~ /^(dlopen|dlsym|dlclose|dlerror|dlmopen|dlvsym)(@.*)?$/ { print $1 $NF }' |
  grep -v '^[^:]*:library\.c\.o:' || true)
if [ -n "$offenders" ]; then
  echo "FAIL: these objects load libraries themselves; use ferry__library_open and friends (src/core/library.h):"
  echo "$offenders" | sed 's/^/  /'
  exit 1
fi
users=$("$nm" -A -u "$lib" | awk '$NF ~ /^dlopen(@.*)?$/' | wc -l)
[ "$users" -ge 1 ] || { echo "FAIL: nothing in $lib calls dlopen: is library.c gone?"; exit 1; }
echo "ok: only library.c.o calls dlopen and its kin"
