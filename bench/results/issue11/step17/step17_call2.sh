#!/bin/sh
# issue 11 step 17, call 2: fewer instructions in a consumer warp's round
# (NVIDIA's SASS of the default, call 1: ~218 a full round). The producer's
# flag word a tile (LZ_NV_PFLAGS), the maxima starting finite
# (LZ_NV_M_FINITE), both the new default; the V descriptors made once
# (LZ_NV_PDESC, opt-in). Old = both off; the persistent kernel (opt-in)
# checked with the new default. Then test_attention and
# test_prefill_batched on the new default.
TESTS=0 BUDGET_S=300 VARIANTS="old|tiled|-DLZ_NV_PFLAGS=0 -DLZ_NV_M_FINITE=0|0|prefill
new|tiled||1|prefill
flags|tiled|-DLZ_NV_M_FINITE=0|0|prefill
finite|tiled|-DLZ_NV_PFLAGS=0|0|prefill
pdesc|tiled|-DLZ_NV_PDESC=1|1|prefill
old2|tiled|-DLZ_NV_PFLAGS=0 -DLZ_NV_M_FINITE=0|0|prefill
new2|tiled||0|prefill
persist|tiled||1|prefill|LAZYATTN_NV_PERSIST=1" sh bench/run_tiled_gpu.sh "$OUT" 2>&1 | grep -E "^prefill_|rc=|^checks|Used|spill|shape|C75|skipped|done" | cut -c1-150
out=$OUT csv=/tmp/tiled-csv
. bench/prefill_call.sh
TEST_S=180 BATCHED=1 tests default
