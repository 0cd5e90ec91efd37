/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The library as a user sees it: only the public header, one document
 * cached once and reused at two different positions, checked against the
 * float64 reference; plus the helpers a user reaches for.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "lazyattn.h"
#include "lazyattn_testing.h" /* the reference, the workload generator */

static float rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
}

static cl_mem upload(lazyattn_context *ctx, const void *p, size_t n) {
    return clCreateBuffer(lazyattn_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                          n, (void *)p, NULL);
}

static void test_one_document_two_positions(void **state) {
    (void)state;
    lazyattn_context *ctx;
    assert_int_equal(lazyattn_context_create(NULL, &ctx), LAZYATTN_STATUS_OK);
    lazyattn_attention_config cfg;
    lazyattn_attention_config_default(&cfg); /* Llama-3.1-8B heads, fp16, NeoX, Llama-3 scaling */
    cfg.n_q_heads = 8, cfg.n_kv_heads = 2;
    enum { L = 37, D = 128, KV = 2, H = 8, B = 16, NB = (L + B - 1) / B };
    lazyattn_pool_config pc = {1, KV, D, B, LAZYATTN_DTYPE_F16, 16ull * 2 * KV * B * D * 2,
                               LAZYATTN_KV_LAYOUT_ROWS};
    lazyattn_pool *pool;
    lazyattn_attention *attn;
    assert_int_equal(lazyattn_pool_create(ctx, &pc, &pool), LAZYATTN_STATUS_OK);
    assert_int_equal(lazyattn_attention_create(ctx, &cfg, &attn), LAZYATTN_STATUS_OK);

    /* the document, stored once at document-local positions 0..L-1 */
    uint64_t seed = 7;
    static float k[L * KV * D], v[L * KV * D], q[H * D];
    for (int i = 0; i < L * KV * D; i++) k[i] = rnd(&seed), v[i] = rnd(&seed);
    for (int i = 0; i < H * D; i++) q[i] = rnd(&seed);
    int32_t blocks[NB], slots[L], stored[L];
    assert_int_equal(lazyattn_pool_alloc(pool, NB, blocks), LAZYATTN_STATUS_OK);
    for (int i = 0; i < L; i++) slots[i] = blocks[i / B] * B + i % B, stored[i] = i;
    cl_mem km = upload(ctx, k, sizeof k), vm = upload(ctx, v, sizeof v);
    cl_mem sm = upload(ctx, slots, sizeof slots), pm = upload(ctx, stored, sizeof stored);
    assert_int_equal(lazyattn_write_kv(attn, pool, 0, L, km, vm, sm, pm, NULL, NULL), LAZYATTN_STATUS_OK);

    /* two requests place it at logical starts 5 and 70000; one query after it */
    const int32_t starts[2] = {5, 70000};
    for (int r = 0; r < 2; r++) {
        uint64_t table[NB];
        int32_t entry_pos[NB], q_pos = starts[r] + L, k_pos[L];
        for (int b = 0; b < NB; b++) {
            int len = L - b * B < B ? L - b * B : B;
            entry_pos[b] = starts[r] + b * B;
            assert_int_equal(lazyattn_entry_pack(blocks[b], starts[r], len, &table[b]), LAZYATTN_STATUS_OK);
        }
        for (int i = 0; i < L; i++) k_pos[i] = starts[r] + i;
        cl_mem qm = upload(ctx, q, sizeof q), qpm = upload(ctx, &q_pos, sizeof q_pos);
        cl_mem tm = upload(ctx, table, sizeof table), em = upload(ctx, entry_pos, sizeof entry_pos);
        cl_mem om = upload(ctx, q, sizeof q);
        assert_int_equal(lazyattn_rope_apply(attn, 1, H, qm, qpm, NULL, NULL), LAZYATTN_STATUS_OK);
        lazyattn_prefill_args a = {1, NB, qm, qpm, tm, em, om,
                                   NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
        assert_int_equal(lazyattn_prefill(attn, pool, 0, &a, NULL, NULL), LAZYATTN_STATUS_OK);
        float out[H * D];
        clEnqueueReadBuffer(lazyattn_context_queue(ctx), om, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL);
        assert_int_equal(lazyattn_attention_check(attn, NULL), LAZYATTN_STATUS_OK);
        double ref[H * D];
        lazyattn_reference_args ra = {1, L, q, &q_pos, k, v, k_pos, ref, NULL};
        assert_int_equal(lazyattn_reference_attention(&cfg, &ra), LAZYATTN_STATUS_OK);
        double err = lazyattn_normalised_error(out, ref, H * D);
        print_message("start %d: normalised error %.2e\n", starts[r], err);
        assert_true(err < 2e-3);
        clReleaseMemObject(qm); clReleaseMemObject(qpm); clReleaseMemObject(tm);
        clReleaseMemObject(em); clReleaseMemObject(om);
    }
    clReleaseMemObject(km); clReleaseMemObject(vm); clReleaseMemObject(sm); clReleaseMemObject(pm);
    lazyattn_attention_destroy(attn);
    lazyattn_pool_destroy(pool);
    lazyattn_context_destroy(ctx);
}

/* Frequencies with Llama-3 scaling against values worked by hand, and the
 * ALiBi slopes of the paper. */
static void test_positional_helpers(void **state) {
    (void)state;
    lazyattn_rope_config r = {LAZYATTN_ROPE_NEOX, 0, 500000.0, 8.0, 1.0, 4.0, 8192, 0.0, 0, {0}};
    double f[64];
    assert_int_equal(lazyattn_rope_frequencies(&r, 128, f), LAZYATTN_STATUS_OK);
    assert_true(f[0] == 1.0);                                   /* short wavelength: kept */
    double raw63 = pow(500000.0, -126.0 / 128.0);               /* long: divided by 8 */
    assert_true(fabs(f[63] - raw63 / 8.0) < 1e-18);
    /* the blend region: wavelength between 8192/4 and 8192 */
    double raw = pow(500000.0, -2.0 * 30 / 128.0), wl = 2 * 3.14159265358979323846 / raw;
    assert_true(wl > 2048 && wl < 8192);
    double smooth = (8192 / wl - 1.0) / 3.0;
    assert_true(fabs(f[30] - ((1 - smooth) * raw / 8 + smooth * raw)) < 1e-15);
    r.rotary_dim = 3;
    assert_int_equal(lazyattn_rope_frequencies(&r, 128, f), LAZYATTN_STATUS_INVALID_ARGUMENT);
    r.rotary_dim = 0, r.theta = 0.5;
    assert_int_equal(lazyattn_rope_frequencies(&r, 128, f), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(lazyattn_rope_frequencies(NULL, 128, f), LAZYATTN_STATUS_INVALID_ARGUMENT);
    /* per-pair divisors (llama.cpp's rope_freqs) and linear scaling, after Llama-3's */
    lazyattn_rope_config p = {LAZYATTN_ROPE_GPTJ, 0, 10000.0, 0.0, 0.0, 0.0, 0, 0.0, 0, {0}};
    p.n_freq_factors = 8;
    for (int i = 0; i < 8; i++) p.freq_factors[i] = 1.0f + (float)i;
    p.linear_factor = 4.0;
    assert_int_equal(lazyattn_rope_frequencies(&p, 16, f), LAZYATTN_STATUS_OK);
    for (int i = 0; i < 8; i++)
        assert_true(fabs(f[i] - pow(10000.0, -2.0 * i / 16) / (1.0 + i) / 4.0) < 1e-16);
    p.n_freq_factors = 7; /* not rotary_dim / 2 */
    assert_int_equal(lazyattn_rope_frequencies(&p, 16, f), LAZYATTN_STATUS_INVALID_ARGUMENT);
    p.n_freq_factors = 8, p.freq_factors[3] = 0.0f;
    assert_int_equal(lazyattn_rope_frequencies(&p, 16, f), LAZYATTN_STATUS_INVALID_ARGUMENT);
    p.freq_factors[3] = 1.0f, p.linear_factor = -1.0;
    assert_int_equal(lazyattn_rope_frequencies(&p, 16, f), LAZYATTN_STATUS_INVALID_ARGUMENT);

    double slope = -1;
    assert_int_equal(lazyattn_alibi_slope(0, 8, &slope), LAZYATTN_STATUS_OK);
    assert_true(fabs(slope - 0.5) < 1e-15);
    assert_int_equal(lazyattn_alibi_slope(7, 8, &slope), LAZYATTN_STATUS_OK);
    assert_true(fabs(slope - 1.0 / 256) < 1e-15);
    /* 12 heads: 8 from the 8-head sequence, then odd terms of the 16-head one */
    assert_int_equal(lazyattn_alibi_slope(8, 12, &slope), LAZYATTN_STATUS_OK);
    assert_true(fabs(slope - pow(2.0, -0.5)) < 1e-15);
    assert_int_equal(lazyattn_alibi_slope(9, 12, &slope), LAZYATTN_STATUS_OK);
    assert_true(fabs(slope - pow(2.0, -1.5)) < 1e-15);
    slope = 42;
    assert_int_equal(lazyattn_alibi_slope(12, 12, &slope), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(lazyattn_alibi_slope(-1, 12, &slope), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(lazyattn_alibi_slope(0, 0, &slope), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(lazyattn_alibi_slope(0, 8, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_true(slope == 42);

    float a[3] = {1, 2, 3};
    double b[3] = {1, 2, 3.5};
    assert_true(fabs(lazyattn_normalised_error(a, b, 3) - 0.5 / 3.5) < 1e-12);
    assert_true(isinf(lazyattn_normalised_error(NULL, b, 3)));

    lazyattn_attention_config cfg;
    lazyattn_attention_config_default(&cfg);
    double out[128];
    float x[128] = {1};
    assert_int_equal(lazyattn_reference_rope(NULL, 0, x, out), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(lazyattn_reference_rope(&cfg, 0, NULL, out), LAZYATTN_STATUS_INVALID_ARGUMENT);
    lazyattn_reference_args ra = {0};
    assert_int_equal(lazyattn_reference_attention(&cfg, &ra), LAZYATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(lazyattn_reference_attention(&cfg, NULL), LAZYATTN_STATUS_INVALID_ARGUMENT);
}

/* Every config and args struct's _init: the documented defaults, usable as
 * they come where they are complete, and NULL is a no-op. Structs are
 * filled with garbage first so that nothing is left unset. */
static void test_init_functions(void **state) {
    (void)state;
    lazyattn_pool_config pc;
    memset(&pc, 0xA5, sizeof pc);
    lazyattn_pool_config_init(&pc);
    assert_int_equal(pc.n_layers, 32);
    assert_int_equal(pc.n_kv_heads, 8);
    assert_int_equal(pc.head_dim, 128);
    assert_int_equal(pc.block_size, 16);
    assert_int_equal(pc.dtype, LAZYATTN_DTYPE_F16);
    assert_true(pc.budget_bytes == (uint64_t)1 << 30);
    assert_int_equal(pc.kv_layout, LAZYATTN_KV_LAYOUT_ROWS);
    lazyattn_pool *pool;
    assert_int_equal(lazyattn_pool_create(NULL, &pc, &pool), LAZYATTN_STATUS_OK);
    lazyattn_pool_info info;
    lazyattn_pool_get_info(pool, &info);
    assert_int_equal(info.n_blocks, 512); /* 1 GiB / (2 * 32 * 8 * 16 * 128 * 2 B = 2 MiB) */

    lazyattn_cache_config cc;
    memset(&cc, 0xA5, sizeof cc);
    lazyattn_cache_config_init(&cc);
    assert_int_equal(cc.policy, LAZYATTN_CACHE_POLICY_LAZY);
    assert_true(cc.model_id == 0 && cc.retain_bytes == 0);
    lazyattn_cache *cache;
    assert_int_equal(lazyattn_cache_create(pool, &cc, &cache), LAZYATTN_STATUS_OK);

    lazyattn_request_desc d;
    memset(&d, 0xA5, sizeof d);
    lazyattn_request_desc_init(&d);
    assert_true(d.n_prefix == 0 && d.prefix == NULL && d.n_docs == 0 && d.docs == NULL &&
                d.doc_lengths == NULL && d.n_question == 0 && d.question == NULL &&
                d.max_new_tokens == 0);
    const int32_t doc[3] = {1, 2, 3};
    const int32_t *docs[1] = {doc};
    const int32_t lens[1] = {3};
    d.n_docs = 1, d.docs = docs, d.doc_lengths = lens;
    lazyattn_request *r;
    assert_int_equal(lazyattn_request_create(cache, &d, &r), LAZYATTN_STATUS_OK);
    lazyattn_request_destroy(r);
    lazyattn_cache_destroy(cache);
    lazyattn_pool_destroy(pool);

    lazyattn_attention_config a, b;
    memset(&a, 0xA5, sizeof a);
    memset(&b, 0x5A, sizeof b);
    lazyattn_attention_config_init(&a);
    lazyattn_attention_config_default(&b);
    assert_memory_equal(&a, &b, sizeof a);
    assert_int_equal(a.kv_layout, LAZYATTN_KV_LAYOUT_ROWS);

    lazyattn_prefill_args pa;
    memset(&pa, 0xA5, sizeof pa);
    lazyattn_prefill_args_init(&pa);
    assert_true(pa.n_queries == 0 && pa.n_entries == 0 && pa.q == NULL && pa.q_pos == NULL &&
                pa.table == NULL && pa.entry_pos == NULL && pa.out == NULL);
    lazyattn_decode_args da;
    memset(&da, 0xA5, sizeof da);
    lazyattn_decode_args_init(&da);
    assert_true(da.n_seqs == 0 && da.max_entries == 0 && da.n_splits == 0 && da.q == NULL &&
                da.q_pos == NULL && da.seq_offsets == NULL && da.table == NULL &&
                da.entry_pos == NULL && da.out == NULL);
    lazyattn_reference_args ra;
    memset(&ra, 0xA5, sizeof ra);
    lazyattn_reference_args_init(&ra);
    assert_true(ra.n_queries == 0 && ra.n_keys == 0 && ra.q == NULL && ra.out == NULL);
    lazyattn_context_options co;
    memset(&co, 0xA5, sizeof co);
    lazyattn_context_options_init(&co);
    assert_true(co.platform == NULL && co.device == NULL && co.kind == LAZYATTN_DEVICE_DEFAULT &&
                co.device_index == -1 && co.log == NULL && co.profiling == 0);
    lazyattn_workload_config w, paper;
    memset(&w, 0xA5, sizeof w);
    lazyattn_workload_config_init(&w);
    assert_int_equal(lazyattn_workload_config_preset("paper", &paper), LAZYATTN_STATUS_OK);
    assert_memory_equal(&w, &paper, sizeof w);
    assert_int_equal(w.n_docs, 100);

    lazyattn_pool_config_init(NULL);
    lazyattn_cache_config_init(NULL);
    lazyattn_request_desc_init(NULL);
    lazyattn_attention_config_init(NULL);
    lazyattn_prefill_args_init(NULL);
    lazyattn_decode_args_init(NULL);
    lazyattn_reference_args_init(NULL);
    lazyattn_context_options_init(NULL);
    lazyattn_workload_config_init(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_functions),
        cmocka_unit_test(test_positional_helpers),
        cmocka_unit_test(test_one_document_two_positions),
    };
    return cmocka_run_group_tests_name("public_api", tests, NULL, NULL);
}
