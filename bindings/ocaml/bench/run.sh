#!/bin/sh
# Builds the OCaml benchmark against a CMake build's libferry and runs it.
# usage: bindings/ocaml/bench/run.sh <CMake build dir> [bench_ferry.exe options]
set -eu
build=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")/.." && pwd)
export FERRY_INCLUDE_DIR="$here/../../include" FERRY_LIB_DIR="$build"
dune build --root "$here" --build-dir "$build/ocaml-bench" --profile release ./bench/bench_ferry.exe
exec "$build/ocaml-bench/default/bench/bench_ferry.exe" "$@"
