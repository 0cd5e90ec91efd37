#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The paper's setting with 200 requests in one device call (issue 16's "done when"): 100
# documents x 2048 tokens, k = 5, alpha = 2.1, closed loop, KV budgets 1 GiB and 4 GiB (kept by
# the cache between requests; the running requests' working sets on top), all four policies,
# Llama-3.1-8B shape; TTFT mean/p50/p99, TPOT, throughput, hit ratio, and lazy vs position-aware
# beside the paper's 1.37x / 1.40x.
#   bench/serve/run_paper200.sh BUILD_DIR OUT_DIR [more rag_bench options...]
# The GPU machine has the NVIDIA driver but registers only PoCL, and has no CLBlast: build here,
# carry BUILD_DIR and .device-carry/clblast (mkdir -p .device-carry/clblast &&
# cp -L /usr/lib/x86_64-linux-gnu/libclblast.so.1 .device-carry/clblast/).
# OUT_DIR gets paper200.log (stdout), paper200.err (stderr), paper200.csv (per request),
# paper200_summary.csv (per run), paper200_ttft.svg (1 GiB), paper200_ttft_budgets.svg (both
# budgets), paper200_budget.svg (throughput and hit ratio vs budget): 7 files.
#
# Time guard: the whole script within P200_SECONDS (default 570 s, under a device call's 600 s).
# rag_bench gets --time-limit of that less a margin: every run admits requests until its share of
# the time left (runs in order lazy, position, prefix, none; none runs once for both budgets, the
# budget cannot change what it does), and a run its share cuts short is marked CUT SHORT in the
# tables and complete=0 in the summary CSV (exit 3). timeout(1) kills rag_bench if that fails
# (exit 124: no tables or CSV then; the log keeps a line per finished run).
#
# Environment (defaults in brackets): P200_MODEL [8b], P200_REQUESTS [200], P200_BUDGETS
# [1GiB,4GiB], P200_CONCURRENCY [4], P200_CHUNK [2048] (--prefill-chunk), P200_SECONDS [570],
# P200_PROFILE [0] (1: profiling events, device time per phase; costs host time per forward),
# P200_CLBLAST [./.device-carry/clblast] (the folder holding the carried libclblast.so.1),
# P200_LOCAL [0] (1: the default OpenCL device, no NVIDIA set-up: a dry run on PoCL, e.g.
# P200_LOCAL=1 P200_MODEL=tiny P200_BUDGETS=256KiB,1MiB bench/serve/run_paper200.sh build /tmp/p200
# --docs 20 --doc-len 64:64).
set -u
build=${1:?usage: bench/serve/run_paper200.sh BUILD_DIR OUT_DIR [rag_bench options]}
out=${2:?usage: bench/serve/run_paper200.sh BUILD_DIR OUT_DIR [rag_bench options]}
shift 2
start=$(date +%s)
seconds=${P200_SECONDS:-570}
case $seconds in
''|*[!0-9]*|0?*|???????*)
    echo "run_paper200: P200_SECONDS='$seconds': a whole number of seconds" \
         "(digits, no leading 0, at most 6)" >&2
    exit 2 ;;
esac
mkdir -p "$out" || exit 1
if [ "${P200_LOCAL:-0}" != 1 ]; then
    . tools/nvidia-opencl-env.sh || exit 1
    clblast=${P200_CLBLAST:-$(pwd)/.device-carry/clblast}
    export LD_LIBRARY_PATH="$clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
profiling=--no-profiling
[ "${P200_PROFILE:-0}" = 1 ] && profiling=
# rag_bench's own limit leaves 20 s: the last requests' drain past its estimate, writing the
# files, and the start of the program before its clock runs; timeout(1) 8 s after that.
used=$(( $(date +%s) - start ))
limit=$((seconds - used - 20))
kill_after=$((seconds - used - 12))
if [ "$limit" -lt 30 ]; then
    echo "run_paper200: P200_SECONDS=$seconds leaves $limit s for the runs (at least 30)" >&2
    exit 2
fi
echo "run_paper200: $(date -u +%H:%M:%S) model ${P200_MODEL:-8b}, ${P200_REQUESTS:-200} requests," \
     "budgets ${P200_BUDGETS:-1GiB,4GiB}, ${P200_CONCURRENCY:-4} clients, prefill chunk" \
     "${P200_CHUNK:-2048}, rag_bench --time-limit $limit (killed at $kill_after s)"
timeout -k 5 "$kill_after" "$build/serve/rag_bench" \
    --model "${P200_MODEL:-8b}" --workload paper --requests "${P200_REQUESTS:-200}" --warmup 0 \
    --budget "${P200_BUDGETS:-1GiB,4GiB}" --retained-budget \
    --policies lazy,position,prefix,none --concurrency "${P200_CONCURRENCY:-4}" \
    --prefill-chunk "${P200_CHUNK:-2048}" $profiling --no-progress --time-limit "$limit" \
    --out "$out/paper200" "$@" >"$out/paper200.log" 2>"$out/paper200.err"
rc=$?
elapsed=$(( $(date +%s) - start ))
# the short table last: per-policy results, cut/shared notes, lazy vs position-aware
sed -n '/^| policy | budget | requests/,/^Device time/p' "$out/paper200.log" | sed '$d'
tail -n 3 "$out/paper200.err"
case $rc in
0) echo "run_paper200: COMPLETE: every run served all its requests; $elapsed s" ;;
3) echo "run_paper200: INCOMPLETE: runs cut short by the time limit (CUT SHORT above); $elapsed s" ;;
124|137) echo "run_paper200: KILLED by the $kill_after s guard after $elapsed s: no tables or CSV;" \
               "finished runs:"; grep '^# run ' "$out/paper200.log" ;;
*) echo "run_paper200: FAILED (exit $rc) after $elapsed s" ;;
esac
ls -l "$out"
exit $rc
