#!/bin/sh
# issue 11 step 16, call 2: run_gpu.sh with the swapped decode the default
# (its logs as one archive), then the decode with and without it
sh bench/run_gpu.sh /tmp/fin > /tmp/fin.txt 2>&1
grep -v "^ceilings\|order for\|^check " /tmp/fin.txt | head -60 | cut -c1-150
(cd /tmp/fin && tar czf "$OUT/final.tar.gz" . && cp /tmp/fin.txt "$OUT/")
TESTS=0 BUDGET_S=150 VARIANTS="swap|||0|
old|||0||-DLZ_NV_DSWAP=0
swapt|LAZYATTN_NV_DECODE_TIMES=1|||--only decode_1x32768 --kv-layout tiled|
oldt|LAZYATTN_NV_DECODE_TIMES=1|||--only decode_1x32768 --kv-layout tiled|-DLZ_NV_DSWAP=0
swap2|||0|
old2|||0||-DLZ_NV_DSWAP=0" sh bench/run_decode_gpu.sh "$OUT/dv" 2>&1 | grep -E "splits:|^decode_|rc=|shape" | cut -c1-150
echo "==== final table"; tail -9 /tmp/fin/peer.log
