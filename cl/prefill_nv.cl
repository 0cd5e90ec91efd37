/*
 * Lazy prefill, NVIDIA tensor-core path (built only with LAZYATTN_FAST_NV):
 * flash attention with mma.sync m16n8k16 (f16 operands, f32 accumulation),
 * same arguments and semantics as lz_prefill (prefill.cl, the reference).
 *
 * Work-group: LZ_NV_WM x G warps; warp (mi, g) owns 16 query tokens
 * (block_token0 + mi * 16 ..) of query head kvh * G + g, so the G heads of
 * a KV head share every staged K/V tile. Tiles of LZ_NV_KT keys
 * (LZ_NV_KT / LZ_BLOCK table entries) stream through a ring of LZ_NV_STAGES
 * cp.async stages in local memory (XOR-swizzled rows, read by ldmatrix);
 * one barrier per tile; tiles wholly in every row's future are skipped.
 *
 * Rotation: K is used exactly as stored (rotated at its stored positions).
 * Instead each warp keeps its 16 query rows as f16 A fragments rotated by
 * R(-delta) of the entry in hand, re-rotated from the f32 queries only when
 * the delta changes (once per document): score = (R(-d) q) . (R(s) k) =
 * q . R(s + d) k, one rotation per (query tile, delta), applied in
 * registers, never a pass over memory. Masking by positions (key j of
 * entry e at entry_pos[e] + j, visible iff <= q_pos[t]) is evaluated only
 * on tiles that are not wholly visible.
 *
 * Needs LZ_HEAD_DIM % 16 == 0, LZ_NV_KT % LZ_BLOCK == 0, LZ_BLOCK % 16 == 0
 * and f16 storage (the host checks; otherwise it uses the portable path).
 */
#ifndef LZ_NV_KT
#define LZ_NV_KT 32
#endif
#ifndef LZ_NV_STAGES
#define LZ_NV_STAGES 2
#endif
#define LZ_NV_EPT (LZ_NV_KT / LZ_BLOCK)          /* entries per tile */
#define LZ_NV_DC (LZ_HEAD_DIM / 16)               /* 16-dim chunks */
#define LZ_NV_CPR (LZ_HEAD_DIM / 8)               /* 16-byte chunks per row */
#define LZ_NV_MAT_BYTES (LZ_NV_KT * LZ_HEAD_DIM * 2) /* one K or V tile */
#define LZ_NV_STAGE_BYTES (2 * LZ_NV_MAT_BYTES)

/* Validity and fields of entry e (0 length when outside the table or bad). */
typedef struct lz_nv_entry {
    int blk, len, delta, pos0;
} lz_nv_entry;

inline lz_nv_entry lz_nv_get_entry(__global const ulong *table, __global const int *entry_pos,
                                   int e, int n_entries, int n_blocks) {
    lz_nv_entry r = {0, 0, 0, 0};
    if (e >= n_entries) return r;
    const ulong w = table[e];
    r.blk = LAZYATTN_ENTRY_BLOCK(w);
    r.len = LAZYATTN_ENTRY_LENGTH(w);
    r.delta = LAZYATTN_ENTRY_DELTA(w);
    r.pos0 = entry_pos[e];
    if (r.blk >= n_blocks || r.len > LZ_BLOCK) r.len = 0;
    return r;
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

/* Issues the cp.async copies of tile `tile` (K then V) into the stage at
 * byte address `base`; keys past an entry's length (or of a bad entry) are
 * zero-filled so that masked probabilities never meet garbage. */
inline void lz_nv_stage_kv(uint base, __local int4 *meta, int tile, __global const ulong *table,
                           __global const int *entry_pos, __global const ushort *kc,
                           __global const ushort *vc, int kvh, int n_kv_heads, int n_entries,
                           int n_blocks, int lid, int nthreads) {
    /* the tile's entries (start, delta, length) for the compute side */
    if (lid < LZ_NV_EPT) {
        const lz_nv_entry en = lz_nv_get_entry(table, entry_pos, tile * LZ_NV_EPT + lid, n_entries, n_blocks);
        meta[lid] = (int4)(en.pos0, en.delta, en.len, tile);
    }
    for (int c = lid; c < LZ_NV_KT * LZ_NV_CPR; c += nthreads) {
        const int r = c / LZ_NV_CPR, ch = c % LZ_NV_CPR;
        const int e = tile * LZ_NV_EPT + r / LZ_BLOCK, j = r % LZ_BLOCK;
        const lz_nv_entry en = lz_nv_get_entry(table, entry_pos, e, n_entries, n_blocks);
        const int ok = j < en.len;
        const size_t off = ok ? lz_kv_offset(en.blk, kvh, n_kv_heads, j) + ch * 8 : 0;
        lz_nv_cp16(base + LZ_NV_SWZ(r, ch), kc + off, ok);
        lz_nv_cp16(base + LZ_NV_MAT_BYTES + LZ_NV_SWZ(r, ch), vc + off, ok);
    }
}

__kernel void lz_prefill_nv(__global const float *q, __global const int *q_pos,
                            __global const ulong *table, __global const int *entry_pos,
                            __global const ushort *kc, __global const ushort *vc,
                            __global float *out, __global const float2 *freq,
                            __global const float *slopes, int rope_style, int rot_dim, int alibi,
                            float scale, int n_queries, int n_entries, int n_q_heads,
                            int n_kv_heads, int n_blocks, __global int *err) {
    __local uchar ring[LZ_NV_STAGES * LZ_NV_STAGE_BYTES] __attribute__((aligned(128)));
    __local int4 meta[LZ_NV_STAGES][LZ_NV_EPT]; /* per stage: (start, delta, length, tile) */
    (void)slopes;
    (void)alibi; /* ALiBi configurations take the portable path */

    const int lid = get_local_id(0), nthreads = get_local_size(0);
    const int lane = lid & 31, warp = lid >> 5;
    const int G = n_q_heads / n_kv_heads, WM = (nthreads >> 5) / G;
    const int gh = warp % G, mi = warp / G;
    const int kvh = get_group_id(1), h = kvh * G + gh;
    /* later token blocks see more keys (causal): schedule them first */
    const int tok0 = (get_num_groups(0) - 1 - get_group_id(0)) * 16 * WM;
    const int g = lane >> 2, t4 = lane & 3;
    const int r0 = tok0 + mi * 16 + g, r1 = r0 + 8;
    const int qp0 = r0 < n_queries ? q_pos[r0] : -1;
    const int qp1 = r1 < n_queries ? q_pos[r1] : -1;

    /* bad entries are flagged once per launch, wherever they are */
    if (get_group_id(0) == 0 && get_group_id(1) == 0)
        for (int e = lid; e < n_entries; e += nthreads) {
            const ulong w = table[e];
            if (LAZYATTN_ENTRY_BLOCK(w) >= n_blocks) lz_raise(err, LZ_ERR_BLOCK);
            else if (LAZYATTN_ENTRY_LENGTH(w) > LZ_BLOCK) lz_raise(err, LZ_ERR_LENGTH);
        }

    /* the work-group's latest and earliest query positions (active rows) */
    __local int *red = (__local int *)ring;
    if (lid == 0) red[0] = -1, red[1] = INT_MAX;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < 16 * WM && tok0 + lid < n_queries) {
        const int p = q_pos[tok0 + lid];
        atomic_max(&red[0], p);
        atomic_min(&red[1], p);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int max_pos = red[0], min_pos = red[1];
    barrier(CLK_LOCAL_MEM_FENCE);

    __global const float *qrow0 = r0 < n_queries ? q + ((size_t)r0 * n_q_heads + h) * LZ_HEAD_DIM : 0;
    __global const float *qrow1 = r1 < n_queries ? q + ((size_t)r1 * n_q_heads + h) * LZ_HEAD_DIM : 0;
    uint qf[LZ_NV_DC][4];
    int cur_delta = 0;
    lz_nv_load_a(qf, qrow0, qrow1, t4, 0, rope_style, rot_dim, freq);

    float o[LZ_HEAD_DIM / 8][4];
#pragma unroll
    for (int n = 0; n < LZ_HEAD_DIM / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    const float sl2 = scale * 1.44269504088896341f;

    const uint ring_base = LZ_NV_SMEM(ring);
    const int n_tiles = (n_entries + LZ_NV_EPT - 1) / LZ_NV_EPT;
    int cur = max_pos < 0 ? n_tiles : lz_nv_next_tile(0, n_tiles, n_entries, entry_pos, max_pos);
    int to_issue = cur, s_issue = 0, s = 0, issued_count = 0, consumed_count = 0;
    for (int k = 0; k < LZ_NV_STAGES - 1; k++) {
        if (to_issue < n_tiles) {
            lz_nv_stage_kv(ring_base + s_issue * LZ_NV_STAGE_BYTES, meta[s_issue], to_issue, table, entry_pos, kc,
                           vc, kvh, n_kv_heads, n_entries, n_blocks, lid, nthreads);
            to_issue = lz_nv_next_tile(to_issue + 1, n_tiles, n_entries, entry_pos, max_pos);
            issued_count++;
        }
        LZ_NV_CP_COMMIT();
        s_issue = s_issue + 1 == LZ_NV_STAGES ? 0 : s_issue + 1;
    }

    /* tiles are consumed in the order they were issued, one ring stage each;
     * the tile's entries come from meta[s], written before an earlier barrier */
    while (consumed_count < issued_count) {
        LZ_NV_CP_WAIT_RING(LZ_NV_STAGES);
        barrier(CLK_LOCAL_MEM_FENCE);
        /* the stage consumed last round is free: refill it */
        if (to_issue < n_tiles) {
            lz_nv_stage_kv(ring_base + s_issue * LZ_NV_STAGE_BYTES, meta[s_issue], to_issue, table, entry_pos, kc,
                           vc, kvh, n_kv_heads, n_entries, n_blocks, lid, nthreads);
            to_issue = lz_nv_next_tile(to_issue + 1, n_tiles, n_entries, entry_pos, max_pos);
            issued_count++;
        }
        LZ_NV_CP_COMMIT();
        s_issue = s_issue + 1 == LZ_NV_STAGES ? 0 : s_issue + 1;

        const uint kb = ring_base + s * LZ_NV_STAGE_BYTES, vb = kb + LZ_NV_MAT_BYTES;

        /* ---- S = Q K^T, the query rotated per entry's delta ---- */
        float sc[LZ_NV_KT / 8][4];
        int full = 1;
#pragma unroll
        for (int p = 0; p < LZ_NV_KT / 16; p++) {
            if ((p * 16) % LZ_BLOCK == 0) {
                const int4 en = meta[s][(p * 16) / LZ_BLOCK]; /* start, delta, length */
                full &= en.z == LZ_BLOCK && en.x + LZ_BLOCK - 1 <= min_pos;
                if (rope_style != LZ_ROPE_NONE && en.z > 0 && en.y != cur_delta) {
                    lz_nv_load_a(qf, qrow0, qrow1, t4, -en.y, rope_style, rot_dim, freq);
                    cur_delta = en.y;
                }
            }
#pragma unroll
            for (int u = 0; u < 4; u++) sc[2 * p][u] = sc[2 * p + 1][u] = 0.0f;
            const int kr = p * 16 + ((lane >> 4) << 3) + (lane & 7);
#pragma unroll
            for (int c = 0; c < LZ_NV_DC; c++) {
                uint b0, b1, b2, b3;
                LZ_NV_LDSM_X4(b0, b1, b2, b3, kb + LZ_NV_SWZ(kr, 2 * c + ((lane >> 3) & 1)));
                LZ_NV_MMA(sc[2 * p], qf[c], b0, b1);
                LZ_NV_MMA(sc[2 * p + 1], qf[c], b2, b3);
            }
        }

        /* ---- mask (partial tiles only), online softmax ---- */
        if (!full) {
#pragma unroll
            for (int n = 0; n < LZ_NV_KT / 8; n++) {
                const int key0 = n * 8 + 2 * t4;
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int key = key0 + u, j = key % LZ_BLOCK;
                    const int4 en = meta[s][key / LZ_BLOCK];
                    const int kp = j < en.z ? en.x + j : INT_MAX;
                    if (kp > qp0) sc[n][u] = -INFINITY;
                    if (kp > qp1) sc[n][2 + u] = -INFINITY;
                }
            }
        }
        LZ_NV_SOFTMAX_PV(LZ_NV_KT, sc, o, m0, m1, l0, l1, sl2, vb, lane);

        s = s + 1 == LZ_NV_STAGES ? 0 : s + 1;
        consumed_count++;
    }
    LZ_NV_CP_WAIT(0);

    l0 += lz_nv_xor(l0, 1);
    l0 += lz_nv_xor(l0, 2);
    l1 += lz_nv_xor(l1, 1);
    l1 += lz_nv_xor(l1, 2);
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
}
