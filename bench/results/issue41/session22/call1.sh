#!/bin/sh
# Session 22, call 1: which kind of a tier's host work slows the serving thread's decode step
# (bench_forward --background, 8B random weights, 4 x 1 over 2048, B as rag_bench's
# concurrency); two processes, the kinds in opposite orders. (Run twice: the first found a
# build without copy4 and refused the list.) Output: call1_a.log, call1_b.log.
set -u
out=${OUT:-/tmp/out1}
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nproc; which perf; t0=$(date +%s)
k=none,copy,copy4,faults,reads64,reads1,writes64,pageable64
r=pageable64,writes64,reads1,reads64,faults,copy4,copy,none
timeout 200 build-nv/bench/serve/bench_forward --model 8b --no-forwards --decode 4 --reps 60 --background $k > "$out/a.log" 2>&1; echo "a rc=$? $(( $(date +%s) - t0 ))s"
timeout 200 build-nv/bench/serve/bench_forward --model 8b --no-forwards --decode 4,1 --reps 60 --background $r > "$out/b.log" 2>&1; echo "b rc=$? $(( $(date +%s) - t0 ))s"
cat "$out/a.log" "$out/b.log"
