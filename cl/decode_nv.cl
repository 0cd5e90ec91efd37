/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lazy decode, NVIDIA tensor-core path (built only with LAZYATTN_FAST_NV):
 * same arguments and semantics as lz_decode (decode.cl, the reference),
 * partials combined by the same lz_decode_reduce.
 *
 * Work-group: one warp per (split, KV head, sequence). The G query heads
 * of the KV head are the rows of one m16n8k16 A operand (rows past G are
 * zero), so each block's K and V are read once for the whole GQA group:
 * 16-byte cp.async copies into a ring of LZ_NV_DSTAGES blocks in local
 * memory (LZ_NV_DSTAGES - 1 blocks in flight per warp), then ldmatrix + mma.sync for
 * S = Q K^T and O += P V with an online softmax. The queries are re-rotated
 * by R(-delta) only when the delta changes from one entry to the next (once
 * per document), the first time while the first blocks load: in registers
 * from an unrotated f16 copy when each rotary pair sits in one lane (GPT-J,
 * full-rotary NeoX), else from the f32 originals. K and V are read as
 * stored.
 *
 * With one split (n_splits == 1) the normalised output goes straight to
 * out and the host runs no reduction.
 *
 * Needs G <= 16, f16 storage, LZ_BLOCK % 16 == 0 (the host checks).
 */
#ifndef LZ_NV_DSTAGES
#define LZ_NV_DSTAGES 4
#endif
#define LZ_NV_DDC (LZ_HEAD_DIM / 16)
#define LZ_NV_DCPR (LZ_HEAD_DIM / 8)
#define LZ_NV_DMAT (LZ_BLOCK * LZ_HEAD_DIM * 2) /* bytes of one block's K (or V) */
/* A stage's layout of a block's K and V (byte offset of row r, 16-byte
 * column c): with tiled pages the pool's own (LZ_NV_CM), so that a page is
 * copied as stored and every 128-byte line of it lands in one 128-byte
 * line of local memory; else XOR-swizzled rows (LZ_NV_SWZ). (Tiled pages
 * walked in storage order into swizzled rows, each line's 8 chunks to 8
 * rows, or in row order, each line read 32 bytes at a time, ran the decode
 * at half its speed on the H200: issue 11 step 10.) */
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
 * LZ_NV_CP_WAIT_RING counts alike every step) and moves to the next slot. */
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

__kernel void lz_decode_nv(__global const float *q, __global const int *q_pos,
                           __global const int *seq_offsets, __global const ulong *table,
                           __global const int *entry_pos, __global const ushort *kc,
                           __global const ushort *vc, __global float2 *part_ml,
                           __global float *part_acc, __global float *out,
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
    const int begin = seq_offsets[seq], end = seq_offsets[seq + 1];
    const int bad_table = begin < 0 || end < begin || end > n_table ||
                          end - begin > entries_per_split * n_splits;
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
        LZ_NV_CP_WAIT_RING(LZ_NV_DSTAGES);
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
}

/* The split-KV reduction of the fast path: as lz_decode_reduce, in one pass
 * over the splits (running max and rescaled sums), unrolled so that several
 * partial rows are in flight. One work-item per (dim, head, sequence). */
__kernel void lz_decode_nv_reduce(__global const float2 *part_ml, __global const float *part_acc,
                                  __global float *out, int n_splits, int n_q_heads, int n_seqs) {
    const int i = get_global_id(0), h = get_global_id(1), seq = get_global_id(2);
    if (i >= LZ_HEAD_DIM || h >= n_q_heads || seq >= n_seqs) return;
    const size_t base = ((size_t)seq * n_q_heads + h) * n_splits;
    float m = -INFINITY, num = 0.0f, den = 0.0f;
#pragma unroll 8
    for (int s = 0; s < n_splits; s++) {
        const float2 ml = part_ml[base + s];
        const float acc = part_acc[(base + s) * LZ_HEAD_DIM + i];
        const int use = ml.y != 0.0f; /* a split that saw no key adds nothing */
        const float mn = use ? fmax(m, ml.x) : m;
        const float a = use ? native_exp(m - mn) : 1.0f, b = use ? native_exp(ml.x - mn) : 0.0f;
        den = fma(den, a, ml.y * b);
        num = fma(num, a, acc * b);
        m = mn;
    }
    out[((size_t)seq * n_q_heads + h) * LZ_HEAD_DIM + i] = den > 0.0f ? num / den : 0.0f;
}
