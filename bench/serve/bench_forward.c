/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_forward: the decoder's forward times, case for case those of the
 * torch peer (bench/llama_peer.py), so that an end-to-end figure has its
 * production-class anchor from the same device call (issue 16):
 *   cold prefill of 2048 and of 10240 tokens (one causal sequence, LM head
 *   on the last token);
 *   32 new tokens over 10240 cached ones;
 *   2080 new tokens over 8192 cached ones;
 *   decode steps: B sequences (--decode, default 1, 16, 64) of one new token
 *   each over --decode-context cached tokens of its own (default 2048), with
 *   the host's share of the step (time inside the enqueue calls and uploads,
 *   commands enqueued, in all and per kind) and, with --device-time, the device time per phase
 *   (profiling events; the wall times are then of a profiling queue).
 * Random weights (serve_model_init_random), or a llama GGUF file's (--gguf:
 * shape and weights from the file, e.g. bench/serve/write_gguf's; its
 * weight types and the weights' device bytes printed), and random tokens;
 * each case is
 * run --warmup times, then timed --reps times (wall clock from an idle
 * queue to the next token read back: host work included, as torch's CUDA
 * events include its launches), median printed. A forward longer than
 * --max-rows runs in chunks of --max-rows tokens, each over the blocks
 * already written (as the engine does); its enqueues are printed per chunk
 * (a forward of the model).
 */
#include "background_work.h"
#include "cli_options.h"
#include "gemv_quant.h" /* SERVE_QUANT_GEMV_MAX_ROWS */
#include "serve.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define FWD_STR_(x) #x
#define FWD_STR(x) FWD_STR_(x)

typedef struct fwd_case {
    const char *name;
    int cached; /* tokens already in the cache (written by an untimed prefill) */
    int fresh;  /* tokens of the timed forward, positions cached .. cached + fresh - 1 */
} fwd_case;

static const fwd_case fwd_cases[] = {
    {"cold 2048", 0, 2048},
    {"cold 10240", 0, 10240},
    {"32 over 10240 cached", 10240, 32},
    {"2080 over 8192 cached", 8192, 2080},
};
#define FWD_N_CASES ((int)(sizeof fwd_cases / sizeof fwd_cases[0]))
#define FWD_MAX_TOKENS 10272 /* the longest context of a case */

#define FWD_MAX_DECODE 8 /* decode batch sizes on one command line */

typedef struct fwd {
    serve_model *model;
    lazyattn_pool *pool;
    const serve_model_config *mc;
    int32_t *blocks; /* [n_blocks]: logical block b of the sequence lives in blocks[b] */
    int n_blocks;
    int32_t *tokens, *pos, *slots; /* [FWD_MAX_TOKENS] */
    uint64_t *table;               /* [n_blocks] */
    int32_t *entry_pos;            /* [n_blocks] */
    int max_tokens;                /* tokens, pos, slots: [max_tokens] */
} fwd;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Prefills positions [from, to) of a sequence whose logical block b lives
 * in blocks[b], in chunks of max_rows; the table of each chunk covers every
 * written token up to the chunk's end. */
static int fwd_prefill_seq(fwd *f, const int32_t *blocks, int from, int to, int32_t *next) {
    const int bs = f->mc->block_size;
    for (int i = from; i < to; i++) f->slots[i] = blocks[i / bs] * bs + i % bs;
    for (int c0 = from; c0 < to; c0 += f->mc->max_rows) {
        int n = to - c0 < f->mc->max_rows ? to - c0 : f->mc->max_rows;
        int end = c0 + n, n_entries = (end + bs - 1) / bs;
        for (int e = 0; e < n_entries; e++) {
            int len = end - e * bs < bs ? end - e * bs : bs;
            int st = lazyattn_entry_pack(blocks[e], 0, len, &f->table[e]);
            if (st) return serve_lz_fail(st, "lazyattn_entry_pack");
            f->entry_pos[e] = e * bs;
        }
        serve_prefill_args a = {.n_tokens = n,
                                .tokens = f->tokens + c0,
                                .q_pos = f->pos + c0,
                                .slots = f->slots + c0,
                                .stored_pos = f->pos + c0,
                                .n_entries = n_entries,
                                .table = f->table,
                                .entry_pos = f->entry_pos,
                                .want_logits = end == to};
        int st = serve_model_prefill(f->model, f->pool, &a, end == to ? next : NULL);
        if (st) return st;
    }
    return LAZYATTN_STATUS_OK;
}

static int fwd_prefill(fwd *f, int from, int to, int32_t *next) {
    return fwd_prefill_seq(f, f->blocks, from, to, next);
}

/* Decode steps: B sequences, sequence s in blocks [s * per, (s + 1) * per)
 * with context tokens written by an untimed prefill, then warmup + reps
 * steps of one new token per sequence at position context (each step
 * rewrites that slot). Wall ms median; the host's share (time in the
 * enqueue calls and uploads) and the commands enqueued per step; device ms
 * per phase when the timer has events. */
typedef struct fwd_decode_result {
    double wall_ms, host_ms, device_ms[SERVE_PHASE_COUNT];
    double step_ms; /* the step's wall time on this thread, the token read's wait excluded */
    double cpu_ms;  /* the same in CPU time */
    double span_ms; /* device span: first command's start to the last's end */
    double enqueues, enqueues_by[SERVE_ENQ_COUNT];
} fwd_decode_result;

/* The enqueues per kind (serve_enqueue_kind) of a run, "gemm 4, attention 2, ..." */
static void fwd_print_kinds(const double *by_kind) {
    const char *sep = "";
    for (int k = 0; k < SERVE_ENQ_COUNT; k++) {
        if (by_kind[k] == 0) continue;
        printf("%s%s %.0f", sep, serve_enqueue_kind_name((serve_enqueue_kind)k), by_kind[k]);
        sep = ", ";
    }
}

static int fwd_decode_case(fwd *f, int B, int context, int warmup, int reps, fwd_decode_result *r) {
    const int bs = f->mc->block_size, per = (context + 1 + bs - 1) / bs;
    if ((int64_t)B * per > f->n_blocks || context + 1 > f->max_tokens)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "bench_forward: %d sequences of %d tokens need %lld blocks, the pool has %d",
                          B, context + 1, (long long)B * per, f->n_blocks);
    int32_t next = -1;
    for (int s = 0; s < B; s++) {
        int st = fwd_prefill_seq(f, f->blocks + (size_t)s * (size_t)per, 0, context, &next);
        if (st) return st;
    }
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)B * 4), *nx = malloc(sizeof(int32_t) * (size_t)B);
    uint64_t *table = malloc(sizeof(uint64_t) * (size_t)B * (size_t)per);
    int32_t *epos = malloc(sizeof(int32_t) * (size_t)B * (size_t)per);
    double *t = calloc((size_t)reps, sizeof *t);
    int st = LAZYATTN_STATUS_OK;
    if (!tok || !nx || !table || !epos || !t)
        st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "bench_forward: decode tables");
    int32_t *qpos = tok ? tok + B : NULL, *slots = tok ? tok + 2 * B : NULL; /* tok: [4][B] */
    int32_t *stored = tok ? tok + 3 * B : NULL;
    int32_t *offsets = malloc(sizeof(int32_t) * (size_t)(B + 1));
    if (!st && !offsets) st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "bench_forward: offsets");
    for (int s = 0; s < B && !st; s++) {
        const int32_t *blk = f->blocks + (size_t)s * (size_t)per;
        tok[s] = f->tokens[(s * 7919) % f->max_tokens];
        qpos[s] = stored[s] = context;
        slots[s] = blk[context / bs] * bs + context % bs;
        offsets[s] = s * per;
        for (int e = 0; e < per && !st; e++) {
            const int len = context + 1 - e * bs < bs ? context + 1 - e * bs : bs;
            st = lazyattn_entry_pack(blk[e], 0, len, &table[(size_t)s * (size_t)per + (size_t)e]);
            if (st) st = serve_lz_fail(st, "lazyattn_entry_pack");
            epos[(size_t)s * (size_t)per + (size_t)e] = e * bs;
        }
    }
    if (!st) offsets[B] = B * per;
    serve_timer *timer = serve_model_timer(f->model);
    cl_command_queue q = serve_model_queue(f->model);
    memset(r, 0, sizeof *r);
    for (int i = -warmup; i < reps && !st; i++) {
        cl_int err = clFinish(q);
        if (err != CL_SUCCESS) {
            st = serve_cl_fail(err, "clFinish");
            break;
        }
        if (timer) serve_timer_collect(timer); /* the prefills' and earlier steps' events */
        if (timer) timer->trace_n = 0;          /* the trace keeps the last step's */
        serve_timer before = timer ? *timer : (serve_timer){0};
        const double t0 = serve_now(), cpu0 = serve_thread_cpu_now();
        serve_decode_args da = {.n_seqs = B,
                                .tokens = tok,
                                .q_pos = qpos,
                                .slots = slots,
                                .stored_pos = stored,
                                .seq_offsets = offsets,
                                .table = table,
                                .entry_pos = epos,
                                .max_entries = per};
        st = serve_model_decode(f->model, f->pool, &da, nx); /* reads the tokens back */
        if (!st && (err = clFinish(q)) != CL_SUCCESS) st = serve_cl_fail(err, "clFinish");
        if (st) break;
        const double ms = (serve_now() - t0) * 1e3, cpu1 = serve_thread_cpu_now();
        for (int s = 0; s < B && !st; s++)
            if (nx[s] < 0 || nx[s] >= f->mc->vocab)
                st = serve_fail(LAZYATTN_STATUS_OPENCL, "bench_forward: next token %d", (int)nx[s]);
        if (i < 0 || st) continue;
        t[i] = ms;
        if (timer) {
            serve_timer_collect(timer);
            for (int p = 0; p < SERVE_PHASE_COUNT; p++) {
                r->host_ms += (timer->host_s[p] - before.host_s[p]) * 1e3 / reps;
                r->device_ms[p] += (timer->seconds[p] - before.seconds[p]) * 1e3 / reps;
            }
            r->host_ms += (timer->upload_s - before.upload_s) * 1e3 / reps;
            r->step_ms += ms / reps - (timer->wait_s - before.wait_s) * 1e3 / reps;
            r->cpu_ms += (cpu1 - cpu0 - (timer->wait_cpu_s - before.wait_cpu_s)) * 1e3 / reps;
            r->span_ms += (timer->span_s - before.span_s) * 1e3 / reps;
            r->enqueues += (double)(timer->enqueues - before.enqueues) / reps;
            for (int k = 0; k < SERVE_ENQ_COUNT; k++)
                r->enqueues_by[k] += (double)(timer->enqueues_by[k] - before.enqueues_by[k]) / reps;
        }
    }
    if (!st) {
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        r->wall_ms = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    }
    free(tok), free(nx), free(table), free(epos), free(t), free(offsets);
    return st;
}

/* The profiled commands of one decode step, one line each: the case, the
 * command's index, phase, start (µs from the step's first command), device
 * µs and the idle µs since the previous command ended. */
static int fwd_write_trace(FILE *out, const char *name, const serve_timer *t) {
    uint64_t t0 = t->trace_n ? t->trace_events[0].start_ns : 0, prev = t0;
    for (int i = 0; i < t->trace_n; i++) {
        const serve_timer_event *e = &t->trace_events[i];
        if (fprintf(out, "%s,%d,%s,%.3f,%.3f,%.3f\n", name, i, serve_phase_name((serve_phase)e->phase),
                    1e-3 * (double)(e->start_ns - t0), 1e-3 * (double)(e->end_ns - e->start_ns),
                    e->start_ns > prev ? 1e-3 * (double)(e->start_ns - prev) : 0.0) < 0)
            return -1;
        if (e->end_ns > prev) prev = e->end_ns;
    }
    return 0;
}

/* One case: the cached part once (untimed), then warmup + reps timed runs
 * of the fresh part (each rewrites the same blocks with the same K/V).
 * enqueues, by_kind: of one forward (chunk) of the last run. */
static int fwd_run_case(fwd *f, const fwd_case *c, int warmup, int reps, double *median_ms,
                        double *enqueues, double *by_kind) {
    int32_t next = -1;
    cl_command_queue q = serve_model_queue(f->model);
    int st = c->cached ? fwd_prefill(f, 0, c->cached, &next) : LAZYATTN_STATUS_OK;
    if (st) return st;
    double *t = calloc((size_t)reps, sizeof *t);
    if (!t) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "bench_forward: %d times", reps);
    for (int r = -warmup; r < reps && !st; r++) {
        cl_int err = clFinish(q);
        if (err != CL_SUCCESS) {
            st = serve_cl_fail(err, "clFinish");
            break;
        }
        serve_timer *timer = serve_model_timer(f->model);
        serve_timer before = timer ? *timer : (serve_timer){0};
        double t0 = serve_now();
        st = fwd_prefill(f, c->cached, c->cached + c->fresh, &next); /* reads the token back */
        const int chunks = (c->fresh + f->mc->max_rows - 1) / f->mc->max_rows;
        *enqueues = timer ? (double)(timer->enqueues - before.enqueues) / chunks : 0;
        for (int k = 0; k < SERVE_ENQ_COUNT; k++)
            by_kind[k] = timer ? (double)(timer->enqueues_by[k] - before.enqueues_by[k]) / chunks : 0;
        if (!st && (err = clFinish(q)) != CL_SUCCESS) st = serve_cl_fail(err, "clFinish");
        if (!st && r >= 0) t[r] = (serve_now() - t0) * 1e3;
        if (!st && (next < 0 || next >= f->mc->vocab))
            st = serve_fail(LAZYATTN_STATUS_OPENCL, "bench_forward: next token %d", (int)next);
    }
    if (!st) {
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        *median_ms = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    }
    free(t);
    return st;
}

/* --background LIST: kinds[0..*n) the kinds named, distinct; 0, or -1 on
 * an unknown, repeated or empty one. */
static int fwd_parse_background(const char *list, bg_kind *kinds, int *n) {
    *n = 0;
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int k = 0;
        while (k < BG_COUNT && !(strlen(bg_kind_name((bg_kind)k)) == len &&
                                 strncmp(bg_kind_name((bg_kind)k), p, len) == 0))
            k++;
        if (k == BG_COUNT) return -1;
        for (int i = 0; i < *n; i++)
            if (kinds[i] == (bg_kind)k) return -1;
        kinds[(*n)++] = (bg_kind)k;
        if (!end) return 0;
        p = end + 1;
    }
}

static void fwd_release(fwd *f) {
    free(f->blocks), free(f->tokens), free(f->pos), free(f->slots), free(f->table);
    free(f->entry_pos);
    lazyattn_pool_destroy(f->pool);
    serve_model_destroy(f->model);
}

/* The model, and a pool of at least FWD_MAX_TOKENS tokens and decode_tokens
 * tokens (the decode cases' sequences, each in whole blocks);
 * max_tokens: the longest sequence. */
static int fwd_setup(fwd *f, lazyattn_context *ctx, const serve_model_config *mc, uint64_t seed,
                     const serve_gguf *gguf, int64_t decode_blocks, int max_tokens) {
    int st = serve_model_create(ctx, mc, &f->model);
    if (!st) st = gguf ? serve_model_load_gguf(f->model, gguf) : serve_model_init_random(f->model, seed);
    if (st) return st;
    f->mc = serve_model_get_config(f->model);
    const int bs = f->mc->block_size;
    f->max_tokens = max_tokens > FWD_MAX_TOKENS ? max_tokens : FWD_MAX_TOKENS;
    const int64_t need = (FWD_MAX_TOKENS + bs - 1) / bs > decode_blocks ? (FWD_MAX_TOKENS + bs - 1) / bs
                                                                           : decode_blocks;
    if (need > INT32_MAX / bs)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "bench_forward: %lld blocks", (long long)need);
    f->n_blocks = (int)need;
    lazyattn_pool_config pc;
    serve_model_pool_config(f->mc,
                            (uint64_t)f->n_blocks * (uint64_t)bs * serve_model_kv_bytes_per_token(f->mc),
                            &pc);
    if ((st = lazyattn_pool_create(ctx, &pc, &f->pool))) return serve_lz_fail(st, "lazyattn_pool_create");
    f->blocks = malloc((size_t)f->n_blocks * sizeof *f->blocks);
    f->table = malloc((size_t)f->n_blocks * sizeof *f->table);
    f->entry_pos = malloc((size_t)f->n_blocks * sizeof *f->entry_pos);
    f->tokens = malloc((size_t)f->max_tokens * sizeof *f->tokens);
    f->pos = malloc((size_t)f->max_tokens * sizeof *f->pos);
    f->slots = malloc((size_t)f->max_tokens * sizeof *f->slots);
    if (!f->blocks || !f->table || !f->entry_pos || !f->tokens || !f->pos || !f->slots)
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "bench_forward: tables");
    if ((st = lazyattn_pool_alloc(f->pool, f->n_blocks, f->blocks)))
        return serve_lz_fail(st, "lazyattn_pool_alloc");
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < f->max_tokens; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        f->tokens[i] = (int32_t)(x % (uint64_t)f->mc->vocab);
        f->pos[i] = i;
        f->slots[i] = f->blocks[i / bs] * bs + i % bs; /* rewritten per sequence by fwd_prefill_seq */
    }
    return LAZYATTN_STATUS_OK;
}

int main(int argc, char **argv) {
    static const char prog[] = "bench_forward";
    static const char usage[] =
        "usage: bench_forward [options]\n"
        "  --model tiny|small|8b   model shape, random weights (default 8b)\n"
        "  --gguf FILE             a llama GGUF file's shape and weights instead\n"
        "  --gemm auto|f32|bf16    projections: f32 CLBlast or bf16 (tensor cores on NVIDIA);\n"
        "                          default auto (bf16 where the NVIDIA path runs)\n"
        "  --max-rows N            most tokens per forward (default 10240, 16..65536)\n"
        "  --warmup N              untimed runs per case (default 2, 0..100)\n"
        "  --reps N                timed runs per case, median printed (default 5, 1..1000)\n"
        "  --seed S                weight and token seed (default 1)\n"
        "  --decode LIST           decode batch sizes, comma separated, 1..256, at most 8, no repeats\n"
        "                          (default 1,16,64)\n"
        "  --decode-context N      cached tokens of each decoding sequence (default 2048,\n"
        "                          1..65535)\n"
        "  --no-forwards           only the decode steps\n"
        "  --background LIST       the decode steps again under each kind of a tier's host\n"
        "                          work, looped on a thread of its own over a 256 MiB value\n"
        "                          (comma separated: " BG_KIND_CHOICES ";\n"
        "                          background_work.h); printed with the step's host wall and\n"
        "                          CPU ms and the GB/s the background moved\n"
        "  --serving-cpu N         pins the timing thread to CPU N (after the OpenCL set-up)\n"
        "  --background-cpus LIST  runs --background's threads on these CPUs (comma separated)\n"
        "  --dequantize            with --gguf: quantized weights dequantized at load (default:\n"
        "                          kept quantized on the device where the GEMV reads the type)\n"
        "  --device-time           profiling events: device ms per phase of a decode step\n"
        "                          and its span (first start to last end, gaps included;\n"
        "                          the wall times are then those of a profiling queue)\n"
        "  --device-trace FILE     with --device-time: each command of each case's last decode\n"
        "                          step as CSV (case,index,phase,start_us,device_us,gap_us;\n"
        "                          a call of two launches, e.g. NVIDIA's split decode, has the\n"
        "                          last one's event: the first is in the gap before it)\n"
        "Cases: cold 2048, cold 10240, 32 over 10240 cached, 2080 over 8192 cached, decode\n"
        "steps of B x 1 token over N cached each (bench/llama_peer.py runs the same in torch).\n"
        "Exit status: 0 done, 1 a failure, 2 a bad command line.\n";
    int model = 2, gemm = SERVE_GEMM_AUTO, max_rows = 10240, warmup = 2, reps = 5;
    int decode_context = 2048, n_decode = 3, no_forwards = 0, device_time = 0, dequantize = 0;
    int decode_b[FWD_MAX_DECODE] = {1, 16, 64};
    uint64_t seed = 1;
    const char *gguf_path = NULL, *trace_path = NULL, *background = NULL;
    int serving_cpu = -1, bg_cpus[64], n_bg_cpus = 0;
    cli_option opts[] = {
        {.name = "--model", .type = CLI_ENUM, .dest = &model, .choices = "tiny|small|8b"},
        {.name = "--gguf", .type = CLI_STRING, .dest = &gguf_path},
        {.name = "--gemm", .type = CLI_ENUM, .dest = &gemm, .choices = "auto|f32|bf16"},
        {.name = "--max-rows", .type = CLI_INT, .dest = &max_rows, .min = 16, .max = 65536},
        {.name = "--warmup", .type = CLI_INT, .dest = &warmup, .min = 0, .max = 100},
        {.name = "--reps", .type = CLI_INT, .dest = &reps, .min = 1, .max = 1000},
        {.name = "--seed", .type = CLI_U64, .dest = &seed},
        {.name = "--decode", .type = CLI_INT_LIST, .dest = decode_b, .min = 1, .max = 256,
         .max_items = FWD_MAX_DECODE, .count = &n_decode},
        {.name = "--decode-context", .type = CLI_INT, .dest = &decode_context, .min = 1, .max = 65535},
        {.name = "--no-forwards", .type = CLI_FLAG, .dest = &no_forwards},
        {.name = "--background", .type = CLI_STRING, .dest = &background},
        {.name = "--serving-cpu", .type = CLI_INT, .dest = &serving_cpu, .min = 0, .max = 1023},
        {.name = "--background-cpus", .type = CLI_INT_LIST, .dest = bg_cpus, .min = 0, .max = 1023,
         .max_items = 64, .count = &n_bg_cpus},
        {.name = "--device-time", .type = CLI_FLAG, .dest = &device_time},
        {.name = "--device-trace", .type = CLI_STRING, .dest = &trace_path},
        {.name = "--dequantize", .type = CLI_FLAG, .dest = &dequantize},
    };
    int pr = cli_parse(prog, usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv);
    if (pr == CLI_HELP) return 0;
    if (pr != CLI_OK) return pr;
    if (gguf_path && cli_given(opts, (int)(sizeof opts / sizeof opts[0]), "--model"))
        return cli_fail(prog, "--gguf", "the file gives the model's shape: drop --model");
    if (trace_path && !device_time)
        return cli_fail(prog, "--device-trace", "needs --device-time (the trace is of its events)");
    for (int i = 0; i < n_decode; i++) /* a decode step holds at most max_rows sequences */
        if (decode_b[i] > max_rows)
            return cli_fail(prog, "--decode", "batch size %d over --max-rows %d", decode_b[i], max_rows);
    bg_kind bg_kinds[BG_COUNT] = {BG_NONE};
    int n_bg = 1;
    if (background && fwd_parse_background(background, bg_kinds, &n_bg))
        return cli_fail(prog, "--background", "'%s': a comma list of distinct kinds of "
                        BG_KIND_CHOICES, background);
    if (n_bg_cpus && !background)
        return cli_fail(prog, "--background-cpus", "needs --background");
    if (background && device_time)
        return cli_fail(prog, "--background", "times host work: drop --device-time");
    FILE *trace = NULL; /* opened first: a bad path fails before the model is built */
    if (trace_path && (!(trace = fopen(trace_path, "w")) ||
                       fprintf(trace, "case,index,phase,start_us,device_us,gap_us\n") < 0)) {
        fprintf(stderr, "%s: --device-trace %s: %s\n", prog, trace_path, strerror(errno));
        if (trace) fclose(trace);
        return 1;
    }
    static const char *const presets[] = {"tiny", "small", "8b"};
    serve_model_config mc;
    int st = serve_model_config_preset(&mc, presets[model]);
    serve_gguf *gguf = NULL; /* block size and KV type stay the preset's */
    if (!st && gguf_path && !(st = serve_gguf_open(gguf_path, &gguf)))
        st = serve_gguf_model_config(gguf, &mc);
    if (st) {
        fprintf(stderr, "%s: %s\n", prog, serve_last_error());
        serve_gguf_close(gguf);
        if (trace) fclose(trace);
        return 1;
    }
    mc.max_rows = max_rows;
    mc.gemm = (serve_gemm_mode)gemm;
    mc.dequantize_weights = dequantize;
    lazyattn_context_options co;
    lazyattn_context_options_init(&co);
    co.profiling = device_time;
    lazyattn_context *ctx = NULL;
    if ((st = lazyattn_context_create(&co, &ctx))) {
        fprintf(stderr, "%s: lazyattn_context_create: %s\n", prog, lazyattn_last_error());
        serve_gguf_close(gguf);
        if (trace) fclose(trace);
        return 1;
    }
    if (serving_cpu >= 0 && bg_pin_self(serving_cpu)) {
        lazyattn_context_destroy(ctx);
        serve_gguf_close(gguf);
        if (trace) fclose(trace);
        return cli_fail(prog, "--serving-cpu", "%d: cannot pin the thread there", serving_cpu);
    }
    char name[256] = "?";
    cl_device_id dev = NULL;
    if (clGetCommandQueueInfo(lazyattn_context_queue(ctx), CL_QUEUE_DEVICE, sizeof dev, &dev,
                              NULL) == CL_SUCCESS)
        clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    printf("device: %s (%s path); model %s, max_rows %d, %d warm-up(s), median of %d\n", name,
           lazyattn_context_fast_path(ctx) ? "NVIDIA" : "portable",
           gguf_path ? gguf_path : presets[model], max_rows, warmup, reps);
    fwd f = {0};
    int decode_max = 0;
    for (int i = 0; i < n_decode; i++)
        if (decode_b[i] > decode_max) decode_max = decode_b[i];
    const int64_t per = (decode_context + 1 + mc.block_size - 1) / mc.block_size;
    const double t_load = serve_now();
    st = fwd_setup(&f, ctx, &mc, seed, gguf, decode_max * per, decode_context + 1);
    serve_gguf_close(gguf);
    if (!st && gguf_path) {
        uint64_t weight_bytes = 0, other_bytes = 0;
        serve_model_device_bytes(f.model, &weight_bytes, &other_bytes);
        printf("%d layers, hidden %d, ffn %d, vocab %d; %s; %.1f MiB of weights on the device "
               "(%.1f MiB other), loaded in %.1f s\n", mc.n_layers, mc.hidden, mc.ffn, mc.vocab,
               serve_model_weights_note(f.model), (double)weight_bytes / (1u << 20),
               (double)other_bytes / (1u << 20), serve_now() - t_load);
    }
    serve_timer timer = {.enabled = device_time};
    if (!st && trace) {
        timer.trace = 1, timer.trace_cap = 1 << 16;
        timer.trace_events = malloc(sizeof *timer.trace_events * (size_t)timer.trace_cap);
        if (!timer.trace_events)
            st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "bench_forward: the trace");
    }
    if (!st) serve_model_set_timer(f.model, &timer); /* host times always; events with --device-time */
    if (!st)
        printf("gemm: %s\n", serve_model_uses_bf16(f.model) ? "bf16" : "f32 (CLBlast)");
    if (!st && serve_model_kept_quantized(f.model)) /* the load line said which types */
        printf("kept quantized: the GEMV at <= " FWD_STR(SERVE_QUANT_GEMV_MAX_ROWS)
               " rows, above dequantized on the device into a scratch for the GEMM\n");
    if (!st && !no_forwards) printf("%-24s %10s %9s  %s\n", "case", "ms", "enqueues", "per forward, by kind");
    for (int i = 0; i < FWD_N_CASES && !st && !no_forwards; i++) {
        double ms = 0, enq = 0, by_kind[SERVE_ENQ_COUNT];
        st = fwd_run_case(&f, &fwd_cases[i], warmup, reps, &ms, &enq, by_kind);
        if (!st) {
            printf("%-24s %10.2f %9.0f  ", fwd_cases[i].name, ms, enq);
            fwd_print_kinds(by_kind);
            printf("\n");
        }
        fflush(stdout);
    }
    if (!st && n_decode > 0 && background) {
        printf("%-24s %-10s %10s %10s %10s %10s %11s\n", "decode step", "background", "wall ms",
               "enqueue ms", "host ms", "CPU ms", "bg GB/s");
        const size_t bg_bytes = (size_t)256 << 20;
        for (int k = 0; k < n_bg && !st; k++)
            for (int i = 0; i < n_decode && !st; i++) {
                bg_work *bg = NULL;
                if (bg_start(bg_kinds[k], lazyattn_context_cl_context(ctx),
                             lazyattn_context_device(ctx), bg_bytes, bg_cpus, n_bg_cpus, &bg)) {
                    st = serve_fail(LAZYATTN_STATUS_OPENCL, "bench_forward: --background %s",
                                    bg_kind_name(bg_kinds[k]));
                    break;
                }
                fwd_decode_result r;
                st = fwd_decode_case(&f, decode_b[i], decode_context, warmup, reps, &r);
                double gbs = 0;
                if (bg_stop(bg, &gbs) && !st)
                    st = serve_fail(LAZYATTN_STATUS_OPENCL, "bench_forward: --background %s failed",
                                    bg_kind_name(bg_kinds[k]));
                if (st) break;
                char name[64];
                snprintf(name, sizeof name, "%d x 1 over %d", decode_b[i], decode_context);
                printf("%-24s %-10s %10.2f %10.2f %10.2f %10.2f %11.2f\n", name,
                       bg_kind_name(bg_kinds[k]), r.wall_ms, r.host_ms, r.step_ms, r.cpu_ms, gbs);
                fflush(stdout);
            }
        n_decode = 0; /* printed */
    }
    if (!st && n_decode > 0) {
        printf("%-24s %10s %10s %9s", "decode step", "wall ms", "host ms", "enqueues");
        if (device_time) {
            for (int p = 0; p < SERVE_PHASE_COUNT; p++) printf(" %10s", serve_phase_name((serve_phase)p));
            printf(" %10s", "span");
        }
        printf("  by kind\n");
    }
    for (int i = 0; i < n_decode && !st; i++) {
        fwd_decode_result r;
        st = fwd_decode_case(&f, decode_b[i], decode_context, warmup, reps, &r);
        if (st) break;
        char name[64];
        snprintf(name, sizeof name, "%d x 1 over %d", decode_b[i], decode_context);
        printf("%-24s %10.2f %10.2f %9.0f", name, r.wall_ms, r.host_ms, r.enqueues);
        if (device_time) {
            for (int p = 0; p < SERVE_PHASE_COUNT; p++) printf(" %10.3f", r.device_ms[p]);
            printf(" %10.3f", r.span_ms);
        }
        printf("  ");
        fwd_print_kinds(r.enqueues_by);
        printf("\n");
        fflush(stdout);
        if (trace && fwd_write_trace(trace, name, &timer))
            st = serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "bench_forward: writing %s", trace_path);
    }
    if (!st) serve_model_set_timer(f.model, NULL);
    serve_timer_release(&timer);
    free(timer.trace_events);
    if (trace && fclose(trace) && !st)
        st = serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "bench_forward: closing %s", trace_path);
    if (!st && serve_model_uses_bf16(f.model)) {
        /* which kernels the times are of: a projection no tensor-core
         * kernel covers falls back to the portable one */
        int64_t n[SERVE_GEMM_KERNEL_COUNT];
        serve_gemm_bf16_counts(serve_model_gemm_bf16(f.model), n);
        printf("bf16 projections run: tensor-core large %lld, small %lld, portable %lld\n",
               (long long)n[SERVE_GEMM_KERNEL_LARGE], (long long)n[SERVE_GEMM_KERNEL_SMALL],
               (long long)n[SERVE_GEMM_KERNEL_PORTABLE]);
    }
    if (st) fprintf(stderr, "%s: %s\n", prog, serve_last_error());
    fwd_release(&f);
    lazyattn_context_destroy(ctx);
    return st ? 1 : 0;
}
