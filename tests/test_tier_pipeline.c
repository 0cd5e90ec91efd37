/* SPDX-License-Identifier: Apache-2.0 */
/* Pipelined tier loads (lazyattn_tier_options.load = PIPELINED) on the
 * default device (PoCL in CI): documents loaded from a host store with
 * their upload on the tier's copy queue give the same prefill and decode
 * output, bit for bit, as the same documents loaded synchronously and as
 * computed, each checked against the float64 reference; attention on a
 * layer does not run while that layer's upload is held back (a user event
 * in front of the copy queue, lz_tier_hold_uploads), and runs right once it
 * is let go; a document evicted while its upload is held leaves its blocks
 * to the next request only after the upload (the pool's reuse order); a
 * failed upload is reported by the next request_create, counted, and the
 * document loaded again afterwards; detaching and destroying with uploads
 * in flight frees everything (the sanitizer job runs this). */
#include "doc_engine.h"
#include "store/store_internal.h" /* lz_tier_hold_uploads: the test seam */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEC_N ((size_t)L * NQH * D)
static const int ids3[3] = {0, 1, 3};

/* A host store holding documents 0..3, written through by a cache of its own. */
static lazyattn_store *filled_store(lazyattn_context *ctx) {
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_host(64 << 20, &s), LAZYATTN_STATUS_OK);
    engine w;
    engine_open(&w, ctx, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(w.cache, s, LAZYATTN_TIER_WRITE_THROUGH),
                     LAZYATTN_STATUS_OK);
    int ids[4] = {0, 1, 2, 3};
    lazyattn_segment_action act[4];
    run_docs(&w, 4, ids, act);
    assert_int_equal(stats_of(&w).tier_writes, 4);
    engine_close(&w);
    return s;
}

static void attach(engine *e, lazyattn_store *s, lazyattn_tier_load load) {
    lazyattn_tier_options o;
    lazyattn_tier_options_init(&o);
    o.load = load;
    lt_assert_status(lazyattn_cache_set_tier_options(e->cache, s, LAZYATTN_TIER_READ_ONLY, &o),
                     LAZYATTN_STATUS_OK);
}

/* The request [docs...] [question] planned on e, with its inputs: K/V at
 * every position [n_pos, ROW] per layer, the question's queries [NQ, NQH,
 * D] and one decode query [NQH, D] per layer (fixed seeds). */
typedef struct planned {
    lazyattn_request *req;
    lazyattn_plan p;
    int n_pos;
    float *k[L], *v[L];
    float q[L][NQ * NQH * D], qd[L][NQH * D];
} planned;

/* r's inputs for request req (planned already) of documents ids. */
static void plan_of(lazyattn_request *req, const int *ids, planned *r) {
    memset(r, 0, sizeof *r);
    r->req = req;
    lt_assert_status(lazyattn_request_get_plan(r->req, &r->p), LAZYATTN_STATUS_OK);
    r->n_pos = r->p.n_positions;
    for (int l = 0; l < L; l++) {
        r->k[l] = malloc(sizeof(float) * (size_t)r->n_pos * ROW);
        r->v[l] = malloc(sizeof(float) * (size_t)r->n_pos * ROW);
        assert_true(r->k[l] && r->v[l]);
        lt_rng g = {0x91BEull + (uint64_t)l};
        float *qk = r->k[l] + (size_t)(r->n_pos - NQ) * ROW;
        float *qv = r->v[l] + (size_t)(r->n_pos - NQ) * ROW;
        lt_fill(&g, qk, (size_t)NQ * ROW, 1.0f);
        lt_fill(&g, qv, (size_t)NQ * ROW, 1.0f);
        lt_fill(&g, r->q[l], (size_t)NQ * NQH * D, 2.0f);
        lt_fill(&g, r->qd[l], (size_t)NQH * D, 2.0f);
        for (int s = 0; s < r->p.n_segments; s++)
            if (r->p.segments[s].kind == LAZYATTN_SEGMENT_DOCUMENT)
                doc_kv(ids[r->p.segments[s].doc_index], l,
                       r->k[l] + (size_t)r->p.segments[s].logical_start * ROW,
                       r->v[l] + (size_t)r->p.segments[s].logical_start * ROW);
    }
}

static void plan(engine *e, int n, const int *ids, planned *r) {
    lazyattn_request *req;
    lt_assert_status(request_of(e, n, ids, &req), LAZYATTN_STATUS_OK);
    plan_of(req, ids, r);
}

static void unplan(planned *r) {
    lazyattn_request_destroy(r->req);
    for (int l = 0; l < L; l++) {
        free(r->k[l]);
        free(r->v[l]);
    }
}

/* Writes what the plan prefills on layer l (the question, and documents
 * not reused). */
static void write_layer(engine *e, const planned *r, int l) {
    const lazyattn_plan *p = &r->p;
    float *pk = malloc(sizeof(float) * (size_t)p->n_prefill * ROW);
    float *pv = malloc(sizeof(float) * (size_t)p->n_prefill * ROW);
    assert_true(pk && pv);
    for (int i = 0; i < p->n_prefill; i++) {
        memcpy(pk + (size_t)i * ROW, r->k[l] + (size_t)p->prefill_pos[i] * ROW, sizeof(float) * ROW);
        memcpy(pv + (size_t)i * ROW, r->v[l] + (size_t)p->prefill_pos[i] * ROW, sizeof(float) * ROW);
    }
    cl_mem km = lt_buffer(e->ctx, pk, sizeof(float) * (size_t)p->n_prefill * ROW);
    cl_mem vm = lt_buffer(e->ctx, pv, sizeof(float) * (size_t)p->n_prefill * ROW);
    cl_mem sm = lt_buffer(e->ctx, p->prefill_slots, sizeof(int32_t) * (size_t)p->n_prefill);
    cl_mem stm = lt_buffer(e->ctx, p->prefill_stored_pos, sizeof(int32_t) * (size_t)p->n_prefill);
    lt_assert_status(lazyattn_write_kv(e->attn, e->pool, l, p->n_prefill, km, vm, sm, stm, NULL, NULL),
                     LAZYATTN_STATUS_OK);
    clReleaseMemObject(km);
    clReleaseMemObject(vm);
    clReleaseMemObject(sm);
    clReleaseMemObject(stm);
    free(pk);
    free(pv);
}

/* Layer l's attention, enqueued: the question's prefill into *pre ([NQ,
 * NQH, D]) and a decode query at position n_pos into *dec ([NQH, D]); the
 * prefill's event in *ev (NULL: none). Buffers released by finish_layer. */
typedef struct layer_run {
    cl_mem qm, qpm, tm, epm, om, dqm, dqpm, offm, dom;
} layer_run;

static void enqueue_layer(engine *e, const planned *r, int l, layer_run *b, cl_event *ev) {
    const lazyattn_plan *p = &r->p;
    int32_t qpos[NQ], dpos = r->n_pos, offs[2] = {0, p->n_entries};
    for (int t = 0; t < NQ; t++) qpos[t] = r->n_pos - NQ + t;
    b->qm = lt_buffer(e->ctx, r->q[l], sizeof r->q[l]);
    b->qpm = lt_buffer(e->ctx, qpos, sizeof qpos);
    b->tm = lt_buffer(e->ctx, p->table, sizeof(uint64_t) * (size_t)p->n_entries);
    b->epm = lt_buffer(e->ctx, p->entry_pos, sizeof(int32_t) * (size_t)p->n_entries);
    b->om = lt_buffer(e->ctx, NULL, sizeof r->q[l]);
    b->dqm = lt_buffer(e->ctx, r->qd[l], sizeof r->qd[l]);
    b->dqpm = lt_buffer(e->ctx, &dpos, sizeof dpos);
    b->offm = lt_buffer(e->ctx, offs, sizeof offs);
    b->dom = lt_buffer(e->ctx, NULL, sizeof r->qd[l]);
    lt_assert_status(lazyattn_rope_apply(e->attn, NQ, NQH, b->qm, b->qpm, NULL, NULL),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_rope_apply(e->attn, 1, NQH, b->dqm, b->dqpm, NULL, NULL),
                     LAZYATTN_STATUS_OK);
    lazyattn_prefill_args a = {NQ, p->n_entries, b->qm, b->qpm, b->tm, b->epm, b->om,
                               NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    lt_assert_status(lazyattn_prefill(e->attn, e->pool, l, &a, NULL, ev), LAZYATTN_STATUS_OK);
    lazyattn_decode_args da;
    lazyattn_decode_args_init(&da);
    da.n_seqs = 1;
    da.max_entries = p->n_entries;
    da.q = b->dqm;
    da.q_pos = b->dqpm;
    da.seq_offsets = b->offm;
    da.table = b->tm;
    da.entry_pos = b->epm;
    da.out = b->dom;
    lt_assert_status(lazyattn_decode(e->attn, e->pool, l, &da, NULL, NULL), LAZYATTN_STATUS_OK);
}

/* Reads layer l's outputs, checks them against the float64 reference over
 * the whole prompt, releases the buffers. */
static void finish_layer(engine *e, const planned *r, int l, layer_run *b, float *pre, float *dec) {
    lt_read(e->ctx, b->om, pre, sizeof r->q[l]);
    lt_read(e->ctx, b->dom, dec, sizeof r->qd[l]);
    lt_assert_status(lazyattn_attention_check(e->attn, NULL), LAZYATTN_STATUS_OK);
    cl_mem *all = &b->qm;
    for (size_t i = 0; i < sizeof *b / sizeof(cl_mem); i++) clReleaseMemObject(all[i]);
    int32_t *kpos = malloc(sizeof(int32_t) * (size_t)r->n_pos), qpos[NQ], dpos = r->n_pos;
    double *ref = malloc(sizeof(double) * NQ * NQH * D);
    assert_true(kpos && ref);
    for (int t = 0; t < r->n_pos; t++) kpos[t] = t;
    for (int t = 0; t < NQ; t++) qpos[t] = r->n_pos - NQ + t;
    lazyattn_reference_args ra = {NQ, r->n_pos, r->q[l], qpos, r->k[l], r->v[l], kpos, ref, NULL};
    lt_assert_status(lazyattn_reference_attention(&e->c, &ra), LAZYATTN_STATUS_OK);
    double err = lazyattn_normalised_error(pre, ref, (size_t)NQ * NQH * D);
    if (err > 2e-5) print_error("layer %d prefill: normalised error %.3g\n", l, err);
    assert_true(err <= 2e-5);
    lazyattn_reference_args rd = {1, r->n_pos, r->qd[l], &dpos, r->k[l], r->v[l], kpos, ref, NULL};
    lt_assert_status(lazyattn_reference_attention(&e->c, &rd), LAZYATTN_STATUS_OK);
    err = lazyattn_normalised_error(dec, ref, (size_t)NQH * D);
    if (err > 2e-5) print_error("layer %d decode: normalised error %.3g\n", l, err);
    assert_true(err <= 2e-5);
    free(kpos);
    free(ref);
}

/* The whole request: plan, writes, prefill and decode on every layer,
 * checked, commit. pre: [L, NQ, NQH, D]; dec: [L, NQH, D]; act: [n]. */
static void serve_planned(engine *e, planned *r, int n, float *pre, float *dec,
                          lazyattn_segment_action *act);
static void serve(engine *e, int n, const int *ids, float *pre, float *dec,
                  lazyattn_segment_action *act) {
    planned *r = malloc(sizeof *r);
    assert_non_null(r);
    plan(e, n, ids, r);
    serve_planned(e, r, n, pre, dec, act);
}

/* serve with r planned (freed here). */
static void serve_planned(engine *e, planned *r, int n, float *pre, float *dec,
                          lazyattn_segment_action *act) {
    for (int i = 0; i < n; i++) act[i] = r->p.segments[i].action;
    for (int l = 0; l < L; l++) {
        layer_run b;
        write_layer(e, r, l);
        enqueue_layer(e, r, l, &b, NULL);
        finish_layer(e, r, l, &b, pre + (size_t)l * NQ * NQH * D, dec + (size_t)l * NQH * D);
    }
    lt_assert_status(lazyattn_request_commit(r->req), LAZYATTN_STATUS_OK);
    unplan(r);
    free(r);
    lt_assert_status(lazyattn_cache_validate(e->cache), LAZYATTN_STATUS_OK);
}

/* Pipelined, synchronous and computed: the same output, bit for bit. */
static void test_same_output(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_store *s = filled_store(ctx);
    engine piped, sync, computed;
    engine_open(&piped, ctx, 32, MODEL);
    engine_open(&sync, ctx, 32, MODEL);
    engine_open(&computed, ctx, 32, MODEL);
    attach(&piped, s, LAZYATTN_TIER_LOAD_PIPELINED);
    attach(&sync, s, LAZYATTN_TIER_LOAD_SYNC);
    static float pre[3][OUT_N], dec[3][DEC_N];
    lazyattn_segment_action act[3][3];
    serve(&piped, 3, ids3, pre[0], dec[0], act[0]);
    serve(&sync, 3, ids3, pre[1], dec[1], act[1]);
    serve(&computed, 3, ids3, pre[2], dec[2], act[2]);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(act[0][i], LAZYATTN_ACTION_REUSE);
        assert_int_equal(act[1][i], LAZYATTN_ACTION_REUSE);
        assert_int_equal(act[2][i], LAZYATTN_ACTION_PREFILL);
    }
    assert_memory_equal(pre[0], pre[1], sizeof pre[0]);
    assert_memory_equal(dec[0], dec[1], sizeof dec[0]);
    assert_memory_equal(pre[0], pre[2], sizeof pre[0]);
    assert_memory_equal(dec[0], dec[2], sizeof dec[0]);
    lazyattn_cache_stats sp = stats_of(&piped), ss = stats_of(&sync);
    assert_int_equal(sp.tier_hits, 3);
    assert_int_equal(sp.tier_loads_pipelined, 3);
    assert_int_equal(sp.tier_load_failures, 0);
    assert_int_equal(ss.tier_hits, 3);
    assert_int_equal(ss.tier_loads_pipelined, 0);
    /* then GPU hits on the loaded blocks: the same again */
    static float pre2[OUT_N], dec2[DEC_N];
    serve(&piped, 3, ids3, pre2, dec2, act[0]);
    assert_memory_equal(pre[0], pre2, sizeof pre2);
    assert_memory_equal(dec[0], dec2, sizeof dec2);
    sp = stats_of(&piped);
    assert_int_equal(sp.hits, 3);
    assert_int_equal(sp.tier_loads_pending, 0); /* settled by the request */
    engine_close(&piped);
    engine_close(&sync);
    engine_close(&computed);
    lazyattn_store_destroy(s);
}

/* A TILED pool: the upload reads the tier's reorder buffer, kept until it
 * ended; the same output as the TILED pool's own computation. */
static void test_tiled_pool(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_store *s = filled_store(ctx); /* exports are in ROWS order */
    engine piped, computed;
    engine_open_layout(&piped, ctx, 32, MODEL, B, LAZYATTN_DTYPE_F32, LAZYATTN_KV_LAYOUT_TILED);
    engine_open_layout(&computed, ctx, 32, MODEL, B, LAZYATTN_DTYPE_F32, LAZYATTN_KV_LAYOUT_TILED);
    attach(&piped, s, LAZYATTN_TIER_LOAD_PIPELINED);
    static float pre[2][OUT_N], dec[2][DEC_N];
    lazyattn_segment_action act[3];
    serve(&piped, 3, ids3, pre[0], dec[0], act);
    for (int i = 0; i < 3; i++) assert_int_equal(act[i], LAZYATTN_ACTION_REUSE);
    serve(&computed, 3, ids3, pre[1], dec[1], act);
    assert_memory_equal(pre[0], pre[1], sizeof pre[0]);
    assert_memory_equal(dec[0], dec[1], sizeof dec[0]);
    assert_int_equal(stats_of(&piped).tier_loads_pipelined, 3);
    engine_close(&piped);
    engine_close(&computed);
    lazyattn_store_destroy(s);
}

static int event_status(cl_event ev) {
    cl_int status = CL_QUEUED;
    lt_assert_status(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                                    NULL) == CL_SUCCESS ? 0 : -1, 0);
    return status;
}

/* The directory store read straight into the tier's pinned staging (six
 * documents at once: four slots, the other two in pageable memory), and
 * the slots reused by the next request: the same output as computed. */
static void test_dir_staging(void **state) {
    lazyattn_context *ctx = *state;
    char dir[] = "/tmp/lazyattn-tier-pipeline-XXXXXX";
    assert_non_null(mkdtemp(dir));
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_dir(dir, &s), LAZYATTN_STATUS_OK);
    int ids[N_DOCS] = {0, 1, 2, 3, 4, 5}, again[3] = {5, 2, 0};
    lazyattn_segment_action act[N_DOCS];
    engine w, piped, computed;
    engine_open(&w, ctx, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(w.cache, s, LAZYATTN_TIER_WRITE_THROUGH),
                     LAZYATTN_STATUS_OK);
    run_docs(&w, N_DOCS, ids, act);
    engine_close(&w);
    engine_open(&piped, ctx, 32, MODEL);
    engine_open(&computed, ctx, 32, MODEL);
    attach(&piped, s, LAZYATTN_TIER_LOAD_PIPELINED);
    static float pre[2][OUT_N], dec[2][DEC_N];
    serve(&piped, N_DOCS, ids, pre[0], dec[0], act);
    for (int i = 0; i < N_DOCS; i++) assert_int_equal(act[i], LAZYATTN_ACTION_REUSE);
    serve(&computed, N_DOCS, ids, pre[1], dec[1], act);
    assert_memory_equal(pre[0], pre[1], sizeof pre[0]);
    assert_memory_equal(dec[0], dec[1], sizeof dec[0]);
    /* evicted, loaded again through the slots given back */
    lt_assert_status(lazyattn_cache_trim(piped.cache, 0), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_trim(computed.cache, 0), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier(computed.cache, NULL, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK);
    serve(&piped, 3, again, pre[0], dec[0], act);
    for (int i = 0; i < 3; i++) assert_int_equal(act[i], LAZYATTN_ACTION_REUSE);
    serve(&computed, 3, again, pre[1], dec[1], act);
    assert_memory_equal(pre[0], pre[1], sizeof pre[0]);
    assert_memory_equal(dec[0], dec[1], sizeof dec[0]);
    lazyattn_cache_stats sp = stats_of(&piped);
    assert_int_equal(sp.tier_loads_pipelined, N_DOCS + 3);
    assert_int_equal(sp.tier_load_failures, 0);
    engine_close(&piped);
    engine_close(&computed);
    for (int i = 0; i < N_DOCS; i++)
        lt_assert_status(lazyattn_store_delete(s, key_of(i)), LAZYATTN_STATUS_OK);
    lazyattn_store_destroy(s);
    assert_int_equal(rmdir(dir), 0);
}

/* An engine of `blocks` pool blocks on the tier `s` loading by `load`, its
 * uploads held back by a new user event (returned) until the test lets it go. */
static cl_event open_held(engine *e, lazyattn_context *ctx, int blocks, lazyattn_store *s,
                          lazyattn_tier_load load) {
    engine_open(e, ctx, blocks, MODEL);
    attach(e, s, load);
    cl_int err;
    cl_event gate = clCreateUserEvent(lazyattn_context_cl_context(ctx), &err);
    assert_int_equal(err, CL_SUCCESS);
    lz_tier_hold_uploads(e->cache, gate);
    return gate;
}

/* Layer 0 of plan r on e, whose uploads gate holds: its attention is
 * enqueued and does not run; let go, it runs and matches want_pre /
 * want_dec to the bit. Frees r; e's uploads are no longer held. */
static void layer_waits_for_gate(engine *e, lazyattn_context *ctx, planned *r, cl_event gate,
                                 const float *want_pre, const float *want_dec) {
    write_layer(e, r, 0);
    layer_run b;
    cl_event ev = NULL;
    enqueue_layer(e, r, 0, &b, &ev);
    clFlush(lazyattn_context_queue(ctx));
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    assert_true(event_status(ev) > CL_COMPLETE); /* its upload held: not run */
    clSetUserEventStatus(gate, CL_COMPLETE);
    float pre[NQ * NQH * D], dec[NQH * D];
    finish_layer(e, r, 0, &b, pre, dec);
    assert_int_equal(event_status(ev), CL_COMPLETE);
    clReleaseEvent(ev);
    assert_memory_equal(pre, want_pre, sizeof pre);
    assert_memory_equal(dec, want_dec, sizeof dec);
    unplan(r);
    free(r);
    lz_tier_hold_uploads(e->cache, NULL);
}

/* Attention on layer 0 waits for the held upload; let go, it runs right. */
static void test_attention_waits_for_upload(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_store *s = filled_store(ctx);
    engine sync, piped;
    engine_open(&sync, ctx, 32, MODEL);
    attach(&sync, s, LAZYATTN_TIER_LOAD_SYNC);
    static float want_pre[OUT_N], want_dec[DEC_N];
    lazyattn_segment_action act[3];
    serve(&sync, 3, ids3, want_pre, want_dec, act);

    cl_event gate = open_held(&piped, ctx, 32, s, LAZYATTN_TIER_LOAD_PIPELINED);
    planned *r = malloc(sizeof *r);
    assert_non_null(r);
    plan(&piped, 3, ids3, r); /* returns with the uploads held */
    for (int i = 0; i < 3; i++) assert_int_equal(r->p.segments[i].action, LAZYATTN_ACTION_REUSE);
    assert_int_equal(stats_of(&piped).tier_loads_pending, 3);
    layer_waits_for_gate(&piped, ctx, r, gate, want_pre, want_dec);
    clReleaseEvent(gate);
    engine_close(&piped);
    engine_close(&sync);
    lazyattn_store_destroy(s);
}

typedef struct let_go {
    cl_event gate;
    cl_int status;
} let_go;

static void *let_go_later(void *arg) {
    let_go *g = arg;
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL);
    clSetUserEventStatus(g->gate, g->status);
    return NULL;
}

/* A document evicted while its upload is held: the next request takes its
 * blocks, and its writes land after the upload, not under it (were they
 * overwritten, the GPU hit after would fail the reference). */
static void test_evict_in_flight(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_store *s = filled_store(ctx); /* documents 0..3, not 4 */
    engine e;
    let_go g = {open_held(&e, ctx, 8, s, LAZYATTN_TIER_LOAD_PIPELINED), CL_COMPLETE};
    planned *r = malloc(sizeof *r);
    assert_non_null(r);
    int zero = 0, four = 4;
    plan(&e, 1, &zero, r); /* document 0 (3 blocks), upload held */
    assert_int_equal(r->p.segments[0].action, LAZYATTN_ACTION_REUSE);
    unplan(r);
    free(r);
    lt_assert_status(lazyattn_cache_trim(e.cache, 0), LAZYATTN_STATUS_OK);
    assert_int_equal(stats_of(&e).n_entries, 0);
    lz_tier_hold_uploads(e.cache, NULL);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, let_go_later, &g), 0);
    /* document 4 (no store has it) is computed into document 0's blocks,
     * the last freed, handed out first */
    static float pre[OUT_N], dec[DEC_N], pre2[OUT_N], dec2[DEC_N];
    lazyattn_segment_action act[1];
    serve(&e, 1, &four, pre, dec, act);
    pthread_join(t, NULL);
    assert_int_equal(act[0], LAZYATTN_ACTION_PREFILL);
    clFinish(lazyattn_context_queue(ctx));
    serve(&e, 1, &four, pre2, dec2, act); /* a GPU hit on what was written */
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    assert_memory_equal(pre, pre2, sizeof pre);
    assert_memory_equal(dec, dec2, sizeof dec);
    clReleaseEvent(g.gate);
    engine_close(&e);
    lazyattn_store_destroy(s);
}

/* An upload that fails on the device (injected where the tier reads its
 * status: PoCL cannot fail a copy on demand): the next request_create says
 * so (OPENCL, once), the document is dropped, counted, and loaded again by
 * the request after. */
static void test_failed_upload(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_store *s = filled_store(ctx);
    engine e;
    engine_open(&e, ctx, 32, MODEL);
    attach(&e, s, LAZYATTN_TIER_LOAD_PIPELINED);
    lz_tier_fail_uploads(e.cache, CL_OUT_OF_RESOURCES); /* the injected failure */
    planned *r = malloc(sizeof *r);
    assert_non_null(r);
    int one = 1;
    plan(&e, 1, &one, r);
    assert_int_equal(r->p.segments[0].action, LAZYATTN_ACTION_REUSE);
    unplan(r);
    /* the upload ends on the copy queue's thread: the next request after it says so */
    int reported = 0;
    for (int i = 0; i < 500 && !reported; i++) {
        lazyattn_request *q = NULL;
        int st = request_of(&e, 0, NULL, &q);
        lazyattn_request_destroy(q);
        if (st) {
            assert_int_equal(st, LAZYATTN_STATUS_OPENCL);
            assert_non_null(strstr(lazyattn_last_error(), "failed on the device"));
            reported = 1;
            continue;
        }
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    assert_true(reported);
    lz_tier_fail_uploads(e.cache, 0);
    lazyattn_cache_stats st = stats_of(&e);
    assert_int_equal(st.tier_load_failures, 1);
    assert_int_equal(st.tier_loads_pending, 0);
    assert_int_equal(st.n_entries, 0); /* dropped */
    lt_assert_status(lazyattn_cache_validate(e.cache), LAZYATTN_STATUS_OK);
    /* reported once; the document is loaded again, right */
    static float pre[OUT_N], dec[DEC_N];
    lazyattn_segment_action act[1];
    serve(&e, 1, &one, pre, dec, act);
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    st = stats_of(&e);
    assert_int_equal(st.tier_hits, 2);
    assert_int_equal(st.tier_loads_pipelined, 2);
    assert_int_equal(st.tier_load_failures, 1);
    free(r);
    engine_close(&e);
    lazyattn_store_destroy(s);
}

/* Uploads in flight when the tier is detached, or the cache destroyed (with
 * requests still holding the documents): both wait for them and free
 * everything (ASan's leak check in the sanitizer job). */
static void test_destroy_in_flight(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_store *s = filled_store(ctx);
    for (int detach = 0; detach < 2; detach++) {
        engine e;
        let_go g = {open_held(&e, ctx, 32, s, LAZYATTN_TIER_LOAD_PIPELINED), CL_COMPLETE};
        planned *r = malloc(sizeof *r);
        assert_non_null(r);
        plan(&e, 3, ids3, r);
        assert_int_equal(stats_of(&e).tier_loads_pending, 3);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, let_go_later, &g), 0);
        if (detach) {
            lt_assert_status(lazyattn_cache_set_tier(e.cache, NULL, LAZYATTN_TIER_READ_ONLY),
                             LAZYATTN_STATUS_OK);
            lazyattn_cache_stats st = stats_of(&e);
            assert_int_equal(st.tier_loads_pipelined, 3);
            assert_int_equal(st.tier_loads_pending, 0);
            unplan(r);
        } else {
            for (int l = 0; l < L; l++) {
                free(r->k[l]);
                free(r->v[l]);
            }
        }
        engine_close(&e); /* destroys the request still live, and the tier */
        pthread_join(t, NULL);
        clReleaseEvent(g.gate);
        free(r);
    }
    lazyattn_store_destroy(s);
}

/* The public ordering call: its refusals, and a barrier that waits. */
static void test_order_reads(void **state) {
    lazyattn_context *ctx = *state;
    engine e;
    engine_open(&e, ctx, 8, MODEL);
    lt_assert_status(lazyattn_pool_order_reads(NULL, 0, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_pool_order_reads(e.pool, L, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_pool_order_reads(e.pool, -2, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_pool_order_reads(e.pool, -1, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_pool_order_reads(e.pool, 0, NULL), LAZYATTN_STATUS_OK);
    lazyattn_pool_config pc = {L, NKV, D, B, LAZYATTN_DTYPE_F32, 1 << 20, LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *book;
    lt_assert_status(lazyattn_pool_create(NULL, &pc, &book), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_pool_order_reads(book, 0, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_pool_destroy(book);
    lazyattn_tier_options o;
    lazyattn_tier_options_init(&o);
    assert_int_equal(o.load, LAZYATTN_TIER_LOAD_SYNC);
    o.load = (lazyattn_tier_load)7;
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_host(1 << 20, &s), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier_options(e.cache, s, LAZYATTN_TIER_READ_ONLY, &o),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "unknown load"));
    engine_close(&e);
    lazyattn_store_destroy(s);
}

// ---- background loads (LAZYATTN_TIER_LOAD_BACKGROUND) ----

/* An engine's store over a host store: get copies the value out (the tier
 * copies an engine's value again before checking it), held back until the
 * test lets it go (or 10 s pass: a get that returns late is seen), and
 * optionally with a payload byte flipped. */
typedef struct slow_store {
    lazyattn_store *inner;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int held;    /* 1: gets wait */
    int entered; /* gets begun */
    int gets;    /* gets finished */
    int corrupt; /* 1: the last byte flipped */
    int broken;  /* 1: gets fail (IO) */
} slow_store;

static int slow_get(void *impl, lazyattn_doc_key key, lazyattn_store_value *v) {
    slow_store *ss = impl;
    pthread_mutex_lock(&ss->lock);
    ss->entered++;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    while (ss->held)
        if (pthread_cond_timedwait(&ss->wake, &ss->lock, &until) != 0) break;
    int broken = ss->broken;
    pthread_mutex_unlock(&ss->lock);
    lazyattn_store_value in;
    int st = broken ? LAZYATTN_STATUS_IO : lazyattn_store_get(ss->inner, key, &in);
    if (st == LAZYATTN_STATUS_OK) {
        uint8_t *copy = malloc(in.size);
        if (copy) {
            memcpy(copy, in.data, in.size);
            if (ss->corrupt) copy[in.size - 1] ^= 0x40;
        }
        v->data = copy;
        v->size = in.size;
        v->handle = copy;
        lazyattn_store_release(ss->inner, &in);
        if (!copy) st = LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
    }
    pthread_mutex_lock(&ss->lock);
    ss->gets++;
    pthread_mutex_unlock(&ss->lock);
    return st;
}
static void slow_release(void *impl, lazyattn_store_value *v) {
    (void)impl;
    free(v->handle);
}
static int slow_put(void *impl, lazyattn_doc_key key, const void *data, size_t size) {
    return lazyattn_store_put(((slow_store *)impl)->inner, key, data, size);
}
static int slow_exists(void *impl, lazyattn_doc_key key, int *there) {
    return lazyattn_store_exists(((slow_store *)impl)->inner, key, there);
}
static int slow_remove(void *impl, lazyattn_doc_key key) {
    return lazyattn_store_delete(((slow_store *)impl)->inner, key);
}

/* A slow store over documents 0..3 (filled_store), held (gets wait). */
static lazyattn_store *slow_open(lazyattn_context *ctx, slow_store *ss) {
    memset(ss, 0, sizeof *ss);
    ss->inner = filled_store(ctx);
    pthread_mutex_init(&ss->lock, NULL);
    pthread_cond_init(&ss->wake, NULL);
    ss->held = 1;
    static const lazyattn_store_ops ops = {"slow", slow_get, slow_release, slow_put,
                                           slow_exists, slow_remove, NULL};
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create(&ops, ss, &s), LAZYATTN_STATUS_OK);
    return s;
}

static void slow_let_go(slow_store *ss) {
    pthread_mutex_lock(&ss->lock);
    ss->held = 0;
    pthread_cond_broadcast(&ss->wake);
    pthread_mutex_unlock(&ss->lock);
}

static int slow_gets(slow_store *ss) {
    pthread_mutex_lock(&ss->lock);
    int n = ss->gets;
    pthread_mutex_unlock(&ss->lock);
    return n;
}

/* Waits (up to 10 s) until a get has begun. */
static void slow_wait_entered(slow_store *ss) {
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&ss->lock);
        int n = ss->entered;
        pthread_mutex_unlock(&ss->lock);
        if (n > 0) return;
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    fail_msg("no get began in 10 s");
}

static void slow_close(slow_store *ss, lazyattn_store *s) {
    lazyattn_store_destroy(s);
    lazyattn_store_destroy(ss->inner);
    pthread_cond_destroy(&ss->wake);
    pthread_mutex_destroy(&ss->lock);
}

/* Background loads from the host store, ROWS and TILED pools: the same
 * output, bit for bit, as computed (each checked against the float64
 * reference), counted as background loads. */
static void test_background_same_output(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_store *s = filled_store(ctx);
    for (int tiled = 0; tiled < 2; tiled++) {
        lazyattn_kv_layout layout = tiled ? LAZYATTN_KV_LAYOUT_TILED : LAZYATTN_KV_LAYOUT_ROWS;
        engine bg, computed;
        engine_open_layout(&bg, ctx, 32, MODEL, B, LAZYATTN_DTYPE_F32, layout);
        engine_open_layout(&computed, ctx, 32, MODEL, B, LAZYATTN_DTYPE_F32, layout);
        attach(&bg, s, LAZYATTN_TIER_LOAD_BACKGROUND);
        static float pre[2][OUT_N], dec[2][DEC_N];
        lazyattn_segment_action act[2][3];
        serve(&bg, 3, ids3, pre[0], dec[0], act[0]);
        serve(&computed, 3, ids3, pre[1], dec[1], act[1]);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(act[0][i], LAZYATTN_ACTION_REUSE);
            assert_int_equal(act[1][i], LAZYATTN_ACTION_PREFILL);
        }
        assert_memory_equal(pre[0], pre[1], sizeof pre[0]);
        assert_memory_equal(dec[0], dec[1], sizeof dec[0]);
        lazyattn_cache_stats st = stats_of(&bg);
        assert_int_equal(st.tier_hits, 3);
        assert_int_equal(st.tier_loads_background, 3);
        assert_int_equal(st.tier_loads_pipelined, 3);
        assert_int_equal(st.tier_load_failures, 0);
        assert_int_equal(st.tier_load_waits, 1); /* plan() asked get_plan without polling */
        engine_close(&bg);
        engine_close(&computed);
    }
    lazyattn_store_destroy(s);
}

/* request_create returns while the store's gets are held (they run on the
 * loader thread); the request polls pending; once they are let go it
 * polls ready, and its attention reads the loaded blocks right. */
static void test_background_slow_store(void **state) {
    lazyattn_context *ctx = *state;
    slow_store ss;
    lazyattn_store *s = slow_open(ctx, &ss);
    engine bg;
    engine_open(&bg, ctx, 32, MODEL);
    attach(&bg, s, LAZYATTN_TIER_LOAD_BACKGROUND);
    lazyattn_request *req;
    lt_assert_status(request_of(&bg, 3, ids3, &req), LAZYATTN_STATUS_OK);
    assert_int_equal(slow_gets(&ss), 0); /* returned before any get ended */
    int pending = -1, failed = -1;
    lt_assert_status(lazyattn_request_poll_loads(req, 0, &pending, &failed), LAZYATTN_STATUS_OK);
    assert_int_equal(pending, 3);
    assert_int_equal(failed, 0);
    assert_int_equal(stats_of(&bg).tier_loads_pending, 3);
    lt_assert_status(lazyattn_request_poll_loads(req, 2, &pending, &failed),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "wait 2"));
    lt_assert_status(lazyattn_cache_validate(bg.cache), LAZYATTN_STATUS_OK);
    size_t bytes = 0; /* not exported before its blocks are written */
    lt_assert_status(lazyattn_cache_export_size(bg.cache, hash_of(ids3[0]), &bytes),
                     LAZYATTN_STATUS_IN_USE);
    slow_let_go(&ss);
    lt_assert_status(lazyattn_request_poll_loads(req, 1, &pending, &failed), LAZYATTN_STATUS_OK);
    assert_int_equal(pending, 0);
    assert_int_equal(failed, 0);
    assert_int_equal(slow_gets(&ss), 3);
    lt_assert_status(lazyattn_cache_export_size(bg.cache, hash_of(ids3[0]), &bytes),
                     LAZYATTN_STATUS_OK);
    planned *r = malloc(sizeof *r);
    assert_non_null(r);
    plan_of(req, ids3, r);
    static float pre[OUT_N], dec[DEC_N];
    lazyattn_segment_action act[3];
    serve_planned(&bg, r, 3, pre, dec, act); /* checked against the reference */
    for (int i = 0; i < 3; i++) assert_int_equal(act[i], LAZYATTN_ACTION_REUSE);
    lazyattn_cache_stats st = stats_of(&bg);
    assert_int_equal(st.tier_loads_background, 3);
    assert_int_equal(st.tier_load_waits, 0); /* polled first: get_plan did not wait */
    lt_assert_status(lazyattn_request_poll_loads(NULL, 0, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    engine_close(&bg);
    slow_close(&ss, s);
}

/* Loads refused by the checks (a flipped payload byte): the request polls
 * them failed, get_plan says NOT_FOUND; planned again, the documents are
 * recomputed and served right; the plan after loads them again. */
static void test_background_failed_load(void **state) {
    lazyattn_context *ctx = *state;
    slow_store ss;
    lazyattn_store *s = slow_open(ctx, &ss);
    ss.corrupt = 1;
    slow_let_go(&ss);
    engine bg;
    engine_open(&bg, ctx, 32, MODEL);
    attach(&bg, s, LAZYATTN_TIER_LOAD_BACKGROUND);
    lazyattn_request *req;
    lt_assert_status(request_of(&bg, 3, ids3, &req), LAZYATTN_STATUS_OK);
    int pending = -1, failed = -1;
    lt_assert_status(lazyattn_request_poll_loads(req, 1, &pending, &failed), LAZYATTN_STATUS_OK);
    assert_int_equal(pending, 0);
    assert_int_equal(failed, 3);
    lazyattn_plan p;
    lt_assert_status(lazyattn_request_get_plan(req, &p), LAZYATTN_STATUS_NOT_FOUND);
    assert_non_null(strstr(lazyattn_last_error(), "create it again"));
    lazyattn_request_destroy(req);
    lt_assert_status(lazyattn_cache_validate(bg.cache), LAZYATTN_STATUS_OK);
    static float pre[OUT_N], dec[DEC_N];
    lazyattn_segment_action act[3];
    serve(&bg, 3, ids3, pre, dec, act); /* checked against the reference */
    for (int i = 0; i < 3; i++) assert_int_equal(act[i], LAZYATTN_ACTION_PREFILL);
    lazyattn_cache_stats st = stats_of(&bg);
    assert_int_equal(st.tier_load_failures, 3);
    assert_int_equal(st.tier_loads_background, 3);
    /* whole again, evicted: loaded from the tier, right */
    ss.corrupt = 0;
    lt_assert_status(lazyattn_cache_trim(bg.cache, 0), LAZYATTN_STATUS_OK);
    serve(&bg, 3, ids3, pre, dec, act);
    for (int i = 0; i < 3; i++) assert_int_equal(act[i], LAZYATTN_ACTION_REUSE);
    assert_int_equal(stats_of(&bg).tier_loads_background, 6);
    /* the store's get fails: the same, the store named */
    ss.broken = 1;
    lt_assert_status(lazyattn_cache_trim(bg.cache, 0), LAZYATTN_STATUS_OK);
    lt_assert_status(request_of(&bg, 3, ids3, &req), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_request_poll_loads(req, 1, &pending, &failed), LAZYATTN_STATUS_OK);
    assert_int_equal(failed, 3);
    lt_assert_status(lazyattn_request_get_plan(req, &p), LAZYATTN_STATUS_NOT_FOUND);
    lazyattn_request_destroy(req);
    serve(&bg, 3, ids3, pre, dec, act);
    for (int i = 0; i < 3; i++) assert_int_equal(act[i], LAZYATTN_ACTION_PREFILL);
    assert_int_equal(stats_of(&bg).tier_load_failures, 6);
    engine_close(&bg);
    slow_close(&ss, s);
}

typedef struct slow_later {
    slow_store *ss;
} slow_later;

static void *slow_let_go_later(void *arg) {
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL);
    slow_let_go(arg);
    return NULL;
}

/* Destroyed with loads queued: the request first, then the tier detached
 * while a get is held (joined: the get in progress ends, the rest are
 * dropped and counted), then the cache with another request's loads
 * queued; nothing leaks (the sanitizer job runs this). */
static void test_background_destroy_queued(void **state) {
    lazyattn_context *ctx = *state;
    slow_store ss;
    lazyattn_store *s = slow_open(ctx, &ss);
    engine bg;
    engine_open(&bg, ctx, 32, MODEL);
    attach(&bg, s, LAZYATTN_TIER_LOAD_BACKGROUND);
    lazyattn_request *req;
    lt_assert_status(request_of(&bg, 3, ids3, &req), LAZYATTN_STATUS_OK);
    lazyattn_request_destroy(req);
    lt_assert_status(lazyattn_cache_validate(bg.cache), LAZYATTN_STATUS_OK);
    slow_wait_entered(&ss); /* the first get is held: the other two wait in the queue */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, slow_let_go_later, &ss), 0);
    lt_assert_status(lazyattn_cache_set_tier(bg.cache, NULL, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK);
    pthread_join(t, NULL);
    assert_int_equal(slow_gets(&ss), 1); /* joined after the get in progress */
    lazyattn_cache_stats st = stats_of(&bg);
    assert_int_equal(st.tier_loads_background, 3);
    assert_int_equal(st.tier_load_failures, 2); /* dropped */
    assert_int_equal(st.tier_loads_pending, 0);
    lt_assert_status(lazyattn_cache_validate(bg.cache), LAZYATTN_STATUS_OK);
    /* a request whose loads were dropped by a detach is failed, not served */
    ss.held = 1;
    attach(&bg, s, LAZYATTN_TIER_LOAD_BACKGROUND);
    lt_assert_status(lazyattn_cache_trim(bg.cache, 0), LAZYATTN_STATUS_OK);
    lt_assert_status(request_of(&bg, 3, ids3, &req), LAZYATTN_STATUS_OK);
    assert_int_equal(pthread_create(&t, NULL, slow_let_go_later, &ss), 0);
    lt_assert_status(lazyattn_cache_set_tier(bg.cache, NULL, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK);
    pthread_join(t, NULL);
    int pending = -1, failed = -1;
    lt_assert_status(lazyattn_request_poll_loads(req, 1, &pending, &failed), LAZYATTN_STATUS_OK);
    assert_int_equal(pending, 0);
    assert_true(failed >= 0 && failed <= 3);
    lazyattn_plan p;
    lt_assert_status(lazyattn_request_get_plan(req, &p),
                     failed ? LAZYATTN_STATUS_NOT_FOUND : LAZYATTN_STATUS_OK);
    /* the cache destroyed with a third request's loads queued */
    ss.held = 1;
    attach(&bg, s, LAZYATTN_TIER_LOAD_BACKGROUND);
    lazyattn_request *req2;
    int ids2[2] = {2, 3};
    lt_assert_status(request_of(&bg, 2, ids2, &req2), LAZYATTN_STATUS_OK);
    assert_int_equal(pthread_create(&t, NULL, slow_let_go_later, &ss), 0);
    engine_close(&bg); /* destroys the requests first */
    pthread_join(t, NULL);
    slow_close(&ss, s);
}

/* Attention enqueued once the request polls ready waits for the load's
 * upload (held on the device by a gate): ordered on the device, not by a
 * wait of the serving thread; let go, it runs right. */
static void test_background_attention_waits(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_store *s = filled_store(ctx);
    engine computed, bg;
    engine_open(&computed, ctx, 32, MODEL);
    static float want_pre[OUT_N], want_dec[DEC_N];
    lazyattn_segment_action act[3];
    serve(&computed, 3, ids3, want_pre, want_dec, act);
    cl_event gate = open_held(&bg, ctx, 32, s, LAZYATTN_TIER_LOAD_BACKGROUND);
    lazyattn_request *req;
    lt_assert_status(request_of(&bg, 3, ids3, &req), LAZYATTN_STATUS_OK);
    int pending = -1, failed = -1;
    lt_assert_status(lazyattn_request_poll_loads(req, 1, &pending, &failed), LAZYATTN_STATUS_OK);
    assert_int_equal(pending, 0);
    assert_int_equal(failed, 0);
    planned *r = malloc(sizeof *r);
    assert_non_null(r);
    plan_of(req, ids3, r);
    layer_waits_for_gate(&bg, ctx, r, gate, want_pre, want_dec);
    clReleaseEvent(gate);
    engine_close(&bg);
    engine_close(&computed);
    lazyattn_store_destroy(s);
}

/* lz_copy_parallel (tier.load_threads) copies every byte, whatever the
 * thread count and however the size splits into page shares. */
static void test_copy_parallel(void **state) {
    (void)state;
    const size_t sizes[] = {((size_t)16 << 20) + 12345, ((size_t)17 << 20) - 1, 4096};
    const int threads[] = {1, 2, 3, 7, 16, 40};
    size_t most = sizes[1];
    uint8_t *src = malloc(most), *dst = malloc(most);
    assert_non_null(src);
    assert_non_null(dst);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < most; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        src[i] = (uint8_t)x;
    }
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
            memset(dst, 0, most);
            lz_copy_parallel(dst, src, sizes[s], threads[t]);
            assert_memory_equal(dst, src, sizes[s]);
            for (size_t i = sizes[s]; i < most && i < sizes[s] + 65536; i++)
                if (dst[i])
                    fail_msg("byte %zu past %zu written (%d threads)", i, sizes[s], threads[t]);
        }
    free(src);
    free(dst);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_parallel),
        cmocka_unit_test(test_same_output),
        cmocka_unit_test(test_dir_staging),
        cmocka_unit_test(test_tiled_pool),
        cmocka_unit_test(test_attention_waits_for_upload),
        cmocka_unit_test(test_evict_in_flight),
        cmocka_unit_test(test_failed_upload),
        cmocka_unit_test(test_destroy_in_flight),
        cmocka_unit_test(test_order_reads),
        cmocka_unit_test(test_background_same_output),
        cmocka_unit_test(test_background_slow_store),
        cmocka_unit_test(test_background_failed_load),
        cmocka_unit_test(test_background_destroy_queued),
        cmocka_unit_test(test_background_attention_waits),
    };
    return cmocka_run_group_tests_name("tier_pipeline", tests, lt_context_setup,
                                       lt_context_teardown);
}
