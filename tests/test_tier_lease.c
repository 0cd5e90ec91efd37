/* SPDX-License-Identifier: Apache-2.0 */
/* Leases on a write-through tier (issue 37): of two caches that miss one
 * document at once, each on its own store object of one directory or
 * Redis (two processes, or two in this one), the first computes it under
 * its lease and the other waits for its write and loads it (also when the
 * holder writes through its background writer, which gives the lease
 * back); a request that ends uncommitted gives its leases back at once; a
 * holder that never gives its lease back (stuck, or killed) holds the
 * other up for the lease's TTL and no longer, after which the other
 * computes it; without leases both compute, and the second write counts a
 * duplicate. Every request is checked against the float64 reference
 * (doc_engine.c). The tier's failures warn on stderr once per kind without
 * LAZYATTN_LOG (every one with LAZYATTN_LOG=warn, none with =error). The
 * Redis tests need LAZYATTN_TEST_REDIS (set by CI); without it they are
 * reported skipped. */
#include "doc_engine.h"
#include "redis_server.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
static char self_path[4096];
static char redis_prefix[64];

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "dir:PATH" or "redis:HOST:PORT"; leases of ttl_ms (0: off). */
static int open_spec(const char *spec, int ttl_ms, lazyattn_store **s) {
    int st = -1;
    if (strncmp(spec, "dir:", 4) == 0) {
        st = lazyattn_store_create_dir(spec + 4, s);
    } else if (strncmp(spec, "redis:", 6) == 0) {
        char host[128];
        const char *colon = strrchr(spec + 6, ':');
        if (!colon) return -1;
        snprintf(host, sizeof host, "%.*s", (int)(colon - spec - 6), spec + 6);
        lazyattn_redis_config rc;
        lazyattn_redis_config_init(&rc);
        rc.host = host;
        rc.port = atoi(colon + 1);
        rc.chunk_bytes = 4096;
        rc.prefix = redis_prefix;
        rc.timeout_ms = 1000;
        st = lazyattn_store_create_redis(&rc, s);
    }
    if (!st && (st = lazyattn_store_set_lease(*s, ttl_ms)) != 0) lazyattn_store_destroy(*s);
    return st;
}

static void tier_on(engine *e, lazyattn_context *ctx, lazyattn_store *s) {
    engine_open(e, ctx, 32, MODEL);
    lt_assert_status(lazyattn_cache_set_tier(e->cache, s, LAZYATTN_TIER_WRITE_THROUGH),
                     LAZYATTN_STATUS_OK);
}

static void delete_docs(lazyattn_store *s, int n) {
    for (int i = 0; i < n; i++) {
        int st = lazyattn_store_delete(s, key_of(i));
        assert_true(st == LAZYATTN_STATUS_OK || st == LAZYATTN_STATUS_NOT_FOUND);
    }
}

// ---- the waiting process ----

#define LEASE_LONG_MS 20000 /* never reached: the holder writes well before */
#define HOLD_MS 300         /* the holder computes this long after the other planned */

/* The second process: says it is ready (ready_path), then misses
 * documents 0 and 1, which the first process holds the leases of: it
 * waits, then loads both. Exit 0, or the number of the check that failed. */
static int child_main(const char *spec, const char *prefix, const char *ready_path) {
    snprintf(redis_prefix, sizeof redis_prefix, "%s", prefix);
    lazyattn_context *ctx;
    if (lazyattn_context_create(NULL, &ctx)) return 3;
    lazyattn_store *s;
    if (open_spec(spec, LEASE_LONG_MS, &s)) return 4;
    engine e;
    engine_open(&e, ctx, 32, MODEL);
    if (lazyattn_cache_set_tier(e.cache, s, LAZYATTN_TIER_WRITE_THROUGH)) return 5;
    FILE *f = fopen(ready_path, "w");
    if (!f || fclose(f)) return 6;
    int ids[2] = {0, 1};
    lazyattn_segment_action act[2];
    run_docs(&e, 2, ids, act); /* against the reference */
    lazyattn_cache_stats st = stats_of(&e);
    int rc = 0;
    if (act[0] != LAZYATTN_ACTION_REUSE || act[1] != LAZYATTN_ACTION_REUSE) rc = 10;
    else if (st.tier_hits != 2 || st.recomputed_tokens != 0) rc = 11;
    else if (st.tier_lease_waits < 1 || st.tier_lease_waited_loads != st.tier_lease_waits) rc = 12;
    else if (st.tier_lease_takeovers != 0 || st.tier_leases != 0 || st.tier_duplicates != 0)
        rc = 13;
    else if (st.tier_lease_wait_us < (HOLD_MS - 100) * 1000) rc = 14; /* it did wait */
    else if (st.tier_lease_wait_us > 10 * 1000000) rc = 15;
    if (rc) fprintf(stderr, "lease child: check %d: waits %lld loads %lld us %lld hits %lld\n", rc,
                    (long long)st.tier_lease_waits, (long long)st.tier_lease_waited_loads,
                    (long long)st.tier_lease_wait_us, (long long)st.tier_hits);
    engine_close(&e);
    lazyattn_store_destroy(s);
    lazyattn_context_destroy(ctx);
    return rc;
}

typedef struct spawn_child {
    const char *spec;
    char ready[96];
    pid_t pid;
} spawn_child;

/* run_request_planned of the holder: the other process starts, misses
 * what this one holds, and waits HOLD_MS before this one computes. */
static void start_waiter(void *user) {
    spawn_child *c = user;
    char *argv[] = {self_path, "--lease-child", (char *)c->spec, redis_prefix, c->ready, NULL};
    fflush(NULL);
    assert_int_equal(posix_spawn(&c->pid, self_path, NULL, NULL, argv, environ), 0);
    struct stat sb;
    double t0 = now_s();
    while (stat(c->ready, &sb) != 0) {
        assert_true(now_s() - t0 < 120); /* its context and programs: seconds on PoCL */
        sleep_ms(10);
    }
    sleep_ms(HOLD_MS);
}

/* write_queue > 0: the holder writes through its background writer,
 * which gives the leases back once the writes landed. */
static void one_computes_other_waits(lazyattn_context *ctx, const char *spec, int write_queue) {
    lazyattn_store *s;
    lt_assert_status(open_spec(spec, LEASE_LONG_MS, &s), LAZYATTN_STATUS_OK);
    delete_docs(s, 2);
    engine e;
    engine_open(&e, ctx, 32, MODEL);
    lazyattn_tier_options to;
    lazyattn_tier_options_init(&to);
    to.write_queue = write_queue;
    lt_assert_status(lazyattn_cache_set_tier_options(e.cache, s, LAZYATTN_TIER_WRITE_THROUGH, &to),
                     LAZYATTN_STATUS_OK);
    spawn_child c = {spec, "", 0};
    snprintf(c.ready, sizeof c.ready, "/tmp/lazyattn-lease-ready-%ld", (long)getpid());
    unlink(c.ready);
    run_request_planned = start_waiter;
    run_request_planned_user = &c;
    int ids[2] = {0, 1};
    lazyattn_segment_action act[2];
    run_docs(&e, 2, ids, act); /* computes both under its leases, writes, gives them back */
    run_request_planned = NULL;
    int status;
    assert_int_equal(waitpid(c.pid, &status, 0), c.pid);
    unlink(c.ready);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(act[0], LAZYATTN_ACTION_PREFILL);
    assert_int_equal(act[1], LAZYATTN_ACTION_PREFILL);
    lazyattn_cache_stats st = stats_of(&e);
    for (double t0 = now_s(); st.tier_writes_pending > 0 && now_s() - t0 < 30;) {
        sleep_ms(10); /* the writer's last count after its put */
        st = stats_of(&e);
    }
    assert_int_equal(st.tier_leases, 2);
    assert_int_equal(st.tier_writes, 2);
    assert_int_equal(st.tier_lease_waits, 0);
    assert_int_equal(st.tier_duplicates, 0);
    delete_docs(s, 2);
    engine_close(&e);
    lazyattn_store_destroy(s);
}

static void test_dir_one_computes(void **state) {
    char dir[] = "/tmp/lazyattn-lease-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char spec[64];
    snprintf(spec, sizeof spec, "dir:%s", dir);
    one_computes_other_waits(*state, spec, 0);
    assert_int_equal(rmdir(dir), 0); /* no lease file, no temporary left */
}

static void test_dir_one_computes_writer(void **state) {
    char dir[] = "/tmp/lazyattn-lease-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char spec[64];
    snprintf(spec, sizeof spec, "dir:%s", dir);
    one_computes_other_waits(*state, spec, 4);
    assert_int_equal(rmdir(dir), 0);
}

static void test_redis_one_computes(void **state) {
    char host[128], spec[200];
    int port = 0;
    LT_REDIS_TARGET_OR_SKIP(host, &port);
    snprintf(spec, sizeof spec, "redis:%s:%d", host, port);
    one_computes_other_waits(*state, spec, 0);
}

static void test_redis_one_computes_writer(void **state) {
    char host[128], spec[200];
    int port = 0;
    LT_REDIS_TARGET_OR_SKIP(host, &port);
    snprintf(spec, sizeof spec, "redis:%s:%d", host, port);
    one_computes_other_waits(*state, spec, 4);
}

// ---- a holder that never gives its lease back ----

#define LEASE_SHORT_MS 1500

typedef struct stuck_holder {
    engine *other;
    double t_after;
    lazyattn_segment_action act;
} stuck_holder;

/* run_request_planned of a holder that is stuck past its lease: the other
 * cache misses the document meanwhile. */
static void other_misses(void *user) {
    stuck_holder *h = user;
    int zero = 0;
    run_docs(h->other, 1, &zero, &h->act);
    h->t_after = now_s();
}

static void stuck_holder_expires(lazyattn_context *ctx, const char *spec) {
    lazyattn_store *s1, *s2;
    lt_assert_status(open_spec(spec, LEASE_SHORT_MS, &s1), LAZYATTN_STATUS_OK);
    lt_assert_status(open_spec(spec, LEASE_SHORT_MS, &s2), LAZYATTN_STATUS_OK);
    delete_docs(s1, 1);
    engine a, b;
    tier_on(&a, ctx, s1);
    tier_on(&b, ctx, s2);
    stuck_holder h = {&b, 0, LAZYATTN_ACTION_REUSE};
    run_request_planned = other_misses;
    run_request_planned_user = &h;
    double t_before = now_s(); /* a takes its lease after this */
    int zero = 0;
    lazyattn_segment_action act;
    run_docs(&a, 1, &zero, &act);
    run_request_planned = NULL;
    /* b computed after the lease expired, not before, and not much later */
    double waited = h.t_after - t_before;
    assert_true(waited >= LEASE_SHORT_MS * 1e-3 - 0.005);
    assert_true(waited < LEASE_SHORT_MS * 1e-3 + 5.0);
    assert_int_equal(h.act, LAZYATTN_ACTION_PREFILL);
    lazyattn_cache_stats sb = stats_of(&b);
    assert_int_equal(sb.tier_lease_waits, 1);
    assert_int_equal(sb.tier_lease_takeovers, 1);
    assert_int_equal(sb.tier_leases, 1);
    assert_int_equal(sb.tier_lease_waited_loads, 0);
    assert_true(sb.tier_lease_wait_us >= (LEASE_SHORT_MS - 300) * 1000);
    assert_int_equal(sb.tier_writes, 1);
    assert_int_equal(sb.tier_duplicates, 0);
    /* a computed it too; its write found b's: a duplicate */
    assert_int_equal(act, LAZYATTN_ACTION_PREFILL);
    lazyattn_cache_stats sa = stats_of(&a);
    assert_int_equal(sa.tier_leases, 1);
    assert_int_equal(sa.tier_duplicates, 1);
    assert_int_equal(sa.tier_duplicate_tokens, doc_len[0]);
    assert_int_equal(sa.tier_writes, 0);
    lt_assert_status(lazyattn_cache_validate(a.cache), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_validate(b.cache), LAZYATTN_STATUS_OK);
    /* the document is served from the store from now on */
    engine c;
    tier_on(&c, ctx, s1);
    run_docs(&c, 1, &zero, &act);
    assert_int_equal(act, LAZYATTN_ACTION_REUSE);
    assert_int_equal(stats_of(&c).tier_hits, 1);
    delete_docs(s1, 1);
    engine_close(&c);
    engine_close(&a);
    engine_close(&b);
    lazyattn_store_destroy(s1);
    lazyattn_store_destroy(s2);
}

static void test_dir_stuck_holder(void **state) {
    char dir[] = "/tmp/lazyattn-lease-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char spec[64];
    snprintf(spec, sizeof spec, "dir:%s", dir);
    stuck_holder_expires(*state, spec);
    assert_int_equal(rmdir(dir), 0);
}

static void test_redis_stuck_holder(void **state) {
    char host[128], spec[200];
    int port = 0;
    LT_REDIS_TARGET_OR_SKIP(host, &port);
    snprintf(spec, sizeof spec, "redis:%s:%d", host, port);
    stuck_holder_expires(*state, spec);
}

/* A process killed while it holds a lease: its lease file stays, with an
 * expiry LEASE_SHORT_MS after it was taken; the next cache computes the
 * document once that expiry passed. */
static int killed_child_main(const char *spec, const char *prefix, const char *ready_path) {
    snprintf(redis_prefix, sizeof redis_prefix, "%s", prefix);
    lazyattn_context *ctx;
    if (lazyattn_context_create(NULL, &ctx)) return 3;
    lazyattn_store *s;
    if (open_spec(spec, LEASE_SHORT_MS, &s)) return 4;
    engine e;
    engine_open(&e, ctx, 32, MODEL);
    if (lazyattn_cache_set_tier(e.cache, s, LAZYATTN_TIER_WRITE_THROUGH)) return 5;
    int zero = 0;
    lazyattn_request *req;
    if (request_of(&e, 1, &zero, &req)) return 6; /* takes the lease */
    FILE *f = fopen(ready_path, "w");
    if (!f || fclose(f)) return 7;
    pause(); /* killed here */
    return 8;
}

static void killed_holder_expires(lazyattn_context *ctx, const char *spec) {
    char ready[96];
    snprintf(ready, sizeof ready, "/tmp/lazyattn-lease-killed-%ld", (long)getpid());
    unlink(ready);
    pid_t pid;
    char *argv[] = {self_path, "--lease-killed", (char *)spec, redis_prefix, ready, NULL};
    fflush(NULL);
    double t_spawn = now_s(); /* the child's lease is taken after this */
    assert_int_equal(posix_spawn(&pid, self_path, NULL, NULL, argv, environ), 0);
    struct stat sb;
    while (stat(ready, &sb) != 0) {
        int status;
        assert_int_equal(waitpid(pid, &status, WNOHANG), 0); /* still running */
        assert_true(now_s() - t_spawn < 120);
        sleep_ms(10);
    }
    double t_ready = now_s(); /* the lease was taken before this */
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    unlink(ready);
    lazyattn_store *s;
    lt_assert_status(open_spec(spec, LEASE_SHORT_MS, &s), LAZYATTN_STATUS_OK);
    engine e;
    tier_on(&e, ctx, s);
    int zero = 0;
    lazyattn_segment_action act;
    run_docs(&e, 1, &zero, &act);
    double t_done = now_s();
    assert_int_equal(act, LAZYATTN_ACTION_PREFILL);
    lazyattn_cache_stats st = stats_of(&e);
    assert_int_equal(st.tier_lease_waits, 1);
    assert_int_equal(st.tier_lease_takeovers, 1);
    assert_int_equal(st.tier_writes, 1);
    /* not before the lease's expiry (the earliest it can be: taken at
     * t_spawn), nor stalled long past it (taken by t_ready) */
    assert_true(t_done - t_spawn >= LEASE_SHORT_MS * 1e-3 - 0.005);
    assert_true(t_done - t_ready < LEASE_SHORT_MS * 1e-3 + 5.0);
    delete_docs(s, 1);
    engine_close(&e);
    lazyattn_store_destroy(s);
}

static void test_dir_killed_holder(void **state) {
    char dir[] = "/tmp/lazyattn-lease-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char spec[64];
    snprintf(spec, sizeof spec, "dir:%s", dir);
    killed_holder_expires(*state, spec);
    assert_int_equal(rmdir(dir), 0); /* the dead lease replaced, then given back */
}

static void test_redis_killed_holder(void **state) {
    char host[128], spec[200];
    int port = 0;
    LT_REDIS_TARGET_OR_SKIP(host, &port);
    snprintf(spec, sizeof spec, "redis:%s:%d", host, port);
    killed_holder_expires(*state, spec);
}

/* A request that ends uncommitted gives its leases back at once: the next
 * cache that misses the document computes it without waiting. */
static void test_dir_abandoned_request(void **state) {
    char dir[] = "/tmp/lazyattn-lease-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char spec[64];
    snprintf(spec, sizeof spec, "dir:%s", dir);
    lazyattn_store *s1, *s2;
    lt_assert_status(open_spec(spec, LEASE_LONG_MS, &s1), LAZYATTN_STATUS_OK);
    lt_assert_status(open_spec(spec, LEASE_LONG_MS, &s2), LAZYATTN_STATUS_OK);
    engine a, b;
    tier_on(&a, *state, s1);
    tier_on(&b, *state, s2);
    int three = 3;
    lazyattn_request *req;
    lt_assert_status(request_of(&a, 1, &three, &req), LAZYATTN_STATUS_OK);
    assert_int_equal(stats_of(&a).tier_leases, 1);
    lazyattn_request_destroy(req); /* uncommitted: the lease goes back */
    lazyattn_segment_action act;
    double t0 = now_s();
    run_docs(&b, 1, &three, &act);
    assert_true(now_s() - t0 < LEASE_LONG_MS * 1e-3 / 2);
    assert_int_equal(act, LAZYATTN_ACTION_PREFILL);
    lazyattn_cache_stats sb = stats_of(&b);
    assert_int_equal(sb.tier_lease_waits, 0);
    assert_int_equal(sb.tier_leases, 1);
    assert_int_equal(sb.tier_writes, 1);
    lt_assert_status(lazyattn_store_delete(s1, key_of(3)), LAZYATTN_STATUS_OK);
    engine_close(&a);
    engine_close(&b);
    lazyattn_store_destroy(s1);
    lazyattn_store_destroy(s2);
    assert_int_equal(rmdir(dir), 0);
}

/* Something at a lease's name that is no lease (not written by the
 * library) counts as a lease taken when it last changed: once that is a
 * TTL ago, it is replaced at once, not waited for. */
static void test_dir_foreign_lease_file(void **state) {
    char dir[] = "/tmp/lazyattn-lease-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char spec[64], path[256];
    snprintf(spec, sizeof spec, "dir:%s", dir);
    lazyattn_doc_key k = key_of(4);
    int n = snprintf(path, sizeof path, "%s/%016llx-", dir, (unsigned long long)k.model_id);
    for (int i = 0; i < 32; i++)
        n += snprintf(path + n, sizeof path - (size_t)n, "%02x", k.digest[i]);
    snprintf(path + n, sizeof path - (size_t)n, ".lease");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a lease\n", f);
    assert_int_equal(fclose(f), 0);
    struct timespec old[2];
    clock_gettime(CLOCK_REALTIME, &old[0]);
    old[0].tv_sec -= 10 * LEASE_SHORT_MS / 1000;
    old[1] = old[0];
    assert_int_equal(utimensat(AT_FDCWD, path, old, 0), 0);
    lazyattn_store *s;
    lt_assert_status(open_spec(spec, LEASE_SHORT_MS, &s), LAZYATTN_STATUS_OK);
    engine e;
    tier_on(&e, *state, s);
    int four = 4;
    lazyattn_segment_action act;
    run_docs(&e, 1, &four, &act);
    assert_int_equal(act, LAZYATTN_ACTION_PREFILL);
    lazyattn_cache_stats st = stats_of(&e);
    assert_int_equal(st.tier_lease_waits, 0);
    assert_int_equal(st.tier_leases, 1);
    assert_int_equal(st.tier_writes, 1);
    lt_assert_status(lazyattn_store_delete(s, k), LAZYATTN_STATUS_OK);
    engine_close(&e);
    lazyattn_store_destroy(s);
    assert_int_equal(rmdir(dir), 0); /* replaced, then given back */
}

// ---- without leases; refusals ----

static void both_compute(void *user) {
    int two = 2;
    lazyattn_segment_action act;
    run_docs(user, 1, &two, &act);
    assert_int_equal(act, LAZYATTN_ACTION_PREFILL);
}

static void test_dir_leases_off(void **state) {
    char dir[] = "/tmp/lazyattn-lease-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char spec[64];
    snprintf(spec, sizeof spec, "dir:%s", dir);
    lazyattn_store *s1, *s2;
    lt_assert_status(open_spec(spec, 0, &s1), LAZYATTN_STATUS_OK);
    lt_assert_status(open_spec(spec, 0, &s2), LAZYATTN_STATUS_OK);
    engine a, b;
    tier_on(&a, *state, s1);
    tier_on(&b, *state, s2);
    run_request_planned = both_compute;
    run_request_planned_user = &b;
    int two = 2;
    lazyattn_segment_action act;
    run_docs(&a, 1, &two, &act); /* b computes and writes it meanwhile */
    run_request_planned = NULL;
    lazyattn_cache_stats sa = stats_of(&a), sb = stats_of(&b);
    assert_int_equal(sa.tier_leases + sb.tier_leases + sa.tier_lease_waits + sb.tier_lease_waits,
                     0);
    assert_int_equal(sb.tier_writes, 1);
    assert_int_equal(sa.tier_duplicates, 1);
    assert_int_equal(sa.tier_duplicate_tokens, doc_len[2]);
    assert_int_equal(sb.tier_duplicates, 0);
    lt_assert_status(lazyattn_store_delete(s1, key_of(2)), LAZYATTN_STATUS_OK);
    engine_close(&a);
    engine_close(&b);
    lazyattn_store_destroy(s1);
    lazyattn_store_destroy(s2);
    assert_int_equal(rmdir(dir), 0);
}

static void test_set_lease_refusals(void **state) {
    (void)state;
    lazyattn_store *h;
    lt_assert_status(lazyattn_store_create_host(1 << 20, &h), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_store_set_lease(h, 1000), LAZYATTN_STATUS_UNSUPPORTED);
    assert_non_null(strstr(lazyattn_last_error(), "no leases"));
    lazyattn_store_destroy(h);
    lt_assert_status(lazyattn_store_set_lease(NULL, 1000), LAZYATTN_STATUS_INVALID_ARGUMENT);
    char dir[] = "/tmp/lazyattn-lease-XXXXXX";
    assert_non_null(mkdtemp(dir));
    lazyattn_store *d;
    lt_assert_status(lazyattn_store_create_dir(dir, &d), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_store_set_lease(d, -1), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_store_set_lease(d, 3600001), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lt_assert_status(lazyattn_store_set_lease(d, 0), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_store_set_lease(d, 3600000), LAZYATTN_STATUS_OK);
    lazyattn_store_destroy(d);
    assert_int_equal(rmdir(dir), 0);
}

// ---- warnings: once a kind by default ----

static int failing_get(void *impl, lazyattn_doc_key k, lazyattn_store_value *v) {
    (void)impl, (void)k, (void)v;
    return LAZYATTN_STATUS_IO;
}
static void failing_release(void *impl, lazyattn_store_value *v) { (void)impl, (void)v; }
static int failing_put(void *impl, lazyattn_doc_key k, const void *d, size_t n) {
    (void)impl, (void)k, (void)d, (void)n;
    return LAZYATTN_STATUS_IO;
}
static int failing_exists(void *impl, lazyattn_doc_key k, int *e) {
    (void)impl, (void)k, (void)e;
    return LAZYATTN_STATUS_IO;
}
static int failing_remove(void *impl, lazyattn_doc_key k) {
    (void)impl, (void)k;
    return LAZYATTN_STATUS_NOT_FOUND;
}

/* A process whose tier fails every load and write of three documents, its
 * stderr a file: LAZYATTN_LOG as given ("" unset). */
static int warn_child_main(const char *log) {
    if (log[0])
        setenv("LAZYATTN_LOG", log, 1);
    else
        unsetenv("LAZYATTN_LOG");
    lazyattn_context *ctx;
    if (lazyattn_context_create(NULL, &ctx)) return 3;
    lazyattn_store_ops ops = {"failing",      failing_get,    failing_release, failing_put,
                              failing_exists, failing_remove, NULL};
    lazyattn_store *s;
    if (lazyattn_store_create(&ops, NULL, &s)) return 4;
    engine e;
    engine_open(&e, ctx, 32, MODEL);
    if (lazyattn_cache_set_tier(e.cache, s, LAZYATTN_TIER_WRITE_THROUGH)) return 5;
    for (int i = 0; i < 3; i++) {
        lazyattn_segment_action act;
        run_docs(&e, 1, &i, &act);
        if (act != LAZYATTN_ACTION_PREFILL) return 6;
    }
    lazyattn_cache_stats st = stats_of(&e);
    if (st.tier_errors != 3 || st.tier_write_errors != 3) return 7;
    engine_close(&e);
    lazyattn_store_destroy(s);
    lazyattn_context_destroy(ctx);
    return 0;
}

/* Lines of the child's stderr that contain what. */
static int count_lines(const char *path, const char *what) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, what) != NULL;
    fclose(f);
    return n;
}

static void warnings_of(const char *log, const char *path) {
    posix_spawn_file_actions_t fa;
    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    assert_int_equal(posix_spawn_file_actions_addopen(&fa, 2, path, O_WRONLY | O_CREAT | O_TRUNC,
                                                      0644),
                     0);
    pid_t pid;
    char *argv[] = {self_path, "--warn-child", (char *)log, NULL};
    fflush(NULL);
    assert_int_equal(posix_spawn(&pid, self_path, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_warnings_once_a_kind(void **state) {
    (void)state;
    char path[96];
    snprintf(path, sizeof path, "/tmp/lazyattn-lease-warn-%ld", (long)getpid());
    warnings_of("", path); /* the default: the first of each kind */
    assert_int_equal(count_lines(path, "lazyattn: warning: tier: "), 2);
    assert_int_equal(count_lines(path, "recomputing the document"), 1);
    assert_int_equal(count_lines(path, "not written to the failing store"), 1);
    warnings_of("warn", path); /* asked for: every one */
    assert_int_equal(count_lines(path, "recomputing the document"), 3);
    assert_int_equal(count_lines(path, "not written to the failing store"), 3);
    warnings_of("error", path); /* errors only */
    assert_int_equal(count_lines(path, "tier: "), 0);
    unlink(path);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--warn-child") == 0) return warn_child_main(argv[2]);
    if (argc == 5 && strcmp(argv[1], "--lease-child") == 0)
        return child_main(argv[2], argv[3], argv[4]);
    if (argc == 5 && strcmp(argv[1], "--lease-killed") == 0)
        return killed_child_main(argv[2], argv[3], argv[4]);
    ssize_t len = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (len <= 0) snprintf(self_path, sizeof self_path, "%s", argv[0]);
    snprintf(redis_prefix, sizeof redis_prefix, "lazyattn-lease-test-%ld", (long)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_lease_refusals),
        cmocka_unit_test(test_warnings_once_a_kind),
        cmocka_unit_test(test_dir_leases_off),
        cmocka_unit_test(test_dir_one_computes),
        cmocka_unit_test(test_redis_one_computes),
        cmocka_unit_test(test_dir_one_computes_writer),
        cmocka_unit_test(test_redis_one_computes_writer),
        cmocka_unit_test(test_dir_abandoned_request),
        cmocka_unit_test(test_dir_foreign_lease_file),
        cmocka_unit_test(test_dir_stuck_holder),
        cmocka_unit_test(test_redis_stuck_holder),
        cmocka_unit_test(test_dir_killed_holder),
        cmocka_unit_test(test_redis_killed_holder),
    };
    return cmocka_run_group_tests_name("tier_lease", tests, lt_context_setup, lt_context_teardown);
}
