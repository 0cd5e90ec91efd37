#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The CUDA side of bench/probe_launch.c (issue 16): what a short launch costs
through torch on the same GPU, timed as the probe times OpenCL.

  one     CUDA events around one launch after the queue drained (median of 21)
  stream  events around 32 back-to-back launches, over 32 (median of 5)
for a one-element add (the launch floor) and for a plain sum of 8.4 .. 134 MB
of random bf16, each launch on its own window of a 2 GiB buffer (cold in the
L2); GB/s and % of the 2 GiB read ceiling measured here.
    python3 bench/launch_peer.py
"""
import statistics

import torch


def events_ms(fn, n):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for i in range(n):
        fn(i)
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / n


def one_and_stream(fn):
    for i in range(3):
        fn(i)
    torch.cuda.synchronize()
    one = statistics.median(events_ms(lambda j: fn(i + j), 1) for i in range(21))
    stream = statistics.median(events_ms(lambda j: fn(r * 32 + j), 32) for r in range(5))
    return one * 1e3, stream * 1e3  # us


def main():
    buf = torch.empty(1 << 30, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
    full = one_and_stream(lambda i: buf.sum(dtype=torch.float32))
    ceiling = buf.numel() * 2 / (full[0] * 1e-6) * 1e-9
    print(f"device: {torch.cuda.get_device_name()}; read ceiling (sum over 2 GiB) {ceiling:.0f} GB/s")
    tiny = torch.zeros(1, device="cuda")
    one, stream = one_and_stream(lambda i: tiny.add_(1))
    print(f"torch one-element add: one {one:7.2f} us | stream {stream:7.2f} us")
    for mb_rows in (1024, 2048, 4096, 6144, 8192, 16384):
        n = mb_rows * 4096  # elements: the weights of mb_rows x 4096
        windows = buf.numel() // n
        one, stream = one_and_stream(lambda i: buf[(i % windows) * n:(i % windows + 1) * n].sum(dtype=torch.float32))
        mb = n * 2 / 1e6
        print(f"torch sum {mb:6.1f} MB: one {one:7.2f} us {100 * mb * 1e3 / one / ceiling:5.1f}% | "
              f"stream {stream:7.2f} us {100 * mb * 1e3 / stream / ceiling:5.1f}%")


if __name__ == "__main__":
    main()
