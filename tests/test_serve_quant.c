/* SPDX-License-Identifier: Apache-2.0 */
/* The engine with GGUF weights kept quantized on the device (the default)
 * against the same file dequantized at load (serve_model_config's
 * dequantize_weights), end to end: the committed fixtures of
 * tools/gguf_fixtures.py (tests/fixtures: q8_0, q4_k_m with Q4_0, Q8_0,
 * Q4_K, Q5_K and Q6_K projections, and bf16, whose BF16 matrices no
 * kernel reads quantized), in f32 and in bf16 projections, on the default
 * device (PoCL in CI), f32 K/V.
 * One sequence: a 12-token prefill chunk (past SERVE_QUANT_GEMV_MAX_ROWS:
 * each kept weight dequantized on the device into the scratch, then the
 * GEMM), a 5-token chunk over it (the GEMV at 5 rows), 4 decode steps (the
 * GEMV at 1 row); the LM head is the GEMV at 1 row throughout. Both
 * models are fed the dequantized one's greedy tokens. At every step:
 *   f32:  the greedy tokens agree and the logits are within a normalised
 *         error of 1e-5 (the same f32 weights, summed in another order);
 *   bf16: dequantizing at load rounds the weights to bf16, the kept path
 *         reads them exact: within 5e-2 (as bf16 against float64 in
 *         test_gguf_fixtures), the greedy tokens agree wherever the
 *         runner-up is further below the top logit than twice the largest
 *         logit difference.
 * The kept model's decode steps take the fused loop (serve/model.c
 * serve_layers_proj_fused, the norms and SwiGLU inside the GEMV): 2
 * elementwise launches a step, counted by a timer on the model.
 * The kept model holds fewer weight bytes on the device than the
 * dequantized one (no dense copy the comparison could run on), and its
 * note names the kept types; for bf16.gguf both loads are the same path
 * and the logits identical (f32 projections). Then the refusals: an infinite or NaN f16
 * scale in a kept tensor (named), a forward after that failed load, a
 * second load or random weights into the model, dequantize_weights not
 * 0/1. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "serve.h"
#include "serve_check.h"
#include "serve_tune_env.h"

enum { N_FIRST = 12, N_SECOND = 5, N_DECODE = 4, N_TOKENS = N_FIRST + N_SECOND + N_DECODE };

static const char *fixture_dir(void) {
    const char *d = getenv("LAZYATTN_FIXTURES");
    return d && *d ? d : "tests/fixtures";
}

/* One loaded model with its pool, running one sequence token by token. */
typedef struct runner {
    serve_model *m;
    lazyattn_pool *pool;
    serve_model_config cfg;
    int32_t blocks[N_TOKENS], slots[N_TOKENS], pos[N_TOKENS];
    uint64_t table[N_TOKENS];
    uint64_t weight_bytes;
} runner;

static void runner_open(runner *r, lazyattn_context *ctx, const serve_gguf *g,
                        serve_gemm_mode gemm, int dequantize) {
    memset(r, 0, sizeof *r);
    serve_model_config_preset(&r->cfg, "tiny");
    CHECK(serve_gguf_model_config(g, &r->cfg));
    r->cfg.kv_dtype = LAZYATTN_DTYPE_F32;
    r->cfg.gemm = gemm;
    r->cfg.dequantize_weights = dequantize;
    CHECK(serve_model_create(ctx, &r->cfg, &r->m));
    CHECK(serve_model_load_gguf(r->m, g));
    serve_model_device_bytes(r->m, &r->weight_bytes, NULL);
    lazyattn_pool_config pc;
    serve_model_pool_config(&r->cfg, 1 << 20, &pc);
    CHECK(lazyattn_pool_create(ctx, &pc, &r->pool));
    CHECK(lazyattn_pool_alloc(r->pool, N_TOKENS, r->blocks));
    for (int t = 0; t < N_TOKENS; t++) { /* token t alone in block t, at position t */
        r->slots[t] = r->blocks[t] * r->cfg.block_size;
        r->pos[t] = t;
        CHECK(lazyattn_entry_pack(r->blocks[t], 0, 1, &r->table[t]));
    }
}

static void runner_close(runner *r) {
    CHECK(lazyattn_pool_free(r->pool, N_TOKENS, r->blocks));
    lazyattn_pool_destroy(r->pool);
    serve_model_destroy(r->m);
}

/* Tokens t0 .. t0 + n (a prefill chunk over entries 0 .. t0 + n, or a
 * decode step for n 1 and decode), the last row's logits into logits. */
static int32_t runner_step(runner *r, const int32_t *tokens, int t0, int n, int decode,
                           float *logits) {
    int32_t next = -1;
    if (decode) {
        int32_t offsets[2] = {0, t0 + 1};
        serve_decode_args da = {1, &tokens[t0], &r->pos[t0], &r->slots[t0], &r->pos[t0],
                                offsets, r->table, r->pos, t0 + 1, NULL};
        CHECK(serve_model_decode(r->m, r->pool, &da, &next));
    } else {
        serve_prefill_args pa = {.n_tokens = n, .tokens = tokens + t0, .q_pos = r->pos + t0,
                                 .slots = r->slots + t0, .stored_pos = r->pos + t0,
                                 .n_entries = t0 + n, .table = r->table,
                                 .entry_pos = r->pos, .want_logits = 1};
        CHECK(serve_model_prefill(r->m, r->pool, &pa, &next));
    }
    CHECK(serve_model_read_logits(r->m, 1, logits));
    return next;
}

/* top logit minus the runner-up */
static double top_margin(const float *v, int n) {
    double a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (v[i] > a) b = a, a = v[i];
        else if (v[i] > b) b = v[i];
    }
    return a - b;
}

static void compare(lazyattn_context *ctx, const char *name, serve_gemm_mode gemm,
                    int expect_kept) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.gguf", fixture_dir(), name);
    serve_gguf *g = NULL;
    CHECK(serve_gguf_open(path, &g));
    runner kept, deq;
    runner_open(&kept, ctx, g, gemm, 0);
    runner_open(&deq, ctx, g, gemm, 1);
    int bf16 = serve_model_uses_bf16(kept.m), V = kept.cfg.vocab;
    const char *kept_note = serve_model_weights_note(kept.m);
    printf("# %-7s %-4s %s (%llu weight bytes; dequantized at load %llu)\n", name,
           bf16 ? "bf16" : "f32", kept_note, (unsigned long long)kept.weight_bytes,
           (unsigned long long)deq.weight_bytes);
    if (expect_kept) {
        if (!strstr(kept_note, "kept quantized on the device: "))
            fail_msg("%s: note \"%s\" keeps nothing", name, kept_note);
        if (!(kept.weight_bytes < deq.weight_bytes))
            fail_msg("%s: %llu weight bytes kept, %llu dequantized", name,
                     (unsigned long long)kept.weight_bytes, (unsigned long long)deq.weight_bytes);
    } else if (strcmp(kept_note, serve_model_weights_note(deq.m)) != 0) {
        fail_msg("%s: \"%s\" against \"%s\"", name, kept_note, serve_model_weights_note(deq.m));
    }
    if (strstr(serve_model_weights_note(deq.m), "kept"))
        fail_msg("%s: dequantize_weights kept some: %s", name, serve_model_weights_note(deq.m));

    int32_t tokens[N_TOKENS];
    for (int t = 0; t < N_FIRST + N_SECOND; t++) tokens[t] = (int32_t)((t * 7919 + 13) % V);
    float *lk = malloc((size_t)V * sizeof *lk), *ld = malloc((size_t)V * sizeof *ld);
    double *ref = malloc((size_t)V * sizeof *ref);
    assert_true(lk && ld && ref);
    double worst = 0.0;
    /* the kept model's enqueues, counted (no profiling): its decode steps
     * must take the fused loop, whose only elementwise launches are the
     * first layer's embedding norm and the argmax (the unfused one adds
     * two norms and a SwiGLU a layer and the output norm) */
    serve_timer timer;
    memset(&timer, 0, sizeof timer);
    if (expect_kept) serve_model_set_timer(kept.m, &timer);
    struct {
        int t0, n, decode;
    } steps[2 + N_DECODE] = {{0, N_FIRST, 0}, {N_FIRST, N_SECOND, 0}};
    for (int i = 0; i < N_DECODE; i++) steps[2 + i].t0 = N_FIRST + N_SECOND + i, steps[2 + i].n = 1,
                                       steps[2 + i].decode = 1;
    for (int s = 0; s < 2 + N_DECODE; s++) {
        int64_t elementwise0 = timer.enqueues_by[SERVE_ENQ_ELEMENTWISE];
        int32_t nk = runner_step(&kept, tokens, steps[s].t0, steps[s].n, steps[s].decode, lk);
        int64_t elementwise = timer.enqueues_by[SERVE_ENQ_ELEMENTWISE] - elementwise0;
        if (expect_kept && steps[s].decode && elementwise != 2)
            fail_msg("%s %s step %d: %lld elementwise launches, 2 in the fused decode", name,
                     bf16 ? "bf16" : "f32", s, (long long)elementwise);
        int32_t nd = runner_step(&deq, tokens, steps[s].t0, steps[s].n, steps[s].decode, ld);
        double max_diff = 0.0;
        for (int i = 0; i < V; i++) {
            ref[i] = ld[i];
            double d = fabs((double)lk[i] - (double)ld[i]);
            if (!(d <= max_diff)) max_diff = d;
        }
        double err = lazyattn_normalised_error(lk, ref, (size_t)V);
        if (!(err <= worst)) worst = err;
        double bound = bf16 ? 5e-2 : 1e-5;
        if (!(err <= bound))
            fail_msg("%s %s step %d: normalised error %g > %g", name, bf16 ? "bf16" : "f32", s,
                     err, bound);
        int must_agree = !bf16 || top_margin(ld, V) > 2.0 * max_diff;
        if (must_agree && nk != nd)
            fail_msg("%s %s step %d: greedy token %d kept, %d dequantized", name,
                     bf16 ? "bf16" : "f32", s, (int)nk, (int)nd);
        if (!expect_kept && memcmp(lk, ld, (size_t)V * sizeof *lk) != 0)
            fail_msg("%s step %d: the same path gave other logits", name, s);
        int next = steps[s].t0 + steps[s].n;
        if (next < N_TOKENS) tokens[next] = nd; /* both fed the dequantized one's choice */
    }
    printf("# %-7s %-4s prefill %d + %d rows, %d decode steps: normalised error %.3g\n", name,
           bf16 ? "bf16" : "f32", N_FIRST, N_SECOND, N_DECODE, worst);
    free(lk), free(ld), free(ref);
    serve_model_set_timer(kept.m, NULL);
    runner_close(&kept);
    runner_close(&deq);
    serve_gguf_close(g);
}

static void test_kept_matches_dequantized(void **state) {
    (void)state;
    lazyattn_context *ctx = NULL;
    if (lazyattn_context_create(NULL, &ctx) != 0) skip();
    static const struct {
        const char *name;
        int kept;
    } files[] = {{"q8_0", 1}, {"q4_k_m", 1}, {"bf16", 0}};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        compare(ctx, files[f].name, SERVE_GEMM_F32, files[f].kept);
        if (files[f].kept) /* the control once: both loads are one path */
            compare(ctx, files[f].name, SERVE_GEMM_BF16, files[f].kept);
    }
    lazyattn_context_destroy(ctx);
}

/* q8_0.gguf with the f16 scale d of block 3 of blk.1.attn_v.weight set to
 * infinity (0x7C00) or NaN (0x7E00), in a copy under /tmp: refused by
 * name when kept quantized (and, as before, when dequantized: the
 * infinite one). */
static void test_bad_scale(void **state) {
    (void)state;
    lazyattn_context *ctx = NULL;
    if (lazyattn_context_create(NULL, &ctx) != 0) skip();
    char path[512], copy[] = "/tmp/lazyattn_test_serve_quant_XXXXXX";
    snprintf(path, sizeof path, "%s/q8_0.gguf", fixture_dir());
    serve_gguf *g = NULL;
    CHECK(serve_gguf_open(path, &g));
    const serve_gguf_tensor *t;
    CHECK(serve_gguf_find_tensor(g, "blk.1.attn_v.weight", &t));
    assert_int_equal(t->type, 8); /* Q8_0: 34-byte blocks, d first */
    uint64_t at = t->offset + 3 * 34;
    serve_gguf_close(g);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char *bytes = malloc(1 << 20);
    assert_non_null(bytes);
    size_t n = fread(bytes, 1, 1 << 20, f);
    fclose(f);
    assert_true(n > at + 2 && n < (1 << 20));
    static const struct {
        unsigned char hi;
        const char *needle;
    } cases[] = {{0x7C, "blk.1.attn_v.weight block 3: its d scale is infinite"},
                 {0x7E, "blk.1.attn_v.weight block 3: its d scale is NaN"}};
    for (int c = 0; c < 2; c++) {
        bytes[at] = 0x00, bytes[at + 1] = cases[c].hi;
        int fd = mkstemp(copy);
        assert_true(fd >= 0);
        f = fdopen(fd, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(bytes, 1, n, f), n);
        fclose(f);
        CHECK(serve_gguf_open(copy, &g));
        for (int dequantize = 0; dequantize < 2 - c; dequantize++) { /* NaN: kept only */
            serve_model_config cfg;
            serve_model_config_preset(&cfg, "tiny");
            CHECK(serve_gguf_model_config(g, &cfg));
            cfg.gemm = SERVE_GEMM_F32;
            cfg.dequantize_weights = dequantize;
            serve_model *m = NULL;
            CHECK(serve_model_create(ctx, &cfg, &m));
            int st = serve_model_load_gguf(m, g);
            const char *want = dequantize ? "blk.1.attn_v.weight element" : cases[c].needle;
            if (st != LAZYATTN_STATUS_FORMAT || !strstr(serve_last_error(), want))
                fail_msg("dequantize %d: status %d, \"%s\", want FORMAT naming \"%s\"",
                         dequantize, st, serve_last_error(), want);
            printf("# refused (dequantize_weights %d): %s\n", dequantize, serve_last_error());
            /* a forward after the failed load is refused, not run on freed weights */
            if (!dequantize) {
                lazyattn_pool_config pc;
                serve_model_pool_config(&cfg, 1 << 20, &pc);
                lazyattn_pool *pool = NULL;
                CHECK(lazyattn_pool_create(ctx, &pc, &pool));
                int32_t tok = 1, pos = 0, slot = 0, next = -1, offsets[2] = {0, 1};
                uint64_t entry;
                CHECK(lazyattn_entry_pack(0, 0, 1, &entry));
                serve_decode_args da = {1, &tok, &pos, &slot, &pos, offsets, &entry, &pos, 1,
                                        NULL};
                assert_int_equal(serve_model_decode(m, pool, &da, &next),
                                 LAZYATTN_STATUS_INVALID_ARGUMENT);
                assert_non_null(strstr(serve_last_error(), "load failed"));
                lazyattn_pool_destroy(pool);
            }
            serve_model_destroy(m);
        }
        serve_gguf_close(g);
        remove(copy);
        memcpy(copy + strlen(copy) - 6, "XXXXXX", 6);
    }
    free(bytes);
    lazyattn_context_destroy(ctx);
}

/* A second load into a model that kept weights quantized is refused (its
 * dense buffers are gone), and a bad dequantize_weights value too. */
static void test_refused(void **state) {
    (void)state;
    lazyattn_context *ctx = NULL;
    if (lazyattn_context_create(NULL, &ctx) != 0) skip();
    char path[512];
    snprintf(path, sizeof path, "%s/q8_0.gguf", fixture_dir());
    serve_gguf *g = NULL;
    CHECK(serve_gguf_open(path, &g));
    serve_model_config cfg;
    serve_model_config_preset(&cfg, "tiny");
    CHECK(serve_gguf_model_config(g, &cfg));
    cfg.dequantize_weights = 2;
    serve_model *m = NULL;
    assert_int_equal(serve_model_create(ctx, &cfg, &m), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "dequantize_weights 2"));
    assert_null(m);
    cfg.dequantize_weights = 0;
    CHECK(serve_model_create(ctx, &cfg, &m));
    CHECK(serve_model_load_gguf(m, g));
    assert_int_equal(serve_model_load_gguf(m, g), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "load into a new model"));
    assert_int_equal(serve_model_init_random(m, 1), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "use a new model"));
    serve_model_destroy(m);
    serve_gguf_close(g);
    lazyattn_context_destroy(ctx);
}

int main(void) {
    /* the exact GEMV for one row too (the int8 one is the NVIDIA default:
     * tests/test_gemv_quant.c and test_write_gguf.c bound it) */
    tune_env_set(getenv("LAZYATTN_TUNE"), "serve.gemv_q8=0");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_matches_dequantized),
        cmocka_unit_test(test_bad_scale),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
