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

/* bf16 of f32, round to nearest even (NaN stays NaN), widened back */
static inline float gb_round_bf16(float f) {
    uint u = as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return as_float(((u >> 16) | 0x40u) << 16);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return as_float((u >> 16) << 16);
}

/* Y's tiles as the header says, the body of both kernels, with decode's
 * fused options (serve/gemm_bf16.h), each uniform over the launch (the
 * plain kernel passes them as constants 0, so its build drops them):
 *   x_f32: X is f32 (xf, x_off in floats), staged as bf16(x * scale[row]
 *          * norm[k]) (norm NULL: bf16(x)); with norm, the work-group first
 *          computes scale = 1 / sqrt(mean(x^2) + eps) of its 32 rows (8
 *          work-items a row, then in order of their partial sums);
 *          else X is bf16 (xb).
 *   swiglu: the work-group's 32 columns j are Y's (out / 2 of them); it sums
 *          W rows j (gate) and out / 2 + j (up) both, and writes
 *          silu(g) * u into range 0. Every sum has the same order.
 * xs, ws, us, part, scale: the kernel's local tiles (us, part and scale
 * used only with swiglu, norm, x_f32). */
static inline void
gb_tiles(int rows, int out, int in, int x_f32, __global const ushort *xb, __global const float *xf,
         ulong x_off, __global const float *norm, float eps, int swiglu, __global const ushort *w,
         __global float *y0, ulong off0, int cols0, int ld0, __global float *y1, ulong off1,
         int cols1, int ld1, __global float *y2, ulong off2, int ld2, int accumulate,
         __local float (*xs)[GB_TM + 1], __local float (*ws)[GB_TN + 1],
         __local float (*us)[GB_TN + 1], __local float *part, __local float *scale) {
    int tx = get_local_id(0), ty = get_local_id(1);
    int lid = ty * GB_WG + tx;
    int col0 = get_group_id(0) * GB_TN, row0 = get_group_id(1) * GB_TM;
    const int ycols = swiglu ? out / 2 : out; /* Y's columns */
    if (x_f32) {
        /* 8 work-items a row: lid = 8 r + p sums k = p, p + 8, ... */
        const int r = lid / 8, p = lid % 8, gr = row0 + r;
        float s = 0.0f;
        if (norm && gr < rows) {
            __global const float *xr = xf + x_off + (ulong)gr * (ulong)in;
            for (int k = p; k < in; k += 8) s += xr[k] * xr[k];
        }
        part[lid] = s;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < GB_TM) {
            float t = 0.0f;
            for (int q = 0; q < 8; q++) t += part[lid * 8 + q];
            scale[lid] = norm ? rsqrt(t / (float)in + eps) : 1.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float a00 = 0.0f, a01 = 0.0f, a10 = 0.0f, a11 = 0.0f;
    float b00 = 0.0f, b01 = 0.0f, b10 = 0.0f, b11 = 0.0f; /* swiglu: up */
    for (int k0 = 0; k0 < in; k0 += GB_TK) {
        for (int e = lid; e < GB_TM * GB_TK; e += GB_WG * GB_WG) {
            int r = e / GB_TK, kk = e % GB_TK, gk = k0 + kk;
            int gr = row0 + r, gc = col0 + r;
            float xv = 0.0f, wv = 0.0f, uv = 0.0f;
            if (gr < rows && gk < in) {
                if (x_f32) {
                    float v = xf[x_off + (ulong)gr * (ulong)in + gk] * scale[r];
                    xv = gb_round_bf16(norm ? v * norm[gk] : v);
                } else {
                    xv = gb_float(xb[x_off + (ulong)gr * (ulong)in + gk]);
                }
            }
            if (gc < ycols && gk < in) {
                wv = gb_float(w[(ulong)gc * (ulong)in + gk]);
                if (swiglu) uv = gb_float(w[(ulong)(gc + ycols) * (ulong)in + gk]);
            }
            xs[kk][r] = xv;
            ws[kk][r] = wv;
            if (swiglu) us[kk][r] = uv;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < GB_TK; kk++) {
            float x0 = xs[kk][ty], x1 = xs[kk][ty + GB_WG];
            float w0 = ws[kk][tx], w1 = ws[kk][tx + GB_WG];
            a00 += x0 * w0;
            a01 += x0 * w1;
            a10 += x1 * w0;
            a11 += x1 * w1;
            if (swiglu) {
                float u0 = us[kk][tx], u1 = us[kk][tx + GB_WG];
                b00 += x0 * u0;
                b01 += x0 * u1;
                b10 += x1 * u0;
                b11 += x1 * u1;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float acc[4] = {a00, a01, a10, a11}, up[4] = {b00, b01, b10, b11};
    for (int i = 0; i < 4; i++) {
        int r = row0 + ty + (i >> 1) * GB_WG, c = col0 + tx + (i & 1) * GB_WG;
        if (r >= rows || c >= ycols) continue;
        float v = acc[i];
        if (swiglu) v = v / (1.0f + exp(-v)) * up[i];
        __global float *y; /* the range column c falls in */
        if (c < cols0) {
            y = y0 + off0 + (ulong)r * (ulong)ld0 + c;
        } else if (c < cols0 + cols1) {
            y = y1 + off1 + (ulong)r * (ulong)ld1 + (c - cols0);
        } else {
            y = y2 + off2 + (ulong)r * (ulong)ld2 + (c - cols0 - cols1);
        }
        *y = accumulate ? *y + v : v;
    }
}

/* Y (+)= X . W^T, X bf16 (the prefill and unfused projections). */
__kernel __attribute__((reqd_work_group_size(GB_WG, GB_WG, 1))) void
serve_gemm_bf16(int rows, int out, int in, __global const ushort *x, ulong x_off,
                __global const ushort *w, __global float *y0, ulong off0, int cols0, int ld0,
                __global float *y1, ulong off1, int cols1, int ld1, __global float *y2,
                ulong off2, int cols2, int ld2, int accumulate) {
    __local float xs[GB_TK][GB_TM + 1]; /* [k][row] */
    __local float ws[GB_TK][GB_TN + 1]; /* [k][column] */
    gb_tiles(rows, out, in, 0, x, NULL, x_off, NULL, 0.0f, 0, w, y0, off0, cols0, ld0, y1, off1,
             cols1, ld1, y2, off2, ld2, accumulate, xs, ws, ws, NULL, NULL);
}

/* The fused variants (x_f32, norm, swiglu: gb_tiles). */
__kernel __attribute__((reqd_work_group_size(GB_WG, GB_WG, 1))) void
serve_gemm_bf16_fused(int rows, int out, int in, int x_f32, __global const ushort *xb,
                      __global const float *xf, ulong x_off, __global const float *norm, float eps,
                      int swiglu, __global const ushort *w, __global float *y0, ulong off0,
                      int cols0, int ld0, __global float *y1, ulong off1, int cols1, int ld1,
                      __global float *y2, ulong off2, int cols2, int ld2, int accumulate) {
    __local float xs[GB_TK][GB_TM + 1]; /* [k][row] */
    __local float ws[GB_TK][GB_TN + 1]; /* [k][column]: W rows (gate rows with swiglu) */
    __local float us[GB_TK][GB_TN + 1]; /* swiglu: the up rows */
    __local float part[GB_WG * GB_WG];  /* norm: partial sums of squares */
    __local float scale[GB_TM];         /* x_f32: the rows' scale (1 without norm) */
    gb_tiles(rows, out, in, x_f32, xb, xf, x_off, norm, eps, swiglu, w, y0, off0, cols0, ld0, y1,
             off1, cols1, ld1, y2, off2, ld2, accumulate, xs, ws, us, part, scale);
}
