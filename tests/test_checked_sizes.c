/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Size arithmetic that cannot wrap (lib/checked_size.h): the helpers at
 * their edges, then every launcher and allocator with counts at INT_MAX and
 * products that wrap size_t or int32. Each must refuse with the status
 * named here and a message naming the quantity, never return OK.
 */
#include "test_common.h"

#include "checked_size.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- the helpers ---- */

static void test_helpers_at_the_edges(void **state) {
    (void)state;
    size_t out = 0;
    assert_int_equal(lz_mul_wraps(SIZE_MAX, 1, &out), 0);
    assert_true(out == SIZE_MAX);
    assert_int_equal(lz_mul_wraps(SIZE_MAX / 2, 2, &out), 0);
    assert_int_equal(lz_mul_wraps(SIZE_MAX / 2 + 1, 2, &out), 1);
    assert_int_equal(lz_mul_wraps(SIZE_MAX, 0, &out), 0);
    assert_true(out == 0);
    assert_int_equal(lz_add_wraps(SIZE_MAX - 1, 1, &out), 0);
    assert_int_equal(lz_add_wraps(SIZE_MAX, 1, &out), 1);
    uint64_t u = 0;
    assert_int_equal(lz_mul_wraps_u64(UINT64_MAX / 3, 3, &u), 0);
    assert_int_equal(lz_mul_wraps_u64(UINT64_MAX / 3 + 1, 3, &u), 1);

    /* 2^30 x 2^26 x 64 x 4 = 2^64: wraps to exactly 0, the rope_apply attack */
    assert_int_equal(sizeof(size_t), 8); /* the cases below are written for 64-bit hosts */
    lt_assert_status(lz_size_product4(&out, "f", "x bytes", (size_t)1 << 30, (size_t)1 << 26, 64, 4),
                     LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_non_null(strstr(lazyattn_last_error(), "f: x bytes = 1073741824 x 67108864 x 64 x 4"));
    lt_assert_status(lz_size_product4(&out, "f", "x", (size_t)1 << 30, (size_t)1 << 26, 64, 2),
                     LAZYATTN_STATUS_OK);
    assert_true(out == (size_t)1 << 63);
    lt_assert_status(lz_size_product(&out, "f", "y", SIZE_MAX, 1, 2), LAZYATTN_STATUS_OUT_OF_RANGE);
    lt_assert_status(lz_size_product(&out, "f", "y", INT_MAX, INT_MAX, 4), LAZYATTN_STATUS_OK);
    assert_true(out == (size_t)INT_MAX * INT_MAX * 4);

    lt_assert_status(lz_fits_int(INT_MAX, "f", "n"), LAZYATTN_STATUS_OK);
    lt_assert_status(lz_fits_int((int64_t)INT_MAX + 1, "f", "n x B"), LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_non_null(strstr(lazyattn_last_error(), "n x B = 2147483648"));
    lt_assert_status(lz_fits_int(-1, "f", "n"), LAZYATTN_STATUS_OUT_OF_RANGE);
}

/* ---- launchers ---- */

typedef struct fixture {
    lazyattn_context *ctx;
    lazyattn_attention *attn;
    lazyattn_pool *pool;
    cl_mem small;  /* 4 KiB: holds 2 query rows */
    cl_mem table;  /* 2 valid entries */
    cl_mem epos;   /* their logical starts */
    cl_mem qpos;   /* 2 positions */
    cl_mem offsets; /* {0, 2} */
} fixture;

static void fixture_make(lazyattn_context *ctx, fixture *f) {
    memset(f, 0, sizeof *f);
    f->ctx = ctx;
    lazyattn_attention_config c;
    lazyattn_attention_config_default(&c);
    c.n_q_heads = 4, c.n_kv_heads = 2, c.head_dim = 64, c.dtype = LAZYATTN_DTYPE_F32;
    lt_assert_status(lazyattn_attention_create(ctx, &c, &f->attn), LAZYATTN_STATUS_OK);
    lazyattn_pool_config pc = {1, 2, 64, 16, LAZYATTN_DTYPE_F32, 4 * 2 * 2 * 16 * 64 * 4,
                               LAZYATTN_KV_LAYOUT_ROWS};
    lt_assert_status(lazyattn_pool_create(ctx, &pc, &f->pool), LAZYATTN_STATUS_OK);
    uint64_t t[2];
    lazyattn_entry_pack(0, 0, 16, &t[0]);
    lazyattn_entry_pack(1, 0, 16, &t[1]);
    int32_t ep[2] = {0, 16}, qp[2] = {30, 31}, off[2] = {0, 2};
    f->small = lt_buffer(ctx, NULL, 4096);
    f->table = lt_buffer(ctx, t, sizeof t);
    f->epos = lt_buffer(ctx, ep, sizeof ep);
    f->qpos = lt_buffer(ctx, qp, sizeof qp);
    f->offsets = lt_buffer(ctx, off, sizeof off);
    assert_true(f->small && f->table && f->epos && f->qpos && f->offsets);
}

static void fixture_free(fixture *f) {
    cl_mem m[] = {f->small, f->table, f->epos, f->qpos, f->offsets};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++) clReleaseMemObject(m[i]);
    lazyattn_pool_destroy(f->pool);
    lazyattn_attention_destroy(f->attn);
}

/* Nothing was launched: the device recorded nothing either. */
static void assert_nothing_recorded(fixture *f) {
    lt_assert_status(lazyattn_attention_check(f->attn, NULL), LAZYATTN_STATUS_OK);
}

static void test_rope_apply_sizes(void **state) {
    fixture f;
    fixture_make(*state, &f);
    /* the attack: n_tokens x n_heads x head_dim x 4 = 2^64 wraps to 0 */
    lt_assert_status(lazyattn_rope_apply(f.attn, 1 << 30, 1 << 26, f.small, f.small, NULL, NULL),
                     LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_non_null(strstr(lazyattn_last_error(), "x bytes"));
    lt_assert_status(lazyattn_rope_apply(f.attn, INT_MAX, INT_MAX, f.small, f.small, NULL, NULL),
                     LAZYATTN_STATUS_OUT_OF_RANGE);
    /* large but no wrap: the buffer is too small */
    lt_assert_status(lazyattn_rope_apply(f.attn, INT_MAX, 1, f.small, f.small, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_rope_apply(f.attn, 1, INT_MAX, f.small, f.small, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_rope_apply(f.attn, INT_MIN, 1, f.small, f.small, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_nothing_recorded(&f);
    fixture_free(&f);
}

static void test_write_kv_sizes(void **state) {
    fixture f;
    fixture_make(*state, &f);
    lt_assert_status(lazyattn_write_kv(f.attn, f.pool, 0, INT_MAX, f.small, f.small, f.small,
                                       f.small, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "k holds 4096 B"));
    lt_assert_status(lazyattn_write_kv(f.attn, f.pool, 0, INT_MIN, f.small, f.small, f.small,
                                       f.small, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_nothing_recorded(&f);
    fixture_free(&f);
}

static void test_materialise_sizes(void **state) {
    fixture f;
    fixture_make(*state, &f);
    /* n x block_size work-items must fit the kernel's int index */
    lt_assert_status(lazyattn_materialise(f.attn, f.pool, 0, INT_MAX, f.table, f.small, NULL, NULL),
                     LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_non_null(strstr(lazyattn_last_error(), "n x block_size"));
    lt_assert_status(lazyattn_materialise(f.attn, f.pool, 0, INT_MAX / 16 + 1, f.table, f.small,
                                          NULL, NULL),
                     LAZYATTN_STATUS_OUT_OF_RANGE);
    /* just inside the int limit: the buffers are too small */
    lt_assert_status(lazyattn_materialise(f.attn, f.pool, 0, INT_MAX / 16, f.table, f.small, NULL,
                                          NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_nothing_recorded(&f);
    fixture_free(&f);
}

static void test_prefill_sizes(void **state) {
    fixture f;
    fixture_make(*state, &f);
    lazyattn_prefill_args ok = {2, 2, f.small, f.qpos, f.table, f.epos, f.small,
                                NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    lazyattn_prefill_args a = ok;
    a.n_queries = INT_MAX;
    lt_assert_status(lazyattn_prefill(f.attn, f.pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    a = ok, a.n_entries = INT_MAX;
    lt_assert_status(lazyattn_prefill(f.attn, f.pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "table"));
    a = ok, a.n_entries = INT_MIN;
    lt_assert_status(lazyattn_prefill(f.attn, f.pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    a = ok, a.n_queries = INT_MIN;
    lt_assert_status(lazyattn_prefill(f.attn, f.pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_nothing_recorded(&f);
    fixture_free(&f);
}

static void test_decode_sizes(void **state) {
    fixture f;
    fixture_make(*state, &f);
    cl_mem q = lt_buffer(f.ctx, NULL, 4 * 64 * sizeof(float));
    lazyattn_decode_args ok = {1, 2, 0, q, f.qpos, f.offsets, f.table, f.epos, q,
                               NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    lazyattn_decode_args d = ok;
    /* the attack: max_entries near INT_MAX once returned OK with zeros */
    d.max_entries = INT_MAX;
    lt_assert_status(lazyattn_decode(f.attn, f.pool, 0, &d, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "max_entries 2147483647 exceeds the 2 entries"));
    d = ok, d.max_entries = INT_MAX - 1, d.n_splits = 3;
    lt_assert_status(lazyattn_decode(f.attn, f.pool, 0, &d, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    d = ok, d.max_entries = 3; /* one more than the table holds */
    lt_assert_status(lazyattn_decode(f.attn, f.pool, 0, &d, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* n_seqs + 1 offsets at INT_MAX: no signed overflow, a clear refusal */
    d = ok, d.n_seqs = INT_MAX;
    lt_assert_status(lazyattn_decode(f.attn, f.pool, 0, &d, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    d = ok, d.n_seqs = INT_MIN;
    lt_assert_status(lazyattn_decode(f.attn, f.pool, 0, &d, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    d = ok, d.max_entries = INT_MIN;
    lt_assert_status(lazyattn_decode(f.attn, f.pool, 0, &d, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_nothing_recorded(&f);
    clReleaseMemObject(q);
    fixture_free(&f);
}

/* ---- allocators ---- */

static void test_pool_sizes(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_pool *pool = NULL;
    const lazyattn_pool_config base = {1, 1, 16, 1, LAZYATTN_DTYPE_F16, 1 << 20,
                                       LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool_config c = base;
    c.n_layers = INT_MAX;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "n_layers 2147483647"));
    c = base, c.n_kv_heads = INT_MAX;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    c = base, c.head_dim = INT_MAX;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    c = base, c.block_size = INT_MAX;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* the largest geometry: 2 x 4096 layers x 4096 heads x 256 x 256 x 4 B
     * per block = 2^43 B, no wrap; a budget of 2^64 - 1 holds 2^21 of them */
    c = (lazyattn_pool_config){LAZYATTN_MAX_LAYERS, LAZYATTN_MAX_HEADS, LAZYATTN_MAX_HEAD_DIM,
                               LAZYATTN_MAX_BLOCK_SIZE, LAZYATTN_DTYPE_F32, UINT64_MAX,
                               LAZYATTN_KV_LAYOUT_ROWS};
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_OK);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(pool, &info);
    assert_true(info.block_bytes == (uint64_t)1 << 43);
    assert_int_equal(info.n_blocks, (int64_t)(UINT64_MAX >> 43));
    int32_t ids[1];
    lt_assert_status(lazyattn_pool_alloc(pool, INT_MAX, ids), LAZYATTN_STATUS_BUDGET_EXCEEDED);
    lt_assert_status(lazyattn_pool_alloc(pool, INT_MIN, ids), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_pool_get_info(pool, &info);
    assert_int_equal(info.n_used, 0);
    lazyattn_pool_destroy(pool);
    pool = NULL;
    /* on a device that pool cannot fit */
    lt_assert_status(lazyattn_pool_create(ctx, &c, &pool), LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY);
    assert_null(pool);
}

static void test_attention_config_sizes(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_attention_config c;
    lazyattn_attention_config_default(&c);
    lazyattn_attention *attn = NULL;
    lazyattn_attention_config b = c;
    b.n_q_heads = INT_MAX, b.n_kv_heads = 1;
    lt_assert_status(lazyattn_attention_create(ctx, &b, &attn), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "n_q_heads 2147483647"));
    b = c, b.n_q_heads = 1 << 30, b.n_kv_heads = 1 << 30; /* once: 4 GB of ALiBi slopes */
    lt_assert_status(lazyattn_attention_create(ctx, &b, &attn), LAZYATTN_STATUS_INVALID_ARGUMENT);
    b = c, b.head_dim = INT_MAX;
    lt_assert_status(lazyattn_attention_create(ctx, &b, &attn), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(attn);
}

/* ALiBi slopes at a head count of INT_MAX: no int overflow in the power
 * of two or the interpolation (UBSan in CI), values from the formula. */
static void test_alibi_slope_at_int_max(void **state) {
    (void)state;
    const double n2 = 1073741824.0; /* 2^30, the largest power of two <= INT_MAX */
    double s = 0;
    lt_assert_status(lazyattn_alibi_slope(0, INT_MAX, &s), LAZYATTN_STATUS_OK);
    assert_true(fabs(s - pow(2.0, -8.0 / n2)) < 1e-15);
    lt_assert_status(lazyattn_alibi_slope(INT_MAX - 1, INT_MAX, &s), LAZYATTN_STATUS_OK);
    double h = (double)(INT_MAX - 1) - n2; /* interpolated: every other slope of 2^31 heads */
    assert_true(fabs(s - pow(2.0, -8.0 * (2.0 * h + 1.0) / (2.0 * n2))) < 1e-15);
    assert_true(s > 0.0 && s < 1.0);
    lt_assert_status(lazyattn_alibi_slope(INT_MAX, INT_MAX, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_helpers_at_the_edges),
        cmocka_unit_test(test_rope_apply_sizes),
        cmocka_unit_test(test_write_kv_sizes),
        cmocka_unit_test(test_materialise_sizes),
        cmocka_unit_test(test_prefill_sizes),
        cmocka_unit_test(test_decode_sizes),
        cmocka_unit_test(test_pool_sizes),
        cmocka_unit_test(test_attention_config_sizes),
        cmocka_unit_test(test_alibi_slope_at_int_max),
    };
    return cmocka_run_group_tests_name("checked_sizes", tests, lt_context_setup, lt_context_teardown);
}
