#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# One device call on the lent H200 for issue 11 step 5: the wgmma prefill's
# producer warpgroup (LAZYATTN_NV_PRODUCER=1: mbarrier rings, no work-group
# barrier in the loop, setmaxnreg moving the producer's registers to the
# consumers) against the default, each item skipped once the call has run
# past BUDGET_S (default 420):
#   prod12    producer + 12 consumer warps (160 registers): bench checks + timing
#   prod8     producer + 8 consumer warps (232 registers, LAZYATTN_NV_PREFILL=32,8,0):
#             bench checks + timing
#   default   the default (wgmma, 12 warps, no producer): timing
#   prod12s   prod12 with the exact rescale skip (-DLZ_NV_RESCALE_SKIP=1): timing
#   prod8s    prod8 with it: timing
# a variant whose first bench fails or hangs is not run again; then the
# torch SDPA peer over all their timings (one table, rows in the order
# above), then test_attention + test_prefill_batched with prod12 and prod8.
# With DIAG=1 instead, timing only (the diagnostics' results are wrong: what
# a round costs without a part of it, cl/prefill_nv.cl LZ_NV_DIAG): default,
# default without copies (d1), without wgmma (d4), without both (d5);
# prod12, prod12 whose producer copies nothing (p8), without wgmma (p4),
# without both (p12); then the peer.
# The call's limit must be >= 600 s. Run from a folder holding build-nv
# (bench/prefill_call.sh says what it needs).
#   usage: [DIAG=1] [BUDGET_S=420] sh bench/run_prefill_producer_gpu.sh [OUTDIR]
set -u
out=${1:-${OUT:-/tmp/lazyattn-out}}
csv=/tmp/pp-csv
BUDGET_S=${BUDGET_S:-420}
. bench/prefill_call.sh
if [ "${DIAG:-0}" = 1 ]; then
  BENCH_LOGS=$csv # eight logs: one archive comes back
  bench default --no-checks
  for d in 1 4 5; do LAZYATTN_NV_DEFINES="-DLZ_NV_DIAG=$d" bench d$d --no-checks; done
  export LAZYATTN_NV_PRODUCER=1
  bench prod12 --no-checks
  for d in 8 4 12; do LAZYATTN_NV_DEFINES="-DLZ_NV_DIAG=$d" bench p$d --no-checks; done
  unset LAZYATTN_NV_PRODUCER
  peer default d1 d4 d5 prod12 p8 p4 p12
  tar czf "$out/bench_logs.tgz" -C "$csv" $(cd "$csv" && ls bench_*.log)
  echo "[$(el) s] done"
  exit 0
fi
export LAZYATTN_NV_PRODUCER=1
BENCH_S=100 bench prod12
ok12=$([ "$last_rc" = 0 ] && echo 1 || echo 0)
export LAZYATTN_NV_PREFILL=32,8,0
BENCH_S=100 bench prod8
ok8=$([ "$last_rc" = 0 ] && echo 1 || echo 0)
unset LAZYATTN_NV_PRODUCER LAZYATTN_NV_PREFILL
left && bench default --no-checks
export LAZYATTN_NV_PRODUCER=1 LAZYATTN_NV_DEFINES="-DLZ_NV_RESCALE_SKIP=1"
[ "$ok12" = 1 ] && left && bench prod12s --no-checks
export LAZYATTN_NV_PREFILL=32,8,0
[ "$ok8" = 1 ] && left && bench prod8s --no-checks
unset LAZYATTN_NV_PRODUCER LAZYATTN_NV_PREFILL LAZYATTN_NV_DEFINES
peer prod12 prod8 default prod12s prod8s
export LAZYATTN_NV_PRODUCER=1
[ "$ok12" = 1 ] && left 440 && BATCHED=1 TEST_S=70 tests prod12
export LAZYATTN_NV_PREFILL=32,8,0
[ "$ok8" = 1 ] && left 500 && BATCHED=1 TEST_S=$(( 560 - $(el) )) tests prod8
unset LAZYATTN_NV_PRODUCER LAZYATTN_NV_PREFILL
echo "[$(el) s] done"
