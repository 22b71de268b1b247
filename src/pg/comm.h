/* comm.h: the communicator's internal state and the work handle, shared by src/pg/ and the
 * primitives that algorithms call. */
#ifndef TUTTI_COMM_H
#define TUTTI_COMM_H

#include <sys/types.h>

#include "../algos/algos.h"
#include "../common/common.h"
#include "../transport/transport.h"
#include "bootstrap.h"

#define TUTTI__COMM_MAGIC 0x74757474u /* "tutt" */

/* One algorithm choice for a byte range, as parsed from "ring:0-8192;tree:8193-max". */
typedef struct tutti__algo_range {
    size_t lo, hi; /* inclusive */
    const tutti__algo_t *algo;
} tutti__algo_range_t;

#define TUTTI__MAX_RANGES 8

typedef struct tutti__algo_override {
    int n; /* 0: no override, select.c's defaults apply */
    tutti__algo_range_t r[TUTTI__MAX_RANGES];
} tutti__algo_override_t;

struct tutti_comm {
    uint32_t magic;
    int rank, size;
    int local_rank, local_size, nnodes;
    int *node_of;       /* node index of each rank, nodes numbered by their lowest rank */
    int *local_ranks;   /* global ranks on this node, increasing; local_ranks[local_rank] == rank */
    bool oversubscribed; /* more local ranks than allowed cores: waits yield at once */
    double timeout_s;

    tutti__transport_t *shm; /* NULL when unused */
    tutti__transport_t *ofi; /* NULL when unused */
    tutti__transport_t **peer_tp; /* per rank; NULL for self */
    tutti__window_t *win;    /* shm window, only when every rank is on this node and on shm */
    tutti__liveness_t *live;

    uint64_t seq;              /* collectives posted so far */
    double next_live_check;    /* rate limit for tutti__live_check */
    tutti_status_t failed;     /* TUTTI_OK, or the error that broke the communicator */
    char failed_msg[TUTTI__ERRLEN];
    char last_error[TUTTI__ERRLEN];
    tutti__algo_override_t algo[TUTTI_COLL_COUNT];
    void *scratch;             /* tutti__coll_scratch's buffer */
    size_t scratch_size;
    uint64_t p2p_seq;          /* send/recv calls so far, for messages */
};

/* The state a work handle passes through. */
enum { TUTTI__WORK_PENDING = 0, TUTTI__WORK_DONE = 1 };

struct tutti_work {
    tutti_comm_t *comm; /* not owned; may be destroyed before the handle is freed */
    tutti__coll_t coll;
    volatile int state;
    tutti_status_t status;
    size_t *owned;      /* packed displacements made for a v-collective, freed with the work */
    char error[TUTTI__ERRLEN];
};

/* tutti__comm_valid tells whether comm is a live communicator (in the registry). */
bool tutti__comm_valid(const tutti_comm_t *comm);

/* tutti__comm_fail marks comm failed with status and message (first failure wins) and copies
 * the message into the thread's and the communicator's last-error text. Returns status. */
tutti_status_t tutti__comm_fail(tutti_comm_t *comm, tutti_status_t status, const char *msg);

/* tutti__comm_error records a non-fatal error (bad input) as comm's and the thread's last
 * error. Returns status. */
tutti_status_t tutti__comm_error(tutti_comm_t *comm, tutti_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* tutti__select_init parses the CCL_<COLL> variables into comm->algo (at creation). */
tutti_status_t tutti__select_init(tutti_comm_t *comm);

#endif /* TUTTI_COMM_H */
