/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lazy prefill, NVIDIA tensor-core path (built only with LAZYATTN_FAST_NV):
 * what every variant shares. Flash attention on the tensor cores (f16
 * operands, f32 accumulation), the same arguments and semantics as
 * lz_prefill (cl/prefill.cl, the reference). The host (lib/attn/nv_build.c)
 * builds one variant a program, this header first:
 *   prefill_mma.cl       the work-group copies its K / V tiles itself
 *                        (cp.async, two slots each): mma.sync, or wgmma
 *                        (LZ_NV_WGMMA) where the producer does not fit;
 *   prefill_producer.h + prefill_wgmma.cl
 *                        wgmma with a producer warpgroup feeding the
 *                        consumer warps through mbarrier rings
 *                        (LZ_NV_PRODUCER), their ping-pong at 8 or 12 warps;
 *   + prefill_persistent.cl
 *                        the same, a work-group a SM running task lists
 *                        (LZ_NV_PERSIST);
 *   prefill_kernels.cl   the kernels lz_prefill_nv and lz_prefill_nv_batched.
 *
 * Work-group: LZ_NV_WARPS = WM x G consumer warps; warp (mi, g) owns 16
 * query tokens (tok0 + mi * 16 ..) of query head kvh * G + g, so the G heads
 * of a KV head share every staged K / V tile. Tiles of LZ_NV_KT keys
 * (LZ_NV_KT / LZ_BLOCK table entries) stream through local memory,
 * software-pipelined: the scores of tile j + 1 go to the tensor cores
 * before the softmax and P V of tile j. Tiles wholly in every row's future
 * are skipped.
 *
 * Rotation: K is used as stored (rotated at its stored positions). Each
 * warp keeps its 16 query rows as f16 A fragments rotated by R(-delta) of
 * the entry in hand, re-rotated only when the delta changes (once per
 * document): score = (R(-d) q) . (R(s) k) = q . R(s + d) k, in registers
 * (lz_nv_scores), never a pass over memory. Masking by positions (key j of
 * entry e at entry_pos[e] + j, visible iff <= q_pos[t]) only on tiles that
 * are not wholly visible.
 *
 * LZ_NV_WGMMA (Hopper, through lib/ptx_sm90a.c): both products on wgmma,
 * each warpgroup of 4 warps one m64 operand: S = Q K^T as m64n16k16, or
 * m64n32k16 over a whole tile of one delta (LZ_NV_S_WIDE), Q from
 * registers and K from local memory; O += P V as m64nDk16, P from
 * registers and V MN-major from local memory in K's core-matrix layout.
 *
 * Needs LZ_HEAD_DIM % 16 == 0, LZ_NV_KT % LZ_BLOCK == 0, LZ_BLOCK % 16 == 0
 * and f16 storage (the host checks; otherwise it uses the portable path).
 * Why each choice: docs/PERFLOG.md (issue 11).
 */
#ifndef LZ_NV_KT
#define LZ_NV_KT 32
#endif
#ifndef LZ_NV_WARPS
#define LZ_NV_WARPS 8
#endif
#define LZ_NV_THREADS (LZ_NV_WARPS * 32)
#define LZ_NV_EPT (LZ_NV_KT / LZ_BLOCK)            /* entries per tile */
#define LZ_NV_DC (LZ_HEAD_DIM / 16)                 /* 16-dim chunks */
#define LZ_NV_CPR (LZ_HEAD_DIM / 8)                 /* 16-byte chunks per row */
#define LZ_NV_CHUNKS (LZ_NV_KT * LZ_NV_CPR)         /* 16-byte chunks per K or V tile */
#define LZ_NV_CPT ((LZ_NV_CHUNKS + LZ_NV_THREADS - 1) / LZ_NV_THREADS) /* per thread */
#define LZ_NV_MAT_BYTES (LZ_NV_KT * LZ_HEAD_DIM * 2) /* one K or V tile */
#define LZ_NV_META 4                                /* entry-table slots (>= 3 tiles live) */

/* 1: the producer warpgroup (prefill_producer.h), with wgmma only. */
#ifndef LZ_NV_PRODUCER
#define LZ_NV_PRODUCER 0
#endif
#if LZ_NV_PRODUCER && !LZ_NV_WGMMA
#error "LZ_NV_PRODUCER needs the wgmma prefill"
#endif
/* The producer copies the full pages of a tiled pool (LZ_KV_TILED) with one
 * cp.async.bulk each (lz_nv_bulk_pages), the rest by 16-byte cp.async. */
#define LZ_NV_BULK (LZ_NV_PRODUCER && LZ_KV_TILED)
/* Copying warps of the producer's warpgroup: 2 (K and the entries; V) with
 * bulk pages, else 4 (two for K, two for V); the others end at once. */
#define LZ_NV_PWARPS (LZ_NV_BULK ? 2 : 4)
/* warps copying K (and V): all with one copying warp, else half each */
#define LZ_NV_KWARPS (LZ_NV_PWARPS == 1 ? 1 : LZ_NV_PWARPS / 2)
/* Work-items of a work-group: the consumer warps, and the producer's whole
 * warpgroup (registers go to an SM's schedulers a warp at a time), whose
 * `setmaxnreg` moves registers from the producer (LZ_NV_PREGS) to the
 * consumers (LZ_NV_CREGS) within each scheduler's 512 a thread-slot: 12
 * consumer warps 160 (+ 32) from a launch cap of 128, 8 consumer warps 232
 * (+ 40) from 168, 4 keep their launch cap. The budgets hold only with a
 * register count at entry equal to the launch cap, which ".minnctapersm 1"
 * gives (lib/ptx_sm90a.c). */
#define LZ_NV_WG_THREADS (LZ_NV_THREADS + 128 * LZ_NV_PRODUCER)
/* 1: lz_prefill_nv persistent (prefill_persistent.cl), with the producer's
 * ping-pong; the batched prefill keeps a work-group a task. */
#ifndef LZ_NV_PERSIST
#define LZ_NV_PERSIST 0
#endif
/* FlashAttention-3's ping-pong (with the producer at 8 or 12 consumer
 * warps): the consumer warpgroups take turns at the tensor cores, one's
 * softmax running under the next one's products (lz_nv_consume). */
#define LZ_NV_PINGPONG (LZ_NV_PRODUCER && (LZ_NV_WARPS == 8 || LZ_NV_WARPS == 12))
#if LZ_NV_PERSIST && !LZ_NV_PINGPONG
#error "LZ_NV_PERSIST needs the producer's ping-pong (the host sizes the launch by it)"
#endif
/* A K tile whose entries share one delta scored by one wgmma m64n32k16 per
 * 16 dims instead of two m64n16k16 (the ping-pong at 32-key tiles). */
#define LZ_NV_S_WIDE (LZ_NV_WGMMA && LZ_NV_KT == 32 && LZ_NV_PINGPONG)
/* Slots of the producer's K and V rings: 3 K and 2 V (2 and 3 with the
 * ping-pong's narrow scores, where a V slot comes back only after P V). */
#define LZ_NV_KSLOTS (LZ_NV_PINGPONG && !LZ_NV_S_WIDE ? 2 : 3)
#define LZ_NV_PVSLOTS (LZ_NV_PINGPONG && !LZ_NV_S_WIDE ? 3 : 2)
#if LZ_NV_PRODUCER && LZ_NV_WARPS == 12
#define LZ_NV_CREGS 160
#define LZ_NV_PREGS 32
#elif LZ_NV_PRODUCER && LZ_NV_WARPS == 8
#define LZ_NV_CREGS 232
#define LZ_NV_PREGS 40
#elif LZ_NV_PRODUCER && LZ_NV_WARPS != 4
#error "LZ_NV_PRODUCER needs 4, 8 or 12 consumer warps"
#endif
/* slots of the K ring and of the V ring; meta slots (one more than the K
 * slots: a tile's entries stay until its softmax has masked it, after its
 * K slot is given back); mbarriers (full and empty of each K and each V slot) */
#define LZ_NV_KRING (LZ_NV_PRODUCER ? LZ_NV_KSLOTS : 2)
#define LZ_NV_VSLOTS (LZ_NV_PRODUCER ? LZ_NV_PVSLOTS : 2)
#define LZ_NV_NMETA (LZ_NV_PRODUCER ? LZ_NV_KSLOTS + 1 : LZ_NV_META)
#define LZ_NV_MBARS (LZ_NV_PRODUCER ? 2 * (LZ_NV_KSLOTS + LZ_NV_VSLOTS) : 1)
/* byte offset of V slot i (tile t_i) in the V ring */
#define LZ_NV_VSLOT(i) (((uint)(i) % LZ_NV_VSLOTS) * LZ_NV_MAT_BYTES)
/* The async-proxy fence between the 16-byte copies and wgmma's reads of a
 * slot: with the ping-pong on the producer's side (a copying thread waits
 * for its copies, fences them, then arrives on the slot's full barrier, as
 * FlashAttention-3 fences its paged copies), else on the consumers'. */
#define LZ_NV_PFENCE (LZ_NV_PRODUCER && LZ_NV_PINGPONG)
#define LZ_NV_CFENCE (!LZ_NV_PFENCE)

/* With the producer, the mbarriers of the rings at shared address bars
 * (LZ_NV_MBARS of 8 bytes):
 * full / empty of K slot s and of V slot s. Full of K: the asynchronous
 * arrivals of the 32 LZ_NV_KWARPS lanes that copy K (their copies landed)
 * and one plain arrival of the first of them (the meta slot written); full
 * of V: the asynchronous ones of the lanes that copy V; empty: one arrival
 * of each consumer warp. */
#define LZ_NV_KFULL(bars, s) ((bars) + 8u * (uint)(s))
#define LZ_NV_KEMPTY(bars, s) ((bars) + 8u * (uint)(LZ_NV_KSLOTS + (s)))
#define LZ_NV_VFULL(bars, s) ((bars) + 8u * (uint)(2 * LZ_NV_KSLOTS + (s)))
#define LZ_NV_VEMPTY(bars, s) ((bars) + 8u * (uint)(2 * LZ_NV_KSLOTS + LZ_NV_VSLOTS + (s)))

inline void lz_nv_ring_init(uint bars) {
    for (int s = 0; s < LZ_NV_KSLOTS; s++) {
        lz_nv_mbar_init(LZ_NV_KFULL(bars, s), 32 * LZ_NV_KWARPS + 1 + LZ_NV_BULK);
        lz_nv_mbar_init(LZ_NV_KEMPTY(bars, s), LZ_NV_WARPS);
    }
    for (int s = 0; s < LZ_NV_VSLOTS; s++) {
        lz_nv_mbar_init(LZ_NV_VFULL(bars, s), 32 * LZ_NV_KWARPS + LZ_NV_BULK);
        lz_nv_mbar_init(LZ_NV_VEMPTY(bars, s), LZ_NV_WARPS);
    }
    LZ_NV_MBAR_INIT_FENCE();
}

/* Chunk i of a K or V tile: its row and 16-byte column, and the byte offset
 * of a K chunk in its slot. With wgmma, or tiled pool pages, K is stored in
 * the core-matrix layout wgmma reads (8 rows x 16 bytes contiguous, the
 * 16-byte columns of an 8-row group one after another, LZ_NV_CPR * 128
 * bytes per group; a tiled page's own order, each 128-byte line read whole)
 * and consecutive chunks walk down the 8 rows first, so that a warp writes
 * 512 contiguous bytes; else K is laid out like V (LZ_NV_SWZ, read by
 * ldmatrix). */
#if LZ_NV_WGMMA || LZ_KV_TILED
#define LZ_NV_CROW(i) (((i) & 7) + (((i) / (8 * LZ_NV_CPR)) << 3))
#define LZ_NV_CCOL(i) (((i) >> 3) % LZ_NV_CPR)
#define LZ_NV_KOFF(r, c) LZ_NV_CM(r, c)
#else
#define LZ_NV_CROW(i) ((i) / LZ_NV_CPR)
#define LZ_NV_CCOL(i) ((i) % LZ_NV_CPR)
#define LZ_NV_KOFF(r, c) LZ_NV_SWZ(r, c)
#endif
/* ... and of a V chunk: the K layout when P V is a wgmma or the pool tiled, else LZ_NV_SWZ */
#if LZ_NV_WGMMA || LZ_KV_TILED
#define LZ_NV_VOFF(r, c) LZ_NV_KOFF(r, c)
#else
#define LZ_NV_VOFF(r, c) LZ_NV_SWZ(r, c)
#endif

/* Validity and fields of entry e (0 length when outside the table or bad). */
typedef struct lz_nv_entry {
    int blk, len, delta, pos0;
} lz_nv_entry;

/* The fields of a table entry w starting at position pos0 (0 length when
 * bad); in_table 0: past the table, all 0. */
inline lz_nv_entry lz_nv_decode_entry(ulong w, int pos0, int in_table, int n_blocks) {
    lz_nv_entry r = {0, 0, 0, 0};
    if (!in_table) return r;
    r.blk = LAZYATTN_ENTRY_BLOCK(w);
    r.len = LAZYATTN_ENTRY_LENGTH(w);
    r.delta = LAZYATTN_ENTRY_DELTA(w);
    r.pos0 = pos0;
    if (r.blk >= n_blocks || r.len > LZ_BLOCK || !LZ_ENTRY_POSITIONS_OK(r.pos0, r.delta, r.len))
        r.len = 0;
    return r;
}

inline lz_nv_entry lz_nv_get_entry(__global const ulong *table, __global const int *entry_pos,
                                   int e, int n_entries, int n_blocks) {
    const lz_nv_entry none = {0, 0, 0, 0};
    return e < n_entries ? lz_nv_decode_entry(table[e], entry_pos[e], 1, n_blocks) : none;
}

/* Position of query row r; -1 (sees no key) past the queries or outside
 * 0..LZ_MAX_POSITION (recorded by the work-group that owns the row). */
inline int lz_nv_query_pos(__global const int *q_pos, int r, int n_queries) {
    const int p = r < n_queries ? q_pos[r] : -1;
    return LZ_POSITION_OK(p) ? p : -1;
}

/* The ping-pong at 32-key tiles: the scores' bookkeeping done before the
 * turn, whether the tile needs a mask and which later entry rotates the
 * queries (lz_nv_rot_mask), so that the turn issues its wgmma without
 * reading the entries. (At 64-key tiles ptxas serializes every wgmma with
 * it, C7514.) */
#define LZ_NV_PP_META (LZ_NV_PINGPONG && LZ_NV_KT == 32)
/* lz_nv_scores' rmask when it reads the entries and decides itself */
#define LZ_NV_DECIDE_HERE 0xffffffffu
/* With LZ_NV_PP_META: the producer takes the decisions of the consumers'
 * rounds (the queries' rotation for the tile's first entry,
 * lz_nv_rot_mask's) with the same rule over the same tiles, and hands them
 * over in the tile's word meta[slot][0].w (LZ_NV_FLAG_*; an end marker's
 * stays negative), so that a consumer warp's round reads one word of the
 * entries and tests its bits instead of comparing fields. */
#define LZ_NV_PFLAGS LZ_NV_PP_META
/* A tile's flag word: bit e (e < LZ_NV_EPT) where entry e rotates the
 * queries (its delta differs from the one they are rotated for: bit 0 the
 * loop's rotation before the turn, bits 1.. lz_nv_rot_mask's), and
 * LZ_NV_FLAG_MASK where some key needs the mask (lz_nv_rot_mask's !full) */
#define LZ_NV_FLAG_ROT0 1
#define LZ_NV_FLAG_LATER ((1u << LZ_NV_EPT) - 2u)
#define LZ_NV_FLAG_MASK (1 << 16)

/* Before the ping-pong's turn (LZ_NV_PP_META), with qf rotated for
 * cur_delta (the first entry's rotation done): whether the tile at meta
 * needs no mask (*full, as lz_nv_scores returns it), and as bits e the
 * later entries that rotate the queries, in lz_nv_scores' order. */
inline uint lz_nv_rot_mask(__local const int4 *meta, int cur_delta, int min_pos, int rope_style, int *full) {
    uint m = 0;
    int f = 1;
#pragma unroll
    for (int e = 0; e < LZ_NV_EPT; e++) {
        const int4 en = meta[e]; /* start, delta, length */
        f &= en.z == LZ_BLOCK && en.x + LZ_BLOCK - 1 <= min_pos;
        if (e > 0 && rope_style != LZ_ROPE_NONE && en.z > 0 && en.y != cur_delta) {
            m |= 1u << e;
            cur_delta = en.y;
        }
    }
    *full = f;
    return m;
}

/* The query fragments qf, rotated for *cur_delta, re-rotated for delta:
 * in registers by R(cur - delta) when every rotary pair sits in one lane,
 * else and on every 8th change (*n_rel counts them) from the f32 queries
 * (bounded f16 drift). */
__attribute__((always_inline)) inline void
lz_nv_requery(uint qf[LZ_NV_DC][4], int *cur_delta, int *n_rel, int delta, __global const float *qrow0,
              __global const float *qrow1, int t4, int rope_style, int rot_dim,
              __global const float2 *freq) {
    const int rel = *cur_delta - delta;
    if (lz_nv_pairs_in_lane(rope_style, rot_dim) && (++*n_rel & 7) && rel > -(1 << 24) && rel < (1 << 24))
        lz_nv_rotate_a(qf, qf, t4, rel, rope_style, rot_dim, freq);
    else
        lz_nv_load_a(qf, qrow0, qrow1, t4, -delta, rope_style, rot_dim, freq);
    *cur_delta = delta;
}

/* In lz_nv_scores (its names): qf re-rotated for delta before part p (the
 * wgmma of the parts before still read qf: let them finish); a macro, so
 * that both of its uses compile as the one before LZ_NV_PP_META did */
#if LZ_NV_WGMMA
#define LZ_NV_ROTATE_FOR_PART(p, delta)                                                          \
    do {                                                                                     \
        if ((p) > 0) {                                                                       \
            LZ_NV_WG_WAIT();                                                                 \
            _Pragma("unroll")                                                                \
            for (int n = 0; n < 2 * (p); n++) LZ_NV_WG_TIE(sc[n]);                           \
        }                                                                                    \
        lz_nv_requery(qf, cur_delta, n_rel, delta, qrow0, qrow1, t4, rope_style, rot_dim, freq); \
    } while (0)
#else
#define LZ_NV_ROTATE_FOR_PART(p, delta) \
    lz_nv_requery(qf, cur_delta, n_rel, delta, qrow0, qrow1, t4, rope_style, rot_dim, freq)
#endif

/*
 * Raw scores of the warp's 16 rows against the K tile at shared address kb:
 * sc[n] = keys 8n..8n+7. Before each entry whose delta differs from the one
 * the query fragments qf are rotated for (*cur_delta), qf is re-rotated to
 * R(-delta): in registers from its current value (lz_nv_rotate_a by
 * R(cur - delta)) when every rotary pair sits in one lane, and from the f32
 * queries qrow0 / qrow1 (NULL: padding row) otherwise and on every 8th
 * change (*n_rel counts them), so that f16 roundings cannot pile up.
 * first_rotated (a constant): the caller has rotated qf for the first entry
 * already (the ping-pong, before its turn), so only a later entry rotates here.
 * rmask: LZ_NV_DECIDE_HERE (a constant), or the caller's decisions (without
 * LZ_NV_S_WIDE; lz_nv_rot_mask): bit e set where entry e rotates qf, the
 * entries then read only there and the return value 1 (the caller took it).
 * Returns 1 when every key of the tile is a full entry visible to every row
 * of the work-group (no mask needed).
 */
__attribute__((always_inline)) inline int
lz_nv_scores(float sc[LZ_NV_KT / 8][4], uint qf[LZ_NV_DC][4], int *cur_delta, int *n_rel, uint kb,
             __local const int4 *meta, int min_pos, __global const float *qrow0,
             __global const float *qrow1, int lane, int rope_style, int rot_dim,
             __global const float2 *freq, int first_rotated, uint rmask) {
    int full = 1;
    const int t4 = lane & 3;
    (void)rmask; /* read with LZ_NV_PP_META only */
#if LZ_NV_S_WIDE
#if LZ_NV_PP_META
    if (rmask != LZ_NV_DECIDE_HERE) {
        /* decided by the caller (lz_nv_rot_mask): the queries rotated for the
         * first entry already, bit 1 set when the second entry's keys are at
         * another delta (rare: a tile across a document boundary), scored
         * again below as without the caller's decisions; meta read only then */
        LZ_NV_WG_FENCE();
        const ulong desc = lz_nv_wg_desc(kb, 128, LZ_NV_CPR * 128);
#pragma unroll
        for (int c = 0; c < LZ_NV_DC; c++) LZ_NV_WGMMA_N32(sc, qf[c], desc + 16 * c, c > 0);
        LZ_NV_WG_COMMIT();
        if (LZ_NV_EPT > 1 && (rmask & 2u)) {
            LZ_NV_WG_WAIT();
#pragma unroll
            for (int n = 0; n < 4; n++) LZ_NV_WG_TIE(sc[n]);
            lz_nv_requery(qf, cur_delta, n_rel, meta[LZ_NV_EPT - 1].y, qrow0, qrow1, t4, rope_style, rot_dim,
                          freq);
            LZ_NV_QK16_OFF(sc[2], sc[3], qf, kb, 16, lane, LZ_NV_KOFF);
        }
        return 1;
    }
#endif
    /* one m64n32k16 per 16 dims over the whole tile, the queries rotated for
     * the first entry with keys; when the second entry has keys at another
     * delta (a tile across a document boundary, rare), keys 16..31 are
     * scored again after a second rotation, by mma.sync (ldmatrix reads the
     * core-matrix layout too): a second wgmma pass here, into the same or
     * other accumulators, made ptxas serialize every wgmma (C7511), and so
     * did mixing m64n16 and m64n32 */
#pragma unroll
    for (int e = 0; e < LZ_NV_EPT; e++) {
        const int4 en = meta[e]; /* start, delta, length */
        full &= en.z == LZ_BLOCK && en.x + LZ_BLOCK - 1 <= min_pos;
        if ((e > 0 || !first_rotated) && rope_style != LZ_ROPE_NONE && en.z > 0 && en.y != *cur_delta) {
            if (e > 0) {
                /* the first pass still reads qf: let it finish */
                LZ_NV_WG_WAIT();
#pragma unroll
                for (int n = 0; n < 4; n++) LZ_NV_WG_TIE(sc[n]);
            }
            lz_nv_requery(qf, cur_delta, n_rel, en.y, qrow0, qrow1, t4, rope_style, rot_dim, freq);
            if (e > 0) LZ_NV_QK16_OFF(sc[2], sc[3], qf, kb, 16, lane, LZ_NV_KOFF);
        }
        if (e == 0) {
            LZ_NV_WG_FENCE();
            const ulong desc = lz_nv_wg_desc(kb, 128, LZ_NV_CPR * 128);
#pragma unroll
            for (int c = 0; c < LZ_NV_DC; c++) LZ_NV_WGMMA_N32(sc, qf[c], desc + 16 * c, c > 0);
            LZ_NV_WG_COMMIT();
        }
    }
    return full;
#else
#pragma unroll
    for (int p = 0; p < LZ_NV_KT / 16; p++) {
#if LZ_NV_PP_META
        if ((p * 16) % LZ_BLOCK == 0 && rmask != LZ_NV_DECIDE_HERE) {
            /* decided by the caller: the entry read only where it rotates */
            if ((rmask >> ((p * 16) / LZ_BLOCK)) & 1) LZ_NV_ROTATE_FOR_PART(p, meta[(p * 16) / LZ_BLOCK].y);
        } else
#endif
        if ((p * 16) % LZ_BLOCK == 0) {
            const int4 en = meta[(p * 16) / LZ_BLOCK]; /* start, delta, length */
            full &= en.z == LZ_BLOCK && en.x + LZ_BLOCK - 1 <= min_pos;
            if ((p > 0 || !first_rotated) && rope_style != LZ_ROPE_NONE && en.z > 0 && en.y != *cur_delta)
                LZ_NV_ROTATE_FOR_PART(p, en.y);
        }
#if LZ_NV_WGMMA
        /* this warpgroup's 64 rows x 16 keys, one wgmma per 16 dims,
         * asynchronous: the caller waits (lz_nv_scores_wait) */
        LZ_NV_WG_FENCE();
        const ulong desc = lz_nv_wg_desc(kb + 2 * p * (LZ_NV_CPR * 128), 128, LZ_NV_CPR * 128);
#pragma unroll
        for (int c = 0; c < LZ_NV_DC; c++)
            LZ_NV_WGMMA_N16(sc[2 * p], sc[2 * p + 1], qf[c], desc + 16 * c, c > 0);
        LZ_NV_WG_COMMIT();
#else
        LZ_NV_QK16_OFF(sc[2 * p], sc[2 * p + 1], qf, kb, p * 16, lane, LZ_NV_KOFF);
#endif
    }
    return full;
#endif
}
#undef LZ_NV_ROTATE_FOR_PART

/* -INFINITY on the scores of keys that rows g / g + 8 (positions qp0, qp1)
 * must not see: past their position, or padding. */
__attribute__((always_inline)) inline void lz_nv_mask(float sc[LZ_NV_KT / 8][4],
                                                      __local const int4 *meta, int qp0, int qp1,
                                                      int t4) {
#pragma unroll
    for (int n = 0; n < LZ_NV_KT / 8; n++) {
        const int key0 = n * 8 + 2 * t4;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int key = key0 + u, j = key % LZ_BLOCK;
            const int4 en = meta[key / LZ_BLOCK];
            const int kp = j < en.z ? en.x + j : INT_MAX;
            if (kp > qp0) sc[n][u] = -INFINITY;
            if (kp > qp1) sc[n][2 + u] = -INFINITY;
        }
    }
}

#if LZ_NV_WGMMA
/* O += P V over the LZ_NV_KT keys of the V tile whose descriptor is vdesc
 * (lz_nv_wg_vdesc; each 16 keys' one has its start address field moved on,
 * which cannot carry for addresses under 256 KB): KT / 16 asynchronous
 * wgmma m64nDk16 (A = P from registers, this lane's fragments pa), one
 * commit group that the caller waits for. A macro: as a function, clang
 * moved the row sums of the softmax across its fences. */
#define LZ_NV_PV_ISSUE_D(o, pa, vdesc)                                                       \
    do {                                                                                     \
        LZ_NV_WG_FENCE();                                                                    \
        _Pragma("unroll")                                                                    \
        for (int kk_ = 0; kk_ < LZ_NV_KT / 16; kk_++)                                        \
            LZ_NV_WGMMA_PV(o, pa[kk_], (vdesc) + (ulong)kk_ * ((2 * LZ_NV_CPR * 128) >> 4)); \
        LZ_NV_WG_COMMIT();                                                                   \
    } while (0)
/* The same with the V tile at shared address vb */
#define LZ_NV_PV_ISSUE(o, pa, vb) LZ_NV_PV_ISSUE_D(o, pa, lz_nv_wg_vdesc(vb))
#endif

/* The scores of lz_nv_scores are ready to read (wgmma: wait for them),
 * and the accumulators o of the P V wgmma issued before them. */
__attribute__((always_inline)) inline void lz_nv_scores_wait(float sc[LZ_NV_KT / 8][4],
                                                             float o[LZ_HEAD_DIM / 8][4]) {
#if LZ_NV_WGMMA
    LZ_NV_WG_WAIT();
#pragma unroll
    for (int n = 0; n < LZ_NV_KT / 8; n++) LZ_NV_WG_TIE(sc[n]);
#if LZ_NV_WGMMA
#pragma unroll
    for (int n = 0; n < LZ_HEAD_DIM / 8; n++) LZ_NV_WG_TIE(o[n]);
#else
    (void)o;
#endif
#else
    (void)sc, (void)o;
#endif
}

/* Bad entries (block past the pool, length past the block, positions out of
 * range) recorded in err: entries first, first + step, ... (each work-group,
 * or each work-item, a share). A macro, as the epilogue below: as
 * functions, clang's code around them differed. */
#define LZ_NV_FLAG_ENTRIES(table, entry_pos, n_entries, n_blocks, err, first, step)                         \
    for (int e_ = (first); e_ < (n_entries); e_ += (step)) {                                              \
        const ulong w_ = (table)[e_];                                                                     \
        if (LAZYATTN_ENTRY_BLOCK(w_) >= (n_blocks)) lz_raise(err, LZ_ERR_BLOCK);                         \
        else if (LAZYATTN_ENTRY_LENGTH(w_) > LZ_BLOCK) lz_raise(err, LZ_ERR_LENGTH);                     \
        else if (!LZ_ENTRY_POSITIONS_OK((entry_pos)[e_], LAZYATTN_ENTRY_DELTA(w_), LAZYATTN_ENTRY_LENGTH(w_))) \
            lz_raise(err, LZ_ERR_ENTRY_POSITION);                                                         \
    }

/* The parameters of lz_prefill_nv_rows, which each work-group variant
 * defines (its body starting with LZ_NV_ROWS_BEGIN) and the kernels call
 * (prefill_kernels.cl): one work-group's rows tok0 .. tok0 + 16 * WM - 1 of
 * one sequence (q, q_pos, out from its first row, table and entry_pos from
 * its first entry) over its n_entries entries; flag_entries: this
 * work-group records the sequence's bad entries. The kernels give it their
 * local memory: the K and V rings, the meta slots and the mbarriers. */
#define LZ_NV_ROWS_PARAMS                                                                                  \
    __global const float *q, __global const int *q_pos, __global const ulong *table,                     \
        __global const int *entry_pos, __global const ushort *kc, __global const ushort *vc,              \
        __global float *out, __global const float2 *freq, int rope_style, int rot_dim, float scale,       \
        int n_queries, int n_entries, int n_q_heads, int n_kv_heads, int n_blocks, __global int *err,     \
        int kvh, int tok0, int flag_entries, __local uchar *kring, __local uchar *vring,                  \
        __local int4 (*meta)[LZ_NV_EPT], __local ulong *mbar

/* The prologue of every work-group variant of lz_prefill_nv_rows, in its
 * body (LZ_NV_ROWS_PARAMS' names): declares lid, lane, warp and t4 = lane % 4;
 * h, the warp's query head; r0 and r1 = r0 + 8, its rows (g = lane / 4 of
 * its 16), at positions qp0 and qp1; max_pos and min_pos, the latest and
 * earliest positions of the work-group's active rows. Records the
 * sequence's bad entries (where flag_entries) and the rows' bad positions,
 * and makes the rings' mbarriers (with the producer); kring holds the
 * positions until the last barrier. A macro: as a function (its results in
 * a struct), clang reassociated the tiled pool's slot addresses otherwise. */
#define LZ_NV_ROWS_BEGIN()                                                                                  \
    const int lid = get_local_id(0);                                                                      \
    const int lane = lid & 31, warp = lid >> 5;                                                           \
    const int G_ = n_q_heads / n_kv_heads, WM_ = LZ_NV_WARPS / G_;                                        \
    const int gh_ = warp % G_, mi_ = warp / G_;                                                           \
    const int h = kvh * G_ + gh_;                                                                         \
    const int g_ = lane >> 2, t4 = lane & 3;                                                              \
    const int r0 = tok0 + mi_ * 16 + g_, r1 = r0 + 8;                                                     \
    const int qp0 = lz_nv_query_pos(q_pos, r0, n_queries);                                                \
    const int qp1 = lz_nv_query_pos(q_pos, r1, n_queries);                                                \
    /* bad entries are flagged once per sequence, wherever they are */                                    \
    if (flag_entries) LZ_NV_FLAG_ENTRIES(table, entry_pos, n_entries, n_blocks, err, lid, LZ_NV_WG_THREADS); \
    /* the work-group's latest and earliest query positions (active rows) */                              \
    __local int *red_ = (__local int *)kring;                                                             \
    if (lid == 0) {                                                                                       \
        red_[0] = -1, red_[1] = INT_MAX;                                                                  \
        if (LZ_NV_PRODUCER) lz_nv_ring_init(LZ_NV_SMEM(mbar));                                            \
    }                                                                                                     \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                         \
    if (lid < 16 * WM_ && tok0 + lid < n_queries) {                                                       \
        /* each work-group records its own rows' bad positions */                                         \
        if (!LZ_POSITION_OK(q_pos[tok0 + lid])) lz_raise(err, LZ_ERR_QUERY_POSITION);                     \
        const int p_ = lz_nv_query_pos(q_pos, tok0 + lid, n_queries);                                     \
        atomic_max(&red_[0], p_);                                                                         \
        atomic_min(&red_[1], p_);                                                                         \
    }                                                                                                     \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                         \
    const int max_pos = red_[0], min_pos = red_[1];                                                       \
    barrier(CLK_LOCAL_MEM_FENCE)

/* The state a consumer warp starts its rows r0 and r1 of query head h with
 * (in lz_prefill_nv_rows or lz_nv_consume, their names): declares qrow0 and
 * qrow1, the rows' queries (0 past n_queries); qf, their fragments as given
 * (rotated on the first entry with a delta), with cur_delta and n_rel for
 * lz_nv_requery; and the online softmax's O accumulators o (0), maxima m0
 * and m1 (m_start), sums l0 and l1 (0) and sl2, the scale in log2 units. */
#define LZ_NV_WARP_STATE(m_start)                                                                        \
    __global const float *qrow0 = r0 < n_queries ? q + ((size_t)r0 * n_q_heads + h) * LZ_HEAD_DIM : 0; \
    __global const float *qrow1 = r1 < n_queries ? q + ((size_t)r1 * n_q_heads + h) * LZ_HEAD_DIM : 0; \
    uint qf[LZ_NV_DC][4];                                                                                \
    int cur_delta = 0, n_rel = 0;                                                                        \
    lz_nv_load_a(qf, qrow0, qrow1, t4, 0, rope_style, rot_dim, freq);                                    \
    float o[LZ_HEAD_DIM / 8][4];                                                                         \
    _Pragma("unroll")                                                                                    \
    for (int n = 0; n < LZ_HEAD_DIM / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;              \
    float m0 = (m_start), m1 = m0, l0 = 0.0f, l1 = 0.0f;                                                 \
    const float sl2 = scale * 1.44269504088896341f

/* The epilogue of every variant: a warp's rows r0 and r1 = r0 + 8 of query
 * head h, O (o, the mma accumulator layout) divided by the rows' softmax
 * sums (l0, l1: each lane's share, summed over the quad here) into out;
 * rows past n_queries are not stored. */
#define LZ_NV_STORE_O(o, l0, l1, out, r0, r1, n_queries, n_q_heads, h, t4)                                   \
    do {                                                                                                  \
        l0 += lz_nv_xor(l0, 1);                                                                           \
        l0 += lz_nv_xor(l0, 2);                                                                           \
        l1 += lz_nv_xor(l1, 1);                                                                           \
        l1 += lz_nv_xor(l1, 2);                                                                           \
        const float i0_ = l0 > 0.0f ? 1.0f / l0 : 0.0f, i1_ = l1 > 0.0f ? 1.0f / l1 : 0.0f;               \
        if ((r0) < (n_queries)) {                                                                         \
            __global float *dst_ = (out) + ((size_t)(r0) * (n_q_heads) + (h)) * LZ_HEAD_DIM + 2 * (t4);  \
            _Pragma("unroll")                                                                             \
            for (int n_ = 0; n_ < LZ_HEAD_DIM / 8; n_++)                                                  \
                vstore2((float2)(o[n_][0] * i0_, o[n_][1] * i0_), 0, dst_ + n_ * 8);                      \
        }                                                                                                 \
        if ((r1) < (n_queries)) {                                                                         \
            __global float *dst_ = (out) + ((size_t)(r1) * (n_q_heads) + (h)) * LZ_HEAD_DIM + 2 * (t4);  \
            _Pragma("unroll")                                                                             \
            for (int n_ = 0; n_ < LZ_HEAD_DIM / 8; n_++)                                                  \
                vstore2((float2)(o[n_][2] * i1_, o[n_][3] * i1_), 0, dst_ + n_ * 8);                      \
        }                                                                                                 \
    } while (0)
