/* SPDX-License-Identifier: Apache-2.0 */
/* The tier's background writer (lib/store/tier_writer.c) and the cost rule
 * (lazyattn_cache_set_tier_recompute_rate), on the default device (PoCL in
 * CI).
 *
 * Ordering: the context's queue is held shut by a user event ("the gate")
 * while a document's K/V are written behind it and the request commits;
 * a thread opens the gate 200 ms later. The store must then hold exactly
 * the export of the same document made synchronously by another engine
 * (the reference): a writer that read before the gate opened would store
 * the blocks' old content. With the document evicted and its blocks
 * rewritten by a later request while the write waits, the store must still
 * hold the document as committed. A store whose put is held keeps the
 * writer busy: a full queue drops (counted) without blocking the commit;
 * detaching the tier or destroying the cache with writes pending ends the
 * writer (counted, no leak under the sanitizers). */
#include "doc_engine.h"
#include "store/store_internal.h" /* lz_store_has_arena, lz_store_value_pinned */

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GATE_MS 200
#define WAIT_MS 5000 /* bound on any wait for the writer */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits (bounded) until the writer has nothing pending. */
static lazyattn_cache_stats wait_idle(const engine *e) {
    double t0 = now_ms();
    lazyattn_cache_stats s = stats_of(e);
    while (s.tier_writes_pending > 0 && now_ms() - t0 < WAIT_MS) {
        sleep_ms(2);
        s = stats_of(e);
    }
    assert_int_equal(s.tier_writes_pending, 0);
    return s;
}

/* The export of document id made synchronously by an engine of its own;
 * *size bytes, malloc'ed. */
static uint8_t *reference_export(lazyattn_context *ctx, int id, size_t *size) {
    engine x;
    engine_open(&x, ctx, 16, MODEL);
    float *out = malloc(sizeof(float) * OUT_N);
    assert_non_null(out);
    lazyattn_segment_action act[1];
    int ids[1] = {id};
    run_request(&x, 1, ids, out, act);
    free(out);
    lt_assert_status(lazyattn_cache_export_size(x.cache, hash_of(id), size), LAZYATTN_STATUS_OK);
    uint8_t *blob = malloc(*size);
    assert_non_null(blob);
    size_t written = 0;
    lt_assert_status(lazyattn_cache_export(x.cache, hash_of(id), blob, *size, &written),
                     LAZYATTN_STATUS_OK);
    assert_int_equal(written, *size);
    engine_close(&x);
    return blob;
}

/* Document id as a request of its own: its K/V written (every layer) on the
 * context's queue, enqueued only (never waited for), then committed. The
 * blocks of its plan in blocks[*n_blocks] when blocks is not NULL. */
static void write_doc(engine *e, int id, int32_t *blocks, int *n_blocks) {
    int32_t tok[64];
    doc_tokens(id, tok);
    const int32_t *docs[1] = {tok};
    int32_t lens[1] = {doc_len[id]};
    lazyattn_request_desc d = {0, NULL, 1, docs, lens, 0, NULL, 0};
    lazyattn_request *req = NULL;
    lt_assert_status(lazyattn_request_create(e->cache, &d, &req), LAZYATTN_STATUS_OK);
    lazyattn_plan p;
    lt_assert_status(lazyattn_request_get_plan(req, &p), LAZYATTN_STATUS_OK);
    assert_int_equal(p.n_prefill, doc_len[id]);
    const int n = p.n_positions;
    float *k = malloc(sizeof(float) * (size_t)n * ROW);
    float *v = malloc(sizeof(float) * (size_t)n * ROW);
    float *pk = malloc(sizeof(float) * (size_t)p.n_prefill * ROW);
    float *pv = malloc(sizeof(float) * (size_t)p.n_prefill * ROW);
    assert_true(k && v && pk && pv);
    for (int l = 0; l < L; l++) {
        doc_kv(id, l, k, v);
        for (int i = 0; i < p.n_prefill; i++) {
            memcpy(pk + (size_t)i * ROW, k + (size_t)p.prefill_pos[i] * ROW, sizeof(float) * ROW);
            memcpy(pv + (size_t)i * ROW, v + (size_t)p.prefill_pos[i] * ROW, sizeof(float) * ROW);
        }
        cl_mem km = lt_buffer(e->ctx, pk, sizeof(float) * (size_t)p.n_prefill * ROW);
        cl_mem vm = lt_buffer(e->ctx, pv, sizeof(float) * (size_t)p.n_prefill * ROW);
        cl_mem sm = lt_buffer(e->ctx, p.prefill_slots, sizeof(int32_t) * (size_t)p.n_prefill);
        cl_mem stm = lt_buffer(e->ctx, p.prefill_stored_pos, sizeof(int32_t) * (size_t)p.n_prefill);
        lt_assert_status(lazyattn_write_kv(e->attn, e->pool, l, p.n_prefill, km, vm, sm, stm, NULL,
                                           NULL),
                         LAZYATTN_STATUS_OK);
        clReleaseMemObject(km); /* OpenCL keeps them until the kernel ran */
        clReleaseMemObject(vm);
        clReleaseMemObject(sm);
        clReleaseMemObject(stm);
    }
    if (blocks) {
        *n_blocks = 0;
        for (int i = 0; i < p.n_entries; i++) {
            int32_t b, delta, len;
            lt_assert_status(lazyattn_entry_unpack(p.table[i], &b, &delta, &len),
                             LAZYATTN_STATUS_OK);
            blocks[(*n_blocks)++] = b;
        }
    }
    free(k);
    free(v);
    free(pk);
    free(pv);
    lt_assert_status(lazyattn_request_commit(req), LAZYATTN_STATUS_OK);
    lazyattn_request_destroy(req);
}

/* The store's value for document id holds what want [size], the reference
 * export, holds: the header but its checksums, the tokens, every K/V row of
 * the document (the last block's slots past it are the pool's leftovers,
 * in neither export the same); and it imports (its checksums hold). */
static void assert_stored(lazyattn_context *ctx, lazyattn_store *store, int id,
                          const uint8_t *want, size_t size) {
    lazyattn_store_value v;
    lt_assert_status(lazyattn_store_get(store, key_of(id), &v), LAZYATTN_STATUS_OK);
    assert_int_equal(v.size, size);
    const uint8_t *got = v.data;
    assert_memory_equal(got, want, 80); /* up to the payload checksum */
    assert_memory_equal(got + 88, want + 88, 32); /* the digest */
    const int n = doc_len[id], n_blocks = (n + B - 1) / B;
    const size_t tokens = (size_t)LAZYATTN_KV_HEADER_BYTES, rows = sizeof(float) * D;
    assert_memory_equal(got + tokens, want + tokens, 4 * (size_t)n);
    size_t at = tokens + 4 * (size_t)n, mismatches = 0;
    for (int l = 0; l < L; l++)
        for (int which = 0; which < 2; which++)
            for (int b = 0; b < n_blocks; b++)
                for (int h = 0; h < NKV; h++)
                    for (int t = 0; t < B; t++, at += rows)
                        if (b * B + t < n && memcmp(got + at, want + at, rows) != 0) mismatches++;
    assert_int_equal(at, size);
    if (mismatches)
        print_error("document %d: %zu K/V rows in the store differ from the reference\n", id,
                    mismatches);
    assert_int_equal(mismatches, 0);
    engine x;
    engine_open(&x, ctx, 16, MODEL);
    uint64_t hash = 0;
    lt_assert_status(lazyattn_cache_import(x.cache, got, size, &hash), LAZYATTN_STATUS_OK);
    assert_int_equal(hash, hash_of(id));
    engine_close(&x);
    lazyattn_store_release(store, &v);
}

static void set_writer(engine *e, lazyattn_store *store, lazyattn_tier_mode mode, int depth) {
    lazyattn_tier_options o;
    lazyattn_tier_options_init(&o);
    assert_int_equal(o.write_queue, 0);
    o.write_queue = depth;
    lt_assert_status(lazyattn_cache_set_tier_options(e->cache, store, mode, &o),
                     LAZYATTN_STATUS_OK);
}

/* ---- the gate on the context's queue ---- */

typedef struct gate {
    cl_event event;
    pthread_t opener;
} gate;

static void *gate_open_later(void *arg) {
    sleep_ms(GATE_MS);
    clSetUserEventStatus(((gate *)arg)->event, CL_COMPLETE);
    return NULL;
}

static void gate_shut(engine *e, gate *g) {
    cl_int err;
    g->event = clCreateUserEvent(lazyattn_context_cl_context(e->ctx), &err);
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(clEnqueueBarrierWithWaitList(lazyattn_context_queue(e->ctx), 1, &g->event,
                                                  NULL),
                     CL_SUCCESS);
    assert_int_equal(pthread_create(&g->opener, NULL, gate_open_later, g), 0);
}

static void gate_join(gate *g) {
    pthread_join(g->opener, NULL);
    clReleaseEvent(g->event);
}

/* ---- the tests ---- */

/* The writer reads a committed document only after the commands that wrote
 * it, which wait behind the gate; the commit returns before they ran. */
static void test_write_after_the_writes(void **state) {
    size_t size = 0;
    uint8_t *want = reference_export(*state, 0, &size);
    lazyattn_store *store = NULL;
    lt_assert_status(lazyattn_store_create_host(1u << 24, &store), LAZYATTN_STATUS_OK);
    engine e;
    engine_open(&e, *state, 16, MODEL);
    set_writer(&e, store, LAZYATTN_TIER_WRITE_THROUGH, 4);
    gate g;
    gate_shut(&e, &g);
    double t0 = now_ms();
    write_doc(&e, 0, NULL, NULL);
    double commit_ms = now_ms() - t0;
    lazyattn_cache_stats s = stats_of(&e);
    /* the gate is shut (GATE_MS): nothing can have been written yet */
    assert_true(commit_ms < GATE_MS / 2);
    assert_int_equal(s.tier_writes_queued, 1);
    assert_int_equal(s.tier_writes_pending, 1);
    assert_int_equal(s.tier_writes, 0);
    gate_join(&g);
    s = wait_idle(&e);
    assert_int_equal(s.tier_writes, 1);
    assert_int_equal(s.tier_write_bytes, size);
    assert_int_equal(s.tier_writes_dropped + s.tier_write_errors, 0);
    assert_stored(*state, store, 0, want, size);
    lt_assert_status(lazyattn_cache_reset_stats(e.cache), LAZYATTN_STATUS_OK);
    s = stats_of(&e);
    assert_int_equal(s.tier_writes + s.tier_writes_queued + s.tier_write_bytes, 0);
    engine_close(&e);
    lazyattn_store_destroy(store);
    free(want);
}

/* Document 0 (three blocks, the whole pool) committed behind the gate,
 * evicted, and its blocks rewritten by document 1 while the write waits:
 * the store holds document 0 as committed, and document 1 as its own. */
static void test_reused_blocks_keep_the_written_content(void **state) {
    size_t size0 = 0, size1 = 0;
    uint8_t *want0 = reference_export(*state, 0, &size0);
    uint8_t *want1 = reference_export(*state, 1, &size1);
    lazyattn_store *store = NULL;
    lt_assert_status(lazyattn_store_create_host(1u << 24, &store), LAZYATTN_STATUS_OK);
    engine e;
    engine_open(&e, *state, 3, MODEL);
    set_writer(&e, store, LAZYATTN_TIER_WRITE_THROUGH, 4);
    gate g;
    gate_shut(&e, &g);
    int32_t blocks0[8];
    int n0 = 0;
    write_doc(&e, 0, blocks0, &n0);
    assert_int_equal(n0, 3);
    lt_assert_status(lazyattn_cache_trim(e.cache, 0), LAZYATTN_STATUS_OK); /* evicted, freed */
    for (int i = 0; i < n0; i++) assert_false(lazyattn_pool_is_allocated(e.pool, blocks0[i]));
    int32_t blocks1[8];
    int n1 = 0;
    write_doc(&e, 1, blocks1, &n1); /* the pool has only document 0's blocks */
    assert_int_equal(n1, 1);
    int reused = 0;
    for (int i = 0; i < n0; i++) reused |= blocks0[i] == blocks1[0];
    assert_true(reused);
    gate_join(&g);
    lazyattn_cache_stats s = wait_idle(&e);
    assert_int_equal(s.tier_writes, 2);
    assert_stored(*state, store, 0, want0, size0);
    assert_stored(*state, store, 1, want1, size1);
    lt_assert_status(lazyattn_cache_validate(e.cache), LAZYATTN_STATUS_OK);
    engine_close(&e);
    lazyattn_store_destroy(store);
    free(want0);
    free(want1);
}

/* ---- a store whose put waits until the test lets it go ---- */

typedef struct held_store {
    lazyattn_store *inner; /* a host store */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int in_put, let_go;
    int puts;
} held_store;

static int held_get(void *impl, lazyattn_doc_key key, lazyattn_store_value *v) {
    return lazyattn_store_get(((held_store *)impl)->inner, key, v);
}
static void held_release(void *impl, lazyattn_store_value *v) {
    lazyattn_store_release(((held_store *)impl)->inner, v);
}
static int held_put(void *impl, lazyattn_doc_key key, const void *data, size_t size) {
    held_store *h = impl;
    pthread_mutex_lock(&h->lock);
    h->in_put = 1;
    pthread_cond_broadcast(&h->cond);
    while (!h->let_go) pthread_cond_wait(&h->cond, &h->lock);
    h->puts++;
    pthread_mutex_unlock(&h->lock);
    return lazyattn_store_put(h->inner, key, data, size);
}
static int held_exists(void *impl, lazyattn_doc_key key, int *there) {
    return lazyattn_store_exists(((held_store *)impl)->inner, key, there);
}
static int held_remove(void *impl, lazyattn_doc_key key) {
    return lazyattn_store_delete(((held_store *)impl)->inner, key);
}

static lazyattn_store *held_open(held_store *h) {
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    lt_assert_status(lazyattn_store_create_host(1u << 24, &h->inner), LAZYATTN_STATUS_OK);
    static const lazyattn_store_ops ops = {"held",      held_get,    held_release, held_put,
                                           held_exists, held_remove, NULL};
    lazyattn_store *s = NULL;
    lt_assert_status(lazyattn_store_create(&ops, h, &s), LAZYATTN_STATUS_OK);
    return s;
}

/* Waits (bounded) until the writer is inside the store's put. */
static void held_wait_in_put(held_store *h) {
    double t0 = now_ms();
    pthread_mutex_lock(&h->lock);
    while (!h->in_put && now_ms() - t0 < WAIT_MS) {
        pthread_mutex_unlock(&h->lock);
        sleep_ms(2);
        pthread_mutex_lock(&h->lock);
    }
    int in_put = h->in_put;
    pthread_mutex_unlock(&h->lock);
    assert_true(in_put);
}

static void *held_let_go_later(void *arg) {
    held_store *h = arg;
    sleep_ms(GATE_MS);
    pthread_mutex_lock(&h->lock);
    h->let_go = 1;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

static void held_close(held_store *h, lazyattn_store *s) {
    lazyattn_store_destroy(s);
    lazyattn_store_destroy(h->inner);
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->lock);
}

/* Queue of one: document 0 in the store's put (held), document 1 queued,
 * document 2 dropped, counted, with the commit not waiting. */
static void test_full_queue_drops(void **state) {
    held_store h;
    lazyattn_store *store = held_open(&h);
    engine e;
    engine_open(&e, *state, 16, MODEL);
    set_writer(&e, store, LAZYATTN_TIER_WRITE_THROUGH, 1);
    write_doc(&e, 0, NULL, NULL);
    held_wait_in_put(&h);
    write_doc(&e, 1, NULL, NULL);
    double t0 = now_ms();
    write_doc(&e, 2, NULL, NULL); /* the put is held for good: only a drop returns */
    double commit_ms = now_ms() - t0;
    lazyattn_cache_stats s = stats_of(&e);
    assert_int_equal(s.tier_writes_queued, 2);
    assert_int_equal(s.tier_writes_dropped, 1);
    assert_int_equal(s.tier_writes_pending, 2);
    assert_int_equal(s.tier_writes, 0);
    assert_true(commit_ms < 1000);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, held_let_go_later, &h), 0);
    pthread_join(t, NULL);
    s = wait_idle(&e);
    assert_int_equal(s.tier_writes, 2);
    assert_int_equal(h.puts, 2);
    int there = 0;
    lt_assert_status(lazyattn_store_exists(h.inner, key_of(2), &there), LAZYATTN_STATUS_OK);
    assert_false(there);
    lt_assert_status(lazyattn_store_exists(h.inner, key_of(1), &there), LAZYATTN_STATUS_OK);
    assert_true(there);
    engine_close(&e);
    held_close(&h, store);
}

/* ev's execution status (CL_COMPLETE, or above while pending) */
static cl_int event_status(cl_event ev) {
    cl_int status = CL_QUEUED;
    assert_int_equal(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                                    NULL),
                     CL_SUCCESS);
    return status;
}

/* A slow store holds up puts, not read-backs: with document 1's put held,
 * document 3 is still read back, so once it is evicted its blocks can be
 * rewritten (by document 0, which needs the whole pool of 3) while the put
 * waits; then both reach the store as committed. */
static void test_slow_put_does_not_hold_reuse(void **state) {
    size_t size3 = 0;
    uint8_t *want3 = reference_export(*state, 3, &size3);
    held_store h;
    lazyattn_store *store = held_open(&h);
    engine e;
    engine_open(&e, *state, 3, MODEL);
    set_writer(&e, store, LAZYATTN_TIER_WRITE_THROUGH, 4);
    write_doc(&e, 1, NULL, NULL); /* one block */
    held_wait_in_put(&h);
    int32_t blocks3[8], blocks0[8];
    int n3 = 0, n0 = 0;
    write_doc(&e, 3, blocks3, &n3); /* two blocks: the pool is full */
    assert_int_equal(n3, 2);
    lt_assert_status(lazyattn_cache_trim(e.cache, 0), LAZYATTN_STATUS_OK); /* both freed */
    write_doc(&e, 0, blocks0, &n0); /* three blocks: document 3's among them */
    assert_int_equal(n0, 3);
    cl_event written = NULL;
    assert_int_equal(clEnqueueMarkerWithWaitList(lazyattn_context_queue(e.ctx), 0, NULL, &written),
                     CL_SUCCESS);
    clFlush(lazyattn_context_queue(e.ctx));
    double t0 = now_ms();
    while (event_status(written) > CL_COMPLETE && now_ms() - t0 < WAIT_MS) sleep_ms(2);
    int ran = event_status(written) == CL_COMPLETE;
    pthread_mutex_lock(&h.lock);
    int puts = h.puts;
    h.let_go = 1; /* now (before any assert can leave the put held) */
    pthread_cond_broadcast(&h.cond);
    pthread_mutex_unlock(&h.lock);
    clWaitForEvents(1, &written);
    clReleaseEvent(written);
    assert_true(ran);         /* document 0's writes ran ... */
    assert_int_equal(puts, 0); /* ... while document 1's put was held */
    lazyattn_cache_stats s = wait_idle(&e);
    assert_int_equal(s.tier_writes, 3);
    assert_int_equal(s.tier_writes_dropped + s.tier_write_errors, 0);
    assert_stored(*state, h.inner, 3, want3, size3);
    engine_close(&e);
    held_close(&h, store);
    free(want3);
}

/* LAZYATTN_TUNE's tier.pin_writes: with every slot of the writer's pinned
 * staging (4) held by a put that waits, a fifth read-back is dropped,
 * counted, and never reaches the store; with tier.pin_writes=0 it goes to
 * pageable memory and is written. */
/* LAZYATTN_TUNE set to text for what the next tier attach reads, then put
 * back as it was (a run of the whole file may set it: meson.build). */
typedef struct tune_env {
    char *was;
} tune_env;
static void tune_set(tune_env *t, const char *text) {
    const char *was = getenv("LAZYATTN_TUNE");
    t->was = was ? strdup(was) : NULL;
    setenv("LAZYATTN_TUNE", text, 1);
}
static void tune_restore(tune_env *t) {
    if (t->was)
        setenv("LAZYATTN_TUNE", t->was, 1);
    else
        unsetenv("LAZYATTN_TUNE");
    free(t->was);
    t->was = NULL;
}

static void test_pin_writes_drops_without_a_pinned_slot(void **state) {
    for (int pinned_only = 0; pinned_only < 2; pinned_only++) {
        tune_env env;
        tune_set(&env, pinned_only ? "tier.pin_writes=1" : "tier.pin_writes=0");
        held_store h;
        lazyattn_store *store = held_open(&h);
        engine e;
        engine_open(&e, *state, 16, MODEL);
        set_writer(&e, store, LAZYATTN_TIER_WRITE_THROUGH, 8);
        tune_restore(&env); /* read when the writer was made */
        write_doc(&e, 0, NULL, NULL);
        held_wait_in_put(&h); /* document 0's slot held from here */
        for (int id = 1; id <= 4; id++) write_doc(&e, id, NULL, NULL);
        double t0 = now_ms();
        lazyattn_cache_stats s = stats_of(&e);
        while (pinned_only && s.tier_writes_dropped == 0 && now_ms() - t0 < WAIT_MS) {
            sleep_ms(2);
            s = stats_of(&e);
        }
        pthread_t t; /* the put let go before any assert can leave it held for good */
        assert_int_equal(pthread_create(&t, NULL, held_let_go_later, &h), 0);
        assert_int_equal(s.tier_writes_queued, 5);
        assert_int_equal(s.tier_writes_dropped, pinned_only);
        pthread_join(t, NULL);
        s = wait_idle(&e);
        assert_int_equal(s.tier_writes, 5 - pinned_only);
        assert_int_equal(s.tier_write_errors, 0);
        for (int id = 0; id <= 4; id++) {
            int there = 0;
            lt_assert_status(lazyattn_store_exists(h.inner, key_of(id), &there),
                             LAZYATTN_STATUS_OK);
            assert_int_equal(there, !(pinned_only && id == 4));
        }
        engine_close(&e);
        held_close(&h, store);
    }
}

/* LAZYATTN_TUNE's tier.pin_store: a host store attached as a tier keeps its
 * values in pinned memory made at the attach, and the writer reads
 * documents back straight into it (reserved, put without a copy): the
 * store holds each as committed (the reference export), sealed, in pinned
 * memory of the context; a cache that loads them in the background
 * (uploads from that memory) runs a request over them right (run_request's
 * float64 check), every document a tier hit. tier.pin_store=0: no arena,
 * the same store contents. */
static void test_writes_into_the_pinned_store(void **state) {
    lazyattn_context *ctx = *state;
    const int ids[3] = {0, 1, 2};
    uint8_t *want[3];
    size_t size[3];
    for (int i = 0; i < 3; i++) want[i] = reference_export(ctx, ids[i], &size[i]);
    for (int pin = 1; pin >= 0; pin--) {
        lazyattn_store *store = NULL;
        lt_assert_status(lazyattn_store_create_host(1u << 24, &store), LAZYATTN_STATUS_OK);
        engine e;
        engine_open(&e, ctx, 16, MODEL);
        tune_env env;
        tune_set(&env, pin ? "tier.pin_store=1" : "tier.pin_store=0");
        set_writer(&e, store, LAZYATTN_TIER_WRITE_THROUGH, 4);
        tune_restore(&env);
        cl_context cl = lazyattn_context_cl_context(ctx);
        assert_int_equal(lz_store_has_arena(store, cl), pin);
        for (int i = 0; i < 3; i++) write_doc(&e, ids[i], NULL, NULL);
        lazyattn_cache_stats s = wait_idle(&e);
        assert_int_equal(s.tier_writes, 3);
        assert_int_equal(s.tier_writes_dropped + s.tier_write_errors, 0);
        for (int i = 0; i < 3; i++) {
            assert_stored(ctx, store, ids[i], want[i], size[i]);
            lazyattn_store_value v;
            lt_assert_status(lazyattn_store_get(store, key_of(ids[i]), &v), LAZYATTN_STATUS_OK);
            assert_int_equal(lz_store_value_pinned(store, &v, cl), pin);
            assert_true(lz_store_value_sealed(store, &v));
            lazyattn_store_release(store, &v);
        }
        engine r;
        engine_open(&r, ctx, 16, MODEL);
        lazyattn_tier_options o;
        lazyattn_tier_options_init(&o);
        o.load = LAZYATTN_TIER_LOAD_BACKGROUND;
        lt_assert_status(lazyattn_cache_set_tier_options(r.cache, store, LAZYATTN_TIER_READ_ONLY,
                                                         &o),
                         LAZYATTN_STATUS_OK);
        float *out = malloc(sizeof(float) * OUT_N);
        assert_non_null(out);
        lazyattn_segment_action act[3];
        run_request(&r, 3, ids, out, act);
        for (int i = 0; i < 3; i++) assert_int_equal(act[i], LAZYATTN_ACTION_REUSE);
        s = stats_of(&r);
        assert_int_equal(s.tier_hits, 3);
        assert_int_equal(s.tier_loads_background, 3);
        assert_int_equal(s.tier_load_failures, 0);
        free(out);
        engine_close(&r);
        engine_close(&e);
        lazyattn_store_destroy(store);
    }
    for (int i = 0; i < 3; i++) free(want[i]);
}

/* Writes pending when the tier is detached: the one in progress finishes,
 * the queued one is dropped (counted in the cache's statistics); then the
 * same with the cache destroyed (the sanitizers see no leak). */
static void test_detach_and_destroy_with_writes_pending(void **state) {
    for (int destroy = 0; destroy < 2; destroy++) {
        held_store h;
        lazyattn_store *store = held_open(&h);
        engine e;
        engine_open(&e, *state, 16, MODEL);
        set_writer(&e, store, LAZYATTN_TIER_WRITE_THROUGH, 4);
        write_doc(&e, 0, NULL, NULL);
        held_wait_in_put(&h);
        write_doc(&e, 1, NULL, NULL);
        write_doc(&e, 3, NULL, NULL);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, held_let_go_later, &h), 0);
        if (destroy) {
            lazyattn_cache_destroy(e.cache); /* waits for the put in progress */
            e.cache = NULL;
        } else {
            lt_assert_status(lazyattn_cache_set_tier(e.cache, NULL, LAZYATTN_TIER_READ_ONLY),
                             LAZYATTN_STATUS_OK);
            lazyattn_cache_stats s = stats_of(&e);
            assert_int_equal(s.tier_writes_queued, 3);
            assert_int_equal(s.tier_writes, 1);
            assert_int_equal(s.tier_writes_dropped, 2);
            assert_int_equal(s.tier_writes_pending, 0);
        }
        pthread_join(t, NULL);
        assert_int_equal(h.puts, 1);
        int there = 0;
        lt_assert_status(lazyattn_store_exists(h.inner, key_of(0), &there), LAZYATTN_STATUS_OK);
        assert_true(there);
        engine_close(&e);
        held_close(&h, store);
    }
}

/* Bad options and rates: a clear status, nothing attached or changed. */
static void test_bad_options_refused(void **state) {
    lazyattn_store *store = NULL;
    lt_assert_status(lazyattn_store_create_host(1u << 20, &store), LAZYATTN_STATUS_OK);
    engine e;
    engine_open(&e, *state, 16, MODEL);
    lazyattn_tier_options o;
    lazyattn_tier_options_init(&o);
    o.write_queue = -1;
    lt_assert_status(lazyattn_cache_set_tier_options(e.cache, store, LAZYATTN_TIER_WRITE_BACK, &o),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "write_queue"));
    o.write_queue = LAZYATTN_MAX_TIER_WRITE_QUEUE + 1;
    lt_assert_status(lazyattn_cache_set_tier_options(e.cache, store, LAZYATTN_TIER_WRITE_BACK, &o),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_set_tier_options(NULL, store, LAZYATTN_TIER_WRITE_BACK, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_string_equal(lazyattn_last_error(), "lazyattn_cache_set_tier_options: cache is NULL");
    lt_assert_status(lazyattn_cache_set_tier_recompute_rate(e.cache, 1000.0),
                     LAZYATTN_STATUS_INVALID_ARGUMENT); /* no tier */
    assert_non_null(strstr(lazyattn_last_error(), "no tier"));
    lt_assert_status(
        lazyattn_cache_set_tier_options(e.cache, store, LAZYATTN_TIER_WRITE_BACK, NULL),
        LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier_recompute_rate(NULL, 1.0),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_set_tier_recompute_rate(e.cache, -1.0),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_set_tier_recompute_rate(e.cache, NAN),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_set_tier_recompute_rate(e.cache, INFINITY),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_set_tier_recompute_rate(e.cache, 0.0), LAZYATTN_STATUS_OK);
    engine_close(&e);
    lazyattn_store_destroy(store);
}

/* The cost rule: documents 0 and 1 in the store. A prefill rate no load can
 * beat: the first load (nothing measured yet) goes to the tier, the second
 * document is recomputed without a lookup; a rate any load beats: loaded. */
static void test_cost_rule(void **state) {
    lazyattn_store *store = NULL;
    lt_assert_status(lazyattn_store_create_host(1u << 24, &store), LAZYATTN_STATUS_OK);
    for (int id = 0; id < 2; id++) {
        size_t size = 0;
        uint8_t *blob = reference_export(*state, id, &size);
        lt_assert_status(lazyattn_store_put(store, key_of(id), blob, size), LAZYATTN_STATUS_OK);
        free(blob);
    }
    engine e;
    engine_open(&e, *state, 16, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(e.cache, store, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier_recompute_rate(e.cache, 1e30), LAZYATTN_STATUS_OK);
    float *out = malloc(sizeof(float) * OUT_N);
    assert_non_null(out);
    lazyattn_segment_action act[1];
    int ids0[1] = {0}, ids1[1] = {1};
    run_request(&e, 1, ids0, out, act); /* checked against the reference */
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    run_request(&e, 1, ids1, out, act);
    assert_int_equal(act[0], LAZYATTN_ACTION_PREFILL);
    lazyattn_cache_stats s = stats_of(&e);
    assert_int_equal(s.tier_hits, 1);
    assert_int_equal(s.tier_lookups, 1);
    assert_int_equal(s.tier_skipped_by_cost, 1);
    assert_int_equal(s.misses, 1);
    /* any load beats this rate: document 1, evicted, comes from the tier */
    lt_assert_status(lazyattn_cache_trim(e.cache, 0), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier_recompute_rate(e.cache, 1e-30), LAZYATTN_STATUS_OK);
    run_request(&e, 1, ids1, out, act);
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    s = stats_of(&e);
    assert_int_equal(s.tier_hits, 2);
    assert_int_equal(s.tier_skipped_by_cost, 1);
    free(out);
    engine_close(&e);
    lazyattn_store_destroy(store);
}

/* The cost rule skips writes too: once a load was measured slower than a
 * recompute (a rate no load beats), a write-through tier neither loads nor
 * writes the documents computed next, counting both, and the store holds
 * none of them; with a rate every load beats, a document computed again
 * (its load found nothing) is written: the store holds it as computed
 * (the reference export). */
static void test_cost_rule_skips_writes(void **state) {
    lazyattn_store *store = NULL;
    lt_assert_status(lazyattn_store_create_host(1u << 24, &store), LAZYATTN_STATUS_OK);
    size_t size0 = 0, size3 = 0;
    uint8_t *blob = reference_export(*state, 0, &size0);
    lt_assert_status(lazyattn_store_put(store, key_of(0), blob, size0), LAZYATTN_STATUS_OK);
    free(blob);
    uint8_t *want3 = reference_export(*state, 3, &size3);
    engine e;
    engine_open(&e, *state, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(e.cache, store, LAZYATTN_TIER_WRITE_THROUGH),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier_recompute_rate(e.cache, 1e30), LAZYATTN_STATUS_OK);
    float *out = malloc(sizeof(float) * OUT_N);
    assert_non_null(out);
    lazyattn_segment_action act[1];
    int id = 0;
    run_request(&e, 1, &id, out, act); /* nothing measured yet: loaded */
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    for (id = 1; id <= 5; id++) {
        run_request(&e, 1, &id, out, act);
        assert_int_equal(act[0], LAZYATTN_ACTION_PREFILL);
    }
    lazyattn_cache_stats s = stats_of(&e);
    assert_int_equal(s.tier_skipped_by_cost, 5);
    assert_int_equal(s.tier_writes_skipped_by_cost, 5);
    assert_int_equal(s.tier_writes, 0);
    for (int k = 1; k <= 5; k++) {
        int there = 1;
        lt_assert_status(lazyattn_store_exists(store, key_of(k), &there), LAZYATTN_STATUS_OK);
        assert_false(there);
    }
    lt_assert_status(lazyattn_cache_trim(e.cache, 0), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier_recompute_rate(e.cache, 1e-30), LAZYATTN_STATUS_OK);
    id = 3;
    run_request(&e, 1, &id, out, act); /* looked up, not found, computed, written */
    assert_int_equal(act[0], LAZYATTN_ACTION_PREFILL);
    s = stats_of(&e);
    assert_int_equal(s.tier_writes_skipped_by_cost, 5);
    assert_int_equal(s.tier_writes, 1);
    assert_stored(*state, store, 3, want3, size3);
    free(out);
    free(want3);
    engine_close(&e);
    lazyattn_store_destroy(store);
}

/* lazyattn_cache_set_tier_load_rate: with a bandwidth no load beats given
 * before any load was measured, a write-through tier neither loads document
 * 0 (in the store) nor writes document 1 (not in it); with one every load
 * beats, document 0 (evicted) is loaded. Bad rates and a cache without a
 * tier are refused. */
static void test_assumed_load_rate(void **state) {
    lazyattn_store *store = NULL;
    lt_assert_status(lazyattn_store_create_host(1u << 24, &store), LAZYATTN_STATUS_OK);
    size_t size0 = 0;
    uint8_t *blob = reference_export(*state, 0, &size0);
    lt_assert_status(lazyattn_store_put(store, key_of(0), blob, size0), LAZYATTN_STATUS_OK);
    free(blob);
    engine e;
    engine_open(&e, *state, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier_load_rate(e.cache, 1.0),
                     LAZYATTN_STATUS_INVALID_ARGUMENT); /* no tier yet */
    lt_assert_status(lazyattn_cache_set_tier(e.cache, store, LAZYATTN_TIER_WRITE_THROUGH),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier_load_rate(NULL, 1.0),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    const double bad[3] = {-1.0, NAN, INFINITY};
    for (int i = 0; i < 3; i++)
        lt_assert_status(lazyattn_cache_set_tier_load_rate(e.cache, bad[i]),
                         LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_set_tier_recompute_rate(e.cache, 1e9), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier_load_rate(e.cache, 1.0), LAZYATTN_STATUS_OK);
    float *out = malloc(sizeof(float) * OUT_N);
    assert_non_null(out);
    lazyattn_segment_action act[1];
    for (int id = 0; id < 2; id++) {
        run_request(&e, 1, &id, out, act);
        assert_int_equal(act[0], LAZYATTN_ACTION_PREFILL);
    }
    lazyattn_cache_stats s = stats_of(&e);
    assert_int_equal(s.tier_lookups, 0);
    assert_int_equal(s.tier_skipped_by_cost, 2);
    assert_int_equal(s.tier_writes_skipped_by_cost, 2);
    assert_int_equal(s.tier_writes, 0);
    int there = 1;
    lt_assert_status(lazyattn_store_exists(store, key_of(1), &there), LAZYATTN_STATUS_OK);
    assert_false(there);
    lt_assert_status(lazyattn_cache_trim(e.cache, 0), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier_load_rate(e.cache, 1e300), LAZYATTN_STATUS_OK);
    int id = 0;
    run_request(&e, 1, &id, out, act); /* checked against the reference */
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    s = stats_of(&e);
    assert_int_equal(s.tier_hits, 1);
    free(out);
    engine_close(&e);
    lazyattn_store_destroy(store);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_after_the_writes),
        cmocka_unit_test(test_reused_blocks_keep_the_written_content),
        cmocka_unit_test(test_full_queue_drops),
        cmocka_unit_test(test_slow_put_does_not_hold_reuse),
        cmocka_unit_test(test_pin_writes_drops_without_a_pinned_slot),
        cmocka_unit_test(test_writes_into_the_pinned_store),
        cmocka_unit_test(test_detach_and_destroy_with_writes_pending),
        cmocka_unit_test(test_bad_options_refused),
        cmocka_unit_test(test_cost_rule),
        cmocka_unit_test(test_cost_rule_skips_writes),
        cmocka_unit_test(test_assumed_load_rate),
    };
    return cmocka_run_group_tests(tests, lt_context_setup, lt_context_teardown);
}
