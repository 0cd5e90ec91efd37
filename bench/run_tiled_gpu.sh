#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# One device call on the lent H200 for issue 11 step 10, the tiled page
# layout (lazyattn_kv_layout): correctness first, then speed.
#  1. test_attention (its cases on row and tiled pools) with the default
#     prefill (TESTS=1, the default), and also with LAZYATTN_NV_PRODUCER=0
#     and LAZYATTN_NV_WGMMA=0 and test_prefill_batched (TESTS=3);
#  2. bench_kernels for each line "NAME|LAYOUT|LAZYATTN_NV_DEFINES|checks|WHAT[|ENV]"
#     of VARIANTS (WHAT: prefill, decode or all; checks 1 runs bench_kernels'
#     checks against the float64 reference; ENV: VAR=value words set for
#     that run, LAZYATTN_NV_PREFILL=32,8,0 for one), each after the first
#     skipped once the call has run past BUDGET_S (default 420);
#  3. the torch SDPA peer over all their timings (one table, rows in order).
# Calls 2-7 of 2026-12-01 (docs/h200/issue11/step10, PERFLOG "Issue 11 step
# 10") ran: whole benches of both layouts, the prefill with bulk pages
# (-DLZ_NV_BULK=1, opt-in since) on tiled and row pools, without wgmma
# (-DLZ_NV_DIAG=4), the decode with the tiled kernel on a row pool and the
# reverse (-DLZ_KV_TILED=1 / 0 on the other layout: timing only). The list
# below compares the two layouts whole, checks included.
# On a fresh machine the first test_attention compiles every kernel: give
# the call 600 s with TESTS=3.
# The call's limit must be >= 600 s. Run from a folder holding build-nv
# (bench/prefill_call.sh says how to make it).
#   usage: [TESTS=0|1|3] [VARIANTS=...] [BUDGET_S=420] sh bench/run_tiled_gpu.sh [OUTDIR]
set -u
out=${1:-${OUT:-/tmp/lazyattn-out}}
csv=/tmp/tiled-csv
BUDGET_S=${BUDGET_S:-420}
VARIANTS=${VARIANTS:-"tiled|tiled||1|all
rows|rows||1|all"}
. bench/prefill_call.sh
TESTS=${TESTS:-1}
if [ "$TESTS" -ge 1 ]; then
  TEST_S=240 BATCHED=$([ "$TESTS" -ge 3 ] && echo 1 || echo 0) tests default
fi
if [ "$TESTS" -ge 3 ]; then
  export LAZYATTN_NV_PRODUCER=0
  TEST_S=120 tests noproducer
  unset LAZYATTN_NV_PRODUCER
  export LAZYATTN_NV_WGMMA=0
  TEST_S=120 tests mma
  unset LAZYATTN_NV_WGMMA
fi
names="" first=""
while IFS='|' read -r name layout defines checks what envs; do
  [ -n "$name" ] || continue
  if [ -n "$first" ] && ! left; then echo "[$(el) s] $name skipped (past ${BUDGET_S} s)"; continue; fi
  first=$name
  log="$out/bench_$name.log"
  opt="--no-checks"
  [ "$checks" = 1 ] && opt=""
  only="--only $what"
  [ "$what" = all ] && only=""
  # shellcheck disable=SC2086 # envs: words of VAR=value
  env $envs LAZYATTN_NV_DEFINES="$defines" LAZYATTN_LOG=info LAZYATTN_NV_VERBOSE=1 timeout 150 \
    build-nv/examples/bench_kernels --kv-layout "$layout" $only $opt --csv "$csv/$name.csv" > "$log" 2>&1 < /dev/null
  echo "[$(el) s] bench_kernels $name (--kv-layout $layout $only $opt, defines '$defines'${envs:+, $envs}) rc=$?"
  grep -E "^ceilings|^check|^checks|^prefill_|^decode_|unavailable|disabled" "$log" | cut -c1-150 | head -24
  grep -E "prefill order for" "$log" | sed 's/.*prefill order/  order/' | cut -c1-170 | sort -u | head -6
  grep -E -A4 "entry function 'lz_(prefill|decode)_nv'" "$log" | grep -E "Used|spill" | tail -4
  grep -E "C75[0-9][0-9]" "$log" | cut -c1-150 | sort -u | head -4
  [ "$checks" = 1 ] || { mv "$log" "$csv/"; }
  names="$names $name"
done <<EOF
$VARIANTS
EOF
peer $names
echo "[$(el) s] done"
