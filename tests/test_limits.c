/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Limits checked as a whole, up front: a device pool larger than the
 * device's global memory though every buffer fits one allocation, a budget
 * that gives more blocks than LAZYATTN_MAX_POOL_BLOCKS, workloads past
 * their documented caps; one geometry validator for pools and attention;
 * lazyattn_last_error() keeps the last failure like errno.
 */
#include "test_common.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Splits a pool over layers so that each layer's K buffer fits the largest
 * allocation but all of them exceed the global memory. */
static void test_pool_over_global_memory_is_refused(void **state) {
    lazyattn_context *ctx = *state;
    cl_device_id dev = lazyattn_context_device(ctx);
    cl_ulong global_mem = 0, max_alloc = 0;
    assert_int_equal(clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global_mem, &global_mem, NULL), CL_SUCCESS);
    assert_int_equal(clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL), CL_SUCCESS);
    /* blocks per layer buffer kept under both the largest allocation and
     * a quarter of the global memory */
    const uint64_t per_layer_block = 8ull * 16 * 128 * 2; /* one K (or V) block of one layer */
    uint64_t cap = max_alloc < global_mem / 4 ? max_alloc : global_mem / 4;
    uint64_t n_blocks = cap / per_layer_block;
    assert_true(n_blocks >= 1);
    /* 4 layers x (K + V) x n_blocks x per_layer_block = 8 x cap > global */
    lazyattn_pool_config c = {4, 8, 128, 16, LAZYATTN_DTYPE_F16, 0, LAZYATTN_KV_LAYOUT_ROWS};
    c.budget_bytes = n_blocks * 2 * 4 * per_layer_block;
    assert_true(c.budget_bytes > global_mem);
    lazyattn_pool *pool = (lazyattn_pool *)0x1;
    lt_assert_status(lazyattn_pool_create(ctx, &c, &pool), LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY);
    assert_null(pool);
    char want[64];
    snprintf(want, sizeof want, "has %llu B", (unsigned long long)global_mem);
    assert_non_null(strstr(lazyattn_last_error(), want));
    assert_non_null(strstr(lazyattn_last_error(), "global memory"));
    printf("# %s\n", lazyattn_last_error());
    /* the same budget keeps accounting fine without a device */
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_OK);
    lazyattn_pool_destroy(pool);
}

/* A budget that gives more blocks than the bookkeeping supports is refused
 * before any bookkeeping is built; at the limit it is accepted. */
static void test_pool_block_count_cap(void **state) {
    (void)state;
    /* the smallest block: 1 layer, 1 head, 1 token, head_dim 1, 2 B: 4 B */
    lazyattn_pool_config c = {1, 1, 1, 1, LAZYATTN_DTYPE_F16, (uint64_t)1 << 63,
                              LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *pool = (lazyattn_pool *)0x1;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_null(pool);
    assert_non_null(strstr(lazyattn_last_error(), "gives 2305843009213693952 blocks"));
    assert_non_null(strstr(lazyattn_last_error(), "at most 67108864"));
    c.budget_bytes = UINT64_MAX;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_OUT_OF_RANGE);
    /* one block past the cap, then exactly at it */
    c.budget_bytes = ((uint64_t)LAZYATTN_MAX_POOL_BLOCKS + 1) * 4;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_non_null(strstr(lazyattn_last_error(), "gives 67108865 blocks"));
    c.budget_bytes = (uint64_t)LAZYATTN_MAX_POOL_BLOCKS * 4 + 3;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_OK);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(pool, &info);
    assert_int_equal(info.n_blocks, LAZYATTN_MAX_POOL_BLOCKS);
    /* the last id is usable */
    int32_t ids[2];
    lt_assert_status(lazyattn_pool_alloc(pool, 2, ids), LAZYATTN_STATUS_OK);
    assert_int_equal(ids[0], 0);
    assert_false(lazyattn_pool_is_allocated(pool, (int32_t)LAZYATTN_MAX_POOL_BLOCKS));
    lt_assert_status(lazyattn_pool_free(pool, 2, ids), LAZYATTN_STATUS_OK);
    lazyattn_pool_destroy(pool);
}

/* Workloads past their caps are refused before anything is allocated. */
static void test_workload_caps(void **state) {
    (void)state;
    lazyattn_workload_config base;
    lt_assert_status(lazyattn_workload_config_preset("rag", &base), LAZYATTN_STATUS_OK);
    lazyattn_workload *wl = (lazyattn_workload *)0x1;
    lazyattn_workload_config c = base;
    /* the attack: --docs 2147483647 grew to 18 GB */
    c.n_docs = INT_MAX;
    lt_assert_status(lazyattn_workload_create(&c, &wl), LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_null(wl);
    assert_non_null(strstr(lazyattn_testing_last_error(), "n_docs 2147483647 above 16777216"));
    c = base, c.n_docs = LAZYATTN_WORKLOAD_MAX_DOCS + 1;
    lt_assert_status(lazyattn_workload_create(&c, &wl), LAZYATTN_STATUS_OUT_OF_RANGE);
    /* documents within the cap, their tokens not */
    c = base, c.n_docs = 1 << 20, c.doc_len_min = 1, c.doc_len_max = 1 << 8;
    lt_assert_status(lazyattn_workload_create(&c, &wl), LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_non_null(strstr(lazyattn_testing_last_error(), "document tokens (n_docs x doc_len_max) = 268435456"));
    c = base, c.n_docs = 2, c.docs_per_request = 1, c.doc_len_min = 1, c.doc_len_max = INT_MAX;
    lt_assert_status(lazyattn_workload_create(&c, &wl), LAZYATTN_STATUS_OUT_OF_RANGE);
    c = base, c.n_requests = INT_MAX;
    lt_assert_status(lazyattn_workload_create(&c, &wl), LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_non_null(strstr(lazyattn_testing_last_error(), "n_requests"));
    c = base, c.n_requests = 1 << 24, c.question_min = c.question_max = 0;
    lt_assert_status(lazyattn_workload_create(&c, &wl), LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_non_null(strstr(lazyattn_testing_last_error(), "document slots"));
    c = base, c.n_requests = 1 << 22, c.question_min = 1, c.question_max = 64;
    lt_assert_status(lazyattn_workload_create(&c, &wl), LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_non_null(strstr(lazyattn_testing_last_error(), "question tokens"));
    c = base, c.prefix_len = INT_MAX;
    lt_assert_status(lazyattn_workload_create(&c, &wl), LAZYATTN_STATUS_OUT_OF_RANGE);
    c = base, c.gen_max = INT_MAX;
    lt_assert_status(lazyattn_workload_create(&c, &wl), LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_null(wl);
    /* the presets stay well inside */
    lt_assert_status(lazyattn_workload_create(&base, &wl), LAZYATTN_STATUS_OK);
    lazyattn_workload_destroy(wl);
}

/* A device pool and an attention configuration share one geometry
 * validator: what one refuses the other refuses. */
static void test_one_geometry_validator(void **state) {
    lazyattn_context *ctx = *state;
    const struct { int n_kv, head_dim, block; lazyattn_dtype dtype; } bad[] = {
        {2, 66, 16, LAZYATTN_DTYPE_F16},   /* not a multiple of 8 */
        {2, 8, 16, LAZYATTN_DTYPE_F16},    /* below 16 */
        {2, 264, 16, LAZYATTN_DTYPE_F16},  /* above 256 */
        {2, 1024, 16, LAZYATTN_DTYPE_F16}, /* once accepted by pools */
        {2, 64, 0, LAZYATTN_DTYPE_F16},
        {2, 64, LAZYATTN_MAX_BLOCK_SIZE + 1, LAZYATTN_DTYPE_F16},
        {0, 64, 16, LAZYATTN_DTYPE_F16},
        {LAZYATTN_MAX_HEADS + 1, 64, 16, LAZYATTN_DTYPE_F16},
        {2, 64, 16, (lazyattn_dtype)3},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        lazyattn_pool_config pc = {1, bad[i].n_kv, bad[i].head_dim, bad[i].block, bad[i].dtype, 1 << 30,
                                   LAZYATTN_KV_LAYOUT_ROWS};
        lazyattn_pool *pool = (lazyattn_pool *)0x1;
        lt_assert_status(lazyattn_pool_create(ctx, &pc, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_null(pool);
        char pool_msg[512];
        snprintf(pool_msg, sizeof pool_msg, "%s", lazyattn_last_error());
        lazyattn_attention_config c;
        lazyattn_attention_config_default(&c);
        c.n_kv_heads = bad[i].n_kv, c.n_q_heads = 1; /* the geometry fails first */
        c.head_dim = bad[i].head_dim, c.block_size = bad[i].block, c.dtype = bad[i].dtype;
        lazyattn_attention *attn = (lazyattn_attention *)0x1;
        lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_null(attn);
        /* the same rule, worded the same after the caller's name */
        assert_string_equal(strchr(pool_msg, ':'), strchr(lazyattn_last_error(), ':'));
    }
    /* a bookkeeping pool (no kernels) keeps any head dim up to 1024 */
    lazyattn_pool_config books = {1, 1, 1, 4, LAZYATTN_DTYPE_F32, 1 << 20, LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *pool = NULL;
    lt_assert_status(lazyattn_pool_create(NULL, &books, &pool), LAZYATTN_STATUS_OK);
    lazyattn_pool_destroy(pool);
    books.head_dim = 1025;
    lt_assert_status(lazyattn_pool_create(NULL, &books, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* and the edges the kernels accept are accepted by device pools */
    const int good_dims[] = {16, 24, 256};
    for (size_t i = 0; i < sizeof good_dims / sizeof *good_dims; i++) {
        lazyattn_pool_config pc = {1, 1, good_dims[i], 1, LAZYATTN_DTYPE_F32, 1 << 16,
                                   LAZYATTN_KV_LAYOUT_ROWS};
        lt_assert_status(lazyattn_pool_create(ctx, &pc, &pool), LAZYATTN_STATUS_OK);
        lazyattn_pool_destroy(pool);
    }
}

/* lazyattn_last_error() keeps the last failure's text, like errno: a later
 * successful call does not clear it. */
static void test_last_error_is_errno_like(void **state) {
    (void)state;
    lazyattn_pool *pool = NULL;
    lazyattn_pool_config c = {0, 1, 16, 16, LAZYATTN_DTYPE_F32, 1 << 20, LAZYATTN_KV_LAYOUT_ROWS};
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_INVALID_ARGUMENT);
    char failure[512];
    snprintf(failure, sizeof failure, "%s", lazyattn_last_error());
    assert_non_null(strstr(failure, "n_layers 0"));
    c.n_layers = 1;
    lt_assert_status(lazyattn_pool_create(NULL, &c, &pool), LAZYATTN_STATUS_OK);
    assert_string_equal(lazyattn_last_error(), failure);
    lazyattn_pool_destroy(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_over_global_memory_is_refused),
        cmocka_unit_test(test_pool_block_count_cap),
        cmocka_unit_test(test_workload_caps),
        cmocka_unit_test(test_one_geometry_validator),
        cmocka_unit_test(test_last_error_is_errno_like),
    };
    return cmocka_run_group_tests_name("limits", tests, lt_context_setup, lt_context_teardown);
}
