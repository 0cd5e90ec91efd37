/* SPDX-License-Identifier: Apache-2.0 */
/* Requests: the planner (what to prefill, copy, reuse, and the block
 * table, from the policy's decisions), decode growth, commit and release.
 * The request is private to this file; the cache sees it through the
 * hooks on its link (lz_request_hooks), the policies through the lz_plan_*
 * builder. */
#include "cache/cache_policy.h"

#include <stdlib.h>
#include <string.h>

struct lazyattn_request {
    uint32_t magic; /* LZ_MAGIC_REQUEST while live (cleared when freed) */
    lz_ring link; /* in the cache's ring of live requests */
    lazyattn_cache *cache;
    const lz_policy *policy;
    lz_hold *holds; /* see lz_plan_hold_new for the order */
    int n_holds, cap_holds;
    int32_t *own;   /* own blocks: [0, n_prefix_blocks) prefix, then tail */
    int n_own, cap_own;
    int n_prefix_blocks;
    int32_t tail_start;   /* logical position of the question's first token */
    int tail_tokens;      /* question + generated tokens so far */
    int n_fixed_entries;  /* table entries before the tail */
    lazyattn_segment *segments;
    int n_segments;
    int32_t *prefill_slots, *prefill_stored, *prefill_pos;
    int n_prefill;
    uint64_t *copy_src;
    int32_t *copy_dst;
    int n_copies;
    uint64_t *table;
    int32_t *entry_pos;
    int n_entries, cap_entries;
    int n_generated;
    int committed;
    int doc_tokens, hit_tokens, copy_tokens, doc_blocks, hit_blocks, copy_blocks;
    int tier_tokens;
    /* while planning only */
    int32_t *fresh;   /* blocks taken for the plan; [next_fresh, n_fresh) not handed out */
    int64_t n_fresh, next_fresh;
    uint64_t *keys;   /* chained policies: every document block's key */
};

static lazyattn_request *lz_request_of_link(const lz_ring *link) {
    return (lazyattn_request *)((const char *)link - offsetof(lazyattn_request, link));
}

static void lz_request_get_view(const lz_ring *link, lz_request_view *v) {
    const lazyattn_request *r = lz_request_of_link(link);
    v->cache = r->cache;
    v->holds = r->holds;
    v->n_holds = r->n_holds;
    v->own = r->own;
    v->n_own = r->n_own;
}

static void lz_hold_push(lazyattn_request *r, lz_entry *e, int owned) {
    /* sized up front: a document adds at most its blocks + 2 holds */
    r->holds[r->n_holds].entry = e;
    r->holds[r->n_holds].owned = owned;
    r->n_holds++;
}

static int lz_table_reserve(lazyattn_request *r, int n) {
    if (n <= r->cap_entries) return 1;
    int cap = r->cap_entries ? r->cap_entries : 16;
    while (cap < n) cap *= 2;
    uint64_t *t = realloc(r->table, (size_t)cap * sizeof *t);
    if (!t) return 0;
    r->table = t;
    int32_t *p = realloc(r->entry_pos, (size_t)cap * sizeof *p);
    if (!p) return 0;
    r->entry_pos = p;
    r->cap_entries = cap;
    return 1;
}

// ---- the plan builder (cache_policy.h) ----

int lz_plan_block_size(const lazyattn_request *r) { return lz_cache_block_size(r->cache); }
const uint64_t *lz_plan_keys(const lazyattn_request *r) { return r->keys; }
lz_entry *lz_plan_held(const lazyattn_request *r, int i) { return r->holds[i].entry; }

lz_entry *lz_plan_new_entry(lazyattn_request *r, int n_blocks, const int32_t *tokens,
                            int n_tokens) {
    lz_entry *e = lz_entry_new(r->fresh + r->next_fresh, n_blocks, tokens, n_tokens);
    if (e) r->next_fresh += n_blocks;
    return e;
}

/* Holds in prompt order per document for one-entry policies (the reused or
 * copied entry, then the slot of the new one, reserved at decide time);
 * chained policies: the reused blocks of every document, then the new ones. */
void lz_plan_hold_new(lazyattn_request *r, const lz_decision *p, lz_entry *e) {
    if (r->policy->chained)
        lz_hold_push(r, e, 1);
    else
        r->holds[p->new_hold].entry = e;
}

void lz_plan_entry(lazyattn_request *r, int32_t block, int32_t delta, int len, int32_t pos) {
    /* Every value was range-checked at planning: packing cannot fail. */
    lazyattn_entry_pack(block, delta, len, &r->table[r->n_entries]);
    r->entry_pos[r->n_entries] = pos;
    r->n_entries++;
}

void lz_plan_prefill(lazyattn_request *r, int32_t block, int offset, int32_t stored,
                     int32_t pos) {
    r->prefill_slots[r->n_prefill] = block * lz_cache_block_size(r->cache) + offset;
    r->prefill_stored[r->n_prefill] = stored;
    r->prefill_pos[r->n_prefill] = pos;
    r->n_prefill++;
}

void lz_plan_copy(lazyattn_request *r, int32_t src_block, int32_t delta, int len,
                  int32_t dst_block) {
    lazyattn_entry_pack(src_block, delta, len, &r->copy_src[r->n_copies]);
    r->copy_dst[r->n_copies++] = dst_block;
}

int lz_plan_whole_document(lazyattn_request *r, const lz_decision *p, const int32_t *tok) {
    const int B = lz_cache_block_size(r->cache);
    const int len = p->n_tokens;
    lz_entry *e = p->found;
    if (p->action != LAZYATTN_ACTION_REUSE) {
        e = lz_plan_new_entry(r, p->n_blocks, tok, len);
        if (!e) return LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
        e->doc_hash = p->hash;
        memcpy(e->digest, p->digest, sizeof e->digest);
        e->stored_start = p->stored_start;
        e->key = p->key;
        lz_plan_hold_new(r, p, e);
        if (p->action == LAZYATTN_ACTION_COPY) {
            const lz_entry *src = p->found;
            for (int j = 0; j < p->n_blocks; j++)
                lz_plan_copy(r, src->blocks[j], p->start - src->stored_start,
                             lz_block_len(len, j, B), e->blocks[j]);
        } else {
            for (int t = 0; t < len; t++)
                lz_plan_prefill(r, e->blocks[t / B], t % B, e->stored_start + t, p->start + t);
        }
    }
    for (int j = 0; j < p->n_blocks; j++)
        lz_plan_entry(r, e->blocks[j], p->start - e->stored_start, lz_block_len(len, j, B),
                      p->start + j * B);
    return LAZYATTN_STATUS_OK;
}

/* Entries of the question + generated tokens, from the own tail blocks. */
static void lz_table_tail(lazyattn_request *r) {
    int B = lz_cache_block_size(r->cache);
    r->n_entries = r->n_fixed_entries;
    int n_tail_blocks = lz_ceil_div(r->tail_tokens, B);
    for (int j = 0; j < n_tail_blocks; j++) {
        lz_plan_entry(r, r->own[r->n_prefix_blocks + j], 0, lz_block_len(r->tail_tokens, j, B),
                      r->tail_start + j * B);
    }
}

// ---- release ----

static void lz_request_release(lazyattn_request *r) {
    lazyattn_cache *c = r->cache;
    /* PREFIX unpins deepest first so that LRU evicts chains from the leaves. */
    int reverse = r->policy->release_deepest_first;
    const lz_tier_ops *tier_ops = NULL;
    lazyattn_store *tier = r->policy->tiered ? lz_cache_tier(c, NULL, &tier_ops) : NULL;
    for (int k = 0; k < r->n_holds; k++) {
        lz_hold *h = &r->holds[reverse ? r->n_holds - 1 - k : k];
        if (!h->entry) continue; /* a slot never filled (failed create) */
        if (h->owned && !h->entry->committed) {
            if (tier) tier_ops->abandon(c, tier, h->entry); /* its lease, if any */
            lz_cache_drop(c, h->entry);
        } else {
            lz_cache_unpin(c, h->entry);
        }
    }
    r->n_holds = 0;
    lz_cache_give_blocks(c, r->n_own, r->own);
    r->n_own = 0;
}

static void lz_request_free(lazyattn_request *r) {
    free(r->holds);
    free(r->own);
    free(r->segments);
    free(r->prefill_slots);
    free(r->prefill_stored);
    free(r->prefill_pos);
    free(r->copy_src);
    free(r->copy_dst);
    free(r->table);
    free(r->entry_pos);
    free(r->fresh);
    free(r->keys);
    r->magic = 0;
    free(r);
}

static void lz_request_destroy_held(lazyattn_request *r) {
    lazyattn_cache *c = r->cache;
    lz_request_release(r);
    lz_cache_unlink_request(c, &r->link);
    lz_request_free(r);
    lz_cache_trim_retained(c);
}

static void lz_request_destroy_link(lz_ring *link) {
    lz_request_destroy_held(lz_request_of_link(link));
}

static const lz_request_hooks lz_request_hooks_of_plan = {lz_request_destroy_link,
                                                          lz_request_get_view};

void lazyattn_request_destroy(lazyattn_request *r) {
    if (!r) return;
    if (!lz_live_for_destroy(r->magic, LZ_MAGIC_REQUEST, "lazyattn_request_destroy", "request"))
        return;
    lazyattn_cache *c = r->cache;
    /* From the cache's callbacks, or while another thread is inside it:
     * refused (recorded and logged), the request stays. */
    int taken;
    if (lz_cache_enter(c, LZ_USE_DESTROY, "lazyattn_request_destroy", &taken)) {
        lz_log(lz_pool_context(lz_cache_pool(c)), LAZYATTN_LOG_ERROR, "%s", lazyattn_last_error());
        return;
    }
    lz_request_destroy_held(r);
    lz_cache_leave(c, taken);
}

/* The planner pins what a decision reuses, in prompt order. */
static void lz_plan_reuse(void *user, lz_entry *e) {
    lazyattn_request *r = user;
    lz_cache_pin(r->cache, e);
    lz_hold_push(r, e, 0);
}

static void lz_tally_document(lz_tally *t, const lz_decision *p) {
    t->lookups++;
    t->doc_tokens += p->n_tokens;
    t->doc_blocks += p->n_blocks;
    t->recomputed_tokens += p->n_tokens - p->n_cached;
    if (p->from_tier) { /* a tier hit is neither a GPU hit nor a recompute */
        t->tier_hits++;
        t->tier_hit_tokens += p->n_tokens;
        return;
    }
    switch (p->action) {
    case LAZYATTN_ACTION_REUSE:
    case LAZYATTN_ACTION_PARTIAL:
        if (p->action == LAZYATTN_ACTION_REUSE)
            t->hits++;
        else
            t->partial_hits++;
        t->hit_tokens += p->n_cached;
        t->hit_blocks += p->n_hit_blocks;
        break;
    case LAZYATTN_ACTION_COPY:
        t->copy_hits++;
        t->copy_tokens += p->n_cached;
        t->copy_blocks += p->n_blocks;
        break;
    default: t->misses++; break;
    }
}

static int lz_request_create(lazyattn_cache *c, const lazyattn_request_desc *d,
                             lazyattn_request **out) {
    int64_t doc_blocks_total = 0, doc_tokens_total = 0;
    int st = lz_check_request_desc(c, d, "lazyattn_request_create", &doc_blocks_total,
                                   &doc_tokens_total);
    if (st) return st;
    const int B = lz_cache_block_size(c);
    const lz_policy *policy = lz_cache_policy(c);

    int n_prefix_blocks = lz_ceil_div(d->n_prefix, B);
    int n_tail_blocks = lz_ceil_div((int64_t)d->n_question + d->max_new_tokens, B);
    int64_t max_entries = n_prefix_blocks + doc_blocks_total + n_tail_blocks;
    int64_t max_prefill = (int64_t)d->n_prefix + doc_tokens_total + d->n_question;

    lazyattn_request *r = calloc(1, sizeof *r);
    lz_decision *dp = calloc((size_t)d->n_docs + 1, sizeof *dp);
    if (!r || !dp) goto oom;
    r->magic = LZ_MAGIC_REQUEST;
    r->cache = c;
    r->policy = policy;
    r->next_fresh = -1; /* no block taken yet */
    r->cap_holds = (int)(doc_blocks_total + 2 * (int64_t)d->n_docs + 1);
    r->holds = malloc((size_t)r->cap_holds * sizeof *r->holds);
    r->cap_own = n_prefix_blocks + n_tail_blocks + 1;
    r->own = malloc((size_t)r->cap_own * sizeof *r->own);
    r->segments = calloc((size_t)d->n_docs + 2, sizeof *r->segments);
    r->prefill_slots = malloc((size_t)(max_prefill + 1) * sizeof(int32_t));
    r->prefill_stored = malloc((size_t)(max_prefill + 1) * sizeof(int32_t));
    r->prefill_pos = malloc((size_t)(max_prefill + 1) * sizeof(int32_t));
    r->copy_src = malloc((size_t)(doc_blocks_total + 1) * sizeof(uint64_t));
    r->copy_dst = malloc((size_t)(doc_blocks_total + 1) * sizeof(int32_t));
    if (policy->chained) r->keys = malloc((size_t)(doc_blocks_total + 1) * sizeof(uint64_t));
    if (!r->holds || !r->own || !r->segments || !r->prefill_slots || !r->prefill_stored ||
        !r->prefill_pos || !r->copy_src || !r->copy_dst || (policy->chained && !r->keys) ||
        !lz_table_reserve(r, (int)max_entries + 1))
        goto oom;
    r->link.hooks = &lz_request_hooks_of_plan;
    lz_cache_link_request(c, &r->link);

    // ---- decide, pinning what is reused (nothing allocated yet) ----
    int64_t need = n_prefix_blocks + n_tail_blocks;
    int32_t pos = d->n_prefix;
    lz_lookup lk = {c, lz_cache_model_id(c), B, 0, 0, r->keys, 0, lz_plan_reuse, r};
    const lz_tier_ops *tier_ops = NULL;
    lazyattn_store *tier = policy->tiered ? lz_cache_tier(c, NULL, &tier_ops) : NULL;
    lz_tally tally = {0};
    if (policy->begin) policy->begin(&lk, d);
    for (int i = 0; i < d->n_docs; i++) {
        lz_decision *p = &dp[i];
        int len = d->doc_lengths[i];
        int first_hold = r->n_holds;
        lz_lookup_document(&lk, policy, d->docs[i], len, pos, p);
        /* A GPU miss: the tier (LAZY only) before a recompute. Documents
         * before this one are pinned, so the import's evictions spare them. */
        if (tier && p->action == LAZYATTN_ACTION_PREFILL &&
            tier_ops->load(c, tier, p->digest, d->docs[i], len, &tally)) {
            lz_lookup_document(&lk, policy, d->docs[i], len, pos, p);
            if (p->action == LAZYATTN_ACTION_REUSE) {
                p->from_tier = 1;
                p->found->in_tier = 1;
            } else { /* imported, then trimmed away or another document's hash */
                tally.tier_errors++;
            }
        }
        p->first_hold = first_hold;
        pos += len;
        need += p->n_blocks - p->n_hit_blocks;
        if (!policy->chained) {
            p->new_hold = r->n_holds;
            if (p->action != LAZYATTN_ACTION_REUSE) lz_hold_push(r, NULL, 1);
        }
    }

    // ---- blocks, all at once ----
    r->fresh = malloc((size_t)(need + 1) * sizeof *r->fresh);
    if (!r->fresh) goto oom_linked;
    st = lz_cache_take_blocks(c, need, r->fresh, 1, "lazyattn_request_create");
    if (st) goto fail;
    r->n_fresh = need;
    /* Own blocks first: from here on the release path frees everything
     * handed out of fresh[], the rest is given back below on failure. */
    memcpy(r->own, r->fresh, (size_t)(n_prefix_blocks + n_tail_blocks) * sizeof *r->fresh);
    r->n_own = n_prefix_blocks + n_tail_blocks;
    r->n_prefix_blocks = n_prefix_blocks;
    r->next_fresh = r->n_own;

    // ---- segments, prefill list, copies, table, in prompt order ----
    lazyattn_segment *seg;
    if (d->n_prefix > 0) {
        seg = &r->segments[r->n_segments++];
        seg->kind = LAZYATTN_SEGMENT_PREFIX;
        seg->action = LAZYATTN_ACTION_PREFILL;
        seg->doc_index = -1;
        seg->n_tokens = d->n_prefix;
        seg->prefill_offset = r->n_prefill;
        seg->first_entry = r->n_entries;
        seg->n_entries = n_prefix_blocks;
        for (int t = 0; t < d->n_prefix; t++) lz_plan_prefill(r, r->own[t / B], t % B, t, t);
        for (int j = 0; j < n_prefix_blocks; j++)
            lz_plan_entry(r, r->own[j], 0, lz_block_len(d->n_prefix, j, B), j * B);
    }
    for (int i = 0; i < d->n_docs; i++) {
        const lz_decision *p = &dp[i];
        seg = &r->segments[r->n_segments++];
        seg->kind = LAZYATTN_SEGMENT_DOCUMENT;
        seg->action = p->action;
        seg->doc_index = i;
        seg->logical_start = p->start;
        seg->stored_start = p->stored_start;
        seg->n_tokens = p->n_tokens;
        seg->n_cached = p->n_cached;
        seg->first_entry = r->n_entries;
        seg->n_entries = p->n_blocks;
        seg->prefill_offset = r->n_prefill;
        st = policy->build(r, p, d->docs[i]);
        if (st) goto oom_linked;
        lz_tally_document(&tally, p);
    }
    r->doc_tokens = (int)tally.doc_tokens;
    r->hit_tokens = (int)tally.hit_tokens;
    r->copy_tokens = (int)tally.copy_tokens;
    r->doc_blocks = (int)tally.doc_blocks;
    r->hit_blocks = (int)tally.hit_blocks;
    r->copy_blocks = (int)tally.copy_blocks;
    r->tier_tokens = (int)tally.tier_hit_tokens;
    r->tail_start = pos;
    r->tail_tokens = d->n_question;
    r->n_fixed_entries = r->n_entries;
    if (d->n_question > 0) {
        seg = &r->segments[r->n_segments++];
        seg->kind = LAZYATTN_SEGMENT_QUESTION;
        seg->action = LAZYATTN_ACTION_PREFILL;
        seg->doc_index = -1;
        seg->logical_start = pos;
        seg->stored_start = pos;
        seg->n_tokens = d->n_question;
        seg->prefill_offset = r->n_prefill;
        seg->first_entry = r->n_entries;
        seg->n_entries = lz_ceil_div(d->n_question, B);
        for (int t = 0; t < d->n_question; t++)
            lz_plan_prefill(r, r->own[n_prefix_blocks + t / B], t % B, pos + t, pos + t);
    }
    lz_table_tail(r);
    free(r->fresh);
    r->fresh = NULL;
    free(r->keys);
    r->keys = NULL;
    free(dp);
    lz_cache_count_request(c, &tally);
    if (!policy->publishes) r->committed = 1; /* nothing to publish */
    *out = r;
    return LAZYATTN_STATUS_OK;

oom:
    if (r) lz_request_free(r);
    free(dp);
    return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_request_create");
oom_linked:
    st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_request_create");
fail:
    /* Blocks of fresh[] not yet handed to own or to an entry go back. */
    if (r->next_fresh >= 0)
        lz_cache_give_blocks(c, r->n_fresh - r->next_fresh, r->fresh + r->next_fresh);
    lz_request_release(r);
    lz_cache_unlink_request(c, &r->link);
    lz_request_free(r);
    free(dp);
    return st;
}

void lazyattn_request_desc_init(lazyattn_request_desc *desc) {
    if (desc) memset(desc, 0, sizeof *desc);
}

int lazyattn_request_create(lazyattn_cache *c, const lazyattn_request_desc *d,
                            lazyattn_request **out) {
    const char *w = "lazyattn_request_create";
    LZ_CHECK_ARG(out != NULL, "%s: out is NULL", w);
    *out = NULL;
    LZ_CHECK_ARG(c && d, "%s: NULL argument", w);
    int st = lz_cache_check_live(c, w);
    if (st) return st;
    int taken;
    if ((st = lz_cache_enter(c, LZ_USE_CHANGE, w, &taken))) return st;
    /* a pipelined tier upload that failed since is reported here, once */
    const lz_tier_ops *tier_ops = NULL;
    if (lz_cache_tier(c, NULL, &tier_ops) && tier_ops->settle) st = tier_ops->settle(c);
    if (!st) st = lz_request_create(c, d, out);
    lz_cache_leave(c, taken);
    return st;
}

int lz_request_pool(const lazyattn_request *r, const char *fn, lazyattn_pool **pool) {
    LZ_CHECK_LIVE(r, LZ_MAGIC_REQUEST, fn, "request");
    *pool = lz_cache_pool(r->cache);
    return LAZYATTN_STATUS_OK;
}

// ---- tier loads (a BACKGROUND tier) ----

/* The request's documents whose tier load is not finished (*pending, the
 * highest load number among them in *last) or failed (*failed, the first
 * one's hash in *failed_hash). Reads entries: the cache entered. */
static void lz_request_count_loads(const lazyattn_request *r, int *pending, int *failed,
                                   uint64_t *last, uint64_t *failed_hash) {
    *pending = *failed = 0;
    *last = 0;
    for (int h = 0; h < r->n_holds; h++) {
        const lz_entry *e = r->holds[h].entry;
        if (!e || !e->load_id) continue;
        if (e->loading) {
            (*pending)++;
            if (e->load_id > *last) *last = e->load_id;
        } else if (e->discarded) {
            if (!*failed && failed_hash) *failed_hash = e->doc_hash;
            (*failed)++;
        }
    }
}

/* lazyattn_request_poll_loads as the caller w (for_plan: get_plan). */
static int lz_request_loads(lazyattn_request *r, int wait, int for_plan, int *pending,
                            int *failed, uint64_t *failed_hash, const char *w) {
    int taken, st = lz_cache_enter(r->cache, LZ_USE_CHANGE, w, &taken);
    if (st) return st;
    const lz_tier_ops *ops = NULL;
    uint64_t last = 0;
    int n_pending, n_failed;
    lz_request_count_loads(r, &n_pending, &n_failed, &last, failed_hash);
    if (lz_cache_tier(r->cache, NULL, &ops) && ops->await) {
        st = ops->await(r->cache, wait && n_pending ? last : 0, for_plan);
        lz_request_count_loads(r, &n_pending, &n_failed, &last, failed_hash);
    }
    lz_cache_leave(r->cache, taken);
    if (pending) *pending = n_pending;
    if (failed) *failed = n_failed;
    return st;
}

int lazyattn_request_poll_loads(lazyattn_request *r, int wait, int *pending, int *failed) {
    static const char w[] = "lazyattn_request_poll_loads";
    if (pending) *pending = 0;
    if (failed) *failed = 0;
    LZ_CHECK_ARG(r != NULL, "%s: request is NULL", w);
    LZ_CHECK_LIVE(r, LZ_MAGIC_REQUEST, w, "request");
    LZ_CHECK_ARG(wait == 0 || wait == 1, "%s: wait %d is neither 0 nor 1", w, wait);
    return lz_request_loads(r, wait, 0, pending, failed, NULL, w);
}

int lazyattn_request_get_plan(const lazyattn_request *r, lazyattn_plan *p) {
    LZ_CHECK_ARG(r && p, "lazyattn_request_get_plan: NULL argument");
    LZ_CHECK_LIVE(r, LZ_MAGIC_REQUEST, "lazyattn_request_get_plan", "request");
    int taken, st = lz_cache_enter(r->cache, LZ_USE_READ, "lazyattn_request_get_plan", &taken);
    if (st) return st;
    int pending, failed;
    uint64_t last, failed_hash = 0;
    lz_request_count_loads(r, &pending, &failed, &last, &failed_hash);
    if (pending) { /* a BACKGROUND tier's loads not finished: waited for here */
        lz_cache_leave(r->cache, taken);
        st = lz_request_loads((lazyattn_request *)r, 1, 1, &pending, &failed, &failed_hash,
                              "lazyattn_request_get_plan");
        if (st) return st;
        if ((st = lz_cache_enter(r->cache, LZ_USE_READ, "lazyattn_request_get_plan", &taken)))
            return st;
    }
    if (failed) {
        lz_cache_leave(r->cache, taken);
        return lz_fail(LAZYATTN_STATUS_NOT_FOUND,
                       "lazyattn_request_get_plan: the tier load of document %016llx (and %d "
                       "more) failed (see the log); destroy the request and create it again: "
                       "the document is recomputed",
                       (unsigned long long)failed_hash, failed - 1);
    }
    memset(p, 0, sizeof *p);
    p->n_segments = r->n_segments;
    p->segments = r->segments;
    p->n_prefill = r->n_prefill;
    p->prefill_slots = r->prefill_slots;
    p->prefill_stored_pos = r->prefill_stored;
    p->prefill_pos = r->prefill_pos;
    p->n_copies = r->n_copies;
    p->copy_src = r->copy_src;
    p->copy_dst = r->copy_dst;
    p->n_entries = r->n_entries;
    p->table = r->table;
    p->entry_pos = r->entry_pos;
    p->n_positions = r->tail_start + r->tail_tokens;
    p->n_generated = r->n_generated;
    p->committed = r->committed;
    p->doc_tokens = r->doc_tokens;
    p->hit_tokens = r->hit_tokens;
    p->copy_tokens = r->copy_tokens;
    p->doc_blocks = r->doc_blocks;
    p->hit_blocks = r->hit_blocks;
    p->copy_blocks = r->copy_blocks;
    p->tier_tokens = r->tier_tokens;
    lz_cache_leave(r->cache, taken);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_request_commit(lazyattn_request *r) {
    LZ_CHECK_ARG(r != NULL, "lazyattn_request_commit: request is NULL");
    LZ_CHECK_LIVE(r, LZ_MAGIC_REQUEST, "lazyattn_request_commit", "request");
    int taken, st = lz_cache_enter(r->cache, LZ_USE_CHANGE, "lazyattn_request_commit", &taken);
    if (st) return st;
    if (r->committed) {
        lz_cache_leave(r->cache, taken);
        return LAZYATTN_STATUS_OK;
    }
    /* Prompt order, so that a document repeated within the request
     * publishes its first copy; later duplicates stay private. */
    lazyattn_tier_mode mode;
    const lz_tier_ops *tier_ops = NULL;
    lazyattn_store *tier = r->policy->tiered ? lz_cache_tier(r->cache, &mode, &tier_ops) : NULL;
    for (int h = 0; h < r->n_holds; h++)
        if (r->holds[h].owned && r->holds[h].entry && !r->holds[h].entry->committed &&
            lz_cache_insert(r->cache, r->holds[h].entry) && tier &&
            mode == LAZYATTN_TIER_WRITE_THROUGH)
            tier_ops->write(r->cache, tier, r->holds[h].entry);
    r->committed = 1;
    lz_cache_trim_retained(r->cache);
    lz_cache_leave(r->cache, taken);
    return LAZYATTN_STATUS_OK;
}

static int lz_request_append(lazyattn_request *r, int n, int32_t *slots, int32_t *positions) {
    lazyattn_cache *c = r->cache;
    const int B = lz_cache_block_size(c);
    int64_t total = (int64_t)r->tail_start + r->tail_tokens + n;
    if (total > (int64_t)LAZYATTN_MAX_POSITION + 1)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                       "lazyattn_request_append: position %lld past %d", (long long)total - 1,
                       LAZYATTN_MAX_POSITION);
    int have = r->n_own - r->n_prefix_blocks;
    int want = lz_ceil_div((int64_t)r->tail_tokens + n, B);
    int more = want > have ? want - have : 0;
    if (!lz_table_reserve(r, r->n_fixed_entries + want + 1))
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_request_append");
    if (r->n_own + more > r->cap_own) {
        int cap = r->cap_own * 2 > r->n_own + more ? r->cap_own * 2 : r->n_own + more;
        int32_t *own = realloc(r->own, (size_t)cap * sizeof *own);
        if (!own) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_request_append");
        r->own = own;
        r->cap_own = cap;
    }
    if (more) {
        int st = lz_cache_take_blocks(c, more, r->own + r->n_own, 1, "lazyattn_request_append");
        if (st) return st;
        r->n_own += more;
    }
    for (int i = 0; i < n; i++) {
        int t = r->tail_tokens + i;
        slots[i] = r->own[r->n_prefix_blocks + t / B] * B + t % B;
        positions[i] = r->tail_start + t;
    }
    r->tail_tokens += n;
    r->n_generated += n;
    lz_table_tail(r);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_request_append(lazyattn_request *r, int n, int32_t *slots, int32_t *positions) {
    LZ_CHECK_ARG(r != NULL, "lazyattn_request_append: request is NULL");
    LZ_CHECK_LIVE(r, LZ_MAGIC_REQUEST, "lazyattn_request_append", "request");
    LZ_CHECK_ARG(n >= 0, "lazyattn_request_append: negative count %d", n);
    LZ_CHECK_ARG(n == 0 || (slots && positions), "lazyattn_request_append: NULL output");
    lazyattn_cache *c = r->cache;
    int taken, st = lz_cache_enter(c, LZ_USE_CHANGE, "lazyattn_request_append", &taken);
    if (st) return st;
    st = lz_request_append(r, n, slots, positions);
    lz_cache_leave(c, taken);
    return st;
}
