#!/bin/sh
# include/ferry.h compiles as C++ (C++11, every warning an error), and so does the
# README's example: each is compiled with g++ (and clang++ where installed),
# linked against libferry.a, and run. Skipped, by name, without g++.
# usage: check.sh <source dir> <build dir> <scratch dir>
set -eu
src=$1 build=$2 work=$3
if ! command -v g++ >/dev/null 2>&1; then
  echo "SKIP cxx_header: no g++ on this machine (the C++ compiler this test uses)"
  exit 77
fi
mkdir -p "$work"
awk '/^```c$/ { n++; next } /^```$/ { if (n == 1) exit } n == 1' "$src/README.md" > "$work/readme_example.cpp"
[ -s "$work/readme_example.cpp" ] || { echo "no C example found in README.md"; exit 1; }
FERRY_BACKENDS=native
export FERRY_BACKENDS
for cxx in g++ clang++; do
  command -v "$cxx" >/dev/null 2>&1 || { echo "($cxx not installed: not tried)"; continue; }
  for prog in "$src/tests/cxx/header.cpp" "$work/readme_example.cpp"; do
    name=$(basename "$prog" .cpp)
    "$cxx" -std=c++11 -Wall -Wextra -Wpedantic -Werror -I"$src/include" "$prog" "$build/libferry.a" \
      -lpthread -ldl -o "$work/$name.$cxx"
    "$work/$name.$cxx"
  done
  echo "cxx: ferry.h and the README example build as C++11 with $cxx -Wall -Wextra -Wpedantic -Werror, and run"
done
