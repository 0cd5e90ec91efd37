/* SPDX-License-Identifier: Apache-2.0 */
/* Status codes, their messages, the per-thread error detail, version. */
#include "internal.h"

#include <string.h>

#define LZ_STR2(x) #x
#define LZ_STR(x) LZ_STR2(x)

const char *lazyattn_version_string(void) {
    return LZ_STR(LAZYATTN_VERSION_MAJOR) "." LZ_STR(LAZYATTN_VERSION_MINOR) "." LZ_STR(
        LAZYATTN_VERSION_PATCH);
}

const char *lazyattn_status_string(int status) {
    switch (status) {
#define LZ_X_CASE(name, value, message) \
    case value: return message;
        LAZYATTN_STATUS_LIST(LZ_X_CASE)
#undef LZ_X_CASE
    default: return "unknown status";
    }
}

static _Thread_local char lz_last_error[512];

const char *lazyattn_last_error(void) { return lz_last_error; }

int lz_fail(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lz_last_error, sizeof lz_last_error, fmt, ap);
    va_end(ap);
    return status;
}

const char *lz_cl_error_name(cl_int err) {
    switch (err) {
#define LZ_CL_CASE(e) \
    case e: return #e;
        LZ_CL_CASE(CL_SUCCESS)
        LZ_CL_CASE(CL_DEVICE_NOT_FOUND)
        LZ_CL_CASE(CL_DEVICE_NOT_AVAILABLE)
        LZ_CL_CASE(CL_COMPILER_NOT_AVAILABLE)
        LZ_CL_CASE(CL_MEM_OBJECT_ALLOCATION_FAILURE)
        LZ_CL_CASE(CL_OUT_OF_RESOURCES)
        LZ_CL_CASE(CL_OUT_OF_HOST_MEMORY)
        LZ_CL_CASE(CL_PROFILING_INFO_NOT_AVAILABLE)
        LZ_CL_CASE(CL_BUILD_PROGRAM_FAILURE)
        LZ_CL_CASE(CL_INVALID_VALUE)
        LZ_CL_CASE(CL_INVALID_DEVICE)
        LZ_CL_CASE(CL_INVALID_CONTEXT)
        LZ_CL_CASE(CL_INVALID_COMMAND_QUEUE)
        LZ_CL_CASE(CL_INVALID_MEM_OBJECT)
        LZ_CL_CASE(CL_INVALID_PROGRAM)
        LZ_CL_CASE(CL_INVALID_PROGRAM_EXECUTABLE)
        LZ_CL_CASE(CL_INVALID_KERNEL_NAME)
        LZ_CL_CASE(CL_INVALID_KERNEL)
        LZ_CL_CASE(CL_INVALID_ARG_INDEX)
        LZ_CL_CASE(CL_INVALID_ARG_VALUE)
        LZ_CL_CASE(CL_INVALID_ARG_SIZE)
        LZ_CL_CASE(CL_INVALID_KERNEL_ARGS)
        LZ_CL_CASE(CL_INVALID_WORK_DIMENSION)
        LZ_CL_CASE(CL_INVALID_WORK_GROUP_SIZE)
        LZ_CL_CASE(CL_INVALID_WORK_ITEM_SIZE)
        LZ_CL_CASE(CL_INVALID_GLOBAL_OFFSET)
        LZ_CL_CASE(CL_INVALID_EVENT_WAIT_LIST)
        LZ_CL_CASE(CL_INVALID_EVENT)
        LZ_CL_CASE(CL_INVALID_BUFFER_SIZE)
        LZ_CL_CASE(CL_INVALID_GLOBAL_WORK_SIZE)
        LZ_CL_CASE(CL_INVALID_OPERATION)
        LZ_CL_CASE(CL_INVALID_BUILD_OPTIONS)
#undef LZ_CL_CASE
    default: return "CL_UNKNOWN_ERROR";
    }
}

int lz_cl_fail(cl_int err, const char *what) {
    int status = LAZYATTN_STATUS_OPENCL;
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES)
        status = LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY;
    else if (err == CL_OUT_OF_HOST_MEMORY)
        status = LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
    else if (err == CL_BUILD_PROGRAM_FAILURE)
        status = LAZYATTN_STATUS_BUILD_FAILED;
    return lz_fail(status, "%s: %s (%d)", what, lz_cl_error_name(err), (int)err);
}

size_t lazyattn_dtype_size(lazyattn_dtype dtype) {
    switch (dtype) {
    case LAZYATTN_DTYPE_F32: return 4;
    case LAZYATTN_DTYPE_F16: return 2;
    case LAZYATTN_DTYPE_BF16: return 2;
    default: lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "unknown dtype %d", (int)dtype); return 0;
    }
}

int lz_live_for_destroy(uint32_t magic, uint32_t want, const char *fn, const char *kind) {
    if (magic == want) return 1;
    lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
            "%s: not a live %s (destroyed twice, or another kind of handle); left alone", fn,
            kind);
    lz_log(NULL, LAZYATTN_LOG_ERROR, "%s", lazyattn_last_error());
    return 0;
}
