#!/bin/sh
# p7-decode call 1: GPU correctness of the portable path, then the decode sweep
set -u
out=${1:-/tmp/out}; mkdir -p "$out"
bin=build-nv
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/$bin/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$out/gpu.txt"
for t in test_attention test_geometry; do
  LAZYATTN_PORTABLE=1 timeout 70 $bin/tests/$t > "$out/$t.log" 2>&1
  echo "$t portable: rc=$? ($(grep -c '\[       OK \]' "$out/$t.log") ok)" | tee -a "$out/summary.txt"
  grep -E "FAILED|refused" "$out/$t.log" | head -5
done
start=$(date +%s)
for t in ${SWEEP}; do
  now=$(date +%s); [ $((now - start)) -gt ${BUDGET:-150} ] && { echo "skip $t (time)" >> "$out/sweep.log"; continue; }
  echo "== decode tile $t" >> "$out/sweep.log"
  LAZYATTN_PORTABLE=1 LAZYATTN_NV_VERBOSE=1 timeout 40 $bin/examples/bench_kernels --reps 20 --no-checks --only decode --decode-tile "$t" > "$out/one.log" 2>&1
  grep -E "^ceilings|^portable|^decode_" "$out/one.log" >> "$out/sweep.log"
  grep -A4 "entry function 'lz_decode'" "$out/one.log" | grep -oE "Used [0-9]+ registers|[0-9]+ bytes spill stores" | tr '\n' ' ' >> "$out/sweep.log"; echo >> "$out/sweep.log"
done
rm -f "$out/one.log"
# table: tile -> %read per shape, ceiling
awk '/^== decode tile/{t=$4} /^ceilings/{c=$3} /^decode_/{r[t]=r[t] sprintf(" %s %s(%s)", $1, $7, $5)} /Used/{g[t]=$0} END{for (k in r) print k, "read", c, r[k], "|", g[k]}' "$out/sweep.log" | sed 's/decode_//g' | sort > "$out/table.txt"
cat "$out/summary.txt"; cat "$out/table.txt"
