/* SPDX-License-Identifier: Apache-2.0 */
/* serve/'s bf16 projection path (issue 16) on the default device (PoCL in
 * CI, where the portable kernel runs):
 *  - the bf16 GEMM (serve_gemm_bf16_run) against a float64 reference over
 *    awkward shapes (rows 1, 3, 33, 64, 65, 130; `in` not a multiple of the
 *    tile; one to three output ranges with row strides and offsets; X from
 *    a row offset; accumulate), through the portable kernel and through the
 *    dispatcher (the same on PoCL; the tensor-core kernels where built in);
 *  - bad arguments to every new function: a status and a message, no crash;
 *  - the dispatcher's fallback, with stand-ins for the tensor-core kernels:
 *    UNSUPPORTED falls back to the portable kernel, any other failure is
 *    returned;
 *  - a bf16 model loaded from a GGUF file the test writes (random f32 and
 *    f16 weights that bf16 does not hold exactly) against a float64 forward
 *    that rounds weights and every GEMM input to bf16 at the points the
 *    model does: prefill logits and two decode steps, untied and tied LM
 *    head; the conversion's edges (past bf16's range refused in bf16 mode
 *    only, the largest value that rounds to a finite bf16 loaded, NaN and
 *    infinity refused in both modes);
 *  - device memory per mode: bf16 holds no f32 projection weights;
 *  - serve_model_destroy, and a serve_model_create failing part way, release
 *    every buffer and program in both modes (the context's reference count);
 *  - the mode auto takes: bf16 only on NVIDIA's fast path, f32 on PoCL and
 *    under LAZYATTN_PORTABLE=1. */
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

#include "gemm_bf16.h"
#include "serve.h"
#include "context_refs.h"
#include "serve_check.h"

typedef struct bf_state {
    lazyattn_context *ctx;
    serve_gemm_bf16 *gemm;
} bf_state;

static int setup(void **state) {
    bf_state *s = calloc(1, sizeof *s);
    if (!s) return -1;
    *state = s;
    if (lazyattn_context_create(NULL, &s->ctx) != 0) return 0; /* tests skip */
    if (serve_gemm_bf16_create(s->ctx, &s->gemm)) {
        fprintf(stderr, "serve_gemm_bf16_create: %s\n", serve_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    bf_state *s = *state;
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

static double bf(double v) { return serve_float_of_bf16(serve_bf16_of((float)v)); }

static cl_mem buffer(bf_state *s, size_t bytes, const void *init) {
    cl_int err;
    cl_mem b = clCreateBuffer(lazyattn_context_cl_context(s->ctx),
                              CL_MEM_READ_WRITE | (init ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)init, &err);
    assert_int_equal(err, CL_SUCCESS);
    return b;
}

/* ---- the GEMM alone ---------------------------------------------------- */

typedef struct gemm_case {
    int rows, in;
    int n_outs;
    int cols[3], ld_extra[3], off[3]; /* per range: columns, row stride - cols, offset */
    int x_row_off;                    /* X starts at this row of its buffer */
    int accumulate;
} gemm_case;

static const gemm_case gemm_cases[] = {
    {1, 50, 1, {40}, {0}, {0}, 0, 0},
    {3, 70, 3, {32, 16, 48}, {5, 0, 3}, {7, 0, 2}, 0, 0},
    {64, 64, 1, {64}, {0}, {0}, 0, 1},
    {65, 17, 2, {20, 13}, {0, 4}, {0, 9}, 1, 1},
    {130, 129, 3, {40, 1, 59}, {1, 2, 0}, {3, 0, 11}, 3, 1},
    {130, 31, 2, {96, 96}, {0, 0}, {0, 0}, 0, 0}, /* a fused gate/up's two halves */
    /* shapes the tensor-core kernels take on NVIDIA (in a multiple of 32,
     * cols of 16 / 128, even strides and offsets), so the dispatcher's
     * result is theirs there: the small kernel, then the large one */
    {33, 96, 3, {32, 16, 48}, {16, 0, 2}, {4, 0, 6}, 1, 1},
    {130, 64, 2, {128, 128}, {0, 2}, {0, 4}, 8, 1},
};

/* One case through the portable kernel (portable_only) or the dispatcher:
 * every written element within the f32 accumulation bound of the float64
 * sum of the exact bf16 products; the row-stride gaps, the elements before
 * each range's offset and the rows past `rows` untouched. */
static void run_gemm_case(bf_state *s, const gemm_case *c, int portable_only, uint64_t seed) {
    int out = 0;
    for (int r = 0; r < c->n_outs; r++) out += c->cols[r];
    size_t pad = ((size_t)c->rows + SERVE_GEMM_ROW_PAD - 1) / SERVE_GEMM_ROW_PAD *
                 SERVE_GEMM_ROW_PAD;
    size_t x_n = ((size_t)c->x_row_off + pad) * c->in, w_n = (size_t)out * c->in;
    uint16_t *x = malloc(x_n * 2), *w = malloc(w_n * 2);
    assert_non_null(x);
    assert_non_null(w);
    uint64_t z = seed;
    for (size_t i = 0; i < x_n; i++) x[i] = serve_bf16_of((float)urand(&z));
    for (size_t i = 0; i < w_n; i++) w[i] = serve_bf16_of((float)(urand(&z) * 0.5));
    cl_mem xb = buffer(s, x_n * 2, x), wb = buffer(s, w_n * 2, w);
    serve_gemm_args a;
    memset(&a, 0, sizeof a);
    a.rows = c->rows, a.out = out, a.in = c->in, a.x = xb, a.w = wb, a.n_outs = c->n_outs;
    a.x_off = (size_t)c->x_row_off * c->in, a.accumulate = c->accumulate;
    float *y0[3], *y[3];
    size_t y_n[3];
    for (int r = 0; r < c->n_outs; r++) {
        int ld = c->cols[r] + c->ld_extra[r];
        /* two rows more than written: rows past `rows` must stay */
        y_n[r] = (size_t)c->off[r] + (size_t)(c->rows + 2) * ld;
        y0[r] = malloc(y_n[r] * sizeof(float));
        y[r] = malloc(y_n[r] * sizeof(float));
        assert_non_null(y0[r]);
        assert_non_null(y[r]);
        for (size_t i = 0; i < y_n[r]; i++) y0[r][i] = (float)urand(&z) * 4.0f;
        a.outs[r] = (serve_gemm_out){buffer(s, y_n[r] * sizeof(float), y0[r]), (size_t)c->off[r],
                                     c->cols[r], ld};
    }
    serve_gemm_bf16_portable_only(s->gemm, portable_only);
    int64_t before[SERVE_GEMM_KERNEL_COUNT], after[SERVE_GEMM_KERNEL_COUNT];
    serve_gemm_bf16_counts(s->gemm, before);
    cl_command_queue q = lazyattn_context_queue(s->ctx);
    CHECK(serve_gemm_bf16_run(s->gemm, q, &a, NULL));
    serve_gemm_bf16_counts(s->gemm, after);
    serve_gemm_bf16_portable_only(s->gemm, 0);
    int64_t ran = 0;
    int which = -1;
    for (int k = 0; k < SERVE_GEMM_KERNEL_COUNT; k++) {
        ran += after[k] - before[k];
        if (after[k] != before[k]) which = k;
    }
    assert_int_equal(ran, 1);
    if (portable_only)
        assert_int_equal(after[SERVE_GEMM_KERNEL_PORTABLE] - before[SERVE_GEMM_KERNEL_PORTABLE], 1);
    for (int r = 0; r < c->n_outs; r++)
        CHECK(clEnqueueReadBuffer(q, a.outs[r].buf, CL_TRUE, 0, y_n[r] * sizeof(float), y[r], 0,
                                  NULL, NULL) == CL_SUCCESS ? 0 : LAZYATTN_STATUS_OPENCL);
    double worst = 0;
    int col0 = 0;
    for (int r = 0; r < c->n_outs; r++) {
        int ld = c->cols[r] + c->ld_extra[r];
        for (size_t i = 0; i < y_n[r]; i++) {
            long rel = (long)i - c->off[r];
            long row = rel < 0 ? -1 : rel / ld, col = rel < 0 ? -1 : rel % ld;
            if (row < 0 || row >= c->rows || col >= c->cols[r]) {
                if (memcmp(&y[r][i], &y0[r][i], sizeof(float)) != 0)
                    fail_msg("rows %d in %d range %d: element %zu outside the result changed",
                             c->rows, c->in, r, i);
                continue;
            }
            const uint16_t *xr = x + ((size_t)c->x_row_off + (size_t)row) * c->in;
            const uint16_t *wr = w + (size_t)(col0 + col) * c->in;
            double sum = 0, mag = 0;
            for (int k = 0; k < c->in; k++) {
                double p = (double)serve_float_of_bf16(xr[k]) * serve_float_of_bf16(wr[k]);
                sum += p;
                mag += fabs(p);
            }
            double want = sum + (c->accumulate ? y0[r][i] : 0.0);
            /* f32 sums of `in` products (exact in f32: 8-bit significands)
             * in any order: |error| <= in * 2^-24 * sum |p| (plus the
             * residual's add), with a factor 2 to spare */
            double bound = 2.0 * (c->in + 1) * ldexp(mag + fabs(want), -24) + 1e-30;
            double err = fabs(y[r][i] - want);
            if (err > bound)
                fail_msg("rows %d out %d in %d range %d row %ld col %ld: %.9g, want %.9g "
                         "(bound %.3g)", c->rows, out, c->in, r, row, col, y[r][i], want, bound);
            worst = fmax(worst, err / bound);
        }
        col0 += c->cols[r];
    }
    static const char *const kernel_names[SERVE_GEMM_KERNEL_COUNT] = {
        [SERVE_GEMM_KERNEL_PORTABLE] = "portable", [SERVE_GEMM_KERNEL_LARGE] = "tensor-core large",
        [SERVE_GEMM_KERNEL_SMALL] = "tensor-core small"};
    printf("# rows %3d out %3d in %3d, %d range(s)%s, %s: %s kernel, worst error %.3g of the "
           "f32 bound\n", c->rows, out, c->in, c->n_outs, c->accumulate ? ", accumulate" : "",
           portable_only ? "portable only" : "dispatcher", kernel_names[which], worst);
    for (int r = 0; r < c->n_outs; r++) {
        clReleaseMemObject(a.outs[r].buf);
        free(y0[r]);
        free(y[r]);
    }
    clReleaseMemObject(xb);
    clReleaseMemObject(wb);
    free(x);
    free(w);
}

static void test_gemm_shapes(void **state) {
    bf_state *s = *state;
    if (!s->ctx) skip();
    printf("# tensor-core kernels: %s\n",
           serve_gemm_bf16_has_tensor_cores(s->gemm) ? "built in and created" : "none");
    for (size_t i = 0; i < sizeof gemm_cases / sizeof gemm_cases[0]; i++) {
        run_gemm_case(s, &gemm_cases[i], 1, 0x9E3779B97F4A7C15ull + i);
        run_gemm_case(s, &gemm_cases[i], 0, 0x9E3779B97F4A7C15ull + i);
    }
}

/* ---- bad arguments -------------------------------------------------------- */

static void expect_invalid(int st, const char *what) {
    if (st != LAZYATTN_STATUS_INVALID_ARGUMENT)
        fail_msg("%s: status %d, want INVALID_ARGUMENT (%s)", what, st, serve_last_error());
    if (!serve_last_error()[0]) fail_msg("%s: no message", what);
    printf("# %-28s -> %s\n", what, serve_last_error());
}

static void test_bad_arguments(void **state) {
    bf_state *s = *state;
    /* without a device */
    serve_gemm_bf16 *g = (serve_gemm_bf16 *)&g;
    expect_invalid(serve_gemm_bf16_create(NULL, &g), "create: ctx NULL");
    assert_null(g);
    expect_invalid(serve_gemm_bf16_create(s->ctx ? s->ctx : (lazyattn_context *)1, NULL),
                   "create: out NULL");
    serve_gemm_bf16_destroy(NULL);
    serve_gemm_bf16_portable_only(NULL, 1);
    assert_int_equal(serve_gemm_bf16_has_tensor_cores(NULL), 0);
    int64_t counts[SERVE_GEMM_KERNEL_COUNT] = {1, 2, 3};
    serve_gemm_bf16_counts(NULL, counts);
    assert_true(counts[0] == 0 && counts[1] == 0 && counts[2] == 0);
    serve_gemm_bf16_counts(NULL, NULL);
    expect_invalid(serve_gemm_args_check(NULL, NULL), "check: args NULL");
    serve_gemm_mode mode = SERVE_GEMM_F32;
    expect_invalid(serve_gemm_mode_parse("f16", &mode), "gemm mode \"f16\"");
    expect_invalid(serve_gemm_mode_parse(NULL, &mode), "gemm mode NULL");
    expect_invalid(serve_gemm_mode_parse("bf16", NULL), "gemm mode out NULL");
    assert_int_equal(mode, SERVE_GEMM_F32);
    CHECK(serve_gemm_mode_parse("bf16", &mode));
    assert_int_equal(mode, SERVE_GEMM_BF16);
    assert_string_equal(serve_gemm_mode_name(SERVE_GEMM_AUTO), "auto");
    assert_string_equal(serve_gemm_mode_name((serve_gemm_mode)9), "?");
    serve_model_config cfg;
    CHECK(serve_model_config_preset(&cfg, "tiny"));
    assert_int_equal(cfg.gemm, SERVE_GEMM_AUTO);
    cfg.gemm = (serve_gemm_mode)3;
    expect_invalid(serve_model_config_check(&cfg), "model config gemm 3");
    cfg.gemm = (serve_gemm_mode)-1;
    expect_invalid(serve_model_config_check(&cfg), "model config gemm -1");
    assert_int_equal(serve_model_uses_bf16(NULL), 0);
    assert_null(serve_model_gemm_bf16(NULL));
    uint64_t wb = 1, sb = 1;
    serve_model_device_bytes(NULL, &wb, &sb);
    assert_true(wb == 0 && sb == 0);
    if (!s->ctx) skip();
    serve_model *m = (serve_model *)&m;
    expect_invalid(serve_model_create(s->ctx, &cfg, &m), "model create gemm -1");
    assert_null(m);

    /* a good call, then one field broken at a time */
    enum { R = 3, OUT = 24, IN = 20 };
    cl_mem x = buffer(s, (size_t)SERVE_GEMM_ROW_PAD * IN * 2, NULL);
    cl_mem x_short = buffer(s, (size_t)R * IN * 2, NULL); /* not padded */
    cl_mem w = buffer(s, (size_t)OUT * IN * 2, NULL), w_short = buffer(s, (size_t)OUT * IN, NULL);
    cl_mem y = buffer(s, (size_t)R * OUT * 4, NULL);
    cl_command_queue q = lazyattn_context_queue(s->ctx);
    uint16_t one = serve_bf16_of(0.5f);
    CHECK(clEnqueueFillBuffer(q, x, &one, 2, 0, (size_t)SERVE_GEMM_ROW_PAD * IN * 2, 0, NULL,
                              NULL) == CL_SUCCESS ? 0 : LAZYATTN_STATUS_OPENCL);
    CHECK(clEnqueueFillBuffer(q, w, &one, 2, 0, (size_t)OUT * IN * 2, 0, NULL, NULL) == CL_SUCCESS
              ? 0 : LAZYATTN_STATUS_OPENCL);
    serve_gemm_args good;
    memset(&good, 0, sizeof good);
    good.rows = R, good.out = OUT, good.in = IN, good.x = x, good.w = w, good.n_outs = 2;
    good.outs[0] = (serve_gemm_out){y, 0, 16, OUT};
    good.outs[1] = (serve_gemm_out){y, 16, 8, OUT};
    CHECK(serve_gemm_bf16_run(s->gemm, q, &good, NULL));
    float got[R * OUT];
    CHECK(clEnqueueReadBuffer(q, y, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL) == CL_SUCCESS
              ? 0 : LAZYATTN_STATUS_OPENCL);
    for (int i = 0; i < R * OUT; i++) assert_true(got[i] == 0.25f * IN);

    expect_invalid(serve_gemm_bf16_run(NULL, q, &good, NULL), "run: g NULL");
    expect_invalid(serve_gemm_bf16_run(s->gemm, NULL, &good, NULL), "run: queue NULL");
    expect_invalid(serve_gemm_bf16_run(s->gemm, q, NULL, NULL), "run: args NULL");
    serve_gemm_args a;
#define TRY_BAD(what, stmt)                                                        \
    do {                                                                           \
        a = good;                                                                  \
        stmt;                                                                      \
        expect_invalid(serve_gemm_bf16_run(s->gemm, q, &a, NULL), what);           \
        expect_invalid(serve_gemm_args_check(&a, "check"), what);                  \
    } while (0)
    TRY_BAD("rows 0", a.rows = 0);
    TRY_BAD("rows -1", a.rows = -1);
    TRY_BAD("out 0", a.out = 0);
    TRY_BAD("in 0", a.in = 0);
    TRY_BAD("X NULL", a.x = NULL);
    TRY_BAD("W NULL", a.w = NULL);
    TRY_BAD("no output range", a.n_outs = 0);
    TRY_BAD("4 output ranges", a.n_outs = 4);
    TRY_BAD("ranges sum to 23 of 24", a.outs[1].cols = 7);
    TRY_BAD("out 25, ranges 24", a.out = 25);
    TRY_BAD("range of 0 columns", (a.outs[1].cols = 0, a.outs[0].cols = 24));
    TRY_BAD("ld < cols", a.outs[0].ld = 15);
    TRY_BAD("range buffer NULL", a.outs[1].buf = NULL);
    TRY_BAD("accumulate 2", a.accumulate = 2);
    TRY_BAD("X not padded", a.x = x_short);
    TRY_BAD("X offset past the padding", a.x_off = 1);
    TRY_BAD("X offset huge", a.x_off = (size_t)1 << 60);
    TRY_BAD("W too small", a.w = w_short);
    TRY_BAD("W rows past the buffer", (a.out = 48, a.outs[1].cols = 32, a.outs[1].ld = 48));
    TRY_BAD("Y row past the buffer", a.rows = 4);
    TRY_BAD("Y offset past the buffer", a.outs[1].off = 17);
    TRY_BAD("Y offset huge", a.outs[0].off = (size_t)1 << 62);
#undef TRY_BAD
    /* nothing above wrote: y still holds the good result */
    CHECK(clEnqueueReadBuffer(q, y, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL) == CL_SUCCESS
              ? 0 : LAZYATTN_STATUS_OPENCL);
    for (int i = 0; i < R * OUT; i++) assert_true(got[i] == 0.25f * IN);
    clReleaseMemObject(x);
    clReleaseMemObject(x_short);
    clReleaseMemObject(w);
    clReleaseMemObject(w_short);
    clReleaseMemObject(y);
}

/* ---- the dispatcher's fallback --------------------------------------------- */

/* A stand-in for a tensor-core kernel: answers `answer` and writes nothing. */
typedef struct fake_kernel {
    int answer;
    int calls;
} fake_kernel;

static int fake_run(void *state, cl_command_queue queue, const serve_gemm_args *args,
                    cl_event *event) {
    (void)queue, (void)args, (void)event;
    fake_kernel *f = state;
    f->calls++;
    if (f->answer == LAZYATTN_STATUS_UNSUPPORTED)
        return serve_fail(f->answer, "fake kernel: shape not covered");
    if (f->answer) return serve_fail(f->answer, "fake kernel: failed");
    return LAZYATTN_STATUS_OK;
}

/* Through serve_gemm_bf16_override_for_testing, on any device: a tensor-core
 * kernel answering UNSUPPORTED falls back to the portable one (the result
 * checked against float64 by run_gemm_case); any other failure is returned
 * as it is, the portable kernel not run and Y untouched; a success counts
 * for that kernel; rows <= 64 go to the small slot, more to the large one;
 * portable_only bypasses both. */
static void test_dispatcher_fallback(void **state) {
    bf_state *s = *state;
    expect_invalid(serve_gemm_bf16_override_for_testing(NULL, SERVE_GEMM_KERNEL_SMALL, fake_run,
                                                         NULL),
                   "override: g NULL");
    if (!s->ctx) skip();
    expect_invalid(serve_gemm_bf16_override_for_testing(s->gemm, SERVE_GEMM_KERNEL_PORTABLE,
                                                         fake_run, NULL),
                   "override: the portable kernel");
    fake_kernel small = {LAZYATTN_STATUS_UNSUPPORTED, 0}, large = {LAZYATTN_STATUS_UNSUPPORTED, 0};
    CHECK(serve_gemm_bf16_override_for_testing(s->gemm, SERVE_GEMM_KERNEL_SMALL, fake_run, &small));
    CHECK(serve_gemm_bf16_override_for_testing(s->gemm, SERVE_GEMM_KERNEL_LARGE, fake_run, &large));
    /* UNSUPPORTED: the portable kernel's result (run_gemm_case asserts one run, and checks it) */
    int64_t before[SERVE_GEMM_KERNEL_COUNT], after[SERVE_GEMM_KERNEL_COUNT];
    serve_gemm_bf16_counts(s->gemm, before);
    run_gemm_case(s, &gemm_cases[1], 0, 41); /* 3 rows: the small slot */
    run_gemm_case(s, &gemm_cases[3], 0, 42); /* 65 rows: the large slot */
    serve_gemm_bf16_counts(s->gemm, after);
    assert_int_equal(small.calls, 1);
    assert_int_equal(large.calls, 1);
    assert_int_equal(after[SERVE_GEMM_KERNEL_PORTABLE] - before[SERVE_GEMM_KERNEL_PORTABLE], 2);
    run_gemm_case(s, &gemm_cases[1], 1, 43); /* portable_only: not asked */
    assert_int_equal(small.calls, 1);

    /* another failure: returned, nothing else runs, Y as it was */
    enum { R = 3, OUT = 16, IN = 32 };
    cl_mem x = buffer(s, (size_t)SERVE_GEMM_ROW_PAD * IN * 2, NULL);
    cl_mem w = buffer(s, (size_t)OUT * IN * 2, NULL);
    float y0[R * OUT], got[R * OUT];
    for (int i = 0; i < R * OUT; i++) y0[i] = 1.5f + (float)i;
    cl_mem y = buffer(s, sizeof y0, y0);
    cl_command_queue q = lazyattn_context_queue(s->ctx);
    uint16_t half = serve_bf16_of(0.5f);
    CHECK(clEnqueueFillBuffer(q, x, &half, 2, 0, (size_t)SERVE_GEMM_ROW_PAD * IN * 2, 0, NULL,
                              NULL) == CL_SUCCESS ? 0 : LAZYATTN_STATUS_OPENCL);
    CHECK(clEnqueueFillBuffer(q, w, &half, 2, 0, (size_t)OUT * IN * 2, 0, NULL, NULL) ==
                  CL_SUCCESS ? 0 : LAZYATTN_STATUS_OPENCL);
    serve_gemm_args a;
    memset(&a, 0, sizeof a);
    a.rows = R, a.out = OUT, a.in = IN, a.x = x, a.w = w, a.n_outs = 1;
    a.outs[0] = (serve_gemm_out){y, 0, OUT, OUT};
    small.answer = LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY;
    serve_gemm_bf16_counts(s->gemm, before);
    int st = serve_gemm_bf16_run(s->gemm, q, &a, NULL);
    serve_gemm_bf16_counts(s->gemm, after);
    printf("# a kernel failing with OUT_OF_DEVICE_MEMORY -> %d: %s\n", st, serve_last_error());
    assert_int_equal(st, LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY);
    assert_non_null(strstr(serve_last_error(), "fake kernel: failed"));
    assert_int_equal(small.calls, 2);
    for (int k = 0; k < SERVE_GEMM_KERNEL_COUNT; k++) assert_true(after[k] == before[k]);
    CHECK(clEnqueueReadBuffer(q, y, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL) == CL_SUCCESS
              ? 0 : LAZYATTN_STATUS_OPENCL);
    assert_memory_equal(got, y0, sizeof got);

    /* success: counted for the small kernel (which wrote nothing here) */
    small.answer = 0;
    CHECK(serve_gemm_bf16_run(s->gemm, q, &a, NULL));
    serve_gemm_bf16_counts(s->gemm, after);
    assert_int_equal(after[SERVE_GEMM_KERNEL_SMALL] - before[SERVE_GEMM_KERNEL_SMALL], 1);
    assert_int_equal(after[SERVE_GEMM_KERNEL_PORTABLE], before[SERVE_GEMM_KERNEL_PORTABLE]);

    /* overrides removed: the real kernels (none on PoCL) or the portable one */
    CHECK(serve_gemm_bf16_override_for_testing(s->gemm, SERVE_GEMM_KERNEL_SMALL, NULL, NULL));
    CHECK(serve_gemm_bf16_override_for_testing(s->gemm, SERVE_GEMM_KERNEL_LARGE, NULL, NULL));
    CHECK(serve_gemm_bf16_run(s->gemm, q, &a, NULL));
    assert_int_equal(small.calls, 3);
    CHECK(clEnqueueReadBuffer(q, y, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL) == CL_SUCCESS
              ? 0 : LAZYATTN_STATUS_OPENCL);
    for (int i = 0; i < R * OUT; i++) assert_true(got[i] == 0.25f * IN);
    clReleaseMemObject(x);
    clReleaseMemObject(w);
    clReleaseMemObject(y);
}

/* ---- a bf16 model from a GGUF file, against a float64 forward ------------- */

enum { G_LAYERS = 2, G_HIDDEN = 64, G_HEADS = 4, G_KV = 2, G_HD = 16, G_FFN = 96, G_VOCAB = 50 };
enum { G_QD = G_HEADS * G_HD, G_KVD = G_KV * G_HD };

typedef struct gtensor {
    char name[48];
    uint64_t d0, d1; /* ggml order: [d1, d0] row-major, d0 = in */
    uint32_t type;   /* 0 f32, 1 f16 */
    float *v;        /* the values the loader reads */
} gtensor;

typedef struct gmodel {
    gtensor t[3 + 9 * G_LAYERS];
    int n;
    int tied;
} gmodel;

static gtensor *gfind(gmodel *g, const char *name) {
    for (int i = 0; i < g->n; i++)
        if (strcmp(g->t[i].name, name) == 0) return &g->t[i];
    if (g->tied && strcmp(name, "output.weight") == 0) return gfind(g, "token_embd.weight");
    fail_msg("no tensor %s", name);
    return NULL;
}

/* Random weights (variance 1 / in for projections) not exact in bf16; f16
 * tensors hold k / 2048 (exact in f16, not in bf16 for |k| > 256). */
static void gmodel_make(gmodel *g, int tied, uint64_t seed) {
    memset(g, 0, sizeof *g);
    g->tied = tied;
    uint64_t z = seed;
    struct {
        const char *name;
        uint64_t d0, d1;
        uint32_t type;
        double scale, offset;
    } spec[3 + 9] = {
        {"token_embd.weight", G_HIDDEN, G_VOCAB, 0, 1.7, 0},
        {"output_norm.weight", G_HIDDEN, 1, 0, 0.1, 1},
        {"output.weight", G_HIDDEN, G_VOCAB, 0, 0, 0},
        {"attn_norm", G_HIDDEN, 1, 0, 0.1, 1},
        {"attn_q", G_HIDDEN, G_QD, 0, 0, 0},
        {"attn_k", G_HIDDEN, G_KVD, 1, 0, 0},
        {"attn_v", G_HIDDEN, G_KVD, 0, 0, 0},
        {"attn_output", G_QD, G_HIDDEN, 0, 0, 0},
        {"ffn_norm", G_HIDDEN, 1, 0, 0.1, 1},
        {"ffn_gate", G_HIDDEN, G_FFN, 0, 0, 0},
        {"ffn_up", G_HIDDEN, G_FFN, 1, 0, 0},
        {"ffn_down", G_FFN, G_HIDDEN, 0, 0, 0},
    };
    for (int i = 0; i < 3 + 9 * G_LAYERS; i++) {
        int si = i < 3 ? i : 3 + (i - 3) % 9;
        if (tied && si == 2) continue;
        gtensor *t = &g->t[g->n++];
        if (i < 3)
            snprintf(t->name, sizeof t->name, "%s", spec[si].name);
        else
            snprintf(t->name, sizeof t->name, "blk.%d.%s.weight", (i - 3) / 9, spec[si].name);
        t->d0 = spec[si].d0, t->d1 = spec[si].d1, t->type = spec[si].type;
        double scale = spec[si].scale ? spec[si].scale : sqrt(3.0 / (double)t->d0);
        t->v = malloc(t->d0 * t->d1 * sizeof(float));
        assert_non_null(t->v);
        for (uint64_t e = 0; e < t->d0 * t->d1; e++) {
            double u = urand(&z);
            if (t->type == 1) { /* k / 2048, |value| <= scale, never 0 */
                int k = (int)lround(u * scale * 2048.0);
                t->v[e] = (float)(k ? k : 1) / 2048.0f;
            } else {
                t->v[e] = (float)(spec[si].offset + scale * u);
            }
        }
    }
}

static void gmodel_free(gmodel *g) {
    for (int i = 0; i < g->n; i++) free(g->t[i].v);
}

static void put(FILE *f, const void *p, size_t n) { assert_int_equal(fwrite(p, 1, n, f), n); }
static void put_u32(FILE *f, uint32_t v) { put(f, &v, 4); } /* little-endian hosts */
static void put_u64(FILE *f, uint64_t v) { put(f, &v, 8); }
static void put_str(FILE *f, const char *s) {
    put_u64(f, strlen(s));
    put(f, s, strlen(s));
}
static void kv_u32(FILE *f, const char *k, uint32_t v) {
    put_str(f, k);
    put_u32(f, 4);
    put_u32(f, v);
}
static void kv_f32(FILE *f, const char *k, float v) {
    put_str(f, k);
    put_u32(f, 6);
    put(f, &v, 4);
}

static uint16_t f16_of(float v) { /* exact for k / 2048, 0 < |k| < 2048 */
    uint32_t x;
    memcpy(&x, &v, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int e = (int)((x >> 23) & 255) - 127 + 15;
    return (uint16_t)(sign | (uint32_t)e << 10 | ((x >> 13) & 0x3FF));
}

static void gmodel_write(const gmodel *g, const char *path) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    put(f, "GGUF", 4);
    put_u32(f, 3);
    put_u64(f, (uint64_t)g->n);
    put_u64(f, 9);
    put_str(f, "general.architecture");
    put_u32(f, 8);
    put_str(f, "llama");
    kv_u32(f, "general.alignment", 32);
    kv_u32(f, "llama.block_count", G_LAYERS);
    kv_u32(f, "llama.embedding_length", G_HIDDEN);
    kv_u32(f, "llama.feed_forward_length", G_FFN);
    kv_u32(f, "llama.attention.head_count", G_HEADS);
    kv_u32(f, "llama.attention.head_count_kv", G_KV);
    kv_f32(f, "llama.rope.freq_base", 10000.0f);
    kv_f32(f, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    uint64_t off = 0;
    for (int i = 0; i < g->n; i++) {
        const gtensor *t = &g->t[i];
        put_str(f, t->name);
        put_u32(f, t->d1 > 1 ? 2 : 1);
        put_u64(f, t->d0);
        if (t->d1 > 1) put_u64(f, t->d1);
        put_u32(f, t->type);
        put_u64(f, off);
        off = (off + t->d0 * t->d1 * (t->type ? 2 : 4) + 31) / 32 * 32;
    }
    long pos = ftell(f);
    while (pos % 32) put(f, "", 1), pos++;
    off = 0;
    for (int i = 0; i < g->n; i++) {
        const gtensor *t = &g->t[i];
        uint64_t n = t->d0 * t->d1;
        for (uint64_t e = 0; e < n; e++) {
            if (t->type) {
                uint16_t h = f16_of(t->v[e]);
                put(f, &h, 2);
            } else {
                put(f, &t->v[e], 4);
            }
        }
        uint64_t end = (off + n * (t->type ? 2 : 4) + 31) / 32 * 32;
        for (uint64_t b = off + n * (t->type ? 2 : 4); b < end; b++) put(f, "", 1);
        off = end;
    }
    fclose(f);
}

/* y[o] = sum_i W[o, i] x[i] with W (and, by the caller, x) rounded to bf16
 * when round is set (as the model's bf16 GEMMs read them). */
static void ref_gemm(const gtensor *t, const double *x, double *y, int round) {
    for (uint64_t o = 0; o < t->d1; o++) {
        double acc = 0;
        for (uint64_t i = 0; i < t->d0; i++) {
            double wv = t->v[o * t->d0 + i];
            acc += (round ? bf(wv) : wv) * x[i];
        }
        y[o] = acc;
    }
}

static void ref_norm(const double *x, const gtensor *w, double *y, double eps, int round) {
    double ss = 0;
    for (int i = 0; i < G_HIDDEN; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / G_HIDDEN + eps);
    for (int i = 0; i < G_HIDDEN; i++) {
        y[i] = x[i] * r * (double)w->v[i];
        if (round) y[i] = bf(y[i]);
    }
}

/* Logits of the last of n tokens at positions 0..n-1 in float64, rounding
 * (round = 1) the weights of every projection and the LM head, the normed
 * rows, the attention output and the SwiGLU product to bf16: the points
 * where the bf16 model rounds. round = 0: the plain f64 forward. */
static void ref_forward(gmodel *g, const serve_model_config *cfg, const int32_t *tokens, int n,
                        int round, double *logits) {
    enum { NMAX = 32 };
    assert_true(n <= NMAX);
    static double x[NMAX][G_HIDDEN], att[NMAX * G_QD];
    static float q[NMAX][G_QD], k[NMAX][G_KVD], v[NMAX][G_KVD];
    double h[G_HIDDEN], tmp[G_QD], o[G_HIDDEN], gg[G_FFN], uu[G_FFN];
    int32_t pos[NMAX];
    gtensor *emb = gfind(g, "token_embd.weight");
    for (int t = 0; t < n; t++) {
        pos[t] = t;
        for (int i = 0; i < G_HIDDEN; i++) x[t][i] = emb->v[(size_t)tokens[t] * G_HIDDEN + i];
    }
    lazyattn_attention_config acfg;
    serve_model_attention_config(cfg, &acfg);
    acfg.dtype = LAZYATTN_DTYPE_F32;
    char name[64];
#define T(fmt) (snprintf(name, sizeof name, "blk.%d." fmt ".weight", l), gfind(g, name))
    for (int l = 0; l < G_LAYERS; l++) {
        for (int t = 0; t < n; t++) {
            ref_norm(x[t], T("attn_norm"), h, cfg->rms_eps, round);
            ref_gemm(T("attn_q"), h, tmp, round);
            for (int i = 0; i < G_QD; i++) q[t][i] = (float)tmp[i];
            ref_gemm(T("attn_k"), h, tmp, round);
            for (int i = 0; i < G_KVD; i++) k[t][i] = (float)tmp[i];
            ref_gemm(T("attn_v"), h, tmp, round);
            for (int i = 0; i < G_KVD; i++) v[t][i] = (float)tmp[i];
        }
        lazyattn_reference_args ra;
        lazyattn_reference_args_init(&ra);
        ra.n_queries = n, ra.n_keys = n, ra.q = &q[0][0], ra.q_pos = pos, ra.k = &k[0][0];
        ra.v = &v[0][0], ra.k_pos = pos, ra.out = att;
        assert_int_equal(lazyattn_reference_attention(&acfg, &ra), 0);
        for (int t = 0; t < n; t++) {
            double *a = att + (size_t)t * G_QD;
            if (round)
                for (int i = 0; i < G_QD; i++) a[i] = bf(a[i]);
            ref_gemm(T("attn_output"), a, o, round);
            for (int i = 0; i < G_HIDDEN; i++) x[t][i] += o[i];
            ref_norm(x[t], T("ffn_norm"), h, cfg->rms_eps, round);
            ref_gemm(T("ffn_gate"), h, gg, round);
            ref_gemm(T("ffn_up"), h, uu, round);
            for (int i = 0; i < G_FFN; i++) {
                gg[i] = gg[i] / (1.0 + exp(-gg[i])) * uu[i];
                if (round) gg[i] = bf(gg[i]);
            }
            ref_gemm(T("ffn_down"), gg, o, round);
            for (int i = 0; i < G_HIDDEN; i++) x[t][i] += o[i];
        }
    }
#undef T
    ref_norm(x[n - 1], gfind(g, "output_norm.weight"), h, cfg->rms_eps, round);
    ref_gemm(gfind(g, "output.weight"), h, logits, round);
}

static const char *tmp_path(void) {
    static char path[512];
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/test_serve_bf16_%d.gguf", dir && *dir ? dir : "/tmp",
             (int)getpid());
    return path;
}

/* Prefill of 20 tokens (two blocks of 16) and two greedy decode steps of a
 * bf16 model loaded from GGUF; each step's logits against ref_forward of the
 * same tokens, with (err) and without (err_plain) bf16 rounding. */
static void run_gguf_model(bf_state *s, int tied, double *err_out, double *plain_out) {
    gmodel g;
    gmodel_make(&g, tied, tied ? 0xABCDEFull : 0x12345ull);
    gmodel_write(&g, tmp_path());
    serve_gguf *gg = NULL;
    CHECK(serve_gguf_open(tmp_path(), &gg));
    serve_model_config cfg;
    CHECK(serve_model_config_preset(&cfg, "tiny"));
    CHECK(serve_gguf_model_config(gg, &cfg));
    assert_int_equal(cfg.tied_embeddings, tied);
    cfg.kv_dtype = LAZYATTN_DTYPE_F32; /* compare without f16 K/V rounding */
    cfg.gemm = SERVE_GEMM_BF16;
    cfg.max_rows = 32;
    serve_model *m = NULL;
    CHECK(serve_model_create(s->ctx, &cfg, &m));
    assert_int_equal(serve_model_uses_bf16(m), 1);
    CHECK(serve_model_load_gguf(m, gg));
    serve_gguf_close(gg);
    remove(tmp_path());

    lazyattn_pool_config pc;
    serve_model_pool_config(&cfg, 1 << 20, &pc);
    lazyattn_pool *pool = NULL;
    CHECK(lazyattn_pool_create(s->ctx, &pc, &pool));
    int32_t blocks[2];
    CHECK(lazyattn_pool_alloc(pool, 2, blocks));
    enum { N = 20, STEPS = 2 };
    int32_t tokens[N + STEPS], pos[N + STEPS], slots[N + STEPS];
    uint64_t z = 77 + (uint64_t)tied;
    for (int t = 0; t < N + STEPS; t++) {
        tokens[t] = (int32_t)((urand(&z) + 1.0) * 0.5 * G_VOCAB) % G_VOCAB;
        pos[t] = t;
        slots[t] = blocks[t / cfg.block_size] * cfg.block_size + t % cfg.block_size;
    }
    uint64_t table[2];
    int32_t entry_pos[2] = {0, cfg.block_size};
    CHECK(lazyattn_entry_pack(blocks[0], 0, cfg.block_size, &table[0]));
    CHECK(lazyattn_entry_pack(blocks[1], 0, N - cfg.block_size, &table[1]));
    serve_prefill_args pa = {.n_tokens = N, .tokens = tokens, .q_pos = pos, .slots = slots,
                             .stored_pos = pos, .n_entries = 2, .table = table,
                             .entry_pos = entry_pos, .want_logits = 1};
    int32_t next = -1;
    CHECK(serve_model_prefill(m, pool, &pa, &next));
    float logits[G_VOCAB];
    double want[G_VOCAB], plain[G_VOCAB];
    for (int step = 0; step <= STEPS; step++) {
        int n = N + step;
        if (step > 0) { /* decode the greedy token at position n - 1 */
            tokens[n - 1] = next;
            CHECK(lazyattn_entry_pack(blocks[1], 0, n - cfg.block_size, &table[1]));
            int32_t offsets[2] = {0, 2};
            serve_decode_args da = {1, &tokens[n - 1], &pos[n - 1], &slots[n - 1], &pos[n - 1],
                                    offsets, table, entry_pos, 2, NULL};
            CHECK(serve_model_decode(m, pool, &da, &next));
        }
        CHECK(serve_model_read_logits(m, 1, logits));
        ref_forward(&g, &cfg, tokens, n, 1, want);
        ref_forward(&g, &cfg, tokens, n, 0, plain);
        double err = lazyattn_normalised_error(logits, want, G_VOCAB);
        double err_plain = lazyattn_normalised_error(logits, plain, G_VOCAB);
        int best = 0;
        for (int i = 1; i < G_VOCAB; i++)
            if (logits[i] > logits[best]) best = i;
        assert_int_equal(best, next);
        printf("# %s LM head, %d tokens: normalised error %.3g vs the bf16-rounding float64 "
               "forward, %.3g vs the unrounded one\n", tied ? "tied" : "untied", n, err,
               err_plain);
        err_out[step] = err, plain_out[step] = err_plain;
    }
    lazyattn_pool_destroy(pool);
    serve_model_destroy(m);
    gmodel_free(&g);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Tolerances. The device computes in f32 what the reference computes in
 * double (relative differences ~1e-6), so where both round to bf16 they
 * agree, except for a value within ~1e-6 of a rounding boundary (a fraction
 * ~1e-6 / 2^-8 ~ 3e-4 of the ~700 values rounded per token): that one is
 * then one bf16 step (2^-8 of it) apart, one term of a dot product of >= 64
 * (measured on PoCL: 4.5e-4 normalised for one step of six). So:
 *   - every step within 1e-3 (two such flips);
 *   - the median step within 1e-5 (most steps see no flip: measured ~1e-7),
 *     which only a reference rounding where the model rounds can meet;
 *   - the unrounded float64 forward differs by the bf16 rounding itself
 *     (measured 1.5e-3 .. 4e-3), at least 20 times the median: the test can
 *     tell bf16 from f32 arithmetic. */
static void test_gguf_forward_vs_reference(void **state) {
    bf_state *s = *state;
    if (!s->ctx) skip();
    double err[6], plain[6];
    run_gguf_model(s, 0, err, plain);
    run_gguf_model(s, 1, err + 3, plain + 3);
    for (int i = 0; i < 6; i++) assert_true(err[i] <= 1e-3);
    qsort(err, 6, sizeof err[0], cmp_double);
    qsort(plain, 6, sizeof plain[0], cmp_double);
    printf("# median error %.3g (bound 1e-5), largest %.3g (bound 1e-3); unrounded forward: "
           "smallest %.3g\n", err[3], err[5], plain[0]);
    assert_true(err[3] <= 1e-5);
    assert_true(plain[0] >= 20 * err[3]);
}

/* The GGUF -> bf16 conversion at its edges, one weight of a GGUF file set
 * at a time: a value finite in f32 but past bf16's largest finite value
 * (3.3895e38; from 0x7F7F8000, which ties to even upwards) is refused with
 * FORMAT in bf16 mode (it would load as infinity), either sign, and loads in
 * f32 mode; the largest value that rounds to bf16's largest (0x7F7F7FFF)
 * loads in both; NaN and infinity are refused in both. */
typedef struct overflow_case {
    uint32_t bits; /* the weight's f32 bit pattern */
    int ok_f32, ok_bf16;
    const char *what;
} overflow_case;

static const overflow_case overflow_cases[] = {
    {0x7F7FC99Eu, 1, 0, "3.4e38"},
    {0xFF7FC99Eu, 1, 0, "-3.4e38"},
    {0x7F7F8000u, 1, 0, "the smallest that rounds to bf16 infinity"},
    {0x7F7F7FFFu, 1, 1, "the largest that rounds to bf16's largest"},
    {0xFF7F7FFFu, 1, 1, "its negative"},
    {0x7FC00000u, 0, 0, "NaN"},
    {0xFF800000u, 0, 0, "-infinity"},
};

static void test_gguf_bf16_overflow(void **state) {
    bf_state *s = *state;
    if (!s->ctx) skip();
    for (size_t c = 0; c < sizeof overflow_cases / sizeof overflow_cases[0]; c++) {
        const overflow_case *oc = &overflow_cases[c];
        gmodel g;
        gmodel_make(&g, 0, 5);
        float v;
        memcpy(&v, &oc->bits, sizeof v);
        gfind(&g, "blk.1.ffn_gate.weight")->v[7] = v;
        gmodel_write(&g, tmp_path());
        serve_gguf *gg = NULL;
        CHECK(serve_gguf_open(tmp_path(), &gg));
        serve_model_config cfg;
        CHECK(serve_model_config_preset(&cfg, "tiny"));
        CHECK(serve_gguf_model_config(gg, &cfg));
        for (int mode = 0; mode < 2; mode++) {
            cfg.gemm = mode ? SERVE_GEMM_BF16 : SERVE_GEMM_F32;
            serve_model *m = NULL;
            CHECK(serve_model_create(s->ctx, &cfg, &m));
            int st = serve_model_load_gguf(m, gg);
            int ok = mode ? oc->ok_bf16 : oc->ok_f32;
            printf("# %s (0x%08X), %s: load -> %d %s\n", oc->what, (unsigned)oc->bits,
                   mode ? "bf16" : "f32", st, st ? serve_last_error() : "");
            assert_int_equal(st, ok ? 0 : LAZYATTN_STATUS_FORMAT);
            if (!ok) assert_non_null(strstr(serve_last_error(), "blk.1.ffn_gate.weight"));
            serve_model_destroy(m);
        }
        serve_gguf_close(gg);
        remove(tmp_path());
        gmodel_free(&g);
    }
}

/* ---- create / destroy release everything ----------------------------------- */

/* after the queue's work: a released buffer that a pending command still
 * uses (the zero fill of the bf16 X buffers) lives until that completes */
static cl_uint context_refs(bf_state *s) { return lt_context_refs(s->ctx); }

/* Every buffer and program retains the OpenCL context (PoCL counts them),
 * so the context's reference count after serve_model_destroy, or after a
 * serve_model_create that failed part way, must be what it was: in both
 * modes, for a success and for failures at the first buffer (the
 * embedding), after the weights (the gate activations) and at the logits.
 * Each case runs twice and the second is compared (lazyattn caches the
 * attention programs of a configuration in the context on first use). */
static void test_model_releases_everything(void **state) {
    bf_state *s = *state;
    if (!s->ctx) skip();
    serve_model_config base;
    CHECK(serve_model_config_preset(&base, "tiny"));
    serve_model *m = NULL;
    base.gemm = SERVE_GEMM_BF16;
    cl_uint before = context_refs(s);
    CHECK(serve_model_create(s->ctx, &base, &m));
    cl_uint held = context_refs(s);
    serve_model_destroy(m);
    if (held <= before) {
        printf("# this OpenCL does not count buffers in the context's references: not checked\n");
        skip();
    }
    /* the dispatcher alone: its program and kernels (and the tensor-core ones) */
    cl_uint refs_g[2];
    for (int rep = 0; rep < 2; rep++) {
        serve_gemm_bf16 *g = NULL;
        CHECK(serve_gemm_bf16_create(s->ctx, &g));
        serve_gemm_bf16_destroy(g);
        refs_g[rep] = context_refs(s);
    }
    printf("# the dispatcher: context references %u, then %u\n", (unsigned)refs_g[0],
           (unsigned)refs_g[1]);
    assert_int_equal(refs_g[1], refs_g[0]);
    struct {
        const char *what;
        int vocab, hidden, ffn, max_rows, fails;
    } cases[] = {
        /* 1 TiB, 256 GiB, 256 GiB: past any device's largest buffer */
        {"a tiny model", 0, 0, 0, 0, 0},
        {"embedding past the largest buffer", 1 << 22, 1 << 16, 0, 0, 1},
        {"gate activations past it", 0, 0, 1 << 20, 1 << 16, 1},
        {"logits past it", 1 << 20, 0, 0, 1 << 16, 1},
    };
    for (int mode = 0; mode < 2; mode++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            serve_model_config cfg = base;
            cfg.gemm = mode ? SERVE_GEMM_BF16 : SERVE_GEMM_F32;
            if (cases[c].vocab) cfg.vocab = cases[c].vocab;
            if (cases[c].hidden) cfg.hidden = cases[c].hidden;
            if (cases[c].ffn) cfg.ffn = cases[c].ffn;
            if (cases[c].max_rows) cfg.max_rows = cases[c].max_rows;
            cl_uint refs[2];
            for (int rep = 0; rep < 2; rep++) {
                m = NULL;
                int st = serve_model_create(s->ctx, &cfg, &m);
                if (cases[c].fails) {
                    if (st == 0) { /* a device whose largest buffer holds it: nothing to check */
                        serve_model_destroy(m);
                        printf("# %s, %s: created, not a failure here\n", cases[c].what,
                               mode ? "bf16" : "f32");
                        break;
                    }
                    assert_int_equal(st, LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY);
                    assert_null(m);
                } else {
                    CHECK(st);
                    serve_model_destroy(m);
                }
                refs[rep] = context_refs(s);
                if (rep == 1) {
                    printf("# %s, %s: %s; context references %u, then %u\n", cases[c].what,
                           mode ? "bf16" : "f32", st ? serve_last_error() : "created",
                           (unsigned)refs[0], (unsigned)refs[1]);
                    assert_int_equal(refs[1], refs[0]);
                }
            }
        }
}

/* ---- the mode auto takes ------------------------------------------------- */

/* AUTO is bf16 exactly where the context has NVIDIA's fast path, f32
 * (CLBlast) elsewhere, so PoCL keeps the README's f32 path; a context made
 * with LAZYATTN_PORTABLE=1 takes f32 on any device. */
static void test_auto_mode(void **state) {
    bf_state *s = *state;
    if (!s->ctx) skip();
    serve_model_config cfg;
    CHECK(serve_model_config_preset(&cfg, "tiny"));
    assert_int_equal(cfg.gemm, SERVE_GEMM_AUTO);
    serve_model *m = NULL;
    CHECK(serve_model_create(s->ctx, &cfg, &m));
    int fast = lazyattn_context_fast_path(s->ctx);
    printf("# default context: fast path %d, auto -> %s\n", fast,
           serve_model_uses_bf16(m) ? "bf16" : "f32");
    assert_int_equal(serve_model_uses_bf16(m), fast);
    assert_true((serve_model_gemm_bf16(m) != NULL) == fast);
    serve_model_destroy(m);

    const char *was = getenv("LAZYATTN_PORTABLE");
    char *saved = was ? strdup(was) : NULL;
    setenv("LAZYATTN_PORTABLE", "1", 1);
    lazyattn_context *portable = NULL;
    int st = lazyattn_context_create(NULL, &portable);
    if (saved) {
        setenv("LAZYATTN_PORTABLE", saved, 1);
        free(saved);
    } else {
        unsetenv("LAZYATTN_PORTABLE");
    }
    CHECK(st);
    assert_int_equal(lazyattn_context_fast_path(portable), 0);
    m = NULL;
    CHECK(serve_model_create(portable, &cfg, &m));
    printf("# LAZYATTN_PORTABLE=1: auto -> %s\n", serve_model_uses_bf16(m) ? "bf16" : "f32");
    assert_int_equal(serve_model_uses_bf16(m), 0);
    assert_null(serve_model_gemm_bf16(m));
    serve_model_destroy(m);
    lazyattn_context_destroy(portable);
}

/* ---- memory per mode ------------------------------------------------------ */

/* The tiny preset in both modes: f32 weights are 4 bytes a parameter; bf16
 * mode holds the projections and the LM head in 2 bytes and nothing else
 * of them (no f32 copy), the embedding and norms in f32; no CLBlast
 * temporaries, but padded bf16 activations. */
static void test_memory_per_mode(void **state) {
    bf_state *s = *state;
    if (!s->ctx) skip();
    serve_model_config cfg;
    CHECK(serve_model_config_preset(&cfg, "tiny"));
    uint64_t h = (uint64_t)cfg.hidden, qd = (uint64_t)cfg.n_heads * cfg.head_dim,
             kvd = (uint64_t)cfg.n_kv_heads * cfg.head_dim, ff = (uint64_t)cfg.ffn,
             V = (uint64_t)cfg.vocab, L = (uint64_t)cfg.n_layers;
    uint64_t proj = L * (h * (qd + 2 * kvd) + qd * h + 3 * h * ff) + V * h; /* + LM head */
    uint64_t other = V * h + h + L * 2 * h;                                /* embedding, norms */
    uint64_t w[2], sc[2];
    for (int mode = 0; mode < 2; mode++) {
        cfg.gemm = mode ? SERVE_GEMM_BF16 : SERVE_GEMM_F32;
        serve_model *m = NULL;
        CHECK(serve_model_create(s->ctx, &cfg, &m));
        assert_int_equal(serve_model_uses_bf16(m), mode);
        assert_true((serve_model_gemm_bf16(m) != NULL) == mode);
        serve_model_device_bytes(m, &w[mode], &sc[mode]);
        printf("# %s: weights %llu B, other device buffers %llu B\n", mode ? "bf16" : "f32",
               (unsigned long long)w[mode], (unsigned long long)sc[mode]);
        serve_model_destroy(m);
    }
    assert_true(w[0] == 4 * (proj + other));
    assert_true(w[1] == 2 * proj + 4 * other);
    assert_true(4 * proj + 4 * other == serve_model_config_n_params(&cfg) * 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_shapes),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_dispatcher_fallback),
        cmocka_unit_test(test_gguf_forward_vs_reference),
        cmocka_unit_test(test_gguf_bf16_overflow),
        cmocka_unit_test(test_memory_per_mode),
        cmocka_unit_test(test_auto_mode),
        cmocka_unit_test(test_model_releases_everything),
    };
    return cmocka_run_group_tests_name("serve_bf16", tests, setup, teardown);
}
