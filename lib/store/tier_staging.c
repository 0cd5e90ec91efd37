/* SPDX-License-Identifier: Apache-2.0 */
/* A tier's pinned staging ring (tier_staging.h). */
#include "store/pinned_arena.h"
#include "store/tier_staging.h"

#include <string.h>

int lz_staging_init(lz_tier_staging *s, cl_context context, cl_command_queue queue) {
    memset(s, 0, sizeof *s);
    s->context = context;
    s->queue = queue;
    if (lz_mutex_init(&s->lock) != 0)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "the tier's staging lock");
    return LAZYATTN_STATUS_OK;
}

static void lz_slot_release(lz_tier_staging *s, struct lz_staging_slot *slot) {
    if (!slot->buffer) return;
    lz_pinned_buffer_free(s->map_queue, slot->buffer, slot->ptr);
    s->total -= slot->bytes;
    memset(slot, 0, sizeof *slot);
}

/* Makes slot a mapped buffer of bytes; 0 when the device cannot. */
static int lz_slot_make(lz_tier_staging *s, struct lz_staging_slot *slot, size_t bytes) {
    cl_int err;
    if (!s->map_queue) {
        cl_device_id dev = NULL;
        if (clGetCommandQueueInfo(s->queue, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL) != CL_SUCCESS)
            return 0;
        s->map_queue = clCreateCommandQueue(s->context, dev, 0, &err);
        if (err != CL_SUCCESS) {
            s->map_queue = NULL;
            return 0;
        }
    }
    cl_mem m;
    uint8_t *p = lz_pinned_buffer_make(s->context, s->map_queue, bytes, &m);
    if (!p) return 0;
    slot->buffer = m;
    slot->ptr = p;
    slot->bytes = bytes;
    s->total += bytes;
    return 1;
}

static uint8_t *lz_staging_take_locked(lz_tier_staging *s, size_t need, int *slot) {
    int best = -1;
    for (int i = 0; i < LZ_STAGING_SLOTS; i++) { /* the smallest free slot that holds it */
        struct lz_staging_slot *x = &s->slots[i];
        if (x->buffer && !x->busy && x->bytes >= need && (best < 0 || x->bytes < s->slots[best].bytes))
            best = i;
    }
    if (best < 0) {
        /* a new slot (rounded up to 1 MiB), in an empty place or in place of a
         * free one too small, within the total */
        size_t bytes = (need + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
        for (int i = 0; i < LZ_STAGING_SLOTS && best < 0; i++) {
            struct lz_staging_slot *x = &s->slots[i];
            if (x->busy) continue;
            if (s->total - x->bytes + bytes > LZ_STAGING_BYTES) continue;
            lz_slot_release(s, x);
            if (lz_slot_make(s, x, bytes)) best = i;
        }
    }
    if (best < 0) return NULL;
    s->slots[best].busy = 1;
    *slot = best;
    return s->slots[best].ptr;
}

uint8_t *lz_staging_take(lz_tier_staging *s, size_t need, int *slot) {
    if (!s->queue || need == 0 || need > LZ_STAGING_BYTES) return NULL;
    lz_mutex_lock(&s->lock);
    uint8_t *p = lz_staging_take_locked(s, need, slot);
    lz_mutex_unlock(&s->lock);
    return p;
}

void lz_staging_give(lz_tier_staging *s, int slot) {
    if (slot < 0 || slot >= LZ_STAGING_SLOTS) return;
    lz_mutex_lock(&s->lock);
    s->slots[slot].busy = 0;
    lz_mutex_unlock(&s->lock);
}

void lz_staging_free(lz_tier_staging *s) {
    for (int i = 0; i < LZ_STAGING_SLOTS; i++) lz_slot_release(s, &s->slots[i]);
    if (s->map_queue) clReleaseCommandQueue(s->map_queue);
    s->map_queue = NULL;
    lz_mutex_destroy(&s->lock);
}

void lz_staging_pick_give(lz_staging_pick *p) {
    if (p->slot >= 0) lz_staging_give(p->staging, p->slot);
    p->slot = -1;
}

uint8_t *lz_staging_pick_take(void *user, size_t size) {
    lz_staging_pick *p = user;
    lz_staging_pick_give(p);
    return lz_staging_take(p->staging, size, &p->slot);
}
