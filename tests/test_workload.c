/* SPDX-License-Identifier: Apache-2.0 */
/* Workload generator: reproducibility, bad configurations, Zipf rank
 * frequencies, and the hit ratios of each policy on small hand-computable
 * streams built from it. No device needed. */
#include "test_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_presets_and_reproducible(void **state) {
    (void)state;
    lazyattn_workload_config c;
    lt_assert_status(lazyattn_workload_config_preset("paper", &c), LAZYATTN_STATUS_OK);
    assert_int_equal(c.n_docs, 100);
    assert_int_equal(c.docs_per_request, 5);
    assert_int_equal(c.n_requests, 200);
    lt_assert_status(lazyattn_workload_config_preset("rag", &c), LAZYATTN_STATUS_OK);
    assert_int_equal(c.n_docs, 10000);
    lt_assert_status(lazyattn_workload_config_preset("nope", &c), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_workload_config_preset(NULL, &c), LAZYATTN_STATUS_INVALID_ARGUMENT);

    lazyattn_workload_config_preset("rag", &c);
    c.n_requests = 50;
    c.prefix_len = 7;
    lazyattn_workload *a, *b;
    lt_assert_status(lazyattn_workload_create(&c, &a), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_workload_create(&c, &b), LAZYATTN_STATUS_OK);
    for (int i = 0; i < 50; i++) {
        lazyattn_workload_request ra, rb;
        lt_assert_status(lazyattn_workload_get_request(a, i, &ra), LAZYATTN_STATUS_OK);
        lazyattn_workload_get_request(b, i, &rb);
        assert_int_equal(ra.n_docs, 10);
        assert_memory_equal(ra.doc_ids, rb.doc_ids, 10 * sizeof(int32_t));
        assert_int_equal(ra.n_question, rb.n_question);
        assert_true(ra.n_question >= 16 && ra.n_question <= 32);
        assert_true(ra.n_generate >= 8 && ra.n_generate <= 16);
        for (int x = 0; x < 10; x++)
            for (int y = 0; y < x; y++) assert_true(ra.doc_ids[x] != ra.doc_ids[y]);
    }
    /* Document tokens depend on (doc, index) only: same under another seed. */
    lazyattn_workload_config c2 = c;
    c2.seed = 99;
    c2.doc_len_min = c2.doc_len_max = 500;
    lazyattn_workload *d;
    lt_assert_status(lazyattn_workload_create(&c2, &d), LAZYATTN_STATUS_OK);
    const int32_t *ta, *td;
    int na, nd;
    lt_assert_status(lazyattn_workload_get_doc(a, 17, &ta, &na), LAZYATTN_STATUS_OK);
    lazyattn_workload_get_doc(d, 17, &td, &nd);
    assert_true(na >= 100 && na <= 400 && nd == 500);
    assert_memory_equal(ta, td, (size_t)na * sizeof(int32_t));
    const int32_t *docs[10];
    int32_t lens[10];
    lazyattn_request_desc desc;
    lt_assert_status(lazyattn_workload_get_request_desc(a, 3, docs, lens, &desc), LAZYATTN_STATUS_OK);
    assert_int_equal(desc.n_prefix, 7);
    assert_int_equal(desc.n_docs, 10);

    lt_assert_status(lazyattn_workload_get_doc(a, 10000, &ta, &na), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_workload_get_doc(a, -1, &ta, &na), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_workload_get_doc(NULL, 0, &ta, &na), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_workload_request rq;
    lt_assert_status(lazyattn_workload_get_request(a, 50, &rq), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_workload_get_request(a, 0, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_workload_get_request_desc(a, 0, NULL, lens, &desc),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_workload_get_prefix(a, NULL, &na), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_workload_get_config(a, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_workload_destroy(a);
    lazyattn_workload_destroy(b);
    lazyattn_workload_destroy(d);
    lazyattn_workload_destroy(NULL);
}

static void test_bad_configs(void **state) {
    (void)state;
    lazyattn_workload_config base, c;
    lazyattn_workload_config_preset("paper", &base);
    lazyattn_workload *w = (lazyattn_workload *)&c;
    lt_assert_status(lazyattn_workload_create(NULL, &w), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(w);
    lt_assert_status(lazyattn_workload_create(&base, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
#define BAD(field, value, status)                                              \
    c = base;                                                                  \
    c.field = value;                                                           \
    lt_assert_status(lazyattn_workload_create(&c, &w), status);                \
    assert_null(w);
    BAD(docs_per_request, 101, LAZYATTN_STATUS_INVALID_ARGUMENT);
    BAD(docs_per_request, 0, LAZYATTN_STATUS_INVALID_ARGUMENT);
    BAD(alpha, 0.0, LAZYATTN_STATUS_INVALID_ARGUMENT);
    BAD(alpha, -1.0, LAZYATTN_STATUS_INVALID_ARGUMENT);
    BAD(alpha, NAN, LAZYATTN_STATUS_INVALID_ARGUMENT);
    BAD(n_docs, 0, LAZYATTN_STATUS_INVALID_ARGUMENT);
    BAD(doc_len_min, 0, LAZYATTN_STATUS_INVALID_ARGUMENT);
    BAD(doc_len_max, 10, LAZYATTN_STATUS_INVALID_ARGUMENT);
    BAD(question_min, -1, LAZYATTN_STATUS_INVALID_ARGUMENT);
    BAD(gen_max, 1, LAZYATTN_STATUS_INVALID_ARGUMENT);
    BAD(n_requests, -1, LAZYATTN_STATUS_INVALID_ARGUMENT);
    BAD(prefix_len, -1, LAZYATTN_STATUS_INVALID_ARGUMENT);
    BAD(vocab_size, -5, LAZYATTN_STATUS_INVALID_ARGUMENT);
    BAD(doc_len_max, 1 << 22, LAZYATTN_STATUS_OUT_OF_RANGE);
    double p;
    lt_assert_status(lazyattn_workload_zipf_pmf(10, 1.0, 11, &p), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_workload_zipf_pmf(10, 0.0, 1, &p), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_workload_zipf_pmf(10, 1.0, 1, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
}

/* k = 1: every draw is one Zipf sample. Chi-square over the ranks with
 * expected count >= 5 (the tail lumped), against the 99.9% quantile
 * (Wilson-Hilferty), and top-rank relative error < 3%. */
static void check_zipf(int n_docs, double alpha, int n) {
    lazyattn_workload_config c;
    lazyattn_workload_config_preset("rag", &c);
    c.n_docs = n_docs;
    c.alpha = alpha;
    c.docs_per_request = 1;
    c.n_requests = n;
    c.doc_len_min = c.doc_len_max = 1;
    c.seed = lt_seed();
    lazyattn_workload *w;
    lt_assert_status(lazyattn_workload_create(&c, &w), LAZYATTN_STATUS_OK);
    long *count = calloc((size_t)n_docs, sizeof *count);
    for (int i = 0; i < n; i++) {
        lazyattn_workload_request r;
        lazyattn_workload_get_request(w, i, &r);
        count[r.doc_ids[0]]++;
    }
    double chi2 = 0, tail_e = 0, tail_o = 0;
    int dof = -1;
    double p1;
    lazyattn_workload_zipf_pmf(n_docs, alpha, 1, &p1);
    for (int r = 0; r < n_docs; r++) {
        double e = p1 * pow(r + 1, -alpha) * n;
        if (e >= 5) {
            chi2 += (count[r] - e) * (count[r] - e) / e;
            dof++;
            if (r < 3) assert_true(fabs(count[r] - e) / e < 0.03);
        } else {
            tail_e += e;
            tail_o += (double)count[r];
        }
    }
    if (tail_e > 0) {
        chi2 += (tail_o - tail_e) * (tail_o - tail_e) / tail_e;
        dof++;
    }
    double z = 3.09, k = dof;
    double q = k * pow(1 - 2 / (9 * k) + z * sqrt(2 / (9 * k)), 3);
    if (chi2 > q)
        print_error("Zipf(%g) over %d: chi2 %.1f > %.1f (dof %d)\n", alpha, n_docs, chi2, q, dof);
    assert_true(chi2 <= q);
    free(count);
    lazyattn_workload_destroy(w);
}

static void test_zipf(void **state) {
    (void)state;
    check_zipf(100, 2.1, 200000);
    check_zipf(10000, 0.9, 200000);
    check_zipf(1000, 1.2, 200000);
}

/* k distinct of D = k: every document in every request, random order;
 * alpha large with k = D - 1 exercises the exact fallback. */
static void test_distinct(void **state) {
    (void)state;
    lazyattn_workload_config c;
    lazyattn_workload_config_preset("paper", &c);
    c.n_docs = 6;
    c.docs_per_request = 6;
    c.alpha = 8;
    c.doc_len_min = c.doc_len_max = 3;
    lazyattn_workload *w;
    lt_assert_status(lazyattn_workload_create(&c, &w), LAZYATTN_STATUS_OK);
    int first[6] = {0};
    for (int i = 0; i < c.n_requests; i++) {
        lazyattn_workload_request r;
        lazyattn_workload_get_request(w, i, &r);
        int seen = 0;
        for (int j = 0; j < 6; j++) seen |= 1 << r.doc_ids[j];
        assert_int_equal(seen, 63);
        first[r.doc_ids[0]]++;
    }
    for (int j = 0; j < 6; j++) assert_true(first[j] > 10); /* shuffled */
    lazyattn_workload_destroy(w);
}

/* Hit ratios by hand: 2 documents of 4 tokens (B = 4), k = 2 of D = 2, so
 * every request holds both in one of two orders; unbounded budget.
 * lazy: only the first request misses -> hits = (R - 1) / R.
 * none: 0. prefix: a hit iff the order was seen before (both docs, or the
 * first doc only when the second order starts with the same doc: never).
 * position: an exact hit iff that order was seen, else copies. */
static void test_hand_hit_ratios(void **state) {
    (void)state;
    lazyattn_workload_config c;
    lazyattn_workload_config_preset("paper", &c);
    c.n_docs = 2;
    c.docs_per_request = 2;
    c.doc_len_min = c.doc_len_max = 4;
    c.n_requests = 40;
    lazyattn_workload *w;
    lt_assert_status(lazyattn_workload_create(&c, &w), LAZYATTN_STATUS_OK);
    int seen_order[2] = {0, 0};
    int64_t want_prefix = 0, want_pos_hit = 0, want_pos_copy = 0;
    for (int i = 0; i < c.n_requests; i++) {
        lazyattn_workload_request r;
        lazyattn_workload_get_request(w, i, &r);
        int o = r.doc_ids[0];
        if (seen_order[o]) {
            want_prefix += 8;
            want_pos_hit += 8;
        } else if (i > 0) {
            want_pos_copy += 8;
        }
        seen_order[o] = 1;
    }
    assert_true(seen_order[0] && seen_order[1]);
    for (int p = 0; p < 4; p++) {
        lazyattn_pool_config pc = {1, 1, 1, 4, LAZYATTN_DTYPE_F32, 1 << 20,
                                   LAZYATTN_KV_LAYOUT_ROWS};
        lazyattn_pool *pool;
        lazyattn_cache *cache;
        lazyattn_cache_config cc = {(lazyattn_cache_policy)p, 0, 0};
        lazyattn_pool_create(NULL, &pc, &pool);
        lazyattn_cache_create(pool, &cc, &cache);
        for (int i = 0; i < c.n_requests; i++) {
            const int32_t *docs[2];
            int32_t lens[2];
            lazyattn_request_desc d;
            lazyattn_request *req;
            lazyattn_workload_get_request_desc(w, i, docs, lens, &d);
            lt_assert_status(lazyattn_request_create(cache, &d, &req), LAZYATTN_STATUS_OK);
            lazyattn_request_commit(req);
            lazyattn_request_destroy(req);
        }
        lazyattn_cache_stats s;
        lazyattn_cache_get_stats(cache, &s);
        assert_int_equal(s.doc_tokens, 8 * c.n_requests);
        switch (p) {
        case LAZYATTN_CACHE_POLICY_LAZY: assert_int_equal(s.hit_tokens, 8 * (c.n_requests - 1)); break;
        case LAZYATTN_CACHE_POLICY_POSITION:
            assert_int_equal(s.hit_tokens, want_pos_hit);
            assert_int_equal(s.copy_tokens, want_pos_copy);
            break;
        case LAZYATTN_CACHE_POLICY_PREFIX: assert_int_equal(s.hit_tokens, want_prefix); break;
        default: assert_int_equal(s.hit_tokens, 0);
        }
        lazyattn_cache_destroy(cache);
        lazyattn_pool_destroy(pool);
    }
    lazyattn_workload_destroy(w);
}

// ---- the second wave: byte-identical presets, length laws, drift, the paper's sampler ----

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* FNV-1a over every document (length, tokens) and request (documents,
 * question, generated length) of a workload. */
static uint64_t workload_digest(const lazyattn_workload_config *c) {
    lazyattn_workload *w;
    lt_assert_status(lazyattn_workload_create(c, &w), LAZYATTN_STATUS_OK);
    uint64_t h = 0xcbf29ce484222325ull;
    for (int d = 0; d < c->n_docs; d++) {
        const int32_t *t;
        int n;
        lazyattn_workload_get_doc(w, d, &t, &n);
        h = fnv(h, &n, sizeof n);
        h = fnv(h, t, (size_t)n * sizeof *t);
    }
    for (int i = 0; i < c->n_requests; i++) {
        lazyattn_workload_request r;
        lazyattn_workload_get_request(w, i, &r);
        h = fnv(h, &r.n_docs, sizeof r.n_docs);
        h = fnv(h, r.doc_ids, (size_t)r.n_docs * sizeof *r.doc_ids);
        h = fnv(h, &r.n_question, sizeof r.n_question);
        h = fnv(h, r.question, (size_t)r.n_question * sizeof *r.question);
        h = fnv(h, &r.n_generate, sizeof r.n_generate);
        assert_int_equal(r.prompt_index, -1);
    }
    lazyattn_workload_destroy(w);
    return h;
}

/* The presets give byte for byte the workloads they gave before the length
 * laws, drift and samplers were added: digests taken with the generator of
 * commit 6005f54 (before the change). A config zeroed and filled field by
 * field (rag_bench, the tests) gives the same as the preset. */
static void test_presets_unchanged(void **state) {
    (void)state;
    static const struct {
        const char *preset;
        uint64_t seed, digest;
    } golden[] = {
        {"paper", 1, 0xfe166a9e65fcd4aaull},
        {"paper", 2, 0xaa485c84d77dd585ull},
        {"rag", 1, 0x020c5a4eb34b304bull},
        {"rag", 2, 0x615f049a875e7f21ull},
    };
    for (size_t i = 0; i < sizeof golden / sizeof *golden; i++) {
        lazyattn_workload_config c;
        lt_assert_status(lazyattn_workload_config_preset(golden[i].preset, &c), LAZYATTN_STATUS_OK);
        assert_int_equal(c.length_dist, LAZYATTN_LENGTH_UNIFORM);
        assert_int_equal(c.sampler, LAZYATTN_SAMPLER_ZIPF);
        assert_int_equal(c.drift_at, 0);
        assert_int_equal(c.n_prompts, 200);
        c.seed = golden[i].seed;
        uint64_t d = workload_digest(&c);
        if (d != golden[i].digest)
            print_error("%s seed %llu: digest 0x%016llx, was 0x%016llx\n", golden[i].preset,
                        (unsigned long long)golden[i].seed, (unsigned long long)d,
                        (unsigned long long)golden[i].digest);
        assert_true(d == golden[i].digest);
        /* the same config zeroed and filled by hand */
        lazyattn_workload_config z;
        memset(&z, 0, sizeof z);
        z.n_docs = c.n_docs;
        z.doc_len_min = c.doc_len_min;
        z.doc_len_max = c.doc_len_max;
        z.docs_per_request = c.docs_per_request;
        z.alpha = c.alpha;
        z.question_min = c.question_min;
        z.question_max = c.question_max;
        z.gen_min = c.gen_min;
        z.gen_max = c.gen_max;
        z.n_requests = c.n_requests;
        z.vocab_size = c.vocab_size;
        z.seed = c.seed;
        assert_true(workload_digest(&z) == golden[i].digest);
    }
    /* Preset parameters of the other laws follow the preset's range. */
    lazyattn_workload_config r;
    lazyattn_workload_config_preset("rag", &r);
    assert_true(r.length_mean == 250.0 && r.length_sigma == 0.5);
    assert_int_equal(r.length_short_max, 175);
    assert_int_equal(r.length_long_min, 325);
    assert_true(r.length_long_fraction == 0.25);
}

static lazyattn_workload *lengths_workload(lazyattn_workload_config *c, int n_docs) {
    c->n_docs = n_docs;
    c->docs_per_request = 1;
    c->n_requests = 1;
    c->seed = lt_seed();
    lazyattn_workload *w;
    lt_assert_status(lazyattn_workload_create(c, &w), LAZYATTN_STATUS_OK);
    return w;
}

/* Lognormal: mean 300, sigma 0.5 over 50 000 documents, bounds far in the
 * tails (4.6 sigma above, far below). Mean of L within 1 % (4 standard
 * errors: sd(L) = 300 sqrt(e^0.25 - 1) = 160), mean of ln L within 0.01 of
 * ln 300 - 0.125 (4.5 SE), sd of ln L within 0.01 of 0.5 (6 SE; rounding
 * to integers moves ln L by < 0.5 / L). Then a wide sigma clamps to bounds. */
static void test_lognormal_lengths(void **state) {
    (void)state;
    lazyattn_workload_config c;
    lazyattn_workload_config_preset("rag", &c);
    c.length_dist = LAZYATTN_LENGTH_LOGNORMAL;
    c.length_mean = 300;
    c.length_sigma = 0.5;
    c.doc_len_min = 1;
    c.doc_len_max = 2600;
    const int D = 50000;
    lazyattn_workload *w = lengths_workload(&c, D);
    double s = 0, sl = 0, sll = 0;
    for (int d = 0; d < D; d++) {
        const int32_t *t;
        int n;
        lazyattn_workload_get_doc(w, d, &t, &n);
        assert_true(n >= 1 && n <= 2600);
        s += n;
        sl += log(n);
        sll += log(n) * log(n);
    }
    double mean = s / D, mlog = sl / D, sdlog = sqrt((sll - D * mlog * mlog) / (D - 1));
    double mu = log(300.0) - 0.125;
    if (fabs(mean - 300) > 3 || fabs(mlog - mu) > 0.01 || fabs(sdlog - 0.5) > 0.01)
        print_error("lognormal: mean %.2f (300), mean ln %.4f (%.4f), sd ln %.4f (0.5)\n", mean,
                    mlog, mu, sdlog);
    assert_true(fabs(mean - 300) <= 3);
    assert_true(fabs(mlog - mu) <= 0.01);
    assert_true(fabs(sdlog - 0.5) <= 0.01);
    lazyattn_workload_destroy(w);

    /* sigma 2 between 50 and 500: clamped, both bounds reached */
    lazyattn_workload_config_preset("rag", &c);
    c.length_dist = LAZYATTN_LENGTH_LOGNORMAL;
    c.length_mean = 200;
    c.length_sigma = 2;
    c.doc_len_min = 50;
    c.doc_len_max = 500;
    w = lengths_workload(&c, 2000);
    int at_min = 0, at_max = 0;
    for (int d = 0; d < 2000; d++) {
        const int32_t *t;
        int n;
        lazyattn_workload_get_doc(w, d, &t, &n);
        assert_true(n >= 50 && n <= 500);
        at_min += n == 50;
        at_max += n == 500;
    }
    assert_true(at_min > 100 && at_max > 100); /* each bound holds > 25 % of the mass */
    lazyattn_workload_destroy(w);
}

/* Bimodal: 20 % long in [1000, 2000], else short in [10, 100], over 50 000
 * documents: the long fraction within 0.008 (4.5 SE), each mode's mean
 * within 4.5 SE of its midpoint, nothing between the modes. */
static void test_bimodal_lengths(void **state) {
    (void)state;
    lazyattn_workload_config c;
    lazyattn_workload_config_preset("rag", &c);
    c.length_dist = LAZYATTN_LENGTH_BIMODAL;
    c.doc_len_min = 10;
    c.length_short_max = 100;
    c.length_long_min = 1000;
    c.doc_len_max = 2000;
    c.length_long_fraction = 0.2;
    const int D = 50000;
    lazyattn_workload *w = lengths_workload(&c, D);
    double s_short = 0, s_long = 0;
    int n_short = 0, n_long = 0;
    for (int d = 0; d < D; d++) {
        const int32_t *t;
        int n;
        lazyattn_workload_get_doc(w, d, &t, &n);
        if (n <= 100) {
            assert_true(n >= 10);
            s_short += n;
            n_short++;
        } else {
            assert_true(n >= 1000 && n <= 2000);
            s_long += n;
            n_long++;
        }
    }
    double frac = (double)n_long / D, m_short = s_short / n_short, m_long = s_long / n_long;
    /* SE: sqrt(0.16 / D) = 0.0018; uniform sds 26.3 and 289 */
    if (fabs(frac - 0.2) > 0.008 || fabs(m_short - 55) > 4.5 * 26.3 / sqrt(n_short) ||
        fabs(m_long - 1500) > 4.5 * 289 / sqrt(n_long))
        print_error("bimodal: long fraction %.4f, short mean %.2f, long mean %.1f\n", frac, m_short,
                    m_long);
    assert_true(fabs(frac - 0.2) <= 0.008);
    assert_true(fabs(m_short - 55) <= 4.5 * 26.3 / sqrt(n_short));
    assert_true(fabs(m_long - 1500) <= 4.5 * 289 / sqrt(n_long));
    lazyattn_workload_destroy(w);
}

/* Drift at request n/2: before it the requests equal the undrifted ones;
 * from it on they are the undrifted ones mapped through one permutation of
 * the documents (consistent and injective, moving nearly every document);
 * questions and generated lengths unchanged. */
static void test_drift(void **state) {
    (void)state;
    lazyattn_workload_config c;
    lazyattn_workload_config_preset("rag", &c);
    c.n_docs = 1000;
    c.docs_per_request = 5;
    c.alpha = 1.0;
    c.n_requests = 2000;
    c.seed = lt_seed();
    lazyattn_workload *plain, *drift;
    lt_assert_status(lazyattn_workload_create(&c, &plain), LAZYATTN_STATUS_OK);
    c.drift_at = c.n_requests / 2;
    lt_assert_status(lazyattn_workload_create(&c, &drift), LAZYATTN_STATUS_OK);
    int32_t map[1000], inverse[1000];
    for (int d = 0; d < 1000; d++) map[d] = inverse[d] = -1;
    int moved = 0, mapped = 0;
    for (int i = 0; i < c.n_requests; i++) {
        lazyattn_workload_request a, b;
        lazyattn_workload_get_request(plain, i, &a);
        lazyattn_workload_get_request(drift, i, &b);
        assert_int_equal(a.n_question, b.n_question);
        assert_memory_equal(a.question, b.question, (size_t)a.n_question * sizeof(int32_t));
        assert_int_equal(a.n_generate, b.n_generate);
        if (i < c.drift_at) {
            assert_memory_equal(a.doc_ids, b.doc_ids, 5 * sizeof(int32_t));
            continue;
        }
        for (int j = 0; j < 5; j++) {
            int x = a.doc_ids[j], y = b.doc_ids[j];
            if (map[x] < 0) {
                assert_int_equal(inverse[y], -1); /* injective */
                map[x] = y;
                inverse[y] = x;
                mapped++;
                moved += x != y;
            }
            assert_int_equal(map[x], y); /* one permutation for all requests */
        }
    }
    /* a random permutation fixes one point on average */
    assert_true(mapped > 100 && moved >= mapped - 10);
    assert_true(map[0] >= 0 && map[0] != 0); /* the most popular moved */
    lazyattn_workload_destroy(plain);
    lazyattn_workload_destroy(drift);
}

/* The paper script's sampler: requests only from the n_prompts fixed
 * prompts (each k consecutive ids mod D, the same every time it is drawn),
 * prompt indices uniform: chi-square over 200 prompts (199 dof) against the
 * 99.9 % quantile (Wilson-Hilferty). */
static void test_paper_sampler(void **state) {
    (void)state;
    lazyattn_workload_config c;
    lazyattn_workload_config_preset("paper", &c);
    c.sampler = LAZYATTN_SAMPLER_PAPER_FIXED_PROMPTS;
    c.doc_len_min = c.doc_len_max = 4;
    c.n_requests = 100000;
    c.seed = lt_seed();
    lazyattn_workload *w;
    lt_assert_status(lazyattn_workload_create(&c, &w), LAZYATTN_STATUS_OK);
    int32_t prompt_docs[200][5];
    long count[200] = {0};
    for (int i = 0; i < c.n_requests; i++) {
        lazyattn_workload_request r;
        lazyattn_workload_get_request(w, i, &r);
        assert_true(r.prompt_index >= 0 && r.prompt_index < 200);
        assert_int_equal(r.n_docs, 5);
        for (int j = 1; j < 5; j++) assert_int_equal(r.doc_ids[j], (r.doc_ids[0] + j) % 100);
        if (count[r.prompt_index]++ == 0)
            memcpy(prompt_docs[r.prompt_index], r.doc_ids, sizeof prompt_docs[0]);
        else
            assert_memory_equal(prompt_docs[r.prompt_index], r.doc_ids, sizeof prompt_docs[0]);
    }
    double e = c.n_requests / 200.0, chi2 = 0;
    for (int p = 0; p < 200; p++) chi2 += (count[p] - e) * (count[p] - e) / e;
    double k = 199, q = k * pow(1 - 2 / (9 * k) + 3.09 * sqrt(2 / (9 * k)), 3);
    if (chi2 > q) print_error("paper sampler: chi2 %.1f > %.1f\n", chi2, q);
    assert_true(chi2 <= q);
    /* reproducible; alpha plays no part */
    lazyattn_workload_config c2 = c;
    c2.alpha = 0.5;
    lazyattn_workload *w2;
    lt_assert_status(lazyattn_workload_create(&c2, &w2), LAZYATTN_STATUS_OK);
    for (int i = 0; i < c.n_requests; i += 997) {
        lazyattn_workload_request a, b;
        lazyattn_workload_get_request(w, i, &a);
        lazyattn_workload_get_request(w2, i, &b);
        assert_int_equal(a.prompt_index, b.prompt_index);
        assert_memory_equal(a.doc_ids, b.doc_ids, 5 * sizeof(int32_t));
    }
    lazyattn_workload_destroy(w);
    lazyattn_workload_destroy(w2);
}

/* Bad values of the new fields: refused, nothing created. */
static void test_bad_new_fields(void **state) {
    (void)state;
    lazyattn_workload_config base, c;
    lazyattn_workload_config_preset("rag", &base);
    base.n_requests = 10;
    lazyattn_workload *w = (lazyattn_workload *)&c;
#define BAD2(stmt)                                                                       \
    c = base;                                                                            \
    stmt;                                                                                \
    lt_assert_status(lazyattn_workload_create(&c, &w), LAZYATTN_STATUS_INVALID_ARGUMENT); \
    assert_null(w);
    BAD2(c.length_dist = (lazyattn_length_dist)3);
    BAD2(c.length_dist = (lazyattn_length_dist)-1);
    BAD2(c.length_dist = LAZYATTN_LENGTH_LOGNORMAL; c.length_mean = 0);
    BAD2(c.length_dist = LAZYATTN_LENGTH_LOGNORMAL; c.length_mean = NAN);
    BAD2(c.length_dist = LAZYATTN_LENGTH_LOGNORMAL; c.length_mean = INFINITY);
    BAD2(c.length_dist = LAZYATTN_LENGTH_LOGNORMAL; c.length_sigma = -0.1);
    BAD2(c.length_dist = LAZYATTN_LENGTH_LOGNORMAL; c.length_sigma = NAN);
    BAD2(c.length_dist = LAZYATTN_LENGTH_LOGNORMAL; c.length_sigma = 4.5);
    BAD2(c.length_dist = LAZYATTN_LENGTH_BIMODAL; c.length_short_max = 99);
    BAD2(c.length_dist = LAZYATTN_LENGTH_BIMODAL; c.length_short_max = 401);
    BAD2(c.length_dist = LAZYATTN_LENGTH_BIMODAL; c.length_long_min = 401);
    BAD2(c.length_dist = LAZYATTN_LENGTH_BIMODAL; c.length_long_fraction = 1.5);
    BAD2(c.length_dist = LAZYATTN_LENGTH_BIMODAL; c.length_long_fraction = NAN);
    BAD2(c.drift_at = -1);
    BAD2(c.sampler = (lazyattn_sampler)2);
    BAD2(c.sampler = LAZYATTN_SAMPLER_PAPER_FIXED_PROMPTS; c.n_prompts = 0);
    BAD2(c.sampler = LAZYATTN_SAMPLER_PAPER_FIXED_PROMPTS; c.n_prompts = -3);
#undef BAD2
    /* prompt slots count against the limits: OUT_OF_RANGE, nothing allocated */
    c = base;
    c.sampler = LAZYATTN_SAMPLER_PAPER_FIXED_PROMPTS;
    c.n_prompts = LAZYATTN_WORKLOAD_MAX_REQUESTS;
    lt_assert_status(lazyattn_workload_create(&c, &w), LAZYATTN_STATUS_OUT_OF_RANGE);
    assert_null(w);
    /* a drift past the last request is allowed and changes nothing */
    c = base;
    c.drift_at = 1000;
    assert_true(workload_digest(&c) == workload_digest(&base));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets_and_reproducible),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_zipf),
        cmocka_unit_test(test_distinct),
        cmocka_unit_test(test_hand_hit_ratios),
        cmocka_unit_test(test_presets_unchanged),
        cmocka_unit_test(test_lognormal_lengths),
        cmocka_unit_test(test_bimodal_lengths),
        cmocka_unit_test(test_drift),
        cmocka_unit_test(test_paper_sampler),
        cmocka_unit_test(test_bad_new_fields),
    };
    return cmocka_run_group_tests_name("workload", tests, NULL, NULL);
}
