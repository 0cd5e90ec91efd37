/* SPDX-License-Identifier: Apache-2.0 */
/* PREFIX (vLLM automatic prefix caching): one entry per block, key =
 * hash(parent key, block tokens), the chain rooted at a hash of the
 * request's prefix tokens; reuse is the longest cached chain from the start
 * of the prompt. Each document starts a new block. The chain is walked once
 * (decide), its keys kept for build. */
#include "cache/cache_policy.h"

static uint64_t lz_prefix_key(uint64_t parent, int first_of_doc, const int32_t *tokens, int n) {
    return lz_hash_tokens(lz_hash_pair(parent, (uint64_t)first_of_doc), tokens, n);
}

static void lz_prefix_begin(lz_lookup *lk, const lazyattn_request_desc *d) {
    lk->parent = lz_hash_tokens(lk->model_id ^ 0x5052454649584B59ull, d->prefix, d->n_prefix);
    lk->chain_broken = 0;
}

static void lz_prefix_decide(lz_lookup *lk, const int32_t *tokens, lz_decision *p) {
    const int B = lk->block_size;
    p->chain_parent = lk->parent;
    p->first_key = lk->n_keys;
    for (int j = 0; j < p->n_blocks; j++) {
        if (lk->chain_broken && !lk->keys) break; /* a probe needs no more keys */
        int n = lz_block_len(p->n_tokens, j, B);
        const int32_t *t = tokens + (size_t)j * (size_t)B;
        uint64_t key = lz_prefix_key(lk->parent, j == 0, t, n);
        if (!lk->chain_broken) {
            lz_entry *e = lz_cache_find(lk->cache, key, lk->parent, p->start + j * B, j == 0, t, n);
            if (e) {
                if (lk->reuse) lk->reuse(lk->user, e);
                p->n_hit_blocks++;
                p->n_cached += n;
            } else {
                lk->chain_broken = 1;
            }
        }
        if (lk->keys) lk->keys[lk->n_keys++] = key;
        lk->parent = key;
    }
    if (p->n_hit_blocks == p->n_blocks)
        p->action = LAZYATTN_ACTION_REUSE;
    else if (p->n_hit_blocks)
        p->action = LAZYATTN_ACTION_PARTIAL;
}

static int lz_prefix_build(lz_plan *r, const lz_decision *p, const int32_t *tokens) {
    const int B = lz_plan_block_size(r);
    const uint64_t *keys = lz_plan_keys(r) + p->first_key;
    for (int j = 0; j < p->n_blocks; j++) {
        int n = lz_block_len(p->n_tokens, j, B);
        int32_t at = p->start + j * B;
        lz_entry *e;
        if (j < p->n_hit_blocks) {
            e = lz_plan_held(r, p->first_hold + j);
        } else {
            e = lz_plan_new_entry(r, 1, tokens + (size_t)j * (size_t)B, n);
            if (!e) return LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
            e->key = keys[j];
            e->doc_hash = j == 0 ? p->chain_parent : keys[j - 1];
            e->stored_start = at;
            e->first_of_doc = j == 0;
            lz_plan_hold_new(r, p, e);
            for (int t = 0; t < n; t++) lz_plan_prefill(r, e->blocks[0], t, at + t, at + t);
        }
        lz_plan_entry(r, e->blocks[0], 0, n, at);
    }
    return LAZYATTN_STATUS_OK;
}

const lz_policy lz_policy_prefix = {
    .id = LAZYATTN_CACHE_POLICY_PREFIX,
    .release_deepest_first = 1,
    .publishes = 1,
    .chained = 1,
    .begin = lz_prefix_begin,
    .decide = lz_prefix_decide,
    .build = lz_prefix_build,
};
