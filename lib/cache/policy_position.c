/* SPDX-License-Identifier: Apache-2.0 */
/* POSITION (Block-Attention): entries keyed by (document, logical start).
 * Cached at this start: reuse. Cached at another start: a copy hit, new
 * blocks materialised from the old ones. Otherwise recompute. */
#include "cache/cache_policy.h"

static void lz_position_decide(lz_lookup *lk, const int32_t *tokens, lz_decision *p) {
    p->key = lz_hash_pair(p->hash, (uint64_t)(uint32_t)p->start);
    p->stored_start = p->start;
    p->found = lz_cache_find(lk->cache, p->key, p->hash, p->start, 0, tokens, p->n_tokens);
    if (p->found) {
        p->action = LAZYATTN_ACTION_REUSE;
        p->n_hit_blocks = p->n_blocks;
    } else {
        p->found = lz_cache_find_doc(lk->cache, p->hash, tokens, p->n_tokens);
        if (!p->found) return;
        p->action = LAZYATTN_ACTION_COPY;
    }
    p->n_cached = p->n_tokens;
    if (lk->reuse) lk->reuse(lk->user, p->found);
}

const lz_policy lz_policy_position = {
    .id = LAZYATTN_CACHE_POLICY_POSITION,
    .index_by_doc = 1,
    .publishes = 1,
    .decide = lz_position_decide,
    .build = lz_plan_whole_document,
};
