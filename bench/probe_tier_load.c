/* SPDX-License-Identifier: Apache-2.0 */
/* The serving thread's cost of tier loads (issue 41), without a model:
 * --docs documents of --tokens tokens in a pool of the 8B shape (32 layers
 * x 8 KV heads x d 128, f16, B 16; --layout tiled or rows) are written
 * through to a host (or --dir) store by one cache, then read by a second
 * cache through its tier, one request of all the documents a round (the
 * GPU cache emptied before each), for each load mode: sync, pipelined,
 * background. Printed per mode, medians over --rounds: the ms the calling
 * thread spends in lazyattn_request_create (what a serving loop waits for),
 * and the ms until the request is ready to run (poll, then its uploads
 * complete on the device). Public API only; any OpenCL device (PoCL in
 * CI's image: device memory is host memory). */
#include "bench_util.h"
#include "cli_options.h"
#include "lazyattn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int st) {
    fprintf(stderr, "probe_tier_load: %s: %s (%s)\n", what, lazyattn_status_string(st),
            lazyattn_last_error());
    return 1;
}

#define MAX_DOCS 16

int main(int argc, char **argv) {
    int n_docs = 5, n_tokens = 2048, rounds = 5, layout = 0;
    const char *dir = NULL;
    cli_option opts[] = {
        {.name = "--docs", .type = CLI_INT, .dest = &n_docs, .min = 1, .max = MAX_DOCS},
        {.name = "--tokens", .type = CLI_INT, .dest = &n_tokens, .min = 16, .max = 8192},
        {.name = "--rounds", .type = CLI_INT, .dest = &rounds, .min = 1, .max = 100},
        {.name = "--layout", .type = CLI_ENUM, .dest = &layout, .choices = "tiled|rows"},
        {.name = "--dir", .type = CLI_STRING, .dest = &dir},
    };
    const char *usage =
        "usage: probe_tier_load [--docs N (1..16, default 5)] [--tokens T (default 2048)]\n"
        "                       [--rounds R (default 5)] [--layout tiled|rows] [--dir PATH]\n"
        "Prints, per tier load mode, the ms lazyattn_request_create takes on the calling\n"
        "thread and the ms until the request is ready (medians), 8B-shaped documents.\n";
    int r = cli_parse("probe_tier_load", usage, opts, 5, argc, argv);
    if (r) return r == CLI_HELP ? 0 : 2;
    lazyattn_context *ctx = NULL;
    lazyattn_pool *wpool = NULL;
    lazyattn_cache *writer = NULL;
    lazyattn_store *store = NULL;
    int32_t *tokens[MAX_DOCS] = {0}, lens[MAX_DOCS];
    double *create_ms = malloc((size_t)rounds * sizeof(double));
    double *ready_ms = malloc((size_t)rounds * sizeof(double));
    int st, rc = 1;
    if (!create_ms || !ready_ms) goto out;
    if ((st = lazyattn_context_create(NULL, &ctx))) {
        rc = fail("lazyattn_context_create", st);
        goto out;
    }
    lazyattn_pool_config pc;
    lazyattn_pool_config_init(&pc);
    pc.kv_layout = layout == 0 ? LAZYATTN_KV_LAYOUT_TILED : LAZYATTN_KV_LAYOUT_ROWS;
    double per_token = 2.0 * pc.n_layers * pc.n_kv_heads * pc.head_dim * 2;
    pc.budget_bytes = (uint64_t)((double)n_docs * (n_tokens + 2 * pc.block_size) * per_token);
    st = dir ? lazyattn_store_create_dir(dir, &store)
             : lazyattn_store_create_host(2 * pc.budget_bytes, &store);
    if (st) {
        rc = fail("store", st);
        goto out;
    }
    lazyattn_cache_config cc;
    lazyattn_cache_config_init(&cc);
    cc.model_id = 0x7131ull;
    if ((st = lazyattn_pool_create(ctx, &pc, &wpool)) ||
        (st = lazyattn_cache_create(wpool, &cc, &writer)) ||
        (st = lazyattn_cache_set_tier(writer, store, LAZYATTN_TIER_WRITE_THROUGH))) {
        rc = fail("the writer", st);
        goto out;
    }
    uint64_t seed = 0x41ull;
    for (int d = 0; d < n_docs; d++) {
        lens[d] = n_tokens;
        if (!(tokens[d] = malloc((size_t)n_tokens * sizeof(int32_t)))) goto out;
        for (int t = 0; t < n_tokens; t++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            tokens[d][t] = (int32_t)(seed >> 48);
        }
        lazyattn_request_desc desc;
        lazyattn_request_desc_init(&desc);
        desc.n_docs = 1;
        desc.docs = (const int32_t *const *)&tokens[d];
        desc.doc_lengths = &lens[d];
        lazyattn_request *req;
        if ((st = lazyattn_request_create(writer, &desc, &req))) {
            rc = fail("the writer's request", st);
            goto out;
        }
        /* the K/V is whatever the pool holds: the loads' cost, not their values */
        st = lazyattn_request_commit(req);
        lazyattn_request_destroy(req);
        if (st) {
            rc = fail("the writer's commit", st);
            goto out;
        }
    }
    lazyattn_request_desc all;
    lazyattn_request_desc_init(&all);
    all.n_docs = n_docs;
    all.docs = (const int32_t *const *)tokens;
    all.doc_lengths = lens;
    static const char *names[3] = {"sync", "pipelined", "background"};
    static const lazyattn_tier_load loads[3] = {
        LAZYATTN_TIER_LOAD_SYNC, LAZYATTN_TIER_LOAD_PIPELINED, LAZYATTN_TIER_LOAD_BACKGROUND};
    printf("# %d documents x %d tokens (%.0f MiB each), %s pool, %s store; median of %d rounds\n",
           n_docs, n_tokens, per_token * n_tokens / (1 << 20),
           layout == 0 ? "TILED" : "ROWS", dir ? "dir" : "host", rounds);
    printf("| load | request_create ms (calling thread) | ready ms | tier hits |\n");
    printf("| --- | --- | --- | --- |\n");
    for (int m = 0; m < 3; m++) {
        lazyattn_pool *pool = NULL;
        lazyattn_cache *cache = NULL;
        lazyattn_tier_options o;
        lazyattn_tier_options_init(&o);
        o.load = loads[m];
        if ((st = lazyattn_pool_create(ctx, &pc, &pool)) ||
            (st = lazyattn_cache_create(pool, &cc, &cache)) ||
            (st = lazyattn_cache_set_tier_options(cache, store, LAZYATTN_TIER_READ_ONLY, &o))) {
            lazyattn_cache_destroy(cache);
            lazyattn_pool_destroy(pool);
            rc = fail(names[m], st);
            goto out;
        }
        for (int k = 0; k < rounds && !st; k++) {
            st = lazyattn_cache_trim(cache, 0); /* every document a miss of the GPU cache */
            lazyattn_request *req = NULL;
            double t0 = bench_seconds();
            if (!st) st = lazyattn_request_create(cache, &all, &req);
            double t1 = bench_seconds();
            int pending = 0, failed = 0;
            if (!st) st = lazyattn_request_poll_loads(req, 1, &pending, &failed);
            if (!st && failed) st = LAZYATTN_STATUS_NOT_FOUND;
            if (!st) st = lazyattn_pool_order_reads(pool, -1, NULL);
            if (!st && clFinish(lazyattn_context_queue(ctx)) != CL_SUCCESS)
                st = LAZYATTN_STATUS_OPENCL;
            double t2 = bench_seconds();
            lazyattn_request_destroy(req);
            create_ms[k] = 1e3 * (t1 - t0);
            ready_ms[k] = 1e3 * (t2 - t0);
        }
        lazyattn_cache_stats s;
        lazyattn_cache_get_stats(cache, &s);
        lazyattn_cache_destroy(cache);
        lazyattn_pool_destroy(pool);
        if (st) {
            rc = fail(names[m], st);
            goto out;
        }
        qsort(create_ms, (size_t)rounds, sizeof(double), bench_cmp_double);
        qsort(ready_ms, (size_t)rounds, sizeof(double), bench_cmp_double);
        printf("| %s | %.1f | %.1f | %lld |\n", names[m], create_ms[rounds / 2],
               ready_ms[rounds / 2], (long long)s.tier_hits);
    }
    rc = 0;
out:
    lazyattn_cache_destroy(writer);
    lazyattn_pool_destroy(wpool);
    lazyattn_store_destroy(store);
    lazyattn_context_destroy(ctx);
    for (int d = 0; d < n_docs; d++) free(tokens[d]);
    free(create_ms);
    free(ready_ms);
    return rc;
}
