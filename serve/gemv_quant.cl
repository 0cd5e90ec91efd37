/* SPDX-License-Identifier: Apache-2.0 */
/* y = W x with W kept quantized (serve/gemv_quant.h): one work-group of
 * GQ_WG work-items per output row, each work-item a strided share of the
 * row's blocks, a tree sum in local memory. W: [n_out] rows of ggml blocks
 * (serve/quant.c lays them out), x and y f32. Portable OpenCL 1.2:
 * vload_half reads the f16 scales (every scale is 2-byte aligned: Q8_0
 * blocks are 34 bytes, Q4_K 144, Q6_K 210). */
#define GQ_WG 64

static float gq_sum(__local float *red, float acc) {
    int lid = (int)get_local_id(0);
    red[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = GQ_WG / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return red[0];
}

/* Q8_0: 32 values, f16 d then int8 q[32]: w = d * q */
__kernel __attribute__((reqd_work_group_size(GQ_WG, 1, 1))) void
serve_gemv_q8_0(__global const uchar *w, __global const float *x, __global float *y, int n_in) {
    __local float red[GQ_WG];
    int o = (int)get_group_id(0), nb = n_in / 32;
    __global const uchar *row = w + (size_t)o * (size_t)nb * 34;
    float acc = 0.0f;
    for (int b = (int)get_local_id(0); b < nb; b += GQ_WG) {
        __global const uchar *blk = row + (size_t)b * 34;
        __global const float *xb = x + b * 32;
        float d = vload_half(0, (__global const half *)blk), s = 0.0f;
        for (int j = 0; j < 32; j++) s += (float)(char)blk[2 + j] * xb[j];
        acc += d * s;
    }
    float total = gq_sum(red, acc);
    if (get_local_id(0) == 0) y[o] = total;
}

/* Q4_K: 256 values, f16 d, dmin; 12 bytes of 6-bit scales and mins; 128
 * bytes of nibbles. A work-item takes one sub-block of 32 values:
 * w = d * sc * q - dmin * m, so its share is d * sc * sum(q x) - dmin * m * sum(x). */
__kernel __attribute__((reqd_work_group_size(GQ_WG, 1, 1))) void
serve_gemv_q4_k(__global const uchar *w, __global const float *x, __global float *y, int n_in) {
    __local float red[GQ_WG];
    int o = (int)get_group_id(0), nsub = n_in / 32;
    __global const uchar *row = w + (size_t)o * (size_t)(n_in / 256) * 144;
    float acc = 0.0f;
    for (int t = (int)get_local_id(0); t < nsub; t += GQ_WG) {
        int b = t / 8, j = t % 8;
        __global const uchar *blk = row + (size_t)b * 144, *sc6 = blk + 4;
        float d = vload_half(0, (__global const half *)blk);
        float dmin = vload_half(0, (__global const half *)(blk + 2));
        uint sc, m; /* ggml's get_scale_min_k4 */
        if (j < 4) {
            sc = sc6[j] & 63u;
            m = sc6[j + 4] & 63u;
        } else {
            sc = (sc6[j + 4] & 0xFu) | ((uint)(sc6[j - 4] >> 6) << 4);
            m = (uint)(sc6[j + 4] >> 4) | ((uint)(sc6[j] >> 6) << 4);
        }
        __global const uchar *q = blk + 16 + (j / 2) * 32;
        __global const float *xs = x + t * 32;
        int shift = (j & 1) * 4;
        float sq = 0.0f, sx = 0.0f;
        for (int l = 0; l < 32; l++) {
            sq += (float)((q[l] >> shift) & 0xF) * xs[l];
            sx += xs[l];
        }
        acc += d * (float)sc * sq - dmin * (float)m * sx;
    }
    float total = gq_sum(red, acc);
    if (get_local_id(0) == 0) y[o] = total;
}

/* Q6_K: 256 values, u8 ql[128], u8 qh[64], int8 scales[16], f16 d: two
 * halves of 128, each four quarters of 32 values (quarter s: low (s < 2)
 * or high nibbles of ql[s & 1 ? 32 : 0 ..], bits 2s of qh, scales 2s and
 * 2s + 1 of the half's 8). A work-item takes one quarter:
 * w = d * scale * (q - 32). */
__kernel __attribute__((reqd_work_group_size(GQ_WG, 1, 1))) void
serve_gemv_q6_k(__global const uchar *w, __global const float *x, __global float *y, int n_in) {
    __local float red[GQ_WG];
    int o = (int)get_group_id(0), nq = n_in / 32;
    __global const uchar *row = w + (size_t)o * (size_t)(n_in / 256) * 210;
    float acc = 0.0f;
    for (int t = (int)get_local_id(0); t < nq; t += GQ_WG) {
        int b = t / 8, h = (t % 8) / 4, s = t % 4;
        __global const uchar *blk = row + (size_t)b * 210;
        __global const uchar *ql = blk + h * 64 + (s & 1) * 32, *qh = blk + 128 + h * 32;
        __global const char *sc = (__global const char *)(blk + 192) + h * 8 + 2 * s;
        float d = vload_half(0, (__global const half *)(blk + 208));
        __global const float *xs = x + t * 32;
        int shift = (s >> 1) * 4, hshift = 2 * s;
        float a0 = 0.0f, a1 = 0.0f;
        for (int l = 0; l < 32; l++) {
            int q = (int)(((ql[l] >> shift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
            if (l < 16) a0 += (float)q * xs[l];
            else a1 += (float)q * xs[l];
        }
        acc += d * ((float)sc[0] * a0 + (float)sc[1] * a1);
    }
    float total = gq_sum(red, acc);
    if (get_local_id(0) == 0) y[o] = total;
}
