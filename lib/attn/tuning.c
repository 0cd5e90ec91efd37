/* SPDX-License-Identifier: Apache-2.0 */
/* Launch geometry of the portable kernels (cl/flash.h): the caller's
 * override, else the tuning database for the device, else defaults from the
 * device's limits; checked against the device's local memory. */
#include "internal.h"
#include "attn/tuning.h"

#include <stdio.h>
#include <string.h>

/* One row of the database: the tuned geometry of a device name for one
 * (head_dim, group, dtype). Written by examples/tune_kernels. */
typedef struct lz_tuning_row {
    const char *device;
    int head_dim, group, dtype;
    lazyattn_kernel_tuning t;
} lz_tuning_row;

static const lz_tuning_row lz_tuning_db[] = {
#include "tuning_db.inc"
    {NULL, 0, 0, 0, {{0}, {0}, 0}}};

size_t lz_tile_local_bytes(const lazyattn_tile_params *t, int head_dim) {
    /* the arrays of LZ_FLASH_LOCAL (cl/flash.h): Q, K (and V) tiles of
     * head_dim + 4 floats a row; the key-major probability tile and the
     * partial maxima, rows padded to pr (what the register tiles reach,
     * a multiple of 4) with a stride of pr + 4; the shares' sums; two
     * floats and a position per row; a position per key; the table window */
    const size_t stride = (size_t)head_dim + 4, bufs = t->kv_together == 1 ? 2 : 1;
    const size_t rows = (size_t)t->rows, keys = (size_t)t->keys, sk = (size_t)t->score_keys;
    const size_t srows = (rows + (size_t)t->score_rows - 1) / (size_t)t->score_rows * (size_t)t->score_rows;
    /* work-items not chosen yet (lz_tile_defaults): one per score tile, as it will choose */
    size_t wg = t->work_group ? (size_t)t->work_group : srows / (size_t)t->score_rows * ((keys + sk - 1) / sk);
    if (wg > 1024) wg = 1024;
    const size_t orows = (rows + (size_t)t->out_rows - 1) / (size_t)t->out_rows * (size_t)t->out_rows;
    const size_t pr = ((srows > orows ? srows : orows) + 3) / 4 * 4, ps = pr + 4;
    const size_t parts = wg >= pr ? wg / pr : 1, nkt = (keys + sk - 1) / sk;
    return sizeof(float) * ((rows + keys * bufs) * stride + (keys + nkt) * ps + parts * pr + 3 * pr + keys) +
           12 * (size_t)(4 * t->keys > 64 ? 4 * t->keys : 64) /* table window, at most */ + 64;
}

/* Output tiles per work-item (the kernels keep them in registers). */
static long lz_out_per_item(const lazyattn_tile_params *t, int head_dim) {
    long n = (long)((t->rows + t->out_rows - 1) / t->out_rows) * (head_dim / t->out_dims);
    return (n + t->work_group - 1) / t->work_group;
}

/* The decode kernel (cl/decode.cl): rows = heads per work-group, keys =
 * key slots per chunk (whole blocks, at least one), out_dims = dims per
 * work-item of the output step. Its local memory and output registers. */
static long lz_decode_chunk_slots(const lazyattn_tile_params *t, int block) {
    return (long)(t->keys >= block ? t->keys / block : 1) * block;
}
size_t lz_decode_local_bytes(const lazyattn_tile_params *t, int head_dim, int block) {
    const size_t rows = (size_t)t->rows, wg = (size_t)t->work_group, nvo = (size_t)(head_dim / t->out_dims);
    const size_t kg = wg >= nvo ? wg / nvo : 1, rp = wg / rows >= 32 ? 32 : (wg / rows >= 1 ? wg / rows : 1);
    const size_t slots = (size_t)lz_decode_chunk_slots(t, block), entries = slots / (size_t)block;
    /* out_rows 2 or 4: the output sums in local memory between step 4s,
     * each work-item its own (LZ_FOM, cl/decode.cl) */
    const size_t vpi = wg >= nvo ? 1 : (nvo + wg - 1) / wg;
    const size_t accl = (t->out_rows - 1) & 1 ? wg * (vpi * rows * (size_t)t->out_dims + rows) : 0;
    return sizeof(float) * (2 * rows * (size_t)head_dim + rows * slots + rows * rp + 2 * rows +
                            kg * (size_t)head_dim + kg + accl) +
           8 * slots + 12 * entries + 64;
}
static long lz_decode_out_per_item(const lazyattn_tile_params *t, int head_dim) {
    const long nvo = head_dim / t->out_dims, vpi = t->work_group >= nvo ? 1 : (nvo + t->work_group - 1) / t->work_group;
    return vpi * t->rows * t->out_dims;
}

/* The small-work-group decode (cl/decode_warp.cl), the decode tile's
 * kv_together 3: keys = keys per batch (a divisor of the block is taken),
 * out_dims = dims per work-item, work_group a multiple of head_dim /
 * out_dims (the work-items of a row), rows = heads per work-group. Its
 * local memory: the heads' query, the partial dot products of a batch
 * [head_dim / out_dims][keys x rows + 1], scores, probabilities and the
 * pair owners' (max, sum) of a batch, the key groups' sums of one head. */
static int lz_decode_is_warp(const lazyattn_tile_params *t) { return t->kv_together == 3; }
size_t lz_decode_warp_local_bytes(const lazyattn_tile_params *t, int head_dim, int block) {
    size_t nb = (size_t)(t->keys < block ? t->keys : block), np = nb * (size_t)t->rows;
    const size_t nvo = (size_t)(head_dim / t->out_dims), kg = (size_t)t->work_group / nvo;
    /* + each work-item's rotated query dims (rows x out_dims x work_group) */
    return sizeof(float) * ((size_t)t->rows * (size_t)head_dim + nvo * (np + 1) + 4 * np + (size_t)t->rows +
                            (kg ? kg : 1) * (size_t)head_dim +
                            (size_t)t->rows * (size_t)t->out_dims * (size_t)t->work_group) +
           64;
}

/* Checks the ranges of a set tile (every field non-zero). */
static int lz_tile_check(const lz_device_limits *ctx, const lazyattn_tile_params *t, int group,
                         int head_dim, int block, int decode, const char *what) {
    if (decode)
        LZ_CHECK_ARG(t->rows >= 1 && group % t->rows == 0,
                     "tuning (%s): heads per work-group %d must divide the group %d", what, t->rows, group);
    else
        LZ_CHECK_ARG(t->rows >= group && t->rows % group == 0 && t->rows <= 1024,
                     "tuning (%s): rows %d must be a multiple of the group %d, at most 1024", what,
                     t->rows, group);
    LZ_CHECK_ARG(t->keys >= 1 && t->keys <= 1024, "tuning (%s): keys %d outside 1..1024", what, t->keys);
    LZ_CHECK_ARG(t->score_rows >= 1 && t->score_rows <= 16 && t->score_keys >= 1 &&
                     t->score_keys <= 16 && (t->keys % t->score_keys == 0 || (decode && lz_decode_is_warp(t))),
                 "tuning (%s): score tile %dx%d must be 1..16 each, the keys %d a multiple of it",
                 what, t->score_rows, t->score_keys, t->keys);
    LZ_CHECK_ARG(t->out_rows >= 1 && t->out_rows <= 16 && t->out_dims >= 4 && t->out_dims <= 32 &&
                     t->out_dims % 4 == 0 && head_dim % t->out_dims == 0,
                 "tuning (%s): output tile %dx%d: rows 1..16, dims a multiple of 4 in 4..32 "
                 "dividing head_dim %d",
                 what, t->out_rows, t->out_dims, head_dim);
    if (decode && lz_decode_is_warp(t)) { /* cl/decode_warp.cl; prefetch: 1 its reduction, 2 decode.cl's */
        LZ_CHECK_ARG(t->work_group % (head_dim / t->out_dims) == 0,
                     "tuning (%s): kv_together 3 (small work-groups): work_group %d must be a multiple "
                     "of head_dim / out_dims = %d", what, t->work_group, head_dim / t->out_dims);
        LZ_CHECK_ARG(t->prefetch >= 1 && t->prefetch <= 3,
                     "tuning (%s): kv_together 3 (small work-groups): prefetch %d must be 0, 1 (the "
                     "split-parallel reduction), 2 (decode.cl's) or 3 (by the split count)", what,
                     t->prefetch);
        const size_t rw = 256; /* lz_decode_warp_reduce's work-groups, at most */
        if (t->prefetch != 2 && rw > ctx->max_work_group_size)
            return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                           "tuning (%s): the split-parallel reduction's work-group %zu exceeds the "
                           "device's work-group limit %zu", what, rw, ctx->max_work_group_size);
    } else
        LZ_CHECK_ARG(t->kv_together == 1 || t->kv_together == 2,
                     "tuning (%s): kv_together %d must be 0, 1 or 2 (decode: 3 too)", what, t->kv_together);
    if (decode) { /* cl/decode.cl: LZ_DPF (L2 prefetch), LZ_DRING (kv_together 1),
                   * LZ_FRM (score_rows: step 1's K pipeline), LZ_FOM (out_rows) */
        LZ_CHECK_ARG(t->prefetch >= 1 && t->prefetch <= 5,
                     "tuning (%s): prefetch %d must be 0..5", what, t->prefetch);
        LZ_CHECK_ARG(t->score_rows <= 13, "tuning (%s): score_rows (step 1's K pipeline) %d must be 0..13",
                     what, t->score_rows);
        LZ_CHECK_ARG(t->out_rows <= 4,
                     "tuning (%s): out_rows %d must be 0..4 (1 + output sums in local memory 1 + "
                     "probabilities key-major 2)",
                     what, t->out_rows);
    } else
        LZ_CHECK_ARG(t->prefetch == 1 || t->prefetch == 2 || (t->prefetch == 3 && t->kv_together == 2),
                     "tuning (%s): prefetch %d must be 0, 1, 2 or 3 (3 with kv_together 2)", what, t->prefetch);
    LZ_CHECK_ARG(t->work_group >= 1 && t->work_group <= 1024,
                 "tuning (%s): work_group %d outside 1..1024", what, t->work_group);
    if ((size_t)t->work_group > ctx->max_work_group_size)
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                       "tuning (%s): work-group %d exceeds the device's work-group limit %zu", what,
                       t->work_group, ctx->max_work_group_size);
    size_t need = !decode ? lz_tile_local_bytes(t, head_dim)
                  : lz_decode_is_warp(t) ? lz_decode_warp_local_bytes(t, head_dim, block)
                                         : lz_decode_local_bytes(t, head_dim, block);
    if (need > ctx->local_mem_size)
        return lz_fail(LAZYATTN_STATUS_UNSUPPORTED,
                       "tuning (%s): tiles of %d rows x %d keys x head_dim %d need %zu B of local "
                       "memory, the device has %llu B",
                       what, t->rows, t->keys, head_dim, need, (unsigned long long)ctx->local_mem_size);
    const long outs = decode ? (lz_decode_is_warp(t) ? 2L * t->rows * t->out_dims : lz_decode_out_per_item(t, head_dim))
                             : lz_out_per_item(t, head_dim) * t->out_rows * t->out_dims;
    LZ_CHECK_ARG(outs <= 256, "tuning (%s): %ld output values per work-item (at most 256)", what, outs);
    return LAZYATTN_STATUS_OK;
}

/* Largest divisor of the group at most `most`. */
static int lz_group_divisor(int group, int most) {
    int d = most < group ? most : group;
    while (d > 1 && group % d) d--;
    return d < 1 ? 1 : d;
}

/* Its zero fields: heads per work-group up to 8 (a divisor of the group),
 * batches of 8 keys, 32 work-items (a multiple of the row's work-items),
 * 4 dims per work-item (more where head_dim / 4 exceeds the work-group). */
static void lz_decode_warp_defaults(const lz_device_limits *ctx, lazyattn_tile_params *t, int group, int head_dim) {
    t->rows = lz_group_divisor(group, 8);
    if (!t->keys) t->keys = 8;
    if (!t->score_rows) t->score_rows = 1;
    if (!t->score_keys) t->score_keys = 1;
    if (!t->out_rows) t->out_rows = 1;
#ifdef LZ_DECODE_WARP_DEFAULT /* test builds: its split-parallel reduction too */
    if (!t->prefetch) t->prefetch = 1;
#endif
    if (!t->prefetch) t->prefetch = 2;
    const int wg = t->work_group ? t->work_group : 32;
    if (!t->out_dims)
        for (t->out_dims = 4; t->out_dims < 32 && (head_dim % t->out_dims || head_dim / t->out_dims > wg);)
            t->out_dims += 4;
    if (!t->work_group && head_dim % t->out_dims == 0) {
        const int nvo = head_dim / t->out_dims;
        t->work_group = wg / nvo * nvo > 0 ? wg / nvo * nvo : nvo;
        if ((size_t)t->work_group > ctx->max_work_group_size) t->work_group = (int)ctx->max_work_group_size;
    }
    while (t->rows > 1 && 2L * t->rows * t->out_dims > 256) t->rows = lz_group_divisor(group, t->rows - 1);
}

/* The decode's zero fields (cl/decode.cl): heads per work-group up to 8 (a
 * divisor of the group), chunks of 256 key slots, 128 work-items, 8 dims per
 * work-item and 4 V rows in flight (score_keys) in the output step, no L2
 * prefetch (prefetch 2), no V ring (kv_together 2), step 1's K rows whole
 * (score_rows 1) and the output sums in registers (out_rows 1); chunks,
 * then heads, shrink to fit. The ring measured faster on the H200 (docs/PERFLOG.md,
 * p7-decode call 4) and is in its database row; unmeasured on the CPU
 * implementations, so not a default here. */
static void lz_decode_defaults(const lz_device_limits *ctx, lazyattn_tile_params *t, int group,
                               int head_dim, int block) {
#ifdef LZ_DECODE_WARP_DEFAULT /* test builds (-Dc_args=-DLZ_DECODE_WARP_DEFAULT): cl/decode_warp.cl
                               * where the caller sets no decode kernel (the database row's ignored) */
    if (!t->kv_together) t->kv_together = 3;
#endif
    if (lz_decode_is_warp(t)) {
        lz_decode_warp_defaults(ctx, t, group, head_dim);
        return;
    }
    const lazyattn_tile_params set = *t;
    t->rows = lz_group_divisor(group, 8);
    if (!t->score_rows) t->score_rows = 1;
    if (!t->out_rows) t->out_rows = 1;
    if (!t->out_dims) t->out_dims = head_dim % 8 == 0 ? 8 : 4;
    if (!t->kv_together) t->kv_together = 2;
    if (!t->prefetch) t->prefetch = 2;
    if (!t->keys) t->keys = 256;
    /* score_keys: V rows in flight per work-item in the output step: 4 (or
     * what divides keys) measured best on the H200 (PERFLOG, portable p5) */
    if (!t->score_keys)
        for (t->score_keys = 4; t->keys % t->score_keys; t->score_keys /= 2) {
        }
    if (!t->work_group) {
        t->work_group = 128;
        if ((size_t)t->work_group > ctx->max_work_group_size) t->work_group = (int)ctx->max_work_group_size;
    }
    for (int i = 0; i < 24 && lz_decode_local_bytes(t, head_dim, block) > ctx->local_mem_size; i++) {
        if (!set.keys && t->keys > block && t->keys / 2 % t->score_keys == 0) t->keys /= 2;
        else if (t->rows > 1) t->rows = lz_group_divisor(group, t->rows - 1);
        else break;
    }
    while (lz_decode_out_per_item(t, head_dim) > 256 && t->rows > 1) t->rows = lz_group_divisor(group, t->rows - 1);
}

/* Fills the zero fields of the prefill's t: the register tiles first, then the largest
 * tiles that fit the device's local memory. */
static void lz_tile_defaults(const lz_device_limits *ctx, lazyattn_tile_params *t, int group,
                             int head_dim) {
    const lazyattn_tile_params set = *t;
    if (!t->rows) t->rows = group * (group < 32 ? 32 / group : 1);
    if (!t->score_rows) t->score_rows = t->rows >= 4 ? 4 : 1;
    if (!t->score_keys) t->score_keys = 4;
    if (!t->out_rows) t->out_rows = t->rows >= 8 ? 8 : t->rows;
    if (!t->out_dims) t->out_dims = head_dim % 8 == 0 ? 8 : 4;
    if (!t->kv_together) t->kv_together = 2;
    if (!t->keys) t->keys = 32;
    if (!t->prefetch) t->prefetch = 2;
    /* shrink what was not set until the tiles fit the local memory */
    for (int i = 0; i < 16 && lz_tile_local_bytes(t, head_dim) > ctx->local_mem_size; i++) {
        if (!set.kv_together && !set.prefetch && t->kv_together == 1) t->kv_together = 2, t->prefetch = 2;
        else if (!set.keys && t->keys > 1 && t->keys / 2 % t->score_keys == 0) t->keys /= 2;
        else if (!set.rows && t->rows / 2 >= group && t->rows / 2 % group == 0) t->rows /= 2;
        else break;
    }
    if (!set.score_keys && t->keys % t->score_keys) t->score_keys = 1;
    if (!t->work_group) {
        /* one work-item per score tile, within the device's limit */
        long wg = (long)((t->rows + t->score_rows - 1) / t->score_rows) * (t->keys / t->score_keys);
        if (wg > (long)ctx->max_work_group_size) wg = (long)ctx->max_work_group_size;
        if (wg > 1024) wg = 1024;
        t->work_group = (int)wg;
        while (lz_out_per_item(t, head_dim) * t->out_rows * t->out_dims > 256 &&
               t->work_group * 2 <= (int)ctx->max_work_group_size && t->work_group < 1024)
            t->work_group *= 2;
    }
}

static const lazyattn_kernel_tuning *lz_tuning_lookup(const lz_device_limits *ctx,
                                                      const lazyattn_attention_config *c) {
    const int group = c->n_q_heads / c->n_kv_heads;
    for (const lz_tuning_row *r = lz_tuning_db; r->device; r++)
        if (ctx->device_name && !strcmp(r->device, ctx->device_name) && r->head_dim == c->head_dim &&
            r->group == group && r->dtype == (int)c->dtype)
            return &r->t;
    return NULL;
}

static void lz_merge(lazyattn_tile_params *dst, const lazyattn_tile_params *src) {
    const int *s = (const int *)src;
    int *d = (int *)dst;
    for (size_t i = 0; i < sizeof *dst / sizeof(int); i++)
        if (!d[i]) d[i] = s[i];
}

int lz_tuning_choose_for(const lz_device_limits *ctx, const lazyattn_attention_config *c,
                     const lazyattn_kernel_tuning *user, lazyattn_kernel_tuning *out) {
    const int group = c->n_q_heads / c->n_kv_heads;
    memset(out, 0, sizeof *out);
    if (user) {
        const int *f = (const int *)&user->prefill;
        for (size_t i = 0; i < 2 * sizeof user->prefill / sizeof(int); i++)
            LZ_CHECK_ARG(f[i] >= 0, "tuning: field %zu is negative (%d)", i, f[i]);
        LZ_CHECK_ARG(user->decode_groups_per_cu >= 0 && user->decode_groups_per_cu <= 1024,
                     "tuning: decode_groups_per_cu %d outside 0..1024", user->decode_groups_per_cu);
        *out = *user;
    }
    out->decode.rows = 0;
    const lazyattn_kernel_tuning *db = lz_tuning_lookup(ctx, c);
    if (db) {
        lazyattn_tile_params dbd = db->decode;
        dbd.rows = 0;
#ifdef LZ_DECODE_WARP_DEFAULT /* test builds: the decode_warp defaults, not the row's decode */
        memset(&dbd, 0, sizeof dbd);
#endif
        lz_merge(&out->prefill, &db->prefill);
        lz_merge(&out->decode, &dbd);
        if (!out->decode_groups_per_cu) out->decode_groups_per_cu = db->decode_groups_per_cu;
    }
    lz_tile_defaults(ctx, &out->prefill, group, c->head_dim);
    lz_decode_defaults(ctx, &out->decode, group, c->head_dim, c->block_size);
    if (!out->decode_groups_per_cu) out->decode_groups_per_cu = 8;
    int st = lz_tile_check(ctx, &out->prefill, group, c->head_dim, c->block_size, 0, "prefill");
    if (!st) st = lz_tile_check(ctx, &out->decode, group, c->head_dim, c->block_size, 1, "decode");
    if (st == LAZYATTN_STATUS_UNSUPPORTED) {
        char why[400];
        snprintf(why, sizeof why, "%s", lazyattn_last_error());
        return lz_fail(st, "attention config: head_dim %d, group %d, block %d: %s (local memory "
                           "and work-group limits are the device's)",
                       c->head_dim, group, c->block_size, why);
    }
    return st;
}

int lz_tile_options(const lazyattn_tile_params *t, int group, char *buf, size_t size) {
    int n = snprintf(buf, size,
                     " -DLZ_G=%d -DLZ_FR=%d -DLZ_FTK=%d -DLZ_FWG=%d -DLZ_FRM=%d -DLZ_FRN=%d "
                     "-DLZ_FOM=%d -DLZ_FON=%d -DLZ_FKV=%d -DLZ_FPF=%d -DLZ_DPF=%d -DLZ_DRING=%d",
                     group, t->rows, t->keys, t->work_group, t->score_rows, t->score_keys,
                     t->out_rows, t->out_dims, t->kv_together == 1,
                     t->prefetch == 1 ? 1 : t->prefetch == 3 ? 2 : 0, t->prefetch, t->kv_together == 1);
    return n > 0 && (size_t)n < size ? 0 : -1;
}

int lz_tuning_choose(const lazyattn_context *ctx, const lazyattn_attention_config *c,
                     const lazyattn_kernel_tuning *user, lazyattn_kernel_tuning *out) {
    const lz_device_limits dev = {ctx->device_name, ctx->local_mem_size, ctx->max_work_group_size};
    return lz_tuning_choose_for(&dev, c, user, out);
}
