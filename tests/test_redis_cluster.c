/* SPDX-License-Identifier: Apache-2.0 */
/* The Redis store as deployed (issue 37): URL forms (seeds, user, password;
 * rediss:// refused), a server with a password and an ACL user, a Redis
 * Cluster reached through any one node (master or replica) with documents
 * over every master, a slot migrated mid-run (ASK), a master killed mid-run
 * (its replica promoted: misses only while it moves, never a wrong value,
 * and the restarted master followed), and eviction under maxmemory + LRU
 * (a document is loadable or absent within one read).
 * Servers: LAZYATTN_TEST_REDIS_AUTH (redis://USER:PW@HOST:PORT, an ACL user)
 * with LAZYATTN_TEST_REDIS_AUTH_DEFAULT (the default user's password), and
 * LAZYATTN_TEST_REDIS_CLUSTER (its nodes, HOST:PORT,...), as
 * tools/redis_test_servers.sh starts them (CI does); without them those
 * tests are reported skipped. The failover and eviction tests start
 * servers of their own (redis-server, redis-cli). */
#include "redis_server.h"
#include "test_common.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef LAZYATTN_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

static char prefix[64];
static uint64_t model_id;

static lazyattn_doc_key key_of(uint64_t k) {
    lazyattn_doc_key key = {model_id, {0}};
    for (int i = 0; i < 8; i++) key.digest[i] = key.digest[31 - i] = (uint8_t)(k >> (8 * i));
    return key;
}

/* The value of document k (n bytes): one per key, as a digest names one
 * document's bytes. */
static void fill_value(uint8_t *p, size_t n, uint64_t k) {
    lt_rng r = {k * 0x9E3779B97F4A7C15ull + n + 1};
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(lt_next(&r) >> 56);
}

static int put_doc(lazyattn_store *s, uint64_t k, size_t n) {
    uint8_t *p = malloc(n);
    assert_non_null(p);
    fill_value(p, n, k);
    int st = lazyattn_store_put(s, key_of(k), p, n);
    free(p);
    return st;
}

/* get: its status; when OK, the value is asserted to be document k's. */
static int get_doc(lazyattn_store *s, uint64_t k, size_t n) {
    lazyattn_store_value v;
    int st = lazyattn_store_get(s, key_of(k), &v);
    if (st) return st;
    uint8_t *want = malloc(n);
    assert_non_null(want);
    fill_value(want, n, k);
    assert_int_equal(v.size, n);
    assert_memory_equal(v.data, want, n); /* never a wrong value */
    free(want);
    lazyattn_store_release(s, &v);
    return LAZYATTN_STATUS_OK;
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static lazyattn_store *open_url(const char *url, size_t chunk, int want) {
    lazyattn_redis_config rc;
    lazyattn_redis_config_init(&rc);
    rc.url = url;
    rc.chunk_bytes = chunk;
    rc.prefix = prefix;
    rc.timeout_ms = 1000;
    rc.retry_ms = 100;
    lazyattn_store *s = NULL;
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), want);
    return s;
}

// ---- URL forms ----

static void test_url_forms(void **state) {
    (void)state;
    const char *good[] = {"redis://127.0.0.1:6379",
                          "redis://h1:1,h2:2,[::1]:3",
                          "redis://:pw@h:1",
                          "redis://user:p%40ss%3A%2C@h:1,h:2",
                          "redis://user:pw@[::1]:6379",
                          "redis://user@h:1" /* the password from the config */};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        lt_assert_status(lazyattn_redis_url_check(good[i]), LAZYATTN_STATUS_OK);
    const char *bad[] = {"redis://h",       "redis://h:0",      "redis://h:65536",
                         "redis://h:1,",    "redis://,h:1",     "redis://@h:1:2",
                         "redis://:@h:1",   "redis://:p%4@h:1", "redis://:p%00@h:1",
                         "http://h:1",      "redis://::1:6379", "redis://h:1/0",
                         "redis://h:+1",    "redis://[::1]",    "redis://h:1 ",
                         "redis://",        "redis://[]:1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        lt_assert_status(lazyattn_redis_url_check(bad[i]), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_true(strlen(lazyattn_last_error()) > 0);
    }
    lt_assert_status(lazyattn_redis_url_check(NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* a password never appears in a message */
    lt_assert_status(lazyattn_redis_url_check("redis://u:s3cr3t@h"),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(strstr(lazyattn_last_error(), "s3cr3t"));
    lt_assert_status(lazyattn_redis_url_check("https://u:s3cr3t@h:1"),
                     LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(strstr(lazyattn_last_error(), "s3cr3t"));
    /* TLS: refused, saying what to do instead */
    lt_assert_status(lazyattn_redis_url_check("rediss://h:6380"), LAZYATTN_STATUS_UNSUPPORTED);
    assert_non_null(strstr(lazyattn_last_error(), "TLS terminator"));
    lazyattn_redis_config rc;
    lazyattn_redis_config_init(&rc);
    assert_null(rc.url);
    assert_null(rc.user);
    assert_null(rc.password);
    lazyattn_store *s = (lazyattn_store *)1;
    rc.url = "rediss://127.0.0.1:6380";
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_UNSUPPORTED);
    assert_null(s);
    rc.url = "redis://h:1,";
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    rc.url = "redis://someone@h:1"; /* a user without a password */
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "no password"));
    rc.url = NULL;
    rc.user = "someone";
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    rc.user = NULL;
    rc.password = "";
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(s);
}

#ifdef LAZYATTN_HAVE_HIREDIS

/* getenv(name), or the test skipped saying so (CI checks none is). */
#define ENV_OR_SKIP(var, name)                                                        \
    const char *var = getenv(name);                                                   \
    if (!var || !*var) {                                                              \
        print_message("Redis tests skipped: %s unset\n", name);                       \
        skip();                                                                       \
    }

// ---- authentication ----

static void round_trip(lazyattn_store *s, uint64_t k) {
    int there = -1;
    lt_assert_status(put_doc(s, k, 3000), LAZYATTN_STATUS_OK);
    lt_assert_status(get_doc(s, k, 3000), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_store_exists(s, key_of(k), &there), LAZYATTN_STATUS_OK);
    assert_int_equal(there, 1);
    lt_assert_status(lazyattn_store_delete(s, key_of(k)), LAZYATTN_STATUS_OK);
    lt_assert_status(get_doc(s, k, 3000), LAZYATTN_STATUS_NOT_FOUND);
}

static void test_auth(void **state) {
    (void)state;
    ENV_OR_SKIP(acl_url, "LAZYATTN_TEST_REDIS_AUTH");
    ENV_OR_SKIP(default_pw, "LAZYATTN_TEST_REDIS_AUTH_DEFAULT");
    const char *at = strrchr(acl_url, '@'), *colon = strrchr(acl_url, ':');
    assert_non_null(at);
    char host[128], url[512];
    snprintf(host, sizeof host, "%.*s", (int)(colon - at - 1), at + 1);
    int port = atoi(colon + 1);
    lazyattn_redis_config rc;
    lazyattn_redis_config_init(&rc);
    rc.host = host;
    rc.port = port;
    rc.prefix = prefix;
    rc.chunk_bytes = 1024;
    lazyattn_store *s = (lazyattn_store *)1;
    /* no password: refused at creation, saying why */
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_IO);
    assert_non_null(strstr(lazyattn_last_error(), "NOAUTH"));
    assert_null(s);
    /* a wrong one: refused, and never repeated */
    snprintf(url, sizeof url, "redis://:wrong-one-7f3a@%s:%d", host, port);
    rc.url = url;
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_IO);
    assert_non_null(strstr(lazyattn_last_error(), "AUTH"));
    assert_null(strstr(lazyattn_last_error(), "wrong-one-7f3a"));
    /* the ACL user of the URL */
    s = open_url(acl_url, 1024, LAZYATTN_STATUS_OK);
    round_trip(s, 1);
    lazyattn_store_destroy(s);
    /* the default user's password in the URL, then in the config */
    snprintf(url, sizeof url, "redis://:%s@%s:%d", default_pw, host, port);
    s = open_url(url, 1024, LAZYATTN_STATUS_OK);
    round_trip(s, 2);
    lazyattn_store_destroy(s);
    snprintf(url, sizeof url, "redis://%s:%d", host, port);
    rc.url = url;
    rc.password = default_pw;
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_OK);
    round_trip(s, 3);
    lazyattn_store_destroy(s);
    /* user and password in the config, host and port too */
    char user[64];
    snprintf(user, sizeof user, "%.*s", (int)(strchr(acl_url + 8, ':') - acl_url - 8),
             acl_url + 8);
    const char *pw_start = strchr(acl_url + 8, ':') + 1;
    char pw[128];
    snprintf(pw, sizeof pw, "%.*s", (int)(at - pw_start), pw_start);
    rc.url = NULL;
    rc.user = user;
    rc.password = pw;
    lt_assert_status(lazyattn_store_create_redis(&rc, &s), LAZYATTN_STATUS_OK);
    round_trip(s, 4);
    lazyattn_store_destroy(s);
    /* two seeds that are not a cluster: refused, not silently one of them */
    snprintf(url, sizeof url, "redis://:%s@%s:%d,%s:%d", default_pw, host, port, host, port);
    s = open_url(url, 1024, LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(lazyattn_last_error(), "cluster"));
}

// ---- a cluster ----

/* The nodes of a cluster, from "HOST:PORT,HOST:PORT,...". */
static int parse_nodes(const char *list, char hosts[][64], int *ports, int max) {
    int n = 0;
    for (const char *p = list; p && *p && n < max; n++) {
        const char *comma = strchr(p, ',');
        const char *colon = strrchr(p, ':');
        if (comma) {
            for (colon = comma; colon > p && *colon != ':'; colon--) continue;
        }
        snprintf(hosts[n], 64, "%.*s", (int)(colon - p), p);
        ports[n] = atoi(colon + 1);
        p = comma ? comma + 1 : NULL;
    }
    return n;
}

static redisContext *raw(const char *host, int port) {
    redisContext *c = redisConnect(host, port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    return c;
}

static int is_master(const char *host, int port) {
    redisContext *c = raw(host, port);
    redisReply *r = redisCommand(c, "ROLE");
    assert_non_null(r);
    int m = r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
            strcmp(r->element[0]->str, "master") == 0;
    freeReplyObject(r);
    redisFree(c);
    return m;
}

static void manifest_key(uint64_t k, char *out, size_t n) {
    lazyattn_doc_key key = key_of(k);
    int len = snprintf(out, n, "%s:{%016llx:", prefix, (unsigned long long)key.model_id);
    for (int i = 0; i < 32; i++) len += snprintf(out + len, n - (size_t)len, "%02x", key.digest[i]);
    snprintf(out + len, n - (size_t)len, "}:manifest");
}

/* Through each node alone (masters and replicas), then many documents
 * through one: every master holds some, each read back whole. */
static void test_cluster_any_seed(void **state) {
    (void)state;
    ENV_OR_SKIP(list, "LAZYATTN_TEST_REDIS_CLUSTER");
    char hosts[16][64], url[512];
    int ports[16], n = parse_nodes(list, hosts, ports, 16), masters = 0;
    assert_true(n >= 6);
    for (int i = 0; i < n; i++) {
        snprintf(url, sizeof url, "redis://%.63s:%d", hosts[i], ports[i]);
        lazyattn_store *s = open_url(url, 1024, LAZYATTN_STATUS_OK);
        round_trip(s, 100 + (uint64_t)i);
        lazyattn_store_destroy(s);
        masters += is_master(hosts[i], ports[i]);
    }
    assert_int_equal(masters, 3);
    snprintf(url, sizeof url, "redis://%.63s:%d", hosts[n - 1], ports[n - 1]);
    lazyattn_store *s = open_url(url, 1024, LAZYATTN_STATUS_OK);
    enum { N_DOCS = 96 };
    for (uint64_t k = 0; k < N_DOCS; k++) lt_assert_status(put_doc(s, k, 2500), LAZYATTN_STATUS_OK);
    for (uint64_t k = 0; k < N_DOCS; k++) lt_assert_status(get_doc(s, k, 2500), LAZYATTN_STATUS_OK);
    /* where the manifests are: each master answers EXISTS for its own slots
     * (1) and MOVED for the others' */
    for (int i = 0; i < n; i++) {
        if (!is_master(hosts[i], ports[i])) continue;
        redisContext *c = raw(hosts[i], ports[i]);
        int here = 0;
        for (uint64_t k = 0; k < N_DOCS; k++) {
            char key[256];
            manifest_key(k, key, sizeof key);
            redisReply *r = redisCommand(c, "EXISTS %s", key);
            assert_non_null(r);
            here += r->type == REDIS_REPLY_INTEGER && r->integer == 1;
            freeReplyObject(r);
        }
        redisFree(c);
        print_message("master %s:%d holds %d of %d documents\n", hosts[i], ports[i], here, N_DOCS);
        assert_true(here > 0);
    }
    for (uint64_t k = 0; k < N_DOCS; k++)
        lt_assert_status(lazyattn_store_delete(s, key_of(k)), LAZYATTN_STATUS_OK);
    for (uint64_t k = 0; k < N_DOCS; k += 7)
        lt_assert_status(get_doc(s, k, 2500), LAZYATTN_STATUS_NOT_FOUND);
    lazyattn_store_destroy(s);
}

/* "CLUSTER NODES" of a node: the id and address of the master serving
 * slot, and of another master. */
typedef struct master_pair {
    char from_id[64], to_id[64], from_host[64], to_host[64];
    int from_port, to_port;
} master_pair;

static void find_masters(const char *host, int port, int slot, master_pair *m) {
    redisContext *c = raw(host, port);
    redisReply *r = redisCommand(c, "CLUSTER NODES");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    memset(m, 0, sizeof *m);
    char *save = NULL;
    for (char *line = strtok_r(r->str, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char id[64], addr[64], flags[128];
        if (sscanf(line, "%63s %63s %127s", id, addr, flags) != 3) continue;
        if (!strstr(flags, "master") || strstr(flags, "fail")) continue;
        char *at = strchr(addr, '@'), *colon = strrchr(addr, ':');
        if (at) *at = '\0';
        *colon = '\0';
        int serves = 0;
        const char *p = line;
        for (int f = 0; f < 8 && p; f++) p = strchr(p + 1, ' '); /* the slot ranges */
        while (p && *p) {
            int lo, hi, used = 0;
            if (sscanf(p, " %d-%d%n", &lo, &hi, &used) == 2) {
            } else if (sscanf(p, " %d%n", &lo, &used) == 1) {
                hi = lo;
            } else
                break;
            serves |= slot >= lo && slot <= hi;
            p += used;
        }
        if (serves && !m->from_id[0]) {
            snprintf(m->from_id, 64, "%s", id);
            snprintf(m->from_host, 64, "%s", addr);
            m->from_port = atoi(colon + 1);
        } else if (!serves && !m->to_id[0]) {
            snprintf(m->to_id, 64, "%s", id);
            snprintf(m->to_host, 64, "%s", addr);
            m->to_port = atoi(colon + 1);
        }
    }
    freeReplyObject(r);
    redisFree(c);
    assert_true(m->from_id[0] && m->to_id[0]);
}

static void command_ok(const char *host, int port, const char *fmt, const char *a,
                       const char *b) {
    redisContext *c = raw(host, port);
    redisReply *r = redisCommand(c, fmt, a, b);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) print_message("%s: %s\n", fmt, r->str);
    assert_true(r->type != REDIS_REPLY_ERROR);
    freeReplyObject(r);
    redisFree(c);
}

/* A document's slot migrated from one master to another while it is read
 * and written: half its keys moved (ASK for those), then all (MOVED). */
static void test_cluster_ask(void **state) {
    (void)state;
    ENV_OR_SKIP(list, "LAZYATTN_TEST_REDIS_CLUSTER");
    char hosts[16][64], url[512], key[256], slot_text[16], cmd[1024];
    int ports[16], n = parse_nodes(list, hosts, ports, 16);
    assert_true(n >= 1);
    snprintf(url, sizeof url, "redis://%.63s:%d", hosts[0], ports[0]);
    lazyattn_store *s = open_url(url, 1024, LAZYATTN_STATUS_OK);
    const uint64_t k = 77;
    lt_assert_status(put_doc(s, k, 3000), LAZYATTN_STATUS_OK); /* 3 chunks + manifest */
    manifest_key(k, key, sizeof key);
    redisContext *c = raw(hosts[0], ports[0]);
    redisReply *r = redisCommand(c, "CLUSTER KEYSLOT %s", key);
    assert_non_null(r);
    int slot = (int)r->integer;
    freeReplyObject(r);
    redisFree(c);
    snprintf(slot_text, sizeof slot_text, "%d", slot);
    master_pair m;
    find_masters(hosts[0], ports[0], slot, &m);
    command_ok(m.to_host, m.to_port, "CLUSTER SETSLOT %s IMPORTING %s", slot_text, m.from_id);
    command_ok(m.from_host, m.from_port, "CLUSTER SETSLOT %s MIGRATING %s", slot_text, m.to_id);
    /* the manifest and chunk 0 moved, chunks 1 and 2 not yet */
    char chunk0[300];
    snprintf(chunk0, sizeof chunk0, "%.*s:chunk:0", (int)(strlen(key) - strlen(":manifest")),
             key);
    c = raw(m.from_host, m.from_port);
    snprintf(cmd, sizeof cmd, "MIGRATE %s %d \"\" 0 5000 KEYS %s %s", m.to_host, m.to_port, key,
             chunk0);
    r = redisCommand(c, "MIGRATE %s %d %s 0 5000 KEYS %s %s", m.to_host, m.to_port, "", key,
                     chunk0);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR) print_message("%s: %s\n", cmd, r->str);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    lt_assert_status(get_doc(s, k, 3000), LAZYATTN_STATUS_OK);
    int there = 0;
    lt_assert_status(lazyattn_store_exists(s, key_of(k), &there), LAZYATTN_STATUS_OK);
    assert_int_equal(there, 1);
    lt_assert_status(put_doc(s, k, 3000), LAZYATTN_STATUS_OK); /* written where each key is */
    lt_assert_status(get_doc(s, k, 3000), LAZYATTN_STATUS_OK);
    /* the rest of the slot, then the slot itself */
    for (;;) {
        r = redisCommand(c, "CLUSTER GETKEYSINSLOT %d 100", slot);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        size_t left = r->elements;
        for (size_t i = 0; i < left; i++) {
            redisReply *mr = redisCommand(c, "MIGRATE %s %d %s 0 5000", m.to_host, m.to_port,
                                          r->element[i]->str);
            assert_non_null(mr);
            assert_int_equal(mr->type, REDIS_REPLY_STATUS);
            freeReplyObject(mr);
        }
        freeReplyObject(r);
        if (!left) break;
    }
    redisFree(c);
    for (int i = 0; i < n; i++)
        if (is_master(hosts[i], ports[i]))
            command_ok(hosts[i], ports[i], "CLUSTER SETSLOT %s NODE %s", slot_text, m.to_id);
    lt_assert_status(get_doc(s, k, 3000), LAZYATTN_STATUS_OK); /* MOVED, followed */
    lt_assert_status(lazyattn_store_delete(s, key_of(k)), LAZYATTN_STATUS_OK);
    lt_assert_status(get_doc(s, k, 3000), LAZYATTN_STATUS_NOT_FOUND);
    lazyattn_store_destroy(s);
}

/* A master of a cluster of the test's own killed while documents are read
 * and written through a store seeded with one node: calls fail (counted,
 * never a wrong value) only until its replica is promoted, then all
 * succeed; the killed master, restarted, rejoins as a replica and a store
 * seeded with it alone works (MOVED followed). */
static lt_cluster cl; /* stopped by the teardown, also after a failure */

static int stop_cluster(void **state) {
    (void)state;
    lt_cluster_stop(&cl);
    memset(&cl, 0, sizeof cl);
    return 0;
}

static void test_cluster_failover(void **state) {
    (void)state;
    ENV_OR_SKIP(list, "LAZYATTN_TEST_REDIS_CLUSTER"); /* CI: redis-server and redis-cli exist */
    (void)list;
    lt_cluster_start(&cl);
    int victim = -1;
    for (int i = 0; i < LT_CLUSTER_NODES && victim < 0; i++)
        if (is_master("127.0.0.1", cl.ports[i])) victim = i;
    assert_true(victim >= 0);
    char url[512];
    int len = snprintf(url, sizeof url, "redis://");
    for (int i = 0; i < LT_CLUSTER_NODES; i++) /* the victim is a seed too */
        len += snprintf(url + len, sizeof url - (size_t)len, "%s127.0.0.1:%d", i ? "," : "",
                        cl.ports[(victim + i) % LT_CLUSTER_NODES]);
    lazyattn_store *s = open_url(url, 1024, LAZYATTN_STATUS_OK);
    enum { N_DOCS = 48 };
    const size_t size = 2500;
    for (uint64_t k = 0; k < N_DOCS; k++) lt_assert_status(put_doc(s, k, size), LAZYATTN_STATUS_OK);
    int64_t start = now_ms(), killed_at = 0, last_fail = 0;
    int fails = 0, fails_before = 0, ok_after = 0;
    for (uint64_t it = 0;; it++) {
        int64_t t = now_ms();
        if (!killed_at && t - start > 300) {
            kill(cl.pids[victim], SIGKILL);
            assert_int_equal(waitpid(cl.pids[victim], NULL, 0), cl.pids[victim]);
            cl.pids[victim] = 0;
            killed_at = now_ms();
        }
        /* done: 1.5 s without a failure after the kill, or 15 s */
        if (killed_at && t - (last_fail > killed_at ? last_fail : killed_at) > 1500 &&
            t - killed_at > 1500)
            break;
        if (killed_at && t - killed_at > 15000) break;
        uint64_t k = it % N_DOCS;
        int st = get_doc(s, k, size); /* asserts the value when OK */
        if (st == LAZYATTN_STATUS_NOT_FOUND) st = put_doc(s, k, size); /* lost: written again */
        if (st) {
            fails++;
            fails_before += !killed_at;
            last_fail = now_ms();
        } else if (killed_at)
            ok_after++;
    }
    int64_t recovered_ms = last_fail > killed_at ? last_fail - killed_at : 0;

    print_message("failover: %d calls failed, the last %lld ms after the kill; %d succeeded after\n",
                  fails, (long long)recovered_ms, ok_after);
    assert_int_equal(fails_before, 0);
    assert_true(fails > 0);            /* the kill was seen ... */
    assert_true(recovered_ms < 10000); /* ... and followed within a few seconds */
    assert_true(ok_after > 0);
    for (uint64_t k = 0; k < N_DOCS; k++) { /* every document loadable, or absent and rewritten */
        int st = get_doc(s, k, size);
        if (st == LAZYATTN_STATUS_NOT_FOUND) st = put_doc(s, k, size);
        lt_assert_status(st, LAZYATTN_STATUS_OK);
        lt_assert_status(get_doc(s, k, size), LAZYATTN_STATUS_OK);
    }
    /* the old master back: a replica now, answering MOVED; a store seeded
     * with it alone follows to the masters */
    lt_cluster_node_start(&cl, victim);
    assert_true(lt_cluster_wait_ok(&cl, 10000));
    char one[64];
    snprintf(one, sizeof one, "redis://127.0.0.1:%d", cl.ports[victim]);
    lazyattn_store *s2 = open_url(one, 1024, LAZYATTN_STATUS_OK);
    for (uint64_t k = 0; k < N_DOCS; k++) lt_assert_status(get_doc(s2, k, size), LAZYATTN_STATUS_OK);
    lt_assert_status(put_doc(s2, N_DOCS, size), LAZYATTN_STATUS_OK);
    lt_assert_status(get_doc(s, N_DOCS, size), LAZYATTN_STATUS_OK);
    lazyattn_store_destroy(s2);
    lazyattn_store_destroy(s);
}

// ---- eviction ----

/* A server of the test's own under maxmemory + allkeys-lru, filled past
 * it: every document then reads whole or absent, and a manifest whose
 * chunks were evicted is served (FORMAT) at most once. */
static pid_t lru_pid; /* stopped by the teardown, also after a failure */

static int stop_lru(void **state) {
    (void)state;
    if (lru_pid > 0) {
        kill(lru_pid, SIGKILL);
        waitpid(lru_pid, NULL, 0);
    }
    lru_pid = 0;
    return 0;
}

static void test_eviction(void **state) {
    (void)state;
    ENV_OR_SKIP(list, "LAZYATTN_TEST_REDIS_CLUSTER"); /* CI: redis-server exists */
    (void)list;
    int port = lt_free_port();
    const char *extra[] = {"--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru", NULL};
    lru_pid = lt_redis_spawn_args(port, extra);
    assert_true(lt_redis_wait(port, 5000));
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    lazyattn_store *s = open_url(url, 4096, LAZYATTN_STATUS_OK);
    enum { N_DOCS = 400 };
    const size_t size = 12 * 1024; /* 3 chunks each: 4.8 MB in all */
    for (uint64_t k = 0; k < N_DOCS; k++) lt_assert_status(put_doc(s, k, size), LAZYATTN_STATUS_OK);
    int n_ok = 0, n_absent = 0, n_half = 0;
    for (uint64_t k = 0; k < N_DOCS; k++) {
        int there = -1;
        lt_assert_status(lazyattn_store_exists(s, key_of(k), &there), LAZYATTN_STATUS_OK);
        int st = get_doc(s, k, size);
        if (there) {
            lt_assert_status(st, LAZYATTN_STATUS_OK); /* exists checked every chunk */
        }
        if (st == LAZYATTN_STATUS_OK) {
            n_ok++;
            continue;
        }
        lt_assert_status(st, LAZYATTN_STATUS_NOT_FOUND);
        n_absent++;
    }
    /* the reader's side: manifests whose chunks go, read without exists first */
    for (uint64_t k = N_DOCS; k < 2 * N_DOCS; k++)
        lt_assert_status(put_doc(s, k, size), LAZYATTN_STATUS_OK);
    for (uint64_t k = N_DOCS; k < 2 * N_DOCS; k++) {
        int st = get_doc(s, k, size);
        if (st == LAZYATTN_STATUS_FORMAT) { /* once: the next read finds it absent */
            n_half++;
            lt_assert_status(get_doc(s, k, size), LAZYATTN_STATUS_NOT_FOUND);
            int there = -1;
            lt_assert_status(lazyattn_store_exists(s, key_of(k), &there), LAZYATTN_STATUS_OK);
            assert_int_equal(there, 0);
        } else if (st != LAZYATTN_STATUS_OK)
            lt_assert_status(st, LAZYATTN_STATUS_NOT_FOUND);
    }
    print_message("eviction: %d whole, %d absent; %d half documents read once\n", n_ok, n_absent,
                  n_half);
    assert_true(n_ok > 0);
    assert_true(n_absent > 0); /* eviction did happen */
    assert_true(n_half > 0);   /* and left manifests without chunks, each served once */
    lazyattn_store_destroy(s);
}

#endif

int main(void) {
    snprintf(prefix, sizeof prefix, "lazyattn-cluster-test-%ld", (long)getpid());
    model_id = 0xC105700000000000ull ^ (uint64_t)getpid();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_forms),
#ifdef LAZYATTN_HAVE_HIREDIS
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_cluster_any_seed),
        cmocka_unit_test(test_cluster_ask),
        cmocka_unit_test_teardown(test_cluster_failover, stop_cluster),
        cmocka_unit_test_teardown(test_eviction, stop_lru),
#endif
    };
    return cmocka_run_group_tests_name("redis_cluster", tests, NULL, NULL);
}
