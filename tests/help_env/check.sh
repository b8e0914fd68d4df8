#!/bin/sh
# 'ferry help env' lists every environment variable the project reads: the library's
# settings (test_bench_cli checks those against ferry_option_get), and every FERRY_*
# variable that the sources, tests and bindings read: getenv("...") in C,
# Sys.getenv(_opt) "..." in OCaml, os.environ in Python, ${NAME:-...} in shell.
# usage: check.sh <source dir> <the ferry program>
set -u
src=$1 tool=$2
help=$("$tool" help env) || { echo "FAIL ferry help env: exit $?"; exit 1; }
names=$(cd "$src" && {
  grep -rhoE 'getenv(_opt)?[ (]+"FERRY_[A-Z0-9_]+"|environ(\.get)?[[(]"FERRY_[A-Z0-9_]+"' src tests tools bindings bench
  grep -rhoE '\$\{FERRY_[A-Z0-9_]+:?[-=]' src tests tools bindings bench .ci Makefile 2>/dev/null
} | grep -oE 'FERRY_[A-Z0-9_]+' | sort -u)
[ -n "$names" ] || { echo "FAIL found no variable in the sources: is $src the source folder?"; exit 1; }
fail=0 count=0
for n in $names; do
  count=$((count + 1))
  printf '%s\n' "$help" | grep -q -E "^  $n(=| |\$)" || { echo "FAIL 'ferry help env' does not list $n"; fail=1; }
done
[ "$fail" -eq 0 ] && echo "help_env: 'ferry help env' lists all $count FERRY_* variables the sources read"
exit "$fail"
