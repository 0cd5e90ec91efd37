/* SPDX-License-Identifier: Apache-2.0 */
/* The tier's background writer (tier_writer.h): a bounded queue of
 * document writes, one thread that reads their blocks back on a queue of
 * its own into pinned staging, seals each export and puts it in the store. */
#include "cache/cache_internal.h"
#include "store/store_internal.h"
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

struct lz_tier_writer {
    lazyattn_pool *pool;
    lazyattn_context *ctx;
    lazyattn_pool_config pc;
    lazyattn_store *store;
    cl_command_queue queue; /* the writer's own */
    /* pinned staging: a host-allocated buffer, mapped while the writer lives */
    cl_mem staging;
    uint8_t *staging_ptr;
    size_t staging_bytes;
#if !defined(_WIN32)
    pthread_t thread;
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t wake;
#endif
    lz_tier_job *jobs; /* ring [depth]: jobs[head .. head + n) */
    int depth, head, n;
    int busy; /* a job taken, not finished */
    int stop;
    int64_t queued, dropped, written, errors;
    int64_t duplicates, duplicate_tokens; /* found in the store when written */
    uint64_t written_bytes;
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

/* Pinned staging of at least need bytes (the buffer before it released);
 * NULL when the device cannot give it. */
static uint8_t *lz_staging(lz_tier_writer *w, size_t need) {
    if (w->staging_bytes >= need) return w->staging_ptr;
    if (w->staging) {
        clEnqueueUnmapMemObject(w->queue, w->staging, w->staging_ptr, 0, NULL, NULL);
        clFinish(w->queue);
        clReleaseMemObject(w->staging);
        w->staging = NULL;
        w->staging_ptr = NULL;
        w->staging_bytes = 0;
    }
    cl_int err;
    cl_mem m = clCreateBuffer(w->ctx->context, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, need,
                              NULL, &err);
    if (err != CL_SUCCESS) return NULL;
    void *p = clEnqueueMapBuffer(w->queue, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, need, 0,
                                 NULL, NULL, &err);
    if (err != CL_SUCCESS) {
        clReleaseMemObject(m);
        return NULL;
    }
    w->staging = m;
    w->staging_ptr = p;
    w->staging_bytes = need;
    return p;
}

/* Reads job j's blocks (each layer's K blocks, then its V blocks) into kv
 * after its marker, and waits. */
static int lz_job_read(lz_tier_writer *w, const lz_tier_job *j, uint8_t *kv) {
    size_t per = (size_t)w->pc.n_kv_heads * (size_t)w->pc.block_size * (size_t)w->pc.head_dim *
                 lazyattn_dtype_size(w->pc.dtype);
    cl_int err = CL_SUCCESS;
    int first = 1; /* the queue is in order: the first read waits for the rest */
    for (int l = 0; l < w->pc.n_layers && err == CL_SUCCESS; l++)
        for (int which = 0; which < 2 && err == CL_SUCCESS; which++) {
            cl_mem m = which ? lazyattn_pool_v_buffer(w->pool, l)
                             : lazyattn_pool_k_buffer(w->pool, l);
            for (int b = 0; b < j->n_blocks && err == CL_SUCCESS; b++, kv += per) {
                err = clEnqueueReadBuffer(w->queue, m, CL_FALSE, (size_t)j->blocks[b] * per, per,
                                          kv, first ? 1 : 0, first ? &j->after : NULL, NULL);
                first = 0;
            }
        }
    cl_int fin = clFinish(w->queue);
    if (err == CL_SUCCESS) err = fin;
    if (err != CL_SUCCESS) return lz_cl_fail(err, "tier writer: clEnqueueReadBuffer");
    return LAZYATTN_STATUS_OK;
}

/* Writes job j to the store: OK with the bytes written, or the status with
 * the reason recorded. A document the store has already is not put again
 * (counted as written; *found 1: computed elsewhere too). */
static int lz_job_run(lz_tier_writer *w, lz_tier_job *j, size_t *written, int *found) {
    *written = 0;
    *found = 0;
    size_t need = lz_kv_export_bytes(&w->pc, j->n_tokens, j->n_blocks);
    if (need == 0)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE, "tier writer: the export exceeds a size_t");
    lazyattn_doc_key key = {j->model_id, {0}};
    memcpy(key.digest, j->digest, sizeof key.digest);
    /* a document the store has already (another process or an earlier
       write put it) is neither read back nor sealed: its blocks are free
       to be rewritten at once */
    int there = 0;
    int st = lazyattn_store_exists(w->store, key, &there);
    if (!st && there) {
        clSetUserEventStatus(j->done, CL_COMPLETE);
        clReleaseEvent(j->done);
        j->done = NULL;
        *found = 1;
        *written = need;
        return LAZYATTN_STATUS_OK;
    }
    st = LAZYATTN_STATUS_OK; /* a failed look: write it, the put says what holds */
    uint8_t *out = lz_staging(w, need), *own = NULL, *tiled = NULL;
    if (!out && !(out = own = malloc(need))) /* pageable, then */
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tier writer: %zu bytes", need);
    uint8_t *kv = out + LAZYATTN_KV_HEADER_BYTES + 4 * (size_t)j->n_tokens;
    int64_t pages = (int64_t)2 * w->pc.n_layers * j->n_blocks * w->pc.n_kv_heads;
    size_t kv_bytes = need - LAZYATTN_KV_HEADER_BYTES - 4 * (size_t)j->n_tokens;
    if (w->pc.kv_layout == LAZYATTN_KV_LAYOUT_TILED && !(tiled = malloc(kv_bytes)))
        st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tier writer: %zu bytes", kv_bytes);
    if (!st) st = lz_job_read(w, j, tiled ? tiled : kv);
    /* read back (or failed): the blocks may be rewritten from here on */
    clSetUserEventStatus(j->done, CL_COMPLETE);
    clReleaseEvent(j->done);
    j->done = NULL;
    if (!st && tiled)
        lz_kv_pages_to_rows(tiled, kv, pages, w->pc.block_size, w->pc.head_dim,
                            lazyattn_dtype_size(w->pc.dtype));
    free(tiled);
    if (!st) {
        lz_kv_export_seal(&w->pc, j->model_id, j->tokens, j->n_tokens, j->n_blocks, j->doc_hash,
                          j->digest, out, need);
        there = 0; /* again: it may have come while this one was read back */
        st = lazyattn_store_exists(w->store, key, &there);
        if (!st && !there) st = lz_store_put_sealed(w->store, key, out, need); /* sealed above */
        *found = !st && there;
    }
    free(own);
    if (!st) *written = need;
    return st;
}

#if !defined(_WIN32)
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
        w->busy = 1;
        pthread_mutex_unlock(&w->lock);
        size_t written = 0;
        int found = 0, n_tokens = j.n_tokens;
        int st = lz_job_run(w, &j, &written, &found);
        lz_job_lease_done(w, &j, !st);
        if (st)
            lz_log(w->ctx, LAZYATTN_LOG_WARN,
                   "tier writer: document %016llx not written to the %s store: %s",
                   (unsigned long long)j.doc_hash, lazyattn_store_name(w->store),
                   lazyattn_last_error());
        lz_job_release(w, &j);
        pthread_mutex_lock(&w->lock);
        w->busy = 0;
        if (st)
            w->errors++;
        else {
            w->written++;
            w->written_bytes += written;
        }
        if (found) {
            w->duplicates++;
            w->duplicate_tokens += n_tokens;
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}
#endif

static void lz_writer_free(lz_tier_writer *w) {
    if (w->staging) {
        clEnqueueUnmapMemObject(w->queue, w->staging, w->staging_ptr, 0, NULL, NULL);
        clFinish(w->queue);
        clReleaseMemObject(w->staging);
    }
    if (w->queue) clReleaseCommandQueue(w->queue);
    free(w->jobs);
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
    if (!w || !w->jobs) {
        if (w) free(w);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: the tier writer", w_);
    }
    w->pool = pool;
    w->ctx = lz_pool_context(pool);
    lazyattn_pool_get_config(pool, &w->pc);
    w->store = store;
    w->depth = depth;
    cl_int err;
    w->queue = clCreateCommandQueue(w->ctx->context, w->ctx->device, 0, &err);
    if (err != CL_SUCCESS) {
        w->queue = NULL;
        lz_writer_free(w);
        return lz_cl_fail(err, "lazyattn_cache_set_tier: the tier writer's clCreateCommandQueue");
    }
    int ok = 0; /* 1 lock, 2 + wake, 3 + thread */
    if (pthread_mutex_init(&w->lock, NULL) == 0) ok++;
    if (ok == 1 && pthread_cond_init(&w->wake, NULL) == 0) ok++;
    if (ok == 2 && pthread_create(&w->thread, NULL, lz_writer_main, w) == 0) ok++;
    if (ok < 3) {
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
    int full = w->n == w->depth; /* only this thread adds: room now is room below */
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
        s->tier_writes_pending += w->n + w->busy;
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
    pthread_join(w->thread, NULL);
    if (into) {
        lz_tier_writer_stats(w, into);
    }
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
#else
    (void)into;
#endif
    lz_writer_free(w);
}
