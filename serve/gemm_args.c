/* SPDX-License-Identifier: Apache-2.0 */
/* The shape checks of a projection's arguments (serve_gemm_args), shared
 * by the dispatcher (gemm_bf16.c) and the tensor-core kernels it calls
 * (gemm_nv_large.c, gemm_nv_small.c), below all three. */
#include "gemm_bf16.h"

#include <math.h>
#include <stdint.h>

int serve_gemm_args_check_shape(const serve_gemm_args *a, const char *who) {
    if (!who) who = "bf16 GEMM";
    if (!a) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: args is NULL", who);
    if (a->rows < 1 || a->out < 1 || a->in < 1)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: shape %d x %d x %d (each >= 1)",
                          who, a->rows, a->out, a->in);
    if (!a->x || !a->w)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: X or W is NULL", who);
    if (a->n_outs < 1 || a->n_outs > SERVE_GEMM_MAX_OUTS)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: %d output ranges (1..%d)", who,
                          a->n_outs, SERVE_GEMM_MAX_OUTS);
    if (a->accumulate != 0 && a->accumulate != 1)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: accumulate %d (0 or 1)", who,
                          a->accumulate);
    if (a->x_off > (size_t)1 << 48)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: X offset %zu (at most 2^48)",
                          who, a->x_off);
    if ((a->x_f32 != 0 && a->x_f32 != 1) || (a->swiglu != 0 && a->swiglu != 1))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: x_f32 %d, swiglu %d (0 or 1)",
                          who, a->x_f32, a->swiglu);
    if (a->norm && (!a->x_f32 || !(a->norm_eps > 0.0f) || !isfinite(a->norm_eps)))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: an RMSNorm gain needs x_f32 1 (has %d) and an epsilon > 0, finite "
                          "(has %g)",
                          who, a->x_f32, (double)a->norm_eps);
    if (a->swiglu && (a->out % 2 || a->n_outs != 1 || a->accumulate))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: swiglu needs an even out (has %d: gate and up rows), one output "
                          "range (has %d) and accumulate 0 (has %d)",
                          who, a->out, a->n_outs, a->accumulate);
    int64_t cols = 0; /* three ints: no overflow */
    for (int r = 0; r < a->n_outs; r++) {
        const serve_gemm_out *o = &a->outs[r];
        if (!o->buf || o->cols < 1 || o->ld < o->cols || o->off > (size_t)1 << 48)
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                              "%s: output range %d: buffer %s, %d columns, row stride %d, "
                              "offset %zu (buffer needed, cols >= 1, ld >= cols, offset <= 2^48)",
                              who, r, o->buf ? "set" : "NULL", o->cols, o->ld, o->off);
        cols += o->cols;
    }
    const int64_t y_cols = a->swiglu ? a->out / 2 : a->out; /* swiglu: one column per pair */
    if (cols != y_cols)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: the output ranges hold %lld columns, Y has %lld (out %d%s)", who,
                          (long long)cols, (long long)y_cols, a->out,
                          a->swiglu ? ", swiglu: out / 2" : "");
    return LAZYATTN_STATUS_OK;
}
