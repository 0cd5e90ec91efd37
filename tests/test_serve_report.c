/* SPDX-License-Identifier: Apache-2.0 */
/* serve/report.c on odd runs: no requests, every request refused, a run
 * cut short with nothing admitted, NaN and infinite times, a shared run.
 * Every writer gives a status (never a crash); the files it writes have one
 * row per request (CSV), one row per run with every column (summary), and
 * plots with numbers only (no "nan" / "inf" coordinates). Bad arguments are
 * refused with INVALID_ARGUMENT and a message; an unwritable path with IO.
 * No device needed. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "serve.h"

enum { N_RUNS = 5 };

/* Runs of policy lazy/none over two budgets: 0 a normal run of 3 requests
 * (one with NaN times, one with an infinite TTFT), 1 no request at all, 2
 * every request refused, 3 cut short with nothing admitted, 4 a copy of run
 * 1 at the second budget. */
static void make_runs(serve_run_result *runs) {
    memset(runs, 0, N_RUNS * sizeof *runs);
    const char *policy[N_RUNS] = {"lazy", "none", "lazy", "none", "none"};
    uint64_t budget[N_RUNS] = {1 << 20, 1 << 20, 4 << 20, 4 << 20, 4 << 20};
    for (int i = 0; i < N_RUNS; i++) {
        snprintf(runs[i].policy, sizeof runs[i].policy, "%s", policy[i]);
        runs[i].budget_bytes = budget[i];
        runs[i].n_planned = 3;
        runs[i].wall_s = i == 1 ? 0 : 1.5;
    }
    serve_request_result *q = calloc(3, sizeof *q);
    assert_non_null(q);
    for (int j = 0; j < 3; j++) {
        q[j].id = j;
        q[j].ok = 1;
        q[j].arrival = 0.1 * j;
        q[j].first_token = 0.1 * j + 0.02 + 0.01 * j;
        q[j].finish = q[j].first_token + 0.05;
        q[j].n_generated = 4;
        q[j].n_prompt = 40;
    }
    q[1].first_token = NAN;
    q[1].finish = NAN;
    q[2].first_token = INFINITY;
    runs[0].requests = q;
    runs[0].n_requests = 3;
    serve_request_result *r = calloc(2, sizeof *r); /* refused */
    assert_non_null(r);
    runs[2].requests = r;
    runs[2].n_requests = 2;
    runs[3].cut = 1; /* nothing admitted before the limit */
    runs[3].limit_s = 1e-3;
    runs[4] = runs[1];
    runs[4].budget_bytes = 4 << 20;
    runs[4].shared = 1;
    runs[1].budget_bytes = 1 << 20;
    for (int i = 0; i < N_RUNS; i++) serve_run_summarise(&runs[i]);
}

static void free_runs(serve_run_result *runs) {
    for (int i = 0; i < N_RUNS; i++) serve_run_release(&runs[i]);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static int count_char(const char *s, char c) {
    int k = 0;
    for (; *s; s++) k += *s == c;
    return k;
}

static void tmp_path(char *out, size_t n, const char *name) {
    const char *dir = getenv("TMPDIR");
    snprintf(out, n, "%s/test_serve_report_%d_%s", dir && *dir ? dir : "/tmp", (int)getpid(),
             name);
}

/* The summaries of the odd runs: counts right, NaN where nothing was measured. */
static void test_summaries(void **state) {
    (void)state;
    serve_run_result runs[N_RUNS];
    make_runs(runs);
    assert_int_equal(runs[0].n_ok, 3);
    assert_int_equal(runs[1].n_ok, 0);
    assert_int_equal(runs[1].n_failed, 0);
    assert_true(isnan(runs[1].ttft_mean));
    assert_true(runs[1].req_per_s == 0); /* wall 0: no division */
    assert_int_equal(runs[2].n_ok, 0);
    assert_int_equal(runs[2].n_failed, 2);
    assert_true(isnan(runs[2].ttft_p99));
    free_runs(runs);
}

/* The files of the odd runs: every writer succeeds, the rows are all
 * there, a cut run is never complete, the plots hold numbers only. */
static void test_files_of_odd_runs(void **state) {
    (void)state;
    serve_run_result runs[N_RUNS];
    make_runs(runs);
    char csv[512], sum[512], ttft[512], budgets[512], budget[512];
    tmp_path(csv, sizeof csv, "r.csv");
    tmp_path(sum, sizeof sum, "s.csv");
    tmp_path(ttft, sizeof ttft, "t.svg");
    tmp_path(budgets, sizeof budgets, "tb.svg");
    tmp_path(budget, sizeof budget, "b.svg");
    assert_int_equal(serve_write_csv(csv, runs, N_RUNS), 0);
    assert_int_equal(serve_write_summary_csv(sum, runs, N_RUNS), 0);
    assert_int_equal(serve_write_svg_ttft(ttft, runs, N_RUNS, 1 << 20), 0);
    assert_int_equal(serve_write_svg_ttft_budgets(budgets, runs, N_RUNS), 0);
    assert_int_equal(serve_write_svg_budget(budget, runs, N_RUNS), 0);

    char *s = slurp(csv);
    assert_non_null(s);
    assert_int_equal(count_char(s, '\n'), 1 + 3 + 2); /* header, 3 + 2 requests */
    free(s);

    s = slurp(sum);
    assert_non_null(s);
    assert_int_equal(count_char(s, '\n'), 1 + N_RUNS);
    /* every row has the header's columns; the cut run is complete=0 */
    char *save = NULL, *line = strtok_r(s, "\n", &save);
    int cols = count_char(line, ',');
    int complete_col = -1, c = 0;
    for (const char *p = line; p; p = strchr(p, ','), p = p ? p + 1 : NULL, c++)
        if (strncmp(p, "complete,", 9) == 0) complete_col = c;
    assert_true(complete_col > 0);
    for (int i = 0; i < N_RUNS; i++) {
        line = strtok_r(NULL, "\n", &save);
        assert_non_null(line);
        assert_int_equal(count_char(line, ','), cols);
        const char *p = line;
        for (int k = 0; k < complete_col; k++) p = strchr(p, ',') + 1;
        assert_int_equal(atoi(p), runs[i].cut ? 0 : 1);
    }
    free(s);

    const char *svgs[3] = {ttft, budgets, budget};
    for (int i = 0; i < 3; i++) {
        s = slurp(svgs[i]);
        assert_non_null(s);
        if (strstr(s, "nan") || strstr(s, "inf"))
            fail_msg("%s holds a non-number: %.200s", svgs[i], strstr(s, "nan") ? strstr(s, "nan")
                                                                                : strstr(s, "inf"));
        size_t n = strlen(s);
        assert_true(n > 7 && strcmp(s + n - 7, "</svg>\n") == 0);
        free(s);
        remove(svgs[i]);
    }
    /* zero runs: files with their headers only */
    assert_int_equal(serve_write_csv(csv, NULL, 0), 0);
    assert_int_equal(serve_write_summary_csv(sum, NULL, 0), 0);
    assert_int_equal(serve_write_svg_ttft_budgets(budgets, NULL, 0), 0);
    assert_int_equal(serve_write_svg_budget(budget, NULL, 0), 0);
    remove(csv);
    remove(sum);
    remove(budgets);
    remove(budget);
    free_runs(runs);
}

/* The table marks a cut run and a shared one even when nothing completed. */
static void test_table_marks(void **state) {
    (void)state;
    serve_run_result runs[N_RUNS];
    make_runs(runs);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_non_null(f);
    serve_print_table(f, runs, N_RUNS);
    serve_print_phases(f, runs, N_RUNS);
    serve_print_host(f, runs, N_RUNS);
    serve_print_table(NULL, runs, N_RUNS); /* no-ops */
    serve_print_table(f, NULL, 3);
    fclose(f);
    assert_non_null(strstr(buf, "| none | 4 MiB | 0 (0) of 3, CUT SHORT |"));
    assert_non_null(strstr(buf, "| none (same run) | 4 MiB | 0 (0) |"));
    assert_non_null(strstr(buf, "| lazy | 4 MiB | 0 (2) |"));
    free(buf);
    free_runs(runs);
}

/* Bad arguments: INVALID_ARGUMENT with a message; a path that cannot be
 * written: IO naming it. */
static void test_bad_arguments(void **state) {
    (void)state;
    serve_run_result runs[N_RUNS];
    make_runs(runs);
    char path[512];
    tmp_path(path, sizeof path, "bad.csv");
    int (*writers[4])(const char *, const serve_run_result *, int) = {
        serve_write_csv, serve_write_summary_csv, serve_write_svg_ttft_budgets,
        serve_write_svg_budget};
    for (int w = 0; w < 4; w++) {
        assert_int_equal(writers[w](NULL, runs, N_RUNS), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_int_equal(writers[w]("", runs, N_RUNS), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_int_equal(writers[w](path, NULL, 2), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_int_equal(writers[w](path, runs, -1), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_true(serve_last_error()[0] != 0);
        assert_int_equal(writers[w]("/nonexistent-dir/x/y", runs, N_RUNS), LAZYATTN_STATUS_IO);
        assert_non_null(strstr(serve_last_error(), "/nonexistent-dir/x/y"));
    }
    assert_int_equal(serve_write_svg_ttft(NULL, runs, N_RUNS, 1 << 20),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    serve_request_result *keep = runs[0].requests;
    runs[0].requests = NULL; /* 3 requests claimed, none there */
    assert_int_equal(serve_write_csv(path, runs, N_RUNS), LAZYATTN_STATUS_INVALID_ARGUMENT);
    runs[0].requests = keep;
    free_runs(runs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_summaries),
        cmocka_unit_test(test_files_of_odd_runs),
        cmocka_unit_test(test_table_marks),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests_name("serve_report", tests, NULL, NULL);
}
