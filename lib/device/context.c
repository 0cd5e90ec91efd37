/* SPDX-License-Identifier: Apache-2.0 */
/* Device choice, the OpenCL context and queue. */
#include "internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#ifndef CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV
#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001
#endif

void lazyattn_context_options_init(lazyattn_context_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->device_index = -1;
}

/* Case-insensitive substring test; an empty or NULL needle matches. */
static int lz_contains(const char *hay, const char *needle) {
    if (!needle || !*needle) return 1;
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n) return 1;
    }
    return 0;
}

/* The first clGetPlatformIDs of the process loads the ICDs. Some ICD
 * loaders cut OCL_ICD_FILENAMES ("a.so:b.so") in place at the first ':'
 * while parsing it (measured on the H200 machine: "libpocl.so.2:
 * libnvidia-opencl.so.1" read "libpocl.so.2" afterwards), so a process the
 * engine spawns later (a worker, a second process of the same job) would
 * see only the first ICD and pick the CPU. The library makes that first
 * call itself, once, and puts the variable back as it was. (An engine that
 * called OpenCL before the library did has had its variable cut already.) */
#if !defined(_WIN32)
#include <pthread.h>
static void lz_icd_load(void) {
    const char *v = getenv("OCL_ICD_FILENAMES");
    char *saved = v ? strdup(v) : NULL;
    cl_uint n = 0;
    clGetPlatformIDs(0, NULL, &n);
    const char *now = getenv("OCL_ICD_FILENAMES");
    if (saved && (!now || strcmp(now, saved) != 0)) setenv("OCL_ICD_FILENAMES", saved, 1);
    free(saved);
}
static pthread_once_t lz_icd_once = PTHREAD_ONCE_INIT;
#endif

static cl_int lz_platform_ids(cl_uint n, cl_platform_id *platforms, cl_uint *count) {
#if !defined(_WIN32)
    pthread_once(&lz_icd_once, lz_icd_load);
#endif
    return clGetPlatformIDs(n, platforms, count);
}

static const char *lz_env(const char *name) {
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

/* Picks the first device matching the names and the kind; kind DEFAULT
 * tries GPUs first, then CPUs, then anything. A platform that fails to list
 * its GPUs (a GPU held by another process in exclusive-process compute
 * mode, a driver fault) is passed over: when that leads to a device that is
 * not a GPU, the log says so at WARN, since outputs then differ from the
 * GPU's in the last bits and run far slower. */
static int lz_pick_device(lazyattn_context *ctx, const char *want_platform, const char *want_device,
                          lazyattn_device_kind kind, cl_platform_id *out_p, cl_device_id *out_d) {
    cl_uint np = 0;
    cl_int err = lz_platform_ids(0, NULL, &np);
    if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || np == 0)
        return lz_fail(LAZYATTN_STATUS_NO_DEVICE, "no OpenCL platform found (is an ICD installed?)");
    if (err != CL_SUCCESS) return lz_cl_fail(err, "clGetPlatformIDs");
    cl_platform_id platforms[32];
    if (np > 32) np = 32;
    err = lz_platform_ids(np, platforms, NULL);
    if (err != CL_SUCCESS) return lz_cl_fail(err, "clGetPlatformIDs");

    cl_device_type passes[3] = {CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_ALL};
    int n_pass = 3, first = 0;
    if (kind == LAZYATTN_DEVICE_GPU) n_pass = 1;
    if (kind == LAZYATTN_DEVICE_CPU) first = 1, n_pass = 2;
    if (kind == LAZYATTN_DEVICE_ANY) first = 2;
    char gpu_failed[300] = ""; /* the GPU pass's first platform that failed to list its devices */
    for (int pass = first; pass < n_pass; pass++) {
        for (cl_uint p = 0; p < np; p++) {
            char pname[256] = "";
            clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof pname, pname, NULL);
            if (!lz_contains(pname, want_platform)) continue;
            cl_uint nd = 0;
            err = clGetDeviceIDs(platforms[p], passes[pass], 0, NULL, &nd);
            if (pass == 0 && err != CL_SUCCESS && err != CL_DEVICE_NOT_FOUND && !gpu_failed[0])
                snprintf(gpu_failed, sizeof gpu_failed, "%s (clGetDeviceIDs %d)", pname, (int)err);
            if (err != CL_SUCCESS || nd == 0) continue;
            cl_device_id devs[64];
            if (nd > 64) nd = 64;
            if (clGetDeviceIDs(platforms[p], passes[pass], nd, devs, NULL) != CL_SUCCESS) continue;
            for (cl_uint d = 0; d < nd; d++) {
                char dname[256] = "";
                clGetDeviceInfo(devs[d], CL_DEVICE_NAME, sizeof dname, dname, NULL);
                if (!lz_contains(dname, want_device)) continue;
                *out_p = platforms[p];
                *out_d = devs[d];
                if (pass > 0 && gpu_failed[0])
                    lz_log(ctx, LAZYATTN_LOG_WARN,
                           "no GPU could be listed (%s fails: held by another process in "
                           "exclusive-process mode?); using %s",
                           gpu_failed, dname);
                return LAZYATTN_STATUS_OK;
            }
        }
    }
    return lz_fail(LAZYATTN_STATUS_NO_DEVICE, "no OpenCL device matches platform \"%s\" device \"%s\"",
                   want_platform ? want_platform : "*", want_device ? want_device : "*");
}

// ---- devices by global index ----

#define LZ_MAX_PLATFORMS 32
#define LZ_MAX_DEVICES_PER_PLATFORM 64

/* Every device of every platform, platforms in clGetPlatformIDs order and
 * devices in clGetDeviceIDs(CL_DEVICE_TYPE_ALL) order: the global index is
 * the position in that walk. Calls visit(index, platform, device, user) for
 * each until it returns nonzero; *count: devices seen. A machine with no
 * platform has 0 devices (not an error). */
static int lz_walk_devices(int (*visit)(int, cl_platform_id, int, cl_device_id, void *), void *user,
                           int *count) {
    *count = 0;
    cl_uint np = 0;
    cl_int err = lz_platform_ids(0, NULL, &np);
    if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || np == 0) return LAZYATTN_STATUS_OK;
    if (err != CL_SUCCESS) return lz_cl_fail(err, "clGetPlatformIDs");
    cl_platform_id platforms[LZ_MAX_PLATFORMS];
    if (np > LZ_MAX_PLATFORMS) np = LZ_MAX_PLATFORMS;
    err = lz_platform_ids(np, platforms, NULL);
    if (err != CL_SUCCESS) return lz_cl_fail(err, "clGetPlatformIDs");
    for (cl_uint p = 0; p < np; p++) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0)
            continue;
        cl_device_id devs[LZ_MAX_DEVICES_PER_PLATFORM];
        if (nd > LZ_MAX_DEVICES_PER_PLATFORM) nd = LZ_MAX_DEVICES_PER_PLATFORM;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, nd, devs, NULL) != CL_SUCCESS) continue;
        for (cl_uint d = 0; d < nd; d++) {
            int index = (*count)++;
            if (visit && visit(index, platforms[p], (int)p, devs[d], user)) return LAZYATTN_STATUS_OK;
        }
    }
    return LAZYATTN_STATUS_OK;
}

int lazyattn_device_count(int *count) {
    LZ_CHECK_ARG(count != NULL, "lazyattn_device_count: count is NULL");
    return lz_walk_devices(NULL, NULL, count);
}

typedef struct lz_find_index {
    int want;
    cl_platform_id platform;
    int platform_index;
    cl_device_id device;
} lz_find_index;

static int lz_visit_index(int index, cl_platform_id p, int pi, cl_device_id d, void *user) {
    lz_find_index *f = user;
    if (index != f->want) return 0;
    f->platform = p;
    f->platform_index = pi;
    f->device = d;
    return 1;
}

/* The platform and device of a global index; NO_DEVICE past the last. */
static int lz_device_at(int index, const char *who, cl_platform_id *p, int *pi, cl_device_id *d) {
    lz_find_index f = {index, NULL, -1, NULL};
    int count = 0;
    int st = lz_walk_devices(lz_visit_index, &f, &count);
    if (st) return st;
    if (!f.device) {
        if (count == 0)
            return lz_fail(LAZYATTN_STATUS_NO_DEVICE, "%s: device #%d asked, no OpenCL device found",
                           who, index);
        return lz_fail(LAZYATTN_STATUS_NO_DEVICE, "%s: device #%d asked, there are %d (#0..#%d)",
                       who, index, count, count - 1);
    }
    *p = f.platform;
    if (pi) *pi = f.platform_index;
    *d = f.device;
    return LAZYATTN_STATUS_OK;
}

static lazyattn_device_kind lz_kind_of(cl_device_id d) {
    cl_device_type t = 0;
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof t, &t, NULL);
    if (t & CL_DEVICE_TYPE_GPU) return LAZYATTN_DEVICE_GPU;
    if (t & CL_DEVICE_TYPE_CPU) return LAZYATTN_DEVICE_CPU;
    return LAZYATTN_DEVICE_ANY;
}

int lazyattn_device_get_info(int index, lazyattn_device_info *info) {
    LZ_CHECK_ARG(info != NULL, "lazyattn_device_get_info: info is NULL");
    LZ_CHECK_ARG(index >= 0, "lazyattn_device_get_info: index %d < 0", index);
    cl_platform_id p = NULL;
    cl_device_id d = NULL;
    int pi = 0;
    int st = lz_device_at(index, "lazyattn_device_get_info", &p, &pi, &d);
    if (st) return st;
    memset(info, 0, sizeof *info);
    info->index = index;
    info->platform_index = pi;
    clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof info->platform - 1, info->platform, NULL);
    clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof info->name - 1, info->name, NULL);
    clGetDeviceInfo(d, CL_DEVICE_VENDOR, sizeof info->vendor - 1, info->vendor, NULL);
    info->kind = lz_kind_of(d);
    cl_ulong mem = 0;
    cl_uint units = 0;
    clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
    info->global_memory = (uint64_t)mem;
    info->compute_units = (int)units;
    return LAZYATTN_STATUS_OK;
}

/* "#N" or (from the environment) "N": a device index into *index; 0 when
 * the text is a name to match instead; INVALID_ARGUMENT for "#" followed by
 * anything but digits. */
static int lz_parse_index(const char *text, int digits_alone, const char *what, int *index,
                          int *is_index) {
    *is_index = 0;
    if (!text) return LAZYATTN_STATUS_OK;
    const char *s = text;
    if (*s == '#')
        s++;
    else if (!digits_alone || !isdigit((unsigned char)*s))
        return LAZYATTN_STATUS_OK;
    long v = 0;
    const char *c = s;
    for (; *c && isdigit((unsigned char)*c) && v <= 1000000; c++) v = v * 10 + (*c - '0');
    if (c == s || *c || v > 1000000) {
        if (text[0] != '#') return LAZYATTN_STATUS_OK; /* "1080ti": a name */
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "lazyattn_context_create: %s \"%s\" is not a device index (#0, #1, ...)",
                       what, text);
    }
    *index = (int)v;
    *is_index = 1;
    return LAZYATTN_STATUS_OK;
}

/* The device index asked by the options or the environment, or -1. */
static int lz_wanted_index(const lazyattn_context_options *o, int *index) {
    *index = -1;
    if (o->device_index < -1)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "lazyattn_context_create: device_index %d (-1 = by name and kind)",
                       o->device_index);
    if (o->device_index >= 0) {
        *index = o->device_index;
        return LAZYATTN_STATUS_OK;
    }
    int is_index;
    if (o->device) /* the options name the device: "#N" is an index */
        return lz_parse_index(o->device, 0, "device", index, &is_index);
    const char *env_index = lz_env("LAZYATTN_DEVICE_INDEX");
    if (env_index) {
        int st = lz_parse_index(env_index, 1, "LAZYATTN_DEVICE_INDEX", index, &is_index);
        if (st) return st;
        if (!is_index)
            return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                           "lazyattn_context_create: LAZYATTN_DEVICE_INDEX \"%s\" is not a device "
                           "index",
                           env_index);
        return LAZYATTN_STATUS_OK;
    }
    /* LAZYATTN_DEVICE: "#N" or digits alone are an index, anything else a
     * name substring ("1" never matches "avx512"). */
    return lz_parse_index(lz_env("LAZYATTN_DEVICE"), 1, "LAZYATTN_DEVICE", index, &is_index);
}

/* Reads what the kernels and launchers need to know about the device and
 * decides on the NVIDIA fast path. */
static void lz_query_device(lazyattn_context *ctx, int portable_only) {
    char pname[128] = "", dname[120] = "", vendor[128] = "";
    clGetPlatformInfo(ctx->platform, CL_PLATFORM_NAME, sizeof pname, pname, NULL);
    clGetDeviceInfo(ctx->device, CL_DEVICE_NAME, sizeof dname, dname, NULL);
    clGetDeviceInfo(ctx->device, CL_DEVICE_VENDOR, sizeof vendor, vendor, NULL);
    snprintf(ctx->device_name, sizeof ctx->device_name, "%s / %s", pname, dname);
    clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof ctx->compute_units,
                    &ctx->compute_units, NULL);
    clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof ctx->max_work_group_size,
                    &ctx->max_work_group_size, NULL);
    clGetDeviceInfo(ctx->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof ctx->local_mem_size,
                    &ctx->local_mem_size, NULL);
    clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ctx->max_alloc_size,
                    &ctx->max_alloc_size, NULL);
    cl_bool unified = CL_TRUE;
    clGetDeviceInfo(ctx->device, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
    ctx->own_memory = unified == CL_FALSE;
    if (ctx->compute_units == 0) ctx->compute_units = 1;
    ctx->is_gpu = lz_kind_of(ctx->device) == LAZYATTN_DEVICE_GPU;
    if (lz_contains(vendor, "NVIDIA")) {
        cl_uint major = 0, minor = 0;
        if (clGetDeviceInfo(ctx->device, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major,
                            NULL) == CL_SUCCESS &&
            clGetDeviceInfo(ctx->device, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof minor, &minor,
                            NULL) == CL_SUCCESS) {
            ctx->nv_cc_major = (int)major;
            ctx->nv_cc_minor = (int)minor;
        }
    }
    const char *env = lz_env("LAZYATTN_PORTABLE");
    int forced_portable = portable_only || (env && strcmp(env, "0") != 0);
    ctx->fast_nv = !forced_portable && ctx->nv_cc_major >= 8;
    lz_log(ctx, LAZYATTN_LOG_INFO, "device %s, %u compute units, %llu B local, fast path %s",
           ctx->device_name, ctx->compute_units, (unsigned long long)ctx->local_mem_size,
           ctx->fast_nv ? "NVIDIA" : "portable");
}

static lazyattn_context *lz_context_new(const lazyattn_context_options *o) {
    lazyattn_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return NULL;
    if (lz_mutex_init(&ctx->programs_lock) != 0) {
        free(ctx);
        return NULL;
    }
    if (o) {
        ctx->log = o->log;
        ctx->log_user = o->log_user;
        ctx->program_format = o->program;
    }
    return ctx;
}

int lazyattn_context_create(const lazyattn_context_options *options, lazyattn_context **out) {
    LZ_CHECK_ARG(out != NULL, "lazyattn_context_create: out is NULL");
    *out = NULL;
    lazyattn_context_options defaults;
    lazyattn_context_options_init(&defaults);
    const lazyattn_context_options *o = options ? options : &defaults;
    if (o->kind < LAZYATTN_DEVICE_DEFAULT || o->kind > LAZYATTN_DEVICE_ANY)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "lazyattn_context_create: unknown device kind %d", (int)o->kind);
    if (o->program < LAZYATTN_PROGRAM_DEFAULT || o->program > LAZYATTN_PROGRAM_IL)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "lazyattn_context_create: unknown program format %d", (int)o->program);
    const char *want_platform = o->platform ? o->platform : lz_env("LAZYATTN_PLATFORM");
    const char *want_device = o->device ? o->device : lz_env("LAZYATTN_DEVICE");
    int want_index;
    int st = lz_wanted_index(o, &want_index);
    if (st) return st;

    lazyattn_context *ctx = lz_context_new(o);
    if (!ctx) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_context_create");
    if (want_index >= 0)
        st = lz_device_at(want_index, "lazyattn_context_create", &ctx->platform, NULL, &ctx->device);
    else
        st = lz_pick_device(ctx, want_platform, want_device, o->kind, &ctx->platform, &ctx->device);
    if (st) goto fail;
    cl_int err;
    ctx->context = clCreateContext(NULL, 1, &ctx->device, NULL, NULL, &err);
    if (err != CL_SUCCESS) {
        st = lz_cl_fail(err, "clCreateContext");
        goto fail;
    }
    ctx->queue = clCreateCommandQueue(ctx->context, ctx->device,
                                      o->profiling ? CL_QUEUE_PROFILING_ENABLE : 0, &err);
    if (err != CL_SUCCESS) {
        st = lz_cl_fail(err, "clCreateCommandQueue");
        goto fail;
    }
    lz_query_device(ctx, o->portable_only);
    st = lz_binary_cache_init(ctx, o->program_cache ? o->program_cache
                                                    : lz_env("LAZYATTN_PROGRAM_CACHE"));
    if (st) goto fail;
    *out = ctx;
    return LAZYATTN_STATUS_OK;
fail:
    lazyattn_context_destroy(ctx);
    return st;
}

int lazyattn_context_create_from_cl(cl_context context, cl_device_id device, cl_command_queue queue,
                                    const lazyattn_context_options *options,
                                    lazyattn_context **out) {
    LZ_CHECK_ARG(out != NULL, "lazyattn_context_create_from_cl: out is NULL");
    *out = NULL;
    LZ_CHECK_ARG(context && device && queue,
                 "lazyattn_context_create_from_cl: context, device and queue are required");
    LZ_CHECK_ARG(!options || (options->program >= LAZYATTN_PROGRAM_DEFAULT &&
                              options->program <= LAZYATTN_PROGRAM_IL),
                 "lazyattn_context_create_from_cl: unknown program format %d",
                 (int)options->program);
    cl_platform_id platform = NULL;
    cl_int err = clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL);
    if (err != CL_SUCCESS) return lz_cl_fail(err, "clGetDeviceInfo(CL_DEVICE_PLATFORM)");
    lazyattn_context *ctx = lz_context_new(options);
    if (!ctx) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_context_create_from_cl");
    ctx->platform = platform;
    ctx->device = device;
    ctx->context = context;
    ctx->queue = queue;
    clRetainContext(context);
    clRetainCommandQueue(queue);
    lz_query_device(ctx, options ? options->portable_only : 0);
    const char *cache = options && options->program_cache ? options->program_cache
                                                          : lz_env("LAZYATTN_PROGRAM_CACHE");
    int st = lz_binary_cache_init(ctx, cache);
    if (st) {
        lazyattn_context_destroy(ctx);
        return st;
    }
    *out = ctx;
    return LAZYATTN_STATUS_OK;
}

void lazyattn_context_destroy(lazyattn_context *ctx) {
    if (!ctx) return;
    lz_program_cache_clear(ctx);
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->context) clReleaseContext(ctx->context);
    lz_mutex_destroy(&ctx->programs_lock);
    free(ctx);
}

cl_context lazyattn_context_cl_context(const lazyattn_context *ctx) { return ctx ? ctx->context : NULL; }
cl_device_id lazyattn_context_device(const lazyattn_context *ctx) { return ctx ? ctx->device : NULL; }
cl_command_queue lazyattn_context_queue(const lazyattn_context *ctx) { return ctx ? ctx->queue : NULL; }
const char *lazyattn_context_device_name(const lazyattn_context *ctx) {
    return ctx ? ctx->device_name : "";
}
int lazyattn_context_fast_path(const lazyattn_context *ctx) { return ctx ? ctx->fast_nv : 0; }

/* The code-generation options (-cl-nv-*) of `options`, for the build of the
 * patched PTX (a binary takes no -D or -cl-std); words are separated by any
 * white space. INVALID_ARGUMENT when they do not fit in cg. */
static int lz_codegen_options(const char *fn, const char *options, char *cg, size_t cap) {
    size_t n = 0;
    cg[0] = 0;
    for (const char *s = options; *s;) {
        while (*s && isspace((unsigned char)*s)) s++;
        const char *e = s;
        while (*e && !isspace((unsigned char)*e)) e++;
        const size_t len = (size_t)(e - s);
        if (len > 7 && !strncmp(s, "-cl-nv-", 7)) {
            if (n + len + 2 > cap)
                return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                               "%s: the -cl-nv-* options exceed %zu characters", fn, cap - 2);
            memcpy(cg + n, s, len);
            n += len;
            cg[n++] = ' ';
            cg[n] = 0;
        }
        s = e;
    }
    return LAZYATTN_STATUS_OK;
}

int lazyattn_context_build_program(lazyattn_context *ctx, const char *source, const char *options,
                                   unsigned flags, cl_program *out) {
    static const char fn[] = "lazyattn_context_build_program";
    if (!out) return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!ctx || !source)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: %s is NULL", fn, ctx ? "source" : "ctx");
    if (flags & ~LAZYATTN_BUILD_SM90A)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: unknown flags 0x%x", fn,
                       flags & ~LAZYATTN_BUILD_SM90A);
    if (!options) options = "";
    /* the binary's build takes the code-generation options (-cl-nv-*) only */
    char cg[512] = "";
    int st = (flags & LAZYATTN_BUILD_SM90A) ? lz_codegen_options(fn, options, cg, sizeof cg) : 0;
    if (st) return st;
    if ((flags & LAZYATTN_BUILD_SM90A) && ctx->nv_cc_major != 9)
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                       "%s: the sm_90a round trip needs an NVIDIA compute capability 9.x device (%s)",
                       fn, ctx->device_name);
    /* the binary cache: builds without the round trip (its PTX is patched after the build) */
    char path[LZ_BINARY_CACHE_PATH];
    const int cached = !(flags & LAZYATTN_BUILD_SM90A) &&
                       lz_binary_cache_path(ctx, "src", &source, NULL, 1, options, path, sizeof path);
    if (cached && lz_binary_cache_load(ctx, path, options, "lazyattn_context_build_program", out))
        return LAZYATTN_STATUS_OK;
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx->context, 1, &source, NULL, &err);
    if (err != CL_SUCCESS) return lz_cl_fail(err, "lazyattn_context_build_program: clCreateProgramWithSource");
    err = clBuildProgram(p, 1, &ctx->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[4096] = "";
        clGetProgramBuildInfo(p, ctx->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        clReleaseProgram(p);
        return lz_fail(LAZYATTN_STATUS_BUILD_FAILED, "%s: build failed (%d): %s", fn, err, log);
    }
    if (!(flags & LAZYATTN_BUILD_SM90A)) {
        if (cached) lz_binary_cache_store(ctx, path, p);
        *out = p;
        return LAZYATTN_STATUS_OK;
    }
    cl_program patched = NULL;
    st = lz_ptx_sm90a(ctx, p, cg, &patched);
    clReleaseProgram(p);
    if (st) return st;
    *out = patched;
    return LAZYATTN_STATUS_OK;
}
