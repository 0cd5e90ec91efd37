/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lazyattn_testing.h: helpers for tests, examples and benchmarks, installed
 * next to lazyattn.h but not part of its stable API (they may change
 * between minor versions): the eager float64 reference attention, the
 * normalised error every test uses against it, and the seeded RAG workload
 * generator of the hit-ratio study and the serving benchmark.
 * A library of its own, liblazyattn-testing (pkg-config lazyattn-testing),
 * on top of liblazyattn. Same conventions as lazyattn.h (statuses, shapes
 * above each function), but the detail of a failure is in
 * lazyattn_testing_last_error().
 */
#ifndef LAZYATTN_TESTING_H
#define LAZYATTN_TESTING_H

#include "lazyattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The detail of this thread's last failed call of this header's functions
 * (what lazyattn_last_error() is to lazyattn.h); "" before the first. */
LAZYATTN_API const char *lazyattn_testing_last_error(void);

/* ---- CPU float64 reference --------------------------------------------- */

/*
 * Eager attention with absolute positions, in double, independent of the
 * kernels: K and Q are rotated at their absolute positions, key j is
 * visible to query t iff k_pos[j] <= q_pos[t]; a query with no visible key
 * gives zeros.
 *   q:   [n_queries, n_q_heads, head_dim] f32, unrotated
 *   k:   [n_keys, n_kv_heads, head_dim] f32, unrotated
 *   v:   [n_keys, n_kv_heads, head_dim] f32
 *   out: [n_queries, n_q_heads, head_dim] double
 */
typedef struct lazyattn_reference_args {
    int n_queries;
    int n_keys;
    const float *q;
    const int32_t *q_pos;
    const float *k;
    const float *v;
    const int32_t *k_pos;
    double *out;
    double *lse; /* appended: [n_queries, n_q_heads] natural-log log-sum-exp of the
                  * scaled scores (ALiBi included), -INFINITY where no key is
                  * visible; NULL = none */
} lazyattn_reference_args;

/* Zero counts, NULL arrays. */
LAZYATTN_API void lazyattn_reference_args_init(lazyattn_reference_args *args);

LAZYATTN_API int lazyattn_reference_attention(const lazyattn_attention_config *config,
                                              const lazyattn_reference_args *args);

/* Rotates one head vector at position pos in double (identity for NONE).
 *   x: [head_dim] f32, out: [head_dim] double */
LAZYATTN_API int lazyattn_reference_rope(const lazyattn_attention_config *config, int32_t pos,
                                         const float *x, double *out);

/* Normalised error max|a - b| / max(max|b|, tiny) over n values; the
 * measure every test and example uses against the reference. INFINITY for
 * NULL arrays or n == 0 (reason in lazyattn_testing_last_error()). */
LAZYATTN_API double lazyattn_normalised_error(const float *a, const double *b, size_t n);

/* ---- RAG workload generator ----------------------------------------------- */

/*
 * Seeded, reproducible (same config, same seed: the same documents and
 * requests): D documents with lengths from length_dist (below); each
 * request draws docs_per_request distinct documents by Zipf(alpha)
 * popularity over the whole pool (doc id r-1 has rank r, probability
 * proportional to r^-alpha, drawn without replacement), in random order, a
 * question of uniform length in [question_min, question_max] and a
 * generated length in [gen_min, gen_max]. Token ids of document i are a
 * fixed function of (i, index) in [0, vocab_size), so a document hashes the
 * same under every seed.
 *
 * Document lengths (length_dist), always within [doc_len_min, doc_len_max]:
 *   UNIFORM    uniform integers in [doc_len_min, doc_len_max].
 *   LOGNORMAL  round(exp(N(mu, length_sigma^2))) with
 *              mu = ln(length_mean) - length_sigma^2 / 2 (so the mean of the
 *              untruncated law is length_mean, the standard deviation of
 *              ln(length) is length_sigma), clamped to the bounds.
 *   BIMODAL    with probability length_long_fraction uniform in
 *              [length_long_min, doc_len_max] (long documents), else uniform
 *              in [doc_len_min, length_short_max] (short passages).
 * Popularity drift (drift_at > 0): from request drift_at on, every document
 * id a request draws is mapped through one seeded random permutation of the
 * pool (the Zipf ranks move to other documents; the rank draws themselves
 * are the same as without drift).
 * Samplers (sampler):
 *   ZIPF                 the Zipf draw above.
 *   PAPER_FIXED_PROMPTS  what the LazyAttention paper's hit-ratio sweep
 *                        script ends up sampling (docs/HITRATIO.md): n_prompts
 *                        fixed prompts, prompt p holding the docs_per_request
 *                        consecutive ids (o_p + j) mod D, j = 0..k-1, in that
 *                        order, o_p uniform in [0, D); each request is one of
 *                        the prompts drawn uniformly with replacement (alpha
 *                        is not used).
 * A config zeroed with memset and filled field by field gets the uniform
 * lengths, no drift and the Zipf sampler (the behaviour before these fields).
 */
typedef struct lazyattn_workload lazyattn_workload;

/* Limits of a workload, refused with OUT_OF_RANGE up front (they bound
 * its host memory to about 2 GB): documents, requests, and the tokens of all
 * documents, of all questions, and the document slots n_requests *
 * docs_per_request, each. */
#define LAZYATTN_WORKLOAD_MAX_DOCS (1 << 24)
#define LAZYATTN_WORKLOAD_MAX_REQUESTS (1 << 24)
#define LAZYATTN_WORKLOAD_MAX_TOKENS ((int64_t)1 << 27)

/* Document-length laws and request samplers of a workload (see above). */
typedef enum lazyattn_length_dist {
    LAZYATTN_LENGTH_UNIFORM = 0,
    LAZYATTN_LENGTH_LOGNORMAL = 1,
    LAZYATTN_LENGTH_BIMODAL = 2
} lazyattn_length_dist;

typedef enum lazyattn_sampler {
    LAZYATTN_SAMPLER_ZIPF = 0,
    LAZYATTN_SAMPLER_PAPER_FIXED_PROMPTS = 1
} lazyattn_sampler;

typedef struct lazyattn_workload_config {
    int n_docs;
    int doc_len_min, doc_len_max;
    int docs_per_request;
    double alpha;
    int question_min, question_max;
    int gen_min, gen_max;
    int prefix_len; /* shared system prompt tokens (same for every request) */
    int n_requests;
    int vocab_size; /* default 128256 */
    uint64_t seed;
    /* document lengths (see above); the presets set UNIFORM and the
     * parameters of the other two laws for the preset's range */
    lazyattn_length_dist length_dist;
    double length_mean;          /* LOGNORMAL: > 0 */
    double length_sigma;         /* LOGNORMAL: >= 0, <= 4 */
    int length_short_max;        /* BIMODAL: doc_len_min <= short_max <= doc_len_max */
    int length_long_min;         /* BIMODAL: doc_len_min <= long_min <= doc_len_max */
    double length_long_fraction; /* BIMODAL: in [0, 1] */
    int drift_at;                /* > 0: popularity permuted from this request on; 0 none */
    lazyattn_sampler sampler;    /* ZIPF (presets) */
    int n_prompts;               /* PAPER_FIXED_PROMPTS: fixed prompts (presets: 200) */
} lazyattn_workload_config;

/* One request, borrowed from the workload (valid until its destroy).
 *   doc_ids:  [n_docs] distinct ids in [0, config.n_docs)
 *   question: [n_question] int32 */
typedef struct lazyattn_workload_request {
    int n_docs;
    const int32_t *doc_ids;
    int n_question;
    const int32_t *question;
    int n_generate;
    int prompt_index; /* PAPER_FIXED_PROMPTS: the fixed prompt drawn; else -1 */
} lazyattn_workload_request;

/* "paper": D = 100, length 2048, k = 5, alpha = 2.1, Q 16-32, G 8-16,
 * 200 requests. "rag": D = 10000, lengths 100-400, k = 10, alpha = 0.9,
 * Q 16-32, G 8-16, 1000 requests. Both: prefix 0, seed 1, vocab 128256,
 * UNIFORM lengths, no drift, ZIPF sampler, n_prompts 200; LOGNORMAL
 * parameters length_mean = (doc_len_min + doc_len_max) / 2, length_sigma
 * 0.5; BIMODAL: short_max = min + (max - min) / 4, long_min = max - (max -
 * min) / 4, long fraction 0.25 (over the preset's range; widen the range
 * to make them matter for "paper"). Unknown names: INVALID_ARGUMENT. */
LAZYATTN_API int lazyattn_workload_config_preset(const char *name,
                                                 lazyattn_workload_config *config);
/* The "paper" preset. */
LAZYATTN_API void lazyattn_workload_config_init(lazyattn_workload_config *config);
LAZYATTN_API int lazyattn_workload_create(const lazyattn_workload_config *config,
                                          lazyattn_workload **out);
LAZYATTN_API void lazyattn_workload_destroy(lazyattn_workload *wl);
LAZYATTN_API int lazyattn_workload_get_config(const lazyattn_workload *wl,
                                              lazyattn_workload_config *config);
/* tokens: [*n_tokens] borrowed. */
LAZYATTN_API int lazyattn_workload_get_doc(const lazyattn_workload *wl, int doc_id,
                                           const int32_t **tokens, int *n_tokens);
/* prefix: [*n_tokens] borrowed (n_tokens may be 0, then *tokens is NULL). */
LAZYATTN_API int lazyattn_workload_get_prefix(const lazyattn_workload *wl, const int32_t **tokens,
                                              int *n_tokens);
LAZYATTN_API int lazyattn_workload_get_request(const lazyattn_workload *wl, int index,
                                               lazyattn_workload_request *request);
/* Fills a request description for request index (docs and doc_lengths point
 * into the caller's arrays of at least docs_per_request elements). */
LAZYATTN_API int lazyattn_workload_get_request_desc(const lazyattn_workload *wl, int index,
                                                    const int32_t **docs, int32_t *doc_lengths,
                                                    lazyattn_request_desc *desc);
/* Probability of rank r (1-based) under Zipf(alpha) over n items. */
LAZYATTN_API int lazyattn_workload_zipf_pmf(int n, double alpha, int rank, double *p);

#ifdef __cplusplus
}
#endif

#endif /* LAZYATTN_TESTING_H */
