/* SPDX-License-Identifier: Apache-2.0 */
/* serve/'s GGUF tokenizer gives the ids Hugging Face `tokenizers` gives, on
 * vocabularies that tools/tokenizer_fixtures.py trained with it and wrote
 * as GGUF in llama.cpp's converter layout (tests/fixtures/tok_*.gguf; run
 * by hand, see there):
 *   tok_llama3  gpt2 + llama-bpe (Llama 3's regex, ignore_merges)
 *   tok_qwen2   gpt2 + qwen2 (first 1000 strings)
 *   tok_spm     llama: SentencePiece BPE by scores, byte fallback
 * over the strings of tokenizer_strings.bin (5000: scripts, CJK, combining
 * marks, digit and whitespace runs, emoji with ZWJ, special tokens and
 * pieces of them, the empty string), with special tokens parsed and not.
 * Every string decodes back to itself, through the streaming decoder whose
 * every chunk is whole UTF-8 characters. Then: BOS from the file's flag,
 * refusals (unknown model and pre-tokenizer named, a tokens array of the
 * wrong type or shorter than token_type, a merge of no tokens, a gpt2
 * token that is not byte-level, a truncated file, bad UTF-8 and ids),
 * runs of 200 000 bytes, and the chat templates against their texts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tokenizer.h"

/* ---- fixtures ---- */

static void fixture_path(char *out, size_t n, const char *name) {
    const char *d = getenv("LAZYATTN_FIXTURES");
    snprintf(out, n, "%s/%s", d ? d : "tests/fixtures", name);
}

static unsigned char *read_all(const char *name, size_t *size) {
    char path[1024];
    fixture_path(path, sizeof path, name);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (LAZYATTN_FIXTURES names the directory)", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return b;
}

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

typedef struct strings {
    unsigned char *blob;
    uint32_t n;
    const char **s;
    uint32_t *len;
} strings;

static strings load_strings(void) {
    strings S;
    size_t size;
    S.blob = read_all("tokenizer_strings.bin", &size);
    assert_true(size >= 12 && memcmp(S.blob, "LZTSTR1\0", 8) == 0);
    S.n = get_u32(S.blob + 8);
    S.s = malloc(S.n * sizeof *S.s);
    S.len = malloc(S.n * sizeof *S.len);
    size_t at = 12;
    for (uint32_t i = 0; i < S.n; i++) {
        assert_true(at + 4 <= size);
        S.len[i] = get_u32(S.blob + at);
        S.s[i] = (const char *)S.blob + at + 4;
        at += 4 + S.len[i];
        assert_true(at <= size);
    }
    assert_int_equal(at, size);
    return S;
}

static void free_strings(strings *S) {
    free(S->blob), free(S->s), free(S->len);
}

/* Expected ids: per string, with special tokens parsed, then without. */
typedef struct expected {
    unsigned char *blob;
    size_t size, at;
    uint32_t n;
} expected;

static size_t read_list(expected *E, int32_t *ids, size_t cap, const int32_t *same, size_t n_same) {
    assert_true(E->at + 2 <= E->size);
    unsigned count = E->blob[E->at] | (unsigned)E->blob[E->at + 1] << 8;
    E->at += 2;
    if (count == 0xFFFF) {
        memcpy(ids, same, n_same * sizeof *ids);
        return n_same;
    }
    assert_true(count <= cap);
    for (unsigned k = 0; k < count; k++) {
        uint32_t v = 0;
        for (int shift = 0;; shift += 7) {
            assert_true(E->at < E->size && shift < 32);
            unsigned char b = E->blob[E->at++];
            v |= (uint32_t)(b & 0x7F) << shift;
            if (!(b & 0x80)) break;
        }
        ids[k] = (int32_t)v;
    }
    return count;
}

static serve_tokenizer *open_tokenizer(const char *name) {
    char path[1024];
    fixture_path(path, sizeof path, name);
    serve_gguf *g;
    int st = serve_gguf_open(path, &g);
    if (st) fail_msg("%s: %s", path, serve_last_error());
    serve_tokenizer *t;
    st = serve_tokenizer_from_gguf(g, &t);
    if (st) fail_msg("%s: %s", path, serve_last_error());
    serve_gguf_close(g);
    return t;
}

static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return 0;
        i += k;
    }
    return 1;
}

static void print_escaped(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == '\\') printf("\\x%02x", c);
        else putchar(c);
    }
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    printf("  %s:", what);
    for (size_t k = 0; k < n; k++) printf(" %d", (int)ids[k]);
    printf("\n");
}

/* Decodes ids token by token; every chunk whole characters; *out the text. */
static size_t stream_decode(const serve_tokenizer *t, const int32_t *ids, size_t n, char *out) {
    serve_detokenizer d;
    serve_detokenizer_init(&d, SERVE_DETOK_SPECIAL);
    size_t cap = serve_tokenizer_decode_capacity(t), at = 0, m;
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(serve_tokenizer_decode_token(t, &d, ids[k], out + at, cap, &m), 0);
        assert_true(valid_utf8((const unsigned char *)out + at, m));
        at += m;
    }
    serve_detokenizer_flush(&d, out + at, 4, &m);
    assert_int_equal(m, 0); /* valid text leaves nothing unfinished */
    return at;
}

/* Every string's ids equal the fixture's, both ways; every string decodes
 * back. Returns the number of strings checked. */
static uint32_t check_vocabulary(const char *gguf_name, const char *ids_name, const strings *S) {
    serve_tokenizer *t = open_tokenizer(gguf_name);
    expected E = {0};
    E.blob = read_all(ids_name, &E.size);
    assert_true(E.size >= 12 && memcmp(E.blob, "LZTIDS1\0", 8) == 0);
    E.n = get_u32(E.blob + 8);
    E.at = 12;
    assert_true(E.n <= S->n && E.n >= 1000);
    enum { CAP = 4096 };
    static int32_t want[2][CAP];
    static char text[CAP * 64];
    uint32_t mismatches = 0, round_trip_failures = 0;
    uint64_t n_ids = 0;
    for (uint32_t i = 0; i < E.n; i++) {
        size_t n_want[2];
        n_want[0] = read_list(&E, want[0], CAP, NULL, 0);
        n_want[1] = read_list(&E, want[1], CAP, want[0], n_want[0]);
        for (int v = 0; v < 2; v++) {
            unsigned flags = v == 0 ? SERVE_TOKENIZE_PARSE_SPECIAL : 0;
            int32_t *ids;
            size_t n;
            int st = serve_tokenizer_encode(t, S->s[i], S->len[i], flags, &ids, &n);
            if (st) fail_msg("%s string %u: %s", gguf_name, i, serve_last_error());
            n_ids += n;
            if (n != n_want[v] || (n && memcmp(ids, want[v], n * sizeof *ids) != 0)) {
                if (mismatches++ < 5) {
                    printf("%s string %u (%s): \"", gguf_name, i, v ? "specials as text" : "specials");
                    print_escaped(S->s[i], S->len[i]);
                    printf("\"\n");
                    print_ids("serve", ids, n);
                    print_ids("Hugging Face", want[v], n_want[v]);
                }
            }
            assert_true(n * 64 < sizeof text);
            size_t m = stream_decode(t, ids, n, text);
            if (m != S->len[i] || memcmp(text, S->s[i], m) != 0) {
                if (round_trip_failures++ < 5) {
                    printf("%s string %u: decodes to \"", gguf_name, i);
                    print_escaped(text, m);
                    printf("\"\n");
                }
            }
            free(ids);
        }
    }
    assert_int_equal(E.at, E.size);
    printf("%s: %u strings x 2 (specials parsed / as text), %llu ids: %u mismatches, %u round-trip "
           "failures\n", gguf_name, E.n, (unsigned long long)n_ids, mismatches, round_trip_failures);
    assert_int_equal(mismatches, 0);
    assert_int_equal(round_trip_failures, 0);
    free(E.blob);
    serve_tokenizer_free(t);
    return E.n;
}

static void test_llama3_matches_hugging_face(void **state) {
    (void)state;
    strings S = load_strings();
    assert_true(S.n >= 5000);
    assert_int_equal(check_vocabulary("tok_llama3.gguf", "tok_llama3.ids", &S), S.n);
    free_strings(&S);
}

static void test_qwen2_matches_hugging_face(void **state) {
    (void)state;
    strings S = load_strings();
    check_vocabulary("tok_qwen2.gguf", "tok_qwen2.ids", &S);
    free_strings(&S);
}

static void test_spm_matches_hugging_face(void **state) {
    (void)state;
    strings S = load_strings();
    assert_int_equal(check_vocabulary("tok_spm.gguf", "tok_spm.ids", &S), S.n);
    free_strings(&S);
}

/* BOS where the file says, the ids of the special tokens, a chat prompt. */
static void test_special_tokens(void **state) {
    (void)state;
    serve_tokenizer *t = open_tokenizer("tok_llama3.gguf");
    serve_tokenizer_info info;
    serve_tokenizer_get_info(t, &info);
    assert_string_equal(info.model, "gpt2");
    assert_string_equal(info.pre, "llama-bpe");
    assert_true(info.add_bos && !info.add_eos);
    assert_int_equal(serve_tokenizer_token_type(t, info.bos), SERVE_TOKEN_CONTROL);
    assert_int_equal(serve_tokenizer_token_type(t, info.eot), SERVE_TOKEN_CONTROL);
    int32_t *ids, *plain;
    size_t n, n_plain;
    assert_int_equal(serve_tokenizer_encode(t, "Hi", 2, 0, &plain, &n_plain), 0);
    assert_int_equal(serve_tokenizer_encode(t, "Hi", 2, SERVE_TOKENIZE_ADD_SPECIAL, &ids, &n), 0);
    assert_int_equal(n, n_plain + 1);
    assert_int_equal(ids[0], info.bos);
    assert_memory_equal(ids + 1, plain, n_plain * sizeof *ids);
    free(ids), free(plain);
    assert_int_equal(serve_tokenizer_encode(t, "", 0, SERVE_TOKENIZE_ADD_SPECIAL, &ids, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], info.bos);
    free(ids);

    serve_chat_message msgs[] = {{"system", "Be brief."}, {"user", " Hi! "}};
    char *prompt;
    assert_int_equal(serve_chat_format(SERVE_CHAT_LLAMA3, msgs, 2, 1, &prompt), 0);
    assert_int_equal(serve_tokenizer_encode(t, prompt, strlen(prompt),
                                            SERVE_TOKENIZE_ADD_SPECIAL | SERVE_TOKENIZE_PARSE_SPECIAL,
                                            &ids, &n), 0);
    int n_eot = 0, n_header = 0;
    for (size_t k = 0; k < n; k++) {
        n_eot += ids[k] == info.eot;
        n_header += serve_tokenizer_token_type(t, ids[k]) == SERVE_TOKEN_CONTROL;
    }
    assert_int_equal(ids[0], info.bos);
    assert_int_equal(n_eot, 2);
    assert_int_equal(n_header, 1 + 3 * 2 + 2); /* BOS, 3 headers' two markers, 2 EOTs */
    char *back;
    size_t len;
    assert_int_equal(serve_tokenizer_decode(t, ids + 1, n - 1, SERVE_DETOK_SPECIAL, &back, &len), 0);
    assert_string_equal(back, prompt);
    free(back);
    /* without SERVE_DETOK_SPECIAL the control tokens write nothing */
    assert_int_equal(serve_tokenizer_decode(t, ids, n, 0, &back, &len), 0);
    assert_string_equal(back, "system\n\nBe brief.user\n\nHi!assistant\n\n");
    free(back);
    free(ids), free(prompt);
    serve_tokenizer_free(t);

    t = open_tokenizer("tok_spm.gguf");
    serve_tokenizer_get_info(t, &info);
    assert_string_equal(info.model, "llama");
    assert_int_equal(info.bos, 1);
    assert_int_equal(info.eos, 2);
    assert_int_equal(info.unk, 0);
    assert_int_equal(serve_tokenizer_encode(t, "Hi", 2, SERVE_TOKENIZE_ADD_SPECIAL, &ids, &n), 0);
    assert_true(n >= 2);
    assert_int_equal(ids[0], 1);
    free(ids);
    serve_tokenizer_free(t);
}

/* Bad input to encode / decode: a status and a message, nothing else. */
static void test_bad_input(void **state) {
    (void)state;
    serve_tokenizer *t = open_tokenizer("tok_llama3.gguf");
    int32_t *ids = (int32_t *)1;
    size_t n = 7;
    assert_int_equal(serve_tokenizer_encode(t, "ab\xC3(", 4, 0, &ids, &n),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(ids);
    assert_int_equal(n, 0);
    assert_non_null(strstr(serve_last_error(), "byte 2"));
    assert_int_equal(serve_tokenizer_encode(t, "\xED\xA0\x80", 3, 0, &ids, &n), /* a surrogate */
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(serve_tokenizer_encode(NULL, "a", 1, 0, &ids, &n),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    int32_t bad[] = {5, 1 << 20};
    char *text;
    size_t len;
    assert_int_equal(serve_tokenizer_decode(t, bad, 2, 0, &text, &len), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(text);
    serve_detokenizer d;
    serve_detokenizer_init(&d, 0);
    char small[2];
    assert_int_equal(serve_tokenizer_decode_token(t, &d, 5, small, sizeof small, &len),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    serve_tokenizer_free(t);
    serve_tokenizer_free(NULL);
}

/* Long runs (a document, not a chat line): whitespace, one letter, digits,
 * through both models, in bounded time and round trip. */
static void test_long_runs(void **state) {
    (void)state;
    enum { N = 200000 };
    char *text = malloc(N + 1);
    assert_non_null(text);
    const char *names[] = {"tok_llama3.gguf", "tok_spm.gguf"};
    for (int m = 0; m < 2; m++) {
        serve_tokenizer *t = open_tokenizer(names[m]);
        for (int kind = 0; kind < 3; kind++) {
            for (size_t i = 0; i < N; i++) text[i] = kind == 0 ? ' ' : kind == 1 ? 'a' : (char)('0' + i % 10);
            text[N - 1] = 'x';
            int32_t *ids;
            size_t n, len;
            assert_int_equal(serve_tokenizer_encode(t, text, N, 0, &ids, &n), 0);
            assert_true(n > 0 && n <= N + 1); /* + the llama model's space prefix */
            char *back;
            assert_int_equal(serve_tokenizer_decode(t, ids, n, 0, &back, &len), 0);
            assert_int_equal(len, N);
            assert_memory_equal(back, text, N);
            free(back), free(ids);
        }
        serve_tokenizer_free(t);
    }
    free(text);
}

/* ---- refusals: small GGUF files written here ---- */

typedef struct gguf_out {
    unsigned char *b;
    size_t n, cap;
    uint64_t n_kv;
} gguf_out;

static void put(gguf_out *o, const void *p, size_t n) {
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2 + 256;
        o->b = realloc(o->b, o->cap);
        assert_non_null(o->b);
    }
    memcpy(o->b + o->n, p, n);
    o->n += n;
}
static void put_u32(gguf_out *o, uint32_t v) { put(o, &v, 4); }
static void put_u64(gguf_out *o, uint64_t v) { put(o, &v, 8); }
static void put_str(gguf_out *o, const char *s) {
    put_u64(o, strlen(s));
    put(o, s, strlen(s));
}
static void kv_str(gguf_out *o, const char *k, const char *v) {
    put_str(o, k), put_u32(o, 8), put_str(o, v), o->n_kv++;
}
static void kv_strings(gguf_out *o, const char *k, const char *const *v, uint64_t n) {
    put_str(o, k), put_u32(o, 9), put_u32(o, 8), put_u64(o, n);
    for (uint64_t i = 0; i < n; i++) put_str(o, v[i]);
    o->n_kv++;
}
static void kv_i32s(gguf_out *o, const char *k, const int32_t *v, uint64_t n) {
    put_str(o, k), put_u32(o, 9), put_u32(o, 5), put_u64(o, n);
    put(o, v, n * 4);
    o->n_kv++;
}

static void kv_f32s(gguf_out *o, const char *k, const float *v, uint64_t n) {
    put_str(o, k), put_u32(o, 9), put_u32(o, 6), put_u64(o, n);
    put(o, v, n * 4);
    o->n_kv++;
}

/* Writes header + kvs (no tensors) to a temporary file and tries to load
 * its tokenizer; the status, the message in serve_last_error(). */
static int load_written(gguf_out *o, size_t truncate_to) {
    gguf_out f = {0};
    put(&f, "GGUF", 4), put_u32(&f, 3), put_u64(&f, 0), put_u64(&f, o->n_kv);
    put(&f, o->b, o->n);
    while (f.n % 32) put(&f, "", 1);
    char path[] = "/tmp/lazyattn_tok_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *fp = fdopen(fd, "wb");
    fwrite(f.b, 1, truncate_to && truncate_to < f.n ? truncate_to : f.n, fp);
    fclose(fp);
    free(f.b), free(o->b);
    *o = (gguf_out){0};
    serve_gguf *g;
    int st = serve_gguf_open(path, &g);
    if (!st) {
        serve_tokenizer *t = (serve_tokenizer *)1;
        st = serve_tokenizer_from_gguf(g, &t);
        if (st) assert_null(t);
        serve_tokenizer_free(st ? NULL : t);
        serve_gguf_close(g);
    }
    remove(path);
    return st;
}

static const char *const TINY[] = {"a", "b", "ab", "Ġ"};

static void tiny_gpt2(gguf_out *o, const char *pre) {
    kv_str(o, "tokenizer.ggml.model", "gpt2");
    kv_str(o, "tokenizer.ggml.pre", pre);
}

static void expect_refused(gguf_out *o, const char *needle) {
    int st = load_written(o, 0);
    if (st != LAZYATTN_STATUS_FORMAT || !strstr(serve_last_error(), needle))
        fail_msg("status %d, \"%s\": expected FORMAT naming %s", st, serve_last_error(), needle);
}

static void test_refusals(void **state) {
    (void)state;
    gguf_out o = {0};
    kv_str(&o, "tokenizer.ggml.model", "t5-unigram");
    kv_strings(&o, "tokenizer.ggml.tokens", TINY, 4);
    expect_refused(&o, "\"t5-unigram\"");

    tiny_gpt2(&o, "gpt-4o");
    kv_strings(&o, "tokenizer.ggml.tokens", TINY, 4);
    expect_refused(&o, "\"gpt-4o\"");

    /* tokens of the wrong type: numbers */
    tiny_gpt2(&o, "llama-bpe");
    int32_t nums[] = {1, 1, 1, 1};
    kv_i32s(&o, "tokenizer.ggml.tokens", nums, 4);
    expect_refused(&o, "tokenizer.ggml.tokens");

    /* fewer tokens than token types */
    kv_str(&o, "tokenizer.ggml.model", "llama");
    kv_strings(&o, "tokenizer.ggml.tokens", TINY, 3);
    kv_i32s(&o, "tokenizer.ggml.token_type", nums, 4);
    expect_refused(&o, "tokenizer.ggml.token_type");

    /* a token type out of range */
    kv_str(&o, "tokenizer.ggml.model", "llama");
    kv_strings(&o, "tokenizer.ggml.tokens", TINY, 4);
    int32_t types[] = {1, 9, 1, 1};
    kv_i32s(&o, "tokenizer.ggml.token_type", types, 4);
    expect_refused(&o, "token_type[1]");

    /* a BOS id past the vocabulary */
    kv_str(&o, "tokenizer.ggml.model", "llama");
    kv_strings(&o, "tokenizer.ggml.tokens", TINY, 4);
    float scores[] = {0, 0, -1, 0};
    kv_f32s(&o, "tokenizer.ggml.scores", scores, 4);
    put_str(&o, "tokenizer.ggml.bos_token_id"), put_u32(&o, 4), put_u32(&o, 4), o.n_kv++;
    expect_refused(&o, "bos_token_id");

    /* gpt2: a merge of text that is no token; a token not byte-level (the
     * 256 byte tokens first: every byte must have one) */
    const char *vocab[260];
    static char bytes[256][4];
    for (uint32_t b = 0, k = 0; b < 256; b++) { /* GPT-2's bytes_to_unicode */
        uint32_t cp = b;
        if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) cp = 256 + k++;
        if (cp < 0x80) bytes[b][0] = (char)cp;
        else bytes[b][0] = (char)(0xC0 | cp >> 6), bytes[b][1] = (char)(0x80 | (cp & 0x3F));
        vocab[b] = bytes[b];
    }
    vocab[256] = "ab";
    vocab[257] = "a b"; /* a raw space: no byte-level token */
    const char *merges_bad[] = {"a x"}, *merges_ok[] = {"a b"};
    tiny_gpt2(&o, "llama-bpe");
    kv_strings(&o, "tokenizer.ggml.tokens", vocab, 257);
    kv_strings(&o, "tokenizer.ggml.merges", merges_bad, 1);
    expect_refused(&o, "merges[0] = \"a x\"");
    tiny_gpt2(&o, "llama-bpe");
    kv_strings(&o, "tokenizer.ggml.tokens", vocab, 258);
    kv_strings(&o, "tokenizer.ggml.merges", merges_ok, 1);
    expect_refused(&o, "token 257");
    tiny_gpt2(&o, "llama-bpe");
    kv_strings(&o, "tokenizer.ggml.tokens", vocab + 1, 256); /* no token of byte 0 */
    kv_strings(&o, "tokenizer.ggml.merges", merges_ok, 1);
    expect_refused(&o, "byte 0x00");
    /* and the same vocabulary, whole, loads and merges */
    tiny_gpt2(&o, "llama-bpe");
    kv_strings(&o, "tokenizer.ggml.tokens", vocab, 257);
    kv_strings(&o, "tokenizer.ggml.merges", merges_ok, 1);
    assert_int_equal(load_written(&o, 0), 0);

    /* a tokens array cut short by the end of the file */
    tiny_gpt2(&o, "llama-bpe");
    kv_strings(&o, "tokenizer.ggml.tokens", vocab, 257);
    int st = load_written(&o, 300);
    assert_int_equal(st, LAZYATTN_STATUS_FORMAT);
    assert_non_null(strstr(serve_last_error(), "truncated"));

    /* a llama vocabulary needs scores */
    kv_str(&o, "tokenizer.ggml.model", "llama");
    kv_strings(&o, "tokenizer.ggml.tokens", TINY, 4);
    expect_refused(&o, "tokenizer.ggml.scores");
}

/* ---- chat templates ---- */

static void expect_chat(serve_chat_template kind, const serve_chat_message *m, size_t n, int add,
                        const char *want) {
    char *out;
    assert_int_equal(serve_chat_format(kind, m, n, add, &out), 0);
    assert_string_equal(out, want);
    free(out);
}

static void test_chat_templates(void **state) {
    (void)state;
    serve_chat_message m[] = {{"system", "You are terse."},
                              {"user", "Hello\n"},
                              {"assistant", "Hi."},
                              {"user", "Why?"}};
    expect_chat(SERVE_CHAT_LLAMA3, m, 4, 1,
                "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\nHi.<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect_chat(SERVE_CHAT_CHATML, m, 4, 1,
                "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello\n<|im_end|>\n"
                "<|im_start|>assistant\nHi.<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n"
                "<|im_start|>assistant\n");
    expect_chat(SERVE_CHAT_CHATML, m + 1, 1, 0, "<|im_start|>user\nHello\n<|im_end|>\n");
    expect_chat(SERVE_CHAT_LLAMA2, m, 4, 1,
                "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHello\n [/INST]Hi.</s>"
                "<s>[INST] Why? [/INST]");
    expect_chat(SERVE_CHAT_RAW, m, 4, 1, "You are terse.Hello\nHi.Why?");
    expect_chat(SERVE_CHAT_RAW, NULL, 0, 0, "");

    serve_chat_template k = SERVE_CHAT_RAW;
    assert_int_equal(serve_chat_template_detect("{{ '<|start_header_id|>' + role }}", &k), 0);
    assert_int_equal(k, SERVE_CHAT_LLAMA3);
    assert_int_equal(serve_chat_template_detect("{{ '<|im_start|>' + message.role }}", &k), 0);
    assert_int_equal(k, SERVE_CHAT_CHATML);
    assert_int_equal(serve_chat_template_detect("{{ bos_token + '[INST] ' }}", &k), 0);
    assert_int_equal(k, SERVE_CHAT_LLAMA2);
    assert_int_equal(serve_chat_template_detect("{{ '<start_of_turn>' }}", &k),
                     LAZYATTN_STATUS_NOT_FOUND);
    assert_non_null(strstr(serve_last_error(), "by name"));
    assert_int_equal(serve_chat_template_detect(NULL, &k), LAZYATTN_STATUS_NOT_FOUND);
    assert_int_equal(serve_chat_template_from_name("mistral", &k), 0);
    assert_int_equal(k, SERVE_CHAT_LLAMA2);
    assert_int_equal(serve_chat_template_from_name("raw", &k), 0);
    assert_int_equal(k, SERVE_CHAT_RAW);
    assert_int_equal(serve_chat_template_from_name("gemma", &k), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(serve_last_error(), "\"gemma\""));
    serve_chat_message odd[] = {{"tool", "x"}};
    char *out = (char *)1;
    assert_int_equal(serve_chat_format(SERVE_CHAT_LLAMA2, odd, 1, 1, &out),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(out);

    /* the fixture's own template is recognised */
    char path[1024];
    fixture_path(path, sizeof path, "tok_llama3.gguf");
    serve_gguf *g;
    assert_int_equal(serve_gguf_open(path, &g), 0);
    const char *jinja;
    assert_int_equal(serve_gguf_get_string(g, "tokenizer.chat_template", &jinja), 0);
    assert_int_equal(serve_chat_template_detect(jinja, &k), 0);
    assert_int_equal(k, SERVE_CHAT_LLAMA3);
    serve_gguf_close(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama3_matches_hugging_face),
        cmocka_unit_test(test_qwen2_matches_hugging_face),
        cmocka_unit_test(test_spm_matches_hugging_face),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_long_runs),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_chat_templates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
