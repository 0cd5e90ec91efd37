/* The tier of a LAZY cache on the default device (PoCL in CI): documents
 * written through (commit) or back (eviction) to the host, directory and
 * Redis stores and loaded by another cache (and another process) give
 * attention output that matches the float64 reference; GPU hits, tier hits
 * and recomputes are counted apart; corrupt, truncated, mismatched values,
 * a failing store, a full disk and a Redis server stopped mid-run cost a
 * recompute (counted), never a wrong answer, and leave the cache valid.
 * Non-LAZY caches refuse a tier. The Redis tests need redis-server and
 * LAZYATTN_TEST_REDIS (set by CI); without it they are reported skipped. */
#include "test_common.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
static char self_path[4096];

#define L 2 /* layers */
#define NKV 2
#define NQH 4
#define D 64
#define B 16 /* f32 engines; the f16 round trip uses 32 */
#define ROW (NKV * D)
#define NQ 5
#define N_DOCS 4
#define MODEL 7
#define OUT_N ((size_t)L * NQ * NQH * D)

static const int doc_len[N_DOCS] = {37, 16, 9, 23};

static void doc_tokens(int id, int32_t *tok) {
    for (int t = 0; t < doc_len[id]; t++) tok[t] = 1000 * (id + 1) + 3 * t;
}

/* K/V of a document depend on the document and the layer only; fixed seeds
 * so that a second process computes the same. */
static void doc_kv(int id, int layer, float *k, float *v) {
    lt_rng r = {0xD0C0000ull + 16u * (uint64_t)id + (uint64_t)layer};
    lt_fill(&r, k, (size_t)doc_len[id] * ROW, 1.0f);
    lt_fill(&r, v, (size_t)doc_len[id] * ROW, 1.0f);
}

typedef struct engine {
    lazyattn_context *ctx;
    int block_size;
    lazyattn_dtype dtype;
    lazyattn_attention_config c;
    lazyattn_attention *attn;
    lazyattn_pool *pool;
    lazyattn_cache *cache;
} engine;

static void engine_open_as(engine *e, lazyattn_context *ctx, int n_blocks, uint64_t model,
                           int block_size, lazyattn_dtype dtype) {
    memset(e, 0, sizeof *e);
    e->ctx = ctx;
    e->block_size = block_size;
    e->dtype = dtype;
    lazyattn_attention_config_default(&e->c);
    e->c.n_q_heads = NQH;
    e->c.n_kv_heads = NKV;
    e->c.head_dim = D;
    e->c.block_size = block_size;
    e->c.dtype = dtype;
    e->c.rope.theta = 10000.0;
    e->c.rope.llama3_factor = 0;
    lazyattn_pool_config pc = {L, NKV, D, block_size, dtype,
                               (uint64_t)n_blocks * 2 * L * block_size * ROW *
                                   lazyattn_dtype_size(dtype)};
    lazyattn_cache_config cc;
    lazyattn_cache_config_init(&cc);
    cc.model_id = model;
    lt_assert_status(lazyattn_pool_create(ctx, &pc, &e->pool), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_create(ctx, &e->c, &e->attn), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_create(e->pool, &cc, &e->cache), LAZYATTN_STATUS_OK);
}

static void engine_open(engine *e, lazyattn_context *ctx, int n_blocks, uint64_t model) {
    engine_open_as(e, ctx, n_blocks, model, B, LAZYATTN_DTYPE_F32);
}

static void engine_close(engine *e) {
    lazyattn_cache_destroy(e->cache);
    lazyattn_attention_destroy(e->attn);
    lazyattn_pool_destroy(e->pool);
}

/*
 * Runs [docs...] [question] through the cache: writes what the plan
 * prefills (every layer), commits, prefills the question on every layer.
 * out: [L, NQ, NQH, D]; actions: [n_docs]. Checks each layer against the
 * float64 reference over the whole prompt at absolute positions.
 */
static void run_request(engine *e, int n_docs, const int *ids, float *out,
                        lazyattn_segment_action *actions) {
    int32_t tok[N_DOCS][64];
    const int32_t *docs[N_DOCS];
    int32_t lens[N_DOCS];
    for (int i = 0; i < n_docs; i++) {
        doc_tokens(ids[i], tok[i]);
        docs[i] = tok[i];
        lens[i] = doc_len[ids[i]];
    }
    int32_t question[NQ] = {5, 6, 7, 8, 9};
    lazyattn_request_desc d = {0, NULL, n_docs, docs, lens, NQ, question, 0};
    lazyattn_request *req;
    lt_assert_status(lazyattn_request_create(e->cache, &d, &req), LAZYATTN_STATUS_OK);
    lazyattn_plan p;
    lazyattn_request_get_plan(req, &p);
    int n_pos = p.n_positions;
    for (int i = 0; i < n_docs; i++) actions[i] = p.segments[i].action;
    float *k = malloc(sizeof(float) * n_pos * ROW), *v = malloc(sizeof(float) * n_pos * ROW);
    float *q = malloc(sizeof(float) * NQ * NQH * D);
    double *ref = malloc(sizeof(double) * NQ * NQH * D);
    int32_t *kpos = malloc(sizeof(int32_t) * n_pos), qpos[NQ];
    assert_true(k && v && q && ref && kpos);
    for (int t = 0; t < n_pos; t++) kpos[t] = t;
    for (int t = 0; t < NQ; t++) qpos[t] = n_pos - NQ + t;
    for (int l = 0; l < L; l++) {
        lt_rng r = {0x9E57ull + (uint64_t)l};
        lt_fill(&r, k + (size_t)(n_pos - NQ) * ROW, (size_t)NQ * ROW, 1.0f);
        lt_fill(&r, v + (size_t)(n_pos - NQ) * ROW, (size_t)NQ * ROW, 1.0f);
        lt_fill(&r, q, (size_t)NQ * NQH * D, 2.0f);
        for (int s = 0; s < p.n_segments; s++)
            if (p.segments[s].kind == LAZYATTN_SEGMENT_DOCUMENT)
                doc_kv(ids[p.segments[s].doc_index], l, k + (size_t)p.segments[s].logical_start * ROW,
                       v + (size_t)p.segments[s].logical_start * ROW);
        if (p.n_prefill) {
            float *pk = malloc(sizeof(float) * p.n_prefill * ROW);
            float *pv = malloc(sizeof(float) * p.n_prefill * ROW);
            for (int i = 0; i < p.n_prefill; i++) {
                memcpy(pk + (size_t)i * ROW, k + (size_t)p.prefill_pos[i] * ROW, sizeof(float) * ROW);
                memcpy(pv + (size_t)i * ROW, v + (size_t)p.prefill_pos[i] * ROW, sizeof(float) * ROW);
            }
            cl_mem km = lt_buffer(e->ctx, pk, sizeof(float) * p.n_prefill * ROW);
            cl_mem vm = lt_buffer(e->ctx, pv, sizeof(float) * p.n_prefill * ROW);
            cl_mem sm = lt_buffer(e->ctx, p.prefill_slots, sizeof(int32_t) * p.n_prefill);
            cl_mem stm = lt_buffer(e->ctx, p.prefill_stored_pos, sizeof(int32_t) * p.n_prefill);
            lt_assert_status(lazyattn_write_kv(e->attn, e->pool, l, p.n_prefill, km, vm, sm, stm,
                                               NULL, NULL),
                             LAZYATTN_STATUS_OK);
            clReleaseMemObject(km);
            clReleaseMemObject(vm);
            clReleaseMemObject(sm);
            clReleaseMemObject(stm);
            free(pk);
            free(pv);
        }
        cl_mem qm = lt_buffer(e->ctx, q, sizeof(float) * NQ * NQH * D);
        cl_mem qpm = lt_buffer(e->ctx, qpos, sizeof qpos);
        cl_mem tm = lt_buffer(e->ctx, p.table, sizeof(uint64_t) * p.n_entries);
        cl_mem epm = lt_buffer(e->ctx, p.entry_pos, sizeof(int32_t) * p.n_entries);
        cl_mem om = lt_buffer(e->ctx, NULL, sizeof(float) * NQ * NQH * D);
        lt_assert_status(lazyattn_rope_apply(e->attn, NQ, NQH, qm, qpm, NULL, NULL),
                         LAZYATTN_STATUS_OK);
        lazyattn_prefill_args a = {NQ, p.n_entries, qm, qpm, tm, epm, om};
        lt_assert_status(lazyattn_prefill(e->attn, e->pool, l, &a, NULL, NULL), LAZYATTN_STATUS_OK);
        lt_assert_status(lazyattn_attention_check(e->attn, NULL), LAZYATTN_STATUS_OK);
        float *o = out + (size_t)l * NQ * NQH * D;
        lt_read(e->ctx, om, o, sizeof(float) * NQ * NQH * D);
        clReleaseMemObject(qm);
        clReleaseMemObject(qpm);
        clReleaseMemObject(tm);
        clReleaseMemObject(epm);
        clReleaseMemObject(om);
        lazyattn_reference_args ra = {NQ, n_pos, q, qpos, k, v, kpos, ref};
        lt_assert_status(lazyattn_reference_attention(&e->c, &ra), LAZYATTN_STATUS_OK);
        double err = lazyattn_normalised_error(o, ref, (size_t)NQ * NQH * D);
        double tol = e->dtype == LAZYATTN_DTYPE_F32 ? 2e-5 : 2e-3;
        if (err > tol) print_error("layer %d: normalised error %.3g\n", l, err);
        assert_true(err <= tol);
    }
    lt_assert_status(lazyattn_request_commit(req), LAZYATTN_STATUS_OK);
    lazyattn_request_destroy(req);
    lt_assert_status(lazyattn_cache_validate(e->cache), LAZYATTN_STATUS_OK);
    free(k);
    free(v);
    free(q);
    free(ref);
    free(kpos);
}

static uint64_t hash_of(int id) {
    int32_t tok[64];
    doc_tokens(id, tok);
    uint64_t h;
    lt_assert_status(lazyattn_doc_hash(MODEL, tok, doc_len[id], &h), LAZYATTN_STATUS_OK);
    return h;
}

static void run_docs(engine *e, int n, const int *ids, lazyattn_segment_action *actions) {
    float *out = malloc(sizeof(float) * OUT_N);
    assert_non_null(out);
    run_request(e, n, ids, out, actions);
    free(out);
}

static lazyattn_cache_stats stats_of(const engine *e) {
    lazyattn_cache_stats s;
    lt_assert_status(lazyattn_cache_get_stats(e->cache, &s), LAZYATTN_STATUS_OK);
    return s;
}

/* Every document lookup is a GPU hit, a tier hit or a recompute. */
static void check_accounting(const engine *e) {
    lazyattn_cache_stats s = stats_of(e);
    assert_int_equal(s.hits + s.tier_hits + s.misses, s.lookups);
    assert_int_equal(s.doc_tokens - s.hit_tokens - s.tier_hit_tokens, s.recomputed_tokens);
    assert_int_equal(s.tier_lookups, s.tier_hits + s.tier_misses + s.tier_errors + s.tier_rejected);
    lt_assert_status(lazyattn_cache_validate(e->cache), LAZYATTN_STATUS_OK);
}

static void test_refusals(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_host(1 << 20, &s), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier(NULL, s, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    static uint64_t zeros[64];
    lt_assert_status(lazyattn_cache_set_tier((lazyattn_cache *)zeros, s, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "not a live cache"));
    lt_assert_status(lazyattn_cache_set_tier((lazyattn_cache *)s, s, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    engine e;
    engine_open(&e, ctx, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(e.cache, s, (lazyattn_tier_mode)3),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_set_tier(e.cache, s, (lazyattn_tier_mode)-1),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_set_tier(e.cache, (lazyattn_store *)e.cache,
                                             LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "not a live store"));
    lt_assert_status(lazyattn_cache_set_tier(e.cache, s, LAZYATTN_TIER_WRITE_BACK),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier(e.cache, NULL, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK); /* detached */
    /* without a tier, nothing of it is counted */
    int ids[2] = {0, 1};
    lazyattn_segment_action a[2];
    run_docs(&e, 2, ids, a);
    lazyattn_cache_stats st = stats_of(&e);
    assert_int_equal(st.tier_lookups + st.tier_hits + st.tier_writes + st.tier_errors, 0);
    assert_int_equal(st.recomputed_tokens, doc_len[0] + doc_len[1]);
    engine_close(&e);
    /* only LAZY caches have a tier */
    lazyattn_cache_policy others[3] = {LAZYATTN_CACHE_POLICY_POSITION, LAZYATTN_CACHE_POLICY_PREFIX,
                                       LAZYATTN_CACHE_POLICY_NONE};
    lazyattn_pool_config pc = {L, NKV, D, B, LAZYATTN_DTYPE_F32, (uint64_t)32 * 2 * L * B * ROW * 4};
    lazyattn_pool *pool;
    lt_assert_status(lazyattn_pool_create(ctx, &pc, &pool), LAZYATTN_STATUS_OK);
    for (int i = 0; i < 3; i++) {
        lazyattn_cache_config cc;
        lazyattn_cache_config_init(&cc);
        cc.policy = others[i];
        lazyattn_cache *c;
        lt_assert_status(lazyattn_cache_create(pool, &cc, &c), LAZYATTN_STATUS_OK);
        lt_assert_status(lazyattn_cache_set_tier(c, s, LAZYATTN_TIER_WRITE_THROUGH),
                         LAZYATTN_STATUS_UNSUPPORTED);
        assert_non_null(strstr(lazyattn_last_error(), "only a LAZY cache"));
        lt_assert_status(lazyattn_cache_set_tier(c, NULL, LAZYATTN_TIER_READ_ONLY),
                         LAZYATTN_STATUS_OK);
        lazyattn_cache_destroy(c);
    }
    lazyattn_pool_destroy(pool);
    /* a bookkeeping pool has no K/V to load or store */
    lt_assert_status(lazyattn_pool_create(NULL, &pc, &pool), LAZYATTN_STATUS_OK);
    lazyattn_cache *c;
    lt_assert_status(lazyattn_cache_create(pool, NULL, &c), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier(c, s, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_UNSUPPORTED);
    lazyattn_cache_destroy(c);
    lazyattn_pool_destroy(pool);
    lazyattn_store_destroy(s);
}

/* Inside the eviction callback the tier cannot be changed. */
static int evict_set_status = 1;
static void evict_try_set(void *user, lazyattn_cache *cache, const lazyattn_evicted *ev) {
    (void)ev;
    evict_set_status = lazyattn_cache_set_tier(cache, user, LAZYATTN_TIER_READ_ONLY);
}

/* Write-through to host memory; a second cache (another pool) loads every
 * document from it, in another order, at other positions. */
static void test_host_write_through(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_host(64 << 20, &s), LAZYATTN_STATUS_OK);
    engine a, b;
    engine_open(&a, ctx, 32, MODEL);
    engine_open(&b, ctx, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(a.cache, s, LAZYATTN_TIER_WRITE_THROUGH),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier(b.cache, s, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK);
    int first[3] = {0, 1, 2};
    lazyattn_segment_action act[3];
    run_docs(&a, 3, first, act);
    lazyattn_cache_stats sa = stats_of(&a);
    assert_int_equal(sa.tier_misses, 3); /* looked up first, then recomputed */
    assert_int_equal(sa.misses, 3);
    assert_int_equal(sa.tier_writes, 3);
    for (int i = 0; i < 3; i++) {
        int there = 0;
        lazyattn_doc_key k = {MODEL, hash_of(i)};
        lt_assert_status(lazyattn_store_exists(s, k, &there), LAZYATTN_STATUS_OK);
        assert_int_equal(there, 1);
    }
    check_accounting(&a);

    int second[2] = {2, 0};
    run_docs(&b, 2, second, act);
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    assert_int_equal(act[1], LAZYATTN_ACTION_REUSE);
    lazyattn_cache_stats sb = stats_of(&b);
    assert_int_equal(sb.tier_hits, 2);
    assert_int_equal(sb.tier_hit_tokens, doc_len[2] + doc_len[0]);
    assert_int_equal(sb.hits, 0);
    assert_int_equal(sb.misses, 0);
    assert_int_equal(sb.recomputed_tokens, 0);
    assert_int_equal(sb.imports, 2);
    assert_true(sb.tier_read_bytes > 0);
    check_accounting(&b);
    /* then: a GPU hit and a document no one has (a tier miss, recomputed) */
    int third[2] = {0, 3};
    run_docs(&b, 2, third, act);
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    assert_int_equal(act[1], LAZYATTN_ACTION_PREFILL);
    sb = stats_of(&b);
    assert_int_equal(sb.hits, 1);
    assert_int_equal(sb.tier_hits, 2);
    assert_int_equal(sb.misses, 1);
    assert_int_equal(sb.tier_misses, 1);
    assert_int_equal(sb.recomputed_tokens, doc_len[3]);
    assert_int_equal(sb.tier_writes, 0); /* read only */
    check_accounting(&b);

    /* the plan says which tokens came from the tier */
    lazyattn_cache_trim(b.cache, 0);
    int32_t tok[64];
    doc_tokens(1, tok);
    const int32_t *docs[1] = {tok};
    int32_t lens[1] = {doc_len[1]};
    int32_t question[NQ] = {5, 6, 7, 8, 9};
    lazyattn_request_desc d = {0, NULL, 1, docs, lens, NQ, question, 0};
    lazyattn_request *req;
    lt_assert_status(lazyattn_request_create(b.cache, &d, &req), LAZYATTN_STATUS_OK);
    lazyattn_plan p;
    lazyattn_request_get_plan(req, &p);
    assert_int_equal(p.tier_tokens, doc_len[1]);
    assert_int_equal(p.hit_tokens, 0);
    assert_int_equal(p.n_prefill, NQ);
    lazyattn_request_destroy(req);

    /* the tier cannot be changed from the eviction callback */
    lt_assert_status(lazyattn_cache_set_evict_callback(b.cache, evict_try_set, s),
                     LAZYATTN_STATUS_OK);
    lazyattn_cache_trim(b.cache, 0);
    assert_int_equal(evict_set_status, LAZYATTN_STATUS_INVALID_ARGUMENT);
    engine_close(&a);
    engine_close(&b);
    lazyattn_store_destroy(s);
}

/* Write-back to a directory: an entry evicted from a small pool is written
 * once, and a later request loads it instead of recomputing it. */
static void test_dir_write_back(void **state) {
    lazyattn_context *ctx = *state;
    char dir[] = "/tmp/lazyattn-tier-XXXXXX";
    assert_non_null(mkdtemp(dir));
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_dir(dir, &s), LAZYATTN_STATUS_OK);
    engine e;
    engine_open(&e, ctx, 4, MODEL); /* 4 blocks: one request of document 0 */
    lt_assert_status(lazyattn_cache_set_tier(e.cache, s, LAZYATTN_TIER_WRITE_BACK),
                     LAZYATTN_STATUS_OK);
    lazyattn_segment_action act[1];
    for (int id = 0; id < 4; id++) run_docs(&e, 1, &id, act);
    lazyattn_cache_stats st = stats_of(&e);
    assert_true(st.evictions >= 2);
    assert_int_equal(st.tier_writes, st.evictions); /* each evicted document written once */
    assert_int_equal(st.misses, 4);
    int zero = 0;
    run_docs(&e, 1, &zero, act); /* evicted before: from the directory */
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    st = stats_of(&e);
    assert_int_equal(st.tier_hits, 1);
    assert_int_equal(st.misses, 4);
    check_accounting(&e);
    /* evicted again: in the store already, not written twice */
    int64_t writes = st.tier_writes;
    lazyattn_cache_trim(e.cache, 0);
    assert_int_equal(stats_of(&e).tier_writes, writes);
    engine_close(&e);
    lazyattn_store_destroy(s);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Values that must never enter the cache: a flipped payload byte, a
 * truncated value, another document's export under this key, another
 * model's export of the same tokens. Each is a recompute, counted. */
static void test_bad_values(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_host(64 << 20, &s), LAZYATTN_STATUS_OK);
    engine a, other;
    engine_open(&a, ctx, 32, MODEL);
    engine_open(&other, ctx, 32, MODEL + 1);
    int ids[2] = {0, 1};
    lazyattn_segment_action act[2];
    run_docs(&a, 2, ids, act);
    run_docs(&other, 1, ids, act);
    size_t n0, n1, nx;
    lt_assert_status(lazyattn_cache_export_size(a.cache, hash_of(0), &n0), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_export_size(a.cache, hash_of(1), &n1), LAZYATTN_STATUS_OK);
    int32_t tok[64];
    doc_tokens(0, tok);
    uint64_t hx;
    lazyattn_doc_hash(MODEL + 1, tok, doc_len[0], &hx);
    lt_assert_status(lazyattn_cache_export_size(other.cache, hx, &nx), LAZYATTN_STATUS_OK);
    uint8_t *v0 = malloc(n0), *v1 = malloc(n1), *vx = malloc(nx), *bad = malloc(n0);
    size_t w;
    lt_assert_status(lazyattn_cache_export(a.cache, hash_of(0), v0, n0, &w), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_export(a.cache, hash_of(1), v1, n1, &w), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_export(other.cache, hx, vx, nx, &w), LAZYATTN_STATUS_OK);
    lazyattn_doc_key key0 = {MODEL, hash_of(0)};
    struct {
        const uint8_t *data;
        size_t n;
        int flip; /* byte to flip, -1 none */
    } cases[] = {{v0, n0, (int)n0 - 5},   {v0, n0, LAZYATTN_KV_HEADER_BYTES + 3},
                 {v0, n0, 20},            {v0, n0 - 100, -1},
                 {v0, 50, -1},            {v1, n1, -1},
                 {vx, nx, -1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(bad, cases[i].data, cases[i].n);
        if (cases[i].flip >= 0) bad[cases[i].flip] ^= 0x40;
        lt_assert_status(lazyattn_store_put(s, key0, bad, cases[i].n), LAZYATTN_STATUS_OK);
        engine b;
        engine_open(&b, ctx, 32, MODEL);
        lt_assert_status(lazyattn_cache_set_tier(b.cache, s, LAZYATTN_TIER_READ_ONLY),
                         LAZYATTN_STATUS_OK);
        int zero = 0;
        run_docs(&b, 1, &zero, act); /* checked against the reference inside */
        assert_int_equal(act[0], LAZYATTN_ACTION_PREFILL);
        lazyattn_cache_stats st = stats_of(&b);
        assert_int_equal(st.tier_rejected, 1);
        assert_int_equal(st.tier_hits, 0);
        assert_int_equal(st.imports, 0);
        assert_int_equal(st.misses, 1);
        assert_int_equal(st.n_entries, 1); /* the recomputed document only */
        check_accounting(&b);
        engine_close(&b);
    }
    /* the good value loads */
    lt_assert_status(lazyattn_store_put(s, key0, v0, n0), LAZYATTN_STATUS_OK);
    engine b;
    engine_open(&b, ctx, 32, MODEL);
    lazyattn_cache_set_tier(b.cache, s, LAZYATTN_TIER_READ_ONLY);
    int zero = 0;
    run_docs(&b, 1, &zero, act);
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    assert_int_equal(stats_of(&b).tier_hits, 1);
    engine_close(&b);
    free(v0);
    free(v1);
    free(vx);
    free(bad);
    engine_close(&a);
    engine_close(&other);
    lazyattn_store_destroy(s);
}

/* A store that fails every call (down, or a full disk on writes). */
static int fail_get(void *impl, lazyattn_doc_key k, lazyattn_store_value *v) {
    (void)k, (void)v;
    ++*(int *)impl;
    return LAZYATTN_STATUS_IO;
}
static void fail_release(void *impl, lazyattn_store_value *v) { (void)impl, (void)v; }
static int fail_put(void *impl, lazyattn_doc_key k, const void *d, size_t n) {
    (void)k, (void)d, (void)n;
    ++*(int *)impl;
    errno = ENOSPC;
    return LAZYATTN_STATUS_IO;
}
static int fail_exists(void *impl, lazyattn_doc_key k, int *e) {
    (void)impl, (void)k;
    *e = 0;
    return LAZYATTN_STATUS_OK;
}
static int fail_remove(void *impl, lazyattn_doc_key k) {
    (void)impl, (void)k;
    return LAZYATTN_STATUS_IO;
}

static void test_failing_store(void **state) {
    lazyattn_context *ctx = *state;
    int calls = 0;
    lazyattn_store_ops ops = {"failing", fail_get, fail_release, fail_put, fail_exists, fail_remove, NULL};
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create(&ops, &calls, &s), LAZYATTN_STATUS_OK);
    assert_string_equal(lazyattn_store_name(s), "failing");
    engine e;
    engine_open(&e, ctx, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(e.cache, s, LAZYATTN_TIER_WRITE_THROUGH),
                     LAZYATTN_STATUS_OK);
    int ids[2] = {3, 1};
    lazyattn_segment_action act[2];
    run_docs(&e, 2, ids, act); /* recomputed, checked against the reference; commit OK */
    lazyattn_cache_stats st = stats_of(&e);
    assert_int_equal(st.tier_errors, 2);
    assert_int_equal(st.tier_write_errors, 2);
    assert_int_equal(st.tier_writes, 0);
    assert_int_equal(st.misses, 2);
    assert_int_equal(calls, 4);
    assert_int_equal(st.n_entries, 2); /* the cache kept both */
    run_docs(&e, 2, ids, act);         /* GPU hits */
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    assert_int_equal(stats_of(&e).hits, 2);
    check_accounting(&e);
    engine_close(&e);
    lazyattn_store_destroy(s);
}

/* A real full disk: a 64 KiB tmpfs (where the test may mount one). */
static void test_full_disk(void **state) {
    lazyattn_context *ctx = *state;
    char dir[] = "/tmp/lazyattn-full-XXXXXX";
    assert_non_null(mkdtemp(dir));
    if (mount("tmpfs", dir, "tmpfs", 0, "size=64k") != 0) {
        print_message("cannot mount a tmpfs (%s): the full-disk test is skipped; "
                      "test_failing_store injects the failure instead\n", strerror(errno));
        rmdir(dir);
        skip();
    }
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_dir(dir, &s), LAZYATTN_STATUS_OK);
    engine e;
    engine_open(&e, ctx, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(e.cache, s, LAZYATTN_TIER_WRITE_THROUGH),
                     LAZYATTN_STATUS_OK);
    int id = 0;
    lazyattn_segment_action act[1];
    run_docs(&e, 1, &id, act); /* 37 tokens: ~96 KiB, more than the disk */
    lazyattn_cache_stats st = stats_of(&e);
    assert_int_equal(st.tier_write_errors, 1);
    assert_int_equal(st.n_entries, 1);
    size_t n, w;
    lt_assert_status(lazyattn_cache_export_size(e.cache, hash_of(0), &n), LAZYATTN_STATUS_OK);
    uint8_t *buf = malloc(n);
    lt_assert_status(lazyattn_cache_export(e.cache, hash_of(0), buf, n, &w), LAZYATTN_STATUS_OK);
    lazyattn_doc_key k = {MODEL, hash_of(0)};
    lt_assert_status(lazyattn_store_put(s, k, buf, n), LAZYATTN_STATUS_IO);
    assert_non_null(strstr(lazyattn_last_error(), "No space left on device"));
    assert_non_null(strstr(lazyattn_last_error(), "nothing published"));
    lazyattn_store_value v;
    lt_assert_status(lazyattn_store_get(s, k, &v), LAZYATTN_STATUS_NOT_FOUND);
    run_docs(&e, 1, &id, act); /* the cache is intact: a GPU hit */
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    check_accounting(&e);
    free(buf);
    engine_close(&e);
    lazyattn_store_destroy(s);
    assert_int_equal(umount(dir), 0);
    rmdir(dir);
}

// ---- other processes and Redis ----

static int redis_target(char *host, size_t n, int *port) {
    const char *t = getenv("LAZYATTN_TEST_REDIS");
    if (!t || !*t) return 0;
    const char *colon = strrchr(t, ':');
    if (!colon || (size_t)(colon - t) >= n) return 0;
    memcpy(host, t, (size_t)(colon - t));
    host[colon - t] = '\0';
    *port = atoi(colon + 1);
    return *port > 0;
}

static char redis_prefix[64];

/* "dir:PATH" or "redis:HOST:PORT" */
static int open_spec(const char *spec, lazyattn_store **s) {
    if (strncmp(spec, "dir:", 4) == 0) return lazyattn_store_create_dir(spec + 4, s);
    if (strncmp(spec, "redis:", 6) == 0) {
        char host[128];
        const char *colon = strrchr(spec + 6, ':');
        if (!colon) return -1;
        snprintf(host, sizeof host, "%.*s", (int)(colon - spec - 6), spec + 6);
        lazyattn_redis_config rc;
        lazyattn_redis_config_init(&rc);
        rc.host = host;
        rc.port = atoi(colon + 1);
        rc.chunk_bytes = 4096; /* several chunks per document */
        rc.prefix = redis_prefix;
        rc.timeout_ms = 1000;
        return lazyattn_store_create_redis(&rc, s);
    }
    return -1;
}

/* The second process: computes documents 0..3 and writes them through. */
static int child_main(const char *spec, const char *prefix) {
    snprintf(redis_prefix, sizeof redis_prefix, "%s", prefix);
    lazyattn_context *ctx;
    if (lazyattn_context_create(NULL, &ctx)) return 3;
    lazyattn_store *s;
    if (open_spec(spec, &s)) return 4;
    engine e;
    engine_open(&e, ctx, 32, MODEL);
    if (lazyattn_cache_set_tier(e.cache, s, LAZYATTN_TIER_WRITE_THROUGH)) return 5;
    int ids[4] = {0, 1, 2, 3};
    lazyattn_segment_action act[4];
    run_docs(&e, 4, ids, act);
    int ok = stats_of(&e).tier_writes == 4;
    engine_close(&e);
    lazyattn_store_destroy(s);
    lazyattn_context_destroy(ctx);
    return ok ? 0 : 6;
}

static void from_other_process(lazyattn_context *ctx, const char *spec) {
    pid_t pid;
    char *argv[] = {self_path, "--tier-child", (char *)spec, redis_prefix, NULL};
    fflush(NULL);
    assert_int_equal(posix_spawn(&pid, self_path, NULL, NULL, argv, environ), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    lazyattn_store *s;
    lt_assert_status(open_spec(spec, &s), LAZYATTN_STATUS_OK);
    engine e;
    engine_open(&e, ctx, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(e.cache, s, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK);
    int ids[4] = {3, 1, 0, 2};
    lazyattn_segment_action act[4];
    run_docs(&e, 4, ids, act); /* against the reference */
    for (int i = 0; i < 4; i++) assert_int_equal(act[i], LAZYATTN_ACTION_REUSE);
    lazyattn_cache_stats st = stats_of(&e);
    assert_int_equal(st.tier_hits, 4);
    assert_int_equal(st.recomputed_tokens, 0);
    check_accounting(&e);
    for (int i = 0; i < 4; i++) {
        lazyattn_doc_key k = {MODEL, hash_of(i)};
        lt_assert_status(lazyattn_store_delete(s, k), LAZYATTN_STATUS_OK);
    }
    engine_close(&e);
    lazyattn_store_destroy(s);
}

static void test_dir_other_process(void **state) {
    char dir[] = "/tmp/lazyattn-proc-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char spec[64];
    snprintf(spec, sizeof spec, "dir:%s", dir);
    from_other_process(*state, spec);
    assert_int_equal(rmdir(dir), 0); /* every file deleted, no temporary left */
}

static void test_redis_other_process(void **state) {
#ifndef LAZYATTN_HAVE_HIREDIS
    (void)state;
    print_message("Redis tests skipped: built without hiredis\n");
    skip();
#endif
    char host[128], spec[200];
    int port = 0;
    if (!redis_target(host, sizeof host, &port)) {
        print_message("Redis tests skipped: LAZYATTN_TEST_REDIS unset\n");
        skip();
    }
    snprintf(spec, sizeof spec, "redis:%s:%d", host, port);
    from_other_process(*state, spec);
}

/* A port where nothing listens (bound, then closed). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* A Redis server of the test's own, stopped in the middle of the run:
 * loads fail and writes fail (counted), requests recompute and still match
 * the reference, the caches stay valid. */
static void test_redis_stopped(void **state) {
#ifndef LAZYATTN_HAVE_HIREDIS
    (void)state;
    print_message("Redis tests skipped: built without hiredis\n");
    skip();
#endif
    lazyattn_context *ctx = *state;
    char host[128];
    int shared_port = 0;
    if (!redis_target(host, sizeof host, &shared_port)) {
        print_message("Redis tests skipped: LAZYATTN_TEST_REDIS unset\n");
        skip();
    }
    int port = free_port();
    char port_text[16];
    snprintf(port_text, sizeof port_text, "%d", port);
    char *argv[] = {"redis-server", "--port", port_text, "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--loglevel", "warning", "--logfile", "/dev/null", NULL};
    pid_t pid;
    fflush(NULL);
    assert_int_equal(posix_spawnp(&pid, "redis-server", NULL, NULL, argv, environ), 0);
    char spec[64];
    snprintf(spec, sizeof spec, "redis:127.0.0.1:%d", port);
    lazyattn_store *s = NULL;
    for (int i = 0; i < 100 && open_spec(spec, &s) != LAZYATTN_STATUS_OK; i++) {
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    assert_non_null(s);
    engine a, b;
    engine_open(&a, ctx, 32, MODEL);
    engine_open(&b, ctx, 32, MODEL);
    lazyattn_cache_set_tier(a.cache, s, LAZYATTN_TIER_WRITE_THROUGH);
    lazyattn_cache_set_tier(b.cache, s, LAZYATTN_TIER_READ_ONLY);
    int ids[2] = {0, 1};
    lazyattn_segment_action act[2];
    run_docs(&a, 2, ids, act);
    assert_int_equal(stats_of(&a).tier_writes, 2);
    run_docs(&b, 1, ids, act); /* document 0 from Redis */
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    assert_int_equal(stats_of(&b).tier_hits, 1);
    kill(pid, SIGKILL); /* the server goes away mid-run */
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    int next[2] = {1, 0};
    run_docs(&b, 2, next, act); /* 1: the tier fails, recomputed; 0: a GPU hit */
    assert_int_equal(act[0], LAZYATTN_ACTION_PREFILL);
    assert_int_equal(act[1], LAZYATTN_ACTION_REUSE);
    lazyattn_cache_stats sb = stats_of(&b);
    assert_int_equal(sb.tier_errors, 1);
    assert_int_equal(sb.tier_hits, 1);
    check_accounting(&b);
    int three = 3;
    run_docs(&a, 1, &three, act); /* its write-through fails: counted, cache intact */
    lazyattn_cache_stats sa = stats_of(&a);
    assert_int_equal(sa.tier_write_errors, 1);
    assert_int_equal(sa.tier_errors, 1); /* its lookup failed first */
    assert_int_equal(sa.n_entries, 3);
    check_accounting(&a);
    engine_close(&a);
    engine_close(&b);
    lazyattn_store_destroy(s);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--tier-child") == 0) return child_main(argv[2], argv[3]);
    ssize_t len = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (len <= 0) snprintf(self_path, sizeof self_path, "%s", argv[0]);
    snprintf(redis_prefix, sizeof redis_prefix, "lazyattn-tier-test-%ld", (long)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_host_write_through),
        cmocka_unit_test(test_dir_write_back),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_failing_store),
        cmocka_unit_test(test_full_disk),
        cmocka_unit_test(test_dir_other_process),
        cmocka_unit_test(test_redis_other_process),
        cmocka_unit_test(test_redis_stopped),
    };
    return cmocka_run_group_tests_name("doc_tier", tests, lt_context_setup, lt_context_teardown);
}
