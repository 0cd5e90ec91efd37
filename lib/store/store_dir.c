/* SPDX-License-Identifier: Apache-2.0 */
/* The directory store: one file per document. A write goes to a temporary
 * file in the same directory, is fsync'ed and renamed over the final name
 * (then the directory is fsync'ed), so readers in any process see a whole
 * file or none; a reader reads the file once into its own memory (a
 * symbolic link to a regular file is followed; anything else at a key's
 * name is refused). POSIX only. */
#include "store/store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct lz_dir {
    char *path;
    atomic_uint next_tmp; /* temporary names unique within the process */
} lz_dir;

/* dir + "/" + name; NULL when out of memory. */
static char *lz_dir_join(const lz_dir *d, const char *name) {
    size_t n = strlen(d->path) + 1 + strlen(name) + 1;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", d->path, name);
    return p;
}

static char *lz_dir_file(const lz_dir *d, lazyattn_doc_key key) {
    char t[LZ_STORE_KEY_TEXT], name[LZ_STORE_KEY_TEXT + 8];
    lz_store_key_text(key, t);
    snprintf(name, sizeof name, "%s.lzkv", t);
    return lz_dir_join(d, name);
}

/* What a file that is not a regular file is, for the message. */
static const char *lz_file_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
           : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* Reads exactly n bytes at the start of fd into p: 0, -1 when the file
 * ends first (*got bytes read), or an errno value. */
static int lz_read_all(int fd, uint8_t *p, size_t n, size_t *got) {
    *got = 0;
    while (*got < n) {
        size_t want = n - *got > ((size_t)1 << 30) ? ((size_t)1 << 30) : n - *got;
        ssize_t r = pread(fd, p + *got, want, (off_t)*got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (r == 0) return -1;
        *got += (size_t)r;
    }
    return 0;
}

/* The file is read once into private memory, the value handed out: what
 * the reader checks is what it uses, whatever happens to the file (a copy
 * rewriting it in place, a truncation) after or during the read. */
int lz_dir_get_into(void *impl, lazyattn_doc_key key, const lz_store_room *room,
                    lazyattn_store_value *v) {
    lz_dir *d = impl;
    char *file = lz_dir_file(d, key);
    if (!file) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "dir store");
    /* What is not a regular file is refused before any open: opening a
     * device may act on it (a tape rewinds), a socket's open fails with
     * ENXIO, which would not say what is there. The fstat below checks
     * what was opened (the name may change in between). */
    struct stat pre;
    if (stat(file, &pre) == 0 && !S_ISREG(pre.st_mode)) {
        int st = lz_fail(LAZYATTN_STATUS_FORMAT, "dir store: %s is %s, not a regular file", file,
                         lz_file_kind(pre.st_mode));
        free(file);
        return st;
    }
    /* O_NONBLOCK: a FIFO at the name opens at once (and is refused below) */
    int fd = open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        int st = e == ENOENT ? lz_fail(LAZYATTN_STATUS_NOT_FOUND, "dir store: no file %s", file)
                             : lz_fail(LAZYATTN_STATUS_IO, "dir store: %s: %s", file, strerror(e));
        free(file);
        return st;
    }
    struct stat sb;
    int st = LAZYATTN_STATUS_OK;
    uint8_t *buf = NULL, *own = NULL; /* own: malloc'ed here (else the room's) */
    size_t got = 0;
    if (fstat(fd, &sb) != 0) {
        st = lz_fail(LAZYATTN_STATUS_IO, "dir store: %s: %s", file, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        st = lz_fail(LAZYATTN_STATUS_FORMAT, "dir store: %s is %s, not a regular file", file,
                     lz_file_kind(sb.st_mode));
    } else if (sb.st_size <= 0 || (uint64_t)sb.st_size > SIZE_MAX) {
        st = lz_fail(LAZYATTN_STATUS_FORMAT, "dir store: %s: %lld bytes", file,
                     (long long)sb.st_size);
    } else if (!(room && (buf = room->take(room->user, (size_t)sb.st_size)) != NULL) &&
               !(own = buf = malloc((size_t)sb.st_size))) {
        st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "dir store: %s: %lld bytes", file,
                     (long long)sb.st_size);
    } else {
#if defined(POSIX_FADV_SEQUENTIAL)
        /* read whole, front to back: the kernel reads ahead in large pieces */
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
        /* the size fstat gave: a file growing meanwhile is read that far */
        int e = lz_read_all(fd, buf, (size_t)sb.st_size, &got);
        if (e < 0)
            st = lz_fail(LAZYATTN_STATUS_FORMAT,
                         "dir store: %s shrank while read: %zu of %lld bytes (rewritten in "
                         "place?)",
                         file, got, (long long)sb.st_size);
        else if (e)
            st = lz_fail(LAZYATTN_STATUS_IO, "dir store: read %s: %s", file, strerror(e));
    }
    close(fd);
    free(file);
    if (st) {
        free(own);
        return st;
    }
    v->data = buf;
    v->size = (size_t)sb.st_size;
    v->handle = own; /* NULL: the room's memory, nothing to give back */
    return LAZYATTN_STATUS_OK;
}

static int lz_dir_get(void *impl, lazyattn_doc_key key, lazyattn_store_value *v) {
    return lz_dir_get_into(impl, key, NULL, v);
}

static void lz_dir_release(void *impl, lazyattn_store_value *v) {
    (void)impl;
    free(v->handle);
}

static int lz_write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (w == 0) return EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int lz_dir_put(void *impl, lazyattn_doc_key key, const void *data, size_t size) {
    lz_dir *d = impl;
    char t[LZ_STORE_KEY_TEXT], name[LZ_STORE_KEY_TEXT + 64];
    lz_store_key_text(key, t);
    snprintf(name, sizeof name, ".tmp-%s-%ld-%u", t, (long)getpid(),
             atomic_fetch_add(&d->next_tmp, 1u));
    char *tmp = lz_dir_join(d, name), *file = lz_dir_file(d, key);
    if (!tmp || !file) {
        free(tmp);
        free(file);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "dir store");
    }
    int st = LAZYATTN_STATUS_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = lz_fail(LAZYATTN_STATUS_IO, "dir store: create %s: %s", tmp, strerror(errno));
        goto out;
    }
    int e = lz_write_all(fd, data, size);
    const char *step = "write";
    if (!e && fsync(fd) != 0) e = errno, step = "fsync";
    if (close(fd) != 0 && !e) e = errno, step = "close";
    if (!e && rename(tmp, file) != 0) e = errno, step = "rename";
    if (e) {
        unlink(tmp);
        st = lz_fail(LAZYATTN_STATUS_IO, "dir store: %s %s (%zu bytes): %s; nothing published",
                     step, tmp, size, strerror(e));
        goto out;
    }
    /* The rename itself durable: best effort (some file systems refuse). */
    int dfd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
out:
    free(tmp);
    free(file);
    return st;
}

static int lz_dir_exists(void *impl, lazyattn_doc_key key, int *exists) {
    char *file = lz_dir_file(impl, key);
    if (!file) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "dir store");
    struct stat sb;
    int st = LAZYATTN_STATUS_OK;
    if (stat(file, &sb) == 0)
        *exists = S_ISREG(sb.st_mode) != 0; /* what get refuses is not there */
    else if (errno == ENOENT)
        *exists = 0;
    else
        st = lz_fail(LAZYATTN_STATUS_IO, "dir store: %s: %s", file, strerror(errno));
    free(file);
    return st;
}

static int lz_dir_remove(void *impl, lazyattn_doc_key key) {
    char *file = lz_dir_file(impl, key);
    if (!file) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "dir store");
    int st = LAZYATTN_STATUS_OK;
    if (unlink(file) != 0)
        st = errno == ENOENT
                 ? lz_fail(LAZYATTN_STATUS_NOT_FOUND, "dir store: no file %s", file)
                 : lz_fail(LAZYATTN_STATUS_IO, "dir store: unlink %s: %s", file, strerror(errno));
    free(file);
    return st;
}

static void lz_dir_destroy(void *impl) {
    lz_dir *d = impl;
    if (!d) return;
    free(d->path);
    free(d);
}

int lz_store_dir_open(const char *path, void **impl) {
    *impl = NULL;
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return lz_fail(LAZYATTN_STATUS_IO, "lazyattn_store_create_dir: mkdir %s: %s", path,
                       strerror(errno));
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return lz_fail(LAZYATTN_STATUS_IO, "lazyattn_store_create_dir: %s is not a directory",
                       path);
    if (access(path, R_OK | W_OK | X_OK) != 0)
        return lz_fail(LAZYATTN_STATUS_IO, "lazyattn_store_create_dir: %s: %s", path,
                       strerror(errno));
    lz_dir *d = calloc(1, sizeof *d);
    if (d) d->path = strdup(path);
    if (!d || !d->path) {
        free(d);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_store_create_dir");
    }
    atomic_init(&d->next_tmp, 0u);
    *impl = d;
    return LAZYATTN_STATUS_OK;
}

/* ---- leases ----
 * A document's lease is the file "<key>.lease" holding "<token> <expiry>"
 * (16 hex digits; the expiry in ms of CLOCK_REALTIME). It is written whole
 * to a temporary name, then link()ed to its name: link fails with EEXIST
 * when a lease is there, atomically (also over NFS), so a reader never
 * sees a half-written lease. One past its expiry is moved aside by
 * rename() (of processes racing for it, one moves it, the others find it
 * gone), read again (a fresh lease moved aside by mistake is linked back)
 * and removed; then the link is tried again. The rule: a file system with
 * atomic link() and rename() in one directory, and, across hosts, clocks
 * that agree to well within the TTL. */

static int64_t lz_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *lz_dir_lease_file(const lz_dir *d, lazyattn_doc_key key, const char *suffix) {
    char t[LZ_STORE_KEY_TEXT], name[LZ_STORE_KEY_TEXT + 80];
    lz_store_key_text(key, t);
    snprintf(name, sizeof name, "%s%s.lease%s", suffix[0] ? ".aside-" : "", t, suffix);
    return lz_dir_join(d, name);
}

/* A lease file's token and expiry: 1, or 0 when absent or not a lease. */
static int lz_lease_read(const char *path, uint64_t *token, int64_t *expiry) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return 0;
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    unsigned long long t;
    long long e;
    if (sscanf(buf, "%16llx %lld", &t, &e) != 2) return 0;
    *token = t;
    *expiry = e;
    return 1;
}

static int lz_dir_lease_acquire(void *impl, lazyattn_doc_key key, uint64_t token, int ttl_ms,
                                int *held, uint64_t *holder) {
    lz_dir *d = impl;
    *held = 0;
    *holder = 0;
    char suffix[64];
    snprintf(suffix, sizeof suffix, "-%016llx-%ld-%u", (unsigned long long)token, (long)getpid(),
             atomic_fetch_add(&d->next_tmp, 1u));
    char *file = lz_dir_lease_file(d, key, ""), *tmp = lz_dir_lease_file(d, key, suffix);
    int st = LAZYATTN_STATUS_OK;
    if (!file || !tmp) {
        st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "dir store lease");
        goto out;
    }
    for (int attempt = 0; attempt < 3 && !*held; attempt++) {
        char text[64];
        int n = snprintf(text, sizeof text, "%016llx %lld\n", (unsigned long long)token,
                         (long long)(lz_now_ms() + ttl_ms));
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        int e = fd < 0 ? errno : lz_write_all(fd, (const uint8_t *)text, (size_t)n);
        if (fd >= 0 && close(fd) != 0 && !e) e = errno;
        if (!e && link(tmp, file) == 0) *held = 1;
        else if (!e && errno != EEXIST) e = errno;
        unlink(tmp);
        if (e) {
            st = lz_fail(LAZYATTN_STATUS_IO, "dir store: lease %s: %s", file, strerror(e));
            break;
        }
        if (*held) break;
        uint64_t t;
        int64_t expiry;
        if (!lz_lease_read(file, &t, &expiry)) {
            struct stat sb; /* gone: try again; not a lease: stale TTL after its change */
            if (stat(file, &sb) != 0) continue;
            t = 0;
            expiry = (int64_t)sb.st_mtime * 1000 + ttl_ms;
        }
        *holder = t;
        if (expiry > lz_now_ms()) break; /* busy */
        /* expired: move it aside (one process wins), check what was moved */
        if (rename(file, tmp) != 0) continue;
        if (lz_lease_read(tmp, &t, &expiry) && expiry > lz_now_ms()) {
            *holder = t; /* a fresh lease taken since: give it back */
            if (link(tmp, file) != 0) *holder = 0;
            unlink(tmp);
            break;
        }
        unlink(tmp);
    }
out:
    free(file);
    free(tmp);
    return st;
}

static int lz_dir_lease_release(void *impl, lazyattn_doc_key key, uint64_t token) {
    char *file = lz_dir_lease_file(impl, key, "");
    if (!file) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "dir store lease");
    uint64_t t;
    int64_t expiry;
    /* ours and not expired (an expired one may have been taken over) */
    if (lz_lease_read(file, &t, &expiry) && t == token && expiry > lz_now_ms()) unlink(file);
    free(file);
    return LAZYATTN_STATUS_OK;
}

const lz_store_lease_ops lz_store_dir_lease_ops = {lz_dir_lease_acquire, lz_dir_lease_release};

const lazyattn_store_ops lz_store_dir_ops = {"dir",         lz_dir_get,    lz_dir_release,
                                             lz_dir_put,    lz_dir_exists, lz_dir_remove,
                                             lz_dir_destroy};
