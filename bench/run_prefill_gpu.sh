#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# One device call for the portable prefill (issue 12, p7): the prefill shapes
# of bench_kernels for a list of variants (binary folder, --prefill-tile,
# extra build options of the portable prefill programs), then the prefill
# tests with the portable path forced and the full bench_kernels, both with
# the fastest variant of the main binaries (BIN), then the tuner when asked.
# Binaries: flat folders; BIN (default build-nv) holds bench_kernels,
# tune_kernels and the tests, with libcmocka.so.0 in BIN/extra-lib.
#   usage: sh bench/run_prefill_gpu.sh OUTDIR [sweep] [tests] [bench] [tune]
#   VARIANTS: lines "LABEL|FOLDER|R,K,W,SR,SK,OR,OD,KV,PF|OPTIONS" (FOLDER
#   empty: BIN; tile empty: the default; OPTIONS: LAZYATTN_TUNE settings, e.g.
#   portable.prefill_maxreg=96); TESTS the tests of the tests step.
set -u
out=${1:-${OUT:-/tmp/lazyattn-out}}
shift 2>/dev/null
steps=${*:-sweep tests bench}
bin=${BIN:-build-nv}
mkdir -p "$out"
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/$bin/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
table=$out/table.txt
: > "$table"
best_tile= best_opt= best_ms=
# row LABEL LOG: the prefill lines of a bench_kernels log as one table row
row() {
  a=$(grep -E "^prefill_a" "$2" | awk '{print $2}'); b=$(grep -E "^prefill_b" "$2" | awk '{print $2}')
  ta=$(awk -v ms="$a" 'BEGIN{ if (ms > 0) printf "%.1f", 4*32*128*(4096*8192+4096*4096/2)/ms*1e-9 }')
  tb=$(awk -v ms="$b" 'BEGIN{ if (ms > 0) printf "%.1f", 2*4*32*128*8192*8192/2/ms*1e-9 }')
  regs=$(grep -A4 "entry function 'lz_prefill'" "$2" | grep -oE "Used [0-9]+ registers" | head -1)
  echo "$1 | a ${a:-?} ms ${ta:-?} TF | b ${b:-?} ms ${tb:-?} TF | ${regs:-}" >> "$table"
}
for s in $steps; do
  case $s in
  sweep)
    n=0
    echo "${VARIANTS:-default|||}" | while IFS='|' read -r label folder tile opt; do
      [ -n "$label" ] || continue
      n=$((n + 1))
      exe=${folder:-$bin}/bench_kernels
      LAZYATTN_PORTABLE=1 LAZYATTN_TUNE="nv.verbose=1${opt:+,$opt}" timeout 60 \
        "$exe" --reps 20 --no-checks --only prefill ${tile:+--prefill-tile "$tile"} > "$out/sweep.$n.log" 2>&1
      echo "== $label ($exe, tile ${tile:-default}, options ${opt:-none}) rc=$?" >> "$out/sweep.log"
      grep -E "^prefill|^ceilings|refused|rror" "$out/sweep.$n.log" | head -8 >> "$out/sweep.log"
      grep -A4 "entry function 'lz_prefill'" "$out/sweep.$n.log" | grep -E "Used|spill|stack" | head -3 >> "$out/sweep.log"
      row "$label" "$out/sweep.$n.log"
      # the fastest (a + b) of the main binaries is the final variant
      if [ -z "$folder" ]; then
        t=$(grep -E "^prefill_(a|b)" "$out/sweep.$n.log" | awk '{s += $2} END {if (NR == 2) print s}')
        [ -n "$t" ] && echo "$t|$tile|$opt" >> "$out/candidates.txt"
      fi
    done
    for f in "$out"/sweep.[0-9]*.log; do echo "#### $f"; cat "$f"; done > "$out/sweep_all.txt" 2>/dev/null
    rm -f "$out"/sweep.[0-9]*.log
    if [ -s "$out/candidates.txt" ]; then
      pick=$(sort -t'|' -k1 -g "$out/candidates.txt" | head -1)
      best_tile=$(echo "$pick" | cut -d'|' -f2) best_opt=$(echo "$pick" | cut -d'|' -f3)
      echo "final variant: tile ${best_tile:-default}, options ${best_opt:-none} ($pick)" | tee -a "$table"
    fi ;;
  tests)
    for t in ${TESTS:-test_attention test_geometry test_prefill_batched}; do
      LAZYATTN_PORTABLE=1 LAZYATTN_TUNE="$best_opt" timeout 100 "$bin/$t" > "$out/$t.log" 2>&1
      echo "$t portable on the GPU: rc=$? ($(grep -c '\[       OK \]' "$out/$t.log") ok)" | tee -a "$table"
      grep -E "refused|FAILED|rror" "$out/$t.log" | head -6
    done ;;
  bench)
    LAZYATTN_PORTABLE=1 LAZYATTN_TUNE="nv.verbose=1${best_opt:+,$best_opt}" timeout 150 \
      "$bin/bench_kernels" --reps 20 --csv "$out/portable.csv" ${best_tile:+--prefill-tile "$best_tile"} > "$out/bench_portable.log" 2>&1
    echo "bench_kernels portable rc=$?"
    grep -E "^ceilings|^checks|^prefill|^decode" "$out/bench_portable.log" | head -20 | tee -a "$table"
    row "bench (final variant)" "$out/bench_portable.log" ;;
  tune)
    timeout ${TUNE_S:-100} "$bin/tune_kernels" --reps 5 --out "$out/tuning_db.inc" > "$out/tune.log" 2>&1
    echo "tune_kernels rc=$?"
    grep -E "^default|^best|^\{\"" "$out/tune.log" ;;
  esac
done
echo "---- table (FLOPs as bench_kernels counts them)"
cat "$table"
