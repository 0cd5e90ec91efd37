/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The on-disk cache of program binaries (lazyattn_context_options
 * .program_cache, lib/device/binary_cache.c): a program built by one
 * context is loaded by the next from its file, and computes what a fresh
 * build computes; a damaged, truncated or foreign file is noticed, rebuilt
 * and replaced; a directory that cannot be used leaves the cache off, with
 * a warning, and never fails a build; a path too long is refused.
 */
#include "test_common.h"
#include "kernel_cases.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What the log callback saw: loads from the cache and warnings. */
typedef struct seen {
    int loads, writes, warns;
    char last_warn[512];
} seen;

static void on_log(void *user, lazyattn_log_level level, const char *msg) {
    seen *s = user;
    if (strstr(msg, "program cache: [") && strstr(msg, "] from ")) s->loads++;
    if (strstr(msg, "program cache: wrote ")) s->writes++;
    if (level == LAZYATTN_LOG_WARN && strstr(msg, "program cache")) {
        s->warns++;
        snprintf(s->last_warn, sizeof s->last_warn, "%s", msg);
    }
}

static lazyattn_context *open_ctx(const char *dir, seen *s) {
    memset(s, 0, sizeof *s);
    lazyattn_context_options o;
    lazyattn_context_options_init(&o);
    o.program_cache = dir;
    o.log = on_log;
    o.log_user = s;
    lazyattn_context *ctx = NULL;
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_OK);
    return ctx;
}

/* A fresh directory under TMPDIR (removed by rm_dir). */
static void make_dir(char *out, size_t n) {
    const char *tmp = getenv("TMPDIR");
    snprintf(out, n, "%s/lazyattn-binary-cache-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(out));
}

/* The .bin files of dir: how many, and the path of the first (if any). */
static int bin_files(const char *dir, char *first, size_t n) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".bin") == 0) {
            if (count++ == 0 && first) snprintf(first, n, "%s/%s", dir, e->d_name);
        } else if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            fail_msg("stray file %s in the cache (a temporary left behind?)", e->d_name);
        }
    }
    closedir(d);
    return count;
}

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        remove(path);
    }
    closedir(d);
    rmdir(dir);
}

/* y[i] = x[i] * a + i, through lazyattn_context_build_program. */
static const char *const source =
    "__kernel void axpi(__global const float *x, __global float *y, float a) {\n"
    "    int i = get_global_id(0);\n"
    "    y[i] = x[i] * a + (float)i;\n"
    "}\n";

/* Builds the test kernel on ctx and checks its output against the host. */
static void run_axpi(lazyattn_context *ctx) {
    cl_program p = NULL;
    lt_assert_status(lazyattn_context_build_program(ctx, source, "-cl-std=CL1.2", 0, &p),
                     LAZYATTN_STATUS_OK);
    cl_int err;
    cl_kernel k = clCreateKernel(p, "axpi", &err);
    assert_int_equal(err, CL_SUCCESS);
    enum { N = 256 };
    float x[N], y[N];
    lt_rng r = {lt_seed()};
    lt_fill(&r, x, N, 2.0f);
    cl_mem bx = lt_buffer(ctx, x, sizeof x), by = lt_buffer(ctx, x, sizeof x);
    assert_non_null(bx);
    assert_non_null(by);
    float a = 1.5f;
    assert_int_equal(clSetKernelArg(k, 0, sizeof bx, &bx), CL_SUCCESS);
    assert_int_equal(clSetKernelArg(k, 1, sizeof by, &by), CL_SUCCESS);
    assert_int_equal(clSetKernelArg(k, 2, sizeof a, &a), CL_SUCCESS);
    size_t global = N;
    assert_int_equal(clEnqueueNDRangeKernel(lazyattn_context_queue(ctx), k, 1, NULL, &global, NULL,
                                            0, NULL, NULL),
                     CL_SUCCESS);
    lt_read(ctx, by, y, sizeof y);
    for (int i = 0; i < N; i++) assert_float_equal(y[i], x[i] * a + (float)i, 1e-5f * (1 + i));
    clReleaseMemObject(bx);
    clReleaseMemObject(by);
    clReleaseKernel(k);
    clReleaseProgram(p);
}

/* The first context compiles and writes one file; the second loads it. */
static void test_written_then_loaded(void **state) {
    (void)state;
    char dir[256];
    make_dir(dir, sizeof dir);
    seen s1, s2;
    lazyattn_context *a = open_ctx(dir, &s1);
    run_axpi(a);
    assert_int_equal(s1.loads, 0);
    assert_int_equal(s1.writes, 1);
    assert_int_equal(bin_files(dir, NULL, 0), 1);
    lazyattn_context *b = open_ctx(dir, &s2);
    run_axpi(b);
    assert_int_equal(s2.loads, 1);
    assert_int_equal(s2.writes, 0);
    assert_int_equal(s2.warns, 0);
    assert_int_equal(bin_files(dir, NULL, 0), 1);
    lazyattn_context_destroy(a);
    lazyattn_context_destroy(b);
    rm_dir(dir);
}

/* Replaces byte `at` of file (from its end when at < 0) or cuts it to `keep` bytes. */
static void damage(const char *path, long at, long keep) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    if (keep >= 0) {
        fclose(f);
        assert_int_equal(truncate(path, keep), 0);
        return;
    }
    assert_int_equal(fseek(f, at, at < 0 ? SEEK_END : SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_not_equal(c, EOF);
    assert_int_equal(fseek(f, -1, SEEK_CUR), 0);
    fputc(c ^ 0x5A, f);
    fclose(f);
}

/* A flipped byte in the binary, a cut file, a foreign header: each said in
 * the log, rebuilt, replaced, and the results still right; the next context
 * loads the replacement. */
static void test_damaged_file_rebuilt(void **state) {
    (void)state;
    static const struct {
        long at, keep;
        const char *why;
    } cases[] = {{-1, -1, "checksum"}, {-1, 40, "shorter or longer"}, {0, -1, "not a program cache"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[256], file[512];
        make_dir(dir, sizeof dir);
        seen s;
        lazyattn_context *a = open_ctx(dir, &s);
        run_axpi(a);
        lazyattn_context_destroy(a);
        assert_int_equal(bin_files(dir, file, sizeof file), 1);
        damage(file, cases[i].at, cases[i].keep);
        lazyattn_context *b = open_ctx(dir, &s);
        run_axpi(b);
        lazyattn_context_destroy(b);
        assert_int_equal(s.loads, 0);
        assert_int_equal(s.writes, 1);
        assert_int_equal(s.warns, 1);
        if (!strstr(s.last_warn, cases[i].why))
            fail_msg("case %zu: warning \"%s\" does not say \"%s\"", i, s.last_warn, cases[i].why);
        lazyattn_context *c = open_ctx(dir, &s);
        run_axpi(c);
        lazyattn_context_destroy(c);
        assert_int_equal(s.loads, 1);
        assert_int_equal(s.warns, 0);
        rm_dir(dir);
    }
}

/* A path that names a file, not a directory: the cache is off (a warning),
 * builds go on. A directory name too long: INVALID_ARGUMENT, no context. */
static void test_unusable_directory(void **state) {
    (void)state;
    char dir[256], file[300];
    make_dir(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/plain-file", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("not a directory\n", f);
    fclose(f);
    seen s;
    lazyattn_context *a = open_ctx(file, &s);
    assert_int_equal(s.warns, 1);
    assert_non_null(strstr(s.last_warn, "not a directory"));
    run_axpi(a);
    assert_int_equal(s.writes + s.loads, 0);
    lazyattn_context_destroy(a);
    remove(file);
    rm_dir(dir);

    char longdir[1200];
    memset(longdir, 'a', sizeof longdir - 1);
    longdir[0] = '/';
    longdir[sizeof longdir - 1] = 0;
    lazyattn_context_options o;
    lazyattn_context_options_init(&o);
    o.program_cache = longdir;
    lazyattn_context *ctx = (lazyattn_context *)&o; /* must come back NULL */
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(ctx);
    assert_non_null(strstr(lazyattn_last_error(), "program cache directory"));
}

/* The library's own kernels: a context with the cache runs the attention
 * cases from loaded binaries, within the reference's tolerance and bit for
 * bit what a context without the cache computes. */
static void test_attention_from_cache(void **state) {
    (void)state;
    static const lk_case cs = {.name = "cache", .head_dim = 64, .block_size = 16,
                               .dtype = LAZYATTN_DTYPE_F32, .n_q_heads = 4, .n_kv_heads = 2,
                               .n_docs = 2, .doc_len = {37, 21}, .n_question = 9, .n_splits = 3};
    char dir[256];
    make_dir(dir, sizeof dir);
    lk_result plain = {0}, cold = {0}, warm = {0};
    lazyattn_context_options o;
    lazyattn_context_options_init(&o);
    o.program_cache = ""; /* none, whatever LAZYATTN_PROGRAM_CACHE says */
    lazyattn_context *ctx = NULL;
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_OK);
    lt_assert_status(lk_run(ctx, &cs, &plain), LAZYATTN_STATUS_OK);
    lazyattn_context_destroy(ctx);
    seen s1, s2;
    ctx = open_ctx(dir, &s1);
    lt_assert_status(lk_run(ctx, &cs, &cold), LAZYATTN_STATUS_OK);
    lazyattn_context_destroy(ctx);
    int files = bin_files(dir, NULL, 0);
    assert_true(files >= 2); /* the prefill and decode programs, at least */
    assert_int_equal(s1.writes, files);
    ctx = open_ctx(dir, &s2);
    lt_assert_status(lk_run(ctx, &cs, &warm), LAZYATTN_STATUS_OK);
    lazyattn_context_destroy(ctx);
    assert_int_equal(s2.loads, files);
    assert_int_equal(s2.writes, 0);
    const lk_result *rs[3] = {&plain, &cold, &warm};
    for (int i = 0; i < 3; i++) {
        assert_true(rs[i]->prefill < 2e-5 && rs[i]->decode < 2e-5 && rs[i]->materialised < 2e-5);
        assert_non_null(rs[i]->outputs);
        assert_int_equal(rs[i]->n_outputs, plain.n_outputs);
        assert_memory_equal(rs[i]->outputs, plain.outputs, plain.n_outputs * sizeof(float));
    }
    for (int i = 0; i < 3; i++) free(rs[i]->outputs);
    rm_dir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_written_then_loaded),
        cmocka_unit_test(test_damaged_file_rebuilt),
        cmocka_unit_test(test_unusable_directory),
        cmocka_unit_test(test_attention_from_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
