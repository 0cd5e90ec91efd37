#!/bin/sh
# Session 24, call 1 (issues 36, 38): the int8 GEMV on NVIDIA at e0629ca (its tests: df1abcc's
# shared helpers never ran on a GPU), registers of its variants, and the variants timed:
# base (build-nv), hoist (the first task's weights loaded before the row is quantized), loop
# (hoist + work-groups looping over groups of row sets, 2 a compute unit: d605b79 again), loop4
# (4 a CU), nw8 (hoist + 8 weight rows a team); then the decode attention's split floor
# (nv.dsplit 8 = default, 4, 2, 1) on the Q4_K_M and BF16 steps; merge (the decode's last split
# of each sequence and KV head merges the splits: no reduction launch), its test first.
# (.device-carry/regdump: the scratch copy of what became bench/probe_kernel_regs.c)
set -u
out=${OUT:-/tmp/out1}
mkdir -p "$out/t"
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib:$PWD/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CMOCKA_MESSAGE_OUTPUT=stdout
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
V=.device-carry/var
timeout 60 build-nv/serve/test_gemv_quant > "$out/t/gemv_quant.log" 2>&1; echo "test_gemv_quant rc=$? $(el) $(grep -c '\[       OK \]' "$out/t/gemv_quant.log") ok"; grep -E "FAILED|rror" "$out/t/gemv_quant.log" | head -5
for v in loop hoist; do timeout 60 $V/$v/test_gemv_quant > "$out/t/gemv_quant_$v.log" 2>&1; echo "test_gemv_quant $v rc=$? $(el) $(grep -c '\[       OK \]' "$out/t/gemv_quant_$v.log") ok"; grep -E "FAILED" "$out/t/gemv_quant_$v.log" | head -3; done
LAZYATTN_TEST_FILTER=test_decode_splits timeout 90 $V/merge/test_attention > "$out/t/merge_attention.log" 2>&1; echo "merge test_decode_splits rc=$? $(el) $(grep -c '\[       OK \]' "$out/t/merge_attention.log") ok"; grep -E "FAILED|rror|worst" "$out/t/merge_attention.log" | head -5
for v in base hoist loop nw8; do
  src=serve/gemv_quant.cl; [ $v = base ] || src=$V/$v/gemv_quant.cl
  timeout 60 .device-carry/regdump $src "-cl-std=CL1.2 -DGQ_TYPE=12 -DGQ_NV_DP4A" "-cl-std=CL1.2 -DGQ_TYPE=14 -DGQ_NV_DP4A" > "$out/t/reg_$v.log" 2>&1
  echo "regs $v $(el): $(grep -A3 "serve_gemv_q8_f32'" "$out/t/reg_$v.log" | grep -oE 'Used [0-9]+ registers|[0-9]+ bytes spill stores' | tr '\n' ' ')"
done
mkdir -p /dev/shm/lzq
timeout 90 build-nv/bench/serve/write_gguf --out /dev/shm/lzq/q4.gguf --shape 8b --form q4_k_m > "$out/t/write_q4.log" 2>&1; echo "write q4 rc=$? $(el)"
bb() { case $1 in base) echo build-nv/bench/serve;; *) echo $V/$1;; esac; }
for v in base hoist loop loop4 nw8; do
  timeout 40 $(bb $v)/bench_gemv_quant --rows 1 --types q4_k,q6_k --reps 20 > "$out/t/gemv_$v.log" 2>&1; echo "gemv $v rc=$? $(el)"; grep "gemv x" "$out/t/gemv_$v.log" | awk '{print $1, $2, $3, $(NF-5), $(NF-4)}' | tr '\n' ';'; echo
done
fq() { # tag variant tune
  [ $(( $(date +%s) - t0 )) -lt 520 ] || { echo "skip $1"; return; }
  LAZYATTN_TUNE=$3 timeout 60 $(bb $2)/bench_forward --gguf /dev/shm/lzq/q4.gguf --no-forwards --decode 1 --reps 5 > "$out/t/fq_$1.log" 2>&1; echo "q4 $1 rc=$? $(el) $(grep -E 'over 2048' "$out/t/fq_$1.log")"
}
fb() { # tag tune
  [ $(( $(date +%s) - t0 )) -lt 520 ] || { echo "skip $1"; return; }
  LAZYATTN_TUNE=$2 timeout 60 build-nv/bench/serve/bench_forward --model 8b --gemm bf16 --no-forwards --decode 1,16 --reps 5 > "$out/t/fb_$1.log" 2>&1; echo "bf16 $1 rc=$? $(el)"; grep -E 'over 2048' "$out/t/fb_$1.log"
}
fq base1 base serve.gemv_q8=1
fq hoist1 hoist serve.gemv_q8=1
fq loop1 loop serve.gemv_q8=1
fq nw81 nw8 serve.gemv_q8=1
fq ds4 base nv.dsplit=4
fq ds2 base nv.dsplit=2
fq merge8 merge nv.dsplit=8
fq merge2 merge nv.dsplit=2
fb ds8 nv.dsplit=8
fb ds2 nv.dsplit=2
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ $(( $(date +%s) - t0 )) -lt 420 ]; then
  (cd bench && timeout 80 python3 llama_peer.py --no-forwards --reps 5 --decode 1 --decode-context 2048) > "$out/t/peer.log" 2>&1; echo "peer rc=$? $(el)"; grep -E "^decode_" "$out/t/peer.log"
fi
fq base2 base serve.gemv_q8=1
fq loop2 loop serve.gemv_q8=1
fq nw82 nw8 serve.gemv_q8=1
fq hoist2 hoist serve.gemv_q8=1
fq merge2b merge nv.dsplit=2
fq ds2b base nv.dsplit=2
fq q0 base serve.gemv_q8=0
[ $(( $(date +%s) - t0 )) -lt 540 ] && { LAZYATTN_LOG=info LAZYATTN_TUNE=nv.decode_times=1,nv.dsplit=2 timeout 40 build-nv/bench/serve/bench_forward --gguf /dev/shm/lzq/q4.gguf --no-forwards --decode 1 --reps 2 --device-time > "$out/t/fq_times.log" 2>&1; echo "times rc=$? $(el)"; grep -m3 "decode times" "$out/t/fq_times.log"; }
rm -rf /dev/shm/lzq
tar czf "$out/all.tgz" -C "$out" t && rm -rf "$out/t"
echo "done $(el)"
