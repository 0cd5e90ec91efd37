/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Batched ragged prefill, portable path: many sequences in one launch, each
 * a range of query rows over its own range of the block table, through the
 * tiled flash core (cl/flash.h) exactly as lz_prefill (cl/prefill.cl) runs
 * one sequence.
 *
 * Work-group (tile, KV head, sequence): global (max_tiles * LZ_FWG,
 * n_kv_heads, n_seqs), max_tiles = ceil(max_queries / (LZ_FR / LZ_G)).
 * Sequence s owns query rows q_indptr[s] .. q_indptr[s+1]-1 and table
 * entries table_indptr[s] .. table_indptr[s+1]-1; tile i of it covers its
 * rows i * LZ_FR / LZ_G .. (tiles aligned to the sequence's first row, as
 * lz_prefill aligns them to row 0, so every row meets the same tiles and
 * gives the same bits). A work-group past its sequence's last row returns
 * at once, before any barrier (the whole group: its bounds are uniform).
 *
 * Why the grid is (max tiles x sequences) and not a work list: the indptr
 * arrays live on the device, so a host-built list would need host copies
 * of them (which could disagree with the device's) and one more upload per
 * launch; a device-side search would cost every work-group a pass over
 * q_indptr. The empty work-groups of short sequences cost one read of two
 * offsets each.
 *
 * A sequence whose offsets are bad (negative, decreasing, past n_queries or
 * n_entries, or more than max_queries rows) is skipped whole: nothing of it
 * is read or written, LZ_ERR_TABLE is recorded (lazyattn_attention_check).
 * Sequences after a decrease of q_indptr are skipped too (their rows could
 * overlap an earlier sequence's: two work-groups would write one row).
 *   q:            [n_queries, n_q_heads, LZ_HEAD_DIM] q_dtype, rotated at q_pos
 *   q_pos:        [n_queries]
 *   q_indptr:     [n_seqs + 1]
 *   table_indptr: [n_seqs + 1]
 *   table:        [n_entries] packed entries
 *   entry_pos:    [n_entries]
 *   out:          [n_queries, n_q_heads, LZ_HEAD_DIM] out_dtype (rows of no sequence untouched)
 *   lse:          [n_queries, n_q_heads] f32 log-sum-exp, written when has_lse
 * q_dtype, out_dtype: 0 f32, 1 f16, 2 bf16 (lz_io_load4 / lz_io_store4).
 */
__kernel void lz_prefill_batched(__global const float *q, __global const int *q_pos,
                                 __global const int *q_indptr, __global const int *table_indptr,
                                 __global const ulong *table, __global const int *entry_pos,
                                 __global const LZ_STORE_T *kc, __global const LZ_STORE_T *vc,
                                 __global float *out, __global const float2 *freq,
                                 __global const float *slopes, int rope_style, int rot_dim,
                                 int alibi, float scale, int n_queries, int n_entries,
                                 int max_queries, int n_q_heads, int n_kv_heads, int n_blocks,
                                 __global int *err, __global float *lse, int has_lse,
                                 int q_dtype, int out_dtype) {
    LZ_FLASH_LOCAL(loc);
    /* group 0 takes the last tile (heavy first under a causal mask, as lz_prefill) */
    const int tile = get_num_groups(0) - 1 - get_group_id(0), kvh = get_group_id(1), seq = get_group_id(2);
    const int lid = get_local_id(0);
    const int q_begin = q_indptr[seq], q_end = q_indptr[seq + 1];
    const int t_begin = table_indptr[seq], t_end = table_indptr[seq + 1];
    const int bad =
        LZ_BATCH_OFFSETS_BAD(q_begin, q_end, t_begin, t_end, n_queries, n_entries, max_queries);
    if (bad) {
        if (tile == 0 && kvh == 0 && lid == 0) lz_raise(err, LZ_ERR_TABLE);
        return;
    }
    const int t0 = q_begin + tile * (LZ_FR / LZ_G);
    if (t0 >= q_end) return; /* past this sequence's rows (or an empty sequence) */
    /* rows of two sequences must never overlap: run only when q_indptr is
     * non-decreasing up to here (the sequence where it decreases records it) */
    __local int disorder;
    if (lid == 0) disorder = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = lid; i < seq; i += LZ_FWG)
        if (q_indptr[i] > q_indptr[i + 1]) atomic_or(&disorder, 1);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (disorder) return;

    float4 acc[LZ_OPI][LZ_FOM][LZ_FON / 4];
    lz_flash(q, q_pos, table, entry_pos, kc, vc, freq, slopes, rope_style, rot_dim, alibi, scale,
             n_q_heads, n_kv_heads, n_blocks, err, t0, q_end, kvh, t_begin, t_end, q_dtype, loc, acc);
    lz_flash_store(out, lse, has_lse, out_dtype, t0, q_end, kvh, n_q_heads, loc, acc);
}
