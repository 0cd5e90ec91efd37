/* SPDX-License-Identifier: Apache-2.0 */
/* Redis for the store and tier tests (redis_server.h). */
#include "redis_server.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>

#include <cmocka.h>

#include <netinet/in.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

int lt_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

pid_t lt_redis_spawn(int port) {
    char port_text[16];
    snprintf(port_text, sizeof port_text, "%d", port);
    char *argv[] = {"redis-server", "--port", port_text, "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--loglevel", "warning", "--logfile", "/dev/null", NULL};
    pid_t pid;
    fflush(NULL);
    assert_int_equal(posix_spawnp(&pid, "redis-server", NULL, NULL, argv, environ), 0);
    return pid;
}
