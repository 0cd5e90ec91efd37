#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# One device call on the lent H200 for issue 11 step 3: the wgmma prefill's
# opt-in variants (LAZYATTN_NV_DEFINES) against the default, most valuable
# first, each item skipped once the call has run past BUDGET_S seconds:
#   pvov     -DLZ_NV_PVOV=1: P V of tile j in flight across the round, three V slots
#            test_attention + test_prefill_batched on the GPU, bench checks + timing
#   default  the default (wgmma, 12 warps), timing
#   pvov_np  -DLZ_NV_PVOV=1 -DLZ_NV_PROXY=0: also without the async-proxy fence, checks + timing
#   noproxy  -DLZ_NV_PROXY=0 alone, checks + timing
#   pvov8    LZ_NV_PVOV at 8 warps (LAZYATTN_NV_PREFILL=32,8,0), checks + timing
# or, with DIAG=1, instead of the last three: the default with -DLZ_NV_DIAG=1
# (no copies after the prologue), 2 (no barrier per tile), 4 (no wgmma),
# timing only (wrong results: what a round costs without that part);
# then the torch SDPA peer over all of their timings (one table, rows in the
# order above), then test_attention with pvov_np if time is left (the call's
# limit is taken as 240 s).
# Run from a folder holding build-nv (bench/prefill_call.sh says what it needs).
#   usage: [DIAG=1] [BUDGET_S=150] sh bench/run_prefill_overlap_gpu.sh [OUTDIR]
set -u
out=${1:-${OUT:-/tmp/lazyattn-out}}
csv=/tmp/po-csv
BUDGET_S=${BUDGET_S:-150}
. bench/prefill_call.sh
# these variants change the kernel without the producer (the default since issue 11 step 5)
export LAZYATTN_NV_PRODUCER=0
PVOV="-DLZ_NV_PVOV=1"
export LAZYATTN_NV_DEFINES="$PVOV"
BATCHED=1 tests pvov
bench pvov
unset LAZYATTN_NV_DEFINES
left && bench default --no-checks
if [ "${DIAG:-0}" = 1 ]; then
  rest="diag1 diag2 diag4"
  for b in 1 2 4; do
    export LAZYATTN_NV_DEFINES="-DLZ_NV_DIAG=$b"
    left && bench diag$b --no-checks
  done
else
  rest="pvov_np noproxy pvov8"
  export LAZYATTN_NV_DEFINES="$PVOV -DLZ_NV_PROXY=0"
  left && bench pvov_np
  export LAZYATTN_NV_DEFINES="-DLZ_NV_PROXY=0"
  left && bench noproxy
  export LAZYATTN_NV_DEFINES="$PVOV" LAZYATTN_NV_WGMMA=1 LAZYATTN_NV_PREFILL=32,8,0
  left && bench pvov8
fi
unset LAZYATTN_NV_DEFINES LAZYATTN_NV_WGMMA LAZYATTN_NV_PREFILL
# the peer once, over every variant's rows (the same shape names, in the order above)
peer pvov default $rest
export LAZYATTN_NV_DEFINES="$PVOV -DLZ_NV_PROXY=0"
[ "${DIAG:-0}" = 1 ] || { left 120 && TEST_S=$(( 215 - $(el) )) tests pvov_np; }
unset LAZYATTN_NV_DEFINES
echo "[$(el) s] done"
