#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Prints the cmocka cases that meson's logs show skipped, with the lines each printed as its
reason, and one closing count; exits 1 if a test in the logs failed.

    python3 tools/test_summary.py [BUILD_DIR or LOG[+RERUN_LOG...] ...]   (default: build)

LOG+RERUN_LOG: one run whose tests named in RERUN_LOG (meson test --logbase) ran again; the
last record of a test counts.
"""
import json
import os
import re
import sys

runs = []
for arg in sys.argv[1:] or ["build"]:
    if os.path.isdir(arg):
        arg = os.path.join(arg, "meson-logs", "testlog.json")
    records = {}
    for path in arg.split("+"):
        for line in open(path, encoding="utf-8"):
            r = json.loads(line)
            records[r["name"]] = r
    runs.append(list(records.values()))

skipped = []        # (test, case, reason)
whole = []          # tests meson reports as SKIP (exit 77)
bad = []
n_tests = 0
for records in runs:
    for r in records:
        n_tests += 1
        name = r["name"].split(" / ")[-1]
        if r["result"] == "SKIP":
            whole.append(name)
        elif r["result"] not in ("OK", "EXPECTEDFAIL"):
            bad.append(f"{name} ({r['result']})")
        text = (r.get("stdout") or "") + (r.get("stderr") or "")
        said, running = [], False
        for out in text.splitlines():
            if out.startswith("[ RUN      ]"):
                said, running = [], True
                continue
            m = re.match(r"\[  SKIPPED \] (\S+)$", out)
            if running and m:
                reason = "; ".join(s.strip().lstrip("# ").strip() for s in said if s.strip())
                skipped.append((name, m.group(1), reason or "no reason printed"))
                said, running = [], False
                continue
            if re.match(r"\[ *(OK|FAILED|ERROR) *\]", out):
                running = False
            said.append(out)

for test, case, reason in skipped:
    print(f"  skipped {test} / {case}: {reason[:160]}")
print(f"{len(skipped)} test cases skipped in {len({t for t, _, _ in skipped})} of {n_tests} tests"
      f" ({len(whole)} skipped whole{': ' + ', '.join(whole) if whole else ''})"
      + (f"; FAILED: {', '.join(bad)}" if bad else ""))
sys.exit(1 if bad else 0)
