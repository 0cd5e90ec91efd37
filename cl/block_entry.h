/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Packed block-table entry: the one definition shared by host C and every
 * kernel (the host includes this file, the kernels get it prepended).
 *
 *   bits  0..30  physical block id       (31 bits)
 *   bits 31..38  valid length - 1        (8 bits: 1..256)
 *   bits 39..63  delta, two's complement (25 bits: -2^24 .. 2^24-1)
 *
 * Decoding is three shifts and masks of one 64-bit register; the delta is
 * sign-extended without relying on the implementation-defined right shift
 * of a negative value.
 */
#ifndef LAZYATTN_BLOCK_ENTRY_H
#define LAZYATTN_BLOCK_ENTRY_H

#ifdef __OPENCL_C_VERSION__
#define LAZYATTN_U64 ulong
#else
#include <stdint.h>
#define LAZYATTN_U64 uint64_t
#endif

/* Field positions and masks; lib/block_entry.c asserts at build time that
 * they match LAZYATTN_ENTRY_*_BITS and the limits in include/lazyattn.h. */
#define LZ_ENTRY_LENGTH_SHIFT 31
#define LZ_ENTRY_DELTA_SHIFT 39
#define LZ_ENTRY_BLOCK_MASK 0x7FFFFFFF /* 31 bits */
#define LZ_ENTRY_LENGTH_MASK 0xFF      /* 8 bits */
#define LZ_ENTRY_DELTA_MASK 0x1FFFFFF  /* 25 bits */
#define LZ_ENTRY_DELTA_SIGN 0x1000000  /* the delta's sign bit */

#define LAZYATTN_ENTRY_BLOCK(w) ((int)((w) & LZ_ENTRY_BLOCK_MASK))
#define LAZYATTN_ENTRY_LENGTH(w) ((int)(((w) >> LZ_ENTRY_LENGTH_SHIFT) & LZ_ENTRY_LENGTH_MASK) + 1)
#define LAZYATTN_ENTRY_DELTA(w)                                                         \
    ((((int)(((w) >> LZ_ENTRY_DELTA_SHIFT) & LZ_ENTRY_DELTA_MASK)) ^ LZ_ENTRY_DELTA_SIGN) - \
     LZ_ENTRY_DELTA_SIGN)

/* Callers check the ranges first (lazyattn_entry_pack does). */
#define LAZYATTN_ENTRY_ENCODE(block, delta, length)                                   \
    ((LAZYATTN_U64)(block) | ((LAZYATTN_U64)((length) - 1) << LZ_ENTRY_LENGTH_SHIFT) | \
     (((LAZYATTN_U64)(delta) & LZ_ENTRY_DELTA_MASK) << LZ_ENTRY_DELTA_SHIFT))

#endif
