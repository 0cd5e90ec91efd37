/* SPDX-License-Identifier: Apache-2.0 */
/* Elementwise kernels of the Llama decoder in serve/. The projections are
 * CLBlast SGEMMs or bf16 GEMMs (gemm_bf16.cl) and attention is lazyattn's;
 * the residual adds are fused into the output projections' GEMMs (beta = 1,
 * accumulate), the embedding into the first layer's RMSNorm. */

/* 1 / sqrt(mean(xr[:]^2) + eps) of one row, summed by the whole work-group
 * (power-of-two size; every work-item calls it). scratch: [local size] floats */
static float serve_rms_scale(__global const float *xr, int hidden, float eps,
                             __local float *scratch) {
    int lid = get_local_id(0), ls = get_local_size(0);
    float s = 0.0f;
    for (int i = lid; i < hidden; i += ls) s += xr[i] * xr[i];
    scratch[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int o = ls / 2; o > 0; o >>= 1) {
        if (lid < o) scratch[lid] += scratch[lid + o];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return rsqrt(scratch[0] / (float)hidden + eps);
}

/* With tokens set (the first layer's norm): row r of x is first gathered
 * from table[tokens[r]] (serve_embed's copy, in the same launch); the
 * work-group's items then read back what they wrote themselves. */
static void serve_gather_row(__global const int *tokens, __global const float *table,
                             __global float *xr, size_t row, int hidden) {
    if (!tokens) return;
    int lid = get_local_id(0), ls = get_local_size(0);
    __global const float *er = table + (size_t)tokens[row] * hidden;
    for (int i = lid; i < hidden; i += ls) xr[i] = er[i];
}

/* out[r, :] = x[r, :] * w / sqrt(mean(x[r, :]^2) + eps) for rows row0 + group.
 *   x, out: [n_rows, hidden], w: [hidden], scratch: [local size] floats
 *   tokens: NULL, or [n_rows] int32 into table [vocab, hidden]: x's rows
 *           are first set to their embeddings (serve_gather_row)
 * one work-group (power-of-two size) per row */
__kernel void serve_rmsnorm(__global float *x, __global const float *w,
                            __global float *out, int hidden, float eps, int row0,
                            __local float *scratch, __global const int *tokens,
                            __global const float *table) {
    int lid = get_local_id(0), ls = get_local_size(0);
    size_t row = (size_t)(row0 + get_group_id(0));
    __global float *xr = x + row * hidden;
    serve_gather_row(tokens, table, xr, row, hidden);
    float r = serve_rms_scale(xr, hidden, eps, scratch);
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

/* Element i of a seeded tensor: offset + scale * (2u - 1), u in [0, 1)
 * from a splitmix64 hash of (seed, i). */
static inline float serve_uniform(ulong seed, ulong i, float scale, float offset) {
    ulong z = seed + (i + 1) * 0x9E3779B97F4A7C15UL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9UL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBUL;
    z ^= z >> 31;
    float u = (float)(uint)(z >> 40) * (1.0f / 16777216.0f);
    return offset + scale * (2.0f * u - 1.0f);
}

/* Seeded weights: w[i] = serve_uniform(seed, i): reproducible on any
 * device, no host work.
 *   w: [n] floats; grid-stride over n */
__kernel void serve_fill_uniform(__global float *w, ulong n, ulong seed, float scale,
                                 float offset) {
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0))
        w[i] = serve_uniform(seed, i, scale, offset);
}

/* ---- bf16 mode (serve_gemm_mode BF16): GEMM inputs as bf16 bit patterns ---- */

/* f32 -> bf16 bits, round to nearest even; NaN stays NaN (serve_bf16_of). */
static inline ushort serve_bf16(float f) {
    uint u = as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (ushort)((u >> 16) | 0x40u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}

/* The bf16 weight [n_out, n_in] (GGUF order) of the tensor serve_fill_uniform
 * writes transposed, [n_in, n_out], for the f32 path: element (o, i) is
 * that tensor's element i * n_out + o, rounded, so both modes hold the same
 * weights up to rounding. w[dst_off ..]: a fused weight's rows.
 *   grid-stride over n_out * n_in */
__kernel void serve_fill_uniform_bf16(__global ushort *w, ulong dst_off, ulong n_out, ulong n_in,
                                      ulong seed, float scale, float offset) {
    ulong n = n_out * n_in;
    for (ulong e = get_global_id(0); e < n; e += get_global_size(0)) {
        ulong o = e / n_in, i = e - o * n_in;
        w[dst_off + e] = serve_bf16(serve_uniform(seed, i * n_out + o, scale, offset));
    }
}

/* serve_rmsnorm with a bf16 result: out[group] = bf16(rmsnorm(x[row0 + group]) * w)
 * (the output rows start at 0: a GEMM's X); tokens, table as serve_rmsnorm.
 *   x: [n_rows, hidden] f32, w: [hidden] f32, out: [n, hidden] bf16 */
__kernel void serve_rmsnorm_bf16(__global float *x, __global const float *w,
                                 __global ushort *out, int hidden, float eps, int row0,
                                 __local float *scratch, __global const int *tokens,
                                 __global const float *table) {
    int lid = get_local_id(0), ls = get_local_size(0);
    size_t row = (size_t)(row0 + get_group_id(0));
    __global float *xr = x + row * hidden;
    serve_gather_row(tokens, table, xr, row, hidden);
    float r = serve_rms_scale(xr, hidden, eps, scratch);
    __global ushort *yr = out + (size_t)get_group_id(0) * hidden;
    for (int i = lid; i < hidden; i += ls) yr[i] = serve_bf16(xr[i] * r * w[i]);
}

/* SwiGLU into bf16: out = bf16(silu(g) * u).  g, u: [n] f32, out: [n] bf16 */
__kernel void serve_swiglu_bf16(__global const float *g, __global const float *u,
                                __global ushort *out, ulong n) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    float a = g[i];
    out[i] = serve_bf16(a / (1.0f + exp(-a)) * u[i]);
}

/* dst = bf16(src): the attention output before the output projection.
 *   src: [n] f32, dst: [n] bf16 */
__kernel void serve_to_bf16(__global const float *src, __global ushort *dst, ulong n) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    dst[i] = serve_bf16(src[i]);
}
