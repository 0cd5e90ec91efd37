/* SPDX-License-Identifier: Apache-2.0 */
/* The commands enqueued over a block pool that may still run, so that a
 * block freed now is rewritten only after the commands enqueued before its
 * free (block_pool.c). A launch only marks its queue as touched (no event:
 * a launch costs a pointer compare); a free then enqueues one marker on
 * each queue touched since the last free, whose event completes after
 * every command enqueued there before it. Those events, and the engine's
 * own (lazyattn_pool_record_use), are the uses: each kept with its queue
 * retained (the queue is flushed before another queue waits on it, as
 * OpenCL asks) until seen complete. Not locked: the pool's mutex guards
 * it. Not installed. */
#ifndef LAZYATTN_USE_LOG_H
#define LAZYATTN_USE_LOG_H

#include <stddef.h>
#include <stdint.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "attn/wait_list.h"

typedef struct lz_use {
    cl_event event;
    cl_command_queue queue; /* NULL for an event of no queue (a user event) */
    uint64_t seq;           /* increasing in the order recorded, from 1 */
} lz_use;

/* A queue launches ran on (retained while listed). */
typedef struct lz_use_queue {
    cl_command_queue queue;
    int touched; /* a launch since the last stamp */
} lz_use_queue;

typedef struct lz_use_log {
    lz_use *uses;    /* [cap]; the pending uses are uses[head .. n), oldest first */
    size_t head, n, cap;
    uint64_t next_seq;
    lz_use_queue *queues; /* [cap_queues], n_queues listed */
    size_t n_queues, cap_queues;
    size_t last_queue;    /* where the last touch found its queue */
} lz_use_log;

/* Releases every event and queue held (nothing waits). */
void lz_use_log_free(lz_use_log *log);

/* Records a command's event (retained with its queue: `queue`, or NULL to
 * ask the event). OUT_OF_HOST_MEMORY when the log cannot grow: the caller
 * then waits for the event instead. */
int lz_use_log_record(lz_use_log *log, cl_event event, cl_command_queue queue);

/* A launch on queue: marks it touched (listing and retaining it the first
 * time). OUT_OF_HOST_MEMORY when it cannot be listed: the caller then
 * waits for the queue instead. */
int lz_use_log_touch(lz_use_log *log, cl_command_queue queue);

/* The stamp of a free made now: a marker is enqueued on every queue
 * touched since the last stamp (a queue where that fails is finished
 * instead); the uses so far that are not seen complete must complete
 * before the block is written again. 0 when none is pending (a reuse then
 * waits for nothing). */
uint64_t lz_use_log_stamp(lz_use_log *log);

/* The pending uses recorded before `stamp` (seq < stamp), their events and
 * queues retained into *w (empty when none). OUT_OF_HOST_MEMORY when the
 * list cannot be made. */
int lz_use_log_pending(lz_use_log *log, uint64_t stamp, lz_wait_list *w);

#endif
