/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NVIDIA PTX instructions as inline asm, one wrapper each: the primitives
 * of the tensor-core attention (cl/nv/attn_mma.h, cl/prefill_nv.cl,
 * cl/decode_nv.cl) and of serve/'s bf16 GEMMs (serve/gemm_nv_large.cl,
 * serve/gemm_nv_small.cl), which embed this file too. No kernel policy
 * here: no tile sizes, layouts or defaults.
 *
 * Only ever compiled by NVIDIA's OpenCL driver (PoCL rejects asm). mma.sync,
 * ldmatrix, cp.async, shfl and the loads are sm_80-class PTX, which the
 * JIT's `.target sm_90` accepts as is. The Hopper (sm_90a) instructions
 * (wgmma, fence.proxy.async, setmaxnreg) sit behind a "//@" marker, a PTX
 * comment until lazyattn_context_build_program's sm_90a round trip
 * (lib/ptx_sm90a.c) deletes the markers and retargets the PTX.
 *
 * Fragment layout of mma.sync m16n8k16 (g = lane / 4, t = lane % 4):
 *   A (16 x 16, row): a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
 *   B (16 x 8, col):  b0 (k 2t..2t+1, n g)             b1 (k 2t+8.., n g)
 *   C (16 x 8, f32):  c0,c1 (g, 2t, 2t+1)               c2,c3 (g+8, 2t, 2t+1)
 * Each 32-bit register holds two 16-bit values, the lower column in the low half.
 */
#ifndef LZ_NV_PTX_H
#define LZ_NV_PTX_H

/* 32-bit shared-memory address of a __local pointer (what ldmatrix,
 * cp.async, mbarrier and the wgmma descriptors take). */
#define LZ_NV_SMEM(p) ((uint)(size_t)(p))

/* ---- mma.sync, ldmatrix, movmatrix ---- */

/* d += A B, one m16n8k16 step with f32 sums; type "f16" or "bf16" (A and
 * B); d: float[4], a0..a3: the A fragment, b0, b1: the B fragment. */
#define LZ_NV_MMA_M16N8K16(type, d, a0, a1, a2, a3, b0, b1)                                      \
    asm("mma.sync.aligned.m16n8k16.row.col.f32." type "." type ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
        "{%8,%9}, {%0,%1,%2,%3};"                                                                \
        : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3])                                 \
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
/* ... f16, the A fragment as an array a: uint[4] */
#define LZ_NV_MMA(c, a, b0, b1) LZ_NV_MMA_M16N8K16("f16", c, (a)[0], (a)[1], (a)[2], (a)[3], b0, b1)

/* Four 8x8 b16 matrices from shared memory; lane l gives the address of row
 * l % 8 of matrix l / 8 (16-byte aligned). */
#define LZ_NV_LDSM_X4(r0, r1, r2, r3, addr)                                          \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"     \
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)                            \
                 : "r"(addr))
/* The same, transposed. */
#define LZ_NV_LDSM_X4_T(r0, r1, r2, r3, addr)                                          \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" \
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)                              \
                 : "r"(addr))

/* An 8x8 b16 matrix in the mma fragment layout, transposed across the warp. */
inline uint lz_nv_movt(uint x) {
    uint y;
    asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
    return y;
}

/* ---- cp.async (global -> shared, asynchronous) ---- */

/* 16 bytes, through L2 only (.cg). */
inline void lz_nv_cp_async16(uint dst, __global const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
/* ... of which the first n (0 or 16) are read, the rest zero-filled (src
 * must still be a valid address). */
inline void lz_nv_cp_async16_n(uint dst, __global const void *src, uint n) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
/* ... with the L2 prefetch hint of 256 bytes. */
inline void lz_nv_cp_async16_n_l2(uint dst, __global const void *src, uint n) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n)
                 : "memory");
}
/* 4 bytes through L1 (.ca), the first n (0 or 4) read, the rest zero-filled. */
inline void lz_nv_cp_async4_n(uint dst, __global const void *src, uint n) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
/* 16 bytes, zero-filled when !valid. */
inline void lz_nv_cp16(uint dst, __global const void *src, int valid) {
    lz_nv_cp_async16_n(dst, src, valid ? 16 : 0);
}
#define LZ_NV_CP_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
/* Wait until at most n (a literal) committed groups are still in flight. */
#define LZ_NV_CP_WAIT(n) asm volatile("cp.async.wait_group " #n ";" ::: "memory")
/* ... n a constant expression 0..6 (below 0: 0, above: 6) */
#define LZ_NV_CP_WAIT_PENDING(n)                    \
    do {                                            \
        if ((n) <= 0) LZ_NV_CP_WAIT(0);             \
        else if ((n) == 1) LZ_NV_CP_WAIT(1);        \
        else if ((n) == 2) LZ_NV_CP_WAIT(2);        \
        else if ((n) == 3) LZ_NV_CP_WAIT(3);        \
        else if ((n) == 4) LZ_NV_CP_WAIT(4);        \
        else if ((n) == 5) LZ_NV_CP_WAIT(5);        \
        else LZ_NV_CP_WAIT(6);                      \
    } while (0)
#define LZ_NV_CP_WAIT_ALL() asm volatile("cp.async.wait_all;" ::: "memory")

/* ---- global loads, fences, atomics ---- */

/* 16 bytes through the read-only path (.nc); _na: no L1 line allocated
 * (L1::no_allocate, data read once); _na_l2: and the L2 prefetch hint of
 * 256 bytes. */
inline uint4 lz_nv_ld_nc16(__global const void *p) {
    uint a, b, c, d;
    asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p));
    return (uint4)(a, b, c, d);
}
inline uint4 lz_nv_ld_nc16_na(__global const void *p) {
    uint a, b, c, d;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
        : "l"(p));
    return (uint4)(a, b, c, d);
}
inline uint4 lz_nv_ld_nc16_na_l2(__global const void *p) {
    uint a, b, c, d;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
        : "l"(p));
    return (uint4)(a, b, c, d);
}
/* Two f32 at L2, around L1 (.cg: written by other work-groups). */
inline float2 lz_nv_ld_cg2(__global const float *p) {
    float a, b;
    asm volatile("ld.global.cg.v2.f32 {%0,%1}, [%2];" : "=f"(a), "=f"(b) : "l"(p) : "memory");
    return (float2)(a, b);
}
/* Orders the thread's memory accesses at device scope (acquire-release). */
#define LZ_NV_FENCE_GPU() asm volatile("fence.acq_rel.gpu;" ::: "memory")
/* The old value of *p, which gains 1 (device scope, acquire-release). */
inline int lz_nv_atom_inc_gpu(__global int *p) {
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
    return old;
}

/* ---- warp ---- */

/* Lane src's x, to every lane of the warp. */
inline uint lz_nv_shfl(uint x, int src) {
    uint r;
    asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(x), "r"(src));
    return r;
}
/* Butterfly exchange within a warp. */
inline float lz_nv_xor(float x, int m) {
    uint r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
                 : "=r"(r)
                 : "r"(as_uint(x)), "r"(m));
    return as_float(r);
}
/* Bit l: lane l's c is not 0 (every lane of the warp takes part). */
inline uint lz_nv_ballot(int c) {
    uint r;
    asm volatile("{ .reg .pred p; setp.ne.s32 p, %1, 0; vote.sync.ballot.b32 %0, p, 0xffffffff; }"
                 : "=r"(r)
                 : "r"(c));
    return r;
}
/* The warp's lanes meet; their memory accesses before it are ordered
 * before the others' after it. */
#define LZ_NV_WARP_SYNC() asm volatile("bar.warp.sync -1;" ::: "memory")
/* Named barrier id (1..15; 0 is barrier()) of n work-items (a multiple of
 * 32): wait there / arrive without waiting. */
#define LZ_NV_BAR_SYNC(id, n) asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory")
#define LZ_NV_BAR_ARRIVE(id, n) asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory")

/* ---- arithmetic ---- */

/* Two f32 -> one register of two f16 (lo in the low half), round to nearest. */
inline uint lz_nv_pack(float lo, float hi) {
    uint r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
/* Two f16 (one register) -> two f32 (low half first). */
inline float2 lz_nv_unpack(uint u) {
    float lo, hi;
    asm("{ .reg .f16 a, b; mov.b32 {a, b}, %2; cvt.f32.f16 %0, a; cvt.f32.f16 %1, b; }"
        : "=f"(lo), "=f"(hi)
        : "r"(u));
    return (float2)(lo, hi);
}
/* The index of the lowest set bit of m (m not 0). */
inline int lz_nv_low_bit(uint m) {
    uint r;
    asm("bfind.u32 %0, %1;" : "=r"(r) : "r"(m & (0u - m)));
    return (int)r;
}
/* 2^x, one MUFU.EX2, results below 2^-126 flushed to zero (native_exp2
 * compiles to ex2.approx.f32 without .ftz, which ptxas wraps in a denormal
 * guard of three more instructions). */
inline float lz_nv_ex2_ftz(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

/* ---- mbarrier (sm_90) ---- */

/* mbarriers in local memory (shared address bar, 8 bytes, 8-aligned), as
 * verified from OpenCL on the H200 (../shared/gpu/probe_async_pipeline.c):
 * init to `count` arrivals a phase (one thread, then LZ_NV_MBAR_INIT_FENCE
 * and a barrier before any use); a plain arrive (release: the thread's
 * earlier local writes are seen by whoever waits for the phase); the
 * asynchronous arrive of cp.async, counted as one of the `count` (.noinc)
 * and made once every earlier cp.async of the thread has landed; the wait
 * for the phase of the given parity to complete (acquire). */
inline void lz_nv_mbar_init(uint bar, uint count) {
    asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
#define LZ_NV_MBAR_INIT_FENCE() asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory")
inline void lz_nv_mbar_arrive(uint bar) {
    asm volatile("mbarrier.arrive.shared.b64 _, [%0];" ::"r"(bar) : "memory");
}
inline void lz_nv_mbar_arrive_cp(uint bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(bar) : "memory");
}
inline void lz_nv_mbar_wait(uint bar, uint parity) {
    uint done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
}

/* ---- Hopper warpgroup MMA (sm_90a, behind "//@") ---- */

/*
 * wgmma.mma_async m64n<n>k16 with f32 sums, A and B of type t ("f16",
 * "bf16"): the instruction's text with operands numbered by the caller: d
 * the sums' list ("%0,%1,.."), a the A operand ("{%8,..,%11}" from
 * registers, or "%32" a descriptor), b B's descriptor, scale_d "1" (D +=
 * A B) or an operand ("%13": D = A B where it is 0), tail the
 * instruction's last immediates after scale-a and scale-b ("0": B K-major;
 * "1": B MN-major, from registers; "0, 0": both K-major by descriptors).
 * The caller's asm volatile statement takes the sums as "+f" outputs
 * (LZ_NV_ACC1, LZ_NV_ACC8), then the inputs in that order.
 */
#define LZ_NV_WGMMA_TEXT(n, t, d, a, b, scale_d, tail)                                           \
    "{\n.reg .pred p;\nsetp.ne.b32 p, " scale_d ", 0;\n"                                          \
    "//@wgmma.mma_async.sync.aligned.m64n" n "k16.f32." t "." t " {" d "}, " a ", " b ", p, 1, 1, " \
    tail ";\n}"
/* The sums' operand numbers in the asm text (LZ_NV_WGMMA_TEXT's d), the
 * first 4 k of them: LZ_NV_OPS<k> = "%0,%1,...,%<4 k - 1>" */
#define LZ_NV_OPS1 "%0,%1,%2,%3"
#define LZ_NV_OPS2 LZ_NV_OPS1 ",%4,%5,%6,%7"
#define LZ_NV_OPS3 LZ_NV_OPS2 ",%8,%9,%10,%11"
#define LZ_NV_OPS4 LZ_NV_OPS3 ",%12,%13,%14,%15"
#define LZ_NV_OPS5 LZ_NV_OPS4 ",%16,%17,%18,%19"
#define LZ_NV_OPS6 LZ_NV_OPS5 ",%20,%21,%22,%23"
#define LZ_NV_OPS7 LZ_NV_OPS6 ",%24,%25,%26,%27"
#define LZ_NV_OPS8 LZ_NV_OPS7 ",%28,%29,%30,%31"
#define LZ_NV_OPS16 LZ_NV_OPS8 ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47" \
    ",%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define LZ_NV_OPS32 LZ_NV_OPS16 ",%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79" \
    ",%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95" \
    ",%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111" \
    ",%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
/* the sums' operands: 4 f32 d[i..i + 3], 32 f32 d[i..i + 31] of a flat
 * array; 4 f32 o[j][0..3], 8 such tiles from j0 */
#define LZ_NV_F4(d, i) "+f"((d)[(i)]), "+f"((d)[(i) + 1]), "+f"((d)[(i) + 2]), "+f"((d)[(i) + 3])
#define LZ_NV_F32(d, i)                                                                     \
    LZ_NV_F4(d, i), LZ_NV_F4(d, (i) + 4), LZ_NV_F4(d, (i) + 8), LZ_NV_F4(d, (i) + 12),      \
        LZ_NV_F4(d, (i) + 16), LZ_NV_F4(d, (i) + 20), LZ_NV_F4(d, (i) + 24), LZ_NV_F4(d, (i) + 28)
#define LZ_NV_ACC1(o, j) "+f"((o)[j][0]), "+f"((o)[j][1]), "+f"((o)[j][2]), "+f"((o)[j][3])
#define LZ_NV_ACC8(o, j0)                                                                 \
    LZ_NV_ACC1(o, j0), LZ_NV_ACC1(o, j0 + 1), LZ_NV_ACC1(o, j0 + 2), LZ_NV_ACC1(o, j0 + 3), \
        LZ_NV_ACC1(o, j0 + 4), LZ_NV_ACC1(o, j0 + 5), LZ_NV_ACC1(o, j0 + 6), LZ_NV_ACC1(o, j0 + 7)
#define LZ_NV_WG_FENCE() asm volatile("//@wgmma.fence.sync.aligned;" ::: "memory")
#define LZ_NV_WG_COMMIT() asm volatile("//@wgmma.commit_group.sync.aligned;" ::: "memory")
/* Wait until at most n (a literal) committed wgmma groups are in flight. */
#define LZ_NV_WG_WAIT_N(n) asm volatile("//@wgmma.wait_group.sync.aligned " #n ";" ::: "memory")
#define LZ_NV_WG_WAIT() LZ_NV_WG_WAIT_N(0)
#define LZ_NV_WG_WAIT1() LZ_NV_WG_WAIT_N(1)
/* After a wgmma wait: ties an accumulator tile so that no use of it is
 * moved above the wait. */
#define LZ_NV_WG_TIE(s) asm volatile("" : "+f"((s)[0]), "+f"((s)[1]), "+f"((s)[2]), "+f"((s)[3]))
/* Descriptor of an operand in local memory at shared address addr: leading
 * and stride byte offsets lbo, sbo (no swizzle; a swizzle mode goes in bits
 * 62-63). */
inline ulong lz_nv_wg_desc(uint addr, uint lbo, uint sbo) {
    return (ulong)((addr & 0x3FFFF) >> 4) | (ulong)(lbo >> 4) << 16 | (ulong)(sbo >> 4) << 32;
}
/* Generic-proxy writes to local memory (cp.async, st.shared) made visible
 * to the async proxy that wgmma reads through; before the barrier. */
#define LZ_NV_PROXY_FENCE() asm volatile("//@fence.proxy.async.shared::cta;" ::: "memory")
/* Every warp of the warpgroup: its registers raised (inc) or lowered (dec)
 * to n (24..256, a multiple of 8), from / to the work-group's pool (ptxas
 * heeds it only in a kernel with a register cap at entry, else it warns
 * C7508). */
#define LZ_NV_XSTR_(x) #x
#define LZ_NV_XSTR(x) LZ_NV_XSTR_(x)
#define LZ_NV_SETMAXNREG(action, n) \
    asm volatile("//@setmaxnreg." #action ".sync.aligned.u32 " LZ_NV_XSTR(n) ";" ::: "memory")

#endif
