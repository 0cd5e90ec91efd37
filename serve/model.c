/* SPDX-License-Identifier: Apache-2.0 */
/* The Llama decoder: weights, scratch, and the forward pass of a prefill
 * chunk or a decode batch. Embedding -> per layer [RMSNorm, Q/K/V
 * projections, RoPE on Q at logical positions, K/V written to pool blocks
 * with K rotated at its stored position, lazyattn prefill/decode, output
 * projection + residual, RMSNorm, SwiGLU MLP + residual] -> final RMSNorm
 * -> LM head -> argmax. Projections are CLBlast SGEMMs (f32 mode) or bf16
 * GEMMs with fused QKV and gate/up (bf16 mode, serve_layers_bf16). */
#include "serve.h"
#include "gemm_bf16.h"
#include "projection.h"
#include "quant.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* f32 mode: projection weights are kept transposed on the device, [in, out],
 * so that CLBlast's indirect SGEMM reads them in place (row-major, no
 * transpose): an [out, in] weight would be copied into a transposed
 * temporary on every call, which for an 8B model is the whole model per
 * forward.
 * bf16 mode: [out, in] bf16 as GGUF stores them (the bf16 GEMMs read W
 * that way), Q/K/V and gate/up fused; wq, wk, wv, w_gate and w_up are then
 * NULL, and wo, w_down hold bf16. */
typedef struct serve_layer {
    cl_mem attn_norm; /* [hidden] */
    cl_mem wq;        /* [hidden, n_heads * head_dim] */
    cl_mem wk;        /* [hidden, n_kv_heads * head_dim] */
    cl_mem wv;        /* [hidden, n_kv_heads * head_dim] */
    cl_mem wo;        /* [n_heads * head_dim, hidden] */
    cl_mem ffn_norm;  /* [hidden] */
    cl_mem w_gate;    /* [hidden, ffn] */
    cl_mem w_up;      /* [hidden, ffn] */
    cl_mem w_down;    /* [ffn, hidden] */
    cl_mem wqkv;      /* bf16 mode: [n_heads * head_dim + 2 * n_kv_heads * head_dim, hidden] */
    cl_mem wgu;       /* bf16 mode: [2 * ffn, hidden]: gate rows, then up rows */
} serve_layer;

/* One host block a non-blocking upload reads from; reused once the write
 * that last read it has completed (its event), grown when too small. With
 * SERVE_STAGING_SLOTS slots a block comes back after that many uploads
 * (several forwards later), so the wait is almost never a real one. */
#define SERVE_STAGING_SLOTS 128
typedef struct serve_staging {
    void *host;    /* pinned's mapping, or malloc'd where pinned memory failed */
    cl_mem pinned; /* a mapped CL_MEM_ALLOC_HOST_PTR buffer, NULL: host is malloc'd */
    size_t cap;
    cl_event done; /* the last write from host, NULL when none is pending */
} serve_staging;
/* A slot's smallest size: a forward's rows and tables fit it, and slots
 * are rarely grown (each growth maps a new buffer). */
#define SERVE_STAGING_MIN ((size_t)64 << 10)

struct serve_model {
    lazyattn_context *ctx;
    cl_context cl;
    cl_command_queue queue;
    serve_model_config cfg;
    lazyattn_attention *attn;
    serve_timer *timer;

    cl_mem tok_embd;    /* [vocab, hidden] */
    cl_mem output_norm; /* [hidden] */
    cl_mem output;      /* [hidden, vocab]; a transposed copy of tok_embd when tied
                         * (bf16 mode: [vocab, hidden] bf16, tok_embd rounded when tied) */
    serve_layer *layers;

    int bf16;              /* projections in bf16 (serve_gemm_mode resolved) */
    serve_gemm_bf16 *gemm; /* bf16 mode */
    /* GGUF: weight matrices of each ggml type converted at load and kept
     * quantized (the token embedding is a matrix, always converted) */
    uint32_t n_converted[64], n_kept[64];
    char weights_note[256]; /* GGUF: how the weights were stored and loaded ("" before) */
    /* weights kept quantized (serve_load_quantized): every projection runs
     * through serve_project, the layer loop serve_layers_proj */
    int quant;
    serve_weight *proj;      /* [n_layers * SERVE_PROJ_COUNT] (serve_proj_slot order) */
    serve_weight head;       /* the LM head */
    cl_mem dq_scratch;       /* the largest kept weight dequantized (prefill) */
    serve_gemv_quant *gq;

    cl_program program;
    /* the mode's kernels (serve_rmsnorm or serve_rmsnorm_bf16, ...); the
     * arguments that never change are set once (serve_bind) */
    cl_kernel k_norm, k_norm_embed; /* the second with the embedding's arguments */
    cl_kernel k_swiglu, k_argmax, k_to_bf16;
    cl_kernel k_fill, k_fill_bf16;
    size_t wg_norm; /* power of two work-group size for the row kernels */

    /* scratch for max_rows tokens */
    cl_mem x;      /* [max_rows, hidden] residual stream */
    cl_mem h;      /* [max_rows, hidden] normed (f32 mode) */
    cl_mem q;      /* [max_rows, n_heads * head_dim] */
    cl_mem k, v;   /* [max_rows, n_kv_heads * head_dim] */
    cl_mem att;    /* [max_rows, n_heads * head_dim] */
    cl_mem g, u;   /* [max_rows, ffn] */
    cl_mem logits; /* [max_rows, vocab] */
    cl_mem gemm_temp; /* CLBlast's temporaries, sized for the largest projection (f32 mode) */
    /* bf16 mode: the GEMMs' X, [rows_pad, width] bf16, rows_pad = max_rows
     * rounded up to SERVE_GEMM_ROW_PAD (the padding zeroed at create) */
    cl_mem h_bf;   /* normed rows, width hidden */
    cl_mem att_bf; /* attention output, width n_heads * head_dim */
    cl_mem act_bf; /* SwiGLU product, width ffn */
    /* the per-row int32 arrays a forward uploads, sub-buffers of `rows` at
     * rows_pitch bytes apart in serve_row_part order, so that one upload
     * (serve_upload_rows) writes them all */
    cl_mem rows;
    size_t rows_pitch;
    cl_mem tokens, slots, q_pos, stored_pos; /* [max_rows] */
    cl_mem seq_offsets;                      /* [max_rows + 1] */
    cl_mem next;                             /* [max_rows] int32, the argmax */
    cl_mem tables;       /* table, then entry_pos at tables_pitch (serve_upload_table) */
    size_t tables_pitch; /* >= table_cap x 8 */
    cl_mem table;        /* [table_cap] uint64 */
    cl_mem entry_pos;    /* [table_cap] int32 */
    int table_cap;
    cl_mem indptrs; /* q_indptr, then table_indptr at indptrs_pitch */
    size_t indptrs_pitch;
    cl_mem q_indptr, table_indptr; /* [indptr_cap] int32: batched prefill */
    int indptr_cap;
    /* host staging of the non-blocking uploads, reused round robin */
    serve_staging staging[SERVE_STAGING_SLOTS];
    int staging_next;
    cl_command_queue map_queue; /* maps and unmaps the staging (never waits on m->queue) */
};

static size_t serve_round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* ---- buffers ---- */

static int serve_alloc(serve_model *m, size_t bytes, cl_mem *out, const char *what) {
    /* past the device's largest buffer: say so (the driver answers a bare
     * CL_INVALID_BUFFER_SIZE); e.g. the logits of an 8B shape at max_rows 65536 */
    cl_ulong max_alloc = 0;
    if (clGetDeviceInfo(lazyattn_context_device(m->ctx), CL_DEVICE_MAX_MEM_ALLOC_SIZE,
                        sizeof max_alloc, &max_alloc, NULL) == CL_SUCCESS &&
        max_alloc > 0 && (cl_ulong)bytes > max_alloc) {
        *out = NULL;
        return serve_fail(LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY,
                          "serve_model_create: %s needs %zu bytes in one buffer, the device's "
                          "largest is %llu (a smaller max_rows or model)",
                          what, bytes, (unsigned long long)max_alloc);
    }
    cl_int err;
    *out = clCreateBuffer(m->cl, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        serve_cl_fail(err, "clCreateBuffer");
        return serve_fail(err == CL_OUT_OF_HOST_MEMORY ? LAZYATTN_STATUS_OUT_OF_HOST_MEMORY
                                                       : LAZYATTN_STATUS_OUT_OF_DEVICE_MEMORY,
                          "serve_model_create: %s (%zu bytes): OpenCL error %d", what, bytes,
                          (int)err);
    }
    return LAZYATTN_STATUS_OK;
}

static void serve_release(cl_mem *b) {
    if (*b) clReleaseMemObject(*b);
    *b = NULL;
}

/* The row arrays in `rows`, in this order: a decode over a device plan
 * uploads the first two, a prefill four, a decode five. */
typedef enum serve_row_part {
    SERVE_ROW_TOKENS = 0,
    SERVE_ROW_SLOTS = 1,
    SERVE_ROW_Q_POS = 2,
    SERVE_ROW_STORED_POS = 3,
    SERVE_ROW_SEQ_OFFSETS = 4,
    SERVE_ROW_PARTS = 5
} serve_row_part;

/* The bytes a sub-buffer's start must be a multiple of (0 when unknown). */
static size_t serve_sub_align(serve_model *m) {
    cl_uint bits = 0;
    if (clGetDeviceInfo(lazyattn_context_device(m->ctx), CL_DEVICE_MEM_BASE_ADDR_ALIGN,
                        sizeof bits, &bits, NULL) != CL_SUCCESS)
        return 0;
    return bits >= 8 ? bits / 8 : 1;
}

/* n_parts buffers in one of n_parts x *pitch bytes (*parent): part p at
 * p x *pitch, size[p] bytes; the pitch is the largest size rounded up to
 * the sub-buffer alignment. */
static int serve_alloc_parts(serve_model *m, int n_parts, const size_t *size, cl_mem *parent,
                             size_t *pitch, cl_mem *const *parts, const char *what) {
    size_t align = serve_sub_align(m), largest = 0;
    if (!align) return serve_fail(LAZYATTN_STATUS_OPENCL, "%s: no CL_DEVICE_MEM_BASE_ADDR_ALIGN", what);
    for (int p = 0; p < n_parts; p++)
        if (size[p] > largest) largest = size[p];
    *pitch = serve_round_up(largest, align);
    int st = serve_alloc(m, *pitch * (size_t)n_parts, parent, what);
    if (st) return st;
    for (int p = 0; p < n_parts; p++) {
        cl_buffer_region r = {(size_t)p * *pitch, size[p]};
        cl_int err;
        *parts[p] = clCreateSubBuffer(*parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r,
                                      &err);
        if (err != CL_SUCCESS) {
            *parts[p] = NULL;
            return serve_cl_fail(err, "clCreateSubBuffer");
        }
    }
    return LAZYATTN_STATUS_OK;
}

/* `rows` and its sub-buffers (serve_row_part order). */
static int serve_rows_create(serve_model *m) {
    size_t R = (size_t)m->cfg.max_rows, size[SERVE_ROW_PARTS];
    for (int p = 0; p < SERVE_ROW_PARTS; p++)
        size[p] = (p == SERVE_ROW_SEQ_OFFSETS ? R + 1 : R) * sizeof(int32_t);
    cl_mem *parts[SERVE_ROW_PARTS] = {&m->tokens, &m->slots, &m->q_pos, &m->stored_pos,
                                      &m->seq_offsets};
    return serve_alloc_parts(m, SERVE_ROW_PARTS, size, &m->rows, &m->rows_pitch, parts,
                             "row arrays");
}

/* Unmaps or frees slot sl's memory (no write reads it any more). */
static void serve_staging_drop(serve_model *m, serve_staging *sl) {
    if (sl->pinned) {
        clEnqueueUnmapMemObject(m->map_queue, sl->pinned, sl->host, 0, NULL, NULL);
        clFinish(m->map_queue);
        clReleaseMemObject(sl->pinned);
    } else {
        free(sl->host);
    }
    sl->host = NULL, sl->pinned = NULL, sl->cap = 0;
}

/* Grows slot sl (no write pending on it) to hold total bytes: pinned
 * memory (a mapped CL_MEM_ALLOC_HOST_PTR buffer, mapped on a queue of its
 * own), so that a non-blocking write is a DMA the host does not wait for;
 * on NVIDIA's OpenCL a write from pageable memory is staged by the driver
 * inside the call, behind whatever the copy engine is doing (the tier's
 * uploads and read-backs). Pageable memory where pinned fails. 0: no
 * memory at all. */
static int serve_staging_grow(serve_model *m, serve_staging *sl, size_t total) {
    size_t cap = sl->cap > SERVE_STAGING_MIN ? sl->cap : SERVE_STAGING_MIN;
    while (cap < total) cap = cap > SIZE_MAX / 2 ? total : 2 * cap;
    serve_staging_drop(m, sl);
    cl_int err = CL_SUCCESS;
    if (!m->map_queue) {
        cl_device_id dev;
        err = clGetCommandQueueInfo(m->queue, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
        if (err == CL_SUCCESS) m->map_queue = clCreateCommandQueue(m->cl, dev, 0, &err);
        if (err != CL_SUCCESS) m->map_queue = NULL;
    }
    if (m->map_queue) {
        cl_mem b = clCreateBuffer(m->cl, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_ONLY, cap, NULL, &err);
        void *p = err == CL_SUCCESS ? clEnqueueMapBuffer(m->map_queue, b, CL_TRUE, CL_MAP_WRITE, 0,
                                                         cap, 0, NULL, NULL, &err)
                                    : NULL;
        if (err == CL_SUCCESS && p) {
            sl->pinned = b, sl->host = p, sl->cap = cap;
            return 1;
        }
        if (b) clReleaseMemObject(b);
    }
    if (!(sl->host = malloc(cap))) return 0;
    sl->cap = cap;
    return 1;
}

/* Uploads n_parts small host arrays (src[p], bytes[p] each) into dst in
 * one rectangular write, part p at byte p x pitch, without waiting for the
 * queue: they are packed into a pinned staging block of the model (round robin,
 * grown on demand, no allocation per call once grown) as n_parts rows of
 * the longest part's length (shorter ones padded with zeros), so the host
 * can enqueue the next forward while the device still runs this one (a
 * blocking write would drain the queue first). dst must hold
 * (n_parts - 1) x pitch plus that length. */
static int serve_upload_parts(serve_model *m, cl_mem dst, size_t pitch, int n_parts,
                              const void *const *src, const size_t *bytes) {
    size_t row = 0;
    for (int p = 0; p < n_parts; p++)
        if (bytes[p] > row) row = bytes[p];
    const size_t total = row * (size_t)n_parts; /* n_parts x a buffer's size: no overflow */
    if (total == 0) return LAZYATTN_STATUS_OK;
    double t0 = serve_now(), c0 = m->timer ? serve_thread_cpu_now() : 0;
    serve_timer_count(m->timer, SERVE_ENQ_UPLOAD, 1);
    serve_staging *sl = &m->staging[m->staging_next];
    m->staging_next = (m->staging_next + 1) % SERVE_STAGING_SLOTS;
    cl_int err = CL_SUCCESS;
    if (sl->done) { /* the write that last read this block: waiting on the device is a wait */
        double w0 = serve_now(), wc0 = m->timer ? serve_thread_cpu_now() : 0;
        err = clWaitForEvents(1, &sl->done);
        clReleaseEvent(sl->done);
        sl->done = NULL;
        if (m->timer) {
            double w = serve_now() - w0, wc = serve_thread_cpu_now() - wc0;
            m->timer->wait_s += w, m->timer->wait_cpu_s += wc;
            t0 += w, c0 += wc; /* not an upload's time */
        }
    }
    if (err == CL_SUCCESS && total > sl->cap && !serve_staging_grow(m, sl, total))
        err = CL_OUT_OF_HOST_MEMORY;
    if (err == CL_SUCCESS) {
        char *h = sl->host;
        for (int p = 0; p < n_parts; p++) {
            memcpy(h + (size_t)p * row, src[p], bytes[p]);
            memset(h + (size_t)p * row + bytes[p], 0, row - bytes[p]);
        }
        const size_t origin[3] = {0, 0, 0}, region[3] = {row, (size_t)n_parts, 1};
        err = clEnqueueWriteBufferRect(m->queue, dst, CL_FALSE, origin, origin, region, pitch, 0,
                                       row, 0, sl->host, 0, NULL, &sl->done);
        if (err != CL_SUCCESS) {
            sl->done = NULL;
        } else { /* the timer's copy of the event (profiling: the upload's device time) */
            cl_event *ev = serve_timer_slot(m->timer, SERVE_PHASE_UPLOAD);
            if (ev && clRetainEvent(sl->done) == CL_SUCCESS) *ev = sl->done;
        }
    }
    if (m->timer) m->timer->upload_s += serve_now() - t0;
    if (m->timer) m->timer->upload_cpu_s += serve_thread_cpu_now() - c0;
    if (err == CL_OUT_OF_HOST_MEMORY)
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "upload: %zu bytes", total);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : serve_cl_fail(err, "clEnqueueWriteBufferRect");
}

/* Parts 0 .. n_parts - 1 of `rows` (serve_row_part order), count[p] int32
 * each (at most max_rows + 1), in one upload. */
static int serve_upload_rows_packed(serve_model *m, int n_parts, const int32_t *const *src,
                                    const int *count) {
    const void *parts[SERVE_ROW_PARTS];
    size_t bytes[SERVE_ROW_PARTS];
    for (int p = 0; p < n_parts; p++) parts[p] = src[p], bytes[p] = (size_t)count[p] * 4;
    return serve_upload_parts(m, m->rows, m->rows_pitch, n_parts, parts, bytes);
}

/* The table's n entries and their positions, in one upload. */
static int serve_upload_table(serve_model *m, int n, const uint64_t *table,
                              const int32_t *entry_pos) {
    const void *parts[2] = {table, entry_pos};
    const size_t bytes[2] = {(size_t)n * sizeof(uint64_t), (size_t)n * sizeof(int32_t)};
    return serve_upload_parts(m, m->tables, m->tables_pitch, 2, parts, bytes);
}

/* Waits for the pending uploads and frees the staging blocks. */
static void serve_staging_release(serve_model *m) {
    for (int i = 0; i < SERVE_STAGING_SLOTS; i++) {
        serve_staging *sl = &m->staging[i];
        if (sl->done) {
            clWaitForEvents(1, &sl->done);
            clReleaseEvent(sl->done);
        }
        serve_staging_drop(m, sl);
        memset(sl, 0, sizeof *sl);
    }
    if (m->map_queue) clReleaseCommandQueue(m->map_queue);
    m->map_queue = NULL;
}

/* Grows the table buffers to hold n entries. */
static int serve_table_reserve(serve_model *m, int n) {
    if (n <= m->table_cap) return LAZYATTN_STATUS_OK;
    int cap = m->table_cap ? m->table_cap : 256;
    while (cap < n) cap *= 2;
    serve_release(&m->table);
    serve_release(&m->entry_pos);
    serve_release(&m->tables);
    m->table_cap = 0;
    /* entry_pos at the pitch, with room for a row of the table's length
     * (serve_upload_table writes both parts as rows of n x 8 bytes) */
    const size_t size[2] = {(size_t)cap * sizeof(uint64_t), (size_t)cap * sizeof(int32_t)};
    cl_mem *parts[2] = {&m->table, &m->entry_pos};
    int st = serve_alloc_parts(m, 2, size, &m->tables, &m->tables_pitch, parts,
                               "block table and entry positions");
    if (st) return st;
    m->table_cap = cap;
    return LAZYATTN_STATUS_OK;
}

/* Grows the batched prefill's indptr buffers to hold n values. */
static int serve_indptr_reserve(serve_model *m, int n) {
    if (n <= m->indptr_cap) return LAZYATTN_STATUS_OK;
    int cap = m->indptr_cap ? m->indptr_cap : 64;
    while (cap < n) cap *= 2;
    serve_release(&m->q_indptr);
    serve_release(&m->table_indptr);
    serve_release(&m->indptrs);
    m->indptr_cap = 0;
    const size_t size[2] = {(size_t)cap * sizeof(int32_t), (size_t)cap * sizeof(int32_t)};
    cl_mem *parts[2] = {&m->q_indptr, &m->table_indptr};
    int st = serve_alloc_parts(m, 2, size, &m->indptrs, &m->indptrs_pitch, parts, "indptr");
    if (st) return st;
    m->indptr_cap = cap;
    return LAZYATTN_STATUS_OK;
}

/* ---- kernels ---- */

static int serve_build(serve_model *m) {
    const char *text = serve_source_text("model_kernels");
    if (!text) return serve_fail(LAZYATTN_STATUS_NOT_FOUND, "model_kernels source not embedded");
    /* through the library: its program cache, when the context has one */
    int st = lazyattn_context_build_program(m->ctx, text, "-cl-std=CL1.2", 0, &m->program);
    if (st) return serve_lz_fail(st, "serve/model_kernels.cl");
    cl_int err;
    cl_device_id dev = lazyattn_context_device(m->ctx);
    struct {
        cl_kernel *k;
        const char *name;
    } ks[] = {{&m->k_norm, m->bf16 ? "serve_rmsnorm_bf16" : "serve_rmsnorm"},
              {&m->k_norm_embed, m->bf16 ? "serve_rmsnorm_bf16" : "serve_rmsnorm"},
              {&m->k_swiglu, m->bf16 ? "serve_swiglu_bf16" : "serve_swiglu"},
              {&m->k_argmax, "serve_argmax"},
              {&m->k_to_bf16, "serve_to_bf16"},
              {&m->k_fill, "serve_fill_uniform"},
              {&m->k_fill_bf16, "serve_fill_uniform_bf16"}};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        *ks[i].k = clCreateKernel(m->program, ks[i].name, &err);
        if (err != CL_SUCCESS) return serve_cl_fail(err, ks[i].name);
    }
    size_t max_wg = 0;
    clGetKernelWorkGroupInfo(m->k_norm, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof max_wg, &max_wg,
                             NULL);
    size_t wg2 = 0;
    clGetKernelWorkGroupInfo(m->k_argmax, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg2, &wg2, NULL);
    if (wg2 < max_wg) max_wg = wg2;
    m->wg_norm = 1;
    while (m->wg_norm * 2 <= max_wg && m->wg_norm < 256) m->wg_norm *= 2;
    return LAZYATTN_STATUS_OK;
}

/* Host time spent inside enqueue calls, per phase (where launch overhead goes). */
static void serve_host_add(serve_model *m, serve_phase p, double t0) {
    if (m->timer) m->timer->host_s[p] += serve_now() - t0;
    serve_timer_count(m->timer, (serve_enqueue_kind)p, 1);
}

static int serve_run(serve_model *m, cl_kernel k, cl_uint dims, const size_t *global,
                     const size_t *local, const char *what) {
    double t0 = serve_now();
    cl_int err = clEnqueueNDRangeKernel(m->queue, k, dims, NULL, global, local, 0, NULL,
                                        serve_timer_slot(m->timer, SERVE_PHASE_ELEMENTWISE));
    serve_host_add(m, SERVE_PHASE_ELEMENTWISE, t0);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : serve_cl_fail(err, what);
}

/* Sets the arguments of the forward's kernels that never change (the
 * scratch buffers, sizes, local memory), once the buffers exist: a launch
 * then sets only what varies. */
static int serve_bind(serve_model *m) {
    cl_int err = CL_SUCCESS, hidden = m->cfg.hidden, vocab = m->cfg.vocab;
    cl_float eps = m->cfg.rms_eps;
    cl_mem norm_out = m->bf16 ? m->h_bf : m->h, none = NULL;
    cl_kernel norms[2] = {m->k_norm, m->k_norm_embed};
    for (int i = 0; i < 2; i++) {
        cl_kernel k = norms[i];
        err |= clSetKernelArg(k, 0, sizeof(cl_mem), &m->x);
        err |= clSetKernelArg(k, 2, sizeof(cl_mem), &norm_out);
        err |= clSetKernelArg(k, 3, sizeof(cl_int), &hidden);
        err |= clSetKernelArg(k, 4, sizeof(cl_float), &eps);
        err |= clSetKernelArg(k, 6, m->wg_norm * sizeof(float), NULL);
        err |= clSetKernelArg(k, 7, sizeof(cl_mem), i ? &m->tokens : &none);
        err |= clSetKernelArg(k, 8, sizeof(cl_mem), i ? &m->tok_embd : &none);
    }
    cl_uint a = 0;
    err |= clSetKernelArg(m->k_swiglu, a++, sizeof(cl_mem), &m->g);
    err |= clSetKernelArg(m->k_swiglu, a++, sizeof(cl_mem), &m->u);
    if (m->bf16) {
        err |= clSetKernelArg(m->k_swiglu, a++, sizeof(cl_mem), &m->act_bf);
        err |= clSetKernelArg(m->k_to_bf16, 0, sizeof(cl_mem), &m->att);
        err |= clSetKernelArg(m->k_to_bf16, 1, sizeof(cl_mem), &m->att_bf);
    }
    err |= clSetKernelArg(m->k_argmax, 0, sizeof(cl_mem), &m->logits);
    err |= clSetKernelArg(m->k_argmax, 1, sizeof(cl_mem), &m->next);
    err |= clSetKernelArg(m->k_argmax, 2, sizeof(cl_int), &vocab);
    err |= clSetKernelArg(m->k_argmax, 3, m->wg_norm * sizeof(float), NULL);
    err |= clSetKernelArg(m->k_argmax, 4, m->wg_norm * sizeof(int), NULL);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK
                             : serve_fail(LAZYATTN_STATUS_OPENCL,
                                          "serve_model_create: clSetKernelArg failed");
}

/* The normed rows of x rows row0 .. row0 + n, times w: f32 mode into
 * h[row0 .. row0 + n), bf16 mode as bf16 into h_bf[0 .. n) (a GEMM's X).
 * embed (the first layer's norm, row0 0): x[0 .. n) is first set to
 * tok_embd[tokens] in the same launch. */
static int serve_rmsnorm(serve_model *m, cl_mem w, int row0, int n, int embed) {
    cl_kernel k = embed ? m->k_norm_embed : m->k_norm;
    cl_int r0 = row0;
    clSetKernelArg(k, 1, sizeof(cl_mem), &w);
    clSetKernelArg(k, 5, sizeof(cl_int), &r0);
    size_t global = (size_t)n * m->wg_norm, local = m->wg_norm;
    return serve_run(m, k, 1, &global, &local, m->bf16 ? "serve_rmsnorm_bf16" : "serve_rmsnorm");
}

/* silu(g) * u over n rows: f32 mode into g (in place), bf16 mode as bf16
 * into act_bf. */
static int serve_swiglu(serve_model *m, int n) {
    cl_kernel k = m->k_swiglu;
    cl_ulong count = (cl_ulong)n * (cl_ulong)m->cfg.ffn;
    clSetKernelArg(k, m->bf16 ? 3 : 2, sizeof(cl_ulong), &count);
    size_t global = serve_round_up((size_t)count, 64), local = 64;
    return serve_run(m, k, 1, &global, &local, m->bf16 ? "serve_swiglu_bf16" : "serve_swiglu");
}

/* next[0 .. n) = argmax of logits rows */
static int serve_argmax(serve_model *m, int n) {
    size_t global = (size_t)n * m->wg_norm, local = m->wg_norm;
    return serve_run(m, m->k_argmax, 1, &global, &local, "serve_argmax");
}

static int serve_fill(serve_model *m, cl_mem w, uint64_t n, uint64_t seed, float scale,
                      float offset) {
    cl_kernel k = m->k_fill;
    cl_ulong cn = n, cs = seed;
    clSetKernelArg(k, 0, sizeof(cl_mem), &w);
    clSetKernelArg(k, 1, sizeof(cl_ulong), &cn);
    clSetKernelArg(k, 2, sizeof(cl_ulong), &cs);
    clSetKernelArg(k, 3, sizeof(cl_float), &scale);
    clSetKernelArg(k, 4, sizeof(cl_float), &offset);
    size_t global = (size_t)(n < 65536 * 64 ? serve_round_up(n, 64) : 65536 * 64), local = 64;
    cl_int err = clEnqueueNDRangeKernel(m->queue, k, 1, NULL, &global, &local, 0, NULL, NULL);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : serve_cl_fail(err, "serve_fill_uniform");
}

/* ---- bf16 mode: elementwise kernels with bf16 results ---- */

/* att_bf[0 .. count) = bf16(att) */
static int serve_to_bf16(serve_model *m, size_t count) {
    cl_kernel k = m->k_to_bf16;
    cl_ulong n = count;
    clSetKernelArg(k, 2, sizeof(cl_ulong), &n);
    size_t global = serve_round_up(count, 64), local = 64;
    return serve_run(m, k, 1, &global, &local, "serve_to_bf16");
}

/* w[dst_off ..] = the [n_out, n_in] bf16 weight of the f32 fill of seed
 * (serve_fill_uniform_bf16) */
static int serve_fill_bf16(serve_model *m, cl_mem w, uint64_t dst_off, uint64_t n_out,
                           uint64_t n_in, uint64_t seed, float scale, float offset) {
    cl_kernel k = m->k_fill_bf16;
    cl_ulong co = dst_off, cn = n_out, ci = n_in, cs = seed;
    uint64_t n = n_out * n_in;
    clSetKernelArg(k, 0, sizeof(cl_mem), &w);
    clSetKernelArg(k, 1, sizeof(cl_ulong), &co);
    clSetKernelArg(k, 2, sizeof(cl_ulong), &cn);
    clSetKernelArg(k, 3, sizeof(cl_ulong), &ci);
    clSetKernelArg(k, 4, sizeof(cl_ulong), &cs);
    clSetKernelArg(k, 5, sizeof(cl_float), &scale);
    clSetKernelArg(k, 6, sizeof(cl_float), &offset);
    size_t global = (size_t)(n < 65536 * 64 ? serve_round_up(n, 64) : 65536 * 64), local = 64;
    cl_int err = clEnqueueNDRangeKernel(m->queue, k, 1, NULL, &global, &local, 0, NULL, NULL);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : serve_cl_fail(err, "serve_fill_uniform_bf16");
}

/* ---- create / destroy ---- */

/* The projections of a load that kept weights quantized, and their scratch. */
enum { SERVE_PROJ_COUNT = 7 };
static void serve_proj_release(serve_model *m) {
    for (int i = 0; m->proj && i < m->cfg.n_layers * SERVE_PROJ_COUNT; i++)
        serve_release(&m->proj[i].buf);
    free(m->proj);
    m->proj = NULL;
    serve_release(&m->head.buf);
    serve_release(&m->dq_scratch);
    m->quant = 0;
}

void serve_model_destroy(serve_model *m) {
    if (!m) return;
    serve_staging_release(m);
    if (m->layers) {
        for (int l = 0; l < m->cfg.n_layers; l++) {
            serve_layer *L = &m->layers[l];
            cl_mem *ws[] = {&L->attn_norm, &L->wq,     &L->wk,   &L->wv,   &L->wo,  &L->ffn_norm,
                            &L->w_gate,    &L->w_up,   &L->w_down, &L->wqkv, &L->wgu};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) serve_release(ws[i]);
        }
        free(m->layers);
    }
    cl_mem *bufs[] = {&m->tok_embd, &m->output_norm, &m->output, &m->x, &m->h, &m->q, &m->k,
                      &m->v, &m->att, &m->g, &m->u, &m->logits, &m->tokens, &m->q_pos,
                      &m->slots, &m->stored_pos, &m->next, &m->seq_offsets, &m->rows, &m->table, &m->tables,
                      &m->entry_pos, &m->gemm_temp, &m->q_indptr, &m->table_indptr, &m->indptrs,
                      &m->h_bf, &m->att_bf, &m->act_bf};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) serve_release(bufs[i]);
    cl_kernel ks[] = {m->k_norm,    m->k_norm_embed, m->k_swiglu,
                      m->k_argmax,  m->k_to_bf16,    m->k_fill,   m->k_fill_bf16};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        if (ks[i]) clReleaseKernel(ks[i]);
    if (m->program) clReleaseProgram(m->program);
    serve_proj_release(m);
    serve_gemv_quant_destroy(m->gq);
    serve_gemm_bf16_destroy(m->gemm);
    lazyattn_attention_destroy(m->attn);
    free(m);
}

int serve_model_create(lazyattn_context *ctx, const serve_model_config *cfg, serve_model **out) {
    if (!out) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_model_create: out is NULL");
    *out = NULL;
    if (!ctx) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_model_create: ctx is NULL");
    int st = serve_model_config_check(cfg);
    if (st) return st;
    serve_model *m = calloc(1, sizeof *m);
    if (!m) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_model_create");
    m->ctx = ctx;
    m->cl = lazyattn_context_cl_context(ctx);
    m->queue = lazyattn_context_queue(ctx);
    m->cfg = *cfg;
    const serve_model_config *c = &m->cfg;
    size_t f = sizeof(float), h = (size_t)c->hidden, qd = (size_t)c->n_heads * (size_t)c->head_dim,
           kvd = (size_t)c->n_kv_heads * (size_t)c->head_dim, ff = (size_t)c->ffn, V = (size_t)c->vocab,
           R = (size_t)c->max_rows;

    lazyattn_attention_config acfg;
    serve_model_attention_config(c, &acfg);
    st = lazyattn_attention_create(ctx, &acfg, &m->attn);
    if (st) {
        serve_lz_fail(st, "lazyattn_attention_create");
        goto fail;
    }
    m->bf16 = c->gemm == SERVE_GEMM_BF16 ||
              (c->gemm == SERVE_GEMM_AUTO && lazyattn_context_fast_path(ctx));
    if ((st = serve_build(m))) goto fail;
    if (m->bf16 && (st = serve_gemm_bf16_create(ctx, &m->gemm))) goto fail;

    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) {
        st = serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_model_create: layers");
        goto fail;
    }
    if ((st = serve_alloc(m, V * h * f, &m->tok_embd, "token_embd"))) goto fail;
    if ((st = serve_alloc(m, h * f, &m->output_norm, "output_norm"))) goto fail;
    if ((st = serve_alloc(m, V * h * (m->bf16 ? 2 : f), &m->output, "output"))) goto fail;
    for (int l = 0; m->bf16 && l < c->n_layers; l++) {
        serve_layer *L = &m->layers[l];
        if ((st = serve_alloc(m, h * f, &L->attn_norm, "attn_norm")) ||
            (st = serve_alloc(m, (qd + 2 * kvd) * h * 2, &L->wqkv, "attn_qkv (bf16)")) ||
            (st = serve_alloc(m, h * qd * 2, &L->wo, "attn_output (bf16)")) ||
            (st = serve_alloc(m, h * f, &L->ffn_norm, "ffn_norm")) ||
            (st = serve_alloc(m, 2 * ff * h * 2, &L->wgu, "ffn_gate_up (bf16)")) ||
            (st = serve_alloc(m, h * ff * 2, &L->w_down, "ffn_down (bf16)")))
            goto fail;
    }
    for (int l = 0; !m->bf16 && l < c->n_layers; l++) {
        serve_layer *L = &m->layers[l];
        if ((st = serve_alloc(m, h * f, &L->attn_norm, "attn_norm")) ||
            (st = serve_alloc(m, qd * h * f, &L->wq, "attn_q")) ||
            (st = serve_alloc(m, kvd * h * f, &L->wk, "attn_k")) ||
            (st = serve_alloc(m, kvd * h * f, &L->wv, "attn_v")) ||
            (st = serve_alloc(m, h * qd * f, &L->wo, "attn_output")) ||
            (st = serve_alloc(m, h * f, &L->ffn_norm, "ffn_norm")) ||
            (st = serve_alloc(m, ff * h * f, &L->w_gate, "ffn_gate")) ||
            (st = serve_alloc(m, ff * h * f, &L->w_up, "ffn_up")) ||
            (st = serve_alloc(m, h * ff * f, &L->w_down, "ffn_down")))
            goto fail;
    }
    if ((st = serve_alloc(m, R * h * f, &m->x, "x")) ||
        (!m->bf16 && (st = serve_alloc(m, R * h * f, &m->h, "h"))) ||
        (st = serve_alloc(m, R * qd * f, &m->q, "q")) ||
        (st = serve_alloc(m, R * kvd * f, &m->k, "k")) ||
        (st = serve_alloc(m, R * kvd * f, &m->v, "v")) ||
        (st = serve_alloc(m, R * qd * f, &m->att, "att")) ||
        (st = serve_alloc(m, R * ff * f, &m->g, "gate")) ||
        (st = serve_alloc(m, R * ff * f, &m->u, "up")) ||
        (st = serve_alloc(m, R * V * f, &m->logits, "logits")) ||
        (st = serve_rows_create(m)) || (st = serve_alloc(m, R * 4, &m->next, "next")) ||
        (st = serve_table_reserve(m, 256)) || (st = serve_indptr_reserve(m, 64)))
        goto fail;
    if (m->bf16) {
        /* the GEMMs' X: max_rows rounded up to the row padding the bf16
         * kernels may read, zeroed once (the padding is read, never used) */
        size_t Rp = serve_round_up(R, SERVE_GEMM_ROW_PAD);
        cl_mem *xs[3] = {&m->h_bf, &m->att_bf, &m->act_bf};
        size_t widths[3] = {h, qd, ff};
        const char *names[3] = {"h (bf16)", "att (bf16)", "act (bf16)"};
        for (int i = 0; i < 3; i++) {
            if ((st = serve_alloc(m, Rp * widths[i] * 2, xs[i], names[i]))) goto fail;
            cl_ushort zero = 0;
            cl_int err = clEnqueueFillBuffer(m->queue, *xs[i], &zero, sizeof zero, 0,
                                             Rp * widths[i] * 2, 0, NULL, NULL);
            if (err != CL_SUCCESS) {
                st = serve_cl_fail(err, "clEnqueueFillBuffer");
                goto fail;
            }
        }
        if ((st = serve_bind(m))) goto fail;
        *out = m;
        return LAZYATTN_STATUS_OK;
    }
    /* CLBlast temporaries: the largest over every projection and the LM
     * head, for any rows <= max_rows at any offset. A call of fewer rows
     * pads them up to CLBlast's tile (max_rows may need no padding at all),
     * and a non-zero offset always takes a padded copy, so the size asked
     * at max_rows with non-zero offsets bounds every call. */
    {
        int shapes[6][2] = {{(int)qd, (int)h}, {(int)kvd, (int)h}, {(int)h, (int)qd},
                            {(int)ff, (int)h}, {(int)h, (int)ff}, {(int)V, (int)h}};
        size_t temp = 0, sz;
        for (int i = 0; i < 6; i++) {
            if ((st = serve_gemm_temp_size(m->queue, (int)R, shapes[i][0], shapes[i][1], 1, 1, &sz)))
                goto fail;
            if (sz > temp) temp = sz;
        }
        /* CLBlast documents the size in bytes; some versions count elements:
         * room for either */
        if ((st = serve_alloc(m, temp * sizeof(float), &m->gemm_temp, "CLBlast temporaries")))
            goto fail;
    }
    if ((st = serve_bind(m))) goto fail;
    *out = m;
    return LAZYATTN_STATUS_OK;
fail:
    serve_model_destroy(m);
    return st;
}

const serve_model_config *serve_model_get_config(const serve_model *m) { return m ? &m->cfg : NULL; }
lazyattn_attention *serve_model_attention(serve_model *m) { return m ? m->attn : NULL; }
void serve_model_set_timer(serve_model *m, serve_timer *timer) {
    if (m) m->timer = timer;
}
serve_timer *serve_model_timer(const serve_model *m) { return m ? m->timer : NULL; }
cl_context serve_model_cl_context(const serve_model *m) { return m ? m->cl : NULL; }
cl_command_queue serve_model_queue(const serve_model *m) { return m ? m->queue : NULL; }
lazyattn_context *serve_model_context(const serve_model *m) { return m ? m->ctx : NULL; }
int serve_model_uses_bf16(const serve_model *m) { return m ? m->bf16 : 0; }
serve_gemm_bf16 *serve_model_gemm_bf16(serve_model *m) { return m ? m->gemm : NULL; }

static uint64_t serve_bytes_of(cl_mem b) {
    size_t n = 0;
    if (b && clGetMemObjectInfo(b, CL_MEM_SIZE, sizeof n, &n, NULL) != CL_SUCCESS) n = 0;
    return n;
}

void serve_model_device_bytes(const serve_model *m, uint64_t *weights, uint64_t *scratch) {
    uint64_t w = 0, other = 0;
    if (m) {
        w += serve_bytes_of(m->tok_embd) + serve_bytes_of(m->output_norm) +
             serve_bytes_of(m->output);
        for (int l = 0; m->layers && l < m->cfg.n_layers; l++) {
            const serve_layer *L = &m->layers[l];
            cl_mem ws[] = {L->attn_norm, L->wq,   L->wk,     L->wv,   L->wo,  L->ffn_norm,
                           L->w_gate,    L->w_up, L->w_down, L->wqkv, L->wgu};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) w += serve_bytes_of(ws[i]);
        }
        for (int i = 0; m->proj && i < m->cfg.n_layers * SERVE_PROJ_COUNT; i++)
            w += serve_bytes_of(m->proj[i].buf);
        w += serve_bytes_of(m->head.buf);
        other += serve_bytes_of(m->dq_scratch);
        cl_mem bufs[] = {m->x,      m->h,      m->q,         m->k,       m->v,
                         m->att,    m->g,      m->u,         m->logits,  m->rows,
                         m->next,   m->tables, m->gemm_temp, m->indptrs, m->h_bf,
                         m->att_bf, m->act_bf};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) other += serve_bytes_of(bufs[i]);
    }
    if (weights) *weights = w;
    if (scratch) *scratch = other;
}

/* ---- weights ---- */

int serve_model_init_random(serve_model *m, uint64_t seed) {
    if (!m) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_model_init_random: NULL");
    if (m->proj) /* a GGUF load kept weights quantized: the dense buffers are gone */
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_model_init_random: the model holds a GGUF load's quantized "
                          "weights: use a new model");
    const serve_model_config *c = &m->cfg;
    uint64_t h = (uint64_t)c->hidden, qd = (uint64_t)c->n_heads * (uint64_t)c->head_dim,
             kvd = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim, ff = (uint64_t)c->ffn;
    /* uniform(-a, a) has variance a^2 / 3: a = sqrt(3 / fan_in) gives 1 / fan_in */
    float a_h = (float)sqrt(3.0 / (double)h), a_q = (float)sqrt(3.0 / (double)qd),
          a_f = (float)sqrt(3.0 / (double)ff), a_1 = 1.7320508f;
    uint64_t tensor = 0;
    int st;
#define SERVE_FILL(buf, n, scale, offset)                                                   \
    do {                                                                                    \
        tensor++;                                                                           \
        st = serve_fill(m, buf, n, seed * 0x100000001B3ull + tensor * 0xD1B54A32D192ED03ull, \
                        scale, offset);                                                     \
        if (st) return st;                                                                  \
    } while (0)
/* bf16 mode: the same tensor's elements, [n_out, n_in] from dst_off */
#define SERVE_FILL_BF16(buf, dst_off, n_out, n_in, scale, offset)                           \
    do {                                                                                    \
        tensor++;                                                                           \
        st = serve_fill_bf16(m, buf, dst_off, n_out, n_in,                                  \
                             seed * 0x100000001B3ull + tensor * 0xD1B54A32D192ED03ull,      \
                             scale, offset);                                                \
        if (st) return st;                                                                  \
    } while (0)
    SERVE_FILL(m->tok_embd, (uint64_t)c->vocab * h, a_1, 0.0f);
    SERVE_FILL(m->output_norm, h, 0.1f, 1.0f);
    if (m->bf16) { /* tensor for tensor as below, so the seeds match */
        SERVE_FILL_BF16(m->output, 0, (uint64_t)c->vocab, h, a_h, 0.0f);
        for (int l = 0; l < c->n_layers; l++) {
            serve_layer *L = &m->layers[l];
            SERVE_FILL(L->attn_norm, h, 0.1f, 1.0f);
            SERVE_FILL_BF16(L->wqkv, 0, qd, h, a_h, 0.0f);
            SERVE_FILL_BF16(L->wqkv, qd * h, kvd, h, a_h, 0.0f);
            SERVE_FILL_BF16(L->wqkv, (qd + kvd) * h, kvd, h, a_h, 0.0f);
            SERVE_FILL_BF16(L->wo, 0, h, qd, a_q, 0.0f);
            SERVE_FILL(L->ffn_norm, h, 0.1f, 1.0f);
            SERVE_FILL_BF16(L->wgu, 0, ff, h, a_h, 0.0f);
            SERVE_FILL_BF16(L->wgu, ff * h, ff, h, a_h, 0.0f);
            SERVE_FILL_BF16(L->w_down, 0, h, ff, a_f, 0.0f);
        }
        cl_int err = clFinish(m->queue);
        return err == CL_SUCCESS ? LAZYATTN_STATUS_OK
                                 : serve_cl_fail(err, "serve_model_init_random");
    }
    /* tied: a random LM head stands in for the transposed embedding */
    SERVE_FILL(m->output, (uint64_t)c->vocab * h, a_h, 0.0f);
    for (int l = 0; l < c->n_layers; l++) {
        serve_layer *L = &m->layers[l];
        SERVE_FILL(L->attn_norm, h, 0.1f, 1.0f);
        SERVE_FILL(L->wq, qd * h, a_h, 0.0f);
        SERVE_FILL(L->wk, kvd * h, a_h, 0.0f);
        SERVE_FILL(L->wv, kvd * h, a_h, 0.0f);
        SERVE_FILL(L->wo, h * qd, a_q, 0.0f);
        SERVE_FILL(L->ffn_norm, h, 0.1f, 1.0f);
        SERVE_FILL(L->w_gate, ff * h, a_h, 0.0f);
        SERVE_FILL(L->w_up, ff * h, a_h, 0.0f);
        SERVE_FILL(L->w_down, h * ff, a_f, 0.0f);
    }
#undef SERVE_FILL
#undef SERVE_FILL_BF16
    cl_int err = clFinish(m->queue);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : serve_cl_fail(err, "serve_model_init_random");
}

/* How serve_load_tensor stores a tensor. */
enum { SERVE_LOAD_F32 = 0, SERVE_LOAD_F32_T = 1, SERVE_LOAD_BF16 = 2 };

/* Reads one GGUF tensor, checks its shape (ggml order: dims[0] = d0 is the
 * innermost, so the tensor is [d1, d0] row-major) and uploads it as f32
 * (SERVE_LOAD_F32), transposed to [d0, d1] (SERVE_LOAD_F32_T), or rounded
 * to bf16 as it is, [d1, d0], from element dst_off of dst (SERVE_LOAD_BF16:
 * one part of a fused weight). host, tmp: [d0 * d1]. */
static int serve_load_tensor(serve_model *m, const serve_gguf *g, const char *name, uint64_t d0,
                             uint64_t d1, int how, cl_mem dst, uint64_t dst_off, float *host,
                             float *tmp) {
    int transpose = how == SERVE_LOAD_F32_T;
    const serve_gguf_tensor *t;
    int st = serve_gguf_find_tensor(g, name, &t);
    if (st) return serve_fail(st, "GGUF: tensor %s missing", name);
    uint64_t t1 = t->n_dims > 1 ? t->dims[1] : 1;
    if (t->dims[0] != d0 || t1 != d1 || t->n_elements != d0 * d1)
        return serve_fail(LAZYATTN_STATUS_FORMAT,
                          "GGUF: tensor %s has shape [%llu, %llu], the model needs [%llu, %llu]",
                          name, (unsigned long long)t->dims[0], (unsigned long long)t1,
                          (unsigned long long)d0, (unsigned long long)d1);
    if ((st = serve_gguf_read_f32(g, t, host, d0 * d1))) return st;
    if (d1 > 1 && t->type < 64) m->n_converted[t->type]++;
    /* a NaN or infinite weight makes every logit NaN: refuse the file */
    for (uint64_t i = 0; i < d0 * d1; i++)
        if (!isfinite(host[i]))
            return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: tensor %s element %llu is %g", name,
                              (unsigned long long)i, (double)host[i]);
    if (how == SERVE_LOAD_BF16) {
        /* round to nearest even on the host, into tmp (as many bytes as d0 * d1 uint16) */
        uint16_t *bits = (uint16_t *)tmp;
        for (uint64_t i = 0; i < d0 * d1; i++) {
            bits[i] = serve_bf16_of(host[i]);
            if ((bits[i] & 0x7F80u) == 0x7F80u) /* finite in f32, past bf16's range */
                return serve_fail(LAZYATTN_STATUS_FORMAT,
                                  "GGUF: tensor %s element %llu = %g overflows bf16", name,
                                  (unsigned long long)i, (double)host[i]);
        }
        cl_int err = clEnqueueWriteBuffer(m->queue, dst, CL_TRUE, (size_t)dst_off * 2,
                                          (size_t)(d0 * d1) * 2, bits, 0, NULL, NULL);
        return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : serve_cl_fail(err, "upload weights");
    }
    const float *src = host;
    if (transpose && d1 > 1) {
        /* [d1, d0] -> [d0, d1] in tiles, for the cache's sake */
        for (uint64_t i0 = 0; i0 < d1; i0 += 64)
            for (uint64_t j0 = 0; j0 < d0; j0 += 64)
                for (uint64_t i = i0; i < d1 && i < i0 + 64; i++)
                    for (uint64_t j = j0; j < d0 && j < j0 + 64; j++) tmp[j * d1 + i] = host[i * d0 + j];
        src = tmp;
    }
    /* blocking: the host buffers are reused for the next tensor */
    cl_int err = clEnqueueWriteBuffer(m->queue, dst, CL_TRUE, 0, (size_t)(d0 * d1) * sizeof(float),
                                      src, 0, NULL, NULL);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : serve_cl_fail(err, "upload weights");
}

/* The types with a non-zero count, in ggml order, into out: "Q4_K/Q6_K",
 * or with counts "Q4_K ×14, Q6_K ×3". *quantized |= one of them is. */
static void serve_types_list(const uint32_t *counts, int with_counts, char *out, size_t cap,
                             int *quantized) {
    size_t len = 0;
    out[0] = 0;
    for (uint32_t t = 0; t < 64; t++) {
        if (!counts[t]) continue;
        *quantized |= t != SERVE_GGML_F32 && t != SERVE_GGML_F16 && t != SERVE_GGML_BF16;
        int k = with_counts ? snprintf(out + len, cap - len, "%s%s ×%u", len ? ", " : "",
                                       serve_ggml_type_name(t), (unsigned)counts[t])
                            : snprintf(out + len, cap - len, "%s%s", len ? "/" : "",
                                       serve_ggml_type_name(t));
        if (k < 0 || (size_t)k >= cap - len) break;
        len += (size_t)k;
    }
}

/* m->weights_note from the counts: the file's matrix types and what the
 * GEMMs read, e.g. "weights: Q4_K/Q6_K/Q8_0 dequantized at load to bf16"
 * when nothing is kept quantized, else "weights: kept quantized on the
 * device: Q4_K ×14, Q6_K ×3; dequantized at load to f32: Q4_K ×1". */
static void serve_weights_note(serve_model *m) {
    char conv[112], kept[112];
    int quantized = 0, kept_any = 0;
    serve_types_list(m->n_kept, 1, kept, sizeof kept, &kept_any);
    serve_types_list(m->n_converted, kept_any, conv, sizeof conv, &quantized);
    const char *how = quantized ? "dequantized" : "converted", *to = m->bf16 ? "bf16" : "f32";
    if (!kept_any)
        snprintf(m->weights_note, sizeof m->weights_note, "weights: %s %s at load to %s", conv,
                 how, to);
    else
        snprintf(m->weights_note, sizeof m->weights_note,
                 "weights: kept quantized on the device: %s; %s at load to %s: %s", kept, how, to,
                 conv);
}

/* ---- weights kept quantized ---- */

/* A layer's projections in m->proj, in this order. */
typedef enum serve_proj_slot {
    SERVE_PROJ_Q = 0, SERVE_PROJ_K, SERVE_PROJ_V, SERVE_PROJ_O,
    SERVE_PROJ_GATE, SERVE_PROJ_UP, SERVE_PROJ_DOWN
} serve_proj_slot;
static const char *const serve_proj_names[SERVE_PROJ_COUNT] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

/* [out, in] of a slot's weight */
static void serve_proj_shape(const serve_model_config *c, int slot, int *out, int *in) {
    int h = c->hidden, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    static const int outs_in[SERVE_PROJ_COUNT] = {0, 1, 1, 2, 3, 3, 2}; /* 0 qd 1 kvd 2 h 3 ffn */
    int dims[4] = {qd, kvd, h, c->ffn};
    *out = dims[outs_in[slot]];
    *in = slot == SERVE_PROJ_O ? qd : slot == SERVE_PROJ_DOWN ? c->ffn : h;
}

static const char *serve_head_name(const serve_model_config *c) {
    return c->tied_embeddings ? "token_embd.weight" : "output.weight";
}

/* 1 when this load keeps some weight quantized: dequantize_weights is off
 * and a projection or the LM head is of a type the device GEMV reads. */
static int serve_keeps_quantized(const serve_model *m, const serve_gguf *g) {
    if (m->cfg.dequantize_weights) return 0;
    const serve_gguf_tensor *t;
    if (serve_gguf_find_tensor(g, serve_head_name(&m->cfg), &t) == LAZYATTN_STATUS_OK &&
        serve_gemv_quant_supports(t->type))
        return 1;
    char name[96];
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int i = 0; i < SERVE_PROJ_COUNT; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, serve_proj_names[i]);
            if (serve_gguf_find_tensor(g, name, &t) == LAZYATTN_STATUS_OK &&
                serve_gemv_quant_supports(t->type))
                return 1;
        }
    return 0;
}

/* FORMAT when an f16 scale of the blocks (d, and dmin of Q4_K / Q5_K) is
 * infinite or NaN: its values would be, and every logit NaN. */
static int serve_check_scales(const char *name, uint32_t type, const uint8_t *b, uint64_t bytes) {
    uint64_t block;
    uint64_t elems = type == SERVE_GGML_Q8_0 || type == SERVE_GGML_Q4_0 ? 32 : 256;
    if (serve_ggml_row_bytes(type, elems, name, &block)) return LAZYATTN_STATUS_FORMAT;
    int has_dmin = type == SERVE_GGML_Q4_K || type == SERVE_GGML_Q5_K;
    uint64_t at = type == SERVE_GGML_Q6_K ? 208 : 0;
    for (uint64_t o = 0; o + block <= bytes; o += block)
        for (int k = 0; k <= has_dmin; k++) {
            const uint8_t *p = b + o + at + 2 * (uint64_t)k;
            if (((p[0] | p[1] << 8) & 0x7C00) == 0x7C00)
                return serve_fail(LAZYATTN_STATUS_FORMAT,
                                  "GGUF: tensor %s block %llu: its %s scale is %s", name,
                                  (unsigned long long)(o / block), k ? "dmin" : "d",
                                  (p[0] | (p[1] & 3) << 8) ? "NaN" : "infinite");
        }
    return LAZYATTN_STATUS_OK;
}

/* One projection weight [out, in] of a quantized load into w: the file's
 * blocks when the GEMV reads its type, else converted into a dense buffer
 * of the mode's layout. *scratch: the largest kept weight's dequantized
 * bytes so far. host, tmp: as serve_load_tensor's. */
static int serve_load_weight(serve_model *m, const serve_gguf *g, const char *name, int out,
                             int in, serve_weight *w, float *host, float *tmp, size_t *scratch) {
    const serve_gguf_tensor *t;
    int st = serve_gguf_find_tensor(g, name, &t);
    if (st) return serve_fail(st, "GGUF: tensor %s missing", name);
    size_t dense = (size_t)out * (size_t)in * (m->bf16 ? 2u : 4u);
    w->out = out, w->in = in;
    if (!serve_gemv_quant_supports(t->type)) {
        w->type = m->bf16 ? SERVE_GGML_BF16 : SERVE_GGML_F32;
        if ((st = serve_alloc(m, dense, &w->buf, name))) return st;
        return serve_load_tensor(m, g, name, (uint64_t)in, (uint64_t)out,
                                 m->bf16 ? SERVE_LOAD_BF16 : SERVE_LOAD_F32_T, w->buf, 0, host,
                                 tmp);
    }
    uint64_t t1 = t->n_dims > 1 ? t->dims[1] : 1, row_bytes;
    if (t->dims[0] != (uint64_t)in || t1 != (uint64_t)out ||
        t->n_elements != (uint64_t)in * (uint64_t)out)
        return serve_fail(LAZYATTN_STATUS_FORMAT,
                          "GGUF: tensor %s has shape [%llu, %llu], the model needs [%d, %d]",
                          name, (unsigned long long)t->dims[0], (unsigned long long)t1, in, out);
    if ((st = serve_ggml_row_bytes(t->type, (uint64_t)in, name, &row_bytes))) return st;
    if (row_bytes * (uint64_t)out != t->n_bytes)
        return serve_fail(LAZYATTN_STATUS_FORMAT, "GGUF: tensor %s: %llu bytes, its type and "
                          "shape need %llu", name, (unsigned long long)t->n_bytes,
                          (unsigned long long)(row_bytes * (uint64_t)out));
    /* blocks take fewer bytes than the f32 values host has room for */
    if ((st = serve_gguf_read_raw(g, t, host, t->n_bytes)) ||
        (st = serve_check_scales(name, t->type, (const uint8_t *)host, t->n_bytes)) ||
        (st = serve_alloc(m, (size_t)t->n_bytes, &w->buf, name)))
        return st;
    cl_int err = clEnqueueWriteBuffer(m->queue, w->buf, CL_TRUE, 0, (size_t)t->n_bytes, host, 0,
                                      NULL, NULL);
    if (err != CL_SUCCESS) return serve_cl_fail(err, "upload weights");
    w->type = t->type;
    m->n_kept[t->type]++;
    if (dense > *scratch) *scratch = dense;
    return LAZYATTN_STATUS_OK;
}

/* serve_model_load_gguf's projections and LM head when some are kept
 * quantized (token_embd and output_norm already loaded): one weight per
 * tensor (no fused QKV / gate-up: a Q4_K_M file mixes types inside the
 * groups), the dense buffers of create released. */
static int serve_load_quantized(serve_model *m, const serve_gguf *g, float *host, float *tmp) {
    const serve_model_config *c = &m->cfg;
    for (int l = 0; l < c->n_layers; l++) {
        serve_layer *L = &m->layers[l];
        cl_mem *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down,
                        &L->wqkv, &L->wgu};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) serve_release(ws[i]);
    }
    serve_release(&m->output);
    m->proj = calloc((size_t)c->n_layers * SERVE_PROJ_COUNT, sizeof *m->proj);
    if (!m->proj) return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_model_load_gguf");
    size_t scratch = 0;
    int st = serve_load_weight(m, g, serve_head_name(c), c->vocab, c->hidden, &m->head, host, tmp,
                               &scratch);
    char name[96];
    for (int l = 0; l < c->n_layers && !st; l++) {
        serve_layer *L = &m->layers[l];
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        st = serve_load_tensor(m, g, name, (uint64_t)c->hidden, 1, SERVE_LOAD_F32, L->attn_norm,
                               0, host, tmp);
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        if (!st)
            st = serve_load_tensor(m, g, name, (uint64_t)c->hidden, 1, SERVE_LOAD_F32,
                                   L->ffn_norm, 0, host, tmp);
        for (int i = 0; i < SERVE_PROJ_COUNT && !st; i++) {
            int out, in;
            serve_proj_shape(c, i, &out, &in);
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, serve_proj_names[i]);
            st = serve_load_weight(m, g, name, out, in, &m->proj[l * SERVE_PROJ_COUNT + i], host,
                                   tmp, &scratch);
        }
    }
    if (!st && scratch) st = serve_alloc(m, scratch, &m->dq_scratch, "dequantized weight");
    if (!st && !m->gq) st = serve_gemv_quant_create(m->ctx, &m->gq);
    for (uint32_t t = 0; t < 64 && !st; t++) /* compiled now, not by the first forward */
        if (m->n_kept[t]) st = serve_gemv_quant_prepare(m->gq, t);
    if (!st) m->quant = 1;
    return st;
}

int serve_model_load_gguf(serve_model *m, const serve_gguf *g) {
    if (!m || !g) return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_model_load_gguf: NULL");
    const serve_model_config *c = &m->cfg;
    uint64_t h = (uint64_t)c->hidden, qd = (uint64_t)c->n_heads * (uint64_t)c->head_dim,
             kvd = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim, ff = (uint64_t)c->ffn,
             V = (uint64_t)c->vocab;
    uint64_t biggest = V * h;
    if (ff * h > biggest) biggest = ff * h;
    if (qd * h > biggest) biggest = qd * h;
    if (m->proj) /* its dense projection buffers are gone */
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_model_load_gguf: the model holds weights kept quantized: load "
                          "into a new model");
    memset(m->n_converted, 0, sizeof m->n_converted);
    memset(m->n_kept, 0, sizeof m->n_kept);
    m->weights_note[0] = 0;
    float *host = malloc((size_t)biggest * sizeof(float));
    float *tmp = malloc((size_t)biggest * sizeof(float));
    if (!host || !tmp) {
        free(host);
        free(tmp);
        return serve_fail(LAZYATTN_STATUS_OUT_OF_HOST_MEMORY, "serve_model_load_gguf");
    }
    int proj = m->bf16 ? SERVE_LOAD_BF16 : SERVE_LOAD_F32_T;
    int st = serve_load_tensor(m, g, "token_embd.weight", h, V, SERVE_LOAD_F32, m->tok_embd, 0,
                               host, tmp);
    if (!st)
        st = serve_load_tensor(m, g, "output_norm.weight", h, 1, SERVE_LOAD_F32, m->output_norm, 0,
                               host, tmp);
    if (!st && serve_keeps_quantized(m, g)) {
        st = serve_load_quantized(m, g, host, tmp);
        free(host);
        free(tmp);
        if (!st) serve_weights_note(m);
        return st;
    }
    if (!st)
        st = serve_load_tensor(m, g, c->tied_embeddings ? "token_embd.weight" : "output.weight", h,
                               V, proj, m->output, 0, host, tmp);
    char name[96];
    for (int l = 0; m->bf16 && l < c->n_layers && !st; l++) {
        /* [out, in] as stored, q/k/v and gate/up packed row after row */
        serve_layer *L = &m->layers[l];
        struct {
            const char *suffix;
            uint64_t d0, d1;
            int how;
            cl_mem dst;
            uint64_t off;
        } ts[] = {{"attn_norm", h, 1, SERVE_LOAD_F32, L->attn_norm, 0},
                  {"attn_q", h, qd, SERVE_LOAD_BF16, L->wqkv, 0},
                  {"attn_k", h, kvd, SERVE_LOAD_BF16, L->wqkv, qd * h},
                  {"attn_v", h, kvd, SERVE_LOAD_BF16, L->wqkv, (qd + kvd) * h},
                  {"attn_output", qd, h, SERVE_LOAD_BF16, L->wo, 0},
                  {"ffn_norm", h, 1, SERVE_LOAD_F32, L->ffn_norm, 0},
                  {"ffn_gate", h, ff, SERVE_LOAD_BF16, L->wgu, 0},
                  {"ffn_up", h, ff, SERVE_LOAD_BF16, L->wgu, ff * h},
                  {"ffn_down", ff, h, SERVE_LOAD_BF16, L->w_down, 0}};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0] && !st; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, ts[i].suffix);
            st = serve_load_tensor(m, g, name, ts[i].d0, ts[i].d1, ts[i].how, ts[i].dst, ts[i].off,
                                   host, tmp);
        }
    }
    for (int l = 0; !m->bf16 && l < c->n_layers && !st; l++) {
        serve_layer *L = &m->layers[l];
        struct {
            const char *suffix;
            uint64_t d0, d1;
            cl_mem dst;
        } ts[] = {{"attn_norm", h, 1, L->attn_norm}, {"attn_q", h, qd, L->wq},
                  {"attn_k", h, kvd, L->wk},         {"attn_v", h, kvd, L->wv},
                  {"attn_output", qd, h, L->wo},     {"ffn_norm", h, 1, L->ffn_norm},
                  {"ffn_gate", h, ff, L->w_gate},    {"ffn_up", h, ff, L->w_up},
                  {"ffn_down", ff, h, L->w_down}};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0] && !st; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, ts[i].suffix);
            st = serve_load_tensor(m, g, name, ts[i].d0, ts[i].d1, SERVE_LOAD_F32_T, ts[i].dst, 0,
                                   host, tmp);
        }
    }
    free(host);
    free(tmp);
    if (!st) serve_weights_note(m);
    return st;
}

const char *serve_model_weights_note(const serve_model *m) { return m ? m->weights_note : ""; }
int serve_model_kept_quantized(const serve_model *m) { return m ? m->quant : 0; }

/* ---- forward ---- */

#define SERVE_TRY(expr)                    \
    do {                                   \
        int serve_st_ = (expr);            \
        if (serve_st_) return serve_st_;   \
    } while (0)

/* lazyattn's kernels, timed on the host as the attention phase */
#define SERVE_TRY_LZ(expr, what)                                   \
    do {                                                           \
        double serve_t0_ = serve_now();                            \
        int serve_st_ = (expr);                                    \
        serve_host_add(m, SERVE_PHASE_ATTENTION, serve_t0_);       \
        if (serve_st_) return serve_lz_fail(serve_st_, what);      \
    } while (0)

/* CLBlast, timed on the host as the GEMM phase */
static int serve_gemm_m(serve_model *m, int rows, int out, int in, cl_mem a, size_t a_off,
                        cl_mem w, cl_mem c, size_t c_off, float beta) {
    double t0 = serve_now();
    int st = serve_gemm(m->queue, rows, out, in, a, a_off, w, c, c_off, beta, m->gemm_temp,
                        serve_timer_slot(m->timer, SERVE_PHASE_GEMM));
    serve_host_add(m, SERVE_PHASE_GEMM, t0);
    return st;
}

static cl_event *serve_ev(serve_model *m, serve_phase p) { return serve_timer_slot(m->timer, p); }

/* A bf16 projection of n rows of X (rows from 0) through the dispatcher,
 * timed on the host as the GEMM phase. outs: the column ranges (cols, ld
 * and offset 0 each), summing to out. */
static int serve_gemm_b(serve_model *m, int n, int in, cl_mem x, cl_mem w, int n_outs,
                        const cl_mem *bufs, const int *cols, int accumulate) {
    serve_gemm_args a;
    memset(&a, 0, sizeof a);
    a.rows = n, a.in = in, a.x = x, a.w = w, a.n_outs = n_outs, a.accumulate = accumulate;
    for (int r = 0; r < n_outs; r++) {
        a.outs[r] = (serve_gemm_out){bufs[r], 0, cols[r], cols[r]};
        a.out += cols[r];
    }
    double t0 = serve_now();
    int st = serve_gemm_bf16_run(m->gemm, m->queue, &a, serve_timer_slot(m->timer, SERVE_PHASE_GEMM));
    serve_host_add(m, SERVE_PHASE_GEMM, t0);
    return st;
}

/* A decode projection's fused variant (gemm_bf16.h) through the
 * dispatcher: X the f32 rows x [n, in] from row x_row, with the RMSNorm of
 * gain norm (NULL: none); outs as serve_gemm_b, or with swiglu one range
 * of silu(gate) * up (W has 2 cols[0] rows). */
static int serve_gemm_fused(serve_model *m, int n, int in, cl_mem x, int x_row, cl_mem norm,
                            cl_mem w, int n_outs, const cl_mem *bufs, const int *cols, int swiglu,
                            int accumulate) {
    serve_gemm_args a;
    memset(&a, 0, sizeof a);
    a.rows = n, a.in = in, a.x = x, a.x_off = (size_t)x_row * (size_t)in, a.w = w;
    a.n_outs = n_outs, a.accumulate = accumulate, a.swiglu = swiglu;
    a.x_f32 = 1, a.norm = norm, a.norm_eps = m->cfg.rms_eps;
    for (int r = 0; r < n_outs; r++) {
        a.outs[r] = (serve_gemm_out){bufs[r], 0, cols[r], cols[r]};
        a.out += swiglu ? 2 * cols[r] : cols[r];
    }
    double t0 = serve_now();
    int st = serve_gemm_bf16_run(m->gemm, m->queue, &a, serve_timer_slot(m->timer, SERVE_PHASE_GEMM));
    serve_host_add(m, SERVE_PHASE_GEMM, t0);
    return st;
}

/* The layers shared by prefill and decode: the uploaded tokens [n] in
 * (embedded by the first layer's norm into x[n, hidden]), x out.
 * attend() runs the attention of layer l from m->q into m->att. Queries are
 * rotated at q_pos, keys written at stored_pos ([n] int32 each: the
 * uploaded rows, or a device plan's q_pos in decode). */
typedef int (*serve_attend_fn)(serve_model *m, lazyattn_pool *pool, int layer, const void *args);

/* Layer l's attention, q, k, v in, att out (both modes): queries rotated at
 * their logical positions and keys written at their stored ones (one
 * launch), attend(). */
static int serve_attention(serve_model *m, lazyattn_pool *pool, int l, int n, cl_mem q_pos,
                           cl_mem stored_pos, serve_attend_fn attend, const void *args) {
    SERVE_TRY_LZ(lazyattn_write_kv_rope_q(m->attn, pool, l, n, m->k, m->v, m->slots, stored_pos,
                                          m->q, q_pos, m->queue,
                                          serve_ev(m, SERVE_PHASE_ATTENTION)),
                 "lazyattn_write_kv_rope_q");
    return attend(m, pool, l, args);
}

static int serve_attend_decode(serve_model *m, lazyattn_pool *pool, int layer, const void *p);

/* decode's rows up to the NVIDIA small kernel's bound take the fused projections */
#define SERVE_FUSED_ROWS 64

/* Decode's layers in bf16 mode with the fused projections (issue 38): the
 * norms in the QKV and gate/up projections' X loaders, the attention's f32
 * output read by the O projection as it is, SwiGLU in the gate/up
 * epilogue (its f32 product, in g, the down projection's X): 6 launches a
 * layer where serve_layers_bf16 takes 10 (the first layer's norm stays: it
 * embeds the tokens). */
static int serve_layers_bf16_fused(serve_model *m, lazyattn_pool *pool, int n, cl_mem q_pos,
                                   cl_mem stored_pos, serve_attend_fn attend, const void *args) {
    const serve_model_config *c = &m->cfg;
    int h = c->hidden, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    cl_mem qkv[3] = {m->q, m->k, m->v};
    int qkv_cols[3] = {qd, kvd, kvd};
    for (int l = 0; l < c->n_layers; l++) {
        serve_layer *L = &m->layers[l];
        if (l == 0) { /* the embedding, normed into h_bf */
            SERVE_TRY(serve_rmsnorm(m, L->attn_norm, 0, n, 1));
            SERVE_TRY(serve_gemm_b(m, n, h, m->h_bf, L->wqkv, 3, qkv, qkv_cols, 0));
        } else {
            SERVE_TRY(serve_gemm_fused(m, n, h, m->x, 0, L->attn_norm, L->wqkv, 3, qkv, qkv_cols,
                                       0, 0));
        }
        SERVE_TRY(serve_attention(m, pool, l, n, q_pos, stored_pos, attend, args));
        SERVE_TRY(serve_gemm_fused(m, n, qd, m->att, 0, NULL, L->wo, 1, &m->x, &h, 0, 1));
        SERVE_TRY(serve_gemm_fused(m, n, h, m->x, 0, L->ffn_norm, L->wgu, 1, &m->g, &c->ffn, 1, 0));
        SERVE_TRY(serve_gemm_fused(m, n, c->ffn, m->g, 0, NULL, L->w_down, 1, &m->x, &h, 0, 1));
    }
    return LAZYATTN_STATUS_OK;
}

/* serve_layers in bf16 mode: fused QKV and gate/up, bf16 GEMM inputs;
 * decode's rows (up to the small kernel's 64) through
 * serve_layers_bf16_fused where the dispatcher offers the fused variants. */
static int serve_layers_bf16(serve_model *m, lazyattn_pool *pool, int n, cl_mem q_pos,
                             cl_mem stored_pos, serve_attend_fn attend, const void *args) {
    if (attend == serve_attend_decode && n <= SERVE_FUSED_ROWS &&
        serve_gemm_bf16_fused(m->gemm, n))
        return serve_layers_bf16_fused(m, pool, n, q_pos, stored_pos, attend, args);
    const serve_model_config *c = &m->cfg;
    int h = c->hidden, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    cl_mem qkv[3] = {m->q, m->k, m->v}, gu[2] = {m->g, m->u};
    int qkv_cols[3] = {qd, kvd, kvd}, gu_cols[2] = {c->ffn, c->ffn};
    for (int l = 0; l < c->n_layers; l++) {
        serve_layer *L = &m->layers[l];
        SERVE_TRY(serve_rmsnorm(m, L->attn_norm, 0, n, l == 0));
        SERVE_TRY(serve_gemm_b(m, n, h, m->h_bf, L->wqkv, 3, qkv, qkv_cols, 0));
        SERVE_TRY(serve_attention(m, pool, l, n, q_pos, stored_pos, attend, args));
        /* f32 attention output, converted: a bf16 out_dtype would make the
         * NVIDIA fast path fall back to lazyattn's portable kernels */
        SERVE_TRY(serve_to_bf16(m, (size_t)n * (size_t)qd));
        SERVE_TRY(serve_gemm_b(m, n, qd, m->att_bf, L->wo, 1, &m->x, &h, 1));
        SERVE_TRY(serve_rmsnorm(m, L->ffn_norm, 0, n, 0));
        SERVE_TRY(serve_gemm_b(m, n, h, m->h_bf, L->wgu, 2, gu, gu_cols, 0));
        SERVE_TRY(serve_swiglu(m, n));
        SERVE_TRY(serve_gemm_b(m, n, c->ffn, m->act_bf, L->w_down, 1, &m->x, &h, 1));
    }
    return LAZYATTN_STATUS_OK;
}

/* One projection of a model whose weights are kept quantized (any
 * descriptor), timed on the host as the GEMM phase; Y from element 0. */
static int serve_proj(serve_model *m, const serve_weight *w, int rows, cl_mem x, size_t x_off,
                      cl_mem y, int accumulate) {
    serve_projector p = {m->queue, m->gq, m->gemm, m->gemm_temp, m->dq_scratch, m->timer};
    double t0 = serve_now();
    int st = serve_project(&p, w, rows, x, x_off, y, 0, accumulate);
    if (m->timer) m->timer->host_s[SERVE_PHASE_GEMM] += serve_now() - t0;
    return st;
}

/* A fused group of a model whose weights are kept quantized (QKV, gate/up;
 * serve_project_group: one launch when its tensors share a type), X from
 * row 0, timed on the host as the GEMM phase. */
static int serve_proj_group(serve_model *m, int n_w, const serve_weight *const *w, int rows,
                            cl_mem x, const cl_mem *y) {
    serve_projector p = {m->queue, m->gq, m->gemm, m->gemm_temp, m->dq_scratch, m->timer};
    double t0 = serve_now();
    int st = serve_project_group(&p, n_w, w, rows, x, 0, y, 0);
    if (m->timer) m->timer->host_s[SERVE_PHASE_GEMM] += serve_now() - t0;
    return st;
}

/* serve_layers when weights are kept quantized (either mode): every
 * projection through serve_project; a fused group (QKV, gate/up) in one
 * GEMV launch when its tensors share a type, else one launch per tensor
 * (a Q4_K_M file's Q6_K attn_v beside Q4_K attn_q / attn_k); GEMM inputs
 * in the mode's type. */
static int serve_layers_proj(serve_model *m, lazyattn_pool *pool, int n, cl_mem q_pos,
                             cl_mem stored_pos, serve_attend_fn attend, const void *args) {
    const serve_model_config *c = &m->cfg;
    int qd = c->n_heads * c->head_dim;
    cl_mem xin = m->bf16 ? m->h_bf : m->h, att = m->bf16 ? m->att_bf : m->att,
           act = m->bf16 ? m->act_bf : m->g, qkv_out[3] = {m->q, m->k, m->v},
           gu_out[2] = {m->g, m->u};
    for (int l = 0; l < c->n_layers; l++) {
        const serve_weight *W = &m->proj[l * SERVE_PROJ_COUNT];
        SERVE_TRY(serve_rmsnorm(m, m->layers[l].attn_norm, 0, n, l == 0));
        const serve_weight *qkv[3] = {&W[SERVE_PROJ_Q], &W[SERVE_PROJ_K], &W[SERVE_PROJ_V]};
        SERVE_TRY(serve_proj_group(m, 3, qkv, n, xin, qkv_out));
        SERVE_TRY(serve_attention(m, pool, l, n, q_pos, stored_pos, attend, args));
        if (m->bf16) SERVE_TRY(serve_to_bf16(m, (size_t)n * (size_t)qd));
        SERVE_TRY(serve_proj(m, &W[SERVE_PROJ_O], n, att, 0, m->x, 1));
        SERVE_TRY(serve_rmsnorm(m, m->layers[l].ffn_norm, 0, n, 0));
        const serve_weight *gu[2] = {&W[SERVE_PROJ_GATE], &W[SERVE_PROJ_UP]};
        SERVE_TRY(serve_proj_group(m, 2, gu, n, xin, gu_out));
        SERVE_TRY(serve_swiglu(m, n));
        SERVE_TRY(serve_proj(m, &W[SERVE_PROJ_DOWN], n, act, 0, m->x, 1));
    }
    return LAZYATTN_STATUS_OK;
}

/* A fused quantized projection (serve_project_fused), timed on the host as
 * the GEMM phase; rows of X from x_row. */
static int serve_proj_fused(serve_model *m, int n_w, const serve_weight *const *w, int rows,
                            cl_mem x, int x_row, int in, cl_mem norm, int swiglu, const cl_mem *y,
                            int accumulate) {
    serve_projector p = {m->queue, m->gq, m->gemm, m->gemm_temp, m->dq_scratch, m->timer};
    double t0 = serve_now();
    int st = serve_project_fused(&p, n_w, w, rows, x, (size_t)x_row * (size_t)in, norm,
                                 m->cfg.rms_eps, swiglu, y, accumulate);
    if (m->timer) m->timer->host_s[SERVE_PHASE_GEMM] += serve_now() - t0;
    return st;
}

/* 1 when decode's n rows can take serve_layers_proj_fused: every layer's
 * groups through the quantized GEMV's fused forms. */
static int serve_proj_decode_fusable(const serve_model *m, int n) {
    serve_projector p = {m->queue, m->gq, m->gemm, m->gemm_temp, m->dq_scratch, NULL};
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const serve_weight *W = &m->proj[l * SERVE_PROJ_COUNT];
        const serve_weight *qkv[3] = {&W[SERVE_PROJ_Q], &W[SERVE_PROJ_K], &W[SERVE_PROJ_V]};
        const serve_weight *o = &W[SERVE_PROJ_O], *down = &W[SERVE_PROJ_DOWN];
        const serve_weight *gu[2] = {&W[SERVE_PROJ_GATE], &W[SERVE_PROJ_UP]};
        if (!serve_project_fusable(&p, 3, qkv, n, 0) || !serve_project_fusable(&p, 1, &o, n, 0) ||
            !serve_project_fusable(&p, 2, gu, n, 1) || !serve_project_fusable(&p, 1, &down, n, 0))
            return 0;
    }
    return 1;
}

/* Decode's layers when weights are kept quantized, with the GEMV's fused
 * forms (issue 38, as serve_layers_bf16_fused): QKV with the norm inside
 * (one launch a run of one type: a Q4_K_M file's Q6_K attn_v is a second),
 * the O projection reading the attention's f32 output, gate/up with the
 * norm inside and SwiGLU as its epilogue (into g; a gate and an up of
 * different types: two launches), down reading g; the first layer's norm
 * stays (it embeds the tokens). Either mode: X is always f32 here. */
static int serve_layers_proj_fused(serve_model *m, lazyattn_pool *pool, int n, cl_mem q_pos,
                                   cl_mem stored_pos, serve_attend_fn attend, const void *args) {
    const serve_model_config *c = &m->cfg;
    int h = c->hidden, qd = c->n_heads * c->head_dim;
    cl_mem qkv_out[3] = {m->q, m->k, m->v}, gu_out[2] = {m->g, m->u};
    for (int l = 0; l < c->n_layers; l++) {
        const serve_weight *W = &m->proj[l * SERVE_PROJ_COUNT];
        const serve_weight *qkv[3] = {&W[SERVE_PROJ_Q], &W[SERVE_PROJ_K], &W[SERVE_PROJ_V]};
        const serve_weight *o = &W[SERVE_PROJ_O], *down = &W[SERVE_PROJ_DOWN];
        const serve_weight *gu[2] = {&W[SERVE_PROJ_GATE], &W[SERVE_PROJ_UP]};
        if (l == 0) { /* the embedding, normed into the mode's X */
            SERVE_TRY(serve_rmsnorm(m, m->layers[0].attn_norm, 0, n, 1));
            SERVE_TRY(serve_proj_group(m, 3, qkv, n, m->bf16 ? m->h_bf : m->h, qkv_out));
        } else {
            SERVE_TRY(serve_proj_fused(m, 3, qkv, n, m->x, 0, h, m->layers[l].attn_norm, 0,
                                       qkv_out, 0));
        }
        SERVE_TRY(serve_attention(m, pool, l, n, q_pos, stored_pos, attend, args));
        SERVE_TRY(serve_proj_fused(m, 1, &o, n, m->att, 0, qd, NULL, 0, &m->x, 1));
        SERVE_TRY(serve_proj_fused(m, 2, gu, n, m->x, 0, h, m->layers[l].ffn_norm, 1, gu_out, 0));
        SERVE_TRY(serve_proj_fused(m, 1, &down, n, m->g, 0, c->ffn, NULL, 0, &m->x, 1));
    }
    return LAZYATTN_STATUS_OK;
}

static int serve_layers(serve_model *m, lazyattn_pool *pool, int n, cl_mem q_pos,
                        cl_mem stored_pos, serve_attend_fn attend, const void *args) {
    if (m->proj && !m->quant) /* a quantized load failed: the dense buffers are gone */
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_model: its GGUF load failed; load into a new model");
    if (m->quant && attend == serve_attend_decode && serve_proj_decode_fusable(m, n))
        return serve_layers_proj_fused(m, pool, n, q_pos, stored_pos, attend, args);
    if (m->quant) return serve_layers_proj(m, pool, n, q_pos, stored_pos, attend, args);
    if (m->bf16) return serve_layers_bf16(m, pool, n, q_pos, stored_pos, attend, args);
    const serve_model_config *c = &m->cfg;
    int h = c->hidden, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        serve_layer *L = &m->layers[l];
        SERVE_TRY(serve_rmsnorm(m, L->attn_norm, 0, n, l == 0));
        SERVE_TRY(serve_gemm_m(m, n, qd, h, m->h, 0, L->wq, m->q, 0, 0.0f));
        SERVE_TRY(serve_gemm_m(m, n, kvd, h, m->h, 0, L->wk, m->k, 0, 0.0f));
        SERVE_TRY(serve_gemm_m(m, n, kvd, h, m->h, 0, L->wv, m->v, 0, 0.0f));
        SERVE_TRY(serve_attention(m, pool, l, n, q_pos, stored_pos, attend, args));
        /* residual add fused: x += att . wo^T */
        SERVE_TRY(serve_gemm_m(m, n, h, qd, m->att, 0, L->wo, m->x, 0, 1.0f));
        SERVE_TRY(serve_rmsnorm(m, L->ffn_norm, 0, n, 0));
        SERVE_TRY(serve_gemm_m(m, n, c->ffn, h, m->h, 0, L->w_gate, m->g, 0, 0.0f));
        SERVE_TRY(serve_gemm_m(m, n, c->ffn, h, m->h, 0, L->w_up, m->u, 0, 0.0f));
        SERVE_TRY(serve_swiglu(m, n));
        SERVE_TRY(serve_gemm_m(m, n, h, c->ffn, m->g, 0, L->w_down, m->x, 0, 1.0f));
    }
    return LAZYATTN_STATUS_OK;
}

/* Final norm of rows [row0, row0 + n), LM head into logits[0 .. n), argmax.
 * decode: the norm in the LM head's X loader where the layers fused theirs. */
static int serve_head(serve_model *m, int row0, int n, int decode, int32_t *next) {
    const serve_model_config *c = &m->cfg;
    const serve_weight *head = &m->head;
    serve_projector hp = {m->queue, m->gq, m->gemm, m->gemm_temp, m->dq_scratch, NULL};
    if (m->quant && decode && serve_project_fusable(&hp, 1, &head, n, 0)) {
        /* the norm in the quantized LM head's loader, as the layers' */
        SERVE_TRY(serve_proj_fused(m, 1, &head, n, m->x, row0, c->hidden, m->output_norm, 0,
                                   &m->logits, 0));
    } else if (m->quant) { /* f32: normed rows at h's row0; bf16: at h_bf's row 0 */
        SERVE_TRY(serve_rmsnorm(m, m->output_norm, row0, n, 0));
        SERVE_TRY(serve_proj(m, &m->head, n, m->bf16 ? m->h_bf : m->h,
                             m->bf16 ? 0 : (size_t)row0 * (size_t)c->hidden, m->logits, 0));
    } else if (decode && m->bf16 && n <= SERVE_FUSED_ROWS && serve_gemm_bf16_fused(m->gemm, n)) {
        SERVE_TRY(serve_gemm_fused(m, n, c->hidden, m->x, row0, m->output_norm, m->output, 1,
                                   &m->logits, &c->vocab, 0, 0));
    } else if (m->bf16) { /* normed rows at h_bf's row 0 */
        SERVE_TRY(serve_rmsnorm(m, m->output_norm, row0, n, 0));
        SERVE_TRY(serve_gemm_b(m, n, c->hidden, m->h_bf, m->output, 1, &m->logits, &c->vocab, 0));
    } else {
        SERVE_TRY(serve_rmsnorm(m, m->output_norm, row0, n, 0));
        SERVE_TRY(serve_gemm_m(m, n, c->vocab, c->hidden, m->h, (size_t)row0 * (size_t)c->hidden,
                               m->output, m->logits, 0, 0.0f));
    }
    SERVE_TRY(serve_argmax(m, n));
    double t0 = serve_now(), c0 = serve_thread_cpu_now();
    cl_int err = clEnqueueReadBuffer(m->queue, m->next, CL_TRUE, 0, (size_t)n * sizeof(int32_t),
                                     next, 0, NULL, NULL);
    serve_timer_count(m->timer, SERVE_ENQ_READ, 1);
    if (m->timer) m->timer->wait_s += serve_now() - t0;
    if (m->timer) m->timer->wait_cpu_s += serve_thread_cpu_now() - c0;
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : serve_cl_fail(err, "read next tokens");
}

static int serve_check_tokens(const serve_model *m, int n, const int32_t *tokens) {
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab)
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "token %d = %d outside 0..%d", i,
                              (int)tokens[i], m->cfg.vocab - 1);
    return LAZYATTN_STATUS_OK;
}

/* A forward's row arrays, [n] int32 each (seq_offsets [n + 1], NULL in a
 * prefill), in one upload. */
static int serve_upload_rows(serve_model *m, int n, const int32_t *tokens, const int32_t *q_pos,
                             const int32_t *slots, const int32_t *stored_pos,
                             const int32_t *seq_offsets) {
    const int32_t *src[SERVE_ROW_PARTS] = {tokens, slots, q_pos, stored_pos, seq_offsets};
    const int count[SERVE_ROW_PARTS] = {n, n, n, n, n + 1};
    return serve_upload_rows_packed(m, seq_offsets ? 5 : 4, src, count);
}

static int serve_attend_prefill(serve_model *m, lazyattn_pool *pool, int layer, const void *p) {
    const serve_prefill_args *a = p;
    lazyattn_prefill_args pa = {.n_queries = a->n_tokens,
                                .n_entries = a->n_entries,
                                .q = m->q,
                                .q_pos = m->q_pos,
                                .table = m->table,
                                .entry_pos = m->entry_pos,
                                .out = m->att};
    if (a->plan) /* the table of the plan's sequence 0, already on the device */
        SERVE_TRY_LZ(lazyattn_device_plan_prefill_args(a->plan, 0, &pa),
                     "lazyattn_device_plan_prefill_args");
    SERVE_TRY_LZ(lazyattn_prefill(m->attn, pool, layer, &pa, m->queue,
                                  serve_ev(m, SERVE_PHASE_ATTENTION)),
                 "lazyattn_prefill");
    return LAZYATTN_STATUS_OK;
}

/* Batched prefill: the launch's arguments are filled once per forward. */
static int serve_attend_batched(serve_model *m, lazyattn_pool *pool, int layer, const void *p) {
    SERVE_TRY_LZ(lazyattn_prefill_batched(m->attn, pool, layer, p, m->queue,
                                          serve_ev(m, SERVE_PHASE_ATTENTION)),
                 "lazyattn_prefill_batched");
    return LAZYATTN_STATUS_OK;
}

/* Host checks of a batched forward's offsets (the device skips and records
 * bad ones; the engine never launches them). n_entries: the table's. */
static int serve_check_batch(const serve_prefill_args *a, int n_entries) {
    if (a->n_seqs < 1 || !a->q_indptr || !a->table_indptr || a->q_indptr[0] != 0 ||
        a->q_indptr[a->n_seqs] != a->n_tokens || a->max_queries < 1 ||
        a->max_queries > a->n_tokens)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_model_prefill: batch of %d sequences over %d rows (max %d)",
                          a->n_seqs, a->n_tokens, a->max_queries);
    for (int s = 0; s < a->n_seqs; s++) {
        int32_t q0 = a->q_indptr[s], q1 = a->q_indptr[s + 1];
        int32_t t0 = a->table_indptr[s], t1 = a->table_indptr[s + 1];
        if (q1 < q0 || q1 - q0 > a->max_queries || t0 < 0 || t1 < t0 || t1 > n_entries)
            return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                              "serve_model_prefill: sequence %d: rows %d..%d, entries %d..%d of %d",
                              s, (int)q0, (int)q1, (int)t0, (int)t1, n_entries);
    }
    return LAZYATTN_STATUS_OK;
}

int serve_model_prefill(serve_model *m, lazyattn_pool *pool, const serve_prefill_args *a,
                        int32_t *next_token) {
    if (!m || !pool || !a || !a->tokens || !a->q_pos || !a->slots || !a->stored_pos ||
        (!a->plan && (!a->table || !a->entry_pos)) || (a->want_logits && !next_token))
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_model_prefill: NULL argument");
    if (a->n_tokens < 1 || a->n_tokens > m->cfg.max_rows || (!a->plan && a->n_entries < 1) ||
        a->n_seqs < 0)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_model_prefill: %d tokens (1..%d), %d entries", a->n_tokens,
                          m->cfg.max_rows, a->n_entries);
    SERVE_TRY(serve_check_tokens(m, a->n_tokens, a->tokens));
    SERVE_TRY(serve_upload_rows(m, a->n_tokens, a->tokens, a->q_pos, a->slots, a->stored_pos,
                                NULL));
    if (!a->plan) {
        SERVE_TRY(serve_table_reserve(m, a->n_entries));
        SERVE_TRY(serve_upload_table(m, a->n_entries, a->table, a->entry_pos));
    }
    if (a->n_seqs > 0) {
        lazyattn_prefill_batch_args ba;
        lazyattn_prefill_batch_args_init(&ba);
        ba.n_entries = a->n_entries, ba.table = m->table, ba.entry_pos = m->entry_pos;
        if (a->plan) { /* every sequence of the plan, back to back, as one table */
            lazyattn_device_plan_info info;
            SERVE_TRY_LZ(lazyattn_device_plan_get_info(a->plan, &info),
                         "lazyattn_device_plan_get_info");
            ba.n_entries = info.n_entries, ba.table = info.table, ba.entry_pos = info.entry_pos;
        }
        SERVE_TRY(serve_check_batch(a, ba.n_entries));
        SERVE_TRY(serve_indptr_reserve(m, a->n_seqs + 1));
        const void *indptr[2] = {a->q_indptr, a->table_indptr};
        const size_t b[2] = {(size_t)(a->n_seqs + 1) * sizeof(int32_t),
                             (size_t)(a->n_seqs + 1) * sizeof(int32_t)};
        SERVE_TRY(serve_upload_parts(m, m->indptrs, m->indptrs_pitch, 2, indptr, b));
        ba.n_seqs = a->n_seqs, ba.n_queries = a->n_tokens, ba.max_queries = a->max_queries;
        ba.q = m->q, ba.q_pos = m->q_pos, ba.q_indptr = m->q_indptr;
        ba.table_indptr = m->table_indptr, ba.out = m->att;
        SERVE_TRY(
            serve_layers(m, pool, a->n_tokens, m->q_pos, m->stored_pos, serve_attend_batched, &ba));
    } else {
        SERVE_TRY(
            serve_layers(m, pool, a->n_tokens, m->q_pos, m->stored_pos, serve_attend_prefill, a));
    }
    if (a->want_logits) return serve_head(m, a->n_tokens - 1, 1, 0, next_token);
    return LAZYATTN_STATUS_OK;
}

static int serve_attend_decode(serve_model *m, lazyattn_pool *pool, int layer, const void *p) {
    const serve_decode_args *a = p;
    lazyattn_decode_args da = {.n_seqs = a->n_seqs,
                               .max_entries = a->max_entries,
                               .n_splits = 0,
                               .q = m->q,
                               .q_pos = m->q_pos,
                               .seq_offsets = m->seq_offsets,
                               .table = m->table,
                               .entry_pos = m->entry_pos,
                               .out = m->att};
    if (a->plan) /* every sequence's table, q_pos and offsets, already on the device */
        SERVE_TRY_LZ(lazyattn_device_plan_decode_args(a->plan, &da),
                     "lazyattn_device_plan_decode_args");
    SERVE_TRY_LZ(lazyattn_decode(m->attn, pool, layer, &da, m->queue,
                                 serve_ev(m, SERVE_PHASE_ATTENTION)),
                 "lazyattn_decode");
    return LAZYATTN_STATUS_OK;
}

/* Decode over a device plan: only the tokens and slots go up; the plan
 * holds the tables, offsets and q_pos (also the positions the new keys are
 * stored at: a generated token's stored position is its position). */
static int serve_model_decode_plan(serve_model *m, lazyattn_pool *pool, const serve_decode_args *a,
                                   int32_t *next_tokens) {
    lazyattn_device_plan_info info;
    SERVE_TRY_LZ(lazyattn_device_plan_get_info(a->plan, &info), "lazyattn_device_plan_get_info");
    if (info.n_seqs != a->n_seqs)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT,
                          "serve_model_decode: %d sequences, the device plan holds %d", a->n_seqs,
                          info.n_seqs);
    SERVE_TRY(serve_check_tokens(m, a->n_seqs, a->tokens));
    const int32_t *src[2] = {a->tokens, a->slots};
    const int count[2] = {a->n_seqs, a->n_seqs};
    SERVE_TRY(serve_upload_rows_packed(m, 2, src, count));
    SERVE_TRY(serve_layers(m, pool, a->n_seqs, info.q_pos, info.q_pos, serve_attend_decode, a));
    return serve_head(m, 0, a->n_seqs, 1, next_tokens);
}

int serve_model_decode(serve_model *m, lazyattn_pool *pool, const serve_decode_args *a,
                       int32_t *next_tokens) {
    if (m && pool && a && a->plan && a->tokens && a->slots && next_tokens &&
        a->n_seqs >= 1 && a->n_seqs <= m->cfg.max_rows)
        return serve_model_decode_plan(m, pool, a, next_tokens);
    if (!m || !pool || !a || !a->tokens || !a->q_pos || !a->slots || !a->stored_pos ||
        !a->seq_offsets || !a->table || !a->entry_pos || !next_tokens)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_model_decode: NULL argument");
    if (a->n_seqs < 1 || a->n_seqs > m->cfg.max_rows)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_model_decode: %d sequences (1..%d)",
                          a->n_seqs, m->cfg.max_rows);
    int n_entries = a->seq_offsets[a->n_seqs];
    if (a->seq_offsets[0] != 0 || n_entries < a->n_seqs)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_model_decode: bad seq_offsets");
    SERVE_TRY(serve_check_tokens(m, a->n_seqs, a->tokens));
    SERVE_TRY(serve_table_reserve(m, n_entries));
    SERVE_TRY(serve_upload_rows(m, a->n_seqs, a->tokens, a->q_pos, a->slots, a->stored_pos,
                                a->seq_offsets));
    SERVE_TRY(serve_upload_table(m, n_entries, a->table, a->entry_pos));
    SERVE_TRY(serve_layers(m, pool, a->n_seqs, m->q_pos, m->stored_pos, serve_attend_decode, a));
    return serve_head(m, 0, a->n_seqs, 1, next_tokens);
}

int serve_model_read_logits(serve_model *m, int n_rows, float *dst) {
    if (!m || !dst || n_rows < 1 || n_rows > m->cfg.max_rows)
        return serve_fail(LAZYATTN_STATUS_INVALID_ARGUMENT, "serve_model_read_logits: bad argument");
    cl_int err = clEnqueueReadBuffer(m->queue, m->logits, CL_TRUE, 0,
                                     (size_t)n_rows * (size_t)m->cfg.vocab * sizeof(float), dst, 0, NULL,
                                     NULL);
    return err == CL_SUCCESS ? LAZYATTN_STATUS_OK : serve_cl_fail(err, "read logits");
}
