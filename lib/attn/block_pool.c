/* SPDX-License-Identifier: Apache-2.0 */
/* The block pool: paged K/V device storage under a byte budget, and the
 * accounting of which blocks are handed out. Thread-safe: one mutex guards
 * the accounting, so caches on several threads can share the pool.
 *
 * Reuse is ordered after use: the queues of the launches over the pool's
 * blocks are recorded (use_log.h); a free puts a marker on each queue
 * launched on since the last free and stamps its blocks with the markers
 * and commands pending then, and a write into blocks handed out again waits
 * for them (lz_pool_order_writes), on whatever queue either runs. */
#include "checked_size.h"
#include "internal.h"
#include "attn/layer_fence.h"
#include "attn/use_log.h"

#include <stdlib.h>
#include <string.h>

/* every block id of a pool fits the packed entry's 31-bit block field */
_Static_assert(LAZYATTN_MAX_POOL_BLOCKS <= LAZYATTN_ENTRY_MAX_BLOCK + 1, "pool block ids fit an entry");

struct lazyattn_pool {
    uint32_t magic;        /* LZ_MAGIC_POOL while live */
    lazyattn_context *ctx; /* NULL: bookkeeping only */
    lazyattn_pool_config config;
    uint64_t block_bytes;
    int64_t n_blocks;
    int32_t *free_stack; /* [n_blocks], the free ids in [0, n_free) */
    int64_t n_free;
    uint8_t *allocated; /* [n_blocks] */
    int64_t peak_used;
    int64_t n_allocs;
    int64_t n_frees;
    cl_mem *k; /* [n_layers] */
    cl_mem *v; /* [n_layers] */
    /* Reuse after use (device pools): */
    lz_use_log uses;      /* commands enqueued over the blocks, not seen complete */
    uint64_t *stamp;      /* [n_blocks]: at its last free, the uses to wait for (lz_use_log_stamp) */
    uint64_t reuse_stamp; /* the latest stamp of a block handed out again whose uses may
                             still run (0: none): writes wait for the uses before it */
    uint32_t *gen;        /* [n_blocks]: bumped at each free, never 0 (device plans' check) */
    lz_layer_fence loads; /* uploads in flight, per layer (readers wait: lz_pool_order_reads) */
    /* Guards everything below and the accounting above (free_stack, n_free,
     * allocated, peak_used, n_allocs, n_frees, the reuse fields); the rest is
     * fixed at create. */
    lz_mutex lock;
    int lock_ok;   /* the mutex was initialised */
    int n_caches;  /* caches attached (lz_pool_attach) */
    int n_plans;   /* device plans holding it (lz_pool_hold) */
    int released;  /* lazyattn_pool_destroy was called */
};

static int lz_pool_check_config(const lazyattn_context *ctx, const lazyattn_pool_config *c) {
    LZ_CHECK_ARG(c->n_layers >= 1 && c->n_layers <= LAZYATTN_MAX_LAYERS,
                 "lazyattn_pool_create: n_layers %d outside 1..%d", c->n_layers,
                 LAZYATTN_MAX_LAYERS);
    LZ_TRY(lz_check_geometry("lazyattn_pool_create", c->n_kv_heads, c->head_dim, c->block_size,
                             c->dtype, ctx != NULL));
    return lz_check_kv_layout("lazyattn_pool_create", c->kv_layout, c->block_size);
}

/* The device pool as a whole must fit the device: every layer's K and V
 * buffer under the largest allocation, and all of them together under the
 * global memory (a pool split over many layers can pass the first test and
 * still not fit). */
static int lz_pool_check_device(const lazyattn_context *ctx, const lazyattn_pool_config *c,
                                uint64_t n_blocks, uint64_t per_layer_block,
                                uint64_t block_bytes) {
    static const char fn[] = "lazyattn_pool_create";
    cl_ulong global_mem = 0;
    cl_int err = clGetDeviceInfo(ctx->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global_mem,
                                 &global_mem, NULL);
    if (err != CL_SUCCESS) return lz_cl_fail(err, "lazyattn_pool_create: CL_DEVICE_GLOBAL_MEM_SIZE");
    uint64_t total, per_buffer;
    if (lz_mul_wraps_u64(n_blocks, block_bytes, &total) || total > global_mem)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY,
                       "%s: %llu blocks of %llu B (%d layers, K and V) need %.4g GiB; the device "
                       "has %llu B (%.4g GiB) of global memory",
                       fn, (unsigned long long)n_blocks, (unsigned long long)block_bytes,
                       c->n_layers, (double)n_blocks * (double)block_bytes / 1073741824.0,
                       (unsigned long long)global_mem, (double)global_mem / 1073741824.0);
    per_buffer = n_blocks * per_layer_block; /* <= total */
    if (per_buffer > ctx->max_alloc_size || per_buffer > SIZE_MAX)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY,
                       "%s: one layer's K buffer (%llu B) exceeds the device's largest "
                       "allocation (%llu B)",
                       fn, (unsigned long long)per_buffer, (unsigned long long)ctx->max_alloc_size);
    return LAZYATTN_STATUS_OK;
}

void lazyattn_pool_config_init(lazyattn_pool_config *config) {
    if (!config) return;
    memset(config, 0, sizeof *config);
    config->n_layers = 32;
    config->n_kv_heads = 8;
    config->head_dim = 128;
    config->block_size = 16;
    config->dtype = LAZYATTN_DTYPE_F16;
    config->budget_bytes = (uint64_t)1 << 30;
    config->kv_layout = LAZYATTN_KV_LAYOUT_ROWS;
}

int lazyattn_pool_create(lazyattn_context *ctx, const lazyattn_pool_config *config,
                         lazyattn_pool **out) {
    LZ_CHECK_ARG(out != NULL, "lazyattn_pool_create: out is NULL");
    *out = NULL;
    LZ_CHECK_ARG(config != NULL, "lazyattn_pool_create: config is NULL");
    int st = lz_pool_check_config(ctx, config);
    if (st) return st;
    /* bounded by the limits just checked (< 2^44), so these cannot wrap */
    uint64_t per_layer_block = (uint64_t)config->n_kv_heads * (uint64_t)config->block_size *
                               (uint64_t)config->head_dim * lazyattn_dtype_size(config->dtype);
    uint64_t block_bytes = 2 * per_layer_block * (uint64_t)config->n_layers;
    uint64_t n_blocks = config->budget_bytes / block_bytes;
    if (n_blocks == 0)
        return lz_fail(LAZYATTN_STATUS_BUDGET_EXCEEDED,
                       "lazyattn_pool_create: budget %llu B holds no block of %llu B",
                       (unsigned long long)config->budget_bytes, (unsigned long long)block_bytes);
    if (ctx) {
        st = lz_pool_check_device(ctx, config, n_blocks, per_layer_block, block_bytes);
        if (st) return st;
    }
    /* refused before any bookkeeping is built */
    if (n_blocks > (uint64_t)LAZYATTN_MAX_POOL_BLOCKS)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                       "lazyattn_pool_create: budget %llu B gives %llu blocks of %llu B; at most "
                       "%lld supported (LAZYATTN_MAX_POOL_BLOCKS)",
                       (unsigned long long)config->budget_bytes, (unsigned long long)n_blocks,
                       (unsigned long long)block_bytes, (long long)LAZYATTN_MAX_POOL_BLOCKS);

    lazyattn_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_pool_create");
    pool->magic = LZ_MAGIC_POOL;
    if (lz_mutex_init(&pool->lock) != 0) {
        st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_pool_create: mutex");
        goto fail;
    }
    pool->lock_ok = 1;
    pool->ctx = ctx;
    pool->config = *config;
    pool->block_bytes = block_bytes;
    pool->n_blocks = (int64_t)n_blocks;
    pool->free_stack = malloc((size_t)n_blocks * sizeof *pool->free_stack);
    pool->allocated = calloc((size_t)n_blocks, 1);
    pool->stamp = calloc((size_t)n_blocks, sizeof *pool->stamp);
    pool->gen = malloc((size_t)n_blocks * sizeof *pool->gen);
    if (!pool->free_stack || !pool->allocated || !pool->stamp || !pool->gen) {
        st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_pool_create: %llu blocks",
                     (unsigned long long)n_blocks);
        goto fail;
    }
    /* Popped from the top: the first allocations get ids 0, 1, 2, ... */
    for (int64_t i = 0; i < pool->n_blocks; i++) {
        pool->free_stack[i] = (int32_t)(pool->n_blocks - 1 - i);
        pool->gen[i] = 1;
    }
    pool->n_free = pool->n_blocks;

    if (ctx) {
        pool->k = calloc((size_t)config->n_layers, sizeof(cl_mem));
        pool->v = calloc((size_t)config->n_layers, sizeof(cl_mem));
        if (!pool->k || !pool->v) {
            st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_pool_create");
            goto fail;
        }
        if (lz_layer_fence_init(&pool->loads, config->n_layers)) {
            st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_pool_create");
            goto fail;
        }
        size_t bytes = (size_t)(n_blocks * per_layer_block); /* checked above */
        for (int l = 0; l < config->n_layers; l++) {
            cl_int err;
            pool->k[l] = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
            if (err == CL_SUCCESS)
                pool->v[l] = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
            if (err != CL_SUCCESS) {
                st = lz_cl_fail(err, "lazyattn_pool_create: clCreateBuffer");
                goto fail;
            }
        }
    }
    *out = pool;
    return LAZYATTN_STATUS_OK;
fail:
    lazyattn_pool_destroy(pool);
    return st;
}

static void lz_pool_free_all(lazyattn_pool *pool) {
    pool->magic = 0;
    for (int l = 0; pool->k && l < pool->config.n_layers; l++)
        if (pool->k[l]) clReleaseMemObject(pool->k[l]);
    for (int l = 0; pool->v && l < pool->config.n_layers; l++)
        if (pool->v[l]) clReleaseMemObject(pool->v[l]);
    free(pool->k);
    free(pool->v);
    free(pool->free_stack);
    free(pool->allocated);
    free(pool->stamp);
    free(pool->gen);
    lz_use_log_free(&pool->uses);
    lz_layer_fence_free(&pool->loads);
    if (pool->lock_ok) lz_mutex_destroy(&pool->lock);
    free(pool);
}

/* With caches still attached the pool stays alive (their blocks, buffers and
 * accounting included) until the last of them is destroyed. */
void lazyattn_pool_destroy(lazyattn_pool *pool) {
    if (!pool) return;
    if (!lz_live_for_destroy(pool->magic, LZ_MAGIC_POOL, "lazyattn_pool_destroy", "pool"))
        return;
    if (!pool->lock_ok) { /* a failed create */
        lz_pool_free_all(pool);
        return;
    }
    lz_mutex_lock(&pool->lock);
    int attached = pool->n_caches;
    int held = attached + pool->n_plans;
    int twice = pool->released;
    pool->released = 1;
    lz_mutex_unlock(&pool->lock);
    if (twice) {
        lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                "lazyattn_pool_destroy: destroyed twice (still alive for %d caches)", attached);
        lz_log(pool->ctx, LAZYATTN_LOG_ERROR, "%s", lazyattn_last_error());
        return;
    }
    if (held && !attached) return; /* device plans only: freed by the last one's destroy */
    if (attached) {
        lz_log(pool->ctx, LAZYATTN_LOG_WARN,
               "lazyattn_pool_destroy: %d cache%s still attached; the pool is freed when the "
               "last of them is destroyed",
               attached, attached == 1 ? "" : "s");
        return;
    }
    lz_pool_free_all(pool);
}

int lz_pool_attach(lazyattn_pool *pool, const char *fn) {
    lz_mutex_lock(&pool->lock);
    int released = pool->released;
    if (!released) pool->n_caches++;
    lz_mutex_unlock(&pool->lock);
    if (released) return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: the pool was destroyed", fn);
    return LAZYATTN_STATUS_OK;
}

void lz_pool_detach(lazyattn_pool *pool) {
    lz_mutex_lock(&pool->lock);
    int last = --pool->n_caches == 0 && pool->n_plans == 0 && pool->released;
    lz_mutex_unlock(&pool->lock);
    if (last) lz_pool_free_all(pool);
}

void lz_pool_hold(lazyattn_pool *pool) {
    lz_mutex_lock(&pool->lock);
    pool->n_plans++;
    lz_mutex_unlock(&pool->lock);
}

void lz_pool_unhold(lazyattn_pool *pool) {
    lz_mutex_lock(&pool->lock);
    int last = --pool->n_plans == 0 && pool->n_caches == 0 && pool->released;
    lz_mutex_unlock(&pool->lock);
    if (last) lz_pool_free_all(pool);
}

int lazyattn_pool_alloc(lazyattn_pool *pool, int n, int32_t *ids) {
    LZ_CHECK_ARG(pool != NULL, "lazyattn_pool_alloc: pool is NULL");
    LZ_CHECK_LIVE(pool, LZ_MAGIC_POOL, "lazyattn_pool_alloc", "pool");
    LZ_CHECK_ARG(n >= 0, "lazyattn_pool_alloc: negative count %d", n);
    LZ_CHECK_ARG(n == 0 || ids != NULL, "lazyattn_pool_alloc: ids is NULL");
    lz_mutex_lock(&pool->lock);
    if (n > pool->n_free) {
        int64_t n_free = pool->n_free;
        lz_mutex_unlock(&pool->lock);
        return lz_fail(LAZYATTN_STATUS_BUDGET_EXCEEDED,
                       "lazyattn_pool_alloc: %d blocks asked, %lld free under the budget", n,
                       (long long)n_free);
    }
    for (int i = 0; i < n; i++) {
        int32_t id = pool->free_stack[--pool->n_free];
        pool->allocated[id] = 1;
        ids[i] = id;
        if (pool->stamp[id] > pool->reuse_stamp) pool->reuse_stamp = pool->stamp[id];
    }
    pool->n_allocs += n;
    int64_t used = pool->n_blocks - pool->n_free;
    if (used > pool->peak_used) pool->peak_used = used;
    lz_mutex_unlock(&pool->lock);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_pool_free(lazyattn_pool *pool, int n, const int32_t *ids) {
    LZ_CHECK_ARG(pool != NULL, "lazyattn_pool_free: pool is NULL");
    LZ_CHECK_LIVE(pool, LZ_MAGIC_POOL, "lazyattn_pool_free", "pool");
    LZ_CHECK_ARG(n >= 0, "lazyattn_pool_free: negative count %d", n);
    LZ_CHECK_ARG(n == 0 || ids != NULL, "lazyattn_pool_free: ids is NULL");
    /* Validate everything first (all or nothing), marking to catch a
     * repeated id within the same call. */
    lz_mutex_lock(&pool->lock);
    int bad = -1;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= pool->n_blocks || pool->allocated[ids[i]] != 1) {
            bad = i;
            break;
        }
        pool->allocated[ids[i]] = 2;
    }
    for (int i = 0; i < (bad < 0 ? n : bad); i++) pool->allocated[ids[i]] = 1;
    if (bad >= 0) {
        lz_mutex_unlock(&pool->lock);
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "lazyattn_pool_free: block %d (index %d) is out of range, free, or repeated",
                       (int)ids[bad], bad);
    }
    const uint64_t stamp = pool->ctx ? lz_use_log_stamp(&pool->uses) : 0;
    /* Pushed last first, so that the next allocation of n blocks pops them
     * in the order given: a document freed as 17, 18, 19 is handed out again
     * as 17, 18, 19, and its copies (export, import, the tier) stay one
     * transfer a run instead of one a block. */
    for (int r = 0; r < n; r++) {
        int i = n - 1 - r;
        pool->allocated[ids[i]] = 0;
        pool->free_stack[pool->n_free++] = ids[i];
        pool->stamp[ids[i]] = stamp;
        if (++pool->gen[ids[i]] == 0) pool->gen[ids[i]] = 1;
    }
    pool->n_frees += n;
    lz_mutex_unlock(&pool->lock);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_pool_is_allocated(const lazyattn_pool *pool, int32_t id) {
    if (!pool || pool->magic != LZ_MAGIC_POOL || id < 0 || id >= pool->n_blocks) return 0;
    lazyattn_pool *p = (lazyattn_pool *)pool; /* the lock is not the pool's state */
    lz_mutex_lock(&p->lock);
    int allocated = pool->allocated[id] == 1;
    lz_mutex_unlock(&p->lock);
    return allocated;
}

int lazyattn_pool_get_info(const lazyattn_pool *pool, lazyattn_pool_info *info) {
    LZ_CHECK_ARG(pool && info, "lazyattn_pool_get_info: NULL argument");
    LZ_CHECK_LIVE(pool, LZ_MAGIC_POOL, "lazyattn_pool_get_info", "pool");
    memset(info, 0, sizeof *info);
    lazyattn_pool *p = (lazyattn_pool *)pool;
    lz_mutex_lock(&p->lock);
    info->n_blocks = pool->n_blocks;
    info->n_used = pool->n_blocks - pool->n_free;
    info->peak_used = pool->peak_used;
    info->block_bytes = pool->block_bytes;
    info->bytes_in_use = (uint64_t)info->n_used * pool->block_bytes;
    info->budget_bytes = pool->config.budget_bytes;
    info->n_allocs = pool->n_allocs;
    info->n_frees = pool->n_frees;
    lz_mutex_unlock(&p->lock);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_pool_get_config(const lazyattn_pool *pool, lazyattn_pool_config *config) {
    LZ_CHECK_ARG(pool && config, "lazyattn_pool_get_config: NULL argument");
    LZ_CHECK_LIVE(pool, LZ_MAGIC_POOL, "lazyattn_pool_get_config", "pool");
    *config = pool->config;
    return LAZYATTN_STATUS_OK;
}

/* The K (which 0) or V (1) buffer of a layer; NULL with the reason recorded. */
static cl_mem lz_pool_buffer(const lazyattn_pool *pool, int layer, int which, const char *fn) {
    if (!pool) {
        lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: pool is NULL", fn);
        return NULL;
    }
    if (pool->magic != LZ_MAGIC_POOL) {
        lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: not a live pool", fn);
        return NULL;
    }
    if (!pool->k) {
        lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: the pool keeps accounting only", fn);
        return NULL;
    }
    if (layer < 0 || layer >= pool->config.n_layers) {
        lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "%s: layer %d outside 0..%d", fn, layer,
                pool->config.n_layers - 1);
        return NULL;
    }
    return which ? pool->v[layer] : pool->k[layer];
}

cl_mem lazyattn_pool_k_buffer(const lazyattn_pool *pool, int layer) {
    return lz_pool_buffer(pool, layer, 0, "lazyattn_pool_k_buffer");
}

cl_mem lazyattn_pool_v_buffer(const lazyattn_pool *pool, int layer) {
    return lz_pool_buffer(pool, layer, 1, "lazyattn_pool_v_buffer");
}

/* Internal: the context of a device pool (NULL for bookkeeping, and for a
 * handle that is not a live pool, which the launchers then refuse). */
lazyattn_context *lz_pool_context(const lazyattn_pool *pool) {
    return pool && pool->magic == LZ_MAGIC_POOL ? pool->ctx : NULL;
}
int64_t lz_pool_n_blocks(const lazyattn_pool *pool) { return pool ? pool->n_blocks : 0; }

/* ---- reuse after use ------------------------------------------------------ */

/* The event of an engine's command over the pool's blocks: recorded until
 * it completes. When the log cannot grow the command is waited for instead
 * (nothing can then rewrite its blocks under it). */
static void lz_pool_record(lazyattn_pool *pool, cl_event event, cl_command_queue queue) {
    lz_mutex_lock(&pool->lock);
    int st = lz_use_log_record(&pool->uses, event, queue);
    lz_mutex_unlock(&pool->lock);
    if (st) {
        cl_command_queue q = NULL;
        if (clGetEventInfo(event, CL_EVENT_COMMAND_QUEUE, sizeof q, &q, NULL) == CL_SUCCESS && q)
            clFlush(q);
        clWaitForEvents(1, &event);
    }
}

int lz_pool_used(const lazyattn_pool *pool, int status, cl_command_queue queue) {
    if (status != LAZYATTN_STATUS_OK || !pool || !pool->ctx) return status;
    lazyattn_pool *p = (lazyattn_pool *)pool; /* the log is not the pool's state */
    cl_command_queue q = lz_queue(pool->ctx, queue);
    lz_mutex_lock(&p->lock);
    int st = lz_use_log_touch(&p->uses, q);
    lz_mutex_unlock(&p->lock);
    if (st) clFinish(q); /* not listed: nothing of it may stay pending */
    return status;
}

int lz_pool_order_writes(lazyattn_pool *pool, cl_command_queue queue, const char *fn) {
    if (!pool->ctx) return LAZYATTN_STATUS_OK;
    lz_wait_list w = {0};
    lz_mutex_lock(&pool->lock);
    int st = LAZYATTN_STATUS_OK;
    if (pool->reuse_stamp) {
        st = lz_use_log_pending(&pool->uses, pool->reuse_stamp, &w);
        if (st == LAZYATTN_STATUS_OK && w.n == 0) pool->reuse_stamp = 0; /* all ran */
    }
    lz_mutex_unlock(&pool->lock);
    if (st) return lz_fail(st, "%s: the wait list of reused blocks", fn);
    if (w.n == 0) return LAZYATTN_STATUS_OK;
    cl_int err = lz_wait_list_barrier(&w, queue);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : lz_cl_fail(err, fn);
}

int lz_pool_fence_load(lazyattn_pool *pool, int layer, cl_event event, cl_command_queue queue) {
    if (!pool->ctx) return LAZYATTN_STATUS_OK;
    lz_mutex_lock(&pool->lock);
    int st = lz_layer_fence_add(&pool->loads, layer, event, queue);
    lz_mutex_unlock(&pool->lock);
    if (st) { /* not listed: nothing may read the layer before it is in place */
        clFlush(queue);
        cl_int err = clWaitForEvents(1, &event);
        if (err != CL_SUCCESS) return lz_cl_fail(err, "tier load: clWaitForEvents");
    }
    return LAZYATTN_STATUS_OK;
}

int lz_pool_order_reads(const lazyattn_pool *pool, int layer, cl_command_queue queue,
                        const char *fn) {
    if (!pool || !pool->ctx) return LAZYATTN_STATUS_OK;
    lazyattn_pool *p = (lazyattn_pool *)pool; /* the fence is not the pool's state */
    lz_wait_list w;
    lz_mutex_lock(&p->lock);
    int st = lz_layer_fence_pending(&p->loads, layer, &w);
    lz_mutex_unlock(&p->lock);
    if (st) return lz_fail(st, "%s: the wait list of uploads in flight", fn);
    if (w.n == 0) return LAZYATTN_STATUS_OK;
    cl_int err = lz_wait_list_barrier(&w, queue);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : lz_cl_fail(err, fn);
}

int lazyattn_pool_order_reads(lazyattn_pool *pool, int layer, cl_command_queue queue) {
    static const char fn[] = "lazyattn_pool_order_reads";
    LZ_CHECK_ARG(pool != NULL, "%s: pool is NULL", fn);
    LZ_CHECK_LIVE(pool, LZ_MAGIC_POOL, fn, "pool");
    LZ_CHECK_ARG(pool->ctx != NULL, "%s: the pool keeps accounting only (no commands run on it)", fn);
    LZ_CHECK_ARG(layer >= -1 && layer < pool->config.n_layers, "%s: layer %d outside -1..%d", fn,
                 layer, pool->config.n_layers - 1);
    return lz_pool_order_reads(pool, layer, lz_queue(pool->ctx, queue), fn);
}

int lazyattn_pool_record_use(lazyattn_pool *pool, int n, const cl_event *events) {
    static const char fn[] = "lazyattn_pool_record_use";
    LZ_CHECK_ARG(pool != NULL, "%s: pool is NULL", fn);
    LZ_CHECK_LIVE(pool, LZ_MAGIC_POOL, fn, "pool");
    LZ_CHECK_ARG(n >= 0, "%s: negative count %d", fn, n);
    LZ_CHECK_ARG(n == 0 || events != NULL, "%s: events is NULL", fn);
    LZ_CHECK_ARG(pool->ctx != NULL, "%s: the pool keeps accounting only (no commands run on it)", fn);
    for (int i = 0; i < n; i++) {
        cl_uint refs = 0;
        LZ_CHECK_ARG(events[i] != NULL && clGetEventInfo(events[i], CL_EVENT_REFERENCE_COUNT,
                                                         sizeof refs, &refs, NULL) == CL_SUCCESS,
                     "%s: events[%d] is not an OpenCL event", fn, i);
    }
    for (int i = 0; i < n; i++) lz_pool_record(pool, events[i], NULL);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_pool_order_writes(lazyattn_pool *pool, cl_command_queue queue) {
    static const char fn[] = "lazyattn_pool_order_writes";
    LZ_CHECK_ARG(pool != NULL, "%s: pool is NULL", fn);
    LZ_CHECK_LIVE(pool, LZ_MAGIC_POOL, fn, "pool");
    LZ_CHECK_ARG(pool->ctx != NULL, "%s: the pool keeps accounting only (no commands run on it)", fn);
    return lz_pool_order_writes(pool, lz_queue(pool->ctx, queue), fn);
}

void lz_pool_block_gens(const lazyattn_pool *pool, size_t n, const uint64_t *words, uint32_t *gens,
                        int64_t *frees) {
    lazyattn_pool *p = (lazyattn_pool *)pool; /* the lock is not the pool's state */
    lz_mutex_lock(&p->lock);
    for (size_t i = 0; i < n; i++) {
        int64_t id = (int64_t)(words[i] & 0x7FFFFFFFu);
        gens[i] = id < p->n_blocks && p->allocated[id] == 1 ? p->gen[id] : 0;
    }
    *frees = p->n_frees;
    lz_mutex_unlock(&p->lock);
}

int64_t lz_pool_first_freed(const lazyattn_pool *pool, size_t n, const uint64_t *words,
                            const uint32_t *gens, int64_t *frees) {
    lazyattn_pool *p = (lazyattn_pool *)pool;
    int64_t bad = -1;
    lz_mutex_lock(&p->lock);
    if (p->n_frees != *frees) {
        for (size_t i = 0; i < n && bad < 0; i++) {
            int64_t id = (int64_t)(words[i] & 0x7FFFFFFFu);
            if (gens[i] && (id >= p->n_blocks || p->gen[id] != gens[i])) bad = (int64_t)i;
        }
        if (bad < 0) *frees = p->n_frees;
    }
    lz_mutex_unlock(&p->lock);
    return bad;
}
