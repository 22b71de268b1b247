/* observe.h: the process group's tracing and straggler-report state (observe.c, report.c). */
#ifndef TUTTI_PG_OBSERVE_H
#define TUTTI_PG_OBSERVE_H

#include "comm.h"

/* One collective as the report needs it: when this rank posted it. */
typedef struct tutti__obs_call {
    uint64_t seq1;  /* the call's sequence number + 1; 0: empty */
    double posted;  /* this rank's clock */
    uint64_t bytes;
    const char *name; /* the collective's ("allreduce", "allgatherv", ...: static) */
} tutti__obs_call_t;

struct tutti__obs {
    tutti__trace_t *trace; /* TUTTI_TRACE: the events; NULL: not tracing */
    char *path;            /* TUTTI_TRACE's value */
    int index;             /* traced communicators its rank 0's process had before it */
    uint32_t id;           /* rank 0's random number for this communicator (file names) */
    bool report;           /* TUTTI_REPORT=1 on some rank: report at destroy */
    double offset;         /* this rank's clock minus rank 0's, seconds */
    double align_err;      /* how far off that may be (rank 0: the largest of all ranks') */
    double origin;         /* rank 0's clock at creation: time zero of the trace */
    tutti__obs_call_t *calls; /* the last ncalls collectives, by sequence number */
    size_t ncalls;
};

/* The most text a report holds (more is cut, with a note). */
#define TUTTI__REPORT_MAX ((size_t)64 << 10)

/* tutti__obs_open reads TUTTI_TRACE and TUTTI_REPORT on every rank (through bs) and, when any
 * rank asks, turns recording on for comm on every rank and aligns the clocks. */
tutti_status_t tutti__obs_open(tutti_comm_t *comm, tutti__bootstrap_t *bs);
/* tutti__obs_coll records collective c, which began running at t0 and ended with st. */
void tutti__obs_coll(tutti_comm_t *comm, const tutti__coll_t *c, double t0, tutti_status_t st);
/* tutti__obs_report_final prints the report (TUTTI_REPORT=1, a healthy communicator): a
 * collective, at destroy, before anything is torn down (so queued work runs first). */
void tutti__obs_report_final(tutti_comm_t *comm);
/* tutti__obs_write writes the trace file: at destroy, once the workers have stopped. */
void tutti__obs_write(tutti_comm_t *comm);
void tutti__obs_free(tutti_comm_t *comm);

/* tutti__report builds the straggler report on rank 0 (text, at most cap bytes; "" elsewhere):
 * collective over comm. */
tutti_status_t tutti__report(tutti_comm_t *comm, char *text, size_t cap);

#endif
