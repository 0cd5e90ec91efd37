/* SPDX-License-Identifier: Apache-2.0 */
/* The document stores on their own (no device): round trips through the
 * host, directory and Redis stores, LRU under the host budget, bad input
 * and live-object checks, a directory shared by two processes, a writer
 * killed mid-write (no partial file is ever read), a file rewritten in
 * place under its readers (a value, once got, never changes), a FIFO,
 * directory, socket, device or links at a key's name (refused at once,
 * never opened), and Redis values whose chunks are missing, mixed or
 * corrupt (refused). The Redis tests need a
 * server: LAZYATTN_TEST_REDIS=127.0.0.1:PORT (CI starts one); without it
 * they are reported as skipped. */
#include "test_common.h"
#include "redis_server.h"
#include "rewriter.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef __SANITIZE_ADDRESS__
/* Under ASan an allocation past 1 GiB aborts (allocation-size-too-big): a
 * store that allocates on a size read from outside (a Redis manifest's
 * claim) fails here whatever the machine's memory. The environment's
 * ASAN_OPTIONS come after these. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "max_allocation_size_mb=1024:allocator_may_return_null=0";
}
#endif

#ifdef LAZYATTN_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif


/* A value of n bytes for key k: a pattern no other key or length shares. */
static void fill_value(uint8_t *p, size_t n, uint64_t k) {
    lt_rng r = {k * 0x9E3779B97F4A7C15ull + n};
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(lt_next(&r) >> 56);
}

static int value_is(const lazyattn_store_value *v, size_t n, uint64_t k) {
    if (v->size != n || !v->data) return 0;
    uint8_t *want = malloc(n);
    fill_value(want, n, k);
    int same = memcmp(want, v->data, n) == 0;
    free(want);
    return same;
}

/* k in the digest's first 8 bytes and again, reversed, in its last 8. */
static lazyattn_doc_key key_of(uint64_t k) {
    lazyattn_doc_key key = {0xABCDull, {0}};
    for (int i = 0; i < 8; i++) key.digest[i] = key.digest[31 - i] = (uint8_t)(k >> (8 * i));
    return key;
}

static void put_value(lazyattn_store *s, uint64_t k, size_t n) {
    uint8_t *p = malloc(n);
    assert_non_null(p);
    fill_value(p, n, k);
    lt_assert_status(lazyattn_store_put(s, key_of(k), p, n), LAZYATTN_STATUS_OK);
    free(p);
}

static void expect_stored(lazyattn_store *s, uint64_t k, size_t n) {
    lazyattn_store_value v;
    lt_assert_status(lazyattn_store_get(s, key_of(k), &v), LAZYATTN_STATUS_OK);
    assert_true(value_is(&v, n, k));
    lazyattn_store_release(s, &v);
}

static void expect_absent(lazyattn_store *s, uint64_t k) {
    lazyattn_store_value v;
    int there = 1;
    lt_assert_status(lazyattn_store_get(s, key_of(k), &v), LAZYATTN_STATUS_NOT_FOUND);
    assert_null(v.data);
    lt_assert_status(lazyattn_store_exists(s, key_of(k), &there), LAZYATTN_STATUS_OK);
    assert_int_equal(there, 0);
}

/* put / get / exists / delete / overwrite: what every store must do. */
static void round_trip(lazyattn_store *s) {
    expect_absent(s, 1);
    put_value(s, 1, 100);
    put_value(s, 2, 5000);
    expect_stored(s, 1, 100);
    expect_stored(s, 2, 5000);
    int there = 0;
    lt_assert_status(lazyattn_store_exists(s, key_of(2), &there), LAZYATTN_STATUS_OK);
    assert_int_equal(there, 1);
    /* another model id is another key */
    lazyattn_doc_key other = key_of(1);
    other.model_id = 0xABCEull;
    lazyattn_store_value v;
    lt_assert_status(lazyattn_store_get(s, other, &v), LAZYATTN_STATUS_NOT_FOUND);
    /* keys that differ only past the digest's first 8 bytes (the 64-bit
     * hash) are other keys */
    for (int byte = 8; byte < 32; byte += 23) {
        lazyattn_doc_key near = key_of(2);
        near.digest[byte] ^= 0x10;
        lt_assert_status(lazyattn_store_get(s, near, &v), LAZYATTN_STATUS_NOT_FOUND);
        lt_assert_status(lazyattn_store_exists(s, near, &there), LAZYATTN_STATUS_OK);
        assert_int_equal(there, 0);
    }
    put_value(s, 1, 3000); /* replaced, other length */
    expect_stored(s, 1, 3000);
    lt_assert_status(lazyattn_store_delete(s, key_of(1)), LAZYATTN_STATUS_OK);
    expect_absent(s, 1);
    lt_assert_status(lazyattn_store_delete(s, key_of(1)), LAZYATTN_STATUS_NOT_FOUND);
    expect_stored(s, 2, 5000);
    lt_assert_status(lazyattn_store_delete(s, key_of(2)), LAZYATTN_STATUS_OK);
}

static char tmp_root[256];

static void make_tmp_dir(char *out, size_t n, const char *tag) {
    snprintf(out, n, "%s/%s-XXXXXX", tmp_root, tag);
    assert_non_null(mkdtemp(out));
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

// ---- bad input ----

static int fake_get(void *i, lazyattn_doc_key k, lazyattn_store_value *v) {
    (void)i, (void)k, (void)v;
    return LAZYATTN_STATUS_NOT_FOUND;
}

static void test_bad_input(void **state) {
    (void)state;
    lazyattn_store *s = (lazyattn_store *)1;
    lt_assert_status(lazyattn_store_create_host(1024, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_store_create_host(0, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(s);
    lt_assert_status(lazyattn_store_create_dir(NULL, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_store_create_dir("", &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_store_create_dir("/proc/version", &s), LAZYATTN_STATUS_IO);
    assert_non_null(strstr(lazyattn_last_error(), "not a directory"));
    lt_assert_status(lazyattn_store_create_dir("/nonexistent-lazyattn/a/b", &s), LAZYATTN_STATUS_IO);
    assert_null(s);
    lt_assert_status(lazyattn_store_create(NULL, NULL, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_store_ops ops = {0};
    ops.get = fake_get;
    lt_assert_status(lazyattn_store_create(&ops, NULL, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "lacks"));
    assert_null(s);

    lazyattn_redis_config rc;
    lazyattn_redis_config_init(&rc);
    assert_string_equal(rc.host, "127.0.0.1");
    assert_int_equal(rc.port, 6379);
    lt_assert_status(lazyattn_store_create_redis(&rc, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    const struct {
        int port, timeout;
        size_t chunk;
        const char *host, *prefix;
    } bad[] = {{0, 100, 4096, "127.0.0.1", "p"},      {65536, 100, 4096, "127.0.0.1", "p"},
               {1, 0, 4096, "127.0.0.1", "p"},        {1, 100, 1023, "127.0.0.1", "p"},
               {1, 100, (size_t)1 << 30, "127.0.0.1", "p"}, {1, 100, 4096, "", "p"},
               {1, 100, 4096, NULL, "p"},             {1, 100, 4096, "127.0.0.1", "a{b"},
               {1, 100, 4096, "127.0.0.1", ""},       {1, 100, 4096, "127.0.0.1", NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc.port = bad[i].port;
        rc.timeout_ms = bad[i].timeout;
        rc.chunk_bytes = bad[i].chunk;
        rc.host = bad[i].host;
        rc.prefix = bad[i].prefix;
        s = (lazyattn_store *)1;
        lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_null(s);
    }

    lazyattn_redis_config_init(NULL); /* nothing */
    lazyattn_redis_config_init(&rc);
    rc.retry_ms = -1;
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    rc.retry_ms = 600001;
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(s);

    lt_assert_status(lazyattn_store_create_host(1 << 20, &s), LAZYATTN_STATUS_OK);
    assert_string_equal(lazyattn_store_name(s), "host");
    lazyattn_store_value v;
    int there;
    uint8_t byte = 7;
    lt_assert_status(lazyattn_store_get(NULL, key_of(1), &v), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_store_get(s, key_of(1), NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_store_put(NULL, key_of(1), &byte, 1), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_store_put(s, key_of(1), NULL, 1), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_store_put(s, key_of(1), &byte, 0), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_store_exists(s, key_of(1), NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_store_exists(NULL, key_of(1), &there), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_store_delete(NULL, key_of(1)), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_store_release(s, NULL);
    lazyattn_store_release(NULL, &v);
    assert_null(lazyattn_store_name(NULL));
    lazyattn_store_destroy(NULL);

    /* handles that are not live stores: another kind of object, zeros */
    static uint64_t zeros[16];
    lazyattn_store *fake[2] = {(lazyattn_store *)&rc, (lazyattn_store *)zeros};
    for (int i = 0; i < 2; i++) {
        lt_assert_status(lazyattn_store_get(fake[i], key_of(1), &v), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(lazyattn_last_error(), "not a live store"));
        lt_assert_status(lazyattn_store_put(fake[i], key_of(1), &byte, 1),
                         LAZYATTN_STATUS_INVALID_ARGUMENT);
        lt_assert_status(lazyattn_store_exists(fake[i], key_of(1), &there),
                         LAZYATTN_STATUS_INVALID_ARGUMENT);
        lt_assert_status(lazyattn_store_delete(fake[i], key_of(1)), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_null(lazyattn_store_name(fake[i]));
        lazyattn_store_destroy(fake[i]); /* left alone */
        assert_non_null(strstr(lazyattn_last_error(), "lazyattn_store_destroy: not a live store"));
    }
    for (size_t i = 0; i < 16; i++) assert_int_equal(zeros[i], 0);
    lazyattn_store_destroy(s);
}

// ---- host ----

static void test_host_store(void **state) {
    (void)state;
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_host(1 << 20, &s), LAZYATTN_STATUS_OK);
    round_trip(s);
    /* a missing key's get and delete name it */
    lazyattn_store_value none;
    lt_assert_status(lazyattn_store_get(s, key_of(9), &none), LAZYATTN_STATUS_NOT_FOUND);
    assert_non_null(strstr(lazyattn_last_error(), "host store: no document"));
    lt_assert_status(lazyattn_store_delete(s, key_of(9)), LAZYATTN_STATUS_NOT_FOUND);
    assert_non_null(strstr(lazyattn_last_error(), "host store: no document"));
    lazyattn_store_destroy(s);

    /* LRU under 300 bytes: three values of 100, touch the first, a fourth
     * evicts the second (least recently used) */
    lt_assert_status(lazyattn_store_create_host(300, &s), LAZYATTN_STATUS_OK);
    for (uint64_t k = 1; k <= 3; k++) put_value(s, k, 100);
    expect_stored(s, 1, 100);
    lazyattn_store_value held;
    lt_assert_status(lazyattn_store_get(s, key_of(3), &held), LAZYATTN_STATUS_OK);
    put_value(s, 4, 100);
    expect_absent(s, 2);
    expect_stored(s, 1, 100);
    expect_stored(s, 4, 100);
    /* a value larger than the budget is refused; one of 300 evicts all */
    uint8_t big[301];
    fill_value(big, sizeof big, 9);
    lt_assert_status(lazyattn_store_put(s, key_of(9), big, 301), LAZYATTN_STATUS_BUDGET_EXCEEDED);
    put_value(s, 10, 300);
    expect_absent(s, 1);
    expect_absent(s, 3);
    expect_stored(s, 10, 300);
    /* the value borrowed before its eviction is still whole (ASan checks the rest) */
    assert_true(value_is(&held, 100, 3));
    lazyattn_store_release(s, &held);
    assert_null(held.data);
    lazyattn_store_destroy(s);
}

// ---- directory ----

static int count_files(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    if (d) closedir(d);
    return n;
}

static void test_dir_store(void **state) {
    (void)state;
    char dir[512];
    make_tmp_dir(dir, sizeof dir, "store");
    char sub[600];
    snprintf(sub, sizeof sub, "%s/docs", dir); /* created by the store */
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_dir(sub, &s), LAZYATTN_STATUS_OK);
    assert_string_equal(lazyattn_store_name(s), "dir");
    round_trip(s);
    put_value(s, 5, 777);
    char path[800];
    /* "<model_id>-<digest>": key_of(5)'s digest is 05, 30 zero bytes, 05 */
    snprintf(path, sizeof path, "%s/%016llx-05%060d05.lzkv", sub, 0xABCDull, 0);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 777);
    assert_int_equal(count_files(sub, ".tmp-"), 0);
    /* A partial temporary file of a document (a writer that died) is never read. */
    snprintf(path, sizeof path, "%s/.tmp-%016llx-06%060d06-99999-0", sub, 0xABCDull, 0);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("partial", f);
    fclose(f);
    expect_absent(s, 6);
    /* a value mapped by a reader stays whole while another writer replaces the file */
    lazyattn_store_value v;
    lt_assert_status(lazyattn_store_get(s, key_of(5), &v), LAZYATTN_STATUS_OK);
    put_value(s, 5, 999);
    assert_true(value_is(&v, 777, 5));
    lazyattn_store_release(s, &v);
    expect_stored(s, 5, 999);
    lazyattn_store_destroy(s);
    remove_tree(sub);
    remove_tree(dir);
}

/* This process and a fork each open the store (open(arg); NULL: failed),
 * then put keys 0..n_keys-1 (key k: base + step * k bytes) three times over,
 * the two starting half-way apart, reading every key back after each put:
 * a value read must be whole or absent, never part of one, in both. */
static void share_between_processes(lazyattn_store *(*open)(const char *), const char *arg,
                                    uint64_t n_keys, size_t base, size_t step) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    int me = pid == 0;
    lazyattn_store *s = open(arg);
    int bad = s == NULL;
    for (int round = 0; round < 3 && !bad; round++)
        for (uint64_t k = 0; k < n_keys && !bad; k++) {
            uint64_t key = (k + (uint64_t)me * (n_keys / 2)) % n_keys; /* the two start apart */
            size_t n = base + step * (size_t)key;
            uint8_t *p = malloc(n);
            fill_value(p, n, key);
            bad |= lazyattn_store_put(s, key_of(key), p, n) != LAZYATTN_STATUS_OK;
            free(p);
            for (uint64_t j = 0; j < n_keys && !bad; j++) {
                lazyattn_store_value v;
                int st = lazyattn_store_get(s, key_of(j), &v);
                if (st == LAZYATTN_STATUS_OK) {
                    bad |= !value_is(&v, base + step * (size_t)j, j);
                    lazyattn_store_release(s, &v);
                } else {
                    bad |= st != LAZYATTN_STATUS_NOT_FOUND;
                }
            }
        }
    lazyattn_store_destroy(s);
    if (me) _exit(bad ? 3 : 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_false(bad);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static lazyattn_store *open_dir(const char *dir) {
    lazyattn_store *s = NULL;
    return lazyattn_store_create_dir(dir, &s) == LAZYATTN_STATUS_OK ? s : NULL;
}

/* Two processes write and read the same keys at once: every value read is whole. */
static void test_dir_two_processes(void **state) {
    (void)state;
    char dir[512];
    make_tmp_dir(dir, sizeof dir, "shared");
    share_between_processes(open_dir, dir, 16, 4096, 1000);
    lazyattn_store *s = NULL;
    lt_assert_status(lazyattn_store_create_dir(dir, &s), LAZYATTN_STATUS_OK);
    for (uint64_t k = 0; k < 16; k++) expect_stored(s, k, 4096 + 1000 * (size_t)k);
    assert_int_equal(count_files(dir, ".tmp-"), 0);
    lazyattn_store_destroy(s);
    remove_tree(dir);
}

/* A writer SIGKILLed in the middle of its writes: what remains readable is
 * whole, the interrupted write left only a temporary file that readers
 * never open. Repeated until a kill has landed mid-write (a temporary file
 * left), which the size of the values makes the common case. */
static void test_dir_killed_writer(void **state) {
    (void)state;
    char dir[512];
    make_tmp_dir(dir, sizeof dir, "killed");
    const size_t n = (size_t)24 << 20;
    int landed = 0;
    for (int attempt = 0; attempt < 20 && !landed; attempt++) {
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            lazyattn_store *s = NULL;
            if (lazyattn_store_create_dir(dir, &s)) _exit(3);
            uint8_t *p = malloc(n);
            if (!p) _exit(4);
            for (uint64_t k = 100;; k++) { /* until killed */
                fill_value(p, n, k % 4);
                lazyattn_store_put(s, key_of(k % 4), p, n);
            }
        }
        /* kill once a temporary file exists (a write in progress) */
        for (int i = 0; i < 20000 && count_files(dir, ".tmp-") == 0; i++) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
        kill(pid, SIGKILL);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status));
        landed = count_files(dir, ".tmp-") > 0;
        lazyattn_store *s;
        lt_assert_status(lazyattn_store_create_dir(dir, &s), LAZYATTN_STATUS_OK);
        for (uint64_t k = 0; k < 4; k++) {
            lazyattn_store_value v;
            int st = lazyattn_store_get(s, key_of(k), &v);
            if (st == LAZYATTN_STATUS_NOT_FOUND) continue;
            lt_assert_status(st, LAZYATTN_STATUS_OK);
            assert_true(value_is(&v, n, k)); /* whole, never a prefix */
            lazyattn_store_release(s, &v);
        }
        lazyattn_store_destroy(s);
    }
    assert_true(landed);
    remove_tree(dir);
}

/* The directory store's file of key_of(k), k < 256, in dir (NULL: the
 * name alone): "<model_id>-<digest>", the digest k, 30 zero bytes, k. */
static void key_file(char *out, size_t n, const char *dir, unsigned k) {
    snprintf(out, n, "%s%s%016llx-%02x%060d%02x.lzkv", dir ? dir : "", dir ? "/" : "", 0xABCDull,
             k, 0, k);
}

/* A FIFO at a key's name, a link to one, a directory, a socket, a link to
 * a device: get answers at once, FORMAT naming what is there (a FIFO
 * opened for reading waits for a writer: a hang, which alarm turns into a
 * failure); a link to a regular file is followed; exists says 0 for what
 * get refuses, and a put replaces the FIFO. */
static void test_dir_not_regular(void **state) {
    (void)state;
    char dir[512], path[800], target[800];
    make_tmp_dir(dir, sizeof dir, "special");
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_dir(dir, &s), LAZYATTN_STATUS_OK);
    alarm(20);
    /* key 1: a FIFO; key 2: a link to it; key 3: a directory */
    key_file(path, sizeof path, dir, 1);
    assert_int_equal(mkfifo(path, 0644), 0);
    snprintf(target, sizeof target, "%s", path);
    key_file(path, sizeof path, dir, 2);
    assert_int_equal(symlink(target, path), 0);
    key_file(path, sizeof path, dir, 3);
    assert_int_equal(mkdir(path, 0755), 0);
    /* key 6: a UNIX socket (bound at a short name, which sun_path needs,
     * then renamed: its open fails with ENXIO, which says nothing of what
     * is there); key 7: a link to a character device (never opened) */
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    char sock_dir[] = "/tmp/lzsockXXXXXX";
    assert_non_null(mkdtemp(sock_dir));
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/s", sock_dir);
    int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(sfd >= 0);
    assert_int_equal(bind(sfd, (struct sockaddr *)&sa, sizeof sa), 0);
    key_file(path, sizeof path, dir, 6);
    assert_int_equal(rename(sa.sun_path, path), 0);
    rmdir(sock_dir);
    key_file(path, sizeof path, dir, 7);
    assert_int_equal(symlink("/dev/null", path), 0);
    const char *what[8] = {NULL,   "a FIFO", "a FIFO", "a directory",
                           NULL,   NULL,     "a socket", "a character device"};
    for (uint64_t k = 1; k <= 7; k++) {
        if (!what[k]) continue;
        lazyattn_store_value v;
        lt_assert_status(lazyattn_store_get(s, key_of(k), &v), LAZYATTN_STATUS_FORMAT);
        assert_non_null(strstr(lazyattn_last_error(), what[k]));
        assert_non_null(strstr(lazyattn_last_error(), "not a regular file"));
        assert_null(v.data);
        int there = 1;
        lt_assert_status(lazyattn_store_exists(s, key_of(k), &there), LAZYATTN_STATUS_OK);
        assert_int_equal(there, 0);
    }
    /* a link to a regular file (another key's) is followed */
    put_value(s, 4, 3000);
    key_file(target, sizeof target, NULL, 4); /* relative to the link */
    key_file(path, sizeof path, dir, 5);
    assert_int_equal(symlink(target, path), 0);
    lazyattn_store_value v;
    lt_assert_status(lazyattn_store_get(s, key_of(5), &v), LAZYATTN_STATUS_OK);
    assert_true(value_is(&v, 3000, 4));
    lazyattn_store_release(s, &v);
    /* the FIFO replaced by a put */
    put_value(s, 1, 500);
    expect_stored(s, 1, 500);
    alarm(0);
    close(sfd);
    lazyattn_store_destroy(s);
    key_file(path, sizeof path, dir, 3);
    rmdir(path);
    remove_tree(dir);
}

/* A file rewritten in place while it is read: every get is FORMAT (it
 * shrank under the read, or was empty) or bytes each of which is one of
 * the two values' (read from the file), which stay as they are while the
 * file goes on changing (a mapping of the file would change with it, or
 * raise SIGBUS once the file is truncated under it). */
static void test_dir_rewritten_in_place(void **state) {
    (void)state;
    char dir[512], path[800];
    make_tmp_dir(dir, sizeof dir, "inplace");
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_dir(dir, &s), LAZYATTN_STATUS_OK);
    enum { N = 64 * 1024 };
    uint8_t *a = malloc(N), *b = malloc(N), *snap = malloc(N);
    assert_true(a && b && snap);
    fill_value(a, N, 1);
    fill_value(b, N, 2);
    lt_assert_status(lazyattn_store_put(s, key_of(1), a, N), LAZYATTN_STATUS_OK);
    key_file(path, sizeof path, dir, 1);
    rewriter r;
    assert_int_equal(rewriter_start(&r, path, a, b, N, 0), 0);
    int n_ok = 0, n_format = 0, n_bad = 0;
    double t0 = rewriter_now();
    for (int i = 0; i < 400 && rewriter_now() - t0 < 2.0; i++) {
        lazyattn_store_value v;
        int st = lazyattn_store_get(s, key_of(1), &v);
        if (st == LAZYATTN_STATUS_FORMAT) {
            n_format++;
            continue;
        }
        if (st != LAZYATTN_STATUS_OK) {
            n_bad++;
            continue;
        }
        n_ok++;
        /* the whole file, or the part written when it was sized */
        const uint8_t *p = v.data;
        if (v.size > N) n_bad++;
        for (size_t j = 0; j < v.size && j < N; j++) n_bad += p[j] != a[j] && p[j] != b[j];
        size_t n = v.size < N ? v.size : N;
        memcpy(snap, p, n);
        rewriter_wait_two(&r, 5.0); /* the file has held both values since the get */
        n_bad += memcmp(snap, p, n) != 0;
        lazyattn_store_release(s, &v);
    }
    rewriter_stop(&r);
    assert_false(r.failed);
    assert_int_equal(n_bad, 0);
    assert_true(n_ok + n_format > 0);
    free(a);
    free(b);
    free(snap);
    lazyattn_store_destroy(s);
    remove_tree(dir);
}

// ---- Redis ----

static char redis_prefix[64];

#ifdef LAZYATTN_HAVE_HIREDIS
static lazyattn_store *open_redis(size_t chunk) {
    char host[128];
    int port = 0;
    if (!lt_redis_target(host, sizeof host, &port)) return NULL;
    lazyattn_redis_config rc;
    lazyattn_redis_config_init(&rc);
    rc.host = host;
    rc.port = port;
    rc.chunk_bytes = chunk;
    rc.timeout_ms = 5000;
    rc.prefix = redis_prefix;
    lazyattn_store *s = NULL;
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_OK);
    return s;
}

/* open_redis with 4 KiB chunks, as share_between_processes opens stores. */
static lazyattn_store *open_redis_4k(const char *unused) {
    (void)unused;
    return open_redis(4096);
}
#endif

static void test_redis_down_or_slow(void **state) {
    (void)state;
    lazyattn_redis_config rc;
    lazyattn_redis_config_init(&rc);
    rc.port = lt_free_port();
    rc.timeout_ms = 300;
    lazyattn_store *s = (lazyattn_store *)1;
#ifndef LAZYATTN_HAVE_HIREDIS
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_UNSUPPORTED);
    assert_non_null(strstr(lazyattn_last_error(), "libhiredis-dev"));
    assert_null(s);
#else
    /* nothing listens: refused */
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_IO);
    assert_null(s);
    /* a server that accepts (the kernel's backlog) and never answers: the timeout */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 4), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    rc.port = ntohs(a.sin_port);
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_IO);
    assert_non_null(strstr(lazyattn_last_error(), "PING"));
    assert_null(s);
    close(fd);
#endif
}

#ifdef LAZYATTN_HAVE_HIREDIS
static redisContext *raw_redis(void) {
    char host[128];
    int port = 0;
    if (!lt_redis_target(host, sizeof host, &port)) return NULL;
    redisContext *c = redisConnect(host, port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    return c;
}

static long long raw_integer(redisContext *c, const char *fmt, const char *key) {
    redisReply *r = redisCommand(c, fmt, key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}
#endif

static void test_redis_store(void **state) {
    (void)state;
#ifndef LAZYATTN_HAVE_HIREDIS
    print_message("Redis tests skipped: built without hiredis\n");
    skip();
#else
    lazyattn_store *s = open_redis(1024);
    if (!s) {
        print_message("Redis tests skipped: LAZYATTN_TEST_REDIS unset\n");
        skip();
    }
    assert_string_equal(lazyattn_store_name(s), "redis");
    round_trip(s);
    /* the key layout: one hash tag per document, chunks under 1 KiB, manifest */
    put_value(s, 7, 2500);
    redisContext *c = raw_redis();
    char key[256];
    /* key_of(7)'s digest: 07, 30 zero bytes, 07 */
    const char *tag = "{000000000000abcd:0700000000000000000000000000000000000000"
                      "000000000000000000000007}";
    snprintf(key, sizeof key, "%s:%s:manifest", redis_prefix, tag);
    assert_int_equal(raw_integer(c, "EXISTS %s", key), 1);
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "%s:%s:chunk:%d", redis_prefix, tag, i);
        assert_int_equal(raw_integer(c, "STRLEN %s", key), i < 2 ? 1024 : 2500 - 2048);
    }
    snprintf(key, sizeof key, "%s:%s:chunk:3", redis_prefix, tag);
    assert_int_equal(raw_integer(c, "EXISTS %s", key), 0);
    expect_stored(s, 7, 2500);
    lazyattn_store_value v;
    /* a corrupted chunk: refused (FORMAT), never returned as data */
    snprintf(key, sizeof key, "%s:%s:chunk:1", redis_prefix, tag);
    redisReply *r = redisCommand(c, "SETRANGE %s 10 X", key);
    freeReplyObject(r);
    lt_assert_status(lazyattn_store_get(s, key_of(7), &v), LAZYATTN_STATUS_FORMAT);
    assert_null(v.data);
    /* ... and that get removed the manifest: absent from then on (issue 37) */
    expect_absent(s, 7);
    /* a truncated chunk */
    put_value(s, 7, 2500);
    r = redisCommand(c, "SET %s abc", key);
    freeReplyObject(r);
    lt_assert_status(lazyattn_store_get(s, key_of(7), &v), LAZYATTN_STATUS_FORMAT);
    expect_absent(s, 7);
    /* a missing chunk (e.g. evicted by maxmemory) */
    put_value(s, 7, 2500);
    assert_int_equal(raw_integer(c, "DEL %s", key), 1);
    lt_assert_status(lazyattn_store_get(s, key_of(7), &v), LAZYATTN_STATUS_FORMAT);
    expect_absent(s, 7);
    /* a writer's exists checks the chunks too: a manifest without one of them
     * is "absent" (and removed), so the tier writes the document again */
    put_value(s, 7, 2500);
    int there = -1;
    lt_assert_status(lazyattn_store_exists(s, key_of(7), &there), LAZYATTN_STATUS_OK);
    assert_int_equal(there, 1);
    assert_int_equal(raw_integer(c, "DEL %s", key), 1);
    lt_assert_status(lazyattn_store_exists(s, key_of(7), &there), LAZYATTN_STATUS_OK);
    assert_int_equal(there, 0);
    lt_assert_status(lazyattn_store_get(s, key_of(7), &v), LAZYATTN_STATUS_NOT_FOUND);
    /* chunks without a manifest (a writer cut off before it): not there */
    put_value(s, 7, 2500);
    snprintf(key, sizeof key, "%s:%s:manifest", redis_prefix, tag);
    assert_int_equal(raw_integer(c, "DEL %s", key), 1);
    expect_absent(s, 7);
    /* a manifest that does not parse */
    r = redisCommand(c, "SET %s garbage", key);
    freeReplyObject(r);
    lt_assert_status(lazyattn_store_get(s, key_of(7), &v), LAZYATTN_STATUS_FORMAT);
    /* manifests whose chunk count holds only in wrapped arithmetic (10 bytes
     * in 0 chunks of 2^64 - 1), or with more chunks than one DEL can name */
    const char *hostile[2] = {"LZMF1 10 18446744073709551615 0 0",
                              "LZMF1 4294967296 2 2147483648 0"};
    for (int i = 0; i < 2; i++) {
        r = redisCommand(c, "SET %s %s", key, hostile[i]);
        freeReplyObject(r);
        lt_assert_status(lazyattn_store_get(s, key_of(7), &v), LAZYATTN_STATUS_FORMAT);
        assert_null(v.data);
        assert_non_null(strstr(lazyattn_last_error(), "does not parse"));
    }
    lt_assert_status(lazyattn_store_delete(s, key_of(7)), LAZYATTN_STATUS_OK);
    expect_absent(s, 7);
    /* Issue 34: a manifest that parses and claims 32 GiB in 32768 chunks of
     * 1 MiB, none there. Refused (a chunk missing) without allocating the
     * claim (under ASan an allocation past 1 GiB aborts: see
     * __asan_default_options above); delete names every chunk it claims, a
     * batch per DEL, and drops the manifest. */
    snprintf(key, sizeof key, "%s:{000000000000abcd:0a%060d0a}:manifest", redis_prefix, 0);
    r = redisCommand(c, "SET %s %s", key, "LZMF1 34359738368 1048576 32768 0");
    freeReplyObject(r);
    lt_assert_status(lazyattn_store_get(s, key_of(10), &v), LAZYATTN_STATUS_FORMAT);
    assert_null(v.data);
    assert_non_null(strstr(lazyattn_last_error(), "chunk 0 of 32768 is missing"));
    assert_int_equal(raw_integer(c, "EXISTS %s", key), 0); /* removed by that get */
    r = redisCommand(c, "SET %s %s", key, "LZMF1 34359738368 1048576 32768 0");
    freeReplyObject(r);
    lt_assert_status(lazyattn_store_delete(s, key_of(10)), LAZYATTN_STATUS_OK);
    assert_int_equal(raw_integer(c, "EXISTS %s", key), 0);
    expect_absent(s, 10);
    /* one chunk only (a large chunk size), and a value of exactly one chunk */
    lazyattn_store_destroy(s);
    s = open_redis((size_t)1 << 20);
    put_value(s, 8, (size_t)1 << 20);
    put_value(s, 9, 3 << 20);
    expect_stored(s, 8, (size_t)1 << 20);
    expect_stored(s, 9, 3 << 20);
    lt_assert_status(lazyattn_store_delete(s, key_of(8)), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_store_delete(s, key_of(9)), LAZYATTN_STATUS_OK);
    /* nothing of this test is left */
    r = redisCommand(c, "KEYS %s:*", redis_prefix);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 3); /* chunks of key 7 whose manifest was garbage */
    freeReplyObject(r);
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "%s:%s:chunk:%d", redis_prefix, tag, i);
        raw_integer(c, "DEL %s", key);
    }
    redisFree(c);
    lazyattn_store_destroy(s);
#endif
}

/* A server that stalls (SIGSTOP) under a live store: the call waiting on it
 * times out (IO); for retry_ms afterwards calls fail at once ("not
 * retried") instead of each waiting for the timeout; a store whose retry
 * window has passed reconnects. */
static void test_redis_stalled(void **state) {
    (void)state;
#ifndef LAZYATTN_HAVE_HIREDIS
    print_message("Redis tests skipped: built without hiredis\n");
    skip();
#else
    char host[128];
    int shared_port = 0;
    if (!lt_redis_target(host, sizeof host, &shared_port)) {
        print_message("Redis tests skipped: LAZYATTN_TEST_REDIS unset\n");
        skip();
    }
    int port = lt_free_port();
    pid_t pid = lt_redis_spawn(port);
    lazyattn_redis_config rc;
    lazyattn_redis_config_init(&rc);
    assert_int_equal(rc.retry_ms, 1000);
    rc.port = port;
    rc.timeout_ms = 300;
    rc.retry_ms = 600000; /* longer than the test */
    rc.prefix = redis_prefix;
    lazyattn_store *s = NULL;
    for (int i = 0; i < 100 && lazyattn_store_create_redis(&rc, &s) != LAZYATTN_STATUS_OK; i++) {
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    assert_non_null(s);
    put_value(s, 21, 3000);
    expect_stored(s, 21, 3000);
    kill(pid, SIGSTOP);
    lazyattn_store_value v;
    lt_assert_status(lazyattn_store_get(s, key_of(21), &v), LAZYATTN_STATUS_IO);
    assert_null(strstr(lazyattn_last_error(), "not retried"));
    assert_null(v.data);
    kill(pid, SIGCONT); /* back, but the store waits out its retry window */
    lt_assert_status(lazyattn_store_get(s, key_of(21), &v), LAZYATTN_STATUS_IO);
    assert_non_null(strstr(lazyattn_last_error(), "not retried"));
    int there = 1;
    lt_assert_status(lazyattn_store_exists(s, key_of(21), &there), LAZYATTN_STATUS_IO);
    uint8_t byte = 1;
    lt_assert_status(lazyattn_store_put(s, key_of(22), &byte, 1), LAZYATTN_STATUS_IO);
    lazyattn_store_destroy(s);
    /* without a retry window the next call reconnects */
    rc.retry_ms = 0;
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_OK);
    expect_stored(s, 21, 3000);
    kill(pid, SIGSTOP);
    lt_assert_status(lazyattn_store_get(s, key_of(21), &v), LAZYATTN_STATUS_IO);
    kill(pid, SIGCONT);
    expect_stored(s, 21, 3000); /* reconnected */
    lt_assert_status(lazyattn_store_delete(s, key_of(21)), LAZYATTN_STATUS_OK);
    lazyattn_store_destroy(s);
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
#endif
}

/* A Redis writer SIGKILLed in the middle of its writes (two versions of one
 * key, of different lengths, written in turn in 64 KiB chunks): a reader
 * gets a whole version, or nothing (no manifest yet: NOT_FOUND; new chunks
 * under an older manifest: FORMAT), never part of one. */
static void test_redis_killed_writer(void **state) {
    (void)state;
#ifndef LAZYATTN_HAVE_HIREDIS
    print_message("Redis tests skipped: built without hiredis\n");
    skip();
#else
    char host[128];
    int port = 0;
    if (!lt_redis_target(host, sizeof host, &port)) {
        print_message("Redis tests skipped: LAZYATTN_TEST_REDIS unset\n");
        skip();
    }
    const size_t len[2] = {(size_t)6 << 20, (size_t)5 << 20};
    int outcomes[3] = {0, 0, 0}; /* whole, absent, refused */
    for (int attempt = 0; attempt < 6; attempt++) {
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            lazyattn_store *w = open_redis((size_t)64 << 10);
            uint8_t *p = malloc(len[0]);
            if (!w || !p) _exit(3);
            for (int v = attempt;; v++) { /* until killed */
                fill_value(p, len[v % 2], 30 + (uint64_t)(v % 2));
                lazyattn_store_put(w, key_of(30), p, len[v % 2]);
            }
        }
        struct timespec ts = {0, 30000000L * (attempt + 1)};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        lazyattn_store *s = open_redis((size_t)64 << 10);
        lazyattn_store_value v;
        int st = lazyattn_store_get(s, key_of(30), &v);
        if (st == LAZYATTN_STATUS_OK) {
            assert_true(value_is(&v, len[0], 30) || value_is(&v, len[1], 31));
            lazyattn_store_release(s, &v);
            outcomes[0]++;
        } else {
            assert_true(st == LAZYATTN_STATUS_NOT_FOUND || st == LAZYATTN_STATUS_FORMAT);
            assert_null(v.data);
            outcomes[st == LAZYATTN_STATUS_NOT_FOUND ? 1 : 2]++;
        }
        lazyattn_store_destroy(s);
    }
    print_message("killed Redis writer: %d whole, %d absent, %d refused\n", outcomes[0],
                  outcomes[1], outcomes[2]);
    lazyattn_store *s = open_redis((size_t)64 << 10);
    int st = lazyattn_store_delete(s, key_of(30));
    assert_true(st == LAZYATTN_STATUS_OK || st == LAZYATTN_STATUS_NOT_FOUND);
    lazyattn_store_destroy(s);
#endif
}

/* Two processes share one Redis: values written by either are whole for both. */
static void test_redis_two_processes(void **state) {
    (void)state;
#ifndef LAZYATTN_HAVE_HIREDIS
    print_message("Redis tests skipped: built without hiredis\n");
    skip();
#else
    char host[128];
    int port = 0;
    if (!lt_redis_target(host, sizeof host, &port)) {
        print_message("Redis tests skipped: LAZYATTN_TEST_REDIS unset\n");
        skip();
    }
    share_between_processes(open_redis_4k, NULL, 8, 5000, 3000);
    lazyattn_store *s = open_redis(4096);
    for (uint64_t k = 0; k < 8; k++) {
        expect_stored(s, k, 5000 + 3000 * (size_t)k);
        lt_assert_status(lazyattn_store_delete(s, key_of(k)), LAZYATTN_STATUS_OK);
    }
    lazyattn_store_destroy(s);
#endif
}

/* Threads share one store (the header says the library's stores are
 * thread-safe): each puts, reads back and deletes values of overlapping
 * keys; the host store's small budget evicts values other threads are
 * reading. Every value read must be whole. Run under ThreadSanitizer in CI
 * (test_doc_store --threads). */
typedef struct hammer_arg {
    lazyattn_store *store;
    int id;
    int bad;
} hammer_arg;

static void *hammer(void *p) {
    hammer_arg *a = p;
    uint8_t *buf = malloc(9000);
    for (int i = 0; i < 200 && buf; i++) {
        uint64_t k = (uint64_t)((i * 7 + a->id * 3) % 12);
        size_t n = 1000 + 500 * (size_t)k;
        fill_value(buf, n, k);
        int st = lazyattn_store_put(a->store, key_of(k), buf, n);
        a->bad |= st != LAZYATTN_STATUS_OK;
        lazyattn_store_value v;
        for (uint64_t j = k; j < k + 3; j++) {
            st = lazyattn_store_get(a->store, key_of(j % 12), &v);
            if (st == LAZYATTN_STATUS_OK) {
                a->bad |= !value_is(&v, 1000 + 500 * (size_t)(j % 12), j % 12);
                lazyattn_store_release(a->store, &v);
            } else {
                a->bad |= st != LAZYATTN_STATUS_NOT_FOUND;
            }
        }
        int there;
        a->bad |= lazyattn_store_exists(a->store, key_of((k + 5) % 12), &there) != 0;
        if (i % 5 == 0) {
            st = lazyattn_store_delete(a->store, key_of((k + 1) % 12));
            a->bad |= st != LAZYATTN_STATUS_OK && st != LAZYATTN_STATUS_NOT_FOUND;
        }
    }
    if (!buf) a->bad = 1;
    free(buf);
    return NULL;
}

static void hammer_store(lazyattn_store *s) {
    enum { N = 4 };
    pthread_t t[N];
    hammer_arg a[N];
    for (int i = 0; i < N; i++) {
        a[i].store = s;
        a[i].id = i;
        a[i].bad = 0;
        assert_int_equal(pthread_create(&t[i], NULL, hammer, &a[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_false(a[i].bad);
    }
    for (uint64_t k = 0; k < 12; k++) lazyattn_store_delete(s, key_of(k));
}

static void test_threads(void **state) {
    (void)state;
    lazyattn_store *s;
    lt_assert_status(lazyattn_store_create_host(12000, &s), LAZYATTN_STATUS_OK);
    hammer_store(s);
    lazyattn_store_destroy(s);
    char dir[512];
    make_tmp_dir(dir, sizeof dir, "threads");
    lt_assert_status(lazyattn_store_create_dir(dir, &s), LAZYATTN_STATUS_OK);
    hammer_store(s);
    lazyattn_store_destroy(s);
    assert_int_equal(count_files(dir, ".tmp-"), 0);
    remove_tree(dir);
#ifdef LAZYATTN_HAVE_HIREDIS
    s = open_redis(1024); /* NULL without a server */
    if (s) {
        hammer_store(s);
        lazyattn_store_destroy(s);
    }
#endif
}

int main(int argc, char **argv) {
    const char *t = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s", t && *t ? t : "/tmp");
    /* one prefix per run, shared with forked children */
    snprintf(redis_prefix, sizeof redis_prefix, "lazyattn-test-%ld", (long)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_host_store),
        cmocka_unit_test(test_dir_store),
        cmocka_unit_test(test_dir_two_processes),
        cmocka_unit_test(test_dir_killed_writer),
        cmocka_unit_test(test_dir_not_regular),
        cmocka_unit_test(test_dir_rewritten_in_place),
        cmocka_unit_test(test_redis_down_or_slow),
        cmocka_unit_test(test_redis_store),
        cmocka_unit_test(test_redis_two_processes),
        cmocka_unit_test(test_redis_stalled),
        cmocka_unit_test(test_redis_killed_writer),
        cmocka_unit_test(test_threads),
    };
    /* --threads: the threaded tests alone (CI runs them under ThreadSanitizer) */
    if (argc == 2 && strcmp(argv[1], "--threads") == 0) {
        const struct CMUnitTest threaded[] = {cmocka_unit_test(test_threads),
                                              cmocka_unit_test(test_dir_rewritten_in_place)};
        return cmocka_run_group_tests_name("doc_store_threads", threaded, NULL, NULL);
    }
    return cmocka_run_group_tests_name("doc_store", tests, NULL, NULL);
}
