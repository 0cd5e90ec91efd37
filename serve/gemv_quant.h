/* SPDX-License-Identifier: Apache-2.0 */
/* Matrix-vector products with the weight kept quantized on the device:
 *
 *   y[n_out] = W[n_out, n_in] . x[n_in]
 *
 * W: n_out rows of ggml blocks exactly as a GGUF file stores them (Q8_0,
 * Q4_K or Q6_K, a Q4_K_M file's main types; serve/quant.h's layouts: a
 * row is n_in / block_elems blocks), x and y f32. Decode is
 * weight-bandwidth bound: a Q4_K weight is 4.5 bits a value against
 * bf16's 16. A portable OpenCL kernel (serve/gemv_quant.cl), checked
 * against the dequantized weight (tests/test_gemv_quant.c); the
 * decoder (model.c) does not use it yet: it dequantizes at load. */
#ifndef SERVE_GEMV_QUANT_H
#define SERVE_GEMV_QUANT_H

#include "serve.h"

typedef struct serve_gemv_quant serve_gemv_quant;

/* Builds the kernels for ctx's device. BUILD_FAILED with the log. */
int serve_gemv_quant_create(lazyattn_context *ctx, serve_gemv_quant **out);
void serve_gemv_quant_destroy(serve_gemv_quant *g);

/* 1 when serve_gemv_quant_run takes weights of this ggml type. */
int serve_gemv_quant_supports(uint32_t type);

/* Enqueues y = W x on queue (event: optional, the kernel's). type: Q8_0 or
 * Q4_K (another: UNSUPPORTED naming it); n_in a multiple of the type's
 * block (32, 256) and n_out >= 1, else INVALID_ARGUMENT; w must hold
 * n_out rows of blocks, x n_in floats, y n_out floats (checked against
 * the buffers' sizes). */
int serve_gemv_quant_run(serve_gemv_quant *g, cl_command_queue queue, uint32_t type, cl_mem w,
                         cl_mem x, cl_mem y, int n_out, int n_in, cl_event *event);

#endif
