/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A load balancer in front of serving processes (rag_bench --devices): the
 * requests of one workload, as they arrive, each sent to one process
 * through its pipe, and the processes' completions read back, so that
 * "least outstanding requests" sees the load as it is.
 *
 * Messages. Parent to process: dispatch_request (a workload request index
 * and its arrival, serve_now() seconds; the parent closing the pipe says
 * no more come). Process to parent: an int32, DISPATCH_READY once when its
 * setup is done, then the index of each request it has finished (served or
 * refused); after the last of them the process may write anything else on
 * the same pipe, DISPATCH_END first (rag_bench: then its summary), which
 * the dispatcher never reads (reading at most the completions it awaits, it
 * takes a process whose DISPATCH_END comes early, one that failed, as lost).
 * Every message is shorter than PIPE_BUF: written whole.
 */
#ifndef LAZYATTN_SERVE_DISPATCH_H
#define LAZYATTN_SERVE_DISPATCH_H

#include <stdint.h>

#define DISPATCH_MAX_WORKERS 64
#define DISPATCH_READY (-1)
#define DISPATCH_END (-2)

#include <stddef.h>

/* Writes / reads exactly n bytes on a pipe (or any fd), retrying after
 * EINTR: 0, or -1 on an error or end of file first. */
int dispatch_write_whole(int fd, const void *p, size_t n);
int dispatch_read_whole(int fd, void *p, size_t n);

typedef enum dispatch_balance {
    DISPATCH_LEAST = 0,       /* to the process with the fewest requests outstanding */
    DISPATCH_ROUND_ROBIN = 1, /* to each process in turn, by arrival */
} dispatch_balance;

typedef struct dispatch_request {
    int32_t index;  /* the workload's request */
    int32_t unused; /* 0 */
    double arrival; /* serve_now() when it arrived at the dispatcher */
} dispatch_request;

typedef struct dispatch_config {
    int n_workers;          /* 1..DISPATCH_MAX_WORKERS */
    const int *to_worker;   /* [n_workers] pipes' write ends: closed by dispatch_run */
    const int *from_worker; /* [n_workers] pipes' read ends: left open */
    int first, count;       /* requests first .. first + count - 1, arriving in that order */
    const double *arrivals; /* [count] seconds after the start (Poisson), or NULL: a closed
                             * loop of `concurrency` clients, each sending its next request
                             * when its last one has finished */
    int concurrency;
    dispatch_balance balance;
    double run_seconds;     /* > 0: no request sent after this long (the rest: cut) */
} dispatch_config;

typedef struct dispatch_result {
    int sent[DISPATCH_MAX_WORKERS];     /* requests sent to each process */
    int finished[DISPATCH_MAX_WORKERS]; /* their completions read back */
    int lost[DISPATCH_MAX_WORKERS];     /* 1: the process went away (or was never ready) */
    int most_outstanding[DISPATCH_MAX_WORKERS];
    int n_sent;    /* < count: cut by run_seconds, or every process lost */
    double wall_s; /* the first request's dispatch to the last completion */
} dispatch_result;

/*
 * Waits for every process's DISPATCH_READY, then sends the requests as they
 * arrive to the process the balance picks (never a lost one), reads the
 * completions, closes every to_worker pipe once all are sent and returns
 * when every request sent has finished or its process is lost. A lost
 * process is not an error here (r->lost); SIGPIPE is ignored meanwhile.
 * Returns LAZYATTN_STATUS_INVALID_ARGUMENT for a bad config, else 0.
 */
int dispatch_run(const dispatch_config *c, dispatch_result *r);

/* The process's side: DISPATCH_READY, a finished request, DISPATCH_END.
 * 0, or -1 (the parent gone). */
int dispatch_send_ready(int fd);
int dispatch_send_done(int fd, int32_t index);
int dispatch_send_end(int fd);

/*
 * The process's side: waits up to wait_s seconds (0: not at all) for
 * requests and reads those there, max at most, into out (*n of them);
 * *closed = 1 once the parent has closed the pipe and none is left.
 * Returns 0, or -1 on a read error or a malformed message (then *closed = 1).
 */
int dispatch_receive(int fd, double wait_s, dispatch_request *out, int max, int *n, int *closed);

#endif
