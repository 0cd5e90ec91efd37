#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Issue 16's GEMM and forward figures on the lent H200 in one call, each with
# its torch peer from the same call:
#   the serve/ tests on the GPU (tensor-core GEMMs against float64, the bf16
#   forward against the f32 one, greedy tokens across the four policies);
#   bench/gemm_peer.py, then bench_gemm at M = 2048 and 10240 (the large
#   kernel, ratios to the peer's CSV) and bench_gemm_small at M = 1..64;
#   bench_forward (bf16; forwards and decode steps, then the decode steps
#   again with device time per phase, and with the fused projections)
#   beside bench/llama_peer.py.
# Build here (meson setup build-serve --buildtype=release -Dspirv=disabled
# -Dclblast=enabled -Dredis=disabled; ninja -C build-serve; libcmocka.so.0*
# copied into build-serve/extra-lib), copy libclblast.so.1 into
# .device-carry/clblast, carry both.
#   usage: sh bench/serve/run_gpu.sh [OUTDIR]    (BIN=build-serve by default; ONLY_TESTS=1:
#   the tests alone; TESTS="serve/test_gemm_small ..." a subset of the tests;
#   NO_LARGE=1 skips the torch GEMM peer and bench_gemm; VARIANTS="A;B;..." and
#   MS=1,16,.. go to bench_gemm_small's --variant and --ms; DEVICE_TIME=0 skips
#   the decode steps' device-time run)
set -u
out=${1:-${OUT:-/tmp/lazyattn-serve-out}}
bin=${BIN:-build-serve}
. bench/gpu_call.sh
export CMOCKA_MESSAGE_OUTPUT=stdout
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$out/tests.log" 2>&1
for t in ${TESTS:-serve/test_gemm_nv_large serve/test_gemm_small serve/test_gemm_fused \
         serve/test_serve_bf16 serve/test_serve_equivalence tests/test_context tests/test_attention}; do
    step tests "${TEST_S:-150}" "$bin/$t"
done
# decode's fused projections (issue 38), off on NVIDIA by default: the bf16 model with them
step tests "${TEST_S:-150}" env LAZYATTN_TUNE=serve.fused_decode=1 "$bin/serve/test_serve_bf16"
[ "${ONLY_TESTS:-0}" = 1 ] && { grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[  ERROR|^# " "$out/tests.log"; exit 0; }
if [ "${NO_LARGE:-0}" != 1 ]; then
    step peer 90 sh -c "cd bench && python3 gemm_peer.py --reps 20 --csv '$out/peer.csv'"
    step gemm_large 90 "$bin/bench/serve/bench_gemm" --rows 2048,10240 --peer "$out/peer.csv"
fi
step gemm_small "${SMALL_S:-120}" "$bin/bench/serve/bench_gemm_small" --reps 20 ${MS:+--ms "$MS"} \
    ${VARIANTS:+--variant "$VARIANTS"}
step forward 240 "$bin/bench/serve/bench_forward" --model 8b --gemm bf16 --reps 5
[ "${DEVICE_TIME:-1}" = 1 ] &&
    step forward 120 "$bin/bench/serve/bench_forward" --model 8b --gemm bf16 --reps 5 --no-forwards --device-time
# the decode steps with the fused projections (issue 38; LAZYATTN_TUNE=serve.fused_decode=1)
step forward 120 env LAZYATTN_TUNE=serve.fused_decode=1 "$bin/bench/serve/bench_forward" --model 8b \
    --gemm bf16 --reps 5 --no-forwards
[ "${DEVICE_TIME:-1}" = 1 ] &&
    step forward 120 env LAZYATTN_TUNE=serve.fused_decode=1 "$bin/bench/serve/bench_forward" --model 8b \
        --gemm bf16 --reps 5 --no-forwards --device-time
step llama_peer 180 sh -c "cd bench && python3 llama_peer.py --reps 5"
echo "== summary"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[==========\] .* ran|^# " "$out/tests.log" | head -30
grep -E "read ceiling| 2048 | 10240 " "$out/peer.log" 2>/dev/null | head -10
grep -E "TFLOP|ok$|FAIL|mismatch" "$out/gemm_large.log" 2>/dev/null | head -12
sed -n '/^best per shape/,$p' "$out/gemm_small.log" | head -32
cat "$out/forward.log"
tail -11 "$out/llama_peer.log"
