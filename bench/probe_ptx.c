/* SPDX-License-Identifier: Apache-2.0 */
/* Probe (device calls only): builds OpenCL C sources on the first GPU and
 * writes the program binary, which NVIDIA's driver returns as PTX text,
 * so one can see what its compiler made of a builtin (e.g. prefetch()).
 *   usage: probe_ptx OUT.ptx "OPTIONS" FILE...   (the files are concatenated)
 * Build: cc -O2 bench/probe_ptx.c -lOpenCL -o probe_ptx */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: probe_ptx OUT.ptx \"OPTIONS\" FILE...\n");
        return 2;
    }
    size_t cap = 1 << 20, len = 0;
    char *src = malloc(cap);
    for (int i = 3; i < argc && src; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) { fprintf(stderr, "probe_ptx: cannot read %s\n", argv[i]); return 1; }
        len += fread(src + len, 1, cap - len - 2, f);
        src[len++] = '\n';
        fclose(f);
    }
    if (!src) return 1;
    src[len] = 0;
    cl_platform_id pl[8];
    cl_uint np = 0;
    clGetPlatformIDs(8, pl, &np);
    cl_device_id dev = NULL;
    for (cl_uint i = 0; i < np && !dev; i++)
        if (clGetDeviceIDs(pl[i], CL_DEVICE_TYPE_GPU, 1, &dev, NULL) != CL_SUCCESS) dev = NULL;
    if (!dev) { fprintf(stderr, "probe_ptx: no GPU\n"); return 1; }
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    const char *s = src;
    cl_program p = clCreateProgramWithSource(ctx, 1, &s, NULL, &err);
    err = clBuildProgram(p, 1, &dev, argv[2], NULL, NULL);
    size_t logn = 0;
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &logn);
    char *log = malloc(logn + 1);
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, logn, log, NULL);
    log[logn] = 0;
    fprintf(stderr, "%s", log);
    if (err != CL_SUCCESS) { fprintf(stderr, "probe_ptx: build failed (%d)\n", err); return 1; }
    size_t bin = 0;
    clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bin, &bin, NULL);
    unsigned char *b = malloc(bin + 1);
    clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof b, &b, NULL);
    FILE *o = fopen(argv[1], "wb");
    if (!o) return 1;
    fwrite(b, 1, bin, o);
    fclose(o);
    printf("probe_ptx: %zu bytes of binary in %s\n", bin, argv[1]);
    return 0;
}
