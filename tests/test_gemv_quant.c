/* SPDX-License-Identifier: Apache-2.0 */
/* serve/gemv_quant.cl: y = W x with W kept quantized (Q8_0, Q4_K, Q6_K) on
 * the default device (PoCL in CI), against a float64 product with the
 * dequantized weight (serve/quant.c, itself bit-exact with gguf-py: see
 * test_quant). Random blocks (f16 scales 2^-7 .. 1, every other byte
 * random), rows of 256 or 512 values (fewer sub-blocks than work-items) and of
 * 8192 (a strided loop). Bound: normalised error (max |a - b| / max |b|)
 * 1e-5, f32 accumulation of up to 8192 terms; a weight read with one
 * scale of each row lost misses by far more (checked, so the comparison
 * can fail). Then the refusals: another type (UNSUPPORTED,
 * named), a row that is not whole blocks, buffers too small. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gemv_quant.h"
#include "quant.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

/* an f16 of magnitude 2^-7 .. 1, random sign */
static void put_scale(unsigned char *p) {
    uint16_t h = (uint16_t)((rnd() & 1u) << 15 | (8u + rnd() % 7u) << 10 | (rnd() & 0x3FFu));
    p[0] = (unsigned char)h, p[1] = (unsigned char)(h >> 8);
}

/* n_out rows of random blocks of type */
static unsigned char *random_weight(uint32_t type, int n_out, int n_in, uint64_t *bytes) {
    uint64_t row;
    assert_int_equal(serve_ggml_row_bytes(type, (uint64_t)n_in, "W", &row), 0);
    *bytes = row * (uint64_t)n_out;
    unsigned char *w = malloc((size_t)*bytes);
    assert_non_null(w);
    for (uint64_t i = 0; i < *bytes; i++) w[i] = (unsigned char)rnd();
    uint64_t block = type == SERVE_GGML_Q8_0 ? 34 : type == SERVE_GGML_Q4_K ? 144 : 210;
    for (uint64_t b = 0; b < *bytes; b += block) {
        put_scale(w + b + (type == SERVE_GGML_Q6_K ? 208 : 0)); /* Q6_K: d last */
        if (type == SERVE_GGML_Q4_K) put_scale(w + b + 2);
    }
    return w;
}

/* y = W x in float64 from the dequantized rows; zero_first_scale: with
 * the first f16 scale of each row's first block read as 0 */
static void reference(uint32_t type, const unsigned char *w, uint64_t bytes, int n_out, int n_in,
                      const float *x, double *y, int zero_first_scale) {
    float *row = malloc((size_t)n_in * sizeof *row);
    unsigned char *copy = malloc((size_t)bytes);
    assert_true(row && copy);
    memcpy(copy, w, (size_t)bytes);
    uint64_t row_bytes = bytes / (uint64_t)n_out;
    uint64_t at = type == SERVE_GGML_Q6_K ? 208 : 0; /* the first block's f16 d */
    for (int o = 0; zero_first_scale && o < n_out; o++)
        copy[(uint64_t)o * row_bytes + at] = copy[(uint64_t)o * row_bytes + at + 1] = 0;
    for (int o = 0; o < n_out; o++) {
        assert_int_equal(serve_dequantize(type, copy + (uint64_t)o * row_bytes, row_bytes, row,
                                          (uint64_t)n_in, "W"), 0);
        double s = 0.0;
        for (int i = 0; i < n_in; i++) s += (double)row[i] * (double)x[i];
        y[o] = s;
    }
    free(copy);
    free(row);
}

static double norm_err(const float *a, const double *b, int n) {
    double num = 0.0, den = 0.0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= num)) num = d; /* NaN sticks */
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return num / den;
}

typedef struct device {
    lazyattn_context *ctx;
    cl_command_queue queue;
    serve_gemv_quant *g;
} device;

static int setup(void **state) {
    device *d = calloc(1, sizeof *d);
    if (!d) return -1;
    *state = d;
    if (lazyattn_context_create(NULL, &d->ctx) != 0) return 0; /* the cases skip */
    d->queue = lazyattn_context_queue(d->ctx);
    if (serve_gemv_quant_create(d->ctx, &d->g) != 0) {
        fprintf(stderr, "serve_gemv_quant_create: %s\n", serve_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    device *d = *state;
    serve_gemv_quant_destroy(d->g);
    lazyattn_context_destroy(d->ctx);
    free(d);
    return 0;
}

static cl_mem buffer(device *d, size_t bytes, const void *host) {
    cl_int err;
    cl_mem b = clCreateBuffer(lazyattn_context_cl_context(d->ctx),
                              CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)host, &err);
    assert_int_equal(err, CL_SUCCESS);
    return b;
}

static void test_matches_dequantized(void **state) {
    device *d = *state;
    if (!d->ctx) skip();
    static const struct {
        uint32_t type;
        int n_out, n_in;
    } cases[] = {{SERVE_GGML_Q8_0, 33, 256}, {SERVE_GGML_Q8_0, 17, 8192},
                 {SERVE_GGML_Q4_K, 33, 256}, {SERVE_GGML_Q4_K, 17, 8192},
                 {SERVE_GGML_Q6_K, 33, 512}, {SERVE_GGML_Q6_K, 17, 8192}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint32_t type = cases[c].type;
        int n_out = cases[c].n_out, n_in = cases[c].n_in;
        uint64_t bytes;
        unsigned char *w = random_weight(type, n_out, n_in, &bytes);
        float *x = malloc((size_t)n_in * sizeof *x), *y = malloc((size_t)n_out * sizeof *y);
        double *want = malloc((size_t)n_out * sizeof *want), *wrong = malloc((size_t)n_out * 8);
        assert_true(x && y && want && wrong);
        for (int i = 0; i < n_in; i++) x[i] = (float)rnd() / 4294967296.0f * 2.0f - 1.0f;
        reference(type, w, bytes, n_out, n_in, x, want, 0);
        reference(type, w, bytes, n_out, n_in, x, wrong, 1);
        cl_mem wb = buffer(d, (size_t)bytes, w), xb = buffer(d, (size_t)n_in * 4, x),
               yb = buffer(d, (size_t)n_out * 4, NULL);
        int st = serve_gemv_quant_run(d->g, d->queue, type, wb, xb, yb, n_out, n_in, NULL);
        if (st) fail_msg("%s: %s", serve_ggml_type_name(type), serve_last_error());
        assert_int_equal(clEnqueueReadBuffer(d->queue, yb, CL_TRUE, 0, (size_t)n_out * 4, y, 0,
                                             NULL, NULL), CL_SUCCESS);
        double err = norm_err(y, want, n_out), off = norm_err(y, wrong, n_out);
        printf("# %s [%d, %d] (%llu bytes): normalised error %.3g; against a scale lost "
               "per row %.3g\n", serve_ggml_type_name(type), n_out, n_in,
               (unsigned long long)bytes, err, off);
        if (!(err <= 1e-5)) fail_msg("%s: normalised error %g > 1e-5", serve_ggml_type_name(type),
                                     err);
        if (!(off > 1e-2)) fail_msg("%s: the comparison cannot tell a lost scale (%g)",
                                    serve_ggml_type_name(type), off);
        clReleaseMemObject(wb), clReleaseMemObject(xb), clReleaseMemObject(yb);
        free(w), free(x), free(y), free(want), free(wrong);
    }
}

static void test_refused(void **state) {
    device *d = *state;
    if (!d->ctx) skip();
    cl_mem w = buffer(d, 144 * 4, NULL), x = buffer(d, 1024, NULL), y = buffer(d, 64, NULL);
    int st = serve_gemv_quant_run(d->g, d->queue, SERVE_GGML_Q5_K, w, x, y, 2, 256, NULL);
    assert_int_equal(st, LAZYATTN_STATUS_UNSUPPORTED);
    assert_non_null(strstr(serve_last_error(), "Q5_K weights"));
    st = serve_gemv_quant_run(d->g, d->queue, SERVE_GGML_Q4_K, w, x, y, 2, 100, NULL);
    assert_int_equal(st, LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "multiple of the Q4_K block"));
    /* 5 rows of one Q4_K block need 720 bytes, W holds 576 */
    st = serve_gemv_quant_run(d->g, d->queue, SERVE_GGML_Q4_K, w, x, y, 5, 256, NULL);
    assert_int_equal(st, LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "needs W 720"));
    /* x holds 256 floats, 512 asked */
    st = serve_gemv_quant_run(d->g, d->queue, SERVE_GGML_Q8_0, w, x, y, 2, 512, NULL);
    assert_int_equal(st, LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(serve_gemv_quant_run(NULL, d->queue, SERVE_GGML_Q8_0, w, x, y, 1, 32, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    clReleaseMemObject(w), clReleaseMemObject(x), clReleaseMemObject(y);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_dequantized),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
