/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Choosing the next token from a row of logits: greedy, or a seeded draw
 * at a temperature after top-k and top-p (nucleus) filtering.
 *
 * The draw, exactly (so that a test can recompute it):
 *   1. rank the tokens by logit, highest first, a lower id first on ties;
 *   2. top_k > 0 keeps the first top_k of that order (0: all);
 *   3. p_i = exp((l_i - l_max) / temperature) over the kept tokens,
 *      normalised to sum 1;
 *   4. top_p < 1 keeps the shortest prefix of the ranked kept tokens whose
 *      p sum reaches top_p (at least one token), renormalised;
 *   5. u = (x >> 11) * 2^-53 with x the next splitmix64 output of the
 *      sampler's state (state += 0x9E3779B97F4A7C15, then the usual
 *      mixing), and the token is the first kept token, in id order, whose
 *      cumulative p exceeds u (the last kept token if rounding leaves none).
 * temperature 0 is greedy: the highest logit, the lowest id on ties (the
 * RNG is not advanced). Conventions as in serve.h.
 */
#ifndef SERVE_SAMPLER_H
#define SERVE_SAMPLER_H

#include <stdint.h>

typedef struct serve_sampler_config {
    double temperature; /* 0 = greedy; else (0, 100] */
    int top_k;          /* 0 = no limit; >= 0 */
    double top_p;       /* (0, 1]; 1 = no limit */
    uint64_t seed;      /* the splitmix64 state to start from */
} serve_sampler_config;

/* Greedy, top_k 0, top_p 1, seed 0. */
void serve_sampler_config_init(serve_sampler_config *cfg);

typedef struct serve_sampler serve_sampler;

/* INVALID_ARGUMENT naming the field for a value out of its range, or
 * vocab < 1. */
int serve_sampler_create(const serve_sampler_config *cfg, int vocab, serve_sampler **out);
void serve_sampler_destroy(serve_sampler *s);

/* logits: [vocab] f32 (the vocab of create). INVALID_ARGUMENT for a NaN
 * logit (an infinite one is an ordinary value: +inf wins, -inf is never
 * drawn unless every logit is -inf, then the lowest id). */
int serve_sampler_sample(serve_sampler *s, const float *logits, int32_t *token);

#endif
