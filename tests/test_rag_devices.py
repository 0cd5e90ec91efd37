#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""rag_bench --devices on the tiny model: one workload split among serving processes, one a
device, by the dispatcher (least outstanding, round robin), with separate caches and then
sharing a directory tier.

Checked from the tables: each phase serves exactly the workload's requests, split among the
processes (the per-process rows add up to the total row; round robin sends 12 and 12 of 24);
each process row names its device; the shared tier recomputes fewer document tokens than the
separate caches and no fewer than the workload's distinct documents (each computed once).

    test_rag_devices.py RAG_BENCH

Devices: "0,0" (one device twice: two contexts, as two GPUs of one kind) wherever one device
exists; with LAZYATTN_TEST_TWO_DEVICES=1 (CI, PoCL and Intel's runtime visible together) "0,1"
too, and fewer than two devices fails.
"""
import os
import re
import subprocess
import sys
import tempfile

RB = ["--model", "tiny", "--requests", "24", "--docs", "8", "--doc-len", "8:16", "--k", "2",
      "--question", "4:4", "--gen", "2:2", "--prefix", "0", "--policies", "lazy", "--no-progress",
      "--no-profiling", "--budget", "64KiB", "--concurrency", "2"]
ROW = re.compile(r"^\| (separate|shared [^|]*) \| (\d+|total) \| ([^|]*) \| (\d+) \((\d+)\) \|"
                 r"(.*)\|$")


def table(out):
    """{phase: {process: (device, ok, failed, doc tokens, recomputed, TTFT p50 ms, TTFT p99 ms,
    req/s)}} from the table rows."""
    phases = {}
    for line in out.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        cells = [c.strip() for c in m.group(6).split("|")]
        # TTFT mean, p50, p99, req/s, doc tokens, recomputed, tier hits, tier hit tokens, most
        phase = "separate" if m.group(1) == "separate" else "shared"
        phases.setdefault(phase, {})[m.group(2)] = (m.group(3).strip(), int(m.group(4)),
                                                   int(m.group(5)), int(cells[4]), int(cells[5]),
                                                   float(cells[1]), float(cells[2]),
                                                   float(cells[3]))
    return phases


def sent_per_process(out):
    m = re.search(r"^requests sent per process: separate ([\d ]+); shared ([\d ]+)$", out, re.M)
    return m and ([int(x) for x in m.group(1).split()], [int(x) for x in m.group(2).split()])


def check(exe, devices, balance, cwd, failures):
    args = RB + ["--tier", "dir:tier", "--devices", devices] + (
        ["--balance", balance] if balance else [])
    r = subprocess.run([exe] + args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, errors="replace", timeout=600)
    name = "--devices %s --balance %s" % (devices, balance or "(least)")
    print("#", name)
    print(r.stdout)
    if r.returncode != 0:
        failures.append("%s: exit %d: %s" % (name, r.returncode, r.stderr[-1500:]))
        return
    want = devices.split(",")
    phases = table(r.stdout)
    sent = sent_per_process(r.stdout)
    if set(phases) != {"separate", "shared"} or sent is None:
        failures.append("%s: tables or the sent line missing" % name)
        return
    for phase, rows in phases.items():
        procs = [str(i) for i in range(len(want))]
        if sorted(rows) != sorted(procs + ["total"]):
            failures.append("%s %s: rows %s, want processes %s and a total" %
                            (name, phase, sorted(rows), procs))
            continue
        for i, d in enumerate(want):
            if rows[str(i)][0] != "#" + d:
                failures.append("%s %s: process %d on %r, want #%s" % (name, phase, i,
                                                                       rows[str(i)][0], d))
        total = rows["total"]
        if total[1] != 24 or total[2] != 0:
            failures.append("%s %s: %d served (%d failed), want the workload's 24" %
                            (name, phase, total[1], total[2]))
        for col, what in ((1, "served"), (3, "doc tokens"), (4, "recomputed")):
            if sum(rows[p][col] for p in procs) != total[col]:
                failures.append("%s %s: the processes' %s do not add up to the total" %
                                (name, phase, what))
        if any(rows[p][1] == 0 for p in procs):
            failures.append("%s %s: a process served nothing: %s" % (name, phase, rows))
        for p in procs + ["total"]:
            p50, p99, rate = rows[p][5:8]
            if not (0 < p50 <= p99) or not rate > 0:
                failures.append("%s %s %s: TTFT p50 %g, p99 %g ms, %g req/s" %
                                (name, phase, p, p50, p99, rate))
        # req/s: each process's served over the same wall time, so they add up (to rounding)
        if abs(sum(rows[p][7] for p in procs) - rows["total"][7]) > 0.01 * len(procs):
            failures.append("%s %s: the processes' req/s do not add up to the total" %
                            (name, phase))
    sep, shr = phases["separate"]["total"][4], phases["shared"]["total"][4]
    if not shr < sep:
        failures.append("%s: recomputed with the shared tier %d, not fewer than separate %d" %
                        (name, shr, sep))
    if balance == "rr" and sent != ([12, 12], [12, 12]):
        failures.append("%s: round robin sent %s, want 12 and 12 in each phase" % (name, sent))
    if sum(sent[0]) != 24 or sum(sent[1]) != 24:
        failures.append("%s: %s requests sent, want 24 in each phase" % (name, sent))
    if shr <= 0:
        failures.append("%s: the shared phase recomputed nothing" % name)


def main():
    exe = os.path.abspath(sys.argv[1])
    failures = []
    pairs = [("0,0", None), ("0,0", "rr")]
    if os.environ.get("LAZYATTN_TEST_TWO_DEVICES") == "1":
        pairs.append(("0,1", None))
    with tempfile.TemporaryDirectory(prefix="lazyattn_devices_") as cwd:
        for devices, balance in pairs:
            check(exe, devices, balance, cwd, failures)
    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)
    print("ok: %d runs" % len(pairs))


if __name__ == "__main__":
    main()
