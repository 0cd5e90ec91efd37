/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The consumer warps of the wgmma prefill with its producer (after
 * prefill_common.h and prefill_producer.h): with 8 or 12 warps the
 * ping-pong of their warpgroups (lz_nv_consume), with 4 one loop that
 * scores tile j + 1 while tile j's softmax and P V run.
 */
/* x, the same in every lane of the warp, as the compiler then knows it
 * (redux.sync's result, a uniform register): the persistent kernel's ring
 * counters, carried from task to task, pass through it, else ptxas keeps
 * the slots' addresses and the entries in per-lane registers. */
#if LZ_NV_PERSIST
inline int lz_nv_uniform(int x) {
    asm("redux.sync.max.s32 %0, %0, 0xffffffff;" : "+r"(x));
    return x;
}
#define LZ_NV_UNIFORM(x) lz_nv_uniform(x)
#else
#define LZ_NV_UNIFORM(x) (x)
#endif
/* A consumer warp of the ping-pong (with the producer), one task: rows r0 and
 * r0 + 8 (positions qp0, qp1; min_pos the earliest of the work-group's rows)
 * of query head h over the task's items of the K ring from *kn (its tiles,
 * then its end marker) and its tiles of the V ring from *vn, both moved past
 * them (lz_nv_produce numbers them alike); O's rows stored into out. */
__attribute__((always_inline)) inline void
lz_nv_consume(__global const float *q, __global float *out, __global const float2 *freq, int rope_style,
              int rot_dim, float scale, int n_queries, int n_q_heads, int h, int r0, int qp0, int qp1,
              int min_pos, uint kbase, uint vbase, __local int4 (*meta)[LZ_NV_EPT], uint bars, int warp,
              int *kn, int *vn) {
    const int lane = get_local_id(0) & 31, t4 = lane & 3, r1 = r0 + 8;
    /* the maxima start finite: no test for -inf a round */
    LZ_NV_WARP_STATE(LZ_NV_M_NONE);
    /* V slot 0's descriptor, made once; slot s's has its address field s
     * tiles on (addresses under 256 KB: the field does not carry over) */
    const ulong vdesc0 = lz_nv_wg_vdesc(vbase);

    /* Round j consumes item j of the producer (lz_nv_produce): before its
     * turn a warpgroup waits for K of item j + 1 and V of item j; in its turn
     * it issues the scores of j + 1 and O += P(j) V; after it, wait_group 1
     * gives the K slot back and the softmax of j + 1 runs while P V does,
     * then wait_group 0 gives the V slot back. */
    /* the scores defined before any wgmma, also for a task without tiles:
     * left undefined, the value of the task before flowed in, and ptxas
     * serialized every wgmma of the persistent kernel (C7515) */
    float sc[LZ_NV_KT / 8][4];
#pragma unroll
    for (int n = 0; n < LZ_NV_KT / 8; n++) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
    int full = 1;
    const int k0 = LZ_NV_UNIFORM(*kn), v0 = LZ_NV_UNIFORM(*vn);
    lz_nv_mbar_wait(LZ_NV_KFULL(bars, k0 % LZ_NV_KSLOTS), (uint)(k0 / LZ_NV_KSLOTS) & 1);
    __local const int4 *mfirst = meta[k0 % LZ_NV_NMETA];
    int has = mfirst[0].w >= 0; /* the task's first item is a tile, not its end marker */
    if (has) {
        if (LZ_NV_CFENCE) LZ_NV_PROXY_FENCE(); /* the producer's copies, seen by wgmma */
        full = lz_nv_scores(sc, qf, &cur_delta, &n_rel, kbase + (k0 % LZ_NV_KSLOTS) * LZ_NV_MAT_BYTES, mfirst,
                            min_pos, qrow0, qrow1, lane, rope_style, rot_dim, freq, 0, LZ_NV_DECIDE_HERE);
    }
    lz_nv_scores_wait(sc, o);
    LZ_NV_WARP_SYNC(); /* every lane's reads (meta, ldmatrix) before lane 0 gives the slot back */
    if (lane == 0) lz_nv_mbar_arrive(LZ_NV_KEMPTY(bars, k0 % LZ_NV_KSLOTS)); /* an end marker's too */
    /* the turns: warpgroup wg waits at named barrier 1 + wg and hands on to
     * the next one's; the last warpgroup opens the first turn (and does not
     * hand on after the last round, which nobody would take) */
    const int nwg = LZ_NV_WARPS / 4, wg = warp / 4;
    const uint my_turn = 1 + (uint)wg, next_turn = 1 + (uint)((wg + 1) % nwg);
    if (has && wg == nwg - 1) LZ_NV_BAR_ARRIVE(1u, 256u);
    /* tile 0's probabilities: P(0) packed, its factor on O (0 so far) kept */
    float al0 = 1.0f, al1 = 1.0f;
    uint pa[LZ_NV_KT / 16][4];
    if (has) {
        if (!full) lz_nv_mask(sc, mfirst, qp0, qp1, t4);
        LZ_NV_SOFTMAX_MAX_FROM(LZ_NV_KT, sc, m0, m1, l0, l1, sl2, b0, b1, a0, a1, 1);
        LZ_NV_SOFTMAX_EXP_F32(LZ_NV_KT, sc, l0, l1, sl2, b0, b1);
        LZ_NV_PACK_P(LZ_NV_KT, sc, pa);
        al0 = a0, al1 = a1;
    }
    int j = 0;
    for (; has; j++) {
        const int n1 = k0 + j + 1, vj = v0 + j, ks = n1 % LZ_NV_KSLOTS, vs = vj % LZ_NV_VSLOTS;
        lz_nv_mbar_wait(LZ_NV_KFULL(bars, ks), (uint)(n1 / LZ_NV_KSLOTS) & 1);
        __local const int4 *mn = meta[n1 % LZ_NV_NMETA];
        const int word = mn[0].w; /* the tile's flags (LZ_NV_PFLAGS), or its index; < 0: the end marker */
        const int has_n = word >= 0;
        int full_n = 1;
        /* Everything a turn does not need held before it: a stall inside
         * the turn holds every warpgroup's products. The queries rotated
         * for tile j + 1's first entry (lz_nv_scores finds them rotated), V(j)
         * waited for, one proxy fence for both slots' copies; O (no product
         * in flight) rescaled for P(j): a write to an accumulator between a
         * wgmma and its wait makes ptxas serialize them all (C7515). */
#if LZ_NV_PFLAGS
        if ((word & (int)(0x80000000u | LZ_NV_FLAG_ROT0)) == LZ_NV_FLAG_ROT0)
#else
        if (rope_style != LZ_ROPE_NONE && mn[0].z > 0 && mn[0].y != cur_delta)
#endif
            lz_nv_requery(qf, &cur_delta, &n_rel, mn[0].y, qrow0, qrow1, t4, rope_style, rot_dim, freq);
        lz_nv_mbar_wait(LZ_NV_VFULL(bars, vs), (uint)(vj / LZ_NV_VSLOTS) & 1);
        if (LZ_NV_CFENCE) LZ_NV_PROXY_FENCE();
#if LZ_NV_PFLAGS
        /* the producer's decisions (the end marker's: none, no mask) */
        const int full_pre = !(word & LZ_NV_FLAG_MASK);
        const uint rmask = has_n ? (uint)word & LZ_NV_FLAG_LATER : 0u;
#elif LZ_NV_PP_META
        int full_pre;
        const uint rmask = lz_nv_rot_mask(mn, cur_delta, min_pos, rope_style, &full_pre);
#endif
        LZ_NV_RESCALE(o, al0, al1);
        LZ_NV_BAR_SYNC(my_turn, 256u);
        /* the turn: the scores of tile j + 1 (into sc, free since P(j) is
         * packed), then O += P(j) V. Also after the last tile (the end
         * marker's slot, which no copy writes any more; entries of length 0,
         * so no rotation; the scores unused): with the scores' wgmma only on
         * some paths, ptxas could not tell the group left by wait_group 1
         * and serialized every wgmma (C7515) */
#if LZ_NV_PP_META
        lz_nv_scores(sc, qf, &cur_delta, &n_rel, kbase + ks * LZ_NV_MAT_BYTES, mn, min_pos, qrow0, qrow1, lane,
                     rope_style, rot_dim, freq, 1, rmask);
        full_n = full_pre;
#else
        full_n = lz_nv_scores(sc, qf, &cur_delta, &n_rel, kbase + ks * LZ_NV_MAT_BYTES, mn, min_pos, qrow0,
                              qrow1, lane, rope_style, rot_dim, freq, 1, LZ_NV_DECIDE_HERE);
#endif
        LZ_NV_PV_ISSUE_D(o, pa, vdesc0 + (ulong)((uint)vs * (LZ_NV_MAT_BYTES >> 4)));
        if (has_n || wg != nwg - 1) LZ_NV_BAR_ARRIVE(next_turn, 256u);
        /* the scores of tile j + 1 done (P V of tile j may still run) */
        LZ_NV_WG_WAIT1();
#pragma unroll
        for (int n = 0; n < LZ_NV_KT / 8; n++) LZ_NV_WG_TIE(sc[n]);
        LZ_NV_WARP_SYNC();
        if (lane == 0) lz_nv_mbar_arrive(LZ_NV_KEMPTY(bars, ks)); /* an end marker's too */
        if (has_n) {
            if (!full_n) lz_nv_mask(sc, mn, qp0, qp1, t4);
            LZ_NV_SOFTMAX_MAX_FROM(LZ_NV_KT, sc, m0, m1, l0, l1, sl2, b0, b1, a0, a1, 1);
            LZ_NV_SOFTMAX_EXP_F32(LZ_NV_KT, sc, l0, l1, sl2, b0, b1);
            al0 = a0, al1 = a1;
        }
        /* P V of tile j done: its V slot back, and P(j + 1) packed */
        LZ_NV_WG_WAIT();
#pragma unroll
        for (int n = 0; n < LZ_HEAD_DIM / 8; n++) LZ_NV_WG_TIE(o[n]);
#pragma unroll
        for (int n = 0; n < LZ_NV_KT / 8; n++) LZ_NV_WG_TIE(sc[n]);
        LZ_NV_WARP_SYNC();
        if (lane == 0) lz_nv_mbar_arrive(LZ_NV_VEMPTY(bars, vs));
        if (has_n) LZ_NV_PACK_P(LZ_NV_KT, sc, pa);
        has = has_n;
    }
    *kn = k0 + j + 1, *vn = v0 + j; /* its tiles and end marker; its tiles */

    LZ_NV_STORE_O(o, l0, l1, out, r0, r1, n_queries, n_q_heads, h, t4);
}

/* lz_prefill_nv_rows (LZ_NV_ROWS_PARAMS) with the producer warpgroup. */
__attribute__((always_inline)) inline void lz_prefill_nv_rows(LZ_NV_ROWS_PARAMS) {
    LZ_NV_ROWS_BEGIN();

    /* The warps past LZ_NV_WARPS are the producer's (lz_nv_produce): item j
     * of its rings is the j-th visible tile, then an end marker. */
    const uint kbase = LZ_NV_SMEM(kring), vbase = LZ_NV_SMEM(vring);
    const uint bars = LZ_NV_SMEM(mbar);
    if (warp >= LZ_NV_WARPS) {
#ifdef LZ_NV_PREGS
        LZ_NV_SETMAXNREG(dec, LZ_NV_PREGS);
#endif
        const int pw = warp - LZ_NV_WARPS; /* the warp in the producer's warpgroup */
        int kn = 0, vn = 0;
#define LZ_NV_PRODUCE(role)                                                                      \
    lz_nv_produce(kc, vc, table, entry_pos, kvh, n_kv_heads, n_entries, n_blocks, max_pos, min_pos,         \
                  rope_style, kbase, vbase, meta, bars, lane + 32 * (pw % LZ_NV_KWARPS), role, &kn, &vn, -1, 0, \
                  (int4)(0))
        LZ_NV_PRODUCER_ROLE(pw, LZ_NV_PRODUCE);
#undef LZ_NV_PRODUCE
        LZ_NV_CP_WAIT_ALL(); /* nothing in flight when the warp ends */
        return;
    }
#ifdef LZ_NV_CREGS
    LZ_NV_SETMAXNREG(inc, LZ_NV_CREGS);
#endif

#if LZ_NV_PINGPONG
    int kn = 0, vn = 0;
    lz_nv_consume(q, out, freq, rope_style, rot_dim, scale, n_queries, n_q_heads, h, r0, qp0, qp1, min_pos,
                  kbase, vbase, meta, bars, warp, &kn, &vn);
#else
    LZ_NV_WARP_STATE(-INFINITY);

    /* Round j consumes item j of the producer (lz_nv_produce), without the
     * ping-pong (4 consumer warps): the scores of item j + 1 go to the
     * tensor cores as soon as its K slot is full, then item j is masked,
     * its softmax taken and O += P V issued once its V slot is full; both
     * wgmma groups are waited for together, and the two slots given back
     * (one arrival a warp each). */
    float sc[LZ_NV_KT / 8][4];
    int full = 1;
    lz_nv_mbar_wait(LZ_NV_KFULL(bars, 0), 0);
    int has = meta[0][0].w >= 0; /* item 0 is a tile, not the end marker */
    if (has) {
        LZ_NV_PROXY_FENCE(); /* the producer's copies, seen by wgmma */
        full = lz_nv_scores(sc, qf, &cur_delta, &n_rel, kbase, meta[0], min_pos, qrow0, qrow1, lane,
                            rope_style, rot_dim, freq, 0, LZ_NV_DECIDE_HERE);
    }
    lz_nv_scores_wait(sc, o);
    LZ_NV_WARP_SYNC(); /* every lane's reads (meta, ldmatrix) before lane 0 gives the slot back */
    if (has && lane == 0) lz_nv_mbar_arrive(LZ_NV_KEMPTY(bars, 0));
    for (int j = 0; has; j++) {
        const int n1 = j + 1, ks = n1 % LZ_NV_KSLOTS, vs = j % LZ_NV_VSLOTS;
        lz_nv_mbar_wait(LZ_NV_KFULL(bars, ks), (uint)(n1 / LZ_NV_KSLOTS) & 1);
        __local const int4 *mn = meta[n1 % LZ_NV_NMETA];
        const int has_n = mn[0].w >= 0;
        float sn[LZ_NV_KT / 8][4];
        int full_n = 1;
        if (has_n) {
            LZ_NV_PROXY_FENCE();
            full_n = lz_nv_scores(sn, qf, &cur_delta, &n_rel, kbase + ks * LZ_NV_MAT_BYTES, mn, min_pos,
                                  qrow0, qrow1, lane, rope_style, rot_dim, freq, 0, LZ_NV_DECIDE_HERE);
        }
        if (!full) lz_nv_mask(sc, meta[j % LZ_NV_NMETA], qp0, qp1, t4);
        uint pa[LZ_NV_KT / 16][4];
        LZ_NV_SOFTMAX_P(LZ_NV_KT, sc, o, m0, m1, l0, l1, sl2, pa);
        lz_nv_mbar_wait(LZ_NV_VFULL(bars, vs), (uint)(j / LZ_NV_VSLOTS) & 1);
        LZ_NV_PROXY_FENCE();
        const uint vb = vbase + vs * LZ_NV_MAT_BYTES;
        LZ_NV_PV_ISSUE(o, pa, vb);
        lz_nv_scores_wait(sn, o);
        LZ_NV_WARP_SYNC();
        if (lane == 0) {
            lz_nv_mbar_arrive(LZ_NV_VEMPTY(bars, vs));
            if (has_n) lz_nv_mbar_arrive(LZ_NV_KEMPTY(bars, ks));
        }
#pragma unroll
        for (int n = 0; n < LZ_NV_KT / 8; n++)
#pragma unroll
            for (int u = 0; u < 4; u++) sc[n][u] = sn[n][u];
        full = full_n;
        has = has_n;
    }

    LZ_NV_STORE_O(o, l0, l1, out, r0, r1, n_queries, n_q_heads, h, t4);
#endif
}

