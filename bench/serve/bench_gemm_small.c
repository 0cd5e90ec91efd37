/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_gemm_small: the decode-sized bf16 GEMM (serve/gemm_nv_small.c) on
 * the Llama-3.1-8B projections, against the device's read ceiling measured
 * in the same run (issue 16, item 1). A benchmark, not a test.
 *
 * For each kernel shape (--variant "R,WR,WK,U,PIPE,WHINT,SPLITS[,XS];...",
 * ';' separated, "defaults" for the built-in table; none: the defaults): checks Y against a double reference from the same
 * bf16 operands (random in [-1, 1), never zeros) on 256 sampled columns of
 * every row, that every element of rows < M was written and none past M,
 * Y += (accumulate), and bitwise repeatability; then times M in --ms with
 * profiling events (3 warm-ups, median of --reps), rotating over copies of W
 * that together exceed the L2 several times ("cold": what a forward sees,
 * each layer's weights new), and on one copy ("hot", as torch's
 * bench/gemm_peer.py times). GB/s = bytes of W / time. "strm": the same
 * cold launches as one stream, END of the last minus START of the first
 * over their count (what each costs in a sequence of back-to-back
 * launches, as a decode step issues them).
 *   bench_gemm_small [--reps N] [--ms 1,2,4] [--variant ...] [--no-checks]
 * Exit status: 0 all checks passed, 1 a failure or mismatch, 2 a bad
 * command line (common/cli_options.h), 77 without an NVIDIA fast-path
 * device.
 */
#define _GNU_SOURCE /* memmem */
#include "gemm_nv_small.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"

typedef struct shape {
    const char *name;
    int n, k;
    int n_outs;
    int cols[3];
} shape;

static const shape SHAPES[] = {
    {"qkv", 6144, 4096, 3, {4096, 1024, 1024}},
    {"o", 4096, 4096, 1, {4096, 0, 0}},
    {"gate_up", 28672, 4096, 2, {14336, 14336, 0}},
    {"down", 4096, 14336, 1, {4096, 0, 0}},
};
#define N_SHAPES 4
#define MAX_VARIANTS 16
#define SAMPLE 256
#define MAXM 64
#define MAXREP 200

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float uniform(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
}
static uint16_t rnd_bf16(void) {
    uint16_t h;
    do h = serve_bf16_of(uniform());
    while (h == 0 || h == 0x8000); /* never zeros */
    return h;
}
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double event_us(cl_event e) {
    cl_ulong s = 0, t = 0;
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof s, &s, NULL);
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof t, &t, NULL);
    return (double)(t - s) * 1e-3;
}

static const char *READ_SRC =
    "__kernel void rd(__global const float4 *p, ulong off, ulong n, __global float *out) {\n"
    "    float4 s = (float4)(0.0f);\n"
    "    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) s += p[off + i];\n"
    "    if (s.x + s.y + s.z + s.w == 1234.5f) out[get_group_id(0)] = s.x;\n"
    "}\n";

/* A plain float4 read kernel over a buffer of its own: the read ceiling,
 * and what reading a W's bytes costs at all (launch and ramp included). */
typedef struct reader {
    cl_program p;
    cl_kernel k;
    cl_mem buf, out;
    size_t bytes;
    int cus;
} reader;

static int reader_create(reader *r, cl_context cl, cl_device_id dev, cl_command_queue q, int cus,
                         size_t bytes) {
    cl_int err;
    memset(r, 0, sizeof *r);
    r->p = clCreateProgramWithSource(cl, 1, &READ_SRC, NULL, &err);
    if (err != CL_SUCCESS || clBuildProgram(r->p, 1, &dev, "", NULL, NULL) != CL_SUCCESS) return -1;
    r->k = clCreateKernel(r->p, "rd", &err);
    if (err != CL_SUCCESS) return -1;
    r->buf = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS) return -1;
    r->out = clCreateBuffer(cl, CL_MEM_READ_WRITE, 1 << 20, NULL, &err);
    if (err != CL_SUCCESS) return -1;
    const float v = 0.25f;
    clEnqueueFillBuffer(q, r->buf, &v, sizeof v, 0, bytes, 0, NULL, NULL);
    r->bytes = bytes;
    r->cus = cus;
    return 0;
}

static void reader_destroy(reader *r) {
    if (r->buf) clReleaseMemObject(r->buf);
    if (r->out) clReleaseMemObject(r->out);
    if (r->k) clReleaseKernel(r->k);
    if (r->p) clReleaseProgram(r->p);
}

/* Median us of a plain read of `bytes` (0: an empty launch), each
 * repetition at its own offset of the buffer (cold in L2), after 2 warm-ups. */
static double reader_us(reader *r, cl_command_queue q, size_t bytes, int reps) {
    enum { MAXR = 64 };
    double t[MAXR];
    cl_event e[MAXR + 2];
    if (reps > MAXR) reps = MAXR;
    const size_t windows = bytes ? r->bytes / bytes : 1;
    cl_ulong n = bytes / 16;
    clSetKernelArg(r->k, 0, sizeof r->buf, &r->buf);
    clSetKernelArg(r->k, 2, sizeof n, &n);
    clSetKernelArg(r->k, 3, sizeof r->out, &r->out);
    size_t local = 256, global = (size_t)r->cus * 2048;
    for (int i = 0; i < reps + 2; i++) {
        cl_ulong off = (cl_ulong)((size_t)i % windows) * n;
        clSetKernelArg(r->k, 1, sizeof off, &off);
        clEnqueueNDRangeKernel(q, r->k, 1, NULL, &global, &local, 0, NULL, &e[i]);
    }
    clFinish(q);
    for (int i = 0; i < reps + 2; i++) {
        if (i >= 2) t[i - 2] = event_us(e[i]);
        clReleaseEvent(e[i]);
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    return t[reps / 2];
}

typedef struct bench {
    lazyattn_context *ctx;
    cl_context cl;
    cl_command_queue q;
    serve_gemm_small *g;
} bench;

static int run_once(bench *b, const shape *s, int m, cl_mem x, cl_mem w, cl_mem *y, int acc,
                    cl_event *ev) {
    serve_gemm_args a;
    memset(&a, 0, sizeof a);
    a.rows = m, a.out = s->n, a.in = s->k, a.x = x, a.x_off = 0, a.w = w, a.n_outs = s->n_outs;
    for (int i = 0; i < s->n_outs; i++) {
        a.outs[i].buf = y[i];
        a.outs[i].off = 0;
        a.outs[i].cols = s->cols[i];
        a.outs[i].ld = s->cols[i];
    }
    a.accumulate = acc;
    if (!ev) { /* the checked runs: the buffers' sizes too (the kernel does not check them) */
        int st = serve_gemm_args_check(&a, "bench_gemm_small");
        if (st) return st;
    }
    return serve_gemm_small_run(b->g, b->q, &a, ev);
}

/* Reads Y (MAXM rows of every range) into host [MAXM][n]; nonzero on an
 * error (the check then fails rather than reading stale values). */
static int read_y(bench *b, const shape *s, cl_mem *y, float *host) {
    float *tmp = malloc(sizeof(float) * MAXM * 28672);
    if (!tmp) return -1;
    cl_int err = CL_SUCCESS;
    for (int i = 0, c0 = 0; i < s->n_outs && err == CL_SUCCESS; c0 += s->cols[i], i++) {
        err = clEnqueueReadBuffer(b->q, y[i], CL_TRUE, 0, sizeof(float) * MAXM * (size_t)s->cols[i], tmp, 0,
                                  NULL, NULL);
        for (int r = 0; r < MAXM && err == CL_SUCCESS; r++)
            memcpy(host + (size_t)r * (size_t)s->n + c0, tmp + (size_t)r * (size_t)s->cols[i],
                   sizeof(float) * (size_t)s->cols[i]);
    }
    free(tmp);
    return err != CL_SUCCESS;
}

static int fill_y(bench *b, const shape *s, cl_mem *y, float v) {
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < s->n_outs && err == CL_SUCCESS; i++)
        err = clEnqueueFillBuffer(b->q, y[i], &v, sizeof v, 0, sizeof(float) * MAXM * (size_t)s->cols[i], 0,
                                  NULL, NULL);
    return err != CL_SUCCESS;
}

/* --variant: ';' separated kernel shapes, each "defaults" (splits -1 marks
 * it) or R,WR,WK,U,PIPE,WHINT,SPLITS[,XS] (ranges checked by set_tuning). */
static int parse_variants(const char *prog, const char *text, serve_gemm_small_tuning *out,
                          int *count) {
    int n = 0;
    for (const char *s = text;;) {
        const char *e = strchr(s, ';');
        const size_t len = e ? (size_t)(e - s) : strlen(s);
        if (n == MAX_VARIANTS) return cli_fail(prog, "--variant", "at most %d variants", MAX_VARIANTS);
        serve_gemm_small_tuning *t = &out[n++];
        memset(t, 0, sizeof *t);
        if (len == 8 && !strncmp(s, "defaults", 8)) {
            t->splits = -1;
        } else {
            char item[64];
            int v[8] = {0}, k = 0;
            if (len == 0 || len >= sizeof item)
                return cli_fail(prog, "--variant", "\"%s\": an empty or over-long variant", text);
            memcpy(item, s, len);
            item[len] = 0;
            if (cli_parse_int_list(prog, "--variant", item, 0, 256, 0, v, 8, &k) != CLI_OK)
                return CLI_USAGE_ERROR;
            if (k < 7)
                return cli_fail(prog, "--variant", "\"%s\": want R,WR,WK,U,PIPE,WHINT,SPLITS[,XS]", item);
            *t = (serve_gemm_small_tuning){v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
        }
        if (!e) break;
        s = e + 1;
    }
    *count = n;
    return CLI_OK;
}

static const char usage_text[] =
    "usage: bench_gemm_small [options]\n"
    "Times and checks the decode-sized bf16 GEMM (serve/gemm_nv_small.c) on the Llama-3.1-8B\n"
    "projections against the device's read ceiling (an NVIDIA fast-path GPU; exit 77 without).\n"
    "  --reps N        timed runs, median reported (1..200, default 20)\n"
    "  --ms LIST       rows M, comma separated, 1..64, at most 16, no repeats\n"
    "                  (default 1,2,4,8,16,32,64)\n"
    "  --variant LIST  kernel shapes, ';' separated: R,WR,WK,U,PIPE,WHINT,SPLITS[,XS] or\n"
    "                  defaults (the built-in table); at most 16 (default: defaults);\n"
    "                  XS 2..5: wgmma (compute capability 9.x; serve/gemm_nv_small.h)\n"
    "  --no-checks     skip the checks against the float64 reference\n"
    "Exit status: 0 all checks passed, 1 a failure or mismatch, 2 a bad command line.\n";

int main(int argc, char **argv) {
    static const char prog[] = "bench_gemm_small";
    int reps = 20, no_checks = 0;
    const char *variant_text = NULL;
    int ms[16] = {1, 2, 4, 8, 16, 32, 64}, n_ms = 7;
    cli_option opts[] = {
        {.name = "--reps", .type = CLI_INT, .dest = &reps, .min = 1, .max = MAXREP},
        {.name = "--ms", .type = CLI_INT_LIST, .dest = ms, .min = 1, .max = MAXM, .max_items = 16,
         .count = &n_ms},
        {.name = "--variant", .type = CLI_STRING, .dest = &variant_text},
        {.name = "--no-checks", .type = CLI_FLAG, .dest = &no_checks},
    };
    int r = cli_parse(prog, usage_text, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv);
    if (r) return r == CLI_HELP ? 0 : CLI_USAGE_ERROR;
    const int checks = !no_checks;
    serve_gemm_small_tuning variants[MAX_VARIANTS];
    int n_variants = 0;
    if (variant_text && parse_variants(prog, variant_text, variants, &n_variants)) return CLI_USAGE_ERROR;

    bench b;
    memset(&b, 0, sizeof b);
    lazyattn_context_options o;
    lazyattn_context_options_init(&o);
    o.kind = LAZYATTN_DEVICE_GPU;
    o.profiling = 1;
    int st = lazyattn_context_create(&o, &b.ctx);
    if (st != LAZYATTN_STATUS_OK) {
        printf("no GPU context: %s\n", lazyattn_last_error());
        return 77;
    }
    b.cl = lazyattn_context_cl_context(b.ctx);
    b.q = lazyattn_context_queue(b.ctx);
    st = serve_gemm_small_create(b.ctx, &b.g);
    if (st != LAZYATTN_STATUS_OK) {
        printf("gemm_small: %s\n", serve_last_error());
        lazyattn_context_destroy(b.ctx);
        return 77;
    }
    serve_gemm_small_tuning defaults[SERVE_GEMM_SMALL_CLASSES][8];
    for (int c = 0; c < SERVE_GEMM_SMALL_CLASSES; c++)
        for (int nt = 1; nt <= 8; nt++) serve_gemm_small_get_tuning(b.g, nt, c, &defaults[c][nt - 1]);
    /* every --variant's ranges before any timing: a bad one is a bad command line */
    for (int v = 0; v < n_variants; v++) {
        if (variants[v].splits == -1) continue;
        st = serve_gemm_small_set_tuning(b.g, 0, -1, &variants[v]);
        if (st != LAZYATTN_STATUS_OK) {
            const int usage = st == LAZYATTN_STATUS_INVALID_ARGUMENT;
            fprintf(stderr, "%s: --variant: variant %d: %s\n", prog, v + 1, serve_last_error());
            serve_gemm_small_destroy(b.g);
            lazyattn_context_destroy(b.ctx);
            return usage ? CLI_USAGE_ERROR : 1;
        }
    }
    for (int c = 0; c < SERVE_GEMM_SMALL_CLASSES; c++)
        for (int nt = 1; nt <= 8; nt++) serve_gemm_small_set_tuning(b.g, nt, c, &defaults[c][nt - 1]);
    cl_device_id dev = lazyattn_context_device(b.ctx);
    cl_uint cus = 0;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    reader rd;
    if (reader_create(&rd, b.cl, dev, b.q, (int)cus, (size_t)1 << 31) != 0) {
        fprintf(stderr, "%s: the read kernel or its 2 GiB buffer: failed\n", prog);
        reader_destroy(&rd);
        serve_gemm_small_destroy(b.g);
        lazyattn_context_destroy(b.ctx);
        return 1;
    }
    /* ~0.3 s of reads first: the idle clock ramps up (the first variant's
     * first shape measured 20 points low without this) */
    for (int i = 0; i < 10; i++) reader_us(&rd, b.q, rd.bytes, 60);
    const double ceiling = (double)rd.bytes / (reader_us(&rd, b.q, rd.bytes, 10) * 1e-6) * 1e-9;
    printf("device: %s, %u CUs; read ceiling (float4 over 2 GiB) %.0f GB/s; empty launch %.2f us\n",
           lazyattn_context_device_name(b.ctx), cus, ceiling, reader_us(&rd, b.q, 0, 20));
    for (int si = 0; si < N_SHAPES; si++) { /* the same bytes read plainly */
        const size_t wb = (size_t)SHAPES[si].n * (size_t)SHAPES[si].k * 2;
        const double us = reader_us(&rd, b.q, wb, 20), gbs = (double)wb / (us * 1e-6) * 1e-9;
        printf("plain read of %s's W (%.1f MB, cold): %.2f us, %.0f GB/s, %.1f%% of the ceiling\n",
               SHAPES[si].name, (double)wb / 1e6, us, gbs, 100 * gbs / ceiling);
    }
    reader_destroy(&rd);
    if (n_variants == 0) {
        memset(&variants[0], 0, sizeof variants[0]);
        variants[0].splits = -1; /* marker: the defaults per class and token tiles */
        n_variants = 1;
    }

    /* best cold time per (shape, m) over the variants */
    double best[N_SHAPES][16];
    int best_v[N_SHAPES][16];
    for (int i = 0; i < N_SHAPES; i++)
        for (int j = 0; j < 16; j++) best[i][j] = 1e30, best_v[i][j] = -1;
    int failures = 0;
    const int check_ms[] = {1, 3, 16, 32, 37, 64};

    for (int si = 0; si < N_SHAPES; si++) {
        const shape *s = &SHAPES[si];
        const size_t wbytes = (size_t)s->n * (size_t)s->k * 2;
        int copies = (int)(((size_t)600 << 20) / wbytes) + 1; /* 600 MB: 12x the L2 */
        if (copies < 2) copies = 2;
        uint16_t *wh = malloc(wbytes), *xh = malloc((size_t)SERVE_GEMM_ROW_PAD * (size_t)s->k * 2);
        float *yh = malloc(sizeof(float) * MAXM * (size_t)s->n),
              *y1 = malloc(sizeof(float) * MAXM * (size_t)s->n);
        double *ref = malloc(sizeof(double) * MAXM * SAMPLE);
        int cols[SAMPLE];
        cl_mem *w = calloc((size_t)copies, sizeof(cl_mem));
        if (!wh || !xh || !yh || !y1 || !ref || !w) {
            fprintf(stderr, "%s: out of host memory\n", prog);
            free(wh), free(xh), free(yh), free(y1), free(ref), free(w);
            failures++;
            break;
        }
        for (size_t i = 0; i < (size_t)s->n * (size_t)s->k; i++) wh[i] = rnd_bf16();
        for (size_t i = 0; i < (size_t)SERVE_GEMM_ROW_PAD * (size_t)s->k; i++) xh[i] = rnd_bf16();
        for (int i = 0; i < SAMPLE; i++) /* spread, with each range's first and last */
            cols[i] = i < 6 ? (int[]){0, s->cols[0] - 1, s->cols[0], s->n - 1, s->n - s->cols[s->n_outs - 1], 17}[i] % s->n
                            : (int)((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 33) % s->n;
        cl_int err;
        for (int c = 0; c < copies; c++) {
            w[c] = clCreateBuffer(b.cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, wbytes, wh, &err);
            if (err != CL_SUCCESS) {
                printf("%s: W copy %d: OpenCL error %d\n", s->name, c, err);
                copies = c;
                break;
            }
        }
        cl_mem x = clCreateBuffer(b.cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                  (size_t)SERVE_GEMM_ROW_PAD * (size_t)s->k * 2, xh, &err);
        int bufs_ok = copies > 0 && err == CL_SUCCESS;
        cl_mem y[3] = {NULL, NULL, NULL};
        for (int i = 0; i < s->n_outs; i++) {
            y[i] = clCreateBuffer(b.cl, CL_MEM_READ_WRITE, sizeof(float) * MAXM * (size_t)s->cols[i], NULL,
                                  &err);
            bufs_ok &= err == CL_SUCCESS;
        }
        if (!bufs_ok) { /* no W copy (the modulo below), X or Y */
            printf("%s: buffers: OpenCL error (W copies %d)\n", s->name, copies);
            failures++;
            for (int c = 0; c < copies; c++) clReleaseMemObject(w[c]);
            if (x) clReleaseMemObject(x);
            for (int i = 0; i < s->n_outs; i++)
                if (y[i]) clReleaseMemObject(y[i]);
            free(w), free(wh), free(xh), free(yh), free(y1), free(ref);
            continue;
        }

        /* the references of the check sizes (all rows of the largest) */
        if (checks)
            for (int r = 0; r < MAXM; r++)
                for (int i = 0; i < SAMPLE; i++) {
                    double acc = 0;
                    const uint16_t *wr = wh + (size_t)cols[i] * (size_t)s->k,
                                   *xr = xh + (size_t)r * (size_t)s->k;
                    for (int k = 0; k < s->k; k++)
                        acc += (double)serve_float_of_bf16(xr[k]) * serve_float_of_bf16(wr[k]);
                    ref[r * SAMPLE + i] = acc;
                }
        printf("\n%s: N %d K %d, W %.1f MB, %d copies rotated (cold)\n", s->name, s->n, s->k,
               (double)wbytes / 1e6, copies);
        printf("%-22s %3s %3s %8s %8s %6s %8s %6s %8s %6s %9s\n", "variant", "M", "S", "us", "GB/s",
               "%read", "hot us", "%hot", "strm us", "%strm", "max err");

        for (int v = 0; v < n_variants; v++) {
            char vname[64];
            const serve_gemm_small_tuning *t = &variants[v];
            if (t->splits == -1) {
                snprintf(vname, sizeof vname, "defaults");
                for (int c = 0; c < SERVE_GEMM_SMALL_CLASSES; c++)
                    for (int nt = 1; nt <= 8; nt++)
                        serve_gemm_small_set_tuning(b.g, nt, c, &defaults[c][nt - 1]);
            } else {
                snprintf(vname, sizeof vname, "%d,%d,%d,%d,%d,%d,%d,%d", t->r, t->wr, t->wk, t->u,
                         t->pipe, t->whint, t->splits, t->xs);
                st = serve_gemm_small_set_tuning(b.g, 0, -1, t);
                if (st != LAZYATTN_STATUS_OK) {
                    printf("%-22s set_tuning: %s\n", vname, serve_last_error());
                    failures++;
                    continue;
                }
                if (si == 0 && getenv("SERVE_GEMM_SMALL_VERBOSE")) {
                    const char *log = serve_gemm_small_build_log(b.g, 8, 0);
                    for (const char *l = log; l && *l;) { /* the register lines */
                        const char *e = strchr(l, '\n');
                        size_t n = e ? (size_t)(e - l) : strlen(l);
                        if (memmem(l, n, "registers", 9) || memmem(l, n, "Compiling", 9) ||
                            memmem(l, n, "spill", 5))
                            printf("  ptxas %.*s\n", (int)n, l);
                        l = e ? e + 1 : l + n;
                    }
                }
            }
            double errs[16];
            for (int mi = 0; mi < n_ms; mi++) errs[mi] = -1;
            if (checks)
                for (size_t ci = 0; ci < sizeof check_ms / sizeof *check_ms; ci++) {
                    const int m = check_ms[ci];
                    int io = fill_y(&b, s, y, NAN);
                    st = run_once(&b, s, m, x, w[0], y, 0, NULL);
                    if (st != LAZYATTN_STATUS_OK) {
                        printf("%-22s M %d: run: %s\n", vname, m, serve_last_error());
                        failures++;
                        continue;
                    }
                    io |= read_y(&b, s, y, yh);
                    int unwritten = 0, overwritten = 0;
                    for (int r = 0; r < MAXM; r++)
                        for (int c = 0; c < s->n; c++) {
                            const float f = yh[(size_t)r * (size_t)s->n + (size_t)c];
                            if (r < m && !isfinite(f)) unwritten++;
                            if (r >= m && !isnan(f)) overwritten++;
                        }
                    double num = 0, den = 0, worst = 0;
                    for (int r = 0; r < m; r++)
                        for (int i = 0; i < SAMPLE; i++) {
                            const double d = yh[(size_t)r * (size_t)s->n + (size_t)cols[i]] - ref[r * SAMPLE + i];
                            num += d * d, den += ref[r * SAMPLE + i] * ref[r * SAMPLE + i];
                            if (fabs(d) > worst) worst = fabs(d);
                        }
                    const double rel = sqrt(num / den), rms = sqrt(den / (m * SAMPLE));
                    /* Y += X W^T on top: 2 ref */
                    st = run_once(&b, s, m, x, w[0], y, 1, NULL);
                    io |= read_y(&b, s, y, y1);
                    double num2 = 0;
                    for (int r = 0; r < m; r++)
                        for (int i = 0; i < SAMPLE; i++) {
                            const double d = y1[(size_t)r * (size_t)s->n + (size_t)cols[i]] - 2 * ref[r * SAMPLE + i];
                            num2 += d * d;
                        }
                    const double rel2 = sqrt(num2 / (4 * den));
                    /* the same again: bitwise equal */
                    io |= fill_y(&b, s, y, NAN);
                    st |= run_once(&b, s, m, x, w[0], y, 0, NULL);
                    io |= read_y(&b, s, y, y1);
                    long diff = 0;
                    for (int r = 0; r < m; r++)
                        for (int c = 0; c < s->n; c++)
                            diff += memcmp(&yh[(size_t)r * (size_t)s->n + (size_t)c],
                                           &y1[(size_t)r * (size_t)s->n + (size_t)c], 4) != 0;
                    const int ok = st == 0 && !io && !unwritten && !overwritten && rel < 1e-5 &&
                                   rel2 < 1e-5 && diff == 0 && isfinite(rel);
                    if (!ok) failures++;
                    if (!ok || m == 64)
                        printf("%-22s check M %2d: S %d, rel err %.2e (max abs %.2e, rms %.1f), "
                               "accumulate %.2e, unwritten %d, written past M %d, repeat diffs %ld%s: %s\n",
                               vname, m, serve_gemm_small_splits(b.g, m, s->n, s->k), rel, worst,
                               rms, rel2, unwritten, overwritten, diff,
                               io ? ", a fill or read failed" : "", ok ? "ok" : "FAILED");
                    for (int mi = 0; mi < n_ms; mi++)
                        if (ms[mi] == m) errs[mi] = rel;
                    if (m == 64 || m == 16 || m == 1)
                        for (int mi = 0; mi < n_ms; mi++)
                            if (errs[mi] < 0 && ((m == 1 && ms[mi] <= 8) || (m == 16 && ms[mi] > 8 && ms[mi] <= 16) || (m == 64 && ms[mi] > 32)))
                                errs[mi] = rel;
                }
            for (int mi = 0; mi < n_ms; mi++) {
                const int m = ms[mi];
                const int n = reps < MAXREP ? reps : MAXREP;
                cl_event ev[MAXREP + 3] = {NULL}; /* a failed run leaves its event NULL */
                double cold[MAXREP], hot[MAXREP];
                st = 0;
                for (int i = 0; i < 3; i++) st |= run_once(&b, s, m, x, w[i % copies], y, 0, &ev[i]);
                for (int i = 0; i < n; i++) st |= run_once(&b, s, m, x, w[(i + 3) % copies], y, 0, &ev[i + 3]);
                clFinish(b.q);
                /* the stream: n back-to-back launches, each on its own W copy,
                 * END of the last minus START of the first, over n */
                double stream = 0.0;
                if (ev[3] && ev[n + 2]) {
                    cl_ulong s0 = 0, s1 = 0;
                    clGetEventProfilingInfo(ev[3], CL_PROFILING_COMMAND_START, sizeof s0, &s0, NULL);
                    clGetEventProfilingInfo(ev[n + 2], CL_PROFILING_COMMAND_END, sizeof s1, &s1, NULL);
                    stream = s1 > s0 ? (double)(s1 - s0) * 1e-3 / n : 0.0; /* 0: no profile */
                }
                for (int i = 0; i < n + 3; i++) {
                    if (i >= 3) cold[i - 3] = ev[i] ? event_us(ev[i]) : 0.0;
                    if (ev[i]) clReleaseEvent(ev[i]);
                    ev[i] = NULL;
                }
                for (int i = 0; i < 3; i++) st |= run_once(&b, s, m, x, w[0], y, 0, &ev[i]);
                for (int i = 0; i < n; i++) st |= run_once(&b, s, m, x, w[0], y, 0, &ev[i + 3]);
                clFinish(b.q);
                for (int i = 0; i < n + 3; i++) {
                    if (i >= 3) hot[i - 3] = ev[i] ? event_us(ev[i]) : 0.0;
                    if (ev[i]) clReleaseEvent(ev[i]);
                }
                if (st) {
                    printf("%-22s M %d: run failed: %s\n", vname, m, serve_last_error());
                    failures++;
                    continue;
                }
                qsort(cold, (size_t)n, sizeof *cold, cmp_double);
                qsort(hot, (size_t)n, sizeof *hot, cmp_double);
                const double us = cold[n / 2], uh = hot[n / 2];
                const double gbs = (double)wbytes / (us * 1e-6) * 1e-9,
                             gbh = (double)wbytes / (uh * 1e-6) * 1e-9;
                const double gbst = stream > 0 ? (double)wbytes / (stream * 1e-6) * 1e-9 : 0.0;
                printf("%-22s %3d %3d %8.2f %8.0f %5.1f%% %8.2f %5.1f%% %8.2f %5.1f%% %9.2e\n", vname, m,
                       serve_gemm_small_splits(b.g, m, s->n, s->k), us, gbs, 100 * gbs / ceiling,
                       uh, 100 * gbh / ceiling, stream, 100 * gbst / ceiling, errs[mi]);
                if (us < best[si][mi]) best[si][mi] = us, best_v[si][mi] = v;
            }
        }
        for (int c = 0; c < copies; c++) clReleaseMemObject(w[c]);
        free(w);
        clReleaseMemObject(x);
        for (int i = 0; i < s->n_outs; i++) clReleaseMemObject(y[i]);
        free(wh), free(xh), free(yh), free(y1), free(ref);
    }

    printf("\nbest per shape (cold, W rotated; read ceiling %.0f GB/s)\n", ceiling);
    printf("%-8s %6s %6s %3s %8s %8s %6s  %s\n", "proj", "N", "K", "M", "us", "GB/s", "%read", "variant");
    for (int si = 0; si < N_SHAPES; si++)
        for (int mi = 0; mi < n_ms; mi++) {
            if (best_v[si][mi] < 0) continue;
            const serve_gemm_small_tuning *t = &variants[best_v[si][mi]];
            const double gbs = (double)SHAPES[si].n * SHAPES[si].k * 2 / (best[si][mi] * 1e-6) * 1e-9;
            if (t->splits == -1)
                printf("%-8s %6d %6d %3d %8.2f %8.0f %5.1f%%  defaults\n", SHAPES[si].name,
                       SHAPES[si].n, SHAPES[si].k, ms[mi], best[si][mi], gbs, 100 * gbs / ceiling);
            else
                printf("%-8s %6d %6d %3d %8.2f %8.0f %5.1f%%  %d,%d,%d,%d,%d,%d,%d,%d\n", SHAPES[si].name,
                       SHAPES[si].n, SHAPES[si].k, ms[mi], best[si][mi], gbs, 100 * gbs / ceiling, t->r,
                       t->wr, t->wk, t->u, t->pipe, t->whint, t->splits, t->xs);
        }
    printf("checks: %s\n", !checks ? "skipped" : failures ? "FAILED" : "all passed");
    serve_gemm_small_destroy(b.g);
    lazyattn_context_destroy(b.ctx);
    return failures ? 1 : 0;
}
