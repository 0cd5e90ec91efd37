/* SPDX-License-Identifier: Apache-2.0 */
/* serve/quant.c, the GGUF weight types, against an implementation nobody
 * here wrote: llama.cpp's gguf-py (gguf.quants.dequantize). The fixture
 * tests/fixtures/quant_blocks.bin (written by tools/gguf_fixtures.py, run
 * by hand) holds random blocks of F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and
 * Q6_K (scales finite) and gguf-py's f32 values for them. Both sides do
 * the same f32 arithmetic (one rounding per product), so the bound is
 * bit-exact: every value's bits equal. Then the refusals: a truncated or
 * over-long buffer, a row that is not whole blocks, a type this reader
 * does not convert (named: "Q2_K"), each FORMAT naming the tensor, never
 * a read past the buffer (each buffer exactly sized on the heap, so ASan
 * sees an over-read); and the same through serve_gguf_open: a file with a
 * Q2_K tensor and a Q4_K_M file cut short. No device needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "quant.h"
#include "serve.h"

enum { MAX_CASES = 16 };

typedef struct quant_case {
    uint32_t type, n_values, n_bytes;
    unsigned char *bytes; /* [n_bytes] */
    float *values;        /* [n_values], gguf-py's */
} quant_case;

static const char *fixture_dir(void) {
    const char *d = getenv("LAZYATTN_FIXTURES");
    return d && *d ? d : "tests/fixtures";
}

static uint32_t rd_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads quant_blocks.bin (format in tools/gguf_fixtures.py); fails the
 * test on a missing or malformed file. Returns the number of cases. */
static int read_cases(quant_case *cases) {
    char path[512];
    snprintf(path, sizeof path, "%s/quant_blocks.bin", fixture_dir());
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (LAZYATTN_FIXTURES names the directory)", path);
    unsigned char h[12];
    if (fread(h, 1, 12, f) != 12 || memcmp(h, "LZQUANT1", 8) != 0) fail_msg("%s: bad header", path);
    int n = (int)rd_u32(h + 8);
    assert_true(n >= 1 && n <= MAX_CASES);
    for (int i = 0; i < n; i++) {
        quant_case *c = &cases[i];
        assert_int_equal(fread(h, 1, 12, f), 12);
        c->type = rd_u32(h), c->n_values = rd_u32(h + 4), c->n_bytes = rd_u32(h + 8);
        assert_true(c->n_values >= 1 && c->n_values <= 65536 && c->n_bytes <= 4 * 65536);
        c->bytes = malloc(c->n_bytes);
        c->values = malloc((size_t)c->n_values * sizeof(float));
        assert_true(c->bytes && c->values);
        assert_int_equal(fread(c->bytes, 1, c->n_bytes, f), c->n_bytes);
        assert_int_equal(fread(c->values, 4, c->n_values, f), c->n_values); /* little-endian */
    }
    fclose(f);
    return n;
}

static void free_cases(quant_case *cases, int n) {
    for (int i = 0; i < n; i++) free(cases[i].bytes), free(cases[i].values);
}

static void test_matches_gguf_py(void **state) {
    (void)state;
    quant_case cases[MAX_CASES];
    int n = read_cases(cases);
    static const uint32_t want[] = {SERVE_GGML_F16,  SERVE_GGML_BF16, SERVE_GGML_Q8_0,
                                    SERVE_GGML_Q4_0, SERVE_GGML_Q4_K, SERVE_GGML_Q5_K,
                                    SERVE_GGML_Q6_K};
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        int found = 0;
        for (int i = 0; i < n; i++) found |= cases[i].type == want[w];
        if (!found) fail_msg("quant_blocks.bin has no %s case", serve_ggml_type_name(want[w]));
    }
    for (int i = 0; i < n; i++) {
        const quant_case *c = &cases[i];
        uint64_t bytes;
        assert_int_equal(serve_ggml_row_bytes(c->type, c->n_values, "t", &bytes), 0);
        assert_int_equal(bytes, c->n_bytes);
        float *got = malloc((size_t)c->n_values * sizeof *got);
        assert_non_null(got);
        int st = serve_dequantize(c->type, c->bytes, c->n_bytes, got, c->n_values, "t");
        if (st) fail_msg("%s: %s", serve_ggml_type_name(c->type), serve_last_error());
        int distinct = 0;
        for (uint32_t k = 0; k < c->n_values; k++) {
            uint32_t a, b;
            memcpy(&a, &got[k], 4);
            memcpy(&b, &c->values[k], 4);
            if (a != b)
                fail_msg("%s value %u: %.9g (bits %08x), gguf-py %.9g (bits %08x)",
                         serve_ggml_type_name(c->type), (unsigned)k, (double)got[k], a,
                         (double)c->values[k], b);
            distinct += k > 0 && c->values[k] != c->values[k - 1];
        }
        /* random blocks: the values vary (a comparison of zeros could not fail) */
        assert_true(distinct > (int)c->n_values / 4);
        printf("# %-5s %4u values from %5u bytes: bit-exact with gguf-py\n",
               serve_ggml_type_name(c->type), (unsigned)c->n_values, (unsigned)c->n_bytes);
        free(got);
    }
    free_cases(cases, n);
}

static void expect_format(int st, const char *needle1, const char *needle2) {
    const char *msg = serve_last_error();
    if (st != LAZYATTN_STATUS_FORMAT || !strstr(msg, needle1) || (needle2 && !strstr(msg, needle2)))
        fail_msg("status %d, message \"%s\", want FORMAT naming \"%s\"%s%s", st, msg, needle1,
                 needle2 ? " and " : "", needle2 ? needle2 : "");
}

/* Short and long buffers, partial blocks: FORMAT naming the tensor, and
 * nothing read past the buffer (exactly sized heap copies, under ASan). */
static void test_sizes_refused(void **state) {
    (void)state;
    quant_case cases[MAX_CASES];
    int n = read_cases(cases);
    for (int i = 0; i < n; i++) {
        const quant_case *c = &cases[i];
        const char *type = serve_ggml_type_name(c->type);
        float *out = malloc((size_t)c->n_values * sizeof *out);
        unsigned char *shorter = malloc(c->n_bytes - 1);
        assert_true(out && shorter);
        memcpy(shorter, c->bytes, c->n_bytes - 1);
        expect_format(serve_dequantize(c->type, shorter, c->n_bytes - 1, out, c->n_values,
                                       "blk.0.attn_q.weight"),
                      "blk.0.attn_q.weight", "truncated");
        expect_format(serve_dequantize(c->type, c->bytes, c->n_bytes, out, c->n_values - 1,
                                       "blk.3.ffn_up.weight"),
                      "blk.3.ffn_up.weight", type);
        free(shorter);
        free(out);
    }
    /* a row of 100 values is no whole number of Q4_K super-blocks */
    expect_format(serve_ggml_row_bytes(SERVE_GGML_Q4_K, 100, "token_embd.weight", NULL),
                  "token_embd.weight", "Q4_K blocks (256 values each)");
    free_cases(cases, n);
}

/* Types this reader does not convert, refused by name */
static void test_unknown_types_refused(void **state) {
    (void)state;
    unsigned char block[256] = {0};
    float out[256];
    static const struct {
        uint32_t type;
        const char *name;
    } cases[] = {{SERVE_GGML_Q2_K, "Q2_K"}, {3, "Q4_1"}, {11, "Q3_K"}, {15, "Q8_K"},
                 {20, "IQ4_NL"}, {28, "F64"}, {999, "unknown"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "type %s (%u) not supported", cases[i].name,
                 (unsigned)cases[i].type);
        assert_false(serve_ggml_type_supported(cases[i].type));
        expect_format(serve_dequantize(cases[i].type, block, 84, out, 256, "output.weight"),
                      "output.weight", needle);
        expect_format(serve_ggml_row_bytes(cases[i].type, 256, "x.weight", NULL), "x.weight",
                      needle);
    }
}

/* The same through a file: serve_gguf_open refuses a Q2_K tensor by name,
 * and a Q4_K_M file cut short inside its last tensor. */
static void test_files_refused(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/refuse_q2_k.gguf", fixture_dir());
    serve_gguf *g = NULL;
    expect_format(serve_gguf_open(path, &g), "blk.0.ffn_gate_q2k.weight",
                  "type Q2_K (10) not supported");
    assert_null(g);
    printf("# refuse_q2_k refused: %s\n", serve_last_error());

    snprintf(path, sizeof path, "%s/q4_k_m.gguf", fixture_dir());
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char *data = malloc(1 << 20);
    assert_non_null(data);
    size_t size = fread(data, 1, 1 << 20, f);
    fclose(f);
    assert_true(size > 4096 && size < (1 << 20));
    /* the complete file opens and every tensor reads */
    assert_int_equal(serve_gguf_open(path, &g), 0);
    serve_gguf_close(g);
    char cut[64];
    snprintf(cut, sizeof cut, "/tmp/test_quant_%d.gguf", (int)getpid());
    f = fopen(cut, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, size - 100, f), size - 100);
    fclose(f);
    g = NULL;
    int st = serve_gguf_open(cut, &g);
    remove(cut);
    expect_format(st, "truncated file: tensor", "ends past the end of the file");
    assert_null(g);
    printf("# q4_k_m.gguf cut short refused: %s\n", serve_last_error());
    free(data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_gguf_py),
        cmocka_unit_test(test_sizes_refused),
        cmocka_unit_test(test_unknown_types_refused),
        cmocka_unit_test(test_files_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
