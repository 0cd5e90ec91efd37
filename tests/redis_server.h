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

/* A port of 127.0.0.1 where nothing listens (bound, then closed). */
int lt_free_port(void);

/* Starts `redis-server` on 127.0.0.1:port (no persistence, log discarded);
 * returns its pid (asserted started; the caller waits for it to listen). */
pid_t lt_redis_spawn(int port);

#endif
