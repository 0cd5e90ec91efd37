#!/bin/sh
# Session 20, call 3 (issue 35's device re-measure on the H200, one call): the bf16 serve step of
# 6c2225c (.device-carry/old6c) against main, two rounds alternating; the in-model traces of the
# bf16 and the 8B Q4_K_M decode steps (issue 36); then bench/run_gpu.sh (tests, kernels, SDPA).
# Everything lands in $OUT/a, packed as $OUT/all.tgz (a call brings back only a few files).
set -u
out=${OUT:-/tmp/out3}
a="$out/a"
mkdir -p "$a"
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib:$PWD/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CMOCKA_MESSAGE_OUTPUT=stdout
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
git rev-parse --short HEAD 2>/dev/null
for r in 1 2; do
  for v in old6c main; do
    case $v in old6c) b=.device-carry/old6c;; *) b=build-nv/bench/serve;; esac
    timeout 60 $b/bench_forward --model 8b --gemm bf16 --no-forwards --decode 1,16,64 --reps 5 > "$a/fwdbf16_$v.$r.log" 2>&1; echo "bf16 $v r$r rc=$? $(el)"; grep -E "over 2048" "$a/fwdbf16_$v.$r.log"
  done
done
timeout 60 build-nv/bench/serve/bench_forward --model 8b --gemm bf16 --no-forwards --decode 1,16 --reps 5 --device-time --device-trace "$a/trace_bf16.csv" > "$a/fwdbf16_trace.log" 2>&1; echo "bf16 trace rc=$? $(el)"; grep -E "decode step|over 2048" "$a/fwdbf16_trace.log"
mkdir -p /dev/shm/lzq
timeout 60 build-nv/bench/serve/write_gguf --out /dev/shm/lzq/q4.gguf --shape 8b --form q4_k_m > "$a/write_q4.log" 2>&1; echo "write q4 rc=$? $(el)"
timeout 60 build-nv/bench/serve/bench_forward --gguf /dev/shm/lzq/q4.gguf --no-forwards --decode 1,4 --reps 5 --device-time --device-trace "$a/trace_q4.csv" > "$a/fwdq4_trace.log" 2>&1; echo "q4 trace rc=$? $(el)"; grep -E "decode step|over 2048" "$a/fwdq4_trace.log"
timeout 60 build-nv/bench/serve/bench_forward --gguf /dev/shm/lzq/q4.gguf --no-forwards --decode 1,4 --reps 5 > "$a/fwdq4.log" 2>&1; echo "q4 rc=$? $(el)"; grep -E "over 2048" "$a/fwdq4.log"
rm -rf /dev/shm/lzq
tar czf "$out/all.tgz" -C "$out" a
left=$(( 420 - $(date +%s) + t0 ))
echo "run_gpu.sh with ${left}s"
timeout "$left" sh bench/run_gpu.sh "$a/run_gpu" > "$a/run_gpu.log" 2>&1; echo "run_gpu rc=$? $(el)"
grep -v "^\[log" "$a/run_gpu.log" | tail -60
tar czf "$out/all.tgz" -C "$out" a && rm -rf "$a"
echo "done $(el)"
