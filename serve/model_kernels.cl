/* SPDX-License-Identifier: Apache-2.0 */
/* Elementwise kernels of the Llama decoder in serve/. The projections are
 * CLBlast SGEMMs and attention is lazyattn's; the residual adds are fused
 * into the output projections' GEMMs (beta = 1). */

/* x[t, :] = table[tokens[t], :]; the host checks 0 <= tokens[t] < vocab.
 *   tokens: [n_tokens] int32, table: [vocab, hidden], x: [n_tokens, hidden]
 * global: (hidden, n_tokens) */
__kernel void serve_embed(__global const int *tokens, __global const float *table,
                          __global float *x, int hidden) {
    int i = get_global_id(0), t = get_global_id(1);
    if (i >= hidden) return;
    x[(size_t)t * hidden + i] = table[(size_t)tokens[t] * hidden + i];
}

/* out[r, :] = x[r, :] * w / sqrt(mean(x[r, :]^2) + eps) for rows row0 + group.
 *   x, out: [n_rows, hidden], w: [hidden], scratch: [local size] floats
 * one work-group (power-of-two size) per row */
__kernel void serve_rmsnorm(__global const float *x, __global const float *w,
                            __global float *out, int hidden, float eps, int row0,
                            __local float *scratch) {
    int lid = get_local_id(0), ls = get_local_size(0);
    size_t row = (size_t)(row0 + get_group_id(0));
    __global const float *xr = x + row * hidden;
    float s = 0.0f;
    for (int i = lid; i < hidden; i += ls) s += xr[i] * xr[i];
    scratch[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int o = ls / 2; o > 0; o >>= 1) {
        if (lid < o) scratch[lid] += scratch[lid + o];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = rsqrt(scratch[0] / (float)hidden + eps);
    __global float *yr = out + row * hidden;
    for (int i = lid; i < hidden; i += ls) yr[i] = xr[i] * r * w[i];
}

/* SwiGLU: g = silu(g) * u, in place.  g, u: [n], n = rows * ffn may pass 2^31 */
__kernel void serve_swiglu(__global float *g, __global const float *u, ulong n) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    float a = g[i];
    g[i] = a / (1.0f + exp(-a)) * u[i];
}

/* out[r] = argmax of logits[r, :], the lowest index on ties; NaN never wins.
 *   logits: [n_rows, vocab], out: [n_rows] int32
 * one work-group (power-of-two size) per row; vals, idx: [local size] */
__kernel void serve_argmax(__global const float *logits, __global int *out, int vocab,
                           __local float *vals, __local int *idx) {
    int lid = get_local_id(0), ls = get_local_size(0);
    __global const float *lr = logits + (size_t)get_group_id(0) * vocab;
    float best = -INFINITY;
    int best_i = vocab;
    for (int i = lid; i < vocab; i += ls) {
        float v = lr[i];
        if (v > best || (best_i == vocab && !isnan(v))) best = v, best_i = i;
    }
    vals[lid] = best;
    idx[lid] = best_i;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int o = ls / 2; o > 0; o >>= 1) {
        if (lid < o) {
            float v = vals[lid + o];
            int j = idx[lid + o];
            if (j < vocab && (idx[lid] == vocab || v > vals[lid] || (v == vals[lid] && j < idx[lid]))) {
                vals[lid] = v;
                idx[lid] = j;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[get_group_id(0)] = idx[0] == vocab ? 0 : idx[0];
}

/* Seeded weights: w[i] = offset + scale * (2u - 1), u in [0, 1) from a
 * splitmix64 hash of (seed, i): reproducible on any device, no host work.
 *   w: [n] floats; grid-stride over n */
__kernel void serve_fill_uniform(__global float *w, ulong n, ulong seed, float scale,
                                 float offset) {
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
        ulong z = seed + (i + 1) * 0x9E3779B97F4A7C15UL;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9UL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBUL;
        z ^= z >> 31;
        float u = (float)(uint)(z >> 40) * (1.0f / 16777216.0f);
        w[i] = offset + scale * (2.0f * u - 1.0f);
    }
}
