/* SPDX-License-Identifier: Apache-2.0 */
/* One projection of the decoder through the kernel its weight and row
 * count call for:
 *
 *   Y[rows, out] (+)= X[rows, in] . W[out, in]^T
 *
 * W is described by serve_weight: a dense weight in the engine mode's
 * layout (f32 [in, out] transposed for CLBlast, or bf16 [out, in]) runs
 * the mode's GEMM; a weight kept quantized (ggml blocks, [out, in]) runs
 * the quantized GEMV for rows <= SERVE_QUANT_GEMV_MAX_ROWS (decode: the
 * blocks are read once, at 4.5 .. 8.5 bits a value), else is dequantized
 * on the device into the projector's scratch buffer (the mode's layout)
 * and runs the mode's GEMM over it (prefill: compute bound, the tensor
 * cores where there are some). */
#ifndef SERVE_PROJECTION_H
#define SERVE_PROJECTION_H

#include "serve.h"
#include "gemv_quant.h"

typedef struct serve_weight {
    cl_mem buf;
    /* SERVE_GGML_F32: f32 [in, out] (f32 mode); SERVE_GGML_BF16: bf16
     * [out, in] (bf16 mode); a type serve_gemv_quant_supports: its blocks,
     * [out] rows of in / block_elems blocks (either mode) */
    uint32_t type;
    int out, in;
} serve_weight;

/* What a projection may use; the model owns every part. */
typedef struct serve_projector {
    cl_command_queue queue;
    serve_gemv_quant *quant; /* for quantized weights */
    serve_gemm_bf16 *bf16;   /* bf16 mode (X bf16); NULL: f32 mode (X f32, CLBlast) */
    cl_mem gemm_temp;        /* f32 mode: CLBlast's temporaries (serve_gemm) */
    cl_mem scratch;          /* a dequantized weight: out * in values of the mode's type */
    serve_timer *timer;      /* events and enqueue counts (NULL: none) */
} serve_projector;

/* X: f32 mode f32 [rows, in] from element x_off; bf16 mode bf16, row 0 at
 * x_off, padded as serve_gemm_args says. Y: f32 [rows, out] from element
 * y_off (row stride out). accumulate 1: Y += (the residual). Every launch
 * takes a GEMM event slot of p->timer and counts as a GEMM enqueue there.
 * INVALID_ARGUMENT for a weight the mode does not read (f32 in bf16 mode,
 * bf16 in f32 mode), a quantized weight without p->quant or p->scratch
 * for rows past the GEMV; the kernels' own checks otherwise. */
int serve_project(const serve_projector *p, const serve_weight *w, int rows, cl_mem x,
                  size_t x_off, cl_mem y, size_t y_off, int accumulate);

/* A fused group (QKV: 3, gate/up: 2; at most SERVE_GEMV_MAX_OUTS) over
 * one X, weight k into Y y[k] from element 0 (row stride its out). Rows
 * <= SERVE_QUANT_GEMV_MAX_ROWS: one GEMV launch for each run of
 * consecutive weights quantized of one type (a Q4_K_M file's Q4_K attn_q
 * and attn_k, then its Q6_K attn_v: two); serve_project for a weight
 * alone in its run and for every weight otherwise (dense weights, a
 * prefill). */
int serve_project_group(const serve_projector *p, int n, const serve_weight *const *w, int rows,
                        cl_mem x, size_t x_off, const cl_mem *y, int accumulate);

/* Decode's fused form (issue 38) of a group of 1..SERVE_GEMV_MAX_OUTS
 * quantized weights, all through the quantized GEMV: X f32 [rows, in]
 * from element x_off whatever the mode (the residual stream, the
 * attention's output, a SwiGLU product), RMSNorm'ed on the way with gain
 * norm (f32 [in]; NULL: X as it is) and eps; swiglu 1: w = {gate, up},
 * y[0] gets silu(X . Wg^T) * (X . Wu^T) (y[1] untouched).
 * Consecutive weights of one type share a launch: a SwiGLU pair of one
 * type is one launch, of two types two (the gate's product into y[0],
 * then the up's launch multiplies silu of it; not with accumulate). 1 from
 * serve_project_fusable when the GEMV takes the group (p->quant, rows
 * 1..SERVE_QUANT_GEMV_MAX_ROWS, every weight quantized of a type it reads,
 * one in, SwiGLU's two of one out); serve_project_fused refuses the
 * others (INVALID_ARGUMENT). */
int serve_project_fusable(const serve_projector *p, int n, const serve_weight *const *w, int rows,
                          int swiglu);
int serve_project_fused(const serve_projector *p, int n, const serve_weight *const *w, int rows,
                        cl_mem x, size_t x_off, cl_mem norm, float eps, int swiglu,
                        const cl_mem *y, int accumulate);

#endif
