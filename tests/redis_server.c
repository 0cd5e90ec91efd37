/* SPDX-License-Identifier: Apache-2.0 */
/* Redis for the store and tier tests (redis_server.h). */
#include "redis_server.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int lt_redis_target(char *host, size_t n, int *port) {
    const char *t = getenv("LAZYATTN_TEST_REDIS");
    if (!t || !*t) return 0;
    const char *colon = strrchr(t, ':');
    if (!colon || (size_t)(colon - t) >= n) return 0;
    memcpy(host, t, (size_t)(colon - t));
    host[colon - t] = '\0';
    *port = atoi(colon + 1);
    return *port > 0;
}

/* Binds 127.0.0.1:port (0: any) and closes it: the port bound, or 0. */
static int lt_try_port(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    socklen_t len = sizeof a;
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
             getsockname(fd, (struct sockaddr *)&a, &len) == 0;
    close(fd);
    return ok ? ntohs(a.sin_port) : 0;
}

int lt_free_port(void) {
    int port = lt_try_port(0);
    assert_true(port > 0);
    return port;
}

/* A free port whose cluster bus port (+10000) is free too. */
static int lt_free_cluster_port(void) {
    for (int i = 0; i < 1000; i++) {
        int port = lt_free_port();
        if (port <= 55535 && lt_try_port(port + 10000)) return port;
    }
    fail_msg("no free port for a cluster node");
    return 0;
}

pid_t lt_redis_spawn(int port) { return lt_redis_spawn_args(port, NULL); }

pid_t lt_redis_spawn_args(int port, const char *const *extra) {
    char port_text[16];
    snprintf(port_text, sizeof port_text, "%d", port);
    const char *argv[40] = {"redis-server", "--port",   port_text, "--bind",     "127.0.0.1",
                            "--save",       "",         "--appendonly", "no", "--loglevel",
                            "warning",      "--logfile", "/dev/null"};
    int n = 13;
    for (int i = 0; extra && extra[i]; i++) {
        assert_true(n < 39);
        argv[n++] = extra[i];
    }
    argv[n] = NULL;
    /* its output away from the test's (a server left running by a failed
     * test must not hold the test runner's pipe open) */
    posix_spawn_file_actions_t fa;
    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    assert_int_equal(posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0), 0);
    assert_int_equal(posix_spawn_file_actions_adddup2(&fa, 1, 2), 0);
    pid_t pid;
    fflush(NULL);
    assert_int_equal(posix_spawnp(&pid, "redis-server", &fa, NULL, (char *const *)argv, environ),
                     0);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

/* The reply of `redis-cli -p port ARGS...` (its first len - 1 bytes), or "" */
static void lt_cli(int port, const char *const *args, char *out, size_t len) {
    char port_text[16], cmd[512];
    snprintf(port_text, sizeof port_text, "%d", port);
    int k = snprintf(cmd, sizeof cmd, "redis-cli -p %s", port_text);
    for (int i = 0; args[i]; i++) k += snprintf(cmd + k, sizeof cmd - (size_t)k, " %s", args[i]);
    snprintf(cmd + k, sizeof cmd - (size_t)k, " 2>/dev/null");
    out[0] = '\0';
    fflush(NULL);
    FILE *f = popen(cmd, "r");
    if (!f) return;
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    pclose(f);
}

int lt_redis_wait(int port, int timeout_ms) {
    const char *ping[] = {"ping", NULL};
    char out[64];
    for (int t = 0; t < timeout_ms; t += 50) {
        lt_cli(port, ping, out, sizeof out);
        if (strncmp(out, "PONG", 4) == 0) return 1;
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    }
    return 0;
}

void lt_cluster_node_start(lt_cluster *c, int i) {
    char conf[96];
    snprintf(conf, sizeof conf, "nodes-%d.conf", c->ports[i]);
    const char *extra[] = {"--cluster-enabled", "yes", "--cluster-config-file", conf,
                           "--cluster-node-timeout", "1000", "--dir", c->dir,
                           "--repl-diskless-sync-delay", "0", NULL};
    c->pids[i] = lt_redis_spawn_args(c->ports[i], extra);
    assert_true(lt_redis_wait(c->ports[i], 5000));
}

int lt_cluster_wait_ok(const lt_cluster *c, int timeout_ms) {
    const char *info[] = {"cluster", "info", NULL}, *repl[] = {"info", "replication", NULL};
    char out[2048];
    for (int t = 0; t < timeout_ms; t += 100) {
        int ok = 1;
        for (int i = 0; i < LT_CLUSTER_NODES && ok; i++) {
            if (!c->pids[i]) continue;
            lt_cli(c->ports[i], info, out, sizeof out);
            ok = strstr(out, "cluster_state:ok") != NULL;
            /* a replica can take over only once it has synchronised */
            lt_cli(c->ports[i], repl, out, sizeof out);
            if (ok && strstr(out, "role:slave")) ok = strstr(out, "master_link_status:up") != NULL;
        }
        if (ok) return 1;
        nanosleep(&(struct timespec){0, 100 * 1000000L}, NULL);
    }
    return 0;
}

void lt_cluster_start(lt_cluster *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "/tmp/lazyattn-cluster-XXXXXX");
    assert_non_null(mkdtemp(c->dir));
    for (int i = 0; i < LT_CLUSTER_NODES; i++) {
        c->ports[i] = lt_free_cluster_port();
        for (int j = 0; j < i; j++) /* a port handed out twice, or a bus port: another */
            if (abs(c->ports[j] - c->ports[i]) % 10000 == 0)
                c->ports[i] = lt_free_cluster_port(), j = -1;
        lt_cluster_node_start(c, i);
    }
    char cmd[512];
    int k = snprintf(cmd, sizeof cmd, "redis-cli --cluster create");
    for (int i = 0; i < LT_CLUSTER_NODES; i++)
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, " 127.0.0.1:%d", c->ports[i]);
    snprintf(cmd + k, sizeof cmd - (size_t)k, " --cluster-replicas 1 --cluster-yes >/dev/null 2>&1");
    fflush(NULL);
    assert_int_equal(system(cmd), 0);
    assert_true(lt_cluster_wait_ok(c, 10000));
}

void lt_cluster_stop(lt_cluster *c) {
    for (int i = 0; i < LT_CLUSTER_NODES; i++)
        if (c->pids[i]) {
            kill(c->pids[i], SIGKILL);
            waitpid(c->pids[i], NULL, 0);
            c->pids[i] = 0;
        }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
    if (c->dir[0]) assert_int_equal(system(cmd), 0);
}
