/* SPDX-License-Identifier: Apache-2.0 */
/* LAZY: one entry per document, keyed by the hash of its tokens, keys
 * stored at document-local positions (stored start 0) and reused at any
 * logical start through the block's delta. */
#include "cache/cache_policy.h"

static void lz_lazy_decide(lz_lookup *lk, const int32_t *tokens, lz_decision *p) {
    p->key = p->hash;
    p->stored_start = 0;
    p->found = lz_cache_find(lk->cache, p->key, p->hash, 0, 0, tokens, p->n_tokens);
    if (p->found) {
        p->action = LAZYATTN_ACTION_REUSE;
        p->n_hit_blocks = p->n_blocks;
        p->n_cached = p->n_tokens;
        if (lk->reuse) lk->reuse(lk->user, p->found);
    }
}

const lz_policy lz_policy_lazy = {
    .id = LAZYATTN_CACHE_POLICY_LAZY,
    .publishes = 1,
    .tiered = 1,
    .decide = lz_lazy_decide,
    .build = lz_plan_whole_document,
};
