/* SPDX-License-Identifier: Apache-2.0 */
/* Redis for the store and tier tests (test_doc_store.c, test_doc_tier.c):
 * the shared server CI names in LAZYATTN_TEST_REDIS, and servers of a test's
 * own on free loopback ports (to stop, stall or kill mid-run). */
#ifndef LAZYATTN_TEST_REDIS_SERVER_H
#define LAZYATTN_TEST_REDIS_SERVER_H

#include <stddef.h>
#include <sys/types.h>

/* LAZYATTN_TEST_REDIS=HOST:PORT: 1 with host[0..n) and *port filled, else 0. */
int lt_redis_target(char *host, size_t n, int *port);

/* In a cmocka test: host (a char array) and *port from lt_redis_target, or
 * the test skipped saying why (built without hiredis, or no server named).
 * CI checks that no "Redis tests skipped" is printed when it runs a server. */
#ifdef LAZYATTN_HAVE_HIREDIS
#define LT_REDIS_TARGET_OR_SKIP(host, port)                                      \
    do {                                                                         \
        if (!lt_redis_target(host, sizeof host, port)) {                         \
            print_message("Redis tests skipped: LAZYATTN_TEST_REDIS unset\n");  \
            skip();                                                              \
        }                                                                        \
    } while (0)
#else
#define LT_REDIS_TARGET_OR_SKIP(host, port)                                      \
    do {                                                                         \
        (void)(host);                                                            \
        print_message("Redis tests skipped: built without hiredis\n");          \
        skip();                                                                  \
    } while (0)
#endif

/* A port of 127.0.0.1 where nothing listens (bound, then closed). */
int lt_free_port(void);

/* Starts `redis-server` on 127.0.0.1:port (no persistence, log discarded);
 * returns its pid (asserted started; the caller waits for it to listen). */
pid_t lt_redis_spawn(int port);

/* lt_redis_spawn with extra arguments (NULL-terminated; NULL: none). */
pid_t lt_redis_spawn_args(int port, const char *const *extra);

/* Waits up to timeout_ms until 127.0.0.1:port answers PING: 1, else 0. */
int lt_redis_wait(int port, int timeout_ms);

/* A Redis Cluster of a test's own: 3 masters + 3 replicas on free loopback
 * ports, cluster-node-timeout 1000 ms, in a temporary directory (their
 * nodes.conf); lt_cluster_start asserts it reached cluster_state:ok. */
#define LT_CLUSTER_NODES 6
typedef struct lt_cluster {
    char dir[64];
    int ports[LT_CLUSTER_NODES];
    pid_t pids[LT_CLUSTER_NODES]; /* 0: not running */
} lt_cluster;
void lt_cluster_start(lt_cluster *c);
/* (Re)starts node i with its nodes.conf (it rejoins the cluster). */
void lt_cluster_node_start(lt_cluster *c, int i);
/* Kills every node still running and removes the directory. */
void lt_cluster_stop(lt_cluster *c);
/* 1 when every node that runs reports cluster_state:ok, and every replica
 * its link to its master up (within timeout_ms). */
int lt_cluster_wait_ok(const lt_cluster *c, int timeout_ms);

#endif
