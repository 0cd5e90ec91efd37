/* SPDX-License-Identifier: Apache-2.0 */
/* The tier of a LAZY cache on the default device (PoCL in CI): documents
 * written through (commit) or back (eviction) to the host, directory and
 * Redis stores and loaded by another cache (and another process) give
 * attention output that matches the float64 reference; GPU hits, tier hits
 * and recomputes are counted apart; corrupt, truncated, mismatched values,
 * a file rewritten in place or a FIFO in the directory store, an engine's
 * value changing under the tier, a failing store, a full disk and a Redis
 * server stopped mid-run cost a recompute (counted), never a wrong answer,
 * and leave the cache valid. Documents also go through a Redis Cluster and
 * a Redis with an ACL user (LAZYATTN_TEST_REDIS_CLUSTER, _AUTH).
 * Non-LAZY caches refuse a tier. The Redis tests need redis-server and
 * LAZYATTN_TEST_REDIS (set by CI); without it they are reported skipped. */
#include "doc_engine.h"
#include "redis_server.h"
#include "rewriter.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
static char self_path[4096];

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
    assert_string_equal(lazyattn_last_error(), "lazyattn_cache_set_tier: cache is NULL");
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
    lazyattn_pool_config pc = {L, NKV, D, B, LAZYATTN_DTYPE_F32, (uint64_t)32 * 2 * L * B * ROW * 4,
                               LAZYATTN_KV_LAYOUT_ROWS};
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
/* A host store written through by engine a and read by engine b (its
 * cache retaining b_retain_blocks blocks; 0: its pool's budget). */
static lazyattn_store *host_writer_reader(lazyattn_context *ctx, engine *a, engine *b,
                                          int b_retain_blocks) {
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_host(64 << 20, &s), LAZYATTN_STATUS_OK);
    engine_open(a, ctx, 32, MODEL);
    engine_open(b, ctx, 32, MODEL);
    if (b_retain_blocks) {
        lazyattn_pool_info info;
        lt_assert_status(lazyattn_pool_get_info(b->pool, &info), LAZYATTN_STATUS_OK);
        lazyattn_cache_destroy(b->cache);
        lazyattn_cache_config cc;
        lazyattn_cache_config_init(&cc);
        cc.model_id = MODEL;
        cc.retain_bytes = (uint64_t)b_retain_blocks * info.block_bytes;
        lt_assert_status(lazyattn_cache_create(b->pool, &cc, &b->cache), LAZYATTN_STATUS_OK);
    }
    lt_assert_status(lazyattn_cache_set_tier(a->cache, s, LAZYATTN_TIER_WRITE_THROUGH),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier(b->cache, s, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK);
    return s;
}

static void test_host_write_through(void **state) {
    engine a, b;
    lazyattn_store *s = host_writer_reader(*state, &a, &b, 0);
    int first[3] = {0, 1, 2};
    lazyattn_segment_action act[3];
    run_docs(&a, 3, first, act);
    lazyattn_cache_stats sa = stats_of(&a);
    assert_int_equal(sa.tier_misses, 3); /* looked up first, then recomputed */
    assert_int_equal(sa.misses, 3);
    assert_int_equal(sa.tier_writes, 3);
    for (int i = 0; i < 3; i++) {
        int there = 0;
        lazyattn_doc_key k = key_of(i);
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
    /* written by a's tier into the host store: sealed, not checksummed again */
    assert_int_equal(sb.tier_loads_sealed, 2);
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
    int one = 1;
    lazyattn_request *req;
    lt_assert_status(request_of(&b, 1, &one, &req), LAZYATTN_STATUS_OK);
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

/* A request whose documents all come from the tier while its cache retains
 * less than one of them (the H100's 1 GiB rag_bench row: every load was
 * trimmed away at once, then recomputed): each loaded document is kept for
 * the request (tier hits, nothing recomputed, output matching the float64
 * reference), and the release trims to the retained budget. */
static void test_tier_load_over_retained(void **state) {
    engine a, b;
    /* b retains one block: less than any document */
    lazyattn_store *s = host_writer_reader(*state, &a, &b, 1);
    int docs[3] = {0, 3, 4};
    lazyattn_segment_action act[3];
    run_docs(&a, 3, docs, act);
    int order[3] = {4, 0, 3};
    float *out = malloc(OUT_N * sizeof *out);
    assert_non_null(out);
    run_request(&b, 3, order, out, act); /* checked against float64 inside */
    free(out);
    for (int i = 0; i < 3; i++) assert_int_equal(act[i], LAZYATTN_ACTION_REUSE);
    lazyattn_cache_stats sb = stats_of(&b);
    assert_int_equal(sb.tier_hits, 3);
    assert_int_equal(sb.tier_hit_tokens, doc_len[0] + doc_len[3] + doc_len[4]);
    assert_int_equal(sb.tier_errors, 0);
    assert_int_equal(sb.recomputed_tokens, 0);
    assert_int_equal(sb.imports, 3);
    check_accounting(&b);
    /* released: trimmed to the retained budget (one block holds no document) */
    assert_int_equal(stats_of(&b).n_entries, 0);
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
    assert_int_equal(st.tier_loads_sealed, 0); /* from a disk: checksummed */
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
    lazyattn_doc_key key0 = key_of(0);
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
    /* an engine's put is never sealed: the flipped values above were caught */
    assert_int_equal(stats_of(&b).tier_loads_sealed, 0);
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

// ---- values that change under the reader ----

/* After a tier hit or an import, the cache's copy of document 0 must be
 * exactly `want` (the bytes the checksum passed): exported again and
 * compared. 1 when it is. */
static int cached_as(engine *e, const uint8_t *want, size_t n) {
    size_t m = 0, w = 0;
    if (lazyattn_cache_export_size(e->cache, hash_of(0), &m) || m != n) return 0;
    uint8_t *got = malloc(n);
    int same = got && !lazyattn_cache_export(e->cache, hash_of(0), got, n, &w) && w == n &&
               memcmp(got, want, n) == 0;
    free(got);
    return same;
}

/* An export of document 0 (*n bytes) and a copy of it with two K bytes of
 * real tokens changed (its checksum fails). */
static void export_doc0(lazyattn_context *ctx, uint8_t **v0, uint8_t **bad, size_t *n) {
    engine a;
    engine_open(&a, ctx, 32, MODEL);
    int zero = 0;
    lazyattn_segment_action act[1];
    run_docs(&a, 1, &zero, act);
    size_t w;
    lt_assert_status(lazyattn_cache_export_size(a.cache, hash_of(0), n), LAZYATTN_STATUS_OK);
    *v0 = malloc(*n);
    *bad = malloc(*n);
    assert_true(*v0 && *bad);
    lt_assert_status(lazyattn_cache_export(a.cache, hash_of(0), *v0, *n, &w), LAZYATTN_STATUS_OK);
    memcpy(*bad, *v0, *n);
    size_t kv = LAZYATTN_KV_HEADER_BYTES + 4 * (size_t)doc_len[0];
    (*bad)[kv + 3] ^= 0x40;                /* layer 0, K of token 0 */
    (*bad)[kv + 4 * ROW * 20 + 7] ^= 0x40; /* layer 0, K of token 24 (block 1) */
    engine_close(&a);
}

/* The directory store's file of document 0 rewritten in place (not by the
 * store's write-then-rename) while it is read, imported and loaded by the
 * tier: every get is a clear status or bytes that import checks; never a
 * signal (a mapping truncated under its reader raised SIGBUS); every
 * import or tier hit holds exactly the bytes the checksum passed (through
 * a mapping, the upload read the file again, after the check). A FIFO at
 * the document's name is a recompute, at once. */
static void test_dir_rewritten_in_place(void **state) {
    lazyattn_context *ctx = *state;
    uint8_t *v0, *bad;
    size_t n;
    export_doc0(ctx, &v0, &bad, &n);
    char dir[] = "/tmp/lazyattn-inplace-XXXXXX", path[600];
    assert_non_null(mkdtemp(dir));
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_dir(dir, &s), LAZYATTN_STATUS_OK);
    lazyattn_doc_key key0 = key_of(0);
    lt_assert_status(lazyattn_store_put(s, key0, v0, n), LAZYATTN_STATUS_OK);
    /* the store's file name: "<model_id>-<digest>.lzkv" */
    int at = snprintf(path, sizeof path, "%s/%016llx-", dir, (unsigned long long)MODEL);
    for (int i = 0; i < 32; i++) at += snprintf(path + at, sizeof path - (size_t)at, "%02x",
                                                key0.digest[i]);
    snprintf(path + at, sizeof path - (size_t)at, ".lzkv");
    rewriter r;
    assert_int_equal(rewriter_start(&r, path, v0, bad, n, 500), 0);
    engine b, c;
    engine_open(&b, ctx, 32, MODEL);
    engine_open(&c, ctx, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(c.cache, s, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK);
    int n_get = 0, n_imported = 0, n_refused = 0, n_hits = 0;
    double t0 = rewriter_now();
    /* until the file was rewritten 40 times (3 s at most) */
    for (int i = 0; atomic_load(&r.rewrites) < 40 && rewriter_now() - t0 < 3.0; i++) {
        lazyattn_store_value v;
        int st = lazyattn_store_get(s, key0, &v);
        if (st == LAZYATTN_STATUS_FORMAT) continue; /* empty, or shrank under the read */
        lt_assert_status(st, LAZYATTN_STATUS_OK);
        n_get++;
        st = lazyattn_cache_import(b.cache, v.data, v.size, NULL);
        if (st == LAZYATTN_STATUS_OK) {
            n_imported++;
            assert_true(cached_as(&b, v0, n));
            lazyattn_cache_trim(b.cache, 0);
        } else {
            lt_assert_status(st, LAZYATTN_STATUS_FORMAT); /* torn, or the changed value */
            n_refused++;
        }
        lazyattn_store_release(s, &v);
        if (i % 20 == 0) { /* through the tier: output checked against the reference */
            int zero = 0;
            lazyattn_segment_action act[1];
            run_docs(&c, 1, &zero, act);
            if (act[0] == LAZYATTN_ACTION_REUSE) {
                n_hits++;
                assert_true(cached_as(&c, v0, n));
            }
            lazyattn_cache_trim(c.cache, 0);
        }
    }
    rewriter_stop(&r);
    assert_false(r.failed);
    print_message("in-place rewrites: %d, gets %d: %d imported, %d refused; %d tier hits\n",
                  atomic_load(&r.rewrites), n_get, n_imported, n_refused, n_hits);
    check_accounting(&c);
    engine_close(&c);
    /* A FIFO at the document's name: refused at once (a read of it waited
     * for a writer, in request_create, for ever); alarm makes a hang fail. */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0644), 0);
    engine_open(&c, ctx, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(c.cache, s, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK);
    alarm(30);
    int zero = 0;
    lazyattn_segment_action act[1];
    run_docs(&c, 1, &zero, act);
    alarm(0);
    assert_int_equal(act[0], LAZYATTN_ACTION_PREFILL);
    assert_int_equal(stats_of(&c).tier_rejected, 1);
    check_accounting(&c);
    engine_close(&c);
    engine_close(&b);
    lazyattn_store_destroy(s);
    unlink(path);
    rmdir(dir);
    free(v0);
    free(bad);
}

/* An engine's store whose value is memory another party changes while the
 * tier reads it (a shared mapping, say): a thread flips a K byte of it
 * back and forth. The tier copies the value once, so each load is a
 * recompute (the copy's checksum fails) or a hit of exactly the original
 * bytes; a second read after the check would let the other byte in. */
typedef struct shared_value {
    uint8_t *data; /* changed in place by the flipper */
    size_t n, at;  /* the byte flipped */
    atomic_int stop;
} shared_value;

static int sv_get(void *impl, lazyattn_doc_key k, lazyattn_store_value *v) {
    shared_value *sv = impl;
    if (memcmp(k.digest, key_of(0).digest, sizeof k.digest) != 0) return LAZYATTN_STATUS_NOT_FOUND;
    v->data = sv->data;
    v->size = sv->n;
    return LAZYATTN_STATUS_OK;
}
static void sv_release(void *impl, lazyattn_store_value *v) { (void)impl, (void)v; }
static int sv_put(void *impl, lazyattn_doc_key k, const void *d, size_t n) {
    (void)impl, (void)k, (void)d, (void)n;
    return LAZYATTN_STATUS_IO;
}
static int sv_exists(void *impl, lazyattn_doc_key k, int *e) {
    (void)impl;
    *e = memcmp(k.digest, key_of(0).digest, sizeof k.digest) == 0;
    return LAZYATTN_STATUS_OK;
}
static int sv_remove(void *impl, lazyattn_doc_key k) {
    (void)impl, (void)k;
    return LAZYATTN_STATUS_IO;
}

static void *flip_loop(void *p) {
    shared_value *sv = p;
    while (!atomic_load(&sv->stop))
        __atomic_store_n(&sv->data[sv->at], (uint8_t)(sv->data[sv->at] ^ 0x40), __ATOMIC_RELAXED);
    return NULL;
}

static void test_engine_value_changes(void **state) {
    lazyattn_context *ctx = *state;
    uint8_t *v0, *bad;
    size_t n;
    export_doc0(ctx, &v0, &bad, &n);
    shared_value sv = {.data = malloc(n), .n = n,
                       .at = LAZYATTN_KV_HEADER_BYTES + 4 * (size_t)doc_len[0] + 3};
    assert_non_null(sv.data);
    memcpy(sv.data, v0, n);
    atomic_init(&sv.stop, 0);
    lazyattn_store_ops ops = {"shared", sv_get, sv_release, sv_put, sv_exists, sv_remove, NULL};
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create(&ops, &sv, &s), LAZYATTN_STATUS_OK);
    engine c;
    engine_open(&c, ctx, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(c.cache, s, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, flip_loop, &sv), 0);
    int hits = 0, recomputes = 0;
    for (int i = 0; i < 24; i++) {
        int zero = 0;
        lazyattn_segment_action act[1];
        run_docs(&c, 1, &zero, act); /* checked against the reference inside */
        if (act[0] == LAZYATTN_ACTION_REUSE) {
            hits++;
            assert_true(cached_as(&c, v0, n));
        } else {
            recomputes++;
        }
        lazyattn_cache_trim(c.cache, 0);
    }
    atomic_store(&sv.stop, 1);
    pthread_join(t, NULL);
    print_message("a changing engine value: %d tier hits, %d recomputes\n", hits, recomputes);
    lazyattn_cache_stats st = stats_of(&c);
    assert_int_equal(st.tier_hits, hits);
    assert_int_equal(st.tier_rejected, recomputes);
    check_accounting(&c);
    engine_close(&c);
    lazyattn_store_destroy(s);
    free(sv.data);
    free(v0);
    free(bad);
}

// ---- a store whose operations call back into the cache ----

/* The engine's store ops may call anything of the library. On the cache
 * they serve, reads answer, changes are refused (INVALID_ARGUMENT) and
 * destroys do nothing, with the reason in lazyattn_last_error(), so that
 * the call that runs them (request_create's load, commit's write-through,
 * an eviction's write-back) finishes on memory still its own. Under ASan
 * a use of freed memory fails the test. */
enum { OP_GET, OP_RELEASE, OP_PUT, OP_EXISTS, N_OPS };
static const char *const op_name[N_OPS] = {"get", "release", "put", "exists"};

typedef struct reentrant {
    lazyattn_store *inner; /* a host store does the storing */
    lazyattn_cache *cache;
    lazyattn_request *other; /* a live request of the cache, not being planned */
    const uint8_t *blob;     /* an export of document 0, to import */
    size_t blob_size;
    int hook[N_OPS];         /* call back into the cache from this op */
    int fired[N_OPS];
    int refused;             /* calls answered as they must be */
    char failure[256];       /* the first call that was not */
} reentrant;

static void expect(reentrant *t, const char *what, int got, int want, const char *msg) {
    if (got == want && (!msg || strstr(lazyattn_last_error(), msg))) {
        t->refused++;
        return;
    }
    if (!t->failure[0])
        snprintf(t->failure, sizeof t->failure, "%s: %s (%s), wanted %s: %s", what,
                 lazyattn_status_string(got), lazyattn_last_error(), lazyattn_status_string(want),
                 msg ? msg : "");
}

/* Every public call on the cache, from inside store op `op`. */
static void reenter(reentrant *t, int op) {
    if (!t->hook[op]) return;
    t->fired[op]++;
    char who[64];
    snprintf(who, sizeof who, "the tier store's %s", op_name[op]);
    lazyattn_cache *c = t->cache;
    const int IA = LAZYATTN_STATUS_INVALID_ARGUMENT, OK = LAZYATTN_STATUS_OK;
    int32_t tok[64], q = 3, slot, pos;
    doc_tokens(3, tok);
    const int32_t *docs[1] = {tok};
    int32_t lens[1] = {doc_len[3]};
    lazyattn_request_desc d = {0, NULL, 1, docs, lens, 1, &q, 0};
    lazyattn_request *r = (lazyattn_request *)1;
    expect(t, "request_create", lazyattn_request_create(c, &d, &r), IA, who);
    if (r != NULL) expect(t, "request_create left *out", IA, OK, NULL);
    expect(t, "request_commit", lazyattn_request_commit(t->other), IA, who);
    expect(t, "request_append", lazyattn_request_append(t->other, 1, &slot, &pos), IA, who);
    expect(t, "cache_trim", lazyattn_cache_trim(c, 0), IA, who);
    expect(t, "cache_reset_stats", lazyattn_cache_reset_stats(c), IA, who);
    expect(t, "cache_import", lazyattn_cache_import(c, t->blob, t->blob_size, NULL), IA, who);
    expect(t, "cache_set_tier", lazyattn_cache_set_tier(c, NULL, LAZYATTN_TIER_READ_ONLY), IA,
           who);
    expect(t, "cache_set_evict_callback", lazyattn_cache_set_evict_callback(c, NULL, NULL), IA,
           who);
    expect(t, "cache_validate", lazyattn_cache_validate(c), IA, who);
    lazyattn_request_destroy(t->other); /* nothing done, the reason recorded */
    expect(t, "request_destroy", IA, IA, "lazyattn_request_destroy: called from the tier store");
    lazyattn_cache_destroy(c);
    expect(t, "cache_destroy", IA, IA, "lazyattn_cache_destroy: called from the tier store");
    /* reads answer */
    lazyattn_cache_stats st;
    expect(t, "cache_get_stats", lazyattn_cache_get_stats(c, &st), OK, NULL);
    lazyattn_plan p;
    expect(t, "request_get_plan", lazyattn_request_get_plan(t->other, &p), OK, NULL);
    if (p.n_entries != 1) expect(t, "the other request's plan", IA, OK, NULL);
    lazyattn_probe_summary sum;
    expect(t, "cache_probe", lazyattn_cache_probe(c, &d, NULL, 0, &sum), OK, NULL);
}

static int re_get(void *impl, lazyattn_doc_key k, lazyattn_store_value *v) {
    reentrant *t = impl;
    reenter(t, OP_GET);
    return lazyattn_store_get(t->inner, k, v);
}
static void re_release(void *impl, lazyattn_store_value *v) {
    reentrant *t = impl;
    reenter(t, OP_RELEASE);
    lazyattn_store_release(t->inner, v);
}
static int re_put(void *impl, lazyattn_doc_key k, const void *d, size_t n) {
    reentrant *t = impl;
    reenter(t, OP_PUT);
    return lazyattn_store_put(t->inner, k, d, n);
}
static int re_exists(void *impl, lazyattn_doc_key k, int *e) {
    reentrant *t = impl;
    reenter(t, OP_EXISTS);
    return lazyattn_store_exists(t->inner, k, e);
}
static int re_remove(void *impl, lazyattn_doc_key k) {
    return lazyattn_store_delete(((reentrant *)impl)->inner, k);
}

static void hooks(reentrant *t, int get, int release, int put, int exists) {
    t->hook[OP_GET] = get, t->hook[OP_RELEASE] = release;
    t->hook[OP_PUT] = put, t->hook[OP_EXISTS] = exists;
    memset(t->fired, 0, sizeof t->fired);
    t->refused = 0;
}

/* The answers per call back (reenter's expect calls). */
#define REENTER_CHECKS 14

static void test_store_reenters_cache(void **state) {
    lazyattn_context *ctx = *state;
    reentrant t = {0};
    lt_assert_status(lazyattn_store_create_host(16 << 20, &t.inner), LAZYATTN_STATUS_OK);
    lazyattn_store_ops ops = {"reentrant", re_get, re_release, re_put, re_exists, re_remove, NULL};
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create(&ops, &t, &s), LAZYATTN_STATUS_OK);
    engine e;
    engine_open(&e, ctx, 32, MODEL);
    t.cache = e.cache;
    lt_assert_status(lazyattn_cache_set_tier(e.cache, s, LAZYATTN_TIER_WRITE_THROUGH),
                     LAZYATTN_STATUS_OK);
    lazyattn_segment_action act[1];
    int zero = 0, one = 1, two = 2;
    run_docs(&e, 1, &zero, act); /* written through, no hook */
    size_t n = 0, written = 0;
    lt_assert_status(lazyattn_cache_export_size(e.cache, hash_of(0), &n), LAZYATTN_STATUS_OK);
    uint8_t *blob = malloc(n);
    assert_non_null(blob);
    lt_assert_status(lazyattn_cache_export(e.cache, hash_of(0), blob, n, &written),
                     LAZYATTN_STATUS_OK);
    t.blob = blob, t.blob_size = written;
    int32_t q = 1;
    lazyattn_request_desc od = {0, NULL, 0, NULL, NULL, 1, &q, 0};
    lt_assert_status(lazyattn_request_create(e.cache, &od, &t.other), LAZYATTN_STATUS_OK);

    /* commit (write-through): exists, then put */
    hooks(&t, 0, 0, 1, 1);
    run_docs(&e, 1, &one, act); /* checked against the reference */
    if (t.failure[0]) fail_msg("write-through: %s", t.failure);
    assert_int_equal(t.fired[OP_EXISTS], 1);
    assert_int_equal(t.fired[OP_PUT], 1);
    assert_int_equal(t.refused, 2 * REENTER_CHECKS);
    assert_int_equal(stats_of(&e).tier_writes, 2);
    int there = 0;
    lazyattn_doc_key k1 = key_of(1);
    lt_assert_status(lazyattn_store_exists(t.inner, k1, &there), LAZYATTN_STATUS_OK);
    assert_int_equal(there, 1);
    lt_assert_status(lazyattn_cache_validate(e.cache), LAZYATTN_STATUS_OK);

    /* request_create (a load from the tier): get, then release */
    hooks(&t, 0, 0, 0, 0);
    lt_assert_status(lazyattn_cache_trim(e.cache, 0), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier(e.cache, s, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK);
    hooks(&t, 1, 1, 0, 0);
    run_docs(&e, 1, &zero, act);
    if (t.failure[0]) fail_msg("load: %s", t.failure);
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE); /* loaded, served, same answer */
    assert_int_equal(t.fired[OP_GET], 1);
    assert_int_equal(t.fired[OP_RELEASE], 1);
    assert_int_equal(t.refused, 2 * REENTER_CHECKS);
    assert_int_equal(stats_of(&e).tier_hits, 1);
    lt_assert_status(lazyattn_cache_validate(e.cache), LAZYATTN_STATUS_OK);

    /* eviction (write-back): exists, then put, for the one document the
     * store lacks; then a request_create whose eviction spills */
    hooks(&t, 0, 0, 0, 0);
    lt_assert_status(lazyattn_cache_set_tier(e.cache, s, LAZYATTN_TIER_WRITE_BACK),
                     LAZYATTN_STATUS_OK);
    run_docs(&e, 1, &two, act);
    hooks(&t, 0, 0, 1, 1);
    lt_assert_status(lazyattn_cache_trim(e.cache, 0), LAZYATTN_STATUS_OK);
    if (t.failure[0]) fail_msg("write-back at trim: %s", t.failure);
    assert_int_equal(t.fired[OP_EXISTS], 1);
    assert_int_equal(t.fired[OP_PUT], 1);
    assert_int_equal(t.refused, 2 * REENTER_CHECKS);
    lazyattn_cache_stats st = stats_of(&e);
    assert_int_equal(st.n_entries, 0);
    assert_int_equal(st.tier_writes, 3);
    lt_assert_status(lazyattn_cache_validate(e.cache), LAZYATTN_STATUS_OK);
    lazyattn_request_destroy(t.other);
    t.other = NULL;
    engine_close(&e);

    /* a pool of 4 blocks: document 0 (3 blocks) and its question fill it,
     * so document 3's request evicts (and spills) it from request_create */
    engine_open(&e, ctx, 4, MODEL);
    t.cache = e.cache;
    lt_assert_status(lazyattn_cache_set_tier(e.cache, s, LAZYATTN_TIER_WRITE_BACK),
                     LAZYATTN_STATUS_OK);
    hooks(&t, 0, 0, 0, 0);
    lazyattn_doc_key k0 = key_of(0);
    lazyattn_store_delete(t.inner, k0);
    run_docs(&e, 1, &zero, act);
    assert_int_equal(act[0], LAZYATTN_ACTION_PREFILL);
    lt_assert_status(lazyattn_request_create(e.cache, &od, &t.other), LAZYATTN_STATUS_OK);
    hooks(&t, 0, 0, 1, 1);
    int three = 3;
    run_docs(&e, 1, &three, act);
    if (t.failure[0]) fail_msg("write-back in request_create: %s", t.failure);
    assert_int_equal(t.fired[OP_PUT], 1);
    assert_int_equal(t.refused, 2 * REENTER_CHECKS);
    assert_int_equal(stats_of(&e).evictions, 1);
    lt_assert_status(lazyattn_store_exists(t.inner, k0, &there), LAZYATTN_STATUS_OK);
    assert_int_equal(there, 1);
    lt_assert_status(lazyattn_cache_validate(e.cache), LAZYATTN_STATUS_OK);
    lazyattn_request_destroy(t.other);
    engine_close(&e);
    free(blob);
    lazyattn_store_destroy(s);
    lazyattn_store_destroy(t.inner);
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
    lazyattn_doc_key k = key_of(0);
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

static char redis_prefix[64];

/* "dir:PATH", "redis:HOST:PORT" or a redis:// URL */
static int open_spec(const char *spec, lazyattn_store **s) {
    if (strncmp(spec, "dir:", 4) == 0) return lazyattn_store_create_dir(spec + 4, s);
    if (strncmp(spec, "redis://", 8) == 0) {
        lazyattn_redis_config rc;
        lazyattn_redis_config_init(&rc);
        rc.url = spec;
        rc.chunk_bytes = 4096;
        rc.prefix = redis_prefix;
        rc.timeout_ms = 1000;
        return lazyattn_store_create_redis(&rc, s);
    }
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
        lazyattn_doc_key k = key_of(i);
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
    char host[128], spec[200];
    int port = 0;
    LT_REDIS_TARGET_OR_SKIP(host, &port);
    snprintf(spec, sizeof spec, "redis:%s:%d", host, port);
    from_other_process(*state, spec);
}

/* Issue 37: the same through a Redis Cluster, each process seeded with
 * one node only (the last one CI names, a replica as
 * tools/redis_test_servers.sh creates the cluster), and through a server
 * that requires a password, as an ACL user. */
static void test_redis_cluster_other_process(void **state) {
    const char *nodes = getenv("LAZYATTN_TEST_REDIS_CLUSTER");
    const char *auth = getenv("LAZYATTN_TEST_REDIS_AUTH");
#ifndef LAZYATTN_HAVE_HIREDIS
    (void)nodes, (void)auth, (void)state;
    print_message("Redis tests skipped: built without hiredis\n");
    skip();
#else
    if (!nodes || !*nodes || !auth || !*auth) {
        print_message("Redis tests skipped: LAZYATTN_TEST_REDIS_CLUSTER or _AUTH unset\n");
        skip();
    }
    char spec[600];
    const char *last = strrchr(nodes, ',');
    snprintf(spec, sizeof spec, "redis://%s", last ? last + 1 : nodes);
    from_other_process(*state, spec);
    from_other_process(*state, auth);
#endif
}

// ---- two documents whose old 64-bit hashes collide ----

/*
 * Issue 34: documents 4 and 5 have the same hash under the library's old
 * (invertible) 64-bit document hash, built by inverting it (doc_engine.c).
 * Keyed by that hash, the second tenant's document was never stored (the
 * key existed) and never loaded (the value was the other's). Keyed by the
 * BLAKE2b digest, in the shared store s: each tenant's cache writes its
 * own document through, both are stored under their own keys, and a fresh
 * cache loads both as tier hits, each with its own K/V (run_request checks
 * every layer against the float64 reference of that document's K/V).
 */
static void collide_in(lazyattn_context *ctx, lazyattn_store *s) {
    int32_t t4[64], t5[64];
    doc_tokens(4, t4);
    doc_tokens(5, t5);
    assert_int_equal(doc_len[4], doc_len[5]);
    assert_memory_not_equal(t4, t5, sizeof(int32_t) * (size_t)doc_len[4]);
    assert_true(old_doc_hash(MODEL, t4, doc_len[4]) == old_doc_hash(MODEL, t5, doc_len[5]));
    lazyattn_doc_key k[2] = {key_of(4), key_of(5)};
    assert_memory_not_equal(k[0].digest, k[1].digest, 32);

    engine a, b;
    engine_open(&a, ctx, 32, MODEL);
    engine_open(&b, ctx, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(a.cache, s, LAZYATTN_TIER_WRITE_THROUGH),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier(b.cache, s, LAZYATTN_TIER_WRITE_THROUGH),
                     LAZYATTN_STATUS_OK);
    int four = 4, five = 5;
    lazyattn_segment_action act[2];
    run_docs(&a, 1, &four, act);
    run_docs(&b, 1, &five, act); /* the first's value must not block it */
    assert_int_equal(act[0], LAZYATTN_ACTION_PREFILL);
    assert_int_equal(stats_of(&a).tier_writes, 1);
    assert_int_equal(stats_of(&b).tier_writes, 1);
    assert_int_equal(stats_of(&b).tier_hits, 0);
    for (int i = 0; i < 2; i++) { /* each key holds its own document */
        int32_t tok[64];
        doc_tokens(4 + i, tok);
        lazyattn_store_value v;
        lazyattn_kv_info ki;
        lt_assert_status(lazyattn_store_get(s, k[i], &v), LAZYATTN_STATUS_OK);
        lt_assert_status(lazyattn_kv_describe(v.data, v.size, &ki), LAZYATTN_STATUS_OK);
        assert_memory_equal(ki.digest, k[i].digest, 32);
        assert_memory_equal((const uint8_t *)v.data + LAZYATTN_KV_HEADER_BYTES, tok,
                            sizeof(int32_t) * (size_t)doc_len[4 + i]); /* little-endian host */
        lazyattn_store_release(s, &v);
    }
    check_accounting(&a);
    check_accounting(&b);
    engine_close(&a);
    engine_close(&b);

    /* a fresh cache: both from the store, in one request, then each alone
     * in another fresh cache */
    engine c;
    engine_open(&c, ctx, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(c.cache, s, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK);
    int both[2] = {5, 4};
    run_docs(&c, 2, both, act);
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    assert_int_equal(act[1], LAZYATTN_ACTION_REUSE);
    lazyattn_cache_stats st = stats_of(&c);
    assert_int_equal(st.tier_hits, 2);
    assert_int_equal(st.tier_rejected + st.tier_errors, 0);
    assert_int_equal(st.recomputed_tokens, 0);
    check_accounting(&c);
    engine_close(&c);
    for (int i = 0; i < 2; i++) {
        int id = 4 + i;
        engine d;
        engine_open(&d, ctx, 32, MODEL);
        lt_assert_status(lazyattn_cache_set_tier(d.cache, s, LAZYATTN_TIER_READ_ONLY),
                         LAZYATTN_STATUS_OK);
        run_docs(&d, 1, &id, act);
        assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
        assert_int_equal(stats_of(&d).tier_hits, 1);
        engine_close(&d);
    }
    for (int i = 0; i < 2; i++) lt_assert_status(lazyattn_store_delete(s, k[i]), LAZYATTN_STATUS_OK);
}

static void test_collision_host_dir(void **state) {
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_host(64 << 20, &s), LAZYATTN_STATUS_OK);
    collide_in(*state, s);
    lazyattn_store_destroy(s);
    char dir[] = "/tmp/lazyattn-collide-XXXXXX";
    assert_non_null(mkdtemp(dir));
    lt_assert_status(lazyattn_store_create_dir(dir, &s), LAZYATTN_STATUS_OK);
    collide_in(*state, s);
    lazyattn_store_destroy(s);
    assert_int_equal(rmdir(dir), 0); /* both files deleted, no temporary left */
}

static void test_collision_redis(void **state) {
    char host[128], spec[200];
    int port = 0;
    LT_REDIS_TARGET_OR_SKIP(host, &port);
    snprintf(spec, sizeof spec, "redis:%s:%d", host, port);
    lazyattn_store *s;
    lt_assert_status(open_spec(spec, &s), LAZYATTN_STATUS_OK);
    collide_in(*state, s);
    lazyattn_store_destroy(s);
}

/* A Redis server of the test's own, stopped in the middle of the run:
 * loads fail and writes fail (counted), requests recompute and still match
 * the reference, the caches stay valid. */
static void test_redis_stopped(void **state) {
    lazyattn_context *ctx = *state;
    char host[128];
    int shared_port = 0;
    LT_REDIS_TARGET_OR_SKIP(host, &shared_port);
    int port = lt_free_port();
    pid_t pid = lt_redis_spawn(port);
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
        cmocka_unit_test(test_tier_load_over_retained),
        cmocka_unit_test(test_dir_write_back),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_failing_store),
        cmocka_unit_test(test_dir_rewritten_in_place),
        cmocka_unit_test(test_engine_value_changes),
        cmocka_unit_test(test_store_reenters_cache),
        cmocka_unit_test(test_full_disk),
        cmocka_unit_test(test_dir_other_process),
        cmocka_unit_test(test_redis_other_process),
        cmocka_unit_test(test_redis_cluster_other_process),
        cmocka_unit_test(test_collision_host_dir),
        cmocka_unit_test(test_collision_redis),
        cmocka_unit_test(test_redis_stopped),
    };
    return cmocka_run_group_tests_name("doc_tier", tests, lt_context_setup, lt_context_teardown);
}
