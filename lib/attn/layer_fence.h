/* SPDX-License-Identifier: Apache-2.0 */
/* Uploads into a block pool still in flight, layer by layer: a tier load
 * enqueues each layer's K and V on a copy queue of its own and hangs that
 * layer's last event here (block_pool.c keeps one fence per device pool);
 * a command that reads layer l's blocks first waits for the events of
 * layer l only (lz_pool_order_reads). Each event is kept with its queue
 * retained (flushed before another queue waits on it) until seen ended.
 * Not locked: the pool's mutex guards it. Not installed. */
#ifndef LAZYATTN_LAYER_FENCE_H
#define LAZYATTN_LAYER_FENCE_H

#include <stddef.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "attn/wait_list.h"

typedef struct lz_fence_event {
    cl_event event;
    cl_command_queue queue;
} lz_fence_event;

typedef struct lz_layer_fence {
    struct lz_fence_list {
        lz_fence_event *items; /* [cap], n pending */
        size_t n, cap;
    } *layers; /* [n_layers] */
    int n_layers;
    size_t n_pending; /* over all layers: 0 lets a reader pass at once */
} lz_layer_fence;

/* OUT_OF_HOST_MEMORY when the lists cannot be made. */
int lz_layer_fence_init(lz_layer_fence *f, int n_layers);
/* Releases every event and queue held (nothing waits). */
void lz_layer_fence_free(lz_layer_fence *f);
/* Adds the event after which layer's upload is in place (retained, with
 * queue). OUT_OF_HOST_MEMORY when the list cannot grow: the caller then
 * waits for the event instead. */
int lz_layer_fence_add(lz_layer_fence *f, int layer, cl_event event, cl_command_queue queue);
/* The events of layer (-1: of every layer) not seen ended yet, retained
 * with their queues into *w (empty when none). OUT_OF_HOST_MEMORY when the
 * list cannot be made. */
int lz_layer_fence_pending(lz_layer_fence *f, int layer, lz_wait_list *w);

#endif
