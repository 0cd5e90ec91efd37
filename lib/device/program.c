/* SPDX-License-Identifier: Apache-2.0 */
/* Builds OpenCL programs from the embedded cl/ sources, or from their
 * SPIR-V precompiled at build time (program_il.c), once per (context,
 * sources, options), and hands build logs to the log callback. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Generated at build time by tools/cl2c.py. */
extern const lz_source lz_embedded_sources[];
extern const int lz_n_embedded_sources;

const char *lz_source_text(const char *name) {
    for (int i = 0; i < lz_n_embedded_sources; i++)
        if (strcmp(lz_embedded_sources[i].name, name) == 0) return lz_embedded_sources[i].text;
    return NULL;
}

char *lz_program_key(const char *const *names, int n, const char *options) {
    size_t len = strlen(options) + 2;
    for (int i = 0; i < n; i++) len += strlen(names[i]) + 1;
    char *key = malloc(len);
    if (!key) return NULL;
    key[0] = 0;
    for (int i = 0; i < n; i++) {
        strcat(key, names[i]);
        strcat(key, "+");
    }
    strcat(key, "|");
    strcat(key, options);
    return key;
}

void lz_log_build(lazyattn_context *ctx, cl_program program, lazyattn_log_level level, const char *key) {
    size_t size = 0;
    if (clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) !=
            CL_SUCCESS ||
        size <= 1)
        return;
    char *log = malloc(size + 1);
    if (!log) return;
    if (clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, size, log, NULL) ==
        CL_SUCCESS) {
        log[size] = 0;
        /* lz_log truncates; long logs go out in pieces. */
        for (size_t off = 0; off < size && log[off]; off += 480)
            lz_log(ctx, level, "build log [%s]%s: %.480s", key, off ? " (cont.)" : "", log + off);
    }
    free(log);
}

/* The cached program of this key, or NULL. Threads share a context: the
 * cache is read and changed only under ctx->programs_lock; builds run
 * outside it. */
static cl_program lz_program_lookup(lazyattn_context *ctx, const char *key) {
    cl_program found = NULL;
    lz_mutex_lock(&ctx->programs_lock);
    for (lz_program_entry *e = ctx->programs; e && !found; e = e->next)
        if (strcmp(e->key, key) == 0) found = e->program;
    lz_mutex_unlock(&ctx->programs_lock);
    return found;
}

/* Caches entry e (key and program owned by it) and returns its program; when
 * another thread cached the same key meanwhile, frees e and returns that one. */
static cl_program lz_program_insert(lazyattn_context *ctx, lz_program_entry *e) {
    cl_program found = NULL;
    lz_mutex_lock(&ctx->programs_lock);
    for (lz_program_entry *o = ctx->programs; o && !found; o = o->next)
        if (strcmp(o->key, e->key) == 0) found = o->program;
    if (!found) {
        e->next = ctx->programs;
        ctx->programs = e;
    }
    lz_mutex_unlock(&ctx->programs_lock);
    if (!found) return e->program;
    clReleaseProgram(e->program);
    free(e->key);
    free(e);
    return found;
}

/* Builds a program from its OpenCL C source. */
static int lz_build_source(lazyattn_context *ctx, const char *const *names, int n,
                           const char *options, const char *key, cl_program *out) {
    *out = NULL;
    const char *texts[16];
    if (n > 16) return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "too many program sources");
    for (int i = 0; i < n; i++) {
        texts[i] = lz_source_text(names[i]);
        if (!texts[i])
            return lz_fail(LAZYATTN_STATUS_NOT_FOUND, "no embedded kernel source \"%s\"", names[i]);
    }
    char path[LZ_BINARY_CACHE_PATH];
    const int cached = lz_binary_cache_path(ctx, "src", texts, NULL, n, options, path, sizeof path);
    if (cached && lz_binary_cache_load(ctx, path, options, key, out)) return LAZYATTN_STATUS_OK;
    cl_int err;
    cl_program program = clCreateProgramWithSource(ctx->context, (cl_uint)n, texts, NULL, &err);
    if (err != CL_SUCCESS) return lz_cl_fail(err, "clCreateProgramWithSource");
    err = clBuildProgram(program, 1, &ctx->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        lz_log_build(ctx, program, LAZYATTN_LOG_ERROR, key);
        int st = lz_cl_fail(err, "clBuildProgram");
        lz_fail(st, "clBuildProgram [%s]: %s (%d); the build log went to the log callback", key,
                lz_cl_error_name(err), (int)err);
        clReleaseProgram(program);
        return st;
    }
    lz_log_build(ctx, program, LAZYATTN_LOG_DEBUG, key);
    if (cached) lz_binary_cache_store(ctx, path, program);
    *out = program;
    return LAZYATTN_STATUS_OK;
}

/* Builds a program from its embedded SPIR-V (lz_il_create says why not). */
static int lz_build_il(lazyattn_context *ctx, const lz_il_program *il, const char *options,
                       const char *key, cl_program *out) {
    char il_options[512];
    lz_il_build_options(options, il_options, sizeof il_options);
    /* whether the device takes SPIR-V at all is asked first (lz_il_create) */
    cl_program program;
    int st = lz_il_create(ctx, il, &program);
    if (st) return st;
    char path[LZ_BINARY_CACHE_PATH];
    const char *bytes = (const char *)il->il;
    const int cached =
        lz_binary_cache_path(ctx, "il", &bytes, &il->size, 1, il_options, path, sizeof path);
    cl_program loaded;
    if (cached && lz_binary_cache_load(ctx, path, il_options, key, &loaded)) {
        clReleaseProgram(program);
        *out = loaded;
        return LAZYATTN_STATUS_OK;
    }
    cl_int err = clBuildProgram(program, 1, &ctx->device, il_options, NULL, NULL);
    if (err != CL_SUCCESS) {
        lz_log_build(ctx, program, LAZYATTN_LOG_WARN, key);
        st = lz_cl_fail(err, "clBuildProgram");
        lz_fail(st, "clBuildProgram of the SPIR-V [%s]: %s (%d)", key, lz_cl_error_name(err),
                (int)err);
        clReleaseProgram(program);
        return st;
    }
    lz_log_build(ctx, program, LAZYATTN_LOG_DEBUG, key);
    if (cached) lz_binary_cache_store(ctx, path, program);
    *out = program;
    return LAZYATTN_STATUS_OK;
}

/* Builds a program from the embedded SPIR-V where the format allows, the
 * device takes it and a variant exists for the key, else from source; the
 * log says which, per program. */
static int lz_program_build(lazyattn_context *ctx, const char *const *names, int n,
                            const char *options, const char *key, cl_program *out) {
    lazyattn_program_format format;
    int st = lz_program_format(ctx, &format);
    if (st) return st;
    char why[320] = "source forced (LAZYATTN_PROGRAM=source or the context option)";
    lazyattn_log_level level = LAZYATTN_LOG_INFO;
    if (format != LAZYATTN_PROGRAM_SOURCE) {
        const lz_il_program *il = lz_il_find(key);
        if (!il) {
            snprintf(why, sizeof why, "no SPIR-V variant was built for these options");
        } else {
            st = lz_build_il(ctx, il, options, key, out);
            if (!st) {
                lz_log(ctx, LAZYATTN_LOG_INFO, "program [%s]: SPIR-V IL (%zu bytes)", key, il->size);
                return LAZYATTN_STATUS_OK;
            }
            snprintf(why, sizeof why, "%s", lazyattn_last_error());
            if (st != LAZYATTN_STATUS_UNSUPPORTED) level = LAZYATTN_LOG_WARN; /* a failed build */
        }
        if (format == LAZYATTN_PROGRAM_IL)
            return lz_fail(LAZYATTN_STATUS_UNSUPPORTED, "program [%s]: SPIR-V required, but %s", key,
                           why);
    }
    st = lz_build_source(ctx, names, n, options, key, out);
    if (!st) lz_log(ctx, level, "program [%s]: OpenCL C source (%s)", key, why);
    return st;
}

int lz_program_get(lazyattn_context *ctx, const char *const *names, int n, const char *options,
                   cl_program *out) {
    *out = NULL;
    char *key = lz_program_key(names, n, options);
    if (!key) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "program key");
    if ((*out = lz_program_lookup(ctx, key)) != NULL) {
        free(key);
        return LAZYATTN_STATUS_OK;
    }

    cl_program program;
    int st = lz_program_build(ctx, names, n, options, key, &program);
    if (st) {
        free(key);
        return st;
    }
    lz_program_entry *e = malloc(sizeof *e);
    if (!e) {
        clReleaseProgram(program);
        free(key);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "program cache");
    }
    e->key = key;
    e->program = program;
    *out = lz_program_insert(ctx, e);
    return LAZYATTN_STATUS_OK;
}

/* Only at context destroy, when no other thread may use the context. */
void lz_program_cache_clear(lazyattn_context *ctx) {
    lz_program_entry *e = ctx->programs;
    while (e) {
        lz_program_entry *next = e->next;
        clReleaseProgram(e->program);
        free(e->key);
        free(e);
        e = next;
    }
    ctx->programs = NULL;
}
