/* SPDX-License-Identifier: Apache-2.0 */
/* A Redis URL, redis://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...], read into
 * its seeds and credentials (lazyattn_redis_config.url). Not installed. */
#ifndef LAZYATTN_STORE_REDIS_URL_H
#define LAZYATTN_STORE_REDIS_URL_H

#include "internal.h"

/* Seeds of a Redis store: [n_seeds] host names (IPv6 without brackets) and
 * ports; user and password NULL when absent (percent-decoded). */
typedef struct lz_redis_url {
    int n_seeds;
    char **hosts;
    int *ports;
    char *user, *password;
} lz_redis_url;

/* Seeds and credentials: OK; INVALID_ARGUMENT naming what is wrong;
 * UNSUPPORTED for rediss:// (no TLS in this hiredis); OUT_OF_HOST_MEMORY.
 * who: the function named in the message. On failure *u holds nothing. */
int lz_redis_url_parse(const char *url, lz_redis_url *u, const char *who);
void lz_redis_url_free(lz_redis_url *u);

/* The most seeds one URL may name. */
#define LZ_REDIS_MAX_SEEDS 64

#endif
