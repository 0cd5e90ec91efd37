#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The serving peer (issue 16, item 4): a Llama-3.1-8B-shaped forward in torch.

bf16 weights (random, one layer's weights reused for all layers, as the C
engine's --model 8b shape), F.linear with fused QKV and gate/up projections,
RMSNorm, NeoX RoPE, SDPA with GQA, SwiGLU; the LM head on the last token only.
Prints, with CUDA events (3 warm-ups, median of --reps):
  cold prefill of 2048 and 10240 tokens (causal);
  a question of 32 tokens over 10240 cached tokens (their K/V given, each layer its own);
  2080 new tokens over 8192 cached ones (a request whose documents are half cached);
  decode steps of B sequences x 1 token over --decode-context cached tokens each
  (B in --decode, default 1, 16, 64; bench_forward's decode cases);
so that rag_bench's end-to-end figures have a production-class anchor from
the same device call.
    python3 bench/llama_peer.py [--layers 32] [--reps 5] [--csv FILE] [--decode 1,16,64] [--decode-context 2048]
                                [--no-forwards]   (only the decode steps, as bench_forward's)
"""
import argparse
import csv

import torch
import torch.nn.functional as F

from sdpa_peer import time_ms  # CUDA events, 3 warm-ups, median (same folder)

HID, H, KV, D, FFN, VOCAB = 4096, 32, 8, 128, 14336, 32000


def rnd(*shape, scale=1.0):
    return torch.empty(*shape, device="cuda", dtype=torch.bfloat16).uniform_(-scale, scale)


class Layer:
    def __init__(self):
        s = HID ** -0.5
        self.wqkv = rnd((H + 2 * KV) * D, HID, scale=s)
        self.wo = rnd(HID, H * D, scale=s)
        self.wgu = rnd(2 * FFN, HID, scale=s)
        self.wd = rnd(HID, FFN, scale=FFN ** -0.5)
        self.n1 = torch.ones(HID, device="cuda", dtype=torch.bfloat16)
        self.n2 = torch.ones(HID, device="cuda", dtype=torch.bfloat16)


def rms(x, w):
    v = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(v + 1e-5)).to(x.dtype) * w


def rope(x, pos, theta=500000.0):
    # x [T, heads, D], NeoX halves
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, device="cuda", dtype=torch.float32) / D))
    ang = pos.float()[:, None] * inv[None, :]
    c, s = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2 = x[..., : D // 2].float(), x[..., D // 2:].float()
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1).to(x.dtype)


def forward(layer, n_layers, x, pos, past_k, past_v, head):
    """x [T, HID]; past_k/v [n_layers, 1, KV, C, D] or None: each layer its own
    cached K/V, as in an engine (one copy for all layers would sit in L2)."""
    T = x.shape[0]
    C = 0 if past_k is None else past_k.shape[3]
    # causal over the new tokens, every cached token visible
    mask = None
    if C:
        mask = torch.arange(C + T, device="cuda")[None, :] <= (C + torch.arange(T, device="cuda"))[:, None]
    for li in range(n_layers):
        h = rms(x, layer.n1)
        qkv = F.linear(h, layer.wqkv)
        q, k, v = qkv.split([H * D, KV * D, KV * D], -1)
        # [1, heads, T, D]: four dimensions, so that SDPA takes its flash /
        # memory-efficient kernels (three-dimensional inputs took the math path:
        # 2.8 s for a cold 10 240-token forward in the first call)
        q = rope(q.view(T, H, D), pos).transpose(0, 1).unsqueeze(0)
        k = rope(k.view(T, KV, D), pos).transpose(0, 1).unsqueeze(0)
        v = v.view(T, KV, D).transpose(0, 1).unsqueeze(0)
        if C:
            k, v = torch.cat([past_k[li], k], 2), torch.cat([past_v[li], v], 2)
        g = H // KV
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        if C:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.squeeze(0)
        x = x + F.linear(a.transpose(0, 1).reshape(T, H * D), layer.wo)
        h = rms(x, layer.n2)
        gu = F.linear(h, layer.wgu)
        gate, up = gu.split([FFN, FFN], -1)
        x = x + F.linear(F.silu(gate) * up, layer.wd)
    return F.linear(x[-1:], head)


def decode_forward(layer, n_layers, x, pos, k_cache, v_cache, head):
    """One decode step: x [B, HID] one new token per sequence at position pos
    (the same for all); k/v_cache [n_layers, B, KV, pos + 1, D] preallocated,
    each layer's own, the new K/V written in place at pos (a static cache, as
    engines keep one); GQA as G queries per KV head (no repeated K/V); the LM
    head on every row."""
    B = x.shape[0]
    p = int(pos[0])
    g = H // KV
    for li in range(n_layers):
        h = rms(x, layer.n1)
        qkv = F.linear(h, layer.wqkv)
        q, k, v = qkv.split([H * D, KV * D, KV * D], -1)
        q = rope(q.view(B, H, D), pos)
        k_cache[li, :, :, p] = rope(k.view(B, KV, D), pos)
        v_cache[li, :, :, p] = v.view(B, KV, D)
        a = F.scaled_dot_product_attention(q.view(B, KV, g, D), k_cache[li], v_cache[li])
        x = x + F.linear(a.reshape(B, H * D), layer.wo)
        h = rms(x, layer.n2)
        gu = F.linear(h, layer.wgu)
        gate, up = gu.split([FFN, FFN], -1)
        x = x + F.linear(F.silu(gate) * up, layer.wd)
    return F.linear(x, head).argmax(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--csv")
    ap.add_argument("--decode", default="1,16,64",
                    help="decode batch sizes, comma separated ('' for none)")
    ap.add_argument("--decode-context", type=int, default=2048)
    ap.add_argument("--no-forwards", action="store_true", help="only the decode steps")
    a = ap.parse_args()
    if a.layers < 1 or a.reps < 1:
        ap.error("--layers and --reps must be >= 1")
    try:
        a.decode = [int(v) for v in a.decode.split(",")] if a.decode else []
    except ValueError:
        ap.error("--decode: comma separated integers")
    if any(b < 1 or b > 256 for b in a.decode) or not 1 <= a.decode_context <= 65535:
        ap.error("--decode: batch sizes 1..256; --decode-context 1..65535")
    torch.manual_seed(1)
    layer, head = Layer(), rnd(VOCAB, HID, scale=HID ** -0.5)
    rows = []
    forwards = (("cold_2048", 2048, 0), ("cold_10240", 10240, 0),
                ("question_32_over_10240", 32, 10240), ("new_2080_over_8192", 2080, 8192))
    with torch.inference_mode():
        for name, new, cached in () if a.no_forwards else forwards:
            x = rnd(new, HID)
            pos = torch.arange(cached, cached + new, device="cuda")
            pk = rnd(a.layers, 1, KV, cached, D) if cached else None
            pv = rnd(a.layers, 1, KV, cached, D) if cached else None
            out = forward(layer, a.layers, x, pos, pk, pv, head)
            if not torch.isfinite(out.float()).all():
                raise SystemExit(f"{name}: non-finite output")
            ms = time_ms(lambda: forward(layer, a.layers, x, pos, pk, pv, head), a.reps)
            rows.append((name, new, cached, ms))
            del x, pk, pv
        for b in a.decode:
            k_cache = rnd(a.layers, b, KV, a.decode_context + 1, D)
            v_cache = rnd(a.layers, b, KV, a.decode_context + 1, D)
            x = rnd(b, HID)
            pos = torch.full((b,), a.decode_context, device="cuda", dtype=torch.long)
            out = decode_forward(layer, a.layers, x, pos, k_cache, v_cache, head)
            if out.shape != (b,):
                raise SystemExit(f"decode {b}: output shape {tuple(out.shape)}")
            ms = time_ms(lambda: decode_forward(layer, a.layers, x, pos, k_cache, v_cache, head), a.reps)
            rows.append((f"decode_{b}x1_over_{a.decode_context}", b, a.decode_context, ms))
            del k_cache, v_cache, x
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["case", "new_tokens", "cached_tokens", "ms"])
            w.writerows(rows)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {a.layers} layers, bf16")
    print(f"{'case':<26} {'new':>6} {'cached':>7} {'ms':>9}")
    for name, new, cached, ms in rows:
        print(f"{name:<26} {new:>6} {cached:>7} {ms:>9.2f}")


if __name__ == "__main__":
    main()
