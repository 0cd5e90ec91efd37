/* SPDX-License-Identifier: Apache-2.0 */
/* The model identity lazyattn-rag caches documents under (rag.h). */
#undef _POSIX_C_SOURCE
#define _XOPEN_SOURCE 700 /* realpath */
#include "rag.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define MEMO_MAGIC "LZMODID1"
#define MEMO_MAGIC_BYTES 8
#define READ_BYTES ((size_t)8 << 20)

/* What the memo is keyed by: the file as the filesystem names it now. */
typedef struct {
    char path[PATH_MAX];
    uint64_t size, mtime_ns, ctime_ns, inode, device;
} file_key;

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void key_of(const struct stat *sb, file_key *k) {
    k->size = (uint64_t)sb->st_size;
    k->mtime_ns = (uint64_t)sb->st_mtim.tv_sec * 1000000000u + (uint64_t)sb->st_mtim.tv_nsec;
    k->ctime_ns = (uint64_t)sb->st_ctim.tv_sec * 1000000000u + (uint64_t)sb->st_ctim.tv_nsec;
    k->inode = (uint64_t)sb->st_ino;
    k->device = (uint64_t)sb->st_dev;
}

static int same_key(const file_key *a, const file_key *b) {
    return a->size == b->size && a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns &&
           a->inode == b->inode && a->device == b->device && strcmp(a->path, b->path) == 0;
}

/* The key as bytes: five u64 LE, then the path (no terminator). Returns the length. */
static size_t key_bytes(const file_key *k, unsigned char *out) {
    const size_t n = strlen(k->path);
    put_u64(out, k->size);
    put_u64(out + 8, k->mtime_ns);
    put_u64(out + 16, k->ctime_ns);
    put_u64(out + 24, k->inode);
    put_u64(out + 32, k->device);
    memcpy(out + 40, k->path, n);
    return 40 + n;
}

/* <memo_dir>/models/<XXH3-64 of the key, hex>.id; 0, or -1 when it does not fit. */
static int memo_path(const char *memo_dir, const unsigned char *key, size_t key_n, char *out,
                     size_t cap) {
    const int n = snprintf(out, cap, "%s/models/%016llx.id", memo_dir,
                           (unsigned long long)XXH3_64bits(key, key_n));
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/*
 * A memo file: MEMO_MAGIC, the key's length (u64 LE), the key, the content
 * hash (16 bytes: low, high u64 LE), XXH3-64 of everything before (u64 LE).
 * Returns 1 and the hash when the memo exists, is whole and holds this key.
 */
static int memo_read(const char *file, const unsigned char *key, size_t key_n,
                     XXH128_hash_t *hash) {
    const size_t want = MEMO_MAGIC_BYTES + 8 + key_n + 16 + 8;
    unsigned char *buf = malloc(want + 1);
    FILE *f = buf ? fopen(file, "rb") : NULL;
    const size_t got = f ? fread(buf, 1, want + 1, f) : 0;
    if (f) fclose(f);
    int ok = got == want && memcmp(buf, MEMO_MAGIC, MEMO_MAGIC_BYTES) == 0 &&
             get_u64(buf + MEMO_MAGIC_BYTES) == key_n &&
             memcmp(buf + MEMO_MAGIC_BYTES + 8, key, key_n) == 0 &&
             get_u64(buf + want - 8) == XXH3_64bits(buf, want - 8);
    if (ok) {
        const unsigned char *h = buf + MEMO_MAGIC_BYTES + 8 + key_n;
        hash->low64 = get_u64(h);
        hash->high64 = get_u64(h + 8);
    }
    free(buf);
    return ok;
}

/* Writes the memo through a temporary file and a rename; a failure only costs a re-read later. */
static void memo_write(const char *memo_dir, const char *file, const unsigned char *key,
                       size_t key_n, XXH128_hash_t hash) {
    char dir[PATH_MAX + 16], tmp[PATH_MAX + 64];
    if (snprintf(dir, sizeof dir, "%s/models", memo_dir) >= (int)sizeof dir ||
        snprintf(tmp, sizeof tmp, "%s.%ld.tmp", file, (long)getpid()) >= (int)sizeof tmp)
        return;
    /* the store creates memo_dir later in a first run; its parents are the store's to make */
    if (mkdir(memo_dir, 0777) != 0 && errno != EEXIST) return;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return;
    const size_t n = MEMO_MAGIC_BYTES + 8 + key_n + 16 + 8;
    unsigned char *buf = malloc(n);
    if (!buf) return;
    memcpy(buf, MEMO_MAGIC, MEMO_MAGIC_BYTES);
    put_u64(buf + MEMO_MAGIC_BYTES, key_n);
    memcpy(buf + MEMO_MAGIC_BYTES + 8, key, key_n);
    put_u64(buf + MEMO_MAGIC_BYTES + 8 + key_n, hash.low64);
    put_u64(buf + MEMO_MAGIC_BYTES + 16 + key_n, hash.high64);
    put_u64(buf + n - 8, XXH3_64bits(buf, n - 8));
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(buf, 1, n, f) == n;
    if (f) ok = fclose(f) == 0 && ok;
    free(buf);
    if (!ok || rename(tmp, file) != 0) remove(tmp);
}

/* XXH3-128 of every byte of the open file, in one pass of large reads. */
static int hash_file(FILE *f, const char *path, XXH128_hash_t *hash) {
    XXH3_state_t *state = XXH3_createState();
    unsigned char *buf = state ? malloc(READ_BYTES) : NULL;
    if (!buf) {
        XXH3_freeState(state);
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "rag_model_identity");
    }
    int ok = XXH3_128bits_reset(state) == XXH_OK;
    size_t n;
    while (ok && (n = fread(buf, 1, READ_BYTES, f)) > 0)
        ok = XXH3_128bits_update(state, buf, n) == XXH_OK;
    const int e = errno;
    ok = ok && !ferror(f);
    if (ok) *hash = XXH3_128bits_digest(state);
    free(buf);
    XXH3_freeState(state);
    return ok ? LAZYATTN_STATUS_OK
              : serve_fail(LAZYATTN_STATUS_IO, "%s: could not be read to compute its identity: %s",
                           path, strerror(e));
}

int rag_model_identity(const char *path, const char *memo_dir, int mode, uint64_t *id) {
    if (!path || !id)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "rag_model_identity: bad arguments");
    file_key *key = calloc(1, sizeof *key);
    unsigned char *kb = key ? malloc(40 + PATH_MAX) : NULL;
    FILE *f = kb ? fopen(path, "rb") : NULL;
    if (!f) {
        const int e = errno;
        free(kb);
        free(key);
        return kb ? serve_fail(LAZYATTN_STATUS_IO, "%s: %s", path, strerror(e))
                  : serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "rag_model_identity");
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !realpath(path, key->path)) {
        const int e = errno;
        fclose(f);
        free(kb);
        free(key);
        return serve_fail(LAZYATTN_STATUS_IO, "%s: %s", path, strerror(e));
    }
    key_of(&sb, key);
    const size_t key_n = key_bytes(key, kb);
    char memo[PATH_MAX + 64];
    const int use_memo = memo_dir && memo_path(memo_dir, kb, key_n, memo, sizeof memo) == 0;
    XXH128_hash_t content = {0, 0};
    int st = LAZYATTN_STATUS_OK;
    if (!use_memo || !memo_read(memo, kb, key_n, &content)) {
        st = hash_file(f, path, &content);
        /* memoized only when the file did not change while it was read */
        file_key after = *key;
        if (!st && use_memo && fstat(fileno(f), &sb) == 0) {
            key_of(&sb, &after);
            if (same_key(key, &after)) memo_write(memo_dir, memo, kb, key_n, content);
        }
    }
    fclose(f);
    free(kb);
    free(key);
    if (st) return st;
    unsigned char words[32] = {0};
    put_u64(words, content.low64);
    put_u64(words + 8, content.high64);
    put_u64(words + 16, (uint64_t)sb.st_size);
    words[24] = (unsigned char)(mode & 3);
    *id = XXH3_64bits(words, sizeof words);
    return LAZYATTN_STATUS_OK;
}
