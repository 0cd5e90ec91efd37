/* SPDX-License-Identifier: Apache-2.0 */
/* The tier: a document store behind a LAZY cache. lazyattn_cache_set_tier
 * hangs it on the cache (lz_tier_ops): the planner asks it for every
 * document the GPU cache misses (lz_tier_load, from
 * lazyattn_request_create); the cache writes to it on eviction or at
 * commit (lz_tier_write). Everything read is checked before it enters the
 * GPU cache (the key against the export's header, then import's own
 * checks: format, checksums, identity); any failure is a recompute. */
#include "attn/tuning.h"
#include "cache/cache_policy.h"
#include "store/pinned_arena.h"
#include "store/store_internal.h"
#include "store/tier_lease.h"
#include "store/tier_loader.h"
#include "store/tier_staging.h"
#include "store/tier_writer.h"

#include <stdlib.h>
#include <string.h>
#if !defined(_WIN32)
#include <unistd.h>
#endif

/* Documents whose background load failed, remembered so that the plan
 * made again recomputes them instead of failing the same way. */
#define LZ_TIER_REFUSED 32

/* A pipelined upload in flight: what it reads, given back once it ended. */
typedef struct lz_tier_upload {
    cl_event done;              /* complete once every layer is in place */
    uint64_t doc_hash, load_id; /* its entry (lz_cache_find_loaded) */
    lazyattn_store_value value; /* the store's value (value.data NULL: none) ... */
    uint8_t *copy;              /* ... or the tier's copy of it */
    void *keep;                 /* the import's reorder buffer (TILED), or NULL */
    int slot;                   /* the staging slot the value or copy is in (-1: none) */
} lz_tier_upload;

/* The tier's state, the cache's lz_cache_tier_state: its background
 * writer, its pipelined uploads and the cost rule's measurements (serving
 * thread only). */
typedef struct lz_tier {
    lazyattn_cache *cache;
    lazyattn_store *store;
    lz_tier_writer *writer;  /* NULL: writes on the calling thread */
    double recompute_rate;   /* document tokens per second; 0: always load */
    double assumed_load_rate; /* bytes a second until loads are measured; 0: none */
    double load_bytes;       /* bytes loaded so far ... */
    double load_seconds;     /* ... and the time their gets and uploads took */
    int64_t skipped_by_cost; /* counter, reset with the cache's */
    int64_t writes_skipped_by_cost; /* the same, of writes */
    /* pipelined loads (LAZYATTN_TIER_LOAD_PIPELINED) */
    cl_command_queue copy_queue; /* NULL: loads are synchronous */
    lz_tier_staging staging;     /* pinned memory the uploads read from, where they can */
    lz_tier_upload *uploads;     /* [cap_uploads], n_uploads in flight */
    int n_uploads, cap_uploads;
    uint64_t next_load_id;
    cl_event gate;               /* tests: uploads start after it (lz_tier_hold_uploads) */
    cl_int fault;                /* tests: uploads ended are taken to have failed with it
                                    (lz_tier_fail_uploads; 0: none) */
    int64_t pipelined, failures, sealed; /* counters, reset with the cache's */
    /* background loads (LAZYATTN_TIER_LOAD_BACKGROUND) */
    lz_tier_loader *loader;      /* NULL: the serving thread loads */
    int64_t background, waits;   /* counters, reset with the cache's */
    uint8_t refused[LZ_TIER_REFUSED][32]; /* documents whose load failed: recomputed by the
                                             next plan, not asked of the tier (a ring) */
    int n_refused, next_refused;
} lz_tier;

static int lz_tier_load(lazyattn_cache *c, lazyattn_store *store, const uint8_t digest[32],
                        const int32_t *tokens, int n_tokens, lz_tally *t);
static void lz_tier_write(lazyattn_cache *c, lazyattn_store *store, lz_entry *e);
static int lz_tier_track(lazyattn_cache *c, lz_tier *tier, lz_upload *up,
                         const lazyattn_store_value *v, uint8_t *copy, int slot);

static int lz_tier_settle(lazyattn_cache *c);
static void lz_tier_settle_all(lz_tier *tier, int wait);
static int lz_tier_await(lazyattn_cache *c, uint64_t load_id, int for_plan);
static void lz_tier_settle_loads(lz_tier *tier, uint64_t wait_for);

static void lz_tier_stats(void *state, lazyattn_cache_stats *s) {
    lz_tier *tier = state;
    if (tier->writer) lz_tier_writer_stats(tier->writer, s);
    if (s) {
        s->tier_skipped_by_cost += tier->skipped_by_cost;
        s->tier_writes_skipped_by_cost += tier->writes_skipped_by_cost;
        s->tier_loads_pipelined += tier->pipelined;
        s->tier_load_failures += tier->failures;
        s->tier_loads_pending += tier->n_uploads;
        s->tier_loads_sealed += tier->sealed;
        s->tier_loads_background += tier->background;
        s->tier_load_waits += tier->waits;
        if (tier->loader) s->tier_loads_pending += lz_tier_loader_pending(tier->loader);
    } else {
        tier->skipped_by_cost = tier->pipelined = tier->failures = tier->sealed = 0;
        tier->writes_skipped_by_cost = 0;
        tier->background = tier->waits = 0;
    }
}

static void lz_tier_detach(void *state, lazyattn_cache_stats *into) {
    lz_tier *tier = state;
    /* the loader ends first (its queued loads dropped, their documents
       discarded), then the uploads in flight: they read the values given back */
    if (tier->loader) {
        lz_tier_loader_stop(tier->loader);
        lz_tier_settle_loads(tier, 0);
        lz_tier_loader_destroy(tier->loader);
        tier->loader = NULL;
    }
    lz_tier_settle_all(tier, 1);
    if (tier->writer) lz_tier_writer_destroy(tier->writer, into);
    into->tier_skipped_by_cost += tier->skipped_by_cost;
    into->tier_writes_skipped_by_cost += tier->writes_skipped_by_cost;
    into->tier_loads_pipelined += tier->pipelined;
    into->tier_load_failures += tier->failures;
    into->tier_loads_sealed += tier->sealed;
    into->tier_loads_background += tier->background;
    into->tier_load_waits += tier->waits;
    if (tier->gate) clReleaseEvent(tier->gate);
    if (tier->copy_queue) {
        lz_staging_free(&tier->staging);
        clReleaseCommandQueue(tier->copy_queue);
    }
    free(tier->uploads);
    free(tier);
}

static const lz_tier_ops lz_tier_of_store = {lz_tier_load, lz_tier_write, lz_tier_stats,
                                             lz_tier_detach, lz_tier_lease_abandon,
                                             lz_tier_settle, lz_tier_await};

/* One warning a kind, rate-limited (lz_log_rated): the store failed, its
 * value was refused, a write failed. */
static lz_log_rate lz_rate_load_error, lz_rate_load_refused, lz_rate_write_error;

/* Bytes of the host's physical memory, 0 when not known. */
static uint64_t lz_host_memory_bytes(void) {
#if !defined(_WIN32)
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) return (uint64_t)pages * (uint64_t)page;
#endif
    return 0;
}

/* A host store tier on a device with memory of its own keeps its values in
 * pinned memory of the store's budget (pinned_arena.h), made here once:
 * writes read back into it and loads upload from it, DMAs with no host
 * copy. LAZYATTN_TUNE's tier.pin_store (by default on such a device). At
 * most half the host's memory is pinned (pinned pages never swap); when
 * the budget is larger or the device pins less, the rest of the values
 * stay pageable (logged); the tier works either way. */
static void lz_tier_pin_store(lazyattn_context *ctx, lazyattn_store *store, const char *w) {
    uint64_t budget = lz_store_host_budget_bytes(store);
    if (budget == 0 || lz_store_has_arena(store, NULL)) return; /* one arena a store */
    uint64_t half = lz_host_memory_bytes() / 2;
    uint64_t want = half > 0 && budget > half ? half : budget;
    lz_tune_override ov;
    lz_tune_from_env(ctx, &ov);
    if (!(ov.tier_pin_store >= 0 ? ov.tier_pin_store : ctx->own_memory)) return;
    double t0 = lz_seconds_now();
    lz_pinned_arena *a = NULL;
    if (lz_arena_create(ctx, want, &a)) {
        lz_log(ctx, LAZYATTN_LOG_WARN, "%s: the host store's values stay in pageable memory: %s",
               w, lazyattn_last_error());
        return;
    }
    lz_store_use_arena(store, a);
    lz_log(ctx, LAZYATTN_LOG_INFO,
           "%s: %.2f GiB of pinned memory for the host store's values (budget %.2f GiB), "
           "made in %.2f s", w, (double)lz_arena_bytes(a) / (1u << 30),
           (double)budget / (1u << 30), lz_seconds_now() - t0);
    lz_arena_release(a); /* the store's now */
}

static int lz_set_tier(lazyattn_cache *c, lazyattn_store *store, lazyattn_tier_mode mode,
                       const lazyattn_tier_options *o, const char *w) {
    LZ_CHECK_ARG(mode == LAZYATTN_TIER_READ_ONLY || mode == LAZYATTN_TIER_WRITE_BACK ||
                     mode == LAZYATTN_TIER_WRITE_THROUGH,
                 "%s: unknown mode %d", w, (int)mode);
    LZ_CHECK_ARG(o->write_queue >= 0 && o->write_queue <= LAZYATTN_MAX_TIER_WRITE_QUEUE,
                 "%s: write_queue %d outside 0..%d", w, o->write_queue,
                 LAZYATTN_MAX_TIER_WRITE_QUEUE);
    LZ_CHECK_ARG(o->load == LAZYATTN_TIER_LOAD_SYNC || o->load == LAZYATTN_TIER_LOAD_PIPELINED ||
                     o->load == LAZYATTN_TIER_LOAD_BACKGROUND,
                 "%s: unknown load %d", w, (int)o->load);
    if (store && !lazyattn_store_name(store))
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: not a live store", w);
    if (store && !lz_cache_policy(c)->tiered)
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                       "%s: only a LAZY cache has a tier (its documents are position-independent "
                       "and exportable); this cache is %s",
                       w, lazyattn_cache_policy_name(lz_cache_policy(c)->id));
    if (store && !lz_pool_context(lz_cache_pool(c)))
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                       "%s: the pool keeps accounting only: there is no K/V to load or store", w);
    lz_tier *tier = NULL;
    if (store && !(tier = calloc(1, sizeof *tier)))
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: the tier", w);
    if (tier) {
        tier->cache = c;
        tier->store = store;
    }
    /* pipelined loads: a copy queue of their own, in order, on the pool's device */
    if (tier && o->load != LAZYATTN_TIER_LOAD_SYNC) {
        lazyattn_context *ctx = lz_pool_context(lz_cache_pool(c));
        cl_int err;
        tier->copy_queue = clCreateCommandQueue(ctx->context, ctx->device, 0, &err);
        if (err != CL_SUCCESS) {
            free(tier);
            return lz_cl_fail(err, "lazyattn_cache_set_tier: the tier's copy queue "
                                   "(clCreateCommandQueue)");
        }
        int st = lz_staging_init(&tier->staging, ctx->context, tier->copy_queue);
        if (st) {
            clReleaseCommandQueue(tier->copy_queue);
            free(tier);
            return st;
        }
    }
    if (tier) lz_tier_pin_store(lz_pool_context(lz_cache_pool(c)), store, w);
    int st = LAZYATTN_STATUS_OK;
    /* background loads: a loader of its own */
    if (tier && o->load == LAZYATTN_TIER_LOAD_BACKGROUND)
        st = lz_tier_loader_create(lz_cache_pool(c), store, lz_cache_model_id(c),
                                   tier->copy_queue, &tier->staging, &tier->loader);
    /* writes off the serving thread: a writer of its own */
    if (!st && tier && mode != LAZYATTN_TIER_READ_ONLY && o->write_queue > 0)
        st = lz_tier_writer_create(lz_cache_pool(c), store, o->write_queue, &tier->writer);
    if (st) {
        lz_tier_loader_destroy(tier->loader);
        if (tier->copy_queue) {
            lz_staging_free(&tier->staging);
            clReleaseCommandQueue(tier->copy_queue);
        }
        free(tier);
        return st;
    }
    lz_cache_attach_tier(c, store, mode, &lz_tier_of_store, tier);
    return LAZYATTN_STATUS_OK;
}

void lazyattn_tier_options_init(lazyattn_tier_options *options) {
    if (options) memset(options, 0, sizeof *options);
}

/* lazyattn_cache_set_tier_options as the caller w: options NULL for the defaults. */
static int lz_set_tier_as(lazyattn_cache *c, lazyattn_store *store, lazyattn_tier_mode mode,
                          const lazyattn_tier_options *options, const char *w) {
    LZ_CHECK_ARG(c != NULL, "%s: cache is NULL", w);
    int st = lz_cache_check_live(c, w);
    if (st) return st;
    lazyattn_tier_options o;
    lazyattn_tier_options_init(&o);
    if (options) o = *options;
    int taken;
    if ((st = lz_cache_enter(c, LZ_USE_CHANGE, w, &taken))) return st;
    st = lz_set_tier(c, store, mode, &o, w);
    lz_cache_leave(c, taken);
    return st;
}

int lazyattn_cache_set_tier_options(lazyattn_cache *c, lazyattn_store *store,
                                    lazyattn_tier_mode mode, const lazyattn_tier_options *options) {
    return lz_set_tier_as(c, store, mode, options, "lazyattn_cache_set_tier_options");
}

int lazyattn_cache_set_tier(lazyattn_cache *c, lazyattn_store *store, lazyattn_tier_mode mode) {
    return lz_set_tier_as(c, store, mode, NULL, "lazyattn_cache_set_tier");
}

/* Sets one of the cost rule's rates (which: 0 the recompute rate, 1 the
 * assumed load rate) as the caller w. */
static int lz_set_tier_rate(lazyattn_cache *c, double rate, int which, const char *w) {
    LZ_CHECK_ARG(c != NULL, "%s: cache is NULL", w);
    int st = lz_cache_check_live(c, w);
    if (st) return st;
    LZ_CHECK_ARG(rate >= 0 && rate <= 1e300, "%s: rate %g is not a finite number >= 0", w, rate);
    int taken;
    if ((st = lz_cache_enter(c, LZ_USE_CHANGE, w, &taken))) return st;
    lz_tier *tier = lz_cache_tier_state(c);
    if (tier)
        *(which ? &tier->assumed_load_rate : &tier->recompute_rate) = rate;
    else
        st = lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: the cache has no tier", w);
    lz_cache_leave(c, taken);
    return st;
}

int lazyattn_cache_set_tier_recompute_rate(lazyattn_cache *c, double tokens_per_second) {
    return lz_set_tier_rate(c, tokens_per_second, 0, "lazyattn_cache_set_tier_recompute_rate");
}

int lazyattn_cache_set_tier_load_rate(lazyattn_cache *c, double bytes_per_second) {
    return lz_set_tier_rate(c, bytes_per_second, 1, "lazyattn_cache_set_tier_load_rate");
}

/* The store's operations run the engine's code: callouts of the cache
 * (lz_cache_enter refuses what they must not do to it). */
static int lz_tier_get(lazyattn_cache *c, lazyattn_store *s, lazyattn_doc_key key,
                       const lz_store_room *room, lazyattn_store_value *v) {
    const char *outer = lz_cache_callout_begin(c, "the tier store's get");
    int st = lz_store_get_into(s, key, room, v);
    lz_cache_callout_end(c, outer);
    return st;
}

static void lz_tier_release(lazyattn_cache *c, lazyattn_store *s, lazyattn_store_value *v) {
    const char *outer = lz_cache_callout_begin(c, "the tier store's release");
    lazyattn_store_release(s, v);
    lz_cache_callout_end(c, outer);
}

static int lz_tier_exists(lazyattn_cache *c, lazyattn_store *s, lazyattn_doc_key key,
                          int *there) {
    const char *outer = lz_cache_callout_begin(c, "the tier store's exists");
    int st = lazyattn_store_exists(s, key, there);
    lz_cache_callout_end(c, outer);
    return st;
}

static int lz_tier_put(lazyattn_cache *c, lazyattn_store *s, lazyattn_doc_key key,
                       const void *data, size_t size) {
    const char *outer = lz_cache_callout_begin(c, "the tier store's put");
    int st = lz_store_put_sealed(s, key, data, size); /* an export sealed just now */
    lz_cache_callout_end(c, outer);
    return st;
}

/* The cost rule: 1 when recomputing n_tokens is expected to be faster than
 * loading their export at the bandwidth of the loads so far (before any:
 * the assumed one, if set). */
static int lz_tier_recompute_cheaper(const lazyattn_cache *c, const lz_tier *tier, int n_tokens) {
    int measured = tier->load_seconds > 0 && tier->load_bytes > 0;
    if (tier->recompute_rate <= 0 || (!measured && tier->assumed_load_rate <= 0)) return 0;
    lazyattn_pool_config pc;
    lazyattn_pool_get_config(lz_cache_pool(c), &pc);
    int n_blocks = (n_tokens + pc.block_size - 1) / pc.block_size;
    size_t bytes = lz_kv_export_bytes(&pc, n_tokens, n_blocks);
    double load_s = measured ? (double)bytes * tier->load_seconds / tier->load_bytes
                             : (double)bytes / tier->assumed_load_rate;
    return load_s >= (double)n_tokens / tier->recompute_rate;
}

/* Whether c's pool keeps TILED pages (an import reorders the payload). */
static int lz_tier_pool_tiled(lazyattn_cache *c) {
    lazyattn_pool_config pc;
    lazyattn_pool_get_config(lz_cache_pool(c), &pc);
    return pc.kv_layout == LAZYATTN_KV_LAYOUT_TILED;
}

static int lz_tier_load_background(lazyattn_cache *c, lz_tier *tier, lazyattn_store *store,
                                   const uint8_t digest[32], const int32_t *tokens,
                                   int n_tokens, lz_tally *t);

static int lz_tier_load(lazyattn_cache *c, lazyattn_store *store, const uint8_t digest[32],
                        const int32_t *tokens, int n_tokens, lz_tally *t) {
    lz_tier *tier = lz_cache_tier_state(c);
    if (lz_tier_recompute_cheaper(c, tier, n_tokens)) {
        tier->skipped_by_cost++;
        return 0;
    }
    if (tier->loader) return lz_tier_load_background(c, tier, store, digest, tokens, n_tokens, t);
    lz_staging_pick pick = {&tier->staging, -1};
    lz_store_room room = {lz_staging_pick_take, &pick};
    const lz_store_room *into = tier->copy_queue ? &room : NULL; /* pipelined only */
    double t0 = lz_seconds_now();
    lazyattn_doc_key key = {lz_cache_model_id(c), {0}};
    memcpy(key.digest, digest, sizeof key.digest);
    uint64_t doc_hash = lz_digest_hash(digest);
    lazyattn_store_value v;
    int st = lz_tier_get(c, store, key, into, &v);
    if (st == LAZYATTN_STATUS_NOT_FOUND && lz_tier_lease_miss(c, store, key, t)) {
        t0 = lz_seconds_now(); /* the wait is no part of the load's cost */
        st = lz_tier_get(c, store, key, into, &v); /* written while this cache waited */
    }
    if (st == LAZYATTN_STATUS_NOT_FOUND) {
        lz_staging_pick_give(&pick);
        t->tier_misses++;
        return 0;
    }
    if (st) {
        lz_staging_pick_give(&pick);
        /* FORMAT: the store found something it could not assemble (Redis:
         * a chunk missing or mixed): refused data, not a store failure */
        if (st == LAZYATTN_STATUS_FORMAT)
            t->tier_rejected++;
        else
            t->tier_errors++;
        lz_log_rated(lz_pool_context(lz_cache_pool(c)),
                     st == LAZYATTN_STATUS_FORMAT ? &lz_rate_load_refused : &lz_rate_load_error,
                     "tier: %s; recomputing the document", lazyattn_last_error());
        return 0;
    }
    /* An engine's store may hand out memory another party can change (a
     * shared mapping of a file): its value is copied once, so that what
     * the checks pass is what is uploaded. The library's stores hand out
     * memory of their own that nothing changes until it is released. */
    const uint8_t *data = v.data;
    uint8_t *copy = NULL;
    size_t size = v.size;
    int sealed = lz_store_value_sealed(store, &v);
    if (!lz_store_values_private(store)) {
        /* pinned where a slot is free (pipelined loads) */
        if (tier->copy_queue) copy = lz_staging_take(&tier->staging, size, &pick.slot);
        if (!copy) copy = malloc(size ? size : 1);
        if (copy && size) memcpy(copy, v.data, size);
        lz_tier_release(c, store, &v);
        if (!copy) {
            t->tier_errors++;
            lz_log_rated(lz_pool_context(lz_cache_pool(c)), &lz_rate_load_error,
                         "tier: no %zu bytes to copy the %s store's value into; recomputing "
                         "the document",
                         size, lazyattn_store_name(store));
            return 0;
        }
        data = copy;
    }
    lazyattn_kv_info info;
    lz_upload up = {0};
    int rejected = 0;
    st = lazyattn_kv_describe(data, size, &info);
    if (!st && (info.model_id != key.model_id ||
                memcmp(info.digest, key.digest, sizeof key.digest) != 0 ||
                info.n_tokens != n_tokens || info.total_bytes != size))
        st = lz_fail(LAZYATTN_STATUS_FORMAT,
                     "tier: the %s store's value for document %016llx is another document's "
                     "(or truncated)",
                     lazyattn_store_name(store), (unsigned long long)doc_hash);
    if (st)
        rejected = 1;
    else {
        uint64_t got = 0;
        up.queue = tier->copy_queue;
        up.gate = tier->gate;
        /* a store's own memory (not copied): a TILED pool's reorder goes to
           pinned staging where a slot is free, not to fresh pageable memory */
        if (tier->copy_queue && !copy && pick.slot < 0 && lz_tier_pool_tiled(c)) {
            up.room = lz_staging_take(&tier->staging, size, &pick.slot);
            up.room_bytes = up.room ? size : 0;
        }
        st = lz_cache_import_bytes(c, data, size, &got, "tier import",
                                   tier->copy_queue ? &up : NULL, sealed);
        if (!st && sealed) tier->sealed++;
        /* refused data (FORMAT; INVALID_ARGUMENT: another identity) is
         * rejected; anything else (no room next to the pinned working set,
         * out of memory) counts as an error */
        rejected = st == LAZYATTN_STATUS_FORMAT || st == LAZYATTN_STATUS_INVALID_ARGUMENT;
    }
    if (st)
        lz_log_rated(lz_pool_context(lz_cache_pool(c)),
                     rejected ? &lz_rate_load_refused : &lz_rate_load_error,
                     "tier: %s; recomputing the document", lazyattn_last_error());
    if (rejected)
        t->tier_rejected++;
    else if (st)
        t->tier_errors++;
    else {
        t->tier_read_bytes += (uint64_t)size;
        tier->load_bytes += (double)size; /* the get, the checks and the upload */
        tier->load_seconds += lz_seconds_now() - t0;
    }
    /* an upload in flight keeps what it reads until it ended */
    if (up.done && lz_tier_track(c, tier, &up, copy ? NULL : &v, copy, pick.slot)) return 1;
    if (!copy)
        lz_tier_release(c, store, &v);
    else if (pick.slot < 0)
        free(copy);
    lz_staging_pick_give(&pick);
    return st == LAZYATTN_STATUS_OK;
}

// ---- pipelined uploads ----

/* Gives back what upload u read (its store value, or the tier's copy, and
 * its staging slot). */
static void lz_upload_free(lz_tier *tier, lz_tier_upload *u) {
    if (u->done) clReleaseEvent(u->done);
    if (u->value.data) lz_tier_release(tier->cache, tier->store, &u->value);
    if (u->slot >= 0)
        lz_staging_give(&tier->staging, u->slot);
    else
        free(u->copy);
    free(u->keep);
}

/* Keeps the upload of up (entry, event, what it reads) until it ended: 1;
 * 0 when it cannot be listed, after waiting for it (the caller gives back
 * what it read). */
static int lz_tier_track(lazyattn_cache *c, lz_tier *tier, lz_upload *up,
                         const lazyattn_store_value *v, uint8_t *copy, int slot) {
    tier->pipelined++;
    if (!up->entry->load_id) up->entry->load_id = ++tier->next_load_id; /* background: has one */
    if (tier->n_uploads == tier->cap_uploads) {
        int cap = tier->cap_uploads ? 2 * tier->cap_uploads : 16;
        lz_tier_upload *u = realloc(tier->uploads, (size_t)cap * sizeof *u);
        if (u) {
            tier->uploads = u;
            tier->cap_uploads = cap;
        }
    }
    if (tier->n_uploads < tier->cap_uploads) {
        lz_tier_upload *u = &tier->uploads[tier->n_uploads++];
        memset(u, 0, sizeof *u);
        u->done = up->done;
        u->doc_hash = up->entry->doc_hash;
        u->load_id = up->entry->load_id;
        if (v) u->value = *v;
        u->copy = copy;
        u->keep = up->keep;
        u->slot = slot;
        return 1;
    }
    /* no room to remember it: it ends before its memory is given back */
    cl_int err = clWaitForEvents(1, &up->done), status = CL_COMPLETE;
    clGetEventInfo(up->done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
    if (err != CL_SUCCESS || status < 0) {
        tier->failures++;
        lz_cache_discard(c, up->entry);
    }
    clReleaseEvent(up->done);
    free(up->keep);
    return 0;
}

/* Settles the uploads that ended (wait: waits for all first): memory given
 * back, the documents of failed ones discarded. The first failure's status
 * (OK: none), with the reason recorded. */
static int lz_tier_settle_uploads(lz_tier *tier, int wait) {
    if (wait && tier->n_uploads) clFinish(tier->copy_queue);
    int st = LAZYATTN_STATUS_OK, w = 0;
    for (int i = 0; i < tier->n_uploads; i++) {
        lz_tier_upload *u = &tier->uploads[i];
        cl_int status = CL_QUEUED;
        cl_int err = clGetEventInfo(u->done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status,
                                    &status, NULL);
        if (err == CL_SUCCESS && status > CL_COMPLETE) { /* still running */
            tier->uploads[w++] = *u;
            continue;
        }
        if (err == CL_SUCCESS && tier->fault) status = tier->fault;
        if (err != CL_SUCCESS || status < 0) {
            tier->failures++;
            lz_entry *e = lz_cache_find_loaded(tier->cache, u->doc_hash, u->load_id);
            if (e) lz_cache_discard(tier->cache, e);
            int code = err != CL_SUCCESS ? (int)err : (int)status;
            int fst = lz_fail(LAZYATTN_STATUS_OPENCL,
                              "tier: the upload of document %016llx failed on the device "
                              "(OpenCL status %d); the document was dropped from the cache and "
                              "is recomputed next time (commands that read it meanwhile read an "
                              "incomplete copy)",
                              (unsigned long long)u->doc_hash, code);
            lz_log(lz_pool_context(lz_cache_pool(tier->cache)), LAZYATTN_LOG_WARN, "%s",
                   lazyattn_last_error());
            if (!st) st = fst;
        }
        lz_upload_free(tier, u);
    }
    tier->n_uploads = w;
    return st;
}

static void lz_tier_settle_all(lz_tier *tier, int wait) {
    if (tier->n_uploads) lz_tier_settle_uploads(tier, wait);
}

static int lz_tier_settle(lazyattn_cache *c) {
    lz_tier *tier = lz_cache_tier_state(c);
    if (tier && tier->loader) lz_tier_settle_loads(tier, 0);
    if (!tier || !tier->n_uploads) return LAZYATTN_STATUS_OK;
    return lz_tier_settle_uploads(tier, 0);
}

void lz_tier_fail_uploads(lazyattn_cache *c, cl_int status) {
    lz_tier *tier = lz_cache_tier_state(c);
    if (tier) tier->fault = status;
}

void lz_tier_hold_uploads(lazyattn_cache *c, cl_event gate) {
    lz_tier *tier = lz_cache_tier_state(c);
    if (!tier) return;
    if (tier->gate) clReleaseEvent(tier->gate);
    tier->gate = gate;
    if (gate) clRetainEvent(gate);
}

// ---- background loads (the tier's loader) ----

/* Remembers digest as a document whose load failed. */
static void lz_tier_refuse(lz_tier *tier, const uint8_t digest[32]) {
    memcpy(tier->refused[tier->next_refused], digest, 32);
    tier->next_refused = (tier->next_refused + 1) % LZ_TIER_REFUSED;
    if (tier->n_refused < LZ_TIER_REFUSED) tier->n_refused++;
}

/* 1 when digest's load failed before (forgotten now: recomputed once). */
static int lz_tier_forget_refused(lz_tier *tier, const uint8_t digest[32]) {
    for (int i = 0; i < tier->n_refused; i++)
        if (memcmp(tier->refused[i], digest, 32) == 0) {
            memset(tier->refused[i], 0, 32); /* no document's digest is all zero in practice */
            return 1;
        }
    return 0;
}

/* The planner's side of a background load: asks the store whether it
 * holds the document (a miss as lz_tier_load's: leases, recompute); when
 * it does, takes the blocks, commits the entry (loading, pinned by the
 * tier) and queues the rest for the loader. 1: planned REUSE. */
static int lz_tier_load_background(lazyattn_cache *c, lz_tier *tier, lazyattn_store *store,
                                   const uint8_t digest[32], const int32_t *tokens,
                                   int n_tokens, lz_tally *t) {
    if (lz_tier_forget_refused(tier, digest)) return 0; /* failed last time: recompute */
    lazyattn_doc_key key = {lz_cache_model_id(c), {0}};
    memcpy(key.digest, digest, sizeof key.digest);
    uint64_t doc_hash = lz_digest_hash(digest);
    int there = 0;
    int st = lz_tier_exists(c, store, key, &there);
    if (!st && !there && lz_tier_lease_miss(c, store, key, t))
        st = lz_tier_exists(c, store, key, &there); /* written while this cache waited */
    if (st) {
        t->tier_errors++;
        lz_log_rated(lz_pool_context(lz_cache_pool(c)), &lz_rate_load_error,
                     "tier: %s; recomputing the document", lazyattn_last_error());
        return 0;
    }
    if (!there) {
        t->tier_misses++;
        return 0;
    }
    lazyattn_pool_config pc;
    lazyattn_pool_get_config(lz_cache_pool(c), &pc);
    int n_blocks = (n_tokens + pc.block_size - 1) / pc.block_size;
    int32_t *blocks = malloc((size_t)n_blocks * sizeof *blocks);
    if (!blocks) {
        t->tier_errors++;
        return 0;
    }
    static const char w[] = "tier load";
    lz_entry *e = NULL;
    st = lz_cache_take_blocks(c, n_blocks, blocks, 0, w);
    if (!st && !(e = lz_entry_new(blocks, n_blocks, tokens, n_tokens))) {
        lz_cache_give_blocks(c, n_blocks, blocks);
        st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s", w);
    }
    if (st) { /* no room next to the pinned working set, out of memory: recomputed */
        free(blocks);
        t->tier_errors++;
        return 0;
    }
    e->key = e->doc_hash = doc_hash;
    memcpy(e->digest, digest, sizeof e->digest);
    e->stored_start = 0;
    e->load_id = ++tier->next_load_id;
    lz_cache_add_imported(c, e, 0); /* not found before: the plan missed it */
    st = lz_tier_loader_submit(tier->loader, e, e->load_id, digest, doc_hash, tokens, n_tokens,
                               blocks, n_blocks, tier->gate);
    free(blocks);
    if (st) {
        lz_cache_discard(c, e); /* never written: found by no lookup, evicted */
        t->tier_errors++;
        return 0;
    }
    e->loading = 1;
    lz_cache_pin(c, e); /* the tier's hold until the loader enqueued the upload */
    t->tier_read_bytes += (uint64_t)lz_kv_export_bytes(&pc, n_tokens, n_blocks);
    return 1;
}

/* Gives back what a finished job's upload would have read (lz_upload_free's). */
static void lz_job_give_back(lz_tier *tier, lz_load_job *j) {
    lz_tier_upload u = {0};
    u.done = j->done, u.value = j->value, u.copy = j->copy, u.slot = j->slot, u.keep = j->keep;
    lz_upload_free(tier, &u);
}

/* Settles the loads the loader finished (after waiting for those numbered
 * up to wait_for; 0: none): an enqueued upload is tracked as a pipelined
 * one; a failed load's document is discarded (its requests fail to poll)
 * and recomputed by the next plan. The tier's hold on each ends. */
static void lz_tier_settle_loads(lz_tier *tier, uint64_t wait_for) {
    lazyattn_cache *c = tier->cache;
    for (lz_load_job *j = lz_tier_loader_take(tier->loader, wait_for), *next; j; j = next) {
        next = j->next;
        lz_entry *e = j->entry;
        e->loading = 0;
        tier->background++;
        if (j->status == LAZYATTN_STATUS_OK && j->done) {
            tier->load_bytes += (double)j->bytes;
            tier->load_seconds += j->seconds;
            if (j->sealed) tier->sealed++;
            lz_upload up = {0};
            up.done = j->done;
            up.keep = j->keep;
            up.entry = e;
            if (!lz_tier_track(c, tier, &up, j->value.data ? &j->value : NULL, j->copy,
                               j->slot)) {
                j->done = NULL, j->keep = NULL; /* waited for and released by track */
                lz_job_give_back(tier, j);
            }
        } else {
            tier->pipelined++;
            tier->failures++;
            lz_job_give_back(tier, j);
            lz_tier_refuse(tier, j->digest);
            lz_cache_discard(c, e);
            lz_log_rated(lz_pool_context(lz_cache_pool(c)), &lz_rate_load_refused,
                         "tier: %s; the requests planned with document %016llx fail "
                         "(lazyattn_request_poll_loads), their next plan recomputes it",
                         j->reason[0] ? j->reason : "the load failed",
                         (unsigned long long)j->doc_hash);
        }
        lz_cache_unpin(c, e);
        lz_load_job_free(j);
    }
}

static int lz_tier_await(lazyattn_cache *c, uint64_t load_id, int for_plan) {
    lz_tier *tier = lz_cache_tier_state(c);
    if (!tier) return LAZYATTN_STATUS_OK;
    if (tier->loader) {
        if (load_id && for_plan) tier->waits++;
        lz_tier_settle_loads(tier, load_id);
    }
    return tier->n_uploads ? lz_tier_settle_uploads(tier, 0) : LAZYATTN_STATUS_OK;
}

static void lz_tier_write(lazyattn_cache *c, lazyattn_store *store, lz_entry *e) {
    if (e->in_tier) return;
    lz_tier *tier = lz_cache_tier_state(c);
    lazyattn_doc_key key = {lz_cache_model_id(c), {0}};
    memcpy(key.digest, e->digest, sizeof key.digest);
    /* a document the cost rule would recompute rather than load is not
       worth its read-back and put either */
    if (lz_tier_recompute_cheaper(c, tier, e->n_tokens)) {
        tier->writes_skipped_by_cost++;
        lz_tier_lease_done(c, store, key, 0); /* the others stop waiting */
        return;
    }
    if (tier->writer) { /* queued (returns at once) or dropped, counted */
        /* the writer gives this cache's lease back once the write ended */
        e->in_tier = lz_tier_writer_submit(tier->writer, lz_cache_model_id(c), e->digest,
                                           e->doc_hash, e->tokens, e->n_tokens, e->blocks,
                                           e->n_blocks, c);
        if (!e->in_tier) lz_tier_lease_done(c, store, key, 0);
        return;
    }
    int there = 0;
    size_t written = 0;
    uint8_t *buf = NULL;
    int st = lz_tier_exists(c, store, key, &there);
    if (!st && there) { /* another process or an earlier write put it there */
        /* computed here, yet another process wrote it first: a duplicate */
        lz_cache_count_tier_duplicate(c, e->n_tokens);
        e->in_tier = 1;
        lz_tier_lease_done(c, store, key, 1);
        return;
    }
    /* this entry itself, not whichever entry shares its 64-bit hash */
    if (!st) st = lz_cache_export_entry(c, e, &buf, &written, "tier write");
    if (!st) st = lz_tier_put(c, store, key, buf, written);
    free(buf);
    lz_tier_lease_done(c, store, key, !st); /* written or not: the others stop waiting */
    if (st) {
        lz_cache_count_tier_write(c, 0, 0);
        lz_log_rated(lz_pool_context(lz_cache_pool(c)), &lz_rate_write_error,
                     "tier: document %016llx not written to the %s store: %s",
                     (unsigned long long)e->doc_hash, lazyattn_store_name(store),
                     lazyattn_last_error());
        return;
    }
    e->in_tier = 1;
    lz_cache_count_tier_write(c, 1, written);
}
