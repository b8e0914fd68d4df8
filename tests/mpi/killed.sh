#!/bin/sh
# The ctest mpi.killed: rank 1 of 2 is killed in the middle of a transfer
# (test_mpi --kill). The job must end, as failed, well within the time limit:
# no rank left hanging in ferry.
#   usage: killed.sh MPIEXEC PROGRAM
set -u
here=$(dirname "$0")
limit=120
start=$(date +%s)
timeout -k 10 "$limit" sh "$here/run.sh" "$1" 2 "$2" --kill
rc=$? # mpirun's: 137 when it passes on the killed rank's signal
took=$(($(date +%s) - start))
if [ "$took" -ge "$limit" ]; then
  echo "FAIL mpi.killed: the job still ran after $limit s: a killed rank left the other hanging"
  exit 1
fi
if [ "$rc" -eq 0 ]; then
  echo "FAIL mpi.killed: the job ended well although rank 1 was killed"
  exit 1
fi
echo "mpi.killed: the job ended with status $rc after $took s, rank 1 killed mid-transfer"
