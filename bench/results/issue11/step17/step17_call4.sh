#!/bin/sh
# issue 11 step 17, call 4 (review): LZ_NV_PV_ISSUE made one body with
# LZ_NV_PV_ISSUE_D (the V descriptor moved on by its address field instead of
# made from each 16 keys' address: the same descriptors). The default
# kernel's PTX is unchanged; the paths that still call LZ_NV_PV_ISSUE are
# checked here: test_attention without the producer, and the bench's checks
# and timings without the producer, with -DLZ_NV_PDESC=0 and -DLZ_NV_PINGPONG=0
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LAZYATTN_NV_PRODUCER=0 timeout 220 build-nv/tests/test_attention > "$OUT/test_attention_noprod.log" 2>&1
echo "test_attention with LAZYATTN_NV_PRODUCER=0: rc=$? ($(grep -c '\[       OK \]' "$OUT/test_attention_noprod.log") ok)"
grep -E "FAILED" "$OUT/test_attention_noprod.log" | head
for v in "noprod|LAZYATTN_NV_PRODUCER=0" "pdesc0|LAZYATTN_NV_DEFINES=-DLZ_NV_PDESC=0" "pp0|LAZYATTN_NV_DEFINES=-DLZ_NV_PINGPONG=0" "default|X=0"; do
  name=${v%%|*} envs=${v#*|}
  env "$envs" timeout 90 build-nv/examples/bench_kernels --kv-layout tiled --only prefill > "$OUT/bench_$name.log" 2>&1
  echo "bench prefill $name rc=$?"; grep -E "^checks|^check .*fail|^prefill_" "$OUT/bench_$name.log"
done
