/* SPDX-License-Identifier: Apache-2.0 */
/* ggml tensor types to f32, written from the block layouts of ggml's
 * ggml-common.h and the arithmetic of its dequantize_row_* (ggml-quants.c):
 *   BF16  1 value:  the top 16 bits of an f32
 *   Q8_0  32 values, 34 bytes: f16 d; int8 q[32];          x = d * q
 *   Q4_0  32 values, 18 bytes: f16 d; u8 q[16] (nibbles);  x = d * (q - 8),
 *         low nibbles the first 16 values, high nibbles the last 16
 *   Q4_K  256 values, 144 bytes: f16 d, dmin; u8 scales[12]; u8 q[128]:
 *         8 sub-blocks of 32 with 6-bit scale sc and min m packed in
 *         scales; x = d * sc * q - dmin * m; each 32 bytes of q hold two
 *         sub-blocks (low nibbles, then high nibbles)
 *   Q5_K  256 values, 176 bytes: f16 d, dmin; u8 scales[12]; u8 qh[32];
 *         u8 q[128]: as Q4_K with a fifth bit, bit i of qh[l] for value l
 *         of sub-block i
 *   Q6_K  256 values, 210 bytes: u8 ql[128]; u8 qh[64]; int8 scales[16];
 *         f16 d: 16 sub-blocks of 16, x = d * scale * (q - 32), q 6 bits
 *         (4 from ql, 2 from qh) in two halves of 128 values
 * Each product is its own statement, so that no compiler fuses it into a
 * multiply-add: the values are ggml's to the bit. */
#include "quant.h"
#include "serve.h"

#include <string.h>

typedef struct serve_ggml_traits {
    uint32_t type;
    const char *name;
    uint32_t block_elems, block_bytes; /* 0: a type this reader does not convert */
} serve_ggml_traits;

static const serve_ggml_traits serve_ggml_types[] = {
    {0, "F32", 1, 4},     {1, "F16", 1, 2},      {2, "Q4_0", 32, 18},  {3, "Q4_1", 0, 0},
    {6, "Q5_0", 0, 0},    {7, "Q5_1", 0, 0},     {8, "Q8_0", 32, 34},  {9, "Q8_1", 0, 0},
    {10, "Q2_K", 0, 0},   {11, "Q3_K", 0, 0},    {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210}, {15, "Q8_K", 0, 0},  {16, "IQ2_XXS", 0, 0}, {17, "IQ2_XS", 0, 0},
    {18, "IQ3_XXS", 0, 0}, {19, "IQ1_S", 0, 0},  {20, "IQ4_NL", 0, 0}, {21, "IQ3_S", 0, 0},
    {22, "IQ2_S", 0, 0},  {23, "IQ4_XS", 0, 0},  {24, "I8", 0, 0},     {25, "I16", 0, 0},
    {26, "I32", 0, 0},    {27, "I64", 0, 0},     {28, "F64", 0, 0},    {29, "IQ1_M", 0, 0},
    {30, "BF16", 1, 2},   {34, "TQ1_0", 0, 0},   {35, "TQ2_0", 0, 0},  {39, "MXFP4", 0, 0}};

static const serve_ggml_traits *serve_ggml_find(uint32_t type) {
    for (size_t i = 0; i < sizeof serve_ggml_types / sizeof serve_ggml_types[0]; i++)
        if (serve_ggml_types[i].type == type) return &serve_ggml_types[i];
    return NULL;
}

const char *serve_ggml_type_name(uint32_t type) {
    const serve_ggml_traits *t = serve_ggml_find(type);
    return t ? t->name : "unknown";
}

int serve_ggml_type_supported(uint32_t type) {
    const serve_ggml_traits *t = serve_ggml_find(type);
    return t && t->block_elems;
}

int serve_ggml_row_bytes(uint32_t type, uint64_t n, const char *name, uint64_t *bytes) {
    const serve_ggml_traits *t = serve_ggml_find(type);
    if (!name) name = "(unnamed)";
    if (!t || !t->block_elems)
        return serve_fail(LAZYATTN_STATUS_FORMAT,
                          "GGUF: tensor %s: type %s (%u) not supported (F32, F16, BF16, Q8_0, "
                          "Q4_0, Q4_K, Q5_K, Q6_K)",
                          name, t ? t->name : "unknown", (unsigned)type);
    if (n % t->block_elems != 0)
        return serve_fail(LAZYATTN_STATUS_FORMAT,
                          "GGUF: tensor %s: a row of %llu values is not a whole number of %s "
                          "blocks (%u values each)",
                          name, (unsigned long long)n, t->name, (unsigned)t->block_elems);
    if (bytes) *bytes = n / t->block_elems * t->block_bytes;
    return LAZYATTN_STATUS_OK;
}

float serve_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F, mant = h & 0x3FF, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while ((mant & 0x400) == 0);
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (mant & 0x3FF) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000u | mant << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | mant << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static float serve_f32_of_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static float serve_half_at(const uint8_t *p) {
    return serve_half_to_float((uint16_t)(p[0] | p[1] << 8));
}

/* Q4_K / Q5_K: scale and min of sub-block j (0..7), ggml's get_scale_min_k4 */
static void serve_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void serve_block_q8_0(const uint8_t *b, float *y) {
    float d = serve_half_at(b);
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}

static void serve_block_q4_0(const uint8_t *b, float *y) {
    float d = serve_half_at(b);
    const uint8_t *q = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((q[j] & 0xF) - 8) * d;
        y[j + 16] = (float)((q[j] >> 4) - 8) * d;
    }
}

/* Q4_K (qh == NULL) and Q5_K (qh: the fifth bits) */
static void serve_block_q45_k(const uint8_t *b, const uint8_t *qh, const uint8_t *q, float *y) {
    float d = serve_half_at(b), dmin = serve_half_at(b + 2);
    const uint8_t *scales = b + 4;
    for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
        uint8_t sc, m;
        serve_scale_min_k4(is, scales, &sc, &m);
        float d1 = d * (float)sc, m1 = dmin * (float)m;
        serve_scale_min_k4(is + 1, scales, &sc, &m);
        float d2 = d * (float)sc, m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            int lo = q[l] & 0xF, hi = q[l] >> 4;
            if (qh) {
                lo += ((qh[l] >> is) & 1) << 4;
                hi += ((qh[l] >> (is + 1)) & 1) << 4;
            }
            float a = d1 * (float)lo, c = d2 * (float)hi;
            y[l] = a - m1;
            y[l + 32] = c - m2;
        }
    }
}

static void serve_block_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = serve_half_at(b + 208);
    for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0 & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2 & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
            float s1 = d * (float)sc[is], s2 = d * (float)sc[is + 2], s3 = d * (float)sc[is + 4],
                  s4 = d * (float)sc[is + 6];
            y[l] = s1 * (float)q1;
            y[l + 32] = s2 * (float)q2;
            y[l + 64] = s3 * (float)q3;
            y[l + 96] = s4 * (float)q4;
        }
}

int serve_dequantize(uint32_t type, const void *src, uint64_t src_bytes, float *dst, uint64_t n,
                     const char *name) {
    if (!name) name = "(unnamed)";
    if ((!src && src_bytes) || (!dst && n))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_dequantize: %s: NULL buffer",
                          name);
    uint64_t need;
    int st = serve_ggml_row_bytes(type, n, name, &need);
    if (st) return st;
    if (src_bytes != need)
        return serve_fail(LAZYATTN_STATUS_FORMAT,
                          "GGUF: tensor %s: %llu %s values take %llu bytes, %llu given%s", name,
                          (unsigned long long)n, serve_ggml_type_name(type),
                          (unsigned long long)need, (unsigned long long)src_bytes,
                          src_bytes < need ? " (truncated)" : "");
    const uint8_t *b = src;
    switch (type) {
    case SERVE_GGML_F32:
        memcpy(dst, b, (size_t)n * 4); /* little-endian host, as GGUF */
        break;
    case SERVE_GGML_F16:
        for (uint64_t i = 0; i < n; i++) dst[i] = serve_half_at(b + 2 * i);
        break;
    case SERVE_GGML_BF16:
        for (uint64_t i = 0; i < n; i++)
            dst[i] = serve_f32_of_bits((uint32_t)(b[2 * i] | b[2 * i + 1] << 8) << 16);
        break;
    case SERVE_GGML_Q8_0:
        for (uint64_t i = 0; i < n / 32; i++) serve_block_q8_0(b + 34 * i, dst + 32 * i);
        break;
    case SERVE_GGML_Q4_0:
        for (uint64_t i = 0; i < n / 32; i++) serve_block_q4_0(b + 18 * i, dst + 32 * i);
        break;
    case SERVE_GGML_Q4_K:
        for (uint64_t i = 0; i < n / 256; i++)
            serve_block_q45_k(b + 144 * i, NULL, b + 144 * i + 16, dst + 256 * i);
        break;
    case SERVE_GGML_Q5_K:
        for (uint64_t i = 0; i < n / 256; i++)
            serve_block_q45_k(b + 176 * i, b + 176 * i + 16, b + 176 * i + 48, dst + 256 * i);
        break;
    case SERVE_GGML_Q6_K:
        for (uint64_t i = 0; i < n / 256; i++) serve_block_q6_k(b + 210 * i, dst + 256 * i);
        break;
    default: /* serve_ggml_row_bytes refused it */
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: tensor %s: type %u not supported", name,
                          (unsigned)type);
    }
    return LAZYATTN_STATUS_OK;
}
