/* SPDX-License-Identifier: Apache-2.0 */
/* bf16 projections (issue 16): the arguments every bf16 GEMM of serve/ takes.
 *
 *   Y[rows, out] = X[rows, in] . W[out, in]^T
 *
 * X and W hold bf16 bit patterns (uint16, round-to-nearest-even), row-major
 * with the reduction dimension `in` contiguous (W as GGUF / PyTorch store it,
 * no transpose). Accumulation is f32 and Y is f32. Y may be cut into up to
 * three column ranges, each its own buffer (a fused QKV projection writes q,
 * k and v; a fused gate/up writes g and u), in order: range r covers columns
 * [sum of earlier cols, + cols).
 *
 * Decode's fused variants (issue 38; serve_gemm_bf16_fused says where the
 * dispatcher offers them): X may arrive as f32 rows, staged as bf16(x), or
 * as bf16(x * s_row * norm[k]) with an RMSNorm (s_row = 1 / sqrt(mean over
 * k of x^2 + norm_eps), computed by the kernel), replacing a norm launch
 * and a bf16 copy of X; and a gate/up projection may end in SwiGLU: W is
 * [gate; up] (out = 2 ffn rows, gate rows first), the one output range
 * holds ffn columns, Y[r, j] = silu(g) * u with g = X[r] . W[j], u = X[r] .
 * W[ffn + j] (f32; the down projection reads it with x_f32 1).
 *
 * Implementations: serve/gemm_nv_large.c (tensor cores, rows > 64),
 * serve/gemm_nv_small.c (tensor cores, rows <= 64, weight-bandwidth bound),
 * serve/gemm_bf16.c (the portable bf16 kernel and the dispatcher). Each run
 * function checks the arguments it depends on and returns a lazyattn status
 * (LAZYATTN_STATUS_UNSUPPORTED for a shape its kernel does not cover, so the
 * dispatcher can fall back), recording the detail with serve_fail(). */
#ifndef SERVE_GEMM_BF16_H
#define SERVE_GEMM_BF16_H

#include "serve.h"

#define SERVE_GEMM_MAX_OUTS 3

/* Row padding of X: from x_off, the X buffer must hold `rows` rounded up to
 * a multiple of SERVE_GEMM_ROW_PAD rows (a kernel may read a whole 128-row
 * tile); rows past `rows` may be read but are never written to Y. */
#define SERVE_GEMM_ROW_PAD 128

typedef struct serve_gemm_out {
    cl_mem buf; /* f32 */
    size_t off; /* elements (floats) to Y's row 0 of this range */
    int cols;   /* columns of this range */
    int ld;     /* floats between consecutive rows */
} serve_gemm_out;

typedef struct serve_gemm_args {
    int rows, out, in; /* Y[rows, out] = X[rows, in] . W[out, in]^T */
    cl_mem x;          /* bf16 [rows (padded, SERVE_GEMM_ROW_PAD), in], row stride `in` */
    size_t x_off;      /* elements (bf16) to X's row 0 */
    cl_mem w;          /* bf16 [out, in] */
    int n_outs;        /* 1..SERVE_GEMM_MAX_OUTS; the ranges' cols sum to out */
    serve_gemm_out outs[SERVE_GEMM_MAX_OUTS];
    int accumulate; /* 0: Y = X . W^T; 1: Y += X . W^T (the residual) */
    /* fused variants (0 / NULL: none) */
    int x_f32;       /* 1: x is f32 [rows, in] (no padding), row stride `in`, x_off in
                      * floats; staged as bf16(x), or bf16(x * s_row * norm[k]) */
    cl_mem norm;     /* x_f32 only: NULL, or the RMSNorm gain, f32 [in] */
    float norm_eps;  /* with norm: > 0, finite */
    int swiglu;      /* 1: W [gate; up] (out even), one range of out / 2 columns:
                      * Y = silu(X . Wgate^T) * (X . Wup^T); accumulate 0 */
} serve_gemm_args;

/* Host-side bf16 <-> f32 (round to nearest even; NaN stays NaN). */
static inline uint16_t serve_bf16_of(float f) {
    union { float f; uint32_t u; } v = {.f = f};
    if ((v.u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((v.u >> 16) | 0x40u);
    v.u += 0x7FFFu + ((v.u >> 16) & 1u);
    return (uint16_t)(v.u >> 16);
}
static inline float serve_float_of_bf16(uint16_t h) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}

#endif
