#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Host simulation of serve/gemm_nv_small.cl's GS_XS 5 local-memory layout
(no GPU): replays gs_ws_copy's 16-byte copies of one chunk into a byte map
of the ring slot, then reads every wgmma's A (W) and B (X) operand back
through the K-major, unswizzled descriptor addressing the kernel gives
(gs_wg_desc: leading byte offset 128 = the next 8 k, stride byte offset 256
= the next 8 rows; the same rule the xs 2..4 X tiles were checked with on
the H200) and compares them with W[row][k] and X[token][k] in natural k
order; also: no slot byte written twice, none read unwritten, zeros past
kend, and a 16-row tile past N reading the last tile. usage: python3
tools/sim_gemm_small_xs5.py"""
import itertools


def copies(R, WR, U, NT, N, wrow0, cc, kend):
    """gs_ws_copy's (dst byte, ('w'|'x', row, k0) or None for zeros) per copy"""
    wset = WR // 4 * R
    slot_w = wset * U * 4096
    out = []
    for p in range(wset * U * 256):
        c, n, q = p & 3, (p >> 2) & 63, p >> 8
        u, st = q % U, q // U
        kb = cc * U + u
        tile = wrow0 + 64 * st + (n & ~15)
        row = (tile if tile < N else N - 16) + (n & 15)
        dst = ((st * U + u) * 2 + (c >> 1)) * 2048 + (n >> 3) * 256 + (c & 1) * 128 + (n & 7) * 16
        out.append((dst, ('w', row, kb * 32 + 8 * c) if kb < kend else None))
    for p in range(U * NT * 32):
        c, t, u = p & 3, (p >> 2) % (8 * NT), p // (32 * NT)
        kb = cc * U + u
        dst = slot_w + (u * 2 + (c >> 1)) * NT * 256 + (t >> 3) * 256 + (c & 1) * 128 + (t & 7) * 16
        out.append((dst, ('x', t, kb * 32 + 8 * c) if kb < kend else None))
    return out, slot_w, slot_w + U * NT * 512


def desc_addr(start, m, k):
    """byte of element (row m, k) of a K-major unswizzled tile: LBO 128, SBO 256"""
    return start + (m // 8) * 256 + (k // 8) * 128 + (m % 8) * 16 + (k % 8) * 2


def check(R, WR, U, NT, N, blk, cc, kend):
    wrow0 = blk * 16 * R * WR
    cps, slot_w, size = copies(R, WR, U, NT, N, wrow0, cc, kend)
    mem = {}  # byte -> ('w'|'x', row, k) or 0
    for dst, src in cps:
        assert dst % 16 == 0 and 0 <= dst and dst + 16 <= size, (dst, size)
        for b in range(8):  # 8 bf16 elements a copy
            for h in range(2):
                a = dst + 2 * b + h
                assert a not in mem, ("written twice", a)
                mem[a] = (src[0], src[1], src[2] + b) if src else 0
    assert len(mem) == size, (len(mem), size)
    for wg, r, u, s in itertools.product(range(WR // 4), range(R), range(U), range(2)):
        st = wg * R + r
        a0 = ((st * U + u) * 2 + s) * 2048
        b0 = slot_w + (u * 2 + s) * NT * 256
        kb = cc * U + u
        for k in range(16):
            kk = kb * 32 + 16 * s + k  # natural k order
            for m in range(64):
                tile = wrow0 + 64 * st + (m & ~15)
                row = (tile if tile < N else N - 16) + (m & 15)
                want = ('w', row, kk) if kb < kend else 0
                for h in range(2):
                    assert mem[desc_addr(a0, m, k) + h] == want, ('A', wg, r, u, s, m, k)
            for n in range(8 * NT):
                want = ('x', n, kk) if kb < kend else 0
                for h in range(2):
                    assert mem[desc_addr(b0, n, k) + h] == want, ('B', u, s, n, k)


if __name__ == '__main__':
    n = 0
    for R, WR, U, NT in itertools.product((1, 2), (4, 8, 12), (1, 2, 3), (1, 3, 8)):
        for N, blk in ((4096, 0), (4096, 21), (144, 0)):
            if blk * 16 * R * WR >= N:
                continue
            for cc, kend in ((0, 448), (5, 448), (5, 16)):
                check(R, WR, U, NT, N, blk, cc, kend)
                n += 1
    print(f"xs 5 layout: {n} cases, every A and B element of every wgmma as W and X in natural k order")
