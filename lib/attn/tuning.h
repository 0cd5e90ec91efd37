/* SPDX-License-Identifier: Apache-2.0 */
/* Launch geometry of the portable kernels (tuning.c). Not installed. */
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

#endif
