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

/* Asserts a status, printing the library's message when it differs. */
#define lt_assert_status(expr, want)                                                   \
    do {                                                                               \
        int got_ = (expr);                                                             \
        if (got_ != (want))                                                            \
            print_error("%s -> %d (%s: %s), expected %d\n", #expr, got_,               \
                        lazyattn_status_string(got_), lazyattn_last_error(), (int)(want)); \
        assert_int_equal(got_, (want));                                                \
    } while (0)

#endif
