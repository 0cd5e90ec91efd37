/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_gemv_quant: the kernels that read weights kept quantized on the
 * device (serve/gemv_quant.c) on the Llama-3.1-8B projections and LM head,
 * for every kept type: the GEMV at --rows (default 1 and 8) and the
 * dequantizer into bf16 (the prefill's cost per weight). A benchmark, not
 * a test (tests/test_gemv_quant.c checks the results).
 * Random blocks (f16 scales 2^-7 .. 1), bf16 activations (the bf16
 * engine mode's). Times from profiling events, 3 warm-ups, median of
 * --reps, rotating over copies of W that together exceed 256 MiB (each
 * launch reads its weight from memory, as a decode step does). GEMV GB/s =
 * bytes of the blocks / time; dequantize GB/s = blocks read + bf16 written
 * / time.
 *   bench_gemv_quant [--reps N] [--rows 1,8] [--types q4_k,q6_k,...] [--no-head]
 * Exit status: 0 done, 1 a failure, 2 a bad command line.
 */
#include "gemv_quant.h"
#include "quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"

typedef struct shape {
    const char *name;
    int out, in;
} shape;

static const shape SHAPES[] = {{"q / o", 4096, 4096},     {"k / v", 1024, 4096},
                               {"gate / up", 14336, 4096}, {"down", 4096, 14336},
                               {"lm head", 128256, 4096}};
enum { N_SHAPES = sizeof SHAPES / sizeof SHAPES[0], MAX_REPS = 200, MAX_COPIES = 64 };

static const struct {
    const char *name;
    uint32_t type;
} TYPES[] = {{"q8_0", SERVE_GGML_Q8_0}, {"q4_0", SERVE_GGML_Q4_0}, {"q4_k", SERVE_GGML_Q4_K},
             {"q5_k", SERVE_GGML_Q5_K}, {"q6_k", SERVE_GGML_Q6_K}};
enum { N_TYPES = sizeof TYPES / sizeof TYPES[0] };

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static void put_scale(unsigned char *p) { /* an f16 of magnitude 2^-7 .. 1 */
    uint16_t h = (uint16_t)((rnd() & 1u) << 15 | (8u + rnd() % 7u) << 10 | (rnd() & 0x3FFu));
    p[0] = (unsigned char)h, p[1] = (unsigned char)(h >> 8);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double event_s(cl_event e) {
    cl_ulong t0 = 0, t1 = 0;
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    return (double)(t1 - t0) * 1e-9;
}

typedef struct bench {
    lazyattn_context *ctx;
    cl_command_queue q;
    serve_gemv_quant *g;
    int reps;
} bench;

/* rows 0: the dequantizer into bf16; else the GEMV at that many rows.
 * Median seconds into *s. */
static int time_one(bench *b, uint32_t type, const shape *sh, int rows, cl_mem *w, int copies,
                    cl_mem x, cl_mem y, cl_mem dst, double *s) {
    double t[MAX_REPS];
    for (int r = -3; r < b->reps; r++) {
        cl_event e = NULL;
        cl_mem wc = w[(r + 3) % copies];
        int st;
        if (rows == 0) {
            st = serve_dequant_run(b->g, b->q, type, wc, sh->out, sh->in, dst, SERVE_DEQUANT_BF16,
                                   &e);
        } else {
            serve_gemv_args a = {.type = type, .rows = rows, .in = sh->in, .x = x, .x_bf16 = 1,
                                 .n_outs = 1};
            a.outs[0] = (serve_gemv_out){wc, y, 0, sh->out, sh->out};
            st = serve_gemv_quant_run(b->g, b->q, &a, &e);
        }
        if (st) return st;
        clWaitForEvents(1, &e);
        if (r >= 0) t[r] = event_s(e);
        clReleaseEvent(e);
    }
    qsort(t, (size_t)b->reps, sizeof t[0], cmp_double);
    *s = t[b->reps / 2];
    return 0;
}

static cl_mem make_buffer(bench *b, size_t bytes, const void *host) {
    cl_int err;
    cl_mem m = clCreateBuffer(lazyattn_context_cl_context(b->ctx),
                              CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)host, &err);
    return err == CL_SUCCESS ? m : NULL;
}

static int run_shape(bench *b, uint32_t type, const char *type_name, const shape *sh,
                     const int *rows, int n_rows) {
    uint64_t row_bytes, block;
    const uint64_t elems = type == SERVE_GGML_Q8_0 || type == SERVE_GGML_Q4_0 ? 32 : 256;
    if (serve_ggml_row_bytes(type, (uint64_t)sh->in, "W", &row_bytes) ||
        serve_ggml_row_bytes(type, elems, "W", &block))
        return 1;
    size_t bytes = (size_t)(row_bytes * (uint64_t)sh->out);
    unsigned char *host = malloc(bytes);
    if (!host) return 1;
    for (size_t i = 0; i < bytes; i++) host[i] = (unsigned char)rnd();
    for (size_t o = 0; o + block <= bytes; o += block) {
        put_scale(host + o + (type == SERVE_GGML_Q6_K ? 208 : 0));
        if (type == SERVE_GGML_Q4_K || type == SERVE_GGML_Q5_K) put_scale(host + o + 2);
    }
    int copies = (int)((256u << 20) / bytes + 1);
    if (copies > MAX_COPIES) copies = MAX_COPIES;
    cl_mem w[MAX_COPIES] = {0};
    int st = 0;
    for (int c = 0; c < copies && !st; c++)
        if (!(w[c] = make_buffer(b, bytes, host))) st = 1;
    free(host);
    size_t n_x = (size_t)8 * (size_t)sh->in, n_y = (size_t)8 * (size_t)sh->out;
    uint16_t *xh = malloc(n_x * 2);
    if (!xh) st = 1;
    for (size_t i = 0; !st && i < n_x; i++) xh[i] = (uint16_t)(0x3C00u + (rnd() & 0x7Fu));
    cl_mem x = st ? NULL : make_buffer(b, n_x * 2, xh);
    cl_mem y = st ? NULL : make_buffer(b, n_y * 4, NULL);
    cl_mem dst = st ? NULL : make_buffer(b, (size_t)sh->out * (size_t)sh->in * 2, NULL);
    free(xh);
    if (!x || !y || !dst) st = 1;
    if (st) fprintf(stderr, "bench_gemv_quant: device memory for %s %s\n", type_name, sh->name);
    for (int i = 0; i <= n_rows && !st; i++) {
        int r = i < n_rows ? rows[i] : 0;
        double s;
        if ((st = time_one(b, type, sh, r, w, copies, x, y, dst, &s))) {
            fprintf(stderr, "bench_gemv_quant: %s\n", serve_last_error());
            break;
        }
        double moved = (double)bytes + (r ? 0.0 : (double)sh->out * (double)sh->in * 2.0);
        char what[32];
        if (r) snprintf(what, sizeof what, "gemv x %d", r);
        else snprintf(what, sizeof what, "dequant bf16");
        printf("%-5s %-10s %6d x %-6d %-13s %9.1f us %8.1f GB/s  (W %.1f MB)\n", type_name,
               sh->name, sh->out, sh->in, what, s * 1e6, moved / s * 1e-9, (double)bytes * 1e-6);
        fflush(stdout);
    }
    for (int c = 0; c < copies; c++)
        if (w[c]) clReleaseMemObject(w[c]);
    if (x) clReleaseMemObject(x);
    if (y) clReleaseMemObject(y);
    if (dst) clReleaseMemObject(dst);
    return st;
}

int main(int argc, char **argv) {
    static const char prog[] = "bench_gemv_quant";
    static const char usage[] =
        "usage: bench_gemv_quant [options]\n"
        "  --reps N        timed runs, median reported (1..200, default 20)\n"
        "  --rows LIST     GEMV row counts, 1..8, comma separated (default 1,8)\n"
        "  --types LIST    of q8_0,q4_0,q4_k,q5_k,q6_k (default all)\n"
        "  --no-head       leave out the 128256 x 4096 LM head\n"
        "Exit status: 0 done, 1 a failure, 2 a bad command line.\n";
    int reps = 20, rows[8] = {1, 8}, n_rows = 2, no_head = 0;
    const char *types = NULL;
    cli_option opts[] = {
        {.name = "--reps", .type = CLI_INT, .dest = &reps, .min = 1, .max = MAX_REPS},
        {.name = "--rows", .type = CLI_INT_LIST, .dest = rows, .min = 1,
         .max = SERVE_QUANT_GEMV_MAX_ROWS, .max_items = 8, .count = &n_rows},
        {.name = "--types", .type = CLI_STRING, .dest = &types},
        {.name = "--no-head", .type = CLI_FLAG, .dest = &no_head},
    };
    int pr = cli_parse(prog, usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv);
    if (pr == CLI_HELP) return 0;
    if (pr != CLI_OK) return pr;
    if (types)
        for (const char *p = types; *p;) {
            size_t n = strcspn(p, ",");
            int known = 0;
            for (int t = 0; t < N_TYPES; t++)
                known |= strlen(TYPES[t].name) == n && !strncmp(TYPES[t].name, p, n);
            if (!known) return cli_fail(prog, "--types", "unknown type \"%.*s\"", (int)n, p);
            p += n + (p[n] == ',');
        }
    bench b = {.reps = reps};
    lazyattn_context_options co;
    lazyattn_context_options_init(&co);
    co.profiling = 1;
    if (lazyattn_context_create(&co, &b.ctx)) {
        fprintf(stderr, "%s: lazyattn_context_create: %s\n", prog, lazyattn_last_error());
        return 1;
    }
    b.q = lazyattn_context_queue(b.ctx);
    if (serve_gemv_quant_create(b.ctx, &b.g)) {
        fprintf(stderr, "%s: %s\n", prog, serve_last_error());
        lazyattn_context_destroy(b.ctx);
        return 1;
    }
    printf("device: %s; median of %d, W rotated over copies past 256 MiB, bf16 X\n",
           lazyattn_context_device_name(b.ctx), reps);
    int st = 0;
    for (int t = 0; t < N_TYPES && !st; t++) {
        if (types) {
            int want = 0;
            for (const char *p = types; *p;) {
                size_t n = strcspn(p, ",");
                want |= strlen(TYPES[t].name) == n && !strncmp(TYPES[t].name, p, n);
                p += n + (p[n] == ',');
            }
            if (!want) continue;
        }
        for (int s = 0; s < N_SHAPES && !st; s++) {
            if (no_head && s == N_SHAPES - 1) continue;
            if (TYPES[t].type != SERVE_GGML_Q8_0 && TYPES[t].type != SERVE_GGML_Q4_0 &&
                SHAPES[s].in % 256)
                continue;
            st = run_shape(&b, TYPES[t].type, TYPES[t].name, &SHAPES[s], rows, n_rows);
        }
    }
    serve_gemv_quant_destroy(b.g);
    lazyattn_context_destroy(b.ctx);
    return st ? 1 : 0;
}
