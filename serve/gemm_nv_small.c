/* SPDX-License-Identifier: Apache-2.0 */
/* Decode-sized bf16 projections on NVIDIA tensor cores: the host side of
 * serve/gemm_nv_small.cl (see there for the kernel's design). One program
 * per kernel shape (serve_gemm_small_tuning), holding a kernel per n8 token
 * tile count; a small cache of them; the split-K workspace. Decode's fused
 * variants (gemm_bf16.h: x_f32, norm, swiglu) take the same shape built
 * with GS_FUSE 1, on their first call. */
#include "gemm_nv_small.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV
#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#endif

#define GS_NT 8           /* token tiles: rows 1..64 */
#define GS_CLASSES SERVE_GEMM_SMALL_CLASSES
#define GS_PROGRAMS 48    /* cached programs (kernel shapes; test_gemm_small builds 24, and
                           * the fused builds of some) */
#define GS_LOCAL 49152    /* NVIDIA's local memory per work-group */
#define GS_WARPS_PER_CU 16 /* the split rule's target of resident warps */
#define GS_WG_WARPS_PER_CU 12 /* the same for the wgmma modes (xs 2, 3, 4) */
#define GS_WS_WARPS_PER_CU 16 /* xs 5 (no W or X registers: 4 work-groups of 4 warps) */

typedef struct gs_program {
    serve_gemm_small_tuning t; /* splits ignored */
    int fuse;                  /* GS_FUSE */
    cl_program program;
    cl_kernel kernels[GS_NT]; /* gs_gemm_nt1..8 */
    char *log;
} gs_program;

struct serve_gemm_small {
    lazyattn_context *ctx; /* the sm_90a builds (xs 2) */
    cl_context cl;
    cl_device_id dev;
    int cus;
    int major; /* compute capability */
    gs_program programs[GS_PROGRAMS];
    int n_programs;
    serve_gemm_small_tuning tuning[GS_CLASSES][GS_NT];
    int prog_of[GS_CLASSES][GS_NT]; /* index into programs */
    cl_mem ws;          /* f32 split-K sums */
    size_t ws_bytes;
    cl_mem cnt; /* int per row block, zero between calls */
    size_t cnt_n;
};

/* Defaults per class of W and token tiles 1..8, from the H200 sweep
 * (bench/results/issue16/gemm-small/call2-bench.log, PERFLOG). Within a class
 * every row count uses the same K slices, split rule and X path, so each
 * sum has the same order whatever the batch: a token's row of Y is
 * bitwise the same with 1 or 64 rows (greedy decoding does not depend on
 * how requests were batched). That costs the wide class its fastest shape
 * at 33..64 rows (the staged-X 2,8,1,2,1,2,0,1: 51 % of the read ceiling
 * against 46 %). R, WR, WK, U, PIPE, WHINT, SPLITS, XS: */
#define GS_K8U8 {1, 1, 8, 8, 0, 2, 0, 0} /* a row tile per warp, 8 K slices */
#define GS_R2K2 {2, 4, 2, 4, 0, 2, 0, 0} /* two row tiles a warp, 4 x 2 warps */
static const serve_gemm_small_tuning gs_defaults[GS_CLASSES][GS_NT] = {
    {GS_K8U8, GS_K8U8, GS_K8U8, GS_K8U8, GS_K8U8, GS_K8U8, GS_K8U8, GS_K8U8}, /* QKV, O */
    {GS_K8U8, GS_K8U8, GS_K8U8, GS_K8U8, GS_K8U8, GS_K8U8, GS_K8U8, GS_K8U8}, /* down */
    {GS_R2K2, GS_R2K2, GS_R2K2, GS_R2K2, GS_R2K2, GS_R2K2, GS_R2K2, GS_R2K2}, /* gate/up */
};
/* On compute capability 9.x the wide class (gate/up) takes the wgmma mode
 * (xs 3: two warpgroups of 64 W rows, X staged through registers): on the
 * H200 84 / 84 / 82 / 76 % of the read ceiling at 1 / 16 / 32 / 64 rows
 * against the mma.sync shape's 86 / 76 / 78 / 46 % in the same call
 * (bench/results/issue16/gemm-wg/); its rows are bitwise the same for every NT.
 * The long-row class (down) takes the wgmma mode with three warpgroups of
 * 64 rows and 4-block chunks, 1,12,1,4,1,2,0,3: 77 / 74 / 69 / 62 % at 1 /
 * 16 / 32 / 64 rows against mma.sync's 78 / 71 / 59 / 43 % in the same
 * call (bench/results/issue16/final/, PERFLOG). */
#define GS_T_WIDE90 {1, 8, 1, 2, 1, 2, 0, 3}
#define GS_T_LONG90 {1, 12, 1, 4, 1, 2, 0, 3}
static const serve_gemm_small_tuning gs_wide_sm90[GS_NT] = {
    GS_T_WIDE90, GS_T_WIDE90, GS_T_WIDE90, GS_T_WIDE90,
    GS_T_WIDE90, GS_T_WIDE90, GS_T_WIDE90, GS_T_WIDE90};
static const serve_gemm_small_tuning gs_long_sm90[GS_NT] = {
    GS_T_LONG90, GS_T_LONG90, GS_T_LONG90, GS_T_LONG90,
    GS_T_LONG90, GS_T_LONG90, GS_T_LONG90, GS_T_LONG90};

int serve_gemm_small_class(int out, int in) {
    if ((int64_t)out * in < 40 * 1000 * 1000) return 0;
    return in > out ? 1 : 2;
}

static int gs_same(const serve_gemm_small_tuning *a, const serve_gemm_small_tuning *b) {
    return a->r == b->r && a->wr == b->wr && a->wk == b->wk && a->u == b->u &&
           a->pipe == b->pipe && a->whint == b->whint && a->xs == b->xs;
}

/* wgmma modes: X ring slots per K slice (GS_SLOTS of the kernel): xs 2: 3
 * where they fit at 8 token tiles, else 2; xs 3, 4: 2 */
static int gs_slots(const serve_gemm_small_tuning *t) {
    return t->xs == 2 && (size_t)t->wk * 3 * (size_t)t->u * GS_NT * 512 + 16 <= GS_LOCAL ? 3 : 2;
}

/* xs 4 and 5: the register cap (-cl-nv-maxrregcount) under which the
 * work-groups of GS_WG_WARPS_PER_CU warps (xs 5: GS_WS_WARPS_PER_CU; rounded
 * up to whole work-groups) fit in a CU's 65536 registers, so that the split
 * rule's grid is one wave at every token tile count (xs 3 at 8 tiles took
 * 200 registers: 2 work-groups of 4 warps a CU, the down projection's 384
 * in 1.5 waves); 0: no cap */
static int gs_maxreg(const serve_gemm_small_tuning *t) {
    if (t->xs != 4 && t->xs != 5) return 0;
    const int warps = t->wr * t->wk;
    const int target = t->xs == 5 ? GS_WS_WARPS_PER_CU : GS_WG_WARPS_PER_CU;
    const int groups = (target + warps - 1) / warps;
    const int cap = 65536 / (groups * 32 * warps) / 8 * 8; /* allocated in 8s */
    return cap >= 255 ? 0 : cap;
}

/* xs 5: the bytes of one ring slot at 8 token tiles (W of the slice's
 * 64-row sets, X) and the slots a K slice (GS_STG of the kernel) */
static size_t gs_ws_slot(const serve_gemm_small_tuning *t) {
    return (size_t)(t->wr / 4) * (size_t)t->r * (size_t)t->u * 4096 + (size_t)t->u * GS_NT * 512;
}
static int gs_ws_stages(const serve_gemm_small_tuning *t) {
    const size_t n = (GS_LOCAL - 64) / ((size_t)t->wk * gs_ws_slot(t));
    return n > 8 ? 8 : (int)n;
}

static int gs_check_tuning(const serve_gemm_small_tuning *t) {
    if (!t) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "gemm_small tuning: NULL");
    if ((t->r != 1 && t->r != 2 && t->r != 4) || t->wr < 1 || t->wk < 1 || t->wr * t->wk > 32 ||
        t->u < 1 || t->u > 8 || (t->pipe != 0 && t->pipe != 1) || t->whint < 0 ||
        t->whint > 2 || t->splits < 0 || t->splits > 256 || t->xs < 0 || t->xs > 5)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "gemm_small tuning: r %d (1, 2, 4), wr %d, wk %d (wr * wk 1..32), u %d "
                          "(1..8), pipe %d, whint %d (0..2), splits %d (0..256), xs %d (0..5)",
                          t->r, t->wr, t->wk, t->u, t->pipe, t->whint, t->splits, t->xs);
    if (t->xs >= 2 && (t->r > 2 || t->wr % 4))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "gemm_small tuning: xs %d (wgmma) needs r 1 or 2 (64-row sets a "
                          "warpgroup) and wr a multiple of 4 (whole warpgroups), not r %d, wr %d",
                          t->xs, t->r, t->wr);
    /* the slice sums of the largest kernel (8 token tiles) in local memory */
    /* and with xs the staging rings (2 chunks of u blocks per K slice; wgmma:
     * gs_slots chunks of u blocks x 8 NT tokens x 64 bytes) */
    const size_t red =
        t->wk > 1 ? (size_t)(t->wk - 1) * (size_t)t->wr * (size_t)t->r * GS_NT * 4 * 32 * 4 : 16;
    if (t->xs == 5 && gs_ws_stages(t) < 2)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "gemm_small tuning: xs 5: 2 ring slots of %zu B (W and X of a chunk) a "
                          "K slice, %d slices: over %d B of local memory",
                          gs_ws_slot(t), t->wk, GS_LOCAL - 64);
    const size_t ring = t->xs == 5   ? (size_t)t->wk * (size_t)gs_ws_stages(t) * gs_ws_slot(t)
                        : t->xs >= 2 ? (size_t)t->wk * (size_t)gs_slots(t) * (size_t)t->u * GS_NT * 512
                        : t->xs == 1 ? (size_t)t->wk * 2 * (size_t)t->u * GS_NT * 32 * 16
                                     : 16;
    if ((red > ring ? red : ring) + 16 > GS_LOCAL)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "gemm_small tuning: local memory %zu B (slice sums) / %zu B (X rings) "
                          "over %d B",
                          red, ring, GS_LOCAL - 16);
    return LAZYATTN_STATUS_OK;
}

static void gs_program_release(gs_program *p) {
    for (int i = 0; i < GS_NT; i++)
        if (p->kernels[i]) clReleaseKernel(p->kernels[i]);
    if (p->program) clReleaseProgram(p->program);
    free(p->log);
    memset(p, 0, sizeof *p);
}

/* Index of the program for t's kernel shape, built if new. */
static int gs_program_for(serve_gemm_small *g, const serve_gemm_small_tuning *t, int fuse,
                          int *index) {
    for (int i = 0; i < g->n_programs; i++)
        if (gs_same(&g->programs[i].t, t) && g->programs[i].fuse == fuse) {
            *index = i;
            return LAZYATTN_STATUS_OK;
        }
    if (g->n_programs == GS_PROGRAMS)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "gemm_small: more than %d kernel shapes", GS_PROGRAMS);
    if (t->xs >= 2 && g->major != 9)
        return serve_fail(LAZYATTN_STATUS_UNSUPPORTED,
                          "gemm_small: xs %d (wgmma) needs an NVIDIA compute capability 9.x device "
                          "(sm_90a); %s is %d.x",
                          t->xs, lazyattn_context_device_name(g->ctx), g->major);
    char *text = serve_nv_program_text("gemm_nv_small");
    if (!text) return serve_fail(LAZYATTN_STATUS_OPENCL, "gemm_small: kernel source missing (or no memory)");
    gs_program p;
    memset(&p, 0, sizeof p);
    p.t = *t;
    p.fuse = fuse;
    cl_int err;
    const char *verbose = getenv("SERVE_GEMM_SMALL_VERBOSE");
    char opts[256], cap[40] = "";
    if (gs_maxreg(t)) snprintf(cap, sizeof cap, " -cl-nv-maxrregcount=%d", gs_maxreg(t));
    snprintf(opts, sizeof opts,
             "-cl-std=CL1.2 -DGS_R=%d -DGS_WR=%d -DGS_WK=%d -DGS_U=%d -DGS_PIPE=%d -DGS_WHINT=%d "
             "-DGS_XS=%d%s%s%s",
             t->r, t->wr, t->wk, t->u, t->pipe, t->whint, t->xs, fuse ? " -DGS_FUSE=1" : "", cap,
             verbose && *verbose && strcmp(verbose, "0") != 0 ? " -cl-nv-verbose" : "");
    if (t->xs >= 2) { /* wgmma: the sm_90a PTX round trip (as serve/gemm_nv_large.c) */
        int st = lazyattn_context_build_program(g->ctx, text, opts, LAZYATTN_BUILD_SM90A, &p.program);
        free(text);
        if (st) return serve_lz_fail(st, "gemm_small: the wgmma kernels (xs 2..5)");
        err = CL_SUCCESS;
    } else {
        const char *src = text;
        p.program = clCreateProgramWithSource(g->cl, 1, &src, NULL, &err);
        free(text);
        if (err != CL_SUCCESS) return serve_cl_fail(err, "gemm_small: clCreateProgramWithSource");
        err = clBuildProgram(p.program, 1, &g->dev, opts, NULL, NULL);
    }
    size_t n = 0;
    clGetProgramBuildInfo(p.program, g->dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
    p.log = calloc(n + 1, 1);
    if (p.log && n) clGetProgramBuildInfo(p.program, g->dev, CL_PROGRAM_BUILD_LOG, n, p.log, NULL);
    if (err != CL_SUCCESS) {
        int st = serve_fail(LAZYATTN_STATUS_BUILD_FAILED, "gemm_small: build (%s) failed: %.2000s",
                            opts, p.log ? p.log : "");
        gs_program_release(&p);
        return st;
    }
    for (int i = 0; i < GS_NT; i++) {
        char name[32];
        snprintf(name, sizeof name, "gs_gemm_nt%d", i + 1);
        p.kernels[i] = clCreateKernel(p.program, name, &err);
        if (err != CL_SUCCESS) {
            gs_program_release(&p);
            return serve_cl_fail(err, "gemm_small: clCreateKernel");
        }
    }
    g->programs[g->n_programs] = p;
    *index = g->n_programs++;
    return LAZYATTN_STATUS_OK;
}

int serve_gemm_small_create(lazyattn_context *ctx, serve_gemm_small **out) {
    if (!out) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "gemm_small_create: out is NULL");
    *out = NULL;
    if (!ctx) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "gemm_small_create: ctx is NULL");
    if (!lazyattn_context_fast_path(ctx))
        return serve_fail(LAZYATTN_STATUS_UNSUPPORTED,
                          "gemm_small: needs the NVIDIA fast path (compute capability >= 8, "
                          "LAZYATTN_PORTABLE unset); device %s",
                          lazyattn_context_device_name(ctx));
    cl_device_id dev = lazyattn_context_device(ctx);
    cl_uint major = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major, NULL) !=
            CL_SUCCESS ||
        major < 8)
        return serve_fail(LAZYATTN_STATUS_UNSUPPORTED,
                          "gemm_small: device %s is not NVIDIA compute capability >= 8",
                          lazyattn_context_device_name(ctx));
    serve_gemm_small *g = calloc(1, sizeof *g);
    if (!g) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "gemm_small_create");
    g->ctx = ctx;
    g->cl = lazyattn_context_cl_context(ctx);
    g->dev = dev;
    g->major = (int)major;
    clRetainContext(g->cl);
    cl_uint cus = 0;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    g->cus = cus ? (int)cus : 1;
    /* a class whose wgmma build failed takes the mma.sync shapes at every
     * nt after one failed build (a failed build is not cached: each nt
     * would try again, ~1 s of the driver's compile each) */
    int wg_failed[GS_CLASSES] = {0};
    for (int c = 0; c < GS_CLASSES; c++)
        for (int i = 0; i < GS_NT; i++) {
            const int wg90 = c >= 1 && g->major == 9 && !wg_failed[c];
            g->tuning[c][i] = !wg90 ? gs_defaults[c][i] : c == 2 ? gs_wide_sm90[i] : gs_long_sm90[i];
            int st = gs_program_for(g, &g->tuning[c][i], 0, &g->prog_of[c][i]);
            if (st != LAZYATTN_STATUS_OK && wg90) { /* no sm_90a build: the mma.sync shape */
                wg_failed[c] = 1;
                g->tuning[c][i] = gs_defaults[c][i];
                st = gs_program_for(g, &g->tuning[c][i], 0, &g->prog_of[c][i]);
            }
            if (st != LAZYATTN_STATUS_OK) {
                serve_gemm_small_destroy(g);
                return st;
            }
        }
    *out = g;
    return LAZYATTN_STATUS_OK;
}

void serve_gemm_small_destroy(serve_gemm_small *g) {
    if (!g) return;
    for (int i = 0; i < g->n_programs; i++) gs_program_release(&g->programs[i]);
    if (g->ws) clReleaseMemObject(g->ws);
    if (g->cnt) clReleaseMemObject(g->cnt);
    if (g->cl) clReleaseContext(g->cl);
    free(g);
}

int serve_gemm_small_get_tuning(const serve_gemm_small *g, int nt, int cls,
                                serve_gemm_small_tuning *t) {
    if (!g || !t || nt < 1 || nt > GS_NT || cls < 0 || cls >= GS_CLASSES)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "gemm_small_get_tuning: nt %d (1..%d), class %d (0..%d)", nt, GS_NT, cls,
                          GS_CLASSES - 1);
    *t = g->tuning[cls][nt - 1];
    return LAZYATTN_STATUS_OK;
}

int serve_gemm_small_set_tuning(serve_gemm_small *g, int nt, int cls,
                                const serve_gemm_small_tuning *t) {
    if (!g || nt < 0 || nt > GS_NT || cls < -1 || cls >= GS_CLASSES)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "gemm_small_set_tuning: nt %d (0..%d), class %d (-1..%d)", nt, GS_NT, cls,
                          GS_CLASSES - 1);
    int st = gs_check_tuning(t);
    if (st != LAZYATTN_STATUS_OK) return st;
    int index;
    st = gs_program_for(g, t, 0, &index);
    if (st != LAZYATTN_STATUS_OK) return st;
    for (int c = 0; c < GS_CLASSES; c++)
        for (int i = 0; i < GS_NT; i++)
            if ((nt == 0 || i == nt - 1) && (cls < 0 || c == cls))
                g->tuning[c][i] = *t, g->prog_of[c][i] = index;
    return LAZYATTN_STATUS_OK;
}

const char *serve_gemm_small_build_log(const serve_gemm_small *g, int nt, int cls) {
    if (!g || nt < 1 || nt > GS_NT || cls < 0 || cls >= GS_CLASSES) return "";
    const char *log = g->programs[g->prog_of[cls][nt - 1]].log;
    return log ? log : "";
}

/* Row blocks (work-groups along N) of a tuning. */
static int gs_blocks(const serve_gemm_small_tuning *t, int out) {
    const int rows = 16 * t->r * t->wr;
    return (out + rows - 1) / rows;
}

static int gs_splits(const serve_gemm_small *g, const serve_gemm_small_tuning *t, int out, int in) {
    const int nkb = in / 32;
    int most = nkb / (t->wk * t->u); /* every slice >= one step (chunk) */
    if (most < 1) most = 1;
    if (most > 256) most = 256;
    int s = t->splits;
    if (s == 0 && t->xs >= 2) {
        /* wgmma: whole warpgroups of 64..255 registers a work-item, ~3 a CU
         * at R 2: rounded down, so that the grid is one wave */
        const long long warps = (long long)gs_blocks(t, out) * t->wr * t->wk;
        const int per_cu = t->xs == 5 ? GS_WS_WARPS_PER_CU : GS_WG_WARPS_PER_CU;
        s = (int)((long long)g->cus * per_cu / warps);
    } else if (s == 0) {
        const long long warps = (long long)gs_blocks(t, out) * t->wr * t->wk; /* out near INT_MAX */
        s = (int)(((long long)g->cus * GS_WARPS_PER_CU + warps / 2) / warps);
    }
    return s < 1 ? 1 : s > most ? most : s;
}

int serve_gemm_small_splits(const serve_gemm_small *g, int rows, int out, int in) {
    if (!g || rows < 1 || rows > 8 * GS_NT || out < 1 || in < 32) return 0;
    return gs_splits(g, &g->tuning[serve_gemm_small_class(out, in)][(rows + 7) / 8 - 1], out, in);
}

/* Grows a device buffer to at least `bytes` (contents lost). */
static int gs_grow(serve_gemm_small *g, cl_mem *buf, size_t *have, size_t bytes, const char *what) {
    if (*buf && *have >= bytes) return LAZYATTN_STATUS_OK;
    if (*buf) clReleaseMemObject(*buf); /* freed once the commands using it are done */
    *buf = NULL;
    *have = 0;
    cl_int err;
    *buf = clCreateBuffer(g->cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS) return serve_cl_fail(err, what);
    *have = bytes;
    return LAZYATTN_STATUS_OK;
}

int serve_gemm_small_run(serve_gemm_small *g, cl_command_queue q, const serve_gemm_args *a,
                         cl_event *ev) {
    if (!g || !q || !a)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "gemm_small_run: NULL argument");
    int st = serve_gemm_args_check_shape(a, "gemm_small_run");
    if (st) return st;
    const int fuse = a->x_f32 || a->swiglu; /* decode's fused variants (gemm_bf16.h) */
    if (fuse && !a->x_f32)
        return serve_fail(LAZYATTN_STATUS_UNSUPPORTED,
                          "gemm_small_run: swiglu takes f32 X (x_f32 1) here");
    if (a->rows > 8 * GS_NT || a->in % 32 || a->x_off % 8)
        return serve_fail(LAZYATTN_STATUS_UNSUPPORTED,
                          "gemm_small_run: rows %d (1..64), in %d (multiple of 32), x_off %zu "
                          "(multiple of 8)",
                          a->rows, a->in, a->x_off);
    for (int i = 0; i < a->n_outs; i++)
        if (a->outs[i].cols % 16)
            return serve_fail(LAZYATTN_STATUS_UNSUPPORTED,
                              "gemm_small_run: output range %d has %d cols (multiple of 16)", i,
                              a->outs[i].cols);
    /* the workspace and counters are shared by the calls on g: they must run in order */
    cl_command_queue_properties qp = 0;
    cl_int qerr = clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof qp, &qp, NULL);
    if (qerr != CL_SUCCESS) return serve_cl_fail(qerr, "gemm_small_run: the queue");
    if (qp & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "gemm_small_run: needs an in-order queue (its workspace is shared by the calls)");
    const int nt = (a->rows + 7) / 8;
    const int cls = serve_gemm_small_class(a->out, a->in);
    const serve_gemm_small_tuning *t = &g->tuning[cls][nt - 1];
    const int blocks = gs_blocks(t, a->out);
    const int splits = gs_splits(g, t, a->out, a->in);
    int prog = g->prog_of[cls][nt - 1];
    if (fuse) {
        /* X through registers (xs 0, 3: the defaults; 4 spills under its
         * register cap); swiglu: gate and up blocks in pairs */
        if (t->xs != 0 && t->xs != 3)
            return serve_fail(LAZYATTN_STATUS_UNSUPPORTED,
                              "gemm_small_run: the fused variants need xs 0 or 3 (X through "
                              "registers), the shape of %d rows x %d x %d has xs %d",
                              a->rows, a->out, a->in, t->xs);
        if (a->swiglu && (a->out / 2) % (16 * t->r * t->wr))
            return serve_fail(LAZYATTN_STATUS_UNSUPPORTED,
                              "gemm_small_run: swiglu needs out / 2 (%d) a multiple of the "
                              "work-group's %d rows",
                              a->out / 2, 16 * t->r * t->wr);
        st = gs_program_for(g, t, 1, &prog);
        if (st != LAZYATTN_STATUS_OK) return st;
    }
    if (splits > 1 || a->swiglu) { /* swiglu: every work-group's sums go through it */
        st = gs_grow(g, &g->ws, &g->ws_bytes,
                     (size_t)splits * (size_t)a->out * 8 * (size_t)nt * sizeof(float),
                     "gemm_small: workspace");
        if (st != LAZYATTN_STATUS_OK) return st;
    }
    if (!g->cnt || g->cnt_n < (size_t)blocks) {
        size_t n = (size_t)blocks < 4096 ? 4096 : (size_t)blocks;
        st = gs_grow(g, &g->cnt, &g->cnt_n, n * sizeof(cl_int), "gemm_small: counters");
        if (st != LAZYATTN_STATUS_OK) return st;
        g->cnt_n = n;
        const cl_int zero = 0;
        cl_int err = clEnqueueFillBuffer(q, g->cnt, &zero, sizeof zero, 0, n * sizeof zero, 0,
                                         NULL, NULL);
        if (err != CL_SUCCESS) { /* counters not zeroed: never used, made again next call */
            clReleaseMemObject(g->cnt);
            g->cnt = NULL, g->cnt_n = 0;
            return serve_cl_fail(err, "gemm_small: zero the counters");
        }
    }
    cl_mem ws = g->ws ? g->ws : g->cnt; /* unread when splits == 1 */
    cl_kernel k = g->programs[prog].kernels[nt - 1];
    cl_mem y[3];
    cl_ulong off[3];
    cl_int ld[3], start[3] = {0, 0, 0};
    for (int i = 0, c = 0; i < 3; i++) {
        const serve_gemm_out *o = &a->outs[i < a->n_outs ? i : 0];
        y[i] = o->buf, off[i] = o->off, ld[i] = o->ld;
        start[i] = i < a->n_outs ? c : a->out; /* unused ranges start past out */
        if (i < a->n_outs) c += o->cols;
    }
    const cl_ulong x_off = a->x_off;
    const cl_int K = a->in, N = a->out, M = a->rows, acc = a->accumulate, S = splits;
    cl_int err = CL_SUCCESS;
    cl_uint i = 0;
#define GS_ARG(v) err |= clSetKernelArg(k, i++, sizeof(v), &(v))
    GS_ARG(a->x);
    GS_ARG(x_off);
    GS_ARG(a->w);
    GS_ARG(K);
    GS_ARG(N);
    GS_ARG(M);
    GS_ARG(y[0]);
    GS_ARG(y[1]);
    GS_ARG(y[2]);
    GS_ARG(off[0]);
    GS_ARG(off[1]);
    GS_ARG(off[2]);
    GS_ARG(ld[0]);
    GS_ARG(ld[1]);
    GS_ARG(ld[2]);
    GS_ARG(start[1]);
    GS_ARG(start[2]);
    GS_ARG(acc);
    GS_ARG(S);
    GS_ARG(ws);
    GS_ARG(g->cnt);
    const cl_float eps = a->norm_eps;
    const cl_int swiglu = a->swiglu;
    if (fuse) {
        GS_ARG(a->norm); /* NULL: no RMSNorm */
        GS_ARG(eps);
        GS_ARG(swiglu);
    }
#undef GS_ARG
    if (err != CL_SUCCESS) return serve_cl_fail(CL_INVALID_KERNEL_ARGS, "gemm_small: kernel args");
    const size_t local[2] = {(size_t)32 * (size_t)t->wr * (size_t)t->wk, 1};
    const size_t global[2] = {local[0] * (size_t)blocks, (size_t)splits};
    err = clEnqueueNDRangeKernel(q, k, 2, NULL, global, local, 0, NULL, ev);
    if (err != CL_SUCCESS) return serve_cl_fail(err, "gemm_small: enqueue");
    return LAZYATTN_STATUS_OK;
}
