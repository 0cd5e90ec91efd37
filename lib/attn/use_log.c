/* SPDX-License-Identifier: Apache-2.0 */
/* The log of commands enqueued over a block pool (use_log.h). */
#include "attn/use_log.h"

#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* More uses than this pending at once and the log is scanned whole for
 * completed ones (uses of several queues complete out of order), not only
 * from its oldest end. */
#define LZ_USE_SCAN_FROM 256

static void lz_use_drop(lz_use *u) {
    clReleaseEvent(u->event);
    if (u->queue) clReleaseCommandQueue(u->queue);
}

static int lz_use_done(const lz_use *u) {
    cl_int status = CL_QUEUED;
    cl_int err = clGetEventInfo(u->event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status,
                                &status, NULL);
    /* CL_COMPLETE is 0; a negative status is a command that ended in error */
    return err != CL_SUCCESS || status <= CL_COMPLETE;
}

/* Drops completed uses: from the oldest end, and over the whole log when it
 * is long. */
static void lz_use_prune(lz_use_log *log) {
    while (log->head < log->n && lz_use_done(&log->uses[log->head])) lz_use_drop(&log->uses[log->head++]);
    if (log->head == log->n) log->head = log->n = 0;
    if (log->n - log->head > LZ_USE_SCAN_FROM) {
        size_t w = 0;
        for (size_t i = log->head; i < log->n; i++) {
            if (lz_use_done(&log->uses[i]))
                lz_use_drop(&log->uses[i]);
            else
                log->uses[w++] = log->uses[i];
        }
        log->head = 0;
        log->n = w;
    }
}

/* Room for one more element in an array of *cap elements of elem bytes
 * (first allocation: first): the array, moved, or NULL (the old one kept). */
static void *lz_grow_array(void *p, size_t *cap, size_t elem, size_t first) {
    size_t n = *cap ? 2 * *cap : first;
    void *q = n <= SIZE_MAX / elem ? realloc(p, n * elem) : NULL;
    if (q) *cap = n;
    return q;
}

void lz_use_log_free(lz_use_log *log) {
    for (size_t i = log->head; i < log->n; i++) lz_use_drop(&log->uses[i]);
    free(log->uses);
    for (size_t i = 0; i < log->n_queues; i++) clReleaseCommandQueue(log->queues[i].queue);
    free(log->queues);
    memset(log, 0, sizeof *log);
}

int lz_use_log_record(lz_use_log *log, cl_event event, cl_command_queue queue) {
    lz_use_prune(log);
    if (log->head > 0 && log->n == log->cap) { /* room at the front: move down */
        memmove(log->uses, log->uses + log->head, (log->n - log->head) * sizeof *log->uses);
        log->n -= log->head;
        log->head = 0;
    }
    if (log->n == log->cap) {
        lz_use *u = lz_grow_array(log->uses, &log->cap, sizeof *u, 64);
        if (!u) return LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
        log->uses = u;
    }
    if (!queue &&
        clGetEventInfo(event, CL_EVENT_COMMAND_QUEUE, sizeof queue, &queue, NULL) != CL_SUCCESS)
        queue = NULL;
    clRetainEvent(event);
    if (queue) clRetainCommandQueue(queue);
    log->uses[log->n++] = (lz_use){event, queue, ++log->next_seq};
    return LAZYATTN_STATUS_OK;
}

int lz_use_log_touch(lz_use_log *log, cl_command_queue queue) {
    if (log->last_queue < log->n_queues && log->queues[log->last_queue].queue == queue) {
        log->queues[log->last_queue].touched = 1;
        return LAZYATTN_STATUS_OK;
    }
    for (size_t i = 0; i < log->n_queues; i++)
        if (log->queues[i].queue == queue) {
            log->queues[i].touched = 1;
            log->last_queue = i;
            return LAZYATTN_STATUS_OK;
        }
    if (log->n_queues == log->cap_queues) {
        lz_use_queue *q = lz_grow_array(log->queues, &log->cap_queues, sizeof *q, 4);
        if (!q) return LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
        log->queues = q;
    }
    clRetainCommandQueue(queue);
    log->last_queue = log->n_queues;
    log->queues[log->n_queues++] = (lz_use_queue){queue, 1};
    return LAZYATTN_STATUS_OK;
}

/* A queue listed only by the log (the engine released it) and not touched
 * since the last stamp is let go. */
static int lz_use_queue_orphan(const lz_use_queue *q) {
    cl_uint refs = 0;
    return !q->touched &&
           clGetCommandQueueInfo(q->queue, CL_QUEUE_REFERENCE_COUNT, sizeof refs, &refs, NULL) ==
               CL_SUCCESS &&
           refs == 1;
}

uint64_t lz_use_log_stamp(lz_use_log *log) {
    size_t w = 0;
    for (size_t i = 0; i < log->n_queues; i++) {
        lz_use_queue *q = &log->queues[i];
        if (q->touched) {
            cl_event marker = NULL;
            if (clEnqueueMarkerWithWaitList(q->queue, 0, NULL, &marker) != CL_SUCCESS ||
                lz_use_log_record(log, marker, q->queue) != LAZYATTN_STATUS_OK)
                clFinish(q->queue); /* no marker to wait for: nothing left pending there */
            if (marker) clReleaseEvent(marker);
            q->touched = 0;
        } else if (lz_use_queue_orphan(q)) {
            clReleaseCommandQueue(q->queue);
            continue;
        }
        log->queues[w++] = *q;
    }
    log->n_queues = w;
    lz_use_prune(log);
    return log->head < log->n ? log->next_seq + 1 : 0;
}

int lz_use_log_pending(lz_use_log *log, uint64_t stamp, lz_wait_list *w) {
    lz_use_prune(log);
    size_t k = 0;
    while (log->head + k < log->n && log->uses[log->head + k].seq < stamp) k++;
    int st = lz_wait_list_reserve(w, k);
    if (st) return st;
    for (size_t i = 0; i < k; i++)
        lz_wait_list_add(w, log->uses[log->head + i].event, log->uses[log->head + i].queue);
    return LAZYATTN_STATUS_OK;
}
