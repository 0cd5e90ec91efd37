/* SPDX-License-Identifier: Apache-2.0 */
/* llama tokenizer model: SentencePiece BPE by scores (llama.cpp's
 * llm_tokenizer_spm). Spaces become U+2581 ("▁"), one prepended when the
 * file says add_space_prefix; the text starts as one symbol per UTF-8
 * character; while two adjacent symbols concatenate to a token, the pair
 * whose token has the highest score merges (the leftmost among equals).
 * A symbol that is no token is written as its bytes' <0xNN> tokens (byte
 * fallback), or the unknown token when the vocabulary lacks one of them.
 * Only normal and user-defined tokens are formed: control, unknown and
 * byte tokens' texts are never merged into (as SentencePiece). */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct tok_spm_symbol {
    int32_t prev, next;
    uint32_t at, len; /* bytes of the escaped text */
} tok_spm_symbol;

static int32_t tok_spm_token(const serve_tokenizer *t, const char *s, size_t n) {
    int32_t id = tok_lookup(t, s, n);
    if (id < 0 || (t->type[id] != SERVE_TOKEN_NORMAL && t->type[id] != SERVE_TOKEN_USER_DEFINED))
        return -1;
    return id;
}

static int tok_spm_bigram(const serve_tokenizer *t, const char *text, const tok_spm_symbol *sym,
                          int32_t l, int32_t r, tok_queue *q) {
    if (l < 0 || r < 0) return LAZYATTN_STATUS_OK;
    uint32_t n = sym[l].len + sym[r].len;
    int32_t id = tok_spm_token(t, text + sym[l].at, n);
    if (id < 0) return LAZYATTN_STATUS_OK;
    return tok_queue_push(q, (tok_candidate){-(double)t->score[id], l, r, (int32_t)n});
}

/* A final symbol: its token, or its bytes. */
static int tok_spm_emit(const serve_tokenizer *t, const char *s, size_t n, tok_ids *out) {
    int32_t id = tok_spm_token(t, s, n);
    if (id >= 0) return tok_push(out, id);
    int bytes = 1;
    for (size_t i = 0; i < n; i++) bytes &= t->byte_token[(unsigned char)s[i]] >= 0;
    if (!bytes) {
        if (t->unk < 0)
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "tokenizer: \"%.*s\" has no token, "
                              "no byte tokens and the vocabulary no unknown token", (int)n, s);
        return tok_push(out, t->unk);
    }
    int st = LAZYATTN_STATUS_OK;
    for (size_t i = 0; i < n && !st; i++) st = tok_push(out, t->byte_token[(unsigned char)s[i]]);
    return st;
}

int tok_spm_encode(const serve_tokenizer *t, const char *text, size_t len, tok_ids *out) {
    if (len > UINT32_MAX / 3 - 3)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "tokenizer: text of %zu bytes", len);
    char *esc = malloc(3 * len + 3);
    tok_spm_symbol *sym = malloc((len + 1) * sizeof *sym);
    tok_queue q = {0};
    int st = LAZYATTN_STATUS_OK;
    if (!esc || !sym) {
        st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tokenizer: %zu bytes of text", len);
        goto done;
    }
    size_t n = 0;
    if (t->add_space_prefix) memcpy(esc, "\xE2\x96\x81", 3), n = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') memcpy(esc + n, "\xE2\x96\x81", 3), n += 3;
        else esc[n++] = text[i];
    }
    int32_t n_sym = 0;
    for (size_t at = 0; at < n; n_sym++) {
        unsigned c = (unsigned char)esc[at];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4; /* valid UTF-8 */
        sym[n_sym] = (tok_spm_symbol){n_sym - 1, at + k < n ? n_sym + 1 : -1, (uint32_t)at,
                                      (uint32_t)k};
        at += k;
    }
    for (int32_t i = 1; i < n_sym && !st; i++) st = tok_spm_bigram(t, esc, sym, i - 1, i, &q);
    while (q.n && !st) {
        tok_candidate c = tok_queue_pop(&q);
        tok_spm_symbol *l = &sym[c.pos], *r = &sym[c.a];
        if (l->len == 0 || r->len == 0 || l->len + r->len != (uint32_t)c.b) continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = c.pos;
        st = tok_spm_bigram(t, esc, sym, l->prev, c.pos, &q);
        if (!st) st = tok_spm_bigram(t, esc, sym, c.pos, l->next, &q);
    }
    for (int32_t i = n_sym ? 0 : -1; i >= 0 && !st; i = sym[i].next)
        st = tok_spm_emit(t, esc + sym[i].at, sym[i].len, out);
done:
    free(esc);
    free(sym);
    free(q.v);
    return st;
}
