/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target over document import: the input chooses a geometry, a
 * document and a sequence of edits to its export (bytes flipped or set,
 * header fields rewritten with or without a fixed checksum, truncation,
 * trailing bytes), written here by an independent encoder of the format of
 * include/lazyattn.h. Imports into bookkeeping-pool caches (with and without
 * a matching identity, through a buffer and the read callback) must give
 * OK or a clear refusal; a refusal leaves the cache state (fingerprint),
 * statistics and invariants as they were; an untouched export is accepted
 * and then served as a hit. Build: CC=clang meson setup build-fuzz
 * -Dfuzz=true; run: build-fuzz/tests/fuzz_import -max_total_time=30 */
#include "lazyattn.h"

#include "cache/cache_internal.h" /* lz_kv_checksum, lz_cache_fingerprint */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct input {
    const uint8_t *p;
    size_t n;
} input;

static int take_or(input *in, int dflt) {
    if (!in->n) return dflt;
    in->n--;
    return *in->p++;
}

/* The header's bytes (format version 2: the digest at 88, checksum at 120). */
#define HB LAZYATTN_KV_HEADER_BYTES

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "fuzz_import: %s failed at line %d: %s\n", #cond, __LINE__, \
                    lazyattn_last_error());                                             \
            __builtin_trap();                                                           \
        }                                                                               \
    } while (0)

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

typedef struct reader {
    const uint8_t *p;
    size_t n, pos;
} reader;

static int read_cb(void *user, void *data, size_t n) {
    reader *r = user;
    if (n > r->n - r->pos) return 1;
    memcpy(data, r->p + r->pos, n);
    r->pos += n;
    return 0;
}

static int allowed(int st) {
    return st == LAZYATTN_STATUS_OK || st == LAZYATTN_STATUS_FORMAT ||
           st == LAZYATTN_STATUS_INVALID_ARGUMENT || st == LAZYATTN_STATUS_BUDGET_EXCEEDED ||
           st == LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
}

/* One import into a fresh cache; returns its status. */
static int import_once(const lazyattn_pool_config *pc, uint64_t model, const uint8_t *blob,
                       size_t size, int via_callback, int pin_first, int expect_hit,
                       const int32_t *tokens, int n_tokens) {
    lazyattn_pool *pool;
    lazyattn_cache *cache;
    CHECK(lazyattn_pool_create(NULL, pc, &pool) == LAZYATTN_STATUS_OK);
    lazyattn_cache_config cc;
    lazyattn_cache_config_init(&cc);
    cc.model_id = model;
    CHECK(lazyattn_cache_create(pool, &cc, &cache) == LAZYATTN_STATUS_OK);
    lazyattn_request *live = NULL;
    if (pin_first) { /* a pinned entry and an evictable one */
        static const int32_t other[3] = {5, 6, 7};
        const int32_t *docs[] = {other};
        int32_t lens[] = {3};
        lazyattn_request_desc d = {0, NULL, 1, docs, lens, 0, NULL, 0};
        if (lazyattn_request_create(cache, &d, &live) == LAZYATTN_STATUS_OK)
            lazyattn_request_commit(live);
    }
    lazyattn_cache_stats s0, s1;
    lazyattn_cache_get_stats(cache, &s0);
    uint64_t fp = lz_cache_fingerprint(cache);
    int st;
    if (via_callback) {
        reader r = {blob, size, 0};
        st = lazyattn_cache_import_from(cache, read_cb, &r, NULL);
    } else {
        st = lazyattn_cache_import(cache, blob, size, NULL);
    }
    CHECK(allowed(st));
    CHECK(lazyattn_cache_validate(cache) == LAZYATTN_STATUS_OK);
    if (st != LAZYATTN_STATUS_OK && st != LAZYATTN_STATUS_BUDGET_EXCEEDED) {
        /* Refused before anything changed. */
        lazyattn_cache_get_stats(cache, &s1);
        CHECK(memcmp(&s0, &s1, sizeof s0) == 0);
        CHECK(lz_cache_fingerprint(cache) == fp);
    }
    if (expect_hit) {
        CHECK(st == LAZYATTN_STATUS_OK);
        const int32_t *docs[] = {tokens};
        int32_t lens[] = {n_tokens};
        lazyattn_request_desc d = {0, NULL, 1, docs, lens, 0, NULL, 0};
        lazyattn_probe_segment seg[2];
        CHECK(lazyattn_cache_probe(cache, &d, seg, 2, NULL) == LAZYATTN_STATUS_OK);
        CHECK(seg[0].action == LAZYATTN_ACTION_REUSE && seg[0].n_cached == n_tokens);
    }
    lazyattn_request_destroy(live);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(pool, &info);
    CHECK(info.n_used == 0);
    lazyattn_pool_destroy(pool);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    input in = {data, size};
    lazyattn_pool_config pc = {take_or(&in, 0) % 2 + 1,  take_or(&in, 0) % 2 + 1,
                               take_or(&in, 1) % 4 + 1,  take_or(&in, 2) % 8 + 1,
                               (lazyattn_dtype)(take_or(&in, 0) % 3), 0, LAZYATTN_KV_LAYOUT_ROWS};
    int n_blocks_pool = take_or(&in, 16) % 32 + 1;
    size_t dsize = lazyattn_dtype_size(pc.dtype);
    uint64_t block_layer = (uint64_t)pc.n_kv_heads * pc.block_size * pc.head_dim * dsize;
    pc.budget_bytes = (uint64_t)n_blocks_pool * 2 * pc.n_layers * block_layer;
    uint64_t model = (uint64_t)take_or(&in, 3);
    int n_tokens = take_or(&in, 5) % 48 + 1;
    int32_t tokens[48];
    for (int t = 0; t < n_tokens; t++) tokens[t] = take_or(&in, t) * 131 + t;
    int n_blocks = (n_tokens + pc.block_size - 1) / pc.block_size;

    /* The export, encoded here. */
    size_t payload = 4 * (size_t)n_tokens + 2 * (size_t)pc.n_layers * n_blocks * block_layer;
    size_t n = HB + payload;
    uint8_t *blob = calloc(1, n + 64);
    CHECK(blob != NULL);
    uint8_t digest[32];
    CHECK(lazyattn_doc_digest(model, tokens, n_tokens, digest) == LAZYATTN_STATUS_OK);
    memcpy(blob, "LZKVDOC\0", 8);
    put32(blob + 8, 2);
    put32(blob + 12, HB);
    put64(blob + 16, model);
    put32(blob + 24, (uint32_t)pc.n_layers);
    put32(blob + 28, (uint32_t)pc.n_kv_heads);
    put32(blob + 32, (uint32_t)pc.head_dim);
    put32(blob + 36, (uint32_t)pc.block_size);
    put32(blob + 40, (uint32_t)pc.dtype);
    put32(blob + 44, 0);
    memcpy(blob + 48, digest, 8); /* doc_hash: the digest's first 8 bytes */
    put32(blob + 56, (uint32_t)n_tokens);
    put32(blob + 60, (uint32_t)n_blocks);
    put32(blob + 64, 0);
    put32(blob + 68, 0);
    put64(blob + 72, payload);
    memcpy(blob + 88, digest, 32);
    for (int t = 0; t < n_tokens; t++) put32(blob + HB + 4 * (size_t)t, (uint32_t)tokens[t]);
    for (size_t i = HB + 4 * (size_t)n_tokens; i < n; i++) blob[i] = (uint8_t)take_or(&in, (int)i);
    put64(blob + 80, lz_kv_checksum(blob + HB, payload));
    put64(blob + HB - 8, lz_kv_checksum(blob, HB - 8));

    /* Edits. */
    int edited = 0;
    size_t len = n;
    for (int op; in.n && (op = take_or(&in, 0)) >= 0;) {
        size_t at = ((size_t)take_or(&in, 0) << 8 | (size_t)take_or(&in, 0)) % (len ? len : 1);
        int v = take_or(&in, 0);
        switch (op % 7) {
        case 0: blob[at] ^= (uint8_t)(1u << (v & 7)); break;
        case 1: blob[at] = (uint8_t)v; break;
        case 2: /* a header word rewritten, header checksum fixed */
            put32(blob + 8 + 4 * (v % 28), (uint32_t)take_or(&in, 0) << 24 | (uint32_t)take_or(&in, 0));
            put64(blob + HB - 8, lz_kv_checksum(blob, HB - 8));
            break;
        case 3: len = at; break;
        case 4: len = len + (size_t)(v % 64) > n + 64 ? n + 64 : len + (size_t)(v % 64); break;
        case 5: /* payload checksum fixed over what is there now */
            if (len >= HB) {
                put64(blob + 80, lz_kv_checksum(blob + HB, len - HB));
                put64(blob + HB - 8, lz_kv_checksum(blob, HB - 8));
            }
            break;
        case 6: blob[at] = (uint8_t)(blob[at] + 1); break;
        }
        edited = 1;
    }

    /* Matching identity, as buffer and through the callback. */
    int pin = size & 1;
    int fits = n_blocks + (pin ? (3 + pc.block_size - 1) / pc.block_size : 0) <= n_blocks_pool;
    int a = import_once(&pc, model, blob, len, 0, pin, !edited && fits, tokens, n_tokens);
    int b = import_once(&pc, model, blob, len, 1, pin, !edited && fits, tokens, n_tokens);
    /* The callback reads only what the header announces: bytes past it are
     * the buffer's business. Otherwise both agree. */
    uint64_t announced = 0;
    for (int i = 0; len >= 80 && i < 8; i++) announced |= (uint64_t)blob[72 + i] << (8 * i);
    if (len < HB || len - HB <= announced) CHECK(a == b);
    /* The header alone: accepted whenever the import was, with its size. */
    lazyattn_kv_info info;
    int dst = lazyattn_kv_describe(blob, len, &info);
    CHECK(dst == LAZYATTN_STATUS_OK || dst == LAZYATTN_STATUS_FORMAT);
    if (a == LAZYATTN_STATUS_OK) CHECK(dst == LAZYATTN_STATUS_OK && info.total_bytes == len);
    /* Another model id: never accepted. */
    CHECK(import_once(&pc, model + 1, blob, len, 0, pin, 0, tokens, n_tokens) !=
          LAZYATTN_STATUS_OK);
    free(blob);
    return 0;
}
