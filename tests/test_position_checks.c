/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Positions the header promises to check: an entry_pos (logical start)
 * outside 0..LAZYATTN_MAX_POSITION over the entry's length, a stored start
 * entry_pos - delta outside it, or a q_pos outside it is skipped by prefill
 * and decode and recorded, so lazyattn_attention_check returns
 * OUT_OF_RANGE. Skipped means skipped: the output equals the float64
 * reference over the remaining keys (a bad query sees no key: zeros).
 * Valid tables, up to the last position 2^24 - 1, still match the
 * reference.
 *
 * One document of 39 tokens (entries of 16, 16, 7 keys) stored at
 * document-local positions 0.., reused at logical start L (delta L), then a
 * question of 5 tokens stored at its logical positions (delta 0).
 */
#include "test_common.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { D = 64, NQ = 4, NKV = 2, B = 16, N_DOC = 39, N_Q = 5, N_KEYS = N_DOC + N_Q, N_ENT = 4 };
static const int entry_first[N_ENT] = {0, 16, 32, 39}; /* first key of each entry */
static const int entry_len[N_ENT] = {16, 16, 7, 5};
static const int32_t entry_block[N_ENT] = {2, 0, 3, 1}; /* scattered */
static const double tol = 2e-5;                        /* f32 storage */

/* Output buffers start as this, so that an output the kernels never wrote
 * cannot pass for zeros. */
static float garbage[N_Q * NQ * D];

typedef struct scene {
    lazyattn_context *ctx;
    lazyattn_attention_config cfg;
    lazyattn_attention *attn;
    lazyattn_pool *pool;
    int32_t L;                /* logical start of the document */
    float k[N_KEYS * NKV * D], v[N_KEYS * NKV * D];
    int32_t k_pos[N_KEYS];    /* logical */
    uint64_t table[N_ENT];
    int32_t entry_pos[N_ENT];
    float q[N_Q * NQ * D];    /* unrotated queries of the question tokens */
    int32_t q_pos[N_Q];
} scene;

static void scene_make(lazyattn_context *ctx, int32_t L, uint64_t seed, scene *s) {
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->L = L;
    lazyattn_attention_config_default(&s->cfg);
    s->cfg.n_q_heads = NQ, s->cfg.n_kv_heads = NKV, s->cfg.head_dim = D, s->cfg.block_size = B;
    s->cfg.dtype = LAZYATTN_DTYPE_F32;
    lt_assert_status(lazyattn_attention_create(ctx, &s->cfg, &s->attn), LAZYATTN_STATUS_OK);
    lazyattn_pool_config pc = {1, NKV, D, B, LAZYATTN_DTYPE_F32, (uint64_t)4 * 2 * NKV * B * D * 4,
                               LAZYATTN_KV_LAYOUT_ROWS};
    lt_assert_status(lazyattn_pool_create(ctx, &pc, &s->pool), LAZYATTN_STATUS_OK);

    for (int i = 0; i < N_Q * NQ * D; i++) garbage[i] = 7.0f;
    lt_rng r = {seed};
    lt_fill(&r, s->k, N_KEYS * NKV * D, 2.0f);
    lt_fill(&r, s->v, N_KEYS * NKV * D, 1.0f);
    lt_fill(&r, s->q, N_Q * NQ * D, 2.0f);
    int32_t slot[N_KEYS], stored[N_KEYS];
    for (int e = 0; e < N_ENT; e++) {
        int doc = e < 3;
        int logical = L + entry_first[e];
        int stored0 = doc ? entry_first[e] : logical;
        lt_assert_status(lazyattn_entry_pack(entry_block[e], logical - stored0, entry_len[e],
                                             &s->table[e]),
                         LAZYATTN_STATUS_OK);
        s->entry_pos[e] = logical;
        for (int j = 0; j < entry_len[e]; j++) {
            int key = entry_first[e] + j;
            s->k_pos[key] = logical + j;
            slot[key] = entry_block[e] * B + j;
            stored[key] = stored0 + j;
        }
    }
    for (int t = 0; t < N_Q; t++) s->q_pos[t] = L + N_DOC + t;

    cl_mem km = lt_buffer(ctx, s->k, sizeof s->k), vm = lt_buffer(ctx, s->v, sizeof s->v);
    cl_mem sm = lt_buffer(ctx, slot, sizeof slot), pm = lt_buffer(ctx, stored, sizeof stored);
    lt_assert_status(lazyattn_write_kv(s->attn, s->pool, 0, N_KEYS, km, vm, sm, pm, NULL, NULL),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_check(s->attn, NULL), LAZYATTN_STATUS_OK);
    clReleaseMemObject(km); clReleaseMemObject(vm); clReleaseMemObject(sm); clReleaseMemObject(pm);
}

static void scene_free(scene *s) {
    lazyattn_attention_destroy(s->attn);
    lazyattn_pool_destroy(s->pool);
}

/* float64 reference of queries rows[0..n) (question tokens) at positions
 * qpos over every key except those of entry `skip` (-1: none). */
static void reference(const scene *s, const int *rows, const int32_t *qpos, int n, int skip,
                      double *out) {
    float k[N_KEYS * NKV * D], v[N_KEYS * NKV * D], q[N_Q * NQ * D];
    int32_t kp[N_KEYS];
    int nk = 0;
    for (int key = 0; key < N_KEYS; key++) {
        if (skip >= 0 && key >= entry_first[skip] && key < entry_first[skip] + entry_len[skip])
            continue;
        memcpy(k + nk * NKV * D, s->k + key * NKV * D, sizeof(float) * NKV * D);
        memcpy(v + nk * NKV * D, s->v + key * NKV * D, sizeof(float) * NKV * D);
        kp[nk++] = s->k_pos[key];
    }
    for (int i = 0; i < n; i++) memcpy(q + i * NQ * D, s->q + rows[i] * NQ * D, sizeof(float) * NQ * D);
    lazyattn_reference_args ra = {n, nk, q, qpos, k, v, kp, out, NULL};
    lt_assert_status(lazyattn_reference_attention(&s->cfg, &ra), LAZYATTN_STATUS_OK);
}

/* Prefill of the question rows with queries rotated at their true
 * positions, given q_pos and the table; returns attention_check's status. */
static int prefill(const scene *s, const int32_t *qpos, const uint64_t *table,
                   const int32_t *epos, float *out) {
    lazyattn_context *ctx = s->ctx;
    cl_mem qm = lt_buffer(ctx, s->q, sizeof s->q);
    cl_mem true_pos = lt_buffer(ctx, s->q_pos, sizeof s->q_pos);
    cl_mem qpm = lt_buffer(ctx, qpos, sizeof(int32_t) * N_Q);
    cl_mem tm = lt_buffer(ctx, table, sizeof(uint64_t) * N_ENT);
    cl_mem em = lt_buffer(ctx, epos, sizeof(int32_t) * N_ENT);
    cl_mem om = lt_buffer(ctx, garbage, sizeof(float) * N_Q * NQ * D);
    lt_assert_status(lazyattn_rope_apply(s->attn, N_Q, NQ, qm, true_pos, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_check(s->attn, NULL), LAZYATTN_STATUS_OK);
    lazyattn_prefill_args a = {N_Q, N_ENT, qm, qpm, tm, em, om,
                               NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    lt_assert_status(lazyattn_prefill(s->attn, s->pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
    int st = lazyattn_attention_check(s->attn, NULL);
    lt_read(ctx, om, out, sizeof(float) * N_Q * NQ * D);
    cl_mem m[] = {qm, true_pos, qpm, tm, em, om};
    for (int i = 0; i < 6; i++) clReleaseMemObject(m[i]);
    return st;
}

/* Decode of the last question token (one sequence over the whole table)
 * with the given q_pos, split n_splits ways; returns attention_check's status. */
static int decode(const scene *s, int32_t qpos, const uint64_t *table, const int32_t *epos,
                  int n_splits, float *out) {
    lazyattn_context *ctx = s->ctx;
    const int last = N_Q - 1;
    int32_t offsets[2] = {0, N_ENT};
    cl_mem qm = lt_buffer(ctx, s->q + last * NQ * D, sizeof(float) * NQ * D);
    cl_mem true_pos = lt_buffer(ctx, &s->q_pos[last], sizeof(int32_t));
    cl_mem qpm = lt_buffer(ctx, &qpos, sizeof qpos);
    cl_mem om_off = lt_buffer(ctx, offsets, sizeof offsets);
    cl_mem tm = lt_buffer(ctx, table, sizeof(uint64_t) * N_ENT);
    cl_mem em = lt_buffer(ctx, epos, sizeof(int32_t) * N_ENT);
    cl_mem om = lt_buffer(ctx, garbage, sizeof(float) * NQ * D);
    lt_assert_status(lazyattn_rope_apply(s->attn, 1, NQ, qm, true_pos, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_check(s->attn, NULL), LAZYATTN_STATUS_OK);
    lazyattn_decode_args d = {1, N_ENT, n_splits, qm, qpm, om_off, tm, em, om,
                              NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    lt_assert_status(lazyattn_decode(s->attn, s->pool, 0, &d, NULL, NULL), LAZYATTN_STATUS_OK);
    int st = lazyattn_attention_check(s->attn, NULL);
    lt_read(ctx, om, out, sizeof(float) * NQ * D);
    cl_mem m[] = {qm, true_pos, qpm, om_off, tm, em, om};
    for (int i = 0; i < 7; i++) clReleaseMemObject(m[i]);
    return st;
}

static const int all_rows[N_Q] = {0, 1, 2, 3, 4};

/* Prefill over (table, epos) with entry `skip` bad: OUT_OF_RANGE naming
 * entry_pos, and the output of the reference without that entry. */
static void expect_prefill_skips_entry(const scene *s, const uint64_t *table, const int32_t *epos,
                                       int skip, const char *what) {
    float out[N_Q * NQ * D];
    double ref[N_Q * NQ * D];
    int st = prefill(s, s->q_pos, table, epos, out);
    if (st != LAZYATTN_STATUS_OUT_OF_RANGE) print_error("prefill, %s: status %d\n", what, st);
    assert_int_equal(st, LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_non_null(strstr(lazyattn_last_error(), "entry_pos"));
    reference(s, all_rows, s->q_pos, N_Q, skip, ref);
    double err = lazyattn_normalised_error(out, ref, N_Q * NQ * D);
    if (!(err <= tol)) print_error("prefill, %s: error %.3g against the reference without entry %d\n", what, err, skip);
    assert_true(err <= tol);
    /* the record was cleared */
    lt_assert_status(lazyattn_attention_check(s->attn, NULL), LAZYATTN_STATUS_OK);
}

static void expect_decode_skips_entry(const scene *s, const uint64_t *table, const int32_t *epos,
                                      int skip, const char *what) {
    for (int n_splits = 1; n_splits <= 3; n_splits += 2) {
        float out[NQ * D];
        double ref[NQ * D];
        int st = decode(s, s->q_pos[N_Q - 1], table, epos, n_splits, out);
        if (st != LAZYATTN_STATUS_OUT_OF_RANGE) print_error("decode, %s: status %d\n", what, st);
        assert_int_equal(st, LAZYATTN_STATUS_OUT_OF_RANGE);
        assert_non_null(strstr(lazyattn_last_error(), "entry_pos"));
        const int row = N_Q - 1;
        reference(s, &row, &s->q_pos[row], 1, skip, ref);
        double err = lazyattn_normalised_error(out, ref, NQ * D);
        if (!(err <= tol)) print_error("decode, %s, %d splits: error %.3g\n", what, n_splits, err);
        assert_true(err <= tol);
    }
}

/* Valid tables, at an ordinary start and with the last key and query at
 * 2^24 - 1, match the reference with nothing recorded. */
static void test_valid_tables_match_the_reference(void **state) {
    const int32_t starts[2] = {1000, LAZYATTN_MAX_POSITION - (N_KEYS - 1)};
    for (int i = 0; i < 2; i++) {
        scene s;
        scene_make(*state, starts[i], lt_seed() + (uint64_t)i, &s);
        float out[N_Q * NQ * D];
        double ref[N_Q * NQ * D];
        lt_assert_status(prefill(&s, s.q_pos, s.table, s.entry_pos, out), LAZYATTN_STATUS_OK);
        reference(&s, all_rows, s.q_pos, N_Q, -1, ref);
        double err = lazyattn_normalised_error(out, ref, N_Q * NQ * D);
        printf("# L = %d: prefill error %.2e", (int)s.L, err);
        assert_true(err <= tol);
        for (int n_splits = 1; n_splits <= 3; n_splits += 2) {
            const int row = N_Q - 1;
            lt_assert_status(decode(&s, s.q_pos[row], s.table, s.entry_pos, n_splits, out),
                             LAZYATTN_STATUS_OK);
            reference(&s, &row, &s.q_pos[row], 1, -1, ref);
            err = lazyattn_normalised_error(out, ref, NQ * D);
            printf(", decode (%d splits) %.2e", n_splits, err);
            assert_true(err <= tol);
        }
        printf("\n");
        scene_free(&s);
    }
}

/* Logical starts outside the range, over the entry's valid length. */
static void test_bad_entry_pos_is_skipped_and_recorded(void **state) {
    scene s;
    scene_make(*state, 1000, lt_seed() + 2, &s);
    int32_t epos[N_ENT];
    struct { int entry; int32_t value; const char *what; } cases[] = {
        {0, -7, "entry_pos -7 (the attack)"},
        {0, INT_MIN, "entry_pos INT_MIN"},
        {1, LAZYATTN_MAX_POSITION + 1, "entry_pos 2^24"},
        {2, INT_MAX, "entry_pos INT_MAX"},
        /* the question's 5 keys would end at 2^24 */
        {3, LAZYATTN_MAX_POSITION - 3, "last key past 2^24 - 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        memcpy(epos, s.entry_pos, sizeof epos);
        epos[cases[i].entry] = cases[i].value;
        expect_prefill_skips_entry(&s, s.table, epos, cases[i].entry, cases[i].what);
        expect_decode_skips_entry(&s, s.table, epos, cases[i].entry, cases[i].what);
    }
    scene_free(&s);
}

/* entry_pos repeats the delta (stored start = entry_pos - delta): a stored
 * start outside the range is caught even when entry_pos itself is fine. */
static void test_bad_stored_start_is_skipped_and_recorded(void **state) {
    scene s;
    scene_make(*state, 1000, lt_seed() + 3, &s);
    int32_t epos[N_ENT];
    uint64_t table[N_ENT];
    /* entry 1 (delta 1000) said to start at 5: stored start 5 - 1000 < 0 */
    memcpy(epos, s.entry_pos, sizeof epos);
    epos[1] = 5;
    expect_prefill_skips_entry(&s, s.table, epos, 1, "stored start -995");
    expect_decode_skips_entry(&s, s.table, epos, 1, "stored start -995");
    /* entry 0 with a delta of -(2^24 - 501): stored start 1000 + 2^24 - 501 > 2^24 - 1 */
    memcpy(table, s.table, sizeof table);
    lt_assert_status(lazyattn_entry_pack(entry_block[0], -(LAZYATTN_MAX_POSITION - 500), 16, &table[0]),
                     LAZYATTN_STATUS_OK);
    expect_prefill_skips_entry(&s, table, s.entry_pos, 0, "stored start past 2^24 - 1");
    expect_decode_skips_entry(&s, table, s.entry_pos, 0, "stored start past 2^24 - 1");
    scene_free(&s);
}

/* A query position outside the range sees no key (zeros) and is recorded;
 * the other queries are untouched. */
static void test_bad_q_pos_is_skipped_and_recorded(void **state) {
    scene s;
    scene_make(*state, 1000, lt_seed() + 4, &s);
    const int32_t bad[] = {-1, INT_MIN, LAZYATTN_MAX_POSITION + 1, INT_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        /* prefill: row 2 bad */
        int32_t qpos[N_Q];
        memcpy(qpos, s.q_pos, sizeof qpos);
        qpos[2] = bad[i];
        float out[N_Q * NQ * D];
        double ref[N_Q * NQ * D];
        lt_assert_status(prefill(&s, qpos, s.table, s.entry_pos, out), LAZYATTN_STATUS_OUT_OF_RANGE);
        assert_non_null(strstr(lazyattn_last_error(), "q_pos"));
        reference(&s, all_rows, s.q_pos, N_Q, -1, ref);
        for (int t = 0; t < N_Q; t++) {
            const float *o = out + t * NQ * D;
            if (t == 2) {
                for (int x = 0; x < NQ * D; x++) assert_true(o[x] == 0.0f);
            } else {
                assert_true(lazyattn_normalised_error(o, ref + t * NQ * D, NQ * D) <= tol);
            }
        }
        /* decode */
        for (int n_splits = 1; n_splits <= 3; n_splits += 2) {
            float dout[NQ * D];
            lt_assert_status(decode(&s, bad[i], s.table, s.entry_pos, n_splits, dout),
                             LAZYATTN_STATUS_OUT_OF_RANGE);
            assert_non_null(strstr(lazyattn_last_error(), "q_pos"));
            for (int x = 0; x < NQ * D; x++) assert_true(dout[x] == 0.0f);
        }
    }
    scene_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_tables_match_the_reference),
        cmocka_unit_test(test_bad_entry_pos_is_skipped_and_recorded),
        cmocka_unit_test(test_bad_stored_start_is_skipped_and_recorded),
        cmocka_unit_test(test_bad_q_pos_is_skipped_and_recorded),
    };
    return cmocka_run_group_tests_name("position_checks", tests, lt_context_setup, lt_context_teardown);
}
