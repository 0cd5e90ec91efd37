/* SPDX-License-Identifier: Apache-2.0 */
/* A host store's pinned memory (pinned_arena.h): mapped buffers, each a
 * sorted list of the runs handed out, first fit. */
#include "store/pinned_arena.h"
#include "mutex.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define LZ_ARENA_ALIGN ((size_t)4096)

typedef struct lz_arena_run {
    size_t offset, bytes; /* bytes rounded up to LZ_ARENA_ALIGN */
} lz_arena_run;

typedef struct lz_arena_chunk {
    cl_mem buffer;
    uint8_t *ptr; /* mapped while the arena lives */
    size_t bytes;
    lz_arena_run *runs; /* [n_runs], by offset */
    int n_runs, cap_runs;
} lz_arena_chunk;

struct lz_pinned_arena {
    atomic_int refs;
    cl_context context;
    cl_command_queue queue; /* maps and unmaps */
    lz_arena_chunk *chunks;
    int n_chunks;
    uint64_t bytes, used;
    lz_mutex lock; /* guards the runs and used */
};

uint8_t *lz_pinned_buffer_make(cl_context context, cl_command_queue queue, size_t bytes,
                               cl_mem *buffer) {
    cl_int err;
    *buffer = NULL;
    cl_mem m = clCreateBuffer(context, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS) return NULL;
    void *p = clEnqueueMapBuffer(queue, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL,
                                 NULL, &err);
    if (err != CL_SUCCESS) {
        clReleaseMemObject(m);
        return NULL;
    }
    *buffer = m;
    return p;
}

void lz_pinned_buffer_free(cl_command_queue queue, cl_mem buffer, uint8_t *ptr) {
    if (!buffer) return;
    clEnqueueUnmapMemObject(queue, buffer, ptr, 0, NULL, NULL);
    clFinish(queue);
    clReleaseMemObject(buffer);
}

static void lz_arena_destroy(lz_pinned_arena *a) {
    for (int i = 0; i < a->n_chunks; i++) {
        lz_arena_chunk *c = &a->chunks[i];
        lz_pinned_buffer_free(a->queue, c->buffer, c->ptr);
        free(c->runs);
    }
    if (a->queue) clReleaseCommandQueue(a->queue);
    if (a->context) clReleaseContext(a->context);
    free(a->chunks);
    lz_mutex_destroy(&a->lock);
    free(a);
}

/* Adds a mapped buffer of bytes to a: 1, or 0 when the device refused it. */
static int lz_arena_add_chunk(lz_pinned_arena *a, size_t bytes) {
    cl_mem m;
    uint8_t *p = lz_pinned_buffer_make(a->context, a->queue, bytes, &m);
    if (!p) return 0;
    lz_arena_chunk *c = &a->chunks[a->n_chunks++];
    memset(c, 0, sizeof *c);
    c->buffer = m;
    c->ptr = p;
    c->bytes = bytes;
    a->bytes += bytes;
    return 1;
}

int lz_arena_create(const lazyattn_context *ctx, uint64_t bytes, lz_pinned_arena **out) {
    *out = NULL;
    LZ_CHECK_ARG(ctx && bytes >= 1, "the tier's pinned store memory: bad arguments");
    uint64_t chunk = LZ_ARENA_CHUNK_MAX;
    if (ctx->max_alloc_size >= LZ_ARENA_ALIGN && ctx->max_alloc_size < chunk)
        chunk = ctx->max_alloc_size & ~(uint64_t)(LZ_ARENA_ALIGN - 1);
    if (chunk > SIZE_MAX) chunk = (uint64_t)SIZE_MAX & ~(uint64_t)(LZ_ARENA_ALIGN - 1);
    uint64_t n = bytes / chunk + (bytes % chunk != 0); /* the last buffer may be shorter */
    if (n > 4096)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                       "the tier's pinned store memory: %llu bytes in buffers of %llu",
                       (unsigned long long)bytes, (unsigned long long)chunk);
    lz_pinned_arena *a = calloc(1, sizeof *a);
    if (a) a->chunks = calloc((size_t)n, sizeof *a->chunks);
    if (!a || !a->chunks || lz_mutex_init(&a->lock) != 0) {
        if (a) free(a->chunks);
        free(a);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "the tier's pinned store memory");
    }
    atomic_init(&a->refs, 1);
    clRetainContext(ctx->context);
    a->context = ctx->context;
    cl_int err;
    a->queue = clCreateCommandQueue(ctx->context, ctx->device, 0, &err);
    if (err != CL_SUCCESS) {
        a->queue = NULL;
        lz_arena_destroy(a);
        return lz_cl_fail(err, "the tier's pinned store memory: clCreateCommandQueue");
    }
    for (uint64_t left = bytes; left > 0;) {
        uint64_t b = left < chunk ? left : chunk;
        if (!lz_arena_add_chunk(a, (size_t)b)) break; /* the device pins no more */
        left -= b;
    }
    if (a->n_chunks == 0) {
        lz_arena_destroy(a);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY,
                       "the tier's pinned store memory: the device pinned no buffer of %llu bytes",
                       (unsigned long long)(bytes < chunk ? bytes : chunk));
    }
    *out = a;
    return LAZYATTN_STATUS_OK;
}

void lz_arena_retain(lz_pinned_arena *a) { atomic_fetch_add(&a->refs, 1); }

void lz_arena_release(lz_pinned_arena *a) {
    if (a && atomic_fetch_sub(&a->refs, 1) == 1) lz_arena_destroy(a);
}

/* Inserts run r at index i of c's runs: 0, or -1 without memory. */
static int lz_chunk_insert(lz_arena_chunk *c, int i, lz_arena_run r) {
    if (c->n_runs == c->cap_runs) {
        int cap = c->cap_runs ? 2 * c->cap_runs : 16;
        lz_arena_run *runs = realloc(c->runs, (size_t)cap * sizeof *runs);
        if (!runs) return -1;
        c->runs = runs;
        c->cap_runs = cap;
    }
    memmove(&c->runs[i + 1], &c->runs[i], (size_t)(c->n_runs - i) * sizeof *c->runs);
    c->runs[i] = r;
    c->n_runs++;
    return 0;
}

uint8_t *lz_arena_alloc(lz_pinned_arena *a, size_t size) {
    if (!a || size == 0 || size > SIZE_MAX - LZ_ARENA_ALIGN) return NULL;
    size_t need = (size + LZ_ARENA_ALIGN - 1) & ~(LZ_ARENA_ALIGN - 1);
    uint8_t *p = NULL;
    lz_mutex_lock(&a->lock);
    for (int k = 0; k < a->n_chunks && !p; k++) {
        lz_arena_chunk *c = &a->chunks[k];
        size_t at = 0; /* the gap before run i (i == n_runs: the tail) */
        for (int i = 0; i <= c->n_runs && !p; i++) {
            size_t end = i < c->n_runs ? c->runs[i].offset : c->bytes;
            if (end - at >= need) {
                if (lz_chunk_insert(c, i, (lz_arena_run){at, need}) == 0) {
                    p = c->ptr + at;
                    a->used += need;
                }
                break; /* inserted, or no memory for the list: no other gap helps */
            }
            if (i < c->n_runs) at = c->runs[i].offset + c->runs[i].bytes;
        }
    }
    lz_mutex_unlock(&a->lock);
    return p;
}

/* The chunk of a holding p, or NULL. */
static lz_arena_chunk *lz_arena_chunk_of(const lz_pinned_arena *a, const uint8_t *p) {
    for (int k = 0; k < a->n_chunks; k++) {
        const lz_arena_chunk *c = &a->chunks[k];
        if ((uintptr_t)p >= (uintptr_t)c->ptr && (uintptr_t)p < (uintptr_t)c->ptr + c->bytes)
            return &a->chunks[k];
    }
    return NULL;
}

void lz_arena_free(lz_pinned_arena *a, uint8_t *p) {
    if (!a || !p) return;
    lz_mutex_lock(&a->lock);
    lz_arena_chunk *c = lz_arena_chunk_of(a, p);
    size_t off = c ? (size_t)(p - c->ptr) : 0;
    int lo = 0, hi = c ? c->n_runs : 0; /* the run at off: by offset */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (c->runs[mid].offset < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (c && lo < c->n_runs && c->runs[lo].offset == off) {
        a->used -= c->runs[lo].bytes;
        memmove(&c->runs[lo], &c->runs[lo + 1], (size_t)(c->n_runs - lo - 1) * sizeof *c->runs);
        c->n_runs--;
    }
    lz_mutex_unlock(&a->lock);
}

int lz_arena_owns(const lz_pinned_arena *a, const uint8_t *p) {
    return a && p && lz_arena_chunk_of(a, p) != NULL;
}

cl_context lz_arena_context(const lz_pinned_arena *a) { return a->context; }
uint64_t lz_arena_bytes(const lz_pinned_arena *a) { return a->bytes; }

size_t lz_arena_largest(const lz_pinned_arena *a) {
    size_t m = 0;
    for (int k = 0; k < a->n_chunks; k++)
        if (a->chunks[k].bytes > m) m = a->chunks[k].bytes;
    return m;
}

uint64_t lz_arena_used(lz_pinned_arena *a) {
    lz_mutex_lock(&a->lock);
    uint64_t u = a->used;
    lz_mutex_unlock(&a->lock);
    return u;
}
