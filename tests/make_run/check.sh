#!/bin/sh
# `make run` builds only what it runs (the ferry command, not the test suite), and
# then shows `ferry info` and a short table, naming where the full tables are.
# `make -n` lists its commands without running them.
# usage: check.sh <source dir> <build dir>
set -u
src=$1 build=$2
fail=0
commands=$(make -n -C "$src" run BUILD="$build" 2>&1) || { echo "FAIL make -n run: $commands"; exit 1; }
builds=$(printf '%s\n' "$commands" | grep -E 'cmake +--build')
[ -n "$builds" ] || { echo "FAIL make run builds nothing: $commands"; fail=1; }
printf '%s\n' "$builds" | grep -v -q -e '--target ferry_tool' &&
  { echo "FAIL make run builds more than the command: $builds"; fail=1; }
printf '%s\n' "$commands" | grep -q 'ferry info' || { echo "FAIL make run does not run ferry info"; fail=1; }
printf '%s\n' "$commands" | grep -E -q 'ferry bench .*--summary .*--tables [^ ]+' ||
  { echo "FAIL make run does not show the short table and keep the full one in a file: $commands"; fail=1; }
[ "$fail" -eq 0 ] && echo "make_run: builds only ferry_tool, then ferry info and ferry bench --summary --tables FILE"
exit "$fail"
