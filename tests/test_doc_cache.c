/* SPDX-License-Identifier: Apache-2.0 */
/* Document cache and request plans: hit/miss/copy accounting per policy on
 * hand-built request sequences, eviction, budget failures, bad inputs.
 * Bookkeeping pools only: no device needed. */
#include "test_common.h"

#include <stdlib.h>
#include <string.h>

#define B 4

/* ---- host out-of-memory injection ----
 * The test's own malloc, calloc and realloc stand in for libc's in the
 * statically linked library: while armed, the allocation after oom_after
 * successful ones fails (once). glibc only, and not under AddressSanitizer,
 * whose allocator everything must keep using. */
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
#define LT_OOM_INJECTION 1
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#undef LT_OOM_INJECTION
#endif
#endif
#endif

#ifdef LT_OOM_INJECTION
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
static long oom_after = -1; /* -1: off */
static int oom_fired;
static int oom_now(void) {
    if (oom_after < 0 || oom_after-- > 0) return 0;
    oom_fired = 1;
    return 1;
}
void *malloc(size_t n) { return oom_now() ? NULL : __libc_malloc(n); }
void *calloc(size_t n, size_t size) { return oom_now() ? NULL : __libc_calloc(n, size); }
void *realloc(void *p, size_t n) { return oom_now() ? NULL : __libc_realloc(p, n); }
#endif

/* Pool of n blocks of 32 bytes (1 layer, 1 head, d = 1, B = 4, f32). */
static lazyattn_pool *pool_of(int n_blocks) {
    lazyattn_pool_config pc = {1, 1, 1, B, LAZYATTN_DTYPE_F32, (uint64_t)n_blocks * 32,
                               LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *pool = NULL;
    lt_assert_status(lazyattn_pool_create(NULL, &pc, &pool), LAZYATTN_STATUS_OK);
    return pool;
}

static lazyattn_cache *cache_of(lazyattn_pool *pool, lazyattn_cache_policy policy) {
    lazyattn_cache_config cc = {policy, 42, 0};
    lazyattn_cache *cache = NULL;
    lt_assert_status(lazyattn_cache_create(pool, &cc, &cache), LAZYATTN_STATUS_OK);
    return cache;
}

/* Documents: A (6 tokens), Bd (4), C (3), A2 (A's first block, other tail). */
static const int32_t doc_a[6] = {11, 12, 13, 14, 15, 16};
static const int32_t doc_b[4] = {21, 22, 23, 24};
static const int32_t doc_c[3] = {31, 32, 33};
static const int32_t doc_a2[6] = {11, 12, 13, 14, 95, 96};
static const int32_t prefix[2] = {1, 2};
static const int32_t prefix2[2] = {1, 3};
static const int32_t question[3] = {7, 8, 9};

typedef struct run {
    lazyattn_request *req;
    lazyattn_plan plan;
} run;

/* Plans [prefix] docs [question]; commits when asked; keeps it live. */
static run start(lazyattn_cache *cache, const int32_t *pre, int n_docs, const int32_t *const *docs,
                 const int32_t *lens, int commit) {
    lazyattn_request_desc d = {pre ? 2 : 0, pre, n_docs, docs, lens, 3, question, 2};
    run r;
    lt_assert_status(lazyattn_request_create(cache, &d, &r.req), LAZYATTN_STATUS_OK);
    if (commit) lt_assert_status(lazyattn_request_commit(r.req), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_request_get_plan(r.req, &r.plan), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
    return r;
}

static void once(lazyattn_cache *cache, const int32_t *pre, int n_docs, const int32_t *const *docs,
                 const int32_t *lens, int commit, int want_hit_tokens, int want_copy_tokens) {
    run r = start(cache, pre, n_docs, docs, lens, commit);
    assert_int_equal(r.plan.hit_tokens, want_hit_tokens);
    assert_int_equal(r.plan.copy_tokens, want_copy_tokens);
    lazyattn_request_destroy(r.req);
    lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
}

static void entry(const lazyattn_plan *p, int e, int32_t *block, int32_t *delta, int32_t *len) {
    lt_assert_status(lazyattn_entry_unpack(p->table[e], block, delta, len), LAZYATTN_STATUS_OK);
}

/* Positions contiguous over the table; returns the context length. */
static void check_contiguous(const lazyattn_plan *p) {
    int32_t pos = 0;
    for (int e = 0; e < p->n_entries; e++) {
        int32_t b, d, n;
        entry(p, e, &b, &d, &n);
        assert_int_equal(p->entry_pos[e], pos);
        pos += n;
    }
    assert_int_equal(pos, p->n_positions);
}

static void test_lazy(void **state) {
    (void)state;
    lazyattn_pool *pool = pool_of(64);
    lazyattn_cache *cache = cache_of(pool, LAZYATTN_CACHE_POLICY_LAZY);
    const int32_t *ab[] = {doc_a, doc_b}, *ba[] = {doc_b, doc_a}, *ac[] = {doc_a, doc_c},
                  *c1[] = {doc_c};
    const int32_t lab[] = {6, 4}, lba[] = {4, 6}, lac[] = {6, 3}, lc[] = {3};

    run r1 = start(cache, prefix, 2, ab, lab, 1);
    assert_int_equal(r1.plan.n_segments, 4);
    assert_int_equal(r1.plan.n_prefill, 2 + 10 + 3);
    assert_int_equal(r1.plan.segments[1].stored_start, 0);
    assert_int_equal(r1.plan.segments[2].logical_start, 8);
    /* A missed doc is prefilled at document-local stored positions. */
    const lazyattn_segment *sa = &r1.plan.segments[1];
    assert_int_equal(r1.plan.prefill_stored_pos[sa->prefill_offset + 5], 5);
    assert_int_equal(r1.plan.prefill_pos[sa->prefill_offset + 5], 7);
    check_contiguous(&r1.plan);
    lazyattn_request_destroy(r1.req);

    run r2 = start(cache, prefix, 2, ba, lba, 1);
    assert_int_equal(r2.plan.hit_tokens, 10);
    assert_int_equal(r2.plan.n_prefill, 5);
    assert_int_equal(r2.plan.n_entries, 1 + 1 + 2 + 1);
    int32_t b, d, n;
    entry(&r2.plan, 1, &b, &d, &n); /* B at logical 2, stored 0 */
    assert_int_equal(d, 2);
    assert_int_equal(n, 4);
    entry(&r2.plan, 3, &b, &d, &n); /* A's second block at 10, stored 4 */
    assert_int_equal(d, 6);
    assert_int_equal(n, 2);
    assert_int_equal(r2.plan.entry_pos[3], 10);
    check_contiguous(&r2.plan);
    /* Decode: the question's block (3 tokens) takes one more, then a new block. */
    int32_t slots[3], pos[3];
    lt_assert_status(lazyattn_request_append(r2.req, 3, slots, pos), LAZYATTN_STATUS_OK);
    assert_int_equal(pos[0], 15); /* after the question, 12..14 */
    assert_int_equal(pos[2], 17);
    assert_int_equal(slots[1] / B != slots[0] / B, 1);
    lazyattn_request_get_plan(r2.req, &r2.plan);
    assert_int_equal(r2.plan.n_positions, 18);
    assert_int_equal(r2.plan.n_generated, 3);
    check_contiguous(&r2.plan);
    lazyattn_request_destroy(r2.req);

    /* Not committed: C's blocks are freed, C misses again. */
    once(cache, prefix, 2, ac, lac, 0, 6, 0);
    once(cache, NULL, 1, c1, lc, 1, 0, 0);
    once(cache, NULL, 1, c1, lc, 1, 3, 0);

    lazyattn_cache_stats s;
    lt_assert_status(lazyattn_cache_get_stats(cache, &s), LAZYATTN_STATUS_OK);
    assert_int_equal(s.requests, 5);
    assert_int_equal(s.lookups, 8);
    assert_int_equal(s.hits, 4);
    assert_int_equal(s.misses, 4);
    assert_int_equal(s.copy_hits, 0);
    assert_int_equal(s.doc_tokens, 10 + 10 + 9 + 3 + 3);
    assert_int_equal(s.hit_tokens, 10 + 6 + 3);
    assert_int_equal(s.n_entries, 3);
    assert_int_equal(s.n_pinned, 0);
    assert_int_equal(s.entry_bytes, 4 * 32);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(pool, &info);
    assert_int_equal(info.n_used, 4);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_get_info(pool, &info);
    assert_int_equal(info.n_used, 0);
    lazyattn_pool_destroy(pool);
}

static void test_position(void **state) {
    (void)state;
    lazyattn_pool *pool = pool_of(64);
    lazyattn_cache *cache = cache_of(pool, LAZYATTN_CACHE_POLICY_POSITION);
    const int32_t *ab[] = {doc_a, doc_b}, *ba[] = {doc_b, doc_a};
    const int32_t lab[] = {6, 4}, lba[] = {4, 6};

    once(cache, prefix, 2, ab, lab, 1, 0, 0);  /* A@2, B@8 */
    once(cache, prefix, 2, ab, lab, 1, 10, 0); /* exact hits */
    run r = start(cache, prefix, 2, ba, lba, 1); /* copies: B@2 from 8, A@6 from 2 */
    assert_int_equal(r.plan.copy_tokens, 10);
    assert_int_equal(r.plan.n_copies, 3);
    assert_int_equal(r.plan.n_prefill, 5);
    assert_int_equal(r.plan.segments[1].action, LAZYATTN_ACTION_COPY);
    int32_t b, d, n;
    lt_assert_status(lazyattn_entry_unpack(r.plan.copy_src[0], &b, &d, &n), LAZYATTN_STATUS_OK);
    assert_int_equal(d, -6);
    assert_int_equal(n, 4);
    lt_assert_status(lazyattn_entry_unpack(r.plan.copy_src[2], &b, &d, &n), LAZYATTN_STATUS_OK);
    assert_int_equal(d, 4);
    assert_int_equal(n, 2);
    for (int e = 0; e < r.plan.n_entries; e++) {
        lt_assert_status(lazyattn_entry_unpack(r.plan.table[e], &b, &d, &n), LAZYATTN_STATUS_OK);
        assert_int_equal(d, 0); /* every position-aware entry is at its own start */
    }
    assert_int_equal(r.plan.copy_dst[0], (int32_t)(r.plan.table[1] & 0x7FFFFFFF));
    check_contiguous(&r.plan);
    lazyattn_request_destroy(r.req);
    once(cache, prefix, 2, ba, lba, 1, 10, 0); /* the copies are entries now */
    once(cache, NULL, 2, ba, lba, 1, 0, 10);   /* other starts again: copies */

    lazyattn_cache_stats s;
    lazyattn_cache_get_stats(cache, &s);
    assert_int_equal(s.hits, 4);
    assert_int_equal(s.copy_hits, 4);
    assert_int_equal(s.misses, 2);
    assert_int_equal(s.copy_tokens, 20);
    assert_int_equal(s.copy_blocks, 6);
    assert_int_equal(s.n_entries, 6);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
}

static void test_prefix(void **state) {
    (void)state;
    lazyattn_pool *pool = pool_of(64);
    lazyattn_cache *cache = cache_of(pool, LAZYATTN_CACHE_POLICY_PREFIX);
    const int32_t *ab[] = {doc_a, doc_b}, *ba[] = {doc_b, doc_a}, *ac[] = {doc_a, doc_c},
                  *a2b[] = {doc_a2, doc_b}, *a_b[] = {doc_a, doc_b}, *one[] = {doc_a};
    const int32_t lab[] = {6, 4}, lba[] = {4, 6}, lac[] = {6, 3};

    once(cache, prefix, 2, ab, lab, 1, 0, 0);
    once(cache, prefix, 2, ab, lab, 1, 10, 0);
    once(cache, prefix, 2, ac, lac, 1, 6, 0);   /* chain A hits, C new */
    once(cache, prefix, 2, ba, lba, 1, 0, 0);   /* chain starts with B: nothing */
    once(cache, prefix2, 2, ab, lab, 1, 0, 0);  /* other prefix: nothing */
    run r = start(cache, prefix, 2, a2b, lab, 1); /* A2 shares A's first block only */
    assert_int_equal(r.plan.hit_tokens, 4);
    assert_int_equal(r.plan.segments[1].action, LAZYATTN_ACTION_PARTIAL);
    assert_int_equal(r.plan.segments[1].n_cached, 4);
    assert_int_equal(r.plan.n_prefill, 2 + 2 + 4 + 3);
    assert_int_equal(r.plan.hit_blocks, 1);
    check_contiguous(&r.plan);
    lazyattn_request_destroy(r.req);
    /* A 6-token doc then B is not the one 10-token doc A|B (boundaries count). */
    int32_t ab_joined[10];
    memcpy(ab_joined, doc_a, sizeof doc_a);
    memcpy(ab_joined + 6, doc_b, sizeof doc_b);
    const int32_t *j[] = {ab_joined};
    const int32_t lj[] = {10};
    (void)a_b;
    once(cache, prefix, 1, j, lj, 1, 4, 0); /* only A's first full block: same tokens, doc start */
    const int32_t l1[] = {6};
    once(cache, prefix, 1, one, l1, 1, 6, 0);

    lazyattn_cache_stats s;
    lazyattn_cache_get_stats(cache, &s);
    assert_int_equal(s.hits, 1 * 2 + 1 + 1);
    assert_int_equal(s.partial_hits, 2);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
}

static void test_none(void **state) {
    (void)state;
    lazyattn_pool *pool = pool_of(64);
    lazyattn_cache *cache = cache_of(pool, LAZYATTN_CACHE_POLICY_NONE);
    const int32_t *ab[] = {doc_a, doc_b};
    const int32_t lab[] = {6, 4};
    for (int i = 0; i < 3; i++) once(cache, prefix, 2, ab, lab, 1, 0, 0);
    lazyattn_cache_stats s;
    lazyattn_cache_get_stats(cache, &s);
    assert_int_equal(s.misses, 6);
    assert_int_equal(s.n_entries, 0);
    assert_int_equal(s.bytes_in_use, 0);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(pool, &info);
    assert_int_equal(info.n_used, 0);
    assert_int_equal(info.n_allocs, info.n_frees);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
}

/* One-block documents D0..D9 (4 tokens each), question of 1 token, no
 * reservation, no prefix: a request of k documents needs k + 1 blocks. */
static int32_t small_docs[10][4];

static int plan_docs(lazyattn_cache *cache, int n, const int *ids, lazyattn_request **out) {
    const int32_t *docs[10];
    int32_t lens[10];
    for (int i = 0; i < n; i++) {
        docs[i] = small_docs[ids[i]];
        lens[i] = 4;
    }
    lazyattn_request_desc d = {0, NULL, n, docs, lens, 1, question, 0};
    return lazyattn_request_create(cache, &d, out);
}

static void test_eviction_and_budget(void **state) {
    (void)state;
    for (int i = 0; i < 10; i++)
        for (int t = 0; t < 4; t++) small_docs[i][t] = 100 * (i + 1) + t;
    lazyattn_pool *pool = pool_of(8);
    lazyattn_cache *cache = cache_of(pool, LAZYATTN_CACHE_POLICY_LAZY);
    lazyattn_request *r = NULL, *r2 = NULL;
    const int q1[] = {1, 2, 3, 4}, q2[] = {5, 6, 7}, q3[] = {8, 1}, q4[] = {2}, q5[] = {4}; /* D2 evicted by q3, D3 by q4 */
    lt_assert_status(plan_docs(cache, 4, q1, &r), LAZYATTN_STATUS_OK);
    lazyattn_request_commit(r);
    lazyattn_request_destroy(r); /* LRU: D1 (oldest) .. D4 */
    lt_assert_status(plan_docs(cache, 3, q2, &r), LAZYATTN_STATUS_OK);
    lazyattn_request_commit(r);
    lazyattn_request_destroy(r); /* 7 entries, 1 free block */
    lt_assert_status(plan_docs(cache, 2, q3, &r), LAZYATTN_STATUS_OK); /* D1 hit, evicts D2 */
    lazyattn_plan p;
    lazyattn_request_get_plan(r, &p);
    assert_int_equal(p.hit_tokens, 4);
    lazyattn_cache_stats s;
    lazyattn_cache_get_stats(cache, &s);
    assert_int_equal(s.evictions, 1);
    lazyattn_request_commit(r);
    lazyattn_request_destroy(r);
    lt_assert_status(plan_docs(cache, 1, q4, &r), LAZYATTN_STATUS_OK);
    lazyattn_request_get_plan(r, &p);
    assert_int_equal(p.hit_tokens, 0); /* D2 was the victim */
    lazyattn_request_destroy(r);
    lt_assert_status(plan_docs(cache, 1, q5, &r), LAZYATTN_STATUS_OK);
    lazyattn_request_get_plan(r, &p);
    assert_int_equal(p.hit_tokens, 4);
    lazyattn_request_destroy(r);

    /* More than the whole budget: refused, nothing changes. */
    lazyattn_pool_info before, after;
    lazyattn_pool_get_info(pool, &before);
    const int big[] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    lt_assert_status(plan_docs(cache, 9, big, &r), LAZYATTN_STATUS_BUDGET_EXCEEDED);
    assert_null(r);
    lazyattn_pool_get_info(pool, &after);
    assert_int_equal(before.n_used, after.n_used);
    lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
    lazyattn_cache_get_stats(cache, &s);
    assert_int_equal(s.n_pinned, 0);
    assert_int_equal(s.budget_failures, 1);

    /* A live request pins 5 blocks: a second one of 5 blocks cannot fit. */
    const int q6[] = {0, 1, 3, 4}, q7[] = {5, 6, 7, 9};
    lt_assert_status(plan_docs(cache, 4, q6, &r), LAZYATTN_STATUS_OK);
    lt_assert_status(plan_docs(cache, 4, q7, &r2), LAZYATTN_STATUS_BUDGET_EXCEEDED);
    lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
    /* Decode past the reservation takes a block; with none left, refused. */
    int32_t slot, pos;
    lt_assert_status(lazyattn_request_append(r, 3, (int32_t[3]){0}, (int32_t[3]){0}),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_request_commit(r), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_trim(cache, 0), LAZYATTN_STATUS_OK);
    lazyattn_pool_get_info(pool, &after);
    lt_assert_status(lazyattn_request_append(r, after.n_blocks - after.n_used, NULL, NULL),
                     after.n_blocks == after.n_used ? LAZYATTN_STATUS_OK
                                                    : LAZYATTN_STATUS_INVALID_ARGUMENT);
    int32_t many_s[64], many_p[64];
    int room = (int)(after.n_blocks - after.n_used);
    lt_assert_status(lazyattn_request_append(r, room * B, many_s, many_p), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_request_append(r, 1, &slot, &pos), LAZYATTN_STATUS_BUDGET_EXCEEDED);
    lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
    lazyattn_request_destroy(r);
    lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_get_info(pool, &after);
    assert_int_equal(after.n_used, 0);
    lazyattn_pool_destroy(pool);
}

static void test_retain_limit(void **state) {
    (void)state;
    lazyattn_pool *pool = pool_of(32);
    lazyattn_cache_config cc = {LAZYATTN_CACHE_POLICY_LAZY, 0, 2 * 32};
    lazyattn_cache *cache = NULL;
    lt_assert_status(lazyattn_cache_create(pool, &cc, &cache), LAZYATTN_STATUS_OK);
    lazyattn_request *r;
    const int q[] = {0, 1, 2, 3, 4};
    lt_assert_status(plan_docs(cache, 5, q, &r), LAZYATTN_STATUS_OK);
    lazyattn_request_commit(r);
    lazyattn_cache_stats s;
    lazyattn_cache_get_stats(cache, &s);
    assert_int_equal(s.n_entries, 5); /* pinned: kept above the limit while in use */
    lazyattn_request_destroy(r);
    lazyattn_cache_get_stats(cache, &s);
    assert_int_equal(s.n_entries, 2);
    assert_int_equal(s.evictions, 3);
    const int last[] = {3, 4};
    lt_assert_status(plan_docs(cache, 2, last, &r), LAZYATTN_STATUS_OK);
    lazyattn_plan p;
    lazyattn_request_get_plan(r, &p);
    assert_int_equal(p.hit_tokens, 8); /* the last two of the prompt survive */
    lazyattn_request_destroy(r);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
}

/* Two live requests miss the same document: one entry, the other private. */
static void test_concurrent_duplicate(void **state) {
    (void)state;
    lazyattn_pool *pool = pool_of(32);
    lazyattn_cache *cache = cache_of(pool, LAZYATTN_CACHE_POLICY_LAZY);
    lazyattn_request *r1, *r2;
    const int q[] = {0, 0};
    lt_assert_status(plan_docs(cache, 2, q, &r1), LAZYATTN_STATUS_OK); /* same doc twice */
    lt_assert_status(plan_docs(cache, 1, q, &r2), LAZYATTN_STATUS_OK);
    lazyattn_request_commit(r2);
    lazyattn_request_commit(r1);
    lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
    lazyattn_cache_stats s;
    lazyattn_cache_get_stats(cache, &s);
    assert_int_equal(s.n_entries, 1);
    lazyattn_request_destroy(r2);
    /* Cache destroy releases the live request as well. */
    lazyattn_cache_destroy(cache);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(pool, &info);
    assert_int_equal(info.n_used, 0);
    lazyattn_pool_destroy(pool);
}

/* The probe by hand, for each policy: after [A, B] is committed, probing
 * [prefix] [B, A2] [question] tells what a request would get. B = 4. */
static void test_probe(void **state) {
    (void)state;
    const int32_t *ab[] = {doc_a, doc_b}, *ba2[] = {doc_b, doc_a2};
    const int32_t lab[] = {6, 4}, lba2[] = {4, 6};
    /* LAZY: B whole (4 tokens, 1 block), A2 recomputed (A's tail differs).
     * POSITION: B moved from 6 to 2: a copy. PREFIX: B starts the chain
     * now: nothing. NONE: nothing. */
    static const int want_action[4][2] = {{LAZYATTN_ACTION_REUSE, LAZYATTN_ACTION_PREFILL},
                                          {LAZYATTN_ACTION_COPY, LAZYATTN_ACTION_PREFILL},
                                          {LAZYATTN_ACTION_PREFILL, LAZYATTN_ACTION_PREFILL},
                                          {LAZYATTN_ACTION_PREFILL, LAZYATTN_ACTION_PREFILL}};
    for (int p = 0; p < 4; p++) {
        lazyattn_pool *pool = pool_of(64);
        lazyattn_cache *cache = cache_of(pool, (lazyattn_cache_policy)p);
        run r = start(cache, prefix, 2, ab, lab, 1);
        lazyattn_request_destroy(r.req);
        lazyattn_request_desc d = {2, prefix, 2, ba2, lba2, 3, question, 5};
        lazyattn_probe_segment seg[4];
        lazyattn_probe_summary sum;
        lt_assert_status(lazyattn_cache_probe(cache, &d, seg, 4, &sum), LAZYATTN_STATUS_OK);
        assert_int_equal(sum.n_segments, 4);
        assert_int_equal(seg[0].kind, LAZYATTN_SEGMENT_PREFIX);
        assert_int_equal(seg[0].n_tokens, 2);
        assert_int_equal(seg[3].kind, LAZYATTN_SEGMENT_QUESTION);
        assert_int_equal(seg[3].logical_start, 12);
        assert_int_equal(seg[1].logical_start, 2);
        assert_int_equal(seg[2].logical_start, 6);
        assert_int_equal(seg[1].action, want_action[p][0]);
        assert_int_equal(seg[2].action, want_action[p][1]);
        int b_cached = want_action[p][0] == LAZYATTN_ACTION_PREFILL ? 0 : 4;
        assert_int_equal(seg[1].n_cached, b_cached);
        assert_int_equal(seg[1].n_cached_blocks, b_cached / 4);
        assert_int_equal(seg[2].n_cached, 0);
        assert_int_equal(sum.doc_tokens, 10);
        assert_int_equal(sum.doc_blocks, 3);
        assert_int_equal(sum.hit_tokens, p == 0 ? 4 : 0);
        assert_int_equal(sum.copy_tokens, p == 1 ? 4 : 0);
        /* own: prefix 1 block, question + 5 new tokens 2 blocks; A2 2
         * blocks; B 1 block unless reused as is. */
        assert_int_equal(sum.blocks_needed, 3 + 2 + (p == 0 ? 0 : 1));
        uint64_t h;
        lazyattn_doc_hash(42, doc_b, 4, &h);
        assert_true(seg[1].doc_hash == h);
        /* A summary alone, and a request that agrees. */
        lazyattn_probe_summary only;
        lt_assert_status(lazyattn_cache_probe(cache, &d, NULL, 0, &only), LAZYATTN_STATUS_OK);
        assert_memory_equal(&only, &sum, sizeof sum);
        lazyattn_request *q;
        lt_assert_status(lazyattn_request_create(cache, &d, &q), LAZYATTN_STATUS_OK);
        lazyattn_plan plan;
        lazyattn_request_get_plan(q, &plan);
        assert_int_equal(plan.segments[1].action, want_action[p][0]);
        assert_int_equal(plan.hit_tokens, sum.hit_tokens);
        assert_int_equal(plan.copy_tokens, sum.copy_tokens);
        lazyattn_request_destroy(q);
        lazyattn_cache_destroy(cache);
        lazyattn_pool_destroy(pool);
    }
}

static void test_probe_bad_inputs(void **state) {
    (void)state;
    lazyattn_pool *pool = pool_of(16);
    lazyattn_cache *cache = cache_of(pool, LAZYATTN_CACHE_POLICY_LAZY);
    const int32_t *ab[] = {doc_a, doc_b};
    int32_t lab[] = {6, 4};
    lazyattn_request_desc d = {2, prefix, 2, ab, lab, 3, question, 0};
    lazyattn_probe_segment seg[4];
    lazyattn_probe_summary sum;
    lt_assert_status(lazyattn_cache_probe(NULL, &d, seg, 4, &sum), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_probe(cache, NULL, seg, 4, &sum), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_probe(cache, &d, seg, -1, &sum), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_probe(cache, &d, NULL, 4, &sum), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_probe(cache, &d, NULL, 0, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* Four segments, room for three. */
    lt_assert_status(lazyattn_cache_probe(cache, &d, seg, 3, &sum), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "room for 3"));
    lab[1] = 0;
    lt_assert_status(lazyattn_cache_probe(cache, &d, seg, 4, &sum), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lab[1] = 4;
    d.max_new_tokens = LAZYATTN_MAX_POSITION;
    lt_assert_status(lazyattn_cache_probe(cache, &d, seg, 4, &sum), LAZYATTN_STATUS_OUT_OF_RANGE);
    d.max_new_tokens = -1;
    lt_assert_status(lazyattn_cache_probe(cache, &d, seg, 4, &sum), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_cache_stats s;
    lazyattn_cache_get_stats(cache, &s);
    assert_int_equal(s.requests, 0);
    assert_int_equal(s.lookups, 0);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
}

static void test_bad_inputs(void **state) {
    (void)state;
    lazyattn_pool *pool = pool_of(16);
    lazyattn_cache *cache = NULL;
    lazyattn_cache_config bad = {(lazyattn_cache_policy)9, 0, 0};
    lt_assert_status(lazyattn_cache_create(NULL, NULL, &cache), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(cache);
    lt_assert_status(lazyattn_cache_create(pool, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_create(pool, &bad, &cache), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_create(pool, NULL, &cache), LAZYATTN_STATUS_OK);
    lazyattn_cache_destroy(NULL);
    lazyattn_request_destroy(NULL);
    lazyattn_cache_stats s;
    lt_assert_status(lazyattn_cache_get_stats(NULL, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_get_stats(cache, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_reset_stats(NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_trim(NULL, 0), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_validate(NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_cache_policy pol;
    assert_null(lazyattn_cache_policy_name((lazyattn_cache_policy)-1));
    assert_string_equal(lazyattn_cache_policy_name(LAZYATTN_CACHE_POLICY_PREFIX), "prefix");
    lt_assert_status(lazyattn_cache_policy_parse("nope", &pol), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_policy_parse(NULL, &pol), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_policy_parse("lazy", NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_cache_policy_parse("block-attention", &pol), LAZYATTN_STATUS_OK);
    assert_int_equal(pol, LAZYATTN_CACHE_POLICY_POSITION);
    uint64_t h;
    lt_assert_status(lazyattn_doc_hash(0, NULL, 3, &h), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_doc_hash(0, doc_a, 0, &h), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_doc_hash(0, doc_a, 6, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    uint64_t h1, h2, h3;
    lazyattn_doc_hash(0, doc_a, 6, &h1);
    lazyattn_doc_hash(1, doc_a, 6, &h2);
    lazyattn_doc_hash(0, doc_a2, 6, &h3);
    assert_true(h1 != h2 && h1 != h3);

    lazyattn_request *r = (lazyattn_request *)&h; /* must be reset to NULL */
    const int32_t *docs[2] = {doc_a, NULL};
    int32_t lens[2] = {6, 4};
    lazyattn_request_desc d = {0, NULL, 1, docs, lens, 3, question, 0};
    lt_assert_status(lazyattn_request_create(NULL, &d, &r), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(r);
    lt_assert_status(lazyattn_request_create(cache, NULL, &r), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_request_create(cache, &d, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_request_desc e = d;
    e.n_docs = 2; /* NULL document */
    lt_assert_status(lazyattn_request_create(cache, &e, &r), LAZYATTN_STATUS_INVALID_ARGUMENT);
    e = d;
    e.n_docs = -1;
    lt_assert_status(lazyattn_request_create(cache, &e, &r), LAZYATTN_STATUS_INVALID_ARGUMENT);
    e = d;
    lens[0] = 0;
    lt_assert_status(lazyattn_request_create(cache, &e, &r), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lens[0] = 6;
    e.n_prefix = 2; /* prefix NULL */
    lt_assert_status(lazyattn_request_create(cache, &e, &r), LAZYATTN_STATUS_INVALID_ARGUMENT);
    e = d;
    e.question = NULL;
    lt_assert_status(lazyattn_request_create(cache, &e, &r), LAZYATTN_STATUS_INVALID_ARGUMENT);
    e = d;
    e.doc_lengths = NULL;
    lt_assert_status(lazyattn_request_create(cache, &e, &r), LAZYATTN_STATUS_INVALID_ARGUMENT);
    e = d;
    e.max_new_tokens = -2;
    lt_assert_status(lazyattn_request_create(cache, &e, &r), LAZYATTN_STATUS_INVALID_ARGUMENT);
    e = d;
    e.max_new_tokens = LAZYATTN_MAX_POSITION; /* past the last position */
    lt_assert_status(lazyattn_request_create(cache, &e, &r), LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_null(r);

    lt_assert_status(lazyattn_request_create(cache, &d, &r), LAZYATTN_STATUS_OK);
    lazyattn_plan p;
    int32_t slot, pos;
    lt_assert_status(lazyattn_request_get_plan(NULL, &p), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_request_get_plan(r, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_request_commit(NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_request_append(NULL, 1, &slot, &pos), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_request_append(r, -1, &slot, &pos), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_request_append(r, 1, NULL, &pos), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_request_append(r, 1, &slot, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_request_append(r, LAZYATTN_MAX_POSITION, &slot, &pos),
                     LAZYATTN_STATUS_OUT_OF_RANGE);
    lt_assert_status(lazyattn_request_append(r, 0, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_request_commit(r), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_request_commit(r), LAZYATTN_STATUS_OK); /* idempotent */
    lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
    lazyattn_request_destroy(r);
    lt_assert_status(lazyattn_cache_reset_stats(cache), LAZYATTN_STATUS_OK);
    lazyattn_cache_get_stats(cache, &s);
    assert_int_equal(s.lookups, 0);
    assert_int_equal(s.n_entries, 1);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(pool, &info);
    assert_int_equal(info.n_used, 0);
    lazyattn_pool_destroy(pool);
}

/* Document lengths are all checked, even once the running sum reaches the
 * last position exactly. */
static void test_lengths_checked_to_the_end(void **state) {
    (void)state;
    lazyattn_pool *pool = pool_of(16);
    lazyattn_cache *cache = cache_of(pool, LAZYATTN_CACHE_POLICY_LAZY);
    int32_t *big = calloc((size_t)LAZYATTN_MAX_POSITION + 1, sizeof *big);
    assert_non_null(big);
    const int32_t *docs[2] = {big, doc_a};
    int32_t lens[2] = {LAZYATTN_MAX_POSITION + 1, 0};
    lazyattn_request_desc d = {0, NULL, 2, docs, lens, 0, NULL, 0};
    lazyattn_request *r = NULL;
    lt_assert_status(lazyattn_request_create(cache, &d, &r), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(r);
    lens[1] = -7;
    lt_assert_status(lazyattn_request_create(cache, &d, &r), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lens[1] = 1; /* one token past the last position */
    lt_assert_status(lazyattn_request_create(cache, &d, &r), LAZYATTN_STATUS_OUT_OF_RANGE);
    lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
    free(big);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
}

/* Slots are int32 (block * block_size + offset): a pool whose slots pass
 * INT32_MAX is refused up front rather than given wrapped slots. */
static void test_slot_range(void **state) {
    (void)state;
    /* 1 layer, 1 head, d = 1, B = 256, f16: 1 KiB per block. */
    lazyattn_pool_config pc = {1, 1, 1, 256, LAZYATTN_DTYPE_F16, ((uint64_t)1 << 23) * 1024,
                               LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *pool = NULL;
    lazyattn_cache *cache = (lazyattn_cache *)&pc;
    lt_assert_status(lazyattn_pool_create(NULL, &pc, &pool), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_create(pool, NULL, &cache), LAZYATTN_STATUS_OK);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
    pc.budget_bytes += 1024; /* one block more: its slots start at 2^31 */
    lt_assert_status(lazyattn_pool_create(NULL, &pc, &pool), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_create(pool, NULL, &cache), LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_null(cache);
    lazyattn_pool_destroy(pool);
}

#ifdef LT_OOM_INJECTION
/* Runs a request create with the k-th host allocation failing, for k = 0, 1,
 * ... until it succeeds: each failure is OUT_OF_HOST_MEMORY and leaves the
 * pool, the cache's counters and its invariants as they were. */
static lazyattn_request *create_under_oom(lazyattn_cache *cache, lazyattn_pool *pool,
                                          const lazyattn_request_desc *d) {
    for (long k = 0;; k++) {
        lazyattn_pool_info before, after;
        lazyattn_cache_stats sb, sa;
        lazyattn_pool_get_info(pool, &before);
        lazyattn_cache_get_stats(cache, &sb);
        lazyattn_request *r = NULL;
        oom_fired = 0;
        oom_after = k;
        int st = lazyattn_request_create(cache, d, &r);
        oom_after = -1;
        if (!oom_fired) {
            lt_assert_status(st, LAZYATTN_STATUS_OK);
            return r;
        }
        lt_assert_status(st, LAZYATTN_STATUS_OUT_OF_HOST_MEMORY);
        assert_null(r);
        lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
        lazyattn_pool_get_info(pool, &after);
        lazyattn_cache_get_stats(cache, &sa);
        assert_int_equal(after.n_used, before.n_used - (sb.entry_bytes - sa.entry_bytes) / 32);
        assert_int_equal(sa.bytes_in_use, (uint64_t)after.n_used * 32);
        assert_int_equal(sa.n_pinned, sb.n_pinned);
        assert_int_equal(sa.n_requests_live, sb.n_requests_live);
    }
}
#endif

/* Every allocation of create, commit and append failing in turn, for every
 * policy, on misses (no own blocks at all), hits, copies and partial hits. */
static void test_out_of_host_memory(void **state) {
    (void)state;
#ifndef LT_OOM_INJECTION
    skip();
#else
    const int32_t *ab[] = {doc_a, doc_b}, *ba[] = {doc_b, doc_a}, *a2c[] = {doc_a2, doc_c};
    const int32_t lab[] = {6, 4}, lba[] = {4, 6}, la2c[] = {6, 3};
    for (int p = 0; p < 4; p++) {
        lazyattn_pool *pool = pool_of(64);
        lazyattn_cache *cache = cache_of(pool, (lazyattn_cache_policy)p);
        /* No prefix, no question, no reservation: only document blocks. */
        lazyattn_request_desc bare = {0, NULL, 2, ab, lab, 0, NULL, 0};
        lazyattn_request *r = create_under_oom(cache, pool, &bare);
        for (long k = 0;; k++) {
            oom_fired = 0;
            oom_after = k;
            lt_assert_status(lazyattn_request_commit(r), LAZYATTN_STATUS_OK);
            oom_after = -1;
            lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
            if (!oom_fired) break;
        }
        lazyattn_request_destroy(r);
        lazyattn_request_desc again = {2, prefix, 2, ab, lab, 3, question, 2};
        lazyattn_request_desc moved = {2, prefix, 2, ba, lba, 3, question, 2};
        lazyattn_request_desc part = {0, NULL, 2, a2c, la2c, 3, question, 2};
        const lazyattn_request_desc *descs[] = {&bare, &again, &moved, &part};
        for (int i = 0; i < 4; i++) {
            r = create_under_oom(cache, pool, descs[i]);
            lazyattn_request_commit(r);
            for (long k = 0;; k++) {
                lazyattn_plan before, after;
                int32_t slots[20], pos[20];
                lazyattn_request_get_plan(r, &before);
                oom_fired = 0;
                oom_after = k;
                int st = lazyattn_request_append(r, 20, slots, pos);
                oom_after = -1;
                lazyattn_request_get_plan(r, &after);
                lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
                if (!oom_fired) {
                    lt_assert_status(st, LAZYATTN_STATUS_OK);
                    break;
                }
                lt_assert_status(st, LAZYATTN_STATUS_OUT_OF_HOST_MEMORY);
                assert_int_equal(after.n_positions, before.n_positions);
            }
            lazyattn_request_destroy(r);
            lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
        }
        lazyattn_cache_destroy(cache);
        lazyattn_pool_info info;
        lazyattn_pool_get_info(pool, &info);
        assert_int_equal(info.n_used, 0);
        assert_int_equal(info.n_allocs, info.n_frees);
        lazyattn_pool_destroy(pool);
    }
    /* Creating a cache and validating one. */
    lazyattn_pool *pool = pool_of(8);
    for (long k = 0;; k++) {
        lazyattn_cache *cache = NULL;
        oom_fired = 0;
        oom_after = k;
        int st = lazyattn_cache_create(pool, NULL, &cache);
        int v = st ? LAZYATTN_STATUS_OK : lazyattn_cache_validate(cache);
        int fired = oom_fired;
        oom_after = -1;
        lazyattn_cache_destroy(cache);
        if (!fired) {
            lt_assert_status(st, LAZYATTN_STATUS_OK);
            lt_assert_status(v, LAZYATTN_STATUS_OK);
            break;
        }
        assert_true(st == LAZYATTN_STATUS_OUT_OF_HOST_MEMORY ||
                    v == LAZYATTN_STATUS_OUT_OF_HOST_MEMORY);
        if (st) assert_null(cache);
    }
    lazyattn_pool_destroy(pool);
#endif
}

/* Document digests against Python's hashlib.blake2b (an implementation
 * independent of libb2): the expected values come from
 * tools/doc_digest_fixture.py, run by hand. The hash is the digest's first
 * 8 bytes, little-endian. */
static const uint8_t digest_fixture[4][32] = {
    /* one token: model 0x0000000000000000, 1 tokens; hash 0xf4e69abaa57e09d2 */
    {0xd2, 0x09, 0x7e, 0xa5, 0xba, 0x9a, 0xe6, 0xf4, 0x48, 0x4f, 0xa9, 0x60, 0xdb, 0xc0, 0xf8, 0x2a, 0x6a, 0xc5, 0xa0, 0x8e, 0x4c, 0x07, 0x85, 0xcf, 0xf0, 0xb9, 0x5d, 0x51, 0x0a, 0x97, 0xce, 0x18},
    /* three tokens: model 0x0000000000000007, 3 tokens; hash 0x3475244286e59201 */
    {0x01, 0x92, 0xe5, 0x86, 0x42, 0x24, 0x75, 0x34, 0xb7, 0x03, 0x50, 0xeb, 0x3f, 0x70, 0xda, 0x5f, 0x40, 0x0e, 0xbb, 0x94, 0x16, 0xcf, 0x33, 0x51, 0xda, 0x4a, 0x6a, 0x49, 0x10, 0x81, 0x29, 0x0a},
    /* extremes: model 0xffffffffffffffff, 3 tokens; hash 0x61ab084d09977b5c */
    {0x5c, 0x7b, 0x97, 0x09, 0x4d, 0x08, 0xab, 0x61, 0xcb, 0xee, 0xc3, 0x5e, 0x74, 0x44, 0xed, 0x42, 0x7b, 0x4b, 0xd7, 0x57, 0x5a, 0xeb, 0x15, 0x04, 0xb7, 0xc5, 0x98, 0x0c, 0x52, 0xfa, 0xfa, 0x3e},
    /* 2048 tokens: model 0x123456789abcdef0, 2048 tokens; hash 0xdda06ca3c36cd179 */
    {0x79, 0xd1, 0x6c, 0xc3, 0xa3, 0x6c, 0xa0, 0xdd, 0x8e, 0x69, 0x27, 0x5b, 0x35, 0xe6, 0xc7, 0x39, 0xdb, 0xd6, 0x24, 0x68, 0xb6, 0xda, 0x10, 0xa3, 0x21, 0xe5, 0xde, 0x8b, 0x6f, 0xd9, 0x6d, 0x40},
};

static void test_doc_digest(void **state) {
    (void)state;
    static int32_t wide[2048];
    for (uint32_t i = 0; i < 2048; i++) wide[i] = (int32_t)(i * 2654435761u);
    const int32_t one[1] = {0}, three[3] = {1, 2, 3}, ext[3] = {-1, 2147483647, INT32_MIN};
    const struct {
        uint64_t model;
        const int32_t *tokens;
        int n;
    } cases[4] = {{0, one, 1}, {7, three, 3}, {UINT64_MAX, ext, 3}, {0x123456789ABCDEF0ull, wide, 2048}};
    for (int i = 0; i < 4; i++) {
        uint8_t d[32];
        uint64_t h, want = 0;
        lt_assert_status(lazyattn_doc_digest(cases[i].model, cases[i].tokens, cases[i].n, d),
                         LAZYATTN_STATUS_OK);
        assert_memory_equal(d, digest_fixture[i], 32);
        lt_assert_status(lazyattn_doc_hash(cases[i].model, cases[i].tokens, cases[i].n, &h),
                         LAZYATTN_STATUS_OK);
        for (int b = 0; b < 8; b++) want |= (uint64_t)digest_fixture[i][b] << (8 * b);
        assert_true(h == want);
    }
    uint8_t d[32];
    lt_assert_status(lazyattn_doc_digest(0, NULL, 3, d), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_doc_digest(0, one, 0, d), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_doc_digest(0, one, 1, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_doc_digest),
        cmocka_unit_test(test_lazy),
        cmocka_unit_test(test_position),
        cmocka_unit_test(test_prefix),
        cmocka_unit_test(test_none),
        cmocka_unit_test(test_eviction_and_budget),
        cmocka_unit_test(test_retain_limit),
        cmocka_unit_test(test_concurrent_duplicate),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_probe),
        cmocka_unit_test(test_probe_bad_inputs),
        cmocka_unit_test(test_lengths_checked_to_the_end),
        cmocka_unit_test(test_slot_range),
        cmocka_unit_test(test_out_of_host_memory),
    };
    return cmocka_run_group_tests_name("doc_cache", tests, NULL, NULL);
}
