/* SPDX-License-Identifier: Apache-2.0 */
/* The host-memory store: values copied into malloc'ed memory, or into the
 * pinned memory a tier gave it (pinned_arena.h), least recently used
 * evicted to stay under a byte budget, one mutex. A value a reader
 * borrowed stays alive (reference counted) after its eviction or
 * replacement until released. A tier's writer may reserve a value's
 * memory, fill it and put it without a copy (lz_store_host_reserve). */
#include "store/pinned_arena.h"
#include "store/store_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct lz_host_item {
    lazyattn_doc_key key;
    uint8_t *data;
    size_t size;
    int refs;       /* readers holding it */
    int sealed;     /* put by lz_store_host_put_sealed (set before it is linked) */
    int linked;     /* in the index and the LRU list */
    int pinned;     /* data is the store's arena's */
    struct lz_host_item *hnext;
    struct lz_host_item *prev, *next; /* LRU: head.next = most recent */
} lz_host_item;

typedef struct lz_host {
    lz_mutex lock;
    uint64_t budget, bytes; /* bytes of linked items */
    lz_pinned_arena *arena; /* values' pinned memory (a reference), NULL: none */
    lz_host_item **buckets;
    size_t n_buckets, n_items;
    lz_host_item lru; /* sentinel */
} lz_host;

static size_t lz_host_bucket(const lz_host *h, lazyattn_doc_key k) {
    uint64_t x = k.model_id * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 8; i++) x ^= (uint64_t)k.digest[i] << (8 * i);
    x ^= x >> 31;
    return (size_t)(x & (h->n_buckets - 1));
}

static lz_host_item *lz_host_find(const lz_host *h, lazyattn_doc_key k) {
    for (lz_host_item *it = h->buckets[lz_host_bucket(h, k)]; it; it = it->hnext)
        if (it->key.model_id == k.model_id && memcmp(it->key.digest, k.digest, 32) == 0) return it;
    return NULL;
}

static void lz_host_free_item(lz_host *h, lz_host_item *it) {
    if (it->pinned)
        lz_arena_free(h->arena, it->data);
    else
        free(it->data);
    free(it);
}

/* Out of the index and the LRU; freed now unless a reader holds it. */
static void lz_host_unlink(lz_host *h, lz_host_item *it) {
    lz_host_item **p = &h->buckets[lz_host_bucket(h, it->key)];
    while (*p != it) p = &(*p)->hnext;
    *p = it->hnext;
    it->prev->next = it->next;
    it->next->prev = it->prev;
    it->linked = 0;
    h->n_items--;
    h->bytes -= it->size;
    if (it->refs == 0) lz_host_free_item(h, it);
}

static void lz_host_touch(lz_host *h, lz_host_item *it) {
    it->prev->next = it->next;
    it->next->prev = it->prev;
    it->next = h->lru.next;
    it->prev = &h->lru;
    h->lru.next->prev = it;
    h->lru.next = it;
}

/* Best effort: a full table only gets longer chains. */
static void lz_host_grow(lz_host *h) {
    size_t n = h->n_buckets * 2;
    lz_host_item **b = calloc(n, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < h->n_buckets; i++)
        for (lz_host_item *it = h->buckets[i], *next; it; it = next) {
            next = it->hnext;
            size_t old = h->n_buckets;
            h->n_buckets = n;
            size_t j = lz_host_bucket(h, it->key);
            h->n_buckets = old;
            it->hnext = b[j];
            b[j] = it;
        }
    free(h->buckets);
    h->buckets = b;
    h->n_buckets = n;
}

/* NOT_FOUND for a get or remove of a key the store does not hold, the key in the message. */
static int lz_host_not_found(lazyattn_doc_key key) {
    char t[LZ_STORE_KEY_TEXT];
    lz_store_key_text(key, t);
    return lz_fail(LAZYATTN_STATUS_NOT_FOUND, "host store: no document %s", t);
}

static int lz_host_get(void *impl, lazyattn_doc_key key, lazyattn_store_value *v) {
    lz_host *h = impl;
    lz_mutex_lock(&h->lock);
    lz_host_item *it = lz_host_find(h, key);
    if (it) {
        it->refs++;
        lz_host_touch(h, it);
        v->data = it->data;
        v->size = it->size;
        v->handle = it;
    }
    lz_mutex_unlock(&h->lock);
    return it ? LAZYATTN_STATUS_OK : lz_host_not_found(key);
}

static void lz_host_release(void *impl, lazyattn_store_value *v) {
    lz_host *h = impl;
    lz_host_item *it = v->handle;
    if (!it) return;
    lz_mutex_lock(&h->lock);
    if (--it->refs == 0 && !it->linked) lz_host_free_item(h, it);
    lz_mutex_unlock(&h->lock);
}

/* Memory for a value of size bytes, unlinked: the arena's where a run is
 * free (the least recently used values evicted until one is), else
 * malloc'ed; NULL without memory. The lock not held. */
static lz_host_item *lz_host_new_item(lz_host *h, size_t size) {
    lz_host_item *it = calloc(1, sizeof *it);
    if (!it) return NULL;
    it->size = size;
    lz_mutex_lock(&h->lock);
    if (h->arena && size > 0 && size <= lz_arena_largest(h->arena)) {
        while (!(it->data = lz_arena_alloc(h->arena, size)) && h->lru.prev != &h->lru)
            lz_host_unlink(h, h->lru.prev); /* a borrowed one frees its run when released */
        it->pinned = it->data != NULL;
    }
    lz_mutex_unlock(&h->lock);
    if (!it->data && !(it->data = malloc(size ? size : 1))) {
        free(it);
        return NULL;
    }
    return it;
}

/* Links item it (unlinked, its value written) under key, replacing the
 * value there and evicting the least recently used to stay in budget. */
static void lz_host_link(lz_host *h, lazyattn_doc_key key, lz_host_item *it, int sealed) {
    it->key = key;
    it->sealed = sealed;
    lz_mutex_lock(&h->lock);
    lz_host_item *old = lz_host_find(h, key);
    if (old) lz_host_unlink(h, old);
    while (h->bytes + it->size > h->budget) lz_host_unlink(h, h->lru.prev);
    if (h->n_items >= h->n_buckets) lz_host_grow(h);
    size_t b = lz_host_bucket(h, key);
    it->hnext = h->buckets[b];
    h->buckets[b] = it;
    it->next = h->lru.next;
    it->prev = &h->lru;
    h->lru.next->prev = it;
    h->lru.next = it;
    it->linked = 1;
    h->n_items++;
    h->bytes += it->size;
    lz_mutex_unlock(&h->lock);
}

static int lz_host_over_budget(const lz_host *h, size_t size) {
    if (size <= h->budget) return LAZYATTN_STATUS_OK;
    return lz_fail(LAZYATTN_STATUS_BUDGET_EXCEEDED,
                   "host store: a value of %zu bytes, the budget is %llu", size,
                   (unsigned long long)h->budget);
}

static int lz_host_put_item(void *impl, lazyattn_doc_key key, const void *data, size_t size,
                            int sealed) {
    lz_host *h = impl;
    int st = lz_host_over_budget(h, size);
    if (st) return st;
    lz_host_item *it = lz_host_new_item(h, size);
    if (!it) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "host store: %zu bytes", size);
    if (size) memcpy(it->data, data, size);
    lz_host_link(h, key, it, sealed);
    return LAZYATTN_STATUS_OK;
}

uint8_t *lz_store_host_reserve(void *impl, size_t size, cl_context context, void **item,
                               int *pinned) {
    lz_host *h = impl;
    *item = NULL;
    *pinned = 0;
    if (lz_host_over_budget(h, size)) return NULL;
    lz_host_item *it = lz_host_new_item(h, size);
    if (!it) {
        lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "host store: %zu bytes", size);
        return NULL;
    }
    *pinned = it->pinned && lz_arena_context(h->arena) == context;
    *item = it;
    return it->data;
}

void lz_store_host_put_reserved(void *impl, lazyattn_doc_key key, void *item) {
    lz_host_link(impl, key, item, 1);
}

void lz_store_host_unreserve(void *impl, void *item) {
    if (item) lz_host_free_item(impl, item);
}

int lz_store_host_use_arena(void *impl, lz_pinned_arena *arena) {
    lz_host *h = impl;
    lz_mutex_lock(&h->lock);
    if (!h->arena) {
        lz_arena_retain(arena);
        h->arena = arena;
    }
    int same = lz_arena_context(h->arena) == lz_arena_context(arena);
    lz_mutex_unlock(&h->lock);
    return same;
}

int lz_store_host_has_arena(void *impl, cl_context context) {
    lz_host *h = impl;
    lz_mutex_lock(&h->lock);
    int has = h->arena && (!context || lz_arena_context(h->arena) == context);
    lz_mutex_unlock(&h->lock);
    return has;
}

uint64_t lz_store_host_budget(void *impl) { return ((lz_host *)impl)->budget; }

int lz_store_host_value_pinned(void *impl, const lazyattn_store_value *v, cl_context context) {
    lz_host *h = impl;
    const lz_host_item *it = v->handle;
    return it && it->pinned && lz_arena_context(h->arena) == context;
}

static int lz_host_put(void *impl, lazyattn_doc_key key, const void *data, size_t size) {
    return lz_host_put_item(impl, key, data, size, 0);
}

int lz_store_host_put_sealed(void *impl, lazyattn_doc_key key, const void *data, size_t size) {
    return lz_host_put_item(impl, key, data, size, 1);
}

/* v: handed out by lz_host_get and not yet released (its item alive). */
int lz_store_host_value_sealed(const lazyattn_store_value *v) {
    const lz_host_item *it = v->handle;
    return it && it->sealed;
}

static int lz_host_exists(void *impl, lazyattn_doc_key key, int *exists) {
    lz_host *h = impl;
    lz_mutex_lock(&h->lock);
    *exists = lz_host_find(h, key) != NULL;
    lz_mutex_unlock(&h->lock);
    return LAZYATTN_STATUS_OK;
}

static int lz_host_remove(void *impl, lazyattn_doc_key key) {
    lz_host *h = impl;
    lz_mutex_lock(&h->lock);
    lz_host_item *it = lz_host_find(h, key);
    if (it) lz_host_unlink(h, it);
    lz_mutex_unlock(&h->lock);
    return it ? LAZYATTN_STATUS_OK : lz_host_not_found(key);
}

/* Values still borrowed at destroy are leaked to their readers' release,
 * which must not come: the header forbids a destroy racing other use. */
static void lz_host_destroy(void *impl) {
    lz_host *h = impl;
    if (!h) return;
    while (h->lru.next != &h->lru) {
        lz_host_item *it = h->lru.next;
        it->refs = 0;
        lz_host_unlink(h, it);
    }
    free(h->buckets);
    lz_arena_release(h->arena);
    lz_mutex_destroy(&h->lock);
    free(h);
}

int lz_store_host_open(uint64_t budget_bytes, void **impl) {
    *impl = NULL;
    lz_host *h = calloc(1, sizeof *h);
    if (!h) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_store_create_host");
    h->n_buckets = 64;
    h->buckets = calloc(h->n_buckets, sizeof *h->buckets);
    if (!h->buckets || lz_mutex_init(&h->lock) != 0) {
        free(h->buckets);
        free(h);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_store_create_host");
    }
    h->budget = budget_bytes;
    h->lru.next = h->lru.prev = &h->lru;
    *impl = h;
    return LAZYATTN_STATUS_OK;
}

const lazyattn_store_ops lz_store_host_ops = {"host",         lz_host_get,    lz_host_release,
                                              lz_host_put,    lz_host_exists, lz_host_remove,
                                              lz_host_destroy};
