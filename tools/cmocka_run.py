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
# Each case's own line ("[       OK ] NAME", "[  SKIPPED ] NAME", "[  FAILED  ] NAME") is on
# stdout with CMOCKA_MESSAGE_OUTPUT=stdout; cmocka 1.1's closing counts ("[  PASSED  ] 3
# test(s).") go to stderr whatever it says, so the cases are counted here one by one.
case = re.compile(r"\[ {7}OK \] |\[  (SKIPPED|FAILED)  ?\] (?!\d+ test)")
for raw in proc.stdout:
    sys.stdout.buffer.write(raw)
    sys.stdout.buffer.flush()
    m = case.match(raw.decode("utf-8", "replace"))
    if not m:
        continue
    if m.group(1) is None:
        passed += 1
    elif m.group(1) == "SKIPPED":
        skipped += 1
    else:
        failed += 1
rc = proc.wait()
if rc == 0 and skipped and not passed and not failed:
    print(f"# every case skipped ({skipped}): SKIP")
    sys.exit(77)
sys.exit(rc if rc >= 0 else 128 - rc)
