/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tensor-core attention's building blocks on mma fragments, shared by
 * the NVIDIA prefill and decode (cl/prefill_nv.cl, cl/decode_nv.cl): the
 * K/V tile layouts in local memory, the query's rotary in A fragments,
 * the scores of 16 keys, the online softmax and O += P V, on mma.sync and
 * on Hopper wgmma. Built on cl/nv/ptx.h (the instructions), before it in
 * the program; only in programs built with -DLAZYATTN_FAST_NV=1.
 */
#ifndef LZ_NV_ATTN_MMA_H
#define LZ_NV_ATTN_MMA_H

/* 1: the prefill's scores by Hopper wgmma (program built through lib/ptx_sm90a.c) */
#ifndef LZ_NV_WGMMA
#define LZ_NV_WGMMA 0
#endif

/* Byte offset of 16-byte chunk c of row r in a [rows][LZ_HEAD_DIM] f16 tile,
 * XOR-swizzled over 8 chunks so that the 8 rows one ldmatrix reads fall in
 * distinct banks (rows are 128 or 256 bytes). */
#define LZ_NV_SWZ(r, c) ((uint)(r) * (LZ_HEAD_DIM * 2) + ((uint)((c) ^ ((r) & 7)) << 4))
/* ... in 8 x 8 core matrices of 128 contiguous bytes (8 rows of one 16-byte
 * column), [r / 8][c][r % 8]: a tiled pool page as stored (cl/storage.h),
 * and the layout wgmma reads (ldmatrix reads either without conflicts). */
#define LZ_NV_CM(r, c) ((uint)((r) >> 3) * (LZ_HEAD_DIM / 8 * 128) + (uint)(c) * 128 + (uint)((r) & 7) * 16)

/* (pair index, 1 if dim i is the pair's first dim) of dim i; pair -1 when
 * dim i is not rotated. */
inline int2 lz_nv_rope_pair_of(int i, int style, int rot_dim) {
    if (style == LZ_ROPE_NONE || i >= rot_dim) return (int2)(-1, 1);
    if (style == LZ_ROPE_NEOX) {
        const int hr = rot_dim / 2;
        return i < hr ? (int2)(i, 1) : (int2)(i - hr, 0);
    }
    return (int2)(i >> 1, !(i & 1));
}

/* Element i of R(pos) x for a head vector x (global f32), given the (cos,
 * sin) of dim i's pair and the pair's dims d. */
inline float lz_nv_rot_elem(__global const float *x, int i, int first, int2 d, float2 cs) {
    if (!x) return 0.0f;
    if (d.x < 0) return x[i];
    const float2 r = lz_rotate((float2)(x[d.x], x[d.y]), cs);
    return first ? r.x : r.y;
}

/*
 * The A fragments of 16 rows of head vectors (row g and g + 8 of this lane),
 * rotated by R(pos) from the f32 originals: row0 / row1 point at the lane's
 * two rows (NULL: a padding row of zeros). The angle of each pair is
 * computed once per lane and shared by its two rows. qf: [LZ_HEAD_DIM / 16][4].
 */
__attribute__((always_inline)) inline void lz_nv_load_a(uint qf[LZ_HEAD_DIM / 16][4],
                                                        __global const float *row0,
                                                        __global const float *row1, int t, int pos,
                                                        int style, int rot_dim,
                                                        __global const float2 *freq) {
#pragma unroll
    for (int c = 0; c < LZ_HEAD_DIM / 16; c++) {
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            float v[2][2];
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int i = c * 16 + 2 * t + 8 * hh + u;
                const int2 pf = pos == 0 ? (int2)(-1, 1) : lz_nv_rope_pair_of(i, style, rot_dim);
                const int p = pf.x, first = pf.y;
                int2 d = (int2)(-1, -1);
                float2 cs = (float2)(1.0f, 0.0f);
                if (p >= 0) {
                    d = lz_rope_pair(p, style, rot_dim);
                    /* the angle is reduced accurately to [-pi, pi]; the
                     * hardware sin/cos (abs error ~5e-7 there) is far below
                     * the f16 rounding of the rotated query */
                    const float ang = lz_rope_angle(pos, freq[p]);
                    cs = (float2)(native_cos(ang), native_sin(ang));
                }
                v[0][u] = lz_nv_rot_elem(row0, i, first, d, cs);
                v[1][u] = lz_nv_rot_elem(row1, i, first, d, cs);
            }
            qf[c][2 * hh] = lz_nv_pack(v[0][0], v[0][1]);
            qf[c][2 * hh + 1] = lz_nv_pack(v[1][0], v[1][1]);
        }
    }
}

/* 1 when both dims of every rotary pair sit in the same lane's A fragment
 * (see lz_nv_rotate_a): GPT-J (a pair is one register) or full-rotary NeoX
 * (dims i and i + LZ_HEAD_DIM / 2 are chunks c and c + LZ_HEAD_DIM / 32). */
inline int lz_nv_pairs_in_lane(int style, int rot_dim) {
    return style == LZ_ROPE_GPTJ || (style == LZ_ROPE_NEOX && rot_dim == LZ_HEAD_DIM);
}

/*
 * qf = R(pos) q0 for A fragments (layout of lz_nv_load_a) of two rows,
 * rotated in registers from f16 fragments q0 (q0 may be qf itself), when
 * lz_nv_pairs_in_lane(style, rot_dim): 16 angles per lane and no memory but
 * the frequencies, instead of lz_nv_load_a's reloads of the f32 rows (each
 * a memory round trip behind a branch). One f16 rounding per call.
 */
__attribute__((always_inline)) inline void lz_nv_rotate_a(uint qf[LZ_HEAD_DIM / 16][4],
                                                          const uint q0[LZ_HEAD_DIM / 16][4], int t,
                                                          int pos, int style, int rot_dim,
                                                          __global const float2 *freq) {
    if (style == LZ_ROPE_NEOX) {
        const int H = LZ_HEAD_DIM / 32; /* partner chunk offset */
#pragma unroll
        for (int c = 0; c < H; c++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                float2 cs[2];
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const float a = lz_rope_angle(pos, freq[c * 16 + 8 * hh + 2 * t + u]);
                    cs[u] = (float2)(native_cos(a), native_sin(a));
                }
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const float2 x = lz_nv_unpack(q0[c][2 * hh + r]), y = lz_nv_unpack(q0[c + H][2 * hh + r]);
                    const float2 p0 = lz_rotate((float2)(x.x, y.x), cs[0]);
                    const float2 p1 = lz_rotate((float2)(x.y, y.y), cs[1]);
                    qf[c][2 * hh + r] = lz_nv_pack(p0.x, p1.x);
                    qf[c + H][2 * hh + r] = lz_nv_pack(p0.y, p1.y);
                }
            }
    } else {
        const int n_pairs = rot_dim / 2;
#pragma unroll
        for (int c = 0; c < LZ_HEAD_DIM / 16; c++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int p = c * 8 + 4 * hh + t; /* dims 2p, 2p + 1 */
                const float a = lz_rope_angle(pos, freq[p < n_pairs ? p : n_pairs - 1]);
                const float2 cs = p < n_pairs ? (float2)(native_cos(a), native_sin(a)) : (float2)(1.0f, 0.0f);
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const float2 v = lz_rotate(lz_nv_unpack(q0[c][2 * hh + r]), cs);
                    qf[c][2 * hh + r] = lz_nv_pack(v.x, v.y);
                }
            }
    }
}

/* Raw scores of 16 keys (rows p16 .. p16 + 15 of the K tile at shared
 * address kb, read by ldmatrix, at byte offsets OFF(row, 16-byte column):
 * LZ_NV_SWZ or LZ_NV_CM) against the A fragments qf: s0 gets keys p16 ..
 * + 7, s1 keys p16 + 8 .. + 15 (float[4] each, zeroed here). */
#define LZ_NV_QK16_OFF(s0, s1, qf, kb, p16, lane, OFF)                                   \
    do {                                                                                 \
        _Pragma("unroll")                                                                \
        for (int u_ = 0; u_ < 4; u_++) (s0)[u_] = (s1)[u_] = 0.0f;                       \
        const int kr_ = (p16) + (((lane) >> 4) << 3) + ((lane) & 7);                     \
        _Pragma("unroll")                                                                \
        for (int c_ = 0; c_ < LZ_HEAD_DIM / 16; c_++) {                                  \
            uint b0_, b1_, b2_, b3_;                                                     \
            LZ_NV_LDSM_X4(b0_, b1_, b2_, b3_, (kb) + OFF(kr_, 2 * c_ + (((lane) >> 3) & 1))); \
            LZ_NV_MMA(s0, qf[c_], b0_, b1_);                                             \
            LZ_NV_MMA(s1, qf[c_], b2_, b3_);                                             \
        }                                                                                \
    } while (0)

/*
 * The attention's products on Hopper wgmma (cl/nv/ptx.h). Measured on the
 * H200 (bench/probe_wgmma_layout.c): A from registers in the mma.sync
 * A-fragment layout (warp w of the warpgroup = rows 16w..16w+15), B
 * "K-major" from local memory without swizzle in 8x8 core matrices of 128
 * contiguous bytes, the descriptor's leading byte offset = the stride
 * between core matrices along K, its stride byte offset = the stride along
 * N; the accumulators in the mma.sync C layout, one n8 tile after another.
 */
/* s0, s1 (float[4], keys n 0..7 and 8..15) = (acc ? s0, s1 : 0) + A(64 x
 * 16, this lane's fragment a) B(16 x 16 at descriptor desc)^T,
 * asynchronously. acc = 0 starts the sum without zeroing the registers
 * (writing them between the fence and the wgmma would make ptxas wait). */
#define LZ_NV_WGMMA_N16(s0, s1, a, desc, acc)                                                 \
    asm volatile(LZ_NV_WGMMA_TEXT("16", "f16", "%0,%1,%2,%3,%4,%5,%6,%7", "{%8,%9,%10,%11}", "%12", \
                                  "%13", "0")                                                   \
                 : "+f"((s0)[0]), "+f"((s0)[1]), "+f"((s0)[2]), "+f"((s0)[3]), "+f"((s1)[0]),  \
                   "+f"((s1)[1]), "+f"((s1)[2]), "+f"((s1)[3])                                \
                 : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "l"(desc), "r"(acc))
/* The same over 32 keys (s[0..3]: keys 8n..8n+7), one wgmma m64n32k16, for
 * a K tile whose entries share one delta (LZ_NV_S_WIDE). */
#define LZ_NV_WGMMA_N32(s, a, desc, acc)                                                      \
    asm volatile(LZ_NV_WGMMA_TEXT("32", "f16", "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15", \
                                  "{%16,%17,%18,%19}", "%20", "%21", "0")                       \
                 : LZ_NV_ACC1(s, 0), LZ_NV_ACC1(s, 1), LZ_NV_ACC1(s, 2), LZ_NV_ACC1(s, 3)      \
                 : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "l"(desc), "r"(acc))

/*
 * O += P V for 64 rows x LZ_HEAD_DIM dims over 16 keys: wgmma m64nDk16 with
 * A = the probabilities from registers (pa[kk], the mma.sync A fragment of
 * lz_nv_softmax's output) and B = V from local memory "MN-major" (imm-trans-b
 * 1): V as stored, [key][dim], in 8x8 core matrices of 8 keys x 16 bytes of
 * dims (the layout of the K tile, LZ_NV_KOFF), the leading byte offset = the
 * stride along the keys, the stride byte offset = the stride along the dims
 * (bench/probe_wgmma_rs.c). o: float[LZ_HEAD_DIM / 8][4], always
 * accumulated (the online softmax rescales it in registers before the fence).
 */
#define LZ_NV_WGMMA_PV_N64(o, a, desc)                                                            \
    asm volatile(LZ_NV_WGMMA_TEXT("64", "f16",                                                    \
                                  LZ_NV_OPS8,                                                     \
                                  "{%32,%33,%34,%35}", "%36", "1", "1")                           \
                 : LZ_NV_ACC8(o, 0)                                                               \
                 : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "l"(desc))
#define LZ_NV_WGMMA_PV_N128(o, a, desc)                                                           \
    asm volatile(LZ_NV_WGMMA_TEXT("128", "f16",                                                   \
                                  LZ_NV_OPS16,                                                    \
                                  "{%64,%65,%66,%67}", "%68", "1", "1")                           \
                 : LZ_NV_ACC8(o, 0), LZ_NV_ACC8(o, 8)                                             \
                 : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "l"(desc))
#if LZ_HEAD_DIM == 128
#define LZ_NV_WGMMA_PV LZ_NV_WGMMA_PV_N128
#else
#define LZ_NV_WGMMA_PV LZ_NV_WGMMA_PV_N64
#endif
/* Descriptor of the V tile (no swizzle, MN-major) at shared address addr. */
inline ulong lz_nv_wg_vdesc(uint addr) {
    return lz_nv_wg_desc(addr, (LZ_HEAD_DIM / 8) * 128, 128);
}

/*
 * One tile of flash attention after the scores: online softmax in the exp2
 * domain over a tile of KT keys, then O += P V with V read transposed from
 * the shared tile at vb. The same step in prefill and decode.
 *   sc:     float[KT / 8][4], the raw scores of the warp's rows g and g + 8
 *           (masked ones -INFINITY)
 *   o:      float[LZ_HEAD_DIM / 8][4] accumulators
 *   m0, m1: running maxima of the two rows (log2 domain, scale applied)
 *   l0, l1: running sums; sl2 = softmax scale * log2(e)
 * Uses lane, and vb (the shared address of the V tile), from the caller.
 * LZ_NV_SOFTMAX_P is the softmax alone: it rescales o and leaves P (f16) in
 * pa, uint[KT / 16][4] mma.sync A fragments; LZ_NV_PV_MMA_OFF is the product.
 */
#define LZ_NV_SOFTMAX_P(KT, sc, o, m0, m1, l0, l1, sl2, pa)                                   \
    do {                                                                                     \
        LZ_NV_SOFTMAX_MAX(KT, sc, m0, m1, l0, l1, sl2, b0_, b1_, al0_, al1_);                \
        LZ_NV_RESCALE(o, al0_, al1_);                                                        \
        LZ_NV_SOFTMAX_EXP(KT, sc, l0, l1, sl2, b0_, b1_, pa);                                \
    } while (0)

/* The programs with the producer warpgroup (the wgmma prefill's, LZ_NV_PRODUCER;
 * the decode in the same program alike) take three choices measured faster
 * there (docs/PERFLOG.md issue 11 steps 4-11): the exponential flushed to
 * zero below 2^-126 (lz_nv_exp2), a slack of 8 on the running maximum
 * (LZ_NV_NEW_MAX) and no rescale where no maximum moved (LZ_NV_RESCALE). */
#if defined(LZ_NV_PRODUCER) && LZ_NV_PRODUCER
#define LZ_NV_WITH_PRODUCER 1
#else
#define LZ_NV_WITH_PRODUCER 0
#endif

/* 2^x for the online softmax: with the producer lz_nv_ex2_ftz (one
 * instruction; flushing results below 2^-126 to zero changes nothing a
 * softmax can see, its row maximum gives 1), else native_exp2. */
inline float lz_nv_exp2(float x) {
#if LZ_NV_WITH_PRODUCER
    return lz_nv_ex2_ftz(x);
#else
    return native_exp2(x);
#endif
}

/* The running maximum a row's probabilities are taken against (log2
 * domain). LZ_NV_MAX_SLACK 0: the exact running maximum, so every new
 * maximum rescales O and l. S > 0 (FlashAttention-4's conditional
 * rescaling): the reference moves only when a tile's maximum exceeds it by
 * more than S, so probabilities stay below 2^S (f16 and bf16 hold them, O
 * and l are f32) and most tiles leave O alone (with LZ_NV_RESCALE_SKIP, no
 * multiplies at all). Exact either way: O and l share the reference, and the
 * output is O / l. */
#if LZ_NV_WITH_PRODUCER
#define LZ_NV_MAX_SLACK 8
#else
#define LZ_NV_MAX_SLACK 0
#endif
#if LZ_NV_MAX_SLACK > 0
#define LZ_NV_NEW_MAX(m, c) ((c) > (m) + (float)LZ_NV_MAX_SLACK ? (c) : (m))
#else
#define LZ_NV_NEW_MAX(m, c) fmax(m, c)
#endif
/* The three parts of LZ_NV_SOFTMAX_P, for callers that must put something
 * (the wait for an asynchronous O += P V) between the probabilities and the
 * rescaling of O. LZ_NV_SOFTMAX_MAX declares b0, b1 (the rows' new maxima,
 * 0 for rows that saw no key yet) and al0, al1 (the factors O and l take). */
#define LZ_NV_SOFTMAX_MAX(KT, sc, m0, m1, l0, l1, sl2, b0, b1, al0, al1)                     \
    LZ_NV_SOFTMAX_MAX_FROM(KT, sc, m0, m1, l0, l1, sl2, b0, b1, al0, al1, 0)
/* The maxima a row starts from before its first key where they are to stay
 * finite: a row that saw no key yet then takes its probabilities against
 * it (exp2(-inf - LZ_NV_M_NONE) = 0, its factor exp2(0) = 1), and its first
 * key's maximum replaces it with a factor of exp2(-1e30 - b) = 0 on the
 * sums and O that are still 0: no test for -inf a round. */
#define LZ_NV_M_NONE (-1e30f)
/* LZ_NV_SOFTMAX_MAX with finite (a constant) 1 where m0 and m1 start at
 * LZ_NV_M_NONE rather than -INFINITY (b0, b1 then the maxima as they are) */
#define LZ_NV_SOFTMAX_MAX_FROM(KT, sc, m0, m1, l0, l1, sl2, b0, b1, al0, al1, finite)         \
    float b0, b1, al0, al1;                                                                  \
    do {                                                                                     \
        float mx0 = fmax(sc[0][0], sc[0][1]), mx1 = fmax(sc[0][2], sc[0][3]);                \
        _Pragma("unroll")                                                                    \
        for (int n = 1; n < (KT) / 8; n++) {                                                 \
            mx0 = fmax(mx0, fmax(sc[n][0], sc[n][1]));                                       \
            mx1 = fmax(mx1, fmax(sc[n][2], sc[n][3]));                                       \
        }                                                                                    \
        mx0 = fmax(mx0, lz_nv_xor(mx0, 1));                                                  \
        mx0 = fmax(mx0, lz_nv_xor(mx0, 2));                                                  \
        mx1 = fmax(mx1, lz_nv_xor(mx1, 1));                                                  \
        mx1 = fmax(mx1, lz_nv_xor(mx1, 2));                                                  \
        const float mn0 = LZ_NV_NEW_MAX(m0, mx0 * sl2), mn1 = LZ_NV_NEW_MAX(m1, mx1 * sl2);  \
        if (finite)                                                                          \
            b0 = mn0, b1 = mn1;                                                              \
        else                                                                                 \
            b0 = mn0 == -INFINITY ? 0.0f : mn0, b1 = mn1 == -INFINITY ? 0.0f : mn1;          \
        al0 = lz_nv_exp2(m0 - b0), al1 = lz_nv_exp2(m1 - b1);                                \
        m0 = mn0;                                                                            \
        m1 = mn1;                                                                            \
        l0 *= al0;                                                                           \
        l1 *= al1;                                                                           \
    } while (0)
/* 1 (with the producer): a thread leaves O as it is where neither of its
 * rows' maxima moved (both factors exactly 1): an exact skip, which saves
 * the multiplies where no lane of the warp needs them */
#define LZ_NV_RESCALE_SKIP LZ_NV_WITH_PRODUCER
#if LZ_NV_RESCALE_SKIP
#define LZ_NV_RESCALE_UNLESS_ONE(al0, al1) if ((al0) == 1.0f && (al1) == 1.0f) break;
#else
#define LZ_NV_RESCALE_UNLESS_ONE(al0, al1)
#endif
#define LZ_NV_RESCALE(o, al0, al1)                                                           \
    do {                                                                                     \
        LZ_NV_RESCALE_UNLESS_ONE(al0, al1)                                                   \
        _Pragma("unroll")                                                                    \
        for (int n = 0; n < LZ_HEAD_DIM / 8; n++) {                                          \
            o[n][0] *= al0, o[n][1] *= al0;                                                  \
            o[n][2] *= al1, o[n][3] *= al1;                                                  \
        }                                                                                    \
    } while (0)
/* The probabilities in place of the scores (f32), summed into l0 / l1; for
 * callers that may not write the P fragments yet: the registers of an A
 * operand stay read by an asynchronous wgmma until it completes, and in a
 * loop the next round's P is the same PTX register. LZ_NV_PACK_P then packs
 * them into pa, after the wait. */
#define LZ_NV_SOFTMAX_EXP_F32(KT, sc, l0, l1, sl2, b0, b1)                                   \
    do {                                                                                     \
        _Pragma("unroll")                                                                    \
        for (int n = 0; n < (KT) / 8; n++) {                                                 \
            sc[n][0] = lz_nv_exp2(fma(sc[n][0], sl2, -b0));                                  \
            sc[n][1] = lz_nv_exp2(fma(sc[n][1], sl2, -b0));                                  \
            sc[n][2] = lz_nv_exp2(fma(sc[n][2], sl2, -b1));                                  \
            sc[n][3] = lz_nv_exp2(fma(sc[n][3], sl2, -b1));                                  \
            l0 += sc[n][0] + sc[n][1];                                                       \
            l1 += sc[n][2] + sc[n][3];                                                       \
        }                                                                                    \
    } while (0)
#define LZ_NV_PACK_P(KT, sc, pa)                                                             \
    do {                                                                                     \
        _Pragma("unroll")                                                                    \
        for (int n = 0; n < (KT) / 8; n++) {                                                 \
            pa[n >> 1][(n & 1) * 2] = lz_nv_pack(sc[n][0], sc[n][1]);                        \
            pa[n >> 1][(n & 1) * 2 + 1] = lz_nv_pack(sc[n][2], sc[n][3]);                    \
        }                                                                                    \
    } while (0)
#define LZ_NV_SOFTMAX_EXP(KT, sc, l0, l1, sl2, b0, b1, pa)                                   \
    do {                                                                                     \
        _Pragma("unroll")                                                                    \
        for (int n = 0; n < (KT) / 8; n++) {                                                 \
            const float p0 = lz_nv_exp2(fma(sc[n][0], sl2, -b0));                            \
            const float p1 = lz_nv_exp2(fma(sc[n][1], sl2, -b0));                            \
            const float p2 = lz_nv_exp2(fma(sc[n][2], sl2, -b1));                            \
            const float p3 = lz_nv_exp2(fma(sc[n][3], sl2, -b1));                            \
            l0 += p0 + p1;                                                                   \
            l1 += p2 + p3;                                                                   \
            pa[n >> 1][(n & 1) * 2] = lz_nv_pack(p0, p1);                                    \
            pa[n >> 1][(n & 1) * 2 + 1] = lz_nv_pack(p2, p3);                                \
        }                                                                                    \
    } while (0)

/* O += P V on mma.sync, V read transposed (ldmatrix) from the tile at vb,
 * laid out OFF(row, 16-byte column) (LZ_NV_SWZ, LZ_NV_CM). */
#define LZ_NV_PV_MMA_OFF(KT, pa, o, vb, lane, OFF)                                           \
    do {                                                                                     \
        /* ---- O += P V ---- */                                                             \
        _Pragma("unroll")                                                                    \
        for (int kk = 0; kk < (KT) / 16; kk++) {                                             \
            const int vr = kk * 16 + (((lane >> 3) & 1) << 3) + (lane & 7);                  \
        _Pragma("unroll")                                                                    \
            for (int dd = 0; dd < (LZ_HEAD_DIM / 16); dd++) {                                \
                uint v0, v1, v2, v3;                                                         \
                LZ_NV_LDSM_X4_T(v0, v1, v2, v3, vb + OFF(vr, 2 * dd + (lane >> 4)));         \
                LZ_NV_MMA(o[2 * dd], pa[kk], v0, v1);                                        \
                LZ_NV_MMA(o[2 * dd + 1], pa[kk], v2, v3);                                    \
            }                                                                                \
        }                                                                                    \
    } while (0)

#define LZ_NV_SOFTMAX_PV_OFF(KT, sc, o, m0, m1, l0, l1, sl2, vb, lane, OFF)                  \
    do {                                                                                     \
        uint pa[(KT) / 16][4];                                                               \
        LZ_NV_SOFTMAX_P(KT, sc, o, m0, m1, l0, l1, sl2, pa);                                 \
        LZ_NV_PV_MMA_OFF(KT, pa, o, vb, lane, OFF);                                          \
    } while (0)

#endif
