/* SPDX-License-Identifier: Apache-2.0 */
/* serve/sampler.c against a reference written here from the definition in
 * sampler.h: ranks by counting (no sort), the nucleus by its definition,
 * the splitmix64 stream from its published constants, the CDF draw; plus
 * draw frequencies against the probabilities, which do not depend on the
 * RNG's definition at all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "sampler.h"
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define V 12
/* ties on purpose: ids 2 and 7, ids 4 and 9 */
static const float LOGITS[V] = {1.5f, -0.5f, 2.0f, 0.25f, 1.0f, -3.0f,
                                0.75f, 2.0f, -1.0f, 1.0f, 0.0f, 3.0f};

/* Rank of token i: how many tokens come before it (higher logit, or equal and lower id). */
static int ref_rank(const float *l, int n, int i) {
    int r = 0;
    for (int j = 0; j < n; j++)
        if (l[j] > l[i] || (l[j] == l[i] && j < i)) r++;
    return r;
}

/* The kept tokens' probabilities by id (0 for the others). */
static void ref_probs(const float *l, int n, double t, int top_k, double top_p, double *p) {
    double lmax = -INFINITY;
    for (int i = 0; i < n; i++) lmax = l[i] > lmax ? l[i] : lmax;
    int k = top_k > 0 && top_k < n ? top_k : n;
    double w[64], sum = 0;
    for (int i = 0; i < n; i++) {
        w[i] = ref_rank(l, n, i) < k ? exp((l[i] - lmax) / t) : 0;
        sum += w[i];
    }
    /* the nucleus: token i stays if the mass ranked strictly before it is below top_p */
    for (int i = 0; i < n; i++) {
        double before = 0;
        for (int j = 0; j < n; j++)
            if (w[j] > 0 && ref_rank(l, n, j) < ref_rank(l, n, i)) before += w[j] / sum;
        p[i] = w[i] > 0 && (top_p >= 1 || before < top_p) ? w[i] : 0;
    }
    double kept = 0;
    for (int i = 0; i < n; i++) kept += p[i];
    for (int i = 0; i < n; i++) p[i] /= kept;
}

static uint64_t ref_splitmix(uint64_t *s) {
    *s += UINT64_C(0x9E3779B97F4A7C15);
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static int ref_draw(const double *p, int n, uint64_t *state) {
    double u = (double)(ref_splitmix(state) >> 11) / 9007199254740992.0;
    double cum = 0;
    int last = -1;
    for (int i = 0; i < n; i++) {
        if (p[i] <= 0) continue;
        last = i;
        cum += p[i];
        if (cum > u) return i;
    }
    return last;
}

static serve_sampler *make(double t, int k, double top_p, uint64_t seed) {
    serve_sampler_config c;
    serve_sampler_config_init(&c);
    c.temperature = t;
    c.top_k = k;
    c.top_p = top_p;
    c.seed = seed;
    serve_sampler *s = NULL;
    assert_int_equal(serve_sampler_create(&c, V, &s), 0);
    return s;
}

static void test_greedy_lowest_id_on_ties(void **state) {
    (void)state;
    float l[V];
    for (int i = 0; i < V; i++) l[i] = LOGITS[i];
    l[11] = 2.0f; /* now 2, 7 and 11 tie at the top */
    serve_sampler *s = make(0, 0, 1, 5);
    int32_t tok = -1;
    assert_int_equal(serve_sampler_sample(s, l, &tok), 0);
    assert_int_equal(tok, 2);
    serve_sampler_destroy(s);
}

/* Every draw of a seeded stream equals the reference's, for several filters. */
static void test_draws_match_reference(void **state) {
    (void)state;
    const struct { double t; int k; double p; uint64_t seed; } cases[] = {
        {1.0, 0, 1.0, 1}, {0.7, 5, 1.0, 42}, {1.3, 0, 0.8, 7}, {0.9, 6, 0.6, 123456789},
        {2.0, 1, 1.0, 3}, {1.0, 0, 1e-9, 9}, {1.0, 4, 0.999, 0xFFFFFFFFFFFFFFFFull}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double p[V];
        ref_probs(LOGITS, V, cases[c].t, cases[c].k, cases[c].p, p);
        uint64_t ref_state = cases[c].seed;
        serve_sampler *s = make(cases[c].t, cases[c].k, cases[c].p, cases[c].seed);
        for (int d = 0; d < 2000; d++) {
            int32_t tok = -1;
            assert_int_equal(serve_sampler_sample(s, LOGITS, &tok), 0);
            int want = ref_draw(p, V, &ref_state);
            if (tok != want) fail_msg("case %zu draw %d: %d, reference %d", c, d, (int)tok, want);
        }
        serve_sampler_destroy(s);
    }
}

/* Frequencies against the probabilities (4 sigma), and filtered tokens never drawn. */
static void test_frequencies(void **state) {
    (void)state;
    const int n_draws = 40000;
    double p[V];
    ref_probs(LOGITS, V, 1.1, 6, 0.9, p);
    int kept = 0;
    for (int i = 0; i < V; i++) kept += p[i] > 0;
    assert_true(kept >= 3 && kept < 6); /* both filters bite */
    serve_sampler *s = make(1.1, 6, 0.9, 2026);
    int count[V] = {0};
    for (int d = 0; d < n_draws; d++) {
        int32_t tok = -1;
        assert_int_equal(serve_sampler_sample(s, LOGITS, &tok), 0);
        assert_true(tok >= 0 && tok < V);
        count[tok]++;
    }
    for (int i = 0; i < V; i++) {
        double sigma = sqrt(n_draws * p[i] * (1 - p[i])) + 1e-9;
        if (p[i] == 0) assert_int_equal(count[i], 0);
        else if (fabs(count[i] - n_draws * p[i]) > 4 * sigma)
            fail_msg("token %d: %d draws, expected %.1f", i, count[i], n_draws * p[i]);
    }
    serve_sampler_destroy(s);
}

static void test_refused(void **state) {
    (void)state;
    serve_sampler_config c;
    serve_sampler_config_init(&c);
    serve_sampler *s = (serve_sampler *)1;
    c.temperature = -1;
    assert_int_equal(serve_sampler_create(&c, V, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(s);
    c.temperature = NAN;
    assert_int_equal(serve_sampler_create(&c, V, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    serve_sampler_config_init(&c);
    c.top_p = 0;
    assert_int_equal(serve_sampler_create(&c, V, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    c.top_p = 1.5;
    assert_int_equal(serve_sampler_create(&c, V, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    serve_sampler_config_init(&c);
    c.top_k = -2;
    assert_int_equal(serve_sampler_create(&c, V, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    serve_sampler_config_init(&c);
    assert_int_equal(serve_sampler_create(&c, 0, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    s = make(1.0, 0, 1, 1);
    float l[V];
    for (int i = 0; i < V; i++) l[i] = LOGITS[i];
    l[3] = NAN;
    int32_t tok;
    assert_int_equal(serve_sampler_sample(s, l, &tok), LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* all -inf: the lowest id, no NaN arithmetic */
    for (int i = 0; i < V; i++) l[i] = -INFINITY;
    assert_int_equal(serve_sampler_sample(s, l, &tok), 0);
    assert_int_equal(tok, 0);
    serve_sampler_destroy(s);
    serve_sampler_destroy(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_lowest_id_on_ties),
        cmocka_unit_test(test_draws_match_reference),
        cmocka_unit_test(test_frequencies),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests_name("sampler", tests, NULL, NULL);
}
