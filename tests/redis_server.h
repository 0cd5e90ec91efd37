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

#endif
