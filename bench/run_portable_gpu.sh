#!/bin/sh
# One device call on the lent H200 for the portable kernels (issue 12): the
# geometry and attention tests with the portable path forced, the kernel
# benchmark on the portable path and on the NVIDIA fast path (each prints
# the read ceiling it measured), then the tile tuner. Build here first
# (meson setup build-nv --buildtype=release && ninja -C build-nv) and carry
# build-nv with libcmocka.so.0 in build-nv/extra-lib.
#   usage: sh bench/run_portable_gpu.sh [OUTDIR] [tests|bench|tune ...]  (default: all)
set -u
out=${1:-${OUT:-/tmp/lazyattn-out}}
shift 2>/dev/null
steps=${*:-tests bench tune}
mkdir -p "$out"
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
for s in $steps; do
  case $s in
  tests)
    LAZYATTN_PORTABLE=1 timeout 150 build-nv/tests/test_geometry > "$out/test_geometry.log" 2>&1
    echo "test_geometry portable on the GPU: rc=$? ($(grep -c '\[       OK \]' "$out/test_geometry.log") ok)"
    grep -E "refused|FAILED|rror" "$out/test_geometry.log" | head -8
    LAZYATTN_PORTABLE=1 timeout 200 build-nv/tests/test_attention > "$out/test_attention_portable.log" 2>&1
    echo "test_attention portable on the GPU: rc=$? ($(grep -c '\[       OK \]' "$out/test_attention_portable.log") ok)"
    grep -E "FAILED|rror" "$out/test_attention_portable.log" | head -8 ;;
  bench)
    LAZYATTN_PORTABLE=1 LAZYATTN_NV_VERBOSE=1 timeout 200 build-nv/examples/bench_kernels --reps 10 --csv "$out/portable.csv" > "$out/bench_portable.log" 2>&1
    echo "bench_kernels portable rc=$?"
    grep -E "^ceilings|^check|^checks|^prefill|^decode|^ *name|TFLOP|TB/s" "$out/bench_portable.log" | head -30
    grep -E "registers|spill|lz_prefill|lz_decode" "$out/bench_portable.log" | head -12
    timeout 120 build-nv/examples/bench_kernels --reps 10 > "$out/bench_fast.log" 2>&1
    echo "bench_kernels fast path rc=$?"
    grep -E "^ceilings|^checks|^prefill|^decode|TFLOP|TB/s" "$out/bench_fast.log" | head -20 ;;
  tune)
    timeout 260 build-nv/examples/tune_kernels --reps 5 --out "$out/tuning_db.inc" > "$out/tune.log" 2>&1
    echo "tune_kernels rc=$?"
    grep -E "^default|^best|^\{\"" "$out/tune.log"
    sort -t, -k1 "$out/tune.log" | grep "TFLOP/s, diff" | sort -t: -k2 -n | head -5 ;;
  esac
done
