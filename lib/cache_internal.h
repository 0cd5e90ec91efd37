/* Internal declarations of the document cache, its requests and hashing.
 * Not installed. */
#ifndef LAZYATTN_CACHE_INTERNAL_H
#define LAZYATTN_CACHE_INTERNAL_H

#include "internal.h"

/* ---- hashing (hash.c) ---- */

uint64_t lz_mix64(uint64_t x);
/* Hash of n int32 tokens chained onto seed (n included). */
uint64_t lz_hash_tokens(uint64_t seed, const int32_t *tokens, int n);
/* Hash of two words. */
uint64_t lz_hash_pair(uint64_t a, uint64_t b);

/* ---- cache entries (doc_cache.c) ---- */

/* One cached run of blocks: a whole document (LAZY, POSITION, NONE) or one
 * block of a prefix chain (PREFIX). Identity = (key, parent, stored_start,
 * first_of_doc, tokens), all compared on lookup so that a 64-bit collision
 * can never serve wrong K/V. */
typedef struct lz_entry {
    uint64_t key;         /* index key */
    uint64_t doc_hash;    /* LAZY/POSITION: hash of the document; PREFIX: parent key */
    int32_t stored_start; /* position token 0's key was rotated at */
    int first_of_doc;     /* PREFIX: the block starts a document */
    int n_tokens;
    int n_blocks;
    int32_t *blocks;      /* [n_blocks] */
    int32_t *tokens;      /* [n_tokens], a copy */
    int refcount;         /* live requests holding it */
    int committed;        /* in the index (a cache entry); else owned by one request */
    int scratch;          /* lazyattn_cache_validate */
    struct lz_entry *hnext;   /* key chain */
    struct lz_entry *dnext;   /* doc chain (POSITION) */
    struct lz_entry *lru_prev, *lru_next; /* in the LRU list iff committed && !refcount */
} lz_entry;

/* An entry held by a request: a reused entry (pinned) or one it created. */
typedef struct lz_hold {
    lz_entry *entry;
    int owned; /* created by this request (freed at release unless committed) */
} lz_hold;

typedef struct lz_index {
    lz_entry **buckets;
    size_t n_buckets; /* power of two */
    size_t n_items;
} lz_index;

struct lazyattn_request;

struct lazyattn_cache {
    uint32_t magic; /* LZ_MAGIC_CACHE while live (lazyattn_cache_destroy clears it) */
    lazyattn_pool *pool;
    lazyattn_cache_config config;
    uint64_t retain_bytes;
    int block_size;
    uint64_t block_bytes;
    lz_index by_key;
    lz_index by_doc;           /* POSITION only */
    lz_entry lru;              /* sentinel: lru.lru_next = most recent */
    int64_t n_entries;         /* committed */
    int64_t n_pinned;          /* committed with refcount > 0 */
    int64_t entry_blocks;      /* blocks of committed entries */
    int64_t evictable_blocks;  /* blocks of committed unpinned entries */
    int64_t held_blocks;       /* every block this cache holds */
    lazyattn_cache_stats stats;
    struct lazyattn_request *requests; /* live requests (doubly linked) */
    int64_t n_requests;
};

/* Committed entry with this identity, or NULL. */
lz_entry *lz_cache_find(lazyattn_cache *c, uint64_t key, uint64_t doc_hash, int32_t stored_start,
                        int first_of_doc, const int32_t *tokens, int n_tokens);
/* POSITION: a committed entry of the same document at any start, or NULL. */
lz_entry *lz_cache_find_doc(lazyattn_cache *c, uint64_t doc_hash, const int32_t *tokens,
                            int n_tokens);
void lz_cache_pin(lazyattn_cache *c, lz_entry *e);
void lz_cache_unpin(lazyattn_cache *c, lz_entry *e);
/* Makes sure n blocks are free in the pool, evicting LRU entries;
 * BUDGET_EXCEEDED (nothing evicted) when even evicting every unpinned
 * entry would not do. */
int lz_cache_make_room(lazyattn_cache *c, int64_t n, const char *who);
/* A new uncommitted entry owning blocks (taken from blocks[]), refcount 1. */
lz_entry *lz_entry_new(const int32_t *blocks, int n_blocks, const int32_t *tokens, int n_tokens);
/* Frees an uncommitted entry and its blocks. */
void lz_cache_drop(lazyattn_cache *c, lz_entry *e);
/* Commits an owned entry; 0 when an equal entry is committed already (the
 * entry stays uncommitted, owned by its request). */
int lz_cache_insert(lazyattn_cache *c, lz_entry *e);
void lz_cache_add_held(lazyattn_cache *c, int64_t n);
void lz_cache_trim_to(lazyattn_cache *c, uint64_t max_bytes);
void lz_cache_link_request(lazyattn_cache *c, struct lazyattn_request *r);
void lz_cache_unlink_request(lazyattn_cache *c, struct lazyattn_request *r);

/* ---- requests (request_plan.c) ---- */

struct lazyattn_request {
    uint32_t magic; /* LZ_MAGIC_REQUEST while live (cleared when freed) */
    lazyattn_cache *cache;
    struct lazyattn_request *prev, *next;
    lz_hold *holds; /* prompt order */
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
};

/* Releases everything a request holds (used by destroy and cache destroy). */
void lz_request_release(struct lazyattn_request *r);

#endif
