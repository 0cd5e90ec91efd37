/* SPDX-License-Identifier: Apache-2.0 */
/*
 * serve: a Llama-architecture decoder on top of lazyattn, and the pieces of
 * the end-to-end RAG serving benchmark (rag_bench.c).
 *
 * Projections are CLBlast SGEMMs (f32: NVIDIA's OpenCL has no fp16
 * extension) or, in bf16 mode (serve_gemm_mode; the default on NVIDIA
 * compute capability >= 8), bf16 GEMMs (gemm_bf16.c); attention, RoPE and
 * the K/V writes are lazyattn's kernels over block tables; the elementwise
 * kernels live in serve/model_kernels.cl.
 *
 * Conventions as in lazyattn.h: int status returns (lazyattn_status
 * values), serve_last_error() for the detail, destroy(NULL) is a no-op,
 * nothing exits or asserts on bad input. Shapes are row-major, outermost
 * first. A weight matrix is [out, in] in GGUF / PyTorch; in f32 mode it is
 * kept transposed on the device, [in, out], and a projection is
 * y[n, out] = x[n, in] . Wt; in bf16 mode it stays [out, in].
 */
#ifndef SERVE_H
#define SERVE_H

#include "lazyattn.h"
#include "lazyattn_testing.h" /* the reference, the workload generator */

#include <stdint.h>
#include <stdio.h>

/* ---- errors (serve_error.c) -------------------------------------------- */

/* Records the detail for serve_last_error() and returns status. */
int serve_fail(int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Maps a cl_int into a status, recording "what: OpenCL error N". */
int serve_cl_fail(cl_int err, const char *what);
/* Wraps a failed lazyattn call: keeps its status, records "what: <lazyattn detail>". */
int serve_lz_fail(int status, const char *what);
/* Detail of the last failure on this thread ("" if none). */
const char *serve_last_error(void);

/* ---- per-phase device time (phase_timer.c) ------------------------------ */

typedef enum serve_phase {
    SERVE_PHASE_GEMM = 0,        /* projections and LM head (CLBlast or bf16 GEMMs) */
    SERVE_PHASE_ATTENTION = 1,   /* lazyattn write_kv_rope_q, prefill, decode */
    SERVE_PHASE_COPY = 2,        /* lazyattn_materialise (position-aware copy hits) */
    SERVE_PHASE_ELEMENTWISE = 3, /* RMSNorm (and the embedding), SwiGLU, argmax */
    SERVE_PHASE_UPLOAD = 4,      /* the forward's row arrays and tables, host to device */
    SERVE_PHASE_COUNT = 5
} serve_phase;

/* What an enqueue counted in serve_timer.enqueues is: a launch of a phase
 * (the phases' values: a lazyattn call or a CLBlast call counts as one), a
 * host-to-device upload, a read back to the host, or a device plan write. */
typedef enum serve_enqueue_kind {
    SERVE_ENQ_GEMM = SERVE_PHASE_GEMM,
    SERVE_ENQ_ATTENTION = SERVE_PHASE_ATTENTION,
    SERVE_ENQ_COPY = SERVE_PHASE_COPY,
    SERVE_ENQ_ELEMENTWISE = SERVE_PHASE_ELEMENTWISE,
    SERVE_ENQ_UPLOAD = SERVE_PHASE_UPLOAD,
    SERVE_ENQ_READ = 5,
    SERVE_ENQ_PLAN = 6,
    SERVE_ENQ_COUNT = 7
} serve_enqueue_kind;

/* One profiled command of a serve_timer's trace. */
typedef struct serve_timer_event {
    int phase; /* serve_phase */
    uint64_t start_ns, end_ns; /* CL_PROFILING_COMMAND_START / _END */
} serve_timer_event;

/* Collects profiling events per phase; the device time of each phase is
 * summed when the caller has finished the queue. Disabled = no events. */
typedef struct serve_timer {
    int enabled;
    cl_event *events; /* [cap] */
    int *phases;      /* [cap] */
    int n, cap;
    double seconds[SERVE_PHASE_COUNT]; /* device time (profiling events) */
    double host_s[SERVE_PHASE_COUNT];  /* host time inside the enqueue calls */
    double upload_s;                   /* blocking uploads of tokens and tables */
    double wait_s;                     /* blocking reads of the next tokens */
    /* host time per forward (serve_engine_*): everything the host does for a
     * decode step or a request's prefill, the blocking token reads excluded */
    double decode_host_s, prefill_host_s;
    int64_t decode_steps, prefill_forwards; /* prefill: chunks of max_rows tokens */
    /* the same in CPU time of the calling thread (serve_thread_cpu_now): not
     * inflated when the host thread is descheduled, e.g. by PoCL's workers */
    double decode_cpu_s, prefill_cpu_s, wait_cpu_s;
    double upload_cpu_s; /* upload_s in CPU time */
    /* of a decode step's host time, the part spent on its tables: appends,
     * packing or the device plan update, and the model's uploads */
    double decode_tables_s, decode_tables_cpu_s;
    /* OpenCL commands enqueued (kernels, CLBlast calls, uploads, reads,
     * device plan writes), counted whether or not profiling is on; the
     * engine adds each call's share to its forward kind */
    int64_t enqueues;
    int64_t enqueues_by[SERVE_ENQ_COUNT]; /* of enqueues, per serve_enqueue_kind */
    int64_t decode_enqueues, prefill_enqueues;
    int64_t prefill_requests; /* serve_engine_prefill calls that succeeded */
    /* device span: per collect, the last end less the first start of its
     * events (the in-order queue's wall, gaps between commands included) */
    double span_s;
    /* trace 1: collect also appends each event (phase, start, end in ns of
     * the device clock) to trace[0..trace_n), up to trace_cap entries (the
     * caller owns the array and resets trace_n) */
    int trace, trace_n, trace_cap;
    serve_timer_event *trace_events;
} serve_timer;

/* Counts n enqueues of kind k (t NULL: none). */
static inline void serve_timer_count(serve_timer *t, serve_enqueue_kind k, int64_t n) {
    if (t) t->enqueues += n, t->enqueues_by[k] += n;
}
const char *serve_enqueue_kind_name(serve_enqueue_kind k);

/* An event slot to pass to an enqueue call, or NULL (disabled, or no
 * memory: the time of that call is then not counted). */
cl_event *serve_timer_slot(serve_timer *t, serve_phase phase);
/* Sums and releases the pending events; call after clFinish. */
int serve_timer_collect(serve_timer *t);
void serve_timer_release(serve_timer *t);
const char *serve_phase_name(serve_phase phase);

/* ---- model configuration (model_config.c) ------------------------------- */

/* How the model's projections (and LM head) run.
 *   AUTO: BF16 on the vendor fast path (lazyattn_context_fast_path: NVIDIA,
 *         compute capability >= 8), else F32; so PoCL and other devices keep
 *         the f32 CLBlast path.
 *   F32:  f32 weights, kept transposed [in, out], CLBlast SGEMM (gemm.c).
 *   BF16: bf16 weights [out, in] as GGUF / PyTorch store them, with fused
 *         QKV ([q_dim + 2 kv_dim, hidden] -> q, k, v) and fused gate/up
 *         ([2 ffn, hidden] -> g, u); GEMM inputs (the normed rows, the
 *         attention output, the SwiGLU product) in bf16, f32 accumulation
 *         and f32 results (gemm_bf16.c: the tensor-core kernels where
 *         built in and covering the device and shape, else the portable
 *         kernel). No f32 copy of the projection weights is allocated.
 *         (On compute capability 8.x the rows > 64 projections take the
 *         portable kernel: the large tensor-core kernel needs Hopper.) */
typedef enum serve_gemm_mode {
    SERVE_GEMM_AUTO = 0,
    SERVE_GEMM_F32 = 1,
    SERVE_GEMM_BF16 = 2
} serve_gemm_mode;

/* "auto", "f32", "bf16" ("?" for another value). */
const char *serve_gemm_mode_name(serve_gemm_mode mode);
/* The names above; INVALID_ARGUMENT for another string. */
int serve_gemm_mode_parse(const char *name, serve_gemm_mode *out);

typedef struct serve_model_config {
    int n_layers;
    int hidden;     /* model width */
    int n_heads;    /* query heads */
    int n_kv_heads; /* GQA: divides n_heads */
    int head_dim;   /* 16..256, multiple of 8 (lazyattn's kernels) */
    int ffn;        /* SwiGLU inner width */
    int vocab;
    float rms_eps;
    lazyattn_rope_config rope;
    int block_size;        /* KV block tokens */
    lazyattn_dtype kv_dtype;
    int tied_embeddings;   /* 1: the LM head is token_embd */
    int max_rows;          /* most tokens of one forward (prefill chunk or decode batch) */
    serve_gemm_mode gemm;  /* projection path, AUTO in every preset */
    /* GGUF weights (serve_model_load_gguf): 0 (every preset) keeps each
     * projection tensor of a type the device reads quantized (Q8_0, Q4_0,
     * Q4_K, Q5_K, Q6_K) as its blocks on the device, the others dequantized
     * at load; 1 dequantizes every tensor at load (the way before, to
     * compare) */
    int dequantize_weights;
} serve_model_config;

/* "tiny" (tests), "small" (the README default), "8b" (Llama-3.1-8B shape,
 * vocab reduced to 32000). NOT_FOUND for another name. */
int serve_model_config_preset(serve_model_config *cfg, const char *name);
/* INVALID_ARGUMENT with the offending field. */
int serve_model_config_check(const serve_model_config *cfg);
/* Parameters (weights) of the model, for memory estimates. */
uint64_t serve_model_config_n_params(const serve_model_config *cfg);
/* The attention and pool configurations the model's layers use. */
void serve_model_attention_config(const serve_model_config *cfg, lazyattn_attention_config *out);
void serve_model_pool_config(const serve_model_config *cfg, uint64_t budget_bytes,
                             lazyattn_pool_config *out);
/* KV bytes of one token over all layers (K and V). */
uint64_t serve_model_kv_bytes_per_token(const serve_model_config *cfg);

/* ---- GGUF v3 reader (gguf.c) -------------------------------------------- */

typedef struct serve_gguf serve_gguf;

typedef struct serve_gguf_tensor {
    const char *name;
    int n_dims;          /* 1..4 */
    uint64_t dims[4];    /* ggml order: dims[0] is the innermost (row length) */
    uint32_t type;       /* ggml type */
    uint64_t n_elements;
    uint64_t offset;     /* from the start of the file */
    uint64_t n_bytes;
} serve_gguf_tensor;

/* Parses the header, metadata and tensor infos of a GGUF file (v2 or v3,
 * little-endian) and checks every tensor lies inside the file. Tensor data
 * stays on disk. IO for a missing file, FORMAT for a malformed one. */
int serve_gguf_open(const char *path, serve_gguf **out);
void serve_gguf_close(serve_gguf *g);

uint32_t serve_gguf_version(const serve_gguf *g);
int64_t serve_gguf_n_tensors(const serve_gguf *g);
/* Metadata lookups: NOT_FOUND if absent, FORMAT if of another type
 * (integers of any width convert to the asked one when they fit). */
int serve_gguf_get_int(const serve_gguf *g, const char *key, int64_t *value);
int serve_gguf_get_float(const serve_gguf *g, const char *key, double *value);
/* The string stays owned by g. */
int serve_gguf_get_string(const serve_gguf *g, const char *key, const char **value);
/* Array values, read from the file when asked (not thread-safe with other
 * reads of g). elem_type: the GGUF value type of the elements (8 = string).
 * NOT_FOUND if absent, FORMAT if not an array (of the asked kind). */
int serve_gguf_get_array(const serve_gguf *g, const char *key, uint32_t *elem_type, uint64_t *n);
/* An array of strings: string i is bytes + offsets[i], offsets[i + 1] -
 * offsets[i] - 1 bytes long (it may hold NULs) and NUL-terminated. */
typedef struct serve_gguf_strings {
    uint64_t n;
    char *bytes;       /* [offsets[n]] */
    uint64_t *offsets; /* [n + 1] */
} serve_gguf_strings;
int serve_gguf_read_strings(const serve_gguf *g, const char *key, serve_gguf_strings *out);
void serve_gguf_strings_free(serve_gguf_strings *s); /* zeroes *s; NULL is a no-op */
/* An array of numbers of any scalar type, converted. dst: [n]; FORMAT
 * unless the array has exactly n elements. */
int serve_gguf_read_numbers(const serve_gguf *g, const char *key, double *dst, uint64_t n);
/* NOT_FOUND if absent. */
int serve_gguf_find_tensor(const serve_gguf *g, const char *name, const serve_gguf_tensor **out);
/* Reads a tensor converted to f32. dst: [n] floats, n == tensor->n_elements.
 * Types: those of quant.h (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K),
 * dequantized row by row; serve_gguf_open refuses any other by name. */
int serve_gguf_read_f32(const serve_gguf *g, const serve_gguf_tensor *t, float *dst, uint64_t n);
/* Reads a tensor's bytes as the file stores them (ggml blocks for a
 * quantized type). dst: [n_bytes], n_bytes == tensor->n_bytes. */
int serve_gguf_read_raw(const serve_gguf *g, const serve_gguf_tensor *t, void *dst,
                        uint64_t n_bytes);

/* Model shape from a "llama" GGUF's metadata (general.architecture,
 * llama.block_count, .embedding_length, .feed_forward_length,
 * .attention.head_count(_kv), .attention.key_length / .value_length (the
 * head dim, may differ from hidden / heads; the two must be equal),
 * .rope.freq_base, .rope.dimension_count (= head dim: no partial rotary),
 * .rope.scaling.type none / linear (also when absent with a factor, as in
 * llama.cpp) / llama3 with .rope.scaling.factor (.original_context_length),
 * the rope_freqs.weight tensor (Llama 3.x as llama.cpp's converter writes
 * it: per-pair frequency divisors), .attention.layer_norm_rms_epsilon;
 * vocab from token_embd.weight, equal to llama.vocab_size when given; tied
 * embeddings when output.weight is absent). RoPE is GPT-J pairing:
 * llama.cpp's converter permutes Q/K rows for it. FORMAT, naming the key or
 * tensor, for what is not implemented: another scaling type (yarn, ...),
 * any other llama.* key (expert counts but 0), any tensor the decoder does
 * not read (biases, experts, ...). max_rows, block_size and kv_dtype are
 * left as cfg had them. */
int serve_gguf_model_config(const serve_gguf *g, serve_model_config *cfg);

/* ---- the decoder (model.c) ---------------------------------------------- */

typedef struct serve_model serve_model;

/* Allocates weights and scratch on ctx's device, builds the elementwise
 * kernels and the lazyattn attention object. Weights are uninitialised:
 * call serve_model_init_random or serve_model_load_gguf. */
int serve_model_create(lazyattn_context *ctx, const serve_model_config *cfg, serve_model **out);
void serve_model_destroy(serve_model *m);
const serve_model_config *serve_model_get_config(const serve_model *m);
lazyattn_attention *serve_model_attention(serve_model *m);
/* Profiling events go to timer (NULL: none). The timer is not owned. */
void serve_model_set_timer(serve_model *m, serve_timer *timer);
serve_timer *serve_model_timer(const serve_model *m);
cl_context serve_model_cl_context(const serve_model *m);
cl_command_queue serve_model_queue(const serve_model *m);
lazyattn_context *serve_model_context(const serve_model *m);

/* 1 when the model's projections run in bf16 (gemm BF16, or AUTO on the
 * fast path), 0 for f32 CLBlast. */
int serve_model_uses_bf16(const serve_model *m);
/* Device bytes the model holds: weights (projections, LM head, embedding,
 * norms) and everything else (activations, CLBlast temporaries, tables).
 * Either pointer may be NULL. */
void serve_model_device_bytes(const serve_model *m, uint64_t *weights, uint64_t *scratch);
/* The model's bf16 GEMM dispatcher (NULL in f32 mode), e.g. for its counts. */
struct serve_gemm_bf16 *serve_model_gemm_bf16(serve_model *m);

/* Seeded random weights, generated on the device (a counter hash per
 * element), so an 8B shape takes seconds: projections uniform with
 * variance 1/in, embeddings variance 1, norms 1 + small noise.
 * INVALID_ARGUMENT after a GGUF load that kept weights quantized. */
int serve_model_init_random(serve_model *m, uint64_t seed);
/* Uploads the tensors of a llama GGUF, checking every shape against the
 * model's config. Projection tensors (and the LM head) of a type the
 * device GEMV reads (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) are kept as their
 * blocks on the device unless cfg.dequantize_weights (serve/projection.h:
 * decode-sized forwards read them in place, larger ones dequantize each
 * on the device into one scratch buffer for the GEMM); FORMAT for an
 * infinite or NaN f16 scale in them. The other tensors are converted to
 * f32 on the host: f32 mode transposes the projections, bf16 mode rounds
 * them to bf16 (nearest even) and, when nothing is kept quantized, packs
 * q/k/v and gate/up into their fused weights. FORMAT for a NaN or infinite
 * weight, and in bf16 mode for a projection or LM head weight that rounds
 * past bf16's largest finite value (|w| >= 0x7F7F8000 as f32 bits,
 * ~3.3962e38). */
int serve_model_load_gguf(serve_model *m, const serve_gguf *g);
/* After serve_model_load_gguf: one line saying how the weight matrices
 * were stored and what they became on the device: "weights: Q4_K/Q6_K
 * dequantized at load to bf16" when nothing is kept quantized, else
 * "weights: kept quantized on the device: Q4_K ×14, Q6_K ×3; dequantized
 * at load to bf16: Q4_K ×1" (counts of matrices, the token embedding
 * included: it is always converted); "" before a load. Owned by m. */
const char *serve_model_weights_note(const serve_model *m);
/* 1 when the last load kept some weight quantized on the device, else 0. */
int serve_model_kept_quantized(const serve_model *m);

/*
 * One chunk of one sequence through every layer (prefill).
 *   tokens, q_pos:      [n_tokens] int32, logical positions of the queries
 *   slots, stored_pos:  [n_tokens] int32, where each token's K/V goes and
 *                       the position its key is rotated at
 *   table, entry_pos:   [n_entries] the whole visible context, this chunk's
 *                       own blocks included, valid lengths covering only
 *                       written tokens (see lazyattn_prefill)
 * want_logits: 1 computes the LM head of the last token: its argmax goes to
 * *next_token and its logits are readable with serve_model_read_logits.
 * plan: non-NULL = the table is sequence 0 of this device plan (already
 * updated on the model's queue); n_entries, table and entry_pos are then
 * not used.
 * n_seqs >= 1: a ragged batch through one lazyattn_prefill_batched per
 * layer: sequence s is rows q_indptr[s] .. q_indptr[s+1]-1 over entries
 * table_indptr[s] .. table_indptr[s+1]-1 of the table (lazyattn's
 * semantics; empty sequences allowed, e.g. to skip entries).
 *   q_indptr, table_indptr: [n_seqs + 1] int32, q_indptr[0] = 0,
 *                           q_indptr[n_seqs] = n_tokens, checked on the host
 *   max_queries:            the most rows of one sequence
 * With a plan, the table is all the plan's sequences back to back (its
 * device table as lazyattn_device_plan_get_info gives it).
 * n_seqs 0: one sequence, lazyattn_prefill.
 */
typedef struct serve_prefill_args {
    int n_tokens;
    const int32_t *tokens;
    const int32_t *q_pos;
    const int32_t *slots;
    const int32_t *stored_pos;
    int n_entries;
    const uint64_t *table;
    const int32_t *entry_pos;
    int want_logits;
    const lazyattn_device_plan *plan;
    int n_seqs;
    const int32_t *q_indptr;
    const int32_t *table_indptr;
    int max_queries;
} serve_prefill_args;

int serve_model_prefill(serve_model *m, lazyattn_pool *pool, const serve_prefill_args *args,
                        int32_t *next_token);

/*
 * One decode step for a batch: one new token per sequence.
 *   tokens, q_pos, slots, stored_pos: [n_seqs] int32
 *   seq_offsets: [n_seqs + 1] int32 into table / entry_pos (lazyattn_decode)
 *   next_tokens: [n_seqs] argmax of each row's logits
 * plan: non-NULL = tables, seq_offsets, q_pos (= stored_pos) and
 * max_entries are those of this device plan (already updated on the
 * model's queue, holding n_seqs sequences); only tokens and slots are
 * uploaded, the other host arrays are not used.
 */
typedef struct serve_decode_args {
    int n_seqs;
    const int32_t *tokens;
    const int32_t *q_pos;
    const int32_t *slots;
    const int32_t *stored_pos;
    const int32_t *seq_offsets;
    const uint64_t *table;
    const int32_t *entry_pos;
    int max_entries;
    const lazyattn_device_plan *plan;
} serve_decode_args;

int serve_model_decode(serve_model *m, lazyattn_pool *pool, const serve_decode_args *args,
                       int32_t *next_tokens);

/* Logits of the last forward: [n_rows, vocab] f32 (n_rows = 1 after a
 * prefill with want_logits, n_seqs after a decode). Blocking read. */
int serve_model_read_logits(serve_model *m, int n_rows, float *dst);

/* ---- GEMM (gemm.c) ------------------------------------------------------- */

/* c[rows, out] = a[rows, in] . wt[in, out] + beta * c, row-major, through
 * CLBlastSgemm; offsets in floats. The weight is kept transposed ([in, out])
 * so that CLBlast reads it in place. temp: a buffer of at least
 * serve_gemm_temp_size bytes for CLBlast's temporaries (NULL: CLBlast
 * allocates its own per call). */
int serve_gemm(cl_command_queue queue, int rows, int out, int in, cl_mem a, size_t a_off,
               cl_mem w, cl_mem c, size_t c_off, float beta, cl_mem temp, cl_event *event);
int serve_gemm_temp_size(cl_command_queue queue, int rows, int out, int in, size_t a_off,
                         size_t c_off, size_t *bytes);

/* ---- bf16 GEMM (gemm_bf16.c; the arguments in gemm_bf16.h) ---------------- */

/* Runs serve_gemm_args (gemm_bf16.h): the NVIDIA tensor-core kernels where
 * they cover the device and shape (NVIDIA fast path; the large one Hopper)
 * (rows <= 64: the small, weight-bandwidth kernel; rows > 64: the large
 * one), else the portable kernel (serve/gemm_bf16.cl, OpenCL C 1.2, any
 * device; a 32 x 32 tile per work-group of 16 x 16, f32 accumulation). */
typedef struct serve_gemm_bf16 serve_gemm_bf16;
struct serve_gemm_args;

typedef enum serve_gemm_kernel {
    SERVE_GEMM_KERNEL_PORTABLE = 0,
    SERVE_GEMM_KERNEL_LARGE = 1, /* tensor cores, rows > 64 */
    SERVE_GEMM_KERNEL_SMALL = 2, /* tensor cores, rows <= 64 */
    SERVE_GEMM_KERNEL_COUNT = 3
} serve_gemm_kernel;

/* Builds the portable kernel on ctx's device and creates the tensor-core
 * kernels where built in (they answer UNSUPPORTED on other devices). */
int serve_gemm_bf16_create(lazyattn_context *ctx, serve_gemm_bf16 **out);
void serve_gemm_bf16_destroy(serve_gemm_bf16 *g);
/* Checks the arguments (serve_gemm_args_check), then enqueues on queue;
 * event as lazyattn's calls (one event for the whole projection). */
int serve_gemm_bf16_run(serve_gemm_bf16 *g, cl_command_queue queue,
                        const struct serve_gemm_args *args, cl_event *event);
/* INVALID_ARGUMENT, with the detail, for a shape < 1, NULL buffers, 0 or
 * more than SERVE_GEMM_MAX_OUTS ranges, ranges whose cols do not sum to
 * out or with ld < cols, accumulate not 0/1, or a buffer too small (X must
 * hold rows rounded up to SERVE_GEMM_ROW_PAD from x_off; f32 X the rows
 * only), and the fused variants' fields (gemm_bf16.h). who names the
 * caller in the message. */
int serve_gemm_args_check(const struct serve_gemm_args *args, const char *who);
/* The same checks but the buffers' sizes (no OpenCL query): what the
 * tensor-core kernels' run functions check themselves on every call. */
int serve_gemm_args_check_shape(const struct serve_gemm_args *args, const char *who);
/* A serve.* key of LAZYATTN_TUNE (README, "Environment") set to 0 or 1:
 * that value, -1 when absent. lib/ accepts the key and warns about a bad
 * value; this reads only a well-formed one (the last, as lib/ does). */
int serve_tune_setting(const char *key);
/* 1: every projection takes the portable kernel (tests compare the two). */
void serve_gemm_bf16_portable_only(serve_gemm_bf16 *g, int on);
/* 1 when serve_gemm_bf16_run takes the fused variants (gemm_bf16.h: x_f32,
 * norm, swiglu) of a projection of `rows` rows on the kernel that runs the
 * plain one: the portable kernel (every device without the NVIDIA tensor-
 * core kernels: always), the NVIDIA small kernel (rows <= 64) for one
 * row, or as LAZYATTN_TUNE=serve.fused_decode=0|1 says (README); 0
 * otherwise (the fused
 * arguments would still run, on the slower portable kernel). */
int serve_gemm_bf16_fused(const serve_gemm_bf16 *g, int rows);
/* 1 when a tensor-core kernel was created for this device. */
int serve_gemm_bf16_has_tensor_cores(const serve_gemm_bf16 *g);
/* Projections each kernel ran since create. counts: [SERVE_GEMM_KERNEL_COUNT] */
void serve_gemm_bf16_counts(const serve_gemm_bf16 *g, int64_t *counts);
/* Tests only: the dispatcher calls run (with state) where it would call the
 * tensor-core kernel `which` (LARGE or SMALL), on any device, so its
 * fallback can be checked on PoCL; run NULL removes the override. */
typedef int (*serve_gemm_bf16_test_run)(void *state, cl_command_queue queue,
                                        const struct serve_gemm_args *args, cl_event *event);
int serve_gemm_bf16_override_for_testing(serve_gemm_bf16 *g, serve_gemm_kernel which,
                                         serve_gemm_bf16_test_run run, void *state);

/* ---- serving engine (engine.c) --------------------------------------------- */

/* Runs lazyattn request plans through the model: the prompt work of a
 * request (copies, isolated document prefills, question) and decode steps
 * over a batch of requests. Owns small device buffers for the copies. */
typedef struct serve_engine serve_engine;

int serve_engine_create(serve_model *model, lazyattn_pool *pool, serve_engine **out);
void serve_engine_destroy(serve_engine *e);

/*
 * Everything before the first token of one planned request: materialises
 * the copy hits (every layer), prefills what the plan asks in prompt order
 * (the prefix; each missed document alone, as if at document-local
 * positions 0..L-1, its keys written at the stored positions the policy
 * chose; the question over the whole context), commits the request and
 * returns the argmax of the last question token. Chunks of at most
 * max_rows tokens: by default each chunk is one forward over all the
 * segments it holds (serve_engine_use_batched_prefill).
 * desc must be the description the request was created from; it needs a
 * question (n_question >= 1).
 */
int serve_engine_prefill(serve_engine *e, lazyattn_request *req, const lazyattn_request_desc *desc,
                         int32_t *first_token);

/*
 * One decode step: appends tokens[i] to request reqs[i] (lazyattn_request_append)
 * and runs them as one batch; next[i] is the argmax of request i's logits.
 *   reqs, tokens, next: [n]
 * On failure some requests may hold the new position without its K/V
 * written: their sequences cannot go on (destroy them).
 */
int serve_engine_decode(serve_engine *e, int n, lazyattn_request *const *reqs,
                        const int32_t *tokens, int32_t *next);

/* 1 (the default): decode steps keep the batch's tables in a lazyattn
 * device plan and write only what changed; the question's last prefill
 * chunk reads the request's table from a device plan. 0: host tables are
 * packed and uploaded for every forward (the way before device plans; kept
 * to compare them, bit for bit and in host time). */
void serve_engine_use_device_plans(serve_engine *e, int on);

/* 1 (the default): all of a request's prefill rows (prefix, missed
 * documents, question) go through one model forward per chunk of at most
 * max_rows rows, with one lazyattn_prefill_batched per layer: each document
 * (and the prefix) a sequence over its own entries of the request's table
 * as the plan gives them (queries at their prompt positions; RoPE's
 * relative positions make that the document's isolated encoding), the
 * question a sequence over the whole table. The table the batch reads is
 * built once per request: the entries before the question, then the whole
 * table (the question's range), in a two-sequence device plan (or a host
 * table with device plans off). A chunk that ends inside a segment ends at
 * one of its entries' ends, so no sequence sees an unwritten key. 0: one
 * forward per segment chunk over a table repacked per chunk (the way
 * before; kept to compare). Batched prefill needs max_rows >= block_size:
 * below, the engine always takes the per-segment path. */
void serve_engine_use_batched_prefill(serve_engine *e, int on);

/* Chunked prefill interleaved with decode steps, so that a long prefill
 * (a cold paper request: 5 x 2048 document tokens) does not freeze the
 * running requests. tokens > 0: a request's prefill runs in forwards of at
 * most min(tokens, max_rows) rows (batched prefill: each chunk still one
 * forward over all the segments it holds, ending at an entry's end), and
 * before each of its forwards but the first the engine calls
 * between(user): the caller runs a decode step of its running batch there
 * (serve_engine_decode on this engine). Not there: decoding the request
 * being prefilled, or serve_engine_prefill (both refused with
 * INVALID_ARGUMENT), or destroying that request. Its host time and
 * enqueues count as decode work, not the prefill's. between() returns 0 or
 * a negative status, which ends the prefill with that status (a positive
 * one: INVALID_ARGUMENT); the request is then not committed (destroy it),
 * the engine is ready for the next prefill, and a decode step that failed
 * there leaves its requests as serve_engine_decode says. The device-plan
 * setting is read once per prefill: switched from between(), it applies
 * from the next one. tokens 0 (the default): forwards of max_rows rows and
 * nothing in between. between NULL: chunks only. INVALID_ARGUMENT for
 * tokens < 0 or below one KV block (the batched path cuts chunks at entry
 * ends), or from inside a prefill. */
typedef int (*serve_between_fn)(void *user);
int serve_engine_set_prefill_chunk(serve_engine *e, int tokens, serve_between_fn between,
                                   void *user);

/* Counters since the engine was created. */
typedef struct serve_engine_stats {
    int64_t prefill_requests;    /* serve_engine_prefill calls that succeeded */
    int64_t prefill_forwards;    /* their forwards (chunks), failed calls included */
    int64_t between_calls;       /* between() calls: chunk boundaries inside prefills */
    int64_t interleaved_decodes; /* serve_engine_decode steps run from inside a prefill */
} serve_engine_stats;
/* Zeros for e NULL. */
void serve_engine_get_stats(const serve_engine *e, serve_engine_stats *out);

/* ---- results, table, CSV and SVG plots (report.c) ------------------------ */

typedef struct serve_request_result {
    int id;
    int ok;             /* 0: refused (the KV budget cannot hold its working set) */
    double arrival;     /* seconds since the run started */
    double first_token; /* when its first token was known (TTFT = first_token - arrival) */
    double finish;      /* when its last token was known */
    int n_prompt;       /* prompt tokens (prefix + documents + question) */
    int n_generated;
    int doc_tokens, hit_tokens, copy_tokens;
    double plan_s;      /* in lazyattn_request_create (planning, and loads from a tier) */
} serve_request_result;

typedef struct serve_run_result {
    char policy[16];
    uint64_t budget_bytes;
    double wall_s;
    int n_requests; /* measured requests (warm-up excluded) */
    serve_request_result *requests; /* [n_requests], owned */
    lazyattn_cache_stats stats;     /* measured requests only */
    double phase_s[SERVE_PHASE_COUNT];
    double host_s[SERVE_PHASE_COUNT];
    double upload_s, wait_s;
    double decode_host_s, prefill_host_s; /* host time per forward (serve_timer) */
    int64_t decode_steps, prefill_forwards;
    double decode_cpu_s, prefill_cpu_s;
    double decode_tables_s, decode_tables_cpu_s;
    int64_t decode_enqueues, prefill_enqueues, prefill_requests;
    int n_planned;      /* requests the run was asked to serve */
    int cut;            /* 1: a time limit stopped admissions (n_requests < n_planned) */
    double limit_s;     /* the run's admission limit, seconds (0: none) */
    int shared;         /* 1: a copy of the same policy's run at another budget */
    uint64_t pool_bytes; /* the pool (the budget, or the budget + working sets) */
    int64_t between_calls, interleaved_decodes; /* chunked prefill (serve_engine_stats) */
    /* filled by serve_run_summarise */
    int n_ok, n_failed;
    double hit_ratio, copy_ratio, block_hit_ratio;
    double ttft_mean, ttft_p50, ttft_p99; /* seconds */
    double tpot_mean, e2e_mean, e2e_p99;
    double req_per_s, tok_per_s;
} serve_run_result;

void serve_run_summarise(serve_run_result *r);
void serve_run_release(serve_run_result *r);
/* Linear-interpolated percentile p in [0, 100] of v[0..n) (sorted in place). */
double serve_percentile(double *v, int n, double p);
/* The printers do nothing for f NULL or runs NULL with n > 0. A run with
 * no completed request prints dashes (and its CUT SHORT / same-run marks). */
void serve_print_table(FILE *f, const serve_run_result *runs, int n);
void serve_print_phases(FILE *f, const serve_run_result *runs, int n);
/* Host time inside enqueue calls per phase, uploads and waits. */
void serve_print_host(FILE *f, const serve_run_result *runs, int n);
/* The writers: 0, INVALID_ARGUMENT for a NULL or empty path, n < 0, runs
 * NULL with n > 0 or a run's requests NULL with n_requests > 0, IO when
 * the file cannot be written (the message names it). NaN or infinite
 * times are written as such in the CSVs and left out of the plots.
 * One row per request of every run. */
int serve_write_csv(const char *path, const serve_run_result *runs, int n);
/* One row per run. */
int serve_write_summary_csv(const char *path, const serve_run_result *runs, int n);
/* TTFT CDF, one line per policy, runs at the given budget. */
int serve_write_svg_ttft(const char *path, const serve_run_result *runs, int n, uint64_t budget);
/* TTFT CDFs, one panel per budget of the runs, side by side. */
int serve_write_svg_ttft_budgets(const char *path, const serve_run_result *runs, int n);
/* Throughput and hit ratio against the budget, one line per policy. */
int serve_write_svg_budget(const char *path, const serve_run_result *runs, int n);

/* ---- small helpers -------------------------------------------------------- */

/* The embedded OpenCL source of one of serve/'s kernel files by its name
 * without extension ("model_kernels", "gemm_bf16", "gemm_nv_large",
 * "gemm_nv_small"); NULL when there is none (sources.c). */
const char *serve_source_text(const char *name);
/* The program text of an NVIDIA kernel file of serve/ ("gemm_nv_large",
 * "gemm_nv_small"): cl/nv/ptx.h (the PTX instructions it uses), then the
 * file, in one string the caller frees; NULL when a source is missing or
 * memory is short (sources.c). */
char *serve_nv_program_text(const char *name);

double serve_now(void); /* monotonic seconds */
/* CPU seconds the calling thread has used (0 where the clock is missing):
 * host work without the time the thread waited or was descheduled. */
double serve_thread_cpu_now(void);

#endif
