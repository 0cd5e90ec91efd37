/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Probe (issue 16, first step): a bf16 tensor-core GEMM in OpenCL C with
 * inline PTX on NVIDIA compute capability >= 8, the F.linear shape:
 *   y[M, N] = x[M, K] . W[N, K]^T, x and W bf16 row-major (K contiguous),
 *   y f32 row-major, f32 accumulation.
 * Work-group: 256 work-items (8 warps) for a 128 x 128 tile of y; warps 2 x 4,
 * each 64 x 32 (4 x 4 mma.sync m16n8k16 tiles, 64 accumulators a lane).
 * K walked in steps of 32 through a ring of GP_STAGES stages of x and W tiles
 * in local memory (16 KB a stage), filled with cp.async (16 bytes a copy, two
 * of x and two of W per work-item a stage), read with ldmatrix; the 16-byte
 * chunks of a 64-byte row XOR-swizzled by (row >> 1) & 3 so that the 8 rows
 * of one ldmatrix fall in distinct banks.
 * Requires M and N multiples of 128, K a multiple of 32 (the host checks).
 */
#ifndef GP_STAGES
#define GP_STAGES 2
#endif
#define GP_BM 128
#define GP_BN 128
#define GP_BK 32
#define GP_TILE_BYTES (GP_BM * GP_BK * 2) /* one operand's tile, bf16 */

#define GP_MMA(c, a, b0, b1)                                                                 \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "       \
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                                    \
                 : "+f"((c)[0]), "+f"((c)[1]), "+f"((c)[2]), "+f"((c)[3])                    \
                 : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"(b0), "r"(b1))
#define GP_LDSM_X4(r, addr)                                                                  \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"             \
                 : "=r"((r)[0]), "=r"((r)[1]), "=r"((r)[2]), "=r"((r)[3])                    \
                 : "r"(addr))
#define GP_SMEM(p) ((uint)(size_t)(p))

inline void gp_cp16(uint dst, __global const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
#define GP_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
#define GP_WAIT_N(n) asm volatile("cp.async.wait_group " #n ";" ::: "memory")
/* at most GP_STAGES - 1 groups still in flight (a literal for the PTX) */
#define GP_WAIT_RING()                               \
    do {                                             \
        if (GP_STAGES <= 2) GP_WAIT_N(1);            \
        else if (GP_STAGES == 3) GP_WAIT_N(2);       \
        else GP_WAIT_N(3);                           \
    } while (0)

/* Byte offset of (row, 16-byte chunk) in a [128][32] bf16 tile. */
inline uint gp_swz(uint row, uint chunk) { return row * 64u + ((chunk ^ ((row >> 1) & 3u)) << 4); }

/* Stage s's x and W tiles of K step kt into local memory (no wait). */
inline void gp_load(uint smem, int s, int kt, __global const ushort *x, __global const ushort *w,
                    int m0, int n0, int K, uint tid) {
    const uint xs = smem + (uint)s * 2u * GP_TILE_BYTES, ws = xs + GP_TILE_BYTES;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const uint q = tid + (uint)i * 256u, row = q >> 2, ch = q & 3u;
        gp_cp16(xs + gp_swz(row, ch), x + (size_t)(m0 + (int)row) * K + kt * GP_BK + (int)ch * 8);
        gp_cp16(ws + gp_swz(row, ch), w + (size_t)(n0 + (int)row) * K + kt * GP_BK + (int)ch * 8);
    }
}

__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void gemm_bf16(__global const ushort *x, __global const ushort *w, __global float *y, int M, int N, int K) {
    __local uint4 smem_l[GP_STAGES * 2 * GP_TILE_BYTES / 16]; /* 16-byte aligned: cp.async, ldmatrix */
    const uint smem = GP_SMEM(smem_l);
    const uint tid = get_local_id(0), lane = tid & 31u, warp = tid >> 5;
    const int n0 = get_group_id(0) * GP_BN, m0 = get_group_id(1) * GP_BM;
    const uint wm = warp >> 2, wn = warp & 3u; /* the warp's 64 x 32 tile */
    float c[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) c[i][j][e] = 0.0f;
    const int KT = K / GP_BK;
#pragma unroll
    for (int s = 0; s < GP_STAGES - 1; s++) {
        if (s < KT) gp_load(smem, s, s, x, w, m0, n0, K, tid);
        GP_COMMIT();
    }
    for (int kt = 0; kt < KT; kt++) {
        const int nk = kt + GP_STAGES - 1;
        if (nk < KT) gp_load(smem, nk % GP_STAGES, nk, x, w, m0, n0, K, tid);
        GP_COMMIT();
        GP_WAIT_RING(); /* stage kt's copies (this work-item's) are done */
        barrier(CLK_LOCAL_MEM_FENCE); /* and everybody's */
        const uint xs = smem + (uint)(kt % GP_STAGES) * 2u * GP_TILE_BYTES, ws = xs + GP_TILE_BYTES;
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
            uint a[4][4], b[2][4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                GP_LDSM_X4(a[i], xs + gp_swz(wm * 64u + (uint)i * 16u + (lane & 15u), (uint)kk * 2u + (lane >> 4)));
#pragma unroll
            for (int j = 0; j < 2; j++)
                GP_LDSM_X4(b[j], ws + gp_swz(wn * 32u + (uint)j * 16u + (lane & 7u) + ((lane >> 4) << 3),
                                             (uint)kk * 2u + ((lane >> 3) & 1u)));
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) GP_MMA(c[i][j], a[i], b[j >> 1][(j & 1) * 2], b[j >> 1][(j & 1) * 2 + 1]);
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the stage is read before it is refilled */
    }
    const uint g = lane >> 2, t = lane & 3u;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int row = m0 + (int)(wm * 64u + (uint)i * 16u + g), col = n0 + (int)(wn * 32u + (uint)j * 8u + 2u * t);
            *(__global float2 *)(y + (size_t)row * N + col) = (float2)(c[i][j][0], c[i][j][1]);
            *(__global float2 *)(y + (size_t)(row + 8) * N + col) = (float2)(c[i][j][2], c[i][j][3]);
        }
}
