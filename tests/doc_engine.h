/* SPDX-License-Identifier: Apache-2.0 */
/* A small engine over a LAZY document cache, shared by the document export
 * and tier tests (test_doc_export.c, test_doc_tier.c): N_DOCS documents whose
 * tokens and K/V depend on the document (and layer) only, so that a second
 * process computes the same, and requests run through the cache on the
 * device, every layer checked against the float64 reference. */
#ifndef LAZYATTN_TEST_DOC_ENGINE_H
#define LAZYATTN_TEST_DOC_ENGINE_H

#include "test_common.h"

#define L 2 /* layers */
#define NKV 2
#define NQH 4
#define D 64
#define B 16 /* f32 engines; the f16 round trip uses 32 */
#define ROW (NKV * D)
#define NQ 5
#define N_DOCS 6 /* 4 and 5: a pair whose old (version-1) 64-bit hashes collide */
#define MODEL 7
#define OUT_N ((size_t)L * NQ * NQH * D)

/* Length of each document, in tokens. */
extern const int doc_len[N_DOCS];

/* tok[0 .. doc_len[id]): the document's tokens. */
void doc_tokens(int id, int32_t *tok);
/* K/V of a document ([doc_len[id], ROW] each), by document and layer only
 * (fixed seeds). */
void doc_kv(int id, int layer, float *k, float *v);

typedef struct engine {
    lazyattn_context *ctx;
    int block_size;
    lazyattn_dtype dtype;
    lazyattn_attention_config c;
    lazyattn_attention *attn;
    lazyattn_pool *pool;
    lazyattn_cache *cache;
} engine;

/* A pool of n_blocks blocks (per layer, K and V), attention and a LAZY
 * cache of this model id, block size, storage type and page layout (of the
 * pool and the attention). */
void engine_open_layout(engine *e, lazyattn_context *ctx, int n_blocks, uint64_t model,
                        int block_size, lazyattn_dtype dtype, lazyattn_kv_layout layout);
/* engine_open_layout with ROWS pages. */
void engine_open_as(engine *e, lazyattn_context *ctx, int n_blocks, uint64_t model,
                    int block_size, lazyattn_dtype dtype);
/* engine_open_as with block size B and f32 storage. */
void engine_open(engine *e, lazyattn_context *ctx, int n_blocks, uint64_t model);
void engine_close(engine *e);

/*
 * Runs [docs...] [question] through the cache: writes what the plan
 * prefills (every layer), commits, prefills the question on every layer.
 * out: [L, NQ, NQH, D]; actions: [n_docs]. Checks each layer against the
 * float64 reference over the whole prompt at absolute positions.
 */
void run_request(engine *e, int n_docs, const int *ids, float *out,
                 lazyattn_segment_action *actions);

/* lazyattn_request_create on e's cache for [docs ids...] [question] (the
 * tests' question of NQ tokens; n_docs 0: the question alone, ids may be
 * NULL); its status, *out the request. */
int request_of(engine *e, int n_docs, const int *ids, lazyattn_request **out);

/* run_request with its output discarded. */
void run_docs(engine *e, int n_docs, const int *ids, lazyattn_segment_action *actions);

/* The cache's statistics (asserted OK). */
lazyattn_cache_stats stats_of(const engine *e);

/* Called by the next run_request between its plan and its writes, once
 * (it is cleared first; NULL: none), so that another party acts while the
 * request holds its plan (and the leases its tier took). */
extern void (*run_request_planned)(void *user);
extern void *run_request_planned_user;

/* The document hash of document id under MODEL. */
uint64_t hash_of(int id);
/* Its store key under MODEL: (MODEL, lazyattn_doc_digest). */
lazyattn_doc_key key_of(int id);
/* The document hash of the library before the BLAKE2b identities (format
 * version 1): a copy, invertible, from which documents 4 and 5 are built to
 * collide under MODEL. */
uint64_t old_doc_hash(uint64_t model_id, const int32_t *tokens, int n);

#endif
