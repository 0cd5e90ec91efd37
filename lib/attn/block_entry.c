/* SPDX-License-Identifier: Apache-2.0 */
/* Packing and unpacking of block-table entries (layout in cl/block_entry.h). */
#include "internal.h"

#include "../../cl/block_entry.h"

/* The kernels' layout (cl/block_entry.h) is the public one (lazyattn.h):
 * the build fails when either changes alone. */
_Static_assert(LZ_ENTRY_LENGTH_SHIFT == LAZYATTN_ENTRY_BLOCK_BITS, "entry: block field width");
_Static_assert(LZ_ENTRY_DELTA_SHIFT == LAZYATTN_ENTRY_BLOCK_BITS + LAZYATTN_ENTRY_LENGTH_BITS,
               "entry: length field width");
_Static_assert(LAZYATTN_ENTRY_BLOCK_BITS + LAZYATTN_ENTRY_LENGTH_BITS + LAZYATTN_ENTRY_DELTA_BITS == 64,
               "entry: the fields fill 64 bits");
_Static_assert(LZ_ENTRY_BLOCK_MASK == LAZYATTN_ENTRY_MAX_BLOCK, "entry: block mask");
_Static_assert(LZ_ENTRY_LENGTH_MASK + 1 == LAZYATTN_MAX_BLOCK_SIZE, "entry: length mask");
_Static_assert(LZ_ENTRY_DELTA_MASK == ((1 << LAZYATTN_ENTRY_DELTA_BITS) - 1), "entry: delta mask");
_Static_assert(LZ_ENTRY_DELTA_SIGN == -LAZYATTN_ENTRY_MIN_DELTA &&
                   LZ_ENTRY_DELTA_SIGN == LAZYATTN_ENTRY_MAX_DELTA + 1,
               "entry: delta range");
_Static_assert(LAZYATTN_ENTRY_MAX_DELTA >= LAZYATTN_MAX_POSITION &&
                   LAZYATTN_ENTRY_MIN_DELTA <= -LAZYATTN_MAX_POSITION,
               "entry: every difference of two positions is a delta");
/* round trips of the extreme values through the macros the kernels use */
_Static_assert(LAZYATTN_ENTRY_BLOCK(LAZYATTN_ENTRY_ENCODE(LAZYATTN_ENTRY_MAX_BLOCK, -1, 1)) ==
                   LAZYATTN_ENTRY_MAX_BLOCK,
               "entry: block round trip");
_Static_assert(LAZYATTN_ENTRY_LENGTH(LAZYATTN_ENTRY_ENCODE(0, 0, LAZYATTN_MAX_BLOCK_SIZE)) ==
                   LAZYATTN_MAX_BLOCK_SIZE,
               "entry: length round trip");
_Static_assert(LAZYATTN_ENTRY_DELTA(LAZYATTN_ENTRY_ENCODE(0, LAZYATTN_ENTRY_MIN_DELTA, 1)) ==
                   LAZYATTN_ENTRY_MIN_DELTA,
               "entry: delta round trip (minimum)");
_Static_assert(LAZYATTN_ENTRY_DELTA(LAZYATTN_ENTRY_ENCODE(0, LAZYATTN_ENTRY_MAX_DELTA, 1)) ==
                   LAZYATTN_ENTRY_MAX_DELTA,
               "entry: delta round trip (maximum)");

int lazyattn_entry_pack(int64_t block, int64_t delta, int64_t valid_length, uint64_t *word) {
    LZ_CHECK_ARG(word != NULL, "lazyattn_entry_pack: word is NULL");
    if (block < 0 || block > LAZYATTN_ENTRY_MAX_BLOCK)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                       "lazyattn_entry_pack: block id %lld outside 0..%lld", (long long)block,
                       (long long)LAZYATTN_ENTRY_MAX_BLOCK);
    if (delta < LAZYATTN_ENTRY_MIN_DELTA || delta > LAZYATTN_ENTRY_MAX_DELTA)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                       "lazyattn_entry_pack: delta %lld outside %lld..%lld", (long long)delta,
                       (long long)LAZYATTN_ENTRY_MIN_DELTA, (long long)LAZYATTN_ENTRY_MAX_DELTA);
    if (valid_length < 1 || valid_length > LAZYATTN_MAX_BLOCK_SIZE)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                       "lazyattn_entry_pack: valid length %lld outside 1..%d",
                       (long long)valid_length, LAZYATTN_MAX_BLOCK_SIZE);
    *word = LAZYATTN_ENTRY_ENCODE(block, delta, valid_length);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_entry_unpack(uint64_t word, int32_t *block, int32_t *delta, int32_t *valid_length) {
    LZ_CHECK_ARG(block && delta && valid_length, "lazyattn_entry_unpack: NULL output");
    *block = LAZYATTN_ENTRY_BLOCK(word);
    *delta = LAZYATTN_ENTRY_DELTA(word);
    *valid_length = LAZYATTN_ENTRY_LENGTH(word);
    return LAZYATTN_STATUS_OK;
}
