/* SPDX-License-Identifier: Apache-2.0 */
/* The on-disk cache of built program binaries (README "Kernel programs",
 * the context option program_cache and LAZYATTN_PROGRAM_CACHE): a program
 * built once on a device is created from its binary afterwards, by any
 * context of any process that names the same directory. Compilers that keep
 * no cache of their own (Intel's CPU runtime: 5-20 s for one serve/ GEMV
 * program) then compile each program once per machine instead of once per
 * context.
 *
 * A file per program, named by the XXH3-128 of everything the binary
 * depends on: the format tag ("src", "il"), the sources or SPIR-V bytes, the
 * build options, the platform's name and version, the device's name and
 * version and the driver's version. Contents: "LZPB" 1, the binary's size,
 * its XXH3-64, the binary. A file that is short, or whose checksum or
 * program does not build, is rebuilt from the source and replaced; written
 * to a temporary name and renamed, so readers never see half a file. The
 * cache never fails a build: each problem goes to the log (WARN) and the
 * program is compiled as if there were no cache. Nothing is evicted:
 * delete the directory to empty it. */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#if !defined(_WIN32)
#include <sys/stat.h>
#include <unistd.h>
#endif

#define LZ_PC_MAGIC "LZPB"
#define LZ_PC_VERSION 1u
#define LZ_PC_HEADER 24 /* magic 4, version 4, size 8, checksum 8 */
#define LZ_PC_MAX_BINARY ((uint64_t)1 << 30)

/* Reads a platform or device string into out (empty when the query fails). */
static void lz_pc_platform_string(cl_platform_id p, cl_platform_info what, char *out, size_t n) {
    out[0] = 0;
    if (clGetPlatformInfo(p, what, n - 1, out, NULL) != CL_SUCCESS) out[0] = 0;
    out[n - 1] = 0;
}
static void lz_pc_device_string(cl_device_id d, cl_device_info what, char *out, size_t n) {
    out[0] = 0;
    if (clGetDeviceInfo(d, what, n - 1, out, NULL) != CL_SUCCESS) out[0] = 0;
    out[n - 1] = 0;
}

/* Adds one field, with its length first (no two field lists hash alike). */
static void lz_pc_add(XXH3_state_t *s, const void *p, size_t n) {
    uint64_t len = n;
    XXH3_128bits_update(s, &len, sizeof len);
    if (n) XXH3_128bits_update(s, p, n);
}

int lz_binary_cache_path(const lazyattn_context *ctx, const char *format, const char *const *parts,
                          const size_t *sizes, int n_parts, const char *options, char *path,
                          size_t path_size) {
    if (!ctx->binary_cache[0]) return 0;
    XXH3_state_t *s = XXH3_createState();
    if (!s) return 0;
    XXH3_128bits_reset(s);
    lz_pc_add(s, format, strlen(format));
    for (int i = 0; i < n_parts; i++) lz_pc_add(s, parts[i], sizes ? sizes[i] : strlen(parts[i]));
    lz_pc_add(s, options, strlen(options));
    char text[512];
    static const cl_platform_info pinfo[2] = {CL_PLATFORM_NAME, CL_PLATFORM_VERSION};
    for (int i = 0; i < 2; i++) {
        lz_pc_platform_string(ctx->platform, pinfo[i], text, sizeof text);
        lz_pc_add(s, text, strlen(text));
    }
    static const cl_device_info dinfo[3] = {CL_DEVICE_NAME, CL_DEVICE_VERSION, CL_DRIVER_VERSION};
    for (int i = 0; i < 3; i++) {
        lz_pc_device_string(ctx->device, dinfo[i], text, sizeof text);
        lz_pc_add(s, text, strlen(text));
    }
    XXH128_hash_t h = XXH3_128bits_digest(s);
    XXH3_freeState(s);
    int n = snprintf(path, path_size, "%s/%016llx%016llx.bin", ctx->binary_cache,
                     (unsigned long long)h.high64, (unsigned long long)h.low64);
    return n > 0 && (size_t)n < path_size;
}

static void lz_pc_put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t lz_pc_get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The binary of the file at path (malloc'ed, *size bytes); NULL when there
 * is none (*why NULL) or it is damaged (*why says how). */
static unsigned char *lz_pc_read(const char *path, size_t *size, const char **why) {
    *why = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char head[LZ_PC_HEADER];
    unsigned char *bin = NULL;
    if (fread(head, 1, sizeof head, f) != sizeof head || memcmp(head, LZ_PC_MAGIC, 4) != 0 ||
        head[4] != LZ_PC_VERSION || head[5] || head[6] || head[7]) {
        *why = "not a program cache file of this version";
    } else {
        uint64_t n = lz_pc_get64(head + 8), sum = lz_pc_get64(head + 16);
        if (n == 0 || n > LZ_PC_MAX_BINARY) {
            *why = "a binary size out of range";
        } else if (!(bin = malloc((size_t)n))) {
            *why = "no memory for the binary";
        } else if (fread(bin, 1, (size_t)n, f) != (size_t)n || fgetc(f) != EOF) {
            *why = "shorter or longer than its header says";
        } else if (XXH3_64bits(bin, (size_t)n) != sum) {
            *why = "a checksum mismatch";
        } else {
            *size = (size_t)n;
        }
        if (*why) {
            free(bin);
            bin = NULL;
        }
    }
    fclose(f);
    return bin;
}

int lz_binary_cache_load(lazyattn_context *ctx, const char *path, const char *options,
                          const char *key, cl_program *out) {
    *out = NULL;
    size_t size = 0;
    const char *why = NULL;
    unsigned char *bin = lz_pc_read(path, &size, &why);
    if (!bin) {
        if (why) lz_log(ctx, LAZYATTN_LOG_WARN, "program cache: %s: %s; rebuilt", path, why);
        return 0;
    }
    cl_int status = CL_SUCCESS, err = CL_SUCCESS;
    const unsigned char *b = bin;
    cl_program p = clCreateProgramWithBinary(ctx->context, 1, &ctx->device, &size, &b, &status, &err);
    free(bin);
    if (err == CL_SUCCESS && status == CL_SUCCESS)
        err = clBuildProgram(p, 1, &ctx->device, options, NULL, NULL);
    else if (err == CL_SUCCESS)
        err = status;
    if (err != CL_SUCCESS) {
        if (p) clReleaseProgram(p);
        lz_log(ctx, LAZYATTN_LOG_WARN, "program cache: %s: the binary did not build (%s); rebuilt",
               path, lz_cl_error_name(err));
        return 0;
    }
    lz_log(ctx, LAZYATTN_LOG_DEBUG, "program cache: [%s] from %s", key, path);
    *out = p;
    return 1;
}

void lz_binary_cache_store(lazyattn_context *ctx, const char *path, cl_program program) {
    size_t size = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS ||
        size == 0 || (uint64_t)size > LZ_PC_MAX_BINARY) {
        lz_log(ctx, LAZYATTN_LOG_DEBUG, "program cache: the driver gives no binary for %s", path);
        return;
    }
    unsigned char *bin = malloc(size);
    if (!bin) return;
    unsigned char *bins[1] = {bin};
    if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) != CL_SUCCESS) {
        free(bin);
        return;
    }
    unsigned char head[LZ_PC_HEADER] = {0};
    memcpy(head, LZ_PC_MAGIC, 4);
    head[4] = LZ_PC_VERSION;
    lz_pc_put64(head + 8, size);
    lz_pc_put64(head + 16, XXH3_64bits(bin, size));
    /* a name of this process and call: concurrent writers never share one */
    static unsigned counter;
    char tmp[LZ_BINARY_CACHE_PATH + 48];
#if !defined(_WIN32)
    long pid = (long)getpid();
#else
    long pid = 0;
#endif
    snprintf(tmp, sizeof tmp, "%s.%ld.%u.tmp", path, pid,
             __atomic_add_fetch(&counter, 1u, __ATOMIC_RELAXED));
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(head, 1, sizeof head, f) == sizeof head && fwrite(bin, 1, size, f) == size;
    if (f && fclose(f) != 0) ok = 0;
    free(bin);
    if (ok && rename(tmp, path) == 0) {
        lz_log(ctx, LAZYATTN_LOG_DEBUG, "program cache: wrote %s (%zu bytes)", path, size);
        return;
    }
    int e = errno;
    if (f) remove(tmp);
    lz_log(ctx, LAZYATTN_LOG_WARN, "program cache: could not write %s: %s", path, strerror(e));
}

int lz_binary_cache_init(lazyattn_context *ctx, const char *dir) {
    ctx->binary_cache[0] = 0;
    if (!dir || !*dir) return LAZYATTN_STATUS_OK;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    if (n >= LZ_BINARY_CACHE_DIR)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "program cache directory \"%.60s...\": longer than %d characters", dir,
                       LZ_BINARY_CACHE_DIR - 1);
#if !defined(_WIN32)
    struct stat st;
    if (stat(dir, &st) != 0 && mkdir(dir, 0755) != 0 && errno != EEXIST) {
        lz_log(ctx, LAZYATTN_LOG_WARN, "program cache: cannot create %s (%s): not used", dir,
               strerror(errno));
        return LAZYATTN_STATUS_OK;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        lz_log(ctx, LAZYATTN_LOG_WARN, "program cache: %s is not a directory: not used", dir);
        return LAZYATTN_STATUS_OK;
    }
#endif
    memcpy(ctx->binary_cache, dir, n);
    ctx->binary_cache[n] = 0;
    lz_log(ctx, LAZYATTN_LOG_INFO, "program cache: %s", ctx->binary_cache);
    return LAZYATTN_STATUS_OK;
}
