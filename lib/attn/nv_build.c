/* SPDX-License-Identifier: Apache-2.0 */
/* The NVIDIA tensor-core path (cl/nv/): whether a configuration takes it,
 * its build (the program of the prefill variant its geometry chose, with the
 * decode), and the prefill's dispatch order. Taken when the context has
 * fast_nv (NVIDIA, compute capability >= 8, not LAZYATTN_PORTABLE) and the
 * configuration fits the kernels: f16 storage, head_dim 64 or 128, block
 * size 16 or 32, no ALiBi, at most 8 query heads per KV head. The geometry
 * comes from the tuning database (attn/nv_tuning.c) and LAZYATTN_TUNE. */
#include "attention_internal.h"

#include <stdlib.h>
#include <string.h>

static int lz_nv_fits(const lazyattn_context *ctx, const lazyattn_attention_config *c) {
    int group = c->n_q_heads / c->n_kv_heads;
    return ctx->fast_nv && c->dtype == LAZYATTN_DTYPE_F16 &&
           (c->head_dim == 64 || c->head_dim == 128) &&
           (c->block_size == 16 || c->block_size == 32) && !c->alibi && group <= 8;
}

/* The sources of the program of g's prefill variant (cl/nv/, in this
 * order; the decode next to it), as lz_program_get names them
 * (cl/meson.build embeds them); their count. tools/check_ptx_unchanged.sh
 * builds the same lists. */
static int lz_nv_sources(const lz_nv_geometry *g, const char *names[16]) {
    static const char *const common[] = {"block_entry", "kernel_abi", "storage",  "rope",
                                         "softmax_state", "ptx",      "attn_mma", "prefill_common"};
    int n = 0;
    for (size_t i = 0; i < sizeof common / sizeof *common; i++) names[n++] = common[i];
    if (g->producer) {
        names[n++] = "prefill_producer";
        names[n++] = "prefill_wgmma";
        if (g->persist) names[n++] = "prefill_persistent";
    } else {
        names[n++] = "prefill_mma"; /* mma.sync, or wgmma without the producer */
    }
    names[n++] = "prefill_kernels";
    names[n++] = "decode_nv";
    return n;
}

/* Builds the tensor-core kernels of a->nv (the prefill's products on Hopper
 * wgmma through the PTX round trip of ptx_sm90a.c where a->nv.wgmma). */
static int lz_nv_build_with(lazyattn_attention *a) {
    lazyattn_context *ctx = a->ctx;
    const lz_nv_geometry *g = &a->nv;
    char options[512];
    int n = snprintf(options, sizeof options,
                     "-cl-std=CL1.2 -DLZ_HEAD_DIM=%d -DLZ_BLOCK=%d -DLZ_DTYPE=%d -DLZ_KV_TILED=%d "
                     "-DLAZYATTN_FAST_NV=1 -DLZ_NV_KT=%d -DLZ_NV_WARPS=%d -DLZ_NV_DSTAGES=%d "
                     "-DLZ_NV_RT=%d -DLZ_NV_WGMMA=%d%s%s",
                     a->cfg.head_dim, a->cfg.block_size, (int)a->cfg.dtype,
                     a->cfg.kv_layout == LAZYATTN_KV_LAYOUT_TILED, g->kt, g->warps, g->dstages,
                     LZ_NV_REDUCE_THREADS, g->wgmma, g->producer ? " -DLZ_NV_PRODUCER=1" : "",
                     g->persist ? " -DLZ_NV_PERSIST=1" : "");
    const int n_base = n;
    if (g->maxreg > 0)
        n += snprintf(options + n, sizeof options - (size_t)n, " -cl-nv-maxrregcount=%d", g->maxreg);
    if (a->ov.nv_verbose == 1) snprintf(options + n, sizeof options - (size_t)n, " -cl-nv-verbose");
    const char *sources[16];
    const int n_sources = lz_nv_sources(g, sources);
    cl_program program, patched = NULL;
    int st = lz_program_get(ctx, sources, n_sources, options, &program);
    if (st) return st;
    if (g->wgmma) {
        /* the second build takes the code-generation options only */
        st = lz_ptx_sm90a_dump(ctx, program, options + n_base, a->ov.dump_ptx, &patched);
        if (st) return st;
        program = patched;
    }
    cl_int err;
    a->nv_prefill = clCreateKernel(program, "lz_prefill_nv", &err);
    if (err == CL_SUCCESS) a->nv_decode = clCreateKernel(program, "lz_decode_nv", &err);
    if (err == CL_SUCCESS) a->nv_reduce = clCreateKernel(program, "lz_decode_nv_reduce", &err);
    if (err == CL_SUCCESS)
        a->nv_prefill_batched = clCreateKernel(program, "lz_prefill_nv_batched", &err);
    /* the launch takes the work-group size the prefill kernels were compiled
     * for (reqd_work_group_size: the warps, and the producer's warpgroup when
     * the build has one), so that host and kernel cannot disagree; where the
     * driver does not report it (0, e.g. a program rebuilt from PTX), the
     * size the host asked for */
    size_t wg[3] = {0, 0, 0}, wgb[3] = {0, 0, 0};
    if (err == CL_SUCCESS &&
        clGetKernelWorkGroupInfo(a->nv_prefill, ctx->device, CL_KERNEL_COMPILE_WORK_GROUP_SIZE,
                                 sizeof wg, wg, NULL) != CL_SUCCESS)
        wg[0] = 0;
    if (err == CL_SUCCESS &&
        clGetKernelWorkGroupInfo(a->nv_prefill_batched, ctx->device,
                                 CL_KERNEL_COMPILE_WORK_GROUP_SIZE, sizeof wgb, wgb, NULL) != CL_SUCCESS)
        wgb[0] = 0;
    a->nv_prefill_threads = wg[0] ? wg[0] : (size_t)32 * (size_t)(g->warps + 4 * g->producer);
    if (err == CL_SUCCESS &&
        (a->nv_prefill_threads % 32 || (wgb[0] && wgb[0] != a->nv_prefill_threads)))
        err = CL_INVALID_KERNEL_DEFINITION;
    if (patched) clReleaseProgram(patched); /* the kernels keep it */
    if (err != CL_SUCCESS) {
        cl_kernel *k[] = {&a->nv_prefill, &a->nv_decode, &a->nv_reduce, &a->nv_prefill_batched};
        for (int i = 0; i < 4; i++)
            if (*k[i]) clReleaseKernel(*k[i]), *k[i] = NULL;
        return lz_cl_fail(err, "lazyattn_attention_create: NVIDIA kernels");
    }
    return LAZYATTN_STATUS_OK;
}

static const char *lz_nv_order_name(int order) {
    switch (order) {
    case LZ_ORDER_AUTO: return "auto";
    case LZ_ORDER_HEADS: return "heads";
    case LZ_ORDER_LPT: return "lpt";
    case LZ_ORDER_BALANCED: return "balanced";
    default: return "none (the kernel's own)";
    }
}

int lz_nv_build(lazyattn_attention *a) {
    lazyattn_context *ctx = a->ctx;
    if (!lz_nv_fits(ctx, &a->cfg)) return LAZYATTN_STATUS_OK;
    lz_nv_geometry_choose(ctx->nv_cc_major, a->group, a->cfg.block_size, a->cfg.head_dim, &a->ov, &a->nv);
    int st = lz_nv_build_with(a);
    /* where a variant does not build (a driver's limits), the next simpler
     * one: without persistence, without the producer, mma.sync */
    if (st && a->nv.persist) {
        lz_log(ctx, LAZYATTN_LOG_WARN, "persistent wgmma prefill unavailable, a work-group a tile in use: %s",
               lazyattn_last_error());
        a->nv.persist = 0;
        st = lz_nv_build_with(a);
    }
    if (st && a->nv.producer) {
        lz_log(ctx, LAZYATTN_LOG_WARN, "wgmma prefill with the producer unavailable, without it in use: %s",
               lazyattn_last_error());
        a->nv.producer = 0;
        a->nv.order = LZ_NV_ORDER_NONE;
        st = lz_nv_build_with(a);
    }
    if (st && a->nv.wgmma) {
        lz_log(ctx, LAZYATTN_LOG_WARN, "wgmma prefill unavailable, mma.sync in use: %s", lazyattn_last_error());
        lz_tune_override mma = a->ov;
        mma.nv.wgmma = 0;
        lz_nv_geometry_choose(ctx->nv_cc_major, a->group, a->cfg.block_size, a->cfg.head_dim, &mma, &a->nv);
        st = lz_nv_build_with(a);
    }
    if (st) {
        lz_log(ctx, LAZYATTN_LOG_WARN, "NVIDIA fast path disabled, portable kernels in use: %s",
               lazyattn_last_error());
        return LAZYATTN_STATUS_OK;
    }
    a->fast = 1;
    lz_log(ctx, LAZYATTN_LOG_INFO,
           "NVIDIA tensor-core path: prefill %s%s%s, tile %d keys, %d warps, maxreg %d, order %s; "
           "decode ring %d, waves %d, entries a split >= %d",
           a->nv.wgmma ? "wgmma (S and P V)" : "mma.sync", a->nv.producer ? " + producer warpgroup" : "",
           a->nv.persist ? ", persistent" : "", a->nv.kt, a->nv.warps, a->nv.maxreg,
           lz_nv_order_name(a->nv.order), a->nv.dstages, a->nv.waves, a->nv.dsplit);
    return LAZYATTN_STATUS_OK;
}

/* The dispatch order lz_prefill_nv reads (prefill_order.c) for n_queries
 * over n_entries in `tiles` token tiles of `tokens`, NULL for the kernel's
 * own order (nv.order=none, not the producer's kernel, the order
 * chosen is the kernel's own (head by head), or no memory: the order
 * changes the speed, never the result). The persistent kernel
 * (a->nv.persist) reads its work-groups' task lists instead
 * (lz_prefill_order_lists; always made, the kernel's own order being a
 * round robin), and *groups is set to the work-groups to launch: one a
 * compute unit, at most one a task. Each token tile's cost is estimated as
 * a prefill's usual table has it: the queries the last n_queries positions
 * over n_entries full blocks, each query seeing every key up to its own
 * position; 4 tiles of keys for the start and the end (2 persistent, which
 * overlaps them). Made once a shape (every layer of a forward has the
 * same: 0.1-0.2 ms of host time at 4096-16384 queries, once) into a buffer
 * never written again (CL_MEM_COPY_HOST_PTR: no queue involved, safe on
 * any), the last LZ_NV_ORDERS shapes kept. */
cl_mem lz_nv_prefill_order(lazyattn_attention *a, int n_queries, int n_entries, int tiles, int tokens,
                           int *groups) {
    const int heads = a->cfg.n_kv_heads, kt = a->nv.kt, persist = a->nv.persist;
    const int64_t tasks = (int64_t)tiles * heads;
    const int64_t cus = (int64_t)a->ctx->compute_units;
    const int slots = (int)(persist && tasks < cus ? tasks : cus > 0 ? cus : 1);
    *groups = persist ? slots : 0;
    if (a->nv.order == LZ_NV_ORDER_NONE) return NULL;
    for (int i = 0; i < LZ_NV_ORDERS; i++)
        if (a->nv_orders[i].known && a->nv_orders[i].n_queries == n_queries &&
            a->nv_orders[i].n_entries == n_entries) {
            *groups = a->nv_orders[i].groups;
            return a->nv_orders[i].order;
        }
    if (tasks > (int64_t)(1 << 30)) return NULL;
    double *cost = malloc(sizeof(double) * (size_t)tiles);
    int *order = malloc(sizeof(int) * (size_t)tasks), *lists = NULL, len = 0;
    cl_mem buf = NULL;
    int known = 0;
    if (cost && order) {
        const int64_t keys = (int64_t)n_entries * a->cfg.block_size;
        const int64_t prefix = keys > n_queries ? keys - n_queries : 0;
        for (int t = 0; t < tiles; t++) {
            const int64_t last = (int64_t)(t + 1) * tokens;
            const int64_t seen = prefix + (last < n_queries ? last : n_queries);
            cost[t] = (persist ? 2.0 : 4.0) + (double)((seen + kt - 1) / kt);
        }
        lz_order_policy chosen = LZ_ORDER_AUTO;
        double end = 0.0;
        int at_once = 1;
        if (lz_prefill_order(tiles, heads, cost, slots, (lz_order_policy)a->nv.order, order, &chosen,
                             &at_once, &end) == 0 &&
            (!persist || lz_prefill_order_lists(order, tiles, heads, cost, slots, &lists, &len) == 0)) {
            known = !persist && chosen == LZ_ORDER_HEADS; /* the kernel's own: no buffer */
            if (!known) {
                cl_int err;
                const size_t n = persist ? (size_t)len : (size_t)tasks;
                buf = clCreateBuffer(a->ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(int) * n,
                                     persist ? lists : order, &err);
                if (err != CL_SUCCESS) buf = NULL;
                known = buf != NULL;
            }
            double total = 0.0;
            for (int t = 0; t < tiles; t++) total += cost[t] * heads;
            lz_log(a->ctx, LAZYATTN_LOG_INFO,
                   "prefill order for %d queries over %d entries: %d x %d %s on %d, "
                   "policy %d over %d heads at once, simulated end %.4f x the even spread%s",
                   n_queries, n_entries, tiles, heads, persist ? "tasks (persistent)" : "work-groups", slots,
                   (int)chosen, at_once, end * slots / total,
                   known ? "" : " (buffer not made: the kernel's own order)");
        }
    }
    free(cost);
    free(order);
    free(lists);
    if (!known) return NULL; /* tried again next time */
    const int i = a->nv_order_next;
    a->nv_order_next = (i + 1) % LZ_NV_ORDERS;
    if (a->nv_orders[i].order) clReleaseMemObject(a->nv_orders[i].order);
    a->nv_orders[i].known = 1;
    a->nv_orders[i].n_queries = n_queries, a->nv_orders[i].n_entries = n_entries;
    a->nv_orders[i].order = buf;
    a->nv_orders[i].groups = *groups;
    return buf;
}
