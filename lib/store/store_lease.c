/* SPDX-License-Identifier: Apache-2.0 */
/* The leases a store object holds (store_internal.h, "leases"): which
 * owner (cache) took which document's lease, so that only its owner gives
 * it back; how long leases are usually held; and the rule that decides how
 * long a busy lease may be waited for. The stores' own operations
 * (store_dir.c, store_redis.c) take and give back one lease; this file
 * books them. */
#include "mix64.h"
#include "store/store_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct lz_lease_held {
    const void *owner;
    lazyattn_doc_key key;
    int64_t taken_us; /* CLOCK_MONOTONIC */
} lz_lease_held;

/* The default TTL: longer than any one request's prefill, short enough
 * that a killed leaseholder stalls the others only briefly. */
#define LZ_LEASE_DEFAULT_MS 10000
/* The hold time assumed before one was measured. */
#define LZ_LEASE_FIRST_HOLD_US 100000

static lz_log_rate lz_rate_release;

static int64_t lz_lease_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static uint64_t lz_lease_token(const void *b) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t t = lz_mix64((uint64_t)getpid() ^ lz_mix64((uint64_t)ts.tv_nsec ^
                                                      ((uint64_t)ts.tv_sec << 30) ^
                                                      (uint64_t)(uintptr_t)b));
    return t ? t : 1;
}

int lz_lease_book_init(lz_lease_book *b, const lz_store_lease_ops *ops, void *impl) {
    memset(b, 0, sizeof *b);
    if (lz_mutex_init(&b->lock) != 0)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "store lease: no mutex");
    b->ops = ops;
    b->impl = impl;
    b->token = lz_lease_token(b);
    b->ttl_ms = ops ? LZ_LEASE_DEFAULT_MS : 0;
    b->hold_us = LZ_LEASE_FIRST_HOLD_US;
    return LAZYATTN_STATUS_OK;
}

void lz_lease_book_free(lz_lease_book *b) {
    for (int i = 0; i < b->n_held; i++) b->ops->release(b->impl, b->held[i].key, b->token);
    free(b->held);
    b->held = NULL;
    b->n_held = b->cap_held = 0;
    lz_mutex_destroy(&b->lock);
}

static int lz_lease_book_grow(lz_lease_book *b) {
    int cap = b->cap_held ? 2 * b->cap_held : 8;
    lz_lease_held *h = realloc(b->held, (size_t)cap * sizeof *h);
    if (!h) return 0;
    b->held = h;
    b->cap_held = cap;
    return 1;
}

int lz_lease_ms(lz_lease_book *b) {
    if (!b || !b->ops) return 0;
    lz_mutex_lock(&b->lock);
    int ms = b->ttl_ms;
    lz_mutex_unlock(&b->lock);
    return ms;
}

static int lz_key_equal(lazyattn_doc_key a, lazyattn_doc_key b) {
    return a.model_id == b.model_id && !memcmp(a.digest, b.digest, sizeof a.digest);
}

lz_lease_answer lz_lease_take(lz_lease_book *b, const void *owner, lazyattn_doc_key key,
                              int *wait_ms) {
    *wait_ms = 0;
    if (!b || !b->ops) return LZ_LEASE_NONE;
    lz_mutex_lock(&b->lock);
    int ttl = b->ttl_ms, owner_holds = 0, mine = 0;
    int64_t hold_us = b->hold_us;
    for (int i = 0; i < b->n_held; i++) {
        owner_holds += b->held[i].owner == owner;
        mine |= lz_key_equal(b->held[i].key, key);
    }
    if (!ttl || (!mine && b->n_held == b->cap_held && !lz_lease_book_grow(b))) {
        lz_mutex_unlock(&b->lock);
        return LZ_LEASE_NONE; /* off, or no memory to book it: compute without */
    }
    lz_mutex_unlock(&b->lock);
    /* This store object holds it already (another cache on it): computing
     * it here too is what happened before leases; never wait for oneself. */
    if (mine) return LZ_LEASE_BUSY;
    int held = 0;
    uint64_t holder = 0;
    int st = b->ops->acquire(b->impl, key, b->token, ttl, &held, &holder);
    if (st) return LZ_LEASE_FAILED;
    if (!held) {
        if (holder == b->token) return LZ_LEASE_BUSY;
        if (!owner_holds || (holder && holder < b->token)) {
            *wait_ms = ttl; /* cannot close a cycle */
        } else { /* might: at most twice the usual hold, then compute */
            int64_t ms = 2 * hold_us / 1000 + 1;
            *wait_ms = ms < ttl ? (int)ms : ttl;
        }
        return LZ_LEASE_WAIT;
    }
    lz_mutex_lock(&b->lock);
    b->held[b->n_held++] = (lz_lease_held){owner, key, lz_lease_now_us()};
    lz_mutex_unlock(&b->lock);
    return LZ_LEASE_HELD;
}

int lz_lease_give(lz_lease_book *b, const void *owner, lazyattn_doc_key key, int written) {
    if (!b || !b->ops) return 0;
    int found = 0;
    lz_mutex_lock(&b->lock);
    for (int i = 0; i < b->n_held && !found; i++)
        if (b->held[i].owner == owner && lz_key_equal(b->held[i].key, key)) {
            if (written) /* a running mean over about the last 8 */
                b->hold_us += (lz_lease_now_us() - b->held[i].taken_us - b->hold_us) / 8;
            b->held[i] = b->held[--b->n_held];
            found = 1;
        }
    lz_mutex_unlock(&b->lock);
    /* a failure leaves the lease to expire: the others wait at most its TTL */
    if (found && b->ops->release(b->impl, key, b->token))
        lz_log_rated(NULL, &lz_rate_release, "tier: a lease not given back (it expires): %s",
                     lazyattn_last_error());
    return found;
}
