/* SPDX-License-Identifier: Apache-2.0 */
/*
 * LAZYATTN_TUNE (lib/attn/tune_override.c) and the NVIDIA geometry it
 * overrides (lib/attn/nv_tuning.c): good settings are applied, each bad one
 * (unknown key, malformed or out-of-range value, empty) is ignored with one
 * warning that names it while the others still apply; the geometry of each
 * device class and configuration is the one spelled out here (the kernels'
 * defaults), and overrides go through the kernels' limits. No device needed.
 */
#include "test_common.h"

#include "attn/prefill_order.h"
#include "attn/tuning.h"

#include <string.h>

typedef struct warnings {
    int n;
    char last[256];
} warnings;

static void collect(void *user, const char *message) {
    warnings *w = user;
    w->n++;
    snprintf(w->last, sizeof w->last, "%s", message);
}

static void test_unset(void **state) {
    (void)state;
    lz_tune_override ov;
    warnings w = {0, ""};
    assert_int_equal(lz_tune_parse(NULL, &ov, collect, &w), 0);
    assert_int_equal(lz_tune_parse("", &ov, collect, &w), 0);
    assert_int_equal(w.n, 0);
    const int *f = (const int *)&ov.nv;
    for (size_t i = 0; i < sizeof ov.nv / sizeof(int); i++) assert_int_equal(f[i], -1);
    assert_int_equal(ov.nv_verbose, -1);
    assert_int_equal(ov.nv_decode_times, -1);
    assert_int_equal(ov.exact_exp, -1);
    assert_int_equal(ov.prefill_maxreg, -1);
    assert_int_equal(ov.decode_maxreg, -1);
    assert_int_equal(ov.serve_fused_decode, -1);
    assert_int_equal(ov.serve_gemv_q8, -1);
    assert_int_equal(ov.tier_pin_loads, -1);
    assert_int_equal(ov.tier_pin_writes, -1);
    assert_int_equal(ov.tier_load_threads, -1);
    assert_string_equal(ov.dump_ptx, "");
}

static void test_good_keys(void **state) {
    (void)state;
    lz_tune_override ov;
    warnings w = {0, ""};
    assert_int_equal(lz_tune_parse("nv.kt=64,nv.warps=8,nv.wgmma=0,nv.persist=1,nv.producer=0,nv.maxreg=168,"
                                   "nv.order=lpt,nv.dstages=4,nv.waves=6,nv.dsplit=2,nv.verbose=1,nv.decode_times=1,"
                                   "nv.dump_ptx=/tmp/x.ptx,portable.exact_exp=1,portable.prefill_maxreg=96,"
                                   "portable.decode_maxreg=0,serve.fused_decode=1,serve.gemv_q8=0,tier.pin_loads=0,"
                                   "tier.pin_writes=1,tier.load_threads=4",
                                   &ov, collect, &w),
                     0);
    assert_int_equal(w.n, 0);
    assert_int_equal(ov.nv.kt, 64);
    assert_int_equal(ov.nv.warps, 8);
    assert_int_equal(ov.nv.wgmma, 0);
    assert_int_equal(ov.nv.persist, 1);
    assert_int_equal(ov.nv.producer, 0);
    assert_int_equal(ov.nv.maxreg, 168);
    assert_int_equal(ov.nv.order, LZ_ORDER_LPT);
    assert_int_equal(ov.nv.dstages, 4);
    assert_int_equal(ov.nv.waves, 6);
    assert_int_equal(ov.nv.dsplit, 2);
    assert_int_equal(ov.nv_verbose, 1);
    assert_int_equal(ov.nv_decode_times, 1);
    assert_string_equal(ov.dump_ptx, "/tmp/x.ptx");
    assert_int_equal(ov.exact_exp, 1);
    assert_int_equal(ov.prefill_maxreg, 96);
    assert_int_equal(ov.decode_maxreg, 0);
    assert_int_equal(ov.serve_fused_decode, 1);
    assert_int_equal(ov.serve_gemv_q8, 0);
    assert_int_equal(ov.tier_pin_loads, 0);
    assert_int_equal(ov.tier_pin_writes, 1);
    assert_int_equal(ov.tier_load_threads, 4);
    const char *orders[] = {"none", "auto", "heads", "lpt", "balanced"};
    const int codes[] = {LZ_NV_ORDER_NONE, LZ_ORDER_AUTO, LZ_ORDER_HEADS, LZ_ORDER_LPT, LZ_ORDER_BALANCED};
    for (int i = 0; i < 5; i++) {
        char text[32];
        snprintf(text, sizeof text, "nv.order=%s", orders[i]);
        assert_int_equal(lz_tune_parse(text, &ov, collect, &w), 0);
        assert_int_equal(ov.nv.order, codes[i]);
    }
    /* a trailing comma ends the list; the last of a repeated key wins */
    assert_int_equal(lz_tune_parse("nv.kt=32,nv.kt=48,", &ov, collect, &w), 0);
    assert_int_equal(ov.nv.kt, 48);
    assert_int_equal(w.n, 0);
}

/* Each bad setting: ignored, one warning naming it, the good neighbours applied. */
static void test_bad_settings(void **state) {
    (void)state;
    const char *bad[] = {"nv.kt=abc", "nv.kt=", "nv.kt=32x", "nv.kt= 32", "nv.kt=+32", "nv.kt=8", "nv.kt=100000000000",
                         "nv.warps=0", "nv.warps=33", "nv.wgmma=2", "nv.wgmma=-1", "nv.order=fastest",
                         "nv.Kt=32", "nv.kt", "=1", "nv.unknown=1", "portable.prefill=x", "LAZYATTN_NV_WGMMA=0",
                         "nv.dstages=7", "nv.dump_ptx=", "portable.decode_maxreg=256", " nv.kt=32",
                         "tier.pin_loads=2", "tier.pin_writes=-1",
                         "tier.load_threads=0", "tier.load_threads=17"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[128];
        snprintf(text, sizeof text, "nv.warps=4,%s,nv.maxreg=200", bad[i]);
        lz_tune_override ov;
        warnings w = {0, ""};
        assert_int_equal(lz_tune_parse(text, &ov, collect, &w), 1);
        assert_int_equal(w.n, 1);
        assert_non_null(strstr(w.last, "LAZYATTN_TUNE"));
        char quoted[64];
        snprintf(quoted, sizeof quoted, "\"%s\"", bad[i]);
        if (!strstr(w.last, quoted)) fail_msg("warning \"%s\" does not name %s", w.last, quoted);
        assert_int_equal(ov.nv.warps, 4);
        assert_int_equal(ov.nv.maxreg, 200);
        assert_int_equal(ov.nv.kt, -1);
        assert_int_equal(ov.nv.wgmma, -1);
        assert_int_equal(ov.nv.order, -1);
        assert_int_equal(ov.nv.dstages, -1);
        assert_int_equal(ov.decode_maxreg, -1);
        assert_string_equal(ov.dump_ptx, "");
    }
    /* an empty setting between commas, and no warning callback at all */
    lz_tune_override ov;
    warnings w = {0, ""};
    assert_int_equal(lz_tune_parse("nv.kt=32,,nv.warps=8", &ov, collect, &w), 1);
    assert_int_equal(w.n, 1);
    assert_int_equal(ov.nv.kt, 32);
    assert_int_equal(ov.nv.warps, 8);
    assert_int_equal(lz_tune_parse("x=1,y=2,nv.kt=16", &ov, NULL, NULL), 2);
    assert_int_equal(ov.nv.kt, 16);
}

static lz_nv_geometry choose(int cc, int group, int block, int head_dim, const char *tune) {
    lz_tune_override ov;
    warnings w = {0, ""};
    assert_int_equal(lz_tune_parse(tune, &ov, collect, &w), 0);
    lz_nv_geometry g;
    lz_nv_geometry_choose(cc, group, block, head_dim, &ov, &g);
    return g;
}

static void expect(lz_nv_geometry g, int wgmma, int kt, int warps, int maxreg, int producer, int persist, int order,
                   int dstages, int waves) {
    assert_int_equal(g.wgmma, wgmma);
    assert_int_equal(g.kt, kt);
    assert_int_equal(g.warps, warps);
    assert_int_equal(g.maxreg, maxreg);
    assert_int_equal(g.producer, producer);
    assert_int_equal(g.persist, persist);
    assert_int_equal(g.order, order);
    assert_int_equal(g.dstages, dstages);
    assert_int_equal(g.waves, waves);
}

/* The defaults by device class: Hopper the wgmma prefill with 12 consumer
 * warps and the producer where 12 warps hold whole groups, mma.sync with 8
 * elsewhere; the decode ring of 3 (2 where 3 exceed 48 KB: d 128, block 32). */
static void test_defaults(void **state) {
    (void)state;
    const int none = LZ_NV_ORDER_NONE, aut = LZ_ORDER_AUTO;
    for (int group = 1; group <= 8; group++) {
        const int wg = 12 % group == 0;
        expect(choose(9, group, 16, 128, ""), wg, 32, wg ? 12 : 8 / group * group, 0, wg, 0, wg ? aut : none, 3, 4);
        expect(choose(8, group, 16, 128, ""), 0, 32, 8 / group * group, 0, 0, 0, none, 3, 4);
    }
    expect(choose(9, 4, 32, 128, ""), 1, 32, 12, 0, 1, 0, aut, 2, 4);
    expect(choose(9, 4, 32, 64, ""), 1, 32, 12, 0, 1, 0, aut, 3, 4);
    expect(choose(10, 4, 16, 128, ""), 0, 32, 8, 0, 0, 0, none, 3, 4);
    lz_nv_geometry g;
    lz_nv_geometry_choose(9, 4, 16, 64, NULL, &g);
    expect(g, 1, 32, 12, 0, 1, 0, aut, 3, 4);
}

/* Overrides, through the kernels' limits. */
static void test_overrides(void **state) {
    (void)state;
    const int none = LZ_NV_ORDER_NONE, aut = LZ_ORDER_AUTO;
    expect(choose(9, 4, 16, 128, "nv.wgmma=0"), 0, 32, 8, 0, 0, 0, none, 3, 4);
    expect(choose(9, 4, 16, 128, "nv.persist=1"), 1, 32, 12, 0, 1, 1, aut, 3, 4);
    expect(choose(9, 4, 16, 128, "nv.producer=0"), 1, 32, 12, 0, 0, 0, none, 3, 4);
    expect(choose(9, 4, 16, 128, "nv.producer=0,nv.persist=1"), 1, 32, 12, 0, 0, 0, none, 3, 4);
    expect(choose(9, 4, 16, 128, "nv.order=none"), 1, 32, 12, 0, 1, 0, none, 3, 4);
    expect(choose(9, 4, 16, 128, "nv.order=balanced,nv.maxreg=128"), 1, 32, 12, 128, 1, 0, LZ_ORDER_BALANCED, 3, 4);
    /* groups of 8 take wgmma only when asked: 8 consumer warps, persistent too */
    expect(choose(9, 8, 16, 128, "nv.wgmma=1"), 1, 32, 8, 0, 1, 0, aut, 3, 4);
    expect(choose(9, 8, 16, 128, "nv.wgmma=1,nv.persist=1"), 1, 32, 8, 0, 1, 1, aut, 3, 4);
    /* wgmma cannot run before compute capability 9 */
    expect(choose(8, 4, 16, 128, "nv.wgmma=1"), 0, 32, 8, 0, 0, 0, none, 3, 4);
    /* warps: whole groups, whole warpgroups for wgmma (else mma.sync), the
     * producer at most 12, persistence at 8 or 12; mma.sync in its own 8) */
    expect(choose(9, 4, 16, 128, "nv.warps=4,nv.persist=1"), 1, 32, 4, 0, 1, 0, aut, 3, 4);
    expect(choose(9, 4, 16, 128, "nv.warps=16"), 1, 32, 16, 0, 0, 0, none, 3, 4);
    expect(choose(9, 5, 16, 128, "nv.wgmma=1"), 0, 32, 5, 0, 0, 0, none, 3, 4);
    expect(choose(9, 3, 16, 128, "nv.warps=7"), 0, 32, 6, 0, 0, 0, none, 3, 4);
    expect(choose(8, 2, 16, 128, "nv.warps=1"), 0, 32, 2, 0, 0, 0, none, 3, 4);
    /* tiles: whole blocks of 16-key steps, two K and two V under 48 KB; the
     * producer's five under 48 KB */
    expect(choose(8, 4, 16, 64, "nv.kt=48"), 0, 48, 8, 0, 0, 0, none, 3, 4);
    expect(choose(8, 4, 16, 128, "nv.kt=48"), 0, 16, 8, 0, 0, 0, none, 3, 4);
    expect(choose(8, 4, 32, 128, "nv.kt=48"), 0, 32, 8, 0, 0, 0, none, 2, 4);
    expect(choose(8, 4, 16, 128, "nv.kt=24"), 0, 32, 8, 0, 0, 0, none, 3, 4);
    expect(choose(8, 4, 16, 128, "nv.kt=64"), 0, 16, 8, 0, 0, 0, none, 3, 4);
    expect(choose(8, 4, 16, 64, "nv.kt=64"), 0, 64, 8, 0, 0, 0, none, 3, 4);
    expect(choose(9, 4, 16, 64, "nv.kt=64"), 1, 64, 12, 0, 1, 0, aut, 3, 4);
    expect(choose(9, 4, 16, 64, "nv.kt=80"), 1, 80, 12, 0, 0, 0, none, 3, 4);
    /* the decode: rings of 2..6 under 48 KB, any waves */
    expect(choose(8, 4, 16, 128, "nv.dstages=6,nv.waves=9"), 0, 32, 8, 0, 0, 0, none, 5, 9);
    expect(choose(8, 4, 16, 64, "nv.dstages=6"), 0, 32, 8, 0, 0, 0, none, 6, 4);
    /* entries a split at least: 2 on Hopper, 8 elsewhere, any from 1 */
    assert_int_equal(choose(9, 4, 16, 128, "").dsplit, 2);
    assert_int_equal(choose(8, 4, 16, 128, "").dsplit, 8);
    assert_int_equal(choose(9, 4, 16, 128, "nv.dsplit=8").dsplit, 8);
    assert_int_equal(choose(9, 4, 16, 128, "nv.dsplit=1").dsplit, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unset),        cmocka_unit_test(test_good_keys), cmocka_unit_test(test_bad_settings),
        cmocka_unit_test(test_defaults),     cmocka_unit_test(test_overrides),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
