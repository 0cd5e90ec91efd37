#!/bin/sh
# issue 11 step 17, call 3: the whole of bench/run_gpu.sh (the issue's "done
# when": tests on the three paths, bench checks, timings, the SDPA peer) with
# the step's defaults (LZ_NV_PFLAGS, LZ_NV_M_FINITE, LZ_NV_PDESC)
sh bench/run_gpu.sh "$OUT"
