/* SPDX-License-Identifier: Apache-2.0 */
/* The tier's loader (LAZYATTN_TIER_LOAD_BACKGROUND): the host work of a
 * tier hit off the serving thread. The planner (serving thread) has taken
 * the document's blocks and planned it REUSE; the loader, on a thread of
 * its own and in submission order, gets the value from the store (into
 * the tier's pinned staging where the store can), copies an engine's
 * value, checks it (lz_kv_load_bytes: header, checksum unless sealed,
 * identity against the planned tokens), reorders it for a TILED pool and
 * enqueues its upload on the tier's copy queue, each layer fenced in the
 * pool (the pool's own lock) so that attention enqueued after the load is
 * seen finished waits for its layer only. It never calls the cache: what
 * it finished is taken back by the serving thread (lz_tier_loader_take),
 * which settles the entries. Not installed. */
#ifndef LAZYATTN_TIER_LOADER_H
#define LAZYATTN_TIER_LOADER_H

#include "cache/cache_internal.h"
#include "store/tier_staging.h"

typedef struct lz_tier_loader lz_tier_loader;

/* One load: what the planner asked for, then what the loader made of it. */
typedef struct lz_load_job {
    struct lz_load_job *next;
    /* in (the planner's) */
    uint64_t load_id, doc_hash;
    uint8_t digest[32];
    int32_t *tokens, *blocks; /* [n_tokens], [n_blocks], copies */
    int n_tokens, n_blocks;
    lz_entry *entry; /* the planned entry: the serving thread's only */
    /* out (the loader's), once finished */
    int status;                 /* OK: enqueued; else why not (reason) */
    char reason[320];
    cl_event done;              /* OK: complete once every layer is in place */
    lazyattn_store_value value; /* the store's value the upload reads (data NULL: none) */
    uint8_t *copy;              /* ... or the loader's copy of it (pageable unless slot) */
    void *keep;                 /* a TILED pool's reorder buffer, or NULL */
    int slot;                   /* the staging slot the upload reads (-1: none) */
    size_t bytes;               /* the value's */
    double seconds;             /* get, checks and enqueue */
    int sealed;
} lz_load_job;

/* A loader of documents of model_id into pool from store, enqueueing on
 * queue (the tier's copy queue) and reading into staging (both the
 * tier's, alive until the loader is destroyed). */
int lz_tier_loader_create(lazyattn_pool *pool, lazyattn_store *store, uint64_t model_id,
                          cl_command_queue queue, lz_tier_staging *staging,
                          lz_tier_loader **out);

/* Queues a load (tokens and blocks copied; gate: tests' lz_tier_hold_uploads,
 * NULL: none). OUT_OF_HOST_MEMORY with nothing queued. */
int lz_tier_loader_submit(lz_tier_loader *l, lz_entry *entry, uint64_t load_id,
                          const uint8_t digest[32], uint64_t doc_hash, const int32_t *tokens,
                          int n_tokens, const int32_t *blocks, int n_blocks, cl_event gate);

/* The loads finished so far, oldest first (a list the caller frees with
 * lz_load_job_free once settled), after waiting until every load numbered
 * up to wait_for is finished (0: no wait). NULL: none. */
lz_load_job *lz_tier_loader_take(lz_tier_loader *l, uint64_t wait_for);

/* Loads queued or running (not finished). */
int lz_tier_loader_pending(lz_tier_loader *l);

/* Ends the loader: the load in progress finishes, those still queued are
 * finished as failed (dropped), the thread joined; what is finished stays
 * to take. Then lz_tier_loader_destroy frees it (after the last take). */
void lz_tier_loader_stop(lz_tier_loader *l);
void lz_tier_loader_destroy(lz_tier_loader *l);

/* Frees a job's own memory (not what its upload reads: the caller gives
 * that back once the upload ended). */
void lz_load_job_free(lz_load_job *j);

#endif
