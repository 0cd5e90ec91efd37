#!/bin/sh
# Session 22, call 4 (as run the second time; the first lost LD_LIBRARY_PATH under perf):
# where the serving thread's extra CPU goes beside the tier. perf (carried:
# .device-carry/perf, Debian's linux-perf 6.1 and its libraries) samples rag_bench at 999 Hz
# in issue 41's none_big and host_big rows (after a warm-up run that builds the kernels); per
# thread, then the main (serving) thread's samples by library and symbol. Then bench_forward's
# decode step beside a spinning core (spin: no memory, no driver) against none and copy.
set -u
top=${OUT:-/tmp/out4}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P="env LD_LIBRARY_PATH=$PWD/.device-carry/perf/lib:$LD_LIBRARY_PATH $PWD/.device-carry/perf/perf"
$P --version; cat /proc/sys/kernel/perf_event_paranoid
mkdir -p "$top/t"
build-nv/serve/rag_bench --model 8b --workload paper --requests 4 --warmup 0 --budget 4GiB \
  --retained-budget --policies lazy --concurrency 4 --prefill-chunk 2048 --no-profiling \
  --no-progress --out "$top/t/warm" > "$top/t/warm.log" 2> "$top/t/warm.err"; echo "warm rc=$? $(el)"
for row in none host; do
  case $row in none) set -- ;; host) set -- --tier host:16GiB --tier-mode through --tier-write-queue 8 --tier-load background ;; esac
  $P record -F 999 -o "$top/t/$row.data" -- build-nv/serve/rag_bench --model 8b --workload paper \
    --requests 150 --warmup 0 --budget 4GiB --retained-budget --policies lazy --concurrency 4 \
    --prefill-chunk 2048 --no-profiling --no-progress --time-limit 60 --out "$top/t/$row" "$@" \
    > "$top/t/$row.log" 2> "$top/t/$row.err"
  echo "$row rc=$? $(el)"
  grep -A2 -E '^\| policy \| budget \| wall s' "$top/t/$row.log" | grep '^| lazy' | cut -c1-200
  $P report -i "$top/t/$row.data" --sort pid --stdio -q 2>/dev/null | head -12 > "$top/t/$row.threads"
  cat "$top/t/$row.threads"
  main=$($P script -i "$top/t/$row.data" -F pid 2>/dev/null | head -1 | tr -d ' ')
  $P report -i "$top/t/$row.data" --tid="$main" --sort dso --stdio -q 2>/dev/null | head -12 > "$top/t/$row.main_dso"
  $P report -i "$top/t/$row.data" --tid="$main" --sort dso,sym --stdio -q 2>/dev/null | head -45 > "$top/t/$row.main_sym"
  echo "-- main thread $main by dso"; cat "$top/t/$row.main_dso"; echo "-- by symbol"; head -30 "$top/t/$row.main_sym"
done
echo "perf done $(el)"
# (call 4a ran bench_forward here: none 2.18, spin 2.07, copy 2.82 CPU ms a 4 x 1 decode step)
tar czf "$top/all.tgz" -C "$top" t && rm -rf "$top/t"
echo "done $(el)"
