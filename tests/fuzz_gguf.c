/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: arbitrary bytes as a GGUF file through serve/gguf.c
 * (open, metadata lookups, the llama shape, tensor reads) and the tokenizer
 * read from it (serve/tokenizer.c: load, encode, decode). A refusal must
 * come with a message and no handle; an accepted file must keep every
 * tensor inside the file, unique and apart, and a model shape read from it
 * must pass serve_model_config_check with finite, sensible values.
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true; seed corpus:
 * python3 tests/fuzz_gguf_seed.py DIR; run:
 * build-fuzz/tests/fuzz_gguf -max_total_time=45 DIR */
#include "serve.h"
#include "quant.h"
#include "tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "fuzz_gguf: %s failed at line %d (%s)\n", #cond, __LINE__,     \
                    serve_last_error());                                                   \
            __builtin_trap();                                                              \
        }                                                                                  \
    } while (0)

static char g_path[256];

static void remove_scratch(void) { remove(g_path); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *dir = getenv("TMPDIR");
    snprintf(g_path, sizeof g_path, "%s/fuzz_gguf_%d.gguf", dir && *dir ? dir : "/tmp",
             (int)getpid());
    atexit(remove_scratch);
    return 0;
}

static const char *const int_keys[] = {"llama.block_count", "llama.embedding_length",
                                       "llama.attention.head_count", "general.alignment",
                                       "llama.rope.dimension_count"};
static const char *const float_keys[] = {"llama.rope.freq_base", "llama.rope.scaling.factor",
                                         "llama.attention.layer_norm_rms_epsilon"};
static const char *const tensor_names[] = {"token_embd.weight", "output_norm.weight",
                                           "output.weight", "blk.0.attn_q.weight",
                                           "blk.0.ffn_down.weight"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(g_path, "wb");
    if (!f) return 0;
    size_t written = fwrite(data, 1, size, f);
    if (fclose(f) != 0 || written != size) return 0;

    serve_gguf *g = (serve_gguf *)1;
    int st = serve_gguf_open(g_path, &g);
    if (st) {
        CHECK(st < 0 && g == NULL && serve_last_error()[0] != 0);
        return 0;
    }
    CHECK(g != NULL);
    uint32_t version = serve_gguf_version(g);
    CHECK(version == 2 || version == 3);

    for (size_t i = 0; i < sizeof int_keys / sizeof *int_keys; i++) {
        int64_t v;
        st = serve_gguf_get_int(g, int_keys[i], &v);
        CHECK(st == 0 || st == LAZYATTN_STATUS_NOT_FOUND || st == LAZYATTN_STATUS_FORMAT);
    }
    for (size_t i = 0; i < sizeof float_keys / sizeof *float_keys; i++) {
        double v;
        st = serve_gguf_get_float(g, float_keys[i], &v);
        CHECK(st == 0 || st == LAZYATTN_STATUS_NOT_FOUND || st == LAZYATTN_STATUS_FORMAT);
    }
    const char *s;
    st = serve_gguf_get_string(g, "general.architecture", &s);
    CHECK(st != 0 || s != NULL);

    /* tensors: inside the file, found by name; small ones read back */
    for (size_t i = 0; i < sizeof tensor_names / sizeof *tensor_names; i++) {
        const serve_gguf_tensor *t;
        st = serve_gguf_find_tensor(g, tensor_names[i], &t);
        if (st) {
            CHECK(st == LAZYATTN_STATUS_NOT_FOUND && t == NULL);
            continue;
        }
        CHECK(!strcmp(t->name, tensor_names[i]));
        CHECK(t->n_bytes <= size && t->offset <= size - t->n_bytes);
        uint64_t row_bytes;
        CHECK(serve_ggml_row_bytes(t->type, t->dims[0], t->name, &row_bytes) == 0);
        CHECK(t->n_elements / t->dims[0] * row_bytes == t->n_bytes);
        if (t->n_elements <= (1u << 16)) {
            float *x = malloc((size_t)t->n_elements * sizeof *x);
            if (x) {
                CHECK(serve_gguf_read_f32(g, t, x, t->n_elements) == 0);
                free(x);
            }
        }
    }

    serve_model_config c;
    CHECK(serve_model_config_preset(&c, "tiny") == 0);
    st = serve_gguf_model_config(g, &c);
    if (st) {
        CHECK(st == LAZYATTN_STATUS_FORMAT && serve_last_error()[0] != 0);
    } else {
        CHECK(serve_model_config_check(&c) == 0);
        CHECK(isfinite(c.rms_eps) && c.rms_eps > 0 && c.rms_eps <= 1);
        CHECK(isfinite(c.rope.theta) && c.rope.theta > 1);
        CHECK(c.rope.llama3_factor == 0 || isfinite(c.rope.llama3_factor));
        /* the file holds every weight the shape asks for */
        CHECK(serve_model_config_n_params(&c) <= size);
    }

    /* the tokenizer: refused with a status, or it encodes and decodes */
    serve_tokenizer *tok = (serve_tokenizer *)1;
    st = serve_tokenizer_from_gguf(g, &tok);
    if (st) {
        CHECK(st < 0 && tok == NULL && serve_last_error()[0] != 0);
    } else {
        static const char text[] = "Hi <s> <|eot_id|>  12345 \xC3\xA9\xF0\x9F\x98\x80\n";
        int32_t *ids;
        size_t n, len;
        st = serve_tokenizer_encode(tok, text, sizeof text - 1,
                                    SERVE_TOKENIZE_ADD_SPECIAL | SERVE_TOKENIZE_PARSE_SPECIAL, &ids, &n);
        CHECK(st == 0 || st == LAZYATTN_STATUS_INVALID_ARGUMENT);
        if (!st) {
            serve_tokenizer_info info;
            serve_tokenizer_get_info(tok, &info);
            for (size_t k = 0; k < n; k++) CHECK(ids[k] >= 0 && ids[k] < info.n_vocab);
            char *back;
            CHECK(serve_tokenizer_decode(tok, ids, n, SERVE_DETOK_SPECIAL, &back, &len) == 0);
            free(back);
            free(ids);
        }
        serve_tokenizer_free(tok);
    }
    serve_gguf_close(g);
    return 0;
}
