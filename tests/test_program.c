/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Kernel programs from SPIR-V or source (lib/program.c, lib/program_il.c):
 * the format option and LAZYATTN_PROGRAM, the log line that names the
 * format of each program, strict IL where the device cannot take it, the
 * embedded variants against the library's own keys, and the kernels built
 * from SPIR-V against the same kernels built from source and the float64
 * reference (on a device that lists SPIR-V; elsewhere the strict IL request
 * must fail cleanly instead).
 */
#include "test_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "attn/tuning.h"
#include "kernel_cases.h"

/* The log of a context, kept for inspection. */
typedef struct log_capture {
    char text[16384];
    size_t used;
} log_capture;

static void capture(void *user, lazyattn_log_level level, const char *message) {
    log_capture *c = user;
    (void)level;
    int n = snprintf(c->text + c->used, sizeof c->text - c->used, "%s\n", message);
    if (n > 0 && c->used + (size_t)n < sizeof c->text) c->used += (size_t)n;
}

static lazyattn_context *make_context(lazyattn_program_format format, log_capture *log) {
    lazyattn_context_options o;
    lazyattn_context_options_init(&o);
    o.program = format;
    o.log = capture;
    o.log_user = log;
    lazyattn_context *ctx = NULL;
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_OK);
    return ctx;
}

static lazyattn_attention_config config_of(int head_dim, int block, lazyattn_dtype dtype) {
    lazyattn_attention_config c;
    lazyattn_attention_config_default(&c);
    /* group 4, as the precompiled set (tools/spirv_programs.c) */
    c.n_q_heads = 8, c.n_kv_heads = 2, c.head_dim = head_dim, c.block_size = block, c.dtype = dtype;
    return c;
}

/* Whether the context's device takes the embedded SPIR-V (1.0, spir64). */
static int device_takes_il(lazyattn_context *ctx) {
    cl_device_id dev = lazyattn_context_device(ctx);
    char il[512] = "";
    cl_uint bits = 0;
    clGetDeviceInfo(dev, CL_DEVICE_ADDRESS_BITS, sizeof bits, &bits, NULL);
    if (clGetDeviceInfo(dev, 0x105B /* CL_DEVICE_IL_VERSION */, sizeof il, il, NULL) != CL_SUCCESS)
        return 0;
    return bits == 64 && strstr(il, "SPIR-V_1.0") != NULL && lz_il_count() > 0;
}

static void test_bad_format_option(void **state) {
    (void)state;
    lazyattn_context_options o;
    lazyattn_context_options_init(&o);
    lazyattn_context *ctx = (lazyattn_context *)&o; /* must be reset to NULL */
    o.program = (lazyattn_program_format)7;
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(ctx);
    assert_non_null(strstr(lazyattn_last_error(), "program format 7"));
    o.program = (lazyattn_program_format)-1;
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_INVALID_ARGUMENT);

    lazyattn_context *base = NULL;
    lt_assert_status(lazyattn_context_create(NULL, &base), LAZYATTN_STATUS_OK);
    o.program = (lazyattn_program_format)4;
    lt_assert_status(lazyattn_context_create_from_cl(lazyattn_context_cl_context(base),
                                                     lazyattn_context_device(base),
                                                     lazyattn_context_queue(base), &o, &ctx),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(ctx);
    lazyattn_context_destroy(base);
}

static void test_bad_environment(void **state) {
    (void)state;
    log_capture log = {{0}, 0};
    lazyattn_context *ctx = make_context(LAZYATTN_PROGRAM_DEFAULT, &log);
    lazyattn_attention_config c = config_of(64, 16, LAZYATTN_DTYPE_F32);
    lazyattn_attention *attn = (lazyattn_attention *)&c;
    setenv("LAZYATTN_PROGRAM", "spir", 1);
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(attn);
    assert_non_null(strstr(lazyattn_last_error(), "LAZYATTN_PROGRAM=\"spir\""));
    /* the context option wins over the environment */
    lazyattn_context *forced = make_context(LAZYATTN_PROGRAM_SOURCE, &log);
    lt_assert_status(lazyattn_attention_create(forced, &c, &attn), LAZYATTN_STATUS_OK);
    lazyattn_attention_destroy(attn);
    lazyattn_context_destroy(forced);
    /* and "source" from the environment forces source */
    setenv("LAZYATTN_PROGRAM", "Source", 1);
    log.used = 0, log.text[0] = 0;
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
    assert_non_null(strstr(log.text, "OpenCL C source (source forced"));
    unsetenv("LAZYATTN_PROGRAM");
    lazyattn_attention_destroy(attn);
    lazyattn_context_destroy(ctx);
}

static void test_forced_source(void **state) {
    (void)state;
    log_capture log = {{0}, 0};
    lazyattn_context *ctx = make_context(LAZYATTN_PROGRAM_SOURCE, &log);
    lazyattn_attention_config c = config_of(128, 16, LAZYATTN_DTYPE_F16);
    lazyattn_attention *attn = NULL;
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
    assert_non_null(strstr(log.text, "-DLZ_HEAD_DIM=128 -DLZ_BLOCK=16 -DLZ_DTYPE=1 -DLZ_KV_TILED=0"));
    assert_non_null(strstr(log.text, "]: OpenCL C source (source forced"));
    assert_null(strstr(log.text, "SPIR-V IL"));
    lazyattn_attention_destroy(attn);
    /* the page layout is a build option of every program, like the storage type */
    c.kv_layout = LAZYATTN_KV_LAYOUT_TILED;
    log.used = 0, log.text[0] = 0;
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
    assert_non_null(strstr(log.text, "-DLZ_HEAD_DIM=128 -DLZ_BLOCK=16 -DLZ_DTYPE=1 -DLZ_KV_TILED=1"));
    assert_null(strstr(log.text, "-DLZ_KV_TILED=0"));
    lazyattn_attention_destroy(attn);
    lazyattn_context_destroy(ctx);
}

/* Strict IL: the supported configuration builds from SPIR-V where the
 * device lists it and fails cleanly where it does not; a configuration
 * outside the precompiled set fails on every device. */
static void test_strict_il(void **state) {
    (void)state;
    log_capture log = {{0}, 0};
    lazyattn_context *ctx = make_context(LAZYATTN_PROGRAM_IL, &log);
    const int il = device_takes_il(ctx);
    print_message("device %s: %s\n", lazyattn_context_device_name(ctx),
                  il ? "takes the embedded SPIR-V" : "takes no SPIR-V (or none embedded)");
    lazyattn_attention_config c = config_of(64, 32, LAZYATTN_DTYPE_BF16);
    lazyattn_attention *attn = (lazyattn_attention *)&c;
    if (il) {
        lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
        assert_non_null(strstr(log.text, "-DLZ_HEAD_DIM=64 -DLZ_BLOCK=32 -DLZ_DTYPE=2"));
        assert_non_null(strstr(log.text, "]: SPIR-V IL ("));
        lazyattn_attention_destroy(attn);
    } else {
        lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_UNSUPPORTED);
        assert_null(attn);
        assert_non_null(strstr(lazyattn_last_error(), "SPIR-V required"));
    }
    c = config_of(96, 7, LAZYATTN_DTYPE_F32);
    attn = (lazyattn_attention *)&c;
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_UNSUPPORTED);
    assert_null(attn);
    assert_non_null(strstr(lazyattn_last_error(),
                           il ? "no SPIR-V variant was built" : "SPIR-V required"));
    /* TILED pages are outside the precompiled set (ROWS only): a supported
     * shape in TILED never takes a ROWS variant */
    c = config_of(64, 32, LAZYATTN_DTYPE_BF16);
    c.kv_layout = LAZYATTN_KV_LAYOUT_TILED;
    attn = (lazyattn_attention *)&c;
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_UNSUPPORTED);
    assert_null(attn);
    assert_non_null(strstr(lazyattn_last_error(),
                           il ? "no SPIR-V variant was built" : "SPIR-V required"));
    lazyattn_context_destroy(ctx);
}

/* Every configuration of the supported set (tools/spirv_programs.c) has a
 * variant under the key the library forms at run time, for each of the
 * Intel CPU runtime's profiles (its limits, with and without its tuning
 * database row), and each variant is SPIR-V. */
static void test_embedded_variants(void **state) {
    (void)state;
    if (lz_il_count() == 0) {
        print_message("built without clang + llvm-spirv: no SPIR-V embedded\n");
        skip();
    }
    const lz_device_limits profiles[] = {
        {NULL, 262144, 8192},
        {"Intel(R) OpenCL / Intel(R) Xeon(R) Processor", 262144, 8192},
    };
    const int dims[] = {64, 128}, blocks[] = {16, 32};
    char *seen[256];
    int found = 0;
    for (int d = 0; d < 2; d++)
        for (int b = 0; b < 2; b++)
            for (int t = 0; t < 3; t++)
                for (int p = 0; p < 2; p++)
                    for (int which = 0; which < LZ_PORTABLE_PROGRAMS; which++) {
                        lazyattn_attention_config c = config_of(dims[d], blocks[b], (lazyattn_dtype)t);
                        lazyattn_kernel_tuning tune;
                        lt_assert_status(lz_tuning_choose_for(&profiles[p], &c, NULL, &tune),
                                         LAZYATTN_STATUS_OK);
                        lz_program_spec spec;
                        lt_assert_status(lz_portable_program(&c, &tune, which, &spec), LAZYATTN_STATUS_OK);
                        char *key = lz_program_key(spec.sources, spec.n_sources, spec.options);
                        assert_non_null(key);
                        const lz_il_program *il = lz_il_find(key);
                        if (!il) print_error("no variant for [%s]\n", key);
                        assert_non_null(il);
                        assert_true(il->size > 20 && il->size % 4 == 0);
                        assert_int_equal(il->il[0] | il->il[1] << 8 | il->il[2] << 16 |
                                             (unsigned)il->il[3] << 24,
                                         0x07230203u);
                        int again = 0;
                        for (int i = 0; i < found && !again; i++) again = !strcmp(seen[i], key);
                        if (again) {
                            free(key);
                        } else {
                            assert_true(found < 256);
                            seen[found++] = key;
                        }
                    }
    assert_int_equal(found, lz_il_count()); /* no variant without a configuration */
    /* and none of TILED pages: their options (-DLZ_KV_TILED=1) key no variant */
    lazyattn_attention_config tc = config_of(64, 16, LAZYATTN_DTYPE_F16);
    tc.kv_layout = LAZYATTN_KV_LAYOUT_TILED;
    lazyattn_kernel_tuning tt;
    lt_assert_status(lz_tuning_choose_for(&profiles[0], &tc, NULL, &tt), LAZYATTN_STATUS_OK);
    for (int which = 0; which < LZ_PORTABLE_PROGRAMS; which++) {
        lz_program_spec spec;
        lt_assert_status(lz_portable_program(&tc, &tt, which, &spec), LAZYATTN_STATUS_OK);
        assert_non_null(strstr(spec.options, "-DLZ_KV_TILED=1"));
        char *key = lz_program_key(spec.sources, spec.n_sources, spec.options);
        assert_non_null(key);
        assert_null(lz_il_find(key));
        free(key);
    }
    for (int i = 0; i < found; i++) free(seen[i]);
    assert_null(lz_il_find("block_entry+|-DLZ_HEAD_DIM=64"));
}

static void test_il_build_options(void **state) {
    (void)state;
    char out[64];
    lz_il_build_options("-cl-std=CL1.2 -DLZ_HEAD_DIM=64 -D X -I/inc -cl-mad-enable -UY -w", out,
                        sizeof out);
    assert_string_equal(out, "-cl-mad-enable -w");
    lz_il_build_options("", out, sizeof out);
    assert_string_equal(out, "");
    char tiny[8];
    lz_il_build_options("-cl-fast-relaxed-math -w", tiny, sizeof tiny); /* too long: dropped */
    assert_string_equal(tiny, "-w");
}

/* The kernels from SPIR-V and from source on the same device, on the same
 * small case (every kernel, GQA 2, ragged documents, 3 decode splits):
 * both against the float64 reference, and against each other. */
static void test_il_matches_source(void **state) {
    (void)state;
    log_capture il_log = {{0}, 0}, src_log = {{0}, 0};
    lazyattn_context *il_ctx = make_context(LAZYATTN_PROGRAM_IL, &il_log);
    lazyattn_context *src_ctx = make_context(LAZYATTN_PROGRAM_SOURCE, &src_log);
    const lazyattn_dtype dtypes[] = {LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F16, LAZYATTN_DTYPE_BF16};
    const int il = device_takes_il(il_ctx);
    for (int t = 0; t < 3; t++) {
        lk_case c = {"il-vs-source", 64, 16, dtypes[t], 8, 2, 2, {21, 38}, 9, 3, 0, 0, 0}; /* group 4 */
        lk_result a, b;
        lk_quiet = !il; /* the strict IL request is expected to fail there */
        int st = lk_run(il_ctx, &c, &a);
        lk_quiet = 0;
        if (!il) {
            /* strict IL on a device without SPIR-V: refused, nothing built */
            assert_int_equal(st, LAZYATTN_STATUS_UNSUPPORTED);
            continue;
        }
        lt_assert_status(st, LAZYATTN_STATUS_OK);
        lt_assert_status(lk_run(src_ctx, &c, &b), LAZYATTN_STATUS_OK);
        double tol = lk_tolerance(c.dtype), diff = 0;
        for (size_t i = 0; i < a.n_outputs; i++) {
            double d = a.outputs[i] - b.outputs[i];
            if (d < 0) d = -d;
            if (d > diff) diff = d;
        }
        print_message("dtype %d: IL prefill %.2e decode %.2e materialised %.2e rope %.2e; "
                      "source prefill %.2e decode %.2e; max |IL - source| %.2e\n",
                      (int)c.dtype, a.prefill, a.decode, a.materialised, a.rope, b.prefill,
                      b.decode, diff);
        assert_true(a.prefill < tol && a.decode < tol && a.materialised < tol && a.rope < 2e-6);
        assert_true(b.prefill < tol && b.decode < tol && b.materialised < tol && b.rope < 2e-6);
        assert_true(a.batched < tol && b.batched < tol);
        print_message("lse error IL %.2e source %.2e; f16 out IL %.2e source %.2e\n", a.lse, b.lse,
                      a.half_out, b.half_out);
        assert_true(a.lse < 10 * tol && b.lse < 10 * tol);
        assert_true(a.half_out < tol + 1e-3 && b.half_out < tol + 1e-3);
        assert_true(diff < 1e-4);
        free(a.outputs);
        free(b.outputs);
    }
    if (il) {
        assert_non_null(strstr(il_log.text, "SPIR-V IL"));
        assert_null(strstr(il_log.text, "OpenCL C source"));
        assert_null(strstr(src_log.text, "SPIR-V IL"));
    }
    lazyattn_context_destroy(il_ctx);
    lazyattn_context_destroy(src_ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_format_option), cmocka_unit_test(test_bad_environment),
        cmocka_unit_test(test_forced_source),     cmocka_unit_test(test_strict_il),
        cmocka_unit_test(test_embedded_variants), cmocka_unit_test(test_il_build_options),
        cmocka_unit_test(test_il_matches_source),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
