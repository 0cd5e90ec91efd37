/* SPDX-License-Identifier: Apache-2.0 */
/* Hit-ratio study: the four cache policies over seeded RAG request streams
 * at a list of KV budgets, on a bookkeeping pool (no device, no kernels),
 * optionally with a host-memory tier behind the GPU cache and over several
 * seeds. Prints policy x budget -> token hit ratio, block hit ratio, copy
 * hits and evictions (mean +- standard deviation over the seeds), the tier
 * table, and writes a CSV (one row per seed) and an SVG plot (means).
 *
 *   hitratio [--preset paper|rag] [--docs D] [--doc-len N | --doc-len-min A --doc-len-max B]
 *            [--doc-dist uniform|lognormal|bimodal] [--doc-mean M] [--doc-sigma S]
 *            [--doc-short-max N] [--doc-long-min N] [--doc-long-fraction F]
 *            [--sampler zipf|paper-fixed-prompts] [--prompts N] [--drift-at N]
 *            [--k K] [--alpha A] [--requests R] [--seed S] [--seeds N] [--question A-B] [--gen A-B]
 *            [--prefix N] [--warmup W] [--budgets auto|LIST] [--points N]
 *            [--tier-budgets LIST] [--tier-write back|through]
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
 * Budgets take B, KiB, MiB, GiB or tok (tokens of the model shape).
 *
 * Tier (--tier-budgets): a host-memory tier of documents, LRU under its own
 * byte budget (a document costs its tokens x the bytes of one token's KV),
 * simulated here beside the library's cache. Write-back (default): every
 * entry the GPU cache evicts (lazyattn_cache_set_evict_callback) is written
 * to the tier; write-through: every document a request recomputed is
 * written at its commit. A document the GPU cache misses (action PREFILL)
 * and the tier holds is a tier hit: loaded, not recomputed. The GPU cache
 * evolves exactly as without the tier (a loaded document is committed like
 * a recomputed one), so GPU hit ratios do not change with the tier. Within
 * a request the tier is asked about its misses before the entries its
 * planning evicted are written back. LAZY and POSITION (keyed by the
 * document: a tier copy serves any start, re-rotated) are simulated; PREFIX
 * and NONE are not (docs/HITRATIO.md says why). Recomputed = document
 * tokens neither hit, copied nor loaded from the tier. */
#include "cli_options.h"
#include "lazyattn.h"
#include "lazyattn_testing.h" /* the reference, the workload generator */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUDGETS 64
#define MAX_TIERS 8
#define MAX_SEEDS 1000
#define MODEL_ID 0x11a3a3 /* the caches' model id: documents hash under it */

typedef struct options {
    lazyattn_workload_config wl;
    int warmup;
    int n_layers, n_kv_heads, head_dim, block_size;
    lazyattn_dtype dtype;
    uint64_t budgets[MAX_BUDGETS];
    int n_budgets; /* 0 = auto */
    uint64_t tiers[MAX_TIERS]; /* tier budgets in bytes; 0 = no tier */
    int n_tiers;
    int write_through;
    int seeds;
    int points;
    int strict;
    int quiet;
    const char *csv, *svg;
} options;

/* What one tier saw over the measured requests. */
typedef struct tier_stats {
    int64_t hits, hit_tokens; /* GPU misses served by the tier */
    int64_t writes, evictions;
} tier_stats;

typedef struct result {
    int ok;
    lazyattn_cache_stats s;
    tier_stats t[MAX_TIERS];
} result;

static const char usage_text[] =
    "usage: hitratio [--preset paper|rag] [--docs D] [--doc-len N | --doc-len-min A --doc-len-max B]\n"
    "                [--doc-dist uniform|lognormal|bimodal] [--doc-mean M] [--doc-sigma S]\n"
    "                [--doc-short-max N] [--doc-long-min N] [--doc-long-fraction F]\n"
    "                [--sampler zipf|paper-fixed-prompts] [--prompts N] [--drift-at N]\n"
    "                [--k K] [--alpha A] [--requests R] [--seed S] [--seeds N] [--question A-B]\n"
    "                [--gen A-B] [--prefix N] [--warmup W] [--budgets auto|LIST] [--points N]\n"
    "                [--tier-budgets LIST] [--tier-write back|through]\n"
    "                [--layers L --kv-heads H --head-dim D --dtype f16|bf16|f32 --block-size B]\n"
    "                [--strict] [--csv FILE] [--svg FILE] [--quiet]\n"
    "Budgets take B, KiB, MiB, GiB, TiB or tok (tokens of the model shape), comma separated.\n"
    "Default: --preset paper, Llama-3.1-8B KV shape, budgets from one document to the whole pool,\n"
    "hitratio.csv and hitratio.svg. Budget = KV kept between requests; --strict: the whole pool.\n"
    "--seeds N: seeds S..S+N-1, mean +- standard deviation. --tier-budgets: host-memory tier\n"
    "sizes (0 = none) behind the GPU cache, written back on eviction or through at commit.\n"
    "--doc-dist: lognormal (--doc-mean, --doc-sigma of ln length) or bimodal (short passages up\n"
    "to --doc-short-max, a --doc-long-fraction of long ones from --doc-long-min), within\n"
    "--doc-len-min..max. --drift-at N: the popular set moves at request N (e.g. R/2).\n"
    "--sampler paper-fixed-prompts: requests drawn uniformly from --prompts fixed prompts of k\n"
    "consecutive documents (what the paper's sweep script samples; docs/HITRATIO.md).\n";

static void format_size(uint64_t b, char *buf, size_t n) {
    if (b >= (1ull << 40)) snprintf(buf, n, "%.3gTiB", b / 1099511627776.0);
    else if (b >= (1ull << 30)) snprintf(buf, n, "%.3gGiB", b / 1073741824.0);
    else if (b >= (1ull << 20)) snprintf(buf, n, "%.4gMiB", b / 1048576.0);
    else snprintf(buf, n, "%lluB", (unsigned long long)b);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double ratio(int64_t a, int64_t b) { return b ? 100.0 * (double)a / (double)b : 0.0; }

/* Mean and sample standard deviation (n - 1; 0 for one value). */
static void mean_sd(const double *v, int n, double *mean, double *sd) {
    double m = 0, q = 0;
    for (int i = 0; i < n; i++) m += v[i];
    m = n ? m / n : 0;
    for (int i = 0; i < n; i++) q += (v[i] - m) * (v[i] - m);
    *mean = m;
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

/* "46.80" for one seed, "46.80+-1.23" for several. buf: 32 bytes. */
static const char *pm(char *buf, const double *v, int n) {
    double m, sd;
    mean_sd(v, n, &m, &sd);
    if (n > 1) snprintf(buf, 32, "%.2f+-%.2f", m, sd);
    else snprintf(buf, 32, "%.2f", m);
    return buf;
}

/* Per-seed ratios a/b: "5.26x", "4.60+-0.34x", or "n/a (0 hits)" when no
 * seed has hits in b (seeds without are left out and counted). buf: 64 bytes. */
static const char *times(char *buf, const int64_t *a, const int64_t *b, int n) {
    double v[MAX_SEEDS];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (b[i]) v[k++] = (double)a[i] / (double)b[i];
    if (!k) {
        snprintf(buf, 64, "n/a (0 hits)");
        return buf;
    }
    double m, sd;
    mean_sd(v, k, &m, &sd);
    int len = n > 1 ? snprintf(buf, 64, "%.2f+-%.2fx", m, sd) : snprintf(buf, 64, "%.2fx", m);
    if (k < n) snprintf(buf + len, (size_t)(64 - len), " (%d of %d seeds had 0 hits)", n - k, n);
    return buf;
}

// ---- the tier: an LRU of documents under a byte budget ----

typedef struct tier {
    uint64_t budget, bytes;
    int32_t *prev, *next; /* [n_docs] list links, -1 = none; head = most recent */
    uint8_t *in;
    int head, tail;
    tier_stats st;
} tier;

/* Document hash -> document id, sorted by hash for bsearch. */
typedef struct doc_key {
    uint64_t hash;
    int32_t doc;
} doc_key;

typedef struct tier_sim {
    int n_tiers;
    tier t[MAX_TIERS];
    const doc_key *keys;
    const int32_t *doc_len; /* [n_docs] */
    int n_docs;
    uint64_t token_bytes;
    int32_t *pending; /* documents evicted, written back at the next flush */
    int n_pending, cap_pending;
    int counting;     /* after the warm-up */
    int unknown;      /* an evicted hash that is no document: a bug */
} tier_sim;

static void tier_unlink(tier *t, int d) {
    if (t->prev[d] >= 0) t->next[t->prev[d]] = t->next[d];
    else t->head = t->next[d];
    if (t->next[d] >= 0) t->prev[t->next[d]] = t->prev[d];
    else t->tail = t->prev[d];
    t->prev[d] = t->next[d] = -1;
}

static void tier_push_front(tier *t, int d) {
    t->prev[d] = -1;
    t->next[d] = t->head;
    if (t->head >= 0) t->prev[t->head] = d;
    t->head = d;
    if (t->tail < 0) t->tail = d;
}

/* Writes document d (or refreshes it): most recent, LRU evicted to fit. */
static void tier_put(tier_sim *sim, tier *t, int d) {
    uint64_t b = (uint64_t)sim->doc_len[d] * sim->token_bytes;
    if (t->in[d]) {
        tier_unlink(t, d);
        tier_push_front(t, d);
        return;
    }
    if (b > t->budget) return; /* never fits */
    while (t->bytes + b > t->budget) {
        int v = t->tail;
        tier_unlink(t, v);
        t->in[v] = 0;
        t->bytes -= (uint64_t)sim->doc_len[v] * sim->token_bytes;
        if (sim->counting) t->st.evictions++;
    }
    t->in[d] = 1;
    t->bytes += b;
    tier_push_front(t, d);
    if (sim->counting) t->st.writes++;
}

/* A GPU miss of document d: a tier hit (loaded, refreshed) or not. */
static int tier_get(tier_sim *sim, tier *t, int d) {
    if (!t->in[d]) return 0;
    tier_unlink(t, d);
    tier_push_front(t, d);
    if (sim->counting) {
        t->st.hits++;
        t->st.hit_tokens += sim->doc_len[d];
    }
    return 1;
}

static int cmp_key(const void *a, const void *b) {
    uint64_t x = ((const doc_key *)a)->hash, y = ((const doc_key *)b)->hash;
    return x < y ? -1 : x > y;
}

static void on_evict(void *user, lazyattn_cache *cache, const lazyattn_evicted *e) {
    (void)cache;
    tier_sim *sim = user;
    doc_key k = {e->doc_hash, 0};
    const doc_key *f = bsearch(&k, sim->keys, (size_t)sim->n_docs, sizeof k, cmp_key);
    if (!f) {
        sim->unknown = 1;
        return;
    }
    if (sim->n_pending == sim->cap_pending) {
        int cap = sim->cap_pending ? 2 * sim->cap_pending : 64;
        int32_t *p = realloc(sim->pending, (size_t)cap * sizeof *p);
        if (!p) {
            sim->unknown = 1; /* reported as a failure below */
            return;
        }
        sim->pending = p;
        sim->cap_pending = cap;
    }
    sim->pending[sim->n_pending++] = f->doc;
}

/* Write-back of what was evicted since the last flush, in eviction order. */
static void tier_flush(tier_sim *sim) {
    for (int i = 0; i < sim->n_pending; i++)
        for (int k = 0; k < sim->n_tiers; k++) tier_put(sim, &sim->t[k], sim->pending[i]);
    sim->n_pending = 0;
}

// ---- one run: one policy, one budget, every tier budget at once ----

/* The tier's evictions and writes apart, the GPU cache evolves the same
 * under every tier budget: one pass feeds them all. keys/doc_len describe
 * wl's documents. */
static int run_one(const options *o, lazyattn_workload *wl, const doc_key *keys,
                   const int32_t *doc_len, lazyattn_cache_policy policy, uint64_t budget,
                   uint64_t headroom, uint64_t token_bytes, result *out) {
    lazyattn_pool_config pc = {o->n_layers, o->n_kv_heads, o->head_dim, o->block_size, o->dtype,
                               o->strict ? budget : budget + headroom, LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *pool = NULL;
    lazyattn_cache *cache = NULL;
    lazyattn_cache_config cc = {policy, MODEL_ID, o->strict ? 0 : budget};
    /* Tiers only where a document-keyed tier is defined (docs/HITRATIO.md). */
    int tiered = policy == LAZYATTN_CACHE_POLICY_LAZY || policy == LAZYATTN_CACHE_POLICY_POSITION;
    tier_sim sim;
    memset(&sim, 0, sizeof sim);
    sim.keys = keys;
    sim.doc_len = doc_len;
    sim.n_docs = o->wl.n_docs;
    sim.token_bytes = token_bytes;
    sim.n_tiers = tiered ? o->n_tiers : 0;
    int st = 0;
    for (int k = 0; k < sim.n_tiers; k++) {
        tier *t = &sim.t[k];
        t->budget = o->tiers[k];
        t->head = t->tail = -1;
        t->prev = malloc((size_t)sim.n_docs * sizeof *t->prev);
        t->next = malloc((size_t)sim.n_docs * sizeof *t->next);
        t->in = calloc((size_t)sim.n_docs, 1);
        if (!t->prev || !t->next || !t->in) st = LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
    }
    if (!st) st = lazyattn_pool_create(NULL, &pc, &pool);
    if (!st) st = lazyattn_cache_create(pool, &cc, &cache);
    if (!st && sim.n_tiers) st = lazyattn_cache_set_evict_callback(cache, on_evict, &sim);
    const int32_t **docs = malloc(sizeof *docs * (size_t)o->wl.docs_per_request);
    int32_t *lens = malloc(sizeof *lens * (size_t)o->wl.docs_per_request);
    int32_t slots[64], pos[64];
    if (!st && (!docs || !lens)) st = LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
    int i = 0;
    for (; !st && i < o->wl.n_requests; i++) {
        if (i == o->warmup) {
            lazyattn_cache_reset_stats(cache);
            sim.counting = 1;
        }
        lazyattn_request_desc d;
        lazyattn_workload_request wr;
        lazyattn_request *req = NULL;
        st = lazyattn_workload_get_request_desc(wl, i, docs, lens, &d);
        if (!st) st = lazyattn_workload_get_request(wl, i, &wr);
        if (!st) st = lazyattn_request_create(cache, &d, &req);
        if (st) break;
        lazyattn_plan plan;
        lazyattn_request_get_plan(req, &plan);
        /* The tier first, for the documents the GPU cache misses... */
        for (int g = 0; g < plan.n_segments && sim.n_tiers; g++) {
            const lazyattn_segment *seg = &plan.segments[g];
            if (seg->kind != LAZYATTN_SEGMENT_DOCUMENT || seg->action != LAZYATTN_ACTION_PREFILL)
                continue;
            for (int k = 0; k < sim.n_tiers; k++)
                tier_get(&sim, &sim.t[k], wr.doc_ids[seg->doc_index]);
        }
        /* ...then what planning evicted is written back. */
        if (o->write_through) sim.n_pending = 0;
        else tier_flush(&sim);
        /* Prefill (or the tier's load) would run here; then the documents
         * become entries. Write-through: what was recomputed is written. */
        lazyattn_request_commit(req);
        for (int g = 0; g < plan.n_segments && sim.n_tiers && o->write_through; g++) {
            const lazyattn_segment *seg = &plan.segments[g];
            if (seg->kind == LAZYATTN_SEGMENT_DOCUMENT && seg->action == LAZYATTN_ACTION_PREFILL)
                for (int k = 0; k < sim.n_tiers; k++)
                    if (!sim.t[k].in[wr.doc_ids[seg->doc_index]])
                        tier_put(&sim, &sim.t[k], wr.doc_ids[seg->doc_index]);
        }
        for (int g = d.max_new_tokens; !st && g > 0; g -= 64)
            st = lazyattn_request_append(req, g < 64 ? g : 64, slots, pos);
        lazyattn_request_destroy(req);
        if (o->write_through) sim.n_pending = 0;
        else tier_flush(&sim);
        if (st) break;
        if (sim.unknown) {
            fprintf(stderr, "hitratio: the cache evicted a document hash that is no document of "
                            "the workload (or out of host memory)\n");
            st = LAZYATTN_STATUS_INVALID_ARGUMENT;
        }
    }
    if (!st) {
        lazyattn_cache_get_stats(cache, &out->s);
        for (int k = 0; k < sim.n_tiers; k++) out->t[k] = sim.t[k].st;
        st = lazyattn_cache_validate(cache);
    }
    if (st)
        fprintf(stderr, "hitratio: %s, budget %llu B, after %d requests: %s (%s)\n",
                lazyattn_cache_policy_name(policy), (unsigned long long)budget, i,
                lazyattn_status_string(st), lazyattn_last_error());
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
    for (int k = 0; k < MAX_TIERS; k++) {
        free(sim.t[k].prev);
        free(sim.t[k].next);
        free(sim.t[k].in);
    }
    free(sim.pending);
    free(docs);
    free(lens);
    return st;
}

/* Every document's hash under the study's model id, sorted; its length.
 * keys: [n_docs], doc_len: [n_docs]. A hash shared by two documents would
 * make the tier ambiguous: refused. */
static int hash_documents(const lazyattn_workload *wl, int n_docs, doc_key *keys,
                          int32_t *doc_len) {
    for (int d = 0; d < n_docs; d++) {
        const int32_t *t;
        int n;
        lazyattn_workload_get_doc(wl, d, &t, &n);
        doc_len[d] = n;
        keys[d].doc = d;
        if (lazyattn_doc_hash(MODEL_ID, t, n, &keys[d].hash)) {
            fprintf(stderr, "hitratio: document %d: %s\n", d, lazyattn_last_error());
            return -1;
        }
    }
    qsort(keys, (size_t)n_docs, sizeof *keys, cmp_key);
    for (int d = 1; d < n_docs; d++)
        if (keys[d].hash == keys[d - 1].hash) {
            fprintf(stderr, "hitratio: documents %d and %d share a hash\n", keys[d - 1].doc,
                    keys[d].doc);
            return -1;
        }
    return 0;
}

// ---- SVG ----

static const char *const colours[4] = {"#d62728", "#1f77b4", "#2ca02c", "#7f7f7f"};

/* mean[i][0..4]: lazy, position, prefix, none, position hit+copy (%) at
 * budget i; gpu_tier[i][k]: lazy GPU + tier k (%), for the nonzero tiers. */
static int write_svg(const char *path, const options *o, const uint64_t *budgets,
                     const double (*mean)[5], const double (*gpu_tier)[MAX_TIERS], int nb,
                     uint64_t token_bytes) {
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    const double W = 900, H = 460, L = 70, R = 230, T = 40, Bm = 60;
    double x0 = log2((double)budgets[0]), x1 = log2((double)budgets[nb - 1]);
    if (x1 <= x0) x1 = x0 + 1;
    double pw = W - L - R, ph = H - T - Bm;
#define X(b) (L + (log2((double)(b)) - x0) / (x1 - x0) * pw)
#define Y(p) (T + ph - (p) / 100.0 * ph)
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%g\" y=\"22\" font-size=\"14\">Document-token hit ratio vs KV budget "
               "(D=%d, k=%d, alpha=%g, %d requests, %s%s)</text>\n",
            L, o->wl.n_docs, o->wl.docs_per_request, o->wl.alpha, o->wl.n_requests,
            o->strict ? "budget = whole pool" : "budget = retained cache",
            o->seeds > 1 ? ", mean over seeds" : "");
    for (int p = 0; p <= 100; p += 20) {
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#ddd\"/>\n", L, Y(p),
                L + pw, Y(p));
        fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%d%%</text>\n", L - 6, Y(p) + 4, p);
    }
    for (int i = 0; i < nb; i++) {
        char buf[32];
        format_size(budgets[i], buf, sizeof buf);
        double x = X(budgets[i]);
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#eee\"/>\n", x, T, x,
                T + ph);
        fprintf(f, "<text transform=\"translate(%g,%g) rotate(35)\">%s</text>\n", x - 4,
                T + ph + 14, buf);
    }
    fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"black\"/>\n",
            L, T, pw, ph);
    fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">KV budget (log scale; %llu B per "
               "token)</text>\n", L + pw / 2, H - 6, (unsigned long long)token_bytes);
    /* Five series: four policies, plus position-aware counting copies; then
     * lazy GPU + tier per nonzero tier budget (dotted). */
    int n_series = 5, tier_of[MAX_TIERS];
    for (int k = 0; k < o->n_tiers; k++)
        if (o->tiers[k]) tier_of[n_series++ - 5] = k;
    for (int sidx = 0; sidx < n_series; sidx++) {
        int p = sidx < 4 ? sidx : sidx == 4 ? 1 : 0;
        const char *dash = sidx == 4 ? " stroke-dasharray=\"6,4\"" : sidx > 4 ? " stroke-dasharray=\"2,3\"" : "";
        /* tier series: lighter as the tier grows */
        char opacity[40] = "";
        if (sidx > 4)
            snprintf(opacity, sizeof opacity, " stroke-opacity=\"%.2f\"",
                     1.0 - 0.6 * (sidx - 5) / (n_series - 5));
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s%s points=\"",
                colours[p], opacity, dash);
        for (int i = 0; i < nb; i++) {
            double v = sidx < 5 ? mean[i][sidx] : gpu_tier[i][tier_of[sidx - 5]];
            fprintf(f, "%.1f,%.1f ", X(budgets[i]), Y(v));
        }
        fprintf(f, "\"/>\n");
        static const char *const names[5] = {"lazy", "position-aware (exact)", "prefix (vLLM)",
                                             "none", "position-aware (+copies)"};
        char name[64];
        if (sidx < 5) snprintf(name, sizeof name, "%s", names[sidx]);
        else {
            char tb[32];
            format_size(o->tiers[tier_of[sidx - 5]], tb, sizeof tb);
            snprintf(name, sizeof name, "lazy + %s tier", tb);
        }
        double ly = T + 16 + sidx * 20;
        fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" stroke-width=\"2\"%s%s/>\n",
                L + pw + 12, ly - 4, L + pw + 36, ly - 4, colours[p], opacity, dash);
        fprintf(f, "<text x=\"%g\" y=\"%g\">%s</text>\n", L + pw + 42, ly, name);
    }
    fprintf(f, "</svg>\n");
#undef X
#undef Y
    return fclose(f) == 0;
}

// ---- main ----

/* Largest budget (and KV of the document pool) the study takes: 1 PiB. */
#define MAX_BUDGET_BYTES 1125899906842624.0

/* Sizes of one seed's workload in blocks: the longest document, all
 * documents, the largest working set of a request (a copy needs source and
 * copy). */
static void workload_sizes(const lazyattn_workload *wl, const options *o, int64_t *doc_blocks_max,
                           int64_t *pool_doc_blocks, int64_t *ws_max) {
    *doc_blocks_max = *pool_doc_blocks = *ws_max = 0;
    for (int d = 0; d < o->wl.n_docs; d++) {
        const int32_t *t;
        int n;
        lazyattn_workload_get_doc(wl, d, &t, &n);
        int64_t b = (n + o->block_size - 1) / o->block_size;
        *pool_doc_blocks += b;
        if (b > *doc_blocks_max) *doc_blocks_max = b;
    }
    for (int i = 0; i < o->wl.n_requests; i++) {
        lazyattn_workload_request r;
        lazyattn_workload_get_request(wl, i, &r);
        int64_t b = (o->wl.prefix_len + o->block_size - 1) / o->block_size +
                    (r.n_question + r.n_generate + o->block_size - 1) / o->block_size;
        for (int j = 0; j < r.n_docs; j++) {
            const int32_t *t;
            int n;
            lazyattn_workload_get_doc(wl, r.doc_ids[j], &t, &n);
            b += 2 * ((n + o->block_size - 1) / o->block_size);
        }
        if (b > *ws_max) *ws_max = b;
    }
}

int main(int argc, char **argv) {
    options o;
    memset(&o, 0, sizeof o);
    o.n_layers = 32;
    o.n_kv_heads = 8;
    o.head_dim = 128;
    o.block_size = 16;
    o.dtype = LAZYATTN_DTYPE_F16;
    o.points = 12;
    o.seeds = 1;
    o.csv = "hitratio.csv";
    o.svg = "hitratio.svg";
    int preset = 0, dtype = 0, range_q[2], range_g[2], doc_len = 0, doc_dist = 0, sampler = 0;
    int tier_write = 0;
    static const char *const preset_names[] = {"paper", "rag"};
    static const lazyattn_dtype dtypes[] = {LAZYATTN_DTYPE_F16, LAZYATTN_DTYPE_BF16,
                                            LAZYATTN_DTYPE_F32};
    const char *budget_arg = "auto", *tier_arg = "0";
    cli_option opts[] = {
        {.name = "--preset", .type = CLI_ENUM, .dest = &preset, .choices = "paper|rag"},
        {.name = "--docs", .type = CLI_INT, .dest = &o.wl.n_docs, .min = 1, .max = 1000000},
        {.name = "--doc-len", .type = CLI_INT, .dest = &doc_len, .min = 1, .max = 1 << 20},
        {.name = "--doc-len-min", .type = CLI_INT, .dest = &o.wl.doc_len_min, .min = 1, .max = 1 << 20},
        {.name = "--doc-len-max", .type = CLI_INT, .dest = &o.wl.doc_len_max, .min = 1, .max = 1 << 20},
        {.name = "--doc-dist", .type = CLI_ENUM, .dest = &doc_dist,
         .choices = "uniform|lognormal|bimodal"},
        {.name = "--doc-mean", .type = CLI_DOUBLE, .dest = &o.wl.length_mean, .min = 1,
         .max = 1 << 20},
        {.name = "--doc-sigma", .type = CLI_DOUBLE, .dest = &o.wl.length_sigma, .min = 0, .max = 4},
        {.name = "--doc-short-max", .type = CLI_INT, .dest = &o.wl.length_short_max, .min = 1,
         .max = 1 << 20},
        {.name = "--doc-long-min", .type = CLI_INT, .dest = &o.wl.length_long_min, .min = 1,
         .max = 1 << 20},
        {.name = "--doc-long-fraction", .type = CLI_DOUBLE, .dest = &o.wl.length_long_fraction,
         .min = 0, .max = 1},
        {.name = "--sampler", .type = CLI_ENUM, .dest = &sampler,
         .choices = "zipf|paper-fixed-prompts"},
        {.name = "--prompts", .type = CLI_INT, .dest = &o.wl.n_prompts, .min = 1, .max = 1000000},
        {.name = "--drift-at", .type = CLI_INT, .dest = &o.wl.drift_at, .min = 0, .max = 1000000},
        {.name = "--k", .type = CLI_INT, .dest = &o.wl.docs_per_request, .min = 1, .max = 1024},
        {.name = "--alpha", .type = CLI_DOUBLE, .dest = &o.wl.alpha, .min = 1e-3, .max = 100},
        {.name = "--requests", .type = CLI_INT, .dest = &o.wl.n_requests, .min = 1, .max = 1000000},
        {.name = "--seed", .type = CLI_U64, .dest = &o.wl.seed},
        {.name = "--seeds", .type = CLI_INT, .dest = &o.seeds, .min = 1, .max = MAX_SEEDS},
        {.name = "--question", .type = CLI_RANGE, .dest = range_q, .min = 0, .max = 1 << 20},
        {.name = "--gen", .type = CLI_RANGE, .dest = range_g, .min = 0, .max = 1 << 20},
        {.name = "--prefix", .type = CLI_INT, .dest = &o.wl.prefix_len, .min = 0, .max = 1 << 20},
        {.name = "--warmup", .type = CLI_INT, .dest = &o.warmup, .min = 0, .max = 1000000},
        {.name = "--budgets", .type = CLI_STRING, .dest = &budget_arg},
        {.name = "--tier-budgets", .type = CLI_STRING, .dest = &tier_arg},
        {.name = "--tier-write", .type = CLI_ENUM, .dest = &tier_write, .choices = "back|through"},
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
        return cli_fail("hitratio", "--preset", "%s", lazyattn_testing_last_error());
    r = cli_parse("hitratio", usage_text, opts, N_OPTS, argc, argv);
    if (r) return r == CLI_HELP ? 0 : 2;
    const cli_option *given = opts;
#define GIVEN(name) cli_given(given, N_OPTS, name)
    o.dtype = dtypes[dtype];
    o.write_through = tier_write == 1;
    o.wl.length_dist = (lazyattn_length_dist)doc_dist;
    o.wl.sampler = sampler ? LAZYATTN_SAMPLER_PAPER_FIXED_PROMPTS : LAZYATTN_SAMPLER_ZIPF;
    if (GIVEN("--doc-len")) {
        if (GIVEN("--doc-len-min") || GIVEN("--doc-len-max"))
            return cli_fail("hitratio", "--doc-len", "give either --doc-len or --doc-len-min/max");
        o.wl.doc_len_min = o.wl.doc_len_max = doc_len;
    }
    if (o.wl.doc_len_min > o.wl.doc_len_max)
        return cli_fail("hitratio", "--doc-len-min", "%d exceeds the longest document (%d)",
                        o.wl.doc_len_min, o.wl.doc_len_max);
    /* The length laws' parameters not given follow the range, as the
     * presets set them (lazyattn_testing.h). */
    int span = o.wl.doc_len_max - o.wl.doc_len_min;
    if (!GIVEN("--doc-mean")) o.wl.length_mean = (o.wl.doc_len_min + (double)o.wl.doc_len_max) / 2;
    if (!GIVEN("--doc-short-max")) o.wl.length_short_max = o.wl.doc_len_min + span / 4;
    if (!GIVEN("--doc-long-min")) o.wl.length_long_min = o.wl.doc_len_max - span / 4;
    static const char *const length_opts[] = {"--doc-mean", "--doc-sigma", "--doc-short-max",
                                              "--doc-long-min", "--doc-long-fraction"};
    for (int i = 0; i < 5; i++)
        if (GIVEN(length_opts[i]) && o.wl.length_dist != (i < 2 ? LAZYATTN_LENGTH_LOGNORMAL
                                                                 : LAZYATTN_LENGTH_BIMODAL))
            return cli_fail("hitratio", length_opts[i], "applies to --doc-dist %s only",
                            i < 2 ? "lognormal" : "bimodal");
    if (o.wl.length_dist == LAZYATTN_LENGTH_BIMODAL) {
        if (o.wl.length_short_max < o.wl.doc_len_min || o.wl.length_short_max > o.wl.doc_len_max)
            return cli_fail("hitratio", "--doc-short-max", "%d outside --doc-len-min..max %d..%d",
                            o.wl.length_short_max, o.wl.doc_len_min, o.wl.doc_len_max);
        if (o.wl.length_long_min < o.wl.doc_len_min || o.wl.length_long_min > o.wl.doc_len_max)
            return cli_fail("hitratio", "--doc-long-min", "%d outside --doc-len-min..max %d..%d",
                            o.wl.length_long_min, o.wl.doc_len_min, o.wl.doc_len_max);
    }
    if (GIVEN("--prompts") && o.wl.sampler != LAZYATTN_SAMPLER_PAPER_FIXED_PROMPTS)
        return cli_fail("hitratio", "--prompts", "applies to --sampler paper-fixed-prompts only");
    if (o.wl.docs_per_request > o.wl.n_docs)
        return cli_fail("hitratio", "--k", "%d documents per request, only %d documents",
                        o.wl.docs_per_request, o.wl.n_docs);
    if (GIVEN("--question")) o.wl.question_min = range_q[0], o.wl.question_max = range_q[1];
    if (GIVEN("--gen")) o.wl.gen_min = range_g[0], o.wl.gen_max = range_g[1];
    if (o.warmup >= o.wl.n_requests)
        return cli_fail("hitratio", "--warmup", "%d warm-up requests leave none of %d measured",
                        o.warmup, o.wl.n_requests);
    if (GIVEN("--drift-at") && (o.wl.drift_at < 1 || o.wl.drift_at >= o.wl.n_requests))
        return cli_fail("hitratio", "--drift-at", "request %d: the drift must fall in 1..%d",
                        o.wl.drift_at, o.wl.n_requests - 1);
    if (o.wl.seed > UINT64_MAX - (uint64_t)o.seeds)
        return cli_fail("hitratio", "--seeds", "seeds %llu.. + %d pass 2^64",
                        (unsigned long long)o.wl.seed, o.seeds);
    if (GIVEN("--tier-write") && !GIVEN("--tier-budgets"))
        return cli_fail("hitratio", "--tier-write", "needs --tier-budgets");
#undef GIVEN
    /* the budgets' syntax now (tokens counted as 1 byte), their values below */
    uint64_t probe_budgets[MAX_BUDGETS];
    int n_probe = 0;
    if (strcmp(budget_arg, "auto") &&
        cli_parse_size_list("hitratio", "--budgets", budget_arg, "tok", 1, 0, MAX_BUDGET_BYTES,
                            probe_budgets, MAX_BUDGETS, &n_probe))
        return 2;
    if (cli_parse_size_list("hitratio", "--tier-budgets", tier_arg, "tok", 1, 0, MAX_BUDGET_BYTES,
                            probe_budgets, MAX_TIERS, &n_probe))
        return 2;

    /* documents' tokens live in host memory: 2^28 of them (1 GiB) at most */
    if ((int64_t)o.wl.n_docs * o.wl.doc_len_max > ((int64_t)1 << 28))
        return cli_fail("hitratio", "--docs", "%d documents of up to %d tokens exceed 2^28 tokens",
                        o.wl.n_docs, o.wl.doc_len_max);

    /* Model shape: bytes of one token and one block (a probe pool of one
     * block checks the shape; a larger one would only cost host memory). */
    uint64_t one_block = 2ull * (uint64_t)o.n_layers * (uint64_t)o.n_kv_heads *
                         (uint64_t)o.head_dim * (uint64_t)o.block_size * lazyattn_dtype_size(o.dtype);
    lazyattn_pool_config pc = {o.n_layers, o.n_kv_heads, o.head_dim, o.block_size, o.dtype, one_block,
                               LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *probe = NULL;
    if (lazyattn_pool_create(NULL, &pc, &probe)) {
        fprintf(stderr, "hitratio: model shape: %s\n", lazyattn_last_error());
        return 2;
    }
    lazyattn_pool_info pi;
    lazyattn_pool_get_info(probe, &pi);
    lazyattn_pool_destroy(probe);
    uint64_t block_bytes = pi.block_bytes, token_bytes = block_bytes / (uint64_t)o.block_size;

    /* Every seed's workload once for its sizes: the auto budgets follow the
     * first seed's documents, the headroom the largest working set of all. */
    int64_t doc_blocks_max = 0, pool_doc_blocks = 0, ws_max = 0;
    uint64_t seed0 = o.wl.seed;
    for (int sd = 0; sd < o.seeds; sd++) {
        lazyattn_workload_config c = o.wl;
        c.seed = seed0 + (uint64_t)sd;
        lazyattn_workload *wl = NULL;
        if (lazyattn_workload_create(&c, &wl)) {
            fprintf(stderr, "hitratio: %s\n", lazyattn_testing_last_error());
            return 2;
        }
        int64_t dbm, pdb, wsm;
        workload_sizes(wl, &o, &dbm, &pdb, &wsm);
        if (sd == 0) {
            lazyattn_workload_get_config(wl, &o.wl);
            doc_blocks_max = dbm;
            pool_doc_blocks = pdb;
        }
        if (wsm > ws_max) ws_max = wsm;
        lazyattn_workload_destroy(wl);
    }
    /* every size below fits 2^63 (double: exact enough to compare) */
    double pool_bytes = (double)pool_doc_blocks * (double)block_bytes;
    double ws_bytes = (double)ws_max * (double)block_bytes;
    if (pool_bytes > MAX_BUDGET_BYTES || ws_bytes > MAX_BUDGET_BYTES) {
        fprintf(stderr, "hitratio: the documents' KV (%.4g B) or a request's working set (%.4g B) "
                        "exceeds 1 PiB: a smaller model shape or workload\n",
                pool_bytes, ws_bytes);
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
        return 2;
    }
    if (cli_parse_size_list("hitratio", "--tier-budgets", tier_arg, "tok", token_bytes, 0,
                            MAX_BUDGET_BYTES, o.tiers, MAX_TIERS, &o.n_tiers))
        return 2;
    qsort(o.budgets, (size_t)o.n_budgets, sizeof o.budgets[0], cmp_u64);
    qsort(o.tiers, (size_t)o.n_tiers, sizeof o.tiers[0], cmp_u64);
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
            return 2;
        }
        if (o.strict && o.budgets[i] < headroom) {
            char need[32];
            format_size(headroom, need, sizeof need);
            fprintf(stderr, "hitratio: --budgets: --strict: budget %s is smaller than one request's working "
                            "set (%s, with copies); drop --strict to study the cache alone\n",
                    buf, need);
            return 2;
        }
    }
    int any_tier = 0;
    for (int k = 0; k < o.n_tiers; k++) any_tier |= o.tiers[k] > 0;

    size_t n_res = (size_t)o.seeds * (size_t)nb * 4;
    result *res = calloc(n_res, sizeof *res);
    doc_key *keys = malloc((size_t)o.wl.n_docs * sizeof *keys);
    int32_t *doc_lens = malloc((size_t)o.wl.n_docs * sizeof *doc_lens);
    if (!res || !keys || !doc_lens) {
        fprintf(stderr, "hitratio: out of host memory\n");
        free(res);
        free(keys);
        free(doc_lens);
        return 1;
    }
#define RES(sd, i, p) res[((size_t)(sd) * (size_t)nb + (size_t)(i)) * 4 + (size_t)(p)]
    printf("# lazyattn hit-ratio study: D=%d docs of %d-%d tokens, k=%d, alpha=%g, %d requests "
           "(%d warm-up excluded), Q %d-%d, G %d-%d, prefix %d, seed %llu",
           o.wl.n_docs, o.wl.doc_len_min, o.wl.doc_len_max, o.wl.docs_per_request, o.wl.alpha,
           o.wl.n_requests, o.warmup, o.wl.question_min, o.wl.question_max, o.wl.gen_min,
           o.wl.gen_max, o.wl.prefix_len, (unsigned long long)o.wl.seed);
    if (o.seeds > 1)
        printf("..%llu (%d seeds: mean+-sd)", (unsigned long long)(seed0 + (uint64_t)o.seeds - 1),
               o.seeds);
    printf("\n");
    if (o.wl.length_dist == LAZYATTN_LENGTH_LOGNORMAL)
        printf("# document lengths lognormal: mean %g, sigma of ln %g, clamped to %d-%d\n",
               o.wl.length_mean, o.wl.length_sigma, o.wl.doc_len_min, o.wl.doc_len_max);
    else if (o.wl.length_dist == LAZYATTN_LENGTH_BIMODAL)
        printf("# document lengths bimodal: %g long in %d-%d, else short in %d-%d\n",
               o.wl.length_long_fraction, o.wl.length_long_min, o.wl.doc_len_max,
               o.wl.doc_len_min, o.wl.length_short_max);
    if (o.wl.sampler == LAZYATTN_SAMPLER_PAPER_FIXED_PROMPTS)
        printf("# sampler: the paper's script: requests uniform over %d fixed prompts of %d "
               "consecutive documents (alpha unused)\n", o.wl.n_prompts, o.wl.docs_per_request);
    if (o.wl.drift_at > 0)
        printf("# popularity drifts at request %d (document ids permuted)\n", o.wl.drift_at);
    printf("# model %d layers x %d KV heads x d=%d, %zu-byte elements, B=%d: %llu B/token; "
           "budget = %s\n",
           o.n_layers, o.n_kv_heads, o.head_dim, lazyattn_dtype_size(o.dtype), o.block_size,
           (unsigned long long)token_bytes,
           o.strict ? "the whole pool (working set included)"
                    : "KV kept between requests (working set on top)");
    printf("# copy hits (position-aware) are not hits; hit+copy counts them\n");

    /* Runs: seed by seed (one workload alive at a time). */
    int failed = 0;
    for (int sd = 0; sd < o.seeds && !failed; sd++) {
        lazyattn_workload_config c = o.wl;
        c.seed = seed0 + (uint64_t)sd;
        lazyattn_workload *wl = NULL;
        if (lazyattn_workload_create(&c, &wl)) {
            fprintf(stderr, "hitratio: seed %llu: %s\n", (unsigned long long)c.seed,
                    lazyattn_testing_last_error());
            failed = 1;
            break;
        }
        if (hash_documents(wl, o.wl.n_docs, keys, doc_lens)) { /* says why */
            lazyattn_workload_destroy(wl);
            failed = 1;
            break;
        }
        for (int i = 0; i < nb && !failed; i++) {
            for (int p = 0; p < 4; p++) {
                if (run_one(&o, wl, keys, doc_lens, (lazyattn_cache_policy)p, o.budgets[i], headroom,
                            token_bytes, &RES(sd, i, p))) {
                    failed = 1;
                    break;
                }
                RES(sd, i, p).ok = 1;
            }
            if (!o.quiet && !failed)
                fprintf(stderr, "hitratio: seed %llu, budget %d/%d done\n",
                        (unsigned long long)c.seed, i + 1, nb);
        }
        lazyattn_workload_destroy(wl);
    }

    /* Tables: per budget and policy, over the seeds. */
    double (*mean)[5] = calloc((size_t)nb, sizeof *mean);
    double (*gpu_tier)[MAX_TIERS] = calloc((size_t)nb, sizeof *gpu_tier);
    if (!mean || !gpu_tier) failed = 1;
    if (!failed) {
        int w = o.seeds > 1 ? 13 : 9; /* one seed: the columns of earlier versions */
        printf("%-10s %-9s %*s %*s %*s %9s %8s %9s\n", "budget", "policy", w, "tok hit%", w,
               "hit+copy%", w, "blk hit%", "copy hits", "evicts", "docs fit");
        for (int i = 0; i < nb; i++) {
            char buf[32];
            format_size(o.budgets[i], buf, sizeof buf);
            for (int p = 0; p < 4; p++) {
                double v[3][MAX_SEEDS];
                int64_t copies = 0, evicts = 0;
                for (int sd = 0; sd < o.seeds; sd++) {
                    const lazyattn_cache_stats *s = &RES(sd, i, p).s;
                    v[0][sd] = ratio(s->hit_tokens, s->doc_tokens);
                    v[1][sd] = ratio(s->hit_tokens + s->copy_tokens, s->doc_tokens);
                    v[2][sd] = ratio(s->hit_blocks, s->doc_blocks);
                    copies += s->copy_hits;
                    evicts += s->evictions;
                }
                double sdv;
                mean_sd(v[0], o.seeds, &mean[i][p], &sdv);
                if (p == 1) mean_sd(v[1], o.seeds, &mean[i][4], &sdv);
                char a[32], b[32], cc[32];
                /* counts: per seed, averaged when there are several */
                printf("%-10s %-9s %*s %*s %*s %9.*f %8.*f %9.1f\n", buf,
                       lazyattn_cache_policy_name((lazyattn_cache_policy)p), w,
                       pm(a, v[0], o.seeds), w, pm(b, v[1], o.seeds), w, pm(cc, v[2], o.seeds),
                       o.seeds > 1 ? 1 : 0,
                       (double)copies / o.seeds, o.seeds > 1 ? 1 : 0, (double)evicts / o.seeds,
                       (double)o.budgets[i] / ((double)doc_blocks_max * block_bytes));
            }
            int64_t lz[MAX_SEEDS], pa[MAX_SEEDS], pac[MAX_SEEDS], px[MAX_SEEDS];
            for (int sd = 0; sd < o.seeds; sd++) {
                lz[sd] = RES(sd, i, 0).s.hit_tokens;
                pa[sd] = RES(sd, i, 1).s.hit_tokens;
                pac[sd] = RES(sd, i, 1).s.hit_tokens + RES(sd, i, 1).s.copy_tokens;
                px[sd] = RES(sd, i, 2).s.hit_tokens;
            }
            char r1[64], r2[64], r3[64];
            printf("%-10s lazy/position %s (vs hit+copy %s), lazy/prefix %s\n", buf,
                   times(r1, lz, pa, o.seeds), times(r2, lz, pac, o.seeds),
                   times(r3, lz, px, o.seeds));
        }
        if (any_tier) {
            printf("# tier (%s): GPU hit%% unchanged by the tier; tier hit%% = GPU misses loaded "
                   "from the tier; recomputed%% = document tokens prefilled\n",
                   o.write_through ? "write-through at commit" : "write-back on eviction");
            printf("%-10s %-10s %-9s %13s %13s %13s %13s %12s\n", "budget", "tier", "policy",
                   "GPU hit%", "(+copy)%", "tier hit%", "recomputed%", "recomp tok");
            for (int i = 0; i < nb; i++)
                for (int k = 0; k < o.n_tiers; k++)
                    for (int p = 0; p < 2; p++) {
                        double v[4][MAX_SEEDS], rt = 0;
                        for (int sd = 0; sd < o.seeds; sd++) {
                            const result *x = &RES(sd, i, p);
                            int64_t rec = x->s.doc_tokens - x->s.hit_tokens - x->s.copy_tokens -
                                          x->t[k].hit_tokens;
                            v[0][sd] = ratio(x->s.hit_tokens, x->s.doc_tokens);
                            v[1][sd] = ratio(x->s.hit_tokens + x->s.copy_tokens, x->s.doc_tokens);
                            v[2][sd] = ratio(x->t[k].hit_tokens, x->s.doc_tokens);
                            v[3][sd] = ratio(rec, x->s.doc_tokens);
                            rt += (double)rec;
                        }
                        if (p == 0) {
                            double m, sdv;
                            mean_sd(v[2], o.seeds, &m, &sdv);
                            gpu_tier[i][k] = mean[i][0] + m;
                        }
                        char b1[32], b2[32], a[32], b[32], cc[32], dd[32];
                        format_size(o.budgets[i], b1, sizeof b1);
                        format_size(o.tiers[k], b2, sizeof b2);
                        printf("%-10s %-10s %-9s %13s %13s %13s %13s %12.4g\n", b1,
                               o.tiers[k] ? b2 : "none",
                               lazyattn_cache_policy_name((lazyattn_cache_policy)p),
                               pm(a, v[0], o.seeds), p == 1 ? pm(b, v[1], o.seeds) : "",
                               pm(cc, v[2], o.seeds), pm(dd, v[3], o.seeds), rt / o.seeds);
                    }
        }
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
                       "block_hit_ratio,lookups,hits,copy_hits,partial_hits,misses,evictions,"
                       "seed,tier_bytes,tier_write,tier_hit_tokens,tier_hits,tier_hit_ratio,"
                       "recomputed_tokens\n");
            /* one row per seed, budget, policy (and tier, for lazy and position) */
            for (int sd = 0; sd < o.seeds; sd++)
                for (int i = 0; i < nb; i++)
                    for (int p = 0; p < 4; p++)
                        for (int k = 0; k < (p < 2 ? o.n_tiers : 1); k++) {
                            const result *x = &RES(sd, i, p);
                            const lazyattn_cache_stats *s = &x->s;
                            tier_stats t = {0};
                            if (p < 2) t = x->t[k];
                            uint64_t tb = p < 2 ? o.tiers[k] : 0;
                            fprintf(f, "%llu,%llu,%s,%lld,%lld,%lld,%lld,%.6f,%.6f,%lld,%lld,%.6f,"
                                       "%lld,%lld,%lld,%lld,%lld,%lld,%llu,%llu,%s,%lld,%lld,%.6f,"
                                       "%lld\n",
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
                                    (long long)s->evictions,
                                    (unsigned long long)(seed0 + (uint64_t)sd),
                                    (unsigned long long)tb,
                                    tb ? (o.write_through ? "through" : "back") : "none",
                                    (long long)t.hit_tokens, (long long)t.hits,
                                    ratio(t.hit_tokens, s->doc_tokens) / 100,
                                    (long long)(s->doc_tokens - s->hit_tokens - s->copy_tokens -
                                                t.hit_tokens));
                        }
            if (fclose(f)) failed = 1;
        }
    }
    if (!failed && o.svg && *o.svg &&
        !write_svg(o.svg, &o, o.budgets, (const double(*)[5])mean,
                   (const double(*)[MAX_TIERS])gpu_tier, nb, token_bytes)) {
        fprintf(stderr, "hitratio: cannot write %s\n", o.svg);
        failed = 1;
    }
    if (!failed && !o.quiet)
        fprintf(stderr, "hitratio: wrote %s and %s\n", o.csv, o.svg);
#undef RES
    free(mean);
    free(gpu_tier);
    free(res);
    free(keys);
    free(doc_lens);
    return failed ? 1 : 0;
}
