/* SPDX-License-Identifier: Apache-2.0 */
/* Weights kept quantized on the device (serve/gemv_quant.h): the
 * decode-sized GEMV and the dequantizer of the prefill path, for Q8_0,
 * Q4_0, Q4_K, Q5_K and Q6_K blocks as a GGUF file stores them (layouts in
 * serve/quant.c). Both read a row as chunks of 32 consecutive values and
 * decode a chunk with the same function, whose arithmetic is quant.c's
 * to the bit (one rounding per product, no contraction into a
 * multiply-add): the dequantizer reproduces the host's values exactly and
 * the GEMV multiplies exactly those values.
 *
 * GEMV: one work-group of GQ_WG work-items per output row; work-item i
 * takes chunks i, i + GQ_WG, ... of the row, decodes each once and
 * multiplies it into every one of the 1..GQ_MAX_ROWS activation rows (the
 * weight is read once for all rows); the partial sums meet in a tree in
 * local memory. The block bytes are read 16 at a time where the layout
 * keeps them aligned (Q4_K, Q5_K), else 2 at a time; the chunks of
 * neighbouring work-items lie side by side in memory. Plain
 * OpenCL C 1.2, no extension (the f16 scales decoded with integer
 * arithmetic). */
#pragma OPENCL FP_CONTRACT OFF

#define GQ_WG 64       /* SERVE_GQ_WG in serve/gemv_quant.c */
#define GQ_MAX_ROWS 8  /* SERVE_QUANT_GEMV_MAX_ROWS in serve/gemv_quant.h */

/* The little-endian IEEE half at p (any alignment), exact: subnormals
 * as m * 2^-24 (no f32 denormal arithmetic), infinities and NaN kept. */
static float gq_half(__global const uchar *p) {
    uint h = (uint)p[0] | (uint)p[1] << 8, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    float f = e == 0    ? (float)m * 0x1p-24f
              : e == 31 ? as_float(0x7F800000u | m << 13)
                        : as_float((e + 112u) << 23 | m << 13);
    return (h & 0x8000u) ? -f : f;
}

/* 32 bytes at p into b: two 16-byte loads where p is 16-byte aligned
 * (Q4_K and Q5_K blocks are 144 and 176 bytes, their nibbles 16 bytes in:
 * every row of a buffer starts aligned), else 2-byte loads (Q8_0, Q4_0
 * and Q6_K blocks are 34, 18 and 210 bytes). */
static void gq_load32_a16(__global const uchar *p, uchar *b) {
    __global const uint4 *v = (__global const uint4 *)p;
    vstore16(as_uchar16(v[0]), 0, b);
    vstore16(as_uchar16(v[1]), 0, b + 16);
}
static void gq_load32_a2(__global const uchar *p, uchar *b) {
    ushort16 v = vload16(0, (__global const ushort *)p);
    vstore16(as_uchar16(v.lo), 0, b);
    vstore16(as_uchar16(v.hi), 0, b + 16);
}

/* ---- one chunk of 32 values: chunk c of a row starting at row ---- */

/* Q8_0: 34 bytes a block of 32: f16 d, int8 q[32]; w = q * d */
static void gq_decode_q8_0(__global const uchar *row, int c, float *w) {
    __global const uchar *blk = row + (size_t)c * 34;
    float d = gq_half(blk);
    uchar q[32];
    gq_load32_a2(blk + 2, q);
    for (int j = 0; j < 32; j++) w[j] = (float)(char)q[j] * d;
}

/* Q4_0: 18 bytes a block of 32: f16 d, 16 bytes of nibbles (low: values
 * 0..15, high: 16..31); w = (q - 8) * d */
static void gq_decode_q4_0(__global const uchar *row, int c, float *w) {
    __global const uchar *blk = row + (size_t)c * 18;
    float d = gq_half(blk);
    uchar q[16];
    vstore16(as_uchar16(vload8(0, (__global const ushort *)(blk + 2))), 0, q);
    for (int j = 0; j < 16; j++) {
        w[j] = (float)((int)(q[j] & 0xF) - 8) * d;
        w[j + 16] = (float)((int)(q[j] >> 4) - 8) * d;
    }
}

/* Q4_K / Q5_K sub-block j's 6-bit scale and min (ggml's get_scale_min_k4) */
static void gq_scale_min_k4(__global const uchar *s, int j, float *sc, float *m) {
    if (j < 4) {
        *sc = (float)(s[j] & 63);
        *m = (float)(s[j + 4] & 63);
    } else {
        *sc = (float)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (float)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Q4_K: 144 bytes a block of 256: f16 d, dmin; 12 bytes of scales; 128 of
 * nibbles, 32 bytes per pair of sub-blocks (low nibbles the even one).
 * Chunk c: block c / 8, sub-block c % 8; w = (d * sc) * q - (dmin * m). */
static void gq_decode_q4_k(__global const uchar *row, int c, float *w) {
    __global const uchar *blk = row + (size_t)(c / 8) * 144;
    int j = c % 8, shift = (j & 1) * 4;
    float sc, m;
    gq_scale_min_k4(blk + 4, j, &sc, &m);
    float d1 = gq_half(blk) * sc, m1 = gq_half(blk + 2) * m;
    uchar q[32];
    gq_load32_a16(blk + 16 + (j / 2) * 32, q);
    for (int l = 0; l < 32; l++) {
        float a = d1 * (float)((q[l] >> shift) & 0xF);
        w[l] = a - m1;
    }
}

/* Q5_K: 176 bytes: as Q4_K with qh[32] before the nibbles (bit j of qh[l]:
 * the fifth bit of value l of sub-block j). */
static void gq_decode_q5_k(__global const uchar *row, int c, float *w) {
    __global const uchar *blk = row + (size_t)(c / 8) * 176;
    int j = c % 8, shift = (j & 1) * 4;
    float sc, m;
    gq_scale_min_k4(blk + 4, j, &sc, &m);
    float d1 = gq_half(blk) * sc, m1 = gq_half(blk + 2) * m;
    uchar q[32], qh[32];
    gq_load32_a16(blk + 16, qh);
    gq_load32_a16(blk + 48 + (j / 2) * 32, q);
    for (int l = 0; l < 32; l++) {
        int v = ((q[l] >> shift) & 0xF) | (((qh[l] >> j) & 1) << 4);
        float a = d1 * (float)v;
        w[l] = a - m1;
    }
}

/* Q6_K: 210 bytes a block of 256: ql[128], qh[64], int8 scales[16], f16 d;
 * two halves of 128, each four quarters of 32 (quarter s: the low (s < 2)
 * or high nibbles of ql[(s & 1) * 32 ..], bits 2s of qh, scales 2s (values
 * 0..15) and 2s + 1 (16..31) of the half's 8 (ggml's is + 2s).
 * Chunk c: block c / 8, half (c % 8) / 4, quarter c % 4;
 * w = (d * scale) * (q - 32). */
static void gq_decode_q6_k(__global const uchar *row, int c, float *w) {
    __global const uchar *blk = row + (size_t)(c / 8) * 210;
    int h = (c % 8) / 4, s = c % 4, shift = (s >> 1) * 4, hshift = 2 * s;
    __global const char *sc = (__global const char *)(blk + 192) + h * 8 + 2 * s;
    float d = gq_half(blk + 208);
    float s0 = d * (float)sc[0], s1 = d * (float)sc[1];
    uchar ql[32], qh[32];
    gq_load32_a2(blk + h * 64 + (s & 1) * 32, ql);
    gq_load32_a2(blk + 128 + h * 32, qh);
    for (int l = 0; l < 32; l++) {
        int q = (int)(((ql[l] >> shift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
        w[l] = (l < 16 ? s0 : s1) * (float)q;
    }
}

/* ---- activations: 4 values of row x from element i ---- */

static float4 gq_x4_f32(__global const void *x, size_t i) {
    return vload4(0, (__global const float *)x + i);
}
static float4 gq_x4_bf16(__global const void *x, size_t i) {
    uint4 u = convert_uint4(vload4(0, (__global const ushort *)x + i));
    return as_float4(u << 16);
}

/* ---- GEMV: Y[rows, out] (+)= X[rows, in] . W[out, in]^T ----
 * W and Y in up to three column ranges (a fused group, QKV or gate/up, of
 * one type: one launch): output column o < end0 is row o of w0 and goes
 * to y0, o < end1 row o - end0 of w1 to y1, else row o - end1 of w2 to y2;
 * each weight [cols] rows of row_bytes bytes (n_chunks chunks of 32
 * values each). x: f32 or bf16, row r from element x_off + r * ldx; y_k:
 * f32, row r from y_off_k + r * ldy_k; rows 1..GQ_MAX_ROWS; accumulate 1:
 * Y += ... Global size out * GQ_WG: the range is the work-group's.
 * Fused (issue 38's decode launches):
 *  norm 1: X is RMSNorm'ed on the way, x * s_r * gain (gain [in] f32,
 *    s_r = 1 / sqrt(mean(x_r^2) + eps)): the work-group reads the whole
 *    row anyway, so s_r comes from the same loads (the sum of squares
 *    reduced beside the products) and multiplies the sum at the end;
 *  swiglu 1: w0 = gate and w1 = up, end0 rows each; work-group o computes
 *    both rows o and writes silu(gate) * up to y0 (global size end0 *
 *    GQ_WG);
 *  swiglu 2: a gate and an up of different types, in two launches: y0
 *    holds the gate's product (a launch of its type, the same X and
 *    norm) and this one, over up, writes silu(y0) * up in its place. */
#define GQ_GEMV(NAME, DECODE, XLOAD)                                                           \
    __kernel __attribute__((reqd_work_group_size(GQ_WG, 1, 1))) void NAME(                      \
        __global const uchar *w0, __global const uchar *w1, __global const uchar *w2,           \
        int end0, int end1, ulong row_bytes, int n_chunks, __global const void *x,              \
        ulong x_off, int ldx, int rows, __global float *y0, __global float *y1,                \
        __global float *y2, ulong y_off0, ulong y_off1, ulong y_off2, int ldy0, int ldy1,       \
        int ldy2, int accumulate, __global const float *gain, float eps, int norm,             \
        int swiglu) {                                                                           \
        __local float red[3 * GQ_MAX_ROWS * GQ_WG];                                             \
        int g = (int)get_group_id(0), lid = (int)get_local_id(0);                               \
        int k = swiglu == 1 || g < end0 ? 0 : g < end1 ? 1 : 2;                                 \
        int o = g - (k == 0 ? 0 : k == 1 ? end0 : end1);                                        \
        __global const uchar *w = k == 0 ? w0 : k == 1 ? w1 : w2;                               \
        __global float *y = k == 0 ? y0 : k == 1 ? y1 : y2;                                     \
        ulong y_off = k == 0 ? y_off0 : k == 1 ? y_off1 : y_off2;                               \
        int ldy = k == 0 ? ldy0 : k == 1 ? ldy1 : ldy2;                                         \
        __global const uchar *wrow = w + (size_t)o * (size_t)row_bytes;                         \
        __global const uchar *urow = w1 + (size_t)o * (size_t)row_bytes;                        \
        float acc[GQ_MAX_ROWS], acu[GQ_MAX_ROWS], ssq[GQ_MAX_ROWS];                             \
        _Pragma("unroll") for (int r = 0; r < GQ_MAX_ROWS; r++) acc[r] = acu[r] = ssq[r] = 0.0f; \
        for (int c = lid; c < n_chunks; c += GQ_WG) {                                           \
            float v[32], u[32];                                                                 \
            DECODE(wrow, c, v);                                                                 \
            if (swiglu == 1) DECODE(urow, c, u); /* uniform */                                  \
            _Pragma("unroll") for (int r = 0; r < GQ_MAX_ROWS; r++) {                          \
                if (r >= rows) continue; /* uniform: the same for the whole launch */          \
                size_t xi = (size_t)x_off + (size_t)r * (size_t)ldx + (size_t)c * 32;          \
                float s = 0.0f, su = 0.0f, sq = 0.0f;                                           \
                _Pragma("unroll") for (int j = 0; j < 32; j += 4) {                             \
                    float4 xv = XLOAD(x, xi + (size_t)j);                                       \
                    if (norm) {                                                                 \
                        sq = mad(xv.x, xv.x, sq);                                               \
                        sq = mad(xv.y, xv.y, sq);                                               \
                        sq = mad(xv.z, xv.z, sq);                                               \
                        sq = mad(xv.w, xv.w, sq);                                               \
                        xv *= vload4(0, gain + (size_t)c * 32 + (size_t)j);                     \
                    }                                                                           \
                    s = mad(v[j], xv.x, s);                                                     \
                    s = mad(v[j + 1], xv.y, s);                                                 \
                    s = mad(v[j + 2], xv.z, s);                                                 \
                    s = mad(v[j + 3], xv.w, s);                                                 \
                    if (swiglu == 1) {                                                          \
                        su = mad(u[j], xv.x, su);                                               \
                        su = mad(u[j + 1], xv.y, su);                                           \
                        su = mad(u[j + 2], xv.z, su);                                           \
                        su = mad(u[j + 3], xv.w, su);                                           \
                    }                                                                           \
                }                                                                               \
                acc[r] += s;                                                                    \
                acu[r] += su;                                                                   \
                ssq[r] += sq;                                                                   \
            }                                                                                   \
        }                                                                                       \
        _Pragma("unroll") for (int r = 0; r < GQ_MAX_ROWS; r++) {                              \
            red[r * GQ_WG + lid] = acc[r];                                                      \
            red[(GQ_MAX_ROWS + r) * GQ_WG + lid] = acu[r];                                      \
            red[(2 * GQ_MAX_ROWS + r) * GQ_WG + lid] = ssq[r];                                  \
        }                                                                                       \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        int n_red = swiglu == 1 || norm ? 3 * GQ_MAX_ROWS : GQ_MAX_ROWS; /* uniform */         \
        for (int half_ = GQ_WG / 2; half_ > 0; half_ >>= 1) {                                   \
            if (lid < half_)                                                                    \
                for (int q = 0; q < n_red; q++)                                                 \
                    if (q % GQ_MAX_ROWS < rows)                                                 \
                        red[q * GQ_WG + lid] += red[q * GQ_WG + lid + half_];                   \
            barrier(CLK_LOCAL_MEM_FENCE);                                                       \
        }                                                                                       \
        if (lid < rows) {                                                                       \
            size_t yi = (size_t)y_off + (size_t)lid * (size_t)ldy + (size_t)o;                  \
            float t = red[lid * GQ_WG];                                                         \
            float scale = 1.0f;                                                                 \
            if (norm)                                                                           \
                scale = rsqrt(red[(2 * GQ_MAX_ROWS + lid) * GQ_WG] / (float)(n_chunks * 32) +  \
                              eps);                                                             \
            t *= scale;                                                                         \
            if (swiglu == 1) {                                                                  \
                float up = red[(GQ_MAX_ROWS + lid) * GQ_WG] * scale;                            \
                t = t / (1.0f + exp(-t)) * up;                                                  \
            } else if (swiglu == 2) {                                                           \
                float gate = y[yi];                                                             \
                t = gate / (1.0f + exp(-gate)) * t;                                             \
            }                                                                                   \
            y[yi] = accumulate ? y[yi] + t : t;                                                 \
        }                                                                                       \
    }

/* ---- dequantize: a whole [out, in] tensor ----
 * layout 0: f32 [out, in]; 1: f32 [in, out] (transposed, the f32 mode's
 * CLBlast layout); 2: bf16 [out, in], rounded to nearest even.
 * Global size: layout 1: (out, n_chunks), else (n_chunks, out), so that
 * neighbouring work-items write neighbouring values. */
#define GQ_DEQUANT(NAME, DECODE)                                                                \
    __kernel void NAME(__global const uchar *w, ulong row_bytes, int n_chunks, int out,         \
                       __global uchar *dst, int layout) {                                       \
        int t = layout == 1;                                                                    \
        int o = (int)get_global_id(t ? 0 : 1), c = (int)get_global_id(t ? 1 : 0);               \
        float v[32];                                                                            \
        DECODE(w + (size_t)o * (size_t)row_bytes, c, v);                                        \
        size_t in = (size_t)n_chunks * 32, base = (size_t)o * in + (size_t)c * 32;              \
        if (layout == 0)                                                                        \
            for (int j = 0; j < 32; j++) ((__global float *)dst)[base + (size_t)j] = v[j];      \
        else if (layout == 1)                                                                   \
            for (int j = 0; j < 32; j++)                                                        \
                ((__global float *)dst)[((size_t)c * 32 + (size_t)j) * (size_t)out +            \
                                        (size_t)o] = v[j];                                      \
        else                                                                                    \
            for (int j = 0; j < 32; j++) {                                                      \
                uint u = as_uint(v[j]);                                                         \
                u += 0x7FFFu + ((u >> 16) & 1u);                                                \
                ((__global ushort *)dst)[base + (size_t)j] = (ushort)(u >> 16);                 \
            }                                                                                   \
    }

/* One ggml type a program (the host builds the types a model keeps):
 * GQ_TYPE its ggml type id. */
#ifndef GQ_TYPE
#define GQ_TYPE 12
#endif
#if GQ_TYPE == 8
#define GQ_DECODE gq_decode_q8_0
#elif GQ_TYPE == 2
#define GQ_DECODE gq_decode_q4_0
#elif GQ_TYPE == 12
#define GQ_DECODE gq_decode_q4_k
#elif GQ_TYPE == 13
#define GQ_DECODE gq_decode_q5_k
#elif GQ_TYPE == 14
#define GQ_DECODE gq_decode_q6_k
#else
#error "GQ_TYPE: the ggml id of Q8_0 (8), Q4_0 (2), Q4_K (12), Q5_K (13) or Q6_K (14)"
#endif

GQ_GEMV(serve_gemv_f32, GQ_DECODE, gq_x4_f32)
GQ_GEMV(serve_gemv_bf16, GQ_DECODE, gq_x4_bf16)
GQ_DEQUANT(serve_dequant, GQ_DECODE)
