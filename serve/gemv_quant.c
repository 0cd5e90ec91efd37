/* SPDX-License-Identifier: Apache-2.0 */
/* Weights kept quantized on the device: the host side of
 * serve/gemv_quant.cl (shapes and layouts in serve/gemv_quant.h). */
#include "gemv_quant.h"
#include "quant.h"

#include <stdio.h>
#include <stdlib.h>

#define SERVE_GQ_WG 128   /* GQ_WG in serve/gemv_quant.cl */
#define SERVE_GQ_TEAMS 4  /* GQ_TEAMS: teams of 32 work-items a work-group */
#define SERVE_GQ_NW 4     /* GQ_NW: weight rows a team */
#define SERVE_GQ_TYPES 5
#define SERVE_GQ8_WG 256   /* GQ8_WG: the int8 GEMV's work-group */
#define SERVE_GQ8_TEAMS 8  /* its teams of 32 */
/* floats of the int8 GEMV's reduction (GQ8_RED_FLOATS) */
#define SERVE_GQ8_RED_FLOATS (SERVE_GQ8_TEAMS * (SERVE_GQ_NW + 1) * 33)

/* the kept types: one program each (-DGQ_TYPE=id), built when first asked */
static const uint32_t serve_gq_types[SERVE_GQ_TYPES] = {
    SERVE_GGML_Q8_0, SERVE_GGML_Q4_0, SERVE_GGML_Q4_K, SERVE_GGML_Q5_K, SERVE_GGML_Q6_K};

struct serve_gemv_quant {
    lazyattn_context *ctx;
    cl_uint compute_units; /* the device's (serve_gq_split) */
    cl_program program[SERVE_GQ_TYPES];
    cl_kernel gemv[SERVE_GQ_TYPES][2][2]; /* [type][x bf16][rows > 1] */
    cl_kernel gemv8[SERVE_GQ_TYPES][2]; /* the int8 GEMV, [type][x bf16]: K-quants only */
    cl_kernel dequant[SERVE_GQ_TYPES];
    int failed[SERVE_GQ_TYPES]; /* the build failed once: not tried again */
    int fast_nv;                /* NVIDIA's fast path: dp4a by inline PTX */
    int q8;                     /* one row takes the int8 GEMV (serve_gemv_quant_set_q8) */
    cl_ulong local_mem;         /* the device's local memory a work-group */
    int64_t q8_launches;        /* int8 GEMVs enqueued */
};

/* the types the int8 GEMV takes */
static int serve_gq8_type(uint32_t type) {
    return type == SERVE_GGML_Q4_K || type == SERVE_GGML_Q5_K || type == SERVE_GGML_Q6_K;
}

static int serve_gq_index(uint32_t type) {
    for (int i = 0; i < SERVE_GQ_TYPES; i++)
        if (serve_gq_types[i] == type) return i;
    return -1;
}

void serve_gemv_quant_destroy(serve_gemv_quant *g) {
    if (!g) return;
    for (int i = 0; i < SERVE_GQ_TYPES; i++) {
        for (int b = 0; b < 2; b++)
            for (int m = 0; m < 2; m++)
                if (g->gemv[i][b][m]) clReleaseKernel(g->gemv[i][b][m]);
        for (int b = 0; b < 2; b++)
            if (g->gemv8[i][b]) clReleaseKernel(g->gemv8[i][b]);
        if (g->dequant[i]) clReleaseKernel(g->dequant[i]);
        if (g->program[i]) clReleaseProgram(g->program[i]);
    }
    free(g);
}

/* Builds type i's program and kernels (BUILD_FAILED with the log); on a
 * failure what was made is released by destroy. */
static int serve_gemv_quant_build(serve_gemv_quant *g, int i) {
    const char *text = serve_source_text("gemv_quant");
    if (!text) return serve_fail(LAZYATTN_STATUS_NOT_FOUND, "gemv_quant source not embedded");
    char options[64];
    snprintf(options, sizeof options, "-cl-std=CL1.2 -DGQ_TYPE=%u%s", (unsigned)serve_gq_types[i],
             g->fast_nv ? " -DGQ_NV_DP4A" : "");
    /* through the library: its program cache, when the context has one */
    int st = lazyattn_context_build_program(g->ctx, text, options, 0, &g->program[i]);
    if (st) {
        char what[64];
        snprintf(what, sizeof what, "serve/gemv_quant.cl (%s)",
                 serve_ggml_type_name(serve_gq_types[i]));
        return serve_lz_fail(st, what);
    }
    cl_int err;
    static const char *const names[5] = {"serve_gemv_f32_r1", "serve_gemv_bf16_r1",
                                         "serve_gemv_f32", "serve_gemv_bf16", "serve_dequant"};
    cl_kernel *ks[5] = {&g->gemv[i][0][0], &g->gemv[i][1][0], &g->gemv[i][0][1],
                        &g->gemv[i][1][1], &g->dequant[i]};
    for (int k = 0; k < 5; k++) {
        *ks[k] = clCreateKernel(g->program[i], names[k], &err);
        if (err != CL_SUCCESS) return serve_cl_fail(err, names[k]);
    }
    static const char *const names8[2] = {"serve_gemv_q8_f32", "serve_gemv_q8_bf16"};
    for (int b = 0; b < 2 && serve_gq8_type(serve_gq_types[i]); b++) {
        g->gemv8[i][b] = clCreateKernel(g->program[i], names8[b], &err);
        if (err != CL_SUCCESS) return serve_cl_fail(err, names8[b]);
    }
    return LAZYATTN_STATUS_OK;
}

int serve_gemv_quant_prepare(serve_gemv_quant *g, uint32_t type) {
    if (!g) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gemv_quant_prepare: NULL");
    int i = serve_gq_index(type);
    if (i < 0)
        return serve_fail(LAZYATTN_STATUS_UNSUPPORTED,
                          "serve_gemv_quant: %s weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K only)",
                          serve_ggml_type_name(type));
    if (g->dequant[i]) return LAZYATTN_STATUS_OK;
    if (g->failed[i]) /* an earlier build failed: no second try */
        return serve_fail(LAZYATTN_STATUS_BUILD_FAILED, "serve/gemv_quant.cl (%s) did not build",
                          serve_ggml_type_name(type));
    int st = serve_gemv_quant_build(g, i);
    g->failed[i] = st != LAZYATTN_STATUS_OK;
    return st;
}

int serve_gemv_quant_create(lazyattn_context *ctx, serve_gemv_quant **out) {
    if (!out) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gemv_quant_create: out");
    *out = NULL;
    if (!ctx) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gemv_quant_create: ctx");
    serve_gemv_quant *g = calloc(1, sizeof *g);
    if (!g) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_gemv_quant_create");
    g->ctx = ctx;
    cl_device_id dev = lazyattn_context_device(ctx);
    if (clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof g->compute_units,
                        &g->compute_units, NULL) != CL_SUCCESS ||
        g->compute_units < 1)
        g->compute_units = 1;
    if (clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof g->local_mem, &g->local_mem,
                        NULL) != CL_SUCCESS)
        g->local_mem = 0; /* the int8 GEMV never fits */
    g->fast_nv = lazyattn_context_fast_path(ctx);
    int q8 = serve_tune_setting("serve.gemv_q8");
    g->q8 = q8 >= 0 ? q8 : g->fast_nv;
    *out = g;
    return LAZYATTN_STATUS_OK;
}

int serve_gemv_quant_supports(uint32_t type) { return serve_gq_index(type) >= 0; }

int64_t serve_gemv_quant_q8_launches(const serve_gemv_quant *g) { return g ? g->q8_launches : 0; }

int serve_gemv_quant_set_q8(serve_gemv_quant *g, int on) {
    if (!g) return 0;
    int was = g->q8;
    g->q8 = on != 0;
    return was;
}

static size_t serve_gq_size(cl_mem b) {
    size_t n = 0;
    if (!b || clGetMemObjectInfo(b, CL_MEM_SIZE, sizeof n, &n, NULL) != CL_SUCCESS) return 0;
    return n;
}

/* The checks both kernels share: the type, the shape and W's size;
 * *row_bytes the bytes of one row of W. */
static int serve_gq_check_weight(const char *who, uint32_t type, cl_mem w, int out, int in,
                                 uint64_t *row_bytes) {
    if (!serve_gemv_quant_supports(type))
        return serve_fail(LAZYATTN_STATUS_UNSUPPORTED,
                          "%s: %s weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K only)", who,
                          serve_ggml_type_name(type));
    if (out < 1 || in < 1 ||
        serve_ggml_row_bytes(type, (uint64_t)in, "W", row_bytes) != LAZYATTN_STATUS_OK)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: shape [%d, %d] (out >= 1, in a positive multiple of the %s block)",
                          who, out, in, serve_ggml_type_name(type));
    uint64_t need = *row_bytes * (uint64_t)out;
    size_t have = serve_gq_size(w);
    if (need > have)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: W of %zu bytes, [%d, %d] %s needs W %llu", who, have, out, in,
                          serve_ggml_type_name(type), (unsigned long long)need);
    return LAZYATTN_STATUS_OK;
}

/* Teams a row set (a power of 2 up to the work-group's teams): a short
 * output (few row sets) is split along its input until the launch has
 * groups_per_cu work-groups a compute unit (loads in flight hide their
 * latency), while every lane keeps at least one task. The int8 GEMV
 * quantizes the row once a work-group, so it asks for fewer. */
#define SERVE_GQ_GROUPS_PER_CU 8
#define SERVE_GQ8_GROUPS_PER_CU 2
static int serve_gq_split(const serve_gemv_quant *g, size_t sets, int n_chunks, int teams,
                          int groups_per_cu) {
    int ks = 1;
    while (ks < teams &&
           sets * (size_t)ks / (size_t)teams < (size_t)g->compute_units * (size_t)groups_per_cu &&
           n_chunks >= 32 * 2 * ks)
        ks *= 2;
    return ks;
}

int serve_gemv_quant_run(serve_gemv_quant *g, cl_command_queue queue, const serve_gemv_args *a,
                         cl_event *event) {
    static const char *who = "serve_gemv_quant_run";
    if (!g || !queue || !a)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: NULL handle, queue or args", who);
    if (a->n_outs < 1 || a->n_outs > SERVE_GEMV_MAX_OUTS)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: %d ranges (1..%d)", who,
                          a->n_outs, SERVE_GEMV_MAX_OUTS);
    if (a->rows < 1 || a->rows > SERVE_QUANT_GEMV_MAX_ROWS ||
        (a->accumulate != 0 && a->accumulate != 1) || (a->x_bf16 != 0 && a->x_bf16 != 1))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: %d rows (1..%d), accumulate %d, x_bf16 %d", who, a->rows,
                          SERVE_QUANT_GEMV_MAX_ROWS, a->accumulate, a->x_bf16);
    if (a->swiglu < 0 || a->swiglu > 2)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: swiglu %d (0: none, 1: gate and up, 2: up over the gate's product)",
                          who, a->swiglu);
    if (a->swiglu == 1 && (a->n_outs != 2 || a->outs[0].cols != a->outs[1].cols))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: swiglu %d takes two ranges (gate, up) of equal cols; %d given",
                          who, a->swiglu, a->n_outs);
    if (a->swiglu == 2 && (a->n_outs != 1 || a->accumulate))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: swiglu 2 takes one range (up, over the gate's product), "
                          "accumulate 0; %d ranges, accumulate %d given",
                          who, a->n_outs, a->accumulate);
    if (a->norm) {
        size_t have = serve_gq_size(a->norm);
        if (!(a->norm_eps > 0.0f && a->norm_eps < 1.0f) || have < (size_t)a->in * 4u)
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                              "%s: norm of %zu bytes (%d floats needed), eps %g (0 < eps < 1)",
                              who, have, a->in, (double)a->norm_eps);
    }
    uint64_t row_bytes = 0;
    int end[SERVE_GEMV_MAX_OUTS] = {0, 0, 0}, total = 0;
    for (int r = 0; r < a->n_outs; r++) {
        const serve_gemv_out *o = &a->outs[r];
        int st = serve_gq_check_weight(who, a->type, o->w, o->cols, a->in, &row_bytes);
        if (st) return st;
        if (o->ldy < o->cols)
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: range %d: ldy %d < cols %d",
                              who, r, o->ldy, o->cols);
        uint64_t y_need = ((uint64_t)o->y_off + (uint64_t)(a->rows - 1) * (uint64_t)o->ldy +
                           (uint64_t)o->cols) * 4u;
        size_t y_have = serve_gq_size(o->y);
        if (y_need > y_have)
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                              "%s: range %d: Y of %zu bytes, %d rows of %d columns need y %llu",
                              who, r, y_have, a->rows, o->cols, (unsigned long long)y_need);
        if (o->cols > INT32_MAX - total)
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: too many columns", who);
        total += o->cols;
        end[r] = total;
    }
    uint64_t x_need = ((uint64_t)a->x_off + (uint64_t)a->rows * (uint64_t)a->in) *
                      (a->x_bf16 ? 2u : 4u);
    size_t x_have = serve_gq_size(a->x);
    if (x_need > x_have)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: X of %zu bytes, %d rows of %d need x %llu", who, x_have, a->rows,
                          a->in, (unsigned long long)x_need);
    int st = serve_gemv_quant_prepare(g, a->type);
    if (st) return st;
    /* one row: the int8 GEMV where it is on, takes the type and its row
       fits the local memory */
    size_t local8 = (size_t)SERVE_GQ8_RED_FLOATS * 4u + (size_t)a->in / 32u * 4u +
                    (size_t)a->in / (a->type == SERVE_GGML_Q6_K ? 8u : 16u) * 4u + (size_t)a->in;
    int q8 = g->q8 && a->rows == 1 && serve_gq8_type(a->type) && local8 <= g->local_mem;
    /* the unused ranges repeat the last one: never selected (end = total) */
    const serve_gemv_out *o[SERVE_GEMV_MAX_OUTS];
    for (int r = 0; r < SERVE_GEMV_MAX_OUTS; r++)
        o[r] = &a->outs[r < a->n_outs ? r : a->n_outs - 1];
    cl_kernel k = q8 ? g->gemv8[serve_gq_index(a->type)][a->x_bf16]
                     : g->gemv[serve_gq_index(a->type)][a->x_bf16][a->rows > 1];
    cl_int end0 = end[0], end1 = a->n_outs > 1 ? end[1] : total;
    cl_ulong rb = row_bytes, xo = a->x_off;
    cl_int n_chunks = a->in / 32, ldx = a->in, rows = a->rows, acc = a->accumulate;
    cl_uint i = 0;
    cl_int err = CL_SUCCESS;
    for (int r = 0; r < SERVE_GEMV_MAX_OUTS; r++)
        err |= clSetKernelArg(k, i++, sizeof(cl_mem), &o[r]->w);
    err |= clSetKernelArg(k, i++, sizeof end0, &end0);
    err |= clSetKernelArg(k, i++, sizeof end1, &end1);
    err |= clSetKernelArg(k, i++, sizeof rb, &rb);
    err |= clSetKernelArg(k, i++, sizeof n_chunks, &n_chunks);
    err |= clSetKernelArg(k, i++, sizeof a->x, &a->x);
    err |= clSetKernelArg(k, i++, sizeof xo, &xo);
    err |= clSetKernelArg(k, i++, sizeof ldx, &ldx);
    err |= clSetKernelArg(k, i++, sizeof rows, &rows);
    for (int r = 0; r < SERVE_GEMV_MAX_OUTS; r++)
        err |= clSetKernelArg(k, i++, sizeof(cl_mem), &o[r]->y);
    for (int r = 0; r < SERVE_GEMV_MAX_OUTS; r++) {
        cl_ulong yo = o[r]->y_off;
        err |= clSetKernelArg(k, i++, sizeof yo, &yo);
    }
    for (int r = 0; r < SERVE_GEMV_MAX_OUTS; r++) {
        cl_int ldy = o[r]->ldy;
        err |= clSetKernelArg(k, i++, sizeof ldy, &ldy);
    }
    err |= clSetKernelArg(k, i++, sizeof acc, &acc);
    cl_float eps = a->norm ? a->norm_eps : 1.0f;
    cl_int norm = a->norm != NULL, swiglu = a->swiglu;
    err |= clSetKernelArg(k, i++, sizeof(cl_mem), a->norm ? &a->norm : NULL);
    err |= clSetKernelArg(k, i++, sizeof eps, &eps);
    err |= clSetKernelArg(k, i++, sizeof norm, &norm);
    err |= clSetKernelArg(k, i++, sizeof swiglu, &swiglu);
    cl_int total_cols = total;
    err |= clSetKernelArg(k, i++, sizeof total_cols, &total_cols);
    /* a row set for every SERVE_GQ_NW weight rows (SwiGLU: a gate and an
       up row each of SERVE_GQ_NW / 2 columns), taken by ks teams */
    size_t per_set = a->swiglu == 1 ? SERVE_GQ_NW / 2 : SERVE_GQ_NW;
    size_t sets = ((size_t)(a->swiglu == 1 ? a->outs[0].cols : total) + per_set - 1) / per_set;
    int teams = q8 ? SERVE_GQ8_TEAMS : SERVE_GQ_TEAMS;
    cl_int ks = serve_gq_split(g, sets, n_chunks, teams,
                               q8 ? SERVE_GQ8_GROUPS_PER_CU : SERVE_GQ_GROUPS_PER_CU);
    err |= clSetKernelArg(k, i++, sizeof ks, &ks);
    if (q8) err |= clSetKernelArg(k, i++, local8, NULL);
    if (err != CL_SUCCESS) return serve_cl_fail(err, "serve_gemv_quant args");
    size_t local = q8 ? SERVE_GQ8_WG : SERVE_GQ_WG, per_group = (size_t)teams / (size_t)ks;
    size_t global = (sets + per_group - 1) / per_group * local;
    err = clEnqueueNDRangeKernel(queue, k, 1, NULL, &global, &local, 0, NULL, event);
    if (err != CL_SUCCESS) return serve_cl_fail(err, "serve_gemv_quant");
    g->q8_launches += q8;
    return LAZYATTN_STATUS_OK;
}

int serve_dequant_run(serve_gemv_quant *g, cl_command_queue queue, uint32_t type, cl_mem w,
                      int out, int in, cl_mem dst, serve_dequant_layout layout, cl_event *event) {
    static const char *who = "serve_dequant_run";
    if (!g || !queue)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: NULL handle or queue", who);
    uint64_t row_bytes;
    int st = serve_gq_check_weight(who, type, w, out, in, &row_bytes);
    if (!st) st = serve_gemv_quant_prepare(g, type);
    if (st) return st;
    if (layout != SERVE_DEQUANT_F32 && layout != SERVE_DEQUANT_F32_T &&
        layout != SERVE_DEQUANT_BF16)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: layout %d", who, (int)layout);
    uint64_t need = (uint64_t)out * (uint64_t)in * (layout == SERVE_DEQUANT_BF16 ? 2u : 4u);
    size_t have = serve_gq_size(dst);
    if (need > have)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: dst of %zu bytes, [%d, %d] needs %llu", who, have, out, in,
                          (unsigned long long)need);
    cl_kernel k = g->dequant[serve_gq_index(type)];
    cl_ulong rb = row_bytes;
    cl_int n_chunks = in / 32, n_out = out, lay = (cl_int)layout;
    cl_int err = clSetKernelArg(k, 0, sizeof w, &w);
    err |= clSetKernelArg(k, 1, sizeof rb, &rb);
    err |= clSetKernelArg(k, 2, sizeof n_chunks, &n_chunks);
    err |= clSetKernelArg(k, 3, sizeof n_out, &n_out);
    err |= clSetKernelArg(k, 4, sizeof dst, &dst);
    err |= clSetKernelArg(k, 5, sizeof lay, &lay);
    if (err != CL_SUCCESS) return serve_cl_fail(err, "serve_dequant args");
    size_t global[2] = {(size_t)n_chunks, (size_t)out};
    if (layout == SERVE_DEQUANT_F32_T) global[0] = (size_t)out, global[1] = (size_t)n_chunks;
    err = clEnqueueNDRangeKernel(queue, k, 2, NULL, global, NULL, 0, NULL, event);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : serve_cl_fail(err, "serve_dequant");
}
