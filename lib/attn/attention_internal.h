/* SPDX-License-Identifier: Apache-2.0 */
/* The attention object (attention.c) and the NVIDIA tensor-core path's
 * build and dispatch order (attn/nv_build.c). Not installed. */
#ifndef LZ_ATTENTION_INTERNAL_H
#define LZ_ATTENTION_INTERNAL_H

#include "internal.h"
#include "prefill_order.h"
#include "tuning.h"

/* Work-items of a work-group of lz_decode_nv_reduce (LZ_NV_RT). */
#define LZ_NV_REDUCE_THREADS 256
#define LZ_NV_ORDERS 4 /* prefill dispatch orders kept (shapes) */

/* The portable kernels, indices of lazyattn_attention.kernels. */
enum { LZ_K_KV_WRITE, LZ_K_ROPE, LZ_K_PREFILL, LZ_K_DECODE, LZ_K_REDUCE, LZ_K_MATERIALISE,
       LZ_K_PREFILL_BATCHED, LZ_K_REDUCE_SPLITS, LZ_K_KV_WRITE_ROPE_Q, LZ_K_COUNT };

struct lazyattn_attention {
    lazyattn_context *ctx;
    lazyattn_attention_config cfg;
    int rot_dim;
    int group; /* query heads per KV head */
    lazyattn_kernel_tuning tune; /* portable kernels' geometry (tuning.c) */
    lz_tune_override ov;         /* LAZYATTN_TUNE at create */
    cl_kernel kernels[LZ_K_COUNT];
    cl_mem freq;   /* [max(1, rot_dim / 2)] float2 (hi, lo) */
    cl_mem slopes; /* [n_q_heads] float */
    cl_mem err;    /* one int of LZ_ERR_* bits */
    cl_mem part_ml, part_acc;
    size_t part_capacity; /* partial rows (seq * head * split) the scratch holds */
    int fast;             /* the NVIDIA tensor-core kernels below are in use */
    lz_nv_geometry nv;    /* their geometry (as built: wgmma, producer, persist, order) */
    size_t nv_prefill_threads; /* work-items of a prefill work-group, as the kernels were compiled */
    cl_kernel nv_prefill, nv_decode, nv_reduce, nv_prefill_batched;
    /* lz_prefill_nv's dispatch orders (prefill_order.c) of the last
     * LZ_NV_ORDERS shapes, made once each, read-only after */
    struct {
        int known, n_queries, n_entries;
        cl_mem order; /* [tiles * n_kv_heads] int; NULL: the kernel's own order */
        int groups;   /* persistent: the work-groups (order: their lists, prefill_order.h) */
    } nv_orders[LZ_NV_ORDERS];
    int nv_order_next; /* the slot the next new shape replaces */
};

/* Builds the NVIDIA kernels where the context and configuration allow them
 * (a->fast set); a build failure leaves the portable kernels in charge, with
 * a warning in the log (OK returned). */
int lz_nv_build(lazyattn_attention *a);

/* The dispatch order lz_prefill_nv reads for n_queries over n_entries in
 * `tiles` token tiles of `tokens` (NULL: the kernel's own order); *groups
 * the persistent kernel's work-groups (0 otherwise). */
cl_mem lz_nv_prefill_order(lazyattn_attention *a, int n_queries, int n_entries, int tiles, int tokens,
                           int *groups);

/* ---- launch helpers (launch_check.c) ------------------------------------ */

/* Sets a kernel's arguments in order; the first failure is kept in err. */
typedef struct lz_args {
    cl_kernel kernel;
    cl_uint next;
    cl_int err;
} lz_args;
void lz_arg(lz_args *a, size_t size, const void *value);
#define LZ_ARG(a, v) lz_arg((a), sizeof(v), &(v))

/* A user buffer must exist and hold at least `need` bytes. */
int lz_check_mem(cl_mem m, size_t need, const char *fn, const char *name);
#define LZ_CHECK_MEM(m, need, name)                          \
    do {                                                     \
        int st_ = lz_check_mem((m), (need), fn, (name));      \
        if (st_) return st_;                                 \
    } while (0)

/* Checks the q/out element types and sizes and the optional lse buffer of a
 * prefill or decode over `rows` query rows. The NVIDIA kernels take f32
 * q/out and no lse: *plain says whether the call is of that form. */
int lz_check_io(const lazyattn_attention *a, const char *fn, int rows, cl_mem q, cl_mem out, cl_mem lse,
                lazyattn_dtype q_dtype, lazyattn_dtype out_dtype, int *plain);

/* The portable kernels' trailing arguments: lse (any valid buffer when
 * none), has_lse, and the q/out element types. */
#define LZ_IO_ARGS(g, a_, lse_, q_dtype_, out_dtype_)                                         \
    do {                                                                                     \
        cl_mem lse_buf_ = (lse_) ? (lse_) : (a_)->err;                                        \
        cl_int has_lse_ = (lse_) != NULL, qd_ = (cl_int)(q_dtype_), od_ = (cl_int)(out_dtype_); \
        LZ_ARG(g, lse_buf_); LZ_ARG(g, has_lse_); LZ_ARG(g, qd_); LZ_ARG(g, od_);              \
    } while (0)

/* The pool must be a device pool of this context with this geometry. */
int lz_check_pool(const lazyattn_attention *a, const lazyattn_pool *pool, int layer, const char *fn);

/* Enqueues portable kernel `kernel` with an explicit work-group size where
 * one fits (PoCL compiles a kernel once per work-group size). */
int lz_enqueue(lazyattn_attention *a, int kernel, cl_uint dims, const size_t *global, const size_t *local,
               cl_command_queue queue, cl_event *event, const char *fn);

/* ---- decode (decode_launch.c) -------------------------------------------- */

/* The decode tile selects the small-work-group kernel (cl/decode_warp.cl)
 * and with it, for prefetch 1 or 3, its split-parallel reduction. */
static inline int lz_decode_warp(const lazyattn_kernel_tuning *tune) { return tune->decode.kv_together == 3; }
static inline int lz_decode_warp_reduce(const lazyattn_attention *a) { /* the kernel is built */
    return lz_decode_warp(&a->tune) && (a->tune.decode.prefetch == 1 || a->tune.decode.prefetch == 3);
}

/* lazyattn_decode's launches (validated, enqueued, the pool's use recorded by the caller). */
int lz_decode_launch(lazyattn_attention *a, const lazyattn_pool *pool, int layer, const lazyattn_decode_args *d,
                     cl_command_queue queue, cl_event *event);

#endif
