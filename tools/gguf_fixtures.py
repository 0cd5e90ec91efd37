#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the small GGUF fixtures of tests/test_gguf_fixtures.c and their
expected logits, from an implementation nobody here wrote.

Run by hand (not by CI), with llama.cpp's gguf-py, transformers and torch:

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install gguf transformers torch
    /tmp/venv/bin/python tools/gguf_fixtures.py tests/fixtures

(the committed fixtures: gguf 0.19.0, transformers 5.25.0, torch 2.15.0;
the output is deterministic: seeded weights and tokens).

Each model is a random-weight Llama in Hugging Face transformers
(LlamaForCausalLM), written as GGUF in the layout llama.cpp's converter
(convert_hf_to_gguf.py, LlamaModel) gives it:
  - Q and K rows permuted for the GPT-J pairing (the converter's permute());
  - 2-D weights F16 (--outtype f16), 1-D norms F32; HF holds the same
    F16-rounded values, so the file is the model exactly;
  - Llama-3 RoPE scaling as the converter writes it: a rope_freqs.weight
    tensor (F32, [head_dim / 2] divisors, computed with the converter's
    formula) and no scaling keys;
  - linear scaling as llama.rope.scaling.type = "linear" + .factor;
  - head_dim != hidden / heads as llama.attention.key_length / value_length;
  - tied embeddings: no output.weight.
Expected logits: transformers' forward in float64 (model.double()) at every
token of two 6-token sequences at increasing positions with gaps (POSITIONS:
from 0, and from 9000, past Llama-3's original 8192 context). Two things transformers does in float32 even in a float64
model are done in float64 here, so that the reference is float64 throughout
(at position 9000, float32 angles are off by ~5e-4 rad): the inverse
frequencies (rope_init_fn builds them from a float32 arange; they are
recomputed below with the same formulas as transformers' rope_utils,
_compute_llama3_parameters and _compute_linear_scaling_rope_parameters, and
checked against transformers' own float32 values), and the rotary
embedding's cos/sin (LlamaRotaryEmbedding.forward casts to float32; it is
replaced by the same computation in the input's dtype).

Quantized forms (the files people download): the same kind of model with
its 2-D weights stored as
  - bf16:   BF16 (gguf-py's quantizer: round to nearest even);
  - q8_0:   Q8_0 (gguf-py's quantizer, bit-exact with ggml's);
  - q4_k_m: a Q4_K_M-like mix on a shape whose rows are whole 256-value
            super-blocks (hidden 256): Q4_K (token_embd, attn_q, ffn_gate,
            ffn_up), Q5_K (attn_k), Q6_K (attn_v, output), and for the
            32-value rows that K-quants cannot hold, the converter's
            fallbacks Q4_0 (attn_output) and Q8_0 (ffn_down).
gguf-py cannot quantize K-quants, so quantize_k below does (a plain
min/max fit per sub-block, packed as ggml-common.h lays the blocks out);
every quantized tensor is read back through gguf-py's own dequantizer,
which must land near the float weights (a packing mistake would not). The
Hugging Face model is then given the *dequantized* weights, so its float64
logits are exact for the quantized file.

Dequantizer fixture quant_blocks.bin: random blocks of every type the
engine reads (F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K; scales finite) and
gguf.quants.dequantize's f32 values: "LZQUANT1", u32 n_cases; per case:
u32 ggml type, u32 n_values, u32 n_bytes, the bytes, f32 values[n_values].

Refusal fixtures (tiny, never run): yarn scaling, an unknown scaling type,
llama.vocab_size disagreeing with token_embd.weight, a rope_freqs.weight
with a zero divisor, a tensor the engine does not implement (a Q bias), a
Q2_K tensor (a type the engine does not read).

RAG prompts (NAME.rag, for llama3_rope_freqs and q8_0; read by
tests/test_rag_fixture.c): [prefix 5] [doc A 11] [doc B 19] [question 4]
at contiguous logical positions from 0 and from 9000, the documents
attended in isolation as the library defines them (Block-Attention;
lazyattn_segment in include/lazyattn.h): a document's tokens see only that
document's earlier tokens, the prefix and question tokens every earlier
token. The reference is transformers' forward with explicit position_ids
and that block mask as a 4-D additive float64 mask (SDPA, so the softmax is
float64 too; eager would do it in float32). The documents' queries take
their logical positions there; the library computes a document's K/V at
document-local positions 0..L-1 and reuses them at its logical start. The
same thing, since RoPE scores depend only on position differences and a
document sees only itself: each document's rows are checked against the
document run alone at 0..L-1, and the question's rows against a cache built
by parts (the prefix and each document run alone, at their logical
positions, their K/V concatenated, the question run over them), both within
1e-12. Beside the isolated logits, those of the whole prompt attended
causally (documents not isolated), 0.3 .. 0.7 away (asserted > 1e-2), so
that a test comparing against the first can fail. Format (little-endian):
"LZRAGLG1", u32 n_prompts; per prompt: i32 start, u32 n_prefix, n_a, n_b,
n_question, vocab; i32 tokens[n_prefix + n_a + n_b + n_question];
f64 isolated[n_question][vocab]; f64 causal[n_question][vocab].

Expected-logits file NAME.logits (little-endian): "LZLOGIT1", u32 n_seqs;
per sequence: u32 n_tokens, u32 vocab, i32 positions[n], i32 tokens[n],
f64 logits[n][vocab].
"""
import math
import os
import struct
import sys

import gguf
import numpy as np
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama

# Two sequences, positions increasing with gaps (each token its own KV block
# in the test): RoPE depends only on key-query distances, so the scaling of
# the low frequencies shows only over distances of thousands. The second
# starts past Llama-3's original 8192 context and spans more than it.
POSITIONS = ([0, 1, 2, 1500, 4000, 7000], [9000, 9001, 9100, 12000, 17000, 30000])


def rotary_forward_f64(self, x, position_ids):
    """LlamaRotaryEmbedding.forward in x's dtype (float64 here)."""
    freqs = position_ids[..., None].to(x.dtype) * self.inv_freq.to(device=x.device, dtype=x.dtype)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling


modeling_llama.LlamaRotaryEmbedding.forward = rotary_forward_f64


def inv_freq_f64(theta, dim, rope):
    """transformers' rope_utils formulas, in float64."""
    inv = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    kind = rope.get("rope_type", "default") if rope else "default"
    if kind == "linear":
        return inv / rope["factor"]
    if kind == "llama3":
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        low_wl, high_wl = old / low, old / high
        wl = 2 * math.pi / inv
        out = np.where(wl > low_wl, inv / factor, inv)
        smooth = (old / wl - low) / (high - low)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        return np.where(medium, smoothed, out)
    assert kind == "default", kind
    return inv


def converter_rope_freqs(theta, dim, rope):
    """convert_hf_to_gguf.py LlamaModel.generate_extra_tensors (llama3)."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    low_wl, high_wl = old / low, old / high
    out = []
    for freq in freqs:
        wl = 2 * math.pi / freq
        if wl < high_wl:
            out.append(1)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old / wl - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py LlamaModel.permute."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def make_model(spec, seed):
    rope = spec.get("rope")
    params = {"rope_theta": spec["theta"]}
    if rope:
        params.update(rope)
    else:
        params["rope_type"] = "default"
    kw = dict(vocab_size=spec["vocab"], hidden_size=spec["hidden"],
              intermediate_size=spec["ffn"], num_hidden_layers=spec["layers"],
              num_attention_heads=spec["heads"], num_key_value_heads=spec["kv_heads"],
              rms_norm_eps=spec["eps"], max_position_embeddings=16384,
              tie_word_embeddings=spec.get("tied", False), rope_parameters=params,
              attention_bias=False, mlp_bias=False)
    if "head_dim" in spec:
        kw["head_dim"] = spec["head_dim"]
    config = LlamaConfig(**kw)
    model = LlamaForCausalLM(config)
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # norms: 1 + noise, kept F32 by the converter
                v = (1.0 + 0.2 * rng.standard_normal(p.shape)).astype(np.float32)
            elif "embed_tokens" in name or "lm_head" in name:
                v = rng.standard_normal(p.shape).astype(np.float16)
            else:  # [out, in]: variance 2 / in, so attention is far from uniform
                v = (rng.standard_normal(p.shape) * math.sqrt(2.0 / p.shape[1])).astype(np.float16)
            p.copy_(torch.from_numpy(v.astype(np.float32)))
    model = model.double().eval()
    dim = config.head_dim
    rot = model.model.rotary_emb
    ours = inv_freq_f64(spec["theta"], dim, rope)
    theirs = rot.inv_freq.double().numpy()  # transformers' own (float32) values
    assert np.allclose(ours, theirs, rtol=1e-6, atol=0), (ours, theirs)
    rot.inv_freq = torch.from_numpy(ours)
    return model, config


Q = gguf.GGMLQuantizationType


def _scale_fit(x, levels):
    """Per row of x [..., n]: offset mn <= 0 and step so that x ~ step * q + mn, q in 0..levels."""
    mn = np.minimum(x.min(axis=-1), 0.0)
    step = (x.max(axis=-1) - mn) / levels
    return mn, step


def _f16(a):
    return np.asarray(a, dtype=np.float32).astype(np.float16)


def quantize_k(x, qtype):
    """Q4_K / Q5_K / Q6_K blocks of x [rows, n] (n a multiple of 256), as
    uint8 [rows, n / 256 * type_size], in ggml-common.h's layouts."""
    rows, n = x.shape
    b = x.astype(np.float32).reshape(-1, 256)
    nb = b.shape[0]
    if qtype in (Q.Q4_K, Q.Q5_K):
        levels = 15 if qtype == Q.Q4_K else 31
        sub = b.reshape(nb, 8, 32)
        mn, step = _scale_fit(sub, levels)
        d = _f16(step.max(axis=1) / 63).astype(np.float32)
        dmin = _f16(-mn.min(axis=1) / 63).astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            sc = np.where(d[:, None] > 0, np.rint(step / d[:, None]), 0)
            m = np.where(dmin[:, None] > 0, np.rint(-mn / dmin[:, None]), 0)
            sc, m = sc.clip(0, 63).astype(np.uint8), m.clip(0, 63).astype(np.uint8)
            scale = (d[:, None] * sc)[..., None]
            q = np.where(scale > 0, np.rint((sub + (dmin[:, None] * m)[..., None]) / scale), 0)
        q = q.clip(0, levels).astype(np.uint8)
        scales = np.zeros((nb, 12), dtype=np.uint8)
        for j in range(4):  # get_scale_min_k4's packing
            scales[:, j] = sc[:, j] | ((sc[:, j + 4] >> 4) << 6)
            scales[:, j + 4] = m[:, j] | ((m[:, j + 4] >> 4) << 6)
            scales[:, j + 8] = (sc[:, j + 4] & 0xF) | ((m[:, j + 4] & 0xF) << 4)
        lo = q & 0xF  # 4 x 32 bytes: sub-block 2c in the low nibbles, 2c + 1 in the high
        qs = (lo[:, 0::2, :] | (lo[:, 1::2, :] << 4)).reshape(nb, 128)
        parts = [_f16(d).view(np.uint8).reshape(nb, 2), _f16(dmin).view(np.uint8).reshape(nb, 2),
                 scales]
        if qtype == Q.Q5_K:  # bit i of qh[l]: the fifth bit of value l of sub-block i
            hi = (q >> 4).astype(np.uint8)
            qh = np.zeros((nb, 32), dtype=np.uint8)
            for i in range(8):
                qh |= hi[:, i, :] << i
            parts.append(qh)
        parts.append(qs)
    else:
        assert qtype == Q.Q6_K, qtype
        sub = b.reshape(nb, 16, 16)
        amax = np.abs(sub).max(axis=-1)
        scale = amax / 31.5
        d = _f16(scale.max(axis=1) / 127).astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            sc = np.where(d[:, None] > 0, np.rint(scale / d[:, None]), 0)
            sc = sc.clip(-128, 127).astype(np.int8)
            step = (d[:, None] * sc)[..., None]
            q = np.where(step != 0, np.rint(sub / step), 0)
        q = (q.clip(-32, 31) + 32).astype(np.uint8).reshape(nb, 2, 4, 32)  # [half, quarter, l]
        ql = np.concatenate([q[:, :, 0] & 0xF | ((q[:, :, 2] & 0xF) << 4),
                             q[:, :, 1] & 0xF | ((q[:, :, 3] & 0xF) << 4)], axis=-1)  # [nb, 2, 64]
        qh = ((q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4)
              | ((q[:, :, 3] >> 4) << 6))  # [nb, 2, 32]
        parts = [ql.reshape(nb, 128), qh.reshape(nb, 64), sc.view(np.uint8),
                 _f16(d).view(np.uint8).reshape(nb, 2)]
    out = np.concatenate(parts, axis=-1).astype(np.uint8)
    assert out.shape[1] == gguf.GGML_QUANT_SIZES[qtype][1], (qtype, out.shape)
    return out.reshape(rows, -1)


def quantize(x, qtype):
    """x [rows, n] float -> (uint8 [rows, bytes] in qtype, its f32 dequantization by gguf-py)."""
    if qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        data = quantize_k(x, qtype)
    else:
        data = gguf.quants.quantize(x.astype(np.float32), qtype)
    deq = gguf.quants.dequantize(data, qtype).reshape(x.shape).astype(np.float32)
    # a packing mistake lands far from x; a right one within the type's rounding
    err = float(np.linalg.norm(deq - x) / np.linalg.norm(x))
    assert err < {Q.BF16: 1e-2, Q.Q8_0: 2e-2, Q.Q6_K: 5e-2}.get(qtype, 0.2), (qtype, err)
    return data, deq


# GGUF name suffix -> Hugging Face parameter, and the Q/K permutation
HF_NAMES = {"attn_q": "self_attn.q_proj.weight", "attn_k": "self_attn.k_proj.weight",
            "attn_v": "self_attn.v_proj.weight", "attn_output": "self_attn.o_proj.weight",
            "ffn_gate": "mlp.gate_proj.weight", "ffn_up": "mlp.up_proj.weight",
            "ffn_down": "mlp.down_proj.weight"}


def quantize_model(model, config, types):
    """Quantizes the 2-D weights (types: GGUF suffix -> type, "*" the rest)
    and gives the model their dequantized values. HF name -> (bytes, type)."""
    out = {}
    names = {"token_embd": "model.embed_tokens.weight", "output": "lm_head.weight"}
    for l in range(config.num_hidden_layers):
        for k, v in HF_NAMES.items():
            names[f"blk.{l}.{k}"] = f"model.layers.{l}.{v}"
    params = dict(model.named_parameters())
    with torch.no_grad():
        for g, h in names.items():
            qtype = types.get(g.split(".")[-1], types["*"])
            data, deq = quantize(params[h].detach().double().numpy(), qtype)
            params[h].copy_(torch.from_numpy(deq.astype(np.float64)))
            out[h] = (data, qtype)
    return out


def write_gguf(path, spec, model, config, extra_keys=None, extra_tensors=None, quant=None,
               file_type=gguf.LlamaFileType.MOSTLY_F16):
    w = gguf.GGUFWriter(path, "llama")
    hd = config.head_dim
    w.add_name(os.path.basename(path))
    w.add_block_count(config.num_hidden_layers)
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_rope_freq_base(spec["theta"])
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_file_type(file_type)
    w.add_vocab_size(spec.get("vocab_key", config.vocab_size))
    w.add_rope_dimension_count(hd)
    if "head_dim" in spec:
        w.add_key_length(hd)
        w.add_value_length(hd)
    rope = spec.get("rope")
    if rope and rope["rope_type"] == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    for k, v in (extra_keys or {}).items():
        if isinstance(v, str):
            w.add_string(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        else:
            w.add_uint32(k, v)
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    nh, nkv = config.num_attention_heads, config.num_key_value_heads

    def mat(gname, hname, perm=None):
        """A 2-D weight: F16, or its quantized rows (quant); Q/K rows permuted."""
        if quant is not None:
            data, qtype = quant[hname]
            w.add_tensor(gname, permute(data, *perm) if perm else data, raw_dtype=qtype)
        else:
            a = sd[hname]
            w.add_tensor(gname, (permute(a, *perm) if perm else a).astype(np.float16))

    def vec(a):
        return a.astype(np.float32)

    mat("token_embd.weight", "model.embed_tokens.weight")
    if rope and rope["rope_type"] == "llama3":
        w.add_tensor("rope_freqs.weight", converter_rope_freqs(spec["theta"], hd, rope))
    for l in range(config.num_hidden_layers):
        p = f"model.layers.{l}."
        b = f"blk.{l}."
        w.add_tensor(b + "attn_norm.weight", vec(sd[p + "input_layernorm.weight"]))
        mat(b + "attn_q.weight", p + "self_attn.q_proj.weight", (nh, nh))
        mat(b + "attn_k.weight", p + "self_attn.k_proj.weight", (nh, nkv))
        mat(b + "attn_v.weight", p + "self_attn.v_proj.weight")
        mat(b + "attn_output.weight", p + "self_attn.o_proj.weight")
        w.add_tensor(b + "ffn_norm.weight", vec(sd[p + "post_attention_layernorm.weight"]))
        mat(b + "ffn_gate.weight", p + "mlp.gate_proj.weight")
        mat(b + "ffn_up.weight", p + "mlp.up_proj.weight")
        mat(b + "ffn_down.weight", p + "mlp.down_proj.weight")
    for k, v in (extra_tensors or {}).items():
        if isinstance(v, tuple):  # (raw bytes, ggml type)
            w.add_tensor(k, v[0], raw_dtype=v[1])
        else:
            w.add_tensor(k, v)
    w.add_tensor("output_norm.weight", vec(sd["model.norm.weight"]))
    if not config.tie_word_embeddings:
        mat("output.weight", "lm_head.weight")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def logits_at(model, tokens, positions):
    ids = torch.tensor([tokens])
    pos = torch.tensor([positions])
    with torch.no_grad():
        return model(input_ids=ids, position_ids=pos).logits[0].numpy()


def norm_err(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


BASE = dict(vocab=64, hidden=32, ffn=64, layers=2, heads=2, kv_heads=1, eps=1e-5)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
MODELS = {
    "llama3_rope_freqs": dict(BASE, theta=500000.0, rope=LLAMA3),
    "linear": dict(BASE, theta=10000.0, rope={"rope_type": "linear", "factor": 4.0}),
    "no_scaling": dict(BASE, theta=10000.0),
    "head_dim": dict(BASE, theta=10000.0, head_dim=32),  # q dim 64 != hidden 32
    "tied": dict(BASE, theta=500000.0, rope=LLAMA3, tied=True),
}
TINY = dict(vocab=8, hidden=16, ffn=16, layers=1, heads=1, kv_heads=1, eps=1e-5, theta=10000.0)
BAD_FREQS = np.array([1, 1, 1, 2, 0, 8, 8, 8], dtype=np.float32)
REFUSED = {
    "refuse_yarn": (TINY, {"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0,
                           "llama.rope.scaling.original_context_length": 4096}, {}),
    "refuse_unknown_scaling": (TINY, {"llama.rope.scaling.type": "dynamic",
                                      "llama.rope.scaling.factor": 2.0}, {}),
    "refuse_vocab": (dict(TINY, vocab_key=9), {}, {}),
    "refuse_rope_freqs": (TINY, {}, {"rope_freqs.weight": BAD_FREQS}),  # a zero divisor
    "refuse_bias": (TINY, {}, {"blk.0.attn_q.bias": np.zeros(16, dtype=np.float32)}),
    # one Q2_K super-block (84 bytes, 256 values): a type the engine does not read
    "refuse_q2_k": (TINY, {}, {"blk.0.ffn_gate_q2k.weight": (
        np.random.default_rng(7).integers(0, 256, (1, 84), dtype=np.uint8), Q.Q2_K)}),
}
# The quantized forms: (shape, per-suffix types ("*": the rest), file type)
KSHAPE = dict(vocab=32, hidden=256, ffn=32, layers=1, heads=2, kv_heads=1, head_dim=16,
              eps=1e-5, theta=10000.0)
QUANT_MODELS = {
    "bf16": (dict(BASE, theta=10000.0), {"*": Q.BF16}, gguf.LlamaFileType.MOSTLY_BF16),
    "q8_0": (dict(BASE, theta=500000.0, rope=LLAMA3), {"*": Q.Q8_0},
             gguf.LlamaFileType.MOSTLY_Q8_0),
    "q4_k_m": (KSHAPE, {"*": Q.Q4_K, "attn_k": Q.Q5_K, "attn_v": Q.Q6_K, "output": Q.Q6_K,
                        "attn_output": Q.Q4_0, "ffn_down": Q.Q8_0},
               gguf.LlamaFileType.MOSTLY_Q4_K_M),
}
# dequantizer fixture: (type, number of blocks)
QUANT_BLOCKS = [(Q.F16, 96), (Q.BF16, 96), (Q.Q8_0, 6), (Q.Q4_0, 6), (Q.Q4_K, 2), (Q.Q5_K, 2),
                (Q.Q6_K, 2)]


def random_blocks(rng, qtype, n_blocks):
    """Random bytes of n_blocks blocks, every f16 / bf16 finite (scales 1e-3..1)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    if qtype in (Q.F16, Q.BF16):  # clear one exponent bit where all are set (inf / NaN)
        v = data.view(np.uint16)
        full = 0x7C00 if qtype == Q.F16 else 0x7F80
        v[(v & full) == full] &= np.uint16(~0x0400 & 0xFFFF)
        return data
    def halves(k):
        mag = np.exp(rng.uniform(np.log(1e-3), 0.0, (n_blocks, k)))
        return (mag * rng.choice([-1.0, 1.0], (n_blocks, k))).astype(np.float16).view(np.uint8)
    if qtype in (Q.Q8_0, Q.Q4_0):
        data[:, 0:2] = halves(1)
    elif qtype in (Q.Q4_K, Q.Q5_K):
        data[:, 0:4] = halves(2)
    else:
        data[:, size - 2:] = halves(1)
    return data


def write_quant_blocks(path):
    rng = np.random.default_rng(400)
    with open(path, "wb") as f:
        f.write(b"LZQUANT1" + struct.pack("<I", len(QUANT_BLOCKS)))
        for qtype, n_blocks in QUANT_BLOCKS:
            data = random_blocks(rng, qtype, n_blocks)
            values = gguf.quants.dequantize(data.reshape(1, -1), qtype).reshape(-1)
            n = n_blocks * gguf.GGML_QUANT_SIZES[qtype][0]
            assert values.shape == (n,) and values.dtype == np.float32
            assert np.isfinite(values).all()
            f.write(struct.pack("<III", int(qtype), n, data.size))
            f.write(data.tobytes())
            f.write(np.ascontiguousarray(values, dtype="<f4").tobytes())
    print(f"quant_blocks: {os.path.getsize(path)} bytes")


def write_logits(path, model, config, seed):
    """NAME.logits for the sequences of POSITIONS, tokens drawn with seed."""
    rng = np.random.default_rng(seed)
    seqs = []
    for pos in POSITIONS:
        toks = [int(t) for t in rng.integers(0, config.vocab_size, len(pos))]
        seqs.append((pos, toks, logits_at(model, toks, pos)))
    with open(path, "wb") as f:
        f.write(b"LZLOGIT1" + struct.pack("<I", len(seqs)))
        for pos, toks, lg in seqs:
            f.write(struct.pack("<II", len(toks), config.vocab_size))
            f.write(struct.pack("<%di" % len(pos), *pos))
            f.write(struct.pack("<%di" % len(toks), *toks))
            f.write(np.ascontiguousarray(lg, dtype="<f8").tobytes())
    return seqs


# The RAG prompt: [prefix] [doc A] [doc B] [question], at contiguous logical
# positions from each start (0, and 9000: past Llama-3's 8192). A 19-token
# document spans a whole 16-token KV block and a partial one.
RAG_LENGTHS = (5, 11, 19, 4)  # prefix, A, B, question
RAG_STARTS = (0, 9000)
RAG_MODELS = ("llama3_rope_freqs", "q8_0")


def rag_mask(lengths, isolated):
    """Additive [N, N] float64 mask of a RAG prompt. isolated: each document
    row sees only its own document's earlier columns (Block-Attention), the
    prefix and question rows every earlier column; not isolated: causal."""
    n = sum(lengths)
    allowed = np.tril(np.ones((n, n), dtype=bool))
    if isolated:
        doc = np.zeros(n, dtype=int)  # 0: prefix / question, k: document k
        a = lengths[0]
        for k, ln in enumerate(lengths[1:-1], start=1):
            doc[a:a + ln] = k
            a += ln
        rows = doc[:, None] > 0
        allowed &= ~rows | (doc[:, None] == doc[None, :])
    return np.where(allowed, 0.0, -np.inf)


def rag_forward(model, tokens, positions, mask):
    with torch.no_grad():
        return model(input_ids=torch.tensor([tokens]), position_ids=torch.tensor([positions]),
                     attention_mask=torch.from_numpy(mask)[None, None]).logits[0].numpy()


def rag_by_parts(model, config, segs, start):
    """The question's logits built as a document cache serves them: the
    prefix and each document run alone (a fresh forward each, so each sees
    only itself) at their logical positions, their K/V concatenated into one
    cache, the question run over it: an independent check of the mask."""
    cache = DynamicCache(config=config)
    pos = start
    parts = []
    for toks in segs[:-1]:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([toks]),
                        position_ids=torch.tensor([list(range(pos, pos + len(toks)))]),
                        use_cache=True)
        parts.append(out.past_key_values)
        pos += len(toks)
    for l in range(config.num_hidden_layers):
        k = torch.cat([p.layers[l].keys for p in parts], dim=2)
        v = torch.cat([p.layers[l].values for p in parts], dim=2)
        cache.update(k, v, l)
    q = segs[-1]
    with torch.no_grad():
        return model(input_ids=torch.tensor([q]),
                     position_ids=torch.tensor([list(range(pos, pos + len(q)))]),
                     cache=cache).logits[0].numpy()


def write_rag(path, model, config, seed):
    """NAME.rag: the question's logits of RAG prompts with the documents
    attended in isolation, and (to show a test can fail) with the whole
    prompt attended causally. Checked against rag_by_parts, and each
    document's rows against the document run alone at document-local
    positions 0..L-1: the documents' queries take logical positions in the
    masked forward, which changes nothing (RoPE scores depend on position
    differences only, and a document sees only itself)."""
    assert model.config._attn_implementation == "sdpa"  # float64 softmax, the mask as given
    rng = np.random.default_rng(seed)
    n, nq, V = sum(RAG_LENGTHS), RAG_LENGTHS[-1], config.vocab_size
    with open(path, "wb") as f:
        f.write(b"LZRAGLG1" + struct.pack("<I", len(RAG_STARTS)))
        for start in RAG_STARTS:
            segs = [[int(t) for t in rng.integers(0, V, ln)] for ln in RAG_LENGTHS]
            toks = sum(segs, [])
            pos = list(range(start, start + n))
            iso = rag_forward(model, toks, pos, rag_mask(RAG_LENGTHS, True))
            causal = rag_forward(model, toks, pos, rag_mask(RAG_LENGTHS, False))
            parts = rag_by_parts(model, config, segs, start)
            assert norm_err(iso[n - nq:], parts) < 1e-12, norm_err(iso[n - nq:], parts)
            a = RAG_LENGTHS[0]
            for doc in segs[1:-1]:
                alone = logits_at(model, doc, list(range(len(doc))))
                assert norm_err(iso[a:a + len(doc)], alone) < 1e-12
                a += len(doc)
            miss = norm_err(causal[n - nq:], iso[n - nq:])
            assert miss > 1e-2, miss
            print(f"{os.path.basename(path)} from {start}: whole-prompt causal attention "
                  f"misses the question's logits by {miss:.3g}")
            f.write(struct.pack("<i5I", start, *RAG_LENGTHS, V))
            f.write(struct.pack("<%di" % n, *toks))
            f.write(np.ascontiguousarray(iso[n - nq:], dtype="<f8").tobytes())
            f.write(np.ascontiguousarray(causal[n - nq:], dtype="<f8").tobytes())


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    for i, (name, spec) in enumerate(MODELS.items()):
        model, config = make_model(spec, 100 + i)
        write_gguf(os.path.join(out, name + ".gguf"), spec, model, config)
        seqs = write_logits(os.path.join(out, name + ".logits"), model, config, 200 + i)
        # how far a reader that drops the scaling would be: the fixture's power to fail
        if spec.get("rope"):
            plain = dict(spec)
            del plain["rope"]
            pm, _ = make_model(plain, 100 + i)
            errs = [norm_err(logits_at(pm, t, p), lg) for p, t, lg in seqs]
            print(f"{name}: unscaled reading would be off by {errs[0]:.3g} (from 0), "
                  f"{errs[1]:.3g} (from {POSITIONS[1][0]})")
        print(f"{name}: {os.path.getsize(os.path.join(out, name + '.gguf'))} bytes")
        if name in RAG_MODELS:
            write_rag(os.path.join(out, name + ".rag"), model, config, 800 + i)
    for i, (name, (spec, keys, tensors)) in enumerate(REFUSED.items()):
        model, config = make_model(spec, 300 + i)
        write_gguf(os.path.join(out, name + ".gguf"), spec, model, config, keys, tensors)
        print(f"{name}: {os.path.getsize(os.path.join(out, name + '.gguf'))} bytes")
    for i, (name, (spec, types, file_type)) in enumerate(QUANT_MODELS.items()):
        model, config = make_model(spec, 500 + i)
        rng = np.random.default_rng(600 + i)
        toks = [int(t) for t in rng.integers(0, config.vocab_size, len(POSITIONS[0]))]
        before = logits_at(model, toks, POSITIONS[0])
        quant = quantize_model(model, config, types)
        write_gguf(os.path.join(out, name + ".gguf"), spec, model, config, quant=quant,
                   file_type=file_type)
        write_logits(os.path.join(out, name + ".logits"), model, config, 700 + i)
        # how far quantization moves the model (the reference is the dequantized one)
        err = norm_err(logits_at(model, toks, POSITIONS[0]), before)
        print(f"{name}: {os.path.getsize(os.path.join(out, name + '.gguf'))} bytes; "
              f"quantization moves the logits by {err:.3g}")
        if name in RAG_MODELS:
            write_rag(os.path.join(out, name + ".rag"), model, config, 900 + i)
    write_quant_blocks(os.path.join(out, "quant_blocks.bin"))


if __name__ == "__main__":
    main()
