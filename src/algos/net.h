/* net.h: the network context that algorithms and their primitives run on (ranks, the transport
 * of each peer, the shm windows, the nodes, per-slice scratch, liveness, the timeout), which the
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
    void *aux;     /* tutti__coll_aux's buffer: a hierarchical algorithm's own, since the flat
                      algorithms it runs inside take the scratch */
    size_t aux_size;
    double next_live_check; /* rate limit for tutti__live_check */
    double next_move;       /* rate limit for moving the slice's thread (colocate.c) */
    unsigned posts;         /* messages posted, to look at the peers now and then (prims.c) */
} tutti__slice_t;

/*
 * Where the ranks are, as the hierarchical algorithms see them (algos/topo.c builds it at
 * creation from node discovery, the same tables on every rank). Nodes are numbered by their
 * lowest rank; local index i of a node is its i-th lowest rank, the same index as in the
 * node's shm windows. A "rail" j is local index j of every node, in node order: the ranks that
 * carry one part of the traffic between nodes.
 */
typedef struct tutti__topo {
    int nnodes;
    int node;             /* this rank's node */
    int local_rank;       /* this rank's local index */
    int local_size;       /* ranks on this node */
    int ppn_min, ppn_max; /* fewest and most ranks on one node */
    int *node_of;         /* [size]: each rank's node */
    int *lidx;            /* [size]: each rank's local index on its node */
    int *node_off;        /* [nnodes + 1]: node k's ranks are members[node_off[k] ..
                             node_off[k + 1]), increasing */
    int *members;         /* [size]: the ranks, node by node */
    int *rails;           /* [ppn_min * nnodes]: rails[j * nnodes + k] is local index j of node k */
    size_t node_seg;      /* bytes per rank that the window region of every node with several
                             ranks holds, agreed at creation; 0 when one of them has none */
} tutti__topo_t;

/* What the network offers the algorithms (tutti__algo_t.needs names what one needs). */
enum {
    TUTTI__NEEDS_WINDOW = 1u << 0,  /* a shm window over every rank: all on one node, on shm */
    TUTTI__NEEDS_NODES = 1u << 1,   /* the group spans nodes, some node has several ranks, and
                                       every such node has a shm window over its ranks */
    TUTTI__NEEDS_UNIFORM = 1u << 2, /* every node has as many ranks */
    TUTTI__NEEDS_CMA = 1u << 3,     /* the window's ranks can read each other's memory
                                       (process_vm_readv: the single-copy algorithms) */
    TUTTI__NEEDS_CORES = 1u << 4,   /* no rank of this node has more busy threads than cores
                                       (the same on every local rank): a step handed from rank
                                       to rank costs no context switch */
    TUTTI__NEEDS_ROOM = 1u << 5,    /* the window's regions hold, in each half, the direct
                                       alltoallv's header and an element per rank: what an
                                       automatic choice of the direct alltoall asks (a window
                                       as small as TUTTI_SHM_WINDOW allows does not) */
};

typedef struct tutti__net {
    int rank, size;
    int nchan;              /* transport channels: P2P plus one per slice */
    tutti__links_t links;   /* the transport of each peer (shm and ofi are the ones to
                               progress) and the windows, one per slice (or none) */
    tutti__topo_t topo;     /* which ranks share a node */
    unsigned caps;          /* TUTTI__NEEDS_* bits that hold here */
    tutti__slice_t *slices; /* [nchan - 1] */
    tutti__liveness_t *live;
    double timeout_s;       /* how long any wait may take; read with tutti__net_timeout
                               (tutti_comm_set_timeout changes it while others wait) */
    bool timeout_given;     /* the config or tutti_comm_set_timeout gave timeout_s (atomic):
                               what a timeout's text says to raise (tutti__timeout_hint) */
    bool oversubscribed;    /* a busy thread of this rank shares its core by design (more
                               busy threads than cores, or ranks bound to one core): waits
                               yield at once */
    size_t round_bytes;     /* how many bytes a direct algorithm moves per rank between two
                               barriers, at most: an L2-sized share, so that what one core
                               writes into the window is still in its cache when the other
                               reads it; 0 (whole regions) when some local rank is
                               oversubscribed, where each round costs context switches. The
                               same on every local rank: round counts must agree */
    bool may_move;          /* a wait that finds its thread on the core of the thread it waits
                               for may move its own thread to a free core (colocate.c) */
    bool sleep_waits;       /* the local ranks run in different scheduling groups (each in a
                               session of its own, as MPICH's Hydra starts them): sched_yield
                               cannot hand the core to the rank waited for, so a wait that
                               steps aside sleeps on that rank's doorbell instead (colocate.c) */
    uint32_t tag_xor;       /* TUTTI_FAULT_TAG_XOR: mixed into the fingerprint messages carry */
    double unresp_s;        /* TUTTI_UNRESPONSIVE: a peer silent this long is unresponsive;
                               0: derived from the timeout (prims.c) */
    const volatile int *aborted; /* the communicator's aborted word, only read here (to stop
                                    waiting once it is aborted) */
} tutti__net_t;

/* What a timeout's text tells the user to raise when the call had a timeout of its own (else:
 * TUTTI_TIMEOUT). */
#define TUTTI__CALL_TIMEOUT_HINT \
    "the call's own timeout (tutti_set_call_timeout; c10d's opts.timeout)"

/* tutti__timeout_hint is what a timeout's text tells the user to raise: the call's own timeout
 * (call_timeout_s > 0), the communicator's where its config or tutti_comm_set_timeout gave it
 * (under PyTorch, the group's), else TUTTI_TIMEOUT. */
static inline const char *tutti__timeout_hint(const tutti__net_t *net, double call_timeout_s)
{
    if (call_timeout_s > 0)
        return TUTTI__CALL_TIMEOUT_HINT;
    if (__atomic_load_n(&net->timeout_given, __ATOMIC_RELAXED))
        return "the communicator's timeout (tutti_comm_config_t.timeout_s or "
               "tutti_comm_set_timeout; under PyTorch the group's: init_process_group(timeout=...) "
               "or new_group(timeout=...))";
    return "TUTTI_TIMEOUT";
}

/* tutti__net_timeout is net's current timeout: tutti_comm_set_timeout may store a new one
 * from another thread at any time. */
static inline double tutti__net_timeout(const tutti__net_t *net)
{
    double t;
    __atomic_load(&net->timeout_s, &t, __ATOMIC_RELAXED);
    return t;
}

/* tutti__net_unresponsive is how long a peer may send no heartbeat before a wait calls it
 * unresponsive: TUTTI_UNRESPONSIVE, or by default a few seconds less than the timeout (at least
 * half of it), so that a stopped peer is named as such just before the timeout would have
 * fired anyway: no job fails sooner than it would without it, yet the error says what
 * happened. */
static inline double tutti__net_unresponsive(const tutti__net_t *net)
{
    double t = tutti__net_timeout(net);
    if (net->unresp_s > 0)
        return net->unresp_s;
    return t - 3.0 > t / 2 ? t - 3.0 : t / 2;
}

#endif /* TUTTI_ALGOS_NET_H */
