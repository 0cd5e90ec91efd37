/* SPDX-License-Identifier: Apache-2.0 */
/*
 * write_gguf: a random-weight Llama GGUF file of one of bench_forward's
 * shapes (tiny, small, 8b: serve_model_config_preset) in one of the forms
 * people download (f32, bf16, q8_0, q4_k_m), written tensor by tensor
 * (never the whole file in memory), the same bytes for the same seed.
 *
 * The file is what llama.cpp's converter (convert_hf_to_gguf.py,
 * LlamaModel) and quantizer (llama-quantize) write for a Llama 3.1:
 *   keys     general.architecture = llama, general.name, general.file_type,
 *            general.quantization_version, llama.block_count,
 *            .context_length, .embedding_length, .feed_forward_length,
 *            .attention.head_count(_kv), .rope.freq_base,
 *            .attention.layer_norm_rms_epsilon, .rope.dimension_count,
 *            .vocab_size (.attention.key_length / value_length when the
 *            head dim is not hidden / heads); no tokenizer (random weights)
 *   tensors  rope_freqs.weight (Llama-3 scaling, factor 8, frequency
 *            factors 1 and 4, original context 8192: the converter's
 *            divisors), token_embd.weight, blk.N.{attn_norm, attn_q,
 *            attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
 *            ffn_down}.weight, output_norm.weight, output.weight; 1-D
 *            tensors F32, ggml order (dims[0] the row length)
 *   types    f32: F32; bf16: BF16 matrices; q8_0: Q8_0 matrices;
 *            q4_k_m: llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M choice
 *            (src/llama-quant.cpp, llama_tensor_get_type_impl): Q6_K for
 *            output.weight ("new_type != GGML_TYPE_Q8_0 -> Q6_K" for the
 *            output), and for attn_v and ffn_down of the layers where
 *            use_more_bits(i_layer, n_layers) holds:
 *              i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2
 *            (16 of 32 layers: 0-3, 6, 9, ..., 27, 28-31); Q4_K for the
 *            rest, token_embd included. K-quants need rows of whole
 *            256-value super-blocks: a shape without them (tiny) is
 *            refused (llama.cpp would fall back to Q5_0, which serve/ does
 *            not read).
 * Values: projections of standard deviation 1 / sqrt(row length) (as
 * serve_model_init_random: each projection keeps the variance of its
 * RMS-normed input, so the residual stream grows like the square root of
 * the depth, no overflow through 32 layers), embeddings 1, norms 1 + up to
 * 0.1. F32 and BF16 matrices: uniform values (bf16: the f32 values
 * rounded to nearest even). Quantized matrices: random valid blocks whose
 * values have that spread: f16 scales, 6-bit sub-block scales and mins
 * (Q4_K, the min centring the 0..15 nibbles), int8 scales (Q6_K), uniform
 * quants.
 * --dequantized writes every matrix as F32 holding exactly the values the
 * form's blocks decode to (ggml's arithmetic, computed here from the
 * fields before packing, not by unpacking): the reference a quantized
 * file's logits are checked against (tests/test_write_gguf.c).
 *
 * The file is written as FILE.part and renamed when complete; a failed
 * write (a full disk) removes it. Exit status: 0 written, 1 a failure, 2 a
 * bad command line.
 */
#define _FILE_OFFSET_BITS 64
#include "cli_options.h"
#include "serve.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char prog[] = "write_gguf";

enum form { FORM_F32 = 0, FORM_BF16 = 1, FORM_Q8_0 = 2, FORM_Q4_K_M = 3 };
static const char *const form_names[] = {"f32", "bf16", "q8_0", "q4_k_m"};

/* ggml type ids and llama.cpp's file types (LLAMA_FTYPE_*) */
enum { T_F32 = 0, T_Q8_0 = 8, T_Q4_K = 12, T_Q6_K = 14, T_BF16 = 30 };
static const uint32_t form_file_type[] = {0 /* ALL_F32 */, 32 /* MOSTLY_BF16 */,
                                          7 /* MOSTLY_Q8_0 */, 15 /* MOSTLY_Q4_K_M */};

#define ALIGNMENT 32
#define MAX_TENSORS 2048
#define OUT_BUF_BYTES ((size_t)64 << 20)

/* What a tensor holds: how its values are drawn. */
enum kind { K_MATRIX = 0, K_NORM = 1, K_ROPE_FREQS = 2 };

typedef struct tensor {
    char name[64];
    uint64_t d0, d1; /* ggml order: d0 values a row, d1 rows (1: a vector) */
    uint32_t type;  /* as stored */
    uint32_t vtype; /* whose values it holds: type, or the form's type (--dequantized) */
    enum kind kind;
    float sigma; /* matrices: the values' standard deviation */
    uint64_t offset, bytes;
} tensor;

typedef struct plan {
    serve_model_config mc;
    int n;
    tensor t[MAX_TENSORS];
    uint64_t data_bytes;
} plan;

/* ---- random numbers: one stream per (seed, tensor, row) ---- */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t row_stream(uint64_t seed, uint64_t tensor_index, uint64_t row) {
    uint64_t s = seed ^ 0x6A09E667F3BCC909ull;
    uint64_t a = splitmix(&s) ^ (tensor_index * 0xD1B54A32D192ED03ull);
    uint64_t b = splitmix(&a) ^ (row * 0x8CB92BA72F3D8DD7ull);
    (void)splitmix(&b);
    return b;
}

/* uniform in (-1, 1) from 24 bits */
static float unit(uint64_t bits24) { return ((float)bits24 + 0.5f) * (2.0f / 16777216.0f) - 1.0f; }
/* uniform in [0, 1) */
static float unit01(uint64_t bits24) { return (float)bits24 * (1.0f / 16777216.0f); }

/* ---- number formats (written from IEEE 754, independent of serve/quant.c) ---- */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float f32_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t bf16_of(float f) { /* nearest even; the values here are finite */
    uint32_t u = f32_bits(f);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* f32 -> IEEE half, nearest even, subnormals kept (|f| < 65504 here) */
static uint16_t half_of(float f) {
    uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000u;
    float a = fabsf(f);
    if (a < 6.103515625e-05f) { /* subnormal half: a multiple of 2^-24, rounded */
        float q = a * 16777216.0f;
        uint32_t m = (uint32_t)lrintf(q); /* lrintf: nearest even */
        return (uint16_t)(sign | m);      /* m == 1024 is the smallest normal: right */
    }
    uint32_t e = ((f32_bits(a) >> 23) & 0xFF) - 127 + 15, mant = f32_bits(a) & 0x7FFFFF;
    uint32_t h = e << 10 | mant >> 13, rest = mant & 0x1FFF;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++; /* carries into the exponent */
    return (uint16_t)(sign | h);
}

static float half_value(uint16_t h) {
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    float v = e ? ldexpf((float)(m | 0x400), (int)e - 25) : ldexpf((float)m, -24);
    return (h & 0x8000) ? -v : v;
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* ---- blocks: fields drawn, values computed as ggml decodes them, packed ---- */

/* Q8_0, 32 values: x = d * q; q uniform in -127..127 (variance 5418.7) */
static void block_q8_0(uint64_t *s, float sigma, uint8_t *out, float *val) {
    uint16_t dh = half_of(sigma / 73.61f * (0.8f + 0.4f * unit01(splitmix(s) >> 40)));
    float d = half_value(dh);
    put16(out, dh);
    for (int j = 0; j < 32; j += 8) {
        uint64_t r = splitmix(s);
        for (int k = 0; k < 8; k++) {
            int q = (int)((r >> (8 * k)) & 0xFF) % 255 - 127;
            out[2 + j + k] = (uint8_t)(int8_t)q;
            if (val) val[j + k] = (float)q * d;
        }
    }
}

/* Q4_K, 256 values in 8 sub-blocks of 32: x = d * sc * q - dmin * m,
 * q in 0..15 (variance 21.25), sc in 16..31, m chosen so that dmin * m
 * centres the nibbles (about 7.5 * d * sc). */
static void block_q4_k(uint64_t *s, float sigma, uint8_t *out, float *val) {
    uint64_t r = splitmix(s);
    uint16_t dh = half_of(sigma / (4.61f * 23.5f) * (0.8f + 0.4f * unit01(r >> 40)));
    float d = half_value(dh);
    uint16_t mh = half_of(d * 3.75f);
    float dmin = half_value(mh);
    uint8_t sc[8], m[8];
    r = splitmix(s);
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(16 + ((r >> (4 * j)) & 15));
        long mm = lrintf(7.5f * d * (float)sc[j] / dmin);
        m[j] = (uint8_t)(mm < 0 ? 0 : mm > 63 ? 63 : mm);
    }
    put16(out, dh);
    put16(out + 2, mh);
    uint8_t *scales = out + 4, *qs = out + 16;
    for (int j = 0; j < 4; j++) { /* ggml's get_scale_min_k4, inverted */
        scales[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        scales[j + 4] = (uint8_t)((m[j] & 63) | (m[j + 4] >> 4) << 6);
        scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
    for (int c = 0; c < 4; c++) { /* 32 bytes: sub-block 2c low nibbles, 2c + 1 high */
        float d1 = d * (float)sc[2 * c], m1 = dmin * (float)m[2 * c];
        float d2 = d * (float)sc[2 * c + 1], m2 = dmin * (float)m[2 * c + 1];
        for (int l = 0; l < 32; l += 8) {
            r = splitmix(s);
            for (int k = 0; k < 8; k++) {
                uint8_t lo = (uint8_t)((r >> (8 * k)) & 15), hi = (uint8_t)((r >> (8 * k + 4)) & 15);
                qs[32 * c + l + k] = (uint8_t)(lo | hi << 4);
                if (val) {
                    float a = d1 * (float)lo, b = d2 * (float)hi;
                    val[64 * c + l + k] = a - m1;
                    val[64 * c + 32 + l + k] = b - m2;
                }
            }
        }
    }
}

/* Q6_K, 256 values in 16 sub-blocks of 16: x = d * sc * (q - 32), q in
 * 0..63 (variance 341.25), sc int8 in 16..31 */
static void block_q6_k(uint64_t *s, float sigma, uint8_t *out, float *val) {
    uint64_t r = splitmix(s);
    uint16_t dh = half_of(sigma / (18.47f * 23.5f) * (0.8f + 0.4f * unit01(r >> 40)));
    float d = half_value(dh);
    int8_t sc[16];
    r = splitmix(s);
    for (int j = 0; j < 16; j++) sc[j] = (int8_t)(16 + ((r >> (4 * j)) & 15));
    uint8_t q[256];
    for (int i = 0; i < 256; i += 10) {
        r = splitmix(s);
        for (int k = 0; k < 10 && i + k < 256; k++) q[i + k] = (uint8_t)((r >> (6 * k)) & 63);
    }
    uint8_t *ql = out, *qh = out + 128;
    for (int h = 0; h < 2; h++) /* two halves of 128: ggml's dequantize_row_q6_K, inverted */
        for (int l = 0; l < 32; l++) {
            const uint8_t *p = q + 128 * h;
            ql[64 * h + l] = (uint8_t)((p[l] & 15) | (p[l + 64] & 15) << 4);
            ql[64 * h + l + 32] = (uint8_t)((p[l + 32] & 15) | (p[l + 96] & 15) << 4);
            qh[32 * h + l] = (uint8_t)((p[l] >> 4) | (p[l + 32] >> 4) << 2 | (p[l + 64] >> 4) << 4 |
                                       (p[l + 96] >> 4) << 6);
        }
    memcpy(out + 192, sc, 16);
    put16(out + 208, dh);
    if (val)
        for (int i = 0; i < 256; i++) {
            float sd = d * (float)sc[i / 16]; /* value i is in sub-block i / 16 */
            val[i] = sd * (float)((int)q[i] - 32);
        }
}

/* ---- the plan: shapes, types, offsets ---- */

static int use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static uint64_t row_bytes(uint32_t type, uint64_t d0) {
    switch (type) {
    case T_F32: return 4 * d0;
    case T_BF16: return 2 * d0;
    case T_Q8_0: return d0 / 32 * 34;
    case T_Q4_K: return d0 / 256 * 144;
    default: return d0 / 256 * 210; /* Q6_K */
    }
}

static const char *type_name(uint32_t t) {
    return t == T_F32 ? "F32" : t == T_BF16 ? "BF16" : t == T_Q8_0 ? "Q8_0" : t == T_Q4_K ? "Q4_K" : "Q6_K";
}

static void add(plan *p, const char *name, uint64_t d0, uint64_t d1, uint32_t type, uint32_t vtype,
                enum kind kind, float sigma) {
    tensor *t = &p->t[p->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->d0 = d0, t->d1 = d1, t->type = type, t->vtype = vtype, t->kind = kind, t->sigma = sigma;
}

/* The matrix type of a form; q4_k_m: llama.cpp's rule (see the top). */
static uint32_t matrix_type(enum form f, int dequantized, const char *suffix, int layer, int n_layers) {
    if (dequantized || f == FORM_F32) return T_F32;
    if (f == FORM_BF16) return T_BF16;
    if (f == FORM_Q8_0) return T_Q8_0;
    if (!strcmp(suffix, "output")) return T_Q6_K;
    if ((!strcmp(suffix, "attn_v") || !strcmp(suffix, "ffn_down")) && use_more_bits(layer, n_layers))
        return T_Q6_K;
    return T_Q4_K;
}

static int make_plan(plan *p, const char *shape, enum form f, int dequantized) {
    if (serve_model_config_preset(&p->mc, shape)) {
        fprintf(stderr, "%s: %s\n", prog, serve_last_error());
        return 2;
    }
    const serve_model_config *c = &p->mc;
    uint64_t h = (uint64_t)c->hidden, qd = (uint64_t)c->n_heads * (uint64_t)c->head_dim,
             kvd = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim, ff = (uint64_t)c->ffn,
             V = (uint64_t)c->vocab;
    uint64_t need = f == FORM_Q4_K_M ? 256 : f == FORM_Q8_0 ? 32 : 1;
    uint64_t rows[] = {h, qd, ff};
    const char *what[] = {"hidden", "heads x head dim", "ffn"};
    for (int i = 0; i < 3; i++)
        if (rows[i] % need) {
            fprintf(stderr, "%s: --form %s: shape %s has rows of %llu values (%s), not whole "
                    "%llu-value blocks%s\n", prog, form_names[f], shape,
                    (unsigned long long)rows[i], what[i], (unsigned long long)need,
                    f == FORM_Q4_K_M ? " (llama.cpp would fall back to Q5_0, which serve/ does "
                                       "not read): use --shape small or 8b" : "");
            return 2;
        }
    p->n = 0;
    const float s_h = 1.0f / sqrtf((float)h), s_q = 1.0f / sqrtf((float)qd),
                s_f = 1.0f / sqrtf((float)ff);
#define MATRIX(name, suffix, layer, d0, d1, sigma)                                             \
    add(p, name, d0, d1, matrix_type(f, dequantized, suffix, layer, c->n_layers),              \
        matrix_type(f, 0, suffix, layer, c->n_layers), K_MATRIX, sigma)
    add(p, "rope_freqs.weight", (uint64_t)c->head_dim / 2, 1, T_F32, T_F32, K_ROPE_FREQS, 0);
    MATRIX("token_embd.weight", "token_embd", 0, h, V, 1.0f);
    static const struct {
        const char *suffix;
        int d0, d1; /* 0 hidden, 1 qd, 2 kvd, 3 ffn, -1 a norm */
    } per_layer[] = {{"attn_norm", 0, -1}, {"attn_q", 0, 1},      {"attn_k", 0, 2},
                     {"attn_v", 0, 2},     {"attn_output", 1, 0}, {"ffn_norm", 0, -1},
                     {"ffn_gate", 0, 3},   {"ffn_up", 0, 3},      {"ffn_down", 3, 0}};
    const uint64_t dim[] = {h, qd, kvd, ff};
    const float sig[] = {s_h, s_q, 0, s_f};
    char name[64];
    for (int l = 0; l < c->n_layers; l++)
        for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, per_layer[i].suffix);
            if (per_layer[i].d1 < 0) {
                add(p, name, h, 1, T_F32, T_F32, K_NORM, 0);
            } else {
                MATRIX(name, per_layer[i].suffix, l, dim[per_layer[i].d0], dim[per_layer[i].d1],
                       sig[per_layer[i].d0]);
            }
        }
    add(p, "output_norm.weight", h, 1, T_F32, T_F32, K_NORM, 0);
    MATRIX("output.weight", "output", 0, h, V, s_h);
#undef MATRIX
    uint64_t at = 0;
    for (int i = 0; i < p->n; i++) {
        tensor *t = &p->t[i];
        t->offset = at;
        t->bytes = row_bytes(t->type, t->d0) * t->d1;
        at += (t->bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    }
    p->data_bytes = at;
    return 0;
}

/* ---- output: a buffered file that remembers its first error ---- */

typedef struct out {
    FILE *f;
    uint8_t *buf;
    size_t len;
    uint64_t written;
    int err; /* errno of the first failure, 0 none */
} out;

/* Writes the buffer out; after a failure the bytes are dropped (the file
 * is removed), so the buffer always has room again. */
static void out_flush(out *o) {
    if (!o->err && o->len && !o->f) o->err = EFBIG; /* the in-memory header outgrew it */
    if (!o->err && o->len) {
        errno = 0;
        if (fwrite(o->buf, 1, o->len, o->f) != o->len) o->err = errno ? errno : EIO;
        else o->written += o->len;
    }
    o->len = 0;
}

static void out_bytes(out *o, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n && !o->err) {
        size_t k = OUT_BUF_BYTES - o->len < n ? OUT_BUF_BYTES - o->len : n;
        memcpy(o->buf + o->len, b, k);
        o->len += k, b += k, n -= k;
        if (o->len == OUT_BUF_BYTES) out_flush(o);
    }
}

/* room for n bytes at the buffer's end (n <= OUT_BUF_BYTES) */
static uint8_t *out_reserve(out *o, size_t n) {
    if (OUT_BUF_BYTES - o->len < n) out_flush(o);
    uint8_t *p = o->buf + o->len;
    o->len += n;
    return p;
}

static void out_u32(out *o, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    out_bytes(o, b, 4);
}

static void out_u64(out *o, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    out_bytes(o, b, 8);
}

static void out_str(out *o, const char *s) {
    out_u64(o, strlen(s));
    out_bytes(o, s, strlen(s));
}

static void out_pad(out *o, uint64_t pos) {
    static const uint8_t zeros[ALIGNMENT] = {0};
    out_bytes(o, zeros, (size_t)((ALIGNMENT - pos % ALIGNMENT) % ALIGNMENT));
}

/* GGUF value types */
enum { G_U32 = 4, G_F32 = 6, G_STRING = 8 };

static void kv_u32(out *o, const char *key, uint32_t v) { out_str(o, key), out_u32(o, G_U32), out_u32(o, v); }
static void kv_f32(out *o, const char *key, float v) { out_str(o, key), out_u32(o, G_F32), out_u32(o, f32_bits(v)); }
static void kv_str(out *o, const char *key, const char *v) { out_str(o, key), out_u32(o, G_STRING), out_str(o, v); }

/* ---- the tensors' data ---- */

/* The converter's rope_freqs for Llama 3.1 (LlamaModel.generate_extra_tensors). */
static void rope_freqs(const serve_model_config *c, float *dst) {
    const double factor = 8.0, low = 1.0, high = 4.0, old = 8192.0;
    int dim = c->head_dim;
    for (int i = 0; i < dim / 2; i++) {
        double freq = 1.0 / pow(c->rope.theta, (double)(2 * i) / dim);
        double wl = 2.0 * 3.14159265358979323846 / freq;
        if (wl < old / high) dst[i] = 1.0f;
        else if (wl > old / low) dst[i] = (float)factor;
        else {
            double smooth = (old / wl - low) / (high - low);
            dst[i] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
}

/* One row of t into dst (its bytes as t->type), drawn from the row's
 * stream as t->vtype's values. vals: [d0] floats and 256 bytes of scratch. */
static void make_row(const tensor *t, uint64_t *s, uint8_t *dst, float *vals) {
    const uint64_t n = t->d0;
    const uint32_t vtype = t->vtype;
    if (vtype == T_F32 || vtype == T_BF16) {
        float a = 1.7320508f * t->sigma; /* uniform(-a, a): variance sigma^2 */
        for (uint64_t i = 0; i < n; i += 2) {
            uint64_t r = splitmix(s);
            for (uint64_t k = 0; k < 2 && i + k < n; k++) {
                float v = a * unit((r >> (32 * k + 8)) & 0xFFFFFF);
                if (vtype == T_BF16) v = f32_of((uint32_t)bf16_of(v) << 16);
                vals[i + k] = v;
            }
        }
        if (t->type == T_BF16)
            for (uint64_t i = 0; i < n; i++) put16(dst + 2 * i, bf16_of(vals[i]));
        else
            memcpy(dst, vals, (size_t)n * 4); /* little-endian host, as GGUF */
        return;
    }
    int quantized_out = t->type != T_F32;
    uint8_t *blk = quantized_out ? dst : (uint8_t *)(vals + n); /* scratch past the values */
    uint32_t be = vtype == T_Q8_0 ? 32 : 256, bb = vtype == T_Q8_0 ? 34 : vtype == T_Q4_K ? 144 : 210;
    for (uint64_t b = 0; b < n / be; b++) {
        uint8_t *o = quantized_out ? blk + b * bb : blk;
        float *v = quantized_out ? NULL : vals + b * be;
        if (vtype == T_Q8_0) block_q8_0(s, t->sigma, o, v);
        else if (vtype == T_Q4_K) block_q4_k(s, t->sigma, o, v);
        else block_q6_k(s, t->sigma, o, v);
    }
    if (!quantized_out) memcpy(dst, vals, (size_t)n * 4);
}

static void write_tensor(out *o, const plan *p, int index, uint64_t seed, float *vals) {
    const tensor *t = &p->t[index];
    if (t->kind != K_MATRIX) {
        float *v = vals;
        if (t->kind == K_ROPE_FREQS) rope_freqs(&p->mc, v);
        else {
            uint64_t s = row_stream(seed, (uint64_t)index, 0);
            for (uint64_t i = 0; i < t->d0; i++) v[i] = 1.0f + 0.1f * unit(splitmix(&s) >> 40);
        }
        out_bytes(o, v, (size_t)t->d0 * 4);
    } else {
        uint64_t rb = row_bytes(t->type, t->d0);
        for (uint64_t r = 0; r < t->d1 && !o->err; r++) {
            uint64_t s = row_stream(seed, (uint64_t)index, r);
            make_row(t, &s, out_reserve(o, (size_t)rb), vals);
        }
    }
    out_pad(o, t->bytes);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    static const char usage[] =
        "usage: write_gguf --out FILE [options]\n"
        "  --out FILE             the GGUF file to write (FILE.part until complete)\n"
        "  --shape tiny|small|8b  bench_forward's model shapes (default tiny)\n"
        "  --form f32|bf16|q8_0|q4_k_m\n"
        "                         weight types (default f32); q4_k_m: llama.cpp's Q4_K/Q6_K\n"
        "                         choice, shapes with rows of whole 256-value blocks\n"
        "  --seed S               values' seed (default 1): the same bytes for the same seed\n"
        "  --dequantized          matrices as F32 holding the values the form's blocks decode to\n"
        "  --plan                 print the tensors and the file's size, write nothing\n"
        "Exit status: 0 written, 1 a failure (the file is not left behind), 2 a bad command line.\n";
    int shape = 0, form = FORM_F32, dequantized = 0, plan_only = 0;
    const char *path = NULL;
    uint64_t seed = 1;
    cli_option opts[] = {
        {.name = "--out", .type = CLI_STRING, .dest = &path},
        {.name = "--shape", .type = CLI_ENUM, .dest = &shape, .choices = "tiny|small|8b"},
        {.name = "--form", .type = CLI_ENUM, .dest = &form, .choices = "f32|bf16|q8_0|q4_k_m"},
        {.name = "--seed", .type = CLI_U64, .dest = &seed},
        {.name = "--dequantized", .type = CLI_FLAG, .dest = &dequantized},
        {.name = "--plan", .type = CLI_FLAG, .dest = &plan_only},
    };
    int pr = cli_parse(prog, usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv);
    if (pr == CLI_HELP) return 0;
    if (pr != CLI_OK) return pr;
    if (!path && !plan_only) return cli_fail(prog, "--out", "missing: the file to write");
    if (path && plan_only) return cli_fail(prog, "--plan", "writes nothing: drop --out");
    static const char *const shapes[] = {"tiny", "small", "8b"};
    static plan p;
    int st = make_plan(&p, shapes[shape], (enum form)form, dequantized);
    if (st) return st;
    const serve_model_config *c = &p.mc;

    /* the header, built in memory first to know where the data starts */
    out hdr = {.buf = malloc(OUT_BUF_BYTES)};
    if (!hdr.buf) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }
    char gname[96];
    snprintf(gname, sizeof gname, "lazyattn random %s %s%s seed %llu", shapes[shape],
             form_names[form], dequantized ? " dequantized" : "", (unsigned long long)seed);
    int key_length = c->head_dim * c->n_heads != c->hidden;
    out_bytes(&hdr, "GGUF", 4);
    out_u32(&hdr, 3);
    out_u64(&hdr, (uint64_t)p.n);
    out_u64(&hdr, 15 + (key_length ? 2 : 0));
    kv_str(&hdr, "general.architecture", "llama");
    kv_str(&hdr, "general.type", "model");
    kv_str(&hdr, "general.name", gname);
    kv_u32(&hdr, "general.file_type", dequantized ? 0 : form_file_type[form]);
    kv_u32(&hdr, "general.quantization_version", 2);
    kv_u32(&hdr, "llama.block_count", (uint32_t)c->n_layers);
    kv_u32(&hdr, "llama.context_length", 131072);
    kv_u32(&hdr, "llama.embedding_length", (uint32_t)c->hidden);
    kv_u32(&hdr, "llama.feed_forward_length", (uint32_t)c->ffn);
    kv_u32(&hdr, "llama.attention.head_count", (uint32_t)c->n_heads);
    kv_u32(&hdr, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    kv_f32(&hdr, "llama.rope.freq_base", (float)c->rope.theta);
    kv_f32(&hdr, "llama.attention.layer_norm_rms_epsilon", c->rms_eps);
    kv_u32(&hdr, "llama.rope.dimension_count", (uint32_t)c->head_dim);
    kv_u32(&hdr, "llama.vocab_size", (uint32_t)c->vocab);
    if (key_length) {
        kv_u32(&hdr, "llama.attention.key_length", (uint32_t)c->head_dim);
        kv_u32(&hdr, "llama.attention.value_length", (uint32_t)c->head_dim);
    }
    for (int i = 0; i < p.n; i++) {
        const tensor *t = &p.t[i];
        out_str(&hdr, t->name);
        out_u32(&hdr, t->d1 > 1 ? 2 : 1);
        out_u64(&hdr, t->d0);
        if (t->d1 > 1) out_u64(&hdr, t->d1);
        out_u32(&hdr, t->type);
        out_u64(&hdr, t->offset);
    }
    out_pad(&hdr, hdr.len);
    if (hdr.err) { /* never for these shapes: a header of a few KiB */
        fprintf(stderr, "%s: the header does not fit %zu bytes\n", prog, OUT_BUF_BYTES);
        free(hdr.buf);
        return 1;
    }
    const uint64_t total = hdr.len + p.data_bytes;

    if (plan_only) {
        for (int i = 0; i < p.n; i++) {
            const tensor *t = &p.t[i];
            printf("%-28s %-5s [%llu, %llu] %llu bytes\n", t->name, type_name(t->type),
                   (unsigned long long)t->d0, (unsigned long long)t->d1,
                   (unsigned long long)t->bytes);
        }
        printf("%s %s%s: %d tensors, %llu bytes (%.2f GiB)\n", shapes[shape], form_names[form],
               dequantized ? " dequantized" : "", p.n, (unsigned long long)total,
               (double)total / (1u << 30));
        free(hdr.buf);
        return 0;
    }

    char part[4096];
    if (snprintf(part, sizeof part, "%s.part", path) >= (int)sizeof part) {
        free(hdr.buf);
        return cli_fail(prog, "--out", "path too long");
    }
    /* the largest row's values, and (--dequantized) its blocks behind them */
    uint64_t widest = 0;
    for (int i = 0; i < p.n; i++) widest = p.t[i].d0 > widest ? p.t[i].d0 : widest;
    float *vals = malloc((size_t)widest * 4 + 256);
    out o = {.buf = malloc(OUT_BUF_BYTES)};
    FILE *f = vals && o.buf ? fopen(part, "wb") : NULL;
    if (!f) {
        if (vals && o.buf) fprintf(stderr, "%s: cannot create %s: %s\n", prog, part, strerror(errno));
        else fprintf(stderr, "%s: out of memory\n", prog);
        free(vals), free(o.buf), free(hdr.buf);
        return 1;
    }
    setvbuf(f, NULL, _IONBF, 0); /* out's own 64 MiB buffer goes to write(2) whole */
    o.f = f;
    const double t0 = now_s();
    out_bytes(&o, hdr.buf, hdr.len);
    free(hdr.buf);
    for (int i = 0; i < p.n && !o.err; i++) write_tensor(&o, &p, i, seed, vals);
    out_flush(&o);
    if (!o.err && o.written != total) o.err = EIO; /* the plan and the bytes disagree: a bug */
    errno = 0;
    if (fclose(f) != 0 && !o.err) o.err = errno ? errno : EIO;
    free(vals), free(o.buf);
    if (!o.err && rename(part, path) != 0) {
        fprintf(stderr, "%s: cannot rename %s to %s: %s\n", prog, part, path, strerror(errno));
        remove(part);
        return 1;
    }
    if (o.err) {
        fprintf(stderr, "%s: writing %s failed after %llu of %llu bytes: %s (removed)\n", prog,
                part, (unsigned long long)o.written, (unsigned long long)total, strerror(o.err));
        remove(part);
        return 1;
    }
    const double s = now_s() - t0;
    printf("%s: %s %s%s seed %llu, %d tensors, %.1f MiB in %.2f s (%.0f MB/s)\n", path,
           shapes[shape], form_names[form], dequantized ? " dequantized" : "",
           (unsigned long long)seed, p.n, (double)total / (1 << 20), s,
           s > 0 ? (double)total / s / 1e6 : 0.0);
    return 0;
}
