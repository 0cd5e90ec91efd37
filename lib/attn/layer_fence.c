/* SPDX-License-Identifier: Apache-2.0 */
/* Uploads in flight into a pool, layer by layer (layer_fence.h). */
#include "attn/layer_fence.h"

#include "internal.h"

#include <stdlib.h>
#include <string.h>

int lz_layer_fence_init(lz_layer_fence *f, int n_layers) {
    memset(f, 0, sizeof *f);
    f->layers = calloc((size_t)n_layers, sizeof *f->layers);
    if (!f->layers) return LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
    f->n_layers = n_layers;
    return LAZYATTN_STATUS_OK;
}

static void lz_fence_drop(lz_fence_event *e) {
    clReleaseEvent(e->event);
    if (e->queue) clReleaseCommandQueue(e->queue);
}

void lz_layer_fence_free(lz_layer_fence *f) {
    for (int l = 0; f->layers && l < f->n_layers; l++) {
        for (size_t i = 0; i < f->layers[l].n; i++) lz_fence_drop(&f->layers[l].items[i]);
        free(f->layers[l].items);
    }
    free(f->layers);
    memset(f, 0, sizeof *f);
}

int lz_layer_fence_add(lz_layer_fence *f, int layer, cl_event event, cl_command_queue queue) {
    struct lz_fence_list *list = &f->layers[layer];
    if (list->n == list->cap) {
        size_t cap = list->cap ? 2 * list->cap : 8;
        lz_fence_event *items = realloc(list->items, cap * sizeof *items);
        if (!items) return LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;
        list->items = items;
        list->cap = cap;
    }
    clRetainEvent(event);
    if (queue) clRetainCommandQueue(queue);
    list->items[list->n++] = (lz_fence_event){event, queue};
    f->n_pending++;
    return LAZYATTN_STATUS_OK;
}

/* An upload that ended, completed or failed (its failure is reported by
 * the tier that enqueued it), holds no reader back. */
static int lz_fence_ended(const lz_fence_event *e) {
    cl_int status = CL_QUEUED;
    cl_int err = clGetEventInfo(e->event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status,
                                &status, NULL);
    return err != CL_SUCCESS || status <= CL_COMPLETE;
}

static void lz_fence_prune(lz_layer_fence *f, struct lz_fence_list *list) {
    size_t w = 0;
    for (size_t i = 0; i < list->n; i++) {
        if (lz_fence_ended(&list->items[i])) {
            lz_fence_drop(&list->items[i]);
            f->n_pending--;
        } else {
            list->items[w++] = list->items[i];
        }
    }
    list->n = w;
}

int lz_layer_fence_pending(lz_layer_fence *f, int layer, lz_wait_list *w) {
    *w = (lz_wait_list){0};
    if (f->n_pending == 0) return LAZYATTN_STATUS_OK;
    int first = layer < 0 ? 0 : layer, last = layer < 0 ? f->n_layers - 1 : layer;
    size_t k = 0;
    for (int l = first; l <= last; l++) {
        lz_fence_prune(f, &f->layers[l]);
        k += f->layers[l].n;
    }
    int st = lz_wait_list_reserve(w, k);
    if (st) return st;
    for (int l = first; l <= last; l++)
        for (size_t j = 0; j < f->layers[l].n; j++)
            lz_wait_list_add(w, f->layers[l].items[j].event, f->layers[l].items[j].queue);
    return LAZYATTN_STATUS_OK;
}
