/* Packing and unpacking of block-table entries (layout in cl/block_entry.h). */
#include "internal.h"

#include "../cl/block_entry.h"

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
