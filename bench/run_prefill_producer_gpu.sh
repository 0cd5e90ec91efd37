#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# One device call on the lent H200 for issue 11 step 4: the wgmma prefill's
# producer warp (LAZYATTN_NV_PRODUCER=1: mbarrier rings, no work-group
# barrier in the loop), the exact rescale skip (-DLZ_NV_RESCALE_SKIP=1) and
# the scores of a tile inside one document as one m64n32k16 (-DLZ_NV_S_WIDE=1),
# against the default, each item skipped once the call has run past BUDGET_S:
#   prod      producer warp: bench checks + timing, then test_attention and
#             test_prefill_batched on the GPU
#   default   the default (wgmma, 12 warps), timing
#   skip      rescale skip alone: checks + timing
#   prodskip  both: checks + timing
#   prod2     producer warp with two K slots (-DLZ_NV_KSLOTS=2): checks + timing
#   wide      the wide scores alone: checks + timing
#   all       producer + skip + wide: checks + timing
# then the torch SDPA peer over all of their timings (one table, rows in the
# order above), then test_attention and test_prefill_batched with all three
# if time is left.
# Run from a folder holding build-nv/{tests,examples}, build-nv/extra-lib
# (libcmocka.so.0), tools/nvidia-opencl-env.sh and bench/sdpa_peer.py.
#   usage: [BUDGET_S=240] sh bench/run_prefill_producer_gpu.sh [OUTDIR]  (call limit >= 420 s)
set -u
out=${1:-${OUT:-/tmp/lazyattn-out}}
mkdir -p "$out" /tmp/pp-csv
csv=/tmp/pp-csv # at most 8 files come back from $OUT: the CSVs go into peer.log
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
left() { [ "$(el)" -lt "${1:-${BUDGET_S:-240}}" ]; } # [SECONDS]: still before that point
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
tests() { # NAME: test_attention + test_prefill_batched into tests_NAME.log
  log="$out/tests_$1.log"
  LAZYATTN_LOG=info timeout "${TEST_S:-90}" build-nv/tests/test_attention > "$log" 2>&1
  rc=$?; echo "[$(el) s] test_attention ($1): rc=$rc ($(grep -c '\[       OK \]' "$log") ok, $(grep -c 'wgmma (S and P V)' "$log") wgmma builds, $(grep -c 'producer warp' "$log") with the producer, $(grep -c -E 'unavailable|disabled' "$log") fallbacks)"
  grep -E "^# d=|FAILED|rror" "$log" | cut -c1-140 | head -8
  b="$csv/batched_$1.log"
  LAZYATTN_LOG=info timeout 50 build-nv/tests/test_prefill_batched > "$b" 2>&1
  rc=$?; echo "[$(el) s] test_prefill_batched ($1): rc=$rc ($(grep -c '\[       OK \]' "$b") ok, $(grep -c 'NVIDIA tensor-core path' "$b") on the fast path, $(grep -c 'producer warp' "$b") with the producer)"
  grep -E "^# |FAILED|rror" "$b" | head -6
  { echo "==== test_prefill_batched"; cat "$b"; } >> "$log"
}
bench() { # NAME [OPTIONS]: bench_kernels --only prefill into bench_NAME.log, csv_NAME
  m=$1; shift
  LAZYATTN_LOG=info LAZYATTN_NV_VERBOSE=1 timeout 45 build-nv/examples/bench_kernels --only prefill --reps 20 "$@" \
    --csv "$csv/$m.csv" > "$out/bench_$m.log" 2>&1
  rc=$?; echo "[$(el) s] bench_kernels prefill ($m) rc=$rc"
  last_rc=$rc
  grep -E "^check|^checks|^prefill_|NVIDIA tensor-core|unavailable|disabled" "$out/bench_$m.log" | cut -c1-150 | head -14
  grep -E -A3 "entry function 'lz_prefill_nv" "$out/bench_$m.log" | grep -E "Used|spill|C75" | head -4
}
export LAZYATTN_NV_PRODUCER=1
bench prod
# a producer that hangs (rc 124) or fails its checks is not run again below
prod_ok=$([ "$last_rc" = 0 ] && echo 1 || echo 0)
[ "$prod_ok" = 1 ] && tests prod
[ "$prod_ok" = 1 ] || echo "the producer failed (rc $last_rc): its other variants are skipped"
unset LAZYATTN_NV_PRODUCER
left && bench default --no-checks
export LAZYATTN_NV_DEFINES="-DLZ_NV_RESCALE_SKIP=1"
left && bench skip
export LAZYATTN_NV_PRODUCER=1
[ "$prod_ok" = 1 ] && left && bench prodskip
export LAZYATTN_NV_DEFINES="-DLZ_NV_KSLOTS=2"
[ "$prod_ok" = 1 ] && left && bench prod2
unset LAZYATTN_NV_PRODUCER
export LAZYATTN_NV_DEFINES="-DLZ_NV_S_WIDE=1"
left && bench wide
export LAZYATTN_NV_PRODUCER=1 LAZYATTN_NV_DEFINES="-DLZ_NV_RESCALE_SKIP=1 -DLZ_NV_S_WIDE=1"
[ "$prod_ok" = 1 ] && left && bench all
unset LAZYATTN_NV_DEFINES LAZYATTN_NV_PRODUCER
# the peer once, over every variant's rows (the same shape names, in the order above)
peer_in="$csv/peer_input.csv"; : > "$peer_in"
for m in prod default skip prodskip prod2 wide all; do
  [ -s "$csv/$m.csv" ] || continue
  [ -s "$peer_in" ] || head -1 "$csv/$m.csv" > "$peer_in"
  tail -n +2 "$csv/$m.csv" >> "$peer_in"
  echo "rows of $m: $(tail -n +2 "$csv/$m.csv" | wc -l)" >> "$out/peer.log"
done
{ echo "==== csv"; cat "$peer_in"; } >> "$out/peer.log"
timeout 45 python3 bench/sdpa_peer.py --ours "$peer_in" >> "$out/peer.log" 2>&1
rc=$?; echo "[$(el) s] peer rc=$rc"
export LAZYATTN_NV_PRODUCER=1 LAZYATTN_NV_DEFINES="-DLZ_NV_RESCALE_SKIP=1 -DLZ_NV_S_WIDE=1"
[ "$prod_ok" = 1 ] && left 260 && TEST_S=$(( 350 - $(el) )) tests all
unset LAZYATTN_NV_DEFINES LAZYATTN_NV_PRODUCER
grep -E "^rows of" "$out/peer.log"
grep -A14 "^shape" "$out/peer.log"
echo "[$(el) s] done"
