#!/bin/sh
# The OCaml binding's ctests (tests/CMakeLists.txt adds them).
#   ctest.sh test     <source dir> <build dir>   dune test, against this build's libferry
#   ctest.sh run      <source dir> <build dir>   the test program again (as built by `test`),
#                                                 under $FERRY_OCAML_RUNNER (valgrind ...) if set
#   ctest.sh install  <source dir> <build dir>   make install-files into a scratch prefix,
#                                                 then a program built with ocamlfind against it
# Each exits 77 (ctest: skipped) and says why where dune or ocamlfind is missing;
# with FERRY_REQUIRE_OCAML=1 (CI) that is a failure instead.
set -eu
mode=$1 src=$2 build=$3
# Run from `make test`: the jobserver of that make is not ours.
unset MAKEFLAGS MFLAGS MAKELEVEL
skip() {
  if [ "${FERRY_REQUIRE_OCAML:-}" = 1 ]; then
    echo "ocaml: FERRY_REQUIRE_OCAML=1, but $1" >&2
    exit 1
  fi
  echo "ocaml: skipped: $1"
  exit 77
}
for tool in ocamlfind dune; do
  command -v "$tool" >/dev/null 2>&1 || skip "$tool is not installed (Debian: apt-get install ocaml-nox ocaml-dune ocaml-findlib)"
done
root=$src/bindings/ocaml
dunebuild=$build/ocaml
# This build's libferry and the source tree's ferry.h (config/c_flags.sh).
export FERRY_INCLUDE_DIR="$src/include" FERRY_LIB_DIR="$build"

case $mode in
test)
  dune build --root "$root" --build-dir "$dunebuild" @install ./test/test_ferry.exe
  dune test --root "$root" --build-dir "$dunebuild" --force
  ;;
run)
  exe=$dunebuild/default/test/test_ferry.exe
  [ -x "$exe" ] || dune build --root "$root" --build-dir "$dunebuild" ./test/test_ferry.exe
  # shellcheck disable=SC2086 # the runner is a command line
  exec ${FERRY_OCAML_RUNNER:-} "$exe"
  ;;
install)
  work=$build/tests/ocaml-install-check
  rm -rf "$work"
  mkdir -p "$work"
  prefix=$work/prefix
  make -C "$src" --no-print-directory install-files BUILD="$build" PREFIX="$prefix" >"$work/install.log" 2>&1 || {
    cat "$work/install.log"
    exit 1
  }
  # Everything a user needs is there.
  for f in include/ferry.h lib/libferry.so lib/libferry.a lib/cmake/ferry/ferryConfig.cmake lib/pkgconfig/ferry.pc \
    bin/ferry lib/ferry/META lib/ferry/ferry.cmxa lib/ferry/ferry.cmi; do
    [ -e "$prefix/$f" ] || {
      echo "ocaml install: $prefix/$f is missing"
      exit 1
    }
  done
  # The findlib package has libferry's version.
  version=$(sed -n 's/^#define FERRY_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$src/include/ferry.h" | paste -sd.)
  grep -q "^version = \"$version\"" "$prefix/lib/ferry/META" || {
    echo "ocaml install: lib/ferry/META does not say version $version (bindings/ocaml/dune-project has the version)"
    exit 1
  }
  # The ten-line example of docs/OCAML.md, built the way the page says.
  cp "$root/example/example.ml" "$work/prog.ml"
  while IFS= read -r line; do
    grep -Fxq -- "$line" "$src/docs/OCAML.md" || {
      echo "ocaml install: docs/OCAML.md lacks the example's line: $line"
      exit 1
    }
  done <"$root/example/example.ml"
  (cd "$work" && OCAMLPATH="$prefix/lib" ocamlfind ocamlopt -package ferry -linkpkg prog.ml -o prog)
  # No LD_LIBRARY_PATH: the installed library's run path finds libferry.
  FERRY_BACKENDS=native "$work/prog"
  echo "ocaml install: OCAMLPATH=$prefix/lib ocamlfind ocamlopt -package ferry builds a program that runs"
  ;;
*)
  echo "usage: ctest.sh test|run|install <source dir> <build dir>" >&2
  exit 2
  ;;
esac
