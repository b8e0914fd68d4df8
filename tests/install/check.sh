#!/bin/sh
# Installs the build into a fresh prefix and builds a program against it three
# ways: CMake's find_package (shared and static) and pkg-config.
# usage: check.sh <build dir> <source dir> <scratch dir>
set -eu
build=$1 src=$2 work=$3
rm -rf "$work"
prefix=$work/prefix
FERRY_BACKENDS=native; export FERRY_BACKENDS
cmake --install "$build" --prefix "$prefix" >/dev/null
[ -f "$prefix/share/man/man1/ferry.1" ] || { echo "install: no share/man/man1/ferry.1 (the ferry command's manual)"; exit 1; }
# The documentation the command and its manual name, where the command says it is.
for doc in BENCH.md JSON.md README.md API.md backends/cuda.md bench-plot.png; do
  [ -s "$prefix/share/doc/ferry/$doc" ] || { echo "install: no share/doc/ferry/$doc"; exit 1; }
done
real=$(cd "$prefix" && pwd -P)
for cmd in bench info; do
  "$prefix/bin/ferry" "$cmd" --help | grep -q -F "$real/share/doc/ferry/JSON.md" ||
    { echo "install: the installed 'ferry $cmd --help' does not name $real/share/doc/ferry/JSON.md"; exit 1; }
done
"$prefix/bin/ferry" bench --help | grep -q -F "$real/share/doc/ferry/BENCH.md" ||
  { echo "install: the installed 'ferry bench --help' does not name $real/share/doc/ferry/BENCH.md"; exit 1; }
grep -q 'share/doc/ferry' "$prefix/share/man/man1/ferry.1" || { echo "install: the manual does not name share/doc/ferry"; exit 1; }
# As a user would, with nothing but CMAKE_PREFIX_PATH: the shared program finds
# libferry.so through the run-time path CMake gives programs of its build tree.
cmake -S "$src/tests/install" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/consumer_shared"
"$work/consumer/consumer_static"
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -n 1)
flags=$(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs ferry)
# The licence: its text, and its SPDX identifier in every installed file ferry writes.
[ -s "$prefix/share/doc/ferry/LICENSE" ] || { echo "install: no share/doc/ferry/LICENSE"; exit 1; }
for f in "$prefix/include/ferry.h" "$libdir/ferry.pc" "$(dirname "$libdir")/cmake/ferry/ferryConfig.cmake"; do
  grep -q "SPDX-License-Identifier: Apache-2.0" "$f" || { echo "install: $f lacks its SPDX line"; exit 1; }
done
PKG_CONFIG_PATH="$libdir" pkg-config --print-provides ferry >/dev/null
# The README's way: PKG_CONFIG_PATH, then `pkg-config --cflags --libs ferry`, and the
# program runs from a prefix outside the loader's folders with no LD_LIBRARY_PATH
# (ferry.pc's Libs carry the run-time path).
cc -std=c11 "$src/tests/install/consumer.c" $flags -o "$work/consumer_pc"
case "${LD_LIBRARY_PATH:-}" in *"$prefix"*) echo "install: LD_LIBRARY_PATH already names $prefix"; exit 1 ;; esac
"$work/consumer_pc" || { echo "install: a program built with pkg-config --libs ferry ($flags) does not run"; exit 1; }
# libferry_mpi, where it was built: ferry::mpi and pkg-config ferry-mpi (with MPI's own flags).
if [ -f "$prefix/include/ferry_mpi.h" ]; then
  [ -x "$work/consumer/consumer_mpi" ] || { echo "install: find_package(ferry) gave no ferry::mpi"; exit 1; }
  mpiflags=$(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs ferry-mpi)
  cc -std=c11 "$src/tests/install/consumer_mpi.c" $mpiflags -o "$work/consumer_mpi_pc" ||
    { echo "install: a program does not build with pkg-config --cflags --libs ferry-mpi ($mpiflags)"; exit 1; }
  echo "install: ferry::mpi and pkg-config ferry-mpi build a program"
fi
echo "install: find_package(ferry) and pkg-config ferry both work, and their programs run without LD_LIBRARY_PATH"
