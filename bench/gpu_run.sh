#!/bin/bash
# The run on a GPU machine the device tool lends (an NVIDIA H200 or H100, one GPU),
# from the repository root, carrying .gl (the Vulkan loader and the GL libraries
# NVIDIA's Vulkan driver needs, as Debian .deb files: libvulkan1 libegl1 libglvnd0
# libopengl0 libgl1 libglx0 libgles2; see docs/PERFORMANCE.md):
#   bash bench/gpu_run.sh [BASE]
# Builds ferry there, records the machine (GPU, driver, host CPU, cores, last-level
# cache, the host's copy rate), runs the tests with every GPU backend present
# required (Vulkan whenever the driver lists the GPU; when it does not, the run says
# why: ldd of the driver and the loader's own messages), then the benchmarks, most
# important first. Each phase has a time limit of its own and the whole run stays
# under DEADLINE seconds (default 540), so one call to the device tool (600 s at
# most) always returns what was measured; everything lands under $OUT as it is made,
# every phase's heading naming the machine. BASE, if given, is another source tree
# (the code before a change, with this tree's bench/ programs copied in): its CUDA
# benchmarks run in the same session, for before-and-after figures on one machine.
# PHASES (comma-separated; default all but sweep and base) picks: ctest, host,
# limit, queues, cuda, sweep, opencl, vulkan, cross, plot, base.
set -u
OUT=${OUT:-$PWD/out}
PHASES=${PHASES:-ctest,host,limit,queues,cuda,opencl,vulkan,cross,plot,base}
DEADLINE=${DEADLINE:-540}
BASE=${1:-}
START=$SECONDS
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
want() { [[ ",$PHASES," == *",$1,"* ]]; }
MACHINE="(machine not yet recorded)"
stamp() { echo "== $1 ($(date -u +%H:%M:%S), ${SECONDS}s) on $MACHINE"; }
# limited SECONDS CMD...: runs CMD for at most SECONDS, less where the run's deadline
# is nearer; says so when a phase is cut short.
limited() {
  local want_s=$1 left=$((DEADLINE - (SECONDS - START) - 5))
  shift
  if [ "$left" -lt 5 ]; then
    echo "SKIPPED (deadline): $*"
    return 124
  fi
  [ "$want_s" -gt "$left" ] && want_s=$left
  timeout -k 5 "$want_s" "$@"
  local rc=$?
  [ "$rc" -eq 124 ] && echo "TIMED OUT after ${want_s}s: $*"
  return $rc
}

# Drivers. The Vulkan loader and libglvnd are carried; NVIDIA's OpenCL library needs
# an ICD file.
for p in libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2; do
  ls .gl/"${p}"_*.deb >/dev/null 2>&1 || echo "NOTE: .gl has no ${p}_*.deb: NVIDIA's Vulkan driver may not load"
done
for f in .gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" / 2>/dev/null; done
ldconfig
mkdir -p /tmp/icd && echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd
icd_json=/usr/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd_json" ] || icd_json=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
egl_json=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json

echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -sr), $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
ls -l /dev/nvidia* 2>&1 | tr -s ' ' | cut -d' ' -f1,10 | tr '\n' ' '
echo
{
  echo "ICD json: $icd_json"
  cat "$icd_json" 2>&1
  lib=$(sed -n 's/.*"library_path": *"\([^"]*\)".*/\1/p' "$icd_json" 2>/dev/null)
  echo "ldd of ${lib:-libGLX_nvidia.so.0}:"
  ldd "$(ldconfig -p | awk -v l="${lib:-libGLX_nvidia.so.0}" '$1 == l {print $NF; exit}')" 2>&1 ||
    ldd "/usr/local/nvidia/lib64/${lib:-libGLX_nvidia.so.0}" 2>&1
} >"$OUT/vulkan_driver.txt"
grep -c "not found" "$OUT/vulkan_driver.txt" | sed 's/^/libraries not found by the Vulkan ICD: /'

stamp "build"
build() { # dir
  (cd "$1" && cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    limited 200 cmake --build build -j "$(nproc)" 2>&1 | grep -E "error|warning:")
}
build .

# The machine, once: what every figure below was measured on. The host's copy rate
# is ferry's own large copy on the native device (the copy threads, 256 MiB, cache-cold
# on hosts whose last-level cache is smaller) and memcpy on one thread.
{
  gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
  cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
  l3=$(lscpu | sed -n 's/^L3 cache: *//p' | head -n 1)
  mem=$(free -g | awk '/^Mem:/ {print $2 " GiB"}')
  copy=$(FERRY_BACKENDS=native limited 40 build/bench/bench_native 2>/dev/null |
    awk '/ferry_host_to_device 256 MiB vs memcpy/ {print $(NF-2) " GB/s on the copy threads, memcpy " $(NF-1) " GB/s"}')
  echo "GPU: ${gpu:-none found}"
  echo "host: ${cpu:-unknown CPU}, $(nproc) cores, L3 ${l3:-unknown}, ${mem:-unknown memory}"
  echo "host copy (256 MiB): ${copy:-not measured}"
} >"$OUT/machine.txt"
cat "$OUT/machine.txt"
MACHINE="$(sed -n 's/^GPU: \([^,]*\).*/\1/p' "$OUT/machine.txt"), $(nproc) cores, $(sed -n 's/^host copy (256 MiB): \([0-9.]* GB\/s\).*/host copy \1/p' "$OUT/machine.txt")"

# Vulkan: the driver as found; if it shows no NVIDIA device, the fallbacks the
# device README names (the ICD file and EGL vendor file by path).
VK_LOADER_DEBUG=error,warn limited 20 build/ferry info >"$OUT/ferry_info.txt" 2>&1
if ! grep -q "vulkan.*NVIDIA" "$OUT/ferry_info.txt"; then
  echo "no NVIDIA Vulkan device as found; retrying with VK_DRIVER_FILES and __EGL_VENDOR_LIBRARY_FILENAMES"
  export VK_DRIVER_FILES=$icd_json
  [ -f "$egl_json" ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$egl_json
  VK_LOADER_DEBUG=error,warn limited 20 build/ferry info >"$OUT/ferry_info.txt" 2>&1
fi
cat "$OUT/ferry_info.txt" | head -n 80
required=cuda,opencl,native,checked
if grep -q "vulkan.*NVIDIA" "$OUT/ferry_info.txt"; then
  required=$required,vulkan
  echo "NVIDIA Vulkan listed: vulkan required"
else
  echo "NVIDIA Vulkan NOT listed: vulkan not required. Why, as the driver and the loader say:"
  grep -E "not found|=>" "$OUT/vulkan_driver.txt" | head -n 20
  grep -i -E "vulkan|loader|icd" "$OUT/ferry_info.txt" | head -n 20
fi

if want ctest; then
  stamp "ctest, $required required"
  # The OCaml and Python suites and the Metal stand-in are not built there; valgrind
  # and the fuzz corpus are the development machine's.
  (cd build && FERRY_REQUIRE_BACKENDS=$required limited 200 ctest --output-on-failure -j 8 --timeout 120 \
    -E "ocaml|python|metal|valgrind|fuzz|make_run") >"$OUT/ctest.txt" 2>&1
  grep -E "tests passed|tests failed|\*\*\*Failed|Not Run|Timeout|SKIP" "$OUT/ctest.txt" | head -n 40
  grep -h -E "^(skip|SKIP)" "$OUT/ctest.txt" | sort | uniq -c | head -n 30
fi

if want host; then
  stamp "bench_native: large host copies against memcpy, by copy threads (default, 1, 4, 16)"
  for t in "" 1 4 16; do
    for i in 1 2 3; do
      echo "FERRY_COPY_THREADS=${t:-default} run $i"
      if [ -n "$t" ]; then
        FERRY_BACKENDS=native FERRY_COPY_THREADS=$t limited 30 build/bench/bench_native
      else
        FERRY_BACKENDS=native limited 30 build/bench/bench_native
      fi
    done
  done >"$OUT/bench_native.txt" 2>&1
  cat "$OUT/bench_native.txt"
fi

if want limit; then
  stamp "ferry bench: pageable against the host's limit, cache-warm and cold, on every GPU"
  limited 150 build/ferry bench --sizes 4M,16M,64M,1G --paths h2d,d2h,h2d-pinned,d2h-pinned --repeat 5 \
    --no-legend --json "$OUT/bench_limit.json" >"$OUT/bench_limit.txt" 2>&1
  cat "$OUT/bench_limit.txt"
fi

if want queues; then
  stamp "bench_queues on every device, 1 GiB"
  limited 90 build/bench/bench_queues --bytes $((1 << 30)) --repeat 5 >"$OUT/bench_queues.txt" 2>&1
  cat "$OUT/bench_queues.txt"
  stamp "bench_queues on every device, 64 MiB"
  limited 60 build/bench/bench_queues --bytes $((64 << 20)) --repeat 7 >"$OUT/bench_queues_64m.txt" 2>&1
  cat "$OUT/bench_queues_64m.txt"
  stamp "ferry bench --paths queues on every device (CUDA, NVIDIA OpenCL, NVIDIA Vulkan, PoCL)"
  limited 180 build/ferry bench --sizes 64,64M,1G --repeat 5 --paths queues --no-legend \
    >"$OUT/ferry_bench_queues.txt" 2>&1
  cat "$OUT/ferry_bench_queues.txt"
  stamp "bench_queues --fresh, 10 processes (first use on the CUDA device)"
  for i in 1 2 3 4 5 6 7 8 9 10; do limited 15 build/bench/bench_queues --fresh --device 0; done >"$OUT/bench_queues_fresh.txt" 2>&1
  cat "$OUT/bench_queues_fresh.txt"
fi

cuda_args=--targets
want sweep && cuda_args="$cuda_args --sweep"
if want cuda; then
  stamp "bench_cuda $cuda_args"
  limited 80 build/bench/bench_cuda $cuda_args --csv "$OUT/bench_cuda.csv"
fi
if want cross; then
  stamp "bench_cross"
  limited 60 build/bench/bench_cross
fi
if want vulkan; then
  stamp "bench_vulkan"
  limited 50 build/bench/bench_vulkan
fi
if want opencl; then
  stamp "bench_opencl (NVIDIA and PoCL)"
  limited 50 build/bench/bench_opencl
fi
if want plot; then
  stamp "ferry bench on the CUDA device (json, svg)"
  limited 70 build/ferry bench --backend cuda --json "$OUT/bench_gpu.json" --plot "$OUT/bench_gpu.svg" >"$OUT/ferry_bench.txt" 2>&1
  tail -n 60 "$OUT/ferry_bench.txt"
  stamp "ferry bench --quick on every device"
  limited 60 build/ferry bench --quick --json "$OUT/bench_gpu_all.json" >"$OUT/ferry_bench_all.txt" 2>&1
  tail -n 80 "$OUT/ferry_bench_all.txt"
fi
if want base && [ -n "$BASE" ] && [ -d "$BASE" ]; then
  stamp "BASE: build $BASE"
  build "$BASE"
  stamp "BASE: bench_cuda --targets"
  limited 80 "$BASE"/build/bench/bench_cuda --targets --csv "$OUT/bench_cuda_base.csv"
fi
stamp "done"
