/*
 * Lazy decode, portable path: one query token per sequence, split along the
 * KV length; lz_decode_reduce combines the splits.
 *
 * Work-group: one (split, KV head, sequence), local size (LZ_BLOCK, G):
 * work-item (j, g) scores key j of the current block against query head g
 * of the KV head's group, then accumulates dims j, j + LZ_BLOCK, ... of the
 * output. K and V are read once per group, as a non-lazy kernel reads them:
 * the laziness costs only a re-rotation of the G queries by -delta when the
 * delta changes from one entry to the next (once per document).
 *   q:           [n_seqs, n_q_heads, LZ_HEAD_DIM] f32, rotated at q_pos
 *   seq_offsets: [n_seqs + 1]; table, entry_pos: [seq_offsets[n_seqs]]
 *   part_ml:     [n_seqs, n_q_heads, n_splits] (running max, sum)
 *   part_acc:    [n_seqs, n_q_heads, n_splits, LZ_HEAD_DIM] unnormalised
 *   q_rot, s:    local [G * LZ_HEAD_DIM], [G * LZ_BLOCK]
 */
#define LZ_DIMS_PER_ITEM ((LZ_HEAD_DIM + LZ_BLOCK - 1) / LZ_BLOCK)

__kernel void lz_decode(__global const float *q, __global const int *q_pos,
                        __global const int *seq_offsets, __global const ulong *table,
                        __global const int *entry_pos, __global const LZ_STORE_T *kc,
                        __global const LZ_STORE_T *vc, __global float2 *part_ml,
                        __global float *part_acc, __global const float2 *freq,
                        __global const float *slopes, int rope_style, int rot_dim, int alibi,
                        float scale, int entries_per_split, int n_splits, int n_q_heads,
                        int n_kv_heads, int n_blocks, int n_table, __global int *err,
                        __local float *q_rot, __local float *s) {
    const int j = get_local_id(0), g = get_local_id(1), group_size = (int)get_local_size(1);
    const int lid = g * LZ_BLOCK + j, wg = LZ_BLOCK * group_size;
    const int split = get_group_id(0), kvh = get_group_id(1), seq = get_group_id(2);
    const int h = kvh * group_size + g;
    const int begin = seq_offsets[seq], end = seq_offsets[seq + 1];
    const int bad_table = begin < 0 || end < begin || end > n_table ||
                          end - begin > entries_per_split * n_splits;
    if (bad_table && split == 0 && j == 0 && g == 0) lz_raise(err, LZ_ERR_TABLE);
    const int first = bad_table ? 0 : begin + split * entries_per_split;
    const int last = bad_table ? 0 : min(end, first + entries_per_split);
    /* a query position outside 0..LZ_MAX_POSITION is recorded and sees no key */
    const int qp_in = q_pos[seq];
    const int bad_q = !LZ_POSITION_OK(qp_in);
    if (bad_q && split == 0 && j == 0 && g == 0) lz_raise(err, LZ_ERR_QUERY_POSITION);
    const int qp = bad_q ? -1 : qp_in;
    const float slope = alibi ? slopes[h] : 0.0f;
    __global const float *qg = q + ((size_t)seq * n_q_heads + kvh * group_size) * LZ_HEAD_DIM;

    float acc[LZ_DIMS_PER_ITEM];
    for (int k = 0; k < LZ_DIMS_PER_ITEM; k++) acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    int cur_delta = 0;
    for (int i = lid; i < group_size * LZ_HEAD_DIM; i += wg) q_rot[i] = qg[i];

    for (int e = first; e < last; e++) {
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
        if (rope_style != LZ_ROPE_NONE && delta != cur_delta) {
            /* a new document: q' = R(-delta) q, from the original query */
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int i = lid; i < group_size * (LZ_HEAD_DIM / 2); i += wg) {
                const int gg = i / (LZ_HEAD_DIM / 2), p = i % (LZ_HEAD_DIM / 2);
                const int2 d = lz_rope_pair(p, rope_style, rot_dim);
                const float2 x = lz_rotate((float2)(qg[gg * LZ_HEAD_DIM + d.x], qg[gg * LZ_HEAD_DIM + d.y]),
                                           lz_rope_cs(-delta, p, rope_style, rot_dim, freq));
                q_rot[gg * LZ_HEAD_DIM + d.x] = x.x;
                q_rot[gg * LZ_HEAD_DIM + d.y] = x.y;
            }
            cur_delta = delta;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        float sc = -INFINITY;
        if (j < len && pos0 + j <= qp) {
            const size_t o = lz_kv_offset(blk, kvh, n_kv_heads, j);
            float dot = 0.0f;
            for (int i = 0; i < LZ_HEAD_DIM; i++) dot = fma(q_rot[g * LZ_HEAD_DIM + i], LZ_LOAD(kc, o + i), dot);
            sc = dot * scale + slope * (float)(pos0 + j - qp);
        }
        s[g * LZ_BLOCK + j] = sc;
        barrier(CLK_LOCAL_MEM_FENCE);

        float tile_max = -INFINITY;
        for (int jj = 0; jj < len; jj++) tile_max = fmax(tile_max, s[g * LZ_BLOCK + jj]);
        if (tile_max == -INFINITY) continue;
        const float m_new = fmax(m, tile_max), alpha = exp(m - m_new);
        l *= alpha;
        for (int k = 0; k < LZ_DIMS_PER_ITEM; k++) acc[k] *= alpha;
        const size_t vo = lz_kv_offset(blk, kvh, n_kv_heads, 0);
        for (int jj = 0; jj < len; jj++) {
            const float pj = exp(s[g * LZ_BLOCK + jj] - m_new);
            l += pj;
            for (int k = 0; k < LZ_DIMS_PER_ITEM; k++) {
                const int i = j + k * LZ_BLOCK;
                if (i < LZ_HEAD_DIM) acc[k] = fma(pj, LZ_LOAD(vc, vo + (size_t)jj * LZ_HEAD_DIM + i), acc[k]);
            }
        }
        m = m_new;
    }

    const size_t part = ((size_t)seq * n_q_heads + h) * n_splits + split;
    if (j == 0) part_ml[part] = (float2)(m, l);
    for (int k = 0; k < LZ_DIMS_PER_ITEM; k++) {
        const int i = j + k * LZ_BLOCK;
        if (i < LZ_HEAD_DIM) part_acc[part * LZ_HEAD_DIM + i] = acc[k];
    }
}

/* out[seq, h, :] = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M); zeros
 * when no key was visible. One work-item per (dim, head, sequence). */
__kernel void lz_decode_reduce(__global const float2 *part_ml, __global const float *part_acc,
                               __global float *out, int n_splits, int n_q_heads, int n_seqs) {
    const int i = get_global_id(0), h = get_global_id(1), seq = get_global_id(2);
    if (i >= LZ_HEAD_DIM || h >= n_q_heads || seq >= n_seqs) return;
    const size_t base = ((size_t)seq * n_q_heads + h) * n_splits;
    float big = -INFINITY;
    for (int s = 0; s < n_splits; s++) big = fmax(big, part_ml[base + s].x);
    float num = 0.0f, den = 0.0f;
    if (big != -INFINITY)
        for (int s = 0; s < n_splits; s++) {
            const float2 ml = part_ml[base + s];
            if (ml.y == 0.0f) continue;
            const float wgt = exp(ml.x - big);
            den = fma(ml.y, wgt, den);
            num = fma(part_acc[(base + s) * LZ_HEAD_DIM + i], wgt, num);
        }
    out[((size_t)seq * n_q_heads + h) * LZ_HEAD_DIM + i] = den > 0.0f ? num / den : 0.0f;
}
