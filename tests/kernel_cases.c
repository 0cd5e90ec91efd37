/* SPDX-License-Identifier: Apache-2.0 */
#include "kernel_cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lk_quiet = 0;

double lk_tolerance(lazyattn_dtype t) {
    return t == LAZYATTN_DTYPE_F32 ? 2e-5 : t == LAZYATTN_DTYPE_F16 ? 2e-3 : 1.6e-2;
}

static float lk_rand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
}

/* Everything a run allocates, released in one place. */
typedef struct lk_run_state {
    lazyattn_attention *attn;
    lazyattn_pool *pool;
    cl_mem mem[32];
    int n_mem;
    void *host[32];
    int n_host;
} lk_run_state;

static void *lk_alloc(lk_run_state *s, size_t bytes) {
    if (s->n_host == (int)(sizeof s->host / sizeof *s->host)) return NULL;
    void *p = calloc(1, bytes ? bytes : 1);
    if (p) s->host[s->n_host++] = p;
    return p;
}

static cl_mem lk_buffer(lk_run_state *s, lazyattn_context *ctx, const void *data, size_t bytes) {
    if (s->n_mem == (int)(sizeof s->mem / sizeof *s->mem)) return NULL;
    cl_int err;
    cl_mem m = clCreateBuffer(lazyattn_context_cl_context(ctx),
                              CL_MEM_READ_WRITE | (data ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)data, &err);
    if (err != CL_SUCCESS) return NULL;
    s->mem[s->n_mem++] = m;
    return m;
}

static void lk_release(lk_run_state *s) {
    for (int i = 0; i < s->n_mem; i++) clReleaseMemObject(s->mem[i]);
    for (int i = 0; i < s->n_host; i++) free(s->host[i]);
    lazyattn_attention_destroy(s->attn);
    lazyattn_pool_destroy(s->pool);
}

#define LK_TRY(expr)                                                                     \
    do {                                                                                 \
        st = (expr);                                                                     \
        if (st) {                                                                        \
            if (!lk_quiet)                                                               \
                fprintf(stderr, "%s: %s -> %s (%s)\n", c->name, #expr,                   \
                        lazyattn_status_string(st), lazyattn_last_error());              \
            goto done;                                                                   \
        }                                                                                \
    } while (0)
#define LK_NEED(cond)                                                                    \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s: %s failed\n", c->name, #cond);                          \
            st = LAZYATTN_STATUS_OUT_OF_HOST_MEMORY;                                     \
            goto done;                                                                   \
        }                                                                                \
    } while (0)

static int lk_read(lazyattn_context *ctx, cl_mem m, void *out, size_t bytes) {
    cl_int err = clEnqueueReadBuffer(lazyattn_context_queue(ctx), m, CL_TRUE, 0, bytes, out, 0,
                                     NULL, NULL);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : LAZYATTN_STATUS_OPENCL;
}

int lk_run(lazyattn_context *ctx, const lk_case *c, lk_result *r) {
    memset(r, 0, sizeof *r);
    lk_run_state s;
    memset(&s, 0, sizeof s);
    int st = LAZYATTN_STATUS_OK;
    const int D = c->head_dim, B = c->block_size, H = c->n_q_heads, KV = c->n_kv_heads;
    const int NQ = c->n_question;

    /* logical layout: documents in reverse order, then the question */
    int n_keys = NQ, n_entries = (NQ + B - 1) / B, n_doc_blocks = 0;
    for (int d = 0; d < c->n_docs; d++) {
        n_keys += c->doc_len[d];
        n_doc_blocks += (c->doc_len[d] + B - 1) / B;
    }
    n_entries += n_doc_blocks;

    lazyattn_attention_config cfg;
    lazyattn_attention_config_default(&cfg); /* NeoX RoPE with Llama-3 scaling */
    cfg.n_q_heads = H, cfg.n_kv_heads = KV, cfg.head_dim = D, cfg.block_size = B;
    cfg.dtype = c->dtype;
    cfg.kv_layout = c->kv_layout;
    const int n_blocks = n_entries + n_doc_blocks; /* + the materialised copies */
    lazyattn_pool_config pc = {1, KV, D, B, c->dtype,
                               (uint64_t)n_blocks * 2 * KV * B * D * lazyattn_dtype_size(c->dtype),
                               c->kv_layout};
    LK_TRY(lazyattn_pool_create(ctx, &pc, &s.pool));
    lazyattn_kernel_tuning tune;
    memset(&tune, 0, sizeof tune);
    tune.decode.kv_together = c->decode_warp ? 3 : 0;
    /* its split-parallel reduction (2), or the reduction chosen by the split count (3) */
    tune.decode.prefetch = c->decode_warp == 2 ? 1 : c->decode_warp == 3 ? 3 : 0;
    LK_TRY(lazyattn_attention_create_tuned(ctx, &cfg, c->decode_warp ? &tune : NULL, &s.attn));

    const size_t row = (size_t)KV * D, qrow = (size_t)H * D;
    float *k = lk_alloc(&s, n_keys * row * sizeof(float));      /* logical order */
    float *v = lk_alloc(&s, n_keys * row * sizeof(float));
    float *q = lk_alloc(&s, NQ * qrow * sizeof(float));
    int32_t *k_pos = lk_alloc(&s, n_keys * sizeof(int32_t));
    int32_t *slots = lk_alloc(&s, n_keys * sizeof(int32_t));
    int32_t *stored = lk_alloc(&s, n_keys * sizeof(int32_t));
    int32_t *ids = lk_alloc(&s, n_blocks * sizeof(int32_t));
    uint64_t *table = lk_alloc(&s, n_entries * sizeof(uint64_t));
    uint64_t *copy_table = lk_alloc(&s, n_entries * sizeof(uint64_t));
    uint64_t *src = lk_alloc(&s, (n_doc_blocks ? n_doc_blocks : 1) * sizeof(uint64_t));
    int32_t *dst = lk_alloc(&s, (n_doc_blocks ? n_doc_blocks : 1) * sizeof(int32_t));
    int32_t *entry_pos = lk_alloc(&s, n_entries * sizeof(int32_t));
    int32_t *q_pos = lk_alloc(&s, NQ * sizeof(int32_t));
    float *out = lk_alloc(&s, (NQ + 1) * qrow * sizeof(float));
    double *ref = lk_alloc(&s, NQ * qrow * sizeof(double));
    double *rot = lk_alloc(&s, D * sizeof(double));
    LK_NEED(k && v && q && k_pos && slots && stored && ids && table && copy_table && src && dst &&
            entry_pos && q_pos && out && ref && rot);
    LK_TRY(lazyattn_pool_alloc(s.pool, n_blocks, ids));

    uint64_t seed = 0x5EEDull + (uint64_t)D * 131 + (uint64_t)B * 7 + (uint64_t)c->dtype;
    for (size_t i = 0; i < n_keys * row; i++) k[i] = lk_rand(&seed), v[i] = lk_rand(&seed);
    for (size_t i = 0; i < NQ * qrow; i++) q[i] = lk_rand(&seed);

    int key = 0, entry = 0, next_block = 0, n_src = 0;
    int32_t logical = 0;
    for (int d = c->n_docs - 1; d >= 0; d--) {
        const int len = c->doc_len[d];
        for (int b = 0; b * B < len; b++) {
            const int valid = len - b * B < B ? len - b * B : B, id = ids[next_block++];
            LK_TRY(lazyattn_entry_pack(id, logical, valid, &table[entry]));
            entry_pos[entry] = logical + b * B;
            /* the copy: a new block, re-rotated, delta 0 */
            src[n_src] = table[entry];
            dst[n_src] = ids[n_entries + n_src];
            LK_TRY(lazyattn_entry_pack(dst[n_src], 0, valid, &copy_table[entry]));
            n_src++, entry++;
            for (int j = 0; j < valid; j++, key++) {
                k_pos[key] = logical + b * B + j;
                slots[key] = id * B + j;
                stored[key] = b * B + j; /* document-local */
            }
        }
        logical += len;
    }
    for (int b = 0; b * B < NQ; b++) {
        const int valid = NQ - b * B < B ? NQ - b * B : B, id = ids[next_block++];
        LK_TRY(lazyattn_entry_pack(id, 0, valid, &table[entry]));
        copy_table[entry] = table[entry];
        entry_pos[entry++] = logical + b * B;
        for (int j = 0; j < valid; j++, key++) {
            k_pos[key] = logical + b * B + j;
            slots[key] = id * B + j;
            stored[key] = k_pos[key];
            q_pos[b * B + j] = k_pos[key];
        }
    }

    if (c->corrupt == 1) {
        int32_t blk, delta, len;
        LK_TRY(lazyattn_entry_unpack(table[0], &blk, &delta, &len));
        LK_TRY(lazyattn_entry_pack(n_blocks + 3, delta, len, &table[0]));
        src[0] = table[0];
        LK_TRY(lazyattn_entry_unpack(table[n_entries - 1], &blk, &delta, &len));
        table[n_entries - 1] = (table[n_entries - 1] & ~(0xFFull << 31)) | ((uint64_t)255 << 31);
        LK_TRY(lazyattn_entry_unpack(table[n_entries - 1], &blk, &delta, &len));
        LK_NEED(len == 256 && len > B);
    }

    /* write_kv, rope_apply, prefill, decode, materialise + prefill */
    cl_mem km = lk_buffer(&s, ctx, k, n_keys * row * sizeof(float));
    cl_mem vm = lk_buffer(&s, ctx, v, n_keys * row * sizeof(float));
    cl_mem sm = lk_buffer(&s, ctx, slots, n_keys * sizeof(int32_t));
    cl_mem pm = lk_buffer(&s, ctx, stored, n_keys * sizeof(int32_t));
    cl_mem qm = lk_buffer(&s, ctx, q, NQ * qrow * sizeof(float));
    cl_mem qpm = lk_buffer(&s, ctx, q_pos, NQ * sizeof(int32_t));
    cl_mem tm = lk_buffer(&s, ctx, table, n_entries * sizeof(uint64_t));
    cl_mem ctm = lk_buffer(&s, ctx, copy_table, n_entries * sizeof(uint64_t));
    cl_mem em = lk_buffer(&s, ctx, entry_pos, n_entries * sizeof(int32_t));
    cl_mem srcm = lk_buffer(&s, ctx, src, (n_src ? n_src : 1) * sizeof(uint64_t));
    cl_mem dstm = lk_buffer(&s, ctx, dst, (n_src ? n_src : 1) * sizeof(int32_t));
    cl_mem om = lk_buffer(&s, ctx, NULL, NQ * qrow * sizeof(float));
    int32_t offsets[2] = {0, n_entries};
    cl_mem offm = lk_buffer(&s, ctx, offsets, sizeof offsets);
    cl_mem dqm = lk_buffer(&s, ctx, NULL, qrow * sizeof(float));
    cl_mem dqpm = lk_buffer(&s, ctx, &q_pos[NQ - 1], sizeof(int32_t));
    cl_mem dom = lk_buffer(&s, ctx, NULL, qrow * sizeof(float));
    LK_NEED(km && vm && sm && pm && qm && qpm && tm && ctm && em && srcm && dstm && om && offm &&
            dqm && dqpm && dom);

    LK_TRY(lazyattn_write_kv(s.attn, s.pool, 0, n_keys, km, vm, sm, pm, NULL, NULL));
    LK_TRY(lazyattn_rope_apply(s.attn, NQ, H, qm, qpm, NULL, NULL));
    LK_TRY(lk_read(ctx, qm, out, NQ * qrow * sizeof(float)));
    for (int t = 0; t < NQ; t++)
        for (int h = 0; h < H; h++) {
            const size_t o = ((size_t)t * H + h) * D;
            LK_TRY(lazyattn_reference_rope(&cfg, q_pos[t], q + o, rot));
            double e = lazyattn_normalised_error(out + o, rot, D);
            if (e > r->rope) r->rope = e;
        }

    lazyattn_reference_args ra = {NQ, n_keys, q, q_pos, k, v, k_pos, ref, NULL};
    LK_TRY(lazyattn_reference_attention(&cfg, &ra));

    /* the reference's log-sum-exp of each row (the prefill's and decode's lse outputs) */
    double *ref_lse = lk_alloc(&s, NQ * H * sizeof(double));
    float *lse = lk_alloc(&s, NQ * H * sizeof(float));
    LK_NEED(ref_lse && lse);
    ra.lse = ref_lse;
    LK_TRY(lazyattn_reference_attention(&cfg, &ra));
    cl_mem lsem = lk_buffer(&s, ctx, NULL, NQ * H * sizeof(float));
    cl_mem hm = lk_buffer(&s, ctx, NULL, NQ * qrow * sizeof(uint16_t));
    LK_NEED(lsem && hm);

    lazyattn_prefill_args a = {NQ, n_entries, qm, qpm, tm, em, om,
                               NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    a.lse = lsem;
    LK_TRY(lazyattn_prefill(s.attn, s.pool, 0, &a, NULL, NULL));
    LK_TRY(lk_read(ctx, om, out, NQ * qrow * sizeof(float)));
    r->prefill = lazyattn_normalised_error(out, ref, NQ * qrow);
    LK_TRY(lk_read(ctx, lsem, lse, NQ * H * sizeof(float)));
    for (int i = 0; i < NQ * H; i++) {
        const double e = ref_lse[i] == -INFINITY ? (lse[i] == -INFINITY ? 0.0 : INFINITY)
                                                 : fabs(lse[i] - ref_lse[i]);
        if (!(e <= r->lse)) r->lse = e;
    }
    /* the same with f32 q as f16 out (run-time type arguments, vstore_half) */
    a.lse = NULL, a.out = hm, a.out_dtype = LAZYATTN_DTYPE_F16;
    LK_TRY(lazyattn_prefill(s.attn, s.pool, 0, &a, NULL, NULL));
    {
        uint16_t *h16 = lk_alloc(&s, NQ * qrow * sizeof(uint16_t));
        float *hf = lk_alloc(&s, NQ * qrow * sizeof(float));
        LK_NEED(h16 && hf);
        LK_TRY(lk_read(ctx, hm, h16, NQ * qrow * sizeof(uint16_t)));
        for (size_t i = 0; i < NQ * qrow; i++) { /* normal halves and zeros (|out| <= 1) */
            const int e = (h16[i] >> 10) & 0x1F, m = h16[i] & 0x3FF;
            const float x = e ? ldexpf((float)(m | 0x400), e - 25) : ldexpf((float)m, -24);
            hf[i] = h16[i] & 0x8000 ? -x : x;
        }
        r->half_out = lazyattn_normalised_error(hf, ref, NQ * qrow);
    }

    /* batched ragged prefill: the question split in two sequences around an
     * empty one, each over its own copy of the table (the table twice) */
    {
        const int h = NQ / 2;
        int32_t q_indptr[4] = {0, h, h, NQ}, t_indptr[4] = {0, n_entries, n_entries, 2 * n_entries};
        if (c->corrupt == 2) { /* hostile offsets: every sequence must be skipped */
            t_indptr[1] = 2 * n_entries + 5;  /* sequence 0 ends past the table */
            q_indptr[2] = h - 1;              /* sequence 1 decreases, 2 follows the decrease */
        }
        uint64_t *table2 = lk_alloc(&s, 2 * n_entries * sizeof(uint64_t));
        int32_t *epos2 = lk_alloc(&s, 2 * n_entries * sizeof(int32_t));
        LK_NEED(table2 && epos2);
        for (int i = 0; i < 2; i++) {
            memcpy(table2 + i * n_entries, table, n_entries * sizeof(uint64_t));
            memcpy(epos2 + i * n_entries, entry_pos, n_entries * sizeof(int32_t));
        }
        cl_mem qim = lk_buffer(&s, ctx, q_indptr, sizeof q_indptr);
        cl_mem tim = lk_buffer(&s, ctx, t_indptr, sizeof t_indptr);
        cl_mem t2m = lk_buffer(&s, ctx, table2, 2 * n_entries * sizeof(uint64_t));
        cl_mem e2m = lk_buffer(&s, ctx, epos2, 2 * n_entries * sizeof(int32_t));
        float *bout = lk_alloc(&s, NQ * qrow * sizeof(float)); /* zeros */
        LK_NEED(bout);
        cl_mem bom = lk_buffer(&s, ctx, bout, NQ * qrow * sizeof(float));
        LK_NEED(qim && tim && t2m && e2m && bom);
        lazyattn_prefill_batch_args ba;
        lazyattn_prefill_batch_args_init(&ba);
        ba.n_seqs = 3, ba.n_queries = NQ, ba.n_entries = 2 * n_entries;
        ba.max_queries = NQ - h > h ? NQ - h : h;
        ba.q = qm, ba.q_pos = qpm, ba.q_indptr = qim, ba.table_indptr = tim, ba.table = t2m;
        ba.entry_pos = e2m, ba.out = bom;
        LK_TRY(lazyattn_prefill_batched(s.attn, s.pool, 0, &ba, NULL, NULL));
        LK_TRY(lk_read(ctx, bom, bout, NQ * qrow * sizeof(float)));
        r->batched = lazyattn_normalised_error(bout, ref, NQ * qrow);
        if (c->corrupt == 2) {
            st = lazyattn_attention_check(s.attn, NULL);
            if (st != LAZYATTN_STATUS_OUT_OF_RANGE || !strstr(lazyattn_last_error(), "sequence offsets")) {
                fprintf(stderr, "%s: the bad offsets were not reported: %s (%s)\n", c->name,
                        lazyattn_status_string(st), lazyattn_last_error());
                st = LAZYATTN_STATUS_OUT_OF_RANGE;
                goto done;
            }
            st = LAZYATTN_STATUS_OK;
            for (int i = 0; i < NQ * (int)qrow; i++) /* nothing written: the buffer's zeros */
                LK_NEED(bout[i] == 0.0f);
            r->batched = 0; /* not compared */
        }
    }

    cl_int err = clEnqueueCopyBuffer(lazyattn_context_queue(ctx), qm, dqm,
                                     (NQ - 1) * qrow * sizeof(float), 0, qrow * sizeof(float), 0,
                                     NULL, NULL);
    LK_NEED(err == CL_SUCCESS);
    lazyattn_decode_args da = {1, n_entries, c->n_splits, dqm, dqpm, offm, tm, em, dom,
                               NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    da.lse = lsem;
    LK_TRY(lazyattn_decode(s.attn, s.pool, 0, &da, NULL, NULL));
    LK_TRY(lk_read(ctx, dom, out + NQ * qrow, qrow * sizeof(float)));
    r->decode = lazyattn_normalised_error(out + NQ * qrow, ref + (NQ - 1) * qrow, qrow);
    LK_TRY(lk_read(ctx, lsem, lse, H * sizeof(float)));
    for (int h = 0; h < H; h++) {
        const double want = ref_lse[(NQ - 1) * H + h];
        const double e = want == -INFINITY ? (lse[h] == -INFINITY ? 0.0 : INFINITY)
                                           : fabs(lse[h] - want);
        if (!(e <= r->lse)) r->lse = e;
    }

    if (n_src) LK_TRY(lazyattn_materialise(s.attn, s.pool, 0, n_src, srcm, dstm, NULL, NULL));
    lazyattn_prefill_args ma = {NQ, n_entries, qm, qpm, ctm, em, om,
                                NULL, LAZYATTN_DTYPE_F32, LAZYATTN_DTYPE_F32};
    LK_TRY(lazyattn_prefill(s.attn, s.pool, 0, &ma, NULL, NULL));
    float *mout = lk_alloc(&s, NQ * qrow * sizeof(float));
    LK_NEED(mout);
    LK_TRY(lk_read(ctx, om, mout, NQ * qrow * sizeof(float)));
    r->materialised = lazyattn_normalised_error(mout, ref, NQ * qrow);
    if (c->corrupt == 1) {
        st = lazyattn_attention_check(s.attn, NULL);
        if (st == LAZYATTN_STATUS_OUT_OF_RANGE && strstr(lazyattn_last_error(), "block id") &&
            strstr(lazyattn_last_error(), "valid length")) {
            r->rope = r->prefill = r->decode = r->materialised = r->batched = 0; /* not compared */
            r->lse = r->half_out = 0;
            st = LAZYATTN_STATUS_OK;
        } else {
            fprintf(stderr, "%s: the bad entries were not reported: %s (%s)\n", c->name,
                    lazyattn_status_string(st), lazyattn_last_error());
            st = LAZYATTN_STATUS_OUT_OF_RANGE;
        }
        goto done;
    }
    LK_TRY(lazyattn_attention_check(s.attn, NULL));

    r->n_outputs = (NQ + 1) * qrow;
    r->outputs = malloc(r->n_outputs * sizeof(float));
    LK_NEED(r->outputs);
    memcpy(r->outputs, out, r->n_outputs * sizeof(float));
done:
    lk_release(&s);
    return st;
}
