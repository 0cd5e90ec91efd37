/* SPDX-License-Identifier: Apache-2.0 */
/* Launch geometry of the portable kernels (tuning.c) and of the NVIDIA
 * tensor-core path (attn/nv_tuning.c), and LAZYATTN_TUNE, the one override
 * of both (attn/tune_override.c). Not installed. */
#ifndef LAZYATTN_TUNING_H
#define LAZYATTN_TUNING_H

#include "internal.h"

/* Resolves every field of the geometry: user (may be NULL) first, then the
 * database row of the device, then defaults; UNSUPPORTED (naming the local
 * memory or work-group limit) when the tiles cannot fit the device. */
int lz_tuning_choose(const lazyattn_context *ctx, const lazyattn_attention_config *config,
                     const lazyattn_kernel_tuning *user, lazyattn_kernel_tuning *out);

/* What the choice depends on: the device's name (the database key; NULL:
 * no row) and limits. lz_tuning_choose takes them from the context;
 * tools/spirv_programs.c from a device profile, to form at build time the
 * programs such a device will ask for. */
typedef struct lz_device_limits {
    const char *device_name;
    cl_ulong local_mem_size;
    size_t max_work_group_size;
} lz_device_limits;
int lz_tuning_choose_for(const lz_device_limits *device, const lazyattn_attention_config *config,
                         const lazyattn_kernel_tuning *user, lazyattn_kernel_tuning *out);
/* Local memory the prefill's tiles of t need, in bytes. */
size_t lz_tile_local_bytes(const lazyattn_tile_params *t, int head_dim);
/* Local memory of the decode kernel (cl/decode.cl) with t, in bytes. */
size_t lz_decode_local_bytes(const lazyattn_tile_params *t, int head_dim, int block);
/* Local memory of the small-work-group decode (cl/decode_warp.cl, kv_together 3). */
size_t lz_decode_warp_local_bytes(const lazyattn_tile_params *t, int head_dim, int block);
/* Appends the -D options of t to buf; -1 if they do not fit. */
int lz_tile_options(const lazyattn_tile_params *t, int group, char *buf, size_t size);

/* ---- NVIDIA tensor-core path (cl/nv/, attn/nv_build.c) ---- */

/* The dispatch order of the prefill's work-groups: an lz_order_policy
 * (prefill_order.h), or none (the kernel's own order; not -1, which is
 * LAZYATTN_TUNE's "unset"). */
enum { LZ_NV_ORDER_NONE = 100 };

/* The geometry of the NVIDIA kernels: one row of the tuning database per
 * device class and prefill kernel, then the override, then what the
 * kernels and 48 KB of local memory allow (lz_nv_geometry_choose). */
typedef struct lz_nv_geometry {
    int wgmma;    /* prefill: 1 wgmma (compute capability 9.x), 0 mma.sync */
    int kt;       /* prefill keys per staged tile (a multiple of the block size and of 16) */
    int warps;    /* prefill consumer warps a work-group (G heads x 16-token rows) */
    int maxreg;   /* -cl-nv-maxrregcount, 0 = the compiler's choice */
    int producer; /* wgmma: a producer warpgroup copies K / V through mbarrier rings */
    int persist;  /* producer: the prefill persistent, a work-group a SM running task lists */
    int order;    /* the prefill's dispatch order (lz_order_policy or LZ_NV_ORDER_NONE) */
    int dstages;  /* decode ring depth (blocks in flight + 1) */
    int waves;    /* decode warps aimed at per compute unit */
    int dsplit;   /* decode entries a split at least (fewer splits on short sequences) */
} lz_nv_geometry;

/* LAZYATTN_TUNE's settings, each -1 where not set (a path: NULL). */
typedef struct lz_tune_override {
    lz_nv_geometry nv;   /* nv.wgmma, nv.kt, nv.warps, nv.maxreg, nv.producer, nv.persist,
                          * nv.order, nv.dstages, nv.waves, nv.dsplit */
    int nv_verbose;      /* nv.verbose=1: -cl-nv-verbose (registers, spills in the build log) */
    int nv_decode_times; /* nv.decode_times=1: each decode launch's kernel times in the log */
    int exact_exp;       /* portable.exact_exp=1: the portable prefill keeps exp() on a GPU */
    int prefill_maxreg;  /* portable.prefill_maxreg=N: -cl-nv-maxrregcount of the portable prefill */
    int decode_maxreg;   /* portable.decode_maxreg=N: ... of the portable decode (else derived) */
    int serve_fused_decode; /* serve.fused_decode=1: serve/'s NVIDIA decode projections take
                             * the fused variants (read by serve/gemm_bf16.c; kept here so
                             * that the key is known) */
    int serve_gemv_q8;   /* serve.gemv_q8=0|1: serve/'s one-row GEMV over K-quant weights
                          * multiplies int8-quantized activations (serve/gemv_quant.c;
                          * default: on NVIDIA's fast path) */
    int tier_pin_loads;  /* tier.pin_loads=0|1: a background tier load copies a built-in
                          * store's value into a pinned slot before its upload (default:
                          * on a device without CL_DEVICE_HOST_UNIFIED_MEMORY) */
    int tier_pin_writes; /* tier.pin_writes=0|1: the tier's writer reads back only into
                          * pinned staging, dropping a write (counted) when no slot is
                          * free, instead of reading into pageable memory (default: on a
                          * device without CL_DEVICE_HOST_UNIFIED_MEMORY) */
    int tier_load_threads; /* tier.load_threads=N (1-16): threads copying a background
                            * load's value into its pinned slot (default 4 on a device
                            * without CL_DEVICE_HOST_UNIFIED_MEMORY, else 1) */
    int tier_pin_store;  /* tier.pin_store=0|1: a host store attached as a tier keeps its
                          * values in pinned memory of its budget, made at the attach
                          * (pinned_arena.h; default: on a device without
                          * CL_DEVICE_HOST_UNIFIED_MEMORY) */
    char dump_ptx[256];  /* nv.dump_ptx=PATH: where lz_ptx_sm90a writes the patched PTX ("" none) */
} lz_tune_override;

/* Parses text ("key=value,key=value", NULL or "" for none) into *out
 * (every field unset first). Keys and values are strict: an unknown key, a
 * malformed or out-of-range value leaves that setting unset and calls
 * warn(user, message naming it) if warn is not NULL; the others apply.
 * Returns the number of settings ignored. */
int lz_tune_parse(const char *text, lz_tune_override *out, void (*warn)(void *user, const char *message),
                  void *user);
/* lz_tune_parse of the environment's LAZYATTN_TUNE, each ignored setting a
 * WARN in ctx's log (ctx NULL: not logged). */
void lz_tune_from_env(const lazyattn_context *ctx, lz_tune_override *out);

/* The NVIDIA geometry for a device of compute capability cc_major and one
 * configuration (group = query heads per KV head): the database row of the
 * device class (wgmma where the class has a wgmma row, the device runs it
 * and its warps hold whole groups, else mma.sync), each field of ov that
 * is set (ov may be NULL) over it, then clamped to what the kernels build
 * (tiles under 48 KB of local memory, warps a multiple of the group, the
 * producer on 4, 8 or 12 consumer warps, persistence with 8 or 12). */
void lz_nv_geometry_choose(int cc_major, int group, int block, int head_dim, const lz_tune_override *ov,
                           lz_nv_geometry *out);

#endif
