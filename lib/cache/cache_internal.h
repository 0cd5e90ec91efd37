/* SPDX-License-Identifier: Apache-2.0 */
/* Internal interface between the document cache (doc_cache.c), the
 * request planner (request_plan.c) and the policies (policy_*.c). The
 * cache's and the request's structs are private to their files: this
 * header shows only entries, which both sides share, and the functions
 * each side offers the other. Not installed. */
#ifndef LAZYATTN_CACHE_INTERNAL_H
#define LAZYATTN_CACHE_INTERNAL_H

#include "internal.h"
#include "mix64.h" /* lz_mix64, lz_hash_pair */

/* ---- hashing (hash.c) ---- */

/* Hash of n int32 tokens chained onto seed (n included). */
uint64_t lz_hash_tokens(uint64_t seed, const int32_t *tokens, int n);
/* A document's identity: its BLAKE2b-256 digest (lazyattn_doc_digest)
 * and, the first 8 bytes little-endian, its 64-bit hash (lazyattn_doc_hash). */
void lz_doc_digest(uint64_t model_id, const int32_t *tokens, int n, uint8_t out[32]);
uint64_t lz_digest_hash(const uint8_t digest[32]);
uint64_t lz_doc_hash(uint64_t model_id, const int32_t *tokens, int n, uint8_t digest[32]);

/* ---- cache entries (doc_cache.c) ---- */

/* One cached run of blocks: a whole document (LAZY, POSITION, NONE) or one
 * block of a prefix chain (PREFIX). Identity = (key, parent, stored_start,
 * first_of_doc, tokens), all compared on lookup so that a 64-bit collision
 * can never serve wrong K/V. */
typedef struct lz_entry {
    uint64_t key;         /* index key */
    uint64_t doc_hash;    /* LAZY/POSITION: hash of the document; PREFIX: parent key */
    uint8_t digest[32];   /* LAZY/POSITION/NONE: the document's digest (lz_doc_digest) */
    int32_t stored_start; /* position token 0's key was rotated at */
    int first_of_doc;     /* PREFIX: the block starts a document */
    int n_tokens;
    int n_blocks;
    int32_t *blocks;      /* [n_blocks] */
    int32_t *tokens;      /* [n_tokens], a copy */
    int refcount;         /* live requests holding it */
    int committed;        /* in the index (a cache entry); else owned by one request */
    int scratch;          /* lazyattn_cache_validate */
    int in_tier;          /* loaded from or written to the cache's tier */
    uint64_t load_id;     /* nonzero: loaded by a pipelined tier upload, this one */
    int discarded;        /* its upload failed: found by no lookup, evicted when unpinned */
    int loading;          /* 1: a tier's loader has not enqueued its upload yet (the tier
                             pins it meanwhile); serving thread only */
    struct lz_entry *hnext;   /* key chain */
    struct lz_entry *dnext;   /* doc chain (POSITION) */
    struct lz_entry *lru_prev, *lru_next; /* in the LRU list iff committed && !refcount */
} lz_entry;

/* A new uncommitted entry owning blocks (copied from blocks[]), refcount 1;
 * NULL when out of host memory. */
lz_entry *lz_entry_new(const int32_t *blocks, int n_blocks, const int32_t *tokens, int n_tokens);

/* An entry held by a request: a reused entry (pinned) or one it created. */
typedef struct lz_hold {
    lz_entry *entry;
    int owned; /* created by this request (freed at release unless committed) */
} lz_hold;

/* Doubly linked ring of a cache's live requests; the link is a member of
 * the (private) request, which sets its hooks (below) before it links. */
struct lz_request_hooks;
typedef struct lz_ring {
    struct lz_ring *prev, *next;
    const struct lz_request_hooks *hooks; /* the request's; NULL in the cache's own */
} lz_ring;

struct lz_policy;

/* ---- what the cache offers requests and policies (doc_cache.c) ---- */

/* A new cache on pool under cfg (checked) with policy: attached to the pool,
 * its index and LRU made; or the status (nothing kept). lazyattn_cache_create
 * (cache_create.c) checks and chooses the policy first. */
int lz_cache_new(lazyattn_pool *pool, const lazyattn_cache_config *cfg,
                 const struct lz_policy *policy, lazyattn_cache **out);
const struct lz_policy *lz_cache_policy(const lazyattn_cache *c);
lazyattn_pool *lz_cache_pool(const lazyattn_cache *c);
/* ---- one call at a time (doc_cache.c) ----
 * Every public function on a cache or its requests enters the cache first
 * (one compare-exchange) and leaves it on return (one store); the
 * library's own calls inside use the unguarded internals. Entering a cache
 * that another thread is inside: IN_USE. The same thread entering again
 * can only be user code the call runs (a callout: the eviction callback, a
 * tier store's operation; or a log callback): reads are let through
 * during a callout, anything else is INVALID_ARGUMENT. */
typedef enum lz_use {
    LZ_USE_READ,    /* changes nothing (stats, probe, export, a plan) */
    LZ_USE_CHANGE,  /* changes the cache or a request */
    LZ_USE_DESTROY  /* frees it: the caller logs a refusal (void) */
} lz_use;
/* OK with *taken = 1 when this call took the cache (give it back with
 * lz_cache_leave), or *taken = 0 for a read during a callout; else the
 * status, with "who: ..." in lazyattn_last_error(). */
int lz_cache_enter(const lazyattn_cache *c, lz_use use, const char *who, int *taken);
void lz_cache_leave(const lazyattn_cache *c, int taken);
/* Marks user code run by the owning call (what: "the cache's eviction
 * callback"...); returns the mark to restore with lz_cache_callout_end. */
const char *lz_cache_callout_begin(lazyattn_cache *c, const char *what);
void lz_cache_callout_end(lazyattn_cache *c, const char *outer);
/* INVALID_ARGUMENT "who: not a live cache" unless c is NULL or a live cache
 * (its magic word: the use-after-destroy net of lib/internal.h). */
int lz_cache_check_live(const lazyattn_cache *c, const char *who);
/* LAZY: the committed entry of the document with this hash, or NULL. */
lz_entry *lz_cache_find_lazy(const lazyattn_cache *c, uint64_t doc_hash);
/* Commits an imported entry (unpinned, most recent) and counts it; 0 when
 * an equal entry is cached already (the caller drops its own). trim 1:
 * then trims the cache to its retained budget (a public import); 0: not
 * (a request plan's tier load, which pins the entry next: trimmed now, it
 * would be the first evicted when the plan's pinned documents alone fill
 * the budget, loaded for nothing). */
int lz_cache_add_imported(lazyattn_cache *c, lz_entry *e, int trim);
int lz_cache_block_size(const lazyattn_cache *c);
uint64_t lz_cache_model_id(const lazyattn_cache *c);

/* Committed entry with this identity, or NULL. No side effect. */
lz_entry *lz_cache_find(const lazyattn_cache *c, uint64_t key, uint64_t doc_hash,
                        int32_t stored_start, int first_of_doc, const int32_t *tokens,
                        int n_tokens);
/* POSITION: a committed entry of the same document at any start, or NULL
 * (one that is pinned already preferred). No side effect. */
lz_entry *lz_cache_find_doc(const lazyattn_cache *c, uint64_t doc_hash, const int32_t *tokens,
                            int n_tokens);
void lz_cache_pin(lazyattn_cache *c, lz_entry *e);
void lz_cache_unpin(lazyattn_cache *c, lz_entry *e);
/* Drops a committed entry whose K/V cannot be trusted (a failed upload):
 * no lookup finds it from now on; evicted (without write-back or callback)
 * now, or when its last holder unpins it. */
void lz_cache_discard(lazyattn_cache *c, lz_entry *e);
/* The committed LAZY entry of doc_hash loaded by upload load_id, or NULL
 * (evicted since). */
lz_entry *lz_cache_find_loaded(const lazyattn_cache *c, uint64_t doc_hash, uint64_t load_id);
/* n blocks for this cache: evicts LRU entries as needed, allocates them
 * into ids[0..n) and counts them held. BUDGET_EXCEEDED (nothing evicted,
 * counted as a budget failure for_request) when even evicting every unpinned entry
 * would not do. */
int lz_cache_take_blocks(lazyattn_cache *c, int64_t n, int32_t *ids, int for_request,
                         const char *who);
/* Gives blocks taken with lz_cache_take_blocks back to the pool. */
void lz_cache_give_blocks(lazyattn_cache *c, int64_t n, const int32_t *ids);
/* Frees an uncommitted entry and its blocks. */
void lz_cache_drop(lazyattn_cache *c, lz_entry *e);
/* Commits an owned entry; 0 when an equal entry is committed already (the
 * entry stays uncommitted, owned by its request). */
int lz_cache_insert(lazyattn_cache *c, lz_entry *e);
/* Evicts LRU entries down to the cache's retain limit. */
void lz_cache_trim_retained(lazyattn_cache *c);
void lz_cache_link_request(lazyattn_cache *c, lz_ring *request);
void lz_cache_unlink_request(lazyattn_cache *c, lz_ring *request);

/* A request's document accounting, added to the statistics in one place. */
typedef struct lz_tally {
    int64_t lookups, hits, partial_hits, copy_hits, misses;
    int64_t doc_tokens, hit_tokens, copy_tokens;
    int64_t doc_blocks, hit_blocks, copy_blocks;
    int64_t tier_hits, tier_hit_tokens, recomputed_tokens;
    int64_t tier_misses, tier_errors, tier_rejected; /* lookups that did not load */
    uint64_t tier_read_bytes;
    int64_t tier_leases, tier_lease_waits, tier_lease_waited_loads, tier_lease_takeovers;
    int64_t tier_lease_wait_us;
} lz_tally;

/* ---- the tier (lib/store/doc_tier.c registers it; doc_cache.c keeps it) ---- */

/* What a tier does for the cache. The store layer's lazyattn_cache_set_tier
 * hands these to the cache with its store: the cache (write-back, on
 * eviction) and the planner (loads; write-through, at commit) call the tier
 * through them, never by name, so that the cache stays below the stores. */
typedef struct lz_tier_ops {
    /* Looks a GPU-missed document up in the tier and imports it: 1 when
     * imported (the caller looks it up again), 0 otherwise (counted in t). */
    int (*load)(lazyattn_cache *c, lazyattn_store *store, const uint8_t digest[32],
                const int32_t *tokens, int n_tokens, lz_tally *t);
    /* Writes a committed entry to the tier unless it is there already
     * (failures counted and logged; the cache is not changed). */
    void (*write)(lazyattn_cache *c, lazyattn_store *store, lz_entry *e);
    /* The tier's own state (its background writer), NULL when none: its
     * counters added to s (s NULL: reset), and its end, when the tier is
     * replaced or the cache destroyed (its counters, final, added to
     * into). */
    void (*stats)(void *state, lazyattn_cache_stats *s);
    void (*detach)(void *state, lazyattn_cache_stats *into);
    /* An entry made for a missed document is dropped unwritten (its request
     * ended uncommitted, or an equal entry was committed first): gives
     * back the document's lease if this cache took it. */
    void (*abandon)(lazyattn_cache *c, lazyattn_store *store, const lz_entry *e);
    /* Gives back what the uploads seen complete read; a document whose
     * upload failed is discarded, and the first failure's status returned
     * (OK: none). Never waits. */
    int (*settle)(lazyattn_cache *c);
    /* A loader thread's loads (BACKGROUND): waits until every load numbered
     * up to load_id has been finished by the loader (0: never waits), then
     * settles as settle does (the loads' entries updated: loading cleared,
     * a failed one discarded). The status of settle. for_plan: the wait is
     * lazyattn_request_get_plan's (counted). NULL: no loader. */
    int (*await)(lazyattn_cache *c, uint64_t load_id, int for_plan);
} lz_tier_ops;

/* The cache's tier store (NULL: none), its mode and operations. */
lazyattn_store *lz_cache_tier(const lazyattn_cache *c, lazyattn_tier_mode *mode,
                              const lz_tier_ops **ops);
/* The tier's state, as attached (NULL: none). */
void *lz_cache_tier_state(const lazyattn_cache *c);
/* Attaches store (NULL: detaches) with the operations that serve it and
 * its state (may be NULL); the tier attached before is detached. */
void lz_cache_attach_tier(lazyattn_cache *c, lazyattn_store *store, lazyattn_tier_mode mode,
                          const lz_tier_ops *ops, void *state);
/* A tier write (counted at once; lookups are counted with their request,
 * in its lz_tally). */
void lz_cache_count_tier_write(lazyattn_cache *c, int ok, uint64_t bytes);
/* A document of n_tokens this cache computed that the store had by the
 * time it was to be written: computed elsewhere too. */
void lz_cache_count_tier_duplicate(lazyattn_cache *c, int n_tokens);
void lz_cache_count_request(lazyattn_cache *c, const lz_tally *t);

/* Fingerprint of the whole cache state (entries, index, LRU order, pins,
 * counters, statistics): equal before and after anything that must not
 * change the cache (tests of lazyattn_cache_probe). */
uint64_t lz_cache_fingerprint(const lazyattn_cache *c);

/* ---- document export (doc_export.c) ---- */

/* Enqueues on q the reads of pool's blocks[0..n_blocks) into kv as they
 * are stored (for each layer its K blocks, then its V blocks; one copy a
 * run of consecutive ids), the first after wait (NULL: none); waits for
 * none of them. The first OpenCL error (the reads enqueued before it may
 * still run: the caller finishes q), CL_SUCCESS. */
cl_int lz_pool_read_blocks(cl_command_queue q, lazyattn_pool *pool, const int32_t *blocks,
                           int n_blocks, uint8_t *kv, cl_event wait);
/* The checksum of the export format (header and payload). */
uint64_t lz_kv_checksum(const uint8_t *p, size_t n);
/* Bytes of the export of a document of n_tokens in n_blocks on a pool of
 * configuration pc; 0 when it does not fit a size_t. */
size_t lz_kv_export_bytes(const lazyattn_pool_config *pc, int n_tokens, int n_blocks);
/* Completes the export (need bytes, lz_kv_export_bytes) in out whose K/V
 * part is in place, in ROWS order, at out + LAZYATTN_KV_HEADER_BYTES +
 * 4 * n_tokens: writes the tokens and the header (identity digest and
 * doc_hash as given, checksums). Touches no cache: any thread. */
void lz_kv_export_seal(const lazyattn_pool_config *pc, uint64_t model_id, const int32_t *tokens,
                       int n_tokens, int n_blocks, uint64_t doc_hash, const uint8_t digest[32],
                       uint8_t *out, size_t need);
/* lazyattn_cache_export_size and _export without the public checks (the
 * caller holds the cache); w names the caller. */
int lz_cache_export_size(const lazyattn_cache *c, uint64_t doc_hash, const char *w,
                         size_t *bytes);
int lz_cache_export(const lazyattn_cache *c, uint64_t doc_hash, void *buffer, size_t capacity,
                    const char *w, size_t *written);
/* How an import uploads its blocks (lz_cache_import_bytes). */
typedef struct lz_upload {
    cl_command_queue queue; /* in order, on the pool's context: the tier's copy queue */
    cl_event gate;          /* tests: the upload starts after it (NULL: at once) */
    uint8_t *room;          /* in: memory of room_bytes (the tier's pinned staging) for a
                               TILED pool's reorder, read by the upload until it completes
                               and kept by the caller until then (NULL, or too small: the
                               import allocates its own and hands it out in keep) */
    size_t room_bytes;
    cl_event done;          /* out: complete once every layer is in place (retained;
                               NULL when nothing was uploaded: cached already) */
    void *keep;             /* out: host memory the upload reads besides the data (a
                               TILED pool's reorder; NULL: none), to free once done */
    lz_entry *entry;        /* out: the entry committed (NULL: cached already) */
} lz_upload;
/* lazyattn_cache_import without the public checks; who names the caller.
 * up NULL: uploads on the context's queue and waits. Else enqueues the
 * upload on up->queue layer by layer, each layer's last copy fenced in the
 * pool (lz_pool_fence_load) and the whole a use of the pool, and returns
 * without waiting: data (and up->keep) must stay alive until up->done
 * completed. sealed: data is an export this process sealed (its payload
 * checksum computed over these very bytes, which never left its memory:
 * lz_store_value_sealed), so the payload checksum is not computed again;
 * every other check runs. For a request plan's tier load: the entry is
 * not trimmed to the retained budget (lz_cache_add_imported). */
int lz_cache_import_bytes(lazyattn_cache *c, const void *data, size_t size, uint64_t *doc_hash,
                          const char *who, lz_upload *up, int sealed);
/* For a tier's loader thread (touches no cache, only pool's buffers and
 * its lock): checks export p[size] as an import does against pool's
 * geometry and model_id (header, payload checksum unless sealed, identity:
 * its digest, doc_hash and tokens against the planned document's) and
 * enqueues its upload into blocks[n_blocks] as lz_cache_import_bytes does
 * with up (up->room for a TILED pool's reorder; else the reorder buffer is
 * allocated and handed out in up->keep). Status with the reason recorded
 * (FORMAT, INVALID_ARGUMENT: refused data). */
int lz_kv_load_bytes(lazyattn_pool *pool, uint64_t model_id, const uint8_t *p, size_t size,
                     int sealed, const uint8_t digest[32], uint64_t doc_hash,
                     const int32_t *tokens, int n_tokens, const int32_t *blocks, int n_blocks,
                     lz_upload *up, const char *who);
/* The export of committed LAZY entry e (exactly this entry, whatever other
 * entry shares its 64-bit hash) in a new buffer *out of *size bytes (the
 * caller frees it). */
int lz_cache_export_entry(const lazyattn_cache *c, const lz_entry *e, uint8_t **out,
                          size_t *size, const char *who);

/* ---- what requests offer the cache (request_plan.c hands it over) ---- */

/* What lazyattn_cache_validate checks of a live request. */
typedef struct lz_request_view {
    const lazyattn_cache *cache;
    const lz_hold *holds;
    int n_holds;
    const int32_t *own;
    int n_own;
} lz_request_view;
/* A request's hooks, on its link in the cache's ring: the cache reaches
 * its requests through them, never by name, so that the planner stays
 * above the cache. */
typedef struct lz_request_hooks {
    /* lazyattn_request_destroy inside a call that holds the cache. */
    void (*destroy_held)(lz_ring *link);
    void (*get_view)(const lz_ring *link, lz_request_view *view);
} lz_request_hooks;

#endif
