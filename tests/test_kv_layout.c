/* SPDX-License-Identifier: Apache-2.0 */
/* The host's page reorder between ROWS and TILED (lib/kv_layout.c): element
 * positions worked out by hand from the formula of lazyattn_kv_layout,
 * round trips over several pages and element sizes. No device. */
#include "test_common.h"

#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Pages of rows, 4-byte elements: element (page p, token t, dim d) holds
 * p * 1000000 + t * 1000 + d, so that every value names its place. */
static uint32_t *named_rows(int n_pages, int block_size, int head_dim) {
    uint32_t *rows = malloc((size_t)n_pages * block_size * head_dim * sizeof *rows);
    assert_non_null(rows);
    for (int p = 0; p < n_pages; p++)
        for (int t = 0; t < block_size; t++)
            for (int d = 0; d < head_dim; d++)
                rows[((size_t)p * block_size + t) * head_dim + d] =
                    (uint32_t)(p * 1000000 + t * 1000 + d);
    return rows;
}

typedef struct position {
    int page, t, d;
    size_t tiled; /* element offset in the TILED buffer, by hand */
} position;

/* B = 16, d = 16: a page is 2 x 2 tiles of 64 elements, [t / 8][d / 8][t % 8][d % 8]. */
static void test_positions_b16_d16(void **state) {
    (void)state;
    enum { P = 2, BS = 16, HD = 16 };
    static const position at[] = {
        {0, 0, 0, 0},
        {0, 0, 7, 7},
        {0, 0, 8, 64},        /* tile (0, 1) */
        {0, 1, 0, 8},         /* the next row of tile (0, 0) */
        {0, 7, 15, 127},      /* last element of tile (0, 1) */
        {0, 8, 0, 128},       /* tile (1, 0) */
        {0, 9, 10, 202},      /* tile (1, 1) = 192, row 1, column 2 */
        {0, 15, 15, 255},
        {1, 0, 8, 256 + 64},  /* pages stay in place: page 1 from 256 */
        {1, 12, 3, 256 + 128 + 4 * 8 + 3},
    };
    uint32_t *rows = named_rows(P, BS, HD);
    uint32_t *tiled = calloc(P * BS * HD, sizeof *tiled), *back = calloc(P * BS * HD, sizeof *back);
    assert_non_null(tiled);
    assert_non_null(back);
    lz_kv_pages_to_tiled((const uint8_t *)rows, (uint8_t *)tiled, P, BS, HD, 4);
    for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
        uint32_t want = (uint32_t)(at[i].page * 1000000 + at[i].t * 1000 + at[i].d);
        if (tiled[at[i].tiled] != want)
            print_error("page %d t %d d %d: tiled[%zu] = %u, expected %u\n", at[i].page, at[i].t,
                        at[i].d, at[i].tiled, tiled[at[i].tiled], want);
        assert_int_equal(tiled[at[i].tiled], want);
    }
    lz_kv_pages_to_rows((const uint8_t *)tiled, (uint8_t *)back, P, BS, HD, 4);
    assert_memory_equal(back, rows, (size_t)P * BS * HD * sizeof *rows);
    free(rows);
    free(tiled);
    free(back);
}

/* B = 8 (one row of tiles), d = 24 (three tiles across), 2-byte elements. */
static void test_positions_b8_d24_half(void **state) {
    (void)state;
    enum { BS = 8, HD = 24 };
    uint16_t rows[BS * HD], tiled[BS * HD];
    for (int t = 0; t < BS; t++)
        for (int d = 0; d < HD; d++) rows[t * HD + d] = (uint16_t)(t * 100 + d);
    lz_kv_pages_to_tiled((const uint8_t *)rows, (uint8_t *)tiled, 1, BS, HD, 2);
    assert_int_equal(tiled[0], 0);         /* (0, 0) */
    assert_int_equal(tiled[9], 101);       /* (1, 1): row 1, column 1 of tile 0 */
    assert_int_equal(tiled[64], 8);        /* (0, 8): tile 1 */
    assert_int_equal(tiled[156], 320);     /* (3, 20): tile 2 = 128, + 3 * 8 + 4 */
    assert_int_equal(tiled[191], 723);     /* (7, 23): the last */
}

/* Random bytes through both directions, for each element size and a few
 * shapes: the reorder is a permutation (nothing lost or duplicated), and not
 * the identity. */
static void test_round_trips(void **state) {
    (void)state;
    static const int shapes[][3] = {{3, 16, 128}, {2, 8, 64}, {1, 32, 96}, {4, 16, 16}};
    static const size_t esizes[] = {2, 4};
    lt_rng r = {lt_seed()};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (size_t e = 0; e < 2; e++) {
            const int P = shapes[s][0], BS = shapes[s][1], HD = shapes[s][2];
            const size_t n = (size_t)P * BS * HD * esizes[e];
            uint8_t *a = malloc(n), *b = malloc(n), *c = malloc(n);
            assert_true(a && b && c);
            for (size_t i = 0; i < n; i++) a[i] = (uint8_t)lt_int(&r, 0, 255);
            lz_kv_pages_to_tiled(a, b, P, BS, HD, esizes[e]);
            assert_memory_not_equal(a, b, n);
            lz_kv_pages_to_rows(b, c, P, BS, HD, esizes[e]);
            assert_memory_equal(a, c, n);
            lz_kv_pages_to_rows(a, b, P, BS, HD, esizes[e]);
            lz_kv_pages_to_tiled(b, c, P, BS, HD, esizes[e]);
            assert_memory_equal(a, c, n);
            free(a);
            free(b);
            free(c);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_positions_b16_d16),
        cmocka_unit_test(test_positions_b8_d24_half),
        cmocka_unit_test(test_round_trips),
    };
    return cmocka_run_group_tests_name("kv_layout", tests, NULL, NULL);
}
