#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The GEMM peer (issue 16, item 1): torch.matmul in bf16 on the
Llama-3.1-8B projections, the figures the tensor-core GEMM is measured
against, and the device's read ceiling for the decode-sized ones.

y[M, N] = x[M, K] @ W[N, K]^T (F.linear) for the fused QKV (6144 x 4096), the
output (4096 x 4096), the fused gate/up (28672 x 4096) and the down
(4096 x 14336) projections, at M = 1, 16, 64 (weight-read bound: GB/s of the
weights, % of the read ceiling measured here) and M = 2048, 10240
(compute bound: TFLOP/s). CUDA events, 3 warm-ups, median of --reps; random
weights and activations in [-1, 1) (never zeros).
    python3 bench/gemm_peer.py [--reps 20] [--csv FILE] [--stream]
--stream adds the decode-sized rows timed as a stream: --reps back-to-back
F.linear calls over copies of W that exceed the L2, events around the
stream, over --reps (median of 5), as bench_gemm_small's "strm" column.
"""
import argparse
import csv
import statistics

import torch
import torch.nn.functional as F

from sdpa_peer import time_ms  # CUDA events, 3 warm-ups, median (same folder)

PROJ = [("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336)]
MS = [1, 16, 64, 2048, 10240]


def rnd(*shape):
    return torch.empty(*shape, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)


def read_ceiling(reps):
    """GB/s of a plain reduction over 2 GiB (the bandwidth a weight read can reach)."""
    x = torch.empty(1 << 30, device="cuda", dtype=torch.float16).uniform_(-1, 1)
    ms = time_ms(lambda: x.sum(dtype=torch.float32), reps)
    return x.numel() * 2 / ms * 1e-6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--stream", action="store_true",
                    help="also time M <= 64 as back-to-back launches over W copies beyond the L2")
    a = ap.parse_args()
    if a.reps < 1:
        ap.error("--reps must be >= 1")
    ceiling = read_ceiling(a.reps)
    print(f"device: {torch.cuda.get_device_name()}; read ceiling {ceiling:.0f} GB/s")
    print(f"{'projection':<10} {'N':>6} {'K':>6} {'M':>6} {'ms':>9} {'TFLOP/s':>8} {'GB/s W':>8} {'%read':>6}")
    rows = []
    streams = []
    for name, n, k in PROJ:
        w = rnd(n, k)
        for m in MS:
            x = rnd(m, k)
            ms = time_ms(lambda: F.linear(x, w), a.reps)
            tflops = 2.0 * m * n * k / ms * 1e-9
            gbs = n * k * 2 / ms * 1e-6  # the weights read once
            rows.append((name, n, k, m, ms, tflops, gbs, 100 * gbs / ceiling))
            print(f"{name:<10} {n:>6} {k:>6} {m:>6} {ms:>9.4f} {tflops:>8.1f} {gbs:>8.0f} {100 * gbs / ceiling:>5.1f}%")
            del x
        if a.stream:  # decode-sized rows over W copies beyond the L2, back to back
            copies = [w] + [rnd(n, k) for _ in range(max(1, (600 << 20) // (n * k * 2)))]
            for m in [mm for mm in MS if mm <= 64]:
                x = rnd(m, k)
                for _ in range(3):
                    F.linear(x, copies[0])
                torch.cuda.synchronize()
                per = []
                for r in range(5):
                    b0, b1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    b0.record()
                    for i in range(a.reps):
                        F.linear(x, copies[(r * a.reps + i) % len(copies)])
                    b1.record()
                    b1.synchronize()
                    per.append(b0.elapsed_time(b1) / a.reps)
                ms = statistics.median(per)
                gbs = n * k * 2 / ms * 1e-6
                streams.append((name, n, k, m, ms, gbs, 100 * gbs / ceiling))
                del x
            del copies
        del w
    if streams:
        print(f"stream (back-to-back F.linear, W rotated over copies beyond the L2, {a.reps} per span, median of 5)")
        for name, n, k, m, ms, gbs, pct in streams:
            print(f"stream {name:<10} {n:>6} {k:>6} {m:>6} {ms:>9.4f} {gbs:>8.0f} {pct:>5.1f}%")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            wr = csv.writer(f)
            wr.writerow(["projection", "n", "k", "m", "ms", "tflops", "weight_gbs", "pct_read"])
            wr.writerows(rows)


if __name__ == "__main__":
    main()
