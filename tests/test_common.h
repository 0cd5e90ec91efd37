/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the cmocka tests: the OpenCL context of a group,
 * a seeded generator, buffers. */
#ifndef LAZYATTN_TEST_COMMON_H
#define LAZYATTN_TEST_COMMON_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lazyattn.h"
#include "lazyattn_testing.h" /* the reference, the workload generator */

/* Splitmix64: small, seeded, reproducible on every platform. */
typedef struct lt_rng {
    uint64_t state;
} lt_rng;

uint64_t lt_next(lt_rng *r);
/* Uniform integer in [lo, hi]. */
int lt_int(lt_rng *r, int lo, int hi);
/* Uniform in [-1, 1). */
float lt_uniform(lt_rng *r);
void lt_fill(lt_rng *r, float *x, size_t n, float amplitude);

/* The seed of a run: LAZYATTN_TEST_SEED or a fixed default; printed. */
uint64_t lt_seed(void);

/* Group setup/teardown: *state becomes a lazyattn_context on the default
 * device, created once and shared by the group. */
int lt_context_setup(void **state);
int lt_context_teardown(void **state);

/* Buffer from host data (READ_WRITE, copied); NULL on failure. */
cl_mem lt_buffer(lazyattn_context *ctx, const void *data, size_t bytes);
/* Blocking read of a buffer into host memory. */
void lt_read(lazyattn_context *ctx, cl_mem m, void *out, size_t bytes);

/* A random request's keys laid into a pool (the attention tests'): segments
 * at contiguous logical positions from `base`, each in its own blocks (the
 * pool's, allocated here and scattered); a segment with seg_stored[i] < 0 is
 * stored where it sits (delta 0), else from seg_stored[i] on (a document at
 * its own stored start: each of its blocks carries a delta). */
typedef struct lt_sequence {
    int n_keys;
    float *k, *v;              /* [n_keys, n_kv, d] unrotated, logical order, random */
    int32_t *k_pos;            /* [n_keys] logical */
    int32_t *slot, *stored;    /* [n_keys] where and at which position K is written */
    int n_entries;
    uint64_t *table;           /* [n_entries] */
    int32_t *entry_pos;        /* [n_entries] logical start of each entry */
    int32_t *entry_stored;     /* [n_entries] stored start of each entry's block */
    /* the tests' own: */
    int n_question;            /* test_attention: the last n_question keys are the question */
    int n_q;                   /* test_prefill_batched: queries, the last n_q keys */
    int no_entries;            /* test_prefill_batched: launched with an empty table range */
    float *q;                  /* test_prefill_batched: [n_q, n_q_heads, d] unrotated */
} lt_sequence;

/* Fills s (zeroed first) from n_seg segments. */
void lt_sequence_lay_out(lt_rng *r, lazyattn_pool *pool, const lazyattn_attention_config *c,
                         int base, int n_seg, const int *seg_len, const int *seg_stored,
                         lt_sequence *s);
/* Frees what s holds (not its pool blocks) and zeroes it. */
void lt_sequence_free(lt_sequence *s);

/* Asserts a status, printing the libraries' messages when it differs. */
#define lt_assert_status(expr, want)                                                   \
    do {                                                                               \
        int got_ = (expr);                                                             \
        if (got_ != (want))                                                            \
            print_error("%s -> %d (%s: %s; testing library: %s), expected %d\n", #expr,  \
                        got_, lazyattn_status_string(got_), lazyattn_last_error(),     \
                        lazyattn_testing_last_error(), (int)(want));                   \
        assert_int_equal(got_, (want));                                                \
    } while (0)

#endif
