/* SPDX-License-Identifier: Apache-2.0 */
/* Equivalence of every cache policy with the float64 reference: random
 * requests over a small document set, each run through its policy's plan
 * (write_kv of what the plan prefills at its stored positions, materialise
 * of its copies, rope of the question, prefill over the plan's table) and
 * compared with eager attention over the whole prompt at absolute
 * positions. Reuses the (d = 64, B = 16, f32) program of test_attention. */
#include "test_common.h"

#include <stdlib.h>
#include <string.h>

#define N_DOCS 5
#define NKV 2
#define NQH 4
#define D 64
#define ROW (NKV * D)

typedef struct docset {
    int len[N_DOCS];
    int32_t tok[N_DOCS][48];
    float *k[N_DOCS], *v[N_DOCS]; /* [len, NKV, D], depend on the document only */
} docset;

static void run_policy(lazyattn_context *ctx, lazyattn_cache_policy policy, lt_rng *r,
                       const docset *ds, double *worst) {
    lazyattn_attention_config c;
    lazyattn_attention_config_default(&c);
    c.n_q_heads = NQH;
    c.n_kv_heads = NKV;
    c.head_dim = D;
    c.block_size = 16;
    c.dtype = LAZYATTN_DTYPE_F32;
    c.rope.theta = 10000.0;
    c.rope.llama3_factor = 0;
    lazyattn_pool_config pc = {1, NKV, D, 16, LAZYATTN_DTYPE_F32, (uint64_t)48 * 2 * ROW * 16 * 4,
                               LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *pool;
    lazyattn_attention *attn;
    lazyattn_cache *cache;
    lazyattn_cache_config cc = {policy, 7, 0};
    lt_assert_status(lazyattn_pool_create(ctx, &pc, &pool), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_create(pool, &cc, &cache), LAZYATTN_STATUS_OK);
    static const int orders[5][3] = {{0, 1, 2}, {0, 1, 2}, {2, 0, 1}, {0, 1, 3}, {4, 2, 0}};
    for (int req_i = 0; req_i < 5; req_i++) {
        int n_docs = 3, np = req_i % 2 ? 3 : 0, nq = lt_int(r, 1, 6);
        const int32_t *docs[3];
        int32_t lens[3];
        for (int i = 0; i < n_docs; i++) {
            docs[i] = ds->tok[orders[req_i][i]];
            lens[i] = ds->len[orders[req_i][i]];
        }
        int32_t prefix[3] = {1, 2, 3}, question[6] = {4, 5, 6, 7, 8, 9};
        lazyattn_request_desc d = {np, prefix, n_docs, docs, lens, nq, question, 0};
        lazyattn_request *req;
        lt_assert_status(lazyattn_request_create(cache, &d, &req), LAZYATTN_STATUS_OK);
        lazyattn_plan p;
        lazyattn_request_get_plan(req, &p);
        /* The whole prompt's K/V by logical position (unrotated). */
        int n_pos = p.n_positions;
        float *k = malloc(sizeof(float) * n_pos * ROW), *v = malloc(sizeof(float) * n_pos * ROW);
        int32_t *kpos = malloc(sizeof(int32_t) * n_pos);
        lt_fill(r, k, (size_t)n_pos * ROW, 1.0f); /* prefix and question: fresh */
        lt_fill(r, v, (size_t)n_pos * ROW, 1.0f);
        for (int s = 0; s < p.n_segments; s++) {
            const lazyattn_segment *seg = &p.segments[s];
            if (seg->kind != LAZYATTN_SEGMENT_DOCUMENT) continue;
            int id = orders[req_i][seg->doc_index];
            memcpy(k + (size_t)seg->logical_start * ROW, ds->k[id], sizeof(float) * seg->n_tokens * ROW);
            memcpy(v + (size_t)seg->logical_start * ROW, ds->v[id], sizeof(float) * seg->n_tokens * ROW);
        }
        for (int t = 0; t < n_pos; t++) kpos[t] = t;
        /* What the plan prefills, at its slots and stored positions. */
        if (p.n_prefill) {
            float *pk = malloc(sizeof(float) * p.n_prefill * ROW), *pv = malloc(sizeof(float) * p.n_prefill * ROW);
            for (int i = 0; i < p.n_prefill; i++) {
                memcpy(pk + (size_t)i * ROW, k + (size_t)p.prefill_pos[i] * ROW, sizeof(float) * ROW);
                memcpy(pv + (size_t)i * ROW, v + (size_t)p.prefill_pos[i] * ROW, sizeof(float) * ROW);
            }
            cl_mem km = lt_buffer(ctx, pk, sizeof(float) * p.n_prefill * ROW);
            cl_mem vm = lt_buffer(ctx, pv, sizeof(float) * p.n_prefill * ROW);
            cl_mem sm = lt_buffer(ctx, p.prefill_slots, sizeof(int32_t) * p.n_prefill);
            cl_mem stm = lt_buffer(ctx, p.prefill_stored_pos, sizeof(int32_t) * p.n_prefill);
            lt_assert_status(lazyattn_write_kv(attn, pool, 0, p.n_prefill, km, vm, sm, stm, NULL, NULL),
                             LAZYATTN_STATUS_OK);
            clReleaseMemObject(km); clReleaseMemObject(vm); clReleaseMemObject(sm); clReleaseMemObject(stm);
            free(pk);
            free(pv);
        }
        if (p.n_copies) {
            cl_mem src = lt_buffer(ctx, p.copy_src, sizeof(uint64_t) * p.n_copies);
            cl_mem dst = lt_buffer(ctx, p.copy_dst, sizeof(int32_t) * p.n_copies);
            lt_assert_status(lazyattn_materialise(attn, pool, 0, p.n_copies, src, dst, NULL, NULL),
                             LAZYATTN_STATUS_OK);
            clReleaseMemObject(src); clReleaseMemObject(dst);
        }
        lt_assert_status(lazyattn_request_commit(req), LAZYATTN_STATUS_OK);
        lazyattn_request_get_plan(req, &p);
        /* Queries: the question tokens. */
        size_t qn = (size_t)nq * NQH * D;
        float *q = malloc(sizeof(float) * qn), *out = malloc(sizeof(float) * qn);
        double *ref = malloc(sizeof(double) * qn);
        int32_t qpos[6];
        for (int t = 0; t < nq; t++) qpos[t] = n_pos - nq + t;
        lt_fill(r, q, qn, 2.0f);
        cl_mem qm = lt_buffer(ctx, q, sizeof(float) * qn), qpm = lt_buffer(ctx, qpos, sizeof(int32_t) * nq);
        cl_mem tm = lt_buffer(ctx, p.table, sizeof(uint64_t) * p.n_entries);
        cl_mem epm = lt_buffer(ctx, p.entry_pos, sizeof(int32_t) * p.n_entries);
        cl_mem om = lt_buffer(ctx, NULL, sizeof(float) * qn);
        lt_assert_status(lazyattn_rope_apply(attn, nq, NQH, qm, qpm, NULL, NULL), LAZYATTN_STATUS_OK);
        lazyattn_prefill_args a = {nq, p.n_entries, qm, qpm, tm, epm, om,
                                   NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
        lt_assert_status(lazyattn_prefill(attn, pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
        lt_read(ctx, om, out, sizeof(float) * qn);
        clReleaseMemObject(qm); clReleaseMemObject(qpm); clReleaseMemObject(tm);
        clReleaseMemObject(epm); clReleaseMemObject(om);
        lazyattn_reference_args ra = {nq, n_pos, q, qpos, k, v, kpos, ref, NULL};
        lt_assert_status(lazyattn_reference_attention(&c, &ra), LAZYATTN_STATUS_OK);
        double err = lazyattn_normalised_error(out, ref, qn);
        if (err > *worst) *worst = err;
        if (err > 2e-5)
            print_error("%s request %d: normalised error %.3g\n",
                        lazyattn_cache_policy_name(policy), req_i, err);
        assert_true(err <= 2e-5);
        lazyattn_request_destroy(req);
        free(k); free(v); free(kpos); free(q); free(out); free(ref);
    }
    lazyattn_cache_stats s;
    lazyattn_cache_get_stats(cache, &s);
    print_message("%-8s hits %lld copies %lld misses %lld partial %lld\n",
                  lazyattn_cache_policy_name(policy), (long long)s.hits, (long long)s.copy_hits,
                  (long long)s.misses, (long long)s.partial_hits);
    if (policy == LAZYATTN_CACHE_POLICY_LAZY) assert_true(s.hits >= 6);
    if (policy == LAZYATTN_CACHE_POLICY_POSITION) assert_true(s.copy_hits >= 1 && s.hits >= 1);
    lazyattn_cache_destroy(cache);
    lazyattn_attention_destroy(attn);
    lazyattn_pool_destroy(pool);
}

static void test_policies_match_reference(void **state) {
    lazyattn_context *ctx = *state;
    lt_rng r = {lt_seed()};
    docset ds;
    for (int i = 0; i < N_DOCS; i++) {
        ds.len[i] = lt_int(&r, 5, 40);
        for (int t = 0; t < ds.len[i]; t++) ds.tok[i][t] = 100 * i + t;
        ds.k[i] = malloc(sizeof(float) * ds.len[i] * ROW);
        ds.v[i] = malloc(sizeof(float) * ds.len[i] * ROW);
        lt_fill(&r, ds.k[i], (size_t)ds.len[i] * ROW, 1.0f);
        lt_fill(&r, ds.v[i], (size_t)ds.len[i] * ROW, 1.0f);
    }
    double worst = 0;
    for (int p = 0; p < 4; p++) run_policy(ctx, (lazyattn_cache_policy)p, &r, &ds, &worst);
    print_message("worst normalised error %.3g\n", worst);
    for (int i = 0; i < N_DOCS; i++) {
        free(ds.k[i]);
        free(ds.v[i]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_policies_match_reference)};
    return cmocka_run_group_tests_name("cache_attention", tests, lt_context_setup,
                                       lt_context_teardown);
}
