#!/bin/sh
# Prepared in session 23, not run (the device time ran out).
# Session 23 (issue 41): the directory rows with the measured store bandwidth (7f420c6:
# rag_bench --tier-cost probes the store once at start; never measured on a GPU), beside the
# no-tier rows of the same budgets, after a warm-up run that builds the kernels.
set -u
top=${OUT:-/tmp/out41}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib:$PWD/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$top/t"
export LAZYATTN_LOG=info
T41_REQUESTS=4 T41_ROWS=none_big T41_SECONDS=80 sh bench/serve/run_tier41.sh build-nv "$top/t/warm" >/dev/null 2>&1; echo "warm $(el)"
T41_ROWS=none_big,dir_big,none_small,dir_small T41_SECONDS=${T41_SECONDS:-400} sh bench/serve/run_tier41.sh build-nv "$top/t/a" | grep -v "^| ---"; echo "rows $(el)"
for f in "$top"/t/a/*.log; do echo "== $f"; grep -A2 -E '^\| policy \| budget \| (wall s|doc tokens)' "$f" | grep '^| lazy' | cut -c1-400; grep -h "tier-cost\|skipped" "${f%.log}.err" | tail -3; done
rm -rf /tmp/lazyattn-tier41
tar czf "$top/all.tgz" -C "$top" t && rm -rf "$top/t"
echo "done $(el)"
