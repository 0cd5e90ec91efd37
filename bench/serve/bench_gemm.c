/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_gemm: the bf16 projections of serve/ (issue 16, item 1) on the
 * Llama-3.1-8B shapes: Y[M, N] = X[M, K] . W[N, K]^T, bf16 operands, f32
 * accumulation and output (serve/gemm_bf16.h).
 *
 * For every kernel of the table below (one row set per implementation and
 * tile) and every projection and M: random operands in [-1, 1) (never
 * zeros), Y poisoned with NaN, one checked run (every element written and
 * finite; sampled rows x cols against a float64 product of the same bf16
 * operands on the host, max relative error = max |y - ref| / max |ref| over
 * the samples), one accumulate run (Y += X W^T: 2 ref), then warm-ups and
 * timed runs (profiling events, the median). The fused projections write
 * their column ranges into separate buffers, as the model does (q, k, v;
 * gate, up). With --peer FILE (bench/gemm_peer.py --csv, run in the same
 * device call) each row also shows torch's TFLOP/s and the ratio.
 *
 * A benchmark, not a test: never part of `meson test`. Exit status 0 all
 * checks passed, 1 a failure or a mismatch, 2 a bad command line.
 */
#include "gemm_nv_large.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"

/* ---- the kernels measured: one entry per implementation (and tile) ------ */

typedef int (*bench_run_fn)(void *impl, cl_command_queue q, const serve_gemm_args *a, cl_event *ev);

typedef struct bench_kernel {
    char name[64];
    void *impl;
    bench_run_fn run;
    void (*destroy)(void *impl);
    int min_rows, max_rows; /* the M this kernel is measured on */
} bench_kernel;

static int run_large(void *impl, cl_command_queue q, const serve_gemm_args *a, cl_event *ev) {
    return serve_gemm_large_run(impl, q, a, ev);
}
static void destroy_large(void *impl) { serve_gemm_large_destroy(impl); }

/* ---- shapes ------------------------------------------------------------- */

typedef struct bench_proj {
    const char *name;
    int n, k;
    int n_outs;
    int cols[SERVE_GEMM_MAX_OUTS];
} bench_proj;

static const bench_proj projections[] = {
    {"qkv", 6144, 4096, 3, {4096, 1024, 1024}},
    {"o", 4096, 4096, 1, {4096}},
    {"gate_up", 28672, 4096, 2, {14336, 14336}},
    {"down", 4096, 14336, 1, {4096}},
};
enum { N_PROJ = sizeof projections / sizeof projections[0] };

/* torch's figures from bench/gemm_peer.py --csv, by (projection, m) */
typedef struct peer_row {
    char name[16];
    int m;
    double tflops;
} peer_row;

static int read_peer(const char *path, peer_row *rows, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[512];
    int n = 0;
    while (n < cap && fgets(line, sizeof line, f)) {
        char name[16];
        int nn, k, m;
        double ms, tf;
        if (sscanf(line, "%15[^,],%d,%d,%d,%lf,%lf", name, &nn, &k, &m, &ms, &tf) == 6) {
            snprintf(rows[n].name, sizeof rows[n].name, "%s", name);
            rows[n].m = m, rows[n].tflops = tf;
            n++;
        }
    }
    fclose(f);
    return n;
}

static double peer_tflops(const peer_row *rows, int n, const char *name, int m) {
    for (int i = 0; i < n; i++)
        if (rows[i].m == m && !strcmp(rows[i].name, name)) return rows[i].tflops;
    return 0.0;
}

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_state;
static double rnd_unit(void) { /* [0, 1), xorshift64* */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) * 0x1.0p-53;
}

static void fill_bf16(uint16_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        do h = serve_bf16_of((float)(rnd_unit() * 2.0 - 1.0));
        while ((h & 0x7FFF) == 0); /* no zeros */
        p[i] = h;
    }
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bench_bufs {
    cl_mem x, w, y[SERVE_GEMM_MAX_OUTS];
} bench_bufs;

static void release_bufs(bench_bufs *b) {
    if (b->x) clReleaseMemObject(b->x);
    if (b->w) clReleaseMemObject(b->w);
    for (int r = 0; r < SERVE_GEMM_MAX_OUTS; r++)
        if (b->y[r]) clReleaseMemObject(b->y[r]);
    memset(b, 0, sizeof *b);
}

/* Runs and checks kernel kn on one shape; times it unless check_only. */
typedef struct bench_result {
    double ms, tflops, max_rel;
    int ok;
} bench_result;

static int bench_one(cl_command_queue q, const bench_kernel *kn,
                     const bench_proj *p, int m, const uint16_t *xh, const uint16_t *wh,
                     bench_bufs *b, int reps, int warmup, int check_rows, int check_cols,
                     bench_result *res) {
    serve_gemm_args a = {.rows = m, .out = p->n, .in = p->k, .x = b->x, .x_off = 0, .w = b->w,
                         .n_outs = p->n_outs, .accumulate = 0};
    for (int r = 0; r < p->n_outs; r++)
        a.outs[r] = (serve_gemm_out){.buf = b->y[r], .off = 0, .cols = p->cols[r], .ld = p->cols[r]};
    memset(res, 0, sizeof *res);
    /* poison, run once, read everything back */
    const float nan = NAN;
    for (int r = 0; r < p->n_outs; r++) {
        cl_int err = clEnqueueFillBuffer(q, b->y[r], &nan, sizeof nan, 0, (size_t)m * (size_t)p->cols[r] * 4, 0,
                                         NULL, NULL);
        if (err != CL_SUCCESS) return fprintf(stderr, "fill: OpenCL error %d\n", err), 1;
    }
    int st = serve_gemm_args_check(&a, kn->name); /* the buffers' sizes: the kernels do not check them */
    if (!st) st = kn->run(kn->impl, q, &a, NULL);
    if (st) {
        fprintf(stderr, "%s %s M=%d: %s (%s)\n", kn->name, p->name, m, lazyattn_status_string(st),
                serve_last_error());
        return 1;
    }
    /* samples: check_rows rows (the first and last among them) x check_cols columns (each range's
     * first and last among them) */
    int rows_s[64], cols_s[256], nr = check_rows < 64 ? check_rows : 64, nc = check_cols < 256 ? check_cols : 256;
    if (nr > m) nr = m;
    if (nc > p->n) nc = p->n;
    for (int i = 0; i < nr; i++) rows_s[i] = i == 0 ? 0 : i == 1 ? m - 1 : (int)(rnd_unit() * m);
    int c0 = 0, nci = 0;
    for (int r = 0; r < p->n_outs && nci + 2 <= nc; r++) {
        cols_s[nci++] = c0;
        cols_s[nci++] = c0 + p->cols[r] - 1;
        c0 += p->cols[r];
    }
    while (nci < nc) cols_s[nci++] = (int)(rnd_unit() * p->n);
    double *ref = malloc(sizeof(double) * (size_t)nr * (size_t)nc);
    float *y = NULL;
    size_t ymax = 0;
    for (int r = 0; r < p->n_outs; r++)
        if ((size_t)m * (size_t)p->cols[r] > ymax) ymax = (size_t)m * (size_t)p->cols[r];
    y = malloc(ymax * sizeof(float));
    float *got = malloc(sizeof(float) * (size_t)nr * (size_t)nc);
    if (!ref || !y || !got) {
        free(ref), free(y), free(got);
        return fprintf(stderr, "out of host memory\n"), 1;
    }
    double ref_max = 0.0;
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nc; j++) {
            const uint16_t *xr = xh + (size_t)rows_s[i] * (size_t)p->k,
                           *wr = wh + (size_t)cols_s[j] * (size_t)p->k;
            double s = 0.0;
            for (int k = 0; k < p->k; k++) s += (double)serve_float_of_bf16(xr[k]) * serve_float_of_bf16(wr[k]);
            ref[i * nc + j] = s;
            if (fabs(s) > ref_max) ref_max = fabs(s);
        }
    int bad_written = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) { /* Y += X W^T: twice the reference */
            a.accumulate = 1;
            st = kn->run(kn->impl, q, &a, NULL);
            if (st) {
                fprintf(stderr, "%s %s M=%d accumulate: %s (%s)\n", kn->name, p->name, m,
                        lazyattn_status_string(st), serve_last_error());
                free(ref), free(y), free(got);
                return 1;
            }
        }
        c0 = 0;
        for (int r = 0; r < p->n_outs; r++) {
            cl_int err = clEnqueueReadBuffer(q, b->y[r], CL_TRUE, 0, (size_t)m * (size_t)p->cols[r] * 4, y, 0,
                                             NULL, NULL);
            if (err != CL_SUCCESS) {
                free(ref), free(y), free(got);
                return fprintf(stderr, "read: OpenCL error %d\n", err), 1;
            }
            if (pass == 0)
                for (size_t i = 0; i < (size_t)m * (size_t)p->cols[r]; i++) bad_written += !isfinite(y[i]);
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < nc; j++)
                    if (cols_s[j] >= c0 && cols_s[j] < c0 + p->cols[r])
                        got[i * nc + j] = y[(size_t)rows_s[i] * (size_t)p->cols[r] + (size_t)(cols_s[j] - c0)];
            c0 += p->cols[r];
        }
        double worst = 0.0;
        for (int i = 0; i < nr * nc; i++) {
            const double e = fabs((double)got[i] - (pass + 1) * ref[i]) / ((pass + 1) * ref_max);
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
        }
        if (worst > res->max_rel) res->max_rel = worst;
    }
    free(ref), free(y), free(got);
    res->ok = bad_written == 0 && res->max_rel < 1e-4;
    if (bad_written)
        fprintf(stderr, "%s %s M=%d: %d elements of Y not written or not finite\n", kn->name, p->name, m,
                bad_written);
    /* timing */
    a.accumulate = 0;
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!t) return fprintf(stderr, "out of host memory\n"), 1;
    for (int i = 0; i < warmup + reps; i++) {
        cl_event ev = NULL;
        st = kn->run(kn->impl, q, &a, &ev);
        if (st) {
            free(t);
            return fprintf(stderr, "%s: %s\n", kn->name, serve_last_error()), 1;
        }
        clWaitForEvents(1, &ev);
        cl_ulong t0 = 0, t1 = 0;
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        clReleaseEvent(ev);
        if (i >= warmup) t[i - warmup] = (double)(t1 - t0) * 1e-6;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    res->ms = t[reps / 2];
    res->tflops = 2.0 * m * (double)p->n * p->k / res->ms * 1e-9;
    free(t);
    return 0;
}

static const char usage_text[] =
    "usage: bench_gemm [options]\n"
    "Times and checks the bf16 projections of serve/ (Y = X W^T, f32 accumulation) on the\n"
    "Llama-3.1-8B shapes: qkv 6144x4096, o 4096x4096, gate_up 28672x4096, down 4096x14336.\n"
    "  --rows LIST        M values, comma separated, 1..65536, at most 16, no repeats\n"
    "                     (default 2048,10240,777)\n"
    "  --only LIST        projections (qkv|o|gate_up|down; default all)\n"
    "  --tiles LIST       tiles of the large kernel, ';' separated WG,MW,BN,BK,STAGES,LAG,GROUP[,MAXREG],\n"
    "                     at most 16 (default: its default tile; see serve/gemm_nv_large.h)\n"
    "  --reps N           timed runs, median reported (default 20)\n"
    "  --warmup N         untimed runs first (default 3)\n"
    "  --check-rows N     sampled rows checked against float64 (default 16)\n"
    "  --check-cols N     sampled columns (default 128)\n"
    "  --peer FILE        bench/gemm_peer.py --csv output: adds torch's TFLOP/s and the ratio\n"
    "  --seed N           random operands' seed (default 1)\n"
    "Exit status: 0 all checks passed, 1 a failure or mismatch, 2 a bad command line.\n";

int main(int argc, char **argv) {
    static const char prog[] = "bench_gemm";
    const char *tiles_text = NULL, *peer_path = NULL;
    int ms_list[16] = {2048, 10240, 777}, n_m = 3;
    int reps = 20, warmup = 3, check_rows = 16, check_cols = 128, only[N_PROJ], n_only = 0;
    uint64_t seed = 1;
    cli_option opts[] = {
        {.name = "--rows", .type = CLI_INT_LIST, .dest = ms_list, .min = 1, .max = 65536,
         .max_items = 16, .count = &n_m},
        {.name = "--only", .type = CLI_ENUM_LIST, .dest = only, .choices = "qkv|o|gate_up|down",
         .max_items = N_PROJ, .count = &n_only},
        {.name = "--tiles", .type = CLI_STRING, .dest = &tiles_text},
        {.name = "--reps", .type = CLI_INT, .dest = &reps, .min = 1, .max = 100000},
        {.name = "--warmup", .type = CLI_INT, .dest = &warmup, .min = 0, .max = 100000},
        {.name = "--check-rows", .type = CLI_INT, .dest = &check_rows, .min = 2, .max = 64},
        {.name = "--check-cols", .type = CLI_INT, .dest = &check_cols, .min = 8, .max = 256},
        {.name = "--peer", .type = CLI_STRING, .dest = &peer_path},
        {.name = "--seed", .type = CLI_U64, .dest = &seed},
    };
    int r = cli_parse(prog, usage_text, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv);
    if (r) return r == CLI_HELP ? 0 : CLI_USAGE_ERROR;
    if (!n_only)
        for (int i = 0; i < N_PROJ; i++) only[n_only++] = i;
    /* the tiles, each checked by serve_gemm_large_create_tile below */
    char tiles[1024];
    const char *tile_list[16];
    int n_tiles = 0;
    if (tiles_text) {
        if (strlen(tiles_text) >= sizeof tiles)
            return cli_fail(prog, "--tiles", "longer than %zu characters", sizeof tiles - 1);
        memcpy(tiles, tiles_text, strlen(tiles_text) + 1);
        for (char *s = tiles;;) {
            char *e = strchr(s, ';');
            if (e) *e = 0;
            if (!*s) return cli_fail(prog, "--tiles", "\"%s\": an empty tile", tiles_text);
            if (n_tiles == 16) return cli_fail(prog, "--tiles", "at most 16 tiles");
            tile_list[n_tiles++] = s;
            if (!e) break;
            s = e + 1;
        }
    }
    peer_row peer[64];
    int n_peer = 0;
    if (peer_path) {
        n_peer = read_peer(peer_path, peer, 64);
        if (n_peer < 0) return cli_fail(prog, "--peer", "cannot read %s", peer_path);
        if (n_peer == 0) fprintf(stderr, "%s: --peer: no torch figures in %s\n", prog, peer_path);
    }
    rng_state = seed ? seed : 1;

    lazyattn_context_options co;
    lazyattn_context_options_init(&co);
    co.profiling = 1;
    lazyattn_context *ctx = NULL;
    int st = lazyattn_context_create(&co, &ctx);
    if (st) return fprintf(stderr, "%s: no device: %s (%s)\n", prog, lazyattn_status_string(st), lazyattn_last_error()), 1;
    cl_command_queue q = lazyattn_context_queue(ctx);
    printf("device: %s\n", lazyattn_context_device_name(ctx));

    /* the table of kernels: every tile of the large kernel (the small-M kernel goes here too) */
    bench_kernel kernels[16];
    int n_k = 0, failed = 0;
    for (int ti = 0; ti < (n_tiles ? n_tiles : 1); ti++) {
        const char *tile = n_tiles ? tile_list[ti] : NULL;
        serve_gemm_large *g = NULL;
        st = serve_gemm_large_create_tile(ctx, tile, &g);
        if (st == LAZYATTN_STATUS_INVALID_ARGUMENT) { /* a malformed or unfit tile: the command line */
            fprintf(stderr, "%s: --tiles: %s\n", prog, serve_last_error());
            for (int ki = 0; ki < n_k; ki++) kernels[ki].destroy(kernels[ki].impl);
            lazyattn_context_destroy(ctx);
            return CLI_USAGE_ERROR;
        }
        if (st) {
            printf("large %s: not built: %s (%s)\n", tile ? tile : "(default)", lazyattn_status_string(st),
                   serve_last_error());
            failed |= st != LAZYATTN_STATUS_UNSUPPORTED;
            continue;
        }
        bench_kernel *k = &kernels[n_k++];
        snprintf(k->name, sizeof k->name, "large %s", serve_gemm_large_tile(g));
        k->impl = g, k->run = run_large, k->destroy = destroy_large, k->min_rows = 65, k->max_rows = 1 << 30;
    }
    if (!n_k) {
        printf("no kernel to measure on this device\n");
        lazyattn_context_destroy(ctx);
        return failed ? 1 : 0;
    }

    printf("\n%-28s %-8s %6s %6s %6s %9s %8s %8s %6s %9s %s\n", "kernel", "proj", "M", "N", "K", "ms",
           "TFLOP/s", "torch", "ratio", "max rel", "check");
    cl_context cl = lazyattn_context_cl_context(ctx);
    for (int pi = 0; pi < n_only; pi++) {
        const bench_proj *p = &projections[only[pi]];
        int mmax = 0;
        for (int i = 0; i < n_m; i++) mmax = ms_list[i] > mmax ? ms_list[i] : mmax;
        const int mpad = (mmax + SERVE_GEMM_ROW_PAD - 1) / SERVE_GEMM_ROW_PAD * SERVE_GEMM_ROW_PAD;
        uint16_t *xh = malloc((size_t)mpad * (size_t)p->k * 2), *wh = malloc((size_t)p->n * (size_t)p->k * 2);
        if (!xh || !wh) {
            free(xh), free(wh);
            fprintf(stderr, "out of host memory\n");
            failed = 1;
            break;
        }
        fill_bf16(xh, (size_t)mpad * (size_t)p->k);
        fill_bf16(wh, (size_t)p->n * (size_t)p->k);
        bench_bufs b = {0};
        cl_int err;
        b.x = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)mpad * (size_t)p->k * 2, xh,
                             &err);
        if (err == CL_SUCCESS)
            b.w = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)p->n * (size_t)p->k * 2,
                                 wh, &err);
        for (int rr = 0; rr < p->n_outs && err == CL_SUCCESS; rr++)
            b.y[rr] = clCreateBuffer(cl, CL_MEM_READ_WRITE, (size_t)mmax * (size_t)p->cols[rr] * 4, NULL, &err);
        if (err != CL_SUCCESS) {
            fprintf(stderr, "%s: buffers: OpenCL error %d\n", p->name, err);
            release_bufs(&b), free(xh), free(wh);
            failed = 1;
            break;
        }
        for (int mi = 0; mi < n_m; mi++) {
            const int m = ms_list[mi];
            for (int ki = 0; ki < n_k; ki++) {
                const bench_kernel *kn = &kernels[ki];
                if (m < kn->min_rows || m > kn->max_rows) continue;
                bench_result res;
                if (bench_one(q, kn, p, m, xh, wh, &b, reps, warmup, check_rows, check_cols, &res)) {
                    failed = 1;
                    continue;
                }
                const double torch = peer_tflops(peer, n_peer, p->name, m);
                char tt[16] = "-", ratio[16] = "-";
                if (torch > 0) {
                    snprintf(tt, sizeof tt, "%.1f", torch);
                    snprintf(ratio, sizeof ratio, "%.2f", res.tflops / torch);
                }
                printf("%-28s %-8s %6d %6d %6d %9.4f %8.1f %8s %6s %9.2e %s\n", kn->name, p->name, m, p->n,
                       p->k, res.ms, res.tflops, tt, ratio, res.max_rel, res.ok ? "ok" : "MISMATCH");
                fflush(stdout);
                failed |= !res.ok;
            }
        }
        release_bufs(&b);
        free(xh), free(wh);
    }
    for (int ki = 0; ki < n_k; ki++) kernels[ki].destroy(kernels[ki].impl);
    lazyattn_context_destroy(ctx);
    return failed ? 1 : 0;
}
