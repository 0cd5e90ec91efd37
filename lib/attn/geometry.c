/* SPDX-License-Identifier: Apache-2.0 */
/* The one validator of K/V geometry, shared by lazyattn_pool_create and
 * lazyattn_attention_create so that a device pool never holds a geometry
 * the kernels refuse. */
#include "internal.h"

int lz_check_geometry(const char *fn, int n_kv_heads, int head_dim, int block_size,
                      lazyattn_dtype dtype, int for_kernels) {
    LZ_CHECK_ARG(n_kv_heads >= 1 && n_kv_heads <= LAZYATTN_MAX_HEADS,
                 "%s: n_kv_heads %d outside 1..%d", fn, n_kv_heads, LAZYATTN_MAX_HEADS);
    if (for_kernels)
        LZ_CHECK_ARG(head_dim >= LAZYATTN_MIN_HEAD_DIM && head_dim <= LAZYATTN_MAX_HEAD_DIM &&
                         head_dim % 8 == 0,
                     "%s: head_dim %d must be a multiple of 8 in %d..%d", fn, head_dim,
                     LAZYATTN_MIN_HEAD_DIM, LAZYATTN_MAX_HEAD_DIM);
    else
        LZ_CHECK_ARG(head_dim >= 1 && head_dim <= LZ_BOOKKEEPING_MAX_HEAD_DIM,
                     "%s: head_dim %d outside 1..%d", fn, head_dim, LZ_BOOKKEEPING_MAX_HEAD_DIM);
    LZ_CHECK_ARG(block_size >= 1 && block_size <= LAZYATTN_MAX_BLOCK_SIZE,
                 "%s: block_size %d outside 1..%d", fn, block_size, LAZYATTN_MAX_BLOCK_SIZE);
    LZ_CHECK_ARG(dtype == LAZYATTN_DTYPE_F32 || dtype == LAZYATTN_DTYPE_F16 ||
                     dtype == LAZYATTN_DTYPE_BF16,
                 "%s: unknown dtype %d", fn, (int)dtype);
    return LAZYATTN_STATUS_OK;
}

/* TILED pages are 8 x 8 tiles of (token, dim): whole groups of 8 tokens. */
int lz_check_kv_layout(const char *fn, lazyattn_kv_layout layout, int block_size) {
    LZ_CHECK_ARG(layout == LAZYATTN_KV_LAYOUT_ROWS || layout == LAZYATTN_KV_LAYOUT_TILED,
                 "%s: unknown kv_layout %d (0 = ROWS, 1 = TILED)", fn, (int)layout);
    LZ_CHECK_ARG(layout != LAZYATTN_KV_LAYOUT_TILED || block_size % 8 == 0,
                 "%s: kv_layout TILED needs block_size a multiple of 8, got %d", fn, block_size);
    return LAZYATTN_STATUS_OK;
}
