#!/bin/sh
# Session 24, call 5 (issues 36, 38), prepared, not run (the session's device time ran out):
# the decode's self-merging splits (branch merge-clean: the last split of each sequence and KV
# head merges them, no reduction launch; both exits of the kernel merge) tested and timed against
# main with nv.dsplit=2; the int8 GEMV's work-groups looping over row sets without the hoisted
# load (branch var-loopnh): registers, test, bench, step.
# Variant binaries: build each branch (meson setup b --buildtype=release -Dspirv=disabled
# -Dclblast=enabled -Dredis=disabled) and copy bench_forward, test_attention (merge) or
# bench_forward, bench_gemv_quant, test_gemv_quant, serve/gemv_quant.cl (loopnh) into
# .device-carry/var/merge and .device-carry/var/loopnh; carry .device-carry/var and
# .device-carry/probe_kernel_regs (bench/probe_kernel_regs.c, built by hand: the line at its top).
set -u
out=${OUT:-/tmp/out5}
mkdir -p "$out/t" /dev/shm/lzq
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib:$PWD/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CMOCKA_MESSAGE_OUTPUT=stdout
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
V=.device-carry/var
LAZYATTN_TEST_FILTER=test_decode_splits timeout 90 $V/merge/test_attention > "$out/t/merge_attention.log" 2>&1; echo "merge test rc=$? $(el) $(grep -c '\[       OK \]' "$out/t/merge_attention.log") ok"; grep -E "FAILED|error" "$out/t/merge_attention.log" | head -4
timeout 60 $V/loopnh/test_gemv_quant > "$out/t/gemv_quant_loopnh.log" 2>&1; echo "loopnh test rc=$? $(el) $(grep -c '\[       OK \]' "$out/t/gemv_quant_loopnh.log") ok"
timeout 60 .device-carry/probe_kernel_regs $V/loopnh/gemv_quant.cl "-cl-std=CL1.2 -DGQ_TYPE=12 -DGQ_NV_DP4A" > "$out/t/reg_loopnh.log" 2>&1; echo "regs loopnh: $(grep -A3 "serve_gemv_q8_f32'" "$out/t/reg_loopnh.log" | grep -oE 'Used [0-9]+ registers|[0-9]+ bytes spill stores' | tr '\n' ' ')"
for v in base loopnh; do b=build-nv/bench/serve; [ $v = base ] || b=$V/$v; timeout 40 $b/bench_gemv_quant --rows 1 --types q4_k,q6_k --reps 20 > "$out/t/gemv_$v.log" 2>&1; echo "gemv $v $(el)"; grep "gemv x" "$out/t/gemv_$v.log" | awk '{print $1, $2, $3, $(NF-5), $(NF-4)}' | tr '\n' ';'; echo; done
timeout 60 build-nv/bench/serve/write_gguf --out /dev/shm/lzq/q4.gguf --shape 8b --form q4_k_m > /dev/null 2>&1; echo "write $(el)"
for r in 1 2; do for v in base merge loopnh; do
  b=build-nv/bench/serve; [ $v = base ] || b=$V/$v
  LAZYATTN_TUNE=nv.dsplit=2 timeout 60 $b/bench_forward --gguf /dev/shm/lzq/q4.gguf --no-forwards --decode 1 --reps 5 > "$out/t/fq_$v.$r.log" 2>&1; echo "q4 $v r$r $(el) $(grep 'over 2048' "$out/t/fq_$v.$r.log")"
done; done
for v in base merge; do b=build-nv/bench/serve; [ $v = base ] || b=$V/$v
  LAZYATTN_TUNE=nv.dsplit=2 timeout 60 $b/bench_forward --model 8b --gemm bf16 --no-forwards --decode 1,16,64 --reps 5 > "$out/t/fb_$v.log" 2>&1; echo "bf16 $v $(el)"; grep "over 2048" "$out/t/fb_$v.log"
done
rm -rf /dev/shm/lzq
tar czf "$out/all.tgz" -C "$out" t && rm -rf "$out/t"
echo "done $(el)"
