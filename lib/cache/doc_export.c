/* SPDX-License-Identifier: Apache-2.0 */
/* Export and import of a LAZY cache's document K/V: the versioned,
 * checksummed byte format of include/lazyattn.h ("document KV export and
 * import"), to and from a buffer or callbacks. The format's pages are in
 * ROWS order; a TILED pool's are reordered on the host (kv_layout.c). */
#include "cache/cache_policy.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static const char lz_kv_magic[8] = {'L', 'Z', 'K', 'V', 'D', 'O', 'C', '\0'};

/* The fields of a header, host order. */
typedef struct lz_kv_header {
    uint32_t version, header_bytes;
    uint64_t model_id;
    uint32_t n_layers, n_kv_heads, head_dim, block_size, dtype, policy;
    uint64_t doc_hash;
    uint32_t n_tokens, n_blocks;
    int32_t stored_start;
    uint32_t reserved;
    uint64_t payload_bytes, payload_checksum;
    uint8_t digest[32];
    uint64_t header_checksum;
} lz_kv_header;

/* Bytes of the header the header checksum covers (all but itself). */
#define LZ_KV_CHECKED_BYTES (LAZYATTN_KV_HEADER_BYTES - 8)

static void lz_put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void lz_put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t lz_get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t lz_get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Word by word: each step is a bijection of the state for a fixed word and
 * of the word for a fixed state, so any change confined to one word (or
 * the tail) always changes the sum. */
/* XXH3-64 with seed 0 (xxHash 0.8): every byte of a tier load is checked on
 * the serving thread, so the checksum runs at memory speed (bench/
 * probe_checksum.c); a mismatch is corruption or truncation, not an attack
 * (identities are BLAKE2b digests). */
uint64_t lz_kv_checksum(const uint8_t *p, size_t n) { return XXH3_64bits(p, n); }

static void lz_header_encode(const lz_kv_header *h, uint8_t *p) {
    memcpy(p, lz_kv_magic, 8);
    lz_put32(p + 8, h->version);
    lz_put32(p + 12, h->header_bytes);
    lz_put64(p + 16, h->model_id);
    lz_put32(p + 24, h->n_layers);
    lz_put32(p + 28, h->n_kv_heads);
    lz_put32(p + 32, h->head_dim);
    lz_put32(p + 36, h->block_size);
    lz_put32(p + 40, h->dtype);
    lz_put32(p + 44, h->policy);
    lz_put64(p + 48, h->doc_hash);
    lz_put32(p + 56, h->n_tokens);
    lz_put32(p + 60, h->n_blocks);
    lz_put32(p + 64, (uint32_t)h->stored_start);
    lz_put32(p + 68, h->reserved);
    lz_put64(p + 72, h->payload_bytes);
    lz_put64(p + 80, h->payload_checksum);
    memcpy(p + 88, h->digest, 32);
    lz_put64(p + LZ_KV_CHECKED_BYTES, lz_kv_checksum(p, LZ_KV_CHECKED_BYTES));
}

static void lz_header_decode(const uint8_t *p, lz_kv_header *h) {
    h->version = lz_get32(p + 8);
    h->header_bytes = lz_get32(p + 12);
    h->model_id = lz_get64(p + 16);
    h->n_layers = lz_get32(p + 24);
    h->n_kv_heads = lz_get32(p + 28);
    h->head_dim = lz_get32(p + 32);
    h->block_size = lz_get32(p + 36);
    h->dtype = lz_get32(p + 40);
    h->policy = lz_get32(p + 44);
    h->doc_hash = lz_get64(p + 48);
    h->n_tokens = lz_get32(p + 56);
    h->n_blocks = lz_get32(p + 60);
    h->stored_start = (int32_t)lz_get32(p + 64);
    h->reserved = lz_get32(p + 68);
    h->payload_bytes = lz_get64(p + 72);
    h->payload_checksum = lz_get64(p + 80);
    memcpy(h->digest, p + 88, 32);
    h->header_checksum = lz_get64(p + LZ_KV_CHECKED_BYTES);
}

/* Bytes of one block of one layer's K (or V). */
static uint64_t lz_block_layer_bytes(const lazyattn_pool_config *pc) {
    return (uint64_t)pc->n_kv_heads * (uint64_t)pc->block_size * (uint64_t)pc->head_dim *
           lazyattn_dtype_size(pc->dtype);
}

/* Payload bytes of a document of n_tokens in n_blocks, or 0 on overflow. */
static uint64_t lz_payload_bytes(const lazyattn_pool_config *pc, uint64_t n_tokens,
                                 uint64_t n_blocks) {
    uint64_t per = lz_block_layer_bytes(pc); /* < 2^42 by the pool's limits */
    uint64_t blocks = 2 * (uint64_t)pc->n_layers * n_blocks; /* < 2^45 */
    if (n_blocks > (uint64_t)1 << 31 || per == 0 || blocks > UINT64_MAX / per) return 0;
    uint64_t kv = blocks * per;
    if (kv > UINT64_MAX - 4 * n_tokens) return 0;
    return kv + 4 * n_tokens;
}

/* Pages (block_size x head_dim) in the K/V part of a payload of n_blocks. */
static int64_t lz_payload_pages(const lazyattn_pool_config *pc, int n_blocks) {
    return (int64_t)2 * pc->n_layers * n_blocks * pc->n_kv_heads;
}

/* A TILED pool's pages are reordered on the host (kv_layout.c) between its
 * device buffers and the payload, which is in ROWS order for either layout:
 * a staging copy of the payload's K/V part (NULL for a ROWS pool, which
 * moves its bytes as they are). */
static size_t lz_staging_bytes(const lazyattn_pool_config *pc, int n_blocks) {
    /* the payload that holds it was sized (lz_payload_bytes) and allocated */
    return (size_t)lz_payload_pages(pc, n_blocks) * (size_t)pc->block_size *
           (size_t)pc->head_dim * lazyattn_dtype_size(pc->dtype);
}
static int lz_staging_new(const lazyattn_pool_config *pc, int n_blocks, const char *w,
                          uint8_t **out) {
    *out = NULL;
    if (pc->kv_layout != LAZYATTN_KV_LAYOUT_TILED) return LAZYATTN_STATUS_OK;
    size_t bytes = lz_staging_bytes(pc, n_blocks);
    *out = malloc(bytes);
    if (!*out)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: %zu bytes to reorder TILED pages",
                       w, bytes);
    return LAZYATTN_STATUS_OK;
}

/* The reorder buffer of an import into n_blocks of a pool: up's room (the
 * caller's pinned memory, not freed here) when it is a TILED pool's and
 * large enough, in *room; else lz_staging_new's, in *staging (NULL for a
 * ROWS pool; the caller frees it). */
static int lz_reorder_buffer(const lazyattn_pool_config *pc, int n_blocks, const lz_upload *up,
                             const char *w, uint8_t **staging, uint8_t **room) {
    *staging = *room = NULL;
    if (pc->kv_layout == LAZYATTN_KV_LAYOUT_TILED && up && up->room &&
        up->room_bytes >= lz_staging_bytes(pc, n_blocks)) {
        *room = up->room;
        return LAZYATTN_STATUS_OK;
    }
    return lz_staging_new(pc, n_blocks, w, staging);
}

// ---- export ----

static int lz_export_find(const lazyattn_cache *c, uint64_t doc_hash, const char *who,
                          const lz_entry **out) {
    if (lz_cache_policy(c)->id != LAZYATTN_CACHE_POLICY_LAZY)
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                       "%s: only a LAZY cache's documents are position-independent (this cache "
                       "is %s)",
                       who, lazyattn_cache_policy_name(lz_cache_policy(c)->id));
    const lz_entry *e = lz_cache_find_lazy(c, doc_hash);
    if (!e)
        return lz_fail(LAZYATTN_STATUS_NOT_FOUND, "%s: document %016llx is not cached", who,
                       (unsigned long long)doc_hash);
    if (e->loading) /* its blocks are not written yet: an export would read garbage */
        return lz_fail(LAZYATTN_STATUS_IN_USE,
                       "%s: document %016llx is being loaded from the tier (poll its request, "
                       "lazyattn_request_poll_loads, then export)",
                       who, (unsigned long long)doc_hash);
    *out = e;
    return LAZYATTN_STATUS_OK;
}

size_t lz_kv_export_bytes(const lazyattn_pool_config *pc, int n_tokens, int n_blocks) {
    uint64_t n = lz_payload_bytes(pc, (uint64_t)n_tokens, (uint64_t)n_blocks);
    if (n == 0 || n > SIZE_MAX - LAZYATTN_KV_HEADER_BYTES) return 0;
    return (size_t)n + LAZYATTN_KV_HEADER_BYTES;
}

/* Bytes of the export of entry e. */
static int lz_entry_export_size(const lazyattn_cache *c, const lz_entry *e, const char *w,
                                size_t *bytes) {
    lazyattn_pool_config pc;
    lazyattn_pool_get_config(lz_cache_pool(c), &pc);
    *bytes = lz_kv_export_bytes(&pc, e->n_tokens, e->n_blocks);
    if (*bytes == 0)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE, "%s: the export does not fit a size_t", w);
    return LAZYATTN_STATUS_OK;
}

int lz_cache_export_size(const lazyattn_cache *c, uint64_t doc_hash, const char *w,
                         size_t *bytes) {
    const lz_entry *e = NULL;
    int st = lz_export_find(c, doc_hash, w, &e);
    if (st) return st;
    return lz_entry_export_size(c, e, w, bytes);
}

int lazyattn_cache_export_size(const lazyattn_cache *c, uint64_t doc_hash, size_t *bytes) {
    const char *w = "lazyattn_cache_export_size";
    LZ_CHECK_ARG(c && bytes, "%s: NULL argument", w);
    int taken, st = lz_cache_check_live(c, w);
    if (st || (st = lz_cache_enter(c, LZ_USE_READ, w, &taken))) return st;
    st = lz_cache_export_size(c, doc_hash, w, bytes);
    lz_cache_leave(c, taken);
    return st;
}

/* How many of blocks[0..n) (n >= 1) continue blocks[0] one id at a time:
 * the blocks one copy moves between the pool and a host payload. */
static int lz_block_run(const int32_t *blocks, int n) {
    int run = 1;
    while (run < n && blocks[run] == blocks[0] + run) run++;
    return run;
}

cl_int lz_pool_read_blocks(cl_command_queue q, lazyattn_pool *pool, const int32_t *blocks,
                           int n_blocks, uint8_t *kv, cl_event wait) {
    lazyattn_pool_config pc;
    lazyattn_pool_get_config(pool, &pc);
    size_t per = (size_t)lz_block_layer_bytes(&pc);
    for (int l = 0; l < pc.n_layers; l++)
        for (int which = 0; which < 2; which++) {
            cl_mem m = which ? lazyattn_pool_v_buffer(pool, l) : lazyattn_pool_k_buffer(pool, l);
            for (int b = 0; b < n_blocks;) {
                int run = lz_block_run(blocks + b, n_blocks - b);
                cl_int err = clEnqueueReadBuffer(q, m, CL_FALSE, (size_t)blocks[b] * per,
                                                 (size_t)run * per, kv, wait ? 1 : 0,
                                                 wait ? &wait : NULL, NULL);
                if (err != CL_SUCCESS) return err;
                wait = NULL; /* the queue is in order: the first read waits for the rest */
                kv += (size_t)run * per;
                b += run;
            }
        }
    return CL_SUCCESS;
}

/* The entry's blocks read from the pool's buffers into kv as they are
 * stored (the pool's layout: lz_pool_read_blocks), and waited for. */
static int lz_export_read(lazyattn_context *ctx, lazyattn_pool *pool, const lz_entry *e,
                          uint8_t *kv) {
    /* after the tier uploads into the blocks still in flight */
    int st = lz_pool_order_reads(pool, -1, ctx->queue, "lazyattn_cache_export");
    if (st) return st;
    cl_int err = lz_pool_read_blocks(ctx->queue, pool, e->blocks, e->n_blocks, kv, NULL);
    if (err != CL_SUCCESS) {
        clFinish(ctx->queue);
        return lz_cl_fail(err, "lazyattn_cache_export: clEnqueueReadBuffer");
    }
    err = clFinish(ctx->queue);
    if (err != CL_SUCCESS) return lz_cl_fail(err, "lazyattn_cache_export: clFinish");
    return LAZYATTN_STATUS_OK;
}

/* Writes entry e's export, need bytes (lz_entry_export_size), into out.
 * Its identity (doc_hash, digest) is computed from the tokens it carries. */
static int lz_entry_export(const lazyattn_cache *c, const lz_entry *e, uint8_t *out, size_t need,
                           const char *w) {
    lazyattn_pool *pool = lz_cache_pool(c);
    lazyattn_context *ctx = lz_pool_context(pool);
    if (!ctx)
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                       "%s: the pool keeps accounting only: there is no K/V to export", w);
    lazyattn_pool_config pc;
    lazyattn_pool_get_config(pool, &pc);
    uint8_t *kv = out + LAZYATTN_KV_HEADER_BYTES + 4 * (size_t)e->n_tokens;
    uint8_t *staging;
    int st = lz_staging_new(&pc, e->n_blocks, w, &staging);
    if (st) return st;
    st = lz_export_read(ctx, pool, e, staging ? staging : kv);
    if (!st && staging)
        lz_kv_pages_to_rows(staging, kv, lz_payload_pages(&pc, e->n_blocks), pc.block_size,
                            pc.head_dim, lazyattn_dtype_size(pc.dtype));
    free(staging);
    if (st) return st;
    uint8_t digest[32];
    uint64_t doc_hash = lz_doc_hash(lz_cache_model_id(c), e->tokens, e->n_tokens, digest);
    lz_kv_export_seal(&pc, lz_cache_model_id(c), e->tokens, e->n_tokens, e->n_blocks, doc_hash,
                      digest, out, need);
    return LAZYATTN_STATUS_OK;
}

void lz_kv_export_seal(const lazyattn_pool_config *pc, uint64_t model_id, const int32_t *tokens,
                       int n_tokens, int n_blocks, uint64_t doc_hash, const uint8_t digest[32],
                       uint8_t *out, size_t need) {
    uint8_t *payload = out + LAZYATTN_KV_HEADER_BYTES;
    for (int t = 0; t < n_tokens; t++) lz_put32(payload + 4 * (size_t)t, (uint32_t)tokens[t]);
    lz_kv_header h = {0};
    h.version = LAZYATTN_KV_FORMAT_VERSION;
    h.header_bytes = LAZYATTN_KV_HEADER_BYTES;
    h.model_id = model_id;
    h.n_layers = (uint32_t)pc->n_layers;
    h.n_kv_heads = (uint32_t)pc->n_kv_heads;
    h.head_dim = (uint32_t)pc->head_dim;
    h.block_size = (uint32_t)pc->block_size;
    h.dtype = (uint32_t)pc->dtype;
    h.policy = LAZYATTN_CACHE_POLICY_LAZY;
    h.doc_hash = doc_hash;
    memcpy(h.digest, digest, sizeof h.digest);
    h.n_tokens = (uint32_t)n_tokens;
    h.n_blocks = (uint32_t)n_blocks;
    h.stored_start = 0;
    h.payload_bytes = need - LAZYATTN_KV_HEADER_BYTES;
    h.payload_checksum = lz_kv_checksum(payload, (size_t)h.payload_bytes);
    lz_header_encode(&h, out);
}

int lz_cache_export(const lazyattn_cache *c, uint64_t doc_hash, void *buffer, size_t capacity,
                    const char *w, size_t *written) {
    *written = 0;
    const lz_entry *e = NULL;
    size_t need = 0;
    int st = lz_export_find(c, doc_hash, w, &e);
    if (!st) st = lz_entry_export_size(c, e, w, &need);
    if (st) return st;
    LZ_CHECK_ARG(capacity >= need, "%s: %zu bytes of room, the document needs %zu", w, capacity,
                 need);
    st = lz_entry_export(c, e, buffer, need, w);
    if (!st) *written = need;
    return st;
}

int lazyattn_cache_export(const lazyattn_cache *c, uint64_t doc_hash, void *buffer,
                          size_t capacity, size_t *written) {
    const char *w = "lazyattn_cache_export";
    LZ_CHECK_ARG(c && buffer && written, "%s: NULL argument", w);
    int taken, st = lz_cache_check_live(c, w);
    if (st) return st;
    *written = 0;
    if ((st = lz_cache_enter(c, LZ_USE_READ, w, &taken))) return st;
    st = lz_cache_export(c, doc_hash, buffer, capacity, w, written);
    lz_cache_leave(c, taken);
    return st;
}

int lz_cache_export_entry(const lazyattn_cache *c, const lz_entry *e, uint8_t **out,
                          size_t *size, const char *who) {
    *out = NULL;
    *size = 0;
    size_t n = 0;
    int st = lz_entry_export_size(c, e, who, &n);
    if (st) return st;
    uint8_t *buf = malloc(n);
    if (!buf) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: %zu bytes", who, n);
    st = lz_entry_export(c, e, buf, n, who);
    if (st) {
        free(buf);
        return st;
    }
    *out = buf;
    *size = n;
    return LAZYATTN_STATUS_OK;
}

int lazyattn_cache_export_to(const lazyattn_cache *c, uint64_t doc_hash, lazyattn_write_fn write,
                             void *user) {
    const char *w = "lazyattn_cache_export_to";
    LZ_CHECK_ARG(c && write, "%s: NULL argument", w);
    int taken, st = lz_cache_check_live(c, w);
    if (st || (st = lz_cache_enter(c, LZ_USE_READ, w, &taken))) return st;
    size_t n, written;
    st = lz_cache_export_size(c, doc_hash, w, &n);
    uint8_t *buf = NULL;
    if (!st && !(buf = malloc(n)))
        st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: %zu bytes", w, n);
    if (!st) st = lz_cache_export(c, doc_hash, buf, n, w, &written);
    /* the engine's write runs with the cache given back: it may use it */
    lz_cache_leave(c, taken);
    if (!st && write(user, buf, written) != 0)
        st = lz_fail(LAZYATTN_STATUS_IO, "lazyattn_cache_export_to: the write callback failed");
    free(buf);
    return st;
}

// ---- import ----

/* The first 12 bytes of a header (size >= 12): magic and version. */
#define LZ_KV_PREFIX_BYTES 12
static int lz_header_check_prefix(const uint8_t *p, const char *w) {
    if (memcmp(p, lz_kv_magic, 8) != 0)
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: not a lazyattn document export (magic)", w);
    uint32_t version = lz_get32(p + 8);
    if (version == 1)
        return lz_fail(LAZYATTN_STATUS_FORMAT,
                       "%s: format version 1: version 1 exports are no longer read: re-export "
                       "(version %d carries the document's BLAKE2b digest)",
                       w, LAZYATTN_KV_FORMAT_VERSION);
    if (version != LAZYATTN_KV_FORMAT_VERSION)
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: format version %u, this library reads %d", w,
                       version, LAZYATTN_KV_FORMAT_VERSION);
    return LAZYATTN_STATUS_OK;
}

/* The checks of a header on its own: magic, version, checksum, fields that
 * must hold whatever the cache. */
static int lz_header_check(const uint8_t *p, size_t size, const char *w, lz_kv_header *h) {
    if (size < LZ_KV_PREFIX_BYTES)
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: truncated: %zu bytes, the header has %d", w,
                       size, LAZYATTN_KV_HEADER_BYTES);
    int st = lz_header_check_prefix(p, w);
    if (st) return st;
    if (size < LAZYATTN_KV_HEADER_BYTES)
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: truncated: %zu bytes, the header has %d", w,
                       size, LAZYATTN_KV_HEADER_BYTES);
    lz_header_decode(p, h);
    if (h->header_checksum != lz_kv_checksum(p, LZ_KV_CHECKED_BYTES))
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: header checksum does not match", w);
    if (h->doc_hash != lz_digest_hash(h->digest))
        return lz_fail(LAZYATTN_STATUS_FORMAT,
                       "%s: the document hash is not the first 8 bytes of its digest", w);
    if (h->header_bytes != LAZYATTN_KV_HEADER_BYTES || h->policy != LAZYATTN_CACHE_POLICY_LAZY ||
        h->stored_start != 0 || h->reserved != 0)
        return lz_fail(LAZYATTN_STATUS_FORMAT,
                       "%s: header of %u bytes, policy %u, stored start %d: not a version-2 "
                       "LAZY document",
                       w, h->header_bytes, h->policy, (int)h->stored_start);
    if (h->n_layers < 1 || h->n_kv_heads < 1 || h->head_dim < 1 || h->block_size < 1 ||
        h->block_size > LAZYATTN_MAX_BLOCK_SIZE || h->dtype > LAZYATTN_DTYPE_BF16 ||
        h->n_tokens < 1 || h->n_tokens > (uint32_t)LAZYATTN_MAX_POSITION + 1 ||
        h->n_blocks != (h->n_tokens + h->block_size - 1) / h->block_size)
        return lz_fail(LAZYATTN_STATUS_FORMAT,
                       "%s: geometry %u x %u x %u, B %u, dtype %u, %u tokens in %u blocks",
                       w, h->n_layers, h->n_kv_heads, h->head_dim, h->block_size, h->dtype,
                       h->n_tokens, h->n_blocks);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_kv_describe(const void *data, size_t size, lazyattn_kv_info *info) {
    LZ_CHECK_ARG(data && info, "lazyattn_kv_describe: NULL argument");
    lz_kv_header h;
    int st = lz_header_check(data, size, "lazyattn_kv_describe", &h);
    if (st) return st;
    lazyattn_pool_config pc = {(int)h.n_layers, (int)h.n_kv_heads, (int)h.head_dim,
                               (int)h.block_size, (lazyattn_dtype)h.dtype, 0,
                               LAZYATTN_KV_LAYOUT_ROWS};
    if (h.n_layers > LAZYATTN_MAX_LAYERS || h.n_kv_heads > LAZYATTN_MAX_HEADS ||
        h.head_dim > LAZYATTN_MAX_HEAD_DIM)
        return lz_fail(LAZYATTN_STATUS_FORMAT,
                       "lazyattn_kv_describe: geometry %u x %u x %u past the limits (%d layers, "
                       "%d heads, head dim %d)",
                       h.n_layers, h.n_kv_heads, h.head_dim, LAZYATTN_MAX_LAYERS,
                       LAZYATTN_MAX_HEADS, LAZYATTN_MAX_HEAD_DIM);
    uint64_t payload = lz_payload_bytes(&pc, h.n_tokens, h.n_blocks);
    if (payload == 0 || payload != h.payload_bytes ||
        payload > UINT64_MAX - LAZYATTN_KV_HEADER_BYTES)
        return lz_fail(LAZYATTN_STATUS_FORMAT,
                       "lazyattn_kv_describe: payload of %llu bytes, the geometry says %llu",
                       (unsigned long long)h.payload_bytes, (unsigned long long)payload);
    memset(info, 0, sizeof *info);
    info->version = h.version;
    info->model_id = h.model_id;
    info->n_layers = (int)h.n_layers;
    info->n_kv_heads = (int)h.n_kv_heads;
    info->head_dim = (int)h.head_dim;
    info->block_size = (int)h.block_size;
    info->dtype = (lazyattn_dtype)h.dtype;
    info->doc_hash = h.doc_hash;
    memcpy(info->digest, h.digest, sizeof info->digest);
    info->n_tokens = (int)h.n_tokens;
    info->n_blocks = (int)h.n_blocks;
    info->total_bytes = payload + LAZYATTN_KV_HEADER_BYTES;
    return LAZYATTN_STATUS_OK;
}

/* Checks a header against pool and model_id: everything that can be known
 * before the payload. Touches no cache (the tier's loader checks with it). */
static int lz_kv_check_header(lazyattn_pool *pool, uint64_t model_id, const uint8_t *p,
                              size_t size, const char *w, lz_kv_header *h) {
    int st = lz_header_check(p, size, w, h);
    if (st) return st;
    lazyattn_pool_config pc;
    lazyattn_pool_get_config(pool, &pc);
    if (h->model_id != model_id)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "%s: exported under model_id %016llx, this cache has %016llx", w,
                       (unsigned long long)h->model_id, (unsigned long long)model_id);
    if (h->n_layers != (uint32_t)pc.n_layers || h->n_kv_heads != (uint32_t)pc.n_kv_heads ||
        h->head_dim != (uint32_t)pc.head_dim || h->block_size != (uint32_t)pc.block_size ||
        h->dtype != (uint32_t)pc.dtype)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "%s: exported from %u layers x %u KV heads x d %u, B %u, dtype %u; this "
                       "pool is %d x %d x %d, B %d, dtype %d",
                       w, h->n_layers, h->n_kv_heads, h->head_dim, h->block_size, h->dtype,
                       pc.n_layers, pc.n_kv_heads, pc.head_dim, pc.block_size, (int)pc.dtype);
    /* tokens and blocks: checked against the header's block size, the pool's */
    uint64_t payload = lz_payload_bytes(&pc, h->n_tokens, h->n_blocks);
    if (payload == 0 || h->payload_bytes != payload)
        return lz_fail(LAZYATTN_STATUS_FORMAT,
                       "%s: payload of %llu bytes, %u tokens of this geometry take %llu", w,
                       (unsigned long long)h->payload_bytes, h->n_tokens,
                       (unsigned long long)payload);
    /* The bound on any size read from outside: what the whole pool holds. */
    int64_t pool_blocks = lz_pool_n_blocks(pool);
    if ((int64_t)h->n_blocks > pool_blocks) {
        uint64_t bound = lz_payload_bytes(&pc, h->n_tokens, (uint64_t)pool_blocks);
        return lz_fail(LAZYATTN_STATUS_BUDGET_EXCEEDED,
                       "%s: the header claims %llu payload bytes (%u tokens in %u blocks); the "
                       "pool holds %lld blocks in all (%llu bytes with the tokens): refused "
                       "before reading the payload",
                       w, (unsigned long long)h->payload_bytes, h->n_tokens, h->n_blocks,
                       (long long)pool_blocks, (unsigned long long)bound);
    }
    return LAZYATTN_STATUS_OK;
}

/* lz_kv_check_header against the cache's pool and model; a LAZY cache only. */
static int lz_import_check_header(const lazyattn_cache *c, const uint8_t *p, size_t size,
                                  const char *w, lz_kv_header *h) {
    if (lz_cache_policy(c)->id != LAZYATTN_CACHE_POLICY_LAZY)
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                       "%s: only a LAZY cache imports documents (this cache is %s)", w,
                       lazyattn_cache_policy_name(lz_cache_policy(c)->id));
    return lz_kv_check_header(lz_cache_pool(c), lz_cache_model_id(c), p, size, w, h);
}

/* The payload's K/V part (ROWS order), for each layer its K blocks then its
 * V blocks, written to the pool's blocks in the pool's layout (through
 * staging, lz_staging_new's, for a TILED pool); runs of consecutive blocks
 * in one copy. up NULL: on the context's queue, and waits; else on
 * up->queue without waiting, each layer fenced (lz_upload). */
static int lz_import_write(lazyattn_context *ctx, lazyattn_pool *pool, const int32_t *blocks,
                           int n_blocks, const uint8_t *kv, uint8_t *staging, lz_upload *up) {
    lazyattn_pool_config pc;
    lazyattn_pool_get_config(pool, &pc);
    size_t per = (size_t)lz_block_layer_bytes(&pc);
    if (staging) {
        lz_kv_pages_to_tiled(kv, staging, lz_payload_pages(&pc, n_blocks), pc.block_size,
                             pc.head_dim, lazyattn_dtype_size(pc.dtype));
        kv = staging;
    }
    static const char w[] = "lazyattn_cache_import";
    cl_command_queue q = up ? up->queue : ctx->queue;
    /* blocks handed out again are written after the commands that read them */
    int st = lz_pool_order_writes(pool, q, w);
    if (st) return st;
    cl_int err = CL_SUCCESS;
    if (up && up->gate) err = clEnqueueBarrierWithWaitList(q, 1, &up->gate, NULL);
    for (int l = 0; l < pc.n_layers && err == CL_SUCCESS && !st; l++)
        for (int which = 0; which < 2 && err == CL_SUCCESS; which++) {
            cl_mem m = which ? lazyattn_pool_v_buffer(pool, l) : lazyattn_pool_k_buffer(pool, l);
            for (int b = 0; b < n_blocks && err == CL_SUCCESS;) {
                int run = lz_block_run(blocks + b, n_blocks - b);
                /* the layer's last copy: in order, the layer is in place after it */
                int last = up && which == 1 && b + run == n_blocks;
                cl_event ev = NULL;
                err = clEnqueueWriteBuffer(q, m, CL_FALSE, (size_t)blocks[b] * per,
                                           (size_t)run * per, kv, 0, NULL, last ? &ev : NULL);
                kv += (size_t)run * per;
                b += run;
                if (err != CL_SUCCESS || !ev) continue;
                st = lz_pool_fence_load(pool, l, ev, q);
                if (l == pc.n_layers - 1 && !st)
                    up->done = ev;
                else
                    clReleaseEvent(ev);
            }
        }
    if (!up || err != CL_SUCCESS || st) {
        cl_int fin = clFinish(q); /* the writes read the data until they complete */
        if (err == CL_SUCCESS) err = fin;
        if (up && up->done) {
            clReleaseEvent(up->done);
            up->done = NULL;
        }
        if (st) return st;
        if (err != CL_SUCCESS) return lz_cl_fail(err, "lazyattn_cache_import: clEnqueueWriteBuffer");
        return LAZYATTN_STATUS_OK;
    }
    /* a use of the pool: blocks freed while it runs are rewritten after it */
    err = clFlush(q);
    if (err == CL_SUCCESS) st = lazyattn_pool_record_use(pool, 1, &up->done);
    if (err != CL_SUCCESS || st) {
        clFinish(q);
        clReleaseEvent(up->done);
        up->done = NULL;
        return st ? st : lz_cl_fail(err, "lazyattn_cache_import: clFlush");
    }
    return LAZYATTN_STATUS_OK;
}

static int lz_import(lazyattn_cache *c, const uint8_t *p, size_t size, uint64_t *doc_hash,
                     const char *w, lz_upload *up, int sealed, int for_plan) {
    lz_kv_header h;
    int st = lz_import_check_header(c, p, size, w, &h);
    if (st) return st;
    if (size - LAZYATTN_KV_HEADER_BYTES < h.payload_bytes)
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: truncated: %zu bytes of %llu", w, size,
                       (unsigned long long)(h.payload_bytes + LAZYATTN_KV_HEADER_BYTES));
    if (size - LAZYATTN_KV_HEADER_BYTES > h.payload_bytes)
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: %llu bytes past the end of the document", w,
                       (unsigned long long)(size - LAZYATTN_KV_HEADER_BYTES - h.payload_bytes));
    const uint8_t *payload = p + LAZYATTN_KV_HEADER_BYTES;
    if (!sealed && lz_kv_checksum(payload, (size_t)h.payload_bytes) != h.payload_checksum)
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: payload checksum does not match", w);
    int n_tokens = (int)h.n_tokens, n_blocks = (int)h.n_blocks;
    int32_t *tokens = malloc((size_t)n_tokens * sizeof *tokens);
    int32_t *blocks = malloc((size_t)n_blocks * sizeof *blocks);
    if (!tokens || !blocks) {
        free(tokens);
        free(blocks);
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s", w);
    }
    for (int t = 0; t < n_tokens; t++) tokens[t] = (int32_t)lz_get32(payload + 4 * (size_t)t);
    uint8_t digest[32];
    lz_doc_digest(h.model_id, tokens, n_tokens, digest);
    if (memcmp(digest, h.digest, sizeof digest) != 0) {
        free(tokens);
        free(blocks);
        return lz_fail(LAZYATTN_STATUS_FORMAT,
                       "%s: the document digest does not match its tokens", w);
    }
    if (doc_hash) *doc_hash = h.doc_hash;
    if (lz_cache_find(c, h.doc_hash, h.doc_hash, 0, 0, tokens, n_tokens)) {
        free(tokens);
        free(blocks);
        return LAZYATTN_STATUS_OK; /* cached already: left as it is */
    }
    /* a TILED pool's reorder buffer, before anything changes */
    lazyattn_pool *pool = lz_cache_pool(c);
    lazyattn_context *ctx = lz_pool_context(pool);
    lazyattn_pool_config pc;
    lazyattn_pool_get_config(pool, &pc);
    uint8_t *staging = NULL, *room = NULL; /* room: the caller's (pinned), not freed here */
    if (ctx &&
        (st = lz_reorder_buffer(&pc, n_blocks, up, w, &staging, &room)) != LAZYATTN_STATUS_OK) {
        free(tokens);
        free(blocks);
        return st;
    }
    /* Checked: from here on the cache changes (evictions for room). */
    lz_entry *e = NULL;
    st = lz_cache_take_blocks(c, n_blocks, blocks, 0, w);
    if (st) goto out;
    e = lz_entry_new(blocks, n_blocks, tokens, n_tokens);
    if (!e) {
        lz_cache_give_blocks(c, n_blocks, blocks);
        st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s", w);
        goto out;
    }
    e->key = e->doc_hash = h.doc_hash;
    memcpy(e->digest, h.digest, sizeof e->digest);
    e->stored_start = 0;
    if (ctx) {
        st = lz_import_write(ctx, pool, blocks, n_blocks, payload + 4 * (size_t)n_tokens,
                             room ? room : staging, up);
        if (st) {
            lz_cache_drop(c, e);
            goto out;
        }
    }
    /* cannot find an equal entry: checked above. A plan's import is not
     * trimmed now: the plan pins it next, the request's release trims. */
    lz_cache_add_imported(c, e, !for_plan);
    if (up) {
        up->entry = e;
        up->keep = staging; /* read by the upload until it completes */
        staging = NULL;
    }
out:
    free(staging);
    free(tokens);
    free(blocks);
    return st;
}

int lz_kv_load_bytes(lazyattn_pool *pool, uint64_t model_id, const uint8_t *p, size_t size,
                     int sealed, const uint8_t digest[32], uint64_t doc_hash,
                     const int32_t *tokens, int n_tokens, const int32_t *blocks, int n_blocks,
                     lz_upload *up, const char *w) {
    up->done = NULL, up->keep = NULL, up->entry = NULL;
    lz_kv_header h;
    int st = lz_kv_check_header(pool, model_id, p, size, w, &h);
    if (st) return st;
    if (memcmp(h.digest, digest, sizeof h.digest) != 0 || h.doc_hash != doc_hash ||
        h.n_tokens != (uint32_t)n_tokens || h.n_blocks != (uint32_t)n_blocks)
        return lz_fail(LAZYATTN_STATUS_FORMAT,
                       "%s: the value for document %016llx is another document's", w,
                       (unsigned long long)doc_hash);
    if (size - LAZYATTN_KV_HEADER_BYTES != h.payload_bytes)
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: %zu bytes, the header says %llu", w, size,
                       (unsigned long long)(h.payload_bytes + LAZYATTN_KV_HEADER_BYTES));
    lazyattn_pool_config pc;
    lazyattn_pool_get_config(pool, &pc);
    const uint8_t *body = p + LAZYATTN_KV_HEADER_BYTES;
    if (!sealed && lz_kv_checksum(body, (size_t)h.payload_bytes) != h.payload_checksum)
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: payload checksum does not match", w);
    /* the planned tokens (whose digest is the key's): the identity, exactly */
    for (int t = 0; t < n_tokens; t++)
        if ((int32_t)lz_get32(body + 4 * (size_t)t) != tokens[t])
            return lz_fail(LAZYATTN_STATUS_FORMAT,
                           "%s: the value's tokens are not the document's (token %d)", w, t);
    uint8_t *staging, *room;
    if ((st = lz_reorder_buffer(&pc, n_blocks, up, w, &staging, &room)) != LAZYATTN_STATUS_OK)
        return st;
    st = lz_import_write(lz_pool_context(pool), pool, blocks, n_blocks,
                         body + 4 * (size_t)n_tokens, room ? room : staging, up);
    if (st || !up->done) {
        free(staging);
        return st;
    }
    up->keep = staging; /* read by the upload until it completes */
    return LAZYATTN_STATUS_OK;
}

int lz_cache_import_bytes(lazyattn_cache *c, const void *data, size_t size, uint64_t *doc_hash,
                          const char *who, lz_upload *up, int sealed) {
    if (up) up->done = NULL, up->keep = NULL, up->entry = NULL;
    return lz_import(c, data, size, doc_hash, who, up, sealed, 1);
}

/* lz_import as a public call (entered for changes) named w. */
static int lz_import_entered(lazyattn_cache *c, const uint8_t *p, size_t size,
                             uint64_t *doc_hash, const char *w) {
    int taken, st = lz_cache_enter(c, LZ_USE_CHANGE, w, &taken);
    if (st) return st;
    st = lz_import(c, p, size, doc_hash, w, NULL, 0, 0);
    lz_cache_leave(c, taken);
    return st;
}

int lazyattn_cache_import(lazyattn_cache *c, const void *data, size_t size, uint64_t *doc_hash) {
    LZ_CHECK_ARG(c && data, "lazyattn_cache_import: NULL argument");
    int live = lz_cache_check_live(c, "lazyattn_cache_import");
    if (live) return live;
    return lz_import_entered(c, data, size, doc_hash, "lazyattn_cache_import");
}

/* import_from reads the payload in pieces of this many bytes into a buffer
 * that grows with what was read: a header's claim alone allocates at most
 * this much. */
#define LZ_IMPORT_PIECE ((size_t)1 << 20)

int lazyattn_cache_import_from(lazyattn_cache *c, lazyattn_read_fn read, void *user,
                               uint64_t *doc_hash) {
    const char *w = "lazyattn_cache_import_from";
    LZ_CHECK_ARG(c && read, "%s: NULL argument", w);
    int live = lz_cache_check_live(c, w);
    if (live) return live;
    /* The engine's read runs with the cache free: it may use it. */
    uint8_t head[LAZYATTN_KV_HEADER_BYTES];
    /* magic and version first: a version-1 header is shorter */
    if (read(user, head, LZ_KV_PREFIX_BYTES) != 0)
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: truncated: no complete header", w);
    int st = lz_header_check_prefix(head, w);
    if (st) return st;
    if (read(user, head + LZ_KV_PREFIX_BYTES, sizeof head - LZ_KV_PREFIX_BYTES) != 0)
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: truncated: no complete header", w);
    lz_kv_header h;
    int taken;
    if ((st = lz_cache_enter(c, LZ_USE_CHANGE, w, &taken))) return st;
    st = lz_import_check_header(c, head, sizeof head, w, &h);
    lz_cache_leave(c, taken);
    if (st) return st;
    /* Bounded by the pool (check_header), and read before it is allocated. */
    if (h.payload_bytes > SIZE_MAX - sizeof head)
        return lz_fail(LAZYATTN_STATUS_FORMAT, "%s: payload too large", w);
    size_t n = sizeof head + (size_t)h.payload_bytes, off = sizeof head;
    size_t cap = n - off < LZ_IMPORT_PIECE ? n : off + LZ_IMPORT_PIECE;
    uint8_t *buf = malloc(cap);
    if (!buf) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: %zu bytes", w, cap);
    memcpy(buf, head, sizeof head);
    while (off < n) {
        size_t piece = n - off < LZ_IMPORT_PIECE ? n - off : LZ_IMPORT_PIECE;
        if (piece > cap - off && lz_grow_bytes(&buf, &cap, off + piece, n)) {
            free(buf);
            return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "%s: %zu bytes", w, off + piece);
        }
        if (read(user, buf + off, piece) != 0) {
            free(buf);
            return lz_fail(LAZYATTN_STATUS_FORMAT,
                           "%s: truncated: the payload ends early (%zu of %llu bytes read)", w,
                           off - sizeof head, (unsigned long long)h.payload_bytes);
        }
        off += piece;
    }
    st = lz_import_entered(c, buf, n, doc_hash, w);
    free(buf);
    return st;
}
