/* Hit-ratio study: the four cache policies over one seeded RAG request
 * stream at a list of KV budgets, on a bookkeeping pool (no device, no
 * kernels). Prints policy x budget -> token hit ratio, block hit ratio,
 * copy hits and evictions, writes a CSV and an SVG plot.
 *
 *   hitratio [--preset paper|rag] [--docs D] [--doc-len N | --doc-len-min A --doc-len-max B]
 *            [--k K] [--alpha A] [--requests R] [--seed S] [--question A-B] [--gen A-B]
 *            [--prefix N] [--warmup W] [--budgets auto|LIST] [--points N]
 *            [--layers L --kv-heads H --head-dim D --dtype f16|bf16|f32 --block-size B]
 *            [--strict] [--csv FILE] [--svg FILE] [--quiet]
 *
 * Budget: by default the bytes of KV the cache keeps between requests
 * (retain limit); the pool also holds the running request's working set on
 * top of it, as a serving engine's activations would. With --strict the
 * budget is the whole pool: a request's working set must fit in it.
 * Hit ratio = document tokens served from the cache / document tokens
 * requested, over the requests after the warm-up. Position-aware copy hits
 * (re-rotated copies: no recompute, but a copy kernel and more memory) are
 * not hits; the table shows them apart and "hit+copy" counts them as hits.
 * Budgets take B, KiB, MiB, GiB or tok (tokens of the model shape). */
#include "cli_options.h"
#include "lazyattn.h"
#include "lazyattn_testing.h" /* the reference, the workload generator */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUDGETS 64

typedef struct options {
    lazyattn_workload_config wl;
    int warmup;
    int n_layers, n_kv_heads, head_dim, block_size;
    lazyattn_dtype dtype;
    uint64_t budgets[MAX_BUDGETS];
    int n_budgets; /* 0 = auto */
    int points;
    int strict;
    int quiet;
    const char *csv, *svg;
} options;

typedef struct result {
    uint64_t budget;
    int ok;
    lazyattn_cache_stats s;
} result;

static const char usage_text[] =
    "usage: hitratio [--preset paper|rag] [--docs D] [--doc-len N | --doc-len-min A --doc-len-max B]\n"
    "                [--k K] [--alpha A] [--requests R] [--seed S] [--question A-B] [--gen A-B]\n"
    "                [--prefix N] [--warmup W] [--budgets auto|LIST] [--points N]\n"
    "                [--layers L --kv-heads H --head-dim D --dtype f16|bf16|f32 --block-size B]\n"
    "                [--strict] [--csv FILE] [--svg FILE] [--quiet]\n"
    "Budgets take B, KiB, MiB, GiB, TiB or tok (tokens of the model shape), comma separated.\n"
    "Default: --preset paper, Llama-3.1-8B KV shape, budgets from one document to the whole pool,\n"
    "hitratio.csv and hitratio.svg. Budget = KV kept between requests; --strict: the whole pool.\n";

static void format_size(uint64_t b, char *buf, size_t n) {
    if (b >= (1ull << 30)) snprintf(buf, n, "%.3gGiB", b / 1073741824.0);
    else if (b >= (1ull << 20)) snprintf(buf, n, "%.4gMiB", b / 1048576.0);
    else snprintf(buf, n, "%lluB", (unsigned long long)b);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double ratio(int64_t a, int64_t b) { return b ? 100.0 * (double)a / (double)b : 0.0; }

/* "5.26x", or "n/a" when the denominator had no hits. buf: 32 bytes. */
static const char *times(char *buf, int64_t a, int64_t b) {
    if (b) snprintf(buf, 32, "%.2fx", (double)a / (double)b);
    else snprintf(buf, 32, "n/a (0 hits)");
    return buf;
}

// ---- one run: one policy, one budget ----

static int run_one(const options *o, lazyattn_workload *wl, lazyattn_cache_policy policy,
                   uint64_t budget, uint64_t headroom, lazyattn_cache_stats *out) {
    lazyattn_pool_config pc = {o->n_layers, o->n_kv_heads, o->head_dim, o->block_size, o->dtype,
                               o->strict ? budget : budget + headroom};
    lazyattn_pool *pool = NULL;
    lazyattn_cache *cache = NULL;
    lazyattn_cache_config cc = {policy, 0x11a3a3, o->strict ? 0 : budget};
    int st = lazyattn_pool_create(NULL, &pc, &pool);
    if (!st) st = lazyattn_cache_create(pool, &cc, &cache);
    const int32_t **docs = malloc(sizeof *docs * (size_t)o->wl.docs_per_request);
    int32_t *lens = malloc(sizeof *lens * (size_t)o->wl.docs_per_request);
    int32_t slots[64], pos[64];
    if (!st && (!docs || !lens)) st = LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
    int i = 0;
    for (; !st && i < o->wl.n_requests; i++) {
        if (i == o->warmup) lazyattn_cache_reset_stats(cache);
        lazyattn_request_desc d;
        lazyattn_request *req = NULL;
        st = lazyattn_workload_get_request_desc(wl, i, docs, lens, &d);
        if (!st) st = lazyattn_request_create(cache, &d, &req);
        if (st) break;
        /* Prefill would run here; then the documents become entries. */
        lazyattn_request_commit(req);
        for (int g = d.max_new_tokens; !st && g > 0; g -= 64)
            st = lazyattn_request_append(req, g < 64 ? g : 64, slots, pos);
        lazyattn_request_destroy(req);
        if (st) break;
    }
    if (!st) {
        lazyattn_cache_get_stats(cache, out);
        st = lazyattn_cache_validate(cache);
    }
    if (st)
        fprintf(stderr, "hitratio: %s, budget %llu B, after %d requests: %s (%s)\n",
                lazyattn_cache_policy_name(policy), (unsigned long long)budget, i,
                lazyattn_status_string(st), lazyattn_last_error());
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
    free(docs);
    free(lens);
    return st;
}

// ---- SVG ----

static const char *const colours[4] = {"#d62728", "#1f77b4", "#2ca02c", "#7f7f7f"};

static int write_svg(const char *path, const options *o, const result res[][4], int nb,
                     uint64_t token_bytes) {
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    const double W = 900, H = 460, L = 70, R = 230, T = 40, Bm = 60;
    double x0 = log2((double)res[0][0].budget), x1 = log2((double)res[nb - 1][0].budget);
    if (x1 <= x0) x1 = x0 + 1;
    double pw = W - L - R, ph = H - T - Bm;
#define X(b) (L + (log2((double)(b)) - x0) / (x1 - x0) * pw)
#define Y(p) (T + ph - (p) / 100.0 * ph)
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%g\" y=\"22\" font-size=\"14\">Document-token hit ratio vs KV budget "
               "(D=%d, k=%d, alpha=%g, %d requests, %s)</text>\n",
            L, o->wl.n_docs, o->wl.docs_per_request, o->wl.alpha, o->wl.n_requests,
            o->strict ? "budget = whole pool" : "budget = retained cache");
    for (int p = 0; p <= 100; p += 20) {
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#ddd\"/>\n", L, Y(p),
                L + pw, Y(p));
        fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%d%%</text>\n", L - 6, Y(p) + 4, p);
    }
    for (int i = 0; i < nb; i++) {
        char buf[32];
        format_size(res[i][0].budget, buf, sizeof buf);
        double x = X(res[i][0].budget);
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#eee\"/>\n", x, T, x,
                T + ph);
        fprintf(f, "<text transform=\"translate(%g,%g) rotate(35)\">%s</text>\n", x - 4,
                T + ph + 14, buf);
    }
    fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"black\"/>\n",
            L, T, pw, ph);
    fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">KV budget (log scale; %llu B per "
               "token)</text>\n", L + pw / 2, H - 6, (unsigned long long)token_bytes);
    /* Five series: four policies, plus position-aware counting copies. */
    for (int sidx = 0; sidx < 5; sidx++) {
        int p = sidx < 4 ? sidx : 1;
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", colours[p],
                sidx == 4 ? " stroke-dasharray=\"6,4\"" : "");
        for (int i = 0; i < nb; i++) {
            if (!res[i][p].ok) continue;
            const lazyattn_cache_stats *s = &res[i][p].s;
            double v = ratio(s->hit_tokens + (sidx == 4 ? s->copy_tokens : 0), s->doc_tokens);
            fprintf(f, "%.1f,%.1f ", X(res[i][p].budget), Y(v));
        }
        fprintf(f, "\"/>\n");
        static const char *const names[5] = {"lazy", "position-aware (exact)", "prefix (vLLM)",
                                             "none", "position-aware (+copies)"};
        double ly = T + 16 + sidx * 20;
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                L + pw + 12, ly - 4, L + pw + 36, ly - 4, colours[p],
                sidx == 4 ? " stroke-dasharray=\"6,4\"" : "");
        fprintf(f, "<text x=\"%g\" y=\"%g\">%s</text>\n", L + pw + 42, ly, names[sidx]);
    }
    fprintf(f, "</svg>\n");
#undef X
#undef Y
    return fclose(f) == 0;
}

// ---- main ----

/* Largest budget (and KV of the document pool) the study takes: 1 PiB. */
#define MAX_BUDGET_BYTES 1125899906842624.0

int main(int argc, char **argv) {
    options o;
    memset(&o, 0, sizeof o);
    o.n_layers = 32;
    o.n_kv_heads = 8;
    o.head_dim = 128;
    o.block_size = 16;
    o.dtype = LAZYATTN_DTYPE_F16;
    o.points = 12;
    o.csv = "hitratio.csv";
    o.svg = "hitratio.svg";
    int preset = 0, dtype = 0, range_q[2], range_g[2], doc_len = 0;
    static const char *const preset_names[] = {"paper", "rag"};
    static const lazyattn_dtype dtypes[] = {LAZYATTN_DTYPE_F16, LAZYATTN_DTYPE_BF16,
                                            LAZYATTN_DTYPE_F32};
    const char *budget_arg = "auto";
    cli_option opts[] = {
        {.name = "--preset", .type = CLI_ENUM, .dest = &preset, .choices = "paper|rag"},
        {.name = "--docs", .type = CLI_INT, .dest = &o.wl.n_docs, .min = 1, .max = 1000000},
        {.name = "--doc-len", .type = CLI_INT, .dest = &doc_len, .min = 1, .max = 1 << 20},
        {.name = "--doc-len-min", .type = CLI_INT, .dest = &o.wl.doc_len_min, .min = 1, .max = 1 << 20},
        {.name = "--doc-len-max", .type = CLI_INT, .dest = &o.wl.doc_len_max, .min = 1, .max = 1 << 20},
        {.name = "--k", .type = CLI_INT, .dest = &o.wl.docs_per_request, .min = 1, .max = 1024},
        {.name = "--alpha", .type = CLI_DOUBLE, .dest = &o.wl.alpha, .min = 1e-3, .max = 100},
        {.name = "--requests", .type = CLI_INT, .dest = &o.wl.n_requests, .min = 1, .max = 1000000},
        {.name = "--seed", .type = CLI_U64, .dest = &o.wl.seed},
        {.name = "--question", .type = CLI_RANGE, .dest = range_q, .min = 0, .max = 1 << 20},
        {.name = "--gen", .type = CLI_RANGE, .dest = range_g, .min = 0, .max = 1 << 20},
        {.name = "--prefix", .type = CLI_INT, .dest = &o.wl.prefix_len, .min = 0, .max = 1 << 20},
        {.name = "--warmup", .type = CLI_INT, .dest = &o.warmup, .min = 0, .max = 1000000},
        {.name = "--budgets", .type = CLI_STRING, .dest = &budget_arg},
        {.name = "--points", .type = CLI_INT, .dest = &o.points, .min = 2, .max = 40},
        {.name = "--layers", .type = CLI_INT, .dest = &o.n_layers, .min = 1, .max = 1024},
        {.name = "--kv-heads", .type = CLI_INT, .dest = &o.n_kv_heads, .min = 1, .max = 1024},
        {.name = "--head-dim", .type = CLI_INT, .dest = &o.head_dim, .min = 1, .max = 1024},
        {.name = "--block-size", .type = CLI_INT, .dest = &o.block_size, .min = 1,
         .max = LAZYATTN_MAX_BLOCK_SIZE},
        {.name = "--dtype", .type = CLI_ENUM, .dest = &dtype, .choices = "f16|bf16|f32"},
        {.name = "--strict", .type = CLI_FLAG, .dest = &o.strict},
        {.name = "--quiet", .type = CLI_FLAG, .dest = &o.quiet},
        {.name = "--csv", .type = CLI_STRING, .dest = &o.csv, .allow_empty = 1},
        {.name = "--svg", .type = CLI_STRING, .dest = &o.svg, .allow_empty = 1},
    };
    enum { N_OPTS = sizeof opts / sizeof opts[0] };
    /* Twice: the first pass finds the preset, the second overrides it. */
    int r = cli_parse("hitratio", usage_text, opts, N_OPTS, argc, argv);
    if (r) return r == CLI_HELP ? 0 : 2;
    if (lazyattn_workload_config_preset(preset_names[preset], &o.wl))
        return cli_fail("hitratio", "--preset", "%s", lazyattn_last_error());
    r = cli_parse("hitratio", usage_text, opts, N_OPTS, argc, argv);
    if (r) return r == CLI_HELP ? 0 : 2;
    const cli_option *given = opts;
#define GIVEN(name) cli_given(given, N_OPTS, name)
    o.dtype = dtypes[dtype];
    if (GIVEN("--doc-len")) {
        if (GIVEN("--doc-len-min") || GIVEN("--doc-len-max"))
            return cli_fail("hitratio", "--doc-len", "give either --doc-len or --doc-len-min/max");
        o.wl.doc_len_min = o.wl.doc_len_max = doc_len;
    }
    if (o.wl.doc_len_min > o.wl.doc_len_max)
        return cli_fail("hitratio", "--doc-len-min", "%d exceeds the longest document (%d)",
                        o.wl.doc_len_min, o.wl.doc_len_max);
    if (o.wl.docs_per_request > o.wl.n_docs)
        return cli_fail("hitratio", "--k", "%d documents per request, only %d documents",
                        o.wl.docs_per_request, o.wl.n_docs);
    if (GIVEN("--question")) o.wl.question_min = range_q[0], o.wl.question_max = range_q[1];
    if (GIVEN("--gen")) o.wl.gen_min = range_g[0], o.wl.gen_max = range_g[1];
    if (o.warmup >= o.wl.n_requests)
        return cli_fail("hitratio", "--warmup", "%d warm-up requests leave none of %d measured",
                        o.warmup, o.wl.n_requests);
#undef GIVEN
    /* the budgets' syntax now (tokens counted as 1 byte), their values below */
    uint64_t probe_budgets[MAX_BUDGETS];
    int n_probe = 0;
    if (strcmp(budget_arg, "auto") &&
        cli_parse_size_list("hitratio", "--budgets", budget_arg, "tok", 1, 0, MAX_BUDGET_BYTES,
                            probe_budgets, MAX_BUDGETS, &n_probe))
        return 2;

    /* documents' tokens live in host memory: 2^28 of them (1 GiB) at most */
    if ((int64_t)o.wl.n_docs * o.wl.doc_len_max > ((int64_t)1 << 28))
        return cli_fail("hitratio", "--docs", "%d documents of up to %d tokens exceed 2^28 tokens",
                        o.wl.n_docs, o.wl.doc_len_max);

    lazyattn_workload *wl = NULL;
    int st = lazyattn_workload_create(&o.wl, &wl);
    if (st) {
        fprintf(stderr, "hitratio: %s\n", lazyattn_last_error());
        return 2;
    }
    lazyattn_workload_get_config(wl, &o.wl);

    /* Model shape: bytes of one token and one block (a probe pool of one
     * block checks the shape; a larger one would only cost host memory). */
    uint64_t one_block = 2ull * (uint64_t)o.n_layers * (uint64_t)o.n_kv_heads *
                         (uint64_t)o.head_dim * (uint64_t)o.block_size * lazyattn_dtype_size(o.dtype);
    lazyattn_pool_config pc = {o.n_layers, o.n_kv_heads, o.head_dim, o.block_size, o.dtype, one_block};
    lazyattn_pool *probe = NULL;
    if (lazyattn_pool_create(NULL, &pc, &probe)) {
        fprintf(stderr, "hitratio: model shape: %s\n", lazyattn_last_error());
        lazyattn_workload_destroy(wl);
        return 2;
    }
    lazyattn_pool_info pi;
    lazyattn_pool_get_info(probe, &pi);
    lazyattn_pool_destroy(probe);
    uint64_t block_bytes = pi.block_bytes, token_bytes = block_bytes / (uint64_t)o.block_size;

    /* Sizes in blocks: one document, the pool, the largest working set. */
    int64_t doc_blocks_max = 0, pool_doc_blocks = 0, ws_max = 0;
    for (int d = 0; d < o.wl.n_docs; d++) {
        const int32_t *t;
        int n;
        lazyattn_workload_get_doc(wl, d, &t, &n);
        int64_t b = (n + o.block_size - 1) / o.block_size;
        pool_doc_blocks += b;
        if (b > doc_blocks_max) doc_blocks_max = b;
    }
    for (int i = 0; i < o.wl.n_requests; i++) {
        lazyattn_workload_request r;
        lazyattn_workload_get_request(wl, i, &r);
        int64_t b = (o.wl.prefix_len + o.block_size - 1) / o.block_size +
                    (r.n_question + r.n_generate + o.block_size - 1) / o.block_size;
        for (int j = 0; j < r.n_docs; j++) {
            const int32_t *t;
            int n;
            lazyattn_workload_get_doc(wl, r.doc_ids[j], &t, &n);
            b += 2 * ((n + o.block_size - 1) / o.block_size); /* a copy needs source and copy */
        }
        if (b > ws_max) ws_max = b;
    }
    /* every size below fits 2^63 (double: exact enough to compare) */
    double pool_bytes = (double)pool_doc_blocks * (double)block_bytes;
    double ws_bytes = (double)ws_max * (double)block_bytes;
    if (pool_bytes > MAX_BUDGET_BYTES || ws_bytes > MAX_BUDGET_BYTES) {
        fprintf(stderr, "hitratio: the documents' KV (%.4g B) or a request's working set (%.4g B) "
                        "exceeds 1 PiB: a smaller model shape or workload\n",
                pool_bytes, ws_bytes);
        lazyattn_workload_destroy(wl);
        return 2;
    }
    uint64_t headroom = (uint64_t)ws_max * block_bytes;

    if (!strcmp(budget_arg, "auto")) {
        /* Geometric from one document to the whole pool, plus 1 GiB. */
        double lo = (double)doc_blocks_max * block_bytes, hi = pool_bytes;
        if (o.strict && lo < (double)headroom) lo = (double)headroom;
        if (hi < lo) hi = lo;
        for (int i = 0; i < o.points; i++)
            o.budgets[o.n_budgets++] = (uint64_t)(lo * pow(hi / lo, (double)i / (o.points - 1)));
        o.budgets[o.n_budgets++] = 1ull << 30;
    } else if (cli_parse_size_list("hitratio", "--budgets", budget_arg, "tok", token_bytes, 1,
                                   MAX_BUDGET_BYTES, o.budgets, MAX_BUDGETS, &o.n_budgets)) {
        lazyattn_workload_destroy(wl);
        return 2;
    }
    qsort(o.budgets, (size_t)o.n_budgets, sizeof o.budgets[0], cmp_u64);
    int nb = 0;
    for (int i = 0; i < o.n_budgets; i++)
        if (!nb || o.budgets[i] != o.budgets[nb - 1]) o.budgets[nb++] = o.budgets[i];
    o.n_budgets = nb;
    for (int i = 0; i < nb; i++) {
        char buf[32];
        format_size(o.budgets[i], buf, sizeof buf);
        if (o.budgets[i] < block_bytes) {
            fprintf(stderr, "hitratio: --budgets: %s holds no block (%llu B per block)\n", buf,
                    (unsigned long long)block_bytes);
            lazyattn_workload_destroy(wl);
            return 2;
        }
        if (o.strict && o.budgets[i] < headroom) {
            char need[32];
            format_size(headroom, need, sizeof need);
            fprintf(stderr, "hitratio: --budgets: --strict: budget %s is smaller than one request's working "
                            "set (%s, with copies); drop --strict to study the cache alone\n",
                    buf, need);
            lazyattn_workload_destroy(wl);
            return 2;
        }
    }

    result(*res)[4] = calloc((size_t)nb, sizeof *res);
    if (!res) {
        fprintf(stderr, "hitratio: out of host memory\n");
        lazyattn_workload_destroy(wl);
        return 1;
    }
    printf("# lazyattn hit-ratio study: D=%d docs of %d-%d tokens, k=%d, alpha=%g, %d requests "
           "(%d warm-up excluded), Q %d-%d, G %d-%d, prefix %d, seed %llu\n",
           o.wl.n_docs, o.wl.doc_len_min, o.wl.doc_len_max, o.wl.docs_per_request, o.wl.alpha,
           o.wl.n_requests, o.warmup, o.wl.question_min, o.wl.question_max, o.wl.gen_min,
           o.wl.gen_max, o.wl.prefix_len, (unsigned long long)o.wl.seed);
    printf("# model %d layers x %d KV heads x d=%d, %zu-byte elements, B=%d: %llu B/token; "
           "budget = %s\n",
           o.n_layers, o.n_kv_heads, o.head_dim, lazyattn_dtype_size(o.dtype), o.block_size,
           (unsigned long long)token_bytes,
           o.strict ? "the whole pool (working set included)"
                    : "KV kept between requests (working set on top)");
    printf("# copy hits (position-aware) are not hits; hit+copy counts them\n");
    printf("%-10s %-9s %9s %9s %9s %9s %8s %9s\n", "budget", "policy", "tok hit%", "hit+copy%",
           "blk hit%", "copy hits", "evicts", "docs fit");
    int failed = 0;
    for (int i = 0; i < nb && !failed; i++) {
        char buf[32];
        format_size(o.budgets[i], buf, sizeof buf);
        for (int p = 0; p < 4; p++) {
            res[i][p].budget = o.budgets[i];
            st = run_one(&o, wl, (lazyattn_cache_policy)p, o.budgets[i], headroom, &res[i][p].s);
            if (st) {
                failed = 1;
                break;
            }
            res[i][p].ok = 1;
            const lazyattn_cache_stats *s = &res[i][p].s;
            printf("%-10s %-9s %9.2f %9.2f %9.2f %9lld %8lld %9.1f\n", buf,
                   lazyattn_cache_policy_name((lazyattn_cache_policy)p),
                   ratio(s->hit_tokens, s->doc_tokens),
                   ratio(s->hit_tokens + s->copy_tokens, s->doc_tokens),
                   ratio(s->hit_blocks, s->doc_blocks), (long long)s->copy_hits,
                   (long long)s->evictions, (double)o.budgets[i] / ((double)doc_blocks_max * block_bytes));
        }
        if (failed) break;
        const lazyattn_cache_stats *lz = &res[i][0].s, *pa = &res[i][1].s, *px = &res[i][2].s;
        char r1[32], r2[32], r3[32];
        printf("%-10s lazy/position %s (vs hit+copy %s), lazy/prefix %s\n", buf,
               times(r1, lz->hit_tokens, pa->hit_tokens),
               times(r2, lz->hit_tokens, pa->hit_tokens + pa->copy_tokens),
               times(r3, lz->hit_tokens, px->hit_tokens));
        if (!o.quiet) fprintf(stderr, "hitratio: budget %d/%d (%s) done\n", i + 1, nb, buf);
        fflush(stdout);
    }
    if (!failed && o.csv && *o.csv) {
        FILE *f = fopen(o.csv, "w");
        if (!f) {
            fprintf(stderr, "hitratio: cannot write %s\n", o.csv);
            failed = 1;
        } else {
            fprintf(f, "budget_bytes,budget_tokens,policy,requests,doc_tokens,hit_tokens,"
                       "copy_tokens,token_hit_ratio,token_hit_copy_ratio,doc_blocks,hit_blocks,"
                       "block_hit_ratio,lookups,hits,copy_hits,partial_hits,misses,evictions\n");
            for (int i = 0; i < nb; i++)
                for (int p = 0; p < 4; p++) {
                    const lazyattn_cache_stats *s = &res[i][p].s;
                    fprintf(f, "%llu,%llu,%s,%lld,%lld,%lld,%lld,%.6f,%.6f,%lld,%lld,%.6f,%lld,%lld,"
                               "%lld,%lld,%lld,%lld\n",
                            (unsigned long long)o.budgets[i],
                            (unsigned long long)(o.budgets[i] / token_bytes),
                            lazyattn_cache_policy_name((lazyattn_cache_policy)p),
                            (long long)s->requests, (long long)s->doc_tokens,
                            (long long)s->hit_tokens, (long long)s->copy_tokens,
                            ratio(s->hit_tokens, s->doc_tokens) / 100,
                            ratio(s->hit_tokens + s->copy_tokens, s->doc_tokens) / 100,
                            (long long)s->doc_blocks, (long long)s->hit_blocks,
                            ratio(s->hit_blocks, s->doc_blocks) / 100, (long long)s->lookups,
                            (long long)s->hits, (long long)s->copy_hits,
                            (long long)s->partial_hits, (long long)s->misses,
                            (long long)s->evictions);
                }
            if (fclose(f)) failed = 1;
        }
    }
    if (!failed && o.svg && *o.svg && !write_svg(o.svg, &o, (const result(*)[4])res, nb, token_bytes)) {
        fprintf(stderr, "hitratio: cannot write %s\n", o.svg);
        failed = 1;
    }
    if (!failed && !o.quiet)
        fprintf(stderr, "hitratio: wrote %s and %s\n", o.csv, o.svg);
    free(res);
    lazyattn_workload_destroy(wl);
    return failed ? 1 : 0;
}
