/* SPDX-License-Identifier: Apache-2.0 */
/*
 * K/V storage type, chosen at build time with -DLZ_DTYPE:
 *   0 f32, 1 f16 (IEEE half through vload_half/vstore_half: works without
 *   cl_khr_fp16, which NVIDIA's OpenCL lacks), 2 bf16 (upper half of an f32,
 *   stored round-to-nearest-even).
 * LZ_LOAD(p, i) gives a float, LZ_STORE(p, i, x) stores one, LZ_LOAD4(p, i)
 * gives elements i..i+3 (i a multiple of 4) as a float4, LZ_LOAD8 i..i+7;
 * lz_raw8 / lz_cvt8 / lz_load4v below are the aligned vector forms.
 */
#ifndef LZ_DTYPE
#define LZ_DTYPE 0
#endif

/* bf16 from f32, round-to-nearest-even (infinities and NaNs kept). */
inline ushort lz_bf16_from_float(float x) {
    uint u = as_uint(x);
    if ((u & 0x7F800000u) == 0x7F800000u) return (ushort)(u >> 16); /* inf, nan */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}

/* Query and output rows in a type chosen at run time (lazyattn_dtype: 0
 * f32, 1 f16, 2 bf16; one branch per load or store, so no program variant
 * per type): elements e .. e + 3 (e a multiple of 4) of a buffer declared
 * float, read or written as that type. The portable kernels only (the
 * NVIDIA program takes f32 q/out; the host sends other types to the
 * portable kernels). */
#ifndef LAZYATTN_FAST_NV
inline float4 lz_io_load4(__global const float *p, size_t e, int dtype) {
    if (dtype == 1) return vload_half4(0, (__global const half *)p + e);
    if (dtype == 2) return as_float4(convert_uint4(vload4(0, (__global const ushort *)p + e)) << 16);
    return vload4(0, p + e);
}
inline void lz_io_store(float x, __global float *p, size_t e, int dtype) {
    if (dtype == 1) vstore_half_rte(x, e, (__global half *)p);
    else if (dtype == 2) ((__global ushort *)p)[e] = lz_bf16_from_float(x);
    else p[e] = x;
}
inline void lz_io_store4(float4 x, __global float *p, size_t e, int dtype) {
    if (dtype == 1) vstore_half4_rte(x, 0, (__global half *)p + e);
    else if (dtype == 2) vstore4((ushort4)(lz_bf16_from_float(x.x), lz_bf16_from_float(x.y),
                                           lz_bf16_from_float(x.z), lz_bf16_from_float(x.w)),
                                 0, (__global ushort *)p + e);
    else vstore4(x, 0, p + e);
}
#endif

#if LZ_DTYPE == 0
#define LZ_STORE_T float
#define LZ_LOAD(p, i) ((p)[i])
#define LZ_STORE(p, i, x) ((p)[i] = (x))
#define LZ_LOAD4(p, i) vload4(0, (p) + (i))
#define LZ_LOAD8(p, i) vload8(0, (p) + (i))
#elif LZ_DTYPE == 1
#define LZ_STORE_T half
#define LZ_LOAD(p, i) vload_half((i), (p))
#define LZ_STORE(p, i, x) vstore_half_rte((x), (i), (p))
#define LZ_LOAD4(p, i) vload_half4(0, (p) + (i))
#define LZ_LOAD8(p, i) vload_half8(0, (p) + (i))
#elif LZ_DTYPE == 2
#define LZ_STORE_T ushort
#define LZ_LOAD(p, i) as_float((uint)(p)[i] << 16)
#define LZ_STORE(p, i, x) ((p)[i] = lz_bf16_from_float(x))
#define LZ_LOAD4(p, i) as_float4(convert_uint4(vload4(0, (p) + (i))) << 16)
#define LZ_LOAD8(p, i) as_float8(convert_uint8(vload8(0, (p) + (i))) << 16)
#else
#error "LZ_DTYPE must be 0 (f32), 1 (f16) or 2 (bf16)"
#endif

#ifndef LZ_HEAD_DIM
#define LZ_HEAD_DIM 128
#endif
#ifndef LZ_BLOCK
#define LZ_BLOCK 16
#endif

/* K/V loads as true vector loads: vload_half8 / vload8 promise only the
 * element's alignment, so a compiler may split them into 2- or 4-byte loads
 * (on the H200 the decode read 2-3x faster without them, docs/PERFLOG.md
 * portable p5). Callers pass element offsets that are multiples of 8
 * (lz_raw8) or 4 (lz_load4v) into buffers aligned to 16 bytes, so the
 * 16-byte (8-byte for 4 halves) loads are aligned. f16 is
 * converted in registers: the hardware conversion on NVIDIA (inline PTX;
 * NVIDIA's OpenCL has no cl_khr_fp16), elsewhere exactly with integer
 * operations (subnormals, infinities and NaNs included). */
#if LZ_DTYPE == 1
inline float2 lz_h2f2(uint u) { /* the halves of u (low one first) as floats */
#if defined(cl_nv_pragma_unroll) && !defined(LZ_NO_ASM)
    float a, b;
    asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %2; cvt.f32.f16 %0, lo; cvt.f32.f16 %1, hi; }"
        : "=f"(a), "=f"(b)
        : "r"(u));
    return (float2)(a, b);
#else
    const uint2 h = (uint2)(u & 0xFFFFu, u >> 16), em = h & 0x7FFFu, sign = (h & 0x8000u) << 16;
    /* (em << 13) is the value x 2^-112 as an f32 (normal or subnormal): exact */
    const float2 f = as_float2((em << 13) | sign) * 0x1p112f;
    const uint2 special = sign | 0x7F800000u | (em << 13); /* infinity, NaN */
    return (float2)(em.x >= 0x7C00u ? as_float(special.x) : f.x, em.y >= 0x7C00u ? as_float(special.y) : f.y);
#endif
}
#endif
/* 8 elements as stored (lz_raw8), then as floats (lz_cvt8): K rows
 * stay in their stored width in registers until used */
#if LZ_DTYPE == 0
#define LZ_RAW8_T float8
inline float8 lz_raw8(__global const LZ_STORE_T *p, long i) {
    const __global float4 *v = (const __global float4 *)(p + i);
    return (float8)(v[0], v[1]);
}
inline float8 lz_cvt8(float8 x) { return x; }
#else
/* 4 stored 16-bit elements (two words, the first element in a's low half)
 * as floats. */
inline float4 lz_cvt4(uint a, uint b) {
#if LZ_DTYPE == 1
    return (float4)(lz_h2f2(a), lz_h2f2(b));
#else
    return as_float4((uint4)(a << 16, a & 0xFFFF0000u, b << 16, b & 0xFFFF0000u));
#endif
}
#define LZ_RAW8_T uint4
inline uint4 lz_raw8(__global const LZ_STORE_T *p, long i) { return *(const __global uint4 *)(p + i); }
inline float8 lz_cvt8(uint4 u) { return (float8)(lz_cvt4(u.x, u.y), lz_cvt4(u.z, u.w)); }
#endif
inline float4 lz_load4v(__global const LZ_STORE_T *p, long i) {
#if LZ_DTYPE == 0
    return *(const __global float4 *)(p + i);
#else
    const uint2 u = *(const __global uint2 *)(p + i);
    return lz_cvt4(u.x, u.y);
#endif
}

/* Records error bits (LZ_ERR_*, cl/kernel_abi.h) in the attention's error
 * word instead of reading or writing out of bounds. */
inline void lz_raise(__global int *err, int bits) { atomic_or(err, bits); }

/*
 * A pool buffer is [n_blocks, n_kv_heads] pages of LZ_BLOCK x LZ_HEAD_DIM
 * elements (lazyattn_kv_layout), each page laid out
 *   LZ_KV_TILED 0 (ROWS):  [LZ_BLOCK][LZ_HEAD_DIM], a token's dims contiguous;
 *   LZ_KV_TILED 1 (TILED): [LZ_BLOCK / 8][LZ_HEAD_DIM / 8][8 tokens][8 dims],
 *     the 8 x 8 core matrices the NVIDIA kernels keep in local memory (what
 *     Hopper's wgmma reads), so that their copies move whole 128-byte lines
 *     (cl/nv/, cl/decode_nv.cl); LZ_BLOCK a multiple of 8.
 * Either way an element's offset in its page is a token part plus a dim
 * part: lz_kv_offset gives (block, kv head, token, dim 0), LZ_KV_DIM(d) what
 * dim d adds to it. Dims d .. d + 7 (d a multiple of 8) stay contiguous, so
 * the kernels' 4- and 8-element loads read one offset + LZ_KV_DIM(d).
 */
#ifndef LZ_KV_TILED
#define LZ_KV_TILED 0
#endif
#if LZ_KV_TILED
#if LZ_BLOCK % 8 || LZ_HEAD_DIM % 8
#error "the tiled KV layout needs LZ_BLOCK and LZ_HEAD_DIM multiples of 8"
#endif
#define LZ_KV_TOKEN(t) ((size_t)((t) >> 3) * (8 * LZ_HEAD_DIM) + (size_t)((t) & 7) * 8)
#define LZ_KV_DIM(d) ((((d) >> 3) << 6) + ((d) & 7))
/* elements from a page's start that hold its tokens 0 .. n - 1 (whole groups of 8) */
#define LZ_KV_SPAN(n) ((((n) + 7) >> 3) * (8 * LZ_HEAD_DIM))
#else
#define LZ_KV_TOKEN(t) ((size_t)(t) * LZ_HEAD_DIM)
#define LZ_KV_DIM(d) (d)
#define LZ_KV_SPAN(n) ((n) * LZ_HEAD_DIM)
#endif
inline size_t lz_kv_offset(int block, int kv_head, int n_kv_heads, int token) {
#if LZ_KV_TILED
    return ((size_t)block * n_kv_heads + kv_head) * (LZ_BLOCK * LZ_HEAD_DIM) + LZ_KV_TOKEN(token);
#else
    return (((size_t)block * n_kv_heads + kv_head) * LZ_BLOCK + token) * LZ_HEAD_DIM;
#endif
}

/* A table entry the kernels skip (and report): its block outside the pool or
 * its valid length above the block size (lz_entry_storage_bad), or also
 * (lz_entry_bad) its logical start pos0 or stored start pos0 - delta out of
 * 0..LZ_MAX_POSITION over its valid length. */
inline int lz_entry_storage_bad(ulong w, int n_blocks) {
    return LAZYATTN_ENTRY_BLOCK(w) >= n_blocks || LAZYATTN_ENTRY_LENGTH(w) > LZ_BLOCK;
}
inline int lz_entry_bad(ulong w, int pos0, int n_blocks) {
    return lz_entry_storage_bad(w, n_blocks) ||
           !LZ_ENTRY_POSITIONS_OK(pos0, LAZYATTN_ENTRY_DELTA(w), LAZYATTN_ENTRY_LENGTH(w));
}

/* Records why lz_entry_bad(w, pos0, n_blocks) holds: the first reason's bit. */
inline void lz_check_entry(ulong w, int pos0, int n_blocks, __global int *err) {
    if (LAZYATTN_ENTRY_BLOCK(w) >= n_blocks) lz_raise(err, LZ_ERR_BLOCK);
    else if (LAZYATTN_ENTRY_LENGTH(w) > LZ_BLOCK) lz_raise(err, LZ_ERR_LENGTH);
    else if (!LZ_ENTRY_POSITIONS_OK(pos0, LAZYATTN_ENTRY_DELTA(w), LAZYATTN_ENTRY_LENGTH(w)))
        lz_raise(err, LZ_ERR_ENTRY_POSITION);
}
