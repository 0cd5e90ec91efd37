#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The bf16 projection benchmark on the lent H200, one device call: torch's
# peer (bench/gemm_peer.py) first, then bench_gemm once per tile (a process
# each, so a tile that fails cannot take the others down), logs under $OUT.
#   serve/h200_bench_gemm.sh DIR "TILE1;TILE2;..." [bench_gemm options]
# Env: LOG (file under $OUT, default bench.log), PEER_CSV (an earlier peer's
# figures: torch is not run), TILE_TIMEOUT (seconds per tile, default 20).
# A tile may carry extra kernel defines after '@' (experiments, e.g.
# "2,1,256,16,4,0,16@-DLG_SWZ=1"): SERVE_GEMM_LARGE_DEFINES for that run.
# DIR holds bench_gemm, lib/libclblast.so.1, tools/nvidia-opencl-env.sh and
# bench/{gemm_peer,sdpa_peer}.py (copied there from a build of this tree).
set -u
dir=${1:?usage: serve/h200_bench_gemm.sh DIR TILES [bench_gemm options]}
tiles=${2:?usage: serve/h200_bench_gemm.sh DIR TILES [bench_gemm options]}
shift 2
out=${OUT:-/tmp}
cd "$dir" || exit 1
. ./tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$(pwd)/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$out/smi.txt" 2>&1
if [ -z "${PEER_CSV:-}" ]; then # PEER_CSV: an earlier call's figures instead of running torch
    (cd bench && timeout 60 python3 gemm_peer.py --reps 20 --csv "$out/peer.csv") > "$out/peer.log" 2>&1
    echo "peer rc=$?" >> "$out/peer.log"
fi
log="$out/${LOG:-bench.log}"
peer=${PEER_CSV:-$out/peer.csv}
[ -f "$peer" ] || { echo "no torch figures ($peer): bench_gemm runs without --peer" >> "$log"; peer=; }
echo "$tiles" | tr ';' '\n' | while read -r t; do
    [ -n "$t" ] || continue
    tile=${t%%@*} defs=
    [ "$tile" = "$t" ] || defs=$(echo "${t#*@}" | tr ',' ' ')
    echo "=== tile $tile defines $defs" >> "$log"
    SERVE_GEMM_LARGE_DEFINES="$defs" SERVE_NV_VERBOSE=1 timeout "${TILE_TIMEOUT:-20}" ./bench_gemm \
        --tiles "$tile" ${peer:+--peer "$peer"} "$@" >> "$log" 2>&1
    echo "=== rc=$?" >> "$log"
done
grep -E "^large|rc=|^=== tile|Used" "$log" | sed 's/ptxas info *: //' 
