#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The decode-sized bf16 GEMM (serve/gemm_nv_small.c) on the lent H200, in
# one call: its cmocka test on the GPU, bench_gemm_small over the kernel
# shapes in $VARIANTS (one R,WR,WK,U,PIPE,WHINT,SPLITS[,XS] per word, at
# most 16; empty: the defaults), and torch's peer (bench/gemm_peer.py) in the same call.
# Run from a folder holding test_gemm_small, bench_gemm_small, extra-lib/
# (libcmocka.so.0), tools/nvidia-opencl-env.sh and bench/{gemm,sdpa}_peer.py
# (build here with meson setup build-nv --buildtype=release -Dspirv=disabled
# -Dclblast=enabled -Dredis=disabled).
# BIN=DIR takes the binaries from DIR instead (e.g. build-serve/serve, run
# from the repository root with .device-carry/clblast carried).
#   usage: [BIN=DIR] sh bench/run_gemm_small_gpu.sh [OUTDIR]
set -u
bin=${BIN:-.}
out=${1:-${OUT:-/tmp/gemm-small-out}}
mkdir -p "$out"
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/extra-lib:$PWD/$bin/../extra-lib:$PWD/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CMOCKA_MESSAGE_OUTPUT=stdout
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$out/smi.txt" 2>&1
start=$(date +%s)
timeout "${TEST_S:-40}" "$bin/test_gemm_small" > "$out/test.log" 2>&1
echo "test_gemm_small rc=$? $(( $(date +%s) - start ))s"
variants=$(echo ${VARIANTS:-} | tr ' ' ';') # one --variant, ';' separated
start=$(date +%s)
SERVE_GEMM_SMALL_VERBOSE=1 timeout "${BENCH_S:-100}" "$bin/bench_gemm_small" --reps "${REPS:-20}" ${MS:+--ms "$MS"} \
    ${variants:+--variant "$variants"} > "$out/bench.log" 2>&1
echo "bench_gemm_small rc=$? $(( $(date +%s) - start ))s"
start=$(date +%s)
(cd bench && timeout "${PEER_S:-40}" python3 gemm_peer.py --reps 20 > "$out/peer.log" 2>&1)
echo "gemm_peer rc=$? $(( $(date +%s) - start ))s"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |FAILED" "$out/test.log" | head -8
grep -E "check M|FAILED|set_tuning|run failed" "$out/bench.log" | grep -v ": ok$" | head -10
sed -n '/^best per shape/,$p' "$out/bench.log"
grep -E "read ceiling|  1 |   16 |   64 " "$out/peer.log" | grep -v "^.* 2048 " | head -14
