#!/bin/sh
# The README's first C example (the whole program; later ones are fragments) and docs/API.md's first (the queue
# example) must compile against the built library and run.
# usage: check.sh <source dir> <build dir> <scratch dir>
set -eu
src=$1 build=$2 work=$3
mkdir -p "$work"
awk '/^```c$/ { n++; next } /^```$/ { if (n == 1) exit } n == 1' "$src/README.md" > "$work/readme_example.c"
[ -s "$work/readme_example.c" ] || { echo "no C example found in README.md"; exit 1; }
cc -std=c11 -Wall -Wextra -Werror -I"$src/include" "$work/readme_example.c" "$build/libferry.a" -lpthread -ldl \
  -o "$work/readme_example"
FERRY_BACKENDS=native "$work/readme_example"
# docs/API.md's queue example, likewise.
awk '/^```c$/ { n++; next } /^```$/ { if (n == 1) exit } n == 1' "$src/docs/API.md" > "$work/queues_example.c"
[ -s "$work/queues_example.c" ] || { echo "no C example found in docs/API.md"; exit 1; }
cc -std=c11 -Wall -Wextra -Werror -I"$src/include" "$work/queues_example.c" "$build/libferry.a" -lpthread -ldl \
  -o "$work/queues_example"
FERRY_BACKENDS=native "$work/queues_example" | grep -q "read back 1, then copied 7" ||
  { echo "docs/API.md's queue example did not print what it should"; exit 1; }
echo "readme: the examples compile and run"
