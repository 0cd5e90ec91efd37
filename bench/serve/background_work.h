/* SPDX-License-Identifier: Apache-2.0 */
/* Work a thread does beside the serving thread, to see which kind of a
 * document tier's host work slows the serving thread's enqueues (issue
 * 41): bench_forward --background times its decode steps under each kind.
 * A tier moves a document (256 MiB at 8B, 2 048 tokens) as: device reads
 * into pinned staging (one per layer and K/V: 64), the host copies and
 * checksums it, and the host store allocates and frees values of its
 * size. Each kind below is one of those, looped over a 256 MiB value
 * (spin and userevent move nothing: their GB/s counts a round as the
 * value's bytes). */
#ifndef BENCH_BACKGROUND_WORK_H
#define BENCH_BACKGROUND_WORK_H

#include <CL/cl.h>
#include <stdint.h>

typedef enum bg_kind {
    BG_NONE = 0,
    BG_COPY,     /* memcpy of the value between two host buffers, then XXH3 of the copy */
    BG_COPY4,    /* the same on 4 threads, a quarter each (the tier loader's copy) */
    BG_FAULTS,   /* malloc of the value, every page written, free (page faults, munmap) */
    BG_READS64,  /* 64 non-blocking device reads of a 64th each into pinned memory, clFinish */
    BG_READS1,   /* one device read of the whole value into pinned memory, clFinish */
    BG_WRITES64, /* 64 non-blocking device writes of a 64th each from pinned memory, clFinish */
    BG_PAGEABLE64, /* the 64 reads into pageable (malloc'd, touched) memory */
    BG_SPIN,     /* arithmetic in registers, no memory or driver (a busy core alone) */
    BG_USEREVENT, /* a marker of its own queue held on a user event for 5 ms, then set and
                     finished (a tier write's wait for its read-back, without the read) */
    BG_COUNT
} bg_kind;

/* "none|copy|copy4|faults|reads64|reads1|writes64|pageable64|spin|userevent", in bg_kind order. */
#define BG_KIND_CHOICES "none|copy|copy4|faults|reads64|reads1|writes64|pageable64|spin|userevent"
const char *bg_kind_name(bg_kind k);

typedef struct bg_work bg_work;

/* Starts kind's loop on a thread of its own (BG_NONE: no thread), over a
 * value of bytes (a multiple of 256, >= 256), on a queue of its own of
 * context's device; the threads run on cpus[0..n_cpus) (n_cpus 0: where
 * the system puts them). 0 and *out, or -1 with the reason on stderr. */
int bg_start(bg_kind kind, cl_context context, cl_device_id device, size_t bytes,
             const int *cpus, int n_cpus, bg_work **out);

/* Pins the calling thread to cpu: 0, or -1 with the reason on stderr. */
int bg_pin_self(int cpu);

/* Stops and joins the thread, frees everything; *gb_per_s (NULL: not
 * wanted) gets the bytes it moved per second of its run (0 for BG_NONE).
 * -1 when the loop had failed (reason on stderr), else 0. w NULL: 0. */
int bg_stop(bg_work *w, double *gb_per_s);

#endif
