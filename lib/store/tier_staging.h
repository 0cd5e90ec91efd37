/* SPDX-License-Identifier: Apache-2.0 */
/* A tier's pinned staging for pipelined loads: a small ring of mapped
 * CL_MEM_ALLOC_HOST_PTR buffers (at most LZ_STAGING_SLOTS, LZ_STAGING_BYTES
 * in all) that values are read or copied into when the store's own memory
 * is not good for a device copy (the directory store reads its file
 * straight into one; an engine's value is copied into one). A slot is
 * taken by one upload and given back once the upload ended; when none is
 * free or big enough the caller uses pageable memory (nothing waits).
 * Taken and given back under a lock of its own (a loader thread takes
 * slots, the serving thread gives them back). Not installed. */
#ifndef LAZYATTN_TIER_STAGING_H
#define LAZYATTN_TIER_STAGING_H

#include "internal.h"
#include "mutex.h"

#define LZ_STAGING_SLOTS 4
#define LZ_STAGING_BYTES ((size_t)1 << 30)

typedef struct lz_tier_staging {
    cl_context context;
    cl_command_queue queue; /* the tier's copy queue (its device: the map queue's) */
    /* maps and unmaps, made with the first slot: a queue of its own, so that
       a map never waits behind uploads held on the copy queue (an upload
       may wait on an event that only the thread taking a slot can set) */
    cl_command_queue map_queue;
    struct lz_staging_slot {
        cl_mem buffer;
        uint8_t *ptr; /* mapped while the staging lives */
        size_t bytes;
        int busy;
    } slots[LZ_STAGING_SLOTS];
    size_t total; /* bytes of all slots */
    lz_mutex lock; /* guards slots[] and total */
} lz_tier_staging;

/* Empty staging on context, mapping with queue (nothing allocated yet);
 * OUT_OF_HOST_MEMORY when its lock cannot be made. */
int lz_staging_init(lz_tier_staging *s, cl_context context, cl_command_queue queue);
/* A free slot of at least need bytes (made on first use, within the
 * bounds), taken: its memory, *slot its index; NULL when there is none. */
uint8_t *lz_staging_take(lz_tier_staging *s, size_t need, int *slot);
/* Gives slot back (its upload ended). */
void lz_staging_give(lz_tier_staging *s, int slot);
/* Unmaps and releases every slot, and the lock; the uploads must have
 * ended. */
void lz_staging_free(lz_tier_staging *s);

/* One load's slot of staging (slot -1: none taken). */
typedef struct lz_staging_pick {
    lz_tier_staging *staging;
    int slot;
} lz_staging_pick;
/* Gives the pick's slot back, if it holds one. */
void lz_staging_pick_give(lz_staging_pick *p);
/* A store's room (lz_store_room's take, user a pick): a slot of size bytes
 * for the value, the one an earlier failed read took given back first;
 * NULL when none is free. */
uint8_t *lz_staging_pick_take(void *user, size_t size);

#endif
