/* p2p_impl.h: the point-to-point engine's private state, shared by its data path (p2p.c: posts,
 * arrivals, matching), its progress (p2p_progress.c) and its failure paths (p2p_fail.c:
 * withdrawing ops, failed and departed peers, deadlines, abort). */
#ifndef TUTTI_ALGOS_P2P_IMPL_H
#define TUTTI_ALGOS_P2P_IMPL_H

#include "p2p.h"

/* What an op is doing. Sends: S_EAGER (envelope and payload posted), S_RTS (waiting for the
 * peer's CTS), S_DATA (DATA envelope and payload posted). Receives: R_POSTED (not matched
 * yet), R_ARRIVING (matched an eager message whose payload still arrives into an engine
 * buffer), R_CTS (CTS sent, waiting for DATA), R_PAYLOAD (the payload arrives into the user's
 * buffer). */
enum { S_EAGER = 1, S_RTS, S_DATA, R_POSTED, R_ARRIVING, R_CTS, R_PAYLOAD, OP_DONE };

/* An envelope that arrived before a receive matched it (an eager one with its data), or an
 * eager payload the engine only drains (its receive failed or went away). */
typedef struct tutti__p2p_unexp {
    struct tutti__p2p_unexp *prev, *next; /* every entry, in arrival order */
    int peer, kind, tag;
    size_t len;
    uint64_t seq;
    char *data;               /* eager: len bytes (NULL when 0) */
    bool arriving;            /* req, the payload's receive, is still posted */
    bool matched;             /* a receive took it (or it is only drained) */
    tutti__p2p_op_t *op;      /* the receive waiting for it to arrive, if any */
    tutti__req_t req;
} tutti__p2p_unexp_t;

/* A control message the engine sends on its own (CTS refused, DATA withdrawn). */
typedef struct tutti__p2p_ctrl {
    struct tutti__p2p_ctrl *next;
    int peer;
    tutti__p2p_env_t env;
    tutti__req_t req;
} tutti__p2p_ctrl_t;

typedef struct tutti__p2p_peer {
    tutti__transport_t *tp;
    bool env_posted;          /* env_req is posted */
    tutti__req_t env_req;     /* the one envelope receive towards this peer */
    tutti__p2p_env_t env_in;
    uint64_t tx_seq;          /* message numbers sent to it so far */
    uint64_t rx_seq;          /* the last one received from it (they only grow) */
    uint64_t acked;           /* of the messages sent to it, how many it said it matched
                                 (CREDIT: flow control over ofi, p2p.h) */
    uint64_t unsent;          /* of the messages numbered to it, how many were withdrawn
                                 before their envelope went out (it never saw them) */
    uint64_t nmatched;        /* its messages matched here */
    uint64_t credited;        /* ... as last told it */
    int nposted;              /* unmatched receives that name it */
    int nwait;                /* ops on wait: sends waiting for its CTS, receives for its DATA */
    int nops;                 /* ops bound to it (its sends, receives that name or matched it) */
    /* the ops on wait, linked by wnext, oldest first, [TUTTI__P2P_SEND] sends waiting for
     * their CTS, [TUTTI__P2P_RECV] receives for their DATA: the answers come about in that
     * order, found near the front (in one list, newest first, each answer to 20000
     * flow-controlled sends walked them all, and each DATA every send waiting besides) */
    tutti__p2p_op_t *wait[2], *wait_last[2];
    /* its ops in flight, by kind, in the order they got there (struct tutti__p2p) */
    tutti__p2p_op_t *flight[2], *flight_last[2];
    uint64_t *withdrawn;      /* RTS numbers of sends withdrawn before their CTS came */
    int nwithdrawn, capwithdrawn;
    bool broken;              /* failed, died, left, or its stream is out of step */
    tutti_status_t broken_status;
    double left_seen;         /* when it was seen gone (destroyed its communicator), or last
                                 brought anything after that */
    uint64_t nrx, nrx_seen;   /* envelopes and payloads it brought; as of the last check */
    uint64_t dead_gen;        /* the engine's gen once its death was first seen (receives from
                                 any source posted since then never waited for it); 0: not */
    char why[512];
} tutti__p2p_peer_t;

struct tutti__p2p {
    tutti__net_t *net;
    int rank, size;
    tutti__p2p_peer_t *peers;
    tutti__p2p_op_t *live;            /* every op not done */
    tutti__p2p_op_t *posted, *posted_last; /* unmatched receives, in posting order */
    int nany;                         /* of them, from any source */
    tutti__p2p_unexp_t *ux, *ux_last; /* in arrival order */
    int nux_arriving;                 /* of them, whose payload still arrives */
    tutti__p2p_ctrl_t *ctrl;
    tutti__p2p_op_t *done, *done_last; /* asynchronous ops ended, for the caller */
    uint64_t gen;                     /* bumped by each peer failure */
    uint64_t nposts;                  /* ops posted so far (their posting order) */
    uint64_t any_fail_gen;            /* receives from any source posted before it fail */
    int last_broken;                  /* the peer that failed last, for their message */
    bool sweep;                       /* a peer failed: ops and entries that involve it go */
    bool closing;                     /* aborted or destroyed: withdraw, tell peers nothing */
    double next_slow, next_live;
    /* What spares progress a walk over every open op and unexpected entry (thousands, with as
     * many asynchronous sends posted: each walk cost milliseconds of cache misses, and posting
     * 20000 of them took minutes): they are looked at only once a request of the transports
     * has finished since the last look (finished_seen), or the engine posted one or read an
     * envelope (look); deadlines only once the earliest may have come (next_deadline). */
    uint64_t finished_seen;
    bool look;
    double next_deadline;
    /* The ops whose last requests are in flight (S_EAGER, S_DATA, R_PAYLOAD) sit on their
     * peer's list for their kind (a stream of the transport, which finishes them about in that
     * order): progress looks at the oldest TUTTI__P2P_FLIGHT_WINDOW still open of each, and at
     * the rest only once in a while (next_full: one that a transport finished out of order,
     * as ofi may, waits that long); look_deep: a look stopped short, so look again though
     * nothing new finished. One list for all peers let 64 sends stuck towards one peer delay
     * every other op to the next full look (1 ms). */
    int nflight;
    bool look_deep;
    double next_full;
};

#define TUTTI__P2P_FLIGHT_WINDOW 64

/* tutti__p2p_req_done: the transport has finished req (acquire: its data and status with it). */
static inline bool tutti__p2p_req_done(const tutti__req_t *r)
{
    return __atomic_load_n(&r->done, __ATOMIC_ACQUIRE);
}

/* ---- the data path (p2p.c) ---- */

/* tutti__p2p_complete ends op with st (its text, if an error, in op->err already): it leaves
 * every list and is handed to its owner. */
void tutti__p2p_complete(tutti__p2p_t *e, tutti__p2p_op_t *op, tutti_status_t st);

/* tutti__p2p_describe writes "recv #3 (8 bytes, tag 2) from rank 1" for messages. */
int tutti__p2p_describe(const tutti__p2p_op_t *op, char *buf, size_t cap);

/* tutti__p2p_unpost takes a receive off the list of unmatched ones. */
void tutti__p2p_unpost(tutti__p2p_t *e, tutti__p2p_op_t *op);

/* tutti__p2p_unwait takes op off its peer's wait list. */
void tutti__p2p_unwait(tutti__p2p_t *e, tutti__p2p_op_t *op);

/* tutti__p2p_need_env: the engine listens to p only while it has something to hear from it
 * (a send of which p may still ask, though it was withdrawn here, included: p must be told). */
bool tutti__p2p_need_env(const tutti__p2p_t *e, int p);

/* tutti__p2p_arrive handles the envelope that p's envelope receive brought (it is done, with
 * TUTTI_OK), and listens to p again if something needs it. */
void tutti__p2p_arrive(tutti__p2p_t *e, int p);

/* tutti__p2p_take_env reads p's envelope receive if it is done (p2p_progress.c): the envelope
 * is handled (tutti__p2p_arrive), or its failure fails p. False while it is not done, or none
 * is posted. */
bool tutti__p2p_take_env(tutti__p2p_t *e, int p);

/* tutti__p2p_listen posts the envelope receive towards p if something needs it and none is
 * posted. */
void tutti__p2p_listen(tutti__p2p_t *e, int p);

/* tutti__p2p_ctrl_send sends a control envelope (kind, flags, seq) to peer on its own. */
void tutti__p2p_ctrl_send(tutti__p2p_t *e, int peer, int kind, int flags, uint64_t seq);

/* tutti__p2p_ux_free takes an entry off the list and frees it (its request must be done). */
void tutti__p2p_ux_free(tutti__p2p_t *e, tutti__p2p_unexp_t *u);

/* ---- failures (p2p_fail.c) ---- */

/* tutti__p2p_fail ends op with status, its text "rank R: <op>: <detail>", after withdrawing
 * whatever it has posted. A withdrawal that leaves a peer's stream out of step fails the peer. */
void tutti__p2p_fail(tutti__p2p_t *e, tutti__p2p_op_t *op, tutti_status_t status,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* tutti__p2p_break marks peer failed with status and why (first failure wins): nothing more is
 * posted to or from it, and the next sweep ends every op that involves it (and the receives
 * from any source posted before). */
void tutti__p2p_break(tutti__p2p_t *e, int peer, tutti_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* tutti__p2p_sweep ends the ops, drops the unexpected entries and control messages of failed
 * peers, until no peer fails any more. */
void tutti__p2p_sweep(tutti__p2p_t *e);

/* tutti__p2p_slow_checks: abort, liveness (dead and departed peers) and deadlines, at now. */
void tutti__p2p_slow_checks(tutti__p2p_t *e, double now);

/* tutti__p2p_no_sender: every other rank has failed (a receive from any source can
 * never match). */
bool tutti__p2p_no_sender(const tutti__p2p_t *e);

/* tutti__p2p_cancel withdraws req, posted towards peer; false if that broke the peer's stream
 * (the peer is then failed). */
bool tutti__p2p_cancel(tutti__p2p_t *e, int peer, tutti__req_t *req);

#endif /* TUTTI_ALGOS_P2P_IMPL_H */
