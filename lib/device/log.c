/* SPDX-License-Identifier: Apache-2.0 */
/* The library's log: messages to the context's log callback, else to
 * stderr up to the level LAZYATTN_LOG names. The status layer (status.c)
 * and everything above it log through lz_log; it calls nothing of lib/. */
#include "internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Without a log callback, messages up to LAZYATTN_LOG (error, warn, info or
 * debug; default error) go to stderr. */
static lazyattn_log_level lz_stderr_level(void) {
    const char *env = getenv("LAZYATTN_LOG");
    if (!env || !env[0]) return LAZYATTN_LOG_ERROR;
    if (!strcmp(env, "debug")) return LAZYATTN_LOG_DEBUG;
    if (!strcmp(env, "info")) return LAZYATTN_LOG_INFO;
    if (!strcmp(env, "warn")) return LAZYATTN_LOG_WARN;
    return LAZYATTN_LOG_ERROR;
}

void lz_log(const lazyattn_context *ctx, lazyattn_log_level level, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ctx && ctx->log)
        ctx->log(ctx->log_user, level, msg);
    else if (level <= lz_stderr_level())
        fprintf(stderr, "lazyattn: %s\n", msg);
}

void lz_log_rated(const lazyattn_context *ctx, lz_log_rate *rate, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ctx && ctx->log) {
        ctx->log(ctx->log_user, LAZYATTN_LOG_WARN, msg);
        return;
    }
    const char *env = getenv("LAZYATTN_LOG");
    if (env && env[0]) { /* asked for: each one, or none */
        if (LAZYATTN_LOG_WARN <= lz_stderr_level()) fprintf(stderr, "lazyattn: %s\n", msg);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    long long next = atomic_load(&rate->next_ms);
    if (now < next || !atomic_compare_exchange_strong(&rate->next_ms, &next,
                                                      now + LZ_LOG_RATE_S * 1000LL)) {
        atomic_fetch_add(&rate->held, 1);
        return;
    }
    long long held = atomic_exchange(&rate->held, 0);
    if (held)
        fprintf(stderr, "lazyattn: warning: %s (and %lld more like it in the last %d s)\n", msg,
                held, LZ_LOG_RATE_S);
    else
        fprintf(stderr, "lazyattn: warning: %s (the next ones of this kind counted, shown at "
                        "most every %d s; LAZYATTN_LOG=warn shows each)\n",
                msg, LZ_LOG_RATE_S);
}
