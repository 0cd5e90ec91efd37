/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The portable kernels on small cases, for Oclgrind's out-of-bounds and
 * data-race checks (CI: tools/oclgrind-check.sh runs this under
 * `oclgrind --check-api --data-races` and fails on any finding). Each case
 * runs every kernel (kv_write, rope_apply, prefill, batched prefill, decode
 * with its split reduction, materialise) and is checked against the float64 reference, so
 * the program also fails on a wrong answer. Small on purpose: Oclgrind
 * interprets every work-item.
 *
 *   oclgrind_cases [NAME]   all cases, or the one named
 *   oclgrind_cases --canary a deliberate out-of-bounds write and data race
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_cases.h"

static const lk_case cases[] = {
    /* name           D   B  storage               H  KV docs lengths  NQ splits corrupt warp tiled */
    {"f32-gqa2",      16, 4, LAZYATTN_DTYPE_F32,   4, 2, 2, {6, 9},    5, 3, 0, 0, 0},
    {"f16-gqa2",      16, 4, LAZYATTN_DTYPE_F16,   4, 2, 2, {6, 9},    5, 3, 0, 0, 0},
    {"bf16-gqa2",     16, 4, LAZYATTN_DTYPE_BF16,  4, 2, 2, {6, 9},    5, 3, 0, 0, 0},
    /* a group of 3, blocks longer than a document, one split per entry */
    {"f32-gqa3-b16",  32, 16, LAZYATTN_DTYPE_F32,  3, 1, 3, {5, 20, 1}, 3, 4, 0, 0, 0},
    /* the shapes of the precompiled set: Llama's head dim, GQA 4 */
    {"f16-d128-gqa4", 128, 16, LAZYATTN_DTYPE_F16, 8, 2, 2, {21, 38}, 9, 3, 0, 0, 0},
    {"bf16-d64-b32",  64, 32, LAZYATTN_DTYPE_BF16, 4, 4, 2, {40, 7},  17, 2, 0, 0, 0},
    /* the small-work-group decode (cl/decode_warp.cl): Llama's shape, then blocks of 4 and a
     * group of 3 (with its split-parallel reduction over 22 splits: 2 work-items a dim), a
     * hostile table */
    {"f16-d128-warp", 128, 16, LAZYATTN_DTYPE_F16, 8, 2, 2, {21, 38}, 9, 3, 0, 1, 0},
    {"f32-gqa3-warp", 32, 4, LAZYATTN_DTYPE_F32,   3, 1, 3, {40, 30, 9}, 3, 22, 0, 2, 0},
    {"f16-bad-warp",  16, 4, LAZYATTN_DTYPE_F16,   4, 2, 2, {6, 9},    5, 3, 1, 1, 0},
    /* the reduction by the split count: 67 splits, one entry each (the split-parallel
     * one), then 3 splits (decode.cl's) */
    {"f32-warp-auto67", 16, 2, LAZYATTN_DTYPE_F32, 4, 2, 3, {40, 60, 30}, 3, 67, 0, 3, 0},
    {"f16-warp-auto3",  16, 4, LAZYATTN_DTYPE_F16, 4, 2, 2, {6, 9},     5, 3, 0, 3, 0},
    /* hostile table: a block outside the pool, a length above the block size */
    {"f16-bad-table", 16, 4, LAZYATTN_DTYPE_F16,   4, 2, 2, {6, 9},    5, 3, 1, 0, 0},
    /* hostile batched-prefill offsets: skipped and reported, nothing written */
    {"f32-bad-indptr", 16, 4, LAZYATTN_DTYPE_F32,  4, 2, 2, {6, 9},    5, 3, 2, 0, 0},
    /* TILED pages (lazyattn_kv_layout): one tile row a block with ragged documents, the
     * NVIDIA shape with the small-work-group decode, blocks of 4 tile rows with the
     * split-parallel reduction, a hostile table */
    {"f32-tiled-b8",  16, 8, LAZYATTN_DTYPE_F32,   4, 2, 2, {6, 19},   5, 3, 0, 0, 1},
    {"f16-tiled-warp", 128, 16, LAZYATTN_DTYPE_F16, 8, 2, 2, {21, 38}, 9, 3, 0, 1, 1},
    {"bf16-tiled-b32", 32, 32, LAZYATTN_DTYPE_BF16, 3, 1, 3, {40, 30, 9}, 3, 22, 0, 2, 1},
    {"f16-tiled-bad", 16, 8, LAZYATTN_DTYPE_F16,   4, 2, 2, {6, 9},    5, 3, 1, 0, 1},
};

/* --canary: one out-of-bounds write and one write-write race, so that CI
 * can see the checker report them (a check that cannot fail proves nothing). */
static int canary(lazyattn_context *ctx) {
    static const char *src =
        "__kernel void lz_canary_oob(__global int *x) { x[get_global_id(0) + 1] = 1; }\n"
        "__kernel void lz_canary_race(__global int *x) { x[0] = (int)get_global_id(0); }\n";
    cl_int err;
    cl_context cl = lazyattn_context_cl_context(ctx);
    cl_device_id dev = lazyattn_context_device(ctx);
    cl_program p = clCreateProgramWithSource(cl, 1, &src, NULL, &err);
    if (err == CL_SUCCESS) err = clBuildProgram(p, 1, &dev, "", NULL, NULL);
    cl_mem m = clCreateBuffer(cl, CL_MEM_READ_WRITE, 4 * sizeof(cl_int), NULL, &err);
    const char *names[2] = {"lz_canary_oob", "lz_canary_race"};
    for (int i = 0; i < 2 && err == CL_SUCCESS; i++) {
        cl_kernel k = clCreateKernel(p, names[i], &err);
        if (err == CL_SUCCESS) err = clSetKernelArg(k, 0, sizeof m, &m);
        size_t global = 4, local = 4;
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(lazyattn_context_queue(ctx), k, 1, NULL, &global, &local,
                                         0, NULL, NULL);
        if (err == CL_SUCCESS) err = clFinish(lazyattn_context_queue(ctx));
        if (k) clReleaseKernel(k);
    }
    clReleaseMemObject(m);
    clReleaseProgram(p);
    printf("canary kernels ran (%d)\n", (int)err);
    return err == CL_SUCCESS ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    lazyattn_context *ctx = NULL;
    int st = lazyattn_context_create(NULL, &ctx);
    if (st) {
        fprintf(stderr, "oclgrind_cases: no device: %s\n", lazyattn_last_error());
        return 1;
    }
    printf("device: %s\n", lazyattn_context_device_name(ctx));
    if (only && strcmp(only, "--canary") == 0) {
        st = canary(ctx);
        lazyattn_context_destroy(ctx);
        return st;
    }
    int failed = 0, run = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const lk_case *c = &cases[i];
        if (only && strcmp(only, c->name) != 0) continue;
        run++;
        lk_result r;
        st = lk_run(ctx, c, &r);
        if (st) {
            printf("%-14s FAILED: %s (%s)\n", c->name, lazyattn_status_string(st), lazyattn_last_error());
            failed++;
            continue;
        }
        if (c->corrupt == 1) {
            printf("%-14s ok: bad entries skipped and reported\n", c->name);
            continue;
        }
        double tol = lk_tolerance(c->dtype);
        /* lse: absolute error of a log (10x the output's tolerance); f16 out: its rounding more */
        int ok = r.prefill < tol && r.decode < tol && r.materialised < tol && r.batched < tol &&
                 r.rope < 2e-6 && r.lse < 10 * tol && r.half_out < tol + 1e-3;
        printf("%-14s %s: rope %.1e, prefill %.1e, decode %.1e, materialised %.1e, batched %.1e, "
               "lse %.1e, f16 out %.1e (tolerance %.0e)\n",
               c->name, ok ? "ok" : "WRONG", r.rope, r.prefill, r.decode, r.materialised, r.batched,
               r.lse, r.half_out, tol);
        if (c->corrupt == 2) printf("%-14s    batched: bad offsets skipped and reported, nothing written\n", "");
        failed += !ok;
        free(r.outputs);
    }
    lazyattn_context_destroy(ctx);
    if (run == 0) {
        fprintf(stderr, "oclgrind_cases: no case named %s\n", only);
        return 1;
    }
    return failed ? 1 : 0;
}
