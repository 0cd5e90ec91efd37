#!/bin/sh
# p7-decode call 2: GPU correctness of the portable path (design C), the decode sweep,
# then bench_kernels --reps 20 (checks on) with the best tile of the sweep
set -u
out=${1:-/tmp/out}; mkdir -p "$out"
bin=build-nv
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/$bin/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader > "$out/summary.txt"
for t in test_attention test_geometry test_position_checks test_io_dtypes; do
  LAZYATTN_PORTABLE=1 timeout 60 $bin/tests/$t > "$out/tests.log.tmp" 2>&1
  echo "$t portable: rc=$? ($(grep -c '\[       OK \]' "$out/tests.log.tmp") ok)" >> "$out/summary.txt"
  { echo "=== $t"; cat "$out/tests.log.tmp"; } >> "$out/tests.log"
done
rm -f "$out/tests.log.tmp"
start=$(date +%s)
for t in ${SWEEP}; do
  now=$(date +%s); [ $((now - start)) -gt ${BUDGET:-100} ] && { echo "skip $t (time)" >> "$out/sweep.log"; continue; }
  echo "== decode tile $t" >> "$out/sweep.log"
  LAZYATTN_PORTABLE=1 LAZYATTN_NV_VERBOSE=1 timeout 30 $bin/examples/bench_kernels --reps 20 --no-checks --only decode --decode-tile "$t" > "$out/one.log" 2>&1
  grep -E "^ceilings|^portable|^decode_" "$out/one.log" >> "$out/sweep.log"
  grep -A4 "entry function 'lz_decode'" "$out/one.log" | grep -oE "Used [0-9]+ registers|[0-9]+ bytes spill stores" | tr '\n' ' ' >> "$out/sweep.log"; echo >> "$out/sweep.log"
done
rm -f "$out/one.log"
awk '/^== decode tile/{t=$4} /^ceilings/{c=$3} /^decode_/{r[t]=r[t] sprintf(" %s %s(%s)", $1, $7, $5); v[t,$1]=$7+0} /Used/{g[t]=$0}
     END{for (k in r) {s=v[k,"decode_1x32768"]/50+(v[k,"decode_16x8192"]+v[k,"decode_64x4096"]+v[k,"decode_128x4096"])/70; printf "%.3f %s read %s%s | %s\n", s, k, c, r[k], g[k]}}' "$out/sweep.log" | sed 's/decode_//g' | sort -rn > "$out/table.txt"
best=$(head -1 "$out/table.txt" | awk '{print $2}')
echo "best tile: $best" >> "$out/summary.txt"
LAZYATTN_PORTABLE=1 LAZYATTN_NV_VERBOSE=1 timeout 90 $bin/examples/bench_kernels --reps 20 --decode-tile "$best" --csv "$out/portable_best.csv" > "$out/bench_best.log" 2>&1
echo "bench_kernels --reps 20 --decode-tile $best rc=$?" >> "$out/summary.txt"
grep -E "^ceilings|^checks|^portable|^decode" "$out/bench_best.log" >> "$out/summary.txt"
grep -A4 "entry function 'lz_decode'" "$out/bench_best.log" | grep -E "Used|spill" | head -3 >> "$out/summary.txt"
now=$(date +%s)
if [ $((now - start)) -lt ${DEFBUDGET:-170} ]; then
  LAZYATTN_PORTABLE=1 timeout 30 $bin/examples/bench_kernels --reps 20 --no-checks --only decode > "$out/bench_default.log" 2>&1
  echo "plain default:" >> "$out/summary.txt"; grep -E "^ceilings|^portable|^decode" "$out/bench_default.log" >> "$out/summary.txt"
fi
cat "$out/summary.txt"; head -20 "$out/table.txt"
