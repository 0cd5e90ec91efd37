/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Probe (GPU only, not part of `meson test`): wgmma m64nNk16 with A from
 * registers (the mma.sync A-fragment layout, warp w of the warpgroup = rows
 * 16w..16w+15) for N = 16, 32, 64, 128, over K = 64 (four k16 steps, the
 * descriptor moved along K between them: the P.V product of a 64-key tile),
 * with B from local memory in four layouts:
 *   kmaj      K-major, no swizzle, 8x8 core matrices (v6's K tile): B^T [n][k]
 *   kmaj128   K-major, 128-byte swizzle: rows of 64 k (128 bytes), 8-row atoms
 *   mn        MN-major, no swizzle (imm-trans-b 1): B [k][n] (V as stored,
 *             [key][dim]) in 8x8 core matrices of 8 k-rows x 16 bytes of n
 *   mn128     MN-major, 128-byte swizzle (imm-trans-b 1): blocks of 64 n
 *             (128-byte rows over k), rows XOR-swizzled in 8-row atoms
 * each with CUTLASS's reading of the descriptor's two offsets (leading /
 * stride byte offset) and, for K-major or where that fails, the swapped one,
 * checked against a CPU product of the same f16 data.
 * The host lays B out byte by byte; the kernel copies it verbatim into local
 * memory, so only the descriptor decides what wgmma reads. Built through the
 * PTX round trip's text step, lz_ptx_patch (lib/ptx_sm90a.c).
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

#define KTOT 64

/* The kernel for one N and one imm-trans-b, as source text. */
static char *kernel_source(int N, int trans) {
    static char buf[16384];
    char dlist[1024] = "", dops[4096] = "";
    int nd = N / 2, a = 0, b = 0;
    for (int i = 0; i < nd; i++) {
        a += snprintf(dlist + a, sizeof dlist - a, "%s%%%d", i ? "," : "", i);
        b += snprintf(dops + b, sizeof dops - b, "%s\"+f\"(d[%d])", i ? "," : "", i);
    }
    snprintf(buf, sizeof buf,
             "__kernel void wg(__global const ushort *A, __global const ushort *B, __global float *D,\n"
             "                 int lbo, int sbo, int mode, int kstep) {\n"
             "  __local ushort Bs[%d * %d] __attribute__((aligned(1024)));\n"
             "  const int lid = get_local_id(0), lane = lid & 31, warp = lid >> 5, g = lane >> 2, t = lane & 3;\n"
             "  for (int i = lid; i < %d * %d; i += 128) Bs[i] = B[i];\n"
             "  barrier(CLK_LOCAL_MEM_FENCE);\n"
             "  asm volatile(\"//@fence.proxy.async.shared::cta;\" ::: \"memory\");\n"
             "  barrier(CLK_LOCAL_MEM_FENCE);\n"
             "  const int r0 = warp * 16 + g;\n"
             "  float d[%d];\n"
             "  for (int i = 0; i < %d; i++) d[i] = 0.0f;\n"
             "  const ulong addr = (ulong)(uint)(size_t)Bs;\n"
             "  for (int s = 0; s < %d / 16; s++) {\n"
             "    uint a[4];\n"
             "    const int k0 = 16 * s;\n"
             "    a[0] = A[r0 * %d + k0 + 2 * t] | (uint)A[r0 * %d + k0 + 2 * t + 1] << 16;\n"
             "    a[1] = A[(r0 + 8) * %d + k0 + 2 * t] | (uint)A[(r0 + 8) * %d + k0 + 2 * t + 1] << 16;\n"
             "    a[2] = A[r0 * %d + k0 + 2 * t + 8] | (uint)A[r0 * %d + k0 + 2 * t + 9] << 16;\n"
             "    a[3] = A[(r0 + 8) * %d + k0 + 2 * t + 8] | (uint)A[(r0 + 8) * %d + k0 + 2 * t + 9] << 16;\n"
             "    const ulong ad = addr + (ulong)(s == 0 ? 0 : s == 1 ? kstep : s == 2 ? 2 * kstep : 3 * kstep);\n"
             "    const ulong desc = ((ad & 0x3FFFF) >> 4) | ((ulong)(lbo >> 4) << 16) | ((ulong)(sbo >> 4) << 32)"
             " | ((ulong)mode << 62);\n"
             "    asm volatile(\"//@wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
             "    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n\"\n"
             "      \"//@wgmma.mma_async.sync.aligned.m64n%dk16.f32.f16.f16 {%s}, {%%%d,%%%d,%%%d,%%%d}, %%%d, p, 1, 1, %d;\\n}\"\n"
             "      : %s\n"
             "      : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(desc));\n"
             "    asm volatile(\"//@wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n"
             "    asm volatile(\"//@wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n"
             "  }\n"
             "  for (int j = 0; j < %d / 8; j++) {\n"
             "    D[r0 * %d + 8 * j + 2 * t] = d[4 * j];\n"
             "    D[r0 * %d + 8 * j + 2 * t + 1] = d[4 * j + 1];\n"
             "    D[(r0 + 8) * %d + 8 * j + 2 * t] = d[4 * j + 2];\n"
             "    D[(r0 + 8) * %d + 8 * j + 2 * t + 1] = d[4 * j + 3];\n"
             "  }\n"
             "}\n",
             KTOT, N, KTOT, N, nd, nd, KTOT, KTOT, KTOT, KTOT, KTOT, KTOT, KTOT, KTOT, KTOT, N, dlist,
             nd, nd + 1, nd + 2, nd + 3, nd + 4, trans, dops, N, N, N, N, N);
    return buf;
}

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

enum { L_KMAJ, L_KMAJ128, L_MN, L_MN128, L_COUNT };
static const char *const lname[L_COUNT] = {"kmaj", "kmaj128", "mn", "mn128"};

/* Byte offset of B[k][n] (k < KTOT, n < N) in layout l; the natural
 * (leading, stride) byte offsets and the descriptor step per k16 in *lbo,
 * *sbo, *kstep, the swizzle mode in *mode. 0 when l does not apply to N. */
static int layout(int l, int N, int k, int n, size_t *off, int *lbo, int *sbo, int *kstep, int *mode) {
    switch (l) {
    case L_KMAJ: /* [n/8][k/8][n%8][k%8]: LBO along k, SBO along n (v6) */
        *lbo = 128, *sbo = KTOT / 8 * 128, *kstep = 256, *mode = 0;
        *off = (size_t)(n >> 3) * *sbo + (k >> 3) * 128 + (n & 7) * 16 + (k & 7) * 2;
        return 1;
    case L_KMAJ128: /* blocks of 64 k: [k/64][n][128 bytes], chunk ^= n % 8 */
        *lbo = 16, *sbo = 1024, *kstep = 32, *mode = 1;
        *off = (size_t)(k >> 6) * N * 128 + n * 128 + ((((k >> 3) & 7) ^ (n & 7)) << 4) + (k & 7) * 2;
        return 1;
    case L_MN: /* [k/8][n/8][k%8][n%8]: 8 k-rows x 16 bytes of n per core matrix */
        *lbo = N / 8 * 128, *sbo = 128, *kstep = 2 * (N / 8) * 128, *mode = 0;
        *off = (size_t)(k >> 3) * (N / 8) * 128 + (n >> 3) * 128 + (k & 7) * 16 + (n & 7) * 2;
        return 1;
    case L_MN128: /* blocks of 64 n: [n/64][k][128 bytes], chunk ^= k % 8 */
        if (N < 64) return 0;
        *lbo = KTOT * 128, *sbo = 1024, *kstep = 2048, *mode = 1;
        *off = (size_t)(n >> 6) * KTOT * 128 + k * 128 + ((((n >> 3) & 7) ^ (k & 7)) << 4) + (n & 7) * 2;
        return 1;
    }
    return 0;
}

static const char usage_text[] =
    "usage: probe_wgmma_rs\n"
    "wgmma m64nNk16 with A from registers (N = 16..128, K = 64) and B K-major or MN-major,\n"
    "unswizzled or 128-byte swizzled, on an NVIDIA Hopper GPU, against a CPU product.\n"
    "No options. Exit status: 0 every N matched in the MN-major layouts, 1 not (or no such\n"
    "GPU), 2 a bad command line.\n";

int main(int argc, char **argv) {
    int r = cli_parse("probe_wgmma_rs", usage_text, NULL, 0, argc, argv);
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

    enum { NMAX = 128 };
    static uint16_t A[64 * KTOT], Bl[KTOT * NMAX];
    static float Af[64 * KTOT], Bf[KTOT * NMAX], Dref[64 * NMAX], D[64 * NMAX];
    srand(7);
    for (int i = 0; i < 64 * KTOT; i++) A[i] = to_half((float)rand() / RAND_MAX * 2 - 1), Af[i] = from_half(A[i]);
    for (int i = 0; i < KTOT * NMAX; i++) Bf[i] = from_half(to_half((float)rand() / RAND_MAX * 2 - 1));
    cl_mem am = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, sizeof A, A, &err);
    cl_mem bm = clCreateBuffer(ctx, CL_MEM_READ_ONLY, sizeof Bl, 0, &err);
    cl_mem dm = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof D, 0, &err);
    int mn_ok[5] = {0}, mn128_ok[5] = {0};
    const int Ns[4] = {16, 32, 64, 128};
    static char log[65536];
    for (int ni = 0; ni < 4; ni++) {
        const int N = Ns[ni]; /* B[k][n] = Bf[k * NMAX + n] */
        for (int m = 0; m < 64; m++)
            for (int n = 0; n < N; n++) {
                double s = 0;
                for (int k = 0; k < KTOT; k++) s += (double)Af[m * KTOT + k] * Bf[k * NMAX + n];
                Dref[m * N + n] = (float)s;
            }
        cl_kernel kern[2];
        for (int trans = 0; trans < 2; trans++) {
            const char *src = kernel_source(N, trans);
            cl_program p = clCreateProgramWithSource(ctx, 1, &src, 0, &err);
            CK(err);
            err = clBuildProgram(p, 1, &dev, "", 0, 0);
            clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, 0);
            if (err) return printf("build N %d: %d: %s\n", N, err, log), 1;
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
            if (err) return printf("ptx build N %d: %d: %s\n", N, err, log), 1;
            kern[trans] = clCreateKernel(p2, "wg", &err);
            CK(err);
            clReleaseProgram(p);
            clReleaseProgram(p2);
        }
        for (int l = 0; l < L_COUNT; l++) {
            size_t off;
            int lbo, sbo, kstep, mode;
            if (!layout(l, N, 0, 0, &off, &lbo, &sbo, &kstep, &mode)) continue;
            memset(Bl, 0, sizeof Bl);
            for (int k = 0; k < KTOT; k++)
                for (int n = 0; n < N; n++) {
                    layout(l, N, k, n, &off, &lbo, &sbo, &kstep, &mode);
                    Bl[off / 2] = to_half(Bf[k * NMAX + n]);
                }
            CK(clEnqueueWriteBuffer(q, bm, 1, 0, sizeof Bl, Bl, 0, 0, 0));
            const int trans = l == L_MN || l == L_MN128;
            /* the swapped reading of the MN-major and swizzled layouts can
             * read past the tile and fault (CL_OUT_OF_RESOURCES, first device
             * call): tried only where the natural one fails */
            int natural_ok = 0;
            for (int swap = 0; swap < 2; swap++) {
                if (swap && l != L_KMAJ && natural_ok) continue;
                const int lb = swap ? sbo : lbo, sb = swap ? lbo : sbo;
                cl_kernel k = kern[trans];
                clSetKernelArg(k, 0, sizeof am, &am);
                clSetKernelArg(k, 1, sizeof bm, &bm);
                clSetKernelArg(k, 2, sizeof dm, &dm);
                clSetKernelArg(k, 3, 4, &lb);
                clSetKernelArg(k, 4, 4, &sb);
                clSetKernelArg(k, 5, 4, &mode);
                clSetKernelArg(k, 6, 4, &kstep);
                size_t g = 128, lsz = 128;
                for (int i = 0; i < 64 * N; i++) D[i] = NAN;
                CK(clEnqueueWriteBuffer(q, dm, 1, 0, sizeof(float) * 64 * N, D, 0, 0, 0));
                CK(clEnqueueNDRangeKernel(q, k, 1, 0, &g, &lsz, 0, 0, 0));
                CK(clEnqueueReadBuffer(q, dm, 1, 0, sizeof(float) * 64 * N, D, 0, 0, 0));
                double e = 0;
                for (int i = 0; i < 64 * N; i++) e = fmax(e, isnan(D[i]) ? INFINITY : fabs(D[i] - Dref[i]));
                const int ok = e < 1e-3;
                if (!swap) natural_ok = ok;
                printf("N %3d %-8s trans-b %d LBO %5d SBO %5d swizzle %d k16 step %4d B: max error %.3g%s\n",
                       N, lname[l], trans, lb, sb, mode, kstep, e, ok ? "  <- matches" : "");
                if (ok && l == L_MN) mn_ok[ni] |= 1 << swap;
                if (ok && l == L_MN128) mn128_ok[ni] |= 1 << swap;
            }
        }
        clReleaseKernel(kern[0]);
        clReleaseKernel(kern[1]);
    }
    /* one line the device script reads: which reading of the offsets the
     * unswizzled MN-major operand takes at N = 64 and 128 (head dims) */
    const int both = mn_ok[2] & mn_ok[3];
    printf("RESULT mn %s mn128 %s\n", both & 1 ? "natural" : both & 2 ? "swapped" : "none",
           (mn128_ok[2] & mn128_ok[3] & 1) ? "natural" : (mn128_ok[2] & mn128_ok[3] & 2) ? "swapped" : "none");
    return both ? 0 : 1;
}
