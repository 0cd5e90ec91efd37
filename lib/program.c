/* Builds OpenCL programs from the embedded cl/ sources, once per
 * (context, sources, options), and hands build logs to the log callback. */
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

static char *lz_make_key(const char *const *names, int n, const char *options) {
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

static void lz_log_build(lazyattn_context *ctx, cl_program program, lazyattn_log_level level,
                         const char *key) {
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
        for (size_t off = 0; off < size && log[off]; off += 900)
            lz_log(ctx, level, "build log [%s]%s: %.900s", key, off ? " (cont.)" : "", log + off);
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

int lz_program_get(lazyattn_context *ctx, const char *const *names, int n, const char *options,
                   cl_program *out) {
    *out = NULL;
    char *key = lz_make_key(names, n, options);
    if (!key) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "program key");
    if ((*out = lz_program_lookup(ctx, key)) != NULL) {
        free(key);
        return LAZYATTN_STATUS_OK;
    }

    const char *texts[16];
    if (n > 16) {
        free(key);
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "too many program sources");
    }
    for (int i = 0; i < n; i++) {
        texts[i] = lz_source_text(names[i]);
        if (!texts[i]) {
            free(key);
            return lz_fail(LAZYATTN_STATUS_NOT_FOUND, "no embedded kernel source \"%s\"", names[i]);
        }
    }
    cl_int err;
    cl_program program = clCreateProgramWithSource(ctx->context, (cl_uint)n, texts, NULL, &err);
    if (err != CL_SUCCESS) {
        free(key);
        return lz_cl_fail(err, "clCreateProgramWithSource");
    }
    err = clBuildProgram(program, 1, &ctx->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        lz_log_build(ctx, program, LAZYATTN_LOG_ERROR, key);
        int st = lz_cl_fail(err, "clBuildProgram");
        lz_fail(st, "clBuildProgram [%s]: %s (%d); the build log went to the log callback", key,
                lz_cl_error_name(err), (int)err);
        clReleaseProgram(program);
        free(key);
        return st;
    }
    lz_log_build(ctx, program, LAZYATTN_LOG_DEBUG, key);
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
