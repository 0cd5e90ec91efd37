#!/bin/sh
# issue 11 step 16, call 4 (the session's device time left: ~400 s): two
# copying warps the default with bulk pages; test_attention and
# test_prefill_batched on the default path (the paths without the producer
# and without wgmma have no copying warps: unchanged since call 2), then the
# bench and the peer of run_gpu.sh
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LAZYATTN_LOG=info timeout 200 build-nv/tests/test_attention > "$OUT/test_attention.log" 2>&1
echo "test_attention: rc=$? ($(grep -c '\[       OK \]' "$OUT/test_attention.log") ok, $(grep -c 'producer warp' "$OUT/test_attention.log") with the producer)"
grep -E "^# d=|^# prefill order|FAILED" "$OUT/test_attention.log" | cut -c1-150 | head -14
LAZYATTN_LOG=info timeout 60 build-nv/tests/test_prefill_batched > "$OUT/test_prefill_batched.log" 2>&1
echo "test_prefill_batched: rc=$? ($(grep -c '\[       OK \]' "$OUT/test_prefill_batched.log") ok)"
SKIP_TESTS=1 sh bench/run_gpu.sh "$OUT/fin" 2>&1 | grep -E "^checks|^check .*fail|^prefill_|^decode_|Used|rc=|shape|ratio" | cut -c1-150 | tail -30
