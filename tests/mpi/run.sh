#!/bin/sh
# The ctests mpi.np2 and mpi.np4: runs a test program under mpirun on this host.
#   usage: run.sh MPIEXEC NP PROGRAM [ARGS...]
# Open MPI refuses root and more ranks than cores unless told: CI runs as root
# in a container with 2 cores. Shared memory only (self,vader): no network.
set -eu
mpiexec=$1 np=$2
shift 2
extra=""
if "$mpiexec" --version 2>&1 | grep -qiE "open mpi|openrte|open-mpi"; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # No single-copy (CMA) between ranks: containers often forbid process_vm_readv.
  extra="--oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none"
fi
# shellcheck disable=SC2086
exec "$mpiexec" -n "$np" $extra "$@"
