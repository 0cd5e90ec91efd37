/* SPDX-License-Identifier: Apache-2.0 */
/* Routes a projection to the GEMV over quantized blocks, the device
 * dequantizer and a GEMM, or the GEMM (serve/projection.h). */
#include "projection.h"
#include "gemm_bf16.h"
#include "quant.h"

#include <string.h>

/* Y (+)= X . W^T with the mode's GEMM over a dense weight buffer w. */
static int serve_project_gemm(const serve_projector *p, cl_mem w, int rows, int out, int in,
                              cl_mem x, size_t x_off, cl_mem y, size_t y_off, int accumulate) {
    serve_timer_count(p->timer, SERVE_ENQ_GEMM, 1);
    cl_event *ev = serve_timer_slot(p->timer, SERVE_PHASE_GEMM);
    if (!p->bf16)
        return serve_gemm(p->queue, rows, out, in, x, x_off, w, y, y_off,
                          accumulate ? 1.0f : 0.0f, p->gemm_temp, ev);
    serve_gemm_args a;
    memset(&a, 0, sizeof a);
    a.rows = rows, a.out = out, a.in = in, a.x = x, a.x_off = x_off, a.w = w, a.n_outs = 1;
    a.outs[0] = (serve_gemm_out){y, y_off, out, out};
    a.accumulate = accumulate;
    return serve_gemm_bf16_run(p->bf16, p->queue, &a, ev);
}

int serve_project(const serve_projector *p, const serve_weight *w, int rows, cl_mem x,
                  size_t x_off, cl_mem y, size_t y_off, int accumulate) {
    static const char *who = "serve_project";
    if (!p || !w || !w->buf)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: NULL projector or weight", who);
    int bf16 = p->bf16 != NULL;
    if (w->type == SERVE_GGML_F32 || w->type == SERVE_GGML_BF16) {
        if ((w->type == SERVE_GGML_BF16) != bf16)
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                              "%s: a %s weight in %s mode", who, serve_ggml_type_name(w->type),
                              bf16 ? "bf16" : "f32");
        return serve_project_gemm(p, w->buf, rows, w->out, w->in, x, x_off, y, y_off, accumulate);
    }
    if (!p->quant)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: a %s weight and no quantized "
                          "kernels", who, serve_ggml_type_name(w->type));
    if (rows >= 1 && rows <= SERVE_QUANT_GEMV_MAX_ROWS) {
        serve_gemv_args a = {.type = w->type, .rows = rows, .in = w->in, .x = x, .x_off = x_off,
                             .x_bf16 = bf16, .n_outs = 1, .accumulate = accumulate};
        a.outs[0] = (serve_gemv_out){w->buf, y, y_off, w->out, w->out};
        serve_timer_count(p->timer, SERVE_ENQ_GEMM, 1);
        return serve_gemv_quant_run(p->quant, p->queue, &a,
                                    serve_timer_slot(p->timer, SERVE_PHASE_GEMM));
    }
    if (!p->scratch)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: %d rows of a %s weight and no scratch to dequantize it into", who,
                          rows, serve_ggml_type_name(w->type));
    /* the queue is in order: the scratch is free again once the GEMM that
     * read it last has run */
    serve_timer_count(p->timer, SERVE_ENQ_GEMM, 1);
    int st = serve_dequant_run(p->quant, p->queue, w->type, w->buf, w->out, w->in, p->scratch,
                               bf16 ? SERVE_DEQUANT_BF16 : SERVE_DEQUANT_F32_T,
                               serve_timer_slot(p->timer, SERVE_PHASE_GEMM));
    if (st) return st;
    return serve_project_gemm(p, p->scratch, rows, w->out, w->in, x, x_off, y, y_off, accumulate);
}

/* One quantized GEMV launch, counted: weights w[0..n) (one type, one input
 * width) into y[0..n); a holds the rest of the arguments. */
static int serve_gemv_launch(const serve_projector *p, serve_gemv_args *a,
                             const serve_weight *const *w, const cl_mem *y, int n) {
    a->type = w[0]->type;
    a->in = w[0]->in;
    a->n_outs = n;
    for (int k = 0; k < n; k++)
        a->outs[k] = (serve_gemv_out){w[k]->buf, y[k], 0, w[k]->out, w[k]->out};
    serve_timer_count(p->timer, SERVE_ENQ_GEMM, 1);
    return serve_gemv_quant_run(p->quant, p->queue, a,
                                serve_timer_slot(p->timer, SERVE_PHASE_GEMM));
}

int serve_project_group(const serve_projector *p, int n, const serve_weight *const *w, int rows,
                        cl_mem x, size_t x_off, const cl_mem *y, int accumulate) {
    if (!p || !w || !y || n < 1 || n > SERVE_GEMV_MAX_OUTS)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_project_group: %d weights", n);
    int gemv = p->quant && rows >= 1 && rows <= SERVE_QUANT_GEMV_MAX_ROWS;
    for (int k0 = 0; k0 < n;) { /* a run of one quantized type: one launch */
        int k1 = k0 + 1;
        if (gemv && w[k0] && w[k0]->buf && serve_gemv_quant_supports(w[k0]->type))
            while (k1 < n && w[k1] && w[k1]->buf && w[k1]->type == w[k0]->type &&
                   w[k1]->in == w[k0]->in)
                k1++;
        if (k1 - k0 == 1) {
            int st = serve_project(p, w[k0], rows, x, x_off, y[k0], 0, accumulate);
            if (st) return st;
            k0 = k1;
            continue;
        }
        serve_gemv_args a = {.rows = rows, .x = x, .x_off = x_off, .x_bf16 = p->bf16 != NULL,
                             .accumulate = accumulate};
        int st = serve_gemv_launch(p, &a, w + k0, y + k0, k1 - k0);
        if (st) return st;
        k0 = k1;
    }
    return LAZYATTN_STATUS_OK;
}

int serve_project_fusable(const serve_projector *p, int n, const serve_weight *const *w, int rows,
                          int swiglu) {
    if (!p || !p->quant || !w || n < 1 || n > SERVE_GEMV_MAX_OUTS || rows < 1 ||
        rows > SERVE_QUANT_GEMV_MAX_ROWS || (swiglu && n != 2))
        return 0;
    for (int k = 0; k < n; k++)
        if (!w[k] || !w[k]->buf || !serve_gemv_quant_supports(w[k]->type) || w[k]->in != w[0]->in)
            return 0;
    return !swiglu || w[1]->out == w[0]->out;
}

int serve_project_fused(const serve_projector *p, int n, const serve_weight *const *w, int rows,
                        cl_mem x, size_t x_off, cl_mem norm, float eps, int swiglu,
                        const cl_mem *y, int accumulate) {
    if (!y || !serve_project_fusable(p, n, w, rows, swiglu))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_project_fused: %d weights over %d rows%s that the quantized "
                          "GEMV does not take in one fused form", n, rows,
                          swiglu ? " (SwiGLU)" : "");
    if (swiglu && w[1]->type != w[0]->type) { /* the gate's product, then silu of it * up's */
        if (accumulate)
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                              "serve_project_fused: SwiGLU of a %s gate and a %s up accumulated "
                              "(two launches: the second replaces)",
                              serve_ggml_type_name(w[0]->type), serve_ggml_type_name(w[1]->type));
        for (int k = 0; k < 2; k++) {
            serve_gemv_args a = {.rows = rows, .x = x, .x_off = x_off, .norm = norm,
                                 .norm_eps = eps, .swiglu = k == 0 ? 0 : 2};
            int st = serve_gemv_launch(p, &a, w + k, y, 1);
            if (st) return st;
        }
        return LAZYATTN_STATUS_OK;
    }
    for (int k0 = 0; k0 < n;) {
        int k1 = k0 + 1;
        while (k1 < n && w[k1]->type == w[k0]->type) k1++;
        serve_gemv_args a = {.rows = rows, .x = x, .x_off = x_off, .accumulate = accumulate,
                             .norm = norm, .norm_eps = eps, .swiglu = swiglu};
        int st = serve_gemv_launch(p, &a, w + k0, y + k0, k1 - k0);
        if (st) return st;
        k0 = k1;
    }
    return LAZYATTN_STATUS_OK;
}
