/* SPDX-License-Identifier: Apache-2.0 */
/* Probe (device calls only): does OpenCL's async_work_group_copy stream
 * global memory into local memory asynchronously on this device (on NVIDIA:
 * is it lowered to cp.async)? Writes the program's PTX (NVIDIA returns PTX
 * as the program binary) and times, over a 1 GiB buffer of uint4:
 *   plain   each work-item sums its uint4s (grid-stride, 4 loads in flight):
 *           the read ceiling of a simple kernel;
 *   async   each work-group walks its share in tiles of T uint4, copying
 *           tile i + 1 with async_work_group_copy while it sums tile i from
 *           local memory (two local buffers);
 *   sync    the same walk, each tile copied by the work-items' own loads and
 *           stores (what async would be if the copy were synchronous).
 * GB/s from profiling events, median of 9 after 2 warm-ups.
 *   usage: probe_async_copy OUT.ptx
 * PROBE_ANY_DEVICE=1 takes any device (a CPU, to check the source builds).
 * Build: cc -O2 bench/probe_async_copy.c -lOpenCL -o probe_async_copy */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *src =
    "__kernel void plain(__global const uint4 *x, ulong n, __global uint *out) {\n"
    "  size_t g = get_global_id(0), st = get_global_size(0); uint4 s = 0;\n"
    "  for (size_t i = g; i + 3 * st < n; i += 4 * st) {\n"
    "    uint4 a = x[i], b = x[i + st], c = x[i + 2 * st], d = x[i + 3 * st];\n"
    "    s += a ^ b ^ c ^ d; }\n"
    "  if ((s.x ^ s.y ^ s.z ^ s.w) == 0x12345678u) out[0] = 1; }\n"
    "__kernel void async(__global const uint4 *x, ulong n, __global uint *out) {\n"
    "  __local uint4 buf[2][T];\n"
    "  size_t per = n / get_num_groups(0), base = get_group_id(0) * per, tiles = per / T;\n"
    "  uint4 s = 0; event_t ev = async_work_group_copy(buf[0], x + base, T, 0);\n"
    "  for (size_t t = 0; t < tiles; t++) {\n"
    "    event_t nx = 0;\n"
    "    if (t + 1 < tiles) nx = async_work_group_copy(buf[(t + 1) & 1], x + base + (t + 1) * T, T, 0);\n"
    "    wait_group_events(1, &ev);\n"
    "    for (int i = get_local_id(0); i < T; i += get_local_size(0)) s += buf[t & 1][i];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    ev = nx; }\n"
    "  if ((s.x ^ s.y ^ s.z ^ s.w) == 0x12345678u) out[0] = 1; }\n"
    "__kernel void sync(__global const uint4 *x, ulong n, __global uint *out) {\n"
    "  __local uint4 buf[T];\n"
    "  size_t per = n / get_num_groups(0), base = get_group_id(0) * per, tiles = per / T;\n"
    "  uint4 s = 0;\n"
    "  for (size_t t = 0; t < tiles; t++) {\n"
    "    for (int i = get_local_id(0); i < T; i += get_local_size(0)) buf[i] = x[base + t * T + i];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    for (int i = get_local_id(0); i < T; i += get_local_size(0)) s += buf[i];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE); }\n"
    "  if ((s.x ^ s.y ^ s.z ^ s.w) == 0x12345678u) out[0] = 1; }\n";

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double time_ms(cl_command_queue q, cl_kernel k, size_t global, size_t local) {
    double t[9];
    for (int r = -2; r < 9; r++) {
        cl_event e;
        if (clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, &e) != CL_SUCCESS) return -1;
        clWaitForEvents(1, &e);
        cl_ulong a = 0, b = 0;
        clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof a, &a, NULL);
        clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof b, &b, NULL);
        clReleaseEvent(e);
        if (r >= 0) t[r] = (double)(b - a) * 1e-6;
    }
    qsort(t, 9, sizeof t[0], cmp);
    return t[4];
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: probe_async_copy OUT.ptx\n");
        return 2;
    }
    cl_platform_id pl[8];
    cl_uint np = 0;
    clGetPlatformIDs(8, pl, &np);
    cl_device_id dev = NULL;
    for (cl_uint i = 0; i < np && !dev; i++)
        if (clGetDeviceIDs(pl[i], getenv("PROBE_ANY_DEVICE") ? CL_DEVICE_TYPE_ALL : CL_DEVICE_TYPE_GPU, 1, &dev, NULL) != CL_SUCCESS) dev = NULL;
    if (!dev) { fprintf(stderr, "probe_async_copy: no GPU\n"); return 1; }
    cl_uint cus = 0;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    const cl_ulong n = (1ull << 30) / 16;
    cl_mem x = clCreateBuffer(ctx, CL_MEM_READ_ONLY, n * 16, NULL, &err);
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4, NULL, &err);
    if (err != CL_SUCCESS) { fprintf(stderr, "buffers: %d\n", err); return 1; }
    cl_uint pattern = 0x9E3779B9u;
    clEnqueueFillBuffer(q, x, &pattern, sizeof pattern, 0, n * 16, 0, NULL, NULL);
    static const int tiles[] = {256, 512, 1024};
    for (int ti = 0; ti < 3; ti++) {
        char opt[64];
        snprintf(opt, sizeof opt, "-DT=%d", tiles[ti]);
        cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
        err = clBuildProgram(p, 1, &dev, opt, NULL, NULL);
        if (err != CL_SUCCESS) {
            char log[8192] = {0};
            clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
            fprintf(stderr, "build %s: %d\n%s\n", opt, err, log);
            return 1;
        }
        if (ti == 0) {
            size_t bs = 0;
            clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bs, &bs, NULL);
            unsigned char *bin = malloc(bs + 1);
            clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL);
            FILE *f = fopen(argv[1], "wb");
            if (f) fwrite(bin, 1, bs, f), fclose(f);
            free(bin);
        }
        static const char *names[] = {"plain", "async", "sync"};
        for (int kn = 0; kn < 3; kn++) {
            if (kn == 0 && ti > 0) continue;
            cl_kernel k = clCreateKernel(p, names[kn], &err);
            clSetKernelArg(k, 0, sizeof x, &x);
            clSetKernelArg(k, 1, sizeof n, &n);
            clSetKernelArg(k, 2, sizeof out, &out);
            static const int wg_per_cu[] = {1, 2, 4, 8, 16};
            for (int w = 0; w < 5; w++) {
                for (int ls = 128; ls <= 256; ls *= 2) {
                    size_t groups = (size_t)wg_per_cu[w] * cus;
                    double ms = time_ms(q, k, groups * ls, ls);
                    /* bytes read: whole tiles of each group's share (async, sync) */
                    double bytes = kn ? (double)(n / groups / tiles[ti]) * tiles[ti] * groups * 16 : (double)n * 16;
                    printf("%-5s T=%4d  %2d groups/CU x %3d: %8.3f ms  %7.1f GB/s\n", names[kn],
                           kn ? tiles[ti] : 0, wg_per_cu[w], ls, ms, ms > 0 ? bytes / ms * 1e-6 : 0);
                }
            }
            clReleaseKernel(k);
        }
        clReleaseProgram(p);
    }
    return 0;
}
