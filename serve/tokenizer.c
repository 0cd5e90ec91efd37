/* SPDX-License-Identifier: Apache-2.0 */
/* The GGUF tokenizer: loading tokenizer.ggml.*, special tokens, encode
 * (special tokens first, then the model on the runs between them) and the
 * streaming decode. The models: tokenizer_bpe.c (gpt2), tokenizer_spm.c
 * (llama). */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 prefix of s[n]. */
static size_t tok_utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return i;
        uint32_t cp = k == 1 ? c : k == 2 ? c & 0x1F : k == 3 ? c & 0x0F : c & 0x07;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return i;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += k;
    }
    return n;
}

/* ---- loading ---- */

void serve_tokenizer_free(serve_tokenizer *t) {
    if (!t) return;
    serve_gguf_strings_free(&t->text);
    serve_gguf_strings_free(&t->piece);
    free(t->type);
    free(t->score);
    free(t->index);
    free(t->merges);
    free(t->specials);
    if (t->regex) pcre2_code_free(t->regex);
    free(t);
}

/* An optional integer key in [lo, hi]; *v keeps its default when absent. */
static int tok_opt_int(const serve_gguf *g, const char *key, int64_t lo, int64_t hi, int64_t *v) {
    int64_t x;
    int st = serve_gguf_get_int(g, key, &x);
    if (st == LAZYATTN_STATUS_NOT_FOUND) return LAZYATTN_STATUS_OK;
    if (st) return st;
    if (x < lo || x > hi)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: %s = %lld is not in [%lld, %lld]", key,
                          (long long)x, (long long)lo, (long long)hi);
    *v = x;
    return LAZYATTN_STATUS_OK;
}

static int tok_special_ids(serve_tokenizer *t, const serve_gguf *g) {
    static const char *const keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.eot_token_id", "tokenizer.ggml.unknown_token_id",
                                       "tokenizer.ggml.padding_token_id"};
    int32_t *dst[] = {&t->bos, &t->eos, &t->eot, &t->unk, &t->pad};
    for (int k = 0; k < 5; k++) {
        int64_t v = -1;
        int st = tok_opt_int(g, keys[k], 0, t->n_vocab - 1, &v);
        if (st) return st;
        *dst[k] = (int32_t)v;
    }
    /* no end-of-turn key: the usual names, as llama.cpp looks for them */
    static const char *const eot_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"};
    for (int k = 0; k < 4 && t->eot < 0; k++) {
        int32_t id = tok_lookup(t, eot_names[k], strlen(eot_names[k]));
        if (id >= 0 && t->type[id] == SERVE_TOKEN_CONTROL) t->eot = id;
    }
    if (t->unk < 0 && t->model == TOK_MODEL_LLAMA) {
        int32_t id = tok_lookup(t, "<unk>", 5);
        if (id >= 0) t->unk = id;
    }
    int64_t add_bos = t->model == TOK_MODEL_LLAMA || !strcmp(t->pre_name, "llama-bpe") ||
                      !strcmp(t->pre_name, "llama3") || !strcmp(t->pre_name, "llama-v3"),
            add_eos = 0, prefix = t->model == TOK_MODEL_LLAMA;
    int st;
    if ((st = tok_opt_int(g, "tokenizer.ggml.add_bos_token", 0, 1, &add_bos)) ||
        (st = tok_opt_int(g, "tokenizer.ggml.add_eos_token", 0, 1, &add_eos)) ||
        (st = tok_opt_int(g, "tokenizer.ggml.add_space_prefix", 0, 1, &prefix)))
        return st;
    t->add_bos = (int)add_bos && t->bos >= 0;
    t->add_eos = (int)add_eos && t->eos >= 0;
    t->add_space_prefix = (int)prefix;
    return LAZYATTN_STATUS_OK;
}

typedef struct tok_sized {
    size_t len;
    int32_t id;
} tok_sized;

static int tok_cmp_longest(const void *a, const void *b) {
    const tok_sized *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Tokens matched in the text before the model runs, longest first. */
static int tok_collect_specials(serve_tokenizer *t) {
    tok_sized *all = malloc((size_t)t->n_vocab * sizeof *all);
    t->specials = malloc((size_t)t->n_vocab * sizeof *t->specials);
    if (!all || !t->specials) {
        free(all);
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tokenizer: specials");
    }
    int32_t n_all = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *s = tok_text(t, id, &n);
        int ty = t->type[id];
        /* whole UTF-8 characters only: a match then starts and ends on a
         * character boundary of valid text */
        if (n && (ty == SERVE_TOKEN_CONTROL || ty == SERVE_TOKEN_USER_DEFINED ||
                  ty == SERVE_TOKEN_UNKNOWN) &&
            tok_utf8_valid((const unsigned char *)s, n) == n) {
            all[n_all++] = (tok_sized){n, id};
            t->special_first[(unsigned char)s[0]] = 1;
        }
    }
    qsort(all, (size_t)n_all, sizeof *all, tok_cmp_longest);
    for (int32_t k = 0; k < n_all; k++) t->specials[k] = all[k].id;
    t->n_specials = n_all;
    free(all);
    return LAZYATTN_STATUS_OK;
}

/* llama pieces: U+2581 -> space, <0xNN> -> the byte, specials as written. */
static int tok_spm_load(serve_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_token[b] = tok_lookup(t, name, 6);
    }
    uint64_t total = t->text.offsets[t->n_vocab];
    t->piece.bytes = malloc((size_t)total + 1);
    t->piece.offsets = malloc((size_t)(t->n_vocab + 1) * sizeof *t->piece.offsets);
    if (!t->piece.bytes || !t->piece.offsets)
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tokenizer: pieces");
    uint64_t at = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *s = tok_text(t, id, &n);
        t->piece.offsets[id] = at;
        if (t->type[id] == SERVE_TOKEN_BYTE) {
            unsigned v;
            char end;
            if (n != 6 || sscanf(s, "<0x%2X%c", &v, &end) != 2 || end != '>')
                return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: byte token %d is \"%s\", not "
                                  "<0xNN>", (int)id, s);
            t->piece.bytes[at++] = (char)v;
        } else if (t->type[id] == SERVE_TOKEN_NORMAL) {
            for (size_t i = 0; i < n; i++) {
                if (i + 2 < n && !memcmp(s + i, "\xE2\x96\x81", 3)) {
                    t->piece.bytes[at++] = ' ';
                    i += 2;
                } else {
                    t->piece.bytes[at++] = s[i];
                }
            }
        } else {
            memcpy(t->piece.bytes + at, s, n);
            at += n;
        }
        t->piece.bytes[at++] = 0;
    }
    t->piece.offsets[t->n_vocab] = at;
    t->piece.n = (uint64_t)t->n_vocab;
    return LAZYATTN_STATUS_OK;
}

static int tok_load(serve_tokenizer *t, const serve_gguf *g) {
    const char *model;
    int st = serve_gguf_get_string(g, "tokenizer.ggml.model", &model);
    if (st == LAZYATTN_STATUS_NOT_FOUND)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: no tokenizer.ggml.model");
    if (st) return st;
    if (!strcmp(model, "gpt2")) t->model = TOK_MODEL_GPT2;
    else if (!strcmp(model, "llama")) t->model = TOK_MODEL_LLAMA;
    else
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: tokenizer.ggml.model = \"%.64s\" is not "
                          "supported (gpt2, llama)", model);
    snprintf(t->model_name, sizeof t->model_name, "%s", model);
    if (t->model == TOK_MODEL_GPT2) {
        const char *pre = "default";
        st = serve_gguf_get_string(g, "tokenizer.ggml.pre", &pre);
        if (st && st != LAZYATTN_STATUS_NOT_FOUND) return st;
        snprintf(t->pre_name, sizeof t->pre_name, "%s", pre);
    }

    if ((st = serve_gguf_read_strings(g, "tokenizer.ggml.tokens", &t->text))) {
        if (st == LAZYATTN_STATUS_NOT_FOUND)
            return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: no tokenizer.ggml.tokens");
        return st;
    }
    if (t->text.n == 0 || t->text.n > (1u << 24))
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: tokenizer.ggml.tokens has %llu tokens "
                          "(1 .. 2^24)", (unsigned long long)t->text.n);
    t->n_vocab = (int32_t)t->text.n;
    size_t n = (size_t)t->n_vocab;
    double *numbers = malloc(n * sizeof *numbers);
    t->type = malloc(n);
    t->score = calloc(n, sizeof *t->score);
    if (!numbers || !t->type || !t->score) {
        free(numbers);
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tokenizer: vocabulary");
    }
    memset(t->type, SERVE_TOKEN_NORMAL, n);
    st = serve_gguf_read_numbers(g, "tokenizer.ggml.token_type", numbers, n);
    if (st == LAZYATTN_STATUS_OK) {
        for (size_t i = 0; i < n && !st; i++) {
            if (!(numbers[i] >= 1 && numbers[i] <= 6 && numbers[i] == (int)numbers[i]))
                st = serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: tokenizer.ggml.token_type[%zu] = %g "
                                "is not a token type (1..6)", i, numbers[i]);
            else t->type[i] = (uint8_t)numbers[i];
        }
    } else if (st == LAZYATTN_STATUS_NOT_FOUND) {
        st = LAZYATTN_STATUS_OK; /* all normal */
    }
    if (!st && t->model == TOK_MODEL_LLAMA) {
        st = serve_gguf_read_numbers(g, "tokenizer.ggml.scores", numbers, n);
        if (st == LAZYATTN_STATUS_NOT_FOUND)
            st = serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: a llama tokenizer needs "
                            "tokenizer.ggml.scores");
        for (size_t i = 0; i < n && !st; i++) t->score[i] = (float)numbers[i];
    }
    free(numbers);
    if (st) return st;
    if ((st = tok_build_index(t)) || (st = tok_special_ids(t, g)) || (st = tok_collect_specials(t)))
        return st;
    st = t->model == TOK_MODEL_GPT2 ? tok_bpe_load(t, g) : tok_spm_load(t);
    if (st) return st;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t len = (size_t)(t->piece.offsets[id + 1] - t->piece.offsets[id] - 1);
        if (len > t->max_piece) t->max_piece = len;
    }
    return LAZYATTN_STATUS_OK;
}

int serve_tokenizer_from_gguf(const serve_gguf *g, serve_tokenizer **out) {
    if (!out) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_tokenizer_from_gguf: out");
    *out = NULL;
    if (!g) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_tokenizer_from_gguf: g");
    serve_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_tokenizer_from_gguf");
    int st = tok_load(t, g);
    if (st) {
        serve_tokenizer_free(t);
        return st;
    }
    *out = t;
    return LAZYATTN_STATUS_OK;
}

void serve_tokenizer_get_info(const serve_tokenizer *t, serve_tokenizer_info *info) {
    if (!t || !info) return;
    *info = (serve_tokenizer_info){t->model_name, t->pre_name, t->n_vocab, t->bos, t->eos,
                                   t->eot, t->unk, t->pad, t->add_bos, t->add_eos};
}

int serve_tokenizer_token_type(const serve_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab ? t->type[id] : 0;
}

/* ---- encode ---- */

/* The special token whose text starts at s (longest), or -1. */
static int32_t tok_match_special(const serve_tokenizer *t, const char *s, size_t left,
                                 unsigned flags) {
    for (int32_t k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        if (!(flags & SERVE_TOKENIZE_PARSE_SPECIAL) && t->type[id] != SERVE_TOKEN_USER_DEFINED)
            continue;
        size_t n;
        const char *text = tok_text(t, id, &n);
        if (n <= left && text[0] == s[0] && memcmp(text, s, n) == 0) return id;
    }
    return -1;
}

static int tok_encode_run(const serve_tokenizer *t, const char *s, size_t n, tok_ids *ids) {
    if (!n) return LAZYATTN_STATUS_OK;
    return t->model == TOK_MODEL_GPT2 ? tok_bpe_encode(t, s, n, ids) : tok_spm_encode(t, s, n, ids);
}

int serve_tokenizer_encode(const serve_tokenizer *t, const char *text, size_t len, unsigned flags,
                           int32_t **ids, size_t *n_ids) {
    if (!ids || !n_ids)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_tokenizer_encode: NULL output");
    *ids = NULL, *n_ids = 0;
    if (!t || (!text && len))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_tokenizer_encode: NULL");
    size_t valid = tok_utf8_valid((const unsigned char *)text, len);
    if (valid != len)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "tokenizer: the text is not valid "
                          "UTF-8 at byte %zu", valid);
    tok_ids out = {0};
    int st = LAZYATTN_STATUS_OK;
    if ((flags & SERVE_TOKENIZE_ADD_SPECIAL) && t->add_bos) st = tok_push(&out, t->bos);
    size_t run = 0;
    for (size_t pos = 0; pos < len && !st;) {
        int32_t id = t->special_first[(unsigned char)text[pos]]
                         ? tok_match_special(t, text + pos, len - pos, flags) : -1;
        if (id < 0) {
            pos++;
            continue;
        }
        size_t n;
        tok_text(t, id, &n);
        if (!(st = tok_encode_run(t, text + run, pos - run, &out))) st = tok_push(&out, id);
        pos += n, run = pos;
    }
    if (!st) st = tok_encode_run(t, text + run, len - run, &out);
    if (!st && (flags & SERVE_TOKENIZE_ADD_SPECIAL) && t->add_eos) st = tok_push(&out, t->eos);
    if (st) {
        free(out.v);
        return st;
    }
    if (!out.n) free(out.v), out.v = NULL;
    *ids = out.v, *n_ids = out.n;
    return LAZYATTN_STATUS_OK;
}

/* ---- decode ---- */

void serve_detokenizer_init(serve_detokenizer *d, unsigned flags) {
    if (!d) return;
    memset(d, 0, sizeof *d);
    d->flags = flags;
    d->at_text_start = 1;
}

size_t serve_tokenizer_decode_capacity(const serve_tokenizer *t) {
    return t ? t->max_piece + sizeof ((serve_detokenizer *)0)->held : 0;
}

int serve_tokenizer_decode_token(const serve_tokenizer *t, serve_detokenizer *d, int32_t id,
                                 char *out, size_t cap, size_t *n_out) {
    if (n_out) *n_out = 0;
    if (!t || !d || !out || !n_out)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_tokenizer_decode_token: NULL");
    if (id < 0 || id >= t->n_vocab)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "tokenizer: token id %d is not in "
                          "[0, %d)", (int)id, (int)t->n_vocab);
    if (cap < serve_tokenizer_decode_capacity(t))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_tokenizer_decode_token: cap %zu "
                          "< serve_tokenizer_decode_capacity %zu", cap,
                          serve_tokenizer_decode_capacity(t));
    int ty = t->type[id];
    int special = ty == SERVE_TOKEN_CONTROL || ty == SERVE_TOKEN_UNKNOWN;
    const char *p = t->piece.bytes + t->piece.offsets[id];
    size_t n = (size_t)(t->piece.offsets[id + 1] - t->piece.offsets[id] - 1);
    if (special && !(d->flags & SERVE_DETOK_SPECIAL)) n = 0;
    if (!special && ty != SERVE_TOKEN_USER_DEFINED && n && t->model == TOK_MODEL_LLAMA &&
        t->add_space_prefix && d->at_text_start && p[0] == ' ')
        p++, n--;
    if (ty == SERVE_TOKEN_NORMAL || ty == SERVE_TOKEN_BYTE) d->at_text_start = 0;
    else if (special || ty == SERVE_TOKEN_USER_DEFINED) d->at_text_start = 1;
    size_t total = (size_t)d->n_held;
    memcpy(out, d->held, total);
    memcpy(out + total, p, n);
    total += n;
    /* hold an unfinished character at the end */
    size_t keep = total;
    for (size_t i = total; i > 0 && total - i < 3;) {
        unsigned char c = (unsigned char)out[--i];
        if (c < 0x80) break;
        if (c >= 0xC0) {
            size_t k = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
            if (i + k > total) keep = i;
            break;
        }
    }
    d->n_held = (int)(total - keep);
    memcpy(d->held, out + keep, (size_t)d->n_held);
    *n_out = keep;
    return LAZYATTN_STATUS_OK;
}

void serve_detokenizer_flush(serve_detokenizer *d, char *out, size_t cap, size_t *n_out) {
    size_t n = 0;
    if (d && out && cap >= (size_t)d->n_held) {
        n = (size_t)d->n_held;
        memcpy(out, d->held, n);
        serve_detokenizer_init(d, d->flags);
    }
    if (n_out) *n_out = n;
}

int serve_tokenizer_decode(const serve_tokenizer *t, const int32_t *ids, size_t n_ids,
                           unsigned flags, char **text, size_t *len) {
    if (!text || !len)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_tokenizer_decode: NULL output");
    *text = NULL, *len = 0;
    if (!t || (!ids && n_ids))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_tokenizer_decode: NULL");
    size_t cap = serve_tokenizer_decode_capacity(t);
    if (n_ids > (SIZE_MAX - 8) / (cap + 1))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_tokenizer_decode: too many ids");
    char *buf = malloc(n_ids * t->max_piece + cap + 8);
    if (!buf) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_tokenizer_decode");
    serve_detokenizer d;
    serve_detokenizer_init(&d, flags);
    size_t at = 0, n;
    for (size_t i = 0; i < n_ids; i++) {
        int st = serve_tokenizer_decode_token(t, &d, ids[i], buf + at, cap, &n);
        if (st) {
            free(buf);
            return st;
        }
        at += n;
    }
    serve_detokenizer_flush(&d, buf + at, 4, &n);
    at += n;
    buf[at] = 0;
    *text = buf, *len = at;
    return LAZYATTN_STATUS_OK;
}
