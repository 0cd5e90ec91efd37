/* SPDX-License-Identifier: Apache-2.0 */
/* Probe (device calls only, issue 16): the bf16 tensor-core GEMM of
 * bench/gemm_nv_probe.cl on the first GPU (NVIDIA, compute capability >= 8):
 * checked against a double reference on a small shape (the operands rounded
 * to bf16 first), then timed on the Llama-3.1-8B projections at M = 2048
 * with profiling events (median of 10 after 2 warm-ups), for each ring depth
 * given. Compare with bench/gemm_peer.py (torch) from the same call.
 *   usage: probe_gemm_nv [KERNEL.cl] [STAGES...]   (default bench/gemm_nv_probe.cl 2 3)
 * Build: cc -O2 bench/probe_gemm_nv.c -lOpenCL -lm -o probe_gemm_nv */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint16_t bf16_of(float f) { /* round to nearest even */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float float_of(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float uniform(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct gemm {
    cl_context ctx;
    cl_command_queue q;
    cl_kernel k;
} gemm;

/* Runs y = x . W^T once; returns the kernel's ms (profiling), < 0 on error. */
static double run(gemm *g, cl_mem x, cl_mem w, cl_mem y, int M, int N, int K) {
    clSetKernelArg(g->k, 0, sizeof x, &x);
    clSetKernelArg(g->k, 1, sizeof w, &w);
    clSetKernelArg(g->k, 2, sizeof y, &y);
    clSetKernelArg(g->k, 3, sizeof M, &M);
    clSetKernelArg(g->k, 4, sizeof N, &N);
    clSetKernelArg(g->k, 5, sizeof K, &K);
    size_t global[2] = {(size_t)N / 128 * 256, (size_t)M / 128}, local[2] = {256, 1};
    cl_event e;
    cl_int err = clEnqueueNDRangeKernel(g->q, g->k, 2, NULL, global, local, 0, NULL, &e);
    if (err != CL_SUCCESS) return -1.0 * err - 1000;
    clWaitForEvents(1, &e);
    cl_ulong a = 0, b = 0;
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof a, &a, NULL);
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof b, &b, NULL);
    clReleaseEvent(e);
    return (double)(b - a) * 1e-6;
}

static cl_mem random_bf16(gemm *g, size_t n, uint16_t **host) {
    uint16_t *h = malloc(n * 2);
    if (!h) return NULL;
    for (size_t i = 0; i < n; i++) h[i] = bf16_of(uniform());
    cl_int err;
    cl_mem m = clCreateBuffer(g->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, n * 2, h, &err);
    if (host) *host = h;
    else free(h);
    return err == CL_SUCCESS ? m : NULL;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "bench/gemm_nv_probe.cl";
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "probe_gemm_nv: cannot read %s\n", path); return 2; }
    static char src[1 << 16];
    size_t len = fread(src, 1, sizeof src - 1, f);
    fclose(f);
    src[len] = 0;
    cl_platform_id pl[8];
    cl_uint np = 0;
    clGetPlatformIDs(8, pl, &np);
    cl_device_id dev = NULL;
    for (cl_uint i = 0; i < np && !dev; i++)
        if (clGetDeviceIDs(pl[i], CL_DEVICE_TYPE_GPU, 1, &dev, NULL) != CL_SUCCESS) dev = NULL;
    if (!dev) { fprintf(stderr, "probe_gemm_nv: no GPU\n"); return 1; }
    char name[256] = "";
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
    gemm g;
    cl_int err;
    g.ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    g.q = clCreateCommandQueue(g.ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    printf("device: %s\n", name);
    static const int shapes[][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
    const int n_stages = argc > 2 ? argc - 2 : 2;
    int status = 0;
    for (int si = 0; si < n_stages; si++) {
        const int stages = argc > 2 ? atoi(argv[2 + si]) : 2 + si;
        char opt[128];
        snprintf(opt, sizeof opt, "-cl-std=CL1.2 -cl-nv-verbose -DGP_STAGES=%d", stages);
        const char *s = src;
        cl_program p = clCreateProgramWithSource(g.ctx, 1, &s, NULL, &err);
        err = clBuildProgram(p, 1, &dev, opt, NULL, NULL);
        static char log[1 << 16];
        log[0] = 0;
        clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        printf("== %d stages: build %d\n%s\n", stages, err, log);
        if (err != CL_SUCCESS) { status = 1; clReleaseProgram(p); continue; }
        g.k = clCreateKernel(p, "gemm_bf16", &err);
        /* check: 256 x 384 x 512 against a double reference of the bf16 operands */
        const int M = 256, N = 384, K = 512;
        uint16_t *hx, *hw;
        cl_mem x = random_bf16(&g, (size_t)M * K, &hx), w = random_bf16(&g, (size_t)N * K, &hw);
        cl_mem y = clCreateBuffer(g.ctx, CL_MEM_WRITE_ONLY, (size_t)M * N * 4, NULL, &err);
        double ms = run(&g, x, w, y, M, N, K);
        float *hy = malloc((size_t)M * N * 4);
        clEnqueueReadBuffer(g.q, y, CL_TRUE, 0, (size_t)M * N * 4, hy, 0, NULL, NULL);
        double worst = 0, scale = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double r = 0;
                for (int k = 0; k < K; k++) r += (double)float_of(hx[(size_t)i * K + k]) * float_of(hw[(size_t)j * K + k]);
                double d = fabs(r - hy[(size_t)i * N + j]);
                if (!(d <= worst)) worst = d;
                if (fabs(r) > scale) scale = fabs(r);
            }
        const int ok = ms >= 0 && worst <= 1e-4 * scale;
        printf("check %dx%dx%d: max |error| %.3g (largest |y| %.3g) %s\n", M, N, K, worst, scale, ok ? "ok" : "WRONG");
        if (!ok) status = 1;
        free(hx), free(hw), free(hy);
        clReleaseMemObject(x), clReleaseMemObject(w), clReleaseMemObject(y);
        for (int sh = 0; sh < 4 && ok; sh++) {
            const int m = 2048, n = shapes[sh][0], k = shapes[sh][1];
            x = random_bf16(&g, (size_t)m * k, NULL), w = random_bf16(&g, (size_t)n * k, NULL);
            y = clCreateBuffer(g.ctx, CL_MEM_WRITE_ONLY, (size_t)m * n * 4, NULL, &err);
            double t[10];
            for (int r = -2; r < 10; r++) {
                double v = run(&g, x, w, y, m, n, k);
                if (r >= 0) t[r] = v;
            }
            qsort(t, 10, sizeof t[0], cmp);
            printf("gemm M %d N %5d K %5d: %.4f ms, %.1f TFLOP/s\n", m, n, k, t[5],
                   t[5] > 0 ? 2.0 * m * n * k / t[5] * 1e-9 : 0.0);
            clReleaseMemObject(x), clReleaseMemObject(w), clReleaseMemObject(y);
        }
        clReleaseKernel(g.k);
        clReleaseProgram(p);
    }
    return status;
}
