/* SPDX-License-Identifier: Apache-2.0 */
/* serve/gguf.c: a GGUF v3 file written by the test itself (a tiny llama
 * with f32 and f16 tensors) read back, then malformed variants: every
 * truncation, bad magic and version, unsupported tensor types, lengths and
 * counts past the end, misaligned or out-of-file tensors. Each must give a
 * status and a message, never a crash (run under valgrind/ASan to check
 * leaks: every path frees what it took). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "serve.h"

/* ---- a small GGUF writer ---- */

typedef struct gbuf {
    unsigned char *p;
    size_t n, cap;
} gbuf;

static void put(gbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_u32(gbuf *b, uint32_t v) {
    unsigned char c[4] = {v & 255, (v >> 8) & 255, (v >> 16) & 255, v >> 24};
    put(b, c, 4);
}
static void put_u64(gbuf *b, uint64_t v) {
    unsigned char c[8];
    for (int i = 0; i < 8; i++) c[i] = (unsigned char)(v >> (8 * i));
    put(b, c, 8);
}
static void put_str(gbuf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void kv_u32(gbuf *b, const char *k, uint32_t v) {
    put_str(b, k);
    put_u32(b, 4);
    put_u32(b, v);
}
static void kv_str(gbuf *b, const char *k, const char *s) {
    put_str(b, k);
    put_u32(b, 8);
    put_str(b, s);
}

/* Tiny llama: 1 layer, hidden 32, 2 heads of 16, 1 KV head, FFN 48, vocab 20. */
enum { T_HIDDEN = 32, T_HEADS = 2, T_KV = 1, T_HD = 16, T_FFN = 48, T_VOCAB = 20 };

typedef struct tspec {
    const char *name;
    uint64_t d0, d1; /* d1 = 1: one dimension */
    uint32_t type;
} tspec;

static const tspec tensors[] = {
    {"token_embd.weight", T_HIDDEN, T_VOCAB, 1},
    {"output_norm.weight", T_HIDDEN, 1, 0},
    {"output.weight", T_HIDDEN, T_VOCAB, 1},
    {"blk.0.attn_norm.weight", T_HIDDEN, 1, 0},
    {"blk.0.attn_q.weight", T_HIDDEN, T_HEADS * T_HD, 1},
    {"blk.0.attn_k.weight", T_HIDDEN, T_KV * T_HD, 1},
    {"blk.0.attn_v.weight", T_HIDDEN, T_KV * T_HD, 0},
    {"blk.0.attn_output.weight", T_HEADS * T_HD, T_HIDDEN, 1},
    {"blk.0.ffn_norm.weight", T_HIDDEN, 1, 0},
    {"blk.0.ffn_gate.weight", T_HIDDEN, T_FFN, 1},
    {"blk.0.ffn_up.weight", T_HIDDEN, T_FFN, 1},
    {"blk.0.ffn_down.weight", T_FFN, T_HIDDEN, 0},
};
#define N_TENSORS (int)(sizeof tensors / sizeof tensors[0])

/* Value i of tensor t, exactly representable in f16 (so f16 and f32
 * tensors read back exactly): norms 1 + k/512, projections k/512, embeddings
 * k/64, k in [-64, 64). */
static float tvalue(int t, uint64_t i) {
    int k = (int)((i * 37 + (uint64_t)t * 11 + i / 7) % 128) - 64;
    if (tensors[t].d1 == 1) return 1.0f + (float)k / 512.0f;
    return t == 0 ? (float)k / 64.0f : (float)k / 512.0f;
}

static uint16_t f16_bits(float f) {
    /* exact for the values above: sign, exponent, 10-bit mantissa */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int e = (int)((x >> 23) & 255) - 127 + 15;
    if ((x & 0x7FFFFFFF) == 0) return (uint16_t)sign;
    return (uint16_t)(sign | (uint32_t)e << 10 | ((x >> 13) & 0x3FF));
}

/* A metadata value written in place of the default one (or added, for a
 * key the writer does not write): GGUF type 4 u32, 5 i32, 6 f32, 8 string
 * ("text"), 12 f64. */
typedef struct kv_override {
    const char *key;
    uint32_t type;
    double value;
} kv_override;

#define N_DEFAULT_KEYS 12
static const char *const default_keys[N_DEFAULT_KEYS] = {
    "general.architecture", "general.alignment", "llama.block_count", "llama.embedding_length",
    "llama.feed_forward_length", "llama.attention.head_count", "llama.attention.head_count_kv",
    "llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon", "tokenizer.ggml.tokens",
    "test.u32s", "general.name"};

static int is_default_key(const char *k) {
    for (int i = 0; i < N_DEFAULT_KEYS; i++)
        if (!strcmp(default_keys[i], k)) return 1;
    return 0;
}

typedef struct corrupt {
    kv_override kv[2];        /* hostile metadata values */
    int dup_key;              /* llama.block_count written twice */
    int dup_tensor;           /* the last tensor named like the one before it */
    int overlap;              /* output_norm.weight at token_embd.weight's offset */
    int nul_key;              /* a key with a NUL byte inside */
    int nan_weight;           /* output_norm.weight element 3 is NaN */
    uint32_t version;         /* 0: 3 */
    int bad_magic;
    uint32_t q_type;          /* type of attn_q (default 1 = F16) */
    int misalign;             /* first tensor offset + 1 */
    int huge_string;          /* a metadata string length past the file */
    uint64_t n_kv_override;   /* 0: real count */
    uint32_t alignment;       /* 0: 32 */
    int five_dims;
    int past_end;             /* last tensor offset moved past the data */
    int unknown_kv_type;
} corrupt;

static void kv_value(gbuf *b, uint32_t type, double v) {
    if (type == 4 || type == 5) {
        put_u32(b, type == 4 ? (uint32_t)v : (uint32_t)(int32_t)v);
    } else if (type == 6) {
        float f = (float)v;
        uint32_t w;
        memcpy(&w, &f, 4);
        put_u32(b, w);
    } else if (type == 12) {
        uint64_t w;
        memcpy(&w, &v, 8);
        put_u64(b, w);
    } else {
        put_str(b, "text");
    }
}

/* Key k of GGUF type with value v, or the override c names for k. */
static void kv_num(gbuf *b, const corrupt *c, const char *k, uint32_t type, double v) {
    for (int i = 0; i < 2; i++)
        if (c->kv[i].key && !strcmp(c->kv[i].key, k)) type = c->kv[i].type, v = c->kv[i].value;
    put_str(b, k);
    put_u32(b, type);
    kv_value(b, type, v);
}

/* Writes the file and returns its size. */
static size_t write_gguf(const char *path, const corrupt *c) {
    gbuf b = {0};
    put(&b, c->bad_magic ? "GGUX" : "GGUF", 4);
    put_u32(&b, c->version ? c->version : 3);
    put_u64(&b, N_TENSORS);
    uint32_t align = c->alignment ? c->alignment : 32;
    int n_kv = N_DEFAULT_KEYS + !!c->dup_key + !!c->nul_key;
    for (int i = 0; i < 2; i++) n_kv += c->kv[i].key && !is_default_key(c->kv[i].key);
    put_u64(&b, c->n_kv_override ? c->n_kv_override : (uint64_t)n_kv);
    kv_str(&b, "general.architecture", "llama");
    kv_u32(&b, "general.alignment", align);
    kv_num(&b, c, "llama.block_count", 4, 1);
    kv_num(&b, c, "llama.embedding_length", 4, T_HIDDEN);
    kv_num(&b, c, "llama.feed_forward_length", 4, T_FFN);
    kv_num(&b, c, "llama.attention.head_count", 4, T_HEADS);
    kv_num(&b, c, "llama.attention.head_count_kv", 4, T_KV);
    kv_num(&b, c, "llama.rope.freq_base", 6, 10000.0f);
    kv_num(&b, c, "llama.attention.layer_norm_rms_epsilon", 6, 1e-6f);
    for (int i = 0; i < 2; i++)
        if (c->kv[i].key && !is_default_key(c->kv[i].key))
            kv_num(&b, c, c->kv[i].key, c->kv[i].type, c->kv[i].value);
    if (c->dup_key) kv_u32(&b, "llama.block_count", 1);
    if (c->nul_key) {
        put_u64(&b, 9);
        put(&b, "llama.x\0y", 9);
        put_u32(&b, 4);
        put_u32(&b, 1);
    }
    /* an array of strings (like a tokenizer) and of u32, skipped */
    put_str(&b, "tokenizer.ggml.tokens");
    put_u32(&b, 9);
    put_u32(&b, 8);
    put_u64(&b, 3);
    put_str(&b, "a");
    put_str(&b, "bc");
    put_str(&b, "");
    put_str(&b, "test.u32s");
    put_u32(&b, 9);
    put_u32(&b, 4);
    put_u64(&b, 2);
    put_u32(&b, 7);
    put_u32(&b, 8);
    if (c->huge_string) {
        put_str(&b, "general.name");
        put_u32(&b, c->unknown_kv_type ? 99 : 8);
        put_u64(&b, (uint64_t)1 << 62);
    } else {
        put_str(&b, "general.name");
        put_u32(&b, c->unknown_kv_type ? 99 : 8);
        put_str(&b, "tiny test llama");
    }
    uint64_t off = 0;
    uint64_t offsets[N_TENSORS];
    for (int t = 0; t < N_TENSORS; t++) {
        const tspec *s = &tensors[t];
        uint32_t type = strcmp(s->name, "blk.0.attn_q.weight") == 0 && c->q_type ? c->q_type : s->type;
        put_str(&b, c->dup_tensor && t == N_TENSORS - 1 ? tensors[t - 1].name : s->name);
        int nd = c->five_dims && t == 2 ? 5 : s->d1 > 1 ? 2 : 1;
        put_u32(&b, (uint32_t)nd);
        put_u64(&b, s->d0);
        if (nd >= 2) put_u64(&b, s->d1);
        for (int d = 2; d < nd; d++) put_u64(&b, 1);
        put_u32(&b, type);
        offsets[t] = off;
        uint64_t o = off + (c->misalign && t == 0 ? 1 : 0);
        if (c->past_end && t == N_TENSORS - 1) o += 4096;
        if (c->overlap && t == 1) o = offsets[0];
        put_u64(&b, o);
        uint64_t bytes = s->d0 * s->d1 * (s->type == 0 ? 4 : 2);
        off = (off + bytes + align - 1) / align * align;
    }
    while (b.n % align) put(&b, "\0", 1);
    size_t data_start = b.n;
    for (int t = 0; t < N_TENSORS; t++) {
        const tspec *s = &tensors[t];
        while (b.n < data_start + offsets[t]) put(&b, "\0", 1);
        for (uint64_t i = 0; i < s->d0 * s->d1; i++) {
            float v = tvalue(t, i);
            if (c->nan_weight && t == 1 && i == 3) v = NAN;
            if (s->type == 0) {
                put(&b, &v, 4);
            } else {
                uint16_t h = f16_bits(v);
                put(&b, &h, 2);
            }
        }
    }
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.p, 1, b.n, f), b.n);
    fclose(f);
    size_t n = b.n;
    free(b.p);
    return n;
}

/* A scratch file in the temporary directory, never in the source tree. */
static const char *tmp_path(void) {
    static char path[512];
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/test_gguf_%d.gguf", dir && *dir ? dir : "/tmp", (int)getpid());
    return path;
}

/* ---- tests ---- */

static void test_read_back(void **state) {
    (void)state;
    corrupt c = {0};
    write_gguf(tmp_path(), &c);
    serve_gguf *g = NULL;
    int st = serve_gguf_open(tmp_path(), &g);
    if (st) print_error("%s\n", serve_last_error());
    assert_int_equal(st, 0);
    assert_int_equal(serve_gguf_version(g), 3);
    assert_int_equal(serve_gguf_n_tensors(g), N_TENSORS);
    int64_t v;
    double f;
    const char *s;
    assert_int_equal(serve_gguf_get_int(g, "llama.block_count", &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(serve_gguf_get_float(g, "llama.rope.freq_base", &f), 0);
    assert_true(f == 10000.0);
    assert_int_equal(serve_gguf_get_string(g, "general.name", &s), 0);
    assert_string_equal(s, "tiny test llama");
    assert_int_equal(serve_gguf_get_int(g, "general.name", &v), LAZYATTN_STATUS_FORMAT);
    assert_int_equal(serve_gguf_get_int(g, "no.such.key", &v), LAZYATTN_STATUS_NOT_FOUND);

    for (int t = 0; t < N_TENSORS; t++) {
        const serve_gguf_tensor *ti;
        assert_int_equal(serve_gguf_find_tensor(g, tensors[t].name, &ti), 0);
        assert_int_equal(ti->type, tensors[t].type);
        assert_int_equal(ti->dims[0], tensors[t].d0);
        assert_int_equal(ti->offset % 32, 0);
        uint64_t n = tensors[t].d0 * tensors[t].d1;
        float *x = malloc(n * sizeof *x);
        assert_non_null(x);
        assert_int_equal(serve_gguf_read_f32(g, ti, x, n), 0);
        for (uint64_t i = 0; i < n; i++)
            if (x[i] != tvalue(t, i)) fail_msg("%s[%llu] = %g, want %g", tensors[t].name,
                                               (unsigned long long)i, x[i], tvalue(t, i));
        assert_int_equal(serve_gguf_read_f32(g, ti, x, n - 1), LAZYATTN_STATUS_INVALID_ARGUMENT);
        free(x);
    }
    const serve_gguf_tensor *ti;
    assert_int_equal(serve_gguf_find_tensor(g, "blk.9.attn_q.weight", &ti),
                     LAZYATTN_STATUS_NOT_FOUND);

    serve_model_config cfg;
    assert_int_equal(serve_model_config_preset(&cfg, "tiny"), 0);
    st = serve_gguf_model_config(g, &cfg);
    if (st) print_error("%s\n", serve_last_error());
    assert_int_equal(st, 0);
    assert_int_equal(cfg.n_layers, 1);
    assert_int_equal(cfg.hidden, T_HIDDEN);
    assert_int_equal(cfg.n_heads, T_HEADS);
    assert_int_equal(cfg.n_kv_heads, T_KV);
    assert_int_equal(cfg.head_dim, T_HD);
    assert_int_equal(cfg.ffn, T_FFN);
    assert_int_equal(cfg.vocab, T_VOCAB);
    assert_int_equal(cfg.tied_embeddings, 0);
    assert_int_equal(cfg.rope.style, LAZYATTN_ROPE_GPTJ);
    assert_true(cfg.rms_eps == 1e-6f);
    serve_gguf_close(g);
    serve_gguf_close(NULL);
    remove(tmp_path());
}

/* ---- a float64 CPU forward of the tiny llama, from the same values ---- */

/* W of tensor t is [d1, d0] row-major (out, in): y[out] = sum_in W[out][in] x[in]. */
static void ref_matvec(int t, const double *x, double *y) {
    uint64_t d0 = tensors[t].d0, d1 = tensors[t].d1;
    for (uint64_t o = 0; o < d1; o++) {
        double acc = 0;
        for (uint64_t i = 0; i < d0; i++) acc += (double)tvalue(t, o * d0 + i) * x[i];
        y[o] = acc;
    }
}

static void ref_rmsnorm(int t, const double *x, double *y, double eps) {
    double ss = 0;
    for (int i = 0; i < T_HIDDEN; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / T_HIDDEN + eps);
    for (int i = 0; i < T_HIDDEN; i++) y[i] = x[i] * r * (double)tvalue(t, (uint64_t)i);
}

/* Logits of the last of n tokens (positions 0..n-1), via lazyattn's float64
 * reference attention. logits: [T_VOCAB] */
static void ref_forward(const serve_model_config *cfg, const int32_t *tokens, int n,
                        double *logits) {
    enum { NMAX = 8, QD = T_HEADS * T_HD, KVD = T_KV * T_HD };
    double x[NMAX][T_HIDDEN], h[T_HIDDEN], o[T_HIDDEN], g[T_FFN], u[T_FFN];
    float q[NMAX][QD], k[NMAX][KVD], v[NMAX][KVD];
    double att[NMAX * QD], tmp[QD];
    int32_t pos[NMAX];
    for (int t = 0; t < n; t++) {
        pos[t] = t;
        for (int i = 0; i < T_HIDDEN; i++) x[t][i] = tvalue(0, (uint64_t)tokens[t] * T_HIDDEN + i);
    }
    double eps = cfg->rms_eps;
    lazyattn_attention_config acfg;
    serve_model_attention_config(cfg, &acfg);
    acfg.dtype = LAZYATTN_DTYPE_F32;
    for (int t = 0; t < n; t++) {
        ref_rmsnorm(3, x[t], h, eps);
        ref_matvec(4, h, tmp);
        for (int i = 0; i < QD; i++) q[t][i] = (float)tmp[i];
        ref_matvec(5, h, tmp);
        for (int i = 0; i < KVD; i++) k[t][i] = (float)tmp[i];
        ref_matvec(6, h, tmp);
        for (int i = 0; i < KVD; i++) v[t][i] = (float)tmp[i];
    }
    lazyattn_reference_args ra = {n, n, &q[0][0], pos, &k[0][0], &v[0][0], pos, att, NULL};
    assert_int_equal(lazyattn_reference_attention(&acfg, &ra), 0);
    for (int t = 0; t < n; t++) {
        ref_matvec(7, att + (size_t)t * QD, o);
        for (int i = 0; i < T_HIDDEN; i++) x[t][i] += o[i];
        ref_rmsnorm(8, x[t], h, eps);
        ref_matvec(9, h, g);
        ref_matvec(10, h, u);
        for (int i = 0; i < T_FFN; i++) g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
        ref_matvec(11, g, o);
        for (int i = 0; i < T_HIDDEN; i++) x[t][i] += o[i];
    }
    ref_rmsnorm(1, x[n - 1], h, eps);
    ref_matvec(2, h, logits);
}

/* The loader puts the tensors on a device and the model's logits match a
 * float64 CPU forward of the same weights (GPT-J RoPE, GQA, SwiGLU). */
static void test_load_on_device(void **state) {
    (void)state;
    corrupt c = {0};
    write_gguf(tmp_path(), &c);
    serve_gguf *g = NULL;
    assert_int_equal(serve_gguf_open(tmp_path(), &g), 0);
    serve_model_config cfg;
    serve_model_config_preset(&cfg, "tiny");
    assert_int_equal(serve_gguf_model_config(g, &cfg), 0);
    cfg.kv_dtype = LAZYATTN_DTYPE_F32; /* compare without fp16 rounding */
    cfg.gemm = SERVE_GEMM_F32;         /* and f32 projections (auto: bf16 on NVIDIA) */
    lazyattn_context *ctx = NULL;
    if (lazyattn_context_create(NULL, &ctx) != 0) {
        serve_gguf_close(g);
        remove(tmp_path());
        skip();
    }
    serve_model *m = NULL;
    int st = serve_model_create(ctx, &cfg, &m);
    if (st) print_error("%s\n", serve_last_error());
    assert_int_equal(st, 0);
    st = serve_model_load_gguf(m, g);
    if (st) print_error("%s\n", serve_last_error());
    assert_int_equal(st, 0);

    /* one 5-token sequence in one block */
    lazyattn_pool_config pc;
    serve_model_pool_config(&cfg, 1 << 20, &pc);
    lazyattn_pool *pool = NULL;
    assert_int_equal(lazyattn_pool_create(ctx, &pc, &pool), 0);
    int32_t block;
    assert_int_equal(lazyattn_pool_alloc(pool, 1, &block), 0);
    int32_t tokens[5] = {1, 7, 3, 19, 0}, pos[5], slots[5];
    for (int i = 0; i < 5; i++) pos[i] = i, slots[i] = block * cfg.block_size + i;
    uint64_t entry;
    int32_t entry_pos = 0;
    assert_int_equal(lazyattn_entry_pack(block, 0, 5, &entry), 0);
    serve_prefill_args a = {5, tokens, pos, slots, pos, 1, &entry, &entry_pos, 1, NULL, 0, NULL, NULL, 0};
    int32_t next = -1;
    st = serve_model_prefill(m, pool, &a, &next);
    if (st) print_error("%s\n", serve_last_error());
    assert_int_equal(st, 0);
    assert_true(next >= 0 && next < T_VOCAB);
    float logits[T_VOCAB];
    assert_int_equal(serve_model_read_logits(m, 1, logits), 0);
    int best = 0;
    for (int i = 1; i < T_VOCAB; i++)
        if (logits[i] > logits[best]) best = i;
    assert_int_equal(best, next);
    double want[T_VOCAB];
    ref_forward(&cfg, tokens, 5, want);
    double err = lazyattn_normalised_error(logits, want, T_VOCAB);
    printf("# GGUF model on the device vs float64 CPU forward: normalised error %.3g\n", err);
    assert_true(err < 1e-4);

    /* a token outside the vocabulary is refused before any work */
    tokens[2] = T_VOCAB;
    assert_int_equal(serve_model_prefill(m, pool, &a, &next), LAZYATTN_STATUS_INVALID_ARGUMENT);

    lazyattn_pool_destroy(pool);
    serve_model_destroy(m);
    lazyattn_context_destroy(ctx);
    serve_gguf_close(g);
    remove(tmp_path());
}

static void expect_open(int want, const char *needle) {
    serve_gguf *g = (serve_gguf *)1;
    int st = serve_gguf_open(tmp_path(), &g);
    if (st != want) print_error("status %d (%s), want %d\n", st, serve_last_error(), want);
    assert_int_equal(st, want);
    assert_null(g);
    if (needle && !strstr(serve_last_error(), needle))
        fail_msg("message \"%s\" lacks \"%s\"", serve_last_error(), needle);
}

static void test_malformed(void **state) {
    (void)state;
    corrupt c;
    memset(&c, 0, sizeof c);
    c.bad_magic = 1;
    write_gguf(tmp_path(), &c);
    expect_open(LAZYATTN_STATUS_FORMAT, "magic");

    memset(&c, 0, sizeof c);
    c.version = 1;
    write_gguf(tmp_path(), &c);
    expect_open(LAZYATTN_STATUS_FORMAT, "version");
    c.version = 0x03000000; /* big-endian file */
    write_gguf(tmp_path(), &c);
    expect_open(LAZYATTN_STATUS_FORMAT, "version");

    memset(&c, 0, sizeof c);
    c.q_type = 12; /* Q4_K: a row of 32 values is an eighth of a block */
    write_gguf(tmp_path(), &c);
    expect_open(LAZYATTN_STATUS_FORMAT, "not a whole number of Q4_K blocks");
    c.q_type = 10; /* Q2_K: not converted here (serve/quant.c; tests/test_quant.c) */
    write_gguf(tmp_path(), &c);
    expect_open(LAZYATTN_STATUS_FORMAT, "type Q2_K (10) not supported");

    memset(&c, 0, sizeof c);
    c.misalign = 1;
    write_gguf(tmp_path(), &c);
    expect_open(LAZYATTN_STATUS_FORMAT, "alignment");

    memset(&c, 0, sizeof c);
    c.huge_string = 1;
    write_gguf(tmp_path(), &c);
    expect_open(LAZYATTN_STATUS_FORMAT, "truncated");

    memset(&c, 0, sizeof c);
    c.n_kv_override = (uint64_t)1 << 60;
    write_gguf(tmp_path(), &c);
    expect_open(LAZYATTN_STATUS_FORMAT, "metadata");

    memset(&c, 0, sizeof c);
    c.alignment = 24;
    write_gguf(tmp_path(), &c);
    expect_open(LAZYATTN_STATUS_FORMAT, "alignment");

    memset(&c, 0, sizeof c);
    c.five_dims = 1;
    write_gguf(tmp_path(), &c);
    expect_open(LAZYATTN_STATUS_FORMAT, "dimensions");

    memset(&c, 0, sizeof c);
    c.past_end = 1;
    write_gguf(tmp_path(), &c);
    expect_open(LAZYATTN_STATUS_FORMAT, "past the end");

    memset(&c, 0, sizeof c);
    c.unknown_kv_type = 1;
    write_gguf(tmp_path(), &c);
    expect_open(LAZYATTN_STATUS_FORMAT, "unknown value type");

    remove(tmp_path());
    expect_open(LAZYATTN_STATUS_IO, "cannot open");
    assert_int_equal(serve_gguf_open(NULL, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
}

/* A header whose counts fit a (sparse) 1 TiB file but whose first entry is
 * bad: the loader must refuse the entry, not first allocate tables for
 * every counted entry (terabytes). */
static void test_huge_counts(void **state) {
    (void)state;
    for (int tensors = 0; tensors < 2; tensors++) {
        gbuf b = {0};
        put(&b, "GGUF", 4);
        put_u32(&b, 3);
        put_u64(&b, tensors ? (uint64_t)1 << 34 : 0); /* tensor infos */
        put_u64(&b, tensors ? 0 : (uint64_t)1 << 36); /* metadata entries */
        if (tensors) {
            put_str(&b, "t");
            put_u32(&b, 5); /* dimensions */
        } else {
            put_str(&b, "k");
            put_u32(&b, 99); /* value type */
        }
        FILE *f = fopen(tmp_path(), "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(b.p, 1, b.n, f), b.n);
        int sparse = ftruncate(fileno(f), (off_t)1 << 40) == 0;
        fclose(f);
        free(b.p);
        if (!sparse) {
            remove(tmp_path());
            skip(); /* the file system cannot hold a sparse 1 TiB file */
        }
        expect_open(LAZYATTN_STATUS_FORMAT, tensors ? "dimensions" : "unknown value type");
    }
    remove(tmp_path());
}

/* Every proper prefix of a valid file is refused with FORMAT. */
static void test_truncated(void **state) {
    (void)state;
    corrupt c = {0};
    size_t n = write_gguf(tmp_path(), &c);
    FILE *f = fopen(tmp_path(), "rb");
    assert_non_null(f);
    unsigned char *all = malloc(n);
    assert_non_null(all);
    assert_int_equal(fread(all, 1, n, f), n);
    fclose(f);
    for (size_t len = 0; len < n; len++) {
        f = fopen(tmp_path(), "wb");
        assert_non_null(f);
        fwrite(all, 1, len, f);
        fclose(f);
        serve_gguf *g = NULL;
        int st = serve_gguf_open(tmp_path(), &g);
        if (st != LAZYATTN_STATUS_FORMAT)
            fail_msg("prefix of %zu / %zu bytes: status %d (%s)", len, n, st, serve_last_error());
        assert_null(g);
    }
    free(all);
    remove(tmp_path());
}

/* Opens the file and reads the model's shape from it: status and message. */
static int open_and_configure(serve_model_config *cfg) {
    serve_gguf *g = NULL;
    serve_model_config_preset(cfg, "tiny");
    int st = serve_gguf_open(tmp_path(), &g);
    if (!st) {
        assert_non_null(g);
        st = serve_gguf_model_config(g, cfg);
    } else {
        assert_null(g);
    }
    serve_gguf_close(g);
    return st;
}

/* Values that parse but cannot be right: each file is refused with FORMAT
 * and a message naming the key (or tensor), at open or when the model's
 * shape is read from it. */
static void test_hostile_values(void **state) {
    (void)state;
    const double inf = INFINITY, nan = NAN;
    static const char *const EPS = "llama.attention.layer_norm_rms_epsilon",
                             *BASE = "llama.rope.freq_base", *FACTOR = "llama.rope.scaling.factor",
                             *CTX = "llama.rope.scaling.original_context_length",
                             *KV = "llama.attention.head_count_kv",
                             *DIMS = "llama.rope.dimension_count";
    struct {
        corrupt c;
        const char *needle;
    } cases[] = {
        {{.kv = {{EPS, 6, inf}}}, EPS},
        {{.kv = {{EPS, 6, -inf}}}, EPS},
        {{.kv = {{EPS, 6, nan}}}, EPS},
        {{.kv = {{EPS, 6, 0.0}}}, EPS},
        {{.kv = {{EPS, 6, -1e-5}}}, EPS},
        {{.kv = {{EPS, 6, 2.0}}}, EPS},
        {{.kv = {{EPS, 12, 1e-50}}}, EPS}, /* zero as a float */
        {{.kv = {{EPS, 12, 1e300}}}, EPS}, /* infinite as a float */
        {{.kv = {{EPS, 8, 0}}}, EPS},      /* a string */
        {{.kv = {{BASE, 6, inf}}}, BASE},
        {{.kv = {{BASE, 6, nan}}}, BASE},
        {{.kv = {{BASE, 6, 1.0}}}, BASE},
        {{.kv = {{BASE, 6, 0.5}}}, BASE},
        {{.kv = {{BASE, 6, -10000.0}}}, BASE},
        {{.kv = {{BASE, 12, 1e300}}}, BASE},
        {{.kv = {{BASE, 8, 0}}}, BASE},
        {{.kv = {{FACTOR, 6, inf}}}, FACTOR},
        {{.kv = {{FACTOR, 6, nan}}}, FACTOR},
        {{.kv = {{FACTOR, 6, 0.5}}}, FACTOR},
        {{.kv = {{FACTOR, 6, -8.0}}}, FACTOR},
        {{.kv = {{FACTOR, 6, 1e9}}}, FACTOR},
        {{.kv = {{FACTOR, 6, 8.0}, {CTX, 4, 0}}}, CTX},
        {{.kv = {{FACTOR, 6, 8.0}, {CTX, 5, -8192}}}, CTX},
        {{.kv = {{FACTOR, 6, 8.0}, {CTX, 6, 8192}}}, CTX}, /* a float */
        {{.kv = {{KV, 4, 0}}}, KV},
        {{.kv = {{KV, 4, 3}}}, KV},
        {{.kv = {{KV, 6, 1}}}, KV},
        {{.kv = {{DIMS, 4, 0}}}, DIMS},
        {{.kv = {{DIMS, 4, 7}}}, DIMS},
        {{.kv = {{DIMS, 4, 18}}}, DIMS},
        {{.kv = {{DIMS, 4, 8}}}, DIMS}, /* partial rotary */
        {{.kv = {{"llama.rope.scaling.type", 8, 0}}}, "llama.rope.scaling.type = \"text\""},
        {{.kv = {{"llama.rope.scaling.type", 4, 1}}}, "llama.rope.scaling.type"},
        {{.kv = {{"llama.vocab_size", 4, 21}}}, "llama.vocab_size"},
        {{.kv = {{"llama.attention.key_length", 4, 20}}}, "llama.attention.key_length"},
        {{.kv = {{"llama.attention.value_length", 4, 8}}}, "llama.attention.value_length"},
        {{.kv = {{"llama.expert_count", 4, 8}}}, "llama.expert_count"},
        {{.kv = {{"llama.logit_scale", 6, 0.5}}}, "llama.logit_scale"},
        {{.kv = {{"llama.block_count", 4, 0}}}, "llama.block_count"},
        {{.kv = {{"llama.block_count", 6, 1}}}, "llama.block_count"},
        {{.kv = {{"llama.block_count", 4, 2}}}, "blk.1.attn_norm.weight"}, /* no such layer */
        {{.kv = {{"llama.embedding_length", 4, 4000000}}}, "llama.embedding_length"},
        {{.kv = {{"llama.feed_forward_length", 4, 64}}}, "blk.0.ffn_gate.weight"},
        {{.kv = {{"llama.attention.head_count", 4, 4}}}, "llama.attention.head_count"}, /* d 8 */
        {{.dup_key = 1}, "llama.block_count appears twice"},
        {{.dup_tensor = 1}, "blk.0.ffn_up.weight appears twice"},
        {{.overlap = 1}, "overlap"},
        {{.nul_key = 1}, "NUL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_gguf(tmp_path(), &cases[i].c);
        serve_model_config cfg;
        int st = open_and_configure(&cfg);
        if (st != LAZYATTN_STATUS_FORMAT || !strstr(serve_last_error(), cases[i].needle))
            fail_msg("case %zu: status %d, message \"%s\", want FORMAT naming %s", i, st,
                     serve_last_error(), cases[i].needle);
        printf("# case %zu refused: %s\n", i, serve_last_error());
    }

    /* the same keys with sensible values are read as given: a factor
     * without llama.rope.scaling.type is linear scaling (llama.cpp's default) */
    corrupt ok = {.kv = {{FACTOR, 6, 8.0}, {CTX, 4, 4096}}};
    write_gguf(tmp_path(), &ok);
    serve_model_config cfg;
    int st = open_and_configure(&cfg);
    if (st) print_error("%s\n", serve_last_error());
    assert_int_equal(st, 0);
    assert_true(cfg.rope.linear_factor == 8.0);
    assert_true(cfg.rope.llama3_factor == 0.0);
    assert_int_equal(cfg.rope.n_freq_factors, 0);
    assert_true(cfg.rope.theta == 10000.0);
    corrupt one = {.kv = {{FACTOR, 6, 1.0}, {EPS, 12, 0.25}}}; /* factor 1: no scaling */
    write_gguf(tmp_path(), &one);
    assert_int_equal(open_and_configure(&cfg), 0);
    assert_true(cfg.rope.llama3_factor == 0.0 && cfg.rope.linear_factor == 0.0);
    assert_true(cfg.rms_eps == 0.25f);
    remove(tmp_path());
}

/* A NaN weight parses (the file is well formed) but is refused when the
 * weights are loaded, naming the tensor. */
static void test_nan_weight(void **state) {
    (void)state;
    corrupt c = {.nan_weight = 1};
    write_gguf(tmp_path(), &c);
    serve_gguf *g = NULL;
    assert_int_equal(serve_gguf_open(tmp_path(), &g), 0);
    serve_model_config cfg;
    serve_model_config_preset(&cfg, "tiny");
    assert_int_equal(serve_gguf_model_config(g, &cfg), 0);
    lazyattn_context *ctx = NULL;
    if (lazyattn_context_create(NULL, &ctx) != 0) {
        serve_gguf_close(g);
        remove(tmp_path());
        skip();
    }
    serve_model *m = NULL;
    assert_int_equal(serve_model_create(ctx, &cfg, &m), 0);
    int st = serve_model_load_gguf(m, g);
    assert_int_equal(st, LAZYATTN_STATUS_FORMAT);
    if (!strstr(serve_last_error(), "output_norm.weight") || !strstr(serve_last_error(), "nan"))
        fail_msg("message \"%s\" lacks the tensor or the value", serve_last_error());
    serve_model_destroy(m);
    lazyattn_context_destroy(ctx);
    serve_gguf_close(g);
    remove(tmp_path());
}

int main(void) {
    /* SERVE_TEST_FILTER=test_truncated etc. (e.g. host tests under valgrind) */
    if (getenv("SERVE_TEST_FILTER")) cmocka_set_test_filter(getenv("SERVE_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_back),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_hostile_values),
        cmocka_unit_test(test_nan_weight),
        cmocka_unit_test(test_load_on_device),
    };
    return cmocka_run_group_tests_name("gguf", tests, NULL, NULL);
}
