/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decode-sized bf16 projections on NVIDIA tensor cores (issue 16):
 *   Y[M, N] = X[M, K] . W[N, K]^T, M = 1..64, bf16 operands, f32 sums,
 * at the bandwidth of reading W once. NVIDIA only (inline PTX, compute
 * capability >= 8); serve/gemm_nv_small.c builds and launches it.
 *
 * "Swap AB": W's rows are the A operand of mma.sync m16n8k16 (16 weight
 * rows a tile), the tokens the n8 B operand. The order of a dot product's
 * terms is free, so lane (g = lane / 4, c = lane % 4) loads the 16
 * contiguous bytes W[row g][kb + 8c .. + 7] and W[row g + 8][same] and
 * X[token 8j + g][same] of each 32-k block kb: its k-slots {2c, 2c + 1,
 * 2c + 8, 2c + 9} of k-step s (0, 1) stand for k = kb + 8c + 4s + {0, 1, 2,
 * 3} in A and in B alike, so one 16-byte load feeds two k-steps and a warp
 * load reads 8 rows x 64 contiguous bytes. W goes around L1
 * (L1::no_allocate): it is read once; X (at most 64 x 14336 bf16) is read
 * through L1 by every warp of the SM that works on the same K range.
 *
 * Work-group: GS_WR x GS_WK warps. Warp (wr, wk) owns GS_R row tiles (16 W
 * rows each) and the wk-th of GS_WK slices of the work-group's K range;
 * the slices are summed through local memory in slice order. Dimension 1
 * of the grid splits K across `splits` work-groups of the same rows: each
 * writes its sums to the workspace, the last to finish (a counter per row
 * block) adds them in split order and writes Y. So every sum has a fixed
 * order: results do not depend on timing.
 *
 * With GS_XS the warps of a K slice stage X in local memory instead, per
 * chunk of GS_U blocks (cp.async into a 2-chunk ring, in fragment order so
 * that each lane's 16 bytes are one conflict-free local load): for many
 * token tiles the direct X loads (8 rows of 64 bytes each) cost more L1
 * time than the W bytes they serve. Measured on the H200 it pays only on
 * the wide gate/up at 33..64 rows (PERFLOG).
 *
 * One kernel per n8 token tiles NT = 1..8 (M <= 8 NT): gs_gemm_nt<NT>.
 * X rows up to 8 NT - 1 are read (the caller pads X to 128 rows); only
 * rows < M are written.
 */
#ifndef GS_R
#define GS_R 2 /* row tiles (16 rows) per warp */
#endif
#ifndef GS_WR
#define GS_WR 4 /* warps over rows per work-group */
#endif
#ifndef GS_WK
#define GS_WK 2 /* warps over K per work-group */
#endif
#ifndef GS_U
#define GS_U 4 /* 32-k blocks per step (loads issued together) */
#endif
#ifndef GS_PIPE
#define GS_PIPE 0 /* 1: the next step's W loads issued before this step's mma */
#endif
#ifndef GS_XS
#define GS_XS 0 /* 1: X staged in local memory (cp.async) per U-block chunk, fragment order */
#endif
#ifndef GS_WHINT
#define GS_WHINT 1 /* W loads: 0 ld.global.nc, 1 + L1::no_allocate, 2 + L2::256B */
#endif

#define GS_WARPS (GS_WR * GS_WK)

#define GS_MMA(d, a0, a1, a2, a3, b0, b1)                                                      \
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
        "{%8,%9}, {%0,%1,%2,%3};"                                                            \
        : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3])                             \
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))

/* 16 bytes of W (read once: no L1 line). */
inline uint4 gs_ld_w(__global const ushort *p) {
    uint a, b, c, d;
#if GS_WHINT == 2
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
        : "l"(p));
#elif GS_WHINT == 1
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
        : "l"(p));
#else
    asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p));
#endif
    return (uint4)(a, b, c, d);
}

/* 16 bytes of X (shared by the SM's warps through L1). */
inline uint4 gs_ld_x(__global const ushort *p) {
    uint a, b, c, d;
    asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p));
    return (uint4)(a, b, c, d);
}

/* Two f32 of the workspace, around L1 (written by other work-groups). */
inline float2 gs_ld_cg2(__global const float *p) {
    float a, b;
    asm volatile("ld.global.cg.v2.f32 {%0,%1}, [%2];" : "=f"(a), "=f"(b) : "l"(p) : "memory");
    return (float2)(a, b);
}

/* 16 bytes global -> local, asynchronous (L2 -> shared, around L1). */
inline void gs_cp16(__local uint4 *dst, __global const ushort *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((uint)(size_t)dst), "l"(src)
                 : "memory");
}
#define GS_CP_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
#define GS_CP_WAIT1() asm volatile("cp.async.wait_group 1;" ::: "memory")

#define GS_FENCE() asm volatile("fence.acq_rel.gpu;" ::: "memory")

/* Returns the old value of *p and adds 1 (device scope, acquire-release). */
inline int gs_count(__global int *p) {
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
    return old;
}

/* acc[r][j] += W tile r (this lane's 16-byte pieces wv[r][0] of row g, wv[r][1]
 * of row g + 8) . X tile j, for one 32-k block; xp at X[g][kb + 8c]. */
__attribute__((always_inline)) inline void gs_block(float acc[GS_R][8][4], uint4 wv[GS_R][2],
                                                    __global const ushort *xp, size_t K8,
                                                    const int NT) {
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const uint4 xv = gs_ld_x(xp + j * K8);
#pragma unroll
        for (int r = 0; r < GS_R; r++) {
            GS_MMA(acc[r][j], wv[r][0].x, wv[r][1].x, wv[r][0].y, wv[r][1].y, xv.x, xv.y);
            GS_MMA(acc[r][j], wv[r][0].z, wv[r][1].z, wv[r][0].w, wv[r][1].w, xv.z, xv.w);
        }
    }
}

/* The W pieces of GS_U blocks from kb; wp[r]: tile r's row g at 8c. */
/* The same with X from a staged fragment tile: xl at tile 0 of the block,
 * lane's 16 bytes; tiles 32 lanes (512 bytes) apart. */
__attribute__((always_inline)) inline void gs_block_l(float acc[GS_R][8][4], uint4 wv[GS_R][2],
                                                      __local const uint4 *xl, const int NT) {
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const uint4 xv = xl[j * 32];
#pragma unroll
        for (int r = 0; r < GS_R; r++) {
            GS_MMA(acc[r][j], wv[r][0].x, wv[r][1].x, wv[r][0].y, wv[r][1].y, xv.x, xv.y);
            GS_MMA(acc[r][j], wv[r][0].z, wv[r][1].z, wv[r][0].w, wv[r][1].w, xv.z, xv.w);
        }
    }
}

__attribute__((always_inline)) inline void gs_load(uint4 wv[GS_U][GS_R][2],
                                                   __global const ushort *wp[GS_R], size_t K8,
                                                   int kb) {
#pragma unroll
    for (int u = 0; u < GS_U; u++)
#pragma unroll
        for (int r = 0; r < GS_R; r++) {
            wv[u][r][0] = gs_ld_w(wp[r] + (size_t)(kb + u) * 32);
            wv[u][r][1] = gs_ld_w(wp[r] + K8 + (size_t)(kb + u) * 32);
        }
}

/* One range's destination of Y column n (ranges of whole 16-column tiles). */
#define GS_DST(n, y0, y1, y2, o0, o1, o2, l0, l1, l2, c1, c2, yy, oo, ll, cc)    \
    do {                                                                        \
        if ((n) >= (c2)) yy = (y2), oo = (o2), ll = (l2), cc = (c2);            \
        else if ((n) >= (c1)) yy = (y1), oo = (o1), ll = (l1), cc = (c1);       \
        else yy = (y0), oo = (o0), ll = (l0), cc = 0;                           \
    } while (0)

__attribute__((always_inline)) inline void gs_body(
    __global const ushort *x, ulong x_off, __global const ushort *w, int K, int N, int M,
    __global float *y0, __global float *y1, __global float *y2, ulong o0, ulong o1, ulong o2,
    int l0, int l1, int l2, int c1, int c2, int accumulate, int splits, __global float *ws,
    __global int *cnt, __local uint4 *loc, __local int *last, const int NT) {
    __local float *red = (__local float *)loc;
    const int lid = get_local_id(0);
    const int lane = lid & 31, warp = lid >> 5;
    const int wr = warp % GS_WR, wk = warp / GS_WR;
    const int g = lane >> 2, c = lane & 3;
    const int blk = get_group_id(0), split = get_group_id(1);
    const int n0 = (blk * GS_WR + wr) * (16 * GS_R);
    const size_t Ks = (size_t)K;

    /* K blocks of this split and this slice */
    const int nkb = K >> 5;
#if GS_XS
    /* in chunks of GS_U blocks; the last split's slice 0 also takes the
     * blocks past the last whole chunk (direct loads) */
    const int nu = nkb / GS_U;
    const int su = (int)((long)nu * split / splits), eu = (int)((long)nu * (split + 1) / splits);
    const int cu0 = su + (eu - su) * wk / GS_WK, cu1 = su + (eu - su) * (wk + 1) / GS_WK;
    const int chunks = (eu - su + GS_WK - 1) / GS_WK; /* iterations: the longest slice's */
    const int kb0 = split == splits - 1 && wk == 0 ? nu * GS_U : 0;
    const int kb1 = split == splits - 1 && wk == 0 ? nkb : 0;
#else
    const int sb = (int)((long)nkb * split / splits), se = (int)((long)nkb * (split + 1) / splits);
    const int kb0 = sb + (se - sb) * wk / GS_WK, kb1 = sb + (se - sb) * (wk + 1) / GS_WK;
#endif

    /* a tile past N (in the last work-group) reads the last tile, writes nothing */
    __global const ushort *wp[GS_R];
#pragma unroll
    for (int r = 0; r < GS_R; r++) {
        const int nb = n0 + 16 * r < N ? n0 + 16 * r : N - 16;
        wp[r] = w + (size_t)(nb + g) * Ks + 8 * c;
    }
    __global const ushort *xp = x + x_off + (size_t)g * Ks + 8 * c;
    const size_t K8 = 8 * Ks;

    float acc[GS_R][8][4];
#pragma unroll
    for (int r = 0; r < GS_R; r++)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[r][j][e] = 0.0f;

    int kb = kb0;
#if GS_XS
    {
        /* slice wk's staging ring: 2 chunks of GS_U blocks x NT tiles x 32
         * lanes x 16 bytes, in fragment order (lane's piece at lane) */
        __local uint4 *ring = loc + wk * 2 * GS_U * NT * 32;
        const int tix = lid - wk * GS_WR * 32; /* thread in the slice */
        const int pieces = GS_U * NT * 32;
        __global const ushort *xs = x + x_off;
        /* chunk 0; piece p = (block u, tile j, lane ln) */
        if (cu0 < cu1)
            for (int p = tix; p < pieces; p += GS_WR * 32) {
                const int u = p / (NT * 32), j = (p >> 5) % NT, ln = p & 31;
                gs_cp16(ring + p, xs + (size_t)(8 * j + (ln >> 2)) * Ks +
                                      (size_t)(cu0 * GS_U + u) * 32 + 8 * (ln & 3));
            }
        GS_CP_COMMIT();
#if GS_PIPE
        uint4 cur[GS_U][GS_R][2];
        if (cu0 < cu1) gs_load(cur, wp, K8, cu0 * GS_U);
#endif
        for (int ci = 0; ci < chunks; ci++) {
            const int cc = cu0 + ci; /* this slice's chunk */
            const int active = cc < cu1;
#if GS_PIPE
            uint4 nxt[GS_U][GS_R][2];
            if (cc + 1 < cu1) gs_load(nxt, wp, K8, (cc + 1) * GS_U);
#else
            uint4 cur[GS_U][GS_R][2];
            if (active) gs_load(cur, wp, K8, cc * GS_U);
#endif
            /* the next chunk's X into the other half of the ring */
            if (cc + 1 < cu1) {
                __local uint4 *dst = ring + ((ci + 1) & 1) * pieces;
                for (int p = tix; p < pieces; p += GS_WR * 32) {
                    const int u = p / (NT * 32), j = (p >> 5) % NT, ln = p & 31;
                    gs_cp16(dst + p, xs + (size_t)(8 * j + (ln >> 2)) * Ks +
                                         (size_t)((cc + 1) * GS_U + u) * 32 + 8 * (ln & 3));
                }
            }
            GS_CP_COMMIT();
            GS_CP_WAIT1(); /* this chunk's copies (mine) are done */
            barrier(CLK_LOCAL_MEM_FENCE); /* ... and everyone's */
            if (active) {
                __local const uint4 *xl = ring + (ci & 1) * pieces + lane;
#pragma unroll
                for (int u = 0; u < GS_U; u++) gs_block_l(acc, cur[u], xl + u * NT * 32, NT);
            }
#if GS_PIPE
#pragma unroll
            for (int u = 0; u < GS_U; u++)
#pragma unroll
                for (int r = 0; r < GS_R; r++) cur[u][r][0] = nxt[u][r][0], cur[u][r][1] = nxt[u][r][1];
#endif
            barrier(CLK_LOCAL_MEM_FENCE); /* the half is read before it is refilled */
        }
    }
#elif GS_PIPE
    if (kb1 - kb0 >= GS_U) {
        uint4 cur[GS_U][GS_R][2];
        gs_load(cur, wp, K8, kb);
        for (; kb + GS_U <= kb1; kb += GS_U) {
            uint4 nxt[GS_U][GS_R][2];
            const int kn = kb + 2 * GS_U <= kb1 ? kb + GS_U : kb1 - GS_U; /* in range */
            gs_load(nxt, wp, K8, kn);
#pragma unroll
            for (int u = 0; u < GS_U; u++) gs_block(acc, cur[u], xp + (size_t)(kb + u) * 32, K8, NT);
#pragma unroll
            for (int u = 0; u < GS_U; u++)
#pragma unroll
                for (int r = 0; r < GS_R; r++) cur[u][r][0] = nxt[u][r][0], cur[u][r][1] = nxt[u][r][1];
        }
    }
#else
    for (; kb + GS_U <= kb1; kb += GS_U) {
        uint4 cur[GS_U][GS_R][2];
        gs_load(cur, wp, K8, kb);
#pragma unroll
        for (int u = 0; u < GS_U; u++) gs_block(acc, cur[u], xp + (size_t)(kb + u) * 32, K8, NT);
    }
#endif
    for (; kb < kb1; kb++) {
        uint4 cur[1][GS_R][2];
#pragma unroll
        for (int r = 0; r < GS_R; r++) {
            cur[0][r][0] = gs_ld_w(wp[r] + (size_t)kb * 32);
            cur[0][r][1] = gs_ld_w(wp[r] + K8 + (size_t)kb * 32);
        }
        gs_block(acc, cur[0], xp + (size_t)kb * 32, K8, NT);
    }

#if GS_WK > 1
    /* slices 1.. -> local memory; slice 0 adds them in slice order */
    const int per = GS_R * NT * 4;
    if (wk > 0) {
        __local float *dst = red + ((wk - 1) * GS_WR + wr) * per * 32 + lane;
#pragma unroll
        for (int r = 0; r < GS_R; r++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) dst[((r * NT + j) * 4 + e) * 32] = acc[r][j][e];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (wk == 0)
        for (int s = 1; s < GS_WK; s++) {
            __local const float *src = red + ((s - 1) * GS_WR + wr) * per * 32 + lane;
#pragma unroll
            for (int r = 0; r < GS_R; r++)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[r][j][e] += src[((r * NT + j) * 4 + e) * 32];
        }
#endif

    const int mine = wk == 0; /* warps holding the work-group's sums */
    if (splits > 1) {
        /* workspace [splits][N][8 NT]: this split's sums, then the counter */
        const size_t ldw = 8 * NT;
        if (mine)
#pragma unroll
            for (int r = 0; r < GS_R; r++) {
                const int n = n0 + 16 * r + g;
                if (n0 + 16 * r < N)
#pragma unroll
                    for (int j = 0; j < NT; j++) {
                        __global float *p = ws + ((size_t)split * N + n) * ldw + 8 * j + 2 * c;
                        *(__global float2 *)p = (float2)(acc[r][j][0], acc[r][j][1]);
                        *(__global float2 *)(p + 8 * ldw) = (float2)(acc[r][j][2], acc[r][j][3]);
                    }
            }
        GS_FENCE();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid == 0) *last = gs_count(cnt + blk) == splits - 1;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!*last) return; /* uniform: the whole work-group leaves */
        GS_FENCE();
        if (mine) {
            /* the splits' sums in split order; the loads of SB splits and
             * every tile issued before their adds (one round trip each) */
            const int SB = GS_R * NT >= 8 ? 1 : 8 / (GS_R * NT);
#pragma unroll
            for (int r = 0; r < GS_R; r++)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[r][j][e] = 0.0f;
            for (int s = 0; s < splits; s += SB) {
                float2 va[8][GS_R][8], vb[8][GS_R][8];
#pragma unroll
                for (int q = 0; q < SB; q++)
#pragma unroll
                    for (int r = 0; r < GS_R; r++)
#pragma unroll
                        for (int j = 0; j < NT; j++)
                            if (s + q < splits) {
                                const int n = (n0 + 16 * r < N ? n0 + 16 * r : N - 16) + g;
                                __global const float *p = ws + ((size_t)(s + q) * N + n) * ldw + 8 * j + 2 * c;
                                va[q][r][j] = gs_ld_cg2(p);
                                vb[q][r][j] = gs_ld_cg2(p + 8 * ldw);
                            }
#pragma unroll
                for (int q = 0; q < SB; q++)
#pragma unroll
                    for (int r = 0; r < GS_R; r++)
#pragma unroll
                        for (int j = 0; j < NT; j++)
                            if (s + q < splits) {
                                acc[r][j][0] += va[q][r][j].x, acc[r][j][1] += va[q][r][j].y;
                                acc[r][j][2] += vb[q][r][j].x, acc[r][j][3] += vb[q][r][j].y;
                            }
            }
        }
        if (lid == 0) cnt[blk] = 0; /* ready for the next call */
    }
    if (!mine) return;
#pragma unroll
    for (int r = 0; r < GS_R; r++) {
        const int nt = n0 + 16 * r; /* the tile's first column */
        if (nt >= N) continue;
        __global float *yy;
        ulong oo;
        int ll, cc;
        GS_DST(nt, y0, y1, y2, o0, o1, o2, l0, l1, l2, c1, c2, yy, oo, ll, cc);
        __global float *yc = yy + oo + (nt - cc) + g;
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int t = 8 * j + 2 * c + (e & 1); /* token (row of Y) */
                if (t < M) {
                    __global float *p = yc + (size_t)t * ll + ((e >> 1) << 3);
                    *p = accumulate ? *p + acc[r][j][e] : acc[r][j][e];
                }
            }
    }
}

/* local memory of one kernel in uint4: the slice sums (floats), and with
 * GS_XS the staging rings (which the sums reuse after the K loop) */
#define GS_RED(NT) (GS_WK > 1 ? (GS_WK - 1) * GS_WR * GS_R * (NT) * 32 : 1)
#define GS_RING(NT) (GS_XS ? GS_WK * 2 * GS_U * (NT) * 32 : 1)
#define GS_LOC(NT) (GS_RED(NT) > GS_RING(NT) ? GS_RED(NT) : GS_RING(NT))

#define GS_KERNEL(NT)                                                                          \
    __kernel __attribute__((reqd_work_group_size(32 * GS_WARPS, 1, 1))) void gs_gemm_nt##NT(    \
        __global const ushort *x, ulong x_off, __global const ushort *w, int K, int N, int M,   \
        __global float *y0, __global float *y1, __global float *y2, ulong o0, ulong o1,        \
        ulong o2, int l0, int l1, int l2, int c1, int c2, int accumulate, int splits,          \
        __global float *ws, __global int *cnt) {                                               \
        __local uint4 loc[GS_LOC(NT)] __attribute__((aligned(16)));                           \
        __local int last;                                                                      \
        gs_body(x, x_off, w, K, N, M, y0, y1, y2, o0, o1, o2, l0, l1, l2, c1, c2, accumulate,  \
                splits, ws, cnt, loc, &last, NT);                                               \
    }

GS_KERNEL(1)
GS_KERNEL(2)
GS_KERNEL(3)
GS_KERNEL(4)
GS_KERNEL(5)
GS_KERNEL(6)
GS_KERNEL(7)
GS_KERNEL(8)
