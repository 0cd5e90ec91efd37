/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lazyattn-rag: answers a question over documents with a llama GGUF model,
 * reusing each document's KV across prompts and runs.
 *
 *   lazyattn-rag --model FILE.gguf --doc a.txt --doc b.txt "question"
 *
 * The prompt is [BOS + chat template head] [doc 0] ... [doc n-1] [question
 * + template tail]; each document is tokenized alone (no BOS) and, under the
 * lazy policy, encoded alone at document-local positions, so its KV serves
 * it at any place in any later prompt. Documents persist in a directory
 * store (--cache-dir) keyed by (model identity, token digest): a later run
 * with the same documents, in any order, loads their KV instead of
 * prefilling them. The answer streams to stdout; the report (TTFT,
 * tokens/s, document tokens reused and prefilled) goes to stderr.
 */
#include "cli_options.h"
#include "rag.h"
#include "rag_jsonl.h"
#include "sampler.h"
#include "serve.h"
#include "tokenizer.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROG "lazyattn-rag"

static const char usage_text[] =
    "usage: lazyattn-rag --model FILE.gguf [--doc FILE]... [options] QUESTION\n"
    "Answers QUESTION over the documents with a llama GGUF model (F32, F16, BF16, Q8_0, Q4_0,\n"
    "Q4_K, Q5_K or Q6_K weights; the quantized ones kept so on the device; and its own\n"
    "tokenizer), reusing each document's KV cache across prompts and runs.\n"
    "  --model FILE        the GGUF model\n"
    "  --doc FILE          a document (repeatable; - reads one from stdin); QUESTION - reads\n"
    "                      the question from stdin\n"
    "  --cache-dir DIR     where documents' KV persist (default $XDG_CACHE_HOME/lazyattn,\n"
    "                      else ~/.cache/lazyattn; created if missing)\n"
    "  --no-store          keep documents in this process only\n"
    "  --policy NAME       lazy (default: each document encoded alone, reused anywhere),\n"
    "                      position, prefix, or none: no cache, the whole prompt attended\n"
    "                      causally as the model was trained (exact; see README)\n"
    "  --max-tokens N      most tokens to generate (default 256)\n"
    "  --temperature T     0 = greedy (default); > 0 samples (seeded)\n"
    "  --top-k K           sampling: the K most likely tokens (default 40, 0 = all)\n"
    "  --top-p P           sampling: the smallest nucleus of mass P (default 0.95)\n"
    "  --seed S            sampling seed (default 1)\n"
    "  --template NAME     auto (default: from the file, raw when it has none), raw, llama3,\n"
    "                      chatml, llama2, mistral\n"
    "  --system TEXT       a system message (chat templates only)\n"
    "  --kv-budget SIZE    device memory for KV (default 1GiB)\n"
    "  --max-rows N        most tokens of one forward (default 512)\n"
    "  --dequantize        dequantize quantized weights at load instead of keeping them\n"
    "                      quantized on the device (to compare; more memory)\n"
    "  --progress          progress bars on stderr even when it is not a terminal\n"
    "  --no-progress       none even on a terminal\n"
    "Exit status: 0 answered, 1 a file, the model or the run failed, 2 a bad command line.\n";

/* ---- messages and progress ---------------------------------------------- */

static int progress_on;
static int line_open; /* a \r progress line is on stderr */

static void end_line(void) {
    if (line_open) fputc('\n', stderr);
    line_open = 0;
}

static int fail(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
static int fail(const char *fmt, ...) {
    end_line();
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static void bar(const char *what, double done, double total, const char *unit) {
    if (!progress_on || total <= 0) return;
    double f = done / total;
    if (f > 1) f = 1;
    char b[31];
    int n = (int)(f * 30);
    for (int i = 0; i < 30; i++) b[i] = i < n ? '#' : ' ';
    b[30] = 0;
    fprintf(stderr, "\r" PROG ": %-8s [%s] %.0f/%.0f %s", what, b, done < total ? done : total,
            total, unit);
    fflush(stderr);
    line_open = 1;
}

/* ---- files -------------------------------------------------------------- */

/* A whole file, or stdin for "-": *out malloc'd, NUL-terminated. what
 * names it in messages. */
static int read_text(const char *path, const char *what, char **out, size_t *len) {
    *out = NULL;
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return fail("%s: %s", what, strerror(errno));
    struct stat sb;
    if (f != stdin && fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        return fail("%s: is a directory", what);
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    int oom = !buf;
    while (!oom) {
        if (n + 1 >= cap) {
            char *g = cap < ((size_t)1 << 40) ? realloc(buf, cap * 2) : NULL;
            if (!g) {
                oom = 1;
                break;
            }
            buf = g;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int err = oom || ferror(f);
    int saved = errno;
    if (f != stdin) fclose(f);
    if (err) {
        free(buf);
        return fail("%s: %s", what, oom ? "out of memory" : strerror(saved));
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

/* $XDG_CACHE_HOME/lazyattn, else $HOME/.cache/lazyattn; the parents are
 * created (the store creates the last component). */
static int default_cache_dir(char *out, size_t cap) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/') {
        if (mkdir(xdg, 0700) != 0 && errno != EEXIST) return fail("%s: %s", xdg, strerror(errno));
        n = snprintf(out, cap, "%s/lazyattn", xdg);
    } else if (home && home[0]) {
        n = snprintf(out, cap, "%s/.cache", home);
        if (n > 0 && (size_t)n < cap && mkdir(out, 0700) != 0 && errno != EEXIST)
            return fail("%s: %s", out, strerror(errno));
        n = snprintf(out, cap, "%s/.cache/lazyattn", home);
    } else {
        return fail("--cache-dir: neither XDG_CACHE_HOME nor HOME is set; give --cache-dir");
    }
    if (n < 0 || (size_t)n >= cap) return fail("--cache-dir: the default path is too long");
    return 0;
}

/* ---- the command line ---------------------------------------------------- */

#define MAX_DOCS 1024

typedef struct rag_options {
    const char *model, *cache_dir, *question, *system, *batch;
    const char *docs[MAX_DOCS];
    int n_docs;
    int no_store, policy, max_tokens, top_k, template_index, max_rows, progress, no_progress;
    int dequantize;
    double temperature, top_p;
    uint64_t seed, kv_budget;
} rag_options;

static const char *const template_names[] = {"auto", "raw", "llama3", "chatml", "llama2",
                                             "mistral"};

/* --doc may repeat and the question is the one positional argument, which
 * cli_parse refuses: both are taken out first; the rest (rest[0] = argv[0])
 * goes to cli_parse. A word after an option that takes a value is that
 * value, never the question. */
static int split_args(int argc, char **argv, const cli_option *opts, int n_opts, char **rest,
                      int *n_rest, rag_options *o) {
    int k = 0;
    rest[k++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--doc") || !strncmp(a, "--doc=", 6)) {
            const char *v = a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v || !v[0]) return cli_fail(PROG, "--doc", "needs a file (- for stdin)");
            if (o->n_docs == MAX_DOCS) return cli_fail(PROG, "--doc", "at most %d", MAX_DOCS);
            o->docs[o->n_docs++] = v;
            continue;
        }
        if (a[0] == '-' && a[1] == '-' && a[2] && !strchr(a, '=')) {
            rest[k++] = argv[i];
            for (int j = 0; j < n_opts; j++)
                if (!strcmp(opts[j].name, a) && opts[j].type != CLI_FLAG && i + 1 < argc) {
                    rest[k++] = argv[++i];
                    break;
                }
            continue;
        }
        if (a[0] == '-' && a[1]) { /* -h, --x=y, or an unknown option: cli_parse judges */
            rest[k++] = argv[i];
            continue;
        }
        if (o->question)
            return cli_fail(PROG, NULL, "one question only (\"%s\" and \"%s\"): quote it", o->question,
                            a);
        o->question = a;
    }
    *n_rest = k;
    return 0;
}

/* ---- the answer ----------------------------------------------------------- */

static int stdout_failed(void) {
    int e = errno;
    return fail("stdout: %s%s; stopping", strerror(e), e == EPIPE ? " (the reader went away)" : "");
}

typedef struct rag_run {
    lazyattn_context *ctx;
    serve_model *model;
    lazyattn_pool *pool;
    lazyattn_cache *cache;
    lazyattn_store *store;
    serve_engine *engine;
    serve_sampler *sampler;
    float *logits;
    char *piece;
    int64_t prefill_total; /* rows the running prefill computes (progress) */
    int64_t forwards;
} rag_run;

static void run_free(rag_run *r) {
    serve_engine_destroy(r->engine);
    lazyattn_cache_destroy(r->cache);
    lazyattn_store_destroy(r->store);
    lazyattn_pool_destroy(r->pool);
    serve_model_destroy(r->model);
    lazyattn_context_destroy(r->ctx);
    serve_sampler_destroy(r->sampler);
    free(r->logits);
    free(r->piece);
}

/* Between two prefill forwards (serve_engine_set_prefill_chunk): the bar. */
static int prefill_progress(void *user) {
    rag_run *r = user;
    const int rows = serve_model_get_config(r->model)->max_rows;
    r->forwards++;
    bar("prefill", (double)(r->forwards * rows), (double)r->prefill_total, "tokens");
    return 0;
}

/* One answer: its text (collected for a batch's JSON line, else streamed)
 * and what the report says. */
typedef struct rag_result {
    int collect;  /* 1: text kept in text[n_text], 0: streamed to stdout */
    char *text;
    size_t n_text, cap;
    int n_docs, doc_tokens, prefilled, reused, hits, copies, from_store, whole;
    size_t prompt_tokens;
    int n_gen, reason; /* reason: index in stop_reason_text */
    double ttft_s, tok_per_s;
} rag_result;

/* To stdout, flushed (a reader that went away ends the run), or into the
 * result's text. */
static int emit(rag_result *res, const char *bytes, size_t n) {
    if (res->collect) {
        if (res->n_text + n + 1 > res->cap) {
            size_t cap = res->cap ? res->cap * 2 : 256;
            while (cap < res->n_text + n + 1) cap *= 2;
            char *t = realloc(res->text, cap);
            if (!t) return fail("out of memory");
            res->text = t;
            res->cap = cap;
        }
        memcpy(res->text + res->n_text, bytes, n);
        res->n_text += n;
        return 0;
    }
    if ((n && fwrite(bytes, 1, n, stdout) != n) || fflush(stdout) != 0) return stdout_failed();
    return 0;
}

/* The sampled (or greedy) token of the last forward's logits. */
static int next_token(rag_run *r, int32_t argmax, int32_t *tok) {
    if (!r->sampler) {
        *tok = argmax;
        return 0;
    }
    if (serve_model_read_logits(r->model, 1, r->logits) ||
        serve_sampler_sample(r->sampler, r->logits, tok))
        return fail("sampling: %s", serve_last_error());
    return 0;
}

static const char *const stop_reason_text[] = {"--max-tokens", "end of sequence", "end of turn"};

static int answer(rag_run *r, const rag_options *o, const serve_tokenizer *tkz, rag_prompt *p,
                  rag_result *res) {
    const int whole = o->policy == LAZYATTN_CACHE_POLICY_NONE;
    /* --policy none: the documents are part of one causal prompt (the prefix) */
    size_t n_docs_tok = 0;
    for (int i = 0; i < p->n_docs; i++) n_docs_tok += p->doc_len[i];
    if (p->n_head + n_docs_tok + p->n_tail + (size_t)o->max_tokens > LAZYATTN_MAX_POSITION)
        return fail("the prompt (%zu tokens) and --max-tokens %d are more than a context holds "
                    "(%d positions)", p->n_head + n_docs_tok + p->n_tail, o->max_tokens,
                    LAZYATTN_MAX_POSITION);
    int32_t *prefix = NULL;
    lazyattn_request_desc d;
    lazyattn_request_desc_init(&d);
    int32_t *lens = calloc((size_t)p->n_docs + 1, sizeof *lens);
    if (!lens) return fail("out of memory");
    if (whole) {
        prefix = malloc((p->n_head + n_docs_tok + 1) * sizeof *prefix);
        if (!prefix) {
            free(lens);
            return fail("out of memory");
        }
        memcpy(prefix, p->head, p->n_head * sizeof *prefix);
        size_t k = p->n_head;
        for (int i = 0; i < p->n_docs; i++) {
            memcpy(prefix + k, p->docs[i], p->doc_len[i] * sizeof *prefix);
            k += p->doc_len[i];
        }
        d.n_prefix = (int)k;
        d.prefix = prefix;
    } else {
        for (int i = 0; i < p->n_docs; i++) lens[i] = (int32_t)p->doc_len[i];
        d.n_prefix = (int)p->n_head;
        d.prefix = p->head;
        d.n_docs = p->n_docs;
        d.docs = (const int32_t *const *)p->docs;
        d.doc_lengths = lens;
    }
    d.n_question = (int)p->n_tail;
    d.question = p->tail;
    d.max_new_tokens = o->max_tokens;
    size_t total = (size_t)d.n_prefix + n_docs_tok * (whole ? 0 : 1) + p->n_tail;
    int st = 0;

    double t0 = serve_now();
    lazyattn_request *req = NULL;
    if (!st && (st = lazyattn_request_create(r->cache, &d, &req))) {
        st = st == LAZYATTN_STATUS_BUDGET_EXCEEDED
                 ? fail("the prompt (%zu tokens) and --max-tokens %d need more KV than --kv-budget "
                        "(%.4g MiB): %s", total, o->max_tokens, (double)o->kv_budget / (1 << 20),
                        lazyattn_last_error())
                 : fail("planning the request: %s", lazyattn_last_error());
    }
    lazyattn_plan plan;
    memset(&plan, 0, sizeof plan);
    if (!st && lazyattn_request_get_plan(req, &plan)) st = fail("plan: %s", lazyattn_last_error());
    int32_t argmax = -1, tok = -1;
    if (!st) {
        r->prefill_total = plan.n_prefill;
        r->forwards = 0;
        bar("prefill", 0, (double)plan.n_prefill, "tokens");
        if (serve_engine_prefill(r->engine, req, &d, &argmax))
            st = fail("prefill: %s", serve_last_error());
        else
            bar("prefill", (double)plan.n_prefill, (double)plan.n_prefill, "tokens");
        end_line();
    }
    if (!st) st = next_token(r, argmax, &tok);
    double t_first = serve_now();
    int n_gen = 0, reason = 0;
    serve_detokenizer dt;
    serve_detokenizer_init(&dt, 0);
    size_t cap = serve_tokenizer_decode_capacity(tkz);
    serve_tokenizer_info ti;
    serve_tokenizer_get_info(tkz, &ti);
    while (!st) {
        if (tok == ti.eos || tok == ti.eot) {
            reason = tok == ti.eos ? 1 : 2;
            break;
        }
        size_t n = 0;
        if (serve_tokenizer_decode_token(tkz, &dt, tok, r->piece, cap, &n)) {
            st = fail("decoding token %d: %s", tok, serve_last_error());
            break;
        }
        if ((st = emit(res, r->piece, n))) break;
        if (++n_gen >= o->max_tokens) break;
        int32_t next = -1;
        if (serve_engine_decode(r->engine, 1, &req, &tok, &next)) {
            st = fail("decode: %s", serve_last_error());
            break;
        }
        st = next_token(r, next, &tok);
    }
    double t_end = serve_now();
    if (!st) {
        size_t n = 0;
        serve_detokenizer_flush(&dt, r->piece, cap, &n);
        if (!res->collect) r->piece[n++] = '\n';
        st = emit(res, r->piece, n);
    }
    if (!st) {
        res->whole = whole;
        res->n_docs = p->n_docs;
        res->doc_tokens = whole ? (int)n_docs_tok : plan.doc_tokens;
        res->reused = whole ? 0 : plan.hit_tokens + plan.copy_tokens + plan.tier_tokens;
        res->prefilled = res->doc_tokens - res->reused;
        res->hits = plan.hit_tokens;
        res->copies = plan.copy_tokens;
        res->from_store = plan.tier_tokens;
        res->prompt_tokens = total;
        res->n_gen = n_gen;
        res->reason = reason;
        res->ttft_s = t_first - t0;
        double gen_s = t_end - t_first;
        res->tok_per_s = n_gen > 1 && gen_s > 0 ? (n_gen - 1) / gen_s : 0.0;
    }
    lazyattn_request_destroy(req);
    free(prefix);
    free(lens);
    return st;
}

static void print_report(const rag_result *res, const char *store_dir) {
    end_line();
    if (res->whole)
        fprintf(stderr, PROG ": documents: %d (%d tokens) attended with the whole prompt "
                        "(--policy none): %d prefilled, 0 reused\n",
                res->n_docs, res->doc_tokens, res->doc_tokens);
    else
        fprintf(stderr, PROG ": documents: %d (%d tokens): %d prefilled, %d reused (%d "
                        "cached in this process, %d copied, %d from the store%s%s)\n",
                res->n_docs, res->doc_tokens, res->prefilled, res->reused, res->hits,
                res->copies, res->from_store, store_dir ? " at " : "", store_dir ? store_dir : "");
    fprintf(stderr, PROG ": prompt %zu tokens, TTFT %.3f s; %d tokens generated, %.2f tokens/s "
                    "after the first; stopped at %s\n",
            res->prompt_tokens, res->ttft_s, res->n_gen, res->tok_per_s,
            stop_reason_text[res->reason]);
}

/* A batch's result as one JSON line. */
static int print_json(int line, const rag_result *res) {
    int ok = printf("{\"line\": %d, \"answer\": ", line) > 0 &&
             rag_json_write_string(stdout, res->text ? res->text : "", res->n_text) == 0 &&
             printf(", \"documents\": %d, \"doc_tokens\": %d, \"prefilled\": %d, \"reused\": "
                    "%d, \"from_store\": %d, \"prompt_tokens\": %zu, \"generated\": %d, "
                    "\"stop\": \"%s\", \"ttft_s\": %.6f, \"tokens_per_s\": %.3f}\n",
                    res->n_docs, res->doc_tokens, res->prefilled, res->reused, res->from_store,
                    res->prompt_tokens, res->n_gen,
                    res->reason == 0 ? "max_tokens" : res->reason == 1 ? "eos" : "eot",
                    res->ttft_s, res->tok_per_s) > 0 &&
             fflush(stdout) == 0;
    return ok ? 0 : stdout_failed();
}

/* ---- setup ------------------------------------------------------------------ */

/* Reads the file once with a bar (the page cache then serves the loader):
 * the part of loading a large model that takes time. */
static void warm_file(const char *path) {
    if (!progress_on) return;
    FILE *f = fopen(path, "rb");
    struct stat sb;
    if (!f) return;
    if (fstat(fileno(f), &sb) == 0 && sb.st_size > (64 << 20)) {
        static char chunk[1 << 20];
        double done = 0, total = (double)sb.st_size;
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
            done += (double)n;
            if (((int64_t)done & ((64 << 20) - 1)) == 0 || done >= total)
                bar("reading", done / (1 << 20), total / (1 << 20), "MiB");
        }
        end_line();
    }
    fclose(f);
}

static int setup(rag_run *r, const rag_options *o, serve_gguf *g, serve_model_config *mc,
                 const char *store_dir) {
    lazyattn_context_options co;
    lazyattn_context_options_init(&co);
    if (lazyattn_context_create(&co, &r->ctx))
        return fail("OpenCL context: %s", lazyattn_last_error());
    if (progress_on) {
        fprintf(stderr, PROG ": loading %s on %s\n", o->model, lazyattn_context_device_name(r->ctx));
        warm_file(o->model);
    }
    if (serve_model_create(r->ctx, mc, &r->model) || serve_model_load_gguf(r->model, g))
        return fail("%s: %s", o->model, serve_last_error());
    if (progress_on) fprintf(stderr, PROG ": %s\n", serve_model_weights_note(r->model));
    uint64_t model_id = 0;
    /* KV computed from weights kept quantized differs in rounding */
    const int mode = serve_model_uses_bf16(r->model) | serve_model_kept_quantized(r->model) << 1;
    if (rag_model_identity(o->model, store_dir, mode, &model_id))
        return fail("%s", serve_last_error());
    lazyattn_pool_config pc;
    serve_model_pool_config(mc, o->kv_budget, &pc);
    if (lazyattn_pool_create(r->ctx, &pc, &r->pool))
        return fail("--kv-budget: %s", lazyattn_last_error());
    lazyattn_cache_config cc;
    lazyattn_cache_config_init(&cc);
    cc.policy = (lazyattn_cache_policy)o->policy;
    cc.model_id = model_id;
    if (lazyattn_cache_create(r->pool, &cc, &r->cache))
        return fail("cache: %s", lazyattn_last_error());
    if (store_dir) {
        if (lazyattn_store_create_dir(store_dir, &r->store))
            return fail("--cache-dir %s: %s", store_dir, lazyattn_last_error());
        if (lazyattn_cache_set_tier(r->cache, r->store, LAZYATTN_TIER_WRITE_THROUGH))
            return fail("--cache-dir: %s", lazyattn_last_error());
    }
    if (serve_engine_create(r->model, r->pool, &r->engine))
        return fail("engine: %s", serve_last_error());
    if (progress_on &&
        serve_engine_set_prefill_chunk(r->engine, mc->max_rows, prefill_progress, r))
        return fail("engine: %s", serve_last_error());
    if (o->temperature > 0) {
        serve_sampler_config sc;
        serve_sampler_config_init(&sc);
        sc.temperature = o->temperature;
        sc.top_k = o->top_k;
        sc.top_p = o->top_p;
        sc.seed = o->seed;
        if (serve_sampler_create(&sc, mc->vocab, &r->sampler))
            return fail("sampling: %s", serve_last_error());
        if (!(r->logits = malloc((size_t)mc->vocab * sizeof *r->logits))) return fail("out of memory");
    }
    return 0;
}

/* A document (or, under --policy none, the whole prompt) that cannot fit the
 * KV budget on its own, named before any work. */
static int check_budget(const rag_options *o, const serve_model_config *mc, const rag_prompt *p,
                        const char *const *names) {
    uint64_t per_tok = serve_model_kv_bytes_per_token(mc), bs = (uint64_t)mc->block_size;
    for (int i = 0; i < p->n_docs; i++) {
        uint64_t bytes = (p->doc_len[i] + bs - 1) / bs * bs * per_tok;
        if (bytes > o->kv_budget)
            return fail("%s: %zu tokens need %.4g MiB of KV, more than --kv-budget (%.4g "
                        "MiB)", names[i], p->doc_len[i], (double)bytes / (1 << 20),
                        (double)o->kv_budget / (1 << 20));
    }
    return 0;
}

/* ---- one prompt, or a batch ------------------------------------------------ */

/* Tokenizes, checks, answers and reports one request. names/texts: [n_docs]. */
static int ask(rag_run *r, const rag_options *o, const serve_gguf *g, const serve_tokenizer *tkz,
               const serve_model_config *mc, const char *question, int n_docs,
               const char *const *names, char *const *texts, rag_result *res) {
    rag_prompt prompt;
    int st = rag_prompt_build(g, tkz, template_names[o->template_index], o->system, question,
                              n_docs, names, (const char *const *)texts, &prompt)
                 ? fail("%s", serve_last_error())
                 : 0;
    if (!st) st = check_budget(o, mc, &prompt, names);
    if (!st) st = answer(r, o, tkz, &prompt, res);
    rag_prompt_free(&prompt);
    return st;
}

/* Every line of --batch (blank lines skipped), one JSON line out each; the
 * first failure ends the batch, naming its line. */
static int run_batch(rag_run *r, const rag_options *o, const serve_gguf *g,
                     const serve_tokenizer *tkz, const serve_model_config *mc,
                     const char *store_dir) {
    FILE *f = strcmp(o->batch, "-") ? fopen(o->batch, "rb") : stdin;
    if (!f) return fail("--batch %s: %s", o->batch, strerror(errno));
    char *line = NULL, err[256];
    size_t cap = 0;
    ssize_t len;
    int st = 0, number = 0, answered = 0;
    rag_result total;
    memset(&total, 0, sizeof total);
    while (!st && (len = getline(&line, &cap, f)) >= 0) {
        number++;
        size_t k = 0;
        while (k < (size_t)len && strchr(" \t\r\n", line[k])) k++;
        if (k == (size_t)len) continue;
        rag_batch_line bl;
        if (rag_jsonl_parse(line, (size_t)len, &bl, err, sizeof err)) {
            st = fail("--batch %s:%d: %s", o->batch, number, err);
            break;
        }
        int n = bl.n_docs + bl.n_texts;
        char **names = calloc((size_t)n + 1, sizeof *names), **texts = calloc((size_t)n + 1, sizeof *texts);
        if (!names || !texts) st = fail("out of memory");
        for (int i = 0; !st && i < n; i++) {
            char buf[4096];
            if (i < bl.n_docs)
                snprintf(buf, sizeof buf, "--batch %s:%d: %s", o->batch, number, bl.docs[i]);
            else
                snprintf(buf, sizeof buf, "--batch %s:%d: texts[%d]", o->batch, number, i - bl.n_docs);
            if (!(names[i] = strdup(buf))) st = fail("out of memory");
            size_t tl;
            if (!st && i < bl.n_docs) st = read_text(bl.docs[i], names[i], &texts[i], &tl);
            else if (!st && !(texts[i] = strdup(bl.texts[i - bl.n_docs]))) st = fail("out of memory");
        }
        rag_result res;
        memset(&res, 0, sizeof res);
        res.collect = 1;
        if (!st)
            st = ask(r, o, g, tkz, mc, bl.question, n, (const char *const *)names, texts, &res);
        if (!st) st = print_json(number, &res);
        if (!st) {
            answered++;
            total.doc_tokens += res.doc_tokens;
            total.prefilled += res.prefilled;
            total.reused += res.reused;
            total.from_store += res.from_store;
            total.ttft_s += res.ttft_s;
            total.n_gen += res.n_gen;
        }
        free(res.text);
        for (int i = 0; names && texts && i < n; i++) {
            free(names[i]);
            free(texts[i]);
        }
        free(names);
        free(texts);
        rag_batch_line_free(&bl);
    }
    if (!st && ferror(f)) st = fail("--batch %s: %s", o->batch, strerror(errno));
    free(line);
    if (f != stdin) fclose(f);
    if (!st && answered == 0) st = fail("--batch %s: no request in it", o->batch);
    if (!st)
        fprintf(stderr, PROG ": batch: %d requests, document tokens %d: %d prefilled, %d reused "
                        "(%d from the store%s%s); mean TTFT %.3f s; %d tokens generated\n",
                answered, total.doc_tokens, total.prefilled, total.reused, total.from_store,
                store_dir ? " at " : "", store_dir ? store_dir : "", total.ttft_s / answered,
                total.n_gen);
    return st;
}

int main(int argc, char **argv) {
    static rag_options o;
    o.policy = LAZYATTN_CACHE_POLICY_LAZY;
    o.max_tokens = 256;
    o.top_k = 40;
    o.top_p = 0.95;
    o.seed = 1;
    o.kv_budget = (uint64_t)1 << 30;
    o.max_rows = 512;
    cli_option opts[] = {
        {.name = "--model", .type = CLI_STRING, .dest = &o.model},
        {.name = "--batch", .type = CLI_STRING, .dest = &o.batch},
        {.name = "--cache-dir", .type = CLI_STRING, .dest = &o.cache_dir},
        {.name = "--no-store", .type = CLI_FLAG, .dest = &o.no_store},
        {.name = "--policy", .type = CLI_ENUM, .dest = &o.policy,
         .choices = "lazy|position|prefix|none"},
        {.name = "--max-tokens", .type = CLI_INT, .dest = &o.max_tokens, .min = 1, .max = 1 << 20},
        {.name = "--temperature", .type = CLI_DOUBLE, .dest = &o.temperature, .min = 0, .max = 100},
        {.name = "--top-k", .type = CLI_INT, .dest = &o.top_k, .min = 0, .max = 1 << 22},
        {.name = "--top-p", .type = CLI_DOUBLE, .dest = &o.top_p, .min = 1e-9, .max = 1},
        {.name = "--seed", .type = CLI_U64, .dest = &o.seed},
        {.name = "--template", .type = CLI_ENUM, .dest = &o.template_index,
         .choices = "auto|raw|llama3|chatml|llama2|mistral"},
        {.name = "--system", .type = CLI_STRING, .dest = &o.system, .allow_empty = 1},
        {.name = "--kv-budget", .type = CLI_SIZE, .dest = &o.kv_budget, .min = 65536,
         .max = 1125899906842624.0},
        {.name = "--max-rows", .type = CLI_INT, .dest = &o.max_rows, .min = 1, .max = 65536},
        {.name = "--progress", .type = CLI_FLAG, .dest = &o.progress},
        {.name = "--no-progress", .type = CLI_FLAG, .dest = &o.no_progress},
        {.name = "--dequantize", .type = CLI_FLAG, .dest = &o.dequantize},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return fail("out of memory");
    int n_rest = 0;
    int r = split_args(argc, argv, opts, n_opts, rest, &n_rest, &o);
    if (!r) r = cli_parse(PROG, usage_text, opts, n_opts, n_rest, rest);
    free(rest);
    if (r) return r == CLI_HELP ? 0 : 2;
    if (!o.model) return cli_fail(PROG, "--model", "a GGUF model is needed");
    if (o.batch && (o.question || o.n_docs))
        return cli_fail(PROG, "--batch", "its lines hold the questions and documents: no QUESTION "
                                         "or --doc with it");
    if (!o.batch && !o.question)
        return cli_fail(PROG, NULL, "a question is needed (or - to read it from stdin)");
    if (o.progress && o.no_progress)
        return cli_fail(PROG, "--progress", "and --no-progress: choose one");
    if (o.no_store && o.cache_dir)
        return cli_fail(PROG, "--no-store", "and --cache-dir: choose one");
    int stdin_uses = o.question && !strcmp(o.question, "-");
    for (int i = 0; i < o.n_docs; i++) stdin_uses += !strcmp(o.docs[i], "-");
    if (stdin_uses > 1) return cli_fail(PROG, "--doc", "stdin (-) can be read once");
    progress_on = o.progress || (!o.no_progress && isatty(2));
    /* a closed pipe is an error of write(), told once, not a signal */
    signal(SIGPIPE, SIG_IGN);

    char store_buf[4096];
    const char *store_dir = NULL;
    if (!o.no_store && o.policy == LAZYATTN_CACHE_POLICY_LAZY) {
        if (o.cache_dir) store_dir = o.cache_dir;
        else if (default_cache_dir(store_buf, sizeof store_buf)) return 1;
        else store_dir = store_buf;
    }

    /* the documents and the question first: a missing file costs no model load */
    char *question = NULL, **doc_text = calloc((size_t)o.n_docs + 1, sizeof *doc_text);
    char **doc_names = calloc((size_t)o.n_docs + 1, sizeof *doc_names);
    size_t len;
    int st = doc_text && doc_names ? 0 : fail("out of memory");
    for (int i = 0; !st && i < o.n_docs; i++) {
        char buf[4096];
        snprintf(buf, sizeof buf, "--doc %s", o.docs[i]);
        if (!(doc_names[i] = strdup(buf))) st = fail("out of memory");
        if (!st) st = read_text(o.docs[i], doc_names[i], &doc_text[i], &len);
    }
    if (!st && o.question && !strcmp(o.question, "-"))
        st = read_text("-", "the question (stdin)", &question, &len);

    serve_gguf *g = NULL;
    serve_tokenizer *tkz = NULL;
    serve_model_config mc;
    rag_run run;
    memset(&run, 0, sizeof run);
    struct stat sb;
    if (!st && stat(o.model, &sb) != 0) st = fail("%s: %s", o.model, strerror(errno));
    if (!st && serve_gguf_open(o.model, &g)) st = fail("%s: %s", o.model, serve_last_error());
    if (!st) {
        serve_model_config_preset(&mc, "small");
        if (serve_gguf_model_config(g, &mc))
            st = fail("%s: this model cannot run here: %s", o.model, serve_last_error());
        mc.max_rows = o.max_rows;
        mc.dequantize_weights = o.dequantize;
    }
    if (!st && serve_tokenizer_from_gguf(g, &tkz))
        st = fail("%s: its tokenizer: %s", o.model, serve_last_error());
    if (!st) {
        serve_tokenizer_info ti;
        serve_tokenizer_get_info(tkz, &ti);
        if (ti.n_vocab > mc.vocab)
            st = fail("%s: the tokenizer has %d tokens, the model's token_embd.weight %d rows",
                      o.model, (int)ti.n_vocab, mc.vocab);
    }
    /* one prompt: checked before the model is loaded */
    rag_prompt prompt;
    memset(&prompt, 0, sizeof prompt);
    if (!st && !o.batch) {
        if (rag_prompt_build(g, tkz, template_names[o.template_index], o.system,
                             question ? question : o.question, o.n_docs,
                             (const char *const *)doc_names, (const char *const *)doc_text,
                             &prompt))
            st = fail("%s", serve_last_error());
        if (!st) st = check_budget(&o, &mc, &prompt, (const char *const *)doc_names);
    }
    if (!st && !(run.piece = malloc(serve_tokenizer_decode_capacity(tkz) + 8)))
        st = fail("out of memory");
    if (!st) st = setup(&run, &o, g, &mc, store_dir);
    if (!st && o.batch) {
        st = run_batch(&run, &o, g, tkz, &mc, store_dir);
    } else if (!st) {
        rag_result res;
        memset(&res, 0, sizeof res);
        st = answer(&run, &o, tkz, &prompt, &res);
        if (!st) print_report(&res, store_dir);
    }
    serve_gguf_close(g);
    for (int i = 0; i < o.n_docs; i++) {
        if (doc_text) free(doc_text[i]);
        if (doc_names) free(doc_names[i]);
    }
    free(doc_text);
    free(doc_names);
    free(question);
    run_free(&run);
    rag_prompt_free(&prompt);
    serve_tokenizer_free(tkz);
    end_line();
    if (!st && fclose(stdout) != 0) st = stdout_failed();
    return st ? 1 : 0;
}
