/* SPDX-License-Identifier: Apache-2.0 */
/* Device-resident plans (lib/device_plan.c): the device tables read back
 * against the expected packing after random edits, the bytes each update
 * writes against a hand count, decode through a plan over many append steps
 * against decode over freshly uploaded host tables (bit for bit) and the
 * float64 reference, bad input, and every error path (injected failures)
 * without leaks. */
#include "test_common.h"
#include "internal.h" /* lz_device_plan_fail_at */
#include "context_refs.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- helpers ---- */

/* A host sequence: its table and entry positions, q_pos. */
typedef struct host_seq {
    int n, cap;
    uint64_t *table;
    int32_t *pos;
    int32_t q_pos;
} host_seq;

static void host_seq_push(host_seq *s, uint64_t word, int32_t pos) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->table = realloc(s->table, sizeof(uint64_t) * s->cap);
        s->pos = realloc(s->pos, sizeof(int32_t) * s->cap);
        assert_non_null(s->table);
        assert_non_null(s->pos);
    }
    s->table[s->n] = word;
    s->pos[s->n] = pos;
    s->n++;
}

static lazyattn_plan_seq as_plan_seq(const host_seq *s) {
    lazyattn_plan_seq p = {s->n, s->table, s->pos, s->q_pos, NULL};
    return p;
}

/* Reads the plan's device buffers back and compares them with seqs packed
 * back to back. */
static void check_device_tables(lazyattn_context *ctx, const lazyattn_device_plan *plan, int n,
                                const lazyattn_plan_seq *seqs) {
    lazyattn_device_plan_info info;
    lt_assert_status(lazyattn_device_plan_get_info(plan, &info), LAZYATTN_STATUS_OK);
    int total = 0, most = 0;
    for (int i = 0; i < n; i++) {
        total += seqs[i].n_entries;
        if (seqs[i].n_entries > most) most = seqs[i].n_entries;
    }
    assert_int_equal(info.n_seqs, n);
    assert_int_equal(info.n_entries, total);
    assert_int_equal(info.max_entries, most);
    assert_true(info.capacity >= total);
    uint64_t *t = malloc(sizeof(uint64_t) * total);
    int32_t *p = malloc(sizeof(int32_t) * total), *off = malloc(sizeof(int32_t) * (n + 1)),
            *qp = malloc(sizeof(int32_t) * n);
    lt_read(ctx, info.table, t, sizeof(uint64_t) * total);
    lt_read(ctx, info.entry_pos, p, sizeof(int32_t) * total);
    lt_read(ctx, info.seq_offsets, off, sizeof(int32_t) * (n + 1));
    lt_read(ctx, info.q_pos, qp, sizeof(int32_t) * n);
    int at = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(off[i], at);
        assert_int_equal(qp[i], seqs[i].q_pos);
        assert_memory_equal(t + at, seqs[i].table, sizeof(uint64_t) * seqs[i].n_entries);
        assert_memory_equal(p + at, seqs[i].entry_pos, sizeof(int32_t) * seqs[i].n_entries);
        at += seqs[i].n_entries;
    }
    assert_int_equal(off[n], total);
    free(t);
    free(p);
    free(off);
    free(qp);
}

/* ---- bad input ---- */

static void test_bad_input(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_device_plan *plan = (lazyattn_device_plan *)1;
    lazyattn_device_plan_config cfg;
    lazyattn_device_plan_config_init(&cfg);
    assert_int_equal(cfg.max_seqs, 1);
    assert_int_equal(cfg.initial_entries, 256);

    lt_assert_status(lazyattn_device_plan_create(ctx, &cfg, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_device_plan_create(NULL, &cfg, &plan), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(plan);
    int bad_seqs[] = {0, -1, LAZYATTN_DEVICE_PLAN_MAX_SEQS + 1, INT_MAX};
    for (size_t i = 0; i < sizeof bad_seqs / sizeof *bad_seqs; i++) {
        cfg.max_seqs = bad_seqs[i];
        lt_assert_status(lazyattn_device_plan_create(ctx, &cfg, &plan),
                         LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_null(plan);
        assert_non_null(strstr(lazyattn_last_error(), "max_seqs"));
    }
    cfg.max_seqs = 1;
    cfg.initial_entries = 0;
    lt_assert_status(lazyattn_device_plan_create(ctx, &cfg, &plan), LAZYATTN_STATUS_INVALID_ARGUMENT);
    cfg.initial_entries = -5;
    lt_assert_status(lazyattn_device_plan_create(ctx, &cfg, &plan), LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* 16 GiB of table: above any allocation PoCL allows here; refused before allocating */
    cl_ulong max_alloc = 0;
    clGetDeviceInfo(lazyattn_context_device(ctx), CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc,
                    &max_alloc, NULL);
    if (max_alloc < (cl_ulong)INT_MAX * 8) {
        cfg.initial_entries = INT_MAX;
        lt_assert_status(lazyattn_device_plan_create(ctx, &cfg, &plan),
                         LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY);
        assert_null(plan);
        assert_non_null(strstr(lazyattn_last_error(), "largest allocation"));
    }

    cfg.initial_entries = 4;
    cfg.max_seqs = 2;
    lt_assert_status(lazyattn_device_plan_create(ctx, &cfg, &plan), LAZYATTN_STATUS_OK);
    lazyattn_decode_args da;
    lazyattn_decode_args_init(&da);
    lazyattn_prefill_args pa;
    lazyattn_prefill_args_init(&pa);
    /* nothing uploaded yet */
    lt_assert_status(lazyattn_device_plan_decode_args(plan, &da), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "holds no tables"));
    lt_assert_status(lazyattn_device_plan_prefill_args(plan, 0, &pa), LAZYATTN_STATUS_INVALID_ARGUMENT);

    uint64_t w[3];
    int32_t pos[3] = {0, 16, 32};
    for (int i = 0; i < 3; i++) lt_assert_status(lazyattn_entry_pack(i, 0, 16, &w[i]), LAZYATTN_STATUS_OK);
    lazyattn_plan_seq s[3] = {{3, w, pos, 40, NULL}, {2, w, pos, 20, NULL}, {1, w, pos, 3, NULL}};
    cl_event ev = (cl_event)1;
    lt_assert_status(lazyattn_device_plan_update(NULL, 1, s, NULL, &ev), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(ev);
    lt_assert_status(lazyattn_device_plan_update(plan, 1, NULL, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_device_plan_update(plan, 0, s, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_device_plan_update(plan, -1, s, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_device_plan_update(plan, 3, s, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "max_seqs"));
    lazyattn_plan_seq bad = {0, w, pos, 0, NULL};
    lt_assert_status(lazyattn_device_plan_update(plan, 1, &bad, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    bad.n_entries = -3;
    lt_assert_status(lazyattn_device_plan_update(plan, 1, &bad, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    bad.n_entries = 1;
    bad.table = NULL;
    lt_assert_status(lazyattn_device_plan_update(plan, 1, &bad, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    bad.table = w;
    bad.entry_pos = NULL;
    lt_assert_status(lazyattn_device_plan_update(plan, 1, &bad, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* entries of all sequences past INT_MAX: refused before any array is read */
    lazyattn_plan_seq huge[2] = {{INT_MAX / 2 + 1, w, pos, 0, NULL}, {INT_MAX / 2 + 1, w, pos, 0, NULL}};
    lt_assert_status(lazyattn_device_plan_update(plan, 2, huge, NULL, NULL), LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_non_null(strstr(lazyattn_last_error(), "entries of all sequences"));
    /* one sequence past the device's largest allocation */
    if (max_alloc < (cl_ulong)INT_MAX * 8) {
        lazyattn_plan_seq big = {INT_MAX, w, pos, 0, NULL};
        lt_assert_status(lazyattn_device_plan_update(plan, 1, &big, NULL, NULL),
                         LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY);
    }
    /* the refusals changed nothing: still no tables */
    lazyattn_device_plan_info info;
    lt_assert_status(lazyattn_device_plan_get_info(plan, &info), LAZYATTN_STATUS_OK);
    assert_int_equal(info.n_seqs, 0);
    assert_int_equal(info.updates, 0);
    assert_int_equal(info.writes, 0);
    assert_int_equal(info.capacity, 4);

    lt_assert_status(lazyattn_device_plan_update(plan, 2, s, NULL, NULL), LAZYATTN_STATUS_OK);
    check_device_tables(ctx, plan, 2, s);
    lt_assert_status(lazyattn_device_plan_prefill_args(plan, 1, &pa), LAZYATTN_STATUS_UNSUPPORTED);
    assert_non_null(strstr(lazyattn_last_error(), "no table offset"));
    lt_assert_status(lazyattn_device_plan_prefill_args(plan, 2, &pa), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_device_plan_prefill_args(plan, -1, &pa), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_device_plan_prefill_args(plan, 0, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_device_plan_prefill_args(plan, 0, &pa), LAZYATTN_STATUS_OK);
    assert_int_equal(pa.n_entries, 3);
    lt_assert_status(lazyattn_device_plan_decode_args(NULL, &da), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_device_plan_decode_args(plan, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_device_plan_decode_args(plan, &da), LAZYATTN_STATUS_OK);
    assert_int_equal(da.n_seqs, 2);
    assert_int_equal(da.max_entries, 3);
    lt_assert_status(lazyattn_device_plan_get_info(NULL, &info), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_device_plan_get_info(plan, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_plan_seq from;
    lt_assert_status(lazyattn_plan_seq_from_request(NULL, &from), LAZYATTN_STATUS_INVALID_ARGUMENT);

    /* handles of another kind: refused by name, never dereferenced further */
    static uint64_t zeros[64];
    lazyattn_pool_config pc = {1, 1, 16, 4, LAZYATTN_DTYPE_F32, 4096, LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *pool = NULL;
    lt_assert_status(lazyattn_pool_create(NULL, &pc, &pool), LAZYATTN_STATUS_OK);
    lazyattn_device_plan *wrong[2] = {(lazyattn_device_plan *)pool, (lazyattn_device_plan *)zeros};
    for (int i = 0; i < 2; i++) {
        lt_assert_status(lazyattn_device_plan_update(wrong[i], 1, s, NULL, NULL),
                         LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_string_equal(lazyattn_last_error(),
                            "lazyattn_device_plan_update: not a live device plan (destroyed, or "
                            "another kind of handle)");
        lt_assert_status(lazyattn_device_plan_get_info(wrong[i], &info), LAZYATTN_STATUS_INVALID_ARGUMENT);
        lt_assert_status(lazyattn_device_plan_decode_args(wrong[i], &da), LAZYATTN_STATUS_INVALID_ARGUMENT);
        lt_assert_status(lazyattn_device_plan_prefill_args(wrong[i], 0, &pa), LAZYATTN_STATUS_INVALID_ARGUMENT);
        lazyattn_device_plan_destroy(wrong[i]); /* left alone */
        assert_non_null(strstr(lazyattn_last_error(), "lazyattn_device_plan_destroy: not a live device plan"));
    }
    lt_assert_status(lazyattn_plan_seq_from_request((lazyattn_request *)plan, &from),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "not a live request"));
    for (size_t i = 0; i < sizeof zeros / sizeof *zeros; i++) assert_int_equal(zeros[i], 0);
    lt_assert_status(lazyattn_pool_get_info(pool, &(lazyattn_pool_info){0}), LAZYATTN_STATUS_OK);
    lazyattn_pool_destroy(pool);
    lazyattn_device_plan_destroy(plan);
    lazyattn_device_plan_destroy(NULL);
}

/* ---- the device tables after random edits ---- */

/* Random edits of a few host sequences, random batches of them, each update
 * checked by reading the device buffers back. */
static void test_random_edits(void **state) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed() ^ 0xD1A7};
    enum { N_HOST = 7, MAX_SEQS = 5 };
    host_seq hs[N_HOST];
    memset(hs, 0, sizeof hs);
    for (int i = 0; i < N_HOST; i++) {
        int n = lt_int(&r, 1, 5);
        for (int e = 0; e < n; e++) host_seq_push(&hs[i], lt_next(&r), lt_int(&r, 0, 1 << 20));
        hs[i].q_pos = lt_int(&r, 0, 1 << 20);
    }
    lazyattn_device_plan_config cfg = {MAX_SEQS, 2};
    lazyattn_device_plan *plan = NULL;
    lt_assert_status(lazyattn_device_plan_create(ctx, &cfg, &plan), LAZYATTN_STATUS_OK);
    int batch[MAX_SEQS], n_batch = 3;
    for (int i = 0; i < n_batch; i++) batch[i] = i;
    for (int step = 0; step < 300; step++) {
        /* edit some sequences: the last word, a middle one, appends, q_pos */
        for (int k = lt_int(&r, 0, 3); k > 0; k--) {
            host_seq *s = &hs[lt_int(&r, 0, N_HOST - 1)];
            switch (lt_int(&r, 0, 4)) {
            case 0: s->table[s->n - 1] = lt_next(&r); break;
            case 1: s->pos[lt_int(&r, 0, s->n - 1)] = lt_int(&r, 0, 1 << 20); break;
            case 2: s->table[lt_int(&r, 0, s->n - 1)] = lt_next(&r); break;
            case 3:
                for (int a = lt_int(&r, 1, 9); a > 0; a--)
                    host_seq_push(s, lt_next(&r), lt_int(&r, 0, 1 << 20));
                break;
            default:
                if (s->n > 1) s->n -= lt_int(&r, 1, s->n - 1); /* a shorter table */
            }
            s->q_pos = lt_int(&r, 0, 1 << 20);
        }
        /* sometimes the batch changes: a member leaves, joins or moves */
        if (lt_int(&r, 0, 3) == 0) {
            n_batch = lt_int(&r, 1, MAX_SEQS);
            for (int i = 0; i < n_batch; i++) batch[i] = lt_int(&r, 0, N_HOST - 1);
        }
        lazyattn_plan_seq seqs[MAX_SEQS];
        for (int i = 0; i < n_batch; i++) seqs[i] = as_plan_seq(&hs[batch[i]]);
        cl_event ev = NULL;
        int want_event = lt_int(&r, 0, 1);
        lt_assert_status(lazyattn_device_plan_update(plan, n_batch, seqs, NULL, want_event ? &ev : NULL),
                         LAZYATTN_STATUS_OK);
        if (want_event) {
            assert_non_null(ev);
            assert_int_equal(clWaitForEvents(1, &ev), CL_SUCCESS);
            clReleaseEvent(ev);
        }
        check_device_tables(ctx, plan, n_batch, seqs);
    }
    lazyattn_device_plan_info info;
    lt_assert_status(lazyattn_device_plan_get_info(plan, &info), LAZYATTN_STATUS_OK);
    assert_true(info.grows >= 3); /* from 2 entries to dozens */
    assert_int_equal(info.updates, 300);
    printf("# 300 random updates: %lld writes, %lld bytes, %lld growths, capacity %d\n",
           (long long)info.writes, (long long)info.bytes_written, (long long)info.grows,
           info.capacity);
    lazyattn_device_plan_destroy(plan);
    for (int i = 0; i < N_HOST; i++) {
        free(hs[i].table);
        free(hs[i].pos);
    }
}

/* ---- what an update writes, counted by hand ---- */

static void counters(const lazyattn_device_plan *plan, int64_t *writes, int64_t *bytes,
                     int64_t *entries) {
    lazyattn_device_plan_info info;
    lt_assert_status(lazyattn_device_plan_get_info(plan, &info), LAZYATTN_STATUS_OK);
    *writes = info.writes;
    *bytes = info.bytes_written;
    *entries = info.entries_written;
}

#define EXPECT_DELTA(plan, w0, b0, e0, dw, db, de)                 \
    do {                                                           \
        int64_t w1, b1, e1;                                        \
        counters(plan, &w1, &b1, &e1);                             \
        assert_int_equal(w1 - (w0), dw);                           \
        assert_int_equal(b1 - (b0), db);                           \
        assert_int_equal(e1 - (e0), de);                           \
        w0 = w1, b0 = b1, e0 = e1;                                 \
    } while (0)

static void test_incremental_writes(void **state) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed() ^ 0x1AC};
    enum { N = 3, LEN = 700 }; /* 700 entries: 5.6 KB apart, above the merge gap */
    host_seq hs[N];
    memset(hs, 0, sizeof hs);
    for (int i = 0; i < N; i++) {
        for (int e = 0; e < LEN; e++) host_seq_push(&hs[i], lt_next(&r), 16 * e);
        hs[i].q_pos = 16 * LEN - 1;
    }
    lazyattn_device_plan_config cfg = {4, 4096};
    lazyattn_device_plan *plan = NULL;
    lt_assert_status(lazyattn_device_plan_create(ctx, &cfg, &plan), LAZYATTN_STATUS_OK);
    lazyattn_plan_seq seqs[N];
    for (int i = 0; i < N; i++) seqs[i] = as_plan_seq(&hs[i]);
    int64_t w = 0, b = 0, e = 0;
    /* first upload: everything, one write per array */
    lt_assert_status(lazyattn_device_plan_update(plan, N, seqs, NULL, NULL), LAZYATTN_STATUS_OK);
    EXPECT_DELTA(plan, w, b, e, 4, N * LEN * 12 + (N + 1) * 4 + N * 4, N * LEN);
    check_device_tables(ctx, plan, N, seqs);
    /* from here to the growth below no update needs more ranges or staging
     * than the first upload: none allocates on the host */
    const int64_t allocs = lz_device_plan_host_allocs(plan);

    /* decode step of sequence 1 alone, no new block: its last entry and q_pos */
    hs[1].table[LEN - 1] ^= (uint64_t)1 << 31; /* another valid length */
    hs[1].q_pos++;
    for (int i = 0; i < N; i++) seqs[i] = as_plan_seq(&hs[i]);
    lt_assert_status(lazyattn_device_plan_update(plan, N, seqs, NULL, NULL), LAZYATTN_STATUS_OK);
    EXPECT_DELTA(plan, w, b, e, 2, 8 + 4, 1);
    check_device_tables(ctx, plan, N, seqs);

    /* every sequence's last entry: three table writes (too far apart to merge) + q_pos */
    for (int i = 0; i < N; i++) {
        hs[i].table[LEN - 1] += 1;
        hs[i].q_pos++;
    }
    for (int i = 0; i < N; i++) seqs[i] = as_plan_seq(&hs[i]);
    lt_assert_status(lazyattn_device_plan_update(plan, N, seqs, NULL, NULL), LAZYATTN_STATUS_OK);
    EXPECT_DELTA(plan, w, b, e, N + 1, N * 8 + N * 4, N);
    check_device_tables(ctx, plan, N, seqs);

    /* the last sequence crosses a block: one entry, its position, the last offset */
    host_seq_push(&hs[2], lt_next(&r), 16 * LEN);
    seqs[2] = as_plan_seq(&hs[2]);
    lt_assert_status(lazyattn_device_plan_update(plan, N, seqs, NULL, NULL), LAZYATTN_STATUS_OK);
    EXPECT_DELTA(plan, w, b, e, 3, 8 + 4 + 4, 1);
    check_device_tables(ctx, plan, N, seqs);

    /* the first one crosses: everything after its old end moves (1 + 700 + 701
     * entries), offsets 1..3 */
    host_seq_push(&hs[0], lt_next(&r), 16 * LEN);
    seqs[0] = as_plan_seq(&hs[0]);
    lt_assert_status(lazyattn_device_plan_update(plan, N, seqs, NULL, NULL), LAZYATTN_STATUS_OK);
    int moved = 1 + LEN + (LEN + 1);
    EXPECT_DELTA(plan, w, b, e, 3, moved * 12 + 3 * 4, moved);
    check_device_tables(ctx, plan, N, seqs);

    /* nothing changed: no write; an event asked for still completes */
    cl_event ev = NULL;
    lt_assert_status(lazyattn_device_plan_update(plan, N, seqs, NULL, &ev), LAZYATTN_STATUS_OK);
    assert_non_null(ev);
    assert_int_equal(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);
    EXPECT_DELTA(plan, w, b, e, 0, 0, 0);
    assert_int_equal(lz_device_plan_host_allocs(plan), allocs);

    /* the last sequence leaves the batch: nothing to write but the decode
     * args say two sequences */
    lt_assert_status(lazyattn_device_plan_update(plan, N - 1, seqs, NULL, NULL), LAZYATTN_STATUS_OK);
    EXPECT_DELTA(plan, w, b, e, 0, 0, 0);
    check_device_tables(ctx, plan, N - 1, seqs);
    lazyattn_decode_args da;
    lazyattn_decode_args_init(&da);
    lt_assert_status(lazyattn_device_plan_decode_args(plan, &da), LAZYATTN_STATUS_OK);
    assert_int_equal(da.n_seqs, N - 1);
    assert_int_equal(da.max_entries, LEN + 1);

    /* many long sequences each changing its last entry: at most 8 table
     * writes; equal gaps of 699 entries all merge into one range */
    {
        enum { M = 20 };
        host_seq many[M];
        lazyattn_plan_seq ms[M];
        memset(many, 0, sizeof many);
        for (int i = 0; i < M; i++) {
            for (int k = 0; k < LEN; k++) host_seq_push(&many[i], lt_next(&r), 16 * k);
            many[i].q_pos = 5;
            ms[i] = as_plan_seq(&many[i]);
        }
        lazyattn_device_plan_config mc = {M, 64};
        lazyattn_device_plan *mp = NULL;
        lt_assert_status(lazyattn_device_plan_create(ctx, &mc, &mp), LAZYATTN_STATUS_OK);
        lt_assert_status(lazyattn_device_plan_update(mp, M, ms, NULL, NULL), LAZYATTN_STATUS_OK);
        int64_t mw = 0, mb = 0, me = 0;
        EXPECT_DELTA(mp, mw, mb, me, 4, M * LEN * 12 + (M + 1) * 4 + M * 4, M * LEN);
        for (int i = 0; i < M; i++) many[i].table[LEN - 1] ^= 1;
        lt_assert_status(lazyattn_device_plan_update(mp, M, ms, NULL, NULL), LAZYATTN_STATUS_OK);
        int span = (M - 1) * LEN + 1;
        EXPECT_DELTA(mp, mw, mb, me, 1, span * 8, span);
        check_device_tables(ctx, mp, M, ms);
        /* unequal gaps: sequences 0..9 change, 10..19 only every third; 8
         * writes at most, and never more entries than the covering range */
        for (int i = 0; i < M; i++)
            if (i < 10 || i % 3 == 0) many[i].table[LEN - 1 - (i % 4)] ^= 2;
        lt_assert_status(lazyattn_device_plan_update(mp, M, ms, NULL, NULL), LAZYATTN_STATUS_OK);
        int64_t w2, b2, e2;
        counters(mp, &w2, &b2, &e2);
        assert_true(w2 - mw >= 1 && w2 - mw <= 8);
        assert_true(e2 - me >= 13 && e2 - me <= (M - 1) * LEN + 1); /* 13 changed */
        check_device_tables(ctx, mp, M, ms);
        lazyattn_device_plan_destroy(mp);
        for (int i = 0; i < M; i++) {
            free(many[i].table);
            free(many[i].pos);
        }
    }

    /* growth past 4096 entries: a device-side copy, then only the new tail */
    lazyattn_device_plan_info before;
    lt_assert_status(lazyattn_device_plan_get_info(plan, &before), LAZYATTN_STATUS_OK);
    for (int a = 0; a < 3000; a++) host_seq_push(&hs[2], lt_next(&r), 16 * (LEN + 1 + a));
    seqs[2] = as_plan_seq(&hs[2]);
    lt_assert_status(lazyattn_device_plan_update(plan, N, seqs, NULL, NULL), LAZYATTN_STATUS_OK);
    lazyattn_device_plan_info after;
    lt_assert_status(lazyattn_device_plan_get_info(plan, &after), LAZYATTN_STATUS_OK);
    assert_int_equal(after.grows, before.grows + 1);
    assert_int_equal(after.capacity, 8192);
    /* the growth reallocates the shadow (and here the staging block) */
    assert_true(lz_device_plan_host_allocs(plan) >= allocs + 3);
    /* sequence 2 rejoins at the end: its 3701 entries, one offset, its q_pos */
    EXPECT_DELTA(plan, w, b, e, 4, 3701 * 12 + 4 + 4, 3701);
    check_device_tables(ctx, plan, N, seqs);
    lazyattn_device_plan_destroy(plan);
    for (int i = 0; i < N; i++) {
        free(hs[i].table);
        free(hs[i].pos);
    }
}

/* ---- every error path: injected failures, no leak, recovery ---- */

static void test_error_paths(void **state) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed() ^ 0xFA17};
    const cl_uint base = lt_context_refs(ctx);
    /* the leak check can fail: each live buffer holds the context here */
    lazyattn_device_plan *plan = NULL;
    lazyattn_device_plan_config cfg = {3, 4};
    lt_assert_status(lazyattn_device_plan_create(ctx, &cfg, &plan), LAZYATTN_STATUS_OK);
    const cl_uint with_plan = lt_context_refs(ctx);
    /* PoCL counts each live buffer in the context's reference count, so a
     * leaked buffer shows there; Intel's CPU runtime does not count buffers,
     * and on it only the statuses and the recovery are checked (the leak
     * count runs on PoCL in CI, and ASan checks the host side). */
    const int counts_buffers = with_plan >= base + 4;
    if (!counts_buffers)
        print_message("%s does not count buffers in CL_CONTEXT_REFERENCE_COUNT (%u -> %u): "
                      "no leak count on this implementation\n",
                      lazyattn_context_device_name(ctx), base, with_plan);
#define EXPECT_REFS(n)                                                                           \
    do {                                                                                         \
        if (counts_buffers) assert_int_equal(lt_context_refs(ctx), (n));                            \
    } while (0)
    lazyattn_device_plan_destroy(plan);
    EXPECT_REFS(base);

    /* create: fail at each allocation in turn */
    int n_points = 0;
    for (int nth = 1;; nth++) {
        lz_device_plan_fail_at(nth);
        plan = (lazyattn_device_plan *)1;
        int st = lazyattn_device_plan_create(ctx, &cfg, &plan);
        lz_device_plan_fail_at(0);
        if (st == LAZYATTN_STATUS_OK) {
            lazyattn_device_plan_destroy(plan);
            break;
        }
        assert_true(st == LAZYATTN_STATUS_OUT_OF_HOST_MEMORY ||
                    st == LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY);
        assert_null(plan);
        EXPECT_REFS(base);
        n_points++;
    }
    assert_int_equal(n_points, 10); /* the struct, 5 shadows (tables, offsets, q_pos, generations), 4 buffers */

    /* update: a first upload, then one that grows and writes, failing at
     * each point; after each failure the plan hands out no tables, and the
     * same update without a failure restores everything */
    host_seq hs[3];
    memset(hs, 0, sizeof hs);
    for (int i = 0; i < 3; i++) {
        for (int e = 0; e < 3; e++) host_seq_push(&hs[i], lt_next(&r), 16 * e);
        hs[i].q_pos = 40 + i;
    }
    lazyattn_plan_seq seqs[3];
    n_points = 0;
    for (int nth = 1;; nth++) {
        lt_assert_status(lazyattn_device_plan_create(ctx, &cfg, &plan), LAZYATTN_STATUS_OK);
        for (int i = 0; i < 3; i++) {
            hs[i].n = 3;
            seqs[i] = as_plan_seq(&hs[i]);
        }
        lt_assert_status(lazyattn_device_plan_update(plan, 2, seqs, NULL, NULL), LAZYATTN_STATUS_OK);
        /* the next step: sequence 0 gains entries (growth past 4), 2 joins */
        for (int a = 0; a < 5; a++) host_seq_push(&hs[0], lt_next(&r), 16 * (3 + a));
        hs[0].n = 8;
        hs[1].table[2] ^= 1;
        for (int i = 0; i < 3; i++) seqs[i] = as_plan_seq(&hs[i]);
        cl_event ev = NULL;
        lz_device_plan_fail_at(nth);
        int st = lazyattn_device_plan_update(plan, 3, seqs, NULL, &ev);
        int fired = 0;
        lz_device_plan_fail_at(0);
        if (st == LAZYATTN_STATUS_OK) {
            assert_non_null(ev);
            clWaitForEvents(1, &ev);
            clReleaseEvent(ev);
            check_device_tables(ctx, plan, 3, seqs);
        } else {
            fired = 1;
            n_points++;
            assert_null(ev);
            assert_true(st == LAZYATTN_STATUS_OUT_OF_HOST_MEMORY ||
                        st == LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY);
            lazyattn_decode_args da;
            lazyattn_decode_args_init(&da);
            lazyattn_device_plan_info info;
            lt_assert_status(lazyattn_device_plan_get_info(plan, &info), LAZYATTN_STATUS_OK);
            assert_int_equal(clFinish(lazyattn_context_queue(ctx)), CL_SUCCESS);
            /* either refused before changing anything (the old two
             * sequences of 3 entries), or no tables handed out */
            if (info.n_seqs != 0) {
                assert_int_equal(info.n_seqs, 2);
                assert_int_equal(info.n_entries, 6);
                lt_assert_status(lazyattn_device_plan_decode_args(plan, &da), LAZYATTN_STATUS_OK);
            } else {
                lt_assert_status(lazyattn_device_plan_decode_args(plan, &da),
                                 LAZYATTN_STATUS_INVALID_ARGUMENT);
            }
            /* the plan's buffers are the only ones alive: nothing leaked */
            EXPECT_REFS(with_plan);
            lt_assert_status(lazyattn_device_plan_update(plan, 3, seqs, NULL, NULL), LAZYATTN_STATUS_OK);
            check_device_tables(ctx, plan, 3, seqs);
        }
        assert_int_equal(clFinish(lazyattn_context_queue(ctx)), CL_SUCCESS);
        lazyattn_device_plan_destroy(plan);
        EXPECT_REFS(base);
        hs[1].table[2] ^= 1;
        if (!fired) break;
    }
    /* shadow x3, two buffers, two copies, ranges, staging, 4 writes */
    printf("# update failed at %d points%s\n", n_points, counts_buffers ? ", each without a leak" : "");
    assert_true(n_points >= 11);
    for (int i = 0; i < 3; i++) {
        free(hs[i].table);
        free(hs[i].pos);
    }
#undef EXPECT_REFS
}

/* ---- decode through a plan against fresh tables and the reference ---- */

#define NKV 2
#define NQH 4
#define D 64
#define BS 16
#define ROW (NKV * D)
#define QROW (NQH * D)
#define MAXPOS 512

/* One live request of the decode test, with the unrotated K/V of every
 * logical position it has (the reference's input). */
typedef struct live_req {
    lazyattn_request *req;
    int n_pos;
    float k[MAXPOS * ROW], v[MAXPOS * ROW];
} live_req;

static void write_kv_rows(lazyattn_context *ctx, lazyattn_attention *attn, lazyattn_pool *pool,
                          int n, const float *k, const float *v, const int32_t *slots,
                          const int32_t *stored) {
    cl_mem km = lt_buffer(ctx, k, sizeof(float) * n * ROW), vm = lt_buffer(ctx, v, sizeof(float) * n * ROW);
    cl_mem sm = lt_buffer(ctx, slots, sizeof(int32_t) * n), pm = lt_buffer(ctx, stored, sizeof(int32_t) * n);
    lt_assert_status(lazyattn_write_kv(attn, pool, 0, n, km, vm, sm, pm, NULL, NULL), LAZYATTN_STATUS_OK);
    clReleaseMemObject(km);
    clReleaseMemObject(vm);
    clReleaseMemObject(sm);
    clReleaseMemObject(pm);
}

/* Plans a request over documents (LAZY cache) and writes every prefilled
 * token's K/V (documents at document-local positions). */
static void start_request(lazyattn_context *ctx, lazyattn_attention *attn, lazyattn_pool *pool,
                          lazyattn_cache *cache, lt_rng *r, const int32_t *const *docs,
                          const int32_t *lens, const float *const *doc_k,
                          const float *const *doc_v, const int *which, int n_docs,
                          live_req *L) {
    int32_t prefix[5] = {1, 2, 3, 4, 5}, question[9] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
    const int32_t *d[3];
    int32_t dl[3];
    for (int i = 0; i < n_docs; i++) d[i] = docs[which[i]], dl[i] = lens[which[i]];
    lazyattn_request_desc desc;
    lazyattn_request_desc_init(&desc);
    desc.n_prefix = 5;
    desc.prefix = prefix;
    desc.n_docs = n_docs;
    desc.docs = d;
    desc.doc_lengths = dl;
    desc.n_question = lt_int(r, 1, 9);
    desc.question = question;
    desc.max_new_tokens = 4; /* later tokens take blocks beyond the reservation */
    lt_assert_status(lazyattn_request_create(cache, &desc, &L->req), LAZYATTN_STATUS_OK);
    lazyattn_plan p;
    lt_assert_status(lazyattn_request_get_plan(L->req, &p), LAZYATTN_STATUS_OK);
    L->n_pos = p.n_positions;
    assert_true(L->n_pos < MAXPOS - 64);
    lt_fill(r, L->k, (size_t)L->n_pos * ROW, 1.0f); /* prefix, question: fresh */
    lt_fill(r, L->v, (size_t)L->n_pos * ROW, 1.0f);
    for (int s = 0; s < p.n_segments; s++) {
        const lazyattn_segment *seg = &p.segments[s];
        if (seg->kind != LAZYATTN_SEGMENT_DOCUMENT) continue;
        int id = which[seg->doc_index];
        memcpy(L->k + (size_t)seg->logical_start * ROW, doc_k[id], sizeof(float) * seg->n_tokens * ROW);
        memcpy(L->v + (size_t)seg->logical_start * ROW, doc_v[id], sizeof(float) * seg->n_tokens * ROW);
    }
    if (p.n_prefill) {
        float *pk = malloc(sizeof(float) * p.n_prefill * ROW), *pv = malloc(sizeof(float) * p.n_prefill * ROW);
        for (int i = 0; i < p.n_prefill; i++) {
            memcpy(pk + (size_t)i * ROW, L->k + (size_t)p.prefill_pos[i] * ROW, sizeof(float) * ROW);
            memcpy(pv + (size_t)i * ROW, L->v + (size_t)p.prefill_pos[i] * ROW, sizeof(float) * ROW);
        }
        write_kv_rows(ctx, attn, pool, p.n_prefill, pk, pv, p.prefill_slots, p.prefill_stored_pos);
        free(pk);
        free(pv);
    }
    lt_assert_status(lazyattn_request_commit(L->req), LAZYATTN_STATUS_OK);
}

/* The reference decode of one request's query (unrotated q at q_pos). */
static double *reference_decode(const lazyattn_attention_config *c, const live_req *L,
                                const float *q, int32_t q_pos) {
    int32_t kpos[MAXPOS];
    for (int t = 0; t < L->n_pos; t++) kpos[t] = t;
    double *out = malloc(sizeof(double) * QROW);
    lazyattn_reference_args ra;
    lazyattn_reference_args_init(&ra);
    ra.n_queries = 1;
    ra.n_keys = L->n_pos;
    ra.q = q;
    ra.q_pos = &q_pos;
    ra.k = L->k;
    ra.v = L->v;
    ra.k_pos = kpos;
    ra.out = out;
    lt_assert_status(lazyattn_reference_attention(c, &ra), LAZYATTN_STATUS_OK);
    return out;
}

static void test_decode_through_plan(void **state) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed() ^ 0xDEC0DE};
    lazyattn_attention_config c;
    lazyattn_attention_config_default(&c);
    c.n_q_heads = NQH;
    c.n_kv_heads = NKV;
    c.head_dim = D;
    c.block_size = BS;
    c.dtype = LAZYATTN_DTYPE_F32;
    c.rope.theta = 10000.0;
    c.rope.llama3_factor = 0;
    lazyattn_pool_config pc = {1, NKV, D, BS, LAZYATTN_DTYPE_F32, (uint64_t)256 * 2 * ROW * BS * 4,
                               LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *pool = NULL;
    lazyattn_attention *attn = NULL;
    lazyattn_cache *cache = NULL;
    lazyattn_cache_config cc;
    lazyattn_cache_config_init(&cc);
    lt_assert_status(lazyattn_pool_create(ctx, &pc, &pool), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_create(pool, &cc, &cache), LAZYATTN_STATUS_OK);

    enum { N_DOCS = 4, MAX_BATCH = 3, STEPS = 40 };
    int32_t tok[N_DOCS][40], lens[N_DOCS];
    const int32_t *docs[N_DOCS];
    float *dk[N_DOCS], *dv[N_DOCS];
    for (int i = 0; i < N_DOCS; i++) {
        lens[i] = lt_int(&r, 9, 40); /* documents end mid-block */
        for (int t = 0; t < lens[i]; t++) tok[i][t] = 100 * i + t;
        docs[i] = tok[i];
        dk[i] = malloc(sizeof(float) * lens[i] * ROW);
        dv[i] = malloc(sizeof(float) * lens[i] * ROW);
        lt_fill(&r, dk[i], (size_t)lens[i] * ROW, 1.0f);
        lt_fill(&r, dv[i], (size_t)lens[i] * ROW, 1.0f);
    }
    live_req *live = calloc(MAX_BATCH + 1, sizeof *live);
    static const int orders[4][3] = {{0, 1, 2}, {2, 1, 0}, {3, 0, 1}, {1, 3, 2}};
    int n_live = 0, started = 0;
    for (; n_live < MAX_BATCH; n_live++, started++)
        start_request(ctx, attn, pool, cache, &r, docs, lens, (const float *const *)dk,
                      (const float *const *)dv, orders[started], 3, &live[n_live]);

    /* capacity for the prompts exactly: the decode steps grow it */
    int prompt_entries = 0;
    for (int i = 0; i < n_live; i++) {
        lazyattn_plan p;
        lt_assert_status(lazyattn_request_get_plan(live[i].req, &p), LAZYATTN_STATUS_OK);
        prompt_entries += p.n_entries;
    }
    lazyattn_device_plan_config cfg = {MAX_BATCH, prompt_entries};
    lazyattn_device_plan *plan = NULL, *single = NULL;
    lt_assert_status(lazyattn_device_plan_create(ctx, &cfg, &plan), LAZYATTN_STATUS_OK);
    lazyattn_device_plan_config cfg1 = {1, 2};
    lt_assert_status(lazyattn_device_plan_create(ctx, &cfg1, &single), LAZYATTN_STATUS_OK);
    cl_mem qm = lt_buffer(ctx, NULL, sizeof(float) * MAX_BATCH * QROW);
    cl_mem out_plan = lt_buffer(ctx, NULL, sizeof(float) * MAX_BATCH * QROW);
    cl_mem out_fresh = lt_buffer(ctx, NULL, sizeof(float) * MAX_BATCH * QROW);
    float *q = malloc(sizeof(float) * MAX_BATCH * QROW);
    float *a = malloc(sizeof(float) * MAX_BATCH * QROW), *b = malloc(sizeof(float) * MAX_BATCH * QROW);
    double worst = 0;
    int crossings = 0, n_checked = 0, alloc_steps = 0;
    for (int step = 0; step < STEPS; step++) {
        if (step == STEPS / 2) {
            /* request 0 finishes, a new one joins at the end: the batch moves */
            lazyattn_request_destroy(live[0].req);
            memmove(&live[0], &live[1], sizeof *live * (MAX_BATCH - 1));
            start_request(ctx, attn, pool, cache, &r, docs, lens, (const float *const *)dk,
                          (const float *const *)dv, orders[started++], 3, &live[MAX_BATCH - 1]);
        }
        /* append one token to each request, write its K/V */
        lazyattn_plan_seq seqs[MAX_BATCH];
        int32_t q_pos[MAX_BATCH];
        for (int i = 0; i < n_live; i++) {
            live_req *L = &live[i];
            lazyattn_plan before;
            lazyattn_request_get_plan(L->req, &before);
            int n_before = before.n_entries;
            int32_t slot, pos;
            lt_assert_status(lazyattn_request_append(L->req, 1, &slot, &pos), LAZYATTN_STATUS_OK);
            assert_int_equal(pos, L->n_pos);
            assert_true(pos < MAXPOS);
            lt_fill(&r, L->k + (size_t)pos * ROW, ROW, 1.0f);
            lt_fill(&r, L->v + (size_t)pos * ROW, ROW, 1.0f);
            write_kv_rows(ctx, attn, pool, 1, L->k + (size_t)pos * ROW, L->v + (size_t)pos * ROW,
                          &slot, &pos);
            L->n_pos++;
            lt_assert_status(lazyattn_plan_seq_from_request(L->req, &seqs[i]), LAZYATTN_STATUS_OK);
            assert_int_equal(seqs[i].q_pos, pos);
            if (seqs[i].n_entries > n_before) crossings++;
            q_pos[i] = pos;
        }
        const int64_t allocs = lz_device_plan_host_allocs(plan);
        lt_assert_status(lazyattn_device_plan_update(plan, n_live, seqs, NULL, NULL), LAZYATTN_STATUS_OK);
        if (lz_device_plan_host_allocs(plan) != allocs) alloc_steps++;

        /* fresh tables, packed from the requests' host plans */
        int total = 0, most = 0, offsets[MAX_BATCH + 1];
        for (int i = 0; i < n_live; i++) {
            offsets[i] = total;
            total += seqs[i].n_entries;
            if (seqs[i].n_entries > most) most = seqs[i].n_entries;
        }
        offsets[n_live] = total;
        uint64_t *table = malloc(sizeof(uint64_t) * total);
        int32_t *epos = malloc(sizeof(int32_t) * total);
        for (int i = 0; i < n_live; i++) {
            memcpy(table + offsets[i], seqs[i].table, sizeof(uint64_t) * seqs[i].n_entries);
            memcpy(epos + offsets[i], seqs[i].entry_pos, sizeof(int32_t) * seqs[i].n_entries);
        }
        cl_mem tm = lt_buffer(ctx, table, sizeof(uint64_t) * total);
        cl_mem em = lt_buffer(ctx, epos, sizeof(int32_t) * total);
        cl_mem om = lt_buffer(ctx, offsets, sizeof(int32_t) * (n_live + 1));
        cl_mem qpm = lt_buffer(ctx, q_pos, sizeof(int32_t) * n_live);

        /* queries rotated at the host's positions, used by both decodes */
        lt_fill(&r, q, (size_t)n_live * QROW, 1.0f);
        assert_int_equal(clEnqueueWriteBuffer(lazyattn_context_queue(ctx), qm, CL_TRUE, 0,
                                              sizeof(float) * n_live * QROW, q, 0, NULL, NULL),
                         CL_SUCCESS);
        lt_assert_status(lazyattn_rope_apply(attn, n_live, NQH, qm, qpm, NULL, NULL), LAZYATTN_STATUS_OK);
        lazyattn_decode_args dp;
        lazyattn_decode_args_init(&dp);
        dp.q = qm;
        dp.out = out_plan;
        lt_assert_status(lazyattn_device_plan_decode_args(plan, &dp), LAZYATTN_STATUS_OK);
        assert_int_equal(dp.n_seqs, n_live);
        assert_int_equal(dp.max_entries, most);
        lt_assert_status(lazyattn_decode(attn, pool, 0, &dp, NULL, NULL), LAZYATTN_STATUS_OK);
        lazyattn_decode_args df = {n_live, most, 0, qm, qpm, om, tm, em, out_fresh,
                                   NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
        lt_assert_status(lazyattn_decode(attn, pool, 0, &df, NULL, NULL), LAZYATTN_STATUS_OK);
        lt_read(ctx, out_plan, a, sizeof(float) * n_live * QROW);
        lt_read(ctx, out_fresh, b, sizeof(float) * n_live * QROW);
        lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
        assert_memory_equal(a, b, sizeof(float) * n_live * QROW); /* bit for bit */
        for (int i = 0; i < n_live; i++) {
            double *ref = reference_decode(&c, &live[i], q + (size_t)i * QROW, q_pos[i]);
            double err = lazyattn_normalised_error(a + (size_t)i * QROW, ref, QROW);
            if (err > 2e-5) print_error("step %d seq %d: error %.3g\n", step, i, err);
            assert_true(err <= 2e-5);
            if (err > worst) worst = err;
            n_checked++;
            free(ref);
        }

        /* a single request's plan feeds prefill: sequence 0's last token as
         * a one-query prefill, equal to prefill over fresh tables */
        lt_assert_status(lazyattn_device_plan_update(single, 1, &seqs[0], NULL, NULL), LAZYATTN_STATUS_OK);
        lazyattn_prefill_args pp;
        lazyattn_prefill_args_init(&pp);
        pp.n_queries = 1;
        pp.q = qm;
        pp.q_pos = qpm;
        pp.out = out_plan;
        lt_assert_status(lazyattn_device_plan_prefill_args(single, 0, &pp), LAZYATTN_STATUS_OK);
        assert_int_equal(pp.n_entries, seqs[0].n_entries);
        lt_assert_status(lazyattn_prefill(attn, pool, 0, &pp, NULL, NULL), LAZYATTN_STATUS_OK);
        lazyattn_prefill_args pf = {1, seqs[0].n_entries, qm, qpm, tm, em, out_fresh,
                                    NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
        lt_assert_status(lazyattn_prefill(attn, pool, 0, &pf, NULL, NULL), LAZYATTN_STATUS_OK);
        lt_read(ctx, out_plan, a, sizeof(float) * QROW);
        lt_read(ctx, out_fresh, b, sizeof(float) * QROW);
        lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
        assert_memory_equal(a, b, sizeof(float) * QROW);
        double *ref = reference_decode(&c, &live[0], q, q_pos[0]);
        assert_true(lazyattn_normalised_error(a, ref, QROW) <= 2e-5);
        free(ref);

        clReleaseMemObject(tm);
        clReleaseMemObject(em);
        clReleaseMemObject(om);
        clReleaseMemObject(qpm);
        free(table);
        free(epos);
    }
    lazyattn_device_plan_info info;
    lt_assert_status(lazyattn_device_plan_get_info(plan, &info), LAZYATTN_STATUS_OK);
    printf("# %d decode steps, %d outputs: bit-identical to fresh tables, worst error %.3g vs the "
           "float64 reference; %d block crossings, %lld growths, capacity %d; %d updates "
           "allocated on the host\n",
           STEPS, n_checked, worst, crossings, (long long)info.grows, info.capacity, alloc_steps);
    /* the first update sizes the scratch; later ones allocate only to grow
     * (the batch's move may need more staging, each growth the shadow) */
    assert_true(alloc_steps >= 1 && alloc_steps <= 2 + 2 * (int)info.grows);
    assert_true(crossings >= 2 * MAX_BATCH);
    assert_true(info.grows >= 1); /* past the prompts' entries, by appends */
    lazyattn_device_plan_destroy(single);
    lazyattn_device_plan_destroy(plan);
    for (int i = 0; i < n_live; i++) lazyattn_request_destroy(live[i].req);
    clReleaseMemObject(qm);
    clReleaseMemObject(out_plan);
    clReleaseMemObject(out_fresh);
    free(q);
    free(a);
    free(b);
    free(live);
    for (int i = 0; i < N_DOCS; i++) {
        free(dk[i]);
        free(dv[i]);
    }
    lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
    lazyattn_cache_destroy(cache);
    lazyattn_attention_destroy(attn);
    lazyattn_pool_destroy(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_random_edits),
        cmocka_unit_test(test_incremental_writes),
        cmocka_unit_test(test_error_paths),
        cmocka_unit_test(test_decode_through_plan),
    };
    return cmocka_run_group_tests_name("device_plan", tests, lt_context_setup, lt_context_teardown);
}
