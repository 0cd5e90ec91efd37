/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Probe (device calls only, not part of `meson test`): the registers and
 * spills NVIDIA's OpenCL compiler gives each kernel of an OpenCL C file
 * (issue 36: the int8 GEMV's speed followed its register count,
 * docs/PERFLOG.md, twenty-fourth session). Builds FILE on the first GPU
 * once for each OPTIONS string, with -cl-nv-verbose added, and prints the
 * build log's ptxas lines (entry function, spills, registers); a failed
 * build's whole log.
 *   usage: probe_kernel_regs FILE.cl OPTIONS [OPTIONS ...]
 *   e.g. probe_kernel_regs serve/gemv_quant.cl "-cl-std=CL1.2 -DGQ_TYPE=12 -DGQ_NV_DP4A"
 * Exit status 0 when every build succeeded, 1 when one failed, 2 on bad
 * usage, an unreadable file or no GPU.
 * Build: cc -O2 -std=c11 bench/probe_kernel_regs.c -lOpenCL -o probe_kernel_regs
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FILE's whole text, NUL-terminated (NULL with a message on failure) */
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "probe_kernel_regs: cannot open %s\n", path);
        return NULL;
    }
    char *text = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) text = malloc((size_t)n + 1);
    if (text && fread(text, 1, (size_t)n, f) != (size_t)n) {
        free(text);
        text = NULL;
    }
    fclose(f);
    if (!text) {
        fprintf(stderr, "probe_kernel_regs: cannot read %s\n", path);
        return NULL;
    }
    text[n] = '\0';
    return text;
}

/* the first GPU of any platform, or NULL */
static cl_device_id first_gpu(void) {
    cl_platform_id platforms[16];
    cl_uint n = 0;
    if (clGetPlatformIDs(16, platforms, &n) != CL_SUCCESS) return NULL;
    for (cl_uint i = 0; i < n && i < 16; i++) {
        cl_device_id d;
        if (clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_GPU, 1, &d, NULL) == CL_SUCCESS) return d;
    }
    return NULL;
}

/* prints the ptxas lines of log */
static void print_ptxas(char *log) {
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n"))
        if (strstr(line, "entry function") || strstr(line, "Used ") || strstr(line, "spill") ||
            strstr(line, "error"))
            puts(line);
}

/* builds text with options + -cl-nv-verbose; 0 when it built */
static int build_once(cl_context ctx, cl_device_id dev, const char *text, const char *options) {
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &text, NULL, &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "probe_kernel_regs: clCreateProgramWithSource: %d\n", err);
        return 1;
    }
    size_t len = strlen(options) + sizeof " -cl-nv-verbose";
    char *opt = malloc(len);
    if (!opt) {
        clReleaseProgram(p);
        fprintf(stderr, "probe_kernel_regs: out of memory\n");
        return 1;
    }
    snprintf(opt, len, "%s -cl-nv-verbose", options);
    const cl_int built = clBuildProgram(p, 1, &dev, opt, NULL, NULL);
    printf("== %s: %s\n", opt, built == CL_SUCCESS ? "built" : "FAILED");
    size_t size = 0;
    char *log = NULL;
    if (clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) == CL_SUCCESS &&
        (log = malloc(size + 1)) != NULL &&
        clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, size, log, NULL) == CL_SUCCESS) {
        log[size] = '\0';
        if (built == CL_SUCCESS) print_ptxas(log);
        else fputs(log, stdout);
    }
    free(log);
    free(opt);
    clReleaseProgram(p);
    return built != CL_SUCCESS;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: probe_kernel_regs FILE.cl OPTIONS [OPTIONS ...]\n");
        return 2;
    }
    cl_device_id dev = first_gpu();
    if (!dev) {
        fprintf(stderr, "probe_kernel_regs: no OpenCL GPU\n");
        return 2;
    }
    char *text = read_text(argv[1]);
    if (!text) return 2;
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "probe_kernel_regs: clCreateContext: %d\n", err);
        free(text);
        return 2;
    }
    int failed = 0;
    for (int a = 2; a < argc; a++) failed |= build_once(ctx, dev, text, argv[a]);
    clReleaseContext(ctx);
    free(text);
    return failed;
}
