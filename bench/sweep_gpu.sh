#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Tuning sweep on the lent H200 (one device call): the launch-geometry
# overrides of LAZYATTN_TUNE (README, "Environment") over the benchmark shapes, no checks.
#   usage: sh bench/sweep_gpu.sh OUTDIR "prefill settings" "decode settings"
#   (each setting a LAZYATTN_TUNE value, e.g. "nv.kt=32,nv.warps=8 nv.wgmma=0" "nv.dstages=4,nv.waves=6")
set -u
out=$1; mkdir -p "$out"
. tools/nvidia-opencl-env.sh
for p in $2; do
  echo "== LAZYATTN_TUNE=$p"
  LAZYATTN_TUNE=$p timeout 120 build-nv/examples/bench_kernels --no-checks --only prefill --reps 20 \
    > "$out/p_$p.log" 2>&1; grep -E "^prefill|rc|error|fail" "$out/p_$p.log"
done
for d in $3; do
  echo "== LAZYATTN_TUNE=$d"
  LAZYATTN_TUNE=$d timeout 120 build-nv/examples/bench_kernels --no-checks --only decode --reps 20 \
    > "$out/d_$d.log" 2>&1; grep -E "^decode|error|fail" "$out/d_$d.log"
done
