/* SPDX-License-Identifier: Apache-2.0 */
/* The OpenCL context's reference count for the tests' leak checks (every
 * buffer, program and kernel retains the context on PoCL). Include after
 * cmocka.h and lazyattn.h. */
#ifndef LAZYATTN_TESTS_CONTEXT_REFS_H
#define LAZYATTN_TESTS_CONTEXT_REFS_H

#include <time.h>

static cl_uint lt_context_refs_now(lazyattn_context *ctx) {
    cl_uint n = 0;
    assert_int_equal(clGetContextInfo(lazyattn_context_cl_context(ctx), CL_CONTEXT_REFERENCE_COUNT,
                                      sizeof n, &n, NULL),
                     CL_SUCCESS);
    return n;
}

/* The count once the queue is idle and the count has settled: an
 * implementation may drop the references of finished commands and events a
 * little after clFinish returns, which made one-off leak-count mismatches
 * under load (test_device_plan: 6 for 7; test_serve_bf16: 8 for 7). The
 * count must hold for 20 consecutive readings 1 ms apart (at most 2 s): a
 * leaked object stays counted however long one waits. */
static cl_uint lt_context_refs(lazyattn_context *ctx) {
    assert_int_equal(clFinish(lazyattn_context_queue(ctx)), CL_SUCCESS);
    cl_uint n = lt_context_refs_now(ctx);
    for (int same = 0, i = 0; same < 20 && i < 2000; i++) {
        const struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
        const cl_uint m = lt_context_refs_now(ctx);
        same = m == n ? same + 1 : 0;
        n = m;
    }
    return n;
}

#endif
