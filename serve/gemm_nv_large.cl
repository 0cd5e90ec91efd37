/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The large-M bf16 projection on Hopper tensor cores (issue 16, item 1):
 *   Y[rows, out] (f32) (+)= X[rows, in] . W[out, in]^T, X and W bf16 (ushort
 *   bit patterns), both K-contiguous, f32 accumulation.
 * NVIDIA only (inline PTX), built through the sm_90a PTX round trip
 * (lazyattn_context_build_program with LAZYATTN_BUILD_SM90A): every wgmma /
 * (optional) fence.proxy.async sits behind a "//@" marker, a PTX comment until the
 * host unmarks it. Host: serve/gemm_nv_large.c.
 *
 * Work-group: LG_WG consumer warpgroups (128 work-items each); warpgroup g
 * owns rows [64 LG_MW g, 64 LG_MW (g + 1)) of the work-group's LG_BM x LG_BN
 * tile of Y (LG_BM = 64 LG_WG LG_MW), in LG_MW wgmma m64nLG_BNk16 row blocks
 * with LG_MW LG_BN / 2 f32 accumulators a work-item. K is walked in steps of
 * LG_BK through a ring of LG_STAGES stages in local memory (X tile, then W
 * tile), filled by 16-byte cp.async from every work-item and read by wgmma
 * through descriptors, both operands K-major. LG_SWZ 1 (the default): each
 * row's LG_BK * 2 bytes contiguous, 16-byte chunks XOR-swizzled (32-, 64- or
 * 128-byte mode: the copies' local-memory writes are conflict-free; the
 * unswizzled layout measured 1.5x (BK 16) to 3x (BK 64) slower). LG_SWZ 0:
 * 8 x 8 core matrices of 128 contiguous bytes [row / 8][k / 8][row % 8][k % 8]
 * (leading byte offset 128, stride byte offset LG_BK * 16; the layout
 * measured by bench/probe_wgmma_layout.c).
 * The default tile (the H200's best of 20 measured, docs/PERFLOG.md issue 16
 * gemm-large): one warpgroup, 128 x 128 (two m64n128k16 row blocks, 128
 * accumulators), BK 32 in 3 stages of 16 KB, 64-byte swizzle, capped at 168
 * registers by the host so that three work-groups share an SM (144 KB of
 * local memory in flight per SM, which one work-group's 48 KB cap cannot give).
 * No fence.proxy.async between the copies and wgmma by default (LG_PROXY 0):
 * cp.async completion (wait_group) + barrier, then wgmma.fence, as CUTLASS's
 * cp.async + GMMA mainloop (sm90_mma_multistage_gmma_ss_warpspecialized) does
 * it; the fence measured 25 % slower on a 1-work-group-per-SM tile.
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
/* 1: a fence.proxy.async.shared::cta by every work-item after its copies
 * land (the PTX model's rule for generic-proxy writes read by wgmma) */
#ifndef LG_PROXY
#define LG_PROXY 0
#endif
/* 1: the tiles swizzled at LG_BK * 2 bytes (32-, 64- or 128-byte mode) */
#ifndef LG_SWZ
#define LG_SWZ 1
#endif
/* diagnostics only (wrong results): 1 no copies after the first stages,
 * 2 no wgmma */
#ifndef LG_SKIP
#define LG_SKIP 0
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

#define LG_WGMMA_N64(d, da, db, acc) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
                 "//@wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" \
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31" \
                 "}, %32, %33, p, 1, 1, 0, 0;\n}" \
                 : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]), \
                   "+f"((d)[4]), "+f"((d)[5]), "+f"((d)[6]), "+f"((d)[7]), \
                   "+f"((d)[8]), "+f"((d)[9]), "+f"((d)[10]), "+f"((d)[11]), \
                   "+f"((d)[12]), "+f"((d)[13]), "+f"((d)[14]), "+f"((d)[15]), \
                   "+f"((d)[16]), "+f"((d)[17]), "+f"((d)[18]), "+f"((d)[19]), \
                   "+f"((d)[20]), "+f"((d)[21]), "+f"((d)[22]), "+f"((d)[23]), \
                   "+f"((d)[24]), "+f"((d)[25]), "+f"((d)[26]), "+f"((d)[27]), \
                   "+f"((d)[28]), "+f"((d)[29]), "+f"((d)[30]), "+f"((d)[31]) \
                 : "l"(da), "l"(db), "r"(acc))

#define LG_WGMMA_N128(d, da, db, acc) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
                 "//@wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" \
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63" \
                 "}, %64, %65, p, 1, 1, 0, 0;\n}" \
                 : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]), \
                   "+f"((d)[4]), "+f"((d)[5]), "+f"((d)[6]), "+f"((d)[7]), \
                   "+f"((d)[8]), "+f"((d)[9]), "+f"((d)[10]), "+f"((d)[11]), \
                   "+f"((d)[12]), "+f"((d)[13]), "+f"((d)[14]), "+f"((d)[15]), \
                   "+f"((d)[16]), "+f"((d)[17]), "+f"((d)[18]), "+f"((d)[19]), \
                   "+f"((d)[20]), "+f"((d)[21]), "+f"((d)[22]), "+f"((d)[23]), \
                   "+f"((d)[24]), "+f"((d)[25]), "+f"((d)[26]), "+f"((d)[27]), \
                   "+f"((d)[28]), "+f"((d)[29]), "+f"((d)[30]), "+f"((d)[31]), \
                   "+f"((d)[32]), "+f"((d)[33]), "+f"((d)[34]), "+f"((d)[35]), \
                   "+f"((d)[36]), "+f"((d)[37]), "+f"((d)[38]), "+f"((d)[39]), \
                   "+f"((d)[40]), "+f"((d)[41]), "+f"((d)[42]), "+f"((d)[43]), \
                   "+f"((d)[44]), "+f"((d)[45]), "+f"((d)[46]), "+f"((d)[47]), \
                   "+f"((d)[48]), "+f"((d)[49]), "+f"((d)[50]), "+f"((d)[51]), \
                   "+f"((d)[52]), "+f"((d)[53]), "+f"((d)[54]), "+f"((d)[55]), \
                   "+f"((d)[56]), "+f"((d)[57]), "+f"((d)[58]), "+f"((d)[59]), \
                   "+f"((d)[60]), "+f"((d)[61]), "+f"((d)[62]), "+f"((d)[63]) \
                 : "l"(da), "l"(db), "r"(acc))

#define LG_WGMMA_N256(d, da, db, acc) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
                 "//@wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" \
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
                 "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
                 "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
                 "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
                 "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127" \
                 "}, %128, %129, p, 1, 1, 0, 0;\n}" \
                 : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]), \
                   "+f"((d)[4]), "+f"((d)[5]), "+f"((d)[6]), "+f"((d)[7]), \
                   "+f"((d)[8]), "+f"((d)[9]), "+f"((d)[10]), "+f"((d)[11]), \
                   "+f"((d)[12]), "+f"((d)[13]), "+f"((d)[14]), "+f"((d)[15]), \
                   "+f"((d)[16]), "+f"((d)[17]), "+f"((d)[18]), "+f"((d)[19]), \
                   "+f"((d)[20]), "+f"((d)[21]), "+f"((d)[22]), "+f"((d)[23]), \
                   "+f"((d)[24]), "+f"((d)[25]), "+f"((d)[26]), "+f"((d)[27]), \
                   "+f"((d)[28]), "+f"((d)[29]), "+f"((d)[30]), "+f"((d)[31]), \
                   "+f"((d)[32]), "+f"((d)[33]), "+f"((d)[34]), "+f"((d)[35]), \
                   "+f"((d)[36]), "+f"((d)[37]), "+f"((d)[38]), "+f"((d)[39]), \
                   "+f"((d)[40]), "+f"((d)[41]), "+f"((d)[42]), "+f"((d)[43]), \
                   "+f"((d)[44]), "+f"((d)[45]), "+f"((d)[46]), "+f"((d)[47]), \
                   "+f"((d)[48]), "+f"((d)[49]), "+f"((d)[50]), "+f"((d)[51]), \
                   "+f"((d)[52]), "+f"((d)[53]), "+f"((d)[54]), "+f"((d)[55]), \
                   "+f"((d)[56]), "+f"((d)[57]), "+f"((d)[58]), "+f"((d)[59]), \
                   "+f"((d)[60]), "+f"((d)[61]), "+f"((d)[62]), "+f"((d)[63]), \
                   "+f"((d)[64]), "+f"((d)[65]), "+f"((d)[66]), "+f"((d)[67]), \
                   "+f"((d)[68]), "+f"((d)[69]), "+f"((d)[70]), "+f"((d)[71]), \
                   "+f"((d)[72]), "+f"((d)[73]), "+f"((d)[74]), "+f"((d)[75]), \
                   "+f"((d)[76]), "+f"((d)[77]), "+f"((d)[78]), "+f"((d)[79]), \
                   "+f"((d)[80]), "+f"((d)[81]), "+f"((d)[82]), "+f"((d)[83]), \
                   "+f"((d)[84]), "+f"((d)[85]), "+f"((d)[86]), "+f"((d)[87]), \
                   "+f"((d)[88]), "+f"((d)[89]), "+f"((d)[90]), "+f"((d)[91]), \
                   "+f"((d)[92]), "+f"((d)[93]), "+f"((d)[94]), "+f"((d)[95]), \
                   "+f"((d)[96]), "+f"((d)[97]), "+f"((d)[98]), "+f"((d)[99]), \
                   "+f"((d)[100]), "+f"((d)[101]), "+f"((d)[102]), "+f"((d)[103]), \
                   "+f"((d)[104]), "+f"((d)[105]), "+f"((d)[106]), "+f"((d)[107]), \
                   "+f"((d)[108]), "+f"((d)[109]), "+f"((d)[110]), "+f"((d)[111]), \
                   "+f"((d)[112]), "+f"((d)[113]), "+f"((d)[114]), "+f"((d)[115]), \
                   "+f"((d)[116]), "+f"((d)[117]), "+f"((d)[118]), "+f"((d)[119]), \
                   "+f"((d)[120]), "+f"((d)[121]), "+f"((d)[122]), "+f"((d)[123]), \
                   "+f"((d)[124]), "+f"((d)[125]), "+f"((d)[126]), "+f"((d)[127]) \
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

#define LG_FENCE() asm volatile("//@wgmma.fence.sync.aligned;" ::: "memory")
#define LG_COMMIT() asm volatile("//@wgmma.commit_group.sync.aligned;" ::: "memory")
#define LG_WAIT(n) asm volatile("//@wgmma.wait_group.sync.aligned " #n ";" ::: "memory")
#if LG_PROXY
#define LG_PROXY_FENCE() asm volatile("//@fence.proxy.async.shared::cta;" ::: "memory")
#else
#define LG_PROXY_FENCE() ((void)0)
#endif
#define LG_CP_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
#define LG_CP_WAIT(n) asm volatile("cp.async.wait_group " #n ";" ::: "memory")

/* Ties the accumulators so that nothing reads them above a wgmma wait. */
#define LG_TIE4(d, i) asm volatile("" : "+f"((d)[i]), "+f"((d)[i + 1]), "+f"((d)[i + 2]), "+f"((d)[i + 3]))

__attribute__((always_inline)) inline void lg_cp16(uint dst, __global const ushort *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

#if LG_SWZ
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
    return (ulong)((addr & 0x3FFFFu) >> 4) | (ulong)1u << 16 | (ulong)((LG_BK * 16u) >> 4) << 32 |
           LG_SWZ_MODE << 62;
}
#else
/* No swizzle: 8 x 8 core matrices [r / 8][c][r % 8]; leading byte offset
 * 128 (next k chunk), stride byte offset LG_BK * 16 (next 8 rows); a k16
 * step is two core matrices on. */
#define LG_KSTEP 256u
#define LG_OFF(r, c) (((r) >> 3) * (LG_BK * 16u) + (c) * 128u + ((r) & 7u) * 16u)
__attribute__((always_inline)) inline ulong lg_desc(uint addr) {
    return (ulong)((addr & 0x3FFFFu) >> 4) | (ulong)(128u >> 4) << 16 | (ulong)((LG_BK * 16u) >> 4) << 32;
}
#endif

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
            lg_cp16(xs + LG_OFF(r, c), x + (size_t)row * K + kt * LG_BK + (int)c * 8);
        } else {
            const uint q2 = q - LG_BM * LG_BK / 8, r = q2 / (LG_BK / 8), c = q2 % (LG_BK / 8);
            lg_cp16(ws + LG_OFF(r, c), w + (size_t)(n0 + (int)r) * K + kt * LG_BK + (int)c * 8);
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
#if LG_SKIP != 2
            LG_WGMMA(acc[mi], da, db, (first && j == 0) ? 0 : 1);
#endif
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
        LG_CP_COMMIT();
        LG_CP_WAIT(0);
        LG_PROXY_FENCE();
        barrier(CLK_LOCAL_MEM_FENCE);
        LG_FENCE();
        lg_mma(acc, smem, 0, wg, kt == 0);
        LG_COMMIT();
        LG_WAIT(0);
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
        LG_CP_COMMIT();
    }
    for (int kt = 0; kt < KT; kt++) {
        if (LG_YOUNGER == 0) LG_CP_WAIT(0);
        else if (LG_YOUNGER == 1) LG_CP_WAIT(1);
        else if (LG_YOUNGER == 2) LG_CP_WAIT(2);
        else LG_CP_WAIT(3);
        LG_PROXY_FENCE();
        barrier(CLK_LOCAL_MEM_FENCE); /* everybody's copies of kt; everybody's wgmma of kt - 1 - LG_LAG done */
        LG_FENCE();
        lg_mma(acc, smem, kt % LG_STAGES, wg, kt == 0);
        LG_COMMIT();
        const int nk = kt + LG_STAGES - 1 - LG_LAG; /* into the slot of kt - 1 - LG_LAG */
#if LG_SKIP != 1
        if (nk < KT) lg_load(smem, nk % LG_STAGES, nk, x, w, m0, n0, rows, K, tid);
#endif
        LG_CP_COMMIT();
#if LG_LAG
        LG_WAIT(1);
#else
        LG_WAIT(0);
#endif
    }
#if LG_LAG
    LG_WAIT(0);
#endif
#endif
    LG_CP_WAIT(0);
#pragma unroll
    for (int mi = 0; mi < LG_MW; mi++)
#pragma unroll
        for (int i = 0; i < LG_BN / 2; i += 4) LG_TIE4(acc[mi], i);

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
