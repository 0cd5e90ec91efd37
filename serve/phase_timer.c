/* SPDX-License-Identifier: Apache-2.0 */
/* Device time per phase from profiling events, summed after the caller has
 * finished the queue (no extra synchronisation on the hot path). */
#include "serve.h"

#include <stdlib.h>

cl_event *serve_timer_slot(serve_timer *t, serve_phase phase) {
    if (!t || !t->enabled || (int)phase < 0 || phase >= SERVE_PHASE_COUNT) return NULL;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 256;
        cl_event *ev = realloc(t->events, (size_t)cap * sizeof *ev);
        if (!ev) return NULL;
        t->events = ev;
        int *ph = realloc(t->phases, (size_t)cap * sizeof *ph);
        if (!ph) return NULL;
        t->phases = ph;
        t->cap = cap;
    }
    t->events[t->n] = NULL;
    t->phases[t->n] = (int)phase;
    return &t->events[t->n++];
}

int serve_timer_collect(serve_timer *t) {
    if (!t) return LAZYATTN_STATUS_OK;
    cl_ulong first = 0, last = 0;
    for (int i = 0; i < t->n; i++) {
        cl_event e = t->events[i];
        if (!e) continue; /* the call failed before making its event */
        cl_ulong start = 0, end = 0;
        if (clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof start, &start, NULL) ==
                CL_SUCCESS &&
            clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL) ==
                CL_SUCCESS &&
            end > start) {
            t->seconds[t->phases[i]] += 1e-9 * (double)(end - start);
            if (first == 0 || start < first) first = start;
            if (end > last) last = end;
            if (t->trace && t->trace_events && t->trace_n < t->trace_cap)
                t->trace_events[t->trace_n++] =
                    (serve_timer_event){t->phases[i], (uint64_t)start, (uint64_t)end};
        }
        clReleaseEvent(e);
    }
    if (last > first && first != 0) t->span_s += 1e-9 * (double)(last - first);
    t->n = 0;
    return LAZYATTN_STATUS_OK;
}

void serve_timer_release(serve_timer *t) {
    if (!t) return;
    serve_timer_collect(t);
    free(t->events);
    free(t->phases);
    t->events = NULL;
    t->phases = NULL;
    t->n = t->cap = 0;
}

const char *serve_phase_name(serve_phase phase) {
    static const char *names[SERVE_PHASE_COUNT] = {"gemm", "attention", "copy", "elementwise",
                                                    "upload"};
    return (int)phase >= 0 && phase < SERVE_PHASE_COUNT ? names[phase] : "?";
}

const char *serve_enqueue_kind_name(serve_enqueue_kind k) {
    static const char *names[SERVE_ENQ_COUNT] = {"gemm",   "attention", "copy", "elementwise",
                                                 "upload", "read",      "plan"};
    return (int)k >= 0 && k < SERVE_ENQ_COUNT ? names[k] : "?";
}
