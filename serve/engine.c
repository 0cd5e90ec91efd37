/* SPDX-License-Identifier: Apache-2.0 */
/* The serving engine: turns a lazyattn request plan into model work
 * (copies, isolated document prefills, the question prefill) and runs
 * decode steps over a batch of requests. A request's prefill rows (prefix,
 * missed documents, question) go through one forward per chunk with one
 * batched ragged prefill per layer over a per-request batch table kept in a
 * two-sequence device plan (serve_engine_prefill_batched); the previous
 * per-segment path stays behind serve_engine_use_batched_prefill(e, 0). The
 * decode batch's tables live in a lazyattn device plan, updated in place
 * each step (only what the appends changed is written); the per-segment
 * path's question prefill reads its table from a one-sequence device plan. */
#include "serve.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct serve_engine {
    serve_model *model;
    lazyattn_pool *pool;
    /* device copy lists for lazyattn_materialise */
    cl_mem copy_src; /* [copy_cap] uint64 */
    cl_mem copy_dst; /* [copy_cap] int32 */
    int copy_cap;
    /* host scratch, grown on demand */
    int32_t *tokens, *q_pos, *slots, *stored; /* [row_cap] */
    int row_cap;
    uint64_t *table; /* [table_cap] */
    int32_t *entry_pos;
    int table_cap;
    int32_t *seq_offsets; /* [row_cap + 1] */
    /* device-resident tables */
    int use_plans;                /* 1 (default); 0: host tables uploaded per forward */
    lazyattn_device_plan *batch;  /* decode: up to row_cap sequences */
    lazyattn_device_plan *single; /* the question prefill: one sequence */
    lazyattn_plan_seq *seqs;      /* [row_cap] */
    /* batched prefill (serve_engine_use_batched_prefill) */
    int use_batched;              /* 1 (default); 0: one forward per segment chunk */
    lazyattn_device_plan *prompt; /* the batch table: entries before the question, whole table */
    int32_t *q_indptr, *t_indptr; /* [indptr_cap] */
    int indptr_cap;
    /* decode's host tables (device plans off), apart from the prefill's:
     * a decode step may run between two chunks of a prefill */
    uint64_t *dec_table;    /* [dec_table_cap] */
    int32_t *dec_entry_pos;
    int dec_table_cap;
    /* chunked prefill interleaved with decode (serve_engine_set_prefill_chunk) */
    int chunk;                  /* rows per prefill forward; 0: row_cap, nothing between */
    serve_between_fn between;   /* NULL: chunks only */
    void *between_user;
    int in_prefill;             /* inside serve_engine_prefill */
    const lazyattn_request *prefilling; /* its request (between() may not decode it) */
    serve_engine_stats stats;
    /* host time and enqueues of the between() calls of the running prefill,
     * taken out of its own (they are decode steps, counted there) */
    double between_s, between_cpu_s;
    int64_t between_enqueues;
};

void serve_engine_destroy(serve_engine *e) {
    if (!e) return;
    if (e->copy_src) clReleaseMemObject(e->copy_src);
    if (e->copy_dst) clReleaseMemObject(e->copy_dst);
    free(e->tokens);
    free(e->q_pos);
    free(e->slots);
    free(e->stored);
    free(e->table);
    free(e->entry_pos);
    free(e->seq_offsets);
    lazyattn_device_plan_destroy(e->batch);
    lazyattn_device_plan_destroy(e->single);
    lazyattn_device_plan_destroy(e->prompt);
    free(e->q_indptr);
    free(e->t_indptr);
    free(e->dec_table);
    free(e->dec_entry_pos);
    free(e->seqs);
    free(e);
}

int serve_engine_create(serve_model *model, lazyattn_pool *pool, serve_engine **out) {
    if (!out) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_engine_create: out NULL");
    *out = NULL;
    if (!model || !pool)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_engine_create: NULL argument");
    serve_engine *e = calloc(1, sizeof *e);
    if (!e) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_engine_create");
    e->model = model;
    e->pool = pool;
    int rows = serve_model_get_config(model)->max_rows;
    e->row_cap = rows;
    e->tokens = malloc((size_t)rows * sizeof(int32_t));
    e->q_pos = malloc((size_t)rows * sizeof(int32_t));
    e->slots = malloc((size_t)rows * sizeof(int32_t));
    e->stored = malloc((size_t)rows * sizeof(int32_t));
    e->seq_offsets = malloc((size_t)(rows + 1) * sizeof(int32_t));
    e->seqs = malloc((size_t)rows * sizeof *e->seqs);
    if (!e->tokens || !e->q_pos || !e->slots || !e->stored || !e->seq_offsets || !e->seqs) {
        serve_engine_destroy(e);
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_engine_create");
    }
    lazyattn_device_plan_config pc;
    lazyattn_device_plan_config_init(&pc);
    pc.max_seqs = rows;
    int st = lazyattn_device_plan_create(serve_model_context(model), &pc, &e->batch);
    if (!st) {
        pc.max_seqs = 1;
        st = lazyattn_device_plan_create(serve_model_context(model), &pc, &e->single);
    }
    if (!st) {
        pc.max_seqs = 2;
        st = lazyattn_device_plan_create(serve_model_context(model), &pc, &e->prompt);
    }
    if (st) { /* the message first: destroying may overwrite lazyattn's detail */
        st = serve_lz_fail(st, "lazyattn_device_plan_create");
        serve_engine_destroy(e);
        return st;
    }
    e->use_plans = 1;
    e->use_batched = 1;
    *out = e;
    return LAZYATTN_STATUS_OK;
}

/* Grows a host table (entries and their positions) to hold n entries. */
static int serve_table_grow(uint64_t **table, int32_t **entry_pos, int *cap_io, int n) {
    if (n <= *cap_io) return LAZYATTN_STATUS_OK;
    int cap = *cap_io ? *cap_io : 256;
    while (cap < n) cap = cap > INT_MAX / 2 ? INT_MAX : cap * 2;
    uint64_t *t = realloc(*table, (size_t)cap * sizeof *t);
    if (!t) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "engine table");
    *table = t;
    int32_t *p = realloc(*entry_pos, (size_t)cap * sizeof *p);
    if (!p) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "engine table");
    *entry_pos = p;
    *cap_io = cap;
    return LAZYATTN_STATUS_OK;
}

static int serve_engine_table_reserve(serve_engine *e, int n) {
    return serve_table_grow(&e->table, &e->entry_pos, &e->table_cap, n);
}

/* Rows of one prefill forward: the chunk if one is set, at most max_rows. */
static int serve_engine_chunk_rows(const serve_engine *e) {
    return e->chunk > 0 && e->chunk < e->row_cap ? e->chunk : e->row_cap;
}

/* Before each prefill forward of a request but its first, with a chunk
 * set: the caller's between() (a decode step of its running batch). Its
 * host time and enqueues are set apart from the prefill's. */
static int serve_engine_between_forwards(serve_engine *e, int64_t forwards_done) {
    if (forwards_done == 0 || e->chunk == 0 || !e->between) return LAZYATTN_STATUS_OK;
    serve_timer *t = serve_model_timer(e->model);
    double t0 = serve_now(), c0 = serve_thread_cpu_now();
    double w0 = t ? t->wait_s : 0, wc0 = t ? t->wait_cpu_s : 0;
    int64_t q0 = t ? t->enqueues : 0;
    /* the detail is per thread and never cleared: empty it, so that a
     * failure of between() that leaves none is not told with a stale one */
    serve_fail(LAZYATTN_STATUS_OK, "%s", "");
    int st = e->between(e->between_user);
    e->stats.between_calls++;
    e->between_s += serve_now() - t0 - (t ? t->wait_s - w0 : 0);
    e->between_cpu_s += serve_thread_cpu_now() - c0 - (t ? t->wait_cpu_s - wc0 : 0);
    if (t) e->between_enqueues += t->enqueues - q0;
    if (st > 0) /* not a lazyattn_status: the engine's callers expect a negative one */
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_engine_prefill: between() returned %d, not a negative "
                          "lazyattn_status", st);
    if (st && !serve_last_error()[0])
        return serve_fail(st, "serve_engine_prefill: between() returned %d (%s)", st,
                          lazyattn_status_string(st));
    return st;
}

/* lazyattn_device_plan_update on the model's queue, its writes counted as
 * enqueues. */
static int serve_engine_plan_update(serve_engine *e, lazyattn_device_plan *plan, int n,
                                    const lazyattn_plan_seq *seqs) {
    serve_timer *timer = serve_model_timer(e->model);
    lazyattn_device_plan_info before, after;
    int st = timer ? lazyattn_device_plan_get_info(plan, &before) : 0;
    if (!st) st = lazyattn_device_plan_update(plan, n, seqs, serve_model_queue(e->model), NULL);
    if (st) return serve_lz_fail(st, "lazyattn_device_plan_update");
    if (timer && !lazyattn_device_plan_get_info(plan, &after))
        serve_timer_count(timer, SERVE_ENQ_PLAN, after.writes - before.writes);
    return LAZYATTN_STATUS_OK;
}

/* ---- copies (position-aware copy hits) ---- */

static int serve_engine_copies(serve_engine *e, const lazyattn_plan *plan) {
    int n = plan->n_copies;
    if (n == 0) return LAZYATTN_STATUS_OK;
    cl_int err;
    if (n > e->copy_cap) {
        int cap = e->copy_cap ? e->copy_cap : 64;
        while (cap < n) cap *= 2;
        if (e->copy_src) clReleaseMemObject(e->copy_src);
        if (e->copy_dst) clReleaseMemObject(e->copy_dst);
        e->copy_dst = NULL;
        e->copy_cap = 0;
        cl_context cl = serve_model_cl_context(e->model);
        e->copy_src = clCreateBuffer(cl, CL_MEM_READ_ONLY, (size_t)cap * 8, NULL, &err);
        if (err != CL_SUCCESS) {
            e->copy_src = NULL;
            return serve_cl_fail(err, "copy list buffer");
        }
        e->copy_dst = clCreateBuffer(cl, CL_MEM_READ_ONLY, (size_t)cap * 4, NULL, &err);
        if (err != CL_SUCCESS) {
            e->copy_dst = NULL;
            return serve_cl_fail(err, "copy list buffer");
        }
        e->copy_cap = cap;
    }
    cl_command_queue q = serve_model_queue(e->model);
    err = clEnqueueWriteBuffer(q, e->copy_src, CL_TRUE, 0, (size_t)n * 8, plan->copy_src, 0, NULL,
                               NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueWriteBuffer(q, e->copy_dst, CL_TRUE, 0, (size_t)n * 4, plan->copy_dst, 0,
                                   NULL, NULL);
    if (err != CL_SUCCESS) return serve_cl_fail(err, "upload copy list");
    lazyattn_attention *attn = serve_model_attention(e->model);
    serve_timer *timer = serve_model_timer(e->model);
    int n_layers = serve_model_get_config(e->model)->n_layers;
    serve_timer_count(timer, SERVE_ENQ_UPLOAD, 2);
    serve_timer_count(timer, SERVE_ENQ_COPY, n_layers);
    for (int l = 0; l < n_layers; l++) {
        double t0 = serve_now();
        int st = lazyattn_materialise(attn, e->pool, l, n, e->copy_src, e->copy_dst, q,
                                      serve_timer_slot(timer, SERVE_PHASE_COPY));
        if (timer) timer->host_s[SERVE_PHASE_COPY] += serve_now() - t0;
        if (st) return serve_lz_fail(st, "lazyattn_materialise");
    }
    return LAZYATTN_STATUS_OK;
}

/* ---- prompt ---- */

/* The visible table of a chunk: entries [first, first + n) of the plan
 * whose position (minus base) lies below limit, valid lengths cut at limit,
 * positions and deltas rebased by base (document-local for documents). */
static int serve_engine_cut_table(serve_engine *e, const lazyattn_plan *plan, int first, int n,
                                  int32_t base, int32_t limit, int *n_out) {
    int st = serve_engine_table_reserve(e, n);
    if (st) return st;
    int k = 0;
    for (int i = first; i < first + n; i++) {
        int32_t pos = plan->entry_pos[i] - base;
        if (pos >= limit) continue;
        int32_t block, delta, len;
        if ((st = lazyattn_entry_unpack(plan->table[i], &block, &delta, &len)))
            return serve_lz_fail(st, "lazyattn_entry_unpack");
        if (len > limit - pos) len = limit - pos;
        if ((st = lazyattn_entry_pack(block, (int64_t)delta - base, len, &e->table[k])))
            return serve_lz_fail(st, "lazyattn_entry_pack");
        e->entry_pos[k++] = pos;
    }
    *n_out = k;
    return LAZYATTN_STATUS_OK;
}

/* Host time of one engine call, the blocking token reads excluded. */
typedef struct serve_host_clock {
    double t0, wait0, cpu0, wait_cpu0;
} serve_host_clock;

static serve_host_clock serve_host_start(const serve_engine *e) {
    serve_timer *t = serve_model_timer(e->model);
    serve_host_clock c = {serve_now(), t ? t->wait_s : 0, serve_thread_cpu_now(),
                          t ? t->wait_cpu_s : 0};
    return c;
}

static void serve_host_stop(const serve_engine *e, serve_host_clock c, double *sum, double *cpu,
                            int64_t *count, int64_t forwards) {
    serve_timer *t = serve_model_timer(e->model);
    if (!t) return;
    *sum += serve_now() - c.t0 - (t->wait_s - c.wait0);
    *cpu += serve_thread_cpu_now() - c.cpu0 - (t->wait_cpu_s - c.wait_cpu0);
    *count += forwards;
}

static int serve_engine_prefill_timed(serve_engine *e, lazyattn_request *req,
                                      const lazyattn_request_desc *desc, int32_t *first_token,
                                      int64_t *forwards);
static int serve_engine_prefill_segments(serve_engine *e, lazyattn_request *req,
                                         const lazyattn_request_desc *desc,
                                         const lazyattn_plan *pl, int32_t *first_token,
                                         int64_t *forwards);
static int serve_engine_prefill_batched(serve_engine *e, lazyattn_request *req,
                                        const lazyattn_request_desc *desc,
                                        const lazyattn_plan *plan, int32_t *first_token,
                                        int64_t *forwards);

int serve_engine_prefill(serve_engine *e, lazyattn_request *req, const lazyattn_request_desc *desc,
                         int32_t *first_token) {
    if (!e) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_engine_prefill: NULL argument");
    if (e->in_prefill)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_engine_prefill: called from inside a prefill (between())");
    serve_host_clock c = serve_host_start(e);
    int64_t forwards = 0;
    serve_timer *t = serve_model_timer(e->model);
    int64_t enq0 = t ? t->enqueues : 0;
    e->between_s = e->between_cpu_s = 0;
    e->between_enqueues = 0;
    e->in_prefill = 1;
    e->prefilling = req;
    int st = serve_engine_prefill_timed(e, req, desc, first_token, &forwards);
    e->in_prefill = 0;
    e->prefilling = NULL;
    e->stats.prefill_forwards += forwards;
    if (!st) e->stats.prefill_requests++;
    if (t) {
        /* the decode steps run in between are decode work, counted there */
        serve_host_stop(e, c, &t->prefill_host_s, &t->prefill_cpu_s, &t->prefill_forwards, forwards);
        t->prefill_host_s -= e->between_s;
        t->prefill_cpu_s -= e->between_cpu_s;
        t->prefill_enqueues += t->enqueues - enq0 - e->between_enqueues;
        if (!st) t->prefill_requests++;
    }
    return st;
}

static int serve_engine_prefill_timed(serve_engine *e, lazyattn_request *req,
                                      const lazyattn_request_desc *desc, int32_t *first_token,
                                      int64_t *forwards) {
    if (!e || !req || !desc || !first_token)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_engine_prefill: NULL argument");
    if (desc->n_question < 1)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_engine_prefill: the request needs a question token");
    lazyattn_plan plan;
    int st = lazyattn_request_get_plan(req, &plan);
    if (st) return serve_lz_fail(st, "lazyattn_request_get_plan");
    if ((st = serve_engine_copies(e, &plan))) return st;
    if (e->use_batched && e->row_cap >= serve_model_get_config(e->model)->block_size)
        st = serve_engine_prefill_batched(e, req, desc, &plan, first_token, forwards);
    else
        st = serve_engine_prefill_segments(e, req, desc, &plan, first_token, forwards);
    if (st) return st;
    /* Every prefilled token and copy is enqueued before any later use on
     * this in-order queue: the new document blocks may be published. */
    st = lazyattn_request_commit(req);
    return st ? serve_lz_fail(st, "lazyattn_request_commit") : LAZYATTN_STATUS_OK;
}

/* One forward per chunk of each segment, over a table cut per chunk: each
 * document alone at positions 0..L-1 (entries rebased), the question over
 * the whole context. */
static int serve_engine_prefill_segments(serve_engine *e, lazyattn_request *req,
                                         const lazyattn_request_desc *desc,
                                         const lazyattn_plan *pl, int32_t *first_token,
                                         int64_t *forwards) {
    const lazyattn_plan plan = *pl;
    int st;
    const int max_rows = serve_engine_chunk_rows(e);
    int got_token = 0;
    for (int s = 0; s < plan.n_segments; s++) {
        const lazyattn_segment *seg = &plan.segments[s];
        if (seg->n_cached >= seg->n_tokens) continue;
        const int32_t *src = seg->kind == LAZYATTN_SEGMENT_PREFIX     ? desc->prefix
                             : seg->kind == LAZYATTN_SEGMENT_QUESTION ? desc->question
                                                                      : desc->docs[seg->doc_index];
        int is_doc = seg->kind == LAZYATTN_SEGMENT_DOCUMENT;
        int is_question = seg->kind == LAZYATTN_SEGMENT_QUESTION;
        /* A document sees only itself, at positions 0..L-1; the question
         * sees the whole prompt before it at logical positions. */
        int32_t base = is_doc ? seg->logical_start : 0;
        int first = is_question ? 0 : seg->first_entry;
        int n_ent = is_question ? seg->first_entry + seg->n_entries : seg->n_entries;
        for (int a = seg->n_cached; a < seg->n_tokens; a += max_rows) {
            /* a decode step of the running batch first (it uses the row arrays) */
            if ((st = serve_engine_between_forwards(e, *forwards))) return st;
            int b = a + max_rows < seg->n_tokens ? a + max_rows : seg->n_tokens;
            int off = seg->prefill_offset + (a - seg->n_cached);
            int n = b - a;
            for (int i = 0; i < n; i++) {
                e->tokens[i] = src[a + i];
                e->slots[i] = plan.prefill_slots[off + i];
                e->stored[i] = plan.prefill_stored_pos[off + i];
                e->q_pos[i] = plan.prefill_pos[off + i] - base;
            }
            int n_table = 0;
            const lazyattn_device_plan *dplan = NULL;
            /* The question's last chunk sees the whole plan as it is
             * (positions from 0, every entry, nothing cut): the device plan
             * of the request. Other chunks see a cut table. */
            int32_t limit = e->q_pos[n - 1] + 1;
            if (e->use_plans && is_question && first == 0 && n_ent == plan.n_entries &&
                limit == plan.n_positions) {
                lazyattn_plan_seq seq;
                if ((st = lazyattn_plan_seq_from_request(req, &seq)))
                    return serve_lz_fail(st, "device plan of the question");
                if ((st = serve_engine_plan_update(e, e->single, 1, &seq))) return st;
                dplan = e->single;
            } else if ((st = serve_engine_cut_table(e, &plan, first, n_ent, base, limit,
                                                    &n_table))) {
                return st;
            }
            serve_prefill_args pa = {.n_tokens = n,
                                     .tokens = e->tokens,
                                     .q_pos = e->q_pos,
                                     .slots = e->slots,
                                     .stored_pos = e->stored,
                                     .n_entries = n_table,
                                     .table = e->table,
                                     .entry_pos = e->entry_pos,
                                     .want_logits = is_question && b == seg->n_tokens,
                                     .plan = dplan};
            if ((st = serve_model_prefill(e->model, e->pool, &pa, first_token))) return st;
            (*forwards)++;
            got_token |= pa.want_logits;
        }
    }
    if (!got_token)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_engine_prefill: the plan has no question segment");
    return LAZYATTN_STATUS_OK;
}

/* ---- batched prefill ---- */

static int serve_engine_indptr_reserve(serve_engine *e, int n) {
    if (n <= e->indptr_cap) return LAZYATTN_STATUS_OK;
    int cap = e->indptr_cap ? e->indptr_cap : 64;
    while (cap < n) cap *= 2;
    int32_t *q = realloc(e->q_indptr, (size_t)cap * sizeof *q);
    if (!q) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "engine indptr");
    e->q_indptr = q;
    int32_t *t = realloc(e->t_indptr, (size_t)cap * sizeof *t);
    if (!t) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "engine indptr");
    e->t_indptr = t;
    e->indptr_cap = cap;
    return LAZYATTN_STATUS_OK;
}

/* Where a chunk may end inside segment seg, whose rows [a, n_tokens) are
 * still to prefill, with room rows left: the furthest segment-local token
 * t in (a, a + room] at which one of the segment's entries ends (so the
 * entries before t are written whole and those after are not visible);
 * n_tokens when the rest fits; 0 when no entry ends in reach. */
static int serve_chunk_end(const lazyattn_plan *plan, const lazyattn_segment *seg, int a,
                           int room) {
    if (seg->n_tokens - a <= room) return seg->n_tokens;
    int best = 0;
    for (int i = seg->first_entry; i < seg->first_entry + seg->n_entries; i++) {
        int32_t block, delta, len;
        if (lazyattn_entry_unpack(plan->table[i], &block, &delta, &len)) return 0;
        int end = plan->entry_pos[i] + len - seg->logical_start;
        if (end > a && end <= a + room && end > best) best = end;
    }
    return best;
}

/* Entries of the segment whose tokens lie below segment-local token t. */
static int serve_entries_below(const lazyattn_plan *plan, const lazyattn_segment *seg, int t) {
    int k = 0;
    for (int i = seg->first_entry; i < seg->first_entry + seg->n_entries; i++)
        if (plan->entry_pos[i] - seg->logical_start < t) k++;
    return k;
}

/* All of a request's prefill rows through one forward per chunk: see
 * serve_engine_use_batched_prefill. The batch table is the entries before
 * the question [0, n_before), then the whole table [n_before, n_before +
 * n_whole): a prefix or document sequence reads its own entries where the
 * plan has them, the question the second copy. Sequences in a chunk follow
 * prompt order; an empty sequence skips entries between two ranges. */
static int serve_engine_prefill_batched(serve_engine *e, lazyattn_request *req,
                                        const lazyattn_request_desc *desc,
                                        const lazyattn_plan *plan, int32_t *first_token,
                                        int64_t *forwards) {
    const lazyattn_segment *question = NULL;
    for (int s = 0; s < plan->n_segments; s++)
        if (plan->segments[s].kind == LAZYATTN_SEGMENT_QUESTION) question = &plan->segments[s];
    if (!question || question->n_cached >= question->n_tokens || question->n_entries < 1)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_engine_prefill: the plan has no question segment to prefill");
    const int n_before = question->first_entry;
    const int n_whole = question->first_entry + question->n_entries;
    if (n_whole > plan->n_entries)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_engine_prefill: question entries");
    int st;
    /* fixed for the whole prefill: between() may switch it for later ones */
    const int use_plans = e->use_plans;
    if (use_plans) {
        lazyattn_plan_seq seqs[2];
        int ns = 0;
        if (n_before > 0)
            seqs[ns++] = (lazyattn_plan_seq){n_before, plan->table, plan->entry_pos, 0, req};
        seqs[ns++] = (lazyattn_plan_seq){n_whole, plan->table, plan->entry_pos, 0, req};
        if ((st = serve_engine_plan_update(e, e->prompt, ns, seqs))) return st;
    } else {
        if ((st = serve_engine_table_reserve(e, n_before + n_whole))) return st;
        memcpy(e->table, plan->table, (size_t)n_before * sizeof *e->table);
        memcpy(e->entry_pos, plan->entry_pos, (size_t)n_before * sizeof *e->entry_pos);
        memcpy(e->table + n_before, plan->table, (size_t)n_whole * sizeof *e->table);
        memcpy(e->entry_pos + n_before, plan->entry_pos, (size_t)n_whole * sizeof *e->entry_pos);
    }
    /* per chunk at most one sequence and one gap per segment */
    if ((st = serve_engine_indptr_reserve(e, 2 * plan->n_segments + 2))) return st;
    const int max_rows = serve_engine_chunk_rows(e);
    int si = 0, a = plan->n_segments > 0 ? plan->segments[0].n_cached : 0;
    int got_token = 0;
    /* the question is the last segment: its last row ends the request */
    while (si < plan->n_segments && !got_token) {
        /* a decode step of the running batch first (it uses the row arrays) */
        if ((st = serve_engine_between_forwards(e, *forwards))) return st;
        int n = 0, ns = 0, max_q = 0, want_logits = 0;
        e->q_indptr[0] = 0;
        while (si < plan->n_segments && n < max_rows) {
            const lazyattn_segment *seg = &plan->segments[si];
            if (a >= seg->n_tokens) { /* cached whole, or done */
                if (++si < plan->n_segments) a = plan->segments[si].n_cached;
                continue;
            }
            int b = serve_chunk_end(plan, seg, a, max_rows - n);
            if (b <= a) {
                if (n > 0) break; /* the next chunk starts with this segment */
                return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                                  "serve_engine_prefill: no entry of segment %d ends within %d "
                                  "rows of token %d", si, max_rows, a);
            }
            const int32_t *src = seg->kind == LAZYATTN_SEGMENT_PREFIX     ? desc->prefix
                                 : seg->kind == LAZYATTN_SEGMENT_QUESTION ? desc->question
                                                                          : desc->docs[seg->doc_index];
            const int is_question = seg->kind == LAZYATTN_SEGMENT_QUESTION;
            int off = seg->prefill_offset + (a - seg->n_cached);
            for (int i = 0; i < b - a; i++) {
                e->tokens[n + i] = src[a + i];
                e->slots[n + i] = plan->prefill_slots[off + i];
                e->stored[n + i] = plan->prefill_stored_pos[off + i];
                e->q_pos[n + i] = plan->prefill_pos[off + i];
            }
            int below = serve_entries_below(plan, seg, b);
            int r0 = is_question ? n_before : seg->first_entry;
            int r1 = is_question ? n_before + question->first_entry + below : r0 + below;
            if (ns == 0) {
                e->t_indptr[0] = r0;
            } else if (r0 > e->t_indptr[ns]) { /* an empty sequence over the entries between */
                e->q_indptr[ns + 1] = e->q_indptr[ns];
                e->t_indptr[ns + 1] = r0;
                ns++;
            } else if (r0 < e->t_indptr[ns]) {
                return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                                  "serve_engine_prefill: segment %d's entries out of order", si);
            }
            n += b - a;
            e->q_indptr[ns + 1] = n;
            e->t_indptr[ns + 1] = r1;
            ns++;
            if (b - a > max_q) max_q = b - a;
            want_logits = is_question && b == seg->n_tokens;
            a = b;
        }
        if (n == 0) break;
        serve_prefill_args pa = {.n_tokens = n,
                                 .tokens = e->tokens,
                                 .q_pos = e->q_pos,
                                 .slots = e->slots,
                                 .stored_pos = e->stored,
                                 .n_entries = n_before + n_whole,
                                 .table = e->table,
                                 .entry_pos = e->entry_pos,
                                 .want_logits = want_logits,
                                 .plan = use_plans ? e->prompt : NULL,
                                 .n_seqs = ns,
                                 .q_indptr = e->q_indptr,
                                 .table_indptr = e->t_indptr,
                                 .max_queries = max_q};
        if ((st = serve_model_prefill(e->model, e->pool, &pa, first_token))) return st;
        (*forwards)++;
        got_token |= want_logits;
    }
    if (!got_token)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_engine_prefill: the plan has no question segment");
    return LAZYATTN_STATUS_OK;
}

/* ---- decode ---- */

static int serve_engine_decode_timed(serve_engine *e, int n, lazyattn_request *const *reqs,
                                     const int32_t *tokens, int32_t *next);

int serve_engine_decode(serve_engine *e, int n, lazyattn_request *const *reqs,
                        const int32_t *tokens, int32_t *next) {
    if (!e) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_engine_decode: NULL engine");
    serve_host_clock c = serve_host_start(e);
    serve_timer *t = serve_model_timer(e->model);
    double up0 = t ? t->upload_s : 0, upc0 = t ? t->upload_cpu_s : 0;
    int64_t enq0 = t ? t->enqueues : 0;
    int st = serve_engine_decode_timed(e, n, reqs, tokens, next);
    if (!st && e->in_prefill) e->stats.interleaved_decodes++;
    if (t) t->decode_enqueues += t->enqueues - enq0;
    if (t && !st) {
        serve_host_stop(e, c, &t->decode_host_s, &t->decode_cpu_s, &t->decode_steps, 1);
        t->decode_tables_s += t->upload_s - up0;
        t->decode_tables_cpu_s += t->upload_cpu_s - upc0;
    }
    return st;
}

static int serve_engine_decode_timed(serve_engine *e, int n, lazyattn_request *const *reqs,
                                     const int32_t *tokens, int32_t *next) {
    if (!e || !reqs || !tokens || !next || n < 1 || n > e->row_cap)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_engine_decode: bad arguments (%d sequences, at most %d)", n,
                          e ? e->row_cap : 0);
    /* from between(): the running batch only; the request being prefilled
     * has no first token yet (and an append would move its plan's table) */
    for (int i = 0; e->in_prefill && i < n; i++)
        if (reqs[i] == e->prefilling)
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                              "serve_engine_decode: sequence %d is the request being prefilled "
                              "(decode it once serve_engine_prefill has returned)", i);
    int total = 0, max_entries = 0, st;
    serve_timer *timer = serve_model_timer(e->model);
    double t0 = serve_now(), c0 = serve_thread_cpu_now();
    if (e->use_plans) {
        /* the batch's tables stay on the device: each step writes what the
         * appends changed (mostly each sequence's last entry and q_pos) */
        for (int i = 0; i < n; i++) {
            int32_t pos;
            if ((st = lazyattn_request_append(reqs[i], 1, &e->slots[i], &pos)))
                return serve_lz_fail(st, "lazyattn_request_append");
            if ((st = lazyattn_plan_seq_from_request(reqs[i], &e->seqs[i])))
                return serve_lz_fail(st, "lazyattn_plan_seq_from_request");
        }
        if ((st = serve_engine_plan_update(e, e->batch, n, e->seqs))) return st;
        if (timer) {
            timer->decode_tables_s += serve_now() - t0;
            timer->decode_tables_cpu_s += serve_thread_cpu_now() - c0;
        }
        serve_decode_args da = {.n_seqs = n, .tokens = tokens, .slots = e->slots, .plan = e->batch};
        return serve_model_decode(e->model, e->pool, &da, next);
    }
    e->seq_offsets[0] = 0;
    for (int i = 0; i < n; i++) {
        int32_t slot, pos;
        if ((st = lazyattn_request_append(reqs[i], 1, &slot, &pos)))
            return serve_lz_fail(st, "lazyattn_request_append");
        lazyattn_plan plan;
        if ((st = lazyattn_request_get_plan(reqs[i], &plan)))
            return serve_lz_fail(st, "lazyattn_request_get_plan");
        if ((st = serve_table_grow(&e->dec_table, &e->dec_entry_pos, &e->dec_table_cap,
                                   total + plan.n_entries)))
            return st;
        memcpy(e->dec_table + total, plan.table, (size_t)plan.n_entries * sizeof(uint64_t));
        memcpy(e->dec_entry_pos + total, plan.entry_pos, (size_t)plan.n_entries * sizeof(int32_t));
        total += plan.n_entries;
        if (plan.n_entries > max_entries) max_entries = plan.n_entries;
        e->seq_offsets[i + 1] = total;
        e->tokens[i] = tokens[i];
        e->slots[i] = slot;
        e->q_pos[i] = pos;
        e->stored[i] = pos;
    }
    if (timer) {
        timer->decode_tables_s += serve_now() - t0;
        timer->decode_tables_cpu_s += serve_thread_cpu_now() - c0;
    }
    serve_decode_args da = {.n_seqs = n,
                            .tokens = e->tokens,
                            .q_pos = e->q_pos,
                            .slots = e->slots,
                            .stored_pos = e->stored,
                            .seq_offsets = e->seq_offsets,
                            .table = e->dec_table,
                            .entry_pos = e->dec_entry_pos,
                            .max_entries = max_entries};
    return serve_model_decode(e->model, e->pool, &da, next);
}

void serve_engine_use_device_plans(serve_engine *e, int on) {
    if (e) e->use_plans = on ? 1 : 0;
}

void serve_engine_use_batched_prefill(serve_engine *e, int on) {
    if (e) e->use_batched = on ? 1 : 0;
}

int serve_engine_set_prefill_chunk(serve_engine *e, int tokens, serve_between_fn between,
                                   void *user) {
    if (!e)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_engine_set_prefill_chunk: NULL engine");
    int block = serve_model_get_config(e->model)->block_size;
    if (tokens < 0 || (tokens > 0 && tokens < block))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_engine_set_prefill_chunk: %d tokens: 0 (off) or at least one KV "
                          "block (%d tokens)", tokens, block);
    if (e->in_prefill)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_engine_set_prefill_chunk: inside a prefill");
    e->chunk = tokens;
    e->between = tokens > 0 ? between : NULL;
    e->between_user = tokens > 0 ? user : NULL;
    return LAZYATTN_STATUS_OK;
}

void serve_engine_get_stats(const serve_engine *e, serve_engine_stats *out) {
    if (!out) return;
    if (e) *out = e->stats;
    else memset(out, 0, sizeof *out);
}
