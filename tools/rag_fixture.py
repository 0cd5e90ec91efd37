#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes tests/fixtures/rag_llama3.gguf, the model of tests/test_rag_cli.py:
a tiny random-weight Llama (the layout of tools/gguf_fixtures.py: F16
matrices, F32 norms, tied embeddings) with the tokenizer of
tests/fixtures/tok_llama3.gguf (every tokenizer.* key copied as it is), so
that lazyattn-rag runs end to end on text. The weights mean nothing: the
answers are token soup, the same soup for the same prompt. Q and K are
scaled up (sharp attention) and the embeddings down, so that the soup
depends on every token of the prompt: another document order, or the whole
prompt attended at once instead of each document alone, gives another
answer (with plain variance-2/in weights every prompt decodes to one
repeated token, and a test comparing answers could not fail).

Run by hand (not by CI), with llama.cpp's gguf-py (numpy comes with it):

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install gguf
    /tmp/venv/bin/python tools/rag_fixture.py tests/fixtures

(the committed fixture: gguf 0.19.0, numpy 2.4; deterministic: seeded).
"""
import math
import os
import sys

import gguf
import numpy as np

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, THETA, EPS = 32, 64, 2, 2, 1, 10000.0, 1e-5
QK_SCALE, EMBD_STD = 3.0, 0.3


def copy_tokenizer(src, w):
    """Every tokenizer.* key of src, with its type."""
    n_vocab = None
    for name, f in src.fields.items():
        if not name.startswith("tokenizer."):
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            sub = f.types[1]
            if sub == gguf.GGUFValueType.STRING:
                vals = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            else:
                vals = [f.parts[i].tolist()[0] for i in f.data]
            w.add_key_value(name, vals, gguf.GGUFValueType.ARRAY, sub_type=sub)
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(vals)
        elif t == gguf.GGUFValueType.STRING:
            w.add_string(name, bytes(f.parts[f.data[0]]).decode("utf-8"))
        else:
            w.add_key_value(name, f.parts[f.data[0]].tolist()[0], t)
    return n_vocab


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    src = gguf.GGUFReader(os.path.join(out, "tok_llama3.gguf"))
    path = os.path.join(out, "rag_llama3.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("rag_llama3")
    vocab = copy_tokenizer(src, w)
    hd = HIDDEN // HEADS
    w.add_block_count(LAYERS)
    w.add_context_length(8192)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(THETA)
    w.add_layer_norm_rms_eps(EPS)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_vocab_size(vocab)
    w.add_rope_dimension_count(hd)
    rng = np.random.default_rng(36)

    def mat(rows, cols, scale=1.0):  # [out, in], variance 2 / in (times scale^2)
        return (rng.standard_normal((rows, cols)) * scale * math.sqrt(2.0 / cols)).astype(np.float16)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    w.add_tensor("token_embd.weight",
                 (EMBD_STD * rng.standard_normal((vocab, HIDDEN))).astype(np.float16))
    for l in range(LAYERS):
        b = f"blk.{l}."
        w.add_tensor(b + "attn_norm.weight", norm(HIDDEN))
        w.add_tensor(b + "attn_q.weight", mat(HEADS * hd, HIDDEN, QK_SCALE))
        w.add_tensor(b + "attn_k.weight", mat(KV_HEADS * hd, HIDDEN, QK_SCALE))
        w.add_tensor(b + "attn_v.weight", mat(KV_HEADS * hd, HIDDEN))
        w.add_tensor(b + "attn_output.weight", mat(HIDDEN, HEADS * hd))
        w.add_tensor(b + "ffn_norm.weight", norm(HIDDEN))
        w.add_tensor(b + "ffn_gate.weight", mat(FFN, HIDDEN))
        w.add_tensor(b + "ffn_up.weight", mat(FFN, HIDDEN))
        w.add_tensor(b + "ffn_down.weight", mat(HIDDEN, FFN))
    w.add_tensor("output_norm.weight", norm(HIDDEN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{path}: vocab {vocab}, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
