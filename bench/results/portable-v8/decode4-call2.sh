#!/bin/sh
# p8-decode call 2 (helper portable-decode-4): a sweep of step 1's K pipelines
# (--decode-tile 9th field S, cl/decode.cl LZ_FRM), the output sums in local
# memory (10th field O), work-group sizes and chunk lengths, each optionally with
# -cl-nv-maxrregcount (LAZYATTN_PORTABLE_DECODE_OPTIONS; without it the library
# caps the registers itself so the tile's work-groups per CU fit); then
# bench_kernels with checks on the best tile, and the tests with the best tile's
# program built as the H200 row would build it. SWEEP entries: TILE or TILE/MAXREG.
set -u
out=${1:-/tmp/out}; mkdir -p "$out"
bin=${BIN:-build-nv}
start=$(date +%s)
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/$bin/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S="$out/summary.txt"
# lz_decode's registers and spills from NVIDIA's build log (LAZYATTN_NV_VERBOSE:
# the log comes in pieces, "[log 3] build log [...] (cont.): ", joined here)
regs() {
  awk '{ if (match($0, /^\[log 3\] build log .*\(cont\.\): /)) printf "%s", substr($0, RLENGTH + 1); else printf "\n%s", $0 } END { print "" }' "$1" |
    grep -A3 "entry function 'lz_decode'" | grep -oE "Used [0-9]+ registers|[0-9]+ bytes spill stores" | tr '\n' ' '; echo
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader > "$S"
# every K pipeline, both places of the sums and both probability layouts on the GPU (test_odd_tiles)
LAZYATTN_PORTABLE=1 timeout 60 $bin/tests/test_geometry > "$out/test_geometry.log" 2>&1
echo "test_geometry portable: rc=$? ($(grep -c '\[       OK \]' "$out/test_geometry.log") ok)" >> "$S"
grep -E "FAILED|odd tiles" "$out/test_geometry.log" | head -14 >> "$S"
for e in ${SWEEP}; do
  now=$(date +%s); [ $((now - start)) -gt ${BUDGET:-170} ] && { echo "skip $e (time)" >> "$out/sweep.log"; continue; }
  t=${e%/*}; reg=; [ "$t" != "$e" ] && reg=${e#*/}
  echo "== decode tile $e" >> "$out/sweep.log"
  LAZYATTN_PORTABLE_DECODE_OPTIONS="${reg:+-cl-nv-maxrregcount=$reg}" LAZYATTN_PORTABLE=1 LAZYATTN_NV_VERBOSE=1 \
    timeout 30 $bin/examples/bench_kernels --reps 20 --no-checks --only decode --decode-tile "$t" > "$out/one.log" 2>&1
  echo "rc=$?" >> "$out/sweep.log"
  grep -E "^ceilings|^portable|^decode_" "$out/one.log" >> "$out/sweep.log"
  regs "$out/one.log" >> "$out/sweep.log"
done
rm -f "$out/one.log"
awk '/^== decode tile/{t=$4} /^ceilings/{c=$3} /^decode_/{r[t]=r[t] sprintf(" %s %s(%s)", $1, $7, $5); v[t,$1]=$7+0} /Used/{g[t]=$0}
     END{for (k in r) {s=v[k,"decode_1x32768"]/50+(v[k,"decode_16x8192"]+v[k,"decode_64x4096"]+v[k,"decode_128x4096"])/70; printf "%.3f %s read %s%s | %s\n", s, k, c, r[k], g[k]}}' "$out/sweep.log" | sed 's/decode_//g' | sort -rn > "$out/table.txt"
best=$(head -1 "$out/table.txt" | awk '{print $2}')
echo "best tile: $best" >> "$S"
t=${best%/*}; reg=; [ "$t" != "$best" ] && reg=${best#*/}
LAZYATTN_PORTABLE_DECODE_OPTIONS="${reg:+-cl-nv-maxrregcount=$reg}" LAZYATTN_PORTABLE=1 LAZYATTN_NV_VERBOSE=1 \
  timeout 45 $bin/examples/bench_kernels --reps 20 --only decode --decode-tile "$t" > "$out/bench_best.log" 2>&1
echo "bench_kernels --reps 20 --only decode --decode-tile $t ${reg:+(maxrregcount $reg)} (checks on) rc=$?" >> "$S"
grep -E "^ceilings|^check|^portable|^decode" "$out/bench_best.log" >> "$S"
regs "$out/bench_best.log" | head -1 >> "$S"
# the library's defaults (the H200 row as committed, registers capped by the library) on the GPU
for t in test_attention test_position_checks test_io_dtypes test_prefill_batched; do
  now=$(date +%s); [ $((now - start)) -gt ${TBUDGET:-200} ] && { echo "skip $t (time)" >> "$S"; continue; }
  LAZYATTN_PORTABLE=1 timeout 60 $bin/tests/$t > "$out/tests.tmp" 2>&1
  echo "$t portable: rc=$? ($(grep -c '\[       OK \]' "$out/tests.tmp") ok)" >> "$S"
  grep -E "FAILED" "$out/tests.tmp" | head -4 >> "$S"
  { echo "=== $t"; cat "$out/tests.tmp"; } >> "$out/tests.log"
done
rm -f "$out/tests.tmp"
echo "elapsed $(( $(date +%s) - start )) s" >> "$S"
cat "$S"; cat "$out/table.txt"
