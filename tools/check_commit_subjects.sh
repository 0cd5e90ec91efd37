#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Commit subjects of at most 72 characters, the detail in the body: fails
# (exit 1) naming every commit after BASE whose subject is longer. BASE
# defaults to 6c2225c, where the rule starts (issue 35); the older history
# is left as it is. Needs the history from BASE on (a full clone; exit 2
# when BASE is not there). Characters, not bytes, are counted.
#   usage: tools/check_commit_subjects.sh [BASE]
set -euo pipefail
base=${1:-6c2225c}
max=72
if ! git rev-parse --verify "$base^{commit}" >/dev/null; then
    echo "check_commit_subjects: $base is not a commit here (a shallow clone?)" >&2
    exit 2
fi
export LC_ALL=C.UTF-8
bad=0 n=0
while IFS= read -r line; do
    hash=${line%% *}
    subject=${line#* }
    n=$((n + 1))
    if [ "${#subject}" -gt "$max" ]; then
        echo "$hash: subject of ${#subject} characters (at most $max): $subject" >&2
        bad=$((bad + 1))
    fi
done < <(git log --format='%h %s' "$base..HEAD")
if [ "$bad" -gt 0 ]; then
    echo "check_commit_subjects: $bad of $n commits after $base have subjects over $max" \
         "characters; put the detail in the body" >&2
    exit 1
fi
echo "check_commit_subjects: $n commits after $base, every subject at most $max characters"
