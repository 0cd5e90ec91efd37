/* SPDX-License-Identifier: Apache-2.0 */
/* Packed block-table entries: round trips at the edges of every field, and
 * rejection of values that do not fit. */
#include "test_common.h"

#include "../cl/block_entry.h"

static void roundtrip(int64_t block, int64_t delta, int64_t len) {
    uint64_t w = 0;
    lt_assert_status(lazyattn_entry_pack(block, delta, len, &w), LAZYATTN_STATUS_OK);
    int32_t b, d, l;
    lt_assert_status(lazyattn_entry_unpack(w, &b, &d, &l), LAZYATTN_STATUS_OK);
    assert_int_equal(b, block);
    assert_int_equal(d, delta);
    assert_int_equal(l, len);
    /* the kernel-side macros decode the same word */
    assert_int_equal(LAZYATTN_ENTRY_BLOCK(w), block);
    assert_int_equal(LAZYATTN_ENTRY_DELTA(w), delta);
    assert_int_equal(LAZYATTN_ENTRY_LENGTH(w), len);
}

static void test_edges_round_trip(void **state) {
    (void)state;
    const int64_t blocks[] = {0, 1, 12345, LAZYATTN_ENTRY_MAX_BLOCK - 1, LAZYATTN_ENTRY_MAX_BLOCK};
    const int64_t deltas[] = {LAZYATTN_ENTRY_MIN_DELTA, LAZYATTN_ENTRY_MIN_DELTA + 1, -100000, -1, 0,
                              1, 65535, 65536, 100000, LAZYATTN_ENTRY_MAX_DELTA - 1,
                              LAZYATTN_ENTRY_MAX_DELTA};
    const int64_t lens[] = {1, 2, 15, 16, 17, 255, LAZYATTN_MAX_BLOCK_SIZE};
    int n = 0;
    for (size_t i = 0; i < sizeof blocks / sizeof *blocks; i++)
        for (size_t j = 0; j < sizeof deltas / sizeof *deltas; j++)
            for (size_t k = 0; k < sizeof lens / sizeof *lens; k++, n++)
                roundtrip(blocks[i], deltas[j], lens[k]);
    assert_int_equal(n, 5 * 11 * 7);
}

static void test_random_round_trip(void **state) {
    (void)state;
    lt_rng r = {lt_seed()};
    for (int i = 0; i < 100000; i++) {
        int64_t block = (int64_t)(lt_next(&r) % ((uint64_t)LAZYATTN_ENTRY_MAX_BLOCK + 1));
        int64_t delta = LAZYATTN_ENTRY_MIN_DELTA +
                        (int64_t)(lt_next(&r) % (uint64_t)(LAZYATTN_ENTRY_MAX_DELTA - LAZYATTN_ENTRY_MIN_DELTA + 1));
        int64_t len = 1 + (int64_t)(lt_next(&r) % LAZYATTN_MAX_BLOCK_SIZE);
        roundtrip(block, delta, len);
    }
}

/* Fields are independent: changing one leaves the others' bits alone. */
static void test_fields_do_not_overlap(void **state) {
    (void)state;
    uint64_t a, b, c;
    lazyattn_entry_pack(LAZYATTN_ENTRY_MAX_BLOCK, 0, 1, &a);
    lazyattn_entry_pack(0, 0, LAZYATTN_MAX_BLOCK_SIZE, &b);
    lazyattn_entry_pack(0, -1, 1, &c);
    assert_true((a & b) == 0 && (a & c) == 0 && (b & c) == 0);
    assert_true((a | b | c) == UINT64_MAX);
}

static void test_rejects_values_that_do_not_fit(void **state) {
    (void)state;
    uint64_t w = 42;
    lt_assert_status(lazyattn_entry_pack(-1, 0, 1, &w), LAZYATTN_STATUS_OUT_OF_RANGE);
    lt_assert_status(lazyattn_entry_pack(LAZYATTN_ENTRY_MAX_BLOCK + 1, 0, 1, &w), LAZYATTN_STATUS_OUT_OF_RANGE);
    lt_assert_status(lazyattn_entry_pack(0, LAZYATTN_ENTRY_MAX_DELTA + 1, 1, &w), LAZYATTN_STATUS_OUT_OF_RANGE);
    lt_assert_status(lazyattn_entry_pack(0, LAZYATTN_ENTRY_MIN_DELTA - 1, 1, &w), LAZYATTN_STATUS_OUT_OF_RANGE);
    lt_assert_status(lazyattn_entry_pack(0, 0, 0, &w), LAZYATTN_STATUS_OUT_OF_RANGE);
    lt_assert_status(lazyattn_entry_pack(0, 0, LAZYATTN_MAX_BLOCK_SIZE + 1, &w), LAZYATTN_STATUS_OUT_OF_RANGE);
    lt_assert_status(lazyattn_entry_pack(0, 0, -3, &w), LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_int_equal(w, 42); /* untouched on failure */
    assert_string_not_equal(lazyattn_last_error(), "");
    lt_assert_status(lazyattn_entry_pack(0, 0, 1, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    int32_t b, d, l;
    lt_assert_status(lazyattn_entry_unpack(0, NULL, &d, &l), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_entry_unpack(0, &b, NULL, &l), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_entry_unpack(0, &b, &d, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edges_round_trip),
        cmocka_unit_test(test_random_round_trip),
        cmocka_unit_test(test_fields_do_not_overlap),
        cmocka_unit_test(test_rejects_values_that_do_not_fit),
    };
    return cmocka_run_group_tests_name("block_entry", tests, NULL, NULL);
}
