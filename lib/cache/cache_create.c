/* SPDX-License-Identifier: Apache-2.0 */
/* lazyattn_cache_create: a configuration checked against its pool and its
 * policy looked up in the table (policy_table.c), then the cache made
 * (doc_cache.c). Above the policies, which call the cache. */
#include "cache/cache_policy.h"

#include <stdint.h>

int lazyattn_cache_create(lazyattn_pool *pool, const lazyattn_cache_config *config,
                          lazyattn_cache **out) {
    LZ_CHECK_ARG(out != NULL, "lazyattn_cache_create: out is NULL");
    *out = NULL;
    LZ_CHECK_ARG(pool != NULL, "lazyattn_cache_create: pool is NULL");
    lazyattn_pool_config pc;
    lazyattn_pool_info info;
    int st = lazyattn_pool_get_info(pool, &info); /* refuses a handle that is not a live pool */
    if (st) return st;
    lazyattn_cache_config cfg;
    lazyattn_cache_config_init(&cfg);
    if (config) cfg = *config;
    LZ_CHECK_ARG(lazyattn_cache_policy_name(cfg.policy) != NULL,
                 "lazyattn_cache_create: unknown policy %d", (int)cfg.policy);
    lazyattn_pool_get_config(pool, &pc);
    /* Plans name token slots as int32 block * block_size + offset. */
    if (info.n_blocks * pc.block_size > (int64_t)INT32_MAX + 1)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                       "lazyattn_cache_create: the pool's %lld blocks of %d tokens have slots "
                       "past INT32_MAX (at most %lld blocks)",
                       (long long)info.n_blocks, pc.block_size,
                       ((long long)INT32_MAX + 1) / pc.block_size);
    return lz_cache_new(pool, &cfg, lz_policy_get(cfg.policy), out);
}
