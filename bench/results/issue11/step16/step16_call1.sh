#!/bin/sh
# issue 11 step 16, call 1: the new opt-in paths tested, then timed against the default
D="-DLZ_NV_DSWAP=1 -DLZ_NV_EXP_POLY=2 -DLZ_NV_EARLY_TEST=1"
TESTS=1 TEST_DEFINES="$D" BUDGET_S=330 VARIANTS="def|||1
swap|||1||-DLZ_NV_DSWAP=1
deft|LAZYATTN_NV_DECODE_TIMES=1|||--only decode_1x32768 --kv-layout tiled|
swapt|LAZYATTN_NV_DECODE_TIMES=1|||--only decode_1x32768 --kv-layout tiled|-DLZ_NV_DSWAP=1" sh bench/run_decode_gpu.sh "$OUT"
TESTS=0 BUDGET_S=230 VARIANTS="def|tiled||1|prefill
e1|tiled|-DLZ_NV_EARLY_TEST=1|0|prefill
e2|tiled|-DLZ_NV_EARLY_TEST=2|0|prefill
p2|tiled|-DLZ_NV_EXP_POLY=2|1|prefill
p4|tiled|-DLZ_NV_EXP_POLY=4|0|prefill
p1|tiled|-DLZ_NV_EXP_POLY=1|0|prefill
def2|tiled||0|prefill" sh bench/run_tiled_gpu.sh "$OUT/pf"
