/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decode-sized bf16 projections on NVIDIA tensor cores (issue 16):
 *   Y[M, N] = X[M, K] . W[N, K]^T, M = 1..64, bf16 operands, f32 sums,
 * at the bandwidth of reading W once. NVIDIA only (inline PTX, compute
 * capability >= 8: the instructions of cl/nv/ptx.h, which the host puts
 * before this file); serve/gemm_nv_small.c builds and launches it.
 *
 * "Swap AB": W's rows are the A operand of mma.sync m16n8k16 (16 weight
 * rows a tile), the tokens the n8 B operand. The order of a dot product's
 * terms is free, so lane (g = lane / 4, c = lane % 4) loads the 16
 * contiguous bytes W[row g][kb + 8c .. + 7] and W[row g + 8][same] and
 * X[token 8j + g][same] of each 32-k block kb: its k-slots {2c, 2c + 1,
 * 2c + 8, 2c + 9} of k-step s (0, 1) stand for k = kb + 8c + 4s + {0, 1, 2,
 * 3} in A and in B alike, so one 16-byte load feeds two k-steps and a warp
 * load reads 8 rows x 64 contiguous bytes. W goes around L1
 * (L1::no_allocate): it is read once; X (at most 64 x 14336 bf16) is read
 * through L1 by every warp of the SM that works on the same K range.
 *
 * Work-group: GS_WR x GS_WK warps. Warp (wr, wk) owns GS_R row tiles (16 W
 * rows each) and the wk-th of GS_WK slices of the work-group's K range;
 * the slices are summed through local memory in slice order. Dimension 1
 * of the grid splits K across `splits` work-groups of the same rows: each
 * writes its sums to the workspace, the last to finish (a counter per row
 * block) adds them in split order and writes Y. So every sum has a fixed
 * order: results do not depend on timing.
 *
 * With GS_XS 1 the warps of a K slice stage X in local memory instead, per
 * chunk of GS_U blocks (cp.async into a 2-chunk ring, in fragment order so
 * that each lane's 16 bytes are one conflict-free local load): for many
 * token tiles the direct X loads (8 rows of 64 bytes each) cost more L1
 * time than the W bytes they serve. Measured on the H200 it pays only on
 * the wide gate/up at 33..64 rows (PERFLOG).
 *
 * GS_XS 2 (Hopper, sm_90a): wgmma instead of mma.sync. A warpgroup (4
 * warps) owns GS_R sets of 64 W rows (warp w: rows 16w..16w+15 of each, the
 * same 16-byte W loads and A fragments as above) and multiplies them by all
 * 8 NT tokens at once: wgmma.mma_async m64n(8 NT)k16, A = W from registers,
 * B = X from local memory through a descriptor, f32 sums in registers (4 NT
 * a set). The k permutation of the W fragments is applied to X as it is
 * staged: word q (k = 2q, 2q + 1) of the 16-byte piece c (k 8c..8c+7) of a
 * token's 32-k block belongs to k-step s = q / 2 and to the core matrix h =
 * q % 2 (k-slots 0..7 or 8..15) at word c, since the W lane c holds the
 * same words as {a0, a2} = (.x, .y) of step 0 and (.z, .w) of step 1. So
 * the 16 bytes scatter as four 4-byte cp.async into a K-major, unswizzled
 * tile of 8 x 16-byte core matrices, [block u][step s][token / 8][h][token
 * % 8][word c] (leading byte offset 128: h, stride byte offset 256: the
 * next 8 tokens); a warp's 32 copies of one word hit 32 consecutive words.
 * Permuting X rather than W (a 4 x 4 word transpose over each quad by
 * shuffles) keeps the W stream, the part that sets the speed, exactly the
 * mma.sync kernel's; X is at most half the W bytes at 128 rows a work-group.
 * K is walked in chunks of GS_U blocks (the last one may be short: any K %
 * 32 == 0); per chunk one barrier: X of chunk c + GS_SLOTS - 1 is copied into
 * the ring slot that chunk c - 1 used (every warpgroup waits for its wgmma
 * before the barrier), the W of chunk c + 1 is loaded into registers while
 * chunk c's wgmma runs (GS_PIPE 1). GS_WR warps (a multiple of 4) over rows,
 * GS_WK warpgroup rows over K (slices, each with its ring, summed as above),
 * the split-K epilogue as above. Built through the sm_90a PTX round trip
 * (wgmma behind "//@" markers; lazyattn_context_build_program).
 * GS_XS 3: the same with X through registers: each work-item loads its
 * 16-byte pieces of chunk c + 1 (one load a piece: a warp reads 8 rows x
 * 64 bytes, where a 4-byte cp.async touches the same 8 lines for a quarter
 * of the bytes) while chunk c runs and stores them as four words after c's
 * wgmma, then fence.proxy.async; 2 ring slots.
 * GS_XS 4: the same as 3, but chunk c + 1's X is loaded after chunk c's
 * wgmma (and stored at once): 3 held the X registers (32 at 8 token tiles
 * and GS_U 4) next to the A registers, the W prefetch and the sums, 200
 * registers, two 4-warp work-groups a CU, and the down projection's 384
 * work-groups ran in 1.5 waves at 57..64 rows. Its L2 round trip runs
 * while the W of chunk c + 1 (issued first) is on its way from DRAM. The
 * host builds it under a register cap (gemm_nv_small.c, gs_maxreg) and
 * the split-K epilogue takes ~96 floats of loads a round trip.
 *
 * GS_FUSE 1 (decode's fused variants, serve/gemm_bf16.h; GS_XS 0 and 3,
 * the defaults, only): X is f32 (x_off in floats), each 16-byte piece made from 8 f32 as
 * bf16(x * scale[token] * gain[k]) where the bf16 piece was loaded (the
 * local-memory layout of X unchanged); scale = 1 / sqrt(mean(x^2) + eps)
 * of each token's row, computed by every work-group before its K loop (a
 * warp a row), 1 without a gain. Rows past M read row M - 1 (X has no
 * padding rows then; their sums are never written). With swiglu (W =
 * [gate; up], N even, N / 2 a multiple of the work-group's rows) every
 * work-group writes its sums to the workspace; the last of the 2 x splits
 * work-groups of a pair (gate row block b, up row block b + blocks / 2)
 * adds each side's splits in split order and writes silu(g) * u to the
 * gate's columns. GS_FUSE 0 is the plain kernel, untouched.
 *
 * One kernel per n8 token tiles NT = 1..8 (M <= 8 NT): gs_gemm_nt<NT>.
 * X rows up to 8 NT - 1 are read (the caller pads X to 128 rows); only
 * rows < M are written.
 */
#ifndef GS_R
#define GS_R 2 /* row tiles (16 rows) per warp */
#endif
#ifndef GS_WR
#define GS_WR 4 /* warps over rows per work-group */
#endif
#ifndef GS_WK
#define GS_WK 2 /* warps over K per work-group */
#endif
#ifndef GS_U
#define GS_U 4 /* 32-k blocks per step (loads issued together) */
#endif
#ifndef GS_PIPE
#define GS_PIPE 0 /* 1: the next step's W loads issued before this step's mma */
#endif
#ifndef GS_XS
#define GS_XS 0 /* 1: X staged in local memory (cp.async) per U-block chunk, fragment order;
                  2, 3: wgmma, X staged by 4-byte cp.async (2) or through registers (3);
                  4: 3 with X loaded after the chunk's wgmma (fewer registers) */
#endif
#ifndef GS_WHINT
#define GS_WHINT 1 /* W loads: 0 ld.global.nc, 1 + L1::no_allocate, 2 + L2::256B */
#endif
#ifndef GS_FUSE
#define GS_FUSE 0 /* 1: X f32 with an optional RMSNorm, and the SwiGLU epilogue */
#endif
#if GS_FUSE && GS_XS != 0 && GS_XS != 3
#error "GS_FUSE: X arrives through registers (GS_XS 0, 3), not by cp.async (1, 2, 5); 4 spills"
#endif

#define GS_WARPS (GS_WR * GS_WK)

#define GS_WG (GS_XS >= 2) /* the wgmma modes */
#if GS_WG && (GS_WR % 4 || GS_R > 2)
#error "GS_XS 2, 3, 4 (wgmma): GS_WR must be a multiple of 4 and GS_R 1 or 2"
#endif
/* wgmma modes: X ring slots per K slice (GS_XS 2: 3 where 3 fit in 48 KB
 * at 8 token tiles, the host's rule too; GS_XS 3: 2): chunk c + GS_SLOTS -
 * 1 is copied while c runs */
#if GS_XS == 3 || GS_XS == 4
#define GS_SLOTS 2
#else
#define GS_SLOTS (GS_WK * 3 * GS_U * 8 * 512 + 16 <= 49152 ? 3 : 2)
#endif

#define GS_MMA(d, a0, a1, a2, a3, b0, b1) LZ_NV_MMA_M16N8K16("bf16", d, a0, a1, a2, a3, b0, b1)

/* 16 bytes of W (read once: no L1 line). */
inline uint4 gs_ld_w(__global const ushort *p) {
#if GS_WHINT == 2
    return lz_nv_ld_nc16_na_l2(p);
#elif GS_WHINT == 1
    return lz_nv_ld_nc16_na(p);
#else
    return lz_nv_ld_nc16(p);
#endif
}

#if GS_FUSE
/* f32 -> bf16, round to nearest even (NaN stays NaN), two into a word (lo
 * at the lower k, as in memory) */
inline uint gs_bf16(float f) {
    uint u = as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u >> 16) | 0x40u;
    u += 0x7FFFu + ((u >> 16) & 1u);
    return u >> 16;
}
inline uint gs_bf2(float lo, float hi) { return gs_bf16(lo) | (gs_bf16(hi) << 16); }
/* 1 / sqrt(x) and silu(x) = x / (1 + e^-x) in PTX (MUFU: relative errors
 * near 2^-22; no OpenCL library call) */
inline float gs_rsqrt(float x) {
    float r;
    asm("rsqrt.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
inline float gs_silu(float x) { return x / (1.0f + lz_nv_ex2_ftz(-1.44269504f * x)); }

/* The 16-byte piece of X at f32 p (k .. k + 7 of one token's row): bf16(x
 * * sc * gain[k]), gp at gain[k] (NULL: no gain) */
inline uint4 gs_x8f(__global const float *p, float sc, __global const float *gp) {
    float4 a = ((__global const float4 *)p)[0] * sc, b = ((__global const float4 *)p)[1] * sc;
    if (gp) a *= ((__global const float4 *)gp)[0], b *= ((__global const float4 *)gp)[1];
    return (uint4)(gs_bf2(a.x, a.y), gs_bf2(a.z, a.w), gs_bf2(b.x, b.y), gs_bf2(b.z, b.w));
}

/* scale[t] for the tokens t < 8 NT (row min(t, M - 1) of X at xf): a warp a
 * row, lanes over k in float4s, summed by butterfly; 1 without a gain */
__attribute__((always_inline)) inline void gs_row_scales(__local float *scale, __global const float *xf,
                                                         int K, int M, __global const float *gain,
                                                         float eps, const int NT) {
    const int lane = get_local_id(0) & 31, warp = get_local_id(0) >> 5;
    for (int t = warp; t < 8 * NT; t += GS_WARPS) {
        __global const float *xr = xf + (size_t)(t < M ? t : M - 1) * (size_t)K;
        float ss = 0.0f;
        if (gain)
            for (int k = 4 * lane; k < K; k += 128) {
                const float4 v = *(__global const float4 *)(xr + k);
                ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
            }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += lz_nv_xor(ss, o);
        if (lane == 0) scale[t] = gain ? gs_rsqrt(ss / (float)K + eps) : 1.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#endif

#if GS_WG
/* The accumulator operands of a wgmma m64n(8 NT)k16 (NT tiles of 4 f32 a
 * work-item) and their numbers in the instruction's text, shared by the
 * register-A (GS_WGn) and the descriptor-A (GS_WSn) forms */
#define GS_ACC1(d) LZ_NV_ACC1(d, 0)
#define GS_ACC2(d) GS_ACC1(d), LZ_NV_ACC1(d, 1)
#define GS_ACC3(d) GS_ACC2(d), LZ_NV_ACC1(d, 2)
#define GS_ACC4(d) GS_ACC3(d), LZ_NV_ACC1(d, 3)
#define GS_ACC5(d) GS_ACC4(d), LZ_NV_ACC1(d, 4)
#define GS_ACC6(d) GS_ACC5(d), LZ_NV_ACC1(d, 5)
#define GS_ACC7(d) GS_ACC6(d), LZ_NV_ACC1(d, 6)
#define GS_ACC8(d) GS_ACC7(d), LZ_NV_ACC1(d, 7)

/* wgmma m64n(8 NT)k16, A (W) from registers, B (X) by descriptor, D += A B */
#define GS_WG_RS(n, nums, anums, dnum, acc, a0, a1, a2, a3, desc)                       \
    asm volatile(LZ_NV_WGMMA_TEXT(n, "bf16", nums, "{" anums "}", dnum, "1", "0")          \
                 : acc                                                                     \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc))
#define GS_WG1(d, a0, a1, a2, a3, desc) \
    GS_WG_RS("8", LZ_NV_OPS1, "%4,%5,%6,%7", "%8", GS_ACC1(d), a0, a1, a2, a3, desc)
#define GS_WG2(d, a0, a1, a2, a3, desc) \
    GS_WG_RS("16", LZ_NV_OPS2, "%8,%9,%10,%11", "%12", GS_ACC2(d), a0, a1, a2, a3, desc)
#define GS_WG3(d, a0, a1, a2, a3, desc) \
    GS_WG_RS("24", LZ_NV_OPS3, "%12,%13,%14,%15", "%16", GS_ACC3(d), a0, a1, a2, a3, desc)
#define GS_WG4(d, a0, a1, a2, a3, desc) \
    GS_WG_RS("32", LZ_NV_OPS4, "%16,%17,%18,%19", "%20", GS_ACC4(d), a0, a1, a2, a3, desc)
#define GS_WG5(d, a0, a1, a2, a3, desc) \
    GS_WG_RS("40", LZ_NV_OPS5, "%20,%21,%22,%23", "%24", GS_ACC5(d), a0, a1, a2, a3, desc)
#define GS_WG6(d, a0, a1, a2, a3, desc) \
    GS_WG_RS("48", LZ_NV_OPS6, "%24,%25,%26,%27", "%28", GS_ACC6(d), a0, a1, a2, a3, desc)
#define GS_WG7(d, a0, a1, a2, a3, desc) \
    GS_WG_RS("56", LZ_NV_OPS7, "%28,%29,%30,%31", "%32", GS_ACC7(d), a0, a1, a2, a3, desc)
#define GS_WG8(d, a0, a1, a2, a3, desc) \
    GS_WG_RS("64", LZ_NV_OPS8, "%32,%33,%34,%35", "%36", GS_ACC8(d), a0, a1, a2, a3, desc)

/* 4 bytes global -> local, asynchronous (through L1: the X of a chunk is
 * read by four such copies, one word each, of the same lines); n 4: the
 * copy, n 0: zeros (nothing read) */
inline void gs_cp4(__local uint *dst, __global const ushort *src, uint n) {
    lz_nv_cp_async4_n(LZ_NV_SMEM(dst), src, n);
}

/* K-major, unswizzled: leading byte offset 128 (core matrix h 1), stride
 * byte offset 256 (the next 8 tokens); addr: local memory byte address */
inline ulong gs_wg_desc(uint addr) { return lz_nv_wg_desc(addr, 128u, 256u); }

/* Chunk cc's X (rows 0..8 NT - 1) -> ring slot `slot` (words), in the k
 * order of the W fragments (header comment); blocks >= kend as zeros; by
 * the slice's GS_WR * 32 work-items, tix this one's index among them. */
__attribute__((always_inline)) inline void gs_wx(__local uint *slot, __global const ushort *xs,
                                                 size_t Ks, int cc, int kend, int tix,
                                                 const int NT) {
    const int pieces = GS_U * NT * 32; /* (block u, token t, piece c) */
    for (int p = tix; p < pieces; p += GS_WR * 32) {
        const int c = p & 3, t = (p >> 2) % (8 * NT), u = p / (32 * NT);
        const int kb = cc * GS_U + u;
        const uint n = kb < kend ? 4u : 0u;
        __global const ushort *src = xs + (size_t)t * Ks + (kb < kend ? (size_t)kb * 32 + 8 * c : 0);
        __local uint *dst = slot + (u * 2 * NT + (t >> 3)) * 64 + (t & 7) * 4 + c;
        gs_cp4(dst, src, n);                    /* q 0: step 0, h 0 */
        gs_cp4(dst + 32, src + 2, n);           /* q 1: step 0, h 1 */
        gs_cp4(dst + NT * 64, src + 4, n);      /* q 2: step 1, h 0 */
        gs_cp4(dst + NT * 64 + 32, src + 6, n); /* q 3: step 1, h 1 */
    }
}

/* GS_XS 3: the same through registers, in two halves: chunk cc's 16-byte
 * pieces of this work-item (zeros for blocks >= kend) into xr ... */
#define GS_XP(NT) ((GS_U * (NT) + GS_WR - 1) / GS_WR) /* pieces a work-item */
__attribute__((always_inline)) inline void gs_wx_load(uint4 xr[2 * GS_U], __global const ushort *xs,
                                                      size_t Ks, int cc, int kend, int tix,
                                                      const int NT) {
#pragma unroll
    for (int i = 0; i < GS_XP(NT); i++) {
        const int p = tix + i * GS_WR * 32;
        const int c = p & 3, t = (p >> 2) % (8 * NT), u = p / (32 * NT);
        const int kb = cc * GS_U + u;
        xr[i] = (uint4)(0u);
        if (p < GS_U * NT * 32 && kb < kend) xr[i] = lz_nv_ld_nc16(xs + (size_t)t * Ks + (size_t)kb * 32 + 8 * c);
    }
}
#if GS_FUSE
/* ... the same from f32 X (xf at row 0), bf16(x * scale[t] * gain[k]) */
__attribute__((always_inline)) inline void gs_wx_load_f(uint4 xr[2 * GS_U], __global const float *xf,
                                                        size_t Ks, int M, __local const float *scale,
                                                        __global const float *gain, int cc, int kend,
                                                        int tix, const int NT) {
#pragma unroll
    for (int i = 0; i < GS_XP(NT); i++) {
        const int p = tix + i * GS_WR * 32;
        const int c = p & 3, t = (p >> 2) % (8 * NT), u = p / (32 * NT);
        const int kb = cc * GS_U + u;
        const size_t k = (size_t)kb * 32 + 8 * c;
        xr[i] = (uint4)(0u);
        if (p < GS_U * NT * 32 && kb < kend)
            xr[i] = gs_x8f(xf + (size_t)(t < M ? t : M - 1) * Ks + k, scale[t], gain ? gain + k : gain);
    }
}
#endif

/* ... and from xr into ring slot `slot` (words; plain local stores: the
 * caller fences them for wgmma's async proxy) */
__attribute__((always_inline)) inline void gs_wx_store(__local uint *slot, const uint4 xr[2 * GS_U],
                                                       int tix, const int NT) {
#pragma unroll
    for (int i = 0; i < GS_XP(NT); i++) {
        const int p = tix + i * GS_WR * 32;
        const int c = p & 3, t = (p >> 2) % (8 * NT), u = p / (32 * NT);
        __local uint *dst = slot + (u * 2 * NT + (t >> 3)) * 64 + (t & 7) * 4 + c;
        if (p < GS_U * NT * 32) {
            dst[0] = xr[i].x;
            dst[32] = xr[i].y;
            dst[NT * 64] = xr[i].z;
            dst[NT * 64 + 32] = xr[i].w;
        }
    }
}

/* d (4 NT sums of one 64-row set) += W (wv[0] row g, wv[1] row g + 8) . X
 * for k-step s of a block (the B tile at desc) */
__attribute__((always_inline)) inline void gs_wg(float d[8][4], uint4 wv0, uint4 wv1, int s, ulong desc,
                                                 const int NT) {
    const uint a0 = s ? wv0.z : wv0.x, a1 = s ? wv1.z : wv1.x;
    const uint a2 = s ? wv0.w : wv0.y, a3 = s ? wv1.w : wv1.y;
    switch (NT) {
    case 1: GS_WG1(d, a0, a1, a2, a3, desc); break;
    case 2: GS_WG2(d, a0, a1, a2, a3, desc); break;
    case 3: GS_WG3(d, a0, a1, a2, a3, desc); break;
    case 4: GS_WG4(d, a0, a1, a2, a3, desc); break;
    case 5: GS_WG5(d, a0, a1, a2, a3, desc); break;
    case 6: GS_WG6(d, a0, a1, a2, a3, desc); break;
    case 7: GS_WG7(d, a0, a1, a2, a3, desc); break;
    default: GS_WG8(d, a0, a1, a2, a3, desc); break;
    }
}
#endif

#if GS_XS == 5
/* GS_XS 5: W through local memory too. Both wgmma operands by descriptor,
 * in natural k order (k-step s of a 32-k block: k 16s..16s+15, core
 * matrix h: k 16s+8h..+7), so every 16-byte piece of a W row or an X row
 * is one 16-byte cp.async into a core-matrix row: K-major, unswizzled,
 * [8-row group][h][row % 8][16 bytes] per k-step (leading byte offset 128,
 * stride byte offset 256), as the X tiles of xs 2..4. A slot of the ring
 * holds one chunk (GS_U blocks): the W of every 64-row set of the slice's
 * warpgroups, [set][block u][step s] tiles of 2 KB, then X, [u][s] tiles
 * of NT * 256 bytes. GS_STG slots a K slice (as many as fit at 8 token
 * tiles, 2..8): chunk c + GS_STG - 1 is copied while c runs, no W or X
 * registers (the sums and addresses only), so the bytes in flight are set
 * by local memory, not by registers. GS_PIPE has no effect. */
#define GS_WSET (GS_WR / 4 * GS_R) /* 64-row sets a K slice */
#define GS_SLOT_W (GS_WSET * GS_U * 4096) /* bytes */
#define GS_SLOT(NT) (GS_SLOT_W + GS_U * (NT) * 512)
#define GS_STG0 ((49152 - 64) / (GS_WK * GS_SLOT(8)))
#define GS_STG (GS_STG0 > 8 ? 8 : GS_STG0)
#if GS_STG < 2
#error "GS_XS 5: fewer than 2 ring slots fit in 48 KB"
#endif
/* the same with A (W) by descriptor too */
#define GS_WS_SS(n, nums, anum, bnum, acc, da, db)                                       \
    asm volatile(LZ_NV_WGMMA_TEXT(n, "bf16", nums, anum, bnum, "1", "0, 0") : acc : "l"(da), "l"(db))
#define GS_WS1(d, da, db) GS_WS_SS("8", LZ_NV_OPS1, "%4", "%5", GS_ACC1(d), da, db)
#define GS_WS2(d, da, db) GS_WS_SS("16", LZ_NV_OPS2, "%8", "%9", GS_ACC2(d), da, db)
#define GS_WS3(d, da, db) GS_WS_SS("24", LZ_NV_OPS3, "%12", "%13", GS_ACC3(d), da, db)
#define GS_WS4(d, da, db) GS_WS_SS("32", LZ_NV_OPS4, "%16", "%17", GS_ACC4(d), da, db)
#define GS_WS5(d, da, db) GS_WS_SS("40", LZ_NV_OPS5, "%20", "%21", GS_ACC5(d), da, db)
#define GS_WS6(d, da, db) GS_WS_SS("48", LZ_NV_OPS6, "%24", "%25", GS_ACC6(d), da, db)
#define GS_WS7(d, da, db) GS_WS_SS("56", LZ_NV_OPS7, "%28", "%29", GS_ACC7(d), da, db)
#define GS_WS8(d, da, db) GS_WS_SS("64", LZ_NV_OPS8, "%32", "%33", GS_ACC8(d), da, db)

#define GS_CP_WAITS() LZ_NV_CP_WAIT_PENDING(GS_STG - 2)

/* 16 bytes global -> local (L2 -> shared, around L1), n 16: the copy, 0: zeros */
inline void gs_cpz16(uint dst, __global const ushort *src, uint n) {
#if GS_WHINT == 2
    lz_nv_cp_async16_n_l2(dst, src, n);
#else
    lz_nv_cp_async16_n(dst, src, n);
#endif
}

/* Chunk cc of the slice (blocks cc * GS_U.., zeros from kend) into the
 * slot at byte address `slot`: W rows of the GS_WSET sets from row wrow0
 * (a 16-row tile past N reads the last tile, as the direct path), then X
 * rows 0..8 NT - 1; by the slice's GS_WR * 32 work-items, tix this one */
__attribute__((always_inline)) inline void gs_ws_copy(uint slot, __global const ushort *w,
                                                      __global const ushort *xs, size_t Ks, int N,
                                                      int wrow0, int cc, int kend, int tix,
                                                      const int NT) {
    const int wpieces = GS_WSET * GS_U * 256; /* (set, block u, row n, piece c) */
    for (int p = tix; p < wpieces; p += GS_WR * 32) {
        const int c = p & 3, n = (p >> 2) & 63, q = p >> 8;
        const int u = q % GS_U, set = q / GS_U;
        const int kb = cc * GS_U + u;
        const int tile = wrow0 + 64 * set + (n & ~15);
        const int row = (tile < N ? tile : N - 16) + (n & 15);
        __global const ushort *src = w + (size_t)row * Ks + (kb < kend ? (size_t)kb * 32 + 8 * c : 0);
        const uint dst = slot + (uint)(((set * GS_U + u) * 2 + (c >> 1)) * 2048 + (n >> 3) * 256 +
                                       (c & 1) * 128 + (n & 7) * 16);
        gs_cpz16(dst, src, kb < kend ? 16u : 0u);
    }
    const int xpieces = GS_U * NT * 32; /* (block u, token t, piece c) */
    for (int p = tix; p < xpieces; p += GS_WR * 32) {
        const int c = p & 3, t = (p >> 2) % (8 * NT), u = p / (32 * NT);
        const int kb = cc * GS_U + u;
        __global const ushort *src = xs + (size_t)t * Ks + (kb < kend ? (size_t)kb * 32 + 8 * c : 0);
        const uint dst = slot + (uint)GS_SLOT_W +
                         (uint)((u * 2 + (c >> 1)) * NT * 256 + (t >> 3) * 256 + (c & 1) * 128 + (t & 7) * 16);
        gs_cpz16(dst, src, kb < kend ? 16u : 0u);
    }
}

/* d (4 NT sums of one 64-row set) += A (desc da) . B (desc db), one k-step */
__attribute__((always_inline)) inline void gs_ws(float d[8][4], ulong da, ulong db, const int NT) {
    switch (NT) {
    case 1: GS_WS1(d, da, db); break;
    case 2: GS_WS2(d, da, db); break;
    case 3: GS_WS3(d, da, db); break;
    case 4: GS_WS4(d, da, db); break;
    case 5: GS_WS5(d, da, db); break;
    case 6: GS_WS6(d, da, db); break;
    case 7: GS_WS7(d, da, db); break;
    default: GS_WS8(d, da, db); break;
    }
}
#endif

/* acc[r][j] += W tile r (this lane's 16-byte pieces wv[r][0] of row g, wv[r][1]
 * of row g + 8) . X tile j, for one 32-k block; xp at X[g][kb + 8c]. */
__attribute__((always_inline)) inline void gs_block(float acc[GS_R][8][4], uint4 wv[GS_R][2],
                                                    __global const ushort *xp, size_t K8,
                                                    const int NT) {
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const uint4 xv = lz_nv_ld_nc16(xp + j * K8);
#pragma unroll
        for (int r = 0; r < GS_R; r++) {
            GS_MMA(acc[r][j], wv[r][0].x, wv[r][1].x, wv[r][0].y, wv[r][1].y, xv.x, xv.y);
            GS_MMA(acc[r][j], wv[r][0].z, wv[r][1].z, wv[r][0].w, wv[r][1].w, xv.z, xv.w);
        }
    }
}

#if GS_FUSE
/* gs_block from f32 X: xf at row 0, k = this lane's k (kb + 8c), sc[j] token
 * 8j + g's scale, gp the gain at k (NULL: none) */
__attribute__((always_inline)) inline void gs_block_f(float acc[GS_R][8][4], uint4 wv[GS_R][2],
                                                      __global const float *xf, size_t Ks, size_t k,
                                                      int M, const float sc[8],
                                                      __global const float *gp, const int NT) {
    const int g = (get_local_id(0) & 31) >> 2;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int t = 8 * j + g;
        const uint4 xv = gs_x8f(xf + (size_t)(t < M ? t : M - 1) * Ks + k, sc[j], gp);
#pragma unroll
        for (int r = 0; r < GS_R; r++) {
            GS_MMA(acc[r][j], wv[r][0].x, wv[r][1].x, wv[r][0].y, wv[r][1].y, xv.x, xv.y);
            GS_MMA(acc[r][j], wv[r][0].z, wv[r][1].z, wv[r][0].w, wv[r][1].w, xv.z, xv.w);
        }
    }
}
/* one block's X from kb: f32 or bf16 */
#define GS_BLOCK(acc, wv, kb)                                                                  \
    gs_block_f(acc, wv, xf, Ks, (size_t)(kb) * 32 + 8 * c, M, xsc,                              \
               gain ? gain + (size_t)(kb) * 32 + 8 * c : gain, NT)
#else
#define GS_BLOCK(acc, wv, kb) gs_block(acc, wv, xp + (size_t)(kb) * 32, K8, NT)
#endif

/* The W pieces of GS_U blocks from kb; wp[r]: tile r's row g at 8c. */
/* The same with X from a staged fragment tile: xl at tile 0 of the block,
 * lane's 16 bytes; tiles 32 lanes (512 bytes) apart. */
__attribute__((always_inline)) inline void gs_block_l(float acc[GS_R][8][4], uint4 wv[GS_R][2],
                                                      __local const uint4 *xl, const int NT) {
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const uint4 xv = xl[j * 32];
#pragma unroll
        for (int r = 0; r < GS_R; r++) {
            GS_MMA(acc[r][j], wv[r][0].x, wv[r][1].x, wv[r][0].y, wv[r][1].y, xv.x, xv.y);
            GS_MMA(acc[r][j], wv[r][0].z, wv[r][1].z, wv[r][0].w, wv[r][1].w, xv.z, xv.w);
        }
    }
}

__attribute__((always_inline)) inline void gs_load(uint4 wv[GS_U][GS_R][2],
                                                   __global const ushort *wp[GS_R], size_t K8,
                                                   int kb) {
#pragma unroll
    for (int u = 0; u < GS_U; u++)
#pragma unroll
        for (int r = 0; r < GS_R; r++) {
            wv[u][r][0] = gs_ld_w(wp[r] + (size_t)(kb + u) * 32);
            wv[u][r][1] = gs_ld_w(wp[r] + K8 + (size_t)(kb + u) * 32);
        }
}

#if GS_WG
/* The same for the blocks kb.. < kend of a chunk, zeros past kend */
__attribute__((always_inline)) inline void gs_load_c(uint4 wv[GS_U][GS_R][2],
                                                     __global const ushort *wp[GS_R], size_t K8,
                                                     int kb, int kend) {
#pragma unroll
    for (int u = 0; u < GS_U; u++)
#pragma unroll
        for (int r = 0; r < GS_R; r++) {
            wv[u][r][0] = wv[u][r][1] = (uint4)(0u);
            if (kb + u < kend) {
                wv[u][r][0] = gs_ld_w(wp[r] + (size_t)(kb + u) * 32);
                wv[u][r][1] = gs_ld_w(wp[r] + K8 + (size_t)(kb + u) * 32);
            }
        }
}
#endif

/* One range's destination of Y column n (ranges of whole 16-column tiles). */
#define GS_DST(n, y0, y1, y2, o0, o1, o2, l0, l1, l2, c1, c2, yy, oo, ll, cc)    \
    do {                                                                        \
        if ((n) >= (c2)) yy = (y2), oo = (o2), ll = (l2), cc = (c2);            \
        else if ((n) >= (c1)) yy = (y1), oo = (o1), ll = (l1), cc = (c1);       \
        else yy = (y0), oo = (o0), ll = (l0), cc = 0;                           \
    } while (0)

__attribute__((always_inline)) inline void gs_body(
    __global const ushort *x, ulong x_off, __global const ushort *w, int K, int N, int M,
    __global float *y0, __global float *y1, __global float *y2, ulong o0, ulong o1, ulong o2,
    int l0, int l1, int l2, int c1, int c2, int accumulate, int splits, __global float *ws,
    __global int *cnt, __local uint4 *loc, __local int *last,
#if GS_FUSE
    __global const float *gain, float eps, int swiglu, __local float *scale,
#endif
    const int NT) {
    __local float *red = (__local float *)loc;
    const int lid = get_local_id(0);
    const int lane = lid & 31, warp = lid >> 5;
    const int wr = warp % GS_WR, wk = warp / GS_WR;
    const int g = lane >> 2, c = lane & 3;
    const int blk = get_group_id(0), split = get_group_id(1);
    const size_t Ks = (size_t)K;
    /* row tile r's first W row (16 rows): warp wr's GS_R tiles; with wgmma
     * warpgroup wr / 4 owns GS_R sets of 64 rows, warp wr % 4 16 of each */
    int tr[GS_R];
#pragma unroll
    for (int r = 0; r < GS_R; r++)
#if GS_WG
        tr[r] = blk * 16 * GS_R * GS_WR + (wr >> 2) * 64 * GS_R + 64 * r + 16 * (wr & 3);
#else
        tr[r] = (blk * GS_WR + wr) * (16 * GS_R) + 16 * r;
#endif

    /* Chunks cu0 .. cu1 - 1 of n for slice wk of this split (the splits
     * take consecutive shares of the n chunks, the GS_WK slices of a split
     * consecutive shares of its), and the iterations every slice runs (the
     * longest slice's chunks). */
#define GS_PARTITION(n, cu0, cu1, chunks)                                                        \
    const int su_ = (int)((long)(n) * split / splits), eu_ = (int)((long)(n) * (split + 1) / splits); \
    const int cu0 = su_ + (eu_ - su_) * wk / GS_WK, cu1 = su_ + (eu_ - su_) * (wk + 1) / GS_WK;    \
    const int chunks = (eu_ - su_ + GS_WK - 1) / GS_WK

    /* K blocks of this split and this slice */
    const int nkb = K >> 5;
#if GS_WG
    const int kb0 = 0, kb1 = 0; /* every block in the chunk loop */
#elif GS_XS
    /* in chunks of GS_U blocks; the last split's slice 0 also takes the
     * blocks past the last whole chunk (direct loads) */
    const int nu = nkb / GS_U;
    GS_PARTITION(nu, cu0, cu1, chunks);
    const int kb0 = split == splits - 1 && wk == 0 ? nu * GS_U : 0;
    const int kb1 = split == splits - 1 && wk == 0 ? nkb : 0;
#else
    const int sb = (int)((long)nkb * split / splits), se = (int)((long)nkb * (split + 1) / splits);
    const int kb0 = sb + (se - sb) * wk / GS_WK, kb1 = sb + (se - sb) * (wk + 1) / GS_WK;
#endif

    /* a tile past N (in the last work-group) reads the last tile, writes nothing */
    __global const ushort *wp[GS_R];
#pragma unroll
    for (int r = 0; r < GS_R; r++) {
        const int nb = tr[r] < N ? tr[r] : N - 16;
        wp[r] = w + (size_t)(nb + g) * Ks + 8 * c;
    }
    __global const ushort *xp = x + x_off + (size_t)g * Ks + 8 * c;
    const size_t K8 = 8 * Ks;
#if GS_FUSE
    /* X is f32 (x_off in floats): the rows' scales, then each token's in registers */
    __global const float *xf = (__global const float *)x + x_off;
    gs_row_scales(scale, xf, K, M, gain, eps, NT);
    float xsc[8];
#pragma unroll
    for (int j = 0; j < 8; j++) xsc[j] = scale[j < NT ? 8 * j + g : 0];
#endif

    float acc[GS_R][8][4];
#pragma unroll
    for (int r = 0; r < GS_R; r++)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[r][j][e] = 0.0f;

    int kb = kb0;
#if GS_XS == 5
    {
        /* chunks of GS_U blocks over the splits and slices as the other
         * wgmma modes (zeros past K and past a slice); GS_STG-slot ring */
        const int nc = (nkb + GS_U - 1) / GS_U;
        GS_PARTITION(nc, cu0, cu1, chunks);
        const uint slot_b = GS_SLOT(NT);
        const uint ring_addr = (uint)(size_t)loc + (uint)(wk * GS_STG) * slot_b;
        const int tix = lid - wk * GS_WR * 32; /* work-item in the slice */
        __global const ushort *xs = x + x_off;
        const int wrow0 = blk * 16 * GS_R * GS_WR; /* the slice's first W row */
        const int set0 = (wr >> 2) * GS_R;        /* this warpgroup's first 64-row set */
#pragma unroll
        for (int i = 0; i < GS_STG - 1; i++) {
            if (i < chunks)
                gs_ws_copy(ring_addr + (uint)i * slot_b, w, xs, Ks, N, wrow0, cu0 + i,
                           cu0 + i < cu1 ? nkb : 0, tix, NT);
            LZ_NV_CP_COMMIT();
        }
        for (int ci = 0; ci < chunks; ci++) {
            const int cc = cu0 + ci; /* this slice's chunk */
            GS_CP_WAITS(); /* my copies of cc are done (GS_STG - 2 later groups may not) */
            LZ_NV_PROXY_FENCE();
            /* everyone's copies of cc; everyone's wgmma of cc - 1 done */
            barrier(CLK_LOCAL_MEM_FENCE);
            if (ci + GS_STG - 1 < chunks) /* into the slot of cc - 1 */
                gs_ws_copy(ring_addr + (uint)((ci + GS_STG - 1) % GS_STG) * slot_b, w, xs, Ks, N, wrow0,
                           cc + GS_STG - 1, cc + GS_STG - 1 < cu1 ? nkb : 0, tix, NT);
            LZ_NV_CP_COMMIT();
            const uint sa = ring_addr + (uint)(ci % GS_STG) * slot_b;
            LZ_NV_WG_FENCE();
#pragma unroll
            for (int u = 0; u < GS_U; u++)
#pragma unroll
                for (int st = 0; st < 2; st++)
#pragma unroll
                    for (int r = 0; r < GS_R; r++)
                        gs_ws(acc[r], gs_wg_desc(sa + (uint)((((set0 + r) * GS_U + u) * 2 + st) * 2048)),
                              gs_wg_desc(sa + (uint)GS_SLOT_W + (uint)((u * 2 + st) * NT * 256)), NT);
            LZ_NV_WG_COMMIT();
            LZ_NV_WG_WAIT();
        }
        LZ_NV_CP_WAIT(0);
        barrier(CLK_LOCAL_MEM_FENCE); /* the rings are read: free for the slice sums */
    }
#elif GS_WG
    {
        /* chunks of GS_U blocks (the last one may be short) over the splits,
         * then over the K slices; every slice runs the longest's iterations,
         * the blocks it has not (past K, past its slice) as zeros in W and X:
         * the wgmma are issued unconditionally (a branch among them makes
         * ptxas serialize them) and add exact zeros there */
        const int nc = (nkb + GS_U - 1) / GS_U;
        GS_PARTITION(nc, cu0, cu1, chunks);
        const int slotw = GS_U * NT * 128; /* words: U blocks x 8 NT tokens x 16 words */
        __local uint *ring = (__local uint *)loc + wk * GS_SLOTS * slotw;
        const uint ring_addr = (uint)(size_t)ring;
        const int tix = lid - wk * GS_WR * 32; /* work-item in the slice */
        __global const ushort *xs = x + x_off;
#if GS_XS == 3 || GS_XS == 4
#if GS_FUSE
#define GS_WX_LOAD(xr, cc, kend) gs_wx_load_f(xr, xf, Ks, M, scale, gain, cc, kend, tix, NT)
#else
#define GS_WX_LOAD(xr, cc, kend) gs_wx_load(xr, xs, Ks, cc, kend, tix, NT)
#endif
        uint4 xr[2 * GS_U];
        if (chunks > 0) {
            GS_WX_LOAD(xr, cu0, cu0 < cu1 ? nkb : 0);
            gs_wx_store(ring, xr, tix, NT);
            LZ_NV_PROXY_FENCE();
        }
#else
#pragma unroll
        for (int i = 0; i < GS_SLOTS - 1; i++) {
            if (i < chunks) gs_wx(ring + i * slotw, xs, Ks, cu0 + i, cu0 + i < cu1 ? nkb : 0, tix, NT);
            LZ_NV_CP_COMMIT();
        }
#endif
        uint4 cur[GS_U][GS_R][2];
#if GS_PIPE
        gs_load_c(cur, wp, K8, cu0 * GS_U, cu0 < cu1 ? nkb : 0);
#endif
        for (int ci = 0; ci < chunks; ci++) {
            const int cc = cu0 + ci; /* this slice's chunk */
#if GS_PIPE
            uint4 nxt[GS_U][GS_R][2];
            if (ci + 1 < chunks) gs_load_c(nxt, wp, K8, (cc + 1) * GS_U, cc + 1 < cu1 ? nkb : 0);
#else
            gs_load_c(cur, wp, K8, cc * GS_U, cc < cu1 ? nkb : 0);
#endif
#if GS_XS == 3
            /* chunk cc + 1's X into registers (stored after this chunk's wgmma) */
            if (ci + 1 < chunks) GS_WX_LOAD(xr, cc + 1, cc + 1 < cu1 ? nkb : 0);
            /* everyone's X of cc stored and fenced; everyone's wgmma of cc - 1 done */
            barrier(CLK_LOCAL_MEM_FENCE);
#elif GS_XS == 4
            /* everyone's X of cc stored and fenced; everyone's wgmma of cc - 1 done
             * (chunk cc + 1's X is loaded after this chunk's wgmma: the X
             * registers are not live next to the A registers and W's prefetch) */
            barrier(CLK_LOCAL_MEM_FENCE);
#else
#if GS_SLOTS == 3
            LZ_NV_CP_WAIT(1); /* chunk cc's copies (mine) are done, cc + 1's may not */
#else
            LZ_NV_CP_WAIT(0);
#endif
            /* everyone's copies of cc; everyone's wgmma of cc - 1 done */
            barrier(CLK_LOCAL_MEM_FENCE);
            if (ci + GS_SLOTS - 1 < chunks) /* into the slot of cc - 1 */
                gs_wx(ring + ((ci + GS_SLOTS - 1) % GS_SLOTS) * slotw, xs, Ks, cc + GS_SLOTS - 1,
                      cc + GS_SLOTS - 1 < cu1 ? nkb : 0, tix, NT);
            LZ_NV_CP_COMMIT();
#endif
            const ulong d0 = gs_wg_desc(ring_addr + (uint)((ci % GS_SLOTS) * slotw * 4));
            LZ_NV_WG_FENCE();
#pragma unroll
            for (int u = 0; u < GS_U; u++)
#pragma unroll
                for (int st = 0; st < 2; st++)
#pragma unroll
                    for (int r = 0; r < GS_R; r++)
                        gs_wg(acc[r], cur[u][r][0], cur[u][r][1], st,
                              d0 + (ulong)((u * 2 + st) * NT * 16), NT);
            LZ_NV_WG_COMMIT();
            LZ_NV_WG_WAIT();
            /* the A registers stay untouched until the wait */
#pragma unroll
            for (int u = 0; u < GS_U; u++)
#pragma unroll
                for (int r = 0; r < GS_R; r++)
                    asm volatile("" : "+r"(cur[u][r][0].x), "+r"(cur[u][r][0].y), "+r"(cur[u][r][0].z),
                                 "+r"(cur[u][r][0].w), "+r"(cur[u][r][1].x), "+r"(cur[u][r][1].y),
                                 "+r"(cur[u][r][1].z), "+r"(cur[u][r][1].w));
#if GS_XS == 3
            if (ci + 1 < chunks) { /* into the slot of cc - 1 (everyone's wgmma of it done) */
                gs_wx_store(ring + ((ci + 1) & 1) * slotw, xr, tix, NT);
                LZ_NV_PROXY_FENCE();
            }
#elif GS_XS == 4
            if (ci + 1 < chunks) { /* the same, loaded now: its L2 round trip runs
                                    * while W of cc + 1 (issued above) is on its way */
                GS_WX_LOAD(xr, cc + 1, cc + 1 < cu1 ? nkb : 0);
                gs_wx_store(ring + ((ci + 1) & 1) * slotw, xr, tix, NT);
                LZ_NV_PROXY_FENCE();
            }
#endif
#if GS_PIPE
#pragma unroll
            for (int u = 0; u < GS_U; u++)
#pragma unroll
                for (int r = 0; r < GS_R; r++) cur[u][r][0] = nxt[u][r][0], cur[u][r][1] = nxt[u][r][1];
#endif
        }
        LZ_NV_CP_WAIT(0);
        barrier(CLK_LOCAL_MEM_FENCE); /* the rings are read: free for the slice sums */
    }
#elif GS_XS
    {
        /* slice wk's staging ring: 2 chunks of GS_U blocks x NT tiles x 32
         * lanes x 16 bytes, in fragment order (lane's piece at lane) */
        __local uint4 *ring = loc + wk * 2 * GS_U * NT * 32;
        const int tix = lid - wk * GS_WR * 32; /* thread in the slice */
        const int pieces = GS_U * NT * 32;
        __global const ushort *xs = x + x_off;
        /* chunk 0; piece p = (block u, tile j, lane ln) */
        if (cu0 < cu1)
            for (int p = tix; p < pieces; p += GS_WR * 32) {
                const int u = p / (NT * 32), j = (p >> 5) % NT, ln = p & 31;
                lz_nv_cp_async16(LZ_NV_SMEM(ring + p), xs + (size_t)(8 * j + (ln >> 2)) * Ks +
                                      (size_t)(cu0 * GS_U + u) * 32 + 8 * (ln & 3));
            }
        LZ_NV_CP_COMMIT();
#if GS_PIPE
        uint4 cur[GS_U][GS_R][2];
        if (cu0 < cu1) gs_load(cur, wp, K8, cu0 * GS_U);
#endif
        for (int ci = 0; ci < chunks; ci++) {
            const int cc = cu0 + ci; /* this slice's chunk */
            const int active = cc < cu1;
#if GS_PIPE
            uint4 nxt[GS_U][GS_R][2];
            if (cc + 1 < cu1) gs_load(nxt, wp, K8, (cc + 1) * GS_U);
#else
            uint4 cur[GS_U][GS_R][2];
            if (active) gs_load(cur, wp, K8, cc * GS_U);
#endif
            /* the next chunk's X into the other half of the ring */
            if (cc + 1 < cu1) {
                __local uint4 *dst = ring + ((ci + 1) & 1) * pieces;
                for (int p = tix; p < pieces; p += GS_WR * 32) {
                    const int u = p / (NT * 32), j = (p >> 5) % NT, ln = p & 31;
                    lz_nv_cp_async16(LZ_NV_SMEM(dst + p), xs + (size_t)(8 * j + (ln >> 2)) * Ks +
                                         (size_t)((cc + 1) * GS_U + u) * 32 + 8 * (ln & 3));
                }
            }
            LZ_NV_CP_COMMIT();
            LZ_NV_CP_WAIT(1); /* this chunk's copies (mine) are done */
            barrier(CLK_LOCAL_MEM_FENCE); /* ... and everyone's */
            if (active) {
                __local const uint4 *xl = ring + (ci & 1) * pieces + lane;
#pragma unroll
                for (int u = 0; u < GS_U; u++) gs_block_l(acc, cur[u], xl + u * NT * 32, NT);
            }
#if GS_PIPE
#pragma unroll
            for (int u = 0; u < GS_U; u++)
#pragma unroll
                for (int r = 0; r < GS_R; r++) cur[u][r][0] = nxt[u][r][0], cur[u][r][1] = nxt[u][r][1];
#endif
            barrier(CLK_LOCAL_MEM_FENCE); /* the half is read before it is refilled */
        }
    }
#elif GS_PIPE
    if (kb1 - kb0 >= GS_U) {
        uint4 cur[GS_U][GS_R][2];
        gs_load(cur, wp, K8, kb);
        for (; kb + GS_U <= kb1; kb += GS_U) {
            uint4 nxt[GS_U][GS_R][2];
            const int kn = kb + 2 * GS_U <= kb1 ? kb + GS_U : kb1 - GS_U; /* in range */
            gs_load(nxt, wp, K8, kn);
#pragma unroll
            for (int u = 0; u < GS_U; u++) GS_BLOCK(acc, cur[u], kb + u);
#pragma unroll
            for (int u = 0; u < GS_U; u++)
#pragma unroll
                for (int r = 0; r < GS_R; r++) cur[u][r][0] = nxt[u][r][0], cur[u][r][1] = nxt[u][r][1];
        }
    }
#else
    for (; kb + GS_U <= kb1; kb += GS_U) {
        uint4 cur[GS_U][GS_R][2];
        gs_load(cur, wp, K8, kb);
#pragma unroll
        for (int u = 0; u < GS_U; u++) GS_BLOCK(acc, cur[u], kb + u);
    }
#endif
    for (; kb < kb1; kb++) {
        uint4 cur[1][GS_R][2];
#pragma unroll
        for (int r = 0; r < GS_R; r++) {
            cur[0][r][0] = gs_ld_w(wp[r] + (size_t)kb * 32);
            cur[0][r][1] = gs_ld_w(wp[r] + K8 + (size_t)kb * 32);
        }
        GS_BLOCK(acc, cur[0], kb);
    }

#if GS_WK > 1
    /* slices 1.. -> local memory; slice 0 adds them in slice order */
    const int per = GS_R * NT * 4;
    if (wk > 0) {
        __local float *dst = red + ((wk - 1) * GS_WR + wr) * per * 32 + lane;
#pragma unroll
        for (int r = 0; r < GS_R; r++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) dst[((r * NT + j) * 4 + e) * 32] = acc[r][j][e];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (wk == 0)
        for (int s = 1; s < GS_WK; s++) {
            __local const float *src = red + ((s - 1) * GS_WR + wr) * per * 32 + lane;
#pragma unroll
            for (int r = 0; r < GS_R; r++)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[r][j][e] += src[((r * NT + j) * 4 + e) * 32];
        }
#endif

#if GS_FUSE
    if (swiglu) {
        /* workspace [splits][N][8 NT] as below, whatever the splits; a
         * counter a pair of row blocks (gate pb, up pb + blocks / 2) */
        const size_t ldw = 8 * NT;
        const int n_gate = N / 2, pb = blk % (n_gate / (16 * GS_R * GS_WR));
        if (wk == 0)
#pragma unroll
            for (int r = 0; r < GS_R; r++) {
                const int n = tr[r] + g;
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    __global float *p = ws + ((size_t)split * N + n) * ldw + 8 * j + 2 * c;
                    *(__global float2 *)p = (float2)(acc[r][j][0], acc[r][j][1]);
                    *(__global float2 *)(p + 8 * ldw) = (float2)(acc[r][j][2], acc[r][j][3]);
                }
            }
        LZ_NV_FENCE_GPU();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid == 0) *last = lz_nv_atom_inc_gpu(cnt + pb) == 2 * splits - 1;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!*last) return; /* uniform */
        LZ_NV_FENCE_GPU();
        if (lid == 0) cnt[pb] = 0; /* ready for the next call */
        if (wk != 0) return;
        /* the gate rows of this pair: the row tiles of block pb */
#pragma unroll
        for (int r = 0; r < GS_R; r++) {
#if GS_WG
            const int tg = pb * 16 * GS_R * GS_WR + (wr >> 2) * 64 * GS_R + 64 * r + 16 * (wr & 3);
#else
            const int tg = (pb * GS_WR + wr) * (16 * GS_R) + 16 * r;
#endif
            __global float *yc = y0 + o0 + tg + g;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                float2 ga = (float2)(0.0f), gb = (float2)(0.0f), ua = (float2)(0.0f), ub = (float2)(0.0f);
                for (int sp = 0; sp < splits; sp++) { /* in split order, as the plain kernel */
                    __global const float *p = ws + ((size_t)sp * N + tg + g) * ldw + 8 * j + 2 * c;
                    __global const float *q = p + (size_t)n_gate * ldw;
                    ga += lz_nv_ld_cg2(p), gb += lz_nv_ld_cg2(p + 8 * ldw);
                    ua += lz_nv_ld_cg2(q), ub += lz_nv_ld_cg2(q + 8 * ldw);
                }
                const float gv[4] = {ga.x, ga.y, gb.x, gb.y}, uv[4] = {ua.x, ua.y, ub.x, ub.y};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int t = 8 * j + 2 * c + (e & 1); /* token (row of Y) */
                    if (t < M) yc[(size_t)t * l0 + ((e >> 1) << 3)] = gs_silu(gv[e]) * uv[e];
                }
            }
        }
        return;
    }
#endif
    const int mine = wk == 0; /* warps holding the work-group's sums */
    if (splits > 1) {
        /* workspace [splits][N][8 NT]: this split's sums, then the counter */
        const size_t ldw = 8 * NT;
        if (mine)
#pragma unroll
            for (int r = 0; r < GS_R; r++) {
                const int n = tr[r] + g;
                if (tr[r] < N)
#pragma unroll
                    for (int j = 0; j < NT; j++) {
                        __global float *p = ws + ((size_t)split * N + n) * ldw + 8 * j + 2 * c;
                        *(__global float2 *)p = (float2)(acc[r][j][0], acc[r][j][1]);
                        *(__global float2 *)(p + 8 * ldw) = (float2)(acc[r][j][2], acc[r][j][3]);
                    }
            }
        LZ_NV_FENCE_GPU();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid == 0) *last = lz_nv_atom_inc_gpu(cnt + blk) == splits - 1;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!*last) return; /* uniform: the whole work-group leaves */
        LZ_NV_FENCE_GPU();
        if (mine) {
            /* the splits' sums in split order; the loads of SB splits and
             * every tile issued before their adds (one round trip each) */
#if GS_XS >= 4
            /* xs 4, 5: ~96 floats of loads a round trip (the K loop's registers
             * are free; 3 splits at 8 tiles of one row set instead of 1) */
            const int SB = GS_R * NT >= 24 ? 1 : 24 / (GS_R * NT) > 8 ? 8 : 24 / (GS_R * NT);
#else
            const int SB = GS_R * NT >= 8 ? 1 : 8 / (GS_R * NT);
#endif
#pragma unroll
            for (int r = 0; r < GS_R; r++)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) /* a zero the compiler cannot fold into a
                                                    * memset (clang then kept acc on the stack) */
                        asm("mov.b32 %0, 0;" : "=f"(acc[r][j][e]));
            for (int s = 0; s < splits; s += SB) {
                float2 va[8][GS_R][8], vb[8][GS_R][8];
#pragma unroll
                for (int q = 0; q < SB; q++)
#pragma unroll
                    for (int r = 0; r < GS_R; r++)
#pragma unroll
                        for (int j = 0; j < NT; j++)
                            if (s + q < splits) {
                                const int n = (tr[r] < N ? tr[r] : N - 16) + g;
                                __global const float *p = ws + ((size_t)(s + q) * N + n) * ldw + 8 * j + 2 * c;
                                va[q][r][j] = lz_nv_ld_cg2(p);
                                vb[q][r][j] = lz_nv_ld_cg2(p + 8 * ldw);
                            }
#pragma unroll
                for (int q = 0; q < SB; q++)
#pragma unroll
                    for (int r = 0; r < GS_R; r++)
#pragma unroll
                        for (int j = 0; j < NT; j++)
                            if (s + q < splits) {
                                acc[r][j][0] += va[q][r][j].x, acc[r][j][1] += va[q][r][j].y;
                                acc[r][j][2] += vb[q][r][j].x, acc[r][j][3] += vb[q][r][j].y;
                            }
            }
        }
        if (lid == 0) cnt[blk] = 0; /* ready for the next call */
    }
    if (!mine) return;
#pragma unroll
    for (int r = 0; r < GS_R; r++) {
        const int nt = tr[r]; /* the tile's first column */
        if (nt >= N) continue;
        __global float *yy;
        ulong oo;
        int ll, cc;
        GS_DST(nt, y0, y1, y2, o0, o1, o2, l0, l1, l2, c1, c2, yy, oo, ll, cc);
        __global float *yc = yy + oo + (nt - cc) + g;
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int t = 8 * j + 2 * c + (e & 1); /* token (row of Y) */
                if (t < M) {
                    __global float *p = yc + (size_t)t * ll + ((e >> 1) << 3);
                    *p = accumulate ? *p + acc[r][j][e] : acc[r][j][e];
                }
            }
    }
}

/* local memory of one kernel in uint4: the slice sums (floats), and with
 * GS_XS the staging rings (which the sums reuse after the K loop) */
#define GS_RED(NT) (GS_WK > 1 ? (GS_WK - 1) * GS_WR * GS_R * (NT) * 32 : 1)
#if GS_XS == 5
#define GS_RING(NT) (GS_WK * GS_STG * GS_SLOT(NT) / 16)
#else
#define GS_RING(NT) \
    (GS_WG ? GS_WK * GS_SLOTS * GS_U * (NT) * 32 : GS_XS ? GS_WK * 2 * GS_U * (NT) * 32 : 1)
#endif
#define GS_LOC(NT) (GS_RED(NT) > GS_RING(NT) ? GS_RED(NT) : GS_RING(NT))

#if GS_FUSE
/* the fused kernels: x is f32 (x_off in floats); gain NULL or f32 [K] */
#define GS_KERNEL(NT)                                                                          \
    __kernel __attribute__((reqd_work_group_size(32 * GS_WARPS, 1, 1))) void gs_gemm_nt##NT(    \
        __global const ushort *x, ulong x_off, __global const ushort *w, int K, int N, int M,   \
        __global float *y0, __global float *y1, __global float *y2, ulong o0, ulong o1,        \
        ulong o2, int l0, int l1, int l2, int c1, int c2, int accumulate, int splits,          \
        __global float *ws, __global int *cnt, __global const float *gain, float eps,          \
        int swiglu) {                                                                          \
        __local uint4 loc[GS_LOC(NT)] __attribute__((aligned(16)));                           \
        __local int last;                                                                      \
        __local float scale[8 * NT];                                                           \
        gs_body(x, x_off, w, K, N, M, y0, y1, y2, o0, o1, o2, l0, l1, l2, c1, c2, accumulate,  \
                splits, ws, cnt, loc, &last, gain, eps, swiglu, scale, NT);                    \
    }
#else
#define GS_KERNEL(NT)                                                                          \
    __kernel __attribute__((reqd_work_group_size(32 * GS_WARPS, 1, 1))) void gs_gemm_nt##NT(    \
        __global const ushort *x, ulong x_off, __global const ushort *w, int K, int N, int M,   \
        __global float *y0, __global float *y1, __global float *y2, ulong o0, ulong o1,        \
        ulong o2, int l0, int l1, int l2, int c1, int c2, int accumulate, int splits,          \
        __global float *ws, __global int *cnt) {                                               \
        __local uint4 loc[GS_LOC(NT)] __attribute__((aligned(16)));                           \
        __local int last;                                                                      \
        gs_body(x, x_off, w, K, N, M, y0, y1, y2, o0, o1, o2, l0, l1, l2, c1, c2, accumulate,  \
                splits, ws, cnt, loc, &last, NT);                                               \
    }
#endif

GS_KERNEL(1)
GS_KERNEL(2)
GS_KERNEL(3)
GS_KERNEL(4)
GS_KERNEL(5)
GS_KERNEL(6)
GS_KERNEL(7)
GS_KERNEL(8)
