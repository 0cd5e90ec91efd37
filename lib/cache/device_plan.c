/* SPDX-License-Identifier: Apache-2.0 */
/* Device-resident plans: a batch's block tables kept on the device and
 * updated in place, writing only what changed since the last update (found
 * by comparing with a host shadow of the device contents). */
#include "checked_size.h"
#include "internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Changed ranges closer than this are written as one (the unchanged bytes
 * in between cost less than another enqueued write). */
#define LZ_PLAN_MERGE_GAP_BYTES 4096
/* At most this many writes per array and update: beyond, the ranges with
 * the smallest gaps are merged (a batch of long sequences each changing its
 * tail is a few writes carrying some unchanged entries, not one per
 * sequence). */
#define LZ_PLAN_MAX_WRITES 8

struct lazyattn_device_plan {
    uint32_t magic; /* LZ_MAGIC_DEVICE_PLAN while live */
    lazyattn_context *ctx;
    int max_seqs;
    int capacity; /* entries the device table and entry_pos hold */
    cl_mem table, entry_pos, seq_offsets, q_pos;
    /* host shadow of the device contents (exact where `valid`) */
    int shadow_cap;     /* entries of sh_table and sh_pos (>= capacity) */
    uint64_t *sh_table; /* [shadow_cap] */
    int32_t *sh_pos;    /* [shadow_cap] */
    int32_t *sh_offsets; /* [max_seqs + 1] */
    int32_t *sh_qpos;    /* [max_seqs] */
    int valid;           /* the device holds exactly the shadow's first n_entries etc. */
    /* Stale tables refused: the pool of the requests the last update came from
     * (held: lz_pool_hold), each entry's block generation then (0: not a
     * request's entry, not checked), and the pool's count of frees when the
     * blocks were last seen unchanged. */
    lazyattn_pool *pool;
    uint32_t *sh_gen;    /* [shadow_cap] */
    int64_t frees_seen;
    /* the last successful update (0 after a failed one) */
    int n_seqs, n_entries, max_entries;
    int64_t updates, writes, bytes_written, entries_written, grows;
    /* Per-update scratch kept between updates (grown, never shrunk): the
     * changed ranges, and the staging block the writes read from, busy
     * until staging_busy (the last write that read it; NULL: idle) is done. */
    uint8_t *ranges;
    size_t ranges_cap;
    uint8_t *staging;
    size_t staging_cap;
    cl_event staging_busy;
    int64_t host_allocs; /* host allocations and reallocations made */
};

/* ---- fault injection for the tests of the error paths ---- */

static int lz_dp_fail_countdown;

void lz_device_plan_fail_at(int nth) { lz_dp_fail_countdown = nth > 0 ? nth : 0; }

static int lz_dp_fault(void) {
    return lz_dp_fail_countdown > 0 && --lz_dp_fail_countdown == 0;
}

static void *lz_dp_malloc(size_t n) { return lz_dp_fault() ? NULL : malloc(n ? n : 1); }

static void *lz_dp_realloc(void *p, size_t n) { return lz_dp_fault() ? NULL : realloc(p, n); }

/* Scratch *buf of *cap bytes holding at least need bytes (lz_grow_bytes):
 * no allocation when it already does. 0, or -1 when out of host memory. */
static int lz_dp_scratch(lazyattn_device_plan *p, uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    p->host_allocs++;
    if (lz_dp_fault()) return -1;
    return lz_grow_bytes(buf, cap, need, SIZE_MAX);
}

/* Waits until no enqueued write reads the staging block. */
static void lz_dp_staging_idle(lazyattn_device_plan *p) {
    if (!p->staging_busy) return;
    clWaitForEvents(1, &p->staging_busy);
    clReleaseEvent(p->staging_busy);
    p->staging_busy = NULL;
}

int64_t lz_device_plan_host_allocs(const lazyattn_device_plan *plan) { return plan->host_allocs; }

static cl_mem lz_dp_buffer(lazyattn_context *ctx, size_t bytes, cl_int *err) {
    if (lz_dp_fault()) {
        *err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
        return NULL;
    }
    cl_mem m = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY, bytes, NULL, err);
    return *err == CL_SUCCESS ? m : NULL;
}

static cl_int lz_dp_write(cl_command_queue q, cl_mem m, size_t offset, size_t bytes,
                          const void *src, cl_event *ev) {
    if (lz_dp_fault()) return CL_OUT_OF_RESOURCES;
    return clEnqueueWriteBuffer(q, m, CL_FALSE, offset, bytes, src, 0, NULL, ev);
}

static cl_int lz_dp_copy(cl_command_queue q, cl_mem src, cl_mem dst, size_t bytes) {
    if (lz_dp_fault()) return CL_OUT_OF_RESOURCES;
    return clEnqueueCopyBuffer(q, src, dst, 0, 0, bytes, 0, NULL, NULL);
}

static void lz_dp_release(cl_mem *m) {
    if (*m) clReleaseMemObject(*m);
    *m = NULL;
}

/* ---- create, destroy ---- */

void lazyattn_device_plan_config_init(lazyattn_device_plan_config *config) {
    if (!config) return;
    memset(config, 0, sizeof *config);
    config->max_seqs = 1;
    config->initial_entries = 256;
}

static void lz_dp_free(lazyattn_device_plan *p) {
    lz_dp_staging_idle(p);
    free(p->staging);
    free(p->ranges);
    lz_dp_release(&p->table);
    lz_dp_release(&p->entry_pos);
    lz_dp_release(&p->seq_offsets);
    lz_dp_release(&p->q_pos);
    free(p->sh_table);
    free(p->sh_pos);
    free(p->sh_offsets);
    free(p->sh_qpos);
    free(p->sh_gen);
    if (p->pool) lz_pool_unhold(p->pool);
    p->magic = 0;
    free(p);
}

/* Bytes of n elements of size `size` for a device buffer: checked product,
 * within the device's largest allocation. */
static int lz_dp_bytes(const lazyattn_context *ctx, size_t n, size_t size, const char *fn,
                       const char *what, size_t *bytes) {
    LZ_TRY(lz_size_product(bytes, fn, what, n, size, 1));
    if (ctx->max_alloc_size && (cl_ulong)*bytes > ctx->max_alloc_size)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY,
                       "%s: %s = %zu bytes exceed the device's largest allocation (%llu bytes)",
                       fn, what, *bytes, (unsigned long long)ctx->max_alloc_size);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_device_plan_create(lazyattn_context *ctx, const lazyattn_device_plan_config *config,
                                lazyattn_device_plan **out) {
    static const char fn[] = "lazyattn_device_plan_create";
    LZ_CHECK_ARG(out != NULL, "%s: out is NULL", fn);
    *out = NULL;
    LZ_CHECK_ARG(ctx != NULL, "%s: ctx is NULL", fn);
    lazyattn_device_plan_config cfg;
    if (config)
        cfg = *config;
    else
        lazyattn_device_plan_config_init(&cfg);
    LZ_CHECK_ARG(cfg.max_seqs >= 1 && cfg.max_seqs <= LAZYATTN_DEVICE_PLAN_MAX_SEQS,
                 "%s: max_seqs %d outside 1..%d", fn, cfg.max_seqs,
                 LAZYATTN_DEVICE_PLAN_MAX_SEQS);
    LZ_CHECK_ARG(cfg.initial_entries >= 1, "%s: initial_entries %d must be >= 1", fn,
                 cfg.initial_entries);
    size_t table_bytes = 0, pos_bytes = 0, off_bytes = 0, qpos_bytes = 0;
    LZ_TRY(lz_dp_bytes(ctx, (size_t)cfg.initial_entries, sizeof(uint64_t), fn,
                       "table bytes (initial_entries x 8)", &table_bytes));
    LZ_TRY(lz_dp_bytes(ctx, (size_t)cfg.initial_entries, sizeof(int32_t), fn,
                       "entry_pos bytes (initial_entries x 4)", &pos_bytes));
    LZ_TRY(lz_dp_bytes(ctx, (size_t)cfg.max_seqs + 1, sizeof(int32_t), fn,
                       "seq_offsets bytes ((max_seqs + 1) x 4)", &off_bytes));
    LZ_TRY(lz_dp_bytes(ctx, (size_t)cfg.max_seqs, sizeof(int32_t), fn,
                       "q_pos bytes (max_seqs x 4)", &qpos_bytes));

    lazyattn_device_plan *p = lz_dp_malloc(sizeof *p);
    if (!p) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: the plan", fn);
    memset(p, 0, sizeof *p);
    p->host_allocs = 6; /* the plan and its five shadows */
    p->ctx = ctx;
    p->max_seqs = cfg.max_seqs;
    p->sh_table = lz_dp_malloc(table_bytes);
    p->sh_pos = lz_dp_malloc(pos_bytes);
    p->sh_offsets = lz_dp_malloc(off_bytes);
    p->sh_qpos = lz_dp_malloc(qpos_bytes);
    p->sh_gen = lz_dp_malloc(pos_bytes);
    if (!p->sh_table || !p->sh_pos || !p->sh_offsets || !p->sh_qpos || !p->sh_gen) {
        lz_dp_free(p);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: the host shadow of %d entries", fn,
                       cfg.initial_entries);
    }
    p->shadow_cap = cfg.initial_entries;
    cl_int err;
    const char *what = "seq_offsets";
    p->seq_offsets = lz_dp_buffer(ctx, off_bytes, &err);
    if (err == CL_SUCCESS) what = "q_pos", p->q_pos = lz_dp_buffer(ctx, qpos_bytes, &err);
    if (err == CL_SUCCESS) what = "table", p->table = lz_dp_buffer(ctx, table_bytes, &err);
    if (err == CL_SUCCESS) what = "entry_pos", p->entry_pos = lz_dp_buffer(ctx, pos_bytes, &err);
    if (err != CL_SUCCESS) {
        lz_dp_free(p);
        char msg[96];
        snprintf(msg, sizeof msg, "%s: clCreateBuffer (%s)", fn, what);
        return lz_cl_fail(err, msg);
    }
    p->capacity = cfg.initial_entries;
    p->magic = LZ_MAGIC_DEVICE_PLAN;
    *out = p;
    return LAZYATTN_STATUS_OK;
}

void lazyattn_device_plan_destroy(lazyattn_device_plan *plan) {
    if (!plan) return;
    if (!lz_live_for_destroy(plan->magic, LZ_MAGIC_DEVICE_PLAN, "lazyattn_device_plan_destroy",
                             "device plan"))
        return;
    lz_dp_free(plan);
}

/* ---- growth ---- */

/* Capacity for at least `need` entries: x2 steps, INT_MAX at most. Host
 * shadow first (it keeps its contents), then new device buffers with the
 * old contents copied on the device. On failure the device buffers are
 * those of before (the shadow may be larger: harmless). */
static int lz_dp_grow(lazyattn_device_plan *p, int need, cl_command_queue q, const char *fn) {
    int cap = p->capacity;
    while (cap < need) cap = cap > INT_MAX / 2 ? INT_MAX : cap * 2;
    size_t table_bytes = 0, pos_bytes = 0;
    LZ_TRY(lz_dp_bytes(p->ctx, (size_t)cap, sizeof(uint64_t), fn, "table bytes (capacity x 8)",
                       &table_bytes));
    LZ_TRY(lz_dp_bytes(p->ctx, (size_t)cap, sizeof(int32_t), fn, "entry_pos bytes (capacity x 4)",
                       &pos_bytes));
    if (cap > p->shadow_cap) {
        p->host_allocs += 3; /* the three reallocations below */
        uint64_t *t = lz_dp_realloc(p->sh_table, table_bytes);
        if (!t) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: shadow of %d entries", fn, cap);
        p->sh_table = t;
        int32_t *e = lz_dp_realloc(p->sh_pos, pos_bytes);
        if (!e) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: shadow of %d entries", fn, cap);
        p->sh_pos = e;
        uint32_t *g = lz_dp_realloc(p->sh_gen, pos_bytes);
        if (!g) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: shadow of %d entries", fn, cap);
        p->sh_gen = g;
        p->shadow_cap = cap;
    }
    cl_int err;
    cl_mem table = lz_dp_buffer(p->ctx, table_bytes, &err), entry_pos = NULL;
    if (err == CL_SUCCESS) entry_pos = lz_dp_buffer(p->ctx, pos_bytes, &err);
    /* what the device holds now moves with the buffers */
    if (err == CL_SUCCESS && p->valid && p->n_entries > 0) {
        err = lz_dp_copy(q, p->table, table, (size_t)p->n_entries * sizeof(uint64_t));
        if (err == CL_SUCCESS)
            err = lz_dp_copy(q, p->entry_pos, entry_pos, (size_t)p->n_entries * sizeof(int32_t));
    }
    if (err != CL_SUCCESS) {
        lz_dp_release(&table); /* an enqueued copy keeps it alive until done */
        lz_dp_release(&entry_pos);
        char msg[96];
        snprintf(msg, sizeof msg, "%s: growing the tables to %d entries", fn, cap);
        return lz_cl_fail(err, msg);
    }
    lz_dp_release(&p->table);
    lz_dp_release(&p->entry_pos);
    p->table = table;
    p->entry_pos = entry_pos;
    p->capacity = cap;
    p->grows++;
    return LAZYATTN_STATUS_OK;
}

/* ---- update ---- */

typedef enum lz_dp_array { LZ_DP_TABLE, LZ_DP_POS, LZ_DP_OFFSETS, LZ_DP_QPOS, LZ_DP_ARRAYS } lz_dp_array;

/* Changed element ranges of one array, in increasing order, merged when
 * the gap is small. */
typedef struct lz_dp_ranges {
    size_t elem;      /* bytes of one element */
    size_t *first;    /* [cap] */
    size_t *count;    /* [cap] */
    int n, cap;
    size_t bytes;     /* all ranges' bytes */
} lz_dp_ranges;

static void lz_dp_range_add(lz_dp_ranges *r, size_t first, size_t count) {
    if (count == 0) return;
    if (r->n > 0) {
        size_t end = r->first[r->n - 1] + r->count[r->n - 1];
        if (first >= end && (first - end) * r->elem <= LZ_PLAN_MERGE_GAP_BYTES) {
            r->bytes += (first + count - end) * r->elem;
            r->count[r->n - 1] = first + count - r->first[r->n - 1];
            return;
        }
    }
    /* cap is at least the number of calls (one per sequence or one) */
    r->first[r->n] = first;
    r->count[r->n] = count;
    r->n++;
    r->bytes += count * r->elem;
}

/* Copies src[0 .. n) into shadow[0 .. n) and returns the changed range
 * [*f, *l) (empty when f == l): elements at index >= known (not known to
 * the device) always count as changed. elem-sized values compared as bytes. */
static void lz_dp_diff(void *shadow, const void *src, size_t n, size_t known, size_t elem,
                       size_t *f, size_t *l) {
    unsigned char *sh = shadow;
    const unsigned char *s = src;
    size_t a = 0, b = n;
    while (a < n && a < known && memcmp(sh + a * elem, s + a * elem, elem) == 0) a++;
    while (b > a && b - 1 < known && memcmp(sh + (b - 1) * elem, s + (b - 1) * elem, elem) == 0) b--;
    if (b > a) memcpy(sh + a * elem, s + a * elem, (b - a) * elem);
    *f = a;
    *l = b;
}

static int lz_dp_cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* Merges ranges until at most LZ_PLAN_MAX_WRITES remain: every gap up to
 * the (n - MAX)-th smallest. gaps: scratch of at least r->n - 1. */
static void lz_dp_range_cap(lz_dp_ranges *r, size_t *gaps) {
    if (r->n <= LZ_PLAN_MAX_WRITES) return;
    for (int k = 0; k + 1 < r->n; k++) gaps[k] = r->first[k + 1] - (r->first[k] + r->count[k]);
    qsort(gaps, (size_t)r->n - 1, sizeof *gaps, lz_dp_cmp_size);
    size_t limit = gaps[r->n - LZ_PLAN_MAX_WRITES - 1];
    int w = 0;
    for (int k = 1; k < r->n; k++) {
        size_t end = r->first[w] + r->count[w];
        if (r->first[k] - end <= limit) {
            r->bytes += (r->first[k] - end) * r->elem;
            r->count[w] = r->first[k] + r->count[k] - r->first[w];
        } else {
            w++;
            r->first[w] = r->first[k];
            r->count[w] = r->count[k];
        }
    }
    r->n = w + 1;
}

/* Records the generation of every request entry's block (lz_pool_block_gens)
 * and holds the pool they are in, after a successful update. */
static void lz_dp_tie(lazyattn_device_plan *p, lazyattn_pool *pool, int n_seqs,
                      const lazyattn_plan_seq *seqs) {
    if (pool != p->pool) {
        if (pool) lz_pool_hold(pool);
        if (p->pool) lz_pool_unhold(p->pool);
        p->pool = pool;
    }
    size_t off = 0;
    int first = 1;
    for (int i = 0; i < n_seqs; i++) {
        size_t n = (size_t)seqs[i].n_entries;
        if (pool && seqs[i].request) {
            int64_t frees = 0;
            lz_pool_block_gens(pool, n, p->sh_table + off, p->sh_gen + off, &frees);
            if (first) p->frees_seen = frees; /* the earliest: a free since is looked for */
            first = 0;
        } else {
            memset(p->sh_gen + off, 0, n * sizeof *p->sh_gen);
        }
        off += n;
    }
}

/* The update failed after the shadow changed: the device no longer
 * matches it, and no tables are handed out until an update succeeds. */
static int lz_dp_lost(lazyattn_device_plan *p, int status) {
    p->valid = 0;
    p->n_seqs = p->n_entries = p->max_entries = 0;
    return status;
}

int lazyattn_device_plan_update(lazyattn_device_plan *p, int n_seqs, const lazyattn_plan_seq *seqs,
                                cl_command_queue queue, cl_event *event) {
    static const char fn[] = "lazyattn_device_plan_update";
    if (event) *event = NULL;
    LZ_CHECK_ARG(p != NULL, "%s: plan is NULL", fn);
    LZ_CHECK_LIVE(p, LZ_MAGIC_DEVICE_PLAN, fn, "device plan");
    LZ_CHECK_ARG(seqs != NULL, "%s: seqs is NULL", fn);
    LZ_CHECK_ARG(n_seqs >= 1 && n_seqs <= p->max_seqs, "%s: n_seqs %d outside 1..%d (max_seqs)",
                 fn, n_seqs, p->max_seqs);
    int64_t total = 0;
    int max_entries = 0;
    for (int i = 0; i < n_seqs; i++) {
        const lazyattn_plan_seq *s = &seqs[i];
        LZ_CHECK_ARG(s->n_entries >= 1, "%s: sequence %d has %d entries (>= 1)", fn, i,
                     s->n_entries);
        LZ_CHECK_ARG(s->table != NULL && s->entry_pos != NULL,
                     "%s: sequence %d: table or entry_pos is NULL", fn, i);
        total += s->n_entries;
        LZ_TRY(lz_fits_int(total, fn, "entries of all sequences"));
        if (s->n_entries > max_entries) max_entries = s->n_entries;
    }
    /* the pool of the requests' blocks, checked by *_args from now on */
    lazyattn_pool *pool = NULL;
    for (int i = 0; i < n_seqs; i++) {
        if (!seqs[i].request) continue;
        lazyattn_pool *rp = NULL;
        LZ_TRY(lz_request_pool(seqs[i].request, fn, &rp));
        LZ_CHECK_ARG(pool == NULL || rp == pool,
                     "%s: sequence %d's request is of a cache on another pool than sequence 0's", fn,
                     i);
        pool = rp;
    }
    cl_command_queue q = lz_queue(p->ctx, queue);
    if (total > p->capacity) LZ_TRY(lz_dp_grow(p, (int)total, q, fn));

    /* the changed ranges: up to one per sequence for the tables, one each
     * for seq_offsets and q_pos (scratch kept in the plan) */
    if (lz_dp_scratch(p, &p->ranges, &p->ranges_cap, 5 * (size_t)n_seqs * sizeof(size_t)))
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: %d ranges", fn, n_seqs);
    size_t *idx = (size_t *)(void *)p->ranges;
    lz_dp_ranges r[LZ_DP_ARRAYS] = {
        {sizeof(uint64_t), idx, idx + n_seqs, 0, n_seqs, 0},
        {sizeof(int32_t), idx + 2 * (size_t)n_seqs, idx + 3 * (size_t)n_seqs, 0, n_seqs, 0},
        {sizeof(int32_t), NULL, NULL, 0, 1, 0},
        {sizeof(int32_t), NULL, NULL, 0, 1, 0}};
    size_t one_first[2], one_count[2];
    r[LZ_DP_OFFSETS].first = &one_first[0], r[LZ_DP_OFFSETS].count = &one_count[0];
    r[LZ_DP_QPOS].first = &one_first[1], r[LZ_DP_QPOS].count = &one_count[1];

    /* From here the shadow takes the new contents: a failure must mark it lost. */
    const size_t known = p->valid ? (size_t)p->n_entries : 0;
    const size_t known_seqs = p->valid ? (size_t)p->n_seqs : 0;
    const size_t known_offsets = p->valid ? (size_t)p->n_seqs + 1 : 0;
    size_t off = 0, f, l;
    int32_t *offsets_new = p->sh_offsets; /* compared element by element below */
    size_t of = SIZE_MAX, ol = 0, qf = SIZE_MAX, ql = 0;
    for (int i = 0; i < n_seqs; i++) {
        const lazyattn_plan_seq *s = &seqs[i];
        size_t n = (size_t)s->n_entries;
        size_t kn = known > off ? known - off : 0;
        lz_dp_diff(p->sh_table + off, s->table, n, kn, sizeof(uint64_t), &f, &l);
        lz_dp_range_add(&r[LZ_DP_TABLE], off + f, l - f);
        lz_dp_diff(p->sh_pos + off, s->entry_pos, n, kn, sizeof(int32_t), &f, &l);
        lz_dp_range_add(&r[LZ_DP_POS], off + f, l - f);
        if ((size_t)i >= known_offsets || offsets_new[i] != (int32_t)off) {
            offsets_new[i] = (int32_t)off;
            if (of == SIZE_MAX) of = (size_t)i;
            ol = (size_t)i + 1;
        }
        if ((size_t)i >= known_seqs || p->sh_qpos[i] != s->q_pos) {
            p->sh_qpos[i] = s->q_pos;
            if (qf == SIZE_MAX) qf = (size_t)i;
            ql = (size_t)i + 1;
        }
        off += n;
    }
    if ((size_t)n_seqs >= known_offsets || offsets_new[n_seqs] != (int32_t)off) {
        offsets_new[n_seqs] = (int32_t)off;
        if (of == SIZE_MAX) of = (size_t)n_seqs;
        ol = (size_t)n_seqs + 1;
    }
    lz_dp_range_cap(&r[LZ_DP_TABLE], idx + 4 * (size_t)n_seqs);
    lz_dp_range_cap(&r[LZ_DP_POS], idx + 4 * (size_t)n_seqs);
    if (of != SIZE_MAX) lz_dp_range_add(&r[LZ_DP_OFFSETS], of, ol - of);
    if (qf != SIZE_MAX) lz_dp_range_add(&r[LZ_DP_QPOS], qf, ql - qf);

    /* one staging block for every write of this update, kept in the plan:
     * the last update's writes read it until they are done */
    size_t bytes = 0;
    for (int a = 0; a < LZ_DP_ARRAYS; a++) bytes += r[a].bytes; /* each <= a device buffer */
    if (bytes > 0) {
        lz_dp_staging_idle(p);
        if (lz_dp_scratch(p, &p->staging, &p->staging_cap, bytes))
            return lz_dp_lost(p, lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY,
                                         "%s: staging of %zu bytes", fn, bytes));
    }
    unsigned char *staging = p->staging;
    const void *shadows[LZ_DP_ARRAYS] = {p->sh_table, p->sh_pos, p->sh_offsets, p->sh_qpos};
    cl_mem bufs[LZ_DP_ARRAYS] = {p->table, p->entry_pos, p->seq_offsets, p->q_pos};
    cl_event last = NULL;
    cl_int err = CL_SUCCESS;
    size_t at = 0;
    int64_t n_writes = 0, entries = 0;
    for (int a = 0; a < LZ_DP_ARRAYS && err == CL_SUCCESS; a++) {
        for (int k = 0; k < r[a].n; k++) {
            size_t b0 = r[a].first[k] * r[a].elem, nb = r[a].count[k] * r[a].elem;
            memcpy(staging + at, (const unsigned char *)shadows[a] + b0, nb);
            cl_event ev = NULL;
            err = lz_dp_write(q, bufs[a], b0, nb, staging + at, &ev);
            if (err != CL_SUCCESS) break;
            if (last) clReleaseEvent(last);
            last = ev;
            at += nb;
            n_writes++;
            if (a == LZ_DP_TABLE) entries += (int64_t)r[a].count[k];
        }
    }
    if (err != CL_SUCCESS) {
        /* writes already enqueued read the staging block: wait for them */
        if (last) {
            clWaitForEvents(1, &last);
            clReleaseEvent(last);
        }
        return lz_dp_lost(p, lz_cl_fail(err, "lazyattn_device_plan_update: clEnqueueWriteBuffer"));
    }
    if (last) {
        /* the staging block is idle once the last write is done (an
         * in-order queue); the next update that writes waits for it */
        p->staging_busy = last;
        if (event) {
            clRetainEvent(last);
            *event = last;
        }
    }
    p->valid = 1;
    p->n_seqs = n_seqs;
    p->n_entries = (int)total;
    lz_dp_tie(p, pool, n_seqs, seqs);
    p->max_entries = max_entries;
    p->updates++;
    p->writes += n_writes;
    p->bytes_written += (int64_t)bytes;
    p->entries_written += entries;
    if (!last && event) {
        /* nothing changed: still an event that completes after what came before */
        err = lz_dp_fault() ? CL_OUT_OF_RESOURCES : clEnqueueMarkerWithWaitList(q, 0, NULL, event);
        if (err != CL_SUCCESS) {
            *event = NULL; /* the device tables are right: only the event is missing */
            return lz_cl_fail(err, "lazyattn_device_plan_update: clEnqueueMarkerWithWaitList");
        }
    }
    return LAZYATTN_STATUS_OK;
}

/* ---- reading the plan ---- */

int lazyattn_plan_seq_from_request(const lazyattn_request *req, lazyattn_plan_seq *seq) {
    static const char fn[] = "lazyattn_plan_seq_from_request";
    LZ_CHECK_ARG(req != NULL && seq != NULL, "%s: req or seq is NULL", fn);
    lazyattn_plan plan;
    LZ_TRY(lazyattn_request_get_plan(req, &plan));
    seq->n_entries = plan.n_entries;
    seq->table = plan.table;
    seq->entry_pos = plan.entry_pos;
    seq->q_pos = plan.n_positions - 1;
    seq->request = req;
    return LAZYATTN_STATUS_OK;
}

int lazyattn_device_plan_get_info(const lazyattn_device_plan *p, lazyattn_device_plan_info *info) {
    static const char fn[] = "lazyattn_device_plan_get_info";
    LZ_CHECK_ARG(p != NULL && info != NULL, "%s: plan or info is NULL", fn);
    LZ_CHECK_LIVE(p, LZ_MAGIC_DEVICE_PLAN, fn, "device plan");
    memset(info, 0, sizeof *info);
    info->n_seqs = p->n_seqs;
    info->n_entries = p->n_entries;
    info->max_entries = p->max_entries;
    info->capacity = p->capacity;
    info->max_seqs = p->max_seqs;
    info->table = p->table;
    info->entry_pos = p->entry_pos;
    info->seq_offsets = p->seq_offsets;
    info->q_pos = p->q_pos;
    info->updates = p->updates;
    info->writes = p->writes;
    info->bytes_written = p->bytes_written;
    info->entries_written = p->entries_written;
    info->grows = p->grows;
    return LAZYATTN_STATUS_OK;
}

/* Tables to hand out: an update succeeded, and no block of a request's
 * entry among the first n_check was freed since (its request destroyed or
 * its document evicted: the blocks may hold another document by now). */
static int lz_dp_check_ready(const lazyattn_device_plan *p, const char *fn, int n_check) {
    LZ_CHECK_ARG(p->n_seqs >= 1,
                 "%s: the plan holds no tables (no successful update since it was created or "
                 "since an update failed)",
                 fn);
    if (!p->pool) return LAZYATTN_STATUS_OK;
    lazyattn_device_plan *w = (lazyattn_device_plan *)p; /* the cache of a check, not the plan */
    int64_t frees = p->frees_seen;
    int64_t bad = lz_pool_first_freed(p->pool, (size_t)n_check, p->sh_table, p->sh_gen, &frees);
    if (bad < 0) {
        if (n_check == p->n_entries) w->frees_seen = frees; /* all seen unchanged */
        return LAZYATTN_STATUS_OK;
    }
    int seq = 0;
    while (seq + 1 < p->n_seqs && p->sh_offsets[seq + 1] <= bad) seq++;
    return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                   "%s: block %d of sequence %d (entry %lld) was freed after the last update (its "
                   "request destroyed or its document evicted): update the plan from live requests",
                   fn, (int)(p->sh_table[bad] & 0x7FFFFFFFu), seq,
                   (long long)(bad - p->sh_offsets[seq]));
}

int lazyattn_device_plan_decode_args(const lazyattn_device_plan *p, lazyattn_decode_args *args) {
    static const char fn[] = "lazyattn_device_plan_decode_args";
    LZ_CHECK_ARG(p != NULL && args != NULL, "%s: plan or args is NULL", fn);
    LZ_CHECK_LIVE(p, LZ_MAGIC_DEVICE_PLAN, fn, "device plan");
    LZ_TRY(lz_dp_check_ready(p, fn, p->n_entries));
    args->n_seqs = p->n_seqs;
    args->max_entries = p->max_entries;
    args->q_pos = p->q_pos;
    args->seq_offsets = p->seq_offsets;
    args->table = p->table;
    args->entry_pos = p->entry_pos;
    return LAZYATTN_STATUS_OK;
}

int lazyattn_device_plan_prefill_args(const lazyattn_device_plan *p, int seq,
                                      lazyattn_prefill_args *args) {
    static const char fn[] = "lazyattn_device_plan_prefill_args";
    LZ_CHECK_ARG(p != NULL && args != NULL, "%s: plan or args is NULL", fn);
    LZ_CHECK_LIVE(p, LZ_MAGIC_DEVICE_PLAN, fn, "device plan");
    LZ_CHECK_ARG(p->n_seqs < 1 || (seq >= 0 && seq < p->n_seqs), "%s: sequence %d outside 0..%d",
                 fn, seq, p->n_seqs - 1);
    LZ_TRY(lz_dp_check_ready(p, fn, p->n_seqs >= 1 ? p->sh_offsets[1] : 0));
    if (seq != 0)
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                       "%s: sequence %d starts at table entry %d, and lazyattn_prefill_args has "
                       "no table offset (only sequence 0 can feed prefill)",
                       fn, seq, p->sh_offsets[seq]);
    args->n_entries = p->sh_offsets[1];
    args->table = p->table;
    args->entry_pos = p->entry_pos;
    return LAZYATTN_STATUS_OK;
}
