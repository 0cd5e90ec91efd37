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
       LZ_K_PREFILL_BATCHED, LZ_K_REDUCE_SPLITS, LZ_K_COUNT };

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

#endif
