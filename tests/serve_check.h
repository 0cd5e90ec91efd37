/* SPDX-License-Identifier: Apache-2.0 */
/* CHECK(expr): the serve/ tests' assertion that a call returned 0 (OK), the
 * failure naming the call, its status and both libraries' last errors
 * (serve_last_error, lazyattn_last_error). Include after cmocka.h and
 * serve.h. */
#ifndef LAZYATTN_TESTS_SERVE_CHECK_H
#define LAZYATTN_TESTS_SERVE_CHECK_H

#define CHECK(expr)                                                                      \
    do {                                                                                 \
        int st_ = (expr);                                                                \
        if (st_) fail_msg("%s -> %d: %s | %s", #expr, st_, serve_last_error(),           \
                          lazyattn_last_error());                                        \
    } while (0)

#endif
