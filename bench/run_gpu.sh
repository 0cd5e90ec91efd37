#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# One device call on the lent H200: the attention test on the GPU (fast
# path), the kernel benchmark (ceilings, checks, timings) and the torch SDPA
# peer, the ratio table printed last. Build here first (meson setup build-nv
# && ninja -C build-nv) and carry build-nv; libcmocka.so.0 goes in
# build-nv/extra-lib (the GPU machine has none). The benches use pools of
# KV_LAYOUT pages (default tiled, the faster on the H200: issue 11 step 10;
# rows for the layout measured before it); the tests cover both.
#   usage: [KV_LAYOUT=tiled|rows] sh bench/run_gpu.sh [OUTDIR]
# The portable kernels' figures (README "Portable kernels on the H200"):
#   LAZYATTN_PORTABLE=1 KV_LAYOUT=rows SKIP_TESTS=1 sh bench/run_gpu.sh [OUTDIR]
# serve/'s figures: bench/serve/run_gpu.sh (GEMMs, forward) and
# bench/serve/run_paper200.sh (rag_bench, the paper's 200 requests).
set -u
layout=${KV_LAYOUT:-tiled}
out=${1:-${OUT:-/tmp/lazyattn-out}}
mkdir -p "$out"
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 300 build-nv/tests/test_attention > "$out/test_attention.log" 2>&1
  echo "test_attention on the GPU: rc=$? ($(grep -c '\[       OK \]' "$out/test_attention.log") ok)"
  grep -E "^# |FAILED|error" "$out/test_attention.log" | head -20
  # batched ragged prefill against per-sequence prefill (bits) and the reference, fast path
  LAZYATTN_LOG=info timeout 300 build-nv/tests/test_prefill_batched > "$out/test_prefill_batched.log" 2>&1
  echo "test_prefill_batched on the GPU: rc=$? ($(grep -c '\[       OK \]' "$out/test_prefill_batched.log") ok, $(grep -c 'NVIDIA tensor-core path' "$out/test_prefill_batched.log") attention objects on the fast path)"
  grep -E "^# |FAILED|error" "$out/test_prefill_batched.log" | head -20
  # the wgmma prefill without its producer warpgroup (LAZYATTN_TUNE=nv.producer=0)
  LAZYATTN_TUNE=nv.producer=0 timeout 120 build-nv/tests/test_attention > "$out/test_attention_noprod.log" 2>&1
  echo "test_attention with nv.producer=0: rc=$? ($(grep -c '\[       OK \]' "$out/test_attention_noprod.log") ok)"
  # the other prefill (the default is wgmma on compute capability 9.x, mma.sync
  # elsewhere): mma.sync forced, same tests and bench checks
  LAZYATTN_TUNE=nv.wgmma=0 timeout 300 build-nv/tests/test_attention > "$out/test_attention_mma.log" 2>&1
  echo "test_attention with nv.wgmma=0: rc=$? ($(grep -c '\[       OK \]' "$out/test_attention_mma.log") ok)"
  LAZYATTN_TUNE=nv.wgmma=0 timeout 300 build-nv/bench/bench_kernels --kv-layout "$layout" --only prefill > "$out/bench_mma.log" 2>&1
  echo "bench_kernels prefill with nv.wgmma=0: rc=$?"
  grep -E "^check|^checks|^prefill" "$out/bench_mma.log"
fi
LAZYATTN_TUNE=nv.verbose=1 timeout 300 build-nv/bench/bench_kernels --kv-layout "$layout" --csv "$out/ours.csv" > "$out/bench.log" 2>&1
echo "bench_kernels rc=$?"
grep -v "^\[log 3\] build log" "$out/bench.log" | grep -E -v "^$" | tail -40
grep -E "registers|spill" "$out/bench.log" | head -12
[ -s "$out/ours.csv" ] && timeout 200 python3 bench/sdpa_peer.py --ours "$out/ours.csv" 2>&1 | tee "$out/peer.log"
