/* SPDX-License-Identifier: Apache-2.0 */
/* NONE: every document recomputed at its logical start, every request;
 * its blocks are never published and are freed at release. */
#include "cache/cache_policy.h"

static void lz_none_decide(lz_lookup *lk, const int32_t *tokens, lz_decision *p) {
    (void)lk;
    (void)tokens;
    p->key = lz_hash_pair(p->hash, (uint64_t)(uint32_t)p->start);
    p->stored_start = p->start;
}

const lz_policy lz_policy_none = {
    .id = LAZYATTN_CACHE_POLICY_NONE,
    .publishes = 0,
    .decide = lz_none_decide,
    .build = lz_plan_whole_document,
};
