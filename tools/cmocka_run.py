#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs a cmocka test executable for meson: its output passes through as it comes, its exit
status is kept, except that a run in which every case was skipped exits 77, which meson
reports as SKIP (cmocka itself exits 0 then: "Skipped: 0" would hide it).

    cmocka_run.py EXE [ARGS...]
"""
import re
import subprocess
import sys

proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
passed = skipped = failed = 0
for raw in proc.stdout:
    sys.stdout.buffer.write(raw)
    sys.stdout.buffer.flush()
    line = raw.decode("utf-8", "replace")
    m = re.match(r"\[  (PASSED|SKIPPED|FAILED)\s*\] (\d+) test", line)
    if m:
        n = int(m.group(2))
        if m.group(1) == "PASSED":
            passed += n
        elif m.group(1) == "SKIPPED":
            skipped += n
        else:
            failed += n
rc = proc.wait()
if rc == 0 and skipped and not passed and not failed:
    print(f"# every case skipped ({skipped}): SKIP")
    sys.exit(77)
sys.exit(rc if rc >= 0 else 128 - rc)
