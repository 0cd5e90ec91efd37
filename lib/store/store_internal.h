/* SPDX-License-Identifier: Apache-2.0 */
/* What the stores (store_host.c, store_dir.c, store_redis.c) share with
 * the store wrapper (store.c). Not installed. */
#ifndef LAZYATTN_STORE_INTERNAL_H
#define LAZYATTN_STORE_INTERNAL_H

#include "internal.h"
#include "mutex.h"
#include "store/redis_url.h"

/* "<model_id>-<digest>", 16 and 64 hex digits (82 bytes with the NUL);
 * store_key.c. */
#define LZ_STORE_KEY_TEXT 82
void lz_store_key_text(lazyattn_doc_key key, char out[LZ_STORE_KEY_TEXT]);

/* 1 for the library's own stores (host, dir, redis), whose values are
 * memory of their own that nothing changes until released; 0 for an
 * engine's store (lazyattn_store_create), whose values the tier copies
 * before checking them. */
int lz_store_values_private(const lazyattn_store *s);

/* Sealed values: an export the tier sealed a moment before (its payload
 * checksum computed over these very bytes). lz_store_put_sealed puts one;
 * a store that keeps its values in this process's own memory (the host
 * store) remembers it, and lz_store_value_sealed then says 1 of the value
 * it hands out, so that a load does not checksum again bytes that never
 * left the process (the checksum guards storage and transport: a disk, a
 * network, another process). Other stores: a plain put, and 0. A value an
 * engine put (lazyattn_store_put) is never sealed. */
int lz_store_put_sealed(lazyattn_store *s, lazyattn_doc_key key, const void *data, size_t size);
int lz_store_value_sealed(const lazyattn_store *s, const lazyattn_store_value *v);
/* The host store's side of it (store_host.c). */
int lz_store_host_put_sealed(void *impl, lazyattn_doc_key key, const void *data, size_t size);
int lz_store_host_value_sealed(const lazyattn_store_value *v);

/* ---- the host store's pinned memory (pinned_arena.h) ----
 * lz_store_use_arena: s (a host store) keeps the values put from now on in
 * arena's memory where it has room: 1 when s keeps them in memory of
 * arena's context (arena's, or one an earlier tier gave it), 0 for any
 * other store or context. lz_store_has_arena: 1 when s is a host store
 * keeping values in memory of context's (NULL: of any context's).
 * lz_store_value_pinned: 1 when v (handed out by s and not yet released)
 * is in such memory of context, so that a device copy from it is a DMA of
 * pinned memory. */
struct lz_pinned_arena;
int lz_store_use_arena(lazyattn_store *s, struct lz_pinned_arena *arena);
int lz_store_has_arena(const lazyattn_store *s, cl_context context);
int lz_store_value_pinned(const lazyattn_store *s, const lazyattn_store_value *v,
                          cl_context context);
/* A value of size bytes the caller fills and then puts sealed
 * (lz_store_put_reserved) or gives back (lz_store_unreserve), with no copy:
 * the host store's own memory (*pinned 1: pinned memory of context), the
 * least recently used values evicted where the pinned memory had no room.
 * NULL for any other store (nothing recorded) or without memory (recorded).
 * *item: the reservation. */
uint8_t *lz_store_reserve(lazyattn_store *s, size_t size, cl_context context, void **item,
                          int *pinned);
/* Puts the reservation item under key, sealed (lz_store_put_sealed); it is
 * the store's from here on. */
void lz_store_put_reserved(lazyattn_store *s, lazyattn_doc_key key, void *item);
/* Gives back a reservation never put (NULL: nothing). */
void lz_store_unreserve(lazyattn_store *s, void *item);
/* The host store's side of it (store_host.c); lz_store_host_budget: its budget. */
int lz_store_host_use_arena(void *impl, struct lz_pinned_arena *arena);
int lz_store_host_has_arena(void *impl, cl_context context);
int lz_store_host_value_pinned(void *impl, const lazyattn_store_value *v, cl_context context);
uint8_t *lz_store_host_reserve(void *impl, size_t size, cl_context context, void **item,
                               int *pinned);
void lz_store_host_put_reserved(void *impl, lazyattn_doc_key key, void *item);
void lz_store_host_unreserve(void *impl, void *item);
uint64_t lz_store_host_budget(void *impl);
/* The host store's budget; 0 for any other store. */
uint64_t lz_store_host_budget_bytes(const lazyattn_store *s);

/* The built-in stores' ops and constructors of their state. */
extern const lazyattn_store_ops lz_store_host_ops;
extern const lazyattn_store_ops lz_store_dir_ops;
extern const lazyattn_store_ops lz_store_redis_ops;
int lz_store_host_open(uint64_t budget_bytes, void **impl);
int lz_store_dir_open(const char *path, void **impl);
/* The Redis store of a checked config and its seeds (taken: emptied). */
int lz_store_redis_open(const lazyattn_redis_config *config, lz_redis_url *seeds, void **impl);

/* ---- leases (store_lease.c): one process computes a missed document ----
 * A lease names, for ttl_ms, the process that computes a document no store
 * holds yet; others wait for its write instead of computing it too. */

/* A store's lease operations (the dir and Redis stores'; the host store and
 * an engine's store have none: every miss is computed by whoever misses). */
typedef struct lz_store_lease_ops {
    /* Takes key's lease for ttl_ms under token (nonzero): OK with *held 1;
     * or OK with *held 0 and *holder the holder's token (0: not known);
     * or the store's error (IO...). A lease past its expiry is taken over. */
    int (*acquire)(void *impl, lazyattn_doc_key key, uint64_t token, int ttl_ms, int *held,
                   uint64_t *holder);
    /* Gives the lease back if token still holds it (one that expired and
     * was taken over is left to its new holder). */
    int (*release)(void *impl, lazyattn_doc_key key, uint64_t token);
} lz_store_lease_ops;
extern const lz_store_lease_ops lz_store_dir_lease_ops;
extern const lz_store_lease_ops lz_store_redis_lease_ops;

/* What a lease request found. */
typedef enum lz_lease_answer {
    LZ_LEASE_NONE,     /* the store has no leases or they are off: compute */
    LZ_LEASE_FAILED,   /* the store failed (lazyattn_last_error() says why): compute */
    LZ_LEASE_HELD,     /* owner holds it now: compute, then lz_lease_give */
    LZ_LEASE_WAIT,     /* another holds it: owner may wait for its write (*wait_ms) */
    LZ_LEASE_BUSY      /* this store object holds it (another cache on it): compute */
} lz_lease_answer;

/* A store object's leases (store.c keeps one in each of the library's
 * stores; store_lease.c books what it takes). */
typedef struct lz_lease_book {
    const lz_store_lease_ops *ops; /* NULL: none */
    void *impl;
    uint64_t token; /* this store object's, nonzero */
    int ttl_ms;     /* 0: off */
    lz_mutex lock;
    struct lz_lease_held *held; /* [n_held] leases taken and not given back */
    int n_held, cap_held;
    int64_t hold_us; /* how long a lease is held until its write, a running mean */
} lz_lease_book;
/* s's book (NULL: an engine's store). */
lz_lease_book *lz_store_lease_book(lazyattn_store *s);
/* A book for a store's state impl with its lease ops (NULL: none). */
int lz_lease_book_init(lz_lease_book *b, const lz_store_lease_ops *ops, void *impl);
/* Gives back every lease still held (the store is destroyed). */
void lz_lease_book_free(lz_lease_book *b);
/* The lease TTL in ms of book (0: leases off, or book NULL: none). */
int lz_lease_ms(lz_lease_book *book);
/* Asks for key's lease on behalf of owner (a cache); WAIT sets *wait_ms,
 * how long owner may wait for the holder's write. The whole TTL when owner
 * holds no lease itself, or the holder's token is below the book's: such
 * waits run from higher tokens to lower ones and never close a cycle.
 * Otherwise twice the time a lease is usually held (the holder may be
 * waiting for owner): a wait that was no cycle ends with the document, one
 * that was ends soon, with a computation. */
lz_lease_answer lz_lease_take(lz_lease_book *book, const void *owner, lazyattn_doc_key key,
                              int *wait_ms);
/* Gives back the lease of key if owner holds it (written: its document was
 * written, which times the hold); 1 when it did. */
int lz_lease_give(lz_lease_book *book, const void *owner, lazyattn_doc_key key, int written);

/* Memory a value may be read into: take(user, size) hands out size bytes
 * the caller keeps (or NULL: the store's own memory then). */
typedef struct lz_store_room {
    uint8_t *(*take)(void *user, size_t size);
    void *user;
} lz_store_room;
/* lazyattn_store_get reading into room's memory where the store can: the
 * directory store reads its file straight into it (value->handle NULL
 * then: releasing it gives nothing back); the other stores as
 * lazyattn_store_get. store.c; the directory store's in store_dir.c. */
int lz_store_get_into(lazyattn_store *s, lazyattn_doc_key key, const lz_store_room *room,
                      lazyattn_store_value *value);
int lz_dir_get_into(void *impl, lazyattn_doc_key key, const lz_store_room *room,
                    lazyattn_store_value *v);

/* For tests (an internal seam): the pipelined uploads of cache's tier
 * enqueued from now on start only after gate completes (NULL: at once;
 * retained). No-op without a tier. doc_tier.c. */
void lz_tier_hold_uploads(lazyattn_cache *c, cl_event gate);

/* memcpy(dst, src, n) by up to `threads` threads (this one among them; at
 * most 16) for n of 16 MiB or more, in shares of whole 4 KiB pages; a
 * thread that cannot be made leaves its share to this one (tier_loader.c:
 * a background load's copy into its pinned slot, tier.load_threads). */
void lz_copy_parallel(uint8_t *dst, const uint8_t *src, size_t n, int threads);

/* For tests: the uploads of cache's tier seen ended from now on are taken
 * to have failed on the device with status (< 0; 0: as they ended), as a
 * failing device would report them. doc_tier.c. */
void lz_tier_fail_uploads(lazyattn_cache *c, cl_int status);

#endif
