#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# One device call on the lent H200 for the portable kernels (issue 12): the
# geometry, attention and position tests with the portable path forced, the
# kernel benchmark on the portable path and on the NVIDIA fast path (each
# prints the read ceiling it measured), a sweep of the portable decode's
# geometry, then the tile tuner. Build here first
# (meson setup build-nv --buildtype=release && ninja -C build-nv) and carry
# the binaries in BIN (default build-nv) with libcmocka.so.0 in BIN/extra-lib;
# BIN may be a flat folder of test_geometry, test_attention,
# test_position_checks, bench_kernels, tune_kernels.
#   usage: sh bench/run_portable_gpu.sh [OUTDIR] [tests|bench|sweep|tune ...]  (default: tests bench tune)
#   SWEEP="K,W,D,G[,U[,P[,R[,S[,O]]]]][/MAXREG] ..." lists the --decode-tile values of the
#   sweep step (/MAXREG: the decode built with -cl-nv-maxrregcount=MAXREG through
#   LAZYATTN_TUNE=portable.decode_maxreg=MAXREG; without it the library caps the registers so
#   the tile's work-groups per CU fit);
#   TESTS the tests of the tests step.
set -u
out=${1:-${OUT:-/tmp/lazyattn-out}}
shift 2>/dev/null
steps=${*:-tests bench tune}
bin=${BIN:-build-nv}
mkdir -p "$out"
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/$bin/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exe() { if [ -x "$bin/$1" ]; then echo "$bin/$1"; else echo "$bin/$2/$1"; fi; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
# FALLBACK: a second folder of binaries (e.g. the decode built without inline PTX),
# used for every step when the first fails to run the decode benchmark
if [ -n "${FALLBACK:-}" ]; then
  if ! LAZYATTN_PORTABLE=1 timeout 60 "$(exe bench_kernels examples)" --reps 20 --no-checks --only decode > "$out/precheck.log" 2>&1; then
    echo "precheck with $bin failed:"; tail -5 "$out/precheck.log"; bin=$FALLBACK
    export LD_LIBRARY_PATH="$PWD/$bin/extra-lib:$LD_LIBRARY_PATH"
  else
    echo "precheck with $bin:"; grep -E "^portable|^decode_" "$out/precheck.log"
    echo "the same with $FALLBACK:"; LAZYATTN_PORTABLE=1 timeout 60 "$(bin=$FALLBACK; exe bench_kernels examples)" --reps 20 --no-checks --only decode 2>&1 | grep -E "^decode_"
  fi
fi
for s in $steps; do
  case $s in
  tests)
    for t in ${TESTS:-test_geometry test_attention test_position_checks}; do
      LAZYATTN_PORTABLE=1 timeout 200 "$(exe $t tests)" > "$out/$t.log" 2>&1
      echo "$t portable on the GPU: rc=$? ($(grep -c '\[       OK \]' "$out/$t.log") ok)"
      grep -E "refused|FAILED|rror" "$out/$t.log" | head -8
    done ;;
  bench)
    LAZYATTN_PORTABLE=1 LAZYATTN_TUNE=nv.verbose=1 timeout 200 "$(exe bench_kernels examples)" --reps 20 --csv "$out/portable.csv" > "$out/bench_portable.log" 2>&1
    echo "bench_kernels portable rc=$?"
    grep -E "^ceilings|^check|^checks|^portable|^prefill|^decode|^ *name|TFLOP|TB/s" "$out/bench_portable.log" | head -30
    grep -A4 -E "entry function 'lz_decode(_warp)?'" "$out/bench_portable.log" | grep -E "entry function|stack|Used" | head -12
    timeout 120 "$(exe bench_kernels examples)" --reps 20 > "$out/bench_fast.log" 2>&1
    echo "bench_kernels fast path rc=$?"
    grep -E "^ceilings|^checks|^prefill|^decode|TFLOP|TB/s" "$out/bench_fast.log" | head -20 ;;
  sweep)
    for e in ${SWEEP:-512,128,8,4,4,2,1,11,3}; do
      t=${e%/*}; reg=; [ "$t" != "$e" ] && reg=${e#*/}
      echo "== decode tile $e" >> "$out/sweep.log"
      LAZYATTN_TUNE="${reg:+portable.decode_maxreg=$reg}" LAZYATTN_PORTABLE=1 timeout 60 "$(exe bench_kernels examples)" --reps 20 --no-checks --only decode --decode-tile "$t" 2>&1 | grep -E "^ceilings|^portable|^decode_" >> "$out/sweep.log"
    done
    cat "$out/sweep.log" ;;
  tune)
    timeout ${TUNE_TIMEOUT:-260} "$(exe tune_kernels examples)" --reps 5 --out "$out/tuning_db.inc" > "$out/tune.log" 2>&1
    echo "tune_kernels rc=$?"
    grep -E "^default|^best|^\{\"" "$out/tune.log"
    sort -t, -k1 "$out/tune.log" | grep "TFLOP/s, diff" | sort -t: -k2 -n | head -5 ;;
  esac
done
