#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The kernels of weights kept quantized on the device (issue 36, item 2) on the
# lent H200 in one call (about 3 minutes):
#   the tests on NVIDIA's OpenCL: the quantized GEMV against float64 and the
#   device dequantizer bit for bit (test_gemv_quant), the engine kept against
#   dequantized at load (test_serve_quant), the fixtures against transformers
#   with the kept path (test_gguf_fixtures);
#   bench_gemv_quant: GB/s of the GEMV at 1 and 8 rows and of the dequantizer,
#   every kept type on the 8B shapes (the read ceiling to hold it against:
#   bench_gemm_small's, bench/serve/run_gpu.sh).
# The decode steps of 8B-shape BF16 and Q4_K_M files (the Q4_K_M one now kept
# quantized) are bench/serve/run_quant.sh's.
# Build and carry as bench/serve/run_gpu.sh says (BIN=build-serve, .device-carry/clblast).
#   usage: sh bench/serve/run_quant_kernels.sh [OUTDIR]   (ONLY_TESTS=1: the tests alone)
set -u
out=${1:-${OUT:-/tmp/lazyattn-quant-kernels-out}}
bin=${BIN:-build-serve}
# shellcheck disable=SC1091
. bench/gpu_call.sh
export CMOCKA_MESSAGE_OUTPUT=stdout LAZYATTN_FIXTURES="$PWD/tests/fixtures"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$out/tests.log" 2>&1
for t in serve/test_gemv_quant serve/test_serve_quant serve/test_gguf_fixtures; do
    step tests 150 "$bin/$t"
done
[ "${ONLY_TESTS:-0}" = 1 ] || step gemv 240 "$bin/bench/serve/bench_gemv_quant" --reps 20
echo "== summary"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[  ERROR|ERROR:" "$out/tests.log" | head -20
grep -E "GB/s" "$out/gemv.log" 2>/dev/null | head -60
