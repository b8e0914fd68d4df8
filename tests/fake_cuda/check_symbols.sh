#!/bin/sh
# Every symbol the fake CUDA driver exports is a CUDA name (cu...) or one of its
# test-only entry points (fake_cuda_...), so that nothing of its own can clash
# with a program or library that loads it in place of libcuda.so.1.
#   check_symbols.sh NM LIBRARY
set -eu
nm=$1
lib=$2
# Defined external symbols: "address type name"; ASan's __odr_asan.NAME stands for NAME.
all=$("$nm" -D --defined-only "$lib" | awk 'NF == 3 { sub(/^__odr_asan\./, "", $3); print $3 }' | sort -u)
[ -n "$all" ] || { echo "FAIL: $nm lists no defined symbol in $lib"; exit 1; }
other=$(printf '%s\n' "$all" | grep -v -E '^(cu[A-Z][A-Za-z0-9_]*|fake_cuda_[a-z_]+|_init|_fini|_edata|_end|__bss_start)$' || true)
echo "$lib: $(printf '%s\n' "$all" | wc -l) exported symbols"
if [ -n "$other" ]; then
  echo "FAIL: exported, but neither a CUDA name nor fake_cuda_*:"
  printf '  %s\n' $other
  exit 1
fi
echo "all are CUDA names or fake_cuda_*"
