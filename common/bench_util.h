/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers of the benchmark and probe programs (bench_kernels, tune_kernels,
 * bench/probe_*): status checks that end the program, a seeded uniform
 * generator, device buffers, a monotonic clock and a comparator for
 * medians. Programs only: the library never exits. */
#ifndef LAZYATTN_BENCH_UTIL_H
#define LAZYATTN_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lazyattn.h"

#define CHECK(call)                                                                        \
    do {                                                                                   \
        int st_ = (call);                                                                  \
        if (st_) {                                                                         \
            fprintf(stderr, "%s:%d %s: %s (%s)\n", __FILE__, __LINE__, #call,              \
                    lazyattn_status_string(st_), lazyattn_last_error());                   \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#define CLCHECK(call)                                                                      \
    do {                                                                                   \
        cl_int e_ = (call);                                                                \
        if (e_ != CL_SUCCESS) {                                                            \
            fprintf(stderr, "%s:%d %s: OpenCL error %d\n", __FILE__, __LINE__, #call, e_); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* Uniform in [-1, 1) from a splitmix64 state. */
static inline float bench_frand(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((z >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
}

/* A read-write buffer of bytes, filled from data when it is not NULL. */
static inline cl_mem bench_buffer(cl_context context, const void *data, size_t bytes) {
    cl_int err;
    cl_mem m = clCreateBuffer(context, CL_MEM_READ_WRITE | (data ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)data, &err);
    CLCHECK(err);
    return m;
}

/* Seconds on the monotonic clock. */
static inline double bench_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* qsort comparator of doubles (medians). */
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif
