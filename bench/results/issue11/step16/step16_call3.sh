#!/bin/sh
# issue 11 step 16, call 3: the producer's copying warps with bulk pages, the
# row sums by wgmma again, and NVIDIA's PTX of the default prefill (for its SASS)
TESTS=0 BUDGET_S=220 VARIANTS="def|tiled||0|prefill
pw2|tiled|-DLZ_NV_PWARPS=2|1|prefill
pw1|tiled|-DLZ_NV_PWARPS=1|1|prefill
lwg|tiled|-DLZ_NV_L_WG=1|0|prefill
def2|tiled||0|prefill" sh bench/run_tiled_gpu.sh "$OUT/pf" 2>&1 | grep -E "^prefill_|rc=|^checks|Used|spill|shape|C75" | cut -c1-150
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LAZYATTN_NV_DUMP_PTX=/tmp/pf.ptx timeout 60 build-nv/examples/bench_kernels --kv-layout tiled --only prefill_b_2x8192_causal \
  --no-checks 2>&1 | grep -E "^prefill_"
gzip -c /tmp/pf.ptx > "$OUT/prefill_default_b.ptx.gz"; ls -la "$OUT"
