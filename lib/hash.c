/* SPDX-License-Identifier: Apache-2.0 */
/* Hashing of token sequences: document keys and prefix-chain keys. */
#include "cache_internal.h"

/* splitmix64's finaliser: a bijection with full avalanche. */
uint64_t lz_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

uint64_t lz_hash_pair(uint64_t a, uint64_t b) {
    return lz_mix64(lz_mix64(a ^ 0x9E3779B97F4A7C15ull) + b);
}

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

int lazyattn_doc_hash(uint64_t model_id, const int32_t *tokens, int n_tokens, uint64_t *hash) {
    LZ_CHECK_ARG(hash != NULL, "lazyattn_doc_hash: hash is NULL");
    LZ_CHECK_ARG(n_tokens >= 1, "lazyattn_doc_hash: n_tokens %d < 1", n_tokens);
    LZ_CHECK_ARG(tokens != NULL, "lazyattn_doc_hash: tokens is NULL");
    *hash = lz_hash_tokens(model_id, tokens, n_tokens);
    return LAZYATTN_STATUS_OK;
}
