/* SPDX-License-Identifier: Apache-2.0 */
/* A thread that rewrites a file in place, as cp or rsync --inplace do
 * (truncate, then write from the start in chunks), over and over, for the
 * directory store's tests (test_doc_store.c, test_doc_tier.c). */
#ifndef LAZYATTN_TEST_REWRITER_H
#define LAZYATTN_TEST_REWRITER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rewriter {
    const char *path;         /* an existing file */
    const uint8_t *value[2];  /* written in turn, n bytes each */
    size_t n;
    int pause_us;             /* between two rewrites */
    atomic_int stop;
    atomic_int rewrites;      /* done so far */
    int failed;               /* a call failed (read after rewriter_stop) */
    pthread_t thread;
} rewriter;

/* Starts rewriting path with value[0], value[1], value[0], ..., pausing
 * pause_us after each: 0 or -1. */
int rewriter_start(rewriter *r, const char *path, const uint8_t *v0, const uint8_t *v1,
                   size_t n, int pause_us);
/* Waits until the file has been rewritten twice more (holding both values
 * since the call), or until `seconds` passed. */
void rewriter_wait_two(rewriter *r, double seconds);
void rewriter_stop(rewriter *r);

/* CLOCK_MONOTONIC seconds. */
double rewriter_now(void);

#endif
