#!/bin/sh
# Session 21, call 6: issue 41's rows on the final tree (pinned-only writes, four threads
# copying a load into its pinned slot, both by default on a discrete device), with the tier's
# info log.
set -u
top=${OUT:-/tmp/out6}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
t0=$(date +%s)
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LAZYATTN_LOG=info T41_SECONDS=300 sh bench/serve/run_tier41.sh build-nv "$top/t"; echo "t41 rc=$? $(( $(date +%s) - t0 ))s"
cat "$top/t/tier41.md"
for f in "$top"/t/*.log; do echo "== $f"; grep -A2 -E '^\| policy \| budget \| (wall s|doc tokens)' "$f" | grep '^| lazy'; grep -h "tier writer:\|tier loader:" "${f%.log}.err" | tail -2; done
rm -rf /tmp/lazyattn-tier41
tar czf "$top/all.tgz" -C "$top" t && rm -rf "$top/t"
echo "done $(( $(date +%s) - t0 ))s"
