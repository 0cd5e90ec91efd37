/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Writes K/V of new tokens into their pool slots, K rotated at its stored
 * position. One work-item per (pair of dims, kv head, token).
 *   k, v:       [n_tokens, n_kv_heads, LZ_HEAD_DIM] f32, k unrotated
 *   slots:      [n_tokens] block * LZ_BLOCK + offset
 *   stored_pos: [n_tokens]
 *   kc, vc:     pool buffers [n_blocks, n_kv_heads] pages (cl/storage.h)
 */
__kernel void lz_kv_write(__global const float *k, __global const float *v,
                          __global const int *slots, __global const int *stored_pos,
                          __global LZ_STORE_T *kc, __global LZ_STORE_T *vc,
                          __global const float2 *freq, int rope_style, int rot_dim,
                          int n_tokens, int n_kv_heads, int n_blocks, __global int *err) {
    int p = get_global_id(0), h = get_global_id(1), t = get_global_id(2);
    if (p >= LZ_HEAD_DIM / 2 || h >= n_kv_heads || t >= n_tokens) return;
    int slot = slots[t], pos = stored_pos[t];
    if (slot < 0 || slot / LZ_BLOCK >= n_blocks) {
        lz_raise(err, LZ_ERR_SLOT);
        return;
    }
    if (pos < 0 || pos > LZ_MAX_POSITION) {
        lz_raise(err, LZ_ERR_POSITION);
        return;
    }
    int2 d = lz_rope_pair(p, rope_style, rot_dim);
    size_t src = ((size_t)t * n_kv_heads + h) * LZ_HEAD_DIM;
    size_t dst = lz_kv_offset(slot / LZ_BLOCK, h, n_kv_heads, slot % LZ_BLOCK);
    float2 x = lz_rotate((float2)(k[src + d.x], k[src + d.y]),
                         lz_rope_cs(pos, p, rope_style, rot_dim, freq));
    const size_t dx = dst + LZ_KV_DIM(d.x), dy = dst + LZ_KV_DIM(d.y);
    LZ_STORE(kc, dx, x.x);
    LZ_STORE(kc, dy, x.y);
    LZ_STORE(vc, dx, v[src + d.x]);
    LZ_STORE(vc, dy, v[src + d.y]);
}
