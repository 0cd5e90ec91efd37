/* SPDX-License-Identifier: Apache-2.0 */
/* bench/serve/write_gguf's files run through serve/gguf.c and the decoder
 * (the default device: PoCL in CI), and its command line fails cleanly.
 *   forms_match_dequantized  tiny bf16, tiny q8_0 and small q4_k_m files
 *       against the F32 file of the values their blocks decode to
 *       (--dequantized, computed by the writer from the fields it packs,
 *       not by unpacking): a prompt of 8 tokens, then 8 greedy steps fed
 *       the reference's tokens; every step's logits within a normalised
 *       1e-4 of the reference's (the quantized weights are kept as their
 *       blocks on the device, read by the GEMV and summed in another
 *       order: a last-bit difference that can flip a key's or value's
 *       rounding to the preset's f16 K/V, 4.2e-5 on small q4_k_m; with
 *       f32 K/V under 1e-6, tests/test_serve_quant.c), the same
 *       greedy token wherever the reference's top two are 1e-3 apart. A
 *       packing mistake (a scale, a nibble, a sub-block in the wrong
 *       place) moves the logits by far more. Each file's tensor types
 *       are llama.cpp's for the form (q4_k_m: Q6_K for output and, in 4
 *       layers, for attn_v / ffn_down of layers 2 and 3), and the load's
 *       weights note names them.
 *   bf16_is_not_f32          the f32 and bf16 files of one seed differ by
 *       more than that bound (the comparison sees bf16 rounding) and by
 *       less than 5e-2 (one model, rounded).
 *   same_seed_same_bytes     two writes of a seed are equal byte for
 *       byte; another seed differs.
 *   q4_k_m_rule_8b           --plan of the 8b shape: Q6_K attn_v and
 *       ffn_down exactly in layers 0-3, 6, 9, ..., 27, 28-31 (llama.cpp's
 *       use_more_bits for 32 layers), output Q6_K, the rest Q4_K.
 *   bad_command_lines        exit 2 naming the option (q4_k_m on tiny's
 *       64-value rows, no --out, --plan with --out, an unknown form); exit
 *       1 for a missing directory, a directory as the file, and a write
 *       that fails part way (a file size limit standing in for a full
 *       disk), leaving neither FILE nor FILE.part behind.
 * WRITE_GGUF names the writer (tests/meson.build). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "quant.h"
#include "serve.h"
#include "serve_check.h"
#include "serve_tune_env.h"

enum { PROMPT = 8, STEPS = 8, MAX_ARGS = 16 };
static const double LOGIT_BOUND = 1e-4, MARGIN = 1e-3;
/* with the int8 GEMV (serve.gemv_q8=1) for the decode steps: the
 * activations rounded to 8 bits a value (tests/test_gemv_quant.c bounds
 * one product); 0.017 measured on small q4_k_m (PoCL) */
static const double Q8_LOGIT_BOUND = 5e-2, Q8_MARGIN = 1e-1;

static char dir[256]; /* a fresh directory per run */
static const char *writer;

/* Runs the writer with args (NULL-terminated), stdout and stderr into
 * dir/log; fsize > 0 limits the files it may write (RLIMIT_FSIZE, SIGXFSZ
 * ignored: write(2) fails with EFBIG as it would with ENOSPC). Returns the
 * exit status (-1: killed). */
static int run_writer(rlim_t fsize, const char *const *args) {
    char log[512];
    snprintf(log, sizeof log, "%s/log", dir);
    const char *argv[MAX_ARGS + 2] = {writer};
    int n = 1;
    for (; args[n - 1] && n <= MAX_ARGS; n++) argv[n] = args[n - 1];
    argv[n] = NULL;
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(126);
        dup2(fd, 1), dup2(fd, 2), close(fd);
        if (fsize) {
            struct rlimit rl = {fsize, fsize};
            signal(SIGXFSZ, SIG_IGN);
            if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(126);
        }
        execv(writer, (char *const *)argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) assert_int_equal(errno, EINTR);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The last run's output (static buffer). */
static const char *writer_log(void) {
    static char buf[4096];
    char log[512];
    snprintf(log, sizeof log, "%s/log", dir);
    FILE *f = fopen(log, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    return buf;
}

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

/* Writes dir/name: shape, form, seed ("1"), dequantized or not. */
static void write_file(const char *name, const char *shape, const char *form, const char *seed,
                       int dequantized) {
    char path[512];
    path_of(path, sizeof path, name);
    const char *args[] = {"--out", path, "--shape", shape, "--form", form, "--seed", seed,
                          dequantized ? "--dequantized" : NULL, NULL};
    int rc = run_writer(0, args);
    if (rc != 0) fail_msg("write_gguf %s %s -> %d: %s", shape, form, rc, writer_log());
}

typedef struct run {
    int vocab;
    float *logits;                 /* [STEPS + 1][vocab]: the prompt's last, then each step's */
    int32_t tokens[STEPS + 1];     /* each row's argmax */
    char note[160];
} run;

/* The prompt, then STEPS greedy steps each fed feed[i] (NULL: its own
 * argmax), on the default device with the tiny preset's block size, f32
 * projections. */
static void run_file(lazyattn_context *ctx, const char *name, const int32_t *feed, run *out) {
    char path[512];
    path_of(path, sizeof path, name);
    serve_gguf *g = NULL;
    CHECK(serve_gguf_open(path, &g));
    serve_model_config cfg;
    serve_model_config_preset(&cfg, "tiny");
    CHECK(serve_gguf_model_config(g, &cfg));
    cfg.gemm = SERVE_GEMM_F32; /* the files' values in f32 on any device (NVIDIA's auto: bf16) */
    serve_model *m = NULL;
    CHECK(serve_model_create(ctx, &cfg, &m));
    CHECK(serve_model_load_gguf(m, g));
    snprintf(out->note, sizeof out->note, "%s", serve_model_weights_note(m));
    serve_gguf_close(g);
    const int n = PROMPT + STEPS, bs = cfg.block_size, nb = (n + bs - 1) / bs, V = cfg.vocab;
    lazyattn_pool_config pc;
    serve_model_pool_config(&cfg, (uint64_t)nb * (uint64_t)bs * serve_model_kv_bytes_per_token(&cfg), &pc);
    lazyattn_pool *pool = NULL;
    CHECK(lazyattn_pool_create(ctx, &pc, &pool));
    int32_t blocks[PROMPT + STEPS], slots[PROMPT + STEPS], pos[PROMPT + STEPS], tok[PROMPT + STEPS];
    uint64_t table[PROMPT + STEPS];
    CHECK(lazyattn_pool_alloc(pool, nb, blocks));
    for (int i = 0; i < n; i++) {
        pos[i] = i;
        slots[i] = blocks[i / bs] * bs + i % bs;
        tok[i] = (int32_t)((i * 37 + 5) % V);
    }
    out->vocab = V;
    out->logits = malloc((size_t)(STEPS + 1) * (size_t)V * sizeof *out->logits);
    assert_non_null(out->logits);
    int32_t entry_pos[PROMPT + STEPS];
    for (int step = 0; step <= STEPS; step++) {
        int end = PROMPT + step; /* tokens written after this forward */
        int n_entries = (end + bs - 1) / bs;
        for (int e = 0; e < n_entries; e++) {
            CHECK(lazyattn_entry_pack(blocks[e], 0, end - e * bs < bs ? end - e * bs : bs, &table[e]));
            entry_pos[e] = e * bs;
        }
        int32_t next = -1;
        if (step == 0) {
            serve_prefill_args pa = {.n_tokens = PROMPT, .tokens = tok, .q_pos = pos,
                                     .slots = slots, .stored_pos = pos, .n_entries = n_entries,
                                     .table = table, .entry_pos = entry_pos, .want_logits = 1};
            CHECK(serve_model_prefill(m, pool, &pa, &next));
        } else {
            int t = end - 1;
            int32_t offsets[2] = {0, n_entries};
            serve_decode_args da = {1, &tok[t], &pos[t], &slots[t], &pos[t], offsets, table,
                                    entry_pos, n_entries, NULL};
            CHECK(serve_model_decode(m, pool, &da, &next));
        }
        CHECK(serve_model_read_logits(m, 1, out->logits + (size_t)step * (size_t)V));
        out->tokens[step] = next;
        if (step < STEPS) tok[end] = feed ? feed[step] : next;
    }
    lazyattn_pool_destroy(pool);
    serve_model_destroy(m);
}

/* Largest normalised error of a's logits against ref's, over every row. */
static double worst_error(const run *a, const run *ref) {
    double worst = 0.0;
    for (int s = 0; s <= STEPS; s++) {
        const float *x = a->logits + (size_t)s * (size_t)ref->vocab,
                    *r = ref->logits + (size_t)s * (size_t)ref->vocab;
        double num = 0, den = 0;
        for (int v = 0; v < ref->vocab; v++) {
            if (!isfinite(x[v]) || !isfinite(r[v])) return INFINITY;
            num += ((double)x[v] - r[v]) * ((double)x[v] - r[v]);
            den += (double)r[v] * r[v];
        }
        double e = den > 0 ? sqrt(num / den) : INFINITY;
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* ref's top-two gap at row s, relative to its largest |logit| */
static double top_gap(const run *ref, int s) {
    const float *r = ref->logits + (size_t)s * (size_t)ref->vocab;
    double a = -INFINITY, b = -INFINITY, mx = 0;
    for (int v = 0; v < ref->vocab; v++) {
        if (r[v] > a) b = a, a = r[v];
        else if (r[v] > b) b = r[v];
        if (fabs(r[v]) > mx) mx = fabs(r[v]);
    }
    return mx > 0 ? (a - b) / mx : 0;
}

static void free_run(run *r) { free(r->logits); }

/* The file's matrix types (ggml ids) against want(name). */
static void check_types(const char *name, uint32_t (*want)(const char *tensor)) {
    char path[512];
    path_of(path, sizeof path, name);
    serve_gguf *g = NULL;
    CHECK(serve_gguf_open(path, &g));
    serve_model_config cfg;
    serve_model_config_preset(&cfg, "tiny");
    CHECK(serve_gguf_model_config(g, &cfg));
    char t[96];
    for (int l = -1; l < cfg.n_layers; l++) {
        static const char *const per_layer[] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                                "ffn_gate", "ffn_up", "ffn_down"};
        for (int k = 0; k < (l < 0 ? 2 : 7); k++) {
            if (l < 0) snprintf(t, sizeof t, "%s", k ? "output.weight" : "token_embd.weight");
            else snprintf(t, sizeof t, "blk.%d.%s.weight", l, per_layer[k]);
            const serve_gguf_tensor *tt;
            CHECK(serve_gguf_find_tensor(g, t, &tt));
            if (tt->type != want(t))
                fail_msg("%s: %s is %s, want %s", name, t, serve_ggml_type_name(tt->type),
                         serve_ggml_type_name(want(t)));
        }
    }
    const serve_gguf_tensor *norm;
    CHECK(serve_gguf_find_tensor(g, "blk.0.attn_norm.weight", &norm));
    assert_int_equal(norm->type, SERVE_GGML_F32);
    serve_gguf_close(g);
}

static uint32_t want_bf16(const char *t) { (void)t; return SERVE_GGML_BF16; }
static uint32_t want_q8_0(const char *t) { (void)t; return SERVE_GGML_Q8_0; }
static uint32_t want_q4_k_m_small(const char *t) { /* 4 layers: use_more_bits holds for 2, 3 */
    if (!strcmp(t, "output.weight")) return SERVE_GGML_Q6_K;
    if ((strstr(t, ".attn_v.") || strstr(t, ".ffn_down.")) && (t[4] == '2' || t[4] == '3'))
        return SERVE_GGML_Q6_K;
    return SERVE_GGML_Q4_K;
}

static void test_forms_match_dequantized(void **state) {
    (void)state;
    lazyattn_context *ctx = NULL;
    if (lazyattn_context_create(NULL, &ctx) != 0) skip();
    static const struct {
        const char *shape, *form, *types;
        uint32_t (*want)(const char *);
        int q8;              /* the int8 GEMV for decode's one-row steps */
        double bound, margin; /* normalised logit error; top-two gap where greedy must agree */
    } cases[] = {{"tiny", "bf16", "BF16", want_bf16, 0, LOGIT_BOUND, MARGIN},
                 {"tiny", "q8_0", "kept quantized on the device: Q8_0", want_q8_0, 0,
                  LOGIT_BOUND, MARGIN},
                 {"small", "q4_k_m", "kept quantized on the device: Q4_K ×24, Q6_K ×5",
                  want_q4_k_m_small, 0, LOGIT_BOUND, MARGIN},
                 {"small", "q4_k_m", "kept quantized on the device: Q4_K ×24, Q6_K ×5",
                  want_q4_k_m_small, 1, Q8_LOGIT_BOUND, Q8_MARGIN}};
    const char *tune = getenv("LAZYATTN_TUNE");
    char *orig = tune ? strdup(tune) : NULL;
    assert_true(!tune || orig);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tune_env_set(orig, cases[i].q8 ? "serve.gemv_q8=1" : "serve.gemv_q8=0");
        char file[64], ref_file[64];
        snprintf(file, sizeof file, "%s_%s.gguf", cases[i].shape, cases[i].form);
        snprintf(ref_file, sizeof ref_file, "%s_%s_dequantized.gguf", cases[i].shape, cases[i].form);
        write_file(file, cases[i].shape, cases[i].form, "1", 0);
        write_file(ref_file, cases[i].shape, cases[i].form, "1", 1);
        check_types(file, cases[i].want);
        run ref, got;
        run_file(ctx, ref_file, NULL, &ref);
        run_file(ctx, file, ref.tokens, &got);
        if (!strstr(got.note, cases[i].types))
            fail_msg("%s: weights note \"%s\" does not name %s", file, got.note, cases[i].types);
        if (!strstr(ref.note, "F32")) fail_msg("%s: weights note \"%s\"", ref_file, ref.note);
        double err = worst_error(&got, &ref);
        printf("# %-22s%s vs its dequantized values: normalised logit error %.3g (%s)\n", file,
               cases[i].q8 ? " (int8 GEMV)" : "", err, got.note);
        if (!(err <= cases[i].bound))
            fail_msg("%s%s: normalised error %g > %g", file, cases[i].q8 ? " (int8 GEMV)" : "",
                     err, cases[i].bound);
        for (int s = 0; s <= STEPS; s++)
            if (got.tokens[s] != ref.tokens[s] && top_gap(&ref, s) > cases[i].margin)
                fail_msg("%s: step %d greedy token %d, the reference's %d", file, s,
                         (int)got.tokens[s], (int)ref.tokens[s]);
        /* the logits are those of a working model: finite, spread, not all one token */
        double lo = INFINITY, hi = -INFINITY;
        for (int v = 0; v < ref.vocab; v++) {
            lo = fmin(lo, ref.logits[v]);
            hi = fmax(hi, ref.logits[v]);
        }
        if (!(hi - lo > 1.0 && hi - lo < 1e3)) fail_msg("%s: logits span %g .. %g", file, lo, hi);
        free_run(&ref);
        free_run(&got);
    }
    tune_env_restore(orig);
    free(orig);
    lazyattn_context_destroy(ctx);
}

static void test_bf16_is_not_f32(void **state) {
    (void)state;
    lazyattn_context *ctx = NULL;
    if (lazyattn_context_create(NULL, &ctx) != 0) skip();
    write_file("tiny_f32.gguf", "tiny", "f32", "1", 0);
    write_file("tiny_bf16.gguf", "tiny", "bf16", "1", 0);
    run ref, got;
    run_file(ctx, "tiny_f32.gguf", NULL, &ref);
    run_file(ctx, "tiny_bf16.gguf", ref.tokens, &got);
    double err = worst_error(&got, &ref);
    printf("# tiny bf16 vs tiny f32 (one seed): normalised logit error %.3g\n", err);
    if (!(err > LOGIT_BOUND && err < 5e-2))
        fail_msg("bf16 vs f32: normalised error %g, want (%g, 5e-2)", err, LOGIT_BOUND);
    free_run(&ref);
    free_run(&got);
    lazyattn_context_destroy(ctx);
}

static int same_bytes(const char *a, const char *b) {
    char pa[512], pb[512];
    path_of(pa, sizeof pa, a);
    path_of(pb, sizeof pb, b);
    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
    assert_non_null(fa);
    assert_non_null(fb);
    int same = 1, ca, cb;
    do {
        ca = getc(fa), cb = getc(fb);
        same = ca == cb;
    } while (same && ca != EOF);
    fclose(fa), fclose(fb);
    return same;
}

static void test_same_seed_same_bytes(void **state) {
    (void)state;
    write_file("a.gguf", "small", "q4_k_m", "7", 0);
    write_file("b.gguf", "small", "q4_k_m", "7", 0);
    write_file("c.gguf", "small", "q4_k_m", "8", 0);
    assert_true(same_bytes("a.gguf", "b.gguf"));
    assert_false(same_bytes("a.gguf", "c.gguf"));
}

static void test_q4_k_m_rule_8b(void **state) {
    (void)state;
    const char *args[] = {"--plan", "--shape", "8b", "--form", "q4_k_m", NULL};
    assert_int_equal(run_writer(0, args), 0);
    char log[512];
    snprintf(log, sizeof log, "%s/log", dir);
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    /* llama.cpp's 8B Q4_K_M: Q6_K in 16 of the 32 layers */
    static const int q6[] = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
    char line[256], name[96], type[16];
    int n_matrices = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%95s %15s [", name, type) != 2 || !strstr(line, "[")) continue;
        if (strstr(name, "_norm") || !strcmp(name, "rope_freqs.weight")) {
            assert_string_equal(type, "F32");
            continue;
        }
        n_matrices++;
        const char *want = "Q4_K";
        int layer = -1;
        if (!strcmp(name, "output.weight")) want = "Q6_K";
        else if (sscanf(name, "blk.%d.", &layer) == 1 && (strstr(name, ".attn_v.") || strstr(name, ".ffn_down.")))
            for (size_t k = 0; k < sizeof q6 / sizeof q6[0]; k++)
                if (q6[k] == layer) want = "Q6_K";
        if (strcmp(type, want) != 0) fail_msg("8b q4_k_m: %s is %s, want %s", name, type, want);
    }
    fclose(f);
    assert_int_equal(n_matrices, 2 + 32 * 7);
}

static int exists(const char *name) {
    char p[512];
    path_of(p, sizeof p, name);
    struct stat st;
    return stat(p, &st) == 0;
}

static void expect(int rc_want, const char *needle, const char *const *args) {
    int rc = run_writer(0, args);
    const char *log = writer_log();
    if (rc != rc_want || !strstr(log, needle))
        fail_msg("write_gguf %s %s ...: exit %d (want %d), output \"%s\" (want \"%s\")", args[0],
                 args[1] ? args[1] : "", rc, rc_want, log, needle);
}

static void test_bad_command_lines(void **state) {
    (void)state;
    char p[512], missing[512];
    path_of(p, sizeof p, "x.gguf");
    path_of(missing, sizeof missing, "no-such-dir/x.gguf");
    {
        const char *a[] = {"--out", p, "--form", "q4_k_m", NULL};
        expect(2, "256-value blocks", a);
    }
    {
        const char *a[] = {"--form", "q8_0", NULL};
        expect(2, "--out", a);
    }
    {
        const char *a[] = {"--plan", "--out", p, NULL};
        expect(2, "--plan", a);
    }
    {
        const char *a[] = {"--out", p, "--form", "q5_k", NULL};
        expect(2, "--form", a);
    }
    {
        const char *a[] = {"--out", missing, NULL};
        expect(1, "cannot create", a);
    }
    {
        const char *a[] = {"--out", dir, NULL}; /* a directory: written beside it, never renamed */
        expect(1, "cannot rename", a);
    }
    char part[600];
    snprintf(part, sizeof part, "%s.part", dir);
    struct stat st;
    assert_int_not_equal(stat(part, &st), 0);
    assert_false(exists("x.gguf"));
    /* a write that fails part way: 1 MiB allowed, the small f32 file is 12.5 MiB */
    const char *a[] = {"--out", p, "--shape", "small", "--form", "f32", NULL};
    int rc = run_writer(1 << 20, a);
    const char *log = writer_log();
    if (rc != 1 || !strstr(log, "failed after") || !strstr(log, "removed"))
        fail_msg("a write past the size limit: exit %d, \"%s\"", rc, log);
    assert_false(exists("x.gguf"));
    assert_false(exists("x.gguf.part"));
}

static int group_setup(void **state) {
    (void)state;
    writer = getenv("WRITE_GGUF");
    if (!writer || !*writer) {
        fprintf(stderr, "WRITE_GGUF must name bench/serve/write_gguf\n");
        return -1;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/lazyattn-write-gguf-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(dir) ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    static const char *const names[] = {
        "log", "tiny_bf16.gguf", "tiny_bf16_dequantized.gguf", "tiny_q8_0.gguf",
        "tiny_q8_0_dequantized.gguf", "small_q4_k_m.gguf", "small_q4_k_m_dequantized.gguf",
        "tiny_f32.gguf", "a.gguf", "b.gguf", "c.gguf"};
    char p[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        path_of(p, sizeof p, names[i]);
        remove(p);
    }
    rmdir(dir);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forms_match_dequantized),
        cmocka_unit_test(test_bf16_is_not_f32),
        cmocka_unit_test(test_same_seed_same_bytes),
        cmocka_unit_test(test_q4_k_m_rule_8b),
        cmocka_unit_test(test_bad_command_lines),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
