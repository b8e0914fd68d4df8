#!/bin/sh
# The README's C example must compile against the built library and run.
# usage: check.sh <source dir> <build dir> <scratch dir>
set -eu
src=$1 build=$2 work=$3
mkdir -p "$work"
sed -n '/^```c$/,/^```$/p' "$src/README.md" | sed '1d;$d' > "$work/readme_example.c"
[ -s "$work/readme_example.c" ] || { echo "no C example found in README.md"; exit 1; }
cc -std=c11 -Wall -Wextra -Werror -I"$src/include" "$work/readme_example.c" "$build/libferry.a" -lpthread -ldl \
  -o "$work/readme_example"
FERRY_BACKENDS=native "$work/readme_example"
echo "readme: the example compiles and runs"
