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
        lazyattn_pool_config pc = {1, 1, 1, 4, LAZYATTN_DTYPE_F32, 1 << 20};
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets_and_reproducible),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_zipf),
        cmocka_unit_test(test_distinct),
        cmocka_unit_test(test_hand_hit_ratios),
    };
    return cmocka_run_group_tests_name("workload", tests, NULL, NULL);
}
