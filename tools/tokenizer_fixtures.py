#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the tokenizer fixtures of tests/test_tokenizer.c: small
vocabularies trained with Hugging Face `tokenizers`, written as GGUF the way
llama.cpp's converter writes them, test strings, and the ids Hugging Face
gives each string.

Run by hand (not by CI):

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers gguf
    /tmp/tokvenv/bin/python tools/tokenizer_fixtures.py tests/fixtures

(the committed fixtures: tokenizers 0.23.3, gguf 0.19.0; the output is
deterministic: seeded corpus and strings).

Vocabularies (tokenizer.ggml.* keys only, no tensors):
  tok_llama3.gguf  model gpt2, pre llama-bpe: byte-level BPE trained with
                   Llama 3's pre-tokenizer (its Split regex, then ByteLevel
                   without its own regex), ignore_merges as Llama 3's
                   tokenizer.json has it, special tokens <|begin_of_text|>,
                   <|eot_id|>, ... (CONTROL) and the added non-special token
                   [[tool]] (USER_DEFINED), Llama 3's chat template;
  tok_qwen2.gguf   model gpt2, pre qwen2: the same with Qwen 2's regex (one
                   digit per piece), no ignore_merges (Qwen 2 has no NFC
                   pass here: llama.cpp applies none either), a ChatML
                   template;
  tok_spm.gguf     model llama: SentencePiece-style BPE, ▁ for spaces, a ▁
                   prepended, byte fallback <0x00>..<0xFF> at ids 3..258,
                   <unk> <s> </s> at 0..2, piece scores -id. Trained with
                   tokenizers' BpeTrainer (Metaspace split, as sentencepiece
                   splits on whitespace when it trains); the reference
                   tokenizer is then built as transformers' LlamaConverter
                   builds one from a SentencePiece model: every pair (l, r)
                   whose concatenation is a piece is a merge, ranked by the
                   piece's score (SentencePieceExtractor), normalizer
                   Prepend("▁") + Replace(" ", "▁"), byte_fallback.

Files (little-endian):
  tokenizer_strings.bin  "LZTSTR1\\0", u32 n; per string: u32 len, bytes
  tok_NAME.ids           "LZTIDS1\\0", u32 n (the first n strings); per
                         string two id lists, the first with special tokens
                         parsed from the text, the second without (Hugging
                         Face's encode_special_tokens); each list: u16 count
                         (0xFFFF: same as the first list), varint ids (LEB128)
Neither list holds a BOS: encode(s, add_special_tokens=False).
"""
import json
import os
import random
import struct
import sys

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, trainers

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                 "<|end_header_id|>", "<|eot_id|>"]
GPT2_ADDED = "[[tool]]"
SPM_SPECIALS = ["<unk>", "<s>", "</s>"]
# whole words given their own tokens in the llama-bpe vocabulary, no merge
# reaching them: ignore_merges takes them whole (only in the test strings)
WHOLE_WORDS = ["zzqx", "electroencephalography", "élève", "Qxyzzy"]

N_STRINGS = 5000
N_QWEN2 = 1000

# ---- text: fragments the corpus and the test strings are made of ----

WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at "
         "which but have an they you were her she there been one all we their has would when if "
         "so no will more can said who about what them some could him into its then two time "
         "cache attention kernel tensor document reuse position prefill decode token model "
         "tokenizer merge vocabulary byte unicode string value return struct static const "
         "Hello World Python Llama OpenCL GPU NVIDIA README CamelCase snake_case x86_64").split()
UNICODE_WORDS = ["élève", "naïve", "Straße", "ñandú", "façade", "Ångström", "Œuvre", "ÉCOLE",
                 "καλημέρα", "Ελλάδα", "привет", "мир", "Москва", "你好", "世界", "日本語の",
                 "テキスト", "안녕하세요", "한국어", "مرحبا", "العالم", "שלום", "नमस्ते", "हिन्दी",
                 "สวัสดี", "ქართული", "Հայերեն", "e\u0301", "a\u0308o\u0308", "ﬁ", "ℕ", "Ⅻ", "½",
                 "²³", "٣٤٥", "१२३", "①②", "µ", "ǅ", "İstanbul"]
EMOJI = ["😀", "👍", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "🇫🇷", "🇯🇵", "❤️",
         "🧑\u200d💻", "🤖", "🎉🎉", "✨", "☕", "👩🏿\u200d🚀", "🫠", "1️⃣"]
PUNCT = [".", ",", ";", ":", "!", "?", "(", ")", "[", "]", "{", "}", "<", ">", "\"", "'", "`",
         "~", "@", "#", "$", "%", "^", "&", "*", "-", "_", "=", "+", "/", "\\", "|", "...", "--",
         "->", "==", "!=", "/*", "*/", "//", "::", "«", "»", "—", "…", "“", "”", "¿", "¡", "·"]
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n ", "   \t  ", "\t\t", "\n   ",
              "\u00a0", "\u3000", "\u2009", " \r", "\r", "\f", "\v", "    \n\n    "]
CONTRACTIONS = ["don't", "I'LL", "she's", "WE'RE", "y'all", "'s", "it'd", "you've", "I'm",
                "THEY'VE", "'t", "o'clock", "rock'n'roll", "''", "' s"]
PARTIAL_SPECIALS = ["<|eot", "<|", "|>", "<|eot_id|", "<s", "s>", "</", "<unk", "[[tool]",
                    "<<s>>", "<|<|eot_id|>|>"]
SPECIALS = GPT2_SPECIALS + [GPT2_ADDED] + SPM_SPECIALS


def number(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return str(rng.randrange(10 ** rng.randint(1, 12)))
    if kind == 1:
        return "%d.%0*d" % (rng.randrange(1000), rng.randint(1, 6), rng.randrange(10 ** 6) % 10 ** 6)
    if kind == 2:
        return "{:,}".format(rng.randrange(10 ** 9))
    if kind == 3:
        return "%04d-%02d-%02d" % (rng.randrange(1900, 2100), rng.randint(1, 12), rng.randint(1, 28))
    if kind == 4:
        return "0x%x" % rng.randrange(1 << 32)
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(13, 30)))


def fragment(rng, specials):
    r = rng.random()
    if r < 0.30:
        w = rng.choice(WORDS)
        return rng.choice([w, w, w.upper(), w.capitalize()])
    if r < 0.45:
        return rng.choice(UNICODE_WORDS)
    if r < 0.55:
        return number(rng)
    if r < 0.65:
        return rng.choice(WHITESPACE)
    if r < 0.75:
        return rng.choice(PUNCT)
    if r < 0.83:
        return rng.choice(EMOJI)
    if r < 0.88:
        return rng.choice(CONTRACTIONS)
    if r < 0.94 and specials:
        return rng.choice(SPECIALS)
    if r < 0.97 and specials:
        return rng.choice(PARTIAL_SPECIALS)
    if r < 0.985 and specials:
        return rng.choice(WHOLE_WORDS)
    return "".join(rng.choice(WORDS[:20]) for _ in range(rng.randint(2, 4)))  # glued words


def make_string(rng, specials, max_fragments):
    parts = []
    for _ in range(rng.randint(1, max_fragments)):
        parts.append(fragment(rng, specials))
        parts.append(rng.choice(["", " ", " ", " ", "", "  "]))
    return "".join(parts)


def corpus(seed):
    rng = random.Random(seed)
    lines = [make_string(rng, False, 24) for _ in range(40000)]
    # and ordinary English prose, so that frequent words become tokens
    for _ in range(20000):
        lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 16))) + ".")
    return lines


def test_strings(seed):
    rng = random.Random(seed)
    out = ["", " ", "  ", "\n", "\t", "a", "<|eot_id|>", "<s>", "[[tool]]",
           "Hello world", " Hello world", "hello   world  ", "👨\u200d👩\u200d👧\u200d👦",
           "1234567890", "\r\n\r\n", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>"
           "\n\nHi!<|eot_id|>", "<s>[INST] hi [/INST]", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
           "               x", "x               ", "ALL CAPS DON'T", "il y a 1 234,56 €"]
    while len(out) < N_STRINGS:
        out.append(make_string(rng, True, rng.choice([1, 2, 3, 7])))
    return out


# ---- byte-level BPE (gpt2 + pre-tokenizer) ----

def train_gpt2(regex, ignore_merges, lines, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=GPT2_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    spec = json.loads(tok.to_str())
    spec["model"]["ignore_merges"] = ignore_merges
    if ignore_merges:
        vocab = spec["model"]["vocab"]
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        for w in WHOLE_WORDS:
            for form in (w, " " + w):
                text = "".join(p for p, _ in byte_level.pre_tokenize_str(form))
                if text not in vocab:
                    vocab[text] = len(vocab)
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.add_tokens([AddedToken(GPT2_ADDED, normalized=False, special=False)])
    return tok


LLAMA3_TEMPLATE = ("{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
                   "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
                   "{% endfor %}")
CHATML_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
                   "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}")


def write_gpt2_gguf(tok, pre, path, template):
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [None] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    added = {i: t for i, t in tok.get_added_tokens_decoder().items()}
    types = []
    for i in range(len(tokens)):
        if i in added:
            types.append(gguf.TokenType.CONTROL if added[i].special else gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
    merges = [" ".join(m) if isinstance(m, list) else m
              for m in json.loads(tok.to_str())["model"]["merges"]]
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab["<|begin_of_text|>"])
    w.add_eos_token_id(vocab["<|end_of_text|>"])
    w.add_eot_token_id(vocab["<|eot_id|>"])
    w.add_add_bos_token(True)
    w.add_chat_template(template)
    finish(w)


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---- SentencePiece-style BPE (llama) ----

def train_spm(lines):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    # the 160 most frequent characters (ties by code point), the others left
    # to byte fallback; chosen here, as BpeTrainer's limit_alphabet breaks
    # ties in hash order (its output would change from run to run)
    counts = {}
    for line in lines:
        for c in "▁" + line.replace(" ", "▁"):
            counts[c] = counts.get(c, 0) + 1
    alphabet = sorted(counts, key=lambda c: (-counts[c], c))[:160]
    trainer = trainers.BpeTrainer(vocab_size=1800, special_tokens=SPM_SPECIALS,
                                  initial_alphabet=alphabet, limit_alphabet=len(alphabet),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    trained = tok.get_vocab()
    pieces = [t for t, _ in sorted(trained.items(), key=lambda kv: kv[1]) if t not in SPM_SPECIALS]
    tokens = SPM_SPECIALS + ["<0x%02X>" % b for b in range(256)] + pieces
    scores = [0.0] * (3 + 256) + [-float(3 + 256 + k) for k in range(len(pieces))]
    types = ([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] +
             [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * len(pieces))
    # the reference: transformers' LlamaConverter over this SentencePiece vocabulary
    vocab = {t: i for i, t in enumerate(tokens)}
    normal = {t: i for i, t in enumerate(tokens) if types[i] == gguf.TokenType.NORMAL}
    merges = []
    for piece, pid in normal.items():
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece))
                 if piece[:k] in normal and piece[k:] in normal]
        local.sort(key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
        merges.extend((scores[pid], lr) for lr in local)
    merges.sort(key=lambda m: m[0], reverse=True)  # stable: ties keep (l, r) id order
    ref = Tokenizer(models.BPE(vocab=vocab, merges=[lr for _, lr in merges], unk_token="<unk>",
                               byte_fallback=True, fuse_unk=True))
    ref.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    ref.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    ref.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in SPM_SPECIALS])
    return ref, tokens, scores, types


def write_spm_gguf(tokens, scores, types, path):
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.add_chat_template("{{ bos_token }}{% for message in messages %}{% if message['role'] == "
                        "'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}"
                        "{{ message['content'] + eos_token }}{% endif %}{% endfor %}")
    finish(w)


# ---- expected ids ----

def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def write_ids(tok, strings, path):
    rows = []
    for s in strings:
        tok.encode_special_tokens = False
        with_special = tok.encode(s, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        without = tok.encode(s, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        rows.append((with_special, without))
    with open(path, "wb") as f:
        f.write(b"LZTIDS1\0" + struct.pack("<I", len(rows)))
        for a, b in rows:
            assert len(a) < 0xFFFF and len(b) < 0xFFFF
            f.write(struct.pack("<H", len(a)) + b"".join(varint(i) for i in a))
            if b == a:
                f.write(struct.pack("<H", 0xFFFF))
            else:
                f.write(struct.pack("<H", len(b)) + b"".join(varint(i) for i in b))
    return sum(len(a) for a, _ in rows)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    lines = corpus(1)
    strings = test_strings(2)
    with open(os.path.join(out, "tokenizer_strings.bin"), "wb") as f:
        f.write(b"LZTSTR1\0" + struct.pack("<I", len(strings)))
        for s in strings:
            b = s.encode("utf-8")
            f.write(struct.pack("<I", len(b)) + b)

    llama3 = train_gpt2(LLAMA3_REGEX, True, lines, 2000)
    write_gpt2_gguf(llama3, "llama-bpe", os.path.join(out, "tok_llama3.gguf"), LLAMA3_TEMPLATE)
    n = write_ids(llama3, strings, os.path.join(out, "tok_llama3.ids"))
    print("llama3: vocab %d, %d strings, %d ids" % (llama3.get_vocab_size(), len(strings), n))

    qwen2 = train_gpt2(QWEN2_REGEX, False, lines, 1000)
    write_gpt2_gguf(qwen2, "qwen2", os.path.join(out, "tok_qwen2.gguf"), CHATML_TEMPLATE)
    n = write_ids(qwen2, strings[:N_QWEN2], os.path.join(out, "tok_qwen2.ids"))
    print("qwen2: vocab %d, %d strings, %d ids" % (qwen2.get_vocab_size(), N_QWEN2, n))

    spm, tokens, scores, types = train_spm(lines)
    write_spm_gguf(tokens, scores, types, os.path.join(out, "tok_spm.gguf"))
    n = write_ids(spm, strings, os.path.join(out, "tok_spm.ids"))
    print("spm: vocab %d, %d strings, %d ids" % (len(tokens), len(strings), n))
    # the references decode back to the string (a check of the fixtures themselves)
    for s in strings[:200]:
        assert llama3.decode(llama3.encode(s, add_special_tokens=False).ids,
                             skip_special_tokens=False) == s, s


if __name__ == "__main__":
    main()
