/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Probe (GPU only, not part of `meson test`): the rate of wgmma with A from
 * registers, by instruction shape, on an NVIDIA Hopper GPU (issue 11 step
 * 14). The prefill's round issues, a warpgroup a 32-key tile, the scores as
 * 16 wgmma m64n16k16 (two commit groups of 8, 16 keys x 128 dims each) and
 * O += P V as 2 wgmma m64n128k16 (V MN-major); the same FLOPs of scores
 * could be 8 m64n32k16. Each recipe below is one warpgroup's iteration
 * (fence, its groups each committed, wait_group 0); W warpgroups a
 * work-group run it concurrently, one work-group a SM (132 work-groups; the
 * SMs they ran on are counted), B from local memory in the prefill's
 * layouts (K-major core matrices for the scores, MN-major for V), random
 * f16 data. Printed: TFLOP/s over the kernel (profiling events, median of
 * 5 after a warm-up) and the SM clocks an iteration takes (clock64 of each
 * work-group's first thread, median over work-groups), so FLOP a clock a SM.
 * Built through the library's PTX round trip (lz_ptx_sm90a, lib/ptx_sm90a.c),
 * as the prefill is.
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "internal.h"

/* one wgmma kind: N, instructions (k-steps of 16 dims, chained on one
 * accumulator), MN-major B (V) or K-major (K) */
typedef struct {
    int n, count, trans;
} op;
/* a recipe: up to 4 commit groups of one op each */
typedef struct {
    const char *name;
    int n_groups;
    op g[4];
} recipe;

static const recipe recipes[] = {
    {"s16x2 (scores, 32 keys as 2 x m64n16)", 2, {{16, 8, 0}, {16, 8, 0}}},
    {"s32 (scores, 32 keys as m64n32)", 1, {{32, 8, 0}}},
    {"s64 (scores, 64 keys as m64n64)", 1, {{64, 8, 0}}},
    {"pv128 (P V, 32 keys, m64n128)", 1, {{128, 2, 1}}},
    {"s16x2 + pv128 (the round today)", 3, {{16, 8, 0}, {16, 8, 0}, {128, 2, 1}}},
    {"s32 + pv128", 2, {{32, 8, 0}, {128, 2, 1}}},
};
#define N_RECIPES (int)(sizeof recipes / sizeof recipes[0])

/* printf into buf at *at (capacity cap), *at moved on; -1 when it does not fit */
static int cat(char *buf, size_t cap, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int cat(char *buf, size_t cap, size_t *at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *at, cap - *at, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap - *at) return -1;
    *at += (size_t)n;
    return 0;
}

/* The kernel of recipe r with w warpgroups, as source text (NULL: too long). */
static char *kernel_source(const recipe *r, int w) {
    static char buf[32768];
    size_t at = 0;
    int bad = 0;
    bad |= cat(buf, sizeof buf, &at,
               "__kernel __attribute__((reqd_work_group_size(%d, 1, 1)))\n"
               "void rate(__global const ushort *src, __global float *out, __global uint *sm,\n"
               "          __global ulong *clk, int iters) {\n"
               "  __local ushort Bs[8192] __attribute__((aligned(1024)));\n"
               "  const int lid = get_local_id(0), lane = lid & 31;\n"
               "  for (int i = lid; i < 8192; i += %d) Bs[i] = src[i];\n"
               "  barrier(CLK_LOCAL_MEM_FENCE);\n"
               "  asm volatile(\"//@fence.proxy.async.shared::cta;\" ::: \"memory\");\n"
               "  barrier(CLK_LOCAL_MEM_FENCE);\n"
               "  uint a[4];\n"
               "  for (int i = 0; i < 4; i++) a[i] = src[lane * 4 + i] | (uint)src[lane * 4 + i + 256] << 16;\n"
               "  const ulong base = ((ulong)(uint)(size_t)Bs & 0x3FFFF) >> 4;\n"
               "  const ulong kdesc = base | (ulong)(128 >> 4) << 16 | (ulong)(2048 >> 4) << 32;\n"
               "  const ulong vdesc = base | (ulong)(2048 >> 4) << 16 | (ulong)(128 >> 4) << 32;\n",
               w * 128, w * 128);
    for (int g = 0; g < r->n_groups; g++)
        bad |= cat(buf, sizeof buf, &at, "  float d%d[%d];\n#pragma unroll\n  for (int i = 0; i < %d; i++) d%d[i] = 0.0f;\n", g,
                   r->g[g].n / 2, r->g[g].n / 2, g);
    bad |= cat(buf, sizeof buf, &at,
               "  ulong t0 = 0;\n"
               "  asm volatile(\"mov.u64 %%0, %%%%clock64;\" : \"=l\"(t0) :: \"memory\");\n"
               "  for (int it = 0; it < iters; it++) {\n"
               "    asm volatile(\"//@wgmma.fence.sync.aligned;\" ::: \"memory\");\n");
    for (int g = 0; g < r->n_groups; g++) {
        const op *o = &r->g[g];
        const int nd = o->n / 2;
        for (int c = 0; c < o->count; c++) {
            /* K-major: the next 16 dims 256 bytes on; MN-major: the next 16 keys 4096 on;
             * the second group of s16x2 the keys 16..31 (2 x 2048 bytes on) */
            const int step = o->trans ? 4096 * c : 256 * c + (g == 1 && o->n == 16 ? 4096 : 0);
            bad |= cat(buf, sizeof buf, &at,
                       "    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n\"\n"
                       "      \"//@wgmma.mma_async.sync.aligned.m64n%dk16.f32.f16.f16 {",
                       o->n);
            for (int i = 0; i < nd; i++) bad |= cat(buf, sizeof buf, &at, "%s%%%d", i ? "," : "", i);
            bad |= cat(buf, sizeof buf, &at, "}, {%%%d,%%%d,%%%d,%%%d}, %%%d, p, 1, 1, %d;\\n}\"\n      : ", nd,
                       nd + 1, nd + 2, nd + 3, nd + 4, o->trans);
            for (int i = 0; i < nd; i++) bad |= cat(buf, sizeof buf, &at, "%s\"+f\"(d%d[%d])", i ? "," : "", g, i);
            bad |= cat(buf, sizeof buf, &at,
                       "\n      : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(%s + %d));\n",
                       o->trans ? "vdesc" : "kdesc", step >> 4);
        }
        bad |= cat(buf, sizeof buf, &at, "    asm volatile(\"//@wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n");
    }
    bad |= cat(buf, sizeof buf, &at,
               "    asm volatile(\"//@wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n"
               "  }\n"
               "  ulong t1 = 0;\n"
               "  asm volatile(\"mov.u64 %%0, %%%%clock64;\" : \"=l\"(t1) :: \"memory\");\n"
               "  float s = 0.0f;\n");
    for (int g = 0; g < r->n_groups; g++)
        bad |= cat(buf, sizeof buf, &at, "#pragma unroll\n  for (int i = 0; i < %d; i++) s += d%d[i];\n", r->g[g].n / 2, g);
    bad |= cat(buf, sizeof buf, &at,
               "  out[get_global_id(0)] = s;\n"
               "  if (lid == 0) {\n"
               "    uint id;\n"
               "    asm volatile(\"mov.u32 %%0, %%%%smid;\" : \"=r\"(id));\n"
               "    sm[get_group_id(0)] = id;\n"
               "    clk[get_group_id(0)] = t1 - t0;\n"
               "  }\n"
               "}\n");
    return bad ? NULL : buf;
}

#define CK(x)                                                         \
    do {                                                              \
        cl_int e_ = (x);                                              \
        if (e_) {                                                     \
            printf("CL error %d at line %d\n", e_, __LINE__);         \
            goto fail;                                                \
        }                                                             \
    } while (0)

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static int cmp_ulong(const void *a, const void *b) {
    const cl_ulong x = *(const cl_ulong *)a, y = *(const cl_ulong *)b;
    return x < y ? -1 : x > y;
}

static const char usage_text[] =
    "usage: probe_wgmma_rate\n"
    "The rate of wgmma m64nNk16 (A from registers) by shape and by warpgroups a SM,\n"
    "in the prefill's recipes, on an NVIDIA Hopper GPU. No options. Exit status: 0\n"
    "measured, 1 no such GPU or an OpenCL error, 2 a bad command line.\n";

int main(int argc, char **argv) {
    int r = cli_parse("probe_wgmma_rate", usage_text, NULL, 0, argc, argv);
    if (r) return r == CLI_HELP ? 0 : 2;
    enum { GROUPS = 132, MAXT = 512, REPS = 5 };
    static char log[65536];
    cl_context ctx = 0;
    cl_command_queue q = 0;
    cl_mem src = 0, out = 0, smb = 0, clkb = 0;
    lazyattn_context *lc = NULL;
    int rc = 1;
    cl_platform_id plats[8];
    cl_uint np = 0;
    CK(clGetPlatformIDs(8, plats, &np));
    cl_platform_id plat = 0;
    for (cl_uint i = 0; i < np && i < 8; i++) {
        char name[256] = "";
        clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof name, name, 0);
        if (strstr(name, "NVIDIA")) plat = plats[i];
    }
    if (!plat) return printf("no NVIDIA platform\n"), 1;
    cl_device_id dev;
    CK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_GPU, 1, &dev, 0));
    cl_int err;
    ctx = clCreateContext(0, 1, &dev, 0, 0, &err);
    CK(err);
    q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    CK(err);
    if (lazyattn_context_create_from_cl(ctx, dev, q, NULL, &lc)) { /* for the round trip */
        printf("lazyattn context: %s\n", lazyattn_last_error());
        goto fail;
    }
    static uint16_t host[8192];
    srand(11);
    for (int i = 0; i < 8192; i++) { /* random f16 in [-1, 1): sign, exponent 14 or 13, mantissa */
        const unsigned x = (unsigned)rand();
        host[i] = (uint16_t)((x & 0x8000) | ((13u + (x >> 16 & 1)) << 10) | (x & 0x3ff));
    }
    src = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof host, host, &err);
    CK(err);
    out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(float) * GROUPS * MAXT, 0, &err);
    CK(err);
    smb = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(cl_uint) * GROUPS, 0, &err);
    CK(err);
    clkb = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(cl_ulong) * GROUPS, 0, &err);
    CK(err);
    printf("%-40s %2s %9s %12s %14s %4s\n", "recipe (a warpgroup's iteration)", "W", "TFLOP/s", "clk/iter/SM",
           "FLOP/clk/SM", "SMs");
    for (int ri = 0; ri < N_RECIPES; ri++) {
        const recipe *rc_ = &recipes[ri];
        double flop_it = 0; /* one warpgroup, one iteration */
        for (int g = 0; g < rc_->n_groups; g++) flop_it += 2.0 * 64 * rc_->g[g].n * 16 * rc_->g[g].count;
        for (int w = 1; w <= 4; w++) {
            const char *s = kernel_source(rc_, w);
            if (!s) {
                printf("kernel source too long\n");
                goto fail;
            }
            cl_program p = clCreateProgramWithSource(ctx, 1, &s, 0, &err);
            CK(err);
            err = clBuildProgram(p, 1, &dev, "", 0, 0);
            clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, 0);
            if (err) {
                printf("build %s W %d: %d: %.2000s\n", rc_->name, w, err, log);
                clReleaseProgram(p);
                goto fail;
            }
            cl_program p2 = NULL;
            const int st = lz_ptx_sm90a(lc, p, "-cl-nv-verbose", &p2);
            clReleaseProgram(p);
            if (st) {
                printf("sm_90a round trip %s W %d: %s\n", rc_->name, w, lazyattn_last_error());
                goto fail;
            }
            clGetProgramBuildInfo(p2, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, 0);
            if (strstr(log, "C75")) printf("ptx build %s W %d: %.1500s\n", rc_->name, w, log);
            cl_kernel k = clCreateKernel(p2, "rate", &err);
            clReleaseProgram(p2);
            CK(err);
            const int iters = 4096;
            clSetKernelArg(k, 0, sizeof src, &src);
            clSetKernelArg(k, 1, sizeof out, &out);
            clSetKernelArg(k, 2, sizeof smb, &smb);
            clSetKernelArg(k, 3, sizeof clkb, &clkb);
            clSetKernelArg(k, 4, sizeof iters, &iters);
            size_t lsz = (size_t)w * 128, gsz = lsz * GROUPS;
            double ms[REPS];
            for (int rep = -1; rep < REPS; rep++) {
                cl_event ev;
                err = clEnqueueNDRangeKernel(q, k, 1, 0, &gsz, &lsz, 0, 0, &ev);
                if (err) {
                    clReleaseKernel(k);
                    CK(err);
                }
                clWaitForEvents(1, &ev);
                cl_ulong t0 = 0, t1 = 0;
                clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, 0);
                clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, 0);
                clReleaseEvent(ev);
                if (rep >= 0) ms[rep] = (double)(t1 - t0) * 1e-6;
            }
            clReleaseKernel(k);
            cl_uint sms[GROUPS];
            cl_ulong clk[GROUPS];
            CK(clEnqueueReadBuffer(q, smb, 1, 0, sizeof sms, sms, 0, 0, 0));
            CK(clEnqueueReadBuffer(q, clkb, 1, 0, sizeof clk, clk, 0, 0, 0));
            int distinct = 0;
            unsigned char seen[1024] = {0};
            for (int i = 0; i < GROUPS; i++)
                if (sms[i] < 1024 && !seen[sms[i]]) seen[sms[i]] = 1, distinct++;
            qsort(ms, REPS, sizeof ms[0], cmp_double);
            qsort(clk, GROUPS, sizeof clk[0], cmp_ulong);
            const double flops = flop_it * w * iters * GROUPS, cpi = (double)clk[GROUPS / 2] / iters;
            printf("%-40s %2d %9.1f %12.1f %14.1f %4d\n", rc_->name, w, flops / (ms[REPS / 2] * 1e-3) * 1e-12, cpi,
                   flop_it * w / cpi, distinct);
            fflush(stdout);
        }
    }
    rc = 0;
fail:
    lazyattn_context_destroy(lc);
    if (clkb) clReleaseMemObject(clkb);
    if (smb) clReleaseMemObject(smb);
    if (out) clReleaseMemObject(out);
    if (src) clReleaseMemObject(src);
    if (q) clReleaseCommandQueue(q);
    if (ctx) clReleaseContext(ctx);
    return rc;
}
