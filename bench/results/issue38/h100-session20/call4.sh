#!/bin/sh
# Prepared in the twentieth session; not run (the session's device time ran out).
# Session 20, call 4 (the session's last ~4 min of device time): issue 38's fused bf16 decode
# (LAZYATTN_TUNE=serve.fused_decode=1: NVIDIA tests, then steps against the default, alternating);
# issue 36's in-model trace of fb1c856's 64-value GEMV (.device-carry/fb1) against main's.
# Output packed into $OUT/all.tgz.
set -u
top=${OUT:-/tmp/out4}
a="$top/a"
out=$a bin=build-nv
. bench/gpu_call.sh # NVIDIA's OpenCL, build-nv/extra-lib and the carried CLBlast; mkdir $a
out=$top
export CMOCKA_MESSAGE_OUTPUT=stdout
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /dev/shm/lzq
timeout 40 build-nv/bench/serve/write_gguf --out /dev/shm/lzq/q4.gguf --shape 8b --form q4_k_m > "$a/write_q4.log" 2>&1; echo "write q4 rc=$? $(el)"
for v in main fb1; do
  case $v in fb1) b=.device-carry/fb1;; *) b=build-nv/bench/serve;; esac
  timeout 40 $b/bench_forward --gguf /dev/shm/lzq/q4.gguf --no-forwards --decode 1 --reps 5 --device-time --device-trace "$a/trace_q4_$v.csv" > "$a/fwdq4_$v.log" 2>&1; echo "q4 $v rc=$? $(el)"; grep -E "over 2048" "$a/fwdq4_$v.log"
done
rm -rf /dev/shm/lzq
tar czf "$out/all.tgz" -C "$out" a
for r in 1 2; do
  for v in 0 1; do
    [ $(( $(date +%s) - t0 )) -lt 110 ] || { echo "skip fused=$v r$r"; continue; }
    LAZYATTN_TUNE=serve.fused_decode=$v timeout 40 build-nv/bench/serve/bench_forward --model 8b --gemm bf16 --no-forwards --decode 1,16,64 --reps 5 > "$a/fwdbf16_fused$v.$r.log" 2>&1; echo "bf16 fused=$v r$r rc=$? $(el)"; grep -E "over 2048" "$a/fwdbf16_fused$v.$r.log"
  done
done
for t in serve/test_gemm_fused serve/test_serve_bf16; do
  [ $(( $(date +%s) - t0 )) -lt 110 ] || { echo "skip $t"; continue; }
  LAZYATTN_TUNE=serve.fused_decode=1 timeout 40 build-nv/$t > "$a/$(basename $t)_fused.log" 2>&1; echo "$t fused rc=$? $(el) $(grep -c '\[       OK \]' "$a/$(basename $t)_fused.log") ok"; grep FAILED "$a/$(basename $t)_fused.log" | head -3
done
tar czf "$out/all.tgz" -C "$out" a && rm -rf "$a"
echo "done $(el)"
