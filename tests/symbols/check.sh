#!/bin/sh
# Every external symbol that ferry's libraries define starts with ferry_ (public)
# or ferry__ (internal), so that a program with its own `vk` or `load_library`
# links against ferry (the static library above all). The few names the compiler
# and linker put into every shared object are allowed.
#
#   check.sh NM LIBRARY...                    fails naming each other symbol
#   check.sh --expect a,b NM LIBRARY...       passes only when the others are exactly a,b
#                                             (the test of this check, on tests/symbols/leaky.c)
set -eu
expect=""
if [ "${1:-}" = "--expect" ]; then
  expect=$2
  shift 2
fi
nm=$1
shift
found=$(mktemp)
trap 'rm -f "$found"' EXIT
for lib in "$@"; do
  # Defined external symbols only (T, D, B, R, W, V, ...): "address type name".
  # AddressSanitizer adds __odr_asan.NAME beside each global NAME: NAME is checked.
  "$nm" -g --defined-only "$lib" | awk 'NF == 3 { sub(/^__odr_asan\./, "", $3); print $3 }' | sort -u > "$found.all"
  [ -s "$found.all" ] || { echo "FAIL: $nm lists no defined external symbol in $lib"; rm -f "$found.all"; exit 1; }
  grep -v -E '^(ferry_.*|_init|_fini|_edata|_end|__bss_start)$' "$found.all" | sed "s|^|$lib: |" >> "$found" || true
  echo "$lib: $(wc -l < "$found.all") defined external symbols"
  rm -f "$found.all"
done
if [ -n "$expect" ]; then
  got=$(sed 's|^.*: ||' "$found" | sort -u | paste -sd, -)
  want=$(echo "$expect" | tr ',' '\n' | sort -u | paste -sd, -)
  if [ "$got" = "$want" ]; then
    echo "ok: the check names exactly $want"
    exit 0
  fi
  echo "FAIL: the check named '$got', expected '$want'"
  exit 1
fi
if [ -s "$found" ]; then
  echo "FAIL: symbols without the ferry_ (public) or ferry__ (internal) prefix; make them static or rename them:"
  sed 's/^/  /' "$found"
  exit 1
fi
echo "ok: every defined external symbol starts with ferry_"
