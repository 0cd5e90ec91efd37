/* SPDX-License-Identifier: Apache-2.0 */
/* The portable bf16 projection (serve/gemm_bf16.h): plain OpenCL C 1.2 for
 * any device (PoCL in CI; the fallback where no tensor-core kernel covers a
 * device or shape).
 *
 *   Y[rows, out] (+)= X[rows, in] . W[out, in]^T
 *
 * X and W hold bf16 bit patterns (ushort), widened to f32 with a shift;
 * products and sums are f32. One work-group of 16 x 16 work-items computes
 * a 32 x 32 tile of Y (each work-item 2 x 2: rows ty, ty + 16 and columns
 * tx, tx + 16, so neighbours write neighbouring columns), stepping through
 * `in` 16 at a time with both tiles staged in local memory as f32. Rows past
 * `rows`, columns past `out` and reduction indices past `in` load zeros, so
 * any shape works; the K loop is uniform over the work-group (every barrier
 * is reached by all). A column c of Y belongs to the first range whose
 * cumulative cols exceed it (up to three ranges, each its own buffer, offset
 * and row stride). Reasonable, not tuned. */

#define GB_TM 32 /* rows of Y per work-group */
#define GB_TN 32 /* columns of Y per work-group */
#define GB_TK 16 /* reduction step */
#define GB_WG 16 /* work-group is GB_WG x GB_WG */

static inline float gb_float(ushort h) { return as_float((uint)h << 16); }

__kernel __attribute__((reqd_work_group_size(GB_WG, GB_WG, 1))) void
serve_gemm_bf16(int rows, int out, int in, __global const ushort *x, ulong x_off,
                __global const ushort *w, __global float *y0, ulong off0, int cols0, int ld0,
                __global float *y1, ulong off1, int cols1, int ld1, __global float *y2,
                ulong off2, int cols2, int ld2, int accumulate) {
    __local float xs[GB_TK][GB_TM + 1]; /* [k][row] */
    __local float ws[GB_TK][GB_TN + 1]; /* [k][column] */
    int tx = get_local_id(0), ty = get_local_id(1);
    int lid = ty * GB_WG + tx;
    int col0 = get_group_id(0) * GB_TN, row0 = get_group_id(1) * GB_TM;
    float a00 = 0.0f, a01 = 0.0f, a10 = 0.0f, a11 = 0.0f;
    for (int k0 = 0; k0 < in; k0 += GB_TK) {
        /* 32 x 16 of each operand, two elements per work-item; consecutive
         * work-items read consecutive k (contiguous in both X and W) */
        for (int e = lid; e < GB_TM * GB_TK; e += GB_WG * GB_WG) {
            int r = e / GB_TK, kk = e % GB_TK, gk = k0 + kk;
            int gr = row0 + r, gc = col0 + r;
            float xv = 0.0f, wv = 0.0f;
            if (gr < rows && gk < in) xv = gb_float(x[x_off + (ulong)gr * (ulong)in + gk]);
            if (gc < out && gk < in) wv = gb_float(w[(ulong)gc * (ulong)in + gk]);
            xs[kk][r] = xv;
            ws[kk][r] = wv;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < GB_TK; kk++) {
            float x0 = xs[kk][ty], x1 = xs[kk][ty + GB_WG];
            float w0 = ws[kk][tx], w1 = ws[kk][tx + GB_WG];
            a00 += x0 * w0;
            a01 += x0 * w1;
            a10 += x1 * w0;
            a11 += x1 * w1;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float acc[4] = {a00, a01, a10, a11};
    for (int i = 0; i < 4; i++) {
        int r = row0 + ty + (i >> 1) * GB_WG, c = col0 + tx + (i & 1) * GB_WG;
        if (r >= rows || c >= out) continue;
        __global float *y;
        if (c < cols0) {
            y = y0 + off0 + (ulong)r * (ulong)ld0 + c;
        } else if (c < cols0 + cols1) {
            y = y1 + off1 + (ulong)r * (ulong)ld1 + (c - cols0);
        } else {
            y = y2 + off2 + (ulong)r * (ulong)ld2 + (c - cols0 - cols1);
        }
        *y = accumulate ? *y + acc[i] : acc[i];
    }
}
