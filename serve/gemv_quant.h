/* SPDX-License-Identifier: Apache-2.0 */
/* Weights kept quantized on the device: the kernels that read ggml blocks
 * (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) exactly as a GGUF file stores them
 * (serve/quant.h's layouts: a row of `in` values is in / block_elems
 * blocks; a weight [out, in] is `out` such rows back to back).
 *
 *   GEMV:        Y[rows, out] (+)= X[rows, in] . W[out, in]^T, rows <= 8
 *   dequantize:  W -> f32 [out, in], f32 [in, out] or bf16 [out, in]
 *
 * Decode is weight-bandwidth bound: a Q4_K weight is 4.5 bits a value
 * against bf16's 16, so the GEMV reads the blocks themselves, once for all
 * rows; a prefill is compute bound, so its projections dequantize the
 * weight into a scratch buffer and run the GEMM (serve/projection.c
 * routes). The dequantizer's values are serve/quant.c's to the bit; the
 * GEMV sums a group of values as scale * sum(q x) - min * sum(x), the same
 * sum to f32 rounding (serve/gemv_quant.cl). Portable OpenCL 1.2;
 * tests/test_gemv_quant.c. */
#ifndef SERVE_GEMV_QUANT_H
#define SERVE_GEMV_QUANT_H

#include "serve.h"

/* The most activation rows the GEMV takes (a kernel for 1 row, one for up
 * to this many). Each work-item multiplies every decoded weight value into
 * each row with scalar f32 arithmetic (accumulators per row and weight row
 * in registers); past a handful of rows that
 * arithmetic, not the weight read, bounds it, and dequantizing the weight
 * once into a scratch buffer for the (tensor-core) GEMM costs less: 8 is
 * where a decode batch still reads the weight once at bandwidth. */
#define SERVE_QUANT_GEMV_MAX_ROWS 8

typedef struct serve_gemv_quant serve_gemv_quant;

/* The kernels for ctx's device, one program per type, built when a type
 * is first prepared or run. */
int serve_gemv_quant_create(lazyattn_context *ctx, serve_gemv_quant **out);
/* Builds the type's kernels now (a model does at load, so that no forward
 * compiles). UNSUPPORTED naming another type; BUILD_FAILED with the log
 * (and on every later call for that type). */
int serve_gemv_quant_prepare(serve_gemv_quant *g, uint32_t type);
void serve_gemv_quant_destroy(serve_gemv_quant *g);

/* on 1: a GEMV of one activation row over Q4_K, Q5_K or Q6_K weights
 * takes the int8 kernel (serve/gemv_quant.cl: the row quantized to 8
 * bits a value, a scale every 32, as llama.cpp's Q8_1; integer dot
 * products; within sum |w| * amax / 254 a block of 32 of the exact
 * product), where the row fits the device's local memory; 0: the exact
 * kernel. The default is LAZYATTN_TUNE's serve.gemv_q8 when set, else on
 * NVIDIA's fast path (dp4a) and off elsewhere. Returns the previous
 * setting (0 for a NULL g). */
int serve_gemv_quant_set_q8(serve_gemv_quant *g, int on);
/* int8 GEMVs enqueued since create (0 for a NULL g). */
int64_t serve_gemv_quant_q8_launches(const serve_gemv_quant *g);

/* 1 when the GEMV and the dequantizer take weights of this ggml type
 * (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K). */
int serve_gemv_quant_supports(uint32_t type);

/* A fused group takes one launch: up to this many weights of one type,
 * each its own column range of Y (QKV: 3, gate/up: 2). */
#define SERVE_GEMV_MAX_OUTS 3

typedef struct serve_gemv_out {
    cl_mem w;     /* [cols] rows of in / block_elems blocks */
    cl_mem y;     /* f32: row r at element y_off + r * ldy (ldy >= cols) */
    size_t y_off;
    int cols, ldy;
} serve_gemv_out;

typedef struct serve_gemv_args {
    uint32_t type; /* the weights' ggml type (serve_gemv_quant_supports), all of them */
    int rows, in;  /* 1..SERVE_QUANT_GEMV_MAX_ROWS rows; in a multiple of the type's block */
    cl_mem x;      /* X: row r at element x_off + r * in, f32 or bf16 (x_bf16) */
    size_t x_off;
    int x_bf16;    /* 1: X holds bf16 bit patterns (the bf16 engine mode's GEMM inputs) */
    int n_outs;    /* 1..SERVE_GEMV_MAX_OUTS column ranges, in order */
    serve_gemv_out outs[SERVE_GEMV_MAX_OUTS];
    int accumulate; /* 1: Y += X . W^T (the residual projections) */
    /* fused (decode's launches, issue 38; zero-initialised: off) */
    cl_mem norm;    /* f32 [in] gain: X RMSNorm'ed on the way, x * s_r * gain with
                       s_r = 1 / sqrt(mean(x_r^2) + norm_eps) (NULL: X as it is) */
    float norm_eps;
    int swiglu;     /* 1: two ranges of equal cols, gate then up: Y_0 = silu(X . Wg^T) *
                       (X . Wu^T), nothing written to range 1's y; 2 (a gate and an up
                       of different types, two launches): one range, up, whose y holds
                       X . Wg^T from the gate's launch: Y = silu(Y) * (X . Wu^T) */
} serve_gemv_args;

/* Enqueues the GEMV on queue (event: optional, the kernel's), one launch
 * for every range: Y_k[rows, cols_k] (+)= X . W_k^T; prepares the type
 * first when it was not. UNSUPPORTED naming another type;
 * INVALID_ARGUMENT for rows outside 1..SERVE_QUANT_GEMV_MAX_ROWS, n_outs
 * outside 1..SERVE_GEMV_MAX_OUTS, a range's cols < 1 or ldy < cols, in
 * not a positive multiple of the block, accumulate not 0/1, swiglu not
 * 0/1/2, swiglu 1 without exactly two ranges of equal cols, swiglu 2
 * with more than one range or accumulate, a norm_eps not
 * positive and finite (with norm), or a buffer smaller than the shape
 * needs (checked against the buffers' sizes, norm's too; the message
 * gives both). */
int serve_gemv_quant_run(serve_gemv_quant *g, cl_command_queue queue, const serve_gemv_args *a,
                         cl_event *event);

/* What serve_dequant_run writes. */
typedef enum serve_dequant_layout {
    SERVE_DEQUANT_F32 = 0,   /* f32 [out, in] */
    SERVE_DEQUANT_F32_T = 1, /* f32 [in, out]: the f32 mode's transposed CLBlast weight */
    SERVE_DEQUANT_BF16 = 2   /* bf16 [out, in], rounded to nearest even (serve_bf16_of) */
} serve_dequant_layout;

/* Enqueues dst = the [out, in] weight w of type `type` in f32 or bf16
 * (layout), the same values as serve_dequantize (and, for bf16, then
 * serve_bf16_of) on the host. The same checks as serve_gemv_quant_run
 * (dst must hold out * in values of the layout's size). */
int serve_dequant_run(serve_gemv_quant *g, cl_command_queue queue, uint32_t type, cl_mem w,
                      int out, int in, cl_mem dst, serve_dequant_layout layout, cl_event *event);

#endif
