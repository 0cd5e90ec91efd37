/* SPDX-License-Identifier: Apache-2.0 */
/* The policy table: a policy's operations by its id. A new policy is one
 * file policy_<name>.c and one line here. Only a cache's creation looks a
 * policy up (cache_create.c); everything else asks the cache for its own
 * (lz_cache_policy). */
#include "cache/cache_policy.h"

const lz_policy *lz_policy_get(lazyattn_cache_policy id) {
    switch (id) {
    case LAZYATTN_CACHE_POLICY_LAZY: return &lz_policy_lazy;
    case LAZYATTN_CACHE_POLICY_POSITION: return &lz_policy_position;
    case LAZYATTN_CACHE_POLICY_PREFIX: return &lz_policy_prefix;
    case LAZYATTN_CACHE_POLICY_NONE: return &lz_policy_none;
    }
    return NULL;
}
