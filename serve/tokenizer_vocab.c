/* SPDX-License-Identifier: Apache-2.0 */
/* What the tokenizer (tokenizer.c) and its models (tokenizer_bpe.c,
 * tokenizer_spm.c) share, below all three: the vocabulary's index and
 * lookup, the id list and the merge queue. */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

int tok_push(tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tokenizer: ids");
        ids->v = v, ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return LAZYATTN_STATUS_OK;
}

static int tok_before(const tok_candidate *x, const tok_candidate *y) {
    return x->key < y->key || (x->key == y->key && x->pos < y->pos);
}

int tok_queue_push(tok_queue *q, tok_candidate c) {
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        tok_candidate *v = realloc(q->v, cap * sizeof *v);
        if (!v) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tokenizer: merge queue");
        q->v = v, q->cap = cap;
    }
    size_t i = q->n++;
    while (i > 0 && tok_before(&c, &q->v[(i - 1) / 2])) {
        q->v[i] = q->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q->v[i] = c;
    return LAZYATTN_STATUS_OK;
}

tok_candidate tok_queue_pop(tok_queue *q) {
    tok_candidate top = q->v[0], last = q->v[--q->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= q->n) break;
        if (c + 1 < q->n && tok_before(&q->v[c + 1], &q->v[c])) c++;
        if (!tok_before(&q->v[c], &last)) break;
        q->v[i] = q->v[c];
        i = c;
    }
    if (q->n) q->v[i] = last;
    return top;
}

static uint64_t tok_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

int32_t tok_lookup(const serve_tokenizer *t, const char *s, size_t n) {
    for (uint64_t h = tok_hash(s, n) & t->index_mask;; h = (h + 1) & t->index_mask) {
        int32_t id = t->index[h];
        if (id < 0) return -1;
        size_t len;
        const char *text = tok_text(t, id, &len);
        if (len == n && memcmp(text, s, n) == 0) return id;
    }
}

/* text -> id; a text that appears twice maps to its last id (llama.cpp). */
int tok_build_index(serve_tokenizer *t) {
    uint64_t size = 16;
    while (size < 2 * (uint64_t)t->n_vocab) size *= 2;
    t->index = malloc((size_t)size * sizeof *t->index);
    if (!t->index) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tokenizer: index");
    memset(t->index, 0xFF, (size_t)size * sizeof *t->index);
    t->index_mask = size - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *s = tok_text(t, id, &n);
        uint64_t h = tok_hash(s, n) & t->index_mask;
        for (; t->index[h] >= 0; h = (h + 1) & t->index_mask) {
            size_t m;
            const char *u = tok_text(t, t->index[h], &m);
            if (m == n && memcmp(u, s, n) == 0) break;
        }
        t->index[h] = id;
    }
    return LAZYATTN_STATUS_OK;
}
