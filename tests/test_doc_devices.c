/* SPDX-License-Identifier: Apache-2.0 */
/* Documents carried between two OpenCL devices (a multi-GPU host's engine
 * processes, one a device, sharing a tier). Documents computed on device A,
 * exported and imported on device B: B holds them losslessly (it exports
 * A's bytes again), and B's attention over them (the question's prefill at
 * the documents' own starts and at others) is bit-identical to B's over
 * the same documents computed on B, wherever the two devices write the
 * same K/V rows, as one implementation's kernels do on any of its devices
 * (two GPUs of a host; the same device twice). Two implementations (PoCL
 * and Intel's runtime) round the keys' rotation apart (sincos is exact to a
 * few ulp, not correctly rounded): their rows are asserted within that
 * rounding and the outputs near. Both ways, f32 pages (B = 16) and f16
 * pages (B = 32); every layer also against the float64 reference.
 *
 * The devices: global indices LAZYATTN_TEST_DEVICES="A,B" (default "0,1";
 * list_devices prints them; meson runs "0,0" too). Where the devices asked
 * do not exist every case is skipped and says why, unless
 * LAZYATTN_TEST_TWO_DEVICES=1 (CI, which makes PoCL and Intel's runtime
 * visible together): then that fails. */
#include "doc_engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct device_pair {
    lazyattn_context *ctx[2];
    int index[2];
} device_pair;

#define LZ_NAME 300

static device_pair pair;
static char skip_reason[300];

static int parse_pair(const char *text, int out[2]) {
    char *end;
    long a = strtol(text, &end, 10);
    if (end == text || *end != ',') return -1;
    const char *second = end + 1;
    long b = strtol(second, &end, 10);
    if (end == second || *end || a < 0 || b < 0 || a > 1000 || b > 1000) return -1;
    out[0] = (int)a;
    out[1] = (int)b;
    return 0;
}

static int required(void) {
    const char *v = getenv("LAZYATTN_TEST_TWO_DEVICES");
    return v && strcmp(v, "1") == 0;
}

/* Both contexts, or a reason to skip (a failure where two are required). */
static int pair_setup(void **state) {
    *state = &pair;
    const char *text = getenv("LAZYATTN_TEST_DEVICES");
    if (parse_pair(text && *text ? text : "0,1", pair.index)) {
        fprintf(stderr, "LAZYATTN_TEST_DEVICES=\"%s\": want two indices \"A,B\"\n", text);
        return -1;
    }
    int n = 0;
    int st = lazyattn_device_count(&n);
    if (st) n = 0;
    int top = pair.index[0] > pair.index[1] ? pair.index[0] : pair.index[1];
    if (n <= top) {
        snprintf(skip_reason, sizeof skip_reason,
                 "%d OpenCL device%s, devices #%d and #%d asked: two devices are needed (CI "
                 "shows PoCL and Intel's runtime together)",
                 n, n == 1 ? "" : "s", pair.index[0], pair.index[1]);
        if (required()) {
            fprintf(stderr, "LAZYATTN_TEST_TWO_DEVICES=1: %s\n", skip_reason);
            return -1;
        }
        printf("# skipped: %s\n", skip_reason);
        return 0;
    }
    for (int i = 0; i < 2; i++) {
        lazyattn_context_options o;
        lazyattn_context_options_init(&o);
        o.device_index = pair.index[i];
        st = lazyattn_context_create(&o, &pair.ctx[i]);
        if (st) {
            fprintf(stderr, "device #%d: %s (%s)\n", pair.index[i], lazyattn_status_string(st),
                    lazyattn_last_error());
            return -1;
        }
        printf("# device %c: #%d %s\n", 'A' + i, pair.index[i],
               lazyattn_context_device_name(pair.ctx[i]));
    }
    return 0;
}

static int pair_teardown(void **state) {
    (void)state;
    for (int i = 0; i < 2; i++) lazyattn_context_destroy(pair.ctx[i]);
    memset(&pair, 0, sizeof pair);
    return 0;
}

static uint8_t *export_doc(engine *e, int id, size_t *size) {
    size_t n = 0, written = 0;
    lt_assert_status(lazyattn_cache_export_size(e->cache, hash_of(id), &n), LAZYATTN_STATUS_OK);
    uint8_t *buf = malloc(n);
    assert_non_null(buf);
    lt_assert_status(lazyattn_cache_export(e->cache, hash_of(id), buf, n, &written),
                     LAZYATTN_STATUS_OK);
    assert_int_equal(written, n);
    *size = n;
    return buf;
}

static size_t count_differ(const float *x, const float *y, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&x[i], &y[i], sizeof *x) != 0;
    return d;
}

/* IEEE half to float (the pages' f16). */
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31u, m = h & 1023u;
    float f;
    if (e == 0)
        f = (float)m * (1.0f / 16777216.0f); /* subnormal: m 2^-24 */
    else if (e == 31)
        f = m ? NAN : INFINITY;
    else
        f = ldexpf((float)(1024u + m), (int)e - 25);
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    bits |= sign;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static float element(const uint8_t *p, size_t i, int esz) {
    if (esz == 4) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return half_to_float(h);
}

/* The K/V rows of two exports of a document of len tokens (the payload:
 * per layer its K blocks then its V blocks, each [NKV, bs, D]; the last
 * block's slots past len are padding, not compared): the elements whose
 * bits differ, each asserted within rel * (|x| + 1), the rows being of size
 * about 1 (doc_kv). */
static size_t compare_rows(const uint8_t *x, const uint8_t *y, int len, int bs,
                           lazyattn_dtype dtype, double rel) {
    int esz = (int)lazyattn_dtype_size(dtype);
    int n_blocks = (len + bs - 1) / bs;
    const uint8_t *px = x + 128 + 4 * (size_t)len, *py = y + 128 + 4 * (size_t)len;
    size_t differ = 0, i = 0;
    double worst = 0;
    for (int part = 0; part < 2 * L; part++)
        for (int blk = 0; blk < n_blocks; blk++)
            for (int h = 0; h < NKV; h++)
                for (int t = 0; t < bs; t++)
                    for (int d = 0; d < D; d++, i++) {
                        if (blk * bs + t >= len) continue; /* padding */
                        if (memcmp(px + i * (size_t)esz, py + i * (size_t)esz, (size_t)esz) == 0)
                            continue;
                        differ++;
                        float a = element(px, i, esz), b = element(py, i, esz);
                        double e = fabs((double)a - (double)b) / (fabs((double)a) + 1.0); /* rows ~ 1 */
                        if (!(e <= worst)) worst = e;
                    }
    if (differ)
        printf("# %zu K/V elements differ between the devices (the rotation's rounding), "
               "relative %.3g at most\n", differ, worst);
    assert_true(worst <= rel);
    return differ;
}

/* Rows that differ are allowed only between two implementations (sincos is
 * exact to a few ulp, not correctly rounded): one implementation's kernels
 * write the same bits for the same document on any of its devices. */
static void same_kind_must_agree(int from, int to, size_t differ) {
    char pa[LZ_NAME], pb[LZ_NAME];
    snprintf(pa, sizeof pa, "%s", lazyattn_context_device_name(pair.ctx[from]));
    snprintf(pb, sizeof pb, "%s", lazyattn_context_device_name(pair.ctx[to]));
    if (strcmp(pa, pb) == 0)
        print_error("%zu K/V elements differ between two devices \"%s\"\n", differ, pa);
    assert_true(strcmp(pa, pb) != 0);
}

/* B's attention over the carried documents and over its own: the same bits
 * where the rows are the same; else (two implementations) near. */
static void expect_same_output(const float *x, const float *y, size_t rows_differ,
                               lazyattn_dtype dtype, const char *what) {
    size_t d = count_differ(x, y, OUT_N);
    if (rows_differ == 0) {
        if (d) print_error("%s: %zu of %zu output elements differ\n", what, d, OUT_N);
        assert_int_equal(d, 0);
        return;
    }
    double worst = 0;
    for (size_t i = 0; i < OUT_N; i++) {
        double e = fabs((double)x[i] - (double)y[i]) / (fabs((double)y[i]) + 1e-3);
        if (!(e <= worst)) worst = e;
    }
    printf("# %s: %zu of %zu output elements differ, relative %.3g at most\n", what, d,
           (size_t)OUT_N, worst);
    assert_true(worst <= (dtype == LAZYATTN_DTYPE_F32 ? 1e-4 : 1e-2));
}

/* Documents 0 and 3 computed on device `from`, carried to device `to`:
 * there, imported (engine `carried`) and computed (engine `native`). */
static void carry(int from, int to, int block_size, lazyattn_dtype dtype) {
    if (!pair.ctx[0]) skip();
    engine src, carried, native;
    engine_open_as(&src, pair.ctx[from], 24, MODEL, block_size, dtype);
    engine_open_as(&carried, pair.ctx[to], 30, MODEL, block_size, dtype);
    engine_open_as(&native, pair.ctx[to], 30, MODEL, block_size, dtype);
    static float out_src[OUT_N], out_carried[OUT_N], out_native[OUT_N];
    lazyattn_segment_action act[3];
    const int ids[] = {0, 3};
    run_request(&src, 2, ids, out_src, act);
    assert_int_equal(act[0], LAZYATTN_ACTION_PREFILL);
    run_request(&native, 2, ids, out_native, act);
    assert_int_equal(act[0], LAZYATTN_ACTION_PREFILL);
    size_t rows_differ = 0;
    /* other block ids on the importing side */
    int32_t taken[3];
    lt_assert_status(lazyattn_pool_alloc(carried.pool, 3, taken), LAZYATTN_STATUS_OK);
    for (int k = 0; k < 2; k++) {
        size_t n, m;
        uint8_t *blob = export_doc(&src, ids[k], &n);
        uint8_t *here = export_doc(&native, ids[k], &m);
        /* the same document written by either device: the same K/V rows, or
         * (implementations apart) rows within the rotation's rounding */
        assert_int_equal(m, n);
        rows_differ += compare_rows(blob, here, doc_len[ids[k]], block_size, dtype,
                                    lazyattn_dtype_size(dtype) == 4 ? 1e-6 : 2e-3);
        lt_assert_status(lazyattn_cache_import(carried.cache, blob, n, NULL), LAZYATTN_STATUS_OK);
        /* carried losslessly: the importing side exports the same bytes */
        uint8_t *again = export_doc(&carried, ids[k], &m);
        assert_int_equal(m, n);
        assert_memory_equal(again, blob, n);
        free(again);
        free(here);
        free(blob);
    }
    /* B's attention over the carried documents and over its own */
    run_request(&carried, 2, ids, out_carried, act);
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    assert_int_equal(act[1], LAZYATTN_ACTION_REUSE);
    run_request(&native, 2, ids, out_native, act);
    assert_int_equal(act[0], LAZYATTN_ACTION_REUSE);
    if (rows_differ) same_kind_must_agree(from, to, rows_differ);
    expect_same_output(out_carried, out_native, rows_differ, dtype, "own starts");
    /* at other logical starts: behind a document computed on each side */
    const int moved[] = {2, 3, 0};
    run_request(&carried, 3, moved, out_carried, act);
    assert_int_equal(act[0], LAZYATTN_ACTION_PREFILL);
    assert_int_equal(act[1], LAZYATTN_ACTION_REUSE);
    assert_int_equal(act[2], LAZYATTN_ACTION_REUSE);
    run_request(&native, 3, moved, out_native, act);
    expect_same_output(out_carried, out_native, rows_differ, dtype, "moved");
    lazyattn_pool_free(carried.pool, 3, taken);
    engine_close(&native);
    engine_close(&carried);
    engine_close(&src);
}

static void test_a_to_b_f32(void **state) {
    (void)state;
    carry(0, 1, B, LAZYATTN_DTYPE_F32);
}

static void test_b_to_a_f32(void **state) {
    (void)state;
    carry(1, 0, B, LAZYATTN_DTYPE_F32);
}

static void test_a_to_b_f16(void **state) {
    (void)state;
    carry(0, 1, 32, LAZYATTN_DTYPE_F16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_to_b_f32),
        cmocka_unit_test(test_b_to_a_f32),
        cmocka_unit_test(test_a_to_b_f16),
    };
    return cmocka_run_group_tests_name("doc_devices", tests, pair_setup, pair_teardown);
}
