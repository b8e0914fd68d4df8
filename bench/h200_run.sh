#!/bin/bash
# The run on the NVIDIA H200 machine (the device tool, kind nvidia-h200), from the
# repository root, carrying .gl (the Vulkan loader .deb, see docs/PERFORMANCE.md):
#   bash bench/h200_run.sh [BASE]
# Builds ferry there, runs every test with the GPU backends required, then the
# benchmarks, most important first; everything lands under $OUT as it is made.
# BASE, if given, is another source tree (the code before a change, with this
# tree's bench/ programs copied in): its benchmarks run in the same session, for
# before-and-after figures on one machine. PHASES (comma-separated; default all)
# picks: ctest, cuda, table, sweep, opencl, vulkan, cross, plot, base.
set -u
OUT=${OUT:-$PWD/out}
PHASES=${PHASES:-ctest,cuda,opencl,vulkan,cross,table,base}
BASE=${1:-}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
want() { [[ ",$PHASES," == *",$1,"* ]]; }
stamp() { echo "== $1 ($(date -u +%H:%M:%S))"; }

# Drivers: the Vulkan loader is carried; NVIDIA's OpenCL library needs an ICD file.
for f in .gl/*.deb ../../.gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" / 2>/dev/null; done
ldconfig
mkdir -p /tmp/icd && echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd
[ -f /usr/share/vulkan/icd.d/nvidia_icd.json ] || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json

echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -sr), $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# Without /dev/nvidia-modeset NVIDIA's Vulkan driver reports no device: say so, and do not require it.
required=cuda,opencl,native,checked
if [ -e /dev/nvidia-modeset ]; then
  required=$required,vulkan
  echo "/dev/nvidia-modeset present: vulkan required"
else
  echo "/dev/nvidia-modeset ABSENT on this lease: NVIDIA Vulkan shows no device; vulkan not required"
fi

build() { # dir
  (cd "$1" && cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build build -j "$(nproc)" 2>&1 | grep -E "error|warning:")
}
stamp "build"
build .
build/ferry info

if want ctest; then
  stamp "ctest, $required required"
  (cd build && FERRY_REQUIRE_BACKENDS=$required ctest --output-on-failure -j 8 --timeout 200) >"$OUT/ctest.txt" 2>&1
  grep -E "tests passed|tests failed|\*\*\*Failed|Not Run|Timeout" "$OUT/ctest.txt"
fi

cuda_args=--targets
want table && cuda_args=
want sweep && cuda_args="$cuda_args --sweep"
if want cuda; then
  stamp "bench_cuda $cuda_args (FERRY_DEBUG=engine)"
  FERRY_DEBUG=engine build/bench/bench_cuda $cuda_args --csv "$OUT/bench_cuda.csv"
fi
if want opencl; then
  stamp "bench_opencl (NVIDIA and PoCL, FERRY_DEBUG=engine)"
  FERRY_DEBUG=engine build/bench/bench_opencl
fi
if want vulkan; then
  stamp "bench_vulkan"
  build/bench/bench_vulkan
fi
if want cross; then
  stamp "bench_cross"
  build/bench/bench_cross
fi
if want plot; then
  stamp "ferry bench on the CUDA device (docs/bench-h200.png)"
  timeout 150 build/ferry bench --backend cuda --json "$OUT/bench_h200.json" --plot "$OUT/bench_h200.svg" >"$OUT/ferry_bench.txt" 2>&1
  tail -n 40 "$OUT/ferry_bench.txt"
fi
if want base && [ -n "$BASE" ] && [ -d "$BASE" ]; then
  stamp "BASE: build $BASE"
  build "$BASE"
  stamp "BASE: bench_cuda --targets"
  "$BASE"/build/bench/bench_cuda --targets --csv "$OUT/bench_cuda_base.csv"
  stamp "BASE: bench_opencl"
  "$BASE"/build/bench/bench_opencl
  stamp "BASE: bench_cross"
  "$BASE"/build/bench/bench_cross
fi
stamp "done"
