/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lazyattn_write_kv_rope_q: K/V written and queries rotated in one launch.
 * Each query head equals the float64 rotation (lazyattn_reference_rope) at
 * its q_pos, and bit for bit what lazyattn_rope_apply gives; the pool's
 * K and V buffers are byte for byte those lazyattn_write_kv writes (both
 * pools zeroed first), for every rope style (NONE leaves q as it is). A bad
 * q_pos is skipped and recorded (OUT_OF_RANGE from
 * lazyattn_attention_check); bad arguments are refused.
 *
 * N tokens at scattered slots of a 4-block pool, stored at positions
 * 1000 + 3t, queries at 50 + 7t.
 */
#include "test_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { D = 64, NQ = 4, NKV = 2, B = 16, N = 20, BLOCKS = 4 };
static const double tol = 1e-5;

typedef struct fixture {
    lazyattn_context *ctx;
    lazyattn_attention_config cfg;
    lazyattn_attention *attn;
    lazyattn_pool *pool[2]; /* [0]: the two calls, [1]: the fused one */
    float k[N * NKV * D], v[N * NKV * D], q[N * NQ * D];
    int32_t slots[N], stored[N], q_pos[N];
} fixture;

static void fixture_make(lazyattn_context *ctx, lazyattn_rope_style style, fixture *f) {
    memset(f, 0, sizeof *f);
    f->ctx = ctx;
    lazyattn_attention_config_default(&f->cfg);
    f->cfg.n_q_heads = NQ, f->cfg.n_kv_heads = NKV, f->cfg.head_dim = D, f->cfg.block_size = B;
    f->cfg.dtype = LAZYATTN_DTYPE_F32;
    f->cfg.rope.style = style;
    lt_assert_status(lazyattn_attention_create(ctx, &f->cfg, &f->attn), LAZYATTN_STATUS_OK);
    lazyattn_pool_config pc = {1, NKV, D, B, LAZYATTN_DTYPE_F32,
                               (uint64_t)BLOCKS * 2 * NKV * B * D * 4, LAZYATTN_KV_LAYOUT_ROWS};
    for (int p = 0; p < 2; p++) {
        lt_assert_status(lazyattn_pool_create(ctx, &pc, &f->pool[p]), LAZYATTN_STATUS_OK);
        cl_mem bufs[2] = {lazyattn_pool_k_buffer(f->pool[p], 0), lazyattn_pool_v_buffer(f->pool[p], 0)};
        for (int i = 0; i < 2; i++) {
            size_t bytes = 0;
            assert_int_equal(clGetMemObjectInfo(bufs[i], CL_MEM_SIZE, sizeof bytes, &bytes, NULL),
                             CL_SUCCESS);
            float zero = 0.0f;
            assert_int_equal(clEnqueueFillBuffer(lazyattn_context_queue(ctx), bufs[i], &zero,
                                                 sizeof zero, 0, bytes, 0, NULL, NULL),
                             CL_SUCCESS);
        }
    }
    lt_rng r = {lt_seed()};
    lt_fill(&r, f->k, N * NKV * D, 2.0f);
    lt_fill(&r, f->v, N * NKV * D, 1.0f);
    lt_fill(&r, f->q, N * NQ * D, 2.0f);
    for (int t = 0; t < N; t++) {
        f->slots[t] = ((t * 3) % BLOCKS) * B + t / BLOCKS; /* scattered over the blocks */
        f->stored[t] = 1000 + 3 * t;
        f->q_pos[t] = 50 + 7 * t;
    }
}

static void fixture_free(fixture *f) {
    lazyattn_attention_destroy(f->attn);
    for (int p = 0; p < 2; p++) lazyattn_pool_destroy(f->pool[p]);
}

/* The pool's K then V buffer of layer 0, as bytes. */
static void read_pool(fixture *f, int p, float *kv, size_t floats) {
    lt_read(f->ctx, lazyattn_pool_k_buffer(f->pool[p], 0), kv, floats / 2 * sizeof(float));
    lt_read(f->ctx, lazyattn_pool_v_buffer(f->pool[p], 0), kv + floats / 2,
            floats / 2 * sizeof(float));
}

static void check_style(lazyattn_context *ctx, lazyattn_rope_style style) {
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    fixture_make(ctx, style, f);
    cl_mem km = lt_buffer(ctx, f->k, sizeof f->k), vm = lt_buffer(ctx, f->v, sizeof f->v);
    cl_mem sm = lt_buffer(ctx, f->slots, sizeof f->slots);
    cl_mem pm = lt_buffer(ctx, f->stored, sizeof f->stored);
    cl_mem qpm = lt_buffer(ctx, f->q_pos, sizeof f->q_pos);
    cl_mem q2 = lt_buffer(ctx, f->q, sizeof f->q), q1 = lt_buffer(ctx, f->q, sizeof f->q);
    /* the two calls */
    lt_assert_status(lazyattn_write_kv(f->attn, f->pool[0], 0, N, km, vm, sm, pm, NULL, NULL),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_rope_apply(f->attn, N, NQ, q2, qpm, NULL, NULL), LAZYATTN_STATUS_OK);
    /* the fused one */
    lt_assert_status(lazyattn_write_kv_rope_q(f->attn, f->pool[1], 0, N, km, vm, sm, pm, q1, qpm,
                                              NULL, NULL),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_check(f->attn, NULL), LAZYATTN_STATUS_OK);

    static float two[N * NQ * D], one[N * NQ * D];
    lt_read(ctx, q2, two, sizeof two);
    lt_read(ctx, q1, one, sizeof one);
    assert_memory_equal(one, two, sizeof one);
    /* against the float64 rotation */
    for (int t = 0; t < N; t++)
        for (int h = 0; h < NQ; h++) {
            double ref[D];
            const float *x = f->q + (t * NQ + h) * D;
            lt_assert_status(lazyattn_reference_rope(&f->cfg, f->q_pos[t], x, ref),
                             LAZYATTN_STATUS_OK);
            double err = lazyattn_normalised_error(one + (t * NQ + h) * D, ref, D);
            if (err > tol) print_error("style %d token %d head %d: error %g\n", (int)style, t, h, err);
            assert_true(err <= tol);
        }
    enum { POOL = BLOCKS * NKV * B * D * 2 };
    static float kv2[POOL], kv1[POOL];
    read_pool(f, 0, kv2, POOL);
    read_pool(f, 1, kv1, POOL);
    assert_memory_equal(kv1, kv2, sizeof kv1);
    int nonzero = 0; /* the writes happened */
    for (int i = 0; i < POOL; i++) nonzero += kv1[i] != 0.0f;
    assert_true(nonzero > POOL / 4);

    cl_mem m[] = {km, vm, sm, pm, qpm, q2, q1};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++) clReleaseMemObject(m[i]);
    fixture_free(f);
    free(f);
}

static void test_matches_two_calls(void **state) {
    lazyattn_context *ctx = *state;
    check_style(ctx, LAZYATTN_ROPE_NEOX);
    check_style(ctx, LAZYATTN_ROPE_GPTJ);
    check_style(ctx, LAZYATTN_ROPE_NONE);
}

static void test_bad_q_pos_recorded(void **state) {
    lazyattn_context *ctx = *state;
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    fixture_make(ctx, LAZYATTN_ROPE_NEOX, f);
    f->q_pos[3] = LAZYATTN_MAX_POSITION + 1;
    cl_mem km = lt_buffer(ctx, f->k, sizeof f->k), vm = lt_buffer(ctx, f->v, sizeof f->v);
    cl_mem sm = lt_buffer(ctx, f->slots, sizeof f->slots);
    cl_mem pm = lt_buffer(ctx, f->stored, sizeof f->stored);
    cl_mem qpm = lt_buffer(ctx, f->q_pos, sizeof f->q_pos);
    cl_mem qm = lt_buffer(ctx, f->q, sizeof f->q);
    lt_assert_status(lazyattn_write_kv_rope_q(f->attn, f->pool[1], 0, N, km, vm, sm, pm, qm, qpm,
                                              NULL, NULL),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_check(f->attn, NULL), LAZYATTN_STATUS_OUT_OF_RANGE);
    static float q[N * NQ * D];
    lt_read(ctx, qm, q, sizeof q); /* the bad token's queries are left as they were */
    assert_memory_equal(q + 3 * NQ * D, f->q + 3 * NQ * D, sizeof(float) * NQ * D);

    /* refused before any launch */
    lt_assert_status(lazyattn_write_kv_rope_q(f->attn, f->pool[1], 0, N, km, vm, sm, pm, NULL, qpm,
                                              NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_write_kv_rope_q(f->attn, f->pool[1], 0, N, km, vm, sm, pm, qm, NULL,
                                              NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    cl_mem small = lt_buffer(ctx, f->q, sizeof(float) * (N * NQ * D - 1)); /* one float short */
    lt_assert_status(lazyattn_write_kv_rope_q(f->attn, f->pool[1], 0, N, km, vm, sm, pm, small,
                                              qpm, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "q"));
    lt_assert_status(lazyattn_write_kv_rope_q(NULL, f->pool[1], 0, N, km, vm, sm, pm, qm, qpm,
                                              NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_attention_check(f->attn, NULL), LAZYATTN_STATUS_OK);

    cl_mem m[] = {km, vm, sm, pm, qpm, qm, small};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++) clReleaseMemObject(m[i]);
    fixture_free(f);
    free(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_two_calls),
        cmocka_unit_test(test_bad_q_pos_recorded),
    };
    return cmocka_run_group_tests_name("write_kv_rope_q", tests, lt_context_setup,
                                       lt_context_teardown);
}
