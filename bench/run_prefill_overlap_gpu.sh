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
# Run from a folder holding build-nv/{tests,examples}, build-nv/extra-lib
# (libcmocka.so.0), tools/nvidia-opencl-env.sh and bench/sdpa_peer.py.
#   usage: [DIAG=1] [BUDGET_S=150] sh bench/run_prefill_overlap_gpu.sh [OUTDIR]
set -u
out=${1:-${OUT:-/tmp/lazyattn-out}}
mkdir -p "$out" /tmp/po-csv
csv=/tmp/po-csv # at most 8 files come back from $OUT: the CSVs go into peer.log
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
left() { [ "$(el)" -lt "${1:-${BUDGET_S:-150}}" ]; } # [SECONDS]: still before that point
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
tests() { # NAME: test_attention (+ test_prefill_batched with BATCHED=1) into tests_NAME.log
  log="$out/tests_$1.log"
  LAZYATTN_LOG=info timeout "${TEST_S:-90}" build-nv/tests/test_attention > "$log" 2>&1
  rc=$?; echo "[$(el) s] test_attention ($1): rc=$rc ($(grep -c '\[       OK \]' "$log") ok, $(grep -c 'wgmma (S and P V)' "$log") wgmma builds, $(grep -c -E 'unavailable|disabled' "$log") fallbacks)"
  grep -E "^# d=|FAILED|rror" "$log" | cut -c1-140 | head -8
  if [ "${BATCHED:-0}" = 1 ]; then
    b="$csv/batched_$1.log"
    LAZYATTN_LOG=info timeout 50 build-nv/tests/test_prefill_batched > "$b" 2>&1
    rc=$?; echo "[$(el) s] test_prefill_batched ($1): rc=$rc ($(grep -c '\[       OK \]' "$b") ok, $(grep -c 'NVIDIA tensor-core path' "$b") on the fast path, $(grep -c 'wgmma (S and P V)' "$b") wgmma)"
    grep -E "^# |FAILED|rror" "$b" | head -6
    { echo "==== test_prefill_batched"; cat "$b"; } >> "$log"
  fi
}
bench() { # NAME [OPTIONS]: bench_kernels --only prefill into bench_NAME.log, csv_NAME
  m=$1; shift
  LAZYATTN_NV_VERBOSE=1 timeout 45 build-nv/examples/bench_kernels --only prefill --reps 20 "$@" \
    --csv "$csv/$m.csv" > "$out/bench_$m.log" 2>&1
  rc=$?; echo "[$(el) s] bench_kernels prefill ($m) rc=$rc"
  grep -E "^check|^checks|^prefill_|NVIDIA tensor-core|unavailable|disabled" "$out/bench_$m.log" | cut -c1-150 | head -14
  grep -E -A3 "entry function 'lz_prefill_nv" "$out/bench_$m.log" | grep -E "Used|spill|C75" | head -4
}
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
all="$csv/all.csv"; : > "$all"
for m in pvov default $rest; do
  [ -s "$csv/$m.csv" ] || continue
  [ -s "$all" ] || head -1 "$csv/$m.csv" > "$all"
  tail -n +2 "$csv/$m.csv" >> "$all"
  echo "rows of $m: $(tail -n +2 "$csv/$m.csv" | wc -l)" >> "$out/peer.log"
done
{ echo "==== csv"; cat "$all"; } >> "$out/peer.log"
timeout 45 python3 bench/sdpa_peer.py --ours "$all" >> "$out/peer.log" 2>&1
rc=$?; echo "[$(el) s] peer rc=$rc"
export LAZYATTN_NV_DEFINES="$PVOV -DLZ_NV_PROXY=0"
[ "${DIAG:-0}" = 1 ] || { left 120 && TEST_S=$(( 215 - $(el) )) tests pvov_np; }
unset LAZYATTN_NV_DEFINES
grep -E "^rows of" "$out/peer.log"
grep -A14 "^shape" "$out/peer.log"
echo "[$(el) s] done"
