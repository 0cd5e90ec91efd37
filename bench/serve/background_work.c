/* SPDX-License-Identifier: Apache-2.0 */
/* The background kinds of bench_forward --background (background_work.h). */
#define _GNU_SOURCE /* pthread_setaffinity_np */
#include "background_work.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#define BG_PARTS 64 /* a document's reads: 32 layers x K and V */

static const char *const bg_names[BG_COUNT] = {"none",    "copy",   "copy4",
                                               "faults",  "reads64", "reads1",
                                               "writes64", "pageable64", "spin",
                                               "userevent"};
#define BG_MAX_THREADS 4

const char *bg_kind_name(bg_kind k) { return k >= 0 && k < BG_COUNT ? bg_names[k] : "?"; }

struct bg_work {
    bg_kind kind;
    size_t bytes;
    cl_context context;
    cl_command_queue queue;
    cl_mem device, pinned;
    uint8_t *pinned_ptr, *a, *b; /* the mapped pinned buffer; host buffers */
    int n_threads;
    struct bg_thread {
        struct bg_work *w;
        pthread_t thread;
        size_t first, bytes; /* its share of a copy */
        int failed;
        double moved, seconds; /* bytes moved, seconds run */
        volatile uint64_t sink; /* checksums, so the copies are not optimized out */
    } threads[BG_MAX_THREADS];
    atomic_int stop;
};

static double bg_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One round of w's kind by thread t: 0, or -1 (reason on stderr). */
static int bg_round(bg_work *w, struct bg_thread *t) {
    const size_t part = w->bytes / BG_PARTS;
    cl_int err = CL_SUCCESS;
    switch (w->kind) {
    case BG_COPY:
    case BG_COPY4:
        memcpy(w->b + t->first, w->a + t->first, t->bytes);
        t->sink += XXH3_64bits(w->b + t->first, t->bytes);
        return 0;
    case BG_FAULTS: {
        uint8_t *p = malloc(w->bytes);
        if (!p) {
            fprintf(stderr, "background faults: no memory for %zu bytes\n", w->bytes);
            return -1;
        }
        for (size_t i = 0; i < w->bytes; i += 4096) p[i] = (uint8_t)i;
        t->sink += p[w->bytes / 2];
        free(p);
        return 0;
    }
    case BG_READS64:
    case BG_PAGEABLE64: {
        uint8_t *dst = w->kind == BG_READS64 ? w->pinned_ptr : w->a;
        for (int i = 0; i < BG_PARTS && err == CL_SUCCESS; i++)
            err = clEnqueueReadBuffer(w->queue, w->device, CL_FALSE, (size_t)i * part, part,
                                      dst + (size_t)i * part, 0, NULL, NULL);
        break;
    }
    case BG_READS1:
        err = clEnqueueReadBuffer(w->queue, w->device, CL_FALSE, 0, w->bytes, w->pinned_ptr, 0,
                                  NULL, NULL);
        break;
    case BG_WRITES64:
        for (int i = 0; i < BG_PARTS && err == CL_SUCCESS; i++)
            err = clEnqueueWriteBuffer(w->queue, w->device, CL_FALSE, (size_t)i * part, part,
                                       w->pinned_ptr + (size_t)i * part, 0, NULL, NULL);
        break;
    case BG_SPIN: { /* about as long as a copy round, in registers */
        uint64_t x = t->sink | 1;
        for (long i = 0; i < 50L * 1000 * 1000; i++)
            x = x * 6364136223846793005ull + 1442695040888963407ull;
        t->sink = x;
        return 0;
    }
    case BG_USEREVENT: {
        cl_event u = clCreateUserEvent(w->context, &err);
        if (err == CL_SUCCESS) {
            err = clEnqueueMarkerWithWaitList(w->queue, 1, &u, NULL);
            if (err == CL_SUCCESS) err = clFlush(w->queue);
            struct timespec pause = {0, 5 * 1000 * 1000};
            nanosleep(&pause, NULL);
            clSetUserEventStatus(u, CL_COMPLETE);
            clReleaseEvent(u);
        }
        break;
    }
    default:
        return 0;
    }
    cl_int fin = clFinish(w->queue);
    if (err == CL_SUCCESS) err = fin;
    if (err != CL_SUCCESS) {
        fprintf(stderr, "background %s: OpenCL error %d\n", bg_kind_name(w->kind), (int)err);
        return -1;
    }
    return 0;
}

static void *bg_main(void *arg) {
    struct bg_thread *t = arg;
    bg_work *w = t->w;
    const double t0 = bg_now();
    while (!atomic_load(&w->stop)) {
        if (bg_round(w, t)) {
            t->failed = 1;
            break;
        }
        t->moved += (double)t->bytes;
    }
    t->seconds = bg_now() - t0;
    return NULL;
}

static void bg_free(bg_work *w) {
    if (w->pinned_ptr) {
        clEnqueueUnmapMemObject(w->queue, w->pinned, w->pinned_ptr, 0, NULL, NULL);
        clFinish(w->queue);
    }
    if (w->pinned) clReleaseMemObject(w->pinned);
    if (w->device) clReleaseMemObject(w->device);
    if (w->queue) clReleaseCommandQueue(w->queue);
    free(w->a);
    free(w->b);
    free(w);
}

/* Pins thread to cpus[0..n) (n 0: nothing done): 0, or -1 (reason on stderr). */
static int bg_pin(pthread_t thread, const int *cpus, int n) {
    if (n == 0) return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < n; i++) {
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE) {
            fprintf(stderr, "background: cpu %d out of range\n", cpus[i]);
            return -1;
        }
        const size_t cpu = (size_t)cpus[i];
        CPU_SET(cpu, &set);
    }
    int err = pthread_setaffinity_np(thread, sizeof set, &set);
    if (err) fprintf(stderr, "background: pthread_setaffinity_np: %s\n", strerror(err));
    return err ? -1 : 0;
}

int bg_pin_self(int cpu) { return bg_pin(pthread_self(), &cpu, 1); }

int bg_start(bg_kind kind, cl_context context, cl_device_id device, size_t bytes,
             const int *cpus, int n_cpus, bg_work **out) {
    *out = NULL;
    if (kind <= BG_NONE || kind >= BG_COUNT) return 0;
    if (bytes < 4 * BG_PARTS || bytes % (4 * BG_PARTS)) {
        fprintf(stderr, "background: %zu bytes: a multiple of %d\n", bytes, 4 * BG_PARTS);
        return -1;
    }
    bg_work *w = calloc(1, sizeof *w);
    if (!w) {
        fprintf(stderr, "background: no memory\n");
        return -1;
    }
    w->kind = kind;
    w->bytes = bytes;
    w->context = context;
    cl_int err = CL_SUCCESS;
    const char *what = "";
    const int copy = kind == BG_COPY || kind == BG_COPY4;
    if (copy || kind == BG_PAGEABLE64) { /* host buffers, every page touched */
        w->a = malloc(bytes);
        w->b = copy ? malloc(bytes) : NULL;
        if (!w->a || (copy && !w->b)) {
            fprintf(stderr, "background %s: no memory for %zu bytes\n", bg_kind_name(kind), bytes);
            bg_free(w);
            return -1;
        }
        for (size_t i = 0; i < bytes; i++) w->a[i] = (uint8_t)(i * 2654435761u >> 13);
        if (w->b) memset(w->b, 1, bytes);
    }
    if (kind >= BG_READS64) {
        what = "clCreateCommandQueue";
        w->queue = clCreateCommandQueue(context, device, 0, &err);
        if (err == CL_SUCCESS) {
            what = "clCreateBuffer";
            w->device = clCreateBuffer(context, CL_MEM_READ_WRITE, bytes, NULL, &err);
        }
        if (err == CL_SUCCESS)
            w->pinned = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes,
                                       NULL, &err);
        if (err == CL_SUCCESS) {
            what = "clEnqueueMapBuffer";
            w->pinned_ptr = clEnqueueMapBuffer(w->queue, w->pinned, CL_TRUE,
                                               CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL,
                                               NULL, &err);
        }
        if (err == CL_SUCCESS) { /* not zeros: the device value written from a pattern */
            for (size_t i = 0; i < bytes; i++) w->pinned_ptr[i] = (uint8_t)(i * 40503u >> 7);
            what = "clEnqueueWriteBuffer";
            err = clEnqueueWriteBuffer(w->queue, w->device, CL_TRUE, 0, bytes, w->pinned_ptr, 0,
                                       NULL, NULL);
        }
        if (err != CL_SUCCESS) {
            fprintf(stderr, "background %s: %s: OpenCL error %d\n", bg_kind_name(kind), what,
                    (int)err);
            if (w->pinned && !w->pinned_ptr) {
                clReleaseMemObject(w->pinned);
                w->pinned = NULL;
            }
            bg_free(w);
            return -1;
        }
    }
    atomic_init(&w->stop, 0);
    const int n = kind == BG_COPY4 ? 4 : 1;
    for (int i = 0; i < n; i++) {
        struct bg_thread *t = &w->threads[i];
        t->w = w;
        t->bytes = bytes / (size_t)n;
        t->first = (size_t)i * t->bytes;
        if (pthread_create(&t->thread, NULL, bg_main, t) != 0) {
            fprintf(stderr, "background %s: no thread\n", bg_kind_name(kind));
            bg_stop(w, NULL);
            return -1;
        }
        w->n_threads++;
        if (bg_pin(t->thread, cpus, n_cpus)) {
            bg_stop(w, NULL);
            return -1;
        }
    }
    *out = w;
    return 0;
}

int bg_stop(bg_work *w, double *gb_per_s) {
    if (gb_per_s) *gb_per_s = 0;
    if (!w) return 0;
    atomic_store(&w->stop, 1);
    int failed = 0;
    for (int i = 0; i < w->n_threads; i++) {
        struct bg_thread *t = &w->threads[i];
        pthread_join(t->thread, NULL);
        if (gb_per_s && t->seconds > 0) *gb_per_s += t->moved / t->seconds * 1e-9;
        failed |= t->failed;
    }
    bg_free(w);
    return failed ? -1 : 0;
}
