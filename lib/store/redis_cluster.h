/* SPDX-License-Identifier: Apache-2.0 */
/* The connections of a Redis store (store_redis.c): its seeds, one
 * connection per node, AUTH on each, the slot map of a Redis Cluster (or
 * every slot on the one server), and commands sent to the node of a slot,
 * following MOVED and ASK. Needs hiredis. Not installed. */
#ifndef LAZYATTN_STORE_REDIS_CLUSTER_H
#define LAZYATTN_STORE_REDIS_CLUSTER_H

#include "store/redis_url.h"

#include <hiredis/hiredis.h>

#define LZ_REDIS_SLOTS 16384

typedef struct lz_redis_node {
    char *host;
    int port;
    redisContext *rc;                   /* NULL or broken: reconnect */
    int64_t down_since_ms, retry_at_ms; /* last failure of its connection; 0: none */
} lz_redis_node;

typedef struct lz_redis_conn {
    lz_redis_node *nodes; /* [n_nodes]: the seeds first, then nodes the cluster named */
    int n_nodes, cap_nodes, n_seeds;
    int16_t slot_node[LZ_REDIS_SLOTS]; /* node of each slot; -1: ask a seed */
    int cluster;                       /* 1: the servers are a Redis Cluster */
    char *user, *password;             /* NULL: no AUTH */
    int timeout_ms, retry_ms;
    int64_t refreshed_at_ms; /* last slot-map refresh */
} lz_redis_conn;

/* Connects to the first seed that answers (AUTH, PING), learns whether it
 * is a cluster and reads its slot map. Takes u's strings (u is emptied,
 * also on failure). OK, or IO / INVALID_ARGUMENT with the reason. */
int lz_redis_conn_open(lz_redis_conn *c, lz_redis_url *u, int timeout_ms, int retry_ms,
                       const char *who);
void lz_redis_conn_close(lz_redis_conn *c);

/* The cluster slot of a key (CRC16 of its hash tag, as Redis computes it). */
int lz_redis_key_slot(const char *key);

/* One command of a batch: argc (<= 6) arguments of lens[i] bytes. */
typedef struct lz_redis_cmd {
    int argc;
    const char *argv[6];
    size_t lens[6]; /* 0: strlen */
} lz_redis_cmd;

/* Sends cmds[0..n) (n <= LZ_REDIS_BATCH_MAX; keys of one slot) pipelined
 * to the node serving slot and fills replies[0..n) (freed by the caller
 * with lz_redis_free_replies). A reply ASK is asked again on the node
 * named (ASKING first); MOVED updates the slot map and sends the batch
 * again; a lost connection marks its node down and refreshes the map.
 * Error replies other than those are returned as replies. OK, or IO with
 * the reason (replies then all NULL). */
#define LZ_REDIS_BATCH_MAX 64
int lz_redis_batch(lz_redis_conn *c, int slot, const lz_redis_cmd *cmds, int n,
                   redisReply **replies, const char *who, const char *what);
void lz_redis_free_replies(redisReply **replies, int n);

#endif
