#!/bin/sh
# Session 21, call 8: the writer's read-back enqueued at the commit (its last read's event is the
# pool's use; before, a user event the reader thread completed, which NVIDIA's OpenCL resolves
# on the host for every later command of the serving queue that waits on it) against the tree
# before it (.device-carry/prev21, f0394dc's rag_bench), rows interleaved after a warm-up run
# that builds the kernels.
set -u
top=${OUT:-/tmp/out8}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LAZYATTN_LOG=info
T41_REQUESTS=4 T41_ROWS=none_big T41_SECONDS=80 sh bench/serve/run_tier41.sh build-nv "$top/t/warm" >/dev/null 2>&1; echo "warm $(el)"
run() { # name build rows seconds
  T41_ROWS=$3 T41_SECONDS=$4 sh bench/serve/run_tier41.sh "$2" "$top/t/$1" | grep -v "^| ---"; echo "$1 $(el)"
}
run a_new build-nv none_big,host_big,dir_big 75
run b_prev .device-carry/prev21 host_big,dir_big 50
run c_new build-nv none_small,host_small 50
for f in "$top"/t/[abc]*/*.log; do echo "== $f"; grep -A2 -E '^\| policy \| budget \| (wall s|doc tokens)' "$f" | grep '^| lazy'; done
rm -rf /tmp/lazyattn-tier41
tar czf "$top/all.tgz" -C "$top" t && rm -rf "$top/t"
echo "done $(el)"
