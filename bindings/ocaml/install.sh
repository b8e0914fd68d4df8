#!/bin/sh
# make install's OCaml step: builds the library `ferry` against the libferry and
# ferry.h that cmake --install put under <prefix> (so that the installed
# library's run path names the installed libferry), then installs it there as
# the findlib package `ferry` (<prefix>/lib/ferry: OCAMLPATH=<prefix>/lib).
# Where ocamlfind or dune is missing, says so and installs nothing.
# usage: install.sh <CMake build dir> <prefix>
set -eu
build=$1 prefix=$2
here=$(cd "$(dirname "$0")" && pwd)
for tool in ocamlfind dune; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "ferry: $tool not found, so the OCaml library is not installed"
    exit 0
  fi
done
build=$(cd "$build" && pwd)
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
# The folders cmake --install used, from the build's cache.
cached() { sed -n "s/^$1:PATH=//p" "$build/CMakeCache.txt"; }
libdir=$(cached CMAKE_INSTALL_LIBDIR)
includedir=$(cached CMAKE_INSTALL_INCLUDEDIR)
case $libdir in /*) ;; *) libdir=$prefix/${libdir:-lib} ;; esac
case $includedir in /*) ;; *) includedir=$prefix/${includedir:-include} ;; esac
export FERRY_INCLUDE_DIR="$includedir" FERRY_LIB_DIR="$libdir"
dune build --root "$here" --build-dir "$build/ocaml-install" --profile release --only-packages ferry @install
dune install --root "$here" --build-dir "$build/ocaml-install" --prefix "$prefix" ferry
