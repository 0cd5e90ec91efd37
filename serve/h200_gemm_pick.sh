#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# One device call: torch's GEMM peer, a sweep of candidate tiles on the fused
# QKV and gate/up projections at M = 2048 (sweep.log), then the full table
# (four projections, M = 2048, 10240, 777) with the tile of the highest
# summed TFLOP/s among those whose checks passed (final.log).
#   serve/h200_gemm_pick.sh DIR "TILE1;TILE2;..."
set -u
dir=${1:?usage: serve/h200_gemm_pick.sh DIR TILES}
tiles=${2:?usage: serve/h200_gemm_pick.sh DIR TILES}
out=${OUT:-/tmp}
here=$(cd "$(dirname "$0")" && pwd)
LOG=sweep.log TILE_TIMEOUT=${TILE_TIMEOUT:-15} sh "$here/h200_bench_gemm.sh" "$dir" "$tiles" \
    --rows 2048 --only qkv,gate_up --reps 10 > /dev/null
best=$(awk '/^=== tile/ { key = $3; d = ""; for (i = 5; i <= NF; i++) d = d (d ? "," : "") $i;
                          if (d != "") key = key "@" d }
            /^large/ && $NF == "ok" { s[key] += $8; n[key]++ }
            END { for (k in s) if (n[k] == 2) print s[k], k }' "$out/sweep.log" | sort -rn | head -n 1 | cut -d' ' -f2)
echo "picked: ${best:-none}"
[ -n "$best" ] || exit 1
PEER_CSV="$out/peer.csv" LOG=final.log TILE_TIMEOUT=${FINAL_TIMEOUT:-60} sh "$here/h200_bench_gemm.sh" "$dir" "$best" \
    --rows 2048,10240,777 --reps 20
