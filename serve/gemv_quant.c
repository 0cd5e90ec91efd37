/* SPDX-License-Identifier: Apache-2.0 */
/* y = W x with W quantized on the device: the host side of
 * serve/gemv_quant.cl (shapes and layouts in serve/gemv_quant.h). */
#include "gemv_quant.h"
#include "quant.h"

#include <stdlib.h>

#define SERVE_GQ_WG 64 /* GQ_WG in serve/gemv_quant.cl */

struct serve_gemv_quant {
    cl_program program;
    cl_kernel q8_0, q4_k, q6_k;
};

void serve_gemv_quant_destroy(serve_gemv_quant *g) {
    if (!g) return;
    if (g->q8_0) clReleaseKernel(g->q8_0);
    if (g->q4_k) clReleaseKernel(g->q4_k);
    if (g->q6_k) clReleaseKernel(g->q6_k);
    if (g->program) clReleaseProgram(g->program);
    free(g);
}

static int serve_gemv_quant_build(serve_gemv_quant *g, lazyattn_context *ctx) {
    const char *text = serve_source_text("gemv_quant");
    if (!text) return serve_fail(LAZYATTN_STATUS_NOT_FOUND, "gemv_quant source not embedded");
    cl_int err;
    g->program = clCreateProgramWithSource(lazyattn_context_cl_context(ctx), 1, &text, NULL, &err);
    if (err != CL_SUCCESS) return serve_cl_fail(err, "clCreateProgramWithSource (gemv_quant)");
    cl_device_id dev = lazyattn_context_device(ctx);
    err = clBuildProgram(g->program, 1, &dev, "-cl-std=CL1.2", NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[2048] = "";
        clGetProgramBuildInfo(g->program, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        return serve_fail(LAZYATTN_STATUS_BUILD_FAILED, "serve/gemv_quant.cl: %.1900s", log);
    }
    g->q8_0 = clCreateKernel(g->program, "serve_gemv_q8_0", &err);
    if (err != CL_SUCCESS) return serve_cl_fail(err, "serve_gemv_q8_0");
    g->q4_k = clCreateKernel(g->program, "serve_gemv_q4_k", &err);
    if (err != CL_SUCCESS) return serve_cl_fail(err, "serve_gemv_q4_k");
    g->q6_k = clCreateKernel(g->program, "serve_gemv_q6_k", &err);
    if (err != CL_SUCCESS) return serve_cl_fail(err, "serve_gemv_q6_k");
    return LAZYATTN_STATUS_OK;
}

int serve_gemv_quant_create(lazyattn_context *ctx, serve_gemv_quant **out) {
    if (!out) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gemv_quant_create: out");
    *out = NULL;
    if (!ctx) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gemv_quant_create: ctx");
    serve_gemv_quant *g = calloc(1, sizeof *g);
    if (!g) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_gemv_quant_create");
    int st = serve_gemv_quant_build(g, ctx);
    if (st) {
        serve_gemv_quant_destroy(g);
        return st;
    }
    *out = g;
    return LAZYATTN_STATUS_OK;
}

int serve_gemv_quant_supports(uint32_t type) {
    return type == SERVE_GGML_Q8_0 || type == SERVE_GGML_Q4_K || type == SERVE_GGML_Q6_K;
}

static size_t serve_gq_size(cl_mem b) {
    size_t n = 0;
    if (!b || clGetMemObjectInfo(b, CL_MEM_SIZE, sizeof n, &n, NULL) != CL_SUCCESS) return 0;
    return n;
}

int serve_gemv_quant_run(serve_gemv_quant *g, cl_command_queue queue, uint32_t type, cl_mem w,
                         cl_mem x, cl_mem y, int n_out, int n_in, cl_event *event) {
    static const char *who = "serve_gemv_quant_run";
    if (!g || !queue)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: NULL handle or queue", who);
    if (!serve_gemv_quant_supports(type))
        return serve_fail(LAZYATTN_STATUS_UNSUPPORTED, "%s: %s weights (Q8_0, Q4_K, Q6_K only)", who,
                          serve_ggml_type_name(type));
    uint64_t row_bytes;
    if (n_out < 1 || n_in < 1 ||
        serve_ggml_row_bytes(type, (uint64_t)n_in, "W", &row_bytes) != LAZYATTN_STATUS_OK)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: shape [%d, %d] (n_out >= 1, n_in a positive multiple of the %s "
                          "block)", who, n_out, n_in, serve_ggml_type_name(type));
    uint64_t w_need = row_bytes * (uint64_t)n_out, x_need = (uint64_t)n_in * 4u,
             y_need = (uint64_t)n_out * 4u;
    size_t w_have = serve_gq_size(w), x_have = serve_gq_size(x), y_have = serve_gq_size(y);
    if (w_need > w_have || x_need > x_have || y_need > y_have)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: buffers of %zu / %zu / %zu bytes, [%d, %d] %s needs W %llu, x "
                          "%llu, y %llu", who, w_have, x_have, y_have, n_out, n_in,
                          serve_ggml_type_name(type), (unsigned long long)w_need,
                          (unsigned long long)x_need, (unsigned long long)y_need);
    cl_kernel k = type == SERVE_GGML_Q8_0   ? g->q8_0
                  : type == SERVE_GGML_Q4_K ? g->q4_k
                                            : g->q6_k;
    cl_int err = clSetKernelArg(k, 0, sizeof w, &w);
    err |= clSetKernelArg(k, 1, sizeof x, &x);
    err |= clSetKernelArg(k, 2, sizeof y, &y);
    err |= clSetKernelArg(k, 3, sizeof n_in, &n_in);
    if (err != CL_SUCCESS) return serve_cl_fail(err, "serve_gemv_quant args");
    size_t local = SERVE_GQ_WG, global = (size_t)n_out * SERVE_GQ_WG;
    err = clEnqueueNDRangeKernel(queue, k, 1, NULL, &global, &local, 0, NULL, event);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : serve_cl_fail(err, "serve_gemv_quant");
}
