/* SPDX-License-Identifier: Apache-2.0 */
/* gpt2 tokenizer model: byte-level BPE. The pre-tokenizer regex (PCRE2, UTF
 * and Unicode properties) splits a run of text into pieces; each piece's
 * bytes start as one symbol each (the token of the byte's GPT-2 code
 * point) and adjacent symbols merge by tokenizer.ggml.merges rank, the
 * lowest first and the leftmost among equals (Hugging Face's BPE word
 * merge, which llama.cpp follows). */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* The pre-tokenizers, as Hugging Face's tokenizer.json files spell them. */
static const char LLAMA3_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const struct {
    const char *name, *regex;
    int ignore_merges;
} tok_pre_tokenizers[] = {
    {"llama-bpe", LLAMA3_REGEX, 1}, {"llama3", LLAMA3_REGEX, 1}, {"llama-v3", LLAMA3_REGEX, 1},
    {"qwen2", QWEN2_REGEX, 0},      {"deepseek-r1-qwen", QWEN2_REGEX, 0}};

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the others for 256, 257, ... in byte order. */
uint32_t tok_byte_to_cp(unsigned char b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) n++;
    return 256 + n;
}

static size_t tok_put_utf8(uint32_t cp, char *out) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3; /* the map stays below U+0144 */
}

static uint64_t tok_pair_hash(int32_t l, int32_t r) {
    uint64_t h = (uint64_t)(uint32_t)l * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)r * 0xC2B2AE3D27D4EB4Full;
    return h ^ h >> 29;
}

static const tok_merge *tok_merge_find(const serve_tokenizer *t, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return NULL;
    for (uint64_t h = tok_pair_hash(l, r) & t->merges_mask;; h = (h + 1) & t->merges_mask) {
        const tok_merge *m = &t->merges[h];
        if (m->left < 0) return NULL;
        if (m->left == l && m->right == r) return m;
    }
}

static int tok_read_merges(serve_tokenizer *t, const serve_gguf *g) {
    serve_gguf_strings merges;
    int st = serve_gguf_read_strings(g, "tokenizer.ggml.merges", &merges);
    if (st == LAZYATTN_STATUS_NOT_FOUND)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: a gpt2 tokenizer needs tokenizer.ggml.merges");
    if (st) return st;
    uint64_t size = 16;
    while (size < 2 * merges.n) size *= 2;
    t->merges = malloc((size_t)size * sizeof *t->merges);
    char *joined = malloc((size_t)merges.offsets[merges.n] + 1);
    if (!t->merges || !joined) {
        st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tokenizer: merges");
        goto done;
    }
    for (uint64_t h = 0; h < size; h++) t->merges[h].left = -1;
    t->merges_mask = size - 1;
    if (merges.n > INT32_MAX) {
        st = serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: too many merges");
        goto done;
    }
    for (uint64_t i = 0; i < merges.n; i++) {
        const char *s = merges.bytes + merges.offsets[i];
        size_t n = (size_t)(merges.offsets[i + 1] - merges.offsets[i] - 1);
        const char *space = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        size_t nl = space ? (size_t)(space - s) : 0, nr = space ? n - nl - 1 : 0;
        int32_t l = space ? tok_lookup(t, s, nl) : -1, r = space ? tok_lookup(t, space + 1, nr) : -1;
        if (space) memcpy(joined, s, nl), memcpy(joined + nl, space + 1, nr);
        int32_t result = l >= 0 && r >= 0 ? tok_lookup(t, joined, nl + nr) : -1;
        if (result < 0) {
            st = serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: tokenizer.ggml.merges[%llu] = \"%.80s\" "
                            "is not two tokens whose concatenation is a token",
                            (unsigned long long)i, s);
            goto done;
        }
        uint64_t h = tok_pair_hash(l, r) & t->merges_mask;
        while (t->merges[h].left >= 0 && !(t->merges[h].left == l && t->merges[h].right == r))
            h = (h + 1) & t->merges_mask;
        if (t->merges[h].left < 0) t->merges[h] = (tok_merge){l, r, (int32_t)i, result};
    }
done:
    free(joined);
    serve_gguf_strings_free(&merges);
    return st;
}

/* Pieces: a normal token's code points back to its bytes; the others as written. */
static int tok_bpe_pieces(serve_tokenizer *t) {
    int16_t cp_byte[324]; /* the byte a code point stands for, -1 none */
    for (int c = 0; c < 324; c++) cp_byte[c] = -1;
    for (int b = 0; b < 256; b++) cp_byte[tok_byte_to_cp((unsigned char)b)] = (int16_t)b;
    uint64_t total = t->text.offsets[t->n_vocab];
    t->piece.bytes = malloc((size_t)total + 1);
    t->piece.offsets = malloc((size_t)(t->n_vocab + 1) * sizeof *t->piece.offsets);
    if (!t->piece.bytes || !t->piece.offsets)
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tokenizer: pieces");
    uint64_t at = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const unsigned char *s = (const unsigned char *)tok_text(t, id, &n);
        t->piece.offsets[id] = at;
        if (t->type[id] != SERVE_TOKEN_NORMAL) {
            memcpy(t->piece.bytes + at, s, n);
            at += n;
        } else {
            for (size_t i = 0; i < n;) {
                uint32_t cp = 324;
                if (s[i] < 0x80) {
                    cp = s[i], i += 1;
                } else if ((s[i] >> 5) == 6 && i + 1 < n && (s[i + 1] & 0xC0) == 0x80) {
                    cp = (uint32_t)(s[i] & 0x1F) << 6 | (s[i + 1] & 0x3F);
                    i += 2;
                }
                if (cp >= 324 || cp_byte[cp] < 0)
                    return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: token %d \"%.80s\" is not "
                                      "byte-level text (a gpt2 vocabulary)", (int)id, (const char *)s);
                t->piece.bytes[at++] = (char)cp_byte[cp];
            }
        }
        t->piece.bytes[at++] = 0;
    }
    t->piece.offsets[t->n_vocab] = at;
    t->piece.n = (uint64_t)t->n_vocab;
    return LAZYATTN_STATUS_OK;
}

int tok_bpe_load(serve_tokenizer *t, const serve_gguf *g) {
    size_t k = 0, n_pre = sizeof tok_pre_tokenizers / sizeof tok_pre_tokenizers[0];
    while (k < n_pre && strcmp(t->pre_name, tok_pre_tokenizers[k].name) != 0) k++;
    if (k == n_pre)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: tokenizer.ggml.pre = \"%s\" is not "
                          "supported (llama-bpe, qwen2)", t->pre_name);
    t->ignore_merges = tok_pre_tokenizers[k].ignore_merges;
    int err;
    PCRE2_SIZE at;
    t->regex = pcre2_compile((PCRE2_SPTR)tok_pre_tokenizers[k].regex, PCRE2_ZERO_TERMINATED,
                             PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
    if (!t->regex) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return serve_fail(LAZYATTN_STATUS_FORMAT, "tokenizer: PCRE2 refuses the %s regex at %zu: "
                          "%s", t->pre_name, (size_t)at, (const char *)msg);
    }
    (void)pcre2_jit_compile(t->regex, PCRE2_JIT_COMPLETE); /* the interpreter when no JIT */
    for (int b = 0; b < 256; b++) {
        char s[4];
        size_t n = tok_put_utf8(tok_byte_to_cp((unsigned char)b), s);
        t->byte_token[b] = tok_lookup(t, s, n);
        if (t->byte_token[b] < 0)
            return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: the gpt2 vocabulary has no token for "
                              "byte 0x%02X", b);
    }
    int st = tok_read_merges(t, g);
    if (!st) st = tok_bpe_pieces(t);
    return st;
}

/* ---- encode ---- */

typedef struct tok_symbol {
    int32_t id, prev, next, len;
} tok_symbol;

typedef struct tok_bpe_scratch {
    tok_symbol *sym;
    size_t cap;
    char *mapped; /* the piece in GPT-2's code points */
    tok_queue queue;
} tok_bpe_scratch;

static int tok_bpe_word(const serve_tokenizer *t, tok_bpe_scratch *w, const unsigned char *s,
                        size_t n, tok_ids *out) {
    if (n > w->cap) {
        free(w->sym), free(w->mapped);
        w->sym = malloc(n * sizeof *w->sym);
        w->mapped = malloc(2 * n);
        w->cap = w->sym && w->mapped ? n : 0;
        if (!w->cap) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tokenizer: word");
    }
    if (t->ignore_merges) { /* a piece that is a token is that token */
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += tok_put_utf8(tok_byte_to_cp(s[i]), w->mapped + m);
        int32_t id = tok_lookup(t, w->mapped, m);
        if (id >= 0) return tok_push(out, id);
    }
    tok_symbol *sym = w->sym;
    for (size_t i = 0; i < n; i++)
        sym[i] = (tok_symbol){t->byte_token[s[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, 1};
    w->queue.n = 0;
    int st = LAZYATTN_STATUS_OK;
    for (size_t i = 0; i + 1 < n && !st; i++) {
        const tok_merge *m = tok_merge_find(t, sym[i].id, sym[i + 1].id);
        if (m) st = tok_queue_push(&w->queue, (tok_candidate){m->rank, (int32_t)i, m->result, 0});
    }
    while (w->queue.n && !st) {
        tok_candidate c = tok_queue_pop(&w->queue);
        tok_symbol *a = &sym[c.pos];
        if (a->len == 0 || a->next < 0) continue;
        tok_symbol *b = &sym[a->next];
        const tok_merge *m = tok_merge_find(t, a->id, b->id);
        if (!m || m->result != c.a) continue; /* the pair changed since */
        a->id = m->result;
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (a->next >= 0) sym[a->next].prev = c.pos;
        if (a->prev >= 0 && (m = tok_merge_find(t, sym[a->prev].id, a->id)))
            st = tok_queue_push(&w->queue, (tok_candidate){m->rank, a->prev, m->result, 0});
        if (!st && a->next >= 0 && (m = tok_merge_find(t, a->id, sym[a->next].id)))
            st = tok_queue_push(&w->queue, (tok_candidate){m->rank, c.pos, m->result, 0});
    }
    for (int32_t i = 0; i >= 0 && !st; i = sym[i].next) st = tok_push(out, sym[i].id);
    return st;
}

int tok_bpe_encode(const serve_tokenizer *t, const char *text, size_t len, tok_ids *out) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->regex, NULL);
    if (!md) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tokenizer: PCRE2 match data");
    tok_bpe_scratch w = {0};
    const unsigned char *s = (const unsigned char *)text;
    int st = LAZYATTN_STATUS_OK;
    /* Hugging Face's Split(behavior = Isolated): matches and the gaps
     * between them are pieces (this regex leaves no gap in valid text) */
    for (size_t start = 0; start < len && !st;) {
        int rc = pcre2_match(t->regex, s, len, start, PCRE2_NO_UTF_CHECK, md, NULL);
        size_t ms = len, me = len;
        if (rc >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            ms = ov[0], me = ov[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            st = serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "tokenizer: PCRE2 match failed at "
                            "byte %zu: %s", start, (const char *)msg);
            break;
        }
        if (ms > start) st = tok_bpe_word(t, &w, s + start, ms - start, out);
        if (!st && me > ms) st = tok_bpe_word(t, &w, s + ms, me - ms, out);
        if (me == ms && ms < len) { /* an empty match: the next character is a gap */
            size_t k = ms + 1;
            while (k < len && (s[k] & 0xC0) == 0x80) k++;
            if (!st) st = tok_bpe_word(t, &w, s + ms, k - ms, out);
            me = k;
        }
        start = me;
    }
    pcre2_match_data_free(md);
    free(w.sym), free(w.mapped), free(w.queue.v);
    return st;
}
