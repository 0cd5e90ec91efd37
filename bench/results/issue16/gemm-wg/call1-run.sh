#!/bin/sh
# gemm-wg device call: the wgmma modes of serve/gemm_nv_small (xs 2, 3):
# test_gemm_small on the GPU, then bench_gemm_small over the wgmma shapes
# and the defaults at M 1, 16, 32, 64.   usage: sh run.sh OUTDIR
set -u
out=${1:-/tmp/gemm-wg-out}
mkdir -p "$out"
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CMOCKA_MESSAGE_OUTPUT=stdout
lb=""; command -v stdbuf >/dev/null 2>&1 && lb="stdbuf -oL -eL"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$out/smi.txt" 2>&1
start=$(date +%s)
timeout 90 $lb ./test_gemm_small > "$out/test.log" 2>&1
echo "test_gemm_small rc=$? $(( $(date +%s) - start ))s" | tee "$out/summary.txt"
V="defaults;1,4,1,2,1,2,0,2;2,4,1,2,1,2,0,2;1,4,1,4,1,2,0,2;2,4,1,1,1,2,0,2;1,8,1,2,1,2,0,2;1,4,1,2,0,2,0,2;1,4,2,2,1,2,0,2;2,4,1,2,1,1,0,2;1,4,1,2,1,2,0,3;2,4,1,2,1,2,0,3;1,8,1,2,1,2,0,3;1,4,1,4,1,2,0,3"
start=$(date +%s)
SERVE_GEMM_SMALL_VERBOSE=1 timeout 125 $lb ./bench_gemm_small --reps 20 --ms 1,16,32,64 --variant "$V" > "$out/bench.log" 2>&1
echo "bench_gemm_small rc=$? $(( $(date +%s) - start ))s" | tee -a "$out/summary.txt"
{
grep -E "^\[  (FAILED|PASSED|SKIPPED) |FAILED|wgmma rows|differ" "$out/test.log" | head -20
grep -E "check M|FAILED|set_tuning|run failed" "$out/bench.log" | grep -v ": ok$" | head -10
sed -n '/^best per shape/,$p' "$out/bench.log"
} | tee -a "$out/summary.txt"
