/* SPDX-License-Identifier: Apache-2.0 */
/* Decode-sized bf16 projections on NVIDIA tensor cores (issue 16): rows
 * 1..64 of Y = X . W^T (serve/gemm_bf16.h's arguments) at the bandwidth of
 * reading W once. Kernels: serve/gemm_nv_small.cl. */
#ifndef SERVE_GEMM_NV_SMALL_H
#define SERVE_GEMM_NV_SMALL_H

#include "gemm_bf16.h"

typedef struct serve_gemm_small serve_gemm_small;

/* UNSUPPORTED (with a message) unless ctx's device is NVIDIA compute
 * capability >= 8 and lazyattn_context_fast_path(ctx) != 0. Builds the
 * default kernels (the NVIDIA driver's compile, ~1 s). g keeps ctx for
 * later builds (set_tuning's wgmma mode): ctx must outlive g. */
int serve_gemm_small_create(lazyattn_context *ctx, serve_gemm_small **out);
void serve_gemm_small_destroy(serve_gemm_small *g); /* NULL: no-op */

/* Y = X . W^T (serve/gemm_bf16.h's arguments):
 *   x: bf16 [8 * ceil(rows / 8) rows (pad to SERVE_GEMM_ROW_PAD), in] from x_off,
 *   w: bf16 [out, in], outs: f32 [rows, cols] with row stride ld from off.
 * rows 1..64; in % 32 == 0, x_off % 8 == 0 (16-byte loads), each range's
 * cols % 16 == 0 (UNSUPPORTED otherwise); up to 3 output column ranges;
 * accumulate = 1 adds into Y. Deterministic: every sum has a fixed order,
 * and with the default tunings the same order for every `rows`, so a row
 * of Y does not depend on the other rows of the batch (bitwise).
 * The workspace (split-K partial sums, counters) is owned by g and grown on
 * demand, so calls on one g must be ordered: q must be in-order
 * (INVALID_ARGUMENT for an out-of-order queue) and the same for every call
 * on g. Not thread-safe: one host thread at a time per g (run and
 * set_tuning change g).
 * The buffers' sizes are not checked here (host queries on every decode
 * step): serve_gemm_args_check (serve.h) checks them, and
 * serve_gemm_bf16_run calls it first; a direct caller calls it once per
 * set of buffers. */
int serve_gemm_small_run(serve_gemm_small *g, cl_command_queue q, const serve_gemm_args *a,
                         cl_event *ev);

/* ---- tuning (benchmarks) ------------------------------------------------ */

/* The kernel's shape for one class of rows (n8 token tiles nt = ceil(rows / 8)).
 * The order of a sum depends on wk, the resolved split count and xs (and u
 * with xs): tunings of one class that differ there break the batch
 * independence above. The wgmma modes (xs 2..4 alike: the same wgmma
 * on the same values; xs 5 in its own k order) depend on wk, u and the
 * split count only: wgmma m64nNk16 gives a column the same bits for every
 * N (measured on the H200 with A from registers; xs 5 in the same test,
 * tests/test_gemm_small.c test_rows_independent_wgmma), so one wgmma shape
 * for every nt of a class keeps the rows independent of the batch; mixing
 * it with mma.sync shapes in one class does not. */
typedef struct serve_gemm_small_tuning {
    int r;      /* 16-row W tiles per warp: 1, 2, 4 */
    int wr;     /* warps over rows per work-group */
    int wk;     /* warps over K per work-group (summed through local memory) */
    int u;      /* 32-k blocks per step: 1..8 */
    int pipe;   /* 1: the next step's W loads issued before this step's mma */
    int whint;  /* W loads: 0 ld.global.nc, 1 + L1::no_allocate, 2 + L2::256B */
    int splits; /* work-groups over K (split-K); 0: chosen from the shape */
    int xs;     /* 1: X staged in local memory per chunk of u blocks (cp.async);
                 * 2: wgmma (Hopper, compute capability 9.x only; UNSUPPORTED
                 * elsewhere): a warpgroup multiplies r sets of 64 W rows (r 1
                 * or 2, A from registers) by all 8 nt tokens (X staged per
                 * chunk of u blocks in a 2- or 3-slot ring, B by descriptor);
                 * wr warps over rows (a multiple of 4: wr / 4 warpgroups), wk
                 * warpgroup rows over K; any in % 32 == 0; 3: the same with
                 * X through registers (16-byte loads, 4-byte local stores)
                 * instead of 4-byte cp.async, 2 slots; 4: 3 with chunk c + 1's
                 * X loaded after chunk c's wgmma instead of during it (not
                 * live next to the A registers and W's prefetch) and a
                 * register cap (-cl-nv-maxrregcount) that fits 12 warps a CU
                 * (168 for 4 warps a work-group, 128 for 8), the split rule's
                 * one wave at every nt; the split-K sums in fewer round trips;
                 * 5: W through local memory too (16-byte cp.async of W and X
                 * in natural k order into a ring of as many chunks as fit in
                 * 48 KB, both wgmma operands by descriptor, no W or X
                 * registers; cap 128: 4 work-groups of 4 warps a CU, the
                 * split rule's target 16 warps a CU; pipe has no effect);
                 * best with u 1 (5 slots at r 1, wr 4) */
} serve_gemm_small_tuning;

/* Tunings are kept per n8 token tiles nt = 1..8 and per class of W:
 * 0 small (out * in < 40 M weights: the 8B's QKV and O), 1 long rows (in >
 * out: the down projection), 2 wide (the gate/up). Defaults: mma.sync
 * shapes, except on compute capability 9.x the wide class, which takes the
 * wgmma mode 1,8,1,2,1,2,0,3, and the long-row class, 1,12,1,4,1,2,0,3
 * (serve/gemm_nv_small.c says why). */
#define SERVE_GEMM_SMALL_CLASSES 3
int serve_gemm_small_class(int out, int in);
/* The tuning used for nt (1..8) and cls (0..2). */
int serve_gemm_small_get_tuning(const serve_gemm_small *g, int nt, int cls,
                                serve_gemm_small_tuning *t);
/* Sets it (nt 0: every nt; cls -1: every class); builds the program if
 * new. INVALID_ARGUMENT for values out of range, e.g. over 48 KB of local
 * memory; UNSUPPORTED for xs 2..5 on a device that is not compute capability
 * 9.x (the tuning is then unchanged). */
int serve_gemm_small_set_tuning(serve_gemm_small *g, int nt, int cls,
                                const serve_gemm_small_tuning *t);
/* The split count a run of this shape would use (after the tuning's rule);
 * 0 for a NULL g or a shape outside rows 1..64, out >= 1, in >= 32. */
int serve_gemm_small_splits(const serve_gemm_small *g, int rows, int out, int in);
/* The NVIDIA build log of the program of (nt, cls)'s tuning ("" if none;
 * with SERVE_GEMM_SMALL_VERBOSE=1 in the environment it has ptxas's
 * register report). Owned by g. */
const char *serve_gemm_small_build_log(const serve_gemm_small *g, int nt, int cls);

#endif
