/* SPDX-License-Identifier: Apache-2.0 */
/* The store interface (include/lazyattn.h, "document stores"): a checked
 * wrapper around a table of functions, so every store, the library's and
 * an engine's, is called the same way. */
#include "store/store_internal.h"

#include <stdlib.h>
#include <string.h>

struct lazyattn_store {
    uint32_t magic; /* LZ_MAGIC_STORE while live */
    lazyattn_store_ops ops;
    void *impl;
    int private_values; /* lz_store_values_private */
    int host;           /* the host store: lz_store_put_sealed / _value_sealed */
    int has_book;       /* book initialised (the library's stores) */
    lz_lease_book book; /* store_lease.c */
};

int lazyattn_store_create(const lazyattn_store_ops *ops, void *impl, lazyattn_store **out) {
    LZ_CHECK_ARG(out != NULL, "lazyattn_store_create: out is NULL");
    *out = NULL;
    LZ_CHECK_ARG(ops != NULL, "lazyattn_store_create: ops is NULL");
    LZ_CHECK_ARG(ops->get && ops->release && ops->put && ops->exists && ops->remove,
                 "lazyattn_store_create: ops lacks get, release, put, exists or remove");
    lazyattn_store *s = calloc(1, sizeof *s);
    if (!s) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_store_create");
    s->magic = LZ_MAGIC_STORE;
    s->ops = *ops;
    if (!s->ops.name) s->ops.name = "store";
    s->impl = impl;
    *out = s;
    return LAZYATTN_STATUS_OK;
}

/* Wraps a built-in store's state (with its lease operations, or NULL);
 * destroys it when the wrapper cannot be made. */
static int lz_store_wrap(const lazyattn_store_ops *ops, const lz_store_lease_ops *lease,
                         void *impl, lazyattn_store **out) {
    int st = lazyattn_store_create(ops, impl, out);
    if (!st && (st = lz_lease_book_init(&(*out)->book, lease, impl)) != 0) {
        free(*out);
        *out = NULL;
    }
    if (st)
        ops->destroy(impl);
    else
        (*out)->private_values = (*out)->has_book = 1;
    return st;
}

lz_lease_book *lz_store_lease_book(lazyattn_store *s) { return s->has_book ? &s->book : NULL; }

int lz_store_values_private(const lazyattn_store *s) { return s->private_values; }

int lazyattn_store_create_host(uint64_t budget_bytes, lazyattn_store **out) {
    LZ_CHECK_ARG(out != NULL, "lazyattn_store_create_host: out is NULL");
    *out = NULL;
    LZ_CHECK_ARG(budget_bytes >= 1, "lazyattn_store_create_host: a budget of 0 bytes");
    void *impl;
    int st = lz_store_host_open(budget_bytes, &impl);
    if (!st) st = lz_store_wrap(&lz_store_host_ops, NULL, impl, out);
    if (!st) (*out)->host = 1;
    return st;
}

int lazyattn_store_create_dir(const char *path, lazyattn_store **out) {
    LZ_CHECK_ARG(out != NULL, "lazyattn_store_create_dir: out is NULL");
    *out = NULL;
    LZ_CHECK_ARG(path != NULL && path[0] != '\0', "lazyattn_store_create_dir: no path");
    void *impl;
    int st = lz_store_dir_open(path, &impl);
    return st ? st : lz_store_wrap(&lz_store_dir_ops, &lz_store_dir_lease_ops, impl, out);
}

void lazyattn_redis_config_init(lazyattn_redis_config *c) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 6379;
    c->timeout_ms = 2000;
    c->chunk_bytes = (size_t)4 << 20;
    c->prefix = "lazyattn";
    c->retry_ms = 1000;
    c->url = NULL;
    c->user = NULL;
    c->password = NULL;
}

int lazyattn_redis_url_check(const char *url) {
    LZ_CHECK_ARG(url != NULL, "lazyattn_redis_url_check: url is NULL");
    lz_redis_url u;
    int st = lz_redis_url_parse(url, &u, "lazyattn_redis_url_check");
    if (!st) lz_redis_url_free(&u);
    return st;
}

int lazyattn_store_create_redis(const lazyattn_redis_config *config, lazyattn_store **out) {
    const char *w = "lazyattn_store_create_redis";
    LZ_CHECK_ARG(out != NULL, "%s: out is NULL", w);
    *out = NULL;
    lazyattn_redis_config c;
    lazyattn_redis_config_init(&c);
    if (config) c = *config;
    LZ_CHECK_ARG(c.url || (c.host && c.host[0]), "%s: no host", w);
    LZ_CHECK_ARG(c.url || (c.port >= 1 && c.port <= 65535), "%s: port %d outside 1..65535", w,
                 c.port);
    LZ_CHECK_ARG(c.timeout_ms >= 1 && c.timeout_ms <= 600000,
                 "%s: timeout %d ms outside 1..600000", w, c.timeout_ms);
    LZ_CHECK_ARG(c.chunk_bytes >= 1024 && c.chunk_bytes <= ((size_t)512 << 20),
                 "%s: chunk of %zu bytes outside 1 KiB .. 512 MiB", w, c.chunk_bytes);
    LZ_CHECK_ARG(c.retry_ms >= 0 && c.retry_ms <= 600000, "%s: retry of %d ms outside 0..600000",
                 w, c.retry_ms);
    LZ_CHECK_ARG(c.prefix && c.prefix[0] && !strpbrk(c.prefix, "{}") && strlen(c.prefix) <= 200,
                 "%s: the key prefix must be 1..200 characters without '{' or '}'", w);
    LZ_CHECK_ARG(!c.user || (c.user[0] && c.password), "%s: a user needs a password", w);
    LZ_CHECK_ARG(!c.password || c.password[0], "%s: the password is empty", w);
    lz_redis_url seeds;
    int st;
    if (c.url) {
        st = lz_redis_url_parse(c.url, &seeds, w);
        if (st) return st;
        /* the URL's credentials, else the config's (a user of the URL with
         * the config's password) */
        if (!seeds.password && c.password) {
            seeds.password = strdup(c.password);
            if (!seeds.user && c.user) seeds.user = strdup(c.user);
            if (!seeds.password || (c.user && !seeds.user)) {
                lz_redis_url_free(&seeds);
                return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s", w);
            }
        }
        if (seeds.user && !seeds.password) {
            st = lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                         "%s: the URL names user '%s' but no password is given (in the URL, "
                         "or in the config's password)",
                         w, seeds.user);
            lz_redis_url_free(&seeds);
            return st;
        }
    } else {
        memset(&seeds, 0, sizeof seeds);
        seeds.hosts = calloc(1, sizeof *seeds.hosts);
        seeds.ports = calloc(1, sizeof *seeds.ports);
        if (seeds.hosts && seeds.ports) {
            seeds.hosts[0] = strdup(c.host);
            seeds.ports[0] = c.port;
            seeds.n_seeds = seeds.hosts[0] != NULL;
        }
        seeds.password = c.password ? strdup(c.password) : NULL;
        seeds.user = c.user ? strdup(c.user) : NULL;
        if (!seeds.n_seeds || (c.password && !seeds.password) || (c.user && !seeds.user)) {
            lz_redis_url_free(&seeds);
            return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s", w);
        }
    }
    void *impl;
    st = lz_store_redis_open(&c, &seeds, &impl);
    return st ? st : lz_store_wrap(&lz_store_redis_ops, &lz_store_redis_lease_ops, impl, out);
}

#define LZ_STORE_LIVE(s, fn)                                                    \
    do {                                                                        \
        LZ_CHECK_ARG((s) != NULL, "%s: store is NULL", fn);                     \
        LZ_CHECK_LIVE(s, LZ_MAGIC_STORE, fn, "store");                          \
    } while (0)

const char *lazyattn_store_name(const lazyattn_store *s) {
    if (!s || s->magic != LZ_MAGIC_STORE) {
        lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "lazyattn_store_name: not a live store");
        return NULL;
    }
    return s->ops.name;
}

int lazyattn_store_get(lazyattn_store *s, lazyattn_doc_key key, lazyattn_store_value *value) {
    LZ_STORE_LIVE(s, "lazyattn_store_get");
    LZ_CHECK_ARG(value != NULL, "lazyattn_store_get: value is NULL");
    memset(value, 0, sizeof *value);
    int st = s->ops.get(s->impl, key, value);
    if (st == LAZYATTN_STATUS_OK && value->data == NULL && value->size > 0) {
        s->ops.release(s->impl, value);
        memset(value, 0, sizeof *value);
        return lz_fail(LAZYATTN_STATUS_FORMAT, "lazyattn_store_get: %s store returned no data",
                       s->ops.name);
    }
    if (st) memset(value, 0, sizeof *value);
    return st;
}

int lz_store_get_into(lazyattn_store *s, lazyattn_doc_key key, const lz_store_room *room,
                      lazyattn_store_value *value) {
    if (!room || !s || s->magic != LZ_MAGIC_STORE || s->ops.get != lz_store_dir_ops.get)
        return lazyattn_store_get(s, key, value);
    memset(value, 0, sizeof *value);
    int st = lz_dir_get_into(s->impl, key, room, value);
    if (st) memset(value, 0, sizeof *value);
    return st;
}

void lazyattn_store_release(lazyattn_store *s, lazyattn_store_value *value) {
    if (!s || !value || (!value->data && !value->handle)) return;
    if (s->magic != LZ_MAGIC_STORE) {
        lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "lazyattn_store_release: not a live store");
        return;
    }
    s->ops.release(s->impl, value);
    memset(value, 0, sizeof *value);
}

int lazyattn_store_put(lazyattn_store *s, lazyattn_doc_key key, const void *data, size_t size) {
    LZ_STORE_LIVE(s, "lazyattn_store_put");
    LZ_CHECK_ARG(data != NULL && size > 0, "lazyattn_store_put: no data");
    return s->ops.put(s->impl, key, data, size);
}

int lz_store_put_sealed(lazyattn_store *s, lazyattn_doc_key key, const void *data, size_t size) {
    LZ_STORE_LIVE(s, "lazyattn_store_put");
    LZ_CHECK_ARG(data != NULL && size > 0, "lazyattn_store_put: no data");
    return s->host ? lz_store_host_put_sealed(s->impl, key, data, size)
                   : s->ops.put(s->impl, key, data, size);
}

int lz_store_value_sealed(const lazyattn_store *s, const lazyattn_store_value *v) {
    return s->host && lz_store_host_value_sealed(v);
}

int lz_store_use_arena(lazyattn_store *s, struct lz_pinned_arena *arena) {
    return s->host && lz_store_host_use_arena(s->impl, arena);
}

int lz_store_has_arena(const lazyattn_store *s, cl_context context) {
    return s->host && lz_store_host_has_arena(s->impl, context);
}

int lz_store_value_pinned(const lazyattn_store *s, const lazyattn_store_value *v,
                          cl_context context) {
    return s->host && v->handle && lz_store_host_value_pinned(s->impl, v, context);
}

uint8_t *lz_store_reserve(lazyattn_store *s, size_t size, cl_context context, void **item,
                          int *pinned) {
    *item = NULL;
    *pinned = 0;
    return s->host ? lz_store_host_reserve(s->impl, size, context, item, pinned) : NULL;
}

void lz_store_put_reserved(lazyattn_store *s, lazyattn_doc_key key, void *item) {
    if (s->host) lz_store_host_put_reserved(s->impl, key, item);
}

void lz_store_unreserve(lazyattn_store *s, void *item) {
    if (s->host) lz_store_host_unreserve(s->impl, item);
}

uint64_t lz_store_host_budget_bytes(const lazyattn_store *s) {
    return s->host ? lz_store_host_budget(s->impl) : 0;
}

int lazyattn_store_exists(lazyattn_store *s, lazyattn_doc_key key, int *exists) {
    LZ_STORE_LIVE(s, "lazyattn_store_exists");
    LZ_CHECK_ARG(exists != NULL, "lazyattn_store_exists: exists is NULL");
    *exists = 0;
    return s->ops.exists(s->impl, key, exists);
}

int lazyattn_store_delete(lazyattn_store *s, lazyattn_doc_key key) {
    LZ_STORE_LIVE(s, "lazyattn_store_delete");
    return s->ops.remove(s->impl, key);
}

int lazyattn_store_set_lease(lazyattn_store *s, int ttl_ms) {
    LZ_STORE_LIVE(s, "lazyattn_store_set_lease");
    LZ_CHECK_ARG(ttl_ms >= 0 && ttl_ms <= 3600000,
                 "lazyattn_store_set_lease: %d ms outside 0..3600000", ttl_ms);
    if (!s->has_book || !s->book.ops)
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                       "lazyattn_store_set_lease: the %s store has no leases (dir and redis do)",
                       s->ops.name);
    lz_mutex_lock(&s->book.lock);
    s->book.ttl_ms = ttl_ms;
    lz_mutex_unlock(&s->book.lock);
    return LAZYATTN_STATUS_OK;
}

void lazyattn_store_destroy(lazyattn_store *s) {
    if (!s) return;
    if (!lz_live_for_destroy(s->magic, LZ_MAGIC_STORE, "lazyattn_store_destroy", "store")) return;
    if (s->has_book) lz_lease_book_free(&s->book); /* before the store it gives back to */
    if (s->ops.destroy) s->ops.destroy(s->impl);
    s->magic = 0;
    free(s);
}
