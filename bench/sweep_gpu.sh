#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Tuning sweep on the lent H200 (one device call): the launch-geometry
# overrides of lib/attention.c over the benchmark shapes, no checks.
#   usage: sh bench/sweep_gpu.sh OUTDIR "prefill settings" "decode settings"
set -u
out=$1; mkdir -p "$out"
. tools/nvidia-opencl-env.sh
for p in $2; do
  echo "== LAZYATTN_NV_PREFILL=$p"
  LAZYATTN_NV_PREFILL=$p timeout 120 build-nv/examples/bench_kernels --no-checks --only prefill --reps 20 \
    > "$out/p_$p.log" 2>&1; grep -E "^prefill|rc|error|fail" "$out/p_$p.log"
done
for d in $3; do
  echo "== LAZYATTN_NV_DECODE=$d"
  LAZYATTN_NV_DECODE=$d timeout 120 build-nv/examples/bench_kernels --no-checks --only decode --reps 20 \
    > "$out/d_$d.log" 2>&1; grep -E "^decode|error|fail" "$out/d_$d.log"
done
