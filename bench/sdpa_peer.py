#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The peer: torch scaled_dot_product_attention on the shapes of bench_kernels.

Run in the same device call right after bench/bench_kernels --csv FILE:
    python3 bench/sdpa_peer.py --ours FILE
Times SDPA with CUDA events (3 warm-ups, median of --reps), fp16, 32 query heads,
8 KV heads (enable_gqa), d = 128, then prints our/peer ratios; the table is last.
FLOPs = 4 * B * H * d * (visible pairs), causal counted as S^2 / 2 (as in the
C program); decode effective bandwidth = K and V bytes / time.
"""
import argparse
import csv
import re
import statistics

import torch
import torch.nn.functional as F

H, KV, D = 32, 8, 128


def sdpa(q, k, v, **kw):
    try:
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)
    except TypeError:  # torch < 2.5: expand the KV heads
        g = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), **kw)


def time_ms(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def rnd(*shape):
    return torch.empty(*shape, device="cuda", dtype=torch.float16).uniform_(-1, 1)


def peers(reps, names=()):
    """names: the rows of our CSV; a prefill (a) row with another T than 4096
    (bench_kernels --prefill-queries T) gets its own peer."""
    out = {}
    # prefill (b): B = 2, S = 8192, causal
    q, k, v = rnd(2, H, 8192, D), rnd(2, KV, 8192, D), rnd(2, KV, 8192, D)
    out["prefill_b_2x8192_causal"] = time_ms(lambda: sdpa(q, k, v, is_causal=True), reps)
    del q, k, v
    # prefill (a): 4096 queries over 8192 cached + 4096 new keys, causal in the new ones
    # (a boolean mask: SDPA's is_causal aligns top-left when q_len != kv_len)
    C = 8192
    ts = {4096} | {int(m.group(1)) for m in (re.fullmatch(r"prefill_a_(\d+)_over_4x2048", n) for n in names) if m}
    for T in sorted(ts):
        q, k, v = rnd(1, H, T, D), rnd(1, KV, C + T, D), rnd(1, KV, C + T, D)
        mask = torch.arange(C + T, device="cuda")[None, :] <= (C + torch.arange(T, device="cuda"))[:, None]
        out["prefill_a_%d_over_4x2048" % T] = time_ms(lambda: sdpa(q, k, v, attn_mask=mask), reps)
        del q, k, v, mask
    # prefill (c): B = 1, S = 16384, not causal (every query sees every key)
    q, k, v = rnd(1, H, 16384, D), rnd(1, KV, 16384, D), rnd(1, KV, 16384, D)
    out["prefill_c_1x16384"] = time_ms(lambda: sdpa(q, k, v), reps)
    del q, k, v
    for b, l in ((1, 32768), (16, 8192), (64, 4096), (128, 4096)):
        q, k, v = rnd(b, H, 1, D), rnd(b, KV, l, D), rnd(b, KV, l, D)
        out["decode_%dx%d" % (b, l)] = time_ms(lambda: sdpa(q, k, v), reps)
        del q, k, v
    return out


# issue 11's "done when": ratio = peer time / ours
TARGETS = {"prefill_b_2x8192_causal": 0.7, "prefill_c_1x16384": 0.7, "prefill_a_4096_over_4x2048": 1.5,
           "decode_1x32768": 1.0, "decode_16x8192": 1.0, "decode_64x4096": 1.0, "decode_128x4096": 1.0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True)
    ap.add_argument("--reps", type=int, default=25)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    print("torch", torch.__version__, torch.cuda.get_device_name())
    rows = list(csv.DictReader(open(a.ours)))
    peer = peers(max(a.reps, 20), [r["name"] for r in rows])
    print()
    print("%-28s %9s %9s %9s %9s %8s %7s %8s %7s" % ("shape", "ours ms", "peer ms", "ours", "peer",
                                                      "unit", "ratio", "target", "rot.ovh"))
    for r in rows:
        name, ms, ms0 = r["name"], float(r["ms"]), float(r["ms_zero"])
        flops, nbytes = float(r["flops"]), float(r["bytes"])
        p = peer.get(name)
        if nbytes > 0:
            ours, unit, scale = nbytes / ms / 1e6, "GB/s", nbytes / 1e6
        else:
            ours, unit, scale = flops / ms / 1e9, "TFLOP/s", flops / 1e9
        theirs = scale / p if p else float("nan")
        ratio = p / ms if p else float("nan")
        tgt = TARGETS.get(name)
        print("%-28s %9.4f %9.4f %9.1f %9.1f %8s %6.2fx %8s %+6.2f%%" % (
            name, ms, p or float("nan"), ours, theirs, unit, ratio,
            ("%.1fx" % tgt) if tgt else "-", 100 * (ms - ms0) / ms0))


if __name__ == "__main__":
    main()
