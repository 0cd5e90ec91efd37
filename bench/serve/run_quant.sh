#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Issue 36's H200 row in one device call: an 8B-shape file (Llama-3.1-8B, vocab 32000) written
# by bench/serve/write_gguf in BF16 and in Q4_K_M form runs; the decode step (B sequences x 1
# token over 2048 cached each, B = 1, 16, 64) of each through bench_forward --gguf, beside
# bench/llama_peer.py's torch BF16 step; one table of ms/step and tokens/s per B, and the
# Q4_K_M / BF16 step ratio against the target (at most 0.6).
# Steps, in order (each under timeout(1), its output in OUT/NAME.log):
#   write_bf16  the BF16 file (14.5 GB)          fwd_bf16  bench_forward on it, then it is removed
#   write_q4    the Q4_K_M file (4.4 GB)         fwd_q4    bench_forward on it, then removed
#   peer        llama_peer.py --no-forwards (torch BF16, same decode cases)
# Time (the whole call within QUANT_SECONDS, default 560 s; each step's limit is cut to what is
# left), estimated: writing is generation plus the kernel's copy into the page cache (BF16
# 14.5 GB: 20-90 s; Q4_K_M 4.4 GB: 5-20 s); loading converts every weight on the host (about
# 1.2 ns a value, ~10-20 s for 7.2e9 values; the Q4_K_M file's Q4_K/Q6_K blocks are kept as
# they are, so it loads faster) and uploads it; each bench_forward then builds its kernels
# and prefills 1 + 16 + 64 sequences of 2048 tokens before timing the steps (60-120 s
# each); the peer 30-60 s: 4-7 minutes in all (docs/PERFLOG.md, "Issue 36's H200 row,
# prepared", gives what this rests on).
# The files go to GGUF_DIR: /dev/shm when it has room for the larger one (RAM, no disk
# write-back), else /tmp; the free space is checked against write_gguf --plan's size first.
# Build and carry as bench/serve/run_gpu.sh says (BIN=build-serve, .device-carry/clblast).
#   usage: sh bench/serve/run_quant.sh [OUTDIR]
# Environment: OUT (when OUTDIR is not given; default /tmp/lazyattn-quant-out), BIN
# [build-serve], GGUF_DIR, DECODE [1,16,64], CONTEXT [2048],
# GEMM [auto] (bench_forward --gemm), REPS [5], QUANT_SECONDS [560], KEEP=1 (keep the files),
# DRY_RUN=1: the same steps on this machine's default OpenCL device (PoCL), no NVIDIA set-up
# and no torch: the small shape (the smallest whose rows are whole 256-value K-quant blocks:
# tiny's 64-value rows cannot hold Q4_K), B = 1, 4 over 64 cached tokens, BIN [build].
set -u
out=${1:-${OUT:-/tmp/lazyattn-quant-out}}
start=$(date +%s)
seconds=${QUANT_SECONDS:-560}
case $seconds in
''|*[!0-9]*|0?*) echo "run_quant: QUANT_SECONDS='$seconds': a whole number of seconds" >&2; exit 2 ;;
esac
if [ "${DRY_RUN:-0}" = 1 ]; then
    bin=${BIN:-build}
    shape=small decode=${DECODE:-1,4} context=${CONTEXT:-64}
    mkdir -p "$out" || exit 1
    step() { # name seconds command...: as bench/gpu_call.sh's
        name=$1 secs=$2
        shift 2
        t0=$(date +%s)
        timeout "$secs" "$@" >> "$out/$name.log" 2>&1
        rc=$?
        echo "$name: $* rc=$rc $(( $(date +%s) - t0 ))s"
    }
else
    bin=${BIN:-build-serve}
    shape=8b decode=${DECODE:-1,16,64} context=${CONTEXT:-2048}
    # shellcheck disable=SC1091
    . bench/gpu_call.sh
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
        > "$out/gpu.log" 2>&1
fi
for name in write_bf16 write_q4 fwd_bf16 fwd_q4 peer; do : > "$out/$name.log"; done
writer=$bin/bench/serve/write_gguf
forward=$bin/bench/serve/bench_forward
for exe in "$writer" "$forward"; do
    [ -x "$exe" ] || { echo "run_quant: $exe is not built (BIN=$bin)" >&2; exit 1; }
done

# the files' sizes, from the writer's plan (its last line: "... N tensors, BYTES bytes (...)")
size_of() { "$writer" --plan --shape "$shape" --form "$1" | awk 'END { print $(NF-3) }'; }
bf16_bytes=$(size_of bf16) q4_bytes=$(size_of q4_k_m)
case "$bf16_bytes$q4_bytes" in
''|*[!0-9]*) echo "run_quant: write_gguf --plan failed" >&2; exit 1 ;;
esac
free_kib() { df -Pk "$1" 2>/dev/null | awk 'NR == 2 { print $4 }'; }
need_kib=$(( bf16_bytes / 1024 + 1048576 )) # the larger file (written one at a time) + 1 GiB
if [ -z "${GGUF_DIR:-}" ]; then
    GGUF_DIR=/tmp/lazyattn-gguf
    shm=$(free_kib /dev/shm)
    [ -n "$shm" ] && [ "$shm" -gt "$need_kib" ] && GGUF_DIR=/dev/shm/lazyattn-gguf
fi
mkdir -p "$GGUF_DIR" || exit 1
have_kib=$(free_kib "$GGUF_DIR")
if [ -z "$have_kib" ] || [ "$have_kib" -lt "$need_kib" ]; then
    echo "run_quant: $GGUF_DIR has ${have_kib:-?} KiB free, the BF16 file needs $need_kib" >&2
    exit 1
fi
echo "run_quant: $shape files in $GGUF_DIR (bf16 $bf16_bytes bytes, q4_k_m $q4_bytes bytes)," \
     "decode $decode over $context, within ${seconds}s"

left() { # a step's limit: its own, cut to what is left of the call
    l=$(( seconds - ($(date +%s) - start) ))
    [ "$l" -lt "$1" ] && echo $(( l > 1 ? l : 1 )) || echo "$1"
}
rc_all=0
for form in bf16 q4_k_m; do
    case $form in bf16) tag=bf16 ;; *) tag=q4 ;; esac
    file=$GGUF_DIR/${shape}_$form.gguf
    step "write_$tag" "$(left 150)" "$writer" --out "$file" --shape "$shape" --form "$form"
    if [ -f "$file" ]; then
        step "fwd_$tag" "$(left 200)" "$forward" --gguf "$file" --gemm "${GEMM:-auto}" \
            --no-forwards --decode "$decode" --decode-context "$context" --reps "${REPS:-5}"
    else
        echo "fwd_$tag: skipped (no $file)"
        rc_all=1
    fi
    [ "${KEEP:-0}" = 1 ] || rm -f "$file"
done
[ "${KEEP:-0}" = 1 ] || rmdir "$GGUF_DIR" 2>/dev/null
if [ "${DRY_RUN:-0}" = 1 ]; then
    echo "peer: skipped (DRY_RUN: no torch)"
else
    step peer "$(left 120)" sh -c "cd bench && python3 llama_peer.py --no-forwards --reps ${REPS:-5} \
--decode $decode --decode-context $context"
fi

echo "== files and loads"
grep -h "MB/s" "$out/write_bf16.log" "$out/write_q4.log" 2>/dev/null
grep -h "weights on the device" "$out/fwd_bf16.log" "$out/fwd_q4.log" 2>/dev/null
# "B x 1 over C  wall_ms ..." (bench_forward), "decode_Bx1_over_C  B  C  ms" (llama_peer)
{
    awk '$2 == "x" && $4 == "over" { print "bf16", $1, $6 }' "$out/fwd_bf16.log" 2>/dev/null
    awk '$2 == "x" && $4 == "over" { print "q4", $1, $6 }' "$out/fwd_q4.log" 2>/dev/null
    awk '/^decode_[0-9]+x1_over_/ { print "torch", $2, $4 }' "$out/peer.log" 2>/dev/null
} > "$out/steps.txt"
echo "== decode step, B x 1 token over $context cached ($shape; ms/step, tokens/s)"
awk -v list="$decode" '
    { ms[$1 " " $2] = $3 }
    function cell(k) { return (k in ms) ? sprintf("%9.2f %9.0f", ms[k], 1000 * b / ms[k]) \
                                        : sprintf("%9s %9s", "-", "-") }
    BEGIN { n = split(list, bs, ",") }
    END {
        printf "%5s | %19s | %19s | %19s | %s\n", "B", "BF16 file", "Q4_K_M file",
               "torch BF16", "Q4_K_M/BF16 (target <= 0.6)"
        missing = 0
        for (i = 1; i <= n; i++) {
            b = bs[i]
            r = ((("bf16 " b) in ms) && (("q4 " b) in ms)) ? ms["q4 " b] / ms["bf16 " b] : -1
            if (r < 0) missing = 1
            printf "%5d | %s | %s | %s | %s\n", b, cell("bf16 " b), cell("q4 " b), cell("torch " b),
                   r < 0 ? "-" : sprintf("%.2f %s", r, r <= 0.6 ? "meets" : "misses")
        }
        exit missing
    }' "$out/steps.txt" || rc_all=1
[ $rc_all = 0 ] && why="" || why=": a step gave no figures"
echo "run_quant: done in $(( $(date +%s) - start ))s, exit $rc_all$why"
exit $rc_all
