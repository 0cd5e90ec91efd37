/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The softmax state of a partial attention row and the one merge of such
 * states (as FlashInfer's include/flashinfer/attention/state.cuh), used by
 * every reduction of the split decodes: lz_decode_reduce (cl/decode.cl),
 * lz_decode_warp_reduce (cl/decode_warp.cl), lz_decode_nv_reduce
 * (cl/decode_nv.cl).
 *
 * The state of a row over a set of keys with scores s_k and values v_k:
 *   m  the largest score, natural-log units (-INFINITY before any key)
 *   d  sum_k e^(s_k - m)
 *   o  sum_k e^(s_k - m) v_k, unnormalised: the row's output is o / d
 * A split writes its state per row: part_ml (m, d) and part_acc (o). A state
 * with d == 0 saw no key and adds nothing, whatever its m.
 */
#ifndef LZ_SOFTMAX_STATE_H
#define LZ_SOFTMAX_STATE_H

/* e^x of a merge: the device's hardware exponential (native != 0) or exp() */
#define LZ_STATE_EXP(x, native) ((native) ? native_exp(x) : exp(x))

/* The largest m of a merge so far, m, with state ml = (m_k, d_k) taken in
 * (an empty state, d_k == 0, leaves it). */
inline float lz_state_max(float m, float2 ml) { return ml.y != 0.0f ? fmax(m, ml.x) : m; }

/* The weight e^(m_k - m) of state ml = (m_k, d_k) in a merge of maximum m
 * (>= m_k); 0 for an empty state. */
inline float lz_state_weight(float2 ml, float m, int native) {
    return ml.y != 0.0f ? LZ_STATE_EXP(ml.x - m, native) : 0.0f;
}

/*
 * The running state (m, d, o) := its merge with n states (ML[k],
 * O[k * o_stride + o_at]), k = 0 .. n - 1: ML[k] = (m_k, d_k) float2, o and O[..]
 * of type T (float or float4); ML and O arrays of any address space (a
 * macro: OpenCL C 1.2 has no generic pointers). One rescale for the batch:
 * the new maximum M over the running state and the batch, the running d
 * and o times e^(m - M) (0 from no key yet), then each state added at its
 * weight e^(m_k - M). native: LZ_STATE_EXP. LZ_STATE_MERGE unrolls its
 * loops (a batch in registers, n a constant); LZ_STATE_MERGE_LOOP leaves
 * them to the compiler (n any).
 */
#define LZ_STATE_MERGE(m, d, o, T, n, ML, O, o_stride, o_at, native)                           \
    LZ_STATE_MERGE_(m, d, o, T, n, ML, O, o_stride, o_at, native, _Pragma("unroll"))
#define LZ_STATE_MERGE_LOOP(m, d, o, T, n, ML, O, o_stride, o_at, native)                      \
    LZ_STATE_MERGE_(m, d, o, T, n, ML, O, o_stride, o_at, native, )
#define LZ_STATE_MERGE_(m, d, o, T, n, ML, O, o_stride, o_at, native, UNROLL)                  \
    do {                                                                                       \
        float mn_ = (m);                                                                       \
        UNROLL                                                                                 \
        for (int k_ = 0; k_ < (n); k_++) mn_ = lz_state_max(mn_, (ML)[k_]);                    \
        const float a_ = (m) == -INFINITY ? 0.0f : LZ_STATE_EXP((m) - mn_, native);            \
        (d) *= a_;                                                                             \
        (o) *= a_;                                                                             \
        UNROLL                                                                                 \
        for (int k_ = 0; k_ < (n); k_++) {                                                     \
            const float w_ = lz_state_weight((ML)[k_], mn_, native);                           \
            (d) = fma((ML)[k_].y, w_, (d));                                                    \
            (o) = fma((O)[k_ * (o_stride) + (o_at)], (T)(w_), (o));                            \
        }                                                                                      \
        (m) = mn_;                                                                             \
    } while (0)

#endif
