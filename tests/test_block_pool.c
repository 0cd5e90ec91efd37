/* SPDX-License-Identifier: Apache-2.0 */
/* The block pool: budget arithmetic, all-or-nothing alloc/free, accounting,
 * device buffers, bad input. */
#include "test_common.h"

#include <stdlib.h>
#include <string.h>

static const lazyattn_pool_config llama8b = {32, 8, 128, 16, LAZYATTN_DTYPE_F16, 1ull << 30,
                                             LAZYATTN_KV_LAYOUT_ROWS};

static void test_budget_arithmetic(void **state) {
    (void)state;
    lazyattn_pool *pool;
    lt_assert_status(lazyattn_pool_create(NULL, &llama8b, &pool), LAZYATTN_STATUS_OK);
    lazyattn_pool_info info;
    lt_assert_status(lazyattn_pool_get_info(pool, &info), LAZYATTN_STATUS_OK);
    /* 128 KiB per token x 16 tokens; 1 GiB holds 8192 tokens = 512 blocks */
    assert_int_equal(info.block_bytes, 2u * 1024 * 1024);
    assert_int_equal(info.n_blocks, 512);
    assert_int_equal(info.n_used, 0);
    lazyattn_pool_config back;
    lt_assert_status(lazyattn_pool_get_config(pool, &back), LAZYATTN_STATUS_OK);
    assert_int_equal(back.budget_bytes, llama8b.budget_bytes);
    assert_null(lazyattn_pool_k_buffer(pool, 0)); /* bookkeeping only */
    lazyattn_pool_destroy(pool);
    lazyattn_pool_destroy(NULL);
}

static void test_alloc_free_accounting(void **state) {
    (void)state;
    lazyattn_pool_config c = llama8b;
    c.budget_bytes = 10 * 2u * 1024 * 1024 + 5; /* 10 blocks and change */
    lazyattn_pool *pool;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_OK);
    int32_t a[10], b[4];
    lt_assert_status(lazyattn_pool_alloc(pool, 7, a), LAZYATTN_STATUS_OK);
    for (int i = 0; i < 7; i++) {
        assert_true(lazyattn_pool_is_allocated(pool, a[i]));
        for (int j = 0; j < i; j++) assert_int_not_equal(a[i], a[j]);
    }
    /* all or nothing: 4 more do not fit, none is taken */
    lt_assert_status(lazyattn_pool_alloc(pool, 4, b), LAZYATTN_STATUS_BUDGET_EXCEEDED);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(pool, &info);
    assert_int_equal(info.n_used, 7);
    /* a double free inside one call, or of a free block, frees nothing */
    int32_t twice[2] = {a[0], a[0]};
    lt_assert_status(lazyattn_pool_free(pool, 2, twice), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_pool_get_info(pool, &info);
    assert_int_equal(info.n_used, 7);
    assert_true(lazyattn_pool_is_allocated(pool, a[0]));
    lt_assert_status(lazyattn_pool_free(pool, 3, a), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_pool_free(pool, 1, a), LAZYATTN_STATUS_INVALID_ARGUMENT);
    int32_t out_of_range[2] = {a[3], 10};
    lt_assert_status(lazyattn_pool_free(pool, 2, out_of_range), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_true(lazyattn_pool_is_allocated(pool, a[3]));
    lazyattn_pool_get_info(pool, &info);
    assert_int_equal(info.n_used, 4);
    assert_int_equal(info.peak_used, 7);
    assert_int_equal(info.n_allocs, 7);
    assert_int_equal(info.n_frees, 3);
    assert_int_equal(info.bytes_in_use, 4 * info.block_bytes);
    lt_assert_status(lazyattn_pool_alloc(pool, 6, a), LAZYATTN_STATUS_OK);
    lazyattn_pool_get_info(pool, &info);
    assert_int_equal(info.n_used, 10);
    assert_false(lazyattn_pool_is_allocated(pool, -1));
    assert_false(lazyattn_pool_is_allocated(pool, 10));
    assert_false(lazyattn_pool_is_allocated(NULL, 0));
    lazyattn_pool_destroy(pool);
}

/* Blocks freed together come back in the order they were freed in, so a
 * document's blocks stay runs of consecutive ids through eviction and
 * reuse (its copies are one transfer a run). */
static void test_freed_blocks_come_back_in_order(void **state) {
    (void)state;
    lazyattn_pool_config c = llama8b;
    c.budget_bytes = 16 * 2u * 1024 * 1024;
    lazyattn_pool *pool;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_OK);
    int32_t doc[8], other[4], again[8];
    lt_assert_status(lazyattn_pool_alloc(pool, 8, doc), LAZYATTN_STATUS_OK);
    for (int i = 1; i < 8; i++) assert_int_equal(doc[i], doc[0] + i);
    lt_assert_status(lazyattn_pool_alloc(pool, 4, other), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_pool_free(pool, 8, doc), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_pool_alloc(pool, 8, again), LAZYATTN_STATUS_OK);
    for (int i = 0; i < 8; i++) assert_int_equal(again[i], doc[i]);
    /* two freed runs, the later on top: its blocks first, each run in order */
    lt_assert_status(lazyattn_pool_free(pool, 4, again), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_pool_free(pool, 4, other), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_pool_alloc(pool, 8, doc), LAZYATTN_STATUS_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(doc[i], other[i]);
        assert_int_equal(doc[4 + i], again[i]);
    }
    lazyattn_pool_destroy(pool);
}

static void test_bad_input(void **state) {
    (void)state;
    lazyattn_pool *pool = (lazyattn_pool *)0x1;
    lt_assert_status(lazyattn_pool_create(NULL, NULL, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(pool);
    lt_assert_status(lazyattn_pool_create(NULL, &llama8b, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_pool_config c = llama8b;
    c.n_layers = 0;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    c = llama8b, c.n_kv_heads = -2;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    c = llama8b, c.head_dim = 0;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    c = llama8b, c.block_size = LAZYATTN_MAX_BLOCK_SIZE + 1;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    c = llama8b, c.dtype = (lazyattn_dtype)9;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    c = llama8b, c.budget_bytes = 2u * 1024 * 1024 - 1; /* less than one block */
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_BUDGET_EXCEEDED);
    assert_null(pool);

    lt_assert_status(lazyattn_pool_create(NULL, &llama8b, &pool), LAZYATTN_STATUS_OK);
    int32_t ids[2];
    lt_assert_status(lazyattn_pool_alloc(NULL, 1, ids), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_pool_alloc(pool, -1, ids), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_pool_alloc(pool, 1, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_pool_alloc(pool, 0, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_pool_free(NULL, 1, ids), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_pool_free(pool, -1, ids), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_pool_free(pool, 1, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_pool_info info;
    lt_assert_status(lazyattn_pool_get_info(pool, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_pool_get_info(NULL, &info), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_pool_get_config(pool, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(lazyattn_pool_v_buffer(NULL, 0));
    lazyattn_pool_destroy(pool);
}

/* A device pool has one K and one V buffer per layer of the right size. */
static void test_device_buffers(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_pool_config c = {3, 2, 64, 16, LAZYATTN_DTYPE_BF16, 0, LAZYATTN_KV_LAYOUT_ROWS};
    uint64_t block = 2ull * 3 * 2 * 16 * 64 * 2;
    c.budget_bytes = 5 * block;
    lazyattn_pool *pool;
    lt_assert_status(lazyattn_pool_create(ctx, &c, &pool), LAZYATTN_STATUS_OK);
    for (int l = 0; l < 3; l++) {
        size_t size = 0;
        assert_non_null(lazyattn_pool_k_buffer(pool, l));
        clGetMemObjectInfo(lazyattn_pool_v_buffer(pool, l), CL_MEM_SIZE, sizeof size, &size, NULL);
        assert_int_equal(size, 5 * 2 * 16 * 64 * 2);
    }
    assert_null(lazyattn_pool_k_buffer(pool, 3));
    assert_non_null(strstr(lazyattn_last_error(), "layer 3"));
    assert_null(lazyattn_pool_k_buffer(pool, -1));
    lazyattn_pool_destroy(pool);
    /* a budget larger than the device can allocate in one buffer is refused */
    c.budget_bytes = UINT64_MAX / 2;
    pool = NULL;
    int st = lazyattn_pool_create(ctx, &c, &pool);
    assert_true(st == LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY);
    assert_null(pool);
}

/* kv_layout: ROWS or TILED, TILED only with whole groups of 8 tokens a
 * block; the pool keeps it (get_config), device and bookkeeping pools alike. */
static void test_kv_layout(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_pool_config c = {2, 2, 64, 16, LAZYATTN_DTYPE_F16, 4ull * 2 * 2 * 2 * 16 * 64 * 2,
                              LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *pool = (lazyattn_pool *)0x1;
    const int bad_layouts[] = {2, -1};
    for (int i = 0; i < 2; i++) {
        c.kv_layout = (lazyattn_kv_layout)bad_layouts[i];
        lt_assert_status(lazyattn_pool_create(ctx, &c, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_null(pool);
        assert_non_null(strstr(lazyattn_last_error(), "kv_layout"));
        lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    }
    c.kv_layout = LAZYATTN_KV_LAYOUT_TILED;
    c.block_size = 12;
    lt_assert_status(lazyattn_pool_create(ctx, &c, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(pool);
    assert_non_null(strstr(lazyattn_last_error(), "TILED needs block_size a multiple of 8, got 12"));
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* ROWS takes any block size */
    c.kv_layout = LAZYATTN_KV_LAYOUT_ROWS;
    lt_assert_status(lazyattn_pool_create(ctx, &c, &pool), LAZYATTN_STATUS_OK);
    lazyattn_pool_destroy(pool);
    const int good_blocks[] = {8, 16, 32};
    for (int i = 0; i < 3; i++) {
        c.kv_layout = LAZYATTN_KV_LAYOUT_TILED;
        c.block_size = good_blocks[i];
        for (int device = 0; device < 2; device++) {
            lt_assert_status(lazyattn_pool_create(device ? ctx : NULL, &c, &pool), LAZYATTN_STATUS_OK);
            lazyattn_pool_config back;
            memset(&back, 0xA5, sizeof back);
            lt_assert_status(lazyattn_pool_get_config(pool, &back), LAZYATTN_STATUS_OK);
            assert_int_equal(back.kv_layout, LAZYATTN_KV_LAYOUT_TILED);
            assert_int_equal(back.block_size, good_blocks[i]);
            lazyattn_pool_destroy(pool);
        }
    }
    /* the default is ROWS, and get_config says so */
    lazyattn_pool_config d;
    memset(&d, 0xA5, sizeof d);
    lazyattn_pool_config_init(&d);
    assert_int_equal(d.kv_layout, LAZYATTN_KV_LAYOUT_ROWS);
    d.budget_bytes = 64ull << 20;
    lt_assert_status(lazyattn_pool_create(NULL, &d, &pool), LAZYATTN_STATUS_OK);
    lazyattn_pool_config back;
    memset(&back, 0xA5, sizeof back);
    lt_assert_status(lazyattn_pool_get_config(pool, &back), LAZYATTN_STATUS_OK);
    assert_int_equal(back.kv_layout, LAZYATTN_KV_LAYOUT_ROWS);
    lazyattn_pool_destroy(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget_arithmetic),
        cmocka_unit_test(test_alloc_free_accounting),
        cmocka_unit_test(test_freed_blocks_come_back_in_order),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_device_buffers),
        cmocka_unit_test(test_kv_layout),
    };
    return cmocka_run_group_tests_name("block_pool", tests, lt_context_setup, lt_context_teardown);
}
