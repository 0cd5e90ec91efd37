/* SPDX-License-Identifier: Apache-2.0 */
/* LAZYATTN_TUNE: the one environment override of the kernels' tuning
 * (README, "Environment"), "key=value" settings separated by commas, e.g.
 * LAZYATTN_TUNE="nv.wgmma=0,nv.warps=8,portable.exact_exp=1". Parsed
 * strictly: a setting with an unknown key or a bad value is ignored with a
 * warning that names it; the others apply. */
#include "internal.h"
#include "prefill_order.h"
#include "tuning.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An integer key: where its value goes and its range. */
typedef struct lz_tune_int_key {
    const char *key;
    size_t offset; /* of the int in lz_tune_override */
    int lo, hi;
} lz_tune_int_key;

#define LZ_TUNE_INT(key, field, lo, hi) {key, offsetof(lz_tune_override, field), lo, hi}
static const lz_tune_int_key lz_tune_int_keys[] = {
    LZ_TUNE_INT("nv.wgmma", nv.wgmma, 0, 1),
    LZ_TUNE_INT("nv.kt", nv.kt, 16, 256),
    LZ_TUNE_INT("nv.warps", nv.warps, 1, 32),
    LZ_TUNE_INT("nv.maxreg", nv.maxreg, 0, 255),
    LZ_TUNE_INT("nv.producer", nv.producer, 0, 1),
    LZ_TUNE_INT("nv.persist", nv.persist, 0, 1),
    LZ_TUNE_INT("nv.dstages", nv.dstages, 2, 6),
    LZ_TUNE_INT("nv.waves", nv.waves, 1, 1024),
    LZ_TUNE_INT("nv.dsplit", nv.dsplit, 1, 1024),
    LZ_TUNE_INT("nv.verbose", nv_verbose, 0, 1),
    LZ_TUNE_INT("nv.decode_times", nv_decode_times, 0, 1),
    LZ_TUNE_INT("portable.exact_exp", exact_exp, 0, 1),
    LZ_TUNE_INT("portable.prefill_maxreg", prefill_maxreg, 0, 255),
    LZ_TUNE_INT("portable.decode_maxreg", decode_maxreg, 0, 255),
    LZ_TUNE_INT("serve.fused_decode", serve_fused_decode, 0, 1),
    LZ_TUNE_INT("serve.gemv_q8", serve_gemv_q8, 0, 1),
    LZ_TUNE_INT("tier.pin_loads", tier_pin_loads, 0, 1),
    LZ_TUNE_INT("tier.pin_writes", tier_pin_writes, 0, 1),
    LZ_TUNE_INT("tier.load_threads", tier_load_threads, 1, 16),
    LZ_TUNE_INT("tier.pin_store", tier_pin_store, 0, 1),
};

static const struct {
    const char *name;
    int order;
} lz_tune_orders[] = {{"none", LZ_NV_ORDER_NONE},
                      {"auto", LZ_ORDER_AUTO},
                      {"heads", LZ_ORDER_HEADS},
                      {"lpt", LZ_ORDER_LPT},
                      {"balanced", LZ_ORDER_BALANCED}};

/* The whole of s (n bytes) as a decimal int in lo..hi. */
static int lz_tune_int(const char *s, size_t n, int lo, int hi, int *out) {
    char buf[16];
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    const long v = strtol(buf, &end, 10);
    if (errno || *end || end == buf || buf[0] == ' ' || buf[0] == '+' || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

/* One setting s (n bytes, "key=value"); 0 when it is ignored. */
static int lz_tune_one(const char *s, size_t n, lz_tune_override *out) {
    const char *eq = memchr(s, '=', n);
    if (!eq) return 0;
    const size_t kn = (size_t)(eq - s), vn = n - kn - 1;
    const char *v = eq + 1;
    for (size_t i = 0; i < sizeof lz_tune_int_keys / sizeof *lz_tune_int_keys; i++) {
        const lz_tune_int_key *k = &lz_tune_int_keys[i];
        if (strlen(k->key) == kn && !memcmp(k->key, s, kn))
            return lz_tune_int(v, vn, k->lo, k->hi, (int *)((char *)out + k->offset));
    }
    if (kn == 8 && !memcmp(s, "nv.order", 8)) {
        for (size_t i = 0; i < sizeof lz_tune_orders / sizeof *lz_tune_orders; i++)
            if (strlen(lz_tune_orders[i].name) == vn && !memcmp(lz_tune_orders[i].name, v, vn)) {
                out->nv.order = lz_tune_orders[i].order;
                return 1;
            }
        return 0;
    }
    if (kn == 11 && !memcmp(s, "nv.dump_ptx", 11)) {
        if (vn == 0 || vn >= sizeof out->dump_ptx) return 0;
        memcpy(out->dump_ptx, v, vn);
        out->dump_ptx[vn] = '\0';
        return 1;
    }
    return 0;
}

int lz_tune_parse(const char *text, lz_tune_override *out, void (*warn)(void *user, const char *message),
                  void *user) {
    memset(out, 0xff, sizeof *out); /* every int -1: unset */
    out->dump_ptx[0] = '\0';
    int ignored = 0;
    for (const char *s = text; s && *s;) {
        const char *comma = strchr(s, ',');
        const size_t n = comma ? (size_t)(comma - s) : strlen(s);
        if (!lz_tune_one(s, n, out)) {
            ignored++;
            if (warn) {
                char msg[200];
                snprintf(msg, sizeof msg, "LAZYATTN_TUNE: \"%.*s\" ignored (unknown key or bad value)",
                         n > 120 ? 120 : (int)n, s);
                warn(user, msg);
            }
        }
        s = comma ? comma + 1 : s + n;
    }
    return ignored;
}

static void lz_tune_warn_log(void *ctx, const char *message) {
    lz_log((const lazyattn_context *)ctx, LAZYATTN_LOG_WARN, "%s", message);
}

void lz_tune_from_env(const lazyattn_context *ctx, lz_tune_override *out) {
    lz_tune_parse(getenv("LAZYATTN_TUNE"), out, ctx ? lz_tune_warn_log : NULL, (void *)ctx);
}
