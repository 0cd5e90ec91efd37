/* SPDX-License-Identifier: Apache-2.0 */
/* Randomized stress of the document cache: thousands of requests under
 * random budgets, random overlapping lifetimes (pins), random document
 * sets, for every policy. After every step: the cache's own invariants,
 * pool accounting == blocks held by entries and live requests, the retain
 * limit, and a shadow of the KV contents that checks every live table
 * still reads the right token at the right position (the cache never
 * changes an answer). Bookkeeping pools: no device needed. */
#include "test_common.h"

#include "cache/cache_internal.h" /* lz_cache_fingerprint */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_DOCS 24
#define MAX_LIVE 4

/* Probe results checked against a plan, by action, over all worlds. */
static long probe_actions_checked[4];

/* What a KV slot holds: which token, computed in which context, rotated
 * at which stored position. ctx: hash of the document's tokens up to and
 * including this one for document tokens,
 * a per-request id for prefix/question/generated tokens. */
typedef struct shadow {
    int32_t token;
    int32_t stored;
    uint64_t ctx;
    int32_t index; /* index within the document / position for own tokens */
} shadow;

typedef struct live {
    lazyattn_request *req;
    int committed;
    int n_pos;
    int32_t *token; /* [n_pos] expected by logical position */
    uint64_t *ctx;
    int32_t *index;
} live;

typedef struct world {
    lt_rng rng;
    int block_size;
    lazyattn_pool *pool;
    lazyattn_cache *cache;
    uint64_t retain;
    shadow *kv; /* [n_blocks * block_size] */
    int32_t doc_tok[N_DOCS][64];
    int doc_len[N_DOCS];
    uint64_t doc_hash[N_DOCS];
    live lives[MAX_LIVE];
    int n_live;
    uint64_t next_id;
    long n_created, n_refused;
    long n_probes, n_probe_checked;
} world;

static void check_live(world *w, const live *l) {
    lazyattn_plan p;
    lt_assert_status(lazyattn_request_get_plan(l->req, &p), LAZYATTN_STATUS_OK);
    assert_int_equal(p.n_positions, l->n_pos);
    int32_t pos = 0;
    for (int e = 0; e < p.n_entries; e++) {
        int32_t b, d, n;
        lt_assert_status(lazyattn_entry_unpack(p.table[e], &b, &d, &n), LAZYATTN_STATUS_OK);
        assert_int_equal(p.entry_pos[e], pos);
        assert_true(n >= 1 && n <= w->block_size);
        assert_true(lazyattn_pool_is_allocated(w->pool, b));
        for (int i = 0; i < n; i++, pos++) {
            const shadow *s = &w->kv[(size_t)b * w->block_size + i];
            if (s->token != l->token[pos] || s->stored + d != pos || s->ctx != l->ctx[pos] ||
                s->index != l->index[pos]) {
                print_error("position %d: slot holds token %d ctx %llx idx %d stored %d "
                            "(delta %d), want token %d ctx %llx idx %d\n",
                            pos, s->token, (unsigned long long)s->ctx, s->index, s->stored, d,
                            l->token[pos], (unsigned long long)l->ctx[pos], l->index[pos]);
                fail();
            }
        }
    }
    assert_int_equal(pos, l->n_pos);
}

static void check_world(world *w) {
    lt_assert_status(lazyattn_cache_validate(w->cache), LAZYATTN_STATUS_OK);
    lazyattn_cache_stats s;
    lazyattn_pool_info info;
    lazyattn_cache_get_stats(w->cache, &s);
    lazyattn_pool_get_info(w->pool, &info);
    /* One cache per pool: every allocated block is an entry's or a request's. */
    assert_int_equal(info.n_used * info.block_bytes, s.bytes_in_use);
    assert_true(info.n_used <= info.n_blocks);
    assert_int_equal(s.n_requests_live, w->n_live);
    /* Above the retain limit only while everything cached is pinned. */
    if (s.entry_bytes > w->retain) assert_int_equal(s.n_pinned, s.n_entries);
    for (int i = 0; i < w->n_live; i++) check_live(w, &w->lives[i]);
}

/* The caller's side of a plan: write prefilled tokens, then copies. */
static void execute(world *w, live *l, const lazyattn_plan *p) {
    for (int s = 0; s < p->n_segments; s++) {
        const lazyattn_segment *seg = &p->segments[s];
        for (int t = seg->n_cached; t < seg->n_tokens; t++) {
            int k = seg->prefill_offset + t - seg->n_cached;
            int32_t lp = p->prefill_pos[k];
            assert_int_equal(lp, seg->logical_start + t);
            shadow *dst = &w->kv[p->prefill_slots[k]];
            dst->token = l->token[lp];
            dst->ctx = l->ctx[lp];
            dst->index = l->index[lp];
            dst->stored = p->prefill_stored_pos[k];
        }
    }
    for (int c = 0; c < p->n_copies; c++) {
        int32_t b, d, n;
        lazyattn_entry_unpack(p->copy_src[c], &b, &d, &n);
        for (int i = 0; i < n; i++) {
            shadow s = w->kv[(size_t)b * w->block_size + i];
            s.stored += d;
            w->kv[(size_t)p->copy_dst[c] * w->block_size + i] = s;
        }
    }
}

static void grow(live *l, int n) {
    l->token = realloc(l->token, (size_t)n * sizeof *l->token);
    l->ctx = realloc(l->ctx, (size_t)n * sizeof *l->ctx);
    l->index = realloc(l->index, (size_t)n * sizeof *l->index);
    assert_non_null(l->token);
    assert_non_null(l->ctx);
    assert_non_null(l->index);
}

static void step_create(world *w) {
    static const int32_t prefixes[2][5] = {{1, 2, 3, 4, 5}, {1, 2, 3, 4, 6}};
    int32_t question[8];
    const int32_t *docs[8];
    int32_t lens[8];
    int n_docs = lt_int(&w->rng, 0, 6);
    for (int i = 0; i < n_docs; i++) {
        int id = lt_int(&w->rng, 0, 3) ? lt_int(&w->rng, 0, 5) : lt_int(&w->rng, 0, N_DOCS - 1);
        docs[i] = w->doc_tok[id];
        lens[i] = w->doc_len[id];
    }
    int np = lt_int(&w->rng, 0, 5) * lt_int(&w->rng, 0, 1);
    int nq = lt_int(&w->rng, 0, 8);
    for (int i = 0; i < nq; i++) question[i] = lt_int(&w->rng, 0, 50);
    lazyattn_request_desc d = {np, prefixes[lt_int(&w->rng, 0, 1)], n_docs, docs, lens, nq,
                               question, lt_int(&w->rng, 0, 6)};
    /* The probe first: it must change nothing, and the plan must agree. */
    lazyattn_probe_segment probe[10];
    lazyattn_probe_summary sum;
    lazyattn_cache_stats s0, s1;
    lazyattn_pool_info i0, i1;
    lazyattn_cache_get_stats(w->cache, &s0);
    lazyattn_pool_get_info(w->pool, &i0);
    uint64_t fp0 = lz_cache_fingerprint(w->cache);
    lt_assert_status(lazyattn_cache_probe(w->cache, &d, probe, 10, &sum), LAZYATTN_STATUS_OK);
    lazyattn_cache_get_stats(w->cache, &s1);
    lazyattn_pool_get_info(w->pool, &i1);
    assert_memory_equal(&s0, &s1, sizeof s0);
    assert_memory_equal(&i0, &i1, sizeof i0);
    assert_true(lz_cache_fingerprint(w->cache) == fp0);
    lt_assert_status(lazyattn_cache_validate(w->cache), LAZYATTN_STATUS_OK);
    w->n_probes++;

    live l = {0};
    int st = lazyattn_request_create(w->cache, &d, &l.req);
    if (st == LAZYATTN_STATUS_BUDGET_EXCEEDED) {
        assert_null(l.req);
        w->n_refused++;
        return;
    }
    lt_assert_status(st, LAZYATTN_STATUS_OK);
    w->n_created++;
    uint64_t id = ++w->next_id << 8;
    int total = np + nq;
    for (int i = 0; i < n_docs; i++) total += lens[i];
    grow(&l, total + 1);
    int pos = 0;
    for (int t = 0; t < np; t++, pos++) {
        l.token[pos] = d.prefix[t];
        l.ctx[pos] = id;
        l.index[pos] = pos;
    }
    for (int i = 0; i < n_docs; i++) {
        for (int t = 0; t < lens[i]; t++, pos++) {
            /* Causal inside the document: token t's K/V depend on tokens 0..t. */
            uint64_t h;
            lazyattn_doc_hash(0, docs[i], t + 1, &h);
            l.token[pos] = docs[i][t];
            l.ctx[pos] = h;
            l.index[pos] = t;
        }
    }
    for (int t = 0; t < nq; t++, pos++) {
        l.token[pos] = question[t];
        l.ctx[pos] = id;
        l.index[pos] = pos;
    }
    l.n_pos = pos;
    lazyattn_plan p;
    lazyattn_request_get_plan(l.req, &p);
    /* The plan agrees with the probe, segment by segment. */
    lazyattn_pool_info i2;
    lazyattn_pool_get_info(w->pool, &i2);
    assert_int_equal(i2.n_allocs - i0.n_allocs, sum.blocks_needed);
    assert_int_equal(p.n_segments, sum.n_segments);
    for (int s = 0; s < p.n_segments; s++) {
        const lazyattn_segment *g = &p.segments[s];
        assert_int_equal(g->kind, probe[s].kind);
        assert_int_equal(g->action, probe[s].action);
        assert_int_equal(g->doc_index, probe[s].doc_index);
        assert_int_equal(g->logical_start, probe[s].logical_start);
        assert_int_equal(g->n_tokens, probe[s].n_tokens);
        assert_int_equal(g->n_cached, probe[s].n_cached);
        assert_int_equal(g->n_entries, probe[s].n_blocks);
        if (g->kind == LAZYATTN_SEGMENT_DOCUMENT) {
            uint64_t h;
            uint8_t dg[32];
            lazyattn_doc_hash(0, docs[g->doc_index], lens[g->doc_index], &h);
            lazyattn_doc_digest(0, docs[g->doc_index], lens[g->doc_index], dg);
            assert_true(probe[s].doc_hash == h);
            assert_memory_equal(probe[s].digest, dg, 32);
            int blocks_cached = g->action == LAZYATTN_ACTION_PREFILL ? 0
                                : g->action == LAZYATTN_ACTION_PARTIAL
                                    ? g->n_cached / w->block_size
                                    : g->n_entries;
            assert_int_equal(probe[s].n_cached_blocks, blocks_cached);
            probe_actions_checked[g->action]++;
        }
    }
    assert_int_equal(p.doc_tokens, sum.doc_tokens);
    assert_int_equal(p.hit_tokens, sum.hit_tokens);
    assert_int_equal(p.copy_tokens, sum.copy_tokens);
    assert_int_equal(p.doc_blocks, sum.doc_blocks);
    assert_int_equal(p.hit_blocks, sum.hit_blocks);
    assert_int_equal(p.copy_blocks, sum.copy_blocks);
    w->n_probe_checked++;
    execute(w, &l, &p);
    w->lives[w->n_live++] = l;
}

static void step_append(world *w, live *l) {
    int n = lt_int(&w->rng, 1, 7);
    int32_t slots[8], pos[8];
    int st = lazyattn_request_append(l->req, n, slots, pos);
    if (st == LAZYATTN_STATUS_BUDGET_EXCEEDED) return;
    lt_assert_status(st, LAZYATTN_STATUS_OK);
    grow(l, l->n_pos + n);
    for (int i = 0; i < n; i++) {
        assert_int_equal(pos[i], l->n_pos + i);
        shadow *s = &w->kv[slots[i]];
        s->token = 1000 + pos[i];
        s->stored = pos[i];
        s->ctx = 0xABCD;
        s->index = pos[i];
        l->token[pos[i]] = s->token;
        l->ctx[pos[i]] = 0xABCD;
        l->index[pos[i]] = pos[i];
    }
    l->n_pos += n;
}

static void step_destroy(world *w, int i) {
    live *l = &w->lives[i];
    check_live(w, l);
    lazyattn_request_destroy(l->req);
    free(l->token);
    free(l->ctx);
    free(l->index);
    w->lives[i] = w->lives[--w->n_live];
}

static void run_world(uint64_t seed, lazyattn_cache_policy policy, int steps) {
    world *w = calloc(1, sizeof *w);
    assert_non_null(w);
    w->rng.state = seed;
    w->block_size = lt_int(&w->rng, 1, 6);
    int n_blocks = lt_int(&w->rng, 4, 120);
    lazyattn_pool_config pc = {1, 1, 1, w->block_size, LAZYATTN_DTYPE_F32, 0,
                               LAZYATTN_KV_LAYOUT_ROWS};
    pc.budget_bytes = (uint64_t)n_blocks * 8 * w->block_size;
    lt_assert_status(lazyattn_pool_create(NULL, &pc, &w->pool), LAZYATTN_STATUS_OK);
    lazyattn_cache_config cc = {policy, 0, 0};
    if (lt_int(&w->rng, 0, 1)) cc.retain_bytes = (uint64_t)lt_int(&w->rng, 1, n_blocks) * 8 * w->block_size;
    w->retain = cc.retain_bytes ? cc.retain_bytes : pc.budget_bytes;
    lt_assert_status(lazyattn_cache_create(w->pool, &cc, &w->cache), LAZYATTN_STATUS_OK);
    w->kv = calloc((size_t)n_blocks * w->block_size, sizeof *w->kv);
    assert_non_null(w->kv);
    for (int i = 0; i < N_DOCS; i++) {
        w->doc_len[i] = lt_int(&w->rng, 1, 3 * w->block_size + 2);
        /* Documents 0 and 1 share a first block (prefix sharing). */
        for (int t = 0; t < w->doc_len[i]; t++)
            w->doc_tok[i][t] = (i <= 1 && t < w->block_size) ? 7 * t : 100 * (i + 1) + t;
    }
    for (int s = 0; s < steps; s++) {
        int op = lt_int(&w->rng, 0, 9);
        if (w->n_live == 0 || (op < 4 && w->n_live < MAX_LIVE))
            step_create(w);
        else if (op < 6) {
            live *l = &w->lives[lt_int(&w->rng, 0, w->n_live - 1)];
            if (!l->committed || lt_int(&w->rng, 0, 3) == 0) { /* commit is idempotent */
                lt_assert_status(lazyattn_request_commit(l->req), LAZYATTN_STATUS_OK);
                l->committed = 1;
            }
        } else if (op < 7)
            step_append(w, &w->lives[lt_int(&w->rng, 0, w->n_live - 1)]);
        else if (op < 9 || w->n_live == MAX_LIVE)
            step_destroy(w, lt_int(&w->rng, 0, w->n_live - 1));
        else
            lt_assert_status(lazyattn_cache_trim(w->cache, (uint64_t)lt_int(&w->rng, 0, n_blocks) *
                                                               8 * w->block_size),
                             LAZYATTN_STATUS_OK);
        check_world(w);
    }
    while (w->n_live) step_destroy(w, 0);
    check_world(w);
    lazyattn_cache_stats st;
    lazyattn_cache_get_stats(w->cache, &st);
    lazyattn_cache_destroy(w->cache);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(w->pool, &info);
    assert_int_equal(info.n_used, 0);
    assert_int_equal(info.n_allocs, info.n_frees);
    if (getenv("LAZYATTN_STRESS_VERBOSE"))
        printf("seed %llx %s B=%d blocks=%d: %ld requests, %ld refused, %ld probes (%ld checked "
               "against a plan), %lld hits %lld copy %lld miss %lld evictions\n",
               (unsigned long long)seed, lazyattn_cache_policy_name(policy), w->block_size,
               n_blocks, w->n_created, w->n_refused, w->n_probes, w->n_probe_checked, (long long)st.hits, (long long)st.copy_hits,
               (long long)st.misses, (long long)st.evictions);
    lazyattn_pool_destroy(w->pool);
    free(w->kv);
    free(w);
}

static void test_stress(void **state) {
    (void)state;
    uint64_t seed = lt_seed();
    int worlds = getenv("LAZYATTN_STRESS_WORLDS") ? atoi(getenv("LAZYATTN_STRESS_WORLDS")) : 40;
    for (int k = 0; k < worlds; k++)
        for (int p = 0; p < 4; p++) {
            uint64_t s = seed * 1000003u + (uint64_t)k * 17 + (uint64_t)p;
            print_message("world seed %llu, policy %s\n", (unsigned long long)s,
                          lazyattn_cache_policy_name((lazyattn_cache_policy)p));
            run_world(s, (lazyattn_cache_policy)p, 1500);
        }
    print_message("probes checked against plans: %ld prefill, %ld reuse, %ld copy, %ld partial\n",
                  probe_actions_checked[0], probe_actions_checked[1], probe_actions_checked[2],
                  probe_actions_checked[3]);
    if (worlds >= 10)
        for (int a = 0; a < 4; a++) assert_true(probe_actions_checked[a] > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_stress)};
    return cmocka_run_group_tests_name("cache_stress", tests, NULL, NULL);
}
