/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lazyattn: position-independent KV-cache reuse for RAG, in OpenCL.
 *
 * A cached document is stored once, its keys rotated at document-local
 * positions; the rest of the rotation (the block's delta = logical start -
 * stored start) is applied inside the attention kernels. See README.md for
 * the semantics and docs/ for the design notes.
 *
 * This header is the stable API. Helpers for tests and benchmarks (the
 * float64 reference, the normalised error, the RAG workload generator) are
 * in lazyattn_testing.h.
 *
 * Conventions
 *  - Every function returns an int status: LAZYATTN_STATUS_OK (0) or a
 *    negative lazyattn_status. lazyattn_status_string() names it and
 *    lazyattn_last_error() gives the detail of the last failure on this
 *    thread. Nothing in the library exits, aborts or asserts on bad input.
 *  - Sizes computed from caller values never wrap: a count whose bytes do
 *    not fit size_t, or whose work size does not fit the kernels' int32
 *    indices, gives OUT_OF_RANGE naming the quantity; a buffer smaller
 *    than its shape needs gives INVALID_ARGUMENT.
 *  - Every create has a destroy; destroy(NULL) is a no-op.
 *  - Every config and args struct has an _init function that fills its
 *    defaults; fields added in later versions get a default there, so
 *    fill structs with _init rather than positionally.
 *  - Shapes are written row-major, outermost first, right above each
 *    function: k: [n_tokens, n_kv_heads, head_dim] f32.
 *  - Enqueueing functions take the caller's queue (NULL = the context's
 *    queue) and an optional cl_event *; they never wait for completion.
 *  - Positions, deltas and lengths are int32; positions lie in
 *    [0, LAZYATTN_MAX_POSITION] so that fp32 angles stay exact.
 *  - Threads (README "Threading"): a context and a pool may be shared by
 *    any number of threads; a cache with its requests, and an attention
 *    object, belong to one thread at a time (one per scheduler thread).
 *    lazyattn_last_error() is per thread. A destroy must not race with any
 *    other use of the same object. As a net, a call on a cache or its
 *    requests while another thread is inside one is refused: IN_USE
 *    "<function>: the cache is in use by another call" (a destroy then
 *    does nothing and logs it).
 *  - Queues: a pool block freed while commands enqueued over it may still
 *    run (on any queue) is rewritten by the library only after they have
 *    completed (lazyattn_pool_record_use says how), and a device plan whose
 *    blocks were freed is refused (lazyattn_plan_seq).
 *  - Use after destroy is forbidden. As a net, a pool, cache, request,
 *    device plan or store that was destroyed (while its memory is not reused
 *    yet), or a handle of another kind, is refused with INVALID_ARGUMENT
 *    "<function>: not a live cache" (a magic word checked at entry points;
 *    not a guarantee).
 */
#ifndef LAZYATTN_H
#define LAZYATTN_H

#include <stddef.h>
#include <stdint.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(LAZYATTN_BUILD_SHARED)
#define LAZYATTN_API __declspec(dllexport)
#elif defined(__GNUC__) && (defined(LAZYATTN_BUILD_SHARED) || defined(LAZYATTN_BUILD))
#define LAZYATTN_API __attribute__((visibility("default")))
#else
#define LAZYATTN_API
#endif

/* ---- version ---------------------------------------------------------- */

#define LAZYATTN_VERSION_MAJOR 0
#define LAZYATTN_VERSION_MINOR 1
#define LAZYATTN_VERSION_PATCH 0
#define LAZYATTN_VERSION_NUMBER \
    (LAZYATTN_VERSION_MAJOR * 10000 + LAZYATTN_VERSION_MINOR * 100 + LAZYATTN_VERSION_PATCH)

/* "0.1.0"; meson reads the version from the three macros above. */
LAZYATTN_API const char *lazyattn_version_string(void);

/* ---- status ----------------------------------------------------------- */

/* One list, expanded into the enum and into the message table. */
#define LAZYATTN_STATUS_LIST(X)                                                     \
    X(OK, 0, "success")                                                             \
    X(INVALID_ARGUMENT, -1, "invalid argument")                                     \
    X(OUT_OF_HOST_MEMORY, -2, "out of host memory")                                 \
    X(OUT_OF_DEVICE_MEMORY, -3, "out of device memory")                             \
    X(BUDGET_EXCEEDED, -4, "KV byte budget exceeded")                               \
    X(NO_DEVICE, -5, "no matching OpenCL device")                                   \
    X(BUILD_FAILED, -6, "OpenCL program build failed")                              \
    X(OPENCL, -7, "OpenCL call failed")                                             \
    X(UNSUPPORTED, -8, "unsupported on this device or configuration")               \
    X(OUT_OF_RANGE, -9, "value does not fit its field")                             \
    X(NOT_FOUND, -10, "not found")                                                  \
    X(IN_USE, -11, "object is in use (pinned, or by another thread)")               \
    X(IO, -12, "file input/output error")                                           \
    X(FORMAT, -13, "malformed or unsupported file format")

typedef enum lazyattn_status {
#define LAZYATTN_X_ENUM(name, value, message) LAZYATTN_STATUS_##name = value,
    LAZYATTN_STATUS_LIST(LAZYATTN_X_ENUM)
#undef LAZYATTN_X_ENUM
} lazyattn_status;

/* Short message of a status ("invalid argument"); "unknown status" otherwise. */
LAZYATTN_API const char *lazyattn_status_string(int status);

/* Detail of the last failure on the calling thread ("" if none yet), e.g.
 * "lazyattn_pool_alloc: 5 blocks asked, 3 free under the budget". Like
 * errno it keeps the text of the last failure: a later successful call does
 * not clear it, so read it only right after a call returned an error. */
LAZYATTN_API const char *lazyattn_last_error(void);

/* ---- limits ----------------------------------------------------------- */

/* Largest logical or stored position: fp32 holds every integer up to 2^24. */
#define LAZYATTN_MAX_POSITION ((1 << 24) - 1)
#define LAZYATTN_MAX_BLOCK_SIZE 256
/* Geometry the kernels support: every attention configuration and every
 * device pool keeps to it (one validator checks both; a bookkeeping pool,
 * ctx == NULL, accepts any head_dim in 1..1024). */
#define LAZYATTN_MIN_HEAD_DIM 16  /* head_dim: a multiple of 8 in MIN..MAX */
#define LAZYATTN_MAX_HEAD_DIM 256
#define LAZYATTN_MAX_HEADS 4096   /* query heads, and KV heads */
#define LAZYATTN_MAX_LAYERS 4096  /* layers of a pool */
/* Most blocks of one pool: 5 bytes of host bookkeeping per block (335 MB
 * at the limit). A budget that gives more blocks is refused with
 * OUT_OF_RANGE, never truncated. */
#define LAZYATTN_MAX_POOL_BLOCKS ((int64_t)1 << 26)

/* ---- storage types and positional schemes ------------------------------ */

typedef enum lazyattn_dtype {
    LAZYATTN_DTYPE_F32 = 0, /* 4 bytes */
    LAZYATTN_DTYPE_F16 = 1, /* IEEE half, 2 bytes, converted with vload_half */
    LAZYATTN_DTYPE_BF16 = 2 /* bfloat16, 2 bytes, round-to-nearest-even */
} lazyattn_dtype;

/* Bytes of one element of a storage type (0 for an unknown type, with the
 * reason in lazyattn_last_error()). */
LAZYATTN_API size_t lazyattn_dtype_size(lazyattn_dtype dtype);

/*
 * Order of the elements inside one page of a pool's K or V buffer (a page:
 * one block of one KV head, block_size x head_dim elements; pages stay
 * where they are, page (block, kv_head) at element
 * (block * n_kv_heads + kv_head) * block_size * head_dim):
 *   ROWS:  [block_size][head_dim], token t's dims contiguous:
 *          rows(t, d) = t * head_dim + d
 *   TILED: [block_size / 8][head_dim / 8][8 tokens][8 dims], 8 x 8 tiles:
 *          tiled(t, d) = ((t / 8) * (head_dim / 8) + d / 8) * 64 + (t % 8) * 8 + d % 8
 * TILED is the order the NVIDIA tensor-core kernels keep K and V in local
 * memory (the core matrices Hopper's wgmma reads): their copies move every
 * 128-byte line of a TILED page whole into one line of local memory (the
 * Hopper prefill a full page as one bulk copy), where ROWS pages are
 * gathered 16 bytes a row. Measured on the H200 (Llama-3.1-8B shapes,
 * docs/PERFLOG.md issue 11 step 10): prefill 3-7 % faster, decode the
 * same. The portable kernels read TILED pages correctly but 16 bytes at
 * a time (not tuned for it). It needs block_size a multiple of 8 (head_dim
 * always is). Every kernel reads and writes both; a pool and the
 * attention objects that use it must agree (lazyattn_pool_config and
 * lazyattn_attention_config carry it). Document exports
 * (lazyattn_cache_export) are in ROWS order whatever the pool's layout, so
 * they import into a pool of either layout.
 */
typedef enum lazyattn_kv_layout {
    LAZYATTN_KV_LAYOUT_ROWS = 0,  /* the default */
    LAZYATTN_KV_LAYOUT_TILED = 1  /* block_size % 8 == 0 */
} lazyattn_kv_layout;

typedef enum lazyattn_rope_style {
    LAZYATTN_ROPE_NONE = 0, /* no rotary embedding (e.g. with ALiBi) */
    LAZYATTN_ROPE_NEOX = 1, /* half split: pairs (i, i + rotary_dim/2) */
    LAZYATTN_ROPE_GPTJ = 2  /* interleaved: pairs (2i, 2i + 1) */
} lazyattn_rope_style;

/* Rotary embedding. Frequencies f_i = theta^(-2i/rotary_dim), optionally
 * rescaled the Llama-3 way (llama3_factor > 0), then divided by
 * freq_factors[i] (n_freq_factors > 0) and by linear_factor (> 0); the
 * appended fields zeroed (memset, _init) add no scaling. Angles are
 * computed in the kernels from (position, f_i) with an exact two-float
 * product and a Cody-Waite reduction, so they stay accurate at positions
 * up to 2^24 without a position-indexed table. */
typedef struct lazyattn_rope_config {
    lazyattn_rope_style style;
    int rotary_dim;       /* even, <= head_dim; 0 = head_dim (partial rotary otherwise) */
    double theta;         /* base, e.g. 10000 or 500000 */
    double llama3_factor; /* 0 = no scaling; Llama-3.1: 8 */
    double llama3_low_freq_factor;   /* Llama-3.1: 1 */
    double llama3_high_freq_factor;  /* Llama-3.1: 4 */
    int llama3_original_context;     /* Llama-3.1: 8192 */
    /* appended: linear position interpolation (positions / factor); 0 = none, else finite > 0 */
    double linear_factor;
    /* appended: per-pair divisors (llama.cpp's rope_freqs tensor, ggml's "freq_factors"):
     * 0 = none, else rotary_dim / 2 finite values > 0 in freq_factors[0 .. n) */
    int n_freq_factors;
    float freq_factors[LAZYATTN_MAX_HEAD_DIM / 2];
} lazyattn_rope_config;

/* Fills freq[0 .. rotary_dim/2) with the (scaled) frequencies in double.
 * freq: [rotary_dim / 2]. */
LAZYATTN_API int lazyattn_rope_frequencies(const lazyattn_rope_config *rope, int head_dim,
                                           double *freq);

/* One attention layer's geometry and positional scheme. */
typedef struct lazyattn_attention_config {
    int n_q_heads;  /* multiple of n_kv_heads (GQA; MQA when n_kv_heads = 1) */
    int n_kv_heads;
    int head_dim;   /* 16..256, multiple of 8 */
    int block_size; /* tokens per KV block, 1..LAZYATTN_MAX_BLOCK_SIZE; default 16. The
                     * portable prefill's local memory does not grow with it (tiles of
                     * lazyattn_tile_params), the decode's chunks hold at least one
                     * block (4 x heads x block_size bytes of scores); what a device
                     * refuses is head_dim x group tiles over its local memory
                     * (UNSUPPORTED, see there) */
    lazyattn_dtype dtype;      /* K/V storage type */
    lazyattn_rope_config rope; /* style NONE for no rotation */
    int alibi;                 /* 1: add slope_h * (key_pos - query_pos) (standard ALiBi slopes) */
    float scale;               /* softmax scale; 0 = 1/sqrt(head_dim) */
    lazyattn_kv_layout kv_layout; /* appended: the pool pages' order (the kernels are built
                                   * for one, like dtype); default ROWS */
} lazyattn_attention_config;

/* Llama-3.1-8B defaults for one layer: 32/8 heads, d = 128, B = 16, fp16,
 * NeoX RoPE theta 500000 with Llama-3 scaling (8, 1, 4, 8192). */
LAZYATTN_API void lazyattn_attention_config_default(lazyattn_attention_config *cfg);
/* The same, under the name every other struct's defaults have. */
LAZYATTN_API void lazyattn_attention_config_init(lazyattn_attention_config *cfg);

/* ALiBi slope of head h (0 <= h < n_heads): the ALiBi paper's geometric
 * sequence, interpolated for a head count that is not a power of two. */
LAZYATTN_API int lazyattn_alibi_slope(int h, int n_heads, double *slope);

/* ---- context ---------------------------------------------------------- */

typedef struct lazyattn_context lazyattn_context;

typedef enum lazyattn_log_level {
    LAZYATTN_LOG_ERROR = 0,
    LAZYATTN_LOG_WARN = 1,
    LAZYATTN_LOG_INFO = 2,
    LAZYATTN_LOG_DEBUG = 3
} lazyattn_log_level;

typedef void (*lazyattn_log_fn)(void *user, lazyattn_log_level level, const char *message);

typedef enum lazyattn_device_kind {
    LAZYATTN_DEVICE_DEFAULT = 0, /* the first GPU, else the first CPU device */
    LAZYATTN_DEVICE_GPU = 1,
    LAZYATTN_DEVICE_CPU = 2,
    LAZYATTN_DEVICE_ANY = 3
} lazyattn_device_kind;

/* One OpenCL device, by its global index: every device of every platform,
 * platforms in the ICD loader's order, devices in the platform's order
 * (`clinfo -l` lists them the same way). Two identical GPUs have two
 * indices. */
typedef struct lazyattn_device_info {
    int index;            /* global index, 0 .. lazyattn_device_count() - 1 */
    int platform_index;   /* position of its platform */
    char platform[128];   /* platform name */
    char name[128];       /* device name */
    char vendor[128];
    lazyattn_device_kind kind; /* GPU, CPU, or ANY for accelerators and others */
    uint64_t global_memory;    /* bytes */
    int compute_units;
} lazyattn_device_info;

/* Number of OpenCL devices on all platforms (0 without an ICD). */
LAZYATTN_API int lazyattn_device_count(int *count);
/* NO_DEVICE for an index past the last. */
LAZYATTN_API int lazyattn_device_get_info(int index, lazyattn_device_info *info);

/* Device choice, in order of precedence: these options (device_index, then
 * the names and kind), then the environment, then the default (the first
 * GPU, else the first CPU device). Environment:
 *   LAZYATTN_DEVICE_INDEX=N  the device of global index N
 *   LAZYATTN_DEVICE=#N or N  the same (digits alone are an index, never a
 *                            name: "1" does not match "avx512")
 *   LAZYATTN_DEVICE=text     first device whose name contains text (any case)
 *   LAZYATTN_PLATFORM=text   only platforms whose name contains text
 *   LAZYATTN_PORTABLE=1      never use vendor fast paths */

/* How the kernel programs reach the device (README "Kernel programs: SPIR-V
 * or source"). The library embeds the OpenCL C source of every program and,
 * when built with clang + llvm-spirv, SPIR-V for a supported set of
 * (head dim, block size, storage) specialisations. */
typedef enum lazyattn_program_format {
    LAZYATTN_PROGRAM_DEFAULT = 0, /* the LAZYATTN_PROGRAM environment variable (auto, source
                                     or il) decides; unset = AUTO */
    LAZYATTN_PROGRAM_AUTO = 1,    /* SPIR-V where the device lists it in CL_DEVICE_IL_VERSION
                                     and a variant was built for the program, else source */
    LAZYATTN_PROGRAM_SOURCE = 2,  /* always the OpenCL C source */
    LAZYATTN_PROGRAM_IL = 3       /* SPIR-V only: creating a program that cannot use it fails
                                     with LAZYATTN_STATUS_UNSUPPORTED */
} lazyattn_program_format;

typedef struct lazyattn_context_options {
    const char *platform;      /* substring of the platform name; NULL = any */
    const char *device;        /* substring of the device name, or "#N" for index N;
                                  NULL = any */
    lazyattn_device_kind kind; /* default LAZYATTN_DEVICE_DEFAULT */
    int portable_only;         /* 1: portable kernels only; 0: env decides */
    int profiling;             /* 1: the context's queue has profiling enabled */
    lazyattn_log_fn log;       /* build logs and diagnostics; NULL = stderr for errors, or up to
                                  LAZYATTN_LOG=warn|info|debug */
    void *log_user;
    int device_index;          /* global index (lazyattn_device_get_info); -1 (what
                                  _init sets) = choose by name and kind. Fill the
                                  struct with lazyattn_context_options_init: 0 is
                                  device #0. */
    lazyattn_program_format program; /* default LAZYATTN_PROGRAM_DEFAULT; the log (level INFO)
                                        says which format each program was built from */
    const char *program_cache; /* a directory of built program binaries, shared by every
                                  context and process that names it: each program is compiled
                                  once per device and driver, then loaded (README "Kernel
                                  programs"). NULL = the LAZYATTN_PROGRAM_CACHE environment
                                  variable; unset or "" = no cache. Created when missing; one
                                  that cannot be used is skipped with a warning in the log. */
} lazyattn_context_options;

/* All defaults: any platform and name, kind DEFAULT, device_index -1. */
LAZYATTN_API void lazyattn_context_options_init(lazyattn_context_options *options);

/* Creates an OpenCL context and in-order queue on the chosen device.
 * options may be NULL (all defaults).
 * Thread-safe to share: pools and attention objects may be created on it
 * from several threads at once (its cache of built programs is locked; two
 * threads building the same program at once may both build it, one copy is
 * kept). Its queue is an OpenCL queue, safe to enqueue on from several
 * threads, but an engine gives each thread its own. The log callback may be
 * called from any thread that calls the library. Destroy it last, when no
 * thread uses it or anything created on it. */
LAZYATTN_API int lazyattn_context_create(const lazyattn_context_options *options,
                                         lazyattn_context **out);

/* Wraps an engine's own OpenCL objects (retained, released on destroy). */
LAZYATTN_API int lazyattn_context_create_from_cl(cl_context context, cl_device_id device,
                                                 cl_command_queue queue,
                                                 const lazyattn_context_options *options,
                                                 lazyattn_context **out);

LAZYATTN_API void lazyattn_context_destroy(lazyattn_context *ctx);

LAZYATTN_API cl_context lazyattn_context_cl_context(const lazyattn_context *ctx);
LAZYATTN_API cl_device_id lazyattn_context_device(const lazyattn_context *ctx);
LAZYATTN_API cl_command_queue lazyattn_context_queue(const lazyattn_context *ctx);
/* "Platform / Device" as the driver names them. */
LAZYATTN_API const char *lazyattn_context_device_name(const lazyattn_context *ctx);
/* 1 when kernels are built with the vendor fast path (LAZYATTN_FAST_NV). */
LAZYATTN_API int lazyattn_context_fast_path(const lazyattn_context *ctx);

/* lazyattn_context_build_program flags. */
#define LAZYATTN_BUILD_SM90A 1u /* Hopper-only PTX (wgmma, fence.proxy.async) behind "//@" markers */

/*
 * Builds an OpenCL program of the caller's own (e.g. serve/'s kernels) from
 * `source` on ctx's device with `options` (NULL: none). With
 * LAZYATTN_BUILD_SM90A the program goes through the library's PTX round trip:
 * its Hopper-only instructions are written inside inline asm behind a "//@"
 * marker (a PTX comment, so the source builds as sm_90 PTX); the PTX is read
 * back, unmarked, retargeted to sm_90a and rebuilt (the -cl-nv-* options
 * apply to both builds; INVALID_ARGUMENT when together they exceed 510
 * characters). UNSUPPORTED unless ctx's device is NVIDIA compute
 * capability 9.x, or when the built PTX has no "//@" marker;
 * BUILD_FAILED (with the log in lazyattn_last_error) when a build fails.
 * *out is the caller's to release (clReleaseProgram); NULL on error. Not
 * kept by ctx: build once, keep the kernels; with a program cache
 * (lazyattn_context_options.program_cache) the binary of a build without
 * LAZYATTN_BUILD_SM90A is stored there and loaded by the next context that
 * asks for the same source and options on the same device. Thread-safe
 * (uses only ctx's OpenCL context and device).
 */
LAZYATTN_API int lazyattn_context_build_program(lazyattn_context *ctx, const char *source,
                                                const char *options, unsigned flags,
                                                cl_program *out);

/* ---- packed block-table entries ---------------------------------------- */

/*
 * One 64-bit word per block-table entry, decoded in a kernel from one
 * register:
 *
 *   bits  0..30  physical block id      31 bits, 0 .. 2^31-1
 *   bits 31..38  valid length - 1        8 bits, length 1 .. 256
 *   bits 39..63  delta, two's complement 25 bits, -2^24 .. 2^24-1
 *
 * delta = logical start - stored start of the block. The same encode and
 * decode macros (cl/block_entry.h) are compiled into the host and into
 * every kernel; the build asserts that they match the constants below.
 * Values that do not fit give LAZYATTN_STATUS_OUT_OF_RANGE.
 */
#define LAZYATTN_ENTRY_BLOCK_BITS 31
#define LAZYATTN_ENTRY_LENGTH_BITS 8
#define LAZYATTN_ENTRY_DELTA_BITS 25
#define LAZYATTN_ENTRY_MAX_BLOCK ((int64_t)0x7FFFFFFF)
#define LAZYATTN_ENTRY_MIN_DELTA (-((int64_t)1 << 24))
#define LAZYATTN_ENTRY_MAX_DELTA (((int64_t)1 << 24) - 1)

LAZYATTN_API int lazyattn_entry_pack(int64_t block, int64_t delta, int64_t valid_length,
                                     uint64_t *word);
LAZYATTN_API int lazyattn_entry_unpack(uint64_t word, int32_t *block, int32_t *delta,
                                       int32_t *valid_length);

/* ---- block pool ------------------------------------------------------- */

/*
 * Paged K/V storage under a hard byte budget. A block holds block_size
 * tokens of K and V for every layer and KV head:
 *   block_bytes = 2 * n_layers * n_kv_heads * block_size * head_dim * dtype_size
 *   n_blocks    = budget_bytes / block_bytes
 * Device layout, one K and one V buffer per layer:
 *   k(layer), v(layer): [n_blocks, n_kv_heads] pages of block_size x head_dim
 *     dtype elements; in a page, kv_layout's order (lazyattn_kv_layout):
 *     ROWS [block_size, head_dim], the default, so the buffer is
 *     [n_blocks, n_kv_heads, block_size, head_dim]; TILED
 *     [block_size / 8, head_dim / 8, 8, 8]
 * A pool created with ctx == NULL keeps the accounting only (no device
 * memory): the cache simulator uses it.
 *
 * Thread-safe: alloc, free, is_allocated, get_info and get_config may be
 * called from any number of threads at once (one mutex), so several caches
 * on several threads can share one pool. A block is handed to one caller
 * at a time. Between a cache's eviction and its allocation another thread
 * may take the freed blocks: a request then gets BUDGET_EXCEEDED, as it
 * would had the other thread come first.
 *
 * Refused up front, before anything is allocated: n_layers outside
 * 1..LAZYATTN_MAX_LAYERS, a geometry outside the limits above, a kv_layout
 * that is neither ROWS nor TILED, or TILED with a block_size not a multiple
 * of 8 (INVALID_ARGUMENT); a budget below one block (BUDGET_EXCEEDED); on a
 * device, one layer's K buffer above CL_DEVICE_MAX_MEM_ALLOC_SIZE or all
 * layers' K and V together above CL_DEVICE_GLOBAL_MEM_SIZE
 * (OUT_OF_DEVICE_MEMORY); more than LAZYATTN_MAX_POOL_BLOCKS blocks
 * (OUT_OF_RANGE). Each message names the number that does not fit.
 */
typedef struct lazyattn_pool lazyattn_pool;

typedef struct lazyattn_pool_config {
    int n_layers;
    int n_kv_heads;
    int head_dim;
    int block_size;
    lazyattn_dtype dtype;
    uint64_t budget_bytes;
    lazyattn_kv_layout kv_layout; /* appended: order inside a page; default ROWS; TILED
                                   * needs block_size a multiple of 8 */
} lazyattn_pool_config;

/* The KV shape of lazyattn_attention_config_default's model (Llama-3.1-8B:
 * 32 layers x 8 KV heads x d = 128, B = 16, f16) under a 1 GiB budget. */
LAZYATTN_API void lazyattn_pool_config_init(lazyattn_pool_config *config);

typedef struct lazyattn_pool_info {
    int64_t n_blocks;      /* capacity under the budget */
    int64_t n_used;        /* allocated now */
    int64_t peak_used;     /* most ever allocated at once */
    uint64_t block_bytes;  /* bytes of one block, all layers, K and V */
    uint64_t bytes_in_use; /* n_used * block_bytes */
    uint64_t budget_bytes;
    int64_t n_allocs;      /* blocks handed out so far */
    int64_t n_frees;       /* blocks returned so far */
} lazyattn_pool_info;

LAZYATTN_API int lazyattn_pool_create(lazyattn_context *ctx, const lazyattn_pool_config *config,
                                      lazyattn_pool **out);
/* Frees the pool, its device buffers and accounting. With caches still
 * attached, the pool stays alive for them (their entries, requests and
 * blocks keep working) and is freed by the destroy of the last one; a
 * warning goes to the context's log callback. Either way the handle is the
 * caller's no more: a new cache on it gets INVALID_ARGUMENT, and a second
 * destroy is refused (logged as an error). */
LAZYATTN_API void lazyattn_pool_destroy(lazyattn_pool *pool);

/* All or nothing: n ids written to ids[0..n), or BUDGET_EXCEEDED and none. */
LAZYATTN_API int lazyattn_pool_alloc(lazyattn_pool *pool, int n, int32_t *ids);
/* All or nothing: an id out of range or not allocated gives INVALID_ARGUMENT
 * and frees none. */
LAZYATTN_API int lazyattn_pool_free(lazyattn_pool *pool, int n, const int32_t *ids);
/* 1 if the block is allocated, 0 if free or out of range. */
LAZYATTN_API int lazyattn_pool_is_allocated(const lazyattn_pool *pool, int32_t id);
LAZYATTN_API int lazyattn_pool_get_info(const lazyattn_pool *pool, lazyattn_pool_info *info);
LAZYATTN_API int lazyattn_pool_get_config(const lazyattn_pool *pool, lazyattn_pool_config *config);
/*
 * Reuse after use. A block freed (a request destroyed, an entry evicted) may
 * still be read by commands already enqueued, on any queue; the pool hands it
 * out again at once, but nothing the library enqueues writes it before those
 * commands have completed (as CUDA's stream-ordered allocator and vLLM's
 * deferred frees do):
 *  - the queue of every command the library enqueues over the pool
 *    (lazyattn_write_kv, lazyattn_prefill, lazyattn_prefill_batched,
 *    lazyattn_decode, lazyattn_materialise) is remembered (retained);
 *  - a free enqueues a marker on each queue launched on since the last
 *    free, and stamps its blocks with the markers still pending;
 *  - a write into blocks handed out again (lazyattn_write_kv,
 *    lazyattn_materialise, an import, a tier load) first enqueues, on its own
 *    queue, a barrier on those of them still pending (flushing their queues).
 *    So the host never waits, except in the synchronous import and tier load,
 *    which wait for their upload and so for those readers; no barrier at all
 *    when nothing freed is still being read. A pipelined tier upload is
 *    such a use too: a block freed while it is in flight is rewritten
 *    after it.
 * An engine whose own kernels read or write pool blocks records their events
 * with lazyattn_pool_record_use (before it frees the blocks they use), and
 * before its own kernels write blocks a request or lazyattn_pool_alloc handed
 * out, calls lazyattn_pool_order_writes on the queue they run on.
 */
/* Records n commands of the engine's own over the pool's blocks (their
 * events retained until seen complete; a user event, too). Device pools
 * only (INVALID_ARGUMENT for a bookkeeping pool, a NULL or invalid event). */
LAZYATTN_API int lazyattn_pool_record_use(lazyattn_pool *pool, int n, const cl_event *events);
/* Enqueues on queue (NULL = the context's) a barrier on the recorded
 * commands that may still read blocks handed out again since their free;
 * nothing when there are none. Call before writing such blocks with
 * kernels of your own. */
LAZYATTN_API int lazyattn_pool_order_writes(lazyattn_pool *pool, cl_command_queue queue);
/*
 * Loads in flight. A tier load (lazyattn_cache_set_tier_options,
 * LAZYATTN_TIER_LOAD_PIPELINED) uploads a document's blocks layer by
 * layer on a copy queue of its own and returns before they are in place;
 * every command the library enqueues that reads a layer's blocks
 * (lazyattn_prefill, lazyattn_prefill_batched, lazyattn_decode,
 * lazyattn_materialise, an export, the tier's writer) first enqueues, on
 * its queue, a barrier on the uploads into that layer still in flight, and
 * on no other layer's. An engine whose own kernels read pool blocks calls
 * this before them: a barrier on queue (NULL = the context's) for the
 * uploads into layer (-1: into every layer) not complete yet; nothing
 * when there are none. INVALID_ARGUMENT for a bookkeeping pool or a layer
 * outside -1..n_layers-1.
 */
LAZYATTN_API int lazyattn_pool_order_reads(lazyattn_pool *pool, int layer, cl_command_queue queue);
/* Device buffers of one layer; NULL for a bookkeeping pool or a bad layer,
 * with the reason in lazyattn_last_error(). */
LAZYATTN_API cl_mem lazyattn_pool_k_buffer(const lazyattn_pool *pool, int layer);
LAZYATTN_API cl_mem lazyattn_pool_v_buffer(const lazyattn_pool *pool, int layer);

/* ---- attention kernels -------------------------------------------------- */

/* Built kernels for one attention configuration, plus small device tables
 * (frequencies, ALiBi slopes) and the decode scratch. Not thread-safe: one
 * thread at a time, one per queue (its kernels' arguments are set at each
 * launch). Creating attention objects on one context from several threads
 * at once is safe. */
typedef struct lazyattn_attention lazyattn_attention;

LAZYATTN_API int lazyattn_attention_create(lazyattn_context *ctx,
                                           const lazyattn_attention_config *config,
                                           lazyattn_attention **out);
LAZYATTN_API void lazyattn_attention_destroy(lazyattn_attention *attn);
LAZYATTN_API int lazyattn_attention_get_config(const lazyattn_attention *attn,
                                               lazyattn_attention_config *config);

/*
 * Launch geometry of the portable kernels (cl/flash.h, cl/decode.cl),
 * CLBlast style: each field becomes a -D build option. Zero in any field
 * means "choose": from the tuning database (lib/attn/tuning_db.inc, written by
 * examples/tune_kernels) for this device name, head_dim, group and dtype,
 * else from the device's local memory, compute units and work-group limit.
 * A prefill tile is a register-tiled flash attention step over `keys` key
 * slots for `rows` rows (rows = query tokens x the group's query heads).
 * The decode (no local staging of K/V) uses: rows = query heads per
 * work-group (always chosen: the largest divisor of the group up to 8 that
 * fits), keys = key slots per chunk (whole blocks, at least one), work_group,
 * out_dims = dims per work-item in its output step, score_keys = V rows in
 * flight per work-item there; the other fields are checked but unused.
 * With kv_together 3 the decode is the small-work-group kernel
 * (cl/decode_warp.cl): keys = keys per batch (a divisor of the block is
 * taken), work_group a multiple of head_dim / out_dims, out_dims = dims per
 * work-item, score_keys 2 = the next batch's K rows loaded before a batch's
 * dot products, prefetch 1 = its split-parallel reduction, 2 decode.cl's
 * (a work-group per row walking the splits), 3 the split-parallel one from
 * 64 splits on and decode.cl's below.
 *
 * Limits: the prefill's tiles need about 4 * ((rows + keys * buffers) *
 * (head_dim + 4) + (rows + 4) * (keys + keys / score_keys)) bytes of local memory (buffers: 2 with kv_together 1, else
 * 1); when the smallest tiles (rows = the group, keys shrunk) exceed the
 * device's local memory (CL_DEVICE_LOCAL_MEM_SIZE) the configuration is
 * refused with LAZYATTN_STATUS_UNSUPPORTED naming the local memory: e.g. 64
 * query heads per KV head with head_dim 256 on NVIDIA's 48 KiB, 32 per KV
 * head with head_dim 256 on a 32 KiB device. The limit is the device's, not
 * the library's: the same configuration may run elsewhere. Block sizes do
 * not enter it.
 */
typedef struct lazyattn_tile_params {
    int rows;        /* prefill: multiple of the group; decode: chosen (heads per work-group) */
    int keys;        /* key slots per staged tile, >= 1 */
    int work_group;  /* work-items per group, >= 1 and <= the device's limit */
    int score_rows;  /* register tile of scores: rows x keys per work-item. decode (1..13,
                      * 0: choose = 1): how the scores read the K rows (cl/decode.cl
                      * LZ_FRM): 1 a whole row per key, 2..9 rings of row parts, 6 and
                      * 10..13 several keys against one read of the query */
    int score_keys;  /* divides keys. decode: V rows in flight per work-item */
    int out_rows;    /* register tile of the output: rows x dims per work-item. decode (1..4,
                      * 0: choose = 1): 1 + 1 if the output sums stay in local memory
                      * outside the output step + 2 if the probabilities are key-major */
    int out_dims;    /* multiple of 4 dividing head_dim */
    int kv_together; /* 1: K and V tiles in two buffers (loads in flight together), 2: one buffer; 0: choose.
                      * decode: 1 a ring of two V batches (the next batch's loads issued
                      * before one is used), 2 one batch at a time, 3 the small-work-group
                      * kernel (cl/decode_warp.cl, see above) */
    int prefetch;    /* prefill, 1: with kv_together 1 the next K/V tile is loaded into
                      * registers while one is computed, with kv_together 2 V is loaded
                      * with K (staged after the scores); 3 (kv_together 2): the next
                      * K tile is loaded during the output step; 2: none; 0: choose.
                      * decode: L2 prefetch of the chunk's V rows (while K is read) and
                      * the next chunk's K rows (while V is read): 1 OpenCL's prefetch(),
                      * 3 PTX prefetch.global.L2 on NVIDIA (prefetch() elsewhere), 4 / 5
                      * only the V / K rows (as 3), 2 none. On the H200 NVIDIA's compiler
                      * drops prefetch() and 3..5 were slower (docs/PERFLOG.md, p7-decode
                      * call 3) */
} lazyattn_tile_params;

typedef struct lazyattn_kernel_tuning {
    lazyattn_tile_params prefill;
    lazyattn_tile_params decode;
    int decode_groups_per_cu; /* decode split-KV target: work-groups per compute unit; 0: choose */
} lazyattn_kernel_tuning;

/* Like lazyattn_attention_create, with the portable kernels' geometry given
 * (tuning may be NULL: all chosen). Fields outside their range give
 * INVALID_ARGUMENT; tiles that do not fit the device give UNSUPPORTED. */
LAZYATTN_API int lazyattn_attention_create_tuned(lazyattn_context *ctx,
                                                 const lazyattn_attention_config *config,
                                                 const lazyattn_kernel_tuning *tuning,
                                                 lazyattn_attention **out);
/* The geometry in use (every field resolved). */
LAZYATTN_API int lazyattn_attention_get_tuning(const lazyattn_attention *attn,
                                               lazyattn_kernel_tuning *tuning);

/*
 * The kernels never read or write outside the pool or the tables, and never
 * use a position outside 0..LAZYATTN_MAX_POSITION: a bad value is skipped
 * and recorded on the device. Recorded are: a block id outside the pool; a
 * valid length above the block size; a write slot outside the pool; a write
 * (stored_pos) or rotation (rope_apply pos) position out of range; a query
 * position q_pos out of range (that query sees no key: its output is
 * zeros); an entry whose logical positions entry_pos[e] .. entry_pos[e] +
 * length - 1 or stored positions (entry_pos[e] - delta) + 0 .. length - 1
 * leave 0..LAZYATTN_MAX_POSITION (the entry is skipped); sequence offsets
 * outside the table or past max_entries (decode), or bad query and table
 * offsets (lazyattn_prefill_batched; the sequence is skipped). This call
 * waits for the queue, returns OUT_OF_RANGE with the detail if
 * anything was recorded since the last call, and clears the record. Call it
 * after a step when the tables come from untrusted input (tests do after
 * every launch).
 */
LAZYATTN_API int lazyattn_attention_check(lazyattn_attention *attn, cl_command_queue queue);

/*
 * Writes K/V of new tokens into pool blocks, K rotated at its stored position.
 *   k, v:       [n_tokens, n_kv_heads, head_dim] f32, k unrotated
 *   slots:      [n_tokens] int32, physical_block * block_size + offset
 *   stored_pos: [n_tokens] int32, the position K is rotated at
 */
LAZYATTN_API int lazyattn_write_kv(lazyattn_attention *attn, lazyattn_pool *pool, int layer,
                                   int n_tokens, cl_mem k, cl_mem v, cl_mem slots,
                                   cl_mem stored_pos, cl_command_queue queue, cl_event *event);

/*
 * lazyattn_write_kv of the tokens, and lazyattn_rope_apply of their queries
 * (q rotated in place at q_pos), in one launch (the same results as the two
 * calls).
 *   q:     [n_tokens, n_q_heads, head_dim] f32
 *   q_pos: [n_tokens] int32
 */
LAZYATTN_API int lazyattn_write_kv_rope_q(lazyattn_attention *attn, lazyattn_pool *pool, int layer,
                                          int n_tokens, cl_mem k, cl_mem v, cl_mem slots,
                                          cl_mem stored_pos, cl_mem q, cl_mem q_pos,
                                          cl_command_queue queue, cl_event *event);

/*
 * Rotates x in place at the given positions (e.g. queries at their logical
 * positions). No-op for LAZYATTN_ROPE_NONE.
 *   x:   [n_tokens, n_heads, head_dim] f32
 *   pos: [n_tokens] int32
 */
LAZYATTN_API int lazyattn_rope_apply(lazyattn_attention *attn, int n_tokens, int n_heads, cl_mem x,
                                     cl_mem pos, cl_command_queue queue, cl_event *event);

/*
 * Prefill of one sequence: n_queries new tokens over a block table that
 * holds the whole visible context, the new tokens' own blocks included
 * (write them first with lazyattn_write_kv). Key j of entry e sits at
 * logical position entry_pos[e] + j and is visible to query t iff
 * key position <= q_pos[t]. Each entry's K tile is rotated once by its delta.
 * entry_pos[e] is the entry's logical start; its stored start (the position
 * its K was written at) is entry_pos[e] - delta. Both, over the entry's
 * valid length, and every q_pos must lie in 0..LAZYATTN_MAX_POSITION; an
 * entry or query outside is skipped and recorded (lazyattn_attention_check).
 *   q:         [n_queries, n_q_heads, head_dim] f32 (or q_dtype), rotated at q_pos
 *   q_pos:     [n_queries] int32 logical positions
 *   table:     [n_entries] packed uint64 entries (lazyattn_entry_pack)
 *   entry_pos: [n_entries] int32 logical start of each entry
 *   out:       [n_queries, n_q_heads, head_dim] f32 (or out_dtype)
 *   q_dtype, out_dtype: element type of q and out (0 = F32; F16 and BF16
 *              are converted on load and store, round-to-nearest-even; no
 *              cl_khr_fp16 needed); the buffers hold that many bytes per element.
 *              q must already be rotated (lazyattn_rope_apply takes f32 only:
 *              rotate in f32, or in the engine, before converting)
 *   lse:       optional [n_queries, n_q_heads] f32, NULL = none: the natural-log
 *              log-sum-exp of the scaled scores (ALiBi included) each row
 *              attended over, -INFINITY for a row that saw no key (its output
 *              is zeros). Attention over disjoint key sets merges as
 *              out = sum_i exp(lse_i - lse) out_i, lse = log(sum_i exp(lse_i)).
 * On the NVIDIA tensor-core path a call with lse or a non-F32 q/out dtype
 * runs the portable kernels (correct, slower).
 */
typedef struct lazyattn_prefill_args {
    int n_queries;
    int n_entries;
    cl_mem q;
    cl_mem q_pos;
    cl_mem table;
    cl_mem entry_pos;
    cl_mem out;
    cl_mem lse;               /* appended: NULL = none */
    lazyattn_dtype q_dtype;   /* appended: 0 = F32 */
    lazyattn_dtype out_dtype; /* appended: 0 = F32 */
} lazyattn_prefill_args;

/* Zero counts, NULL buffers (no lse), F32 q/out: fill every field before lazyattn_prefill. */
LAZYATTN_API void lazyattn_prefill_args_init(lazyattn_prefill_args *args);

LAZYATTN_API int lazyattn_prefill(lazyattn_attention *attn, const lazyattn_pool *pool, int layer,
                                  const lazyattn_prefill_args *args, cl_command_queue queue,
                                  cl_event *event);

/*
 * Batched ragged prefill: n_seqs sequences in one launch, each a range of
 * query rows over its own range of the block table, with lazyattn_prefill's
 * semantics per sequence (causal by position, deltas, bad entries and
 * positions skipped and recorded). Sequence s is query rows
 * q_indptr[s] .. q_indptr[s+1]-1 of q / q_pos / out over table entries
 * table_indptr[s] .. table_indptr[s+1]-1 (entry_pos likewise); its queries
 * see only its own entries. So one launch can prefill a request's missed
 * documents in isolation (each document a sequence over its own entries:
 * the plan's segment entries as they are, queries at plan.prefill_pos, or
 * at document-local positions, entries at 0, B, 2B, ... with delta 0; RoPE
 * and ALiBi depend on relative positions only, so both give the document's
 * isolated encoding) next to several requests' new tokens (each over its
 * request's whole table; ranges are consecutive, so a segment that must see
 * entries of other sequences needs them again in the table). Each
 * sequence's output is bit-identical to lazyattn_prefill of that sequence
 * alone (the same kernel core and tiles, on both kernel paths). The
 * portable kernel is built at the first call (a program of its own).
 *   q:            [n_queries, n_q_heads, head_dim] f32 (or q_dtype), rotated at q_pos
 *   q_pos:        [n_queries] int32 logical positions
 *   q_indptr:     [n_seqs + 1] int32, non-decreasing, q_indptr[n_seqs] <= n_queries;
 *                 an empty sequence (q_indptr[s] == q_indptr[s+1]) is allowed
 *   table_indptr: [n_seqs + 1] int32, non-decreasing, at most n_entries; a
 *                 sequence with no entries sees no key (its output is zeros)
 *   table:        [n_entries] packed uint64 entries (lazyattn_entry_pack)
 *   entry_pos:    [n_entries] int32 logical start of each entry
 *   out:          [n_queries, n_q_heads, head_dim] f32; rows of no sequence
 *                 are not written
 *   q_dtype, out_dtype, lse: as in lazyattn_prefill (lse [n_queries, n_q_heads]
 *                 f32; rows of no sequence are not written; NVIDIA: portable kernels)
 *   max_queries:  the most query rows of any one sequence (sizes the launch:
 *                 n_seqs x ceil(max_queries / tile rows) work-groups per KV
 *                 head), 1 .. n_queries
 * The host checks sizes, NULLs and buffer sizes (INVALID_ARGUMENT,
 * OUT_OF_RANGE for sizes that overflow). The indptr arrays are read on the
 * device only: a sequence whose offsets are negative, decreasing, past
 * n_queries or n_entries, or span more than max_queries rows is skipped
 * whole (nothing of it read or written) and recorded, and so are the
 * sequences after a decrease of q_indptr (their rows could overlap an
 * earlier sequence's); lazyattn_attention_check reports it as "sequence
 * offsets outside the table or the queries, decreasing, or past
 * max_entries / max_queries" (OUT_OF_RANGE).
 */
typedef struct lazyattn_prefill_batch_args {
    int n_seqs;
    int n_queries;   /* rows q, q_pos and out hold */
    int n_entries;   /* entries table and entry_pos hold (>= 0) */
    int max_queries;
    cl_mem q;
    cl_mem q_pos;
    cl_mem q_indptr;
    cl_mem table_indptr;
    cl_mem table;
    cl_mem entry_pos;
    cl_mem out;
    cl_mem lse;               /* appended: [n_queries, n_q_heads] f32 or NULL (rows of no sequence untouched) */
    lazyattn_dtype q_dtype;   /* appended: 0 = F32 */
    lazyattn_dtype out_dtype; /* appended: 0 = F32 */
} lazyattn_prefill_batch_args;

/* Zero counts, NULL buffers (no lse), F32 q/out: fill every field before
 * lazyattn_prefill_batched. */
LAZYATTN_API void lazyattn_prefill_batch_args_init(lazyattn_prefill_batch_args *args);

LAZYATTN_API int lazyattn_prefill_batched(lazyattn_attention *attn, const lazyattn_pool *pool,
                                          int layer, const lazyattn_prefill_batch_args *args,
                                          cl_command_queue queue, cl_event *event);

/*
 * Decode: one query token for each of n_seqs sequences, each over its own
 * block table (its own token already written). The query is re-rotated by
 * -delta whenever the delta changes from one entry to the next; K and V are
 * read as a non-lazy kernel reads them. Long contexts are split along the
 * KV length and reduced.
 *   q:           [n_seqs, n_q_heads, head_dim] f32 (or q_dtype), rotated at q_pos
 *   q_pos:       [n_seqs] int32
 *   seq_offsets: [n_seqs + 1] int32, entries of sequence s are
 *                table[seq_offsets[s] .. seq_offsets[s+1])
 *   table:       [seq_offsets[n_seqs]] packed uint64
 *   entry_pos:   [seq_offsets[n_seqs]] int32 logical start of each entry
 *                (stored start = entry_pos - delta; checked as in prefill)
 *   max_entries: the most entries of any one sequence (sizes the split),
 *                at most the entries the table buffer holds
 *   n_splits:    KV splits per sequence, 0 = chosen from the device size
 *   out:         [n_seqs, n_q_heads, head_dim] f32 (or out_dtype)
 *   q_dtype, out_dtype: element type of q and out (0 = F32; F16 and BF16
 *              are converted on load and store, round-to-nearest-even; no
 *              cl_khr_fp16 needed); the buffers hold that many bytes per element.
 *              q must already be rotated (lazyattn_rope_apply takes f32 only:
 *              rotate in f32, or in the engine, before converting)
 *   lse:       optional [n_seqs, n_q_heads] f32, NULL = none: the natural-log
 *              log-sum-exp of the scaled scores (ALiBi included) each row
 *              attended over, -INFINITY for a row that saw no key (its output
 *              is zeros). Attention over disjoint key sets merges as
 *              out = sum_i exp(lse_i - lse) out_i, lse = log(sum_i exp(lse_i)).
 * On the NVIDIA tensor-core path a call with lse or a non-F32 q/out dtype
 * runs the portable kernels (correct, slower).
 */
typedef struct lazyattn_decode_args {
    int n_seqs;
    int max_entries;
    int n_splits;
    cl_mem q;
    cl_mem q_pos;
    cl_mem seq_offsets;
    cl_mem table;
    cl_mem entry_pos;
    cl_mem out;
    cl_mem lse;               /* appended: [n_seqs, n_q_heads] f32 or NULL (from the splits' max and sum) */
    lazyattn_dtype q_dtype;   /* appended: 0 = F32 */
    lazyattn_dtype out_dtype; /* appended: 0 = F32 */
} lazyattn_decode_args;

/* Zero counts, NULL buffers (no lse), F32 q/out, n_splits 0 (chosen from the device). */
LAZYATTN_API void lazyattn_decode_args_init(lazyattn_decode_args *args);

LAZYATTN_API int lazyattn_decode(lazyattn_attention *attn, const lazyattn_pool *pool, int layer,
                                 const lazyattn_decode_args *args, cl_command_queue queue,
                                 cl_event *event);

/*
 * Materialise (the position-aware baseline): for each i, copy the valid
 * tokens of block src[i] into block dst[i] with K re-rotated by the entry's
 * delta (a new block whose stored start is the logical start) and V copied.
 *   src: [n] packed uint64 entries (source block, delta, valid length)
 *   dst: [n] int32 destination block ids
 */
LAZYATTN_API int lazyattn_materialise(lazyattn_attention *attn, lazyattn_pool *pool, int layer,
                                      int n, cl_mem src, cl_mem dst, cl_command_queue queue,
                                      cl_event *event);

/* The float64 reference, the normalised error and the RAG workload
 * generator (helpers for tests, examples and benchmarks) are declared in
 * lazyattn_testing.h, installed next to this header. */

/* ==== document cache and policies: see the section below ================ */
/* LAZYATTN_CACHE_API_BEGIN */

/* ---- document hashing ---------------------------------------------------- */

/* A document's identity under a model identity (two models, or two layer
 * sets, never share an entry), stable across runs and hosts: the digest is
 * BLAKE2b-256 (unkeyed, 32-byte output) of the bytes
 *   model_id as u64 little-endian, then tokens[0..n_tokens) each as i32
 *   little-endian   (8 + 4 n_tokens bytes)
 * and the hash is the digest's first 8 bytes read as a little-endian u64
 * (an in-process key: a cache compares tokens as well, so a 64-bit
 * collision costs a recompute, never a wrong answer). Identities that leave
 * the process (exports, store keys) carry the whole digest.
 *   tokens: [n_tokens] int32, n_tokens >= 1 */
LAZYATTN_API int lazyattn_doc_hash(uint64_t model_id, const int32_t *tokens, int n_tokens,
                                   uint64_t *hash);
/*   digest: [32] bytes */
LAZYATTN_API int lazyattn_doc_digest(uint64_t model_id, const int32_t *tokens, int n_tokens,
                                     uint8_t digest[32]);

/* ---- document KV cache ---------------------------------------------------- */

/*
 * A registry of cached KV blocks on top of a block pool, behind one of four
 * policies. The cache never changes an answer, only its cost: every plan it
 * gives describes the same logical prompt (contiguous positions, documents
 * encoded independently); the policies differ only in what is reused,
 * re-rotated (copied) or recomputed.
 *
 *  LAZY      one entry per document (key: hash of its tokens), keys stored
 *            at document-local positions (stored start of block j = j*B);
 *            reused at any logical start l with delta = l - 0 (+ j*B - j*B).
 *  POSITION  Block-Attention: entries keyed by (document, logical start).
 *            Exact start: reuse (delta 0). Cached at another start: a copy
 *            hit, new blocks materialised from the old ones (re-rotated by
 *            the old entry's delta). Otherwise recompute at the logical start.
 *  PREFIX    vLLM automatic prefix caching: one entry per block, key =
 *            hash(parent key, block tokens), the chain rooted at a hash of
 *            the request's prefix tokens; reuse is the longest cached chain
 *            from the start of the prompt. Each document starts a new block,
 *            so a document's last block may be partial.
 *  NONE      recompute every document every request; freed at release.
 *
 * The prefix, the question and generated tokens always live in the
 * request's own blocks (stored start = logical start), for every policy.
 *
 * Entries become visible to lookups only once committed (the request that
 * computed them calls lazyattn_request_commit). An entry in use by a live
 * request is pinned (reference counted) and never evicted; unpinned entries
 * are evicted least recently used first, when the pool needs room and
 * whenever the bytes of all committed entries exceed retain_bytes.
 *
 * Several caches may share one pool; each evicts only its own entries. A
 * cache and its requests are not thread-safe: one thread at a time uses a
 * cache and its requests (one cache per scheduler thread); caches on one
 * pool may run on different threads at once. Every function on a cache or
 * its requests (stats, validate, probe and export too) takes a busy flag of
 * the cache for its duration (one atomic compare-exchange, one store): a
 * second thread coming in meanwhile gets IN_USE ("<function>: the cache is
 * in use by another call ..."), and a destroy then does nothing (the reason
 * in lazyattn_last_error() and logged at ERROR). A net for a forbidden use,
 * not a lock: nothing waits. A cache keeps its pool alive
 * (lazyattn_pool_destroy).
 */
typedef struct lazyattn_cache lazyattn_cache;

typedef enum lazyattn_cache_policy {
    LAZYATTN_CACHE_POLICY_LAZY = 0,
    LAZYATTN_CACHE_POLICY_POSITION = 1,
    LAZYATTN_CACHE_POLICY_PREFIX = 2,
    LAZYATTN_CACHE_POLICY_NONE = 3
} lazyattn_cache_policy;

/* "lazy", "position", "prefix", "none" (NULL for an unknown value). */
LAZYATTN_API const char *lazyattn_cache_policy_name(lazyattn_cache_policy policy);
/* Parses the names above (also "position-aware", "block-attention", "vllm"). */
LAZYATTN_API int lazyattn_cache_policy_parse(const char *name, lazyattn_cache_policy *policy);

/* A committed entry the cache is about to evict (see lazyattn_evict_fn).
 * LAZY and POSITION: doc_hash is lazyattn_doc_hash(model_id, tokens) of the
 * document (LAZY: the key lazyattn_cache_export takes); PREFIX: the
 * block's chain key. */
typedef struct lazyattn_evicted {
    lazyattn_cache_policy policy;
    uint64_t doc_hash;
    int n_tokens;
    int n_blocks;
    int32_t stored_start; /* position its first key is rotated at (LAZY: 0) */
    uint8_t digest[32];   /* LAZY and POSITION: lazyattn_doc_digest of the document
                             (its store key); PREFIX: zero */
} lazyattn_evicted;

/* Called for every committed entry the cache evicts (to make room in the
 * pool, to stay under retain_bytes, or by lazyattn_cache_trim), before its
 * blocks are freed, so that an engine can spill it (lazyattn_cache_export
 * of entry->doc_hash works on this cache during the call). Not called by
 * lazyattn_cache_destroy. The callback must not change the cache: request
 * create/commit/append, trim, reset_stats, import, set_tier,
 * set_evict_callback and validate on it are refused (INVALID_ARGUMENT)
 * during the call; request and cache destroy do nothing then (the reason
 * in lazyattn_last_error(), logged at ERROR). Reads answer: get_stats,
 * probe, export, export_size, export_to, request_get_plan. The same holds
 * inside a tier store's operations (lazyattn_store_ops). A log callback
 * that calls the cache back is refused everything (INVALID_ARGUMENT). */
typedef void (*lazyattn_evict_fn)(void *user, lazyattn_cache *cache,
                                  const lazyattn_evicted *entry);

typedef struct lazyattn_cache_config {
    lazyattn_cache_policy policy;
    uint64_t model_id;     /* mixed into every key; part of an export's identity */
    uint64_t retain_bytes; /* most bytes of committed entries kept once unpinned;
                              0 = the pool's budget */
} lazyattn_cache_config;

/* LAZY, model 0, retain = the pool's budget. */
LAZYATTN_API void lazyattn_cache_config_init(lazyattn_cache_config *config);

/* Counters since creation or the last lazyattn_cache_reset_stats. A lookup
 * is one document of one request. Token and block counts are document
 * tokens/blocks only (prefix and question are never documents). */
typedef struct lazyattn_cache_stats {
    int64_t requests;         /* requests planned */
    int64_t lookups;          /* documents looked up */
    int64_t hits;             /* documents served whole from the cache (no copy) */
    int64_t partial_hits;     /* PREFIX: documents with some, not all, blocks cached */
    int64_t copy_hits;        /* POSITION: documents re-rotated from another start */
    int64_t misses;           /* documents recomputed whole */
    int64_t doc_tokens;       /* document tokens requested */
    int64_t hit_tokens;       /* of which served from the cache as is */
    int64_t copy_tokens;      /* of which served by a copy */
    int64_t doc_blocks;       /* document blocks requested */
    int64_t hit_blocks;
    int64_t copy_blocks;
    int64_t inserts;          /* entries committed */
    int64_t evictions;        /* entries evicted */
    int64_t evicted_blocks;
    int64_t budget_failures;  /* requests refused with BUDGET_EXCEEDED */
    /* state now (not reset) */
    int64_t n_entries;        /* committed entries */
    int64_t n_pinned;         /* of which pinned */
    int64_t n_requests_live;
    uint64_t entry_bytes;     /* bytes of committed entries */
    uint64_t peak_entry_bytes;
    uint64_t bytes_in_use;    /* bytes of every block this cache holds (entries,
                                 requests' own and pending blocks) */
    uint64_t peak_bytes_in_use;
    /* counters, reset like the ones above */
    int64_t imports;          /* documents imported (lazyattn_cache_import*, and
                                 loads from the tier) */
    /* document tier (lazyattn_cache_set_tier); counters, reset like the
     * ones above. A document is a GPU hit (hits), a tier hit or recomputed
     * (misses): hits + tier_hits + misses = lookups for a LAZY cache, and
     * tier_lookups = tier_hits + tier_misses + tier_errors + tier_rejected.
     * Lookups are counted with their request, as lookups are: a request
     * refused (BUDGET_EXCEEDED) counts none (what it imported stays cached
     * and counts in imports). Writes are counted when they happen. */
    int64_t tier_lookups;     /* GPU misses looked up in the tier */
    int64_t tier_hits;        /* of which loaded from the tier, not recomputed */
    int64_t tier_hit_tokens;  /* their tokens (not in hit_tokens) */
    int64_t tier_misses;      /* not in the store */
    int64_t tier_errors;      /* the store failed (down, timed out, I/O) or the loaded
                                 document could not be placed: recomputed */
    int64_t tier_rejected;    /* the store's value was refused (truncated, corrupt,
                                 another identity): recomputed, nothing entered */
    int64_t tier_writes;      /* documents written to the store */
    int64_t tier_write_errors;/* writes the store refused (full disk, down...); the
                                 cache is unchanged by them */
    uint64_t tier_read_bytes; /* bytes loaded from the store */
    uint64_t tier_write_bytes;
    int64_t recomputed_tokens;/* document tokens prefilled (every policy): doc_tokens
                                 - hit_tokens - copy_tokens - tier_hit_tokens */
    /* the tier's background writer (its write_queue > 0): tier_writes,
     * tier_write_bytes and tier_write_errors count its writes as they finish */
    int64_t tier_writes_queued;   /* writes handed to it */
    int64_t tier_writes_dropped;  /* not written: its queue was full, no pinned staging
                                     was free (a device with memory of its own), or
                                     still queued when the tier was detached or the
                                     cache destroyed */
    int64_t tier_writes_pending;  /* state now (not reset): queued or being written */
    /* the cost rule (lazyattn_cache_set_tier_recompute_rate) */
    int64_t tier_skipped_by_cost; /* GPU misses recomputed without a lookup: loading
                                     them would take longer (counted in misses) */
    /* leases (lazyattn_store_set_lease), counted with the request; and
     * documents computed twice, counted at the write */
    int64_t tier_leases;      /* tier misses computed under this cache's lease */
    int64_t tier_lease_waits; /* tier misses that waited for another's lease */
    int64_t tier_lease_waited_loads; /* of which loaded once written */
    int64_t tier_lease_takeovers;    /* of which took the lease over (its holder
                                        ended or expired with no document) */
    int64_t tier_lease_wait_us;      /* time waited */
    int64_t tier_duplicates;  /* documents this cache computed that were in the store
                                 by the time it wrote them (computed elsewhere too) */
    int64_t tier_duplicate_tokens;
    /* pipelined loads (lazyattn_tier_options.load) */
    int64_t tier_loads_pipelined; /* tier hits whose upload ran on the copy queue */
    int64_t tier_load_failures;   /* of which failed on the device: counted as tier hits,
                                     then dropped from the cache (recomputed next time) */
    int64_t tier_loads_pending;   /* state now (not reset): uploads not seen complete */
    int64_t tier_loads_sealed;    /* tier hits the host store held as the tier itself wrote
                                     them (bytes that never left this process): their
                                     payload checksum not computed again; the header,
                                     identity and digest checks still run */
    int64_t tier_loads_background; /* appended: tier hits loaded by the tier's loader thread
                                      (LAZYATTN_TIER_LOAD_BACKGROUND; also counted in
                                      tier_loads_pipelined, their failures, the store's
                                      or the checks' too, in tier_load_failures) */
    int64_t tier_load_waits;       /* appended: lazyattn_request_get_plan calls that waited
                                      for the loader (the engine did not poll first) */
    int64_t tier_writes_skipped_by_cost; /* appended: documents not written to the tier
                                            because the cost rule recomputes rather than
                                            loads them (lazyattn_cache_set_tier_
                                            recompute_rate) */
} lazyattn_cache_stats;

/* config may be NULL (LAZY, model 0, retain = pool budget). */
LAZYATTN_API int lazyattn_cache_create(lazyattn_pool *pool, const lazyattn_cache_config *config,
                                       lazyattn_cache **out);
/* Frees every entry's blocks. Requests still live are released and freed
 * too: their handles become invalid (destroy requests first). */
LAZYATTN_API void lazyattn_cache_destroy(lazyattn_cache *cache);
LAZYATTN_API int lazyattn_cache_get_stats(const lazyattn_cache *cache,
                                          lazyattn_cache_stats *stats);
/* Sets (or with fn NULL removes) the eviction callback; user is passed to it. */
LAZYATTN_API int lazyattn_cache_set_evict_callback(lazyattn_cache *cache, lazyattn_evict_fn fn,
                                                   void *user);
/* Zeroes the counters (not the state), e.g. after warm-up requests. */
LAZYATTN_API int lazyattn_cache_reset_stats(lazyattn_cache *cache);
/* Evicts unpinned entries until committed entries take at most max_bytes
 * (0: evict every unpinned entry). */
LAZYATTN_API int lazyattn_cache_trim(lazyattn_cache *cache, uint64_t max_bytes);
/* Checks every internal invariant (reference counts against live requests,
 * LRU list, hash index, block ownership against the pool, byte counters).
 * OK, or INVALID_ARGUMENT with the first broken invariant in
 * lazyattn_last_error(). For tests and debugging; O(entries + blocks). */
LAZYATTN_API int lazyattn_cache_validate(const lazyattn_cache *cache);

/* ---- requests: plan, decode, commit, release ------------------------------ */

typedef struct lazyattn_request lazyattn_request;

/* The prompt of one request: [prefix] [doc_0] ... [doc_{n_docs-1}] [question].
 * Token arrays are read during lazyattn_request_create only.
 *   prefix:      [n_prefix] int32 (n_prefix >= 0)
 *   docs:        [n_docs] pointers, docs[i]: [doc_lengths[i]] int32, length >= 1
 *   question:    [n_question] int32 (n_question >= 0)
 *   max_new_tokens: generated tokens reserved up front, so that
 *                appending up to this many never needs the budget again. */
typedef struct lazyattn_request_desc {
    int n_prefix;
    const int32_t *prefix;
    int n_docs;
    const int32_t *const *docs;
    const int32_t *doc_lengths;
    int n_question;
    const int32_t *question;
    int max_new_tokens;
} lazyattn_request_desc;

/* An empty prompt: no prefix, documents or question, nothing reserved. */
LAZYATTN_API void lazyattn_request_desc_init(lazyattn_request_desc *desc);

typedef enum lazyattn_segment_kind {
    LAZYATTN_SEGMENT_PREFIX = 0,
    LAZYATTN_SEGMENT_DOCUMENT = 1,
    LAZYATTN_SEGMENT_QUESTION = 2
} lazyattn_segment_kind;

typedef enum lazyattn_segment_action {
    LAZYATTN_ACTION_PREFILL = 0, /* every token computed now */
    LAZYATTN_ACTION_REUSE = 1,   /* every token served from the cache */
    LAZYATTN_ACTION_COPY = 2,    /* POSITION: materialised from another start */
    LAZYATTN_ACTION_PARTIAL = 3  /* PREFIX: leading blocks reused, the rest computed */
} lazyattn_segment_action;

/* One segment of the prompt. Tokens [0, n_cached) of the segment are served
 * by the cache (REUSE/COPY/PARTIAL), tokens [n_cached, n_tokens) are to be
 * prefilled: they are plan.prefill_*[prefill_offset .. prefill_offset +
 * n_tokens - n_cached). Its blocks are table[first_entry .. first_entry +
 * n_entries). A document is encoded in isolation: its prefilled tokens
 * attend only to the same document's tokens. */
typedef struct lazyattn_segment {
    lazyattn_segment_kind kind;
    lazyattn_segment_action action;
    int doc_index;         /* index in desc.docs; -1 for prefix and question */
    int32_t logical_start; /* position of the segment's first token */
    int32_t stored_start;  /* stored position of its first token (0 for LAZY documents) */
    int n_tokens;
    int n_cached;
    int prefill_offset;
    int first_entry;
    int n_entries;
} lazyattn_segment;

/*
 * A request's plan, borrowed from the request: the pointers stay valid until
 * the next lazyattn_request_append / _commit / _destroy on it.
 *   segments:           [n_segments] prompt order (prefix if n_prefix > 0,
 *                       one per document, question if n_question > 0)
 *   prefill_slots:      [n_prefill] int32, physical_block * block_size + offset
 *   prefill_stored_pos: [n_prefill] int32, the position K is rotated at (write_kv)
 *   prefill_pos:        [n_prefill] int32, logical position (queries, masks)
 *   copy_src:           [n_copies] packed entries (source block, delta to the
 *                       new start, valid length) for lazyattn_materialise
 *   copy_dst:           [n_copies] int32 destination blocks
 *   table:              [n_entries] packed entries (block, delta, valid length)
 *   entry_pos:          [n_entries] int32, logical start of each entry;
 *                       prompt order, then generated tokens
 * n_positions is the context length so far (the next token's position).
 */
typedef struct lazyattn_plan {
    int n_segments;
    const lazyattn_segment *segments;
    int n_prefill;
    const int32_t *prefill_slots;
    const int32_t *prefill_stored_pos;
    const int32_t *prefill_pos;
    int n_copies;
    const uint64_t *copy_src;
    const int32_t *copy_dst;
    int n_entries;
    const uint64_t *table;
    const int32_t *entry_pos;
    int32_t n_positions;
    int n_generated;
    int committed;
    /* this request's document accounting (as added to the cache stats) */
    int doc_tokens, hit_tokens, copy_tokens;
    int doc_blocks, hit_blocks, copy_blocks;
    /* documents loaded from the cache's tier (REUSE segments, not in hit_tokens) */
    int tier_tokens;
} lazyattn_plan;

/*
 * Plans a request: looks every document up, pins what it reuses, allocates
 * blocks for what it computes, copies and its own tokens (prefix, question,
 * max_new_tokens), evicting unpinned entries as needed. All or nothing: on
 * BUDGET_EXCEEDED (the working set does not fit next to the pinned blocks),
 * OUT_OF_RANGE (positions past LAZYATTN_MAX_POSITION) or any other error
 * nothing stays allocated or pinned and *out is NULL.
 */
LAZYATTN_API int lazyattn_request_create(lazyattn_cache *cache, const lazyattn_request_desc *desc,
                                         lazyattn_request **out);
/* The request's plan (pointers valid until the request changes). With a
 * BACKGROUND tier (lazyattn_cache_set_tier_options) it first waits for the
 * request's tier loads to be enqueued (lazyattn_request_poll_loads);
 * NOT_FOUND, with the document named, when one of them failed (destroy
 * the request and create it again: the document is recomputed). */
LAZYATTN_API int lazyattn_request_get_plan(const lazyattn_request *req, lazyattn_plan *plan);
/*
 * The request's tier loads (a tier with load BACKGROUND): *pending (may be
 * NULL) the documents of the request whose load the tier's loader has not
 * finished (0: every load is enqueued, on the device's copy queue, and the
 * request's attention, enqueued from now on, orders itself after them);
 * *failed (may be NULL) the documents whose load failed (the store, a
 * check of the bytes, or their upload on the device): the request cannot
 * be served as planned; destroy it and create it again (the documents are
 * then recomputed). wait 1: returns once *pending is 0 (the calling thread
 * waits for the loader); 0: never waits. Settles the loads finished so
 * far (as request_create does). Without such a tier, or with every load
 * done: 0 and 0 at once. Same thread rules as the request's other calls
 * (IN_USE while another thread is inside a call on its cache).
 */
LAZYATTN_API int lazyattn_request_poll_loads(lazyattn_request *req, int wait, int *pending,
                                             int *failed);
/* The caller has written every prefilled token and materialised every copy:
 * the request's new document blocks become cache entries, reusable by later
 * requests (still pinned by this one). Idempotent. A request destroyed
 * without commit frees those blocks instead. */
LAZYATTN_API int lazyattn_request_commit(lazyattn_request *req);
/*
 * Appends n generated tokens to the request's own blocks, growing the table.
 * Beyond max_new_tokens a new block may be needed: it is taken from the pool
 * (evicting unpinned entries) or BUDGET_EXCEEDED with nothing appended.
 *   slots, positions: [n] int32 outputs (slot for write_kv; position is both
 *   the stored and the logical position)
 */
LAZYATTN_API int lazyattn_request_append(lazyattn_request *req, int n, int32_t *slots,
                                         int32_t *positions);
/* Ends the request: unpins what it reused, frees its own blocks and any
 * uncommitted document blocks. NULL is a no-op. */
LAZYATTN_API void lazyattn_request_destroy(lazyattn_request *req);

/* ---- probe: what the cache holds for a request, without side effects ---- */

/* One segment of a probed request, in the order of lazyattn_plan.segments:
 * the action and the cached counts lazyattn_request_create would give now
 * (a later request_create agrees as long as nothing changes the cache in
 * between and its budget check passes). The probe asks the GPU cache only,
 * never a tier (lazyattn_cache_set_tier): a document it reports PREFILL may
 * still be loaded from the store by request_create and served as REUSE. */
typedef struct lazyattn_probe_segment {
    lazyattn_segment_kind kind;
    lazyattn_segment_action action;
    int doc_index;         /* index in desc.docs; -1 for prefix and question */
    int32_t logical_start;
    int n_tokens;
    int n_cached;          /* tokens served by the cache (REUSE, COPY, PARTIAL) */
    int n_blocks;
    int n_cached_blocks;   /* blocks reused as stored, or copied (COPY) */
    uint64_t doc_hash;     /* documents: lazyattn_doc_hash under the cache's model_id */
    uint8_t digest[32];    /* documents: lazyattn_doc_digest (doc_hash's 32 bytes) */
} lazyattn_probe_segment;

/* Totals of a probe; the doc fields equal the plan's doc accounting
 * (lazyattn_plan.doc_tokens ...) of a request created right after. */
typedef struct lazyattn_probe_summary {
    int n_segments;
    int64_t doc_tokens, hit_tokens, copy_tokens;
    int64_t doc_blocks, hit_blocks, copy_blocks;
    int64_t blocks_needed; /* blocks request_create would take from the pool
                              (own blocks + recomputed and copied documents) */
} lazyattn_probe_summary;

/*
 * How much of a request the cache would serve, per segment, with no pin, no
 * allocation, no LRU touch and no change to statistics (a router's or
 * scheduler's question before it commits to a request). desc is checked as
 * lazyattn_request_create checks it.
 *   segments: [max_segments], at least the number of segments (n_docs + 2
 *             always suffices), or NULL with max_segments 0
 *   summary:  may be NULL (not both)
 */
LAZYATTN_API int lazyattn_cache_probe(const lazyattn_cache *cache,
                                      const lazyattn_request_desc *desc,
                                      lazyattn_probe_segment *segments, int max_segments,
                                      lazyattn_probe_summary *summary);

/* ---- document KV export and import ---------------------------------------- */

/*
 * A LAZY cache's document as bytes, to save it, move it to another process
 * or machine, or spill it on eviction, and import it into any LAZY cache of
 * the same model identity and geometry. Keys are stored at document-local
 * positions, so an imported document is reused at any logical start.
 *
 * Format version 2, integers little-endian:
 *   offset  0  char[8]  magic "LZKVDOC\0"
 *           8  u32      version (2)
 *          12  u32      header bytes (128)
 *          16  u64      model_id (the cache's)
 *          24  u32 x 5  n_layers, n_kv_heads, head_dim, block_size, dtype (the pool's)
 *          44  u32      policy (0 = LAZY)
 *          48  u64      doc_hash (lazyattn_doc_hash(model_id, tokens): digest's bytes 0..7)
 *          56  u32      n_tokens
 *          60  u32      n_blocks = ceil(n_tokens / block_size)
 *          64  i32      stored_start (0)
 *          68  u32      0
 *          72  u64      payload bytes = 4 n_tokens + 2 n_layers n_blocks block_layer_bytes
 *          80  u64      payload checksum: XXH3-64, seed 0 (xxHash 0.8), of the payload
 *          88  u8[32]   digest (lazyattn_doc_digest(model_id, tokens))
 *         120  u64      header checksum: XXH3-64 of bytes 0..119
 *         128  payload: tokens [n_tokens] int32, then for each layer its K blocks
 *              and its V blocks, each [n_kv_heads, block_size, head_dim] of
 *              the storage dtype, the values exactly as stored, in ROWS
 *              order whatever the pool's kv_layout (a TILED pool's pages
 *              are reordered on the host, both ways), so an export imports
 *              into a pool of either layout (the last block's slots past
 *              the document included)
 * block_layer_bytes = n_kv_heads * block_size * head_dim * dtype size.
 * Version 1 (a 96-byte header without the digest) is no longer read:
 * FORMAT, "version 1 exports are no longer read: re-export".
 *
 * Export reads the blocks from the pool's device buffers on the context's
 * queue and waits (the document's writes must have been enqueued on that
 * queue or be complete). It changes nothing in the cache: no LRU touch,
 * no statistics. Only committed entries of a LAZY cache on a device pool
 * are exported (UNSUPPORTED otherwise; NOT_FOUND when not cached; IN_USE
 * while a BACKGROUND tier's loader has not enqueued the document's upload:
 * poll the request that loads it first, lazyattn_request_poll_loads).
 */
#define LAZYATTN_KV_FORMAT_VERSION 2
#define LAZYATTN_KV_HEADER_BYTES 128

/* Bytes of the export of the cached document with this hash. */
LAZYATTN_API int lazyattn_cache_export_size(const lazyattn_cache *cache, uint64_t doc_hash,
                                            size_t *bytes);
/* Writes the export into buffer[0 .. *written); capacity smaller than
 * lazyattn_cache_export_size gives INVALID_ARGUMENT and writes nothing. */
LAZYATTN_API int lazyattn_cache_export(const lazyattn_cache *cache, uint64_t doc_hash,
                                       void *buffer, size_t capacity, size_t *written);

/* Writes all n bytes, or returns nonzero (the export then fails with IO). */
typedef int (*lazyattn_write_fn)(void *user, const void *data, size_t n);
/* Reads exactly n bytes, or returns nonzero (end of data or error). */
typedef int (*lazyattn_read_fn)(void *user, void *data, size_t n);

/* The same bytes through a callback (one host buffer of the export's size
 * is used in between). */
LAZYATTN_API int lazyattn_cache_export_to(const lazyattn_cache *cache, uint64_t doc_hash,
                                          lazyattn_write_fn write, void *user);

/*
 * Imports one exported document as a committed, unpinned entry (the most
 * recently used). Everything is checked before the cache changes: FORMAT
 * for bad magic, another version, a checksum that does not match, sizes or
 * a document digest that do not agree with the tokens, truncated or
 * trailing data; INVALID_ARGUMENT for another model_id, layer count, head
 * count, head size, block size or storage dtype than this cache and pool;
 * UNSUPPORTED for a cache that is not LAZY; BUDGET_EXCEEDED for a document
 * larger than the whole pool (its claimed size and the pool's named). A
 * refused import leaves the cache as it was. Then blocks are taken as a
 * request takes them (evicting LRU entries;
 * BUDGET_EXCEEDED when the pinned working set leaves no room) and written on
 * the context's queue (waited for). A document cached already is left as it
 * is (OK). On a bookkeeping pool (no device memory) the entry is recorded
 * without K/V. doc_hash (may be NULL) receives the document's hash. data
 * is read more than once (checked, then written) and must not change
 * during the call: memory another party may change (a shared mapping of a
 * file) is copied first, or read through lazyattn_cache_import_from.
 */
LAZYATTN_API int lazyattn_cache_import(lazyattn_cache *cache, const void *data, size_t size,
                                       uint64_t *doc_hash);
/* The same from a callback: the header is read and checked first (a size
 * past the pool refused before any payload is read), then the payload in
 * pieces of at most 1 MiB into a host buffer that grows with the bytes
 * actually read (never allocated on the header's word alone). A read
 * failing before the end is FORMAT (truncated). */
LAZYATTN_API int lazyattn_cache_import_from(lazyattn_cache *cache, lazyattn_read_fn read,
                                            void *user, uint64_t *doc_hash);

/* What an export's header says (no cache needed): e.g. to key it in a store
 * or to check it against a cache before importing. */
typedef struct lazyattn_kv_info {
    uint32_t version;
    uint64_t model_id;
    int n_layers, n_kv_heads, head_dim, block_size;
    lazyattn_dtype dtype;
    uint64_t doc_hash;
    uint8_t digest[32]; /* lazyattn_doc_digest(model_id, tokens) as the header says */
    int n_tokens, n_blocks;
    uint64_t total_bytes; /* header + payload: the whole export */
} lazyattn_kv_info;

/* Reads and checks the header of an export (magic, version, header
 * checksum, sizes that agree): FORMAT otherwise. data needs at least
 * LAZYATTN_KV_HEADER_BYTES; the payload is not read (import checks it). */
LAZYATTN_API int lazyattn_kv_describe(const void *data, size_t size, lazyattn_kv_info *info);


/* ---- document stores: where documents live outside the GPU -------------- */

/*
 * A store keeps exported documents (the bytes of lazyattn_cache_export) by
 * key = (model_id, digest), outside the GPU: in host memory, in a
 * directory, in Redis, or in anything an engine implements with
 * lazyattn_store_ops. A store holds bytes only; what it returns is checked
 * by the reader (lazyattn_cache_import checks format, checksums and
 * identity before the cache changes), so a store that loses, truncates or
 * corrupts a value costs a recompute, never a wrong answer.
 *
 * Threads and processes: the three stores of the library are thread-safe
 * (each takes its own mutex; Redis serialises on its connections), and
 * the directory and Redis stores may be shared by any number of processes
 * and (Redis, or a shared file system) machines at once. A store made from
 * an engine's own ops is as thread-safe as those ops: the library adds no
 * lock. A store used by caches on several threads must be thread-safe. A
 * destroy must not race with any other use, and a store must outlive the
 * caches it is attached to (lazyattn_cache_set_tier).
 */
typedef struct lazyattn_store lazyattn_store;

/* Two documents whose 64-bit hashes collide still have different keys. */
typedef struct lazyattn_doc_key {
    uint64_t model_id;  /* the cache's model_id (lazyattn_cache_config) */
    uint8_t digest[32]; /* lazyattn_doc_digest(model_id, tokens) */
} lazyattn_doc_key;

/* A value read from a store, borrowed until lazyattn_store_release:
 * data: [size] bytes (the library's stores: memory of their own, which
 * nothing changes until released; an engine's: any memory, which the tier
 * copies once before checking it). */
typedef struct lazyattn_store_value {
    const void *data;
    size_t size;
    void *handle; /* the store's (what release frees) */
} lazyattn_store_value;

/* What an engine implements to plug its own store in. Every function
 * returns a lazyattn_status (lazyattn_last_error() is the library's: an
 * engine's store reports its own detail its own way):
 *   get:     OK and *value filled, NOT_FOUND when absent, IO/... on failure
 *   release: gives a value of get back (never fails)
 *   put:     stores size bytes under key (replacing any value), whole or
 *            not at all as far as get can tell
 *   exists:  *exists = 1 or 0
 *   remove:  OK, or NOT_FOUND when absent
 *   destroy: frees impl (lazyattn_store_destroy calls it; may be NULL)
 * Called by a cache's tier (lazyattn_cache_set_tier: get and release
 * inside lazyattn_request_create, exists and put inside a commit or an
 * eviction), an op runs inside that call: on that cache it may read
 * (get_stats, probe, export, request_get_plan), but anything that changes
 * it (request create/commit/append, trim, reset_stats, import, set_tier,
 * set_evict_callback; validate too) is refused with INVALID_ARGUMENT
 * "<function>: called from the tier store's <op>, which must not change the
 * cache", and request or cache destroy does nothing (the reason in
 * lazyattn_last_error(), logged at ERROR), as in the eviction callback. */
typedef struct lazyattn_store_ops {
    const char *name; /* "host", "dir", "redis", or the engine's */
    int (*get)(void *impl, lazyattn_doc_key key, lazyattn_store_value *value);
    void (*release)(void *impl, lazyattn_store_value *value);
    int (*put)(void *impl, lazyattn_doc_key key, const void *data, size_t size);
    int (*exists)(void *impl, lazyattn_doc_key key, int *exists);
    int (*remove)(void *impl, lazyattn_doc_key key);
    void (*destroy)(void *impl);
} lazyattn_store_ops;

/* A store from an engine's ops (copied; every function pointer but destroy
 * required) and its state impl. */
LAZYATTN_API int lazyattn_store_create(const lazyattn_store_ops *ops, void *impl,
                                       lazyattn_store **out);

/* Host memory: values copied in, least recently used evicted to keep their
 * bytes under budget_bytes (>= 1). A value larger than the budget is
 * refused (BUDGET_EXCEEDED). A value borrowed by a reader stays valid
 * after its eviction until released. Once attached as a cache's tier on a
 * device with memory of its own, its values live in pinned memory of the
 * budget's size (at most half the host's memory; the rest pageable:
 * lazyattn_cache_set_tier_options), more evicted where that memory has no
 * run long enough; the store frees it when destroyed. */
LAZYATTN_API int lazyattn_store_create_host(uint64_t budget_bytes, lazyattn_store **out);

/* A directory (created if absent, parent must exist): one file per
 * document, "<model_id>-<digest>.lzkv" (16 and 64 hex digits). put writes
 * ".tmp-..." in the same directory, fsyncs it, renames it over the final
 * name and fsyncs the directory, so a reader (any process) sees a whole
 * file or none; a writer killed mid-way leaves only a ".tmp-" file, which
 * readers never open. get reads the file once into memory of its own, so
 * a file rewritten in place meanwhile (cp, rsync --inplace) gives the bytes
 * read, which import checks, or FORMAT when it shrank; never a signal. A
 * symbolic link to a regular file is followed; anything else at a key's
 * name (a FIFO, a directory, a device, a socket, a link to one) is FORMAT
 * at once, never opened, and exists says 0 for it. A full disk: IO with
 * the system's reason ("No space left on device"), nothing published.
 * No budget: the file system's size is the limit. */
LAZYATTN_API int lazyattn_store_create_dir(const char *path, lazyattn_store **out);

/* Redis (through hiredis): one server, or a Redis Cluster. Keys, all under
 * one hash tag per document so that a cluster keeps a document in one slot:
 *   <prefix>:{<model_id>:<digest>}:chunk:<i>   i = 0 .. n-1, chunk_bytes each
 *                                              (the last one shorter)
 *   <prefix>:{<model_id>:<digest>}:manifest    written last: total bytes, chunk
 *                                              size and count, checksum
 * (16 and 64 hex digits). A value is read only through its manifest and
 * checked against it, so a write cut off before its manifest is never read,
 * and missing or mixed chunks are a miss (FORMAT), not data; the buffer
 * grows with the chunks received (never sized on the manifest's word
 * alone). A manifest found without its chunks (evicted under maxmemory, or
 * lost in a failover) is removed by that get, or by exists, which checks
 * every chunk's length: the document is then absent, and written again by
 * the next put of a tier.
 * A cluster: the seeds (url) are any of its nodes, masters or replicas; the
 * slot map comes from CLUSTER SLOTS, is refreshed on MOVED and when a
 * node's connection is lost or refused, and ASK is followed, so a failover
 * or a slot migration costs misses only while it happens (the ACL user
 * needs CLUSTER SLOTS, and EVAL or else DEL). A connection to each node;
 * every one sends AUTH first when a password is given.
 * A server down or slower than timeout_ms gives IO; the connection is then
 * dropped and, for retry_ms, every call on that node fails at once (IO,
 * "not retried") instead of waiting again, so a stalled server costs one
 * timeout per retry_ms, not one per document; the next call after that
 * reconnects. UNSUPPORTED when lazyattn was built without hiredis (Debian:
 * libhiredis-dev). */
typedef struct lazyattn_redis_config {
    const char *host;    /* default "127.0.0.1" */
    int port;            /* default 6379 */
    int timeout_ms;      /* connect and each command; default 2000, 1..600000 */
    size_t chunk_bytes;  /* default 4 MiB, 1 KiB .. 512 MiB (Redis's value limit) */
    const char *prefix;  /* key prefix, default "lazyattn"; no '{' or '}' */
    int retry_ms;        /* after a failed connection: calls fail at once for this long;
                            default 1000, 0..600000 */
    const char *url;     /* default NULL (host, port); else, in their place, the seeds:
                            redis://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...], IPv6 hosts
                            in brackets, user and password percent-encoded; several seeds
                            only for a cluster. rediss:// (TLS) is UNSUPPORTED: hiredis 0.14
                            has no TLS (README: a local TLS terminator) */
    const char *user;     /* ACL user, default NULL (the default user); needs a password;
                             a user in the URL wins */
    const char *password; /* default NULL: no AUTH; a password in the URL wins (so that
                             redis://USER@HOST:PORT with this one keeps it off the URL) */
} lazyattn_redis_config;

LAZYATTN_API void lazyattn_redis_config_init(lazyattn_redis_config *config);
/* Connects at once (AUTH, PING, the slot map of a cluster): IO when no seed
 * can be reached or AUTH is refused (the reason in lazyattn_last_error(),
 * never the password). */
LAZYATTN_API int lazyattn_store_create_redis(const lazyattn_redis_config *config,
                                             lazyattn_store **out);
/* Checks a Redis URL's form without connecting: OK, INVALID_ARGUMENT, or
 * UNSUPPORTED (rediss://), as lazyattn_store_create_redis would answer. */
LAZYATTN_API int lazyattn_redis_url_check(const char *url);

/* The store's name ("host", "dir", "redis", or its ops' name). */
LAZYATTN_API const char *lazyattn_store_name(const lazyattn_store *store);
/* NOT_FOUND when absent; a value got must be released. */
LAZYATTN_API int lazyattn_store_get(lazyattn_store *store, lazyattn_doc_key key,
                                    lazyattn_store_value *value);
/* Gives a value of lazyattn_store_get back (zeroed); NULL store or value, or
 * an empty value: nothing. */
LAZYATTN_API void lazyattn_store_release(lazyattn_store *store, lazyattn_store_value *value);
LAZYATTN_API int lazyattn_store_put(lazyattn_store *store, lazyattn_doc_key key, const void *data,
                                    size_t size);
LAZYATTN_API int lazyattn_store_exists(lazyattn_store *store, lazyattn_doc_key key, int *exists);
/* NOT_FOUND when absent. */
LAZYATTN_API int lazyattn_store_delete(lazyattn_store *store, lazyattn_doc_key key);
LAZYATTN_API void lazyattn_store_destroy(lazyattn_store *store);
/* Leases (dir and Redis stores; default 10000 ms): a write-through tier
 * that misses a document no store holds takes its lease for ttl_ms before
 * computing it, and releases it once its write landed (or the request
 * ends without one); a cache of another process that misses it meanwhile
 * waits (polling the store, at most the lease's TTL) and loads it instead
 * of computing it too. A killed holder's lease expires after ttl_ms. 0:
 * no leases. UNSUPPORTED for the host store and an engine's store. */
LAZYATTN_API int lazyattn_store_set_lease(lazyattn_store *store, int ttl_ms);

/* ---- the tier: a store behind a LAZY cache ----------------------------- */

typedef enum lazyattn_tier_mode {
    LAZYATTN_TIER_READ_ONLY = 0,     /* load misses from the store, never write */
    LAZYATTN_TIER_WRITE_BACK = 1,    /* ... and write each evicted document not
                                        in the store yet (spill on eviction) */
    LAZYATTN_TIER_WRITE_THROUGH = 2  /* ... and write each document at the commit
                                        that publishes it (shared by processes
                                        at once) */
} lazyattn_tier_mode;

/*
 * Attaches a store as the tier of a LAZY cache (store NULL detaches it).
 * lazyattn_request_create then looks every document missed on the GPU up
 * in the store before planning its recompute: a value found is checked
 * (lazyattn_kv_describe: its key; lazyattn_cache_import: format, checksums,
 * identity, its tokens against the request's) and imported, and the
 * document is served as REUSE (segment action REUSE, counted in tier_hits,
 * not in hits). A store that fails, is slow past its timeout, or returns
 * data that is refused costs that document a recompute, counted
 * (tier_errors, tier_rejected); the request goes on. Writes (WRITE_BACK at
 * eviction, WRITE_THROUGH at commit: exported on the context's queue, so
 * the document's K/V must have been written on that queue) that fail are
 * counted (tier_write_errors) and logged (WARN, the context's log
 * callback); the cache is unchanged by them. Entries still cached at
 * lazyattn_cache_destroy are not written. lazyattn_cache_probe looks at
 * the GPU cache only. Loads are synchronous (lazyattn_cache_set_tier_options
 * can pipeline them): request_create waits for the store and for the
 * context's queue (the upload), so a request's time, and its TTFT, include
 * them. Without a tier the planner pays one pointer test
 * per missed document.
 * The store's operations run inside those calls and must not change the
 * cache (lazyattn_store_ops: refused, INVALID_ARGUMENT; destroys do
 * nothing).
 * UNSUPPORTED for a cache that is not LAZY (only LAZY documents are
 * position-independent, so only they can be exported and shared) or a pool
 * without device memory; INVALID_ARGUMENT for an unknown mode or inside the
 * eviction callback or a tier store's operation; IN_USE while another
 * thread is inside a call on the cache.
 */
LAZYATTN_API int lazyattn_cache_set_tier(lazyattn_cache *cache, lazyattn_store *store,
                                         lazyattn_tier_mode mode);

/* How a tier writes (lazyattn_cache_set_tier_options). */
typedef enum lazyattn_tier_load {
    LAZYATTN_TIER_LOAD_SYNC = 0,      /* request_create waits for each upload */
    LAZYATTN_TIER_LOAD_PIPELINED = 1, /* uploads run on a copy queue, layer by layer,
                                         while the engine enqueues (see below) */
    LAZYATTN_TIER_LOAD_BACKGROUND = 2 /* appended: PIPELINED with the store's get, the
                                         checks and the upload's enqueue on a loader
                                         thread of the tier (see below) */
} lazyattn_tier_load;

typedef struct lazyattn_tier_options {
    int write_queue; /* writes waiting for the tier's background writer,
                        0..LAZYATTN_MAX_TIER_WRITE_QUEUE; 0 = none: the thread
                        that commits (or evicts) writes, and waits */
    lazyattn_tier_load load; /* appended: how a tier hit is uploaded; default SYNC */
} lazyattn_tier_options;

#define LAZYATTN_MAX_TIER_WRITE_QUEUE 1024

/* write_queue 0 (lazyattn_cache_set_tier's behaviour). */
LAZYATTN_API void lazyattn_tier_options_init(lazyattn_tier_options *options);

/*
 * lazyattn_cache_set_tier with options (NULL: the defaults). write_queue > 0
 * (WRITE_BACK, WRITE_THROUGH) writes from a background writer: a thread of
 * the tier with a command queue of its own on the pool's context, reading
 * the document's blocks into pinned host memory after the commands
 * enqueued on the context's queue before the commit (or eviction), and a
 * second thread putting the export in the store (a slow store delays the
 * puts, not the read-backs). On a device with memory of its own a write
 * whose read-back finds no pinned staging free (at most 1 GiB in 4 slots,
 * each held until its put ends) is dropped, counted, rather than read
 * into pageable memory (the driver's staged copy holds up the serving
 * thread's enqueues; LAZYATTN_TUNE tier.pin_writes=0 allows it). A
 * host store (lazyattn_store_create_host) is read back into directly: on
 * such a device the attach pins memory of the store's whole budget once,
 * at most half the host's memory (it then takes as long as the driver
 * pins that much; LAZYATTN_TUNE tier.pin_store=0: none), which the store
 * keeps its values in, so that
 * writes and loads are DMAs of that memory with no copy. The
 * commit returns at once; a block freed meanwhile is rewritten only
 * after the read-back (the pool's reuse order), so a write always holds
 * the document as committed. When
 * write_queue writes wait already (to be read back, or to be put beside
 * the put in progress), the write is dropped (counted:
 * tier_writes_dropped) without waiting. Writes finish in the background:
 * tier_writes, tier_write_errors count them when they do; a document is
 * in the store only then. The store's put and exists run on the writer's
 * threads beside the cache's own calls: an engine's store must take calls
 * from several threads at once (the library's stores do). Detaching the tier
 * (or destroying the cache) waits for the put in progress and drops
 * the writes still waiting (counted).
 * load PIPELINED: a tier hit is checked on the host as before (header,
 * identity, payload checksum — but for a host store's value the tier itself
 * wrote: tier_loads_sealed; nothing from a disk, a network or an engine
 * reaches the blocks unchecked), then
 * its upload is enqueued on the tier's copy queue (in order, on the pool's
 * context and device), K and V of layer 0 first, and request_create
 * returns without waiting: the layers' attention (prefill, decode) waits
 * for its layer's upload only (lazyattn_pool_order_reads), so the first
 * layers run while the last are still copied; an engine's own kernels
 * over pool blocks call lazyattn_pool_order_reads first. The bytes
 * uploaded are the store's value (the host store's memory, without a
 * copy) or pinned staging of the tier's (a few mapped buffers, 1 GiB at
 * most: the directory store reads its file straight into one, an engine's
 * value is copied into one; pageable memory when none is free). They stay
 * alive until the upload completed and are given back by the next
 * lazyattn_request_create that sees it complete (never by a wait on the
 * calling thread). An upload that failed on the device (its event's
 * status < 0) is reported by that lazyattn_request_create: it returns
 * OPENCL naming the document and its status, counts it in
 * tier_load_failures, and drops the document from the cache (at once, or
 * when the last request holding it ends), so that the next request loads
 * or recomputes it afresh; commands that read it meanwhile read an
 * incomplete copy.
 * Freeing or evicting the document while its upload runs is safe (the
 * pool's reuse order). Detaching the tier and lazyattn_cache_destroy wait
 * for the uploads in flight.
 * load BACKGROUND: as PIPELINED, but request_create does no more for a
 * document missed on the GPU than ask the store whether it holds it
 * (exists; a miss goes on as before: leases, recompute) and, when it does,
 * take the document's blocks and plan it REUSE; the store's get, every
 * check above, a TILED pool's reorder (into the pinned staging) and the
 * upload's enqueue run on a loader thread of the tier, in the order of
 * the requests, while the calling thread goes on (the engine runs other
 * requests' decode steps). The request is then not ready: poll it with
 * lazyattn_request_poll_loads and enqueue nothing that reads its blocks
 * before it is (on an in-order queue a command behind a load that is not
 * enqueued yet would stall; the library orders nothing before the
 * enqueue). lazyattn_request_get_plan waits for them (counted:
 * tier_load_waits), so an engine that never polls stays right and waits
 * there instead of in request_create. A load that fails (the store, a
 * check, the device) leaves the request unusable: poll_loads counts it in
 * *failed and get_plan returns NOT_FOUND; destroy the request and create
 * it again: the document is then recomputed (the tier is not asked for it
 * again by the next plan), counted in tier_load_failures. The store's get
 * runs on the loader thread beside the cache's own calls: an engine's
 * store must take calls from two threads at once (the library's stores
 * do). Detaching the tier and lazyattn_cache_destroy join the loader: the
 * load in progress finishes, those still queued are dropped (their
 * documents discarded: a request still holding one is failed as above).
 * Errors as lazyattn_cache_set_tier;
 * INVALID_ARGUMENT for write_queue or load outside their range; UNSUPPORTED
 * for load BACKGROUND on Windows (no loader thread there);
 * OUT_OF_HOST_MEMORY or an OpenCL status when the writer or the copy queue
 * cannot be made (nothing attached).
 */
LAZYATTN_API int lazyattn_cache_set_tier_options(lazyattn_cache *cache, lazyattn_store *store,
                                                 lazyattn_tier_mode mode,
                                                 const lazyattn_tier_options *options);

/*
 * The cost rule: the model's prefill rate (document tokens recomputed per
 * second, measured by the engine; 0 = none, always load). With a rate, a
 * document missed on the GPU is loaded from the tier only when its bytes
 * at the tier's load bandwidth, measured on the loads so far (the store's
 * get and the upload), take less time than recomputing its tokens; else it
 * is recomputed without asking the tier (tier_skipped_by_cost); while
 * that holds, documents are not written to the tier either (the read-back
 * and put of a document that would be recomputed rather than loaded only
 * cost: tier_writes_skipped_by_cost). The first loads and writes, before
 * any measurement, go to the tier (unless lazyattn_cache_set_tier_load_rate
 * gave a bandwidth to go by).
 * INVALID_ARGUMENT for a negative or non-finite rate or no tier attached;
 * IN_USE as lazyattn_cache_set_tier.
 */
LAZYATTN_API int lazyattn_cache_set_tier_recompute_rate(lazyattn_cache *cache,
                                                        double tokens_per_second);

/*
 * The tier's load bandwidth in bytes a second (>= 0, finite) the cost rule
 * takes until the tier has measured loads of its own (0, the default:
 * none; then the first loads and writes go to the tier): an engine that
 * measured its store once at start (a value of a document's size got and
 * checked, e.g. rag_bench --tier-cost) need not load, or write, documents
 * slower to load than to recompute before the rule knows. Errors as
 * lazyattn_cache_set_tier_recompute_rate.
 */
LAZYATTN_API int lazyattn_cache_set_tier_load_rate(lazyattn_cache *cache,
                                                   double bytes_per_second);

/* LAZYATTN_CACHE_API_END */

/* ---- device-resident plans ------------------------------------------------ */

/*
 * A plan's tables kept on the device: uploaded once, then updated in place.
 * One object holds the tables of a batch of n_seqs sequences (n_seqs = 1
 * for a single request), laid out the way lazyattn_decode reads them:
 *   table:       [capacity] packed uint64; sequence s's entries are
 *                table[seq_offsets[s] .. seq_offsets[s+1]), sequences back
 *                to back in the order of the last update
 *   entry_pos:   [capacity] int32, logical start of each entry
 *   seq_offsets: [max_seqs + 1] int32, seq_offsets[0] = 0
 *   q_pos:       [max_seqs] int32, each sequence's decode query position
 * Each lazyattn_device_plan_update compares the new host tables with what
 * the device holds (a host shadow of it) and writes only what changed: after
 * lazyattn_request_append of one token, the last entry of each sequence (and
 * a new entry when a block boundary is crossed), q_pos, and seq_offsets when
 * an entry count changed. Nearby changed ranges are written as one (at most
 * 4 KiB of unchanged bytes in between), and each array gets at most 8
 * writes per update (beyond, the closest ranges are merged: a batch of long
 * sequences costs a few writes, not one per sequence, carrying some
 * unchanged entries along); all bytes of one update go through
 * one host staging block, freed by the completion callback of its last
 * write, so the caller's arrays may change as soon as update returns.
 * When the entries outgrow the capacity, the buffers grow geometrically
 * (x2) and the old contents are copied on the device.
 *
 * Because sequences lie back to back (lazyattn_decode_args has one
 * seq_offsets array, no per-sequence end), a sequence that gains or loses
 * entries moves every later sequence of the batch: those are rewritten
 * too. Prefill takes no table offset, so only sequence 0's table can feed
 * lazyattn_prefill (lazyattn_device_plan_prefill_args).
 *
 * Queues: like every enqueueing function, update takes the caller's queue
 * (NULL = the context's) and an optional cl_event *, and never waits. The
 * queue must be in order (as the context's is) and the one the plan's
 * buffers are used on, so that an update runs after the launches enqueued
 * before it and before those enqueued after it. The cl_mem handles change
 * when the buffers grow: take them from get_info / *_args after every
 * update (launches already enqueued keep the old buffers alive).
 *
 * Not thread-safe: one thread at a time (like an attention object). The
 * context must outlive the plan.
 */
typedef struct lazyattn_device_plan lazyattn_device_plan;

/* Most sequences of one device plan. */
#define LAZYATTN_DEVICE_PLAN_MAX_SEQS (1 << 24)

typedef struct lazyattn_device_plan_config {
    int max_seqs;        /* sequences of one batch, 1..LAZYATTN_DEVICE_PLAN_MAX_SEQS
                            (sizes q_pos and seq_offsets); default 1 */
    int initial_entries; /* table capacity to start with, in entries (>= 1); default 256 */
} lazyattn_device_plan_config;

/* max_seqs 1, initial_entries 256. */
LAZYATTN_API void lazyattn_device_plan_config_init(lazyattn_device_plan_config *config);

/* Creates the device buffers (nothing uploaded yet). config may be NULL
 * (defaults). OUT_OF_RANGE for a capacity whose bytes do not fit,
 * OUT_OF_DEVICE_MEMORY above CL_DEVICE_MAX_MEM_ALLOC_SIZE. */
LAZYATTN_API int lazyattn_device_plan_create(lazyattn_context *ctx,
                                             const lazyattn_device_plan_config *config,
                                             lazyattn_device_plan **out);
/* Releases the buffers (launches already enqueued keep them alive until
 * they complete). NULL is a no-op. */
LAZYATTN_API void lazyattn_device_plan_destroy(lazyattn_device_plan *plan);

/* One sequence's host tables for an update (read during the call only).
 *   table:     [n_entries] packed uint64 (lazyattn_entry_pack), n_entries >= 1
 *   entry_pos: [n_entries] int32 logical start of each entry
 *   q_pos:     the decode query's position (the last appended token's);
 *              not used by prefill
 *   request:   the request the tables are of (lazyattn_plan_seq_from_request
 *              sets it), or NULL. With a request, the plan remembers which
 *              pool blocks the tables name, and *_args refuse the tables
 *              (INVALID_ARGUMENT, naming the block) once any of those blocks
 *              was freed after the update (the request destroyed, its
 *              document evicted): the blocks may hold another document by
 *              then. Tables of no request are not checked. Fill the struct
 *              with plan_seq_from_request or zero it first ({0}). */
typedef struct lazyattn_plan_seq {
    int n_entries;
    const uint64_t *table;
    const int32_t *entry_pos;
    int32_t q_pos;
    const lazyattn_request *request; /* appended: NULL = tables of no request */
} lazyattn_plan_seq;

/* A request's current tables (lazyattn_request_get_plan), q_pos = its
 * n_positions - 1 (after lazyattn_request_append of one token: that
 * token's position), request = req. The pointers are borrowed as
 * lazyattn_plan's are. */
LAZYATTN_API int lazyattn_plan_seq_from_request(const lazyattn_request *req,
                                                lazyattn_plan_seq *seq);

/*
 * Makes the device tables those of seqs[0 .. n_seqs) in this order (the
 * batch may change from one update to the next: sequences joining, leaving
 * or reordered are handled as changed tables). Writes only what differs
 * from the previous update (see above); grows the buffers when needed.
 * Sizes are checked before anything changes: n_seqs in 1..max_seqs, every
 * n_entries >= 1, the total at most INT_MAX entries (OUT_OF_RANGE) and its
 * bytes within the device's largest allocation (OUT_OF_DEVICE_MEMORY). A
 * failure of an OpenCL call or of host memory (OUT_OF_DEVICE_MEMORY,
 * OUT_OF_HOST_MEMORY, OPENCL) either leaves the tables of the last update
 * (growing failed: nothing changed) or leaves the plan without tables
 * (n_seqs 0: *_args refuse) until the next successful update, which then
 * writes everything again. Nothing leaks either way.
 *   seqs: [n_seqs]
 */
LAZYATTN_API int lazyattn_device_plan_update(lazyattn_device_plan *plan, int n_seqs,
                                             const lazyattn_plan_seq *seqs,
                                             cl_command_queue queue, cl_event *event);

/* The buffers and counts of the last update, and counters since creation. */
typedef struct lazyattn_device_plan_info {
    int n_seqs;          /* of the last update (0 before the first) */
    int n_entries;       /* all sequences' entries: seq_offsets[n_seqs] */
    int max_entries;     /* the most of any one sequence */
    int capacity;        /* entries the table and entry_pos buffers hold */
    int max_seqs;
    cl_mem table;        /* [capacity] uint64 */
    cl_mem entry_pos;    /* [capacity] int32 */
    cl_mem seq_offsets;  /* [max_seqs + 1] int32 */
    cl_mem q_pos;        /* [max_seqs] int32 */
    int64_t updates;         /* successful updates */
    int64_t writes;          /* buffer writes enqueued */
    int64_t bytes_written;   /* bytes those writes carried */
    int64_t entries_written; /* table entries among them */
    int64_t grows;           /* capacity growths (device-side copies) */
} lazyattn_device_plan_info;

/* The cl_mem handles are borrowed: valid until the next update or destroy. */
LAZYATTN_API int lazyattn_device_plan_get_info(const lazyattn_device_plan *plan,
                                               lazyattn_device_plan_info *info);

/* Fills the plan's fields of decode args for all its sequences: n_seqs,
 * max_entries, q_pos, seq_offsets, table, entry_pos (q, out and n_splits
 * are left as they are). INVALID_ARGUMENT before the first update. */
LAZYATTN_API int lazyattn_device_plan_decode_args(const lazyattn_device_plan *plan,
                                                  lazyattn_decode_args *args);

/* Fills n_entries, table and entry_pos of prefill args with sequence seq's
 * table (q, q_pos, out and n_queries are the caller's). Only seq 0:
 * lazyattn_prefill_args has no table offset, and a sub-buffer cannot start
 * at an arbitrary 8-byte entry (CL_DEVICE_MEM_BASE_ADDR_ALIGN), so another
 * sequence gives UNSUPPORTED. */
LAZYATTN_API int lazyattn_device_plan_prefill_args(const lazyattn_device_plan *plan, int seq,
                                                   lazyattn_prefill_args *args);

#ifdef __cplusplus
}
#endif

#endif /* LAZYATTN_H */
