# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0
# Background jobs for the tools' checks, at most $par at once (default: the
# cores). Sourced; it defines
#   job CMD...   runs CMD in the background, at most $par at once (a failure
#                is counted and reported at the drain);
#   drain NAME   waits for every job; exits 1 if one failed, NAME saying whose.
: "${par:=$(nproc 2>/dev/null || echo 2)}"
running=0 failed=0
reap() {
    local rc=0
    wait -n || rc=$?
    running=$((running - 1))
    [ "$rc" = 0 ] || failed=$((failed + 1))
}
job() {
    while [ "$running" -ge "$par" ]; do reap; done
    ( "$@" ) &
    running=$((running + 1))
}
drain() {
    while [ "$running" -gt 0 ]; do reap; done
    [ "$failed" = 0 ] || { echo "$1: $failed build(s) failed (above)" >&2; exit 1; }
}
