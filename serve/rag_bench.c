/*
 * rag_bench: end-to-end RAG serving on a Llama-shaped decoder, comparing
 * the four KV cache policies (lazy, position-aware / Block-Attention,
 * prefix, none) under the same KV byte budgets on the same requests.
 *
 * Requests come from lazyattn's seeded workload generator, in a closed loop
 * (--concurrency clients) or as Poisson arrivals (--rate). A request is
 * admitted when the cache can plan it: its missed documents are prefilled
 * in isolation (positions 0..L-1, keys stored where the policy asks),
 * copy hits are materialised, the question is prefilled over the whole
 * context and gives the first token; then it joins the continuous decode
 * batch (one lazyattn_decode over every running request per step) until it
 * has its tokens. Greedy sampling.
 *
 * Per request: TTFT (arrival to first token, including queueing, missed
 * document prefills and copies), time per output token, end-to-end latency.
 * Per run: throughput, document-token hit ratio (copy hits separately),
 * device time per phase from profiling events. Outputs: the per-policy
 * table on stdout, PREFIX.csv (per request), PREFIX_summary.csv,
 * PREFIX_ttft.svg and PREFIX_budget.svg.
 */
#include "serve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- options ---- */

typedef struct bench_options {
    const char *model;      /* preset */
    const char *gguf;       /* weights (and shape) from a GGUF file */
    const char *workload;   /* "small" (default), "paper", "rag" */
    lazyattn_workload_config wl;
    int requests_override;
    int warmup;
    int concurrency;        /* closed loop clients */
    double rate;            /* > 0: Poisson arrivals, requests per second */
    int max_batch;
    uint64_t budgets[16];
    int n_budgets;
    lazyattn_cache_policy policies[4];
    int n_policies;
    const char *out_prefix;
    int progress;           /* -1 auto (stderr is a terminal) */
    double run_seconds;     /* stop admitting after this long (0: no limit) */
    uint64_t seed;
    int max_rows;
    int kv_f32;
    int no_profiling;
} bench_options;

static void usage(FILE *f) {
    fprintf(f,
            "usage: rag_bench [options]\n"
            "  --model tiny|small|8b     model shape, random weights (default small;\n"
            "                            8b = Llama-3.1-8B shape, vocab reduced to 32000)\n"
            "  --gguf FILE               llama GGUF (f32/f16): shape and weights from the file\n"
            "  --workload small|paper|rag  workload preset (default small)\n"
            "  --requests N  --warmup N  --docs D  --doc-len MIN:MAX  --k K  --alpha A\n"
            "  --question MIN:MAX  --gen MIN:MAX  --prefix N  --workload-seed S\n"
            "  --concurrency C           closed loop with C clients (default 4)\n"
            "  --rate R                  Poisson arrivals at R requests/s instead\n"
            "  --max-batch B             most requests per decode step (default 64)\n"
            "  --budget LIST             KV budgets, e.g. 2MiB,8MiB or 1GiB,4GiB (K/M/G[iB])\n"
            "  --policies LIST           lazy,position,prefix,none (default all four)\n"
            "  --out PREFIX              output files PREFIX.csv, PREFIX_summary.csv,\n"
            "                            PREFIX_ttft.svg, PREFIX_budget.svg (default rag_bench)\n"
            "  --run-seconds S           stop admitting requests S seconds into a run\n"
            "  --max-rows N              most tokens per forward (prefill chunk)\n"
            "  --kv-f32                  K/V stored as f32 (default f16)\n"
            "  --no-profiling            queue without profiling (no device time per phase)\n"
            "  --seed S                  weight seed (default 1)\n"
            "  --progress / --no-progress\n"
            "Device: LAZYATTN_PLATFORM / LAZYATTN_DEVICE name substrings.\n");
}

static int parse_range(const char *s, int *lo, int *hi) {
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s) return -1;
    if (*end == ':' || *end == '-') {
        const char *t = end + 1;
        b = strtol(t, &end, 10);
        if (end == t) return -1;
    }
    if (*end || a < 0 || b < a || b > 1 << 24) return -1;
    *lo = (int)a, *hi = (int)b;
    return 0;
}

static int parse_bytes(const char *s, uint64_t *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v <= 0) return -1;
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    if (*end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    *out = (uint64_t)(v * mul);
    return 0;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The README default: small enough for PoCL on two cores. */
static void workload_small(lazyattn_workload_config *c) {
    memset(c, 0, sizeof *c);
    c->n_docs = 24;
    c->doc_len_min = 16;
    c->doc_len_max = 48;
    c->docs_per_request = 3;
    c->alpha = 1.0;
    c->question_min = 8;
    c->question_max = 16;
    c->gen_min = 4;
    c->gen_max = 8;
    c->prefix_len = 8;
    c->n_requests = 24;
    c->seed = 1;
}

static int parse_args(int argc, char **argv, bench_options *o) {
    memset(o, 0, sizeof *o);
    o->model = "small";
    o->workload = "small";
    o->concurrency = 4;
    o->max_batch = 64;
    o->out_prefix = "rag_bench";
    o->progress = -1;
    o->seed = 1;
    o->requests_override = -1;
    /* presets first, then overrides in order */
    for (int i = 1; i < argc - 1; i++)
        if (strcmp(argv[i], "--workload") == 0) o->workload = argv[i + 1];
    if (strcmp(o->workload, "small") == 0) {
        workload_small(&o->wl);
    } else if (lazyattn_workload_config_preset(o->workload, &o->wl) != 0) {
        fprintf(stderr, "rag_bench: unknown workload \"%s\" (small, paper, rag)\n", o->workload);
        return -1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV()                                                            \
    do {                                                                   \
        if (!v) {                                                          \
            fprintf(stderr, "rag_bench: %s needs a value\n", a);           \
            return -1;                                                     \
        }                                                                  \
        i++;                                                               \
    } while (0)
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0); /* the program's own command line, not library code */
        } else if (strcmp(a, "--model") == 0) {
            NEEDV();
            o->model = v;
        } else if (strcmp(a, "--gguf") == 0) {
            NEEDV();
            o->gguf = v;
        } else if (strcmp(a, "--workload") == 0) {
            NEEDV();
        } else if (strcmp(a, "--requests") == 0) {
            NEEDV();
            o->requests_override = atoi(v);
        } else if (strcmp(a, "--warmup") == 0) {
            NEEDV();
            o->warmup = atoi(v);
        } else if (strcmp(a, "--docs") == 0) {
            NEEDV();
            o->wl.n_docs = atoi(v);
        } else if (strcmp(a, "--doc-len") == 0) {
            NEEDV();
            if (parse_range(v, &o->wl.doc_len_min, &o->wl.doc_len_max)) goto bad;
        } else if (strcmp(a, "--k") == 0) {
            NEEDV();
            o->wl.docs_per_request = atoi(v);
        } else if (strcmp(a, "--alpha") == 0) {
            NEEDV();
            o->wl.alpha = atof(v);
        } else if (strcmp(a, "--question") == 0) {
            NEEDV();
            if (parse_range(v, &o->wl.question_min, &o->wl.question_max)) goto bad;
        } else if (strcmp(a, "--gen") == 0) {
            NEEDV();
            if (parse_range(v, &o->wl.gen_min, &o->wl.gen_max)) goto bad;
        } else if (strcmp(a, "--prefix") == 0) {
            NEEDV();
            o->wl.prefix_len = atoi(v);
        } else if (strcmp(a, "--workload-seed") == 0) {
            NEEDV();
            o->wl.seed = strtoull(v, NULL, 10);
        } else if (strcmp(a, "--concurrency") == 0) {
            NEEDV();
            o->concurrency = atoi(v);
        } else if (strcmp(a, "--rate") == 0) {
            NEEDV();
            o->rate = atof(v);
        } else if (strcmp(a, "--max-batch") == 0) {
            NEEDV();
            o->max_batch = atoi(v);
        } else if (strcmp(a, "--budget") == 0 || strcmp(a, "--budgets") == 0) {
            NEEDV();
            char buf[512];
            snprintf(buf, sizeof buf, "%s", v);
            o->n_budgets = 0;
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                if (o->n_budgets == 16 || parse_bytes(t, &o->budgets[o->n_budgets])) goto bad;
                o->n_budgets++;
            }
        } else if (strcmp(a, "--policies") == 0 || strcmp(a, "--policy") == 0) {
            NEEDV();
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            o->n_policies = 0;
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                if (o->n_policies == 4 ||
                    lazyattn_cache_policy_parse(t, &o->policies[o->n_policies]) != 0)
                    goto bad;
                o->n_policies++;
            }
        } else if (strcmp(a, "--out") == 0) {
            NEEDV();
            o->out_prefix = v;
        } else if (strcmp(a, "--run-seconds") == 0) {
            NEEDV();
            o->run_seconds = atof(v);
        } else if (strcmp(a, "--max-rows") == 0) {
            NEEDV();
            o->max_rows = atoi(v);
        } else if (strcmp(a, "--seed") == 0) {
            NEEDV();
            o->seed = strtoull(v, NULL, 10);
        } else if (strcmp(a, "--no-profiling") == 0) {
            o->no_profiling = 1;
        } else if (strcmp(a, "--kv-f32") == 0) {
            o->kv_f32 = 1;
        } else if (strcmp(a, "--progress") == 0) {
            o->progress = 1;
        } else if (strcmp(a, "--no-progress") == 0) {
            o->progress = 0;
        } else {
            fprintf(stderr, "rag_bench: unknown option %s\n", a);
            usage(stderr);
            return -1;
        }
        continue;
    bad:
        fprintf(stderr, "rag_bench: bad value for %s: %s\n", a, v);
        return -1;
#undef NEEDV
    }
    if (o->requests_override >= 0) o->wl.n_requests = o->requests_override;
    if (o->n_policies == 0) {
        o->policies[0] = LAZYATTN_CACHE_POLICY_LAZY;
        o->policies[1] = LAZYATTN_CACHE_POLICY_POSITION;
        o->policies[2] = LAZYATTN_CACHE_POLICY_PREFIX;
        o->policies[3] = LAZYATTN_CACHE_POLICY_NONE;
        o->n_policies = 4;
    }
    if (o->concurrency < 1 || o->max_batch < 1 || o->warmup < 0 || o->rate < 0 ||
        o->wl.question_min < 1) {
        fprintf(stderr, "rag_bench: need concurrency >= 1, max-batch >= 1, warmup >= 0, "
                        "question length >= 1\n");
        return -1;
    }
    if (o->progress < 0) o->progress = isatty(2);
    return 0;
}

/* ---- one run: one policy under one budget ---- */

typedef struct bench_live {
    int index; /* workload request index */
    lazyattn_request *req;
    int target;      /* tokens to generate */
    int n_generated;
    int32_t last;    /* last generated token */
    serve_request_result *rec;
} bench_live;

typedef struct bench {
    const bench_options *opt;
    lazyattn_context *ctx;
    serve_model *model;
    lazyattn_workload *wl;
    serve_timer timer;
    /* scratch */
    const int32_t **docs;
    int32_t *doc_lengths;
    bench_live *live;
    lazyattn_request **batch_reqs;
    int32_t *batch_tokens, *batch_next;
    int *waiting; /* queue of request indices */
    double *arrivals;
} bench;

static void progress(const bench *b, const char *label, int done, int total, double t) {
    if (!b->opt->progress) return;
    int width = 30, fill = total ? done * width / total : width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '-';
    bar[width] = 0;
    fprintf(stderr, "\r%-24s [%s] %4d/%-4d %6.1f s", label, bar, done, total, t);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

static void sleep_until(double t0, double when) {
    double d = when - (serve_now() - t0);
    if (d <= 0) return;
    struct timespec ts = {(time_t)d, (long)((d - floor(d)) * 1e9)};
    nanosleep(&ts, NULL);
}

/*
 * Serves requests [first, first + count) of the workload with the engine.
 * rec: [count] results (arrival etc. relative to the run's start). Returns
 * a status only for a fault of the machinery; a request the budget cannot
 * hold is recorded as failed. *n_done: requests admitted or refused (less
 * than count when the time limit stopped admissions).
 */
static int serve_requests(bench *b, lazyattn_cache *cache, serve_engine *eng, int first, int count,
                          serve_request_result *rec, const char *label, int *n_done) {
    const bench_options *o = b->opt;
    int max_batch = o->max_batch < serve_model_get_config(b->model)->max_rows
                        ? o->max_batch
                        : serve_model_get_config(b->model)->max_rows;
    int n_live = 0, next_arrival = 0, head = 0, tail = 0, finished = 0, st = 0;
    double t0 = serve_now();
    /* Poisson: exponential gaps from a seeded splitmix stream */
    if (o->rate > 0) {
        uint64_t z = o->wl.seed * 0x9E3779B97F4A7C15ull + 12345;
        double t = 0;
        for (int i = 0; i < count; i++) {
            z += 0x9E3779B97F4A7C15ull;
            uint64_t x = z;
            x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
            x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
            x ^= x >> 31;
            double u = ((x >> 11) + 0.5) / 9007199254740992.0;
            t += -log(u) / o->rate;
            b->arrivals[i] = t;
        }
    }
    int stop_admitting = 0;
    while (finished < count) {
        double now = serve_now() - t0;
        if (o->run_seconds > 0 && now > o->run_seconds && !stop_admitting) {
            /* admitted requests are a prefix of the arrival order: finish
             * them, drop the rest */
            stop_admitting = 1;
            count = head < tail ? b->waiting[head] : next_arrival;
            tail = head;
            if (finished >= count) break;
        }
        /* arrivals */
        if (!stop_admitting) {
            if (o->rate > 0) {
                while (next_arrival < count && b->arrivals[next_arrival] <= now) {
                    rec[next_arrival].arrival = b->arrivals[next_arrival];
                    b->waiting[tail++] = next_arrival++;
                }
            } else {
                while (next_arrival < count && (tail - head) + n_live < o->concurrency) {
                    rec[next_arrival].arrival = now;
                    b->waiting[tail++] = next_arrival++;
                }
            }
        }
        /* admissions: plan, prefill, first token */
        while (head < tail && n_live < max_batch) {
            int k = b->waiting[head];
            serve_request_result *r = &rec[k];
            r->id = first + k;
            lazyattn_request_desc desc;
            lazyattn_workload_request wr;
            if ((st = lazyattn_workload_get_request_desc(b->wl, first + k, b->docs, b->doc_lengths,
                                                         &desc)) ||
                (st = lazyattn_workload_get_request(b->wl, first + k, &wr))) {
                serve_lz_fail(st, "workload request");
                goto out;
            }
            desc.max_new_tokens = wr.n_generate;
            r->n_prompt = desc.n_prefix + desc.n_question;
            for (int d = 0; d < desc.n_docs; d++) r->n_prompt += desc.doc_lengths[d];
            lazyattn_request *req = NULL;
            st = lazyattn_request_create(cache, &desc, &req);
            if (st == LAZYATTN_STATUS_BUDGET_EXCEEDED && n_live > 0) {
                st = 0;
                break; /* wait for running requests to release their blocks */
            }
            head++;
            if (st == LAZYATTN_STATUS_BUDGET_EXCEEDED) {
                /* nothing else holds blocks: this request can never fit */
                r->ok = 0;
                r->first_token = r->finish = serve_now() - t0;
                finished++;
                st = 0;
                progress(b, label, finished, count, serve_now() - t0);
                continue;
            }
            if (st) {
                serve_lz_fail(st, "lazyattn_request_create");
                goto out;
            }
            lazyattn_plan plan;
            lazyattn_request_get_plan(req, &plan);
            r->doc_tokens = plan.doc_tokens;
            r->hit_tokens = plan.hit_tokens;
            r->copy_tokens = plan.copy_tokens;
            int32_t tok;
            if ((st = serve_engine_prefill(eng, req, &desc, &tok))) {
                lazyattn_request_destroy(req);
                goto out;
            }
            /* the token is known now; summing profiling events is not the request's time */
            r->first_token = serve_now() - t0;
            serve_timer_collect(&b->timer);
            r->ok = 1;
            r->n_generated = 1;
            if (wr.n_generate <= 1) {
                r->finish = r->first_token;
                lazyattn_request_destroy(req);
                finished++;
                progress(b, label, finished, count, serve_now() - t0);
                continue;
            }
            bench_live *L = &b->live[n_live++];
            L->index = k;
            L->req = req;
            L->target = wr.n_generate;
            L->n_generated = 1;
            L->last = tok;
            L->rec = r;
        }
        /* one decode step over every running request */
        if (n_live > 0) {
            for (int i = 0; i < n_live; i++) {
                b->batch_reqs[i] = b->live[i].req;
                b->batch_tokens[i] = b->live[i].last;
            }
            if ((st = serve_engine_decode(eng, n_live, b->batch_reqs, b->batch_tokens,
                                          b->batch_next)))
                goto out;
            double t = serve_now() - t0;
            serve_timer_collect(&b->timer);
            int w = 0;
            for (int i = 0; i < n_live; i++) {
                bench_live *L = &b->live[i];
                L->last = b->batch_next[i];
                L->n_generated++;
                L->rec->n_generated = L->n_generated;
                if (L->n_generated >= L->target) {
                    L->rec->finish = t;
                    lazyattn_request_destroy(L->req);
                    finished++;
                    progress(b, label, finished, count, t);
                } else {
                    b->live[w++] = *L;
                }
            }
            n_live = w;
        } else if (head == tail && o->rate > 0 && next_arrival < count) {
            sleep_until(t0, b->arrivals[next_arrival]);
        }
    }
out:
    for (int i = 0; i < n_live; i++) lazyattn_request_destroy(b->live[i].req);
    *n_done = st ? finished : count;
    return st;
}

static int bench_run(bench *b, lazyattn_cache_policy policy, uint64_t budget,
                     serve_run_result *out) {
    const bench_options *o = b->opt;
    const serve_model_config *mc = serve_model_get_config(b->model);
    memset(out, 0, sizeof *out);
    snprintf(out->policy, sizeof out->policy, "%s", lazyattn_cache_policy_name(policy));
    out->budget_bytes = budget;
    lazyattn_pool_config pc;
    serve_model_pool_config(mc, budget, &pc);
    lazyattn_pool *pool = NULL;
    lazyattn_cache *cache = NULL;
    serve_engine *eng = NULL;
    int n_measured = o->wl.n_requests;
    serve_request_result *warm = NULL;
    int st = lazyattn_pool_create(b->ctx, &pc, &pool);
    if (st) {
        serve_lz_fail(st, "lazyattn_pool_create");
        goto done;
    }
    lazyattn_cache_config cc = {policy, 0x11A3A11Aull, 0};
    if ((st = lazyattn_cache_create(pool, &cc, &cache))) {
        serve_lz_fail(st, "lazyattn_cache_create");
        goto done;
    }
    if ((st = serve_engine_create(b->model, pool, &eng))) goto done;
    out->requests = calloc((size_t)(n_measured ? n_measured : 1), sizeof *out->requests);
    warm = calloc((size_t)(o->warmup ? o->warmup : 1), sizeof *warm);
    if (!out->requests || !warm) {
        st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "run results");
        goto done;
    }
    char label[64];
    int n_done = 0;
    if (o->warmup > 0) {
        snprintf(label, sizeof label, "%s warm-up", out->policy);
        if ((st = serve_requests(b, cache, eng, 0, o->warmup, warm, label, &n_done))) goto done;
    }
    lazyattn_cache_reset_stats(cache);
    serve_timer_collect(&b->timer);
    memset(b->timer.seconds, 0, sizeof b->timer.seconds);
    memset(b->timer.host_s, 0, sizeof b->timer.host_s);
    b->timer.upload_s = b->timer.wait_s = 0;
    char bt[32];
    snprintf(bt, sizeof bt, "%.4g MiB", (double)budget / (1 << 20));
    snprintf(label, sizeof label, "%s @ %s", out->policy, bt);
    double t0 = serve_now();
    st = serve_requests(b, cache, eng, o->warmup, n_measured, out->requests, label, &n_done);
    out->wall_s = serve_now() - t0;
    out->n_requests = n_done;
    if (st) goto done;
    lazyattn_cache_get_stats(cache, &out->stats);
    memcpy(out->phase_s, b->timer.seconds, sizeof out->phase_s);
    memcpy(out->host_s, b->timer.host_s, sizeof out->host_s);
    out->upload_s = b->timer.upload_s;
    out->wait_s = b->timer.wait_s;
    serve_run_summarise(out);
done:
    free(warm);
    serve_engine_destroy(eng);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
    return st;
}

/* Builds every kernel once before anything is timed (PoCL and CLBlast
 * compile on first use, in seconds): two requests under a position-aware
 * cache, the second reusing the first's document at another start (a copy
 * hit), prefills and a batched decode step. */
static int bench_compile_warmup(bench *b) {
    const serve_model_config *mc = serve_model_get_config(b->model);
    lazyattn_pool_config pc;
    uint64_t per_tok = serve_model_kv_bytes_per_token(mc);
    serve_model_pool_config(mc, per_tok * (uint64_t)mc->block_size * 16, &pc);
    lazyattn_pool *pool = NULL;
    lazyattn_cache *cache = NULL;
    serve_engine *eng = NULL;
    lazyattn_request *req[2] = {NULL, NULL};
    int32_t doc_a[20], doc_b[5], question[3] = {1, 2, 3};
    for (int i = 0; i < 20; i++) doc_a[i] = (i * 7 + 1) % mc->vocab;
    for (int i = 0; i < 5; i++) doc_b[i] = (i * 5 + 3) % mc->vocab;
    const int32_t *docs[2][2] = {{doc_a, NULL}, {doc_b, doc_a}};
    int32_t lens[2][2] = {{20, 0}, {5, 20}};
    int st = lazyattn_pool_create(b->ctx, &pc, &pool);
    if (st) return serve_lz_fail(st, "lazyattn_pool_create");
    lazyattn_cache_config cc = {LAZYATTN_CACHE_POLICY_POSITION, 1, 0};
    if ((st = lazyattn_cache_create(pool, &cc, &cache))) {
        serve_lz_fail(st, "lazyattn_cache_create");
        goto done;
    }
    if ((st = serve_engine_create(b->model, pool, &eng))) goto done;
    int32_t first[2], next[2];
    for (int r = 0; r < 2; r++) {
        lazyattn_request_desc d = {0, NULL, r + 1, docs[r], lens[r], 3, question, 2};
        if ((st = lazyattn_request_create(cache, &d, &req[r]))) {
            serve_lz_fail(st, "lazyattn_request_create");
            goto done;
        }
        if ((st = serve_engine_prefill(eng, req[r], &d, &first[r]))) goto done;
    }
    if ((st = serve_engine_decode(eng, 2, req, first, next))) goto done;
    cl_int err = clFinish(lazyattn_context_queue(b->ctx));
    if (err != CL_SUCCESS) st = serve_cl_fail(err, "clFinish");
done:
    lazyattn_request_destroy(req[0]);
    lazyattn_request_destroy(req[1]);
    serve_engine_destroy(eng);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
    return st;
}

/* ---- main ---- */

static void bench_free(bench *b) {
    free(b->docs);
    free(b->doc_lengths);
    free(b->live);
    free(b->batch_reqs);
    free(b->batch_tokens);
    free(b->batch_next);
    free(b->waiting);
    free(b->arrivals);
    serve_timer_release(&b->timer);
    lazyattn_workload_destroy(b->wl);
    serve_model_destroy(b->model);
    lazyattn_context_destroy(b->ctx);
}

int main(int argc, char **argv) {
    bench_options o;
    if (parse_args(argc, argv, &o)) return 2;
    bench b;
    memset(&b, 0, sizeof b);
    b.opt = &o;
    serve_run_result *runs = NULL;
    int n_runs = 0, st = 0;
    serve_gguf *gguf = NULL;
    double t_start = serve_now();

    serve_model_config mc;
    if ((st = serve_model_config_preset(&mc, o.model))) goto fail;
    if (o.gguf) {
        if ((st = serve_gguf_open(o.gguf, &gguf)) || (st = serve_gguf_model_config(gguf, &mc)))
            goto fail;
    }
    if (o.max_rows > 0) mc.max_rows = o.max_rows;
    if (o.kv_f32) mc.kv_dtype = LAZYATTN_DTYPE_F32;
    if (mc.max_rows < o.max_batch) o.max_batch = mc.max_rows;
    o.wl.vocab_size = mc.vocab;
    if (o.n_budgets == 0) {
        /* default: half and twice the KV of the whole document pool, and
         * never less than two requests' working sets */
        uint64_t per_tok = serve_model_kv_bytes_per_token(&mc);
        uint64_t B = (uint64_t)mc.block_size;
        uint64_t doc_blocks = ((uint64_t)(o.wl.doc_len_min + o.wl.doc_len_max) / 2 + B - 1) / B;
        uint64_t pool = per_tok * B * doc_blocks * (uint64_t)o.wl.n_docs;
        uint64_t req = per_tok * B *
                       (((uint64_t)o.wl.prefix_len + B - 1) / B +
                        (uint64_t)o.wl.docs_per_request * (((uint64_t)o.wl.doc_len_max + B - 1) / B) +
                        ((uint64_t)o.wl.question_max + o.wl.gen_max + B - 1) / B);
        o.budgets[0] = pool / 2 > 2 * req ? pool / 2 : 2 * req;
        o.budgets[1] = pool * 2 > 2 * o.budgets[0] ? pool * 2 : 2 * o.budgets[0];
        o.n_budgets = 2;
    }
    qsort(o.budgets, (size_t)o.n_budgets, sizeof o.budgets[0], cmp_u64);

    lazyattn_context_options co;
    lazyattn_context_options_init(&co);
    co.profiling = !o.no_profiling;
    if ((st = lazyattn_context_create(&co, &b.ctx))) {
        serve_lz_fail(st, "lazyattn_context_create");
        goto fail;
    }
    double t_model = serve_now();
    if ((st = serve_model_create(b.ctx, &mc, &b.model))) goto fail;
    st = gguf ? serve_model_load_gguf(b.model, gguf) : serve_model_init_random(b.model, o.seed);
    if (st) goto fail;
    serve_gguf_close(gguf);
    gguf = NULL;
    if ((st = bench_compile_warmup(&b))) goto fail;
    t_model = serve_now() - t_model;
    b.timer.enabled = !o.no_profiling;
    serve_model_set_timer(b.model, &b.timer);

    int total = o.warmup + o.wl.n_requests;
    lazyattn_workload_config wc = o.wl;
    wc.n_requests = total;
    if ((st = lazyattn_workload_create(&wc, &b.wl))) {
        serve_lz_fail(st, "lazyattn_workload_create");
        goto fail;
    }
    int k = o.wl.docs_per_request > 0 ? o.wl.docs_per_request : 1;
    int nb = o.max_batch + 1;
    b.docs = calloc((size_t)k, sizeof *b.docs);
    b.doc_lengths = calloc((size_t)k, sizeof *b.doc_lengths);
    b.live = calloc((size_t)nb, sizeof *b.live);
    b.batch_reqs = calloc((size_t)nb, sizeof *b.batch_reqs);
    b.batch_tokens = calloc((size_t)nb, sizeof *b.batch_tokens);
    b.batch_next = calloc((size_t)nb, sizeof *b.batch_next);
    b.waiting = calloc((size_t)total + 1, sizeof *b.waiting);
    b.arrivals = calloc((size_t)total + 1, sizeof *b.arrivals);
    runs = calloc((size_t)(o.n_budgets * o.n_policies), sizeof *runs);
    if (!b.docs || !b.doc_lengths || !b.live || !b.batch_reqs || !b.batch_tokens ||
        !b.batch_next || !b.waiting || !b.arrivals || !runs) {
        st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "rag_bench");
        goto fail;
    }

    printf("# rag_bench on %s\n", lazyattn_context_device_name(b.ctx));
    printf("# model %s: %d layers, hidden %d, %d heads / %d KV heads, d %d, FFN %d, vocab %d "
           "(%.3g M params, f32 weights %s, %.1f s to set up and build kernels); KV %s, %llu B/token, block %d\n",
           o.gguf ? o.gguf : o.model, mc.n_layers, mc.hidden, mc.n_heads, mc.n_kv_heads,
           mc.head_dim, mc.ffn, mc.vocab, serve_model_config_n_params(&mc) / 1e6,
           o.gguf ? "from GGUF" : "random", t_model, mc.kv_dtype == LAZYATTN_DTYPE_F16 ? "f16" : "f32",
           (unsigned long long)serve_model_kv_bytes_per_token(&mc), mc.block_size);
    printf("# workload %s: %d docs of %d-%d tokens, k = %d, alpha = %.2f, prefix %d, question "
           "%d-%d, generate %d-%d, %d requests (+%d warm-up, excluded), %s\n",
           o.workload, o.wl.n_docs, o.wl.doc_len_min, o.wl.doc_len_max, o.wl.docs_per_request,
           o.wl.alpha, o.wl.prefix_len, o.wl.question_min, o.wl.question_max, o.wl.gen_min,
           o.wl.gen_max, o.wl.n_requests, o.warmup,
           o.rate > 0 ? "Poisson arrivals" : "closed loop");
    if (o.rate > 0)
        printf("# arrivals: Poisson at %.3g requests/s; decode batch <= %d\n", o.rate, o.max_batch);
    else
        printf("# closed loop: %d clients; decode batch <= %d\n", o.concurrency, o.max_batch);
    fflush(stdout);

    for (int bi = 0; bi < o.n_budgets; bi++)
        for (int pi = 0; pi < o.n_policies; pi++) {
            st = bench_run(&b, o.policies[pi], o.budgets[bi], &runs[n_runs]);
            if (st) {
                fprintf(stderr, "\nrag_bench: %s at %llu B: %s: %s\n",
                        lazyattn_cache_policy_name(o.policies[pi]),
                        (unsigned long long)o.budgets[bi], lazyattn_status_string(st),
                        serve_last_error());
                serve_run_release(&runs[n_runs]);
                goto fail;
            }
            n_runs++;
        }

    printf("\n");
    serve_print_table(stdout, runs, n_runs);
    printf("\nDevice time per phase (profiling events; host, sync, idle = wall - device):\n\n");
    serve_print_phases(stdout, runs, n_runs);
    printf("\nHost time inside enqueue calls (launch overhead), blocking uploads and waits:\n\n");
    serve_print_host(stdout, runs, n_runs);
    char path[1024];
    snprintf(path, sizeof path, "%s.csv", o.out_prefix);
    if ((st = serve_write_csv(path, runs, n_runs))) goto fail;
    snprintf(path, sizeof path, "%s_summary.csv", o.out_prefix);
    if ((st = serve_write_summary_csv(path, runs, n_runs))) goto fail;
    snprintf(path, sizeof path, "%s_ttft.svg", o.out_prefix);
    if ((st = serve_write_svg_ttft(path, runs, n_runs, o.budgets[0]))) goto fail;
    snprintf(path, sizeof path, "%s_budget.svg", o.out_prefix);
    if ((st = serve_write_svg_budget(path, runs, n_runs))) goto fail;
    printf("\nwrote %s.csv, %s_summary.csv, %s_ttft.svg, %s_budget.svg; total %.1f s\n",
           o.out_prefix, o.out_prefix, o.out_prefix, o.out_prefix, serve_now() - t_start);
    for (int i = 0; i < n_runs; i++) serve_run_release(&runs[i]);
    free(runs);
    bench_free(&b);
    return 0;
fail:
    fprintf(stderr, "rag_bench: %s: %s\n", lazyattn_status_string(st), serve_last_error());
    serve_gguf_close(gguf);
    for (int i = 0; i < n_runs; i++) serve_run_release(&runs[i]);
    free(runs);
    bench_free(&b);
    return 1;
}
