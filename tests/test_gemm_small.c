/* SPDX-License-Identifier: Apache-2.0 */
/* serve/gemm_nv_small.c: bad input gives a status and a message, never a
 * crash (every device); on an NVIDIA fast-path device, Y = X W^T against a
 * double reference from the same bf16 operands (random in [-1, 1)) for
 * rows 1..64, three output ranges with row strides, an X offset, split-K,
 * accumulate, and bitwise repeatability; on compute capability 9.x the
 * same for the wgmma modes (xs 2..5) at every row count 1..64, with K tails,
 * and whether its rows depend on the batch. On PoCL (CI) create is
 * UNSUPPORTED and the device cases skip (no g: the wgmma mode cannot be
 * selected at all); on an NVIDIA device that is not 9.x selecting it is
 * UNSUPPORTED. Decode's fused variants (f32 X with the RMSNorm, SwiGLU) of
 * the shapes they run on against the float64 unfused sequence
 * (gemm_fused_ref.h); off NVIDIA that check runs on the portable kernel. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gemm_fused_ref.h"
#include "gemm_nv_small.h"

#ifndef CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV
#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#endif

typedef struct gs_state {
    lazyattn_context *ctx;
    serve_gemm_small *g; /* NULL off the NVIDIA fast path */
} gs_state;

static int setup(void **state) {
    gs_state *s = calloc(1, sizeof *s);
    if (!s) return -1;
    *state = s;
    if (lazyattn_context_create(NULL, &s->ctx) != 0) return 0; /* tests skip */
    int st = serve_gemm_small_create(s->ctx, &s->g);
    if (lazyattn_context_fast_path(s->ctx)) {
        if (st != LAZYATTN_STATUS_OK) {
            fprintf(stderr, "gemm_small_create: %s\n", serve_last_error());
            return -1;
        }
    } else if (st != LAZYATTN_STATUS_UNSUPPORTED || s->g) {
        fprintf(stderr, "gemm_small_create off the fast path: %d\n", st);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    gs_state *s = *state;
    serve_gemm_small_destroy(s->g);
    lazyattn_context_destroy(s->ctx);
    free(s);
    return 0;
}

static void test_create_bad_input(void **state) {
    gs_state *s = *state;
    serve_gemm_small *g = (serve_gemm_small *)(uintptr_t)1;
    assert_int_equal(serve_gemm_small_create(NULL, &g), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(g);
    assert_true(strlen(serve_last_error()) > 0);
    assert_int_equal(serve_gemm_small_create(s->ctx, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    serve_gemm_small_destroy(NULL);
    if (!s->ctx) {
        print_message("no OpenCL device: skipped\n");
        skip();
    }
    if (!lazyattn_context_fast_path(s->ctx)) {
        g = (serve_gemm_small *)(uintptr_t)1;
        assert_int_equal(serve_gemm_small_create(s->ctx, &g), LAZYATTN_STATUS_UNSUPPORTED);
        assert_null(g);
        assert_non_null(strstr(serve_last_error(), "NVIDIA"));
    }
}

static void test_run_bad_input(void **state) {
    gs_state *s = *state;
    serve_gemm_args a;
    memset(&a, 0, sizeof a);
    assert_int_equal(serve_gemm_small_run(NULL, NULL, &a, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(serve_gemm_small_splits(NULL, 1, 64, 64), 0);
    serve_gemm_small_tuning t = {2, 4, 2, 4, 0, 1, 0, 0};
    assert_int_equal(serve_gemm_small_set_tuning(NULL, 0, -1, &t), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(serve_gemm_small_get_tuning(NULL, 1, 0, &t), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_string_equal(serve_gemm_small_build_log(NULL, 1, 0), "");
    if (!s->g) {
        print_message("no NVIDIA tensor-core path on this device (mma.sync): skipped\n");
        skip();
    }
    cl_context cl = lazyattn_context_cl_context(s->ctx);
    cl_command_queue q = lazyattn_context_queue(s->ctx);
    cl_int err;
    cl_mem buf = clCreateBuffer(cl, CL_MEM_READ_WRITE, 1 << 20, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(serve_gemm_small_run(s->g, q, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    const serve_gemm_args good = {8, 64, 64, buf, 0, buf, 1, {{buf, 0, 64, 64}}, 0, 0, NULL, 0.0f, 0};
    struct {
        serve_gemm_args a;
        int status;
    } cases[13];
    int n = 0;
    for (int i = 0; i < 13; i++) cases[i].a = good;
    cases[n].a.rows = 0, cases[n++].status = LAZYATTN_STATUS_INVALID_ARGUMENT;
    cases[n].a.rows = 65, cases[n++].status = LAZYATTN_STATUS_UNSUPPORTED;
    cases[n].a.in = 48, cases[n++].status = LAZYATTN_STATUS_UNSUPPORTED;
    cases[n].a.x = NULL, cases[n++].status = LAZYATTN_STATUS_INVALID_ARGUMENT;
    cases[n].a.w = NULL, cases[n++].status = LAZYATTN_STATUS_INVALID_ARGUMENT;
    cases[n].a.n_outs = 4, cases[n++].status = LAZYATTN_STATUS_INVALID_ARGUMENT;
    cases[n].a.outs[0].cols = 32, cases[n++].status = LAZYATTN_STATUS_INVALID_ARGUMENT;
    cases[n].a.outs[0].ld = 63, cases[n++].status = LAZYATTN_STATUS_INVALID_ARGUMENT;
    cases[n].a.x_off = 4, cases[n++].status = LAZYATTN_STATUS_UNSUPPORTED;
    cases[n].a.accumulate = 2, cases[n++].status = LAZYATTN_STATUS_INVALID_ARGUMENT;
    cases[n].a.out = 72, cases[n].a.outs[0].cols = 72, cases[n].a.outs[0].ld = 72;
    cases[n++].status = LAZYATTN_STATUS_UNSUPPORTED; /* cols % 16 */
    cases[n].a.outs[0].buf = NULL, cases[n++].status = LAZYATTN_STATUS_INVALID_ARGUMENT;
    /* cols summing past INT_MAX that an int sum wraps to out (64): refused, never launched */
    cases[n].a.n_outs = 3;
    cases[n].a.outs[0] = (serve_gemm_out){buf, 0, 0x7FFFFFF0, 0x7FFFFFF0};
    cases[n].a.outs[1] = (serve_gemm_out){buf, 0, 0x7FFFFFF0, 0x7FFFFFF0};
    cases[n].a.outs[2] = (serve_gemm_out){buf, 0, 96, 96};
    cases[n++].status = LAZYATTN_STATUS_INVALID_ARGUMENT;
    for (int i = 0; i < n; i++) {
        const int st = serve_gemm_small_run(s->g, q, &cases[i].a, NULL);
        if (st != cases[i].status) fprintf(stderr, "case %d: %d, expected %d\n", i, st, cases[i].status);
        assert_int_equal(st, cases[i].status);
        assert_true(strlen(serve_last_error()) > 0);
    }
    /* an out-of-order queue would race on the shared workspace: refused */
    cl_command_queue ooo = clCreateCommandQueue(cl, lazyattn_context_device(s->ctx),
                                                CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    if (err == CL_SUCCESS) {
        assert_int_equal(serve_gemm_small_run(s->g, ooo, &good, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(serve_last_error(), "in-order"));
        clReleaseCommandQueue(ooo);
    }
    t.r = 3;
    assert_int_equal(serve_gemm_small_set_tuning(s->g, 0, -1, &t), LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* the wgmma modes: whole warpgroups, 1 or 2 row sets, xs 0..5; xs 5:
     * 2 ring slots of W and X a K slice in 48 KB */
    const serve_gemm_small_tuning wbad[] = {
        {1, 2, 1, 2, 1, 2, 0, 2}, {4, 4, 1, 2, 1, 2, 0, 3}, {1, 4, 1, 2, 1, 2, 0, 6},
        {1, 2, 1, 4, 1, 2, 0, 4}, {4, 4, 1, 1, 1, 2, 0, 4}, {1, 6, 1, 1, 1, 2, 0, 5},
        {2, 8, 1, 2, 1, 2, 0, 5}, /* 2 x (16 KB of W + 8 KB of X) > 48 KB */
        {1, 8, 1, 2, 1, 2, 0, 5}, /* 2 x (16 KB of W + 8 KB of X): 49152 B > 48 KB - 48 */
        {1, 4, 1, 8, 1, 2, 0, 2}, /* 2 slots x 8 blocks x 64 tokens: 64 KB */
    };
    for (size_t i = 0; i < sizeof wbad / sizeof *wbad; i++) {
        assert_int_equal(serve_gemm_small_set_tuning(s->g, 0, -1, &wbad[i]), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_true(strlen(serve_last_error()) > 0);
    }
    t.r = 2, t.wk = 8, t.wr = 4; /* 7 x 4 x 2 x 8 tiles of sums: over 48 KB */
    assert_int_equal(serve_gemm_small_set_tuning(s->g, 0, -1, &t), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(serve_gemm_small_set_tuning(s->g, 9, -1, &t), LAZYATTN_STATUS_INVALID_ARGUMENT);
    clReleaseMemObject(buf);
}

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint16_t rnd_bf16(void) {
    uint16_t h;
    do {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        h = serve_bf16_of((float)((rng >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0));
    } while ((h & 0x7FFF) == 0);
    return h;
}

/* Y = X W^T (+ Y) against a double reference, for every tuning row given. */
static void check_shape(gs_state *s, int rows, int out, int in, const int *cols, int n_outs,
                        size_t x_off, int splits) {
    cl_context cl = lazyattn_context_cl_context(s->ctx);
    cl_command_queue q = lazyattn_context_queue(s->ctx);
    const size_t xn = x_off + (size_t)SERVE_GEMM_ROW_PAD * in, wn = (size_t)out * in;
    uint16_t *xh = malloc(xn * 2), *wh = malloc(wn * 2);
    assert_non_null(xh);
    assert_non_null(wh);
    for (size_t i = 0; i < xn; i++) xh[i] = rnd_bf16();
    for (size_t i = 0; i < wn; i++) wh[i] = rnd_bf16();
    double *ref = malloc(sizeof(double) * rows * out);
    assert_non_null(ref);
    for (int r = 0; r < rows; r++)
        for (int n = 0; n < out; n++) {
            double acc = 0;
            for (int k = 0; k < in; k++)
                acc += (double)serve_float_of_bf16(xh[x_off + (size_t)r * in + k]) *
                       serve_float_of_bf16(wh[(size_t)n * in + k]);
            ref[(size_t)r * out + n] = acc;
        }
    cl_int err;
    cl_mem x = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, xn * 2, xh, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem w = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, wn * 2, wh, &err);
    assert_int_equal(err, CL_SUCCESS);
    serve_gemm_args a;
    memset(&a, 0, sizeof a);
    a.rows = rows, a.out = out, a.in = in, a.x = x, a.x_off = x_off, a.w = w, a.n_outs = n_outs;
    cl_mem y[3];
    float *yh[3], *y0[3];
    for (int i = 0; i < n_outs; i++) {
        const int ld = cols[i] + 16 * i, pre = 5 * i; /* strides and offsets of their own */
        const size_t n = pre + (size_t)rows * ld;
        yh[i] = malloc(n * sizeof(float));
        y0[i] = malloc(n * sizeof(float));
        assert_non_null(yh[i]);
        assert_non_null(y0[i]);
        for (size_t e = 0; e < n; e++) y0[i][e] = (float)(rnd_bf16() & 0xFF) - 100.0f;
        y[i] = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * sizeof(float), y0[i], &err);
        assert_int_equal(err, CL_SUCCESS);
        a.outs[i] = (serve_gemm_out){y[i], (size_t)pre, cols[i], ld};
    }
    serve_gemm_small_tuning keep;
    const int nt = (rows + 7) / 8, cls = serve_gemm_small_class(out, in);
    assert_int_equal(serve_gemm_small_get_tuning(s->g, nt, cls, &keep), 0);
    serve_gemm_small_tuning t = keep;
    t.splits = splits;
    assert_int_equal(serve_gemm_small_set_tuning(s->g, nt, cls, &t), 0);
    for (int acc = 1; acc >= 0; acc--) { /* first Y += (on y0), then Y = */
        a.accumulate = acc;
        int st = serve_gemm_small_run(s->g, q, &a, NULL);
        if (st) fprintf(stderr, "run: %s\n", serve_last_error());
        assert_int_equal(st, 0);
        double num = 0, den = 0;
        int outside = 0;
        for (int i = 0, c0 = 0; i < n_outs; c0 += cols[i], i++) {
            const int ld = cols[i] + 16 * i, pre = 5 * i;
            const size_t n = pre + (size_t)rows * ld;
            assert_int_equal(clEnqueueReadBuffer(q, y[i], CL_TRUE, 0, n * sizeof(float), yh[i], 0, NULL, NULL), 0);
            for (size_t e = 0; e < n; e++) {
                const long rel = (long)e - pre;
                const int r = (int)(rel / ld), c = (int)(rel % ld);
                if (rel < 0 || c >= cols[i]) { /* never written */
                    outside += yh[i][e] != y0[i][e];
                    continue;
                }
                const double want = ref[(size_t)r * out + c0 + c] + (acc ? y0[i][e] : 0.0);
                num += (yh[i][e] - want) * (yh[i][e] - want);
                den += ref[(size_t)r * out + c0 + c] * ref[(size_t)r * out + c0 + c];
            }
            if (acc) { /* the next run overwrites: y0 becomes the sum, for the gaps */
                memcpy(y0[i], yh[i], n * sizeof(float));
            }
        }
        const double rel = sqrt(num / den);
        if (!(rel < 1e-5) || outside)
            fprintf(stderr, "rows %d out %d in %d splits %d (%d) acc %d: rel err %.3e, %d outside\n",
                    rows, out, in, splits, serve_gemm_small_splits(s->g, rows, out, in), acc, rel, outside);
        assert_true(rel < 1e-5);
        assert_int_equal(outside, 0);
    }
    /* bitwise repeatable */
    float *again = malloc(sizeof(float) * (size_t)rows * (cols[0] + 0));
    assert_non_null(again);
    assert_int_equal(serve_gemm_small_run(s->g, q, &a, NULL), 0);
    assert_int_equal(clEnqueueReadBuffer(q, y[0], CL_TRUE, 0, sizeof(float) * rows * cols[0], again, 0, NULL, NULL), 0);
    assert_memory_equal(again, yh[0], sizeof(float) * rows * cols[0]);
    free(again);
    assert_int_equal(serve_gemm_small_set_tuning(s->g, nt, cls, &keep), 0);
    for (int i = 0; i < n_outs; i++) clReleaseMemObject(y[i]), free(yh[i]), free(y0[i]);
    clReleaseMemObject(x);
    clReleaseMemObject(w);
    free(xh), free(wh), free(ref);
}

static void test_products(void **state) {
    gs_state *s = *state;
    if (!s->g) {
        print_message("no NVIDIA tensor-core path on this device (mma.sync): skipped\n");
        skip();
    }
    /* the defaults, then kernel shapes of each kind: K slices summed in
     * local memory, a W prefetch, X staged in local memory (with and
     * without slices), R 1 and 4 */
    const serve_gemm_small_tuning tunings[] = {
        {0, 0, 0, 0, 0, 0, 0, 0}, /* the defaults (of the class the small shapes here are in) */
        {1, 1, 8, 8, 0, 2, 0, 0}, {2, 4, 2, 4, 0, 2, 0, 0}, {2, 8, 1, 2, 1, 2, 0, 1}, /* the other defaults */
        {1, 1, 8, 4, 0, 1, 0, 0}, {2, 4, 2, 4, 1, 2, 0, 0}, {2, 4, 1, 4, 0, 1, 0, 1},
        {2, 2, 2, 2, 1, 2, 0, 1}, {4, 2, 1, 2, 0, 0, 0, 0}, {1, 4, 2, 2, 1, 1, 0, 1},
    };
    serve_gemm_small_tuning defaults[SERVE_GEMM_SMALL_CLASSES][8];
    for (int c = 0; c < SERVE_GEMM_SMALL_CLASSES; c++)
        for (int nt = 1; nt <= 8; nt++)
            assert_int_equal(serve_gemm_small_get_tuning(s->g, nt, c, &defaults[c][nt - 1]), 0);
    const int three[3] = {64, 32, 48}, one[1] = {400}, three160[3] = {64, 48, 48};
    const int rows[] = {1, 2, 7, 8, 9, 16, 23, 32, 40, 57, 64};
    for (size_t ti = 0; ti < sizeof tunings / sizeof *tunings; ti++) {
        if (ti > 0) assert_int_equal(serve_gemm_small_set_tuning(s->g, 0, -1, &tunings[ti]), 0);
        for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
            check_shape(s, rows[i], 144, 1024, three, 3, 8, 0);
            check_shape(s, rows[i], 400, 96, one, 1, 0, 1);
        }
        for (int sp = 2; sp <= 5; sp++) check_shape(s, 17, 144, 2048, three, 3, 0, sp);
        check_shape(s, 64, 160, 1120, three160, 3, 0, 3); /* 35 blocks: a tail past the chunks */
        check_shape(s, 5, 160, 1120, three160, 3, 8, 0);
    }
    for (int c = 0; c < SERVE_GEMM_SMALL_CLASSES; c++)
        for (int nt = 1; nt <= 8; nt++)
            assert_int_equal(serve_gemm_small_set_tuning(s->g, nt, c, &defaults[c][nt - 1]), 0);
}

static int device_major(gs_state *s) {
    cl_uint major = 0;
    if (clGetDeviceInfo(lazyattn_context_device(s->ctx), CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV,
                        sizeof major, &major, NULL) != CL_SUCCESS)
        return 0;
    return (int)major;
}

/* wgmma kernel shapes: one and two 64-row sets a warpgroup, two
 * warpgroups over rows, K slices, 1..4 blocks a chunk (2 and 3 ring slots),
 * with and without the W prefetch, X by cp.async (xs 2) and through
 * registers (xs 3; xs 4: loaded after the chunk's wgmma, a register cap
 * of 168 for 4 and 12 warps, 128 for 8, the split-K sums 3 or 1 splits a
 * round trip at 8 tiles; 12 warps: work-groups of 192 rows, partly past N) */
static const serve_gemm_small_tuning WG_TUNINGS[] = {
    {1, 4, 1, 2, 1, 2, 0, 2}, {2, 4, 1, 2, 1, 2, 0, 2}, {1, 8, 1, 2, 0, 1, 0, 2},
    {1, 4, 1, 4, 1, 2, 0, 2}, {1, 4, 3, 1, 0, 2, 0, 2}, /* X through registers: */
    {1, 4, 1, 2, 1, 2, 0, 3}, {2, 4, 2, 1, 0, 0, 0, 3}, {1, 4, 1, 4, 1, 2, 0, 4},
    {2, 4, 2, 1, 0, 0, 0, 4}, {1, 12, 1, 4, 1, 2, 0, 4}, /* 3 warpgroups: 192 rows */
    {1, 12, 1, 4, 1, 2, 0, 3}, /* the down projection's default on 9.x */
    /* W through local memory (xs 5): 5 slots of one block; 2 row sets (3
     * slots); 2 K slices (2 slots each) */
    {1, 4, 1, 1, 1, 2, 0, 5}, {2, 4, 1, 1, 1, 0, 0, 5}, {1, 4, 2, 1, 0, 2, 0, 5},
};

/* The wgmma modes (xs 2..5) against the double reference at every row count:
 * three ranges with strides and an X offset, a K tail (96: 3 blocks, 1120:
 * 35), split-K, accumulate, repeatability. UNSUPPORTED off compute
 * capability 9.x, the tunings unchanged. */
static void test_products_wgmma(void **state) {
    gs_state *s = *state;
    if (!s->g) {
        print_message("no NVIDIA tensor-core path on this device (mma.sync): skipped\n");
        skip();
    }
    serve_gemm_small_tuning before, after;
    assert_int_equal(serve_gemm_small_get_tuning(s->g, 8, 0, &before), 0);
    if (device_major(s) != 9) {
        assert_int_equal(serve_gemm_small_set_tuning(s->g, 0, -1, &WG_TUNINGS[0]), LAZYATTN_STATUS_UNSUPPORTED);
        assert_non_null(strstr(serve_last_error(), "9.x"));
        assert_int_equal(serve_gemm_small_get_tuning(s->g, 8, 0, &after), 0);
        assert_memory_equal(&before, &after, sizeof before);
        print_message("wgmma refused off compute capability 9.x (checked); its products skipped\n");
        skip();
    }
    serve_gemm_small_tuning defaults[SERVE_GEMM_SMALL_CLASSES][8];
    for (int c = 0; c < SERVE_GEMM_SMALL_CLASSES; c++)
        for (int nt = 1; nt <= 8; nt++)
            assert_int_equal(serve_gemm_small_get_tuning(s->g, nt, c, &defaults[c][nt - 1]), 0);
    const int three[3] = {64, 32, 48}, one[1] = {400}, three160[3] = {64, 48, 48};
    for (size_t ti = 0; ti < sizeof WG_TUNINGS / sizeof *WG_TUNINGS; ti++) {
        const int st = serve_gemm_small_set_tuning(s->g, 0, -1, &WG_TUNINGS[ti]);
        if (st) fprintf(stderr, "wgmma tuning %zu: %s\n", ti, serve_last_error());
        assert_int_equal(st, 0);
        for (int rows = 1; rows <= 64; rows++) {
            check_shape(s, rows, 144, 1024, three, 3, 8, 0);
            if (rows % 7 == 1 || rows % 8 == 0) check_shape(s, rows, 400, 96, one, 1, 0, 1);
        }
        for (int sp = 2; sp <= 5; sp++) {
            check_shape(s, 17, 144, 2048, three, 3, 0, sp);
            check_shape(s, 64, 144, 2048, three, 3, 8, sp);
        }
        check_shape(s, 64, 160, 1120, three160, 3, 0, 3); /* 35 blocks: a short last chunk */
        check_shape(s, 5, 160, 1120, three160, 3, 8, 0);
        check_shape(s, 40, 160, 1120, three160, 3, 8, 7);
    }
    for (int c = 0; c < SERVE_GEMM_SMALL_CLASSES; c++)
        for (int nt = 1; nt <= 8; nt++)
            assert_int_equal(serve_gemm_small_set_tuning(s->g, nt, c, &defaults[c][nt - 1]), 0);
}

/* Rows 1..63 of Y against the same rows of a 64-row run, in every class of
 * W, with the current tunings; returns the row counts that differed
 * (bitwise) and prints them. */
static int rows_independent(gs_state *s, const char *what) {
    int differ = 0;
    cl_context cl = lazyattn_context_cl_context(s->ctx);
    cl_command_queue q = lazyattn_context_queue(s->ctx);
    const int shapes[][2] = {{144, 1024}, {2048, 20480}, {10240, 4096}}; /* out, in: classes 0, 1, 2 */
    for (int si = 0; si < 3; si++) {
        const int out = shapes[si][0], in = shapes[si][1];
        assert_int_equal(serve_gemm_small_class(out, in), si);
        const size_t xn = (size_t)SERVE_GEMM_ROW_PAD * in, wn = (size_t)out * in;
        uint16_t *xh = malloc(xn * 2), *wh = malloc(wn * 2);
        float *all = malloc(sizeof(float) * 64 * out), *part = malloc(sizeof(float) * 64 * out);
        assert_true(xh && wh && all && part);
        for (size_t i = 0; i < xn; i++) xh[i] = rnd_bf16();
        for (size_t i = 0; i < wn; i++) wh[i] = rnd_bf16();
        cl_int err;
        cl_mem x = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, xn * 2, xh, &err);
        assert_int_equal(err, CL_SUCCESS);
        cl_mem w = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, wn * 2, wh, &err);
        assert_int_equal(err, CL_SUCCESS);
        cl_mem y = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof(float) * 64 * out, NULL, &err);
        assert_int_equal(err, CL_SUCCESS);
        serve_gemm_args a = {64, out, in, x, 0, w, 1, {{y, 0, out, out}}, 0, 0, NULL, 0.0f, 0};
        assert_int_equal(serve_gemm_small_run(s->g, q, &a, NULL), 0);
        assert_int_equal(clEnqueueReadBuffer(q, y, CL_TRUE, 0, sizeof(float) * 64 * out, all, 0, NULL, NULL), 0);
        const int rows[] = {1, 3, 8, 9, 16, 17, 24, 31, 33, 40, 50, 56, 63};
        for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
            a.rows = rows[i];
            assert_int_equal(serve_gemm_small_run(s->g, q, &a, NULL), 0);
            assert_int_equal(clEnqueueReadBuffer(q, y, CL_TRUE, 0, sizeof(float) * rows[i] * out, part, 0, NULL, NULL), 0);
            if (memcmp(part, all, sizeof(float) * rows[i] * out) != 0) {
                long n = 0;
                for (size_t e = 0; e < (size_t)rows[i] * out; e++) n += memcmp(&part[e], &all[e], 4) != 0;
                fprintf(stderr, "%s: out %d in %d: rows %d differ from the same rows of 64 (%ld of %d values)\n",
                        what, out, in, rows[i], n, rows[i] * out);
                differ++;
            }
        }
        clReleaseMemObject(x), clReleaseMemObject(w), clReleaseMemObject(y);
        free(xh), free(wh), free(all), free(part);
    }
    return differ;
}

/* With the default tunings a row of Y is bitwise the same whatever the
 * other rows (the sum order does not depend on `rows`), in every class of W. */
static void test_rows_independent(void **state) {
    gs_state *s = *state;
    if (!s->g) {
        print_message("no NVIDIA tensor-core path on this device (mma.sync): skipped\n");
        skip();
    }
    assert_int_equal(rows_independent(s, "defaults"), 0);
}

/* The same with one wgmma tuning for every row count: does wgmma
 * m64nNk16 give a column the same bits for every N (8..64)? */
static void test_rows_independent_wgmma(void **state) {
    gs_state *s = *state;
    if (!s->g || device_major(s) != 9) {
        print_message("needs an NVIDIA GPU of compute capability 9.x (wgmma): skipped\n");
        skip();
    }
    serve_gemm_small_tuning defaults[SERVE_GEMM_SMALL_CLASSES][8];
    for (int c = 0; c < SERVE_GEMM_SMALL_CLASSES; c++)
        for (int nt = 1; nt <= 8; nt++)
            assert_int_equal(serve_gemm_small_get_tuning(s->g, nt, c, &defaults[c][nt - 1]), 0);
    int differ = 0;
    /* xs 2, 2 row sets, xs 3, xs 4, the down default (xs 3, 12 warps), xs 5 */
    const int pick[] = {0, 1, 5, 7, 10, 11};
    assert_int_equal(WG_TUNINGS[10].wr, 12); /* the indices above follow WG_TUNINGS */
    assert_int_equal(WG_TUNINGS[11].xs, 5);
    for (size_t i = 0; i < sizeof pick / sizeof *pick; i++) {
        const serve_gemm_small_tuning *t = &WG_TUNINGS[pick[i]];
        char what[64];
        snprintf(what, sizeof what, "wgmma %d,%d,%d,%d,%d,%d,%d,%d", t->r, t->wr, t->wk, t->u, t->pipe,
                 t->whint, t->splits, t->xs);
        assert_int_equal(serve_gemm_small_set_tuning(s->g, 0, -1, t), 0);
        differ += rows_independent(s, what);
    }
    for (int c = 0; c < SERVE_GEMM_SMALL_CLASSES; c++)
        for (int nt = 1; nt <= 8; nt++)
            assert_int_equal(serve_gemm_small_set_tuning(s->g, nt, c, &defaults[c][nt - 1]), 0);
    fprintf(stderr, "wgmma rows independent of the batch: %s\n", differ ? "NO" : "yes (bitwise)");
    assert_int_equal(differ, 0);
}

/* ---- decode's fused variants (GS_FUSE: f32 X with the RMSNorm, SwiGLU) ---- */

#define FS_IN 256  /* hidden */
#define FS_FFN 384 /* gate/up columns each: a multiple of every default's rows a work-group */
#define FS_QKV 128 /* q 64, k 32, v 32 */
#define FS_X0 8    /* X from this row of its buffer (x_off 8 rows, a multiple of 8) */
#define FS_EPS 1e-5f

typedef int (*fs_run_fn)(void *impl, cl_command_queue q, const serve_gemm_args *a);
static int fs_run_small(void *impl, cl_command_queue q, const serve_gemm_args *a) {
    return serve_gemm_small_run(impl, q, a, NULL);
}
static int fs_run_dispatch(void *impl, cl_command_queue q, const serve_gemm_args *a) {
    return serve_gemm_bf16_run(impl, q, a, NULL);
}

static float fs_rand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
}

static cl_mem fs_buffer(gs_state *s, size_t bytes, const void *init) {
    cl_int err;
    cl_mem b = clCreateBuffer(lazyattn_context_cl_context(s->ctx),
                              CL_MEM_READ_WRITE | (init ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)init, &err);
    assert_int_equal(err, CL_SUCCESS);
    return b;
}

/* rows of the unfused sequence through run: rmsnorm + QKV (three ranges),
 * rmsnorm + gate/up + SwiGLU, down from that f32 product onto a residual;
 * every element within gemm_fused_ref.h's bound. */
static void fs_check(gs_state *s, fs_run_fn run, void *impl, int rows, const char *what) {
    cl_command_queue q = lazyattn_context_queue(s->ctx);
    const size_t xn = (size_t)(FS_X0 + rows) * FS_IN;
    float *x = malloc(xn * 4), *gain = malloc(FS_IN * 4), *res0 = malloc((size_t)rows * FS_IN * 4);
    uint16_t *wqkv = malloc((size_t)FS_QKV * FS_IN * 2), *wgu = malloc((size_t)2 * FS_FFN * FS_IN * 2);
    uint16_t *wd = malloc((size_t)FS_IN * FS_FFN * 2);
    float *qkv = malloc((size_t)rows * FS_QKV * 4), *act = malloc((size_t)rows * FS_FFN * 4);
    float *res = malloc((size_t)rows * FS_IN * 4);
    assert_true(x && gain && res0 && wqkv && wgu && wd && qkv && act && res);
    for (int r = 0; r < FS_X0 + rows; r++) { /* rows of magnitudes 0.05 .. 20 */
        const float m = (float)pow(20.0, fs_rand());
        for (int k = 0; k < FS_IN; k++) x[(size_t)r * FS_IN + k] = fs_rand() * m;
    }
    for (int k = 0; k < FS_IN; k++) gain[k] = 1.0f + 0.5f * fs_rand();
    for (size_t i = 0; i < (size_t)FS_QKV * FS_IN; i++) wqkv[i] = rnd_bf16();
    for (size_t i = 0; i < (size_t)2 * FS_FFN * FS_IN; i++) wgu[i] = rnd_bf16();
    for (size_t i = 0; i < (size_t)FS_IN * FS_FFN; i++) wd[i] = rnd_bf16();
    for (size_t i = 0; i < (size_t)rows * FS_IN; i++) res0[i] = fs_rand() * 4.0f;
    cl_mem xb = fs_buffer(s, xn * 4, x), gb = fs_buffer(s, FS_IN * 4, gain);
    cl_mem wqkv_b = fs_buffer(s, (size_t)FS_QKV * FS_IN * 2, wqkv);
    cl_mem wgu_b = fs_buffer(s, (size_t)2 * FS_FFN * FS_IN * 2, wgu);
    cl_mem wd_b = fs_buffer(s, (size_t)FS_IN * FS_FFN * 2, wd);
    cl_mem qkv_b = fs_buffer(s, (size_t)rows * FS_QKV * 4, NULL);
    cl_mem act_b = fs_buffer(s, (size_t)rows * FS_FFN * 4, NULL);
    cl_mem res_b = fs_buffer(s, (size_t)rows * FS_IN * 4, res0);
    serve_gemm_args a;
    memset(&a, 0, sizeof a);
    a.rows = rows, a.out = FS_QKV, a.in = FS_IN, a.x = xb, a.x_off = (size_t)FS_X0 * FS_IN;
    a.w = wqkv_b, a.n_outs = 3, a.x_f32 = 1, a.norm = gb, a.norm_eps = FS_EPS;
    /* q, k, v as three ranges of one [rows, 128] buffer (offsets 0, 64, 96, stride 128) */
    a.outs[0] = (serve_gemm_out){qkv_b, 0, 64, FS_QKV};
    a.outs[1] = (serve_gemm_out){qkv_b, 64, 32, FS_QKV};
    a.outs[2] = (serve_gemm_out){qkv_b, 96, 32, FS_QKV};
    int st = run(impl, q, &a);
    if (st) fail_msg("%s rows %d: QKV: %d %s", what, rows, st, serve_last_error());
    serve_gemm_args gu = a;
    gu.out = 2 * FS_FFN, gu.w = wgu_b, gu.n_outs = 1, gu.swiglu = 1;
    gu.outs[0] = (serve_gemm_out){act_b, 0, FS_FFN, FS_FFN};
    st = run(impl, q, &gu);
    if (st) fail_msg("%s rows %d: gate/up: %d %s", what, rows, st, serve_last_error());
    serve_gemm_args dn;
    memset(&dn, 0, sizeof dn);
    dn.rows = rows, dn.out = FS_IN, dn.in = FS_FFN, dn.x = act_b, dn.w = wd_b, dn.n_outs = 1;
    dn.outs[0] = (serve_gemm_out){res_b, 0, FS_IN, FS_IN};
    dn.x_f32 = 1, dn.accumulate = 1;
    st = run(impl, q, &dn);
    if (st) fail_msg("%s rows %d: down: %d %s", what, rows, st, serve_last_error());
    assert_int_equal(clEnqueueReadBuffer(q, qkv_b, CL_TRUE, 0, (size_t)rows * FS_QKV * 4, qkv, 0, NULL, NULL), 0);
    assert_int_equal(clEnqueueReadBuffer(q, act_b, CL_TRUE, 0, (size_t)rows * FS_FFN * 4, act, 0, NULL, NULL), 0);
    assert_int_equal(clEnqueueReadBuffer(q, res_b, CL_TRUE, 0, (size_t)rows * FS_IN * 4, res, 0, NULL, NULL), 0);
    double xr[FS_IN], amb[FS_IN], worst = 0;
    for (int r = 0; r < rows; r++) {
        fref_norm_row(x + (size_t)(FS_X0 + r) * FS_IN, gain, FS_EPS, FS_IN, xr, amb);
        for (int c = 0; c < FS_QKV; c++) {
            double bound, want = fref_dot(wqkv + (size_t)c * FS_IN, xr, amb, FS_IN, &bound);
            const double got = qkv[(size_t)r * FS_QKV + c];
            if (!(fabs(got - want) <= bound))
                fail_msg("%s rows %d: QKV row %d col %d: %.9g, want %.9g (bound %.3g)", what, rows,
                         r, c, got, want, bound);
            worst = fmax(worst, fabs(got - want) / bound);
        }
        for (int j = 0; j < FS_FFN; j++) {
            double bg, bu, bound;
            const double g = fref_dot(wgu + (size_t)j * FS_IN, xr, amb, FS_IN, &bg);
            const double u = fref_dot(wgu + (size_t)(FS_FFN + j) * FS_IN, xr, amb, FS_IN, &bu);
            const double want = fref_swiglu(g, bg, u, bu, &bound), got = act[(size_t)r * FS_FFN + j];
            if (!(fabs(got - want) <= bound))
                fail_msg("%s rows %d: SwiGLU row %d col %d: %.9g, want %.9g (bound %.3g)", what,
                         rows, r, j, got, want, bound);
            worst = fmax(worst, fabs(got - want) / bound);
        }
        for (int c = 0; c < FS_IN; c++) { /* from the device's own product, bf16 as staged */
            double sum = 0, mag = 0;
            for (int k = 0; k < FS_FFN; k++) {
                const double p = fref_bf(act[(size_t)r * FS_FFN + k]) *
                                 serve_float_of_bf16(wd[(size_t)c * FS_FFN + k]);
                sum += p, mag += fabs(p);
            }
            const double want = sum + res0[(size_t)r * FS_IN + c], got = res[(size_t)r * FS_IN + c];
            const double bound = 2.0 * (FS_FFN + 2) * ldexp(mag + fabs(want), -24) + 1e-30;
            if (!(fabs(got - want) <= bound))
                fail_msg("%s rows %d: down row %d col %d: %.9g, want %.9g (bound %.3g)", what, rows,
                         r, c, got, want, bound);
            worst = fmax(worst, fabs(got - want) / bound);
        }
    }
    print_message("%s rows %2d: worst error %.3f of its bound\n", what, rows, worst);
    cl_mem bufs[] = {xb, gb, wqkv_b, wgu_b, wd_b, qkv_b, act_b, res_b};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) clReleaseMemObject(bufs[i]);
    free(x), free(gain), free(res0), free(wqkv), free(wgu), free(wd), free(qkv), free(act), free(res);
}

/* The fused variants of the kernel shapes they run on (xs 0: the mma.sync
 * defaults, with forced splits; on 9.x the wgmma defaults, xs 3) at rows
 * 1..64; xs 1 refuses them (UNSUPPORTED: the dispatcher falls back). Off
 * NVIDIA the same check runs on the portable kernel (checking the check),
 * then the small kernel's part skips. */
static void test_products_fused(void **state) {
    gs_state *s = *state;
    if (!s->ctx) {
        print_message("no OpenCL device: skipped\n");
        skip();
    }
    static const int rows[] = {1, 7, 9, 33, 64};
    if (!s->g) {
        serve_gemm_bf16 *d = NULL;
        assert_int_equal(serve_gemm_bf16_create(s->ctx, &d), 0);
        serve_gemm_bf16_portable_only(d, 1);
        fs_check(s, fs_run_dispatch, d, 1, "portable");
        fs_check(s, fs_run_dispatch, d, 64, "portable");
        serve_gemm_bf16_destroy(d);
        print_message("no NVIDIA tensor-core path: the small kernel's fused variants skipped\n");
        skip();
    }
    serve_gemm_small_tuning defaults[SERVE_GEMM_SMALL_CLASSES][8];
    for (int c = 0; c < SERVE_GEMM_SMALL_CLASSES; c++)
        for (int nt = 1; nt <= 8; nt++)
            assert_int_equal(serve_gemm_small_get_tuning(s->g, nt, c, &defaults[c][nt - 1]), 0);
    serve_gemm_small_tuning tunings[] = {
        {0, 0, 0, 0, 0, 0, 0, 0}, /* the defaults */
        {1, 1, 8, 8, 0, 2, 0, 0}, {1, 1, 8, 8, 0, 2, 3, 0}, {2, 4, 2, 4, 0, 2, 0, 0},
        {2, 4, 2, 4, 0, 2, 2, 0}, /* on 9.x: */
        {1, 8, 1, 2, 1, 2, 0, 3}, {1, 12, 1, 4, 1, 2, 0, 3}, {1, 8, 1, 2, 1, 2, 3, 3},
    };
    const size_t n_t = device_major(s) == 9 ? sizeof tunings / sizeof *tunings : 5;
    for (size_t ti = 0; ti < n_t; ti++) {
        char what[64];
        snprintf(what, sizeof what, "tuning %zu (xs %d, splits %d)", ti, tunings[ti].xs, tunings[ti].splits);
        if (ti > 0) assert_int_equal(serve_gemm_small_set_tuning(s->g, 0, -1, &tunings[ti]), 0);
        for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) fs_check(s, fs_run_small, s->g, rows[i], what);
    }
    /* X by cp.async: the fused variants are not built there */
    const serve_gemm_small_tuning xs1 = {2, 8, 1, 2, 1, 2, 0, 1};
    assert_int_equal(serve_gemm_small_set_tuning(s->g, 0, -1, &xs1), 0);
    cl_mem b = fs_buffer(s, 1 << 20, NULL);
    serve_gemm_args a;
    memset(&a, 0, sizeof a);
    a.rows = 4, a.out = 64, a.in = 64, a.x = b, a.w = b, a.n_outs = 1, a.x_f32 = 1;
    a.outs[0] = (serve_gemm_out){b, 0, 64, 64};
    assert_int_equal(serve_gemm_small_run(s->g, lazyattn_context_queue(s->ctx), &a, NULL),
                     LAZYATTN_STATUS_UNSUPPORTED);
    assert_non_null(strstr(serve_last_error(), "xs 0 or 3"));
    clReleaseMemObject(b);
    for (int c = 0; c < SERVE_GEMM_SMALL_CLASSES; c++)
        for (int nt = 1; nt <= 8; nt++)
            assert_int_equal(serve_gemm_small_set_tuning(s->g, nt, c, &defaults[c][nt - 1]), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_bad_input),
        cmocka_unit_test(test_run_bad_input),
        cmocka_unit_test(test_products),
        cmocka_unit_test(test_rows_independent),
        cmocka_unit_test(test_products_wgmma),
        cmocka_unit_test(test_rows_independent_wgmma),
        cmocka_unit_test(test_products_fused),
    };
    return cmocka_run_group_tests_name("gemm_small", tests, setup, teardown);
}
