/*
 * Lazy decode, portable path: one query token per sequence, split along the
 * KV length; lz_decode_reduce combines the splits.
 *
 * Work-group: one (split, KV head, sequence), LZ_FWG work-items running the
 * tiled flash core (cl/flash.h) with the LZ_G query heads of the KV head as
 * its rows (LZ_FR == LZ_G): each staged K/V tile is read from global memory
 * once for the whole group, with vector loads, K and V of a tile in flight
 * together (LZ_FKV). The query is re-rotated by -delta when the delta
 * changes (once per document).
 *   q:           [n_seqs, n_q_heads, LZ_HEAD_DIM] f32, rotated at q_pos
 *   seq_offsets: [n_seqs + 1]; table, entry_pos: [seq_offsets[n_seqs]]
 *   part_ml:     [n_seqs, n_q_heads, n_splits] (running max, sum)
 *   part_acc:    [n_seqs, n_q_heads, n_splits, LZ_HEAD_DIM] unnormalised
 */
__kernel void lz_decode(__global const float *q, __global const int *q_pos,
                        __global const int *seq_offsets, __global const ulong *table,
                        __global const int *entry_pos, __global const LZ_STORE_T *kc,
                        __global const LZ_STORE_T *vc, __global float2 *part_ml,
                        __global float *part_acc, __global const float2 *freq,
                        __global const float *slopes, int rope_style, int rot_dim, int alibi,
                        float scale, int entries_per_split, int n_splits, int n_q_heads,
                        int n_kv_heads, int n_blocks, int n_table, __global int *err) {
    __local float4 q_tile[LZ_FR * LZ_QS4];
    __local float4 k_tile[LZ_FTK * LZ_QS4];
#if LZ_FKV
    __local float4 v_tile[LZ_FTK * LZ_QS4];
#endif
    __local float p_tile[LZ_FR * LZ_FTK];
    __local float row[2 * LZ_FR];
    __local int key_pos[LZ_FTK];
    __local int row_pos[LZ_FR];
    __local ulong tab[LZ_TC];
    __local int tpos[LZ_TC];
    lz_flash_local loc;
    loc.q = q_tile, loc.k = k_tile, loc.p = p_tile, loc.row = row;
    loc.key_pos = key_pos, loc.row_pos = row_pos, loc.tab = tab, loc.tpos = tpos;
#if LZ_FKV
    loc.v = v_tile;
#else
    loc.v = k_tile;
#endif
    const int lid = get_local_id(0);
    const int split = get_group_id(0), kvh = get_group_id(1), seq = get_group_id(2);
    const int begin = seq_offsets[seq], end = seq_offsets[seq + 1];
    const int bad_table = begin < 0 || end < begin || end > n_table ||
                          end - begin > entries_per_split * n_splits;
    if (bad_table && split == 0 && lid == 0) lz_raise(err, LZ_ERR_TABLE);
    const int first = bad_table ? 0 : begin + split * entries_per_split;
    const int last = bad_table ? 0 : min(end, first + entries_per_split);

    float4 acc[LZ_OPI][LZ_FOM][LZ_FON / 4];
    float l[LZ_OPI][LZ_FOM];
    lz_flash(q, q_pos, table, entry_pos, kc, vc, freq, slopes, rope_style, rot_dim, alibi, scale,
             n_q_heads, n_kv_heads, n_blocks, err, seq, seq + 1, kvh, first, last, loc, acc, l);

    /* (max, sum) of each row from the work-item of its first dims */
    for (int o = 0; o < LZ_OPI; o++) {
        const int ot = lid + o * LZ_FWG, dt = ot % LZ_NODT, rt = ot / LZ_NODT;
        for (int m = 0; m < LZ_FOM; m++) {
            const int r = rt * LZ_FOM + m;
            if (ot < LZ_NOT && r < LZ_FR) {
                const size_t part = ((size_t)seq * n_q_heads + kvh * LZ_G + r) * n_splits + split;
                if (dt == 0) part_ml[part] = (float2)(row[r], l[o][m]);
                for (int c = 0; c < LZ_FON / 4; c++)
                    vstore4(acc[o][m][c], dt + c * LZ_NODT, part_acc + part * LZ_HEAD_DIM);
            }
        }
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
