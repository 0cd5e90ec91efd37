#!/bin/sh
# Session 23, call 2 (issue 36; call 1 again after the local-alignment fix): the int8 GEMV (serve.gemv_q8, dp4a) on NVIDIA: its tests,
# bench_gemv_quant rows 1 with it off and on, the 8B Q4_K_M decode step with it off and on
# alternating, the BF16 step (random weights) beside, one traced step, the torch peer if time.
set -u
out=${OUT:-/tmp/out2}
mkdir -p "$out/t"
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib:$PWD/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CMOCKA_MESSAGE_OUTPUT=stdout
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
tst() { # name binary [env...]
  n=$1 b=$2; shift 2
  env "$@" timeout 120 "$b" > "$out/t/$n.log" 2>&1; echo "$n rc=$? $(el) $(grep -c '\[       OK \]' "$out/t/$n.log") ok"
  grep -E "FAILED|rror" "$out/t/$n.log" | head -4
}
tst gemv_quant build-nv/serve/test_gemv_quant
grep -E "^# int8" "$out/t/gemv_quant.log" | head -4
tst write_gguf build-nv/tests/test_write_gguf WRITE_GGUF=$PWD/build-nv/bench/serve/write_gguf
grep -E "int8|q4_k_m.gguf" "$out/t/write_gguf.log"
tst gguf_fixtures build-nv/serve/test_gguf_fixtures LAZYATTN_FIXTURES=$PWD/tests/fixtures
grep -E "int8" "$out/t/gguf_fixtures.log"
tst serve_quant build-nv/serve/test_serve_quant
for q in 0 1 0 1; do
  LAZYATTN_TUNE=serve.gemv_q8=$q timeout 40 build-nv/bench/serve/bench_gemv_quant --rows 1 --types q4_k,q6_k --reps 20 > "$out/t/gemv_q8$q.log" 2>&1; echo "gemv q8=$q rc=$? $(el)"; grep "gemv x" "$out/t/gemv_q8$q.log"
done
mkdir -p /dev/shm/lzq
timeout 60 build-nv/bench/serve/write_gguf --out /dev/shm/lzq/q4.gguf --shape 8b --form q4_k_m > "$out/t/write_q4.log" 2>&1; echo "write q4 rc=$? $(el)"
fq() { # tag q8 [extra]
  tag=$1 q=$2; shift 2
  [ $(( $(date +%s) - t0 )) -lt 500 ] || { echo "skip $tag"; return; }
  LAZYATTN_TUNE=serve.gemv_q8=$q timeout 60 build-nv/bench/serve/bench_forward --gguf /dev/shm/lzq/q4.gguf --no-forwards --decode 1 --reps 5 "$@" > "$out/t/fq_$tag.log" 2>&1; echo "fwd q4 $tag rc=$? $(el)"; grep -E "over 2048|enqueue" "$out/t/fq_$tag.log" | head -3
}
fb() {
  [ $(( $(date +%s) - t0 )) -lt 490 ] || { echo "skip bf16 $1"; return; }
  timeout 60 build-nv/bench/serve/bench_forward --model 8b --gemm bf16 --no-forwards --decode 1 --reps 5 > "$out/t/fb_$1.log" 2>&1; echo "fwd bf16 $1 rc=$? $(el)"; grep -E "over 2048" "$out/t/fb_$1.log"
}
fq q1a 1; fq q0a 0; fb a; fq q1b 1; fq q0b 0; fb b
for v in pipe g4 g1 wg128; do # variants: loads of the next task first (GQ8_PIPE); work-groups a CU 4 and 1; 128 work-items
  [ -x .device-carry/var/$v/bench_forward ] || continue
  [ $(( $(date +%s) - t0 )) -lt 430 ] || { echo "skip var $v"; continue; }
  timeout 30 .device-carry/var/$v/bench_gemv_quant --rows 1 --types q4_k,q6_k --reps 20 > "$out/t/gemv_$v.log" 2>&1; echo "gemv $v rc=$? $(el)"; grep "gemv x" "$out/t/gemv_$v.log" | awk '{print $1, $2, $3, $(NF-5), $(NF-4)}' | tr '\n' ';'; echo
  timeout 50 .device-carry/var/$v/bench_forward --gguf /dev/shm/lzq/q4.gguf --no-forwards --decode 1 --reps 5 > "$out/t/fq_$v.log" 2>&1; echo "fwd q4 $v rc=$? $(el)"; grep -E "over 2048" "$out/t/fq_$v.log"
done
fq q1c 1
fq q1dt 1 --device-time --device-trace "$out/t/trace_q8.csv"
grep -E "decode step|gemm|GEMM" "$out/t/fq_q1dt.log" | head -8
rm -rf /dev/shm/lzq
if [ $(( $(date +%s) - t0 )) -lt 480 ]; then
  (cd bench && timeout 70 python3 llama_peer.py --no-forwards --reps 5 --decode 1 --decode-context 2048) > "$out/t/peer.log" 2>&1; echo "peer rc=$? $(el)"; grep -E "^decode_" "$out/t/peer.log"
fi
tar czf "$out/all.tgz" -C "$out" t && rm -rf "$out/t"
echo "done $(el)"
