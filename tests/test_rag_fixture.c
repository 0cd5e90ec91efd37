/* SPDX-License-Identifier: Apache-2.0 */
/* A RAG prompt through serve/ with the documents attended in isolation
 * gives transformers' float64 logits. tools/gguf_fixtures.py writes, for
 * the fixture models llama3_rope_freqs (F16, Llama-3 scaling as
 * rope_freqs.weight) and q8_0, NAME.rag: prompts [prefix 5] [doc A 11]
 * [doc B 19] [question 4] at contiguous logical positions from 0 and from
 * 9000 (past Llama-3's 8192), and the question tokens' logits of
 * transformers' forward with a block mask (each document sees only its
 * own earlier tokens; prefix and question rows see every earlier token),
 * checked there against the documents' K/V computed alone and
 * concatenated; beside them the logits of the whole prompt attended
 * causally (documents not isolated), 0.2 .. 0.7 away per row.
 * Here, f32 projections and f32 K/V on the default device (PoCL in CI):
 *  - the prompt from 0 through the engine and a document cache, under
 *    each policy (lazy, position, prefix, none) and both prefill paths
 *    (batched, per segment): request 1 = [prefix, B, A, other question]
 *    computes the documents at other positions; request 2 = [prefix, A, B,
 *    question] (the fixture's prompt; lazy reuses both documents, position
 *    re-rotates them, prefix and none recompute) prefills the first
 *    question token and decodes the other three; request 3 the same prompt
 *    again (position and prefix reuse what request 2 stored) prefills
 *    three question tokens and decodes the fourth. Each question row read
 *    matches within a normalised error of 1e-4, and misses the causal
 *    reference by more than 1e-2 (the comparison can fail);
 *  - the prompt from 9000 through the model with tables built by hand, as
 *    a LAZY cache serves it: each document prefilled alone at
 *    document-local positions 0..L-1 (its keys stored there), then the
 *    prefix and question at their logical positions over the documents'
 *    blocks with delta = the document's logical start. Same bounds. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "serve.h"
#include "serve_check.h"

enum { MAX_PROMPTS = 2, MAX_ROWS = 64, MAX_Q = 8, N_SEG = 4, MAX_BLOCKS = 16 };

/* One prompt of NAME.rag (format in tools/gguf_fixtures.py). */
typedef struct rag_prompt {
    int32_t start;
    int len[N_SEG]; /* prefix, A, B, question */
    int vocab;
    int32_t tokens[MAX_ROWS];
    const int32_t *seg[N_SEG]; /* into tokens */
    double *isolated;          /* [n_question][vocab] */
    double *causal;            /* [n_question][vocab] */
} rag_prompt;

typedef struct rag_fixture {
    int n;
    rag_prompt p[MAX_PROMPTS];
} rag_fixture;

static void fixture_path(char *out, size_t n, const char *name, const char *ext) {
    const char *d = getenv("LAZYATTN_FIXTURES");
    snprintf(out, n, "%s/%s.%s", d && *d ? d : "tests/fixtures", name, ext);
}

static void read_exact(FILE *f, void *dst, size_t size, size_t n, const char *path) {
    if (fread(dst, size, n, f) != n) fail_msg("%s: truncated", path);
}

/* Reads NAME.rag; fails the test on a missing or malformed file. */
static void read_rag(const char *name, rag_fixture *x) {
    char path[512];
    fixture_path(path, sizeof path, name, "rag");
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (LAZYATTN_FIXTURES names the directory)", path);
    memset(x, 0, sizeof *x);
    char magic[8];
    uint32_t n; /* little-endian host, as tests/test_gguf_fixtures.c */
    read_exact(f, magic, 1, 8, path);
    read_exact(f, &n, 4, 1, path);
    if (memcmp(magic, "LZRAGLG1", 8) != 0 || n < 1 || n > MAX_PROMPTS)
        fail_msg("%s: bad header", path);
    x->n = (int)n;
    for (int i = 0; i < x->n; i++) {
        rag_prompt *p = &x->p[i];
        uint32_t h[5];
        read_exact(f, &p->start, 4, 1, path);
        read_exact(f, h, 4, 5, path);
        int total = 0;
        for (int s = 0; s < N_SEG; s++) {
            p->len[s] = (int)h[s];
            if (h[s] < 1 || h[s] > MAX_ROWS) fail_msg("%s: segment length %u", path, h[s]);
            total += p->len[s];
        }
        p->vocab = (int)h[4];
        if (total > MAX_ROWS || p->len[3] > MAX_Q || p->vocab < 2 || p->vocab > 4096 ||
            p->start < 0)
            fail_msg("%s: bad prompt header", path);
        read_exact(f, p->tokens, 4, (size_t)total, path);
        for (int s = 0, a = 0; s < N_SEG; a += p->len[s++]) p->seg[s] = p->tokens + a;
        size_t k = (size_t)p->len[3] * (size_t)p->vocab;
        p->isolated = malloc(k * sizeof(double));
        p->causal = malloc(k * sizeof(double));
        assert_true(p->isolated && p->causal);
        read_exact(f, p->isolated, sizeof(double), k, path);
        read_exact(f, p->causal, sizeof(double), k, path);
    }
    if (fgetc(f) != EOF) fail_msg("%s: bytes after the last prompt", path);
    fclose(f);
}

static void free_rag(rag_fixture *x) {
    for (int i = 0; i < x->n; i++) free(x->p[i].isolated), free(x->p[i].causal);
}

/* Worst normalised errors of the question rows read, against both references. */
typedef struct rag_errors {
    double isolated, causal; /* largest against isolated, smallest against causal */
    int rows;
} rag_errors;

static void rag_errors_init(rag_errors *e) {
    e->isolated = 0.0, e->causal = INFINITY, e->rows = 0;
}

/* Reads the last forward's logits as question row q of p. */
static void compare_row(serve_model *m, const rag_prompt *p, int q, rag_errors *e) {
    float logits[4096];
    CHECK(serve_model_read_logits(m, 1, logits));
    size_t V = (size_t)p->vocab;
    double iso = lazyattn_normalised_error(logits, p->isolated + (size_t)q * V, V);
    double cau = lazyattn_normalised_error(logits, p->causal + (size_t)q * V, V);
    if (!(iso <= e->isolated)) e->isolated = iso; /* NaN sticks */
    if (!(cau >= e->causal)) e->causal = cau;
    e->rows++;
}

static void check_errors(const char *what, const rag_errors *e, int want_rows) {
    printf("# %-44s %d rows: %.3g (isolated), %.3g (causal)\n", what, e->rows, e->isolated,
           e->causal);
    assert_int_equal(e->rows, want_rows);
    if (!(e->isolated <= 1e-4)) fail_msg("%s: normalised error %g > 1e-4", what, e->isolated);
    if (!(e->causal > 1e-2))
        fail_msg("%s: the causal reference is only %g away: the check cannot fail", what,
                 e->causal);
}

/* Loads fixture name with f32 projections and f32 K/V. */
static serve_model *load_model(lazyattn_context *ctx, const char *name, serve_model_config *cfg) {
    char path[512];
    fixture_path(path, sizeof path, name, "gguf");
    serve_gguf *g = NULL;
    CHECK(serve_gguf_open(path, &g));
    serve_model_config_preset(cfg, "tiny"); /* block size, max rows */
    CHECK(serve_gguf_model_config(g, cfg));
    cfg->kv_dtype = LAZYATTN_DTYPE_F32;
    cfg->gemm = SERVE_GEMM_F32;
    serve_model *m = NULL;
    CHECK(serve_model_create(ctx, cfg, &m));
    CHECK(serve_model_load_gguf(m, g));
    serve_gguf_close(g);
    return m;
}

/* Request [prefix, docs..., question[0..n_prefill)] through the engine;
 * decodes question[n_prefill..] and compares every question row from
 * n_prefill - 1 on (question: the fixture's when e is non-NULL). */
static void run_request(serve_engine *eng, serve_model *m, lazyattn_cache *cache,
                        const rag_prompt *p, const int32_t *const *docs,
                        const int32_t *doc_lengths, const int32_t *question, int n_prefill,
                        rag_errors *e, lazyattn_plan *plan_out) {
    int nq = p->len[3];
    lazyattn_request_desc d;
    lazyattn_request_desc_init(&d);
    d.n_prefix = p->len[0], d.prefix = p->seg[0];
    d.n_docs = 2, d.docs = docs, d.doc_lengths = doc_lengths;
    d.n_question = n_prefill, d.question = question;
    d.max_new_tokens = nq;
    lazyattn_request *req = NULL;
    CHECK(lazyattn_request_create(cache, &d, &req));
    CHECK(lazyattn_request_get_plan(req, plan_out));
    int32_t next;
    CHECK(serve_engine_prefill(eng, req, &d, &next));
    if (e) compare_row(m, p, n_prefill - 1, e);
    for (int q = n_prefill; q < nq; q++) {
        CHECK(serve_engine_decode(eng, 1, &req, &question[q], &next));
        if (e) compare_row(m, p, q, e);
    }
    lazyattn_request_destroy(req);
}

/* The prompt from 0 (p->start == 0) under policy, prefill path batched. */
static void run_engine(lazyattn_context *ctx, serve_model *m, const serve_model_config *cfg,
                       const char *name, const rag_prompt *p, lazyattn_cache_policy policy,
                       int batched) {
    assert_int_equal(p->start, 0); /* a request's positions start at 0 */
    lazyattn_pool_config pc;
    serve_model_pool_config(cfg, 1 << 20, &pc);
    lazyattn_pool *pool = NULL;
    lazyattn_cache *cache = NULL;
    serve_engine *eng = NULL;
    CHECK(lazyattn_pool_create(ctx, &pc, &pool));
    lazyattn_cache_config cc;
    lazyattn_cache_config_init(&cc);
    cc.policy = policy, cc.model_id = 36;
    CHECK(lazyattn_cache_create(pool, &cc, &cache));
    CHECK(serve_engine_create(m, pool, &eng));
    serve_engine_use_batched_prefill(eng, batched);

    int nq = p->len[3], n_docs_tokens = p->len[1] + p->len[2];
    const int32_t *ab[2] = {p->seg[1], p->seg[2]}, *ba[2] = {p->seg[2], p->seg[1]};
    int32_t len_ab[2] = {p->len[1], p->len[2]}, len_ba[2] = {p->len[2], p->len[1]};
    int32_t other_q[MAX_Q];
    for (int q = 0; q < nq; q++) other_q[q] = (p->seg[3][nq - 1 - q] + 1) % p->vocab;
    lazyattn_plan plan[3];
    rag_errors e;
    rag_errors_init(&e);
    run_request(eng, m, cache, p, ba, len_ba, other_q, nq, NULL, &plan[0]);
    run_request(eng, m, cache, p, ab, len_ab, p->seg[3], 1, &e, &plan[1]);
    run_request(eng, m, cache, p, ab, len_ab, p->seg[3], nq - 1, &e, &plan[2]);
    char what[96];
    snprintf(what, sizeof what, "%s %s %s", name, lazyattn_cache_policy_name(policy),
             batched ? "batched" : "per segment");
    check_errors(what, &e, nq + 2);
    /* the reuse each policy makes of request 1's and 2's documents */
    int reused2 = plan[1].hit_tokens + plan[1].copy_tokens;
    int reused3 = plan[2].hit_tokens + plan[2].copy_tokens;
    printf("#   reused document tokens: request 2 %d (%d copied), request 3 %d (%d copied)\n",
           reused2, plan[1].copy_tokens, reused3, plan[2].copy_tokens);
    switch (policy) {
    case LAZYATTN_CACHE_POLICY_LAZY:
        assert_int_equal(plan[1].hit_tokens, n_docs_tokens);
        assert_int_equal(plan[2].hit_tokens, n_docs_tokens);
        break;
    case LAZYATTN_CACHE_POLICY_POSITION: /* other starts in request 1: copies */
        assert_int_equal(plan[1].copy_tokens, n_docs_tokens);
        assert_int_equal(plan[2].hit_tokens, n_docs_tokens);
        break;
    case LAZYATTN_CACHE_POLICY_PREFIX: /* another chain in request 1; request 2's in 3 */
        assert_int_equal(reused2, 0);
        assert_int_equal(plan[2].hit_tokens, n_docs_tokens);
        break;
    default:
        assert_int_equal(reused2 + reused3, 0);
    }
    CHECK(lazyattn_cache_validate(cache));
    serve_engine_destroy(eng);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
}

/* The blocks of one segment, token i in block[i / block_size]. */
typedef struct seg_blocks {
    int n_blocks;
    int32_t block[MAX_BLOCKS];
} seg_blocks;

static void alloc_segment(lazyattn_pool *pool, int n, int block_size, seg_blocks *s) {
    s->n_blocks = (n + block_size - 1) / block_size;
    assert_true(s->n_blocks <= MAX_BLOCKS);
    CHECK(lazyattn_pool_alloc(pool, s->n_blocks, s->block));
}

/* Appends to table / entry_pos (n entries so far) the entries of tokens
 * [0, n_valid) of segment s, whose first token's key is stored at
 * stored_start and sits at logical_start; returns the new count. */
static int add_entries(const seg_blocks *s, int n_valid, int block_size, int32_t stored_start,
                       int32_t logical_start, uint64_t *table, int32_t *entry_pos, int n) {
    for (int b = 0; b * block_size < n_valid; b++) {
        int valid = n_valid - b * block_size < block_size ? n_valid - b * block_size : block_size;
        CHECK(lazyattn_entry_pack(s->block[b], logical_start - stored_start, valid, &table[n]));
        entry_pos[n++] = logical_start + b * block_size;
    }
    return n;
}

/* Prefills tokens [a, b) of a segment of n_total tokens into its blocks,
 * queries at q_start + i, keys stored at stored_start + i, over table. */
static void prefill_rows(serve_model *m, lazyattn_pool *pool, const seg_blocks *s,
                         const int32_t *tokens, int a, int b, int block_size, int32_t q_start,
                         int32_t stored_start, int n_entries, const uint64_t *table,
                         const int32_t *entry_pos, int want_logits) {
    int32_t q_pos[MAX_ROWS], stored[MAX_ROWS], slots[MAX_ROWS];
    for (int i = a; i < b; i++) {
        q_pos[i - a] = q_start + i, stored[i - a] = stored_start + i;
        slots[i - a] = s->block[i / block_size] * block_size + i % block_size;
    }
    serve_prefill_args pa = {.n_tokens = b - a, .tokens = tokens + a, .q_pos = q_pos,
                             .slots = slots, .stored_pos = stored, .n_entries = n_entries,
                             .table = table, .entry_pos = entry_pos, .want_logits = want_logits};
    int32_t next;
    CHECK(serve_model_prefill(m, pool, &pa, &next));
}

/* The prompt from p->start through the model with hand-built tables: the
 * documents (B first) each alone at document-local positions, then the
 * prefix, then the first question token in a prefill and the others
 * decoded, over the prefix's, the documents' (delta = logical start) and
 * the question's own entries. */
static void run_by_hand(lazyattn_context *ctx, serve_model *m, const serve_model_config *cfg,
                        const char *name, const rag_prompt *p) {
    int B = cfg->block_size, nq = p->len[3];
    lazyattn_pool_config pc;
    serve_model_pool_config(cfg, 1 << 20, &pc);
    lazyattn_pool *pool = NULL;
    CHECK(lazyattn_pool_create(ctx, &pc, &pool));
    seg_blocks s[N_SEG];
    int32_t logical[N_SEG];
    for (int k = 0, pos = p->start; k < N_SEG; pos += p->len[k++]) {
        alloc_segment(pool, p->len[k], B, &s[k]);
        logical[k] = pos;
    }
    uint64_t table[4 * MAX_BLOCKS];
    int32_t entry_pos[4 * MAX_BLOCKS];
    for (int k = 2; k >= 1; k--) { /* B, then A: each over its own entries only */
        int n = add_entries(&s[k], p->len[k], B, 0, 0, table, entry_pos, 0);
        prefill_rows(m, pool, &s[k], p->seg[k], 0, p->len[k], B, 0, 0, n, table, entry_pos, 0);
    }
    int n = add_entries(&s[0], p->len[0], B, logical[0], logical[0], table, entry_pos, 0);
    prefill_rows(m, pool, &s[0], p->seg[0], 0, p->len[0], B, logical[0], logical[0], n, table,
                 entry_pos, 0);
    for (int k = 1; k <= 2; k++) /* reused at their logical starts */
        n = add_entries(&s[k], p->len[k], B, 0, logical[k], table, entry_pos, n);
    rag_errors e;
    rag_errors_init(&e);
    int n_ctx = add_entries(&s[3], 1, B, logical[3], logical[3], table, entry_pos, n);
    prefill_rows(m, pool, &s[3], p->seg[3], 0, 1, B, logical[3], logical[3], n_ctx, table,
                 entry_pos, 1);
    compare_row(m, p, 0, &e);
    for (int q = 1; q < nq; q++) {
        n_ctx = add_entries(&s[3], q + 1, B, logical[3], logical[3], table, entry_pos, n);
        int32_t pos = logical[3] + q;
        int32_t slot = s[3].block[q / B] * B + q % B, offsets[2] = {0, n_ctx}, next;
        serve_decode_args da = {1, &p->seg[3][q], &pos, &slot, &pos, offsets, table,
                                entry_pos, n_ctx, NULL};
        CHECK(serve_model_decode(m, pool, &da, &next));
        compare_row(m, p, q, &e);
    }
    char what[96];
    snprintf(what, sizeof what, "%s from %d, documents at 0..L-1", name, p->start);
    check_errors(what, &e, nq);
    for (int k = 0; k < N_SEG; k++) CHECK(lazyattn_pool_free(pool, s[k].n_blocks, s[k].block));
    lazyattn_pool_destroy(pool);
}

static void test_rag_fixtures(void **state) {
    (void)state;
    lazyattn_context *ctx = NULL;
    if (lazyattn_context_create(NULL, &ctx) != 0) skip();
    static const char *const names[] = {"llama3_rope_freqs", "q8_0"};
    static const lazyattn_cache_policy policies[] = {
        LAZYATTN_CACHE_POLICY_LAZY, LAZYATTN_CACHE_POLICY_POSITION,
        LAZYATTN_CACHE_POLICY_PREFIX, LAZYATTN_CACHE_POLICY_NONE};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        rag_fixture x;
        read_rag(names[i], &x);
        assert_int_equal(x.n, 2);
        serve_model_config cfg;
        serve_model *m = load_model(ctx, names[i], &cfg);
        assert_int_equal(x.p[0].vocab, cfg.vocab);
        assert_true(x.p[1].start > 8192); /* past Llama-3's original context */
        for (size_t k = 0; k < sizeof policies / sizeof policies[0]; k++)
            for (int batched = 1; batched >= 0; batched--)
                run_engine(ctx, m, &cfg, names[i], &x.p[0], policies[k], batched);
        for (int j = 0; j < x.n; j++) run_by_hand(ctx, m, &cfg, names[i], &x.p[j]);
        serve_model_destroy(m);
        free_rag(&x);
    }
    lazyattn_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rag_fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
