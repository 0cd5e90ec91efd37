/* Requests: a policy's plan for one prompt (what to prefill, copy, reuse,
 * and the block table), decode growth, commit and release. */
#include "cache_internal.h"

#include <stdlib.h>
#include <string.h>

static int lz_ceil_div(int64_t a, int b) { return (int)((a + b - 1) / b); }

/* Tokens in block j of a run of n tokens. */
static int lz_block_len(int n, int j, int B) { return n - j * B < B ? n - j * B : B; }

/* What one document needs, decided before anything is allocated. */
typedef struct lz_doc_plan {
    uint64_t hash;
    int32_t start;
    int n_blocks;
    lazyattn_segment_action action;
    lz_entry *reuse;    /* LAZY/POSITION hit, or the POSITION copy source */
    int n_hit_blocks;   /* PREFIX: leading blocks reused */
    int first_hold;     /* PREFIX: holds of the reused blocks start here */
} lz_doc_plan;

static int lz_hold_push(struct lazyattn_request *r, lz_entry *e, int owned) {
    if (r->n_holds == r->cap_holds) return 0; /* sized up front */
    r->holds[r->n_holds].entry = e;
    r->holds[r->n_holds].owned = owned;
    r->n_holds++;
    return 1;
}

static int lz_table_reserve(struct lazyattn_request *r, int n) {
    if (n <= r->cap_entries) return 1;
    int cap = r->cap_entries ? r->cap_entries : 16;
    while (cap < n) cap *= 2;
    uint64_t *t = realloc(r->table, (size_t)cap * sizeof *t);
    if (!t) return 0;
    r->table = t;
    int32_t *p = realloc(r->entry_pos, (size_t)cap * sizeof *p);
    if (!p) return 0;
    r->entry_pos = p;
    r->cap_entries = cap;
    return 1;
}

static void lz_table_put(struct lazyattn_request *r, int32_t block, int32_t delta, int len,
                         int32_t pos) {
    /* Every value was range-checked at planning: packing cannot fail. */
    lazyattn_entry_pack(block, delta, len, &r->table[r->n_entries]);
    r->entry_pos[r->n_entries] = pos;
    r->n_entries++;
}

/* Entries of the question + generated tokens, from the own tail blocks. */
static void lz_table_tail(struct lazyattn_request *r) {
    int B = r->cache->block_size;
    r->n_entries = r->n_fixed_entries;
    int n_tail_blocks = lz_ceil_div(r->tail_tokens, B);
    for (int j = 0; j < n_tail_blocks; j++) {
        lz_table_put(r, r->own[r->n_prefix_blocks + j], 0, lz_block_len(r->tail_tokens, j, B),
                     r->tail_start + j * B);
    }
}

static void lz_prefill_put(struct lazyattn_request *r, int32_t block, int offset, int32_t stored,
                           int32_t pos) {
    r->prefill_slots[r->n_prefill] = block * r->cache->block_size + offset;
    r->prefill_stored[r->n_prefill] = stored;
    r->prefill_pos[r->n_prefill] = pos;
    r->n_prefill++;
}

void lz_request_release(struct lazyattn_request *r) {
    lazyattn_cache *c = r->cache;
    /* PREFIX unpins deepest first so that LRU evicts chains from the leaves. */
    int reverse = c->config.policy == LAZYATTN_CACHE_POLICY_PREFIX;
    for (int k = 0; k < r->n_holds; k++) {
        lz_hold *h = &r->holds[reverse ? r->n_holds - 1 - k : k];
        if (!h->entry) continue; /* a slot never filled (failed create) */
        if (h->owned && !h->entry->committed)
            lz_cache_drop(c, h->entry);
        else
            lz_cache_unpin(c, h->entry);
    }
    r->n_holds = 0;
    if (r->n_own) {
        lazyattn_pool_free(c->pool, r->n_own, r->own);
        lz_cache_add_held(c, -r->n_own);
        r->n_own = 0;
    }
}

static void lz_request_free(struct lazyattn_request *r) {
    free(r->holds);
    free(r->own);
    free(r->segments);
    free(r->prefill_slots);
    free(r->prefill_stored);
    free(r->prefill_pos);
    free(r->copy_src);
    free(r->copy_dst);
    free(r->table);
    free(r->entry_pos);
    r->magic = 0;
    free(r);
}

void lazyattn_request_destroy(lazyattn_request *r) {
    if (!r) return;
    if (!lz_live_for_destroy(r->magic, LZ_MAGIC_REQUEST, "lazyattn_request_destroy", "request"))
        return;
    lazyattn_cache *c = r->cache;
    lz_request_release(r);
    lz_cache_unlink_request(c, r);
    lz_request_free(r);
    lz_cache_trim_to(c, c->retain_bytes);
}

static int lz_check_desc(const lazyattn_cache *c, const lazyattn_request_desc *d,
                         int64_t *doc_blocks_total, int64_t *doc_tokens_total) {
    const char *w = "lazyattn_request_create";
    LZ_CHECK_ARG(d->n_prefix >= 0 && d->n_docs >= 0 && d->n_question >= 0 &&
                     d->max_new_tokens >= 0,
                 "%s: negative count (prefix %d, docs %d, question %d, max_new_tokens %d)", w,
                 d->n_prefix, d->n_docs, d->n_question, d->max_new_tokens);
    LZ_CHECK_ARG(d->n_prefix == 0 || d->prefix, "%s: prefix is NULL", w);
    LZ_CHECK_ARG(d->n_question == 0 || d->question, "%s: question is NULL", w);
    LZ_CHECK_ARG(d->n_docs == 0 || (d->docs && d->doc_lengths), "%s: docs or doc_lengths is NULL",
                 w);
    int64_t blocks = 0, tokens = 0;
    for (int i = 0; i < d->n_docs; i++) {
        LZ_CHECK_ARG(d->doc_lengths[i] >= 1, "%s: document %d has length %d", w, i,
                     (int)d->doc_lengths[i]);
        LZ_CHECK_ARG(d->docs[i] != NULL, "%s: document %d is NULL", w, i);
        tokens += d->doc_lengths[i]; /* at most 2^31 documents of 2^31 tokens: no overflow */
        blocks += lz_ceil_div(d->doc_lengths[i], c->block_size);
    }
    int64_t total = (int64_t)d->n_prefix + tokens + d->n_question + d->max_new_tokens;
    if (total > (int64_t)LAZYATTN_MAX_POSITION + 1)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                       "%s: %lld tokens in all, positions stop at %d", w, (long long)total,
                       LAZYATTN_MAX_POSITION);
    *doc_blocks_total = blocks;
    *doc_tokens_total = tokens;
    return LAZYATTN_STATUS_OK;
}

/* Chain key of one PREFIX block. */
static uint64_t lz_prefix_key(uint64_t parent, int first_of_doc, const int32_t *tokens, int n) {
    return lz_hash_tokens(lz_hash_pair(parent, (uint64_t)first_of_doc), tokens, n);
}

int lazyattn_request_create(lazyattn_cache *c, const lazyattn_request_desc *d,
                            lazyattn_request **out) {
    LZ_CHECK_ARG(out != NULL, "lazyattn_request_create: out is NULL");
    *out = NULL;
    LZ_CHECK_ARG(c && d, "lazyattn_request_create: NULL argument");
    LZ_CHECK_LIVE(c, LZ_MAGIC_CACHE, "lazyattn_request_create", "cache");
    int64_t doc_blocks_total = 0, doc_tokens_total = 0;
    int st = lz_check_desc(c, d, &doc_blocks_total, &doc_tokens_total);
    if (st) return st;
    const int B = c->block_size;
    const lazyattn_cache_policy policy = c->config.policy;

    int n_prefix_blocks = lz_ceil_div(d->n_prefix, B);
    int n_tail_blocks = lz_ceil_div((int64_t)d->n_question + d->max_new_tokens, B);
    int64_t max_entries = n_prefix_blocks + doc_blocks_total + n_tail_blocks;
    int64_t max_prefill = (int64_t)d->n_prefix + doc_tokens_total + d->n_question;

    struct lazyattn_request *r = calloc(1, sizeof *r);
    lz_doc_plan *dp = calloc((size_t)d->n_docs + 1, sizeof *dp);
    int32_t *fresh = NULL;
    int64_t next = -1; /* fresh[] blocks handed to own or to an entry; -1: none allocated */
    if (!r || !dp) goto oom;
    r->magic = LZ_MAGIC_REQUEST;
    r->cache = c;
    r->cap_holds = (int)(doc_blocks_total + 2 * (int64_t)d->n_docs + 1);
    r->holds = malloc((size_t)r->cap_holds * sizeof *r->holds);
    r->cap_own = n_prefix_blocks + n_tail_blocks + 1;
    r->own = malloc((size_t)r->cap_own * sizeof *r->own);
    r->segments = calloc((size_t)d->n_docs + 2, sizeof *r->segments);
    r->prefill_slots = malloc((size_t)(max_prefill + 1) * sizeof(int32_t));
    r->prefill_stored = malloc((size_t)(max_prefill + 1) * sizeof(int32_t));
    r->prefill_pos = malloc((size_t)(max_prefill + 1) * sizeof(int32_t));
    r->copy_src = malloc((size_t)(doc_blocks_total + 1) * sizeof(uint64_t));
    r->copy_dst = malloc((size_t)(doc_blocks_total + 1) * sizeof(int32_t));
    if (!r->holds || !r->own || !r->segments || !r->prefill_slots || !r->prefill_stored ||
        !r->prefill_pos || !r->copy_src || !r->copy_dst || !lz_table_reserve(r, (int)max_entries + 1))
        goto oom;
    lz_cache_link_request(c, r);

    // ---- decide, pinning what is reused (nothing allocated yet) ----
    int64_t need = n_prefix_blocks + n_tail_blocks;
    int32_t pos = d->n_prefix;
    /* PREFIX: chains are rooted at a hash of the prefix tokens. */
    const uint64_t root = lz_hash_tokens(c->config.model_id ^ 0x5052454649584B59ull, d->prefix,
                                         d->n_prefix);
    uint64_t parent = root;
    int chain_broken = 0;
    for (int i = 0; i < d->n_docs; i++) {
        lz_doc_plan *p = &dp[i];
        const int32_t *tok = d->docs[i];
        int len = d->doc_lengths[i];
        p->start = pos;
        p->n_blocks = lz_ceil_div(len, B);
        p->hash = lz_hash_tokens(c->config.model_id, tok, len);
        p->action = LAZYATTN_ACTION_PREFILL;
        pos += len;
        if (policy == LAZYATTN_CACHE_POLICY_LAZY) {
            p->reuse = lz_cache_find(c, p->hash, p->hash, 0, 0, tok, len);
        } else if (policy == LAZYATTN_CACHE_POLICY_POSITION) {
            uint64_t key = lz_hash_pair(p->hash, (uint64_t)(uint32_t)p->start);
            p->reuse = lz_cache_find(c, key, p->hash, p->start, 0, tok, len);
            if (!p->reuse) {
                p->reuse = lz_cache_find_doc(c, p->hash, tok, len);
                if (p->reuse) p->action = LAZYATTN_ACTION_COPY;
            }
        } else if (policy == LAZYATTN_CACHE_POLICY_PREFIX) {
            p->first_hold = r->n_holds;
            for (int j = 0; j < p->n_blocks && !chain_broken; j++) {
                int n = lz_block_len(len, j, B);
                uint64_t key = lz_prefix_key(parent, j == 0, tok + j * B, n);
                lz_entry *e = lz_cache_find(c, key, parent, p->start + j * B, j == 0, tok + j * B, n);
                if (!e) {
                    chain_broken = 1;
                    break;
                }
                lz_cache_pin(c, e);
                lz_hold_push(r, e, 0);
                parent = key;
                p->n_hit_blocks++;
            }
            if (p->n_hit_blocks == p->n_blocks)
                p->action = LAZYATTN_ACTION_REUSE;
            else if (p->n_hit_blocks)
                p->action = LAZYATTN_ACTION_PARTIAL;
            need += p->n_blocks - p->n_hit_blocks;
            continue;
        }
        /* Holds in prompt order: the reused or copied entry, then a slot
         * for the new blocks, filled once they are allocated. */
        if (p->reuse) {
            if (p->action != LAZYATTN_ACTION_COPY) p->action = LAZYATTN_ACTION_REUSE;
            lz_cache_pin(c, p->reuse);
            lz_hold_push(r, p->reuse, 0);
        }
        p->first_hold = r->n_holds;
        if (p->action != LAZYATTN_ACTION_REUSE) {
            need += p->n_blocks;
            lz_hold_push(r, NULL, 1);
        }
    }

    // ---- room and blocks, all at once ----
    st = lz_cache_make_room(c, need, "lazyattn_request_create");
    if (st) {
        c->stats.budget_failures++;
        goto fail;
    }
    fresh = malloc((size_t)(need + 1) * sizeof *fresh);
    if (!fresh) goto oom_linked;
    st = lazyattn_pool_alloc(c->pool, (int)need, fresh);
    if (st) goto fail; /* another cache took the room meanwhile: cannot happen single-threaded */
    lz_cache_add_held(c, need);
    /* Own blocks first: from here on the release path frees everything
     * that was taken from fresh[], the rest is freed below on failure. */
    memcpy(r->own, fresh, (size_t)(n_prefix_blocks + n_tail_blocks) * sizeof *fresh);
    r->n_own = n_prefix_blocks + n_tail_blocks;
    r->n_prefix_blocks = n_prefix_blocks;
    next = r->n_own;

    // ---- segments, prefill list, copies, table, in prompt order ----
    lazyattn_segment *seg;
    if (d->n_prefix > 0) {
        seg = &r->segments[r->n_segments++];
        seg->kind = LAZYATTN_SEGMENT_PREFIX;
        seg->action = LAZYATTN_ACTION_PREFILL;
        seg->doc_index = -1;
        seg->n_tokens = d->n_prefix;
        seg->prefill_offset = r->n_prefill;
        seg->first_entry = r->n_entries;
        seg->n_entries = n_prefix_blocks;
        for (int t = 0; t < d->n_prefix; t++) lz_prefill_put(r, r->own[t / B], t % B, t, t);
        for (int j = 0; j < n_prefix_blocks; j++)
            lz_table_put(r, r->own[j], 0, lz_block_len(d->n_prefix, j, B), j * B);
    }
    parent = root;
    for (int i = 0; i < d->n_docs; i++) {
        lz_doc_plan *p = &dp[i];
        const int32_t *tok = d->docs[i];
        int len = d->doc_lengths[i];
        seg = &r->segments[r->n_segments++];
        seg->kind = LAZYATTN_SEGMENT_DOCUMENT;
        seg->action = p->action;
        seg->doc_index = i;
        seg->logical_start = p->start;
        seg->n_tokens = len;
        seg->first_entry = r->n_entries;
        seg->n_entries = p->n_blocks;
        seg->prefill_offset = r->n_prefill;
        r->doc_tokens += len;
        r->doc_blocks += p->n_blocks;

        if (policy == LAZYATTN_CACHE_POLICY_PREFIX) {
            seg->stored_start = p->start;
            for (int j = 0; j < p->n_blocks; j++) {
                int n = lz_block_len(len, j, B);
                lz_entry *e;
                uint64_t key = lz_prefix_key(parent, j == 0, tok + j * B, n);
                if (j < p->n_hit_blocks) {
                    e = r->holds[p->first_hold + j].entry;
                    seg->n_cached += n;
                    r->hit_tokens += n;
                    r->hit_blocks++;
                } else {
                    e = lz_entry_new(&fresh[next], 1, tok + j * B, n);
                    if (!e) goto oom_linked;
                    next++;
                    e->key = key;
                    e->doc_hash = parent;
                    e->stored_start = p->start + j * B;
                    e->first_of_doc = j == 0;
                    lz_hold_push(r, e, 1);
                    for (int t = 0; t < n; t++)
                        lz_prefill_put(r, e->blocks[0], t, p->start + j * B + t,
                                       p->start + j * B + t);
                }
                lz_table_put(r, e->blocks[0], 0, n, p->start + j * B);
                parent = key;
            }
            continue;
        }

        lz_entry *e = NULL;
        if (p->action == LAZYATTN_ACTION_REUSE) {
            e = p->reuse;
            seg->n_cached = len;
            r->hit_tokens += len;
            r->hit_blocks += p->n_blocks;
        } else {
            e = lz_entry_new(&fresh[next], p->n_blocks, tok, len);
            if (!e) goto oom_linked;
            next += p->n_blocks;
            int lazy = policy == LAZYATTN_CACHE_POLICY_LAZY;
            e->doc_hash = p->hash;
            e->stored_start = lazy ? 0 : p->start;
            e->key = lazy ? p->hash : lz_hash_pair(p->hash, (uint64_t)(uint32_t)p->start);
            r->holds[p->first_hold].entry = e;
            if (p->action == LAZYATTN_ACTION_COPY) {
                const lz_entry *src = p->reuse;
                seg->n_cached = len;
                r->copy_tokens += len;
                r->copy_blocks += p->n_blocks;
                for (int j = 0; j < p->n_blocks; j++) {
                    int n = lz_block_len(len, j, B);
                    lazyattn_entry_pack(src->blocks[j], p->start - src->stored_start, n,
                                        &r->copy_src[r->n_copies]);
                    r->copy_dst[r->n_copies++] = e->blocks[j];
                }
            } else {
                for (int t = 0; t < len; t++)
                    lz_prefill_put(r, e->blocks[t / B], t % B, e->stored_start + t, p->start + t);
            }
        }
        seg->stored_start = e->stored_start;
        for (int j = 0; j < p->n_blocks; j++) {
            int n = lz_block_len(len, j, B);
            lz_table_put(r, e->blocks[j], p->start - e->stored_start, n, p->start + j * B);
        }
    }
    r->tail_start = pos;
    r->tail_tokens = d->n_question;
    r->n_fixed_entries = r->n_entries;
    if (d->n_question > 0) {
        seg = &r->segments[r->n_segments++];
        seg->kind = LAZYATTN_SEGMENT_QUESTION;
        seg->action = LAZYATTN_ACTION_PREFILL;
        seg->doc_index = -1;
        seg->logical_start = pos;
        seg->stored_start = pos;
        seg->n_tokens = d->n_question;
        seg->prefill_offset = r->n_prefill;
        seg->first_entry = r->n_entries;
        seg->n_entries = lz_ceil_div(d->n_question, B);
        for (int t = 0; t < d->n_question; t++)
            lz_prefill_put(r, r->own[n_prefix_blocks + t / B], t % B, pos + t, pos + t);
    }
    lz_table_tail(r);
    free(fresh);
    free(dp);

    // ---- accounting ----
    c->stats.requests++;
    for (int i = 0; i < d->n_docs; i++) {
        c->stats.lookups++;
        switch (r->segments[(d->n_prefix > 0) + i].action) {
        case LAZYATTN_ACTION_REUSE: c->stats.hits++; break;
        case LAZYATTN_ACTION_COPY: c->stats.copy_hits++; break;
        case LAZYATTN_ACTION_PARTIAL: c->stats.partial_hits++; break;
        default: c->stats.misses++; break;
        }
    }
    c->stats.doc_tokens += r->doc_tokens;
    c->stats.hit_tokens += r->hit_tokens;
    c->stats.copy_tokens += r->copy_tokens;
    c->stats.doc_blocks += r->doc_blocks;
    c->stats.hit_blocks += r->hit_blocks;
    c->stats.copy_blocks += r->copy_blocks;
    if (policy == LAZYATTN_CACHE_POLICY_NONE) r->committed = 1; /* nothing to publish */
    *out = r;
    return LAZYATTN_STATUS_OK;

oom:
    if (r) lz_request_free(r);
    free(dp);
    return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_request_create");
oom_linked:
    st = lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_request_create");
fail:
    /* Blocks of fresh[] not yet handed to own or to an entry go back. */
    if (next >= 0 && need > next) {
        lazyattn_pool_free(c->pool, (int)(need - next), fresh + next);
        lz_cache_add_held(c, -(need - next));
    }
    lz_request_release(r);
    lz_cache_unlink_request(c, r);
    lz_request_free(r);
    free(fresh);
    free(dp);
    return st;
}

int lazyattn_request_get_plan(const lazyattn_request *r, lazyattn_plan *p) {
    LZ_CHECK_ARG(r && p, "lazyattn_request_get_plan: NULL argument");
    LZ_CHECK_LIVE(r, LZ_MAGIC_REQUEST, "lazyattn_request_get_plan", "request");
    memset(p, 0, sizeof *p);
    p->n_segments = r->n_segments;
    p->segments = r->segments;
    p->n_prefill = r->n_prefill;
    p->prefill_slots = r->prefill_slots;
    p->prefill_stored_pos = r->prefill_stored;
    p->prefill_pos = r->prefill_pos;
    p->n_copies = r->n_copies;
    p->copy_src = r->copy_src;
    p->copy_dst = r->copy_dst;
    p->n_entries = r->n_entries;
    p->table = r->table;
    p->entry_pos = r->entry_pos;
    p->n_positions = r->tail_start + r->tail_tokens;
    p->n_generated = r->n_generated;
    p->committed = r->committed;
    p->doc_tokens = r->doc_tokens;
    p->hit_tokens = r->hit_tokens;
    p->copy_tokens = r->copy_tokens;
    p->doc_blocks = r->doc_blocks;
    p->hit_blocks = r->hit_blocks;
    p->copy_blocks = r->copy_blocks;
    return LAZYATTN_STATUS_OK;
}

int lazyattn_request_commit(lazyattn_request *r) {
    LZ_CHECK_ARG(r != NULL, "lazyattn_request_commit: request is NULL");
    LZ_CHECK_LIVE(r, LZ_MAGIC_REQUEST, "lazyattn_request_commit", "request");
    if (r->committed) return LAZYATTN_STATUS_OK;
    /* Prompt order, so that a document repeated within the request
     * publishes its first copy; later duplicates stay private. */
    for (int h = 0; h < r->n_holds; h++)
        if (r->holds[h].owned && r->holds[h].entry && !r->holds[h].entry->committed)
            lz_cache_insert(r->cache, r->holds[h].entry);
    r->committed = 1;
    lz_cache_trim_to(r->cache, r->cache->retain_bytes);
    return LAZYATTN_STATUS_OK;
}

int lazyattn_request_append(lazyattn_request *r, int n, int32_t *slots, int32_t *positions) {
    LZ_CHECK_ARG(r != NULL, "lazyattn_request_append: request is NULL");
    LZ_CHECK_LIVE(r, LZ_MAGIC_REQUEST, "lazyattn_request_append", "request");
    LZ_CHECK_ARG(n >= 0, "lazyattn_request_append: negative count %d", n);
    LZ_CHECK_ARG(n == 0 || (slots && positions), "lazyattn_request_append: NULL output");
    lazyattn_cache *c = r->cache;
    const int B = c->block_size;
    int64_t total = (int64_t)r->tail_start + r->tail_tokens + n;
    if (total > (int64_t)LAZYATTN_MAX_POSITION + 1)
        return lz_fail(LAZYATTN_STATUS_OUT_OF_RANGE,
                       "lazyattn_request_append: position %lld past %d", (long long)total - 1,
                       LAZYATTN_MAX_POSITION);
    int have = r->n_own - r->n_prefix_blocks;
    int want = lz_ceil_div((int64_t)r->tail_tokens + n, B);
    int more = want > have ? want - have : 0;
    if (!lz_table_reserve(r, r->n_fixed_entries + want + 1))
        return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_request_append");
    if (r->n_own + more > r->cap_own) {
        int cap = r->cap_own * 2 > r->n_own + more ? r->cap_own * 2 : r->n_own + more;
        int32_t *own = realloc(r->own, (size_t)cap * sizeof *own);
        if (!own) return lz_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "lazyattn_request_append");
        r->own = own;
        r->cap_own = cap;
    }
    if (more) {
        int st = lz_cache_make_room(c, more, "lazyattn_request_append");
        if (!st) st = lazyattn_pool_alloc(c->pool, more, r->own + r->n_own);
        if (st) {
            c->stats.budget_failures++;
            return st;
        }
        r->n_own += more;
        lz_cache_add_held(c, more);
    }
    for (int i = 0; i < n; i++) {
        int t = r->tail_tokens + i;
        slots[i] = r->own[r->n_prefix_blocks + t / B] * B + t % B;
        positions[i] = r->tail_start + t;
    }
    r->tail_tokens += n;
    r->n_generated += n;
    lz_table_tail(r);
    return LAZYATTN_STATUS_OK;
}
