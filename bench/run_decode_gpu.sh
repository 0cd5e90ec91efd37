#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# One device call on the lent H200 for the decode (issue 11: 1 x 32768):
#  1. with TESTS=1, test_attention on the GPU (the default fast path);
#  2. bench_kernels for each line "NAME|ENV|BUILD|checks|ARGS|DEFINES" of VARIANTS
#     (ENV: VAR=value words for that run, e.g. LAZYATTN_NV_DECODE=3,4,0;
#     BUILD: the build folder, default build-nv, another one carried for a
#     before/after in one call; checks 1 runs bench_kernels' checks against
#     the float64 reference; ARGS: its options, default --only decode
#     --kv-layout tiled (the layout run_gpu.sh times), e.g.
#     "--only decode_1x32768 --kv-layout tiled --decode-splits 128"; DEFINES:
#     LAZYATTN_NV_DEFINES, kernel build options such as "-DLZ_NV_DDIAG=1");
#     with LAZYATTN_NV_DECODE_TIMES=1 in ENV, the medians
#     of each launch's profiled kernel times by split count
#     (lib/attention.c lz_log_decode_times: it waits for them, so the
#     decode's host time printed then includes the kernels);
#  3. the torch SDPA peer over all their rows (one table, rows in order);
#     the benches' logs come back as bench_logs.tar.gz.
# TEST_FILTER runs only the tests matching it (LAZYATTN_TEST_FILTER, e.g.
# test_decode_splits); TEST_DEFINES runs them a second time with those
# LAZYATTN_NV_DEFINES.
#   usage: [TESTS=0|1] [TEST_FILTER=...] [TEST_DEFINES=...] [VARIANTS=...] [REPS=40] [BUDGET_S=300]
#          sh bench/run_decode_gpu.sh [OUTDIR]
set -u
out=${1:-${OUT:-/tmp/lazyattn-out}}
csv=/tmp/decode-csv
BUDGET_S=${BUDGET_S:-300}
REPS=${REPS:-40}
VARIANTS=${VARIANTS:-"default|||1"}
. bench/prefill_call.sh
# TESTS=1: test_attention (TEST_FILTER: only the tests matching it, e.g. test_decode_splits)
if [ "${TESTS:-0}" -ge 1 ]; then
  export LAZYATTN_TEST_FILTER="${TEST_FILTER:-*}"
  TEST_S=240 tests default
  grep -E "^# decode over|^\[  (PASSED|FAILED)|splits combined by" "$out/tests_default.log" | sort | uniq -c | head -8
  # ... and with TEST_DEFINES (LAZYATTN_NV_DEFINES) when set
  if [ -n "${TEST_DEFINES:-}" ]; then
    export LAZYATTN_NV_DEFINES="$TEST_DEFINES"
    TEST_S=240 tests defines
    unset LAZYATTN_NV_DEFINES
    grep -E "^# decode over|^\[  (PASSED|FAILED)|splits combined by" "$out/tests_defines.log" | sort | uniq -c | head -8
  fi
  unset LAZYATTN_TEST_FILTER
fi
names="" first=""
while IFS='|' read -r name envs build checks args defines; do
  [ -n "$name" ] || continue
  if [ -n "$first" ] && ! left; then echo "[$(el) s] $name skipped (past ${BUDGET_S} s)"; continue; fi
  first=$name
  build=${build:-build-nv}
  args=${args:---only decode --kv-layout tiled}
  log="$out/bench_$name.log"
  opt="--no-checks"
  [ "$checks" = 1 ] && opt=""
  # shellcheck disable=SC2086 # envs: words of VAR=value
  env $envs LAZYATTN_NV_DEFINES="$defines" LAZYATTN_LOG=info timeout 120 \
    "$build/examples/bench_kernels" $args --reps "$REPS" $opt --csv "$csv/$name.csv" > "$log" 2>&1 < /dev/null
  echo "[$(el) s] bench_kernels $name ($build, $args $opt${envs:+, $envs}${defines:+, $defines}) rc=$?"
  grep -E "^check|^checks|^decode_|^decode .*host time|unavailable|disabled" "$log" | cut -c1-150 | head -12
  grep -o "splits combined by.*" "$log" | sort -u | head -2
  # medians of the launches' kernel times by split count
  grep "decode times:" "$log" | sed 's/.*decode times: //' | awk '
    { n = $1; sk[n] = sk[n] " " $5; if ($0 ~ /gap/) { gp[n] = gp[n] " " $8; rd[n] = rd[n] " " $11 } }
    function med(s,   a, k, i, j, t) { k = split(s, a, " "); for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }; return k ? a[int((k + 1) / 2)] : "-" }
    END { for (n in sk) printf "  %s splits: split kernel %s us, gap %s, reduction %s (median of %d)\n", n, med(sk[n]), med(gp[n]), med(rd[n]), split(sk[n], z, " ") }'
  mv "$log" "$csv/" 2>/dev/null
  names="$names $name"
done <<EOF
$VARIANTS
EOF
peer $names
# the benches' logs as one file (a call brings back at most eight)
(cd "$csv" && tar czf "$out/bench_logs.tar.gz" bench_*.log 2>/dev/null)
echo "[$(el) s] done"
