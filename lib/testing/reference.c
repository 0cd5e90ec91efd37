/* SPDX-License-Identifier: Apache-2.0 */
/* CPU float64 reference of eager attention with absolute positions: the
 * independent judge of every kernel. It shares nothing with the kernels but
 * the frequency formula (lazyattn_rope_frequencies, tested on its own). */
#include "checked_size.h" /* lz_mul_wraps */
#include "testing/testing_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* lz_size_product and lz_size_product4 of checked_size.h, with the
 * testing library's error record. */
static int lzt_size_product(size_t *out, const char *fn, const char *what, size_t a, size_t b,
                            size_t c) {
    size_t ab;
    if (lz_mul_wraps(a, b, &ab) || lz_mul_wraps(ab, c, out))
        return lzt_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                        "%s: %s = %zu x %zu x %zu does not fit in size_t", fn, what, a, b, c);
    return LAZYATTN_STATUS_OK;
}

static int lzt_size_product4(size_t *out, const char *fn, const char *what, size_t a, size_t b,
                             size_t c, size_t d) {
    size_t ab, abc;
    if (lz_mul_wraps(a, b, &ab) || lz_mul_wraps(ab, c, &abc) || lz_mul_wraps(abc, d, out))
        return lzt_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                        "%s: %s = %zu x %zu x %zu x %zu does not fit in size_t", fn, what, a, b,
                        c, d);
    return LAZYATTN_STATUS_OK;
}

static int lz_ref_check(const lazyattn_attention_config *c) {
    LZT_CHECK_ARG(c != NULL, "reference: config is NULL");
    LZT_CHECK_ARG(c->n_q_heads <= LAZYATTN_MAX_HEADS,
                 "reference: n_q_heads %d above %d", c->n_q_heads, LAZYATTN_MAX_HEADS);
    LZT_CHECK_ARG(c->n_q_heads >= 1 && c->n_kv_heads >= 1 && c->n_q_heads % c->n_kv_heads == 0,
                 "reference: %d query heads not a multiple of %d KV heads", c->n_q_heads,
                 c->n_kv_heads);
    LZT_CHECK_ARG(c->head_dim >= 2 && c->head_dim % 2 == 0 && c->head_dim <= 1024,
                 "reference: head_dim %d must be even in 2..1024", c->head_dim);
    LZT_CHECK_ARG(c->rope.style >= LAZYATTN_ROPE_NONE && c->rope.style <= LAZYATTN_ROPE_GPTJ,
                 "reference: unknown rope style %d", (int)c->rope.style);
    return LAZYATTN_STATUS_OK;
}

static void lz_ref_rotate(const lazyattn_attention_config *c, const double *freq, int32_t pos,
                          const float *x, double *out) {
    int d = c->head_dim;
    for (int i = 0; i < d; i++) out[i] = x[i];
    if (c->rope.style == LAZYATTN_ROPE_NONE) return;
    int rot = c->rope.rotary_dim ? c->rope.rotary_dim : d;
    for (int p = 0; p < rot / 2; p++) {
        int a = c->rope.style == LAZYATTN_ROPE_NEOX ? p : 2 * p;
        int b = c->rope.style == LAZYATTN_ROPE_NEOX ? p + rot / 2 : 2 * p + 1;
        double ang = (double)pos * freq[p], cs = cos(ang), sn = sin(ang);
        out[a] = x[a] * cs - x[b] * sn;
        out[b] = x[a] * sn + x[b] * cs;
    }
}

void lazyattn_reference_args_init(lazyattn_reference_args *args) {
    if (args) memset(args, 0, sizeof *args);
}

int lazyattn_reference_rope(const lazyattn_attention_config *c, int32_t pos, const float *x,
                            double *out) {
    int st = lz_ref_check(c);
    if (st) return st;
    LZT_CHECK_ARG(x && out, "lazyattn_reference_rope: NULL vector");
    double freq[512];
    if (c->rope.style != LAZYATTN_ROPE_NONE) {
        st = lazyattn_rope_frequencies(&c->rope, c->head_dim, freq);
        if (st) return st;
    }
    lz_ref_rotate(c, freq, pos, x, out);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_reference_attention(const lazyattn_attention_config *c,
                                 const lazyattn_reference_args *a) {
    int st = lz_ref_check(c);
    if (st) return st;
    LZT_CHECK_ARG(a != NULL, "lazyattn_reference_attention: args is NULL");
    LZT_CHECK_ARG(a->n_queries >= 1 && a->n_keys >= 0,
                 "lazyattn_reference_attention: n_queries %d, n_keys %d", a->n_queries, a->n_keys);
    LZT_CHECK_ARG(a->q && a->q_pos && a->out && (a->n_keys == 0 || (a->k && a->v && a->k_pos)),
                 "lazyattn_reference_attention: NULL array");
    static const char fn[] = "lazyattn_reference_attention";
    /* positions as the kernels take them (and no int overflow in k_pos - q_pos) */
    for (int t = 0; t < a->n_queries; t++)
        if (a->q_pos[t] < 0 || a->q_pos[t] > LAZYATTN_MAX_POSITION)
            return lzt_fail(LAZYATTN_STATUS_OUT_OF_RANGE, "%s: q_pos[%d] = %d outside 0..%d", fn,
                           t, (int)a->q_pos[t], LAZYATTN_MAX_POSITION);
    for (int j = 0; j < a->n_keys; j++)
        if (a->k_pos[j] < 0 || a->k_pos[j] > LAZYATTN_MAX_POSITION)
            return lzt_fail(LAZYATTN_STATUS_OUT_OF_RANGE, "%s: k_pos[%d] = %d outside 0..%d", fn,
                           j, (int)a->k_pos[j], LAZYATTN_MAX_POSITION);
    const int d = c->head_dim, nq = c->n_q_heads, nkv = c->n_kv_heads, group = nq / nkv;
    const double scale = c->scale > 0.0f ? c->scale : 1.0 / sqrt((double)d);
    double freq[512];
    if (c->rope.style != LAZYATTN_ROPE_NONE) {
        st = lazyattn_rope_frequencies(&c->rope, d, freq);
        if (st) return st;
    }
    size_t nk = (size_t)a->n_keys, kr_bytes = 0;
    LZT_TRY(lzt_size_product4(&kr_bytes, fn, "rotated keys bytes (n_keys x n_kv_heads x head_dim x 8)",
                            nk, (size_t)nkv, (size_t)d, sizeof(double)));
    size_t score_bytes = 0;
    LZT_TRY(lzt_size_product(&score_bytes, fn, "score bytes (n_keys x 8)", nk, sizeof(double), 1));
    double *kr = malloc(kr_bytes ? kr_bytes : sizeof(double));
    double *score = malloc(score_bytes ? score_bytes : sizeof(double));
    double *qr = malloc((size_t)d * sizeof *qr);
    if (!kr || !score || !qr) {
        free(kr);
        free(score);
        free(qr);
        return lzt_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_reference_attention");
    }
    for (size_t j = 0; j < nk; j++)
        for (int h = 0; h < nkv; h++)
            lz_ref_rotate(c, freq, a->k_pos[j], a->k + (j * (size_t)nkv + (size_t)h) * (size_t)d,
                          kr + (j * (size_t)nkv + (size_t)h) * (size_t)d);

    for (int t = 0; t < a->n_queries; t++) {
        for (int h = 0; h < nq; h++) {
            int kvh = h / group;
            double slope = 0.0;
            if (c->alibi) lazyattn_alibi_slope(h, nq, &slope); /* h is in range */
            lz_ref_rotate(c, freq, a->q_pos[t], a->q + ((size_t)t * (size_t)nq + (size_t)h) * (size_t)d, qr);
            double mx = -INFINITY;
            for (size_t j = 0; j < nk; j++) {
                score[j] = -INFINITY;
                if (a->k_pos[j] > a->q_pos[t]) continue;
                double dot = 0.0;
                const double *kj = kr + (j * (size_t)nkv + (size_t)kvh) * (size_t)d;
                for (int i = 0; i < d; i++) dot += qr[i] * kj[i];
                score[j] = dot * scale + slope * (double)(a->k_pos[j] - a->q_pos[t]);
                if (score[j] > mx) mx = score[j];
            }
            double *o = a->out + ((size_t)t * (size_t)nq + (size_t)h) * (size_t)d;
            memset(o, 0, (size_t)d * sizeof *o);
            if (a->lse) a->lse[(size_t)t * (size_t)nq + (size_t)h] = -INFINITY;
            if (mx == -INFINITY) continue;
            double sum = 0.0;
            for (size_t j = 0; j < nk; j++) {
                if (score[j] == -INFINITY) continue;
                double p = exp(score[j] - mx);
                sum += p;
                const float *vj = a->v + (j * (size_t)nkv + (size_t)kvh) * (size_t)d;
                for (int i = 0; i < d; i++) o[i] += p * vj[i];
            }
            for (int i = 0; i < d; i++) o[i] /= sum;
            if (a->lse) a->lse[(size_t)t * (size_t)nq + (size_t)h] = mx + log(sum);
        }
    }
    free(kr);
    free(score);
    free(qr);
    return LAZYATTN_STATUS_OK;
}

double lazyattn_normalised_error(const float *a, const double *b, size_t n) {
    if (!a || !b || n == 0) {
        lzt_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "lazyattn_normalised_error: NULL array or n == 0");
        return INFINITY;
    }
    double err = 0.0, ref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= err)) err = e; /* NaN propagates as the error */
        if (fabs(b[i]) > ref) ref = fabs(b[i]);
    }
    return err / (ref > 1e-30 ? ref : 1e-30);
}
