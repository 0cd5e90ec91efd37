/* SPDX-License-Identifier: Apache-2.0 */
/* The Redis store, through hiredis (optional: without it every call is
 * UNSUPPORTED). A document is split into chunks under one hash tag (one
 * Redis Cluster slot), then a manifest is written, only after every chunk
 * was acknowledged; a reader goes through the manifest and checks length
 * and checksum of what it assembles. One connection per store, behind a
 * mutex; a lost connection is reopened by the next call. */
#include "store/store_internal.h"

#ifndef LAZYATTN_HAVE_HIREDIS

int lz_store_redis_open(const lazyattn_redis_config *config, void **impl) {
    (void)config;
    *impl = NULL;
    return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                   "lazyattn_store_create_redis: lazyattn was built without hiredis (install "
                   "libhiredis-dev, e.g. apt-get install libhiredis-dev, and reconfigure)");
}
static int lz_redis_none(void) {
    return lz_fail(LAZYATTN_STATUS_UNSUPPORTED, "redis store: built without hiredis");
}
static int lz_redis_get(void *i, lazyattn_doc_key k, lazyattn_store_value *v) {
    (void)i, (void)k, (void)v;
    return lz_redis_none();
}
static void lz_redis_release(void *i, lazyattn_store_value *v) { (void)i, (void)v; }
static int lz_redis_put(void *i, lazyattn_doc_key k, const void *d, size_t n) {
    (void)i, (void)k, (void)d, (void)n;
    return lz_redis_none();
}
static int lz_redis_exists(void *i, lazyattn_doc_key k, int *e) {
    (void)i, (void)k, (void)e;
    return lz_redis_none();
}
static int lz_redis_remove(void *i, lazyattn_doc_key k) {
    (void)i, (void)k;
    return lz_redis_none();
}
static void lz_redis_destroy(void *i) { (void)i; }

#else

#include "cache/cache_internal.h" /* lz_kv_checksum */

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

typedef struct lz_redis {
    lz_mutex lock;
    redisContext *rc; /* NULL or broken: reconnect */
    char *host, *prefix;
    int port, timeout_ms, retry_ms;
    size_t chunk_bytes;
    int64_t down_since_ms, retry_at_ms; /* last failure of the connection; 0: none */
} lz_redis;

static int64_t lz_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The connection failed: drop it, and wait retry_ms before the next try. */
static void lz_redis_down(lz_redis *r) {
    if (r->rc) redisFree(r->rc);
    r->rc = NULL;
    r->down_since_ms = lz_now_ms();
    r->retry_at_ms = r->down_since_ms + r->retry_ms;
}

static struct timeval lz_tv(int ms) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* Connected, or IO with the reason. Caller holds the lock. */
static int lz_redis_connect(lz_redis *r, const char *who) {
    if (r->rc && !r->rc->err) return LAZYATTN_STATUS_OK;
    if (r->rc) lz_redis_down(r);
    int64_t now = lz_now_ms();
    if (r->retry_at_ms && now < r->retry_at_ms)
        return lz_fail(LAZYATTN_STATUS_IO,
                       "%s: redis %s:%d failed %lld ms ago; not retried for another %lld ms "
                       "(retry_ms %d)",
                       who, r->host, r->port, (long long)(now - r->down_since_ms),
                       (long long)(r->retry_at_ms - now), r->retry_ms);
    r->rc = redisConnectWithTimeout(r->host, r->port, lz_tv(r->timeout_ms));
    if (!r->rc) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: redis context", who);
    if (r->rc->err || redisSetTimeout(r->rc, lz_tv(r->timeout_ms)) != REDIS_OK) {
        int st = lz_fail(LAZYATTN_STATUS_IO, "%s: redis %s:%d: %s", who, r->host, r->port,
                         r->rc->err ? r->rc->errstr : "cannot set the timeout");
        lz_redis_down(r);
        return st;
    }
    r->retry_at_ms = 0;
    return LAZYATTN_STATUS_OK;
}

/* IO for a failed command: the connection is dropped if it broke. */
static int lz_redis_fail(lz_redis *r, redisReply *reply, const char *who, const char *what) {
    int st;
    if (reply && reply->type == REDIS_REPLY_ERROR)
        st = lz_fail(LAZYATTN_STATUS_IO, "%s: redis %s: %s", who, what, reply->str);
    else if (r->rc && r->rc->err)
        st = lz_fail(LAZYATTN_STATUS_IO, "%s: redis %s on %s:%d: %s", who, what, r->host, r->port,
                     r->rc->errstr);
    else
        st = lz_fail(LAZYATTN_STATUS_IO, "%s: redis %s: unexpected reply", who, what);
    if (reply) freeReplyObject(reply);
    if (r->rc && r->rc->err) lz_redis_down(r);
    return st;
}

/* A key: prefix (<= 200) + ":{" + 81 + "}:" + suffix (< 40) and the NUL. */
#define LZ_REDIS_KEY 384

static void lz_redis_key(const lz_redis *r, lazyattn_doc_key k, const char *suffix, char *out,
                         size_t n) {
    char t[LZ_STORE_KEY_TEXT];
    lz_store_key_text(k, t);
    t[16] = ':'; /* "<model_id>:<digest>" */
    snprintf(out, n, "%s:{%s}:%s", r->prefix, t, suffix);
}

typedef struct lz_manifest {
    uint64_t total, chunk, n_chunks, checksum;
} lz_manifest;

/* GET the manifest: OK, NOT_FOUND, IO, or FORMAT for one that does not parse. */
static int lz_redis_manifest(lz_redis *r, lazyattn_doc_key k, lz_manifest *m, const char *who) {
    char key[LZ_REDIS_KEY];
    lz_redis_key(r, k, "manifest", key, sizeof key);
    const char *argv[2] = {"GET", key};
    redisReply *rep = redisCommandArgv(r->rc, 2, argv, NULL);
    if (!rep || (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_NIL))
        return lz_redis_fail(r, rep, who, "GET manifest");
    if (rep->type == REDIS_REPLY_NIL) {
        freeReplyObject(rep);
        return lz_fail(LAZYATTN_STATUS_NOT_FOUND, "%s: no document %s", who, key);
    }
    char text[160];
    size_t n = rep->len < sizeof text - 1 ? rep->len : sizeof text - 1;
    memcpy(text, rep->str, n);
    text[n] = '\0';
    freeReplyObject(rep);
    char tail;
    if (sscanf(text, "LZMF1 %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNx64 "%c", &m->total,
               &m->chunk, &m->n_chunks, &m->checksum, &tail) != 4 ||
        m->chunk == 0 || m->total == 0 || m->total > SIZE_MAX ||
        m->n_chunks != m->total / m->chunk + (m->total % m->chunk != 0) || /* no wrap */
        m->n_chunks > (uint64_t)INT_MAX - 2) /* a DEL names the manifest and every chunk */
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: manifest %s does not parse ('%s')", who, key,
                       text);
    return LAZYATTN_STATUS_OK;
}

/* GETs of chunks in flight at once (a pipeline). */
#define LZ_REDIS_BATCH 16

static int lz_redis_get(void *impl, lazyattn_doc_key k, lazyattn_store_value *v) {
    const char *who = "redis store get";
    lz_redis *r = impl;
    lz_mutex_lock(&r->lock);
    lz_manifest m;
    uint8_t *buf = NULL;
    int st = lz_redis_connect(r, who);
    if (!st) st = lz_redis_manifest(r, k, &m, who);
    if (st) goto out;
    /* The chunks in batches, the buffer grown with the bytes received: a
     * manifest's claim alone allocates nothing. */
    size_t cap = 0;
    char key[LZ_REDIS_KEY], suffix[40];
    for (uint64_t i0 = 0; i0 < m.n_chunks && !st; i0 += LZ_REDIS_BATCH) {
        uint64_t i1 = m.n_chunks - i0 < LZ_REDIS_BATCH ? m.n_chunks : i0 + LZ_REDIS_BATCH;
        for (uint64_t i = i0; i < i1; i++) {
            snprintf(suffix, sizeof suffix, "chunk:%" PRIu64, i);
            lz_redis_key(r, k, suffix, key, sizeof key);
            const char *argv[2] = {"GET", key};
            if (redisAppendCommandArgv(r->rc, 2, argv, NULL) != REDIS_OK) {
                st = lz_redis_fail(r, NULL, who, "GET chunk");
                goto out;
            }
        }
        /* Every reply is read, even after a bad one, so the connection stays in step. */
        for (uint64_t i = i0; i < i1; i++) {
            redisReply *rep = NULL;
            if (redisGetReply(r->rc, (void **)&rep) != REDIS_OK) {
                st = lz_redis_fail(r, rep, who, "GET chunk");
                goto out;
            }
            uint64_t off = i * m.chunk;
            uint64_t want = m.total - off < m.chunk ? m.total - off : m.chunk;
            if (!st && (rep->type != REDIS_REPLY_STRING || (uint64_t)rep->len != want))
                st = lz_fail(LAZYATTN_STATUS_FORMAT,
                             "%s: chunk %" PRIu64 " of %" PRIu64 " is %s (%llu bytes expected)",
                             who, i, m.n_chunks,
                             rep->type == REDIS_REPLY_STRING ? "of another length" : "missing",
                             (unsigned long long)want);
            if (!st && off + want > cap &&
                lz_grow_bytes(&buf, &cap, (size_t)(off + want), (size_t)m.total))
                st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: %zu bytes", who,
                             (size_t)(off + want));
            if (!st) memcpy(buf + off, rep->str, (size_t)want);
            freeReplyObject(rep);
        }
    }
    if (!st && lz_kv_checksum(buf, (size_t)m.total) != m.checksum)
        st = lz_fail(LAZYATTN_STATUS_FORMAT, "%s: the chunks do not match the manifest's checksum",
                     who);
out:
    lz_mutex_unlock(&r->lock);
    if (st) {
        free(buf);
        return st;
    }
    v->data = buf;
    v->size = (size_t)m.total;
    v->handle = buf;
    return LAZYATTN_STATUS_OK;
}

static void lz_redis_release(void *impl, lazyattn_store_value *v) {
    (void)impl;
    free(v->handle);
}

static int lz_redis_put(void *impl, lazyattn_doc_key k, const void *data, size_t size) {
    const char *who = "redis store put";
    lz_redis *r = impl;
    const uint8_t *p = data;
    uint64_t n_chunks = ((uint64_t)size + r->chunk_bytes - 1) / r->chunk_bytes;
    uint64_t checksum = lz_kv_checksum(p, size);
    lz_mutex_lock(&r->lock);
    int st = lz_redis_connect(r, who);
    if (st) goto out;
    char key[LZ_REDIS_KEY], suffix[40];
    for (uint64_t i = 0; i < n_chunks; i++) {
        size_t off = (size_t)i * r->chunk_bytes;
        size_t len = size - off < r->chunk_bytes ? size - off : r->chunk_bytes;
        snprintf(suffix, sizeof suffix, "chunk:%" PRIu64, i);
        lz_redis_key(r, k, suffix, key, sizeof key);
        const char *argv[3] = {"SET", key, (const char *)p + off};
        size_t lens[3] = {3, strlen(key), len};
        if (redisAppendCommandArgv(r->rc, 3, argv, lens) != REDIS_OK) {
            st = lz_redis_fail(r, NULL, who, "SET chunk");
            goto out;
        }
    }
    for (uint64_t i = 0; i < n_chunks; i++) {
        redisReply *rep = NULL;
        if (redisGetReply(r->rc, (void **)&rep) != REDIS_OK) {
            st = lz_redis_fail(r, rep, who, "SET chunk");
            goto out;
        }
        if (!st && rep->type != REDIS_REPLY_STATUS)
            st = lz_redis_fail(r, rep, who, "SET chunk");
        else
            freeReplyObject(rep);
    }
    if (st) goto out; /* no manifest: the chunks written are never read */
    char manifest[160];
    snprintf(manifest, sizeof manifest, "LZMF1 %zu %zu %" PRIu64 " %016" PRIx64, size,
             r->chunk_bytes, n_chunks, checksum);
    lz_redis_key(r, k, "manifest", key, sizeof key);
    const char *argv[3] = {"SET", key, manifest};
    redisReply *rep = redisCommandArgv(r->rc, 3, argv, NULL);
    if (!rep || rep->type != REDIS_REPLY_STATUS)
        st = lz_redis_fail(r, rep, who, "SET manifest");
    else
        freeReplyObject(rep);
out:
    lz_mutex_unlock(&r->lock);
    return st;
}

static int lz_redis_exists(void *impl, lazyattn_doc_key k, int *exists) {
    const char *who = "redis store exists";
    lz_redis *r = impl;
    char key[LZ_REDIS_KEY];
    lz_redis_key(r, k, "manifest", key, sizeof key);
    lz_mutex_lock(&r->lock);
    int st = lz_redis_connect(r, who);
    if (!st) {
        const char *argv[2] = {"EXISTS", key};
        redisReply *rep = redisCommandArgv(r->rc, 2, argv, NULL);
        if (!rep || rep->type != REDIS_REPLY_INTEGER)
            st = lz_redis_fail(r, rep, who, "EXISTS");
        else {
            *exists = rep->integer > 0;
            freeReplyObject(rep);
        }
    }
    lz_mutex_unlock(&r->lock);
    return st;
}

/* Keys named by one DEL of chunks. */
#define LZ_REDIS_DEL_BATCH 64

static int lz_redis_remove(void *impl, lazyattn_doc_key k) {
    const char *who = "redis store delete";
    lz_redis *r = impl;
    lz_manifest m;
    lz_mutex_lock(&r->lock);
    int st = lz_redis_connect(r, who);
    if (!st) st = lz_redis_manifest(r, k, &m, who);
    if (st == LAZYATTN_STATUS_FORMAT) m.n_chunks = 0; /* a bad manifest: at least drop it */
    if (st && st != LAZYATTN_STATUS_FORMAT) goto out;
    st = LAZYATTN_STATUS_OK;
    /* The manifest first: the document is gone before any chunk is. Then
     * the chunks, a batch per DEL (as many keys as the manifest says, never
     * all of them in memory at once). */
    char keys[LZ_REDIS_DEL_BATCH][LZ_REDIS_KEY];
    const char *argv[LZ_REDIS_DEL_BATCH + 1] = {"DEL"};
    for (uint64_t i0 = 0; i0 <= m.n_chunks && !st;) {
        int n = 0;
        for (; n < LZ_REDIS_DEL_BATCH && i0 <= m.n_chunks; n++, i0++) {
            char suffix[40];
            if (i0 == 0)
                snprintf(suffix, sizeof suffix, "manifest");
            else
                snprintf(suffix, sizeof suffix, "chunk:%" PRIu64, i0 - 1);
            lz_redis_key(r, k, suffix, keys[n], LZ_REDIS_KEY);
            argv[n + 1] = keys[n];
        }
        redisReply *rep = redisCommandArgv(r->rc, n + 1, argv, NULL);
        if (!rep || rep->type != REDIS_REPLY_INTEGER)
            st = lz_redis_fail(r, rep, who, "DEL");
        else
            freeReplyObject(rep);
    }
out:
    lz_mutex_unlock(&r->lock);
    return st;
}

static void lz_redis_destroy(void *impl) {
    lz_redis *r = impl;
    if (!r) return;
    if (r->rc) redisFree(r->rc);
    free(r->host);
    free(r->prefix);
    lz_mutex_destroy(&r->lock);
    free(r);
}

int lz_store_redis_open(const lazyattn_redis_config *c, void **impl) {
    *impl = NULL;
    lz_redis *r = calloc(1, sizeof *r);
    if (!r) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_store_create_redis");
    r->host = strdup(c->host);
    r->prefix = strdup(c->prefix);
    if (!r->host || !r->prefix || lz_mutex_init(&r->lock) != 0) {
        free(r->host);
        free(r->prefix);
        free(r);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_store_create_redis");
    }
    r->port = c->port;
    r->timeout_ms = c->timeout_ms;
    r->retry_ms = c->retry_ms;
    r->chunk_bytes = c->chunk_bytes;
    int st = lz_redis_connect(r, "lazyattn_store_create_redis");
    if (!st) { /* a server that answers, not only a port that accepts */
        const char *argv[1] = {"PING"};
        redisReply *rep = redisCommandArgv(r->rc, 1, argv, NULL);
        if (!rep || rep->type != REDIS_REPLY_STATUS)
            st = lz_redis_fail(r, rep, "lazyattn_store_create_redis", "PING");
        else
            freeReplyObject(rep);
    }
    if (st) {
        lz_redis_destroy(r);
        return st;
    }
    *impl = r;
    return LAZYATTN_STATUS_OK;
}

#endif

const lazyattn_store_ops lz_store_redis_ops = {"redis",         lz_redis_get,    lz_redis_release,
                                               lz_redis_put,    lz_redis_exists, lz_redis_remove,
                                               lz_redis_destroy};
