/* SPDX-License-Identifier: Apache-2.0 */
/* SPIR-V programs: the variants precompiled at build time
 * (tools/spirv_embed.py), whether the device takes them, and
 * clCreateProgramWithIL through a 1.2-targeted ICD header. */
#include "internal.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#ifndef CL_DEVICE_IL_VERSION
#define CL_DEVICE_IL_VERSION 0x105B /* OpenCL 2.1; = CL_DEVICE_IL_VERSION_KHR */
#endif

/* Generated at build time by tools/spirv_embed.py (empty without clang and
 * llvm-spirv). */
extern const lz_il_program lz_embedded_il[];
extern const int lz_n_embedded_il;

typedef cl_program(CL_API_CALL *lz_create_with_il_fn)(cl_context context, const void *il,
                                                       size_t length, cl_int *errcode_ret);

static int lz_word_eq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

int lz_program_format(const lazyattn_context *ctx, lazyattn_program_format *out) {
    *out = LAZYATTN_PROGRAM_AUTO;
    if (ctx->program_format != LAZYATTN_PROGRAM_DEFAULT) {
        *out = ctx->program_format;
        return LAZYATTN_STATUS_OK;
    }
    const char *env = getenv("LAZYATTN_PROGRAM");
    if (!env || !*env || lz_word_eq(env, "auto")) return LAZYATTN_STATUS_OK;
    if (lz_word_eq(env, "source"))
        *out = LAZYATTN_PROGRAM_SOURCE;
    else if (lz_word_eq(env, "il") || lz_word_eq(env, "spirv"))
        *out = LAZYATTN_PROGRAM_IL;
    else
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "LAZYATTN_PROGRAM=\"%.40s\": expected auto, source or il", env);
    return LAZYATTN_STATUS_OK;
}

int lz_il_count(void) { return lz_n_embedded_il; }

const lz_il_program *lz_il_find(const char *key) {
    for (int i = 0; i < lz_n_embedded_il; i++)
        if (strcmp(lz_embedded_il[i].key, key) == 0) return &lz_embedded_il[i];
    return NULL;
}

/* Whether a space-separated list holds the word. */
static int lz_list_has(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ' || p[n] == ';')) return 1;
    return 0;
}

/* Reads a device string into a malloc'ed buffer; NULL when the query fails. */
static char *lz_device_string(cl_device_id device, cl_device_info what) {
    size_t size = 0;
    if (clGetDeviceInfo(device, what, 0, NULL, &size) != CL_SUCCESS || size == 0) return NULL;
    char *s = malloc(size + 1);
    if (!s) return NULL;
    if (clGetDeviceInfo(device, what, size, s, NULL) != CL_SUCCESS) {
        free(s);
        return NULL;
    }
    s[size] = 0;
    return s;
}

/* Whether the platform's version ("OpenCL M.m ...") is at least 2.1. */
static int lz_platform_2_1(const lazyattn_context *ctx) {
    char version[128] = "";
    int major = 0, minor = 0;
    clGetPlatformInfo(ctx->platform, CL_PLATFORM_VERSION, sizeof version - 1, version, NULL);
    if (sscanf(version, "OpenCL %d.%d", &major, &minor) != 2) return 0;
    return major > 2 || (major == 2 && minor >= 1);
}

/* The entry point for IL programs. The headers target OpenCL 1.2, which
 * declares neither, so: clCreateProgramWithILKHR through
 * clGetExtensionFunctionAddressForPlatform where the device has
 * cl_khr_il_program (Intel's runtime takes this one), else, on an OpenCL
 * 2.1+ platform, the core clCreateProgramWithIL looked up at run time
 * (from the ICD loader already loaded, so that the library still loads with
 * a 1.2 loader). NULL when neither is there. */
static lz_create_with_il_fn lz_il_entry(const lazyattn_context *ctx, const char *extensions) {
    void *fn = NULL;
    if (extensions && lz_list_has(extensions, "cl_khr_il_program"))
        fn = clGetExtensionFunctionAddressForPlatform(ctx->platform, "clCreateProgramWithILKHR");
    if (!fn && lz_platform_2_1(ctx)) {
        void *self = dlopen(NULL, RTLD_LAZY);
        if (self) {
            fn = dlsym(self, "clCreateProgramWithIL");
            dlclose(self);
        }
    }
    lz_create_with_il_fn f;
    memcpy(&f, &fn, sizeof f); /* object to function pointer, as dlsym's users do */
    return f;
}

int lz_il_create(lazyattn_context *ctx, const lz_il_program *p, cl_program *out) {
    *out = NULL;
    /* the SPIR-V's version word: 0x00MMmm00 */
    if (p->size < 20 || p->il[0] != 0x03 || p->il[1] != 0x02 || p->il[2] != 0x23 || p->il[3] != 0x07)
        return lz_fail(LAZYATTN_STATUS_FORMAT, "embedded SPIR-V [%s] has no SPIR-V header", p->key);
    char want[32];
    snprintf(want, sizeof want, "SPIR-V_%d.%d", p->il[6], p->il[5]);
    cl_uint bits = 0;
    clGetDeviceInfo(ctx->device, CL_DEVICE_ADDRESS_BITS, sizeof bits, &bits, NULL);
    if (bits != 64)
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                       "the device has %u-bit addresses, the embedded SPIR-V is spir64", bits);
    char *il_versions = lz_device_string(ctx->device, CL_DEVICE_IL_VERSION);
    int listed = il_versions && lz_list_has(il_versions, want);
    free(il_versions);
    if (!listed)
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED, "the device lists no %s in CL_DEVICE_IL_VERSION",
                       want);
    char *extensions = lz_device_string(ctx->device, CL_DEVICE_EXTENSIONS);
    lz_create_with_il_fn create = lz_il_entry(ctx, extensions);
    free(extensions);
    if (!create)
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                       "the device has no cl_khr_il_program and the platform is older than "
                       "OpenCL 2.1 (no clCreateProgramWithIL)");
    cl_int err = CL_SUCCESS;
    cl_program program = create(ctx->context, p->il, p->size, &err);
    if (err != CL_SUCCESS || !program) {
        if (program) clReleaseProgram(program);
        return lz_cl_fail(err != CL_SUCCESS ? err : CL_INVALID_VALUE, "clCreateProgramWithIL");
    }
    *out = program;
    return LAZYATTN_STATUS_OK;
}

void lz_il_build_options(const char *options, char *out, size_t size) {
    size_t n = 0;
    out[0] = 0;
    const char *p = options;
    while (*p) {
        while (*p == ' ') p++;
        const char *end = p;
        while (*end && *end != ' ') end++;
        size_t len = (size_t)(end - p);
        if (len == 0) break;
        int pre = (len >= 2 && p[0] == '-' && (p[1] == 'D' || p[1] == 'U' || p[1] == 'I')) ||
                  (len >= 8 && strncmp(p, "-cl-std=", 8) == 0);
        if (pre && len == 2) { /* "-D NAME": the value is the next word */
            p = end;
            while (*p == ' ') p++;
            while (*p && *p != ' ') p++;
            continue;
        }
        if (!pre && n + len + 2 <= size) {
            if (n) out[n++] = ' ';
            memcpy(out + n, p, len);
            n += len;
            out[n] = 0;
        }
        p = end;
    }
}
