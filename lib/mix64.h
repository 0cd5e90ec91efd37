/* SPDX-License-Identifier: Apache-2.0 */
/* splitmix64's finaliser and the pair hash built on it: the cache's
 * in-process keys (cache/) and the workload generator's random streams
 * (testing/). Not installed. */
#ifndef LAZYATTN_MIX64_H
#define LAZYATTN_MIX64_H

#include <stdint.h>

/* splitmix64's finaliser: a bijection with full avalanche. */
static inline uint64_t lz_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

/* Hash of two words. */
static inline uint64_t lz_hash_pair(uint64_t a, uint64_t b) {
    return lz_mix64(lz_mix64(a ^ 0x9E3779B97F4A7C15ull) + b);
}

#endif
