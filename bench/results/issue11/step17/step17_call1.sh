#!/bin/sh
# issue 11 step 17, call 1: NVIDIA's PTX of the default prefill (for its
# SASS, read offline), and the mend 6f3457d (lazyattn_decode's one reduction
# launch and one event hand-over) on the GPU: test_decode_splits and the
# decode bench with and without LAZYATTN_NV_DECODE_TIMES
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
LAZYATTN_NV_DUMP_PTX=/tmp/pf.ptx timeout 90 build-nv/examples/bench_kernels --kv-layout tiled --only prefill_b \
  --no-checks > "$OUT/prefill_b.log" 2>&1
echo "bench prefill_b rc=$?"; grep -E "^prefill_" "$OUT/prefill_b.log"
gzip -c /tmp/pf.ptx > "$OUT/prefill_default_b.ptx.gz"
LAZYATTN_TEST_FILTER=test_decode_splits LAZYATTN_LOG=info timeout 90 build-nv/tests/test_attention > "$OUT/test_decode_splits.log" 2>&1
echo "test_decode_splits: rc=$? ($(grep -c '\[       OK \]' "$OUT/test_decode_splits.log") ok)"
grep -E "FAILED|error" "$OUT/test_decode_splits.log" | head
for t in 0 1; do
  LAZYATTN_NV_DECODE_TIMES=$t timeout 90 build-nv/examples/bench_kernels --kv-layout tiled --only decode > "$OUT/decode_t$t.log" 2>&1
  echo "decode bench LAZYATTN_NV_DECODE_TIMES=$t rc=$?"; grep -E "^decode_|^check" "$OUT/decode_t$t.log" | cut -c1-160
done
ls -la "$OUT"
