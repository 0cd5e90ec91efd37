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
#include "cli_options.h"
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
    int no_device_plans;
} bench_options;

static const char usage_text[] =
    "usage: rag_bench [options]\n"
    "  --model tiny|small|8b     model shape, random weights (default small;\n"
    "                            8b = Llama-3.1-8B shape, vocab reduced to 32000)\n"
    "  --gguf FILE               llama GGUF (f32/f16): shape and weights from the file\n"
    "  --workload small|paper|rag  workload preset (default small)\n"
    "  --requests N (1..1000000)  --warmup N (0..1000000)  --docs D (1..1000000)\n"
    "  --doc-len MIN:MAX  --k K (1..1024)  --alpha A (0.001..100)\n"
    "  --question MIN:MAX  --gen MIN:MAX  --prefix N  --workload-seed S\n"
    "  --concurrency C           closed loop with C clients (default 4, 1..65536)\n"
    "  --rate R                  Poisson arrivals at R requests/s instead (0.001..1000000)\n"
    "  --max-batch B             most requests per decode step (default 64, 1..65536)\n"
    "  --budget LIST             KV budgets, e.g. 2MiB,8MiB or 1GiB,4GiB (B, KiB, MiB, GiB, TiB;\n"
    "                            at most 16, each 1 KiB..1 PiB)\n"
    "  --policies LIST           lazy,position,prefix,none (default all four)\n"
    "  --out PREFIX              output files PREFIX.csv, PREFIX_summary.csv,\n"
    "                            PREFIX_ttft.svg, PREFIX_budget.svg (default rag_bench)\n"
    "  --run-seconds S           stop admitting requests S seconds into a run\n"
    "  --max-rows N              most tokens per forward (prefill chunk, 1..65536)\n"
    "  --kv-f32                  K/V stored as f32 (default f16)\n"
    "  --no-profiling            queue without profiling (no device time per phase)\n"
    "  --no-device-plans         upload host tables every forward (to compare host time)\n"
    "  --seed S                  weight seed (default 1)\n"
    "  --progress / --no-progress\n"
    "Device: LAZYATTN_PLATFORM / LAZYATTN_DEVICE name substrings.\n"
    "Exit status: 0 every run served requests, 1 a failure or a run that completed no request\n"
    "(e.g. every request refused by the budget), 2 a bad command line.\n";

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

static int policy_word(const char *word, int *value) {
    lazyattn_cache_policy p;
    if (lazyattn_cache_policy_parse(word, &p) != LAZYATTN_STATUS_OK) return -1;
    *value = (int)p;
    return 0;
}

/* CLI_OK, CLI_HELP or CLI_USAGE_ERROR (the reason printed). */
static int parse_args(int argc, char **argv, bench_options *o) {
    static const char *const models[] = {"tiny", "small", "8b"};
    static const char *const workloads[] = {"small", "paper", "rag"};
    memset(o, 0, sizeof *o);
    o->concurrency = 4;
    o->max_batch = 64;
    o->out_prefix = "rag_bench";
    o->progress = -1;
    o->seed = 1;
    int model = 1, workload = 0, progress = 0, no_progress = 0, policies[4];
    int doc_len[2], question[2], gen[2];
    cli_option opts[] = {
        {.name = "--model", .type = CLI_ENUM, .dest = &model, .choices = "tiny|small|8b"},
        {.name = "--gguf", .type = CLI_STRING, .dest = &o->gguf},
        {.name = "--workload", .type = CLI_ENUM, .dest = &workload, .choices = "small|paper|rag"},
        {.name = "--requests", .type = CLI_INT, .dest = &o->wl.n_requests, .min = 1, .max = 1000000},
        {.name = "--warmup", .type = CLI_INT, .dest = &o->warmup, .min = 0, .max = 1000000},
        {.name = "--docs", .type = CLI_INT, .dest = &o->wl.n_docs, .min = 1, .max = 1000000},
        {.name = "--doc-len", .type = CLI_RANGE, .dest = doc_len, .min = 1, .max = 1 << 20},
        {.name = "--k", .type = CLI_INT, .dest = &o->wl.docs_per_request, .min = 1, .max = 1024},
        {.name = "--alpha", .type = CLI_DOUBLE, .dest = &o->wl.alpha, .min = 1e-3, .max = 100},
        {.name = "--question", .type = CLI_RANGE, .dest = question, .min = 1, .max = 1 << 20},
        {.name = "--gen", .type = CLI_RANGE, .dest = gen, .min = 0, .max = 1 << 20},
        {.name = "--prefix", .type = CLI_INT, .dest = &o->wl.prefix_len, .min = 0, .max = 1 << 20},
        {.name = "--workload-seed", .type = CLI_U64, .dest = &o->wl.seed},
        {.name = "--concurrency", .type = CLI_INT, .dest = &o->concurrency, .min = 1, .max = 65536},
        /* below 0.001/s a run waits hours per arrival; the gaps stay finite */
        {.name = "--rate", .type = CLI_DOUBLE, .dest = &o->rate, .min = 1e-3, .max = 1e6},
        {.name = "--max-batch", .type = CLI_INT, .dest = &o->max_batch, .min = 1, .max = 65536},
        {.name = "--budget", .type = CLI_SIZE_LIST, .dest = o->budgets, .min = 1024,
         .max = 1125899906842624.0, .max_items = 16, .count = &o->n_budgets},
        {.name = "--policies", .type = CLI_ENUM_LIST, .dest = policies, .choices =
         "lazy|position|prefix|none", .parse_item = policy_word, .max_items = 4,
         .count = &o->n_policies},
        {.name = "--out", .type = CLI_STRING, .dest = &o->out_prefix},
        {.name = "--run-seconds", .type = CLI_DOUBLE, .dest = &o->run_seconds, .min = 1e-3,
         .max = 1e6},
        {.name = "--max-rows", .type = CLI_INT, .dest = &o->max_rows, .min = 1, .max = 65536},
        {.name = "--seed", .type = CLI_U64, .dest = &o->seed},
        {.name = "--no-profiling", .type = CLI_FLAG, .dest = &o->no_profiling},
        {.name = "--no-device-plans", .type = CLI_FLAG, .dest = &o->no_device_plans},
        {.name = "--kv-f32", .type = CLI_FLAG, .dest = &o->kv_f32},
        {.name = "--progress", .type = CLI_FLAG, .dest = &progress},
        {.name = "--no-progress", .type = CLI_FLAG, .dest = &no_progress},
    };
    enum { N_OPTS = sizeof opts / sizeof opts[0] };
    /* Twice: the first pass finds the workload preset, the second overrides it. */
    int r = cli_parse("rag_bench", usage_text, opts, N_OPTS, argc, argv);
    if (r) return r;
    o->workload = workloads[workload];
    if (workload == 0) workload_small(&o->wl);
    else if (lazyattn_workload_config_preset(o->workload, &o->wl) != 0)
        return cli_fail("rag_bench", "--workload", "%s", lazyattn_last_error());
    if ((r = cli_parse("rag_bench", usage_text, opts, N_OPTS, argc, argv))) return r;
    o->model = models[model];
    if (cli_given(opts, N_OPTS, "--doc-len")) o->wl.doc_len_min = doc_len[0], o->wl.doc_len_max = doc_len[1];
    if (cli_given(opts, N_OPTS, "--question"))
        o->wl.question_min = question[0], o->wl.question_max = question[1];
    if (cli_given(opts, N_OPTS, "--gen")) o->wl.gen_min = gen[0], o->wl.gen_max = gen[1];
    if (cli_given(opts, N_OPTS, "--gguf") && cli_given(opts, N_OPTS, "--model"))
        return cli_fail("rag_bench", "--gguf", "the file gives the model's shape: drop --model");
    if (cli_given(opts, N_OPTS, "--rate") && cli_given(opts, N_OPTS, "--concurrency"))
        return cli_fail("rag_bench", "--rate", "Poisson arrivals or a closed loop "
                        "(--concurrency), not both");
    if (strlen(o->out_prefix) > 900) /* the output paths are PREFIX + a suffix in 1 KiB */
        return cli_fail("rag_bench", "--out", "the prefix is longer than 900 characters");
    if (progress && no_progress)
        return cli_fail("rag_bench", "--progress", "and --no-progress both given");
    if (o->wl.docs_per_request > o->wl.n_docs)
        return cli_fail("rag_bench", "--k", "%d documents per request, only %d documents",
                        o->wl.docs_per_request, o->wl.n_docs);
    if (o->wl.question_min < 1)
        return cli_fail("rag_bench", "--question", "a question has at least one token");
    /* documents' tokens live in host memory: 2^28 of them (1 GiB) at most */
    if ((int64_t)o->wl.n_docs * o->wl.doc_len_max > ((int64_t)1 << 28))
        return cli_fail("rag_bench", "--docs", "%d documents of up to %d tokens exceed 2^28 tokens",
                        o->wl.n_docs, o->wl.doc_len_max);
    if (o->n_policies == 0) {
        o->policies[0] = LAZYATTN_CACHE_POLICY_LAZY;
        o->policies[1] = LAZYATTN_CACHE_POLICY_POSITION;
        o->policies[2] = LAZYATTN_CACHE_POLICY_PREFIX;
        o->policies[3] = LAZYATTN_CACHE_POLICY_NONE;
        o->n_policies = 4;
    } else {
        for (int i = 0; i < o->n_policies; i++) o->policies[i] = (lazyattn_cache_policy)policies[i];
    }
    o->progress = progress ? 1 : no_progress ? 0 : isatty(2);
    return CLI_OK;
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

/* Sleeps until when (seconds after t0), one second at most: the loop
 * looks at the clock again (and at --run-seconds) between naps. */
static void sleep_until(double t0, double when) {
    double d = when - (serve_now() - t0);
    if (!(d > 0)) return;
    if (d > 1.0) d = 1.0;
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
    serve_engine_use_device_plans(eng, !o->no_device_plans);
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
    b->timer.decode_host_s = b->timer.prefill_host_s = 0;
    b->timer.decode_steps = b->timer.prefill_forwards = 0;
    b->timer.decode_cpu_s = b->timer.prefill_cpu_s = b->timer.wait_cpu_s = 0;
    b->timer.upload_cpu_s = b->timer.decode_tables_s = b->timer.decode_tables_cpu_s = 0;
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
    out->decode_host_s = b->timer.decode_host_s;
    out->prefill_host_s = b->timer.prefill_host_s;
    out->decode_steps = b->timer.decode_steps;
    out->prefill_forwards = b->timer.prefill_forwards;
    out->decode_cpu_s = b->timer.decode_cpu_s;
    out->prefill_cpu_s = b->timer.prefill_cpu_s;
    out->decode_tables_s = b->timer.decode_tables_s;
    out->decode_tables_cpu_s = b->timer.decode_tables_cpu_s;
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
    int r = parse_args(argc, argv, &o);
    if (r) return r == CLI_HELP ? 0 : 2;
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
         * never less than two requests' working sets (in double: a GGUF
         * shape times a large workload may pass 2^64 bytes) */
        double per_tok = (double)serve_model_kv_bytes_per_token(&mc);
        double B = (double)mc.block_size;
        double doc_blocks = ceil(((double)o.wl.doc_len_min + o.wl.doc_len_max) / 2 / B);
        double pool = per_tok * B * doc_blocks * o.wl.n_docs;
        double req = per_tok * B *
                     (ceil(o.wl.prefix_len / B) + o.wl.docs_per_request * ceil(o.wl.doc_len_max / B) +
                      ceil(((double)o.wl.question_max + o.wl.gen_max) / B));
        double b0 = pool / 2 > 2 * req ? pool / 2 : 2 * req;
        double b1 = pool * 2 > 2 * b0 ? pool * 2 : 2 * b0;
        if (b1 > 1125899906842624.0) {
            fprintf(stderr, "rag_bench: --budget: the default budgets (%.4g and %.4g B) exceed "
                            "1 PiB for this model and workload; give --budget\n", b0, b1);
            return 2;
        }
        o.budgets[0] = (uint64_t)b0;
        o.budgets[1] = (uint64_t)b1;
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
    /* A run that completed no request measured nothing: say so, and fail. */
    int empty = 0;
    for (int i = 0; i < n_runs; i++)
        if (runs[i].n_ok == 0) {
            fprintf(stderr, "rag_bench: %s at %llu B completed none of its %d requests (%s)\n",
                    runs[i].policy, (unsigned long long)runs[i].budget_bytes, o.wl.n_requests,
                    runs[i].n_failed ? "refused: the budget cannot hold a request's working set"
                                     : "--run-seconds ended the run first");
            empty++;
        }
    for (int i = 0; i < n_runs; i++) serve_run_release(&runs[i]);
    free(runs);
    bench_free(&b);
    return empty ? 1 : 0;
fail:
    fprintf(stderr, "rag_bench: %s: %s\n", lazyattn_status_string(st), serve_last_error());
    serve_gguf_close(gguf);
    for (int i = 0; i < n_runs; i++) serve_run_release(&runs[i]);
    free(runs);
    bench_free(&b);
    return 1;
}
