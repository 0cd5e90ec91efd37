/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The persistent wgmma prefill (LZ_NV_PERSIST, after prefill_wgmma.cl): the
 * host launches a work-group a SM, each running a list of tasks (token
 * tile, KV head) with one set of rings.
 */
/* Task k of persistent work-group w of nwg (lz_prefill_nv with
 * LZ_NV_PERSIST): tile * n_kv_heads + KV head, or -1 past its last. With
 * the host's lists, order[k * nwg + w] (a negative entry ends the list);
 * without, tasks w, w + nwg, w + 2 nwg, ... of the kernel's own order (head
 * by head, later token tiles first). Out-of-range entries end the list. */
inline int lz_nv_task(__global const int *order, int k, int w, int nwg, int n_tok_tiles, int n_kv_heads) {
    const long n_tasks = (long)n_tok_tiles * n_kv_heads, i = (long)k * nwg + w;
    if (order) {
        const int task = order[i];
        return task >= 0 && task < n_tasks ? task : -1;
    }
    if (i >= n_tasks) return -1;
    const int head = (int)(i / n_tok_tiles), tile = n_tok_tiles - 1 - (int)(i % n_tok_tiles);
    return tile * n_kv_heads + head;
}

/* The latest and earliest positions (lz_nv_query_pos) of the task's active
 * rows tok0 .. tok0 + rows - 1 (those before n_queries), alike in every lane
 * of the warp; with check, the rows' bad positions recorded. */
__attribute__((always_inline)) inline void lz_nv_task_positions(__global const int *q_pos, int tok0, int rows,
                                                                int n_queries, __global int *err, int check,
                                                                int lane, int *max_pos, int *min_pos) {
    int hi = -1, lo = INT_MAX;
    for (int r = tok0 + lane; r < tok0 + rows && r < n_queries; r += 32) {
        if (check && !LZ_POSITION_OK(q_pos[r])) lz_raise(err, LZ_ERR_QUERY_POSITION);
        const int p = lz_nv_query_pos(q_pos, r, n_queries);
        hi = p > hi ? p : hi, lo = p < lo ? p : lo;
    }
    asm volatile("redux.sync.max.s32 %0, %0, 0xffffffff;" : "+r"(hi));
    asm volatile("redux.sync.min.s32 %0, %0, 0xffffffff;" : "+r"(lo));
    *max_pos = hi, *min_pos = lo;
}

/* A copying warp of the producer over its work-group's tasks (role and t as
 * lz_nv_produce), the K and V rings' items numbered on across them; each
 * task's (first row, KV head, earliest position) handed to the consumers
 * with its first item, a stop marker (-2) after the last. The warps that
 * write the entries record the tasks' bad query positions. */
__attribute__((always_inline)) inline void
lz_nv_produce_tasks(__global const int *q_pos, __global const ulong *table, __global const int *entry_pos,
                    __global const ushort *kc, __global const ushort *vc, __global const int *order,
                    int n_queries, int n_entries, int n_kv_heads, int n_blocks, int rows, int n_tok_tiles,
                    int rope_style, uint kbase, uint vbase, __local int4 (*meta)[LZ_NV_EPT],
                    __local int4 *tasks, uint bars, __global int *err, int t, int role) {
    const int w = get_group_id(0), nwg = get_num_groups(0);
    int kn = 0, vn = 0;
    for (int k = 0;; k++) {
        const int task = lz_nv_task(order, k, w, nwg, n_tok_tiles, n_kv_heads);
        int kvh = 0, tok0 = 0, max_pos = -1, min_pos = -1;
        if (task >= 0) {
            const int tile = task / n_kv_heads;
            kvh = task - tile * n_kv_heads, tok0 = tile * rows;
            lz_nv_task_positions(q_pos, tok0, rows, n_queries, err, role != 2 && t < 32, t & 31, &max_pos,
                                 &min_pos);
        }
        lz_nv_produce(kc, vc, table, entry_pos, kvh, n_kv_heads, n_entries, n_blocks, max_pos, min_pos,
                      rope_style, kbase, vbase, meta, bars, t, role, &kn, &vn, task < 0 ? -2 : -1, tasks,
                      (int4)(tok0, kvh, min_pos, 0));
        if (task < 0) break;
    }
    LZ_NV_CP_WAIT_ALL(); /* nothing in flight when the warp ends */
}

/*
 * The persistent prefill (LZ_NV_PERSIST): get_num_groups(0)
 * work-groups (the host launches one a SM) each run a list of tasks (token
 * tile, KV head; lz_nv_task), each as one work-group of lz_prefill_nv_rows
 * would, with one set of rings for all: the producer walks on into the next
 * task's tiles while the consumers finish one (the end of a task, O's
 * store, the next task's queries), so that a task no longer starts with its
 * first copies in series (q_pos, the table, then K) nor ends with the
 * tensor cores drained, and no work-group starts or ends per task. No
 * barrier across the work-group after the start: each warp finds the
 * task's positions itself (lz_nv_task_positions).
 */
__attribute__((always_inline)) inline void
lz_prefill_nv_persist(__global const float *q, __global const int *q_pos, __global const ulong *table,
                      __global const int *entry_pos, __global const ushort *kc, __global const ushort *vc,
                      __global float *out, __global const float2 *freq, int rope_style, int rot_dim,
                      float scale, int n_queries, int n_entries, int n_q_heads, int n_kv_heads,
                      int n_blocks, __global int *err, __global const int *order, __local uchar *kring,
                      __local uchar *vring, __local int4 (*meta)[LZ_NV_EPT], __local int4 *tasks,
                      __local ulong *mbar) {
    const int lid = get_local_id(0);
    const int lane = lid & 31, warp = lid >> 5;
    const int G = n_q_heads / n_kv_heads, WM = LZ_NV_WARPS / G;
    const int gh = warp % G, mi = warp / G, g = lane >> 2;
    const int rows = 16 * WM, n_tok_tiles = (n_queries + rows - 1) / rows;
    const int w = get_group_id(0), nwg = get_num_groups(0);

    /* bad entries are flagged once, each work-group a share */
    LZ_NV_FLAG_ENTRIES(table, entry_pos, n_entries, n_blocks, err, w * LZ_NV_WG_THREADS + lid,
                       nwg * LZ_NV_WG_THREADS);
    if (lid == 0) lz_nv_ring_init(LZ_NV_SMEM(mbar));
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint kbase = LZ_NV_SMEM(kring), vbase = LZ_NV_SMEM(vring), bars = LZ_NV_SMEM(mbar);
    if (warp >= LZ_NV_WARPS) {
#ifdef LZ_NV_PREGS
        LZ_NV_SETMAXNREG(dec, LZ_NV_PREGS);
#endif
        const int pw = warp - LZ_NV_WARPS; /* the warp in the producer's warpgroup */
#define LZ_NV_PRODUCE_TASKS(role)                                                                  \
    lz_nv_produce_tasks(q_pos, table, entry_pos, kc, vc, order, n_queries, n_entries, n_kv_heads, n_blocks, \
                        rows, n_tok_tiles, rope_style, kbase, vbase, meta, tasks, bars, err,           \
                        lane + 32 * (pw % LZ_NV_KWARPS), role)
        LZ_NV_PRODUCER_ROLE(pw, LZ_NV_PRODUCE_TASKS);
#undef LZ_NV_PRODUCE_TASKS
        return;
    }
#ifdef LZ_NV_CREGS
    LZ_NV_SETMAXNREG(inc, LZ_NV_CREGS);
#endif
    /* the tasks as the producer hands them on (the first item of each) */
    for (int kn = 0, vn = 0;;) {
        lz_nv_mbar_wait(LZ_NV_KFULL(bars, kn % LZ_NV_KSLOTS), (uint)(kn / LZ_NV_KSLOTS) & 1);
        if (LZ_NV_UNIFORM(meta[kn % LZ_NV_NMETA][0].w) == -2) break; /* no more */
        int4 task = tasks[kn % LZ_NV_NMETA]; /* first row, KV head, earliest position */
        task.x = LZ_NV_UNIFORM(task.x), task.y = LZ_NV_UNIFORM(task.y), task.z = LZ_NV_UNIFORM(task.z);
        const int r0 = task.x + mi * 16 + g;
        const int qp0 = lz_nv_query_pos(q_pos, r0, n_queries), qp1 = lz_nv_query_pos(q_pos, r0 + 8, n_queries);
        lz_nv_consume(q, out, freq, rope_style, rot_dim, scale, n_queries, n_q_heads, task.y * G + gh, r0, qp0,
                      qp1, task.z, kbase, vbase, meta, bars, warp, &kn, &vn);
    }
}
