/* SPDX-License-Identifier: Apache-2.0 */
/*
 * quickstart: cache two documents once, use them in two requests in
 * opposite orders, and check both answers against the float64 reference.
 *
 *   request 1: [doc A][doc B][question]     request 2: [doc B][doc A][question]
 *
 * Each document's K/V is written once, keys rotated at document-local
 * positions 0..L-1. A request only builds a block table whose entries carry
 * each block's delta (logical start - stored start); the kernel applies the
 * rest of the rotation. Build and run: ninja -C build && ./build/examples/quickstart
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lazyattn.h"
#include "lazyattn_testing.h" /* the reference, the workload generator */

enum { H = 32, KV = 8, D = 128, B = 16, Q = 6, MAX_BLOCKS = 64 };

#define CHECK(call)                                                                        \
    do {                                                                                   \
        int st_ = (call);                                                                  \
        if (st_) {                                                                         \
            fprintf(stderr, "%s: %s (%s)\n", #call, lazyattn_status_string(st_),           \
                    lazyattn_last_error());                                                \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

static float rnd(unsigned long long *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
}

static cl_mem buffer(lazyattn_context *ctx, const void *data, size_t bytes) {
    return clCreateBuffer(lazyattn_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                          bytes, (void *)data, NULL);
}

/* A run of tokens in the pool: raw K/V kept on the host for the reference. */
typedef struct segment {
    int len;
    float *k, *v;    /* [len, KV, D] */
    int32_t blocks[MAX_BLOCKS];
    int32_t stored0; /* stored position of its first token */
} segment;

/* Allocates blocks and writes K/V rotated at stored0 + i. */
static int segment_store(lazyattn_context *ctx, lazyattn_attention *attn, lazyattn_pool *pool,
                         segment *s, unsigned long long *seed) {
    size_t n = (size_t)s->len * KV * D;
    s->k = malloc(n * sizeof(float));
    s->v = malloc(n * sizeof(float));
    int32_t *slots = malloc(s->len * sizeof(int32_t)), *pos = malloc(s->len * sizeof(int32_t));
    if (!s->k || !s->v || !slots || !pos) return 1;
    for (size_t i = 0; i < n; i++) s->k[i] = 2 * rnd(seed), s->v[i] = rnd(seed);
    CHECK(lazyattn_pool_alloc(pool, (s->len + B - 1) / B, s->blocks));
    for (int i = 0; i < s->len; i++) slots[i] = s->blocks[i / B] * B + i % B, pos[i] = s->stored0 + i;
    cl_mem k = buffer(ctx, s->k, n * 4), v = buffer(ctx, s->v, n * 4);
    cl_mem sl = buffer(ctx, slots, s->len * 4), ps = buffer(ctx, pos, s->len * 4);
    CHECK(lazyattn_write_kv(attn, pool, 0, s->len, k, v, sl, ps, NULL, NULL));
    clFinish(lazyattn_context_queue(ctx));
    clReleaseMemObject(k), clReleaseMemObject(v), clReleaseMemObject(sl), clReleaseMemObject(ps);
    free(slots), free(pos);
    return 0;
}

/* Runs [first][second][question] and returns the normalised error. */
static int run_request(lazyattn_context *ctx, lazyattn_attention *attn, lazyattn_pool *pool,
                       const lazyattn_attention_config *cfg, const segment *first,
                       const segment *second, unsigned long long *seed, double *error) {
    /* the question's own K/V, stored at its logical positions */
    segment question = {Q, NULL, NULL, {0}, first->len + second->len};
    if (segment_store(ctx, attn, pool, &question, seed)) return 1;
    const segment *order[3] = {first, second, &question};

    uint64_t table[3 * MAX_BLOCKS];
    int32_t entry_pos[3 * MAX_BLOCKS], n_entries = 0, logical = 0;
    int n_keys = first->len + second->len + Q;
    float *k = malloc(sizeof(float) * n_keys * KV * D), *v = malloc(sizeof(float) * n_keys * KV * D);
    int32_t *k_pos = malloc(sizeof(int32_t) * n_keys);
    for (int s = 0; s < 3; s++) {
        const segment *seg = order[s];
        for (int off = 0; off < seg->len; off += B) {
            int len = seg->len - off < B ? seg->len - off : B;
            int delta = logical + off - (seg->stored0 + off);
            CHECK(lazyattn_entry_pack(seg->blocks[off / B], delta, len, &table[n_entries]));
            entry_pos[n_entries++] = logical + off;
        }
        memcpy(k + (size_t)logical * KV * D, seg->k, sizeof(float) * seg->len * KV * D);
        memcpy(v + (size_t)logical * KV * D, seg->v, sizeof(float) * seg->len * KV * D);
        for (int i = 0; i < seg->len; i++) k_pos[logical + i] = logical + i;
        logical += seg->len;
    }

    float q[Q * H * D], out[Q * H * D];
    int32_t q_pos[Q];
    for (int i = 0; i < Q * H * D; i++) q[i] = 2 * rnd(seed);
    for (int i = 0; i < Q; i++) q_pos[i] = question.stored0 + i;
    cl_mem qm = buffer(ctx, q, sizeof q), qp = buffer(ctx, q_pos, sizeof q_pos);
    cl_mem tm = buffer(ctx, table, n_entries * 8), em = buffer(ctx, entry_pos, n_entries * 4);
    cl_mem om = buffer(ctx, out, sizeof out);
    CHECK(lazyattn_rope_apply(attn, Q, H, qm, qp, NULL, NULL));
    lazyattn_prefill_args args = {Q, n_entries, qm, qp, tm, em, om,
                                  NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    CHECK(lazyattn_prefill(attn, pool, 0, &args, NULL, NULL));
    CHECK(clEnqueueReadBuffer(lazyattn_context_queue(ctx), om, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    CHECK(lazyattn_attention_check(attn, NULL));

    double *ref = malloc(sizeof(double) * Q * H * D);
    lazyattn_reference_args ra = {Q, n_keys, q, q_pos, k, v, k_pos, ref, NULL};
    CHECK(lazyattn_reference_attention(cfg, &ra));
    *error = lazyattn_normalised_error(out, ref, Q * H * D);

    CHECK(lazyattn_pool_free(pool, (Q + B - 1) / B, question.blocks));
    clReleaseMemObject(qm), clReleaseMemObject(qp), clReleaseMemObject(tm);
    clReleaseMemObject(em), clReleaseMemObject(om);
    free(ref), free(k), free(v), free(k_pos), free(question.k), free(question.v);
    return 0;
}

static const char usage_text[] =
    "usage: quickstart\n"
    "Caches two documents, uses them in two requests in opposite orders and checks both\n"
    "answers against the float64 reference on the default OpenCL device (LAZYATTN_PLATFORM /\n"
    "LAZYATTN_DEVICE pick another). No options. Exit status: 0 both answers within tolerance,\n"
    "1 a failure or a wrong answer, 2 a bad command line.\n";

int main(int argc, char **argv) {
    /* no options, so no option parser: the program needs only the installed headers
     * (README "Install and pkg-config" builds it as written) */
    if (argc > 1) {
        if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            fputs(usage_text, stdout);
            return 0;
        }
        fprintf(stderr, "quickstart: %s: unknown option (it takes none)\n%s", argv[1], usage_text);
        return 2;
    }
    lazyattn_context *ctx;
    CHECK(lazyattn_context_create(NULL, &ctx));
    printf("lazyattn %s on %s\n", lazyattn_version_string(), lazyattn_context_device_name(ctx));

    lazyattn_attention_config cfg;
    lazyattn_attention_config_default(&cfg); /* Llama-3.1-8B heads, fp16 KV, Llama-3 RoPE */
    lazyattn_pool_config pc = {1, KV, D, B, cfg.dtype, 0, LAZYATTN_KV_LAYOUT_ROWS};
    pc.budget_bytes = (uint64_t)MAX_BLOCKS * 2 * KV * B * D * lazyattn_dtype_size(cfg.dtype);
    lazyattn_pool *pool;
    lazyattn_attention *attn;
    CHECK(lazyattn_pool_create(ctx, &pc, &pool));
    CHECK(lazyattn_attention_create(ctx, &cfg, &attn));

    unsigned long long seed = 2026;
    segment a = {53, NULL, NULL, {0}, 0}, b = {37, NULL, NULL, {0}, 0}; /* stored at 0..L-1 */
    if (segment_store(ctx, attn, pool, &a, &seed) || segment_store(ctx, attn, pool, &b, &seed)) return 1;

    double e1, e2;
    if (run_request(ctx, attn, pool, &cfg, &a, &b, &seed, &e1)) return 1;
    if (run_request(ctx, attn, pool, &cfg, &b, &a, &seed, &e2)) return 1;
    double worst = e1 > e2 ? e1 : e2;
    printf("request [A][B][question]: normalised error vs float64 reference %.2e\n", e1);
    printf("request [B][A][question]: normalised error vs float64 reference %.2e\n", e2);
    printf("max error %.2e (fp16 KV tolerance 2e-3): %s\n", worst, worst < 2e-3 ? "ok" : "FAILED");

    free(a.k), free(a.v), free(b.k), free(b.v);
    lazyattn_attention_destroy(attn);
    lazyattn_pool_destroy(pool);
    lazyattn_context_destroy(ctx);
    return worst < 2e-3 ? 0 : 1;
}
