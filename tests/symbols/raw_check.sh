#!/bin/sh
# The raw baselines (libferry_raw.a: raw/, linked by `ferry bench` and bench/) are
# users of the library: they call its public API and, for their own driver tables,
# the core's loader (ferry__library_open, ferry__library_symbol), never a backend's
# internals (ferry__cuda_api, ferry__opencl_api, ferry__metal_rt, ...).
# usage: raw_check.sh NM libferry_raw.a
set -eu
nm=$1 lib=$2
internal=$("$nm" -u "$lib" | awk '{ print $NF }' | grep '^ferry__' | grep -v -E '^ferry__library_(open|symbol|close)$' |
  sort -u || true)
if [ -n "$internal" ]; then
  echo "FAIL: the raw baselines reach into ferry's internals; give them a driver table of their own:"
  echo "$internal" | sed 's/^/  /'
  exit 1
fi
"$nm" -u "$lib" | grep -q 'ferry__library_open' || { echo "FAIL: the raw baselines do not load through ferry__library_open"; exit 1; }
echo "ok: the raw baselines call the public API and the core's loader only"
