/* SPDX-License-Identifier: Apache-2.0 */
/* The cache policies behind one small table: each policy decides, per
 * document, what the cache can serve (decide: a lookup with no side effect
 * on the cache, shared by lazyattn_request_create and lazyattn_cache_probe)
 * and builds that document's part of a plan (build: entries, prefill list,
 * copies, table rows). A new policy is one new file policy_<name>.c and one
 * line in lz_policy_get (policy_table.c). Not installed. */
#ifndef LAZYATTN_CACHE_POLICY_H
#define LAZYATTN_CACHE_POLICY_H

#include "cache/cache_internal.h"

static inline int lz_ceil_div(int64_t a, int b) { return (int)((a + b - 1) / b); }
/* Tokens in block j of a run of n tokens. */
static inline int lz_block_len(int n, int j, int B) { return n - j * B < B ? n - j * B : B; }

/* What one document gets, decided before anything is allocated. */
typedef struct lz_decision {
    uint64_t hash;          /* hash of the document's tokens under the model id */
    uint8_t digest[32];     /* its BLAKE2b digest (hash = its first 8 bytes) */
    int32_t start;          /* logical start */
    int32_t stored_start;   /* stored start of its entry (found or new) */
    uint64_t key;           /* LAZY/POSITION/NONE: key of the new entry */
    int n_tokens, n_blocks;
    lazyattn_segment_action action;
    lz_entry *found;        /* LAZY/POSITION: the entry reused, or the copy source */
    int n_hit_blocks;       /* leading blocks served as stored (REUSE: all) */
    int n_cached;           /* tokens served by the cache (reuse or copy) */
    uint64_t chain_parent;  /* PREFIX: parent key of the document's first block */
    int first_key;          /* PREFIX: its block keys start at lookup.keys[first_key] */
    int first_hold;         /* planner: the request's holds of it start here */
    int new_hold;           /* planner: the hold slot of its new entry (one-entry policies) */
    int from_tier;          /* planner: loaded from the tier (REUSE, counted as a tier hit) */
} lz_decision;

/* State of one request's lookups, document after document. */
typedef struct lz_lookup {
    lazyattn_cache *cache;
    uint64_t model_id;
    int block_size;
    /* PREFIX: the chain so far */
    uint64_t parent;
    int chain_broken;
    uint64_t *keys; /* [every document block] chain keys kept for build; NULL in a probe */
    int n_keys;
    /* Called for every entry a decision reuses or copies from, in prompt
     * order (the planner pins it); NULL in a probe. */
    void (*reuse)(void *user, lz_entry *e);
    void *user;
} lz_lookup;

typedef struct lazyattn_request lz_plan; /* a request while its plan is built */

typedef struct lz_policy {
    lazyattn_cache_policy id;
    int index_by_doc;          /* the cache keeps a by-document index (POSITION) */
    int release_deepest_first; /* unpin in reverse prompt order (PREFIX chains) */
    int publishes;             /* commit publishes new entries (not NONE) */
    int chained;               /* one entry per block in a chain, not one per document */
    int tiered;                /* a tier may serve its misses (LAZY: exported documents) */
    /* Before the first document: chain roots and the like (may be NULL). */
    void (*begin)(lz_lookup *lk, const lazyattn_request_desc *desc);
    /* Decides one document; p's common fields (hash, start, n_tokens,
     * n_blocks, stored_start = start, action PREFILL) are set. */
    void (*decide)(lz_lookup *lk, const int32_t *tokens, lz_decision *p);
    /* Builds the document's entries, prefill rows, copies and table rows
     * once the blocks are taken. OK or OUT_OF_HOST_MEMORY. */
    int (*build)(lz_plan *r, const lz_decision *p, const int32_t *tokens);
} lz_policy;

extern const lz_policy lz_policy_lazy;
extern const lz_policy lz_policy_position;
extern const lz_policy lz_policy_prefix;
extern const lz_policy lz_policy_none;
/* NULL for an unknown policy (policy_table.c). */
const lz_policy *lz_policy_get(lazyattn_cache_policy id);

/* ---- document lookups (doc_lookup.c), for the planner and the probe ---- */

/* Checks a request description: counts, pointers, lengths, positions.
 * who names the caller in the message. */
int lz_check_request_desc(const lazyattn_cache *c, const lazyattn_request_desc *d,
                          const char *who, int64_t *doc_blocks_total, int64_t *doc_tokens_total);

/* Looks one document up (common fields, then the policy's decide). */
void lz_lookup_document(lz_lookup *lk, const lz_policy *policy, const int32_t *tokens, int len,
                        int32_t start, lz_decision *p);

/* ---- the plan builder (request_plan.c), for the policies' build ---- */

int lz_plan_block_size(const lz_plan *r);
/* A new entry over the next n_blocks of the request's fresh blocks; NULL
 * (nothing taken) when out of host memory. */
lz_entry *lz_plan_new_entry(lz_plan *r, int n_blocks, const int32_t *tokens, int n_tokens);
/* Records a new entry as held: into the decision's slot (one-entry
 * policies) or appended (chained policies). */
void lz_plan_hold_new(lz_plan *r, const lz_decision *p, lz_entry *e);
/* The entry of hold i (reused ones of a decision: p->first_hold + j). */
lz_entry *lz_plan_held(const lz_plan *r, int i);
const uint64_t *lz_plan_keys(const lz_plan *r);
void lz_plan_prefill(lz_plan *r, int32_t block, int offset, int32_t stored, int32_t pos);
void lz_plan_copy(lz_plan *r, int32_t src_block, int32_t delta, int len, int32_t dst_block);
void lz_plan_entry(lz_plan *r, int32_t block, int32_t delta, int len, int32_t pos);
/* One-entry policies: the document as one entry, reused, copied or
 * prefilled at the decision's stored start, and its table rows. */
int lz_plan_whole_document(lz_plan *r, const lz_decision *p, const int32_t *tokens);

#endif
