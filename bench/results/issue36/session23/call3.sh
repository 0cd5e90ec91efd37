#!/bin/sh
# Session 23, call 3 (issue 36): the int8 GEMV's work-groups looping over groups of row sets
# (the row quantized once a work-group; d605b79, reverted: cherry-pick it first):
# SERVE_GQ8_RESIDENT 2 (build-nv) against 1, 4, 8
# (.device-carry/var/rN) and the exact kernel (serve.gemv_q8=0), rounds alternating; the BF16
# step of random weights beside (cut to fit the session's last device time: no BF16 file, no
# peer; call 2 has the peer).
set -u
out=${OUT:-/tmp/out3}
mkdir -p "$out/t"
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib:$PWD/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CMOCKA_MESSAGE_OUTPUT=stdout
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
timeout 60 build-nv/serve/test_gemv_quant > "$out/t/gemv_quant.log" 2>&1; echo "test_gemv_quant rc=$? $(el) $(grep -c '\[       OK \]' "$out/t/gemv_quant.log") ok"; grep -E "FAILED|8500" "$out/t/gemv_quant.log"
mkdir -p /dev/shm/lzq
timeout 60 build-nv/bench/serve/write_gguf --out /dev/shm/lzq/q4.gguf --shape 8b --form q4_k_m > "$out/t/write_q4.log" 2>&1; echo "write q4 rc=$? $(el)"
b() { case $1 in r2|q0) echo build-nv/bench/serve;; *) echo .device-carry/var/$1;; esac; }
for v in r2 r1 r4 r8; do
  timeout 30 $(b $v)/bench_gemv_quant --rows 1 --types q4_k,q6_k --reps 20 > "$out/t/gemv_$v.log" 2>&1; echo "gemv $v rc=$? $(el)"; grep "gemv x" "$out/t/gemv_$v.log" | awk '{print $1, $2, $3, $(NF-5), $(NF-4)}' | tr '\n' ';'; echo
done
for r in 1 2; do
  for v in r2 r1 r4 r8 q0 bf; do
    [ $(( $(date +%s) - t0 )) -lt 120 ] || { echo "skip $v r$r"; continue; }
    if [ $v = bf ]; then
      timeout 60 build-nv/bench/serve/bench_forward --model 8b --gemm bf16 --no-forwards --decode 1 --reps 5 > "$out/t/fb.$r.log" 2>&1; echo "bf16 r$r rc=$? $(el) $(grep -E 'over 2048' "$out/t/fb.$r.log")"
    else
      q=1; [ $v = q0 ] && q=0
      LAZYATTN_TUNE=serve.gemv_q8=$q timeout 60 $(b $v)/bench_forward --gguf /dev/shm/lzq/q4.gguf --no-forwards --decode 1 --reps 5 > "$out/t/fq_$v.$r.log" 2>&1; echo "q4 $v r$r rc=$? $(el) $(grep -E 'over 2048' "$out/t/fq_$v.$r.log")"
    fi
  done
done
[ $(( $(date +%s) - t0 )) -lt 130 ] && { timeout 30 build-nv/bench/serve/bench_forward --gguf /dev/shm/lzq/q4.gguf --no-forwards --decode 1 --reps 5 --device-time --device-trace "$out/t/trace_q8.csv" > "$out/t/fq_dt.log" 2>&1; echo "q4 dt rc=$? $(el)"; grep -E "over 2048" "$out/t/fq_dt.log"; }
rm -f /dev/shm/lzq/q4.gguf
rm -rf /dev/shm/lzq
tar czf "$out/all.tgz" -C "$out" t && rm -rf "$out/t"
echo "done $(el)"
