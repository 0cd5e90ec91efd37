/* SPDX-License-Identifier: Apache-2.0 */
/* Page layouts on the host: the reorder of a pool's pages between ROWS and
 * TILED (lazyattn_kv_layout), so that document exports stay in ROWS order
 * whatever the pool's layout (doc_export.c). */
#include "internal.h"

#include <string.h>

/* Offset in elements of (token t, dim d) in a TILED page: 8 x 8 tiles of
 * (tokens, dims), the tiles of a group of 8 tokens next to each other. */
static size_t lz_tiled_offset(int t, int d, int head_dim) {
    return ((size_t)(t / 8) * (size_t)(head_dim / 8) + (size_t)(d / 8)) * 64 + (size_t)(t % 8) * 8 +
           (size_t)(d % 8);
}

/* One direction or the other over every page: to_tiled 1 reads ROWS and
 * writes TILED, 0 the reverse. Dims d .. d + 7 (d a multiple of 8) of a
 * token are contiguous in both layouts, so they move as one run of 8
 * elements; values move as their bytes (esize each), untouched. */
static void lz_kv_pages_reorder(const uint8_t *src, uint8_t *dst, int64_t n_pages, int block_size,
                                int head_dim, size_t esize, int to_tiled) {
    const size_t page = (size_t)block_size * (size_t)head_dim * esize;
    for (int64_t p = 0; p < n_pages; p++) {
        const uint8_t *s = src + (size_t)p * page;
        uint8_t *o = dst + (size_t)p * page;
        for (int t = 0; t < block_size; t++)
            for (int d = 0; d < head_dim; d += 8) {
                size_t row = ((size_t)t * (size_t)head_dim + (size_t)d) * esize;
                size_t tile = lz_tiled_offset(t, d, head_dim) * esize;
                if (to_tiled)
                    memcpy(o + tile, s + row, 8 * esize);
                else
                    memcpy(o + row, s + tile, 8 * esize);
            }
    }
}

void lz_kv_pages_to_rows(const uint8_t *tiled, uint8_t *rows, int64_t n_pages, int block_size,
                         int head_dim, size_t esize) {
    lz_kv_pages_reorder(tiled, rows, n_pages, block_size, head_dim, esize, 0);
}

void lz_kv_pages_to_tiled(const uint8_t *rows, uint8_t *tiled, int64_t n_pages, int block_size,
                          int head_dim, size_t esize) {
    lz_kv_pages_reorder(rows, tiled, n_pages, block_size, head_dim, esize, 1);
}
