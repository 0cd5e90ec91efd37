/* SPDX-License-Identifier: Apache-2.0 */
#include "rewriter.h"

#include <fcntl.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

double rewriter_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *rewrite_loop(void *p) {
    rewriter *r = p;
    int fd = open(r->path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        r->failed = 1;
        return NULL;
    }
    for (int i = 0; !atomic_load(&r->stop); i++) {
        const uint8_t *v = r->value[i & 1];
        if (ftruncate(fd, 0) != 0) r->failed = 1;
        for (size_t off = 0; off < r->n; off += 4096) {
            size_t len = r->n - off < 4096 ? r->n - off : 4096;
            if (pwrite(fd, v + off, len, (off_t)off) != (ssize_t)len) r->failed = 1;
        }
        atomic_fetch_add(&r->rewrites, 1);
        struct timespec pause = {0, 1000L * r->pause_us};
        if (r->pause_us) nanosleep(&pause, NULL);
    }
    close(fd);
    return NULL;
}

int rewriter_start(rewriter *r, const char *path, const uint8_t *v0, const uint8_t *v1,
                   size_t n, int pause_us) {
    r->path = path;
    r->pause_us = pause_us;
    r->value[0] = v0;
    r->value[1] = v1;
    r->n = n;
    r->failed = 0;
    atomic_init(&r->stop, 0);
    atomic_init(&r->rewrites, 0);
    return pthread_create(&r->thread, NULL, rewrite_loop, r) == 0 ? 0 : -1;
}

void rewriter_wait_two(rewriter *r, double seconds) {
    double t0 = rewriter_now();
    int seen = atomic_load(&r->rewrites);
    while (atomic_load(&r->rewrites) < seen + 2 && rewriter_now() - t0 < seconds) sched_yield();
}

void rewriter_stop(rewriter *r) {
    atomic_store(&r->stop, 1);
    pthread_join(r->thread, NULL);
}
