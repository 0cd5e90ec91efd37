/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every documented geometry at the edges of its range (issue 10, class 6):
 * head dims 16..256 (multiples of 8, powers of two or not), block sizes
 * 1..256, GQA ratios up to 16 (MQA) and 32 q / 2 kv, each storage type;
 * lazy prefill, decode (split) and materialise against the float64
 * reference. Each case is either correct within the storage type's
 * tolerance or refused at lazyattn_attention_create with
 * LAZYATTN_STATUS_UNSUPPORTED and a message naming the device limit — never
 * a wrong answer. Small sizes keep it quick on PoCL.
 */
#include "test_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct geometry_case {
    int head_dim, block_size, n_q_heads, n_kv_heads;
    lazyattn_dtype dtype;
    lazyattn_rope_style style;
} geometry_case;

static const geometry_case cases[] = {
    {16, 1, 4, 1, LAZYATTN_DTYPE_F32, LAZYATTN_ROPE_NEOX},   /* smallest head dim, block 1 */
    {64, 1, 6, 2, LAZYATTN_DTYPE_F16, LAZYATTN_ROPE_NEOX},   /* block 1, GQA 3 */
    {128, 1, 8, 8, LAZYATTN_DTYPE_BF16, LAZYATTN_ROPE_GPTJ}, /* block 1, MHA */
    {24, 2, 16, 1, LAZYATTN_DTYPE_F32, LAZYATTN_ROPE_GPTJ},  /* MQA 16:1, head dim 24 */
    {96, 3, 32, 2, LAZYATTN_DTYPE_F16, LAZYATTN_ROPE_NEOX},  /* GQA 16, non-power-of-two d */
    {200, 5, 4, 2, LAZYATTN_DTYPE_F32, LAZYATTN_ROPE_NEOX},  /* d 200 */
    {256, 16, 8, 2, LAZYATTN_DTYPE_F16, LAZYATTN_ROPE_NEOX}, /* largest head dim */
    {256, 2, 2, 1, LAZYATTN_DTYPE_BF16, LAZYATTN_ROPE_NONE}, /* d 256, block 2, no RoPE */
    {32, 255, 4, 1, LAZYATTN_DTYPE_F32, LAZYATTN_ROPE_NEOX}, /* block 255 */
    {16, 256, 2, 2, LAZYATTN_DTYPE_F16, LAZYATTN_ROPE_GPTJ}, /* block 256 */
    {128, 256, 8, 1, LAZYATTN_DTYPE_F32, LAZYATTN_ROPE_NEOX}, /* block 256 x d 128: refused where local memory is small */
    {64, 32, 24, 1, LAZYATTN_DTYPE_F32, LAZYATTN_ROPE_NEOX}, /* GQA 24 */
    {256, 4, 64, 1, LAZYATTN_DTYPE_F16, LAZYATTN_ROPE_NEOX}, /* GQA 64 x d 256: refused in 48 KiB */
};

static double tolerance(lazyattn_dtype t) {
    return t == LAZYATTN_DTYPE_F32 ? 2e-5 : t == LAZYATTN_DTYPE_F16 ? 2e-3 : 1.6e-2;
}

static void free_mems(cl_mem *m, int n) {
    for (int i = 0; i < n; i++)
        if (m[i]) clReleaseMemObject(m[i]);
}

/* Keys: one document of doc_len tokens stored at position `stored0` and
 * placed at logical `base` (every block carries delta base - stored0), then
 * n_q question tokens at their own positions. The question is prefilled
 * (causal), its last token decoded with 2 splits, and the document's blocks
 * materialised and prefilled again; all compared with the reference. */
static void run_case(lazyattn_context *ctx, const geometry_case *g, const lazyattn_kernel_tuning *tuning,
                     lt_rng *r) {
    lazyattn_attention_config c;
    lazyattn_attention_config_default(&c);
    c.head_dim = g->head_dim, c.block_size = g->block_size;
    c.n_q_heads = g->n_q_heads, c.n_kv_heads = g->n_kv_heads;
    c.dtype = g->dtype;
    c.rope.style = g->style;
    c.rope.rotary_dim = 0;
    lazyattn_attention *attn = NULL;
    int st = lazyattn_attention_create_tuned(ctx, &c, tuning, &attn);
    if (st == LAZYATTN_STATUS_UNSUPPORTED) {
        const char *msg = lazyattn_last_error();
        printf("# refused d=%d B=%d %d/%d dtype=%d: %s\n", g->head_dim, g->block_size,
               g->n_q_heads, g->n_kv_heads, (int)g->dtype, msg);
        assert_true(strstr(msg, "local memory") || strstr(msg, "work-group") ||
                    strstr(msg, "implementation"));
        return;
    }
    lt_assert_status(st, LAZYATTN_STATUS_OK);

    const int B = c.block_size, d = c.head_dim, nkv = c.n_kv_heads, nqh = c.n_q_heads;
    const int doc_len = B == 1 ? 7 : B + B / 2 + 1 > 40 ? 40 : B + B / 2 + 1;
    const int n_q = B == 1 ? 5 : 3;
    const int base = lt_int(r, 1000, 90000), stored0 = lt_int(r, 0, 5000);
    const int doc_blocks = (doc_len + B - 1) / B, q_blocks = (n_q + B - 1) / B;
    const int n_entries = doc_blocks + q_blocks, n_keys = doc_len + n_q;

    lazyattn_pool_config pc = {1, nkv, d, B, c.dtype, 0, LAZYATTN_KV_LAYOUT_ROWS};
    pc.budget_bytes = (uint64_t)(2 * n_entries + 2) * 2 * nkv * B * d * lazyattn_dtype_size(c.dtype);
    lazyattn_pool *pool = NULL;
    lt_assert_status(lazyattn_pool_create(ctx, &pc, &pool), LAZYATTN_STATUS_OK);
    int32_t ids[64], copies[64];
    assert_true(n_entries <= 64);
    lt_assert_status(lazyattn_pool_alloc(pool, n_entries, ids), LAZYATTN_STATUS_OK);

    size_t row = (size_t)nkv * d, qrow = (size_t)nqh * d;
    float *k = malloc(sizeof(float) * n_keys * row), *v = malloc(sizeof(float) * n_keys * row);
    float *q = malloc(sizeof(float) * n_q * qrow), *out = malloc(sizeof(float) * n_q * qrow);
    double *ref = malloc(sizeof(double) * n_q * qrow);
    int32_t *kpos = malloc(sizeof(int32_t) * n_keys), *slot = malloc(sizeof(int32_t) * n_keys);
    int32_t *stored = malloc(sizeof(int32_t) * n_keys);
    uint64_t table[64], mtable[64], src[64];
    int32_t epos[64];
    assert_true(k && v && q && out && ref && kpos && slot && stored);
    lt_fill(r, k, (size_t)n_keys * row, 2.0f);
    lt_fill(r, v, (size_t)n_keys * row, 1.0f);
    lt_fill(r, q, (size_t)n_q * qrow, 2.0f);
    int key = 0, e = 0, n_copy = 0;
    for (int seg = 0; seg < 2; seg++) {
        int len = seg == 0 ? doc_len : n_q;
        for (int off = 0; off < len; off += B, e++) {
            int l = len - off < B ? len - off : B, logical = base + key;
            int st0 = seg == 0 ? stored0 + off : logical;
            lt_assert_status(lazyattn_entry_pack(ids[e], logical - st0, l, &table[e]), LAZYATTN_STATUS_OK);
            mtable[e] = table[e];
            epos[e] = logical;
            if (seg == 0) {
                lt_assert_status(lazyattn_pool_alloc(pool, 1, &copies[n_copy]), LAZYATTN_STATUS_OK);
                src[n_copy] = table[e];
                lt_assert_status(lazyattn_entry_pack(copies[n_copy], 0, l, &mtable[e]), LAZYATTN_STATUS_OK);
                n_copy++;
            }
            for (int j = 0; j < l; j++, key++)
                kpos[key] = logical + j, slot[key] = ids[e] * B + j, stored[key] = st0 + j;
        }
    }
    const int32_t *qpos = kpos + doc_len;

    cl_mem m[16] = {0};
    int nm = 0;
    cl_mem km = m[nm++] = lt_buffer(ctx, k, sizeof(float) * n_keys * row);
    cl_mem vm = m[nm++] = lt_buffer(ctx, v, sizeof(float) * n_keys * row);
    cl_mem sm = m[nm++] = lt_buffer(ctx, slot, sizeof(int32_t) * n_keys);
    cl_mem spm = m[nm++] = lt_buffer(ctx, stored, sizeof(int32_t) * n_keys);
    cl_mem qm = m[nm++] = lt_buffer(ctx, q, sizeof(float) * n_q * qrow);
    cl_mem qpm = m[nm++] = lt_buffer(ctx, qpos, sizeof(int32_t) * n_q);
    cl_mem tm = m[nm++] = lt_buffer(ctx, table, sizeof(uint64_t) * n_entries);
    cl_mem mtm = m[nm++] = lt_buffer(ctx, mtable, sizeof(uint64_t) * n_entries);
    cl_mem em = m[nm++] = lt_buffer(ctx, epos, sizeof(int32_t) * n_entries);
    cl_mem srcm = m[nm++] = lt_buffer(ctx, src, sizeof(uint64_t) * n_copy);
    cl_mem dstm = m[nm++] = lt_buffer(ctx, copies, sizeof(int32_t) * n_copy);
    cl_mem om = m[nm++] = lt_buffer(ctx, NULL, sizeof(float) * n_q * qrow);
    int32_t offs[2] = {0, n_entries};
    cl_mem offm = m[nm++] = lt_buffer(ctx, offs, sizeof offs);
    cl_mem q1m = m[nm++] = lt_buffer(ctx, NULL, sizeof(float) * qrow);
    cl_mem qp1m = m[nm++] = lt_buffer(ctx, qpos + n_q - 1, sizeof(int32_t));

    lt_assert_status(lazyattn_write_kv(attn, pool, 0, n_keys, km, vm, sm, spm, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_rope_apply(attn, n_q, nqh, qm, qpm, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_materialise(attn, pool, 0, n_copy, srcm, dstm, NULL, NULL), LAZYATTN_STATUS_OK);

    lazyattn_reference_args ra = {n_q, n_keys, q, qpos, k, v, kpos, ref, NULL};
    lt_assert_status(lazyattn_reference_attention(&c, &ra), LAZYATTN_STATUS_OK);
    const double tol = tolerance(c.dtype);
    const size_t n_out = (size_t)n_q * qrow;
    double err[3];

    /* lazy prefill, then over the materialised copies */
    for (int pass = 0; pass < 2; pass++) {
        lazyattn_prefill_args pa = {n_q, n_entries, qm, qpm, pass ? mtm : tm, em, om,
                                    NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
        lt_assert_status(lazyattn_prefill(attn, pool, 0, &pa, NULL, NULL), LAZYATTN_STATUS_OK);
        lt_read(ctx, om, out, sizeof(float) * n_out);
        lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
        err[pass] = lazyattn_normalised_error(out, ref, n_out);
        }
    /* decode of the last question token (already rotated in qm), 2 splits */
    {
        cl_int e2 = clEnqueueCopyBuffer(lazyattn_context_queue(ctx), qm, q1m,
                                        sizeof(float) * (n_q - 1) * qrow, 0, sizeof(float) * qrow,
                                        0, NULL, NULL);
        assert_int_equal(e2, CL_SUCCESS);
        lazyattn_decode_args da = {1, n_entries, n_entries > 1 ? 2 : 1, q1m, qp1m, offm, tm, em, om,
                                   NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
        lt_assert_status(lazyattn_decode(attn, pool, 0, &da, NULL, NULL), LAZYATTN_STATUS_OK);
        lt_read(ctx, om, out, sizeof(float) * qrow);
        lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
        err[2] = lazyattn_normalised_error(out, ref + (n_q - 1) * qrow, qrow);
    }
    printf("# d=%d B=%d %d/%d dtype=%d rope=%d%s: prefill %.2e materialised %.2e decode %.2e (tol %.1e)\n",
           d, B, nqh, nkv, (int)c.dtype, (int)c.rope.style, tuning ? " odd tiles" : "", err[0], err[1], err[2], tol);
    for (int i = 0; i < 3; i++) {
        if (!(err[i] <= tol))
            print_error("d=%d B=%d %d/%d dtype=%d: %s error %.3g > %.3g\n", d, B, nqh, nkv,
                        (int)c.dtype, i == 0 ? "prefill" : i == 1 ? "materialised prefill" : "decode",
                        err[i], tol);
        assert_true(err[i] <= tol);
    }
    free_mems(m, nm);
    free(k); free(v); free(q); free(out); free(ref); free(kpos); free(slot); free(stored);
    lazyattn_attention_destroy(attn);
    lazyattn_pool_destroy(pool);
}

static void test_geometry_edges(void **state) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed() ^ 0x6e0u};
    const char *only = getenv("LAZYATTN_GEOMETRY_CASE"); /* one case, for debugging */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (!only || atoi(only) == (int)i) run_case(ctx, &cases[i], NULL, &r);
}

/* Tiles that divide nothing evenly (partial register tiles, work-groups
 * that are no multiple of anything): the guards of cl/flash.h. */
static void test_odd_tiles(void **state) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed() ^ 0x0ddu};
    const size_t n = sizeof cases / sizeof *cases;
    for (size_t ii = 0; ii < 3 * n + 6; ii += 3) { /* every case once (n is no multiple of 3), two twice */
        const size_t i = ii % n;
        const int group = cases[i].n_q_heads / cases[i].n_kv_heads;
        if (group > 16) continue; /* 3 x group rows of 37 work-items: too many outputs each (refused) */
        lazyattn_kernel_tuning t;
        memset(&t, 0, sizeof t);
        /* in turn: K and V in two buffers with the next tile prefetched; one
         * buffer with V loaded with K; two buffers without prefetch and 4-row
         * register tiles over 3 x group rows (padded probability rows); one
         * buffer with the next K loaded during the output */
        const lazyattn_tile_params pre[4] = {{3 * group, 6, 37, 3, 3, 3, 4, 1, 1},
                                             {3 * group, 6, 37, 3, 3, 3, 4, 2, 1},
                                             {3 * group, 6, 37, 4, 3, 4, 4, 1, 2},
                                             {3 * group, 6, 37, 4, 3, 4, 4, 2, 3}};
        t.prefill = pre[i / 3 % 4];
        /* the decode's V ring (kv_together 1) on every other case, its L2
         * prefetch variants (cl/decode.cl LZ_DPF), step 1's K pipelines
         * (score_rows 2..13, LZ_FRM; 1 is every other test's), the output
         * sums in registers or local memory and the probabilities head- or
         * key-major (out_rows 1..4, LZ_FOM) in turn; chunks of 70 slots or one
         * block: several keys per work-item in step 1 where blocks are small */
        static const int pf[] = {2, 1, 3, 4, 5};
        static const int kpipe[] = {2, 3, 4, 5, 1, 6, 7, 8, 1, 9, 10, 11, 12, 13, 6}; /* 1: group > 16 */
        const int k = (int)(ii / 3);
        t.decode = (lazyattn_tile_params){0, 70, 33, kpipe[k], 5, 1 + k % 4, 4, k % 2 ? 1 : 2, pf[k % 5]};
        t.decode_groups_per_cu = 3;
        run_case(ctx, &cases[i], &t, &r);
    }
}

/* The small-work-group decode (cl/decode_warp.cl, the decode tile's
 * kv_together 3) on every case: batches of 3, 8, 16 and 5 keys (a divisor
 * of the block is taken), the K ring on and off (score_keys 2, 1), its
 * split-parallel reduction, decode.cl's and the choice by split count in
 * turn (prefetch 1, 2, 3), and in turn
 * the chosen work-items and dims, 8 dims with two key groups, 4 dims with
 * one key group. */
static void test_warp_tiles(void **state) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed() ^ 0x3a9u};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int d = cases[i].head_dim, v = (int)(i % 3);
        static const int keys[] = {3, 8, 16, 5};
        lazyattn_kernel_tuning t;
        memset(&t, 0, sizeof t);
        const int od = v == 0 ? 0 : v == 1 ? 8 : 4;
        const int wg = v == 0 ? 0 : v == 1 ? 2 * (d / 8) : d / 4;
        t.decode = (lazyattn_tile_params){0, keys[i % 4], wg, 0, 1 + (int)(i / 2 % 2), 0, od, 3, 1 + (int)(i % 3)};
        t.decode_groups_per_cu = 3;
        run_case(ctx, &cases[i], &t, &r);
    }
}

/* lazyattn_attention_create_tuned refuses bad fields and reports the
 * resolved geometry. */
static void test_tuning_api(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_attention_config c;
    lazyattn_attention_config_default(&c); /* 32/8, d 128 */
    lazyattn_attention *a = (lazyattn_attention *)&c;
    lazyattn_kernel_tuning t;
    memset(&t, 0, sizeof t);
    t.prefill.keys = -1;
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(a);
    memset(&t, 0, sizeof t);
    t.prefill.rows = 6; /* not a multiple of the group 4 */
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    memset(&t, 0, sizeof t);
    t.decode.keys = 10, t.decode.score_keys = 4, t.decode.kv_together = 2; /* 4 does not divide 10 (cl/decode.cl) */
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    memset(&t, 0, sizeof t);
    t.prefill.out_dims = 12; /* does not divide 128 */
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    memset(&t, 0, sizeof t);
    t.decode.kv_together = 4; /* decode: 1, 2, 3 (cl/decode_warp.cl) */
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    memset(&t, 0, sizeof t);
    t.prefill.prefetch = 4; /* 0 .. 3 */
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    memset(&t, 0, sizeof t);
    t.decode.prefetch = 6; /* the decode's L2 prefetch values are 1..5 */
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    memset(&t, 0, sizeof t);
    t.prefill.prefetch = 3, t.prefill.kv_together = 1; /* the next K during the output: one buffer */
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    memset(&t, 0, sizeof t);
    t.decode.kv_together = 3, t.decode.work_group = 48, t.decode.out_dims = 4; /* no multiple of 128 / 4 dims */
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    memset(&t, 0, sizeof t);
    t.decode.kv_together = 3, t.decode.prefetch = 4; /* its reductions: 1, 2, 3 */
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    memset(&t, 0, sizeof t);
    t.decode.score_rows = 14; /* step 1's K pipelines: 1..13 */
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    memset(&t, 0, sizeof t);
    t.decode.out_rows = 5; /* 1..4 */
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    memset(&t, 0, sizeof t);
    t.decode_groups_per_cu = -2;
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* tiles larger than any device's local memory: UNSUPPORTED, naming it */
    memset(&t, 0, sizeof t);
    t.prefill.rows = 1024, t.prefill.keys = 1024;
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_UNSUPPORTED);
    assert_non_null(strstr(lazyattn_last_error(), "local memory"));
    lt_assert_status(lazyattn_attention_get_tuning(NULL, &t), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_attention_create_tuned(NULL, &c, NULL, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(a);
    lt_assert_status(lazyattn_attention_create_tuned(ctx, NULL, NULL, &a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);

    /* the chosen geometry is resolved and kept */
    memset(&t, 0, sizeof t);
    t.prefill.keys = 16;
    lt_assert_status(lazyattn_attention_create_tuned(ctx, &c, &t, &a), LAZYATTN_STATUS_OK);
    lazyattn_kernel_tuning got;
    lt_assert_status(lazyattn_attention_get_tuning(a, &got), LAZYATTN_STATUS_OK);
    assert_int_equal(got.prefill.keys, 16);
    assert_int_equal(got.decode.rows, 4);
    assert_true(got.prefill.rows % 4 == 0 && got.prefill.work_group >= 1 && got.decode.work_group >= 1);
    assert_true(got.decode_groups_per_cu >= 1);
    lazyattn_attention_destroy(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_geometry_edges),
        cmocka_unit_test(test_odd_tiles),
        cmocka_unit_test(test_warp_tiles),
        cmocka_unit_test(test_tuning_api),
    };
    return cmocka_run_group_tests(tests, lt_context_setup, lt_context_teardown);
}
