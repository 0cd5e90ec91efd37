/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache_path: the document cache end to end, as a serving engine uses it.
 * The engine brings the model (here: fixed random K/V per document, random
 * queries); lazyattn plans each request, stores what the plan prefills,
 * attends over the plan's table and decodes a token.
 *
 *   request 1: [doc A][doc B][question]   both documents computed, committed
 *   request 2: [doc B][doc A][question]   both served from the cache
 *   export A, import it into a second cache and pool (another process or
 *   machine could do the same), request 3: [doc A][question] there
 *
 * Every answer (the question's prefill and one decoded token) is checked
 * against the float64 reference over the whole prompt at absolute
 * positions. The documents a plan computes are prefilled in one launch
 * (lazyattn_prefill_batched), each over its own entries of the plan's
 * table, so each is encoded in isolation: checked against the reference of
 * the document alone at positions 0... One layer; an engine repeats the K/V
 * writes and attention per layer. Build and run: ninja -C build &&
 * ./build/examples/cache_path
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "lazyattn.h"
#include "lazyattn_testing.h" /* the float64 reference */

enum { H = 32, KV = 8, D = 128, ROW = KV * D, Q = 5, MAX_POS = 256 };

#define CHECK(call)                                                                        \
    do {                                                                                   \
        int st_ = (call);                                                                  \
        if (st_) {                                                                         \
            fprintf(stderr, "%s: %s (%s)\n", #call, lazyattn_status_string(st_),           \
                    lazyattn_last_error());                                                \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

static void fill(unsigned long long seed, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((seed >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
    }
}

static cl_mem buffer(lazyattn_context *ctx, const void *data, size_t bytes) {
    return clCreateBuffer(lazyattn_context_cl_context(ctx),
                          CL_MEM_READ_WRITE | (data ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                          (void *)data, NULL);
}

/* The engine's side: documents (tokens, and the K/V its model computes for
 * them, the same wherever the document sits), the context and kernels. */
typedef struct engine {
    lazyattn_context *ctx;
    lazyattn_attention_config cfg;
    lazyattn_attention *attn;
} engine;

typedef struct document {
    const char *name;
    int len;
    int32_t tokens[64];
    float k[64 * ROW], v[64 * ROW]; /* unrotated, as the model's projections give them */
} document;

static document docs[2];

/* Writes K/V rows (by logical position in k, v) to the plan's slots. */
static int write_rows(engine *e, lazyattn_pool *pool, int n, const int32_t *slots,
                      const int32_t *stored, const int32_t *logical, const float *k,
                      const float *v) {
    if (n == 0) return 0;
    float *pk = malloc(sizeof(float) * n * ROW), *pv = malloc(sizeof(float) * n * ROW);
    if (!pk || !pv) return 1;
    for (int i = 0; i < n; i++) {
        memcpy(pk + (size_t)i * ROW, k + (size_t)logical[i] * ROW, sizeof(float) * ROW);
        memcpy(pv + (size_t)i * ROW, v + (size_t)logical[i] * ROW, sizeof(float) * ROW);
    }
    cl_mem km = buffer(e->ctx, pk, sizeof(float) * n * ROW), vm = buffer(e->ctx, pv, sizeof(float) * n * ROW);
    cl_mem sm = buffer(e->ctx, slots, 4 * (size_t)n), pm = buffer(e->ctx, stored, 4 * (size_t)n);
    CHECK(lazyattn_write_kv(e->attn, pool, 0, n, km, vm, sm, pm, NULL, NULL));
    clReleaseMemObject(km), clReleaseMemObject(vm), clReleaseMemObject(sm), clReleaseMemObject(pm);
    free(pk), free(pv);
    return 0;
}

/* The attention of every document the plan computes, in one launch: each
 * missed document is a sequence of its own (its tokens' queries at their
 * logical positions, plan.prefill_pos) over its own entries of the plan's
 * table, copied as they are into one table (no repacking: the entries keep
 * their deltas). Its queries see only its keys, so the output is the
 * document's encoding in isolation, the same wherever it sits: checked
 * against the reference of the document alone at positions 0 .. len-1.
 * *n_docs receives the number of documents prefilled, *error the worst
 * normalised error. */
static int prefill_missed_documents(engine *e, lazyattn_pool *pool, const lazyattn_plan *p,
                                    const int *order, int *n_docs, double *error) {
    enum { MAX_DOCS = 2 };
    int32_t q_indptr[MAX_DOCS + 1] = {0}, t_indptr[MAX_DOCS + 1] = {0};
    int which[MAX_DOCS], n = 0, max_q = 1;
    for (int s = 0; s < p->n_segments && n < MAX_DOCS; s++) {
        const lazyattn_segment *g = &p->segments[s];
        if (g->kind != LAZYATTN_SEGMENT_DOCUMENT || g->action != LAZYATTN_ACTION_PREFILL) continue;
        which[n] = s;
        q_indptr[n + 1] = q_indptr[n] + g->n_tokens;
        t_indptr[n + 1] = t_indptr[n] + g->n_entries;
        if (g->n_tokens > max_q) max_q = g->n_tokens;
        n++;
    }
    *n_docs = n, *error = 0;
    if (n == 0) return 0;
    const int rows = q_indptr[n], entries = t_indptr[n];
    float *q = malloc(sizeof(float) * rows * H * D), *out = malloc(sizeof(float) * rows * H * D);
    double *ref = malloc(sizeof(double) * max_q * H * D);
    int32_t *q_pos = malloc(sizeof(int32_t) * rows), *entry_pos = malloc(sizeof(int32_t) * entries);
    uint64_t *table = malloc(sizeof(uint64_t) * entries);
    if (!q || !out || !ref || !q_pos || !entry_pos || !table) return 1;
    for (int i = 0; i < n; i++) {
        const lazyattn_segment *g = &p->segments[which[i]];
        const int doc = order[g->doc_index];
        /* the model's queries of the document's tokens: the same wherever it sits */
        fill(300 + (unsigned long long)doc, q + (size_t)q_indptr[i] * H * D, (size_t)g->n_tokens * H * D);
        memcpy(q_pos + q_indptr[i], p->prefill_pos + g->prefill_offset, sizeof(int32_t) * g->n_tokens);
        memcpy(table + t_indptr[i], p->table + g->first_entry, sizeof(uint64_t) * g->n_entries);
        memcpy(entry_pos + t_indptr[i], p->entry_pos + g->first_entry, sizeof(int32_t) * g->n_entries);
    }
    cl_mem qm = buffer(e->ctx, q, sizeof(float) * rows * H * D), qp = buffer(e->ctx, q_pos, 4 * (size_t)rows);
    cl_mem qi = buffer(e->ctx, q_indptr, 4 * (size_t)(n + 1)), ti = buffer(e->ctx, t_indptr, 4 * (size_t)(n + 1));
    cl_mem tm = buffer(e->ctx, table, 8 * (size_t)entries), em = buffer(e->ctx, entry_pos, 4 * (size_t)entries);
    cl_mem om = buffer(e->ctx, NULL, sizeof(float) * rows * H * D);
    CHECK(lazyattn_rope_apply(e->attn, rows, H, qm, qp, NULL, NULL));
    lazyattn_prefill_batch_args ba;
    lazyattn_prefill_batch_args_init(&ba);
    ba.n_seqs = n, ba.n_queries = rows, ba.n_entries = entries, ba.max_queries = max_q;
    ba.q = qm, ba.q_pos = qp, ba.q_indptr = qi, ba.table_indptr = ti, ba.table = tm;
    ba.entry_pos = em, ba.out = om;
    CHECK(lazyattn_prefill_batched(e->attn, pool, 0, &ba, NULL, NULL));
    CHECK(clEnqueueReadBuffer(lazyattn_context_queue(e->ctx), om, CL_TRUE, 0,
                              sizeof(float) * rows * H * D, out, 0, NULL, NULL));
    CHECK(lazyattn_attention_check(e->attn, NULL));
    for (int i = 0; i < n; i++) {
        const document *d = &docs[order[p->segments[which[i]].doc_index]];
        int32_t local[64];
        for (int t = 0; t < d->len; t++) local[t] = t;
        lazyattn_reference_args ra;
        lazyattn_reference_args_init(&ra);
        ra.n_queries = d->len, ra.n_keys = d->len, ra.q = q + (size_t)q_indptr[i] * H * D;
        ra.q_pos = local, ra.k = d->k, ra.v = d->v, ra.k_pos = local, ra.out = ref;
        CHECK(lazyattn_reference_attention(&e->cfg, &ra));
        double err = lazyattn_normalised_error(out + (size_t)q_indptr[i] * H * D, ref,
                                               (size_t)d->len * H * D);
        if (err > *error) *error = err;
    }
    cl_mem m[] = {qm, qp, qi, ti, tm, em, om};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++) clReleaseMemObject(m[i]);
    free(q), free(out), free(ref), free(q_pos), free(entry_pos), free(table);
    return 0;
}

/* Runs [docs in order][question] + one decoded token through the cache;
 * returns the worst normalised error of the two answers in *error. */
static int serve(engine *e, lazyattn_pool *pool, lazyattn_cache *cache, const int *order,
                 int n_docs, unsigned long long seed, double *error) {
    const int32_t *tok[2];
    int32_t lens[2];
    for (int i = 0; i < n_docs; i++) tok[i] = docs[order[i]].tokens, lens[i] = docs[order[i]].len;
    int32_t question[Q] = {7, 8, 9, 10, 11};
    lazyattn_request_desc desc;
    lazyattn_request_desc_init(&desc);
    desc.n_docs = n_docs, desc.docs = tok, desc.doc_lengths = lens;
    desc.n_question = Q, desc.question = question, desc.max_new_tokens = 1;

    /* 1. Ask first (no side effects): what would be reused? */
    lazyattn_probe_segment probe[4];
    lazyattn_probe_summary sum;
    CHECK(lazyattn_cache_probe(cache, &desc, probe, 4, &sum));
    for (int i = 0; i < n_docs; i++)
        printf("  probe: doc %s %s, %d of %d tokens cached\n", docs[order[i]].name,
               probe[i].action == LAZYATTN_ACTION_REUSE ? "reuse" : "compute", probe[i].n_cached,
               probe[i].n_tokens);

    /* 2. Plan: pins what is reused, allocates the rest. */
    lazyattn_request *req;
    CHECK(lazyattn_request_create(cache, &desc, &req));
    lazyattn_plan p;
    CHECK(lazyattn_request_get_plan(req, &p));

    /* The whole prompt's K/V by logical position (the reference's view);
     * the model computes the question's and the generated token's. */
    static float k[MAX_POS * ROW], v[MAX_POS * ROW];
    int n_pos = p.n_positions;
    for (int s = 0; s < p.n_segments; s++)
        if (p.segments[s].kind == LAZYATTN_SEGMENT_DOCUMENT) {
            const document *d = &docs[order[p.segments[s].doc_index]];
            memcpy(k + (size_t)p.segments[s].logical_start * ROW, d->k, sizeof(float) * d->len * ROW);
            memcpy(v + (size_t)p.segments[s].logical_start * ROW, d->v, sizeof(float) * d->len * ROW);
        }
    fill(seed, k + (size_t)(n_pos - Q) * ROW, (size_t)(Q + 1) * ROW);
    fill(seed + 1, v + (size_t)(n_pos - Q) * ROW, (size_t)(Q + 1) * ROW);

    /* 3. Store what the plan prefills (missed documents at their stored
     * positions, the question at its own), then publish the documents. */
    if (write_rows(e, pool, p.n_prefill, p.prefill_slots, p.prefill_stored_pos, p.prefill_pos, k, v))
        return 1;
    printf("  plan: %d tokens to prefill, %d document tokens reused\n", p.n_prefill, p.hit_tokens);
    int n_missed;
    double err_docs;
    if (prefill_missed_documents(e, pool, &p, order, &n_missed, &err_docs)) return 1;
    if (n_missed)
        printf("  %d missed document(s) prefilled in one batched launch, each in isolation: "
               "error %.2e\n", n_missed, err_docs);
    CHECK(lazyattn_request_commit(req));

    /* 4. Attention of the question over the plan's table. */
    static float q[(Q + 1) * H * D], out[Q * H * D];
    static double ref[Q * H * D];
    int32_t q_pos[Q + 1], k_pos[MAX_POS];
    fill(seed + 2, q, sizeof q / sizeof q[0]);
    for (int i = 0; i < Q + 1; i++) q_pos[i] = n_pos - Q + i;
    for (int i = 0; i < MAX_POS; i++) k_pos[i] = i;
    cl_mem qm = buffer(e->ctx, q, sizeof(float) * Q * H * D), qp = buffer(e->ctx, q_pos, 4 * Q);
    cl_mem tm = buffer(e->ctx, p.table, 8 * (size_t)p.n_entries);
    cl_mem em = buffer(e->ctx, p.entry_pos, 4 * (size_t)p.n_entries);
    cl_mem om = buffer(e->ctx, NULL, sizeof out);
    CHECK(lazyattn_rope_apply(e->attn, Q, H, qm, qp, NULL, NULL));
    lazyattn_prefill_args pa;
    lazyattn_prefill_args_init(&pa);
    pa.n_queries = Q, pa.n_entries = p.n_entries, pa.q = qm, pa.q_pos = qp;
    pa.table = tm, pa.entry_pos = em, pa.out = om;
    CHECK(lazyattn_prefill(e->attn, pool, 0, &pa, NULL, NULL));
    CHECK(clEnqueueReadBuffer(lazyattn_context_queue(e->ctx), om, CL_TRUE, 0, sizeof out, out, 0,
                              NULL, NULL));
    CHECK(lazyattn_attention_check(e->attn, NULL));
    lazyattn_reference_args ra;
    lazyattn_reference_args_init(&ra);
    ra.n_queries = Q, ra.n_keys = n_pos, ra.q = q, ra.q_pos = q_pos, ra.k = k, ra.v = v;
    ra.k_pos = k_pos, ra.out = ref;
    CHECK(lazyattn_reference_attention(&e->cfg, &ra));
    double err_prefill = lazyattn_normalised_error(out, ref, (size_t)Q * H * D);
    clReleaseMemObject(qm), clReleaseMemObject(qp), clReleaseMemObject(tm), clReleaseMemObject(em);
    clReleaseMemObject(om);

    /* 5. One generated token: a slot in the request's own blocks, its K/V,
     * decode over the grown table. */
    int32_t slot, pos;
    CHECK(lazyattn_request_append(req, 1, &slot, &pos));
    if (write_rows(e, pool, 1, &slot, &pos, &pos, k, v)) return 1;
    CHECK(lazyattn_request_get_plan(req, &p));
    const float *q1 = q + (size_t)Q * H * D;
    int32_t offsets[2] = {0, p.n_entries};
    qm = buffer(e->ctx, q1, sizeof(float) * H * D), qp = buffer(e->ctx, &pos, 4);
    cl_mem so = buffer(e->ctx, offsets, sizeof offsets);
    tm = buffer(e->ctx, p.table, 8 * (size_t)p.n_entries);
    em = buffer(e->ctx, p.entry_pos, 4 * (size_t)p.n_entries);
    om = buffer(e->ctx, NULL, sizeof(float) * H * D);
    CHECK(lazyattn_rope_apply(e->attn, 1, H, qm, qp, NULL, NULL));
    lazyattn_decode_args da;
    lazyattn_decode_args_init(&da);
    da.n_seqs = 1, da.max_entries = p.n_entries, da.q = qm, da.q_pos = qp, da.seq_offsets = so;
    da.table = tm, da.entry_pos = em, da.out = om;
    CHECK(lazyattn_decode(e->attn, pool, 0, &da, NULL, NULL));
    CHECK(clEnqueueReadBuffer(lazyattn_context_queue(e->ctx), om, CL_TRUE, 0,
                              sizeof(float) * H * D, out, 0, NULL, NULL));
    CHECK(lazyattn_attention_check(e->attn, NULL));
    ra.n_queries = 1, ra.n_keys = n_pos + 1, ra.q = q1, ra.q_pos = &pos;
    CHECK(lazyattn_reference_attention(&e->cfg, &ra));
    double err_decode = lazyattn_normalised_error(out, ref, (size_t)H * D);
    clReleaseMemObject(qm), clReleaseMemObject(qp), clReleaseMemObject(so);
    clReleaseMemObject(tm), clReleaseMemObject(em), clReleaseMemObject(om);

    lazyattn_request_destroy(req); /* unpins the documents; they stay cached */
    printf("  normalised error vs float64 reference: question %.2e, decoded token %.2e\n",
           err_prefill, err_decode);
    *error = err_prefill > err_decode ? err_prefill : err_decode;
    if (err_docs > *error) *error = err_docs;
    return 0;
}

static const char usage_text[] =
    "usage: cache_path\n"
    "The document cache end to end on the default OpenCL device: probe, plan, commit,\n"
    "prefill and one decoded token, export/import into a second cache, each answer checked\n"
    "against the float64 reference. No options. Exit status: 0 all within tolerance, 1 a\n"
    "failure or a wrong answer, 2 a bad command line.\n";

int main(int argc, char **argv) {
    int r = cli_parse("cache_path", usage_text, NULL, 0, argc, argv);
    if (r) return r == CLI_HELP ? 0 : 2;
    engine e;
    CHECK(lazyattn_context_create(NULL, &e.ctx));
    printf("lazyattn %s on %s\n", lazyattn_version_string(), lazyattn_context_device_name(e.ctx));
    lazyattn_attention_config_init(&e.cfg); /* Llama-3.1-8B heads, fp16 KV, Llama-3 RoPE */
    CHECK(lazyattn_attention_create(e.ctx, &e.cfg, &e.attn));
    lazyattn_pool_config pc;
    lazyattn_pool_config_init(&pc);
    pc.n_layers = 1; /* one layer here */
    pc.budget_bytes = 32ull << 20;
    lazyattn_cache_config cc;
    lazyattn_cache_config_init(&cc);
    cc.model_id = 0x11A3A31ull; /* name the weights: keys and exports carry it */
    lazyattn_pool *pool, *pool2;
    lazyattn_cache *cache, *cache2;
    CHECK(lazyattn_pool_create(e.ctx, &pc, &pool));
    CHECK(lazyattn_cache_create(pool, &cc, &cache));

    const char *names[2] = {"A", "B"};
    const int lens[2] = {53, 37};
    for (int d = 0; d < 2; d++) {
        docs[d].name = names[d];
        docs[d].len = lens[d];
        for (int t = 0; t < lens[d]; t++) docs[d].tokens[t] = 1000 * (d + 1) + t;
        fill(100 + d, docs[d].k, (size_t)lens[d] * ROW);
        fill(200 + d, docs[d].v, (size_t)lens[d] * ROW);
    }
    double worst = 0, err;
    const int ab[] = {0, 1}, ba[] = {1, 0};
    printf("request 1: [A][B][question]\n");
    if (serve(&e, pool, cache, ab, 2, 1, &err)) return 1;
    worst = err > worst ? err : worst;
    printf("request 2: [B][A][question]\n");
    if (serve(&e, pool, cache, ba, 2, 2, &err)) return 1;
    worst = err > worst ? err : worst;

    /* Export A, import it into another cache and pool. */
    uint64_t hash;
    size_t bytes, written;
    CHECK(lazyattn_doc_hash(cc.model_id, docs[0].tokens, docs[0].len, &hash));
    CHECK(lazyattn_cache_export_size(cache, hash, &bytes));
    void *blob = malloc(bytes);
    if (!blob) return 1;
    CHECK(lazyattn_cache_export(cache, hash, blob, bytes, &written));
    CHECK(lazyattn_pool_create(e.ctx, &pc, &pool2));
    CHECK(lazyattn_cache_create(pool2, &cc, &cache2));
    CHECK(lazyattn_cache_import(cache2, blob, written, NULL));
    printf("exported doc A (%zu bytes), imported into a second cache\n", written);
    printf("request 3 (second cache): [A][question]\n");
    if (serve(&e, pool2, cache2, ab, 1, 3, &err)) return 1;
    worst = err > worst ? err : worst;
    free(blob);

    lazyattn_cache_stats s;
    CHECK(lazyattn_cache_get_stats(cache, &s));
    printf("first cache: %lld lookups, %lld hits, %lld misses\n", (long long)s.lookups,
           (long long)s.hits, (long long)s.misses);
    int ok = worst < 2e-3 && s.hits == 2 && s.misses == 2;
    printf("max error %.2e (fp16 KV tolerance 2e-3): %s\n", worst, ok ? "ok" : "FAILED");
    lazyattn_cache_destroy(cache2);
    lazyattn_pool_destroy(pool2);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
    lazyattn_attention_destroy(e.attn);
    lazyattn_context_destroy(e.ctx);
    return ok ? 0 : 1;
}
