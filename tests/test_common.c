/* SPDX-License-Identifier: Apache-2.0 */
#include "test_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t lt_next(lt_rng *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int lt_int(lt_rng *r, int lo, int hi) {
    return lo + (int)(lt_next(r) % (uint64_t)(hi - lo + 1));
}

float lt_uniform(lt_rng *r) { return (float)((lt_next(r) >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0); }

void lt_fill(lt_rng *r, float *x, size_t n, float amplitude) {
    for (size_t i = 0; i < n; i++) x[i] = amplitude * lt_uniform(r);
}

uint64_t lt_seed(void) {
    const char *s = getenv("LAZYATTN_TEST_SEED");
    uint64_t seed = s && *s ? strtoull(s, NULL, 0) : 20261129ull;
    printf("# seed %llu (set LAZYATTN_TEST_SEED to change)\n", (unsigned long long)seed);
    return seed;
}

int lt_context_setup(void **state) {
    lazyattn_context *ctx = NULL;
    int st = lazyattn_context_create(NULL, &ctx);
    if (st) {
        fprintf(stderr, "no OpenCL device: %s (%s)\n", lazyattn_status_string(st),
                lazyattn_last_error());
        return -1; /* cmocka fails the group: a missing device is not a pass */
    }
    printf("# device: %s\n", lazyattn_context_device_name(ctx));
    *state = ctx;
    return 0;
}

int lt_context_teardown(void **state) {
    lazyattn_context_destroy(*state);
    return 0;
}

cl_mem lt_buffer(lazyattn_context *ctx, const void *data, size_t bytes) {
    cl_int err;
    cl_mem m = clCreateBuffer(lazyattn_context_cl_context(ctx),
                              CL_MEM_READ_WRITE | (data ? CL_MEM_COPY_HOST_PTR : 0),
                              bytes ? bytes : 4, (void *)data, &err);
    return err == CL_SUCCESS ? m : NULL;
}

void lt_read(lazyattn_context *ctx, cl_mem m, void *out, size_t bytes) {
    cl_int err = clEnqueueReadBuffer(lazyattn_context_queue(ctx), m, CL_TRUE, 0, bytes, out, 0,
                                     NULL, NULL);
    assert_int_equal(err, CL_SUCCESS);
}

void lt_sequence_lay_out(lt_rng *r, lazyattn_pool *pool, const lazyattn_attention_config *c,
                         int base, int n_seg, const int *seg_len, const int *seg_stored,
                         lt_sequence *s) {
    memset(s, 0, sizeof *s);
    const int B = c->block_size, d = c->head_dim, nkv = c->n_kv_heads;
    int total = 0, blocks = 0;
    for (int i = 0; i < n_seg; i++) total += seg_len[i], blocks += (seg_len[i] + B - 1) / B;
    s->n_keys = total;
    s->k = malloc(sizeof(float) * total * nkv * d);
    s->v = malloc(sizeof(float) * total * nkv * d);
    s->k_pos = malloc(sizeof(int32_t) * total);
    s->slot = malloc(sizeof(int32_t) * total);
    s->stored = malloc(sizeof(int32_t) * total);
    s->table = malloc(sizeof(uint64_t) * blocks);
    s->entry_pos = malloc(sizeof(int32_t) * blocks);
    s->entry_stored = malloc(sizeof(int32_t) * blocks);
    int32_t *ids = malloc(sizeof(int32_t) * blocks);
    assert_true(s->k && s->v && s->k_pos && s->slot && s->stored && s->table && s->entry_pos &&
                s->entry_stored && ids);
    lt_fill(r, s->k, (size_t)total * nkv * d, 2.0f);
    lt_fill(r, s->v, (size_t)total * nkv * d, 1.0f);
    lt_assert_status(lazyattn_pool_alloc(pool, blocks, ids), LAZYATTN_STATUS_OK);
    for (int i = blocks - 1; i > 0; i--) { /* scatter the blocks */
        int j = lt_int(r, 0, i);
        int32_t t = ids[i];
        ids[i] = ids[j], ids[j] = t;
    }
    int key = 0, e = 0;
    for (int i = 0; i < n_seg; i++)
        for (int off = 0; off < seg_len[i]; off += B, e++) {
            const int len = seg_len[i] - off < B ? seg_len[i] - off : B;
            const int logical = base + key;
            const int stored = seg_stored[i] < 0 ? logical : seg_stored[i] + off;
            lt_assert_status(lazyattn_entry_pack(ids[e], logical - stored, len, &s->table[e]),
                             LAZYATTN_STATUS_OK);
            s->entry_pos[e] = logical;
            s->entry_stored[e] = stored;
            for (int j = 0; j < len; j++, key++) {
                s->k_pos[key] = logical + j;
                s->slot[key] = ids[e] * B + j;
                s->stored[key] = stored + j;
            }
        }
    s->n_entries = e;
    free(ids);
}

void lt_sequence_free(lt_sequence *s) {
    free(s->k), free(s->v), free(s->k_pos), free(s->slot), free(s->stored);
    free(s->table), free(s->entry_pos), free(s->entry_stored), free(s->q);
    memset(s, 0, sizeof *s);
}
