/* SPDX-License-Identifier: Apache-2.0 */
/* The tier's background writer (tier_writer.h): a bounded queue of
 * document writes; a reader thread that reads their blocks back on a queue
 * of its own into the host store's own pinned memory (reserved there, put
 * without a copy: pinned_arena.h), else into pinned staging (the tier's
 * staging ring; then pageable memory, or the write dropped:
 * tier.pin_writes), and a putter thread that
 * seals each export and puts it in the store, so that a slow store holds
 * up puts, not read-backs. */
#include "attn/tuning.h"
#include "cache/cache_internal.h"
#include "store/store_internal.h"
#include "store/tier_staging.h"
#include "store/tier_writer.h"

#include <stdlib.h>
#include <string.h>

#if !defined(_WIN32)
#include <pthread.h>
#endif

/* One document to write. */
typedef struct lz_tier_job {
    uint64_t model_id, doc_hash;
    uint8_t digest[32];
    int32_t *tokens; /* [n_tokens] */
    int32_t *blocks; /* [n_blocks] */
    int n_tokens, n_blocks;
    cl_event after; /* marker on the context's queue: the blocks are written */
    cl_event done;  /* user event, a use of the pool: complete once read back */
    const void *lease_owner; /* the cache whose lease of the document this write gives
                                back (store_lease.c), NULL: none or given back */
} lz_tier_job;

/* A document read back, waiting for its put. */
typedef struct lz_put_item {
    lz_tier_job job; /* its done event completed: its blocks are free again */
    uint8_t *out;    /* the export being made: the store's reserved memory, a pinned
                        slot's, or own */
    void *reserved;  /* the store's reservation out is (lz_store_reserve), NULL: none */
    int in_arena;    /* reserved in the store's pinned memory */
    uint8_t *own;    /* pageable (no slot was free), freed after the put */
    uint8_t *tiled;  /* a TILED pool's pages as read, reordered into out by the put */
    size_t need;     /* bytes of the export */
    int slot;        /* the pinned slot, -1 none */
} lz_put_item;

struct lz_tier_writer {
    lazyattn_pool *pool;
    lazyattn_context *ctx;
    lazyattn_pool_config pc;
    lazyattn_store *store;
    cl_command_queue queue; /* the writer's own */
    /* pinned staging (the tier's ring, tier_staging.h): a slot taken by the
       reader, given back by the putter */
    lz_tier_staging staging;
    int staging_made;
    /* no pinned slot free, the write is dropped rather than read back into
       pageable memory (on NVIDIA's OpenCL a staged copy that held up the
       serving thread's enqueues: 0.98x -> 1.21x the no-tier req/s on an
       H100); LAZYATTN_TUNE's tier.pin_writes, by default on a device with
       memory of its own (no CL_DEVICE_HOST_UNIFIED_MEMORY) */
    int pinned_only;
#if !defined(_WIN32)
    pthread_t thread, putter; /* the reader (read-backs) and the putter (seals, puts) */
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t wake;     /* a job queued, or stop */
    pthread_cond_t put_wake; /* a read-back to put, or the reader ended */
    pthread_cond_t put_room; /* a put ended */
#endif
    lz_tier_job *jobs; /* ring [depth]: jobs[head .. head + n) */
    int depth, head, n;
    lz_put_item *puts; /* ring [depth]: puts[put_head .. put_head + put_n) */
    int put_head, put_n;
    int reading, putting; /* a job taken by the reader / an item by the putter */
    int stop, reader_done;
    int64_t queued, dropped, written, errors;
    int64_t duplicates, duplicate_tokens; /* found in the store when written */
    uint64_t written_bytes;
    int64_t read_store, read_pinned, read_pageable; /* read-backs by memory (the log) */
    int64_t dropped_unpinned;
};

/* Gives back the lease of j's document, if the submitter held one
 * (written: its document is in the store now). */
static void lz_job_lease_done(lz_tier_writer *w, lz_tier_job *j, int written) {
    if (!j->lease_owner) return;
    lazyattn_doc_key key = {j->model_id, {0}};
    memcpy(key.digest, j->digest, sizeof key.digest);
    lz_lease_give(lz_store_lease_book(w->store), j->lease_owner, key, written);
    j->lease_owner = NULL;
}

static void lz_job_release(lz_tier_writer *w, lz_tier_job *j) {
    lz_job_lease_done(w, j, 0); /* not written: the others stop waiting */
    /* complete whatever waits for the read-back, whether it ran or not */
    if (j->done) {
        clSetUserEventStatus(j->done, CL_COMPLETE);
        clReleaseEvent(j->done);
    }
    if (j->after) clReleaseEvent(j->after);
    free(j->tokens);
    free(j->blocks);
    memset(j, 0, sizeof *j);
}

/* Reads job j's blocks into kv after its marker (lz_pool_read_blocks), and
 * waits. */
static int lz_job_read(lz_tier_writer *w, const lz_tier_job *j, uint8_t *kv) {
    cl_int err = lz_pool_read_blocks(w->queue, w->pool, j->blocks, j->n_blocks, kv, j->after);
    cl_int fin = clFinish(w->queue);
    if (err == CL_SUCCESS) err = fin;
    if (err != CL_SUCCESS) return lz_cl_fail(err, "tier writer: clEnqueueReadBuffer");
    return LAZYATTN_STATUS_OK;
}

/* Reads job j back for its put into *it (j moved there; status OK), or
 * ends it: *found 1 when the store has the document already (nothing read
 * back; OK), *dropped 1 when no pinned slot was free and the writer reads
 * only into pinned ones (OK), else the status with the reason recorded.
 * Either way j's done event is completed: its blocks may be rewritten from
 * here on. */
static int lz_job_read_back(lz_tier_writer *w, lz_tier_job *j, lz_put_item *it, int *found,
                            int *dropped) {
    *found = *dropped = 0;
    memset(it, 0, sizeof *it);
    it->slot = -1;
    size_t need = lz_kv_export_bytes(&w->pc, j->n_tokens, j->n_blocks);
    int st = LAZYATTN_STATUS_OK;
    if (need == 0) {
        st = lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE, "tier writer: the export exceeds a size_t");
    } else {
        /* a document the store has already (another process or an earlier
           write put it) is neither read back nor sealed */
        lazyattn_doc_key key = {j->model_id, {0}};
        memcpy(key.digest, j->digest, sizeof key.digest);
        int there = 0;
        *found = lazyattn_store_exists(w->store, key, &there) == LAZYATTN_STATUS_OK && there;
    }
    it->need = need;
    if (!st && !*found) {
        /* the host store's memory: read back into the value itself (pageable
           memory only where the writer may read into it) */
        it->out = lz_store_reserve(w->store, need, w->ctx->context, &it->reserved, &it->in_arena);
        if (it->out && !it->in_arena && w->pinned_only) {
            lz_store_unreserve(w->store, it->reserved);
            it->out = it->reserved = NULL;
        }
        if (!it->out) it->out = lz_staging_take(&w->staging, need, &it->slot);
        *dropped = !it->out && w->pinned_only; /* nothing allocated for it */
    }
    if (!st && !*found && !*dropped) {
        if (!it->out && !(it->out = it->own = malloc(need))) /* pageable, then */
            st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tier writer: %zu bytes", need);
        size_t kv_bytes = need - LAZYATTN_KV_HEADER_BYTES - 4 * (size_t)j->n_tokens;
        if (!st && w->pc.kv_layout == LAZYATTN_KV_LAYOUT_TILED && !(it->tiled = malloc(kv_bytes)))
            st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tier writer: %zu bytes", kv_bytes);
        if (!st)
            st = lz_job_read(w, j, it->tiled ? it->tiled
                                             : it->out + LAZYATTN_KV_HEADER_BYTES +
                                                   4 * (size_t)j->n_tokens);
    }
    /* read back, found or failed: the blocks may be rewritten from here on */
    clSetUserEventStatus(j->done, CL_COMPLETE);
    clReleaseEvent(j->done);
    j->done = NULL;
    it->job = *j;
    memset(j, 0, sizeof *j);
    return st;
}

/* Gives item it's slot or reservation back or frees its memory (its put
 * ended). */
static void lz_item_free(lz_tier_writer *w, lz_put_item *it) {
    free(it->tiled);
    free(it->own);
    if (it->slot >= 0) lz_staging_give(&w->staging, it->slot);
    lz_store_unreserve(w->store, it->reserved);
    it->tiled = it->own = it->out = NULL;
    it->reserved = NULL;
    it->slot = -1;
}

/* Seals item it's export and puts it in the store: OK, or the status with
 * the reason recorded. A document the store has already is not put again
 * (*found 1: computed elsewhere too). */
static int lz_item_put(lz_tier_writer *w, lz_put_item *it, int *found) {
    *found = 0;
    const lz_tier_job *j = &it->job;
    uint8_t *kv = it->out + LAZYATTN_KV_HEADER_BYTES + 4 * (size_t)j->n_tokens;
    if (it->tiled)
        lz_kv_pages_to_rows(it->tiled, kv, (int64_t)2 * w->pc.n_layers * j->n_blocks * w->pc.n_kv_heads,
                            w->pc.block_size, w->pc.head_dim, lazyattn_dtype_size(w->pc.dtype));
    lz_kv_export_seal(&w->pc, j->model_id, j->tokens, j->n_tokens, j->n_blocks, j->doc_hash,
                      j->digest, it->out, it->need);
    lazyattn_doc_key key = {j->model_id, {0}};
    memcpy(key.digest, j->digest, sizeof key.digest);
    int there = 0; /* again: it may have come while this one was read back */
    int st = lazyattn_store_exists(w->store, key, &there);
    if (!st && !there && it->reserved) { /* the value is the store's memory: no copy */
        lz_store_put_reserved(w->store, key, it->reserved);
        it->reserved = NULL;
    } else if (!st && !there) {
        st = lz_store_put_sealed(w->store, key, it->out, it->need); /* sealed */
    }
    *found = !st && there;
    return st;
}

/* A write ended (st), its lease given back and its job released: counted
 * (the lock not held). */
static void lz_write_ended(lz_tier_writer *w, lz_tier_job *j, int st, size_t bytes, int found) {
    int n_tokens = j->n_tokens;
    lz_job_lease_done(w, j, !st);
    if (st)
        lz_log(w->ctx, LAZYATTN_LOG_WARN,
               "tier writer: document %016llx not written to the %s store: %s",
               (unsigned long long)j->doc_hash, lazyattn_store_name(w->store),
               lazyattn_last_error());
    lz_job_release(w, j);
#if !defined(_WIN32)
    pthread_mutex_lock(&w->lock);
    if (st)
        w->errors++;
    else {
        w->written++;
        w->written_bytes += bytes;
    }
    if (found) {
        w->duplicates++;
        w->duplicate_tokens += n_tokens;
    }
    pthread_mutex_unlock(&w->lock);
#else
    (void)bytes, (void)found, (void)n_tokens;
#endif
}

#if !defined(_WIN32)
/* The reader: each queued job read back (its blocks free again as soon as
 * that is done) and handed to the putter, so that a slow store delays
 * only the puts, never the read-backs the serving thread's reuse of
 * blocks may wait on. */
static void *lz_writer_main(void *arg) {
    lz_tier_writer *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->stop && w->n == 0) pthread_cond_wait(&w->wake, &w->lock);
        if (w->n == 0) break; /* stopping: the queue was emptied (dropped) */
        lz_tier_job j = w->jobs[w->head];
        memset(&w->jobs[w->head], 0, sizeof j);
        w->head = (w->head + 1) % w->depth;
        w->n--;
        w->reading = 1;
        pthread_mutex_unlock(&w->lock);
        lz_put_item it;
        int found = 0, dropped = 0;
        int st = lz_job_read_back(w, &j, &it, &found, &dropped);
        if (dropped) { /* no pinned slot (tier.pin_writes): not read back, not written */
            lz_job_release(w, &it.job);
            pthread_mutex_lock(&w->lock);
            w->dropped++, w->dropped_unpinned++;
            w->reading = 0;
            continue;
        }
        if (st || found) {
            lz_item_free(w, &it);
            lz_write_ended(w, &it.job, st, found ? it.need : 0, found);
            pthread_mutex_lock(&w->lock);
            w->reading = 0;
            continue;
        }
        pthread_mutex_lock(&w->lock);
        /* read back: into which memory, for the log */
        *(it.tiled                      ? &w->read_pageable
          : it.in_arena                 ? &w->read_store
          : it.slot >= 0                ? &w->read_pinned
                                        : &w->read_pageable) += 1;
        while (w->put_n == w->depth) pthread_cond_wait(&w->put_room, &w->lock);
        w->puts[(w->put_head + w->put_n) % w->depth] = it;
        w->put_n++;
        w->reading = 0;
        pthread_cond_signal(&w->put_wake);
    }
    w->reader_done = 1;
    pthread_cond_signal(&w->put_wake);
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* The putter: each read-back sealed and put in the store, in order; it
 * ends once the reader has and nothing is left to put. */
static void *lz_putter_main(void *arg) {
    lz_tier_writer *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->put_n == 0 && !w->reader_done) pthread_cond_wait(&w->put_wake, &w->lock);
        if (w->put_n == 0) break;
        lz_put_item it = w->puts[w->put_head];
        memset(&w->puts[w->put_head], 0, sizeof it);
        w->put_head = (w->put_head + 1) % w->depth;
        w->put_n--;
        w->putting = 1;
        int drop = w->stop; /* ending: the puts not begun are dropped, as queued writes are */
        pthread_mutex_unlock(&w->lock);
        if (drop) {
            lz_item_free(w, &it);
            lz_job_release(w, &it.job); /* its lease given back, not written */
            pthread_mutex_lock(&w->lock);
            w->dropped++;
            w->putting = 0;
            pthread_cond_signal(&w->put_room);
            continue;
        }
        int found = 0;
        int st = lz_item_put(w, &it, &found);
        lz_item_free(w, &it);
        lz_write_ended(w, &it.job, st, st ? 0 : it.need, found);
        pthread_mutex_lock(&w->lock);
        w->putting = 0;
        pthread_cond_signal(&w->put_room);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}
#endif

static void lz_writer_free(lz_tier_writer *w) {
    if (w->staging_made) lz_staging_free(&w->staging);
    if (w->queue) clReleaseCommandQueue(w->queue);
    free(w->jobs);
    free(w->puts);
    free(w);
}

int lz_tier_writer_create(lazyattn_pool *pool, lazyattn_store *store, int depth,
                          lz_tier_writer **out) {
    static const char w_[] = "lazyattn_cache_set_tier";
    *out = NULL;
#if defined(_WIN32)
    (void)pool;
    (void)store;
    (void)depth;
    return lz_fail(LAZYATTN_STATUS_UNSUPPORTED, "%s: no background writer on Windows: "
                   "write_queue 0", w_);
#else
    lz_tier_writer *w = calloc(1, sizeof *w);
    if (w) w->jobs = calloc((size_t)depth, sizeof *w->jobs);
    if (w) w->puts = calloc((size_t)depth, sizeof *w->puts);
    if (!w || !w->jobs || !w->puts) {
        if (w) free(w->jobs), free(w->puts), free(w);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: the tier writer", w_);
    }
    w->pool = pool;
    w->ctx = lz_pool_context(pool);
    lazyattn_pool_get_config(pool, &w->pc);
    w->store = store;
    w->depth = depth;
    lz_tune_override ov;
    lz_tune_from_env(w->ctx, &ov);
    w->pinned_only = ov.tier_pin_writes >= 0 ? ov.tier_pin_writes : w->ctx->own_memory;
    cl_int err;
    w->queue = clCreateCommandQueue(w->ctx->context, w->ctx->device, 0, &err);
    if (err != CL_SUCCESS) {
        w->queue = NULL;
        lz_writer_free(w);
        return lz_cl_fail(err, "lazyattn_cache_set_tier: the tier writer's clCreateCommandQueue");
    }
    int st = lz_staging_init(&w->staging, w->ctx->context, w->queue);
    if (st) {
        lz_writer_free(w);
        return st;
    }
    w->staging_made = 1;
    /* 1 lock, 2 + wake, 3 + put_wake, 4 + put_room, 5 + putter, 6 + reader */
    int ok = 0;
    if (pthread_mutex_init(&w->lock, NULL) == 0) ok++;
    if (ok == 1 && pthread_cond_init(&w->wake, NULL) == 0) ok++;
    if (ok == 2 && pthread_cond_init(&w->put_wake, NULL) == 0) ok++;
    if (ok == 3 && pthread_cond_init(&w->put_room, NULL) == 0) ok++;
    if (ok == 4 && pthread_create(&w->putter, NULL, lz_putter_main, w) == 0) ok++;
    if (ok == 5 && pthread_create(&w->thread, NULL, lz_writer_main, w) == 0) ok++;
    if (ok < 6) {
        if (ok == 5) { /* the putter alone: it ends once told the reader has */
            pthread_mutex_lock(&w->lock);
            w->reader_done = 1;
            pthread_cond_signal(&w->put_wake);
            pthread_mutex_unlock(&w->lock);
            pthread_join(w->putter, NULL);
        }
        if (ok >= 4) pthread_cond_destroy(&w->put_room);
        if (ok >= 3) pthread_cond_destroy(&w->put_wake);
        if (ok >= 2) pthread_cond_destroy(&w->wake);
        if (ok >= 1) pthread_mutex_destroy(&w->lock);
        lz_writer_free(w);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: the tier writer's thread", w_);
    }
    *out = w;
    return LAZYATTN_STATUS_OK;
#endif
}

int lz_tier_writer_submit(lz_tier_writer *w, uint64_t model_id, const uint8_t digest[32],
                          uint64_t doc_hash, const int32_t *tokens, int n_tokens,
                          const int32_t *blocks, int n_blocks, const void *lease_owner) {
#if defined(_WIN32)
    (void)w, (void)model_id, (void)digest, (void)doc_hash, (void)tokens, (void)n_tokens;
    (void)blocks, (void)n_blocks, (void)lease_owner;
    return 0;
#else
    pthread_mutex_lock(&w->lock);
    /* depth writes wait (to be read back, or read back to be put) beside
       the one being put; only this thread adds: room now is room below */
    int full = w->n + w->reading + w->put_n >= w->depth;
    if (full) w->dropped++;
    pthread_mutex_unlock(&w->lock);
    if (full) {
        lz_log(w->ctx, LAZYATTN_LOG_DEBUG,
               "tier writer: queue full (%d); document %016llx not written", w->depth,
               (unsigned long long)doc_hash);
        return 0;
    }
    lz_tier_job j = {0};
    j.model_id = model_id;
    j.doc_hash = doc_hash;
    memcpy(j.digest, digest, sizeof j.digest);
    j.n_tokens = n_tokens;
    j.n_blocks = n_blocks;
    j.lease_owner = lease_owner;
    j.tokens = malloc((size_t)n_tokens * sizeof *j.tokens);
    j.blocks = malloc((size_t)n_blocks * sizeof *j.blocks);
    cl_int err = CL_OUT_OF_HOST_MEMORY;
    if (j.tokens && j.blocks) {
        memcpy(j.tokens, tokens, (size_t)n_tokens * sizeof *j.tokens);
        memcpy(j.blocks, blocks, (size_t)n_blocks * sizeof *j.blocks);
        j.done = clCreateUserEvent(w->ctx->context, &err);
        if (err != CL_SUCCESS) j.done = NULL;
    }
    /* after the tier uploads into the pool still in flight, too */
    if (err == CL_SUCCESS &&
        lz_pool_order_reads(w->pool, -1, w->ctx->queue, "tier writer") != LAZYATTN_STATUS_OK)
        err = CL_OUT_OF_HOST_MEMORY;
    if (err == CL_SUCCESS) err = clEnqueueMarkerWithWaitList(w->ctx->queue, 0, NULL, &j.after);
    if (err == CL_SUCCESS) err = clFlush(w->ctx->queue); /* before another queue waits on it */
    if (err != CL_SUCCESS) {
        lz_job_release(w, &j);
        pthread_mutex_lock(&w->lock);
        w->dropped++;
        pthread_mutex_unlock(&w->lock);
        lz_log(w->ctx, LAZYATTN_LOG_DEBUG,
               "tier writer: document %016llx not queued (OpenCL error %d)",
               (unsigned long long)doc_hash, (int)err);
        return 0;
    }
    cl_event done = j.done;
    clRetainEvent(done); /* the pool's record below may outlive the job */
    pthread_mutex_lock(&w->lock);
    w->jobs[(w->head + w->n) % w->depth] = j;
    w->n++;
    w->queued++;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    /* A block freed from here on is rewritten only after the read-back
     * (block_pool.c stamps it with this use). Should the record fail, it
     * waits for the read-back itself, which needs only the marker. */
    lazyattn_pool_record_use(w->pool, 1, &done);
    clReleaseEvent(done);
    return 1;
#endif
}

void lz_tier_writer_stats(lz_tier_writer *w, lazyattn_cache_stats *s) {
#if !defined(_WIN32)
    pthread_mutex_lock(&w->lock);
    if (!s) {
        w->queued = w->dropped = w->written = w->errors = 0;
        w->duplicates = w->duplicate_tokens = 0;
        w->written_bytes = 0;
    } else {
        s->tier_writes += w->written;
        s->tier_write_bytes += w->written_bytes;
        s->tier_write_errors += w->errors;
        s->tier_writes_queued += w->queued;
        s->tier_writes_dropped += w->dropped;
        s->tier_writes_pending += w->n + w->reading + w->put_n + w->putting;
        s->tier_duplicates += w->duplicates;
        s->tier_duplicate_tokens += w->duplicate_tokens;
    }
    pthread_mutex_unlock(&w->lock);
#else
    (void)w, (void)s;
#endif
}

void lz_tier_writer_destroy(lz_tier_writer *w, lazyattn_cache_stats *into) {
    if (!w) return;
#if !defined(_WIN32)
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    while (w->n > 0) { /* dropped: their blocks are free to be rewritten */
        lz_job_release(w, &w->jobs[w->head]);
        w->head = (w->head + 1) % w->depth;
        w->n--;
        w->dropped++;
    }
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL); /* the reader: its last job handed on */
    pthread_join(w->putter, NULL); /* the puts handed on, all done */
    lz_log(w->ctx, LAZYATTN_LOG_INFO,
           "tier writer: %lld read-backs into the host store's pinned memory, %lld into "
           "pinned staging, %lld into pageable memory, %lld writes dropped (%lld for want of "
           "a pinned slot)",
           (long long)w->read_store, (long long)w->read_pinned, (long long)w->read_pageable,
           (long long)w->dropped, (long long)w->dropped_unpinned);
    if (into) {
        lz_tier_writer_stats(w, into);
    }
    pthread_cond_destroy(&w->put_room);
    pthread_cond_destroy(&w->put_wake);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
#else
    (void)into;
#endif
    lz_writer_free(w);
}
