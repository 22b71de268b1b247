/* p2p.h: the point-to-point engine: MPI's matching of sends and receives (by peer and tag, in
 * posting order, from any source too) over each peer's transport on the P2P channel, as a pure
 * protocol over transports, liveness and the clock (no threads, no locks: the process group
 * serializes calls and runs the progress thread). */
#ifndef TUTTI_ALGOS_P2P_H
#define TUTTI_ALGOS_P2P_H

#include "net.h"

/*
 * The protocol. Every message of the P2P channel is preceded by a fixed 72-byte envelope, so
 * that a receiver reads a peer's stream one envelope at a time and knows what follows:
 *
 *   EAGER  tag, length, sequence number; up to TUTTI__P2P_INLINE bytes ride in the envelope,
 *          up to TUTTI__P2P_EAGER_MAX follow it as one payload message
 *   RTS    a larger message (or, flagged TUTTI__P2P_SYNC, any one: flow control, below): tag,
 *          length, sequence number, and no data yet ...
 *   CTS    ... until the receiver has matched it and answers "clear to send" (or refuses it,
 *          when the lengths differ) ...
 *   DATA   ... and the sender sends the payload behind a DATA envelope (or DATA "withdrawn" if
 *          its send failed meanwhile).
 *   CREDIT over ofi, where no other envelope carries it soon: how many of the peer's messages
 *          this rank has matched so far (flow control, below; every envelope carries that
 *          count).
 *
 * A receiver keeps one envelope receive posted towards a peer only while it has something to
 * hear from it (a receive that peer could match, a send waiting for its CTS, a receive waiting
 * for its DATA), so that a job that never uses point-to-point never has a request on the
 * channel. An eager message that arrives before its receive waits in an engine buffer (one
 * copy later); a large one waits as an RTS only, so unexpected data is never larger than
 * TUTTI__P2P_EAGER_MAX per message. Non-overtaking holds per (pair, tag): messages are matched
 * in the order their envelopes arrive, which is the order they were sent; but a receive whose
 * matched send its sender then withdrew (DATA "withdrawn") waits again, in its place, for the
 * next message, which a receive posted after it may have taken meanwhile (p2p.c, repost).
 */
#define TUTTI__P2P_INLINE 32
#define TUTTI__P2P_EAGER_MAX ((size_t)16 << 10)

enum { TUTTI__P2P_EAGER = 1, TUTTI__P2P_RTS, TUTTI__P2P_CTS, TUTTI__P2P_DATA, TUTTI__P2P_CREDIT };
enum { TUTTI__P2P_REFUSED = 1 /* CTS */, TUTTI__P2P_WITHDRAWN = 1 /* DATA */,
       TUTTI__P2P_SYNC = 1 /* RTS: a message of any length, announced for flow control */ };

/*
 * Flow control over ofi. The provider keeps every message that comes before the receiver reads
 * it in a 16 KiB buffer of its own, without bound (300000 blocking 12-byte sends grew a slower
 * receiver to 4.8 GB); shm's rings are bounded by their size. So a receiver tells each peer
 * over ofi how many of its messages it has matched: in every envelope it sends it (a reply, a
 * clear to send), and in a CREDIT of its own once TUTTI__P2P_CREDIT_EVERY matches went untold
 * (a receiver that only receives); and a message to a peer that would have more than
 * TUTTI__P2P_WINDOW messages not yet reported matched goes as an RTS flagged TUTTI__P2P_SYNC,
 * whatever its length, which waits to be matched (not for the earlier ones: a receive may
 * match it first, by its tag): a blocking sender stays within the window of its receiver.
 * Counted by matches, not by the order of the messages (tags may be matched out of order). A
 * receiver may leave up to TUTTI__P2P_CREDIT_EVERY - 1 matches untold for good (a rank that
 * only receives from the sender and sends to another), so ranks that each send up to
 * TUTTI__P2P_WINDOW - TUTTI__P2P_CREDIT_EVERY messages to the next before receiving do not
 * wait (112: a ring, or two ranks in rounds) once the counts have arrived (a count still on its
 * way, across hosts, can make a send wait that need not); more than TUTTI__P2P_WINDOW wait, as
 * they wait at the third on shm. Two ranks that each send, then receive, stay far inside it.
 * The sender reads the counts only when it nears the window (catch_up), so that no envelope
 * receive stays posted for them. An asynchronous send past the window does not wait, but its
 * RTS does sit in the receiver's buffers until read; and messages never received count against
 * the window for good.
 */
#define TUTTI__P2P_WINDOW 128
#define TUTTI__P2P_CREDIT_EVERY 16

/* The envelope, as it travels (both ends are the same machine kind, so host order). */
typedef struct tutti__p2p_env {
    uint32_t magic;
    uint16_t kind;   /* TUTTI__P2P_EAGER ... */
    uint16_t flags;  /* TUTTI__P2P_REFUSED (CTS), TUTTI__P2P_WITHDRAWN (DATA),
                        TUTTI__P2P_SYNC (RTS) */
    int32_t tag;     /* EAGER, RTS: the user's tag */
    uint32_t check;  /* a hash of the fields above and below and of both ranks */
    uint64_t len;    /* EAGER, RTS, DATA: payload bytes */
    uint64_t seq;    /* EAGER, RTS: the sender's message number to this peer; CTS, DATA: the
                        RTS's */
    uint64_t ack;    /* every kind: how many of the recipient's messages the sender has matched
                        (flow control) */
    unsigned char data[TUTTI__P2P_INLINE]; /* EAGER of at most TUTTI__P2P_INLINE bytes */
} tutti__p2p_env_t;

/* tutti__p2p_env_seal sets env's magic and check word for a message from src to dst. */
void tutti__p2p_env_seal(tutti__p2p_env_t *env, int src, int dst);

/* tutti__p2p_env_check tells whether env, received by dst from src, may be trusted: magic,
 * check word, kind, flags and length bounds for its kind. On TUTTI_ERR_TRANSPORT it writes
 * what is wrong to why (cap bytes). Stream order (sequence numbers, which RTS a CTS answers)
 * is the engine's to check. */
tutti_status_t tutti__p2p_env_check(const tutti__p2p_env_t *env, int src, int dst, char *why,
                                    size_t cap);

typedef struct tutti__p2p tutti__p2p_t;

enum { TUTTI__P2P_SEND = 0, TUTTI__P2P_RECV = 1 };

/*
 * tutti__p2p_op_t is one send or receive, owned by the caller from tutti__p2p_post until it is
 * done (for an asynchronous one: until tutti__p2p_progress hands it back).
 */
typedef struct tutti__p2p_op {
    /* set by the caller before tutti__p2p_post */
    int kind;        /* TUTTI__P2P_SEND or TUTTI__P2P_RECV */
    int peer;        /* another rank; TUTTI_ANY_SOURCE for a receive from any */
    int tag;         /* >= 0 */
    void *buf;
    size_t len;
    uint64_t seq;    /* the caller's number for it, for messages */
    char *err;       /* TUTTI__ERRLEN bytes: where the failure text goes */
    bool async;      /* handed back by tutti__p2p_progress when done; else only done is set */

    /* results, valid once done */
    tutti_status_t status;
    int source;      /* receive: the rank its message came from; -1 otherwise */
    int done;        /* set last (release): the engine no longer touches the op */
    struct tutti__p2p_op *done_next; /* the list tutti__p2p_progress returns */

    /* the engine's */
    int state;
    int mpeer;       /* the peer it is bound to: the send's, or the message's once matched */
    uint64_t mseq;   /* the protocol sequence number of its message */
    uint64_t gen;    /* engine generation at post (which peer failures it saw) */
    uint64_t pno;    /* its place in the engine's posting order */
    double deadline;
    double timeout_s; /* set by the poster: its own timeout; 0: the network's */
    struct tutti__p2p_op *prev, *next;   /* every op not done */
    struct tutti__p2p_op *pprev, *pnext; /* receives not matched yet, in posting order */
    struct tutti__p2p_op *wnext;         /* the peer's list of ops waiting for its CTS/DATA */
    struct tutti__p2p_op *fprev, *fnext; /* ops whose requests are in flight (p2p_impl.h) */
    bool in_flight;
    struct tutti__p2p_unexp *ux;         /* an eager message it matched that still arrives */
    bool posted[3];
    tutti__req_t req[3]; /* send: envelope, DATA envelope, payload; receive: CTS, -, payload */
    tutti__p2p_env_t env[2]; /* send: envelope, DATA envelope; receive: CTS */
} tutti__p2p_op_t;

/* tutti__p2p_create makes net's engine (nothing is posted until the first operation). */
tutti_status_t tutti__p2p_create(tutti__net_t *net, tutti__p2p_t **out);

/* tutti__p2p_post starts op (checked by the caller: a valid peer, a tag >= 0, a buffer for len
 * bytes); its deadline is op->timeout_s from now, or the network's timeout if that is 0. It
 * never blocks. An op that ends at once (a peer that failed earlier, a message that had
 * arrived already) is done or queued for the next tutti__p2p_progress. */
void tutti__p2p_post(tutti__p2p_t *e, tutti__p2p_op_t *op);

/* tutti__p2p_progress moves everything forward without blocking (transports, arrivals,
 * matching, deadlines, liveness, abort) and returns the asynchronous ops that ended since the
 * last call, linked by done_next (the caller completes them). */
tutti__p2p_op_t *tutti__p2p_progress(tutti__p2p_t *e);

/* tutti__p2p_fail_all ends every op still open with status and "why" (abort, destroy),
 * withdrawing what they posted, and returns the asynchronous ones as tutti__p2p_progress does. */
tutti__p2p_op_t *tutti__p2p_fail_all(tutti__p2p_t *e, tutti_status_t status, const char *why);
/* tutti__p2p_fail_op ends op, if it has not ended yet, with status and the text why, taking back
 * what it posted as any failed op (the peer's streams stay in step), and returns the async ops
 * that have ended, op among them, to be handed over like progress's. The engine goes on. */
tutti__p2p_op_t *tutti__p2p_fail_op(tutti__p2p_t *e, tutti__p2p_op_t *op, tutti_status_t status,
                                    const char *why);

/* tutti__p2p_nap_begin and tutti__p2p_nap_end let a waiter sleep until a peer on this node
 * moves one of this rank's rings (the shm transport's doorbell: transport.h): begin counts the
 * thread as asleep and gives the doorbell's count (false, and nothing to end, when no peer is
 * on shm); the caller looks once more (progress), then end sleeps up to timeout_s (0: not at
 * all) unless a peer rang since. Any thread may call them, without the engine's lock. */
bool tutti__p2p_nap_begin(tutti__p2p_t *e, uint32_t *bell);
void tutti__p2p_nap_end(tutti__p2p_t *e, uint32_t bell, double timeout_s);
/* tutti__p2p_wake_nappers wakes this rank's threads napping so, for a thread whose progress
 * moved or ended something they may wait for (a blocking caller's op, completed by the
 * progress thread). */
void tutti__p2p_wake_nappers(tutti__p2p_t *e);

/* tutti__p2p_busy tells whether anything is open: ops, or the engine's own requests (an
 * envelope receive, data still arriving, a control message still going out). */
bool tutti__p2p_busy(const tutti__p2p_t *e);

/* tutti__p2p_has_ops tells whether any op is open (busy, less the engine's own requests). */
bool tutti__p2p_has_ops(const tutti__p2p_t *e);

/* tutti__p2p_destroy withdraws the engine's own requests and frees it; every op must be done
 * (tutti__p2p_fail_all first). NULL is fine. */
void tutti__p2p_destroy(tutti__p2p_t *e);

#endif /* TUTTI_ALGOS_P2P_H */
