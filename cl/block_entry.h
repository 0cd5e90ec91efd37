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

#define LAZYATTN_ENTRY_BLOCK(w) ((int)((w) & 0x7FFFFFFF))
#define LAZYATTN_ENTRY_LENGTH(w) ((int)(((w) >> 31) & 0xFF) + 1)
#define LAZYATTN_ENTRY_DELTA(w) ((((int)(((w) >> 39) & 0x1FFFFFF)) ^ 0x1000000) - 0x1000000)

/* Callers check the ranges first (lazyattn_entry_pack does). */
#define LAZYATTN_ENTRY_ENCODE(block, delta, length)                                   \
    ((LAZYATTN_U64)(block) | ((LAZYATTN_U64)((length) - 1) << 31) |                  \
     (((LAZYATTN_U64)(delta) & 0x1FFFFFF) << 39))

#endif
