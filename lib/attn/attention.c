/* SPDX-License-Identifier: Apache-2.0 */
/* Attention launchers: builds the kernels for one configuration, validates
 * every launch on the host, and enqueues write_kv, rope, prefill, decode and
 * materialise. */
#include "attn/attention_internal.h"
#include "checked_size.h"

#include "../../cl/kernel_abi.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The kernels' codes (cl/kernel_abi.h) are the public ones (lazyattn.h). */
_Static_assert(LZ_MAX_POSITION == LAZYATTN_MAX_POSITION, "kernel and host largest position");
_Static_assert(LZ_ROPE_NONE == LAZYATTN_ROPE_NONE && LZ_ROPE_NEOX == LAZYATTN_ROPE_NEOX &&
                   LZ_ROPE_GPTJ == LAZYATTN_ROPE_GPTJ,
               "kernel and host RoPE style codes");

static const char *const lz_kernel_names[LZ_K_COUNT] = {
    "lz_kv_write", "lz_rope_apply", "lz_prefill", "lz_decode", "lz_decode_reduce", "lz_materialise",
    "lz_prefill_batched", "lz_decode_warp_reduce", "lz_kv_write_rope_q"};

/* ---- configuration ------------------------------------------------------ */

static int lz_check_config(const lazyattn_context *ctx, const lazyattn_attention_config *c) {
    static const char fn[] = "attention config";
    LZ_CHECK_ARG(c->n_q_heads >= 1 && c->n_q_heads <= LAZYATTN_MAX_HEADS,
                 "%s: n_q_heads %d outside 1..%d", fn, c->n_q_heads, LAZYATTN_MAX_HEADS);
    LZ_TRY(lz_check_geometry(fn, c->n_kv_heads, c->head_dim, c->block_size, c->dtype, 1));
    LZ_TRY(lz_check_kv_layout(fn, c->kv_layout, c->block_size));
    LZ_CHECK_ARG(c->n_q_heads % c->n_kv_heads == 0,
                 "%s: %d query heads not divisible by %d KV heads", fn, c->n_q_heads,
                 c->n_kv_heads);
    LZ_CHECK_ARG(c->rope.style >= LAZYATTN_ROPE_NONE && c->rope.style <= LAZYATTN_ROPE_GPTJ,
                 "attention config: unknown rope style %d", (int)c->rope.style);
    LZ_CHECK_ARG(c->alibi == 0 || c->alibi == 1, "attention config: alibi must be 0 or 1");
    LZ_CHECK_ARG(c->scale >= 0.0f && isfinite(c->scale), "attention config: bad scale %g",
                 (double)c->scale);
    if (c->rope.style != LAZYATTN_ROPE_NONE) {
        double probe[LAZYATTN_MAX_HEAD_DIM / 2];
        int st = lazyattn_rope_frequencies(&c->rope, c->head_dim, probe);
        if (st) return st;
    }
    (void)ctx; /* the device's limits are checked with the tiles (tuning.c) */
    return LAZYATTN_STATUS_OK;
}

static int lz_upload_tables(lazyattn_attention *a) {
    lazyattn_context *ctx = a->ctx;
    const lazyattn_attention_config *c = &a->cfg;
    int n_pairs = a->rot_dim / 2 > 0 ? a->rot_dim / 2 : 1;
    cl_float2 *freq = calloc((size_t)n_pairs, sizeof *freq);
    float *slopes = calloc((size_t)c->n_q_heads, sizeof *slopes);
    double *f = calloc((size_t)n_pairs, sizeof *f);
    int st = LAZYATTN_STATUS_OK;
    if (!freq || !slopes || !f) {
        st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_attention_create");
        goto done;
    }
    if (c->rope.style != LAZYATTN_ROPE_NONE) {
        st = lazyattn_rope_frequencies(&c->rope, c->head_dim, f);
        if (st) goto done;
        for (int i = 0; i < n_pairs; i++) {
            freq[i].s[0] = (float)f[i];
            freq[i].s[1] = (float)(f[i] - (double)freq[i].s[0]);
        }
    }
    for (int h = 0; h < c->n_q_heads; h++) {
        double slope;
        lazyattn_alibi_slope(h, c->n_q_heads, &slope); /* h is in range */
        slopes[h] = (float)slope;
    }
    cl_int err;
    a->freq = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                             (size_t)n_pairs * sizeof *freq, freq, &err);
    if (err == CL_SUCCESS)
        a->slopes = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                   (size_t)c->n_q_heads * sizeof *slopes, slopes, &err);
    int zero = 0;
    if (err == CL_SUCCESS)
        a->err = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zero,
                                &zero, &err);
    if (err != CL_SUCCESS) st = lz_cl_fail(err, "lazyattn_attention_create: clCreateBuffer");
done:
    free(freq);
    free(slopes);
    free(f);
    return st;
}

int lazyattn_attention_create(lazyattn_context *ctx, const lazyattn_attention_config *config,
                              lazyattn_attention **out) {
    return lazyattn_attention_create_tuned(ctx, config, NULL, out);
}

int lazyattn_attention_get_tuning(const lazyattn_attention *a, lazyattn_kernel_tuning *tuning) {
    LZ_CHECK_ARG(a && tuning, "lazyattn_attention_get_tuning: NULL argument");
    *tuning = a->tune;
    return LAZYATTN_STATUS_OK;
}

/* The portable programs: 0 holds the prefill's tiles (and write, rope,
 * materialise), 1 the decode's, 2 the batched prefill's (the prefill's tile
 * options; its own program, see internal.h). */
int lz_portable_program(const lazyattn_attention_config *config, const lazyattn_kernel_tuning *tune,
                        int which, lz_program_spec *out) {
    static const char *const prefill_src[] = {"block_entry", "kernel_abi", "storage", "rope",
                                              "kv_write", "rope_apply", "flash", "prefill",
                                              "materialise"};
    static const char *const decode_src[] = {"block_entry", "kernel_abi", "storage", "rope",
                                             "softmax_state", "decode"};
    static const char *const batched_src[] = {"block_entry", "kernel_abi", "storage", "rope",
                                              "flash", "prefill_batched"};
    /* the small-work-group decode (decode tile kv_together 3): lz_decode_warp
     * next to decode.cl's kernels (its lz_decode_reduce) */
    static const char *const decode_warp_src[] = {"block_entry", "kernel_abi", "storage", "rope",
                                                  "softmax_state", "decode", "decode_warp"};
    LZ_CHECK_ARG(which >= 0 && which < LZ_PORTABLE_PROGRAMS,
                 "lz_portable_program: program %d (0 .. %d)", which, LZ_PORTABLE_PROGRAMS - 1);
    out->sources = which == 0 ? prefill_src : which == 1 ? decode_src : batched_src;
    out->n_sources = which == 0   ? (int)(sizeof prefill_src / sizeof *prefill_src)
                     : which == 1 ? (int)(sizeof decode_src / sizeof *decode_src)
                                  : (int)(sizeof batched_src / sizeof *batched_src);
    if (which == 1 && lz_decode_warp(tune))
        out->sources = decode_warp_src, out->n_sources = (int)(sizeof decode_warp_src / sizeof *decode_warp_src);
    int n = snprintf(out->options, sizeof out->options,
                     "-cl-std=CL1.2 -DLZ_HEAD_DIM=%d -DLZ_BLOCK=%d -DLZ_DTYPE=%d -DLZ_KV_TILED=%d",
                     config->head_dim, config->block_size, (int)config->dtype,
                     config->kv_layout == LAZYATTN_KV_LAYOUT_TILED);
    if (n < 0 || (size_t)n >= sizeof out->options ||
        lz_tile_options(which == 1 ? &tune->decode : &tune->prefill,
                        config->n_q_heads / config->n_kv_heads, out->options + n,
                        sizeof out->options - (size_t)n))
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "portable program options too long");
    return LAZYATTN_STATUS_OK;
}

/* The program of each portable kernel (lz_portable_program). */
static int lz_kernel_program(int k) {
    return k == LZ_K_DECODE || k == LZ_K_REDUCE || k == LZ_K_REDUCE_SPLITS ? 1
           : k == LZ_K_PREFILL_BATCHED                                    ? 2
                                                                          : 0;
}

/* Builds portable program `which` and creates its kernels. */
static int lz_portable_build_one(lazyattn_attention *a, int which) {
    lz_program_spec spec;
    int st = lz_portable_program(&a->cfg, &a->tune, which, &spec);
    if (st) return st;
    if (a->ctx->nv_cc_major && a->ov.nv_verbose == 1) /* registers and spills in the log */
        strncat(spec.options, " -cl-nv-verbose", sizeof spec.options - strlen(spec.options) - 1);
    /* on a GPU the prefill's softmax takes the device's native exponential
     * (cl/flash.h LZ_EXP; LAZYATTN_TUNE portable.exact_exp=1 keeps exp()) */
    if (which != 1 && a->ctx->is_gpu && a->ov.exact_exp != 1)
        strncat(spec.options, " -DLZ_NATIVE_EXP", sizeof spec.options - strlen(spec.options) - 1);
    /* NVIDIA: the register cap of LAZYATTN_TUNE's portable.prefill_maxreg /
     * portable.decode_maxreg (0: none); else the decode's capped so that its
     * tuned work-groups per CU fit the 64 K registers of an SM (left to the
     * compiler, step 1's K pipelines take more and fewer work-groups fit:
     * docs/PERFLOG.md, p8-decode), no cap below 96 (spills) */
    const int asked = which != 1 ? a->ov.prefill_maxreg : a->ov.decode_maxreg;
    long cap = 0;
    if (asked >= 0) {
        cap = asked;
    } else if (which == 1) {
        const long threads = (long)a->tune.decode_groups_per_cu * a->tune.decode.work_group;
        cap = threads > 0 ? 65536 / threads / 8 * 8 : 0;
        if (cap < 96 || cap >= 255) cap = 0;
    }
    if (a->ctx->nv_cc_major && cap > 0) {
        const size_t n = strlen(spec.options);
        snprintf(spec.options + n, sizeof spec.options - n, " -cl-nv-maxrregcount=%ld", cap);
    }
    cl_program program;
    st = lz_program_get(a->ctx, spec.sources, spec.n_sources, spec.options, &program);
    if (st) return st;
    for (int k = 0; k < LZ_K_COUNT; k++) {
        if (lz_kernel_program(k) != which) continue;
        if (k == LZ_K_REDUCE_SPLITS && !lz_decode_warp_reduce(a)) continue; /* not in the program */
        cl_int err;
        const char *name = k == LZ_K_DECODE && lz_decode_warp(&a->tune) ? "lz_decode_warp" : lz_kernel_names[k];
        a->kernels[k] = clCreateKernel(program, name, &err);
        if (err != CL_SUCCESS) return lz_cl_fail(err, name);
    }
    return LAZYATTN_STATUS_OK;
}

/* Builds the portable kernels of programs 0 and 1 (program 2, the batched
 * prefill, at its first use). */
static int lz_portable_build(lazyattn_attention *a) {
    for (int which = 0; which < 2; which++) {
        int st = lz_portable_build_one(a, which);
        if (st) return st;
    }
    return LAZYATTN_STATUS_OK;
}


int lazyattn_attention_create_tuned(lazyattn_context *ctx, const lazyattn_attention_config *config,
                                    const lazyattn_kernel_tuning *tuning, lazyattn_attention **out) {
    LZ_CHECK_ARG(out != NULL, "lazyattn_attention_create: out is NULL");
    *out = NULL;
    LZ_CHECK_ARG(ctx && config, "lazyattn_attention_create: NULL context or config");
    int st = lz_check_config(ctx, config);
    if (st) return st;
    lazyattn_kernel_tuning tune;
    st = lz_tuning_choose(ctx, config, tuning, &tune);
    if (st) return st;
    lazyattn_attention *a = calloc(1, sizeof *a);
    if (!a) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_attention_create");
    a->ctx = ctx;
    a->cfg = *config;
    if (a->cfg.scale == 0.0f) a->cfg.scale = 1.0f / sqrtf((float)config->head_dim);
    a->rot_dim = config->rope.style == LAZYATTN_ROPE_NONE
                     ? 0
                     : (config->rope.rotary_dim ? config->rope.rotary_dim : config->head_dim);
    a->group = config->n_q_heads / config->n_kv_heads;
    a->tune = tune;
    lz_tune_from_env(ctx, &a->ov); /* LAZYATTN_TUNE */
    st = lz_portable_build(a);
    if (st) goto fail;
    st = lz_nv_build(a);
    if (st) goto fail;
    st = lz_upload_tables(a);
    if (st) goto fail;
    *out = a;
    return LAZYATTN_STATUS_OK;
fail:
    lazyattn_attention_destroy(a);
    return st;
}

void lazyattn_attention_destroy(lazyattn_attention *a) {
    if (!a) return;
    for (int k = 0; k < LZ_K_COUNT; k++)
        if (a->kernels[k]) clReleaseKernel(a->kernels[k]);
    if (a->nv_prefill) clReleaseKernel(a->nv_prefill);
    if (a->nv_decode) clReleaseKernel(a->nv_decode);
    if (a->nv_reduce) clReleaseKernel(a->nv_reduce);
    if (a->nv_prefill_batched) clReleaseKernel(a->nv_prefill_batched);
    for (int i = 0; i < LZ_NV_ORDERS; i++)
        if (a->nv_orders[i].order) clReleaseMemObject(a->nv_orders[i].order);
    cl_mem mems[] = {a->freq, a->slopes, a->err, a->part_ml, a->part_acc};
    for (size_t i = 0; i < sizeof mems / sizeof *mems; i++)
        if (mems[i]) clReleaseMemObject(mems[i]);
    free(a);
}

int lazyattn_attention_get_config(const lazyattn_attention *a, lazyattn_attention_config *config) {
    LZ_CHECK_ARG(a && config, "lazyattn_attention_get_config: NULL argument");
    *config = a->cfg;
    return LAZYATTN_STATUS_OK;
}

int lazyattn_attention_check(lazyattn_attention *a, cl_command_queue queue) {
    LZ_CHECK_ARG(a != NULL, "lazyattn_attention_check: attn is NULL");
    cl_command_queue q = lz_queue(a->ctx, queue);
    int bits = 0, zero = 0;
    cl_int err = clEnqueueReadBuffer(q, a->err, CL_TRUE, 0, sizeof bits, &bits, 0, NULL, NULL);
    if (err != CL_SUCCESS) return lz_cl_fail(err, "lazyattn_attention_check: read");
    if (!bits) return LAZYATTN_STATUS_OK;
    err = clEnqueueWriteBuffer(q, a->err, CL_TRUE, 0, sizeof zero, &zero, 0, NULL, NULL);
    if (err != CL_SUCCESS) return lz_cl_fail(err, "lazyattn_attention_check: clear");
    char detail[400];
    size_t used = 0;
    detail[0] = 0;
#define LZ_ERR_X_TEXT(name, bit, what)                                                      \
    if ((bits & (bit)) && used < sizeof detail)                                            \
        used += (size_t)snprintf(detail + used, sizeof detail - used, " %s;", what);
    LZ_ERR_LIST(LZ_ERR_X_TEXT)
#undef LZ_ERR_X_TEXT
    return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                   "lazyattn_attention_check: kernels skipped bad input (bits 0x%x):%s", bits,
                   detail);
}

/* ---- write, rope, materialise ------------------------------------------- */

/* lazyattn_write_kv, and with q set (n_q_heads of them, rotated in place at
 * q_pos) lazyattn_write_kv_rope_q: one launch either way. */
static int lz_write_kv_launch(lazyattn_attention *a, lazyattn_pool *pool, int layer, int n_tokens,
                              cl_mem k, cl_mem v, cl_mem slots, cl_mem stored_pos, cl_mem q,
                              cl_mem q_pos, cl_command_queue queue, cl_event *event,
                              const char *fn) {
    LZ_CHECK_ARG(a != NULL, "%s: attn is NULL", fn);
    int st = lz_check_pool(a, pool, layer, fn);
    if (st) return st;
    LZ_CHECK_ARG(n_tokens >= 1, "%s: n_tokens %d must be >= 1", fn, n_tokens);
    size_t kv_bytes = 0, idx_bytes = 0, q_bytes = 0;
    LZ_TRY(lz_size_product4(&kv_bytes, fn, "k/v bytes (n_tokens x n_kv_heads x head_dim x 4)",
                            (size_t)n_tokens, (size_t)a->cfg.n_kv_heads, (size_t)a->cfg.head_dim,
                            sizeof(float)));
    LZ_TRY(lz_size_product(&idx_bytes, fn, "slots bytes", (size_t)n_tokens, sizeof(cl_int), 1));
    LZ_CHECK_MEM(k, kv_bytes, "k");
    LZ_CHECK_MEM(v, kv_bytes, "v");
    LZ_CHECK_MEM(slots, idx_bytes, "slots");
    LZ_CHECK_MEM(stored_pos, idx_bytes, "stored_pos");
    const int with_q = q != NULL;
    if (with_q) {
        LZ_TRY(lz_size_product4(&q_bytes, fn, "q bytes (n_tokens x n_q_heads x head_dim x 4)",
                                (size_t)n_tokens, (size_t)a->cfg.n_q_heads,
                                (size_t)a->cfg.head_dim, sizeof(float)));
        LZ_CHECK_MEM(q, q_bytes, "q");
        LZ_CHECK_MEM(q_pos, idx_bytes, "q_pos");
    }
    /* blocks handed out again are written after the commands that read them */
    LZ_TRY(lz_pool_order_writes(pool, lz_queue(a->ctx, queue), fn));
    cl_mem kc = lazyattn_pool_k_buffer(pool, layer), vc = lazyattn_pool_v_buffer(pool, layer);
    cl_int style = (cl_int)a->cfg.rope.style, rot = a->rot_dim, nkv = a->cfg.n_kv_heads;
    cl_int nb = (cl_int)lz_pool_n_blocks(pool);
    /* no rotation (LAZYATTN_ROPE_NONE): the queries stay as they are */
    cl_int nqh = with_q && style != LAZYATTN_ROPE_NONE ? a->cfg.n_q_heads : 0;
    const int kernel = with_q ? LZ_K_KV_WRITE_ROPE_Q : LZ_K_KV_WRITE;
    lz_args g = {a->kernels[kernel], 0, CL_SUCCESS};
    LZ_ARG(&g, k); LZ_ARG(&g, v); LZ_ARG(&g, slots); LZ_ARG(&g, stored_pos);
    LZ_ARG(&g, kc); LZ_ARG(&g, vc); LZ_ARG(&g, a->freq); LZ_ARG(&g, style); LZ_ARG(&g, rot);
    LZ_ARG(&g, n_tokens); LZ_ARG(&g, nkv); LZ_ARG(&g, nb); LZ_ARG(&g, a->err);
    if (with_q) {
        LZ_ARG(&g, q); LZ_ARG(&g, q_pos); LZ_ARG(&g, nqh);
    }
    if (g.err != CL_SUCCESS) return lz_cl_fail(g.err, "lazyattn_write_kv: clSetKernelArg");
    size_t global[3] = {(size_t)a->cfg.head_dim / 2, (size_t)(nkv + nqh), (size_t)n_tokens};
    size_t local[3] = {(size_t)a->cfg.head_dim / 2, 1, 1};
    return lz_enqueue(a, kernel, 3, global, local, queue, event, fn);
}

int lazyattn_write_kv(lazyattn_attention *a, lazyattn_pool *pool, int layer, int n_tokens, cl_mem k,
                      cl_mem v, cl_mem slots, cl_mem stored_pos, cl_command_queue queue,
                      cl_event *event) {
    int st = lz_write_kv_launch(a, pool, layer, n_tokens, k, v, slots, stored_pos, NULL, NULL,
                                queue, event, "lazyattn_write_kv");
    return lz_pool_used(pool, st, queue);
}

int lazyattn_write_kv_rope_q(lazyattn_attention *a, lazyattn_pool *pool, int layer, int n_tokens,
                             cl_mem k, cl_mem v, cl_mem slots, cl_mem stored_pos, cl_mem q,
                             cl_mem q_pos, cl_command_queue queue, cl_event *event) {
    static const char fn[] = "lazyattn_write_kv_rope_q";
    LZ_CHECK_ARG(q != NULL && q_pos != NULL, "%s: q or q_pos is NULL", fn);
    int st = lz_write_kv_launch(a, pool, layer, n_tokens, k, v, slots, stored_pos, q, q_pos, queue,
                                event, fn);
    return lz_pool_used(pool, st, queue);
}

int lazyattn_rope_apply(lazyattn_attention *a, int n_tokens, int n_heads, cl_mem x, cl_mem pos,
                        cl_command_queue queue, cl_event *event) {
    static const char fn[] = "lazyattn_rope_apply";
    LZ_CHECK_ARG(a != NULL, "%s: attn is NULL", fn);
    LZ_CHECK_ARG(n_tokens >= 1 && n_heads >= 1, "%s: n_tokens %d and n_heads %d must be >= 1", fn,
                 n_tokens, n_heads);
    size_t x_bytes = 0, pos_bytes = 0;
    LZ_TRY(lz_size_product4(&x_bytes, fn, "x bytes (n_tokens x n_heads x head_dim x 4)",
                            (size_t)n_tokens, (size_t)n_heads, (size_t)a->cfg.head_dim,
                            sizeof(float)));
    LZ_TRY(lz_size_product(&pos_bytes, fn, "pos bytes", (size_t)n_tokens, sizeof(cl_int), 1));
    LZ_CHECK_MEM(x, x_bytes, "x");
    LZ_CHECK_MEM(pos, pos_bytes, "pos");
    if (a->cfg.rope.style == LAZYATTN_ROPE_NONE) {
        /* nothing to rotate; still give the caller an event that completes */
        if (event) {
            cl_int err = clEnqueueMarkerWithWaitList(lz_queue(a->ctx, queue), 0, NULL, event);
            if (err != CL_SUCCESS) return lz_cl_fail(err, fn);
        }
        return LAZYATTN_STATUS_OK;
    }
    cl_int style = (cl_int)a->cfg.rope.style, rot = a->rot_dim;
    lz_args g = {a->kernels[LZ_K_ROPE], 0, CL_SUCCESS};
    LZ_ARG(&g, x); LZ_ARG(&g, pos); LZ_ARG(&g, a->freq); LZ_ARG(&g, style); LZ_ARG(&g, rot);
    LZ_ARG(&g, n_tokens); LZ_ARG(&g, n_heads); LZ_ARG(&g, a->err);
    if (g.err != CL_SUCCESS) return lz_cl_fail(g.err, "lazyattn_rope_apply: clSetKernelArg");
    size_t global[3] = {(size_t)a->cfg.head_dim / 2, (size_t)n_heads, (size_t)n_tokens};
    size_t local[3] = {(size_t)a->cfg.head_dim / 2, 1, 1};
    return lz_enqueue(a, LZ_K_ROPE, 3, global, local, queue, event, fn);
}

static int lz_materialise_launch(lazyattn_attention *a, lazyattn_pool *pool, int layer, int n, cl_mem src,
                                 cl_mem dst, cl_command_queue queue, cl_event *event) {
    static const char fn[] = "lazyattn_materialise";
    LZ_CHECK_ARG(a != NULL, "%s: attn is NULL", fn);
    int st = lz_check_pool(a, pool, layer, fn);
    if (st) return st;
    LZ_CHECK_ARG(n >= 1, "%s: n %d must be >= 1", fn, n);
    size_t src_bytes = 0, dst_bytes = 0;
    LZ_TRY(lz_size_product(&src_bytes, fn, "src bytes", (size_t)n, sizeof(cl_ulong), 1));
    LZ_TRY(lz_size_product(&dst_bytes, fn, "dst bytes", (size_t)n, sizeof(cl_int), 1));
    /* the kernel indexes (copy, token) with one int */
    LZ_TRY(lz_fits_int((int64_t)n * a->cfg.block_size, fn, "work-items along n (n x block_size)"));
    LZ_CHECK_MEM(src, src_bytes, "src");
    LZ_CHECK_MEM(dst, dst_bytes, "dst");
    LZ_TRY(lz_pool_order_writes(pool, lz_queue(a->ctx, queue), fn));
    /* the source blocks after their tier upload */
    LZ_TRY(lz_pool_order_reads(pool, layer, lz_queue(a->ctx, queue), fn));
    cl_mem kc = lazyattn_pool_k_buffer(pool, layer), vc = lazyattn_pool_v_buffer(pool, layer);
    cl_int style = (cl_int)a->cfg.rope.style, rot = a->rot_dim, nkv = a->cfg.n_kv_heads;
    cl_int nb = (cl_int)lz_pool_n_blocks(pool);
    lz_args g = {a->kernels[LZ_K_MATERIALISE], 0, CL_SUCCESS};
    LZ_ARG(&g, src); LZ_ARG(&g, dst); LZ_ARG(&g, kc); LZ_ARG(&g, vc); LZ_ARG(&g, a->freq);
    LZ_ARG(&g, style); LZ_ARG(&g, rot); LZ_ARG(&g, n); LZ_ARG(&g, nkv); LZ_ARG(&g, nb);
    LZ_ARG(&g, a->err);
    if (g.err != CL_SUCCESS) return lz_cl_fail(g.err, "lazyattn_materialise: clSetKernelArg");
    size_t global[3] = {(size_t)a->cfg.head_dim / 2, (size_t)nkv,
                        (size_t)n * (size_t)a->cfg.block_size};
    size_t local[3] = {(size_t)a->cfg.head_dim / 2, 1, 1};
    return lz_enqueue(a, LZ_K_MATERIALISE, 3, global, local, queue, event, fn);
}

int lazyattn_materialise(lazyattn_attention *a, lazyattn_pool *pool, int layer, int n, cl_mem src,
                         cl_mem dst, cl_command_queue queue, cl_event *event) {
    int st = lz_materialise_launch(a, pool, layer, n, src, dst, queue, event);
    return lz_pool_used(pool, st, queue);
}

/* ---- prefill -------------------------------------------------------------- */

static int lz_prefill_launch(lazyattn_attention *a, const lazyattn_pool *pool, int layer,
                             const lazyattn_prefill_args *p, cl_command_queue queue, cl_event *event) {
    static const char fn[] = "lazyattn_prefill";
    LZ_CHECK_ARG(a != NULL && p != NULL, "%s: attn or args is NULL", fn);
    int st = lz_check_pool(a, pool, layer, fn);
    if (st) return st;
    LZ_CHECK_ARG(p->n_queries >= 1, "%s: n_queries %d must be >= 1", fn, p->n_queries);
    LZ_CHECK_ARG(p->n_entries >= 0, "%s: n_entries %d must be >= 0", fn, p->n_entries);
    size_t qpos_bytes = 0, table_bytes = 0, epos_bytes = 0;
    int plain = 0;
    LZ_TRY(lz_check_io(a, fn, p->n_queries, p->q, p->out, p->lse, p->q_dtype, p->out_dtype, &plain));
    const int fast = a->fast && plain; /* the NVIDIA kernels take f32 q/out and no lse */
    LZ_TRY(lz_size_product(&qpos_bytes, fn, "q_pos bytes", (size_t)p->n_queries, sizeof(cl_int), 1));
    LZ_TRY(lz_size_product(&table_bytes, fn, "table bytes", (size_t)p->n_entries, sizeof(cl_ulong), 1));
    LZ_TRY(lz_size_product(&epos_bytes, fn, "entry_pos bytes", (size_t)p->n_entries, sizeof(cl_int), 1));
    LZ_CHECK_MEM(p->q_pos, qpos_bytes, "q_pos");
    cl_mem table = p->table, entry_pos = p->entry_pos;
    if (p->n_entries == 0) table = entry_pos = a->freq; /* never read; any valid buffer */
    LZ_CHECK_MEM(table, table_bytes, "table");
    LZ_CHECK_MEM(entry_pos, epos_bytes, "entry_pos");
    /* the layer's blocks after their tier upload, if one is in flight */
    LZ_TRY(lz_pool_order_reads(pool, layer, lz_queue(a->ctx, queue), fn));

    cl_mem kc = lazyattn_pool_k_buffer(pool, layer), vc = lazyattn_pool_v_buffer(pool, layer);
    cl_int style = (cl_int)a->cfg.rope.style, rot = a->rot_dim, alibi = a->cfg.alibi;
    cl_int nqh = a->cfg.n_q_heads, nkv = a->cfg.n_kv_heads, nb = (cl_int)lz_pool_n_blocks(pool);
    cl_float scale = a->cfg.scale;
    lz_args g = {fast ? a->nv_prefill : a->kernels[LZ_K_PREFILL], 0, CL_SUCCESS};
    LZ_ARG(&g, p->q); LZ_ARG(&g, p->q_pos); LZ_ARG(&g, table); LZ_ARG(&g, entry_pos);
    LZ_ARG(&g, kc); LZ_ARG(&g, vc); LZ_ARG(&g, p->out); LZ_ARG(&g, a->freq); LZ_ARG(&g, a->slopes);
    LZ_ARG(&g, style); LZ_ARG(&g, rot); LZ_ARG(&g, alibi); LZ_ARG(&g, scale);
    LZ_ARG(&g, p->n_queries); LZ_ARG(&g, p->n_entries); LZ_ARG(&g, nqh); LZ_ARG(&g, nkv);
    LZ_ARG(&g, nb); LZ_ARG(&g, a->err);
    /* one warp per (16 tokens, query head); the G heads of a KV head together */
    const size_t nv_tokens = fast ? (size_t)16 * (size_t)(a->nv.warps / a->group) : 1;
    const size_t nv_tiles = lz_round_up((size_t)p->n_queries, nv_tokens) / nv_tokens;
    int groups = 0; /* persistent: the work-groups */
    if (fast) {
        cl_mem order =
            lz_nv_prefill_order(a, p->n_queries, p->n_entries, (int)nv_tiles, (int)nv_tokens, &groups);
        LZ_ARG(&g, order);
    }
    if (!fast) LZ_IO_ARGS(&g, a, p->lse, p->q_dtype, p->out_dtype);
    if (g.err != CL_SUCCESS) return lz_cl_fail(g.err, "lazyattn_prefill: clSetKernelArg");
    if (fast) {
        /* a work-group a token tile and KV head, or the persistent kernel's
         * work-groups (one a compute unit), each running a list of them */
        size_t local[2] = {a->nv_prefill_threads, 1};
        size_t global[2] = {nv_tiles * local[0], (size_t)nkv};
        if (a->nv.persist) global[0] = (size_t)groups * local[0], global[1] = 1;
        cl_int err = clEnqueueNDRangeKernel(lz_queue(a->ctx, queue), a->nv_prefill, 2, NULL,
                                            global, local, 0, NULL, event);
        return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : lz_cl_fail(err, fn);
    }
    const size_t tokens = (size_t)(a->tune.prefill.rows / a->group);
    size_t local[2] = {(size_t)a->tune.prefill.work_group, 1};
    size_t global[2] = {lz_round_up((size_t)p->n_queries, tokens) / tokens * local[0], (size_t)nkv};
    return lz_enqueue(a, LZ_K_PREFILL, 2, global, local, queue, event, fn);
}

int lazyattn_prefill(lazyattn_attention *a, const lazyattn_pool *pool, int layer,
                     const lazyattn_prefill_args *p, cl_command_queue queue, cl_event *event) {
    int st = lz_prefill_launch(a, pool, layer, p, queue, event);
    return lz_pool_used(pool, st, queue);
}

/* ---- decode ------------------------------------------------------------- */

int lazyattn_decode(lazyattn_attention *a, const lazyattn_pool *pool, int layer,
                    const lazyattn_decode_args *d, cl_command_queue queue, cl_event *event) {
    int st = lz_decode_launch(a, pool, layer, d, queue, event);
    return lz_pool_used(pool, st, queue);
}

/* ---- batched ragged prefill ------------------------------------------------ */

/* Many sequences in one launch (cl/prefill_batched.cl, and on the NVIDIA
 * path lz_prefill_nv_batched in cl/nv/prefill_kernels.cl): work-groups (query tile,
 * KV head, sequence), max_queries sizing the tile dimension. The indptr
 * arrays stay on the device; the kernels check each sequence's offsets. */
static int lz_prefill_batched_launch(lazyattn_attention *a, const lazyattn_pool *pool, int layer,
                                     const lazyattn_prefill_batch_args *p, cl_command_queue queue,
                                     cl_event *event) {
    static const char fn[] = "lazyattn_prefill_batched";
    LZ_CHECK_ARG(a != NULL && p != NULL, "%s: attn or args is NULL", fn);
    int st = lz_check_pool(a, pool, layer, fn);
    if (st) return st;
    LZ_CHECK_ARG(p->n_seqs >= 1, "%s: n_seqs %d must be >= 1", fn, p->n_seqs);
    LZ_CHECK_ARG(p->n_queries >= 1, "%s: n_queries %d must be >= 1", fn, p->n_queries);
    LZ_CHECK_ARG(p->n_entries >= 0, "%s: n_entries %d must be >= 0", fn, p->n_entries);
    LZ_CHECK_ARG(p->max_queries >= 1 && p->max_queries <= p->n_queries,
                 "%s: max_queries %d outside 1..n_queries (%d)", fn, p->max_queries, p->n_queries);
    size_t qpos_bytes = 0, indptr_bytes = 0, table_bytes = 0, epos_bytes = 0;
    int plain = 0;
    LZ_TRY(lz_check_io(a, fn, p->n_queries, p->q, p->out, p->lse, p->q_dtype, p->out_dtype, &plain));
    const int fast = a->fast && plain; /* the NVIDIA kernels take f32 q/out and no lse */
    LZ_TRY(lz_size_product(&qpos_bytes, fn, "q_pos bytes", (size_t)p->n_queries, sizeof(cl_int), 1));
    LZ_TRY(lz_size_product(&indptr_bytes, fn, "indptr bytes ((n_seqs + 1) x 4)",
                           (size_t)p->n_seqs + 1, sizeof(cl_int), 1));
    LZ_TRY(lz_size_product(&table_bytes, fn, "table bytes", (size_t)p->n_entries, sizeof(cl_ulong), 1));
    LZ_TRY(lz_size_product(&epos_bytes, fn, "entry_pos bytes", (size_t)p->n_entries, sizeof(cl_int), 1));
    LZ_CHECK_MEM(p->q_pos, qpos_bytes, "q_pos");
    LZ_CHECK_MEM(p->q_indptr, indptr_bytes, "q_indptr");
    LZ_CHECK_MEM(p->table_indptr, indptr_bytes, "table_indptr");
    cl_mem table = p->table, entry_pos = p->entry_pos;
    if (p->n_entries == 0) table = entry_pos = a->freq; /* never read; any valid buffer */
    LZ_CHECK_MEM(table, table_bytes, "table");
    LZ_CHECK_MEM(entry_pos, epos_bytes, "entry_pos");

    /* rows per work-group, and the launch: tiles x KV heads x sequences */
    const size_t tokens = fast ? (size_t)16 * (size_t)(a->nv.warps / a->group)
                                  : (size_t)(a->tune.prefill.rows / a->group);
    const size_t local0 = fast ? a->nv_prefill_threads : (size_t)a->tune.prefill.work_group;
    const size_t tiles = ((size_t)p->max_queries + tokens - 1) / tokens;
    /* the kernels form q_begin + tile x tokens in int */
    LZ_TRY(lz_fits_int((int64_t)p->n_queries + (int64_t)(tiles * tokens), fn,
                       "n_queries + max_queries rounded up to a tile"));
    size_t global0 = 0, groups = 0;
    LZ_TRY(lz_size_product(&global0, fn, "work-items along the tiles", tiles, local0, 1));
    LZ_TRY(lz_size_product(&groups, fn, "work-groups (tiles x KV heads x sequences)", tiles,
                           (size_t)a->cfg.n_kv_heads, (size_t)p->n_seqs));

    if (!fast && !a->kernels[LZ_K_PREFILL_BATCHED]) { /* built at the first use */
        st = lz_portable_build_one(a, 2);
        if (st) return st;
    }
    /* the layer's blocks after their tier upload, if one is in flight */
    LZ_TRY(lz_pool_order_reads(pool, layer, lz_queue(a->ctx, queue), fn));
    cl_mem kc = lazyattn_pool_k_buffer(pool, layer), vc = lazyattn_pool_v_buffer(pool, layer);
    cl_int style = (cl_int)a->cfg.rope.style, rot = a->rot_dim, alibi = a->cfg.alibi;
    cl_int nqh = a->cfg.n_q_heads, nkv = a->cfg.n_kv_heads, nb = (cl_int)lz_pool_n_blocks(pool);
    cl_float scale = a->cfg.scale;
    cl_kernel kernel = fast ? a->nv_prefill_batched : a->kernels[LZ_K_PREFILL_BATCHED];
    lz_args g = {kernel, 0, CL_SUCCESS};
    LZ_ARG(&g, p->q); LZ_ARG(&g, p->q_pos); LZ_ARG(&g, p->q_indptr); LZ_ARG(&g, p->table_indptr);
    LZ_ARG(&g, table); LZ_ARG(&g, entry_pos); LZ_ARG(&g, kc); LZ_ARG(&g, vc); LZ_ARG(&g, p->out);
    LZ_ARG(&g, a->freq); LZ_ARG(&g, a->slopes); LZ_ARG(&g, style); LZ_ARG(&g, rot);
    LZ_ARG(&g, alibi); LZ_ARG(&g, scale); LZ_ARG(&g, p->n_queries); LZ_ARG(&g, p->n_entries);
    LZ_ARG(&g, p->max_queries); LZ_ARG(&g, nqh); LZ_ARG(&g, nkv); LZ_ARG(&g, nb);
    LZ_ARG(&g, a->err);
    if (!fast) LZ_IO_ARGS(&g, a, p->lse, p->q_dtype, p->out_dtype);
    if (g.err != CL_SUCCESS) return lz_cl_fail(g.err, "lazyattn_prefill_batched: clSetKernelArg");
    size_t global[3] = {global0, (size_t)nkv, (size_t)p->n_seqs};
    size_t local[3] = {local0, 1, 1};
    cl_int err = clEnqueueNDRangeKernel(lz_queue(a->ctx, queue), kernel, 3, NULL, global, local, 0,
                                        NULL, event);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : lz_cl_fail(err, fn);
}

int lazyattn_prefill_batched(lazyattn_attention *a, const lazyattn_pool *pool, int layer,
                             const lazyattn_prefill_batch_args *p, cl_command_queue queue,
                             cl_event *event) {
    int st = lz_prefill_batched_launch(a, pool, layer, p, queue, event);
    return lz_pool_used(pool, st, queue);
}
