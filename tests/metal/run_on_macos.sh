#!/bin/sh
# The metal backend on a Mac's own Metal: for a person with a Mac, since CI has
# none (it runs the backend on tests/fake_metal). From the repository root:
#
#   sh tests/metal/run_on_macos.sh            # build in build-macos, run everything
#   BUILD=dir sh tests/metal/run_on_macos.sh  # another build folder
#
# It needs the Xcode command-line tools (clang) and cmake. In order:
#  1. builds ferry with the system compiler (warnings printed, not fatal: the
#     run is about Metal);
#  2. compares every method the backend sends (metal_objc.h) with the runtime's
#     own type encodings (method_getTypeEncoding on the class of a real object)
#     and prints any mismatch;
#  3. runs the conformance suite, the cross-device cases and the backend's own
#     test on the Mac's Metal devices, under Metal's API validation
#     (MTL_DEBUG_LAYER=1: misuse stops the program) and the Objective-C runtime's
#     checks for autoreleases with no pool and messages to released objects;
#  4. checks that nothing leaks (leaks --atExit) over one conformance run;
#  5. runs every ctest (the fake-Metal ones included, the Linux-only ones skip);
#  6. prints ferry bench's Metal rows.
# Send the whole output (and `sw_vers`, `sysctl -n machdep.cpu.brand_string`) to
# the maintainers; docs/backends/metal.md says what this run would verify.
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-macos}
JOBS=$(sysctl -n hw.ncpu 2>/dev/null || echo 4)
fail=0

echo "== the machine"
sw_vers 2>/dev/null || true
uname -m
sysctl -n machdep.cpu.brand_string 2>/dev/null || true

echo "== 1. build (system compiler)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=cc -DFERRY_WERROR=OFF
cmake --build "$BUILD" -j "$JOBS"
T="$BUILD/tests"
M="$BUILD/tests/fake_metal"

# The backend is required from here on: a Mac without a usable Metal device fails.
export FERRY_REQUIRE_BACKENDS=metal
unset FERRY_OBJC_LIBRARY FERRY_METAL_LIBRARY FAKE_METAL_PAGE || true

echo "== 2. the methods ferry sends, against the runtime's type encodings"
"$M/metal_selectors" --list
"$M/metal_selectors" || fail=1

echo "== 3. conformance, cross-device cases and the backend's test, under validation"
export MTL_DEBUG_LAYER=1 OBJC_DEBUG_MISSING_POOLS=YES NSZombieEnabled=YES
"$T/ferry_conformance" --backends || fail=1
"$T/ferry_conformance" --backend metal || fail=1
"$T/ferry_conformance" --cross || fail=1
"$M/test_metal_backend" || fail=1
unset MTL_DEBUG_LAYER OBJC_DEBUG_MISSING_POOLS NSZombieEnabled

echo "== 4. leaks over one conformance run"
if command -v leaks >/dev/null 2>&1; then
  FERRY_BACKENDS=metal leaks --atExit -- "$T/ferry_conformance" --backend metal || fail=1
else
  echo "(leaks is not installed: skipped)"
fi

echo "== 5. every ctest"
(cd "$BUILD" && ctest --output-on-failure -j "$JOBS") || fail=1

echo "== 6. ferry bench on the Metal devices"
FERRY_BACKENDS=metal "$BUILD/ferry" bench --quick || fail=1

if [ "$fail" -ne 0 ]; then
  echo "== run_on_macos.sh: FAILED (see above)"
  exit 1
fi
echo "== run_on_macos.sh: everything passed"
