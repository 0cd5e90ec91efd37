/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The order in which the NVIDIA prefill's work-groups are dispatched
 * (issue 11 step 12). A GPU starts work-groups in the order of their linear
 * id as slots free up: list scheduling. The prefill's work-groups differ in
 * length (a causal tile of late tokens sees more keys than an early one) and
 * run one a SM, so their order sets the tail: the last work-groups to start
 * decide when the launch ends. lz_prefill_order writes a permutation of the
 * tasks that the kernel reads by its linear id (cl/nv/prefill_kernels.cl, argument
 * order), from estimated costs, by simulating that list scheduling.
 *
 * Tasks: task = tile * n_heads + head, tile 0 .. n_tiles - 1 (token tiles,
 * cost[tile] each, any unit), head 0 .. n_heads - 1. Orders:
 *  - LZ_ORDER_HEADS: heads one after another, each from its last (heaviest
 *    when causal) tile down: the kernel's order without a table;
 *  - LZ_ORDER_LPT: the longest task first over all heads (tiles major); in
 *    AUTO also over groups of 2, 4, ... heads one group after another, which
 *    keeps fewer heads' keys in flight (the L2 cache) at a time;
 *  - LZ_ORDER_BALANCED: for n = q * slots + r tasks with 0 < r, as a good
 *    schedule has it: r slots run q + 1 tasks, all of them the lightest, the
 *    other slots q heavier ones, each class spread longest first over its
 *    slots; the order is the one in which list scheduling with the estimated
 *    costs starts them (LPT alone puts the r extra tasks last, onto slots
 *    already as loaded as the rest: ~10 % late with ~5 tasks a slot);
 *  - LZ_ORDER_AUTO: of those, the one fewest heads at a time (HEADS, LPT by
 *    2, 4, ... heads, LPT, BALANCED) whose simulated end is within 1 % of
 *    the lower bound max(total / slots, longest task), else within 1 % of
 *    the earliest simulated (on the H200 the tile-major orders of a
 *    16384-token prefill over 8 heads, whose keys exceed the L2 cache, ran
 *    ~1 % slower than HEADS when their predicted gain was nil:
 *    docs/PERFLOG.md, step 12). The simulations cost ~0.1 us a task each on
 *    the host; the caller keeps the result per shape.
 */
#include <limits.h>
#include <stdlib.h>

#include "internal.h"
#include "attn/prefill_order.h"

/* A min-heap of (time, slot), ties by slot. */
typedef struct {
    double *t;
    int *s;
    int n;
} lz_heap;

static int lz_heap_less(const lz_heap *h, int i, int j) {
    return h->t[i] < h->t[j] || (h->t[i] == h->t[j] && h->s[i] < h->s[j]);
}

static void lz_heap_swap(lz_heap *h, int i, int j) {
    double t = h->t[i];
    int s = h->s[i];
    h->t[i] = h->t[j], h->s[i] = h->s[j];
    h->t[j] = t, h->s[j] = s;
}

static void lz_heap_push(lz_heap *h, double t, int s) {
    int i = h->n++;
    h->t[i] = t, h->s[i] = s;
    while (i > 0 && lz_heap_less(h, i, (i - 1) / 2)) {
        lz_heap_swap(h, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void lz_heap_pop(lz_heap *h, double *t, int *s) {
    *t = h->t[0], *s = h->s[0];
    h->n--;
    h->t[0] = h->t[h->n], h->s[0] = h->s[h->n];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && lz_heap_less(h, l, m)) m = l;
        if (r < h->n && lz_heap_less(h, r, m)) m = r;
        if (m == i) break;
        lz_heap_swap(h, i, m);
        i = m;
    }
}

/* When the last of the tasks, started in `order` by list scheduling on
 * `slots` slots, ends. */
static double lz_order_makespan(const int *order, int n, int n_heads, const double *cost,
                                int slots, lz_heap *h) {
    h->n = 0;
    for (int s = 0; s < slots; s++) lz_heap_push(h, 0.0, s);
    double end = 0.0, t;
    int s;
    for (int k = 0; k < n; k++) {
        lz_heap_pop(h, &t, &s);
        t += cost[order[k] / n_heads];
        if (t > end) end = t;
        lz_heap_push(h, t, s);
    }
    return end;
}

static void lz_order_heads(int n_tiles, int n_heads, int *order) {
    for (int h = 0, k = 0; h < n_heads; h++)
        for (int t = n_tiles - 1; t >= 0; t--) order[k++] = t * n_heads + h;
}

/* The tiles by decreasing cost, ties the later tile first. */
typedef struct {
    double cost;
    int tile;
} lz_tile_cost;

static int lz_tile_cost_cmp(const void *a, const void *b) {
    const lz_tile_cost *x = a, *y = b;
    if (x->cost != y->cost) return x->cost < y->cost ? 1 : -1;
    return (x->tile < y->tile) - (x->tile > y->tile);
}

static void lz_order_tiles(int n_tiles, const double *cost, lz_tile_cost *tc, int *tiles) {
    for (int t = 0; t < n_tiles; t++) tc[t].cost = cost[t], tc[t].tile = t;
    qsort(tc, (size_t)n_tiles, sizeof *tc, lz_tile_cost_cmp);
    for (int i = 0; i < n_tiles; i++) tiles[i] = tc[i].tile;
}

/* LPT over groups of `chunk` heads one after another: in each group the
 * tasks by decreasing cost, the group's heads of a tile together. */
static void lz_order_lpt(int n_tiles, int n_heads, int chunk, const int *tiles, int *order) {
    for (int h0 = 0, k = 0; h0 < n_heads; h0 += chunk)
        for (int i = 0; i < n_tiles; i++)
            for (int h = h0; h < h0 + chunk && h < n_heads; h++) order[k++] = tiles[i] * n_heads + h;
}

/* LZ_ORDER_BALANCED from the LPT order `lpt`: slot of each task in `slot`,
 * then the start order into `order`. */
static void lz_order_balanced(const int *lpt, int n, int n_heads, const double *cost, int slots,
                              lz_heap *h, int *slot, int *count, int *next, int *order) {
    const int q = n / slots, r = n % slots;
    /* the light class: the last r * (q + 1) tasks onto slots 0 .. r - 1 */
    const int heavy = n - r * (q + 1);
    for (int c = 0; c < 2; c++) {
        const int first = c ? heavy : 0, last = c ? n : heavy;
        const int s0 = c ? 0 : r, s1 = c ? r : slots, cap = c ? q + 1 : q;
        h->n = 0;
        for (int s = s0; s < s1; s++) lz_heap_push(h, 0.0, s), count[s] = 0;
        for (int k = first; k < last; k++) {
            double t;
            int s;
            lz_heap_pop(h, &t, &s);
            slot[k] = s;
            if (++count[s] < cap) lz_heap_push(h, t + cost[lpt[k] / n_heads], s);
        }
    }
    /* each slot's tasks in LPT order: next[k] the slot's task after k */
    for (int s = 0; s < slots; s++) count[s] = -1; /* its first task */
    for (int k = n - 1; k >= 0; k--) next[k] = count[slot[k]], count[slot[k]] = k;
    h->n = 0;
    for (int s = 0; s < slots; s++)
        if (count[s] >= 0) lz_heap_push(h, 0.0, s);
    for (int k = 0; h->n > 0;) {
        double t;
        int s;
        lz_heap_pop(h, &t, &s);
        const int i = count[s];
        order[k++] = lpt[i];
        count[s] = next[i];
        if (count[s] >= 0) lz_heap_push(h, t + cost[lpt[i] / n_heads], s);
    }
}

int lz_prefill_order(int n_tiles, int n_heads, const double *cost, int slots,
                     lz_order_policy policy, int *order, lz_order_policy *chosen,
                     int *heads_at_once, double *makespan) {
    static const char fn[] = "lz_prefill_order";
    LZ_CHECK_ARG(n_tiles >= 1 && n_heads >= 1 && slots >= 1 && cost && order,
                 "%s: bad arguments", fn);
    LZ_CHECK_ARG(n_tiles <= (1 << 30) / n_heads, "%s: %d x %d tasks", fn, n_tiles, n_heads);
    LZ_CHECK_ARG(policy >= LZ_ORDER_AUTO && policy <= LZ_ORDER_BALANCED, "%s: policy %d", fn,
                 (int)policy);
    const int n = n_tiles * n_heads;
    const int hn = slots > n ? slots : n;
    lz_heap h = {malloc(sizeof(double) * (size_t)hn), malloc(sizeof(int) * (size_t)hn), 0};
    int *lpt = malloc(sizeof(int) * (size_t)n), *cand = malloc(sizeof(int) * (size_t)n);
    int *tiles = malloc(sizeof(int) * (size_t)n_tiles), *slot = malloc(sizeof(int) * (size_t)n);
    int *next = malloc(sizeof(int) * (size_t)n), *count = malloc(sizeof(int) * (size_t)slots);
    lz_tile_cost *tc = malloc(sizeof *tc * (size_t)n_tiles);
    /* the candidates, fewest heads at a time first: HEADS, LPT by 2, 4, ...
     * heads, LPT, BALANCED; each with its simulated end */
    enum { LZ_MAX_CAND = 34 };
    lz_order_policy cp[LZ_MAX_CAND];
    int cchunk[LZ_MAX_CAND], nc = 0;
    double cend[LZ_MAX_CAND];
    int st = LAZYATTN_STATUS_OK;
    if (!h.t || !h.s || !lpt || !cand || !tiles || !slot || !next || !count || !tc) {
        st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: %d tasks", fn, n);
        goto done;
    }
    lz_order_tiles(n_tiles, cost, tc, tiles);
    lz_order_lpt(n_tiles, n_heads, n_heads, tiles, lpt);
    const int balance = n % slots != 0 && n > slots; /* else BALANCED is LPT */
    if (policy == LZ_ORDER_AUTO || policy == LZ_ORDER_HEADS) cp[nc] = LZ_ORDER_HEADS, cchunk[nc++] = 1;
    if (policy == LZ_ORDER_AUTO)
        for (int c = 2; c < n_heads; c *= 2) cp[nc] = LZ_ORDER_LPT, cchunk[nc++] = c;
    if (policy == LZ_ORDER_AUTO || policy == LZ_ORDER_LPT || (policy == LZ_ORDER_BALANCED && !balance))
        cp[nc] = LZ_ORDER_LPT, cchunk[nc++] = n_heads;
    if ((policy == LZ_ORDER_AUTO || policy == LZ_ORDER_BALANCED) && balance)
        cp[nc] = LZ_ORDER_BALANCED, cchunk[nc++] = n_heads;
    /* no order ends before max(total / slots, the longest task): the first
     * candidate within 1 % of that is taken without simulating the rest
     * (with n <= slots every order ends with the longest task) */
    double bound = 0.0, longest = 0.0;
    for (int t = 0; t < n_tiles; t++) {
        bound += cost[t] * n_heads / slots;
        if (cost[t] > longest) longest = cost[t];
    }
    if (longest > bound) bound = longest;
    double best = 0.0;
    int pick = -1;
    for (int i = 0; i < nc; i++) {
        if (cp[i] == LZ_ORDER_HEADS) lz_order_heads(n_tiles, n_heads, cand);
        if (cp[i] == LZ_ORDER_LPT) lz_order_lpt(n_tiles, n_heads, cchunk[i], tiles, cand);
        if (cp[i] == LZ_ORDER_BALANCED)
            lz_order_balanced(lpt, n, n_heads, cost, slots, &h, slot, count, next, cand);
        cend[i] = n <= slots ? longest : lz_order_makespan(cand, n, n_heads, cost, slots, &h);
        if (i == 0 || cend[i] < best) best = cend[i];
        if (cend[i] <= bound * 1.01) {
            pick = i;
            break;
        }
    }
    if (pick < 0)
        for (pick = 0; cend[pick] > best * 1.01;) pick++;
    if (cp[pick] == LZ_ORDER_HEADS) lz_order_heads(n_tiles, n_heads, order);
    if (cp[pick] == LZ_ORDER_LPT) lz_order_lpt(n_tiles, n_heads, cchunk[pick], tiles, order);
    if (cp[pick] == LZ_ORDER_BALANCED)
        lz_order_balanced(lpt, n, n_heads, cost, slots, &h, slot, count, next, order);
    if (chosen) *chosen = cp[pick];
    if (heads_at_once) *heads_at_once = cchunk[pick];
    if (makespan) *makespan = cend[pick];
done:
    free(h.t), free(h.s), free(lpt), free(cand), free(tiles), free(slot), free(next), free(count);
    free(tc);
    return st;
}

int lz_prefill_order_lists(const int *order, int n_tiles, int n_heads, const double *cost, int slots,
                           int **lists, int *len) {
    static const char fn[] = "lz_prefill_order_lists";
    LZ_CHECK_ARG(order && cost && lists && len && n_tiles >= 1 && n_heads >= 1 && slots >= 1,
                 "%s: bad arguments", fn);
    LZ_CHECK_ARG(n_tiles <= (1 << 30) / n_heads, "%s: %d x %d tasks", fn, n_tiles, n_heads);
    const int n = n_tiles * n_heads;
    *lists = NULL, *len = 0;
    lz_heap h = {malloc(sizeof(double) * (size_t)slots), malloc(sizeof(int) * (size_t)slots), 0};
    int *slot = malloc(sizeof(int) * (size_t)n), *count = calloc((size_t)slots, sizeof(int));
    int st = LAZYATTN_STATUS_OK, rounds = 0;
    if (!h.t || !h.s || !slot || !count) {
        st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: %d tasks", fn, n);
        goto done;
    }
    for (int s = 0; s < slots; s++) lz_heap_push(&h, 0.0, s);
    for (int k = 0; k < n; k++) {
        double t;
        int s;
        if (order[k] < 0 || order[k] >= n) {
            st = lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: order[%d] = %d of %d tasks", fn, k, order[k],
                         n);
            goto done;
        }
        lz_heap_pop(&h, &t, &s);
        slot[k] = s;
        if (++count[s] > rounds) rounds = count[s];
        lz_heap_push(&h, t + cost[order[k] / n_heads], s);
    }
    if ((size_t)(rounds + 1) * (size_t)slots > (size_t)INT_MAX) {
        st = lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: %d rounds of %d slots", fn, rounds, slots);
        goto done;
    }
    *len = (rounds + 1) * slots;
    *lists = malloc(sizeof(int) * (size_t)*len);
    if (!*lists) {
        *len = 0;
        st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: %d rounds of %d slots", fn, rounds, slots);
        goto done;
    }
    for (int i = 0; i < *len; i++) (*lists)[i] = -1;
    for (int s = 0; s < slots; s++) count[s] = 0;
    for (int k = 0; k < n; k++) (*lists)[count[slot[k]]++ * slots + slot[k]] = order[k];
done:
    free(h.t), free(h.s), free(slot), free(count);
    return st;
}
