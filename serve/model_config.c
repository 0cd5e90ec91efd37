/* SPDX-License-Identifier: Apache-2.0 */
/* Model shapes: presets, checks, and the attention / pool configurations
 * the decoder's layers use. */
#include "serve.h"

#include <string.h>

/* Llama-3.1 RoPE, block size and KV type from the library's defaults. */
static void serve_config_base(serve_model_config *c) {
    lazyattn_attention_config llama;
    lazyattn_attention_config_default(&llama);
    memset(c, 0, sizeof *c);
    c->rms_eps = 1e-5f;
    c->rope = llama.rope;
    c->block_size = llama.block_size;
    c->kv_dtype = llama.dtype;
}

int serve_model_config_preset(serve_model_config *c, const char *name) {
    if (!c || !name) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "preset: NULL argument");
    serve_config_base(c);
    if (strcmp(name, "tiny") == 0) {
        /* CI on PoCL: every kernel in a second. */
        c->n_layers = 2, c->hidden = 64, c->n_heads = 4, c->n_kv_heads = 2, c->head_dim = 16;
        c->ffn = 128, c->vocab = 128, c->max_rows = 128;
    } else if (strcmp(name, "small") == 0) {
        /* The README run: a Llama-shaped model small enough for a 2-core CPU. */
        c->n_layers = 4, c->hidden = 256, c->n_heads = 8, c->n_kv_heads = 2, c->head_dim = 32;
        c->ffn = 512, c->vocab = 2048, c->max_rows = 256;
    } else if (strcmp(name, "8b") == 0) {
        /* Llama-3.1-8B's shape; vocab reduced from 128256 to 32000 (random weights). */
        c->n_layers = 32, c->hidden = 4096, c->n_heads = 32, c->n_kv_heads = 8, c->head_dim = 128;
        c->ffn = 14336, c->vocab = 32000, c->max_rows = 2048;
    } else {
        return serve_fail(LAZYATTN_STATUS_NOT_FOUND,
                          "unknown model preset \"%s\" (tiny, small, 8b)", name);
    }
    return LAZYATTN_STATUS_OK;
}

int serve_model_config_check(const serve_model_config *c) {
#define SERVE_CHECK(cond, ...)                                                            \
    do {                                                                                  \
        if (!(cond)) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, __VA_ARGS__);    \
    } while (0)
    SERVE_CHECK(c != NULL, "model config is NULL");
    SERVE_CHECK(c->n_layers >= 1 && c->n_layers <= 1024, "n_layers %d outside 1..1024", c->n_layers);
    SERVE_CHECK(c->hidden >= 8 && c->hidden <= 65536, "hidden %d outside 8..65536", c->hidden);
    SERVE_CHECK(c->n_kv_heads >= 1 && c->n_heads >= 1 && c->n_heads % c->n_kv_heads == 0,
                "n_heads %d is not a multiple of n_kv_heads %d", c->n_heads, c->n_kv_heads);
    SERVE_CHECK(c->head_dim >= 16 && c->head_dim <= 256 && c->head_dim % 8 == 0,
                "head_dim %d: lazyattn needs 16..256, a multiple of 8", c->head_dim);
    SERVE_CHECK(c->ffn >= 1 && c->ffn <= (1 << 20), "ffn %d outside 1..2^20", c->ffn);
    SERVE_CHECK(c->vocab >= 2 && c->vocab <= (1 << 22), "vocab %d outside 2..2^22", c->vocab);
    /* NaN fails every comparison, infinity the upper bounds */
    SERVE_CHECK(c->rms_eps > 0 && c->rms_eps <= 1, "rms_eps %g outside (0, 1]", (double)c->rms_eps);
    SERVE_CHECK(c->rope.style == LAZYATTN_ROPE_NONE ||
                    (c->rope.theta > 1 && c->rope.theta <= 1e12),
                "rope theta %g outside (1, 1e12]", c->rope.theta);
    SERVE_CHECK(c->rope.llama3_factor == 0 ||
                    (c->rope.llama3_factor >= 1 && c->rope.llama3_factor <= 1024 &&
                     c->rope.llama3_low_freq_factor > 0 &&
                     c->rope.llama3_high_freq_factor > c->rope.llama3_low_freq_factor &&
                     c->rope.llama3_high_freq_factor <= 1e6 &&
                     c->rope.llama3_original_context >= 1 &&
                     c->rope.llama3_original_context <= (1 << 24)),
                "Llama-3 RoPE scaling: factor %g outside 1..1024, or its frequency factors "
                "(%g, %g) or original context %d out of range", c->rope.llama3_factor,
                c->rope.llama3_low_freq_factor, c->rope.llama3_high_freq_factor,
                c->rope.llama3_original_context);
    SERVE_CHECK(c->rope.linear_factor == 0 ||
                    (c->rope.linear_factor > 0 && c->rope.linear_factor <= 1024),
                "linear RoPE scaling factor %g outside (0, 1024]", c->rope.linear_factor);
    if (c->rope.style != LAZYATTN_ROPE_NONE) { /* rotary dim, frequency factors */
        double probe[LAZYATTN_MAX_HEAD_DIM / 2];
        SERVE_CHECK(lazyattn_rope_frequencies(&c->rope, c->head_dim, probe) == 0, "rope: %s",
                    lazyattn_last_error());
    }
    SERVE_CHECK(c->block_size >= 1 && c->block_size <= LAZYATTN_MAX_BLOCK_SIZE,
                "block_size %d outside 1..%d", c->block_size, LAZYATTN_MAX_BLOCK_SIZE);
    SERVE_CHECK(c->max_rows >= 1 && c->max_rows <= (1 << 16), "max_rows %d outside 1..65536",
                c->max_rows);
    SERVE_CHECK(lazyattn_dtype_size(c->kv_dtype) != 0, "unknown kv dtype %d", (int)c->kv_dtype);
    SERVE_CHECK(c->gemm == SERVE_GEMM_AUTO || c->gemm == SERVE_GEMM_F32 || c->gemm == SERVE_GEMM_BF16,
                "gemm mode %d (auto 0, f32 1, bf16 2)", (int)c->gemm);
    SERVE_CHECK(c->dequantize_weights == 0 || c->dequantize_weights == 1,
                "dequantize_weights %d (0 or 1)", c->dequantize_weights);
#undef SERVE_CHECK
    return LAZYATTN_STATUS_OK;
}

uint64_t serve_model_config_n_params(const serve_model_config *c) {
    uint64_t h = (uint64_t)c->hidden, qd = (uint64_t)c->n_heads * (uint64_t)c->head_dim,
             kvd = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim;
    uint64_t layer = 2 * h + h * qd * 2 + h * kvd * 2 + 3 * h * (uint64_t)c->ffn;
    uint64_t emb = (uint64_t)c->vocab * h;
    return (uint64_t)c->n_layers * layer + h + emb * (c->tied_embeddings ? 1 : 2);
}

void serve_model_attention_config(const serve_model_config *c, lazyattn_attention_config *a) {
    lazyattn_attention_config_default(a);
    a->n_q_heads = c->n_heads;
    a->n_kv_heads = c->n_kv_heads;
    a->head_dim = c->head_dim;
    a->block_size = c->block_size;
    a->dtype = c->kv_dtype;
    a->rope = c->rope;
    a->alibi = 0;
    a->scale = 0.0f;
}

void serve_model_pool_config(const serve_model_config *c, uint64_t budget_bytes,
                             lazyattn_pool_config *p) {
    memset(p, 0, sizeof *p);
    p->n_layers = c->n_layers;
    p->n_kv_heads = c->n_kv_heads;
    p->head_dim = c->head_dim;
    p->block_size = c->block_size;
    p->dtype = c->kv_dtype;
    p->budget_bytes = budget_bytes;
}

uint64_t serve_model_kv_bytes_per_token(const serve_model_config *c) {
    return 2 * (uint64_t)c->n_layers * (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim *
           lazyattn_dtype_size(c->kv_dtype);
}

const char *serve_gemm_mode_name(serve_gemm_mode mode) {
    switch (mode) {
    case SERVE_GEMM_AUTO: return "auto";
    case SERVE_GEMM_F32: return "f32";
    case SERVE_GEMM_BF16: return "bf16";
    }
    return "?";
}

int serve_gemm_mode_parse(const char *name, serve_gemm_mode *out) {
    if (!name || !out)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_gemm_mode_parse: NULL argument");
    for (int i = SERVE_GEMM_AUTO; i <= SERVE_GEMM_BF16; i++)
        if (strcmp(name, serve_gemm_mode_name((serve_gemm_mode)i)) == 0) {
            *out = (serve_gemm_mode)i;
            return LAZYATTN_STATUS_OK;
        }
    return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "unknown gemm mode \"%s\" (auto, f32, bf16)",
                      name);
}
