/* algos.h: what an algorithm sees (the call's arguments and its network context), the
 * primitives it may use (point-to-point through whatever transport serves a peer, and the shm
 * window; prims.c), and the per-collective algorithm tables and the choice among them
 * (select.c). */
#ifndef TUTTI_ALGOS_H
#define TUTTI_ALGOS_H

#include "../common/common.h"
#include "../common/trace.h"
#include "../kernels/kernels.h"
#include "net.h"

typedef struct tutti__algo tutti__algo_t;

/*
 * tutti__coll_t is one collective call: its arguments (already checked, in-place resolved:
 * sendbuf is never TUTTI_IN_PLACE here, sendbuf == recvbuf means in place) and its context.
 * Counts are in elements, except where a field says bytes.
 */
typedef struct tutti__coll {
    tutti__net_t *net;    /* the network it runs on (the communicator's) */
    int rank, size;       /* this rank's index in the group the call runs on, and its size */
    const int *group;     /* NULL: the group is the communicator; else group[i] is the
                             communicator rank of member i (a part of a hierarchical call,
                             run by a flat algorithm among some of the ranks); the primitives
                             take member indexes and map them */
    bool node_window;     /* the group is this rank's node: window primitives use the node's
                             windows (indexed by local index) instead of the whole group's */
    int avg_n;            /* AVG divides by this; 0: by size (tutti__avg_div) */
    tutti_coll_t kind;    /* which collective */
    const char *name;     /* "allreduce", "allgatherv", ... for messages */
    uint64_t seq;         /* sequence number on the communicator */
    const tutti__algo_t *algo;
    int slice;            /* which slice of execution runs it: its channel, window and scratch */
    double deadline;      /* absolute, tutti__now() clock; 0: not yet set (the first slow
                             check of a wait sets it: most calls end before one) */
    double timeout_s;     /* this call's own timeout (tutti_set_call_timeout when it was
                             posted); 0: the network's (tutti__coll_timeout) */
    double next_ask;      /* when a message wait may ask the peers it lacks which call they
                             posted again (prims.c); 0: not asked in this call */
    double left_seen;     /* when a wait first saw peer left_rank, which it needs, gone */
    int left_rank;        /* (destroyed its communicator); left_seen 0: none seen */
    double dead_seen;     /* when a wait first needed a rank found dead (prims.c); 0: none */
    char *err;            /* TUTTI__ERRLEN bytes: where the failure text goes */
    bool declined;        /* it failed before posting or writing anything, alike on every rank
                             (tutti__decline): the communicator stays usable */

    /* The call's fingerprint (callsig.c), the same on every rank that posted the same call:
     * what peers compare before they use each other's data. */
    uint64_t fp;          /* hash of seq, sig_count, sig_info and root (allreduce_coalesced:
                             its layout) */
    uint64_t sig_count;   /* the whole call's count (not a slice's); allgatherv: a hash of the
                             layout; alltoallv: 0 (its counts differ between ranks) */
    uint32_t sig_info;    /* kind, variant, dtype, op, algorithm, slices (TUTTI__SIG_*) */
    uint64_t wcall;       /* this call's number on its window (0: not begun there) */
    tutti__trace_t *trace; /* TUTTI_TRACE: where its phases go (tutti__phase_end); NULL: off */
    double posted;        /* when it was posted (tutti__now), where recording is on; else 0 */
    size_t call_bytes;    /* the whole call's bytes, as selection saw them (not a slice's) */
    uint32_t bstep;       /* window barriers of this call so far */
    bool verified;        /* every peer's window call was found to be this one */
    bool described;       /* its descriptor is in its window slot (callsig.c) */
    bool relayed;         /* its failure only passes a peer's on (the window's failure word
                             says so, so that others name the rank that found it) */
    int blame;            /* the other rank of a mismatch's pair, or the rank found dead or
                             silent (communicator rank, told to every peer with the failure
                             notice); -1: none */
    bool flow;            /* a broadcast or reduce whose ofi edges hold the sending side back
                             this time (TUTTI__FLOW_EVERY): the same calls on every rank */
    struct tutti__coll *top; /* a part of a call (hierarchical, or tree's reduce + broadcast):
                             the whole call, whose relayed and blame its failure sets
                             (tutti__top); NULL: this is the whole call */

    const void *sendbuf;
    void *recvbuf;
    size_t count;         /* allreduce, reduce, bcast: elements; allgather: per rank;
                             alltoall: per peer; reduce_scatter: per rank (recvcount) */
                          /* v-variants (allgatherv, alltoallv) have the same kind as the plain
                             ones and are told apart by counts != NULL */
    tutti_dtype_t dtype;
    size_t esize;         /* bytes per element */
    tutti_op_t op;
    int root;             /* bcast, reduce */
    uint32_t layout;      /* allreduce_coalesced: a hash of its buffers' counts, which its
                             fingerprint carries where others carry the root (ranks whose
                             buffers split the same total otherwise reduced across them) */
    const size_t *counts;  /* allgatherv: recvcounts; alltoallv: recvcounts */
    const size_t *displs;  /* allgatherv, alltoallv: recv displacements (never NULL here) */
    const size_t *scounts; /* alltoallv: sendcounts */
    const size_t *sdispls; /* alltoallv: send displacements (never NULL here) */
} tutti__coll_t;

/* tutti__top is the whole call c is a part of (or c): where its failure's relayed and blame
 * go, which the executor reads. */
static inline tutti__coll_t *tutti__top(tutti__coll_t *c) { return c->top != NULL ? c->top : c; }

/* An algorithm: run it for c. It returns TUTTI_OK or an error whose text it wrote to c->err
 * (the primitives below do that for transport failures, timeouts and dead peers). The
 * executor decides what an error means for the communicator: any error fails it, except one
 * the algorithm declared with tutti__decline. */
typedef tutti_status_t (*tutti__algo_fn)(tutti__coll_t *c);

struct tutti__algo {
    const char *name;
    tutti__algo_fn run;
    unsigned needs;    /* TUTTI__NEEDS_* bits (net.h): offered only where the network has them */
    const char *desc;
};

/* tutti__algo_offered tells whether a can run on a network that offers caps. */
static inline bool tutti__algo_offered(const tutti__algo_t *a, unsigned caps)
{
    return (a->needs & ~caps) == 0;
}

/* tutti__coll_timeout is how long c may wait: its own timeout, else its network's. */
static inline double tutti__coll_timeout(const tutti__coll_t *c)
{
    return c->timeout_s > 0 ? c->timeout_s : tutti__net_timeout(c->net);
}

/*
 * Flow control for the rooted collectives over messages. A broadcast's data only flows down
 * its tree and a reduce's only up, so over ofi nothing holds the sending side back: the
 * provider keeps whatever arrives before its receive is posted (a 16 KiB buffer a message), and
 * a loop of 3-element broadcasts at 3 ranks ran the root 200000 calls ahead of a leaf that
 * grew to 4.7 GB and then crawled, while a reduce's root, calls behind its leaves, saw a
 * stopped leaf only after its backlog. shm's rings are bounded and need none of this. Every
 * TUTTI__FLOW_EVERY-th broadcast, and reduce, with data (exec.c sets c->flow; the first one
 * too), the receiving end of each edge over ofi answers the sending end with an empty message
 * once it has the data, and the sender waits for it: no rank gets more than TUTTI__FLOW_EVERY
 * such calls ahead of its neighbour in the tree (so a leaf of depth d, d times that of the
 * root), for one round trip per TUTTI__FLOW_EVERY calls (Open MPI's coll/sync does this with a
 * barrier). tutti__flow_edge tells whether the edge to member does it in c.
 */
#define TUTTI__FLOW_EVERY 64
bool tutti__flow_edge(const tutti__coll_t *c, int member);

/* tutti__avg_div is what AVG divides by when the last step of c's reduction rounds. */
static inline int tutti__avg_div(const tutti__coll_t *c) { return c->avg_n > 0 ? c->avg_n : c->size; }

/* ---- fingerprints of calls (callsig.c) ---- */

/* A call as its fingerprint describes it: what a rank publishes in its window and what a
 * mismatch message names. */
typedef struct tutti__calldesc {
    uint64_t seq, count, info; /* info: sig_info | (uint32_t)root << 32 (allreduce_coalesced:
                                  its layout in place of the root) */
    uint64_t wcall;
} tutti__calldesc_t;

/* tutti__sig_make fills c's fingerprint from its arguments, its algorithm and the number of
 * slices it runs as (the executor calls it once per call, after numbering it). */
void tutti__sig_make(tutti__coll_t *c, int nsplit);

/* tutti__sig_layout hashes an allreduce_coalesced's n buffer counts for its fingerprint
 * (tutti__coll_t.layout), as the fingerprint hashes an allgatherv's layout. */
uint32_t tutti__sig_layout(const size_t *counts, int n);

/* tutti__sig_desc is c's call as a descriptor (wcall: c's window call). */
tutti__calldesc_t tutti__sig_desc(const tutti__coll_t *c);

/* tutti__sig_describe writes "allreduce #7 of 1000 fp32 sum (direct)" for d into buf. */
int tutti__sig_describe(char *buf, size_t cap, const tutti__calldesc_t *d);

/* tutti__blame_note writes what failer's failure notice named, for a PEER_FAILED text: "; it
 * named rank 2", or "; it named this rank, ..." when that is me; "" when it named none. */
void tutti__blame_note(char *buf, size_t cap, int blame, int failer, int me);

/* tutti__sig_mismatch writes into c->err the text for a mismatch between c, posted by this
 * rank, and d (NULL: not known), posted by communicator rank peer, and returns
 * TUTTI_ERR_MISMATCH; how is what the peer's call was seen by. */
tutti_status_t tutti__sig_mismatch(tutti__coll_t *c, int peer, const tutti__calldesc_t *d,
                                   const char *how);

/* tutti__win_check_msg is for a call on a message path that has waited a while for rank r:
 * when r is in a window call of the same number that it has described (a window rank that
 * waits for a peer does), the two ranks chose different algorithms (per-rank CCL_* settings)
 * or calls: TUTTI_ERR_MISMATCH naming both; else TUTTI_OK. Only where c's window serves the
 * whole communicator. */
tutti_status_t tutti__win_check_msg(tutti__coll_t *c, int r);

/* tutti__win_peer_ahead is for the same wait: true, with its descriptor in *d, when rank r has
 * described a window call numbered after c. r then passed c's number without sending what c
 * still waits for from it, unless that is in flight (the caller looks again for a while before
 * it decides): r's call of that number was empty, or other than c. */
bool tutti__win_peer_ahead(tutti__coll_t *c, int r, tutti__calldesc_t *d);

/* tutti__resumed_check is for the end of a call that succeeded over ofi: where this process
 * may have been stopped lately (tutti__live_stalled) and a peer said meanwhile that its
 * communicator failed in this call or before it, the peers have reported the call failed, so
 * this rank does too (TUTTI_ERR_PEER_FAILED, naming both) rather than complete it alone;
 * else TUTTI_OK. Costs two coarse clock reads when nothing stalled. */
tutti_status_t tutti__resumed_check(tutti__coll_t *c);

/* tutti__count_mismatch writes the text for an alltoallv whose block from rank peer (c's rank
 * numbering) is theirs elements long where this rank expects tutti__rcount(c, peer), and returns
 * TUTTI_ERR_MISMATCH. */
tutti_status_t tutti__count_mismatch(tutti__coll_t *c, int peer, uint64_t theirs);

/* tutti__win_begin begins c on window w, once per call (later calls do nothing): it numbers
 * the call on w and publishes its value, before c writes anything a peer reads (its descriptor
 * follows once a check finds a peer's value different). */
void tutti__win_begin(tutti__coll_t *c, tutti__window_t *w);

/* tutti__win_value is what c's window call publishes (and its flagged lines carry as tag). */
uint64_t tutti__win_value(const tutti__coll_t *c);

/* tutti__win_check looks at window rank r (a member index of c's window) on a slow path of a
 * wait: TUTTI_ERR_MISMATCH when r has begun a different call at c's place on w, else TUTTI_OK.
 * arrived: r has reached a barrier of this call, so its value must be c's now. The text goes
 * to c->err. */
tutti_status_t tutti__win_check(tutti__coll_t *c, tutti__window_t *w, int r, bool arrived);

/* tutti__win_peer_failed returns r's failure (TUTTI_ERR_PEER_FAILED, or TUTTI_ERR_MISMATCH if
 * that is what r found) when r's communicator failed in this call or before it, or at all when
 * r has not arrived (it will not come); else TUTTI_OK. Callers look at every peer's call with
 * tutti__win_check first, so that a mismatch is named by the pair that differs. */
tutti_status_t tutti__win_peer_failed(tutti__coll_t *c, tutti__window_t *w, int r, bool arrived);

/* tutti__win_describe writes the descriptor of c's window call (if it began one) where its
 * peers can read it: a call that fails describes itself, so that a rank that comes to it late
 * with another call can name both. */
void tutti__win_describe(tutti__coll_t *c);

/* tutti__win_fail tells the ranks that share windows with this one that its communicator
 * failed with st during call seq (relayed: passing a peer's failure on, c->relayed): it writes
 * the failure word of every window of net and
 * withdraws its flagged lines (their tags become 0, which no call uses), so that a peer that
 * was stopped cannot complete the call after it resumes. */
void tutti__win_fail(tutti__net_t *net, tutti_status_t st, uint64_t seq, bool relayed);

/* ---- primitives (prims.c) ---- */

/* tutti__decline is how an algorithm refuses c before it has posted or written anything, for a
 * reason every rank finds alike (no usable window, a window too small): it writes the text to
 * c->err, marks c declined and returns status, and the communicator stays usable. */
tutti_status_t tutti__decline(tutti__coll_t *c, tutti_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* tutti__coll_fail writes the text of c's failure to c->err, after the rank and the call
 * ("rank R: <call>: <text>"), and returns status. */
tutti_status_t tutti__coll_fail(tutti__coll_t *c, tutti_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* tutti__isend / tutti__irecv post bytes to / from peer (an index in c's group: the
 * communicator rank unless c->group maps it) on c's channel (its slice's). req must stay alive
 * until tutti__waitall returns for it; a post that fails withdraws everything else c has posted
 * (see tutti__waitall). */
tutti_status_t tutti__isend(tutti__coll_t *c, int peer, const void *buf, size_t bytes,
                            tutti__req_t *req);
tutti_status_t tutti__irecv(tutti__coll_t *c, int peer, void *buf, size_t bytes, tutti__req_t *req);

/*
 * tutti__waitall progresses until all n requests are done. Every wait has c->deadline, checks
 * that no peer has died and that the communicator was not aborted, and backs off when ranks
 * outnumber cores. On failure the text in c->err names the collective, its sequence number and
 * the peers still missing; what the failure means is the executor's to decide. Before it
 * returns an error it withdraws (transport cancel) everything c still has posted, these
 * requests and any other of c's channel, so that nothing on the failing algorithm's stack is
 * touched afterwards.
 */
tutti_status_t tutti__waitall(tutti__coll_t *c, tutti__req_t *reqs, int n);

/* Blocking helpers built on the three above. */
tutti_status_t tutti__send(tutti__coll_t *c, int peer, const void *buf, size_t bytes);
tutti_status_t tutti__recv(tutti__coll_t *c, int peer, void *buf, size_t bytes);
tutti_status_t tutti__sendrecv(tutti__coll_t *c, int speer, const void *sbuf, size_t sbytes,
                               int rpeer, void *rbuf, size_t rbytes);

/* tutti__coll_window is c's slice of the window its group shares: the whole group's, or for a
 * part that runs on this rank's node (node_window), the node's; NULL when there is none. */
static inline tutti__window_t *tutti__coll_window(const tutti__coll_t *c)
{
    tutti__window_t *const *w = c->node_window ? c->net->links.node_wins : c->net->links.wins;
    return w != NULL ? w[c->slice] : NULL;
}

/* tutti__direct_window sets *w to c's slice of the shm window for a direct algorithm that uses
 * whole regions; without a window that serves all c->size ranks with room for one element it
 * declines (TUTTI_ERR_INTERNAL: select.c offers direct algorithms only with a window). */
static inline tutti_status_t tutti__direct_window(tutti__coll_t *c, tutti__window_t **w)
{
    tutti__window_t *x = tutti__coll_window(c);
    *w = x;
    if (__builtin_expect(x == NULL || x->nranks != c->size || x->region_size < c->esize, 0))
        return tutti__decline(c, TUTTI_ERR_INTERNAL, "%s (direct): no usable shm window on rank %d",
                              c->name, c->rank);
    return TUTTI_OK;
}

/* tutti__direct_slots is tutti__direct_window for a direct algorithm that cuts each region,
 * past head bytes, into one slot per rank: *slot is their size, a multiple of 64 bytes where
 * the region allows (aligned loads for the kernels), the n of them at most net->round_bytes. A
 * slot that cannot hold one element declines (TUTTI_ERR_NOT_SUPPORTED) with advice naming alt,
 * the algorithm to use instead. */
tutti_status_t tutti__direct_slots(tutti__coll_t *c, size_t head, const char *alt,
                                   tutti__window_t **w, size_t *slot);

/*
 * tutti__win_barrier: every rank of the window waits for all others to reach the same barrier.
 * A barrier is tagged with its call's number on the window and its step in the call (so no
 * ABA, and a call that did more or fewer barriers than its peers cannot shift a later one);
 * the first barrier of a call begins it on the window (tutti__win_begin) and, once passed,
 * checks that every peer's window call is this one (else TUTTI_ERR_MISMATCH, before any rank
 * reads another's region); every barrier fails if a peer's communicator has failed. Release/acquire: writes before it are visible to all
 * after it. Same deadline and failure checks as tutti__waitall.
 */
tutti_status_t tutti__win_barrier(tutti__coll_t *c);

/*
 * Single copy (cma): a rank publishes the address of its data in the first words of its region
 * of c's slice's window, a barrier later the others read it straight from its memory with
 * tutti__cma_get, and tutti__cma_finish ends the call. tutti__cma_window sets
 * *w to the window when single copy is on (w->cma) and a region holds words 64-bit words;
 * otherwise it declines (TUTTI_ERR_NOT_SUPPORTED, naming the direct algorithm). Words past the
 * first are the algorithm's (alltoallv's displacements).
 */
tutti_status_t tutti__cma_window(tutti__coll_t *c, size_t words, tutti__window_t **w);

/* tutti__cma_get reads len bytes at address remote of rank r (tutti__cma_read) into dst; a
 * refused read writes its text, naming the call, to c->err. */
tutti_status_t tutti__cma_get(tutti__coll_t *c, tutti__window_t *w, int r, uint64_t remote,
                              void *dst, size_t len);

/* tutti__cma_finish is the barrier after the reads (no rank may change or free what others
 * read before it): mine is this rank's outcome (its text in c->err). Every rank fails when any
 * rank's reads failed, so that all agree; returns mine, or TUTTI_ERR_SYSTEM naming the rank
 * whose reads failed. */
tutti_status_t tutti__cma_finish(tutti__coll_t *c, tutti_status_t mine);

/* The tail of every region of a window (2 x TUTTI__WIN_SMALL_HALF bytes, small_size) is kept
 * for the small paths of the direct algorithms, when the region can spare it (the process
 * group reserves it at creation). */
#define TUTTI__WIN_SMALL_HALF ((size_t)16 << 10)

/*
 * Flagged lines ("LL", as NCCL calls its low-latency protocol): the small area written as
 * 64-byte lines of TUTTI__LL_DATA data bytes followed by an 8-byte tag. A reader waits on the
 * lines themselves, so a small message costs one cache-line hand-off instead of a barrier flag
 * followed by the data. tutti__ll_write copies bytes from src into dst (a 64-byte aligned area
 * of tutti__ll_span(bytes) bytes) and tags every line, each tag stored after its data with
 * release order. tutti__ll_wait waits until the line at byte offset off of rank r's region
 * carries tag (same deadline and failure checks as tutti__win_barrier); tutti__ll_copy waits
 * for each line of the bytes rank r wrote at off and copies them to dst. Tags must differ from
 * anything the area held before: callers use their window value (tutti__win_small_begin),
 * which holds the call's sequence number. A wait whose lines do not come looks at the peer's
 * window call on its slow path (tutti__win_check), so a different call there is a mismatch.
 */
#define TUTTI__LL_DATA ((size_t)56)
static inline size_t tutti__ll_lines(size_t bytes) /* at least one: an empty block is a tag */
{
    return bytes == 0 ? 1 : (bytes + TUTTI__LL_DATA - 1) / TUTTI__LL_DATA;
}
static inline size_t tutti__ll_span(size_t bytes) { return tutti__ll_lines(bytes) * 64; }

/* Each half of the small area: flagged lines in its first TUTTI__WIN_SMALL_LL bytes, plain
 * data (read after a barrier) in the rest. Kept apart because plain data left where a line's
 * tag goes could equal a later operation's tag and pass for it. */
#define TUTTI__WIN_SMALL_LL ((size_t)8 << 10)
#define TUTTI__WIN_SMALL_RAW (TUTTI__WIN_SMALL_HALF - TUTTI__WIN_SMALL_LL)

/* tutti__win_small_begin starts an operation c on the window's small area (2 halves, used
 * alternately): it begins c on w (tutti__win_begin), returns the byte offset, in every rank's
 * region, of the half this operation uses (its flagged-line part; the plain part follows at
 * + TUTTI__WIN_SMALL_LL) and sets *tag to its flagged-line tag: c's window value, which holds
 * its fingerprint, so that lines of a different call are never taken for this one's. Every rank
 * must call it for the same operations. A rank writes a half again two operations later, once
 * it has seen every other rank's data (lines or barrier) of the operation in between, which
 * each sent only after reading this one: no barrier is needed after the reads. */
static inline size_t tutti__win_small_begin(tutti__coll_t *c, tutti__window_t *w, uint64_t *tag)
{
    uint64_t seq = w->small_seq++;
    tutti__win_begin(c, w);
    *tag = tutti__win_value(c);
    return w->region_size + (size_t)(seq & 1u) * TUTTI__WIN_SMALL_HALF;
}
void tutti__ll_write(char *dst, const void *src, size_t bytes, uint64_t tag);
tutti_status_t tutti__ll_wait(tutti__coll_t *c, int r, size_t off, uint64_t tag);
tutti_status_t tutti__ll_copy(tutti__coll_t *c, int r, size_t off, void *dst, size_t bytes,
                              uint64_t tag);

/* ---- threads that share a core (colocate.c) ---- */

/* tutti__colo_note publishes the core the calling thread runs c's slice on (in its word of the
 * slice's window; nothing without a window). The executor calls it as a call starts. */
void tutti__colo_note(const tutti__coll_t *c);

/* tutti__colo_shared tells whether rank r's thread of c's slice was last seen on the calling
 * thread's core: the waiter should then step aside at once. When so, and the network context
 * allows it (net->may_move), one of the two threads (the higher rank's, unless only the other
 * may move) is moved to a core that no other thread of the node's ranks was seen on, at most
 * every 50 ms per slice, without narrowing the cores it may use. */
bool tutti__colo_shared(tutti__coll_t *c, int r);

/* tutti__colo_ring wakes the threads asleep on this rank's doorbell (tutti__colo_sleep), if
 * any, once this rank has published what they may wait for: a locked load where
 * net->sleep_waits, a plain one where only busy-core naps sleep (TUTTI_BUSY_CORE_NAP). */
void tutti__colo_ring(const tutti__coll_t *c);

/* tutti__colo_sleep sleeps until rank r rings its doorbell or timeout_s passes, unless
 * ready(arg) (looked at after this thread counted itself among r's sleepers) already holds;
 * without a window it only sleeps. The caller looks again either way. */
void tutti__colo_sleep(const tutti__coll_t *c, int r, bool (*ready)(const void *),
                       const void *arg, double timeout_s);

/* tutti__coll_scratch returns the slice's scratch buffer, of at least bytes (grown on demand,
 * freed with the communicator), or NULL with c->err set. */
void *tutti__coll_scratch(tutti__coll_t *c, size_t bytes);

/* tutti__coll_aux is tutti__coll_scratch's twin, a second buffer per slice for an algorithm
 * that runs other algorithms inside it (they take the scratch, and may move it). */
void *tutti__coll_aux(tutti__coll_t *c, size_t bytes);

/* ---- hierarchical building blocks (hier.c) ---- */

/* tutti__hier_node makes loc the part of c that runs among the ranks of this rank's node, over
 * the node's windows: rank is the local index, size the local size. It shares c's error text
 * and deadline (set now if c had none yet). */
void tutti__hier_node(tutti__coll_t *c, tutti__coll_t *loc);

/* tutti__hier_group makes sub the part of c that runs among the n communicator ranks of
 * group (this rank is group[me]), for a flat algorithm to run; AVG still divides by c's whole
 * group. Shares c's error text and deadline (set now if c had none yet). */
void tutti__hier_group(tutti__coll_t *c, const int *group, int n, int me, tutti__coll_t *sub);

/* tutti__hier_window is the node window a hierarchical algorithm uses for loc (NULL when this
 * node has one rank, which needs none); a node of several ranks without one declines
 * (TUTTI_ERR_INTERNAL: select.c offers these algorithms only where every such node has one).
 * *seg is the elements of c's dtype that every node's region holds (topo.node_seg), at least
 * min; a window too small for min declines (TUTTI_ERR_NOT_SUPPORTED, naming alt). */
tutti_status_t tutti__hier_window(tutti__coll_t *c, tutti__coll_t *loc, size_t min,
                                  const char *alt, tutti__window_t **w, size_t *seg);

/* Block layout of the gathering and exchanging collectives, plain or v: tutti__rcount and
 * tutti__rdispl are the elements and displacement of the block from (or, for allgather, of)
 * rank i in recvbuf; tutti__scount and tutti__sdispl of the block for rank j in an alltoall's
 * sendbuf. */
static inline size_t tutti__rcount(const tutti__coll_t *c, int i)
{
    return c->counts == NULL ? c->count : c->counts[i];
}
static inline size_t tutti__rdispl(const tutti__coll_t *c, int i)
{
    return c->counts == NULL ? (size_t)i * c->count : c->displs[i];
}
static inline size_t tutti__scount(const tutti__coll_t *c, int j)
{
    return c->counts == NULL ? c->count : c->scounts[j];
}
static inline size_t tutti__sdispl(const tutti__coll_t *c, int j)
{
    return c->counts == NULL ? (size_t)j * c->count : c->sdispls[j];
}

/* tutti__rtotal is the elements of c's whole receive buffer (every rank's block). */
static inline size_t tutti__rtotal(const tutti__coll_t *c)
{
    size_t t = 0;
    for (int i = 0; c->counts != NULL && i < c->size; i++)
        t += c->counts[i];
    return c->counts == NULL ? (size_t)c->size * c->count : t;
}

/* tutti__alltoall_begin starts an alltoall(v) either algorithm runs: in place it moves the
 * input to scratch (*in then points there), and it copies the rank's own block. */
tutti_status_t tutti__alltoall_begin(tutti__coll_t *c, const char **in);

/* tutti__direct_reduce is the direct (shm window) reduction that allreduce and reduce share:
 * every rank reduces its slice over all ranks' copies; root < 0 copies the result out on every
 * rank (allreduce), else on root only (reduce). */
tutti_status_t tutti__direct_reduce(tutti__coll_t *c, int root);

/* ---- phases for TUTTI_TRACE ---------------------------------------------------------------
 * t0 = tutti__phase_begin(c); ...; tutti__phase_end(c, "copy in", peer or -1, bytes, t0):
 * one event nested in the collective's, only when tracing (a predicted branch otherwise). */
static inline double tutti__phase_begin(const tutti__coll_t *c)
{
    return __builtin_expect(c->trace != NULL, 0) ? tutti__now() : 0.0;
}
static inline void tutti__phase_end(const tutti__coll_t *c, const char *name, int peer,
                                    size_t bytes, double t0)
{
    if (__builtin_expect(c->trace != NULL, 0))
        tutti__trace_phase(c->trace, c->slice, c->seq, name, peer, bytes, t0);
}

/* ---- algorithm tables (one file per algorithm; the tables live in select.c) ---- */

extern const tutti__algo_t tutti__allreduce_ring, tutti__allreduce_tree, tutti__allreduce_direct;
extern const tutti__algo_t tutti__allreduce_rhd;
extern const tutti__algo_t tutti__allgather_ring, tutti__allgather_direct, tutti__allgather_cma;
extern const tutti__algo_t tutti__alltoall_pairwise, tutti__alltoall_direct, tutti__alltoall_cma;
/* tutti__alltoall_direct_room tells whether window regions of region_size bytes hold, in each
 * half, the direct alltoallv's header for n ranks and 16 bytes per rank (twice the largest
 * element): what an automatic choice of the direct alltoall asks (TUTTI__NEEDS_ROOM). */
bool tutti__alltoall_direct_room(size_t region_size, int n);
extern const tutti__algo_t tutti__reduce_scatter_ring, tutti__reduce_scatter_direct;
extern const tutti__algo_t tutti__bcast_tree, tutti__bcast_direct, tutti__bcast_cma;
extern const tutti__algo_t tutti__reduce_tree, tutti__reduce_direct;
extern const tutti__algo_t tutti__barrier_dissemination, tutti__barrier_direct;
/* hierarchical: node-local steps over the node's shm window, steps between nodes over the
 * flat algorithms above */
extern const tutti__algo_t tutti__allreduce_hier, tutti__allgather_hier, tutti__alltoall_hier;
extern const tutti__algo_t tutti__reduce_scatter_hier, tutti__bcast_hier;

/* ---- the choice (select.c) ---- */

/* One algorithm chosen for a byte range, as parsed from "ring:0-8192;tree:8193-max". */
typedef struct tutti__algo_range {
    size_t lo, hi; /* inclusive */
    const tutti__algo_t *algo;
} tutti__algo_range_t;

#define TUTTI__MAX_RANGES 8

/* The overrides of one collective: the first range that holds a call's size wins. */
typedef struct tutti__algo_override {
    int n; /* 0: no override, the defaults apply */
    tutti__algo_range_t r[TUTTI__MAX_RANGES];
} tutti__algo_override_t;

/* tutti__algos_for lists the algorithms of coll (NULL-terminated); NULL for no collective. */
const tutti__algo_t *const *tutti__algos_for(tutti_coll_t coll);

/* tutti__coll_name is coll's name for messages ("allreduce", ...). */
const char *tutti__coll_name(tutti_coll_t coll);

/* tutti__algo_find returns coll's algorithm named by the len bytes at name, or NULL. */
const tutti__algo_t *tutti__algo_find(tutti_coll_t coll, const char *name, size_t len);

/* tutti__select picks the algorithm for a call of coll moving bytes among n ranks: the
 * override ov's range that holds bytes, else the default by size and topology (caps: the
 * TUTTI__NEEDS_* bits the network offers). v: the call is an allgatherv or alltoallv. */
const tutti__algo_t *tutti__select(const tutti__algo_override_t *ov, unsigned caps, int n,
                                   tutti_coll_t coll, size_t bytes, bool v);

/* tutti__cma_alltoall_min is the block size from which a plain alltoall among n ranks of one
 * node takes single copy; alltoallv's single copy moves smaller blocks through the window. */
size_t tutti__cma_alltoall_min(int n);

/* tutti__allreduce_flat is the flat allreduce for bytes among n ranks that talk through the
 * network (a whole group, or a rail of a hierarchical one): the tree up to TUTTI__TREE_MAX
 * bytes, then the ring or recursive halving/doubling, whichever a cost model of the two says
 * takes less time (a function of n and bytes only, so every rank picks alike). */
#define TUTTI__TREE_MAX ((size_t)64 << 10)
const tutti__algo_t *tutti__allreduce_flat(int n, size_t bytes);

/* ---- the nodes (topo.c) ---- */

/* tutti__topo_init fills t for rank of size from node discovery (every rank gets the same
 * tables); node_seg is left 0 for the process group to agree on. Free with tutti__topo_free,
 * also after a failure. */
tutti_status_t tutti__topo_init(tutti__topo_t *t, int rank, int size, const tutti__nodes_t *nodes);
void tutti__topo_free(tutti__topo_t *t);

/* tutti__topo_caps is what a network with links l and topology t offers (TUTTI__NEEDS_*). */
unsigned tutti__topo_caps(const tutti__topo_t *t, const tutti__links_t *l);

/* tutti__coll_bytes is the size that selection and overrides see: count * esize (allgather,
 * reduce_scatter, alltoall: per rank); allgatherv: the largest block; alltoallv: 0, since its
 * counts differ between ranks and every rank must choose the same algorithm. */
size_t tutti__coll_bytes(const tutti__coll_t *c);

#endif /* TUTTI_ALGOS_H */
