/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lazy prefill, NVIDIA tensor-core path (built only with LAZYATTN_FAST_NV):
 * flash attention with mma.sync m16n8k16 (f16 operands, f32 accumulation),
 * same arguments and semantics as lz_prefill (prefill.cl, the reference).
 *
 * Work-group: LZ_NV_WARPS = WM x G warps; warp (mi, g) owns 16 query tokens
 * (block_token0 + mi * 16 ..) of query head kvh * G + g, so the G heads of
 * a KV head share every staged K/V tile. Tiles of LZ_NV_KT keys
 * (LZ_NV_KT / LZ_BLOCK table entries) stream through two cp.async slots of
 * K and two of V in local memory (XOR-swizzled rows, read by ldmatrix),
 * software-pipelined: in round j the scores of tile j + 1 go to the tensor
 * cores before the softmax and P.V of tile j, while K of tile j + 2 and V
 * of tile j + 1 are in flight. The global addresses of the next K tile are
 * looked up a round ahead, off the critical path. One barrier per tile;
 * tiles wholly in every row's future are skipped.
 *
 * Rotation: K is used exactly as stored (rotated at its stored positions).
 * Instead each warp keeps its 16 query rows as f16 A fragments rotated by
 * R(-delta) of the entry in hand, re-rotated only when the delta changes
 * (once per document): score = (R(-d) q) . (R(s) k) = q . R(s + d) k, one
 * rotation per (query tile, delta), applied in registers (see
 * lz_nv_scores), never a pass over memory. (Rotating K instead, by R(d) per
 * staged tile on its way through registers into local memory, measured
 * slower on the H200, and so did a first rotation before the loop at a
 * run-time position: docs/PERFLOG.md v5.) Masking by positions (key j of
 * entry e at entry_pos[e] + j, visible iff <= q_pos[t]) is evaluated only
 * on tiles that are not wholly visible.
 *
 * LZ_NV_WGMMA (Hopper, through lib/ptx_sm90a.c): both products on wgmma,
 * each warpgroup of 4 warps one m64 operand: S = Q K^T as m64n16k16, or
 * m64n32k16 over a whole tile of one delta (LZ_NV_S_WIDE, the default with
 * the producer's ping-pong) (Q from registers, K from local memory) and
 * O += P V as m64nDk16 (P from
 * registers, V MN-major from local memory, stored in K's core-matrix
 * layout); the softmax between them is unchanged (docs/PERFLOG.md v6, issue 11).
 * LZ_NV_PVOV (opt-in, issue 11 step 3) keeps each tile's P V in flight until
 * the next tile's softmax rescales O, with a third V slot.
 *
 * Needs LZ_HEAD_DIM % 16 == 0, LZ_NV_KT % LZ_BLOCK == 0, LZ_BLOCK % 16 == 0
 * and f16 storage (the host checks; otherwise it uses the portable path).
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

/* Chunk i of a K or V tile: its row and 16-byte column, and the byte offset
 * of a K chunk in its slot. With wgmma (LZ_NV_WGMMA) K is stored in the
 * core-matrix layout wgmma reads (8 rows x 16 bytes contiguous, the 16-byte
 * columns of an 8-row group one after another, LZ_NV_CPR * 128 bytes per
 * group) and consecutive chunks walk down the 8 rows first, so that a warp
 * writes 512 contiguous bytes; else K is laid out like V (LZ_NV_SWZ, read by
 * ldmatrix). */
/* With wgmma: 1 (the default) puts O += P V on wgmma too (V in the K
 * tile's layout, read MN-major through a descriptor); 0 keeps it on
 * mma.sync as in v6 (V read by ldmatrix.trans). */
#if LZ_NV_WGMMA && !defined(LZ_NV_PVWG)
#define LZ_NV_PVWG 1
#endif
#ifndef LZ_NV_PVWG
#define LZ_NV_PVWG 0
#endif
/* With P V on wgmma: 1 keeps the P V group of tile j in flight across the
 * round, waited for only where the softmax of tile j + 1 rescales O, with a
 * third V slot so that the refill at the next barrier never touches the slot
 * it reads (issue 11 step 3; ignored without LZ_NV_PVWG). */
#if !LZ_NV_PVWG
#undef LZ_NV_PVOV
#define LZ_NV_PVOV 0
#endif
#ifndef LZ_NV_PVOV
#define LZ_NV_PVOV 0
#endif
/* 1 (wgmma with P V on wgmma, not with LZ_NV_PVOV; issue 11 steps 4-8; the
 * host's default on compute capability 9.x): one more warpgroup in the
 * work-group, the producer. Its copying warps (LZ_NV_PWARPS) walk the
 * visible tiles (the block table read a batch of entries at a time),
 * write each tile's entries into a meta slot and copy its K into a ring of
 * LZ_NV_KSLOTS slots and its V into a ring of LZ_NV_PVSLOTS, each copy
 * completing on the slot's "full" mbarrier; the consumer warps wait there,
 * and give a slot back on its "empty" mbarrier once their wgmma that read it
 * are done. No barrier across the work-group in the loop, no address
 * lookups and no copies in the consumer warps (docs/PERFLOG.md). With the
 * producer, LZ_NV_PROXY 0 drops the async-proxy fences (timing only);
 * of the LZ_NV_DIAG diagnostics, 4 and 8 apply. The host sizes the launch
 * by the kernel's compiled work-group size. */
#ifndef LZ_NV_PRODUCER
#define LZ_NV_PRODUCER 0
#endif
#if LZ_NV_PRODUCER && (!LZ_NV_PVWG || LZ_NV_PVOV)
#error "LZ_NV_PRODUCER needs the wgmma prefill with P V on wgmma, without LZ_NV_PVOV"
#endif
/* 1 (the default with the producer on a tiled pool, LZ_KV_TILED): the
 * producer copies each page of a tile that is full (valid length LZ_BLOCK)
 * with one cp.async.bulk (lz_nv_bulk_pages), as stored, instead of 16-byte
 * cp.async by its 32 threads. On the H200 issue 11 step 10 measured it 2 %
 * slower than the 16-byte copies of the same tiled pages (which read whole
 * 128-byte lines, 4 a warp's copy instead of 16 from row pages); step 11,
 * with the softmax's exponentials one instruction each (LZ_NV_EXP2_FTZ),
 * 3-4 % faster: (b) 2.940 ms against 3.050 and 3.053 in the same call,
 * (c) 10.96 against 11.27 and 11.31. 0: 16-byte copies. 1 on a row pool
 * is a timing-only diagnostic: the same bytes, landing scrambled (what
 * -DLZ_NV_DIAG=64 measured before the tiled layout existed). */
#ifndef LZ_NV_BULK
#define LZ_NV_BULK (LZ_NV_PRODUCER && LZ_KV_TILED)
#endif
#if LZ_NV_BULK && !LZ_NV_PRODUCER
#error "LZ_NV_BULK needs the producer"
#endif
/* Copying warps of the producer's warpgroup: 1 (all of it), 2 (K and the
 * entries; V) or 4 (two for K, two for V, half of each tile's chunks each).
 * One warp's copy instructions held the round: measured on the H200, 2
 * warps ran 23 % faster than 1, 4 another 1.4 % (docs/PERFLOG.md issue 11
 * step 5, 16-byte copies). With bulk pages (LZ_NV_BULK) a full page is one
 * instruction, and the four schedulers, which the consumer warps keep
 * nearly busy, are what binds (each instruction added to a consumer
 * warp's round cost ~1 clock of the round a scheduler, issue 11 step 16):
 * 2 copying warps (the other two end at once) ran (b) 2.582 ms against
 * 2.695 / 2.659 with 4 in the same call, (c) 9.46 against 9.95 / 9.94,
 * (a) 1.512 against 1.574 / 1.571; 1 ran (b) in 3.197. */
#ifndef LZ_NV_PWARPS
#define LZ_NV_PWARPS (LZ_NV_BULK ? 2 : 4)
#endif
#if LZ_NV_PWARPS != 1 && LZ_NV_PWARPS != 2 && LZ_NV_PWARPS != 4
#error "LZ_NV_PWARPS: 1, 2 or 4"
#endif
/* warps copying K (and V): all with one copying warp, else half each */
#define LZ_NV_KWARPS (LZ_NV_PWARPS == 1 ? 1 : LZ_NV_PWARPS / 2)
/* Work-items of a work-group: the consumer warps, and the producer's
 * warpgroup (its first LZ_NV_PWARPS warps copy, the others end at once).
 * A whole warpgroup, because registers go to an SM's four schedulers a
 * warp at a time: with one producer warp beside 12 consumers one scheduler
 * holds 4 warps and every warp got 128 registers (measured on the H200:
 * the consumers spilled 2 240 bytes and ptxas serialized their wgmma,
 * C7512; docs/PERFLOG.md issue 11 step 5). With a warpgroup, `setmaxnreg`
 * moves registers from the producer (LZ_NV_PREGS) to the consumers
 * (LZ_NV_CREGS) within each scheduler's 512 a thread-slot: 12 consumer
 * warps 160 (+ 32) from a launch cap of 128; 8 consumer warps 232 (+ 40)
 * from 168; 4 consumer warps keep their launch cap (255). The budgets
 * hold only with a register count at entry equal to the launch cap, which
 * ".minnctapersm 1" gives (lib/ptx_sm90a.c); setmaxnreg.inc waits for
 * registers the pool does not have. */
#define LZ_NV_WG_THREADS (LZ_NV_THREADS + 128 * LZ_NV_PRODUCER)
/* 1 (the default with the producer at 8 or 12 consumer warps; issue 11
 * step 6: +21 % on 2 x 8192 causal on the H200; 0 through
 * LAZYATTN_NV_DEFINES gives step 5's loop): FlashAttention-3's ping-pong.
 * The consumer warpgroups take turns at the tensor cores: in its turn a
 * warpgroup issues the scores of tile j + 1 and O += P V of tile j back to
 * back, then hands the turn on (named barriers) and does the softmax of
 * tile j + 1 while the next warpgroup's products run. The probabilities
 * stay f32 until P V of tile j is waited for (its A operand); O is
 * rescaled before the next turn. */
#ifndef LZ_NV_PINGPONG
#define LZ_NV_PINGPONG 1
#endif
/* 1 (opt-in, LAZYATTN_NV_PERSIST=1; with the producer's ping-pong; issue
 * 11 step 13): lz_prefill_nv persistent (lz_prefill_nv_persist), a
 * work-group a SM running a list of tasks with one set of rings; 0 (the
 * default): a work-group a task. Measured on the H200 slower than a
 * work-group a task: 2 x 8192 causal 2.96-2.99 ms against 2.86, 1 x 16384
 * 12.0 against 10.7-10.8, 4096 over 4 x 2048 1.77 against 1.69
 * (docs/PERFLOG.md). The batched prefill keeps a work-group a task. */
#ifndef LZ_NV_PERSIST
#define LZ_NV_PERSIST 0
#endif
/* 1: the ping-pong's first-entry rotation, V wait and proxy fence before
 * the turn; 0: inside it, as first measured (issue 11 step 6) */
#ifndef LZ_NV_PP_EARLY
#define LZ_NV_PP_EARLY 1
#endif
#if LZ_NV_PINGPONG && !(LZ_NV_PRODUCER && (LZ_NV_WARPS == 8 || LZ_NV_WARPS == 12))
#undef LZ_NV_PINGPONG
#define LZ_NV_PINGPONG 0
#endif
#if LZ_NV_PERSIST && !LZ_NV_PINGPONG
#error "LZ_NV_PERSIST needs the producer's ping-pong (the host sizes the launch by it)"
#endif
/* 1 (the ping-pong; opt-in, issue 11 step 11; measured in step 12 on the
 * H200: 1 x 16384 +1.6 %, 2 x 8192 causal and 4096 over 4 x 2048 cached
 * -0.7 to -0.8 %, so not the default): the rows' sums of P by the tensor
 * cores, one wgmma m64n8k16 of P against a 16 x 8 block of f16 ones beside
 * each k-step of O += P V (into ls, rescaled with O), instead of 16 adds
 * and 2 multiplies a round on the softmax's chain and the quad's shuffles
 * at the end; the sums are then of the f16 probabilities P V multiplies.
 * 512 bytes of local memory and 4 accumulator registers. */
#ifndef LZ_NV_L_WG
#define LZ_NV_L_WG 0
#endif
#if LZ_NV_L_WG && !(LZ_NV_PRODUCER && LZ_NV_PINGPONG)
#undef LZ_NV_L_WG
#define LZ_NV_L_WG 0
#endif
#if LZ_NV_L_WG
#define LZ_NV_ONES_DECL __local ushort ones_[256] __attribute__((aligned(128)));
#define LZ_NV_ONES_ARG , ones_
#define LZ_NV_ONES_PARAM , __local ushort *ones
#define LZ_NV_ONES_FWD , ones
#else
#define LZ_NV_ONES_DECL
#define LZ_NV_ONES_ARG
#define LZ_NV_ONES_PARAM
#define LZ_NV_ONES_FWD
#endif
/* 1 (wgmma, KT 32; issue 11 step 4; the default with the producer's
 * ping-pong since step 14): a K tile whose entries share one delta (every
 * tile inside a document) is scored by one wgmma m64n32k16 per 16 dims
 * instead of two m64n16k16 (in lz_nv_scores; without the LZ_NV_DIAG 4
 * diagnostic). Measured on the H200 (bench/probe_wgmma_rate.c, A from
 * registers, 3 warpgroups a SM): m64n16k16 runs at 2 520 FLOP a clock a SM,
 * m64n32k16 and m64n128k16 at 4 095 (the peak), so a round's 16 m64n16 and
 * 2 m64n128 took 1.31x the tensor time of 8 m64n32 and 2 m64n128; the
 * prefill +4 % on 2 x 8192 causal and 1 x 16384 with the decisions before
 * the turn (LZ_NV_PP_META). */
#if !LZ_NV_WGMMA || LZ_NV_KT != 32
#undef LZ_NV_S_WIDE
#define LZ_NV_S_WIDE 0
#endif
#ifndef LZ_NV_S_WIDE
#define LZ_NV_S_WIDE (LZ_NV_PRODUCER && LZ_NV_PINGPONG)
#endif
/* Slots of the producer's K and V rings (40 KB at d 128, KT 32): 3 K and
 * 2 V. With the ping-pong and the narrow scores 2 K and 3 V measured 3.5 %
 * faster on 2 x 8192 causal (issue 11 step 8: a V slot is given back only
 * after P V, at the end of a round); with the wide scores (LZ_NV_S_WIDE)
 * 3 K and 2 V are faster again, +1.5-2.5 % on 2 x 8192 causal, 1 x 16384
 * and the cached documents, in two calls of step 14 (where a diagnostic
 * found the slots' waits almost never waiting: 0-4 rounds of 225). Without
 * the ping-pong (both given back together) 3 K and 2 V, as step 5 measured. */
#ifndef LZ_NV_KSLOTS
#define LZ_NV_KSLOTS (LZ_NV_PINGPONG && !LZ_NV_S_WIDE ? 2 : 3)
#endif
#ifndef LZ_NV_PVSLOTS
#define LZ_NV_PVSLOTS (LZ_NV_PINGPONG && !LZ_NV_S_WIDE ? 3 : 2)
#endif
#if LZ_NV_PVSLOTS != 2 && LZ_NV_PVSLOTS != 3
#error "LZ_NV_PVSLOTS: 2 or 3"
#endif
#if LZ_NV_PRODUCER && LZ_NV_WARPS == 12 && !defined(LZ_NV_CREGS)
#define LZ_NV_CREGS 160
#define LZ_NV_PREGS 32
#elif LZ_NV_PRODUCER && LZ_NV_WARPS == 8 && !defined(LZ_NV_CREGS)
#define LZ_NV_CREGS 232
#define LZ_NV_PREGS 40
#elif defined(LZ_NV_CREGS)
/* (set with LZ_NV_PREGS: timing experiments; 3 x CREGS + PREGS <= 512 at 12 warps) */
#elif LZ_NV_PRODUCER && LZ_NV_WARPS != 4
#error "LZ_NV_PRODUCER needs 4, 8 or 12 consumer warps"
#endif
/* slots of the K ring and of the V ring; meta slots (one more than the K
 * slots: a tile's entries stay until its softmax has masked it, after its
 * K slot is given back); mbarriers (full and empty of each K and each V slot) */
#define LZ_NV_KRING (LZ_NV_PRODUCER ? LZ_NV_KSLOTS : 2)
#define LZ_NV_VSLOTS (LZ_NV_PVOV ? 3 : LZ_NV_PRODUCER ? LZ_NV_PVSLOTS : 2)
#define LZ_NV_NMETA (LZ_NV_PRODUCER ? LZ_NV_KSLOTS + 1 : LZ_NV_META)
#define LZ_NV_MBARS (LZ_NV_PRODUCER ? 2 * (LZ_NV_KSLOTS + LZ_NV_VSLOTS) : 1)
/* byte offset of V slot i (tile t_i) in the V ring */
#define LZ_NV_VSLOT(i) (((uint)(i) % LZ_NV_VSLOTS) * LZ_NV_MAT_BYTES)
/* 0 drops the async-proxy fence after each tile's copies (an experiment:
 * serve/'s wgmma GEMM measured it at ~25 % with one work-group an SM; with
 * the producer timing only, as wgmma may then read a slot's old data) */
#ifndef LZ_NV_PROXY
#define LZ_NV_PROXY 1
#endif
/* 1 (with the producer): the async-proxy fence on the producer's side, as
 * FlashAttention-3 fences its paged cp.async copies: a copying thread that
 * made 16-byte copies into a slot (a tile with a partial page; full pages
 * come by cp.async.bulk, which writes through the async proxy already) waits
 * for them, fences them for the async proxy and then arrives on the slot's
 * full barrier (the same count as the cp.async arrival it replaces); the
 * consumers then fence nothing before their wgmma reads (the ping-pong). */
#ifndef LZ_NV_PFENCE
#define LZ_NV_PFENCE (LZ_NV_PRODUCER && LZ_NV_PINGPONG)
#endif
#if LZ_NV_PFENCE && !(LZ_NV_PRODUCER && LZ_NV_PROXY)
#undef LZ_NV_PFENCE
#define LZ_NV_PFENCE 0
#endif
/* the consumers' fence before wgmma reads the producer's slots (the ping-pong) */
#define LZ_NV_CFENCE (LZ_NV_PROXY && !LZ_NV_PFENCE)
/* Diagnostics, timing only (the results are wrong): what a round costs
 * without a part of it. Bits: 1 no copies after the prologue (the tiles stay
 * as first loaded), 2 no barrier per tile, 4 no wgmma (scores 0, O
 * unchanged), 8 (LZ_NV_PRODUCER) the producer copies nothing after its
 * first tiles of each K and V slot, its lookups and arrivals unchanged.
 * (Bit 64, each page as one 4 KB cp.async.bulk whatever its layout, measured
 * what the tiled pool layout would buy before it was built: LZ_NV_BULK.) */
#ifndef LZ_NV_DIAG
#define LZ_NV_DIAG 0
#endif
/* Bit 16 (the ping-pong with its producer): where a consumer's round goes,
 * in SM clocks summed over its rounds (%clock, 32 bits, a phase far shorter
 * than 2^32), in four parts with a clock read between each: before its turn
 * (the K and V waits, rotation, rescale), the wait for the turn, the turn
 * (issuing the scores and P V), after it (the waits for both, mask,
 * softmax, packing). The results stay right; lane 0 of each consumer warp of
 * one work-group (the middle one of the first KV head of the first
 * sequence) then writes over 12 of its own elements of its row r0 (columns
 * 0, 1, 8, 9, ..., 40, 41 of its head): LZ_NV_DIAG_MAGIC | warp, rounds,
 * clocks, the four parts, LZ_NV_DIAG_MAGIC2, then of the K and V full
 * waits before the turn (issue 11 step 14) the rounds where each was not
 * complete at once and the clocks spent in each — bench_kernels prints them with
 * LAZYATTN_NV_DIAG_DUMP=1. (Its first form printed them with printf, which
 * made ptxas serialize every wgmma (C7509: an extern call in the function);
 * its second never stored O, so ptxas dropped the products (call 3 of
 * 2026-12-01, second session: timings of a kernel without tensor work).)
 * Bit 32 with 16: the clock reads without the write (results exact), for
 * finding which reads change the kernel's schedule; LZ_NV_DIAG_MARKS picks
 * them (bits: 1 after the pre-turn work, 2 after the turn's wait, 4 after
 * the turn, 8 at the end of the round; default all; a phase whose read is
 * left out counts in the next one). */
#if LZ_NV_DIAG & 16
#define LZ_NV_CLK(v) asm volatile("mov.u32 %0, %%clock;" : "=r"(v)::"memory")
#ifndef LZ_NV_DIAG_MARKS
#define LZ_NV_DIAG_MARKS 15
#endif
/* the time since the last mark into acc */
#define LZ_NV_MARK(bit, acc)                                                                    \
    do {                                                                                     \
        if (LZ_NV_DIAG_MARKS & (bit)) {                                                      \
            uint t_;                                                                         \
            LZ_NV_CLK(t_);                                                                   \
            (acc) += t_ - d_mark;                                                            \
            d_mark = t_;                                                                     \
        }                                                                                    \
    } while (0)
#define LZ_NV_DIAG_MAGIC 0x1a2d0000u
#define LZ_NV_DIAG_MAGIC2 0x1a2e0000u
/* The K or V full barrier waited for (the ping-pong's loop) as
 * lz_nv_mbar_wait does; with bit 16 also counted where it was not complete
 * at once (miss) and the clocks of the wait summed (clk). */
#define LZ_NV_DIAG_WAIT(bar, parity, miss, clk)                                                     \
    do {                                                                                     \
        uint t0_, t1_, ready_;                                                               \
        LZ_NV_CLK(t0_);                                                                      \
        asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }" \
                     : "=r"(ready_) : "r"(bar), "r"(parity) : "memory");                     \
        (miss) += !ready_;                                                                   \
        lz_nv_mbar_wait(bar, parity);                                                        \
        LZ_NV_CLK(t1_);                                                                      \
        (clk) += t1_ - t0_;                                                                  \
    } while (0)
/* whether the thread whose lane is `lane` writes (lane 0 of the work-group chosen) */
#define LZ_NV_DIAG_WRITES(lane) \
    ((lane) == 0 && get_group_id(0) == get_num_groups(0) / 2 && get_group_id(1) == 0 && get_group_id(2) == 0)
#else
#define LZ_NV_MARK(bit, acc)
#define LZ_NV_DIAG_WAIT(bar, parity, miss, clk) lz_nv_mbar_wait(bar, parity)
#endif
/* whether the producer copies item n of a ring whose first `first` items it
 * always copies (bit 8) */
#if LZ_NV_DIAG & 8
#define LZ_NV_PCOPY(n, first) ((n) < (first))
#else
#define LZ_NV_PCOPY(n, first) 1
#endif

/* (wgmma, or tiled pool pages on mma.sync: the pages' own order, each
 * 128-byte line of a page read whole into one line of local memory, as
 * decode_nv measured it must be) */
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
#if LZ_NV_PVWG || LZ_KV_TILED
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

/* 1 (the ping-pong with LZ_NV_PP_EARLY; the default at 32-key tiles since
 * issue 11 step 9, +2-4 % on the H200; with LZ_NV_S_WIDE too since step 14,
 * which made the two go together): the scores'
 * bookkeeping done before the turn, whether the tile needs a mask and
 * which later entry rotates the queries (lz_nv_rot_mask), so that the turn
 * issues its wgmma without reading the entries (two dependent local loads
 * in it before). At 64-key tiles ptxas serializes every wgmma with it
 * (C7514, seen at d 64), so there it stays off unless asked for. */
#ifndef LZ_NV_PP_META
#define LZ_NV_PP_META (LZ_NV_KT == 32)
#endif
#if !LZ_NV_PINGPONG || !LZ_NV_PP_EARLY
#undef LZ_NV_PP_META
#define LZ_NV_PP_META 0
#endif
/* lz_nv_scores' rmask when it reads the entries and decides itself */
#define LZ_NV_DECIDE_HERE 0xffffffffu
/* 1 (with LZ_NV_PP_META; the default since issue 11 step 17): the
 * producer takes the decisions of the consumers' rounds (the queries'
 * rotation for the tile's first entry, lz_nv_rot_mask's) with the same
 * rule over the same tiles, and hands them over in the tile's word
 * meta[slot][0].w (LZ_NV_FLAG_*; an end marker's stays negative), so that
 * a consumer warp's round reads one word of the entries instead of two
 * entries and tests its bits instead of comparing fields: the schedulers'
 * issue binds the round (issue 11 step 16); H200: 2 x 8192 causal -1.9 %
 * (step 17). */
#ifndef LZ_NV_PFLAGS
#define LZ_NV_PFLAGS LZ_NV_PP_META
#endif
#if !LZ_NV_PP_META
#undef LZ_NV_PFLAGS
#define LZ_NV_PFLAGS 0
#endif
/* A tile's flag word: bit e (e < LZ_NV_EPT) where entry e rotates the
 * queries (its delta differs from the one they are rotated for: bit 0 the
 * loop's rotation before the turn, bits 1.. lz_nv_rot_mask's), and
 * LZ_NV_FLAG_MASK where some key needs the mask (lz_nv_rot_mask's !full) */
#define LZ_NV_FLAG_ROT0 1
#define LZ_NV_FLAG_LATER ((1u << LZ_NV_EPT) - 2u)
#define LZ_NV_FLAG_MASK (1 << 16)
/* 1 (the default since issue 11 step 17): the consumers' running maxima
 * start finite (LZ_NV_M_NONE, LZ_NV_SOFTMAX_MAX_FROM), so that a round
 * takes no test for -inf */
#ifndef LZ_NV_M_FINITE
#define LZ_NV_M_FINITE 1
#endif

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
#if LZ_NV_DIAG & 4
        (void)desc;
#pragma unroll
        for (int u = 0; u < 4; u++) sc[2 * p][u] = sc[2 * p + 1][u] = 0.0f;
        LZ_NV_WG_TIE(sc[2 * p]);
        LZ_NV_WG_TIE(sc[2 * p + 1]);
#else
#pragma unroll
        for (int c = 0; c < LZ_NV_DC; c++)
            LZ_NV_WGMMA_N16(sc[2 * p], sc[2 * p + 1], qf[c], desc + 16 * c, c > 0);
#endif
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

#if LZ_NV_PVWG
/* O += P V over the LZ_NV_KT keys of the V tile whose descriptor is vdesc
 * (lz_nv_wg_vdesc; each 16 keys' one has its start address field moved on,
 * which cannot carry for addresses under 256 KB): KT / 16 asynchronous
 * wgmma m64nDk16 (A = P from registers, this lane's fragments pa), one
 * commit group that the caller waits for (without them with the
 * LZ_NV_DIAG 4 diagnostic). A macro: as a function, clang moved the row
 * sums of the softmax across its fences. */
#define LZ_NV_PV_ISSUE_D(o, pa, vdesc)                                                       \
    do {                                                                                     \
        LZ_NV_WG_FENCE();                                                                    \
        _Pragma("unroll")                                                                    \
        for (int kk_ = 0; kk_ < LZ_NV_KT / 16; kk_++)                                        \
            if (!(LZ_NV_DIAG & 4)) {                                                         \
                LZ_NV_WGMMA_PV(o, pa[kk_], (vdesc) + (ulong)kk_ * ((2 * LZ_NV_CPR * 128) >> 4)); \
                LZ_NV_PV_ROWSUM(pa[kk_]);                                                    \
            }                                                                                \
        LZ_NV_WG_COMMIT();                                                                   \
    } while (0)
/* The same with the V tile at shared address vb */
#define LZ_NV_PV_ISSUE(o, pa, vb) LZ_NV_PV_ISSUE_D(o, pa, lz_nv_wg_vdesc(vb))
/* With LZ_NV_L_WG (built only into the ping-pong loop): the same P against
 * the ones at the caller's descriptor onesd into its row sums ls, in the
 * same group */
#if LZ_NV_L_WG
#define LZ_NV_PV_ROWSUM(a) LZ_NV_WGMMA_N8(ls, a, onesd)
#else
#define LZ_NV_PV_ROWSUM(a)
#endif
#endif

/* The scores of lz_nv_scores are ready to read (wgmma: wait for them),
 * and the accumulators o of the P V wgmma issued before them. */
__attribute__((always_inline)) inline void lz_nv_scores_wait(float sc[LZ_NV_KT / 8][4],
                                                             float o[LZ_HEAD_DIM / 8][4]) {
#if LZ_NV_WGMMA
    LZ_NV_WG_WAIT();
#pragma unroll
    for (int n = 0; n < LZ_NV_KT / 8; n++) LZ_NV_WG_TIE(sc[n]);
#if LZ_NV_PVWG
#pragma unroll
    for (int n = 0; n < LZ_HEAD_DIM / 8; n++) LZ_NV_WG_TIE(o[n]);
#else
    (void)o;
#endif
#else
    (void)sc, (void)o;
#endif
}

/* cp.async copies of this thread have landed (at most `pending` groups of
 * it still in flight), visible to wgmma's reads after the next barrier. */
#if LZ_NV_WGMMA && LZ_NV_PROXY
#define LZ_NV_LANDED(pending) do { LZ_NV_CP_WAIT(pending); LZ_NV_PROXY_FENCE(); } while (0)
#else
#define LZ_NV_LANDED(pending) LZ_NV_CP_WAIT(pending)
#endif

#if LZ_NV_PRODUCER
/* The mbarriers of the rings at shared address bars (LZ_NV_MBARS of 8 bytes):
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
/* N > 0 (the producer; opt-in): while it copies tile i, each copying role
 * prefetches its rows of tile i + N into L1 (prefetch.global.L1) and copies
 * with cp.async.ca, so that a copy could read L1 rather than wait out L2's
 * latency (48 KB of local memory leave the rings about one round of
 * lookahead). Measured slower on the H200 (issue 11 step 9, prefill (b)):
 * N = 1, 2, 4 took 3.95, 3.89, 3.85 ms against 3.28 without. Its lines
 * are a row page's (on tiled pages it prefetches other lines of the same
 * pages: timing only). */
#ifndef LZ_NV_L1PF
#define LZ_NV_L1PF 0
#endif
#if LZ_NV_L1PF > 0
#define LZ_NV_PCP16(dst, src, valid) lz_nv_cp16_ca(dst, src, valid)
#else
#define LZ_NV_PCP16(dst, src, valid) lz_nv_cp16(dst, src, valid)
#endif
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
#ifndef LZ_NV_PBATCH
#define LZ_NV_PBATCH 1
#endif
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

#if LZ_NV_PBATCH && LZ_NV_L1PF > 0
/* The K or V rows of tile tp (its entries in batch b) into L1 ahead of
 * their copy: one prefetch a 128-byte line, the role's threads t in turn
 * (tiles whose entries are not in the batch are left alone). */
__attribute__((always_inline)) inline void lz_nv_prefetch_tile(const lz_nv_table_batch *b, int tp, int n_tiles,
                                                               __global const ushort *pool, int kvh,
                                                               int n_kv_heads, int n_entries, int n_blocks,
                                                               int t) {
    const int off = tp * LZ_NV_EPT - b->be;
    if (tp >= n_tiles || off < 0 || off + LZ_NV_EPT > LZ_NV_BATCH) return;
    lz_nv_entry en[LZ_NV_EPT];
#pragma unroll
    for (int k = 0; k < LZ_NV_EPT; k++) en[k] = lz_nv_batch_entry(b, tp * LZ_NV_EPT + k, n_entries, n_blocks);
    const int lpr = LZ_NV_CPR / 8; /* 128-byte lines a row */
#pragma unroll
    for (int i = t; i < LZ_NV_KT * lpr; i += LZ_NV_PTHREADS) {
        const int r = i / lpr, j = r % LZ_BLOCK;
        const lz_nv_entry e = lz_nv_row_entry(en, (uint)r);
        if (j < e.len)
            asm volatile("prefetch.global.L1 [%0];" ::"l"(pool + (long)lz_kv_offset(e.blk, kvh, n_kv_heads, j) +
                                                          (i % lpr) * 64));
    }
}
#endif

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
#if LZ_NV_PBATCH
    const int lane = t & 31;
    lz_nv_table_batch b;
    lz_nv_batch_load(&b, 0, table, entry_pos, n_entries, max_pos, lane);
    int tk = max_pos < 0 ? n_tiles : lz_nv_batch_next(&b, 0, n_tiles, table, entry_pos, n_entries, max_pos, lane);
#else
    int tk = max_pos < 0 ? n_tiles : lz_nv_next_tile(0, n_tiles, n_entries, entry_pos, max_pos);
#endif
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
#if LZ_NV_PBATCH
            ek[k] = tk < n_tiles ? lz_nv_batch_entry(&b, tk * LZ_NV_EPT + k, n_entries, n_blocks) : none;
#else
            ek[k] = tk < n_tiles ? lz_nv_get_entry(table, entry_pos, tk * LZ_NV_EPT + k, n_entries, n_blocks)
                                 : none;
#endif
        }
#if LZ_NV_PBATCH && LZ_NV_L1PF > 0
        if (tk < n_tiles)
            lz_nv_prefetch_tile(&b, tk + LZ_NV_L1PF, n_tiles, do_k ? kc : vc, kvh, n_kv_heads, n_entries,
                                n_blocks, t);
#endif
#if LZ_NV_BULK
        if (do_k && t == 0)
            lz_nv_bulk_pages(LZ_NV_KFULL(bars, ks), kbase + ks * LZ_NV_MAT_BYTES, kc, ek, kvh, n_kv_heads,
                             tk < n_tiles && LZ_NV_PCOPY(n, LZ_NV_KSLOTS));
#endif
        if (do_k) {
            const int cp = tk < n_tiles && LZ_NV_PCOPY(n, LZ_NV_KSLOTS) && lz_nv_chunk_copies(ek);
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
                                 LZ_NV_PCOPY(v, LZ_NV_VSLOTS));
#endif
            const int cp = LZ_NV_PCOPY(v, LZ_NV_VSLOTS) && lz_nv_chunk_copies(ev);
            if (cp) lz_nv_produce_tile(vbase + vs * LZ_NV_MAT_BYTES, vc, ev, kvh, n_kv_heads, t);
            lz_nv_landed_arrive(LZ_NV_VFULL(bars, vs), cp);
            v++;
        }
        if (tk >= n_tiles) break;
        tv = tk;
#pragma unroll
        for (int k = 0; k < LZ_NV_EPT; k++) ev[k] = ek[k];
#if LZ_NV_PBATCH
        tk = lz_nv_batch_next(&b, tk + 1, n_tiles, table, entry_pos, n_entries, max_pos, lane);
#else
        tk = lz_nv_next_tile(tk + 1, n_tiles, n_entries, entry_pos, max_pos);
#endif
    }
    *kn = n + 1, *vn = v;
}
#endif

#if LZ_NV_PRODUCER && LZ_NV_PINGPONG
/* x, the same in every lane of the warp, as the compiler then knows it
 * (redux.sync's result, a uniform register). The persistent kernel's ring
 * counters, carried from task to task, lost that knowledge: ptxas kept the
 * slots' addresses and the entries in per-lane registers. LZ_NV_UNIFORMS
 * (on by default with LZ_NV_PERSIST) passes them through it: measured on
 * the H200, 2 x 8192 causal 2.971 ms against 3.052 without, 1 x 16384
 * 11.98 against 12.21 (issue 11 step 13). */
#ifndef LZ_NV_UNIFORMS
#define LZ_NV_UNIFORMS LZ_NV_PERSIST
#endif
#if LZ_NV_UNIFORMS
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
              int *kn, int *vn LZ_NV_ONES_PARAM) {
    const int lane = get_local_id(0) & 31, t4 = lane & 3, r1 = r0 + 8;
    /* the queries, as given (rotated on the first entry with a delta) */
    __global const float *qrow0 = r0 < n_queries ? q + ((size_t)r0 * n_q_heads + h) * LZ_HEAD_DIM : 0;
    __global const float *qrow1 = r1 < n_queries ? q + ((size_t)r1 * n_q_heads + h) * LZ_HEAD_DIM : 0;
    uint qf[LZ_NV_DC][4];
    int cur_delta = 0, n_rel = 0;
    lz_nv_load_a(qf, qrow0, qrow1, t4, 0, rope_style, rot_dim, freq);

    float o[LZ_HEAD_DIM / 8][4];
#pragma unroll
    for (int n = 0; n < LZ_HEAD_DIM / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    /* LZ_NV_M_FINITE: the maxima start finite, no test for -inf a round */
    float m0 = LZ_NV_M_FINITE ? LZ_NV_M_NONE : -INFINITY, m1 = m0, l0 = 0.0f, l1 = 0.0f;
#if LZ_NV_L_WG
    /* the row sums by the tensor cores (l0, l1 then unused until the end) */
    float ls[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const ulong onesd = lz_nv_wg_desc(LZ_NV_SMEM(ones), 128, 128);
#endif
    const float sl2 = scale * 1.44269504088896341f;
    /* V slot 0's descriptor, made once; slot s's has its address field s
     * tiles on (addresses under 256 KB: the field does not carry over) */
    const ulong vdesc0 = lz_nv_wg_vdesc(vbase);

    /* Round j consumes item j of the producer (lz_nv_produce). With the
     * ping-pong (the default): before its turn a warpgroup waits for K of
     * item j + 1 and V of item j; in its turn it issues the scores of j + 1
     * and O += P(j) V; after it, wait_group 1 gives the K slot back and the
     * softmax of j + 1 runs while P V does, then wait_group 0 gives the V
     * slot back. Without it: the scores of item j + 1 go to the tensor cores
     * as soon as its K slot is full, then item j is masked, its softmax
     * taken and O += P V issued once its V slot is full; both wgmma groups
     * are waited for together, and the two slots given back (one arrival a
     * warp each). */
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
        LZ_NV_SOFTMAX_MAX_FROM(LZ_NV_KT, sc, m0, m1, l0, l1, sl2, b0, b1, a0, a1, LZ_NV_M_FINITE);
        LZ_NV_SOFTMAX_EXP_F32(LZ_NV_KT, sc, l0, l1, sl2, b0, b1);
        LZ_NV_PACK_P(LZ_NV_KT, sc, pa);
        al0 = a0, al1 = a1;
    }
#if LZ_NV_DIAG & 16
    uint d_pre = 0, d_wait = 0, d_turn = 0, d_post = 0, d_start, d_end, d_mark;
    uint d_kmiss = 0, d_vmiss = 0, d_kclk = 0, d_vclk = 0;
    LZ_NV_CLK(d_start);
    d_mark = d_start;
#endif
    int j = 0;
    for (; has; j++) {
        const int n1 = k0 + j + 1, vj = v0 + j, ks = n1 % LZ_NV_KSLOTS, vs = vj % LZ_NV_VSLOTS;
        LZ_NV_DIAG_WAIT(LZ_NV_KFULL(bars, ks), (uint)(n1 / LZ_NV_KSLOTS) & 1, d_kmiss, d_kclk);
        __local const int4 *mn = meta[n1 % LZ_NV_NMETA];
        const int word = mn[0].w; /* the tile's flags (LZ_NV_PFLAGS), or its index; < 0: the end marker */
        const int has_n = word >= 0;
        int full_n = 1;
        /* Everything a turn does not need held before it: a stall inside
         * the turn holds every warpgroup's products. The queries rotated
         * for tile j + 1's first entry (lz_nv_scores finds them rotated; a
         * rotation inside the turn measured +3.4 % on prefill (a)), V(j)
         * waited for, one proxy fence for both slots' copies; O (no product
         * in flight) rescaled for P(j): a write to an accumulator between a
         * wgmma and its wait makes ptxas serialize them all (C7515). */
#if LZ_NV_PP_EARLY
#if LZ_NV_PFLAGS
        if ((word & (int)(0x80000000u | LZ_NV_FLAG_ROT0)) == LZ_NV_FLAG_ROT0)
#else
        if (rope_style != LZ_ROPE_NONE && mn[0].z > 0 && mn[0].y != cur_delta)
#endif
            lz_nv_requery(qf, &cur_delta, &n_rel, mn[0].y, qrow0, qrow1, t4, rope_style, rot_dim, freq);
        LZ_NV_DIAG_WAIT(LZ_NV_VFULL(bars, vs), (uint)(vj / LZ_NV_VSLOTS) & 1, d_vmiss, d_vclk);
        if (LZ_NV_CFENCE) LZ_NV_PROXY_FENCE();
#endif
#if LZ_NV_PFLAGS
        /* the producer's decisions (the end marker's: none, no mask) */
        const int full_pre = !(word & LZ_NV_FLAG_MASK);
        const uint rmask = has_n ? (uint)word & LZ_NV_FLAG_LATER : 0u;
#elif LZ_NV_PP_META
        int full_pre;
        const uint rmask = lz_nv_rot_mask(mn, cur_delta, min_pos, rope_style, &full_pre);
#endif
        LZ_NV_RESCALE(o, al0, al1);
#if LZ_NV_L_WG
        if (al0 != 1.0f || al1 != 1.0f) ls[0] *= al0, ls[1] *= al0, ls[2] *= al1, ls[3] *= al1;
#endif
        LZ_NV_MARK(1, d_pre);
        LZ_NV_BAR_SYNC(my_turn, 256u);
        LZ_NV_MARK(2, d_wait);
#if !LZ_NV_PP_EARLY
        if (LZ_NV_CFENCE) LZ_NV_PROXY_FENCE();
#endif
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
                              qrow1, lane, rope_style, rot_dim, freq, LZ_NV_PP_EARLY, LZ_NV_DECIDE_HERE);
#endif
#if !LZ_NV_PP_EARLY
        lz_nv_mbar_wait(LZ_NV_VFULL(bars, vs), (uint)(vj / LZ_NV_VSLOTS) & 1);
        if (LZ_NV_CFENCE) LZ_NV_PROXY_FENCE();
#endif
        LZ_NV_PV_ISSUE_D(o, pa, vdesc0 + (ulong)((uint)vs * (LZ_NV_MAT_BYTES >> 4))); /* (and LZ_NV_L_WG's sums) */
        if (has_n || wg != nwg - 1) LZ_NV_BAR_ARRIVE(next_turn, 256u);
        LZ_NV_MARK(4, d_turn);
        /* the scores of tile j + 1 done (P V of tile j may still run) */
        LZ_NV_WG_WAIT1();
#pragma unroll
        for (int n = 0; n < LZ_NV_KT / 8; n++) LZ_NV_WG_TIE(sc[n]);
        LZ_NV_WARP_SYNC();
        if (lane == 0) lz_nv_mbar_arrive(LZ_NV_KEMPTY(bars, ks)); /* an end marker's too */
        if (has_n) {
            if (!full_n) lz_nv_mask(sc, mn, qp0, qp1, t4);
            LZ_NV_SOFTMAX_MAX_FROM(LZ_NV_KT, sc, m0, m1, l0, l1, sl2, b0, b1, a0, a1, LZ_NV_M_FINITE);
            LZ_NV_SOFTMAX_EXP_F32(LZ_NV_KT, sc, l0, l1, sl2, b0, b1);
            al0 = a0, al1 = a1;
        }
        /* P V of tile j done: its V slot back, and P(j + 1) packed */
        LZ_NV_WG_WAIT();
#pragma unroll
        for (int n = 0; n < LZ_HEAD_DIM / 8; n++) LZ_NV_WG_TIE(o[n]);
#if LZ_NV_L_WG
        LZ_NV_WG_TIE(ls);
#endif
#pragma unroll
        for (int n = 0; n < LZ_NV_KT / 8; n++) LZ_NV_WG_TIE(sc[n]);
        LZ_NV_WARP_SYNC();
        if (lane == 0) lz_nv_mbar_arrive(LZ_NV_VEMPTY(bars, vs));
        if (has_n) LZ_NV_PACK_P(LZ_NV_KT, sc, pa);
        has = has_n;
        LZ_NV_MARK(8, d_post);
    }
#if LZ_NV_DIAG & 16
    LZ_NV_CLK(d_end);
    const uint d_rounds = (uint)j, d_clocks = d_end - d_start;
#endif
    *kn = k0 + j + 1, *vn = v0 + j; /* its tiles and end marker; its tiles */

#if LZ_NV_L_WG
    l0 = ls[0], l1 = ls[2]; /* whole rows' sums already */
#else
    l0 += lz_nv_xor(l0, 1);
    l0 += lz_nv_xor(l0, 2);
    l1 += lz_nv_xor(l1, 1);
    l1 += lz_nv_xor(l1, 2);
#endif
    const float i0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, i1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    if (r0 < n_queries) {
        __global float *dst = out + ((size_t)r0 * n_q_heads + h) * LZ_HEAD_DIM + 2 * t4;
#pragma unroll
        for (int n = 0; n < LZ_HEAD_DIM / 8; n++)
            vstore2((float2)(o[n][0] * i0, o[n][1] * i0), 0, dst + n * 8);
    }
    if (r1 < n_queries) {
        __global float *dst = out + ((size_t)r1 * n_q_heads + h) * LZ_HEAD_DIM + 2 * t4;
#pragma unroll
        for (int n = 0; n < LZ_HEAD_DIM / 8; n++)
            vstore2((float2)(o[n][2] * i1, o[n][3] * i1), 0, dst + n * 8);
    }
#if (LZ_NV_DIAG & 16) && LZ_NV_PRODUCER && LZ_NV_PINGPONG
    /* over elements this lane has just stored: no other thread writes them
     * (with bit 32 never, on a condition ptxas cannot decide, which keeps
     * the clock reads) */
    const int d_write = (LZ_NV_DIAG & 32) ? d_clocks + d_pre + d_wait + d_turn + d_post == 0xfffffffeu : 1;
    if (d_write && LZ_NV_DIAG_WRITES(lane) && r0 < n_queries) {
        __global uint *d = (__global uint *)out + ((size_t)r0 * n_q_heads + h) * LZ_HEAD_DIM;
        const uint w[12] = {LZ_NV_DIAG_MAGIC | (uint)warp, d_rounds, d_clocks, d_pre, d_wait, d_turn, d_post,
                            LZ_NV_DIAG_MAGIC2, d_kmiss, d_vmiss, d_kclk, d_vclk};
#pragma unroll
        for (int i = 0; i < 12; i++) d[(i >> 1) * 8 + (i & 1)] = w[i];
    }
#endif
}
#endif

/* One work-group's rows tok0 .. tok0 + 16 * WM - 1 of one sequence (q, q_pos,
 * out from its first row, table and entry_pos from its first entry) over its
 * n_entries entries; flag_entries: this work-group records the sequence's
 * bad entries. The kernels below give it their local memory. */
__attribute__((always_inline)) inline void
lz_prefill_nv_rows(__global const float *q, __global const int *q_pos, __global const ulong *table,
                   __global const int *entry_pos, __global const ushort *kc,
                   __global const ushort *vc, __global float *out, __global const float2 *freq,
                   int rope_style, int rot_dim, float scale, int n_queries, int n_entries,
                   int n_q_heads, int n_kv_heads, int n_blocks, __global int *err, int kvh,
                   int tok0, int flag_entries, __local uchar *kring, __local uchar *vring,
                   __local int4 (*meta)[LZ_NV_EPT], __local ulong *mbar LZ_NV_ONES_PARAM) {
    const int lid = get_local_id(0);
    const int lane = lid & 31, warp = lid >> 5;
    const int G = n_q_heads / n_kv_heads, WM = LZ_NV_WARPS / G;
    const int gh = warp % G, mi = warp / G;
    const int h = kvh * G + gh;
    const int g = lane >> 2, t4 = lane & 3;
    const int r0 = tok0 + mi * 16 + g, r1 = r0 + 8;
    const int qp0 = lz_nv_query_pos(q_pos, r0, n_queries);
    const int qp1 = lz_nv_query_pos(q_pos, r1, n_queries);

    /* bad entries are flagged once per sequence, wherever they are */
    if (flag_entries)
        for (int e = lid; e < n_entries; e += LZ_NV_WG_THREADS) {
            const ulong w = table[e];
            if (LAZYATTN_ENTRY_BLOCK(w) >= n_blocks) lz_raise(err, LZ_ERR_BLOCK);
            else if (LAZYATTN_ENTRY_LENGTH(w) > LZ_BLOCK) lz_raise(err, LZ_ERR_LENGTH);
            else if (!LZ_ENTRY_POSITIONS_OK(entry_pos[e], LAZYATTN_ENTRY_DELTA(w), LAZYATTN_ENTRY_LENGTH(w)))
                lz_raise(err, LZ_ERR_ENTRY_POSITION);
        }

    /* the work-group's latest and earliest query positions (active rows) */
    __local int *red = (__local int *)kring;
    if (lid == 0) {
        red[0] = -1, red[1] = INT_MAX;
#if LZ_NV_PRODUCER
        lz_nv_ring_init(LZ_NV_SMEM(mbar));
#endif
    }
#if LZ_NV_L_WG
    if (lid < 256) {
        ones[lid] = 0x3C00; /* f16 1.0 */
        LZ_NV_PROXY_FENCE(); /* for wgmma's reads, after the barrier */
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < 16 * WM && tok0 + lid < n_queries) {
        /* each work-group records its own rows' bad positions */
        if (!LZ_POSITION_OK(q_pos[tok0 + lid])) lz_raise(err, LZ_ERR_QUERY_POSITION);
        const int p = lz_nv_query_pos(q_pos, tok0 + lid, n_queries);
        atomic_max(&red[0], p);
        atomic_min(&red[1], p);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int max_pos = red[0], min_pos = red[1];
    barrier(CLK_LOCAL_MEM_FENCE);

    /* The visible tiles t_0, t_1, ... in order; round j consumes t_j with
     * K(t_j) in K slot j % 2, V(t_j) in V slot j % LZ_NV_VSLOTS, entries in meta[j % 4].
     * cur = t_j, nxt = t_j+1, kis = t_j+2 (the next K tile to issue), with
     * ksrc its chunk sources and kmeta its entry; vsrc: V of t_j+1. */
    const uint kbase = LZ_NV_SMEM(kring), vbase = LZ_NV_SMEM(vring);
#if LZ_NV_PRODUCER
    const uint bars = LZ_NV_SMEM(mbar);
    if (warp >= LZ_NV_WARPS) {
#ifdef LZ_NV_PREGS
        LZ_NV_SETMAXNREG(dec, LZ_NV_PREGS);
#endif
        const int pw = warp - LZ_NV_WARPS; /* the warp in the producer's warpgroup */
        /* each role its own inlined copy (the role a constant): at 32
         * registers a thread, what one role keeps live spills less */
        int kn = 0, vn = 0;
#define LZ_NV_PRODUCE(role)                                                                      \
    lz_nv_produce(kc, vc, table, entry_pos, kvh, n_kv_heads, n_entries, n_blocks, max_pos, min_pos,         \
                  rope_style, kbase, vbase, meta, bars, lane + 32 * (pw % LZ_NV_KWARPS), role, &kn, &vn, -1, 0, \
                  (int4)(0))
        if (LZ_NV_PWARPS == 1) {
            if (pw == 0) LZ_NV_PRODUCE(0);
        } else if (pw < LZ_NV_KWARPS) {
            LZ_NV_PRODUCE(1);
        } else if (pw < LZ_NV_PWARPS) {
            LZ_NV_PRODUCE(2);
        }
#undef LZ_NV_PRODUCE
        LZ_NV_CP_WAIT_ALL(); /* nothing in flight when the warp ends */
        return;
    }
#ifdef LZ_NV_CREGS
    LZ_NV_SETMAXNREG(inc, LZ_NV_CREGS);
#endif
#else
    (void)mbar;
#endif
#if !LZ_NV_PRODUCER
    const int n_tiles = (n_entries + LZ_NV_EPT - 1) / LZ_NV_EPT;
    int cur = max_pos < 0 ? n_tiles : lz_nv_next_tile(0, n_tiles, n_entries, entry_pos, max_pos);
    int nxt = cur < n_tiles ? lz_nv_next_tile(cur + 1, n_tiles, n_entries, entry_pos, max_pos) : n_tiles;
#endif

#if LZ_NV_PRODUCER && LZ_NV_PINGPONG
    int kn = 0, vn = 0;
    lz_nv_consume(q, out, freq, rope_style, rot_dim, scale, n_queries, n_q_heads, h, r0, qp0, qp1, min_pos,
                  kbase, vbase, meta, bars, warp, &kn, &vn LZ_NV_ONES_FWD);
#else
    /* the queries, as given (rotated on the first entry with a delta) */
    __global const float *qrow0 = r0 < n_queries ? q + ((size_t)r0 * n_q_heads + h) * LZ_HEAD_DIM : 0;
    __global const float *qrow1 = r1 < n_queries ? q + ((size_t)r1 * n_q_heads + h) * LZ_HEAD_DIM : 0;
    uint qf[LZ_NV_DC][4];
    int cur_delta = 0, n_rel = 0;
    lz_nv_load_a(qf, qrow0, qrow1, t4, 0, rope_style, rot_dim, freq);

    float o[LZ_HEAD_DIM / 8][4];
#pragma unroll
    for (int n = 0; n < LZ_HEAD_DIM / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
#if LZ_NV_L_WG
    /* the row sums by the tensor cores (l0, l1 then unused until the end) */
    float ls[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const ulong onesd = lz_nv_wg_desc(LZ_NV_SMEM(ones), 128, 128);
#endif
    const float sl2 = scale * 1.44269504088896341f;

#if LZ_NV_PRODUCER
    /* Round j consumes item j of the producer (lz_nv_produce). With the
     * ping-pong (the default): before its turn a warpgroup waits for K of
     * item j + 1 and V of item j; in its turn it issues the scores of j + 1
     * and O += P(j) V; after it, wait_group 1 gives the K slot back and the
     * softmax of j + 1 runs while P V does, then wait_group 0 gives the V
     * slot back. Without it: the scores of item j + 1 go to the tensor cores
     * as soon as its K slot is full, then item j is masked, its softmax
     * taken and O += P V issued once its V slot is full; both wgmma groups
     * are waited for together, and the two slots given back (one arrival a
     * warp each). */
    float sc[LZ_NV_KT / 8][4];
    int full = 1;
    lz_nv_mbar_wait(LZ_NV_KFULL(bars, 0), 0);
    int has = meta[0][0].w >= 0; /* item 0 is a tile, not the end marker */
    if (has) {
        if (LZ_NV_PROXY) LZ_NV_PROXY_FENCE(); /* the producer's copies, seen by wgmma */
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
            if (LZ_NV_PROXY) LZ_NV_PROXY_FENCE();
            full_n = lz_nv_scores(sn, qf, &cur_delta, &n_rel, kbase + ks * LZ_NV_MAT_BYTES, mn, min_pos,
                                  qrow0, qrow1, lane, rope_style, rot_dim, freq, 0, LZ_NV_DECIDE_HERE);
        }
        if (!full) lz_nv_mask(sc, meta[j % LZ_NV_NMETA], qp0, qp1, t4);
        uint pa[LZ_NV_KT / 16][4];
        LZ_NV_SOFTMAX_P(LZ_NV_KT, sc, o, m0, m1, l0, l1, sl2, pa);
        lz_nv_mbar_wait(LZ_NV_VFULL(bars, vs), (uint)(j / LZ_NV_VSLOTS) & 1);
        if (LZ_NV_PROXY) LZ_NV_PROXY_FENCE();
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
#else
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
         * free: t_j-1's with two slots; with three (LZ_NV_PVOV) t_j-2's, whose
         * P V every warp waited for in round j - 1, while t_j-1's may still
         * be in flight */
        LZ_NV_LANDED(0);
#if !(LZ_NV_DIAG & 2)
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        if (lid < LZ_NV_EPT) meta[(j + 2) % LZ_NV_META][lid] = kmeta;
        if (!(LZ_NV_DIAG & 1) && kis < n_tiles)
            lz_nv_issue(kbase + (j & 1) * LZ_NV_MAT_BYTES, kc, ksrc, 1, lid);
        if (!(LZ_NV_DIAG & 1) && nxt < n_tiles)
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
#if LZ_NV_PVOV
        {
            /* the probabilities first (f32, in sc); then O += P V of t_j-1
             * (issued last round) and the scores of t_j+1 (issued after it,
             * above) are waited for, and only then are P packed into the A
             * fragments that P V of t_j-1 read, O rescaled and P V of t_j
             * issued, to stay in flight until this point of the next round.
             * (Packing P before the wait raced with that read: a value of the
             * loop body has the same PTX register in every round, so the new
             * P overwrote the fragments in flight; test_attention failed at
             * d 64 on the H200, docs/PERFLOG.md issue 11 step 3. Waiting
             * for P V alone, wgmma.wait_group KT / 16 here and 1 after P V,
             * made ptxas serialize every wgmma: C7514, accumulators read
             * while it could not prove their wgmma complete.) */
            uint pa[LZ_NV_KT / 16][4];
            LZ_NV_SOFTMAX_MAX(LZ_NV_KT, sc, m0, m1, l0, l1, sl2, b0, b1, al0, al1);
            LZ_NV_SOFTMAX_EXP_F32(LZ_NV_KT, sc, l0, l1, sl2, b0, b1);
            LZ_NV_WG_WAIT();
#pragma unroll
            for (int n = 0; n < LZ_HEAD_DIM / 8; n++) LZ_NV_WG_TIE(o[n]);
#pragma unroll
            for (int n = 0; n < LZ_NV_KT / 8; n++) {
                LZ_NV_WG_TIE(sn[n]);
                LZ_NV_WG_TIE(sc[n]); /* the packing below stays after the wait */
            }
            LZ_NV_PACK_P(LZ_NV_KT, sc, pa);
            LZ_NV_RESCALE(o, al0, al1);
            LZ_NV_PV_ISSUE(o, pa, vb);
        }
#elif LZ_NV_PVWG
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

#if !LZ_NV_PVOV
        lz_nv_scores_wait(sn, o);
#endif
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
#if LZ_NV_PVOV
    /* the last P V */
    LZ_NV_WG_WAIT();
#pragma unroll
    for (int n = 0; n < LZ_HEAD_DIM / 8; n++) LZ_NV_WG_TIE(o[n]);
#endif
#endif /* LZ_NV_PRODUCER */

#if LZ_NV_L_WG
    l0 = ls[0], l1 = ls[2]; /* whole rows' sums already */
#else
    l0 += lz_nv_xor(l0, 1);
    l0 += lz_nv_xor(l0, 2);
    l1 += lz_nv_xor(l1, 1);
    l1 += lz_nv_xor(l1, 2);
#endif
    const float i0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, i1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    if (r0 < n_queries) {
        __global float *dst = out + ((size_t)r0 * n_q_heads + h) * LZ_HEAD_DIM + 2 * t4;
#pragma unroll
        for (int n = 0; n < LZ_HEAD_DIM / 8; n++)
            vstore2((float2)(o[n][0] * i0, o[n][1] * i0), 0, dst + n * 8);
    }
    if (r1 < n_queries) {
        __global float *dst = out + ((size_t)r1 * n_q_heads + h) * LZ_HEAD_DIM + 2 * t4;
#pragma unroll
        for (int n = 0; n < LZ_HEAD_DIM / 8; n++)
            vstore2((float2)(o[n][2] * i1, o[n][3] * i1), 0, dst + n * 8);
    }
#endif
}

#if LZ_NV_PERSIST
/* Task k of persistent work-group w of nwg (lz_prefill_nv with
 * LZ_NV_PERSIST): tile * n_kv_heads + KV head, or -1 past its last. With
 * the host's lists, order[k * nwg + w] (a negative entry ends the list);
 * without, tasks w, w + nwg, w + 2 nwg, ... of the kernel's own order (head
 * by head, later token tiles first). Out-of-range entries end the list. */
inline int lz_nv_task(__global const int *order, int k, int w, int nwg, int n_tok_tiles, int n_kv_heads) {
    const long n_tasks = (long)n_tok_tiles * n_kv_heads, i = (long)k * nwg + w;
    if (order) {
        const int task = order[i];
        return task >= 0 && task < n_tasks ? task : -1;
    }
    if (i >= n_tasks) return -1;
    const int head = (int)(i / n_tok_tiles), tile = n_tok_tiles - 1 - (int)(i % n_tok_tiles);
    return tile * n_kv_heads + head;
}

/* The latest and earliest positions (lz_nv_query_pos) of the task's active
 * rows tok0 .. tok0 + rows - 1 (those before n_queries), alike in every lane
 * of the warp; with check, the rows' bad positions recorded. */
__attribute__((always_inline)) inline void lz_nv_task_positions(__global const int *q_pos, int tok0, int rows,
                                                                int n_queries, __global int *err, int check,
                                                                int lane, int *max_pos, int *min_pos) {
    int hi = -1, lo = INT_MAX;
    for (int r = tok0 + lane; r < tok0 + rows && r < n_queries; r += 32) {
        if (check && !LZ_POSITION_OK(q_pos[r])) lz_raise(err, LZ_ERR_QUERY_POSITION);
        const int p = lz_nv_query_pos(q_pos, r, n_queries);
        hi = p > hi ? p : hi, lo = p < lo ? p : lo;
    }
    asm volatile("redux.sync.max.s32 %0, %0, 0xffffffff;" : "+r"(hi));
    asm volatile("redux.sync.min.s32 %0, %0, 0xffffffff;" : "+r"(lo));
    *max_pos = hi, *min_pos = lo;
}

/* A copying warp of the producer over its work-group's tasks (role and t as
 * lz_nv_produce), the K and V rings' items numbered on across them; each
 * task's (first row, KV head, earliest position) handed to the consumers
 * with its first item, a stop marker (-2) after the last. The warps that
 * write the entries record the tasks' bad query positions. */
__attribute__((always_inline)) inline void
lz_nv_produce_tasks(__global const int *q_pos, __global const ulong *table, __global const int *entry_pos,
                    __global const ushort *kc, __global const ushort *vc, __global const int *order,
                    int n_queries, int n_entries, int n_kv_heads, int n_blocks, int rows, int n_tok_tiles,
                    int rope_style, uint kbase, uint vbase, __local int4 (*meta)[LZ_NV_EPT],
                    __local int4 *tasks, uint bars, __global int *err, int t, int role) {
    const int w = get_group_id(0), nwg = get_num_groups(0);
    int kn = 0, vn = 0;
    for (int k = 0;; k++) {
        const int task = lz_nv_task(order, k, w, nwg, n_tok_tiles, n_kv_heads);
        int kvh = 0, tok0 = 0, max_pos = -1, min_pos = -1;
        if (task >= 0) {
            const int tile = task / n_kv_heads;
            kvh = task - tile * n_kv_heads, tok0 = tile * rows;
            lz_nv_task_positions(q_pos, tok0, rows, n_queries, err, role != 2 && t < 32, t & 31, &max_pos,
                                 &min_pos);
        }
        lz_nv_produce(kc, vc, table, entry_pos, kvh, n_kv_heads, n_entries, n_blocks, max_pos, min_pos,
                      rope_style, kbase, vbase, meta, bars, t, role, &kn, &vn, task < 0 ? -2 : -1, tasks,
                      (int4)(tok0, kvh, min_pos, 0));
        if (task < 0) break;
    }
    LZ_NV_CP_WAIT_ALL(); /* nothing in flight when the warp ends */
}

/*
 * The persistent prefill (LZ_NV_PERSIST, issue 11 step 13): get_num_groups(0)
 * work-groups (the host launches one a SM) each run a list of tasks (token
 * tile, KV head; lz_nv_task), each as one work-group of lz_prefill_nv_rows
 * would, with one set of rings for all: the producer walks on into the next
 * task's tiles while the consumers finish one (the end of a task, O's
 * store, the next task's queries), so that a task no longer starts with its
 * first copies in series (q_pos, the table, then K) nor ends with the
 * tensor cores drained, and no work-group starts or ends per task. No
 * barrier across the work-group after the start: each warp finds the
 * task's positions itself (lz_nv_task_positions).
 */
__attribute__((always_inline)) inline void
lz_prefill_nv_persist(__global const float *q, __global const int *q_pos, __global const ulong *table,
                      __global const int *entry_pos, __global const ushort *kc, __global const ushort *vc,
                      __global float *out, __global const float2 *freq, int rope_style, int rot_dim,
                      float scale, int n_queries, int n_entries, int n_q_heads, int n_kv_heads,
                      int n_blocks, __global int *err, __global const int *order, __local uchar *kring,
                      __local uchar *vring, __local int4 (*meta)[LZ_NV_EPT], __local int4 *tasks,
                      __local ulong *mbar LZ_NV_ONES_PARAM) {
    const int lid = get_local_id(0);
    const int lane = lid & 31, warp = lid >> 5;
    const int G = n_q_heads / n_kv_heads, WM = LZ_NV_WARPS / G;
    const int gh = warp % G, mi = warp / G, g = lane >> 2;
    const int rows = 16 * WM, n_tok_tiles = (n_queries + rows - 1) / rows;
    const int w = get_group_id(0), nwg = get_num_groups(0);

    /* bad entries are flagged once, each work-group a share */
    for (int e = w * LZ_NV_WG_THREADS + lid; e < n_entries; e += nwg * LZ_NV_WG_THREADS) {
        const ulong ew = table[e];
        if (LAZYATTN_ENTRY_BLOCK(ew) >= n_blocks) lz_raise(err, LZ_ERR_BLOCK);
        else if (LAZYATTN_ENTRY_LENGTH(ew) > LZ_BLOCK) lz_raise(err, LZ_ERR_LENGTH);
        else if (!LZ_ENTRY_POSITIONS_OK(entry_pos[e], LAZYATTN_ENTRY_DELTA(ew), LAZYATTN_ENTRY_LENGTH(ew)))
            lz_raise(err, LZ_ERR_ENTRY_POSITION);
    }
    if (lid == 0) lz_nv_ring_init(LZ_NV_SMEM(mbar));
#if LZ_NV_L_WG
    if (lid < 256) {
        ones[lid] = 0x3C00; /* f16 1.0 */
        LZ_NV_PROXY_FENCE(); /* for wgmma's reads, after the barrier */
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint kbase = LZ_NV_SMEM(kring), vbase = LZ_NV_SMEM(vring), bars = LZ_NV_SMEM(mbar);
    if (warp >= LZ_NV_WARPS) {
#ifdef LZ_NV_PREGS
        LZ_NV_SETMAXNREG(dec, LZ_NV_PREGS);
#endif
        const int pw = warp - LZ_NV_WARPS; /* the warp in the producer's warpgroup */
#define LZ_NV_PRODUCE_TASKS(role)                                                                  \
    lz_nv_produce_tasks(q_pos, table, entry_pos, kc, vc, order, n_queries, n_entries, n_kv_heads, n_blocks, \
                        rows, n_tok_tiles, rope_style, kbase, vbase, meta, tasks, bars, err,           \
                        lane + 32 * (pw % LZ_NV_KWARPS), role)
        if (LZ_NV_PWARPS == 1) {
            if (pw == 0) LZ_NV_PRODUCE_TASKS(0);
        } else if (pw < LZ_NV_KWARPS) {
            LZ_NV_PRODUCE_TASKS(1);
        } else if (pw < LZ_NV_PWARPS) {
            LZ_NV_PRODUCE_TASKS(2);
        }
#undef LZ_NV_PRODUCE_TASKS
        return;
    }
#ifdef LZ_NV_CREGS
    LZ_NV_SETMAXNREG(inc, LZ_NV_CREGS);
#endif
    /* the tasks as the producer hands them on (the first item of each) */
    for (int kn = 0, vn = 0;;) {
        lz_nv_mbar_wait(LZ_NV_KFULL(bars, kn % LZ_NV_KSLOTS), (uint)(kn / LZ_NV_KSLOTS) & 1);
        if (LZ_NV_UNIFORM(meta[kn % LZ_NV_NMETA][0].w) == -2) break; /* no more */
        int4 task = tasks[kn % LZ_NV_NMETA]; /* first row, KV head, earliest position */
        task.x = LZ_NV_UNIFORM(task.x), task.y = LZ_NV_UNIFORM(task.y), task.z = LZ_NV_UNIFORM(task.z);
        const int r0 = task.x + mi * 16 + g;
        const int qp0 = lz_nv_query_pos(q_pos, r0, n_queries), qp1 = lz_nv_query_pos(q_pos, r0 + 8, n_queries);
        lz_nv_consume(q, out, freq, rope_style, rot_dim, scale, n_queries, n_q_heads, task.y * G + gh, r0, qp0,
                      qp1, task.z, kbase, vbase, meta, bars, warp, &kn, &vn LZ_NV_ONES_FWD);
    }
}
#endif

__kernel __attribute__((reqd_work_group_size(LZ_NV_WG_THREADS, 1, 1))) void
lz_prefill_nv(__global const float *q, __global const int *q_pos, __global const ulong *table,
              __global const int *entry_pos, __global const ushort *kc, __global const ushort *vc,
              __global float *out, __global const float2 *freq, __global const float *slopes,
              int rope_style, int rot_dim, int alibi, float scale, int n_queries, int n_entries,
              int n_q_heads, int n_kv_heads, int n_blocks, __global int *err,
              __global const int *order) {
    __local uchar kring[LZ_NV_KRING * LZ_NV_MAT_BYTES] __attribute__((aligned(128)));
    __local uchar vring[LZ_NV_VSLOTS * LZ_NV_MAT_BYTES] __attribute__((aligned(128)));
    /* per tile: (start, delta, length, tile; with LZ_NV_PFLAGS entry 0's w the tile's flags) */
    __local int4 meta[LZ_NV_NMETA][LZ_NV_EPT];
    __local ulong mbar[LZ_NV_MBARS] __attribute__((aligned(8)));
    LZ_NV_ONES_DECL
    (void)slopes, (void)alibi; /* ALiBi configurations take the portable path */
#if LZ_NV_PERSIST
    __local int4 tasks[LZ_NV_NMETA]; /* per meta slot: (first row, KV head, earliest position) */
    lz_prefill_nv_persist(q, q_pos, table, entry_pos, kc, vc, out, freq, rope_style, rot_dim, scale, n_queries,
                          n_entries, n_q_heads, n_kv_heads, n_blocks, err, order, kring, vring, meta, tasks,
                          mbar LZ_NV_ONES_ARG);
#else
    const int WM = LZ_NV_WARPS / (n_q_heads / n_kv_heads);
    /* Which token tile and KV head: the task order[linear id] = tile *
     * n_kv_heads + head (lib/prefill_order.c: the order that ends the launch
     * soonest by its estimate); without it, head by head, later token tiles
     * (more keys when causal) first. */
    int tile = get_num_groups(0) - 1 - get_group_id(0), kvh = get_group_id(1);
    if (order) {
        const int task = order[get_group_id(0) + get_num_groups(0) * get_group_id(1)];
        tile = task / n_kv_heads, kvh = task - tile * n_kv_heads;
    }
    lz_prefill_nv_rows(q, q_pos, table, entry_pos, kc, vc, out, freq, rope_style, rot_dim, scale,
                       n_queries, n_entries, n_q_heads, n_kv_heads, n_blocks, err, kvh,
                       tile * 16 * WM, get_group_id(0) == 0 && get_group_id(1) == 0, kring, vring,
                       meta, mbar LZ_NV_ONES_ARG);
#endif
}

/*
 * Batched ragged prefill (lazyattn_prefill_batched), the same semantics as
 * lz_prefill_batched (prefill_batched.cl): work-group (tile, KV head,
 * sequence) of global (max_tiles * LZ_NV_THREADS, n_kv_heads, n_seqs),
 * max_tiles = ceil(max_queries / (16 * WM)). Sequence s is rows
 * q_indptr[s] .. q_indptr[s+1]-1 over entries table_indptr[s] ..
 * table_indptr[s+1]-1, run by lz_prefill_nv_rows on pointers moved to its
 * first row and entry, so its tiles and results are those of lz_prefill_nv
 * on that sequence alone. Bad offsets (negative, decreasing, past n_queries
 * or n_entries, more than max_queries rows): the sequence is skipped whole
 * and LZ_ERR_TABLE recorded; so are the sequences after a decrease of
 * q_indptr (their rows could overlap). Work-groups past a sequence's rows
 * return at once (before any barrier).
 */
__kernel __attribute__((reqd_work_group_size(LZ_NV_WG_THREADS, 1, 1))) void
lz_prefill_nv_batched(__global const float *q, __global const int *q_pos,
                      __global const int *q_indptr, __global const int *table_indptr,
                      __global const ulong *table, __global const int *entry_pos,
                      __global const ushort *kc, __global const ushort *vc, __global float *out,
                      __global const float2 *freq, __global const float *slopes, int rope_style,
                      int rot_dim, int alibi, float scale, int n_queries, int n_entries,
                      int max_queries, int n_q_heads, int n_kv_heads, int n_blocks,
                      __global int *err) {
    __local uchar kring[LZ_NV_KRING * LZ_NV_MAT_BYTES] __attribute__((aligned(128)));
    __local uchar vring[LZ_NV_VSLOTS * LZ_NV_MAT_BYTES] __attribute__((aligned(128)));
    __local int4 meta[LZ_NV_NMETA][LZ_NV_EPT];
    __local ulong mbar[LZ_NV_MBARS] __attribute__((aligned(8)));
    LZ_NV_ONES_DECL
    (void)slopes, (void)alibi;
    const int seq = get_group_id(2), kvh = get_group_id(1);
    const int q_begin = q_indptr[seq], q_end = q_indptr[seq + 1];
    const int t_begin = table_indptr[seq], t_end = table_indptr[seq + 1];
    const int bad = q_begin < 0 || q_end < q_begin || q_end > n_queries ||
                    q_end - q_begin > max_queries || t_begin < 0 || t_end < t_begin ||
                    t_end > n_entries;
    if (bad) {
        if (get_group_id(0) == 0 && kvh == 0 && get_local_id(0) == 0) lz_raise(err, LZ_ERR_TABLE);
        return;
    }
    const int WM = LZ_NV_WARPS / (n_q_heads / n_kv_heads), rows = q_end - q_begin;
    /* later token blocks first, counted from this sequence's last tile */
    const int n_tiles = (rows + 16 * WM - 1) / (16 * WM);
    const int tile = n_tiles - 1 - (int)get_group_id(0);
    if (tile < 0) return; /* past this sequence's rows (or an empty sequence) */
    /* rows of two sequences never overlap: run only when q_indptr is
     * non-decreasing up to here (the sequence where it decreases records it) */
    __local int disorder;
    if (get_local_id(0) == 0) disorder = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = get_local_id(0); i < seq; i += LZ_NV_WG_THREADS)
        if (q_indptr[i] > q_indptr[i + 1]) atomic_or(&disorder, 1);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (disorder) return;
    const size_t row0 = (size_t)q_begin * n_q_heads * LZ_HEAD_DIM;
    lz_prefill_nv_rows(q + row0, q_pos + q_begin, table + t_begin, entry_pos + t_begin, kc, vc,
                       out + row0, freq, rope_style, rot_dim, scale, rows, t_end - t_begin,
                       n_q_heads, n_kv_heads, n_blocks, err, kvh, tile * 16 * WM,
                       tile == n_tiles - 1 && kvh == 0, kring, vring, meta, mbar LZ_NV_ONES_ARG);
}
