/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tune_kernels: sweeps the portable kernels' tile geometry
 * (lazyattn_kernel_tuning) on the current device, CLBlast style, and prints
 * the best as a line of the tuning database (lib/attn/tuning_db.inc), keyed by
 * the device name, head_dim, group and dtype.
 *
 * Shapes (Llama-3.1-8B heads by default: 32 q / 8 kv, d 128, f16, block 16):
 *   prefill: S tokens of causal self-attention over their own blocks;
 *   decode:  B1 x L1 and B2 x L2 sequences of documents at non-zero deltas.
 * Every candidate's output is compared with the default geometry's
 * (normalised error <= 1e-4: only the f32 summation order may differ; the
 * default itself is checked against the float64 reference by the tests),
 * then timed with profiling events (median of --reps). A decode candidate
 * scores the sum of its two shapes' times relative to the default's.
 *
 * Usage: tune_kernels [--small] [--reps N] [--out FILE] [--head-dim D]
 *        [--q-heads H] [--kv-heads K] [--dtype f32|f16|bf16] [--block B]
 * --small: short shapes and few candidates (CPU implementations).
 * The portable path is forced (portable_only). Not part of `meson test`.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "cli_options.h"
#include "lazyattn.h"


static lazyattn_context *g_ctx;
static int g_reps = 10;

static uint64_t g_rng = 0x7a11u;
static float frand(void) { return bench_frand(&g_rng); }

static cl_mem buf(const void *data, size_t bytes) {
    return bench_buffer(lazyattn_context_cl_context(g_ctx), data, bytes);
}


static double ev_ms(cl_event a, cl_event b) {
    cl_ulong t0 = 0, t1 = 0;
    CLCHECK(clGetEventProfilingInfo(a, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL));
    CLCHECK(clGetEventProfilingInfo(b, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL));
    return (double)(t1 - t0) * 1e-6;
}

/* ---- the problem: one pool, a prefill and two decode batches ------------ */

typedef struct problem {
    lazyattn_attention_config cfg;
    lazyattn_pool *pool;
    int n_tokens;
    lazyattn_prefill_args prefill;
    lazyattn_decode_args decode[2];
    cl_mem mems[32];
    int n_mems;
} problem;

static cl_mem keep(problem *p, cl_mem m) {
    p->mems[p->n_mems++] = m;
    return m;
}

static cl_mem random_buffer(problem *p, size_t n) {
    float *x = malloc(sizeof(float) * n);
    if (!x) exit(1);
    for (size_t i = 0; i < n; i++) x[i] = frand();
    cl_mem m = keep(p, buf(x, sizeof(float) * n));
    free(x);
    return m;
}

/* Tokens 0..n_tokens-1 live in blocks 0.. in order, K stored at position
 * i % 2048 (documents of 2048 tokens). A sequence over tokens [first,
 * first + len) places them at logical base + j (delta base + first + j -
 * stored). */
static void table_for(problem *p, int first, int len, int base, uint64_t *table, int32_t *epos) {
    const int B = p->cfg.block_size;
    for (int e = 0; e < (len + B - 1) / B; e++) {
        int tok = first + e * B, l = len - e * B < B ? len - e * B : B;
        int logical = base + e * B, stored = tok % 2048;
        CHECK(lazyattn_entry_pack(tok / B, logical - stored, l, &table[e]));
        epos[e] = logical;
    }
}

static void problem_make(problem *p, int S, const int db[2], const int dl[2]) {
    const lazyattn_attention_config *c = &p->cfg;
    const int B = c->block_size, nkv = c->n_kv_heads, d = c->head_dim, H = c->n_q_heads;
    int n = S;
    for (int i = 0; i < 2; i++)
        if (db[i] * dl[i] > n) n = db[i] * dl[i];
    n = (n + B - 1) / B * B;
    p->n_tokens = n;
    lazyattn_pool_config pc = {1, nkv, d, B, c->dtype, 0, LAZYATTN_KV_LAYOUT_ROWS};
    pc.budget_bytes = (uint64_t)(n / B + 1) * 2 * nkv * B * d * lazyattn_dtype_size(c->dtype);
    CHECK(lazyattn_pool_create(g_ctx, &pc, &p->pool));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n / B));
    CHECK(lazyattn_pool_alloc(p->pool, n / B, ids)); /* 0, 1, ... in a fresh pool */
    free(ids);
    int32_t *slot = malloc(sizeof(int32_t) * (size_t)n), *stored = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) slot[i] = i, stored[i] = i % 2048;
    lazyattn_attention *a;
    CHECK(lazyattn_attention_create(g_ctx, c, &a));
    const int chunk = 8192;
    for (int t0 = 0; t0 < n; t0 += chunk) { /* K/V written in chunks: host memory stays small */
        int m = n - t0 < chunk ? n - t0 : chunk;
        cl_mem k = random_buffer(p, (size_t)m * nkv * d), v = random_buffer(p, (size_t)m * nkv * d);
        cl_mem sm = buf(slot + t0, sizeof(int32_t) * m), spm = buf(stored + t0, sizeof(int32_t) * m);
        CHECK(lazyattn_write_kv(a, p->pool, 0, m, k, v, sm, spm, NULL, NULL));
        CLCHECK(clFinish(lazyattn_context_queue(g_ctx)));
        clReleaseMemObject(sm), clReleaseMemObject(spm);
        clReleaseMemObject(p->mems[--p->n_mems]), clReleaseMemObject(p->mems[--p->n_mems]);
    }
    CHECK(lazyattn_attention_check(a, NULL));
    lazyattn_attention_destroy(a);
    free(slot), free(stored);

    /* prefill: S causal tokens at logical 0.. over tokens 0.. */
    {
        int ne = (S + B - 1) / B;
        uint64_t *table = malloc(8 * (size_t)ne);
        int32_t *epos = malloc(4 * (size_t)ne), *qpos = malloc(4 * (size_t)S);
        table_for(p, 0, S, 0, table, epos);
        for (int t = 0; t < S; t++) qpos[t] = t;
        lazyattn_prefill_args x = {S, ne, random_buffer(p, (size_t)S * H * d), keep(p, buf(qpos, 4 * (size_t)S)),
                                   keep(p, buf(table, 8 * (size_t)ne)), keep(p, buf(epos, 4 * (size_t)ne)),
                                   keep(p, buf(NULL, sizeof(float) * S * H * d)),
                                   NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
        p->prefill = x;
        free(table), free(epos), free(qpos);
    }
    /* decode batches: sequence s over tokens s * L .. */
    for (int i = 0; i < 2; i++) {
        const int nb = db[i], L = dl[i], per = (L + B - 1) / B;
        uint64_t *table = malloc(8 * (size_t)nb * per);
        int32_t *epos = malloc(4 * (size_t)nb * per), *offs = malloc(4 * (size_t)(nb + 1));
        int32_t *qpos = malloc(4 * (size_t)nb);
        for (int s = 0; s < nb; s++) {
            table_for(p, s * L, L, 100 + 37 * s, table + (size_t)s * per, epos + (size_t)s * per);
            offs[s] = s * per;
            qpos[s] = 100 + 37 * s + L - 1;
        }
        offs[nb] = nb * per;
        lazyattn_decode_args x = {nb, per, 0, random_buffer(p, (size_t)nb * H * d),
                                  keep(p, buf(qpos, 4 * (size_t)nb)), keep(p, buf(offs, 4 * (size_t)(nb + 1))),
                                  keep(p, buf(table, 8 * (size_t)nb * per)),
                                  keep(p, buf(epos, 4 * (size_t)nb * per)),
                                  keep(p, buf(NULL, sizeof(float) * nb * H * d)),
                                  NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
        p->decode[i] = x;
        free(table), free(epos), free(offs), free(qpos);
    }
}

/* Runs one kernel (0 prefill, 1 and 2 the decode batches); the median
 * time over g_reps in ms, the output in out (if not NULL). */
static double run(lazyattn_attention *a, problem *p, int which, float *out, size_t n_out) {
    cl_command_queue q = lazyattn_context_queue(g_ctx);
    double t[64];
    int reps = g_reps > 64 ? 64 : g_reps;
    for (int r = -2; r < reps; r++) {
        cl_event e;
        if (which == 0) CHECK(lazyattn_prefill(a, p->pool, 0, &p->prefill, NULL, &e));
        else CHECK(lazyattn_decode(a, p->pool, 0, &p->decode[which - 1], NULL, &e));
        CLCHECK(clWaitForEvents(1, &e));
        if (r >= 0) t[r] = ev_ms(e, e);
        if (which && r >= 0) break; /* warm-up only: timed below */
        clReleaseEvent(e);
    }
    if (which) {
        /* the decode is two kernels: time the pair from the end of a 4-byte
         * fill enqueued just before */
        static cl_mem scratch;
        if (!scratch) scratch = buf(NULL, 64);
        cl_int zero = 0;
        for (int r = 0; r < reps; r++) {
            cl_event e0, e1;
            CLCHECK(clEnqueueFillBuffer(q, scratch, &zero, 4, 0, 4, 0, NULL, &e0));
            CHECK(lazyattn_decode(a, p->pool, 0, &p->decode[which - 1], NULL, &e1));
            CLCHECK(clWaitForEvents(1, &e1));
            cl_ulong t0 = 0, t1 = 0;
            CLCHECK(clGetEventProfilingInfo(e0, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL));
            CLCHECK(clGetEventProfilingInfo(e1, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL));
            t[r] = (double)(t1 - t0) * 1e-6;
            clReleaseEvent(e0), clReleaseEvent(e1);
        }
    }
    CHECK(lazyattn_attention_check(a, NULL));
    if (out) {
        cl_mem m = which == 0 ? p->prefill.out : p->decode[which - 1].out;
        CLCHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, sizeof(float) * n_out, out, 0, NULL, NULL));
    }
    qsort(t, (size_t)reps, sizeof *t, bench_cmp_double);
    return t[reps / 2];
}

static double max_rel_diff(const float *a, const float *b, size_t n) {
    double big = 1e-30, diff = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs((double)b[i]) > big) big = fabs((double)b[i]);
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= diff)) diff = d; /* NaN wins */
    }
    return diff / big;
}

static void print_tile(FILE *f, const lazyattn_tile_params *t) {
    fprintf(f, "{%d, %d, %d, %d, %d, %d, %d, %d, %d}", t->rows, t->keys, t->work_group, t->score_rows,
            t->score_keys, t->out_rows, t->out_dims, t->kv_together, t->prefetch);
}

/* One prefill candidate: the prefill tile `tile` with the decode of `base`;
 * built, compared with the default's output (ref), timed, and taken as
 * *best_tile (with *best_ms) when it is right and faster. Refused tiles are
 * reported and skipped. */
static void try_prefill(const lazyattn_attention_config *cfg, const lazyattn_kernel_tuning *base,
                        lazyattn_tile_params tile, problem *p, float *got, const float *ref, size_t n,
                        double flops, double *best_ms, lazyattn_tile_params *best_tile) {
    lazyattn_kernel_tuning t;
    memset(&t, 0, sizeof t);
    t.prefill = tile;
    t.decode = base->decode;
    t.decode_groups_per_cu = base->decode_groups_per_cu;
    lazyattn_attention *a;
    int st = lazyattn_attention_create_tuned(g_ctx, cfg, &t, &a);
    print_tile(stdout, &t.prefill);
    if (st) {
        printf(": refused (%s)\n", lazyattn_last_error());
        return;
    }
    lazyattn_kernel_tuning got_t;
    CHECK(lazyattn_attention_get_tuning(a, &got_t));
    double ms = run(a, p, 0, got, n), diff = max_rel_diff(got, ref, n);
    printf(" wg %d: %.3f ms, %.2f TFLOP/s, diff %.1e%s\n", got_t.prefill.work_group, ms, flops / ms * 1e-9,
           diff, diff <= 1e-4 ? "" : " WRONG");
    if (diff <= 1e-4 && ms < *best_ms) *best_ms = ms, *best_tile = got_t.prefill;
    lazyattn_attention_destroy(a);
}

static const char usage_text[] =
    "usage: tune_kernels [--small] [--reps N] [--out FILE] [--head-dim D] [--q-heads H]\n"
    "                    [--kv-heads K] [--dtype f32|f16|bf16] [--block B]\n"
    "Sweeps the portable kernels' tile geometry on the default device (portable path forced),\n"
    "checks every candidate against the default's output, times it, and prints a line of\n"
    "lib/attn/tuning_db.inc (to --out too). --small uses shapes that suit a CPU. Exit status: 0 done,\n"
    "1 a failure, 2 a bad command line.\n";

int main(int argc, char **argv) {
    /* a line per step as it happens, in a log too (stdout is fully buffered in a pipe) */
    setvbuf(stdout, NULL, _IOLBF, 0);
    int small = 0;
    const char *out_path = NULL;
    lazyattn_attention_config cfg;
    lazyattn_attention_config_default(&cfg);
    int dtype = (int)cfg.dtype;
    cli_option opts[] = {
        {.name = "--small", .type = CLI_FLAG, .dest = &small},
        {.name = "--reps", .type = CLI_INT, .dest = &g_reps, .min = 1, .max = 64},
        {.name = "--out", .type = CLI_STRING, .dest = &out_path},
        {.name = "--head-dim", .type = CLI_INT, .dest = &cfg.head_dim, .min = 16, .max = 256},
        {.name = "--q-heads", .type = CLI_INT, .dest = &cfg.n_q_heads, .min = 1, .max = 4096},
        {.name = "--kv-heads", .type = CLI_INT, .dest = &cfg.n_kv_heads, .min = 1, .max = 4096},
        {.name = "--block", .type = CLI_INT, .dest = &cfg.block_size, .min = 1, .max = 256},
        {.name = "--dtype", .type = CLI_ENUM, .dest = &dtype, .choices = "f32|f16|bf16"},
    };
    int r = cli_parse("tune_kernels", usage_text, opts, (int)(sizeof opts / sizeof opts[0]), argc,
                      argv);
    if (r) return r == CLI_HELP ? 0 : 2;
    cfg.dtype = (lazyattn_dtype)dtype; /* f32|f16|bf16 are the enum's 0, 1, 2 */
    /* opened before the sweep, so that a bad path costs no tuning run */
    FILE *f = out_path ? fopen(out_path, "a") : NULL;
    if (out_path && !f) {
        fprintf(stderr, "tune_kernels: --out %s: %s\n", out_path, strerror(errno));
        return 1;
    }
    lazyattn_context_options o;
    lazyattn_context_options_init(&o);
    o.portable_only = 1;
    o.profiling = 1;
    CHECK(lazyattn_context_create(&o, &g_ctx));
    lazyattn_attention *def;
    CHECK(lazyattn_attention_create(g_ctx, &cfg, &def)); /* checks the configuration too */
    const int group = cfg.n_q_heads / cfg.n_kv_heads, D = cfg.head_dim;
    printf("device: %s; d=%d, %d/%d heads, dtype %d, block %d\n", lazyattn_context_device_name(g_ctx), D,
           cfg.n_q_heads, cfg.n_kv_heads, (int)cfg.dtype, cfg.block_size);

    problem p;
    memset(&p, 0, sizeof p);
    p.cfg = cfg;
    const int S = small ? 256 : 4096;
    const int db[2] = {small ? 4 : 16, 1}, dl[2] = {small ? 512 : 4096, small ? 2048 : 32768};
    problem_make(&p, S, db, dl);
    size_t n_pre = (size_t)S * cfg.n_q_heads * D, n_dec[2] = {(size_t)db[0] * cfg.n_q_heads * D,
                                                               (size_t)db[1] * cfg.n_q_heads * D};
    float *ref_pre = malloc(sizeof(float) * n_pre), *got = malloc(sizeof(float) * n_pre);
    float *ref_dec[2] = {malloc(sizeof(float) * n_dec[0]), malloc(sizeof(float) * n_dec[1])};
    lazyattn_kernel_tuning best, def_t;
    CHECK(lazyattn_attention_get_tuning(def, &def_t));
    best = def_t;
    const double flops = 4.0 * cfg.n_q_heads * D * (double)S * S / 2;
    double best_pre = run(def, &p, 0, ref_pre, n_pre);
    double def_dec[2];
    for (int i = 0; i < 2; i++) def_dec[i] = run(def, &p, 1 + i, ref_dec[i], n_dec[i]);
    printf("default prefill ");
    print_tile(stdout, &def_t.prefill);
    printf(": %.3f ms, %.2f TFLOP/s (S=%d causal)\n", best_pre, flops / best_pre * 1e-9, S);
    printf("default decode ");
    print_tile(stdout, &def_t.decode);
    printf(" x %d/CU: %.3f ms (%dx%d), %.3f ms (%dx%d)\n", def_t.decode_groups_per_cu, def_dec[0],
           db[0], dl[0], def_dec[1], db[1], dl[1]);
    lazyattn_attention_destroy(def);

    /* ---- prefill sweep ---- */
    static const int rk[][2] = {{32, 32}, {32, 64}, {64, 32}, {64, 64}, {16, 64}, {16, 32}};
    static const int sc[][2] = {{4, 4}, {8, 4}, {4, 8}, {2, 4}, {4, 2}};
    static const int ot[][2] = {{8, 8}, {4, 8}, {8, 4}};
    const int n_rk = small ? 2 : 6, n_sc = small ? 2 : 5, n_ot = small ? 1 : 3;
    for (int i = 0; i < n_rk; i++)
        for (int j = 0; j < n_sc; j++)
            for (int k = 0; k < n_ot; k++)
                try_prefill(&cfg, &def_t,
                            (lazyattn_tile_params){rk[i][0] < group ? group : rk[i][0] / group * group,
                                                   rk[i][1], 0, sc[j][0], sc[j][1], ot[k][0], ot[k][1], 2, 2},
                            &p, got, ref_pre, n_pre, flops, &best_pre, &best.prefill);

    /* the best prefill tile with its K/V staging modes (kv_together,
     * prefetch): one buffer with V loaded with K or with the next K loaded
     * during the output, two buffers with or without the next tile
     * prefetched (refused where they do not fit) */
    {
        static const int modes[][2] = {{2, 1}, {2, 3}, {1, 2}, {1, 1}};
        const lazyattn_tile_params base = best.prefill;
        for (int i = 0; i < (small ? 2 : 4); i++) {
            lazyattn_tile_params tile = base;
            tile.kv_together = modes[i][0], tile.prefetch = modes[i][1];
            try_prefill(&cfg, &def_t, tile, &p, got, ref_pre, n_pre, flops, &best_pre, &best.prefill);
        }
    }

    /* ---- decode sweep (cl/decode.cl, cl/decode_warp.cl) ---- */
    /* key slots per chunk, work-items, dims per work-item in the output
     * step, V rows in flight per work-item (score_keys), L2 prefetch
     * (1 OpenCL's prefetch(), 3 PTX on NVIDIA, 2 none), V ring (kv_together
     * 1 on, 2 off), work-groups per CU, step 1's K pipeline (score_rows,
     * cl/decode.cl LZ_FRM: 1 whole rows, 6 and 11 two keys a query read, 10
     * four), 1 + sums in local memory 1 + key-major probabilities 2
     * (out_rows): the chunk x CU grid with and without the ring, single
     * changes to the H200's p7 best (docs/PERFLOG.md, p7-decode calls 3 and
     * 4), then the p8 pipelines (p8-decode calls 1 and 2), then the
     * small-work-group decode (cl/decode_warp.cl, kv_together 3: batches of 8
     * keys, 32 work-items of 4 dims, with decode.cl's reduction (prefetch 2)
     * or its own (1) or by the split count (3); p8-warp-decode, p8 final) */
    static const int dec[][9] = {
        {512, 128, 8, 4, 2, 1, 4, 1, 1},   {512, 128, 8, 4, 2, 1, 8, 1, 1},   {256, 128, 8, 4, 2, 1, 4, 1, 1},
        {256, 128, 8, 4, 2, 1, 8, 1, 1},   {256, 128, 8, 4, 2, 1, 16, 1, 1},  {128, 128, 8, 4, 2, 1, 8, 1, 1},
        {512, 128, 8, 4, 2, 2, 4, 1, 1},   {256, 128, 8, 4, 2, 2, 8, 1, 1},   {256, 128, 8, 4, 2, 2, 4, 1, 1},
        {256, 128, 8, 4, 2, 2, 16, 1, 1},  {128, 128, 8, 4, 2, 2, 8, 1, 1},   {256, 64, 8, 4, 2, 1, 8, 1, 1},
        {256, 128, 8, 8, 2, 1, 8, 1, 1},   {256, 128, 8, 2, 2, 1, 8, 1, 1},   {256, 128, 4, 4, 2, 1, 8, 1, 1},
        {256, 128, 8, 4, 1, 2, 8, 1, 1},   {256, 128, 8, 4, 3, 2, 8, 1, 1},   {256, 128, 8, 4, 1, 1, 8, 1, 1},
        {512, 128, 8, 4, 2, 1, 4, 11, 3},  {512, 128, 8, 4, 2, 1, 4, 6, 4},   {512, 128, 8, 4, 2, 1, 4, 6, 1},
        {512, 128, 8, 4, 2, 1, 4, 11, 1},  {512, 128, 8, 4, 2, 1, 4, 1, 3},   {1024, 128, 8, 4, 2, 1, 4, 6, 3},
        {512, 128, 8, 4, 2, 1, 4, 10, 4},  {512, 128, 8, 4, 2, 1, 8, 11, 3},  {256, 128, 8, 4, 2, 1, 8, 11, 3},
        {8, 32, 4, 1, 2, 3, 16, 0, 0},     {8, 32, 4, 1, 2, 3, 12, 0, 0},     {8, 32, 4, 1, 1, 3, 16, 0, 0},
        {8, 32, 4, 1, 3, 3, 16, 0, 0},
    };
    static const int dec_small[] = {2, 3, 7, 15, 17, 5, 18, 26, 27, 29, 30}; /* --small: these rows only */
    const int n_cand = small ? (int)(sizeof dec_small / sizeof dec_small[0]) : (int)(sizeof dec / sizeof dec[0]);
    double best_score = 2.0;
    for (int i = 0; i < n_cand; i++) {
        const int *x = dec[small ? dec_small[i] : i];
        lazyattn_kernel_tuning t;
        memset(&t, 0, sizeof t);
        t.prefill = best.prefill;
        if (D % x[2]) continue;
        t.decode = (lazyattn_tile_params){0, x[0], x[1], x[7], x[3], x[8], x[2], x[5], x[4]};
        t.decode_groups_per_cu = x[6];
        lazyattn_attention *a;
        int st = lazyattn_attention_create_tuned(g_ctx, &cfg, &t, &a);
        print_tile(stdout, &t.decode);
        printf(" x %d/CU", x[6]);
        if (st) {
            printf(": refused (%s)\n", lazyattn_last_error());
            continue;
        }
        double ms[2], diff = 0;
        for (int s = 0; s < 2; s++) {
            ms[s] = run(a, &p, 1 + s, got, n_dec[s]);
            double dd = max_rel_diff(got, ref_dec[s], n_dec[s]);
            if (!(dd <= diff)) diff = dd;
        }
        double score = ms[0] / def_dec[0] + ms[1] / def_dec[1];
        printf(": %.3f ms, %.3f ms, score %.3f, diff %.1e%s\n", ms[0], ms[1], score, diff,
               diff <= 1e-4 ? "" : " WRONG");
        if (diff <= 1e-4 && score < best_score) {
            best_score = score;
            lazyattn_kernel_tuning gt;
            CHECK(lazyattn_attention_get_tuning(a, &gt));
            best.decode = gt.decode;
            best.decode_groups_per_cu = gt.decode_groups_per_cu;
        }
        lazyattn_attention_destroy(a);
    }

    best.decode.rows = 0;
    printf("best prefill %.3f ms (%.2f TFLOP/s), decode score %.3f of the default\n", best_pre,
           flops / best_pre * 1e-9, best_score);
    for (int k = 0; k < (f ? 2 : 1); k++) {
        FILE *o2 = k ? f : stdout;
        fprintf(o2, "{\"%s\", %d, %d, %d, {", lazyattn_context_device_name(g_ctx), D, group, (int)cfg.dtype);
        print_tile(o2, &best.prefill);
        fprintf(o2, ", ");
        print_tile(o2, &best.decode);
        fprintf(o2, ", %d}},\n", best.decode_groups_per_cu);
    }
    if (f) {
        int bad = ferror(f);
        if (fclose(f) != 0 || bad) { /* the row is on stdout above */
            fprintf(stderr, "tune_kernels: writing %s failed\n", out_path);
            return 1;
        }
    }
    for (int i = 0; i < p.n_mems; i++) clReleaseMemObject(p.mems[i]);
    lazyattn_pool_destroy(p.pool);
    free(ref_pre), free(got), free(ref_dec[0]), free(ref_dec[1]);
    lazyattn_context_destroy(g_ctx);
    return 0;
}
