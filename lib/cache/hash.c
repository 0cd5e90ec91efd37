/* SPDX-License-Identifier: Apache-2.0 */
/* Hashing of token sequences: document identities (BLAKE2b, what leaves
 * the process) and the in-process prefix-chain keys. */
#include "cache/cache_internal.h"

#include <blake2.h>

/* Two tokens per step through the finaliser; the length closes the chain so
 * that a sequence and its zero-extended prefix differ. */
uint64_t lz_hash_tokens(uint64_t seed, const int32_t *tokens, int n) {
    uint64_t h = lz_mix64(seed ^ 0x6A09E667F3BCC909ull);
    int i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t w = (uint64_t)(uint32_t)tokens[i] | ((uint64_t)(uint32_t)tokens[i + 1] << 32);
        h = lz_mix64(h ^ w) + 0x9E3779B97F4A7C15ull;
    }
    if (i < n) h = lz_mix64(h ^ (uint64_t)(uint32_t)tokens[i]) + 0x9E3779B97F4A7C15ull;
    return lz_mix64(h ^ ((uint64_t)(uint32_t)n * 0xD6E8FEB86659FD93ull));
}

/* BLAKE2b-256 (unkeyed) of model_id as 8 bytes little-endian, then each
 * token as 4 bytes little-endian (include/lazyattn.h, lazyattn_doc_digest). */
void lz_doc_digest(uint64_t model_id, const int32_t *tokens, int n, uint8_t out[32]) {
    blake2b_state s;
    uint8_t le[256];
    blake2b_init(&s, 32);
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(model_id >> (8 * i));
    blake2b_update(&s, le, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    blake2b_update(&s, (const uint8_t *)tokens, (size_t)n * 4);
#else
    for (int i = 0; i < n;) {
        int k = 0;
        for (; k < (int)sizeof le / 4 && i < n; k++, i++)
            for (int b = 0; b < 4; b++) le[4 * k + b] = (uint8_t)((uint32_t)tokens[i] >> (8 * b));
        blake2b_update(&s, le, (size_t)k * 4);
    }
#endif
    blake2b_final(&s, out, 32);
}

uint64_t lz_digest_hash(const uint8_t digest[32]) {
    uint64_t h = 0;
    for (int i = 0; i < 8; i++) h |= (uint64_t)digest[i] << (8 * i);
    return h;
}

uint64_t lz_doc_hash(uint64_t model_id, const int32_t *tokens, int n, uint8_t digest[32]) {
    lz_doc_digest(model_id, tokens, n, digest);
    return lz_digest_hash(digest);
}

int lazyattn_doc_hash(uint64_t model_id, const int32_t *tokens, int n_tokens, uint64_t *hash) {
    LZ_CHECK_ARG(hash != NULL, "lazyattn_doc_hash: hash is NULL");
    LZ_CHECK_ARG(n_tokens >= 1, "lazyattn_doc_hash: n_tokens %d < 1", n_tokens);
    LZ_CHECK_ARG(tokens != NULL, "lazyattn_doc_hash: tokens is NULL");
    uint8_t d[32];
    *hash = lz_doc_hash(model_id, tokens, n_tokens, d);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_doc_digest(uint64_t model_id, const int32_t *tokens, int n_tokens,
                        uint8_t digest[32]) {
    LZ_CHECK_ARG(digest != NULL, "lazyattn_doc_digest: digest is NULL");
    LZ_CHECK_ARG(n_tokens >= 1, "lazyattn_doc_digest: n_tokens %d < 1", n_tokens);
    LZ_CHECK_ARG(tokens != NULL, "lazyattn_doc_digest: tokens is NULL");
    lz_doc_digest(model_id, tokens, n_tokens, digest);
    return LAZYATTN_STATUS_OK;
}
