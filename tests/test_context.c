/* SPDX-License-Identifier: Apache-2.0 */
/* Context: device choice by option and environment, logging, wrapping an
 * engine's OpenCL objects, status strings, version, bad input. */
#include "test_common.h"

#include <stdlib.h>
#include <string.h>

#include "internal.h"

static void test_status_strings_and_version(void **state) {
    (void)state;
    assert_string_equal(lazyattn_status_string(LAZYATTN_STATUS_OK), "success");
    assert_string_equal(lazyattn_status_string(LAZYATTN_STATUS_BUDGET_EXCEEDED), "KV byte budget exceeded");
    assert_string_equal(lazyattn_status_string(12345), "unknown status");
    /* every status has its own message */
    const int all[] = {
#define X(name, value, message) value,
        LAZYATTN_STATUS_LIST(X)
#undef X
    };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(lazyattn_status_string(all[i]), lazyattn_status_string(all[j]));
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", LAZYATTN_VERSION_MAJOR, LAZYATTN_VERSION_MINOR,
             LAZYATTN_VERSION_PATCH);
    assert_string_equal(lazyattn_version_string(), want);
    assert_int_equal(lazyattn_dtype_size(LAZYATTN_DTYPE_F16), 2);
    assert_int_equal(lazyattn_dtype_size((lazyattn_dtype)5), 0);
}

typedef struct log_record {
    int n_info;
    int n_error;
} log_record;

static void record_log(void *user, lazyattn_log_level level, const char *message) {
    log_record *r = user;
    (void)message;
    if (level == LAZYATTN_LOG_INFO) r->n_info++;
    if (level == LAZYATTN_LOG_ERROR) r->n_error++;
}

static void test_device_choice(void **state) {
    (void)state;
    lazyattn_context *ctx = NULL;
    lazyattn_context_options o;
    lazyattn_context_options_init(&o);
    log_record rec = {0, 0};
    o.log = record_log;
    o.log_user = &rec;
    o.kind = LAZYATTN_DEVICE_ANY;
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_OK);
    assert_true(rec.n_info >= 1);
    assert_non_null(lazyattn_context_cl_context(ctx));
    assert_non_null(lazyattn_context_queue(ctx));
    assert_non_null(lazyattn_context_device(ctx));
    assert_true(strlen(lazyattn_context_device_name(ctx)) > 3);
    lazyattn_context_destroy(ctx);

    /* a device name nobody has */
    o.device = "no-such-device-xyz";
    ctx = (lazyattn_context *)0x1;
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_NO_DEVICE);
    assert_null(ctx);
    assert_non_null(strstr(lazyattn_last_error(), "no-such-device-xyz"));

    /* the environment names the device when the options do not */
    setenv("LAZYATTN_DEVICE", "no-such-device-env", 1);
    lt_assert_status(lazyattn_context_create(NULL, &ctx), LAZYATTN_STATUS_NO_DEVICE);
    o.device = NULL;
    o.platform = "no-such-platform";
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_NO_DEVICE);
    unsetenv("LAZYATTN_DEVICE");

    /* LAZYATTN_PORTABLE forces the portable path */
    setenv("LAZYATTN_PORTABLE", "1", 1);
    lt_assert_status(lazyattn_context_create(NULL, &ctx), LAZYATTN_STATUS_OK);
    assert_int_equal(lazyattn_context_fast_path(ctx), 0);
    lazyattn_context_destroy(ctx);
    unsetenv("LAZYATTN_PORTABLE");

    o.platform = NULL;
    o.kind = (lazyattn_device_kind)42;
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_context_create(NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_context_destroy(NULL);
    assert_null(lazyattn_context_queue(NULL));
}

/* Devices listed by global index, chosen by index through the options and
 * the environment; digits alone in LAZYATTN_DEVICE are an index, never a
 * name substring. */
static void test_device_index(void **state) {
    (void)state;
    int count = -1;
    lt_assert_status(lazyattn_device_count(&count), LAZYATTN_STATUS_OK);
    assert_true(count >= 1);
    lazyattn_device_info info;
    for (int i = 0; i < count; i++) {
        lt_assert_status(lazyattn_device_get_info(i, &info), LAZYATTN_STATUS_OK);
        print_message("device #%d: %s / %s (%s), %s, %.1f GiB, %d units\n", info.index,
                      info.platform, info.name, info.vendor,
                      info.kind == LAZYATTN_DEVICE_GPU   ? "GPU"
                      : info.kind == LAZYATTN_DEVICE_CPU ? "CPU"
                                                         : "other",
                      info.global_memory / 1073741824.0, info.compute_units);
        assert_int_equal(info.index, i);
        assert_true(info.platform_index >= 0);
        assert_true(strlen(info.name) > 0 && strlen(info.platform) > 0);
        assert_true(info.global_memory > 0 && info.compute_units >= 1);
        /* Chosen by index: that device, whatever the kind asks. */
        lazyattn_context_options o;
        lazyattn_context_options_init(&o);
        assert_int_equal(o.device_index, -1);
        o.device_index = i;
        lazyattn_context *ctx = NULL;
        lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_OK);
        char want[300];
        snprintf(want, sizeof want, "%s / %s", info.platform, info.name);
        assert_string_equal(lazyattn_context_device_name(ctx), want);
        char name[128] = "";
        clGetDeviceInfo(lazyattn_context_device(ctx), CL_DEVICE_NAME, sizeof name, name, NULL);
        assert_string_equal(name, info.name);
        lazyattn_context_destroy(ctx);
    }
    lt_assert_status(lazyattn_device_get_info(count, &info), LAZYATTN_STATUS_NO_DEVICE);
    lt_assert_status(lazyattn_device_get_info(-1, &info), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_device_get_info(0, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_device_count(NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_device_get_info(0, &info), LAZYATTN_STATUS_OK);

    lazyattn_context_options o;
    lazyattn_context_options_init(&o);
    lazyattn_context *ctx = (lazyattn_context *)0x1;
    o.device_index = count;
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_NO_DEVICE);
    assert_null(ctx);
    assert_non_null(strstr(lazyattn_last_error(), "there are"));
    o.device_index = -2;
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_INVALID_ARGUMENT);
    o.device_index = -1;
    o.device = "#0";
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_OK);
    lazyattn_context_destroy(ctx);
    o.device = "#zero";
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_INVALID_ARGUMENT);

    /* The environment. */
    char idx[16];
    snprintf(idx, sizeof idx, "%d", count);
    setenv("LAZYATTN_DEVICE", idx, 1); /* one past the last: an index, so no device */
    lt_assert_status(lazyattn_context_create(NULL, &ctx), LAZYATTN_STATUS_NO_DEVICE);
    setenv("LAZYATTN_DEVICE", "1", 1); /* "1" is device #1, never a name ("avx512") */
    lt_assert_status(lazyattn_context_create(NULL, &ctx),
                     count > 1 ? LAZYATTN_STATUS_OK : LAZYATTN_STATUS_NO_DEVICE);
    lazyattn_context_destroy(ctx);
    ctx = NULL;
    setenv("LAZYATTN_DEVICE", "#0", 1);
    lt_assert_status(lazyattn_context_create(NULL, &ctx), LAZYATTN_STATUS_OK);
    lazyattn_context_destroy(ctx);
    setenv("LAZYATTN_DEVICE", "#", 1);
    lt_assert_status(lazyattn_context_create(NULL, &ctx), LAZYATTN_STATUS_INVALID_ARGUMENT);
    char part[5] = "";
    memcpy(part, info.name, 4); /* a name substring still works */
    setenv("LAZYATTN_DEVICE", part, 1);
    lt_assert_status(lazyattn_context_create(NULL, &ctx), LAZYATTN_STATUS_OK);
    lazyattn_context_destroy(ctx);
    unsetenv("LAZYATTN_DEVICE");
    setenv("LAZYATTN_DEVICE_INDEX", "0", 1);
    lt_assert_status(lazyattn_context_create(NULL, &ctx), LAZYATTN_STATUS_OK);
    lazyattn_context_destroy(ctx);
    setenv("LAZYATTN_DEVICE_INDEX", idx, 1);
    lt_assert_status(lazyattn_context_create(NULL, &ctx), LAZYATTN_STATUS_NO_DEVICE);
    setenv("LAZYATTN_DEVICE_INDEX", "gpu", 1);
    lt_assert_status(lazyattn_context_create(NULL, &ctx), LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* The options win over the environment. */
    o.device = NULL;
    o.device_index = 0;
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_OK);
    lazyattn_context_destroy(ctx);
    unsetenv("LAZYATTN_DEVICE_INDEX");
}

/* An engine hands its own context/queue in; destroy releases only our
 * references. */
static void test_wrap_engine_objects(void **state) {
    lazyattn_context *mine = *state, *wrapped = NULL;
    cl_context c = lazyattn_context_cl_context(mine);
    cl_device_id d = lazyattn_context_device(mine);
    cl_command_queue q = lazyattn_context_queue(mine);
    lt_assert_status(lazyattn_context_create_from_cl(c, d, q, NULL, &wrapped), LAZYATTN_STATUS_OK);
    assert_ptr_equal(lazyattn_context_queue(wrapped), q);
    lazyattn_context_destroy(wrapped);
    /* still usable after the wrapper is gone */
    cl_uint refs = 0;
    assert_int_equal(clGetCommandQueueInfo(q, CL_QUEUE_REFERENCE_COUNT, sizeof refs, &refs, NULL), CL_SUCCESS);
    assert_true(refs >= 1);
    lt_assert_status(lazyattn_context_create_from_cl(NULL, d, q, NULL, &wrapped), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(wrapped);
    lt_assert_status(lazyattn_context_create_from_cl(c, d, q, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
}

/* Programs are built once per (sources, options); a broken build is
 * reported with its log, not crashed on. */
static void test_program_cache_and_build_errors(void **state) {
    lazyattn_context *ctx = *state;
    const char *names[] = {"block_entry", "kernel_abi", "storage", "rope", "rope_apply"};
    cl_program a, b, c;
    lt_assert_status(lz_program_get(ctx, names, 4, "-DLZ_HEAD_DIM=64", &a), LAZYATTN_STATUS_OK);
    lt_assert_status(lz_program_get(ctx, names, 4, "-DLZ_HEAD_DIM=64", &b), LAZYATTN_STATUS_OK);
    assert_ptr_equal(a, b);
    lt_assert_status(lz_program_get(ctx, names, 4, "-DLZ_HEAD_DIM=32", &c), LAZYATTN_STATUS_OK);
    assert_ptr_not_equal(a, c);
    lt_assert_status(lz_program_get(ctx, names, 4, "-DLZ_DTYPE=7", &c), LAZYATTN_STATUS_BUILD_FAILED);
    const char *missing[] = {"no_such_source"};
    lt_assert_status(lz_program_get(ctx, missing, 1, "", &c), LAZYATTN_STATUS_NOT_FOUND);
    /* every embedded source starts with a #line naming its file */
    assert_non_null(strstr(lz_source_text("prefill"), "#line 1 \"cl/prefill.cl\""));
}

/* lazyattn_context_build_program: a caller's own kernel built and run (the
 * doubled values checked), its bad arguments refused with clear statuses,
 * and the sm_90a round trip refused where the device is not Hopper (PoCL). */
static void test_build_program(void **state) {
    lazyattn_context *ctx = *state;
    static const char *src = "__kernel void twice(__global float *v, float s) {\n"
                             "  const size_t i = get_global_id(0); v[i] = TWICE * v[i] + s; }\n";
    cl_program p = (cl_program)&p;
    lt_assert_status(lazyattn_context_build_program(ctx, src, "-DTWICE=2.0f", 0, &p), LAZYATTN_STATUS_OK);
    assert_non_null(p);
    cl_int err;
    cl_kernel k = clCreateKernel(p, "twice", &err);
    assert_int_equal(err, CL_SUCCESS);
    float v[64], got[64];
    srand(11);
    for (int i = 0; i < 64; i++) v[i] = (float)rand() / RAND_MAX * 2.0f - 1.0f;
    cl_mem m = lt_buffer(ctx, v, sizeof v);
    assert_non_null(m);
    const float s = 0.25f;
    assert_int_equal(clSetKernelArg(k, 0, sizeof m, &m), CL_SUCCESS);
    assert_int_equal(clSetKernelArg(k, 1, sizeof s, &s), CL_SUCCESS);
    size_t g = 64;
    cl_command_queue q = lazyattn_context_queue(ctx);
    assert_int_equal(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL), CL_SUCCESS);
    assert_int_equal(clEnqueueReadBuffer(q, m, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL), CL_SUCCESS);
    for (int i = 0; i < 64; i++) assert_float_equal(got[i], (double)v[i] * 2.0 + 0.25, 1e-6);
    clReleaseMemObject(m);
    clReleaseKernel(k);
    clReleaseProgram(p);

    p = (cl_program)&p;
    lt_assert_status(lazyattn_context_build_program(ctx, "__kernel void broken( {", NULL, 0, &p),
                     LAZYATTN_STATUS_BUILD_FAILED);
    assert_null(p);
    assert_non_null(strstr(lazyattn_last_error(), "lazyattn_context_build_program"));
    p = (cl_program)&p;
    lt_assert_status(lazyattn_context_build_program(NULL, src, NULL, 0, &p), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(p);
    lt_assert_status(lazyattn_context_build_program(ctx, NULL, NULL, 0, &p), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_context_build_program(ctx, src, NULL, 0, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_context_build_program(ctx, src, NULL, 6u, &p), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(p);
    /* -cl-nv-* options past the round trip's 510 characters: refused on
     * every device (checked before the device), never cut silently */
    char many[1600] = "-DTWICE=2.0f";
    for (int i = 0; i < 60; i++) strcat(many, "\t-cl-nv-maxrregcount=128");
    p = (cl_program)&p;
    lt_assert_status(lazyattn_context_build_program(ctx, src, many, LAZYATTN_BUILD_SM90A, &p),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(p);
    assert_non_null(strstr(lazyattn_last_error(), "-cl-nv-"));
    int st = lazyattn_context_build_program(ctx, src, "-DTWICE=2.0f", LAZYATTN_BUILD_SM90A, &p);
    if (!lazyattn_context_fast_path(ctx)) {
        lt_assert_status(st, LAZYATTN_STATUS_UNSUPPORTED);
        assert_null(p);
    } else if (st == LAZYATTN_STATUS_OK) {
        clReleaseProgram(p); /* not reached: a source without markers is refused */
        fail_msg("a program without //@ markers went through the round trip");
    } else {
        assert_null(p); /* NVIDIA: not Hopper, or no markers in this source */
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_strings_and_version),
        cmocka_unit_test(test_device_choice),
        cmocka_unit_test(test_device_index),
        cmocka_unit_test(test_wrap_engine_objects),
        cmocka_unit_test(test_program_cache_and_build_errors),
        cmocka_unit_test(test_build_program),
    };
    return cmocka_run_group_tests_name("context", tests, lt_context_setup, lt_context_teardown);
}
