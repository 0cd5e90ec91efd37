/* SPDX-License-Identifier: Apache-2.0 */
/* Error detail of the serve module, one message per thread, and the
 * monotonic clock. */
#include "serve.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static _Thread_local char serve_error_text[1024];

int serve_fail(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(serve_error_text, sizeof serve_error_text, fmt, ap);
    va_end(ap);
    return status;
}

int serve_cl_fail(cl_int err, const char *what) {
    int status = LAZYATTN_STATUS_OPENCL;
    if (err == CL_OUT_OF_HOST_MEMORY) status = LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
        err == CL_INVALID_BUFFER_SIZE)
        status = LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY;
    return serve_fail(status, "%s: OpenCL error %d", what, (int)err);
}

int serve_lz_fail(int status, const char *what) {
    return serve_fail(status, "%s: %s (%s)", what, lazyattn_status_string(status),
                      lazyattn_last_error());
}

const char *serve_last_error(void) { return serve_error_text; }

double serve_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double serve_thread_cpu_now(void) {
#ifdef CLOCK_THREAD_CPUTIME_ID
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#endif
    return 0.0;
}
