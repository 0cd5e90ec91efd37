/* SPDX-License-Identifier: Apache-2.0 */
/* The float64 reference of decode's fused projections (serve/gemm_bf16.h:
 * x_f32, norm, swiglu), shared by test_gemm_fused (the dispatcher) and
 * test_gemm_small (the NVIDIA kernel): the unfused sequence they replace,
 * rmsnorm -> bf16 -> GEMM (-> SwiGLU), with bounds from bf16 rounding.
 *
 * The normed X is rounded to bf16 by both sides. A term whose value lies so
 * near a rounding boundary that the kernel's f32 scale (relative error <
 * 2^-14: f32 sums of squares, rsqrt, or NVIDIA's rsqrt.approx, all far
 * below) could round it the other way may differ by one bf16 ulp; every
 * other term must match. So a dot product's bound is the sum of |w| ulp
 * over those terms plus the f32 accumulation bound, and SwiGLU propagates
 * the bounds of g and u (|silu'| <= 1.1) plus a relative 2^-16 for the
 * device's exp (NVIDIA: ex2.approx of -x log2 e). */
#ifndef TESTS_GEMM_FUSED_REF_H
#define TESTS_GEMM_FUSED_REF_H

#include <math.h>
#include <stdint.h>

#include "gemm_bf16.h"

static inline double fref_bf(double v) { return serve_float_of_bf16(serve_bf16_of((float)v)); }

/* xn[k] = bf16(x[k] * s * gain[k]), s = 1 / sqrt(mean(x^2) + eps) (gain
 * NULL: bf16(x[k]), no scale); amb[k]: the ulp it may be off by on the
 * device, 0 where the rounding is certain. x, gain, xn, amb: [in] */
static inline void fref_norm_row(const float *x, const float *gain, float eps, int in, double *xn,
                                 double *amb) {
    double ss = 0;
    for (int k = 0; k < in; k++) ss += (double)x[k] * x[k];
    const double sc = gain ? 1.0 / sqrt(ss / in + (double)eps) : 1.0;
    for (int k = 0; k < in; k++) {
        const double v = (double)x[k] * sc * (gain ? gain[k] : 1.0f), e = ldexp(fabs(v), -14);
        xn[k] = fref_bf(v);
        amb[k] = !gain || fref_bf(v - e) == fref_bf(v + e) ? 0.0 : fabs(fref_bf(v + e) - fref_bf(v - e));
    }
}

/* W's bf16 row w [in] . xn, and in *bound the bound of its device value */
static inline double fref_dot(const uint16_t *w, const double *xn, const double *amb, int in,
                              double *bound) {
    double sum = 0, mag = 0, flip = 0;
    for (int k = 0; k < in; k++) {
        const double wk = serve_float_of_bf16(w[k]);
        sum += wk * xn[k];
        mag += fabs(wk * xn[k]);
        flip += fabs(wk) * amb[k];
    }
    *bound = 2.0 * (in + 1) * ldexp(mag, -24) + flip + 1e-30;
    return sum;
}

/* silu(g) * u of the reference sums g, u with their bounds bg, bu; *bound its bound */
static inline double fref_swiglu(double g, double bg, double u, double bu, double *bound) {
    const double sg = g / (1.0 + exp(-g)), want = sg * u;
    *bound = 1.1 * bg * (fabs(u) + bu) + fabs(sg) * bu + ldexp(fabs(want), -16) + 1e-30;
    return want;
}

#endif
