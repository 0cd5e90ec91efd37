/* SPDX-License-Identifier: Apache-2.0 */
/* The connections of a Redis store (redis_cluster.h). A cluster's slot map
 * comes from CLUSTER SLOTS, read at open, on MOVED and when a node's
 * connection is lost or refused (at most every LZ_REDIS_REFRESH_MS), so a
 * failover is followed as soon as the cluster has promoted a replica; a
 * server not in cluster mode serves every slot. */
#ifdef LAZYATTN_HAVE_HIREDIS

#include "store/redis_cluster.h"

#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

/* The least time between two refreshes of the slot map. */
#define LZ_REDIS_REFRESH_MS 100
/* Nodes a store keeps connections to, at most (seeds included). */
#define LZ_REDIS_MAX_NODES 1024
/* Batches sent again after MOVED or TRYAGAIN, at most. */
#define LZ_REDIS_ATTEMPTS 6

static int64_t lz_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timeval lz_tv(int ms) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

static void lz_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Redis Cluster's CRC16 (XModem: polynomial 0x1021, initial 0). */
static uint16_t lz_crc16(const char *p, size_t n) {
    uint16_t crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)((uint8_t)p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

int lz_redis_key_slot(const char *key) {
    size_t n = strlen(key);
    const char *open = strchr(key, '{');
    if (open) {
        const char *close = strchr(open + 1, '}');
        if (close && close > open + 1) return lz_crc16(open + 1, (size_t)(close - open - 1)) & 16383;
    }
    return lz_crc16(key, n) & 16383;
}

/* The connection of node i failed: drop it, and wait retry_ms before the next try. */
static void lz_node_down(lz_redis_conn *c, int i) {
    lz_redis_node *node = &c->nodes[i];
    if (node->rc) redisFree(node->rc);
    node->rc = NULL;
    node->down_since_ms = lz_now_ms();
    node->retry_at_ms = node->down_since_ms + c->retry_ms;
}

/* Node i connected and authenticated, or IO with the reason. */
static int lz_node_connect(lz_redis_conn *c, int i, const char *who) {
    lz_redis_node *node = &c->nodes[i];
    if (node->rc && !node->rc->err) return LAZYATTN_STATUS_OK;
    if (node->rc) lz_node_down(c, i);
    int64_t now = lz_now_ms();
    if (node->retry_at_ms && now < node->retry_at_ms)
        return lz_fail(LAZYATTN_STATUS_IO,
                       "%s: redis %s:%d failed %lld ms ago; not retried for another %lld ms "
                       "(retry_ms %d)",
                       who, node->host, node->port, (long long)(now - node->down_since_ms),
                       (long long)(node->retry_at_ms - now), c->retry_ms);
    node->rc = redisConnectWithTimeout(node->host, node->port, lz_tv(c->timeout_ms));
    if (!node->rc) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: redis context", who);
    if (node->rc->err || redisSetTimeout(node->rc, lz_tv(c->timeout_ms)) != REDIS_OK) {
        int st = lz_fail(LAZYATTN_STATUS_IO, "%s: redis %s:%d: %s", who, node->host, node->port,
                         node->rc->err ? node->rc->errstr : "cannot set the timeout");
        lz_node_down(c, i);
        return st;
    }
    if (c->password) { /* AUTH [user] password: the password never enters a message */
        const char *argv[3] = {"AUTH", c->user ? c->user : c->password, c->password};
        redisReply *rep = redisCommandArgv(node->rc, c->user ? 3 : 2, argv, NULL);
        if (!rep || rep->type != REDIS_REPLY_STATUS) {
            int st = lz_fail(LAZYATTN_STATUS_IO, "%s: redis %s:%d: AUTH%s%s refused: %s", who,
                             node->host, node->port, c->user ? " as user " : "",
                             c->user ? c->user : "",
                             rep && rep->type == REDIS_REPLY_ERROR ? rep->str
                             : node->rc->err                       ? node->rc->errstr
                                                                   : "unexpected reply");
            if (rep) freeReplyObject(rep);
            lz_node_down(c, i);
            return st;
        }
        freeReplyObject(rep);
    }
    node->retry_at_ms = 0;
    return LAZYATTN_STATUS_OK;
}

/* The index of node host:port, added if new; -1 when there are too many. */
static int lz_node_find(lz_redis_conn *c, const char *host, size_t host_len, int port) {
    for (int i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].port == port && strlen(c->nodes[i].host) == host_len &&
            memcmp(c->nodes[i].host, host, host_len) == 0)
            return i;
    if (c->n_nodes == LZ_REDIS_MAX_NODES) return -1;
    if (c->n_nodes == c->cap_nodes) {
        int cap = c->cap_nodes * 2 + 8;
        lz_redis_node *nodes = realloc(c->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes) return -1;
        c->nodes = nodes;
        c->cap_nodes = cap;
    }
    char *h = strndup(host, host_len);
    if (!h) return -1;
    lz_redis_node *node = &c->nodes[c->n_nodes];
    memset(node, 0, sizeof *node);
    node->host = h;
    node->port = port;
    return c->n_nodes++;
}

/* A CLUSTER SLOTS reply of node asked, read into map: 1 when it parses. */
static int lz_parse_slots(lz_redis_conn *c, int asked, const redisReply *rep, int16_t *map) {
    for (int s = 0; s < LZ_REDIS_SLOTS; s++) map[s] = -1;
    for (size_t k = 0; k < rep->elements; k++) {
        const redisReply *e = rep->element[k];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
            e->element[2]->elements < 2 || e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
            e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
            return 0;
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        long long port = e->element[2]->element[1]->integer;
        if (lo < 0 || hi < lo || hi >= LZ_REDIS_SLOTS || port < 1 || port > 65535) return 0;
        const redisReply *h = e->element[2]->element[0];
        const char *host = h->len ? h->str : c->nodes[asked].host; /* "": the node asked */
        size_t host_len = h->len ? (size_t)h->len : strlen(host);
        if (host_len == 1 && host[0] == '?') return 0; /* a node that does not know its address */
        int node = lz_node_find(c, host, host_len, (int)port);
        if (node < 0) return 0;
        for (long long s = lo; s <= hi; s++) map[s] = (int16_t)node;
    }
    return 1;
}

/* The slot map from the first node that answers CLUSTER SLOTS, connected
 * nodes first: OK, or IO naming the last reason. */
static int lz_refresh(lz_redis_conn *c, const char *who) {
    c->refreshed_at_ms = lz_now_ms();
    int16_t *map = malloc(sizeof c->slot_node);
    if (!map) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: slot map", who);
    int st = LAZYATTN_STATUS_IO, asked = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < c->n_nodes; i++) { /* c->n_nodes may grow meanwhile */
            int connected = c->nodes[i].rc && !c->nodes[i].rc->err;
            if (connected != (pass == 0)) continue;
            asked = 1;
            if ((st = lz_node_connect(c, i, who)) != 0) continue;
            redisReply *rep = redisCommand(c->nodes[i].rc, "CLUSTER SLOTS");
            if (!rep) {
                st = lz_fail(LAZYATTN_STATUS_IO, "%s: redis %s:%d: CLUSTER SLOTS: %s", who,
                             c->nodes[i].host, c->nodes[i].port, c->nodes[i].rc->errstr);
                lz_node_down(c, i);
                continue;
            }
            if (rep->type == REDIS_REPLY_ERROR &&
                (strstr(rep->str, "cluster support disabled") || !c->cluster)) {
                /* one server (or a user that may not ask, and no cluster seen yet): it serves
                 * every slot; a MOVED still moves a slot */
                for (int s = 0; s < LZ_REDIS_SLOTS; s++) c->slot_node[s] = (int16_t)i;
                c->cluster = 0;
                freeReplyObject(rep);
                free(map);
                return LAZYATTN_STATUS_OK;
            }
            if (rep->type == REDIS_REPLY_ARRAY && lz_parse_slots(c, i, rep, map)) {
                memcpy(c->slot_node, map, sizeof c->slot_node);
                c->cluster = 1;
                freeReplyObject(rep);
                free(map);
                return LAZYATTN_STATUS_OK;
            }
            st = lz_fail(LAZYATTN_STATUS_IO, "%s: redis %s:%d: CLUSTER SLOTS: %s", who,
                         c->nodes[i].host, c->nodes[i].port,
                         rep->type == REDIS_REPLY_ERROR ? rep->str : "a reply that does not parse");
            freeReplyObject(rep);
        }
    }
    free(map);
    if (!asked) st = lz_fail(LAZYATTN_STATUS_IO, "%s: no Redis node to ask for the slot map", who);
    return st;
}

/* A refresh when one is due; 1 when the slot then has another node. */
static int lz_refresh_moved(lz_redis_conn *c, int slot, int was, const char *who) {
    if (!c->cluster || lz_now_ms() - c->refreshed_at_ms < LZ_REDIS_REFRESH_MS) return 0;
    int saved_len = 0;
    char saved[512];
    const char *err = lazyattn_last_error(); /* keep the reason of the failure that led here */
    if (err) saved_len = snprintf(saved, sizeof saved, "%s", err);
    int moved = lz_refresh(c, who) == LAZYATTN_STATUS_OK && c->slot_node[slot] != was;
    if (!moved && saved_len > 0) lz_fail(LAZYATTN_STATUS_IO, "%s", saved);
    return moved;
}

/* "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>": the node
 * named (added if new; an empty host is node from's), or -1. */
static int lz_redirect_node(lz_redis_conn *c, const char *text, int from) {
    const char *sp = strchr(text, ' ');
    sp = sp ? strchr(sp + 1, ' ') : NULL;
    const char *colon = sp ? strrchr(sp + 1, ':') : NULL;
    if (!colon) return -1;
    long port = strtol(colon + 1, NULL, 10);
    if (port < 1 || port > 65535) return -1;
    const char *host = sp + 1;
    size_t host_len = (size_t)(colon - host);
    if (host_len == 0) {
        host = c->nodes[from].host;
        host_len = strlen(host);
    }
    return lz_node_find(c, host, host_len, (int)port);
}

static int lz_is_error(const redisReply *r, const char *word) {
    size_t n = strlen(word);
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, word, n) == 0 &&
           (r->str[n] == ' ' || r->str[n] == '\0');
}

void lz_redis_free_replies(redisReply **replies, int n) {
    for (int i = 0; i < n; i++) {
        if (replies[i]) freeReplyObject(replies[i]);
        replies[i] = NULL;
    }
}

/* cmds[0..n) pipelined on node; replies filled. OK, or IO (node dropped). */
static int lz_send(lz_redis_conn *c, int node, const lz_redis_cmd *cmds, int n, int asking,
                   redisReply **replies, const char *who, const char *what) {
    redisContext *rc = c->nodes[node].rc;
    int ok = 1;
    if (asking) ok = redisAppendCommand(rc, "ASKING") == REDIS_OK;
    for (int i = 0; i < n && ok; i++) {
        const char *argv[6];
        size_t lens[6];
        for (int a = 0; a < cmds[i].argc; a++) {
            argv[a] = cmds[i].argv[a];
            lens[a] = cmds[i].lens[a] ? cmds[i].lens[a] : strlen(argv[a]);
        }
        ok = redisAppendCommandArgv(rc, cmds[i].argc, argv, lens) == REDIS_OK;
    }
    /* Every reply is read, even after a bad one, so the connection stays in step. */
    for (int i = asking ? -1 : 0; i < n && ok; i++) {
        redisReply *rep = NULL;
        ok = redisGetReply(rc, (void **)&rep) == REDIS_OK && rep;
        if (i < 0) {
            if (rep) freeReplyObject(rep);
        } else
            replies[i] = rep;
    }
    if (ok) return LAZYATTN_STATUS_OK;
    int st = lz_fail(LAZYATTN_STATUS_IO, "%s: redis %s on %s:%d: %s", who, what,
                     c->nodes[node].host, c->nodes[node].port,
                     rc->err ? rc->errstr : "no reply");
    lz_redis_free_replies(replies, n);
    lz_node_down(c, node);
    return st;
}

int lz_redis_batch(lz_redis_conn *c, int slot, const lz_redis_cmd *cmds, int n,
                   redisReply **replies, const char *who, const char *what) {
    for (int i = 0; i < n; i++) replies[i] = NULL;
    for (int attempt = 0; attempt < LZ_REDIS_ATTEMPTS; attempt++) {
        int node = c->slot_node[slot];
        if (node < 0) {
            if (c->cluster && lz_now_ms() - c->refreshed_at_ms >= LZ_REDIS_REFRESH_MS)
                lz_refresh(c, who);
            node = c->slot_node[slot];
            if (node < 0)
                return lz_fail(LAZYATTN_STATUS_IO,
                               "%s: redis %s: no node of the cluster serves slot %d", who, what,
                               slot);
        }
        int st = lz_node_connect(c, node, who);
        if (!st) st = lz_send(c, node, cmds, n, 0, replies, who, what);
        if (st) {
            /* The node is down: after a failover the map names its successor. */
            if (lz_refresh_moved(c, slot, node, who)) continue;
            return st;
        }
        int again = 0;
        for (int i = 0; i < n && !st; i++) {
            redisReply *rep = replies[i];
            if (lz_is_error(rep, "MOVED")) {
                int to = lz_redirect_node(c, rep->str, node);
                if (to < 0) st = lz_fail(LAZYATTN_STATUS_IO, "%s: redis %s: %s", who, what, rep->str);
                else c->slot_node[slot] = (int16_t)to;
                again = 1;
            } else if (lz_is_error(rep, "ASK")) { /* this key only, this time only */
                int to = lz_redirect_node(c, rep->str, node);
                redisReply *asked = NULL;
                if (to < 0) st = lz_fail(LAZYATTN_STATUS_IO, "%s: redis %s: %s", who, what, rep->str);
                if (!st) st = lz_node_connect(c, to, who);
                if (!st) st = lz_send(c, to, &cmds[i], 1, 1, &asked, who, what);
                if (!st) {
                    freeReplyObject(rep);
                    replies[i] = asked;
                    if (lz_is_error(asked, "TRYAGAIN")) again = 1;
                }
            } else if (lz_is_error(rep, "TRYAGAIN")) {
                again = 1; /* a multi-key command while its slot migrates */
            }
        }
        if (st) {
            lz_redis_free_replies(replies, n);
            return st;
        }
        if (!again) return LAZYATTN_STATUS_OK;
        lz_redis_free_replies(replies, n);
        if (lz_now_ms() - c->refreshed_at_ms >= LZ_REDIS_REFRESH_MS && c->cluster) lz_refresh(c, who);
        lz_sleep_ms(attempt * 10);
    }
    return lz_fail(LAZYATTN_STATUS_IO, "%s: redis %s: still redirected after %d attempts", who,
                   what, LZ_REDIS_ATTEMPTS);
}

void lz_redis_conn_close(lz_redis_conn *c) {
    for (int i = 0; i < c->n_nodes; i++) {
        if (c->nodes[i].rc) redisFree(c->nodes[i].rc);
        free(c->nodes[i].host);
    }
    free(c->nodes);
    free(c->user);
    free(c->password);
    memset(c, 0, sizeof *c);
}

int lz_redis_conn_open(lz_redis_conn *c, lz_redis_url *u, int timeout_ms, int retry_ms,
                       const char *who) {
    memset(c, 0, sizeof *c);
    c->timeout_ms = timeout_ms;
    c->retry_ms = retry_ms;
    c->user = u->user;
    c->password = u->password;
    u->user = u->password = NULL;
    for (int s = 0; s < LZ_REDIS_SLOTS; s++) c->slot_node[s] = -1;
    int st = LAZYATTN_STATUS_OK;
    for (int i = 0; i < u->n_seeds && !st; i++)
        if (lz_node_find(c, u->hosts[i], strlen(u->hosts[i]), u->ports[i]) < 0)
            st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: seeds", who);
    c->n_seeds = c->n_nodes;
    int n_given = u->n_seeds; /* the same node named twice is still two seeds */
    lz_redis_url_free(u);
    /* A server that answers, not only a port that accepts: the first seed
     * that answers PING (after AUTH), then its slot map. */
    int seed = -1;
    for (int i = 0; i < c->n_seeds && !st && seed < 0; i++) {
        int s = lz_node_connect(c, i, who);
        redisReply *rep = s ? NULL : redisCommand(c->nodes[i].rc, "PING");
        if (!s && (!rep || rep->type != REDIS_REPLY_STATUS)) {
            s = lz_fail(LAZYATTN_STATUS_IO, "%s: redis %s:%d: PING: %s", who, c->nodes[i].host,
                        c->nodes[i].port,
                        rep && rep->type == REDIS_REPLY_ERROR ? rep->str
                        : c->nodes[i].rc->err                 ? c->nodes[i].rc->errstr
                                                              : "unexpected reply");
            lz_node_down(c, i);
        }
        if (rep) freeReplyObject(rep);
        if (s == LAZYATTN_STATUS_OUT_OF_HOST_MEMORY) st = s;
        if (!s) seed = i;
    }
    if (!st && seed < 0) st = LAZYATTN_STATUS_IO; /* the last seed's reason is the message */
    if (!st) st = lz_refresh(c, who);
    if (!st && !c->cluster && n_given > 1)
        st = lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                     "%s: %d seeds given, but %s:%d is not in cluster mode (several seeds are "
                     "nodes of one Redis Cluster)",
                     who, n_given, c->nodes[c->slot_node[0]].host, c->nodes[c->slot_node[0]].port);
    if (st) lz_redis_conn_close(c);
    return st;
}

#endif
