#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs the portable kernels' small cases (tests/oclgrind_cases.c), then the
# kept-quantized GEMV and dequantizer's test (serve/test_gemv_quant), under
# Oclgrind with API checks and data-race detection; out-of-bounds accesses
# are always reported. Fails on any finding (Oclgrind exits 0 with
# findings, so its log is read: every line in it is a finding), on a wrong
# result, or when the checker cannot be shown to work: a canary with one
# out-of-bounds write and one data race must be reported first.
# (--uninitialized stays off: Oclgrind 21.10's plugin crashes on sincos.)
# Usage: sh tools/oclgrind-check.sh [BUILD_DIR]   (Debian: apt-get install oclgrind)
set -eu
build=${1:-build}
exe=$build/tests/oclgrind_cases
[ -x "$exe" ] || { echo "oclgrind-check: $exe not built" >&2; exit 1; }
command -v oclgrind >/dev/null || { echo "oclgrind-check: oclgrind not installed" >&2; exit 1; }
log=$build/oclgrind.log
out=$build/oclgrind.out

run() { # run LOG ARGS...: the cases under Oclgrind, program output to $out
    rlog=$1
    shift
    rm -f "$rlog"
    status=0
    env -u LAZYATTN_PLATFORM -u LAZYATTN_DEVICE -u LAZYATTN_PROGRAM \
        oclgrind --check-api --data-races --log "$rlog" "$exe" "$@" >"$out" 2>&1 || status=$?
    cat "$out"
    grep -q '^device: Oclgrind' "$out" || { echo "oclgrind-check: not on the Oclgrind device" >&2; exit 1; }
    return $status
}

run "$log.canary" --canary || { echo "oclgrind-check: the canary program failed" >&2; exit 1; }
if ! grep -q 'Invalid write' "$log.canary" || ! grep -q 'data race' "$log.canary"; then
    echo "oclgrind-check: Oclgrind did not report the canary's out-of-bounds write and race:" >&2
    cat "$log.canary" >&2
    exit 1
fi
echo "oclgrind-check: canary reported ($(grep -c -E 'Invalid write|data race' "$log.canary") findings, as it should)"

status=0
run "$log" || status=$?
if grep -q '[^[:space:]]' "$log" 2>/dev/null; then
    echo "oclgrind-check: FINDINGS in the kernels ($(grep -c -E 'Invalid (read|write)|data race|error|divergence' "$log") headline lines), full log $log:" >&2
    head -n 200 "$log" >&2
    exit 1
fi
[ "$status" -eq 0 ] || { echo "oclgrind-check: oclgrind_cases failed (exit $status)" >&2; exit 1; }
echo "oclgrind-check: no finding over $(grep -c ' ok: ' "$out") cases"

# the quantized GEMV / dequantizer (serve/gemv_quant.cl): its own test, every
# type, 1..8 rows, ranges, fused norm and SwiGLU
gq=$build/serve/test_gemv_quant
[ -x "$gq" ] || { echo "oclgrind-check: $gq not built" >&2; exit 1; }
rm -f "$log.gemv"
status=0
env -u LAZYATTN_PLATFORM -u LAZYATTN_DEVICE -u LAZYATTN_PROGRAM \
    oclgrind --check-api --data-races --log "$log.gemv" "$gq" >"$out.gemv" 2>&1 || status=$?
if grep -q '[^[:space:]]' "$log.gemv" 2>/dev/null; then
    echo "oclgrind-check: FINDINGS in serve/gemv_quant.cl, full log $log.gemv:" >&2
    head -n 200 "$log.gemv" >&2
    exit 1
fi
[ "$status" -eq 0 ] || { tail -n 40 "$out.gemv" >&2; echo "oclgrind-check: test_gemv_quant failed (exit $status)" >&2; exit 1; }
echo "oclgrind-check: no finding in test_gemv_quant ($(grep -c '^\[       OK \]' "$out.gemv") cases)"
