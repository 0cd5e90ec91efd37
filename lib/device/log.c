/* SPDX-License-Identifier: Apache-2.0 */
/* The library's log: messages to the context's log callback, else to
 * stderr up to the level LAZYATTN_LOG names. The status layer (status.c)
 * and everything above it log through lz_log; it calls nothing of lib/. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Without a log callback, messages up to LAZYATTN_LOG (error, warn, info or
 * debug; default error) go to stderr. */
static lazyattn_log_level lz_stderr_level(void) {
    const char *env = getenv("LAZYATTN_LOG");
    if (!env) return LAZYATTN_LOG_ERROR;
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
