#!/bin/sh
# Session 22, call 8 (an H100): the cost rule skipping writes too, in a variant (not kept) that
# let 1 in 16 skipped loads and writes through as probes; the host store's values in pinned
# memory. The tier tests on the GPU, then issue 41's rows after a warm-up run that builds the
# kernels.
set -u
top=${OUT:-/tmp/out3}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib:$PWD/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$top/t"
( . tools/nvidia-opencl-env.sh
  export CMOCKA_MESSAGE_OUTPUT=stdout
  for t in pinned_arena tier_writer tier_pipeline; do
    timeout 120 build-nv/tests/test_$t > "$top/t/test_$t.log" 2>&1; echo "test_$t rc=$? $(grep -c '\[       OK \]' "$top/t/test_$t.log") ok"
    grep -E "FAILED|Error" "$top/t/test_$t.log" | head -3
  done )
echo "tests $(el)"
export LAZYATTN_LOG=info
T41_REQUESTS=4 T41_ROWS=none_big T41_SECONDS=80 sh bench/serve/run_tier41.sh build-nv "$top/t/warm" >/dev/null 2>&1; echo "warm $(el)"
run() { # name rows seconds
  T41_ROWS=$2 T41_SECONDS=$3 sh bench/serve/run_tier41.sh build-nv "$top/t/$1" | grep -v "^| ---"; echo "$1 $(el)"
}
run a_new none_big,host_big,none_small,host_small,dir_big,dir_small 230
for f in "$top"/t/a*/*.log; do echo "== $f"; grep -A2 -E '^\| policy \| budget \| (wall s|doc tokens)' "$f" | grep '^| lazy' | cut -c1-400; grep -h "tier writer:\|tier loader:\|pinned memory for" "${f%.log}.err" | tail -3; done
rm -rf /tmp/lazyattn-tier41
tar czf "$top/all.tgz" -C "$top" t && rm -rf "$top/t"
echo "done $(el)"
