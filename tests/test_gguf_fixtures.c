/* SPDX-License-Identifier: Apache-2.0 */
/* serve/ reads GGUF files the way llama.cpp's converter writes them, and
 * runs them right: small random-weight Llamas from Hugging Face
 * transformers, written with llama.cpp's gguf-py in the converter's layout
 * by tools/gguf_fixtures.py (run by hand; see there), with transformers'
 * float64 logits beside them (tests/fixtures/NAME.gguf, NAME.logits).
 *   llama3_rope_freqs  Llama-3 scaling as a rope_freqs.weight tensor, no keys
 *   linear             llama.rope.scaling.type = linear, factor 4
 *   no_scaling         plain RoPE
 *   head_dim           llama.attention.key_length 32 != hidden 32 / 2 heads
 *   tied               no output.weight (and rope_freqs)
 *   bf16               2-D weights BF16
 *   q8_0               2-D weights Q8_0 (and rope_freqs)
 *   q4_k_m             hidden 256 (whole K-quant super-blocks): Q4_K, Q5_K,
 *                      Q6_K, and Q4_0 / Q8_0 for the 32-value rows
 * (the quantized ones against transformers given the dequantized weights:
 * the reference is exact for the file; quantization itself moves the
 * logits from the float model's by 6e-3 (bf16) .. 0.19 (q4_k_m)). The
 * quantized ones run with their projections kept quantized on the device
 * (the default; tests/test_serve_quant.c compares that with dequantizing
 * at load). Each load's weights note is checked ("weights: kept quantized
 * on the device: Q8_0 ×15; dequantized at load to f32: Q8_0 ×1").
 * Each is loaded through serve_gguf_model_config / serve_model_load_gguf
 * and run on the default device (PoCL in CI), f32 projections and f32 K/V:
 * two 6-token sequences at increasing positions with gaps (from 0, and
 * from 9000, past Llama-3's 8192), each token its own KV block, the first
 * 3 tokens in one prefill and the rest decoded one by one; the logits of
 * the last prefill token and of every decode step match transformers'
 * within a normalised error of 1e-4 (f32 arithmetic against float64). The
 * scaled fixtures are also run with their scaling dropped, which must miss
 * by more than 1e-2: the comparison can fail. In bf16 projections (the
 * NVIDIA default) the same runs are within 5e-2 (bf16 rounding of the
 * weights and GEMM inputs). Then the refusals: yarn, an unknown scaling
 * type, llama.vocab_size disagreeing with the embedding, a zero rope_freqs
 * divisor, an unimplemented tensor (a Q bias), each FORMAT with a message
 * naming the key or tensor. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "serve.h"
#include "serve_check.h"
#include "serve_tune_env.h"

enum { MAX_TOKENS = 8, MAX_SEQS = 2 };

typedef struct expected {
    int n_seqs;
    int n_tokens[MAX_SEQS], vocab[MAX_SEQS];
    int32_t pos[MAX_SEQS][MAX_TOKENS], tokens[MAX_SEQS][MAX_TOKENS];
    double *logits[MAX_SEQS]; /* [n_tokens][vocab] */
} expected;

static const char *fixture_dir(void) {
    const char *d = getenv("LAZYATTN_FIXTURES");
    return d && *d ? d : "tests/fixtures";
}

static void fixture_path(char *out, size_t n, const char *name, const char *ext) {
    snprintf(out, n, "%s/%s.%s", fixture_dir(), name, ext);
}

static uint32_t rd_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads NAME.logits (format in tools/gguf_fixtures.py); fails the test on
 * a missing or malformed file. */
static void read_expected(const char *name, expected *e) {
    char path[512];
    fixture_path(path, sizeof path, name, "logits");
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (LAZYATTN_FIXTURES names the directory)", path);
    unsigned char h[12];
    memset(e, 0, sizeof *e);
    if (fread(h, 1, 12, f) != 12 || memcmp(h, "LZLOGIT1", 8) != 0) fail_msg("%s: bad header", path);
    e->n_seqs = (int)rd_u32(h + 8);
    assert_true(e->n_seqs >= 1 && e->n_seqs <= MAX_SEQS);
    for (int s = 0; s < e->n_seqs; s++) {
        unsigned char b[8];
        assert_int_equal(fread(b, 1, 8, f), 8);
        e->n_tokens[s] = (int)rd_u32(b), e->vocab[s] = (int)rd_u32(b + 4);
        int n = e->n_tokens[s];
        assert_true(n >= 4 && n <= MAX_TOKENS && e->vocab[s] >= 2 && e->vocab[s] <= 4096);
        assert_int_equal(fread(e->pos[s], 4, (size_t)n, f), (size_t)n); /* little-endian host */
        assert_int_equal(fread(e->tokens[s], 4, (size_t)n, f), (size_t)n);
        size_t k = (size_t)n * (size_t)e->vocab[s];
        e->logits[s] = malloc(k * sizeof(double));
        assert_non_null(e->logits[s]);
        assert_int_equal(fread(e->logits[s], sizeof(double), k, f), k);
    }
    fclose(f);
}

static void free_expected(expected *e) {
    for (int s = 0; s < e->n_seqs; s++) free(e->logits[s]);
}

typedef enum drop { DROP_NOTHING = 0, DROP_SCALING = 1 } drop;

/* Opens fixture name, reads its config (checked by check, may be NULL),
 * runs every sequence and returns the largest normalised error of the
 * compared rows. drop: run with the file's RoPE scaling removed. */
static double run_fixture(lazyattn_context *ctx, const char *name, drop what,
                          serve_gemm_mode gemm, void (*check)(const serve_model_config *),
                          const char *types) {
    char path[512];
    fixture_path(path, sizeof path, name, "gguf");
    expected e;
    read_expected(name, &e);
    serve_gguf *g = NULL;
    CHECK(serve_gguf_open(path, &g));
    serve_model_config cfg;
    serve_model_config_preset(&cfg, "tiny"); /* block size, max rows */
    CHECK(serve_gguf_model_config(g, &cfg));
    if (check) check(&cfg);
    cfg.kv_dtype = LAZYATTN_DTYPE_F32; /* compare without fp16 K/V rounding */
    cfg.gemm = gemm;
    if (what == DROP_SCALING) {
        cfg.rope.n_freq_factors = 0;
        cfg.rope.linear_factor = 0.0;
        cfg.rope.llama3_factor = 0.0;
    }
    serve_model *m = NULL;
    CHECK(serve_model_create(ctx, &cfg, &m));
    CHECK(serve_model_load_gguf(m, g));
    if (types) { /* the load says what the file held and what the GEMMs read */
        char want[256];
        snprintf(want, sizeof want, types, serve_model_uses_bf16(m) ? "bf16" : "f32");
        if (strcmp(serve_model_weights_note(m), want) != 0)
            fail_msg("%s: \"%s\", want \"%s\"", name, serve_model_weights_note(m), want);
        printf("# %-18s %s\n", name, want);
    }
    lazyattn_pool_config pc;
    serve_model_pool_config(&cfg, 1 << 20, &pc);
    lazyattn_pool *pool = NULL;
    CHECK(lazyattn_pool_create(ctx, &pc, &pool));

    double worst = 0.0;
    int V = cfg.vocab;
    float *logits = malloc((size_t)V * sizeof *logits);
    assert_non_null(logits);
    for (int s = 0; s < e.n_seqs; s++) {
        assert_int_equal(e.vocab[s], V);
        int n = e.n_tokens[s], n_pre = n / 2;
        int32_t blocks[MAX_TOKENS], slots[MAX_TOKENS];
        uint64_t table[MAX_TOKENS];
        CHECK(lazyattn_pool_alloc(pool, n, blocks));
        for (int t = 0; t < n; t++) { /* token t alone in block t, at its own position */
            slots[t] = blocks[t] * cfg.block_size;
            CHECK(lazyattn_entry_pack(blocks[t], 0, 1, &table[t]));
        }
        serve_prefill_args pa = {.n_tokens = n_pre, .tokens = e.tokens[s], .q_pos = e.pos[s],
                                 .slots = slots, .stored_pos = e.pos[s], .n_entries = n_pre,
                                 .table = table, .entry_pos = e.pos[s], .want_logits = 1};
        int32_t next = -1;
        CHECK(serve_model_prefill(m, pool, &pa, &next));
        for (int t = n_pre - 1; t < n; t++) {
            if (t >= n_pre) { /* decode token t over entries 0..t */
                int32_t offsets[2] = {0, t + 1};
                serve_decode_args da = {1, &e.tokens[s][t], &e.pos[s][t], &slots[t],
                                        &e.pos[s][t], offsets, table, e.pos[s], t + 1, NULL};
                CHECK(serve_model_decode(m, pool, &da, &next));
            }
            CHECK(serve_model_read_logits(m, 1, logits));
            double err = lazyattn_normalised_error(logits, e.logits[s] + (size_t)t * V, (size_t)V);
            if (!(err <= worst)) worst = err; /* NaN sticks */
        }
        CHECK(lazyattn_pool_free(pool, n, blocks));
    }
    free(logits);
    lazyattn_pool_destroy(pool);
    serve_model_destroy(m);
    serve_gguf_close(g);
    free_expected(&e);
    return worst;
}

static void check_llama3(const serve_model_config *c) {
    assert_int_equal(c->rope.n_freq_factors, c->head_dim / 2);
    assert_true(c->rope.llama3_factor == 0.0 && c->rope.linear_factor == 0.0);
    assert_true(c->rope.freq_factors[0] == 1.0f);                     /* short: kept */
    assert_true(c->rope.freq_factors[c->head_dim / 2 - 1] == 8.0f);   /* long: / 8 */
    assert_true(c->rope.theta == 500000.0);
}
static void check_linear(const serve_model_config *c) {
    assert_true(c->rope.linear_factor == 4.0);
    assert_true(c->rope.llama3_factor == 0.0 && c->rope.n_freq_factors == 0);
}
static void check_plain(const serve_model_config *c) {
    assert_true(c->rope.linear_factor == 0.0 && c->rope.llama3_factor == 0.0 &&
                c->rope.n_freq_factors == 0);
    assert_int_equal(c->tied_embeddings, 0);
}
static void check_head_dim(const serve_model_config *c) {
    check_plain(c);
    assert_int_equal(c->head_dim, 32);
    assert_int_equal(c->hidden, 32);
    assert_int_equal(c->n_heads, 2);
}
static void check_tied(const serve_model_config *c) {
    assert_int_equal(c->tied_embeddings, 1);
    assert_int_equal(c->rope.n_freq_factors, c->head_dim / 2);
}

static void check_q4_k_m(const serve_model_config *c) {
    check_plain(c);
    assert_int_equal(c->hidden, 256); /* rows of whole 256-value super-blocks */
    assert_int_equal(c->head_dim, 16);
    assert_int_equal(c->ffn, 32);
}

static void test_fixtures_match(void **state) {
    (void)state;
    lazyattn_context *ctx = NULL;
    if (lazyattn_context_create(NULL, &ctx) != 0) skip();
    /* the exact one-row GEMV: the int8 one is measured last */
    const char *tune = getenv("LAZYATTN_TUNE");
    char *orig = tune ? strdup(tune) : NULL;
    assert_true(!tune || orig);
    tune_env_set(orig, "serve.gemv_q8=0");
    static const struct {
        const char *name;
        void (*check)(const serve_model_config *);
        int scaled;
        /* the weights note (%s: the mode): the matrices' types, kept
         * quantized on the device or converted / dequantized at load */
        const char *types;
    } cases[] = {{"llama3_rope_freqs", check_llama3, 1, "weights: F16 converted at load to %s"},
                 {"linear", check_linear, 1, "weights: F16 converted at load to %s"},
                 {"no_scaling", check_plain, 0, "weights: F16 converted at load to %s"},
                 {"head_dim", check_head_dim, 0, "weights: F16 converted at load to %s"},
                 {"tied", check_tied, 1, "weights: F16 converted at load to %s"},
                 {"bf16", check_plain, 0, "weights: BF16 converted at load to %s"},
                 {"q8_0", check_llama3, 1,
                  "weights: kept quantized on the device: Q8_0 ×15; dequantized at load to %s: "
                  "Q8_0 ×1"},
                 {"q4_k_m", check_q4_k_m, 0,
                  "weights: kept quantized on the device: Q4_0 ×1, Q8_0 ×1, Q4_K ×3, Q5_K ×1, "
                  "Q6_K ×2; dequantized at load to %s: Q4_K ×1"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double err = run_fixture(ctx, cases[i].name, DROP_NOTHING, SERVE_GEMM_F32, cases[i].check,
                                 cases[i].types);
        printf("# %-18s normalised error vs transformers float64: %.3g\n", cases[i].name, err);
        if (!(err <= 1e-4)) fail_msg("%s: normalised error %g > 1e-4", cases[i].name, err);
        if (cases[i].scaled) {
            double off = run_fixture(ctx, cases[i].name, DROP_SCALING, SERVE_GEMM_F32, NULL, NULL);
            printf("# %-18s the same without its RoPE scaling: %.3g\n", cases[i].name, off);
            if (!(off > 1e-2))
                fail_msg("%s: dropping the scaling changes the logits by only %g", cases[i].name,
                         off);
        }
        /* bf16 projections (the default on NVIDIA; the portable kernel here):
         * weights and GEMM inputs rounded to bf16 (8 bits of mantissa) cost
         * 1.0e-2 .. 2.3e-2 on these fixtures; a misread file costs > 0.5 */
        double bf = run_fixture(ctx, cases[i].name, DROP_NOTHING, SERVE_GEMM_BF16, NULL,
                                cases[i].types);
        printf("# %-18s bf16 projections: %.3g\n", cases[i].name, bf);
        if (!(bf <= 5e-2)) fail_msg("%s: bf16 normalised error %g > 5e-2", cases[i].name, bf);
    }
    /* the int8 GEMV for the decode steps (serve.gemv_q8=1, the NVIDIA
     * default): the activations rounded to 8 bits a value, a scale every
     * 32, where the file's K-quant weights are read (measured 1.9e-2 on
     * PoCL; a misread file costs > 0.5) */
    tune_env_set(orig, "serve.gemv_q8=1");
    double q8 = run_fixture(ctx, "q4_k_m", DROP_NOTHING, SERVE_GEMM_F32, check_q4_k_m,
                            cases[sizeof cases / sizeof cases[0] - 1].types);
    printf("# %-18s int8 GEMV: %.3g\n", "q4_k_m", q8);
    if (!(q8 <= 5e-2)) fail_msg("q4_k_m: int8 GEMV normalised error %g > 5e-2", q8);
    tune_env_restore(orig);
    free(orig);
    lazyattn_context_destroy(ctx);
}

/* Files the converter could write that this engine does not run: refused
 * when the config is read, naming the key. */
static void test_fixtures_refused(void **state) {
    (void)state;
    static const struct {
        const char *name, *needle;
    } cases[] = {{"refuse_yarn", "llama.rope.scaling.type = \"yarn\""},
                 {"refuse_unknown_scaling", "llama.rope.scaling.type = \"dynamic\""},
                 {"refuse_vocab", "llama.vocab_size = 9"},
                 {"refuse_rope_freqs", "rope_freqs.weight[4] = 0"},
                 {"refuse_bias", "tensor blk.0.attn_q.bias is not supported"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512];
        fixture_path(path, sizeof path, cases[i].name, "gguf");
        serve_gguf *g = NULL;
        CHECK(serve_gguf_open(path, &g));
        serve_model_config cfg;
        serve_model_config_preset(&cfg, "tiny");
        int st = serve_gguf_model_config(g, &cfg);
        serve_gguf_close(g);
        if (st != LAZYATTN_STATUS_FORMAT || !strstr(serve_last_error(), cases[i].needle))
            fail_msg("%s: status %d, message \"%s\", want FORMAT naming %s", cases[i].name, st,
                     serve_last_error(), cases[i].needle);
        printf("# %s refused: %s\n", cases[i].name, serve_last_error());
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures_refused),
        cmocka_unit_test(test_fixtures_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
