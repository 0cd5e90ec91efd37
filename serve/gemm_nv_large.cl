/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The large-M bf16 projection on Hopper tensor cores (issue 16, item 1):
 *   Y[rows, out] (f32) (+)= X[rows, in] . W[out, in]^T, X and W bf16 (ushort
 *   bit patterns), both K-contiguous, f32 accumulation.
 * NVIDIA only (inline PTX, the instructions of cl/nv/ptx.h, which the host
 * puts before this file), built through the sm_90a PTX round trip
 * (lazyattn_context_build_program with LAZYATTN_BUILD_SM90A): every wgmma
 * sits behind a "//@" marker, a PTX comment until the host unmarks it.
 * Host: serve/gemm_nv_large.c.
 *
 * Work-group: LG_WG consumer warpgroups (128 work-items each); warpgroup g
 * owns rows [64 LG_MW g, 64 LG_MW (g + 1)) of the work-group's LG_BM x LG_BN
 * tile of Y (LG_BM = 64 LG_WG LG_MW), in LG_MW wgmma m64nLG_BNk16 row blocks
 * with LG_MW LG_BN / 2 f32 accumulators a work-item. K is walked in steps of
 * LG_BK through a ring of LG_STAGES stages in local memory (X tile, then W
 * tile), filled by 16-byte cp.async from every work-item and read by wgmma
 * through descriptors, both operands K-major: each row's LG_BK * 2 bytes
 * contiguous, 16-byte chunks XOR-swizzled (32-, 64- or 128-byte mode: the
 * copies' local-memory writes are conflict-free; an unswizzled layout
 * measured slower, docs/PERFLOG.md issue 16 gemm-large).
 * The default tile (serve/gemm_nv_large.c): one warpgroup, 128 x 128 (two
 * m64n128k16 row blocks, 128 accumulators), BK 32 in 3 stages of 16 KB,
 * 64-byte swizzle, capped at 168 registers by the host so that three
 * work-groups share an SM (144 KB of local memory in flight per SM, which
 * one work-group's 48 KB cap cannot give).
 * No fence.proxy.async between the copies and wgmma: cp.async completion
 * (wait_group) + barrier, then wgmma.fence, as CUTLASS's cp.async + GMMA
 * mainloop (sm90_mma_multistage_gmma_ss_warpspecialized) does it.
 * LG_LAG 0: each warpgroup waits for its wgmma before the next barrier (the
 * refill of a stage needs only that barrier); LG_LAG 1: one wgmma group stays
 * in flight across the barrier, a stage is refilled two steps after its use.
 * Tiles run in groups of `group_m` row tiles that walk the column tiles
 * together (a W slab is read from memory once, X stays in L2).
 * Requires (host-checked): in % LG_BK == 0, every output range's cols %
 * LG_BN == 0, even ld and offsets. X rows >= rows are never read (the row
 * index is clamped) and never written.
 */
#ifndef LG_WG
#define LG_WG 1
#endif
#ifndef LG_MW
#define LG_MW 2
#endif
#ifndef LG_BN
#define LG_BN 128
#endif
#ifndef LG_BK
#define LG_BK 32
#endif
#ifndef LG_STAGES
#define LG_STAGES 3
#endif
#ifndef LG_LAG
#define LG_LAG 0
#endif
#define LG_BM (64 * LG_WG * LG_MW)
#define LG_NT (128 * LG_WG)
#define LG_STAGE_BYTES ((LG_BM + LG_BN) * LG_BK * 2)
#define LG_CHUNKS ((LG_BM + LG_BN) * LG_BK / 8) /* 16-byte copies a stage */
#define LG_CP_ROUNDS ((LG_CHUNKS + LG_NT - 1) / LG_NT)
#if LG_STAGES * LG_STAGE_BYTES > 49152
#error "the stages exceed 48 KB of local memory"
#endif
#if LG_LAG && LG_STAGES < 3
#error "LG_LAG 1 needs 3 or more stages"
#endif
#if LG_BK % 16
#error "LG_BK must be a multiple of 16"
#endif

/* d (LG_BN / 2 sums a work-item) = (acc ? d : 0) + X (descriptor da) W
 * (descriptor db)^T, one m64n<LG_BN>k16 step */
#define LG_WGMMA_N64(d, da, db, acc)                                                                \
    asm volatile(LZ_NV_WGMMA_TEXT("64", "bf16",                                                   \
                                  LZ_NV_OPS8,                                                     \
                                  "%32", "%33", "%34", "0, 0")                                    \
                 : LZ_NV_F32(d, 0)                                                                \
                 : "l"(da), "l"(db), "r"(acc))
#define LG_WGMMA_N128(d, da, db, acc)                                                               \
    asm volatile(LZ_NV_WGMMA_TEXT("128", "bf16",                                                  \
                                  LZ_NV_OPS16,                                                    \
                                  "%64", "%65", "%66", "0, 0")                                    \
                 : LZ_NV_F32(d, 0), LZ_NV_F32(d, 32)                                              \
                 : "l"(da), "l"(db), "r"(acc))
#define LG_WGMMA_N256(d, da, db, acc)                                                               \
    asm volatile(LZ_NV_WGMMA_TEXT("256", "bf16",                                                  \
                                  LZ_NV_OPS32,                                                    \
                                  "%128", "%129", "%130", "0, 0")                                 \
                 : LZ_NV_F32(d, 0), LZ_NV_F32(d, 32), LZ_NV_F32(d, 64), LZ_NV_F32(d, 96)          \
                 : "l"(da), "l"(db), "r"(acc))

#if LG_BN == 64
#define LG_WGMMA LG_WGMMA_N64
#elif LG_BN == 128
#define LG_WGMMA LG_WGMMA_N128
#elif LG_BN == 256
#define LG_WGMMA LG_WGMMA_N256
#else
#error "LG_BN must be 64, 128 or 256"
#endif

/* Swizzled K-major: row r's LG_BK * 2 bytes contiguous, its 16-byte chunks
 * XOR-permuted by the row's bits above them (the address bits 7.. into bits
 * 4..); 8 rows an atom (stride byte offset LG_BK * 16); a k16 step is 32
 * bytes on. Layout type in bits 62-63: 3 = 32-byte, 2 = 64-byte, 1 = 128-byte. */
#if LG_BK == 16
#define LG_SWZ_MODE 3ul
#define LG_SWZ_ROW(r) (((r) >> 2) & 1u)
#elif LG_BK == 32
#define LG_SWZ_MODE 2ul
#define LG_SWZ_ROW(r) (((r) >> 1) & 3u)
#else
#define LG_SWZ_MODE 1ul
#define LG_SWZ_ROW(r) ((r) & 7u)
#endif
#define LG_KSTEP 32u
#define LG_OFF(r, c) ((r) * (LG_BK * 2u) + (((c) ^ LG_SWZ_ROW(r)) << 4))
__attribute__((always_inline)) inline ulong lg_desc(uint addr) {
    return lz_nv_wg_desc(addr, 16u, LG_BK * 16u) | LG_SWZ_MODE << 62;
}

/* Stage `slot` <- K step kt of rows m0.. of X and n0.. of W (no wait). */
__attribute__((always_inline)) inline void lg_load(uint smem, int slot, int kt, __global const ushort *x, __global const ushort *w,
                    int m0, int n0, int rows, int K, uint tid) {
    const uint xs = smem + (uint)slot * LG_STAGE_BYTES, ws = xs + LG_BM * LG_BK * 2;
#pragma unroll
    for (int i = 0; i < LG_CP_ROUNDS; i++) {
        const uint q = tid + (uint)i * LG_NT;
        if (LG_CHUNKS % LG_NT && q >= LG_CHUNKS) break;
        if (q < LG_BM * LG_BK / 8) {
            const uint r = q / (LG_BK / 8), c = q % (LG_BK / 8);
            const int row = m0 + (int)r < rows ? m0 + (int)r : rows - 1;
            lz_nv_cp_async16(xs + LG_OFF(r, c), x + (size_t)row * K + kt * LG_BK + (int)c * 8);
        } else {
            const uint q2 = q - LG_BM * LG_BK / 8, r = q2 / (LG_BK / 8), c = q2 % (LG_BK / 8);
            lz_nv_cp_async16(ws + LG_OFF(r, c), w + (size_t)(n0 + (int)r) * K + kt * LG_BK + (int)c * 8);
        }
    }
}

/* The wgmma steps of one stage for this warpgroup (first: start the sums). */
__attribute__((always_inline)) inline void lg_mma(float acc[LG_MW][LG_BN / 2], uint smem, int slot, uint wg, int first) {
    const uint xs = smem + (uint)slot * LG_STAGE_BYTES, ws = xs + LG_BM * LG_BK * 2;
#pragma unroll
    for (int j = 0; j < LG_BK / 16; j++) {
        const ulong db = lg_desc(ws + (uint)j * LG_KSTEP);
#pragma unroll
        for (int mi = 0; mi < LG_MW; mi++) {
            const ulong da = lg_desc(xs + (wg * LG_MW + (uint)mi) * 64u * (LG_BK * 2u) + (uint)j * LG_KSTEP);
            LG_WGMMA(acc[mi], da, db, (first && j == 0) ? 0 : 1);
        }
    }
}

__kernel __attribute__((reqd_work_group_size(LG_NT, 1, 1)))
void lg_gemm(__global const ushort *x, ulong x_off, __global const ushort *w, int rows, int K,
             int n_total, int group_m, __global float *y0, __global float *y1, __global float *y2,
             ulong off0, ulong off1, ulong off2, int ld0, int ld1, int ld2, int end0, int end1,
             int accumulate) {
    __local uint4 smem_l[LG_STAGES * LG_STAGE_BYTES / 16] __attribute__((aligned(1024)));
    const uint smem = (uint)(size_t)smem_l;
    const uint tid = get_local_id(0), lane = tid & 31u, warp = tid >> 5, wg = warp >> 2;
    x += x_off;

    /* tile order: groups of group_m row tiles walk the column tiles together */
    const int mt = (rows + LG_BM - 1) / LG_BM, nt = n_total / LG_BN;
    const int id = get_group_id(0), per_group = group_m * nt, grp = id / per_group;
    const int gm = group_m < mt - grp * group_m ? group_m : mt - grp * group_m, in_grp = id - grp * per_group;
    const int m0 = (grp * group_m + in_grp % gm) * LG_BM, n0 = (in_grp / gm) * LG_BN;

    float acc[LG_MW][LG_BN / 2];
#pragma unroll
    for (int mi = 0; mi < LG_MW; mi++)
#pragma unroll
        for (int i = 0; i < LG_BN / 2; i++) acc[mi][i] = 0.0f;

    const int KT = K / LG_BK;
#if LG_STAGES == 1
    /* one stage: no overlap inside the work-group (other work-groups on the SM fill the gaps) */
    for (int kt = 0; kt < KT; kt++) {
        lg_load(smem, 0, kt, x, w, m0, n0, rows, K, tid);
        LZ_NV_CP_COMMIT();
        LZ_NV_CP_WAIT(0);
        barrier(CLK_LOCAL_MEM_FENCE);
        LZ_NV_WG_FENCE();
        lg_mma(acc, smem, 0, wg, kt == 0);
        LZ_NV_WG_COMMIT();
        LZ_NV_WG_WAIT_N(0);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#else
    /* copies LG_AHEAD stages ahead; the wgmma group of stage kt is waited
     * for at the end of round kt (LG_LAG 0) or of round kt + 1 (LG_LAG 1,
     * so that the refill after the next barrier goes into the slot of kt - 2) */
#define LG_AHEAD (LG_STAGES - 1 - LG_LAG)
    /* at most this many younger copy groups while stage kt must be in:
     * LG_AHEAD - 1, capped at 3 - LG_LAG (waits a stage early at 6 stages) */
#define LG_YOUNGER (LG_AHEAD - 1 < 3 - LG_LAG ? LG_AHEAD - 1 : 3 - LG_LAG)
#pragma unroll
    for (int s = 0; s < LG_AHEAD; s++) {
        if (s < KT) lg_load(smem, s, s, x, w, m0, n0, rows, K, tid);
        LZ_NV_CP_COMMIT();
    }
    for (int kt = 0; kt < KT; kt++) {
        if (LG_YOUNGER == 0) LZ_NV_CP_WAIT(0);
        else if (LG_YOUNGER == 1) LZ_NV_CP_WAIT(1);
        else if (LG_YOUNGER == 2) LZ_NV_CP_WAIT(2);
        else LZ_NV_CP_WAIT(3);
        barrier(CLK_LOCAL_MEM_FENCE); /* everybody's copies of kt; everybody's wgmma of kt - 1 - LG_LAG done */
        LZ_NV_WG_FENCE();
        lg_mma(acc, smem, kt % LG_STAGES, wg, kt == 0);
        LZ_NV_WG_COMMIT();
        const int nk = kt + LG_STAGES - 1 - LG_LAG; /* into the slot of kt - 1 - LG_LAG */
        if (nk < KT) lg_load(smem, nk % LG_STAGES, nk, x, w, m0, n0, rows, K, tid);
        LZ_NV_CP_COMMIT();
#if LG_LAG
        LZ_NV_WG_WAIT_N(1);
#else
        LZ_NV_WG_WAIT_N(0);
#endif
    }
#if LG_LAG
    LZ_NV_WG_WAIT_N(0);
#endif
#endif
    LZ_NV_CP_WAIT(0);
#pragma unroll
    for (int mi = 0; mi < LG_MW; mi++)
#pragma unroll
        for (int i = 0; i < LG_BN / 2; i += 4) LZ_NV_WG_TIE(acc[mi] + i);

    /* the tile's output range (each range's cols are a multiple of LG_BN) */
    __global float *y = y0;
    ulong off = off0;
    int ld = ld0, c0 = 0;
    if (n0 >= end1) y = y2, off = off2, ld = ld2, c0 = end1;
    else if (n0 >= end0) y = y1, off = off1, ld = ld1, c0 = end0;
    y += off;
    const uint g = lane >> 2, t = lane & 3u;
#pragma unroll
    for (int mi = 0; mi < LG_MW; mi++) {
        const int r0 = m0 + (int)((wg * LG_MW + (uint)mi) * 64u + (warp & 3u) * 16u + g);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = r0 + 8 * h;
            if (row < rows) {
                __global float *yr = y + (size_t)row * ld + (n0 - c0) + 2 * (int)t;
#pragma unroll
                for (int j = 0; j < LG_BN / 8; j++) {
                    float2 v = (float2)(acc[mi][4 * j + 2 * h], acc[mi][4 * j + 2 * h + 1]);
                    if (accumulate) v += *(__global float2 *)(yr + 8 * j);
                    *(__global float2 *)(yr + 8 * j) = v;
                }
            }
        }
    }
}
