/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lazy decode, portable path: one query token per sequence, split along the
 * KV length; lz_decode_reduce combines the splits.
 *
 * Work-group: one (split, KV head x head subset, sequence): LZ_FWG
 * work-items for LZ_FR of the LZ_G query heads of the KV head (LZ_FR
 * divides LZ_G), so each K/V row read from global memory serves all of
 * them. K and V are read straight from global memory into registers, never
 * staged in local memory. The split is walked in chunks: up to LZ_DCE
 * consecutive entries that share one delta (so one rotation of the query,
 * by -delta, serves the chunk; once per document):
 *   1. scores: each work-item owns whole keys (slot lid, lid + LZ_FWG, ...),
 *      loads its K row with 16-byte vector loads (all of a row's loads
 *      issued before use), and computes the LZ_FR scores in registers
 *      against the rotated query in local memory; future or invalid keys
 *      are not loaded (score -inf);
 *   2. the chunk's maxima per row through local memory (partial maxima,
 *      then one work-item per row), the rescale factor of the running sums;
 *   3. the probabilities, one per work-item;
 *   4. output: LZ_KG key groups of LZ_NVO work-items, each owning LZ_FON
 *      dims of a V row (a key group reads whole rows, coalesced), walk the
 *      chunk's keys (key group g: slots g, g + LZ_KG, ...) and accumulate
 *      the LZ_FR rows' outputs in registers.
 * At the end the key groups' sums are added through local memory, one row
 * at a time, and written as the split's partial.
 *
 * Tile parameters (-D, from lib/tuning.c; the host checks the local memory):
 *   LZ_G   query heads per KV head      LZ_FR  heads per work-group (divides LZ_G)
 *   LZ_FTK key slots per chunk (at least one block is always taken)
 *   LZ_FWG work-items per group         LZ_FON dims per work-item in step 4 (multiple of 4)
 *   LZ_FRN (LZ_VU) V rows loaded at once per work-item in step 4
 *   LZ_DPF (the tile's prefetch) L2 prefetch of rows a phase ahead (no
 *          registers held): 2 none; 1 this chunk's V rows in step 1 and the
 *          next chunk's K rows in step 4, with OpenCL's prefetch(); 3 the
 *          same with PTX prefetch.global.L2 where the compiler defines
 *          cl_nv_pragma_unroll (NVIDIA; prefetch() elsewhere); 4 only the
 *          V rows, 5 only the next K rows (both as 3). NVIDIA's compiler
 *          drops prefetch() (no instruction in its PTX), and its PTX prefetch
 *          measured slower on the H200 (docs/PERFLOG.md, p7-decode call 3)
 *   LZ_DRING (the tile's kv_together 1) a ring of two V batches in step 4:
 *          batch j + 1's loads issued before batch j is computed
 *   LZ_FRM (the tile's score_rows, unused by the scores otherwise) step 1's
 *          K pipeline, LZ_DKH parts per K row x LZ_DKS stages in flight x
 *          LZ_DKP keys per pass (a pass scores LZ_DKP keys against one read
 *          of the query): 1 = (1,1,1), p7's loop (a whole row issued, then
 *          used); 2 = (2,2,1) half rows, the next half issued before the
 *          current one is used; 3 = (4,2,1); 4 = (4,4,1); 5 = (4,2,2);
 *          6 = (2,1,2); 7 = (2,3,1); 8 = (4,3,1); 9 = (8,4,1); 10 = (4,1,4);
 *          11 = (2,1,2); 12 = (8,1,4); 13 = (8,1,8) (10..13 convert and
 *          score 4 dims of the pass's keys at a time: fewer registers). The
 *          ring runs across the work-item's keys of the chunk (no barrier
 *          inside)
 *   LZ_FOM (the tile's out_rows) 1 + 1 if step 4's output sums live in
 *          local memory outside step 4 (fewer registers in step 1) + 2 if
 *          the scores and probabilities are key-major (step 4 reads a key's
 *          LZ_FR probabilities as float4s, not LZ_FR scalars)
 *
 * Race freedom: the chunk loop is uniform (every work-item computes the same
 * chunk bounds from the same table words in local memory), every barrier is
 * reached by every work-item, and no `continue`/`break` skips one (the PoCL
 * 3.1 miscompile, see cl/flash.h). Each local buffer is written and read in
 * phases separated by barriers.
 *   q:           [n_seqs, n_q_heads, LZ_HEAD_DIM] q_dtype (0 f32, 1 f16, 2 bf16,
 *                lz_io_load4), rotated at q_pos
 *   seq_offsets: [n_seqs + 1]; table, entry_pos: [seq_offsets[n_seqs]]
 *   part_ml:     [n_seqs, n_q_heads, n_splits] (running max, sum)
 *   part_acc:    [n_seqs, n_q_heads, n_splits, LZ_HEAD_DIM] unnormalised
 */
#ifndef LZ_G
#define LZ_G 1
#endif
#ifndef LZ_FR
#define LZ_FR LZ_G
#endif
#ifndef LZ_FTK
#define LZ_FTK 256
#endif
#ifndef LZ_FWG
#define LZ_FWG 128
#endif
#ifndef LZ_FON
#define LZ_FON 8
#endif
/* entries per chunk and key slots per chunk (whole blocks) */
#define LZ_DCE (LZ_FTK >= LZ_BLOCK ? LZ_FTK / LZ_BLOCK : 1)
#define LZ_DS (LZ_DCE * LZ_BLOCK)
/* step 1: key slots per work-item; K rows in pieces of at most 16 chunks of 8 dims */
#define LZ_KPI ((LZ_DS + LZ_FWG - 1) / LZ_FWG)
#define LZ_NC8 (LZ_HEAD_DIM / 8)
#define LZ_KPC (LZ_NC8 < 16 ? LZ_NC8 : 16)
#define LZ_NPC ((LZ_NC8 + LZ_KPC - 1) / LZ_KPC)
/* step 2: partial maxima per row */
#define LZ_RP (LZ_FWG / LZ_FR >= 32 ? 32 : (LZ_FWG / LZ_FR >= 1 ? LZ_FWG / LZ_FR : 1))
/* step 4: dim chunks per row, key groups, dim chunks per work-item */
#define LZ_NVO (LZ_HEAD_DIM / LZ_FON)
#define LZ_KG (LZ_FWG >= LZ_NVO ? LZ_FWG / LZ_NVO : 1)
#define LZ_VPI (LZ_FWG >= LZ_NVO ? 1 : (LZ_NVO + LZ_FWG - 1) / LZ_FWG)
#define LZ_VKI ((LZ_DS + LZ_KG - 1) / LZ_KG) /* key slots per key group */
#ifndef LZ_VU /* V rows loaded at once per work-item in step 4 (the tile's score_keys) */
#ifdef LZ_FRN
#define LZ_VU LZ_FRN
#else
#define LZ_VU 4
#endif
#endif
#ifndef LZ_DPF
#define LZ_DPF 2
#endif
#define LZ_PF_V (LZ_DPF == 1 || LZ_DPF == 3 || LZ_DPF == 4)
#define LZ_PF_K (LZ_DPF == 1 || LZ_DPF == 3 || LZ_DPF == 5)
#ifndef LZ_DRING
#define LZ_DRING 0
#endif
/* step 1's K pipeline (LZ_FRM): parts per row, stages in flight, keys per pass */
#ifndef LZ_FRM
#define LZ_FRM 1
#endif
#if LZ_FRM == 2
#define LZ_DKH 2
#define LZ_DKS 2
#define LZ_DKP 1
#elif LZ_FRM == 3
#define LZ_DKH 4
#define LZ_DKS 2
#define LZ_DKP 1
#elif LZ_FRM == 4
#define LZ_DKH 4
#define LZ_DKS 4
#define LZ_DKP 1
#elif LZ_FRM == 5
#define LZ_DKH 4
#define LZ_DKS 2
#define LZ_DKP 2
#elif LZ_FRM == 6
#define LZ_DKH 2
#define LZ_DKS 1
#define LZ_DKP 2
#elif LZ_FRM == 7
#define LZ_DKH 2
#define LZ_DKS 3
#define LZ_DKP 1
#elif LZ_FRM == 8
#define LZ_DKH 4
#define LZ_DKS 3
#define LZ_DKP 1
#elif LZ_FRM == 9
#define LZ_DKH 8
#define LZ_DKS 4
#define LZ_DKP 1
#elif LZ_FRM == 10
#define LZ_DKH 4
#define LZ_DKS 1
#define LZ_DKP 4
#define LZ_DKO 1
#elif LZ_FRM == 11
#define LZ_DKH 2
#define LZ_DKS 1
#define LZ_DKP 2
#define LZ_DKO 1
#elif LZ_FRM == 12
#define LZ_DKH 8
#define LZ_DKS 1
#define LZ_DKP 4
#define LZ_DKO 1
#elif LZ_FRM == 13
#define LZ_DKH 8
#define LZ_DKS 1
#define LZ_DKP 8
#define LZ_DKO 1
#else
#define LZ_DKH 1
#define LZ_DKS 1
#define LZ_DKP 1
#endif
#ifndef LZ_DKO /* 1: a pass's keys scored 4 dims at a time (fewer registers at 4 or 8 keys) */
#define LZ_DKO 0
#endif
#define LZ_KRING (LZ_DKH > 1 || LZ_DKS > 1 || LZ_DKP > 1) /* else p7's loop */
/* chunks of 8 dims per stage and key (16 / LZ_DKH at d 128; at most that at
 * any head_dim, so a stage's registers do not grow with it), parts per key */
#define LZ_SCM (16 / LZ_DKH)
#define LZ_SC8 (LZ_NC8 < LZ_SCM ? LZ_NC8 : LZ_SCM)
#define LZ_KH ((LZ_NC8 + LZ_SC8 - 1) / LZ_SC8)
/* passes (LZ_DKP keys each) per work-item, rounded up to whole loop bodies
 * of LZ_KUJ passes (a body's stages a multiple of LZ_DKS: constant ring
 * indices, no register moves of loads in flight) */
#define LZ_KUJ (LZ_KH % LZ_DKS == 0 ? 1 : LZ_DKS)
#define LZ_KPP ((LZ_KPI + LZ_DKP - 1) / LZ_DKP)
#define LZ_KPR ((LZ_KPP + LZ_KUJ - 1) / LZ_KUJ * LZ_KUJ)
#define LZ_BST (LZ_KUJ * LZ_KH)  /* stages per loop body */
#define LZ_NST (LZ_KPR * LZ_KH)  /* stages in all */
#ifndef LZ_FOM
#define LZ_FOM 1
#endif
#define LZ_ACCL (((LZ_FOM - 1) & 1) != 0) /* output sums in local memory outside step 4 */
#define LZ_SKM (((LZ_FOM - 1) & 2) != 0)  /* scores and probabilities key-major */
/* slot kk's score of row r in sc: head-major [LZ_FR][LZ_DS] or key-major
 * [LZ_DS][LZ_FR] (step 4 then reads a key's rows as float4s) */
#if LZ_SKM
#define LZ_SCI(r, kk) ((kk) * LZ_FR + (r))
#else
#define LZ_SCI(r, kk) ((r) * LZ_DS + (kk))
#endif
#define LZ_Q4 (LZ_HEAD_DIM / 4)
#define LZ_TPI ((LZ_DCE + LZ_FWG - 1) / LZ_FWG) /* table words per work-item */

/* Element offset of key slot kk of the chunk (entries tab[0 .. ne)), or -1
 * when the slot holds no visible key (past the chunk, past the entry's
 * valid length, a skipped entry, or after the query position qp). */
inline long lz_dec_slot(__local const ulong *tab, __local const int *tpos, int kk, int ne, int qp,
                        int kvh, int n_kv_heads, int n_blocks) {
    const int ei = kk / LZ_BLOCK, tok = kk % LZ_BLOCK;
    if (ei >= ne) return -1;
    const ulong w = tab[ei];
    const int pos0 = tpos[ei];
    if (lz_entry_bad(w, pos0, n_blocks) || tok >= LAZYATTN_ENTRY_LENGTH(w) || pos0 + tok > qp)
        return -1;
    return (long)lz_kv_offset(LAZYATTN_ENTRY_BLOCK(w), kvh, n_kv_heads, tok);
}

#if LZ_FON % 8 == 0
#define LZ_VSTEP 8
#define LZ_VX_T LZ_RAW8_T
#define LZ_VLOAD(o) lz_raw8(vc, o)
#define LZ_VZERO ((LZ_RAW8_T)(0))
#else
#define LZ_VSTEP 4
#define LZ_VX_T float4
#define LZ_VLOAD(o) lz_load4v(vc, o)
#define LZ_VZERO ((float4)(0.0f))
#endif
#define LZ_NVC (LZ_FON / LZ_VSTEP)

/* An L2 prefetch of n elements from p (a hint: never faults, holds no
 * register). LZ_DPF 3..5 on NVIDIA: one prefetch.global.L2 per 128-byte
 * line; elsewhere (and LZ_DPF 1) OpenCL's prefetch(). */
#if LZ_PF_V || LZ_PF_K
inline void lz_dec_prefetch(__global const LZ_STORE_T *p, int n) {
#if LZ_DPF >= 3 && defined(cl_nv_pragma_unroll) && !defined(LZ_NO_ASM)
    __global const uchar *b = (__global const uchar *)p;
    const int bytes = n * (int)sizeof(LZ_STORE_T) + (int)((ulong)b & 127);
    b -= (ulong)b & 127;
    for (int i = 0; i < bytes; i += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(b + i));
#else
    /* as bytes: every OpenCL C has prefetch() for uchar, not all for half */
    prefetch((__global const uchar *)p, (size_t)n * sizeof(LZ_STORE_T));
#endif
}
#endif

/* Step 4's loads of V batch j0 of key group kg: the slots' offsets and
 * every row piece of the batch (issued before any is used). */
inline void lz_dec_vbatch(long off[LZ_VU], LZ_VX_T x[LZ_VPI][LZ_NVC][LZ_VU], __local const long *soff,
                          __global const LZ_STORE_T *vc, int kg, int lid, int j0) {
#pragma unroll
    for (int u = 0; u < LZ_VU; u++) {
        const int kk = kg + (j0 + u) * LZ_KG;
        off[u] = kk < LZ_DS ? soff[kk] : -1;
    }
#pragma unroll
    for (int i = 0; i < LZ_VPI; i++) {
        const int vo = LZ_FWG >= LZ_NVO ? lid % LZ_NVO : lid + i * LZ_FWG;
#pragma unroll
        for (int c = 0; c < LZ_NVC; c++)
#pragma unroll
            for (int u = 0; u < LZ_VU; u++)
                x[i][c][u] = off[u] >= 0 && vo < LZ_NVO ? LZ_VLOAD(off[u] + LZ_KV_DIM(vo * LZ_FON + c * LZ_VSTEP)) : LZ_VZERO;
    }
}

#if LZ_KRING
/* A value computed by this point (an empty volatile asm that uses it, on
 * NVIDIA's compiler; nothing elsewhere). */
#if defined(cl_nv_pragma_unroll) && !defined(LZ_NO_ASM)
#define LZ_DEC_KEEP(x) asm volatile("" ::"f"(x))
#else
#define LZ_DEC_KEEP(x) ((void)0)
#endif

/* Half h (elements 4h .. 4h + 3) of 8 stored elements as floats. */
inline float4 lz_dec_cvt4(LZ_RAW8_T x, int h) {
#if LZ_DTYPE == 0
    return h ? x.hi : x.lo;
#else
    return h ? lz_cvt4(x.z, x.w) : lz_cvt4(x.x, x.y);
#endif
}

/* Step 1's loads of stage (pass j, part p): the offsets of the pass's keys
 * (from the table at part 0, then kept in soff; from soff at later parts)
 * and every row piece of the part (issued before any is used). Always
 * inlined: x must stay in registers (not inlined at 8 keys a pass). */
__attribute__((always_inline)) inline void
lz_dec_kstage(LZ_RAW8_T x[LZ_DKP][LZ_SC8], int j, int p, __local const ulong *tab, __local const int *tpos,
              __local long *soff, __global const LZ_STORE_T *kc, __global const LZ_STORE_T *vc, int lid, int ne,
              int qp, int kvh, int n_kv_heads, int n_blocks) {
#pragma unroll
    for (int u = 0; u < LZ_DKP; u++) {
        const int kk = lid + (j * LZ_DKP + u) * LZ_FWG;
        long off = -1;
        if (kk < LZ_DS) {
            if (p == 0) {
                off = lz_dec_slot(tab, tpos, kk, ne, qp, kvh, n_kv_heads, n_blocks);
                soff[kk] = off;
#if LZ_PF_V
                if (off >= 0) lz_dec_prefetch(vc + off, LZ_HEAD_DIM); /* step 4's V row, to L2 */
#endif
            } else {
                off = soff[kk];
            }
        }
#pragma unroll
        for (int c = 0; c < LZ_SC8; c++) {
            const int cc = p * LZ_SC8 + c;
            x[u][c] = off >= 0 && cc < LZ_NC8 ? lz_raw8(kc, off + LZ_KV_DIM(cc * 8)) : (LZ_RAW8_T)(0);
        }
    }
}
#endif

#if LZ_ACCL
/* The output sums of step 4 to (to_local) or from the work-item's slots in
 * local memory (LZ_FOM 2: no registers held for them in steps 1-3). */
inline void lz_dec_acc_move(int to_local, float4 acc[LZ_VPI][LZ_FR][LZ_FON / 4], float l[LZ_FR],
                            __local float4 *acc_l, __local float *l_l, int lid) {
#pragma unroll
    for (int r = 0; r < LZ_FR; r++) {
        if (to_local) l_l[r * LZ_FWG + lid] = l[r];
        else l[r] = l_l[r * LZ_FWG + lid];
#pragma unroll
        for (int i = 0; i < LZ_VPI; i++)
#pragma unroll
            for (int c = 0; c < LZ_FON / 4; c++) {
                const int k = ((i * LZ_FR + r) * (LZ_FON / 4) + c) * LZ_FWG + lid;
                if (to_local) acc_l[k] = acc[i][r][c];
                else acc[i][r][c] = acc_l[k];
            }
    }
}
#endif

/* Step 4's probabilities of slot kk, 0 where the slot holds no key:
 * LZ_FR floats, read key-major as float4s. */
#if LZ_SKM
inline void lz_dec_probs(float pb[LZ_FR], __local const float4 *sc4, int kk, int valid) {
#if LZ_FR % 4 == 0
#pragma unroll
    for (int r4 = 0; r4 < LZ_FR / 4; r4++) {
        const float4 v = valid ? sc4[kk * (LZ_FR / 4) + r4] : (float4)(0.0f);
        pb[4 * r4] = v.x;
        pb[4 * r4 + 1] = v.y;
        pb[4 * r4 + 2] = v.z;
        pb[4 * r4 + 3] = v.w;
    }
#else
    __local const float *sc = (__local const float *)sc4;
#pragma unroll
    for (int r = 0; r < LZ_FR; r++) {
        pb[r] = valid ? sc[LZ_SCI(r, kk)] : 0.0f;
    }
#endif
}
#endif

/* The arguments of the split decodes lz_decode and lz_decode_warp
 * (cl/decode_warp.cl, in this program), as lib/attn/decode_launch.c sets
 * them; their shapes in the head of this file. */
#define LZ_DECODE_PARAMS                                                                            \
    __global const float *q, __global const int *q_pos, __global const int *seq_offsets,            \
        __global const ulong *table, __global const int *entry_pos, __global const LZ_STORE_T *kc, \
        __global const LZ_STORE_T *vc, __global float2 *part_ml, __global float *part_acc,         \
        __global const float2 *freq, __global const float *slopes, int rope_style, int rot_dim,    \
        int alibi, float scale, int entries_per_split, int n_splits, int n_q_heads, int n_kv_heads, \
        int n_blocks, int n_table, __global int *err, int q_dtype

__kernel void lz_decode(LZ_DECODE_PARAMS) {
    __local float4 q_l[LZ_FR * LZ_Q4];   /* the rows' query, rotated by -cur_delta */
    __local float4 q0_l[LZ_FR * LZ_Q4];  /* the rows' query as given */
    __local long soff[LZ_DS];            /* element offset of each visible key slot, -1 if none */
#if LZ_SKM
    __local float4 sc4[(LZ_FR * LZ_DS + 3) / 4]; /* scores, then probabilities (LZ_SCI) */
    __local float *sc = (__local float *)sc4;
#else
    __local float sc[LZ_FR * LZ_DS]; /* scores, then probabilities */
#endif
    __local float red[LZ_FR * LZ_RP];    /* partial maxima */
    __local float m_row[LZ_FR], a_row[LZ_FR];
    __local float comb[LZ_KG * LZ_HEAD_DIM]; /* the key groups' sums of one row */
    __local float comb_l[LZ_KG];
    __local ulong tab[LZ_DCE];
    __local int tpos[LZ_DCE];
    __local int qp_l;
#if LZ_ACCL /* the output sums between step 4s, each work-item its own slots */
    __local float4 acc_l[LZ_VPI * LZ_FR * (LZ_FON / 4) * LZ_FWG];
    __local float l_l[LZ_FR * LZ_FWG];
#endif

    const int lid = get_local_id(0);
    const int split = get_group_id(0), seq = get_group_id(2);
    const int kvh = get_group_id(1) / (LZ_G / LZ_FR), h0 = kvh * LZ_G + get_group_id(1) % (LZ_G / LZ_FR) * LZ_FR;
    const int begin = seq_offsets[seq], end = seq_offsets[seq + 1];
    const int bad_table = LZ_SPLIT_OFFSETS_BAD(begin, end, n_table, entries_per_split * n_splits);
    if (bad_table && split == 0 && lid == 0 && h0 == kvh * LZ_G) lz_raise(err, LZ_ERR_TABLE);
    const int first = bad_table ? 0 : begin + split * entries_per_split;
    const int last = bad_table ? 0 : min(end, first + entries_per_split);

    /* the query at delta 0, the running maxima, the query position */
    for (int i = lid; i < LZ_FR * LZ_Q4; i += LZ_FWG)
        q_l[i] = q0_l[i] = lz_io_load4(q, ((size_t)seq * n_q_heads + h0 + i / LZ_Q4) * LZ_HEAD_DIM + 4 * (i % LZ_Q4), q_dtype);
    for (int r = lid; r < LZ_FR; r += LZ_FWG) m_row[r] = -INFINITY;
    if (lid == 0) {
        int qp = q_pos[seq];
        if (!LZ_POSITION_OK(qp)) { /* recorded; the query sees no key */
            if (split == 0 && h0 == kvh * LZ_G) lz_raise(err, LZ_ERR_QUERY_POSITION);
            qp = -1;
        }
        qp_l = qp;
    }

    /* step 4's place: key group kg, dim chunks vo[i] of LZ_FON dims */
    const int kg = LZ_FWG >= LZ_NVO ? lid / LZ_NVO : 0;
    float4 acc[LZ_VPI][LZ_FR][LZ_FON / 4];
    float l[LZ_FR];
#pragma unroll
    for (int r = 0; r < LZ_FR; r++) {
        l[r] = 0.0f;
#pragma unroll
        for (int i = 0; i < LZ_VPI; i++)
#pragma unroll
            for (int c = 0; c < LZ_FON / 4; c++) acc[i][r][c] = (float4)(0.0f);
    }
#if LZ_ACCL
    lz_dec_acc_move(1, acc, l, acc_l, l_l, lid);
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    const int qp = qp_l;
    int cur_delta = 0;

    /* the table words of the next chunk, loaded one chunk ahead into registers */
    ulong nw[LZ_TPI];
    int np[LZ_TPI];
    int e = first;
#pragma unroll
    for (int t = 0; t < LZ_TPI; t++) {
        const int i = lid + t * LZ_FWG;
        nw[t] = 0, np[t] = 0;
        if (i < LZ_DCE && e + i < last) nw[t] = table[e + i], np[t] = entry_pos[e + i];
    }
    while (e < last) { /* uniform: e and last are the same in every work-item */
#pragma unroll
        for (int t = 0; t < LZ_TPI; t++) {
            const int i = lid + t * LZ_FWG;
            if (i < LZ_DCE) tab[i] = nw[t], tpos[i] = np[t];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const int delta = LAZYATTN_ENTRY_DELTA(tab[0]);
        int ne = 1;
        while (ne < LZ_DCE && e + ne < last && LAZYATTN_ENTRY_DELTA(tab[ne]) == delta) ne++;
#pragma unroll
        for (int t = 0; t < LZ_TPI; t++) { /* the next chunk's words, in flight during this one */
            const int i = lid + t * LZ_FWG;
            if (i < LZ_DCE && e + ne + i < last) nw[t] = table[e + ne + i], np[t] = entry_pos[e + ne + i];
        }
        for (int i = lid; i < ne; i += LZ_FWG) lz_check_entry(tab[i], tpos[i], n_blocks, err);
        if (rope_style != LZ_ROPE_NONE && delta != cur_delta) {
            __local float *qf = (__local float *)q_l;
            for (int i = lid; i < LZ_FR * (LZ_HEAD_DIM / 2); i += LZ_FWG) {
                const int r = i / (LZ_HEAD_DIM / 2), pr = i % (LZ_HEAD_DIM / 2);
                const int2 d = lz_rope_pair(pr, rope_style, rot_dim);
                __local const float *qr = (__local const float *)q0_l + r * LZ_HEAD_DIM;
                const float2 x =
                    lz_rotate((float2)(qr[d.x], qr[d.y]), lz_rope_cs(-delta, pr, rope_style, rot_dim, freq));
                qf[r * LZ_HEAD_DIM + d.x] = x.x;
                qf[r * LZ_HEAD_DIM + d.y] = x.y;
            }
        }
        cur_delta = delta;
        barrier(CLK_LOCAL_MEM_FENCE);

        /* 1. scores of the work-item's keys, K rows straight from global memory */
        /* volatile: the query is read from local memory for every key (a
         * broadcast), never hoisted out of this loop into registers */
        __local volatile const float4 *qv = q_l;
#if LZ_KRING
        {
            /* a ring of LZ_DKS stages (LZ_DKP keys x one part of their rows):
             * stage t + LZ_DKS - 1 issued before stage t is used */
            LZ_RAW8_T kb[LZ_DKS][LZ_DKP][LZ_SC8];
            float s[LZ_DKP][LZ_FR];
#pragma unroll
            for (int t = 0; t < LZ_DKS - 1; t++)
                if (t < LZ_NST)
                    lz_dec_kstage(kb[t], t / LZ_KH, t % LZ_KH, tab, tpos, soff, kc, vc, lid, ne, qp, kvh,
                                  n_kv_heads, n_blocks);
#pragma unroll 1
            for (int jb = 0; jb < LZ_KPR / LZ_KUJ; jb++) {
#pragma unroll
                for (int i = 0; i < LZ_BST; i++) {
                    if (jb * LZ_BST + i + LZ_DKS - 1 < LZ_NST)
                        lz_dec_kstage(kb[(i + LZ_DKS - 1) % LZ_DKS], jb * LZ_KUJ + (i + LZ_DKS - 1) / LZ_KH,
                                      (i + LZ_DKS - 1) % LZ_KH, tab, tpos, soff, kc, vc, lid, ne, qp, kvh,
                                      n_kv_heads, n_blocks);
                    const int p = i % LZ_KH, j = jb * LZ_KUJ + i / LZ_KH;
                    if (p == 0)
#pragma unroll
                        for (int u = 0; u < LZ_DKP; u++)
#pragma unroll
                            for (int r = 0; r < LZ_FR; r++) s[u][r] = 0.0f;
#pragma unroll
                    for (int c = 0; c < LZ_SC8; c++) {
                        const int cc = p * LZ_SC8 + c;
#if LZ_DKO
                        if (cc < LZ_NC8)
#pragma unroll
                            for (int h = 0; h < 2; h++) {
                                float4 xh[LZ_DKP];
#pragma unroll
                                for (int u = 0; u < LZ_DKP; u++) xh[u] = lz_dec_cvt4(kb[i % LZ_DKS][u][c], h);
#pragma unroll
                                for (int r = 0; r < LZ_FR; r++) {
                                    const float4 a = qv[r * LZ_Q4 + 2 * cc + h];
#pragma unroll
                                    for (int u = 0; u < LZ_DKP; u++) {
                                        float y = s[u][r];
                                        y = fma(a.x, xh[u].x, y);
                                        y = fma(a.y, xh[u].y, y);
                                        y = fma(a.z, xh[u].z, y);
                                        s[u][r] = fma(a.w, xh[u].w, y);
                                    }
                                }
                            }
#else
                        if (cc < LZ_NC8) {
                            float8 xf[LZ_DKP];
#pragma unroll
                            for (int u = 0; u < LZ_DKP; u++) xf[u] = lz_cvt8(kb[i % LZ_DKS][u][c]);
#pragma unroll
                            for (int r = 0; r < LZ_FR; r++) {
                                const float4 a = qv[r * LZ_Q4 + 2 * cc], b = qv[r * LZ_Q4 + 2 * cc + 1];
#pragma unroll
                                for (int u = 0; u < LZ_DKP; u++) {
                                    float y = s[u][r];
                                    y = fma(a.x, xf[u].s0, y);
                                    y = fma(a.y, xf[u].s1, y);
                                    y = fma(a.z, xf[u].s2, y);
                                    y = fma(a.w, xf[u].s3, y);
                                    y = fma(b.x, xf[u].s4, y);
                                    y = fma(b.y, xf[u].s5, y);
                                    y = fma(b.z, xf[u].s6, y);
                                    s[u][r] = fma(b.w, xf[u].s7, y);
                                }
                            }
                        }
#endif
                    }
                    /* the stage's sums are finished here, not sunk by the
                     * compiler past the next stage's loads (that keeps every
                     * query value of the stage in a register: spills) */
#pragma unroll
                    for (int u = 0; u < LZ_DKP; u++)
#pragma unroll
                        for (int r = 0; r < LZ_FR; r++) LZ_DEC_KEEP(s[u][r]);
                    if (p == LZ_KH - 1)
#pragma unroll
                        for (int u = 0; u < LZ_DKP; u++) {
                            const int kk = lid + (j * LZ_DKP + u) * LZ_FWG;
                            if (kk < LZ_DS) {
                                const long off = soff[kk];
                                const int kp = off >= 0 ? tpos[kk / LZ_BLOCK] + kk % LZ_BLOCK : 0;
#pragma unroll
                                for (int r = 0; r < LZ_FR; r++) {
                                    const float slope = alibi ? slopes[h0 + r] : 0.0f;
                                    sc[LZ_SCI(r, kk)] = off >= 0 ? s[u][r] * scale + slope * (float)(kp - qp) : -INFINITY;
                                }
                            }
                        }
                }
            }
        }
#else
#pragma unroll 1
        for (int it = 0; it < LZ_KPI; it++) { /* one key at a time: its row's loads in flight */
            const int kk = lid + it * LZ_FWG;
            long off = -1;
            if (kk < LZ_DS) {
                off = lz_dec_slot(tab, tpos, kk, ne, qp, kvh, n_kv_heads, n_blocks);
                soff[kk] = off;
            }
#if LZ_PF_V
            if (off >= 0) lz_dec_prefetch(vc + off, LZ_HEAD_DIM); /* step 4's V row, to L2 */
#endif
            float s[LZ_FR];
#pragma unroll
            for (int r = 0; r < LZ_FR; r++) s[r] = 0.0f;
            if (off >= 0) {
#pragma unroll
                for (int pc = 0; pc < LZ_NPC; pc++) {
                    LZ_RAW8_T x[LZ_KPC];
#pragma unroll
                    for (int c = 0; c < LZ_KPC; c++) {
                        const int cc = pc * LZ_KPC + c;
                        x[c] = cc < LZ_NC8 ? lz_raw8(kc, off + LZ_KV_DIM(cc * 8)) : (LZ_RAW8_T)(0);
                    }
#pragma unroll
                    for (int c = 0; c < LZ_KPC; c++) {
                        const int cc = min(pc * LZ_KPC + c, LZ_NC8 - 1);
                        const float8 xf = lz_cvt8(x[c]);
#pragma unroll
                        for (int r = 0; r < LZ_FR; r++) {
                            const float4 a = qv[r * LZ_Q4 + 2 * cc], b = qv[r * LZ_Q4 + 2 * cc + 1];
                            float y = s[r];
                            y = fma(a.x, xf.s0, y);
                            y = fma(a.y, xf.s1, y);
                            y = fma(a.z, xf.s2, y);
                            y = fma(a.w, xf.s3, y);
                            y = fma(b.x, xf.s4, y);
                            y = fma(b.y, xf.s5, y);
                            y = fma(b.z, xf.s6, y);
                            s[r] = fma(b.w, xf.s7, y);
                        }
                    }
                }
            }
            if (kk < LZ_DS) {
                const int kp = off >= 0 ? tpos[kk / LZ_BLOCK] + kk % LZ_BLOCK : 0;
#pragma unroll
                for (int r = 0; r < LZ_FR; r++) {
                    const float slope = alibi ? slopes[h0 + r] : 0.0f;
                    sc[LZ_SCI(r, kk)] = off >= 0 ? s[r] * scale + slope * (float)(kp - qp) : -INFINITY;
                }
            }
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE);

        /* 2. the chunk's maxima: LZ_RP partial maxima per row, then one work-item per row */
        for (int i = lid; i < LZ_FR * LZ_RP; i += LZ_FWG) {
            const int r = i / LZ_RP, p = i % LZ_RP;
            float mx = -INFINITY;
            for (int kk = p; kk < LZ_DS; kk += LZ_RP) mx = fmax(mx, sc[LZ_SCI(r, kk)]);
            red[i] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r = lid; r < LZ_FR; r += LZ_FWG) {
            float mx = -INFINITY;
            for (int p = 0; p < LZ_RP; p++) mx = fmax(mx, red[r * LZ_RP + p]);
            const float m_old = m_row[r], m_new = fmax(m_old, mx);
            a_row[r] = m_new == -INFINITY ? 1.0f : exp(m_old - m_new);
            m_row[r] = m_new;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* 3. probabilities */
        for (int i = lid; i < LZ_FR * LZ_DS; i += LZ_FWG) {
            const float x = sc[i];
            sc[i] = x == -INFINITY ? 0.0f : exp(x - m_row[LZ_SKM ? i % LZ_FR : i / LZ_DS]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* 4. output: V rows straight from global memory, key group kg */
#if LZ_ACCL
        lz_dec_acc_move(0, acc, l, acc_l, l_l, lid);
#endif
#pragma unroll
        for (int r = 0; r < LZ_FR; r++) {
            const float alpha = a_row[r];
            l[r] *= alpha;
#pragma unroll
            for (int i = 0; i < LZ_VPI; i++)
#pragma unroll
                for (int c = 0; c < LZ_FON / 4; c++) acc[i][r][c] *= alpha;
        }
#if LZ_PF_K
        /* the next chunk's K rows to L2 (its table words arrived in nw/np);
         * entries the kernel skips are not touched */
#pragma unroll
        for (int t = 0; t < LZ_TPI; t++) {
            const int i = lid + t * LZ_FWG;
            if (i < LZ_DCE && e + ne + i < last && !lz_entry_bad(nw[t], np[t], n_blocks)) {
                const int vis = min((int)LAZYATTN_ENTRY_LENGTH(nw[t]), qp - np[t] + 1);
                if (vis > 0)
                    lz_dec_prefetch(kc + lz_kv_offset(LAZYATTN_ENTRY_BLOCK(nw[t]), kvh, n_kv_heads, 0),
                                    LZ_KV_SPAN(vis));
            }
        }
#endif
        if (kg < LZ_KG) {
            /* batches of LZ_VU keys: every V load of a batch issued before any
             * is used; with LZ_DRING the next batch's loads before this one's use */
            long off[LZ_VU];
            LZ_VX_T x[LZ_VPI][LZ_NVC][LZ_VU];
#if LZ_DRING
            long offn[LZ_VU];
            LZ_VX_T xn[LZ_VPI][LZ_NVC][LZ_VU];
            lz_dec_vbatch(offn, xn, soff, vc, kg, lid, 0);
#endif
            for (int j0 = 0; j0 < LZ_VKI; j0 += LZ_VU) {
#if LZ_DRING
#pragma unroll
                for (int u = 0; u < LZ_VU; u++) off[u] = offn[u];
#pragma unroll
                for (int i = 0; i < LZ_VPI; i++)
#pragma unroll
                    for (int c = 0; c < LZ_NVC; c++)
#pragma unroll
                        for (int u = 0; u < LZ_VU; u++) x[i][c][u] = xn[i][c][u];
                lz_dec_vbatch(offn, xn, soff, vc, kg, lid, j0 + LZ_VU); /* past the end: no loads */
#else
                lz_dec_vbatch(off, x, soff, vc, kg, lid, j0);
#endif
#pragma unroll
                for (int i = 0; i < LZ_VPI; i++) {
#pragma unroll
                    for (int c = 0; c < LZ_NVC; c++) {
#pragma unroll
                        for (int u = 0; u < LZ_VU; u++) {
                            const int kk = min(kg + (j0 + u) * LZ_KG, LZ_DS - 1);
#if LZ_SKM
                            float pb[LZ_FR];
                            lz_dec_probs(pb, sc4, kk, off[u] >= 0);
#endif
#pragma unroll
                            for (int r = 0; r < LZ_FR; r++) {
                                /* invalid slots have probability 0 and rows of zeros */
#if LZ_SKM
                                const float pr = pb[r];
#else
                                const float pr = off[u] >= 0 ? sc[r * LZ_DS + kk] : 0.0f;
#endif
#if LZ_VSTEP == 8
                                const float8 xf = lz_cvt8(x[i][c][u]);
                                acc[i][r][2 * c] = fma((float4)(pr), xf.lo, acc[i][r][2 * c]);
                                acc[i][r][2 * c + 1] = fma((float4)(pr), xf.hi, acc[i][r][2 * c + 1]);
#else
                                acc[i][r][c] = fma((float4)(pr), x[i][c][u], acc[i][r][c]);
#endif
                            }
                        }
                    }
                }
#pragma unroll
                for (int u = 0; u < LZ_VU; u++) {
                    const int kk = min(kg + (j0 + u) * LZ_KG, LZ_DS - 1);
#if LZ_SKM
                    float pb[LZ_FR];
                    lz_dec_probs(pb, sc4, kk, off[u] >= 0);
#pragma unroll
                    for (int r = 0; r < LZ_FR; r++) l[r] += pb[r];
#else
#pragma unroll
                    for (int r = 0; r < LZ_FR; r++) l[r] += off[u] >= 0 ? sc[r * LZ_DS + kk] : 0.0f;
#endif
                }
            }
        }
#if LZ_ACCL
        lz_dec_acc_move(1, acc, l, acc_l, l_l, lid);
#endif
        e += ne;
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    /* the key groups' sums, one row at a time, written as the split's partial
     * (unrolled: acc and l are indexed by constants only, so they stay in registers) */
#if LZ_ACCL
    lz_dec_acc_move(0, acc, l, acc_l, l_l, lid);
#endif
#pragma unroll
    for (int r = 0; r < LZ_FR; r++) {
        if (kg < LZ_KG)
#pragma unroll
            for (int i = 0; i < LZ_VPI; i++) {
                const int vo = LZ_FWG >= LZ_NVO ? lid % LZ_NVO : lid + i * LZ_FWG;
                if (vo < LZ_NVO) {
#pragma unroll
                    for (int c = 0; c < LZ_FON / 4; c++)
                        vstore4(acc[i][r][c], 0, comb + kg * LZ_HEAD_DIM + vo * LZ_FON + c * 4);
                    if (vo == 0) comb_l[kg] = l[r];
                }
            }
        barrier(CLK_LOCAL_MEM_FENCE);
        const size_t part = ((size_t)seq * n_q_heads + h0 + r) * n_splits + split;
        for (int dd = lid; dd < LZ_HEAD_DIM; dd += LZ_FWG) {
            float x = 0.0f;
            for (int g = 0; g < LZ_KG; g++) x += comb[g * LZ_HEAD_DIM + dd];
            part_acc[part * LZ_HEAD_DIM + dd] = x;
        }
        if (lid == 0) {
            float sum = 0.0f;
            for (int g = 0; g < LZ_KG; g++) sum += comb_l[g];
            part_ml[part] = (float2)(m_row[r], sum);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* out[seq, h, :] = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M) in
 * out_dtype (lz_io_store); zeros when no key was visible. With has_lse,
 * lse[seq, h] = M + log(sum_s l_s e^(m_s - M)), -INFINITY when no key was
 * visible. One work-item per (dim, head, sequence). One pass over the
 * splits' states (cl/softmax_state.h), merged in groups of LZ_RDU splits
 * whose loads are all issued before any is used (a split without a
 * visible key, l_s = 0, adds nothing). */
#define LZ_RDU 8
__kernel void lz_decode_reduce(__global const float2 *part_ml, __global const float *part_acc,
                               __global float *out, int n_splits, int n_q_heads, int n_seqs,
                               __global float *lse, int has_lse, int out_dtype) {
    const int i = get_global_id(0), h = get_global_id(1), seq = get_global_id(2);
    if (i >= LZ_HEAD_DIM || h >= n_q_heads || seq >= n_seqs) return;
    const size_t base = ((size_t)seq * n_q_heads + h) * n_splits;
    float big = -INFINITY, num = 0.0f, den = 0.0f;
    for (int s0 = 0; s0 < n_splits; s0 += LZ_RDU) {
        float2 ml[LZ_RDU];
        float a[LZ_RDU];
#pragma unroll
        for (int u = 0; u < LZ_RDU; u++) {
            const int s = min(s0 + u, n_splits - 1);
            ml[u] = part_ml[base + s];
            a[u] = part_acc[(base + s) * LZ_HEAD_DIM + i];
            if (s0 + u >= n_splits) ml[u] = (float2)(-INFINITY, 0.0f); /* past the last: empty */
        }
        LZ_STATE_MERGE(big, den, num, float, LZ_RDU, ml, a, 1, 0, 0);
    }
    const size_t row = (size_t)seq * n_q_heads + h;
    lz_io_store(den > 0.0f ? num / den : 0.0f, out, row * LZ_HEAD_DIM + i, out_dtype);
    if (has_lse && i == 0) lse[row] = den > 0.0f ? big + log(den) : -INFINITY;
}
