/* SPDX-License-Identifier: Apache-2.0 */
/* The testing library's per-thread error detail. */
#include "testing/testing_internal.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char lzt_last_error[512];

const char *lazyattn_testing_last_error(void) { return lzt_last_error; }

int lzt_fail(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lzt_last_error, sizeof lzt_last_error, fmt, ap);
    va_end(ap);
    return status;
}
