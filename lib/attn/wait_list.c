/* SPDX-License-Identifier: Apache-2.0 */
/* Events another queue must wait for (wait_list.h). */
#include "attn/wait_list.h"

#include "lazyattn.h"

#include <stdlib.h>

int lz_wait_list_reserve(lz_wait_list *w, size_t cap) {
    *w = (lz_wait_list){0};
    if (cap == 0) return LAZYATTN_STATUS_OK;
    w->events = malloc(cap * sizeof *w->events);
    w->queues = malloc(cap * sizeof *w->queues);
    if (!w->events || !w->queues) {
        lz_wait_list_free(w);
        return LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
    }
    return LAZYATTN_STATUS_OK;
}

void lz_wait_list_add(lz_wait_list *w, cl_event event, cl_command_queue queue) {
    clRetainEvent(event);
    if (queue) clRetainCommandQueue(queue);
    w->events[w->n] = event;
    w->queues[w->n] = queue;
    w->n++;
}

cl_int lz_wait_list_barrier(lz_wait_list *w, cl_command_queue queue) {
    for (size_t i = 0; i < w->n; i++)
        if (w->queues[i] && (i == 0 || w->queues[i] != w->queues[i - 1]))
            clFlush(w->queues[i]);
    cl_int err = clEnqueueBarrierWithWaitList(queue, (cl_uint)w->n, w->events, NULL);
    lz_wait_list_free(w);
    return err;
}

void lz_wait_list_free(lz_wait_list *w) {
    for (size_t i = 0; i < w->n; i++) {
        clReleaseEvent(w->events[i]);
        if (w->queues[i]) clReleaseCommandQueue(w->queues[i]);
    }
    free(w->events);
    free(w->queues);
    *w = (lz_wait_list){0};
}
