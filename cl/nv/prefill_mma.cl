/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVIDIA prefill whose work-group copies its own tiles (after
 * prefill_common.h): every warp issues cp.async copies of a K and a V tile
 * into two slots each, looked up a round ahead, and computes; one barrier a
 * tile. In round j the scores of tile j + 1 go to the tensor cores before
 * the softmax and P V of tile j, while K of tile j + 2 and V of tile j + 1
 * are in flight. The products on mma.sync, or on wgmma (LZ_NV_WGMMA) where
 * the producer's rings do not fit.
 */

/* First tile at or after i with an entry some row can see (start <= max_pos). */
inline int lz_nv_next_tile(int i, int n_tiles, int n_entries, __global const int *entry_pos,
                           int max_pos) {
    for (; i < n_tiles; i++)
        for (int k = 0; k < LZ_NV_EPT; k++) {
            const int e = i * LZ_NV_EPT + k;
            if (e < n_entries && entry_pos[e] <= max_pos) return i;
        }
    return n_tiles;
}

/* Where this thread's 16-byte chunks of tile `tile` come from: an element
 * offset into the K or V pool (the same for both), or -1 for a key past its
 * entry's length, a bad entry, or no tile (tile >= n_tiles). Threads
 * lid < LZ_NV_EPT also return the entry (start, delta, length, tile) that the
 * compute side reads from local memory. */
__attribute__((always_inline)) inline void
lz_nv_lookup(long src[LZ_NV_CPT], int4 *meta, int tile, int n_tiles, __global const ulong *table,
             __global const int *entry_pos, int kvh, int n_kv_heads, int n_entries, int n_blocks,
             int lid) {
#pragma unroll
    for (int i = 0; i < LZ_NV_CPT; i++) {
        const int c = lid + i * LZ_NV_THREADS, r = LZ_NV_CROW(c), ch = LZ_NV_CCOL(c);
        src[i] = -1;
        if (tile < n_tiles && c < LZ_NV_CHUNKS) {
            const lz_nv_entry en =
                lz_nv_get_entry(table, entry_pos, tile * LZ_NV_EPT + r / LZ_BLOCK, n_entries, n_blocks);
            const int j = r % LZ_BLOCK;
            if (j < en.len) src[i] = (long)lz_kv_offset(en.blk, kvh, n_kv_heads, j) + LZ_KV_DIM(ch * 8);
        }
    }
    if (lid < LZ_NV_EPT && tile < n_tiles) {
        const lz_nv_entry en = lz_nv_get_entry(table, entry_pos, tile * LZ_NV_EPT + lid, n_entries, n_blocks);
        *meta = (int4)(en.pos0, en.delta, en.len, tile);
    }
}

/* Issues the cp.async copies of one K (is_k) or V tile (chunks from src,
 * see lz_nv_lookup) into the slot at shared address dst; padding keys are
 * zero-filled so that masked probabilities never meet garbage. */
__attribute__((always_inline)) inline void lz_nv_issue(uint dst, __global const ushort *pool,
                                                       const long src[LZ_NV_CPT], int is_k, int lid) {
#pragma unroll
    for (int i = 0; i < LZ_NV_CPT; i++) {
        const int c = lid + i * LZ_NV_THREADS, r = LZ_NV_CROW(c), ch = LZ_NV_CCOL(c);
        if (c < LZ_NV_CHUNKS)
            lz_nv_cp16(dst + (is_k ? LZ_NV_KOFF(r, ch) : LZ_NV_VOFF(r, ch)), pool + (src[i] < 0 ? 0 : src[i]),
                       src[i] >= 0);
    }
}

/* cp.async copies of this thread have landed (at most `pending` groups of
 * it still in flight), visible to wgmma's reads after the next barrier. */
#if LZ_NV_WGMMA
#define LZ_NV_LANDED(pending) do { LZ_NV_CP_WAIT(pending); LZ_NV_PROXY_FENCE(); } while (0)
#else
#define LZ_NV_LANDED(pending) LZ_NV_CP_WAIT(pending)
#endif


/* lz_prefill_nv_rows (LZ_NV_ROWS_PARAMS) with the work-group's own copies. */
__attribute__((always_inline)) inline void lz_prefill_nv_rows(LZ_NV_ROWS_PARAMS) {
    LZ_NV_ROWS_BEGIN();

    /* The visible tiles t_0, t_1, ... in order; round j consumes t_j with
     * K(t_j) in K slot j % 2, V(t_j) in V slot j % LZ_NV_VSLOTS, entries in meta[j % 4].
     * cur = t_j, nxt = t_j+1, kis = t_j+2 (the next K tile to issue), with
     * ksrc its chunk sources and kmeta its entry; vsrc: V of t_j+1. */
    const uint kbase = LZ_NV_SMEM(kring), vbase = LZ_NV_SMEM(vring);
    const int n_tiles = (n_entries + LZ_NV_EPT - 1) / LZ_NV_EPT;
    int cur = max_pos < 0 ? n_tiles : lz_nv_next_tile(0, n_tiles, n_entries, entry_pos, max_pos);
    int nxt = cur < n_tiles ? lz_nv_next_tile(cur + 1, n_tiles, n_entries, entry_pos, max_pos) : n_tiles;

    LZ_NV_WARP_STATE(-INFINITY);

    long ksrc[LZ_NV_CPT], vsrc[LZ_NV_CPT];
    int4 kmeta = (int4)(0, 0, 0, 0);
    /* prologue: K(t_0); then K(t_1) and V(t_0) */
    lz_nv_lookup(ksrc, &kmeta, cur, n_tiles, table, entry_pos, kvh, n_kv_heads, n_entries, n_blocks, lid);
    if (lid < LZ_NV_EPT) meta[0][lid] = kmeta;
    if (cur < n_tiles) lz_nv_issue(kbase, kc, ksrc, 1, lid);
    LZ_NV_CP_COMMIT();
#pragma unroll
    for (int i = 0; i < LZ_NV_CPT; i++) vsrc[i] = ksrc[i];
    lz_nv_lookup(ksrc, &kmeta, nxt, n_tiles, table, entry_pos, kvh, n_kv_heads, n_entries, n_blocks, lid);
    if (lid < LZ_NV_EPT) meta[1][lid] = kmeta;
    if (nxt < n_tiles) lz_nv_issue(kbase + LZ_NV_MAT_BYTES, kc, ksrc, 1, lid);
    if (cur < n_tiles) lz_nv_issue(vbase, vc, vsrc, 0, lid);
    LZ_NV_CP_COMMIT();
#pragma unroll
    for (int i = 0; i < LZ_NV_CPT; i++) vsrc[i] = ksrc[i];
    int kis = nxt < n_tiles ? lz_nv_next_tile(nxt + 1, n_tiles, n_entries, entry_pos, max_pos) : n_tiles;
    lz_nv_lookup(ksrc, &kmeta, kis, n_tiles, table, entry_pos, kvh, n_kv_heads, n_entries, n_blocks, lid);

    LZ_NV_LANDED(1);
    barrier(CLK_LOCAL_MEM_FENCE);
    float sc[LZ_NV_KT / 8][4];
    int full = 1;
    if (cur < n_tiles)
        full = lz_nv_scores(sc, qf, &cur_delta, &n_rel, kbase, meta[0], min_pos, qrow0, qrow1, lane,
                            rope_style, rot_dim, freq, 0, LZ_NV_DECIDE_HERE);
    lz_nv_scores_wait(sc, o);

    for (int j = 0; cur < n_tiles; j++) {
        /* K(t_j+1) and V(t_j) have landed; every warp is past round j - 1,
         * so K slot j % 2 (t_j, scored) and V slot (j + 1) % LZ_NV_VSLOTS are
         * free: t_j-1's */
        LZ_NV_LANDED(0);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < LZ_NV_EPT) meta[(j + 2) % LZ_NV_META][lid] = kmeta;
        if (kis < n_tiles)
            lz_nv_issue(kbase + (j & 1) * LZ_NV_MAT_BYTES, kc, ksrc, 1, lid);
        if (nxt < n_tiles)
            lz_nv_issue(vbase + LZ_NV_VSLOT(j + 1), vc, vsrc, 0, lid);
        LZ_NV_CP_COMMIT();

        /* scores of t_j+1 go to the tensor cores first ... */
        float sn[LZ_NV_KT / 8][4];
        int full_n = 1;
        if (nxt < n_tiles)
            full_n = lz_nv_scores(sn, qf, &cur_delta, &n_rel, kbase + ((j + 1) & 1) * LZ_NV_MAT_BYTES,
                                  meta[(j + 1) % LZ_NV_META], min_pos, qrow0, qrow1, lane,
                                  rope_style, rot_dim, freq, 0, LZ_NV_DECIDE_HERE);
        /* ... the addresses of t_j+3 are looked up while they run ... */
#pragma unroll
        for (int i = 0; i < LZ_NV_CPT; i++) vsrc[i] = ksrc[i];
        const int kis_n = kis < n_tiles ? lz_nv_next_tile(kis + 1, n_tiles, n_entries, entry_pos, max_pos) : n_tiles;
        lz_nv_lookup(ksrc, &kmeta, kis_n, n_tiles, table, entry_pos, kvh, n_kv_heads, n_entries,
                     n_blocks, lid);

        /* ... and tile t_j is finished: mask, online softmax, P.V */
        if (!full) lz_nv_mask(sc, meta[j % LZ_NV_META], qp0, qp1, t4);
        const uint vb = vbase + LZ_NV_VSLOT(j);
#if LZ_NV_WGMMA
        {
            /* O += P V as KT / 16 asynchronous wgmma m64nDk16 (A = P from
             * registers), waited for with the scores of t_j+1 below */
            uint pa[LZ_NV_KT / 16][4];
            LZ_NV_SOFTMAX_P(LZ_NV_KT, sc, o, m0, m1, l0, l1, sl2, pa);
            LZ_NV_PV_ISSUE(o, pa, vb);
        }
#else
        LZ_NV_SOFTMAX_PV_OFF(LZ_NV_KT, sc, o, m0, m1, l0, l1, sl2, vb, lane, LZ_NV_VOFF);
#endif

        lz_nv_scores_wait(sn, o);
#pragma unroll
        for (int n = 0; n < LZ_NV_KT / 8; n++)
#pragma unroll
            for (int u = 0; u < 4; u++) sc[n][u] = sn[n][u];
        full = full_n;
        cur = nxt;
        nxt = kis;
        kis = kis_n;
    }
    LZ_NV_CP_WAIT(0);

    LZ_NV_STORE_O(o, l0, l1, out, r0, r1, n_queries, n_q_heads, h, t4);
}

