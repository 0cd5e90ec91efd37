/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Probe (GPU only, not part of the build): which shared-memory layout and
 * descriptor strides does wgmma m64n16k16 (A from registers in the
 * mma.sync fragment layout, B K-major from local memory, no swizzle) read,
 * checked on random f16 data against a CPU product. Built through the PTX
 * round trip's text step, lz_ptx_patch (lib/ptx_sm90a.c). Built by meson as
 * build/bench/probe_wgmma_layout; runs on an NVIDIA Hopper GPU only.
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "internal.h"

static const char *src =
    "__kernel void wg(__global const ushort *A, __global const ushort *B, __global float *D,\n"
    "                 int layout, int lbo, int sbo) {\n"
    "  __local ushort Bs[16 * 16] __attribute__((aligned(1024)));\n"
    "  const int lid = get_local_id(0), lane = lid & 31, warp = lid >> 5, g = lane >> 2, t = lane & 3;\n"
    "  for (int i = lid; i < 256; i += 128) {\n"
    "    const int n = i / 16, k = i % 16;\n"
    "    const int off = layout == 0 ? (n >> 3) * 128 + (k >> 3) * 64 + (n & 7) * 8 + (k & 7)\n"
    "                                : (k >> 3) * 128 + (n >> 3) * 64 + (n & 7) * 8 + (k & 7);\n"
    "    Bs[off] = B[i];\n"
    "  }\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  const int r0 = warp * 16 + g;\n"
    "  uint a[4];\n"
    "  a[0] = A[r0 * 16 + 2 * t] | (uint)A[r0 * 16 + 2 * t + 1] << 16;\n"
    "  a[1] = A[(r0 + 8) * 16 + 2 * t] | (uint)A[(r0 + 8) * 16 + 2 * t + 1] << 16;\n"
    "  a[2] = A[r0 * 16 + 2 * t + 8] | (uint)A[r0 * 16 + 2 * t + 9] << 16;\n"
    "  a[3] = A[(r0 + 8) * 16 + 2 * t + 8] | (uint)A[(r0 + 8) * 16 + 2 * t + 9] << 16;\n"
    "  float d[8];\n"
    "  for (int i = 0; i < 8; i++) d[i] = 0.0f;\n"
    "  const ulong addr = (ulong)(uint)(size_t)Bs;\n"
    "  const ulong desc = ((addr & 0x3FFFF) >> 4) | ((ulong)(lbo >> 4) << 16) | ((ulong)(sbo >> 4) << 32);\n"
    "  asm volatile(\"//@wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
    "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n\"\n"
    "    \"//@wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\\n}\"\n"
    "    : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3]), \"+f\"(d[4]), \"+f\"(d[5]), \"+f\"(d[6]), \"+f\"(d[7])\n"
    "    : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(desc));\n"
    "  asm volatile(\"//@wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n"
    "  asm volatile(\"//@wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n"
    "  for (int j = 0; j < 2; j++) {\n"
    "    D[r0 * 16 + 8 * j + 2 * t] = d[4 * j];\n"
    "    D[r0 * 16 + 8 * j + 2 * t + 1] = d[4 * j + 1];\n"
    "    D[(r0 + 8) * 16 + 8 * j + 2 * t] = d[4 * j + 2];\n"
    "    D[(r0 + 8) * 16 + 8 * j + 2 * t + 1] = d[4 * j + 3];\n"
    "  }\n"
    "}\n";

#define CK(x)                                                         \
    do {                                                              \
        cl_int e_ = (x);                                              \
        if (e_) {                                                     \
            printf("CL error %d at line %d\n", e_, __LINE__);         \
            return 1;                                                 \
        }                                                             \
    } while (0)

static uint16_t to_half(float f) { /* round to nearest, normal range only */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
    if (e < 113) return (uint16_t)sign; /* tiny -> 0 */
    uint32_t h = ((e - 112) << 10) | (m >> 13);
    if (m & 0x1000) h++;
    return (uint16_t)(sign | h);
}
static float from_half(uint16_t h) {
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff, s = (uint32_t)(h & 0x8000) << 16;
    uint32_t x = e ? s | ((e + 112) << 23) | (m << 13) : s;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static const char usage_text[] =
    "usage: probe_wgmma_layout\n"
    "Which shared-memory layout and descriptor strides wgmma m64n16k16 reads, on an NVIDIA\n"
    "Hopper GPU. No options. Exit status: 0 a layout matched, 1 none did or no such GPU,\n"
    "2 a bad command line.\n";

int main(int argc, char **argv) {
    int r = cli_parse("probe_wgmma_layout", usage_text, NULL, 0, argc, argv);
    if (r) return r == CLI_HELP ? 0 : 2;
    cl_platform_id plats[8];
    cl_uint np;
    CK(clGetPlatformIDs(8, plats, &np));
    cl_platform_id plat = 0;
    for (cl_uint i = 0; i < np; i++) {
        char name[256];
        clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, 256, name, 0);
        if (strstr(name, "NVIDIA")) plat = plats[i];
    }
    if (!plat) return printf("no NVIDIA platform\n"), 1;
    cl_device_id dev;
    CK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_GPU, 1, &dev, 0));
    cl_int err;
    cl_context ctx = clCreateContext(0, 1, &dev, 0, 0, &err);
    CK(err);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    CK(err);
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, 0, &err);
    CK(err);
    static char log[65536];
    err = clBuildProgram(p, 1, &dev, "", 0, 0);
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, 0);
    if (err) return printf("build %d: %s\n", err, log), 1;
    size_t bsz;
    CK(clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bsz, &bsz, 0));
    char *ptx = malloc(bsz + 1);
    unsigned char *bp = (unsigned char *)ptx;
    CK(clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bp, &bp, 0));
    int n_markers, retargeted;
    char *out = lz_ptx_patch(ptx, bsz, &n_markers, &retargeted);
    free(ptx);
    if (!out || !retargeted || !n_markers) return printf("not sm_90 PTX with //@ markers\n"), 1;
    size_t len = strlen(out);
    const unsigned char *bin = (const unsigned char *)out;
    cl_int bst;
    cl_program p2 = clCreateProgramWithBinary(ctx, 1, &dev, &len, &bin, &bst, &err);
    free(out);
    CK(err);
    err = clBuildProgram(p2, 1, &dev, "", 0, 0);
    clGetProgramBuildInfo(p2, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, 0);
    if (err) return printf("ptx build %d: %s\n", err, log), 1;

    uint16_t A[64 * 16], B[16 * 16];
    float Af[64 * 16], Bf[16 * 16], Dref[64 * 16], D[64 * 16];
    srand(7);
    for (int i = 0; i < 64 * 16; i++) A[i] = to_half((float)rand() / RAND_MAX * 2 - 1), Af[i] = from_half(A[i]);
    for (int i = 0; i < 16 * 16; i++) B[i] = to_half((float)rand() / RAND_MAX * 2 - 1), Bf[i] = from_half(B[i]);
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < 16; n++) {
            double s = 0;
            for (int k = 0; k < 16; k++) s += (double)Af[m * 16 + k] * Bf[n * 16 + k];
            Dref[m * 16 + n] = (float)s;
        }
    cl_mem am = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, sizeof A, A, &err);
    cl_mem bm = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, sizeof B, B, &err);
    cl_mem dm = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof D, 0, &err);
    cl_kernel k = clCreateKernel(p2, "wg", &err);
    CK(err);
    const int combos[][3] = {{0, 128, 256}, {0, 256, 128}, {1, 128, 256}, {1, 256, 128}};
    int matches = 0;
    for (int c = 0; c < 4; c++) {
        clSetKernelArg(k, 0, sizeof am, &am);
        clSetKernelArg(k, 1, sizeof bm, &bm);
        clSetKernelArg(k, 2, sizeof dm, &dm);
        for (int a = 0; a < 3; a++) clSetKernelArg(k, 3 + a, 4, &combos[c][a]);
        size_t g = 128, l = 128;
        CK(clEnqueueNDRangeKernel(q, k, 1, 0, &g, &l, 0, 0, 0));
        CK(clEnqueueReadBuffer(q, dm, 1, 0, sizeof D, D, 0, 0, 0));
        double e = 0;
        for (int i = 0; i < 64 * 16; i++) e = fmax(e, fabs(D[i] - Dref[i]));
        printf("layout %s, LBO %d, SBO %d: max error %.3g%s\n",
               combos[c][0] ? "[kchunk][ngroup][8][8]" : "[ngroup][kchunk][8][8]", combos[c][1],
               combos[c][2], e, e < 1e-3 ? "  <- matches" : "");
        matches += e < 1e-3;
    }
    if (!matches) printf("no layout matches\n");
    return matches ? 0 : 1;
}
