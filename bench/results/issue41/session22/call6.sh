#!/bin/sh
# Session 22, call 6: which thread is call 5's busy one (tid 678: 30 % of the host row's samples,
# kernel and libc, created before the tier's own threads)? call 5's perf data resolved on the
# device (its kernel and libraries), and bench_forward's decode step beside a queue held on a
# user event (as a tier write's read-back holds the pool's reuse) against none and reads64.
set -u
top=${OUT:-/tmp/out6}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$(date +%s)
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P="env LD_LIBRARY_PATH=$PWD/.device-carry/perf/lib:$LD_LIBRARY_PATH $PWD/.device-carry/perf/perf"
d=.device-carry/perf/host5.data
for tid in 678 651 685 683; do
  echo "== tid $tid"
  $P report -i $d --time 40%-100% --tid=$tid --sort dso,sym --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -16
done
$P report -i $d --time 40%-100% --sort pid,comm --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head
timeout 150 .device-carry/bf/bench_forward --model 8b --no-forwards --decode 4 --reps 60 --background none,userevent,reads64,spin > "$top/bg.log" 2>&1; echo "bg rc=$? $(( $(date +%s) - t0 ))s"
grep "over 2048" "$top/bg.log"
