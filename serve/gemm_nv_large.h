/* SPDX-License-Identifier: Apache-2.0 */
/* The large-M bf16 projection on Hopper tensor cores (serve/gemm_nv_large.c,
 * kernel serve/gemm_nv_large.cl): wgmma through the sm_90a PTX round trip,
 * for rows > 64 (the small-M kernel is serve/gemm_nv_small.c). Arguments and
 * layouts: serve/gemm_bf16.h. */
#ifndef SERVE_GEMM_NV_LARGE_H
#define SERVE_GEMM_NV_LARGE_H

#include "gemm_bf16.h"

typedef struct serve_gemm_large serve_gemm_large;

/* Builds the kernel for ctx's device with the default tile, or the one in
 * the environment variable SERVE_GEMM_LARGE_TILE (format of
 * serve_gemm_large_create_tile; unset or empty: the default; a malformed
 * value is refused with INVALID_ARGUMENT, never ignored).
 * LAZYATTN_STATUS_UNSUPPORTED (with a message) when the device is not
 * NVIDIA compute capability 9.x or ctx runs the portable path
 * (lazyattn_context_fast_path(ctx) == 0). SERVE_NV_VERBOSE (not "0") prints
 * ptxas's register report on stderr. */
int serve_gemm_large_create(lazyattn_context *ctx, serve_gemm_large **out);

/* The same with an explicit tile, "WG,MW,BN,BK,STAGES,LAG,GROUP[,MAXREG]" (NULL: the
 * default): WG consumer warpgroups of MW wgmma m64 row blocks each (a tile of
 * 64 WG MW rows), BN columns (64, 128, 256), K steps of BK (16, 32, 64)
 * through STAGES local-memory stages (all within 48 KB), LAG 0 or 1 wgmma
 * groups in flight across a step's barrier, GROUP row tiles walking the
 * column tiles together, MAXREG a register cap (-cl-nv-maxrregcount; 0 or
 * absent: none). INVALID_ARGUMENT for a malformed or unfit tile. */
int serve_gemm_large_create_tile(lazyattn_context *ctx, const char *tile, serve_gemm_large **out);

void serve_gemm_large_destroy(serve_gemm_large *g); /* NULL: no-op */

/* The tile it was built with, in serve_gemm_large_create_tile's format. */
const char *serve_gemm_large_tile(const serve_gemm_large *g);

/* One launch: Y = X . W^T (or Y += with accumulate) on queue q (ctx's
 * device); shapes and layouts of serve_gemm_args (serve/gemm_bf16.h):
 *   x: bf16 [rows, in] from x_off (this kernel reads no row past rows),
 *   w: bf16 [out, in], outs: f32 [rows, cols] with row stride ld from off.
 * Checks the arguments: INVALID_ARGUMENT for bad ones, UNSUPPORTED for
 * shapes the kernel does not cover (in not a multiple of BK, x_off not a
 * multiple of 8, an output range's cols not a multiple of BN, odd ld or
 * offset, too many tiles for one launch) so the caller can fall back.
 * ev: optional event of the launch. Not thread-safe: the kernel's arguments
 * are set at each launch, so one host thread at a time per g.
 * The buffers' sizes are not checked here (host queries on every call):
 * serve_gemm_args_check (serve.h) checks them, and
 * serve_gemm_bf16_run calls it first; a direct caller calls it once per
 * set of buffers. */
int serve_gemm_large_run(serve_gemm_large *g, cl_command_queue q, const serve_gemm_args *a,
                         cl_event *ev);

#endif
