/* trace.h: a communicator's event recorder for TUTTI_TRACE: collectives and the phases of their
 * algorithms, kept in memory per slice of execution and written at the end as a Chrome
 * trace-event (Perfetto) JSON file. The lowest layer, so that algorithms can record phases;
 * the process group (src/pg/observe.c) decides when it is on and aligns the clocks. */
#ifndef TUTTI_COMMON_TRACE_H
#define TUTTI_COMMON_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { TUTTI__TEV_COLL = 1, TUTTI__TEV_PHASE = 2 };

/* One event. Times are tutti__now() seconds of this process; names are static strings. */
typedef struct tutti__tev {
    double t0, t1;      /* start and end (a collective: when it began running, when it ended) */
    double posted;      /* a collective: when the caller posted it; 0 for phases */
    uint64_t seq;       /* the collective's sequence number (a phase: its collective's) */
    uint64_t bytes;     /* a collective: the caller's buffer; a phase: what it moved, or 0 */
    const char *name;   /* "allreduce", "copy in", "sendrecv", ... */
    const char *algo;   /* a collective: its algorithm; a phase: NULL */
    const char *detail; /* a collective: dtype; a phase: NULL */
    const char *op;     /* a collective: its reduction op, or NULL */
    const char *via;    /* a collective: the transport it ran over ("shm window", "ofi", ...) */
    int32_t peer;       /* a phase with one peer: its rank; else -1 */
    int32_t status;     /* a collective: how it ended (TUTTI_OK or an error) */
    uint16_t tid;       /* the thread: 0 the caller's, 1 + i worker i */
    uint8_t type;       /* TUTTI__TEV_* */
} tutti__tev_t;

/* The events of one slice: written only by the thread that runs that slice at the time (the
 * caller's inline path and worker 0 never run slice 0 at once: exec.c). */
typedef struct tutti__trace_buf {
    tutti__tev_t *ev;
    size_t n, cap;
} tutti__trace_buf_t;

typedef struct tutti__trace {
    int nbufs;
    tutti__trace_buf_t *bufs;
    size_t max_events;  /* per buffer: past it events are counted, not kept */
    uint64_t dropped;   /* (atomic) */
} tutti__trace_t;

/* The thread's track: 0 for a caller's thread, 1 + i for worker i (set by the worker). */
extern __thread int tutti__trace_tid;

/* tutti__trace_new makes a recorder of nbufs buffers holding max_events each; NULL when out
 * of memory. tutti__trace_free frees it (NULL is fine). */
tutti__trace_t *tutti__trace_new(int nbufs, size_t max_events);
void tutti__trace_free(tutti__trace_t *t);

/* tutti__trace_add appends ev to buffer b (a slice), with the thread's track. */
void tutti__trace_add(tutti__trace_t *t, int b, const tutti__tev_t *ev);

/* tutti__trace_phase records a phase of collective seq on slice b from t0 to now. */
void tutti__trace_phase(tutti__trace_t *t, int b, uint64_t seq, const char *name, int peer,
                        size_t bytes, double t0);

/* tutti__trace_write writes every event as trace-event JSON to f: pid rank, timestamps in
 * microseconds of the reference clock (local time - offset_s, from origin_s on that clock),
 * with meta (a JSON object's members, or "") in the file's metadata. false on a write error. */
bool tutti__trace_write(const tutti__trace_t *t, FILE *f, int rank, double offset_s,
                        double origin_s, const char *meta);

#endif
