#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Issue 16's decode-sized projections: what a short launch costs on NVIDIA
# OpenCL, in one call: bench/probe_launch.c (empty launches and plain reads
# of the O / QKV / down weight bytes, one launch and in a stream),
# bench_gemm_small (per launch, hot, and in a stream; $VARIANTS, ';'
# separated, default: the built-in table) and torch's peer with --stream.
# Build here (meson setup build-serve ...; ninja -C build-serve;
# cc -O2 -std=c11 bench/probe_launch.c -lOpenCL -lm -o build-serve/probe_launch).
#   usage: sh bench/run_launch_gpu.sh [OUTDIR]    (BIN=build-serve by default)
set -u
out=${1:-${OUT:-/tmp/lazyattn-launch-out}}
bin=${BIN:-build-serve}
. bench/gpu_call.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$out/smi.txt" 2>&1
step launch 60 "$bin/probe_launch" 32
step gemm_small "${BENCH_S:-150}" "$bin/serve/bench_gemm_small" --reps "${REPS:-30}" --ms "${MS:-1,2,16,32,64}" \
    --variant "${VARIANTS:-defaults}"
step peer 90 sh -c "cd bench && python3 gemm_peer.py --reps 20 --stream && python3 launch_peer.py"
cat "$out/launch.log"
grep -E "^(qkv|o|gate_up|down):|^defaults|read ceiling|plain read|FAILED" "$out/gemm_small.log" | head -60
grep -E "read ceiling|^stream|^torch|  1 |   16 |   64 " "$out/peer.log" | grep -v " 2048 " | head -40
