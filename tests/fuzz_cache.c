/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: arbitrary sequences of calls on the public cache API
 * (pool budget, policy, requests over a small document set, commit,
 * append, destroy, trim, stats), with lazyattn_cache_validate and the pool
 * accounting checked after every call. Build: CC=clang meson setup
 * build-fuzz -Dfuzz=true; run: build-fuzz/tests/fuzz_cache -max_total_time=60 */
#include "lazyattn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct input {
    const uint8_t *p;
    size_t n;
} input;

static int take(input *in) {
    if (!in->n) return -1;
    in->n--;
    return *in->p++;
}

static int take_or(input *in, int dflt) {
    int v = take(in);
    return v < 0 ? dflt : v;
}

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "fuzz_cache: %s failed at line %d: %s\n", #cond, __LINE__, \
                    lazyattn_last_error());                                          \
            __builtin_trap();                                                        \
        }                                                                            \
    } while (0)

#define MAX_LIVE 6

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    input in = {data, size};
    int block_size = take_or(&in, 4) % 8 + 1;
    int n_blocks = take_or(&in, 16) % 64 + 1;
    lazyattn_pool_config pc = {1, 1, 1, block_size, LAZYATTN_DTYPE_F32,
                               (uint64_t)n_blocks * 8 * block_size, LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *pool;
    CHECK(lazyattn_pool_create(NULL, &pc, &pool) == LAZYATTN_STATUS_OK);
    int cfg = take_or(&in, 0);
    lazyattn_cache_config cc = {(lazyattn_cache_policy)(cfg % 5), (uint64_t)cfg,
                                (uint64_t)(take_or(&in, 0) % (n_blocks + 1)) * 8 * block_size};
    lazyattn_cache *cache = NULL;
    int st = lazyattn_cache_create(pool, &cc, &cache);
    if (st) { /* policy 4 is invalid */
        CHECK(st == LAZYATTN_STATUS_INVALID_ARGUMENT && cache == NULL);
        lazyattn_pool_destroy(pool);
        return 0;
    }
    /* Eight documents: lengths and contents from the input. */
    int32_t docs[8][40];
    int32_t lens[8];
    for (int d = 0; d < 8; d++) {
        lens[d] = take_or(&in, d + 1) % 40; /* 0 is a bad input */
        for (int t = 0; t < 40; t++) docs[d][t] = (t % 5) + (d & 3) * (t >= 4);
    }
    lazyattn_request *live[MAX_LIVE];
    int n_live = 0;
    for (int op; (op = take(&in)) >= 0;) {
        switch (op % 6) {
        case 0:
        case 1: { /* create */
            const int32_t *dp[8];
            int32_t dl[8];
            int n_docs = take_or(&in, 0) % 9;
            for (int i = 0; i < n_docs; i++) {
                int id = take_or(&in, 0) % 8;
                dp[i] = docs[id];
                dl[i] = lens[id];
            }
            int32_t q[8] = {9, 8, 7, 6, 5, 4, 3, 2};
            int shape = take_or(&in, 0);
            lazyattn_request_desc d = {shape % 4, q, n_docs, dp, dl, (shape >> 2) % 9, q,
                                       (shape >> 6) - 1};
            lazyattn_request *r = NULL;
            st = lazyattn_request_create(cache, &d, &r);
            if (st == LAZYATTN_STATUS_OK && n_live < MAX_LIVE) {
                live[n_live++] = r;
            } else if (st == LAZYATTN_STATUS_OK) {
                lazyattn_request_destroy(r);
            } else {
                CHECK(r == NULL);
                CHECK(st == LAZYATTN_STATUS_BUDGET_EXCEEDED ||
                      st == LAZYATTN_STATUS_INVALID_ARGUMENT);
            }
            break;
        }
        case 2:
            if (n_live) CHECK(lazyattn_request_commit(live[take_or(&in, 0) % n_live]) == 0);
            break;
        case 3:
            if (n_live) {
                int32_t slots[16], pos[16];
                int n = take_or(&in, 1) % 17;
                lazyattn_plan before, after;
                lazyattn_request *r = live[take_or(&in, 0) % n_live];
                lazyattn_request_get_plan(r, &before);
                st = lazyattn_request_append(r, n, slots, pos);
                CHECK(st == LAZYATTN_STATUS_OK || st == LAZYATTN_STATUS_BUDGET_EXCEEDED);
                lazyattn_request_get_plan(r, &after);
                CHECK(after.n_positions == before.n_positions + (st ? 0 : n));
                for (int i = 0; !st && i < n; i++) CHECK(pos[i] == before.n_positions + i);
            }
            break;
        case 4:
            if (n_live) {
                int i = take_or(&in, 0) % n_live;
                lazyattn_request_destroy(live[i]);
                live[i] = live[--n_live];
            }
            break;
        case 5:
            if (take_or(&in, 0) & 1)
                CHECK(lazyattn_cache_trim(cache, (uint64_t)take_or(&in, 0) * 8 * block_size) == 0);
            else
                CHECK(lazyattn_cache_reset_stats(cache) == 0);
            break;
        }
        CHECK(lazyattn_cache_validate(cache) == LAZYATTN_STATUS_OK);
        lazyattn_cache_stats s;
        lazyattn_pool_info info;
        lazyattn_cache_get_stats(cache, &s);
        lazyattn_pool_get_info(pool, &info);
        CHECK(info.n_used * info.block_bytes == s.bytes_in_use);
        CHECK(s.n_requests_live == n_live);
        /* Table of every live request: positions contiguous, blocks allocated. */
        for (int i = 0; i < n_live; i++) {
            lazyattn_plan p;
            CHECK(lazyattn_request_get_plan(live[i], &p) == 0);
            int32_t pos = 0;
            for (int e = 0; e < p.n_entries; e++) {
                int32_t b, d, n;
                CHECK(lazyattn_entry_unpack(p.table[e], &b, &d, &n) == 0);
                CHECK(p.entry_pos[e] == pos && n >= 1 && n <= block_size);
                CHECK(lazyattn_pool_is_allocated(pool, b));
                pos += n;
            }
            CHECK(pos == p.n_positions);
        }
    }
    /* Half the time leave requests to the cache's destroy. */
    if (size & 1)
        while (n_live) lazyattn_request_destroy(live[--n_live]);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(pool, &info);
    CHECK(info.n_used == 0 && info.n_allocs == info.n_frees);
    lazyattn_pool_destroy(pool);
    return 0;
}
