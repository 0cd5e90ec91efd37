/* SPDX-License-Identifier: Apache-2.0 */
/* Results of benchmark runs: per-run summary, the per-policy table, CSV
 * files and two SVG plots written by hand (TTFT CDF per policy; throughput
 * and hit ratio against the KV budget). */
#include "serve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int serve_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double serve_percentile(double *v, int n, double p) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, serve_cmp_double);
    double r = p / 100.0 * (n - 1);
    int i = (int)floor(r);
    if (i >= n - 1) return v[n - 1];
    return v[i] + (r - i) * (v[i + 1] - v[i]);
}

void serve_run_summarise(serve_run_result *r) {
    int n = r->n_requests, ok = 0;
    double *ttft = malloc((size_t)(n ? n : 1) * sizeof *ttft);
    double *e2e = malloc((size_t)(n ? n : 1) * sizeof *e2e);
    double sum_ttft = 0, sum_e2e = 0, sum_tpot = 0;
    int n_tpot = 0;
    long long gen = 0;
    for (int i = 0; i < n; i++) {
        const serve_request_result *q = &r->requests[i];
        if (!q->ok) continue;
        if (ttft) ttft[ok] = q->first_token - q->arrival;
        if (e2e) e2e[ok] = q->finish - q->arrival;
        sum_ttft += q->first_token - q->arrival;
        sum_e2e += q->finish - q->arrival;
        if (q->n_generated > 1) {
            sum_tpot += (q->finish - q->first_token) / (q->n_generated - 1);
            n_tpot++;
        }
        gen += q->n_generated;
        ok++;
    }
    r->n_ok = ok;
    r->n_failed = n - ok;
    r->ttft_mean = ok ? sum_ttft / ok : NAN;
    r->e2e_mean = ok ? sum_e2e / ok : NAN;
    r->tpot_mean = n_tpot ? sum_tpot / n_tpot : NAN;
    r->ttft_p50 = ttft ? serve_percentile(ttft, ok, 50) : NAN;
    r->ttft_p99 = ttft ? serve_percentile(ttft, ok, 99) : NAN;
    r->e2e_p99 = e2e ? serve_percentile(e2e, ok, 99) : NAN;
    free(ttft);
    free(e2e);
    r->req_per_s = r->wall_s > 0 ? ok / r->wall_s : 0;
    r->tok_per_s = r->wall_s > 0 ? (double)gen / r->wall_s : 0;
    const lazyattn_cache_stats *s = &r->stats;
    r->hit_ratio = s->doc_tokens ? (double)s->hit_tokens / (double)s->doc_tokens : 0;
    r->copy_ratio = s->doc_tokens ? (double)s->copy_tokens / (double)s->doc_tokens : 0;
    r->block_hit_ratio = s->doc_blocks ? (double)s->hit_blocks / (double)s->doc_blocks : 0;
}

void serve_run_release(serve_run_result *r) {
    if (!r) return;
    free(r->requests);
    r->requests = NULL;
    r->n_requests = 0;
}

static void serve_budget_text(uint64_t b, char *out, size_t n) {
    if (b >= (1ull << 30) && b % (1ull << 30) == 0)
        snprintf(out, n, "%llu GiB", (unsigned long long)(b >> 30));
    else if (b >= (1ull << 20))
        snprintf(out, n, "%.4g MiB", (double)b / (1 << 20));
    else
        snprintf(out, n, "%.4g KiB", (double)b / 1024);
}

void serve_print_table(FILE *f, const serve_run_result *runs, int n) {
    if (!f || (!runs && n > 0)) return;
    fprintf(f, "| policy | budget | requests (failed) | hit ratio | copy ratio | block hits | "
               "TTFT mean ms | TTFT p50 ms | TTFT p99 ms | TPOT ms | e2e mean ms | req/s | "
               "tok/s | wall s |\n");
    fprintf(f, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | "
               "--- |\n");
    for (int i = 0; i < n; i++) {
        const serve_run_result *r = &runs[i];
        char b[32];
        serve_budget_text(r->budget_bytes, b, sizeof b);
        char cut[48] = "";
        if (r->cut) snprintf(cut, sizeof cut, " of %d, CUT SHORT", r->n_planned);
        if (r->n_ok == 0) { /* every request refused, or none admitted: no latency to report */
            fprintf(f, "| %s%s | %s | 0 (%d)%s | - | - | - | - | - | - | - | - | 0 | 0 | %.1f |\n",
                    r->policy, r->shared ? " (same run)" : "", b, r->n_failed, cut, r->wall_s);
            continue;
        }
        fprintf(f,
                "| %s%s | %s | %d (%d)%s | %.3f | %.3f | %.3f | %.1f | %.1f | %.1f | %.2f | %.1f | "
                "%.2f | %.1f | %.1f |\n",
                r->policy, r->shared ? " (same run)" : "", b, r->n_ok, r->n_failed, cut,
                r->hit_ratio, r->copy_ratio,
                r->block_hit_ratio, 1e3 * r->ttft_mean, 1e3 * r->ttft_p50, 1e3 * r->ttft_p99,
                1e3 * r->tpot_mean, 1e3 * r->e2e_mean, r->req_per_s, r->tok_per_s, r->wall_s);
    }
}

void serve_print_host(FILE *f, const serve_run_result *runs, int n) {
    if (!f || (!runs && n > 0)) return;
    fprintf(f, "| policy | budget | wall s | gemm enqueue s | attention enqueue s | elementwise "
               "enqueue s | uploads s | wait for tokens s | host ms / decode step (steps) | "
               "host ms / prefill forward (forwards) | host CPU ms / decode step | host CPU "
               "ms / prefill forward | of a decode step: tables + uploads us (CPU us) | "
               "enqueues / decode step | enqueues / prefill forward | prefill host ms / request "
               "(forwards / request) |\n| --- "
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
               "| --- |\n");
    for (int i = 0; i < n; i++) {
        const serve_run_result *r = &runs[i];
        char b[32];
        serve_budget_text(r->budget_bytes, b, sizeof b);
        double dec = r->decode_steps ? 1e3 * r->decode_host_s / (double)r->decode_steps : 0;
        double pre = r->prefill_forwards ? 1e3 * r->prefill_host_s / (double)r->prefill_forwards : 0;
        double dec_cpu = r->decode_steps ? 1e3 * r->decode_cpu_s / (double)r->decode_steps : 0;
        double pre_cpu =
            r->prefill_forwards ? 1e3 * r->prefill_cpu_s / (double)r->prefill_forwards : 0;
        double tab = r->decode_steps ? 1e6 * r->decode_tables_s / (double)r->decode_steps : 0;
        double tab_cpu =
            r->decode_steps ? 1e6 * r->decode_tables_cpu_s / (double)r->decode_steps : 0;
        double enq_dec = r->decode_steps ? (double)r->decode_enqueues / (double)r->decode_steps : 0;
        double enq_pre =
            r->prefill_forwards ? (double)r->prefill_enqueues / (double)r->prefill_forwards : 0;
        double req = r->prefill_requests ? 1e3 * r->prefill_host_s / (double)r->prefill_requests : 0;
        double fpr =
            r->prefill_requests ? (double)r->prefill_forwards / (double)r->prefill_requests : 0;
        fprintf(f,
                "| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.3f (%lld) | %.3f (%lld) "
                "| %.3f | %.3f | %.1f (%.1f) | %.1f | %.1f | %.2f (%.2f) |\n",
                r->policy, b, r->wall_s, r->host_s[SERVE_PHASE_GEMM],
                r->host_s[SERVE_PHASE_ATTENTION], r->host_s[SERVE_PHASE_ELEMENTWISE], r->upload_s,
                r->wait_s, dec, (long long)r->decode_steps, pre, (long long)r->prefill_forwards,
                dec_cpu, pre_cpu, tab, tab_cpu, enq_dec, enq_pre, req, fpr);
    }
}

void serve_print_phases(FILE *f, const serve_run_result *runs, int n) {
    if (!f || (!runs && n > 0)) return;
    fprintf(f, "| policy | budget | wall s | gemm s | attention s | copy s | elementwise s | "
               "host, sync, idle s |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < n; i++) {
        const serve_run_result *r = &runs[i];
        char b[32];
        serve_budget_text(r->budget_bytes, b, sizeof b);
        double dev = 0;
        for (int p = 0; p < SERVE_PHASE_COUNT; p++) dev += r->phase_s[p];
        fprintf(f, "| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", r->policy, b,
                r->wall_s, r->phase_s[SERVE_PHASE_GEMM], r->phase_s[SERVE_PHASE_ATTENTION],
                r->phase_s[SERVE_PHASE_COPY], r->phase_s[SERVE_PHASE_ELEMENTWISE],
                r->wall_s - dev > 0 ? r->wall_s - dev : 0.0);
    }
}

/* The writers' start: their arguments checked (a path, and runs unless n
 * is 0) and path opened for writing into *f. */
static int serve_open_report(const char *who, const char *path, const serve_run_result *runs, int n,
                             FILE **f) {
    if (!path || !path[0] || n < 0 || (!runs && n > 0))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "%s: %s path, %d runs at %p", who, path ? "an empty" : "a NULL", n,
                          (const void *)runs);
    for (int i = 0; i < n; i++)
        if (runs[i].n_requests < 0 || (!runs[i].requests && runs[i].n_requests > 0))
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                              "%s: run %d: %d requests at %p", who, i, runs[i].n_requests,
                              (const void *)runs[i].requests);
    *f = fopen(path, "w");
    if (!*f) return serve_fail(LAZYATTN_STATUS_IO, "cannot write %s", path);
    return LAZYATTN_STATUS_OK;
}

/* Closes a file written with stdio: IO if any write or the close failed. */
static int serve_close_written(FILE *f, const char *path) {
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return serve_fail(LAZYATTN_STATUS_IO, "error writing %s", path);
    return LAZYATTN_STATUS_OK;
}

int serve_write_csv(const char *path, const serve_run_result *runs, int n) {
    FILE *f;
    int st = serve_open_report("serve_write_csv", path, runs, n, &f);
    if (st) return st;
    fprintf(f, "policy,budget_bytes,request,ok,arrival_s,ttft_s,tpot_s,e2e_s,prompt_tokens,"
               "generated,doc_tokens,hit_tokens,copy_tokens\n");
    for (int i = 0; i < n; i++)
        for (int j = 0; j < runs[i].n_requests; j++) {
            const serve_request_result *q = &runs[i].requests[j];
            double tpot = q->ok && q->n_generated > 1
                              ? (q->finish - q->first_token) / (q->n_generated - 1)
                              : 0.0;
            fprintf(f, "%s,%llu,%d,%d,%.6f,%.6f,%.6f,%.6f,%d,%d,%d,%d,%d\n", runs[i].policy,
                    (unsigned long long)runs[i].budget_bytes, q->id, q->ok, q->arrival,
                    q->ok ? q->first_token - q->arrival : 0.0, tpot,
                    q->ok ? q->finish - q->arrival : 0.0, q->n_prompt, q->n_generated,
                    q->doc_tokens, q->hit_tokens, q->copy_tokens);
        }
    return serve_close_written(f, path);
}

int serve_write_summary_csv(const char *path, const serve_run_result *runs, int n) {
    FILE *f;
    int st = serve_open_report("serve_write_summary_csv", path, runs, n, &f);
    if (st) return st;
    fprintf(f, "policy,budget_bytes,requests,failed,hit_ratio,copy_ratio,block_hit_ratio,"
               "ttft_mean_s,ttft_p50_s,ttft_p99_s,tpot_mean_s,e2e_mean_s,e2e_p99_s,req_per_s,"
               "tok_per_s,wall_s,gemm_s,attention_s,copy_s,elementwise_s,evictions,planned,"
               "complete,limit_s,shared_run,pool_bytes,prefill_boundaries,interleaved_decodes\n");
    for (int i = 0; i < n; i++) {
        const serve_run_result *r = &runs[i];
        fprintf(f, "%s,%llu,%d,%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.4f,%.4f,%.4f,"
                   "%.4f,%.4f,%.4f,%.4f,%lld,%d,%d,%.3f,%d,%llu,%lld,%lld\n",
                r->policy, (unsigned long long)r->budget_bytes, r->n_ok, r->n_failed,
                r->hit_ratio, r->copy_ratio, r->block_hit_ratio, r->ttft_mean, r->ttft_p50,
                r->ttft_p99, r->tpot_mean, r->e2e_mean, r->e2e_p99, r->req_per_s, r->tok_per_s,
                r->wall_s, r->phase_s[0], r->phase_s[1], r->phase_s[2], r->phase_s[3],
                (long long)r->stats.evictions, r->n_planned, !r->cut, r->limit_s, r->shared,
                (unsigned long long)r->pool_bytes, (long long)r->between_calls,
                (long long)r->interleaved_decodes);
    }
    return serve_close_written(f, path);
}

/* ---- SVG ---- */

static const char *serve_policy_colour(const char *policy) {
    if (strcmp(policy, "lazy") == 0) return "#1f77b4";
    if (strcmp(policy, "position") == 0) return "#d62728";
    if (strcmp(policy, "prefix") == 0) return "#2ca02c";
    return "#7f7f7f";
}

/* A plot frame at (x0, y0) of size w x h with axis labels and ticks. */
typedef struct serve_frame {
    double x0, y0, w, h;
    double xmin, xmax, ymin, ymax;
    int xlog;
} serve_frame;

static double serve_fx(const serve_frame *p, double x) {
    double t = p->xlog ? (log2(x) - log2(p->xmin)) / (log2(p->xmax) - log2(p->xmin))
                       : (x - p->xmin) / (p->xmax - p->xmin);
    t = !(t == t) ? 0.5 : t < 0 ? 0 : t > 1 ? 1 : t; /* NaN, inf: a number in the frame */
    return p->x0 + t * p->w;
}
static double serve_fy(const serve_frame *p, double y) {
    double t = (y - p->ymin) / (p->ymax - p->ymin);
    t = !(t == t) ? 0.5 : t < 0 ? 0 : t > 1 ? 1 : t;
    return p->y0 + p->h - t * p->h;
}

static void serve_svg_frame(FILE *f, const serve_frame *p, const char *title, const char *xlabel,
                            const char *ylabel) {
    fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#333'/>\n",
            p->x0, p->y0, p->w, p->h);
    fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='14'>%s</text>\n",
            p->x0 + p->w / 2, p->y0 - 10, title);
    fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='12'>%s</text>\n",
            p->x0 + p->w / 2, p->y0 + p->h + 36, xlabel);
    fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='12' "
               "transform='rotate(-90 %.1f %.1f)'>%s</text>\n",
            p->x0 - 48, p->y0 + p->h / 2, p->x0 - 48, p->y0 + p->h / 2, ylabel);
    for (int i = 0; i <= 4; i++) {
        double y = p->ymin + (p->ymax - p->ymin) * i / 4;
        fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='end' font-size='10'>%.3g</text>\n",
                p->x0 - 4, serve_fy(p, y) + 3, y);
        fprintf(f, "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='#ddd'/>\n", p->x0,
                p->x0 + p->w, serve_fy(p, y), serve_fy(p, y));
    }
}

static void serve_svg_legend(FILE *f, double x, double y, const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        fprintf(f, "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='%s' stroke-width='2'/>\n",
                x, x + 20, y + 16 * i, y + 16 * i, serve_policy_colour(names[i]));
        fprintf(f, "<text x='%.1f' y='%.1f' font-size='11'>%s</text>\n", x + 24, y + 16 * i + 4,
                names[i]);
    }
}

/* Distinct policy names of the runs, in order of first appearance. */
static int serve_policies(const serve_run_result *runs, int n, const char **names) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < k; j++) seen |= strcmp(names[j], runs[i].policy) == 0;
        if (!seen && k < 8) names[k++] = runs[i].policy;
    }
    return k;
}

/* One TTFT CDF panel (runs at budget) with its frame at (x0, y0); the
 * policies drawn are added to names[*k]. */
static void serve_svg_ttft_panel(FILE *f, const serve_run_result *runs, int n, uint64_t budget,
                                 double x0, double y0, const char **names, int *k) {
    double tmax = 0;
    for (int i = 0; i < n; i++)
        if (runs[i].budget_bytes == budget)
            for (int j = 0; j < runs[i].n_requests; j++)
                if (runs[i].requests[j].ok) {
                    double t = 1e3 * (runs[i].requests[j].first_token - runs[i].requests[j].arrival);
                    if (isfinite(t) && t > tmax) tmax = t;
                }
    if (tmax <= 0) tmax = 1;
    serve_frame p = {x0, y0, 520, 300, 0, tmax * 1.05, 0, 1, 0};
    char b[32], title[96];
    serve_budget_text(budget, b, sizeof b);
    int cut = 0;
    for (int i = 0; i < n; i++) cut |= runs[i].budget_bytes == budget && runs[i].cut;
    snprintf(title, sizeof title, "TTFT distribution per policy (KV budget %s)%s", b,
             cut ? " - a run CUT SHORT" : "");
    serve_svg_frame(f, &p, title, "time to first token (ms)", "fraction of requests");
    for (int i = 0; i <= 4; i++) {
        double x = p.xmin + (p.xmax - p.xmin) * i / 4;
        fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='10'>%.3g</text>\n",
                serve_fx(&p, x), p.y0 + p.h + 14, x);
    }
    for (int i = 0; i < n; i++) {
        const serve_run_result *r = &runs[i];
        if (r->budget_bytes != budget || r->n_requests == 0) continue;
        double *v = malloc((size_t)r->n_requests * sizeof *v);
        if (!v) continue;
        int m = 0;
        for (int j = 0; j < r->n_requests; j++) {
            double t = 1e3 * (r->requests[j].first_token - r->requests[j].arrival);
            if (r->requests[j].ok && isfinite(t)) v[m++] = t; /* NaN / inf: not drawable */
        }
        qsort(v, (size_t)m, sizeof *v, serve_cmp_double);
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='",
                serve_policy_colour(r->policy));
        for (int j = 0; j < m; j++)
            fprintf(f, "%.1f,%.1f %.1f,%.1f ", serve_fx(&p, v[j]), serve_fy(&p, (double)j / m),
                    serve_fx(&p, v[j]), serve_fy(&p, (double)(j + 1) / m));
        fprintf(f, "'/>\n");
        free(v);
        int seen = 0;
        for (int j = 0; j < *k; j++) seen |= strcmp(names[j], r->policy) == 0;
        if (!seen && *k < 8) names[(*k)++] = r->policy;
    }
}

int serve_write_svg_ttft(const char *path, const serve_run_result *runs, int n, uint64_t budget) {
    FILE *f;
    int st = serve_open_report("serve_write_svg_ttft", path, runs, n, &f);
    if (st) return st;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='720' height='400' "
               "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n");
    const char *names[8];
    int k = 0;
    serve_svg_ttft_panel(f, runs, n, budget, 70, 40, names, &k);
    serve_svg_legend(f, 610, 60, names, k);
    fprintf(f, "</svg>\n");
    return serve_close_written(f, path);
}

int serve_write_svg_ttft_budgets(const char *path, const serve_run_result *runs, int n) {
    FILE *f;
    int st = serve_open_report("serve_write_svg_ttft_budgets", path, runs, n, &f);
    if (st) return st;
    uint64_t budgets[16];
    int nb = 0;
    for (int i = 0; i < n && nb < 16; i++) {
        int seen = 0;
        for (int j = 0; j < nb; j++) seen |= budgets[j] == runs[i].budget_bytes;
        if (!seen) budgets[nb++] = runs[i].budget_bytes;
    }
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='400' "
               "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
            70 + 600 * (nb ? nb : 1) + 110);
    const char *names[8];
    int k = 0;
    for (int i = 0; i < nb; i++)
        serve_svg_ttft_panel(f, runs, n, budgets[i], 70 + 600 * i, 40, names, &k);
    serve_svg_legend(f, 70 + 600 * (nb ? nb : 1) - 40, 60, names, k);
    fprintf(f, "</svg>\n");
    return serve_close_written(f, path);
}

int serve_write_svg_budget(const char *path, const serve_run_result *runs, int n) {
    FILE *f;
    int st = serve_open_report("serve_write_svg_budget", path, runs, n, &f);
    if (st) return st;
    double bmin = 0, bmax = 0, tmax = 0;
    for (int i = 0; i < n; i++) {
        double b = (double)runs[i].budget_bytes / (1 << 20);
        if (bmin == 0 || b < bmin) bmin = b;
        if (b > bmax) bmax = b;
        if (isfinite(runs[i].req_per_s) && runs[i].req_per_s > tmax) tmax = runs[i].req_per_s;
    }
    if (bmax <= bmin) bmax = bmin * 2 + 1;
    if (tmax <= 0) tmax = 1;
    serve_frame pt = {70, 40, 380, 300, bmin, bmax, 0, tmax * 1.1, 1};
    serve_frame ph = {540, 40, 380, 300, bmin, bmax, 0, 1, 1};
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='1060' height='400' "
               "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n");
    serve_svg_frame(f, &pt, "Throughput vs KV budget", "KV budget (MiB, log scale)", "requests / s");
    serve_svg_frame(f, &ph, "Hit ratio vs KV budget", "KV budget (MiB, log scale)",
                    "document-token hit ratio");
    const serve_frame *frames[2] = {&pt, &ph};
    for (int fi = 0; fi < 2; fi++)
        for (int i = 0; i < n; i++) {
            int seen = 0;
            for (int j = 0; j < i; j++) seen |= runs[j].budget_bytes == runs[i].budget_bytes;
            if (seen) continue;
            double b = (double)runs[i].budget_bytes / (1 << 20);
            fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='10'>%.4g</text>\n",
                    serve_fx(frames[fi], b), frames[fi]->y0 + frames[fi]->h + 14, b);
        }
    const char *names[8];
    int k = serve_policies(runs, n, names);
    for (int pi = 0; pi < k; pi++)
        for (int fi = 0; fi < 2; fi++) {
            fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='",
                    serve_policy_colour(names[pi]));
            for (int i = 0; i < n; i++) /* runs come in increasing budget order per policy */
                if (strcmp(runs[i].policy, names[pi]) == 0)
                    fprintf(f, "%.1f,%.1f ", serve_fx(frames[fi], (double)runs[i].budget_bytes / (1 << 20)),
                            serve_fy(frames[fi], fi == 0 ? runs[i].req_per_s : runs[i].hit_ratio));
            fprintf(f, "'/>\n");
            for (int i = 0; i < n; i++)
                if (strcmp(runs[i].policy, names[pi]) == 0)
                    fprintf(f, "<circle cx='%.1f' cy='%.1f' r='3' fill='%s'/>\n",
                            serve_fx(frames[fi], (double)runs[i].budget_bytes / (1 << 20)),
                            serve_fy(frames[fi], fi == 0 ? runs[i].req_per_s : runs[i].hit_ratio),
                            serve_policy_colour(names[pi]));
        }
    /* position-aware: tokens served by a copy count as served from the cache too */
    int any_copy = 0;
    for (int i = 0; i < n; i++) any_copy |= runs[i].copy_ratio > 0;
    if (any_copy) {
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' stroke-dasharray='6 4' "
                   "points='", serve_policy_colour("position"));
        for (int i = 0; i < n; i++)
            if (strcmp(runs[i].policy, "position") == 0)
                fprintf(f, "%.1f,%.1f ", serve_fx(&ph, (double)runs[i].budget_bytes / (1 << 20)),
                        serve_fy(&ph, runs[i].hit_ratio + runs[i].copy_ratio));
        fprintf(f, "'/>\n<text x='940' y='%d' font-size='11'>dashed: position,</text>\n"
                   "<text x='940' y='%d' font-size='11'>hits + copy hits</text>\n",
                60 + 16 * k + 8, 60 + 16 * k + 22);
    }
    serve_svg_legend(f, 940, 60, names, k);
    fprintf(f, "</svg>\n");
    return serve_close_written(f, path);
}
