#!/bin/bash
# libferry_mpi on a GPU machine: builds ferry (Release) with the machine's MPI and
# measures what docs/PERFORMANCE.md's MPI section records: ferry-mpi-bench bw, bibw
# and allreduce at 256 MiB and latency at 8 B, two ranks on the one GPU, each row
# beside MPI on malloc'd memory in the same run; pinned PCIe from `ferry bench`.
#
#   OUT=/some/folder bash bench/mpi_gpu_run.sh
#
# Needs mpicc and mpirun on PATH (Open MPI: OPAL_PREFIX, PATH and LD_LIBRARY_PATH
# where it was unpacked). NVIDIA's OpenCL is reached through a vendors folder of
# our own (the machine's /etc/OpenCL/vendors names only PoCL).
set -u
OUT=${OUT:-/tmp/ferry-mpi-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/mpi_run.log") 2>&1
B=${BUILD:-/tmp/ferry-mpi-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader

echo "== machine"
date -u
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv || true
nproc
which mpicc mpirun && mpirun --version | head -1

if [ -e /usr/local/nvidia/lib64/libnvidia-opencl.so.1 ]; then
  mkdir -p /tmp/ocl-vendors
  echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/tmp/ocl-vendors/nvidia.icd
  [ -e /etc/OpenCL/vendors/pocl.icd ] && cp /etc/OpenCL/vendors/pocl.icd /tmp/ocl-vendors/
  export OCL_ICD_VENDORS=/tmp/ocl-vendors
fi

echo "== build"
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 &&
  cmake --build "$B" -j"$(nproc)" >>"$OUT/cmake.log" 2>&1 || {
  tail -40 "$OUT/cmake.log"
  exit 1
}
ls "$B"/ferry-mpi-bench || exit 1

echo "== devices (FERRY_BACKENDS=cuda,opencl,native, as the bench runs below)"
export FERRY_BACKENDS=cuda,opencl,native
"$B/ferry" info
mpirun -n 2 -x FERRY_BACKENDS -x OCL_ICD_VENDORS "$B/ferry" info | grep -E "^ +[0-9]+ " | sort | uniq -c

echo "== pinned PCIe (ferry bench, CUDA, quick)"
FERRY_BACKENDS=cuda "$B/ferry" bench --backend cuda --quick 2>&1 | tail -25

run() { # name, args...
  local name=$1
  shift
  echo "== $name: ferry-mpi-bench $*"
  timeout 300 mpirun -n 2 -x FERRY_BACKENDS -x OCL_ICD_VENDORS -x FERRY_DEBUG -x FERRY_MPI_PIECE "$B/ferry-mpi-bench" "$@" \
    --json "$OUT/$name.json" || echo "($name ended with status $?)"
}
# 256 MiB: -i 50 leaves 10 timed iterations for bw and bibw and 5 for allreduce,
# -x 20 two warm-up ones (the staging blocks are made and registered there).
run cuda_big bw bibw allreduce -m 256M:256M -W 4 -i 50 -x 20 -r 5 -d 0
run cuda_lat latency -m 8:8 -r 5 -d 0
FERRY_DEBUG=mpi timeout 60 mpirun -n 2 -x FERRY_BACKENDS -x OCL_ICD_VENDORS -x FERRY_DEBUG "$B/ferry-mpi-bench" bw \
  -m 64M:64M -W 1 -i 5 -x 1 -r 1 -d 0 2>&1 | grep "ferry mpi" | sort | uniq -c | head
NATIVE=$(mpirun -n 1 -x FERRY_BACKENDS -x OCL_ICD_VENDORS "$B/ferry" info | awk '$2 == "native" {print $1; exit}')
OCL=$(mpirun -n 1 -x FERRY_BACKENDS -x OCL_ICD_VENDORS "$B/ferry" info | awk '$2 == "opencl" && / gpu / {print $1; exit}')
run native_big bw allreduce -m 256M:256M -W 4 -i 50 -x 20 -r 5 -d "$NATIVE"
if [ -n "$OCL" ]; then
  run opencl_big bw allreduce -m 256M:256M -W 4 -i 50 -x 20 -r 5 -d "$OCL"
else
  echo "== no NVIDIA OpenCL device listed"
fi
if [ -n "${SWEEP:-}" ]; then
  # Where the staged CUDA path's time goes: the piece each sender stages
  # (FERRY_MPI_PIECE), and the two ranks' contexts on the one GPU, which without
  # MPS take turns on it (a context switch per piece each way).
  for p in 1M 16M 64M; do
    FERRY_MPI_PIECE=$p run "cuda_piece_$p" bw -m 256M:256M -W 4 -i 50 -x 20 -r 3 -d 0
  done
  FERRY_DEBUG=engine timeout 60 mpirun -n 2 -x FERRY_BACKENDS -x OCL_ICD_VENDORS -x FERRY_DEBUG "$B/ferry-mpi-bench" \
    bw -m 256M:256M -W 4 -i 5 -x 1 -r 1 -d 0 2>&1 | grep -v "^#" | head -20
  if command -v nvidia-cuda-mps-control >/dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d; then
      echo "== MPS daemon started"
      run cuda_mps bw -m 256M:256M -W 4 -i 50 -x 20 -r 3 -d 0
      FERRY_MPI_PIECE=16M run cuda_mps_16M bw -m 256M:256M -W 4 -i 50 -x 20 -r 3 -d 0
      run cuda_mps_lat latency -m 8:8 -r 3 -d 0
      echo quit | nvidia-cuda-mps-control
      cat "$CUDA_MPS_LOG_DIRECTORY"/control.log 2>/dev/null | tail -5
    else
      echo "== MPS daemon did not start"
    fi
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  else
    echo "== no nvidia-cuda-mps-control"
  fi
fi
echo "== done"
