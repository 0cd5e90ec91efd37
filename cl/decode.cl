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
#define LZ_Q4 (LZ_HEAD_DIM / 4)
#define LZ_TPI ((LZ_DCE + LZ_FWG - 1) / LZ_FWG) /* table words per work-item */

/* An entry the kernel skips (and reports): outside the pool, or logical
 * start pos0 or stored start pos0 - delta out of 0..LZ_MAX_POSITION. */
inline int lz_dec_entry_bad(ulong w, int pos0, int n_blocks) {
    return LAZYATTN_ENTRY_BLOCK(w) >= n_blocks || LAZYATTN_ENTRY_LENGTH(w) > LZ_BLOCK ||
           !LZ_ENTRY_POSITIONS_OK(pos0, LAZYATTN_ENTRY_DELTA(w), LAZYATTN_ENTRY_LENGTH(w));
}

/* Records why an entry is skipped. */
inline void lz_dec_check_entry(ulong w, int pos0, int n_blocks, __global int *err) {
    if (LAZYATTN_ENTRY_BLOCK(w) >= n_blocks) lz_raise(err, LZ_ERR_BLOCK);
    else if (LAZYATTN_ENTRY_LENGTH(w) > LZ_BLOCK) lz_raise(err, LZ_ERR_LENGTH);
    else if (!LZ_ENTRY_POSITIONS_OK(pos0, LAZYATTN_ENTRY_DELTA(w), LAZYATTN_ENTRY_LENGTH(w)))
        lz_raise(err, LZ_ERR_ENTRY_POSITION);
}

/* Element offset of key slot kk of the chunk (entries tab[0 .. ne)), or -1
 * when the slot holds no visible key (past the chunk, past the entry's
 * valid length, a skipped entry, or after the query position qp). */
inline long lz_dec_slot(__local const ulong *tab, __local const int *tpos, int kk, int ne, int qp,
                        int kvh, int n_kv_heads, int n_blocks) {
    const int ei = kk / LZ_BLOCK, tok = kk % LZ_BLOCK;
    if (ei >= ne) return -1;
    const ulong w = tab[ei];
    const int pos0 = tpos[ei];
    if (lz_dec_entry_bad(w, pos0, n_blocks) || tok >= LAZYATTN_ENTRY_LENGTH(w) || pos0 + tok > qp)
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
                x[i][c][u] = off[u] >= 0 && vo < LZ_NVO ? LZ_VLOAD(off[u] + vo * LZ_FON + c * LZ_VSTEP) : LZ_VZERO;
    }
}

__kernel void lz_decode(__global const float *q, __global const int *q_pos,
                        __global const int *seq_offsets, __global const ulong *table,
                        __global const int *entry_pos, __global const LZ_STORE_T *kc,
                        __global const LZ_STORE_T *vc, __global float2 *part_ml,
                        __global float *part_acc, __global const float2 *freq,
                        __global const float *slopes, int rope_style, int rot_dim, int alibi,
                        float scale, int entries_per_split, int n_splits, int n_q_heads,
                        int n_kv_heads, int n_blocks, int n_table, __global int *err,
                        int q_dtype) {
    __local float4 q_l[LZ_FR * LZ_Q4];   /* the rows' query, rotated by -cur_delta */
    __local float4 q0_l[LZ_FR * LZ_Q4];  /* the rows' query as given */
    __local long soff[LZ_DS];            /* element offset of each visible key slot, -1 if none */
    __local float sc[LZ_FR * LZ_DS];     /* scores, then probabilities */
    __local float red[LZ_FR * LZ_RP];    /* partial maxima */
    __local float m_row[LZ_FR], a_row[LZ_FR];
    __local float comb[LZ_KG * LZ_HEAD_DIM]; /* the key groups' sums of one row */
    __local float comb_l[LZ_KG];
    __local ulong tab[LZ_DCE];
    __local int tpos[LZ_DCE];
    __local int qp_l;

    const int lid = get_local_id(0);
    const int split = get_group_id(0), seq = get_group_id(2);
    const int kvh = get_group_id(1) / (LZ_G / LZ_FR), h0 = kvh * LZ_G + get_group_id(1) % (LZ_G / LZ_FR) * LZ_FR;
    const int begin = seq_offsets[seq], end = seq_offsets[seq + 1];
    const int bad_table = begin < 0 || end < begin || end > n_table ||
                          end - begin > entries_per_split * n_splits;
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
        for (int i = lid; i < ne; i += LZ_FWG) lz_dec_check_entry(tab[i], tpos[i], n_blocks, err);
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
                        x[c] = cc < LZ_NC8 ? lz_raw8(kc, off + cc * 8) : (LZ_RAW8_T)(0);
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
                    sc[r * LZ_DS + kk] = off >= 0 ? s[r] * scale + slope * (float)(kp - qp) : -INFINITY;
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* 2. the chunk's maxima: LZ_RP partial maxima per row, then one work-item per row */
        for (int i = lid; i < LZ_FR * LZ_RP; i += LZ_FWG) {
            const int r = i / LZ_RP, p = i % LZ_RP;
            float mx = -INFINITY;
            for (int kk = p; kk < LZ_DS; kk += LZ_RP) mx = fmax(mx, sc[r * LZ_DS + kk]);
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
            sc[i] = x == -INFINITY ? 0.0f : exp(x - m_row[i / LZ_DS]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* 4. output: V rows straight from global memory, key group kg */
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
            if (i < LZ_DCE && e + ne + i < last && !lz_dec_entry_bad(nw[t], np[t], n_blocks)) {
                const int vis = min((int)LAZYATTN_ENTRY_LENGTH(nw[t]), qp - np[t] + 1);
                if (vis > 0)
                    lz_dec_prefetch(kc + lz_kv_offset(LAZYATTN_ENTRY_BLOCK(nw[t]), kvh, n_kv_heads, 0),
                                    vis * LZ_HEAD_DIM);
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
#pragma unroll
                            for (int r = 0; r < LZ_FR; r++) {
                                /* invalid slots have probability 0 and rows of zeros */
                                const float pr = off[u] >= 0 ? sc[r * LZ_DS + kk] : 0.0f;
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
#pragma unroll
                    for (int r = 0; r < LZ_FR; r++) l[r] += off[u] >= 0 ? sc[r * LZ_DS + kk] : 0.0f;
                }
            }
        }
        e += ne;
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    /* the key groups' sums, one row at a time, written as the split's partial
     * (unrolled: acc and l are indexed by constants only, so they stay in registers) */
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
 * splits with a running maximum (the sums rescaled when it grows), in
 * groups of LZ_RDU splits whose loads are all issued before any is used
 * (no data-dependent branch: a split without a visible key, l_s = 0, adds
 * zero weight). */
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
            if (s0 + u >= n_splits || ml[u].y == 0.0f) ml[u] = (float2)(-INFINITY, 0.0f);
        }
        float mx = big;
#pragma unroll
        for (int u = 0; u < LZ_RDU; u++) mx = fmax(mx, ml[u].x);
        if (mx != -INFINITY) {
            const float r = exp(big - mx); /* 0 while big is -inf */
            num *= r, den *= r;
#pragma unroll
            for (int u = 0; u < LZ_RDU; u++) {
                const float wgt = ml[u].y == 0.0f ? 0.0f : exp(ml[u].x - mx);
                den = fma(ml[u].y, wgt, den);
                num = fma(a[u], wgt, num);
            }
            big = mx;
        }
    }
    const size_t row = (size_t)seq * n_q_heads + h;
    lz_io_store(den > 0.0f ? num / den : 0.0f, out, row * LZ_HEAD_DIM + i, out_dtype);
    if (has_lse && i == 0) lse[row] = den > 0.0f ? big + log(den) : -INFINITY;
}
