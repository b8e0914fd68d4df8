#!/bin/bash
# The run on the NVIDIA H200 machine (the device tool, kind nvidia-h200): builds
# ferry there, runs every test with the GPU backends required, then the
# benchmarks. Results go under $OUT (at most 8 files come back).
#
#   device run, carry [".gl"] (the Vulkan loader, see docs/PERFORMANCE.md):
#     bash bench/h200_run.sh [tests|bench|all]
set -u
what=${1:-all}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1

# Drivers: the Vulkan loader is carried, NVIDIA's OpenCL library needs an ICD file.
for f in .gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
ldconfig
mkdir -p /tmp/icd && echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd
[ -f /usr/share/vulkan/icd.d/nvidia_icd.json ] || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json

echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -sr), $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
if [ ! -x build/ferry ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build build -j "$(nproc)" 2>&1 | grep -E "error|warning" 
fi
build/ferry info

if [ "$what" = tests ] || [ "$what" = all ]; then
  echo "== ctest, GPU backends required"
  (cd build && FERRY_REQUIRE_BACKENDS=cuda,opencl,vulkan,native,checked ctest --output-on-failure -j 4 --timeout 300) \
    >"$OUT/ctest.txt" 2>&1
  grep -E "tests passed|tests failed|Failed|\(Skipped\)" "$OUT/ctest.txt"
fi

if [ "$what" = bench ] || [ "$what" = all ]; then
  echo "== bench_cuda"
  build/bench/bench_cuda --csv "$OUT/bench_cuda.csv"
  echo "== bench_vulkan"
  build/bench/bench_vulkan
  echo "== bench_opencl"
  FERRY_BACKENDS=opencl build/bench/bench_opencl
  gpus=$(build/ferry info --json | python3 -c 'import json,sys; print(",".join(str(d["index"]) for d in json.load(sys.stdin)["devices"] if not d["is_cpu"]))')
  echo "== ferry bench --device $gpus"
  build/ferry bench --device "$gpus" --json "$OUT/bench.json" --plot "$OUT/bench.svg"
fi
echo "== done $(date -u +%H:%M:%S)"
