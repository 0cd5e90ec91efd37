/* SPDX-License-Identifier: Apache-2.0 */
/* The document cache: entries, their hash index, pins and LRU eviction
 * under the pool's budget and the cache's retain limit. */
#include "cache/cache_policy.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct lz_index {
    lz_entry **buckets;
    size_t n_buckets; /* power of two */
    size_t n_items;
} lz_index;

struct lazyattn_cache {
    uint32_t magic; /* LZ_MAGIC_CACHE while live (lazyattn_cache_destroy clears it) */
    lazyattn_pool *pool;
    lazyattn_cache_config config;
    const lz_policy *policy;
    uint64_t retain_bytes;
    int block_size;
    uint64_t block_bytes;
    lz_index by_key;
    lz_index by_doc;           /* policy->index_by_doc only */
    lz_entry lru;              /* sentinel: lru.lru_next = most recent */
    int64_t n_entries;         /* committed */
    int64_t n_pinned;          /* committed with refcount > 0 */
    int64_t entry_blocks;      /* blocks of committed entries */
    int64_t evictable_blocks;  /* blocks of committed unpinned entries */
    int64_t held_blocks;       /* every block this cache holds */
    lazyattn_cache_stats stats; /* the only place statistics are written */
    lz_ring requests;          /* ring of live requests */
    int64_t n_requests;
    lazyattn_evict_fn on_evict; /* NULL: none */
    void *evict_user;
    /* The thread inside a public call on the cache (its lz_thread_tag), 0
     * when none: taken and given back by lz_cache_enter / lz_cache_leave. */
    atomic_uintptr_t owner;
    const char *callout;       /* the user code the owning call runs, or NULL */
    lazyattn_store *tier;      /* NULL: none (lazyattn_cache_set_tier) */
    lazyattn_tier_mode tier_mode;
    const lz_tier_ops *tier_ops; /* how to reach it (store/doc_tier.c) */
    void *tier_state;          /* its state (its background writer), or NULL */
};

// ---- policy names ----

static const char *const lz_policy_names[] = {"lazy", "position", "prefix", "none"};

const char *lazyattn_cache_policy_name(lazyattn_cache_policy policy) {
    if ((int)policy < 0 || (int)policy > 3) return NULL;
    return lz_policy_names[policy];
}

int lazyattn_cache_policy_parse(const char *name, lazyattn_cache_policy *policy) {
    LZ_CHECK_ARG(name && policy, "lazyattn_cache_policy_parse: NULL argument");
    static const struct {
        const char *name;
        lazyattn_cache_policy policy;
    } names[] = {{"lazy", LAZYATTN_CACHE_POLICY_LAZY},
                 {"position", LAZYATTN_CACHE_POLICY_POSITION},
                 {"position-aware", LAZYATTN_CACHE_POLICY_POSITION},
                 {"block-attention", LAZYATTN_CACHE_POLICY_POSITION},
                 {"prefix", LAZYATTN_CACHE_POLICY_PREFIX},
                 {"vllm", LAZYATTN_CACHE_POLICY_PREFIX},
                 {"none", LAZYATTN_CACHE_POLICY_NONE}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0) {
            *policy = names[i].policy;
            return LAZYATTN_STATUS_OK;
        }
    return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                   "lazyattn_cache_policy_parse: unknown policy '%s' (lazy, position, prefix, none)",
                   name);
}

// ---- hash index: chained buckets, doubled at load 1 ----

static lz_entry **lz_link(lz_entry *e, int by_doc) { return by_doc ? &e->dnext : &e->hnext; }

static int lz_index_grow(lz_index *ix, int by_doc) {
    size_t n = ix->n_buckets ? ix->n_buckets * 2 : 64;
    lz_entry **b = calloc(n, sizeof *b);
    if (!b) return 0;
    for (size_t i = 0; i < ix->n_buckets; i++) {
        lz_entry *e = ix->buckets[i];
        while (e) {
            lz_entry *next = *lz_link(e, by_doc);
            uint64_t h = by_doc ? e->doc_hash : e->key;
            *lz_link(e, by_doc) = b[h & (n - 1)];
            b[h & (n - 1)] = e;
            e = next;
        }
    }
    free(ix->buckets);
    ix->buckets = b;
    ix->n_buckets = n;
    return 1;
}

/* Growth is best effort: a full table only gets longer chains. */
static void lz_index_add(lz_index *ix, lz_entry *e, int by_doc) {
    if (ix->n_items >= ix->n_buckets) lz_index_grow(ix, by_doc);
    uint64_t h = by_doc ? e->doc_hash : e->key;
    lz_entry **head = &ix->buckets[h & (ix->n_buckets - 1)];
    *lz_link(e, by_doc) = *head;
    *head = e;
    ix->n_items++;
}

static void lz_index_remove(lz_index *ix, lz_entry *e, int by_doc) {
    uint64_t h = by_doc ? e->doc_hash : e->key;
    lz_entry **p = &ix->buckets[h & (ix->n_buckets - 1)];
    while (*p && *p != e) p = lz_link(*p, by_doc);
    if (*p) {
        *p = *lz_link(e, by_doc);
        ix->n_items--;
    }
    *lz_link(e, by_doc) = NULL;
}

// ---- LRU list ----

static void lz_lru_unlink(lz_entry *e) {
    e->lru_prev->lru_next = e->lru_next;
    e->lru_next->lru_prev = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}

static void lz_lru_push_front(lazyattn_cache *c, lz_entry *e) {
    e->lru_next = c->lru.lru_next;
    e->lru_prev = &c->lru;
    c->lru.lru_next->lru_prev = e;
    c->lru.lru_next = e;
}

// ---- entries ----

static int lz_same(const lz_entry *e, uint64_t key, uint64_t doc_hash, int32_t stored_start,
                   int first_of_doc, const int32_t *tokens, int n_tokens) {
    return !e->discarded && e->key == key && e->doc_hash == doc_hash &&
           e->stored_start == stored_start &&
           e->first_of_doc == first_of_doc && e->n_tokens == n_tokens &&
           memcmp(e->tokens, tokens, (size_t)n_tokens * sizeof *tokens) == 0;
}

lz_entry *lz_cache_find(const lazyattn_cache *c, uint64_t key, uint64_t doc_hash,
                        int32_t stored_start, int first_of_doc, const int32_t *tokens,
                        int n_tokens) {
    if (!c->by_key.n_buckets) return NULL;
    for (lz_entry *e = c->by_key.buckets[key & (c->by_key.n_buckets - 1)]; e; e = e->hnext)
        if (lz_same(e, key, doc_hash, stored_start, first_of_doc, tokens, n_tokens)) return e;
    return NULL;
}

lz_entry *lz_cache_find_doc(const lazyattn_cache *c, uint64_t doc_hash, const int32_t *tokens,
                            int n_tokens) {
    if (!c->by_doc.n_buckets) return NULL;
    lz_entry *best = NULL;
    for (lz_entry *e = c->by_doc.buckets[doc_hash & (c->by_doc.n_buckets - 1)]; e; e = e->dnext) {
        if (e->doc_hash != doc_hash || e->n_tokens != n_tokens ||
            memcmp(e->tokens, tokens, (size_t)n_tokens * sizeof *tokens) != 0)
            continue;
        /* Prefer a source someone pins already: it costs no evictable block. */
        if (!best || (e->refcount > 0 && best->refcount == 0)) best = e;
    }
    return best;
}

lz_entry *lz_entry_new(const int32_t *blocks, int n_blocks, const int32_t *tokens, int n_tokens) {
    lz_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->blocks = malloc((size_t)n_blocks * sizeof *e->blocks);
    e->tokens = malloc((size_t)n_tokens * sizeof *e->tokens);
    if (!e->blocks || !e->tokens) {
        free(e->blocks);
        free(e->tokens);
        free(e);
        return NULL;
    }
    memcpy(e->blocks, blocks, (size_t)n_blocks * sizeof *blocks);
    memcpy(e->tokens, tokens, (size_t)n_tokens * sizeof *tokens);
    e->n_blocks = n_blocks;
    e->n_tokens = n_tokens;
    e->refcount = 1;
    return e;
}

static void lz_entry_free(lz_entry *e) {
    free(e->blocks);
    free(e->tokens);
    free(e);
}

static void lz_cache_add_held(lazyattn_cache *c, int64_t n) {
    c->held_blocks += n;
    uint64_t bytes = (uint64_t)c->held_blocks * c->block_bytes;
    c->stats.bytes_in_use = bytes;
    if (bytes > c->stats.peak_bytes_in_use) c->stats.peak_bytes_in_use = bytes;
}

static void lz_cache_update_entry_bytes(lazyattn_cache *c) {
    c->stats.entry_bytes = (uint64_t)c->entry_blocks * c->block_bytes;
    if (c->stats.entry_bytes > c->stats.peak_entry_bytes)
        c->stats.peak_entry_bytes = c->stats.entry_bytes;
}

void lz_cache_drop(lazyattn_cache *c, lz_entry *e) {
    /* The blocks were allocated by this cache: freeing cannot fail. */
    lazyattn_pool_free(c->pool, e->n_blocks, e->blocks);
    lz_cache_add_held(c, -e->n_blocks);
    lz_entry_free(e);
}

int lz_cache_insert(lazyattn_cache *c, lz_entry *e) {
    if (lz_cache_find(c, e->key, e->doc_hash, e->stored_start, e->first_of_doc, e->tokens,
                      e->n_tokens))
        return 0;
    lz_index_add(&c->by_key, e, 0);
    if (c->policy->index_by_doc) lz_index_add(&c->by_doc, e, 1);
    e->committed = 1;
    c->n_entries++;
    c->entry_blocks += e->n_blocks;
    if (e->refcount > 0)
        c->n_pinned++;
    else {
        lz_lru_push_front(c, e);
        c->evictable_blocks += e->n_blocks;
    }
    c->stats.inserts++;
    lz_cache_update_entry_bytes(c);
    return 1;
}

void lz_cache_pin(lazyattn_cache *c, lz_entry *e) {
    if (e->committed && e->refcount == 0) {
        lz_lru_unlink(e);
        c->evictable_blocks -= e->n_blocks;
        c->n_pinned++;
    }
    e->refcount++;
}

static void lz_cache_evict(lazyattn_cache *c, lz_entry *e, int notify);

void lz_cache_unpin(lazyattn_cache *c, lz_entry *e) {
    e->refcount--;
    if (e->committed && e->refcount == 0) {
        lz_lru_push_front(c, e);
        c->evictable_blocks += e->n_blocks;
        c->n_pinned--;
        if (e->discarded) lz_cache_evict(c, e, 0); /* its last holder let it go */
    }
}

void lz_cache_discard(lazyattn_cache *c, lz_entry *e) {
    e->discarded = 1; /* no lookup finds it from here on */
    if (e->committed && e->refcount == 0) lz_cache_evict(c, e, 0);
}

lz_entry *lz_cache_find_loaded(const lazyattn_cache *c, uint64_t doc_hash, uint64_t load_id) {
    if (!c->by_key.n_buckets) return NULL;
    for (lz_entry *e = c->by_key.buckets[doc_hash & (c->by_key.n_buckets - 1)]; e; e = e->hnext)
        if (e->load_id == load_id && e->doc_hash == doc_hash) return e;
    return NULL;
}

/* notify: call the eviction callback first (not at cache destroy). */
static void lz_cache_evict(lazyattn_cache *c, lz_entry *e, int notify) {
    /* Write-back first: the entry is still cached and exportable. */
    if (notify && c->tier && c->tier_mode == LAZYATTN_TIER_WRITE_BACK)
        c->tier_ops->write(c, c->tier, e); /* its store calls are callouts */
    if (notify && c->on_evict) {
        lazyattn_evicted ev = {c->config.policy, c->policy->chained ? e->key : e->doc_hash, e->n_tokens,
                               e->n_blocks, e->stored_start, {0}};
        if (!c->policy->chained) memcpy(ev.digest, e->digest, sizeof ev.digest);
        const char *outer = lz_cache_callout_begin(c, "the cache's eviction callback");
        c->on_evict(c->evict_user, c, &ev);
        lz_cache_callout_end(c, outer);
    }
    lz_lru_unlink(e);
    lz_index_remove(&c->by_key, e, 0);
    if (c->policy->index_by_doc) lz_index_remove(&c->by_doc, e, 1);
    c->n_entries--;
    c->entry_blocks -= e->n_blocks;
    c->evictable_blocks -= e->n_blocks;
    c->stats.evictions++;
    c->stats.evicted_blocks += e->n_blocks;
    lz_cache_drop(c, e);
    lz_cache_update_entry_bytes(c);
}

static int lz_cache_make_room(lazyattn_cache *c, int64_t n, const char *who) {
    lazyattn_pool_info info;
    lazyattn_pool_get_info(c->pool, &info);
    int64_t free_blocks = info.n_blocks - info.n_used;
    if (free_blocks >= n) return LAZYATTN_STATUS_OK;
    if (free_blocks + c->evictable_blocks < n) {
        if (n > info.n_blocks)
            return lz_fail(LAZYATTN_STATUS_BUDGET_EXCEEDED,
                           "%s: %lld blocks needed, the budget holds %lld in all", who,
                           (long long)n, (long long)info.n_blocks);
        return lz_fail(LAZYATTN_STATUS_BUDGET_EXCEEDED,
                       "%s: %lld blocks needed, %lld free and %lld evictable of %lld (the rest "
                       "pinned or used elsewhere)",
                       who, (long long)n, (long long)free_blocks, (long long)c->evictable_blocks,
                       (long long)info.n_blocks);
    }
    while (free_blocks < n) {
        lz_entry *victim = c->lru.lru_prev;
        free_blocks += victim->n_blocks;
        lz_cache_evict(c, victim, 1);
    }
    return LAZYATTN_STATUS_OK;
}

static void lz_cache_trim_to(lazyattn_cache *c, uint64_t max_bytes) {
    while (c->lru.lru_prev != &c->lru && (uint64_t)c->entry_blocks * c->block_bytes > max_bytes)
        lz_cache_evict(c, c->lru.lru_prev, 1);
}

void lz_cache_trim_retained(lazyattn_cache *c) { lz_cache_trim_to(c, c->retain_bytes); }

int lz_cache_take_blocks(lazyattn_cache *c, int64_t n, int32_t *ids, int for_request,
                         const char *who) {
    int st = lz_cache_make_room(c, n, who);
    /* Another cache on the pool cannot take the room in between: one thread. */
    if (!st) st = lazyattn_pool_alloc(c->pool, (int)n, ids);
    if (st) {
        if (st == LAZYATTN_STATUS_BUDGET_EXCEEDED && for_request) c->stats.budget_failures++;
        return st;
    }
    lz_cache_add_held(c, n);
    return LAZYATTN_STATUS_OK;
}

void lz_cache_give_blocks(lazyattn_cache *c, int64_t n, const int32_t *ids) {
    if (n <= 0) return;
    /* The blocks were allocated by this cache: freeing cannot fail. */
    lazyattn_pool_free(c->pool, (int)n, ids);
    lz_cache_add_held(c, -n);
}

void lz_cache_link_request(lazyattn_cache *c, lz_ring *r) {
    r->prev = &c->requests;
    r->next = c->requests.next;
    c->requests.next->prev = r;
    c->requests.next = r;
    c->n_requests++;
}

void lz_cache_unlink_request(lazyattn_cache *c, lz_ring *r) {
    r->prev->next = r->next;
    r->next->prev = r->prev;
    r->prev = r->next = NULL;
    c->n_requests--;
}

const lz_policy *lz_cache_policy(const lazyattn_cache *c) { return c->policy; }
lazyattn_pool *lz_cache_pool(const lazyattn_cache *c) { return c->pool; }

int lz_cache_check_live(const lazyattn_cache *c, const char *who) {
    LZ_CHECK_LIVE(c, LZ_MAGIC_CACHE, who, "cache");
    return LAZYATTN_STATUS_OK;
}

/* A per-thread byte: its address names the calling thread. */
static _Thread_local char lz_thread_tag;

int lz_cache_enter(const lazyattn_cache *cc, lz_use use, const char *who, int *taken) {
    lazyattn_cache *c = (lazyattn_cache *)cc; /* the guard only; never the state */
    uintptr_t me = (uintptr_t)&lz_thread_tag, owner = 0;
    *taken = 0;
    if (atomic_compare_exchange_strong_explicit(&c->owner, &owner, me, memory_order_acquire,
                                                memory_order_relaxed)) {
        *taken = 1;
        return LAZYATTN_STATUS_OK;
    }
    if (owner != me)
        return lz_fail(LAZYATTN_STATUS_IN_USE,
                       "%s: the cache is in use by another call (a cache and its requests "
                       "belong to one thread at a time)%s",
                       who, use == LZ_USE_DESTROY ? "; left alone" : "");
    /* This thread is inside a call on the cache: called back from it. Only
     * this thread reads or writes callout while it owns the cache. */
    if (c->callout && use == LZ_USE_READ) return LAZYATTN_STATUS_OK;
    if (c->callout)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "%s: called from %s, which must not change the cache%s", who, c->callout,
                       use == LZ_USE_DESTROY ? "; left alone" : "");
    return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                   "%s: called back from inside another call on the same cache (a log "
                   "callback?)%s",
                   who, use == LZ_USE_DESTROY ? "; left alone" : "");
}

void lz_cache_leave(const lazyattn_cache *cc, int taken) {
    if (taken) atomic_store_explicit(&((lazyattn_cache *)cc)->owner, 0, memory_order_release);
}

const char *lz_cache_callout_begin(lazyattn_cache *c, const char *what) {
    const char *outer = c->callout;
    c->callout = what;
    return outer;
}

void lz_cache_callout_end(lazyattn_cache *c, const char *outer) { c->callout = outer; }

lz_entry *lz_cache_find_lazy(const lazyattn_cache *c, uint64_t doc_hash) {
    if (!c->by_key.n_buckets) return NULL;
    for (lz_entry *e = c->by_key.buckets[doc_hash & (c->by_key.n_buckets - 1)]; e; e = e->hnext)
        if (!e->discarded && e->key == doc_hash && e->doc_hash == doc_hash &&
            e->stored_start == 0)
            return e;
    return NULL;
}

int lz_cache_add_imported(lazyattn_cache *c, lz_entry *e, int trim) {
    e->refcount = 0;
    if (!lz_cache_insert(c, e)) return 0;
    c->stats.imports++;
    if (trim) lz_cache_trim_to(c, c->retain_bytes);
    return 1;
}
int lz_cache_block_size(const lazyattn_cache *c) { return c->block_size; }
uint64_t lz_cache_model_id(const lazyattn_cache *c) { return c->config.model_id; }

void lz_cache_count_request(lazyattn_cache *c, const lz_tally *t) {
    lazyattn_cache_stats *s = &c->stats;
    s->requests++;
    s->lookups += t->lookups;
    s->hits += t->hits;
    s->partial_hits += t->partial_hits;
    s->copy_hits += t->copy_hits;
    s->misses += t->misses;
    s->doc_tokens += t->doc_tokens;
    s->hit_tokens += t->hit_tokens;
    s->copy_tokens += t->copy_tokens;
    s->doc_blocks += t->doc_blocks;
    s->hit_blocks += t->hit_blocks;
    s->copy_blocks += t->copy_blocks;
    s->tier_hits += t->tier_hits;
    s->tier_hit_tokens += t->tier_hit_tokens;
    s->recomputed_tokens += t->recomputed_tokens;
    s->tier_lookups += t->tier_hits + t->tier_misses + t->tier_errors + t->tier_rejected;
    s->tier_misses += t->tier_misses;
    s->tier_errors += t->tier_errors;
    s->tier_rejected += t->tier_rejected;
    s->tier_read_bytes += t->tier_read_bytes;
    s->tier_leases += t->tier_leases;
    s->tier_lease_waits += t->tier_lease_waits;
    s->tier_lease_waited_loads += t->tier_lease_waited_loads;
    s->tier_lease_takeovers += t->tier_lease_takeovers;
    s->tier_lease_wait_us += t->tier_lease_wait_us;
}

lazyattn_store *lz_cache_tier(const lazyattn_cache *c, lazyattn_tier_mode *mode,
                              const lz_tier_ops **ops) {
    if (mode) *mode = c->tier_mode;
    if (ops) *ops = c->tier_ops;
    return c->tier;
}

void lz_cache_attach_tier(lazyattn_cache *c, lazyattn_store *store, lazyattn_tier_mode mode,
                          const lz_tier_ops *ops, void *state) {
    if (c->tier_state) c->tier_ops->detach(c->tier_state, &c->stats);
    c->tier = store;
    c->tier_mode = mode;
    c->tier_ops = store ? ops : NULL;
    c->tier_state = store ? state : NULL;
}

void *lz_cache_tier_state(const lazyattn_cache *c) { return c->tier_state; }

void lz_cache_count_tier_write(lazyattn_cache *c, int ok, uint64_t bytes) {
    if (ok) {
        c->stats.tier_writes++;
        c->stats.tier_write_bytes += bytes;
    } else {
        c->stats.tier_write_errors++;
    }
}

void lz_cache_count_tier_duplicate(lazyattn_cache *c, int n_tokens) {
    c->stats.tier_duplicates++;
    c->stats.tier_duplicate_tokens += n_tokens;
}

static uint64_t lz_fp_add(uint64_t h, uint64_t v) { return lz_hash_pair(h, v); }

static uint64_t lz_fp_entry(uint64_t h, const lz_entry *e) {
    h = lz_fp_add(h, e->key);
    h = lz_fp_add(h, e->doc_hash);
    h = lz_fp_add(h, (uint64_t)(uint32_t)e->stored_start);
    h = lz_fp_add(h, (uint64_t)e->first_of_doc);
    h = lz_fp_add(h, (uint64_t)e->refcount);
    h = lz_fp_add(h, lz_hash_tokens((uint64_t)e->n_tokens, e->tokens, e->n_tokens));
    for (int i = 0; i < e->n_blocks; i++) h = lz_fp_add(h, (uint64_t)(uint32_t)e->blocks[i]);
    return h;
}

uint64_t lz_cache_fingerprint(const lazyattn_cache *c) {
    uint64_t h = 0x4C5A4650ull;
    /* Index order (bucket by bucket, chain order) and LRU order both count. */
    for (size_t i = 0; i < c->by_key.n_buckets; i++)
        for (const lz_entry *e = c->by_key.buckets[i]; e; e = e->hnext)
            h = lz_fp_entry(lz_fp_add(h, i), e);
    for (size_t i = 0; i < c->by_doc.n_buckets; i++)
        for (const lz_entry *e = c->by_doc.buckets[i]; e; e = e->dnext)
            h = lz_fp_add(lz_fp_add(h, i), e->key);
    for (const lz_entry *e = c->lru.lru_next; e != &c->lru; e = e->lru_next)
        h = lz_fp_add(h, e->key);
    const int64_t counters[] = {c->n_entries, c->n_pinned, c->entry_blocks,
                                c->evictable_blocks, c->held_blocks, c->n_requests};
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++)
        h = lz_fp_add(h, (uint64_t)counters[i]);
    const unsigned char *sb = (const unsigned char *)&c->stats;
    for (size_t i = 0; i < sizeof c->stats; i++) h = lz_fp_add(h, sb[i]);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(c->pool, &info);
    h = lz_fp_add(h, (uint64_t)info.n_used);
    h = lz_fp_add(h, (uint64_t)info.n_allocs);
    h = lz_fp_add(h, (uint64_t)info.n_frees);
    return h;
}

// ---- create (lazyattn_cache_create: cache_create.c), destroy, stats, trim ----

void lazyattn_cache_config_init(lazyattn_cache_config *config) {
    if (!config) return;
    memset(config, 0, sizeof *config);
    config->policy = LAZYATTN_CACHE_POLICY_LAZY;
}

int lz_cache_new(lazyattn_pool *pool, const lazyattn_cache_config *cfg, const lz_policy *policy,
                 lazyattn_cache **out) {
    lazyattn_pool_config pc;
    lazyattn_pool_info info;
    lazyattn_pool_get_info(pool, &info);
    lazyattn_pool_get_config(pool, &pc);
    int st = lz_pool_attach(pool, "lazyattn_cache_create");
    if (st) return st;
    lazyattn_cache *c = calloc(1, sizeof *c);
    if (!c) {
        lz_pool_detach(pool);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_cache_create");
    }
    c->magic = LZ_MAGIC_CACHE;
    atomic_init(&c->owner, 0);
    c->pool = pool;
    c->config = *cfg;
    c->policy = policy;
    c->requests.prev = c->requests.next = &c->requests;
    c->retain_bytes = cfg->retain_bytes ? cfg->retain_bytes : info.budget_bytes;
    c->block_size = pc.block_size;
    c->block_bytes = info.block_bytes;
    c->lru.lru_next = c->lru.lru_prev = &c->lru;
    if (!lz_index_grow(&c->by_key, 0) ||
        (c->policy->index_by_doc && !lz_index_grow(&c->by_doc, 1))) {
        lazyattn_cache_destroy(c);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_cache_create");
    }
    *out = c;
    return LAZYATTN_STATUS_OK;
}

void lazyattn_cache_destroy(lazyattn_cache *c) {
    if (!c) return;
    if (!lz_live_for_destroy(c->magic, LZ_MAGIC_CACHE, "lazyattn_cache_destroy", "cache"))
        return;
    /* From its own callbacks, or while another thread is inside: refused
     * (recorded and logged), nothing freed. */
    int taken;
    if (lz_cache_enter(c, LZ_USE_DESTROY, "lazyattn_cache_destroy", &taken)) {
        lz_log(lz_pool_context(c->pool), LAZYATTN_LOG_ERROR, "%s", lazyattn_last_error());
        return;
    }
    while (c->requests.next != &c->requests)
        c->requests.next->hooks->destroy_held(c->requests.next);
    /* the tier's writer ends first (writes still queued are dropped) */
    lz_cache_attach_tier(c, NULL, LAZYATTN_TIER_READ_ONLY, NULL, NULL);
    while (c->lru.lru_prev != &c->lru) lz_cache_evict(c, c->lru.lru_prev, 0);
    free(c->by_key.buckets);
    free(c->by_doc.buckets);
    lazyattn_pool *pool = c->pool;
    c->magic = 0;
    free(c);
    lz_pool_detach(pool); /* last: may free a pool destroyed before its caches */
}

int lazyattn_cache_get_stats(const lazyattn_cache *c, lazyattn_cache_stats *stats) {
    LZ_CHECK_ARG(c && stats, "lazyattn_cache_get_stats: NULL argument");
    LZ_CHECK_LIVE(c, LZ_MAGIC_CACHE, "lazyattn_cache_get_stats", "cache");
    int taken, st = lz_cache_enter(c, LZ_USE_READ, "lazyattn_cache_get_stats", &taken);
    if (st) return st;
    *stats = c->stats;
    stats->n_entries = c->n_entries;
    stats->n_pinned = c->n_pinned;
    stats->n_requests_live = c->n_requests;
    stats->entry_bytes = (uint64_t)c->entry_blocks * c->block_bytes;
    stats->bytes_in_use = (uint64_t)c->held_blocks * c->block_bytes;
    if (c->tier_state) c->tier_ops->stats(c->tier_state, stats);
    lz_cache_leave(c, taken);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_cache_set_evict_callback(lazyattn_cache *c, lazyattn_evict_fn fn, void *user) {
    LZ_CHECK_ARG(c != NULL, "lazyattn_cache_set_evict_callback: cache is NULL");
    LZ_CHECK_LIVE(c, LZ_MAGIC_CACHE, "lazyattn_cache_set_evict_callback", "cache");
    int taken, st = lz_cache_enter(c, LZ_USE_CHANGE, "lazyattn_cache_set_evict_callback", &taken);
    if (st) return st;
    c->on_evict = fn;
    c->evict_user = user;
    lz_cache_leave(c, taken);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_cache_reset_stats(lazyattn_cache *c) {
    LZ_CHECK_ARG(c != NULL, "lazyattn_cache_reset_stats: cache is NULL");
    LZ_CHECK_LIVE(c, LZ_MAGIC_CACHE, "lazyattn_cache_reset_stats", "cache");
    int taken, st = lz_cache_enter(c, LZ_USE_CHANGE, "lazyattn_cache_reset_stats", &taken);
    if (st) return st;
    memset(&c->stats, 0, sizeof c->stats);
    c->stats.entry_bytes = c->stats.peak_entry_bytes = (uint64_t)c->entry_blocks * c->block_bytes;
    c->stats.bytes_in_use = c->stats.peak_bytes_in_use = (uint64_t)c->held_blocks * c->block_bytes;
    if (c->tier_state) c->tier_ops->stats(c->tier_state, NULL);
    lz_cache_leave(c, taken);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_cache_trim(lazyattn_cache *c, uint64_t max_bytes) {
    LZ_CHECK_ARG(c != NULL, "lazyattn_cache_trim: cache is NULL");
    LZ_CHECK_LIVE(c, LZ_MAGIC_CACHE, "lazyattn_cache_trim", "cache");
    int taken, st = lz_cache_enter(c, LZ_USE_CHANGE, "lazyattn_cache_trim", &taken);
    if (st) return st;
    lz_cache_trim_to(c, max_bytes);
    lz_cache_leave(c, taken);
    return LAZYATTN_STATUS_OK;
}

// ---- invariants ----

#define LZ_INVARIANT(cond, ...)                                                         \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            free(seen);                                                                 \
            return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "lazyattn_cache_validate: " \
                           __VA_ARGS__);                                                \
        }                                                                               \
    } while (0)

/* Marks blocks as held, catching a block held twice or not allocated. */
static int lz_mark_blocks(const lazyattn_cache *c, uint8_t *seen, int64_t n_pool,
                          const int32_t *blocks, int n) {
    for (int i = 0; i < n; i++) {
        int32_t b = blocks[i];
        if (b < 0 || b >= n_pool || seen[b] || !lazyattn_pool_is_allocated(c->pool, b)) return 0;
        seen[b] = 1;
    }
    return 1;
}

static int lz_cache_validate(const lazyattn_cache *c) {
    int64_t n_pool = lz_pool_n_blocks(c->pool);
    uint8_t *seen = calloc((size_t)n_pool, 1);
    if (!seen) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_cache_validate");

    /* Index: every committed entry, each once, found under its own key. */
    int64_t n_entries = 0, n_pinned = 0, entry_blocks = 0, evictable = 0, held = 0;
    for (size_t i = 0; i < c->by_key.n_buckets; i++)
        for (lz_entry *e = c->by_key.buckets[i]; e; e = e->hnext) {
            LZ_INVARIANT(e->committed, "uncommitted entry in the index");
            LZ_INVARIANT((e->key & (c->by_key.n_buckets - 1)) == i, "entry in the wrong bucket");
            LZ_INVARIANT(e->refcount >= 0, "negative reference count %d", e->refcount);
            LZ_INVARIANT(e->n_blocks >= 1 && e->n_tokens >= 1 &&
                             e->n_tokens <= e->n_blocks * c->block_size &&
                             e->n_tokens > (e->n_blocks - 1) * c->block_size,
                         "entry of %d tokens in %d blocks", e->n_tokens, e->n_blocks);
            LZ_INVARIANT(lz_mark_blocks(c, seen, n_pool, e->blocks, e->n_blocks),
                         "entry block not allocated or held twice");
            e->scratch = 0;
            n_entries++;
            entry_blocks += e->n_blocks;
            if (e->refcount)
                n_pinned++;
            else
                evictable += e->n_blocks;
        }
    LZ_INVARIANT(n_entries == c->n_entries && (size_t)n_entries == c->by_key.n_items,
                 "%lld entries indexed, %lld counted", (long long)n_entries,
                 (long long)c->n_entries);
    if (c->policy->index_by_doc) {
        size_t n_doc = 0;
        for (size_t i = 0; i < c->by_doc.n_buckets; i++)
            for (lz_entry *e = c->by_doc.buckets[i]; e; e = e->dnext) {
                LZ_INVARIANT(e->committed, "uncommitted entry in the document index");
                n_doc++;
            }
        LZ_INVARIANT(n_doc == (size_t)n_entries, "document index holds %zu of %lld entries",
                     n_doc, (long long)n_entries);
    }
    LZ_INVARIANT(n_pinned == c->n_pinned, "pinned count %lld, counted %lld",
                 (long long)c->n_pinned, (long long)n_pinned);
    LZ_INVARIANT(entry_blocks == c->entry_blocks, "entry blocks %lld, counted %lld",
                 (long long)c->entry_blocks, (long long)entry_blocks);
    LZ_INVARIANT(evictable == c->evictable_blocks, "evictable blocks %lld, counted %lld",
                 (long long)c->evictable_blocks, (long long)evictable);

    /* LRU: exactly the unpinned committed entries, well linked. */
    int64_t n_lru = 0;
    for (lz_entry *e = c->lru.lru_next; e != &c->lru; e = e->lru_next) {
        LZ_INVARIANT(e->lru_next->lru_prev == e, "broken LRU link");
        LZ_INVARIANT(e->committed && e->refcount == 0, "pinned or uncommitted entry in the LRU");
        LZ_INVARIANT(++n_lru <= n_entries, "LRU list longer than the index");
    }
    LZ_INVARIANT(n_lru == n_entries - n_pinned, "LRU holds %lld, %lld unpinned",
                 (long long)n_lru, (long long)(n_entries - n_pinned));

    /* Requests: their holds explain every reference count; their own and
     * uncommitted blocks are allocated and held once. */
    held = entry_blocks;
    int64_t n_req = 0;
    for (lz_ring *l = c->requests.next; l != &c->requests; l = l->next) {
        LZ_INVARIANT(l->next->prev == l, "broken request list");
        lz_request_view r;
        l->hooks->get_view(l, &r);
        LZ_INVARIANT(r.cache == c, "request of another cache in the list");
        LZ_INVARIANT(++n_req <= c->n_requests, "request list longer than counted");
        for (int h = 0; h < r.n_holds; h++) {
            lz_entry *e = r.holds[h].entry;
            LZ_INVARIANT(e != NULL, "empty hold in a live request");
            if (e->committed)
                e->scratch++;
            else {
                LZ_INVARIANT(r.holds[h].owned && e->refcount == 1,
                             "uncommitted entry not owned by its request");
                LZ_INVARIANT(lz_mark_blocks(c, seen, n_pool, e->blocks, e->n_blocks),
                             "pending block not allocated or held twice");
                held += e->n_blocks;
            }
        }
        LZ_INVARIANT(lz_mark_blocks(c, seen, n_pool, r.own, r.n_own),
                     "request block not allocated or held twice");
        held += r.n_own;
    }
    LZ_INVARIANT(n_req == c->n_requests, "%lld live requests listed, %lld counted",
                 (long long)n_req, (long long)c->n_requests);
    for (size_t i = 0; i < c->by_key.n_buckets; i++)
        for (lz_entry *e = c->by_key.buckets[i]; e; e = e->hnext)
            LZ_INVARIANT(e->scratch + (e->loading ? 1 : 0) == e->refcount,
                         "entry pinned %d times, held by %d requests%s", e->refcount, e->scratch,
                         e->loading ? " and its tier load" : "");
    LZ_INVARIANT(held == c->held_blocks, "%lld blocks held, counted %lld",
                 (long long)c->held_blocks, (long long)held);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(c->pool, &info);
    LZ_INVARIANT(info.n_used >= held, "pool has %lld blocks in use, the cache holds %lld",
                 (long long)info.n_used, (long long)held);
    free(seen);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_cache_validate(const lazyattn_cache *c) {
    const char *w = "lazyattn_cache_validate";
    LZ_CHECK_ARG(c != NULL, "%s: cache is NULL", w);
    LZ_CHECK_LIVE(c, LZ_MAGIC_CACHE, w, "cache");
    /* A changing cache (inside a callout) is not checked: it would report
     * the half-made request as broken. */
    int taken, st = lz_cache_enter(c, LZ_USE_CHANGE, w, &taken);
    if (st) return st;
    st = lz_cache_validate(c);
    lz_cache_leave(c, taken);
    return st;
}
