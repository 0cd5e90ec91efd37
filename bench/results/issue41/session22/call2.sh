#!/bin/sh
# Session 22, call 2: is call 1's slower serving thread (CPU ms of a decode step up 25-70 % beside
# any background kind) the SMT sibling or the shared caches? The timing thread pinned to CPU 2;
# the background on its sibling (when the CPU has SMT), then on other physical cores.
set -u
out=${OUT:-/tmp/out2}
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA|L2|L3)" 
sib=$(cat /sys/devices/system/cpu/cpu2/topology/thread_siblings_list); echo "siblings of 2: $sib"
far=$(for c in $(seq 4 15); do s=$(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list); case ",$s," in *,2,*) ;; *) printf '%s,' $c;; esac; done | sed 's/,$//')
echo "far: $far"
t0=$(date +%s)
F=build-nv/bench/serve/bench_forward
common="--model 8b --no-forwards --decode 4 --reps 60 --serving-cpu 2"
other=$(echo "$sib" | tr ',' '\n' | grep -vx 2 | head -1)
if [ -n "$other" ]; then
  timeout 150 $F $common --background none,copy,reads64 --background-cpus "$other" > "$out/sib.log" 2>&1; echo "sib rc=$? $(( $(date +%s) - t0 ))s"
fi
timeout 200 $F $common --background none,copy,copy4,faults,reads64,reads1,writes64 --background-cpus "$far" > "$out/far.log" 2>&1; echo "far rc=$? $(( $(date +%s) - t0 ))s"
timeout 150 $F --model 8b --no-forwards --decode 4 --reps 60 --background copy,none,reads64 > "$out/free.log" 2>&1; echo "free rc=$? $(( $(date +%s) - t0 ))s"
for f in sib far free; do echo "== $f"; grep -E "over 2048" "$out/$f.log"; done
