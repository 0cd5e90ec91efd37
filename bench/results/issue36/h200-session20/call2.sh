#!/bin/sh
# Session 20, call 2: issue 36 (GEMV loads in flight: GQ_UNROLL 1 = build-nv, 2, 4; in-model
# trace of the 8B Q4_K_M step) and issue 35 (bf16 step: 6c2225c vs main vs per-part uploads).
set -u
out=${OUT:-/tmp/out2}
mkdir -p "$out"
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib:$PWD/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CMOCKA_MESSAGE_OUTPUT=stdout
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw,driver_version --format=csv > "$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
bin() { case $1 in u1) echo build-nv/serve;; *) echo .device-carry/$1;; esac; }
bbin() { case $1 in u1) echo build-nv/bench/serve;; *) echo .device-carry/$1;; esac; }
for v in u1 u2 u4; do
  timeout 60 $(bin $v)/test_gemv_quant > "$out/test_gemv_quant_$v.log" 2>&1; echo "test_gemv_quant $v rc=$? $(el) $(grep -c '\[       OK \]' $out/test_gemv_quant_$v.log) ok"
  grep FAILED "$out/test_gemv_quant_$v.log" | head -3
done
for v in u1 u2 u4; do
  timeout 40 $(bbin $v)/bench_gemv_quant --rows 1 --types q4_k,q6_k --reps 20 > "$out/gemv_$v.log" 2>&1; echo "gemv $v rc=$? $(el)"; grep "gemv x" "$out/gemv_$v.log"
done
mkdir -p /dev/shm/lzq
timeout 60 build-nv/bench/serve/write_gguf --out /dev/shm/lzq/q4.gguf --shape 8b --form q4_k_m > "$out/write_q4.log" 2>&1; echo "write q4 rc=$? $(el)"
for r in 1 2; do
  for v in u1 u2 u4; do
    [ $(( $(date +%s) - t0 )) -lt 330 ] || { echo "skip q4 $v r$r"; continue; }
    timeout 60 $(bbin $v)/bench_forward --gguf /dev/shm/lzq/q4.gguf --no-forwards --decode 1,4 --reps 5 --device-time --device-trace "$out/trace_q4_$v.$r.csv" > "$out/fwdq4_$v.$r.log" 2>&1; echo "fwd q4 $v r$r rc=$? $(el)"; grep -E "over 2048" "$out/fwdq4_$v.$r.log"
  done
done
grep -E "decode step" "$out/fwdq4_u1.1.log"
for r in 1 2; do
  for v in old6c u1 e2; do
    case $v in old6c) b=.device-carry/old6c;; e2) b=.device-carry/e2;; *) b=build-nv/bench/serve;; esac
    [ $(( $(date +%s) - t0 )) -lt 480 ] || { echo "skip bf16 $v r$r"; continue; }
    timeout 60 $b/bench_forward --model 8b --gemm bf16 --no-forwards --decode 1,16 --reps 5 > "$out/fwdbf16_$v.$r.log" 2>&1; echo "fwd bf16 $v r$r rc=$? $(el)"; grep -E "over 2048" "$out/fwdbf16_$v.$r.log"
  done
done
for v in old6c u1; do
  case $v in old6c) b=.device-carry/old6c; x="";; *) b=build-nv/bench/serve; x="--device-trace $out/trace_bf16.csv";; esac
  [ $(( $(date +%s) - t0 )) -lt 520 ] || { echo "skip bf16 dt $v"; continue; }
  timeout 60 $b/bench_forward --model 8b --gemm bf16 --no-forwards --decode 1,16 --reps 5 --device-time $x > "$out/fwdbf16dt_$v.log" 2>&1; echo "fwd bf16 dt $v rc=$? $(el)"; grep -E "decode step|over 2048" "$out/fwdbf16dt_$v.log"
done
for v in u2; do
  [ $(( $(date +%s) - t0 )) -lt 500 ] || { echo "skip serve_quant"; continue; }
  timeout 80 $(bin $v)/test_serve_quant > "$out/test_serve_quant_$v.log" 2>&1; echo "test_serve_quant $v rc=$? $(el) $(grep -c '\[       OK \]' $out/test_serve_quant_$v.log) ok"
  grep FAILED "$out/test_serve_quant_$v.log" | head -3
done
rm -rf /dev/shm/lzq
echo "done $(el)"
