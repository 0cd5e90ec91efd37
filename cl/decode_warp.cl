/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lazy decode, portable path, small work-groups (the decode tile's
 * kv_together 3; cl/decode.cl is the chunked kernel of the other values):
 * one query token per sequence, split along the KV length; lz_decode_reduce
 * (cl/decode.cl, in the same program) combines the splits. The flash-decoding
 * split with no long serial phase: a work-group of LZ_FWG work-items (32 by
 * default: one warp on NVIDIA) walks its split in batches of LZ_WNB keys
 * with a batch of K or V rows always in flight, and its barriers span only
 * that small group.
 *
 * Work-group: one (split, KV head x LZ_FR of its LZ_G query heads,
 * sequence), so each K/V row read serves all its heads. Work-item lid owns
 * dims vo * LZ_FON .. + LZ_FON - 1 (vo = lid % LZ_WNVO) of the rows of key
 * group kg = lid / LZ_WNVO: a batch's key k is read by key group k % LZ_WKG,
 * one vector load per row per work-item. The query's dims of the group's
 * heads sit in registers, rotated by -delta when the entries' delta changes.
 * A batch lies in one table entry (LZ_WNB divides the block). Per batch b:
 *   1. V rows of batch b issued; the partial dot products of K rows of
 *      batch b (loaded during batch b - 1) with the query's dims, per
 *      (key, head), into local memory; K rows of batch b + 1 issued;
 *   2. barrier; one work-item per (key, head) sums the partials, scales,
 *      adds the ALiBi bias, masks (-inf: past the entry's length, after the
 *      query position, a skipped entry);
 *   3. barrier; the same work-item: the batch's maximum of its head, the
 *      running maximum, the rescale factor alpha and its probability;
 *   4. barrier; every work-item rescales its output dims by alpha and adds
 *      p x V of its keys (the probabilities read from local memory).
 * At the end the key groups' sums are added through local memory and the
 * split's (max, sum, output) partial rows written for lz_decode_reduce.
 *
 * Tile parameters (-D, from lib/tuning.c; the host checks the local memory):
 *   LZ_G   query heads per KV head      LZ_FR  heads per work-group (divides LZ_G)
 *   LZ_FTK keys per batch (the largest divisor of the block at most it is taken)
 *   LZ_FWG work-items per group (a multiple of LZ_HEAD_DIM / LZ_FON)
 *   LZ_FON dims per work-item (a multiple of 4 dividing LZ_HEAD_DIM; 16-byte
 *          f16 loads when a multiple of 8, else 8-byte)
 *   LZ_FRN (the tile's score_keys) 2: the K rows of batch b + 1 issued
 *          before batch b's dot products (a ring of two K batches); else
 *          after them (one K batch in registers)
 *
 * Race freedom: the batch loop is uniform (its count comes from the
 * sequence offsets), every barrier is reached by every work-item and none
 * is skipped by `continue`/`break` (the PoCL 3.1 miscompile, see cl/flash.h);
 * the branches between barriers (the query's rotation, the pair owners'
 * work) hold no barrier. Each local buffer is written and read in phases
 * separated by barriers: part_l written in 1, read in 2; sc_l written in 2,
 * read in 3; p_l and a_l written in 3, read in 4 (and written again only
 * after the next batch's barriers 1 and 2).
 * Arguments: lz_decode's (LZ_DECODE_PARAMS, cl/decode.cl, with their shapes).
 */
#ifndef LZ_G
#define LZ_G 1
#endif
#ifndef LZ_FR
#define LZ_FR LZ_G
#endif
#ifndef LZ_FTK
#define LZ_FTK 8
#endif
#ifndef LZ_FWG
#define LZ_FWG 32
#endif
#ifndef LZ_FON
#define LZ_FON 4
#endif
#ifndef LZ_FRN
#define LZ_FRN 1
#endif
#define LZ_WR LZ_FR
#define LZ_WD LZ_FON
#define LZ_WNVO (LZ_HEAD_DIM / LZ_WD) /* work-items per row */
#define LZ_WKG (LZ_FWG / LZ_WNVO)    /* key groups: rows read at once */
/* keys per batch: the largest divisor of the block at most LZ_FTK among LZ_FTK, 32, 16, 8, 4, 2, 1 */
#define LZ_WNB                                                                                   \
    (LZ_BLOCK % LZ_FTK == 0                  ? LZ_FTK                                            \
     : LZ_BLOCK % 32 == 0 && LZ_FTK > 32     ? 32                                                \
     : LZ_BLOCK % 16 == 0 && LZ_FTK > 16     ? 16                                                \
     : LZ_BLOCK % 8 == 0 && LZ_FTK > 8       ? 8                                                 \
     : LZ_BLOCK % 4 == 0 && LZ_FTK > 4       ? 4                                                 \
     : LZ_BLOCK % 2 == 0 && LZ_FTK > 2       ? 2                                                 \
                                             : 1)
#define LZ_WBPE (LZ_BLOCK / LZ_WNB)                     /* batches per entry */
#define LZ_WJN ((LZ_WNB + LZ_WKG - 1) / LZ_WKG)         /* keys per work-item per batch */
#define LZ_WNP (LZ_WNB * LZ_WR)                         /* (key, head) pairs per batch */
#define LZ_WPPI ((LZ_WNP + LZ_FWG - 1) / LZ_FWG)        /* pairs per work-item */
#define LZ_WPS (LZ_WNP + 1)                             /* stride of the partials (bank spread) */
#define LZ_W4 (LZ_WD / 4)                               /* float4 pieces per work-item */
#define LZ_WQ4 (LZ_HEAD_DIM / 4)
#define LZ_WKAHEAD (LZ_FRN == 2)

/* A row piece as stored: 8 elements (lz_raw8) when LZ_FON is a multiple of
 * 8, else 4 (uint2 of f16/bf16, float4 of f32); converted at use. */
#if LZ_WD % 8 == 0
#define LZ_WC 8
#define LZ_WRAW_T LZ_RAW8_T
#define LZ_WLOAD(p, o) lz_raw8(p, o)
#define LZ_WZERO ((LZ_RAW8_T)(0))
#else
#define LZ_WC 4
#if LZ_DTYPE == 0
#define LZ_WRAW_T float4
#define LZ_WZERO ((float4)(0.0f))
#else
#define LZ_WRAW_T uint2
#define LZ_WZERO ((uint2)(0u))
#endif
#define LZ_WLOAD(p, o) (*(const __global LZ_WRAW_T *)((p) + (o)))
#endif
#define LZ_WNC (LZ_WD / LZ_WC)

/* The float4 pieces of one row piece set (LZ_WNC stored pieces). */
inline void lz_dw_cvt(const LZ_WRAW_T x[LZ_WNC], float4 f[LZ_W4]) {
#pragma unroll
    for (int c = 0; c < LZ_WNC; c++) {
#if LZ_WC == 8
        const float8 y = lz_cvt8(x[c]);
        f[2 * c] = y.lo;
        f[2 * c + 1] = y.hi;
#elif LZ_DTYPE == 0
        f[c] = x[c];
#else
        f[c] = lz_cvt4(x[c].x, x[c].y);
#endif
    }
}

/* Visible keys of the batch at token t0 of an entry (w, pos0): keys t0 ..
 * t0 + n - 1 are inside the valid length and at or before qp (0 for a
 * skipped entry); *base: the element offset of token t0's row, or with
 * tiled pages (where tokens do not step by a row) of the page's token 0. */
inline int lz_dw_visible(ulong w, int pos0, int t0, int qp, int kvh, int n_kv_heads, int n_blocks,
                         long *base) {
    *base = 0;
    if (lz_entry_bad(w, pos0, n_blocks)) return 0;
    const int n = min((int)LAZYATTN_ENTRY_LENGTH(w) - t0, qp - pos0 - t0 + 1);
    if (n <= 0) return 0;
    *base = (long)lz_kv_offset(LAZYATTN_ENTRY_BLOCK(w), kvh, n_kv_heads, LZ_KV_TILED ? 0 : t0);
    return min(n, LZ_WNB);
}

/* The work-item's rows of the batch at token t0 (keys t0 + kg, t0 + kg +
 * LZ_WKG, ...) from base (lz_dw_visible): n visible keys; the others read
 * as zeros (no load). */
inline void lz_dw_rows(LZ_WRAW_T x[LZ_WJN][LZ_WNC], __global const LZ_STORE_T *p, long base, int t0,
                       int n, int kg, int vo) {
#pragma unroll
    for (int j = 0; j < LZ_WJN; j++) {
        const int k = kg + j * LZ_WKG;
#pragma unroll
        for (int c = 0; c < LZ_WNC; c++)
            x[j][c] = k < n ? LZ_WLOAD(p, base + (LZ_KV_TILED ? (long)LZ_KV_TOKEN(t0 + k) : (long)k * LZ_HEAD_DIM) +
                                          LZ_KV_DIM(vo * LZ_WD + c * LZ_WC)) : LZ_WZERO;
    }
}

__kernel void lz_decode_warp(LZ_DECODE_PARAMS) {
    __local float4 q0_l[LZ_WR * LZ_WQ4];          /* the heads' query as given */
    __local float part_l[LZ_WNVO * LZ_WPS];       /* partial dot products [vo][key * LZ_WR + head] */
    __local float sc_l[LZ_WNP], p_l[LZ_WNP];      /* scores, probabilities [key * LZ_WR + head] */
    __local float a_l[LZ_WR];                     /* the batch's rescale factor per head */
    __local float comb_l[LZ_WKG * LZ_HEAD_DIM];   /* the key groups' sums of one head */
    __local float2 ml_l[LZ_WNP];                  /* the pair owners' (max, sum) at the end */
    __local float qrot_l[LZ_WR * LZ_WD * LZ_FWG]; /* each work-item's rotated query dims */
    __local int qp_l;

    const int lid = get_local_id(0), vo = lid % LZ_WNVO, kg = lid / LZ_WNVO;
    const int split = get_group_id(0), seq = get_group_id(2);
    const int kvh = get_group_id(1) / (LZ_G / LZ_WR), h0 = kvh * LZ_G + get_group_id(1) % (LZ_G / LZ_WR) * LZ_WR;
    const int begin = seq_offsets[seq], end = seq_offsets[seq + 1];
    const int bad_table = LZ_SPLIT_OFFSETS_BAD(begin, end, n_table, entries_per_split * n_splits);
    if (bad_table && split == 0 && lid == 0 && h0 == kvh * LZ_G) lz_raise(err, LZ_ERR_TABLE);
    const int first = bad_table ? 0 : begin + split * entries_per_split;
    const int last = bad_table ? 0 : min(end, first + entries_per_split);
    const int nb = max(last - first, 0) * LZ_WBPE; /* batches: uniform */

    for (int i = lid; i < LZ_WR * LZ_WQ4; i += LZ_FWG)
        q0_l[i] = lz_io_load4(q, ((size_t)seq * n_q_heads + h0 + i / LZ_WQ4) * LZ_HEAD_DIM + 4 * (i % LZ_WQ4), q_dtype);
    if (lid == 0) {
        int qp = q_pos[seq];
        if (!LZ_POSITION_OK(qp)) { /* recorded; the query sees no key */
            if (split == 0 && h0 == kvh * LZ_G) lz_raise(err, LZ_ERR_QUERY_POSITION);
            qp = -1;
        }
        qp_l = qp;
    }
    /* the table words of batches 0, 1 and 2's entries (a word two batches ahead) */
    ulong w0 = 0, w1 = 0, w2 = 0;
    int p0 = 0, p1 = 0, p2 = 0;
    if (first < last) w0 = table[first], p0 = entry_pos[first];
    if (1 < nb) {
        const int e1 = first + 1 / LZ_WBPE;
        w1 = table[e1], p1 = entry_pos[e1];
    }
    if (2 < nb) {
        const int e2 = first + 2 / LZ_WBPE;
        w2 = table[e2], p2 = entry_pos[e2];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int qp = qp_l;

    float4 qr[LZ_WR][LZ_W4], acc[LZ_WR][LZ_W4];
#pragma unroll
    for (int h = 0; h < LZ_WR; h++)
#pragma unroll
        for (int c = 0; c < LZ_W4; c++) qr[h][c] = q0_l[h * LZ_WQ4 + vo * LZ_W4 + c], acc[h][c] = (float4)(0.0f);
    int cur_delta = 0;
    /* the pair owners' running maximum, sum and score; slopes */
    float m_own[LZ_WPPI], l_own[LZ_WPPI], s_own[LZ_WPPI], slope[LZ_WPPI];
#pragma unroll
    for (int t = 0; t < LZ_WPPI; t++) {
        const int i = lid + t * LZ_FWG;
        m_own[t] = -INFINITY, l_own[t] = 0.0f, s_own[t] = -INFINITY;
        slope[t] = alibi && i < LZ_WNP ? slopes[h0 + i % LZ_WR] : 0.0f;
    }

    /* batch 0's K rows */
    long base;
    int nvis = lz_dw_visible(w0, p0, 0, qp, kvh, n_kv_heads, n_blocks, &base);
    LZ_WRAW_T xk[LZ_WJN][LZ_WNC], xv[LZ_WJN][LZ_WNC];
    lz_dw_rows(xk, kc, base, 0, nb > 0 ? nvis : 0, kg, vo);

    for (int b = 0; b < nb; b++) { /* uniform */
        const int t0 = b % LZ_WBPE * LZ_WNB;
        if (t0 == 0 && lid == 0) lz_check_entry(w0, p0, n_blocks, err);
        const int delta = LAZYATTN_ENTRY_DELTA(w0);
        if (rope_style != LZ_ROPE_NONE && delta != cur_delta) { /* uniform; no barrier inside */
            /* the work-item's query dims rotated by -delta, from the rows as
             * given: one dim at a time (few registers live) into the
             * work-item's own slots of qrot_l, then into registers */
            __local const float *q0 = (__local const float *)q0_l;
#pragma unroll 1
            for (int c = 0; c < LZ_WD; c++) {
                const int dd = vo * LZ_WD + c;
                const int pr = rope_style == LZ_ROPE_NEOX ? (dd < rot_dim / 2 ? dd : dd - rot_dim / 2) : dd / 2;
                const int2 pd = dd < rot_dim ? lz_rope_pair(pr, rope_style, rot_dim) : (int2)(dd, dd);
                const float2 cs = dd < rot_dim ? lz_rope_cs(-delta, pr, rope_style, rot_dim, freq) : (float2)(1.0f, 0.0f);
#pragma unroll 1
                for (int h = 0; h < LZ_WR; h++) {
                    const float2 x = lz_rotate((float2)(q0[h * LZ_HEAD_DIM + pd.x], q0[h * LZ_HEAD_DIM + pd.y]), cs);
                    qrot_l[(h * LZ_WD + c) * LZ_FWG + lid] = dd == pd.x ? x.x : x.y;
                }
            }
#pragma unroll
            for (int h = 0; h < LZ_WR; h++)
#pragma unroll
                for (int c = 0; c < LZ_W4; c++) {
                    __local const float *y = qrot_l + (h * LZ_WD + 4 * c) * LZ_FWG + lid;
                    qr[h][c] = (float4)(y[0], y[LZ_FWG], y[2 * LZ_FWG], y[3 * LZ_FWG]);
                }
        }
        cur_delta = delta;
        /* 1. V rows of this batch in flight (after the rotation: fewer registers
         * live around its sincos); the next batch's place */
        lz_dw_rows(xv, vc, base, t0, nvis, kg, vo);
        long base_n = 0;
        int nvis_n = 0;
        const int t0_n = (b + 1) % LZ_WBPE * LZ_WNB;
        if (b + 1 < nb) nvis_n = lz_dw_visible(w1, p1, t0_n, qp, kvh, n_kv_heads, n_blocks, &base_n);
#if LZ_WKAHEAD
        LZ_WRAW_T xk_n[LZ_WJN][LZ_WNC];
        lz_dw_rows(xk_n, kc, base_n, t0_n, nvis_n, kg, vo);
#endif
        /* the partial dot products of the work-item's keys */
#pragma unroll
        for (int j = 0; j < LZ_WJN; j++) {
            const int k = kg + j * LZ_WKG;
            float4 f[LZ_W4];
            lz_dw_cvt(xk[j], f);
#pragma unroll
            for (int h = 0; h < LZ_WR; h++) {
                float s = 0.0f;
#pragma unroll
                for (int c = 0; c < LZ_W4; c++) {
                    s = fma(qr[h][c].x, f[c].x, s);
                    s = fma(qr[h][c].y, f[c].y, s);
                    s = fma(qr[h][c].z, f[c].z, s);
                    s = fma(qr[h][c].w, f[c].w, s);
                }
                if (k < LZ_WNB) part_l[vo * LZ_WPS + k * LZ_WR + h] = s;
            }
        }
#if LZ_WKAHEAD
#pragma unroll
        for (int j = 0; j < LZ_WJN; j++)
#pragma unroll
            for (int c = 0; c < LZ_WNC; c++) xk[j][c] = xk_n[j][c];
#else
        lz_dw_rows(xk, kc, base_n, t0_n, nvis_n, kg, vo); /* the next batch's K rows in flight */
#endif
        barrier(CLK_LOCAL_MEM_FENCE);

        /* 2. scores: one work-item per (key, head) */
#pragma unroll
        for (int t = 0; t < LZ_WPPI; t++) {
            const int i = lid + t * LZ_FWG;
            if (i < LZ_WNP) {
                float s = 0.0f;
                for (int v = 0; v < LZ_WNVO; v++) s += part_l[v * LZ_WPS + i];
                const int k = i / LZ_WR;
                s_own[t] = k < nvis ? s * scale + slope[t] * (float)(p0 + t0 + k - qp) : -INFINITY;
                sc_l[i] = s_own[t];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* 3. the running maximum of the pair's head, alpha, the probability */
#pragma unroll
        for (int t = 0; t < LZ_WPPI; t++) {
            const int i = lid + t * LZ_FWG;
            if (i < LZ_WNP) {
                const int h = i % LZ_WR;
                float mx = m_own[t];
                for (int k = 0; k < LZ_WNB; k++) mx = fmax(mx, sc_l[k * LZ_WR + h]);
                const float alpha = mx == -INFINITY ? 1.0f : exp(m_own[t] - mx);
                const float p = s_own[t] == -INFINITY ? 0.0f : exp(s_own[t] - mx);
                l_own[t] = fma(l_own[t], alpha, p);
                m_own[t] = mx;
                p_l[i] = p;
                if (i < LZ_WR) a_l[i] = alpha;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* 4. output: acc = alpha acc + sum p V */
#pragma unroll
        for (int h = 0; h < LZ_WR; h++) {
            const float alpha = a_l[h];
#pragma unroll
            for (int c = 0; c < LZ_W4; c++) acc[h][c] *= alpha;
        }
#pragma unroll
        for (int j = 0; j < LZ_WJN; j++) {
            const int k = kg + j * LZ_WKG;
            float4 f[LZ_W4];
            lz_dw_cvt(xv[j], f);
#pragma unroll
            for (int h = 0; h < LZ_WR; h++) {
                const float p = k < LZ_WNB ? p_l[min(k, LZ_WNB - 1) * LZ_WR + h] : 0.0f;
#pragma unroll
                for (int c = 0; c < LZ_W4; c++) acc[h][c] = fma((float4)(p), f[c], acc[h][c]);
            }
        }

        /* the next batch: its place, and a table word two batches ahead */
        base = base_n, nvis = nvis_n;
        w0 = w1, p0 = p1, w1 = w2, p1 = p2;
        if ((b + 3) % LZ_WBPE == 0 && b + 3 < nb) {
            const int e3 = first + (b + 3) / LZ_WBPE;
            w2 = table[e3], p2 = entry_pos[e3];
        }
    }

    /* the split's partial rows: the pair owners' sums per head; the key
     * groups' output sums, one head at a time */
#pragma unroll
    for (int t = 0; t < LZ_WPPI; t++) {
        const int i = lid + t * LZ_FWG;
        if (i < LZ_WNP) ml_l[i] = (float2)(m_own[t], l_own[t]);
    }
#pragma unroll
    for (int h = 0; h < LZ_WR; h++) {
#pragma unroll
        for (int c = 0; c < LZ_W4; c++) vstore4(acc[h][c], 0, comb_l + kg * LZ_HEAD_DIM + vo * LZ_WD + 4 * c);
        barrier(CLK_LOCAL_MEM_FENCE);
        const size_t part = ((size_t)seq * n_q_heads + h0 + h) * n_splits + split;
        for (int dd = lid; dd < LZ_HEAD_DIM; dd += LZ_FWG) {
            float x = 0.0f;
            for (int g = 0; g < LZ_WKG; g++) x += comb_l[g * LZ_HEAD_DIM + dd];
            part_acc[part * LZ_HEAD_DIM + dd] = x;
        }
        if (lid == 0) {
            float sum = 0.0f;
            for (int k = 0; k < LZ_WNB; k++) sum += ml_l[k * LZ_WR + h].y;
            part_ml[part] = (float2)(ml_l[h].x, sum);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* The splits' reduction for many splits (the warp tile's prefetch 1): as
 * lz_decode_reduce (cl/decode.cl; same arguments and output), spread wider:
 * a work-group per (chunk of LZ_WRD dims, head, sequence) with rp work-items
 * per dim (rp = its work-items / LZ_WRD, the host's choice: the splits, at
 * most LZ_WRPM); in rounds of rp x LZ_WRDU splits, work-item r takes splits
 * r, r + rp, ... of the round (all its loads of a round issued before any
 * is used); the rp work-items' states (cl/softmax_state.h) are merged
 * through local memory. A sequence of hundreds of splits (1 x 32768) no longer waits on
 * one work-item's chain of dependent rounds on a few SMs. The rounds hold
 * no barrier. */
#define LZ_WRD (LZ_HEAD_DIM % 32 == 0 ? 32 : LZ_HEAD_DIM)
#define LZ_WRPM (LZ_WRD >= 256 ? 1 : 256 / LZ_WRD)
#define LZ_WRDU 16
__kernel void lz_decode_warp_reduce(__global const float2 *part_ml, __global const float *part_acc,
                                    __global float *out, int n_splits, int n_q_heads, int n_seqs,
                                    __global float *lse, int has_lse, int out_dtype) {
    __local float num_l[LZ_WRPM * LZ_WRD];
    __local float2 md_l[LZ_WRPM]; /* the work-items' (m, d) of dim 0 */
    const int lid = get_local_id(0), rp = get_local_size(0) / LZ_WRD, r = lid / LZ_WRD;
    const int i = get_group_id(0) * LZ_WRD + lid % LZ_WRD, h = get_group_id(1), seq = get_group_id(2);
    const size_t base = ((size_t)seq * n_q_heads + h) * n_splits;
    float big = -INFINITY, num = 0.0f, den = 0.0f;
    for (int g0 = 0; g0 < n_splits; g0 += rp * LZ_WRDU) {
        float2 ml[LZ_WRDU];
        float a[LZ_WRDU];
#pragma unroll
        for (int u = 0; u < LZ_WRDU; u++) { /* past the last split: no load */
            const int s = g0 + r + u * rp;
            ml[u] = s < n_splits ? part_ml[base + s] : (float2)(-INFINITY, 0.0f);
            a[u] = s < n_splits ? part_acc[(base + s) * LZ_HEAD_DIM + i] : 0.0f;
        }
        LZ_STATE_MERGE(big, den, num, float, LZ_WRDU, ml, a, 1, 0, 0);
    }
    num_l[lid] = num;
    if (lid % LZ_WRD == 0) md_l[r] = (float2)(big, den);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (r == 0) {
        float m = -INFINITY, n = 0.0f, d = 0.0f;
        LZ_STATE_MERGE_LOOP(m, d, n, float, rp, md_l, num_l, LZ_WRD, lid, 0);
        const size_t row = (size_t)seq * n_q_heads + h;
        lz_io_store(d > 0.0f ? n / d : 0.0f, out, row * LZ_HEAD_DIM + i, out_dtype);
        if (has_lse && i == 0) lse[row] = d > 0.0f ? m + log(d) : -INFINITY;
    }
}
