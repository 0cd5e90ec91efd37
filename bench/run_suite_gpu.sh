#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The test suite's executables on the lent GPU, through NVIDIA's OpenCL:
# every tests/test_* of a build made here (meson setup build-nv
# --buildtype=release -Dspirv=disabled -Dclblast=disabled -Dredis=disabled;
# ninja -C build-nv; libcmocka.so.0 copied into build-nv/extra-lib), once
# with the portable kernels forced (LAZYATTN_PORTABLE=1) and once on the
# default path (the NVIDIA kernels where a configuration has them). The
# Redis cases report themselves skipped (no server there); the "programs"
# suite (command lines, install) is not about the device and is left out.
#   usage: sh bench/run_suite_gpu.sh [OUTDIR] [portable|default ...]  (default: portable default)
set -u
out=${1:-${OUT:-/tmp/lazyattn-out}}
shift 2>/dev/null
modes=${*:-portable default}
bin=${BIN:-build-nv}
mkdir -p "$out"
. tools/nvidia-opencl-env.sh
export LD_LIBRARY_PATH="$PWD/$bin/extra-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CMOCKA_MESSAGE_OUTPUT=stdout
fail=0
for mode in $modes; do
  log="$out/suite_$mode.log"
  : > "$log"
  pass=0 bad=0
  for t in "$bin"/tests/test_*; do
    [ -f "$t" ] && [ -x "$t" ] || continue
    name=$(basename "$t")
    start=$(date +%s)
    if [ "$mode" = portable ]; then
      LAZYATTN_PORTABLE=1 timeout ${TEST_TIMEOUT:-300} "$t" >> "$log" 2>&1; rc=$?
    else
      timeout ${TEST_TIMEOUT:-300} "$t" >> "$log" 2>&1; rc=$?
    fi
    secs=$(( $(date +%s) - start ))
    if [ $rc -eq 0 ]; then pass=$((pass + 1)); else bad=$((bad + 1)); fail=1; fi
    echo "$mode $name rc=$rc ${secs}s"
  done
  echo "suite $mode on the GPU: $pass passed, $bad failed ($(grep -c '^\[  SKIPPED \]' "$log") cases skipped, $(grep -c '^\[  PASSED  \]' "$log") executables' PASSED lines)"
  grep -E '^\[  FAILED  \]|^\[  ERROR   \]' "$log" | head -10
done
exit $fail
