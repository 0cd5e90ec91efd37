/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Writes K/V of new tokens into their pool slots, K rotated at its stored
 * position; lz_kv_write_rope_q also rotates the same tokens' queries (one
 * launch where lz_kv_write and lz_rope_apply take two). One work-item per
 * (pair of dims, head, token).
 *   k, v:       [n_tokens, n_kv_heads, LZ_HEAD_DIM] f32, k unrotated
 *   slots:      [n_tokens] block * LZ_BLOCK + offset
 *   stored_pos: [n_tokens]
 *   kc, vc:     pool buffers [n_blocks, n_kv_heads] pages (cl/storage.h)
 */

/* Pair p of KV head h of token t into its slot. */
static void lz_kv_write_pair(__global const float *k, __global const float *v,
                             __global const int *slots, __global const int *stored_pos,
                             __global LZ_STORE_T *kc, __global LZ_STORE_T *vc,
                             __global const float2 *freq, int rope_style, int rot_dim,
                             int n_kv_heads, int n_blocks, __global int *err, int p, int h, int t) {
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

__kernel void lz_kv_write(__global const float *k, __global const float *v,
                          __global const int *slots, __global const int *stored_pos,
                          __global LZ_STORE_T *kc, __global LZ_STORE_T *vc,
                          __global const float2 *freq, int rope_style, int rot_dim,
                          int n_tokens, int n_kv_heads, int n_blocks, __global int *err) {
    int p = get_global_id(0), h = get_global_id(1), t = get_global_id(2);
    if (p >= LZ_HEAD_DIM / 2 || h >= n_kv_heads || t >= n_tokens) return;
    lz_kv_write_pair(k, v, slots, stored_pos, kc, vc, freq, rope_style, rot_dim, n_kv_heads,
                     n_blocks, err, p, h, t);
}

/* lz_kv_write over heads 0 .. n_kv_heads - 1 of the grid, and
 * lz_rope_apply (cl/rope_apply.cl) of q at q_pos over heads n_kv_heads ..
 * n_kv_heads + n_q_heads - 1 (n_q_heads 0: no query rotated).
 *   q: [n_tokens, n_q_heads, LZ_HEAD_DIM] f32, rotated in place; q_pos: [n_tokens] */
__kernel void lz_kv_write_rope_q(__global const float *k, __global const float *v,
                                 __global const int *slots, __global const int *stored_pos,
                                 __global LZ_STORE_T *kc, __global LZ_STORE_T *vc,
                                 __global const float2 *freq, int rope_style, int rot_dim,
                                 int n_tokens, int n_kv_heads, int n_blocks, __global int *err,
                                 __global float *q, __global const int *q_pos, int n_q_heads) {
    int p = get_global_id(0), h = get_global_id(1), t = get_global_id(2);
    if (p >= LZ_HEAD_DIM / 2 || h >= n_kv_heads + n_q_heads || t >= n_tokens) return;
    if (h < n_kv_heads) {
        lz_kv_write_pair(k, v, slots, stored_pos, kc, vc, freq, rope_style, rot_dim, n_kv_heads,
                         n_blocks, err, p, h, t);
        return;
    }
    int at = q_pos[t];
    if (at < 0 || at > LZ_MAX_POSITION) {
        lz_raise(err, LZ_ERR_POSITION);
        return;
    }
    int2 d = lz_rope_pair(p, rope_style, rot_dim);
    size_t o = ((size_t)t * n_q_heads + (h - n_kv_heads)) * LZ_HEAD_DIM;
    float2 y = lz_rotate((float2)(q[o + d.x], q[o + d.y]), lz_rope_cs(at, p, rope_style, rot_dim, freq));
    q[o + d.x] = y.x;
    q[o + d.y] = y.y;
}
