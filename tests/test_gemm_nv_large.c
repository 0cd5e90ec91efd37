/* SPDX-License-Identifier: Apache-2.0 */
/* serve/gemm_nv_large.c: the refusals every device sees (bad tiles and
 * arguments; UNSUPPORTED on a context without the NVIDIA fast path, which is
 * PoCL in CI) and, on an NVIDIA Hopper GPU, a product with a partial row
 * tile, two output ranges and the accumulate path against float64 on the
 * host (fresh random bf16 operands, never zeros; Y poisoned first). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gemm_nv_large.h"

static int setup(void **state) {
    lazyattn_context *ctx = NULL;
    if (lazyattn_context_create(NULL, &ctx) != 0) {
        fprintf(stderr, "no OpenCL device: %s\n", lazyattn_last_error());
        return -1;
    }
    *state = ctx;
    return 0;
}

static int teardown(void **state) {
    lazyattn_context_destroy(*state);
    return 0;
}

static void test_refusals(void **state) {
    lazyattn_context *ctx = *state;
    serve_gemm_large *g = (serve_gemm_large *)&g;
    assert_int_equal(serve_gemm_large_create(ctx, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(serve_gemm_large_create(NULL, &g), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(g);
    static const char *const bad[] = {
        "",                        /* not a tile */
        "1,2,128,32,3,0",          /* six fields */
        "1,2,128,32,3,0,16,168,1", /* nine */
        "1,2,128,32,3,0,16x",      /* trailing garbage */
        "0,2,128,32,3,0,16",       /* no warpgroup */
        "1,3,128,32,3,0,16",       /* three row blocks */
        "1,2,96,32,3,0,16",        /* BN */
        "1,2,128,48,3,0,16",       /* BK */
        "1,2,128,32,4,0,16",       /* 4 x 16 KB > 48 KB */
        "2,1,256,16,2,1,16",       /* LAG 1 with 2 stages */
        "1,2,128,32,3,0,0",        /* GROUP */
        "1,2,128,32,3,0,16,32",    /* register cap */
        " 1,2,128,32,3,0,16",      /* a space */
        "+1,2,128,32,3,0,16",      /* a sign */
        "1,2,128,32,3,0,16,",      /* an empty field */
        "1,,2,128,32,3,0,16",      /* another */
        "4294967297,2,128,32,3,0,16", /* 2^32 + 1: no wrap to 1 */
        "1,2,128,32,3,0,99999999999", /* overflow */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        g = (serve_gemm_large *)&g;
        assert_int_equal(serve_gemm_large_create_tile(ctx, bad[i], &g), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_null(g);
        assert_non_null(strstr(serve_last_error(), "serve_gemm_large"));
    }
    serve_gemm_large_destroy(NULL);
    assert_string_equal(serve_gemm_large_tile(NULL), "");
    /* the environment: a malformed tile refused on every device */
    setenv("SERVE_GEMM_LARGE_TILE", "1,2,128", 1);
    g = (serve_gemm_large *)&g;
    assert_int_equal(serve_gemm_large_create(ctx, &g), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(g);
    unsetenv("SERVE_GEMM_LARGE_TILE");
    int st = serve_gemm_large_create(ctx, &g);
    if (!lazyattn_context_fast_path(ctx)) {
        assert_int_equal(st, LAZYATTN_STATUS_UNSUPPORTED);
        assert_null(g);
        return;
    }
    if (st == LAZYATTN_STATUS_UNSUPPORTED) { /* NVIDIA, not Hopper */
        assert_null(g);
        return;
    }
    assert_int_equal(st, LAZYATTN_STATUS_OK);
    serve_gemm_args a = {.rows = 4, .out = 128, .in = 64, .n_outs = 1};
    assert_int_equal(serve_gemm_large_run(g, lazyattn_context_queue(ctx), NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(serve_gemm_large_run(g, lazyattn_context_queue(ctx), &a, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT); /* no buffers */
    serve_gemm_large_destroy(g);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float rnd(void) {
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (float)((rng * 2685821657736338717ull) >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

/* Y = X W^T into two ranges (128 + 128 columns, the second with a wider
 * row stride), then Y += X W^T; 130 rows (a partial row tile). */
static void test_product(void **state) {
    lazyattn_context *ctx = *state;
    serve_gemm_large *g = NULL;
    const int st = serve_gemm_large_create(ctx, &g);
    if (st == LAZYATTN_STATUS_UNSUPPORTED) { /* PoCL, or NVIDIA but not Hopper */
        print_message("needs an NVIDIA GPU of compute capability 9.x (wgmma): skipped\n");
        skip();
    }
    if (st != LAZYATTN_STATUS_OK) fail_msg("serve_gemm_large_create: %s", serve_last_error());
    enum { ROWS = 130, PAD = 256, OUT = 256, IN = 96, LD1 = 136 };
    uint16_t *x = malloc(sizeof(uint16_t) * PAD * IN), *w = malloc(sizeof(uint16_t) * OUT * IN);
    float *y0 = malloc(sizeof(float) * ROWS * 128), *y1 = malloc(sizeof(float) * ROWS * LD1);
    double *ref = malloc(sizeof(double) * ROWS * OUT);
    assert_true(x && w && y0 && y1 && ref);
    for (int i = 0; i < PAD * IN; i++) {
        do x[i] = serve_bf16_of(rnd());
        while (!(x[i] & 0x7FFF));
    }
    for (int i = 0; i < OUT * IN; i++) {
        do w[i] = serve_bf16_of(rnd());
        while (!(w[i] & 0x7FFF));
    }
    double ref_max = 0.0;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < OUT; c++) {
            double s = 0.0;
            for (int k = 0; k < IN; k++)
                s += (double)serve_float_of_bf16(x[r * IN + k]) * serve_float_of_bf16(w[c * IN + k]);
            ref[r * OUT + c] = s;
            ref_max = fmax(ref_max, fabs(s));
        }
    cl_context cl = lazyattn_context_cl_context(ctx);
    cl_command_queue q = lazyattn_context_queue(ctx);
    cl_int err;
    cl_mem xm = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(uint16_t) * PAD * IN, x, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem wm = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(uint16_t) * OUT * IN, w, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem ym[2];
    const size_t ybytes[2] = {sizeof(float) * ROWS * 128, sizeof(float) * ROWS * LD1};
    for (int i = 0; i < 2; i++) {
        ym[i] = clCreateBuffer(cl, CL_MEM_READ_WRITE, ybytes[i], NULL, &err);
        assert_int_equal(err, CL_SUCCESS);
        const float nan = NAN;
        assert_int_equal(clEnqueueFillBuffer(q, ym[i], &nan, sizeof nan, 0, ybytes[i], 0, NULL, NULL), CL_SUCCESS);
    }
    serve_gemm_args a = {.rows = ROWS, .out = OUT, .in = IN, .x = xm, .w = wm, .n_outs = 2,
                         .outs = {{ym[0], 0, 128, 128}, {ym[1], 0, 128, LD1}}};
    /* shapes the kernel does not cover */
    a.in = 80;
    assert_int_equal(serve_gemm_large_run(g, q, &a, NULL), LAZYATTN_STATUS_UNSUPPORTED);
    a.in = IN, a.outs[1].ld = 129;
    assert_int_equal(serve_gemm_large_run(g, q, &a, NULL), LAZYATTN_STATUS_UNSUPPORTED);
    a.outs[1].ld = LD1, a.out = 255;
    assert_int_equal(serve_gemm_large_run(g, q, &a, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    a.out = OUT;
    for (int pass = 1; pass <= 2; pass++) {
        a.accumulate = pass - 1;
        assert_int_equal(serve_gemm_large_run(g, q, &a, NULL), LAZYATTN_STATUS_OK);
        assert_int_equal(clEnqueueReadBuffer(q, ym[0], CL_TRUE, 0, ybytes[0], y0, 0, NULL, NULL), CL_SUCCESS);
        assert_int_equal(clEnqueueReadBuffer(q, ym[1], CL_TRUE, 0, ybytes[1], y1, 0, NULL, NULL), CL_SUCCESS);
        double worst = 0.0;
        for (int r = 0; r < ROWS; r++)
            for (int c = 0; c < OUT; c++) {
                const float v = c < 128 ? y0[r * 128 + c] : y1[r * LD1 + c - 128];
                const double e = fabs((double)v - pass * ref[r * OUT + c]) / (pass * ref_max);
                worst = isnan(e) ? INFINITY : fmax(worst, e);
            }
        if (worst > 1e-5) fail_msg("pass %d: max relative error %.3g", pass, worst);
        for (int r = 0; r < ROWS; r++) /* the columns past the range stay poisoned */
            for (int c = 128; c < LD1; c++) assert_true(isnan(y1[r * LD1 + c]));
    }
    for (int i = 0; i < 2; i++) clReleaseMemObject(ym[i]);
    clReleaseMemObject(xm), clReleaseMemObject(wm);
    free(x), free(w), free(y0), free(y1), free(ref);
    serve_gemm_large_destroy(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_product),
    };
    return cmocka_run_group_tests_name("gemm_nv_large", tests, setup, teardown);
}
