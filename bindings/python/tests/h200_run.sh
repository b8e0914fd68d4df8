#!/bin/bash
# DLPack and the Python package on a CUDA GPU (the H200 device machine), from a
# copy of the repository: the C DLPack tests with the GPU required, the Python
# suite (when the interpreter has its headers), the PyTorch / CuPy / JAX
# exchange, and the DLPack benchmark. Everything lands under $OUT as it is made.
#   usage: bash bindings/python/tests/h200_run.sh [VULKAN_LOADER_DEB_DIR]
set -u
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
gl=${1:-.gl}
for f in "$gl"/*.deb; do [ -f "$f" ] && dpkg -x "$f" / 2>/dev/null; done
ldconfig
mkdir -p /tmp/icd && echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd
[ -f /usr/share/vulkan/icd.d/nvidia_icd.json ] || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 - <<'PY'
import os, sys, sysconfig
inc = sysconfig.get_paths()["include"]
print("python", sys.version.split()[0], sys.executable, "Python.h:", os.path.exists(os.path.join(inc, "Python.h")), inc)
for m in ("numpy", "torch", "cupy", "jax", "pytest", "setuptools"):
    try:
        print(" ", m, __import__(m).__version__)
    except Exception as e:
        print(" ", m, "missing:", e)
PY
# Python's headers, when the interpreter's own are missing: carried in
# .pyinc/python3.X (headers of the same minor version), put where it looks.
python3 - <<'PY'
import os, shutil, sys, sysconfig
inc = sysconfig.get_paths()["include"]
carried = os.path.join(".pyinc", "python%d.%d" % sys.version_info[:2])
if not os.path.exists(os.path.join(inc, "Python.h")) and os.path.isdir(carried):
    shutil.copytree(carried, inc, dirs_exist_ok=True)
    print("Python.h: the carried", carried, "copied to", inc)
PY
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
  cmake --build build -j "$(nproc)" --target ferry_static test_dlpack test_dlpack_cuda test_cuda_kernel bench_dlpack 2>&1 |
  grep -E "error|warning:"
echo "== test_dlpack_cuda ($(date -u +%H:%M:%S))"
FERRY_REQUIRE_BACKENDS=cuda build/tests/test_dlpack_cuda
echo "== test_dlpack, every device ($(date -u +%H:%M:%S))"
FERRY_REQUIRE_BACKENDS=cuda build/tests/test_dlpack
echo "== test_cuda_kernel ($(date -u +%H:%M:%S))"
FERRY_REQUIRE_BACKENDS=cuda build/tests/test_cuda_kernel | tail -4
echo "== bench_dlpack ($(date -u +%H:%M:%S))"
build/bench/bench_dlpack
echo "== python suite ($(date -u +%H:%M:%S))"
FERRY_REQUIRE_PYTHON=1 FERRY_PYTHON=python3 sh bindings/python/tests/run_tests.sh "$PWD/build/libferry.a" /tmp/ferry-py 2>&1 | tail -15
echo "== PyTorch, CuPy, JAX ($(date -u +%H:%M:%S))"
[ -d /tmp/ferry-py/lib ] && PYTHONPATH=/tmp/ferry-py/lib python3 bindings/python/tests/gpu_interop.py
echo "== bench_python, three runs ($(date -u +%H:%M:%S))"
for run in 1 2 3; do
  [ -d /tmp/ferry-py/lib ] && PYTHONPATH=/tmp/ferry-py/lib python3 bindings/python/bench/bench_python.py \
    --json "$OUT/bench_python_$run.json"
done
echo "== done $(date -u +%H:%M:%S)"
