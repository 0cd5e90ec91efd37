/* SPDX-License-Identifier: Apache-2.0 */
/* The order in which a finished request hands its entries back to the LRU,
 * checked against an independent model of the LAZY and POSITION caches
 * (docs/HITRATIO.md, "Position-aware hit+copy and the release order").
 *
 * The model keeps entries (document, start, blocks), reference counts and
 * an LRU clock, and replays what lib/request_plan.c and lib/doc_cache.c
 * specify in prose: decisions in prompt order (exact hit: reuse; the
 * document cached at another start: copy from a source pinned at decide
 * time, preferring a source already pinned, else the newest entry of the
 * document; else recompute), new entries committed pinned in prompt order,
 * and at release the holds unpinned in their order: per document of the
 * prompt, the copy's source first, then the document's own entry. Each
 * unpin to zero makes an entry the most recent; after commit and after
 * release, least recent unpinned entries are evicted while the committed
 * entries exceed the retain budget. The pool has room for every working
 * set (as hitratio's default budget), so only the retain budget evicts.
 *
 * The library must match the model with its order exactly, token for token,
 * at every budget; other orders (copy before source; sources after every
 * entry; reverse prompt order) must differ from it somewhere near one
 * request's worth of budget, or the equality would prove nothing. No
 * device needed. */
#include "test_common.h"

#include <stdlib.h>
#include <string.h>

enum release_order {
    ORDER_LIBRARY,      /* prompt order; per document the source, then its entry */
    ORDER_COPY_FIRST,   /* prompt order; per document its entry, then the source */
    ORDER_SOURCES_LAST, /* every document's entry in prompt order, then the sources */
    ORDER_REVERSE,      /* the library's holds walked backwards */
    N_ORDERS
};

static const char *const order_names[N_ORDERS] = {"library (source, then entry)", "entry, then source",
                                                  "sources last", "reverse prompt order"};

#define MAX_ENTRIES 4096
#define MAX_K 16

typedef struct m_entry {
    int doc, start, blocks;
    int refcount;
    int64_t seq;   /* insertion order: the newest entry of a document is found first */
    int64_t stamp; /* LRU clock of its last unpin to zero */
    int live;
} m_entry;

typedef struct model {
    int position; /* POSITION, else LAZY */
    enum release_order order;
    int64_t retain_blocks;
    m_entry e[MAX_ENTRIES];
    int n;
    int64_t seq, clock, entry_blocks;
    int64_t hit_tokens, copy_tokens;
} model;

static void m_pin(m_entry *e) { e->refcount++; }

static void m_unpin(model *m, m_entry *e) {
    if (--e->refcount == 0) e->stamp = ++m->clock;
}

static void m_trim(model *m) {
    while (m->entry_blocks > m->retain_blocks) {
        m_entry *victim = NULL;
        for (int i = 0; i < m->n; i++)
            if (m->e[i].live && m->e[i].refcount == 0 && (!victim || m->e[i].stamp < victim->stamp))
                victim = &m->e[i];
        if (!victim) return;
        victim->live = 0;
        m->entry_blocks -= victim->blocks;
    }
}

static m_entry *m_new(model *m, int doc, int start, int blocks) {
    int i = 0;
    while (i < m->n && m->e[i].live) i++;
    if (i == m->n) {
        assert_true(m->n < MAX_ENTRIES);
        m->n++;
    }
    m_entry *e = &m->e[i];
    memset(e, 0, sizeof *e);
    e->doc = doc;
    e->start = start;
    e->blocks = blocks;
    e->refcount = 1; /* pinned by the request that commits it */
    e->seq = ++m->seq;
    e->live = 1;
    m->entry_blocks += blocks;
    return e;
}

/* One request: docs[0..k) of the given lengths, at contiguous starts. */
static void m_request(model *m, int k, const int32_t *docs, const int32_t *lens, int B) {
    m_entry *reused[MAX_K], *source[MAX_K], *own[MAX_K];
    int start[MAX_K], pos = 0;
    for (int i = 0; i < k; i++) {
        start[i] = pos;
        pos += lens[i];
        reused[i] = source[i] = own[i] = NULL;
        /* exact entry: (document, start) for POSITION, the document for LAZY */
        for (int j = 0; j < m->n && !reused[i]; j++)
            if (m->e[j].live && m->e[j].doc == docs[i] && (!m->position || m->e[j].start == start[i]))
                reused[i] = &m->e[j];
        if (reused[i]) {
            m_pin(reused[i]);
            m->hit_tokens += lens[i];
            continue;
        }
        if (!m->position) continue;
        /* a copy's source: one already pinned, else the newest */
        for (int j = 0; j < m->n; j++) {
            m_entry *c = &m->e[j];
            if (!c->live || c->doc != docs[i]) continue;
            int better = !source[i] || (c->refcount > 0 && source[i]->refcount == 0) ||
                         ((c->refcount > 0) == (source[i]->refcount > 0) && c->seq > source[i]->seq);
            if (better) source[i] = c;
        }
        if (source[i]) {
            m_pin(source[i]);
            m->copy_tokens += lens[i];
        }
    }
    /* commit, prompt order */
    for (int i = 0; i < k; i++)
        if (!reused[i]) own[i] = m_new(m, docs[i], m->position ? start[i] : 0, (lens[i] + B - 1) / B);
    m_trim(m);
    /* release */
    m_entry *seq[2 * MAX_K];
    int n = 0;
    switch (m->order) {
    case ORDER_LIBRARY:
    case ORDER_REVERSE:
        for (int i = 0; i < k; i++) {
            if (reused[i]) seq[n++] = reused[i];
            if (source[i]) seq[n++] = source[i];
            if (own[i]) seq[n++] = own[i];
        }
        if (m->order == ORDER_REVERSE)
            for (int a = 0, b = n - 1; a < b; a++, b--) {
                m_entry *t = seq[a];
                seq[a] = seq[b];
                seq[b] = t;
            }
        break;
    case ORDER_COPY_FIRST:
        for (int i = 0; i < k; i++) {
            if (reused[i]) seq[n++] = reused[i];
            if (own[i]) seq[n++] = own[i];
            if (source[i]) seq[n++] = source[i];
        }
        break;
    default:
        for (int i = 0; i < k; i++) seq[n++] = reused[i] ? reused[i] : own[i];
        for (int i = 0; i < k; i++)
            if (source[i]) seq[n++] = source[i];
    }
    for (int i = 0; i < n; i++) m_unpin(m, seq[i]);
    m_trim(m);
}

/* The library as hitratio drives it: a bookkeeping pool with room for the
 * retained entries and any working set, retain = budget. */
static void library_run(const lazyattn_workload *w, lazyattn_cache_policy policy,
                        int64_t retain_blocks, int B, int64_t *hit, int64_t *copy) {
    lazyattn_workload_config c;
    lazyattn_workload_get_config(w, &c);
    lazyattn_pool_config pc;
    lazyattn_pool_config_init(&pc);
    pc.n_layers = 1;
    pc.n_kv_heads = 1;
    pc.head_dim = 16;
    pc.block_size = B;
    pc.dtype = LAZYATTN_DTYPE_F32;
    uint64_t block_bytes = 2ull * 16 * (uint64_t)B * 4;
    int64_t ws = 2 * (int64_t)c.docs_per_request * ((c.doc_len_max + B - 1) / B) + 8;
    pc.budget_bytes = (uint64_t)(retain_blocks + ws) * block_bytes;
    lazyattn_pool *pool;
    lazyattn_cache *cache;
    lt_assert_status(lazyattn_pool_create(NULL, &pc, &pool), LAZYATTN_STATUS_OK);
    lazyattn_cache_config cc;
    lazyattn_cache_config_init(&cc);
    cc.policy = policy;
    cc.retain_bytes = (uint64_t)retain_blocks * block_bytes;
    lt_assert_status(lazyattn_cache_create(pool, &cc, &cache), LAZYATTN_STATUS_OK);
    for (int i = 0; i < c.n_requests; i++) {
        const int32_t *docs[MAX_K];
        int32_t lens[MAX_K], slots[64], pos[64];
        lazyattn_request_desc d;
        lazyattn_request *req;
        lt_assert_status(lazyattn_workload_get_request_desc(w, i, docs, lens, &d), LAZYATTN_STATUS_OK);
        lt_assert_status(lazyattn_request_create(cache, &d, &req), LAZYATTN_STATUS_OK);
        lt_assert_status(lazyattn_request_commit(req), LAZYATTN_STATUS_OK);
        if (d.max_new_tokens)
            lt_assert_status(lazyattn_request_append(req, d.max_new_tokens, slots, pos),
                             LAZYATTN_STATUS_OK);
        lazyattn_request_destroy(req);
    }
    lazyattn_cache_stats s;
    lazyattn_cache_get_stats(cache, &s);
    assert_int_equal(s.budget_failures, 0);
    *hit = s.hit_tokens;
    *copy = s.copy_tokens;
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
}

static void model_run(const lazyattn_workload *w, int position, enum release_order order,
                      int64_t retain_blocks, int B, int64_t *hit, int64_t *copy) {
    lazyattn_workload_config c;
    lazyattn_workload_get_config(w, &c);
    model *m = calloc(1, sizeof *m);
    assert_non_null(m);
    m->position = position;
    m->order = order;
    m->retain_blocks = retain_blocks;
    for (int i = 0; i < c.n_requests; i++) {
        lazyattn_workload_request r;
        lazyattn_workload_get_request(w, i, &r);
        int32_t lens[MAX_K];
        for (int j = 0; j < r.n_docs; j++) {
            const int32_t *t;
            int n;
            lazyattn_workload_get_doc(w, r.doc_ids[j], &t, &n);
            lens[j] = n;
        }
        m_request(m, r.n_docs, r.doc_ids, lens, B);
    }
    *hit = m->hit_tokens;
    *copy = m->copy_tokens;
    free(m);
}

/* The paper's setting scaled down (documents of 64 tokens, B = 16: 4 blocks
 * each, so budgets count documents as in the paper), and a RAG-like one
 * with unequal lengths; budgets from one document to past one request. */
static void check_setting(const char *preset, int n_docs, int len_min, int len_max, int k,
                          double alpha, int n_requests, uint64_t seed, int *order_differs) {
    const int B = 16;
    lazyattn_workload_config c;
    lazyattn_workload_config_preset(preset, &c);
    c.n_docs = n_docs;
    c.doc_len_min = len_min;
    c.doc_len_max = len_max;
    c.docs_per_request = k;
    c.alpha = alpha;
    c.n_requests = n_requests;
    c.seed = seed;
    lazyattn_workload *w;
    lt_assert_status(lazyattn_workload_create(&c, &w), LAZYATTN_STATUS_OK);
    int doc_blocks = (len_max + B - 1) / B;
    static const int budgets_in_docs[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24};
    for (size_t bi = 0; bi < sizeof budgets_in_docs / sizeof *budgets_in_docs; bi++) {
        int64_t retain = (int64_t)budgets_in_docs[bi] * doc_blocks;
        for (int position = 0; position < 2; position++) {
            int64_t lh, lc, mh, mc;
            library_run(w, position ? LAZYATTN_CACHE_POLICY_POSITION : LAZYATTN_CACHE_POLICY_LAZY,
                        retain, B, &lh, &lc);
            model_run(w, position, ORDER_LIBRARY, retain, B, &mh, &mc);
            if (lh != mh || lc != mc)
                print_error("%s seed %llu, %s, %d docs: library hit %lld copy %lld, model %lld %lld\n",
                            preset, (unsigned long long)seed, position ? "position" : "lazy",
                            budgets_in_docs[bi], (long long)lh, (long long)lc, (long long)mh,
                            (long long)mc);
            assert_true(lh == mh && lc == mc);
            if (!position) continue;
            for (int o = 1; o < N_ORDERS; o++) {
                model_run(w, 1, (enum release_order)o, retain, B, &mh, &mc);
                if (mh != lh || mc != lc) {
                    if (!order_differs[o])
                        print_message("%s seed %llu, %d docs of budget: position hit+copy %lld "
                                      "tokens with the library's order, %lld with '%s'\n",
                                      preset, (unsigned long long)seed, budgets_in_docs[bi],
                                      (long long)(lh + lc), (long long)(mh + mc), order_names[o]);
                    order_differs[o] = 1;
                }
            }
        }
    }
    lazyattn_workload_destroy(w);
}

static void test_release_order(void **state) {
    (void)state;
    int order_differs[N_ORDERS] = {0};
    const uint64_t seeds[] = {1, 2, 3, lt_seed()};
    for (size_t s = 0; s < sizeof seeds / sizeof *seeds; s++) {
        check_setting("paper", 100, 64, 64, 5, 2.1, 200, seeds[s], order_differs);
        check_setting("rag", 300, 20, 70, 6, 0.9, 300, seeds[s], order_differs);
    }
    /* Each other order changes position-aware results somewhere: the
     * equality above pins the library's order down. */
    for (int o = 1; o < N_ORDERS; o++) {
        if (!order_differs[o]) print_error("order '%s' never differs\n", order_names[o]);
        assert_true(order_differs[o]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release_order),
    };
    return cmocka_run_group_tests_name("position_order", tests, NULL, NULL);
}
