/* SPDX-License-Identifier: Apache-2.0 */
/* Positional schemes on the host: RoPE frequencies (with Llama-3, per-pair
 * and linear scaling), ALiBi slopes, and the default configuration. */
#include "internal.h"

#include <math.h>
#include <string.h>

int lazyattn_rope_frequencies(const lazyattn_rope_config *rope, int head_dim, double *freq) {
    LZ_CHECK_ARG(rope && freq, "lazyattn_rope_frequencies: NULL argument");
    LZ_CHECK_ARG(head_dim >= 2 && head_dim % 2 == 0,
                 "lazyattn_rope_frequencies: head_dim %d must be even and >= 2", head_dim);
    int rot = rope->rotary_dim ? rope->rotary_dim : head_dim;
    LZ_CHECK_ARG(rot >= 2 && rot % 2 == 0 && rot <= head_dim,
                 "lazyattn_rope_frequencies: rotary_dim %d must be even, in 2..head_dim (%d)", rot,
                 head_dim);
    LZ_CHECK_ARG(rope->theta > 1.0 && isfinite(rope->theta),
                 "lazyattn_rope_frequencies: theta %g must be finite and exceed 1", rope->theta);
    int scaled = rope->llama3_factor > 0.0;
    if (scaled) {
        LZ_CHECK_ARG(isfinite(rope->llama3_factor) && isfinite(rope->llama3_low_freq_factor) &&
                         isfinite(rope->llama3_high_freq_factor),
                     "lazyattn_rope_frequencies: Llama-3 scaling factors must be finite "
                     "(factor %g, low %g, high %g)",
                     rope->llama3_factor, rope->llama3_low_freq_factor,
                     rope->llama3_high_freq_factor);
        LZ_CHECK_ARG(rope->llama3_factor >= 1.0 && rope->llama3_low_freq_factor > 0.0 &&
                         rope->llama3_high_freq_factor > rope->llama3_low_freq_factor &&
                         rope->llama3_original_context > 0,
                     "lazyattn_rope_frequencies: Llama-3 scaling needs factor >= 1, 0 < low < "
                     "high freq factors and original context > 0");
    }
    LZ_CHECK_ARG(rope->linear_factor == 0.0 ||
                     (rope->linear_factor > 0.0 && isfinite(rope->linear_factor)),
                 "lazyattn_rope_frequencies: linear_factor %g must be 0 (none) or finite and > 0",
                 rope->linear_factor);
    LZ_CHECK_ARG(rope->n_freq_factors == 0 || rope->n_freq_factors == rot / 2,
                 "lazyattn_rope_frequencies: n_freq_factors %d must be 0 (none) or rotary_dim / 2 "
                 "(%d)",
                 rope->n_freq_factors, rot / 2);
    for (int i = 0; i < rope->n_freq_factors; i++)
        LZ_CHECK_ARG(rope->freq_factors[i] > 0.0f && isfinite(rope->freq_factors[i]),
                     "lazyattn_rope_frequencies: freq_factors[%d] = %g must be finite and > 0", i,
                     (double)rope->freq_factors[i]);
    const double pi = 3.14159265358979323846;
    for (int i = 0; i < rot / 2; i++) {
        double f = pow(rope->theta, -2.0 * i / rot);
        if (scaled) {
            /* Llama-3.1: long wavelengths slowed by factor, short kept, a
             * linear blend between. */
            double ctx = rope->llama3_original_context;
            double low_wavelen = ctx / rope->llama3_low_freq_factor;
            double high_wavelen = ctx / rope->llama3_high_freq_factor;
            double wavelen = 2.0 * pi / f;
            if (wavelen > low_wavelen) {
                f /= rope->llama3_factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (ctx / wavelen - rope->llama3_low_freq_factor) /
                                (rope->llama3_high_freq_factor - rope->llama3_low_freq_factor);
                f = (1.0 - smooth) * f / rope->llama3_factor + smooth * f;
            }
        }
        if (rope->n_freq_factors) f /= (double)rope->freq_factors[i];
        if (rope->linear_factor > 0.0) f /= rope->linear_factor;
        freq[i] = f;
    }
    return LAZYATTN_STATUS_OK;
}

void lazyattn_attention_config_default(lazyattn_attention_config *cfg) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    cfg->n_q_heads = 32;
    cfg->n_kv_heads = 8;
    cfg->head_dim = 128;
    cfg->block_size = 16;
    cfg->dtype = LAZYATTN_DTYPE_F16;
    cfg->rope.style = LAZYATTN_ROPE_NEOX;
    cfg->rope.rotary_dim = 0;
    cfg->rope.theta = 500000.0;
    cfg->rope.llama3_factor = 8.0;
    cfg->rope.llama3_low_freq_factor = 1.0;
    cfg->rope.llama3_high_freq_factor = 4.0;
    cfg->rope.llama3_original_context = 8192;
    cfg->kv_layout = LAZYATTN_KV_LAYOUT_ROWS;
}

void lazyattn_attention_config_init(lazyattn_attention_config *config) {
    lazyattn_attention_config_default(config);
}

/* in double: h + 1 and n reach 2^31 for n_heads near INT_MAX */
static double lz_alibi_pow2_slope(double h, double n) { return pow(2.0, -8.0 * (h + 1) / n); }

int lazyattn_alibi_slope(int h, int n_heads, double *slope) {
    LZ_CHECK_ARG(slope != NULL, "lazyattn_alibi_slope: slope is NULL");
    LZ_CHECK_ARG(n_heads >= 1 && h >= 0 && h < n_heads,
                 "lazyattn_alibi_slope: head %d outside 0..%d", h, n_heads - 1);
    int n2 = 1; /* the largest power of two <= n_heads, without overflowing n2 * 2 */
    while (n2 <= n_heads / 2) n2 *= 2;
    /* past n2 heads, the ALiBi paper's interpolation: every other slope of 2 * n2 heads */
    *slope = h < n2 ? lz_alibi_pow2_slope(h, n2)
                    : lz_alibi_pow2_slope(2.0 * (h - n2), 2.0 * n2);
    return LAZYATTN_STATUS_OK;
}
