/* SPDX-License-Identifier: Apache-2.0 */
/* Events another queue must wait for, each retained with its queue (NULL
 * for an event of no queue): the pending uses of reused blocks (use_log.c)
 * and the uploads in flight of a layer (layer_fence.c) are handed to
 * block_pool.c as one, which puts a barrier on its queue for them. Not
 * installed. */
#ifndef LAZYATTN_WAIT_LIST_H
#define LAZYATTN_WAIT_LIST_H

#include <stddef.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

typedef struct lz_wait_list {
    cl_event *events;         /* [n] retained */
    cl_command_queue *queues; /* [n] retained, or NULL entries */
    size_t n;
} lz_wait_list;

/* Room for `cap` entries (an empty list for 0). OUT_OF_HOST_MEMORY when
 * the arrays cannot be made (the list is then empty). */
int lz_wait_list_reserve(lz_wait_list *w, size_t cap);
/* Appends event and queue, retained (within the reserved room). */
void lz_wait_list_add(lz_wait_list *w, cl_event event, cl_command_queue queue);
/* A barrier on queue after every event listed (their queues flushed first,
 * as OpenCL asks before another queue waits on them); releases the list
 * whether or not the barrier was enqueued. The OpenCL error, or CL_SUCCESS. */
cl_int lz_wait_list_barrier(lz_wait_list *w, cl_command_queue queue);
/* Releases what the list holds. */
void lz_wait_list_free(lz_wait_list *w);

#endif
