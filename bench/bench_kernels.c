/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_kernels: the kernels' speed on the GPU, in one run (issue 6).
 *
 *   1. ceilings: a read kernel (GB/s) and a register-only mma.sync loop (TFLOP/s);
 *   2. correctness of whatever path the context picked (the NVIDIA tensor-core
 *      path on an NVIDIA GPU) against the float64 reference, random inputs;
 *   3. Llama-3.1-8B heads (32 q, 8 kv, d 128, f16, block 16), timed with
 *      OpenCL profiling events (warm-up, median of REPS), with real deltas and
 *      with all deltas zero:
 *        prefill (a) 4096 (--prefill-queries) new tokens over 4 cached documents of 2048 tokens at
 *                    deltas 2048..8192, causal within the new tokens;
 *        prefill (b) S = 8192 causal self-attention, batch 2 = two calls (the
 *                    prefill API is one sequence per call), timed first start
 *                    to second end;
 *        prefill (c) S = 16384, not causal (queries past every key), batch 1;
 *        decode  B x L in {1x32768, 16x8192, 64x4096, 128x4096}, contexts of
 *                documents of 2048 tokens at distinct non-zero deltas, blocks
 *                scattered over the pool; timed from the end of a 4-byte fill
 *                enqueued just before to the end of the reduction (the
 *                decode is two kernels: split-KV + reduce).
 *   FLOPs: 4 * H * d * (visible query-key pairs), causal counted as S^2 / 2
 *   like the peer; decode bytes: K and V bytes of every context (effective).
 *
 * Usage: bench_kernels [--csv FILE] [--reps N] [--no-checks]
 *                      [--only prefill|decode|prefill_a|prefill_b|prefill_c|decode_1x32768]
 *                      [--prefill-queries T]
 *                      [--decode-tile K,W,D,G[,U[,P[,R[,S[,O]]]]]] [--decode-splits N]
 *                      [--prefill-tile R,K,W,SR,SK,OR,OD,KV,PF] [--kv-layout rows|tiled]
 * (bench/sdpa_peer.py reads the CSV; LAZYATTN_TUNE overrides the launch
 * geometry for tuning sweeps, README "Environment")
 * Not part of `meson test`. Build logs (with -cl-nv-verbose under
 * LAZYATTN_TUNE=nv.verbose=1) are printed on failure and on request.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "cli_options.h"
#include "lazyattn.h"
#include "lazyattn_testing.h" /* the reference, the workload generator */

/* generated from bench_kernels.cl by tools/cl2c.py --name bench_cl */
typedef struct bench_cl_entry {
    const char *name;
    const char *text;
} bench_cl_entry;
extern const bench_cl_entry bench_cl[];

enum { H = 32, KV = 8, D = 128, BS = 16 };

static int g_reps = 25;
static int g_prefill_queries = 4096; /* --prefill-queries: T of prefill (a) */
static int g_decode_splits; /* --decode-splits: 0 = the library's choice */
/* --kv-layout: the page order of every pool and attention (lazyattn_kv_layout;
 * the choices' indices are its values) */
static int g_kv_layout = LAZYATTN_KV_LAYOUT_ROWS;
static FILE *g_csv;


static int g_fast_disabled;

static void on_log(void *user, lazyattn_log_level level, const char *msg) {
    (void)user;
    if (strstr(msg, "fast path disabled")) g_fast_disabled = 1;
    if (level <= LAZYATTN_LOG_INFO || strstr(msg, "ptxas") || strstr(msg, "registers") ||
        strstr(msg, "spill"))
        printf("[log %d] %s\n", (int)level, msg);
}

static uint64_t rng_state = 0x1234567ull;
static float frand(void) { return bench_frand(&rng_state); } /* uniform [-1, 1) */

static lazyattn_context *g_ctx;
static cl_context g_cl;
static cl_command_queue g_q;
static cl_program g_bench;

static cl_mem buf(const void *data, size_t bytes) { return bench_buffer(g_cl, data, bytes); }

static double ev_ns(cl_event e, cl_profiling_info what) {
    cl_ulong t = 0;
    CLCHECK(clGetEventProfilingInfo(e, what, sizeof t, &t, NULL));
    return (double)t;
}


/* ---- ceilings -------------------------------------------------------------- */

static void build_bench_program(void) {
    cl_int err;
    const char *src = bench_cl[0].text;
    g_bench = clCreateProgramWithSource(g_cl, 1, &src, NULL, &err);
    CLCHECK(err);
    cl_device_id dev = lazyattn_context_device(g_ctx);
    err = clBuildProgram(g_bench, 1, &dev, "-cl-std=CL1.2", NULL, NULL);
    if (err != CL_SUCCESS) {
        static char log[1 << 16];
        clGetProgramBuildInfo(g_bench, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        fprintf(stderr, "bench program build failed (%d):\n%s\n", err, log);
        exit(1);
    }
}

static double g_read_gbs, g_mma_tflops;

/* Median ns of 9 profiled launches of a 1-D kernel, after 2 warm-ups. */
static double time_ceiling_kernel(cl_kernel k, size_t gsz, size_t lsz) {
    double t[9];
    for (int r = 0; r < 11; r++) {
        cl_event e;
        CLCHECK(clEnqueueNDRangeKernel(g_q, k, 1, NULL, &gsz, &lsz, 0, NULL, &e));
        CLCHECK(clWaitForEvents(1, &e));
        if (r >= 2) t[r - 2] = ev_ns(e, CL_PROFILING_COMMAND_END) - ev_ns(e, CL_PROFILING_COMMAND_START);
        clReleaseEvent(e);
    }
    qsort(t, 9, sizeof *t, bench_cmp_double);
    return t[4];
}

static void ceilings(void) {
    cl_int err;
    cl_uint cus = 0;
    clGetDeviceInfo(lazyattn_context_device(g_ctx), CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    /* read: 4 GiB, every byte once */
    cl_ulong n4 = (cl_ulong)1 << 28;
    cl_mem in = buf(NULL, n4 * 16);
    float pat = 1.0f;
    CLCHECK(clEnqueueFillBuffer(g_q, in, &pat, 4, 0, n4 * 16, 0, NULL, NULL));
    size_t gsz = (size_t)cus * 2048, lsz = 256;
    cl_mem out = buf(NULL, gsz * 4);
    cl_kernel k = clCreateKernel(g_bench, "bench_read", &err);
    CLCHECK(err);
    clSetKernelArg(k, 0, sizeof in, &in);
    clSetKernelArg(k, 1, sizeof out, &out);
    clSetKernelArg(k, 2, sizeof n4, &n4);
    g_read_gbs = (double)n4 * 16 / time_ceiling_kernel(k, gsz, lsz);
    clReleaseKernel(k);
    clReleaseMemObject(in);
    clReleaseMemObject(out);

    /* mma: 4 warps of 8 per compute unit... 32 warps per CU */
    size_t nw = (size_t)cus * 32;
    gsz = nw * 32, lsz = 256;
    int iters = 4096;
    cl_uint seed = 7;
    out = buf(NULL, gsz * 4);
    k = clCreateKernel(g_bench, "bench_mma", &err);
    CLCHECK(err);
    clSetKernelArg(k, 0, sizeof out, &out);
    clSetKernelArg(k, 1, sizeof iters, &iters);
    clSetKernelArg(k, 2, sizeof seed, &seed);
    g_mma_tflops = (double)nw * iters * 4 * 2.0 * 16 * 8 * 16 / time_ceiling_kernel(k, gsz, lsz) / 1e3;
    clReleaseKernel(k);
    clReleaseMemObject(out);
    printf("ceilings: read %.0f GB/s, mma.sync f16->f32 %.0f TFLOP/s\n", g_read_gbs, g_mma_tflops);
}

/* Random f16 into a pool buffer, on the device. */
static void fill_f16(cl_mem m, size_t count, cl_uint seed) {
    cl_int err;
    cl_kernel k = clCreateKernel(g_bench, "bench_fill_f16", &err);
    CLCHECK(err);
    cl_ulong n = count;
    clSetKernelArg(k, 0, sizeof m, &m);
    clSetKernelArg(k, 1, sizeof n, &n);
    clSetKernelArg(k, 2, sizeof seed, &seed);
    size_t g = 132 * 1024, l = 256;
    CLCHECK(clEnqueueNDRangeKernel(g_q, k, 1, NULL, &g, &l, 0, NULL, NULL));
    CLCHECK(clFinish(g_q));
    clReleaseKernel(k);
}

/* ---- correctness against the float64 reference ------------------------------ */

static int g_failures;

/* --decode-tile KEYS,WG,DIMS,GPC[,VROWS[,PREFETCH[,RING[,KPIPE[,ACCL]]]]]: the portable decode's geometry;
 * --prefill-tile: the portable prefill's (lazyattn_tile_params in order; 0 = choose) */
static lazyattn_kernel_tuning g_tuning;

/* One random request: n_docs documents (stored at 0, random logical starts
 * via a random base) + a question of n_q tokens (own blocks); prefill of the
 * question (causal), then decode of the last token, both vs the reference
 * (in the geometry of --prefill-tile / --decode-tile). */
static void check_case(int d, int nq_heads, int nkv, int block, int n_docs, int doc_len, int n_q,
                       lazyattn_rope_style style, int rot_dim, int base) {
    lazyattn_attention_config c;
    lazyattn_attention_config_default(&c);
    c.n_q_heads = nq_heads, c.n_kv_heads = nkv, c.head_dim = d, c.block_size = block;
    c.dtype = LAZYATTN_DTYPE_F16;
    c.rope.style = style;
    c.rope.rotary_dim = rot_dim;
    c.kv_layout = (lazyattn_kv_layout)g_kv_layout;
    int per_doc = (doc_len + block - 1) / block, q_blocks = (n_q + block - 1) / block;
    int n_entries = n_docs * per_doc + q_blocks, n_keys = n_docs * doc_len + n_q;
    lazyattn_pool_config pc = {1, nkv, d, block, LAZYATTN_DTYPE_F16, 0, c.kv_layout};
    pc.budget_bytes = (uint64_t)(n_entries + 4) * 2 * nkv * block * d * 2;
    lazyattn_pool *pool;
    lazyattn_attention *attn;
    CHECK(lazyattn_pool_create(g_ctx, &pc, &pool));
    CHECK(lazyattn_attention_create_tuned(g_ctx, &c, &g_tuning, &attn)); /* --prefill-tile / --decode-tile checked too */
    int32_t *ids = malloc(sizeof(int32_t) * n_entries);
    CHECK(lazyattn_pool_alloc(pool, n_entries, ids));
    for (int i = n_entries - 1; i > 0; i--) { /* scatter */
        int j = (int)((frand() * 0.5 + 0.5) * i);
        int32_t tmp = ids[i]; ids[i] = ids[j]; ids[j] = tmp;
    }
    size_t row = (size_t)nkv * d;
    float *k = malloc(sizeof(float) * n_keys * row), *v = malloc(sizeof(float) * n_keys * row);
    int32_t *kpos = malloc(sizeof(int32_t) * n_keys), *slot = malloc(sizeof(int32_t) * n_keys);
    int32_t *stored = malloc(sizeof(int32_t) * n_keys);
    uint64_t *table = malloc(sizeof(uint64_t) * n_entries);
    int32_t *epos = malloc(sizeof(int32_t) * n_entries);
    for (size_t i = 0; i < n_keys * row; i++) k[i] = 2 * frand(), v[i] = frand();
    int key = 0, e = 0;
    for (int s = 0; s <= n_docs; s++) {
        int len = s < n_docs ? doc_len : n_q;
        for (int off = 0; off < len; off += block, e++) {
            int l = len - off < block ? len - off : block, logical = base + key;
            int st = s < n_docs ? off : logical; /* documents stored at 0 */
            CHECK(lazyattn_entry_pack(ids[e], logical - st, l, &table[e]));
            epos[e] = logical;
            for (int j = 0; j < l; j++, key++)
                kpos[key] = logical + j, slot[key] = ids[e] * block + j, stored[key] = st + j;
        }
    }
    cl_mem km = buf(k, sizeof(float) * n_keys * row), vm = buf(v, sizeof(float) * n_keys * row);
    cl_mem sm = buf(slot, sizeof(int32_t) * n_keys), spm = buf(stored, sizeof(int32_t) * n_keys);
    CHECK(lazyattn_write_kv(attn, pool, 0, n_keys, km, vm, sm, spm, NULL, NULL));

    /* prefill of the question */
    size_t qn = (size_t)n_q * nq_heads * d;
    float *q = malloc(sizeof(float) * qn), *o = malloc(sizeof(float) * qn);
    for (size_t i = 0; i < qn; i++) q[i] = 2 * frand();
    int32_t *qpos = kpos + (n_keys - n_q);
    cl_mem qm = buf(q, sizeof(float) * qn), qpm = buf(qpos, sizeof(int32_t) * n_q);
    cl_mem tm = buf(table, sizeof(uint64_t) * n_entries), em = buf(epos, sizeof(int32_t) * n_entries);
    cl_mem om = buf(NULL, sizeof(float) * qn);
    float nan = NAN;
    CLCHECK(clEnqueueFillBuffer(g_q, om, &nan, 4, 0, sizeof(float) * qn, 0, NULL, NULL));
    CHECK(lazyattn_rope_apply(attn, n_q, nq_heads, qm, qpm, NULL, NULL));
    lazyattn_prefill_args pa = {n_q, n_entries, qm, qpm, tm, em, om,
                                NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    CHECK(lazyattn_prefill(attn, pool, 0, &pa, NULL, NULL));
    CLCHECK(clEnqueueReadBuffer(g_q, om, CL_TRUE, 0, sizeof(float) * qn, o, 0, NULL, NULL));
    CHECK(lazyattn_attention_check(attn, NULL));
    double *ref = malloc(sizeof(double) * qn);
    lazyattn_reference_args ra = {n_q, n_keys, q, qpos, k, v, kpos, ref, NULL};
    CHECK(lazyattn_reference_attention(&c, &ra));
    double perr = lazyattn_normalised_error(o, ref, qn);

    /* decode of the last question token over the whole table, 3 splits */
    size_t hn = (size_t)nq_heads * d;
    const float *q1 = q + (n_q - 1) * hn;
    int32_t offs[2] = {0, n_entries}, qp1 = qpos[n_q - 1];
    cl_mem q1m = buf(q1, sizeof(float) * hn), qp1m = buf(&qp1, 4), offm = buf(offs, 8);
    cl_mem o1m = buf(NULL, sizeof(float) * hn);
    CLCHECK(clEnqueueFillBuffer(g_q, o1m, &nan, 4, 0, sizeof(float) * hn, 0, NULL, NULL));
    CHECK(lazyattn_rope_apply(attn, 1, nq_heads, q1m, qp1m, NULL, NULL));
    lazyattn_decode_args da = {1, n_entries, 3, q1m, qp1m, offm, tm, em, o1m,
                               NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    CHECK(lazyattn_decode(attn, pool, 0, &da, NULL, NULL));
    float *o1 = malloc(sizeof(float) * hn);
    CLCHECK(clEnqueueReadBuffer(g_q, o1m, CL_TRUE, 0, sizeof(float) * hn, o1, 0, NULL, NULL));
    CHECK(lazyattn_attention_check(attn, NULL));
    double *ref1 = malloc(sizeof(double) * hn);
    lazyattn_reference_args rb = {1, n_keys, q1, &qp1, k, v, kpos, ref1, NULL};
    CHECK(lazyattn_reference_attention(&c, &rb));
    double derr = lazyattn_normalised_error(o1, ref1, hn);

    const double tol = 2e-3;
    int ok = perr <= tol && derr <= tol;
    g_failures += !ok;
    printf("check d=%d G=%d kv=%d B=%d docs=%dx%d q=%d rope=%d/%d: prefill %.2e decode %.2e %s\n", d,
           nq_heads / nkv, nkv, block, n_docs, doc_len, n_q, (int)style, rot_dim, perr, derr,
           ok ? "ok" : "FAIL");
    cl_mem mems[] = {km, vm, sm, spm, qm, qpm, tm, em, om, q1m, qp1m, offm, o1m};
    for (size_t i = 0; i < sizeof mems / sizeof *mems; i++) clReleaseMemObject(mems[i]);
    free(ids); free(k); free(v); free(kpos); free(slot); free(stored); free(table); free(epos);
    free(q); free(o); free(ref); free(o1); free(ref1);
    lazyattn_attention_destroy(attn);
    lazyattn_pool_destroy(pool);
}

/* ---- timed shapes ------------------------------------------------------------ */

typedef struct result {
    char name[64];
    double ms, ms_zero; /* real deltas, all deltas zero */
    double flops, bytes;
} result;
static result g_results[16];
static int g_n_results;

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Prefill of one or two sequences (n_calls), each n_q queries over n_entries. */
static double time_prefill(lazyattn_attention *attn, lazyattn_pool *pool,
                           const lazyattn_prefill_args *a, int n_calls) {
    double t[256];
    int reps = g_reps > 256 ? 256 : g_reps;
    for (int r = -3; r < reps; r++) {
        cl_event e[2];
        for (int i = 0; i < n_calls; i++) CHECK(lazyattn_prefill(attn, pool, 0, &a[i], NULL, &e[i]));
        CLCHECK(clWaitForEvents(1, &e[n_calls - 1]));
        if (r >= 0)
            t[r] = ev_ns(e[n_calls - 1], CL_PROFILING_COMMAND_END) - ev_ns(e[0], CL_PROFILING_COMMAND_START);
        for (int i = 0; i < n_calls; i++) clReleaseEvent(e[i]);
    }
    CHECK(lazyattn_attention_check(attn, NULL));
    return median(t, reps) * 1e-6;
}

static double host_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

/* A decode's time: from the end of a 4-byte fill enqueued just before it
 * to the end of its last kernel (what the host waits for: its own time in
 * lazyattn_decode included, as the peer's CUDA events include torch's).
 * *host: the median time of the lazyattn_decode call on the host, in us. */
static double time_decode(lazyattn_attention *attn, lazyattn_pool *pool, const lazyattn_decode_args *a,
                          cl_mem scratch, double *host) {
    double t[256], h[256];
    int reps = g_reps > 256 ? 256 : g_reps;
    cl_int zero = 0;
    for (int r = -3; r < reps; r++) {
        cl_event e0, e1;
        CLCHECK(clEnqueueFillBuffer(g_q, scratch, &zero, 4, 0, 4, 0, NULL, &e0));
        const double h0 = host_us();
        CHECK(lazyattn_decode(attn, pool, 0, a, NULL, &e1));
        const double h1 = host_us();
        CLCHECK(clWaitForEvents(1, &e1));
        if (r >= 0) {
            t[r] = ev_ns(e1, CL_PROFILING_COMMAND_END) - ev_ns(e0, CL_PROFILING_COMMAND_END);
            h[r] = h1 - h0;
        }
        clReleaseEvent(e0);
        clReleaseEvent(e1);
    }
    CHECK(lazyattn_attention_check(attn, NULL));
    *host = median(h, reps);
    return median(t, reps) * 1e-6;
}


static lazyattn_attention *make_attn(void) {
    lazyattn_attention_config c;
    lazyattn_attention_config_default(&c); /* Llama-3.1-8B: 32/8, d 128, B 16, f16 */
    c.kv_layout = (lazyattn_kv_layout)g_kv_layout;
    lazyattn_attention *attn;
    CHECK(lazyattn_attention_create_tuned(g_ctx, &c, &g_tuning, &attn));
    return attn;
}

static lazyattn_pool *make_pool(int64_t n_blocks) {
    lazyattn_pool_config pc = {1, KV, D, BS, LAZYATTN_DTYPE_F16, 0, (lazyattn_kv_layout)g_kv_layout};
    pc.budget_bytes = (uint64_t)n_blocks * 2 * KV * BS * D * 2;
    lazyattn_pool *pool;
    CHECK(lazyattn_pool_create(g_ctx, &pc, &pool));
    size_t elems = (size_t)n_blocks * KV * BS * D;
    fill_f16(lazyattn_pool_k_buffer(pool, 0), elems, 11);
    fill_f16(lazyattn_pool_v_buffer(pool, 0), elems, 12);
    return pool;
}

static cl_mem random_queries(size_t n) {
    float *q = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) q[i] = frand();
    cl_mem m = buf(q, sizeof(float) * n);
    free(q);
    return m;
}

/* One sequence of S queries at positions q_pos0, q_pos0 + 1, ... over S keys
 * stored at 0.. (delta 0) in blocks first_block.. of the pool: its arguments
 * (out NULL), its table, positions, query positions and queries in
 * mems[0..3], which the caller releases. */
static lazyattn_prefill_args sequence_args(int S, int first_block, int q_pos0, cl_mem mems[4]) {
    const int n_entries = S / BS;
    uint64_t *table = malloc(8 * (size_t)n_entries);
    int32_t *epos = malloc(4 * (size_t)n_entries), *qpos = malloc(4 * (size_t)S);
    if (!table || !epos || !qpos) {
        fprintf(stderr, "bench_kernels: out of host memory\n");
        exit(1);
    }
    for (int e = 0; e < n_entries; e++) {
        CHECK(lazyattn_entry_pack(first_block + e, 0, BS, &table[e]));
        epos[e] = e * BS;
    }
    for (int t = 0; t < S; t++) qpos[t] = q_pos0 + t;
    mems[0] = buf(table, 8 * (size_t)n_entries), mems[1] = buf(epos, 4 * (size_t)n_entries);
    mems[2] = buf(qpos, 4 * (size_t)S), mems[3] = random_queries((size_t)S * H * D);
    free(table), free(epos), free(qpos);
    lazyattn_prefill_args a = {S, n_entries, mems[3], mems[2], mems[0], mems[1], NULL,
                               NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    return a;
}

static void bench_prefill(int shape_a, int shape_b, int shape_c) {
    lazyattn_attention *attn = make_attn();
    lazyattn_kernel_tuning got;
    CHECK(lazyattn_attention_get_tuning(attn, &got));
    const lazyattn_tile_params *pt = &got.prefill;
    printf("prefill tile (portable): rows %d keys %d wg %d score %dx%d out %dx%d kv_together %d prefetch %d\n",
           pt->rows, pt->keys, pt->work_group, pt->score_rows, pt->score_keys, pt->out_rows,
           pt->out_dims, pt->kv_together, pt->prefetch);
    /* (a) 4 documents of 2048 tokens stored at 0, at logical 2048 + i * 2048
     * (deltas 2048..8192), then T new tokens with their own blocks */
    if (shape_a) {
        const int docs = 4, L = 2048, T = g_prefill_queries, base = 2048;
        int n_entries = docs * L / BS + T / BS;
        lazyattn_pool *pool = make_pool(n_entries);
        uint64_t *table = malloc(8 * n_entries), *table0 = malloc(8 * n_entries);
        int32_t *epos = malloc(4 * n_entries), *qpos = malloc(4 * T);
        for (int e = 0; e < n_entries; e++) {
            int logical = base + e * BS;
            int delta = e < docs * L / BS ? logical - (e % (L / BS)) * BS : 0;
            CHECK(lazyattn_entry_pack(e, delta, BS, &table[e]));
            CHECK(lazyattn_entry_pack(e, 0, BS, &table0[e]));
            epos[e] = logical;
        }
        for (int t = 0; t < T; t++) qpos[t] = base + docs * L + t;
        cl_mem tm = buf(table, 8 * n_entries), t0m = buf(table0, 8 * n_entries);
        cl_mem em = buf(epos, 4 * n_entries), qpm = buf(qpos, 4 * T);
        cl_mem qm = random_queries((size_t)T * H * D), om = buf(NULL, sizeof(float) * T * H * D);
        lazyattn_prefill_args a = {T, n_entries, qm, qpm, tm, em, om,
                                   NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
        lazyattn_prefill_args z = {T, n_entries, qm, qpm, t0m, em, om,
                                   NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
        result *r = &g_results[g_n_results++];
        snprintf(r->name, sizeof r->name, "prefill_a_%d_over_4x2048", T);
        r->ms = time_prefill(attn, pool, &a, 1);
        r->ms_zero = time_prefill(attn, pool, &z, 1);
        r->flops = 4.0 * H * D * ((double)T * docs * L + (double)T * T / 2);
        r->bytes = 0;
        cl_mem mems[] = {tm, t0m, em, qpm, qm, om};
        for (int i = 0; i < 6; i++) clReleaseMemObject(mems[i]);
        free(table); free(table0); free(epos); free(qpos);
        lazyattn_pool_destroy(pool);
    }
    /* (b) S = 8192 causal self-attention, batch 2: two calls, two pools regions */
    if (shape_b) {
        const int S = 8192, n_entries = S / BS;
        lazyattn_pool *pool = make_pool(2 * n_entries);
        lazyattn_prefill_args a[2];
        cl_mem mems[8];
        int nm = 0;
        for (int b = 0; b < 2; b++, nm += 4) a[b] = sequence_args(S, b * n_entries, 0, &mems[nm]);
        cl_mem om0 = buf(NULL, sizeof(float) * S * H * D), om1 = buf(NULL, sizeof(float) * S * H * D);
        a[0].out = om0, a[1].out = om1;
        result *r = &g_results[g_n_results++];
        snprintf(r->name, sizeof r->name, "prefill_b_2x8192_causal");
        r->ms = time_prefill(attn, pool, a, 2);
        r->ms_zero = r->ms; /* all deltas are zero already */
        r->flops = 2 * 4.0 * H * D * (double)S * S / 2;
        r->bytes = 0;
        for (int i = 0; i < nm; i++) clReleaseMemObject(mems[i]);
        clReleaseMemObject(om0);
        clReleaseMemObject(om1);
        lazyattn_pool_destroy(pool);
    }
    /* (c) S = 16384, not causal: every query at a position past every key */
    if (shape_c) {
        const int S = 16384, n_entries = S / BS;
        lazyattn_pool *pool = make_pool(n_entries);
        cl_mem mems[5];
        lazyattn_prefill_args a = sequence_args(S, 0, S, mems);
        a.out = mems[4] = buf(NULL, sizeof(float) * S * H * D);
        result *r = &g_results[g_n_results++];
        snprintf(r->name, sizeof r->name, "prefill_c_1x16384");
        r->ms = time_prefill(attn, pool, &a, 1);
        r->ms_zero = r->ms; /* all deltas are zero already */
        r->flops = 4.0 * H * D * (double)S * S;
        r->bytes = 0;
        for (int i = 0; i < 5; i++) clReleaseMemObject(mems[i]);
        lazyattn_pool_destroy(pool);
    }
    lazyattn_attention_destroy(attn);
}

/* The first n_shapes decode shapes. */
static void bench_decode(int n_shapes) {
    static const int shapes[][2] = {{1, 32768}, {16, 8192}, {64, 4096}, {128, 4096}};
    lazyattn_attention *attn = make_attn();
    lazyattn_kernel_tuning t;
    CHECK(lazyattn_attention_get_tuning(attn, &t));
    printf("portable decode geometry: %d heads per work-group, %d key slots per chunk, %d "
           "work-items, %d dims and %d V rows per work-item, %d work-groups per CU, prefetch %d, "
           "ring %d, K pipeline %d, sums in %s, probabilities %s\n",
           t.decode.rows, t.decode.keys, t.decode.work_group, t.decode.out_dims,
           t.decode.score_keys, t.decode_groups_per_cu, t.decode.prefetch, t.decode.kv_together,
           t.decode.score_rows, (t.decode.out_rows - 1) & 1 ? "local memory" : "registers",
           (t.decode.out_rows - 1) & 2 ? "key-major" : "head-major");
    cl_mem scratch = buf(NULL, 64);
    for (int si = 0; si < n_shapes; si++) {
        const int B = shapes[si][0], L = shapes[si][1], doc = 2048, per_seq = L / BS;
        const int n_entries = B * per_seq;
        lazyattn_pool *pool = make_pool(n_entries);
        int32_t *perm = malloc(4 * (size_t)n_entries);
        for (int i = 0; i < n_entries; i++) perm[i] = i;
        for (int i = n_entries - 1; i > 0; i--) { /* blocks scattered over the pool */
            int j = (int)((frand() * 0.5 + 0.5) * i);
            int32_t tmp = perm[i]; perm[i] = perm[j]; perm[j] = tmp;
        }
        uint64_t *table = malloc(8 * (size_t)n_entries), *table0 = malloc(8 * (size_t)n_entries);
        int32_t *epos = malloc(4 * (size_t)n_entries), *offs = malloc(4 * (size_t)(B + 1));
        int32_t *qpos = malloc(4 * (size_t)B);
        for (int s = 0; s < B; s++) {
            const int base = 100 + 37 * s; /* distinct non-zero deltas per document */
            offs[s] = s * per_seq;
            for (int i = 0; i < per_seq; i++) {
                int e = s * per_seq + i, logical = base + i * BS, stored = (i * BS) % doc;
                CHECK(lazyattn_entry_pack(perm[e], logical - stored, BS, &table[e]));
                CHECK(lazyattn_entry_pack(perm[e], 0, BS, &table0[e]));
                epos[e] = logical;
            }
            qpos[s] = base + L - 1;
        }
        offs[B] = n_entries;
        cl_mem tm = buf(table, 8 * (size_t)n_entries), t0m = buf(table0, 8 * (size_t)n_entries);
        cl_mem em = buf(epos, 4 * (size_t)n_entries), om_ = buf(offs, 4 * (size_t)(B + 1));
        cl_mem qpm = buf(qpos, 4 * (size_t)B), qm = random_queries((size_t)B * H * D);
        cl_mem out = buf(NULL, sizeof(float) * B * H * D);
        lazyattn_decode_args a = {B, per_seq, g_decode_splits, qm, qpm, om_, tm, em, out,
                                  NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
        lazyattn_decode_args z = a;
        z.table = t0m;
        result *r = &g_results[g_n_results++];
        snprintf(r->name, sizeof r->name, "decode_%dx%d", B, L);
        double host = 0.0, host0 = 0.0;
        r->ms = time_decode(attn, pool, &a, scratch, &host);
        r->ms_zero = time_decode(attn, pool, &z, scratch, &host0);
        printf("decode %dx%d: lazyattn_decode's host time %.1f us (median; %.1f with zero deltas)\n", B, L, host,
               host0);
        r->flops = 4.0 * H * D * (double)B * L;
        r->bytes = 2.0 * B * L * KV * D * 2;
        cl_mem mems[] = {tm, t0m, em, om_, qpm, qm, out};
        for (int i = 0; i < 7; i++) clReleaseMemObject(mems[i]);
        free(perm); free(table); free(table0); free(epos); free(offs); free(qpos);
        lazyattn_pool_destroy(pool);
    }
    clReleaseMemObject(scratch);
    lazyattn_attention_destroy(attn);
}

static const char usage_text[] =
    "usage: bench_kernels [--csv FILE] [--reps N] [--no-checks]\n"
    "                     [--only prefill|decode|prefill_a|prefill_b|prefill_c|decode_1x32768]\n"
    "                     [--prefill-queries T]\n"
    "                     [--decode-tile K,W,D,G[,U[,P[,R[,S[,O]]]]]] [--decode-splits N]\n"
    "                     [--prefill-tile R,K,W,SR,SK,OR,OD,KV,PF] [--kv-layout rows|tiled]\n"
    "  --csv FILE       write the timings as CSV (bench/sdpa_peer.py reads it)\n"
    "  --reps N         timed repetitions per shape, median reported (20..256, default 25)\n"
    "  --no-checks      skip the correctness checks against the float64 reference\n"
    "  --only WHAT      time only the prefill or only the decode shapes, or one prefill shape, or\n"
    "                   the longest decode\n"
    "  --prefill-queries T  new tokens of prefill (a) (16..4096, a multiple of 16, default\n"
    "                   4096; its row is named prefill_a_T_over_4x2048)\n"
    "  --decode-splits N  split every timed decode N ways along the KV length (0..4096,\n"
    "                   default 0: the library's choice; for split-count experiments)\n"
    "  --decode-tile K,W,D,G[,U[,P[,R[,S[,O]]]]]  portable decode geometry: key slots per\n"
    "                   chunk, work-items, dims per work-item, work-groups per CU, V rows in\n"
    "                   flight per work-item, L2 prefetch (1..5, 2 none), V ring (1 on, 2 off),\n"
    "                   step 1's K pipeline (1..13, 1 whole rows; cl/decode.cl LZ_FRM) and\n"
    "                   1 + output sums in local memory 1 + probabilities key-major 2 (1..4);\n"
    "                   R 3: the small-work-group decode (cl/decode_warp.cl): K keys per batch,\n"
    "                   U 2 the K ring, P 1 its split-parallel reduction, 2 decode.cl's,\n"
    "                   3 the first from 64 splits on\n"
    "                   (0 = choose; for tuning sweeps)\n"
    "  --prefill-tile R,K,W,SR,SK,OR,OD,KV,PF  portable prefill geometry (lazyattn_tile_params:\n"
    "                   rows, keys, work-items, score tile, output tile, kv_together, prefetch;\n"
    "                   0 = choose)\n"
    "  --kv-layout rows|tiled  page order of the pools and kernels (lazyattn_kv_layout;\n"
    "                   default rows; tiled: 8 x 8 tiles, the NVIDIA kernels' order)\n"
    "Needs a GPU (OpenCL device of type GPU). Exit status: 0 all checks passed, 1 a check or\n"
    "the run failed, 2 a bad command line.\n";

int main(int argc, char **argv) {
    /* a line per step as it happens, in a log too (stdout is fully buffered in a pipe) */
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *csv = NULL;
    const char *decode_tile = NULL, *prefill_tile = NULL;
    int skip_checks = 0, only = -1;
    cli_option opts[] = {
        {.name = "--csv", .type = CLI_STRING, .dest = &csv},
        {.name = "--reps", .type = CLI_INT, .dest = &g_reps, .min = 20, .max = 256},
        {.name = "--decode-splits", .type = CLI_INT, .dest = &g_decode_splits, .min = 0, .max = 4096},
        {.name = "--no-checks", .type = CLI_FLAG, .dest = &skip_checks},
        {.name = "--only", .type = CLI_ENUM, .dest = &only,
         .choices = "prefill|decode|prefill_a|prefill_b|prefill_c|decode_1x32768"},
        {.name = "--prefill-queries", .type = CLI_INT, .dest = &g_prefill_queries, .min = 16, .max = 4096},
        {.name = "--decode-tile", .type = CLI_STRING, .dest = &decode_tile},
        {.name = "--prefill-tile", .type = CLI_STRING, .dest = &prefill_tile},
        {.name = "--kv-layout", .type = CLI_ENUM, .dest = &g_kv_layout, .choices = "rows|tiled"},
    };
    int r = cli_parse("bench_kernels", usage_text, opts, (int)(sizeof opts / sizeof opts[0]), argc,
                      argv);
    if (r) return r == CLI_HELP ? 0 : 2;
    if (g_prefill_queries != 4096 && (only == 1 || only == 3 || only == 4 || only == 5)) {
        fprintf(stderr, "bench_kernels: --prefill-queries sets prefill (a), which --only leaves out\n");
        return 2;
    }
    if (g_prefill_queries % BS) {
        fprintf(stderr, "bench_kernels: --prefill-queries: %d is not a multiple of the block size %d\n",
                g_prefill_queries, BS);
        return 2;
    }
    if (decode_tile) {
        int k, w, d, g, u = 0, pf = 0, ring = 0, kp = 0, ol = 0;
        char extra;
        int n = sscanf(decode_tile, "%d,%d,%d,%d,%d,%d,%d,%d,%d%c", &k, &w, &d, &g, &u, &pf, &ring, &kp, &ol,
                       &extra);
        if (n < 4 || n > 9 || k < 0 || w < 0 || d < 0 || g < 0 || u < 0 || pf < 0 || ring < 0 || kp < 0 ||
            ol < 0) {
            fprintf(stderr,
                    "bench_kernels: --decode-tile: expected K,W,D,G[,U[,P[,R[,S[,O]]]]] (integers >= 0), got %s\n",
                    decode_tile);
            return 2;
        }
        g_tuning.decode.score_keys = u, g_tuning.decode.prefetch = pf, g_tuning.decode.kv_together = ring;
        g_tuning.decode.score_rows = kp, g_tuning.decode.out_rows = ol;
        g_tuning.decode.keys = k, g_tuning.decode.work_group = w, g_tuning.decode.out_dims = d;
        g_tuning.decode_groups_per_cu = g;
    }
    if (prefill_tile) {
        int f[9];
        char extra;
        int n = sscanf(prefill_tile, "%d,%d,%d,%d,%d,%d,%d,%d,%d%c", &f[0], &f[1], &f[2], &f[3], &f[4],
                       &f[5], &f[6], &f[7], &f[8], &extra);
        int ok = n == 9;
        for (int i = 0; i < 9 && ok; i++) ok = f[i] >= 0;
        if (!ok) {
            fprintf(stderr, "bench_kernels: --prefill-tile: expected 9 integers >= 0, got %s\n", prefill_tile);
            return 2;
        }
        g_tuning.prefill = (lazyattn_tile_params){f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8]};
    }
    /* the CSV file opens before hours of timing, not after */
    if (csv && !(g_csv = fopen(csv, "w"))) {
        fprintf(stderr, "bench_kernels: --csv: cannot write %s\n", csv);
        return 1;
    }
    lazyattn_context_options o;
    lazyattn_context_options_init(&o);
    o.kind = LAZYATTN_DEVICE_GPU;
    o.profiling = 1;
    o.log = on_log;
    CHECK(lazyattn_context_create(&o, &g_ctx));
    g_cl = lazyattn_context_cl_context(g_ctx);
    g_q = lazyattn_context_queue(g_ctx);
    printf("device: %s; fast path: %s; kv layout: %s\n", lazyattn_context_device_name(g_ctx),
           lazyattn_context_fast_path(g_ctx) ? "NVIDIA tensor cores" : "portable",
           g_kv_layout == LAZYATTN_KV_LAYOUT_TILED ? "tiled" : "rows");
    build_bench_program();
    ceilings();

    if (!skip_checks) {
        check_case(128, 32, 8, 16, 3, 200, 77, LAZYATTN_ROPE_NEOX, 0, 150000);
        check_case(128, 4, 1, 16, 2, 1000, 300, LAZYATTN_ROPE_NEOX, 0, 5);
        check_case(64, 8, 1, 32, 3, 333, 90, LAZYATTN_ROPE_GPTJ, 0, 70000);
        check_case(128, 8, 2, 16, 2, 150, 40, LAZYATTN_ROPE_NEOX, 64, 1234);
        check_case(64, 2, 2, 16, 1, 64, 50, LAZYATTN_ROPE_NONE, 0, 0);
        check_case(128, 8, 8, 16, 4, 2048, 128, LAZYATTN_ROPE_NEOX, 0, 2048);
        /* many documents: the prefill's in-register query re-rotations
         * chain up to 7 times between exact reloads */
        check_case(128, 32, 8, 16, 20, 48, 64, LAZYATTN_ROPE_NEOX, 0, 100000);
        check_case(64, 8, 2, 32, 12, 40, 50, LAZYATTN_ROPE_GPTJ, 0, 3000);
        printf("checks: %s\n", g_failures ? "FAILED" : "all within 2e-3");
    }

    if (g_fast_disabled) {
        fprintf(stderr, "the NVIDIA fast path failed to build (log above): not timing\n");
        return 1;
    }
    /* only: -1 all, 0 prefill, 1 decode, 2 prefill (a), 3 prefill (b), 4 prefill (c), 5 decode 1x32768 */
    if (only != 1 && only != 5)
        bench_prefill(only < 2 || only == 2, only < 2 || only == 3, only < 2 || only == 4);
    if (only == -1 || only == 1 || only == 5) bench_decode(only == 5 ? 1 : 4);

    if (g_csv) fprintf(g_csv, "name,ms,ms_zero,flops,bytes,read_gbs,mma_tflops\n");
    printf("\n%-28s %9s %9s %8s %8s %7s %7s %9s\n", "shape", "ms", "ms(d=0)", "TFLOP/s", "GB/s",
           "%mma", "%read", "rot.ovh");
    for (int i = 0; i < g_n_results; i++) {
        result *r = &g_results[i];
        double tf = r->flops / (r->ms * 1e-3) / 1e12, gb = r->bytes / (r->ms * 1e-3) / 1e9;
        printf("%-28s %9.4f %9.4f %8.1f %8.0f %6.1f%% %6.1f%% %+8.2f%%\n", r->name, r->ms, r->ms_zero,
               tf, gb, 100 * tf / g_mma_tflops, 100 * gb / g_read_gbs,
               100 * (r->ms - r->ms_zero) / r->ms_zero);
        if (g_csv)
            fprintf(g_csv, "%s,%.6f,%.6f,%.6g,%.6g,%.1f,%.1f\n", r->name, r->ms, r->ms_zero,
                    r->flops, r->bytes, g_read_gbs, g_mma_tflops);
    }
    if (g_csv && fclose(g_csv)) {
        fprintf(stderr, "bench_kernels: --csv: cannot write %s\n", csv);
        g_failures++;
    }
    clReleaseProgram(g_bench);
    lazyattn_context_destroy(g_ctx);
    return g_failures ? 1 : 0;
}
