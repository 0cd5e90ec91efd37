#!/bin/sh
# p7-decode call 3: what NVIDIA's compiler makes of OpenCL's prefetch() in the
# decode (program binary = PTX), GPU correctness of the new paths (the build's
# defaults were prefetch 3 + ring 1), then a sweep of the L2 prefetch / V ring
# / one-pass reduce variants: bench_kernels --decode-tile K,W,D,G,U,P,R
set -u
out=${1:-/tmp/out}; mkdir -p "$out"
bin=build-nv
start=$(date +%s)
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/$bin/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S="$out/summary.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader > "$S"
opts="-cl-std=CL1.2 -DLZ_HEAD_DIM=128 -DLZ_BLOCK=16 -DLZ_DTYPE=1 -DLZ_G=4 -DLZ_FR=4 -DLZ_FTK=256 -DLZ_FWG=128 -DLZ_FRM=1 -DLZ_FRN=4 -DLZ_FOM=1 -DLZ_FON=8 -DLZ_FKV=0 -DLZ_FPF=0 -DLZ_DRING=0"
for p in 1 3; do
  timeout 30 ./probe_ptx "$out/decode-pf$p.ptx" "$opts -DLZ_DPF=$p" cl/block_entry.h cl/kernel_abi.h cl/storage.h cl/rope.h cl/decode.cl > "$out/probe.tmp" 2>&1
  echo "probe LZ_DPF=$p rc=$?: $(grep -c prefetch "$out/decode-pf$p.ptx" 2>/dev/null) PTX lines with 'prefetch'" >> "$S"
  grep -i prefetch "$out/decode-pf$p.ptx" 2>/dev/null | sed 's/^[ \t]*//' | sort | uniq -c | head -6 >> "$S"
  tail -3 "$out/probe.tmp" >> "$S"
done
rm -f "$out/probe.tmp" "$out/decode-pf3.ptx"
for t in test_attention test_geometry; do
  LAZYATTN_PORTABLE=1 timeout 60 $bin/tests/$t > "$out/tests.tmp" 2>&1
  echo "$t portable (defaults prefetch 3, ring 1): rc=$? ($(grep -c '\[       OK \]' "$out/tests.tmp") ok)" >> "$S"
  grep -E "FAILED|refused" "$out/tests.tmp" | head -4 >> "$S"
  { echo "=== $t"; cat "$out/tests.tmp"; } >> "$out/tests.log"
done
rm -f "$out/tests.tmp"
for t in ${SWEEP}; do
  now=$(date +%s); [ $((now - start)) -gt ${BUDGET:-150} ] && { echo "skip $t (time)" >> "$out/sweep.log"; continue; }
  echo "== decode tile $t" >> "$out/sweep.log"
  LAZYATTN_PORTABLE=1 LAZYATTN_NV_VERBOSE=1 timeout 30 $bin/examples/bench_kernels --reps 20 --no-checks --only decode --decode-tile "$t" > "$out/one.log" 2>&1
  grep -E "^ceilings|^portable|^decode_" "$out/one.log" >> "$out/sweep.log"
  grep -A4 "entry function 'lz_decode'" "$out/one.log" | grep -oE "Used [0-9]+ registers|[0-9]+ bytes spill stores" | tr '\n' ' ' >> "$out/sweep.log"; echo >> "$out/sweep.log"
done
grep -A4 "entry function 'lz_decode_reduce'" "$out/one.log" | grep -E "Used" | head -1 >> "$S"
rm -f "$out/one.log"
awk '/^== decode tile/{t=$4} /^ceilings/{c=$3} /^decode_/{r[t]=r[t] sprintf(" %s %s(%s)", $1, $7, $5); v[t,$1]=$7+0} /Used/{g[t]=$0}
     END{for (k in r) {s=v[k,"decode_1x32768"]/50+(v[k,"decode_16x8192"]+v[k,"decode_64x4096"]+v[k,"decode_128x4096"])/70; printf "%.3f %s read %s%s | %s\n", s, k, c, r[k], g[k]}}' "$out/sweep.log" | sed 's/decode_//g' | sort -rn > "$out/table.txt"
echo "elapsed $(( $(date +%s) - start )) s" >> "$S"
cat "$S"; cat "$out/table.txt"
