/* SPDX-License-Identifier: Apache-2.0 */
/* Reuse after use (lib/block_pool.c, lib/use_log.c): a block freed while a
 * command that reads it is still queued on another queue is rewritten only
 * after that command, whatever rewrites it (an import, a tier load, a
 * request's lazyattn_write_kv); a device plan whose request is gone is
 * refused.
 *
 * The reader is made to wait: queue B holds a barrier on a user event
 * ("the gate") ahead of a prefill over request R1's blocks; R1 is destroyed
 * and its blocks handed out again and rewritten on the context's queue
 * while the gate is shut; a thread opens it 200 ms later. B's output must
 * be bit-identical to the same prefill run before anything was reused:
 * without the ordering the rewrite runs first (the context's queue is not
 * gated) and B reads the other document's K/V. Each test also checks that
 * R1's blocks were in fact handed out again, so that it could fail. */
#include "doc_engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GATE_MS 200
#define OUT_ELEMS ((size_t)NQ * NQH * D)

/* ---- a request whose K/V are written and whose prefill can run anywhere ---- */

typedef struct prompt {
    lazyattn_request *req;
    lazyattn_plan plan;
    cl_mem q, q_pos, table, entry_pos; /* layer 0's prefill of the question */
    int32_t blocks[64];                /* every block of the request's table */
    int n_blocks;
} prompt;

static void prompt_open(engine *e, int doc, prompt *p) {
    memset(p, 0, sizeof *p);
    lt_assert_status(request_of(e, 1, &doc, &p->req), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_request_get_plan(p->req, &p->plan), LAZYATTN_STATUS_OK);
    const lazyattn_plan *pl = &p->plan;
    const int n_pos = pl->n_positions;
    float *k = calloc((size_t)n_pos * ROW, sizeof *k), *v = calloc((size_t)n_pos * ROW, sizeof *v);
    float *pk = malloc(sizeof(float) * (size_t)pl->n_prefill * ROW);
    float *pv = malloc(sizeof(float) * (size_t)pl->n_prefill * ROW);
    assert_true(k && v && pk && pv && pl->n_prefill > 0);
    for (int l = 0; l < L; l++) {
        doc_kv(doc, l, k, v); /* the document from position 0 */
        lt_rng r = {0x7E57ull + (uint64_t)l};
        lt_fill(&r, k + (size_t)(n_pos - NQ) * ROW, (size_t)NQ * ROW, 1.0f);
        lt_fill(&r, v + (size_t)(n_pos - NQ) * ROW, (size_t)NQ * ROW, 1.0f);
        for (int i = 0; i < pl->n_prefill; i++) {
            memcpy(pk + (size_t)i * ROW, k + (size_t)pl->prefill_pos[i] * ROW, sizeof(float) * ROW);
            memcpy(pv + (size_t)i * ROW, v + (size_t)pl->prefill_pos[i] * ROW, sizeof(float) * ROW);
        }
        cl_mem km = lt_buffer(e->ctx, pk, sizeof(float) * pl->n_prefill * ROW);
        cl_mem vm = lt_buffer(e->ctx, pv, sizeof(float) * pl->n_prefill * ROW);
        cl_mem sm = lt_buffer(e->ctx, pl->prefill_slots, sizeof(int32_t) * pl->n_prefill);
        cl_mem stm = lt_buffer(e->ctx, pl->prefill_stored_pos, sizeof(int32_t) * pl->n_prefill);
        lt_assert_status(lazyattn_write_kv(e->attn, e->pool, l, pl->n_prefill, km, vm, sm, stm,
                                           NULL, NULL),
                         LAZYATTN_STATUS_OK);
        clReleaseMemObject(km);
        clReleaseMemObject(vm);
        clReleaseMemObject(sm);
        clReleaseMemObject(stm);
    }
    assert_int_equal(clFinish(lazyattn_context_queue(e->ctx)), CL_SUCCESS);
    free(k);
    free(v);
    free(pk);
    free(pv);

    float q[OUT_ELEMS];
    lt_rng r = {0x9A7Eull};
    lt_fill(&r, q, OUT_ELEMS, 2.0f);
    int32_t qpos[NQ];
    for (int t = 0; t < NQ; t++) qpos[t] = n_pos - NQ + t;
    p->q = lt_buffer(e->ctx, q, sizeof q);
    p->q_pos = lt_buffer(e->ctx, qpos, sizeof qpos);
    p->table = lt_buffer(e->ctx, pl->table, sizeof(uint64_t) * pl->n_entries);
    p->entry_pos = lt_buffer(e->ctx, pl->entry_pos, sizeof(int32_t) * pl->n_entries);
    assert_true(p->q && p->q_pos && p->table && p->entry_pos);
    assert_true(pl->n_entries <= 64);
    for (int i = 0; i < pl->n_entries; i++) {
        int32_t b, delta, len;
        lt_assert_status(lazyattn_entry_unpack(pl->table[i], &b, &delta, &len), LAZYATTN_STATUS_OK);
        p->blocks[p->n_blocks++] = b;
    }
}

/* Layer 0's prefill of the question over the request's blocks, on queue. */
static void prompt_prefill(engine *e, const prompt *p, cl_command_queue queue, cl_mem out) {
    lazyattn_prefill_args a;
    lazyattn_prefill_args_init(&a);
    a.n_queries = NQ;
    a.n_entries = p->plan.n_entries;
    a.q = p->q;
    a.q_pos = p->q_pos;
    a.table = p->table;
    a.entry_pos = p->entry_pos;
    a.out = out;
    lt_assert_status(lazyattn_prefill(e->attn, e->pool, 0, &a, queue, NULL), LAZYATTN_STATUS_OK);
}

static void prompt_close(prompt *p) {
    clReleaseMemObject(p->q);
    clReleaseMemObject(p->q_pos);
    clReleaseMemObject(p->table);
    clReleaseMemObject(p->entry_pos);
    lazyattn_request_destroy(p->req); /* NULL after a destroy in the test: no-op */
    memset(p, 0, sizeof *p);
}

/* 1 when any of p's blocks is allocated again (handed out after its free). */
static int reused(const engine *e, const prompt *p) {
    for (int i = 0; i < p->n_blocks; i++)
        if (lazyattn_pool_is_allocated(e->pool, p->blocks[i])) return 1;
    return 0;
}

/* ---- the gate ---- */

typedef struct gate {
    cl_event event;
    pthread_t opener;
} gate;

static void *gate_open_later(void *arg) {
    struct timespec ts = {0, GATE_MS * 1000000L};
    nanosleep(&ts, NULL);
    clSetUserEventStatus(((gate *)arg)->event, CL_COMPLETE);
    return NULL;
}

/* Shuts queue behind a user event: commands enqueued on it after this wait. */
static void gate_shut(engine *e, cl_command_queue queue, gate *g) {
    cl_int err;
    g->event = clCreateUserEvent(lazyattn_context_cl_context(e->ctx), &err);
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(clEnqueueBarrierWithWaitList(queue, 1, &g->event, NULL), CL_SUCCESS);
}

/* Opens the gate GATE_MS from now, from another thread (the rewrite may
 * block this one until the gated reader has run). */
static void gate_open_soon(gate *g) {
    assert_int_equal(pthread_create(&g->opener, NULL, gate_open_later, g), 0);
}

static void gate_join(gate *g) {
    pthread_join(g->opener, NULL);
    clReleaseEvent(g->event);
}

/* ---- the shared set-up: R1 prefilled on B ungated (the reference), then
 * gated; R1 destroyed. ---- */

typedef struct scene {
    engine e;
    cl_command_queue b;
    prompt r1;
    cl_mem out_ref, out;
    gate g;
} scene;

static void scene_open(scene *s, lazyattn_context *ctx, int n_blocks) {
    memset(s, 0, sizeof *s);
    engine_open(&s->e, ctx, n_blocks, MODEL);
    cl_int err;
    s->b = clCreateCommandQueue(lazyattn_context_cl_context(ctx), lazyattn_context_device(ctx), 0,
                                &err);
    assert_int_equal(err, CL_SUCCESS);
    prompt_open(&s->e, 1, &s->r1); /* document 1: 16 tokens, one block; the question one */
    s->out_ref = lt_buffer(ctx, NULL, sizeof(float) * OUT_ELEMS);
    s->out = lt_buffer(ctx, NULL, sizeof(float) * OUT_ELEMS);
    prompt_prefill(&s->e, &s->r1, s->b, s->out_ref);
    assert_int_equal(clFinish(s->b), CL_SUCCESS);
    lt_assert_status(lazyattn_attention_check(s->e.attn, s->b), LAZYATTN_STATUS_OK);
    /* the same prefill behind the gate, then R1 gone (never committed: its
     * document's blocks are freed with its own) */
    gate_shut(&s->e, s->b, &s->g);
    prompt_prefill(&s->e, &s->r1, s->b, s->out);
    clFlush(s->b);
    lazyattn_request_destroy(s->r1.req);
    s->r1.req = NULL;
    assert_false(reused(&s->e, &s->r1));
}

/* Opens the gate, waits for B and checks its output against the reference. */
static void scene_check(scene *s) {
    gate_join(&s->g);
    assert_int_equal(clFinish(s->b), CL_SUCCESS);
    float want[OUT_ELEMS], got[OUT_ELEMS];
    lt_read(s->e.ctx, s->out_ref, want, sizeof want);
    lt_read(s->e.ctx, s->out, got, sizeof got);
    float max_diff = 0;
    for (size_t i = 0; i < OUT_ELEMS; i++) {
        float d = got[i] > want[i] ? got[i] - want[i] : want[i] - got[i];
        if (d > max_diff) max_diff = d;
    }
    if (memcmp(want, got, sizeof want) != 0)
        print_error("the gated prefill read reused blocks: max difference %g\n", (double)max_diff);
    assert_memory_equal(want, got, sizeof want);
}

static void scene_close(scene *s) {
    prompt_close(&s->r1);
    clReleaseMemObject(s->out_ref);
    clReleaseMemObject(s->out);
    clReleaseCommandQueue(s->b);
    engine_close(&s->e);
}

/* The export of document 0 (37 tokens, three blocks), made in an engine of
 * its own. *size bytes, malloc'ed. */
static uint8_t *export_doc0(lazyattn_context *ctx, size_t *size) {
    engine x;
    engine_open(&x, ctx, 16, MODEL);
    float out[L * OUT_ELEMS];
    lazyattn_segment_action act[1];
    int ids[1] = {0};
    run_request(&x, 1, ids, out, act);
    lt_assert_status(lazyattn_cache_export_size(x.cache, hash_of(0), size), LAZYATTN_STATUS_OK);
    uint8_t *blob = malloc(*size);
    assert_non_null(blob);
    size_t written = 0;
    lt_assert_status(lazyattn_cache_export(x.cache, hash_of(0), blob, *size, &written),
                     LAZYATTN_STATUS_OK);
    assert_int_equal(written, *size);
    engine_close(&x);
    return blob;
}

/* ---- the tests ---- */

/* An import takes R1's blocks (four in the pool, R1 held two) while a
 * prefill over them waits on B. */
static void test_import_after_readers(void **state) {
    size_t size = 0;
    uint8_t *blob = export_doc0(*state, &size);
    scene s;
    scene_open(&s, *state, 4);
    gate_open_soon(&s.g);
    lt_assert_status(lazyattn_cache_import(s.e.cache, blob, size, NULL), LAZYATTN_STATUS_OK);
    assert_true(reused(&s.e, &s.r1));
    scene_check(&s);
    lt_assert_status(lazyattn_cache_validate(s.e.cache), LAZYATTN_STATUS_OK);
    scene_close(&s);
    free(blob);
}

/* A tier load of document 0 by a new request takes R1's blocks. */
static void test_tier_load_after_readers(void **state) {
    size_t size = 0;
    uint8_t *blob = export_doc0(*state, &size);
    lazyattn_store *store = NULL;
    lt_assert_status(lazyattn_store_create_host(1u << 24, &store), LAZYATTN_STATUS_OK);
    lazyattn_doc_key key = key_of(0);
    lt_assert_status(lazyattn_store_put(store, key, blob, size), LAZYATTN_STATUS_OK);
    scene s;
    scene_open(&s, *state, 4);
    lt_assert_status(lazyattn_cache_set_tier(s.e.cache, store, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK);
    gate_open_soon(&s.g);
    int32_t tok[64];
    doc_tokens(0, tok);
    const int32_t *docs[1] = {tok};
    int32_t lens[1] = {doc_len[0]};
    lazyattn_request_desc d = {0, NULL, 1, docs, lens, 0, NULL, 0};
    lazyattn_request *r2 = NULL;
    lt_assert_status(lazyattn_request_create(s.e.cache, &d, &r2), LAZYATTN_STATUS_OK);
    lazyattn_cache_stats st;
    lt_assert_status(lazyattn_cache_get_stats(s.e.cache, &st), LAZYATTN_STATUS_OK);
    assert_int_equal(st.tier_hits, 1);
    assert_true(reused(&s.e, &s.r1));
    scene_check(&s);
    lazyattn_request_destroy(r2);
    lazyattn_cache_set_tier(s.e.cache, NULL, LAZYATTN_TIER_READ_ONLY);
    scene_close(&s);
    lazyattn_store_destroy(store);
    free(blob);
}

/* A new request's lazyattn_write_kv into R1's blocks, on the context's
 * queue: the write is enqueued at once and must not run before B's read. */
static void test_write_kv_after_readers(void **state) {
    scene s;
    scene_open(&s, *state, 4);
    gate_open_soon(&s.g);
    prompt r2;
    prompt_open(&s.e, 2, &r2); /* writes and waits: only after the gate opened */
    assert_true(reused(&s.e, &s.r1));
    scene_check(&s);
    prompt_close(&r2);
    scene_close(&s);
}

/* Commands of the engine's own over the pool (a read of the K buffer on a
 * queue of its own): recorded with lazyattn_pool_record_use, an import of
 * R1's freed blocks waits for them too. */
static void test_engine_commands_recorded(void **state) {
    lazyattn_context *ctx = *state;
    size_t size = 0;
    uint8_t *blob = export_doc0(ctx, &size);
    engine e;
    engine_open(&e, ctx, 4, MODEL);
    prompt r1;
    prompt_open(&e, 1, &r1);
    cl_int err;
    cl_command_queue c = clCreateCommandQueue(lazyattn_context_cl_context(ctx),
                                              lazyattn_context_device(ctx), 0, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem k0 = lazyattn_pool_k_buffer(e.pool, 0);
    size_t k_bytes = 0;
    clGetMemObjectInfo(k0, CL_MEM_SIZE, sizeof k_bytes, &k_bytes, NULL);
    uint8_t *before = malloc(k_bytes), *read = malloc(k_bytes);
    assert_true(before && read);
    lt_read(ctx, k0, before, k_bytes);
    gate g;
    gate_shut(&e, c, &g);
    cl_event ev = NULL;
    assert_int_equal(clEnqueueReadBuffer(c, k0, CL_FALSE, 0, k_bytes, read, 0, NULL, &ev),
                     CL_SUCCESS);
    lt_assert_status(lazyattn_pool_record_use(e.pool, 1, &ev), LAZYATTN_STATUS_OK);
    clReleaseEvent(ev);
    lazyattn_request_destroy(r1.req);
    r1.req = NULL;
    gate_open_soon(&g);
    lt_assert_status(lazyattn_cache_import(e.cache, blob, size, NULL), LAZYATTN_STATUS_OK);
    assert_true(reused(&e, &r1));
    gate_join(&g);
    assert_int_equal(clFinish(c), CL_SUCCESS);
    assert_memory_equal(before, read, k_bytes); /* the K buffer as it was before the import */
    free(before);
    free(read);
    clReleaseCommandQueue(c);
    prompt_close(&r1);
    engine_close(&e);
    free(blob);
}

/* Bad input to the two public calls: a clear status, nothing recorded. */
static void test_reuse_calls_refuse_bad_input(void **state) {
    engine e;
    engine_open(&e, *state, 4, MODEL);
    cl_event none = NULL;
    lt_assert_status(lazyattn_pool_record_use(NULL, 0, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_pool_record_use(e.pool, -1, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_pool_record_use(e.pool, 1, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_pool_record_use(e.pool, 1, &none), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "events[0]"));
    lt_assert_status(lazyattn_pool_record_use(e.pool, 0, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_pool_order_writes(NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_pool_order_writes(e.pool, NULL), LAZYATTN_STATUS_OK);
    lazyattn_pool_config pc;
    lazyattn_pool_get_config(e.pool, &pc);
    lazyattn_pool *book = NULL;
    lt_assert_status(lazyattn_pool_create(NULL, &pc, &book), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_pool_order_writes(book, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "accounting only"));
    lazyattn_pool_destroy(book);
    engine_close(&e);
}

/* A device plan made from a request is refused once the request's blocks
 * are freed; a plan of live requests is not, whatever else is freed. */
static void test_stale_device_plan_refused(void **state) {
    engine e;
    engine_open(&e, *state, 8, MODEL);
    prompt r1, r2;
    prompt_open(&e, 1, &r1);
    prompt_open(&e, 2, &r2);
    lazyattn_device_plan *dp = NULL;
    lt_assert_status(lazyattn_device_plan_create(e.ctx, NULL, &dp), LAZYATTN_STATUS_OK);
    lazyattn_plan_seq seq;
    lt_assert_status(lazyattn_plan_seq_from_request(r1.req, &seq), LAZYATTN_STATUS_OK);
    assert_ptr_equal(seq.request, r1.req);
    lt_assert_status(lazyattn_device_plan_update(dp, 1, &seq, NULL, NULL), LAZYATTN_STATUS_OK);
    lazyattn_decode_args da;
    lazyattn_decode_args_init(&da);
    lazyattn_prefill_args pa;
    lazyattn_prefill_args_init(&pa);
    lt_assert_status(lazyattn_device_plan_decode_args(dp, &da), LAZYATTN_STATUS_OK);
    /* another request's blocks freed: R1's tables still hold */
    lazyattn_request_destroy(r2.req);
    r2.req = NULL;
    lt_assert_status(lazyattn_device_plan_decode_args(dp, &da), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_device_plan_prefill_args(dp, 0, &pa), LAZYATTN_STATUS_OK);
    /* R1 gone: refused, naming the block */
    lazyattn_request_destroy(r1.req);
    r1.req = NULL;
    lt_assert_status(lazyattn_device_plan_decode_args(dp, &da), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "was freed after the last update"));
    lt_assert_status(lazyattn_device_plan_prefill_args(dp, 0, &pa), LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* updated from a live request again: handed out */
    prompt r3;
    prompt_open(&e, 3, &r3);
    lt_assert_status(lazyattn_plan_seq_from_request(r3.req, &seq), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_device_plan_update(dp, 1, &seq, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_device_plan_decode_args(dp, &da), LAZYATTN_STATUS_OK);
    /* tables of no request are the engine's to keep right: not checked */
    lazyattn_plan_seq plain = seq;
    plain.request = NULL;
    lt_assert_status(lazyattn_device_plan_update(dp, 1, &plain, NULL, NULL), LAZYATTN_STATUS_OK);
    prompt_close(&r3);
    lt_assert_status(lazyattn_device_plan_decode_args(dp, &da), LAZYATTN_STATUS_OK);
    /* the plan outlives the pool's destroy: the pool stays alive for it */
    prompt r4;
    prompt_open(&e, 1, &r4);
    lt_assert_status(lazyattn_plan_seq_from_request(r4.req, &seq), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_device_plan_update(dp, 1, &seq, NULL, NULL), LAZYATTN_STATUS_OK);
    prompt_close(&r4);
    prompt_close(&r1);
    prompt_close(&r2);
    engine_close(&e); /* pool destroyed with the plan still holding it */
    lt_assert_status(lazyattn_device_plan_decode_args(dp, &da), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_device_plan_destroy(dp); /* frees the pool: LeakSanitizer sees no leak */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_import_after_readers),
        cmocka_unit_test(test_tier_load_after_readers),
        cmocka_unit_test(test_write_kv_after_readers),
        cmocka_unit_test(test_engine_commands_recorded),
        cmocka_unit_test(test_reuse_calls_refuse_bad_input),
        cmocka_unit_test(test_stale_device_plan_refused),
    };
    return cmocka_run_group_tests(tests, lt_context_setup, lt_context_teardown);
}
