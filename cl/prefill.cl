/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lazy prefill, portable path: tiled flash attention (cl/flash.h) of a chunk
 * of queries over a block table.
 *
 * Work-group: LZ_FWG work-items for LZ_FR / LZ_G query tokens x the LZ_G
 * query heads of one KV head (global (n_tiles * LZ_FWG, n_kv_heads); group
 * 0 takes the last tile). Rows
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
    LZ_FLASH_LOCAL(loc);
    /* the last row tile first: under a causal mask it has the most keys, so
     * the heavy work-groups start first and the light ones fill the tail */
    const int kvh = get_group_id(1), t0 = (get_num_groups(0) - 1 - get_group_id(0)) * (LZ_FR / LZ_G);
    float4 acc[LZ_OPI][LZ_FOM][LZ_FON / 4];
    lz_flash(q, q_pos, table, entry_pos, kc, vc, freq, slopes, rope_style, rot_dim, alibi, scale,
             n_q_heads, n_kv_heads, n_blocks, err, t0, n_queries, kvh, 0, n_entries, q_dtype, loc, acc);
    lz_flash_store(out, lse, has_lse, out_dtype, t0, n_queries, kvh, n_q_heads, loc, acc);
}
