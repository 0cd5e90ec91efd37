/* SPDX-License-Identifier: Apache-2.0 */
/* The shared document engine of the export and tier tests (doc_engine.h). */
#include "doc_engine.h"

#include <fenv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

const int doc_len[N_DOCS] = {37, 16, 9, 23, 38, 38};

// ---- the old document hash, and a collision under it ----

/* lib/hash.c before BLAKE2b: splitmix64's finaliser, two tokens per step. */
static uint64_t old_mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

/* The state after n tokens (n even), from the seed's state. */
static uint64_t old_state(uint64_t model_id, const int32_t *tokens, int n) {
    uint64_t h = old_mix(model_id ^ 0x6A09E667F3BCC909ull);
    for (int i = 0; i + 1 < n; i += 2) {
        uint64_t w = (uint64_t)(uint32_t)tokens[i] | ((uint64_t)(uint32_t)tokens[i + 1] << 32);
        h = old_mix(h ^ w) + 0x9E3779B97F4A7C15ull;
    }
    return h;
}

uint64_t old_doc_hash(uint64_t model_id, const int32_t *tokens, int n) {
    uint64_t h = old_state(model_id, tokens, n & ~1);
    if (n & 1) h = old_mix(h ^ (uint64_t)(uint32_t)tokens[n - 1]) + 0x9E3779B97F4A7C15ull;
    return old_mix(h ^ ((uint64_t)(uint32_t)n * 0xD6E8FEB86659FD93ull));
}

/* x ^= x >> s undone. */
static uint64_t unshift(uint64_t y, int s) {
    uint64_t x = y;
    for (int i = 0; i < 64 / s + 1; i++) x = y ^ (x >> s);
    return x;
}

/* The inverse of an odd number mod 2^64 (Newton's iteration). */
static uint64_t inverse(uint64_t a) {
    uint64_t x = a;
    for (int i = 0; i < 6; i++) x *= 2 - a * x;
    return x;
}

static uint64_t old_unmix(uint64_t x) {
    x = unshift(x, 31);
    x *= inverse(0x94D049BB133111EBull);
    x = unshift(x, 27);
    x *= inverse(0xBF58476D1CE4E5B9ull);
    return unshift(x, 30);
}

/* Document 4: 38 tokens. Document 5: other first 36 tokens, then the two
 * whose word takes the old hash's state to document 4's (the step inverted),
 * so both end in the same state and have the same length: the same old
 * hash. Tried prefixes until both solved tokens are non-negative. */
static void collision_pair(int32_t a[38], int32_t b[38]) {
    for (int t = 0; t < 38; t++) a[t] = 5000 + 7 * t;
    for (uint32_t salt = 0;; salt++) {
        for (int t = 0; t < 36; t++) b[t] = 6000 + 11 * t + (int32_t)(salt * 38 + (uint32_t)t) % 97;
        uint64_t want = old_state(MODEL, a, 38), have = old_state(MODEL, b, 36);
        uint64_t w = old_unmix(want - 0x9E3779B97F4A7C15ull) ^ have;
        b[36] = (int32_t)(uint32_t)w;
        b[37] = (int32_t)(uint32_t)(w >> 32);
        if (b[36] >= 0 && b[37] >= 0) return;
    }
}

void doc_tokens(int id, int32_t *tok) {
    if (id >= 4) {
        int32_t pair[2][38];
        collision_pair(pair[0], pair[1]);
        memcpy(tok, pair[id - 4], sizeof pair[0]);
        return;
    }
    for (int t = 0; t < doc_len[id]; t++) tok[t] = 1000 * (id + 1) + 3 * t;
}

/* K/V of a document depend on the document and the layer only; fixed seeds
 * so that a second process computes the same. */
void doc_kv(int id, int layer, float *k, float *v) {
    lt_rng r = {0xD0C0000ull + 16u * (uint64_t)id + (uint64_t)layer};
    lt_fill(&r, k, (size_t)doc_len[id] * ROW, 1.0f);
    lt_fill(&r, v, (size_t)doc_len[id] * ROW, 1.0f);
}

void engine_open_layout(engine *e, lazyattn_context *ctx, int n_blocks, uint64_t model,
                        int block_size, lazyattn_dtype dtype, lazyattn_kv_layout layout) {
    memset(e, 0, sizeof *e);
    e->ctx = ctx;
    e->block_size = block_size;
    e->dtype = dtype;
    lazyattn_attention_config_default(&e->c);
    e->c.n_q_heads = NQH;
    e->c.n_kv_heads = NKV;
    e->c.head_dim = D;
    e->c.block_size = block_size;
    e->c.dtype = dtype;
    e->c.rope.theta = 10000.0;
    e->c.rope.llama3_factor = 0;
    e->c.kv_layout = layout;
    lazyattn_pool_config pc = {L, NKV, D, block_size, dtype,
                               (uint64_t)n_blocks * 2 * L * block_size * ROW *
                                   lazyattn_dtype_size(dtype), layout};
    lazyattn_cache_config cc;
    lazyattn_cache_config_init(&cc);
    cc.model_id = model;
    lt_assert_status(lazyattn_pool_create(ctx, &pc, &e->pool), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_attention_create(ctx, &e->c, &e->attn), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_create(e->pool, &cc, &e->cache), LAZYATTN_STATUS_OK);
}

void engine_open_as(engine *e, lazyattn_context *ctx, int n_blocks, uint64_t model,
                    int block_size, lazyattn_dtype dtype) {
    engine_open_layout(e, ctx, n_blocks, model, block_size, dtype, LAZYATTN_KV_LAYOUT_ROWS);
}

void engine_open(engine *e, lazyattn_context *ctx, int n_blocks, uint64_t model) {
    engine_open_as(e, ctx, n_blocks, model, B, LAZYATTN_DTYPE_F32);
}

void engine_close(engine *e) {
    lazyattn_cache_destroy(e->cache);
    lazyattn_attention_destroy(e->attn);
    lazyattn_pool_destroy(e->pool);
}

/*
 * Runs [docs...] [question] through the cache: writes what the plan
 * prefills (every layer), commits, prefills the question on every layer.
 * out: [L, NQ, NQH, D]; actions: [n_docs]. Checks each layer against the
 * float64 reference over the whole prompt at absolute positions.
 */
/* Debugging (LAZYATTN_TEST_DUMP=DIR): every layer of every request of this
 * process into DIR/PID-RUN-LAYER.bin: the rotated queries [NQ, NQH, D] f32,
 * n_entries and the table words, the entries' positions, the pool's K and V
 * buffers whole, and the output [NQ, NQH, D]. */
static void dump_layer(engine *e, int layer, cl_mem qm, const lazyattn_plan *p, const float *o) {
    static int run;
    const char *dir = getenv("LAZYATTN_TEST_DUMP");
    if (!dir) return;
    if (layer == 0) run++;
    char path[4200];
    snprintf(path, sizeof path, "%s/%d-%d-%d.bin", dir, (int)getpid(), run, layer);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    float q[NQ * NQH * D];
    lt_read(e->ctx, qm, q, sizeof q);
    fwrite(q, sizeof q, 1, f);
    int32_t n = p->n_entries;
    fwrite(&n, sizeof n, 1, f);
    fwrite(p->table, sizeof(uint64_t), (size_t)n, f);
    fwrite(p->entry_pos, sizeof(int32_t), (size_t)n, f);
    for (int kv = 0; kv < 2; kv++) {
        cl_mem m = kv ? lazyattn_pool_v_buffer(e->pool, layer) : lazyattn_pool_k_buffer(e->pool, layer);
        size_t bytes = 0;
        clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof bytes, &bytes, NULL);
        void *buf = malloc(bytes);
        if (buf) {
            lt_read(e->ctx, m, buf, bytes);
            uint64_t b64 = bytes;
            fwrite(&b64, sizeof b64, 1, f);
            fwrite(buf, 1, bytes, f);
            free(buf);
        }
    }
    fwrite(o, sizeof(float), (size_t)NQ * NQH * D, f);
    double freq[D / 2];
    lazyattn_rope_frequencies(&e->c.rope, D, freq);
    fwrite(freq, sizeof freq, 1, f);
    int fenv[2] = {fegetround(), 0};
#if defined(__x86_64__)
    fenv[1] = (int)_mm_getcsr();
#endif
    fwrite(fenv, sizeof fenv, 1, f);
    fclose(f);
}

void (*run_request_planned)(void *user);
void *run_request_planned_user;

int request_of(engine *e, int n_docs, const int *ids, lazyattn_request **out) {
    int32_t tok[N_DOCS][64];
    const int32_t *docs[N_DOCS];
    int32_t lens[N_DOCS];
    for (int i = 0; i < n_docs; i++) {
        doc_tokens(ids[i], tok[i]);
        docs[i] = tok[i];
        lens[i] = doc_len[ids[i]];
    }
    int32_t question[NQ] = {5, 6, 7, 8, 9};
    lazyattn_request_desc d = {0, NULL, n_docs, n_docs ? docs : NULL, n_docs ? lens : NULL, NQ,
                               question, 0};
    return lazyattn_request_create(e->cache, &d, out);
}

void run_request(engine *e, int n_docs, const int *ids, float *out,
                 lazyattn_segment_action *actions) {
    lazyattn_request *req;
    lt_assert_status(request_of(e, n_docs, ids, &req), LAZYATTN_STATUS_OK);
    if (run_request_planned) { /* once: the hook may run requests itself */
        void (*planned)(void *) = run_request_planned;
        run_request_planned = NULL;
        planned(run_request_planned_user);
    }
    lazyattn_plan p;
    lazyattn_request_get_plan(req, &p);
    int n_pos = p.n_positions;
    for (int i = 0; i < n_docs; i++) actions[i] = p.segments[i].action;
    float *k = malloc(sizeof(float) * n_pos * ROW), *v = malloc(sizeof(float) * n_pos * ROW);
    float *q = malloc(sizeof(float) * NQ * NQH * D);
    double *ref = malloc(sizeof(double) * NQ * NQH * D);
    int32_t *kpos = malloc(sizeof(int32_t) * n_pos), qpos[NQ];
    assert_true(k && v && q && ref && kpos);
    for (int t = 0; t < n_pos; t++) kpos[t] = t;
    for (int t = 0; t < NQ; t++) qpos[t] = n_pos - NQ + t;
    for (int l = 0; l < L; l++) {
        lt_rng r = {0x9E57ull + (uint64_t)l};
        lt_fill(&r, k + (size_t)(n_pos - NQ) * ROW, (size_t)NQ * ROW, 1.0f);
        lt_fill(&r, v + (size_t)(n_pos - NQ) * ROW, (size_t)NQ * ROW, 1.0f);
        lt_fill(&r, q, (size_t)NQ * NQH * D, 2.0f);
        for (int s = 0; s < p.n_segments; s++)
            if (p.segments[s].kind == LAZYATTN_SEGMENT_DOCUMENT)
                doc_kv(ids[p.segments[s].doc_index], l, k + (size_t)p.segments[s].logical_start * ROW,
                       v + (size_t)p.segments[s].logical_start * ROW);
        if (p.n_prefill) {
            float *pk = malloc(sizeof(float) * p.n_prefill * ROW);
            float *pv = malloc(sizeof(float) * p.n_prefill * ROW);
            for (int i = 0; i < p.n_prefill; i++) {
                memcpy(pk + (size_t)i * ROW, k + (size_t)p.prefill_pos[i] * ROW, sizeof(float) * ROW);
                memcpy(pv + (size_t)i * ROW, v + (size_t)p.prefill_pos[i] * ROW, sizeof(float) * ROW);
            }
            cl_mem km = lt_buffer(e->ctx, pk, sizeof(float) * p.n_prefill * ROW);
            cl_mem vm = lt_buffer(e->ctx, pv, sizeof(float) * p.n_prefill * ROW);
            cl_mem sm = lt_buffer(e->ctx, p.prefill_slots, sizeof(int32_t) * p.n_prefill);
            cl_mem stm = lt_buffer(e->ctx, p.prefill_stored_pos, sizeof(int32_t) * p.n_prefill);
            lt_assert_status(lazyattn_write_kv(e->attn, e->pool, l, p.n_prefill, km, vm, sm, stm,
                                               NULL, NULL),
                             LAZYATTN_STATUS_OK);
            clReleaseMemObject(km);
            clReleaseMemObject(vm);
            clReleaseMemObject(sm);
            clReleaseMemObject(stm);
            free(pk);
            free(pv);
        }
        cl_mem qm = lt_buffer(e->ctx, q, sizeof(float) * NQ * NQH * D);
        cl_mem qpm = lt_buffer(e->ctx, qpos, sizeof qpos);
        cl_mem tm = lt_buffer(e->ctx, p.table, sizeof(uint64_t) * p.n_entries);
        cl_mem epm = lt_buffer(e->ctx, p.entry_pos, sizeof(int32_t) * p.n_entries);
        cl_mem om = lt_buffer(e->ctx, NULL, sizeof(float) * NQ * NQH * D);
        lt_assert_status(lazyattn_rope_apply(e->attn, NQ, NQH, qm, qpm, NULL, NULL),
                         LAZYATTN_STATUS_OK);
        lazyattn_prefill_args a = {NQ, p.n_entries, qm, qpm, tm, epm, om,
                                   NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
        lt_assert_status(lazyattn_prefill(e->attn, e->pool, l, &a, NULL, NULL), LAZYATTN_STATUS_OK);
        lt_assert_status(lazyattn_attention_check(e->attn, NULL), LAZYATTN_STATUS_OK);
        float *o = out + (size_t)l * NQ * NQH * D;
        lt_read(e->ctx, om, o, sizeof(float) * NQ * NQH * D);
        dump_layer(e, l, qm, &p, o);
        clReleaseMemObject(qm);
        clReleaseMemObject(qpm);
        clReleaseMemObject(tm);
        clReleaseMemObject(epm);
        clReleaseMemObject(om);
        lazyattn_reference_args ra = {NQ, n_pos, q, qpos, k, v, kpos, ref, NULL};
        lt_assert_status(lazyattn_reference_attention(&e->c, &ra), LAZYATTN_STATUS_OK);
        double err = lazyattn_normalised_error(o, ref, (size_t)NQ * NQH * D);
        double tol = e->dtype == LAZYATTN_DTYPE_F32 ? 2e-5 : 2e-3;
        if (err > tol) print_error("layer %d: normalised error %.3g\n", l, err);
        assert_true(err <= tol);
    }
    lt_assert_status(lazyattn_request_commit(req), LAZYATTN_STATUS_OK);
    lazyattn_request_destroy(req);
    lt_assert_status(lazyattn_cache_validate(e->cache), LAZYATTN_STATUS_OK);
    free(k);
    free(v);
    free(q);
    free(ref);
    free(kpos);
}

uint64_t hash_of(int id) {
    int32_t tok[64];
    doc_tokens(id, tok);
    uint64_t h;
    lt_assert_status(lazyattn_doc_hash(MODEL, tok, doc_len[id], &h), LAZYATTN_STATUS_OK);
    return h;
}

lazyattn_doc_key key_of(int id) {
    int32_t tok[64];
    doc_tokens(id, tok);
    lazyattn_doc_key k = {MODEL, {0}};
    lt_assert_status(lazyattn_doc_digest(MODEL, tok, doc_len[id], k.digest), LAZYATTN_STATUS_OK);
    return k;
}

void run_docs(engine *e, int n_docs, const int *ids, lazyattn_segment_action *actions) {
    float *out = malloc(sizeof(float) * OUT_N);
    assert_non_null(out);
    run_request(e, n_docs, ids, out, actions);
    free(out);
}

lazyattn_cache_stats stats_of(const engine *e) {
    lazyattn_cache_stats s;
    lt_assert_status(lazyattn_cache_get_stats(e->cache, &s), LAZYATTN_STATUS_OK);
    return s;
}
