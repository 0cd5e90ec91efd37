/* SPDX-License-Identifier: Apache-2.0 */
/* Pinned host memory for a host store's values (issue 41), as LMCache's CPU
 * backend keeps its own: a few mapped CL_MEM_ALLOC_HOST_PTR buffers made
 * once, when a tier is attached, and carved into values first-fit. A tier
 * write reads a document back straight into its value's memory and a tier
 * load uploads straight from it: both DMAs of pinned memory, with no copy
 * on the host and no page pinned or unpinned while serving (on NVIDIA's
 * OpenCL a pageable transfer stalls the other threads' enqueues, and
 * making pinned memory is a driver call as slow as its size). Shared by
 * reference (the store, and each tier that attached it); the last release
 * unmaps and frees it. Thread-safe. Not installed. */
#ifndef LAZYATTN_PINNED_ARENA_H
#define LAZYATTN_PINNED_ARENA_H

#include "internal.h"

typedef struct lz_pinned_arena lz_pinned_arena;

/* Largest buffer of an arena: a value lies in one buffer, so this is also
 * the largest value it holds (a 2 048-token 8B document is 256 MiB). */
#define LZ_ARENA_CHUNK_MAX ((uint64_t)4 << 30)

/* An arena of up to bytes (>= 1) of pinned memory on ctx's device: as
 * many buffers of at most LZ_ARENA_CHUNK_MAX (and the device's largest
 * allocation) as it takes, fewer when the device refuses one (the arena is
 * then smaller: lz_arena_bytes). OK and *out, or the status with the
 * reason recorded (not even the first buffer could be made). */
int lz_arena_create(const lazyattn_context *ctx, uint64_t bytes, lz_pinned_arena **out);
void lz_arena_retain(lz_pinned_arena *a);
/* Drops a reference; the last unmaps and frees every buffer (every value
 * must have been freed or be never used again). NULL: nothing. */
void lz_arena_release(lz_pinned_arena *a);

/* size (>= 1) bytes of pinned memory, 4 KiB aligned; NULL when no buffer
 * has a free run that long (nothing recorded: the caller falls back). */
uint8_t *lz_arena_alloc(lz_pinned_arena *a, size_t size);
/* Gives back p, from lz_arena_alloc of a (NULL: nothing). */
void lz_arena_free(lz_pinned_arena *a, uint8_t *p);
/* 1 when p lies in a's memory. */
int lz_arena_owns(const lz_pinned_arena *a, const uint8_t *p);

cl_context lz_arena_context(const lz_pinned_arena *a);
/* One mapped CL_MEM_ALLOC_HOST_PTR buffer of bytes on context, mapped for
 * reading and writing with queue: its memory and *buffer; NULL when the
 * device made or mapped none (nothing left behind). The arena's buffers
 * and the tier's staging slots (tier_staging.c). */
uint8_t *lz_pinned_buffer_make(cl_context context, cl_command_queue queue, size_t bytes,
                               cl_mem *buffer);
/* Unmaps ptr on queue (waited for) and releases buffer (NULL: nothing). */
void lz_pinned_buffer_free(cl_command_queue queue, cl_mem buffer, uint8_t *ptr);
size_t lz_arena_largest(const lz_pinned_arena *a); /* bytes of its largest buffer */
uint64_t lz_arena_bytes(const lz_pinned_arena *a); /* pinned in all */
uint64_t lz_arena_used(lz_pinned_arena *a);        /* handed out, rounded to 4 KiB */

#endif
