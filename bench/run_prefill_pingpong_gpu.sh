#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# One device call on the lent H200 for issue 11 steps 7-9: the wgmma
# prefill's variants, each a line "NAME|LAZYATTN_NV_DEFINES|checks" of
# VARIANTS (default: the list below), benched in order (bench_kernels --only
# prefill: its checks where the third field is 1, else timing only), each
# after the first skipped once the call has run past BUDGET_S (default
# 380); then the torch SDPA peer over all their timings (one table, rows in
# that order); the first variant's patched sm_90a PTX (the round trip's,
# for prefill (b)) into ptx.gz, to assemble and disassemble elsewhere; then
# test_attention + test_prefill_batched with the first variant.
# The diagnostics (LZ_NV_DIAG, cl/prefill_nv.cl) 1-8 give wrong results:
# timing only; 16 gives where a ping-pong round's time goes (one
# work-group's warps; bench_kernels prints it into the bench log with
# LAZYATTN_NV_DIAG_DUMP=1, set here for the variants with DIAG=16).
# Step 7 (call 2 of 2026-12-01) ran: default (checks), wide (-DLZ_NV_S_WIDE=1, checks),
# inturn (-DLZ_NV_PP_EARLY=0), step5 (-DLZ_NV_PINGPONG=0), noproxy
# (-DLZ_NV_PROXY=0), p8, p4, p12; step 8 (calls 3-4): default, v3
# (-DLZ_NV_KSLOTS=2 -DLZ_NV_PVSLOTS=3, since the default), pb0, p8, p12.
# Step 9 (2026-12-01, second session; docs/h200/issue11/step9) ran, by
# VARIANTS: call 1 default, ppmeta (-DLZ_NV_PP_META=1, checks), the
# printf timing, p8, p4, p12; call 2 ppmeta, slack (+ -DLZ_NV_MAX_SLACK=8,
# checks), the clocks written to out, the default, wide scores with the
# slack, p12; calls 3-4 the clock reads one by one (LZ_NV_DIAG_MARKS,
# DIAG 48); call 5 -DLZ_NV_EXP2_FTZ=1 with and without the slack, DIAG 16,
# p12, p4, p8; call 6 the new default (PP_META and the slack), L1
# prefetch (-DLZ_NV_L1PF=1, 2, 4), 2 K + 2 V slots, no slack. The list
# below (not yet run): the default (checks), the same bytes as one 4 KB
# cp.async.bulk a page (DIAG 64, timing only: what the bulk-copy page
# layout would buy) with and without wgmma, the four-part timing and the
# three diagnostics.
# The call's limit must be >= 600 s. Run from a folder holding build-nv
# (bench/prefill_call.sh says what it needs).
#   usage: [BUDGET_S=380] [VARIANTS=...] [TESTS=0] sh bench/run_prefill_pingpong_gpu.sh [OUTDIR]
set -u
out=${1:-${OUT:-/tmp/lazyattn-out}}
csv=/tmp/pp-variants-csv
BUDGET_S=${BUDGET_S:-380}
VARIANTS=${VARIANTS:-"default||1
bulk|-DLZ_NV_DIAG=64|0
bulk4|-DLZ_NV_DIAG=68|0
d16|-DLZ_NV_DIAG=16|0
p12|-DLZ_NV_DIAG=12|0
p4|-DLZ_NV_DIAG=4|0
p8|-DLZ_NV_DIAG=8|0"}
. bench/prefill_call.sh
names="" first="" first_defines=""
BENCH_LOGS=$out
while IFS='|' read -r name defines checks; do
  [ -n "$name" ] || continue
  if [ -z "$first" ]; then
    first=$name first_defines=$defines
  else
    left || { echo "[$(el) s] $name skipped (past ${BUDGET_S} s)"; continue; }
  fi
  opt=--no-checks
  [ "$checks" = 1 ] && opt=""
  case "$defines" in *DIAG=16*) export LAZYATTN_NV_DIAG_DUMP=1 ;; *) unset LAZYATTN_NV_DIAG_DUMP ;; esac
  LAZYATTN_NV_DEFINES=$defines BENCH_S=$([ "$checks" = 1 ] && echo 100 || echo 45) bench "$name" $opt < /dev/null
  BENCH_LOGS=$csv # the others' logs come back in one archive
  names="$names $name"
done <<EOF
$VARIANTS
EOF
BENCH_LOGS=$out
peer $names
# the first variant's prefill (b) kernel as the round trip patched it
if left 440; then
  LAZYATTN_NV_DUMP_PTX=$csv/first.ptx LAZYATTN_NV_DEFINES=$first_defines timeout 60 \
    build-nv/examples/bench_kernels --only prefill_b --no-checks --reps 20 > "$csv/bench_dump.log" 2>&1
  if [ -s "$csv/first.ptx" ]; then
    gzip -c "$csv/first.ptx" > "$out/ptx.gz"
    echo "[$(el) s] PTX of $first: $(wc -l < "$csv/first.ptx") lines"
  else
    echo "[$(el) s] no PTX dumped"; tail -3 "$csv/bench_dump.log"
  fi
fi
tar czf "$out/bench_logs.tgz" -C "$csv" $(cd "$csv" && ls bench_*.log)
[ "${TESTS:-1}" = 1 ] && left 500 && LAZYATTN_NV_DEFINES=$first_defines BATCHED=1 TEST_S=$(( 560 - $(el) )) tests "$first"
echo "[$(el) s] done"
