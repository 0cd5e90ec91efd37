/* SPDX-License-Identifier: Apache-2.0 */
/* The tier's background writer: exports committed documents to the tier's
 * store on a thread of its own, so that the serving thread only enqueues.
 *
 * Ordering. A write is submitted on the serving thread: a marker on the
 * context's queue (after the commands that wrote the document's blocks)
 * and a user event, recorded as a use of the pool (lazyattn_pool_record_use),
 * that the writer completes once its read-back is done. The writer's reads,
 * on its own queue, wait for the marker; a block freed after the submit is
 * stamped with the user event (block_pool.c), so a command that rewrites it
 * waits until the read-back completed: no block is held, none is copied on
 * the device, and the write always sees the content at its submit.
 *
 * The writer's reader thread reads into pinned (mapped) host staging (or
 * pageable memory when its pinned buffers wait for their puts) and hands
 * each read-back to its putter thread, which seals the export (tokens,
 * header, checksums) and puts it in the store: a slow store delays the
 * puts, not the read-backs that block reuse waits on. It never calls the
 * cache; its store calls run beside the serving thread's (the library's
 * stores are thread-safe). A full queue drops the write, counted, without
 * waiting. Not installed. */
#ifndef LAZYATTN_TIER_WRITER_H
#define LAZYATTN_TIER_WRITER_H

#include "internal.h"

typedef struct lz_tier_writer lz_tier_writer;

/* A writer for the documents of pool (a device pool) into store, holding at
 * most depth (>= 1) writes waiting (to be read back, or read back and not
 * yet put) beside the one being put. */
int lz_tier_writer_create(lazyattn_pool *pool, lazyattn_store *store, int depth,
                          lz_tier_writer **out);

/* Hands the export of a document to the writer: its identity (model_id,
 * digest, doc_hash), tokens [n_tokens] and pool blocks [n_blocks], written
 * on the context's queue before this call. 1 when queued, 0 when dropped
 * (the queue was full, or no memory for it: counted, logged at DEBUG).
 * lease_owner (NULL: none): the cache whose lease of the document
 * (store_lease.c) the writer gives back once the write ended, or was
 * dropped after it was queued. A document found in the store when written
 * (looked up before its blocks are read back: then none is, and its blocks
 * are free to be rewritten at once) counts in tier_duplicates. */
int lz_tier_writer_submit(lz_tier_writer *w, uint64_t model_id, const uint8_t digest[32],
                          uint64_t doc_hash, const int32_t *tokens, int n_tokens,
                          const int32_t *blocks, int n_blocks, const void *lease_owner);

/* Adds the writer's counters to s (tier_writes, tier_write_bytes,
 * tier_write_errors, tier_writes_queued, tier_writes_dropped,
 * tier_writes_pending, tier_duplicates(_tokens)); s NULL resets them. */
void lz_tier_writer_stats(lz_tier_writer *w, lazyattn_cache_stats *s);

/* Ends the writer: the put in progress finishes, the writes still waiting
 * are dropped (counted; a read-back in progress first completes); the
 * threads joined; the counters added to into. */
void lz_tier_writer_destroy(lz_tier_writer *w, lazyattn_cache_stats *into);

#endif
