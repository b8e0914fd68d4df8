#!/bin/sh
# Writes the C flags of the stubs (c_flags.sexp) and the link flags of libferry
# (c_library_flags.sexp) for dune.
# usage: c_flags.sh <include dir> <lib dir>   (the values of FERRY_INCLUDE_DIR and
# FERRY_LIB_DIR; empty: ask pkg-config for an installed ferry)
# The ctests and `make install` set both variables: the ctests to the source
# tree's include/ and the CMake build tree, `make install` to the prefix, so that
# the installed library's run path names the installed libferry.
set -eu
inc=$1 lib=$2
if [ -z "$inc" ] || [ -z "$lib" ]; then
  if pkg-config --exists ferry 2>/dev/null; then
    [ -n "$inc" ] || inc=$(pkg-config --variable=includedir ferry)
    [ -n "$lib" ] || lib=$(pkg-config --variable=libdir ferry)
  else
    echo "ferry's OCaml binding: set FERRY_INCLUDE_DIR (the folder of ferry.h) and FERRY_LIB_DIR" >&2
    echo "(the folder of libferry.so), or install ferry where pkg-config finds it" >&2
    exit 1
  fi
fi
if [ ! -f "$inc/ferry.h" ]; then
  echo "ferry's OCaml binding: no ferry.h in FERRY_INCLUDE_DIR=$inc" >&2
  exit 1
fi
# Quoted, so that folders with spaces survive the s-expression.
printf '("-I%s")\n' "$inc" > c_flags.sexp
printf '("-L%s" -lferry "-Wl,-rpath,%s")\n' "$lib" "$lib" > c_library_flags.sexp
