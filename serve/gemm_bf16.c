/* SPDX-License-Identifier: Apache-2.0 */
/* bf16 projections (issue 16): the dispatcher and the portable kernel.
 *
 * serve_gemm_bf16_run hands a projection to the NVIDIA tensor-core kernels
 * (rows <= 64: the small, weight-bandwidth path; rows > 64: the large one)
 * and falls back to the
 * portable kernel (serve/gemm_bf16.cl, any OpenCL device) when they are not
 * there, or answer LAZYATTN_STATUS_UNSUPPORTED for this device or shape.
 * The fused variants (x_f32, norm, swiglu) take the portable fused kernel,
 * or on NVIDIA the small kernel for one row (serve_small_fused: where the
 * H100 measured them faster) or, with LAZYATTN_TUNE=serve.fused_decode=1,
 * for every row count it takes (=0: never). */
#include "gemm_bf16.h"
#include "gemm_nv_large.h"
#include "gemm_nv_small.h"

#include <stdlib.h>
#include <string.h>

/* One tensor-core implementation behind the dispatcher: its state and calls. */
typedef struct serve_gemm_impl {
    void *state; /* NULL: not there */
    int (*run)(void *state, cl_command_queue queue, const serve_gemm_args *a, cl_event *event);
    void (*destroy)(void *state);
} serve_gemm_impl;

struct serve_gemm_bf16 {
    lazyattn_context *ctx;
    cl_program program;
    cl_kernel kernel; /* serve_gemm_bf16 (portable) */
    cl_kernel kernel_fused; /* serve_gemm_bf16_fused (portable) */
    int small_fused; /* serve.fused_decode: -1 unset, 0 or 1 (serve_small_fused) */
    serve_gemm_impl large, small;
    serve_gemm_impl test_large, test_small; /* serve_gemm_bf16_override_for_testing: run set */
    int portable_only;
    int64_t counts[SERVE_GEMM_KERNEL_COUNT];
};

/* ---- the tensor-core kernels: the one place they are wired in ----------- */
/* serve/gemm_nv_large.c and serve/gemm_nv_small.c (the interface of
 * serve/gemm_bf16.h); create answers UNSUPPORTED on a device they do not
 * cover (not NVIDIA's fast path, or not Hopper for the large kernel). */
static int serve_nv_large_run(void *s, cl_command_queue q, const serve_gemm_args *a, cl_event *e) {
    return serve_gemm_large_run(s, q, a, e);
}
static void serve_nv_large_destroy(void *s) { serve_gemm_large_destroy(s); }
static int serve_nv_small_run(void *s, cl_command_queue q, const serve_gemm_args *a, cl_event *e) {
    return serve_gemm_small_run(s, q, a, e);
}
static void serve_nv_small_destroy(void *s) { serve_gemm_small_destroy(s); }

/* UNSUPPORTED (not an NVIDIA device the kernels cover) leaves the slot
 * empty; any other failure is the caller's. */
static int serve_gemm_nv_create(serve_gemm_bf16 *g) {
    serve_gemm_large *large = NULL;
    serve_gemm_small *small = NULL;
    int st = serve_gemm_large_create(g->ctx, &large);
    if (st == 0)
        g->large = (serve_gemm_impl){large, serve_nv_large_run, serve_nv_large_destroy};
    else if (st != LAZYATTN_STATUS_UNSUPPORTED)
        return st;
    st = serve_gemm_small_create(g->ctx, &small);
    if (st == 0)
        g->small = (serve_gemm_impl){small, serve_nv_small_run, serve_nv_small_destroy};
    else if (st != LAZYATTN_STATUS_UNSUPPORTED)
        return st;
    return LAZYATTN_STATUS_OK;
}

/* ---- arguments ----------------------------------------------------------- */

static size_t serve_mem_size(cl_mem b) {
    size_t n = 0;
    if (clGetMemObjectInfo(b, CL_MEM_SIZE, sizeof n, &n, NULL) != CL_SUCCESS) return 0;
    return n;
}

int serve_gemm_args_check(const serve_gemm_args *a, const char *who) {
    int st = serve_gemm_args_check_shape(a, who);
    if (st) return st;
    if (!who) who = "bf16 GEMM";
    /* X: rows padded to SERVE_GEMM_ROW_PAD from x_off; W: [out, in] */
    uint64_t in = (uint64_t)a->in, pad = ((uint64_t)a->rows + SERVE_GEMM_ROW_PAD - 1) /
                                         SERVE_GEMM_ROW_PAD * SERVE_GEMM_ROW_PAD;
    uint64_t x_need = ((uint64_t)a->x_off + pad * in) * 2u, w_need = (uint64_t)a->out * in * 2u;
    if (a->x_f32) /* f32 rows, no padding */
        x_need = ((uint64_t)a->x_off + (uint64_t)a->rows * in) * 4u, pad = (uint64_t)a->rows;
    size_t x_size = serve_mem_size(a->x), w_size = serve_mem_size(a->w);
    if (x_need > x_size)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: X holds %zu bytes, %d rows (padded to %llu) of %d %s from "
                          "element %zu need %llu",
                          who, x_size, a->rows, (unsigned long long)pad, a->in,
                          a->x_f32 ? "f32" : "bf16", a->x_off, (unsigned long long)x_need);
    if (a->norm && serve_mem_size(a->norm) < (uint64_t)a->in * 4u)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: the RMSNorm gain holds %zu bytes, [%d] f32 need %llu", who,
                          serve_mem_size(a->norm), a->in, (unsigned long long)in * 4u);
    if (w_need > w_size)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: W holds %zu bytes, [%d, %d] bf16 need %llu", who, w_size, a->out,
                          a->in, (unsigned long long)w_need);
    for (int r = 0; r < a->n_outs; r++) {
        const serve_gemm_out *o = &a->outs[r];
        uint64_t need = ((uint64_t)o->off + (uint64_t)(a->rows - 1) * (uint64_t)o->ld +
                         (uint64_t)o->cols) * 4u;
        size_t have = serve_mem_size(o->buf);
        if (need > have)
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                              "%s: output range %d holds %zu bytes, %d rows x %d columns "
                              "(stride %d) from element %zu need %llu",
                              who, r, have, a->rows, o->cols, o->ld, o->off,
                              (unsigned long long)need);
    }
    return LAZYATTN_STATUS_OK;
}

/* ---- create / destroy ------------------------------------------------------ */

void serve_gemm_bf16_destroy(serve_gemm_bf16 *g) {
    if (!g) return;
    if (g->large.state) g->large.destroy(g->large.state);
    if (g->small.state) g->small.destroy(g->small.state);
    if (g->kernel) clReleaseKernel(g->kernel);
    if (g->kernel_fused) clReleaseKernel(g->kernel_fused);
    if (g->program) clReleaseProgram(g->program);
    free(g);
}

static int serve_gemm_portable_build(serve_gemm_bf16 *g) {
    const char *text = serve_source_text("gemm_bf16");
    if (!text) return serve_fail(LAZYATTN_STATUS_NOT_FOUND, "gemm_bf16 source not embedded");
    /* through the library: its program cache, when the context has one */
    int st = lazyattn_context_build_program(g->ctx, text, "-cl-std=CL1.2", 0, &g->program);
    if (st) return serve_lz_fail(st, "serve/gemm_bf16.cl");
    cl_int err;
    cl_device_id dev = lazyattn_context_device(g->ctx);
    g->kernel = clCreateKernel(g->program, "serve_gemm_bf16", &err);
    if (err != CL_SUCCESS) return serve_cl_fail(err, "serve_gemm_bf16");
    g->kernel_fused = clCreateKernel(g->program, "serve_gemm_bf16_fused", &err);
    if (err != CL_SUCCESS) return serve_cl_fail(err, "serve_gemm_bf16_fused");
    size_t wg = 0, wg_fused = 0;
    clGetKernelWorkGroupInfo(g->kernel, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    clGetKernelWorkGroupInfo(g->kernel_fused, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg_fused,
                             &wg_fused, NULL);
    if (wg_fused < wg) wg = wg_fused;
    if (wg < 256)
        return serve_fail(LAZYATTN_STATUS_UNSUPPORTED,
                          "serve/gemm_bf16.cl needs work-groups of 256, the device allows %zu", wg);
    return LAZYATTN_STATUS_OK;
}

int serve_gemm_bf16_create(lazyattn_context *ctx, serve_gemm_bf16 **out) {
    if (!out) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gemm_bf16_create: out is NULL");
    *out = NULL;
    if (!ctx) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gemm_bf16_create: ctx is NULL");
    serve_gemm_bf16 *g = calloc(1, sizeof *g);
    if (!g) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_gemm_bf16_create");
    g->ctx = ctx;
    int st = serve_gemm_portable_build(g);
    if (!st) st = serve_gemm_nv_create(g);
    g->small_fused = serve_tune_setting("serve.fused_decode");
    if (st) {
        serve_gemm_bf16_destroy(g);
        return st;
    }
    *out = g;
    return LAZYATTN_STATUS_OK;
}

void serve_gemm_bf16_portable_only(serve_gemm_bf16 *g, int on) {
    if (g) g->portable_only = on != 0;
}

int serve_gemm_bf16_override_for_testing(serve_gemm_bf16 *g, serve_gemm_kernel which,
                                         serve_gemm_bf16_test_run run, void *state) {
    if (!g || (which != SERVE_GEMM_KERNEL_LARGE && which != SERVE_GEMM_KERNEL_SMALL))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_gemm_bf16_override_for_testing: %s",
                          g ? "which must be LARGE or SMALL" : "g is NULL");
    serve_gemm_impl *t = which == SERVE_GEMM_KERNEL_LARGE ? &g->test_large : &g->test_small;
    *t = (serve_gemm_impl){state, run, NULL};
    return LAZYATTN_STATUS_OK;
}

/* Rows up to which the small kernel takes the fused variants by default:
 * the 8B decode step on an H100 (bench_forward, two rounds alternating)
 * was 7.13, 7.09 ms fused against 7.22, 7.22 for one row, but 9.35, 9.47
 * against 9.19, 9.11 for 16 and 19.4 against 15.7 for 64 (each work-group
 * recomputes its rows' norm over the whole of X). */
#define SERVE_SMALL_FUSED_ROWS 1

/* 1 when the small kernel takes the fused variants for rows rows. */
static int serve_small_fused(const serve_gemm_bf16 *g, int rows) {
    if (g->small_fused >= 0) return g->small_fused;
    return rows <= SERVE_SMALL_FUSED_ROWS;
}

int serve_gemm_bf16_fused(const serve_gemm_bf16 *g, int rows) {
    if (!g || rows < 1) return 0;
    if (g->portable_only) return 1;
    if (rows <= 64) return !g->small.state || serve_small_fused(g, rows);
    return !g->large.state;
}

int serve_gemm_bf16_has_tensor_cores(const serve_gemm_bf16 *g) {
    return g && (g->large.state || g->small.state);
}

void serve_gemm_bf16_counts(const serve_gemm_bf16 *g, int64_t *counts) {
    if (!counts) return;
    for (int i = 0; i < SERVE_GEMM_KERNEL_COUNT; i++) counts[i] = g ? g->counts[i] : 0;
}

/* ---- run ------------------------------------------------------------------- */

/* The fused variants on serve_gemm_bf16_fused (one 32 x 32 tile of Y a
 * work-group, as the plain kernel). */
static int serve_gemm_portable_fused_run(serve_gemm_bf16 *g, cl_command_queue queue,
                                         const serve_gemm_args *a, cl_event *event) {
    cl_kernel k = g->kernel_fused;
    cl_int rows = a->rows, out = a->out, in = a->in, acc = a->accumulate, x_f32 = a->x_f32;
    cl_int swiglu = a->swiglu;
    cl_float eps = a->norm_eps;
    cl_ulong x_off = a->x_off;
    cl_mem xb = a->x_f32 ? NULL : a->x, xf = a->x_f32 ? a->x : NULL, norm = a->norm;
    cl_int err = CL_SUCCESS;
    cl_uint i = 0;
#define GB_ARG(v) err |= clSetKernelArg(k, i++, sizeof(v), &(v))
    GB_ARG(rows);
    GB_ARG(out);
    GB_ARG(in);
    GB_ARG(x_f32);
    GB_ARG(xb);
    GB_ARG(xf);
    GB_ARG(x_off);
    GB_ARG(norm);
    GB_ARG(eps);
    GB_ARG(swiglu);
    GB_ARG(a->w);
    for (int r = 0; r < SERVE_GEMM_MAX_OUTS; r++) {
        /* an unused range: the first buffer, no columns */
        const serve_gemm_out *o = &a->outs[r < a->n_outs ? r : 0];
        cl_ulong off = o->off;
        cl_int cols = r < a->n_outs ? o->cols : 0, ld = o->ld;
        GB_ARG(o->buf);
        GB_ARG(off);
        GB_ARG(cols);
        GB_ARG(ld);
    }
    GB_ARG(acc);
#undef GB_ARG
    if (err != CL_SUCCESS)
        return serve_fail(LAZYATTN_STATUS_OPENCL, "serve_gemm_bf16_fused: clSetKernelArg failed");
    const size_t ycols = (size_t)(a->swiglu ? a->out / 2 : a->out);
    size_t global[2] = {(ycols + 31) / 32 * 16, ((size_t)a->rows + 31) / 32 * 16};
    size_t local[2] = {16, 16};
    err = clEnqueueNDRangeKernel(queue, k, 2, NULL, global, local, 0, NULL, event);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : serve_cl_fail(err, "serve_gemm_bf16_fused");
}

static int serve_gemm_portable_run(serve_gemm_bf16 *g, cl_command_queue queue,
                                   const serve_gemm_args *a, cl_event *event) {
    if (a->x_f32 || a->swiglu) return serve_gemm_portable_fused_run(g, queue, a, event);
    cl_kernel k = g->kernel;
    cl_int rows = a->rows, out = a->out, in = a->in, acc = a->accumulate;
    cl_ulong x_off = a->x_off;
    cl_int err = CL_SUCCESS;
    err |= clSetKernelArg(k, 0, sizeof(cl_int), &rows);
    err |= clSetKernelArg(k, 1, sizeof(cl_int), &out);
    err |= clSetKernelArg(k, 2, sizeof(cl_int), &in);
    err |= clSetKernelArg(k, 3, sizeof(cl_mem), &a->x);
    err |= clSetKernelArg(k, 4, sizeof(cl_ulong), &x_off);
    err |= clSetKernelArg(k, 5, sizeof(cl_mem), &a->w);
    for (int r = 0; r < SERVE_GEMM_MAX_OUTS; r++) {
        /* an unused range: the first buffer, no columns */
        const serve_gemm_out *o = &a->outs[r < a->n_outs ? r : 0];
        cl_ulong off = o->off;
        cl_int cols = r < a->n_outs ? o->cols : 0, ld = o->ld;
        err |= clSetKernelArg(k, 6 + 4 * (cl_uint)r, sizeof(cl_mem), &o->buf);
        err |= clSetKernelArg(k, 7 + 4 * (cl_uint)r, sizeof(cl_ulong), &off);
        err |= clSetKernelArg(k, 8 + 4 * (cl_uint)r, sizeof(cl_int), &cols);
        err |= clSetKernelArg(k, 9 + 4 * (cl_uint)r, sizeof(cl_int), &ld);
    }
    err |= clSetKernelArg(k, 18, sizeof(cl_int), &acc);
    if (err != CL_SUCCESS)
        return serve_fail(LAZYATTN_STATUS_OPENCL, "serve_gemm_bf16: clSetKernelArg failed");
    /* in size_t: out or rows + 31 may pass INT_MAX */
    size_t global[2] = {((size_t)a->out + 31) / 32 * 16, ((size_t)a->rows + 31) / 32 * 16};
    size_t local[2] = {16, 16};
    err = clEnqueueNDRangeKernel(queue, k, 2, NULL, global, local, 0, NULL, event);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : serve_cl_fail(err, "serve_gemm_bf16");
}

int serve_gemm_bf16_run(serve_gemm_bf16 *g, cl_command_queue queue, const serve_gemm_args *a,
                        cl_event *event) {
    if (!g || !queue)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gemm_bf16_run: %s is NULL",
                          g ? "queue" : "g");
    int st = serve_gemm_args_check(a, "serve_gemm_bf16_run");
    if (st) return st;
    if (!g->portable_only) {
        int which = a->rows <= 64 ? SERVE_GEMM_KERNEL_SMALL : SERVE_GEMM_KERNEL_LARGE;
        serve_gemm_impl *impl = which == SERVE_GEMM_KERNEL_SMALL ? &g->small : &g->large;
        serve_gemm_impl *test = which == SERVE_GEMM_KERNEL_SMALL ? &g->test_small : &g->test_large;
        int present = impl->state != NULL;
        if (test->run) impl = test, present = 1; /* a test's stand-in (run set, any state) */
        /* the fused variants: the small kernel's where serve_small_fused says */
        if ((a->x_f32 || a->swiglu) &&
            (which != SERVE_GEMM_KERNEL_SMALL || !serve_small_fused(g, a->rows)))
            present = 0;
        if (present) {
            st = impl->run(impl->state, queue, a, event);
            if (st != LAZYATTN_STATUS_UNSUPPORTED) {
                if (!st) g->counts[which]++;
                return st;
            }
        }
    }
    st = serve_gemm_portable_run(g, queue, a, event);
    if (!st) g->counts[SERVE_GEMM_KERNEL_PORTABLE]++;
    return st;
}
