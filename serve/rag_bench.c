/* SPDX-License-Identifier: Apache-2.0 */
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
 * PREFIX_ttft.svg, PREFIX_budget.svg and, with several budgets,
 * PREFIX_ttft_budgets.svg.
 *
 * With --tier, the LAZY cache has a document tier (host memory, a
 * directory or Redis): GPU misses are loaded from it before they are
 * recomputed (TTFT includes the load). With --processes N, N serving
 * processes (fork; each its own context, model and cache) run the same
 * workload twice: first with N separate caches, then sharing the tier, and
 * the recomputed document tokens and TTFT of both are compared. The
 * workload is replicated, not split: every process serves every request,
 * process i starting at request i*R/N and wrapping around, as replicas
 * behind a balancer see the same popular documents at different times. A
 * replicated workload makes "N separate caches compute each document N
 * times, a shared tier about once" measurable directly; a split one would
 * mix that with how the shares overlap.
 */
#include "cli_options.h"
#include "dispatch.h"
#include "serve.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- the tier's store, from --tier ---- */

typedef enum tier_kind { TIER_NONE = 0, TIER_HOST, TIER_DIR, TIER_REDIS } tier_kind;

typedef struct tier_spec {
    tier_kind kind;
    uint64_t host_bytes;  /* host:SIZE */
    const char *path;     /* dir:PATH */
    const char *url;      /* redis://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...] */
    char password[512];   /* --tier-password-file or LAZYATTN_REDIS_PASSWORD; "": none */
    char shown[1024];     /* --tier as printed: any password as "***" */
} tier_spec;

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
    const char *tier_text;  /* --tier as given */
    const char *tier_password_file; /* --tier-password-file */
    tier_spec tier;
    int tier_mode;          /* lazyattn_tier_mode */
    int tier_write_queue;   /* lazyattn_tier_options.write_queue (0: writes on this thread) */
    int tier_cost;          /* the cost rule: the prefill rate measured, given to the tier */
    int tier_load;          /* lazyattn_tier_options.load: 0 background (default), 1 pipelined,
                               2 sync */
    int processes;          /* 0: one process, the per-policy table */
    int rounds;             /* --processes: rounds of (separate, shared) */
    const char *devices_text; /* --devices as given */
    int devices[64];        /* --devices: one serving process per entry, on that device */
    int n_devices;          /* 0: no --devices */
    int balance;            /* --devices: dispatch_balance */
    int device_index;       /* a --devices process's device; -1: the default choice */
    int no_device_plans;
    int no_batched_prefill;
    int gemm;               /* serve_gemm_mode */
    int prefill_chunk;      /* rows per prefill forward, decode steps between (0: off) */
    int retained_budget;    /* budgets are what the cache keeps; working sets on top */
    double time_limit;      /* seconds for the whole program (0: none) */
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
    "                            PREFIX_ttft.svg, PREFIX_budget.svg, with several budgets\n"
    "                            PREFIX_ttft_budgets.svg (default rag_bench)\n"
    "  --run-seconds S           stop admitting requests S seconds into a run\n"
    "  --max-rows N              most tokens per forward (prefill chunk, 1..65536)\n"
    "  --kv-f32                  K/V stored as f32 (default f16)\n"
    "  --gemm auto|f32|bf16      projections: f32 CLBlast or bf16 weights and GEMMs (default\n"
    "                            auto: bf16 on NVIDIA compute capability >= 8, else f32)\n"
    "  --no-profiling            queue without profiling (no device time per phase)\n"
    "  --no-device-plans         upload host tables every forward (to compare host time)\n"
    "  --no-batched-prefill      one forward per prefill segment chunk, tables repacked per\n"
    "                            chunk (the way before batched prefill, to compare)\n"
    "  --prefill-chunk N         prefill in forwards of at most N tokens, a decode step of\n"
    "                            the running requests between two (default 2048; 0: off,\n"
    "                            forwards of --max-rows, nothing between; else >= a KV block)\n"
    "  --retained-budget         a budget is the KV the cache keeps between requests; the\n"
    "                            pool adds room for the working sets of the requests in\n"
    "                            flight (default: the budget is the whole pool)\n"
    "  --time-limit S            the whole program within about S seconds: each run stops\n"
    "                            admitting requests (warm-up ones too) at its share of the\n"
    "                            time left (runs in order lazy, position, prefix, none); a\n"
    "                            run cut short is marked so, and the exit status is 3\n"
    "  --seed S                  weight seed (default 1)\n"
    "  --tier host:SIZE|dir:PATH|redis://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...]\n"
    "                            a document tier behind the LAZY cache (lazy policy only):\n"
    "                            GPU misses are loaded from it before being recomputed;\n"
    "                            redis://: one server or the seeds of a Redis Cluster, IPv6\n"
    "                            hosts in brackets; a password not in the URL comes from\n"
    "                            --tier-password-file or LAZYATTN_REDIS_PASSWORD\n"
    "  --tier-password-file FILE the Redis password on FILE's first line (off the command line)\n"
    "  --tier-mode through|back|read  write at commit (default), at eviction, or never\n"
    "  --tier-write-queue N      writes from the tier's background writer, N queued at most\n"
    "                            (0..1024; default 0: written on the serving thread)\n"
    "  --tier-cost               load a document from the tier only when that is faster than\n"
    "                            recomputing it (the prefill rate and the store's bandwidth\n"
    "                            measured once at start), and write only such documents\n"
    "  --tier-load background|pipelined|sync  a tier hit's get, checks and upload on the\n"
    "                            tier's loader thread while the running batch decodes\n"
    "                            (default); its upload on the tier's copy queue, layer by\n"
    "                            layer, the rest in the request's planning; or all of it there\n"
    "                            (the synchronous load, for comparison)\n"
    "  --processes N             N serving processes (1..64) on the workload, replicated\n"
    "                            (process i starts at request i*R/N): once with N separate\n"
    "                            caches, once sharing --tier (dir: or redis://); compares\n"
    "                            recomputed document tokens and TTFT\n"
    "  --rounds K                --processes: K rounds of both, alternating (1..100, default 1);\n"
    "                            with --run-seconds S, no round starts S seconds after the first\n"
    "                            (each process run admits for S seconds; the rounds not run are\n"
    "                            reported, exit status 3); no --out (the table is on stdout)\n"
    "  --devices LIST            one serving process per listed device (global indices as\n"
    "                            list_devices prints them, e.g. 0,1; one may repeat; at most\n"
    "                            64), one workload split among them as a load balancer would:\n"
    "                            once with separate caches, once sharing --tier (dir: or\n"
    "                            redis://); per-device and total tables; --concurrency and\n"
    "                            --rate are the whole host's\n"
    "  --balance least|rr        --devices: each arriving request to the process with the\n"
    "                            fewest outstanding (default), or to each in turn\n"
    "  --progress / --no-progress\n"
    "Device: LAZYATTN_PLATFORM / LAZYATTN_DEVICE name substrings.\n"
    "Exit status: 0 every run served all its requests, 1 a failure or a run that completed no\n"
    "request (e.g. every request refused by the budget), 2 a bad command line, 3 a run cut\n"
    "short by --run-seconds or --time-limit (its results are written, marked as cut).\n";

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

/* host:SIZE, dir:PATH or redis://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...];
 * CLI_OK or a usage error printed. */
static int tier_parse(const char *text, tier_spec *t) {
    memset(t, 0, sizeof *t);
    snprintf(t->shown, sizeof t->shown, "%s", text);
    if (strncmp(text, "host:", 5) == 0) {
        t->kind = TIER_HOST;
        return cli_parse_size("rag_bench", "--tier", text + 5, NULL, 0, 1024, 1125899906842624.0,
                              &t->host_bytes);
    }
    if (strncmp(text, "dir:", 4) == 0) {
        t->kind = TIER_DIR;
        t->path = text + 4;
        if (!t->path[0]) return cli_fail("rag_bench", "--tier", "dir: needs a path");
        return CLI_OK;
    }
    if (strncmp(text, "redis://", 8) == 0 || strncmp(text, "rediss://", 9) == 0) {
        /* seeds, user and password as the library reads them */
        t->kind = TIER_REDIS;
        t->url = text;
        const char *at = strrchr(text, '@'), *colon = strchr(text + 8, ':');
        if (at && colon && colon < at)
            snprintf(t->shown, sizeof t->shown, "%.*s:***%s", (int)(colon - text), text, at);
        if (lazyattn_redis_url_check(text) != LAZYATTN_STATUS_OK)
            return cli_fail("rag_bench", "--tier", "%s", lazyattn_last_error());
        return CLI_OK;
    }
    return cli_fail("rag_bench", "--tier", "'%s': expected host:SIZE, dir:PATH or redis://HOST:PORT",
                    text);
}

/* The password of a Redis tier from the first line of path (its newline
 * dropped): CLI_OK, or a usage error printed (never the password). */
static int tier_read_password(const char *path, tier_spec *t) {
    FILE *f = fopen(path, "r");
    if (!f) return cli_fail("rag_bench", "--tier-password-file", "%s: %s", path, strerror(errno));
    int ok = fgets(t->password, sizeof t->password, f) != NULL;
    fclose(f);
    size_t n = ok ? strcspn(t->password, "\r\n") : 0;
    if (ok && t->password[n] == '\0' && n == sizeof t->password - 1)
        return cli_fail("rag_bench", "--tier-password-file", "%s: longer than %zu bytes", path,
                        sizeof t->password - 2);
    t->password[n] = '\0';
    if (!n) return cli_fail("rag_bench", "--tier-password-file", "%s: no password on its first line",
                            path);
    return CLI_OK;
}

static int tier_open(const tier_spec *t, lazyattn_store **out) {
    int st;
    if (t->kind == TIER_HOST) {
        st = lazyattn_store_create_host(t->host_bytes, out);
    } else if (t->kind == TIER_DIR) {
        st = lazyattn_store_create_dir(t->path, out);
    } else {
        lazyattn_redis_config rc;
        lazyattn_redis_config_init(&rc);
        rc.url = t->url;
        rc.password = t->password[0] ? t->password : NULL;
        st = lazyattn_store_create_redis(&rc, out);
    }
    return st ? serve_lz_fail(st, "opening the tier's store") : LAZYATTN_STATUS_OK;
}

static int policy_word(const char *word, int *value) {
    lazyattn_cache_policy p;
    if (lazyattn_cache_policy_parse(word, &p) != LAZYATTN_STATUS_OK) return -1;
    *value = (int)p;
    return 0;
}

/* --devices LIST: global device indices (0..1000000), comma separated,
 * 1..64 of them, repeats allowed (processes sharing a device). */
static int devices_parse(const char *text, bench_options *o) {
    const char *c = text;
    o->n_devices = 0;
    for (;;) {
        if (o->n_devices == 64)
            return cli_fail("rag_bench", "--devices", "more than 64 devices in \"%s\"", text);
        long v = 0;
        const char *start = c;
        while (*c >= '0' && *c <= '9' && v <= 1000000) v = v * 10 + (*c++ - '0');
        if (c == start || v > 1000000 || (*c && *c != ','))
            return cli_fail("rag_bench", "--devices", "\"%s\" is not a list of device indices "
                            "(0,1,...: list_devices prints them)", text);
        o->devices[o->n_devices++] = (int)v;
        if (!*c) return CLI_OK;
        c++;
    }
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
    o->tier_mode = LAZYATTN_TIER_WRITE_THROUGH;
    o->rounds = 1;
    o->prefill_chunk = 2048;
    o->device_index = -1;
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
        {.name = "--no-batched-prefill", .type = CLI_FLAG, .dest = &o->no_batched_prefill},
        {.name = "--prefill-chunk", .type = CLI_INT, .dest = &o->prefill_chunk, .min = 0,
         .max = 65536},
        {.name = "--retained-budget", .type = CLI_FLAG, .dest = &o->retained_budget},
        {.name = "--time-limit", .type = CLI_DOUBLE, .dest = &o->time_limit, .min = 1, .max = 1e6},
        {.name = "--kv-f32", .type = CLI_FLAG, .dest = &o->kv_f32},
        {.name = "--gemm", .type = CLI_ENUM, .dest = &o->gemm, .choices = "auto|f32|bf16"},
        {.name = "--tier", .type = CLI_STRING, .dest = &o->tier_text},
        {.name = "--tier-password-file", .type = CLI_STRING, .dest = &o->tier_password_file},
        {.name = "--tier-mode", .type = CLI_ENUM, .dest = &o->tier_mode, .choices = "read|back|through"},
        {.name = "--tier-write-queue", .type = CLI_INT, .dest = &o->tier_write_queue, .min = 0,
         .max = LAZYATTN_MAX_TIER_WRITE_QUEUE},
        {.name = "--tier-cost", .type = CLI_FLAG, .dest = &o->tier_cost},
        {.name = "--tier-load", .type = CLI_ENUM, .dest = &o->tier_load,
         .choices = "background|pipelined|sync"},
        {.name = "--processes", .type = CLI_INT, .dest = &o->processes, .min = 1, .max = 64},
        {.name = "--rounds", .type = CLI_INT, .dest = &o->rounds, .min = 1, .max = 100},
        {.name = "--devices", .type = CLI_STRING, .dest = &o->devices_text},
        {.name = "--balance", .type = CLI_ENUM, .dest = &o->balance, .choices = "least|rr"},
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
        return cli_fail("rag_bench", "--workload", "%s", lazyattn_testing_last_error());
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
    if (o->tier_text) {
        int r2 = tier_parse(o->tier_text, &o->tier);
        if (r2) return r2;
        if (o->tier_password_file && o->tier.kind != TIER_REDIS)
            return cli_fail("rag_bench", "--tier", "a password is for redis:// only");
        if (o->tier_password_file) {
            r2 = tier_read_password(o->tier_password_file, &o->tier);
            if (r2) return r2;
        } else if (getenv("LAZYATTN_REDIS_PASSWORD"))
            snprintf(o->tier.password, sizeof o->tier.password, "%s",
                     getenv("LAZYATTN_REDIS_PASSWORD"));
        for (int i = 0; i < o->n_policies; i++)
            if (policies[i] != LAZYATTN_CACHE_POLICY_LAZY)
                return cli_fail("rag_bench", "--tier", "only the lazy policy has a tier "
                                "(its documents are position-independent): --policies lazy");
        if (o->n_policies == 0) policies[0] = LAZYATTN_CACHE_POLICY_LAZY, o->n_policies = 1;
    } else if (cli_given(opts, N_OPTS, "--tier-mode")) {
        return cli_fail("rag_bench", "--tier-mode", "needs --tier");
    } else if (o->tier_password_file) {
        return cli_fail("rag_bench", "--tier-password-file", "needs --tier redis://...");
    } else if (cli_given(opts, N_OPTS, "--tier-write-queue")) {
        return cli_fail("rag_bench", "--tier-write-queue", "needs --tier");
    } else if (o->tier_cost) {
        return cli_fail("rag_bench", "--tier-cost", "needs --tier");
    } else if (cli_given(opts, N_OPTS, "--tier-load")) {
        return cli_fail("rag_bench", "--tier-load", "needs --tier");
    }
    if (cli_given(opts, N_OPTS, "--rounds") && !cli_given(opts, N_OPTS, "--processes"))
        return cli_fail("rag_bench", "--rounds", "needs --processes");
    if (cli_given(opts, N_OPTS, "--balance") && !o->devices_text)
        return cli_fail("rag_bench", "--balance", "needs --devices");
    if (o->devices_text) {
        if (cli_given(opts, N_OPTS, "--processes"))
            return cli_fail("rag_bench", "--devices", "or --processes, not both (--devices "
                            "splits one workload, --processes replicates it)");
        if ((r = devices_parse(o->devices_text, o))) return r;
    }
    const char *many = cli_given(opts, N_OPTS, "--processes") ? "--processes"
                       : o->devices_text                      ? "--devices"
                                                              : NULL;
    if (many) {
        if (cli_given(opts, N_OPTS, "--time-limit"))
            return cli_fail("rag_bench", "--time-limit", "not with %s (use --run-seconds)", many);
        if (!o->tier_text)
            return cli_fail("rag_bench", many, "needs --tier dir:PATH or "
                            "redis://HOST:PORT (the tier the processes share)");
        if (o->tier.kind == TIER_HOST)
            return cli_fail("rag_bench", many, "host memory is not shared between "
                            "processes: use --tier dir:PATH or redis://HOST:PORT");
        if (o->n_budgets > 1)
            return cli_fail("rag_bench", many, "one --budget per process (the same "
                            "for all), not a list");
        if (o->tier_mode == LAZYATTN_TIER_READ_ONLY)
            return cli_fail("rag_bench", "--tier-mode", "read: the processes would share nothing");
        if (cli_given(opts, N_OPTS, "--out"))
            return cli_fail("rag_bench", "--out", "%s writes no files (its comparison "
                            "is the table on stdout)", many);
    }
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

#define BENCH_MODEL_ID 0x11A3A11Aull

/* Deletes the workload's documents from the store, so that a run starts
 * from an empty tier (earlier runs or processes may have left them). */
static int tier_clear(lazyattn_store *store, const lazyattn_workload *wl) {
    lazyattn_workload_config wc;
    lazyattn_workload_get_config(wl, &wc);
    for (int d = 0; d < wc.n_docs; d++) {
        const int32_t *tok;
        int32_t len;
        lazyattn_doc_key key = {BENCH_MODEL_ID, {0}};
        int st = lazyattn_workload_get_doc(wl, d, &tok, &len);
        if (!st) st = lazyattn_doc_digest(BENCH_MODEL_ID, tok, len, key.digest);
        if (st) return serve_lz_fail(st, "workload document");
        st = lazyattn_store_delete(store, key);
        if (st && st != LAZYATTN_STATUS_NOT_FOUND) return serve_lz_fail(st, "clearing the tier");
    }
    return LAZYATTN_STATUS_OK;
}

typedef struct bench_live {
    int index; /* workload request index */
    lazyattn_request *req;
    int target;      /* tokens to generate */
    int n_generated;
    int32_t last;    /* last generated token */
    serve_request_result *rec;
} bench_live;

typedef struct bench bench;
static int bench_measure_tier_rate(bench *b);

typedef struct bench {
    const bench_options *opt;
    lazyattn_context *ctx;
    serve_model *model;
    lazyattn_workload *wl;
    serve_timer timer;
    lazyattn_store *tier; /* NULL: none */
    double prefill_rate;  /* --tier-cost: document tokens prefilled per second */
    double tier_rate;     /* --tier-cost: the store's load bytes per second (0: not yet
                             measured, < 0: its probe failed) */
    int rotate;           /* measured request i is workload request warmup + (i + rotate) % R */
    int dispatch;         /* 1: --devices: the measured requests come from the dispatcher */
    int dispatch_in;      /* their pipe (dispatch.h) */
    int dispatch_out;     /* the pipe of completions (then the summary) */
    int32_t *dispatched;  /* [R] the workload request of each measured one received */
    /* scratch */
    const int32_t **docs;
    int32_t *doc_lengths;
    bench_live *live;
    lazyattn_request **batch_reqs;
    int32_t *batch_tokens, *batch_next;
    int *waiting; /* queue of request indices */
    double *arrivals;
} bench;

/* ---- what the program is doing, on stderr: a line per phase as it starts (the
 * setup, the kernels' compilation with a count, each warm-up and run); within a
 * run a progress bar on a terminal, a line at each quarter elsewhere (a log) ---- */
static double phase_t0;
static char phase_who[32] = "rag_bench"; /* "rag_bench [process i]" in a --processes child */
static int phase_bar;     /* 1: the progress bar is on (stderr a terminal, or --progress) */
static int phase_pending; /* 1: a \r line is open on the terminal */

static void phase(const char *fmt, ...) {
    /* one write a line, so that the lines of --processes children do not interleave */
    char line[512];
    int n = snprintf(line, sizeof line, "%s%s: [%6.1f s] ", phase_pending ? "\n" : "", phase_who,
                     serve_now() - phase_t0);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    phase_pending = 0;
}

/* The context's log: counts the programs built ("program [KEY]: ..."), each a
 * line (in place on a terminal), and prints the rest as the library would
 * without a callback (errors, or up to LAZYATTN_LOG). */
static int phase_programs;
static void phase_log(void *user, lazyattn_log_level level, const char *message) {
    (void)user;
    if (!strncmp(message, "program [", 9)) {
        phase_programs++;
        if (phase_bar) {
            fprintf(stderr, "\rrag_bench: [%6.1f s] kernels: %d programs built", serve_now() - phase_t0,
                    phase_programs);
            phase_pending = 1;
            fflush(stderr);
        } else {
            phase("kernels: program %d built", phase_programs);
        }
    }
    const char *env = getenv("LAZYATTN_LOG");
    lazyattn_log_level max = !env                    ? LAZYATTN_LOG_ERROR
                             : !strcmp(env, "debug") ? LAZYATTN_LOG_DEBUG
                             : !strcmp(env, "info")  ? LAZYATTN_LOG_INFO
                             : !strcmp(env, "warn")  ? LAZYATTN_LOG_WARN
                                                     : LAZYATTN_LOG_ERROR;
    if (level <= max) {
        if (phase_pending) fputc('\n', stderr);
        phase_pending = 0;
        fprintf(stderr, "lazyattn: %s\n", message);
    }
}

static void progress(const bench *b, const char *label, int done, int total, double t) {
    if (!b->opt->progress) {
        /* a log: a line at each quarter */
        if (total > 0 && (done == total || done * 4 / total != (done - 1) * 4 / total))
            phase("%s: %d/%d requests done, %.1f s", label, done, total, t);
        return;
    }
    phase_pending = 0;
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

/* Poisson arrivals, seconds after the start: exponential gaps from a
 * seeded splitmix stream. out: [count]. */
static void poisson_arrivals(const bench_options *o, int count, double *out) {
    uint64_t z = o->wl.seed * 0x9E3779B97F4A7C15ull + 12345;
    double t = 0;
    for (int i = 0; i < count; i++) {
        z += 0x9E3779B97F4A7C15ull;
        uint64_t x = z;
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        x ^= x >> 31;
        double u = ((double)(x >> 11) + 0.5) / 9007199254740992.0; /* 53 bits: exact */
        t += -log(u) / o->rate;
        out[i] = t;
    }
}

/* One serve_requests call's loop: its queue, running batch and counters,
 * shared with the decode steps the engine runs between two chunks of a
 * prefill (loop_between). */
typedef struct bench_loop {
    bench *b;
    serve_engine *eng;
    serve_request_result *rec;
    const char *label;
    double t0;
    int count;          /* requests of this call (lowered when admissions stop) */
    int max_batch;
    int n_live, next_arrival, head, tail, finished;
    int prefilling;     /* 1 while a request's prefill runs (it holds a client) */
    int stop_admitting;
    int dispatch;       /* 1: requests from the dispatcher (--devices), count their most */
    int closed;         /* the dispatcher sends no more: count is what came */
} bench_loop;

/* --devices: the requests the dispatcher has sent join the queue (waiting
 * up to wait_s seconds for one); once it closes the pipe, or all the call
 * can hold have come, the call's count is what came. */
static void loop_receive(bench_loop *s, double wait_s) {
    bench *b = s->b;
    dispatch_request m[64];
    int room = s->count - s->next_arrival, n = 0, closed = 0;
    if (room > 0 &&
        dispatch_receive(b->dispatch_in, wait_s, m, room < 64 ? room : 64, &n, &closed) != 0)
        phase("the dispatcher's pipe failed: no more requests");
    for (int i = 0; i < n; i++) {
        int k = s->next_arrival++;
        b->dispatched[k] = m[i].index;
        s->rec[k].arrival = m[i].arrival - s->t0;
        b->waiting[s->tail++] = k;
    }
    if (closed || room - n <= 0) {
        s->closed = 1;
        s->count = s->next_arrival;
    }
}

/* Request k of the call has finished (served, or refused); the dispatcher
 * hears of it. */
static void loop_finished(bench_loop *s, int k) {
    s->finished++;
    if (s->dispatch && dispatch_send_done(s->b->dispatch_out, s->b->dispatched[k]))
        phase("the dispatcher is gone");
}

/* Requests that have arrived by now join the queue: closed loop, a client
 * without a request in flight sends its next one; Poisson, by schedule. */
static void loop_arrivals(bench_loop *s) {
    const bench_options *o = s->b->opt;
    if (s->dispatch) {
        if (!s->closed) loop_receive(s, 0);
        return;
    }
    double now = serve_now() - s->t0;
    if (o->rate > 0) {
        while (s->next_arrival < s->count && s->b->arrivals[s->next_arrival] <= now) {
            s->rec[s->next_arrival].arrival = s->b->arrivals[s->next_arrival];
            s->b->waiting[s->tail++] = s->next_arrival++;
        }
    } else {
        while (s->next_arrival < s->count &&
               (s->tail - s->head) + s->n_live + s->prefilling < o->concurrency) {
            s->rec[s->next_arrival].arrival = now;
            s->b->waiting[s->tail++] = s->next_arrival++;
        }
    }
}

/* One decode step over every running request; finished ones leave. */
static int loop_decode_step(bench_loop *s) {
    bench *b = s->b;
    if (s->n_live == 0) return LAZYATTN_STATUS_OK;
    for (int i = 0; i < s->n_live; i++) {
        b->batch_reqs[i] = b->live[i].req;
        b->batch_tokens[i] = b->live[i].last;
    }
    int st = serve_engine_decode(s->eng, s->n_live, b->batch_reqs, b->batch_tokens, b->batch_next);
    if (st) return st;
    double t = serve_now() - s->t0;
    serve_timer_collect(&b->timer);
    int w = 0;
    for (int i = 0; i < s->n_live; i++) {
        bench_live *L = &b->live[i];
        L->last = b->batch_next[i];
        L->n_generated++;
        L->rec->n_generated = L->n_generated;
        if (L->n_generated >= L->target) {
            L->rec->finish = t;
            lazyattn_request_destroy(L->req);
            loop_finished(s, L->index);
            progress(b, s->label, s->finished, s->count, t);
        } else {
            b->live[w++] = *L;
        }
    }
    s->n_live = w;
    return LAZYATTN_STATUS_OK;
}

/* Between two chunks of a prefill: the running batch takes a decode step,
 * and (closed loop) the clients whose requests just finished send their
 * next ones, which wait in the queue with their true arrival time. */
static int loop_between(void *user) {
    bench_loop *s = user;
    int st = loop_decode_step(s);
    if (!st && !s->stop_admitting) loop_arrivals(s);
    return st;
}

/* Plans a request. With a BACKGROUND tier its documents' loads run on the
 * tier's loader thread: the running batch takes decode steps until they
 * are enqueued (a prefill enqueued behind a load not enqueued yet would
 * hold the in-order queue), then waits for the rest; a request whose load
 * failed is planned again (its documents recomputed). *plan_s: the time
 * the serving thread spent planning and waiting for loads (not the decode
 * steps between). */
static int loop_plan(bench_loop *s, lazyattn_cache *cache, const lazyattn_request_desc *desc,
                     lazyattn_request **out, double *plan_s) {
    *plan_s = 0;
    for (int attempt = 0;; attempt++) {
        lazyattn_request *req = NULL;
        double t0 = serve_now();
        int st = lazyattn_request_create(cache, desc, &req);
        *plan_s += serve_now() - t0;
        if (st) return st;
        int pending = 0, failed = 0;
        st = lazyattn_request_poll_loads(req, 0, &pending, &failed);
        while (!st && pending && s->n_live > 0) {
            if ((st = loop_decode_step(s))) break;
            st = lazyattn_request_poll_loads(req, 0, &pending, &failed);
        }
        if (!st && pending) {
            t0 = serve_now();
            st = lazyattn_request_poll_loads(req, 1, &pending, &failed);
            *plan_s += serve_now() - t0;
        }
        if (!st && failed && attempt < 2) {
            lazyattn_request_destroy(req); /* planned again: the failed ones recompute */
            continue;
        }
        if (st || failed) {
            lazyattn_request_destroy(req);
            return st ? serve_lz_fail(st, "lazyattn_request_poll_loads")
                      : serve_fail(LAZYATTN_STATUS_NOT_FOUND,
                                   "a request's tier loads failed on three plans");
        }
        *out = req;
        return LAZYATTN_STATUS_OK;
    }
}

/*
 * Serves requests [first, first + count) of the workload with the engine.
 * rec: [count] results (arrival etc. relative to the run's start). Returns
 * a status only for a fault of the machinery; a request the budget cannot
 * hold is recorded as failed. *n_done: requests admitted or refused (less
 * than count when the time limit stopped admissions). limit: seconds after
 * which no request is admitted (0: none).
 */
static int serve_requests(bench *b, lazyattn_cache *cache, serve_engine *eng, int first, int count,
                          serve_request_result *rec, const char *label, double limit,
                          int *n_done) {
    const bench_options *o = b->opt;
    bench_loop loop = {.b = b, .eng = eng, .rec = rec, .label = label, .count = count};
    bench_loop *s = &loop;
    /* --devices: the measured requests come from the dispatcher, as they arrive */
    s->dispatch = b->dispatch && first == o->warmup;
    if (s->dispatch) limit = 0;
    s->max_batch = o->max_batch < serve_model_get_config(b->model)->max_rows
                       ? o->max_batch
                       : serve_model_get_config(b->model)->max_rows;
    int st = serve_engine_set_prefill_chunk(eng, o->prefill_chunk, loop_between, s);
    if (st) {
        *n_done = 0;
        return st;
    }
    s->t0 = serve_now();
    if (s->dispatch && dispatch_send_ready(b->dispatch_out)) {
        st = serve_fail(LAZYATTN_STATUS_IO, "the dispatcher is gone");
        goto out;
    }
    if (o->rate > 0 && !s->dispatch) poisson_arrivals(o, count, b->arrivals);
    while (s->finished < s->count) {
        double now = serve_now() - s->t0;
        if (limit > 0 && now > limit && !s->stop_admitting) {
            /* admitted requests are a prefix of the arrival order: finish
             * them, drop the rest */
            s->stop_admitting = 1;
            s->count = s->head < s->tail ? b->waiting[s->head] : s->next_arrival;
            s->tail = s->head;
            if (s->finished >= s->count) break;
        }
        if (!s->stop_admitting) loop_arrivals(s);
        /* admissions: plan, prefill, first token (none past the limit: a
         * prefill is long, the queue may hold several) */
        while (s->head < s->tail && s->n_live < s->max_batch &&
               !(limit > 0 && serve_now() - s->t0 > limit)) {
            int k = b->waiting[s->head];
            serve_request_result *r = &rec[k];
            int index = s->dispatch ? b->dispatched[k] : first + k;
            if (b->rotate && index >= o->warmup)
                index = o->warmup + (index - o->warmup + b->rotate) % o->wl.n_requests;
            r->id = index;
            lazyattn_request_desc desc;
            lazyattn_workload_request wr;
            if ((st = lazyattn_workload_get_request_desc(b->wl, index, b->docs, b->doc_lengths,
                                                         &desc)) ||
                (st = lazyattn_workload_get_request(b->wl, index, &wr))) {
                serve_fail(st, "workload request: %s (%s)", lazyattn_status_string(st),
                           lazyattn_testing_last_error());
                goto out;
            }
            desc.max_new_tokens = wr.n_generate;
            r->n_prompt = desc.n_prefix + desc.n_question;
            for (int d = 0; d < desc.n_docs; d++) r->n_prompt += desc.doc_lengths[d];
            lazyattn_request *req = NULL;
            st = loop_plan(s, cache, &desc, &req, &r->plan_s);
            if (st == LAZYATTN_STATUS_BUDGET_EXCEEDED && s->n_live > 0) {
                st = 0;
                break; /* wait for running requests to release their blocks */
            }
            s->head++;
            if (st == LAZYATTN_STATUS_BUDGET_EXCEEDED) {
                /* nothing else holds blocks: this request can never fit */
                r->ok = 0;
                r->first_token = r->finish = serve_now() - s->t0;
                loop_finished(s, k);
                st = 0;
                progress(b, label, s->finished, s->count, serve_now() - s->t0);
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
            /* long prefills run in chunks with decode steps of the running
             * batch in between (loop_between) */
            s->prefilling = 1;
            st = serve_engine_prefill(eng, req, &desc, &tok);
            s->prefilling = 0;
            if (st) {
                lazyattn_request_destroy(req);
                goto out;
            }
            /* the token is known now; summing profiling events is not the request's time */
            r->first_token = serve_now() - s->t0;
            serve_timer_collect(&b->timer);
            r->ok = 1;
            r->n_generated = 1;
            if (wr.n_generate <= 1) {
                r->finish = r->first_token;
                lazyattn_request_destroy(req);
                loop_finished(s, k);
                progress(b, label, s->finished, s->count, serve_now() - s->t0);
                continue;
            }
            bench_live *L = &b->live[s->n_live++];
            L->index = k;
            L->req = req;
            L->target = wr.n_generate;
            L->n_generated = 1;
            L->last = tok;
            L->rec = r;
        }
        /* one decode step over every running request */
        if (s->n_live > 0) {
            if ((st = loop_decode_step(s))) goto out;
        } else if (s->dispatch && s->head == s->tail && !s->closed) {
            loop_receive(s, 1.0); /* idle: wait for the dispatcher */
        } else if (s->head == s->tail && o->rate > 0 && s->next_arrival < s->count) {
            sleep_until(s->t0, b->arrivals[s->next_arrival]);
        }
    }
out:
    for (int i = 0; i < s->n_live; i++) lazyattn_request_destroy(b->live[i].req);
    serve_engine_set_prefill_chunk(eng, o->prefill_chunk, NULL, NULL);
    *n_done = st ? s->finished : s->count;
    return st;
}

/* --retained-budget: room in the pool for the working sets of the requests
 * in flight at once (closed loop: the clients; Poisson: a full decode batch
 * and one prefill), each the largest a request can need: prefix, k
 * documents, question and generated tokens, a block more per segment for
 * position-aware documents stored off block boundaries. */
/* In double: the options' largest values pass 2^64 bytes (main refuses
 * a pool over 1 PiB before any run). */
static double bench_headroom(const bench_options *o, const serve_model_config *mc) {
    double B = (double)mc->block_size;
    double blocks = ceil(o->wl.prefix_len / B) + 1 +
                    (double)o->wl.docs_per_request * (ceil(o->wl.doc_len_max / B) + 1) +
                    ceil(((double)o->wl.question_max + o->wl.gen_max) / B) + 1;
    double slots = o->rate > 0 ? (double)o->max_batch + 1
                               : (double)(o->concurrency < o->max_batch + 1 ? o->concurrency
                                                                            : o->max_batch + 1);
    return slots * blocks * B * (double)serve_model_kv_bytes_per_token(mc);
}

/* One policy under one budget. limit: seconds after which the measured
 * requests are no longer admitted (0: none); deadline: serve_now() time
 * after which no request, warm-up or measured, is admitted (0: none; the
 * warm-up's time comes out of the run's share); a run they cut short is
 * marked (out->cut) and holds the requests admitted. */
static int bench_run(bench *b, lazyattn_cache_policy policy, uint64_t budget, double limit,
                     double deadline, serve_run_result *out) {
    const bench_options *o = b->opt;
    const serve_model_config *mc = serve_model_get_config(b->model);
    memset(out, 0, sizeof *out);
    snprintf(out->policy, sizeof out->policy, "%s", lazyattn_cache_policy_name(policy));
    out->budget_bytes = budget;
    out->n_planned = o->wl.n_requests;
    lazyattn_pool_config pc;
    /* the budget is the whole pool, or (--retained-budget) what the cache
     * keeps between requests, the running requests' working sets on top */
    uint64_t pool_bytes = budget;
    if (o->retained_budget) pool_bytes += (uint64_t)bench_headroom(o, mc); /* <= 1 PiB: main */
    serve_model_pool_config(mc, pool_bytes, &pc);
    out->pool_bytes = pc.budget_bytes;
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
    lazyattn_cache_config cc = {policy, BENCH_MODEL_ID, o->retained_budget ? budget : 0};
    if ((st = lazyattn_cache_create(pool, &cc, &cache))) {
        serve_lz_fail(st, "lazyattn_cache_create");
        goto done;
    }
    if ((st = serve_engine_create(b->model, pool, &eng))) goto done;
    if (b->tier && b->opt->processes == 0 && b->opt->n_devices == 0 &&
        (st = tier_clear(b->tier, b->wl)))
        goto done;
    if (b->tier && policy == LAZYATTN_CACHE_POLICY_LAZY) {
        lazyattn_tier_options to;
        lazyattn_tier_options_init(&to);
        to.write_queue = o->tier_write_queue;
        static const lazyattn_tier_load loads[3] = {LAZYATTN_TIER_LOAD_BACKGROUND,
                                                    LAZYATTN_TIER_LOAD_PIPELINED,
                                                    LAZYATTN_TIER_LOAD_SYNC};
        to.load = loads[o->tier_load];
        st = lazyattn_cache_set_tier_options(cache, b->tier, (lazyattn_tier_mode)o->tier_mode, &to);
        if (st) {
            serve_lz_fail(st, "lazyattn_cache_set_tier_options");
            goto done;
        }
        if (b->prefill_rate > 0 &&
            (st = lazyattn_cache_set_tier_recompute_rate(cache, b->prefill_rate))) {
            serve_lz_fail(st, "lazyattn_cache_set_tier_recompute_rate");
            goto done;
        }
        if (b->prefill_rate > 0 && b->tier_rate == 0 && (st = bench_measure_tier_rate(b)))
            goto done;
        if (b->tier_rate > 0 && (st = lazyattn_cache_set_tier_load_rate(cache, b->tier_rate))) {
            serve_lz_fail(st, "lazyattn_cache_set_tier_load_rate");
            goto done;
        }
    }
    serve_engine_use_device_plans(eng, !o->no_device_plans);
    serve_engine_use_batched_prefill(eng, !o->no_batched_prefill);
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
        phase("%s @ %.4g MiB: warm-up, %d requests (not measured)", out->policy, (double)budget / (1 << 20),
              o->warmup);
        double wlimit = 0;
        if (deadline > 0) {
            wlimit = deadline - serve_now();
            if (wlimit < 1e-3) wlimit = 1e-3;
        }
        if ((st = serve_requests(b, cache, eng, 0, o->warmup, warm, label, wlimit, &n_done)))
            goto done;
    }
    if (deadline > 0) {
        double left = deadline - serve_now();
        if (left < 1e-3) left = 1e-3; /* admits nothing: the run is marked cut */
        if (limit <= 0 || left < limit) limit = left;
    }
    out->limit_s = limit;
    lazyattn_cache_reset_stats(cache);
    serve_timer_collect(&b->timer);
    memset(b->timer.seconds, 0, sizeof b->timer.seconds);
    memset(b->timer.host_s, 0, sizeof b->timer.host_s);
    b->timer.upload_s = b->timer.wait_s = 0;
    b->timer.decode_host_s = b->timer.prefill_host_s = 0;
    b->timer.decode_steps = b->timer.prefill_forwards = 0;
    b->timer.decode_cpu_s = b->timer.prefill_cpu_s = b->timer.wait_cpu_s = 0;
    b->timer.upload_cpu_s = b->timer.decode_tables_s = b->timer.decode_tables_cpu_s = 0;
    b->timer.decode_enqueues = b->timer.prefill_enqueues = b->timer.prefill_requests = 0;
    char bt[32];
    snprintf(bt, sizeof bt, "%.4g MiB", (double)budget / (1 << 20));
    snprintf(label, sizeof label, "%s @ %s", out->policy, bt);
    phase("%s: measured, %d requests", label, n_measured);
    serve_engine_stats es0, es1;
    serve_engine_get_stats(eng, &es0);
    double t0 = serve_now();
    st = serve_requests(b, cache, eng, o->warmup, n_measured, out->requests, label, limit,
                        &n_done);
    out->wall_s = serve_now() - t0;
    out->n_requests = n_done;
    out->cut = n_done < n_measured;
    if (st) goto done;
    serve_engine_get_stats(eng, &es1);
    out->between_calls = es1.between_calls - es0.between_calls;
    out->interleaved_decodes = es1.interleaved_decodes - es0.interleaved_decodes;
    lazyattn_cache_get_stats(cache, &out->stats);
    /* the tier's background writer finishes what it has (not timed) */
    for (double w0 = serve_now(); out->stats.tier_writes_pending > 0 && serve_now() - w0 < 60;) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
        lazyattn_cache_get_stats(cache, &out->stats);
    }
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
    out->decode_enqueues = b->timer.decode_enqueues;
    out->prefill_enqueues = b->timer.prefill_enqueues;
    out->prefill_requests = b->timer.prefill_requests;
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

/* --tier-cost: the tier store's load bandwidth, bytes a second, measured
 * once: a value of one export of the workload's longest document (random
 * bytes) put under a key of its own, got and checked (XXH3-64 over it, as
 * the import's check of a value the tier did not write itself), then
 * removed; the time of the get and the check. Given to each cache's cost
 * rule until it has measured loads of its own. A store that refuses the
 * probe (a host store's budget below it) is left to the first loads. */
static int bench_measure_tier_rate(bench *b) {
    const serve_model_config *mc = serve_model_get_config(b->model);
    int64_t n = b->opt->wl.doc_len_max < 16 ? 16 : b->opt->wl.doc_len_max;
    int64_t blocks = (n + mc->block_size - 1) / mc->block_size;
    uint64_t per_tok = serve_model_kv_bytes_per_token(mc);
    size_t bytes = LAZYATTN_KV_HEADER_BYTES + 4 * (size_t)n +
                   (size_t)(per_tok * (uint64_t)blocks * (uint64_t)mc->block_size);
    uint8_t *v = malloc(bytes);
    if (!v)
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "the tier probe: %zu bytes", bytes);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < bytes; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(v + i, &x, bytes - i < 8 ? bytes - i : 8);
    }
    lazyattn_doc_key key = {BENCH_MODEL_ID ^ 0x70726F6265ull, {0}}; /* no document's */
    memcpy(key.digest, "rag_bench tier probe", 20);
    uint64_t pid = (uint64_t)getpid(); /* processes sharing the store probe apart */
    memcpy(key.digest + 24, &pid, 8);
    int st = lazyattn_store_put(b->tier, key, v, bytes);
    free(v);
    lazyattn_store_value got = {0};
    double t0 = serve_now();
    if (!st) st = lazyattn_store_get(b->tier, key, &got);
    volatile uint64_t sum = st ? 0 : XXH3_64bits(got.data, got.size);
    double s = serve_now() - t0;
    (void)sum;
    if (!st) lazyattn_store_release(b->tier, &got);
    char why[256] = "";
    if (st) snprintf(why, sizeof why, "%s", lazyattn_last_error());
    lazyattn_store_delete(b->tier, key); /* NOT_FOUND where the put failed */
    if (st) { /* e.g. a host store's budget below a document: the first loads measure */
        phase("--tier-cost: the %s store's probe failed (%s: %s); its bandwidth is left to "
              "the first loads", lazyattn_store_name(b->tier), lazyattn_status_string(st), why);
        b->tier_rate = -1;
        return LAZYATTN_STATUS_OK;
    }
    b->tier_rate = s > 0 ? (double)bytes / s : 1e300;
    phase("--tier-cost: the %s store's value of %zu bytes got and checked in %.1f ms: %.3g GB/s",
          lazyattn_store_name(b->tier), bytes, s * 1e3, b->tier_rate * 1e-9);
    return LAZYATTN_STATUS_OK;
}

/* --tier-cost: the model's prefill rate, document tokens per second,
 * measured once: one document of the workload's longest length prefilled
 * whole (no cache: a NONE policy), after the kernels are built. */
static int bench_measure_prefill_rate(bench *b) {
    const serve_model_config *mc = serve_model_get_config(b->model);
    int n = b->opt->wl.doc_len_max;
    if (n < 16) n = 16;
    if (n > 8192) n = 8192;
    int32_t *doc = malloc(sizeof *doc * (size_t)n), question[3] = {1, 2, 3};
    if (!doc) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "the prefill-rate probe");
    for (int i = 0; i < n; i++) doc[i] = (int32_t)((i * 7 + 1) % mc->vocab);
    lazyattn_pool_config pc;
    uint64_t per_tok = serve_model_kv_bytes_per_token(mc);
    serve_model_pool_config(mc, per_tok * ((uint64_t)n + 4 * (uint64_t)mc->block_size), &pc);
    lazyattn_pool *pool = NULL;
    lazyattn_cache *cache = NULL;
    serve_engine *eng = NULL;
    lazyattn_request *req = NULL;
    const int32_t *docs[1] = {doc};
    int32_t lens[1] = {n};
    int st = lazyattn_pool_create(b->ctx, &pc, &pool);
    if (st) {
        free(doc);
        return serve_lz_fail(st, "lazyattn_pool_create");
    }
    lazyattn_cache_config cc;
    lazyattn_cache_config_init(&cc);
    cc.policy = LAZYATTN_CACHE_POLICY_NONE;
    cc.model_id = BENCH_MODEL_ID;
    if ((st = lazyattn_cache_create(pool, &cc, &cache))) {
        serve_lz_fail(st, "lazyattn_cache_create");
        goto done;
    }
    if ((st = serve_engine_create(b->model, pool, &eng))) goto done;
    lazyattn_request_desc d = {0, NULL, 1, docs, lens, 3, question, 1};
    int32_t first = 0;
    double t0 = serve_now();
    if ((st = lazyattn_request_create(cache, &d, &req))) {
        serve_lz_fail(st, "lazyattn_request_create");
        goto done;
    }
    if ((st = serve_engine_prefill(eng, req, &d, &first))) goto done; /* waits for its token */
    double s = serve_now() - t0;
    b->prefill_rate = s > 0 ? (double)n / s : 0;
    phase("--tier-cost: prefill of %d document tokens in %.1f ms: %.4g tokens/s", n, s * 1e3,
          b->prefill_rate);
done:
    lazyattn_request_destroy(req);
    serve_engine_destroy(eng);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);
    free(doc);
    return st;
}

/* ---- main ---- */

static void bench_free(bench *b) {
    lazyattn_store_destroy(b->tier);
    b->tier = NULL;
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

/* Context, model (random weights or gguf's; gguf is closed here), kernels
 * built, workload and scratch: everything a run needs but its cache. */
static int bench_setup(bench *b, const bench_options *o, const serve_model_config *mc,
                       serve_gguf *gguf, double *t_model) {
    lazyattn_context_options co;
    lazyattn_context_options_init(&co);
    co.profiling = !o->no_profiling;
    co.log = phase_log;
    co.device_index = o->device_index;
    phase("setup: the OpenCL context");
    int st = lazyattn_context_create(&co, &b->ctx);
    if (st) {
        serve_lz_fail(st, "lazyattn_context_create");
        goto out;
    }
    double t0 = serve_now();
    phase("setup: the model on %s (%s), then every kernel built by two small requests (PoCL "
          "and CLBlast compile on first use, their caches make later runs quick)",
          lazyattn_context_device_name(b->ctx), o->gguf ? "weights from GGUF" : "random weights");
    if ((st = serve_model_create(b->ctx, mc, &b->model))) goto out;
    st = gguf ? serve_model_load_gguf(b->model, gguf) : serve_model_init_random(b->model, o->seed);
    if (st) goto out;
    if (gguf) phase("%s", serve_model_weights_note(b->model));
    if ((st = bench_compile_warmup(b))) goto out;
    if (o->tier_cost && (st = bench_measure_prefill_rate(b))) goto out;
    *t_model = serve_now() - t0;
    phase("setup done in %.1f s: %d programs built", *t_model, phase_programs);
    b->timer.enabled = !o->no_profiling;
    serve_model_set_timer(b->model, &b->timer);

    int total = o->warmup + o->wl.n_requests;
    lazyattn_workload_config wc = o->wl;
    wc.n_requests = total;
    if ((st = lazyattn_workload_create(&wc, &b->wl))) {
        serve_fail(st, "lazyattn_workload_create: %s (%s)", lazyattn_status_string(st),
                   lazyattn_testing_last_error());
        goto out;
    }
    int k = o->wl.docs_per_request > 0 ? o->wl.docs_per_request : 1;
    int nb = o->max_batch + 1;
    b->docs = calloc((size_t)k, sizeof *b->docs);
    b->doc_lengths = calloc((size_t)k, sizeof *b->doc_lengths);
    b->live = calloc((size_t)nb, sizeof *b->live);
    b->batch_reqs = calloc((size_t)nb, sizeof *b->batch_reqs);
    b->batch_tokens = calloc((size_t)nb, sizeof *b->batch_tokens);
    b->batch_next = calloc((size_t)nb, sizeof *b->batch_next);
    b->waiting = calloc((size_t)total + 1, sizeof *b->waiting);
    b->arrivals = calloc((size_t)total + 1, sizeof *b->arrivals);
    if (!b->docs || !b->doc_lengths || !b->live || !b->batch_reqs || !b->batch_tokens ||
        !b->batch_next || !b->waiting || !b->arrivals)
        st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "rag_bench");
out:
    serve_gguf_close(gguf);
    return st;
}

/* ---- --processes: N serving processes, separate caches against a shared tier ---- */

/* What a serving process sends its parent (then n_ttft TTFTs and n_ttft
 * planning times, seconds, of its completed requests). */
typedef struct proc_summary {
    int status; /* 0: the run completed */
    int cut;    /* 1: --run-seconds stopped its admissions */
    int n_ok, n_failed, n_ttft;
    double wall_s;
    lazyattn_cache_stats stats;
} proc_summary;

/* One serving process (a forked child): its own context, model and cache
 * (and its own connection to the tier when shared); serves every request
 * of the workload, starting at request index*R/N; or (--devices,
 * requests_fd >= 0) on device o->devices[index], the requests the
 * dispatcher sends on requests_fd, its completions on fd before the
 * summary. */
static int process_main(const bench_options *opt, const serve_model_config *mc, int index,
                        int shared, int fd, int requests_fd) {
    bench_options own = *opt;
    const bench_options *o = &own;
    if (requests_fd >= 0) {
        own.device_index = opt->devices[index];
        snprintf(phase_who, sizeof phase_who, "rag_bench [#%d, process %d]", own.device_index,
                 index);
    } else {
        snprintf(phase_who, sizeof phase_who, "rag_bench [process %d]", index);
    }
    bench b;
    memset(&b, 0, sizeof b);
    b.opt = o;
    serve_run_result run;
    memset(&run, 0, sizeof run);
    proc_summary sum;
    memset(&sum, 0, sizeof sum);
    serve_gguf *g = NULL;
    double t_model;
    int st = o->gguf ? serve_gguf_open(o->gguf, &g) : 0;
    if (!st) st = bench_setup(&b, o, mc, g, &t_model);
    if (requests_fd < 0) {
        b.rotate = (int)((int64_t)index * o->wl.n_requests / o->processes);
    } else {
        b.dispatch = 1;
        b.dispatch_in = requests_fd;
        b.dispatch_out = fd;
        b.dispatched = calloc((size_t)o->wl.n_requests, sizeof *b.dispatched);
        if (!st && !b.dispatched) st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "rag_bench");
    }
    if (!st && shared) st = tier_open(&o->tier, &b.tier);
    if (!st)
        st = bench_run(&b, LAZYATTN_CACHE_POLICY_LAZY, o->budgets[o->n_budgets - 1],
                       o->run_seconds, 0, &run);
    double *ttft = calloc(2 * (size_t)run.n_requests + 1, sizeof *ttft); /* TTFT, then plan */
    sum.status = st ? st : ttft ? 0 : LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
    if (st) {
        fprintf(stderr, "rag_bench [process %d]: %s: %s\n", index, lazyattn_status_string(st),
                serve_last_error());
    } else if (ttft) {
        sum.n_ok = run.n_ok;
        sum.n_failed = run.n_failed;
        sum.cut = requests_fd < 0 && run.cut; /* --devices: the dispatcher cuts */
        sum.wall_s = run.wall_s;
        sum.stats = run.stats;
        for (int i = 0; i < run.n_requests; i++)
            if (run.requests[i].ok)
                ttft[sum.n_ttft++] = run.requests[i].first_token - run.requests[i].arrival;
        for (int i = 0, j = 0; i < run.n_requests; i++)
            if (run.requests[i].ok) ttft[sum.n_ttft + j++] = run.requests[i].plan_s;
    }
    int bad = (requests_fd >= 0 && dispatch_send_end(fd)) || dispatch_write_whole(fd, &sum, sizeof sum) ||
              (sum.n_ttft && dispatch_write_whole(fd, ttft, 2 * (size_t)sum.n_ttft * sizeof *ttft));
    free(ttft);
    free(b.dispatched);
    serve_run_release(&run);
    bench_free(&b);
    return sum.status || bad ? 1 : 0;
}

/* One phase (separate caches, or the shared tier), summed over its rounds. */
typedef struct phase_result {
    int n_failed_procs;
    int n_cut;                  /* process runs --run-seconds cut short */
    int n_ok, n_failed;
    double wall_sum;            /* the slowest process of each round */
    lazyattn_cache_stats total; /* counters summed over processes and rounds */
    int64_t recomputed[64];     /* per process, summed over rounds */
    double *ttft, *plan;        /* [n_ttft] seconds, every completed request */
    int n_ttft;
    double ttft_mean, ttft_p50, ttft_p99, plan_mean;
} phase_result;

/* A process's summary from fd, its samples in *got (2 n_ttft: TTFTs, then
 * planning times; freed by the caller). 0, or -1 (a failed process). */
static int read_summary(int fd, proc_summary *sum, double **got) {
    *got = NULL;
    if (dispatch_read_whole(fd, sum, sizeof *sum) != 0 || sum->status != 0 || sum->n_ttft < 0 ||
        sum->n_ttft > 1 << 24)
        return -1;
    *got = malloc(2 * (size_t)sum->n_ttft * sizeof **got + 1);
    if (!*got || dispatch_read_whole(fd, *got, 2 * (size_t)sum->n_ttft * sizeof **got) != 0) return -1;
    return 0;
}

/* Adds a process's summary to out, as its process `slot`. 0, or -1 out of memory. */
static int phase_add(phase_result *out, int slot, const proc_summary *sum, const double *got) {
    double *t2 = realloc(out->ttft, (size_t)(out->n_ttft + sum->n_ttft + 1) * sizeof *t2);
    if (t2) out->ttft = t2;
    double *p2 = t2 ? realloc(out->plan, (size_t)(out->n_ttft + sum->n_ttft + 1) * sizeof *p2)
                    : NULL;
    if (p2) out->plan = p2;
    if (!p2) return -1;
    memcpy(out->ttft + out->n_ttft, got, (size_t)sum->n_ttft * sizeof *got);
    memcpy(out->plan + out->n_ttft, got + sum->n_ttft, (size_t)sum->n_ttft * sizeof *got);
    out->n_ttft += sum->n_ttft;
    out->n_ok += sum->n_ok;
    out->n_failed += sum->n_failed;
    out->n_cut += sum->cut;
    lazyattn_cache_stats *t = &out->total;
    const lazyattn_cache_stats *s = &sum->stats;
    t->doc_tokens += s->doc_tokens;
    t->hit_tokens += s->hit_tokens;
    t->tier_hit_tokens += s->tier_hit_tokens;
    t->recomputed_tokens += s->recomputed_tokens;
    t->lookups += s->lookups;
    t->hits += s->hits;
    t->tier_hits += s->tier_hits;
    t->misses += s->misses;
    t->tier_errors += s->tier_errors;
    t->tier_rejected += s->tier_rejected;
    t->tier_writes += s->tier_writes;
    t->tier_write_errors += s->tier_write_errors;
    t->tier_read_bytes += s->tier_read_bytes;
    t->tier_write_bytes += s->tier_write_bytes;
    t->tier_leases += s->tier_leases;
    t->tier_lease_waits += s->tier_lease_waits;
    t->tier_lease_waited_loads += s->tier_lease_waited_loads;
    t->tier_lease_takeovers += s->tier_lease_takeovers;
    t->tier_lease_wait_us += s->tier_lease_wait_us;
    t->tier_duplicates += s->tier_duplicates;
    t->tier_duplicate_tokens += s->tier_duplicate_tokens;
    if (out->recomputed[slot] >= 0) out->recomputed[slot] += s->recomputed_tokens;
    return 0;
}

/* Forks the N processes of one round of a phase and adds what they send to out. */
static int run_phase(const bench_options *o, const serve_model_config *mc, int shared,
                     phase_result *out) {
    int n = o->processes, started = 0, st = 0;
    double wall_max = 0;
    pid_t pids[64];
    int fds[64];
    fflush(NULL);
    for (; started < n; started++) {
        int p[2];
        if (pipe(p) != 0) {
            st = serve_fail(LAZYATTN_STATUS_IO, "pipe: %s", strerror(errno));
            break;
        }
        pid_t pid = fork();
        if (pid < 0) {
            st = serve_fail(LAZYATTN_STATUS_IO, "fork: %s", strerror(errno));
            close(p[0]);
            close(p[1]);
            break;
        }
        if (pid == 0) {
            close(p[0]);
            for (int i = 0; i < started; i++) close(fds[i]);
            _exit(process_main(o, mc, started, shared, p[1], -1));
        }
        close(p[1]);
        pids[started] = pid;
        fds[started] = p[0];
    }
    for (int i = 0; i < started; i++) {
        proc_summary sum;
        double *got = NULL;
        if (read_summary(fds[i], &sum, &got) == 0 && phase_add(out, i, &sum, got) == 0) {
            if (sum.wall_s > wall_max) wall_max = sum.wall_s;
        } else {
            out->n_failed_procs++;
            out->recomputed[i] = -1;
        }
        free(got);
        close(fds[i]);
    }
    out->wall_sum += wall_max;
    for (int i = 0; i < started; i++) {
        int status;
        while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR) {}
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            if (out->recomputed[i] >= 0) out->n_failed_procs++;
            out->recomputed[i] = -1;
        }
    }
    if (started < n) out->n_failed_procs += n - started;
    return st;
}

/* Means and percentiles once every round is in; frees the samples. */
static void phase_finish(phase_result *r) {
    double sum_ttft = 0, sum_plan = 0;
    for (int i = 0; i < r->n_ttft; i++) sum_ttft += r->ttft[i], sum_plan += r->plan[i];
    r->ttft_mean = r->n_ttft ? sum_ttft / r->n_ttft : NAN;
    r->plan_mean = r->n_ttft ? sum_plan / r->n_ttft : NAN;
    r->ttft_p50 = r->n_ttft ? serve_percentile(r->ttft, r->n_ttft, 50) : NAN;
    r->ttft_p99 = r->n_ttft ? serve_percentile(r->ttft, r->n_ttft, 99) : NAN;
    free(r->ttft);
    free(r->plan);
    r->ttft = r->plan = NULL;
}

static void print_phase(const char *label, int n, const phase_result *r) {
    const lazyattn_cache_stats *t = &r->total;
    printf("| %s | %d | %d (%d) | %lld | %lld | %lld | %lld | %.1f | %.1f | %.1f | %.2f | %.1f | "
           "%lld / %lld / %lld / %lld | %lld (%lld loaded, %.1f ms) | %lld (%lld tokens) |\n",
           label, n, r->n_ok, r->n_failed, (long long)t->doc_tokens, (long long)t->recomputed_tokens,
           (long long)t->hit_tokens, (long long)t->tier_hit_tokens, r->ttft_mean * 1e3,
           r->ttft_p50 * 1e3, r->ttft_p99 * 1e3, r->plan_mean * 1e3, r->wall_sum,
           (long long)t->tier_writes, (long long)t->tier_errors, (long long)t->tier_rejected,
           (long long)t->tier_write_errors, (long long)t->tier_lease_waits,
           (long long)t->tier_lease_waited_loads, (double)t->tier_lease_wait_us * 1e-3,
           (long long)t->tier_duplicates, (long long)t->tier_duplicate_tokens);
}

static int run_processes(bench_options *o, const serve_model_config *mc) {
    double t_start = serve_now();
    o->progress = 0;
    lazyattn_workload_config wc = o->wl;
    wc.n_requests = o->warmup + o->wl.n_requests;
    lazyattn_workload *wl = NULL;
    lazyattn_store *store = NULL;
    phase_result sep, shr;
    memset(&sep, 0, sizeof sep);
    memset(&shr, 0, sizeof shr);
    int st = lazyattn_workload_create(&wc, &wl);
    if (st) {
        serve_fail(st, "lazyattn_workload_create: %s (%s)", lazyattn_status_string(st),
                   lazyattn_testing_last_error());
        goto fail;
    }
    /* the parent's connection is closed before any fork */
    if ((st = tier_open(&o->tier, &store)) || (st = tier_clear(store, wl))) goto fail;
    lazyattn_store_destroy(store);
    store = NULL;
    int n = o->processes;
    static const char *const modes[] = {"read", "back", "through"};
    printf("# rag_bench: %d serving processes, each its own context, model and LAZY cache of "
           "%.4g MiB%s\n", n, (double)o->budgets[o->n_budgets - 1] / (1 << 20),
           o->retained_budget ? " retained between requests (the pool adds the working sets in "
                                "flight)" : "");
    printf("# model %s: %d layers, hidden %d, %d heads / %d KV heads, d %d, vocab %d; KV %s; "
           "--gemm %s\n", o->gguf ? o->gguf : o->model, mc->n_layers, mc->hidden, mc->n_heads,
           mc->n_kv_heads, mc->head_dim, mc->vocab,
           mc->kv_dtype == LAZYATTN_DTYPE_F16 ? "f16" : "f32", serve_gemm_mode_name(mc->gemm));
    printf("# workload %s: %d docs of %d-%d tokens, k = %d, alpha = %.2f, %d requests, "
           "replicated: every process serves all of them, process i from request i*%d/%d on\n",
           o->workload, o->wl.n_docs, o->wl.doc_len_min, o->wl.doc_len_max,
           o->wl.docs_per_request, o->wl.alpha, o->wl.n_requests, o->wl.n_requests, n);
    printf("# tier %s, mode %s; %d round%s of: %d processes with separate caches, then %d "
           "sharing the tier (emptied of this workload's documents before each phase)\n",
           o->tier.shown, modes[o->tier_mode], o->rounds, o->rounds > 1 ? "s" : "", n, n);
    fflush(stdout);
    /* Rounds alternate the phases, so that a load on the machine that
     * drifts over time weighs on both alike. --run-seconds bounds the
     * rounds too: none starts past it. */
    int rounds_run = 0;
    for (int round = 0; round < o->rounds; round++, rounds_run++) {
        if (round > 0 && o->run_seconds > 0 && serve_now() - t_start >= o->run_seconds) break;
        for (int shared = 0; shared < 2; shared++) {
            if ((st = tier_open(&o->tier, &store)) || (st = tier_clear(store, wl))) goto fail;
            lazyattn_store_destroy(store);
            store = NULL;
            if ((st = run_phase(o, mc, shared, shared ? &shr : &sep))) goto fail;
        }
    }
    if (!tier_open(&o->tier, &store)) tier_clear(store, wl); /* leave the tier as found */
    lazyattn_store_destroy(store);
    store = NULL;
    phase_finish(&sep);
    phase_finish(&shr);
    printf("\n| caches | processes | requests (failed) | doc tokens | recomputed | GPU hit tokens "
           "| tier hit tokens | TTFT mean ms | TTFT p50 ms | TTFT p99 ms | plan + tier load mean ms "
           "| wall s | tier writes / errors / rejected / write errors | lease waits (loaded, "
           "time) | computed twice |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
           "| --- |\n");
    char label[1100];
    int rounds_cut = rounds_run < o->rounds;
    print_phase(sep.n_cut || rounds_cut ? "separate (CUT SHORT)" : "separate", n, &sep);
    snprintf(label, sizeof label, "shared %s%s", o->tier.shown,
             shr.n_cut || rounds_cut ? " (CUT SHORT)" : "");
    print_phase(label, n, &shr);
    double ratio = sep.total.recomputed_tokens
                       ? (double)shr.total.recomputed_tokens / (double)sep.total.recomputed_tokens
                       : NAN;
    printf("\nrecomputed document tokens, shared tier / separate caches: %lld / %lld = %.3f "
           "(1/N = %.3f); mean TTFT %.1f ms -> %.1f ms (%.2fx)\n",
           (long long)shr.total.recomputed_tokens, (long long)sep.total.recomputed_tokens, ratio,
           1.0 / n, sep.ttft_mean * 1e3, shr.ttft_mean * 1e3, sep.ttft_mean / shr.ttft_mean);
    /* The floor: each distinct document of the measured requests computed once. */
    int64_t distinct = 0;
    char *seen = calloc((size_t)o->wl.n_docs, 1);
    for (int i = 0; seen && i < o->wl.n_requests; i++) {
        lazyattn_workload_request wr;
        if (lazyattn_workload_get_request(wl, o->warmup + i, &wr)) break;
        for (int d = 0; d < wr.n_docs; d++) {
            int id = wr.doc_ids[d];
            const int32_t *tok;
            int32_t len;
            if (!seen[id] && !lazyattn_workload_get_doc(wl, id, &tok, &len)) {
                seen[id] = 1;
                distinct += len;
            }
        }
    }
    free(seen);
    distinct *= rounds_run;
    const lazyattn_cache_stats *ts = &shr.total;
    printf("distinct document tokens of the workload%s (each computed once: the floor of the "
           "shared tier): %lld; recomputed beyond it in the shared runs: %lld tokens. Documents "
           "computed by two processes (found in the tier when written): %lld, %lld tokens; "
           "lease waits %lld (%lld found the document written, %lld took the lease over); tier "
           "loads failed %lld, refused %lld (each a recompute)\n",
           rounds_run > 1 ? ", times the rounds" : "", (long long)distinct,
           (long long)(ts->recomputed_tokens - distinct), (long long)ts->tier_duplicates,
           (long long)ts->tier_duplicate_tokens, (long long)ts->tier_lease_waits,
           (long long)ts->tier_lease_waited_loads, (long long)ts->tier_lease_takeovers,
           (long long)ts->tier_errors, (long long)ts->tier_rejected);
    printf("recomputed per process: separate");
    for (int i = 0; i < n; i++) printf(" %lld", (long long)sep.recomputed[i]);
    printf("; shared");
    for (int i = 0; i < n; i++) printf(" %lld", (long long)shr.recomputed[i]);
    printf("\ntotal %.1f s\n", serve_now() - t_start);
    lazyattn_workload_destroy(wl);
    if (sep.n_failed_procs || shr.n_failed_procs) {
        fprintf(stderr, "rag_bench: %d of %d processes failed\n",
                sep.n_failed_procs + shr.n_failed_procs, 2 * n * rounds_run);
        return 1;
    }
    if (sep.n_cut || shr.n_cut)
        fprintf(stderr, "rag_bench: INCOMPLETE: %d of %d process runs cut short by --run-seconds "
                        "(separate %d, shared %d): the figures are of the requests admitted\n",
                sep.n_cut + shr.n_cut, 2 * n * rounds_run, sep.n_cut, shr.n_cut);
    if (rounds_run < o->rounds)
        fprintf(stderr, "rag_bench: INCOMPLETE: %d of %d rounds run: --run-seconds %.3g s had "
                        "passed; the figures are of those rounds\n",
                rounds_run, o->rounds, o->run_seconds);
    if (sep.n_ok == 0 || shr.n_ok == 0) {
        fprintf(stderr, "rag_bench: a phase completed no request\n");
        return 1;
    }
    return sep.n_cut || shr.n_cut || rounds_run < o->rounds ? 3 : 0;
fail:
    fprintf(stderr, "rag_bench: %s: %s\n", lazyattn_status_string(st), serve_last_error());
    lazyattn_store_destroy(store);
    lazyattn_workload_destroy(wl);
    free(sep.ttft), free(sep.plan), free(shr.ttft), free(shr.plan);
    return 1;
}

/* ---- --devices: one serving process per device, one workload split among them ---- */

/* One phase (separate caches, or the shared tier): a process per device,
 * the requests dispatched among them; what each sends goes to dev[i] and
 * to total (as its process i). */
static int run_device_phase(const bench_options *o, const serve_model_config *mc, int shared,
                            const double *arrivals, phase_result *dev, phase_result *total,
                            dispatch_result *dr) {
    int n = o->n_devices, started = 0, st = 0;
    pid_t pids[64];
    int to[64], from[64];
    memset(dr, 0, sizeof *dr);
    fflush(NULL);
    for (; started < n; started++) {
        int rq[2], back[2];
        if (pipe(rq) != 0) {
            st = serve_fail(LAZYATTN_STATUS_IO, "pipe: %s", strerror(errno));
            break;
        }
        if (pipe(back) != 0) {
            st = serve_fail(LAZYATTN_STATUS_IO, "pipe: %s", strerror(errno));
            close(rq[0]);
            close(rq[1]);
            break;
        }
        pid_t pid = fork();
        if (pid < 0) {
            st = serve_fail(LAZYATTN_STATUS_IO, "fork: %s", strerror(errno));
            close(rq[0]), close(rq[1]), close(back[0]), close(back[1]);
            break;
        }
        if (pid == 0) {
            close(rq[1]);
            close(back[0]);
            for (int i = 0; i < started; i++) close(to[i]), close(from[i]);
            _exit(process_main(o, mc, started, shared, back[1], rq[0]));
        }
        close(rq[0]);
        close(back[1]);
        pids[started] = pid;
        to[started] = rq[1];
        from[started] = back[0];
    }
    if (started == n) {
        dispatch_config dc = {n, to, from, o->warmup, o->wl.n_requests, arrivals, o->concurrency,
                              (dispatch_balance)o->balance, o->run_seconds};
        st = dispatch_run(&dc, dr); /* closes to[] */
    } else {
        for (int i = 0; i < started; i++) close(to[i]); /* the processes end: nothing comes */
        for (int i = 0; i < started; i++) dr->lost[i] = 1;
    }
    for (int i = 0; i < started; i++) {
        proc_summary sum;
        double *got = NULL;
        int32_t end = 0;
        /* a lost process's pipe holds no whole summary */
        int ok = !dr->lost[i] && dispatch_read_whole(from[i], &end, sizeof end) == 0 && end == DISPATCH_END &&
                 read_summary(from[i], &sum, &got) == 0 && phase_add(&dev[i], 0, &sum, got) == 0 &&
                 phase_add(total, i, &sum, got) == 0;
        if (!ok) {
            dev[i].n_failed_procs++;
            total->n_failed_procs++;
            total->recomputed[i] = -1;
        }
        free(got);
        close(from[i]);
    }
    for (int i = 0; i < started; i++) {
        int status;
        while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR) {}
        if ((!WIFEXITED(status) || WEXITSTATUS(status) != 0) && total->recomputed[i] >= 0) {
            dev[i].n_failed_procs++;
            total->n_failed_procs++;
            total->recomputed[i] = -1;
        }
    }
    if (started < n) total->n_failed_procs += n - started;
    total->wall_sum = dr->wall_s;
    for (int i = 0; i < n; i++) dev[i].wall_sum = dr->wall_s;
    return st;
}

static void print_device_row(const char *caches, const char *process, const char *device,
                             const phase_result *r, double wall_s, int most_outstanding) {
    const lazyattn_cache_stats *t = &r->total;
    printf("| %s | %s | %s | %d (%d) | %.1f | %.1f | %.1f | %.2f | %lld | %lld | %lld | %lld | ",
           caches, process, device, r->n_ok, r->n_failed, r->ttft_mean * 1e3, r->ttft_p50 * 1e3,
           r->ttft_p99 * 1e3, wall_s > 0 ? r->n_ok / wall_s : 0.0, (long long)t->doc_tokens,
           (long long)t->recomputed_tokens, (long long)t->tier_hits,
           (long long)t->tier_hit_tokens);
    if (most_outstanding >= 0)
        printf("%d |\n", most_outstanding);
    else
        printf("- |\n");
}

static int run_devices(bench_options *o, const serve_model_config *mc) {
    double t_start = serve_now();
    o->progress = 0;
    int n = o->n_devices;
    lazyattn_workload_config wc = o->wl;
    wc.n_requests = o->warmup + o->wl.n_requests;
    lazyattn_workload *wl = NULL;
    lazyattn_store *store = NULL;
    double *arrivals = NULL;
    static phase_result dev[2][64];
    phase_result total[2];
    dispatch_result dr[2];
    memset(dev, 0, sizeof dev);
    memset(total, 0, sizeof total);
    int st = lazyattn_workload_create(&wc, &wl);
    if (st) {
        serve_fail(st, "lazyattn_workload_create: %s (%s)", lazyattn_status_string(st),
                   lazyattn_testing_last_error());
        goto fail;
    }
    if (o->rate > 0) {
        arrivals = calloc((size_t)o->wl.n_requests, sizeof *arrivals);
        if (!arrivals) {
            st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "rag_bench");
            goto fail;
        }
        poisson_arrivals(o, o->wl.n_requests, arrivals);
    }
    char list[64 * 9] = "";
    for (int i = 0, at = 0; i < n && at < (int)sizeof list; i++)
        at += snprintf(list + at, sizeof list - (size_t)at, "%s%d", i ? "," : "", o->devices[i]);
    static const char *const modes[] = {"read", "back", "through"};
    printf("# rag_bench: %d serving processes on devices %s, each its own context, model and "
           "LAZY cache of %.4g MiB%s\n", n, list, (double)o->budgets[o->n_budgets - 1] / (1 << 20),
           o->retained_budget ? " retained between requests" : "");
    printf("# model %s: %d layers, hidden %d, %d heads / %d KV heads, d %d, vocab %d; KV %s; "
           "--gemm %s\n", o->gguf ? o->gguf : o->model, mc->n_layers, mc->hidden, mc->n_heads,
           mc->n_kv_heads, mc->head_dim, mc->vocab,
           mc->kv_dtype == LAZYATTN_DTYPE_F16 ? "f16" : "f32", serve_gemm_mode_name(mc->gemm));
    if (o->rate > 0)
        printf("# workload %s: %d docs of %d-%d tokens, k = %d, alpha = %.2f, %d requests, "
               "split: Poisson arrivals at %.4g/s for the host, ", o->workload, o->wl.n_docs,
               o->wl.doc_len_min, o->wl.doc_len_max, o->wl.docs_per_request, o->wl.alpha,
               o->wl.n_requests, o->rate);
    else
        printf("# workload %s: %d docs of %d-%d tokens, k = %d, alpha = %.2f, %d requests, "
               "split: %d clients for the host, ", o->workload, o->wl.n_docs, o->wl.doc_len_min,
               o->wl.doc_len_max, o->wl.docs_per_request, o->wl.alpha, o->wl.n_requests,
               o->concurrency);
    printf("each request to %s\n", o->balance == DISPATCH_ROUND_ROBIN
                                       ? "the next process in turn (round robin)"
                                       : "the process with the fewest outstanding");
    printf("# tier %s, mode %s; the processes with separate caches, then sharing the tier "
           "(emptied of this workload's documents before each)\n", o->tier.shown,
           modes[o->tier_mode]);
    fflush(stdout);
    for (int shared = 0; shared < 2; shared++) {
        if ((st = tier_open(&o->tier, &store)) || (st = tier_clear(store, wl))) goto fail;
        lazyattn_store_destroy(store);
        store = NULL;
        if ((st = run_device_phase(o, mc, shared, arrivals, dev[shared], &total[shared],
                                   &dr[shared])))
            goto fail;
    }
    if (!tier_open(&o->tier, &store)) tier_clear(store, wl); /* leave the tier as found */
    lazyattn_store_destroy(store);
    store = NULL;
    printf("\n| caches | process | device | requests (failed) | TTFT mean ms | TTFT p50 ms | "
           "TTFT p99 ms | req/s | doc tokens | recomputed | tier hits | tier hit tokens | most "
           "outstanding |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    int cut = 0;
    for (int shared = 0; shared < 2; shared++) {
        char caches[1100];
        int phase_cut = dr[shared].n_sent < o->wl.n_requests;
        cut |= phase_cut;
        snprintf(caches, sizeof caches, "%s%s", shared ? "shared " : "separate",
                 shared ? o->tier.shown : "");
        if (phase_cut) snprintf(caches + strlen(caches), 32, " (CUT SHORT)");
        for (int i = 0; i < n; i++) {
            phase_finish(&dev[shared][i]);
            char proc[32], device[32];
            snprintf(proc, sizeof proc, "%d%s", i, dev[shared][i].n_failed_procs ? " FAILED" : "");
            snprintf(device, sizeof device, "#%d", o->devices[i]);
            print_device_row(caches, proc, device, &dev[shared][i], dr[shared].wall_s,
                             dr[shared].most_outstanding[i]);
        }
        phase_finish(&total[shared]);
        print_device_row(caches, "total", list, &total[shared], dr[shared].wall_s, -1);
    }
    const phase_result *sep = &total[0], *shr = &total[1];
    double ratio = sep->total.recomputed_tokens ? (double)shr->total.recomputed_tokens /
                                                      (double)sep->total.recomputed_tokens
                                                : NAN;
    printf("\nrecomputed document tokens, shared tier / separate caches: %lld / %lld = %.3f "
           "(1/N = %.3f); throughput %.2f -> %.2f req/s; mean TTFT %.1f ms -> %.1f ms\n",
           (long long)shr->total.recomputed_tokens, (long long)sep->total.recomputed_tokens, ratio,
           1.0 / n, dr[0].wall_s > 0 ? sep->n_ok / dr[0].wall_s : 0.0,
           dr[1].wall_s > 0 ? shr->n_ok / dr[1].wall_s : 0.0, sep->ttft_mean * 1e3,
           shr->ttft_mean * 1e3);
    printf("requests sent per process: separate");
    for (int i = 0; i < n; i++) printf(" %d", dr[0].sent[i]);
    printf("; shared");
    for (int i = 0; i < n; i++) printf(" %d", dr[1].sent[i]);
    printf("\ntotal %.1f s\n", serve_now() - t_start);
    lazyattn_workload_destroy(wl);
    free(arrivals);
    if (sep->n_failed_procs || shr->n_failed_procs) {
        fprintf(stderr, "rag_bench: %d of %d processes failed\n",
                sep->n_failed_procs + shr->n_failed_procs, 2 * n);
        return 1;
    }
    if (cut)
        fprintf(stderr, "rag_bench: INCOMPLETE: --run-seconds %.3g s stopped the dispatch "
                        "(separate %d, shared %d of %d requests sent): the figures are of those\n",
                o->run_seconds, dr[0].n_sent, dr[1].n_sent, o->wl.n_requests);
    if (sep->n_ok == 0 || shr->n_ok == 0) {
        fprintf(stderr, "rag_bench: a phase completed no request\n");
        return 1;
    }
    return cut ? 3 : 0;
fail:
    fprintf(stderr, "rag_bench: %s: %s\n", lazyattn_status_string(st), serve_last_error());
    lazyattn_store_destroy(store);
    lazyattn_workload_destroy(wl);
    free(arrivals);
    for (int p = 0; p < 2; p++) {
        free(total[p].ttft), free(total[p].plan);
        for (int i = 0; i < n; i++) free(dev[p][i].ttft), free(dev[p][i].plan);
    }
    return 1;
}

/* Below the per-policy table: runs cut short or shared, the chunked
 * prefill's interleaving, and lazy against position-aware beside the
 * paper's figures. */
static void bench_budget_text(uint64_t v, char *out, size_t n) {
    if (v >= (1ull << 30) && v % (1ull << 30) == 0)
        snprintf(out, n, "%llu GiB", (unsigned long long)(v >> 30));
    else if (v >= (1ull << 20))
        snprintf(out, n, "%.4g MiB", (double)v / (1 << 20));
    else
        snprintf(out, n, "%.4g KiB", (double)v / 1024);
}

static void bench_print_notes(const bench_options *o, const serve_run_result *runs, int n) {
    char b[32];
    for (int i = 0; i < n; i++) {
        const serve_run_result *r = &runs[i];
        bench_budget_text(r->budget_bytes, b, sizeof b);
        if (r->cut)
            printf("CUT SHORT: %s @ %s admitted %d of its %d requests before its time limit "
                   "(%.1f s); its figures are of those only\n",
                   r->policy, b, r->n_requests, r->n_planned, r->limit_s);
        if (r->shared)
            printf("note: %s @ %s is the same run as at the first budget (--retained-budget: "
                   "none keeps nothing, the budget cannot change it)\n", r->policy, b);
    }
    int64_t calls = 0, steps = 0;
    for (int i = 0; i < n; i++)
        if (!runs[i].shared) calls += runs[i].between_calls, steps += runs[i].interleaved_decodes;
    if (o->prefill_chunk > 0 && calls > 0)
        printf("chunked prefill: %lld chunk boundaries inside prefills, %lld decode steps of the "
               "running requests run there\n", (long long)calls, (long long)steps);
    /* lazy vs position-aware per budget (the paper: 1.37x TTFT, 1.40x throughput) */
    int header = 0;
    for (int i = 0; i < n; i++) {
        const serve_run_result *l = &runs[i], *p = NULL;
        if (strcmp(l->policy, "lazy") != 0) continue;
        for (int j = 0; j < n; j++)
            if (strcmp(runs[j].policy, "position") == 0 && runs[j].budget_bytes == l->budget_bytes)
                p = &runs[j];
        if (!p || l->n_ok == 0 || p->n_ok == 0) continue;
        if (!header) {
            printf("\nLazy vs position-aware (Block-Attention); the paper: 1.37x lower mean TTFT, "
                   "1.40x the throughput:\n\n| budget | TTFT mean (position / lazy) | TTFT p50 | "
                   "TTFT p99 | TPOT (position / lazy) | throughput req/s (lazy / position) | "
                   "tok/s | hit ratio lazy / position (+copy) | complete |\n"
                   "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
            header = 1;
        }
        bench_budget_text(l->budget_bytes, b, sizeof b);
        printf("| %s | %.2fx | %.2fx | %.2fx | %.2fx | %.2fx | %.2fx | %.3f / %.3f (+%.3f) | "
               "%s |\n",
               b, p->ttft_mean / l->ttft_mean, p->ttft_p50 / l->ttft_p50,
               p->ttft_p99 / l->ttft_p99, p->tpot_mean / l->tpot_mean,
               l->req_per_s / p->req_per_s, l->tok_per_s / p->tok_per_s, l->hit_ratio,
               p->hit_ratio, p->copy_ratio,
               l->cut || p->cut ? "NO (cut short)" : "yes");
    }
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
    phase_t0 = t_start;
    phase_bar = o.progress;

    serve_model_config mc;
    if ((st = serve_model_config_preset(&mc, o.model))) goto fail;
    if (o.gguf) {
        if ((st = serve_gguf_open(o.gguf, &gguf)) || (st = serve_gguf_model_config(gguf, &mc)))
            goto fail;
    }
    if (o.max_rows > 0) mc.max_rows = o.max_rows;
    if (o.kv_f32) mc.kv_dtype = LAZYATTN_DTYPE_F32;
    mc.gemm = (serve_gemm_mode)o.gemm; /* the choices' order is the enum's */
    if (o.prefill_chunk > 0 && o.prefill_chunk < mc.block_size) {
        fprintf(stderr, "rag_bench: --prefill-chunk: %d tokens is less than one KV block (%d); 0 "
                        "turns chunking off\n", o.prefill_chunk, mc.block_size);
        serve_gguf_close(gguf);
        return 2;
    }
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
    if (o.retained_budget &&
        (double)o.budgets[o.n_budgets - 1] + bench_headroom(&o, &mc) > 1125899906842624.0) {
        fprintf(stderr, "rag_bench: --retained-budget: the largest budget and the working sets of "
                        "the requests in flight (%.4g B) exceed 1 PiB\n", bench_headroom(&o, &mc));
        serve_gguf_close(gguf);
        return 2;
    }
    if (o.processes > 0 || o.n_devices > 0) {
        /* each process opens the GGUF file itself: nothing is shared through fork */
        serve_gguf_close(gguf);
        return o.n_devices > 0 ? run_devices(&o, &mc) : run_processes(&o, &mc);
    }

    double t_model = 0;
    st = bench_setup(&b, &o, &mc, gguf, &t_model);
    gguf = NULL;
    if (st) goto fail;
    runs = calloc((size_t)(o.n_budgets * o.n_policies), sizeof *runs);
    if (!runs) {
        st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "rag_bench");
        goto fail;
    }
    if (o.tier_text && (st = tier_open(&o.tier, &b.tier))) goto fail;
    printf("# rag_bench on %s\n", lazyattn_context_device_name(b.ctx));
    if (b.tier)
        printf("# tier %s (mode %s) behind the lazy cache, emptied of the workload's documents "
               "before each run\n", o.tier.shown,
               o.tier_mode == LAZYATTN_TIER_READ_ONLY ? "read"
               : o.tier_mode == LAZYATTN_TIER_WRITE_BACK ? "back" : "through");
    printf("# model %s: %d layers, hidden %d, %d heads / %d KV heads, d %d, FFN %d, vocab %d "
           "(%.3g M params, %s weights %s, %.1f s to set up and build kernels); KV %s, %llu B/token, block %d\n",
           o.gguf ? o.gguf : o.model, mc.n_layers, mc.hidden, mc.n_heads, mc.n_kv_heads,
           mc.head_dim, mc.ffn, mc.vocab, (double)serve_model_config_n_params(&mc) / 1e6,
           serve_model_uses_bf16(b.model) ? "bf16" : "f32",
           o.gguf ? "from GGUF" : "random", t_model, mc.kv_dtype == LAZYATTN_DTYPE_F16 ? "f16" : "f32",
           (unsigned long long)serve_model_kv_bytes_per_token(&mc), mc.block_size);
    uint64_t weight_bytes = 0, other_bytes = 0;
    serve_model_device_bytes(b.model, &weight_bytes, &other_bytes);
    printf("# gemm %s (--gemm %s): %s; model on the device: weights %.3g GB, activations and "
           "temporaries %.3g GB\n", serve_model_uses_bf16(b.model) ? "bf16" : "f32",
           serve_gemm_mode_name(mc.gemm),
           !serve_model_uses_bf16(b.model) ? "CLBlast SGEMM, f32 weights"
           : serve_gemm_bf16_has_tensor_cores(serve_model_gemm_bf16(b.model))
               ? "bf16 weights, tensor-core kernels (portable kernel for shapes they refuse)"
               : "bf16 weights, portable kernel (serve/gemm_bf16.cl)",
           (double)weight_bytes / 1e9, (double)other_bytes / 1e9);
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

    if (o.retained_budget)
        printf("# budgets retained by the cache between requests; each pool adds %.4g MiB for "
               "the working sets of the requests in flight\n",
               bench_headroom(&o, &mc) / (1 << 20));
    if (o.prefill_chunk > 0)
        printf("# prefill in forwards of at most %d tokens (--max-rows %d), a decode step of the "
               "running requests between two\n",
               o.prefill_chunk < mc.max_rows ? o.prefill_chunk : mc.max_rows, mc.max_rows);
    if (o.time_limit > 0)
        printf("# time limit %.0f s for the whole program: each run admits requests until its "
               "share of the time left\n", o.time_limit);
    fflush(stdout);

    /* Runs are stored budget by budget (the tables' order). Under a time
     * limit they run policy by policy in the order given (lazy, position,
     * prefix, none by default: the cheapest first, so that what they leave
     * of their share passes to the dearer ones), each admitting requests
     * until an equal share of the time left, less the longest request
     * latency seen so far (the drain of the requests in flight). With
     * --retained-budget the none policy keeps nothing whatever the budget,
     * so it runs once and its run stands for every budget. */
    n_runs = o.n_budgets * o.n_policies;
    int n_todo = n_runs, n_exec = 0;
    for (int pi = 0; pi < o.n_policies; pi++)
        if (o.retained_budget && o.policies[pi] == LAZYATTN_CACHE_POLICY_NONE)
            n_todo -= o.n_budgets - 1;
    double drain = 0;
    for (int step = 0; step < n_runs; step++) {
        int pi = o.time_limit > 0 ? step / o.n_budgets : step % o.n_policies;
        int bi = o.time_limit > 0 ? step % o.n_budgets : step / o.n_policies;
        serve_run_result *r = &runs[bi * o.n_policies + pi];
        int shared_none = o.retained_budget && o.policies[pi] == LAZYATTN_CACHE_POLICY_NONE;
        if (shared_none && bi != 0) continue; /* a copy of the run at the first budget */
        double deadline = 0;
        if (o.time_limit > 0) {
            double left = o.time_limit - (serve_now() - t_start) - 2.0; /* 2 s: tables, files */
            double share = left / (n_todo - n_exec) - drain;
            if (share < 1e-3) share = 1e-3; /* admits nothing: the run is marked cut */
            deadline = serve_now() + share; /* warm-up included */
        }
        phase("run %d of %d: %s @ %.4g MiB", n_exec + 1, n_todo, lazyattn_cache_policy_name(o.policies[pi]),
              (double)o.budgets[bi] / (1 << 20));
        st = bench_run(&b, o.policies[pi], o.budgets[bi], o.run_seconds, deadline, r);
        if (st) {
            fprintf(stderr, "\nrag_bench: %s at %llu B: %s: %s\n",
                    lazyattn_cache_policy_name(o.policies[pi]), (unsigned long long)o.budgets[bi],
                    lazyattn_status_string(st), serve_last_error());
            goto fail;
        }
        n_exec++;
        if (o.time_limit > 0) { /* the guard's bookkeeping, and what a killed run leaves */
            char bt[32];
            bench_budget_text(r->budget_bytes, bt, sizeof bt);
            printf("# run %d/%d done at %.1f s: %s @ %s: %d of %d requests (%d refused)%s, "
                   "TTFT mean %.1f ms, TPOT %.2f ms, %.3f req/s, hit ratio %.3f, wall %.1f s "
                   "(admission limit %.1f s)\n",
                   n_exec, n_todo, serve_now() - t_start, r->policy, bt, r->n_ok + r->n_failed,
                   r->n_planned, r->n_failed, r->cut ? ", CUT SHORT" : "", 1e3 * r->ttft_mean,
                   1e3 * r->tpot_mean, r->req_per_s, r->hit_ratio, r->wall_s, r->limit_s);
            fflush(stdout);
        }
        for (int q = 0; q < r->n_requests; q++)
            if (r->requests[q].ok && r->requests[q].finish - r->requests[q].arrival > drain)
                drain = r->requests[q].finish - r->requests[q].arrival;
        if (shared_none)
            for (int bj = 0; bj < o.n_budgets; bj++) {
                if (bj == bi) continue;
                serve_run_result *c = &runs[bj * o.n_policies + pi];
                *c = *r;
                c->budget_bytes = o.budgets[bj];
                c->shared = 1;
                size_t bytes = (size_t)(r->n_requests ? r->n_requests : 1) * sizeof *c->requests;
                c->requests = malloc(bytes);
                if (!c->requests) {
                    memset(c, 0, sizeof *c);
                    st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "rag_bench: run copy");
                    goto fail;
                }
                memcpy(c->requests, r->requests, (size_t)r->n_requests * sizeof *c->requests);
            }
    }

    printf("\n");
    serve_print_table(stdout, runs, n_runs);
    bench_print_notes(&o, runs, n_runs);
    if (o.no_profiling) {
        printf("\nDevice time per phase: not measured (--no-profiling)\n");
    } else {
        printf("\nDevice time per phase (profiling events; host, sync, idle = wall - device):\n\n");
        serve_print_phases(stdout, runs, n_runs);
    }
    printf("\nHost time inside enqueue calls (launch overhead), blocking uploads and waits:\n\n");
    serve_print_host(stdout, runs, n_runs);
    if (b.tier) {
        printf("\nDocument tier (%s): per lookup a GPU hit, a tier hit or a recompute\n\n",
               o.tier.shown);
        printf("| policy | budget | doc tokens | GPU hit tokens | tier hit tokens | recomputed | "
               "tier writes | tier errors | tier rejected | write errors | lease waits | "
               "computed twice | MiB read / written | plan + tier load mean ms | "
               "writer queued / dropped | skipped by cost (loads / writes) | "
               "background loads / failed / get_plan waits |\n");
        printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | "
               "--- | --- | --- | --- |\n");
        for (int i = 0; i < n_runs; i++) {
            const lazyattn_cache_stats *t = &runs[i].stats;
            double plan = 0;
            int n_plan = 0;
            for (int q = 0; q < runs[i].n_requests; q++)
                if (runs[i].requests[q].ok) plan += runs[i].requests[q].plan_s, n_plan++;
            printf("| %s | %.4g MiB | %lld | %lld | %lld | %lld | %lld | %lld | %lld | %lld | "
                   "%lld | %lld | %.2f / %.2f | %.2f | %lld / %lld | %lld / %lld | %lld / %lld / "
                   "%lld |\n",
                   runs[i].policy, (double)runs[i].budget_bytes / (1 << 20),
                   (long long)t->doc_tokens, (long long)t->hit_tokens,
                   (long long)t->tier_hit_tokens, (long long)t->recomputed_tokens,
                   (long long)t->tier_writes, (long long)t->tier_errors,
                   (long long)t->tier_rejected, (long long)t->tier_write_errors,
                   (long long)t->tier_lease_waits, (long long)t->tier_duplicates,
                   (double)t->tier_read_bytes / (1 << 20), (double)t->tier_write_bytes / (1 << 20),
                   n_plan ? plan / n_plan * 1e3 : 0.0, (long long)t->tier_writes_queued,
                   (long long)t->tier_writes_dropped, (long long)t->tier_skipped_by_cost,
                   (long long)t->tier_writes_skipped_by_cost,
                   (long long)t->tier_loads_background, (long long)t->tier_load_failures,
                   (long long)t->tier_load_waits);
        }
    }
    char path[1024];
    snprintf(path, sizeof path, "%s.csv", o.out_prefix);
    if ((st = serve_write_csv(path, runs, n_runs))) goto fail;
    snprintf(path, sizeof path, "%s_summary.csv", o.out_prefix);
    if ((st = serve_write_summary_csv(path, runs, n_runs))) goto fail;
    snprintf(path, sizeof path, "%s_ttft.svg", o.out_prefix);
    if ((st = serve_write_svg_ttft(path, runs, n_runs, o.budgets[0]))) goto fail;
    snprintf(path, sizeof path, "%s_budget.svg", o.out_prefix);
    if ((st = serve_write_svg_budget(path, runs, n_runs))) goto fail;
    if (o.n_budgets > 1) {
        snprintf(path, sizeof path, "%s_ttft_budgets.svg", o.out_prefix);
        if ((st = serve_write_svg_ttft_budgets(path, runs, n_runs))) goto fail;
    }
    printf("\nwrote %s.csv, %s_summary.csv, %s_ttft.svg, %s_budget.svg%s%s%s; total %.1f s\n",
           o.out_prefix, o.out_prefix, o.out_prefix, o.out_prefix, o.n_budgets > 1 ? ", " : "",
           o.n_budgets > 1 ? o.out_prefix : "", o.n_budgets > 1 ? "_ttft_budgets.svg" : "",
           serve_now() - t_start);
    /* A run that completed no request measured nothing: say so, and fail. */
    int empty = 0;
    int cut = 0;
    for (int i = 0; i < n_runs; i++) {
        if (runs[i].n_ok == 0 && !runs[i].shared) {
            fprintf(stderr, "rag_bench: %s at %llu B completed none of its %d requests (%s)\n",
                    runs[i].policy, (unsigned long long)runs[i].budget_bytes, o.wl.n_requests,
                    runs[i].n_failed ? "refused: the budget cannot hold a request's working set"
                    : runs[i].cut    ? "the time limit ended the run first"
                                     : "none admitted");
            empty++;
        }
        cut += runs[i].cut && !runs[i].shared;
    }
    if (cut) /* exit 3, or 1 when a run also completed nothing */
        fprintf(stderr, "rag_bench: INCOMPLETE: %d run%s cut short by the time limit (marked in "
                        "the tables and the summary CSV)\n", cut, cut > 1 ? "s" : "");
    for (int i = 0; i < n_runs; i++) serve_run_release(&runs[i]);
    free(runs);
    bench_free(&b);
    return empty ? 1 : cut ? 3 : 0;
fail:
    fprintf(stderr, "rag_bench: %s: %s\n", lazyattn_status_string(st), serve_last_error());
    serve_gguf_close(gguf);
    for (int i = 0; runs && i < n_runs; i++) serve_run_release(&runs[i]);
    free(runs);
    bench_free(&b);
    return 1;
}
