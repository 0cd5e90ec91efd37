/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Batched ragged prefill (lazyattn_prefill_batched) against per-sequence
 * prefill (lazyattn_prefill: the same kernel core and tiles, so the bits
 * must be equal) and against the float64 reference, on whatever device the
 * context picks: PoCL or Intel's runtime run the portable kernel, NVIDIA's
 * driver the tensor-core one for f16, head dim 64/128, blocks of 16/32 (the
 * cases below include those shapes; the test prints which path ran).
 *
 * Batches mix, in random order: requests (prefix, documents stored at other
 * positions so their blocks carry deltas, question; the queries are the
 * question's last tokens, sometimes one), documents encoded in isolation
 * (each its own table range at document-local positions, every token a
 * query, lengths not multiples of the block size) as a cache plan's missed
 * documents are, empty sequences, a sequence with no entries, and spare
 * rows of no sequence (which must stay unwritten). GQA groups 1, 4 and 8
 * (all three on f32 d64 B16 and f16 d128 B16), each storage type,
 * NeoX/GPT-J/partial RoPE, Llama-3 scaling, ALiBi. Then
 * hostile indptr arrays (skipped and reported, the good sequences still
 * right, nothing written outside) and bad host arguments.
 */
#include "test_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double tolerance(lazyattn_dtype t) {
    return t == LAZYATTN_DTYPE_F32 ? 2e-5 : t == LAZYATTN_DTYPE_F16 ? 2e-3 : 1.6e-2;
}

/* One sequence of a batch: its keys (logical order, the reference's view),
 * their pool slots, its table, and its queries (n_q, q: the last n_q keys;
 * no_entries: launched with an empty table range, sees no key). */
typedef lt_sequence seq;

static void seq_free(seq *s) { lt_sequence_free(s); }

enum { KIND_REQUEST, KIND_DOCUMENT, KIND_EMPTY, KIND_NO_ENTRIES };

/* Builds a sequence of the given kind with blocks from the pool (scattered). */
static void seq_make(lt_rng *r, lazyattn_pool *pool, const lazyattn_attention_config *c, int kind,
                     seq *s) {
    const int B = c->block_size, d = c->head_dim;
    int n_seg = 0, seg_len[8], seg_stored[8], base = 0, n_question = 0;
    if (kind == KIND_DOCUMENT) {
        /* isolated: stored where it sits, at document-local positions 0.. */
        seg_len[n_seg] = lt_int(r, 1, 3 * B + 5), seg_stored[n_seg++] = -1;
        n_question = seg_len[0];
    } else {
        base = lt_int(r, 0, 150000);
        seg_len[n_seg] = lt_int(r, 0, 2 * B + 3), seg_stored[n_seg++] = -1; /* prefix */
        const int n_docs = lt_int(r, 1, 3);
        for (int i = 0; i < n_docs; i++)
            seg_len[n_seg] = lt_int(r, 1, 2 * B + 5), seg_stored[n_seg++] = lt_int(r, 0, 120000);
        n_question = lt_int(r, 1, 2 * B + 1);
        seg_len[n_seg] = n_question, seg_stored[n_seg++] = -1;
    }
    lt_sequence_lay_out(r, pool, c, base, n_seg, seg_len, seg_stored, s);
    s->n_q = kind == KIND_EMPTY ? 0 : lt_int(r, 0, 3) == 0 ? 1 : lt_int(r, 1, n_question);
    if (kind == KIND_DOCUMENT && lt_int(r, 0, 1)) s->n_q = n_question; /* the whole document */
    if (s->n_q) {
        s->q = malloc(sizeof(float) * s->n_q * c->n_q_heads * d);
        assert_non_null(s->q);
        lt_fill(r, s->q, (size_t)s->n_q * c->n_q_heads * d, 2.0f);
    }
}

/* Writes a sequence's K/V into the pool. */
static void seq_write(lazyattn_context *ctx, lazyattn_attention *attn, lazyattn_pool *pool,
                      const seq *s, const lazyattn_attention_config *c) {
    size_t kv_bytes = sizeof(float) * s->n_keys * c->n_kv_heads * c->head_dim;
    cl_mem k = lt_buffer(ctx, s->k, kv_bytes), v = lt_buffer(ctx, s->v, kv_bytes);
    cl_mem slot = lt_buffer(ctx, s->slot, sizeof(int32_t) * s->n_keys);
    cl_mem stored = lt_buffer(ctx, s->stored, sizeof(int32_t) * s->n_keys);
    lt_assert_status(lazyattn_write_kv(attn, pool, 0, s->n_keys, k, v, slot, stored, NULL, NULL),
                     LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
    clReleaseMemObject(k), clReleaseMemObject(v), clReleaseMemObject(slot);
    clReleaseMemObject(stored);
}

/* A batch laid out for one launch: rows and entries of every sequence one
 * after another (spare rows at the end), the indptr arrays, the queries
 * rotated on the device and read back (so per-sequence prefill gets the
 * same bits). */
typedef struct batch {
    int n_seqs, n_rows, n_entries, max_q;
    int32_t *q_indptr, *t_indptr, *q_pos, *entry_pos;
    uint64_t *table;
    float *q_rot; /* [n_rows, n_q_heads, d] rotated */
    cl_mem qm, qpm, qim, tim, tm, em, om;
} batch;

static const uint32_t SENTINEL = 0x7FC0BEEFu; /* a NaN that no kernel writes */

static void batch_make(lazyattn_context *ctx, lazyattn_attention *attn,
                       const lazyattn_attention_config *c, const seq *seqs, int n_seqs, int spare,
                       batch *b) {
    memset(b, 0, sizeof *b);
    const size_t qrow = (size_t)c->n_q_heads * c->head_dim;
    b->n_seqs = n_seqs;
    b->q_indptr = malloc(sizeof(int32_t) * (n_seqs + 1));
    b->t_indptr = malloc(sizeof(int32_t) * (n_seqs + 1));
    b->q_indptr[0] = b->t_indptr[0] = 0;
    for (int i = 0; i < n_seqs; i++) {
        b->q_indptr[i + 1] = b->q_indptr[i] + seqs[i].n_q;
        b->t_indptr[i + 1] = b->t_indptr[i] + (seqs[i].no_entries ? 0 : seqs[i].n_entries);
        if (seqs[i].n_q > b->max_q) b->max_q = seqs[i].n_q;
    }
    b->n_rows = b->q_indptr[n_seqs] + spare;
    b->n_entries = b->t_indptr[n_seqs];
    assert_true(b->n_rows >= 1 && b->max_q >= 1);
    float *q = calloc((size_t)b->n_rows * qrow, sizeof(float));
    b->q_pos = calloc((size_t)b->n_rows, sizeof(int32_t));
    b->table = malloc(sizeof(uint64_t) * (b->n_entries ? b->n_entries : 1));
    b->entry_pos = malloc(sizeof(int32_t) * (b->n_entries ? b->n_entries : 1));
    b->q_rot = malloc(sizeof(float) * b->n_rows * qrow);
    assert_true(q && b->q_pos && b->table && b->entry_pos && b->q_rot);
    for (int i = 0; i < n_seqs; i++) {
        const seq *s = &seqs[i];
        if (s->n_q) memcpy(q + b->q_indptr[i] * qrow, s->q, sizeof(float) * s->n_q * qrow);
        for (int t = 0; t < s->n_q; t++) b->q_pos[b->q_indptr[i] + t] = s->k_pos[s->n_keys - s->n_q + t];
        const int n_e = b->t_indptr[i + 1] - b->t_indptr[i];
        memcpy(b->table + b->t_indptr[i], s->table, sizeof(uint64_t) * n_e);
        memcpy(b->entry_pos + b->t_indptr[i], s->entry_pos, sizeof(int32_t) * n_e);
    }
    b->qm = lt_buffer(ctx, q, sizeof(float) * b->n_rows * qrow);
    b->qpm = lt_buffer(ctx, b->q_pos, sizeof(int32_t) * b->n_rows);
    b->qim = lt_buffer(ctx, b->q_indptr, sizeof(int32_t) * (n_seqs + 1));
    b->tim = lt_buffer(ctx, b->t_indptr, sizeof(int32_t) * (n_seqs + 1));
    b->tm = lt_buffer(ctx, b->table, sizeof(uint64_t) * (b->n_entries ? b->n_entries : 1));
    b->em = lt_buffer(ctx, b->entry_pos, sizeof(int32_t) * (b->n_entries ? b->n_entries : 1));
    uint32_t *fill = malloc(sizeof(float) * b->n_rows * qrow);
    for (size_t i = 0; i < b->n_rows * qrow; i++) fill[i] = SENTINEL;
    b->om = lt_buffer(ctx, fill, sizeof(float) * b->n_rows * qrow);
    lt_assert_status(lazyattn_rope_apply(attn, b->n_rows, c->n_q_heads, b->qm, b->qpm, NULL, NULL),
                     LAZYATTN_STATUS_OK);
    lt_read(ctx, b->qm, b->q_rot, sizeof(float) * b->n_rows * qrow);
    free(q);
    free(fill);
}

static void batch_free(batch *b) {
    cl_mem m[] = {b->qm, b->qpm, b->qim, b->tim, b->tm, b->em, b->om};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++)
        if (m[i]) clReleaseMemObject(m[i]);
    free(b->q_indptr), free(b->t_indptr), free(b->q_pos), free(b->entry_pos), free(b->table);
    free(b->q_rot);
    memset(b, 0, sizeof *b);
}

static void batch_args(const batch *b, lazyattn_prefill_batch_args *a) {
    lazyattn_prefill_batch_args_init(a);
    a->n_seqs = b->n_seqs, a->n_queries = b->n_rows, a->n_entries = b->n_entries;
    a->max_queries = b->max_q;
    a->q = b->qm, a->q_pos = b->qpm, a->q_indptr = b->qim, a->table_indptr = b->tim;
    a->table = b->tm, a->entry_pos = b->em, a->out = b->om;
}

/* Per-sequence prefill of sequence i of the batch (its rotated queries). */
static float *prefill_one(lazyattn_context *ctx, lazyattn_attention *attn, lazyattn_pool *pool,
                          const lazyattn_attention_config *c, const batch *b, int i) {
    const size_t qrow = (size_t)c->n_q_heads * c->head_dim;
    const int n_q = b->q_indptr[i + 1] - b->q_indptr[i];
    const int n_e = b->t_indptr[i + 1] - b->t_indptr[i];
    cl_mem q = lt_buffer(ctx, b->q_rot + b->q_indptr[i] * qrow, sizeof(float) * n_q * qrow);
    cl_mem qp = lt_buffer(ctx, b->q_pos + b->q_indptr[i], sizeof(int32_t) * n_q);
    cl_mem t = n_e ? lt_buffer(ctx, b->table + b->t_indptr[i], sizeof(uint64_t) * n_e) : NULL;
    cl_mem ep = n_e ? lt_buffer(ctx, b->entry_pos + b->t_indptr[i], sizeof(int32_t) * n_e) : NULL;
    cl_mem out = lt_buffer(ctx, NULL, sizeof(float) * n_q * qrow);
    lazyattn_prefill_args a;
    lazyattn_prefill_args_init(&a);
    a.n_queries = n_q, a.n_entries = n_e, a.q = q, a.q_pos = qp, a.table = t, a.entry_pos = ep;
    a.out = out;
    lt_assert_status(lazyattn_prefill(attn, pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
    float *o = malloc(sizeof(float) * n_q * qrow);
    lt_read(ctx, out, o, sizeof(float) * n_q * qrow);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
    clReleaseMemObject(q), clReleaseMemObject(qp), clReleaseMemObject(out);
    if (t) clReleaseMemObject(t), clReleaseMemObject(ep);
    return o;
}

/* The float64 reference of a sequence's queries over its own keys. */
static double seq_reference_error(const lazyattn_attention_config *c, const seq *s, const float *out) {
    const size_t n = (size_t)s->n_q * c->n_q_heads * c->head_dim;
    double *ref = malloc(sizeof(double) * n);
    lazyattn_reference_args ra;
    lazyattn_reference_args_init(&ra);
    ra.n_queries = s->n_q, ra.n_keys = s->n_keys, ra.q = s->q;
    ra.q_pos = s->k_pos + (s->n_keys - s->n_q), ra.k = s->k, ra.v = s->v, ra.k_pos = s->k_pos;
    ra.out = ref;
    lt_assert_status(lazyattn_reference_attention(c, &ra), LAZYATTN_STATUS_OK);
    double err = lazyattn_normalised_error(out, ref, n);
    free(ref);
    return err;
}

/* Groups: bit 0 = GQA 1, bit 1 = 4, bit 2 = 8 (each group is a program
 * build: the CI's runs on Intel's runtime from source pay for every one). */
typedef struct shape {
    int head_dim, block_size;
    lazyattn_dtype dtype;
    int groups;
} shape;

static const shape shapes[] = {
    {64, 16, LAZYATTN_DTYPE_F32, 7},
    {128, 16, LAZYATTN_DTYPE_F16, 7}, /* the NVIDIA fast path's shapes (f16, d 64/128, B 16/32) */
    {64, 32, LAZYATTN_DTYPE_F16, 2},
    {128, 32, LAZYATTN_DTYPE_BF16, 5},
    {96, 7, LAZYATTN_DTYPE_F32, 2},   /* head dim not a power of two, blocks of 7 */
};

/* Positional scheme of case i: RoPE styles, partial rotary, Llama-3 scaling, ALiBi. */
static void set_scheme(lazyattn_attention_config *c, int i) {
    memset(&c->rope, 0, sizeof c->rope);
    c->alibi = 0;
    switch (i % 5) {
    case 4: c->alibi = 1; return;
    case 3:
        c->rope.rotary_dim = c->head_dim / 2; /* partial NeoX */
        /* fall through */
    case 0:
    case 2: c->rope.style = LAZYATTN_ROPE_NEOX; break;
    default: c->rope.style = LAZYATTN_ROPE_GPTJ; break;
    }
    c->rope.theta = i % 2 ? 10000.0 : 500000.0;
    if (i % 5 == 2 || i % 5 == 1) {
        c->rope.llama3_factor = 8.0;
        c->rope.llama3_low_freq_factor = 1.0;
        c->rope.llama3_high_freq_factor = 4.0;
        c->rope.llama3_original_context = 8192;
    }
}

/* One shape x groups 1, 4, 8: random batches, batched == per-sequence bits,
 * both against the reference. */
static void run_shape(void **state, const shape *sh) {
    lazyattn_context *ctx = *state;
    static uint64_t seed;
    if (!seed) seed = lt_seed();
    lt_rng r = {seed ^ (uint64_t)(sh->head_dim * 1000 + sh->block_size * 10 + sh->dtype)};
    const int groups[3] = {1, 4, 8};
    double worst = 0;
    int n_checked = 0, n_docs = 0, n_fast = 0;
    for (int gi = 0; gi < 3; gi++) {
        if (!(sh->groups >> gi & 1)) continue;
        lazyattn_attention_config c;
        lazyattn_attention_config_init(&c);
        c.head_dim = sh->head_dim, c.block_size = sh->block_size, c.dtype = sh->dtype;
        c.n_kv_heads = gi == 2 ? 1 : 2;
        c.n_q_heads = c.n_kv_heads * groups[gi];
        c.scale = 0;
        set_scheme(&c, (int)(seed % 5) + gi + sh->block_size);
        lazyattn_pool_config pc;
        lazyattn_pool_config_init(&pc);
        pc.n_layers = 1, pc.n_kv_heads = c.n_kv_heads, pc.head_dim = c.head_dim;
        pc.block_size = c.block_size, pc.dtype = c.dtype;
        pc.budget_bytes = (uint64_t)400 * 2 * c.n_kv_heads * c.block_size * c.head_dim *
                          lazyattn_dtype_size(c.dtype);
        lazyattn_pool *pool;
        lazyattn_attention *attn;
        lt_assert_status(lazyattn_pool_create(ctx, &pc, &pool), LAZYATTN_STATUS_OK);
        lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
        const int fast = lazyattn_context_fast_path(ctx) && c.dtype == LAZYATTN_DTYPE_F16 &&
                         (c.head_dim == 64 || c.head_dim == 128) &&
                         (c.block_size == 16 || c.block_size == 32) && !c.alibi;
        const double tol = tolerance(c.dtype);
        const size_t qrow = (size_t)c.n_q_heads * c.head_dim;
        const int n_groups = (sh->groups & 1) + (sh->groups >> 1 & 1) + (sh->groups >> 2 & 1);
        for (int round = 0; round < 6 / n_groups; round++) { /* programs cost, batches not */
            enum { MAX_SEQS = 9 };
            seq seqs[MAX_SEQS];
            const int n_seqs = lt_int(&r, 3, MAX_SEQS);
            int have_q = 0;
            for (int i = 0; i < n_seqs; i++) {
                /* mostly requests and isolated documents; an empty sequence
                 * and one without entries now and then */
                int kind = lt_int(&r, 0, 9);
                kind = kind < 4 ? KIND_REQUEST : kind < 8 ? KIND_DOCUMENT : kind == 8 ? KIND_EMPTY
                                                                                      : KIND_NO_ENTRIES;
                seq_make(&r, pool, &c, kind == KIND_NO_ENTRIES ? KIND_REQUEST : kind, &seqs[i]);
                seqs[i].no_entries = kind == KIND_NO_ENTRIES;
                have_q |= seqs[i].n_q > 0;
                n_docs += kind == KIND_DOCUMENT;
            }
            if (!have_q) { /* at least one query row */
                seq_free(&seqs[0]);
                seq_make(&r, pool, &c, KIND_DOCUMENT, &seqs[0]);
            }
            for (int i = 0; i < n_seqs; i++) seq_write(ctx, attn, pool, &seqs[i], &c);
            batch b;
            const int spare = lt_int(&r, 0, 3);
            batch_make(ctx, attn, &c, seqs, n_seqs, spare, &b);
            lazyattn_prefill_batch_args a;
            batch_args(&b, &a);
            lt_assert_status(lazyattn_prefill_batched(attn, pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
            float *out = malloc(sizeof(float) * b.n_rows * qrow);
            lt_read(ctx, b.om, out, sizeof(float) * b.n_rows * qrow);
            lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
            for (int i = 0; i < n_seqs; i++) {
                seq *s = &seqs[i];
                if (!s->n_q) continue;
                const float *got = out + b.q_indptr[i] * qrow;
                const size_t n = (size_t)s->n_q * qrow;
                float *one = prefill_one(ctx, attn, pool, &c, &b, i);
                if (memcmp(got, one, sizeof(float) * n) != 0) {
                    double diff = 0;
                    for (size_t j = 0; j < n; j++) diff = fmax(diff, fabs((double)got[j] - one[j]));
                    print_error("G=%d seq %d (%d queries, %d entries): batched differs from "
                                "per-sequence prefill, max |diff| %.3g\n",
                                groups[gi], i, s->n_q, s->n_entries, diff);
                }
                assert_memory_equal(got, one, sizeof(float) * n);
                double err;
                if (s->no_entries) { /* no entries: zeros, like lazyattn_prefill */
                    err = 0;
                    for (size_t j = 0; j < n; j++) err = fmax(err, fabs(got[j]));
                    assert_true(err == 0);
                } else {
                    err = seq_reference_error(&c, s, got);
                }
                if (err > tol)
                    print_error("G=%d seq %d (%d queries, %d entries): error %.3g > %.3g\n", groups[gi],
                                i, s->n_q, s->n_entries, err, tol);
                assert_true(err <= tol);
                worst = fmax(worst, err);
                n_checked++;
                n_fast += fast;
                free(one);
            }
            /* spare rows (of no sequence) stay unwritten */
            for (size_t j = (size_t)b.q_indptr[n_seqs] * qrow; j < (size_t)b.n_rows * qrow; j++) {
                uint32_t bits;
                memcpy(&bits, &out[j], sizeof bits);
                assert_int_equal(bits, SENTINEL);
            }
            free(out);
            batch_free(&b);
            for (int i = 0; i < n_seqs; i++) {
                int32_t *ids = malloc(sizeof(int32_t) * seqs[i].n_keys);
                int n_ids = 0;
                for (int k = 0; k < seqs[i].n_keys; k += 1)
                    if (k == 0 || seqs[i].slot[k] / c.block_size != seqs[i].slot[k - 1] / c.block_size)
                        ids[n_ids++] = seqs[i].slot[k] / c.block_size;
                lt_assert_status(lazyattn_pool_free(pool, n_ids, ids), LAZYATTN_STATUS_OK);
                free(ids);
                seq_free(&seqs[i]);
            }
        }
        lazyattn_attention_destroy(attn);
        lazyattn_pool_destroy(pool);
    }
    printf("# d=%d B=%d dtype=%d, G%s%s%s: %d sequences (%d isolated documents) bit-identical to "
           "per-sequence prefill, worst error vs float64 %.2e (tol %.1e), %d on the NVIDIA fast path\n",
           sh->head_dim, sh->block_size, (int)sh->dtype, sh->groups & 1 ? " 1" : "",
           sh->groups & 2 ? " 4" : "", sh->groups & 4 ? " 8" : "", n_checked, n_docs, worst,
           tolerance(sh->dtype), n_fast);
}

#define SHAPE_TEST(i) \
    static void test_shape_##i(void **state) { run_shape(state, &shapes[i]); }
SHAPE_TEST(0)
SHAPE_TEST(1)
SHAPE_TEST(2)
SHAPE_TEST(3)
SHAPE_TEST(4)

/* Small geometry shared by the tests below (the program of shape 0, G 4). */
static void small_config(lazyattn_attention_config *c) {
    lazyattn_attention_config_init(c); /* NeoX RoPE, Llama-3 scaling */
    c->n_q_heads = 8, c->n_kv_heads = 2, c->head_dim = 64, c->block_size = 16;
    c->dtype = LAZYATTN_DTYPE_F32;
}

static void small_pool(lazyattn_context *ctx, const lazyattn_attention_config *c, int blocks,
                       lazyattn_pool **pool) {
    lazyattn_pool_config pc;
    lazyattn_pool_config_init(&pc);
    pc.n_layers = 1, pc.n_kv_heads = c->n_kv_heads, pc.head_dim = c->head_dim;
    pc.block_size = c->block_size, pc.dtype = c->dtype;
    pc.budget_bytes = (uint64_t)blocks * 2 * c->n_kv_heads * c->block_size * c->head_dim *
                      lazyattn_dtype_size(c->dtype);
    lt_assert_status(lazyattn_pool_create(ctx, &pc, pool), LAZYATTN_STATUS_OK);
}

/* A cache plan's missed documents (and its prefix) in one launch, straight
 * from the plan: sequence i is segment i's prefill rows over the segment's
 * own entries plan.table[first_entry ..], no repacking. Each document's
 * queries see only its own keys: the answer is the document encoded alone
 * at positions 0.. (the reference computes exactly that), wherever it sits
 * in the prompt. */
static void test_plan_documents_in_one_launch(void **state) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed() + 13};
    lazyattn_attention_config c;
    small_config(&c);
    lazyattn_pool *pool;
    lazyattn_attention *attn;
    small_pool(ctx, &c, 64, &pool);
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
    lazyattn_cache *cache;
    lt_assert_status(lazyattn_cache_create(pool, NULL, &cache), LAZYATTN_STATUS_OK);

    enum { NP = 5, NQ = 4, ND = 3, MAXLEN = 40 };
    const int lens[ND] = {21, 16, 9}; /* one block-aligned, two not */
    int32_t doc_tok[ND][MAXLEN], prefix[NP] = {1, 2, 3, 4, 5}, question[NQ] = {6, 7, 8, 9};
    const int32_t *docs[ND];
    for (int d = 0; d < ND; d++) {
        for (int t = 0; t < lens[d]; t++) doc_tok[d][t] = 100 * (d + 1) + t;
        docs[d] = doc_tok[d];
    }
    lazyattn_request_desc desc;
    lazyattn_request_desc_init(&desc);
    desc.n_prefix = NP, desc.prefix = prefix, desc.n_docs = ND, desc.docs = docs;
    desc.doc_lengths = lens, desc.n_question = NQ, desc.question = question;
    lazyattn_request *req;
    lt_assert_status(lazyattn_request_create(cache, &desc, &req), LAZYATTN_STATUS_OK);
    lazyattn_plan p;
    lt_assert_status(lazyattn_request_get_plan(req, &p), LAZYATTN_STATUS_OK);
    assert_int_equal(p.n_segments, ND + 2);

    /* the model's K/V and queries of every prefilled token, by plan row */
    const size_t row = (size_t)c.n_kv_heads * c.head_dim, qrow = (size_t)c.n_q_heads * c.head_dim;
    float *k = malloc(sizeof(float) * p.n_prefill * row), *v = malloc(sizeof(float) * p.n_prefill * row);
    float *q = malloc(sizeof(float) * p.n_prefill * qrow);
    assert_true(k && v && q);
    lt_fill(&r, k, p.n_prefill * row, 2.0f);
    lt_fill(&r, v, p.n_prefill * row, 1.0f);
    lt_fill(&r, q, p.n_prefill * qrow, 2.0f);
    cl_mem km = lt_buffer(ctx, k, sizeof(float) * p.n_prefill * row);
    cl_mem vm = lt_buffer(ctx, v, sizeof(float) * p.n_prefill * row);
    cl_mem sm = lt_buffer(ctx, p.prefill_slots, sizeof(int32_t) * p.n_prefill);
    cl_mem stm = lt_buffer(ctx, p.prefill_stored_pos, sizeof(int32_t) * p.n_prefill);
    lt_assert_status(lazyattn_write_kv(attn, pool, 0, p.n_prefill, km, vm, sm, stm, NULL, NULL),
                     LAZYATTN_STATUS_OK);

    /* sequences: the segments before the question, in prompt order */
    const int n_seqs = p.n_segments - 1;
    int32_t q_indptr[ND + 2], t_indptr[ND + 2];
    int max_q = 0;
    for (int s = 0; s < n_seqs; s++) {
        const lazyattn_segment *g = &p.segments[s];
        assert_int_equal(g->action, LAZYATTN_ACTION_PREFILL);
        q_indptr[s] = g->prefill_offset, t_indptr[s] = g->first_entry;
        q_indptr[s + 1] = g->prefill_offset + g->n_tokens;
        t_indptr[s + 1] = g->first_entry + g->n_entries;
        if (g->n_tokens > max_q) max_q = g->n_tokens;
    }
    const int n_rows = q_indptr[n_seqs];
    cl_mem qm = lt_buffer(ctx, q, sizeof(float) * n_rows * qrow);
    cl_mem qpm = lt_buffer(ctx, p.prefill_pos, sizeof(int32_t) * n_rows);
    cl_mem qim = lt_buffer(ctx, q_indptr, sizeof(int32_t) * (n_seqs + 1));
    cl_mem tim = lt_buffer(ctx, t_indptr, sizeof(int32_t) * (n_seqs + 1));
    cl_mem tm = lt_buffer(ctx, p.table, sizeof(uint64_t) * p.n_entries);
    cl_mem em = lt_buffer(ctx, p.entry_pos, sizeof(int32_t) * p.n_entries);
    cl_mem om = lt_buffer(ctx, NULL, sizeof(float) * n_rows * qrow);
    lt_assert_status(lazyattn_rope_apply(attn, n_rows, c.n_q_heads, qm, qpm, NULL, NULL),
                     LAZYATTN_STATUS_OK);
    lazyattn_prefill_batch_args a;
    lazyattn_prefill_batch_args_init(&a);
    a.n_seqs = n_seqs, a.n_queries = n_rows, a.n_entries = p.n_entries, a.max_queries = max_q;
    a.q = qm, a.q_pos = qpm, a.q_indptr = qim, a.table_indptr = tim, a.table = tm;
    a.entry_pos = em, a.out = om;
    lt_assert_status(lazyattn_prefill_batched(attn, pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
    float *out = malloc(sizeof(float) * n_rows * qrow);
    lt_read(ctx, om, out, sizeof(float) * n_rows * qrow);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);

    /* each segment alone, at its own positions 0 .. n - 1 */
    double worst = 0;
    for (int s = 0; s < n_seqs; s++) {
        const int n = q_indptr[s + 1] - q_indptr[s], r0 = q_indptr[s];
        int32_t local[MAXLEN];
        for (int t = 0; t < n; t++) local[t] = t;
        double *ref = malloc(sizeof(double) * n * qrow);
        lazyattn_reference_args ra;
        lazyattn_reference_args_init(&ra);
        ra.n_queries = n, ra.n_keys = n, ra.q = q + r0 * qrow, ra.q_pos = local;
        ra.k = k + r0 * row, ra.v = v + r0 * row, ra.k_pos = local, ra.out = ref;
        lt_assert_status(lazyattn_reference_attention(&c, &ra), LAZYATTN_STATUS_OK);
        double err = lazyattn_normalised_error(out + r0 * qrow, ref, (size_t)n * qrow);
        if (err > tolerance(c.dtype))
            print_error("segment %d (%d tokens at %d): error %.3g\n", s, n, p.segments[s].logical_start, err);
        assert_true(err <= tolerance(c.dtype));
        worst = fmax(worst, err);
        free(ref);
    }
    printf("# plan: prefix + %d missed documents in one launch, each as if alone at 0..: worst "
           "error %.2e\n", ND, worst);
    cl_mem m[] = {km, vm, sm, stm, qm, qpm, qim, tim, tm, em, om};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++) clReleaseMemObject(m[i]);
    free(k), free(v), free(q), free(out);
    lazyattn_request_destroy(req);
    lazyattn_cache_destroy(cache);
    lazyattn_attention_destroy(attn);
    lazyattn_pool_destroy(pool);
}

/* Launches b with hostile indptr arrays: OUT_OF_RANGE must be reported; the
 * sequences in `good` give the bits of the clean launch, every other row
 * keeps the sentinel (nothing of a skipped sequence is written). good NULL:
 * only the report is checked (a sequence that reads a wrong but in-bounds
 * range of the table gives a wrong answer, which the report announces). */
static void run_hostile(lazyattn_context *ctx, lazyattn_attention *attn, lazyattn_pool *pool,
                        const lazyattn_attention_config *c, const batch *b, const int32_t *q_indptr,
                        const int32_t *t_indptr, int max_q, const int *good, const float *clean,
                        const char *what) {
    const size_t qrow = (size_t)c->n_q_heads * c->head_dim, n = (size_t)b->n_rows * qrow;
    uint32_t *fill = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) fill[i] = SENTINEL;
    cl_mem om = lt_buffer(ctx, fill, sizeof(float) * n);
    cl_mem qim = lt_buffer(ctx, q_indptr, sizeof(int32_t) * (b->n_seqs + 1));
    cl_mem tim = lt_buffer(ctx, t_indptr, sizeof(int32_t) * (b->n_seqs + 1));
    lazyattn_prefill_batch_args a;
    batch_args(b, &a);
    a.q_indptr = qim, a.table_indptr = tim, a.out = om, a.max_queries = max_q;
    lt_assert_status(lazyattn_prefill_batched(attn, pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
    float *out = malloc(sizeof(float) * n);
    lt_read(ctx, om, out, sizeof(float) * n);
    int st = lazyattn_attention_check(attn, NULL);
    if (st != LAZYATTN_STATUS_OUT_OF_RANGE || !strstr(lazyattn_last_error(), "sequence offsets"))
        print_error("%s: not reported (%d: %s)\n", what, st, lazyattn_last_error());
    assert_int_equal(st, LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_non_null(strstr(lazyattn_last_error(), "sequence offsets"));
    if (good) {
        size_t n_good = 0;
        for (int s = 0; s < b->n_seqs; s++)
            for (int t = b->q_indptr[s]; t < b->q_indptr[s + 1]; t++) {
                const float *got = out + t * qrow;
                if (good[s]) {
                    assert_memory_equal(got, clean + t * qrow, sizeof(float) * qrow);
                    n_good++;
                } else {
                    for (size_t j = 0; j < qrow; j++) {
                        uint32_t bits;
                        memcpy(&bits, &got[j], sizeof bits);
                        if (bits != SENTINEL) print_error("%s: seq %d row %d written\n", what, s, t);
                        assert_int_equal(bits, SENTINEL);
                    }
                }
            }
        printf("# %s: reported, %zu rows of good sequences exact, the skipped ones unwritten\n", what,
               n_good);
    } else {
        printf("# %s: reported\n", what);
    }
    clReleaseMemObject(om), clReleaseMemObject(qim), clReleaseMemObject(tim);
    free(fill), free(out);
}

/* Bad offsets in the device indptr arrays are skipped and reported. */
static void test_bad_indptr_skipped_and_reported(void **state) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed() + 17};
    lazyattn_attention_config c;
    small_config(&c);
    lazyattn_pool *pool;
    lazyattn_attention *attn;
    small_pool(ctx, &c, 200, &pool);
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
    enum { N = 5 };
    seq seqs[N];
    for (int i = 0; i < N; i++) {
        seq_make(&r, pool, &c, i % 2 ? KIND_DOCUMENT : KIND_REQUEST, &seqs[i]);
        if (seqs[i].n_q == 0) { /* every sequence has rows here */
            seq_free(&seqs[i]);
            seq_make(&r, pool, &c, KIND_DOCUMENT, &seqs[i]);
        }
        seq_write(ctx, attn, pool, &seqs[i], &c);
    }
    batch b;
    batch_make(ctx, attn, &c, seqs, N, 2, &b);
    const size_t qrow = (size_t)c.n_q_heads * c.head_dim;
    lazyattn_prefill_batch_args a;
    batch_args(&b, &a);
    lt_assert_status(lazyattn_prefill_batched(attn, pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
    float *clean = malloc(sizeof(float) * b.n_rows * qrow);
    lt_read(ctx, b.om, clean, sizeof(float) * b.n_rows * qrow);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
    for (int i = 0; i < N; i++) /* the clean launch is right */
        assert_true(seq_reference_error(&c, &seqs[i], clean + b.q_indptr[i] * qrow) <= tolerance(c.dtype));

    int32_t qi[N + 1], ti[N + 1];
    int good[N];
#define RESET() (memcpy(qi, b.q_indptr, sizeof qi), memcpy(ti, b.t_indptr, sizeof ti))
#define GOOD(...)                                                      \
    do {                                                               \
        const int g_[N] = {__VA_ARGS__};                               \
        memcpy(good, g_, sizeof good);                                 \
    } while (0)
    /* q_indptr decreases at sequence 1: 1 is bad, 2.. follow the decrease */
    RESET();
    qi[2] = qi[1] - 1;
    GOOD(1, 0, 0, 0, 0);
    run_hostile(ctx, attn, pool, &c, &b, qi, ti, b.max_q, good, clean, "q_indptr decreasing");
    /* a negative first offset: only sequence 0 */
    RESET();
    qi[0] = -5;
    GOOD(0, 1, 1, 1, 1);
    run_hostile(ctx, attn, pool, &c, &b, qi, ti, b.max_q, good, clean, "q_indptr negative");
    /* the last sequence past n_queries */
    RESET();
    qi[N] = b.n_rows + 1;
    GOOD(1, 1, 1, 1, 0);
    run_hostile(ctx, attn, pool, &c, &b, qi, ti, b.max_q, good, clean, "q_indptr past the queries");
    /* table offsets past the table: sequences 2 and 3 */
    RESET();
    ti[3] = b.n_entries + 7;
    GOOD(1, 1, 0, 0, 1);
    run_hostile(ctx, attn, pool, &c, &b, qi, ti, b.max_q, good, clean, "table_indptr past the table");
    /* a negative table offset: sequences 0 (end) and 1 (start) */
    RESET();
    ti[1] = -3;
    GOOD(0, 0, 1, 1, 1);
    run_hostile(ctx, attn, pool, &c, &b, qi, ti, b.max_q, good, clean, "table_indptr negative");
    /* a sequence longer than max_queries: the longest one is skipped */
    int longest = 0;
    for (int i = 1; i < N; i++)
        if (seqs[i].n_q > seqs[longest].n_q) longest = i;
    int second = 0;
    for (int i = 0; i < N; i++)
        if (i != longest && seqs[i].n_q > second) second = seqs[i].n_q;
    if (second < seqs[longest].n_q && second >= 1) {
        RESET();
        for (int i = 0; i < N; i++) good[i] = i != longest;
        run_hostile(ctx, attn, pool, &c, &b, qi, ti, second, good, clean, "more rows than max_queries");
    }
    /* table_indptr decreasing: sequence 1 skipped; 2 reads a wrong range
     * (in bounds), which the report announces */
    RESET();
    ti[2] = ti[1] > 0 ? ti[1] - 1 : 0, ti[1] = ti[2] + 1;
    run_hostile(ctx, attn, pool, &c, &b, qi, ti, b.max_q, NULL, NULL, "table_indptr decreasing");
#undef RESET
#undef GOOD
    free(clean);
    batch_free(&b);
    for (int i = 0; i < N; i++) seq_free(&seqs[i]);
    lazyattn_attention_destroy(attn);
    lazyattn_pool_destroy(pool);
}

/* Many small sequences (more than a work-group has work-items, so the
 * kernels' scan of q_indptr takes several strides): tiny documents of 0 to a
 * few queries each, every one bit-identical to its own prefill and right
 * against the reference; then a decrease of q_indptr at sequence 250:
 * sequences 0..249 unchanged, 250.. skipped and unwritten. */
static void test_many_sequences(void **state) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed() + 19};
    lazyattn_attention_config c;
    small_config(&c);
    enum { N = 300, BAD = 250 };
    lazyattn_pool *pool;
    lazyattn_attention *attn;
    small_pool(ctx, &c, 5 * N, &pool);
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
    seq *seqs = calloc(N, sizeof *seqs);
    assert_non_null(seqs);
    for (int i = 0; i < N; i++) {
        seq_make(&r, pool, &c, KIND_DOCUMENT, &seqs[i]);
        if (lt_int(&r, 0, 3) == 0) { /* mostly 0 to 3 queries: the last tokens */
            seqs[i].n_q = 0;
        } else if (seqs[i].n_q > 3) {
            const size_t qrow = (size_t)c.n_q_heads * c.head_dim;
            memmove(seqs[i].q, seqs[i].q + (seqs[i].n_q - 3) * qrow, 3 * qrow * sizeof(float));
            seqs[i].n_q = 3;
        }
        seq_write(ctx, attn, pool, &seqs[i], &c);
    }
    seqs[BAD - 1].n_q = seqs[BAD - 1].n_q ? seqs[BAD - 1].n_q : 1; /* rows before the decrease */
    batch b;
    batch_make(ctx, attn, &c, seqs, N, 0, &b);
    const size_t qrow = (size_t)c.n_q_heads * c.head_dim;
    lazyattn_prefill_batch_args a;
    batch_args(&b, &a);
    lt_assert_status(lazyattn_prefill_batched(attn, pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
    float *clean = malloc(sizeof(float) * b.n_rows * qrow);
    lt_read(ctx, b.om, clean, sizeof(float) * b.n_rows * qrow);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
    double worst = 0;
    int n_checked = 0;
    for (int i = 0; i < N; i++) {
        if (!seqs[i].n_q) continue;
        float *one = prefill_one(ctx, attn, pool, &c, &b, i);
        assert_memory_equal(clean + b.q_indptr[i] * qrow, one, sizeof(float) * seqs[i].n_q * qrow);
        double err = seq_reference_error(&c, &seqs[i], clean + b.q_indptr[i] * qrow);
        assert_true(err <= tolerance(c.dtype));
        worst = fmax(worst, err);
        n_checked++;
        free(one);
    }
    printf("# %d sequences (%d with queries, %d rows): bit-identical to per-sequence prefill, worst "
           "error %.2e\n", N, n_checked, b.n_rows, worst);
    int32_t qi[N + 1];
    int good[N];
    memcpy(qi, b.q_indptr, sizeof qi);
    qi[BAD + 1] = qi[BAD] - 1;
    for (int i = 0; i < N; i++) good[i] = i < BAD;
    run_hostile(ctx, attn, pool, &c, &b, qi, b.t_indptr, b.max_q, good, clean,
                "q_indptr decreasing at sequence 250 of 300");
    free(clean);
    batch_free(&b);
    for (int i = 0; i < N; i++) seq_free(&seqs[i]);
    free(seqs);
    lazyattn_attention_destroy(attn);
    lazyattn_pool_destroy(pool);
}

/* Host-side checks: NULLs, counts, buffer sizes. */
static void test_bad_arguments(void **state) {
    lazyattn_context *ctx = *state;
    lazyattn_attention_config c;
    small_config(&c);
    lazyattn_pool *pool, *books;
    lazyattn_attention *attn;
    small_pool(ctx, &c, 8, &pool);
    lazyattn_pool_config pc;
    lt_assert_status(lazyattn_pool_get_config(pool, &pc), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_pool_create(NULL, &pc, &books), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);

    lazyattn_prefill_batch_args z;
    memset(&z, 0xA5, sizeof z);
    lazyattn_prefill_batch_args_init(&z);
    assert_true(z.n_seqs == 0 && z.n_queries == 0 && z.n_entries == 0 && z.max_queries == 0 &&
                z.q == NULL && z.q_indptr == NULL && z.out == NULL);
    lazyattn_prefill_batch_args_init(NULL); /* no-op */

    const size_t qrow = (size_t)c.n_q_heads * c.head_dim;
    float q[3 * 8 * 64] = {0.25f};
    int32_t qpos[3] = {0, 1, 2}, qi[3] = {0, 2, 3}, ti[3] = {0, 1, 1}, epos[1] = {0};
    uint64_t table[1];
    lazyattn_entry_pack(0, 0, 3, &table[0]);
    cl_mem qm = lt_buffer(ctx, q, sizeof q), qpm = lt_buffer(ctx, qpos, sizeof qpos);
    cl_mem qim = lt_buffer(ctx, qi, sizeof qi), tim = lt_buffer(ctx, ti, sizeof ti);
    cl_mem tm = lt_buffer(ctx, table, sizeof table), em = lt_buffer(ctx, epos, sizeof epos);
    cl_mem om = lt_buffer(ctx, NULL, sizeof q), tiny = lt_buffer(ctx, NULL, 4);
    lazyattn_prefill_batch_args a;
    lazyattn_prefill_batch_args_init(&a);
    a.n_seqs = 2, a.n_queries = 3, a.n_entries = 1, a.max_queries = 2;
    a.q = qm, a.q_pos = qpm, a.q_indptr = qim, a.table_indptr = tim, a.table = tm, a.entry_pos = em;
    a.out = om;
    lt_assert_status(lazyattn_prefill_batched(attn, pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
    (void)qrow;

    const int INV = LAZYATTN_STATUS_INVALID_ARGUMENT;
    lt_assert_status(lazyattn_prefill_batched(NULL, pool, 0, &a, NULL, NULL), INV);
    lt_assert_status(lazyattn_prefill_batched(attn, NULL, 0, &a, NULL, NULL), INV);
    lt_assert_status(lazyattn_prefill_batched(attn, pool, 0, NULL, NULL, NULL), INV);
    lt_assert_status(lazyattn_prefill_batched(attn, pool, 1, &a, NULL, NULL), INV);
    lt_assert_status(lazyattn_prefill_batched(attn, pool, -1, &a, NULL, NULL), INV);
    lt_assert_status(lazyattn_prefill_batched(attn, books, 0, &a, NULL, NULL), INV);
    lazyattn_prefill_batch_args b;
#define BAD(field, value)                                                                       \
    do {                                                                                        \
        b = a, b.field = value;                                                                 \
        lt_assert_status(lazyattn_prefill_batched(attn, pool, 0, &b, NULL, NULL), INV);         \
    } while (0)
    BAD(n_seqs, 0);
    BAD(n_seqs, -1);
    BAD(n_seqs, 3);          /* q_indptr / table_indptr hold 3 offsets, not 4 */
    BAD(n_queries, 0);
    BAD(n_queries, 4);       /* q, q_pos and out hold 3 rows */
    BAD(n_entries, -1);
    BAD(n_entries, 2);       /* the table holds 1 entry */
    BAD(max_queries, 0);
    BAD(max_queries, 4);     /* above n_queries */
    BAD(q, NULL);
    BAD(q_pos, NULL);
    BAD(out, NULL);
    BAD(q_indptr, NULL);
    BAD(table_indptr, NULL);
    BAD(table, NULL);
    BAD(entry_pos, NULL);
    BAD(q, tiny);
    BAD(q_pos, tiny);
    BAD(out, tiny);
    BAD(q_indptr, tiny);
    BAD(table_indptr, tiny);
    BAD(table, tiny);
#undef BAD
    /* no entries at all: the table may be NULL, every row sees no key */
    b = a, b.n_entries = 0, b.table = NULL, b.entry_pos = NULL;
    int32_t ti0[3] = {0, 0, 0};
    cl_mem ti0m = lt_buffer(ctx, ti0, sizeof ti0);
    b.table_indptr = ti0m;
    lt_assert_status(lazyattn_prefill_batched(attn, pool, 0, &b, NULL, NULL), LAZYATTN_STATUS_OK);
    float out[3 * 8 * 64];
    lt_read(ctx, om, out, sizeof out);
    lt_assert_status(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
    for (size_t i = 0; i < sizeof out / sizeof *out; i++) assert_true(out[i] == 0.0f);

    cl_mem m[] = {qm, qpm, qim, tim, tm, em, om, tiny, ti0m};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++) clReleaseMemObject(m[i]);
    lazyattn_attention_destroy(attn);
    lazyattn_pool_destroy(books);
    lazyattn_pool_destroy(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_bad_indptr_skipped_and_reported),
        cmocka_unit_test(test_plan_documents_in_one_launch),
        cmocka_unit_test(test_many_sequences),
        cmocka_unit_test(test_shape_0),
        cmocka_unit_test(test_shape_1),
        cmocka_unit_test(test_shape_2),
        cmocka_unit_test(test_shape_3),
        cmocka_unit_test(test_shape_4),
    };
    return cmocka_run_group_tests_name("prefill_batched", tests, lt_context_setup,
                                       lt_context_teardown);
}
