#!/bin/bash
# The run on the NVIDIA H200 machine (the device tool, kind nvidia-h200), from the
# repository root, carrying .gl (the Vulkan loader .deb, see docs/PERFORMANCE.md):
#   bash bench/h200_run.sh
# Builds ferry there, runs every test with the GPU backends required, then the
# benchmarks, most important first; everything lands under $OUT as it is made.
set -u
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1

# Drivers: the Vulkan loader is carried; NVIDIA's OpenCL library needs an ICD file.
for f in .gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" / 2>/dev/null; done
ldconfig
mkdir -p /tmp/icd && echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd
[ -f /usr/share/vulkan/icd.d/nvidia_icd.json ] || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json

echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -sr), $(nproc) cores, git $(git describe --always --dirty 2>/dev/null) (where the device's copy of .git lags the tree, this says dirty)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build build -j "$(nproc)" 2>&1 | grep -E "error|warning:"
build/ferry info

echo "== ctest, GPU backends required ($(date -u +%H:%M:%S))"
(cd build && FERRY_REQUIRE_BACKENDS=cuda,opencl,vulkan,native,checked ctest --output-on-failure -j 6 --timeout 150) \
  >"$OUT/ctest.txt" 2>&1
grep -E "Test +#|tests passed|tests failed" "$OUT/ctest.txt"

echo "== bench_cuda ($(date -u +%H:%M:%S))"
build/bench/bench_cuda --csv "$OUT/bench_cuda.csv"
echo "== bench_vulkan ($(date -u +%H:%M:%S))"
build/bench/bench_vulkan
cuda=$(build/ferry info --json | python3 -c 'import json,sys; print(",".join(str(d["index"]) for d in json.load(sys.stdin)["devices"] if d["backend"] == "cuda"))')
echo "== ferry bench --device $cuda ($(date -u +%H:%M:%S))"
build/ferry bench --device "$cuda" --json "$OUT/bench_h200.json" --plot "$OUT/bench_h200.svg"
echo "== done $(date -u +%H:%M:%S)"
