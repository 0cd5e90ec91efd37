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
 * by -delta, serves the chunk; once per document). K and V are read the
 * same way, coalesced: LZ_KG key groups of LZ_NVO work-items, each owning
 * LZ_FON dims of a row (a key group reads whole rows with 16-byte loads;
 * key group g takes slots g, g + LZ_KG, ...), and each work-item keeps the
 * query's LZ_FON dims of its LZ_FR heads in registers. Per chunk:
 *   0. the chunk's table words (loaded one chunk ahead into registers) go to
 *      local memory with each entry's element offset and visible length; the
 *      query is rotated if the delta changed and read into registers;
 *   1. K rows in batches of LZ_VU per work-item, all of a batch's loads
 *      issued before any is used (with LZ_FPF the first batch of V rows is
 *      issued right after the first K batch, in flight with it); each work-item's partial
 *      dot products (its dims) go to local memory;
 *   2. scores: one key per work-item (slots lid, lid + LZ_FWG, ...) adds its
 *      LZ_NVO partials per head;
 *   3. every work-item reads the chunk's scores back and keeps the running
 *      maxima in registers (all compute the same values), and writes the
 *      probabilities of its own keys;
 *   4. output: each key group walks its keys again in batches of LZ_VU V
 *      rows (the first already in registers) and accumulates the LZ_FR
 *      heads' outputs in registers.
 * At the end the key groups' sums are added through local memory, one row
 * at a time, and written as the split's partial.
 *
 * Tile parameters (-D, from lib/tuning.c; the host checks the local memory):
 *   LZ_G   query heads per KV head      LZ_FR  heads per work-group (divides LZ_G)
 *   LZ_FTK key slots per chunk (at least one block is always taken)
 *   LZ_FWG work-items per group         LZ_FON dims per work-item in step 4 (multiple of 4)
 *   LZ_FRN (LZ_VU) K or V rows per batch per work-item (steps 1 and 4)
 *   LZ_FPF 1: the first batch of V rows is issued with the first K batch
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
#define LZ_FTK 128
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
/* steps 2 and 3: key slots per work-item */
#define LZ_KPI ((LZ_DS + LZ_FWG - 1) / LZ_FWG)
/* step 4: dim chunks per row, key groups, dim chunks per work-item */
#define LZ_NVO (LZ_HEAD_DIM / LZ_FON)
#define LZ_KG (LZ_FWG >= LZ_NVO ? LZ_FWG / LZ_NVO : 1)
#define LZ_VPI (LZ_FWG >= LZ_NVO ? 1 : (LZ_NVO + LZ_FWG - 1) / LZ_FWG)
#define LZ_VKI ((LZ_DS + LZ_KG - 1) / LZ_KG) /* key slots per key group */
/* step 1: partial dot products per key (one per work-item of a key group),
 * in float4s of heads; one padding slot per key against bank conflicts */
#define LZ_P (LZ_FWG >= LZ_NVO ? LZ_NVO : LZ_FWG)
#define LZ_FR4 ((LZ_FR + 3) / 4)
#define LZ_PS (LZ_P + 1)
#ifndef LZ_VU /* V rows per batch per work-item in step 4 (the tile's score_keys) */
#ifdef LZ_FRN
#define LZ_VU LZ_FRN
#else
#define LZ_VU 16
#endif
#endif
#ifndef LZ_FPF /* 1: the first batch of V rows is loaded with the K rows (the tile's prefetch 1) */
#define LZ_FPF 0
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

/* Visible keys of an entry: its first tokens up to the valid length and the
 * query position qp; none for a skipped entry (or qp -1). */
inline int lz_dec_visible(ulong w, int pos0, int qp, int n_blocks) {
    return lz_dec_entry_bad(w, pos0, n_blocks) ? 0 : max(0, min(LAZYATTN_ENTRY_LENGTH(w), qp - pos0 + 1));
}

/* Element offset of key slot kk of the chunk (entries 0 .. ne), or -1 when
 * the slot holds no visible key: eb/ec are the entries' offsets of token 0
 * and visible lengths. */
inline long lz_dec_off(__local const long *eb, __local const int *ec, int kk, int ne) {
    const int ei = kk / LZ_BLOCK, tok = kk % LZ_BLOCK;
    return kk < LZ_DS && ei < ne && tok < ec[ei] ? eb[ei] + (long)tok * LZ_HEAD_DIM : -1;
}

/* Component j (a constant after unrolling) of x. */
inline float lz_dec_comp(float4 x, int j) { return j == 0 ? x.x : j == 1 ? x.y : j == 2 ? x.z : x.w; }

#if LZ_FON % 8 == 0
#define LZ_VSTEP 8
#define LZ_VRAW_T LZ_RAW8_T
#define LZ_VLOAD(p, i) lz_raw8(p, i)
#else
#define LZ_VSTEP 4
#define LZ_VRAW_T float4
#define LZ_VLOAD(p, i) lz_load4v(p, i)
#endif
#define LZ_VC (LZ_FON / LZ_VSTEP)


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
    __local float4 part[LZ_DS * LZ_PS * LZ_FR4]; /* partial dot products [key][lane][heads / 4] */
    __local float4 sc4[LZ_DS * LZ_FR4];  /* scores [key][heads / 4] */
    __local float4 pb4[LZ_DS * LZ_FR4];  /* probabilities [key][heads / 4] */
    __local float4 red4[32 * LZ_FR4];    /* partial maxima [slice][heads / 4] */
    __local float comb[LZ_KG * LZ_HEAD_DIM]; /* the key groups' sums of one row */
    __local float comb_l[LZ_KG];
    /* the chunk's entries, in two buffers (chunk parity): a chunk's are
     * written while the previous chunk's step 4 may still read its own */
    __local long ebase_l[2 * LZ_DCE];    /* each entry's element offset of token 0 */
    __local ulong tab_l[2 * LZ_DCE];
    __local int tpos_l[2 * LZ_DCE];
    __local int ecnt_l[2 * LZ_DCE];      /* each entry's visible keys */
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

    /* the query at delta 0, the query position */
    for (int i = lid; i < LZ_FR * LZ_Q4; i += LZ_FWG)
        q_l[i] = q0_l[i] = lz_io_load4(q, ((size_t)seq * n_q_heads + h0 + i / LZ_Q4) * LZ_HEAD_DIM + 4 * (i % LZ_Q4), q_dtype);
    if (lid == 0) {
        int qp = q_pos[seq];
        if (!LZ_POSITION_OK(qp)) { /* recorded; the query sees no key */
            if (split == 0 && h0 == kvh * LZ_G) lz_raise(err, LZ_ERR_QUERY_POSITION);
            qp = -1;
        }
        qp_l = qp;
    }

    /* the work-item's place: key group kg, dim chunks vo(i) of LZ_FON dims,
     * partial lane pl; the running maxima m (the same in every work-item),
     * sums l and outputs acc */
    const int kg = LZ_FWG >= LZ_NVO ? lid / LZ_NVO : 0;
    const int pl = LZ_FWG >= LZ_NVO ? lid % LZ_NVO : lid;
    float4 acc[LZ_VPI][LZ_FR][LZ_FON / 4];
    float l[LZ_FR], m[LZ_FR];
#pragma unroll
    for (int r = 0; r < LZ_FR; r++) {
        l[r] = 0.0f, m[r] = -INFINITY;
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
    int e = first, bo = 0;
#pragma unroll
    for (int t = 0; t < LZ_TPI; t++) {
        const int i = lid + t * LZ_FWG;
        nw[t] = 0, np[t] = 0;
        if (i < LZ_DCE && e + i < last) nw[t] = table[e + i], np[t] = entry_pos[e + i];
    }
    while (e < last) { /* uniform: e and last are the same in every work-item */
        /* 0. the chunk's entries: words, offsets of token 0, visible keys */
        __local long *ebase = ebase_l + bo;
        __local ulong *tab = tab_l + bo;
        __local int *tpos = tpos_l + bo, *ecnt = ecnt_l + bo;
#pragma unroll
        for (int t = 0; t < LZ_TPI; t++) {
            const int i = lid + t * LZ_FWG;
            if (i < LZ_DCE) {
                tab[i] = nw[t], tpos[i] = np[t];
                ebase[i] = (long)lz_kv_offset(LAZYATTN_ENTRY_BLOCK(nw[t]), kvh, n_kv_heads, 0);
                ecnt[i] = lz_dec_visible(nw[t], np[t], qp, n_blocks);
            }
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

        /* 1. K rows, coalesced, in batches of LZ_VU; partial dot products of
         * the work-item's dims against its registers' query */
        float4 qr[LZ_VPI][LZ_FR][LZ_FON / 4];
#pragma unroll
        for (int i = 0; i < LZ_VPI; i++) {
            const int vo = LZ_FWG >= LZ_NVO ? pl : lid + i * LZ_FWG;
#pragma unroll
            for (int r = 0; r < LZ_FR; r++)
#pragma unroll
                for (int c = 0; c < LZ_FON / 4; c++)
                    qr[i][r][c] = vo < LZ_NVO ? q_l[r * LZ_Q4 + vo * (LZ_FON / 4) + c] : (float4)(0.0f);
        }
        LZ_VRAW_T vx[LZ_VU][LZ_VPI][LZ_VC];
        for (int j0 = 0; j0 < LZ_VKI; j0 += LZ_VU) {
            LZ_VRAW_T kx[LZ_VU][LZ_VPI][LZ_VC];
#pragma unroll
            for (int u = 0; u < LZ_VU; u++) {
                const long off = kg < LZ_KG ? lz_dec_off(ebase, ecnt, kg + (j0 + u) * LZ_KG, ne) : -1;
#pragma unroll
                for (int i = 0; i < LZ_VPI; i++) {
                    const int vo = LZ_FWG >= LZ_NVO ? pl : lid + i * LZ_FWG;
#pragma unroll
                    for (int c = 0; c < LZ_VC; c++)
                        kx[u][i][c] = off >= 0 && vo < LZ_NVO ? LZ_VLOAD(kc, off + vo * LZ_FON + c * LZ_VSTEP) : (LZ_VRAW_T)(0);
                }
            }
            if (LZ_FPF && j0 == 0) { /* the first batch of V rows, in flight with the K rows */
#pragma unroll
                for (int u = 0; u < LZ_VU; u++) {
                    const long off = kg < LZ_KG ? lz_dec_off(ebase, ecnt, kg + u * LZ_KG, ne) : -1;
#pragma unroll
                    for (int i = 0; i < LZ_VPI; i++) {
                        const int vo = LZ_FWG >= LZ_NVO ? pl : lid + i * LZ_FWG;
#pragma unroll
                        for (int c = 0; c < LZ_VC; c++)
                            vx[u][i][c] = off >= 0 && vo < LZ_NVO ? LZ_VLOAD(vc, off + vo * LZ_FON + c * LZ_VSTEP) : (LZ_VRAW_T)(0);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < LZ_VU; u++) {
                const int kk = kg + (j0 + u) * LZ_KG;
                float p[LZ_FR4 * 4];
#pragma unroll
                for (int r = 0; r < LZ_FR4 * 4; r++) p[r] = 0.0f;
#pragma unroll
                for (int i = 0; i < LZ_VPI; i++)
#pragma unroll
                    for (int c = 0; c < LZ_VC; c++) {
#if LZ_VSTEP == 8
                        const float8 xf = lz_cvt8(kx[u][i][c]);
#pragma unroll
                        for (int r = 0; r < LZ_FR; r++)
                            p[r] += dot(qr[i][r][2 * c], xf.lo) + dot(qr[i][r][2 * c + 1], xf.hi);
#else
#pragma unroll
                        for (int r = 0; r < LZ_FR; r++) p[r] += dot(qr[i][r][c], kx[u][i][c]);
#endif
                    }
                if (kg < LZ_KG && kk < LZ_DS)
#pragma unroll
                    for (int r4 = 0; r4 < LZ_FR4; r4++)
                        part[(kk * LZ_PS + pl) * LZ_FR4 + r4] = (float4)(p[4 * r4], p[4 * r4 + 1], p[4 * r4 + 2], p[4 * r4 + 3]);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* 2. scores of the work-item's keys: the sums of their partials */
#pragma unroll 1
        for (int it = 0; it < LZ_KPI; it++) {
            const int kk = lid + it * LZ_FWG;
            if (kk < LZ_DS) {
                const long off = lz_dec_off(ebase, ecnt, kk, ne);
                float4 s4[LZ_FR4];
#pragma unroll
                for (int r4 = 0; r4 < LZ_FR4; r4++) s4[r4] = (float4)(0.0f);
                for (int p = 0; p < LZ_P; p++)
#pragma unroll
                    for (int r4 = 0; r4 < LZ_FR4; r4++) s4[r4] += part[(kk * LZ_PS + p) * LZ_FR4 + r4];
                const int kp = off >= 0 ? tpos[kk / LZ_BLOCK] + kk % LZ_BLOCK : 0;
#pragma unroll
                for (int r4 = 0; r4 < LZ_FR4; r4++) {
                    float y[4];
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const int r = 4 * r4 + j;
                        const float slope = alibi && r < LZ_FR ? slopes[h0 + r] : 0.0f;
                        y[j] = off >= 0 && r < LZ_FR ? lz_dec_comp(s4[r4], j) * scale + slope * (float)(kp - qp) : -INFINITY;
                    }
                    sc4[kk * LZ_FR4 + r4] = (float4)(y[0], y[1], y[2], y[3]);
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* 3. the chunk's maxima in two levels: 32 partial maxima per head,
         * then every work-item reads them all (broadcasts) and keeps the
         * running maxima in registers; the rescale factors, and the
         * probabilities of the work-item's keys */
        for (int i = lid; i < 32 * LZ_FR4; i += LZ_FWG) {
            const int sl = i % 32, r4 = i / 32;
            float4 mx = (float4)(-INFINITY);
            for (int kk = sl; kk < LZ_DS; kk += 32) mx = fmax(mx, sc4[kk * LZ_FR4 + r4]);
            red4[sl * LZ_FR4 + r4] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        float alpha[LZ_FR];
#pragma unroll
        for (int r4 = 0; r4 < LZ_FR4; r4++) {
            float4 mx = (float4)(-INFINITY);
#pragma unroll 8
            for (int sl = 0; sl < 32; sl++) mx = fmax(mx, red4[sl * LZ_FR4 + r4]);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int r = 4 * r4 + j;
                if (r < LZ_FR) {
                    const float m_new = fmax(m[r], lz_dec_comp(mx, j));
                    alpha[r] = m_new == -INFINITY ? 1.0f : exp(m[r] - m_new);
                    m[r] = m_new;
                }
            }
        }
#pragma unroll 1
        for (int it = 0; it < LZ_KPI; it++) {
            const int kk = lid + it * LZ_FWG;
            if (kk < LZ_DS)
#pragma unroll
                for (int r4 = 0; r4 < LZ_FR4; r4++) {
                    const float4 x = sc4[kk * LZ_FR4 + r4];
                    float y[4];
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const float xj = lz_dec_comp(x, j);
                        y[j] = 4 * r4 + j < LZ_FR && xj != -INFINITY ? exp(xj - m[min(4 * r4 + j, LZ_FR - 1)]) : 0.0f;
                    }
                    pb4[kk * LZ_FR4 + r4] = (float4)(y[0], y[1], y[2], y[3]);
                }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* 4. output: V rows straight from global memory, key group kg, in
         * batches of LZ_VU rows (the first one loaded in step 1) */
#pragma unroll
        for (int r = 0; r < LZ_FR; r++) {
            l[r] *= alpha[r];
#pragma unroll
            for (int i = 0; i < LZ_VPI; i++)
#pragma unroll
                for (int c = 0; c < LZ_FON / 4; c++) acc[i][r][c] *= alpha[r];
        }
        for (int j0 = 0; j0 < LZ_VKI; j0 += LZ_VU) {
            if (LZ_FPF == 0 || j0 > 0) { /* the batch's loads, all issued before any is used */
#pragma unroll
                for (int u = 0; u < LZ_VU; u++) {
                    const long off = kg < LZ_KG ? lz_dec_off(ebase, ecnt, kg + (j0 + u) * LZ_KG, ne) : -1;
#pragma unroll
                    for (int i = 0; i < LZ_VPI; i++) {
                        const int vo = LZ_FWG >= LZ_NVO ? lid % LZ_NVO : lid + i * LZ_FWG;
#pragma unroll
                        for (int c = 0; c < LZ_VC; c++)
                            vx[u][i][c] = off >= 0 && vo < LZ_NVO ? LZ_VLOAD(vc, off + vo * LZ_FON + c * LZ_VSTEP)
                                                                  : (LZ_VRAW_T)(0);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < LZ_VU; u++) {
                const int kk = kg + (j0 + u) * LZ_KG;
                const int ok = kg < LZ_KG && kk < LZ_DS;
#pragma unroll
                for (int r = 0; r < LZ_FR; r++) {
                    /* slots without a visible key have probability 0 and rows of zeros */
                    const float pr = ok ? lz_dec_comp(pb4[min(kk, LZ_DS - 1) * LZ_FR4 + r / 4], r % 4) : 0.0f;
                    l[r] += pr;
#pragma unroll
                    for (int i = 0; i < LZ_VPI; i++)
#pragma unroll
                        for (int c = 0; c < LZ_VC; c++) {
#if LZ_VSTEP == 8
                            const float8 xf = lz_cvt8(vx[u][i][c]);
                            acc[i][r][2 * c] = fma((float4)(pr), xf.lo, acc[i][r][2 * c]);
                            acc[i][r][2 * c + 1] = fma((float4)(pr), xf.hi, acc[i][r][2 * c + 1]);
#else
                            acc[i][r][c] = fma((float4)(pr), vx[u][i][c], acc[i][r][c]);
#endif
                        }
                }
            }
        }
        e += ne, bo = LZ_DCE - bo; /* no barrier: the next chunk's entries go to the other buffer */
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
            part_ml[part] = (float2)(m[r], sum);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* out[seq, h, :] = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M) in
 * out_dtype (lz_io_store); zeros when no key was visible. With has_lse,
 * lse[seq, h] = M + log(sum_s l_s e^(m_s - M)), -INFINITY when no key was
 * visible. One work-item per (dim, head, sequence). */
__kernel void lz_decode_reduce(__global const float2 *part_ml, __global const float *part_acc,
                               __global float *out, int n_splits, int n_q_heads, int n_seqs,
                               __global float *lse, int has_lse, int out_dtype) {
    const int i = get_global_id(0), h = get_global_id(1), seq = get_global_id(2);
    if (i >= LZ_HEAD_DIM || h >= n_q_heads || seq >= n_seqs) return;
    const size_t base = ((size_t)seq * n_q_heads + h) * n_splits;
    float big = -INFINITY;
    for (int s = 0; s < n_splits; s++) big = fmax(big, part_ml[base + s].x);
    float num = 0.0f, den = 0.0f;
    if (big != -INFINITY)
        for (int s = 0; s < n_splits; s++) {
            const float2 ml = part_ml[base + s];
            if (ml.y == 0.0f) continue;
            const float wgt = exp(ml.x - big);
            den = fma(ml.y, wgt, den);
            num = fma(part_acc[(base + s) * LZ_HEAD_DIM + i], wgt, num);
        }
    const size_t row = (size_t)seq * n_q_heads + h;
    lz_io_store(den > 0.0f ? num / den : 0.0f, out, row * LZ_HEAD_DIM + i, out_dtype);
    if (has_lse && i == 0) lse[row] = den > 0.0f ? big + log(den) : -INFINITY;
}
