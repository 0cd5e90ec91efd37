/* SPDX-License-Identifier: Apache-2.0 */
/* The host store's pinned memory (lib/store/pinned_arena.c) and the host
 * store keeping its values there (store_host.c): first fit checked against
 * a page map kept here, values that survive eviction while borrowed, and
 * a reservation put without a copy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "lazyattn.h"
#include "store/pinned_arena.h"
#include "store/store_internal.h"
#include "test_common.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PAGE 4096

static lazyattn_context *ctx_of(void **state) { return *state; }

static lz_pinned_arena *arena_of(void **state, uint64_t bytes) {
    lazyattn_context *ctx = ctx_of(state);
    lz_pinned_arena *a = NULL;
    lt_assert_status(lz_arena_create(ctx, bytes, &a), LAZYATTN_STATUS_OK);
    return a;
}

/* A random sequence of allocations and frees in an arena of 64 pages (one
 * buffer): every allocation lies inside, on free pages of the page map, at
 * the lowest run of free pages long enough (first fit); NULL only when the
 * map has no such run; contents written into each survive the others. */
static void test_first_fit_against_a_page_map(void **state) {
    enum { PAGES = 64, LIVE = 24 };
    lz_pinned_arena *a = arena_of(state, (uint64_t)PAGES * PAGE);
    assert_int_equal(lz_arena_bytes(a), (uint64_t)PAGES * PAGE);
    assert_int_equal(lz_arena_largest(a), (size_t)PAGES * PAGE);
    uint8_t *base = lz_arena_alloc(a, 1); /* the lowest address: the buffer's start */
    assert_non_null(base);
    assert_true(lz_arena_owns(a, base));
    lz_arena_free(a, base);
    assert_int_equal(lz_arena_used(a), 0);
    int map[PAGES] = {0}; /* owner + 1 of each page, 0 free */
    uint8_t *live[LIVE] = {0};
    size_t size[LIVE] = {0};
    lt_rng r = {lt_seed()};
    for (int step = 0; step < 4000; step++) {
        int i = lt_int(&r, 0, LIVE - 1);
        if (live[i]) { /* free it, after checking its bytes */
            for (size_t b = 0; b < size[i]; b++)
                if (live[i][b] != (uint8_t)(i * 31 + b))
                    fail_msg("step %d: allocation %d byte %zu overwritten", step, i, b);
            lz_arena_free(a, live[i]);
            for (int p = 0; p < PAGES; p++)
                if (map[p] == i + 1) map[p] = 0;
            live[i] = NULL;
            continue;
        }
        size_t want = (size_t)lt_int(&r, 1, 12 * PAGE);
        size_t pages = (want + PAGE - 1) / PAGE;
        int first = -1; /* the lowest run of pages free pages in the map */
        for (int p = 0, run = 0; p < PAGES && first < 0; p++) {
            run = map[p] ? 0 : run + 1;
            if (run == (int)pages) first = p - (int)pages + 1;
        }
        uint8_t *got = lz_arena_alloc(a, want);
        if (first < 0) {
            assert_null(got);
            continue;
        }
        assert_non_null(got);
        assert_int_equal((size_t)(got - base), (size_t)first * PAGE);
        for (size_t p = 0; p < pages; p++) map[first + (int)p] = i + 1;
        for (size_t b = 0; b < want; b++) got[b] = (uint8_t)(i * 31 + b);
        live[i] = got;
        size[i] = want;
        size_t used = 0;
        for (int p = 0; p < PAGES; p++) used += map[p] ? PAGE : 0;
        assert_int_equal(lz_arena_used(a), used);
    }
    assert_null(lz_arena_alloc(a, (size_t)PAGES * PAGE + 1)); /* longer than the buffer */
    assert_null(lz_arena_alloc(a, 0));
    uint8_t outside = 0;
    assert_false(lz_arena_owns(a, &outside));
    lz_arena_free(a, &outside); /* not the arena's: nothing */
    for (int i = 0; i < LIVE; i++) lz_arena_free(a, live[i]);
    assert_int_equal(lz_arena_used(a), 0);
    assert_non_null(lz_arena_alloc(a, (size_t)PAGES * PAGE)); /* whole again */
    lz_arena_release(a);
}

/* An arena refuses bad arguments by status, and a store with one keeps
 * its values there: put, get (pinned for the arena's context, not for
 * another), eviction by LRU when the arena has no room. */
static lazyattn_doc_key key_n(int n) {
    lazyattn_doc_key k = {7, {0}};
    k.digest[0] = (uint8_t)n;
    k.digest[31] = 0x5a;
    return k;
}

static void fill(uint8_t *p, size_t n, int seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed * 131 + i * 7 + (i >> 9));
}

static void assert_value(lazyattn_store *s, int n, size_t size, int seed) {
    lazyattn_store_value v;
    lt_assert_status(lazyattn_store_get(s, key_n(n), &v), LAZYATTN_STATUS_OK);
    assert_int_equal(v.size, size);
    uint8_t *want = malloc(size);
    assert_non_null(want);
    fill(want, size, seed);
    assert_memory_equal(v.data, want, size);
    free(want);
    lazyattn_store_release(s, &v);
}

static void test_host_store_in_the_arena(void **state) {
    lazyattn_context *ctx = ctx_of(state);
    cl_context cl = lazyattn_context_cl_context(ctx);
    lz_pinned_arena *bad = NULL;
    lt_assert_status(lz_arena_create(ctx, 0, &bad), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(bad);
    const size_t V = 5 * PAGE + 100; /* 6 pages a value: 4 fit in 26 pages */
    lazyattn_store *s = NULL;
    lt_assert_status(lazyattn_store_create_host(64 * PAGE, &s), LAZYATTN_STATUS_OK);
    assert_false(lz_store_has_arena(s, NULL));
    lz_pinned_arena *a = arena_of(state, 26 * PAGE);
    assert_int_equal(lz_store_use_arena(s, a), 1);
    assert_true(lz_store_has_arena(s, cl));
    assert_true(lz_store_has_arena(s, NULL));
    assert_false(lz_store_has_arena(s, (cl_context)&bad)); /* another context */
    lz_arena_release(a);                                  /* the store's now */
    uint8_t *val = malloc(V);
    assert_non_null(val);
    for (int n = 0; n < 4; n++) {
        fill(val, V, n);
        lt_assert_status(lazyattn_store_put(s, key_n(n), val, V), LAZYATTN_STATUS_OK);
    }
    /* order by use, most recent first: 3 2 1 0; 2 borrowed, then 0 1 3 used:
       3 1 0 2, with 2 (borrowed) the least recent */
    lazyattn_store_value held;
    lt_assert_status(lazyattn_store_get(s, key_n(2), &held), LAZYATTN_STATUS_OK);
    assert_true(lz_store_value_pinned(s, &held, cl));
    assert_false(lz_store_value_pinned(s, &held, (cl_context)&bad));
    assert_value(s, 0, V, 0);
    assert_value(s, 1, V, 1);
    assert_value(s, 3, V, 3);
    /* the fifth value is under the store's budget but finds no room in the
       arena (2 pages free): 2 is evicted (borrowed: out of the index, its run
       kept), then 0, whose run it takes */
    fill(val, V, 4);
    lt_assert_status(lazyattn_store_put(s, key_n(4), val, V), LAZYATTN_STATUS_OK);
    const int gone[] = {2, 0}, kept[] = {1, 3, 4};
    for (int i = 0; i < 2; i++) {
        int there = 1;
        lt_assert_status(lazyattn_store_exists(s, key_n(gone[i]), &there), LAZYATTN_STATUS_OK);
        assert_false(there);
    }
    for (int i = 0; i < 3; i++) assert_value(s, kept[i], V, kept[i]);
    lazyattn_store_value v4;
    lt_assert_status(lazyattn_store_get(s, key_n(4), &v4), LAZYATTN_STATUS_OK);
    assert_true(lz_store_value_pinned(s, &v4, cl));
    lazyattn_store_release(s, &v4);
    uint8_t *want2 = malloc(V);
    assert_non_null(want2);
    fill(want2, V, 2);
    assert_memory_equal(held.data, want2, V); /* the borrowed value intact */
    lazyattn_store_release(s, &held);      /* its run given back */
    free(want2);
    /* a value longer than the arena's buffer: malloc'ed, nothing evicted */
    const size_t BIG = 27 * PAGE;
    uint8_t *big = malloc(BIG);
    assert_non_null(big);
    fill(big, BIG, 9);
    lt_assert_status(lazyattn_store_put(s, key_n(9), big, BIG), LAZYATTN_STATUS_OK);
    free(big);
    lazyattn_store_value v9;
    lt_assert_status(lazyattn_store_get(s, key_n(9), &v9), LAZYATTN_STATUS_OK);
    assert_false(lz_store_value_pinned(s, &v9, cl));
    lazyattn_store_release(s, &v9);
    assert_value(s, 9, BIG, 9);
    for (int i = 0; i < 3; i++) assert_value(s, kept[i], V, kept[i]);
    /* a reservation: filled in place and put (sealed), or given back */
    void *item = NULL;
    int pinned = 0;
    uint8_t *p = lz_store_reserve(s, V, cl, &item, &pinned);
    assert_non_null(p);
    assert_non_null(item);
    assert_true(pinned); /* in 2's run, given back with its release */
    fill(p, V, 6);
    lz_store_put_reserved(s, key_n(6), item);
    assert_value(s, 6, V, 6);
    lt_assert_status(lazyattn_store_get(s, key_n(6), &held), LAZYATTN_STATUS_OK);
    assert_true(lz_store_value_sealed(s, &held));
    assert_true(lz_store_value_pinned(s, &held, cl));
    lazyattn_store_release(s, &held);
    p = lz_store_reserve(s, V, cl, &item, &pinned);
    assert_non_null(p);
    lz_store_unreserve(s, item);
    assert_null(lz_store_reserve(s, 64 * PAGE + 1, cl, &item, &pinned)); /* over the budget */
    assert_null(item);
    lazyattn_store_destroy(s);
    free(val);
}

/* Other stores have no arena and no reservations. */
static void test_other_stores_reserve_nothing(void **state) {
    lazyattn_context *ctx = ctx_of(state);
    char dir[] = "/tmp/lazyattn-arena-XXXXXX";
    assert_non_null(mkdtemp(dir));
    lazyattn_store *s = NULL;
    lt_assert_status(lazyattn_store_create_dir(dir, &s), LAZYATTN_STATUS_OK);
    lz_pinned_arena *a = arena_of(state, 4 * PAGE);
    assert_int_equal(lz_store_use_arena(s, a), 0);
    assert_false(lz_store_has_arena(s, NULL));
    assert_int_equal(lz_store_host_budget_bytes(s), 0);
    void *item = (void *)1;
    int pinned = 1;
    assert_null(lz_store_reserve(s, PAGE, lazyattn_context_cl_context(ctx), &item, &pinned));
    assert_null(item);
    assert_false(pinned);
    lz_arena_release(a);
    lazyattn_store_destroy(s);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_fit_against_a_page_map),
        cmocka_unit_test(test_host_store_in_the_arena),
        cmocka_unit_test(test_other_stores_reserve_nothing),
    };
    return cmocka_run_group_tests_name("pinned_arena", tests, lt_context_setup,
                                       lt_context_teardown);
}
