/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Rotary embedding on the device.
 *
 * Angles are computed in the kernel, not read from a position-indexed
 * table: deltas reach 2^24, a table for every position would be large and
 * a read per pair per tile, while the computation below is a handful of
 * fused multiply-adds. The frequency f_i arrives as an f32 pair (hi, lo)
 * with hi + lo = f_i to ~48 bits; pos * f_i is formed exactly as a two-float
 * sum with fma, then reduced modulo 2*pi Cody-Waite style, so the angle is
 * accurate to ~1e-6 rad at any position up to 2^24, where a plain f32
 * product would be off by up to 0.5 rad.
 *
 * Pairing: pair p < rot_dim/2 holds dims (p, p + rot_dim/2) for NeoX and
 * (2p, 2p + 1) for GPT-J, rotated by angle(pos, f_p); pairs at and past
 * rot_dim/2 are (2p, 2p + 1) and are not rotated (partial rotary).
 */
/* The style codes LZ_ROPE_* are in cl/kernel_abi.h. */

inline float lz_rope_angle(int pos, float2 f) {
    float p = (float)pos; /* exact: |pos| < 2^24 */
    float a = p * f.x;
    float e = fma(p, f.x, -a); /* rounding error of p * hi, exactly */
    e = fma(p, f.y, e);
    float n = rint(a * 0.159154943091895336f);
    float r = fma(-n, 6.28318548202514648f, a); /* 2*pi rounded up to f32 */
    r = fma(-n, -1.74845553146951701e-07f, r);  /* 2*pi minus that */
    return r + e;
}

/* Dims of pair p (see above). */
inline int2 lz_rope_pair(int p, int style, int rot_dim) {
    if (p < rot_dim / 2 && style == LZ_ROPE_NEOX) return (int2)(p, p + rot_dim / 2);
    return (int2)(2 * p, 2 * p + 1);
}

/* cos and sin of the rotation of pair p at pos; (1, 0) when not rotated. */
inline float2 lz_rope_cs(int pos, int p, int style, int rot_dim, __global const float2 *freq) {
    if (style == LZ_ROPE_NONE || p >= rot_dim / 2) return (float2)(1.0f, 0.0f);
    float c;
    float s = sincos(lz_rope_angle(pos, freq[p]), &c);
    return (float2)(c, s);
}

inline float2 lz_rotate(float2 x, float2 cs) {
    return (float2)(x.x * cs.x - x.y * cs.y, x.x * cs.y + x.y * cs.x);
}
