/* SPDX-License-Identifier: Apache-2.0 */
#include "test_common.h"

#include <stdio.h>
#include <stdlib.h>

uint64_t lt_next(lt_rng *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int lt_int(lt_rng *r, int lo, int hi) {
    return lo + (int)(lt_next(r) % (uint64_t)(hi - lo + 1));
}

float lt_uniform(lt_rng *r) { return (float)((lt_next(r) >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0); }

void lt_fill(lt_rng *r, float *x, size_t n, float amplitude) {
    for (size_t i = 0; i < n; i++) x[i] = amplitude * lt_uniform(r);
}

uint64_t lt_seed(void) {
    const char *s = getenv("LAZYATTN_TEST_SEED");
    uint64_t seed = s && *s ? strtoull(s, NULL, 0) : 20261129ull;
    printf("# seed %llu (set LAZYATTN_TEST_SEED to change)\n", (unsigned long long)seed);
    return seed;
}

int lt_context_setup(void **state) {
    lazyattn_context *ctx = NULL;
    int st = lazyattn_context_create(NULL, &ctx);
    if (st) {
        fprintf(stderr, "no OpenCL device: %s (%s)\n", lazyattn_status_string(st),
                lazyattn_last_error());
        return -1; /* cmocka fails the group: a missing device is not a pass */
    }
    printf("# device: %s\n", lazyattn_context_device_name(ctx));
    *state = ctx;
    return 0;
}

int lt_context_teardown(void **state) {
    lazyattn_context_destroy(*state);
    return 0;
}

cl_mem lt_buffer(lazyattn_context *ctx, const void *data, size_t bytes) {
    cl_int err;
    cl_mem m = clCreateBuffer(lazyattn_context_cl_context(ctx),
                              CL_MEM_READ_WRITE | (data ? CL_MEM_COPY_HOST_PTR : 0),
                              bytes ? bytes : 4, (void *)data, &err);
    return err == CL_SUCCESS ? m : NULL;
}

void lt_read(lazyattn_context *ctx, cl_mem m, void *out, size_t bytes) {
    cl_int err = clEnqueueReadBuffer(lazyattn_context_queue(ctx), m, CL_TRUE, 0, bytes, out, 0,
                                     NULL, NULL);
    assert_int_equal(err, CL_SUCCESS);
}
