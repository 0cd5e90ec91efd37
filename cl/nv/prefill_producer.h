/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The producer warpgroup of the wgmma prefill (LZ_NV_PRODUCER, after
 * prefill_common.h): its copying warps (LZ_NV_PWARPS) walk the visible
 * tiles (the block table read a batch of entries at a time), write each
 * tile's entries into a meta slot and copy its K into a ring of
 * LZ_NV_KSLOTS slots and its V into a ring of LZ_NV_PVSLOTS, each copy
 * completing on the slot's "full" mbarrier; the consumer warps
 * (prefill_wgmma.cl) wait there and give a slot back on its "empty"
 * mbarrier once their wgmma that read it are done. No barrier across the
 * work-group in the loop, no address lookups and no copies in the
 * consumer warps.
 */
/* The producer's copies of one K or V tile (the same layout: LZ_NV_VOFF is
 * LZ_NV_KOFF with P V on wgmma) with entries en into the slot at shared
 * address dst: 16-byte cp.async, LZ_NV_CHUNKS / (32 LZ_NV_KWARPS) for thread
 * t of the warps copying it, keys past their entry's length (and bad
 * entries) zero-filled. Thread t takes rows t / 2 + q * (its threads / 2)
 * and in each the chunks of t's parity: a pair of threads reads whole
 * 32-byte sectors, a warp's stores meet each bank 4 times (as few as 512
 * bytes allow), and one row's addresses, in local and global memory, are
 * a base and constant steps. (The first form gave each chunk its own row
 * and column arithmetic, which NVIDIA's compiler hoisted out of the
 * producer's loop and spilled at the producer's 32 registers.) */
#define LZ_NV_PTHREADS (32 * LZ_NV_KWARPS)
#define LZ_NV_PCP16(dst, src, valid) lz_nv_cp16(dst, src, valid)
#if LZ_NV_PRODUCER && (LZ_NV_KT % (LZ_NV_PTHREADS / 2) || LZ_NV_CPR % 2)
#error "LZ_NV_PRODUCER: LZ_NV_KT must be a multiple of 16 LZ_NV_KWARPS, the head dim of 16"
#endif
/* The entry of a tile's entries en that holds the tile's row r. */
__attribute__((always_inline)) inline lz_nv_entry lz_nv_row_entry(const lz_nv_entry en[LZ_NV_EPT], uint r) {
    lz_nv_entry e = en[0];
#pragma unroll
    for (int k = 1; k < LZ_NV_EPT; k++)
        if (r / LZ_BLOCK == (uint)k) e = en[k];
    return e;
}

__attribute__((always_inline)) inline void lz_nv_produce_tile(uint dst, __global const ushort *pool,
                                                              const lz_nv_entry en[LZ_NV_EPT], int kvh,
                                                              int n_kv_heads, int t) {
    const uint par = (uint)t & 1;
#pragma unroll
    for (uint q = 0; q < LZ_NV_KT / (LZ_NV_PTHREADS / 2); q++) {
        const uint r = ((uint)t >> 1) + q * (LZ_NV_PTHREADS / 2), j = r % LZ_BLOCK;
        const lz_nv_entry e = lz_nv_row_entry(en, r);
        if (LZ_NV_BULK && e.len == LZ_BLOCK) continue; /* its page comes whole (lz_nv_bulk_pages) */
        const int ok = (int)j < e.len;
        __global const ushort *row = pool + (ok ? (long)lz_kv_offset(e.blk, kvh, n_kv_heads, (int)j) : 0);
        const uint d0 = dst + LZ_NV_KOFF(r, par);
#pragma unroll
        for (uint h = 0; h < LZ_NV_CPR / 2; h++)
            LZ_NV_PCP16(d0 + 2 * h * 128, row + LZ_KV_DIM((2 * h + par) * 8), ok);
    }
}

/* Whether a tile with entries en has rows for 16-byte copies: always, but
 * with LZ_NV_BULK only where one of its entries is not full (uniform
 * across the copying warp: a tile of full pages skips lz_nv_produce_tile
 * altogether). */
__attribute__((always_inline)) inline int lz_nv_chunk_copies(const lz_nv_entry en[LZ_NV_EPT]) {
#if LZ_NV_BULK
    int some = 0;
#pragma unroll
    for (int k = 0; k < LZ_NV_EPT; k++) some |= en[k].len < LZ_BLOCK;
    return some;
#else
    return 1;
#endif
}

#if LZ_NV_BULK
/* A tile's full pages (valid length LZ_BLOCK) as one cp.async.bulk each,
 * completing on the slot's full barrier bar: one thread arms bar with their
 * bytes (an arrival of its own, LZ_NV_BULK in the barrier's count; 0 bytes
 * when copy is 0 or no page is full), then issues them. A tiled pool page
 * is stored as the slot holds it (cl/storage.h): entry k's page lands
 * whole at dst + k pages. The rows of the other entries come by 16-byte
 * cp.async (lz_nv_produce_tile), zero-filled past their length. */
#define LZ_NV_PAGE_BYTES (LZ_BLOCK * LZ_HEAD_DIM * 2)
__attribute__((always_inline)) inline void lz_nv_bulk_pages(uint bar, uint dst, __global const ushort *pool,
                                                            const lz_nv_entry en[LZ_NV_EPT], int kvh,
                                                            int n_kv_heads, int copy) {
    uint bytes = 0;
#pragma unroll
    for (int k = 0; k < LZ_NV_EPT; k++) bytes += copy && en[k].len == LZ_BLOCK ? LZ_NV_PAGE_BYTES : 0;
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#pragma unroll
    for (int k = 0; k < LZ_NV_EPT; k++)
        if (copy && en[k].len == LZ_BLOCK)
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                         " [%0], [%1], %2, [%3];" ::"r"(dst + (uint)k * LZ_NV_PAGE_BYTES),
                         "l"(pool + lz_kv_offset(en[k].blk, kvh, n_kv_heads, 0)), "r"(LZ_NV_PAGE_BYTES), "r"(bar)
                         : "memory");
}
#endif

/* A copying warp's view of the block table: LZ_NV_BATCH entries at a time,
 * entry be + lane held by its lane (the packed word w, the start position
 * pos, INT_MAX past the table), vis the entries some row can see (one bit
 * a lane). A tile's entries then come by shuffles: one load of the table
 * a batch of tiles instead of two dependent ones (the next visible tile,
 * then its entries) every round. */
#define LZ_NV_BATCH (32 / LZ_NV_EPT * LZ_NV_EPT)
/* 0: the producer looks each tile up in the table as it goes (steps 4-6) */
typedef struct lz_nv_table_batch {
    int be, pos;
    ulong w;
    uint vis;
} lz_nv_table_batch;

/* The batch of entries be, be + 1, ... (a multiple of LZ_NV_BATCH). */
__attribute__((always_inline)) inline void
lz_nv_batch_load(lz_nv_table_batch *b, int be, __global const ulong *table, __global const int *entry_pos,
                 int n_entries, int max_pos, int lane) {
    const int e = be + lane, in = lane < LZ_NV_BATCH && e < n_entries;
    b->be = be;
    b->w = in ? table[e] : 0;
    b->pos = in ? entry_pos[e] : INT_MAX;
    b->vis = lz_nv_ballot(b->pos <= max_pos);
}

/* The first tile at or after tile i with an entry some row can see
 * (n_tiles: none), the batch moved on to the one holding it (i at or after
 * the batch's first tile; every lane of the warp calls it alike). */
__attribute__((always_inline)) inline int
lz_nv_batch_next(lz_nv_table_batch *b, int i, int n_tiles, __global const ulong *table,
                 __global const int *entry_pos, int n_entries, int max_pos, int lane) {
    while (i < n_tiles) {
        const int off = i * LZ_NV_EPT - b->be;
        if (off >= LZ_NV_BATCH) {
            lz_nv_batch_load(b, b->be + LZ_NV_BATCH, table, entry_pos, n_entries, max_pos, lane);
            continue;
        }
        const uint m = b->vis >> off;
        if (m) return (b->be + off + lz_nv_low_bit(m)) / LZ_NV_EPT;
        i = (b->be + LZ_NV_BATCH) / LZ_NV_EPT;
    }
    return n_tiles;
}

/* Entry e (in the batch, or past the table), from the lane holding it. */
__attribute__((always_inline)) inline lz_nv_entry lz_nv_batch_entry(const lz_nv_table_batch *b, int e,
                                                                     int n_entries, int n_blocks) {
    const int src = e - b->be;
    const uint lo = lz_nv_shfl((uint)b->w, src), hi = lz_nv_shfl((uint)(b->w >> 32), src);
    const int pos0 = (int)lz_nv_shfl((uint)b->pos, src);
    return lz_nv_decode_entry(((ulong)hi << 32) | lo, pos0, e < n_entries, n_blocks);
}


/* A copying thread's arrival on a slot's full barrier bar once its 16-byte
 * copies into the slot (made: copied) have landed: counted by the copy
 * engine (cp.async.mbarrier.arrive.noinc), or with LZ_NV_PFENCE waited for
 * and fenced for the async proxy by this thread first. */
__attribute__((always_inline)) inline void lz_nv_landed_arrive(uint bar, int copied) {
#if LZ_NV_PFENCE
    if (copied) {
        LZ_NV_CP_WAIT_ALL();
        LZ_NV_PROXY_FENCE();
    }
    lz_nv_mbar_arrive(bar);
#else
    (void)copied;
    lz_nv_mbar_arrive_cp(bar);
#endif
}

/* A producer's copying warp, one task (a work-group's rows of one KV head):
 * its items are the visible tiles in order, then one end marker (meta tile
 * -1), numbered on from *kn (the K ring's items so far: 0 for the first
 * task), and its tiles' V on from *vn (the V ring's tiles so far); both are
 * moved past this task's. Item n: its entries into meta[n % LZ_NV_NMETA],
 * its K into K slot n % LZ_NV_KSLOTS; after it, the V of the tile before
 * (the v-th) into V slot v % LZ_NV_VSLOTS; each slot refilled only once the
 * consumers gave back what it held (items n - LZ_NV_KSLOTS, tile
 * v - LZ_NV_VSLOTS; the consumers give an end marker's K slot back too).
 * role 0 does all of it (LZ_NV_PWARPS 1); else role 1 the K slots and the
 * meta slots, role 2 the V slots, each walking the same tiles; t: the
 * thread among the LZ_NV_KWARPS warps of its role (t 0 writes the meta
 * slots). The end marker's tile is `marker` (-1; the persistent kernel's
 * last item, after its last task, is a marker -2 of a task without tiles,
 * max_pos -1); with `tasks` (the persistent kernel), `task` goes into
 * tasks[n % LZ_NV_NMETA] of the task's first item. The caller waits for
 * its copies before the warp ends (LZ_NV_CP_WAIT_ALL). */
__attribute__((always_inline)) inline void
lz_nv_produce(__global const ushort *kc, __global const ushort *vc, __global const ulong *table,
              __global const int *entry_pos, int kvh, int n_kv_heads, int n_entries, int n_blocks,
              int max_pos, int min_pos, int rope_style, uint kbase, uint vbase, __local int4 (*meta)[LZ_NV_EPT],
              uint bars, int t, int role, int *kn, int *vn, int marker, __local int4 *tasks, int4 task) {
    const int do_k = role != 2, do_v = role != 1;
    int cur_delta = 0; /* LZ_NV_PFLAGS: the delta the consumers' queries are rotated for */
    (void)min_pos, (void)rope_style;
    const int n_tiles = (n_entries + LZ_NV_EPT - 1) / LZ_NV_EPT;
    const int lane = t & 31;
    lz_nv_table_batch b;
    lz_nv_batch_load(&b, 0, table, entry_pos, n_entries, max_pos, lane);
    int tk = max_pos < 0 ? n_tiles : lz_nv_batch_next(&b, 0, n_tiles, table, entry_pos, n_entries, max_pos, lane);
    int tv = n_tiles; /* the tile whose V comes next (none yet) */
    int n = *kn, v = *vn;
    lz_nv_entry ev[LZ_NV_EPT];
    for (;; n++) {
        const int ks = n % LZ_NV_KSLOTS;
        if (do_k && n >= LZ_NV_KSLOTS)
            lz_nv_mbar_wait(LZ_NV_KEMPTY(bars, ks), (uint)(n / LZ_NV_KSLOTS - 1) & 1);
        lz_nv_entry ek[LZ_NV_EPT];
#pragma unroll
        for (int k = 0; k < LZ_NV_EPT; k++) {
            const lz_nv_entry none = {0, 0, 0, 0};
            ek[k] = tk < n_tiles ? lz_nv_batch_entry(&b, tk * LZ_NV_EPT + k, n_entries, n_blocks) : none;
        }
#if LZ_NV_BULK
        if (do_k && t == 0)
            lz_nv_bulk_pages(LZ_NV_KFULL(bars, ks), kbase + ks * LZ_NV_MAT_BYTES, kc, ek, kvh, n_kv_heads,
                             tk < n_tiles);
#endif
        if (do_k) {
            const int cp = tk < n_tiles && lz_nv_chunk_copies(ek);
            if (cp) lz_nv_produce_tile(kbase + ks * LZ_NV_MAT_BYTES, kc, ek, kvh, n_kv_heads, t);
            lz_nv_landed_arrive(LZ_NV_KFULL(bars, ks), cp);
        }
        if (do_k && t == 0) {
            int word = tk < n_tiles ? tk : marker;
#if LZ_NV_PFLAGS
            /* the consumers' rule (lz_nv_consume, lz_nv_rot_mask), entry by
             * entry from the task's first tile on, as their queries go */
            if (tk < n_tiles) {
                int full = 1;
                word = 0;
#pragma unroll
                for (int k = 0; k < LZ_NV_EPT; k++) {
                    full &= ek[k].len == LZ_BLOCK && ek[k].pos0 + LZ_BLOCK - 1 <= min_pos;
                    if (rope_style != LZ_ROPE_NONE && ek[k].len > 0 && ek[k].delta != cur_delta) {
                        word |= 1 << k;
                        cur_delta = ek[k].delta;
                    }
                }
                if (!full) word |= LZ_NV_FLAG_MASK;
            }
#endif
#pragma unroll
            for (int k = 0; k < LZ_NV_EPT; k++)
                meta[n % LZ_NV_NMETA][k] =
                    (int4)(ek[k].pos0, ek[k].delta, ek[k].len, k == 0 ? word : tk < n_tiles ? tk : marker);
            if (tasks && n == *kn) tasks[n % LZ_NV_NMETA] = task; /* the task's first item */
            lz_nv_mbar_arrive(LZ_NV_KFULL(bars, ks));
        }
        if (do_v && tv < n_tiles) {
            const int vs = v % LZ_NV_VSLOTS;
            if (v >= LZ_NV_VSLOTS)
                lz_nv_mbar_wait(LZ_NV_VEMPTY(bars, vs), (uint)(v / LZ_NV_VSLOTS - 1) & 1);
#if LZ_NV_BULK
            if (t == 0)
                lz_nv_bulk_pages(LZ_NV_VFULL(bars, vs), vbase + vs * LZ_NV_MAT_BYTES, vc, ev, kvh, n_kv_heads,
                                 1);
#endif
            const int cp = lz_nv_chunk_copies(ev) != 0;
            if (cp) lz_nv_produce_tile(vbase + vs * LZ_NV_MAT_BYTES, vc, ev, kvh, n_kv_heads, t);
            lz_nv_landed_arrive(LZ_NV_VFULL(bars, vs), cp);
            v++;
        }
        if (tk >= n_tiles) break;
        tv = tk;
#pragma unroll
        for (int k = 0; k < LZ_NV_EPT; k++) ev[k] = ek[k];
        tk = lz_nv_batch_next(&b, tk + 1, n_tiles, table, entry_pos, n_entries, max_pos, lane);
    }
    *kn = n + 1, *vn = v;
}

/* Producer warp pw (0 .. 3) takes its role (lz_nv_produce): PRODUCE(role)
 * with the role a constant, so that each role is its own inlined copy (at
 * 32 registers a thread, what one role keeps live spills less); the warps
 * past LZ_NV_PWARPS have none. */
#define LZ_NV_PRODUCER_ROLE(pw, PRODUCE)              \
    do {                                              \
        if (LZ_NV_PWARPS == 1) {                      \
            if ((pw) == 0) PRODUCE(0);                \
        } else if ((pw) < LZ_NV_KWARPS) {             \
            PRODUCE(1);                               \
        } else if ((pw) < LZ_NV_PWARPS) {             \
            PRODUCE(2);                               \
        }                                             \
    } while (0)
