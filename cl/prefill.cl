/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lazy prefill, portable path: tiled flash attention (cl/flash.h) of a chunk
 * of queries over a block table.
 *
 * Work-group: LZ_FWG work-items for LZ_FR / LZ_G query tokens x the LZ_G
 * query heads of one KV head (global (n_tiles * LZ_FWG, n_kv_heads)). Rows
 * are visible to keys at logical positions <= their own (entry_pos[e] + j
 * for key j of entry e).
 *   q:         [n_queries, n_q_heads, LZ_HEAD_DIM] q_dtype, rotated at q_pos
 *   q_pos:     [n_queries]
 *   table:     [n_entries] packed entries
 *   entry_pos: [n_entries]
 *   out:       [n_queries, n_q_heads, LZ_HEAD_DIM] out_dtype
 *   lse:       [n_queries, n_q_heads] f32 log-sum-exp, written when has_lse
 * q_dtype, out_dtype: 0 f32, 1 f16, 2 bf16 (lz_io_load4 / lz_io_store4).
 */
__kernel void lz_prefill(__global const float *q, __global const int *q_pos,
                         __global const ulong *table, __global const int *entry_pos,
                         __global const LZ_STORE_T *kc, __global const LZ_STORE_T *vc,
                         __global float *out, __global const float2 *freq,
                         __global const float *slopes, int rope_style, int rot_dim, int alibi,
                         float scale, int n_queries, int n_entries, int n_q_heads,
                         int n_kv_heads, int n_blocks, __global int *err, __global float *lse, int has_lse,
                         int q_dtype, int out_dtype) {
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
    const int kvh = get_group_id(1), t0 = get_group_id(0) * (LZ_FR / LZ_G);
    float4 acc[LZ_OPI][LZ_FOM][LZ_FON / 4];
    float l[LZ_OPI][LZ_FOM];
    lz_flash(q, q_pos, table, entry_pos, kc, vc, freq, slopes, rope_style, rot_dim, alibi, scale,
             n_q_heads, n_kv_heads, n_blocks, err, t0, n_queries, kvh, 0, n_entries, q_dtype, loc, acc, l);
    lz_flash_store(out, lse, has_lse, out_dtype, t0, n_queries, kvh, n_q_heads, loc, acc, l);
}
