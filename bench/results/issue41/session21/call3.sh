#!/bin/sh
# Session 21, call 3: issue 41's rows after the serving thread's uploads come from pinned
# staging (serve/model.c), with the tier's info log (read-backs and uploads by memory: pinned or
# pageable); then the host and directory rows with LAZYATTN_TUNE=tier.pin_writes=1 (the writer
# drops a write rather than read back into pageable memory).
set -u
top=${OUT:-/tmp/out3}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
t0=$(date +%s)
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LAZYATTN_LOG=info
T41_SECONDS=300 sh bench/serve/run_tier41.sh build-nv "$top/t/main"; echo "main rc=$? $(( $(date +%s) - t0 ))s"
cat "$top/t/main/tier41.md"
rm -rf /tmp/lazyattn-tier41
left=$(( 540 - ($(date +%s) - t0) ))
LAZYATTN_TUNE=tier.pin_writes=1 T41_ROWS=host_big,host_small,dir_big T41_SECONDS=$left \
  sh bench/serve/run_tier41.sh build-nv "$top/t/pinw"; echo "pinw rc=$? $(( $(date +%s) - t0 ))s"
cat "$top/t/pinw/tier41.md"
for f in "$top"/t/*/*.log; do echo "== $f"; grep -A2 -E '^\| policy \| budget \| (wall s|doc tokens)' "$f" | grep '^| lazy'; grep -h "tier writer:\|tier loader:" "${f%.log}.err" | tail -2; done
rm -rf /tmp/lazyattn-tier41
tar czf "$top/all.tgz" -C "$top" t && rm -rf "$top/t"
echo "done $(( $(date +%s) - t0 ))s"
