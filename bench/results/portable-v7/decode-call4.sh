#!/bin/sh
# p7-decode call 4: GPU correctness with the build's defaults (prefetch 6 + ring 1:
# the V ring with its first batch issued after step 1), a sweep of ring variants
# (bench_kernels --decode-tile K,W,D,G,U,P,R), then bench_kernels --reps 20 with
# checks on the best tile of the sweep
set -u
out=${1:-/tmp/out}; mkdir -p "$out"
bin=build-nv
start=$(date +%s)
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/$bin/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S="$out/summary.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader > "$S"
for t in test_attention test_geometry test_io_dtypes test_position_checks; do
  LAZYATTN_PORTABLE=1 timeout 60 $bin/tests/$t > "$out/tests.tmp" 2>&1
  echo "$t portable (defaults prefetch 6, ring 1): rc=$? ($(grep -c '\[       OK \]' "$out/tests.tmp") ok)" >> "$S"
  grep -E "FAILED|refused" "$out/tests.tmp" | head -4 >> "$S"
  { echo "=== $t"; cat "$out/tests.tmp"; } >> "$out/tests.log"
done
rm -f "$out/tests.tmp"
for t in ${SWEEP}; do
  now=$(date +%s); [ $((now - start)) -gt ${BUDGET:-125} ] && { echo "skip $t (time)" >> "$out/sweep.log"; continue; }
  echo "== decode tile $t" >> "$out/sweep.log"
  LAZYATTN_PORTABLE=1 LAZYATTN_NV_VERBOSE=1 timeout 30 $bin/examples/bench_kernels --reps 20 --no-checks --only decode --decode-tile "$t" > "$out/one.log" 2>&1
  grep -E "^ceilings|^portable|^decode_" "$out/one.log" >> "$out/sweep.log"
  grep -A4 "entry function 'lz_decode'" "$out/one.log" | grep -oE "Used [0-9]+ registers|[0-9]+ bytes spill stores" | tr '\n' ' ' >> "$out/sweep.log"; echo >> "$out/sweep.log"
done
rm -f "$out/one.log"
awk '/^== decode tile/{t=$4} /^ceilings/{c=$3} /^decode_/{r[t]=r[t] sprintf(" %s %s(%s)", $1, $7, $5); v[t,$1]=$7+0} /Used/{g[t]=$0}
     END{for (k in r) {s=v[k,"decode_1x32768"]/50+(v[k,"decode_16x8192"]+v[k,"decode_64x4096"]+v[k,"decode_128x4096"])/70; printf "%.3f %s read %s%s | %s\n", s, k, c, r[k], g[k]}}' "$out/sweep.log" | sed 's/decode_//g' | sort -rn > "$out/table.txt"
best=$(head -1 "$out/table.txt" | awk '{print $2}')
echo "best tile: $best" >> "$S"
LAZYATTN_PORTABLE=1 timeout 45 $bin/examples/bench_kernels --reps 20 --only decode --decode-tile "$best" > "$out/bench_best.log" 2>&1
echo "bench_kernels --reps 20 --only decode --decode-tile $best (checks on) rc=$?" >> "$S"
grep -E "^ceilings|^check|^portable|^decode" "$out/bench_best.log" >> "$S"
echo "elapsed $(( $(date +%s) - start )) s" >> "$S"
cat "$S"; cat "$out/table.txt"
