#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tools/cmocka_run.py's exit status on tests/cmocka_skips.c: 77 (meson's SKIP) when every
case was skipped, 0 when one passed beside a skip, non-zero when one failed; with cmocka's
closing counts on stderr (cmocka 1.1 writes them there even with CMOCKA_MESSAGE_OUTPUT=stdout).

    test_cmocka_run.py CMOCKA_RUN EXE
"""
import os
import subprocess
import sys

wrapper, exe = sys.argv[1], sys.argv[2]
failures = []
for output in ("stdout", None):  # meson's setting, and cmocka's default
    env = dict(os.environ)
    env.pop("CMOCKA_MESSAGE_OUTPUT", None)
    if output:
        env["CMOCKA_MESSAGE_OUTPUT"] = output
    for mode, want in (("skip", 77), ("mixed", 0), ("fail", None)):
        r = subprocess.run([sys.executable, wrapper, exe, mode], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        ok = r.returncode == want if want is not None else r.returncode not in (0, 77)
        print(f"{mode} (CMOCKA_MESSAGE_OUTPUT={output}): exit {r.returncode}"
              f" (want {want if want is not None else 'a failure'})")
        if not ok:
            failures.append(f"{mode}: exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}")
if failures:
    sys.exit("\n".join(failures))
