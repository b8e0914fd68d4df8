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
cmake -S "$src/tests/install" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
LD_LIBRARY_PATH="$prefix/lib:$prefix/lib64:${LD_LIBRARY_PATH:-}" "$work/consumer/consumer_shared"
"$work/consumer/consumer_static"
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -n 1)
flags=$(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs ferry)
# The licence: its text, and its SPDX identifier in every installed file ferry writes.
[ -s "$prefix/share/doc/ferry/LICENSE" ] || { echo "install: no share/doc/ferry/LICENSE"; exit 1; }
for f in "$prefix/include/ferry.h" "$libdir/ferry.pc" "$(dirname "$libdir")/cmake/ferry/ferryConfig.cmake"; do
  grep -q "SPDX-License-Identifier: Apache-2.0" "$f" || { echo "install: $f lacks its SPDX line"; exit 1; }
done
PKG_CONFIG_PATH="$libdir" pkg-config --print-provides ferry >/dev/null
cc -std=c11 "$src/tests/install/consumer.c" $flags -o "$work/consumer_pc"
LD_LIBRARY_PATH="$prefix/lib:$prefix/lib64:${LD_LIBRARY_PATH:-}" "$work/consumer_pc"
echo "install: find_package(ferry) and pkg-config ferry both work"
