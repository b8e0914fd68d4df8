#!/bin/sh
# The raw baselines (libferry_raw.a, behind `ferry bench`) and the benchmark
# programs are ferry's users, not part of it: of the library's internals they
# call only the core's loader (ferry__library_*, src/core/library.h); everything
# else goes through ferry.h, and driver calls through tables of their own.
# usage: internals_check.sh NM FILE...   (archives and object files)
set -eu
nm=$1
shift
found=$("$nm" -A -u "$@" | awk '$NF ~ /^ferry__/ && $NF !~ /^ferry__library_/ { print $1 " " $NF }')
if [ -n "$found" ]; then
  echo "FAIL: these objects call ferry's internals; use ferry.h, or a driver table of their own (raw/raw.h says how):"
  printf '%s\n' "$found" | sed 's/^/  /'
  exit 1
fi
echo "ok: $# files call nothing of ferry's internals but the loader"
