/* SPDX-License-Identifier: Apache-2.0 */
/* Leases on the tier's misses: of the processes that miss one document at
 * once, the one holding its lease computes it and the others wait for its
 * write, then load it.
 *
 * The wait is synchronous, inside the planner (lazyattn_request_create):
 * the cache is single-threaded and the planner has no way to hand a
 * request back as "pending elsewhere", so a waiting process's serving
 * loop stalls until the document appears, the holder gives the lease back
 * unwritten (then this cache takes it and computes), or the lease's TTL
 * runs out (a killed holder). The cost is about one prefill of the
 * holder's request per wait, against one prefill of the document and the
 * GPU memory and compute it would take; the bound is the TTL. A cache
 * that holds leases itself and meets a holder of a higher token (which may
 * be waiting for it: two processes each holding what the other misses)
 * waits only about twice the usual hold time (store_lease.c), then
 * computes, so no cycle of waits lasts the TTL. */
#include "store/tier_lease.h"
#include "store/store_internal.h"

#include <string.h>
#include <time.h>

static int64_t lz_mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void lz_sleep_us(int64_t us) {
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static lz_log_rate lz_rate_lease_poll, lz_rate_lease;

/* Whether key's document is in the store now: 1, 0, or -1 when the store
 * failed (warned once a kind). */
static int lz_tier_there(lazyattn_cache *c, lazyattn_store *store, lazyattn_doc_key key) {
    int there = 0;
    const char *outer = lz_cache_callout_begin(c, "the tier store's exists");
    int st = lazyattn_store_exists(store, key, &there);
    lz_cache_callout_end(c, outer);
    if (st) {
        lz_log_rated(lz_pool_context(lz_cache_pool(c)), &lz_rate_lease_poll,
                     "tier: looking for a document another process computes: %s; computing it",
                     lazyattn_last_error());
        return -1;
    }
    return there;
}

/* The lease is this cache's: unless the document was written between the
 * caller's miss and the lease (its holder wrote it and gave the lease
 * back), 0: compute it. Else the lease is given back and 1: load it. */
static int lz_tier_leased(lazyattn_cache *c, lazyattn_store *store, lazyattn_doc_key key,
                          lz_tally *t) {
    if (lz_tier_there(c, store, key) != 1) {
        t->tier_leases++;
        return 0;
    }
    lz_lease_give(lz_store_lease_book(store), c, key, 0);
    return 1;
}

int lz_tier_lease_miss(lazyattn_cache *c, lazyattn_store *store, lazyattn_doc_key key,
                       lz_tally *t) {
    lazyattn_tier_mode mode;
    lz_cache_tier(c, &mode, NULL);
    lz_lease_book *book = lz_store_lease_book(store);
    int ttl_ms = lz_lease_ms(book);
    if (mode != LAZYATTN_TIER_WRITE_THROUGH || ttl_ms == 0) return 0;
    int wait_ms;
    lz_lease_answer a = lz_lease_take(book, c, key, &wait_ms);
    if (a == LZ_LEASE_HELD) return lz_tier_leased(c, store, key, t);
    if (a == LZ_LEASE_FAILED)
        lz_log_rated(lz_pool_context(lz_cache_pool(c)), &lz_rate_lease,
                     "tier: no lease on a missed document: %s; computing it",
                     lazyattn_last_error());
    if (a != LZ_LEASE_WAIT) return 0;
    t->tier_lease_waits++;
    /* Polls with a backoff from 1 ms to 20 ms: a write lands about one
     * prefill after the lease was taken. The holder's lease lives at most
     * ttl_ms from now, so the wait does too (wait_ms <= ttl_ms). */
    int64_t start = lz_mono_us(), deadline = start + (int64_t)wait_ms * 1000, step = 1000;
    int found = 0;
    while (lz_mono_us() < deadline) {
        lz_sleep_us(step);
        step = step * 2 > 20000 ? 20000 : step * 2;
        int there = lz_tier_there(c, store, key);
        if (there < 0) break;
        if (there) {
            found = 1;
            break;
        }
        int ignored;
        a = lz_lease_take(book, c, key, &ignored);
        if (a == LZ_LEASE_HELD) { /* given back unwritten, or expired */
            found = lz_tier_leased(c, store, key, t);
            if (!found) t->tier_lease_takeovers++;
            break;
        }
        if (a == LZ_LEASE_NONE || a == LZ_LEASE_FAILED) break;
    }
    t->tier_lease_waited_loads += found;
    t->tier_lease_wait_us += lz_mono_us() - start;
    return found;
}

void lz_tier_lease_done(lazyattn_cache *c, lazyattn_store *store, lazyattn_doc_key key,
                        int written) {
    lz_lease_give(lz_store_lease_book(store), c, key, written);
}

void lz_tier_lease_abandon(lazyattn_cache *c, lazyattn_store *store, const lz_entry *e) {
    lazyattn_doc_key key = {lz_cache_model_id(c), {0}};
    memcpy(key.digest, e->digest, sizeof key.digest);
    lz_lease_give(lz_store_lease_book(store), c, key, 0);
}
