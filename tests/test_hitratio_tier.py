#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""hitratio's host-memory tier (examples/hitratio.c) against identities that hold whatever the
tier's code does, checked on its CSV (one row per seed, budget, policy and tier):

- with a tier larger than every document, nothing is ever recomputed twice: every document ever
  computed is in the GPU cache or the tier (write-back: evictions go to the tier; write-through:
  every recompute does). So for lazy and position-aware caching, at every GPU budget, the
  recomputed tokens equal the tokens of first uses, which the library gives without any tier:
  lazy's doc_tokens - hit_tokens at a GPU budget that holds every document;
- with no tier, nothing is a tier hit and recomputed = doc - hit - copy;
- the tier never changes the GPU cache: hit and copy counts are the same on every tier row;
- every row accounts for each document token once: hit + copy + tier hit + recomputed = doc.

usage: test_hitratio_tier.py PATH_TO_HITRATIO. Runs in a scratch directory.
"""
import csv
import os
import subprocess
import sys
import tempfile

HUGE_GPU = "64MiB"  # every document of these workloads fits (at most 60 x 200 tokens x 64 B)
HUGE_TIER = "1TiB"
SMALL_MODEL = ["--layers", "1", "--kv-heads", "1", "--head-dim", "16", "--quiet"]
# (name, workload options): uniform, lognormal lengths with a drift, the paper script's sampler
WORKLOADS = [
    ("uniform", ["--docs", "40", "--doc-len", "32", "--k", "4", "--alpha", "1.1", "--requests", "300"]),
    ("lognormal+drift", ["--docs", "60", "--doc-len-min", "4", "--doc-len-max", "200",
                         "--doc-dist", "lognormal", "--doc-mean", "40", "--doc-sigma", "0.8",
                         "--k", "5", "--alpha", "0.9", "--requests", "300", "--drift-at", "150"]),
    ("paper-sampler", ["--docs", "50", "--doc-len", "48", "--k", "5", "--requests", "300",
                       "--sampler", "paper-fixed-prompts", "--prompts", "60"]),
]


def run(exe, args, csv_path):
    cmd = [exe] + args + ["--csv", csv_path, "--svg", ""]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("FAIL: %s exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr))
    with open(csv_path) as f:
        return list(csv.DictReader(f))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    exe = os.path.abspath(sys.argv[1])
    failures = 0
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        for name, wl in WORKLOADS:
            for write in ("back", "through"):
                args = wl + SMALL_MODEL + ["--seeds", "3", "--budgets", "2KiB,8KiB,32KiB," + HUGE_GPU,
                                           "--tier-budgets", "0,4KiB,64KiB," + HUGE_TIER,
                                           "--tier-write", write]
                rows = run(exe, args, "t.csv")
                huge_budget = max(int(r["budget_bytes"]) for r in rows)
                huge_tier = max(int(r["tier_bytes"]) for r in rows)
                first_use = {}  # seed -> tokens of first uses (lazy, GPU holds everything)
                for r in rows:
                    if (r["policy"] == "lazy" and int(r["budget_bytes"]) == huge_budget
                            and int(r["tier_bytes"]) == 0):
                        if int(r["evictions"]) != 0:
                            sys.exit("FAIL: %s: the largest budget evicted" % name)
                        first_use[r["seed"]] = int(r["doc_tokens"]) - int(r["hit_tokens"])
                gpu = {}
                for r in rows:
                    doc, hit, copy = (int(r[k]) for k in ("doc_tokens", "hit_tokens", "copy_tokens"))
                    tier_hit, rec = int(r["tier_hit_tokens"]), int(r["recomputed_tokens"])
                    tier = int(r["tier_bytes"])
                    where = "%s write-%s seed %s budget %s %s tier %d" % (
                        name, write, r["seed"], r["budget_bytes"], r["policy"], tier)
                    bad = []
                    if hit + copy + tier_hit + rec != doc:
                        bad.append("hit %d + copy %d + tier %d + recomputed %d != %d"
                                   % (hit, copy, tier_hit, rec, doc))
                    if tier == 0 and tier_hit != 0:
                        bad.append("tier hits %d without a tier" % tier_hit)
                    key = (r["seed"], r["budget_bytes"], r["policy"])
                    if gpu.setdefault(key, (hit, copy)) != (hit, copy):
                        bad.append("GPU hits %s changed with the tier (was %s)" % ((hit, copy), gpu[key]))
                    if tier == huge_tier and r["policy"] in ("lazy", "position"):
                        checked += 1
                        if rec != first_use[r["seed"]]:
                            bad.append("recomputed %d with an unbounded tier, first uses %d"
                                       % (rec, first_use[r["seed"]]))
                    for b in bad:
                        print("FAIL %s: %s" % (where, b))
                        failures += 1
                # the tier must have done something somewhere, or the identities are idle
                if not any(int(r["tier_hit_tokens"]) > 0 for r in rows):
                    print("FAIL %s write-%s: no tier hit anywhere" % (name, write))
                    failures += 1
    print("%d unbounded-tier rows checked, %d failures" % (checked, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
