/* SPDX-License-Identifier: Apache-2.0 */
/* The tier's side of leases (tier_lease.c): what doc_tier.c does on a
 * miss, after a write and when an entry is dropped unwritten. Not
 * installed. */
#ifndef LAZYATTN_TIER_LEASE_H
#define LAZYATTN_TIER_LEASE_H

#include "cache/cache_internal.h"

/* The store had no copy of key: with a write-through tier on a store with
 * leases, takes the document's lease (this cache computes it) or waits
 * for another holder's write. 1 when the document is in the store now
 * (the caller reads it again); 0 when the caller computes it. Counted in t. */
int lz_tier_lease_miss(lazyattn_cache *c, lazyattn_store *store, lazyattn_doc_key key,
                       lz_tally *t);
/* key's document was computed and written (written 1: found written too),
 * or could not be (0): gives back this cache's lease of it, if any. */
void lz_tier_lease_done(lazyattn_cache *c, lazyattn_store *store, lazyattn_doc_key key,
                        int written);
/* lz_tier_ops.abandon. */
void lz_tier_lease_abandon(lazyattn_cache *c, lazyattn_store *store, const lz_entry *e);

#endif
