/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Probe (device calls only, not part of `meson test`): what a short
 * bandwidth-bound kernel pays besides its bytes on NVIDIA OpenCL (issue 16:
 * the 8B's O and QKV weights, 33.5 and 50.3 MB, read in 8-12 us, measured
 * 55-64 % of the read ceiling per launch).
 *   empty  a kernel that does nothing, G work-groups of 256
 *   gs     float4 grid-stride sum (bench_gemm_small's plain read), G x 256
 *   u4     each work-group one contiguous range, 4 independent 16-byte
 *          ld.global.nc.L1::no_allocate.L2::256B per thread per step, G x 256
 *   bulk   each work-group one contiguous range through cp.async.bulk into a
 *          4-slot ring of 8 KB (one issuing thread, mbarriers), G x 128
 * For each: the median profiled time of one launch (START..END, after
 * warm-up), and the stream time: the END of the last of N back-to-back
 * launches minus the START of the first, over N (what a sequence of
 * launches costs each), with the median gap START(i+1) - END(i). Every
 * launch reads its own window of a 2 GiB buffer (cold in the 50 MB L2);
 * the data are random, and each kernel's sum is checked against the host's.
 *   usage: probe_launch [N_STREAM]
 * PROBE_ANY_DEVICE=1 takes any device (kernels without inline PTX only:
 * checks the host code on a CPU).
 * Build: cc -O2 -std=c11 bench/probe_launch.c -lOpenCL -lm -o probe_launch
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *src_common =
    "__kernel void empty(__global uint *out) { if (get_global_id(0) == 0xFFFFFFFFu) out[0] = 1; }\n"
    "__kernel void empty20(__global uint *out, __global uint *a1, __global uint *a2, ulong o1, ulong o2,\n"
    "    ulong o3, int i1, int i2, int i3, int i4, int i5, int i6, int i7, int i8, int i9, int i10,\n"
    "    __global float *f1, __global float *f2, __global float *f3, __global int *c) {\n"
    "  if (get_global_id(0) == 0xFFFFFFFFu) out[0] = i1 + i10 + (int)o3; }\n"
    /* xor of every uint: exact, order-free, checkable */
    "__kernel void gs(__global const uint4 *p, ulong off, ulong n, __global uint *out, int chk) {\n"
    "  uint4 s = (uint4)(0);\n"
    "  for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) s ^= p[off + i];\n"
    "  s.x ^= s.y ^ s.z ^ s.w;\n"
    "  if (chk) { if (s.x) atomic_xor(out, s.x); } else if (s.x == 0x9E3779B9u) out[1 + (get_group_id(0) & 1023)] = s.x;\n"
    "}\n";

static const char *src_nv =
    "inline uint4 ldw(__global const uint4 *p) {\n"
    "  uint a, b, c, d;\n"
    "  asm volatile(\"ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\"\n"
    "      : \"=r\"(a), \"=r\"(b), \"=r\"(c), \"=r\"(d) : \"l\"(p));\n"
    "  return (uint4)(a, b, c, d);\n"
    "}\n"
    "__kernel void u4(__global const uint4 *p, ulong off, ulong n, __global uint *out, int chk) {\n"
    "  const ulong per = (n + get_num_groups(0) - 1) / get_num_groups(0);\n"
    "  const ulong b = get_group_id(0) * per, e = b + per < n ? b + per : n;\n"
    "  const uint L = get_local_size(0);\n"
    "  uint4 s = (uint4)(0);\n"
    "  ulong i = b + get_local_id(0);\n"
    "  for (; i + 3 * L < e; i += 4 * L) {\n"
    "    uint4 v0 = ldw(p + off + i), v1 = ldw(p + off + i + L), v2 = ldw(p + off + i + 2 * L),\n"
    "          v3 = ldw(p + off + i + 3 * L);\n"
    "    s ^= v0 ^ v1 ^ v2 ^ v3;\n"
    "  }\n"
    "  for (; i < e; i += L) s ^= ldw(p + off + i);\n"
    "  s.x ^= s.y ^ s.z ^ s.w;\n"
    "  if (chk) { if (s.x) atomic_xor(out, s.x); } else if (s.x == 0x9E3779B9u) out[1 + (get_group_id(0) & 1023)] = s.x;\n"
    "}\n"
    "#define SADDR(p) ((uint)(size_t)(p))\n"
    "inline void mbar_wait(uint bar, uint parity) {\n"
    "  uint done = 0;\n"
    "  while (!done) asm volatile(\"{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\"\n"
    "                             : \"=r\"(done) : \"r\"(bar), \"r\"(parity) : \"memory\");\n"
    "}\n"
    "#define SLOT 8192\n"
    "#define NSLOT 4\n"
    "inline void issue(uint dst, __global const uchar *src, uint bytes, uint bar) {\n"
    "  asm volatile(\"mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\" :: \"r\"(bar), \"r\"(bytes) : \"memory\");\n"
    "  asm volatile(\"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\"\n"
    "               :: \"r\"(dst), \"l\"(src), \"r\"(bytes), \"r\"(bar) : \"memory\");\n"
    "}\n"
    "__kernel void bulk(__global const uint4 *p, ulong off, ulong n, __global uint *out, int chk) {\n"
    "  __local uint4 ring[NSLOT * SLOT / 16] __attribute__((aligned(128)));\n"
    "  __local ulong bars[NSLOT] __attribute__((aligned(8)));\n"
    "  const uint t = get_local_id(0);\n"
    "  const ulong per = ((n + get_num_groups(0) - 1) / get_num_groups(0) + 511) / 512 * 512;\n"
    "  const ulong b = get_group_id(0) * per < n ? get_group_id(0) * per : n;\n"
    "  const ulong e = b + per < n ? b + per : n;\n"
    "  const uint chunks = (uint)((e - b + SLOT / 16 - 1) / (SLOT / 16));\n"
    "  __global const uchar *base = (__global const uchar *)(p + off + b);\n"
    "  if (t == 0) {\n"
    "    for (int s = 0; s < NSLOT; s++)\n"
    "      asm volatile(\"mbarrier.init.shared.b64 [%0], 1;\" :: \"r\"(SADDR(&bars[s])) : \"memory\");\n"
    "    asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\");\n"
    "  }\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  if (t == 0)\n"
    "    for (uint c = 0; c < NSLOT && c < chunks; c++) {\n"
    "      const ulong rem = (e - b) * 16 - (ulong)c * SLOT;\n"
    "      issue(SADDR(ring + c * (SLOT / 16)), base + (ulong)c * SLOT, rem < SLOT ? (uint)rem : SLOT,\n"
    "            SADDR(&bars[c]));\n"
    "    }\n"
    "  uint4 s = (uint4)(0);\n"
    "  for (uint c = 0; c < chunks; c++) {\n"
    "    const uint sl = c % NSLOT;\n"
    "    mbar_wait(SADDR(&bars[sl]), (c / NSLOT) & 1);\n"
    "    const ulong rem = (e - b) * 16 - (ulong)c * SLOT;\n"
    "    const uint words = (rem < SLOT ? (uint)rem : SLOT) / 16;\n"
    "    for (uint i = t; i < words; i += get_local_size(0)) s ^= ring[sl * (SLOT / 16) + i];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    if (t == 0 && c + NSLOT < chunks) {\n"
    "      const ulong r2 = (e - b) * 16 - (ulong)(c + NSLOT) * SLOT;\n"
    "      issue(SADDR(ring + sl * (SLOT / 16)), base + (ulong)(c + NSLOT) * SLOT, r2 < SLOT ? (uint)r2 : SLOT,\n"
    "            SADDR(&bars[sl]));\n"
    "    }\n"
    "  }\n"
    "  s.x ^= s.y ^ s.z ^ s.w;\n"
    "  if (chk) { if (s.x) atomic_xor(out, s.x); } else if (s.x == 0x9E3779B9u) out[1 + (get_group_id(0) & 1023)] = s.x;\n"
    "}\n";

#define MAXN 64
#define REPS 21

static cl_command_queue q;
static cl_kernel k_empty, k_empty20, k_gs, k_u4, k_bulk;
static cl_int chk_flag;
static cl_mem buf, outb;
static size_t buf_words; /* uint4 */
static uint32_t *host;   /* the buffer's data, for the checks */

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint32_t host_xor(size_t off, size_t n) {
    uint32_t s = 0;
    for (size_t i = off * 4; i < (off + n) * 4; i++) s ^= host[i];
    return s;
}

/* One kernel launch of `bytes` (0: empty) at window w. */
static cl_int launch(cl_kernel k, size_t groups, size_t local, size_t bytes, size_t w, cl_event *ev) {
    const cl_ulong n = bytes / 16, off = (cl_ulong)w * n;
    if (k != k_empty && k != k_empty20) {
        clSetKernelArg(k, 0, sizeof buf, &buf);
        clSetKernelArg(k, 1, sizeof off, &off);
        clSetKernelArg(k, 2, sizeof n, &n);
        clSetKernelArg(k, 3, sizeof outb, &outb);
        clSetKernelArg(k, 4, sizeof chk_flag, &chk_flag);
    } else if (k == k_empty20) {
        cl_ulong o = 3;
        cl_int i = 1;
        for (int a = 0; a < 20; a++) {
            if (a < 3 || a >= 16) clSetKernelArg(k, a, sizeof outb, &outb);
            else if (a < 6) clSetKernelArg(k, a, sizeof o, &o);
            else clSetKernelArg(k, a, sizeof i, &i);
        }
    } else {
        clSetKernelArg(k, 0, sizeof outb, &outb);
    }
    const size_t global = groups * local;
    return clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, ev);
}

static cl_ulong ts(cl_event e, cl_profiling_info what) {
    cl_ulong v = 0;
    clGetEventProfilingInfo(e, what, sizeof v, &v, NULL);
    return v;
}

/* Checks one launch's sum; returns 0 when right. */
static int check(cl_kernel k, size_t groups, size_t local, size_t bytes) {
    if (k == k_empty || k == k_empty20) return 0;
    const uint32_t zero = 0;
    clEnqueueWriteBuffer(q, outb, CL_TRUE, 0, 4, &zero, 0, NULL, NULL);
    chk_flag = 1;
    launch(k, groups, local, bytes, 1, NULL);
    chk_flag = 0;
    uint32_t got = 0;
    clEnqueueReadBuffer(q, outb, CL_TRUE, 0, 4, &got, 0, NULL, NULL);
    const uint32_t want = host_xor(bytes / 16, bytes / 16);
    if (got != want) printf("  CHECK FAILED: %08x, host %08x\n", got, want);
    return got != want;
}

static double measure(const char *name, cl_kernel k, size_t groups, size_t local, size_t bytes,
                    int nstream, double ceiling) {
    if (!k) return 0.0;
    const size_t windows = bytes ? buf_words / (bytes / 16) : 1;
    double one[REPS];
    cl_event e[MAXN];
    int bad = check(k, groups, local, bytes);
    for (int r = -3; r < REPS; r++) { /* one launch, waited for: no neighbour */
        cl_event ev;
        launch(k, groups, local, bytes, (size_t)(r + 3) % windows, &ev);
        clWaitForEvents(1, &ev);
        if (r >= 0) one[r] = (ts(ev, CL_PROFILING_COMMAND_END) - ts(ev, CL_PROFILING_COMMAND_START)) * 1e-3;
        clReleaseEvent(ev);
    }
    double span[5], gaps[5 * MAXN], dur[5 * MAXN];
    int ng = 0, nd = 0;
    for (int r = 0; r < 5; r++) {
        for (int i = 0; i < nstream; i++) launch(k, groups, local, bytes, (size_t)(r * nstream + i) % windows, &e[i]);
        clFinish(q);
        span[r] = (ts(e[nstream - 1], CL_PROFILING_COMMAND_END) - ts(e[0], CL_PROFILING_COMMAND_START)) * 1e-3 / nstream;
        for (int i = 0; i < nstream; i++) {
            dur[nd++] = (ts(e[i], CL_PROFILING_COMMAND_END) - ts(e[i], CL_PROFILING_COMMAND_START)) * 1e-3;
            if (i) gaps[ng++] = ((double)ts(e[i], CL_PROFILING_COMMAND_START) - (double)ts(e[i - 1], CL_PROFILING_COMMAND_END)) * 1e-3;
        }
        for (int i = 0; i < nstream; i++) clReleaseEvent(e[i]);
    }
    qsort(one, REPS, sizeof *one, cmpd);
    qsort(span, 5, sizeof *span, cmpd);
    qsort(gaps, ng, sizeof *gaps, cmpd);
    qsort(dur, nd, sizeof *dur, cmpd);
    const double mb = bytes / 1e6;
    if (bytes)
        printf("%-6s G %5zu x %3zu  %6.1f MB: one %7.2f us %5.1f%% | in stream: each %7.2f us %5.1f%%, span/N %7.2f us %5.1f%%, gap %5.2f us%s\n",
               name, groups, local, mb, one[REPS / 2], 100 * bytes / (one[REPS / 2] * 1e3) / ceiling,
               dur[nd / 2], 100 * bytes / (dur[nd / 2] * 1e3) / ceiling, span[2],
               100 * bytes / (span[2] * 1e3) / ceiling, gaps[ng / 2], bad ? "  CHECK FAILED" : "");
    else
        printf("%-6s G %5zu x %3zu  empty:   one %7.2f us        | in stream: each %7.2f us,        span/N %7.2f us,        gap %5.2f us\n",
               name, groups, local, one[REPS / 2], dur[nd / 2], span[2], gaps[ng / 2]);
    return dur[nd / 2];
}

int main(int argc, char **argv) {
    int nstream = argc > 1 ? atoi(argv[1]) : 32;
    if (nstream < 2 || nstream > MAXN) {
        fprintf(stderr, "probe_launch: N_STREAM must be 2..%d\n", MAXN);
        return 2;
    }
    const int any = getenv("PROBE_ANY_DEVICE") != NULL;
    cl_platform_id plats[8];
    cl_uint np = 0;
    clGetPlatformIDs(8, plats, &np);
    cl_device_id dev = NULL;
    int nv = 0;
    for (cl_uint i = 0; i < np && !dev; i++) {
        char name[256] = "";
        clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
        if (!any && !strstr(name, "NVIDIA")) continue;
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 1, &dev, NULL) != CL_SUCCESS) dev = NULL;
        nv = strstr(name, "NVIDIA") != NULL;
    }
    if (!dev) {
        printf("no NVIDIA OpenCL device (PROBE_ANY_DEVICE=1 for any)\n");
        return 77;
    }
    char dname[256] = "";
    cl_uint cus = 0;
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof dname, dname, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    const char *srcs[2] = {src_common, src_nv};
    cl_program prog = clCreateProgramWithSource(ctx, nv ? 2 : 1, srcs, NULL, &err);
    if (clBuildProgram(prog, 1, &dev, "", NULL, NULL) != CL_SUCCESS) {
        char log[16384] = "";
        clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        printf("build failed:\n%s\n", log);
        return 1;
    }
    k_empty = clCreateKernel(prog, "empty", &err);
    k_empty20 = clCreateKernel(prog, "empty20", &err);
    k_gs = clCreateKernel(prog, "gs", &err);
    if (nv) {
        k_u4 = clCreateKernel(prog, "u4", &err);
        k_bulk = clCreateKernel(prog, "bulk", &err);
    }
    const size_t bytes = any && !nv ? (size_t)64 << 20 : (size_t)1 << 31;
    buf_words = bytes / 16;
    host = malloc(bytes);
    if (!host) return 1;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < bytes / 4; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        host[i] = (uint32_t)(rng >> 32);
    }
    buf = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, host, &err);
    outb = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4 * 1025, NULL, &err); /* out[0], out[1 + 0..1023] */
    if (!buf || !outb) {
        printf("buffers: error %d\n", err);
        return 1;
    }
    /* warm the clock: ~0.3 s of reads */
    for (int i = 0; i < 40; i++) launch(k_gs, (size_t)cus * 8, 256, bytes / 2, (size_t)i % 2, NULL);
    clFinish(q);
    double t[9];
    for (int r = 0; r < 9; r++) {
        cl_event ev;
        launch(k_gs, (size_t)cus * 8, 256, bytes, 0, &ev);
        clWaitForEvents(1, &ev);
        t[r] = (ts(ev, CL_PROFILING_COMMAND_END) - ts(ev, CL_PROFILING_COMMAND_START)) * 1e-9;
        clReleaseEvent(ev);
    }
    qsort(t, 9, sizeof *t, cmpd);
    const double ceiling = bytes / t[4] * 1e-9; /* GB/s */
    printf("device: %s, %u CUs; read ceiling (gs over %zu MB) %.0f GB/s; stream of %d launches\n", dname,
           cus, bytes >> 20, ceiling, nstream);
    const size_t G[] = {1, cus, 2 * (size_t)cus, 1056, 4096};
    for (size_t i = 0; i < sizeof G / sizeof *G; i++) measure("empty", k_empty, G[i], 256, 0, nstream, ceiling);
    measure("empty20", k_empty20, 264, 256, 0, nstream, ceiling);
    measure("empty20", k_empty20, 1056, 256, 0, nstream, ceiling);
    /* 8.4 .. 134 MB: time = fixed + bytes / rate, fitted per kernel shape */
    const size_t sizes[] = {(size_t)1024 * 4096 * 2, (size_t)2048 * 4096 * 2, (size_t)4096 * 4096 * 2,
                            (size_t)6144 * 4096 * 2, (size_t)8192 * 4096 * 2, (size_t)16384 * 4096 * 2};
    const int ns = (int)(sizeof sizes / sizeof *sizes);
    struct { const char *name; cl_kernel k; size_t g, l; } cfg[] = {
        {"gs", k_gs, 1056, 256},         {"gs", k_gs, 264, 256},         {"u4", k_u4, 264, 256},
        {"u4", k_u4, 132, 512},          {"u4", k_u4, 264, 512},         {"bulk", k_bulk, 264, 128},
        {"bulk", k_bulk, 396, 128},      {"bulk", k_bulk, 132, 256},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
        if (!cfg[c].k) continue;
        double sx = 0, sy = 0, sxx = 0, sxy = 0;
        for (int si = 0; si < ns; si++) {
            const size_t b = any && !nv ? sizes[si] / 16 : sizes[si];
            const double us = measure(cfg[c].name, cfg[c].k, cfg[c].g, cfg[c].l, b, nstream, ceiling);
            sx += b / 1e6, sy += us, sxx += (b / 1e6) * (b / 1e6), sxy += (b / 1e6) * us;
        }
        const double slope = (ns * sxy - sx * sy) / (ns * sxx - sx * sx), icpt = (sy - slope * sx) / ns;
        printf("FIT %-5s G %5zu x %3zu: each-in-stream us = %.2f + MB / %.0f GB/s\n", cfg[c].name, cfg[c].g,
               cfg[c].l, icpt, 1e3 / slope);
    }
    clReleaseMemObject(buf);
    clReleaseMemObject(outb);
    free(host);
    return 0;
}
