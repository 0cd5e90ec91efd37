/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tiled flash attention of LZ_FR rows over a range of block-table entries:
 * the portable core of lz_prefill (cl/prefill.cl) and lz_prefill_batched
 * (cl/prefill_batched.cl), built once per program with its tile parameters.
 *
 * Rows: row r is query token t0 + r / LZ_G, query head kvh * LZ_G + r % LZ_G;
 * the LZ_G heads of one KV head share every staged K/V tile (GQA).
 * Key tiles: up to LZ_FTK key slots of consecutive entries that share one
 * delta (a block longer than LZ_FTK spans several tiles). The query tile is
 * re-rotated by -delta when the delta changes (once per document), so K and
 * V are staged as stored: q' = R(-delta) q, q' . k_stored = q . R(delta) k.
 * Per key tile (4 barriers): stage K (and V) in local memory with 16-byte
 * loads; each work-item computes a LZ_FRM x LZ_FRN register tile of scores
 * and writes them key-major ([key][row], so 4 rows of a key are one float4)
 * with its rows' partial maxima; then LZ_NPART work-items per row take the
 * row's maximum from the partial maxima and turn a share of its keys into
 * probabilities (each keeps the running maximum of its row and the running
 * sum of its share in registers); each work-item accumulates a LZ_FOM x
 * LZ_FON register tile of the output from float4 loads of the probabilities
 * and V; at the end the shares' sums give each row's sum.
 *
 * Tile parameters (-D, chosen by lib/tuning.c; the host checks the local
 * memory they need):
 *   LZ_G    query heads per KV head       LZ_FR   rows (a multiple of LZ_G)
 *   LZ_FTK  key slots per tile            LZ_FWG  work-items per group
 *   LZ_FRM, LZ_FRN  score register tile (LZ_FRN divides LZ_FTK)
 *   LZ_FOM, LZ_FON  output register tile (LZ_FON a multiple of 4 dividing LZ_HEAD_DIM)
 *   LZ_FKV  1: K and V staged at once in two buffers; 0: V reuses K's buffer
 *   LZ_FPF  1 with LZ_FKV: the next tile's K/V loaded into registers during
 *           this tile; 1 without: V loaded into registers with K (put into
 *           K's buffer after the scores); 2 (without LZ_FKV): the next
 *           tile's K loaded into registers during this tile's output phase;
 *           0: none (V is loaded after the scores)
 *
 * Race freedom: every local buffer is written and read in phases separated
 * by barriers that every work-item reaches (the tile loop is uniform: all
 * work-items compute the same tile bounds from the same table words; the
 * tiles passed over in the table window are passed over by all alike).
 */
#ifndef LZ_G /* defaults: one head per KV head, small tiles (lib/tuning.c always sets them) */
#define LZ_G 1
#endif
#ifndef LZ_FR
#define LZ_FR LZ_G
#endif
#ifndef LZ_FTK
#define LZ_FTK 32
#endif
#ifndef LZ_FWG
#define LZ_FWG 64
#endif
#ifndef LZ_FRM
#define LZ_FRM 1
#endif
#ifndef LZ_FRN
#define LZ_FRN 1
#endif
#ifndef LZ_FOM
#define LZ_FOM 1
#endif
#ifndef LZ_FON
#define LZ_FON 4
#endif
#ifndef LZ_FKV
#define LZ_FKV 1
#endif
#define LZ_QS4 (LZ_HEAD_DIM / 4 + 1) /* padded row stride of the Q and K/V tiles, in float4 */
#define LZ_NRT ((LZ_FR + LZ_FRM - 1) / LZ_FRM)
#define LZ_NKT (LZ_FTK / LZ_FRN)
#define LZ_NORT ((LZ_FR + LZ_FOM - 1) / LZ_FOM)
#define LZ_NODT (LZ_HEAD_DIM / LZ_FON)
#define LZ_NOT (LZ_NORT * LZ_NODT)
#define LZ_OPI ((LZ_NOT + LZ_FWG - 1) / LZ_FWG)
#if LZ_BLOCK <= LZ_FTK
#define LZ_TILE_ENTRIES (LZ_FTK / LZ_BLOCK)
#else
#define LZ_TILE_ENTRIES 1
#endif
#define LZ_NO_KEY 0x7FFFFFFF
/* The softmax's exponential: the device's native one where the host asks
 * for it (-DLZ_NATIVE_EXP, GPUs: a hardware exp2 instead of a correctly
 * rounded software routine on the probability step), else exp(). */
#ifdef LZ_NATIVE_EXP
#define LZ_EXP(x) native_exp(x)
#else
#define LZ_EXP(x) exp(x)
#endif
#ifndef LZ_FPF
#define LZ_FPF 0
#endif
#define LZ_FNEXT (LZ_FPF == 1 && LZ_FKV)   /* the next tile's K/V in registers during this one */
#define LZ_FRV (LZ_FPF == 1 || LZ_FKV)     /* V is loaded into registers with K */
#define LZ_FNEXTK (LZ_FPF == 2 && !LZ_FKV) /* the next tile's K during the output phase */
#if LZ_FPF == 2 && LZ_FKV
#error "LZ_FPF 2 (the next K during the output) is for one K/V buffer (LZ_FKV 0)"
#endif
/* The probability tile: [LZ_FTK][LZ_PS] (key-major), LZ_PR rows (every
 * row a score or output register tile reaches; rows >= LZ_FR hold zeros),
 * the stride padded by 4 (16-byte stores of 4 rows of consecutive keys hit
 * distinct banks); the partial maxima [LZ_NKT][LZ_PS] alike; LZ_NPART
 * work-items per row turn scores into probabilities, LZ_NFI (row, share)
 * pairs per work-item. lib/tuning.c (lz_tile_local_bytes) mirrors these. */
#define LZ_PR0 (LZ_NRT * LZ_FRM > LZ_NORT * LZ_FOM ? LZ_NRT * LZ_FRM : LZ_NORT * LZ_FOM)
#define LZ_PR ((LZ_PR0 + 3) / 4 * 4)
#define LZ_PS (LZ_PR + 4)
#define LZ_NPART (LZ_FWG >= LZ_PR ? LZ_FWG / LZ_PR : 1)
#define LZ_NFI ((LZ_PR * LZ_NPART + LZ_FWG - 1) / LZ_FWG)
/* entries of the table cached in local memory at a time */
#define LZ_TC (4 * LZ_TILE_ENTRIES > 64 ? 4 * LZ_TILE_ENTRIES : 64)

/* Local memory of the core, declared by the kernel and passed in. */
typedef struct lz_flash_local {
    __local float4 *q;    /* [LZ_FR][LZ_QS4] query tile, rotated by -delta */
    __local float4 *k;    /* [LZ_FTK][LZ_QS4] */
    __local float4 *v;    /* [LZ_FTK][LZ_QS4] (== k when LZ_FKV is 0) */
    __local float *p;     /* [LZ_FTK][LZ_PS] scores, then probabilities */
    __local float *pmax;  /* [LZ_NKT][LZ_PS] the score tiles' row maxima */
    __local float *lsum;  /* [LZ_NPART][LZ_PR] the shares' sums of probabilities (at the end) */
    __local float *row;   /* [2][LZ_PR] final maximum of each row, rescale factor of the tile */
    __local int *key_pos; /* [LZ_FTK] logical position of each slot, LZ_NO_KEY if none */
    __local int *row_pos; /* [LZ_PR] query position of each row, -1 if inactive or >= LZ_FR */
    __local ulong *tab;   /* [LZ_TC] table entries c0 .. c0 + LZ_TC - 1 */
    __local int *tpos;    /* [LZ_TC] their entry_pos */
} lz_flash_local;

/* Declares the core's local memory in a kernel (at its top level) and
 * fills `loc` (a lz_flash_local). lib/tuning.c (lz_tile_local_bytes)
 * counts the same arrays. */
#if LZ_FKV
#define LZ_FLASH_V_TILE __local float4 lz_v_tile[LZ_FTK * LZ_QS4];
#define LZ_FLASH_V lz_v_tile
#else
#define LZ_FLASH_V_TILE
#define LZ_FLASH_V lz_k_tile
#endif
#define LZ_FLASH_LOCAL(loc)                                                                    \
    __local float4 lz_q_tile[LZ_FR * LZ_QS4];                                                  \
    __local float4 lz_k_tile[LZ_FTK * LZ_QS4];                                                 \
    LZ_FLASH_V_TILE                                                                            \
    __local float4 lz_p_tile[LZ_FTK * LZ_PS / 4];                                              \
    __local float4 lz_pmax[LZ_NKT * LZ_PS / 4];                                                \
    __local float4 lz_lsum[LZ_NPART * LZ_PR / 4];                                              \
    __local float lz_row[2 * LZ_PR];                                                           \
    __local int lz_key_pos[LZ_FTK];                                                            \
    __local int lz_row_pos[LZ_PR];                                                             \
    __local ulong lz_tab[LZ_TC];                                                               \
    __local int lz_tpos[LZ_TC];                                                                \
    lz_flash_local loc;                                                                        \
    loc.q = lz_q_tile, loc.k = lz_k_tile, loc.v = LZ_FLASH_V;                                  \
    loc.p = (__local float *)lz_p_tile, loc.pmax = (__local float *)lz_pmax;                   \
    loc.lsum = (__local float *)lz_lsum, loc.row = lz_row, loc.key_pos = lz_key_pos;           \
    loc.row_pos = lz_row_pos, loc.tab = lz_tab, loc.tpos = lz_tpos

/* Loads the K (or V) rows of the tile's slots into registers as stored
 * (empty slots are zeros): chunks of 8 elements (16-byte loads of f16, see
 * lz_raw8), a fixed trip count, so every load of a work-item is issued
 * before any is used; lz_put converts them to floats. */
#define LZ_STAGE_CHUNKS (LZ_FTK * (LZ_HEAD_DIM / 8))
#define LZ_NCH ((LZ_STAGE_CHUNKS + LZ_FWG - 1) / LZ_FWG)
inline void lz_fetch(LZ_RAW8_T x[LZ_NCH], __global const LZ_STORE_T *src, __local const ulong *table,
                     int e0, int j0, int n_slots, int kvh, int n_kv_heads, int n_blocks, int lid) {
#pragma unroll
    for (int it = 0; it < LZ_NCH; it++) {
        const int i = lid + it * LZ_FWG;
        const int kk = i / (LZ_HEAD_DIM / 8), c = i % (LZ_HEAD_DIM / 8);
        const int slot = j0 + kk, e = e0 + slot / LZ_BLOCK, tok = slot % LZ_BLOCK;
        x[it] = (LZ_RAW8_T)(0);
        if (i < LZ_STAGE_CHUNKS && kk < n_slots) {
            const ulong w = table[e];
            if (!lz_entry_storage_bad(w, n_blocks) && tok < LAZYATTN_ENTRY_LENGTH(w))
                x[it] = lz_raw8(src, (long)lz_kv_offset(LAZYATTN_ENTRY_BLOCK(w), kvh, n_kv_heads, tok) + LZ_KV_DIM(c * 8));
        }
    }
}

/* Stores what lz_fetch loaded into a local tile. */
inline void lz_put(__local float4 *dst, const LZ_RAW8_T x[LZ_NCH], int lid) {
#pragma unroll
    for (int it = 0; it < LZ_NCH; it++) {
        const int i = lid + it * LZ_FWG;
        const int kk = i / (LZ_HEAD_DIM / 8), c = i % (LZ_HEAD_DIM / 8);
        if (i < LZ_STAGE_CHUNKS) {
            const float8 xf = lz_cvt8(x[it]);
            dst[kk * LZ_QS4 + 2 * c] = xf.lo;
            dst[kk * LZ_QS4 + 2 * c + 1] = xf.hi;
        }
    }
}

/* Logical positions of the slots kk = lid, lid + LZ_FWG, ... of a tile
 * (LZ_NO_KEY where there is no valid key). */
#define LZ_NKP ((LZ_FTK + LZ_FWG - 1) / LZ_FWG)
inline void lz_key_pos(int kp[LZ_NKP], __local const ulong *tab, __local const int *tpos, int te,
                       int tj0, int n_slots, int n_blocks, int lid) {
    for (int it = 0; it < LZ_NKP; it++) {
        const int kk = lid + it * LZ_FWG;
        const int slot = tj0 + kk, ee = te + slot / LZ_BLOCK, tok = slot % LZ_BLOCK;
        kp[it] = LZ_NO_KEY;
        if (kk < LZ_FTK && kk < n_slots) {
            const ulong w = tab[ee];
            const int pos0 = tpos[ee];
            if (!lz_entry_bad(w, pos0, n_blocks) && tok < LAZYATTN_ENTRY_LENGTH(w)) kp[it] = pos0 + tok;
        }
    }
}

/* Pieces of the tile loop of lz_flash (macros over its variables). */
/* Reloads the table window from entry `start` (e, or with LZ_FNEXTK the
 * current tile's first entry, whose V is still to load: the next tile's
 * entries, at most LZ_TILE_ENTRIES past it, fit too) when the next tile's
 * entries are not all in it. */
#define LZ_WINDOW(start)                                                                       \
    if (e < e_last && e + LZ_TILE_ENTRIES > c0 + LZ_TC) {                                      \
        c0 = (start);                                                                          \
        for (int i = lid; i < LZ_TC; i += LZ_FWG)                                              \
            if (c0 + i < e_last) loc.tab[i] = table[c0 + i], loc.tpos[i] = entry_pos[c0 + i];  \
    }
/* Describes the next tile (from the window) and loads its K/V into registers. */
#define LZ_NEXT_TILE()                                                                         \
    have_next = e < e_last;                                                                    \
    if (have_next) {                                                                           \
        __local const ulong *tab = loc.tab - c0; /* indexed by entry */                        \
        __local const int *tpos = loc.tpos - c0;                                               \
        int te, tj0, skip;                                                                     \
        /* a tile in every row's future is skipped: the next ones in the window are            \
         * described (and their entries checked) at once, with no barrier between */          \
        do {                                                                                   \
            next_delta = LAZYATTN_ENTRY_DELTA(tab[e]);                                         \
            int ne = 1, min_pos = tpos[e];                                                     \
            if (lid == 0 && j0 == 0) lz_check_entry(tab[e], min_pos, n_blocks, err);           \
            while (ne < LZ_TILE_ENTRIES && e + ne < e_last &&                                  \
                   LAZYATTN_ENTRY_DELTA(tab[e + ne]) == next_delta) {                          \
                const int pos0 = tpos[e + ne];                                                 \
                if (lid == 0) lz_check_entry(tab[e + ne], pos0, n_blocks, err);                \
                min_pos = min(min_pos, pos0);                                                  \
                ne++;                                                                          \
            }                                                                                  \
            next_slots = LZ_BLOCK <= LZ_FTK ? ne * LZ_BLOCK : min(LZ_FTK, LZ_BLOCK - j0);      \
            te = e, tj0 = j0;                                                                  \
            if (LZ_BLOCK <= LZ_FTK || j0 + LZ_FTK >= LZ_BLOCK) {                               \
                e += ne;                                                                       \
                j0 = 0;                                                                        \
            } else {                                                                           \
                j0 += LZ_FTK;                                                                  \
            }                                                                                  \
            skip = min_pos > max_pos - tj0 && min_pos >= 0;                                    \
        } while (skip && e < e_last && e + LZ_TILE_ENTRIES <= c0 + LZ_TC);                     \
        tile_e = te, tile_j0 = tj0;                                                            \
        if (skip) next_slots = 0; /* the last one described: its barriers still reached */    \
        lz_key_pos(kp, tab, tpos, te, tj0, next_slots, n_blocks, lid);                         \
        lz_fetch(rk, kc, tab, te, tj0, next_slots, kvh, n_kv_heads, n_blocks, lid);            \
        LZ_FETCH_V();                                                                          \
    }
#if LZ_FRV
#define LZ_FETCH_V() lz_fetch(rv, vc, tab, te, tj0, next_slots, kvh, n_kv_heads, n_blocks, lid)
#else
#define LZ_FETCH_V()
#endif
#if LZ_FKV
#define LZ_PUT_V() lz_put(loc.v, rv, lid)
#else
#define LZ_PUT_V()
#endif
/* Stages the current tile: slot positions, K (and V), the query re-rotated
 * by -delta when the delta changed. */
#define LZ_STAGE()                                                                             \
    for (int it = 0; it < LZ_NKP; it++)                                                        \
        if (lid + it * LZ_FWG < LZ_FTK) loc.key_pos[lid + it * LZ_FWG] = kp[it];               \
    lz_put(loc.k, rk, lid);                                                                    \
    LZ_PUT_V();                                                                                \
    if (rope_style != LZ_ROPE_NONE && delta != cur_delta) {                                    \
        for (int i = lid; i < LZ_FR * (LZ_HEAD_DIM / 2); i += LZ_FWG) {                        \
            const int r = i / (LZ_HEAD_DIM / 2), pr = i % (LZ_HEAD_DIM / 2), t = t0 + r / LZ_G; \
            const int2 d = lz_rope_pair(pr, rope_style, rot_dim);                              \
            float2 x = (float2)(0.0f);                                                         \
            if (t < t_end) {                                                                   \
                __global const float *qr =                                                     \
                    q + ((size_t)t * n_q_heads + kvh * LZ_G + r % LZ_G) * LZ_HEAD_DIM;         \
                x = lz_rotate((float2)(qr[d.x], qr[d.y]),                                      \
                              lz_rope_cs(-delta, pr, rope_style, rot_dim, freq));              \
            }                                                                                  \
            qf[r * 4 * LZ_QS4 + d.x] = x.x;                                                    \
            qf[r * 4 * LZ_QS4 + d.y] = x.y;                                                    \
        }                                                                                      \
        cur_delta = delta;                                                                     \
    }

/* Runs the core over entries [e_first, e_last) for the rows of tokens
 * t0 .. t0 + LZ_FR / LZ_G - 1 (those below t_end are active) of KV head kvh.
 * Leaves in acc[o][m] the unnormalised output of output tile o's row m
 * (tile lid + o * LZ_FWG), each row's maximum in loc.row[0..LZ_FR) and the
 * LZ_NPART shares of each row's sum in loc.lsum. */
inline void lz_flash(__global const float *q, __global const int *q_pos,
                     __global const ulong *table, __global const int *entry_pos,
                     __global const LZ_STORE_T *kc, __global const LZ_STORE_T *vc,
                     __global const float2 *freq, __global const float *slopes, int rope_style,
                     int rot_dim, int alibi, float scale, int n_q_heads, int n_kv_heads,
                     int n_blocks, __global int *err, int t0, int t_end, int kvh, int e_first,
                     int e_last, int q_dtype, lz_flash_local loc,
                     float4 acc[LZ_OPI][LZ_FOM][LZ_FON / 4]) {
    const int lid = get_local_id(0);
    __local float *a_row = loc.row + LZ_PR;
    __local float *qf = (__local float *)loc.q;
    __local float4 *p4 = (__local float4 *)loc.p;
    __local float4 *pmax4 = (__local float4 *)loc.pmax;

    /* rows: positions (-1 past LZ_FR), the query tile at delta 0 */
    for (int r = lid; r < LZ_PR; r += LZ_FWG) {
        const int t = t0 + r / LZ_G;
        int qp = r < LZ_FR && t < t_end ? q_pos[t] : -1;
        if (r < LZ_FR && t < t_end && !LZ_POSITION_OK(qp)) { /* recorded; that query sees no key */
            lz_raise(err, LZ_ERR_QUERY_POSITION);
            qp = -1;
        }
        loc.row_pos[r] = qp;
    }
    for (int i = lid; i < LZ_FR * (LZ_HEAD_DIM / 4); i += LZ_FWG) {
        const int r = i / (LZ_HEAD_DIM / 4), c = i % (LZ_HEAD_DIM / 4), t = t0 + r / LZ_G;
        loc.q[r * LZ_QS4 + c] =
            t < t_end ? lz_io_load4(q, ((size_t)t * n_q_heads + kvh * LZ_G + r % LZ_G) * LZ_HEAD_DIM + 4 * c, q_dtype)
                      : (float4)(0.0f);
    }
    for (int o = 0; o < LZ_OPI; o++)
        for (int m = 0; m < LZ_FOM; m++)
            for (int c = 0; c < LZ_FON / 4; c++) acc[o][m][c] = (float4)(0.0f);
    /* the running maximum and sum of each (row, share) pair of this
     * work-item: every share of a row computes the same maxima (and
     * rescale factors) from the same partial maxima */
    float mrun[LZ_NFI], lrun[LZ_NFI];
#pragma unroll
    for (int j = 0; j < LZ_NFI; j++) mrun[j] = -INFINITY, lrun[j] = 0.0f;

    /* Tiles: entries e .. e + ne - 1 of one delta (slots j0 .. of them);
     * the table window (entries c0 .. c0 + LZ_TC - 1) in local memory,
     * written only in the output phase (the staging phase with LZ_FNEXT,
     * the score phase with LZ_FNEXTK) and read after the next barrier.
     * With LZ_FNEXT the next tile's K/V are loaded into registers while
     * the current one is computed, with LZ_FNEXTK the next K during the
     * output phase. Every loop below has a uniform trip count and no
     * `continue`/`break` past a barrier: PoCL 3.1 miscompiles a loop whose
     * (uniform) continue skips its barriers (the old kernels' block-size-1
     * bug, issue 10 class 6). */
    int e = e_first, j0 = 0, c0 = e_first - LZ_TC; /* no entry cached yet */
    int n_slots = 0, delta = 0, next_slots = 0, next_delta = 0, tile_e = 0, tile_j0 = 0;
    int kp[LZ_NKP];
    LZ_RAW8_T rk[LZ_NCH];
#if LZ_FRV
    LZ_RAW8_T rv[LZ_NCH];
#endif
    LZ_WINDOW(e);
    barrier(CLK_LOCAL_MEM_FENCE);
    int max_pos = -1;
    for (int r = 0; r < LZ_FR; r++) max_pos = max(max_pos, loc.row_pos[r]);
    int cur_delta = 0;
#if LZ_FNEXT
    int have_next = 0;
    LZ_NEXT_TILE();
    while (have_next) {
        barrier(CLK_LOCAL_MEM_FENCE);
        n_slots = next_slots, delta = next_delta;
        LZ_STAGE();
        LZ_WINDOW(e);
        barrier(CLK_LOCAL_MEM_FENCE);
        LZ_NEXT_TILE();
#elif LZ_FNEXTK
    int have_next = 0;
    LZ_NEXT_TILE();
    while (have_next) {
        barrier(CLK_LOCAL_MEM_FENCE);
        n_slots = next_slots, delta = next_delta;
        LZ_STAGE();
        barrier(CLK_LOCAL_MEM_FENCE);
        LZ_WINDOW(tile_e);
#else
    int have_next = 1;
    while (e < e_last) {
        barrier(CLK_LOCAL_MEM_FENCE);
        LZ_NEXT_TILE();
        n_slots = next_slots, delta = next_delta;
        LZ_STAGE();
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        /* ---- scores: register tiles of LZ_FRM rows x LZ_FRN keys, key-major,
         * with each tile's row maxima ---- */
        const int n_score = n_slots > 0 ? LZ_NRT * LZ_NKT : 0; /* a skipped tile computes nothing */
        for (int st = lid; st < n_score; st += LZ_FWG) {
            const int kt = st % LZ_NKT, rt = st / LZ_NKT;
            float s[LZ_FRM][LZ_FRN];
            for (int m = 0; m < LZ_FRM; m++)
                for (int n = 0; n < LZ_FRN; n++) s[m][n] = 0.0f;
            for (int d = 0; d < LZ_HEAD_DIM / 4; d++) {
                float4 a[LZ_FRM], b[LZ_FRN];
                for (int m = 0; m < LZ_FRM; m++) a[m] = loc.q[min(rt * LZ_FRM + m, LZ_FR - 1) * LZ_QS4 + d];
                for (int n = 0; n < LZ_FRN; n++) b[n] = loc.k[(kt + n * LZ_NKT) * LZ_QS4 + d];
                for (int m = 0; m < LZ_FRM; m++)
                    for (int n = 0; n < LZ_FRN; n++) {
                        float x = s[m][n];
                        x = fma(a[m].x, b[n].x, x);
                        x = fma(a[m].y, b[n].y, x);
                        x = fma(a[m].z, b[n].z, x);
                        s[m][n] = fma(a[m].w, b[n].w, x);
                    }
            }
            float rm[LZ_FRM];
            for (int m = 0; m < LZ_FRM; m++) {
                const int r = rt * LZ_FRM + m; /* < LZ_PR; row_pos -1 past LZ_FR */
                const int qp = loc.row_pos[r];
                const float slope = alibi ? slopes[kvh * LZ_G + r % LZ_G] : 0.0f;
                rm[m] = -INFINITY;
                for (int n = 0; n < LZ_FRN; n++) {
                    const int kp = loc.key_pos[kt + n * LZ_NKT];
                    const float x = kp <= qp ? s[m][n] * scale + slope * (float)(kp - qp) : -INFINITY;
                    s[m][n] = x;
                    rm[m] = fmax(rm[m], x);
                }
            }
#if LZ_FRM % 4 == 0
            for (int j = 0; j < LZ_FRM / 4; j++) {
                const int r4 = (rt * LZ_FRM) / 4 + j;
                for (int n = 0; n < LZ_FRN; n++)
                    p4[(kt + n * LZ_NKT) * (LZ_PS / 4) + r4] =
                        (float4)(s[4 * j][n], s[4 * j + 1][n], s[4 * j + 2][n], s[4 * j + 3][n]);
                pmax4[kt * (LZ_PS / 4) + r4] = (float4)(rm[4 * j], rm[4 * j + 1], rm[4 * j + 2], rm[4 * j + 3]);
            }
#else
            for (int m = 0; m < LZ_FRM; m++) {
                const int r = rt * LZ_FRM + m;
                for (int n = 0; n < LZ_FRN; n++) loc.p[(kt + n * LZ_NKT) * LZ_PS + r] = s[m][n];
                loc.pmax[kt * LZ_PS + r] = rm[m];
            }
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* ---- probabilities: LZ_NPART work-items per row, each the row's new
         * maximum (from the partial maxima) and a share of its keys; the
         * rescale factor of the row; V staged meanwhile (its loads issued
         * first, in flight during the probabilities) ---- */
#if !LZ_FRV
        lz_fetch(rk, vc, loc.tab - c0, tile_e, tile_j0, n_slots, kvh, n_kv_heads, n_blocks, lid);
#endif
#pragma unroll
        for (int j = 0; j < LZ_NFI; j++) {
            const int i = lid + j * LZ_FWG, r = i % LZ_PR, part = i / LZ_PR;
            if (i < LZ_PR * LZ_NPART) {
                const int live = n_slots > 0 && r < LZ_FR;
                float tmax = -INFINITY;
                if (live)
                    for (int kt = 0; kt < LZ_NKT; kt++) tmax = fmax(tmax, loc.pmax[kt * LZ_PS + r]);
                const float m_old = mrun[j], m_new = fmax(m_old, tmax);
                const float alpha = m_new == -INFINITY ? 1.0f : LZ_EXP(m_old - m_new);
                mrun[j] = m_new;
                float sum = 0.0f;
                for (int kk = part; kk < LZ_FTK; kk += LZ_NPART) {
                    const float x = live ? loc.p[kk * LZ_PS + r] : -INFINITY;
                    const float pv = x == -INFINITY ? 0.0f : LZ_EXP(x - m_new);
                    loc.p[kk * LZ_PS + r] = pv;
                    sum += pv;
                }
                lrun[j] = lrun[j] * alpha + sum;
                if (part == 0) a_row[r] = alpha;
            }
        }
#if !LZ_FKV /* V into the K tile (the scores are done with it) */
#if LZ_FRV
        lz_put(loc.k, rv, lid);
#else
        lz_put(loc.k, rk, lid);
#endif
#endif
        barrier(CLK_LOCAL_MEM_FENCE);

#if LZ_FNEXTK
        LZ_NEXT_TILE(); /* the next K in flight during the output */
#endif

        /* ---- output: register tiles of LZ_FOM rows x LZ_FON dims ---- */
        for (int o = 0; o < LZ_OPI; o++) {
            const int ot = min(lid + o * LZ_FWG, LZ_NOT - 1); /* extra work-items repeat the last tile */
            const int dt = ot % LZ_NODT, rt = ot / LZ_NODT; /* rows rt * LZ_FOM .. < LZ_PR */
            for (int m = 0; m < LZ_FOM; m++) {
                const float alpha = a_row[rt * LZ_FOM + m];
                for (int c = 0; c < LZ_FON / 4; c++) acc[o][m][c] *= alpha;
            }
            /* every slot of the tile (a fixed trip count the compiler unrolls
             * and pipelines): past n_slots the probabilities are zeros and
             * the staged rows zeros too */
            if (n_slots > 0)
#pragma unroll 8
            for (int kk = 0; kk < LZ_FTK; kk++) {
                float pm[LZ_FOM];
#if LZ_FOM % 4 == 0
                for (int j = 0; j < LZ_FOM / 4; j++) {
                    const float4 x = p4[kk * (LZ_PS / 4) + (rt * LZ_FOM) / 4 + j];
                    pm[4 * j] = x.x, pm[4 * j + 1] = x.y, pm[4 * j + 2] = x.z, pm[4 * j + 3] = x.w;
                }
#else
                for (int m = 0; m < LZ_FOM; m++) pm[m] = loc.p[kk * LZ_PS + rt * LZ_FOM + m];
#endif
                for (int c = 0; c < LZ_FON / 4; c++) {
                    const float4 x = loc.v[kk * LZ_QS4 + dt + c * LZ_NODT];
                    for (int m = 0; m < LZ_FOM; m++) acc[o][m][c] = fma((float4)(pm[m]), x, acc[o][m][c]);
                }
            }
        }
#if !LZ_FNEXT && !LZ_FNEXTK
        LZ_WINDOW(e); /* the table is read again after the next barrier */
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* each row's final maximum (for the log-sum-exp) and its shares' sums */
#pragma unroll
    for (int j = 0; j < LZ_NFI; j++) {
        const int i = lid + j * LZ_FWG;
        if (i < LZ_PR * LZ_NPART) loc.lsum[i] = lrun[j]; /* [part][row], i = part * LZ_PR + row */
        if (i < LZ_PR) loc.row[i] = mrun[j];              /* share 0 of row i */
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* The rows' outputs (acc / l, l the sum of the row's shares in loc.lsum;
 * zeros for a row that saw no key) in out_dtype (lz_io_store4), and with
 * has_lse each row's log-sum-exp of its scores, m + log(l) (the maximum
 * lz_flash leaves in loc.row), -INFINITY for a row that saw no key; rows
 * t0 + r / LZ_G below t_end only. */
inline void lz_flash_store(__global float *out, __global float *lse, int has_lse, int out_dtype,
                           int t0, int t_end, int kvh, int n_q_heads, lz_flash_local loc,
                           float4 acc[LZ_OPI][LZ_FOM][LZ_FON / 4]) {
    const int lid = get_local_id(0);
    for (int o = 0; o < LZ_OPI; o++) {
        const int ot = lid + o * LZ_FWG, dt = ot % LZ_NODT, rt = ot / LZ_NODT;
        for (int m = 0; m < LZ_FOM; m++) {
            const int r = rt * LZ_FOM + m, t = t0 + r / LZ_G;
            if (ot < LZ_NOT && r < LZ_FR && t < t_end) {
                float l = 0.0f;
                for (int part = 0; part < LZ_NPART; part++) l += loc.lsum[part * LZ_PR + r];
                const float inv = l > 0.0f ? 1.0f / l : 0.0f;
                const size_t row = (size_t)t * n_q_heads + kvh * LZ_G + r % LZ_G;
                for (int c = 0; c < LZ_FON / 4; c++)
                    lz_io_store4(acc[o][m][c] * inv, out, row * LZ_HEAD_DIM + 4 * (dt + c * LZ_NODT), out_dtype);
                if (has_lse && dt == 0) lse[row] = l > 0.0f ? loc.row[r] + log(l) : -INFINITY;
            }
        }
    }
}
