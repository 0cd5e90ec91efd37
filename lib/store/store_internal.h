/* SPDX-License-Identifier: Apache-2.0 */
/* What the stores (store_host.c, store_dir.c, store_redis.c) share with
 * the store wrapper (store.c). Not installed. */
#ifndef LAZYATTN_STORE_INTERNAL_H
#define LAZYATTN_STORE_INTERNAL_H

#include "internal.h"
#include "store/redis_url.h"

/* "<model_id>-<digest>", 16 and 64 hex digits (82 bytes with the NUL);
 * store_key.c. */
#define LZ_STORE_KEY_TEXT 82
void lz_store_key_text(lazyattn_doc_key key, char out[LZ_STORE_KEY_TEXT]);

/* 1 for the library's own stores (host, dir, redis), whose values are
 * memory of their own that nothing changes until released; 0 for an
 * engine's store (lazyattn_store_create), whose values the tier copies
 * before checking them. */
int lz_store_values_private(const lazyattn_store *s);

/* The built-in stores' ops and constructors of their state. */
extern const lazyattn_store_ops lz_store_host_ops;
extern const lazyattn_store_ops lz_store_dir_ops;
extern const lazyattn_store_ops lz_store_redis_ops;
int lz_store_host_open(uint64_t budget_bytes, void **impl);
int lz_store_dir_open(const char *path, void **impl);
/* The Redis store of a checked config and its seeds (taken: emptied). */
int lz_store_redis_open(const lazyattn_redis_config *config, lz_redis_url *seeds, void **impl);

#endif
