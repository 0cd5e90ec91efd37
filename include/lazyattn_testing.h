/*
 * lazyattn_testing.h: helpers for tests, examples and benchmarks, installed
 * next to lazyattn.h but not part of its stable API (they may change
 * between minor versions): the eager float64 reference attention, the
 * normalised error every test uses against it, and the seeded RAG workload
 * generator of the hit-ratio study and the serving benchmark.
 * Same conventions as lazyattn.h (statuses, shapes above each function).
 */
#ifndef LAZYATTN_TESTING_H
#define LAZYATTN_TESTING_H

#include "lazyattn.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * NULL arrays or n == 0 (reason in lazyattn_last_error()). */
LAZYATTN_API double lazyattn_normalised_error(const float *a, const double *b, size_t n);

/* ---- RAG workload generator ----------------------------------------------- */

/*
 * Seeded, reproducible: D documents with lengths uniform in
 * [doc_len_min, doc_len_max]; each request draws docs_per_request distinct
 * documents by Zipf(alpha) popularity over the whole pool (doc id r-1 has
 * rank r, probability proportional to r^-alpha, drawn without replacement),
 * in random order, a question of uniform length in [question_min,
 * question_max] and a generated length in [gen_min, gen_max]. Token ids of
 * document i are a fixed function of (i, index) in [0, vocab_size), so a
 * document hashes the same under every seed.
 */
typedef struct lazyattn_workload lazyattn_workload;

/* Limits of a workload, refused with OUT_OF_RANGE up front (they bound
 * its host memory to about 2 GB): documents, requests, and the tokens of all
 * documents, of all questions, and the document slots n_requests *
 * docs_per_request, each. */
#define LAZYATTN_WORKLOAD_MAX_DOCS (1 << 24)
#define LAZYATTN_WORKLOAD_MAX_REQUESTS (1 << 24)
#define LAZYATTN_WORKLOAD_MAX_TOKENS ((int64_t)1 << 27)

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
} lazyattn_workload_request;

/* "paper": D = 100, length 2048, k = 5, alpha = 2.1, Q 16-32, G 8-16,
 * 200 requests. "rag": D = 10000, lengths 100-400, k = 10, alpha = 0.9,
 * Q 16-32, G 8-16, 1000 requests. Both: prefix 0, seed 1, vocab 128256. */
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
