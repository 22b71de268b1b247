/* net.h: the network context that algorithms and their primitives run on (ranks, the transport
 * of each peer, the shm windows, per-slice scratch, liveness, the timeout), which the
 * communicator embeds; nothing below the process group sees the communicator itself. */
#ifndef TUTTI_ALGOS_NET_H
#define TUTTI_ALGOS_NET_H

#include "../bootstrap/liveness.h"
#include "../common/common.h"
#include "../transport/transport.h"

/* What one slice of execution owns: a worker, or the caller running an operation inline, uses
 * slice s's scratch while it runs a piece of an operation on channel TUTTI__CHAN_COLL + s. */
typedef struct tutti__slice {
    void *scratch; /* tutti__coll_scratch's buffer */
    size_t scratch_size;
    double next_live_check; /* rate limit for tutti__live_check */
    double next_move;       /* rate limit for moving the slice's thread (colocate.c) */
} tutti__slice_t;

typedef struct tutti__net {
    int rank, size;
    int nchan;              /* transport channels: P2P plus one per slice */
    tutti__links_t links;   /* the transport of each peer (shm and ofi are the ones to
                               progress) and the windows, one per slice (or none) */
    tutti__slice_t *slices; /* [nchan - 1] */
    tutti__liveness_t *live;
    double timeout_s;       /* how long any wait may take; read with tutti__net_timeout
                               (tutti_comm_set_timeout changes it while others wait) */
    bool oversubscribed;    /* a busy thread of this rank shares its core by design (more
                               busy threads than cores, or ranks bound to one core): waits
                               yield at once */
    bool may_move;          /* a wait that finds its thread on the core of the thread it waits
                               for may move its own thread to a free core (colocate.c) */
    bool sleep_waits;       /* the local ranks run in different scheduling groups (each in a
                               session of its own, as MPICH's Hydra starts them): sched_yield
                               cannot hand the core to the rank waited for, so a wait that
                               steps aside sleeps on that rank's doorbell instead (colocate.c) */
    const volatile tutti_status_t *failed; /* the communicator's status word, only read here
                                              (to stop waiting once it is aborted) */
} tutti__net_t;

/* tutti__net_timeout is net's current timeout: tutti_comm_set_timeout may store a new one
 * from another thread at any time. */
static inline double tutti__net_timeout(const tutti__net_t *net)
{
    double t;
    __atomic_load(&net->timeout_s, &t, __ATOMIC_RELAXED);
    return t;
}

#endif /* TUTTI_ALGOS_NET_H */
