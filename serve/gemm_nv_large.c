/* SPDX-License-Identifier: Apache-2.0 */
/* Host side of the large-M bf16 projection on Hopper tensor cores (issue 16,
 * item 1); the kernel and its tile are described in serve/gemm_nv_large.cl. */
#include "gemm_nv_large.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* wg, mw, bn, bk, stages, lag, group, register cap: the best of the 20 tiles
 * measured on the H200 (docs/PERFLOG.md, issue 16 gemm-large, call 3): a
 * 128 x 128 tile of one warpgroup, 3 stages of BK 32, 168 registers so that
 * three work-groups share an SM. */
#define SERVE_GEMM_LARGE_DEFAULT "1,2,128,32,3,0,16,168"

struct serve_gemm_large {
    cl_kernel kernel;
    int wg, mw, bn, bk, stages, lag, group, maxreg;
    char tile[64];
};

/* 7 or 8 comma separated decimal integers, nothing else (no signs, spaces
 * or empty fields; each at most 4 digits, so no overflow). */
static int serve_gemm_large_fields(const char *tile, int v[8]) {
    int n = 0;
    const char *s = tile;
    for (;;) {
        int digits = 0, x = 0;
        while (*s >= '0' && *s <= '9' && digits < 5) x = 10 * x + (*s++ - '0'), digits++;
        if (digits == 0 || digits > 4 || n == 8) return -1;
        v[n++] = x;
        if (*s == 0) break;
        if (*s++ != ',') return -1;
    }
    return n < 7 ? -1 : n;
}

static int serve_gemm_large_parse(const char *tile, serve_gemm_large *g) {
    int v[8] = {0};
    if (serve_gemm_large_fields(tile, v) < 0)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_gemm_large: tile \"%.40s\" is not WG,MW,BN,BK,STAGES,LAG,GROUP[,MAXREG]", tile);
    g->wg = v[0], g->mw = v[1], g->bn = v[2], g->bk = v[3], g->stages = v[4], g->lag = v[5], g->group = v[6];
    g->maxreg = v[7];
    const int bm = 64 * g->wg * g->mw;
    const long stage_bytes = (long)(bm + g->bn) * g->bk * 2;
    const char *why = NULL;
    if (g->wg < 1 || g->wg > 4 || g->mw < 1 || g->mw > 2) why = "WG must be 1..4 and MW 1..2";
    else if (g->bn != 64 && g->bn != 128 && g->bn != 256) why = "BN must be 64, 128 or 256";
    else if (g->bk != 16 && g->bk != 32 && g->bk != 64) why = "BK must be 16, 32 or 64";
    else if (g->lag < 0 || g->lag > 1) why = "LAG must be 0 or 1";
    else if (g->stages < 1 + 2 * g->lag || g->stages > 6) why = "STAGES must be 1 (3 with LAG 1) .. 6";
    else if (g->stages * stage_bytes > 49152) why = "the stages exceed 48 KB of local memory";
    else if (g->group < 1 || g->group > 1024) why = "GROUP must be 1..1024";
    else if (g->maxreg != 0 && (g->maxreg < 64 || g->maxreg > 255)) why = "MAXREG must be 0 (none) or 64..255";
    if (why) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gemm_large: tile %.40s: %s", tile, why);
    int k = snprintf(g->tile, sizeof g->tile, "%d,%d,%d,%d,%d,%d,%d", g->wg, g->mw, g->bn, g->bk,
                     g->stages, g->lag, g->group);
    if (g->maxreg) snprintf(g->tile + k, sizeof g->tile - (size_t)k, ",%d", g->maxreg);
    return LAZYATTN_STATUS_OK;
}

int serve_gemm_large_create_tile(lazyattn_context *ctx, const char *tile, serve_gemm_large **out) {
    if (!out) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gemm_large_create: out is NULL");
    *out = NULL;
    if (!ctx) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gemm_large_create: ctx is NULL");
    serve_gemm_large *g = calloc(1, sizeof *g);
    if (!g) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_gemm_large_create");
    int st = serve_gemm_large_parse(tile ? tile : SERVE_GEMM_LARGE_DEFAULT, g);
    if (st) {
        free(g);
        return st;
    }
    if (!lazyattn_context_fast_path(ctx)) {
        free(g);
        return serve_fail(LAZYATTN_STATUS_UNSUPPORTED,
                          "serve_gemm_large: the device runs the portable path (%s): no tensor-core GEMM",
                          lazyattn_context_device_name(ctx));
    }
    char *text = serve_nv_program_text("gemm_nv_large");
    if (!text) {
        free(g);
        return serve_fail(LAZYATTN_STATUS_NOT_FOUND,
                          "serve_gemm_large: gemm_nv_large source not embedded (or no memory)");
    }
    char options[512];
    int n = snprintf(options, sizeof options,
                     "-cl-std=CL1.2 -DLG_WG=%d -DLG_MW=%d -DLG_BN=%d -DLG_BK=%d -DLG_STAGES=%d -DLG_LAG=%d",
                     g->wg, g->mw, g->bn, g->bk, g->stages, g->lag);
    if (g->maxreg) n += snprintf(options + n, sizeof options - (size_t)n, " -cl-nv-maxrregcount=%d", g->maxreg);
    const char *verbose = getenv("SERVE_NV_VERBOSE"); /* ptxas's register report on stderr */
    const int chatty = verbose && *verbose && strcmp(verbose, "0") != 0;
    if (chatty) snprintf(options + n, sizeof options - (size_t)n, " -cl-nv-verbose");
    cl_program p = NULL;
    st = lazyattn_context_build_program(ctx, text, options, LAZYATTN_BUILD_SM90A, &p);
    free(text);
    if (st) {
        free(g);
        return serve_lz_fail(st, "serve_gemm_large: the wgmma kernel");
    }
    if (chatty) { /* the register report of the sm_90a build */
        char log[8192] = "";
        clGetProgramBuildInfo(p, lazyattn_context_device(ctx), CL_PROGRAM_BUILD_LOG, sizeof log - 1,
                              log, NULL);
        fprintf(stderr, "serve_gemm_large %s build log:\n%s\n", g->tile, log);
    }
    cl_int err;
    g->kernel = clCreateKernel(p, "lg_gemm", &err);
    clReleaseProgram(p); /* the kernel keeps it */
    if (err != CL_SUCCESS) {
        free(g);
        return serve_cl_fail(err, "serve_gemm_large: clCreateKernel lg_gemm");
    }
    *out = g;
    return LAZYATTN_STATUS_OK;
}

int serve_gemm_large_create(lazyattn_context *ctx, serve_gemm_large **out) {
    const char *env = getenv("SERVE_GEMM_LARGE_TILE");
    return serve_gemm_large_create_tile(ctx, env && *env ? env : NULL, out);
}

void serve_gemm_large_destroy(serve_gemm_large *g) {
    if (!g) return;
    if (g->kernel) clReleaseKernel(g->kernel);
    free(g);
}

const char *serve_gemm_large_tile(const serve_gemm_large *g) { return g ? g->tile : ""; }

int serve_gemm_large_run(serve_gemm_large *g, cl_command_queue q, const serve_gemm_args *a, cl_event *ev) {
    static const char fn[] = "serve_gemm_large_run";
    if (!g || !q || !a) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: NULL gemm, queue or args", fn);
    int st = serve_gemm_args_check_shape(a, fn);
    if (st) return st;
    if (a->x_f32 || a->swiglu) /* decode's fused variants (gemm_bf16.h): not here */
        return serve_fail(LAZYATTN_STATUS_UNSUPPORTED, "%s: x_f32 / swiglu (the fused variants)",
                          fn);
    if (a->in % g->bk)
        return serve_fail(LAZYATTN_STATUS_UNSUPPORTED, "%s: in %d is not a multiple of %d", fn, a->in, g->bk);
    if (a->x_off % 8) /* 16-byte copies */
        return serve_fail(LAZYATTN_STATUS_UNSUPPORTED, "%s: x_off %zu is not a multiple of 8", fn, a->x_off);
    for (int r = 0; r < a->n_outs; r++) {
        const serve_gemm_out *o = &a->outs[r];
        if (o->cols % g->bn || (o->ld & 1) || (o->off & 1))
            return serve_fail(LAZYATTN_STATUS_UNSUPPORTED,
                              "%s: output range %d (cols %d, ld %d, offset %zu): needs cols a multiple "
                              "of %d, even ld and offset",
                              fn, r, o->cols, o->ld, o->off, g->bn);
    }
    const int bm = 64 * g->wg * g->mw;
    const long mt = (a->rows + bm - 1) / bm, nt = a->out / g->bn;
    const size_t threads = (size_t)128 * (size_t)g->wg;
    if (mt * nt > 0x7FFFFFFF / (long)threads)
        return serve_fail(LAZYATTN_STATUS_UNSUPPORTED, "%s: %d x %d is too many tiles", fn, a->rows, a->out);
    const int group = g->group < mt ? g->group : (int)mt;
    cl_mem y[3];
    cl_ulong off[3];
    cl_int ld[3];
    for (int r = 0; r < 3; r++) {
        const serve_gemm_out *o = &a->outs[r < a->n_outs ? r : 0];
        y[r] = o->buf, off[r] = o->off, ld[r] = o->ld;
    }
    const cl_int end0 = a->outs[0].cols;
    const cl_int end1 = a->n_outs > 1 ? end0 + a->outs[1].cols : a->out;
    const cl_ulong x_off = a->x_off;
    const cl_int rows = a->rows, K = a->in, n_total = a->out, acc = a->accumulate;
    cl_kernel k = g->kernel;
    cl_int err = clSetKernelArg(k, 0, sizeof(cl_mem), &a->x);
    err |= clSetKernelArg(k, 1, sizeof x_off, &x_off);
    err |= clSetKernelArg(k, 2, sizeof(cl_mem), &a->w);
    err |= clSetKernelArg(k, 3, sizeof rows, &rows);
    err |= clSetKernelArg(k, 4, sizeof K, &K);
    err |= clSetKernelArg(k, 5, sizeof n_total, &n_total);
    err |= clSetKernelArg(k, 6, sizeof group, &group);
    for (int r = 0; r < 3; r++) {
        err |= clSetKernelArg(k, 7 + (cl_uint)r, sizeof(cl_mem), &y[r]);
        err |= clSetKernelArg(k, 10 + (cl_uint)r, sizeof off[r], &off[r]);
        err |= clSetKernelArg(k, 13 + (cl_uint)r, sizeof ld[r], &ld[r]);
    }
    err |= clSetKernelArg(k, 16, sizeof end0, &end0);
    err |= clSetKernelArg(k, 17, sizeof end1, &end1);
    err |= clSetKernelArg(k, 18, sizeof acc, &acc);
    if (err != CL_SUCCESS) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: clSetKernelArg failed", fn);
    const size_t global = (size_t)(mt * nt) * threads;
    err = clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &threads, 0, NULL, ev);
    if (err != CL_SUCCESS) return serve_cl_fail(err, "serve_gemm_large_run: clEnqueueNDRangeKernel");
    return LAZYATTN_STATUS_OK;
}
