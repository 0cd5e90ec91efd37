#!/bin/sh
# Session 21, call 2: issue 41's rows after freed blocks come back in order and the read-backs
# move one run of consecutive blocks a copy (call 1: 8192 copies of 32 KiB a document).
set -u
top=${OUT:-/tmp/out2}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
t0=$(date +%s)
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
T41_SECONDS=${T41_SECONDS:-400} sh bench/serve/run_tier41.sh build-nv "$top/t/main"; echo "main rc=$? $(( $(date +%s) - t0 ))s"
cat "$top/t/main/tier41.md"
for f in "$top"/t/main/*.log; do echo "== $f"; grep -A2 -E '^\| policy \| budget \| (wall s|doc tokens)' "$f" | grep '^| lazy'; done
rm -rf /tmp/lazyattn-tier41
tar czf "$top/all.tgz" -C "$top" t && rm -rf "$top/t"
echo "done $(( $(date +%s) - t0 ))s"
