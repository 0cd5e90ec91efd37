/* SPDX-License-Identifier: Apache-2.0 */
/* Size arithmetic that cannot wrap. Every size the library computes from
 * caller values (buffer bytes, work sizes, scratch, host arrays) goes
 * through these: a product or sum that does not fit its type is refused
 * with OUT_OF_RANGE and a message naming the quantity, never used. */
#ifndef LAZYATTN_CHECKED_SIZE_H
#define LAZYATTN_CHECKED_SIZE_H

#include "internal.h"

#include <limits.h>
#include <stdint.h>

/* *out = a * b (a + b); 1 when the exact result does not fit (*out is then
 * unspecified), 0 otherwise. */
static inline int lz_mul_wraps(size_t a, size_t b, size_t *out) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_mul_overflow(a, b, out);
#else
    if (a != 0 && b > SIZE_MAX / a) return 1;
    *out = a * b;
    return 0;
#endif
}

static inline int lz_add_wraps(size_t a, size_t b, size_t *out) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_add_overflow(a, b, out);
#else
    if (b > SIZE_MAX - a) return 1;
    *out = a + b;
    return 0;
#endif
}

static inline int lz_mul_wraps_u64(uint64_t a, uint64_t b, uint64_t *out) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_mul_overflow(a, b, out);
#else
    if (a != 0 && b > UINT64_MAX / a) return 1;
    *out = a * b;
    return 0;
#endif
}

/* *out = a * b * c (pass 1 for an unused factor), or OUT_OF_RANGE with
 * "fn: what = a x b x c does not fit in size_t". */
static inline int lz_size_product(size_t *out, const char *fn, const char *what, size_t a,
                                  size_t b, size_t c) {
    size_t ab;
    if (lz_mul_wraps(a, b, &ab) || lz_mul_wraps(ab, c, out))
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                       "%s: %s = %zu x %zu x %zu does not fit in size_t", fn, what, a, b, c);
    return LAZYATTN_STATUS_OK;
}

/* *out = a * b * c * d, as lz_size_product. */
static inline int lz_size_product4(size_t *out, const char *fn, const char *what, size_t a,
                                   size_t b, size_t c, size_t d) {
    size_t ab, abc;
    if (lz_mul_wraps(a, b, &ab) || lz_mul_wraps(ab, c, &abc) || lz_mul_wraps(abc, d, out))
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                       "%s: %s = %zu x %zu x %zu x %zu does not fit in size_t", fn, what, a, b, c,
                       d);
    return LAZYATTN_STATUS_OK;
}

/* A count a kernel holds in an int32: value <= INT_MAX, or OUT_OF_RANGE
 * naming it. */
static inline int lz_fits_int(int64_t value, const char *fn, const char *what) {
    if (value < 0 || value > INT_MAX)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE, "%s: %s = %lld does not fit in int32", fn,
                       what, (long long)value);
    return LAZYATTN_STATUS_OK;
}

/* Runs a check returning a status and returns it when it fails. */
#define LZ_TRY(expr)                \
    do {                            \
        int st_try_ = (expr);       \
        if (st_try_) return st_try_; \
    } while (0)

#endif
