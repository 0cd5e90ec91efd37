/*
 * Lazy prefill, portable path: flash attention (online softmax) of a chunk
 * of queries over a block table.
 *
 * Work-group: LZ_BQ query rows x G query heads of one KV head (local size
 * (LZ_BQ, G)); each work-item owns one (query, head) row. Per table entry
 * the group stages the K tile once, rotated by the entry's delta while it
 * is staged (the trig of the tile is computed once, into cs), and V; every
 * row then uses the staged tile. Rows are visible to keys at logical
 * positions <= their own (entry_pos[e] + j for key j of entry e).
 *   q:         [n_queries, n_q_heads, LZ_HEAD_DIM] f32, rotated at q_pos
 *   q_pos:     [n_queries]
 *   table:     [n_entries] packed entries
 *   entry_pos: [n_entries]
 *   out:       [n_queries, n_q_heads, LZ_HEAD_DIM] f32
 */
#ifndef LZ_BQ
#define LZ_BQ 16
#endif

__kernel void lz_prefill(__global const float *q, __global const int *q_pos,
                         __global const ulong *table, __global const int *entry_pos,
                         __global const LZ_STORE_T *kc, __global const LZ_STORE_T *vc,
                         __global float *out, __global const float2 *freq,
                         __global const float *slopes, int rope_style, int rot_dim, int alibi,
                         float scale, int n_queries, int n_entries, int n_q_heads,
                         int n_kv_heads, int n_blocks, __global int *err) {
    __local float k_tile[LZ_BLOCK * LZ_HEAD_DIM];
    __local float v_tile[LZ_BLOCK * LZ_HEAD_DIM];
    __local float2 cs[LZ_HEAD_DIM / 2];
    __local int row_pos[LZ_BQ];

    const int row = get_local_id(0), g = get_local_id(1);
    const int group_size = (int)get_local_size(1);
    const int lid = g * LZ_BQ + row, wg = LZ_BQ * group_size;
    const int kvh = get_group_id(1), h = kvh * group_size + g;
    const int t = get_group_id(0) * LZ_BQ + row;
    const int active = t < n_queries;
    /* a query position outside 0..LZ_MAX_POSITION is recorded and sees no key */
    const int qp_in = active ? q_pos[t] : -1;
    const int bad_q = active && !LZ_POSITION_OK(qp_in);
    if (bad_q) lz_raise(err, LZ_ERR_QUERY_POSITION);
    const int qp = bad_q ? -1 : qp_in;

    /* the latest query position of the group: a tile past it is skipped */
    if (g == 0) row_pos[row] = qp;
    barrier(CLK_LOCAL_MEM_FENCE);
    int max_pos = -1;
    for (int r = 0; r < LZ_BQ; r++) max_pos = max(max_pos, row_pos[r]);

    float qv[LZ_HEAD_DIM], acc[LZ_HEAD_DIM];
    for (int i = 0; i < LZ_HEAD_DIM; i++) {
        qv[i] = active ? q[((size_t)t * n_q_heads + h) * LZ_HEAD_DIM + i] : 0.0f;
        acc[i] = 0.0f;
    }
    const float slope = alibi ? slopes[h] : 0.0f;
    float m = -INFINITY, l = 0.0f;

    for (int e = 0; e < n_entries; e++) {
        const ulong w = table[e];
        const int blk = LAZYATTN_ENTRY_BLOCK(w), len = LAZYATTN_ENTRY_LENGTH(w);
        const int delta = LAZYATTN_ENTRY_DELTA(w), pos0 = entry_pos[e];
        if (blk >= n_blocks || len > LZ_BLOCK) {
            if (lid == 0) lz_raise(err, blk >= n_blocks ? LZ_ERR_BLOCK : LZ_ERR_LENGTH);
            continue;
        }
        if (!LZ_ENTRY_POSITIONS_OK(pos0, delta, len)) { /* logical or stored start out of range */
            if (lid == 0) lz_raise(err, LZ_ERR_ENTRY_POSITION);
            continue;
        }
        if (pos0 > max_pos) continue; /* the whole tile is in every row's future */

        /* ---- stage the tile: one relative rotation by delta ---- */
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int p = lid; p < LZ_HEAD_DIM / 2; p += wg) cs[p] = lz_rope_cs(delta, p, rope_style, rot_dim, freq);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int i = lid; i < len * (LZ_HEAD_DIM / 2); i += wg) {
            const int j = i / (LZ_HEAD_DIM / 2), p = i % (LZ_HEAD_DIM / 2);
            const int2 d = lz_rope_pair(p, rope_style, rot_dim);
            const size_t o = lz_kv_offset(blk, kvh, n_kv_heads, j);
            const float2 x = lz_rotate((float2)(LZ_LOAD(kc, o + d.x), LZ_LOAD(kc, o + d.y)), cs[p]);
            k_tile[j * LZ_HEAD_DIM + d.x] = x.x;
            k_tile[j * LZ_HEAD_DIM + d.y] = x.y;
            v_tile[j * LZ_HEAD_DIM + d.x] = LZ_LOAD(vc, o + d.x);
            v_tile[j * LZ_HEAD_DIM + d.y] = LZ_LOAD(vc, o + d.y);
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* ---- scores and online softmax for this row, key by key: the
         * running sum is rescaled only when the maximum grows ---- */
        for (int j = 0; j < len; j++) {
            const int kp = pos0 + j;
            if (!active || kp > qp) continue;
            float dot = 0.0f;
            for (int i = 0; i < LZ_HEAD_DIM; i++) dot = fma(qv[i], k_tile[j * LZ_HEAD_DIM + i], dot);
            const float sc = dot * scale + slope * (float)(kp - qp);
            if (sc > m) {
                const float alpha = exp(m - sc);
                l *= alpha;
                for (int i = 0; i < LZ_HEAD_DIM; i++) acc[i] *= alpha;
                m = sc;
            }
            const float pj = exp(sc - m);
            l += pj;
            for (int i = 0; i < LZ_HEAD_DIM; i++) acc[i] = fma(pj, v_tile[j * LZ_HEAD_DIM + i], acc[i]);
        }
    }
    if (!active) return;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int i = 0; i < LZ_HEAD_DIM; i++) out[((size_t)t * n_q_heads + h) * LZ_HEAD_DIM + i] = acc[i] * inv;
}
