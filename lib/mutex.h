/* SPDX-License-Identifier: Apache-2.0 */
/* A plain mutex for the few shared structures of the library (the block
 * pool's free list, the context's program cache). POSIX threads everywhere
 * meson builds us on Linux, the BSDs and macOS; a slim reader/writer lock on
 * Windows (not built in CI). Not installed. */
#ifndef LAZYATTN_MUTEX_H
#define LAZYATTN_MUTEX_H

#if defined(_WIN32)
#include <windows.h>

typedef SRWLOCK lz_mutex;

/* 0 on success (the Windows lock cannot fail). */
static inline int lz_mutex_init(lz_mutex *m) {
    InitializeSRWLock(m);
    return 0;
}
static inline void lz_mutex_destroy(lz_mutex *m) { (void)m; }
static inline void lz_mutex_lock(lz_mutex *m) { AcquireSRWLockExclusive(m); }
static inline void lz_mutex_unlock(lz_mutex *m) { ReleaseSRWLockExclusive(m); }

#else
#include <pthread.h>

typedef pthread_mutex_t lz_mutex;

/* 0 on success, else an errno value (out of memory or resources). */
static inline int lz_mutex_init(lz_mutex *m) { return pthread_mutex_init(m, NULL); }
static inline void lz_mutex_destroy(lz_mutex *m) { pthread_mutex_destroy(m); }
/* A default mutex fails to lock only when misused (never relocked by its
 * owner here), so the result is not checked. */
static inline void lz_mutex_lock(lz_mutex *m) { pthread_mutex_lock(m); }
static inline void lz_mutex_unlock(lz_mutex *m) { pthread_mutex_unlock(m); }
#endif

#endif
