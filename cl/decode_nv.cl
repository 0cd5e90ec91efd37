/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lazy decode, NVIDIA tensor-core path (built only with LAZYATTN_FAST_NV):
 * same arguments and semantics as lz_decode (decode.cl, the reference),
 * partials in its layout (combined below, not by its lz_decode_reduce).
 *
 * Work-group: one warp per (split, KV head, sequence). Each block's K and
 * V are read once for the whole GQA group of G query heads: with G <= 8
 * the block's 16 keys are the rows of the m16n8k16 products and the heads
 * their columns (LZ_NV_DSWAP_STEP, below), else the heads are the rows of
 * the A operand (rows past G zero). The blocks come by 16-byte cp.async copies
 * into a ring of LZ_NV_DSTAGES blocks in local memory (LZ_NV_DSTAGES - 1
 * blocks in flight per warp), then ldmatrix + mma.sync for S = Q K^T and
 * O += P V with an online softmax. The queries are re-rotated
 * by R(-delta) only when the delta changes from one entry to the next (once
 * per document), the first time while the first blocks load: in registers
 * from an unrotated f16 copy when each rotary pair sits in one lane (GPT-J,
 * full-rotary NeoX), else from the f32 originals. K and V are read as
 * stored.
 *
 * With one split (n_splits == 1) the normalised output goes straight to
 * out and the host runs no reduction. Else each split writes its softmax
 * state (cl/softmax_state.h) and lz_decode_nv_reduce merges them. (The
 * splits merging their own states in a tree, LZ_NV_DTREE, measured slower:
 * removed, docs/PERFLOG.md issue 11 step 15.)
 *
 * Needs G <= 16, f16 storage, LZ_BLOCK % 16 == 0 (the host checks).
 */
#ifndef LZ_NV_DSTAGES
#define LZ_NV_DSTAGES 4
#endif
/* the removed tree merge's fan-in: the host may still pass 0 */
#if defined(LZ_NV_DTREE) && LZ_NV_DTREE
#error "LZ_NV_DTREE: the splits' tree merge was removed; lz_decode_nv_reduce merges them"
#endif
#define LZ_NV_DDC (LZ_HEAD_DIM / 16)
#define LZ_NV_DCPR (LZ_HEAD_DIM / 8)
#define LZ_NV_DMAT (LZ_BLOCK * LZ_HEAD_DIM * 2) /* bytes of one block's K (or V) */
/* A stage's layout of a block's K and V (byte offset of row r, 16-byte
 * column c): with tiled pages the pool's own (LZ_NV_CM), so that a page is
 * copied as stored and every 128-byte line of it lands in one 128-byte
 * line of local memory (swizzled rows from tiled pages measured at half
 * the speed: docs/PERFLOG.md issue 11 step 10); else XOR-swizzled rows
 * (LZ_NV_SWZ). */
#if LZ_KV_TILED
#define LZ_NV_DOFF LZ_NV_CM
#else
#define LZ_NV_DOFF LZ_NV_SWZ
#endif
#if LZ_KV_TILED && LZ_NV_DCPR % 4
#error "decode_nv on tiled pages needs LZ_HEAD_DIM a multiple of 32"
#endif
/* cp.async of entry e's K and V (this KV head) into the stage at `base`. */
inline void lz_nv_dstage(uint base, int blk, int len, int kvh, int n_kv_heads,
                         __global const ushort *kc, __global const ushort *vc, int lane) {
#if LZ_KV_TILED
    /* the page in storage order: lane l copies token 8 g + l % 8 of 16-byte
     * column l / 8 + 4 q, so that a warp's 32 copies read 512 contiguous
     * bytes (four columns of 8 tokens) into 512 contiguous bytes */
    const int r = lane & 7, c0 = lane >> 3;
    const size_t page = lz_kv_offset(blk, kvh, n_kv_heads, r) + LZ_KV_DIM(c0 * 8);
#pragma unroll
    for (int g = 0; g < LZ_BLOCK / 8; g++)
#pragma unroll
        for (int q = 0; q < LZ_NV_DCPR / 4; q++) {
            const int j = 8 * g + r, ch = c0 + 4 * q, ok = j < len;
            const size_t off = ok ? page + (size_t)g * (8 * LZ_HEAD_DIM) + (size_t)q * 256 : 0;
            lz_nv_cp16(base + LZ_NV_DOFF(j, ch), kc + off, ok);
            lz_nv_cp16(base + LZ_NV_DMAT + LZ_NV_DOFF(j, ch), vc + off, ok);
        }
#else
    for (int c = lane; c < LZ_BLOCK * LZ_NV_DCPR; c += 32) {
        const int j = c / LZ_NV_DCPR, ch = c % LZ_NV_DCPR;
        const int ok = j < len;
        const size_t off = ok ? lz_kv_offset(blk, kvh, n_kv_heads, j) + ch * 8 : 0;
        lz_nv_cp16(base + LZ_NV_SWZ(j, ch), kc + off, ok);
        lz_nv_cp16(base + LZ_NV_DMAT + LZ_NV_SWZ(j, ch), vc + off, ok);
    }
#endif
}

/* Block id and valid length of a table word (length 0 for a bad entry). */
inline int2 lz_nv_dword(ulong w, int n_blocks) {
    const int blk = LAZYATTN_ENTRY_BLOCK(w), len = LAZYATTN_ENTRY_LENGTH(w);
    return (blk >= n_blocks || len > LZ_BLOCK) ? (int2)(0, 0) : (int2)(blk, len);
}

/* One step of the ring's issue side: stages entry *issue (its table word
 * in *wi, loaded a step ahead) into ring slot *s_issue while entries are
 * left, commits a cp.async group (empty at the end, so that
 * LZ_NV_CP_WAIT_PENDING counts alike every step) and moves to the next slot. */
inline void lz_nv_dissue(uint ring_base, int *issue, int last, ulong *wi, int *s_issue,
                         __global const ulong *table, int n_blocks, int kvh, int n_kv_heads,
                         __global const ushort *kc, __global const ushort *vc, int lane) {
    if (*issue < last) {
        const int2 bl = lz_nv_dword(*wi, n_blocks);
        lz_nv_dstage(ring_base + *s_issue * 2 * LZ_NV_DMAT, bl.x, bl.y, kvh, n_kv_heads, kc, vc, lane);
        ++*issue;
        *wi = *issue < last ? table[*issue] : 0;
    }
    LZ_NV_CP_COMMIT();
    *s_issue = *s_issue + 1 == LZ_NV_DSTAGES ? 0 : *s_issue + 1;
}

/* With G <= 8 each block's products take the keys as the rows of the mma
 * (FlashInfer's and TensorRT-LLM's "swap A and B" for small M): S^T = K Q^T
 * as m16n8k16 (16 keys x 8 query heads; K the A operand by ldmatrix, Q^T
 * the B operand, which is the A fragment's rows g: qf[c][0], qf[c][2]),
 * then O^T += V^T P^T (16 dims x 8 heads; V^T the A operand by
 * ldmatrix.trans, P^T's C fragment made P's B fragment by movmatrix.trans).
 * Half the mma and half the exponentials of the heads-as-rows form, whose
 * rows past G are padding (measured faster: docs/PERFLOG.md issue 11 step
 * 16). Lane (g, t4) holds the scores of keys g and g + 8 for heads 2 t4 and
 * 2 t4 + 1 (m0 / l0 and m1 / l1 are those heads' here), and O^T's dims
 * 16 mt + g (+ 8) of the same heads. */
/* the block's step with the keys as rows (the names of lz_decode_nv) */
#define LZ_NV_DSWAP_STEP(k16)                                                                     \
    do {                                                                                      \
        float st[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};                    \
        const int kr_ = (k16) + (lane & 7) + (((lane >> 3) & 1) << 3);                          \
        _Pragma("unroll")                                                                     \
        for (int c_ = 0; c_ < LZ_NV_DDC; c_++) {                                              \
            uint ka_[4];                                                                      \
            LZ_NV_LDSM_X4(ka_[0], ka_[1], ka_[2], ka_[3], kb + LZ_NV_DOFF(kr_, 2 * c_ + (lane >> 4))); \
            LZ_NV_MMA(st[c_ & 1], ka_, qf[c_][0], qf[c_][2]);                                  \
        }                                                                                     \
        float s4[4];                                                                          \
        _Pragma("unroll")                                                                     \
        for (int u_ = 0; u_ < 4; u_++) s4[u_] = st[0][u_] + st[1][u_];                        \
        if (len < LZ_BLOCK || pos0 + LZ_BLOCK - 1 > qp) {                                     \
            const int j_ = (k16) + g;                                                         \
            if (j_ >= len || pos0 + j_ > qp) s4[0] = s4[1] = -INFINITY;                       \
            if (j_ + 8 >= len || pos0 + j_ + 8 > qp) s4[2] = s4[3] = -INFINITY;               \
        }                                                                                     \
        /* each head's maximum over the block's keys (across the 8 lanes g) */                \
        float mx0 = fmax(s4[0], s4[2]), mx1 = fmax(s4[1], s4[3]);                             \
        mx0 = fmax(mx0, lz_nv_xor(mx0, 4)), mx1 = fmax(mx1, lz_nv_xor(mx1, 4));               \
        mx0 = fmax(mx0, lz_nv_xor(mx0, 8)), mx1 = fmax(mx1, lz_nv_xor(mx1, 8));               \
        mx0 = fmax(mx0, lz_nv_xor(mx0, 16)), mx1 = fmax(mx1, lz_nv_xor(mx1, 16));             \
        const float mn0 = LZ_NV_NEW_MAX(m0, mx0 * sl2), mn1 = LZ_NV_NEW_MAX(m1, mx1 * sl2);     \
        const float b0 = mn0 == -INFINITY ? 0.0f : mn0, b1 = mn1 == -INFINITY ? 0.0f : mn1;   \
        const float al0 = lz_nv_exp2(m0 - b0), al1 = lz_nv_exp2(m1 - b1);                     \
        m0 = mn0, m1 = mn1;                                                                   \
        if (!LZ_NV_RESCALE_SKIP || al0 != 1.0f || al1 != 1.0f) {                              \
            l0 *= al0, l1 *= al1;                                                             \
            _Pragma("unroll")                                                                 \
            for (int n = 0; n < LZ_NV_DDC; n++) {                                             \
                o[n][0] *= al0, o[n][1] *= al1;                                               \
                o[n][2] *= al0, o[n][3] *= al1;                                               \
            }                                                                                 \
        }                                                                                     \
        const float p0 = lz_nv_exp2(fma(s4[0], sl2, -b0)), p1 = lz_nv_exp2(fma(s4[1], sl2, -b1)); \
        const float p2 = lz_nv_exp2(fma(s4[2], sl2, -b0)), p3 = lz_nv_exp2(fma(s4[3], sl2, -b1)); \
        l0 += p0 + p2, l1 += p1 + p3;                                                         \
        const uint pb0 = lz_nv_movt(lz_nv_pack(p0, p1)), pb1 = lz_nv_movt(lz_nv_pack(p2, p3));  \
        const int vr_ = (k16) + (lane & 7) + ((lane >> 4) << 3);                              \
        _Pragma("unroll")                                                                     \
        for (int mt = 0; mt < LZ_NV_DDC; mt++) {                                              \
            uint va_[4];                                                                      \
            LZ_NV_LDSM_X4_T(va_[0], va_[1], va_[2], va_[3], vb + LZ_NV_DOFF(vr_, 2 * mt + ((lane >> 3) & 1))); \
            LZ_NV_MMA(o[mt], va_, pb0, pb1);                                                  \
        }                                                                                     \
    } while (0)

__kernel void lz_decode_nv(__global const float *q, __global const int *q_pos,
                           __global const int *seq_offsets, __global const ulong *table,
                           __global const int *entry_pos, __global const ushort *kc,
                           __global const ushort *vc, __global float2 *part_ml,
                           __global float *part_acc, __global float *out, __global int *count,
                           __global const float2 *freq,
                           __global const float *slopes, int rope_style, int rot_dim, int alibi,
                           float scale, int entries_per_split, int n_splits, int n_q_heads,
                           int n_kv_heads, int n_blocks, int n_table, __global int *err) {
    __local uchar ring[LZ_NV_DSTAGES * 2 * LZ_NV_DMAT] __attribute__((aligned(128)));
    (void)slopes;
    (void)alibi; /* ALiBi configurations take the portable path */

    const int lane = get_local_id(0);
    const int split = get_group_id(0), kvh = get_group_id(1), seq = get_group_id(2);
    const int G = n_q_heads / n_kv_heads;
    const int g = lane >> 2, t4 = lane & 3;
    const int swap = G <= 8; /* the keys as the mma's rows (G 9..16: the heads) */
    const int begin = seq_offsets[seq], end = seq_offsets[seq + 1];
    const int bad_table = LZ_SPLIT_OFFSETS_BAD(begin, end, n_table, entries_per_split * n_splits);
    if (bad_table && split == 0 && lane == 0) lz_raise(err, LZ_ERR_TABLE);
    const int first = bad_table ? 0 : begin + split * entries_per_split;
    const int last = bad_table ? 0 : min(end, first + entries_per_split);
    /* a query position outside 0..LZ_MAX_POSITION is recorded and sees no key */
    const int qp_in = q_pos[seq];
    const int bad_q = !LZ_POSITION_OK(qp_in);
    if (bad_q && split == 0 && lane == 0) lz_raise(err, LZ_ERR_QUERY_POSITION);
    const int qp = bad_q ? -1 : qp_in;

    __global const float *qg = q + ((size_t)seq * n_q_heads + kvh * G) * LZ_HEAD_DIM;
    __global const float *row0 = g < G ? qg + g * LZ_HEAD_DIM : 0;
    __global const float *row1 = g + 8 < G ? qg + (g + 8) * LZ_HEAD_DIM : 0;
    float o[LZ_HEAD_DIM / 8][4];
#pragma unroll
    for (int n = 0; n < LZ_HEAD_DIM / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    const float sl2 = scale * 1.44269504088896341f;
    const uint ring_base = LZ_NV_SMEM(ring);

    /* table words are loaded one step before they are needed (issue side
     * and compute side), so no table load sits on the critical path */
    int issue = first, s_issue = 0, s = 0;
    ulong wi = issue < last ? table[issue] : 0;
    for (int k = 0; k < LZ_NV_DSTAGES - 1; k++)
        lz_nv_dissue(ring_base, &issue, last, &wi, &s_issue, table, n_blocks, kvh, n_kv_heads, kc, vc, lane);
    ulong wc = first < last ? table[first] : 0;
    int pc = first < last ? entry_pos[first] : 0;

    /* the queries, rotated for the first entry while its K and V load; q0
     * keeps them unrotated (f16) when the rotation can be redone in
     * registers (lz_nv_pairs_in_lane) */
    uint qf[LZ_NV_DDC][4], q0[LZ_NV_DDC][4];
    const int in_lane = lz_nv_pairs_in_lane(rope_style, rot_dim);
    int cur_delta = 0;
    if (rope_style != LZ_ROPE_NONE && first < last && lz_nv_dword(wc, n_blocks).y > 0)
        cur_delta = LAZYATTN_ENTRY_DELTA(wc);
    lz_nv_load_a(q0, row0, row1, t4, 0, rope_style, rot_dim, freq);
    if (in_lane) lz_nv_rotate_a(qf, q0, t4, -cur_delta, rope_style, rot_dim, freq);
    else lz_nv_load_a(qf, row0, row1, t4, -cur_delta, rope_style, rot_dim, freq);

    for (int e = first; e < last; e++) {
        const ulong w = wc;
        const int pos0 = pc;
        if (e + 1 < last) wc = table[e + 1], pc = entry_pos[e + 1];
        LZ_NV_CP_WAIT_PENDING(LZ_NV_DSTAGES - 2); /* this step's block landed */
        barrier(CLK_LOCAL_MEM_FENCE);
        /* the slot consumed last step is free: refill it */
        lz_nv_dissue(ring_base, &issue, last, &wi, &s_issue, table, n_blocks, kvh, n_kv_heads, kc, vc, lane);

        const int blk = LAZYATTN_ENTRY_BLOCK(w), delta = LAZYATTN_ENTRY_DELTA(w);
        int len = LAZYATTN_ENTRY_LENGTH(w);
        if (blk >= n_blocks || len > LZ_BLOCK) {
            if (lane == 0) lz_raise(err, blk >= n_blocks ? LZ_ERR_BLOCK : LZ_ERR_LENGTH);
            len = 0;
        } else if (!LZ_ENTRY_POSITIONS_OK(pos0, delta, len)) { /* logical or stored start out of range */
            if (lane == 0) lz_raise(err, LZ_ERR_ENTRY_POSITION);
            len = 0;
        }
        const uint kb = ring_base + s * 2 * LZ_NV_DMAT, vb = kb + LZ_NV_DMAT;
        s = s + 1 == LZ_NV_DSTAGES ? 0 : s + 1;
        if (len == 0 || pos0 > qp) continue;
        if (rope_style != LZ_ROPE_NONE && delta != cur_delta) {
            if (in_lane) lz_nv_rotate_a(qf, q0, t4, -delta, rope_style, rot_dim, freq);
            else lz_nv_load_a(qf, row0, row1, t4, -delta, rope_style, rot_dim, freq);
            cur_delta = delta;
        }

        if (swap) {
            /* 16 keys a step (blocks of 32: two, the second where it has keys) */
#pragma unroll
            for (int k16 = 0; k16 < LZ_BLOCK; k16 += 16)
                if (k16 == 0 || (k16 < len && pos0 + k16 <= qp)) LZ_NV_DSWAP_STEP(k16);
            continue;
        }
        /* ---- S = Q K^T over the block's keys ---- */
        float sc[LZ_BLOCK / 8][4];
#pragma unroll
        for (int p = 0; p < LZ_BLOCK / 16; p++) LZ_NV_QK16_OFF(sc[2 * p], sc[2 * p + 1], qf, kb, p * 16, lane, LZ_NV_DOFF);
        if (len < LZ_BLOCK || pos0 + LZ_BLOCK - 1 > qp) {
#pragma unroll
            for (int n = 0; n < LZ_BLOCK / 8; n++)
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int j = n * 8 + 2 * t4 + u;
                    if (j >= len || pos0 + j > qp) sc[n][u] = sc[n][2 + u] = -INFINITY;
                }
        }

        /* ---- online softmax (exp2 domain) ---- */
        LZ_NV_SOFTMAX_PV_OFF(LZ_BLOCK, sc, o, m0, m1, l0, l1, sl2, vb, lane, LZ_NV_DOFF);
    }
    LZ_NV_CP_WAIT(0);

    if (swap) {
        /* heads 2 t4 and 2 t4 + 1: sums over the 8 lanes g; O^T's dims
         * 16 mt + g and + 8 */
#pragma unroll
        for (int x = 4; x < 32; x *= 2) l0 += lz_nv_xor(l0, x), l1 += lz_nv_xor(l1, x);
        const float ln2 = 0.693147180559945309f;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int hh = 2 * t4 + u;
            if (hh >= G) continue;
            const float l = u ? l1 : l0, mm = u ? m1 : m0;
            const size_t row = (size_t)seq * n_q_heads + kvh * G + hh;
            const float sc = n_splits == 1 ? (l > 0.0f ? 1.0f / l : 0.0f) : 1.0f;
            __global float *dst = n_splits == 1 ? out + row * LZ_HEAD_DIM : part_acc + (row * n_splits + split) * LZ_HEAD_DIM;
            if (n_splits > 1 && g == 0) part_ml[row * n_splits + split] = (float2)(mm * ln2, l);
#pragma unroll
            for (int mt = 0; mt < LZ_NV_DDC; mt++) {
                dst[16 * mt + g] = o[mt][u] * sc;
                dst[16 * mt + g + 8] = o[mt][2 + u] * sc;
            }
        }
        return;
    }
    l0 += lz_nv_xor(l0, 1);
    l0 += lz_nv_xor(l0, 2);
    l1 += lz_nv_xor(l1, 1);
    l1 += lz_nv_xor(l1, 2);
    if (n_splits == 1) { /* one split: the output itself, no reduction */
        const float i0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, i1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
        __global float *dst = out + ((size_t)seq * n_q_heads + kvh * G + g) * LZ_HEAD_DIM + 2 * t4;
        if (g < G)
#pragma unroll
            for (int n = 0; n < LZ_HEAD_DIM / 8; n++) vstore2((float2)(o[n][0] * i0, o[n][1] * i0), 0, dst + n * 8);
        dst += 8 * LZ_HEAD_DIM;
        if (g + 8 < G)
#pragma unroll
            for (int n = 0; n < LZ_HEAD_DIM / 8; n++) vstore2((float2)(o[n][2] * i1, o[n][3] * i1), 0, dst + n * 8);
        return;
    }
    /* partials in the portable layout: (max in natural-log units, sum), acc */
    const float ln2 = 0.693147180559945309f;
    if (g < G) {
        const size_t part = ((size_t)seq * n_q_heads + kvh * G + g) * n_splits + split;
        if (t4 == 0) part_ml[part] = (float2)(m0 * ln2, l0);
        __global float *dst = part_acc + part * LZ_HEAD_DIM + 2 * t4;
#pragma unroll
        for (int n = 0; n < LZ_HEAD_DIM / 8; n++) vstore2((float2)(o[n][0], o[n][1]), 0, dst + n * 8);
    }
    if (g + 8 < G) {
        const size_t part = ((size_t)seq * n_q_heads + kvh * G + g + 8) * n_splits + split;
        if (t4 == 0) part_ml[part] = (float2)(m1 * ln2, l1);
        __global float *dst = part_acc + part * LZ_HEAD_DIM + 2 * t4;
#pragma unroll
        for (int n = 0; n < LZ_HEAD_DIM / 8; n++) vstore2((float2)(o[n][2], o[n][3]), 0, dst + n * 8);
    }
    (void)count; /* the removed tree merge's counts: the host still passes them */
}

/* The split-KV reduction of the fast path: a work-group of LZ_NV_RT
 * threads per (head, sequence), all the splits read at once: thread t
 * takes float4 column t % (D / 4) of splits t / (D / 4), + LZ_NV_RS, ..
 * (eight loads in flight a thread) and merges their states
 * (cl/softmax_state.h), then the first D / 4 threads merge the LZ_NV_RS
 * threads' states of their column through local memory. (A work-item per
 * (dim, head) walking the splits in series paid one L2 round trip every 8
 * splits.) */
#ifndef LZ_NV_RT
#define LZ_NV_RT 256
#endif
#define LZ_NV_RC (LZ_HEAD_DIM / 4)
#define LZ_NV_RS (LZ_NV_RT / LZ_NV_RC)
#if LZ_NV_RT % LZ_NV_RC
#error "LZ_NV_RT must be a multiple of LZ_HEAD_DIM / 4"
#endif
__kernel __attribute__((reqd_work_group_size(LZ_NV_RT, 1, 1)))
void lz_decode_nv_reduce(__global const float2 *part_ml, __global const float *part_acc,
                         __global float *out, int n_splits, int n_q_heads, int n_seqs) {
    __local float4 num_l[LZ_NV_RT];
    __local float2 ml_l[LZ_NV_RS];
    const int t = get_local_id(0), c = t % LZ_NV_RC, r = t / LZ_NV_RC;
    const int h = get_group_id(1), seq = get_group_id(2);
    if (h >= n_q_heads || seq >= n_seqs) return; /* the whole work-group: no barrier reached */
    const size_t base = ((size_t)seq * n_q_heads + h) * n_splits;
    float m = -INFINITY, den = 0.0f;
    float4 num = (float4)(0.0f);
    for (int s0 = r; s0 < n_splits; s0 += 8 * LZ_NV_RS) {
        float2 ml[8];
        float4 acc[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int s = s0 + k * LZ_NV_RS;
            ml[k] = s < n_splits ? part_ml[base + s] : (float2)(-INFINITY, 0.0f);
            acc[k] = s < n_splits ? vload4(c, part_acc + (base + s) * LZ_HEAD_DIM) : (float4)(0.0f);
        }
        LZ_STATE_MERGE(m, den, num, float4, 8, ml, acc, 1, 0, 1);
    }
    if (c == 0) ml_l[r] = (float2)(m, den);
    num_l[t] = num;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (r == 0) {
        float mx = -INFINITY, d = 0.0f;
        float4 n = (float4)(0.0f);
        LZ_STATE_MERGE_LOOP(mx, d, n, float4, LZ_NV_RS, ml_l, num_l, LZ_NV_RC, c, 1);
        vstore4(d > 0.0f ? n / d : (float4)(0.0f), c, out + ((size_t)seq * n_q_heads + h) * LZ_HEAD_DIM);
    }
}
