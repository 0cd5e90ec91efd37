#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Issue 39's figures on a host of two GPUs (nvidia-h200-x2) in one device call: rag_bench
# --devices on the paper's setting (100 documents x 2048 tokens, k = 5, alpha = 2.1),
# Llama-3.1-8B shape, lazy policy, a 4 GiB budget per GPU kept between requests, a directory tier
# on /dev/shm shared by the processes: one GPU, then both, each run once with separate caches and
# once sharing the tier. The host's clients scale with the GPUs (DEV_CLIENTS per GPU), so that
# each run loads its GPUs alike. Prints the tables, then: throughput on two GPUs / one (shared
# tier; issue 39: >= 1.8), recomputed document tokens shared / separate on two GPUs (<= 0.55),
# and the per-device TTFT p50/p99 rows.
#   bench/serve/run_devices.sh BUILD_DIR OUT_DIR [more rag_bench options...]
# Build and carry as bench/serve/run_paper200.sh says (BUILD_DIR, .device-carry/clblast). The
# GPUs' indices are read from list_devices (its GPU rows; PoCL is listed too).
# OUT_DIR gets one.log / one.err and two.log / two.err (stdout and stderr of each run).
#
# Environment (defaults in brackets): DEV_MODEL [8b], DEV_REQUESTS [100], DEV_CLIENTS [4],
# DEV_BALANCE [least], DEV_BUDGET [4GiB], DEV_SECONDS [90] (--run-seconds: each phase stops
# dispatching after this long; a phase cut short is marked, exit 3), DEV_RUN_SECONDS [280]
# (timeout(1) of each run), DEV_TIER [/dev/shm/lazyattn-devices], DEV_LOCAL [0] (1: no NVIDIA
# set-up, devices "0" and "0,0": a dry run on PoCL, e.g. DEV_LOCAL=1 DEV_MODEL=tiny
# DEV_BUDGET=1MiB bench/serve/run_devices.sh build /tmp/dev --docs 20 --doc-len 64:64).
set -u
build=${1:?usage: bench/serve/run_devices.sh BUILD_DIR OUT_DIR [rag_bench options]}
out=${2:?usage: bench/serve/run_devices.sh BUILD_DIR OUT_DIR [rag_bench options]}
shift 2
mkdir -p "$out" || exit 1
if [ "${DEV_LOCAL:-0}" = 1 ]; then
    one=0 two=0,0
else
    # shellcheck disable=SC1091
    . tools/nvidia-opencl-env.sh || exit 1
    LD_LIBRARY_PATH="$(pwd)/.device-carry/clblast${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
    nvidia-smi --query-gpu=index,name,clocks.sm,temperature.gpu,power.draw --format=csv
    # the first two GPU rows of list_devices: "#N  GPU ..."
    two=$("$build/examples/list_devices" |
          awk '$2 == "GPU" && n < 2 { sub("#", "", $1); s = s (n++ ? "," : "") $1 } END { print s }')
    one=${two%%,*}
    if [ "$one" = "$two" ]; then
        echo "run_devices: fewer than two GPUs in list_devices:" >&2
        "$build/examples/list_devices" >&2
        exit 1
    fi
fi
clients=${DEV_CLIENTS:-4}
tier=${DEV_TIER:-/dev/shm/lazyattn-devices}
rc_all=0
for run in one two; do
    if [ $run = one ]; then devices=$one n=1; else devices=$two n=2; fi
    echo "run_devices: $(date -u +%H:%M:%S) --devices $devices, $((clients * n)) clients"
    timeout -k 5 "${DEV_RUN_SECONDS:-280}" "$build/serve/rag_bench" \
        --model "${DEV_MODEL:-8b}" --workload paper --requests "${DEV_REQUESTS:-100}" --warmup 0 \
        --budget "${DEV_BUDGET:-4GiB}" --retained-budget --policies lazy --no-profiling \
        --no-progress --concurrency $((clients * n)) --tier "dir:$tier" \
        --devices "$devices" --balance "${DEV_BALANCE:-least}" --run-seconds "${DEV_SECONDS:-90}" \
        "$@" >"$out/$run.log" 2>"$out/$run.err"
    rc=$?
    echo "run_devices: --devices $devices exit $rc"
    [ $rc -ne 0 ] && rc_all=$rc && tail -n 3 "$out/$run.err"
    sed -n '/^| caches/,$p' "$out/$run.log"
done
rm -rf "$tier"
# the total rows: | caches | total | devices | requests | mean | p50 | p99 | req/s | doc | recomputed
awk -F'|' '
    FILENAME ~ /one.log$/ && $3 ~ /total/ && $2 ~ /shared/ { one = $9 + 0 }
    FILENAME ~ /two.log$/ && $3 ~ /total/ && $2 ~ /shared/ { two = $9 + 0; shr = $11 + 0 }
    FILENAME ~ /two.log$/ && $3 ~ /total/ && $2 ~ /separate/ { sep = $11 + 0 }
    END {
        printf "throughput, shared tier: one GPU %.3f req/s, two %.3f req/s: %.2fx (issue 39: >= 1.8)\n",
               one, two, (one > 0 ? two / one : 0)
        printf "recomputed document tokens on two GPUs, shared / separate: %d / %d = %.3f (<= 0.55)\n",
               shr, sep, (sep > 0 ? shr / sep : 0)
    }' "$out/one.log" "$out/two.log"
exit $rc_all
