/* SPDX-License-Identifier: Apache-2.0 */
/* Weights kept quantized on the device (serve/gemv_quant.h): the
 * decode-sized GEMV and the dequantizer of the prefill path, for Q8_0,
 * Q4_0, Q4_K, Q5_K and Q6_K blocks as a GGUF file stores them (layouts in
 * serve/quant.c).
 *
 * Both read a row as tasks of 32 values (n_chunks = in / 32 of them): a
 * task loads its block's bytes with a few aligned loads into registers
 * and yields four segments of 8 values that lie side by side in the row,
 * as small integers (exact, built on the FP pipe: as_float(0x4B000000 | q)
 * - 2^23, no int-to-float conversion) with a scale and, for the K-quants
 * Q4_K and Q5_K, a min per group of segments:
 *   w = scale * q - min   (Q4_K, Q5_K: a group is half a task)
 *   w = scale * q         (Q6_K: a group a segment; Q8_0, Q4_0: the task)
 * The dequantizer computes each w with serve/quant.c's arithmetic to the
 * bit (one rounding per product, no contraction). The GEMV sums a group
 * as scale * sum(q x) - min * sum(x): the same sum to f32 rounding, with
 * one multiply-add a value.
 *
 * GEMV: a work-group of GQ_TEAMS teams of GQ_LANES work-items; a row set
 * of GQ_NW weight rows (output columns; for SwiGLU two gate rows and
 * their two up rows) is taken by ks teams (the host's choice: more for
 * short outputs), lane i of team k its tasks 32 k + i, + 32 ks, ...; each
 * activation segment is loaded once and multiplied into the GQ_NW rows
 * (the activation read, not the weight's, bounds a one-row GEMV
 * otherwise). A task's fixed cost (its block's scales) is a few loads and
 * integer operations, no conversion instruction and no branch: it is
 * paid again for every 32 values. Partial sums meet in local memory (one
 * barrier, sums of 8 lanes, one barrier, then a work-item an output).
 * Kernels for 1 activation row and for up to GQ_MAX_ROWS. Plain OpenCL C
 * 1.2, no extension (f16 scales decoded with integer arithmetic). */
#pragma OPENCL FP_CONTRACT OFF

#define GQ_WG 128     /* SERVE_GQ_WG in serve/gemv_quant.c */
#define GQ_LANES 32   /* work-items a team */
#define GQ_TEAMS (GQ_WG / GQ_LANES)
#define GQ_NW 4       /* weight rows a team: SERVE_GQ_NW in serve/gemv_quant.c */
#define GQ_MAX_ROWS 8 /* SERVE_QUANT_GEMV_MAX_ROWS in serve/gemv_quant.h */

/* The small integer v (< 2^23) less offset (a small integer constant) as
 * a float, exactly: 2^23 + v, less 2^23 + offset (one subtraction, no
 * int-to-float conversion). */
#define GQ_INT(v, offset) (as_float((v) | 0x4B000000u) - (8388608.0f + (offset)))

/* The IEEE half with bits h, exact and branch-free: normal numbers by
 * moving exponent and mantissa into place, subnormals as m * 2^-24 (no
 * f32 denormal arithmetic), infinities and NaN kept. */
static float gq_half_bits(uint h) {
    uint a = h & 0x7FFFu;
    uint n = (a << 13) + 0x38000000u;                                     /* normal */
    uint z = as_uint(GQ_INT(a, 0.0f) * 0x1p-24f);                          /* subnormal */
    uint f = select(select(n, z, a < 0x400u), 0x7F800000u | (a & 0x3FFu) << 13, a >= 0x7C00u);
    return as_float(f | (h & 0x8000u) << 16);
}
/* the little-endian half at p (2-byte aligned) */
static float gq_half(__global const uchar *p) {
    return gq_half_bits(*(__global const ushort *)p);
}

/* GQ_INT of 8 integers at once */
#define GQ_INT8(v, offset) (as_float8((v) | 0x4B000000u) - (8388608.0f + (offset)))

/* Byte e (0..7) of the 8 bytes lo, hi, shifted right by sh, for e = 0..7 */
static uint8 gq_bytes8(uint lo, uint hi, uint sh) {
    return (uint8)(lo, lo, lo, lo, hi, hi, hi, hi) >> ((uint8)(0, 8, 16, 24, 0, 8, 16, 24) + sh);
}
/* 8 consecutive bytes at p (2-byte aligned) as two words: two or three
 * aligned word loads (a misaligned p reads 2 bytes past its 8, which every
 * caller's block holds) */
static uint2 gq_load8_a2(__global const uchar *p) {
    __global const uint *q = (__global const uint *)((size_t)p & ~(size_t)3);
    uint x = q[0], y = q[1];
    if (((size_t)p & 2u) == 0) return (uint2)(x, y);
    /* halves 1..4 of the three words (a shuffle: Oclgrind has no funnel shift) */
    return as_uint2(as_ushort8((uint4)(x, y, q[2], 0u)).s1234);
}
/* 8 consecutive bytes at p (2-byte aligned) as two words, reading no
 * byte past them (Q8_0 and Q4_0, whose values end their blocks) */
static uint2 gq_load8_u16(__global const uchar *p) {
    uint4 u = convert_uint4(vload4(0, (__global const ushort *)p));
    return (uint2)(u.x | u.y << 16, u.z | u.w << 16);
}

/* One task of a row: the group scales and mins, the block bytes it reads */
typedef struct gq_task {
    float sc[4], mn[4];
    uint q[8];
    uint aux;
} gq_task;

/* ---- the five types: GQ_SEGS_PER_GROUP, GQ_HAS_MIN, the task's load,
 * segment s's integers and its first value's place in the row ---- */

/* Q8_0: 34 bytes a block of 32: f16 d, int8 q[32]; w = q * d. A task is
 * a block, segment s its values 8s.. */
static void gq_load_q8_0(__global const uchar *row, int t, gq_task *k) {
    __global const uchar *blk = row + (size_t)t * 34;
    k->sc[0] = gq_half(blk);
    for (int i = 0; i < 4; i++) {
        uint2 v = gq_load8_u16(blk + 2 + 8 * i);
        k->q[2 * i] = v.x, k->q[2 * i + 1] = v.y;
    }
}
static float8 gq_seg_q8_0(const gq_task *k, int s) {
    return GQ_INT8((gq_bytes8(k->q[2 * s], k->q[2 * s + 1], 0) & 0xFFu) ^ 0x80u, 128.0f);
}
static int gq_xoff_q8_0(int t, int s) { return t * 32 + s * 8; }

/* Q4_0: 18 bytes a block of 32: f16 d, 16 bytes of nibbles (low: values
 * 0..15, high: 16..31); w = (q - 8) * d. A task is a block; segment s:
 * bytes (s & 1) * 8.., the high nibbles for s >= 2. */
static void gq_load_q4_0(__global const uchar *row, int t, gq_task *k) {
    __global const uchar *blk = row + (size_t)t * 18;
    k->sc[0] = gq_half(blk);
    uint2 a = gq_load8_u16(blk + 2), b = gq_load8_u16(blk + 10);
    k->q[0] = a.x, k->q[1] = a.y, k->q[2] = b.x, k->q[3] = b.y;
}
static float8 gq_seg_q4_0(const gq_task *k, int s) {
    int w = (s & 1) * 2;
    return GQ_INT8(gq_bytes8(k->q[w], k->q[w + 1], (uint)(s >> 1) * 4u) & 0xFu, 8.0f);
}
static int gq_xoff_q4_0(int t, int s) { return t * 32 + (s & 1) * 8 + (s >> 1) * 16; }

/* Q4_K / Q5_K: 256 values in 8 sub-blocks of 32, each with a 6-bit scale
 * and min packed in 12 bytes (ggml's get_scale_min_k4); the nibbles 32
 * bytes per pair of sub-blocks (low nibbles the even one). Task t: block
 * t / 8, pair p = (t % 8) / 2, bytes h * 16.. of the pair (h = t % 2):
 * values 64p + 16h.. (group 0, sub-block 2p: segments 0, 1) and
 * 64p + 32 + 16h.. (group 1, sub-block 2p + 1: segments 2, 3). Every row of
 * a buffer starts 16-byte aligned (144 and 176 are multiples of 16). The
 * block's first 16 bytes (d, dmin, the 12 scale bytes) come in one load;
 * sub-blocks j = 2p and j + 1 decode side by side, a byte each of a 16-bit
 * lane (j < 4: scale q[j] & 63, min q[j + 4] & 63; else the low 4 bits
 * from q[j + 4] and the high 2 from the top of q[j - 4] and q[j]). */
static void gq_load_k45(__global const uchar *blk, int i, gq_task *k) {
    uint4 h = *(__global const uint4 *)blk;
    float d = gq_half_bits(h.x & 0xFFFFu), dmin = gq_half_bits(h.x >> 16);
    int p = i / 2;
    uint sh = (uint)(p & 1) * 16u;
    uint b0 = h.y >> sh, b1 = h.z >> sh, b2 = h.w >> sh;
    uint a = p < 2 ? b0 & 0x3F3Fu : (b2 & 0x0F0Fu) | ((b0 >> 2) & 0x3030u);
    uint m = p < 2 ? b1 & 0x3F3Fu : ((b2 >> 4) & 0x0F0Fu) | ((b1 >> 2) & 0x3030u);
    k->sc[0] = d * GQ_INT(a & 0xFFu, 0.0f), k->sc[1] = d * GQ_INT(a >> 8, 0.0f);
    k->mn[0] = dmin * GQ_INT(m & 0xFFu, 0.0f), k->mn[1] = dmin * GQ_INT(m >> 8, 0.0f);
    k->aux = (uint)(2 * p);
}
static void gq_load_q4_k(__global const uchar *row, int t, gq_task *k) {
    __global const uchar *blk = row + (size_t)(t / 8) * 144;
    int i = t % 8;
    gq_load_k45(blk, i, k);
    uint4 q = *(__global const uint4 *)(blk + 16 + (i / 2) * 32 + (i % 2) * 16);
    k->q[0] = q.x, k->q[1] = q.y, k->q[2] = q.z, k->q[3] = q.w;
}
static float8 gq_seg_q4_k(const gq_task *k, int s) {
    int w = (s & 1) * 2;
    return GQ_INT8(gq_bytes8(k->q[w], k->q[w + 1], (uint)(s >> 1) * 4u) & 0xFu, 0.0f);
}
static int gq_xoff_k(int t, int s) {
    int i = t % 8;
    return (t / 8) * 256 + (i / 2) * 64 + (i % 2) * 16 + (s & 1) * 8 + (s >> 1) * 32;
}
/* Q5_K: 176 bytes: as Q4_K with qh[32] before the nibbles (bit j of qh[l]:
 * the fifth bit of value l of sub-block j) */
static void gq_load_q5_k(__global const uchar *row, int t, gq_task *k) {
    __global const uchar *blk = row + (size_t)(t / 8) * 176;
    int i = t % 8;
    gq_load_k45(blk, i, k);
    uint4 q = *(__global const uint4 *)(blk + 48 + (i / 2) * 32 + (i % 2) * 16);
    uint4 h = *(__global const uint4 *)(blk + 16 + (i % 2) * 16);
    k->q[0] = q.x, k->q[1] = q.y, k->q[2] = q.z, k->q[3] = q.w;
    k->q[4] = h.x, k->q[5] = h.y, k->q[6] = h.z, k->q[7] = h.w;
}
static float8 gq_seg_q5_k(const gq_task *k, int s) {
    int w = (s & 1) * 2;
    uint8 lo = gq_bytes8(k->q[w], k->q[w + 1], (uint)(s >> 1) * 4u) & 0xFu;
    uint8 hi = (gq_bytes8(k->q[4 + w], k->q[5 + w], k->aux + (uint)(s >> 1)) & 1u) << 4;
    return GQ_INT8(lo | hi, 0.0f);
}

/* Q6_K: 210 bytes a block of 256: ql[128], qh[64], int8 scales[16], f16 d;
 * two halves of 128 (ql + 64H, qh + 32H, scales + 8H); value l (0..31) of
 * quarter s of a half: the low (s < 2) or high nibble of ql[l + 32 (s & 1)]
 * with bits 2s of qh[l] above, less 32, scale l / 16 + 2s of the half's.
 * Task t: block t / 8, half H = (t % 8) / 4, values l = 8 (t % 4)..+7 of
 * each quarter: segment s is quarter s, one group each. Blocks are
 * 2-byte aligned. */
static void gq_load_q6_k(__global const uchar *row, int t, gq_task *k) {
    __global const uchar *blk = row + (size_t)(t / 8) * 210;
    int H = (t % 8) / 4, l0 = (t % 4) * 8;
    __global const uchar *ql = blk + H * 64 + l0, *qh = blk + 128 + H * 32 + l0;
    /* the half's 8 int8 scales; this task's are bytes l0 / 16 + 2g */
    uint2 sc = gq_load8_a2(blk + 192 + H * 8);
    uint sh = (uint)(l0 / 16) * 8u;
    float d = gq_half(blk + 208);
#pragma unroll
    for (int g = 0; g < 4; g++) {
        uint b = ((g < 2 ? sc.x : sc.y) >> (sh + (uint)(g & 1) * 16u)) & 0xFFu;
        k->sc[g] = d * GQ_INT(b ^ 0x80u, 128.0f); /* the int8 b */
    }
    uint2 a = gq_load8_a2(ql), b = gq_load8_a2(ql + 32), c = gq_load8_a2(qh);
    k->q[0] = a.x, k->q[1] = a.y, k->q[2] = b.x, k->q[3] = b.y, k->q[4] = c.x, k->q[5] = c.y;
}
static float8 gq_seg_q6_k(const gq_task *k, int s) {
    int w = (s & 1) * 2;
    uint8 lo = gq_bytes8(k->q[w], k->q[w + 1], (uint)(s >> 1) * 4u) & 0xFu;
    uint8 hi = (gq_bytes8(k->q[4], k->q[5], (uint)s * 2u) & 3u) << 4;
    return GQ_INT8(lo | hi, 32.0f);
}
static int gq_xoff_q6_k(int t, int s) {
    return (t / 8) * 256 + ((t % 8) / 4) * 128 + (t % 4) * 8 + s * 32;
}

/* One type a program (the host builds the types a model keeps): GQ_TYPE
 * its ggml type id. */
#ifndef GQ_TYPE
#define GQ_TYPE 12
#endif
#if GQ_TYPE == 8
#define GQ_LOAD gq_load_q8_0
#define GQ_SEG gq_seg_q8_0
#define GQ_XOFF gq_xoff_q8_0
#define GQ_SEGS_PER_GROUP 4
#define GQ_HAS_MIN 0
#elif GQ_TYPE == 2
#define GQ_LOAD gq_load_q4_0
#define GQ_SEG gq_seg_q4_0
#define GQ_XOFF gq_xoff_q4_0
#define GQ_SEGS_PER_GROUP 4
#define GQ_HAS_MIN 0
#elif GQ_TYPE == 12
#define GQ_LOAD gq_load_q4_k
#define GQ_SEG gq_seg_q4_k
#define GQ_XOFF gq_xoff_k
#define GQ_SEGS_PER_GROUP 2
#define GQ_HAS_MIN 1
#elif GQ_TYPE == 13
#define GQ_LOAD gq_load_q5_k
#define GQ_SEG gq_seg_q5_k
#define GQ_XOFF gq_xoff_k
#define GQ_SEGS_PER_GROUP 2
#define GQ_HAS_MIN 1
#elif GQ_TYPE == 14
#define GQ_LOAD gq_load_q6_k
#define GQ_SEG gq_seg_q6_k
#define GQ_XOFF gq_xoff_q6_k
#define GQ_SEGS_PER_GROUP 1
#define GQ_HAS_MIN 0
#else
#error "GQ_TYPE: the ggml id of Q8_0 (8), Q4_0 (2), Q4_K (12), Q5_K (13) or Q6_K (14)"
#endif

/* ---- activations: 8 values of row x from element i ---- */

static float8 gq_x8_f32(__global const void *x, size_t i) {
    __global const float *p = (__global const float *)x + i;
    if (((size_t)p & 15u) == 0) /* two vector loads (the usual case), else eight */
        return (float8)(*(__global const float4 *)p, *(__global const float4 *)(p + 4));
    return vload8(0, p);
}
static float8 gq_x8_bf16(__global const void *x, size_t i) {
    __global const ushort *p = (__global const ushort *)x + i;
    if (((size_t)p & 15u) == 0) { /* one vector load (the usual case), else eight */
        uint4 u = *(__global const uint4 *)p;
        return as_float8((uint8)(u.x << 16, u.x & 0xFFFF0000u, u.y << 16, u.y & 0xFFFF0000u,
                                 u.z << 16, u.z & 0xFFFF0000u, u.w << 16, u.w & 0xFFFF0000u));
    }
    return as_float8(convert_uint8(vload8(0, p)) << 16);
}
static float gq_sum8(float8 a) {
    float4 b = a.lo + a.hi;
    return (b.x + b.y) + (b.z + b.w);
}
static float gq_dot8(float8 a, float8 b, float s) {
    s = mad(a.s0, b.s0, s);
    s = mad(a.s1, b.s1, s);
    s = mad(a.s2, b.s2, s);
    s = mad(a.s3, b.s3, s);
    s = mad(a.s4, b.s4, s);
    s = mad(a.s5, b.s5, s);
    s = mad(a.s6, b.s6, s);
    return mad(a.s7, b.s7, s);
}

/* Weight row n (0..GQ_NW-1) of team T: its range k and row o in it; 0
 * past the last (swiglu 1: gate rows 2T, 2T + 1 as n = 0, 2 and their up
 * rows as n = 1, 3; else output column T * GQ_NW + n of the ranges). */
static int gq_weight_row(int T, int n, int swiglu, int end0, int end1, int total, int *k,
                         int *o) {
    if (swiglu == 1) {
        *k = n & 1;
        *o = T * (GQ_NW / 2) + n / 2;
        return *o < end0;
    }
    int c = T * GQ_NW + n;
    *k = c < end0 ? 0 : c < end1 ? 1 : 2;
    *o = c - (*k == 0 ? 0 : *k == 1 ? end0 : end1);
    return c < total;
}

/* ---- GEMV: Y[rows, out] (+)= X[rows, in] . W[out, in]^T ----
 * W and Y in up to three column ranges (a fused group, QKV or gate/up, of
 * one type: one launch): output column o < end0 is row o of w0 and goes
 * to y0, o < end1 row o - end0 of w1 to y1, else row o - end1 of w2 to y2,
 * total columns in all; each weight [cols] rows of row_bytes bytes
 * (n_chunks tasks of 32 values each). x: f32 or bf16, row r from element
 * x_off + r * ldx; y_k: f32, row r from y_off_k + r * ldy_k; rows
 * 1..R; accumulate 1: Y += ... A row set (GQ_NW weight rows) is taken
 * by ks teams (1, 2 or 4) of one work-group, team k of them its tasks
 * 32 k + lane, + 32 ks, ... (short outputs: more work-groups to hide the
 * loads' latency). Global size: GQ_WG for every GQ_TEAMS / ks row sets, a
 * row set for every GQ_NW columns (swiglu 1: GQ_NW / 2).
 * Fused (issue 38's decode launches):
 *  norm 1: X is RMSNorm'ed on the way, x * s_r * gain (gain [in] f32,
 *    s_r = 1 / sqrt(mean(x_r^2) + eps)): a team reads the whole row
 *    anyway, so s_r comes from the same loads and multiplies the sum at
 *    the end;
 *  swiglu 1: w0 = gate and w1 = up, end0 rows each; a team computes both
 *    of its rows and writes silu(gate) * up to y0;
 *  swiglu 2: a gate and an up of different types, in two launches: y0
 *    holds the gate's product (a launch of its type, the same X and
 *    norm) and this one, over up, writes silu(y0) * up in its place. */
/* partial sums: per team, weight row (GQ_NW: the norm's sum of squares)
 * and activation row, GQ_LANES of them (padded: no bank shared) */
#define GQ_RED(tm, n, r, R) ((((tm) * (GQ_NW + 1) + (n)) * (R) + (r)) * (GQ_LANES + 1))
/* the sum over the ks teams of row set rs of the per-team sums (each in
 * four parts of 8 lanes, at 0, 8, 16, 24) */
static float gq_red_sum(__local const float *red, int rs, int ks, int n, int r, int R) {
    float s = 0.0f;
    for (int kp = 0; kp < ks; kp++) {
        __local const float *p = red + GQ_RED(rs * ks + kp, n, r, R);
        s += (p[0] + p[8]) + (p[16] + p[24]);
    }
    return s;
}
/* the GQ_NW weight rows of row set T (gq_weight_row; a row past the last
 * reads row 0 of w0, its sum never stored) */
static void gq_weight_rows(int T, int swiglu, int end0, int end1, int total,
                           __global const uchar *w0, __global const uchar *w1,
                           __global const uchar *w2, ulong row_bytes,
                           __global const uchar **wrow) {
#pragma unroll
    for (int n = 0; n < GQ_NW; n++) {
        int k, o;
        if (!gq_weight_row(T, n, swiglu, end0, end1, total, &k, &o)) k = o = 0;
        wrow[n] = (k == 0 ? w0 : k == 1 ? w1 : w2) + (size_t)o * (size_t)row_bytes;
    }
}
/* each of n sums of GQ_LANES partials in red in four parts of 8 (at 0,
 * 8, 16, 24), in place, by the work-items lid, lid + wg, ... */
static void gq_red_parts(__local float *red, int n, int lid, int wg) {
    for (int e = lid; e < n * 4; e += wg) {
        __local float *p = red + (size_t)(e / 4) * (GQ_LANES + 1) + (e % 4) * 8;
        p[0] = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
    }
}
/* y[yi] (+)= t, with swiglu 1: silu(t) * up, 2: silu(y[yi]) * t */
static void gq_store(__global float *y, size_t yi, float t, float up, int swiglu,
                     int accumulate) {
    if (swiglu == 1) {
        t = t / (1.0f + exp(-t)) * up;
    } else if (swiglu == 2) {
        float gate = y[yi];
        t = gate / (1.0f + exp(-gate)) * t;
    }
    y[yi] = accumulate ? y[yi] + t : t;
}
#define GQ_GEMV(NAME, XLOAD, R)                                                                 \
    __kernel __attribute__((reqd_work_group_size(GQ_WG, 1, 1))) void NAME(                      \
        __global const uchar *w0, __global const uchar *w1, __global const uchar *w2,           \
        int end0, int end1, ulong row_bytes, int n_chunks, __global const void *x,              \
        ulong x_off, int ldx, int rows, __global float *y0, __global float *y1,                \
        __global float *y2, ulong y_off0, ulong y_off1, ulong y_off2, int ldy0, int ldy1,       \
        int ldy2, int accumulate, __global const float *gain, float eps, int norm,             \
        int swiglu, int total, int ks) {                                                        \
        __local float red[GQ_TEAMS * (GQ_NW + 1) * R * (GQ_LANES + 1)];                         \
        int lid = (int)get_local_id(0), lane = lid % GQ_LANES, team = lid / GQ_LANES;           \
        int sets = GQ_TEAMS / ks, set0 = (int)get_group_id(0) * sets;                           \
        int T = set0 + team / ks;                                                               \
        __global const uchar *wrow[GQ_NW];                                                      \
        gq_weight_rows(T, swiglu, end0, end1, total, w0, w1, w2, row_bytes, wrow);              \
        float acc[GQ_NW][R], ssq[R];                                                            \
        _Pragma("unroll") for (int r = 0; r < R; r++) {                                        \
            ssq[r] = 0.0f;                                                                      \
            _Pragma("unroll") for (int n = 0; n < GQ_NW; n++) acc[n][r] = 0.0f;                \
        }                                                                                       \
        for (int t = (team % ks) * GQ_LANES + lane; t < n_chunks; t += GQ_LANES * ks) {         \
            gq_task tk[GQ_NW];                                                                  \
            _Pragma("unroll") for (int n = 0; n < GQ_NW; n++) GQ_LOAD(wrow[n], t, &tk[n]);      \
            float sqx[GQ_NW][R], sx[R];                                                         \
            _Pragma("unroll") for (int s = 0; s < 4; s++) {                                    \
                if (s % GQ_SEGS_PER_GROUP == 0) {                                               \
                    _Pragma("unroll") for (int r = 0; r < R; r++) {                            \
                        sx[r] = 0.0f;                                                           \
                        _Pragma("unroll") for (int n = 0; n < GQ_NW; n++) sqx[n][r] = 0.0f;    \
                    }                                                                           \
                }                                                                               \
                float8 qv[GQ_NW];                                                               \
                _Pragma("unroll") for (int n = 0; n < GQ_NW; n++) qv[n] = GQ_SEG(&tk[n], s);    \
                size_t xo = (size_t)GQ_XOFF(t, s);                                              \
                float8 g8 = (float8)(1.0f);                                                     \
                if (norm) g8 = gq_x8_f32(gain, xo); /* uniform */                               \
                _Pragma("unroll") for (int r = 0; r < R; r++) {                                \
                    if (r >= rows) continue; /* uniform: the same for the whole launch */      \
                    float8 x8 = XLOAD(x, (size_t)x_off + (size_t)r * (size_t)ldx + xo);         \
                    if (norm) {                                                                 \
                        ssq[r] = gq_dot8(x8, x8, ssq[r]);                                       \
                        x8 *= g8;                                                               \
                    }                                                                           \
                    if (GQ_HAS_MIN) sx[r] += gq_sum8(x8);                                       \
                    _Pragma("unroll") for (int n = 0; n < GQ_NW; n++) sqx[n][r] =              \
                        gq_dot8(qv[n], x8, sqx[n][r]);                                          \
                }                                                                               \
                if (s % GQ_SEGS_PER_GROUP == GQ_SEGS_PER_GROUP - 1) {                           \
                    int gr = s / GQ_SEGS_PER_GROUP;                                             \
                    _Pragma("unroll") for (int n = 0; n < GQ_NW; n++)                          \
                        _Pragma("unroll") for (int r = 0; r < R; r++) {                        \
                        float v = tk[n].sc[gr] * sqx[n][r];                                     \
                        if (GQ_HAS_MIN) v -= tk[n].mn[gr] * sx[r];                              \
                        acc[n][r] += v;                                                         \
                    }                                                                           \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
        _Pragma("unroll") for (int r = 0; r < R; r++) {                                        \
            _Pragma("unroll") for (int n = 0; n < GQ_NW; n++)                                  \
                red[GQ_RED(team, n, r, R) + lane] = acc[n][r];                                  \
            red[GQ_RED(team, GQ_NW, r, R) + lane] = ssq[r];                                     \
        }                                                                                       \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        gq_red_parts(red, GQ_TEAMS * (GQ_NW + 1) * R, lid, GQ_WG);                              \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        for (int e = lid; e < sets * GQ_NW * R; e += GQ_WG) {                                    \
            int rs = e / (GQ_NW * R), n = (e / R) % GQ_NW, r = e % R, k, o;                     \
            if (r >= rows || (swiglu == 1 && (n & 1))) continue;                                \
            if (!gq_weight_row(set0 + rs, n, swiglu, end0, end1, total, &k, &o)) continue;      \
            if (swiglu == 1) k = 0; /* the gate's range: y0 */                                  \
            __global float *y = k == 0 ? y0 : k == 1 ? y1 : y2;                                 \
            ulong y_off = k == 0 ? y_off0 : k == 1 ? y_off1 : y_off2;                           \
            int ldy = k == 0 ? ldy0 : k == 1 ? ldy1 : ldy2;                                     \
            size_t yi = (size_t)y_off + (size_t)r * (size_t)ldy + (size_t)o;                    \
            float scale = 1.0f;                                                                 \
            if (norm)                                                                           \
                scale = rsqrt(gq_red_sum(red, rs, ks, GQ_NW, r, R) / (float)(n_chunks * 32) +   \
                              eps);                                                             \
            float up = swiglu == 1 ? gq_red_sum(red, rs, ks, n + 1, r, R) * scale : 0.0f;       \
            gq_store(y, yi, gq_red_sum(red, rs, ks, n, r, R) * scale, up, swiglu, accumulate);  \
        }                                                                                       \
    }

GQ_GEMV(serve_gemv_f32_r1, gq_x8_f32, 1)
GQ_GEMV(serve_gemv_bf16_r1, gq_x8_bf16, 1)
GQ_GEMV(serve_gemv_f32, gq_x8_f32, GQ_MAX_ROWS)
GQ_GEMV(serve_gemv_bf16, gq_x8_bf16, GQ_MAX_ROWS)

/* ---- the int8 GEMV: one activation row, Q4_K, Q5_K and Q6_K ----
 * The variant the host takes for one row where the setting says
 * (serve.gemv_q8: by default on NVIDIA's fast path): the work-group first
 * quantizes the (RMSNorm'ed) row into local memory, 32 values at a time,
 * as llama.cpp's Q8_1 does (q = round(x * 127 / amax), the block's
 * amax / 127 its scale), then multiplies 4 weight integers by 4
 * activation integers an instruction (dp4a: `dp4a.u32.s32` on NVIDIA,
 * plain integer arithmetic elsewhere, the same sums). Each sum is exact
 * in integers; the result is the exact product of the weight with the
 * quantized row up to f32 rounding, so it differs from the exact kernel's
 * by at most sum |w| * amax / 254 over each block of 32 (the test's bound).
 * Layout of the local scratch (the host sizes it; uint4 elements, so that
 * NVIDIA's OpenCL aligns it to 16 bytes: it faults on a uint4 load from a
 * 4-byte-aligned __local argument): the reduction's sums,
 * xd[in / 32] the scales, xs[in / GQ8_SUM] the sums of each GQ8_SUM
 * integers (the K-quants' mins and Q6_K's offset of 32 use them), xq[in]
 * the integers, 4 a word. A work-group of GQ8_WG: GQ8_TEAMS teams of
 * GQ_LANES over GQ_NW weight rows each, a row set taken by ks teams as in
 * the exact GEMV (gq_weight_row, the fused norm and SwiGLU the same). */
#if GQ_TYPE == 12 || GQ_TYPE == 13 || GQ_TYPE == 14
#define GQ8_WG 256 /* SERVE_GQ8_WG in serve/gemv_quant.c */
#define GQ8_TEAMS (GQ8_WG / GQ_LANES)
#define GQ8_SUM (GQ_TYPE == 14 ? 8 : 16) /* integers a stored sum */
#define GQ8_RED_FLOATS (GQ8_TEAMS * (GQ_NW + 1) * (GQ_LANES + 1))

/* c + the dot product of the 4 unsigned bytes of a and the 4 signed bytes of b */
static int gq_dp4a(uint a, uint b, int c) {
#ifdef GQ_NV_DP4A
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    int4 u = convert_int4(as_uchar4(a)), v = convert_int4(as_char4(b));
    return c + ((u.x * v.x + u.y * v.y) + (u.z * v.z + u.w * v.w));
#endif
}
#define GQ_M4 0x0F0F0F0Fu

/* the sum of the 4 signed bytes of b */
static int gq_bsum4(uint b) { return gq_dp4a(0x01010101u, b, 0); }

#define GQ8_GEMV(NAME, XLOAD)                                                                  \
    __kernel __attribute__((reqd_work_group_size(GQ8_WG, 1, 1))) void NAME(                     \
        __global const uchar *w0, __global const uchar *w1, __global const uchar *w2,           \
        int end0, int end1, ulong row_bytes, int n_chunks, __global const void *x,              \
        ulong x_off, int ldx, int rows, __global float *y0, __global float *y1,                \
        __global float *y2, ulong y_off0, ulong y_off1, ulong y_off2, int ldy0, int ldy1,       \
        int ldy2, int accumulate, __global const float *gain, float eps, int norm,             \
        int swiglu, int total, int ks, __local uint4 *scratch) {                                \
        __local float *red = (__local float *)scratch;                                          \
        __local float *xd = red + GQ8_RED_FLOATS;                                               \
        __local int *xs = (__local int *)(xd + n_chunks);                                       \
        __local uint *xq = (__local uint *)(xs + n_chunks * (32 / GQ8_SUM));                    \
        int lid = (int)get_local_id(0), lane = lid % GQ_LANES, team = lid / GQ_LANES;           \
        int sets = GQ8_TEAMS / ks, set0 = (int)get_group_id(0) * sets;                          \
        int T = set0 + team / ks;                                                               \
        __global const uchar *wrow[GQ_NW];                                                      \
        gq_weight_rows(T, swiglu, end0, end1, total, w0, w1, w2, row_bytes, wrow);              \
        /* the row quantized, 32 values a work-item at a time */                                \
        float ssq = 0.0f;                                                                       \
        for (int b = lid; b < n_chunks; b += GQ8_WG) {                                          \
            float8 v[4];                                                                        \
            uint8 mx = (uint8)(0u);                                                             \
            _Pragma("unroll") for (int i = 0; i < 4; i++) {                                    \
                v[i] = XLOAD(x, (size_t)x_off + (size_t)b * 32 + (size_t)i * 8);                \
                if (norm) {                                                                     \
                    ssq = gq_dot8(v[i], v[i], ssq);                                             \
                    v[i] *= gq_x8_f32(gain, (size_t)b * 32 + (size_t)i * 8);                    \
                }                                                                               \
                /* |v| compared as integers: a NaN is the largest, and kept */                  \
                mx = max(mx, as_uint8(fabs(v[i])));                                             \
            }                                                                                   \
            uint4 m4 = max(mx.lo, mx.hi);                                                       \
            float amax = as_float(max(max(m4.x, m4.y), max(m4.z, m4.w)));                       \
            float iq = amax > 0.0f ? 127.0f / amax : 0.0f;                                      \
            xd[b] = amax / 127.0f;                                                              \
            int s8[4];                                                                          \
            _Pragma("unroll") for (int i = 0; i < 4; i++) {                                    \
                uint2 q = as_uint2(convert_char8_sat_rte(v[i] * iq));                           \
                xq[b * 8 + 2 * i] = q.x, xq[b * 8 + 2 * i + 1] = q.y;                           \
                s8[i] = gq_bsum4(q.x) + gq_bsum4(q.y);                                          \
            }                                                                                   \
            if (GQ8_SUM == 8) {                                                                 \
                _Pragma("unroll") for (int i = 0; i < 4; i++) xs[b * 4 + i] = s8[i];           \
            } else {                                                                            \
                xs[b * 2] = s8[0] + s8[1], xs[b * 2 + 1] = s8[2] + s8[3];                       \
            }                                                                                   \
        }                                                                                       \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        float acc[GQ_NW];                                                                       \
        _Pragma("unroll") for (int n = 0; n < GQ_NW; n++) acc[n] = 0.0f;                       \
        for (int t = (team % ks) * GQ_LANES + lane; t < n_chunks; t += GQ_LANES * ks) {         \
            gq8_w w;                                                                            \
            gq8_load(wrow, t, &w);                                                              \
            gq8_dot(&w, t, xd, xs, xq, acc);                                                    \
        }                                                                                       \
        _Pragma("unroll") for (int n = 0; n < GQ_NW; n++)                                      \
            red[GQ_RED(team, n, 0, 1) + lane] = acc[n];                                         \
        red[GQ_RED(team, GQ_NW, 0, 1) + lane] = ssq;                                            \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        gq_red_parts(red, GQ8_TEAMS * (GQ_NW + 1), lid, GQ8_WG);                                \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        for (int e = lid; e < sets * GQ_NW; e += GQ8_WG) {                                       \
            int rs = e / GQ_NW, n = e % GQ_NW, k, o;                                            \
            if (swiglu == 1 && (n & 1)) continue;                                               \
            if (!gq_weight_row(set0 + rs, n, swiglu, end0, end1, total, &k, &o)) continue;      \
            if (swiglu == 1) k = 0;                                                             \
            __global float *y = k == 0 ? y0 : k == 1 ? y1 : y2;                                 \
            ulong y_off = k == 0 ? y_off0 : k == 1 ? y_off1 : y_off2;                           \
            size_t yi = (size_t)y_off + (size_t)o;                                              \
            float scale = 1.0f;                                                                 \
            if (norm) /* the sum of squares of every team: the whole row */                     \
                scale = rsqrt(gq_red_sum(red, 0, GQ8_TEAMS, GQ_NW, 0, 1) /                      \
                                  (float)(n_chunks * 32) + eps);                                \
            float up = swiglu == 1 ? gq_red_sum(red, rs, ks, n + 1, 0, 1) * scale : 0.0f;       \
            gq_store(y, yi, gq_red_sum(red, rs, ks, n, 0, 1) * scale, up, swiglu, accumulate);  \
        }                                                                                       \
    }

#if GQ_TYPE == 12 || GQ_TYPE == 13
/* Q4_K / Q5_K task t (gq_load_k45's): block t / 8, pair p, half h: the
 * 16 bytes of nibbles hold values 16h.. of sub-blocks 2p (low) and 2p + 1
 * (high), whose 6-bit scales sc and mins m weigh d and dmin:
 * sum = d * sum_j d8_j sc_j (q . x8) - dmin * sum_j d8_j m_j sum(x8).
 * A task's weight bytes, loaded for the GQ_NW rows before any is used: */
typedef struct gq8_w {
    uint4 q[GQ_NW], hd[GQ_NW];
#if GQ_TYPE == 13
    uint4 qh[GQ_NW];
#endif
} gq8_w;
static void gq8_load(__global const uchar *const *wrow, int t, gq8_w *w) {
    int i = t % 8, p = i / 2, h = i % 2;
#pragma unroll
    for (int n = 0; n < GQ_NW; n++) {
#if GQ_TYPE == 12
        __global const uchar *blk = wrow[n] + (size_t)(t / 8) * 144;
        w->q[n] = *(__global const uint4 *)(blk + 16 + p * 32 + h * 16);
#else
        __global const uchar *blk = wrow[n] + (size_t)(t / 8) * 176;
        w->q[n] = *(__global const uint4 *)(blk + 48 + p * 32 + h * 16);
        w->qh[n] = *(__global const uint4 *)(blk + 16 + h * 16);
#endif
        w->hd[n] = *(__global const uint4 *)blk;
    }
}
static void gq8_dot(const gq8_w *w, int t, __local const float *xd, __local const int *xs,
                    __local const uint *xq, float *acc) {
    int i = t % 8, p = i / 2, h = i % 2, xo = (t / 8) * 256 + p * 64 + h * 16;
    uint4 xa = *(__local const uint4 *)(xq + xo / 4), xb = *(__local const uint4 *)(xq + xo / 4 + 8);
    float da = xd[xo / 32], db = xd[xo / 32 + 1];
    int sa = xs[xo / 16], sb = xs[xo / 16 + 2];
    uint sh = (uint)(p & 1) * 16u;
#pragma unroll
    for (int n = 0; n < GQ_NW; n++) {
        uint4 hd = w->hd[n];
        uint b0 = hd.y >> sh, b1 = hd.z >> sh, b2 = hd.w >> sh;
        uint a = p < 2 ? b0 & 0x3F3Fu : (b2 & 0x0F0Fu) | ((b0 >> 2) & 0x3030u);
        uint m = p < 2 ? b1 & 0x3F3Fu : ((b2 >> 4) & 0x0F0Fu) | ((b1 >> 2) & 0x3030u);
        uint4 lo = w->q[n] & GQ_M4, hi = (w->q[n] >> 4) & GQ_M4;
#if GQ_TYPE == 13
        lo |= ((w->qh[n] >> (uint)(2 * p)) & 0x01010101u) << 4;
        hi |= ((w->qh[n] >> (uint)(2 * p + 1)) & 0x01010101u) << 4;
#endif
        int ia = gq_dp4a(lo.x, xa.x, gq_dp4a(lo.y, xa.y, gq_dp4a(lo.z, xa.z, gq_dp4a(lo.w, xa.w, 0))));
        int ib = gq_dp4a(hi.x, xb.x, gq_dp4a(hi.y, xb.y, gq_dp4a(hi.z, xb.z, gq_dp4a(hi.w, xb.w, 0))));
        /* exact in f32: |sc * ia| < 2^22 (Q5_K), |m * sa| < 2^18 */
        float fd = da * (float)((int)(a & 0xFFu) * ia) + db * (float)((int)(a >> 8) * ib);
        float fm = da * (float)((int)(m & 0xFFu) * sa) + db * (float)((int)(m >> 8) * sb);
        acc[n] += gq_half_bits(hd.x & 0xFFFFu) * fd - gq_half_bits(hd.x >> 16) * fm;
    }
}
#else
/* Q6_K task t (gq_load_q6_k's): block t / 8, half H, values l0.. of each
 * quarter s (one scale each): sum = d * sum_s d8_s sc_s ((q . x8) - 32 sum(x8)).
 * A task's weight bytes, loaded for the GQ_NW rows before any is used: */
typedef struct gq8_w {
    uint2 sc[GQ_NW], qa[GQ_NW], qb[GQ_NW], qc[GQ_NW];
    uint d[GQ_NW];
} gq8_w;
static void gq8_load(__global const uchar *const *wrow, int t, gq8_w *w) {
    int H = (t % 8) / 4, l0 = (t % 4) * 8;
#pragma unroll
    for (int n = 0; n < GQ_NW; n++) {
        __global const uchar *blk = wrow[n] + (size_t)(t / 8) * 210;
        __global const uchar *ql = blk + H * 64 + l0, *qh = blk + 128 + H * 32 + l0;
        w->sc[n] = gq_load8_a2(blk + 192 + H * 8);
        w->qa[n] = gq_load8_a2(ql), w->qb[n] = gq_load8_a2(ql + 32), w->qc[n] = gq_load8_a2(qh);
        w->d[n] = *(__global const ushort *)(blk + 208);
    }
}
static void gq8_dot(const gq8_w *w, int t, __local const float *xd, __local const int *xs,
                    __local const uint *xq, float *acc) {
    int H = (t % 8) / 4, l0 = (t % 4) * 8, xo = (t / 8) * 256 + H * 128 + l0;
    uint2 xv[4];
    float d8[4];
    int x32[4];
#pragma unroll
    for (int s = 0; s < 4; s++) {
        xv[s] = *(__local const uint2 *)(xq + (xo + 32 * s) / 4);
        d8[s] = xd[(xo + 32 * s) / 32];
        x32[s] = 32 * xs[(xo + 32 * s) / 8];
    }
    uint sh = (uint)(l0 / 16) * 8u;
#pragma unroll
    for (int n = 0; n < GQ_NW; n++) {
        float f = 0.0f;
#pragma unroll
        for (int s = 0; s < 4; s++) {
            uint2 q = (s & 1) ? w->qb[n] : w->qa[n];
            uint2 u = ((q >> (uint)(4 * (s >> 1))) & GQ_M4) |
                      (((w->qc[n] >> (uint)(2 * s)) & 0x03030303u) << 4);
            int is = gq_dp4a(u.x, xv[s].x, gq_dp4a(u.y, xv[s].y, 0)) - x32[s];
            uint scw = s < 2 ? w->sc[n].x : w->sc[n].y;
            int g = (int)(char)((scw >> (sh + (uint)(s & 1) * 16u)) & 0xFFu);
            f += d8[s] * (float)(g * is); /* exact: |g * is| < 2^23 */
        }
        acc[n] += gq_half_bits(w->d[n]) * f;
    }
}
#endif

GQ8_GEMV(serve_gemv_q8_f32, gq_x8_f32)
GQ8_GEMV(serve_gemv_q8_bf16, gq_x8_bf16)
#endif

/* ---- dequantize: a whole [out, in] tensor ----
 * layout 0: f32 [out, in]; 1: f32 [in, out] (transposed, the f32 mode's
 * CLBlast layout); 2: bf16 [out, in], rounded to nearest even.
 * Global size: layout 1: (out, n_chunks), else (n_chunks, out), so that
 * neighbouring work-items write neighbouring values; a work-item a task. */
__kernel void serve_dequant(__global const uchar *w, ulong row_bytes, int n_chunks, int out,
                            __global uchar *dst, int layout) {
    int tr = layout == 1;
    int o = (int)get_global_id(tr ? 0 : 1), t = (int)get_global_id(tr ? 1 : 0);
    gq_task tk;
    GQ_LOAD(w + (size_t)o * (size_t)row_bytes, t, &tk);
    size_t in = (size_t)n_chunks * 32;
#pragma unroll
    for (int s = 0; s < 4; s++) {
        int gr = s / GQ_SEGS_PER_GROUP;
        float8 v = tk.sc[gr] * GQ_SEG(&tk, s);
        if (GQ_HAS_MIN) v = v - tk.mn[gr];
        size_t xo = (size_t)GQ_XOFF(t, s), base = (size_t)o * in + xo;
        /* 8 values at a 16-byte-aligned address (every row of a buffer whose
           in is a multiple of 8): whole vector stores; else vstore8, which
           only knows the element's alignment (eight scalar stores) */
        if (layout == 0) {
            __global float *d = (__global float *)dst + base;
            if (((size_t)d & 15u) == 0) {
                *(__global float4 *)d = v.lo;
                *(__global float4 *)(d + 4) = v.hi;
            } else {
                vstore8(v, 0, d);
            }
        } else if (layout == 1) {
            __global float *d = (__global float *)dst + xo * (size_t)out + (size_t)o;
            d[0] = v.s0, d[(size_t)out] = v.s1, d[2 * (size_t)out] = v.s2;
            d[3 * (size_t)out] = v.s3, d[4 * (size_t)out] = v.s4, d[5 * (size_t)out] = v.s5;
            d[6 * (size_t)out] = v.s6, d[7 * (size_t)out] = v.s7;
        } else {
            uint8 u = as_uint8(v);
            u = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
            __global ushort *d = (__global ushort *)dst + base;
            if (((size_t)d & 15u) == 0)
                *(__global uint4 *)d = (uint4)(u.s0 | u.s1 << 16, u.s2 | u.s3 << 16,
                                               u.s4 | u.s5 << 16, u.s6 | u.s7 << 16);
            else
                vstore8(convert_ushort8(u), 0, d);
        }
    }
}
