/* SPDX-License-Identifier: Apache-2.0 */
/* The launchers' shared checks and argument setting (attention.c,
 * decode_launch.c): user buffers, q/out element types, the pool's
 * geometry, and the enqueue with its error. */
#include "attn/attention_internal.h"
#include "checked_size.h"


void lz_arg(lz_args *a, size_t size, const void *value) {
    if (a->err == CL_SUCCESS) a->err = clSetKernelArg(a->kernel, a->next, size, value);
    a->next++;
}

/* A user buffer must exist and hold at least `need` bytes. */
int lz_check_mem(cl_mem m, size_t need, const char *fn, const char *name) {
    if (!m) return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
    size_t size = 0;
    cl_int err = clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (err != CL_SUCCESS)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: %s is not a valid buffer (%s)", fn,
                       name, lz_cl_error_name(err));
    if (size < need)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: %s holds %zu B, needs %zu B", fn,
                       name, size, need);
    return LAZYATTN_STATUS_OK;
}

/* Checks the q/out element types and sizes and the optional lse buffer of a
 * prefill or decode over `rows` query rows. The NVIDIA kernels take f32
 * q/out and no lse: *plain says whether the call is of that form. */
int lz_check_io(const lazyattn_attention *a, const char *fn, int rows, cl_mem q, cl_mem out,
                cl_mem lse, lazyattn_dtype q_dtype, lazyattn_dtype out_dtype, int *plain) {
    LZ_CHECK_ARG(q_dtype >= LAZYATTN_DTYPE_F32 && q_dtype <= LAZYATTN_DTYPE_BF16,
                 "%s: q_dtype %d is not F32, F16 or BF16", fn, (int)q_dtype);
    LZ_CHECK_ARG(out_dtype >= LAZYATTN_DTYPE_F32 && out_dtype <= LAZYATTN_DTYPE_BF16,
                 "%s: out_dtype %d is not F32, F16 or BF16", fn, (int)out_dtype);
    size_t q_bytes = 0, out_bytes = 0, lse_bytes = 0;
    LZ_TRY(lz_size_product4(&q_bytes, fn, "q bytes (rows x n_q_heads x head_dim x q element)",
                            (size_t)rows, (size_t)a->cfg.n_q_heads, (size_t)a->cfg.head_dim,
                            lazyattn_dtype_size(q_dtype)));
    LZ_TRY(lz_size_product4(&out_bytes, fn, "out bytes (rows x n_q_heads x head_dim x out element)",
                            (size_t)rows, (size_t)a->cfg.n_q_heads, (size_t)a->cfg.head_dim,
                            lazyattn_dtype_size(out_dtype)));
    LZ_TRY(lz_size_product(&lse_bytes, fn, "lse bytes (rows x n_q_heads x 4)", (size_t)rows,
                           (size_t)a->cfg.n_q_heads, sizeof(float)));
    LZ_CHECK_MEM(q, q_bytes, "q");
    LZ_CHECK_MEM(out, out_bytes, "out");
    if (lse) LZ_CHECK_MEM(lse, lse_bytes, "lse");
    *plain = !lse && q_dtype == LAZYATTN_DTYPE_F32 && out_dtype == LAZYATTN_DTYPE_F32;
    return LAZYATTN_STATUS_OK;
}


/* The pool must be a device pool of this context with this geometry. */
int lz_check_pool(const lazyattn_attention *a, const lazyattn_pool *pool, int layer,
                  const char *fn) {
    LZ_CHECK_ARG(pool != NULL, "%s: pool is NULL", fn);
    LZ_CHECK_ARG(lz_pool_context(pool) == a->ctx,
                 "%s: the pool belongs to another context or keeps accounting only", fn);
    lazyattn_pool_config pc;
    lazyattn_pool_get_config(pool, &pc);
    LZ_CHECK_ARG(layer >= 0 && layer < pc.n_layers, "%s: layer %d outside 0..%d", fn, layer,
                 pc.n_layers - 1);
    LZ_CHECK_ARG(pc.n_kv_heads == a->cfg.n_kv_heads && pc.head_dim == a->cfg.head_dim &&
                     pc.block_size == a->cfg.block_size && pc.dtype == a->cfg.dtype,
                 "%s: pool geometry (kv heads %d, head_dim %d, block %d, dtype %d) differs from "
                 "the attention's (%d, %d, %d, %d)",
                 fn, pc.n_kv_heads, pc.head_dim, pc.block_size, (int)pc.dtype, a->cfg.n_kv_heads,
                 a->cfg.head_dim, a->cfg.block_size, (int)a->cfg.dtype);
    /* the kernels were compiled for one page order (LZ_KV_TILED) */
    LZ_CHECK_ARG(pc.kv_layout == a->cfg.kv_layout,
                 "%s: pool kv_layout %s differs from the attention's %s", fn,
                 pc.kv_layout == LAZYATTN_KV_LAYOUT_TILED ? "TILED" : "ROWS",
                 a->cfg.kv_layout == LAZYATTN_KV_LAYOUT_TILED ? "TILED" : "ROWS");
    return LAZYATTN_STATUS_OK;
}

/* Launches pass an explicit work-group size wherever one fits: PoCL
 * compiles a kernel once per work-group size, and leaving the choice to the
 * driver gives a new size (and a compile) for each token count. */
int lz_enqueue(lazyattn_attention *a, int kernel, cl_uint dims, const size_t *global,
               const size_t *local, cl_command_queue queue, cl_event *event,
               const char *fn) {
    cl_int err = clEnqueueNDRangeKernel(lz_queue(a->ctx, queue), a->kernels[kernel], dims, NULL,
                                        global, local, 0, NULL, event);
    if (err != CL_SUCCESS) return lz_cl_fail(err, fn);
    return LAZYATTN_STATUS_OK;
}
