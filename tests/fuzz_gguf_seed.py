#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Seed corpus for tests/fuzz_gguf.c: a tiny valid llama GGUF v3 (1 layer,
hidden 32, 2 heads of 16, 1 KV head, FFN 8, vocab 4; f32 norms, f16
projections) and a few of its variants (Q8_0 and BF16 weights among them), so the fuzzer starts past the
header checks.  usage: fuzz_gguf_seed.py DIR"""
import os
import struct
import sys

H, HEADS, KV, HD, FFN, VOCAB = 32, 2, 1, 16, 8, 4


def s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def kv_u32(k, v):
    return s(k) + struct.pack("<II", 4, v)


def kv_f32(k, v):
    return s(k) + struct.pack("<If", 6, v)


def kv_str(k, v):
    return s(k) + struct.pack("<I", 8) + s(v)


def blob_of(t, d0, d1):
    """d0 x d1 values of ggml type t: F32 (0), F16 (1), Q8_0 (8) or BF16 (30)."""
    n = d0 * d1
    vals = [((i * 37) % 128 - 64) / 512 for i in range(n)]
    if t == 0:
        return struct.pack("<%df" % n, *[1.0 + i / 512 for i in range(n)])
    if t == 1:
        return struct.pack("<%de" % n, *vals)
    if t == 30:  # the top half of each f32
        return b"".join(struct.pack("<f", v)[2:] for v in vals)
    assert t == 8 and d0 % 32 == 0  # Q8_0: per 32 values an f16 scale and 32 int8
    return b"".join(struct.pack("<e", 1 / 64) +
                    struct.pack("<32b", *[(i * 37 + b) % 255 - 127 for i in range(32)])
                    for b in range(n // 32))


def gguf(extra_kv=b"", n_extra=0, tied=False, rope_freqs=False, mat_type=1):
    tensors = [("token_embd.weight", H, VOCAB, 1), ("output_norm.weight", H, 1, 0)]
    if rope_freqs:  # Llama 3.x as llama.cpp's converter writes it: [HD / 2] f32 divisors
        tensors.append(("rope_freqs.weight", HD // 2, 1, 0))
    if not tied:
        tensors.append(("output.weight", H, VOCAB, 1))
    for name, d0, d1, t in [("attn_norm", H, 1, 0), ("attn_q", H, HEADS * HD, 1),
                            ("attn_k", H, KV * HD, 1), ("attn_v", H, KV * HD, 1),
                            ("attn_output", HEADS * HD, H, 1), ("ffn_norm", H, 1, 0),
                            ("ffn_gate", H, FFN, 1), ("ffn_up", H, FFN, 1),
                            ("ffn_down", FFN, H, 1)]:
        tensors.append(("blk.0.%s.weight" % name, d0, d1, t))
    kvs = [s("general.architecture") + struct.pack("<I", 8) + s("llama"),
           kv_u32("llama.block_count", 1), kv_u32("llama.embedding_length", H),
           kv_u32("llama.feed_forward_length", FFN), kv_u32("llama.attention.head_count", HEADS),
           kv_u32("llama.attention.head_count_kv", KV), kv_f32("llama.rope.freq_base", 10000.0),
           kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5)]
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs) + n_extra)
    out += b"".join(kvs) + extra_kv
    data, off = [], 0
    for name, d0, d1, t in tensors:
        if t == 1 and (mat_type != 8 or d0 % 32 == 0):  # Q8_0 rows are whole blocks
            t = mat_type
        dims = [d0] if d1 == 1 else [d0, d1]
        out += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", t, off)
        blob = blob_of(t, d0, d1)
        blob += b"\0" * (-len(blob) % 32)
        data.append(blob)
        off += len(blob)
    out += b"\0" * (-len(out) % 32)
    return out + b"".join(data)


def main():
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    seeds = {
        "tiny_llama.gguf": gguf(),
        "tiny_llama_tied.gguf": gguf(tied=True),
        "tiny_llama_rope_scaling.gguf": gguf(kv_f32("llama.rope.scaling.factor", 8.0) +
                                             kv_u32("llama.rope.scaling.original_context_length",
                                                    8192), 2),
        "tiny_llama_rope_freqs.gguf": gguf(rope_freqs=True),
        "tiny_llama_linear.gguf": gguf(kv_str("llama.rope.scaling.type", "linear") +
                                       kv_f32("llama.rope.scaling.factor", 4.0), 2),
        "tiny_llama_q8_0.gguf": gguf(mat_type=8),
        "tiny_llama_bf16.gguf": gguf(mat_type=30),
    }
    for name, blob in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
