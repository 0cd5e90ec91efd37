/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVIDIA prefill's kernels (after the variant's files): lz_prefill_nv,
 * a work-group a (token tile, KV head) or persistent (LZ_NV_PERSIST), and
 * the batched ragged prefill lz_prefill_nv_batched, a work-group a (token
 * tile, KV head, sequence); both run lz_prefill_nv_rows of the variant.
 */
__kernel __attribute__((reqd_work_group_size(LZ_NV_WG_THREADS, 1, 1))) void
lz_prefill_nv(__global const float *q, __global const int *q_pos, __global const ulong *table,
              __global const int *entry_pos, __global const ushort *kc, __global const ushort *vc,
              __global float *out, __global const float2 *freq, __global const float *slopes,
              int rope_style, int rot_dim, int alibi, float scale, int n_queries, int n_entries,
              int n_q_heads, int n_kv_heads, int n_blocks, __global int *err,
              __global const int *order) {
    __local uchar kring[LZ_NV_KRING * LZ_NV_MAT_BYTES] __attribute__((aligned(128)));
    __local uchar vring[LZ_NV_VSLOTS * LZ_NV_MAT_BYTES] __attribute__((aligned(128)));
    /* per tile: (start, delta, length, tile; with LZ_NV_PFLAGS entry 0's w the tile's flags) */
    __local int4 meta[LZ_NV_NMETA][LZ_NV_EPT];
    __local ulong mbar[LZ_NV_MBARS] __attribute__((aligned(8)));
    (void)slopes, (void)alibi; /* ALiBi configurations take the portable path */
#if LZ_NV_PERSIST
    __local int4 tasks[LZ_NV_NMETA]; /* per meta slot: (first row, KV head, earliest position) */
    lz_prefill_nv_persist(q, q_pos, table, entry_pos, kc, vc, out, freq, rope_style, rot_dim, scale, n_queries,
                          n_entries, n_q_heads, n_kv_heads, n_blocks, err, order, kring, vring, meta, tasks,
                          mbar);
#else
    const int WM = LZ_NV_WARPS / (n_q_heads / n_kv_heads);
    /* Which token tile and KV head: the task order[linear id] = tile *
     * n_kv_heads + head (lib/prefill_order.c: the order that ends the launch
     * soonest by its estimate); without it, head by head, later token tiles
     * (more keys when causal) first. */
    int tile = get_num_groups(0) - 1 - get_group_id(0), kvh = get_group_id(1);
    if (order) {
        const int task = order[get_group_id(0) + get_num_groups(0) * get_group_id(1)];
        tile = task / n_kv_heads, kvh = task - tile * n_kv_heads;
    }
    lz_prefill_nv_rows(q, q_pos, table, entry_pos, kc, vc, out, freq, rope_style, rot_dim, scale,
                       n_queries, n_entries, n_q_heads, n_kv_heads, n_blocks, err, kvh,
                       tile * 16 * WM, get_group_id(0) == 0 && get_group_id(1) == 0, kring, vring,
                       meta, mbar);
#endif
}

/*
 * Batched ragged prefill (lazyattn_prefill_batched), the same semantics as
 * lz_prefill_batched (prefill_batched.cl): work-group (tile, KV head,
 * sequence) of global (max_tiles * LZ_NV_THREADS, n_kv_heads, n_seqs),
 * max_tiles = ceil(max_queries / (16 * WM)). Sequence s is rows
 * q_indptr[s] .. q_indptr[s+1]-1 over entries table_indptr[s] ..
 * table_indptr[s+1]-1, run by lz_prefill_nv_rows on pointers moved to its
 * first row and entry, so its tiles and results are those of lz_prefill_nv
 * on that sequence alone. Bad offsets (negative, decreasing, past n_queries
 * or n_entries, more than max_queries rows): the sequence is skipped whole
 * and LZ_ERR_TABLE recorded; so are the sequences after a decrease of
 * q_indptr (their rows could overlap). Work-groups past a sequence's rows
 * return at once (before any barrier).
 */
__kernel __attribute__((reqd_work_group_size(LZ_NV_WG_THREADS, 1, 1))) void
lz_prefill_nv_batched(__global const float *q, __global const int *q_pos,
                      __global const int *q_indptr, __global const int *table_indptr,
                      __global const ulong *table, __global const int *entry_pos,
                      __global const ushort *kc, __global const ushort *vc, __global float *out,
                      __global const float2 *freq, __global const float *slopes, int rope_style,
                      int rot_dim, int alibi, float scale, int n_queries, int n_entries,
                      int max_queries, int n_q_heads, int n_kv_heads, int n_blocks,
                      __global int *err) {
    __local uchar kring[LZ_NV_KRING * LZ_NV_MAT_BYTES] __attribute__((aligned(128)));
    __local uchar vring[LZ_NV_VSLOTS * LZ_NV_MAT_BYTES] __attribute__((aligned(128)));
    __local int4 meta[LZ_NV_NMETA][LZ_NV_EPT];
    __local ulong mbar[LZ_NV_MBARS] __attribute__((aligned(8)));
    (void)slopes, (void)alibi;
    const int seq = get_group_id(2), kvh = get_group_id(1);
    const int q_begin = q_indptr[seq], q_end = q_indptr[seq + 1];
    const int t_begin = table_indptr[seq], t_end = table_indptr[seq + 1];
    const int bad =
        LZ_BATCH_OFFSETS_BAD(q_begin, q_end, t_begin, t_end, n_queries, n_entries, max_queries);
    if (bad) {
        if (get_group_id(0) == 0 && kvh == 0 && get_local_id(0) == 0) lz_raise(err, LZ_ERR_TABLE);
        return;
    }
    const int WM = LZ_NV_WARPS / (n_q_heads / n_kv_heads), rows = q_end - q_begin;
    /* later token blocks first, counted from this sequence's last tile */
    const int n_tiles = (rows + 16 * WM - 1) / (16 * WM);
    const int tile = n_tiles - 1 - (int)get_group_id(0);
    if (tile < 0) return; /* past this sequence's rows (or an empty sequence) */
    /* rows of two sequences never overlap: run only when q_indptr is
     * non-decreasing up to here (the sequence where it decreases records it) */
    __local int disorder;
    if (get_local_id(0) == 0) disorder = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = get_local_id(0); i < seq; i += LZ_NV_WG_THREADS)
        if (q_indptr[i] > q_indptr[i + 1]) atomic_or(&disorder, 1);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (disorder) return;
    const size_t row0 = (size_t)q_begin * n_q_heads * LZ_HEAD_DIM;
    lz_prefill_nv_rows(q + row0, q_pos + q_begin, table + t_begin, entry_pos + t_begin, kc, vc,
                       out + row0, freq, rope_style, rot_dim, scale, rows, t_end - t_begin,
                       n_q_heads, n_kv_heads, n_blocks, err, kvh, tile * 16 * WM,
                       tile == n_tiles - 1 && kvh == 0, kring, vring, meta, mbar);
}

