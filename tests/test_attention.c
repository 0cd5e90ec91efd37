/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Kernels against the float64 reference: lazy prefill, lazy decode (with
 * KV splits), materialised copies, write_kv and rope, over seeded random
 * requests: head dims 64/96/128, GQA 1/2/3/4/8, block sizes 7/16/32, f32/f16/bf16,
 * NeoX/GPT-J/partial RoPE with and without Llama-3 scaling, ALiBi, document
 * lengths that are not multiples of the block size, deltas of +-150 000;
 * pools and kernels in either page layout (lazyattn_kv_layout).
 */
#include "test_common.h"

#include "kernel_cases.h" /* every kernel on one small case (batched prefill, warp decode) */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Normalised-error tolerance of each storage type (K/V rounded once to it;
 * the f32 bound covers the angle error of ~1e-6 rad and f32 accumulation). */
static double tolerance(lazyattn_dtype t) {
    return t == LAZYATTN_DTYPE_F32 ? 2e-5 : t == LAZYATTN_DTYPE_F16 ? 2e-3 : 1.6e-2;
}

/* One program per (head_dim, block size, dtype, page layout); everything
 * else varies. */
typedef struct program_case {
    int head_dim, block_size;
    lazyattn_dtype dtype;
    lazyattn_kv_layout kv_layout; /* of the pool and the attention */
} program_case;

#define ROWS LAZYATTN_KV_LAYOUT_ROWS
#define TILED LAZYATTN_KV_LAYOUT_TILED
static const program_case programs[] = {
    {64, 16, LAZYATTN_DTYPE_F32, ROWS},
    {128, 16, LAZYATTN_DTYPE_F16, ROWS},
    {128, 32, LAZYATTN_DTYPE_F32, ROWS},
    {64, 32, LAZYATTN_DTYPE_F16, ROWS},
    {128, 16, LAZYATTN_DTYPE_BF16, ROWS},
    {96, 7, LAZYATTN_DTYPE_F32, ROWS}, /* odd shapes: head dim not a power of two, block of 7 */
    /* TILED pages (8 x 8 tiles of tokens x dims): the NVIDIA path's shapes, a
     * block of one tile row, 12 tiles across a head of 96 */
    {64, 16, LAZYATTN_DTYPE_F32, TILED},
    {128, 16, LAZYATTN_DTYPE_F16, TILED},
    {64, 32, LAZYATTN_DTYPE_BF16, TILED},
    {96, 8, LAZYATTN_DTYPE_F32, TILED},
};

/* A random request laid into a pool: a prefix, documents at their own
 * (random) stored starts, the question (lt_sequence). */
typedef lt_sequence sequence;

static void sequence_free(sequence *s) { lt_sequence_free(s); }

/* Builds segments, allocates (shuffled) blocks, fills the table. */
static void sequence_make(lt_rng *r, lazyattn_pool *pool, const lazyattn_attention_config *c,
                          int max_docs, int max_doc_len, sequence *s) {
    const int B = c->block_size;
    int n_seg = 0, seg_len[10], seg_stored[10];
    int base = lt_int(r, 0, 150000);
    seg_len[n_seg] = lt_int(r, 0, 2 * B + 3), seg_stored[n_seg++] = -1; /* prefix */
    int n_docs = lt_int(r, 1, max_docs);
    for (int i = 0; i < n_docs; i++)
        seg_len[n_seg] = lt_int(r, 1, max_doc_len), seg_stored[n_seg++] = lt_int(r, 0, 120000);
    const int n_question = lt_int(r, 1, 2 * B);
    seg_len[n_seg] = n_question, seg_stored[n_seg++] = -1;
    lt_sequence_lay_out(r, pool, c, base, n_seg, seg_len, seg_stored, s);
    s->n_question = n_question;
}

static void sequence_write(lazyattn_context *ctx, lazyattn_attention *attn, lazyattn_pool *pool,
                           const sequence *s, int n_kv, int d) {
    size_t kv_bytes = sizeof(float) * s->n_keys * n_kv * d;
    cl_mem k = lt_buffer(ctx, s->k, kv_bytes), v = lt_buffer(ctx, s->v, kv_bytes);
    cl_mem slot = lt_buffer(ctx, s->slot, sizeof(int32_t) * s->n_keys);
    cl_mem stored = lt_buffer(ctx, s->stored, sizeof(int32_t) * s->n_keys);
    lt_assert_status(lazyattn_write_kv(attn, pool, 0, s->n_keys, k, v, slot, stored, NULL, NULL),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
    clReleaseMemObject(k); clReleaseMemObject(v); clReleaseMemObject(slot); clReleaseMemObject(stored);
}

/* Queries: the last n_q keys' positions, random vectors. */
static float *make_queries(lt_rng *r, const lazyattn_attention_config *c, int n_q) {
    float *q = malloc(sizeof(float) * n_q * c->n_q_heads * c->head_dim);
    lt_fill(r, q, (size_t)n_q * c->n_q_heads * c->head_dim, 2.0f);
    return q;
}

/* Rotates queries on the device, runs prefill over the table, returns out. */
static float *run_prefill(lazyattn_context *ctx, lazyattn_attention *attn, lazyattn_pool *pool,
                          const lazyattn_attention_config *c, const float *q_raw,
                          const int32_t *q_pos, int n_q, const uint64_t *table,
                          const int32_t *entry_pos, int n_entries) {
    size_t qbytes = sizeof(float) * n_q * c->n_q_heads * c->head_dim;
    cl_mem q = lt_buffer(ctx, q_raw, qbytes), qp = lt_buffer(ctx, q_pos, sizeof(int32_t) * n_q);
    cl_mem t = lt_buffer(ctx, table, sizeof(uint64_t) * n_entries);
    cl_mem ep = lt_buffer(ctx, entry_pos, sizeof(int32_t) * n_entries);
    cl_mem out = lt_buffer(ctx, NULL, qbytes);
    lt_assert_status(lazyattn_rope_apply(attn, n_q, c->n_q_heads, q, qp, NULL, NULL), LAZYATTN_STATUS_OK);
    lazyattn_prefill_args a = {n_q, n_entries, q, qp, t, ep, out,
                               NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    lt_assert_status(lazyattn_prefill(attn, pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
    float *o = malloc(qbytes);
    lt_read(ctx, out, o, qbytes);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
    clReleaseMemObject(q); clReleaseMemObject(qp); clReleaseMemObject(t);
    clReleaseMemObject(ep); clReleaseMemObject(out);
    return o;
}

static double *run_reference(const lazyattn_attention_config *c, const sequence *s,
                             const float *q_raw, const int32_t *q_pos, int n_q) {
    double *ref = malloc(sizeof(double) * n_q * c->n_q_heads * c->head_dim);
    lazyattn_reference_args ra = {n_q, s->n_keys, q_raw, q_pos, s->k, s->v, s->k_pos, ref, NULL};
    lt_assert_status(lazyattn_reference_attention(c, &ra), LAZYATTN_STATUS_OK);
    return ref;
}

static void random_scheme(lt_rng *r, lazyattn_attention_config *c) {
    int g_choice[5] = {1, 2, 3, 4, 8};
    c->n_kv_heads = lt_int(r, 1, 3);
    c->n_q_heads = c->n_kv_heads * g_choice[lt_int(r, 0, 4)];
    memset(&c->rope, 0, sizeof c->rope);
    c->alibi = 0;
    int scheme = lt_int(r, 0, 5);
    if (scheme == 5) {
        c->alibi = 1;
        return;
    }
    c->rope.style = scheme % 2 ? LAZYATTN_ROPE_GPTJ : LAZYATTN_ROPE_NEOX;
    c->rope.theta = lt_int(r, 0, 1) ? 500000.0 : 10000.0;
    c->rope.rotary_dim = scheme == 4 ? c->head_dim / 2 : 0; /* partial rotary */
    if (scheme >= 2) {
        c->rope.llama3_factor = 8.0;
        c->rope.llama3_low_freq_factor = 1.0;
        c->rope.llama3_high_freq_factor = 4.0;
        c->rope.llama3_original_context = 8192;
    }
}

static const char *scheme_name(const lazyattn_attention_config *c) {
    if (c->alibi) return "alibi";
    if (c->rope.rotary_dim) return "neox-partial";
    if (c->rope.llama3_factor > 0) return c->rope.style == LAZYATTN_ROPE_NEOX ? "neox-llama3" : "gptj-llama3";
    return c->rope.style == LAZYATTN_ROPE_NEOX ? "neox" : "gptj";
}

/* Per program config: random requests through prefill (lazy and
 * materialised) and a decode batch, all against the reference. */
static void run_program_cases(void **state, const program_case *pc, int n_cases) {
    lazyattn_context *ctx = *state;
    static uint64_t seed;
    if (!seed) seed = lt_seed();
    lt_rng r = {seed ^ (uint64_t)(pc->head_dim * 1000 + pc->block_size * 10 + pc->dtype)};
    double worst_prefill = 0, worst_decode = 0, worst_agree = 0;
    int n_prefill = 0, n_decode = 0;
    for (int cs = 0; cs < n_cases; cs++) {
        lazyattn_attention_config c;
        memset(&c, 0, sizeof c);
        c.head_dim = pc->head_dim;
        c.block_size = pc->block_size;
        c.dtype = pc->dtype;
        c.kv_layout = pc->kv_layout;
        random_scheme(&r, &c);
        lazyattn_pool_config poolc = {1, c.n_kv_heads, c.head_dim, c.block_size, c.dtype, 0,
                                      c.kv_layout};
        poolc.budget_bytes = (uint64_t)600 * 2 * c.n_kv_heads * c.block_size * c.head_dim *
                             lazyattn_dtype_size(c.dtype);
        lazyattn_pool *pool = NULL;
        lazyattn_attention *attn = NULL;
        lt_assert_status(lazyattn_pool_create(ctx, &poolc, &pool), LAZYATTN_STATUS_OK);
        lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
        const double tol = tolerance(c.dtype);

        /* ---- a decode batch of sequences; the first one also prefills ---- */
        int n_seqs = lt_int(&r, 1, 4);
        sequence seqs[4];
        for (int i = 0; i < n_seqs; i++) {
            sequence_make(&r, pool, &c, 4, 3 * c.block_size + 5, &seqs[i]);
            sequence_write(ctx, attn, pool, &seqs[i], c.n_kv_heads, c.head_dim);
        }
        {
            /* prefill the question of sequence 0 (causal among its tokens) */
            sequence *s = &seqs[0];
            int n_q = s->n_question;
            int32_t *q_pos = s->k_pos + (s->n_keys - n_q);
            float *q = make_queries(&r, &c, n_q);
            float *out = run_prefill(ctx, attn, pool, &c, q, q_pos, n_q, s->table, s->entry_pos, s->n_entries);
            double *ref = run_reference(&c, s, q, q_pos, n_q);
            size_t n = (size_t)n_q * c.n_q_heads * c.head_dim;
            double err = lazyattn_normalised_error(out, ref, n);
            if (err > tol)
                print_error("prefill case %d (%s, G=%d, kv=%d, q=%d, entries=%d): error %.3g > %.3g\n",
                            cs, scheme_name(&c), c.n_q_heads / c.n_kv_heads, c.n_kv_heads, n_q,
                            s->n_entries, err, tol);
            assert_true(err <= tol);
            if (err > worst_prefill) worst_prefill = err;
            n_prefill++;

            /* materialise every block with a delta, then prefill again over
             * the copies (delta 0): must agree with the lazy output */
            uint64_t *mtable = malloc(sizeof(uint64_t) * s->n_entries);
            uint64_t *src = malloc(sizeof(uint64_t) * s->n_entries);
            int32_t *dst = malloc(sizeof(int32_t) * s->n_entries);
            int n_copy = 0;
            for (int e = 0; e < s->n_entries; e++) {
                int32_t blk, delta, len;
                lazyattn_entry_unpack(s->table[e], &blk, &delta, &len);
                mtable[e] = s->table[e];
                if (delta == 0) continue;
                lt_assert_status(lazyattn_pool_alloc(pool, 1, &dst[n_copy]), LAZYATTN_STATUS_OK);
                src[n_copy] = s->table[e];
                lazyattn_entry_pack(dst[n_copy], 0, len, &mtable[e]);
                n_copy++;
            }
            if (n_copy) {
                cl_mem srcm = lt_buffer(ctx, src, sizeof(uint64_t) * n_copy);
                cl_mem dstm = lt_buffer(ctx, dst, sizeof(int32_t) * n_copy);
                lt_assert_status(lazyattn_materialise(attn, pool, 0, n_copy, srcm, dstm, NULL, NULL),
                                 LAZYATTN_STATUS_OK);
                clReleaseMemObject(srcm);
                clReleaseMemObject(dstm);
            }
            float *mout = run_prefill(ctx, attn, pool, &c, q, q_pos, n_q, mtable, s->entry_pos, s->n_entries);
            double *lazy = malloc(sizeof(double) * n);
            for (size_t i = 0; i < n; i++) lazy[i] = out[i];
            double agree = lazyattn_normalised_error(mout, lazy, n);
            /* the copy rounds K to the storage type once more */
            double agree_tol = c.dtype == LAZYATTN_DTYPE_F32 ? 1e-5 : tol;
            if (agree > agree_tol)
                print_error("materialised vs lazy, case %d (%s): %.3g > %.3g\n", cs, scheme_name(&c),
                            agree, agree_tol);
            assert_true(agree <= agree_tol);
            double merr = lazyattn_normalised_error(mout, ref, n);
            assert_true(merr <= tol);
            if (agree > worst_agree) worst_agree = agree;
            lt_assert_status(lazyattn_pool_free(pool, n_copy, dst), LAZYATTN_STATUS_OK);
            free(mtable); free(src); free(dst); free(mout); free(lazy);
            free(q); free(out); free(ref);
        }

        /* ---- decode: the last key of each sequence is its query token ---- */
        int total = 0, max_entries = 0;
        for (int i = 0; i < n_seqs; i++) {
            total += seqs[i].n_entries;
            if (seqs[i].n_entries > max_entries) max_entries = seqs[i].n_entries;
        }
        uint64_t *table = malloc(sizeof(uint64_t) * total);
        int32_t *entry_pos = malloc(sizeof(int32_t) * total), offsets[5], q_pos[4];
        offsets[0] = 0;
        for (int i = 0; i < n_seqs; i++) {
            memcpy(table + offsets[i], seqs[i].table, sizeof(uint64_t) * seqs[i].n_entries);
            memcpy(entry_pos + offsets[i], seqs[i].entry_pos, sizeof(int32_t) * seqs[i].n_entries);
            offsets[i + 1] = offsets[i] + seqs[i].n_entries;
            q_pos[i] = seqs[i].k_pos[seqs[i].n_keys - 1];
        }
        size_t qrow = (size_t)c.n_q_heads * c.head_dim;
        float *q = make_queries(&r, &c, n_seqs);
        cl_mem qm = lt_buffer(ctx, q, sizeof(float) * n_seqs * qrow);
        cl_mem qpm = lt_buffer(ctx, q_pos, sizeof(int32_t) * n_seqs);
        cl_mem offm = lt_buffer(ctx, offsets, sizeof(int32_t) * (n_seqs + 1));
        cl_mem tm = lt_buffer(ctx, table, sizeof(uint64_t) * total);
        cl_mem epm = lt_buffer(ctx, entry_pos, sizeof(int32_t) * total);
        cl_mem outm = lt_buffer(ctx, NULL, sizeof(float) * n_seqs * qrow);
        lt_assert_status(lazyattn_rope_apply(attn, n_seqs, c.n_q_heads, qm, qpm, NULL, NULL), LAZYATTN_STATUS_OK);
        lazyattn_decode_args da = {n_seqs, max_entries, lt_int(&r, 0, 5), qm, qpm, offm, tm, epm, outm,
                                   NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
        lt_assert_status(lazyattn_decode(attn, pool, 0, &da, NULL, NULL), LAZYATTN_STATUS_OK);
        float *out = malloc(sizeof(float) * n_seqs * qrow);
        lt_read(ctx, outm, out, sizeof(float) * n_seqs * qrow);
        lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
        for (int i = 0; i < n_seqs; i++) {
            double *ref = run_reference(&c, &seqs[i], q + i * qrow, &q_pos[i], 1);
            double err = lazyattn_normalised_error(out + i * qrow, ref, qrow);
            if (err > tol)
                print_error("decode case %d seq %d (%s, G=%d, splits=%d, entries=%d): %.3g > %.3g\n", cs,
                            i, scheme_name(&c), c.n_q_heads / c.n_kv_heads, da.n_splits,
                            seqs[i].n_entries, err, tol);
            assert_true(err <= tol);
            if (err > worst_decode) worst_decode = err;
            n_decode++;
            free(ref);
        }
        cl_mem mems[] = {qm, qpm, offm, tm, epm, outm};
        for (int i = 0; i < 6; i++) clReleaseMemObject(mems[i]);
        free(q); free(out); free(table); free(entry_pos);
        for (int i = 0; i < n_seqs; i++) sequence_free(&seqs[i]);
        lazyattn_attention_destroy(attn);
        lazyattn_pool_destroy(pool);
    }
    printf("# d=%d B=%d dtype=%d %s: %d prefill + %d decode checks, worst error prefill %.2e "
           "decode %.2e (tol %.1e), materialised-vs-lazy %.2e\n",
           pc->head_dim, pc->block_size, (int)pc->dtype, pc->kv_layout == TILED ? "tiled" : "rows",
           n_prefill, n_decode, worst_prefill,
           worst_decode, tolerance(pc->dtype), worst_agree);
}

/* random cases per program: 12, or the first 2 of them with --quick (meson's quick
 * `attention`; the full sweep is `attention_full`, suite slow) */
static int program_n_cases = 12;

#define PROGRAM_TEST(i)                                                          \
    static void test_program_##i(void **state) { run_program_cases(state, &programs[i], program_n_cases); }
PROGRAM_TEST(0)
PROGRAM_TEST(1)
PROGRAM_TEST(2)
PROGRAM_TEST(3)
PROGRAM_TEST(4)
PROGRAM_TEST(5)
PROGRAM_TEST(6)
PROGRAM_TEST(7)
PROGRAM_TEST(8)
PROGRAM_TEST(9)

/* Element offset of (block, kv head, token t, dim d) in a pool buffer of
 * n_kv heads, blocks of B tokens of D dims, written out here from the
 * header's lazyattn_kv_layout (not the library's converter): pages in
 * place, inside a page rows [B][D] or 8 x 8 tiles [B / 8][D / 8][8][8]. */
static size_t kv_offset(lazyattn_kv_layout layout, int block, int head, int n_kv, int B, int D,
                        int t, int d) {
    size_t page = ((size_t)block * n_kv + head) * B * D;
    if (layout == LAZYATTN_KV_LAYOUT_ROWS) return page + (size_t)t * D + d;
    return page + ((size_t)(t / 8) * (D / 8) + d / 8) * 64 + (t % 8) * 8 + d % 8;
}

/* write_kv stores K rotated at its stored position: read the pool back,
 * each element where its layout puts it. */
static void write_kv_readback(void **state, lazyattn_kv_layout layout) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed() + 7};
    lazyattn_attention_config c;
    lazyattn_attention_config_default(&c);
    c.head_dim = 64;
    c.dtype = LAZYATTN_DTYPE_F32;
    c.n_q_heads = 4, c.n_kv_heads = 2;
    c.kv_layout = layout;
    lazyattn_pool_config pc = {1, 2, 64, 16, LAZYATTN_DTYPE_F32, 8 * 2 * 2 * 16 * 64 * 4, layout};
    lazyattn_pool *pool;
    lazyattn_attention *attn;
    lt_assert_status(lazyattn_pool_create(ctx, &pc, &pool), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
    enum { N = 5 };
    float k[N * 2 * 64], v[N * 2 * 64];
    int32_t slot[N] = {0, 17, 33, 127, 64}, pos[N] = {0, 1, 8191, 100000, (1 << 24) - 1};
    lt_fill(&r, k, N * 128, 1.0f);
    lt_fill(&r, v, N * 128, 1.0f);
    cl_mem km = lt_buffer(ctx, k, sizeof k), vm = lt_buffer(ctx, v, sizeof v);
    cl_mem sm = lt_buffer(ctx, slot, sizeof slot), pm = lt_buffer(ctx, pos, sizeof pos);
    lt_assert_status(lazyattn_write_kv(attn, pool, 0, N, km, vm, sm, pm, NULL, NULL), LAZYATTN_STATUS_OK);
    size_t bytes = (size_t)8 * 2 * 16 * 64 * 4;
    float *kc = malloc(bytes), *vc = malloc(bytes);
    lt_read(ctx, lazyattn_pool_k_buffer(pool, 0), kc, bytes);
    lt_read(ctx, lazyattn_pool_v_buffer(pool, 0), vc, bytes);
    for (int t = 0; t < N; t++)
        for (int h = 0; h < 2; h++) {
            double ref[64];
            float kt[64], vt[64];
            lazyattn_reference_rope(&c, pos[t], k + (t * 2 + h) * 64, ref);
            for (int d = 0; d < 64; d++) {
                size_t o = kv_offset(layout, slot[t] / 16, h, 2, 16, 64, slot[t] % 16, d);
                kt[d] = kc[o], vt[d] = vc[o];
            }
            assert_true(lazyattn_normalised_error(kt, ref, 64) < 2e-6);
            assert_memory_equal(vt, v + (t * 2 + h) * 64, 64 * sizeof(float));
        }
    free(kc); free(vc);
    clReleaseMemObject(km); clReleaseMemObject(vm); clReleaseMemObject(sm); clReleaseMemObject(pm);
    lazyattn_attention_destroy(attn);
    lazyattn_pool_destroy(pool);
}

static void test_write_kv_rotates_at_stored_position(void **state) {
    write_kv_readback(state, LAZYATTN_KV_LAYOUT_ROWS);
}
/* Most offsets differ from ROWS (token 0's dim d sits at (d / 8) * 64 +
 * d % 8, not d), so a kernel that writes rows fails this. */
static void test_write_kv_tiled_pages(void **state) { write_kv_readback(state, LAZYATTN_KV_LAYOUT_TILED); }

/* rope_apply matches the double-precision rotation at large positions,
 * where a plain f32 angle would be off by a large fraction of a radian. */
static void test_rope_apply_is_accurate_at_large_positions(void **state) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed() + 11};
    for (int style = LAZYATTN_ROPE_NEOX; style <= LAZYATTN_ROPE_GPTJ; style++) {
        lazyattn_attention_config c;
        lazyattn_attention_config_default(&c);
        c.rope.style = (lazyattn_rope_style)style;
        c.n_q_heads = 2, c.n_kv_heads = 1, c.head_dim = 128;
        lazyattn_attention *attn;
        lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
        enum { N = 6 };
        int32_t pos[N] = {0, 3, 65535, 65536, 1000003, (1 << 24) - 1};
        float x[N * 2 * 128], y[N * 2 * 128];
        lt_fill(&r, x, sizeof x / sizeof *x, 1.0f);
        cl_mem xm = lt_buffer(ctx, x, sizeof x), pm = lt_buffer(ctx, pos, sizeof pos);
        lt_assert_status(lazyattn_rope_apply(attn, N, 2, xm, pm, NULL, NULL), LAZYATTN_STATUS_OK);
        lt_read(ctx, xm, y, sizeof y);
        for (int t = 0; t < N * 2; t++) {
            double ref[128];
            lazyattn_reference_rope(&c, pos[t / 2], x + t * 128, ref);
            double err = lazyattn_normalised_error(y + t * 128, ref, 128);
            if (err > 5e-6) print_error("style %d pos %d: %.3g\n", style, pos[t / 2], err);
            assert_true(err <= 5e-6);
        }
        clReleaseMemObject(xm); clReleaseMemObject(pm);
        lazyattn_attention_destroy(attn);
    }
}

/* Kernels skip and report out-of-range tables instead of touching memory
 * outside the pool; host-side checks reject malformed launches. */
static void test_bad_launches(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_attention_config c;
    lazyattn_attention_config_default(&c);
    c.n_q_heads = 4, c.n_kv_heads = 2, c.head_dim = 64, c.dtype = LAZYATTN_DTYPE_F32;
    lazyattn_attention *attn = NULL;

    /* configurations */
    lazyattn_attention_config bad = c;
    bad.n_q_heads = 6, bad.n_kv_heads = 4;
    lt_assert_status(lazyattn_attention_create(ctx, &bad, &attn), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(attn);
    bad = c, bad.head_dim = 66;
    lt_assert_status(lazyattn_attention_create(ctx, &bad, &attn), LAZYATTN_STATUS_INVALID_ARGUMENT);
    bad = c, bad.block_size = 0;
    lt_assert_status(lazyattn_attention_create(ctx, &bad, &attn), LAZYATTN_STATUS_INVALID_ARGUMENT);
    bad = c, bad.rope.rotary_dim = 65;
    lt_assert_status(lazyattn_attention_create(ctx, &bad, &attn), LAZYATTN_STATUS_INVALID_ARGUMENT);
    bad = c, bad.dtype = (lazyattn_dtype)7;
    lt_assert_status(lazyattn_attention_create(ctx, &bad, &attn), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_attention_create(NULL, &c, &attn), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_attention_create(ctx, NULL, &attn), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_attention_create(ctx, &c, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);

    lazyattn_pool_config pc = {2, 2, 64, 16, LAZYATTN_DTYPE_F32, 4 * 2 * 2 * 2 * 16 * 64 * 4,
                               LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *pool, *other, *books;
    lt_assert_status(lazyattn_pool_create(ctx, &pc, &pool), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_pool_create(NULL, &pc, &books), LAZYATTN_STATUS_OK);
    lazyattn_pool_config pc2 = pc;
    pc2.head_dim = 128;
    lt_assert_status(lazyattn_pool_create(ctx, &pc2, &other), LAZYATTN_STATUS_OK);

    float q[2 * 4 * 64] = {0.5f};
    int32_t qpos[2] = {40, 41}, epos[2] = {0, 16};
    uint64_t table[2];
    lazyattn_entry_pack(0, 0, 16, &table[0]);
    lazyattn_entry_pack(4, 0, 16, &table[1]); /* the pool has 4 blocks: id 4 is outside */
    cl_mem qm = lt_buffer(ctx, q, sizeof q), qpm = lt_buffer(ctx, qpos, sizeof qpos);
    cl_mem tm = lt_buffer(ctx, table, sizeof table), epm = lt_buffer(ctx, epos, sizeof epos);
    cl_mem out = lt_buffer(ctx, NULL, sizeof q), tiny = lt_buffer(ctx, NULL, 8);
    lazyattn_prefill_args a = {2, 2, qm, qpm, tm, epm, out,
                               NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    lt_assert_status(lazyattn_prefill(attn, pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OUT_OF_RANGE);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK); /* cleared */

    lt_assert_status(lazyattn_prefill(NULL, pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_prefill(attn, NULL, 0, &a, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_prefill(attn, pool, 2, &a, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_prefill(attn, pool, -1, &a, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_prefill(attn, books, 0, &a, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_prefill(attn, other, 0, &a, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_prefill_args b = a;
    b.q = tiny;
    lt_assert_status(lazyattn_prefill(attn, pool, 0, &b, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    b = a, b.n_queries = 0;
    lt_assert_status(lazyattn_prefill(attn, pool, 0, &b, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    b = a, b.table = NULL;
    lt_assert_status(lazyattn_prefill(attn, pool, 0, &b, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    b = a, b.n_entries = 3; /* more entries than the table holds */
    lt_assert_status(lazyattn_prefill(attn, pool, 0, &b, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);

    /* decode: offsets past the table, and more entries than max_entries */
    int32_t offsets[3] = {0, 2, 5};
    cl_mem om = lt_buffer(ctx, offsets, sizeof offsets);
    lazyattn_decode_args d = {2, 2, 0, qm, qpm, om, tm, epm, out,
                              NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    lt_assert_status(lazyattn_decode(attn, pool, 0, &d, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OUT_OF_RANGE);
    lazyattn_decode_args e = d;
    e.max_entries = 0;
    lt_assert_status(lazyattn_decode(attn, pool, 0, &e, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    e = d, e.n_seqs = 0;
    lt_assert_status(lazyattn_decode(attn, pool, 0, &e, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    e = d, e.seq_offsets = tiny; /* 8 B cannot hold 3 offsets */
    lt_assert_status(lazyattn_decode(attn, pool, 0, &e, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    e = d, e.n_splits = -1;
    lt_assert_status(lazyattn_decode(attn, pool, 0, &e, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_decode(attn, pool, 0, NULL, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);

    /* write_kv: a slot outside the pool and a negative position are flagged */
    float kv[2 * 2 * 64] = {1.0f};
    int32_t slots[2] = {3, 64}, spos[2] = {0, -5};
    cl_mem kvm = lt_buffer(ctx, kv, sizeof kv), sm = lt_buffer(ctx, slots, sizeof slots);
    cl_mem spm = lt_buffer(ctx, spos, sizeof spos);
    lt_assert_status(lazyattn_write_kv(attn, pool, 0, 2, kvm, kvm, sm, spm, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OUT_OF_RANGE);
    lt_assert_status(lazyattn_write_kv(attn, pool, 0, 3, kvm, kvm, sm, spm, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_write_kv(attn, pool, 0, 0, kvm, kvm, sm, spm, NULL, NULL),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_rope_apply(attn, 2, 4, kvm, spm, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_rope_apply(attn, 2, 2, kvm, spm, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OUT_OF_RANGE);

    /* materialise: destination outside the pool */
    int32_t dst[1] = {9};
    cl_mem dm = lt_buffer(ctx, dst, sizeof dst);
    lt_assert_status(lazyattn_materialise(attn, pool, 0, 1, tm, dm, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OUT_OF_RANGE);
    lt_assert_status(lazyattn_materialise(attn, pool, 0, 0, tm, dm, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_materialise(attn, pool, 0, 2, tm, dm, NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_attention_check(NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);

    cl_mem mems[] = {qm, qpm, tm, epm, out, tiny, om, kvm, sm, spm, dm};
    for (size_t i = 0; i < sizeof mems / sizeof *mems; i++) clReleaseMemObject(mems[i]);
    lazyattn_pool_destroy(pool);
    lazyattn_pool_destroy(other);
    lazyattn_pool_destroy(books);
    lazyattn_attention_destroy(attn);
    lazyattn_attention_destroy(NULL);
}

/* TILED pages through the kernels run_program_cases leaves out: the batched
 * prefill, the small-work-group decode and its split-parallel reduction, and
 * a hostile table skipped and reported (tests/kernel_cases.c, the TILED cases
 * of oclgrind_cases.c). */
static void test_tiled_every_kernel(void **state) {
    lazyattn_context *ctx = *state;
    static const lk_case cases[] = {
        {"f32-tiled-b8", 16, 8, LAZYATTN_DTYPE_F32, 4, 2, 2, {6, 19}, 5, 3, 0, 0, TILED},
        {"f16-tiled-warp", 128, 16, LAZYATTN_DTYPE_F16, 8, 2, 2, {21, 38}, 9, 3, 0, 1, TILED},
        {"bf16-tiled-b32", 32, 32, LAZYATTN_DTYPE_BF16, 3, 1, 3, {40, 30, 9}, 3, 22, 0, 2, TILED},
        {"f16-tiled-bad", 16, 8, LAZYATTN_DTYPE_F16, 4, 2, 2, {6, 9}, 5, 3, 1, 0, TILED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const lk_case *c = &cases[i];
        lk_result r;
        lt_assert_status(lk_run(ctx, c, &r), LAZYATTN_STATUS_OK);
        if (c->corrupt) continue; /* skipped and reported: lk_run checked it */
        const double tol = lk_tolerance(c->dtype);
        printf("# %s: rope %.1e, prefill %.1e, decode %.1e, materialised %.1e, batched %.1e, "
               "lse %.1e (tolerance %.0e)\n",
               c->name, r.rope, r.prefill, r.decode, r.materialised, r.batched, r.lse, tol);
        assert_true(r.rope < 2e-6);
        assert_true(r.prefill < tol && r.decode < tol && r.materialised < tol && r.batched < tol);
        assert_true(r.lse < 10 * tol && r.half_out < tol + 1e-3);
        free(r.outputs);
    }
}

/* A Llama-3.1-8B-shaped attention configuration (32 query / 8 KV heads,
 * f16, blocks of 16, NeoX RoPE, tiled pages: the NVIDIA path's shape) of
 * head dim d, and a pool of n_blocks blocks for it. */
static lazyattn_pool *llama_tiled_pool(lazyattn_context *ctx, int d, int n_blocks, lazyattn_attention_config *c) {
    memset(c, 0, sizeof *c);
    c->head_dim = d, c->block_size = 16, c->dtype = LAZYATTN_DTYPE_F16, c->kv_layout = TILED;
    c->n_q_heads = 32, c->n_kv_heads = 8;
    c->rope.style = LAZYATTN_ROPE_NEOX, c->rope.theta = 500000.0;
    lazyattn_pool_config poolc = {1, c->n_kv_heads, c->head_dim, c->block_size, c->dtype, 0, c->kv_layout};
    poolc.budget_bytes = (uint64_t)n_blocks * 2 * c->n_kv_heads * c->block_size * c->head_dim * 2;
    lazyattn_pool *pool = NULL;
    lt_assert_status(lazyattn_pool_create(ctx, &poolc, &pool), LAZYATTN_STATUS_OK);
    return pool;
}

/* Decodes split many ways along the KV length: the partials of up to ~200
 * splits combine to the float64 reference, for two sequences of different
 * lengths at once, every split count twice through one attention object in
 * two orders, and once after a decode that raised an error (a bad block
 * id). */
static void test_decode_splits(void **state) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed() ^ 0x5b117u};
    lazyattn_attention_config c;
    lazyattn_pool *pool = llama_tiled_pool(ctx, 128, 340, &c);
    lazyattn_attention *attn = NULL;
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
    /* sequence 0: 3 documents (202 entries), sequence 1: one document (62) */
    int len0[5] = {7, 1200, 900, 1059, 21}, st0[5] = {-1, 300, 70000, 5, -1};
    int len1[3] = {3, 950, 14}, st1[3] = {-1, 1000, -1};
    sequence seqs[2];
    lt_sequence_lay_out(&r, pool, &c, 1234, 5, len0, st0, &seqs[0]);
    lt_sequence_lay_out(&r, pool, &c, 99, 3, len1, st1, &seqs[1]);
    for (int i = 0; i < 2; i++) sequence_write(ctx, attn, pool, &seqs[i], c.n_kv_heads, c.head_dim);
    const int total = seqs[0].n_entries + seqs[1].n_entries, max_entries = seqs[0].n_entries;
    assert_true(max_entries > 200 && seqs[1].n_entries < 80);
    uint64_t *table = malloc(sizeof(uint64_t) * total);
    int32_t *entry_pos = malloc(sizeof(int32_t) * total), offsets[3] = {0, seqs[0].n_entries, total}, q_pos[2];
    for (int i = 0; i < 2; i++) {
        memcpy(table + offsets[i], seqs[i].table, sizeof(uint64_t) * seqs[i].n_entries);
        memcpy(entry_pos + offsets[i], seqs[i].entry_pos, sizeof(int32_t) * seqs[i].n_entries);
        q_pos[i] = seqs[i].k_pos[seqs[i].n_keys - 1];
    }
    const size_t qrow = (size_t)c.n_q_heads * c.head_dim;
    float *q = make_queries(&r, &c, 2);
    double *ref[2];
    for (int i = 0; i < 2; i++) ref[i] = run_reference(&c, &seqs[i], q + i * qrow, &q_pos[i], 1);
    cl_mem qm = lt_buffer(ctx, q, sizeof(float) * 2 * qrow), qpm = lt_buffer(ctx, q_pos, sizeof q_pos);
    cl_mem offm = lt_buffer(ctx, offsets, sizeof offsets), tm = lt_buffer(ctx, table, sizeof(uint64_t) * total);
    cl_mem epm = lt_buffer(ctx, entry_pos, sizeof(int32_t) * total);
    cl_mem outm = lt_buffer(ctx, NULL, sizeof(float) * 2 * qrow);
    lt_assert_status(lazyattn_rope_apply(attn, 2, c.n_q_heads, qm, qpm, NULL, NULL), LAZYATTN_STATUS_OK);
    /* a copy of the table with a block id past the pool in sequence 0 */
    lt_assert_status(lazyattn_entry_pack(1 << 20, 0, c.block_size, &table[offsets[0] + 100]), LAZYATTN_STATUS_OK);
    cl_mem badm = lt_buffer(ctx, table, sizeof(uint64_t) * total);
    const int splits[] = {1, 2, 7, 8, 9, 16, 17, 63, 64, 65, 100, max_entries};
    const int n_counts = (int)(sizeof splits / sizeof *splits);
    float *out = malloc(sizeof(float) * 2 * qrow);
    double worst = 0.0;
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < n_counts; j++) {
            lazyattn_attention *at = attn;
            const int ns = splits[pass % 2 ? n_counts - 1 - j : j];
            lazyattn_decode_args da = {2, max_entries, ns, qm, qpm, offm, tm, epm, outm,
                                       NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
            if (pass % 2 && j == 3) { /* a launch that raises an error, then on as before */
                lazyattn_decode_args bad = da;
                bad.table = badm;
                lt_assert_status(lazyattn_decode(at, pool, 0, &bad, NULL, NULL), LAZYATTN_STATUS_OK);
                lt_assert_status(lazyattn_attention_check(at, NULL), LAZYATTN_STATUS_OUT_OF_RANGE);
            }
            memset(out, 0xff, sizeof(float) * 2 * qrow);
            assert_int_equal(clEnqueueWriteBuffer(lazyattn_context_queue(ctx), outm, CL_TRUE, 0,
                                                  sizeof(float) * 2 * qrow, out, 0, NULL, NULL),
                             CL_SUCCESS);
            lt_assert_status(lazyattn_decode(at, pool, 0, &da, NULL, NULL), LAZYATTN_STATUS_OK);
            lt_read(ctx, outm, out, sizeof(float) * 2 * qrow);
            lt_assert_status(lazyattn_attention_check(at, NULL), LAZYATTN_STATUS_OK);
            for (int i = 0; i < 2; i++) {
                const double err = lazyattn_normalised_error(out + i * qrow, ref[i], qrow);
                if (!(err <= tolerance(c.dtype)))
                    print_error("decode, %d splits (pass %d), sequence %d: error %.3g > %.3g\n", ns, pass, i,
                                err, tolerance(c.dtype));
                assert_true(err <= tolerance(c.dtype));
                if (err > worst) worst = err;
            }
        }
    printf("# decode over %d + %d entries split 1..%d ways, 2 passes: worst error %.2e (tol %.1e)\n",
           seqs[0].n_entries, seqs[1].n_entries, max_entries, worst, tolerance(c.dtype));
    cl_mem mems[] = {qm, qpm, offm, tm, epm, outm, badm};
    for (size_t i = 0; i < sizeof mems / sizeof *mems; i++) clReleaseMemObject(mems[i]);
    free(q); free(out); free(table); free(entry_pos); free(ref[0]); free(ref[1]);
    for (int i = 0; i < 2; i++) sequence_free(&seqs[i]);
    lazyattn_attention_destroy(attn);
    lazyattn_pool_destroy(pool);
}

/* The prefill's dispatch order (lib/prefill_order.c, LAZYATTN_TUNE nv.order)
 * moves work between work-groups, never the result: a prefill long enough
 * for the orders to differ on a GPU (22 token tiles of 48 x 8 KV heads =
 * 176 work-groups: the NVIDIA wgmma prefill picks among its orders), once
 * per order (auto, none, lpt, balanced; each an attention created with it
 * set), gives the same bits every time, and sampled rows of it match the
 * float64 reference; so do eight prefills of other lengths through one
 * attention object keeping its orders (the cache of lib/attn/nv_build.c). (On
 * CPU OpenCL all of them run the portable kernel.) */
static void test_prefill_order_invariance(void **state) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed() ^ 0x0bde7u};
    lazyattn_attention_config c;
    lazyattn_pool *pool = llama_tiled_pool(ctx, 64, 260, &c);
    /* two documents at their own stored starts, then 1040 new tokens */
    int seg_len[4] = {5, 700, 900, 1040}, seg_stored[4] = {-1, 123, 40000, -1};
    sequence s;
    lt_sequence_lay_out(&r, pool, &c, 77, 4, seg_len, seg_stored, &s);
    const int n_q = seg_len[3];
    const int32_t *q_pos = s.k_pos + (s.n_keys - n_q);
    float *q = make_queries(&r, &c, n_q);
    /* the orders, and (the last two) the persistent kernel (on Hopper, opt-in:
     * 132 work-groups running the task lists of the default order, then
     * round robin over the kernel's own order) */
    static const char *const orders[] = {NULL, "none", "lpt", "balanced", NULL, "none"};
    const size_t n = (size_t)n_q * c.n_q_heads * c.head_dim;
    float *first = NULL;
    for (int i = 0; i < 6; i++) {
        char tune[64];
        snprintf(tune, sizeof tune, "nv.order=%s%s", orders[i] ? orders[i] : "auto", i >= 4 ? ",nv.persist=1" : "");
        setenv("LAZYATTN_TUNE", tune, 1);
        lazyattn_attention *attn = NULL;
        lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
        unsetenv("LAZYATTN_TUNE");
        if (i == 0) sequence_write(ctx, attn, pool, &s, c.n_kv_heads, c.head_dim);
        float *out = run_prefill(ctx, attn, pool, &c, q, q_pos, n_q, s.table, s.entry_pos, s.n_entries);
        lazyattn_attention_destroy(attn);
        if (!first) {
            first = out;
            continue;
        }
        size_t diff = 0;
        for (size_t j = 0; j < n; j++) diff += memcmp(&out[j], &first[j], sizeof *out) != 0;
        if (diff)
            print_error("order %s%s: %zu of %zu outputs differ from the default order's\n",
                        orders[i] ? orders[i] : "default", i >= 4 ? " (persistent)" : "", diff, n);
        assert_int_equal(diff, 0);
        free(out);
    }
    /* one attention object over several shapes, shapes repeated and more of
     * them than the orders it keeps (4): its cached orders (lpt, a table
     * each) give what the kernel's own order gives; so do the persistent
     * kernel's cached task lists (on Hopper: 3 to 8 token tiles x 8 heads,
     * as few tasks as work-groups at 100 and 150 tokens) */
    {
        static const int n_sub[] = {300, 200, 300, 100, 250, 150, 350, 300};
        lazyattn_attention *lpt = NULL, *own = NULL, *per = NULL;
        setenv("LAZYATTN_TUNE", "nv.order=lpt", 1);
        lt_assert_status(lazyattn_attention_create(ctx, &c, &lpt), LAZYATTN_STATUS_OK);
        setenv("LAZYATTN_TUNE", "nv.order=none", 1);
        lt_assert_status(lazyattn_attention_create(ctx, &c, &own), LAZYATTN_STATUS_OK);
        setenv("LAZYATTN_TUNE", "nv.persist=1", 1);
        lt_assert_status(lazyattn_attention_create(ctx, &c, &per), LAZYATTN_STATUS_OK);
        unsetenv("LAZYATTN_TUNE");
        for (size_t k = 0; k < sizeof n_sub / sizeof *n_sub; k++) {
            const int m = n_sub[k]; /* the question's first m tokens */
            float *a = run_prefill(ctx, lpt, pool, &c, q, q_pos, m, s.table, s.entry_pos, s.n_entries);
            float *b = run_prefill(ctx, own, pool, &c, q, q_pos, m, s.table, s.entry_pos, s.n_entries);
            float *d = run_prefill(ctx, per, pool, &c, q, q_pos, m, s.table, s.entry_pos, s.n_entries);
            const size_t nm = (size_t)m * c.n_q_heads * c.head_dim;
            assert_memory_equal(a, b, nm * sizeof *a);
            assert_memory_equal(d, b, nm * sizeof *d);
            free(a), free(b), free(d);
        }
        lazyattn_attention_destroy(lpt);
        lazyattn_attention_destroy(own);
        lazyattn_attention_destroy(per);
    }
    /* every 29th row (all token tiles, first and last rows included) against the reference */
    enum { STEP = 29 };
    const int n_rows = (n_q - 1) / STEP + 2;
    const size_t row = (size_t)c.n_q_heads * c.head_dim;
    float *qs = malloc(sizeof(float) * n_rows * row), *got = malloc(sizeof(float) * n_rows * row);
    int32_t *ps = malloc(sizeof(int32_t) * n_rows);
    for (int i = 0; i < n_rows; i++) {
        const int t = i == n_rows - 1 ? n_q - 1 : i * STEP;
        memcpy(qs + i * row, q + t * row, sizeof(float) * row);
        memcpy(got + i * row, first + t * row, sizeof(float) * row);
        ps[i] = q_pos[t];
    }
    double *ref = malloc(sizeof(double) * n_rows * row);
    lazyattn_reference_args ra = {n_rows, s.n_keys, qs, ps, s.k, s.v, s.k_pos, ref, NULL};
    lt_assert_status(lazyattn_reference_attention(&c, &ra), LAZYATTN_STATUS_OK);
    const double err = lazyattn_normalised_error(got, ref, (size_t)n_rows * row);
    printf("# prefill order invariance: %d queries over %d keys, 4 orders and the persistent kernel (2) "
           "bit-identical, %d rows against the reference %.2e (tolerance %.0e)\n",
           n_q, s.n_keys, n_rows, err, tolerance(c.dtype));
    assert_true(err <= tolerance(c.dtype));
    free(qs), free(got), free(ps), free(ref), free(first), free(q);
    sequence_free(&s);
    lazyattn_pool_destroy(pool);
}

/* kv_layout of an attention: ROWS or TILED, TILED only with whole tile rows
 * of 8 tokens a block; kept by get_config; and a pool of the other layout
 * is refused (INVALID_ARGUMENT naming kv_layout) by every launch that reads
 * or writes its pages, while the same launch on its own layout's pool runs. */
static void test_kv_layout_checks(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_attention_config c;
    memset(&c, 0xA5, sizeof c);
    lazyattn_attention_config_default(&c);
    assert_int_equal(c.kv_layout, ROWS);
    c.n_q_heads = 4, c.n_kv_heads = 2, c.head_dim = 64, c.dtype = LAZYATTN_DTYPE_F32;
    lazyattn_attention *attn = (lazyattn_attention *)0x1;
    const int bad[] = {2, -1};
    for (int i = 0; i < 2; i++) {
        c.kv_layout = (lazyattn_kv_layout)bad[i];
        lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_null(attn);
        assert_non_null(strstr(lazyattn_last_error(), "kv_layout"));
    }
    c.kv_layout = TILED, c.block_size = 12;
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "TILED needs block_size a multiple of 8, got 12"));
    c.block_size = 16;
    lazyattn_attention *as[2]; /* [layout] */
    lazyattn_pool *pools[2];
    for (int l = 0; l < 2; l++) {
        c.kv_layout = (lazyattn_kv_layout)l;
        lt_assert_status(lazyattn_attention_create(ctx, &c, &as[l]), LAZYATTN_STATUS_OK);
        lazyattn_attention_config back;
        memset(&back, 0xA5, sizeof back);
        lt_assert_status(lazyattn_attention_get_config(as[l], &back), LAZYATTN_STATUS_OK);
        assert_int_equal(back.kv_layout, l);
        lazyattn_pool_config pc = {1, 2, 64, 16, LAZYATTN_DTYPE_F32, 4 * 2 * 2 * 16 * 64 * 4,
                                   (lazyattn_kv_layout)l};
        lt_assert_status(lazyattn_pool_create(ctx, &pc, &pools[l]), LAZYATTN_STATUS_OK);
    }

    /* one query over one full block; valid buffers, so only the layout can fail */
    float q[4 * 64] = {0.25f}, kv[2 * 64] = {0.5f};
    int32_t qpos[1] = {15}, epos[1] = {0}, slot[1] = {3}, spos[1] = {3}, offsets[2] = {0, 1};
    int32_t q_indptr[2] = {0, 1}, t_indptr[2] = {0, 1}, dst[1] = {1};
    uint64_t table[1];
    lazyattn_entry_pack(0, 0, 16, &table[0]);
    cl_mem qm = lt_buffer(ctx, q, sizeof q), qpm = lt_buffer(ctx, qpos, sizeof qpos);
    cl_mem tm = lt_buffer(ctx, table, sizeof table), epm = lt_buffer(ctx, epos, sizeof epos);
    cl_mem out = lt_buffer(ctx, NULL, sizeof q), om = lt_buffer(ctx, offsets, sizeof offsets);
    cl_mem kvm = lt_buffer(ctx, kv, sizeof kv), sm = lt_buffer(ctx, slot, sizeof slot);
    cl_mem spm = lt_buffer(ctx, spos, sizeof spos), dm = lt_buffer(ctx, dst, sizeof dst);
    cl_mem qim = lt_buffer(ctx, q_indptr, sizeof q_indptr), tim = lt_buffer(ctx, t_indptr, sizeof t_indptr);
    lazyattn_prefill_args a = {1, 1, qm, qpm, tm, epm, out, NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    lazyattn_decode_args d = {1, 1, 0, qm, qpm, om, tm, epm, out, NULL, LAZYATTN_DTYPE_F32,
                              LAZYATTN_DTYPE_F32};
    lazyattn_prefill_batch_args ba;
    lazyattn_prefill_batch_args_init(&ba);
    ba.n_seqs = 1, ba.n_queries = 1, ba.n_entries = 1, ba.max_queries = 1;
    ba.q = qm, ba.q_pos = qpm, ba.q_indptr = qim, ba.table_indptr = tim, ba.table = tm;
    ba.entry_pos = epm, ba.out = out;
    for (int al = 0; al < 2; al++)
        for (int pl = 0; pl < 2; pl++) {
            const int want = al == pl ? LAZYATTN_STATUS_OK : LAZYATTN_STATUS_INVALID_ARGUMENT;
            lazyattn_attention *at = as[al];
            lazyattn_pool *pool = pools[pl];
            lt_assert_status(lazyattn_write_kv(at, pool, 0, 1, kvm, kvm, sm, spm, NULL, NULL), want);
            if (want) assert_non_null(strstr(lazyattn_last_error(), "kv_layout"));
            lt_assert_status(lazyattn_prefill(at, pool, 0, &a, NULL, NULL), want);
            if (want) assert_non_null(strstr(lazyattn_last_error(), "kv_layout"));
            lt_assert_status(lazyattn_decode(at, pool, 0, &d, NULL, NULL), want);
            if (want) assert_non_null(strstr(lazyattn_last_error(), "kv_layout"));
            lt_assert_status(lazyattn_prefill_batched(at, pool, 0, &ba, NULL, NULL), want);
            if (want) assert_non_null(strstr(lazyattn_last_error(), "kv_layout"));
            lt_assert_status(lazyattn_materialise(at, pool, 0, 1, tm, dm, NULL, NULL), want);
            if (want) assert_non_null(strstr(lazyattn_last_error(), "kv_layout"));
            lt_assert_status(lazyattn_attention_check(at, NULL), LAZYATTN_STATUS_OK);
        }
    cl_mem mems[] = {qm, qpm, tm, epm, out, om, kvm, sm, spm, dm, qim, tim};
    for (size_t i = 0; i < sizeof mems / sizeof *mems; i++) clReleaseMemObject(mems[i]);
    for (int l = 0; l < 2; l++) {
        lazyattn_attention_destroy(as[l]);
        lazyattn_pool_destroy(pools[l]);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
        program_n_cases = 2;
    } else if (argc > 1) {
        fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_kv_rotates_at_stored_position),
        cmocka_unit_test(test_write_kv_tiled_pages),
        cmocka_unit_test(test_rope_apply_is_accurate_at_large_positions),
        cmocka_unit_test(test_program_0),
        cmocka_unit_test(test_program_1),
        cmocka_unit_test(test_program_2),
        cmocka_unit_test(test_program_3),
        cmocka_unit_test(test_program_4),
        cmocka_unit_test(test_program_5),
        cmocka_unit_test(test_program_6),
        cmocka_unit_test(test_program_7),
        cmocka_unit_test(test_program_8),
        cmocka_unit_test(test_program_9),
        cmocka_unit_test(test_bad_launches),
        cmocka_unit_test(test_kv_layout_checks),
        cmocka_unit_test(test_tiled_every_kernel),
        cmocka_unit_test(test_prefill_order_invariance),
        cmocka_unit_test(test_decode_splits),
    };
    /* LAZYATTN_TEST_FILTER=test_decode_splits: only the tests matching it (device calls) */
    if (getenv("LAZYATTN_TEST_FILTER")) cmocka_set_test_filter(getenv("LAZYATTN_TEST_FILTER"));
    return cmocka_run_group_tests_name("attention", tests, lt_context_setup, lt_context_teardown);
}
