/* SPDX-License-Identifier: Apache-2.0 */
/* The geometry of the NVIDIA tensor-core kernels (cl/nv/): the tuning
 * database's rows by device class (compute capability) and prefill kernel,
 * LAZYATTN_TUNE over them, clamped to what the kernels build. Why each
 * default: docs/PERFLOG.md (issue 11). */
#include "internal.h"
#include "prefill_order.h"
#include "tuning.h"

/* One row: the geometry of a prefill kernel (wgmma or mma.sync) on the
 * devices of compute capability major cc (0: any). */
typedef struct lz_nv_tuning_row {
    int cc;
    lz_nv_geometry g;
} lz_nv_tuning_row;

/* {cc, {wgmma, kt, warps, maxreg, producer, persist, order, dstages, waves, dsplit}} */
static const lz_nv_tuning_row lz_nv_tuning_db[] = {
    /* Hopper: S and P V on wgmma, three consumer warpgroups fed by a producer
     * warpgroup, a work-group a tile (persistent measured slower); decode
     * splits down to 2 entries (one sequence over 2048 keys: 43 splits, not
     * 16; docs/PERFLOG.md "The decode's splits on short sequences") */
    {9, {1, 32, 12, 0, 1, 0, LZ_ORDER_AUTO, 3, 4, 2}},
    /* every compute capability >= 8: mma.sync with 8 warps */
    {0, {0, 32, 8, 0, 0, 0, LZ_ORDER_AUTO, 3, 4, 8}},
};

/* The row of kernel wgmma for cc; NULL: none. */
static const lz_nv_geometry *lz_nv_row(int cc_major, int wgmma) {
    for (size_t i = 0; i < sizeof lz_nv_tuning_db / sizeof *lz_nv_tuning_db; i++) {
        const lz_nv_tuning_row *r = &lz_nv_tuning_db[i];
        if (r->g.wgmma == wgmma && (r->cc == cc_major || r->cc == 0)) return &r->g;
    }
    return NULL;
}

/* The row's geometry with the override's fields over it, clamped. */
static void lz_nv_fill(const lz_nv_geometry *row, int block, int head_dim, int group, const lz_tune_override *ov,
                       lz_nv_geometry *g) {
    const size_t B = (size_t)block, D = (size_t)head_dim;
    const int kt0 = row->kt > block ? row->kt : block;
    *g = *row;
    if (ov) {
        const int *set = (const int *)&ov->nv;
        int *to = (int *)g;
        for (size_t i = 0; i < sizeof *g / sizeof(int); i++)
            if (set[i] != -1 && i != offsetof(lz_nv_geometry, wgmma) / sizeof(int)) to[i] = set[i];
    }
    /* the kernels' tiles: whole blocks of 16-key steps; two K and two V
     * tiles and the entry slots under 48 KB of local memory */
    if (g->kt < block || g->kt % block || g->kt % 16) g->kt = kt0;
    if (8 * (size_t)g->kt * D > 48640) g->kt = block;
    if (g->warps < group || g->warps > 32) g->warps = group; /* at most 1024 threads */
    g->warps = g->warps / group * group;
    if (g->dstages < 2 || g->dstages > 6) g->dstages = row->dstages;
    while (g->dstages > 2 && (size_t)g->dstages * 4 * B * D > 48640) g->dstages--;
    if (g->waves < 1) g->waves = row->waves;
    if (g->dsplit < 1) g->dsplit = row->dsplit;
    if (g->maxreg < 0) g->maxreg = 0;
    /* the producer: rings of 5 slots of kt keys under 48 KB, its registers
     * going to 4, 8 or 12 consumer warps; persistence with its ping-pong (8
     * or 12 consumer warps) */
    g->producer = g->wgmma && g->producer == 1 && 10 * (size_t)g->kt * D <= 48640 && g->warps % 4 == 0 &&
                  g->warps <= 12;
    g->persist = g->producer && (g->warps == 8 || g->warps == 12) && g->persist == 1;
    if (!g->producer) g->order = LZ_NV_ORDER_NONE; /* the order is the producer's prefill's */
}

void lz_nv_geometry_choose(int cc_major, int group, int block, int head_dim, const lz_tune_override *ov,
                           lz_nv_geometry *out) {
    const lz_nv_geometry *wg = lz_nv_row(cc_major, 1), *mma = lz_nv_row(cc_major, 0);
    const int asked = ov ? ov->nv.wgmma : -1;
    const int want = asked != -1 ? asked : wg != NULL && wg->warps % group == 0;
    if (want && wg) {
        lz_nv_fill(wg, block, head_dim, group, ov, out);
        /* wgmma needs whole warpgroups; else mma.sync in its own geometry
         * (e.g. 12 warps rounded to 10 for groups of 5) */
        if (out->warps % 4 == 0) return;
    }
    lz_nv_fill(mma, block, head_dim, group, ov, out);
}
