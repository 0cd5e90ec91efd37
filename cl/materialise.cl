/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The position-aware baseline's copy: block src -> block dst, K re-rotated
 * by the entry's delta (so the copy's stored start is the logical start),
 * V copied. One work-item per (pair of dims, kv head, copy * LZ_BLOCK + token).
 *   src: [n] packed entries, dst: [n] block ids
 */
__kernel void lz_materialise(__global const ulong *src, __global const int *dst,
                             __global LZ_STORE_T *kc, __global LZ_STORE_T *vc,
                             __global const float2 *freq, int rope_style, int rot_dim, int n,
                             int n_kv_heads, int n_blocks, __global int *err) {
    int p = get_global_id(0), h = get_global_id(1), ct = get_global_id(2);
    int c = ct / LZ_BLOCK, t = ct % LZ_BLOCK;
    if (p >= LZ_HEAD_DIM / 2 || h >= n_kv_heads || c >= n) return;
    ulong w = src[c];
    int sb = LAZYATTN_ENTRY_BLOCK(w), len = LAZYATTN_ENTRY_LENGTH(w);
    int delta = LAZYATTN_ENTRY_DELTA(w), db = dst[c];
    if (sb >= n_blocks || db < 0 || db >= n_blocks) {
        lz_raise(err, LZ_ERR_BLOCK);
        return;
    }
    if (len > LZ_BLOCK) {
        lz_raise(err, LZ_ERR_LENGTH);
        return;
    }
    if (t >= len) return;
    int2 d = lz_rope_pair(p, rope_style, rot_dim);
    const size_t so = lz_kv_offset(sb, h, n_kv_heads, t), dof = lz_kv_offset(db, h, n_kv_heads, t);
    const size_t dx = LZ_KV_DIM(d.x), dy = LZ_KV_DIM(d.y);
    float2 x = lz_rotate((float2)(LZ_LOAD(kc, so + dx), LZ_LOAD(kc, so + dy)),
                         lz_rope_cs(delta, p, rope_style, rot_dim, freq));
    LZ_STORE(kc, dof + dx, x.x);
    LZ_STORE(kc, dof + dy, x.y);
    LZ_STORE(vc, dof + dx, LZ_LOAD(vc, so + dx));
    LZ_STORE(vc, dof + dy, LZ_LOAD(vc, so + dy));
}
