/* SPDX-License-Identifier: Apache-2.0 */
/* The load balancer of rag_bench --devices (dispatch.h). */
#include "dispatch.h"

#include "serve.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

int dispatch_write_whole(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int dispatch_read_whole(int fd, void *p, size_t n) {
    char *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static int wait_ms(double s) {
    if (!(s > 0)) return 0;
    if (s > 1.0) s = 1.0;
    return (int)ceil(s * 1e3);
}

int dispatch_send_ready(int fd) {
    int32_t m = DISPATCH_READY;
    return dispatch_write_whole(fd, &m, sizeof m);
}

int dispatch_send_done(int fd, int32_t index) { return dispatch_write_whole(fd, &index, sizeof index); }

int dispatch_send_end(int fd) {
    int32_t m = DISPATCH_END;
    return dispatch_write_whole(fd, &m, sizeof m);
}

int dispatch_receive(int fd, double wait_s, dispatch_request *out, int max, int *n, int *closed) {
    *n = 0;
    *closed = 0;
    struct pollfd p = {fd, POLLIN, 0};
    int k;
    while ((k = poll(&p, 1, wait_ms(wait_s))) < 0 && errno == EINTR) {}
    if (k < 0) {
        *closed = 1;
        return -1;
    }
    if (k == 0 || max <= 0) return 0;
    ssize_t got;
    while ((got = read(fd, out, (size_t)max * sizeof *out)) < 0 && errno == EINTR) {}
    if (got < 0) {
        *closed = 1;
        return -1;
    }
    if (got == 0) {
        *closed = 1;
        return 0;
    }
    /* whole messages were written at once; a read may still end inside one */
    size_t rest = (size_t)got % sizeof *out;
    if (rest && dispatch_read_whole(fd, (char *)out + got, sizeof *out - rest)) {
        *closed = 1;
        return -1;
    }
    *n = (int)(((size_t)got + sizeof *out - 1) / sizeof *out);
    return 0;
}

typedef struct dispatcher {
    const dispatch_config *c;
    dispatch_result *r;
    int outstanding[DISPATCH_MAX_WORKERS];
    int total_outstanding;
    int next; /* round robin's (and ties') next process */
    double last_finish;
} dispatcher;

static void lose(dispatcher *d, int w) {
    if (d->r->lost[w]) return;
    d->r->lost[w] = 1;
    d->total_outstanding -= d->outstanding[w];
    d->outstanding[w] = 0;
}

/* Reads the completions there within wait_s seconds. Only processes with
 * requests outstanding are read, at most those: what a process writes after
 * its last completion stays in its pipe. */
static void collect(dispatcher *d, double wait_s) {
    const dispatch_config *c = d->c;
    struct pollfd p[DISPATCH_MAX_WORKERS];
    int who[DISPATCH_MAX_WORKERS], np = 0;
    for (int w = 0; w < c->n_workers; w++)
        if (!d->r->lost[w] && d->outstanding[w] > 0) {
            p[np] = (struct pollfd){c->from_worker[w], POLLIN, 0};
            who[np++] = w;
        }
    if (np == 0) {
        if (wait_s > 0) {
            struct pollfd none;
            poll(&none, 0, wait_ms(wait_s)); /* only time passes */
        }
        return;
    }
    int k;
    while ((k = poll(p, (nfds_t)np, wait_ms(wait_s))) < 0 && errno == EINTR) {}
    if (k <= 0) return;
    for (int i = 0; i < np; i++) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        int w = who[i];
        int32_t done[256];
        int want = d->outstanding[w] < 256 ? d->outstanding[w] : 256;
        ssize_t got;
        while ((got = read(p[i].fd, done, (size_t)want * sizeof done[0])) < 0 && errno == EINTR) {}
        size_t rest = got > 0 ? (size_t)got % sizeof done[0] : 0;
        if (got <= 0 || (rest && dispatch_read_whole(p[i].fd, (char *)done + got, sizeof done[0] - rest))) {
            lose(d, w);
            continue;
        }
        int m = (int)(((size_t)got + sizeof done[0] - 1) / sizeof done[0]);
        for (int j = 0; j < m; j++)
            if (done[j] < 0) { /* only indices come after READY */
                lose(d, w);
                break;
            }
        if (d->r->lost[w]) continue;
        d->outstanding[w] -= m;
        d->total_outstanding -= m;
        d->r->finished[w] += m;
        d->last_finish = serve_now();
    }
}

/* The process for the next request, or -1 when every one is lost. */
static int pick(dispatcher *d) {
    const dispatch_config *c = d->c;
    int best = -1;
    for (int i = 0; i < c->n_workers; i++) {
        int w = (d->next + i) % c->n_workers;
        if (d->r->lost[w]) continue;
        if (c->balance == DISPATCH_ROUND_ROBIN) return w;
        if (best < 0 || d->outstanding[w] < d->outstanding[best]) best = w;
    }
    return best;
}

int dispatch_run(const dispatch_config *c, dispatch_result *r) {
    memset(r, 0, sizeof *r);
    if (!c || c->n_workers < 1 || c->n_workers > DISPATCH_MAX_WORKERS || !c->to_worker ||
        !c->from_worker || c->count < 0 || c->first < 0 || (!c->arrivals && c->concurrency < 1))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "dispatch_run: bad configuration");
    struct sigaction ignore, old;
    memset(&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &old);
    dispatcher d;
    memset(&d, 0, sizeof d);
    d.c = c;
    d.r = r;
    for (int w = 0; w < c->n_workers; w++) {
        int32_t m = 0;
        if (dispatch_read_whole(c->from_worker[w], &m, sizeof m) || m != DISPATCH_READY) r->lost[w] = 1;
    }
    double t0 = serve_now();
    d.last_finish = t0;
    for (int i = 0; i < c->count;) {
        double now = serve_now();
        if (c->run_seconds > 0 && now - t0 > c->run_seconds) break;
        int due = c->arrivals ? t0 + c->arrivals[i] <= now : d.total_outstanding < c->concurrency;
        if (due) {
            int w = pick(&d);
            if (w < 0) break; /* every process lost */
            dispatch_request m = {c->first + i, 0, now};
            if (dispatch_write_whole(c->to_worker[w], &m, sizeof m)) {
                lose(&d, w);
                continue;
            }
            d.next = (w + 1) % c->n_workers;
            d.outstanding[w]++;
            d.total_outstanding++;
            if (d.outstanding[w] > r->most_outstanding[w]) r->most_outstanding[w] = d.outstanding[w];
            r->sent[w]++;
            r->n_sent++;
            i++;
            collect(&d, 0);
            continue;
        }
        collect(&d, c->arrivals ? t0 + c->arrivals[i] - now : 1.0);
    }
    for (int w = 0; w < c->n_workers; w++) close(c->to_worker[w]);
    while (d.total_outstanding > 0) collect(&d, 1.0);
    r->wall_s = d.last_finish - t0;
    sigaction(SIGPIPE, &old, NULL);
    return 0;
}
