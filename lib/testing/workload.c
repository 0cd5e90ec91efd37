/* SPDX-License-Identifier: Apache-2.0 */
/* Seeded RAG workload: a document pool (uniform, lognormal or bimodal
 * lengths), Zipf(alpha) popularity (optionally drifting once) or the
 * paper's fixed prompts, requests of k distinct documents plus a question
 * and a generation length. */
#include "mix64.h"
#include "testing/testing_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct lazyattn_workload {
    lazyattn_workload_config config;
    int64_t *doc_offset; /* [n_docs + 1] into doc_tokens */
    int32_t *doc_tokens;
    int32_t *prefix;     /* [prefix_len] */
    int32_t *req_docs;   /* [n_requests * k] */
    int64_t *q_offset;   /* [n_requests + 1] into q_tokens */
    int32_t *q_tokens;
    int32_t *gen;        /* [n_requests] */
    int32_t *prompt;     /* [n_requests] PAPER_FIXED_PROMPTS: prompt index; else NULL */
};

// ---- xoshiro256**, seeded through splitmix64 ----

typedef struct lz_rng {
    uint64_t s[4];
} lz_rng;

static uint64_t lz_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static void lz_rng_seed(lz_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) {
        seed += 0x9E3779B97F4A7C15ull;
        r->s[i] = lz_mix64(seed);
    }
}

static uint64_t lz_rng_next(lz_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = lz_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = lz_rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 bits. */
static double lz_rng_unit(lz_rng *r) { return (double)(lz_rng_next(r) >> 11) * 0x1.0p-53; }

/* Uniform integer in [lo, hi], unbiased (rejection). */
static int lz_rng_range(lz_rng *r, int lo, int hi) {
    uint64_t span = (uint64_t)((int64_t)hi - lo) + 1;
    uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t x;
    do x = lz_rng_next(r);
    while (x >= limit);
    return (int)(lo + (int64_t)(x % span));
}

/* Token index of document doc: a fixed function of (doc, index) alone. */
static int32_t lz_doc_token(int doc, int64_t index, int vocab) {
    uint64_t h = lz_mix64(((uint64_t)(uint32_t)doc << 32 | (uint64_t)(uint32_t)index) ^
                          0xD0C0000000000000ull);
    return (int32_t)(h % (uint64_t)vocab);
}

// ---- presets and checks ----

/* The lognormal and bimodal parameters for the range [doc_len_min, doc_len_max]. */
static void lz_workload_length_defaults(lazyattn_workload_config *c) {
    int span = c->doc_len_max - c->doc_len_min;
    c->length_mean = (c->doc_len_min + (double)c->doc_len_max) / 2;
    c->length_sigma = 0.5;
    c->length_short_max = c->doc_len_min + span / 4;
    c->length_long_min = c->doc_len_max - span / 4;
    c->length_long_fraction = 0.25;
}

int lazyattn_workload_config_preset(const char *name, lazyattn_workload_config *c) {
    LZT_CHECK_ARG(name && c, "lazyattn_workload_config_preset: NULL argument");
    memset(c, 0, sizeof *c);
    c->question_min = 16;
    c->question_max = 32;
    c->gen_min = 8;
    c->gen_max = 16;
    c->vocab_size = 128256;
    c->seed = 1;
    if (strcmp(name, "paper") == 0) {
        c->n_docs = 100;
        c->doc_len_min = c->doc_len_max = 2048;
        c->docs_per_request = 5;
        c->alpha = 2.1;
        c->n_requests = 200;
    } else if (strcmp(name, "rag") == 0) {
        c->n_docs = 10000;
        c->doc_len_min = 100;
        c->doc_len_max = 400;
        c->docs_per_request = 10;
        c->alpha = 0.9;
        c->n_requests = 1000;
    } else {
        return lzt_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "lazyattn_workload_config_preset: unknown preset '%s' (paper, rag)", name);
    }
    lz_workload_length_defaults(c);
    c->length_dist = LAZYATTN_LENGTH_UNIFORM;
    c->drift_at = 0;
    c->sampler = LAZYATTN_SAMPLER_ZIPF;
    c->n_prompts = 200;
    return LAZYATTN_STATUS_OK;
}

void lazyattn_workload_config_init(lazyattn_workload_config *config) {
    if (config) lazyattn_workload_config_preset("paper", config);
}

static int lz_workload_check(const lazyattn_workload_config *c) {
    const char *w = "lazyattn_workload_create";
    LZT_CHECK_ARG(c->n_docs >= 1, "%s: n_docs %d < 1", w, c->n_docs);
    LZT_CHECK_ARG(c->doc_len_min >= 1 && c->doc_len_max >= c->doc_len_min,
                 "%s: document lengths %d..%d (need 1 <= min <= max)", w, c->doc_len_min,
                 c->doc_len_max);
    LZT_CHECK_ARG(c->docs_per_request >= 1 && c->docs_per_request <= c->n_docs,
                 "%s: %d documents per request from a pool of %d", w, c->docs_per_request,
                 c->n_docs);
    LZT_CHECK_ARG(c->alpha > 0 && isfinite(c->alpha), "%s: alpha %g must be > 0", w, c->alpha);
    LZT_CHECK_ARG(c->question_min >= 0 && c->question_max >= c->question_min,
                 "%s: question lengths %d..%d", w, c->question_min, c->question_max);
    LZT_CHECK_ARG(c->gen_min >= 0 && c->gen_max >= c->gen_min, "%s: generated lengths %d..%d", w,
                 c->gen_min, c->gen_max);
    LZT_CHECK_ARG(c->prefix_len >= 0, "%s: prefix length %d < 0", w, c->prefix_len);
    LZT_CHECK_ARG(c->n_requests >= 0, "%s: %d requests", w, c->n_requests);
    LZT_CHECK_ARG(c->vocab_size >= 0, "%s: vocab_size %d < 0", w, c->vocab_size);
    switch (c->length_dist) {
    case LAZYATTN_LENGTH_UNIFORM: break;
    case LAZYATTN_LENGTH_LOGNORMAL:
        LZT_CHECK_ARG(c->length_mean > 0 && isfinite(c->length_mean) && c->length_mean <= 1e9,
                     "%s: lognormal length_mean %g (need 0 < mean <= 1e9)", w, c->length_mean);
        LZT_CHECK_ARG(c->length_sigma >= 0 && c->length_sigma <= 4,
                     "%s: lognormal length_sigma %g (need 0 <= sigma <= 4)", w, c->length_sigma);
        break;
    case LAZYATTN_LENGTH_BIMODAL:
        LZT_CHECK_ARG(c->length_short_max >= c->doc_len_min && c->length_short_max <= c->doc_len_max,
                     "%s: bimodal length_short_max %d outside doc_len_min..doc_len_max %d..%d", w,
                     c->length_short_max, c->doc_len_min, c->doc_len_max);
        LZT_CHECK_ARG(c->length_long_min >= c->doc_len_min && c->length_long_min <= c->doc_len_max,
                     "%s: bimodal length_long_min %d outside doc_len_min..doc_len_max %d..%d", w,
                     c->length_long_min, c->doc_len_min, c->doc_len_max);
        LZT_CHECK_ARG(c->length_long_fraction >= 0 && c->length_long_fraction <= 1,
                     "%s: bimodal length_long_fraction %g outside 0..1", w,
                     c->length_long_fraction);
        break;
    default:
        return lzt_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: unknown length_dist %d", w,
                       (int)c->length_dist);
    }
    LZT_CHECK_ARG(c->drift_at >= 0, "%s: drift_at %d < 0", w, c->drift_at);
    if (c->sampler == LAZYATTN_SAMPLER_PAPER_FIXED_PROMPTS) {
        LZT_CHECK_ARG(c->n_prompts >= 1 && c->n_prompts <= LAZYATTN_WORKLOAD_MAX_REQUESTS,
                     "%s: n_prompts %d outside 1..%d", w, c->n_prompts,
                     LAZYATTN_WORKLOAD_MAX_REQUESTS);
    } else if (c->sampler != LAZYATTN_SAMPLER_ZIPF) {
        return lzt_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: unknown sampler %d", w,
                       (int)c->sampler);
    }
    /* sizes up front, before anything is allocated (int64: no product of
     * two int32 values wraps) */
    if (c->n_docs > LAZYATTN_WORKLOAD_MAX_DOCS)
        return lzt_fail(LAZYATTN_STATUS_OUT_OF_RANGE, "%s: n_docs %d above %d (LAZYATTN_WORKLOAD_MAX_DOCS)",
                       w, c->n_docs, LAZYATTN_WORKLOAD_MAX_DOCS);
    if (c->n_requests > LAZYATTN_WORKLOAD_MAX_REQUESTS)
        return lzt_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                       "%s: n_requests %d above %d (LAZYATTN_WORKLOAD_MAX_REQUESTS)", w,
                       c->n_requests, LAZYATTN_WORKLOAD_MAX_REQUESTS);
    const struct {
        const char *what;
        int64_t value;
    } sizes[] = {
        {"document tokens (n_docs x doc_len_max)", (int64_t)c->n_docs * c->doc_len_max},
        {"question tokens (n_requests x question_max)", (int64_t)c->n_requests * c->question_max},
        {"document slots (n_requests x docs_per_request)",
         (int64_t)c->n_requests * c->docs_per_request},
        {"prefix tokens", c->prefix_len},
        {"prompt slots (n_prompts x docs_per_request)",
         c->sampler == LAZYATTN_SAMPLER_PAPER_FIXED_PROMPTS
             ? (int64_t)c->n_prompts * c->docs_per_request
             : 0},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (sizes[i].value > LAZYATTN_WORKLOAD_MAX_TOKENS)
            return lzt_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                           "%s: %s = %lld above %lld (LAZYATTN_WORKLOAD_MAX_TOKENS)", w,
                           sizes[i].what, (long long)sizes[i].value,
                           (long long)LAZYATTN_WORKLOAD_MAX_TOKENS);
    int64_t context = (int64_t)c->docs_per_request * c->doc_len_max + c->prefix_len +
                      c->question_max + c->gen_max;
    if (context > (int64_t)LAZYATTN_MAX_POSITION + 1)
        return lzt_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                       "%s: a request of up to %lld tokens (docs_per_request x doc_len_max + "
                       "prefix + question_max + gen_max) passes LAZYATTN_MAX_POSITION + 1 = %d",
                       w, (long long)context, LAZYATTN_MAX_POSITION + 1);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_workload_zipf_pmf(int n, double alpha, int rank, double *p) {
    LZT_CHECK_ARG(p != NULL, "lazyattn_workload_zipf_pmf: p is NULL");
    LZT_CHECK_ARG(n >= 1 && rank >= 1 && rank <= n && alpha > 0 && isfinite(alpha),
                 "lazyattn_workload_zipf_pmf: n %d, rank %d, alpha %g", n, rank, alpha);
    double z = 0;
    for (int r = n; r >= 1; r--) z += pow(r, -alpha); /* small terms first */
    *p = pow(rank, -alpha) / z;
    return LAZYATTN_STATUS_OK;
}

// ---- create ----

/* k distinct ranks (0-based) by Zipf without replacement: draws from the
 * full distribution, rejecting ones already taken (the same law as drawing
 * from what remains); after many rejections, draws from what remains
 * exactly by a scan. */
static void lz_draw_distinct(lz_rng *rng, const double *cdf, int n, int k, int32_t *out,
                             uint8_t *taken) {
    for (int i = 0; i < k; i++) {
        int pick = -1;
        for (int tries = 0; tries < 64 && pick < 0; tries++) {
            double u = lz_rng_unit(rng) * cdf[n - 1];
            int lo = 0, hi = n - 1;
            while (lo < hi) {
                int mid = lo + (hi - lo) / 2;
                if (cdf[mid] > u) hi = mid;
                else lo = mid + 1;
            }
            if (!taken[lo]) pick = lo;
        }
        if (pick < 0) {
            double rest = 0;
            for (int j = 0; j < n; j++)
                if (!taken[j]) rest += cdf[j] - (j ? cdf[j - 1] : 0);
            double u = lz_rng_unit(rng) * rest;
            for (int j = 0; j < n; j++) {
                if (taken[j]) continue;
                pick = j;
                u -= cdf[j] - (j ? cdf[j - 1] : 0);
                if (u < 0) break;
            }
        }
        taken[pick] = 1;
        out[i] = pick;
    }
    for (int i = 0; i < k; i++) taken[out[i]] = 0;
    /* Random order (Fisher-Yates): the draw order favours popular ones. */
    for (int i = k - 1; i > 0; i--) {
        int j = lz_rng_range(rng, 0, i);
        int32_t t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}

/* One document length under the configured law (c checked). UNIFORM draws
 * exactly what the generator drew before the other laws existed. */
static int lz_draw_length(lz_rng *rng, const lazyattn_workload_config *c) {
    switch (c->length_dist) {
    case LAZYATTN_LENGTH_LOGNORMAL: {
        /* Box-Muller: u1 in (0, 1], u2 in [0, 1). */
        double u1 = 1.0 - lz_rng_unit(rng), u2 = lz_rng_unit(rng);
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        double mu = log(c->length_mean) - c->length_sigma * c->length_sigma / 2;
        double x = round(exp(mu + c->length_sigma * z)); /* inf and 0 clamp below */
        if (!(x >= c->doc_len_min)) return c->doc_len_min;
        if (x > c->doc_len_max) return c->doc_len_max;
        return (int)x;
    }
    case LAZYATTN_LENGTH_BIMODAL:
        if (lz_rng_unit(rng) < c->length_long_fraction)
            return lz_rng_range(rng, c->length_long_min, c->doc_len_max);
        return lz_rng_range(rng, c->doc_len_min, c->length_short_max);
    default: return lz_rng_range(rng, c->doc_len_min, c->doc_len_max);
    }
}

/* PAPER_FIXED_PROMPTS: prompt p holds the k consecutive ids (o_p + j) mod
 * D from a uniform start o_p, in that order. prompts: [n_prompts * k]. */
static void lz_make_prompts(lz_rng *rng, int D, int k, int n_prompts, int32_t *prompts) {
    for (int p = 0; p < n_prompts; p++) {
        int o = lz_rng_range(rng, 0, D - 1);
        for (int j = 0; j < k; j++) prompts[(size_t)p * (size_t)k + (size_t)j] = (int32_t)((o + j) % D);
    }
}

int lazyattn_workload_create(const lazyattn_workload_config *config, lazyattn_workload **out) {
    LZT_CHECK_ARG(out != NULL, "lazyattn_workload_create: out is NULL");
    *out = NULL;
    LZT_CHECK_ARG(config != NULL, "lazyattn_workload_create: config is NULL");
    int st = lz_workload_check(config);
    if (st) return st;
    lazyattn_workload *wl = calloc(1, sizeof *wl);
    if (!wl) return lzt_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_workload_create");
    wl->config = *config;
    lazyattn_workload_config *c = &wl->config;
    if (c->vocab_size == 0) c->vocab_size = 128256;
    int D = c->n_docs, k = c->docs_per_request, R = c->n_requests;
    const int paper = c->sampler == LAZYATTN_SAMPLER_PAPER_FIXED_PROMPTS;
    double *cdf = malloc((size_t)D * sizeof *cdf);
    uint8_t *taken = calloc((size_t)D, 1);
    int32_t *perm = c->drift_at > 0 ? malloc((size_t)D * sizeof *perm) : NULL;
    int32_t *prompts = paper ? malloc((size_t)c->n_prompts * (size_t)k * sizeof *prompts) : NULL;
    if (paper) wl->prompt = malloc(((size_t)R + 1) * sizeof *wl->prompt);
    wl->doc_offset = malloc(((size_t)D + 1) * sizeof *wl->doc_offset);
    wl->prefix = malloc(((size_t)c->prefix_len + 1) * sizeof *wl->prefix);
    wl->req_docs = malloc(((size_t)R * (size_t)k + 1) * sizeof *wl->req_docs);
    wl->q_offset = malloc(((size_t)R + 1) * sizeof *wl->q_offset);
    wl->gen = malloc(((size_t)R + 1) * sizeof *wl->gen);
    if (!cdf || !taken || !wl->doc_offset || !wl->prefix || !wl->req_docs || !wl->q_offset ||
        !wl->gen || (c->drift_at > 0 && !perm) || (paper && (!prompts || !wl->prompt)))
        goto oom;

    /* Separate streams, so that e.g. more requests leave lengths alone. */
    lz_rng len_rng, req_rng, q_rng;
    lz_rng_seed(&len_rng, lz_hash_pair(c->seed, 1));
    lz_rng_seed(&req_rng, lz_hash_pair(c->seed, 2));
    lz_rng_seed(&q_rng, lz_hash_pair(c->seed, 3));

    wl->doc_offset[0] = 0;
    for (int i = 0; i < D; i++)
        wl->doc_offset[i + 1] = wl->doc_offset[i] + lz_draw_length(&len_rng, c);
    wl->doc_tokens = malloc(((size_t)wl->doc_offset[D] + 1) * sizeof *wl->doc_tokens);
    if (!wl->doc_tokens) goto oom;
    for (int i = 0; i < D; i++)
        for (int64_t t = 0; t < wl->doc_offset[i + 1] - wl->doc_offset[i]; t++)
            wl->doc_tokens[wl->doc_offset[i] + t] = lz_doc_token(i, t, c->vocab_size);
    for (int t = 0; t < c->prefix_len; t++)
        wl->prefix[t] = (int32_t)(lz_hash_pair(0x5052454649580000ull, (uint64_t)t) % (uint64_t)c->vocab_size);

    double acc = 0;
    for (int r = 0; r < D; r++) cdf[r] = acc += pow(r + 1, -c->alpha);
    wl->q_offset[0] = 0;
    /* Streams of their own (4: drift, 5: prompts): the Zipf requests of a
     * config without them are drawn exactly as before. */
    if (perm) {
        lz_rng drift_rng;
        lz_rng_seed(&drift_rng, lz_hash_pair(c->seed, 4));
        for (int i = 0; i < D; i++) perm[i] = i;
        for (int i = D - 1; i > 0; i--) {
            int j = lz_rng_range(&drift_rng, 0, i);
            int32_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }
    if (paper) {
        lz_rng prompt_rng;
        lz_rng_seed(&prompt_rng, lz_hash_pair(c->seed, 5));
        lz_make_prompts(&prompt_rng, D, k, c->n_prompts, prompts);
    }
    for (int q = 0; q < R; q++) {
        int32_t *docs = wl->req_docs + (size_t)q * (size_t)k;
        if (paper) {
            int p = lz_rng_range(&req_rng, 0, c->n_prompts - 1);
            wl->prompt[q] = p;
            memcpy(docs, prompts + (size_t)p * (size_t)k, (size_t)k * sizeof *docs);
        } else {
            lz_draw_distinct(&req_rng, cdf, D, k, docs, taken);
        }
        if (perm && q >= c->drift_at)
            for (int j = 0; j < k; j++) docs[j] = perm[docs[j]];
        wl->q_offset[q + 1] = wl->q_offset[q] + lz_rng_range(&req_rng, c->question_min, c->question_max);
        wl->gen[q] = lz_rng_range(&req_rng, c->gen_min, c->gen_max);
    }
    wl->q_tokens = malloc(((size_t)wl->q_offset[R] + 1) * sizeof *wl->q_tokens);
    if (!wl->q_tokens) goto oom;
    for (int64_t t = 0; t < wl->q_offset[R]; t++)
        wl->q_tokens[t] = (int32_t)(lz_rng_next(&q_rng) % (uint64_t)c->vocab_size);
    free(cdf);
    free(taken);
    free(perm);
    free(prompts);
    *out = wl;
    return LAZYATTN_STATUS_OK;
oom:
    free(cdf);
    free(taken);
    free(perm);
    free(prompts);
    lazyattn_workload_destroy(wl);
    return lzt_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_workload_create");
}

void lazyattn_workload_destroy(lazyattn_workload *wl) {
    if (!wl) return;
    free(wl->doc_offset);
    free(wl->doc_tokens);
    free(wl->prefix);
    free(wl->req_docs);
    free(wl->q_offset);
    free(wl->q_tokens);
    free(wl->gen);
    free(wl->prompt);
    free(wl);
}

// ---- access ----

int lazyattn_workload_get_config(const lazyattn_workload *wl, lazyattn_workload_config *config) {
    LZT_CHECK_ARG(wl && config, "lazyattn_workload_get_config: NULL argument");
    *config = wl->config;
    return LAZYATTN_STATUS_OK;
}

int lazyattn_workload_get_doc(const lazyattn_workload *wl, int doc_id, const int32_t **tokens,
                              int *n_tokens) {
    LZT_CHECK_ARG(wl && tokens && n_tokens, "lazyattn_workload_get_doc: NULL argument");
    LZT_CHECK_ARG(doc_id >= 0 && doc_id < wl->config.n_docs,
                 "lazyattn_workload_get_doc: document %d outside 0..%d", doc_id,
                 wl->config.n_docs - 1);
    *tokens = wl->doc_tokens + wl->doc_offset[doc_id];
    *n_tokens = (int)(wl->doc_offset[doc_id + 1] - wl->doc_offset[doc_id]);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_workload_get_prefix(const lazyattn_workload *wl, const int32_t **tokens,
                                 int *n_tokens) {
    LZT_CHECK_ARG(wl && tokens && n_tokens, "lazyattn_workload_get_prefix: NULL argument");
    *n_tokens = wl->config.prefix_len;
    *tokens = wl->config.prefix_len ? wl->prefix : NULL;
    return LAZYATTN_STATUS_OK;
}

int lazyattn_workload_get_request(const lazyattn_workload *wl, int index,
                                  lazyattn_workload_request *req) {
    LZT_CHECK_ARG(wl && req, "lazyattn_workload_get_request: NULL argument");
    LZT_CHECK_ARG(index >= 0 && index < wl->config.n_requests,
                 "lazyattn_workload_get_request: request %d outside 0..%d", index,
                 wl->config.n_requests - 1);
    int k = wl->config.docs_per_request;
    req->n_docs = k;
    req->doc_ids = wl->req_docs + (size_t)index * (size_t)k;
    req->n_question = (int)(wl->q_offset[index + 1] - wl->q_offset[index]);
    req->question = wl->q_tokens + wl->q_offset[index];
    req->n_generate = wl->gen[index];
    req->prompt_index = wl->prompt ? wl->prompt[index] : -1;
    return LAZYATTN_STATUS_OK;
}

int lazyattn_workload_get_request_desc(const lazyattn_workload *wl, int index,
                                       const int32_t **docs, int32_t *doc_lengths,
                                       lazyattn_request_desc *desc) {
    LZT_CHECK_ARG(docs && doc_lengths && desc, "lazyattn_workload_get_request_desc: NULL argument");
    lazyattn_workload_request req;
    int st = lazyattn_workload_get_request(wl, index, &req);
    if (st) return st;
    for (int i = 0; i < req.n_docs; i++) {
        int n;
        lazyattn_workload_get_doc(wl, req.doc_ids[i], &docs[i], &n);
        doc_lengths[i] = n;
    }
    memset(desc, 0, sizeof *desc);
    lazyattn_workload_get_prefix(wl, &desc->prefix, &desc->n_prefix);
    desc->n_docs = req.n_docs;
    desc->docs = docs;
    desc->doc_lengths = doc_lengths;
    desc->n_question = req.n_question;
    desc->question = req.question;
    desc->max_new_tokens = req.n_generate;
    return LAZYATTN_STATUS_OK;
}
