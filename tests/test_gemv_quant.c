/* SPDX-License-Identifier: Apache-2.0 */
/* serve/gemv_quant.cl: the kernels that read weights kept quantized on the
 * device (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K), on the default device (PoCL in
 * CI).
 * GEMV: Y[rows, out] (+)= X[rows, in] . W^T at 1, 3 and 8 rows
 * (SERVE_QUANT_GEMV_MAX_ROWS), X in f32 and in bf16, W in 1, 2 or 3
 * column ranges (a fused group's weights, one launch), written and
 * accumulated into a Y with a row offset and a row stride wider than out,
 * against a float64 product with the weight dequantized on the host
 * (serve/quant.c, itself bit-exact with gguf-py: see test_quant) and the
 * same X values. Random blocks (f16 scales 2^-7 .. 1, every other byte
 * random), rows of 256 or 512 values (fewer chunks than work-items) and of
 * 8192 (a strided loop). Bound: normalised error (max |a - b| / max |b|)
 * 1e-5, f32 accumulation of up to 8192 terms; a weight read with one
 * scale of each row lost misses by over 100 times that (checked, so the
 * comparison can fail), and the Y values outside the written rows and columns stay
 * as they were.
 * Dequantizer: f32 [out, in], f32 [in, out] and bf16 [out, in] equal to
 * serve_dequantize (then serve_bf16_of) bit for bit.
 * The int8 one-row GEMV (serve_gemv_quant_set_q8, K-quants): against its
 * definition and within its quantization bound (its section below), a NaN
 * kept. Then the refusals: another type (UNSUPPORTED, named), a row that is
 * not whole blocks, too many rows or ranges, ldy < cols, buffers too small. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gemm_bf16.h" /* serve_bf16_of */
#include "gemv_quant.h"
#include "projection.h"
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

/* values of one block */
static uint64_t type_block(uint32_t type) {
    return type == SERVE_GGML_Q8_0 || type == SERVE_GGML_Q4_0 ? 32 : 256;
}

/* n_out rows of random blocks of type */
static unsigned char *random_weight(uint32_t type, int n_out, int n_in, uint64_t *bytes) {
    uint64_t row;
    assert_int_equal(serve_ggml_row_bytes(type, (uint64_t)n_in, "W", &row), 0);
    *bytes = row * (uint64_t)n_out;
    unsigned char *w = malloc((size_t)*bytes);
    assert_non_null(w);
    for (uint64_t i = 0; i < *bytes; i++) w[i] = (unsigned char)rnd();
    uint64_t block;
    assert_int_equal(serve_ggml_row_bytes(type, type_block(type), "W", &block), 0);
    for (uint64_t b = 0; b < *bytes; b += block) {
        put_scale(w + b + (type == SERVE_GGML_Q6_K ? 208 : 0)); /* Q6_K: d last */
        if (type == SERVE_GGML_Q4_K || type == SERVE_GGML_Q5_K) put_scale(w + b + 2); /* dmin */
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
    serve_gemv_quant_set_q8(d->g, 0); /* the exact kernels; the int8 cases turn it on */
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

static const uint32_t types[] = {SERVE_GGML_Q8_0, SERVE_GGML_Q4_0, SERVE_GGML_Q4_K,
                                 SERVE_GGML_Q5_K, SERVE_GGML_Q6_K};
enum { N_TYPES = sizeof types / sizeof types[0] };

static float frand(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }

/* One GEMV case: rows x [n_out, n_in] of type, X f32 or bf16, written or
 * accumulated into Y at row offset y_row0 with row stride n_out + 3; the
 * weight's rows in n_ranges column ranges (a fused group: one buffer
 * each, their Y columns side by side), one launch. */
static void gemv_case(device *d, uint32_t type, int n_out, int n_in, int rows, int x_bf16,
                      int accumulate, int n_ranges) {
    uint64_t bytes;
    unsigned char *w = random_weight(type, n_out, n_in, &bytes);
    const int ldy = n_out + 3, y_row0 = 1, x_row0 = 2;
    const size_t n_x = (size_t)(x_row0 + rows) * (size_t)n_in;
    const size_t n_y = (size_t)(y_row0 + rows + 1) * (size_t)ldy;
    float *xf = malloc(n_x * sizeof *xf), *y0 = malloc(n_y * sizeof *y0),
          *y = malloc(n_y * sizeof *y);
    uint16_t *xb = malloc(n_x * sizeof *xb);
    double *want = malloc((size_t)n_out * sizeof *want), *wrong = malloc((size_t)n_out * 8);
    float *got = malloc((size_t)n_out * sizeof *got);
    assert_true(xf && y0 && y && xb && want && wrong && got);
    for (size_t i = 0; i < n_x; i++) {
        xf[i] = frand();
        xb[i] = serve_bf16_of(xf[i]);
        if (x_bf16) xf[i] = serve_float_of_bf16(xb[i]); /* the values the kernel reads */
    }
    for (size_t i = 0; i < n_y; i++) y0[i] = frand();
    cl_mem xbuf = x_bf16 ? buffer(d, n_x * 2, xb) : buffer(d, n_x * 4, xf);
    cl_mem yb = buffer(d, n_y * 4, y0);
    serve_gemv_args a = {.type = type, .rows = rows, .in = n_in, .x = xbuf,
                         .x_off = (size_t)x_row0 * (size_t)n_in, .x_bf16 = x_bf16,
                         .n_outs = n_ranges, .accumulate = accumulate};
    cl_mem wb[SERVE_GEMV_MAX_OUTS];
    const size_t row_bytes = (size_t)bytes / (size_t)n_out;
    for (int k = 0, col0 = 0; k < n_ranges; k++) { /* ranges of n_out / n_ranges, the rest last */
        int cols = k < n_ranges - 1 ? n_out / n_ranges : n_out - col0;
        wb[k] = buffer(d, (size_t)cols * row_bytes, w + (size_t)col0 * row_bytes);
        a.outs[k] = (serve_gemv_out){wb[k], yb, (size_t)y_row0 * (size_t)ldy + (size_t)col0, cols,
                                     ldy};
        col0 += cols;
    }
    int st = serve_gemv_quant_run(d->g, d->queue, &a, NULL);
    if (st) fail_msg("%s: %s", serve_ggml_type_name(type), serve_last_error());
    assert_int_equal(clEnqueueReadBuffer(d->queue, yb, CL_TRUE, 0, n_y * 4, y, 0, NULL, NULL),
                     CL_SUCCESS);
    double worst = 0.0, worst_off = INFINITY;
    for (int r = 0; r < rows; r++) {
        const float *xr = xf + (size_t)(x_row0 + r) * (size_t)n_in;
        reference(type, w, bytes, n_out, n_in, xr, want, 0);
        reference(type, w, bytes, n_out, n_in, xr, wrong, 1);
        const float *yr0 = y0 + (size_t)(y_row0 + r) * (size_t)ldy;
        for (int o = 0; o < n_out && accumulate; o++) want[o] += yr0[o], wrong[o] += yr0[o];
        memcpy(got, y + (size_t)(y_row0 + r) * (size_t)ldy, (size_t)n_out * sizeof *got);
        double err = norm_err(got, want, n_out), off = norm_err(got, wrong, n_out);
        if (!(err <= worst)) worst = err;
        if (off < worst_off) worst_off = off;
    }
    /* nothing else of Y moved: the rows around, the columns past out */
    for (size_t i = 0; i < n_y; i++) {
        size_t r = i / (size_t)ldy, col = i % (size_t)ldy;
        int written = r >= (size_t)y_row0 && r < (size_t)(y_row0 + rows) && col < (size_t)n_out;
        if (!written && memcmp(&y[i], &y0[i], 4) != 0)
            fail_msg("%s: Y[%zu] (row %zu, column %zu) changed", serve_ggml_type_name(type), i, r,
                     col);
    }
    printf("# %s [%d, %d] in %d range(s) x %d rows, x %s%s: normalised error %.3g; against a "
           "scale lost per row %.3g\n", serve_ggml_type_name(type), n_out, n_in, n_ranges, rows,
           x_bf16 ? "bf16" : "f32", accumulate ? ", accumulated" : "", worst, worst_off);
    if (!(worst <= 1e-5)) fail_msg("%s: normalised error %g > 1e-5", serve_ggml_type_name(type),
                                   worst);
    if (!(worst_off > 1e-3)) fail_msg("%s: the comparison cannot tell a lost scale (%g)",
                                      serve_ggml_type_name(type), worst_off);
    for (int k = 0; k < n_ranges; k++) clReleaseMemObject(wb[k]);
    clReleaseMemObject(xbuf), clReleaseMemObject(yb);
    free(w), free(xf), free(xb), free(y0), free(y), free(want), free(wrong), free(got);
}

static void test_gemv_matches_dequantized(void **state) {
    device *d = *state;
    if (!d->ctx) skip();
    static const struct {
        int n_out, n_in, rows, x_bf16, accumulate, ranges;
    } cases[] = {{33, 512, 1, 0, 0, 1}, {17, 512, 3, 1, 1, 3}, {9, 256, 8, 0, 1, 2},
                 {5, 8192, 8, 1, 0, 1}, {7, 8192, 1, 0, 1, 3}, {11, 2048, 2, 1, 0, 2}};
    /* the long inputs with few outputs are split between 2 (2048) and 4
     * (8192) teams a row set on any device (serve_gq_split) */
    for (int t = 0; t < N_TYPES; t++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            gemv_case(d, types[t], cases[c].n_out, cases[c].n_in, cases[c].rows, cases[c].x_bf16,
                      cases[c].accumulate, cases[c].ranges);
}

/* The fused decode variants (issue 38): X RMSNorm'ed on the way (gain,
 * eps) with and without SwiGLU over a [gate; up] pair, against float64:
 * xn = x * g / sqrt(mean(x^2) + eps) from the kernel's x values, then the
 * dequantized rows; and against the same without the norm's scale, which
 * must miss (the check can fail). up_type != type: a gate and an up of
 * different types, the gate's launch (norm) then the up's (norm, swiglu
 * 2) over the gate's product. */
static void fused_case(device *d, uint32_t type, uint32_t up_type, int ffn, int n_in, int rows,
                       int x_bf16, int swiglu, int accumulate) {
    int mixed = swiglu && up_type != type;
    const float eps = 1e-5f;
    uint64_t bytes_g, bytes_u = 0;
    unsigned char *wg = random_weight(type, ffn, n_in, &bytes_g);
    unsigned char *wu = swiglu ? random_weight(up_type, ffn, n_in, &bytes_u) : NULL;
    size_t n_x = (size_t)rows * (size_t)n_in, n_y = (size_t)rows * (size_t)ffn;
    float *xf = malloc(n_x * 4), *gain = malloc((size_t)n_in * 4), *y0 = malloc(n_y * 4),
          *y = malloc(n_y * 4), *xn = malloc((size_t)n_in * 4), *xs = malloc((size_t)n_in * 4);
    uint16_t *xb = malloc(n_x * 2);
    double *gw = malloc((size_t)ffn * 8), *uw = malloc((size_t)ffn * 8),
           *g1 = malloc((size_t)ffn * 8), *u1 = malloc((size_t)ffn * 8);
    double *want = malloc((size_t)ffn * 8), *plain = malloc((size_t)ffn * 8);
    assert_true(xf && gain && y0 && y && xn && xs && xb && gw && uw && g1 && u1 && want && plain);
    for (size_t i = 0; i < n_x; i++) {
        xf[i] = frand() * 3.0f;
        xb[i] = serve_bf16_of(xf[i]);
        if (x_bf16) xf[i] = serve_float_of_bf16(xb[i]);
    }
    for (int i = 0; i < n_in; i++) gain[i] = 0.5f + (frand() + 1.0f) * 0.5f;
    for (size_t i = 0; i < n_y; i++) y0[i] = frand();
    cl_mem xbuf = x_bf16 ? buffer(d, n_x * 2, xb) : buffer(d, n_x * 4, xf);
    cl_mem gb = buffer(d, (size_t)n_in * 4, gain), yb = buffer(d, n_y * 4, y0);
    cl_mem yu = buffer(d, n_y * 4, NULL); /* range 1's y: untouched with swiglu */
    cl_mem wgb = buffer(d, (size_t)bytes_g, wg), wub = swiglu ? buffer(d, (size_t)bytes_u, wu) : NULL;
    serve_gemv_args a = {.type = type, .rows = rows, .in = n_in, .x = xbuf, .x_bf16 = x_bf16,
                         .n_outs = swiglu ? 2 : 1, .accumulate = accumulate, .norm = gb,
                         .norm_eps = eps, .swiglu = swiglu};
    a.outs[0] = (serve_gemv_out){wgb, yb, 0, ffn, ffn};
    if (swiglu) a.outs[1] = (serve_gemv_out){wub, yu, 0, ffn, ffn};
    if (mixed) a.n_outs = 1, a.swiglu = 0; /* the gate's launch: its product into yb */
    int st = serve_gemv_quant_run(d->g, d->queue, &a, NULL);
    if (st) fail_msg("%s: %s", serve_ggml_type_name(type), serve_last_error());
    if (mixed) { /* the up's launch: silu(yb) * up into yb */
        a.type = up_type, a.swiglu = 2, a.outs[0].w = wub;
        st = serve_gemv_quant_run(d->g, d->queue, &a, NULL);
        if (st) fail_msg("%s: %s", serve_ggml_type_name(up_type), serve_last_error());
    }
    assert_int_equal(clEnqueueReadBuffer(d->queue, yb, CL_TRUE, 0, n_y * 4, y, 0, NULL, NULL),
                     CL_SUCCESS);
    double worst = 0.0, worst_plain = INFINITY;
    for (int r = 0; r < rows; r++) {
        const float *xr = xf + (size_t)r * (size_t)n_in;
        double ss = 0.0;
        for (int i = 0; i < n_in; i++) ss += (double)xr[i] * (double)xr[i];
        double sc = 1.0 / sqrt(ss / n_in + (double)eps);
        /* float64 of the dequantized rows: reference() takes f32 x, so the
         * scale is applied to the sums (exact in float64 up to rounding) */
        for (int i = 0; i < n_in; i++) xn[i] = xr[i] * gain[i], xs[i] = xr[i];
        reference(type, wg, bytes_g, ffn, n_in, xn, gw, 0);
        reference(type, wg, bytes_g, ffn, n_in, xs, g1, 0);
        if (swiglu) {
            reference(up_type, wu, bytes_u, ffn, n_in, xn, uw, 0);
            reference(up_type, wu, bytes_u, ffn, n_in, xs, u1, 0);
        }
        for (int o = 0; o < ffn; o++) {
            double gt = gw[o] * sc, pt = g1[o];
            if (swiglu) {
                gt = gt / (1.0 + exp(-gt)) * (uw[o] * sc);
                pt = pt / (1.0 + exp(-pt)) * u1[o];
            }
            double base = accumulate ? (double)y0[(size_t)r * (size_t)ffn + (size_t)o] : 0.0;
            want[o] = gt + base, plain[o] = pt + base;
        }
        const float *got = y + (size_t)r * (size_t)ffn;
        double e = norm_err(got, want, ffn), p = norm_err(got, plain, ffn);
        if (!(e <= worst)) worst = e;
        if (p < worst_plain) worst_plain = p;
    }
    printf("# fused %s%s%s [%d, %d]%s x %d rows, x %s%s: normalised error %.3g; against no "
           "norm %.3g\n", serve_ggml_type_name(type), mixed ? "/" : "",
           mixed ? serve_ggml_type_name(up_type) : "", ffn, n_in,
           swiglu ? " gate/up SwiGLU" : " norm", rows, x_bf16 ? "bf16" : "f32",
           accumulate ? ", accumulated" : "", worst, worst_plain);
    /* bound: f32 sums of 512..4096 products (the unfused GEMV's 1e-5) and
     * the scale's own rounding, twice for the SwiGLU product */
    if (!(worst <= 2e-5)) fail_msg("%s: normalised error %g > 2e-5", serve_ggml_type_name(type),
                                   worst);
    if (!(worst_plain > 1e-2)) fail_msg("%s: the check cannot tell a missing norm (%g)",
                                        serve_ggml_type_name(type), worst_plain);
    clReleaseMemObject(xbuf), clReleaseMemObject(gb), clReleaseMemObject(yb);
    clReleaseMemObject(yu), clReleaseMemObject(wgb);
    if (wub) clReleaseMemObject(wub);
    free(wg), free(wu), free(xf), free(gain), free(y0), free(y), free(xn), free(xs), free(xb);
    free(gw), free(uw), free(g1), free(u1), free(want), free(plain);
}

static void test_fused_norm_swiglu(void **state) {
    device *d = *state;
    if (!d->ctx) skip();
    static const struct {
        int ffn, n_in, rows, x_bf16, swiglu, accumulate;
    } cases[] = {{19, 512, 1, 0, 1, 0}, {11, 512, 5, 1, 1, 0}, {13, 256, 8, 0, 0, 0},
                 {7, 1024, 3, 1, 0, 1}, {9, 4096, 2, 1, 1, 0}, {6, 2048, 1, 0, 0, 1}};
    /* the last two: a row set split between teams (their sums of squares
     * too) */
    for (int t = 0; t < N_TYPES; t++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            fused_case(d, types[t], types[t], cases[c].ffn, cases[c].n_in, cases[c].rows,
                       cases[c].x_bf16, cases[c].swiglu, cases[c].accumulate);
}

/* SwiGLU over a gate and an up of different types: two launches (the
 * gate's product, then silu of it times the up's), rows 1..8. */
static void test_fused_swiglu_mixed_types(void **state) {
    device *d = *state;
    if (!d->ctx) skip();
    static const struct {
        uint32_t gate, up;
        int ffn, n_in, rows, x_bf16;
    } cases[] = {{SERVE_GGML_Q4_K, SERVE_GGML_Q6_K, 19, 512, 1, 0},
                 {SERVE_GGML_Q6_K, SERVE_GGML_Q4_K, 11, 1024, 8, 1},
                 {SERVE_GGML_Q8_0, SERVE_GGML_Q5_K, 13, 512, 4, 0},
                 {SERVE_GGML_Q5_K, SERVE_GGML_Q4_0, 7, 256, 2, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        fused_case(d, cases[c].gate, cases[c].up, cases[c].ffn, cases[c].n_in, cases[c].rows,
                   cases[c].x_bf16, 1, 0);
}

/* serve/projection.c's routing of decode's groups through the fused
 * GEMV (what model.c's kept decode calls), launches counted by the
 * projector's timer: QKV of Q4_K, Q4_K, Q6_K (a Q4_K_M layer) normed on
 * the way: 2 launches, and unnormed by serve_project_group: 2; gate/up
 * SwiGLU of one type: 1, of Q4_K and Q6_K: 2; each against float64 of the
 * dequantized rows (bound 2e-5 as above); accumulated SwiGLU of two types
 * refused before any launch. */
static void test_projection_routing(void **state) {
    device *d = *state;
    if (!d->ctx) skip();
    enum { ROWS = 3, IN = 512, OUT = 9 };
    const float eps = 1e-5f;
    static const uint32_t kinds[][3] = {{SERVE_GGML_Q4_K, SERVE_GGML_Q4_K, SERVE_GGML_Q6_K},
                                        {SERVE_GGML_Q5_K, SERVE_GGML_Q5_K, 0},
                                        {SERVE_GGML_Q4_K, SERVE_GGML_Q6_K, 0}};
    static const struct {
        int kind, n, norm, swiglu, launches;
    } cases[] = {{0, 3, 1, 0, 2}, {0, 3, 0, 0, 2}, {1, 2, 1, 1, 1}, {2, 2, 1, 1, 2}};
    float x[ROWS * IN], gain[IN], xn[IN], got[ROWS * OUT];
    double ref[3][OUT], want[OUT];
    for (int i = 0; i < ROWS * IN; i++) x[i] = frand() * 3.0f;
    for (int i = 0; i < IN; i++) gain[i] = 0.5f + (frand() + 1.0f) * 0.5f;
    cl_mem xb = buffer(d, sizeof x, x), gb = buffer(d, sizeof gain, gain);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n = cases[c].n;
        unsigned char *host[3] = {NULL, NULL, NULL};
        uint64_t bytes[3];
        serve_weight w[3];
        const serve_weight *wp[3];
        cl_mem y[3];
        for (int k = 0; k < n; k++) {
            uint32_t type = kinds[cases[c].kind][k];
            host[k] = random_weight(type, OUT, IN, &bytes[k]);
            w[k] = (serve_weight){buffer(d, (size_t)bytes[k], host[k]), type, OUT, IN};
            wp[k] = &w[k];
            y[k] = buffer(d, sizeof got, NULL);
        }
        serve_timer timer;
        memset(&timer, 0, sizeof timer);
        serve_projector p = {d->queue, d->g, NULL, NULL, NULL, &timer};
        int st = cases[c].norm ? serve_project_fused(&p, n, wp, ROWS, xb, 0, gb, eps,
                                                     cases[c].swiglu, y, 0)
                               : serve_project_group(&p, n, wp, ROWS, xb, 0, y, 0);
        if (st) fail_msg("case %zu: %s", c, serve_last_error());
        if (timer.enqueues_by[SERVE_ENQ_GEMM] != cases[c].launches)
            fail_msg("case %zu: %lld launches, %d expected", c,
                     (long long)timer.enqueues_by[SERVE_ENQ_GEMM], cases[c].launches);
        double worst = 0.0;
        for (int k = 0; k < (cases[c].swiglu ? 1 : n); k++) {
            assert_int_equal(clEnqueueReadBuffer(d->queue, y[k], CL_TRUE, 0, sizeof got, got, 0,
                                                 NULL, NULL), CL_SUCCESS);
            for (int r = 0; r < ROWS; r++) {
                const float *xr = x + r * IN;
                double ss = 0.0;
                for (int i = 0; i < IN; i++) ss += (double)xr[i] * (double)xr[i];
                double sc = cases[c].norm ? 1.0 / sqrt(ss / IN + (double)eps) : 1.0;
                for (int i = 0; i < IN; i++) xn[i] = cases[c].norm ? xr[i] * gain[i] : xr[i];
                for (int j = 0; j < n; j++)
                    reference(w[j].type, host[j], bytes[j], OUT, IN, xn, ref[j], 0);
                for (int o = 0; o < OUT; o++) {
                    double v = ref[k][o] * sc;
                    if (cases[c].swiglu) v = v / (1.0 + exp(-v)) * (ref[1][o] * sc);
                    want[o] = v;
                }
                double e = norm_err(got + r * OUT, want, OUT);
                if (!(e <= worst)) worst = e;
            }
        }
        printf("# routed %s%s%s x %d%s%s: %d launch(es), normalised error %.3g\n",
               serve_ggml_type_name(w[0].type), n > 1 ? "/" : "",
               n > 1 ? serve_ggml_type_name(w[n - 1].type) : "", n, cases[c].norm ? ", normed" : "",
               cases[c].swiglu ? ", SwiGLU" : "", cases[c].launches, worst);
        if (!(worst <= 2e-5)) fail_msg("case %zu: normalised error %g > 2e-5", c, worst);
        if (cases[c].kind == 2) { /* accumulated: refused, nothing enqueued */
            int64_t before = timer.enqueues;
            assert_int_equal(serve_project_fused(&p, n, wp, ROWS, xb, 0, gb, eps, 1, y, 1),
                             LAZYATTN_STATUS_INVALID_ARGUMENT);
            assert_non_null(strstr(serve_last_error(), "Q4_K gate and a Q6_K up accumulated"));
            assert_true(timer.enqueues == before);
        }
        for (int k = 0; k < n; k++) {
            clReleaseMemObject(w[k].buf), clReleaseMemObject(y[k]);
            free(host[k]);
        }
    }
    clReleaseMemObject(xb), clReleaseMemObject(gb);
}

/* ---- the int8 GEMV (serve_gemv_quant_set_q8): one row, K-quants ----
 * The row is quantized to 8 bits a value, a scale every 32 (amax / 127),
 * so the result is not the exact product. Two checks an output, each
 * against float64 of the dequantized rows:
 *  - the definition: the product with the row quantized here (q =
 *    round(x * 127 / amax) in f32, x~ = q * amax / 127), within f32
 *    rounding (1e-5 of sum |w x|) plus, for a value within 1e-4 of a
 *    rounding tie (where the device's f32 division may round the other
 *    way), its |w| * amax / 127;
 *  - the accuracy: the exact product, within the most quantization can
 *    move it, B = sum_b amax_b / 254 * sum_{i in b} |w_i| (b its block of
 *    32), plus the same rounding.
 * Both times the norm's scale; SwiGLU through silu's Lipschitz bound
 * (|silu'| < 1.1): |dy| <= 1.1 Bg (|u| + Bu) + |silu(g)| Bu. The check can
 * fail: the definition's bound misses the product with one scale of each
 * row lost (at half the outputs at least; a quarter with SwiGLU, whose
 * silu flattens the negative gates); the kernel is seen to run (its launches counted). A NaN in the
 * row gives NaN in every output. */

/* x~ (the row quantized as the kernel does) and, a value, how far the
 * kernel's may be from the product with it (tie) and from x (worst) */
static void q8_quantize(const float *x, int n_in, float *xq, double *tie, double *worst) {
    for (int b = 0; b < n_in / 32; b++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        float iq = amax > 0.0f ? 127.0f / amax : 0.0f, d = amax / 127.0f;
        for (int i = 0; i < 32; i++) {
            float v = x[b * 32 + i] * iq, q = rintf(v);
            if (q > 127.0f) q = 127.0f;
            if (q < -127.0f) q = -127.0f;
            xq[b * 32 + i] = q * d;
            tie[b * 32 + i] = fabs(fabs((double)v - floor((double)v)) - 0.5) < 1e-4 ? d : 0.0;
            worst[b * 32 + i] = amax / 254.0;
        }
    }
}

/* bound[o] = sum_i |w_oi| e_i + 1e-5 sum_i |w_oi x_i| over the dequantized rows of w */
static void q8_bounds(uint32_t type, const unsigned char *w, uint64_t bytes, int n_out, int n_in,
                      const float *x, const double *e, double *bound) {
    float *row = malloc((size_t)n_in * sizeof *row);
    assert_non_null(row);
    uint64_t row_bytes = bytes / (uint64_t)n_out;
    for (int o = 0; o < n_out; o++) {
        assert_int_equal(serve_dequantize(type, w + (uint64_t)o * row_bytes, row_bytes, row,
                                          (uint64_t)n_in, "W"), 0);
        double q = 0.0, mag = 0.0;
        for (int i = 0; i < n_in; i++) {
            q += fabs((double)row[i]) * e[i];
            mag += fabs((double)row[i] * (double)x[i]);
        }
        bound[o] = q + 1e-5 * mag;
    }
    free(row);
}

static double silu(double v) { return v / (1.0 + exp(-v)); }

/* The SwiGLU (or plain) output and its bound from the gate's and up's
 * products and bounds (scaled by sc) */
static double q8_out(int swiglu, double g, double bg, double u, double bu, double sc,
                     double *bound) {
    g *= sc, bg *= sc, u *= sc, bu *= sc;
    if (!swiglu) {
        *bound = bg;
        return g;
    }
    *bound = 1.1 * bg * (fabs(u) + bu) + fabs(silu(g)) * bu;
    return silu(g) * u;
}

/* One int8 case: [n_out, n_in] of type (and an up of up_type with
 * swiglu), one row, X f32 or bf16, optionally normed, accumulated into Y. */
static void q8_case(device *d, uint32_t type, uint32_t up_type, int n_out, int n_in, int x_bf16,
                    int norm, int swiglu, int accumulate) {
    int mixed = swiglu && up_type != type;
    const float eps = 1e-5f;
    uint64_t bytes_g, bytes_u = 0;
    unsigned char *wg = random_weight(type, n_out, n_in, &bytes_g);
    unsigned char *wu = swiglu ? random_weight(up_type, n_out, n_in, &bytes_u) : NULL;
    size_t fi = (size_t)n_in * 4, di = (size_t)n_in * 8, fo = (size_t)n_out * 4,
           dn = (size_t)n_out * 8;
    float *xf = malloc(fi), *gain = malloc(fi), *xg = malloc(fi), *xq = malloc(fi),
          *y0 = malloc(fo), *y = malloc(fo);
    uint16_t *xb = malloc((size_t)n_in * 2);
    double *tie = malloc(di), *worst_e = malloc(di);
    double *ref[2][3], *bnd[2][3]; /* [gate, up][exact, definition, scales lost] */
    for (int k = 0; k < 2; k++)
        for (int m = 0; m < 3; m++) ref[k][m] = malloc(dn), bnd[k][m] = malloc(dn);
    assert_true(xf && gain && xg && xq && y0 && y && xb && tie && worst_e);
    for (int i = 0; i < n_in; i++) {
        /* blocks of very different magnitude: a scale per 32 matters */
        xf[i] = frand() * (float)(1 + (i / 32) % 7) * (i % 97 == 5 ? 8.0f : 1.0f);
        xb[i] = serve_bf16_of(xf[i]);
        if (x_bf16) xf[i] = serve_float_of_bf16(xb[i]);
        gain[i] = norm ? 0.5f + (frand() + 1.0f) * 0.5f : 1.0f;
        xg[i] = xf[i] * gain[i]; /* the kernel's f32 product */
    }
    for (int o = 0; o < n_out; o++) y0[o] = frand();
    double ss = 0.0;
    for (int i = 0; i < n_in; i++) ss += (double)xf[i] * (double)xf[i];
    double sc = norm ? 1.0 / sqrt(ss / n_in + (double)eps) : 1.0;
    cl_mem xbuf = x_bf16 ? buffer(d, (size_t)n_in * 2, xb) : buffer(d, fi, xf);
    cl_mem gb = buffer(d, fi, gain), yb = buffer(d, fo, y0), yu = buffer(d, fo, NULL);
    cl_mem wgb = buffer(d, (size_t)bytes_g, wg), wub = swiglu ? buffer(d, (size_t)bytes_u, wu) : NULL;
    serve_gemv_args a = {.type = type, .rows = 1, .in = n_in, .x = xbuf, .x_bf16 = x_bf16,
                         .n_outs = swiglu && !mixed ? 2 : 1, .accumulate = accumulate,
                         .norm = norm ? gb : NULL, .norm_eps = eps, .swiglu = mixed ? 0 : swiglu};
    a.outs[0] = (serve_gemv_out){wgb, yb, 0, n_out, n_out};
    if (swiglu) a.outs[1] = (serve_gemv_out){wub, yu, 0, n_out, n_out};
    int64_t before = serve_gemv_quant_q8_launches(d->g);
    int st = serve_gemv_quant_run(d->g, d->queue, &a, NULL);
    if (!st && mixed) {
        a.type = up_type, a.swiglu = 2, a.outs[0].w = wub;
        st = serve_gemv_quant_run(d->g, d->queue, &a, NULL);
    }
    if (st) fail_msg("%s: %s", serve_ggml_type_name(type), serve_last_error());
    assert_int_equal(serve_gemv_quant_q8_launches(d->g) - before, mixed ? 2 : 1);
    assert_int_equal(clEnqueueReadBuffer(d->queue, yb, CL_TRUE, 0, fo, y, 0, NULL, NULL),
                     CL_SUCCESS);
    q8_quantize(xg, n_in, xq, tie, worst_e);
    for (int k = 0; k < (swiglu ? 2 : 1); k++) {
        uint32_t t = k ? up_type : type;
        const unsigned char *w = k ? wu : wg;
        uint64_t bytes = k ? bytes_u : bytes_g;
        reference(t, w, bytes, n_out, n_in, xg, ref[k][0], 0);
        reference(t, w, bytes, n_out, n_in, xq, ref[k][1], 0);
        reference(t, w, bytes, n_out, n_in, xq, ref[k][2], 1);
        q8_bounds(t, w, bytes, n_out, n_in, xg, worst_e, bnd[k][0]);
        q8_bounds(t, w, bytes, n_out, n_in, xg, tie, bnd[k][1]);
    }
    double worst = 0.0, den = 0.0, used = 0.0, worst_def = 0.0;
    int broken = 0;
    for (int o = 0; o < n_out; o++) {
        double want[3], bound[2], base = accumulate ? (double)y0[o] : 0.0;
        for (int m = 0; m < 3; m++) {
            double b;
            want[m] = base + q8_out(swiglu, ref[0][m][o], bnd[0][m < 2 ? m : 1][o],
                                    swiglu ? ref[1][m == 2 ? 1 : m][o] : 0.0,
                                    swiglu ? bnd[1][m < 2 ? m : 1][o] : 0.0, sc, &b);
            if (m < 2) bound[m] = b + 1e-6 * fabs(want[m]);
        }
        double e = fabs((double)y[o] - want[0]), e_def = fabs((double)y[o] - want[1]);
        if (!(e <= bound[0] && e_def <= bound[1]))
            fail_msg("%s%s%s [%d, %d] x %s%s%s: output %d: %.9g; exact %.9g (error %.3g, bound "
                     "%.3g); by the definition %.9g (error %.3g, bound %.3g)",
                     serve_ggml_type_name(type), mixed ? "/" : "",
                     mixed ? serve_ggml_type_name(up_type) : "", n_out, n_in,
                     x_bf16 ? "bf16" : "f32", norm ? " normed" : "", swiglu ? " SwiGLU" : "", o,
                     (double)y[o], want[0], e, bound[0], want[1], e_def, bound[1]);
        if (fabs((double)y[o] - want[2]) > bound[1]) broken++;
        if (e > worst) worst = e;
        if (e_def > worst_def) worst_def = e_def;
        if (fabs(want[0]) > den) den = fabs(want[0]);
        if (e / bound[0] > used) used = e / bound[0];
    }
    printf("# int8 %s%s%s [%d, %d] x %s%s%s%s: normalised error %.3g (%.2f of the most "
           "quantization can move it), %.3g from the definition; a lost scale breaks it at %d "
           "of %d\n", serve_ggml_type_name(type), mixed ? "/" : "",
           mixed ? serve_ggml_type_name(up_type) : "", n_out, n_in, x_bf16 ? "bf16" : "f32",
           norm ? ", normed" : "", swiglu ? ", SwiGLU" : "", accumulate ? ", accumulated" : "",
           worst / den, used, worst_def / den, broken, n_out);
    if (broken * (swiglu ? 4 : 2) < n_out) fail_msg("the definition's bound cannot tell a lost scale (%d of %d)",
                                 broken, n_out);
    clReleaseMemObject(xbuf), clReleaseMemObject(gb), clReleaseMemObject(yb);
    clReleaseMemObject(yu), clReleaseMemObject(wgb);
    if (wub) clReleaseMemObject(wub);
    free(wg), free(wu), free(xf), free(gain), free(xg), free(xq), free(y0), free(y), free(xb);
    free(tie), free(worst_e);
    for (int k = 0; k < 2; k++)
        for (int m = 0; m < 3; m++) free(ref[k][m]), free(bnd[k][m]);
}

static void test_q8_within_bound(void **state) {
    device *d = *state;
    if (!d->ctx) skip();
    serve_gemv_quant_set_q8(d->g, 1);
    static const uint32_t k_types[] = {SERVE_GGML_Q4_K, SERVE_GGML_Q5_K, SERVE_GGML_Q6_K};
    static const struct {
        int n_out, n_in, x_bf16, norm, swiglu, accumulate;
    } cases[] = {{33, 512, 0, 0, 0, 0}, {17, 256, 1, 0, 0, 1}, {70, 4096, 1, 1, 0, 0},
                 {5, 8192, 0, 0, 0, 1}, {12, 14336, 1, 0, 0, 0}, {19, 1024, 0, 1, 1, 0},
                 {9, 4096, 1, 1, 1, 0}};
    /* [5, 8192]: a row set split between 8 teams (the sum of squares of a
     * normed row is the work-group's in every case) */
    for (int t = 0; t < 3; t++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            q8_case(d, k_types[t], k_types[t], cases[c].n_out, cases[c].n_in, cases[c].x_bf16,
                    cases[c].norm, cases[c].swiglu, cases[c].accumulate);
    q8_case(d, SERVE_GGML_Q4_K, SERVE_GGML_Q6_K, 21, 2048, 1, 1, 1, 0); /* Q4_K_M's gate/up */
    serve_gemv_quant_set_q8(d->g, 0);
}

/* A NaN anywhere in the row is a NaN in every output (the block's scale
 * carries it: the int8 values alone would hide it). */
static void test_q8_nan(void **state) {
    device *d = *state;
    if (!d->ctx) skip();
    serve_gemv_quant_set_q8(d->g, 1);
    enum { OUT = 9, IN = 512 };
    uint64_t bytes;
    unsigned char *w = random_weight(SERVE_GGML_Q4_K, OUT, IN, &bytes);
    float x[IN], y[OUT];
    for (int i = 0; i < IN; i++) x[i] = frand();
    x[300] = NAN;
    cl_mem wb = buffer(d, (size_t)bytes, w), xb = buffer(d, sizeof x, x), yb = buffer(d, sizeof y, NULL);
    serve_gemv_args a = {.type = SERVE_GGML_Q4_K, .rows = 1, .in = IN, .x = xb, .n_outs = 1};
    a.outs[0] = (serve_gemv_out){wb, yb, 0, OUT, OUT};
    int64_t before = serve_gemv_quant_q8_launches(d->g);
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL), 0);
    assert_int_equal(serve_gemv_quant_q8_launches(d->g) - before, 1);
    assert_int_equal(clEnqueueReadBuffer(d->queue, yb, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL),
                     CL_SUCCESS);
    for (int o = 0; o < OUT; o++)
        if (!isnan(y[o])) fail_msg("output %d is %g: the NaN was lost", o, (double)y[o]);
    clReleaseMemObject(wb), clReleaseMemObject(xb), clReleaseMemObject(yb);
    free(w);
    serve_gemv_quant_set_q8(d->g, 0);
}

static void test_dequant_bit_exact(void **state) {
    device *d = *state;
    if (!d->ctx) skip();
    const int n_out = 19, n_in = 512;
    for (int t = 0; t < N_TYPES; t++) {
        uint32_t type = types[t];
        uint64_t bytes;
        unsigned char *w = random_weight(type, n_out, n_in, &bytes);
        size_t n = (size_t)n_out * (size_t)n_in;
        float *host = malloc(n * 4), *dev = malloc(n * 4);
        assert_true(host && dev);
        assert_int_equal(serve_dequantize(type, w, bytes, host, (uint64_t)n, "W"), 0);
        cl_mem wb = buffer(d, (size_t)bytes, w), dst = buffer(d, n * 4, NULL);
        static const serve_dequant_layout layouts[] = {SERVE_DEQUANT_F32, SERVE_DEQUANT_F32_T,
                                                       SERVE_DEQUANT_BF16};
        for (int l = 0; l < 3; l++) {
            int st = serve_dequant_run(d->g, d->queue, type, wb, n_out, n_in, dst, layouts[l],
                                       NULL);
            if (st) fail_msg("%s: %s", serve_ggml_type_name(type), serve_last_error());
            assert_int_equal(clEnqueueReadBuffer(d->queue, dst, CL_TRUE, 0, n * 4, dev, 0, NULL,
                                                 NULL), CL_SUCCESS);
            const uint16_t *bits = (const uint16_t *)dev;
            for (size_t i = 0; i < n; i++) {
                size_t o = i / (size_t)n_in, k = i % (size_t)n_in;
                uint32_t want, got;
                if (layouts[l] == SERVE_DEQUANT_BF16) {
                    want = serve_bf16_of(host[i]), got = bits[i];
                } else {
                    memcpy(&want, &host[i], 4);
                    memcpy(&got, layouts[l] == SERVE_DEQUANT_F32 ? &dev[i]
                                                              : &dev[k * (size_t)n_out + o], 4);
                }
                if (want != got)
                    fail_msg("%s layout %d: W[%zu, %zu] = 0x%08x on the device, 0x%08x on the "
                             "host", serve_ggml_type_name(type), l, o, k, got, want);
            }
        }
        printf("# %s dequantized on the device: f32, f32 transposed and bf16 bit-exact\n",
               serve_ggml_type_name(type));
        clReleaseMemObject(wb), clReleaseMemObject(dst);
        free(w), free(host), free(dev);
    }
}

static void test_refused(void **state) {
    device *d = *state;
    if (!d->ctx) skip();
    cl_mem w = buffer(d, 144 * 4, NULL), x = buffer(d, 1024, NULL), y = buffer(d, 64, NULL);
    serve_gemv_args a = {.type = SERVE_GGML_Q2_K, .rows = 1, .in = 256, .x = x, .n_outs = 1};
    a.outs[0] = (serve_gemv_out){w, y, 0, 2, 2};
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL), LAZYATTN_STATUS_UNSUPPORTED);
    assert_non_null(strstr(serve_last_error(), "Q2_K weights"));
    a.type = SERVE_GGML_Q4_K, a.in = 100;
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "multiple of the Q4_K block"));
    /* 5 rows of one Q4_K block need 720 bytes, W holds 576 */
    a.in = 256, a.outs[0].cols = 5, a.outs[0].ldy = 5;
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "needs W 720"));
    a.outs[0].cols = 2, a.outs[0].ldy = 2, a.rows = SERVE_QUANT_GEMV_MAX_ROWS + 1;
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "9 rows (1..8)"));
    a.rows = 1, a.n_outs = SERVE_GEMV_MAX_OUTS + 1;
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "4 ranges (1..3)"));
    /* the second range's Y: 64 bytes; 2 rows 20 floats apart need 88 */
    a.n_outs = 2, a.rows = 2, a.outs[1] = (serve_gemv_out){w, y, 0, 2, 20};
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "range 1: Y of 64 bytes"));
    /* x holds 256 floats, 512 asked (W: one row of 16 Q8_0 blocks, 544 bytes) */
    a.n_outs = 1, a.rows = 1, a.type = SERVE_GGML_Q8_0, a.in = 512;
    a.outs[0] = (serve_gemv_out){w, y, 0, 1, 1};
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "need x 2048"));
    a.in = 32, a.outs[0].cols = 2; /* ldy 1 < cols */
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "ldy 1 < cols 2"));
    assert_int_equal(serve_gemv_quant_run(NULL, d->queue, &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* the fused variants: SwiGLU takes two ranges of equal cols; the norm's
     * gain holds in floats and its eps is positive */
    a.outs[0].ldy = 2, a.swiglu = 1;
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "two ranges (gate, up) of equal cols; 1 given"));
    a.swiglu = 3; /* neither 0, 1 nor 2 */
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "swiglu 3 (0: none, 1: gate and up"));
    a.swiglu = 2, a.accumulate = 1; /* over the gate's product: it replaces, never adds */
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "swiglu 2 takes one range"));
    a.accumulate = 0, a.n_outs = 2, a.outs[1] = a.outs[0];
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "2 ranges, accumulate 0 given"));
    a.n_outs = 1;
    a.swiglu = 0, a.norm = y, a.norm_eps = 1e-5f, a.in = 32 * 17; /* 64 bytes, 17 * 32 floats */
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "norm of 64 bytes (544 floats needed)"));
    a.in = 16, a.norm_eps = 0.0f;
    assert_int_equal(serve_gemv_quant_run(d->g, d->queue, &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "eps 0"));
    a.norm = NULL;
    /* the dequantizer: dst of 64 bytes for 2 x 32 f32 values (256 bytes) */
    assert_int_equal(serve_dequant_run(d->g, d->queue, SERVE_GGML_Q8_0, w, 2, 32, y,
                                       SERVE_DEQUANT_F32, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "needs 256"));
    assert_int_equal(serve_dequant_run(d->g, d->queue, SERVE_GGML_F16, w, 2, 32, x,
                                       SERVE_DEQUANT_F32, NULL), LAZYATTN_STATUS_UNSUPPORTED);
    assert_int_equal(serve_dequant_run(d->g, d->queue, SERVE_GGML_Q8_0, w, 2, 32, x,
                                       (serve_dequant_layout)7, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    clReleaseMemObject(w), clReleaseMemObject(x), clReleaseMemObject(y);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemv_matches_dequantized),
        cmocka_unit_test(test_fused_norm_swiglu),
        cmocka_unit_test(test_fused_swiglu_mixed_types),
        cmocka_unit_test(test_projection_routing),
        cmocka_unit_test(test_q8_within_bound),
        cmocka_unit_test(test_q8_nan),
        cmocka_unit_test(test_dequant_bit_exact),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
