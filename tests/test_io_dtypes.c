/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The optional LSE output and f16/bf16 Q and output of lazyattn_prefill,
 * lazyattn_prefill_batched and lazyattn_decode (1 and several KV splits):
 *  - LSE against the float64 reference's log-sum-exp (scaled scores with
 *    RoPE and ALiBi), -INFINITY for a query that sees no key;
 *  - the merge: attention over two halves of the keys, merged by their LSE
 *    (out = sum_i exp(lse_i - lse) out_i), equals attention over all keys,
 *    and so does the merged LSE;
 *  - f16/bf16 Q and out against the f32 path run on the same (rounded)
 *    queries: the kernels compute the same floats, so the stored output
 *    must be exactly the host's round-to-nearest-even of the f32 output;
 *    and against the reference within each type's rounding;
 *  - bad dtypes and short q/out/lse buffers refused.
 * Geometry: 8 query heads over 2 KV heads, head dim 64, blocks of 16, f32
 * K/V, NeoX RoPE with Llama-3 scaling and ALiBi (one program set).
 */
#include "test_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- host conversions (independent of the kernels') -------------------- */

static uint16_t f2h(float f) { /* IEEE half, round to nearest even */
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
    if (ax >= 0x7F800000u) return (uint16_t)(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u : 0u));
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* rounds to infinity */
    if (ax < 0x38800000u) { /* half subnormal or zero: a multiple of 2^-24 */
        float a;
        memcpy(&a, &ax, 4);
        return (uint16_t)(sign | (uint32_t)nearbyintf(a * 16777216.0f));
    }
    const uint32_t e = ax - 0x38000000u; /* exponent bias 127 -> 15 */
    uint32_t r = e >> 13;
    const uint32_t rem = e & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}
static float h2f(uint16_t h) {
    const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    float f = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), e - 25);
    return h & 0x8000u ? -f : f;
}
static uint16_t f2b(float f) { /* bf16, round to nearest even */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7F800000u) == 0x7F800000u) return (uint16_t)(u >> 16);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float b2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t to16(lazyattn_dtype t, float x) { return t == LAZYATTN_DTYPE_F16 ? f2h(x) : f2b(x); }
static float from16(lazyattn_dtype t, uint16_t x) { return t == LAZYATTN_DTYPE_F16 ? h2f(x) : b2f(x); }

/* ---- the fixture: one sequence of keys in a pool --------------------------- */

enum { NQH = 8, NKV = 2, D = 64, B = 16, N_KEYS = 5 * B + 5, N_ENT = 6, HALF = 3, N_Q = 6, BASE = 1000 };

typedef struct fixture {
    lazyattn_context *ctx;
    lazyattn_attention_config c;
    lazyattn_pool *pool;
    lazyattn_attention *attn;
    float k[N_KEYS * NKV * D], v[N_KEYS * NKV * D];
    int32_t k_pos[N_KEYS];
    uint64_t table[N_ENT];
    int32_t entry_pos[N_ENT];
    float q_raw[N_Q * NQH * D]; /* unrotated */
    float q_rot[N_Q * NQH * D]; /* rotated on the device at q_pos */
    int32_t q_pos[N_Q];
} fixture;

static void fixture_make(lazyattn_context *ctx, fixture *f, uint64_t salt) {
    memset(f, 0, sizeof *f);
    f->ctx = ctx;
    lazyattn_attention_config_init(&f->c); /* NeoX RoPE, Llama-3 scaling */
    f->c.n_q_heads = NQH, f->c.n_kv_heads = NKV, f->c.head_dim = D, f->c.block_size = B;
    f->c.dtype = LAZYATTN_DTYPE_F32, f->c.alibi = 1;
    lazyattn_pool_config pc;
    lazyattn_pool_config_init(&pc);
    pc.n_layers = 1, pc.n_kv_heads = NKV, pc.head_dim = D, pc.block_size = B, pc.dtype = f->c.dtype;
    pc.budget_bytes = (uint64_t)(N_ENT + 2) * 2 * NKV * B * D * sizeof(float);
    lt_assert_status(lazyattn_pool_create(ctx, &pc, &f->pool), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_create(ctx, &f->c, &f->attn), LAZYATTN_STATUS_OK);

    lt_rng r = {lt_seed() ^ salt};
    lt_fill(&r, f->k, sizeof f->k / sizeof *f->k, 2.0f);
    lt_fill(&r, f->v, sizeof f->v / sizeof *f->v, 1.0f);
    lt_fill(&r, f->q_raw, sizeof f->q_raw / sizeof *f->q_raw, 2.0f);
    int32_t ids[N_ENT], slot[N_KEYS];
    lt_assert_status(lazyattn_pool_alloc(f->pool, N_ENT, ids), LAZYATTN_STATUS_OK);
    for (int e = 0; e < N_ENT; e++) { /* blocks in reverse order: the table, not the pool, orders them */
        const int id = ids[N_ENT - 1 - e], len = N_KEYS - e * B < B ? N_KEYS - e * B : B;
        lt_assert_status(lazyattn_entry_pack(id, 0, len, &f->table[e]), LAZYATTN_STATUS_OK);
        f->entry_pos[e] = BASE + e * B;
        for (int j = 0; j < len; j++) f->k_pos[e * B + j] = BASE + e * B + j, slot[e * B + j] = id * B + j;
    }
    const size_t kvb = sizeof f->k;
    cl_mem km = lt_buffer(ctx, f->k, kvb), vm = lt_buffer(ctx, f->v, kvb);
    cl_mem sm = lt_buffer(ctx, slot, sizeof slot), pm = lt_buffer(ctx, f->k_pos, sizeof f->k_pos);
    lt_assert_status(lazyattn_write_kv(f->attn, f->pool, 0, N_KEYS, km, vm, sm, pm, NULL, NULL),
                     LAZYATTN_STATUS_OK);
    /* queries: one before every key (sees none), one inside the first half
     * only, the rest across both halves */
    const int32_t qp[N_Q] = {BASE - 3, BASE + 10, BASE + 47, BASE + 50, BASE + N_KEYS - 1, BASE + N_KEYS - 1};
    memcpy(f->q_pos, qp, sizeof qp);
    cl_mem qm = lt_buffer(ctx, f->q_raw, sizeof f->q_raw), qpm = lt_buffer(ctx, qp, sizeof qp);
    lt_assert_status(lazyattn_rope_apply(f->attn, N_Q, NQH, qm, qpm, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_read(ctx, qm, f->q_rot, sizeof f->q_rot);
    lt_assert_status(lazyattn_attention_check(f->attn, NULL), LAZYATTN_STATUS_OK);
    clReleaseMemObject(km), clReleaseMemObject(vm), clReleaseMemObject(sm), clReleaseMemObject(pm);
    clReleaseMemObject(qm), clReleaseMemObject(qpm);
}

static void fixture_free(fixture *f) {
    lazyattn_attention_destroy(f->attn);
    lazyattn_pool_destroy(f->pool);
}

/* The reference over keys k0 .. k1 - 1 for queries q (unrotated, n_q rows). */
static void reference(const fixture *f, const float *q, const int32_t *q_pos, int n_q, int k0, int k1,
                      double *out, double *lse) {
    lazyattn_reference_args a;
    lazyattn_reference_args_init(&a);
    a.n_queries = n_q, a.n_keys = k1 - k0, a.q = q, a.q_pos = q_pos;
    a.k = f->k + (size_t)k0 * NKV * D, a.v = f->v + (size_t)k0 * NKV * D, a.k_pos = f->k_pos + k0;
    a.out = out, a.lse = lse;
    lt_assert_status(lazyattn_reference_attention(&f->c, &a), LAZYATTN_STATUS_OK);
}

static void check_lse(const float *got, const double *want, int n, double tol) {
    double worst = 0.0;
    for (int i = 0; i < n; i++)
        if (want[i] != -INFINITY && fabs(got[i] - want[i]) > worst) worst = fabs(got[i] - want[i]);
    print_message("lse: largest error %.3g over %d rows (tolerance %.3g)\n", worst, n, tol);
    for (int i = 0; i < n; i++) {
        if (want[i] == -INFINITY) {
            if (!(got[i] == -INFINITY)) print_error("lse[%d] = %g, want -inf\n", i, (double)got[i]);
            assert_true(got[i] == -INFINITY);
        } else {
            if (!(fabs(got[i] - want[i]) <= tol)) print_error("lse[%d] = %.7g, want %.7g\n", i, (double)got[i], want[i]);
            assert_true(fabs(got[i] - want[i]) <= tol);
        }
    }
}

static void check_out(const float *got, const double *want, size_t n, double tol, const char *what) {
    const double err = lazyattn_normalised_error(got, want, n);
    print_message("%s: normalised error %.3g (tolerance %.3g)\n", what, err, tol);
    assert_true(err <= tol);
}

/* Merges two partial attentions by their LSE; returns the merged LSE rows. */
static void merge(const float *o1, const float *l1, const float *o2, const float *l2, int rows,
                  double *out, double *lse) {
    for (int r = 0; r < rows; r++) {
        const double m = fmax(l1[r], l2[r]);
        if (m == -INFINITY) {
            lse[r] = -INFINITY;
            for (int i = 0; i < D; i++) out[(size_t)r * D + i] = 0.0;
            continue;
        }
        const double w1 = exp(l1[r] - m), w2 = exp(l2[r] - m), s = w1 + w2;
        lse[r] = m + log(s);
        for (int i = 0; i < D; i++)
            out[(size_t)r * D + i] = (w1 * o1[(size_t)r * D + i] + w2 * o2[(size_t)r * D + i]) / s;
    }
}

/* ---- prefill ----------------------------------------------------------------- */

/* Prefill of queries q (already rotated, in q_dtype bytes) over entries
 * e0 .. e1 - 1; out in out_dtype bytes, lse optional. */
static void prefill(fixture *f, const void *q, lazyattn_dtype qd, int e0, int e1, void *out,
                    lazyattn_dtype od, float *lse) {
    const size_t n = (size_t)N_Q * NQH * D;
    cl_mem qm = lt_buffer(f->ctx, q, n * lazyattn_dtype_size(qd));
    cl_mem qpm = lt_buffer(f->ctx, f->q_pos, sizeof f->q_pos);
    cl_mem tm = lt_buffer(f->ctx, f->table + e0, sizeof(uint64_t) * (e1 - e0));
    cl_mem em = lt_buffer(f->ctx, f->entry_pos + e0, sizeof(int32_t) * (e1 - e0));
    cl_mem om = lt_buffer(f->ctx, NULL, n * lazyattn_dtype_size(od));
    cl_mem lm = lse ? lt_buffer(f->ctx, NULL, sizeof(float) * N_Q * NQH) : NULL;
    lazyattn_prefill_args a;
    lazyattn_prefill_args_init(&a);
    assert_true(a.lse == NULL && a.q_dtype == LAZYATTN_DTYPE_F32 && a.out_dtype == LAZYATTN_DTYPE_F32);
    a.n_queries = N_Q, a.n_entries = e1 - e0, a.q = qm, a.q_pos = qpm, a.table = tm, a.entry_pos = em;
    a.out = om, a.lse = lm, a.q_dtype = qd, a.out_dtype = od;
    lt_assert_status(lazyattn_prefill(f->attn, f->pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_read(f->ctx, om, out, n * lazyattn_dtype_size(od));
    if (lse) lt_read(f->ctx, lm, lse, sizeof(float) * N_Q * NQH);
    lt_assert_status(lazyattn_attention_check(f->attn, NULL), LAZYATTN_STATUS_OK);
    clReleaseMemObject(qm), clReleaseMemObject(qpm), clReleaseMemObject(tm), clReleaseMemObject(em);
    clReleaseMemObject(om);
    if (lm) clReleaseMemObject(lm);
}

enum { ROWS = N_Q * NQH, ELEMS = N_Q * NQH * D };

static void test_prefill_lse_and_merge(void **state) {
    fixture *f = malloc(sizeof *f);
    assert_non_null(f);
    fixture_make(*state, f, 1);
    static float out[ELEMS], out1[ELEMS], out2[ELEMS], lse[ROWS], lse1[ROWS], lse2[ROWS];
    static double ref[ELEMS], ref_lse[ROWS], merged[ELEMS], merged_lse[ROWS];
    prefill(f, f->q_rot, LAZYATTN_DTYPE_F32, 0, N_ENT, out, LAZYATTN_DTYPE_F32, lse);
    reference(f, f->q_raw, f->q_pos, N_Q, 0, N_KEYS, ref, ref_lse);
    check_out(out, ref, ELEMS, 2e-5, "prefill out");
    check_lse(lse, ref_lse, ROWS, 2e-5);
    assert_true(lse[0] == -INFINITY); /* query 0 sees no key: -inf, zeros */
    for (int i = 0; i < NQH * D; i++) assert_true(out[i] == 0.0f);
    /* the halves, each against the reference over its keys, then merged */
    prefill(f, f->q_rot, LAZYATTN_DTYPE_F32, 0, HALF, out1, LAZYATTN_DTYPE_F32, lse1);
    prefill(f, f->q_rot, LAZYATTN_DTYPE_F32, HALF, N_ENT, out2, LAZYATTN_DTYPE_F32, lse2);
    static double ref_half[ROWS];
    reference(f, f->q_raw, f->q_pos, N_Q, HALF * B, N_KEYS, merged, ref_half);
    check_lse(lse2, ref_half, ROWS, 2e-5);
    assert_true(lse2[1 * NQH] == -INFINITY); /* query 1 sees none of the second half */
    merge(out1, lse1, out2, lse2, ROWS, merged, merged_lse);
    check_out(out, merged, ELEMS, 2e-5, "prefill halves merged by lse vs whole");
    float merged_lse_f[ROWS];
    for (int i = 0; i < ROWS; i++) merged_lse_f[i] = (float)merged_lse[i];
    check_lse(merged_lse_f, ref_lse, ROWS, 2e-5);
    /* without lse: the same output bits */
    static float out_plain[ELEMS];
    prefill(f, f->q_rot, LAZYATTN_DTYPE_F32, 0, N_ENT, out_plain, LAZYATTN_DTYPE_F32, NULL);
    assert_memory_equal(out_plain, out, sizeof out);
    fixture_free(f);
    free(f);
}

/* f16/bf16 q and out: exactly the rounding of the f32 path on the same
 * rounded queries, and within the type's rounding of the reference. */
static void test_prefill_dtypes(void **state) {
    fixture *f = malloc(sizeof *f);
    assert_non_null(f);
    fixture_make(*state, f, 2);
    static double ref[ELEMS], ref_lse[ROWS];
    reference(f, f->q_raw, f->q_pos, N_Q, 0, N_KEYS, ref, ref_lse);
    const lazyattn_dtype types[2] = {LAZYATTN_DTYPE_F16, LAZYATTN_DTYPE_BF16};
    const double tol[2] = {2e-3, 1.6e-2};
    for (int ti = 0; ti < 2; ti++) {
        const lazyattn_dtype t = types[ti];
        static uint16_t q16[ELEMS], o16[ELEMS], oq[ELEMS];
        static float q_back[ELEMS], out32[ELEMS], lse16[ROWS], lse32[ROWS], o_f[ELEMS];
        for (int i = 0; i < ELEMS; i++) q16[i] = to16(t, f->q_rot[i]), q_back[i] = from16(t, q16[i]);
        prefill(f, q_back, LAZYATTN_DTYPE_F32, 0, N_ENT, out32, LAZYATTN_DTYPE_F32, lse32);
        prefill(f, q16, t, 0, N_ENT, o16, t, lse16); /* 16-bit q and out */
        int mismatches = 0;
        for (int i = 0; i < ELEMS; i++) mismatches += o16[i] != to16(t, out32[i]);
        print_message("prefill %s: %d of %d outputs differ from the rounded f32 path\n",
                      t == LAZYATTN_DTYPE_F16 ? "f16" : "bf16", mismatches, ELEMS);
        assert_int_equal(mismatches, 0);
        assert_memory_equal(lse16, lse32, sizeof lse32);
        for (int i = 0; i < ELEMS; i++) o_f[i] = from16(t, o16[i]);
        check_out(o_f, ref, ELEMS, tol[ti], "prefill 16-bit q/out vs reference");
        /* 16-bit q, f32 out: the f32 path's bits */
        prefill(f, q16, t, 0, N_ENT, o_f, LAZYATTN_DTYPE_F32, NULL);
        assert_memory_equal(o_f, out32, sizeof out32);
        /* f32 q, 16-bit out */
        prefill(f, q_back, LAZYATTN_DTYPE_F32, 0, N_ENT, oq, t, NULL);
        assert_memory_equal(oq, o16, sizeof o16);
    }
    fixture_free(f);
    free(f);
}

/* ---- batched prefill --------------------------------------------------------- */

/* Two sequences in one launch: the queries over the first half of the table,
 * then the same queries over the second half; rows 0 .. N_Q - 1 and
 * N_Q .. 2 N_Q - 1 of q/out/lse. */
static void batched(fixture *f, const void *q2, lazyattn_dtype qd, void *out, lazyattn_dtype od,
                    float *lse) {
    const size_t n = (size_t)2 * ELEMS;
    int32_t qpos2[2 * N_Q], qi[3] = {0, N_Q, 2 * N_Q}, ti[3] = {0, HALF, N_ENT};
    memcpy(qpos2, f->q_pos, sizeof f->q_pos), memcpy(qpos2 + N_Q, f->q_pos, sizeof f->q_pos);
    cl_mem qm = lt_buffer(f->ctx, q2, n * lazyattn_dtype_size(qd));
    cl_mem qpm = lt_buffer(f->ctx, qpos2, sizeof qpos2);
    cl_mem qim = lt_buffer(f->ctx, qi, sizeof qi), tim = lt_buffer(f->ctx, ti, sizeof ti);
    cl_mem tm = lt_buffer(f->ctx, f->table, sizeof f->table);
    cl_mem em = lt_buffer(f->ctx, f->entry_pos, sizeof f->entry_pos);
    cl_mem om = lt_buffer(f->ctx, NULL, n * lazyattn_dtype_size(od));
    cl_mem lm = lse ? lt_buffer(f->ctx, NULL, sizeof(float) * 2 * ROWS) : NULL;
    lazyattn_prefill_batch_args a;
    lazyattn_prefill_batch_args_init(&a);
    assert_true(a.lse == NULL && a.q_dtype == LAZYATTN_DTYPE_F32 && a.out_dtype == LAZYATTN_DTYPE_F32);
    a.n_seqs = 2, a.n_queries = 2 * N_Q, a.n_entries = N_ENT, a.max_queries = N_Q;
    a.q = qm, a.q_pos = qpm, a.q_indptr = qim, a.table_indptr = tim, a.table = tm, a.entry_pos = em;
    a.out = om, a.lse = lm, a.q_dtype = qd, a.out_dtype = od;
    lt_assert_status(lazyattn_prefill_batched(f->attn, f->pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_read(f->ctx, om, out, n * lazyattn_dtype_size(od));
    if (lse) lt_read(f->ctx, lm, lse, sizeof(float) * 2 * ROWS);
    lt_assert_status(lazyattn_attention_check(f->attn, NULL), LAZYATTN_STATUS_OK);
    clReleaseMemObject(qm), clReleaseMemObject(qpm), clReleaseMemObject(qim), clReleaseMemObject(tim);
    clReleaseMemObject(tm), clReleaseMemObject(em), clReleaseMemObject(om);
    if (lm) clReleaseMemObject(lm);
}

static void test_batched_lse_merge_dtypes(void **state) {
    fixture *f = malloc(sizeof *f);
    assert_non_null(f);
    fixture_make(*state, f, 3);
    static float q2[2 * ELEMS], out[2 * ELEMS], lse[2 * ROWS], one[ELEMS], one_lse[ROWS];
    static double ref[ELEMS], ref_lse[ROWS], merged[ELEMS], merged_lse[ROWS];
    memcpy(q2, f->q_rot, sizeof f->q_rot), memcpy(q2 + ELEMS, f->q_rot, sizeof f->q_rot);
    batched(f, q2, LAZYATTN_DTYPE_F32, out, LAZYATTN_DTYPE_F32, lse);
    /* each sequence bit-identical to lazyattn_prefill of it alone, lse too */
    prefill(f, f->q_rot, LAZYATTN_DTYPE_F32, HALF, N_ENT, one, LAZYATTN_DTYPE_F32, one_lse);
    assert_memory_equal(out + ELEMS, one, sizeof one);
    assert_memory_equal(lse + ROWS, one_lse, sizeof one_lse);
    reference(f, f->q_raw, f->q_pos, N_Q, 0, HALF * B, ref, ref_lse);
    check_out(out, ref, ELEMS, 2e-5, "batched first half");
    check_lse(lse, ref_lse, ROWS, 2e-5);
    assert_true(lse[0] == -INFINITY);
    /* merged halves = attention over all keys */
    reference(f, f->q_raw, f->q_pos, N_Q, 0, N_KEYS, ref, ref_lse);
    merge(out, lse, out + ELEMS, lse + ROWS, ROWS, merged, merged_lse);
    static float mf[ELEMS];
    for (int i = 0; i < ELEMS; i++) mf[i] = (float)merged[i];
    check_out(mf, ref, ELEMS, 2e-5, "batched halves merged by lse vs reference over all keys");
    float ml[ROWS];
    for (int i = 0; i < ROWS; i++) ml[i] = (float)merged_lse[i];
    check_lse(ml, ref_lse, ROWS, 2e-5);
    /* 16-bit q and out: the f32 path's output rounded */
    const lazyattn_dtype types[2] = {LAZYATTN_DTYPE_F16, LAZYATTN_DTYPE_BF16};
    for (int ti = 0; ti < 2; ti++) {
        const lazyattn_dtype t = types[ti];
        static uint16_t q16[2 * ELEMS], o16[2 * ELEMS];
        static float qb[2 * ELEMS], o32[2 * ELEMS], l16[2 * ROWS], l32[2 * ROWS];
        for (int i = 0; i < 2 * ELEMS; i++) q16[i] = to16(t, q2[i]), qb[i] = from16(t, q16[i]);
        batched(f, qb, LAZYATTN_DTYPE_F32, o32, LAZYATTN_DTYPE_F32, l32);
        batched(f, q16, t, o16, t, l16);
        int mismatches = 0;
        for (int i = 0; i < 2 * ELEMS; i++) mismatches += o16[i] != to16(t, o32[i]);
        print_message("batched %s: %d of %d outputs differ from the rounded f32 path\n",
                      t == LAZYATTN_DTYPE_F16 ? "f16" : "bf16", mismatches, 2 * ELEMS);
        assert_int_equal(mismatches, 0);
        assert_memory_equal(l16, l32, sizeof l32);
    }
    fixture_free(f);
    free(f);
}

/* ---- decode ------------------------------------------------------------------ */

/* Decode of 3 sequences: query 4 over all entries, query 1 over the first
 * half, query 0 (before every key) over all; q rows in qd, out in od. */
enum { DS = 3 };
static void decode(fixture *f, const void *q, lazyattn_dtype qd, int n_splits, void *out,
                   lazyattn_dtype od, float *lse) {
    const size_t n = (size_t)DS * NQH * D;
    const int32_t qpos[DS] = {f->q_pos[4], f->q_pos[1], f->q_pos[0]};
    uint64_t table[2 * N_ENT + HALF];
    int32_t epos[2 * N_ENT + HALF], off[DS + 1] = {0, N_ENT, N_ENT + HALF, 2 * N_ENT + HALF};
    memcpy(table, f->table, sizeof f->table), memcpy(epos, f->entry_pos, sizeof f->entry_pos);
    memcpy(table + N_ENT, f->table, HALF * sizeof *table);
    memcpy(epos + N_ENT, f->entry_pos, HALF * sizeof *epos);
    memcpy(table + N_ENT + HALF, f->table, sizeof f->table);
    memcpy(epos + N_ENT + HALF, f->entry_pos, sizeof f->entry_pos);
    cl_mem qm = lt_buffer(f->ctx, q, n * lazyattn_dtype_size(qd));
    cl_mem qpm = lt_buffer(f->ctx, qpos, sizeof qpos), om_ = lt_buffer(f->ctx, off, sizeof off);
    cl_mem tm = lt_buffer(f->ctx, table, sizeof table), em = lt_buffer(f->ctx, epos, sizeof epos);
    cl_mem om = lt_buffer(f->ctx, NULL, n * lazyattn_dtype_size(od));
    cl_mem lm = lse ? lt_buffer(f->ctx, NULL, sizeof(float) * DS * NQH) : NULL;
    lazyattn_decode_args a;
    lazyattn_decode_args_init(&a);
    assert_true(a.lse == NULL && a.q_dtype == LAZYATTN_DTYPE_F32 && a.out_dtype == LAZYATTN_DTYPE_F32);
    a.n_seqs = DS, a.max_entries = N_ENT, a.n_splits = n_splits, a.q = qm, a.q_pos = qpm;
    a.seq_offsets = om_, a.table = tm, a.entry_pos = em, a.out = om, a.lse = lm;
    a.q_dtype = qd, a.out_dtype = od;
    lt_assert_status(lazyattn_decode(f->attn, f->pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_read(f->ctx, om, out, n * lazyattn_dtype_size(od));
    if (lse) lt_read(f->ctx, lm, lse, sizeof(float) * DS * NQH);
    lt_assert_status(lazyattn_attention_check(f->attn, NULL), LAZYATTN_STATUS_OK);
    clReleaseMemObject(qm), clReleaseMemObject(qpm), clReleaseMemObject(om_), clReleaseMemObject(tm);
    clReleaseMemObject(em), clReleaseMemObject(om);
    if (lm) clReleaseMemObject(lm);
}

static void test_decode_lse_splits_dtypes(void **state) {
    fixture *f = malloc(sizeof *f);
    assert_non_null(f);
    fixture_make(*state, f, 4);
    enum { DE = DS * NQH * D, DR = DS * NQH };
    static float q[DE], qraw[DE], out[DE], lse[DR];
    static double ref[DE], ref_lse[DR];
    const int rows[DS] = {4, 1, 0}, k1[DS] = {N_KEYS, HALF * B, N_KEYS};
    for (int s = 0; s < DS; s++) {
        memcpy(q + (size_t)s * NQH * D, f->q_rot + (size_t)rows[s] * NQH * D, sizeof(float) * NQH * D);
        memcpy(qraw + (size_t)s * NQH * D, f->q_raw + (size_t)rows[s] * NQH * D, sizeof(float) * NQH * D);
        reference(f, qraw + (size_t)s * NQH * D, &f->q_pos[rows[s]], 1, 0, k1[s],
                  ref + (size_t)s * NQH * D, ref_lse + (size_t)s * NQH);
    }
    const int splits[3] = {1, 2, 4};
    static float lse_first[DR];
    for (int si = 0; si < 3; si++) {
        decode(f, q, LAZYATTN_DTYPE_F32, splits[si], out, LAZYATTN_DTYPE_F32, lse);
        char what[64];
        snprintf(what, sizeof what, "decode out, %d splits", splits[si]);
        check_out(out, ref, DE, 2e-5, what);
        check_lse(lse, ref_lse, DR, 2e-5);
        assert_true(lse[2 * NQH] == -INFINITY); /* sequence 2 sees no key */
        for (int i = 0; i < NQH * D; i++) assert_true(out[2 * NQH * D + i] == 0.0f);
        if (si == 0) memcpy(lse_first, lse, sizeof lse); /* the splits agree to rounding */
        for (int i = 0; i < DR; i++)
            if (lse_first[i] != -INFINITY) assert_true(fabsf(lse[i] - lse_first[i]) <= 1e-5f * (1.0f + fabsf(lse_first[i])));
    }
    /* 16-bit q and out, 1 and 4 splits: the f32 path's output rounded */
    const lazyattn_dtype types[2] = {LAZYATTN_DTYPE_F16, LAZYATTN_DTYPE_BF16};
    for (int ti = 0; ti < 2; ti++) {
        const lazyattn_dtype t = types[ti];
        static uint16_t q16[DE], o16[DE];
        static float qb[DE], o32[DE], l16[DR], l32[DR];
        for (int i = 0; i < DE; i++) q16[i] = to16(t, q[i]), qb[i] = from16(t, q16[i]);
        for (int si = 0; si < 2; si++) {
            decode(f, qb, LAZYATTN_DTYPE_F32, splits[2 * si], o32, LAZYATTN_DTYPE_F32, l32);
            decode(f, q16, t, splits[2 * si], o16, t, l16);
            int mismatches = 0;
            for (int i = 0; i < DE; i++) mismatches += o16[i] != to16(t, o32[i]);
            print_message("decode %s, %d splits: %d of %d outputs differ from the rounded f32 path\n",
                          t == LAZYATTN_DTYPE_F16 ? "f16" : "bf16", splits[2 * si], mismatches, DE);
            assert_int_equal(mismatches, 0);
            assert_memory_equal(l16, l32, sizeof l32);
        }
    }
    fixture_free(f);
    free(f);
}

/* Decode halves merged: the second half's entries as their own sequence. */
static void test_decode_merge(void **state) {
    fixture *f = malloc(sizeof *f);
    assert_non_null(f);
    fixture_make(*state, f, 5);
    const size_t row = (size_t)NQH * D;
    const int32_t qpos[2] = {f->q_pos[4], f->q_pos[4]}, off[3] = {0, HALF, N_ENT};
    float q[2 * NQH * D], out[2 * NQH * D], lse[2 * NQH];
    memcpy(q, f->q_rot + 4 * row, sizeof(float) * row), memcpy(q + row, f->q_rot + 4 * row, sizeof(float) * row);
    cl_mem qm = lt_buffer(f->ctx, q, sizeof q), qpm = lt_buffer(f->ctx, qpos, sizeof qpos);
    cl_mem om_ = lt_buffer(f->ctx, off, sizeof off), tm = lt_buffer(f->ctx, f->table, sizeof f->table);
    cl_mem em = lt_buffer(f->ctx, f->entry_pos, sizeof f->entry_pos);
    cl_mem om = lt_buffer(f->ctx, NULL, sizeof out), lm = lt_buffer(f->ctx, NULL, sizeof lse);
    lazyattn_decode_args a;
    lazyattn_decode_args_init(&a);
    a.n_seqs = 2, a.max_entries = N_ENT - HALF, a.n_splits = 2, a.q = qm, a.q_pos = qpm;
    a.seq_offsets = om_, a.table = tm, a.entry_pos = em, a.out = om, a.lse = lm;
    lt_assert_status(lazyattn_decode(f->attn, f->pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_read(f->ctx, om, out, sizeof out), lt_read(f->ctx, lm, lse, sizeof lse);
    lt_assert_status(lazyattn_attention_check(f->attn, NULL), LAZYATTN_STATUS_OK);
    static double ref[NQH * D], ref_lse[NQH], merged[NQH * D], merged_lse[NQH];
    reference(f, f->q_raw + 4 * row, &f->q_pos[4], 1, 0, N_KEYS, ref, ref_lse);
    merge(out, lse, out + row, lse + NQH, NQH, merged, merged_lse);
    float mf[NQH * D], ml[NQH];
    for (size_t i = 0; i < row; i++) mf[i] = (float)merged[i];
    for (int i = 0; i < NQH; i++) ml[i] = (float)merged_lse[i];
    check_out(mf, ref, row, 2e-5, "decode halves merged by lse vs reference over all keys");
    check_lse(ml, ref_lse, NQH, 2e-5);
    clReleaseMemObject(qm), clReleaseMemObject(qpm), clReleaseMemObject(om_), clReleaseMemObject(tm);
    clReleaseMemObject(em), clReleaseMemObject(om), clReleaseMemObject(lm);
    fixture_free(f);
    free(f);
}

/* ---- bad input ------------------------------------------------------------------ */

static void test_bad_dtypes_and_sizes(void **state) {
    fixture *f = malloc(sizeof *f);
    assert_non_null(f);
    fixture_make(*state, f, 6);
    const size_t half_bytes = (size_t)ELEMS * 2, full = (size_t)ELEMS * 4;
    static uint16_t q16_host[ELEMS];
    for (int i = 0; i < ELEMS; i++) q16_host[i] = f2h(f->q_rot[i]);
    cl_mem q32 = lt_buffer(f->ctx, f->q_rot, full), q16 = lt_buffer(f->ctx, q16_host, half_bytes);
    cl_mem qpm = lt_buffer(f->ctx, f->q_pos, sizeof f->q_pos);
    cl_mem tm = lt_buffer(f->ctx, f->table, sizeof f->table);
    cl_mem em = lt_buffer(f->ctx, f->entry_pos, sizeof f->entry_pos);
    cl_mem o32 = lt_buffer(f->ctx, NULL, full), o16 = lt_buffer(f->ctx, NULL, half_bytes);
    cl_mem lse_ok = lt_buffer(f->ctx, NULL, sizeof(float) * ROWS);
    cl_mem lse_short = lt_buffer(f->ctx, NULL, sizeof(float) * ROWS - 4);
    const int32_t qi[2] = {0, N_Q}, ti[2] = {0, N_ENT}, off[2] = {0, N_ENT};
    cl_mem qim = lt_buffer(f->ctx, qi, sizeof qi), tim = lt_buffer(f->ctx, ti, sizeof ti);
    cl_mem offm = lt_buffer(f->ctx, off, sizeof off);
    const int INV = LAZYATTN_STATUS_INVALID_ARGUMENT;

    lazyattn_prefill_args p;
    lazyattn_prefill_args_init(&p);
    p.n_queries = N_Q, p.n_entries = N_ENT, p.q = q32, p.q_pos = qpm, p.table = tm;
    p.entry_pos = em, p.out = o32;
    lazyattn_prefill_batch_args b;
    lazyattn_prefill_batch_args_init(&b);
    b.n_seqs = 1, b.n_queries = N_Q, b.n_entries = N_ENT, b.max_queries = N_Q, b.q = q32;
    b.q_pos = qpm, b.q_indptr = qim, b.table_indptr = tim, b.table = tm, b.entry_pos = em, b.out = o32;
    lazyattn_decode_args d;
    lazyattn_decode_args_init(&d);
    d.n_seqs = 1, d.max_entries = N_ENT, d.q = q32, d.q_pos = qpm, d.seq_offsets = offm;
    d.table = tm, d.entry_pos = em, d.out = o32; /* q/out sized for N_Q rows: ample */

#define RUN3(want)                                                                           \
    do {                                                                                     \
        lt_assert_status(lazyattn_prefill(f->attn, f->pool, 0, &p, NULL, NULL), (want));     \
        lt_assert_status(lazyattn_prefill_batched(f->attn, f->pool, 0, &b, NULL, NULL), (want)); \
        lt_assert_status(lazyattn_decode(f->attn, f->pool, 0, &d, NULL, NULL), (want));      \
    } while (0)
#define SET3(field, value) (p.field = (value), b.field = (value), d.field = (value))
    RUN3(LAZYATTN_STATUS_OK);
    SET3(q_dtype, (lazyattn_dtype)3);
    RUN3(INV);
    assert_non_null(strstr(lazyattn_last_error(), "q_dtype"));
    SET3(q_dtype, (lazyattn_dtype)-1);
    RUN3(INV);
    SET3(q_dtype, LAZYATTN_DTYPE_F32);
    SET3(out_dtype, (lazyattn_dtype)7);
    RUN3(INV);
    assert_non_null(strstr(lazyattn_last_error(), "out_dtype"));
    SET3(out_dtype, LAZYATTN_DTYPE_F32);
    /* a buffer that holds 16-bit rows is too short for f32 (prefill, batched) */
    p.q = b.q = q16;
    lt_assert_status(lazyattn_prefill(f->attn, f->pool, 0, &p, NULL, NULL), INV);
    lt_assert_status(lazyattn_prefill_batched(f->attn, f->pool, 0, &b, NULL, NULL), INV);
    SET3(q_dtype, LAZYATTN_DTYPE_BF16);
    lt_assert_status(lazyattn_prefill(f->attn, f->pool, 0, &p, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_prefill_batched(f->attn, f->pool, 0, &b, NULL, NULL), LAZYATTN_STATUS_OK);
    p.q = b.q = q32;
    SET3(q_dtype, LAZYATTN_DTYPE_F32);
    p.out = b.out = o16;
    lt_assert_status(lazyattn_prefill(f->attn, f->pool, 0, &p, NULL, NULL), INV);
    assert_non_null(strstr(lazyattn_last_error(), "out"));
    lt_assert_status(lazyattn_prefill_batched(f->attn, f->pool, 0, &b, NULL, NULL), INV);
    p.out_dtype = b.out_dtype = LAZYATTN_DTYPE_F16;
    lt_assert_status(lazyattn_prefill(f->attn, f->pool, 0, &p, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_prefill_batched(f->attn, f->pool, 0, &b, NULL, NULL), LAZYATTN_STATUS_OK);
    p.out = b.out = o32;
    p.out_dtype = b.out_dtype = LAZYATTN_DTYPE_F32;
    /* decode: N_Q sequences need N_Q rows; the 16-bit buffers hold half of the f32 bytes */
    d.n_seqs = 1, d.q = q16, d.out = o16;
    lt_assert_status(lazyattn_decode(f->attn, f->pool, 0, &d, NULL, NULL), LAZYATTN_STATUS_OK);
    cl_mem q_tiny = lt_buffer(f->ctx, q16_host, (size_t)NQH * D * 2); /* one 16-bit row */
    d.q = q_tiny;
    lt_assert_status(lazyattn_decode(f->attn, f->pool, 0, &d, NULL, NULL), INV);
    d.q_dtype = LAZYATTN_DTYPE_F16;
    lt_assert_status(lazyattn_decode(f->attn, f->pool, 0, &d, NULL, NULL), LAZYATTN_STATUS_OK);
    d.q = q32, d.q_dtype = LAZYATTN_DTYPE_F32, d.out = o32;
    /* lse: short buffers refused (decode's one row fits in the short one) */
    SET3(lse, lse_short);
    lt_assert_status(lazyattn_prefill(f->attn, f->pool, 0, &p, NULL, NULL), INV);
    assert_non_null(strstr(lazyattn_last_error(), "lse"));
    lt_assert_status(lazyattn_prefill_batched(f->attn, f->pool, 0, &b, NULL, NULL), INV);
    lt_assert_status(lazyattn_decode(f->attn, f->pool, 0, &d, NULL, NULL), LAZYATTN_STATUS_OK);
    d.n_seqs = N_Q; /* N_Q sequences (offsets past the first are read on the device: give them) */
    const int32_t off_all[N_Q + 1] = {0, N_ENT, N_ENT, N_ENT, N_ENT, N_ENT, N_ENT};
    cl_mem offs = lt_buffer(f->ctx, off_all, sizeof off_all);
    d.seq_offsets = offs;
    lt_assert_status(lazyattn_decode(f->attn, f->pool, 0, &d, NULL, NULL), INV);
    SET3(lse, lse_ok);
    RUN3(LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_check(f->attn, NULL), LAZYATTN_STATUS_OK);
#undef RUN3
#undef SET3
    cl_mem all[] = {q32, q16, qpm, tm, em, o32, o16, lse_ok, lse_short, qim, tim, offm, q_tiny, offs};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) clReleaseMemObject(all[i]);
    fixture_free(f);
    free(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_dtypes_and_sizes),
        cmocka_unit_test(test_prefill_lse_and_merge),
        cmocka_unit_test(test_prefill_dtypes),
        cmocka_unit_test(test_batched_lse_merge_dtypes),
        cmocka_unit_test(test_decode_lse_splits_dtypes),
        cmocka_unit_test(test_decode_merge),
    };
    return cmocka_run_group_tests_name("io_dtypes", tests, lt_context_setup, lt_context_teardown);
}
