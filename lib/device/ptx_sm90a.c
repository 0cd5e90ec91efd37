/* SPDX-License-Identifier: Apache-2.0 */
/* The PTX round trip that gives OpenCL kernels Hopper-only instructions.
 *
 * NVIDIA's OpenCL compiler writes PTX for `.target sm_90`, and ptxas refuses
 * sm_90a instructions (wgmma, fence.proxy.async) there. The kernels
 * (cl/nv/ptx.h, LZ_NV_WGMMA) therefore hide each such instruction behind a
 * "//@" marker inside its inline asm, a PTX comment, so that the program
 * builds from source. This file reads that program's PTX back
 * (CL_PROGRAM_BINARIES is PTX text on NVIDIA), deletes the markers, turns
 * `.target sm_90` into `.target sm_90a`, and builds the result as a binary
 * program. Measured in ../shared/gpu/NVIDIA-OPENCL.md and
 * bench/probe_wgmma_layout.c. Kernels that move registers between their
 * warpgroups (setmaxnreg) get ".minnctapersm 1", CUDA's launch bound of one
 * block an SM, without which ptxas may ignore setmaxnreg. All PTX handling
 * of the library is here. */
#include "internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *lz_ptx_patch(const char *src, size_t len, int *n_markers, int *retargeted) {
    static const char target[] = ".target sm_90";
    const size_t tlen = sizeof target - 1;
    char *out = malloc(len + 2); /* "sm_90" -> "sm_90a" grows by one, once */
    if (!out) return NULL;
    char *w = out;
    *n_markers = 0, *retargeted = 0;
    for (const char *r = src; r < src + len && *r;) {
        if (r[0] == '/' && r + 2 < src + len && r[1] == '/' && r[2] == '@') {
            r += 3;
            ++*n_markers;
        } else if (!*retargeted && (size_t)(src + len - r) > tlen && !strncmp(r, target, tlen) &&
                   (r[tlen] == ',' || r[tlen] == '\n' || r[tlen] == ' ')) {
            memcpy(w, ".target sm_90a", tlen + 1);
            w += tlen + 1, r += tlen;
            *retargeted = 1;
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
    return out;
}

/* The first occurrence of needle in s[0 .. n), or NULL. */
static const char *lz_find(const char *s, size_t n, const char *needle) {
    const size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k)) return s + i;
    return NULL;
}

/* The start of the line after the one at p, or end. */
static const char *lz_next_line(const char *p, const char *end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    return nl ? nl + 1 : end;
}

/* The line at p past its blanks. */
static const char *lz_skip_blanks(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p;
}

/* Whether the line at p declares a kernel: ".entry NAME", after blanks and
 * any ".visible" / ".weak". */
static int lz_is_entry_line(const char *p, const char *end) {
    p = lz_skip_blanks(p, end);
    for (int more = 1; more;) {
        more = 0;
        static const char *const linkage[] = {".visible ", ".weak "};
        for (int i = 0; i < 2; i++) {
            const size_t k = strlen(linkage[i]);
            if ((size_t)(end - p) >= k && !memcmp(p, linkage[i], k)) p = lz_skip_blanks(p + k, end), more = 1;
        }
    }
    return end - p >= 7 && !memcmp(p, ".entry ", 7);
}

char *lz_ptx_min_ctas(const char *ptx, int *n_added) {
    static const char dir[] = ".minnctapersm 1\n";
    const size_t len = strlen(ptx), dlen = sizeof dir - 1;
    const char *const end = ptx + len;
    size_t n_entries = 0;
    for (const char *e = strstr(ptx, ".entry "); e; e = strstr(e + 7, ".entry ")) n_entries++;
    if (n_entries > (SIZE_MAX - len - 1) / dlen) return NULL; /* the copy's size would wrap */
    char *out = malloc(len + n_entries * dlen + 1);
    if (!out) return NULL;
    *n_added = 0;
    char *w = out;
    const char *r = ptx; /* copied up to here */
    const char *line = ptx;
    while (line < end) {
        if (!lz_is_entry_line(line, end)) {
            line = lz_next_line(line, end);
            continue;
        }
        /* the body: the first line opening with "{" before the next kernel */
        const char *entry = line, *body = NULL;
        for (line = lz_next_line(line, end); line < end && !lz_is_entry_line(line, end);
             line = lz_next_line(line, end))
            if (*lz_skip_blanks(line, end) == '{') {
                body = line;
                break;
            }
        if (!body) continue; /* a declaration without a body */
        const char *next = lz_next_line(body, end); /* the next kernel's line, or the end */
        while (next < end && !lz_is_entry_line(next, end)) next = lz_next_line(next, end);
        if (lz_find(body, (size_t)(next - body), "setmaxnreg") &&
            !lz_find(entry, (size_t)(body - entry), ".minnctapersm")) {
            memcpy(w, r, (size_t)(body - r));
            w += body - r;
            memcpy(w, dir, dlen);
            w += dlen;
            r = body;
            ++*n_added;
        }
        line = next;
    }
    const size_t rest = len - (size_t)(r - ptx);
    memcpy(w, r, rest);
    w[rest] = 0;
    return out;
}

int lz_ptx_sm90a(lazyattn_context *ctx, cl_program program, const char *options, cl_program *out) {
    return lz_ptx_sm90a_dump(ctx, program, options, NULL, out);
}

int lz_ptx_sm90a_dump(lazyattn_context *ctx, cl_program program, const char *options, const char *dump,
                      cl_program *out) {
    static const char fn[] = "lz_ptx_sm90a";
    *out = NULL;
    size_t size = 0;
    cl_int err = clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL);
    if (err != CL_SUCCESS || size == 0)
        return err != CL_SUCCESS ? lz_cl_fail(err, "lz_ptx_sm90a: CL_PROGRAM_BINARY_SIZES")
                                 : lz_fail(LAZYATTN_STATUS_UNSUPPORTED, "%s: no program binary", fn);
    unsigned char *ptx = malloc(size + 1);
    if (!ptx) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s", fn);
    err = clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof ptx, &ptx, NULL);
    if (err != CL_SUCCESS) {
        free(ptx);
        return lz_cl_fail(err, "lz_ptx_sm90a: CL_PROGRAM_BINARIES");
    }
    ptx[size] = 0;
    int n_markers, retargeted;
    char *patched = lz_ptx_patch((const char *)ptx, size, &n_markers, &retargeted);
    free(ptx);
    if (!patched) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s", fn);
    if (!retargeted || n_markers == 0) {
        free(patched);
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                       "%s: the binary is not sm_90 PTX with //@ markers (%d markers, target %s)", fn,
                       n_markers, retargeted ? "found" : "not found");
    }
    int n_min_ctas = 0;
    char *fixed = lz_ptx_min_ctas(patched, &n_min_ctas);
    free(patched);
    if (!fixed) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s", fn);
    patched = fixed;
    if (dump && *dump) {
        FILE *f = fopen(dump, "w");
        if (f) fputs(patched, f), fclose(f);
    }
    size_t len = strlen(patched);
    const unsigned char *bin = (const unsigned char *)patched;
    cl_int bin_status = CL_SUCCESS;
    cl_program p = clCreateProgramWithBinary(ctx->context, 1, &ctx->device, &len, &bin, &bin_status, &err);
    free(patched);
    if (err != CL_SUCCESS || bin_status != CL_SUCCESS) {
        if (p) clReleaseProgram(p); /* a program may come back with a refused binary */
        return lz_cl_fail(err != CL_SUCCESS ? err : bin_status, "lz_ptx_sm90a: clCreateProgramWithBinary");
    }
    err = clBuildProgram(p, 1, &ctx->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        lz_log_build(ctx, p, LAZYATTN_LOG_ERROR, "sm_90a round trip");
        clReleaseProgram(p);
        return lz_fail(LAZYATTN_STATUS_BUILD_FAILED, "%s: sm_90a PTX build failed (%d); the build log went "
                       "to the log callback", fn, err);
    }
    lz_log(ctx, LAZYATTN_LOG_INFO, "sm_90a PTX round trip: %d instructions unmarked, %d kernels with "
           "setmaxnreg given .minnctapersm 1", n_markers, n_min_ctas);
    /* whole (registers and ptxas notes of every kernel with -cl-nv-verbose) */
    lz_log_build(ctx, p, LAZYATTN_LOG_INFO, "sm_90a round trip");
    *out = p;
    return LAZYATTN_STATUS_OK;
}
