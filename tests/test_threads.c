/* SPDX-License-Identifier: Apache-2.0 */
/* The threading contract (README "Threading") under load, and the
 * live-object checks:
 *  - threads hammering one pool with alloc/free never get the same block
 *    twice, and the accounting adds up;
 *  - one cache per thread over one shared pool: random request
 *    create/commit/append/destroy loops, every live table checked against a
 *    shadow of the KV slots that records which thread wrote each slot (a block
 *    handed to two caches at once shows up as another thread's data), and at
 *    the end pool accounting == the caches' holdings, every cache valid,
 *    n_allocs - n_frees == n_used;
 *  - threads creating attention objects on one context at once (the program
 *    cache), each checked against the float64 RoPE reference;
 *  - a pool destroyed with caches attached stays alive until the last one
 *    goes; handles of the wrong kind are refused, not used.
 * Run under ThreadSanitizer in CI (.ci/run). Worker threads never call
 * cmocka (it is not thread-safe): they record their first failure and the
 * main thread asserts. */
#include "test_common.h"

#include "internal.h" /* the context's program cache, to count its entries */

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_THREADS 4

/* Records the first failure of a worker and leaves the current step. */
#define W_FAIL(w, ...)                                                         \
    do {                                                                       \
        if (!(w)->failure[0]) snprintf((w)->failure, sizeof (w)->failure, __VA_ARGS__); \
    } while (0)
#define W_CHECK(w, cond, ...)       \
    do {                            \
        if (!(cond)) {              \
            W_FAIL(w, __VA_ARGS__); \
            return;                 \
        }                           \
    } while (0)

static void run_threads(void *(*fn)(void *), void *args, size_t arg_size, int n) {
    pthread_t th[N_THREADS];
    assert_true(n <= N_THREADS);
    for (int t = 0; t < n; t++)
        assert_int_equal(pthread_create(&th[t], NULL, fn, (char *)args + t * arg_size), 0);
    for (int t = 0; t < n; t++) assert_int_equal(pthread_join(th[t], NULL), 0);
}

static lazyattn_pool *bookkeeping_pool(int block_size, int64_t n_blocks) {
    /* block_bytes = 2 * 1 layer * 1 head * block_size * 8 dims * 2 B */
    lazyattn_pool_config pc = {1, 1, 8, block_size, LAZYATTN_DTYPE_F16, 0, LAZYATTN_KV_LAYOUT_ROWS};
    pc.budget_bytes = (uint64_t)n_blocks * 2 * block_size * 8 * 2;
    lazyattn_pool *pool = NULL;
    lt_assert_status(lazyattn_pool_create(NULL, &pc, &pool), LAZYATTN_STATUS_OK);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(pool, &info);
    assert_int_equal(info.n_blocks, n_blocks);
    return pool;
}

// ---- one pool, raw alloc/free from several threads ----

#define RAW_BLOCKS 64
#define RAW_HELD 70 /* more than the pool: refusals even when the threads happen to run one by one */

typedef struct raw_worker {
    int id;
    uint64_t seed;
    lazyattn_pool *pool;
    atomic_int *owner; /* [RAW_BLOCKS]: 0 free, else the holding thread's id + 1 */
    long allocated, freed, refused;
    char failure[512];
} raw_worker;

static void raw_loop(raw_worker *w) {
    lt_rng r = {w->seed};
    int32_t held[RAW_HELD + 8];
    int n_held = 0;
    for (int it = 0; it < 20000; it++) {
        if (n_held < RAW_HELD && lt_int(&r, 0, 1)) {
            int n = lt_int(&r, 1, 6);
            if (n_held + n > RAW_HELD) n = RAW_HELD - n_held;
            int st = lazyattn_pool_alloc(w->pool, n, held + n_held);
            if (st == LAZYATTN_STATUS_BUDGET_EXCEEDED) {
                w->refused++;
                continue;
            }
            W_CHECK(w, st == 0, "alloc %d: %s", n, lazyattn_last_error());
            for (int i = 0; i < n; i++) {
                int32_t id = held[n_held + i];
                W_CHECK(w, id >= 0 && id < RAW_BLOCKS, "block %d out of range", id);
                int was = atomic_exchange(&w->owner[id], w->id + 1);
                W_CHECK(w, was == 0, "block %d handed to thread %d while thread %d holds it", id,
                        w->id, was - 1);
                W_CHECK(w, lazyattn_pool_is_allocated(w->pool, id), "block %d not allocated", id);
            }
            n_held += n;
            w->allocated += n;
        } else if (n_held) {
            /* Small steps both ways: each thread's holding walks up to the budget. */
            int n = lt_int(&r, 1, n_held < 6 ? n_held : 6);
            int32_t *ids = held + n_held - n;
            for (int i = 0; i < n; i++) {
                int was = atomic_exchange(&w->owner[ids[i]], 0);
                W_CHECK(w, was == w->id + 1, "block %d of thread %d found with owner %d", ids[i],
                        w->id, was - 1);
            }
            int st = lazyattn_pool_free(w->pool, n, ids);
            W_CHECK(w, st == 0, "free %d: %s", n, lazyattn_last_error());
            n_held -= n;
            w->freed += n;
        }
        if (it % 64 == 0) {
            lazyattn_pool_info info;
            W_CHECK(w, lazyattn_pool_get_info(w->pool, &info) == 0, "get_info");
            W_CHECK(w, info.n_used >= 0 && info.n_used <= info.n_blocks &&
                           info.n_allocs - info.n_frees == info.n_used,
                    "inconsistent info: used %lld allocs %lld frees %lld", (long long)info.n_used,
                    (long long)info.n_allocs, (long long)info.n_frees);
        }
    }
    for (int i = 0; i < n_held; i++) atomic_store(&w->owner[held[i]], 0);
    W_CHECK(w, lazyattn_pool_free(w->pool, n_held, held) == 0, "final free: %s",
            lazyattn_last_error());
    w->freed += n_held;
}

static void *raw_main(void *arg) {
    raw_loop(arg);
    return NULL;
}

static void test_pool_alloc_free_from_threads(void **state) {
    (void)state;
    uint64_t seed = lt_seed();
    lazyattn_pool *pool = bookkeeping_pool(4, RAW_BLOCKS);
    atomic_int owner[RAW_BLOCKS];
    for (int i = 0; i < RAW_BLOCKS; i++) atomic_init(&owner[i], 0);
    raw_worker w[N_THREADS];
    memset(w, 0, sizeof w);
    for (int t = 0; t < N_THREADS; t++) {
        w[t].id = t;
        w[t].seed = seed + 101 * (uint64_t)t;
        w[t].pool = pool;
        w[t].owner = owner;
    }
    run_threads(raw_main, w, sizeof *w, N_THREADS);
    long allocated = 0, freed = 0, refused = 0;
    for (int t = 0; t < N_THREADS; t++) {
        if (w[t].failure[0]) print_error("thread %d: %s\n", t, w[t].failure);
        assert_string_equal(w[t].failure, "");
        allocated += w[t].allocated, freed += w[t].freed, refused += w[t].refused;
    }
    lazyattn_pool_info info;
    lt_assert_status(lazyattn_pool_get_info(pool, &info), LAZYATTN_STATUS_OK);
    printf("# %d threads: %ld blocks allocated, %ld freed, %ld refusals, peak %lld of %d\n",
           N_THREADS, allocated, freed, refused, (long long)info.peak_used, RAW_BLOCKS);
    /* The pool's counters equal the threads' own counts. */
    assert_int_equal(info.n_allocs, allocated);
    assert_int_equal(info.n_frees, freed);
    assert_int_equal(info.n_used, 0);
    assert_true(refused > 0); /* the budget was under pressure */
    for (int i = 0; i < RAW_BLOCKS; i++) assert_false(lazyattn_pool_is_allocated(pool, i));
    lazyattn_pool_destroy(pool);
}

// ---- one cache per thread, one shared pool ----

#define BS 4
#define CACHE_BLOCKS 160
#define N_DOCS 12
#define MAX_DOC 40
#define MAX_LIVE 3
#define CACHE_STEPS 2500

/* What a KV slot holds: the thread that wrote it and the token. */
typedef struct slot {
    int32_t owner; /* thread id + 1 */
    int32_t token;
} slot;

typedef struct shared_docs {
    int32_t tok[N_DOCS][MAX_DOC];
    int len[N_DOCS];
    int32_t prefix[6];
} shared_docs;

typedef struct live {
    lazyattn_request *req;
    int n_pos;
    int32_t *token; /* [n_pos] expected token by logical position */
} live;

typedef struct cache_worker {
    int id;
    uint64_t seed;
    lazyattn_pool *pool;
    lazyattn_cache *cache;
    slot *kv; /* [CACHE_BLOCKS * BS], shared by every thread */
    const shared_docs *docs;
    live lives[MAX_LIVE];
    int n_live;
    long created, refused, committed, appended, destroyed, validated, checked_slots;
    char failure[512];
} cache_worker;

/* Every slot of the live request's table holds this thread's token for
 * that position. */
static void check_live(cache_worker *w, const live *l) {
    lazyattn_plan p;
    W_CHECK(w, lazyattn_request_get_plan(l->req, &p) == 0, "get_plan: %s", lazyattn_last_error());
    W_CHECK(w, p.n_positions == l->n_pos, "plan has %d positions, want %d", p.n_positions,
            l->n_pos);
    int pos = 0;
    for (int e = 0; e < p.n_entries; e++) {
        int32_t b, d, n;
        W_CHECK(w, lazyattn_entry_unpack(p.table[e], &b, &d, &n) == 0, "unpack");
        W_CHECK(w, b >= 0 && b < CACHE_BLOCKS && n >= 1 && n <= BS, "entry %d: block %d len %d",
                e, b, n);
        W_CHECK(w, p.entry_pos[e] == pos, "entry %d at %d, want %d", e, p.entry_pos[e], pos);
        for (int i = 0; i < n; i++, pos++) {
            slot s = w->kv[b * BS + i];
            W_CHECK(w, s.owner == w->id + 1 && s.token == l->token[pos],
                    "thread %d position %d (block %d): slot holds token %d of thread %d, want "
                    "token %d",
                    w->id, pos, b, s.token, s.owner - 1, l->token[pos]);
            w->checked_slots++;
        }
    }
    W_CHECK(w, pos == l->n_pos, "table covers %d of %d positions", pos, l->n_pos);
}

/* The caller's side of a plan: write prefilled tokens, then copies. */
static void execute(cache_worker *w, const live *l, const lazyattn_plan *p) {
    for (int k = 0; k < p->n_prefill; k++) {
        int32_t s = p->prefill_slots[k];
        W_CHECK(w, s >= 0 && s < CACHE_BLOCKS * BS, "prefill slot %d", s);
        w->kv[s].owner = w->id + 1;
        w->kv[s].token = l->token[p->prefill_pos[k]];
    }
    for (int c = 0; c < p->n_copies; c++) {
        int32_t b, d, n;
        W_CHECK(w, lazyattn_entry_unpack(p->copy_src[c], &b, &d, &n) == 0, "unpack copy");
        for (int i = 0; i < n; i++) w->kv[p->copy_dst[c] * BS + i] = w->kv[b * BS + i];
    }
}

static void step_create(cache_worker *w, lt_rng *r) {
    const shared_docs *sd = w->docs;
    const int32_t *docs[4];
    int32_t lens[4], question[6];
    int n_docs = lt_int(r, 0, 3);
    for (int i = 0; i < n_docs; i++) {
        int id = lt_int(r, 0, N_DOCS - 1);
        docs[i] = sd->tok[id];
        lens[i] = sd->len[id];
    }
    int n_question = lt_int(r, 0, 6);
    for (int i = 0; i < n_question; i++) question[i] = 500000 + lt_int(r, 0, 99);
    lazyattn_request_desc d = {lt_int(r, 0, 6), sd->prefix, n_docs, docs, lens,
                               n_question, question, lt_int(r, 0, 8)};
    live l = {NULL, 0, NULL};
    int st = lazyattn_request_create(w->cache, &d, &l.req);
    if (st == LAZYATTN_STATUS_BUDGET_EXCEEDED) {
        w->refused++;
        return;
    }
    W_CHECK(w, st == 0, "request_create: %s", lazyattn_last_error());
    int total = d.n_prefix + n_question;
    for (int i = 0; i < n_docs; i++) total += lens[i];
    l.token = malloc(((size_t)total + 1) * sizeof *l.token);
    W_CHECK(w, l.token != NULL, "out of memory");
    for (int t = 0; t < d.n_prefix; t++) l.token[l.n_pos++] = sd->prefix[t];
    for (int i = 0; i < n_docs; i++)
        for (int t = 0; t < lens[i]; t++) l.token[l.n_pos++] = docs[i][t];
    for (int t = 0; t < n_question; t++) l.token[l.n_pos++] = question[t];
    w->lives[w->n_live++] = l;
    w->created++;
    lazyattn_plan p;
    W_CHECK(w, lazyattn_request_get_plan(l.req, &p) == 0, "get_plan: %s", lazyattn_last_error());
    execute(w, &l, &p);
}

static void step_append(cache_worker *w, lt_rng *r, live *l) {
    int n = lt_int(r, 1, 6);
    int32_t slots[6], pos[6];
    int st = lazyattn_request_append(l->req, n, slots, pos);
    if (st == LAZYATTN_STATUS_BUDGET_EXCEEDED) {
        w->refused++;
        return;
    }
    W_CHECK(w, st == 0, "append: %s", lazyattn_last_error());
    int32_t *grown = realloc(l->token, ((size_t)l->n_pos + n) * sizeof *grown);
    W_CHECK(w, grown != NULL, "out of memory");
    l->token = grown;
    for (int i = 0; i < n; i++) {
        W_CHECK(w, pos[i] == l->n_pos, "appended position %d, want %d", pos[i], l->n_pos);
        l->token[l->n_pos] = 900000 + pos[i];
        w->kv[slots[i]].owner = w->id + 1;
        w->kv[slots[i]].token = 900000 + pos[i];
        l->n_pos++;
    }
    w->appended += n;
}

static void live_destroy(cache_worker *w, int i) {
    lazyattn_request_destroy(w->lives[i].req);
    free(w->lives[i].token);
    w->lives[i] = w->lives[--w->n_live];
}

static void *cache_main(void *arg) {
    cache_worker *w = arg;
    lt_rng r = {w->seed};
    for (int step = 0; step < CACHE_STEPS && !w->failure[0]; step++) {
        int action = lt_int(&r, 0, 9);
        if (w->n_live == 0 || (action < 4 && w->n_live < MAX_LIVE)) {
            long refused = w->refused;
            step_create(w, &r);
            if (w->n_live == 0 && w->refused > refused) {
                /* refused holding nothing: the other threads' requests hold
                   the pool; only their frees can help, so give them the CPU
                   (else this thread's steps run out in refusals, by timing) */
                struct timespec pause = {0, 200 * 1000};
                nanosleep(&pause, NULL);
            }
        } else if (action < 6) {
            live *l = &w->lives[lt_int(&r, 0, w->n_live - 1)];
            if (lazyattn_request_commit(l->req) != 0) W_FAIL(w, "commit: %s", lazyattn_last_error());
            w->committed++;
        } else if (action < 8) {
            step_append(w, &r, &w->lives[lt_int(&r, 0, w->n_live - 1)]);
        } else {
            live_destroy(w, lt_int(&r, 0, w->n_live - 1));
            w->destroyed++;
        }
        for (int i = 0; i < w->n_live && !w->failure[0]; i++) check_live(w, &w->lives[i]);
        if (step % 250 == 0 && !w->failure[0]) {
            /* Walks this cache while the other threads allocate and free. */
            if (lazyattn_cache_validate(w->cache) != 0)
                W_FAIL(w, "validate at step %d: %s", step, lazyattn_last_error());
            w->validated++;
        }
    }
    return NULL; /* live requests stay for the main thread's checks */
}

static void test_caches_on_threads_share_one_pool(void **state) {
    (void)state;
    uint64_t seed = lt_seed();
    lt_rng r = {seed};
    shared_docs *sd = calloc(1, sizeof *sd);
    assert_non_null(sd);
    for (int i = 0; i < N_DOCS; i++) {
        sd->len[i] = lt_int(&r, 1, MAX_DOC);
        for (int t = 0; t < sd->len[i]; t++) sd->tok[i][t] = 1000 * (i + 1) + lt_int(&r, 0, 999);
    }
    for (int t = 0; t < 6; t++) sd->prefix[t] = 7 + t;
    lazyattn_pool *pool = bookkeeping_pool(BS, CACHE_BLOCKS);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(pool, &info);
    slot *kv = calloc(CACHE_BLOCKS * BS, sizeof *kv);
    assert_non_null(kv);
    cache_worker *w = calloc(N_THREADS, sizeof *w);
    assert_non_null(w);
    for (int t = 0; t < N_THREADS; t++) {
        /* Every policy; each cache keeps at most a share of the pool once
         * unpinned, so that no cache starves the others for good. */
        lazyattn_cache_config cc = {(lazyattn_cache_policy)(t % 4), 42,
                                    info.budget_bytes / (2 * N_THREADS)};
        lt_assert_status(lazyattn_cache_create(pool, &cc, &w[t].cache), LAZYATTN_STATUS_OK);
        w[t].id = t;
        w[t].seed = seed + 7919 * (uint64_t)(t + 1);
        w[t].pool = pool;
        w[t].kv = kv;
        w[t].docs = sd;
    }
    run_threads(cache_main, w, sizeof *w, N_THREADS);

    int64_t held_bytes = 0;
    for (int t = 0; t < N_THREADS; t++) {
        printf("# thread %d (%s): %ld created, %ld refused, %ld commits, %ld tokens appended, "
               "%ld destroyed, %ld validations, %ld slots checked\n",
               t, lazyattn_cache_policy_name((lazyattn_cache_policy)(t % 4)), w[t].created,
               w[t].refused, w[t].committed, w[t].appended, w[t].destroyed, w[t].validated,
               w[t].checked_slots);
        if (w[t].failure[0]) print_error("thread %d: %s\n", t, w[t].failure);
        assert_string_equal(w[t].failure, "");
        assert_true(w[t].created > 100);
        /* The final state, checked from the main thread. */
        lt_assert_status(lazyattn_cache_validate(w[t].cache), LAZYATTN_STATUS_OK);
        for (int i = 0; i < w[t].n_live; i++) check_live(&w[t], &w[t].lives[i]);
        assert_string_equal(w[t].failure, "");
        lazyattn_cache_stats s;
        lt_assert_status(lazyattn_cache_get_stats(w[t].cache, &s), LAZYATTN_STATUS_OK);
        assert_int_equal(s.n_requests_live, w[t].n_live);
        held_bytes += (int64_t)s.bytes_in_use;
    }
    lt_assert_status(lazyattn_pool_get_info(pool, &info), LAZYATTN_STATUS_OK);
    /* Every allocated block is held by exactly the caches' count of it. */
    assert_int_equal(info.n_used * (int64_t)info.block_bytes, held_bytes);
    assert_int_equal(info.n_allocs - info.n_frees, info.n_used);

    for (int t = 0; t < N_THREADS; t++) {
        while (w[t].n_live) live_destroy(&w[t], 0);
        lazyattn_cache_destroy(w[t].cache);
    }
    lt_assert_status(lazyattn_pool_get_info(pool, &info), LAZYATTN_STATUS_OK);
    assert_int_equal(info.n_used, 0);
    assert_int_equal(info.n_allocs, info.n_frees);
    lazyattn_pool_destroy(pool);
    free(w);
    free(kv);
    free(sd);
}

// ---- use after destroy, handles of the wrong kind ----

static lazyattn_request *one_request(lazyattn_cache *cache, const int32_t *doc, int len) {
    const int32_t *docs[1] = {doc};
    int32_t lens[1] = {len};
    lazyattn_request_desc d = {0, NULL, 1, docs, lens, 0, NULL, 4};
    lazyattn_request *req = NULL;
    lt_assert_status(lazyattn_request_create(cache, &d, &req), LAZYATTN_STATUS_OK);
    return req;
}

/* lazyattn_pool_destroy with caches attached: the pool stays alive, the
 * caches keep working on it, and the last cache's destroy frees it (under
 * ASan a pool freed early is a use-after-free here, one never freed a leak). */
static void test_pool_destroyed_before_its_caches(void **state) {
    (void)state;
    static const int32_t doc[10] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
    lazyattn_pool *pool = bookkeeping_pool(BS, 32);
    lazyattn_cache *a = NULL, *b = NULL;
    lt_assert_status(lazyattn_cache_create(pool, NULL, &a), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_create(pool, NULL, &b), LAZYATTN_STATUS_OK);
    lazyattn_request *ra = one_request(a, doc, 10);
    lazyattn_pool_destroy(pool);

    /* No new cache on a destroyed pool. */
    lazyattn_cache *c = NULL;
    lt_assert_status(lazyattn_cache_create(pool, NULL, &c), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_null(c);
    assert_non_null(strstr(lazyattn_last_error(), "the pool was destroyed"));
    /* A second destroy is refused, the pool stays for its caches. */
    lazyattn_pool_destroy(pool);
    assert_non_null(strstr(lazyattn_last_error(), "destroyed twice"));

    /* The caches still plan, commit, append and free on it. */
    lt_assert_status(lazyattn_request_commit(ra), LAZYATTN_STATUS_OK);
    int32_t slots[6], pos[6];
    lt_assert_status(lazyattn_request_append(ra, 6, slots, pos), LAZYATTN_STATUS_OK);
    assert_int_equal(pos[5], 15);
    lazyattn_request *rb = one_request(b, doc, 10);
    lazyattn_plan p;
    lt_assert_status(lazyattn_request_get_plan(rb, &p), LAZYATTN_STATUS_OK);
    assert_int_equal(p.n_prefill, 10); /* b's own miss: caches share no entries */
    lazyattn_request_destroy(ra);
    lazyattn_request *ra2 = one_request(a, doc, 10);
    lt_assert_status(lazyattn_request_get_plan(ra2, &p), LAZYATTN_STATUS_OK);
    assert_int_equal(p.hit_tokens, 10); /* a's committed entry survived */
    lt_assert_status(lazyattn_cache_validate(a), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_validate(b), LAZYATTN_STATUS_OK);
    lazyattn_cache_stats sa, sb;
    lazyattn_cache_get_stats(a, &sa);
    lazyattn_cache_get_stats(b, &sb);
    /* 10 doc tokens = 3 blocks each, 4 reserved new tokens = 1 block each */
    assert_int_equal(sa.bytes_in_use / (2 * BS * 8 * 2), 3 + 1);
    assert_int_equal(sb.bytes_in_use / (2 * BS * 8 * 2), 3 + 1);
    lazyattn_request_destroy(ra2);
    lazyattn_request_destroy(rb);
    lazyattn_cache_destroy(a);
    lazyattn_cache_destroy(b); /* frees the pool */
}

/* The magic word at the start of every pool, cache and request: a handle of
 * another kind (or memory that never was one) is refused by name. Reading a
 * destroyed handle cannot be tested honestly (that is reading freed memory);
 * these are the cases the same check covers that can. */
static void test_handles_of_the_wrong_kind(void **state) {
    (void)state;
    static const int32_t doc[5] = {2, 7, 1, 8, 2};
    lazyattn_pool *pool = bookkeeping_pool(BS, 16);
    lazyattn_cache *cache = NULL;
    lt_assert_status(lazyattn_cache_create(pool, NULL, &cache), LAZYATTN_STATUS_OK);
    lazyattn_request *req = one_request(cache, doc, 5);
    static uint64_t zeros[64]; /* a zeroed "object" */

    lazyattn_cache_stats s;
    lazyattn_cache *as_cache[3] = {(lazyattn_cache *)pool, (lazyattn_cache *)req,
                                   (lazyattn_cache *)zeros};
    for (int i = 0; i < 3; i++) {
        lazyattn_cache *c = as_cache[i];
        lt_assert_status(lazyattn_cache_get_stats(c, &s), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_string_equal(lazyattn_last_error(),
                            "lazyattn_cache_get_stats: not a live cache (destroyed, or another "
                            "kind of handle)");
        lt_assert_status(lazyattn_cache_reset_stats(c), LAZYATTN_STATUS_INVALID_ARGUMENT);
        lt_assert_status(lazyattn_cache_trim(c, 0), LAZYATTN_STATUS_INVALID_ARGUMENT);
        lt_assert_status(lazyattn_cache_validate(c), LAZYATTN_STATUS_INVALID_ARGUMENT);
        lazyattn_request_desc d = {0, NULL, 0, NULL, NULL, 0, NULL, 1};
        lazyattn_request *r = NULL;
        lt_assert_status(lazyattn_request_create(c, &d, &r), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_null(r);
        assert_non_null(strstr(lazyattn_last_error(), "not a live cache"));
        lazyattn_cache_destroy(c); /* left alone */
        assert_non_null(strstr(lazyattn_last_error(), "lazyattn_cache_destroy: not a live cache"));
    }
    lazyattn_request *as_req[3] = {(lazyattn_request *)pool, (lazyattn_request *)cache,
                                   (lazyattn_request *)zeros};
    for (int i = 0; i < 3; i++) {
        lazyattn_request *r = as_req[i];
        lazyattn_plan p;
        int32_t slot, pos;
        lt_assert_status(lazyattn_request_get_plan(r, &p), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(lazyattn_last_error(), "not a live request"));
        lt_assert_status(lazyattn_request_commit(r), LAZYATTN_STATUS_INVALID_ARGUMENT);
        lt_assert_status(lazyattn_request_append(r, 1, &slot, &pos),
                         LAZYATTN_STATUS_INVALID_ARGUMENT);
        lazyattn_request_destroy(r); /* left alone */
        assert_non_null(strstr(lazyattn_last_error(), "not a live request"));
    }
    lazyattn_pool *as_pool[3] = {(lazyattn_pool *)cache, (lazyattn_pool *)req,
                                 (lazyattn_pool *)zeros};
    for (int i = 0; i < 3; i++) {
        lazyattn_pool *p = as_pool[i];
        lazyattn_pool_info info;
        lazyattn_pool_config pc;
        int32_t id = 0;
        lt_assert_status(lazyattn_pool_get_info(p, &info), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(lazyattn_last_error(), "not a live pool"));
        lt_assert_status(lazyattn_pool_get_config(p, &pc), LAZYATTN_STATUS_INVALID_ARGUMENT);
        lt_assert_status(lazyattn_pool_alloc(p, 1, &id), LAZYATTN_STATUS_INVALID_ARGUMENT);
        lt_assert_status(lazyattn_pool_free(p, 1, &id), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_false(lazyattn_pool_is_allocated(p, 0));
        assert_null(lazyattn_pool_k_buffer(p, 0));
        assert_non_null(strstr(lazyattn_last_error(), "not a live pool"));
        lazyattn_cache *c = NULL;
        lt_assert_status(lazyattn_cache_create(p, NULL, &c), LAZYATTN_STATUS_INVALID_ARGUMENT);
        assert_null(c);
        lazyattn_pool_destroy(p); /* left alone */
        assert_non_null(strstr(lazyattn_last_error(), "lazyattn_pool_destroy: not a live pool"));
    }
    for (size_t i = 0; i < sizeof zeros / sizeof *zeros; i++) assert_int_equal(zeros[i], 0);

    /* The real objects were left alone and still work. */
    lazyattn_plan p;
    lt_assert_status(lazyattn_request_get_plan(req, &p), LAZYATTN_STATUS_OK);
    assert_int_equal(p.n_prefill, 5);
    lt_assert_status(lazyattn_request_commit(req), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
    lazyattn_request_destroy(req);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_info info;
    lt_assert_status(lazyattn_pool_get_info(pool, &info), LAZYATTN_STATUS_OK);
    assert_int_equal(info.n_used, 0);
    lazyattn_pool_destroy(pool);
}

// ---- lazyattn_last_error() is per thread ----

typedef struct error_worker {
    int id;
    pthread_barrier_t *both_failed;
    char seen[512];
} error_worker;

/* Each thread fails a different call, waits until the other has failed
 * too, then reads its own message back. */
static void *error_main(void *arg) {
    error_worker *w = arg;
    int32_t id = 0;
    if (w->id == 0)
        lazyattn_pool_alloc(NULL, 1, &id);
    else
        lazyattn_cache_trim(NULL, 0);
    pthread_barrier_wait(w->both_failed);
    snprintf(w->seen, sizeof w->seen, "%s", lazyattn_last_error());
    return NULL;
}

static void test_last_error_is_per_thread(void **state) {
    (void)state;
    pthread_barrier_t both;
    assert_int_equal(pthread_barrier_init(&both, NULL, 2), 0);
    error_worker w[2] = {{0, &both, ""}, {1, &both, ""}};
    lazyattn_cache_get_stats(NULL, NULL); /* this thread's own message */
    run_threads(error_main, w, sizeof *w, 2);
    pthread_barrier_destroy(&both);
    assert_string_equal(w[0].seen, "lazyattn_pool_alloc: pool is NULL");
    assert_string_equal(w[1].seen, "lazyattn_cache_trim: cache is NULL");
    assert_string_equal(lazyattn_last_error(), "lazyattn_cache_get_stats: NULL argument");
}

// ---- one context, attention objects created on several threads (device) ----

typedef struct attn_worker {
    int id;
    uint64_t seed;
    lazyattn_context *ctx;
    pthread_barrier_t *start; /* every thread creates its first object at once */
    int n_made;
    double worst;
    char failure[512];
} attn_worker;

static void attn_config(int which, lazyattn_attention_config *c) {
    lazyattn_attention_config_default(c);
    /* Different head dims: different programs (kernels are specialised by -D). */
    c->n_q_heads = 2, c->n_kv_heads = 1, c->head_dim = which ? 64 : 32, c->block_size = 8;
    c->dtype = LAZYATTN_DTYPE_F32;
    c->rope.style = which ? LAZYATTN_ROPE_GPTJ : LAZYATTN_ROPE_NEOX;
}

/* Creates attention objects (two configurations, each also made by other
 * threads at the same time) and checks each against the RoPE reference. */
static void attn_loop(attn_worker *w) {
    lt_rng r = {w->seed};
    for (int k = 0; k < 2; k++) {
        lazyattn_attention_config c;
        attn_config((w->id + k) % 2, &c);
        lazyattn_attention *attn = NULL;
        if (k == 0) pthread_barrier_wait(w->start);
        int st = lazyattn_attention_create(w->ctx, &c, &attn);
        W_CHECK(w, st == 0, "attention_create: %s", lazyattn_last_error());
        w->n_made++;
        enum { N = 3, H = 2, MAX_D = 64 };
        const int D = c.head_dim;
        float x[N * H * MAX_D], y[N * H * MAX_D];
        int32_t pos[N] = {lt_int(&r, 0, 100), lt_int(&r, 1000, 70000), (1 << 24) - 1};
        lt_fill(&r, x, N * H * D, 1.0f);
        size_t bytes = sizeof(float) * N * H * D;
        cl_mem xm = lt_buffer(w->ctx, x, bytes), pm = lt_buffer(w->ctx, pos, sizeof pos);
        cl_command_queue q = lazyattn_context_queue(w->ctx);
        cl_event done = NULL;
        st = xm && pm ? lazyattn_rope_apply(attn, N, H, xm, pm, NULL, &done) : -1;
        cl_int err = st == 0 ? clEnqueueReadBuffer(q, xm, CL_TRUE, 0, bytes, y, 1, &done, NULL)
                             : CL_SUCCESS;
        if (done) clReleaseEvent(done);
        if (xm) clReleaseMemObject(xm);
        if (pm) clReleaseMemObject(pm);
        lazyattn_attention_destroy(attn);
        W_CHECK(w, st == 0 && err == CL_SUCCESS, "rope_apply: %d %s / read %d", st,
                lazyattn_last_error(), (int)err);
        for (int t = 0; t < N * H; t++) {
            double ref[MAX_D];
            W_CHECK(w, lazyattn_reference_rope(&c, pos[t / H], x + t * D, ref) == 0, "reference");
            double e = lazyattn_normalised_error(y + t * D, ref, D);
            if (e > w->worst) w->worst = e;
            W_CHECK(w, e <= 5e-6, "config %d token %d head %d: error %.3g", (w->id + k) % 2, t / H,
                    t % H, e);
        }
    }
}

static void *attn_main(void *arg) {
    attn_loop(arg);
    return NULL;
}

static int count_programs(lazyattn_context *ctx) {
    int n = 0;
    for (lz_program_entry *e = ctx->programs; e; e = e->next, n++)
        for (lz_program_entry *o = e->next; o; o = o->next)
            if (strcmp(e->key, o->key) == 0) {
                print_error("program cached twice: %s\n", e->key);
                fail();
            }
    return n;
}

static void test_attention_objects_created_on_threads(void **state) {
    (void)state;
    /* A context of its own: its program cache starts empty. */
    lazyattn_context *ctx = NULL;
    lt_assert_status(lazyattn_context_create(NULL, &ctx), LAZYATTN_STATUS_OK);
    uint64_t seed = lt_seed();
    int before = count_programs(ctx);
    assert_int_equal(before, 0);
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, N_THREADS), 0);
    attn_worker w[N_THREADS];
    memset(w, 0, sizeof w);
    for (int t = 0; t < N_THREADS; t++) {
        w[t].id = t;
        w[t].seed = seed + 31 * (uint64_t)t;
        w[t].ctx = ctx;
        w[t].start = &start;
    }
    run_threads(attn_main, w, sizeof *w, N_THREADS);
    pthread_barrier_destroy(&start);
    double worst = 0;
    for (int t = 0; t < N_THREADS; t++) {
        if (w[t].failure[0]) print_error("thread %d: %s\n", t, w[t].failure);
        assert_string_equal(w[t].failure, "");
        assert_int_equal(w[t].n_made, 2);
        if (w[t].worst > worst) worst = w[t].worst;
    }
    int after = count_programs(ctx); /* fails on a key cached twice */
    assert_true(after > before);
    /* The same two configurations again, on this thread: all cached. */
    for (int k = 0; k < 2; k++) {
        lazyattn_attention_config c;
        attn_config(k, &c);
        lazyattn_attention *attn = NULL;
        lt_assert_status(lazyattn_attention_create(ctx, &c, &attn), LAZYATTN_STATUS_OK);
        lazyattn_attention_destroy(attn);
    }
    assert_int_equal(count_programs(ctx), after);
    printf("# %d threads x 2 attention objects: %d programs cached, worst RoPE error %.2e\n",
           N_THREADS, after - before, worst);
    lazyattn_context_destroy(ctx);
}

/* A device pool destroyed with a cache attached says so through the
 * context's log callback, and is freed by the cache's destroy. */
typedef struct log_record {
    int n_warn;
    char last[1024];
} log_record;

static void record_log(void *user, lazyattn_log_level level, const char *message) {
    log_record *rec = user;
    if (level == LAZYATTN_LOG_WARN) {
        rec->n_warn++;
        snprintf(rec->last, sizeof rec->last, "%s", message);
    }
}

static void test_device_pool_destroy_logs_attached_caches(void **state) {
    (void)state;
    log_record rec = {0, ""};
    lazyattn_context_options o;
    lazyattn_context_options_init(&o);
    o.log = record_log;
    o.log_user = &rec;
    lazyattn_context *ctx = NULL;
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_OK);
    lazyattn_pool_config pc = {1, 1, 16, BS, LAZYATTN_DTYPE_F16, 16 * 2 * BS * 16 * 2,
                               LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *pool = NULL;
    lt_assert_status(lazyattn_pool_create(ctx, &pc, &pool), LAZYATTN_STATUS_OK);
    lazyattn_cache *cache = NULL;
    lt_assert_status(lazyattn_cache_create(pool, NULL, &cache), LAZYATTN_STATUS_OK);
    cl_mem k = lazyattn_pool_k_buffer(pool, 0);
    assert_non_null(k);
    rec.n_warn = 0;
    lazyattn_pool_destroy(pool);
    assert_int_equal(rec.n_warn, 1);
    assert_string_equal(rec.last, "lazyattn_pool_destroy: 1 cache still attached; the pool is "
                                  "freed when the last of them is destroyed");
    /* The device buffer is still the pool's, usable by the cache's plans. */
    cl_uint refs = 0;
    assert_int_equal(clGetMemObjectInfo(k, CL_MEM_REFERENCE_COUNT, sizeof refs, &refs, NULL),
                     CL_SUCCESS);
    assert_true(refs >= 1);
    lazyattn_cache_destroy(cache);
    lazyattn_context_destroy(ctx);
}

// ---- one cache used from two threads at once (forbidden): refused ----

/* A tier whose get sleeps (or waits at a gate), so that a thread sits
 * inside lazyattn_request_create while another one comes in. Finds
 * nothing: every document is a miss, looked up again next time. */
typedef struct slow_store {
    atomic_int gets;
    atomic_int gate;   /* 1: the next get waits inside until gate is 0 */
    atomic_int inside; /* a get is waiting at the gate */
} slow_store;

static void nap_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static int slow_get(void *impl, lazyattn_doc_key k, lazyattn_store_value *v) {
    slow_store *s = impl;
    (void)k, (void)v;
    atomic_fetch_add(&s->gets, 1);
    if (atomic_load(&s->gate)) {
        atomic_store(&s->inside, 1);
        while (atomic_load(&s->gate)) nap_us(100);
    } else {
        nap_us(1000);
    }
    return LAZYATTN_STATUS_NOT_FOUND;
}
static void slow_release(void *impl, lazyattn_store_value *v) { (void)impl, (void)v; }
static int slow_put(void *impl, lazyattn_doc_key k, const void *d, size_t n) {
    (void)impl, (void)k, (void)d, (void)n;
    return LAZYATTN_STATUS_IO;
}
static int slow_exists(void *impl, lazyattn_doc_key k, int *e) {
    (void)impl, (void)k;
    *e = 0;
    return LAZYATTN_STATUS_OK;
}
static int slow_remove(void *impl, lazyattn_doc_key k) {
    (void)impl, (void)k;
    return LAZYATTN_STATUS_NOT_FOUND;
}

static void count_busy_log(void *user, lazyattn_log_level level, const char *message) {
    if (level == LAZYATTN_LOG_ERROR && strstr(message, "in use by another call"))
        atomic_fetch_add((atomic_int *)user, 1);
}

#define BUSY_ITERS 60
#define BUSY_MSG ": the cache is in use by another call (a cache and its requests belong to one " \
                 "thread at a time)"

typedef struct busy_worker {
    int id;
    lazyattn_cache *cache;
    long ok, busy, destroy_refused;
    char failure[512];
} busy_worker;

/* OK, or IN_USE with fn's message (counted); anything else a failure. */
static int busy_or_ok(busy_worker *w, int st, const char *fn) {
    char want[256];
    snprintf(want, sizeof want, "%s%s", fn, BUSY_MSG);
    if (st == LAZYATTN_STATUS_IN_USE && strcmp(lazyattn_last_error(), want) == 0) {
        w->busy++;
        return 0;
    }
    if (st != LAZYATTN_STATUS_OK) {
        W_FAIL(w, "%s: %s (%s)", fn, lazyattn_status_string(st), lazyattn_last_error());
        return 0;
    }
    return 1;
}

/* BUSY_ITERS requests planned, a refused create tried again a little later
 * (at most 100 times as often). */
static void busy_loop(busy_worker *w) {
    for (int it = 0; w->ok < BUSY_ITERS && it < 100 * BUSY_ITERS && !w->failure[0]; it++) {
        int32_t doc[8], q[2] = {1, 2};
        for (int t = 0; t < 8; t++) doc[t] = 100000 * (w->id + 1) + 10 * it + t; /* never cached */
        const int32_t *docs[1] = {doc};
        int32_t len = 8;
        lazyattn_request_desc d = {0, NULL, 1, docs, &len, 2, q, 1};
        lazyattn_request *r = NULL;
        if (!busy_or_ok(w, lazyattn_request_create(w->cache, &d, &r), "lazyattn_request_create")) {
            nap_us(200);
            continue;
        }
        W_CHECK(w, r != NULL, "request_create: OK without a request");
        w->ok++;
        lazyattn_plan p;
        if (busy_or_ok(w, lazyattn_request_get_plan(r, &p), "lazyattn_request_get_plan"))
            W_CHECK(w, p.n_segments == 2 && p.n_prefill == 10 && p.n_entries == 3,
                    "plan of %d segments, %d prefilled, %d entries", p.n_segments, p.n_prefill,
                    p.n_entries);
        int32_t slot, pos;
        busy_or_ok(w, lazyattn_request_append(r, 1, &slot, &pos), "lazyattn_request_append");
        lazyattn_cache_stats st;
        busy_or_ok(w, lazyattn_cache_get_stats(w->cache, &st), "lazyattn_cache_get_stats");
        /* A destroy refused while the other thread is inside leaves the
         * request live: tried again. A failed parse marks the last error
         * first, so that a refusal shows as a new message. */
        for (int tries = 0;; tries++) {
            lazyattn_cache_policy pol;
            lazyattn_cache_policy_parse("no-such-policy", &pol);
            lazyattn_request_destroy(r);
            if (strstr(lazyattn_last_error(), "no-such-policy")) break;
            W_CHECK(w,
                    strcmp(lazyattn_last_error(), "lazyattn_request_destroy" BUSY_MSG
                                                  "; left alone") == 0,
                    "request_destroy: %s", lazyattn_last_error());
            W_CHECK(w, tries < 100000, "request_destroy refused 100000 times");
            w->destroy_refused++;
            nap_us(50);
        }
    }
}

static void *busy_main(void *arg) {
    busy_loop(arg);
    return NULL;
}

static void test_one_cache_two_threads_refused(void **state) {
    (void)state;
    atomic_int logged = 0;
    lazyattn_context_options o;
    lazyattn_context_options_init(&o);
    o.log = count_busy_log;
    o.log_user = &logged;
    lazyattn_context *ctx = NULL;
    lt_assert_status(lazyattn_context_create(&o, &ctx), LAZYATTN_STATUS_OK);
    lazyattn_pool_config pc = {1, 1, 16, BS, LAZYATTN_DTYPE_F16, 64 * 2 * BS * 16 * 2,
                               LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *pool = NULL;
    lt_assert_status(lazyattn_pool_create(ctx, &pc, &pool), LAZYATTN_STATUS_OK);
    lazyattn_cache *cache = NULL;
    lt_assert_status(lazyattn_cache_create(pool, NULL, &cache), LAZYATTN_STATUS_OK);
    slow_store ss = {0};
    lazyattn_store_ops ops = {"slow", slow_get, slow_release, slow_put, slow_exists, slow_remove,
                              NULL};
    lazyattn_store *store = NULL;
    lt_assert_status(lazyattn_store_create(&ops, &ss, &store), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_set_tier(cache, store, LAZYATTN_TIER_READ_ONLY),
                     LAZYATTN_STATUS_OK);

    /* Held at the gate inside request_create on a worker: every call of
     * this thread on the cache is refused, destroys do nothing. */
    busy_worker gated = {.id = 2, .cache = cache};
    atomic_store(&ss.gate, 1);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, busy_main, &gated), 0);
    while (!atomic_load(&ss.inside)) nap_us(100);
    lazyattn_cache_stats st;
    lt_assert_status(lazyattn_cache_get_stats(cache, &st), LAZYATTN_STATUS_IN_USE);
    assert_string_equal(lazyattn_last_error(), "lazyattn_cache_get_stats" BUSY_MSG);
    lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_IN_USE);
    lt_assert_status(lazyattn_cache_trim(cache, 0), LAZYATTN_STATUS_IN_USE);
    lazyattn_probe_summary sum;
    int32_t tok[3] = {1, 2, 3}, len = 3;
    const int32_t *docs[1] = {tok};
    lazyattn_request_desc d = {0, NULL, 1, docs, &len, 0, NULL, 0};
    lt_assert_status(lazyattn_cache_probe(cache, &d, NULL, 0, &sum), LAZYATTN_STATUS_IN_USE);
    lazyattn_request *r = (lazyattn_request *)1;
    lt_assert_status(lazyattn_request_create(cache, &d, &r), LAZYATTN_STATUS_IN_USE);
    assert_null(r);
    lazyattn_cache_destroy(cache); /* refused and logged: the worker goes on */
    assert_string_equal(lazyattn_last_error(), "lazyattn_cache_destroy" BUSY_MSG "; left alone");
    assert_int_equal(atomic_load(&logged), 1);
    atomic_store(&ss.gate, 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    if (gated.failure[0]) fail_msg("gated worker: %s", gated.failure);
    assert_int_equal(gated.ok, BUSY_ITERS);

    /* Two threads looping on the cache: each call succeeds or is refused. */
    busy_worker w[2] = {{.id = 0, .cache = cache}, {.id = 1, .cache = cache}};
    int gets = atomic_load(&ss.gets);
    run_threads(busy_main, w, sizeof w[0], 2);
    long busy = 0, ok = 0, refused = 0;
    for (int t = 0; t < 2; t++) {
        if (w[t].failure[0]) fail_msg("thread %d: %s", t, w[t].failure);
        busy += w[t].busy;
        ok += w[t].ok;
        refused += w[t].destroy_refused;
    }
    printf("# one cache, two threads: %ld requests, %ld calls refused as busy (%ld destroys)\n",
           ok, busy, refused);
    assert_true(busy >= 1);
    assert_true(w[0].ok == BUSY_ITERS && w[1].ok == BUSY_ITERS);
    assert_int_equal(atomic_load(&ss.gets) - gets, ok); /* one lookup per request planned */
    assert_int_equal(atomic_load(&logged), 1 + refused);
    lt_assert_status(lazyattn_cache_validate(cache), LAZYATTN_STATUS_OK);
    lt_assert_status(lazyattn_cache_get_stats(cache, &st), LAZYATTN_STATUS_OK);
    assert_int_equal(st.n_requests_live, 0);
    assert_int_equal(st.requests, ok + BUSY_ITERS);
    assert_int_equal(st.bytes_in_use, 0);
    lazyattn_cache_destroy(cache);
    lazyattn_store_destroy(store);
    lazyattn_pool_destroy(pool);
    lazyattn_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest host[] = {
        cmocka_unit_test(test_pool_alloc_free_from_threads),
        cmocka_unit_test(test_caches_on_threads_share_one_pool),
        cmocka_unit_test(test_pool_destroyed_before_its_caches),
        cmocka_unit_test(test_handles_of_the_wrong_kind),
        cmocka_unit_test(test_last_error_is_per_thread),
    };
    const struct CMUnitTest device[] = {
        cmocka_unit_test(test_attention_objects_created_on_threads),
        cmocka_unit_test(test_device_pool_destroy_logs_attached_caches),
        cmocka_unit_test(test_one_cache_two_threads_refused),
    };
    int failed = cmocka_run_group_tests_name("threads_host", host, NULL, NULL);
    failed += cmocka_run_group_tests_name("threads_device", device, lt_context_setup,
                                          lt_context_teardown);
    return failed;
}
