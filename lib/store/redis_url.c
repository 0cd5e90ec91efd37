/* SPDX-License-Identifier: Apache-2.0 */
/* Redis URLs (redis_url.h): redis://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...],
 * an IPv6 host in brackets, user and password percent-encoded where they
 * hold ':', '@', ',' or '%'. */
#include "store/redis_url.h"

#include <stdlib.h>
#include <string.h>

void lz_redis_url_free(lz_redis_url *u) {
    if (!u) return;
    for (int i = 0; i < u->n_seeds; i++) free(u->hosts[i]);
    free(u->hosts);
    free(u->ports);
    free(u->user);
    free(u->password);
    memset(u, 0, sizeof *u);
}

static int lz_hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* text[0..n) percent-decoded into a new string: OK, INVALID_ARGUMENT, OOM. */
static int lz_url_decode(const char *text, size_t n, char **out, const char *who,
                         const char *what) {
    char *s = malloc(n + 1);
    if (!s) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: the URL's %s", who, what);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (text[i] != '%') {
            s[k++] = text[i];
            continue;
        }
        int hi = i + 2 < n ? lz_hex_digit(text[i + 1]) : -1;
        int lo = i + 2 < n ? lz_hex_digit(text[i + 2]) : -1;
        if (hi >= 0 && lo >= 0 && (hi | lo) != 0) {
            s[k++] = (char)(hi * 16 + lo);
            i += 2;
            continue;
        }
        free(s);
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "%s: the URL's %s has a '%%' not followed by two hex digits (nor %%00)",
                       who, what);
    }
    s[k] = '\0';
    *out = s;
    return LAZYATTN_STATUS_OK;
}

/* One seed, HOST:PORT or [IPV6]:PORT, text[0..n), appended to u. */
static int lz_url_seed(const char *text, size_t n, lz_redis_url *u, const char *who) {
    const char *h = text, *colon;
    size_t hn;
    if (n && text[0] == '[') {
        const char *close = memchr(text, ']', n);
        h = text + 1;
        hn = close ? (size_t)(close - h) : 0;
        colon = close && close + 1 < text + n && close[1] == ':' ? close + 1 : NULL;
    } else {
        colon = memchr(text, ':', n);
        hn = colon ? (size_t)(colon - text) : 0;
        if (colon && memchr(colon + 1, ':', n - (size_t)(colon + 1 - text)))
            return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                           "%s: '%.*s': an IPv6 address goes in brackets: [ADDRESS]:PORT", who,
                           (int)n, text);
    }
    if (!colon || hn == 0 || hn > 255 || memchr(h, '[', hn) || memchr(h, ']', hn) ||
        memchr(h, '@', hn) || memchr(h, '/', hn))
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "%s: '%.*s': expected HOST:PORT or [IPV6]:PORT", who, (int)n, text);
    const char *p = colon + 1;
    size_t pn = n - (size_t)(p - text), digits = 0;
    long port = 0;
    while (digits < pn && digits < 6 && p[digits] >= '0' && p[digits] <= '9')
        port = port * 10 + (p[digits++] - '0');
    if (digits == 0 || digits != pn || port < 1 || port > 65535)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "%s: '%.*s': the port must be 1..65535 (digits only)", who, (int)n, text);
    if (u->n_seeds == LZ_REDIS_MAX_SEEDS)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: more than %d seeds in the URL", who,
                       LZ_REDIS_MAX_SEEDS);
    char *host = strndup(h, hn);
    if (!host) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: a seed", who);
    u->hosts[u->n_seeds] = host;
    u->ports[u->n_seeds++] = (int)port;
    return LAZYATTN_STATUS_OK;
}

int lz_redis_url_parse(const char *url, lz_redis_url *u, const char *who) {
    memset(u, 0, sizeof *u);
    if (strncmp(url, "rediss://", 9) == 0)
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                       "%s: rediss:// (TLS) is not supported: the hiredis this library is built "
                       "with has no TLS; run a local TLS terminator (stunnel, haproxy, spiped) "
                       "and give its plain redis://127.0.0.1:PORT (README, \"Deploying the "
                       "Redis tier\")",
                       who);
    if (strncmp(url, "redis://", 8) != 0)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "%s: expected redis://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...] (the URL "
                       "is not repeated here: it may hold a password)",
                       who);
    const char *rest = url + 8;
    const char *at = strrchr(rest, '@');
    u->hosts = calloc(LZ_REDIS_MAX_SEEDS, sizeof *u->hosts);
    u->ports = calloc(LZ_REDIS_MAX_SEEDS, sizeof *u->ports);
    int st = u->hosts && u->ports ? LAZYATTN_STATUS_OK
                                  : lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: seeds", who);
    if (!st && at) {
        /* USER, USER:PASSWORD or :PASSWORD; an empty user is the default one; a
         * user without a password takes the config's */
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        size_t un = colon ? (size_t)(colon - rest) : (size_t)(at - rest);
        if (un) st = lz_url_decode(rest, un, &u->user, who, "user");
        if (!st && colon) st = lz_url_decode(colon + 1, (size_t)(at - colon - 1), &u->password,
                                             who, "password");
        if (!st && u->password && !u->password[0])
            st = lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: the URL's password is empty", who);
        rest = at + 1;
    }
    while (!st) {
        const char *comma = strchr(rest, ',');
        size_t n = comma ? (size_t)(comma - rest) : strlen(rest);
        st = lz_url_seed(rest, n, u, who);
        if (!comma) break;
        rest = comma + 1;
    }
    if (st) lz_redis_url_free(u);
    return st;
}
