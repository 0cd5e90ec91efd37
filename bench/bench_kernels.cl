/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Kernels of the benchmark program only (bench/bench_kernels.c): the
 * two ceilings and a random fill of the KV pool. Built on NVIDIA only (the
 * mma loop is inline PTX).
 */

/* Read ceiling: every float4 of the buffer once, grid-stride. */
__kernel void bench_read(__global const float4 *in, __global float *out, ulong n) {
    float4 s = 0.0f;
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) s += in[i];
    out[get_global_id(0)] = s.x + s.y + s.z + s.w;
}

/* Tensor-core ceiling: mma.sync m16n8k16 f16 -> f32 on registers, four
 * independent accumulators per warp. */
__kernel void bench_mma(__global float *out, int iters, uint seed) {
    uint a0 = seed ^ get_global_id(0), a1 = a0 * 3u, a2 = a0 * 5u, a3 = a0 * 7u;
    uint b0 = a0 * 11u, b1 = a0 * 13u;
    a0 &= 0x3bff3bffu, a1 &= 0x3bff3bffu, a2 &= 0x3bff3bffu, a3 &= 0x3bff3bffu;
    b0 &= 0x3bff3bffu, b1 &= 0x3bff3bffu;
    float c[16];
    for (int i = 0; i < 16; i++) c[i] = 0.0f;
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int j = 0; j < 4; j++)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                         "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(c[4 * j]), "+f"(c[4 * j + 1]), "+f"(c[4 * j + 2]), "+f"(c[4 * j + 3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    float s = 0.0f;
    for (int i = 0; i < 16; i++) s += c[i];
    out[get_global_id(0)] = s;
}

/* Random f16 in [-1, 1) (as ushort bits) from a hash of the index. */
__kernel void bench_fill_f16(__global ushort *p, ulong n, uint seed) {
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
        uint x = (uint)i * 0x9E3779B1u ^ (uint)(i >> 32) ^ seed;
        x ^= x >> 16, x *= 0x7FEB352Du, x ^= x >> 15, x *= 0x846CA68Bu, x ^= x >> 16;
        vstore_half((float)(int)(x >> 8) * (1.0f / 8388608.0f) - 1.0f, 0, (__global half *)(p + i));
    }
}
