/* SPDX-License-Identifier: Apache-2.0 */
/* The tier's loader (tier_loader.h): a FIFO of loads, one thread that gets,
 * checks and enqueues each, and a list of those finished for the serving
 * thread to take. */
#include "attn/tuning.h"
#include "store/tier_loader.h"
#include "store/store_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(_WIN32)
#include <pthread.h>
#endif

struct lz_tier_loader {
    lazyattn_pool *pool;
    lazyattn_store *store;
    uint64_t model_id;
    cl_command_queue queue;
    lz_tier_staging *staging;
    int tiled; /* the pool keeps TILED pages: a load reorders */
    /* a built-in store's value (pageable) is copied into a pinned slot
       before its upload: LAZYATTN_TUNE's tier.pin_loads, by default on a
       device with memory of its own (no CL_DEVICE_HOST_UNIFIED_MEMORY) */
    int pin_values;
    int copy_threads; /* threads copying a value (LAZYATTN_TUNE's tier.load_threads) */
    cl_context context; /* the pool's */
    /* uploads by memory, the loader thread's (the log): from the host
       store's pinned memory, pinned staging, pageable memory */
    int64_t from_store, from_pinned, from_pageable;
#if !defined(_WIN32)
    pthread_t thread;
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t wake;  /* a load queued, or stop */
    pthread_cond_t ended; /* a load finished */
#endif
    lz_load_job *queued, **queued_tail; /* FIFO */
    lz_load_job *finished, **finished_tail;
    int n_queued, running, stop;
    uint64_t finished_up_to; /* every load numbered up to this one is finished */
};

void lz_load_job_free(lz_load_job *j) {
    if (!j) return;
    free(j->tokens);
    free(j->blocks);
    free(j);
}

/* Threads copying a value into its pinned slot by default where the
 * device has memory of its own (one elsewhere): on an H100 (8B shape,
 * issue 41's rows, one call) a 1 GiB budget with the host tier went from
 * TTFT 215.1 ms, 8.43 req/s with one to 154.4 ms, 9.52 req/s with four
 * (no tier: 214.4 ms, 5.92 req/s). */
#define LZ_LOAD_COPY_THREADS 4

#if !defined(_WIN32)
/* One thread's share of lz_copy_parallel. */
typedef struct lz_copy_part {
    uint8_t *dst;
    const uint8_t *src;
    size_t n;
} lz_copy_part;

static void *lz_copy_part_main(void *arg) {
    lz_copy_part *p = arg;
    memcpy(p->dst, p->src, p->n);
    return NULL;
}
#endif

void lz_copy_parallel(uint8_t *dst, const uint8_t *src, size_t n, int threads) {
#if !defined(_WIN32)
    enum { MAX_THREADS = 16 };
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > 1 && n >= ((size_t)16 << 20)) {
        size_t share = (n / (size_t)threads + 4095) & ~(size_t)4095;
        pthread_t t[MAX_THREADS];
        lz_copy_part part[MAX_THREADS];
        int made[MAX_THREADS] = {0};
        for (int i = 1; i < threads; i++) {
            size_t at = share * (size_t)i;
            size_t len = at < n ? (n - at < share ? n - at : share) : 0;
            part[i] = (lz_copy_part){dst + at, src + at, len};
            if (part[i].n == 0) continue;
            made[i] = pthread_create(&t[i], NULL, lz_copy_part_main, &part[i]) == 0;
            if (!made[i]) memcpy(part[i].dst, part[i].src, part[i].n);
        }
        memcpy(dst, src, share < n ? share : n);
        for (int i = 1; i < threads; i++)
            if (made[i]) pthread_join(t[i], NULL);
        return;
    }
#else
    (void)threads;
#endif
    memcpy(dst, src, n);
}

/* Runs job j: its fields out set (status OK: the upload enqueued). */
static void lz_loader_run(lz_tier_loader *l, lz_load_job *j) {
    double t0 = lz_seconds_now();
    lz_staging_pick pick = {l->staging, -1};
    lz_store_room room = {lz_staging_pick_take, &pick};
    lazyattn_doc_key key = {l->model_id, {0}};
    memcpy(key.digest, j->digest, sizeof key.digest);
    lazyattn_store_value v;
    memset(&v, 0, sizeof v);
    int st = lz_store_get_into(l->store, key, &room, &v);
    if (st == LAZYATTN_STATUS_NOT_FOUND) {
        lz_fail(st, "tier load: the %s store no longer holds document %016llx",
                lazyattn_store_name(l->store), (unsigned long long)j->doc_hash);
    } else if (st) { /* named here: an engine's store sets no error of the library's */
        char why[200];
        snprintf(why, sizeof why, "%s", lazyattn_last_error());
        lz_fail(st, "tier load: the %s store's get of document %016llx failed: %s (%s)",
                lazyattn_store_name(l->store), (unsigned long long)j->doc_hash,
                lazyattn_status_string(st), why);
    }
    uint8_t *copy = NULL;
    const uint8_t *data = v.data;
    int in_arena = 0;
    if (!st) {
        j->bytes = v.size;
        j->sealed = lz_store_value_sealed(l->store, &v);
        /* an engine's value: copied once (pinned where a slot is free), then
           checked. ROWS from a built-in store's pageable value (the host
           store's) on a discrete device: copied into a pinned slot where one
           is free, here on the loader thread, so that the upload is a DMA of
           its own and not the driver's staging copy beside the serving
           thread's enqueues (a TILED pool's reorder below writes into a slot
           anyway); else uploaded from where it is, as is a value in the host
           store's pinned memory (pinned_arena.h), a DMA with no copy */
        int engine = !lz_store_values_private(l->store);
        in_arena = lz_store_value_pinned(l->store, &v, l->context);
        int pin = !engine && l->pin_values && !l->tiled && !in_arena;
        if ((engine || pin) && pick.slot < 0) copy = lz_staging_take(l->staging, v.size, &pick.slot);
        if (engine && !copy) copy = malloc(v.size ? v.size : 1);
        if (copy) {
            if (v.size) lz_copy_parallel(copy, v.data, v.size, l->copy_threads);
            lazyattn_store_release(l->store, &v);
            memset(&v, 0, sizeof v);
            data = copy;
        } else if (engine) {
            lazyattn_store_release(l->store, &v);
            memset(&v, 0, sizeof v);
            data = NULL;
            st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY,
                         "tier load: no %zu bytes to copy the store's value into", j->bytes);
        }
    }
    lz_upload up = {0};
    if (!st) {
        up.queue = l->queue;
        up.gate = j->done; /* the gate, handed in submit (tests) */
        j->done = NULL;
        /* a TILED pool's reorder goes to a pinned slot where one is free */
        if (l->tiled && pick.slot < 0) {
            up.room = lz_staging_take(l->staging, j->bytes, &pick.slot);
            up.room_bytes = up.room ? j->bytes : 0;
        }
        st = lz_kv_load_bytes(l->pool, l->model_id, data, j->bytes, j->sealed, j->digest,
                              j->doc_hash, j->tokens, j->n_tokens, j->blocks, j->n_blocks, &up,
                              "tier load");
        if (up.gate) clReleaseEvent(up.gate);
    } else if (j->done) {
        clReleaseEvent(j->done); /* the gate */
        j->done = NULL;
    }
    j->status = st;
    if (st) {
        snprintf(j->reason, sizeof j->reason, "%s", lazyattn_last_error());
        if (v.data) lazyattn_store_release(l->store, &v);
        if (pick.slot < 0) free(copy);
        lz_staging_pick_give(&pick);
        return;
    }
    *(in_arena && !l->tiled ? &l->from_store
      : pick.slot >= 0       ? &l->from_pinned
                             : &l->from_pageable) += 1;
    j->done = up.done;
    j->keep = up.keep;
    j->value = v;
    j->copy = copy;
    j->slot = pick.slot;
    j->seconds = lz_seconds_now() - t0;
}

#if !defined(_WIN32)
/* Moves j to the finished list (the lock held). */
static void lz_loader_finish(lz_tier_loader *l, lz_load_job *j) {
    j->next = NULL;
    *l->finished_tail = j;
    l->finished_tail = &j->next;
    if (j->load_id > l->finished_up_to) l->finished_up_to = j->load_id;
    pthread_cond_broadcast(&l->ended);
}

static void *lz_loader_main(void *arg) {
    lz_tier_loader *l = arg;
    pthread_mutex_lock(&l->lock);
    for (;;) {
        while (!l->queued && !l->stop) pthread_cond_wait(&l->wake, &l->lock);
        if (l->stop) break; /* what is queued is dropped by stop */
        lz_load_job *j = l->queued;
        l->queued = j->next;
        if (!l->queued) l->queued_tail = &l->queued;
        l->n_queued--;
        l->running = 1;
        pthread_mutex_unlock(&l->lock);
        lz_loader_run(l, j);
        pthread_mutex_lock(&l->lock);
        l->running = 0;
        lz_loader_finish(l, j);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}
#endif

int lz_tier_loader_create(lazyattn_pool *pool, lazyattn_store *store, uint64_t model_id,
                          cl_command_queue queue, lz_tier_staging *staging,
                          lz_tier_loader **out) {
    *out = NULL;
#if defined(_WIN32)
    (void)pool, (void)store, (void)model_id, (void)queue, (void)staging;
    return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                   "lazyattn_cache_set_tier_options: no loader thread on Windows: load "
                   "PIPELINED instead");
#else
    lz_tier_loader *l = calloc(1, sizeof *l);
    if (!l) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "the tier's loader");
    l->pool = pool;
    l->context = lz_pool_context(pool)->context;
    l->store = store;
    l->model_id = model_id;
    l->queue = queue;
    l->staging = staging;
    lazyattn_pool_config pc;
    lazyattn_pool_get_config(pool, &pc);
    l->tiled = pc.kv_layout == LAZYATTN_KV_LAYOUT_TILED;
    const int own_memory = lz_pool_context(pool)->own_memory;
    lz_tune_override ov;
    lz_tune_from_env(lz_pool_context(pool), &ov);
    l->pin_values = ov.tier_pin_loads >= 0 ? ov.tier_pin_loads : own_memory;
    l->copy_threads = ov.tier_load_threads > 0 ? ov.tier_load_threads
                      : own_memory                 ? LZ_LOAD_COPY_THREADS
                                                   : 1;
    l->queued_tail = &l->queued;
    l->finished_tail = &l->finished;
    int made = 0;
    if (pthread_mutex_init(&l->lock, NULL) == 0) made++;
    if (made == 1 && pthread_cond_init(&l->wake, NULL) == 0) made++;
    if (made == 2 && pthread_cond_init(&l->ended, NULL) == 0) made++;
    if (made == 3 && pthread_create(&l->thread, NULL, lz_loader_main, l) == 0) made++;
    if (made < 4) {
        if (made > 2) pthread_cond_destroy(&l->ended);
        if (made > 1) pthread_cond_destroy(&l->wake);
        if (made > 0) pthread_mutex_destroy(&l->lock);
        free(l);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "the tier's loader thread");
    }
    *out = l;
    return LAZYATTN_STATUS_OK;
#endif
}

int lz_tier_loader_submit(lz_tier_loader *l, lz_entry *entry, uint64_t load_id,
                          const uint8_t digest[32], uint64_t doc_hash, const int32_t *tokens,
                          int n_tokens, const int32_t *blocks, int n_blocks, cl_event gate) {
    lz_load_job *j = calloc(1, sizeof *j);
    if (j) {
        j->tokens = malloc((size_t)n_tokens * sizeof *tokens);
        j->blocks = malloc((size_t)n_blocks * sizeof *blocks);
    }
    if (!j || !j->tokens || !j->blocks) {
        lz_load_job_free(j);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "tier load: the loader's job");
    }
    memcpy(j->tokens, tokens, (size_t)n_tokens * sizeof *tokens);
    memcpy(j->blocks, blocks, (size_t)n_blocks * sizeof *blocks);
    j->n_tokens = n_tokens;
    j->n_blocks = n_blocks;
    j->entry = entry;
    j->load_id = load_id;
    j->doc_hash = doc_hash;
    memcpy(j->digest, digest, sizeof j->digest);
    j->slot = -1;
    if (gate) clRetainEvent(gate);
    j->done = gate; /* carried to the run as its gate */
#if !defined(_WIN32)
    pthread_mutex_lock(&l->lock);
    *l->queued_tail = j;
    l->queued_tail = &j->next;
    l->n_queued++;
    pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->lock);
#else
    (void)l;
#endif
    return LAZYATTN_STATUS_OK;
}

lz_load_job *lz_tier_loader_take(lz_tier_loader *l, uint64_t wait_for) {
#if !defined(_WIN32)
    pthread_mutex_lock(&l->lock);
    while (wait_for > l->finished_up_to && !l->stop) pthread_cond_wait(&l->ended, &l->lock);
    lz_load_job *list = l->finished;
    l->finished = NULL;
    l->finished_tail = &l->finished;
    pthread_mutex_unlock(&l->lock);
    return list;
#else
    (void)l, (void)wait_for;
    return NULL;
#endif
}

int lz_tier_loader_pending(lz_tier_loader *l) {
#if !defined(_WIN32)
    pthread_mutex_lock(&l->lock);
    int n = l->n_queued + l->running;
    pthread_mutex_unlock(&l->lock);
    return n;
#else
    (void)l;
    return 0;
#endif
}

void lz_tier_loader_stop(lz_tier_loader *l) {
#if !defined(_WIN32)
    pthread_mutex_lock(&l->lock);
    if (l->stop) {
        pthread_mutex_unlock(&l->lock);
        return;
    }
    l->stop = 1;
    pthread_cond_broadcast(&l->wake);
    pthread_mutex_unlock(&l->lock);
    pthread_join(l->thread, NULL);
    pthread_mutex_lock(&l->lock);
    while (l->queued) { /* dropped: never got, nothing enqueued */
        lz_load_job *j = l->queued;
        l->queued = j->next;
        if (j->done) clReleaseEvent(j->done); /* the gate */
        j->done = NULL;
        j->status = LAZYATTN_STATUS_NOT_FOUND;
        snprintf(j->reason, sizeof j->reason,
                 "tier load: document %016llx dropped: the tier was detached before its load",
                 (unsigned long long)j->doc_hash);
        lz_loader_finish(l, j);
    }
    l->queued_tail = &l->queued;
    l->n_queued = 0;
    pthread_mutex_unlock(&l->lock);
#else
    (void)l;
#endif
}

void lz_tier_loader_destroy(lz_tier_loader *l) {
    if (!l) return;
    lz_tier_loader_stop(l);
    lz_log(lz_pool_context(l->pool), LAZYATTN_LOG_INFO,
           "tier loader: %lld uploads from the host store's pinned memory, %lld from pinned "
           "staging, %lld from pageable memory",
           (long long)l->from_store, (long long)l->from_pinned, (long long)l->from_pageable);
    for (lz_load_job *j = lz_tier_loader_take(l, 0), *n; j; j = n) { /* not taken: none */
        n = j->next;
        lz_load_job_free(j);
    }
#if !defined(_WIN32)
    pthread_cond_destroy(&l->ended);
    pthread_cond_destroy(&l->wake);
    pthread_mutex_destroy(&l->lock);
#endif
    free(l);
}
