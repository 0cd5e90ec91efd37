#!/bin/sh
# Session 21, call 7 (the command as run): call 6's first row (none_big) was cut short by the
# fresh machine's kernel builds; none_big and host_big again on the warm machine.
export LD_LIBRARY_PATH="$PWD/build-nv/extra-lib"; T41_ROWS=none_big,host_big T41_SECONDS=150 sh bench/serve/run_tier41.sh build-nv "$OUT/t" && cat "$OUT/t/tier41.md"; for f in "$OUT"/t/*.log; do echo "== $f"; grep -A2 -E '^\| policy \| budget \| (wall s|doc tokens)' "$f" | grep '^| lazy'; done; tar czf "$OUT/all.tgz" -C "$OUT" t && rm -rf "$OUT/t"
