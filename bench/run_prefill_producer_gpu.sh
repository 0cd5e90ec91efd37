#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# (Kept as run in step 6's call 1: the ping-pong has since become the
# default, so "pingpong" and "default" now build the same kernel;
# bench/run_prefill_pingpong_gpu.sh runs variant lists.)
# One device call on the lent H200 for issue 11 (steps 5 on): the wgmma
# prefill's producer warpgroup (the default on compute capability 9.x since
# step 5: mbarrier rings, no work-group barrier in the loop, setmaxnreg
# moving the producer's registers to the consumers, 4 copying warps, the
# exact rescale skip) and step 6's ping-pong of the consumer warpgroups
# (-DLZ_NV_PINGPONG=1, opt-in), each item skipped once the call has run past
# BUDGET_S (default 420):
#   pingpong   the ping-pong, 12 consumer warps: bench checks + timing
#   default    the default: timing
#   pingpong8  the ping-pong, 8 consumer warps (LAZYATTN_NV_PREFILL=32,8,0): checks + timing
#   noprod     without the producer (LAZYATTN_NV_PRODUCER=0, the step-2 kernel): timing
# the ping-pong is not run again where its first bench fails or hangs; then
# the torch SDPA peer over all their timings (one table, rows in the order
# above), then test_attention + test_prefill_batched with pingpong and
# pingpong8.
# With DIAG=1 instead, timing only (the diagnostics' results are wrong: what
# a round costs without a part of it, cl/prefill_nv.cl LZ_NV_DIAG): noprod,
# noprod without copies (d1), without wgmma (d4), without both (d5); the
# default, the default whose producer copies nothing (p8), without wgmma
# (p4), without both (p12); then the peer. (Calls 3 and 4 of step 5 ran
# earlier forms of this script: docs/PERFLOG.md.)
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
  LAZYATTN_NV_PRODUCER=0 bench noprod --no-checks
  for d in 1 4 5; do LAZYATTN_NV_PRODUCER=0 LAZYATTN_NV_DEFINES="-DLZ_NV_DIAG=$d" bench d$d --no-checks; done
  bench default --no-checks
  for d in 8 4 12; do LAZYATTN_NV_DEFINES="-DLZ_NV_DIAG=$d" bench p$d --no-checks; done
  peer noprod d1 d4 d5 default p8 p4 p12
  tar czf "$out/bench_logs.tgz" -C "$csv" $(cd "$csv" && ls bench_*.log)
  echo "[$(el) s] done"
  exit 0
fi
PP=-DLZ_NV_PINGPONG=1
LAZYATTN_NV_DEFINES=$PP BENCH_S=100 bench pingpong
okpp=$([ "$last_rc" = 0 ] && echo 1 || echo 0)
[ "$okpp" = 1 ] && LAZYATTN_NV_PREFILL=32,8,0 LAZYATTN_NV_DEFINES=$PP BENCH_S=100 bench pingpong8
ok8=$([ "$okpp" = 1 ] && [ "$last_rc" = 0 ] && echo 1 || echo 0)
BENCH_LOGS=$csv # the timing-only logs come back in one archive
left && bench default --no-checks
left && LAZYATTN_NV_PRODUCER=0 bench noprod --no-checks
BENCH_LOGS=$out
peer pingpong default pingpong8 noprod
tar czf "$out/bench_timing_logs.tgz" -C "$csv" $(cd "$csv" && ls bench_*.log)
[ "$okpp" = 1 ] && left 440 && LAZYATTN_NV_DEFINES=$PP BATCHED=1 TEST_S=70 tests pingpong
[ "$ok8" = 1 ] && left 500 && LAZYATTN_NV_PREFILL=32,8,0 LAZYATTN_NV_DEFINES=$PP BATCHED=1 \
  TEST_S=$(( 560 - $(el) )) tests pingpong8
echo "[$(el) s] done"
