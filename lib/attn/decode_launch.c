/* SPDX-License-Identifier: Apache-2.0 */
/* The decode's launches: splits along the KV length, the partial rows'
 * scratch, the portable and NVIDIA decode kernels and the reduction of
 * their splits. */
#include "attn/attention_internal.h"
#include "checked_size.h"

#include "../../cl/kernel_abi.h"

#include <stdlib.h>
#include <string.h>

/* The decode tile selects the small-work-group kernel (cl/decode_warp.cl),
 * and with it the reduction of its splits: prefetch 1 the split-parallel
 * lz_decode_warp_reduce, 2 decode.cl's lz_decode_reduce (a work-group per
 * row walking the splits), 3 the first from LZ_SPLITS_PARALLEL splits on,
 * the second below (docs/PERFLOG.md, "p8"). */
#define LZ_SPLITS_PARALLEL 64
static int lz_reduce_kernel(const lazyattn_attention *a, int64_t n_splits) {
    if (!lz_decode_warp_reduce(a)) return LZ_K_REDUCE;
    return a->tune.decode.prefetch == 1 || n_splits >= LZ_SPLITS_PARALLEL ? LZ_K_REDUCE_SPLITS : LZ_K_REDUCE;
}
/* Its launch: work-groups of wrd dims (LZ_WRD) x rp work-items per dim, rp
 * the splits, at most 256 work-items a group (LZ_WRPM). */
static void lz_decode_warp_reduce_geometry(const lazyattn_attention *a, int64_t n_splits, size_t *global,
                                           size_t *local) {
    const int64_t wrd = a->cfg.head_dim % 32 == 0 ? 32 : a->cfg.head_dim, most = wrd >= 256 ? 1 : 256 / wrd;
    const int64_t rp = n_splits < most ? n_splits : most;
    *local = (size_t)(wrd * rp);
    *global = (size_t)(a->cfg.head_dim / wrd) * *local;
}

/* Splits along the KV length so that the work-groups fill the device about
 * four times over, but never more splits than entries. */
static int lz_decode_splits(const lazyattn_attention *a, int fast, int n_seqs, int max_entries) {
    int64_t groups = (int64_t)n_seqs * a->cfg.n_kv_heads;
    if (!fast) groups *= a->group / a->tune.decode.rows; /* head subsets (cl/decode.cl) */
    if (fast) {
        /* one warp per split: aim at `waves` warps per compute unit, with
         * at least dsplit blocks per split (the tuning database's: each
         * split pays a warp's fixed work, its query and its partial) */
        int64_t want = ((int64_t)a->nv.waves * a->ctx->compute_units + groups - 1) / groups;
        const int64_t most = max_entries / a->nv.dsplit;
        if (want > most) want = most;
        return want < 1 ? 1 : (int)want;
    }
    /* decode_groups_per_cu work-groups per compute unit are the slots the
     * device runs at once (the tuned figure: the kernel's registers and
     * local memory decide it); each split at least one chunk of the kernel
     * long. The work-groups of a launch do equal work, so a launch of
     * slots + a few takes two full rounds: of the split counts up to the
     * one that fills the slots (rounded up), take the one whose last round
     * is fullest (16 x 8192 on the H200's 528 slots: 4 splits = 512
     * work-groups in one round, not 5 = 640 in two), the larger on a tie. */
    int64_t slots = (int64_t)a->tune.decode_groups_per_cu * a->ctx->compute_units;
    if (slots < 1) slots = 1;
    int64_t want = (slots + groups - 1) / groups;
    int64_t tile_entries = a->tune.decode.keys >= a->cfg.block_size ? a->tune.decode.keys / a->cfg.block_size : 1;
    int64_t most = max_entries / tile_entries;
    if (want > most) want = most;
    if (want < 1) want = 1;
    int64_t best = want;
    double best_fill = 0.0;
    for (int64_t s = want; s >= 1 && s * 2 > want; s--) {
        int64_t wgs = groups * s, rounds = (wgs + slots - 1) / slots;
        double fill = (double)wgs / (double)(rounds * slots);
        if (fill > best_fill + 1e-9) best = s, best_fill = fill;
    }
    return (int)best;
}

static int lz_reserve_partials(lazyattn_attention *a, size_t rows) {
    if (rows <= a->part_capacity) return LAZYATTN_STATUS_OK;
    if (a->part_ml) clReleaseMemObject(a->part_ml);
    if (a->part_acc) clReleaseMemObject(a->part_acc);
    a->part_ml = a->part_acc = NULL;
    a->part_capacity = 0;
    static const char fn[] = "lazyattn_decode";
    size_t ml_bytes = 0, acc_bytes = 0;
    LZ_TRY(lz_size_product(&ml_bytes, fn, "scratch bytes (partial rows x 8)", rows,
                           sizeof(cl_float2), 1));
    LZ_TRY(lz_size_product(&acc_bytes, fn, "scratch bytes (partial rows x head_dim x 4)", rows,
                           (size_t)a->cfg.head_dim, sizeof(float)));
    cl_int err;
    a->part_ml = clCreateBuffer(a->ctx->context, CL_MEM_READ_WRITE, ml_bytes, NULL, &err);
    if (err == CL_SUCCESS)
        a->part_acc = clCreateBuffer(a->ctx->context, CL_MEM_READ_WRITE, acc_bytes, NULL, &err);
    if (err != CL_SUCCESS) return lz_cl_fail(err, "lazyattn_decode: scratch");
    a->part_capacity = rows;
    return LAZYATTN_STATUS_OK;
}

/* The fast path's reduction launch (lz_decode_nv_reduce): a work-group
 * per (query head, sequence). */
static int lz_decode_nv_reduce_launch(lazyattn_attention *a, const lazyattn_decode_args *d, int64_t n_splits,
                                      cl_command_queue queue, cl_event *event) {
    cl_int ns = (cl_int)n_splits, nqh = a->cfg.n_q_heads, n_seqs = d->n_seqs;
    lz_args r = {a->nv_reduce, 0, CL_SUCCESS};
    LZ_ARG(&r, a->part_ml); LZ_ARG(&r, a->part_acc); LZ_ARG(&r, d->out); LZ_ARG(&r, ns);
    LZ_ARG(&r, nqh); LZ_ARG(&r, n_seqs);
    if (r.err != CL_SUCCESS) return lz_cl_fail(r.err, "lazyattn_decode: clSetKernelArg (reduce)");
    size_t global[3] = {LZ_NV_REDUCE_THREADS, (size_t)nqh, (size_t)d->n_seqs};
    size_t local[3] = {LZ_NV_REDUCE_THREADS, 1, 1};
    cl_int err = clEnqueueNDRangeKernel(lz_queue(a->ctx, queue), a->nv_reduce, 3, NULL, global, local, 0, NULL,
                                        event);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : lz_cl_fail(err, "lazyattn_decode");
}

/* LAZYATTN_TUNE nv.decode_times=1 (diagnostics): the profiled times of a
 * decode's launches, logged at info level once they are done (the queue
 * must profile; waits for them). */
static void lz_log_decode_times(lazyattn_attention *a, cl_event split, cl_event reduce, int64_t n_splits) {
    cl_ulong s0 = 0, e0 = 0, s1 = 0, e1 = 0;
    cl_event evs[2] = {split, reduce};
    if (clWaitForEvents(reduce ? 2 : 1, evs) != CL_SUCCESS ||
        clGetEventProfilingInfo(split, CL_PROFILING_COMMAND_START, sizeof s0, &s0, NULL) != CL_SUCCESS ||
        clGetEventProfilingInfo(split, CL_PROFILING_COMMAND_END, sizeof e0, &e0, NULL) != CL_SUCCESS) {
        lz_log(a->ctx, LAZYATTN_LOG_INFO, "decode times: not profiled (a queue without profiling?)");
        return;
    }
    if (reduce && (clGetEventProfilingInfo(reduce, CL_PROFILING_COMMAND_START, sizeof s1, &s1, NULL) != CL_SUCCESS ||
                   clGetEventProfilingInfo(reduce, CL_PROFILING_COMMAND_END, sizeof e1, &e1, NULL) != CL_SUCCESS))
        reduce = NULL;
    if (reduce)
        lz_log(a->ctx, LAZYATTN_LOG_INFO, "decode times: %lld splits, split kernel %.2f us, gap %.2f us, "
               "reduction %.2f us", (long long)n_splits, (double)(e0 - s0) * 1e-3, ((double)s1 - (double)e0) * 1e-3,
               (double)(e1 - s1) * 1e-3);
    else
        lz_log(a->ctx, LAZYATTN_LOG_INFO, "decode times: %lld splits, split kernel %.2f us (one launch)",
               (long long)n_splits, (double)(e0 - s0) * 1e-3);
}

int lz_decode_launch(lazyattn_attention *a, const lazyattn_pool *pool, int layer,
                     const lazyattn_decode_args *d, cl_command_queue queue, cl_event *event) {
    static const char fn[] = "lazyattn_decode";
    LZ_CHECK_ARG(a != NULL && d != NULL, "%s: attn or args is NULL", fn);
    int st = lz_check_pool(a, pool, layer, fn);
    if (st) return st;
    LZ_CHECK_ARG(d->n_seqs >= 1, "%s: n_seqs %d must be >= 1", fn, d->n_seqs);
    LZ_CHECK_ARG(d->max_entries >= 1, "%s: max_entries %d must be >= 1", fn, d->max_entries);
    size_t qpos_bytes = 0, off_bytes = 0;
    int plain = 0;
    LZ_TRY(lz_check_io(a, fn, d->n_seqs, d->q, d->out, d->lse, d->q_dtype, d->out_dtype, &plain));
    const int fast = a->fast && plain; /* the NVIDIA kernels take f32 q/out and no lse */
    LZ_TRY(lz_size_product(&qpos_bytes, fn, "q_pos bytes", (size_t)d->n_seqs, sizeof(cl_int), 1));
    LZ_TRY(lz_size_product(&off_bytes, fn, "seq_offsets bytes ((n_seqs + 1) x 4)",
                           (size_t)d->n_seqs + 1, sizeof(cl_int), 1));
    LZ_CHECK_MEM(d->q_pos, qpos_bytes, "q_pos");
    LZ_CHECK_MEM(d->seq_offsets, off_bytes, "seq_offsets");
    LZ_CHECK_MEM(d->table, sizeof(cl_ulong), "table");
    size_t table_bytes = 0;
    clGetMemObjectInfo(d->table, CL_MEM_SIZE, sizeof table_bytes, &table_bytes, NULL);
    size_t n_table = table_bytes / sizeof(cl_ulong);
    if (n_table > INT_MAX) n_table = INT_MAX; /* the kernels index the table with an int */
    LZ_CHECK_MEM(d->entry_pos, n_table * sizeof(cl_int), "entry_pos (one per table entry)");
    /* no sequence has more entries than the table holds */
    LZ_CHECK_ARG((size_t)d->max_entries <= n_table,
                 "%s: max_entries %d exceeds the %zu entries the table buffer holds", fn,
                 d->max_entries, n_table);

    LZ_CHECK_ARG(d->n_splits >= 0, "%s: n_splits %d must be >= 0", fn, d->n_splits);
    int64_t n_splits = d->n_splits ? d->n_splits : lz_decode_splits(a, fast, d->n_seqs, d->max_entries);
    if (n_splits > d->max_entries) n_splits = d->max_entries;
    int64_t per_split = ((int64_t)d->max_entries + n_splits - 1) / n_splits;
    n_splits = ((int64_t)d->max_entries + per_split - 1) / per_split;
    /* the kernels form begin + split * per_split and per_split * n_splits in int */
    LZ_TRY(lz_fits_int((int64_t)n_table + per_split * n_splits, fn,
                       "table entries + entries per split x splits"));
    size_t rows = 0;
    LZ_TRY(lz_size_product(&rows, fn, "partial rows (n_seqs x n_q_heads x splits)",
                           (size_t)d->n_seqs, (size_t)a->cfg.n_q_heads, (size_t)n_splits));
    st = lz_reserve_partials(a, rows);
    if (st) return st;
    /* the layer's blocks after their tier upload, if one is in flight */
    LZ_TRY(lz_pool_order_reads(pool, layer, lz_queue(a->ctx, queue), fn));

    cl_mem kc = lazyattn_pool_k_buffer(pool, layer), vc = lazyattn_pool_v_buffer(pool, layer);
    cl_int style = (cl_int)a->cfg.rope.style, rot = a->rot_dim, alibi = a->cfg.alibi;
    cl_int nqh = a->cfg.n_q_heads, nkv = a->cfg.n_kv_heads, nb = (cl_int)lz_pool_n_blocks(pool);
    cl_int ns = (cl_int)n_splits, nt = (cl_int)n_table, eps = (cl_int)per_split;
    cl_float scale = a->cfg.scale;
    lz_args g = {fast ? a->nv_decode : a->kernels[LZ_K_DECODE], 0, CL_SUCCESS};
    LZ_ARG(&g, d->q); LZ_ARG(&g, d->q_pos); LZ_ARG(&g, d->seq_offsets); LZ_ARG(&g, d->table);
    LZ_ARG(&g, d->entry_pos); LZ_ARG(&g, kc); LZ_ARG(&g, vc); LZ_ARG(&g, a->part_ml);
    LZ_ARG(&g, a->part_acc);
    if (fast) {
        LZ_ARG(&g, d->out);
        LZ_ARG(&g, a->err); /* (the kernel's counts argument, unread) */
    }
    LZ_ARG(&g, a->freq); LZ_ARG(&g, a->slopes); LZ_ARG(&g, style);
    LZ_ARG(&g, rot); LZ_ARG(&g, alibi); LZ_ARG(&g, scale); LZ_ARG(&g, eps); LZ_ARG(&g, ns);
    LZ_ARG(&g, nqh); LZ_ARG(&g, nkv); LZ_ARG(&g, nb); LZ_ARG(&g, nt); LZ_ARG(&g, a->err);
    cl_int q_dtype = (cl_int)d->q_dtype;
    if (!fast) LZ_ARG(&g, q_dtype);
    if (fast) {
        if (g.err != CL_SUCCESS) return lz_cl_fail(g.err, "lazyattn_decode: clSetKernelArg");
        /* one warp per (split, KV head, sequence); one split writes out itself */
        size_t local[3] = {32, 1, 1};
        size_t global[3] = {(size_t)32 * (size_t)n_splits, (size_t)nkv, (size_t)d->n_seqs};
        const int one = n_splits == 1;
        cl_event split_ev = NULL;
        cl_int err = clEnqueueNDRangeKernel(lz_queue(a->ctx, queue), a->nv_decode, 3, NULL, global, local, 0,
                                            NULL, a->ov.nv_decode_times == 1 ? &split_ev : one ? event : NULL);
        if (err != CL_SUCCESS) return lz_cl_fail(err, fn);
        /* the last launch's event, where the caller or the diagnostic times want it */
        cl_event last_ev = one ? split_ev : NULL;
        if (!one) {
            st = lz_decode_nv_reduce_launch(a, d, n_splits, queue, split_ev ? &last_ev : event);
            if (!st && split_ev) lz_log_decode_times(a, split_ev, last_ev, n_splits);
            if (split_ev) clReleaseEvent(split_ev);
        } else if (split_ev) {
            lz_log_decode_times(a, split_ev, NULL, n_splits);
        }
        if (last_ev) {
            if (event) *event = last_ev;
            else clReleaseEvent(last_ev);
        }
        return st;
    } else {
        if (g.err != CL_SUCCESS) return lz_cl_fail(g.err, "lazyattn_decode: clSetKernelArg");
        /* one work-group per (split, KV head x subset of its heads, sequence) */
        size_t local[3] = {(size_t)a->tune.decode.work_group, 1, 1};
        size_t global[3] = {local[0] * (size_t)n_splits, (size_t)nkv * (size_t)(a->group / a->tune.decode.rows),
                            (size_t)d->n_seqs};
        st = lz_enqueue(a, LZ_K_DECODE, 3, global, local, queue, NULL, fn);
        if (st) return st;
    }

    cl_int n_seqs = d->n_seqs;
    const int rk = lz_reduce_kernel(a, n_splits);
    lz_args r = {a->kernels[rk], 0, CL_SUCCESS};
    LZ_ARG(&r, a->part_ml); LZ_ARG(&r, a->part_acc); LZ_ARG(&r, d->out); LZ_ARG(&r, ns);
    LZ_ARG(&r, nqh); LZ_ARG(&r, n_seqs);
    cl_mem lse = d->lse ? d->lse : a->err; /* lse, has_lse, out_dtype */
    cl_int has_lse = d->lse != NULL, out_dtype = (cl_int)d->out_dtype;
    LZ_ARG(&r, lse); LZ_ARG(&r, has_lse); LZ_ARG(&r, out_dtype);
    if (r.err != CL_SUCCESS) return lz_cl_fail(r.err, "lazyattn_decode: clSetKernelArg (reduce)");
    size_t rglobal[3] = {(size_t)a->cfg.head_dim, (size_t)nqh, (size_t)d->n_seqs};
    size_t rlocal[3] = {(size_t)a->cfg.head_dim, 1, 1};
    if (rk == LZ_K_REDUCE_SPLITS) lz_decode_warp_reduce_geometry(a, n_splits, &rglobal[0], &rlocal[0]);
    return lz_enqueue(a, rk, 3, rglobal, rlocal, queue, event, fn);
}
