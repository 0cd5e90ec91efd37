/* SPDX-License-Identifier: Apache-2.0 */
/* One small end-to-end run of every portable kernel against the float64
 * reference, shared by test_program.c (SPIR-V against source) and
 * oclgrind_cases.c (the kernels under Oclgrind's memory and race checks). */
#ifndef LAZYATTN_KERNEL_CASES_H
#define LAZYATTN_KERNEL_CASES_H

#include "lazyattn.h"
#include "lazyattn_testing.h" /* the float64 reference */

/* Documents stored once at positions 0..len-1, placed in reverse order at
 * logical positions 0.. (so each block carries a delta, and lengths that
 * are not multiples of the block size make ragged blocks), then a question
 * of n_question tokens stored where it sits. */
typedef struct lk_case {
    const char *name;
    int head_dim, block_size;
    lazyattn_dtype dtype;
    int n_q_heads, n_kv_heads; /* GQA group = n_q_heads / n_kv_heads */
    int n_docs;
    int doc_len[4];
    int n_question;
    int n_splits; /* decode KV splits (> 1 exercises the split reduction) */
    int corrupt;  /* 1: the first entry (and materialise source) names a block outside the
                     pool and the last a length above the block size: the kernels must skip
                     them and report LAZYATTN_STATUS_OUT_OF_RANGE, nothing is compared;
                     2: the batched prefill's indptr arrays are hostile (a sequence past the
                     table, a decrease): every sequence skipped, nothing written, reported;
                     the other kernels are compared as usual */
    int decode_warp; /* 1: the small-work-group decode (cl/decode_warp.cl, decode tile kv_together 3),
                        2: the same with its split-parallel reduction (prefetch 1),
                        3: the reduction chosen by the split count (prefetch 3: the
                           split-parallel one from 64 splits on) */
    lazyattn_kv_layout kv_layout; /* of the pool and the attention (TILED: block_size % 8 == 0) */
} lk_case;

/* Normalised errors against the float64 reference:
 *   rope:         the question's queries after lazyattn_rope_apply
 *   prefill:      lazy prefill of the question over documents + question
 *   decode:       lazy decode of the last question token, n_splits splits
 *   materialised: prefill over materialised (re-rotated) copies of the documents
 *   batched:      lazyattn_prefill_batched of the question as two sequences
 *                 (around an empty one), each over its own copy of the table
 *   outputs:      prefill output [n_question, n_q_heads, head_dim], then the
 *                 decode output [n_q_heads, head_dim] (malloc'ed; NULL to skip) */
typedef struct lk_result {
    double rope, prefill, decode, materialised, batched;
    double lse;      /* largest |lse - reference log-sum-exp| of the prefill and decode rows */
    double half_out; /* normalised error of the prefill with out_dtype F16 */
    float *outputs;
    size_t n_outputs;
} lk_result;

/* Runs the case on ctx. Returns a lazyattn status; on OK the errors are
 * filled in (and lazyattn_attention_check found nothing, or for a corrupt
 * case reported the bad entries). */
int lk_run(lazyattn_context *ctx, const lk_case *c, lk_result *r);

/* Nonzero: lk_run does not print the call that failed (for expected failures). */
extern int lk_quiet;

/* The normalised-error tolerance of a storage type (as test_attention). */
double lk_tolerance(lazyattn_dtype dtype);

#endif
