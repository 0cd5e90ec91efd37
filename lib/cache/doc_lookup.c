/* SPDX-License-Identifier: Apache-2.0 */
/* What the planner (request_plan.c) and lazyattn_cache_probe share: the
 * checks of a request description and one document's lookup (its hash,
 * then its policy's decision). */
#include "cache/cache_policy.h"

#include <string.h>

int lz_check_request_desc(const lazyattn_cache *c, const lazyattn_request_desc *d, const char *w,
                          int64_t *doc_blocks_total, int64_t *doc_tokens_total) {
    LZ_CHECK_ARG(d->n_prefix >= 0 && d->n_docs >= 0 && d->n_question >= 0 &&
                     d->max_new_tokens >= 0,
                 "%s: negative count (prefix %d, docs %d, question %d, max_new_tokens %d)", w,
                 d->n_prefix, d->n_docs, d->n_question, d->max_new_tokens);
    LZ_CHECK_ARG(d->n_prefix == 0 || d->prefix, "%s: prefix is NULL", w);
    LZ_CHECK_ARG(d->n_question == 0 || d->question, "%s: question is NULL", w);
    LZ_CHECK_ARG(d->n_docs == 0 || (d->docs && d->doc_lengths), "%s: docs or doc_lengths is NULL",
                 w);
    int B = lz_cache_block_size(c);
    int64_t blocks = 0, tokens = 0;
    for (int i = 0; i < d->n_docs; i++) {
        LZ_CHECK_ARG(d->doc_lengths[i] >= 1, "%s: document %d has length %d", w, i,
                     (int)d->doc_lengths[i]);
        LZ_CHECK_ARG(d->docs[i] != NULL, "%s: document %d is NULL", w, i);
        tokens += d->doc_lengths[i]; /* at most 2^31 documents of 2^31 tokens: no overflow */
        blocks += lz_ceil_div(d->doc_lengths[i], B);
    }
    int64_t total = (int64_t)d->n_prefix + tokens + d->n_question + d->max_new_tokens;
    if (total > (int64_t)LAZYATTN_MAX_POSITION + 1)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                       "%s: %lld tokens in all, positions stop at %d", w, (long long)total,
                       LAZYATTN_MAX_POSITION);
    *doc_blocks_total = blocks;
    *doc_tokens_total = tokens;
    return LAZYATTN_STATUS_OK;
}

void lz_lookup_document(lz_lookup *lk, const lz_policy *policy, const int32_t *tokens, int len,
                        int32_t start, lz_decision *p) {
    memset(p, 0, sizeof *p);
    p->hash = lz_doc_hash(lk->model_id, tokens, len, p->digest);
    p->start = start;
    p->stored_start = start;
    p->n_tokens = len;
    p->n_blocks = lz_ceil_div(len, lk->block_size);
    p->action = LAZYATTN_ACTION_PREFILL;
    policy->decide(lk, tokens, p);
}
