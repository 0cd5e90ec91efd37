/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Rotates x in place at per-token positions (queries at their logical
 * positions). One work-item per (pair of dims, head, token).
 *   x: [n_tokens, n_heads, LZ_HEAD_DIM] f32, pos: [n_tokens]
 */
__kernel void lz_rope_apply(__global float *x, __global const int *pos,
                            __global const float2 *freq, int rope_style, int rot_dim,
                            int n_tokens, int n_heads, __global int *err) {
    int p = get_global_id(0), h = get_global_id(1), t = get_global_id(2);
    if (p >= LZ_HEAD_DIM / 2 || h >= n_heads || t >= n_tokens) return;
    int at = pos[t];
    if (at < 0 || at > LZ_MAX_POSITION) {
        lz_raise(err, LZ_ERR_POSITION);
        return;
    }
    int2 d = lz_rope_pair(p, rope_style, rot_dim);
    size_t o = ((size_t)t * n_heads + h) * LZ_HEAD_DIM;
    float2 y = lz_rotate((float2)(x[o + d.x], x[o + d.y]), lz_rope_cs(at, p, rope_style, rot_dim, freq));
    x[o + d.x] = y.x;
    x[o + d.y] = y.y;
}
