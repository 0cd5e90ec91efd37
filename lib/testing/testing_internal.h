/* SPDX-License-Identifier: Apache-2.0 */
/* What the files of liblazyattn-testing share. The library sits on top of
 * liblazyattn and sees only its public API: its messages go to its own
 * lazyattn_testing_last_error() (testing_error.c). Not installed. */
#ifndef LAZYATTN_TESTING_INTERNAL_H
#define LAZYATTN_TESTING_INTERNAL_H

#include "lazyattn_testing.h"

/* Records the detail for lazyattn_testing_last_error() and returns status. */
int lzt_fail(int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define LZT_CHECK_ARG(cond, ...)                                                       \
    do {                                                                               \
        if (!(cond)) return lzt_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, __VA_ARGS__);   \
    } while (0)

/* Runs a check returning a status and returns it when it fails. */
#define LZT_TRY(expr)                \
    do {                             \
        int st_try_ = (expr);        \
        if (st_try_) return st_try_; \
    } while (0)

#endif
