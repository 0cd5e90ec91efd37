#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Which failed tests of a meson test log failed only because LeakSanitizer's
own stop-the-world tracer crashed at exit (google/sanitizers#1353: "Tracer
caught signal 11 ... LeakSanitizer has encountered a fatal error"), after the
test's body had run to the end.

Usage: lsan_tracer_crashes.py TESTLOG.json

Prints the failed tests' names (without the suite), one per line, and exits
0 when there is at least one and every one is a FAIL (not a timeout or an
error) showing the tracer's crash and nothing else: no leak report, no
AddressSanitizer or UndefinedBehaviorSanitizer report, no failed cmocka
case, a cmocka summary that passed.  Exits 1, naming the test, when any test
failed otherwise (that failure is real: no rerun can excuse it) or when the
log shows no failed test at all (the run failed for a reason the log does
not name), 2 on a log that cannot be read.  .ci/run reruns the printed
tests; a crash of the tracer is not a result about our code, a leak report is.
"""
import json
import re
import sys

TRACER = re.compile(r"Tracer caught signal \d+.*\n.*LeakSanitizer has encountered a fatal error")
REAL = re.compile(r"ERROR: LeakSanitizer: detected memory leaks|ERROR: AddressSanitizer"
                  r"|runtime error:|\[  FAILED  \]|\[  ERROR   \]")
PASSED = re.compile(r"\[  PASSED  \] \d+ test")


def main(argv):
    if len(argv) != 2:
        print("usage: lsan_tracer_crashes.py TESTLOG.json", file=sys.stderr)
        return 2
    try:
        with open(argv[1]) as f:
            records = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        print(f"lsan_tracer_crashes.py: {argv[1]}: {e}", file=sys.stderr)
        return 2
    names, real = [], []
    for r in records:
        if r.get("result") in ("OK", "SKIP", "EXPECTEDFAIL"):
            continue
        out = (r.get("stdout") or "") + (r.get("stderr") or "")
        name = r.get("name", "?").split(" / ")[-1]
        if r.get("result") == "FAIL" and TRACER.search(out) and not REAL.search(out) and PASSED.search(out):
            names.append(name)
        else:
            real.append(name)
    if real:
        print("failed for a reason other than LeakSanitizer's tracer crash: " + " ".join(real),
              file=sys.stderr)
        return 1
    if not names:
        print(f"{argv[1]}: no failed test in the log, so nothing a rerun could excuse", file=sys.stderr)
        return 1
    print("\n".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
