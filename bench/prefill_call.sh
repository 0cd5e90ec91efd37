# SPDX-License-Identifier: Apache-2.0
# Sourced by the issue 11 prefill device-call scripts
# (bench/run_prefill_overlap_gpu.sh, bench/run_prefill_producer_gpu.sh) with
# $out (the folder whose files come back) and $csv (a folder that stays on
# the machine: at most 8 files come back) set. Makes NVIDIA's OpenCL and
# build-nv/extra-lib (libcmocka) visible and defines
#   el                 seconds since sourcing
#   left [SECONDS]     true while before that point (default $BUDGET_S)
#   tests NAME         test_attention (TEST_S seconds, default 90) and, with
#                      BATCHED=1, test_prefill_batched into $out/tests_NAME.log
#   bench NAME [OPT]   bench_kernels --only prefill (BENCH_S seconds, default
#                      45) into $BENCH_LOGS/bench_NAME.log (default $out) and
#                      $csv/NAME.csv, with the
#                      prefill kernels' ptxas lines; sets last_rc
#   peer NAME...       the torch SDPA peer once over the rows of those benches
#                      (one table, rows in that order) into $out/peer.log
# Run from a folder holding build-nv/{tests,examples}, build-nv/extra-lib,
# tools/nvidia-opencl-env.sh and bench/sdpa_peer.py. On a fresh checkout
# (after sh tools/bootstrap.sh has installed the packages):
#   meson setup build-nv --buildtype=release -Dspirv=disabled -Dclblast=disabled -Dredis=disabled
#   ninja -C build-nv && mkdir -p build-nv/extra-lib
#   cp -L /usr/lib/x86_64-linux-gnu/libcmocka.so.0 build-nv/extra-lib/
# then carry build-nv (16 MB; the kernels are built on the GPU from cl/).
mkdir -p "$out" "$csv"
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
left() { [ "$(el)" -lt "${1:-${BUDGET_S:-240}}" ]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
tests() {
  log="$out/tests_$1.log"
  LAZYATTN_LOG=info timeout "${TEST_S:-90}" build-nv/tests/test_attention > "$log" 2>&1
  rc=$?; echo "[$(el) s] test_attention ($1): rc=$rc ($(grep -c '\[       OK \]' "$log") ok, $(grep -c 'wgmma (S and P V)' "$log") wgmma builds, $(grep -c 'producer warp' "$log") with the producer, $(grep -c -E 'unavailable|disabled' "$log") fallbacks)"
  grep -E "^# d=|FAILED|rror" "$log" | cut -c1-140 | head -8
  if [ "${BATCHED:-0}" = 1 ]; then
    b="$csv/batched_$1.log"
    LAZYATTN_LOG=info timeout 50 build-nv/tests/test_prefill_batched > "$b" 2>&1
    rc=$?; echo "[$(el) s] test_prefill_batched ($1): rc=$rc ($(grep -c '\[       OK \]' "$b") ok, $(grep -c 'NVIDIA tensor-core path' "$b") on the fast path, $(grep -c 'wgmma (S and P V)' "$b") wgmma, $(grep -c 'producer warp' "$b") with the producer)"
    grep -E "^# |FAILED|rror" "$b" | head -6
    { echo "==== test_prefill_batched"; cat "$b"; } >> "$log"
  fi
}
bench() {
  m=$1; shift
  log="${BENCH_LOGS:-$out}/bench_$m.log"
  LAZYATTN_LOG=info LAZYATTN_TUNE=nv.verbose=1 timeout "${BENCH_S:-45}" build-nv/examples/bench_kernels --only prefill \
    --reps 20 "$@" --csv "$csv/$m.csv" > "$log" 2>&1
  last_rc=$?; echo "[$(el) s] bench_kernels prefill ($m) rc=$last_rc"
  grep -E "^check|^checks|^prefill_|NVIDIA tensor-core|unavailable|disabled" "$log" | cut -c1-150 | head -14
  # the prefill kernels of the sm_90a round trip (its build log comes last) or of the one build
  grep -E -A4 "entry function 'lz_prefill_nv" "$log" | grep -E "Used|spill" | tail -4
  grep -E "C75[0-9][0-9]" "$log" | cut -c1-150 | sort -u | head -4
  grep "^lz_diag" "$log" | head -18
}
peer() {
  all="$csv/peer_input.csv"; : > "$all"
  for m in "$@"; do
    [ -s "$csv/$m.csv" ] || continue
    [ -s "$all" ] || head -1 "$csv/$m.csv" > "$all"
    tail -n +2 "$csv/$m.csv" >> "$all"
    echo "rows of $m: $(tail -n +2 "$csv/$m.csv" | wc -l)" >> "$out/peer.log"
  done
  { echo "==== csv"; cat "$all"; } >> "$out/peer.log"
  timeout 45 python3 bench/sdpa_peer.py --ours "$all" >> "$out/peer.log" 2>&1
  echo "[$(el) s] peer rc=$?"
  grep -E "^rows of" "$out/peer.log"
  grep -A14 "^shape" "$out/peer.log"
}
