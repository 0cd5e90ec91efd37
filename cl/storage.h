/*
 * K/V storage type, chosen at build time with -DLZ_DTYPE:
 *   0 f32, 1 f16 (IEEE half through vload_half/vstore_half: works without
 *   cl_khr_fp16, which NVIDIA's OpenCL lacks), 2 bf16 (upper half of an f32,
 *   stored round-to-nearest-even).
 * LZ_LOAD(p, i) gives a float, LZ_STORE(p, i, x) stores one, LZ_LOAD4(p, i)
 * gives elements i..i+3 (i a multiple of 4) as a float4, LZ_LOAD8 i..i+7.
 */
#ifndef LZ_DTYPE
#define LZ_DTYPE 0
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
inline ushort lz_bf16_from_float(float x) {
    uint u = as_uint(x);
    if ((u & 0x7F800000u) == 0x7F800000u) return (ushort)(u >> 16); /* inf, nan */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}
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

/* Records error bits (LZ_ERR_*, cl/kernel_abi.h) in the attention's error
 * word instead of reading or writing out of bounds. */
inline void lz_raise(__global int *err, int bits) { atomic_or(err, bits); }

/* Element offset of (block, kv head, token, dim 0) in a pool buffer laid out
 * [n_blocks, n_kv_heads, LZ_BLOCK, LZ_HEAD_DIM]. */
inline size_t lz_kv_offset(int block, int kv_head, int n_kv_heads, int token) {
    return (((size_t)block * n_kv_heads + kv_head) * LZ_BLOCK + token) * LZ_HEAD_DIM;
}
