#!/bin/sh
# Session 21, call 1: issue 41's rows on the tree with the split writer (bcd2959), the writer's
# staging ring (a86d875) and pinned loads (14802fa); then the host rows again with
# LAZYATTN_TUNE=tier.pin_loads=0 as the A/B. Output packed into $OUT/all.tgz.
set -u
top=${OUT:-/tmp/out1}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
t0=$(date +%s)
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
T41_SECONDS=360 sh bench/serve/run_tier41.sh build-nv "$top/t/main"; echo "main rc=$? $(( $(date +%s) - t0 ))s"
cat "$top/t/main/tier41.md"
left=$(( 560 - ($(date +%s) - t0) ))
if [ $left -gt 60 ]; then
  LAZYATTN_TUNE=tier.pin_loads=0 T41_ROWS=host_big,host_small T41_SECONDS=$left \
    sh bench/serve/run_tier41.sh build-nv "$top/t/nopin"; echo "nopin rc=$? $(( $(date +%s) - t0 ))s"
  cat "$top/t/nopin/tier41.md"
fi
rm -rf /tmp/lazyattn-tier41
tar czf "$top/all.tgz" -C "$top" t && rm -rf "$top/t"
echo "done $(( $(date +%s) - t0 ))s"
