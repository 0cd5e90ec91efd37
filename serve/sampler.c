/* SPDX-License-Identifier: Apache-2.0 */
/* The next token from a row of logits (sampler.h: the draw, step by step). */
#include "sampler.h"

#include "serve.h"

#include <math.h>
#include <stdlib.h>

struct serve_sampler {
    serve_sampler_config cfg;
    uint64_t state;
    int vocab;
    const float *logits; /* the row being ranked (qsort has no user pointer) */
    int32_t *order;      /* [vocab] ranked ids */
    double *p;           /* [vocab] by id: the kept tokens' probabilities, else 0 */
};

void serve_sampler_config_init(serve_sampler_config *cfg) {
    if (!cfg) return;
    cfg->temperature = 0;
    cfg->top_k = 0;
    cfg->top_p = 1;
    cfg->seed = 0;
}

int serve_sampler_create(const serve_sampler_config *cfg, int vocab, serve_sampler **out) {
    if (!out) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_sampler_create: out NULL");
    *out = NULL;
    if (!cfg) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_sampler_create: cfg NULL");
    if (!(cfg->temperature >= 0 && cfg->temperature <= 100))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "sampler: temperature %g outside [0, 100]", cfg->temperature);
    if (cfg->top_k < 0)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "sampler: top_k %d < 0", cfg->top_k);
    if (!(cfg->top_p > 0 && cfg->top_p <= 1))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "sampler: top_p %g outside (0, 1]",
                          cfg->top_p);
    if (vocab < 1)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "sampler: vocab %d < 1", vocab);
    serve_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->order = malloc((size_t)vocab * sizeof *s->order);
        s->p = malloc((size_t)vocab * sizeof *s->p);
    }
    if (!s || !s->order || !s->p) {
        serve_sampler_destroy(s);
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_sampler_create");
    }
    s->cfg = *cfg;
    s->state = cfg->seed;
    s->vocab = vocab;
    *out = s;
    return LAZYATTN_STATUS_OK;
}

void serve_sampler_destroy(serve_sampler *s) {
    if (!s) return;
    free(s->order);
    free(s->p);
    free(s);
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Highest logit first, the lower id on ties (qsort is not stable). */
static _Thread_local const float *rank_logits;
static int rank_cmp(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float li = rank_logits[i], lj = rank_logits[j];
    if (li != lj) return li > lj ? -1 : 1;
    return (i > j) - (i < j);
}

int serve_sampler_sample(serve_sampler *s, const float *logits, int32_t *token) {
    if (!s || !logits || !token)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_sampler_sample: NULL argument");
    const int n = s->vocab;
    int32_t best = 0;
    for (int32_t i = 0; i < n; i++) {
        if (isnan(logits[i]))
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "sampler: logit %d is NaN", (int)i);
        if (logits[i] > logits[best]) best = i;
    }
    const float lmax = logits[best];
    if (s->cfg.temperature == 0 || lmax == -INFINITY) {
        *token = best;
        return LAZYATTN_STATUS_OK;
    }
    /* 1-2: rank, keep top_k */
    for (int32_t i = 0; i < n; i++) s->order[i] = i;
    rank_logits = logits;
    qsort(s->order, (size_t)n, sizeof *s->order, rank_cmp);
    int kept = s->cfg.top_k > 0 && s->cfg.top_k < n ? s->cfg.top_k : n;
    /* 3: probabilities over the kept tokens (+inf logits share it all) */
    double sum = 0;
    for (int r = 0; r < kept; r++) {
        float l = logits[s->order[r]];
        double w = lmax == INFINITY ? (l == INFINITY ? 1.0 : 0.0)
                                    : exp(((double)l - (double)lmax) / s->cfg.temperature);
        s->p[s->order[r]] = w;
        sum += w;
    }
    /* 4: the nucleus, in rank order */
    if (s->cfg.top_p < 1) {
        double cum = 0;
        int r = 0;
        while (r < kept) {
            cum += s->p[s->order[r]] / sum;
            r++;
            if (cum >= s->cfg.top_p) break;
        }
        kept = r;
        sum = 0;
        for (r = 0; r < kept; r++) sum += s->p[s->order[r]];
    }
    for (int32_t i = 0; i < n; i++) s->p[i] = 0;
    for (int r = 0; r < kept; r++) {
        float l = logits[s->order[r]];
        s->p[s->order[r]] = (lmax == INFINITY ? (l == INFINITY ? 1.0 : 0.0)
                                              : exp(((double)l - (double)lmax) /
                                                    s->cfg.temperature)) / sum;
    }
    /* 5: the CDF draw in id order */
    double u = (double)(splitmix64(&s->state) >> 11) * 0x1.0p-53;
    double cum = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++) {
        if (s->p[i] <= 0) continue;
        last = i;
        cum += s->p[i];
        if (cum > u) {
            *token = i;
            return LAZYATTN_STATUS_OK;
        }
    }
    *token = last >= 0 ? last : best;
    return LAZYATTN_STATUS_OK;
}
