/* SPDX-License-Identifier: Apache-2.0 */
/* The Redis store, through hiredis (optional: without it every call is
 * UNSUPPORTED). A document is split into chunks under one hash tag (one
 * Redis Cluster slot), then a manifest is written, only after every chunk
 * was acknowledged; a reader goes through the manifest and checks length
 * and checksum of what it assembles. A manifest whose chunks are missing
 * or do not match it (evicted under maxmemory, lost in a failover) is
 * removed by the reader or writer that finds it, so such a document reads
 * as absent from then on and is written again. The connections, the
 * cluster's slot map and its redirections: redis_cluster.c; one mutex per
 * store. */
#include "store/store_internal.h"

#ifndef LAZYATTN_HAVE_HIREDIS

int lz_store_redis_open(const lazyattn_redis_config *config, lz_redis_url *seeds, void **impl) {
    (void)config;
    lz_redis_url_free(seeds);
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
static int lz_redis_lease_acquire(void *i, lazyattn_doc_key k, uint64_t t, int ms, int *held,
                                  uint64_t *holder) {
    (void)i, (void)k, (void)t, (void)ms, (void)held, (void)holder;
    return lz_redis_none();
}
static int lz_redis_lease_release(void *i, lazyattn_doc_key k, uint64_t t) {
    (void)i, (void)k, (void)t;
    return lz_redis_none();
}

#else

#include "cache/cache_internal.h" /* lz_kv_checksum */
#include "store/redis_cluster.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct lz_redis {
    lz_mutex lock;
    lz_redis_conn conn;
    char *prefix;
    size_t chunk_bytes;
} lz_redis;

/* A key: prefix (<= 200) + ":{" + 81 + "}:" + suffix (< 40) and the NUL. */
#define LZ_REDIS_KEY 384

static void lz_redis_key(const lz_redis *r, lazyattn_doc_key k, const char *suffix, char *out,
                         size_t n) {
    char t[LZ_STORE_KEY_TEXT];
    lz_store_key_text(k, t);
    t[16] = ':'; /* "<model_id>:<digest>" */
    snprintf(out, n, "%s:{%s}:%s", r->prefix, t, suffix);
}

static void lz_redis_chunk_key(const lz_redis *r, lazyattn_doc_key k, uint64_t i, char *out) {
    char suffix[40];
    snprintf(suffix, sizeof suffix, "chunk:%" PRIu64, i);
    lz_redis_key(r, k, suffix, out, LZ_REDIS_KEY);
}

/* The slot of a document's keys (all under its hash tag). */
static int lz_redis_doc_slot(const lz_redis *r, lazyattn_doc_key k) {
    char key[LZ_REDIS_KEY];
    lz_redis_key(r, k, "manifest", key, sizeof key);
    return lz_redis_key_slot(key);
}

/* IO for an unexpected reply (an error reply's text, e.g. NOAUTH or OOM). */
static int lz_redis_unexpected(redisReply *rep, const char *who, const char *what) {
    return lz_fail(LAZYATTN_STATUS_IO, "%s: redis %s: %s", who, what,
                   rep && rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
}

typedef struct lz_manifest {
    uint64_t total, chunk, n_chunks, checksum;
    char text[160]; /* as stored */
    size_t len;
} lz_manifest;

/* GET the manifest: OK, NOT_FOUND, IO, or FORMAT for one that does not
 * parse (m->text then holds it). */
static int lz_redis_manifest(lz_redis *r, lazyattn_doc_key k, lz_manifest *m, const char *who) {
    char key[LZ_REDIS_KEY];
    lz_redis_key(r, k, "manifest", key, sizeof key);
    lz_redis_cmd cmd = {2, {"GET", key}, {0}};
    redisReply *rep;
    int st = lz_redis_batch(&r->conn, lz_redis_key_slot(key), &cmd, 1, &rep, who, "GET manifest");
    if (st) return st;
    if (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_NIL) {
        st = lz_redis_unexpected(rep, who, "GET manifest");
        freeReplyObject(rep);
        return st;
    }
    if (rep->type == REDIS_REPLY_NIL) {
        freeReplyObject(rep);
        return lz_fail(LAZYATTN_STATUS_NOT_FOUND, "%s: no document %s", who, key);
    }
    m->len = rep->len < sizeof m->text - 1 ? rep->len : sizeof m->text - 1;
    memcpy(m->text, rep->str, m->len);
    m->text[m->len] = '\0';
    int whole = (size_t)rep->len == m->len;
    freeReplyObject(rep);
    char tail;
    if (!whole ||
        sscanf(m->text, "LZMF1 %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNx64 "%c", &m->total,
               &m->chunk, &m->n_chunks, &m->checksum, &tail) != 4 ||
        m->chunk == 0 || m->total == 0 || m->total > SIZE_MAX ||
        m->n_chunks != m->total / m->chunk + (m->total % m->chunk != 0) || /* no wrap */
        m->n_chunks > (uint64_t)INT_MAX - 2)
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: manifest %s does not parse ('%s')", who, key,
                       m->text);
    return LAZYATTN_STATUS_OK;
}

/* Removes the manifest m was read from, if it is still that one (a writer
 * may have replaced it meanwhile): the document then reads as absent. Its
 * failure changes nothing the caller reports. */
static void lz_redis_drop_manifest(lz_redis *r, lazyattn_doc_key k, const lz_manifest *m,
                                   const char *who) {
    static const char script[] =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
        "return 0";
    char key[LZ_REDIS_KEY], saved[512];
    snprintf(saved, sizeof saved, "%s", lazyattn_last_error());
    lz_redis_key(r, k, "manifest", key, sizeof key);
    lz_redis_cmd cmd = {5, {"EVAL", script, "1", key, m->text}, {0, 0, 0, 0, m->len}};
    redisReply *rep;
    if (!lz_redis_batch(&r->conn, lz_redis_key_slot(key), &cmd, 1, &rep, who, "EVAL")) {
        if (rep->type == REDIS_REPLY_ERROR) { /* no scripting for this user: DEL */
            freeReplyObject(rep);
            lz_redis_cmd del = {2, {"DEL", key}, {0}};
            if (!lz_redis_batch(&r->conn, lz_redis_key_slot(key), &del, 1, &rep, who, "DEL"))
                freeReplyObject(rep);
        } else
            freeReplyObject(rep);
    }
    lz_fail(LAZYATTN_STATUS_FORMAT, "%s", saved); /* the caller's reason stays the message */
}

static int lz_redis_get(void *impl, lazyattn_doc_key k, lazyattn_store_value *v) {
    const char *who = "redis store get";
    lz_redis *r = impl;
    lz_mutex_lock(&r->lock);
    lz_manifest m;
    uint8_t *buf = NULL;
    int slot = lz_redis_doc_slot(r, k);
    int st = lz_redis_manifest(r, k, &m, who), chunks_bad = 0;
    if (st) goto out;
    /* The chunks in batches, the buffer grown with the bytes received: a
     * manifest's claim alone allocates nothing. */
    size_t cap = 0;
    char keys[LZ_REDIS_BATCH_MAX][LZ_REDIS_KEY];
    lz_redis_cmd cmds[LZ_REDIS_BATCH_MAX];
    redisReply *reps[LZ_REDIS_BATCH_MAX];
    for (uint64_t i0 = 0; i0 < m.n_chunks && !st; i0 += LZ_REDIS_BATCH_MAX) {
        int n = m.n_chunks - i0 < LZ_REDIS_BATCH_MAX ? (int)(m.n_chunks - i0) : LZ_REDIS_BATCH_MAX;
        for (int j = 0; j < n; j++) {
            lz_redis_chunk_key(r, k, i0 + (uint64_t)j, keys[j]);
            cmds[j] = (lz_redis_cmd){2, {"GET", keys[j]}, {0}};
        }
        if ((st = lz_redis_batch(&r->conn, slot, cmds, n, reps, who, "GET chunk")) != 0) goto out;
        for (int j = 0; j < n && !st; j++) {
            uint64_t i = i0 + (uint64_t)j, off = i * m.chunk;
            uint64_t want = m.total - off < m.chunk ? m.total - off : m.chunk;
            redisReply *rep = reps[j];
            if (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_NIL)
                st = lz_redis_unexpected(rep, who, "GET chunk");
            else if (rep->type != REDIS_REPLY_STRING || (uint64_t)rep->len != want) {
                chunks_bad = 1;
                st = lz_fail(LAZYATTN_STATUS_FORMAT,
                             "%s: chunk %" PRIu64 " of %" PRIu64 " is %s (%llu bytes expected); "
                             "the manifest is removed",
                             who, i, m.n_chunks,
                             rep->type == REDIS_REPLY_STRING ? "of another length" : "missing",
                             (unsigned long long)want);
            } else if (off + want > cap &&
                       lz_grow_bytes(&buf, &cap, (size_t)(off + want), (size_t)m.total))
                st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: %zu bytes", who,
                             (size_t)(off + want));
            else
                memcpy(buf + off, rep->str, (size_t)want);
        }
        lz_redis_free_replies(reps, n);
    }
    if (!st && lz_kv_checksum(buf, (size_t)m.total) != m.checksum) {
        chunks_bad = 1;
        st = lz_fail(LAZYATTN_STATUS_FORMAT,
                     "%s: the chunks do not match the manifest's checksum; the manifest is "
                     "removed",
                     who);
    }
    if (chunks_bad) lz_redis_drop_manifest(r, k, &m, who);
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
    int slot = lz_redis_doc_slot(r, k), st = LAZYATTN_STATUS_OK;
    char keys[LZ_REDIS_BATCH_MAX][LZ_REDIS_KEY];
    lz_redis_cmd cmds[LZ_REDIS_BATCH_MAX];
    redisReply *reps[LZ_REDIS_BATCH_MAX];
    lz_mutex_lock(&r->lock);
    for (uint64_t i0 = 0; i0 < n_chunks && !st; i0 += LZ_REDIS_BATCH_MAX) {
        int n = n_chunks - i0 < LZ_REDIS_BATCH_MAX ? (int)(n_chunks - i0) : LZ_REDIS_BATCH_MAX;
        for (int j = 0; j < n; j++) {
            size_t off = (size_t)(i0 + (uint64_t)j) * r->chunk_bytes;
            size_t len = size - off < r->chunk_bytes ? size - off : r->chunk_bytes;
            lz_redis_chunk_key(r, k, i0 + (uint64_t)j, keys[j]);
            cmds[j] = (lz_redis_cmd){3, {"SET", keys[j], (const char *)p + off}, {0, 0, len}};
        }
        if ((st = lz_redis_batch(&r->conn, slot, cmds, n, reps, who, "SET chunk")) != 0) break;
        for (int j = 0; j < n && !st; j++)
            if (reps[j]->type != REDIS_REPLY_STATUS)
                st = lz_redis_unexpected(reps[j], who, "SET chunk");
        lz_redis_free_replies(reps, n);
    }
    if (!st) { /* the manifest last: the chunks written before are never read without it */
        char manifest[160];
        snprintf(manifest, sizeof manifest, "LZMF1 %zu %zu %" PRIu64 " %016" PRIx64, size,
                 r->chunk_bytes, n_chunks, checksum);
        lz_redis_key(r, k, "manifest", keys[0], LZ_REDIS_KEY);
        cmds[0] = (lz_redis_cmd){3, {"SET", keys[0], manifest}, {0}};
        st = lz_redis_batch(&r->conn, slot, cmds, 1, reps, who, "SET manifest");
        if (!st && reps[0]->type != REDIS_REPLY_STATUS)
            st = lz_redis_unexpected(reps[0], who, "SET manifest");
        if (reps[0]) lz_redis_free_replies(reps, 1);
    }
    lz_mutex_unlock(&r->lock);
    return st;
}

/* A document exists when its manifest parses and every chunk it names is
 * there with its length: a manifest that outlived a chunk (eviction) is
 * removed and the document reported absent, so that the writer writes it
 * again. */
static int lz_redis_exists(void *impl, lazyattn_doc_key k, int *exists) {
    const char *who = "redis store exists";
    lz_redis *r = impl;
    lz_manifest m;
    int slot = lz_redis_doc_slot(r, k), whole = 1;
    char keys[LZ_REDIS_BATCH_MAX][LZ_REDIS_KEY];
    lz_redis_cmd cmds[LZ_REDIS_BATCH_MAX];
    redisReply *reps[LZ_REDIS_BATCH_MAX];
    lz_mutex_lock(&r->lock);
    int st = lz_redis_manifest(r, k, &m, who);
    if (st == LAZYATTN_STATUS_NOT_FOUND || st == LAZYATTN_STATUS_FORMAT) {
        *exists = 0; /* a manifest that does not parse is replaced by the next put */
        st = LAZYATTN_STATUS_OK;
        goto out;
    }
    for (uint64_t i0 = 0; i0 < m.n_chunks && !st && whole; i0 += LZ_REDIS_BATCH_MAX) {
        int n = m.n_chunks - i0 < LZ_REDIS_BATCH_MAX ? (int)(m.n_chunks - i0) : LZ_REDIS_BATCH_MAX;
        for (int j = 0; j < n; j++) {
            lz_redis_chunk_key(r, k, i0 + (uint64_t)j, keys[j]);
            cmds[j] = (lz_redis_cmd){2, {"STRLEN", keys[j]}, {0}};
        }
        if ((st = lz_redis_batch(&r->conn, slot, cmds, n, reps, who, "STRLEN chunk")) != 0) break;
        for (int j = 0; j < n && !st; j++) {
            uint64_t off = (i0 + (uint64_t)j) * m.chunk;
            uint64_t want = m.total - off < m.chunk ? m.total - off : m.chunk;
            if (reps[j]->type != REDIS_REPLY_INTEGER)
                st = lz_redis_unexpected(reps[j], who, "STRLEN chunk");
            else if ((uint64_t)reps[j]->integer != want)
                whole = 0;
        }
        lz_redis_free_replies(reps, n);
    }
    if (!st) {
        *exists = whole;
        if (!whole) {
            lz_redis_drop_manifest(r, k, &m, who);
            st = LAZYATTN_STATUS_OK;
        }
    }
out:
    lz_mutex_unlock(&r->lock);
    return st;
}

static int lz_redis_remove(void *impl, lazyattn_doc_key k) {
    const char *who = "redis store delete";
    lz_redis *r = impl;
    lz_manifest m;
    int slot = lz_redis_doc_slot(r, k);
    lz_mutex_lock(&r->lock);
    int st = lz_redis_manifest(r, k, &m, who);
    if (st == LAZYATTN_STATUS_FORMAT) m.n_chunks = 0; /* a bad manifest: at least drop it */
    if (st && st != LAZYATTN_STATUS_FORMAT) goto out;
    st = LAZYATTN_STATUS_OK;
    /* The manifest first: the document is gone before any chunk is. Then
     * the chunks a batch at a time (as many keys as the manifest says,
     * never all of them in memory at once), one key per DEL so that a slot
     * being migrated redirects each key where it is. */
    char keys[LZ_REDIS_BATCH_MAX][LZ_REDIS_KEY];
    lz_redis_cmd cmds[LZ_REDIS_BATCH_MAX];
    redisReply *reps[LZ_REDIS_BATCH_MAX];
    for (uint64_t i0 = 0; i0 <= m.n_chunks && !st;) {
        int n = 0;
        for (; n < LZ_REDIS_BATCH_MAX && i0 <= m.n_chunks; n++, i0++) {
            if (i0 == 0)
                lz_redis_key(r, k, "manifest", keys[n], LZ_REDIS_KEY);
            else
                lz_redis_chunk_key(r, k, i0 - 1, keys[n]);
            cmds[n] = (lz_redis_cmd){2, {"DEL", keys[n]}, {0}};
        }
        if ((st = lz_redis_batch(&r->conn, slot, cmds, n, reps, who, "DEL")) != 0) break;
        for (int j = 0; j < n && !st; j++)
            if (reps[j]->type != REDIS_REPLY_INTEGER) st = lz_redis_unexpected(reps[j], who, "DEL");
        lz_redis_free_replies(reps, n);
    }
out:
    lz_mutex_unlock(&r->lock);
    return st;
}

static void lz_redis_destroy(void *impl) {
    lz_redis *r = impl;
    if (!r) return;
    lz_redis_conn_close(&r->conn);
    free(r->prefix);
    lz_mutex_destroy(&r->lock);
    free(r);
}

/* A lease: the key "...:{<model>:<digest>}:lease" (the document's slot)
 * set to the holder's token with NX and a TTL (PX): Redis expires it, so a
 * killed holder blocks nobody past the TTL. SET and a GET of the holder go
 * in one round trip; the release deletes the key only while it holds our
 * token (a script, as the manifest's drop). */
static int lz_redis_lease_acquire(void *impl, lazyattn_doc_key k, uint64_t token, int ttl_ms,
                                  int *held, uint64_t *holder) {
    const char *who = "redis store lease";
    lz_redis *r = impl;
    char key[LZ_REDIS_KEY], tok[24], ms[16];
    lz_redis_key(r, k, "lease", key, sizeof key);
    snprintf(tok, sizeof tok, "%016" PRIx64, token);
    snprintf(ms, sizeof ms, "%d", ttl_ms);
    lz_redis_cmd cmds[2] = {{6, {"SET", key, tok, "NX", "PX", ms}, {0}}, {2, {"GET", key}, {0}}};
    redisReply *reps[2];
    *held = 0;
    *holder = 0;
    lz_mutex_lock(&r->lock);
    int st = lz_redis_batch(&r->conn, lz_redis_key_slot(key), cmds, 2, reps, who, "SET NX lease");
    lz_mutex_unlock(&r->lock);
    if (st) return st;
    if (reps[0]->type == REDIS_REPLY_STATUS)
        *held = 1;
    else if (reps[0]->type != REDIS_REPLY_NIL)
        st = lz_redis_unexpected(reps[0], who, "SET NX lease");
    else if (reps[1]->type == REDIS_REPLY_STRING && reps[1]->len == 16)
        *holder = strtoull(reps[1]->str, NULL, 16);
    lz_redis_free_replies(reps, 2);
    return st;
}

static int lz_redis_lease_release(void *impl, lazyattn_doc_key k, uint64_t token) {
    static const char script[] =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
        "return 0";
    const char *who = "redis store lease release";
    lz_redis *r = impl;
    char key[LZ_REDIS_KEY], tok[24];
    lz_redis_key(r, k, "lease", key, sizeof key);
    snprintf(tok, sizeof tok, "%016" PRIx64, token);
    lz_redis_cmd cmd = {5, {"EVAL", script, "1", key, tok}, {0}};
    redisReply *rep;
    lz_mutex_lock(&r->lock);
    int st = lz_redis_batch(&r->conn, lz_redis_key_slot(key), &cmd, 1, &rep, who, "EVAL");
    lz_mutex_unlock(&r->lock);
    if (st) return st;
    if (rep->type != REDIS_REPLY_INTEGER) st = lz_redis_unexpected(rep, who, "EVAL release");
    freeReplyObject(rep);
    return st; /* without scripting the lease expires: the others wait at most its TTL */
}

int lz_store_redis_open(const lazyattn_redis_config *c, lz_redis_url *seeds, void **impl) {
    const char *who = "lazyattn_store_create_redis";
    *impl = NULL;
    lz_redis *r = calloc(1, sizeof *r);
    if (!r || !(r->prefix = strdup(c->prefix)) || lz_mutex_init(&r->lock) != 0) {
        if (r) free(r->prefix);
        free(r);
        lz_redis_url_free(seeds);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s", who);
    }
    r->chunk_bytes = c->chunk_bytes;
    int st = lz_redis_conn_open(&r->conn, seeds, c->timeout_ms, c->retry_ms, who);
    if (st) {
        free(r->prefix);
        lz_mutex_destroy(&r->lock);
        free(r);
        return st;
    }
    *impl = r;
    return LAZYATTN_STATUS_OK;
}

#endif

const lazyattn_store_ops lz_store_redis_ops = {"redis",         lz_redis_get,    lz_redis_release,
                                               lz_redis_put,    lz_redis_exists, lz_redis_remove,
                                               lz_redis_destroy};
const lz_store_lease_ops lz_store_redis_lease_ops = {lz_redis_lease_acquire,
                                                     lz_redis_lease_release};
