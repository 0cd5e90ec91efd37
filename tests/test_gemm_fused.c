/* SPDX-License-Identifier: Apache-2.0 */
/* Decode's fused projections (serve/gemm_bf16.h: x_f32, norm, swiglu;
 * issue 38) through the dispatcher on the default device (the portable
 * kernel on PoCL; on NVIDIA the small kernel: the test sets
 * LAZYATTN_TUNE=serve.fused_decode=1 where LAZYATTN_TUNE is unset), against
 * a float64 run of the unfused sequence they replace (gemm_fused_ref.h),
 * for rows 1..64:
 *   rmsnorm (bf16 out) -> QKV GEMM (three ranges, strides, offsets),
 *   rmsnorm -> gate/up GEMM -> swiglu, and the down GEMM reading that f32
 *   product (bf16 of it) onto a residual (accumulate).
 * Inputs are random, not zeros: rows of different magnitudes (the norm
 * matters), gains in [0.5, 1.5); bounds from bf16 rounding
 * (gemm_fused_ref.h). Bad arguments: a status and a message. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gemm_bf16.h"
#include "gemm_fused_ref.h"
#include "serve.h"
#include "serve_check.h"

typedef struct fu_state {
    lazyattn_context *ctx;
    serve_gemm_bf16 *gemm;
} fu_state;

static int setup(void **state) {
    fu_state *s = calloc(1, sizeof *s);
    if (!s) return -1;
    *state = s;
    /* the NVIDIA small kernel's fused variants (read at serve_gemm_bf16_create) */
    if (!getenv("LAZYATTN_TUNE")) setenv("LAZYATTN_TUNE", "serve.fused_decode=1", 1);
    if (lazyattn_context_create(NULL, &s->ctx) != 0) return 0; /* tests skip */
    if (serve_gemm_bf16_create(s->ctx, &s->gemm)) {
        fprintf(stderr, "serve_gemm_bf16_create: %s\n", serve_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    fu_state *s = *state;
    serve_gemm_bf16_destroy(s->gemm);
    lazyattn_context_destroy(s->ctx);
    free(s);
    return 0;
}

/* xorshift64*: uniform in [-1, 1) */
static double urand(uint64_t *z) {
    *z ^= *z >> 12;
    *z ^= *z << 25;
    *z ^= *z >> 27;
    return (double)((*z * 0x2545F4914F6CDD1Dull) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static cl_mem buffer(fu_state *s, size_t bytes, const void *init) {
    cl_int err;
    cl_mem b = clCreateBuffer(lazyattn_context_cl_context(s->ctx),
                              CL_MEM_READ_WRITE | (init ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)init, &err);
    assert_int_equal(err, CL_SUCCESS);
    return b;
}

static void read_floats(fu_state *s, cl_mem b, size_t n, float *dst) {
    cl_int err = clEnqueueReadBuffer(lazyattn_context_queue(s->ctx), b, CL_TRUE, 0,
                                     n * sizeof(float), dst, 0, NULL, NULL);
    assert_int_equal(err, CL_SUCCESS);
}

#define IN 160   /* hidden (multiples of 32 and 16 here: shapes the NVIDIA small kernel takes) */
#define FFN 96   /* gate/up columns each */
#define QD 64    /* the QKV ranges: q, k, v columns */
#define KVD 32
#define X_ROW0 1 /* X starts at this row of its buffer */
#define EPS 1e-5f

/* One row count: QKV with the norm, gate/up with the norm and SwiGLU, down
 * from the f32 product onto a residual; every element against the bound,
 * the elements around the results untouched. */
static void run_chain(fu_state *s, int rows, uint64_t seed) {
    uint64_t z = seed;
    const size_t xn_all = (size_t)(X_ROW0 + rows) * IN;
    float *x = malloc(xn_all * sizeof(float)), *gain = malloc(IN * sizeof(float));
    uint16_t *wqkv = malloc((size_t)(QD + 2 * KVD) * IN * 2), *wgu = malloc((size_t)2 * FFN * IN * 2);
    uint16_t *wd = malloc((size_t)IN * FFN * 2);
    assert_true(x && gain && wqkv && wgu && wd);
    for (size_t i = 0; i < xn_all; i++) x[i] = (float)urand(&z);
    for (int r = 0; r < X_ROW0 + rows; r++) /* rows 0.05 .. 20 in magnitude */
        for (int k = 0; k < IN; k++) x[(size_t)r * IN + k] *= (float)pow(20.0, urand(&z));
    for (int k = 0; k < IN; k++) gain[k] = (float)(1.0 + 0.5 * urand(&z));
    for (size_t i = 0; i < (size_t)(QD + 2 * KVD) * IN; i++) wqkv[i] = serve_bf16_of((float)(urand(&z) * 0.5));
    for (size_t i = 0; i < (size_t)2 * FFN * IN; i++) wgu[i] = serve_bf16_of((float)(urand(&z) * 0.5));
    for (size_t i = 0; i < (size_t)IN * FFN; i++) wd[i] = serve_bf16_of((float)(urand(&z) * 0.5));
    cl_mem xb = buffer(s, xn_all * sizeof(float), x), gb = buffer(s, IN * sizeof(float), gain);
    cl_mem wqkv_b = buffer(s, (size_t)(QD + 2 * KVD) * IN * 2, wqkv);
    cl_mem wgu_b = buffer(s, (size_t)2 * FFN * IN * 2, wgu), wd_b = buffer(s, (size_t)IN * FFN * 2, wd);

    /* QKV: ranges with row strides (cols + 16) and offsets; a sentinel fill */
    const int cols[3] = {QD, KVD, KVD}, ld[3] = {QD + 16, KVD, KVD + 16}, off[3] = {16, 0, 32};
    size_t y_n[3];
    float *y0[3], *y[3];
    serve_gemm_args a;
    memset(&a, 0, sizeof a);
    a.rows = rows, a.out = QD + 2 * KVD, a.in = IN, a.x = xb, a.x_off = (size_t)X_ROW0 * IN;
    a.w = wqkv_b, a.n_outs = 3, a.x_f32 = 1, a.norm = gb, a.norm_eps = EPS;
    for (int r = 0; r < 3; r++) {
        y_n[r] = (size_t)off[r] + (size_t)(rows + 1) * (size_t)ld[r];
        y0[r] = malloc(y_n[r] * sizeof(float));
        y[r] = malloc(y_n[r] * sizeof(float));
        assert_true(y0[r] && y[r]);
        for (size_t i = 0; i < y_n[r]; i++) y0[r][i] = (float)urand(&z);
        a.outs[r] = (serve_gemm_out){buffer(s, y_n[r] * sizeof(float), y0[r]), (size_t)off[r],
                                     cols[r], ld[r]};
    }
    cl_command_queue q = lazyattn_context_queue(s->ctx);
    CHECK(serve_gemm_bf16_run(s->gemm, q, &a, NULL));

    /* gate/up + SwiGLU into act [rows, FFN] (row stride FFN: the down's X) */
    float *act = malloc((size_t)rows * FFN * sizeof(float));
    assert_non_null(act);
    cl_mem act_b = buffer(s, (size_t)rows * FFN * sizeof(float), NULL);
    serve_gemm_args gu = a;
    gu.out = 2 * FFN, gu.w = wgu_b, gu.n_outs = 1, gu.swiglu = 1;
    gu.outs[0] = (serve_gemm_out){act_b, 0, FFN, FFN};
    memset(&gu.outs[1], 0, 2 * sizeof gu.outs[1]);
    CHECK(serve_gemm_bf16_run(s->gemm, q, &gu, NULL));

    /* down: X = act (f32, staged as bf16), Y += onto a residual */
    float *res0 = malloc((size_t)rows * IN * sizeof(float)), *res = malloc((size_t)rows * IN * sizeof(float));
    assert_true(res0 && res);
    for (size_t i = 0; i < (size_t)rows * IN; i++) res0[i] = (float)urand(&z) * 4.0f;
    cl_mem res_b = buffer(s, (size_t)rows * IN * sizeof(float), res0);
    serve_gemm_args dn;
    memset(&dn, 0, sizeof dn);
    dn.rows = rows, dn.out = IN, dn.in = FFN, dn.x = act_b, dn.w = wd_b, dn.n_outs = 1;
    dn.outs[0] = (serve_gemm_out){res_b, 0, IN, IN};
    dn.x_f32 = 1, dn.accumulate = 1;
    CHECK(serve_gemm_bf16_run(s->gemm, q, &dn, NULL));

    for (int r = 0; r < 3; r++) read_floats(s, a.outs[r].buf, y_n[r], y[r]);
    read_floats(s, act_b, (size_t)rows * FFN, act);
    read_floats(s, res_b, (size_t)rows * IN, res);

    double xn[IN], amb[IN], worst = 0;
    for (int row = 0; row < rows; row++) {
        fref_norm_row(x + (size_t)(X_ROW0 + row) * IN, gain, EPS, IN, xn, amb);
        for (int r = 0, col0 = 0; r < 3; col0 += cols[r], r++)
            for (int c = 0; c < cols[r]; c++) {
                double bound, want = fref_dot(wqkv + (size_t)(col0 + c) * IN, xn, amb, IN, &bound);
                double got = y[r][(size_t)off[r] + (size_t)row * ld[r] + c];
                if (fabs(got - want) > bound)
                    fail_msg("seed %llu rows %d: QKV range %d row %d col %d: %.9g, want %.9g "
                             "(bound %.3g)", (unsigned long long)seed, rows, r, row, c, got,
                             want, bound);
                worst = fmax(worst, fabs(got - want) / bound);
            }
        for (int j = 0; j < FFN; j++) {
            double bg, bu, g = fref_dot(wgu + (size_t)j * IN, xn, amb, IN, &bg);
            double u = fref_dot(wgu + (size_t)(FFN + j) * IN, xn, amb, IN, &bu);
            double bound, want = fref_swiglu(g, bg, u, bu, &bound);
            double got = act[(size_t)row * FFN + j];
            if (fabs(got - want) > bound)
                fail_msg("seed %llu rows %d: SwiGLU row %d col %d: %.9g, want %.9g (bound %.3g)",
                         (unsigned long long)seed, rows, row, j, got, want, bound);
            worst = fmax(worst, fabs(got - want) / bound);
        }
        /* down from the device's own product: bf16 of it exactly as staged */
        for (int c = 0; c < IN; c++) {
            double sum = 0, mag = 0;
            for (int k = 0; k < FFN; k++) {
                double p = fref_bf(act[(size_t)row * FFN + k]) * serve_float_of_bf16(wd[(size_t)c * FFN + k]);
                sum += p, mag += fabs(p);
            }
            double want = sum + res0[(size_t)row * IN + c];
            double bound = 2.0 * (FFN + 2) * ldexp(mag + fabs(want), -24) + 1e-30;
            double got = res[(size_t)row * IN + c];
            if (fabs(got - want) > bound)
                fail_msg("seed %llu rows %d: down row %d col %d: %.9g, want %.9g (bound %.3g)",
                         (unsigned long long)seed, rows, row, c, got, want, bound);
            worst = fmax(worst, fabs(got - want) / bound);
        }
    }
    /* around the QKV results: the row-stride gaps, the offsets, the row past `rows` */
    for (int r = 0; r < 3; r++)
        for (size_t i = 0; i < y_n[r]; i++) {
            long rel = (long)i - off[r], row = rel < 0 ? -1 : rel / ld[r], col = rel < 0 ? -1 : rel % ld[r];
            if ((row < 0 || row >= rows || col >= cols[r]) && memcmp(&y[r][i], &y0[r][i], 4))
                fail_msg("rows %d: QKV range %d element %zu outside the result changed", rows, r, i);
        }
    print_message("rows %2d: worst error %.3f of its bound\n", rows, worst);
    for (int r = 0; r < 3; r++) {
        clReleaseMemObject(a.outs[r].buf);
        free(y0[r]);
        free(y[r]);
    }
    clReleaseMemObject(xb), clReleaseMemObject(gb), clReleaseMemObject(wqkv_b);
    clReleaseMemObject(wgu_b), clReleaseMemObject(wd_b), clReleaseMemObject(act_b);
    clReleaseMemObject(res_b);
    free(x), free(gain), free(wqkv), free(wgu), free(wd), free(act), free(res0), free(res);
}

static void test_fused_chain(void **state) {
    fu_state *s = *state;
    if (!s->ctx) {
        print_message("no OpenCL device: skipped\n");
        skip();
    }
    static const int rows[] = {1, 2, 5, 8, 16, 33, 64};
    int fused = 1;
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        fused &= serve_gemm_bf16_fused(s->gemm, rows[i]);
    /* offered wherever no tensor-core kernel runs (the portable kernel) */
    if (!serve_gemm_bf16_has_tensor_cores(s->gemm)) assert_int_equal(fused, 1);
    print_message("the fused variants %s offered at rows 1..64 on %s\n", fused ? "are" : "are not",
                  lazyattn_context_device_name(s->ctx));
    int64_t before[SERVE_GEMM_KERNEL_COUNT], after[SERVE_GEMM_KERNEL_COUNT];
    serve_gemm_bf16_counts(s->gemm, before);
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        run_chain(s, rows[i], 0x9E3779B97F4A7C15ull ^ (uint64_t)rows[i]);
    serve_gemm_bf16_counts(s->gemm, after);
    const int64_t small = after[SERVE_GEMM_KERNEL_SMALL] - before[SERVE_GEMM_KERNEL_SMALL];
    const int64_t portable = after[SERVE_GEMM_KERNEL_PORTABLE] - before[SERVE_GEMM_KERNEL_PORTABLE];
    print_message("ran: small kernel %lld, portable %lld\n", (long long)small, (long long)portable);
    /* three projections a row count, all on the kernel that offers them */
    const int64_t n = 3 * (int64_t)(sizeof rows / sizeof *rows);
    assert_int_equal(serve_gemm_bf16_has_tensor_cores(s->gemm) && fused ? small : portable, n);
}

/* The portable kernel alone (portable_only) at 1 and 64 rows: on NVIDIA the
 * chain above may have run the small kernel. */
static void test_fused_portable(void **state) {
    fu_state *s = *state;
    if (!s->ctx) {
        print_message("no OpenCL device: skipped\n");
        skip();
    }
    int64_t before[SERVE_GEMM_KERNEL_COUNT], after[SERVE_GEMM_KERNEL_COUNT];
    serve_gemm_bf16_counts(s->gemm, before);
    serve_gemm_bf16_portable_only(s->gemm, 1);
    assert_int_equal(serve_gemm_bf16_fused(s->gemm, 64), 1);
    run_chain(s, 1, 7);
    run_chain(s, 64, 8);
    serve_gemm_bf16_portable_only(s->gemm, 0);
    serve_gemm_bf16_counts(s->gemm, after);
    assert_int_equal(after[SERVE_GEMM_KERNEL_PORTABLE] - before[SERVE_GEMM_KERNEL_PORTABLE], 6);
}

static void test_fused_bad_input(void **state) {
    fu_state *s = *state;
    assert_int_equal(serve_gemm_bf16_fused(NULL, 1), 0);
    if (!s->ctx) {
        print_message("no OpenCL device: skipped\n");
        skip();
    }
    assert_int_equal(serve_gemm_bf16_fused(s->gemm, 0), 0);
    cl_mem big = buffer(s, 1 << 16, NULL), small = buffer(s, 64, NULL);
    serve_gemm_args good;
    memset(&good, 0, sizeof good);
    good.rows = 4, good.out = 64, good.in = 32, good.x = big, good.w = big, good.n_outs = 1;
    good.outs[0] = (serve_gemm_out){big, 0, 32, 32};
    good.x_f32 = 1, good.norm = big, good.norm_eps = EPS, good.swiglu = 1;
    cl_command_queue q = lazyattn_context_queue(s->ctx);
    CHECK(serve_gemm_bf16_run(s->gemm, q, &good, NULL));
    CHECK(clFinish(q) == CL_SUCCESS ? 0 : LAZYATTN_STATUS_OPENCL);
    serve_gemm_args bad[10];
    const char *says[10]; /* what the message must name */
    int n = 0;
    for (int i = 0; i < 10; i++) bad[i] = good;
    says[n] = "x_f32 2", bad[n++].x_f32 = 2;
    says[n] = "swiglu -1", bad[n++].swiglu = -1;
    says[n] = "needs x_f32 1", bad[n++].x_f32 = 0; /* a gain without f32 X */
    says[n] = "epsilon", bad[n++].norm_eps = 0.0f;
    says[n] = "epsilon", bad[n++].norm_eps = NAN;
    says[n] = "even out", bad[n].out = 63, bad[n++].outs[0].cols = 31;
    says[n] = "accumulate 0", bad[n++].accumulate = 1; /* swiglu onto Y */
    says[n] = "out / 2", bad[n].outs[0].cols = 64, bad[n++].outs[0].ld = 64;
    says[n] = "RMSNorm gain holds 64 bytes", bad[n++].norm = small; /* [in] f32: 128 bytes */
    says[n] = "X holds 64 bytes", bad[n++].x = small; /* 4 f32 rows of 32: 512 bytes */
    for (int i = 0; i < n; i++) {
        assert_int_equal(serve_gemm_bf16_run(s->gemm, q, &bad[i], NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
        if (!strstr(serve_last_error(), says[i]))
            fail_msg("bad case %d: \"%s\" does not say \"%s\"", i, serve_last_error(), says[i]);
    }
    clReleaseMemObject(big);
    clReleaseMemObject(small);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_bad_input),
        cmocka_unit_test(test_fused_chain),
        cmocka_unit_test(test_fused_portable),
    };
    return cmocka_run_group_tests_name("gemm_fused", tests, setup, teardown);
}
