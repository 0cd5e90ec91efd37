#!/bin/sh
# Session 21, call 5 (the final tree): NVIDIA runs of the tests the session touched (the
# writer's pinned-only default, freed blocks in order, the fused decode for one row by
# default); the 8B bf16 decode step by default against serve.fused_decode=0 (alternating);
# issue 41's rows; the host rows again with LAZYATTN_TUNE=tier.load_threads=4.
set -u
top=${OUT:-/tmp/out5}
a="$top/a"
out=$a bin=build-nv
. bench/gpu_call.sh
export CMOCKA_MESSAGE_OUTPUT=stdout
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for t in tests/test_tier_writer tests/test_tier_pipeline tests/test_block_pool tests/test_doc_export serve/test_gemm_fused serve/test_serve_bf16 serve/test_serve_equivalence; do
  [ -x build-nv/$t ] || { echo "no $t"; continue; }
  timeout 60 build-nv/$t > "$a/$(basename $t).log" 2>&1; echo "$t rc=$? $(el) $(grep -c '\[       OK \]' "$a/$(basename $t).log") ok $(grep -c '\[  FAILED  \]' "$a/$(basename $t).log") failed"
done
for r in 1 2; do
  for v in default 0; do
    case $v in default) tune=;; *) tune=serve.fused_decode=$v;; esac
    LAZYATTN_TUNE=$tune timeout 40 build-nv/bench/serve/bench_forward --model 8b --gemm bf16 --no-forwards --decode 1,16,64 --reps 5 > "$a/fwdbf16_$v.$r.log" 2>&1; echo "bf16 fused=$v r$r rc=$? $(el)"; grep -E "over 2048" "$a/fwdbf16_$v.$r.log"
  done
done
tar czf "$top/all.tgz" -C "$top" a
T41_SECONDS=250 LAZYATTN_LOG=info sh bench/serve/run_tier41.sh build-nv "$a/t41"; echo "t41 rc=$? $(el)"
cat "$a/t41/tier41.md"
rm -rf /tmp/lazyattn-tier41
tar czf "$top/all.tgz" -C "$top" a
left=$(( 560 - ($(date +%s) - t0) ))
[ $left -gt 50 ] && LAZYATTN_LOG=info LAZYATTN_TUNE=tier.load_threads=4 T41_ROWS=host_small,host_big T41_SECONDS=$left \
  sh bench/serve/run_tier41.sh build-nv "$a/t41thr"; echo "thr rc=$? $(el)"
cat "$a/t41thr/tier41.md" 2>/dev/null
for f in "$a"/t41*/*.log; do echo "== $f"; grep -A2 -E '^\| policy \| budget \| (wall s|doc tokens)' "$f" | grep '^| lazy'; grep -h "tier writer:\|tier loader:" "${f%.log}.err" | tail -2; done
tar czf "$top/all.tgz" -C "$top" a && rm -rf "$a"
echo "done $(el)"
