#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Issue 41's "done when" in one device call: rag_bench, lazy policy, closed loop, the paper's
# setting (8B shape, 100 documents x 2048 tokens, k = 5), one row a run:
#   none_big        no tier, budget T41_BIG (4 GiB)
#   host_big        host:T41_HOST write-through, background writer, background loads (the
#                   tier's loader thread: --tier-load background, rag_bench's default)
#   host_big_pipe   the same with pipelined loads (get, checks, reorder on the serving thread)
#   host_big_sync   the same with the synchronous load (--tier-load sync)
#   none_small      no tier, budget T41_SMALL (1 GiB)
#   host_small      host tier at the small budget, background loads
#   host_small_pipe the same, pipelined
#   host_small_sync the same, synchronous
#   dir_big         dir:T41_DIR (local disk) write-through, background loads, the cost rule
#                   (--tier-cost)
#   dir_small       the same at the small budget
# (the _pipe and _sync rows are for comparison: not in the default T41_ROWS)
# and prints one table: req/s, TTFT mean, TPOT, host ms per prefill forward, tier hit and
# recomputed document tokens, loads and writes the cost rule skipped, the prefill's host ms per
# request (a request's forwards are fewer where documents come from the tier), each row's
# ratios to the no-tier run of its budget.
#   bench/serve/run_tier41.sh BUILD_DIR OUT_DIR [more rag_bench options...]
# Carry BUILD_DIR and .device-carry/clblast as for run_paper200.sh. OUT_DIR gets ROW.log,
# ROW.err, ROW.csv, ROW_summary.csv per row and tier41.md (the table).
#
# Time guard: the rows within T41_SECONDS (default 570 s): each row's rag_bench gets
# --time-limit of the time left shared by the rows left (a row cut short says CUT SHORT in its
# log and "cut" in the table), timeout(1) kills one that overruns by 15 s.
#
# Environment (defaults in brackets): T41_MODEL [8b], T41_WORKLOAD [paper], T41_REQUESTS [150],
# T41_BIG [4GiB], T41_SMALL [1GiB], T41_HOST [16GiB], T41_DIR [/tmp/lazyattn-tier41],
# T41_WRITE_QUEUE [8], T41_CONCURRENCY [4], T41_CHUNK [2048] (--prefill-chunk),
# T41_ROWS [none_big,host_big,none_small,host_small,dir_big,dir_small: the done-when's rows; a
# comma list of any above], T41_SECONDS [570],
# T41_CLBLAST [./.device-carry/clblast], T41_LOCAL [0] (1: the default OpenCL device, no NVIDIA
# set-up; the PoCL figures of docs/PERFLOG.md: T41_LOCAL=1 T41_MODEL=small T41_WORKLOAD=small
# T41_REQUESTS=100 T41_BIG=1MiB T41_SMALL=384KiB T41_HOST=64MiB bench/serve/run_tier41.sh build OUT).
set -u
build=${1:?usage: bench/serve/run_tier41.sh BUILD_DIR OUT_DIR [rag_bench options]}
out=${2:?usage: bench/serve/run_tier41.sh BUILD_DIR OUT_DIR [rag_bench options]}
shift 2
start=$(date +%s)
seconds=${T41_SECONDS:-570}
case $seconds in
''|*[!0-9]*|0?*|???????*)
    echo "run_tier41: T41_SECONDS='$seconds': a whole number of seconds" >&2
    exit 2 ;;
esac
mkdir -p "$out" || exit 1
if [ "${T41_LOCAL:-0}" != 1 ]; then
    . tools/nvidia-opencl-env.sh || exit 1
    clblast=${T41_CLBLAST:-$(pwd)/.device-carry/clblast}
    export LD_LIBRARY_PATH="$clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
big=${T41_BIG:-4GiB}
small=${T41_SMALL:-1GiB}
host="host:${T41_HOST:-16GiB}"
dir="dir:${T41_DIR:-/tmp/lazyattn-tier41}"
mkdir -p "${T41_DIR:-/tmp/lazyattn-tier41}" || exit 1
queue="--tier-write-queue ${T41_WRITE_QUEUE:-8}"
rows=$(echo "${T41_ROWS:-none_big,host_big,none_small,host_small,dir_big,dir_small}" | tr ',' ' ')
n_rows=$(echo $rows | wc -w)
worst=0
for row in $rows; do
    case $row in
    none_big)        budget=$big;   tier= ;;
    host_big)        budget=$big;   tier="--tier $host --tier-mode through $queue --tier-load background" ;;
    host_big_pipe)   budget=$big;   tier="--tier $host --tier-mode through $queue --tier-load pipelined" ;;
    host_big_sync)   budget=$big;   tier="--tier $host --tier-mode through $queue --tier-load sync" ;;
    none_small)      budget=$small; tier= ;;
    host_small)      budget=$small; tier="--tier $host --tier-mode through $queue --tier-load background" ;;
    host_small_pipe) budget=$small; tier="--tier $host --tier-mode through $queue --tier-load pipelined" ;;
    host_small_sync) budget=$small; tier="--tier $host --tier-mode through $queue --tier-load sync" ;;
    dir_big)         budget=$big;   tier="--tier $dir --tier-mode through $queue --tier-load background --tier-cost" ;;
    dir_small)       budget=$small; tier="--tier $dir --tier-mode through $queue --tier-load background --tier-cost" ;;
    *) echo "run_tier41: unknown row '$row' in T41_ROWS" >&2; exit 2 ;;
    esac
    left=$(( seconds - ($(date +%s) - start) - 10 ))
    limit=$(( left / n_rows ))
    n_rows=$((n_rows - 1))
    if [ "$limit" -lt 20 ]; then
        echo "run_tier41: $left s left for the rows from $row on: stopped" >&2
        worst=3
        break
    fi
    echo "run_tier41: $(date -u +%H:%M:%S) $row: budget $budget ${tier:-(no tier)}, --time-limit $limit"
    # shellcheck disable=SC2086 # the tier options are words
    timeout -k 5 $((limit + 15)) "$build/serve/rag_bench" \
        --model "${T41_MODEL:-8b}" --workload "${T41_WORKLOAD:-paper}" \
        --requests "${T41_REQUESTS:-150}" --warmup 0 --budget "$budget" --retained-budget \
        --policies lazy --concurrency "${T41_CONCURRENCY:-4}" --prefill-chunk "${T41_CHUNK:-2048}" \
        --no-profiling --no-progress --time-limit "$limit" $tier --out "$out/$row" "$@" \
        >"$out/$row.log" 2>"$out/$row.err"
    rc=$?
    [ $rc -ne 0 ] && echo "run_tier41: $row exited $rc (tail of $row.err below)" && tail -n 3 "$out/$row.err"
    [ $rc -gt $worst ] && worst=$rc
done
python3 - "$out" $rows >"$out/tier41.md" <<'PY'
import os, sys
out, rows = sys.argv[1], sys.argv[2:]

def tables(path):
    """The markdown tables of a rag_bench log: a list of (header, first data row) dicts."""
    found, lines = [], open(path).read().splitlines() if os.path.exists(path) else []
    for i, line in enumerate(lines):
        if line.startswith("| ") and i + 2 < len(lines) and lines[i + 1].startswith("| ---"):
            head = [c.strip() for c in line.strip("|").split("|")]
            data = [c.strip() for c in lines[i + 2].strip("|").split("|")]
            found.append(dict(zip(head, data)))
    return found

def pick(ts, key):
    for t in ts:
        if key in t:
            return t[key]
    return ""

def num(text):
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None

res = {}
for row in rows:
    ts = tables(os.path.join(out, row + ".log"))
    cut = "CUT SHORT" in (open(os.path.join(out, row + ".log")).read()
                          if os.path.exists(os.path.join(out, row + ".log")) else "")
    res[row] = dict(rps=pick(ts, "req/s"), ttft=pick(ts, "TTFT mean ms"), tpot=pick(ts, "TPOT ms"),
                    host=pick(ts, "host ms / prefill forward (forwards)"),
                    req=pick(ts, "prefill host ms / request (forwards / request)"),
                    tier=pick(ts, "tier hit tokens"), recomputed=pick(ts, "recomputed"),
                    skipped=pick(ts, "skipped by cost (loads / writes)"), cut=cut)
print("| row | req/s | TTFT mean ms | TPOT ms | host ms / prefill forward (forwards) "
      "| tier hit tokens | recomputed | skipped by cost (loads / writes) | req/s vs no tier "
      "| TTFT vs no tier | host ms vs no tier | prefill host ms / request (forwards / request) "
      "| that vs no tier |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for row in rows:
    r = res[row]
    base = res.get("none_small" if "small" in row else "none_big")
    def ratio(key):
        a, b = num(r[key]), num(base[key]) if base else None
        return "%.2fx" % (a / b) if a and b else ""
    print("| %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        row, " (cut)" if r["cut"] else "", r["rps"], r["ttft"], r["tpot"], r["host"],
        r["tier"] or "-", r["recomputed"] or "-", r["skipped"] or "-",
        ratio("rps"), ratio("ttft"), ratio("host"), r["req"] or "-", ratio("req")))
PY
cat "$out/tier41.md"
echo "run_tier41: exit $worst after $(( $(date +%s) - start )) s"
exit $worst
