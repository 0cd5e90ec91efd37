/* SPDX-License-Identifier: Apache-2.0 */
/* ggml tensor types of GGUF files: their block layouts (ggml-common.h) and
 * their conversion to f32. A type is a block of block_elems values stored
 * in block_bytes bytes; a row of n values (n a multiple of block_elems) is
 * n / block_elems blocks. */
#ifndef SERVE_QUANT_H
#define SERVE_QUANT_H

#include <stdint.h>

/* ggml type ids (ggml.h's enum ggml_type), those named in messages */
enum {
    SERVE_GGML_F32 = 0, SERVE_GGML_F16 = 1, SERVE_GGML_Q4_0 = 2, SERVE_GGML_Q8_0 = 8,
    SERVE_GGML_Q2_K = 10, SERVE_GGML_Q4_K = 12, SERVE_GGML_Q5_K = 13, SERVE_GGML_Q6_K = 14,
    SERVE_GGML_BF16 = 30
};

/* The type's ggml name ("Q4_K"; "unknown" for an id ggml does not have). */
const char *serve_ggml_type_name(uint32_t type);

/* 1 if this reader converts the type (F32, F16, BF16, Q8_0, Q4_0, Q4_K,
 * Q5_K, Q6_K), else 0. */
int serve_ggml_type_supported(uint32_t type);

/* Bytes of n values of a supported type: FORMAT naming the tensor (name)
 * and the type when the type is unsupported ("Q2_K not supported") or n is
 * not a whole number of blocks. n: values of one row (ggml rows are whole
 * blocks). */
int serve_ggml_row_bytes(uint32_t type, uint64_t n, const char *name, uint64_t *bytes);

/* dst[0 .. n) = the f32 values of src, n values of type `type` stored in
 * src_bytes bytes. n must be whole blocks and src_bytes exactly their size
 * (serve_ggml_row_bytes), else FORMAT naming the tensor: nothing past
 * src + src_bytes is read. Unsupported types: FORMAT "TYPE not supported".
 * The arithmetic is ggml's dequantize_row_* (f32, one rounding per
 * product, no fused multiply-add): the same f32 values as ggml and as
 * gguf-py's gguf.quants.dequantize. */
int serve_dequantize(uint32_t type, const void *src, uint64_t src_bytes, float *dst, uint64_t n,
                     const char *name);

/* IEEE half to f32, exact (subnormals, infinities and NaN kept). */
float serve_half_to_float(uint16_t h);

#endif
