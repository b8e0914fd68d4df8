#!/bin/sh
# The ctest mpi.cuda_fake_aware.np2: test_mpi --gpu-only on two fake CUDA GPUs
# with FERRY_MPI_CUDA_AWARE=1, so that libferry_mpi hands the CUDA buffers'
# device memory to MPI (the fake's device memory is host memory, which MPI can
# read as a CUDA-aware MPI reads a GPU's). Every check of test_mpi must pass, and
# FERRY_DEBUG=mpi must show that the path was taken.
#   usage: cuda_aware.sh MPIEXEC PROGRAM
set -u
here=$(dirname "$0")
log=${TMPDIR:-/tmp}/ferry-mpi-cuda-aware.$$.log
FERRY_MPI_CUDA_AWARE=1 FERRY_DEBUG=mpi sh "$here/run.sh" "$1" 2 "$2" --gpu-only >"$log" 2>&1
rc=$?
grep -v "^ferry mpi: " "$log"
paths=$(grep -c "(cuda buffer): its device memory, handed to a CUDA-aware MPI" "$log")
rm -f "$log"
if [ "$rc" -ne 0 ]; then
  echo "FAIL mpi.cuda_fake_aware: test_mpi failed (status $rc)"
  exit 1
fi
if [ "$paths" -eq 0 ]; then
  echo "FAIL mpi.cuda_fake_aware: no transfer handed CUDA device memory to MPI"
  exit 1
fi
echo "mpi.cuda_fake_aware: $paths transfers handed CUDA device memory to MPI, every check passed"
