/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The prefill's dispatch order (lib/prefill_order.c, issue 11 step 12):
 * every order is a permutation of the tasks; its reported end is what an
 * independent list-scheduling simulation (a linear scan for the first free
 * slot, no heap) gives for it; AUTO is within 1 % of every single policy;
 * HEADS is the kernel's own order; on the bench's shapes the chosen order
 * comes within a few percent of the lower bound max(total / slots, longest)
 * where the kernel's own order does not; on tiny cases, against the best of
 * all assignments found by enumeration. The persistent kernel's task lists
 * (lz_prefill_order_lists, step 13): each task once, each slot's list ended
 * by -1, each slot's load and the end as the scan simulation assigns them.
 * Bad arguments answer INVALID_ARGUMENT with a message. No device needed.
 */
#include "test_common.h"

#include "attn/prefill_order.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* List scheduling by scan: the slot free first (lowest index on ties). */
static int first_free(const double *free_at, int slots) {
    int s = 0;
    for (int i = 1; i < slots; i++)
        if (free_at[i] < free_at[s]) s = i;
    return s;
}

/* When the tasks of `order`, each to the slot free first, end. */
static double scan_end(const int *order, int n, int heads, const double *cost, int slots) {
    double *free_at = calloc((size_t)slots, sizeof *free_at), end = 0.0;
    assert_non_null(free_at);
    for (int k = 0; k < n; k++) {
        const int s = first_free(free_at, slots);
        free_at[s] += cost[order[k] / heads];
        if (free_at[s] > end) end = free_at[s];
    }
    free(free_at);
    return end;
}

static void assert_permutation(const int *order, int n) {
    char *seen = calloc((size_t)n, 1);
    assert_non_null(seen);
    for (int k = 0; k < n; k++) {
        assert_true(order[k] >= 0 && order[k] < n);
        assert_int_equal(seen[order[k]], 0);
        seen[order[k]] = 1;
    }
    free(seen);
}

static double lower_bound(const double *cost, int tiles, int heads, int slots) {
    double total = 0.0, longest = 0.0;
    for (int t = 0; t < tiles; t++) {
        total += cost[t] * heads;
        if (cost[t] > longest) longest = cost[t];
    }
    return total / slots > longest ? total / slots : longest;
}

/* Runs every policy on one shape; returns AUTO's end over the lower bound
 * and, through heads_ratio, the kernel's own order's. */
static double check_shape(const double *cost, int tiles, int heads, int slots, double *heads_ratio,
                          lz_order_policy *auto_chosen, int *auto_at_once) {
    const int n = tiles * heads;
    int *order = malloc(sizeof(int) * (size_t)n);
    assert_non_null(order);
    double ends[4] = {0};
    for (int p = LZ_ORDER_AUTO; p <= LZ_ORDER_BALANCED; p++) {
        lz_order_policy chosen;
        double end = -1.0;
        int at_once = 0;
        assert_int_equal(lz_prefill_order(tiles, heads, cost, slots, (lz_order_policy)p, order,
                                          &chosen, &at_once, &end), 0);
        assert_true(at_once >= 1 && at_once <= heads);
        if (p == LZ_ORDER_AUTO) *auto_at_once = at_once;
        assert_permutation(order, n);
        const double ref = scan_end(order, n, heads, cost, slots);
        assert_true(end == ref);
        const int balance = n % slots != 0 && n > slots; /* else BALANCED is LPT */
        if (p != LZ_ORDER_AUTO)
            assert_int_equal((int)chosen, p == LZ_ORDER_BALANCED && !balance ? LZ_ORDER_LPT : p);
        else *auto_chosen = chosen;
        if (p == LZ_ORDER_HEADS)
            for (int k = 0; k < n; k++) /* head by head, last tile first */
                assert_int_equal(order[k], (tiles - 1 - k % tiles) * heads + k / tiles);
        ends[p] = end;
    }
    /* AUTO: within 1 % of the best single policy (it trades up to 1 % for fewer heads at once) */
    for (int p = LZ_ORDER_HEADS; p <= LZ_ORDER_BALANCED; p++) assert_true(ends[0] <= ends[p] * 1.01);
    free(order);
    const double bound = lower_bound(cost, tiles, heads, slots);
    *heads_ratio = ends[LZ_ORDER_HEADS] / bound;
    return ends[0] / bound;
}

/* The costs the library estimates (lib/attn/nv_build.c, lz_nv_prefill_order):
 * 48 tokens a tile, 32 keys a key tile, 4 key tiles for the start and end. */
static int bench_costs(int n_queries, int n_keys, double *cost) {
    const int tokens = 48, kt = 32, tiles = (n_queries + tokens - 1) / tokens;
    const int prefix = n_keys > n_queries ? n_keys - n_queries : 0;
    for (int t = 0; t < tiles; t++) {
        const int last = (t + 1) * tokens < n_queries ? (t + 1) * tokens : n_queries;
        cost[t] = 4.0 + (prefix + last + kt - 1) / kt;
    }
    return tiles;
}

static void test_bench_shapes(void **state) {
    (void)state;
    static double cost[1024];
    double heads_ratio;
    lz_order_policy chosen = LZ_ORDER_AUTO;
    int at_once = 0;
    /* (a) 4096 new tokens over 4 x 2048 cached: 688 work-groups, 5.2 a SM */
    int tiles = bench_costs(4096, 4 * 2048 + 4096, cost);
    double r = check_shape(cost, tiles, 8, 132, &heads_ratio, &chosen, &at_once);
    printf("(a) auto %.4f (policy %d), heads %.4f\n", r, (int)chosen, heads_ratio);
    assert_true(r < 1.02);
    assert_true(heads_ratio > 1.05);
    assert_int_equal((int)chosen, LZ_ORDER_BALANCED);
    /* (b) 8192 causal: 1368 work-groups of 4 .. 260 */
    tiles = bench_costs(8192, 8192, cost);
    r = check_shape(cost, tiles, 8, 132, &heads_ratio, &chosen, &at_once);
    printf("(b) auto %.4f (policy %d, %d heads at once), heads %.4f\n", r, (int)chosen, at_once,
           heads_ratio);
    assert_true(r < 1.01);
    assert_true(heads_ratio > 1.02);
    assert_int_equal((int)chosen, LZ_ORDER_LPT);
    assert_true(at_once < 8); /* within 1 % of LPT over all 8 with fewer heads at once */
    /* 16384 causal: the kernel's own order within 1 % of the best: kept */
    tiles = bench_costs(16384, 16384, cost);
    r = check_shape(cost, tiles, 8, 132, &heads_ratio, &chosen, &at_once);
    printf("16384 causal: auto %.4f (policy %d), heads %.4f\n", r, (int)chosen, heads_ratio);
    assert_int_equal((int)chosen, LZ_ORDER_HEADS);
    assert_true(heads_ratio < 1.01);
    /* equal costs (not causal): no order is better; the kernel's own kept */
    for (int t = 0; t < 342; t++) cost[t] = 516.0;
    r = check_shape(cost, 342, 8, 132, &heads_ratio, &chosen, &at_once);
    assert_int_equal((int)chosen, LZ_ORDER_HEADS);
    assert_true(r == heads_ratio);
    /* fewer tasks than slots, one tile, one head */
    tiles = bench_costs(100, 100, cost);
    r = check_shape(cost, tiles, 2, 132, &heads_ratio, &chosen, &at_once);
    assert_true(r == 1.0);
    cost[0] = 7.0;
    r = check_shape(cost, 1, 1, 1, &heads_ratio, &chosen, &at_once);
    assert_true(r == 1.0);
}

/* Random costs (increasing with the tile, as causal ones are, or not):
 * every order valid and consistent; AUTO within 4/3 of the bound plus the
 * longest task (list scheduling's own guarantee is 2 - 1/slots). */
static void test_random_shapes(void **state) {
    (void)state;
    static double cost[300];
    unsigned x = 12345u;
    for (int c = 0; c < 60; c++) {
        const int tiles = 1 + (int)((x = x * 1103515245u + 12345u) >> 16) % 300;
        const int heads = 1 + (int)((x = x * 1103515245u + 12345u) >> 16) % 9;
        const int slots = 1 + (int)((x = x * 1103515245u + 12345u) >> 16) % 140;
        const int rising = c % 2;
        for (int t = 0; t < tiles; t++) {
            x = x * 1103515245u + 12345u;
            cost[t] = rising ? 10.0 + t + (x >> 16) % 5 : 1.0 + (x >> 16) % 100;
        }
        double heads_ratio;
        lz_order_policy chosen = LZ_ORDER_AUTO;
        int at_once = 0;
        const double r = check_shape(cost, tiles, heads, slots, &heads_ratio, &chosen, &at_once);
        assert_true(r >= 1.0 && r <= 2.0);
    }
}

/* Tiny cases against the best assignment of tasks to slots (enumerated):
 * AUTO's list schedule within 4/3 of it (LPT's bound). */
static double best_assignment(const double *c, int n, int slots) {
    int assign[8] = {0};
    double best = 1e30;
    for (;;) {
        double load[4] = {0}, end = 0.0;
        for (int i = 0; i < n; i++) load[assign[i]] += c[i];
        for (int s = 0; s < slots; s++)
            if (load[s] > end) end = load[s];
        if (end < best) best = end;
        int i = 0;
        while (i < n && ++assign[i] == slots) assign[i++] = 0;
        if (i == n) break;
    }
    return best;
}

static void test_tiny_optimum(void **state) {
    (void)state;
    unsigned x = 777u;
    for (int c = 0; c < 200; c++) {
        const int heads = 1 + c % 2, tiles = (c % 2 ? 2 : 4) + (c / 2) % 3; /* 4..8 tasks */
        const int slots = 2 + c % 3, n = tiles * heads;
        double cost[8], task[8];
        for (int t = 0; t < tiles; t++) cost[t] = 1.0 + (double)((x = x * 1103515245u + 12345u) >> 16 & 31);
        for (int i = 0; i < n; i++) task[i] = cost[i / heads];
        int order[8];
        double end;
        assert_int_equal(lz_prefill_order(tiles, heads, cost, slots, LZ_ORDER_AUTO, order, NULL, NULL, &end), 0);
        assert_permutation(order, n);
        assert_true(end == scan_end(order, n, heads, cost, slots));
        const double opt = best_assignment(task, n, slots);
        assert_true(end >= opt - 1e-9);
        assert_true(end <= opt * 4.0 / 3.0 * 1.01 + 1e-9); /* LPT's bound, AUTO's 1 % */
    }
}

/* The lists of an order: what the scan simulation gives each slot, in order. */
static void check_lists(const int *order, int tiles, int heads, const double *cost, int slots) {
    const int n = tiles * heads;
    int *lists = NULL, len = 0;
    assert_int_equal(lz_prefill_order_lists(order, tiles, heads, cost, slots, &lists, &len), 0);
    assert_non_null(lists);
    assert_true(len % slots == 0 && len >= slots);
    double *free_at = calloc((size_t)slots, sizeof *free_at);
    int *next = calloc((size_t)slots, sizeof *next), rounds = 0;
    assert_non_null(free_at);
    assert_non_null(next);
    for (int k = 0; k < n; k++) {
        const int s = first_free(free_at, slots);
        free_at[s] += cost[order[k] / heads];
        assert_true((next[s] + 1) * slots + s < len);
        assert_int_equal(lists[next[s]++ * slots + s], order[k]);
        if (next[s] > rounds) rounds = next[s];
    }
    for (int s = 0; s < slots; s++) /* every list ended, nothing after */
        for (int k = next[s]; k < len / slots; k++) assert_int_equal(lists[k * slots + s], -1);
    assert_int_equal(len, (rounds + 1) * slots);
    free(free_at), free(next), free(lists);
}

static void test_persistent_lists(void **state) {
    (void)state;
    static double cost[400];
    static int order[400 * 8];
    unsigned x = 4242u;
    for (int c = 0; c < 40; c++) {
        const int tiles = 1 + (int)((x = x * 1103515245u + 12345u) >> 16) % 400;
        const int heads = 1 + (int)((x = x * 1103515245u + 12345u) >> 16) % 8;
        const int n = tiles * heads;
        int slots = 1 + (int)((x = x * 1103515245u + 12345u) >> 16) % 140;
        if (c % 4 == 0) slots = n < 132 ? n : 132; /* the host's: at most one a task */
        for (int t = 0; t < tiles; t++) cost[t] = 2.0 + t + ((x = x * 1103515245u + 12345u) >> 16) % 7;
        for (int p = LZ_ORDER_AUTO; p <= LZ_ORDER_BALANCED; p++) {
            assert_int_equal(lz_prefill_order(tiles, heads, cost, slots, (lz_order_policy)p, order, NULL, NULL,
                                               NULL), 0);
            check_lists(order, tiles, heads, cost, slots);
        }
    }
    /* the bench's (b) on 132: 171 x 8 tasks, no slot without one, 11 rounds at most */
    const int tiles = bench_costs(8192, 8192, cost);
    int *lists = NULL, len = 0;
    assert_int_equal(lz_prefill_order(tiles, 8, cost, 132, LZ_ORDER_AUTO, order, NULL, NULL, NULL), 0);
    check_lists(order, tiles, 8, cost, 132);
    assert_int_equal(lz_prefill_order_lists(order, tiles, 8, cost, 132, &lists, &len), 0);
    for (int s = 0; s < 132; s++) assert_true(lists[s] >= 0);
    assert_true(len <= 12 * 132);
    free(lists);
    /* bad arguments */
    order[0] = tiles * 8;
    assert_int_equal(lz_prefill_order_lists(order, tiles, 8, cost, 132, &lists, &len),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "lz_prefill_order_lists"));
    assert_null(lists);
    assert_int_equal(lz_prefill_order_lists(order, tiles, 8, cost, 0, &lists, &len),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(lz_prefill_order_lists(NULL, tiles, 8, cost, 1, &lists, &len),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(lz_prefill_order_lists(order, 1 << 20, 1 << 12, cost, 1, &lists, &len),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
}

static void test_bad_arguments(void **state) {
    (void)state;
    double cost[2] = {1.0, 2.0};
    int order[4];
    assert_int_equal(lz_prefill_order(0, 1, cost, 1, LZ_ORDER_AUTO, order, NULL, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "lz_prefill_order"));
    assert_int_equal(lz_prefill_order(2, 0, cost, 1, LZ_ORDER_AUTO, order, NULL, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(lz_prefill_order(2, 2, cost, 0, LZ_ORDER_AUTO, order, NULL, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(lz_prefill_order(2, 2, NULL, 1, LZ_ORDER_AUTO, order, NULL, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(lz_prefill_order(2, 2, cost, 1, LZ_ORDER_AUTO, NULL, NULL, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(lz_prefill_order(2, 2, cost, 1, (lz_order_policy)9, order, NULL, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(lz_prefill_order(1 << 20, 1 << 12, cost, 1, LZ_ORDER_AUTO, order, NULL, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(lz_prefill_order(2, 2, cost, 3, LZ_ORDER_BALANCED, order, NULL, NULL, NULL), 0);
    assert_permutation(order, 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bench_shapes),
        cmocka_unit_test(test_random_shapes),
        cmocka_unit_test(test_tiny_optimum),
        cmocka_unit_test(test_persistent_lists),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
