/* SPDX-License-Identifier: Apache-2.0 */
/* lazyattn_cache_probe: the planner's decisions (doc_lookup.c) with
 * nothing pinned, allocated, touched or counted. */
#include "cache/cache_policy.h"

#include <string.h>

static int lz_probe(const lazyattn_cache *c, const lazyattn_request_desc *d,
                    lazyattn_probe_segment *segments, int max_segments,
                    lazyattn_probe_summary *summary, const char *w) {
    LZ_CHECK_ARG(max_segments >= 0, "%s: max_segments %d < 0", w, max_segments);
    LZ_CHECK_ARG(max_segments == 0 || segments, "%s: segments is NULL", w);
    LZ_CHECK_ARG(segments || summary, "%s: neither segments nor summary asked", w);
    int64_t doc_blocks_total, doc_tokens_total;
    int st = lz_check_request_desc(c, d, w, &doc_blocks_total, &doc_tokens_total);
    if (st) return st;
    int n_segments = (d->n_prefix > 0) + d->n_docs + (d->n_question > 0);
    if (segments && max_segments < n_segments)
        return lz_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                       "%s: %d segments, room for %d (n_docs + 2 always suffice)", w, n_segments,
                       max_segments);
    const int B = lz_cache_block_size(c);
    const lz_policy *policy = lz_cache_policy(c);
    lazyattn_probe_summary sum;
    memset(&sum, 0, sizeof sum);
    sum.n_segments = n_segments;
    int n_prefix_blocks = lz_ceil_div(d->n_prefix, B);
    sum.blocks_needed = n_prefix_blocks + lz_ceil_div((int64_t)d->n_question + d->max_new_tokens, B);

    int s = 0;
    if (d->n_prefix > 0 && segments) {
        lazyattn_probe_segment *g = &segments[s++];
        memset(g, 0, sizeof *g);
        g->kind = LAZYATTN_SEGMENT_PREFIX;
        g->action = LAZYATTN_ACTION_PREFILL;
        g->doc_index = -1;
        g->n_tokens = d->n_prefix;
        g->n_blocks = n_prefix_blocks;
    }
    /* The probe's lookup keeps no keys and pins nothing; the cast only
     * lets it share the planner's lookup state, which it never uses to
     * write. */
    lz_lookup lk = {(lazyattn_cache *)c, lz_cache_model_id(c), B, 0, 0, NULL, 0, NULL, NULL};
    if (policy->begin) policy->begin(&lk, d);
    int32_t pos = d->n_prefix;
    for (int i = 0; i < d->n_docs; i++) {
        lz_decision p;
        lz_lookup_document(&lk, policy, d->docs[i], d->doc_lengths[i], pos, &p);
        pos += d->doc_lengths[i];
        int cached_blocks = p.action == LAZYATTN_ACTION_COPY ? p.n_blocks : p.n_hit_blocks;
        sum.doc_tokens += p.n_tokens;
        sum.doc_blocks += p.n_blocks;
        sum.blocks_needed += p.n_blocks - p.n_hit_blocks;
        if (p.action == LAZYATTN_ACTION_COPY) {
            sum.copy_tokens += p.n_cached;
            sum.copy_blocks += p.n_blocks;
        } else {
            sum.hit_tokens += p.n_cached;
            sum.hit_blocks += p.n_hit_blocks;
        }
        if (segments) {
            lazyattn_probe_segment *g = &segments[s++];
            memset(g, 0, sizeof *g);
            g->kind = LAZYATTN_SEGMENT_DOCUMENT;
            g->action = p.action;
            g->doc_index = i;
            g->logical_start = p.start;
            g->n_tokens = p.n_tokens;
            g->n_cached = p.n_cached;
            g->n_blocks = p.n_blocks;
            g->n_cached_blocks = cached_blocks;
            g->doc_hash = p.hash;
            memcpy(g->digest, p.digest, sizeof g->digest);
        }
    }
    if (d->n_question > 0 && segments) {
        lazyattn_probe_segment *g = &segments[s++];
        memset(g, 0, sizeof *g);
        g->kind = LAZYATTN_SEGMENT_QUESTION;
        g->action = LAZYATTN_ACTION_PREFILL;
        g->doc_index = -1;
        g->logical_start = pos;
        g->n_tokens = d->n_question;
        g->n_blocks = lz_ceil_div(d->n_question, B);
    }
    if (summary) *summary = sum;
    return LAZYATTN_STATUS_OK;
}

int lazyattn_cache_probe(const lazyattn_cache *c, const lazyattn_request_desc *d,
                         lazyattn_probe_segment *segments, int max_segments,
                         lazyattn_probe_summary *summary) {
    const char *w = "lazyattn_cache_probe";
    LZ_CHECK_ARG(c && d, "%s: NULL argument", w);
    int taken, st = lz_cache_check_live(c, w);
    if (st || (st = lz_cache_enter(c, LZ_USE_READ, w, &taken))) return st;
    st = lz_probe(c, d, segments, max_segments, summary, w);
    lz_cache_leave(c, taken);
    return st;
}
