#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# One device call on the lent H200 for issue 11's wgmma prefill, most
# valuable first: the probe of wgmma with A from registers and V MN-major
# (bench/probe_wgmma_rs.c), whose answer picks the V descriptor's reading;
# test_attention on the GPU with LAZYATTN_NV_WGMMA=1 (S and P V on wgmma);
# bench_kernels --only prefill for it (with the checks), then the default
# path; the torch SDPA peer on the wgmma figures; then 12 warps with wgmma
# (timing only) and, with WITH_DEFAULT_TEST=1, test_attention on the default
# path (call 1 ran it and v6's S-only form, -DLZ_NV_PVWG=0). Build here first
# (build-nv, with libcmocka.so.0 in build-nv/extra-lib) and carry it.
# NV_PREFILL=KT,WARPS,MAXREG runs the wgmma test and checked bench at that
# geometry (e.g. 32,12,0, timed only in issue 11's call 2); EXPLORE (default
# 32,12,0) is the geometry of the last, timing-only run.
#   usage: [NV_PREFILL=..] [EXPLORE=..] sh bench/run_prefill_wgmma_gpu.sh [OUTDIR]
set -u
# the wgmma kernel of issue 11 steps 1-2, without the producer (the default since step 5)
export LAZYATTN_NV_PRODUCER=0
out=${1:-${OUT:-/tmp/lazyattn-out}}
mkdir -p "$out" /tmp/pw-csv
csv=/tmp/pw-csv  # at most 8 files come back from $OUT: the CSVs are printed instead
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
stamp() { echo "  [$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout 40 build-nv/examples/probe_wgmma_rs > "$out/probe_rs.log" 2>&1
echo "probe_wgmma_rs rc=$?"; cat "$out/probe_rs.log"; stamp
case "$(grep '^RESULT' "$out/probe_rs.log")" in
  *"mn natural"*) defs="" ;;
  *"mn swapped"*) defs="-DLZ_NV_VDESC_SWAP=1" ;;
  *) defs="-DLZ_NV_PVWG=0"; echo "no MN-major reading matched: P V stays on mma.sync" ;;
esac
echo "wgmma build defines: '${defs}'"
test_att() { # MODE
  timeout 100 build-nv/tests/test_attention > "$out/test_attention_$1.log" 2>&1
  echo "test_attention ($1) on the GPU: rc=$? ($(grep -c '\[       OK \]' "$out/test_attention_$1.log") ok)"
  grep -E "^# d=|FAILED|rror" "$out/test_attention_$1.log" | head -12; stamp
}
bench() { # MODE [OPTIONS]
  m=$1; shift
  LAZYATTN_NV_VERBOSE=1 timeout 60 build-nv/examples/bench_kernels --only prefill --reps 20 "$@" \
    --csv "$csv/ours_$m.csv" > "$out/bench_$m.log" 2>&1
  echo "bench_kernels prefill ($m) rc=$?"
  grep -E "^check|^checks|^prefill|round trip" "$out/bench_$m.log" | cut -c1-150 | head -12
  grep -E "lz_prefill_nv'|registers|spill" "$out/bench_$m.log" | head -8
  [ -s "$csv/ours_$m.csv" ] && echo "$m: $(tr '\n' ' ' < "$csv/ours_$m.csv")"; stamp
}
export LAZYATTN_NV_WGMMA=1 LAZYATTN_NV_DEFINES="$defs"
if [ -n "${NV_PREFILL:-}" ]; then export LAZYATTN_NV_PREFILL="$NV_PREFILL"; fi
test_att wgmma
bench wgmma
unset LAZYATTN_NV_WGMMA LAZYATTN_NV_DEFINES LAZYATTN_NV_PREFILL
bench default --no-checks
[ -s "$csv/ours_wgmma.csv" ] && timeout 60 python3 bench/sdpa_peer.py --ours "$csv/ours_wgmma.csv" > "$out/peer.log" 2>&1
tail -9 "$out/peer.log"; stamp
# exploration, timing only (default: 12 warps, three warpgroups, P V on wgmma)
export LAZYATTN_NV_WGMMA=1 LAZYATTN_NV_DEFINES="$defs" LAZYATTN_NV_PREFILL="${EXPLORE:-32,12,0}"
bench explore --no-checks
unset LAZYATTN_NV_WGMMA LAZYATTN_NV_DEFINES LAZYATTN_NV_PREFILL
if [ "${WITH_DEFAULT_TEST:-0}" = 1 ]; then test_att default; fi
