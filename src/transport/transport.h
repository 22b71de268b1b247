/* transport.h: the small vtable every transport (shm, ofi) fills, the request it progresses,
 * the shared-memory window that only shm offers, and the links (transport.c) that pick one
 * transport per peer. Transports know peers and bytes, never which collective they serve, and
 * are made from rank, size, channels and the bootstrap, never from a communicator. */
#ifndef TUTTI_TRANSPORT_H
#define TUTTI_TRANSPORT_H

#include "../bootstrap/discover.h"
#include "../bootstrap/oob.h"
#include "../common/common.h"

typedef struct tutti__transport tutti__transport_t;

enum { TUTTI__REQ_SEND = 0, TUTTI__REQ_RECV = 1 };
/*
 * Independent message streams per pair of ranks ("channels"): channel 0 carries user send/recv,
 * and slice s of a collective (0 <= s < nslices) uses channel TUTTI__CHAN_COLL + s, so slices
 * that run at once on different threads never share a stream. A communicator has
 * nchan = 1 + nslices channels (2 .. TUTTI__CHAN_MAX), fixed before its transports are
 * created; a transport accepts req->chan in [0, nchan).
 */
enum { TUTTI__CHAN_P2P = 0, TUTTI__CHAN_COLL = 1 };
#define TUTTI__CHAN_MAX 17 /* 1 + 16 slices */

/*
 * tutti__req_t is one posted send or receive. The caller owns its memory and keeps it (and the
 * buffer) alive until done is set or the transport is destroyed. Messages between two ranks on
 * one channel are matched in posting order: the n-th send from a to b meets b's n-th receive
 * from a, whose len and tag must be equal (a mismatch fails the request: TUTTI_ERR_INTERNAL
 * with a text naming both lengths or tags). Channels are independent of each other.
 *
 * Threads: post and progress may be called from several threads at once (typically one per
 * channel). Requests of one (peer, channel) must be posted by one thread at a time, in the order
 * the peer posts its matching ones. Progress by any thread moves every request of the transport,
 * so a thread that waits on a request only has to keep calling progress until done is set, even
 * while another thread is the one that completes it.
 */
typedef struct tutti__req {
    struct tutti__req *next; /* the transport's per-peer queue; private to the transport */
    int kind;                /* TUTTI__REQ_SEND or TUTTI__REQ_RECV */
    int chan;                /* TUTTI__CHAN_P2P, or TUTTI__CHAN_COLL + slice */
    int peer;                /* global rank */
    uint32_t tag;            /* checked against the sender's, 0 for collectives */
    char *buf;
    size_t len;
    size_t off;              /* bytes moved so far (transport's bookkeeping) */
    volatile int done;       /* set to 1 by the transport when complete (or failed) */
    tutti_status_t status;   /* TUTTI_OK, or the error that failed it */
    _Alignas(16) unsigned char priv[96]; /* transport-private (fi_context2 and friends) */
} tutti__req_t;

typedef struct tutti__transport_ops {
    const char *name;
    /* post starts req (send or receive, per req->kind) towards req->peer. Returns an error
     * only when the request could not be queued at all; errors found later go into req. */
    tutti_status_t (*post)(tutti__transport_t *tp, tutti__req_t *req);
    /* progress moves every posted request of tp forward as far as possible without blocking,
     * setting done (and status) on the ones that finish. Returns an error only for a failure
     * of the transport itself (then the text is in tp->err). */
    tutti_status_t (*progress)(tutti__transport_t *tp);
    /* cancel withdraws req. When it returns, the transport never touches req or its buffer
     * again, and req->done is set: req->status is the request's own outcome if it completed
     * first (TUTTI_OK: all its bytes moved), else TUTTI_ERR_ABORTED (withdrawn). Returns
     * TUTTI_OK when the (peer, channel) stream is still in step afterwards: a later request
     * there meets the message it would have met had req never been posted (a receive's
     * message, if part of it had arrived, is dropped whole). Returns an error, with the text in
     * tp->err, when withdrawing req broke that stream (a message left half sent, or one the
     * transport cannot take back): later posts there fail with that text; the transport may
     * also have had to break itself altogether to keep the promise (then every later post and
     * progress fails). Safe from any thread, like post and progress. */
    tutti_status_t (*cancel)(tutti__transport_t *tp, tutti__req_t *req);
    /* cancel_chan cancels every request still posted on channel chan, to or from any peer (a
     * collective slice that failed: everything it posted lives on its stack). Returns TUTTI_OK,
     * or an error with the text in tp->err if a stream broke (as cancel). */
    tutti_status_t (*cancel_chan)(tutti__transport_t *tp, int chan);
    /* destroy frees tp; requests still posted are abandoned (their buffers are not touched
     * after destroy returns). */
    void (*destroy)(tutti__transport_t *tp);
} tutti__transport_ops_t;

struct tutti__transport {
    const tutti__transport_ops_t *ops;
    /* The last error's text. Every worker thread shares the transport and any of them may fail
     * a request while another reads the text of its own failure: write it with tutti__tp_errf
     * and read it with tutti__tp_err, never directly. */
    char err[TUTTI__ERRLEN];
    int errlock;
    /* How many requests of the point-to-point channel have finished (completed, failed or
     * withdrawn) so far: raised after their done is set (release; read it with acquire). The
     * point-to-point engine, with thousands open, looks at them again only when it changed.
     * Not the collectives' (an atomic add on their every request, for nothing), and on a line
     * of its own, away from the transport's fields that every progress reads: padded, not
     * aligned (the transports are calloc'd, which promises 16 bytes). */
    char nfinished_before[64];
    uint64_t nfinished;
    char nfinished_after[56];
};

/* tutti__tp_finished counts a request of tp on channel chan as finished, after its done is set
 * (chan read before: the owner may reuse the request as soon as it sees done). */
static inline void tutti__tp_finished(tutti__transport_t *tp, int chan)
{
    if (chan == TUTTI__CHAN_P2P)
        __atomic_add_fetch(&tp->nfinished, 1, __ATOMIC_RELEASE);
}

/* tutti__tp_errf formats the transport's error text (replacing the last one) and returns st. */
__attribute__((format(printf, 3, 4))) tutti_status_t
tutti__tp_errf(tutti__transport_t *tp, tutti_status_t st, const char *fmt, ...);
/* tutti__tp_err copies the transport's error text into buf (TUTTI__ERRLEN bytes), returns buf. */
const char *tutti__tp_err(tutti__transport_t *tp, char *buf);
/* TUTTI__TP_ERR(tp) is that copy in a buffer that lives to the end of the enclosing block. */
#define TUTTI__TP_ERR(tp) tutti__tp_err((tp), (char[TUTTI__ERRLEN]){0})

/*
 * A shared-memory window (shm only): every rank on the node maps one region per local rank,
 * region_size bytes each, plus one flag per local rank for barriers, indexed by local index
 * (the node's ranks in increasing order; when every rank of the communicator is on this node,
 * local index == rank). There is one window per collective slice (nchan - 1 of them), each
 * with its own regions, flags and epoch, so algorithms of different slices never meet in the
 * memory or in a barrier.
 */
typedef struct tutti__window {
    int nranks;
    size_t region_size;
    char **regions;                /* regions[r]: base of rank r's region, 64-byte aligned */
    volatile uint64_t **flags;     /* flags[r]: rank r's barrier epoch, one cache line each */
    volatile uint32_t **notes;     /* notes[r]: 3 words beside rank r's flag, in a line of
                                      their own, 0 until written,
                                      for algos/colocate.c: [0] the core rank r's thread of this
                                      slice runs on (it writes it, all read), [1] how many threads
                                      sleep waiting for rank r (they add and remove themselves),
                                      [2] the doorbell rank r rings for them (a futex word) */
    volatile uint64_t **calls;     /* calls[r]: 3 words in rank r's flag line (algos/callsig.c):
                                      [0] and [1] the value of its window calls of even and odd
                                      number, [2] its failure word (0 while it has not failed) */
    volatile uint64_t **descs;     /* descs[r]: rank r's last two window calls described, 4 words
                                      each (a second line, read only on slow paths) */
    uint64_t ncalls;               /* window calls this rank has begun (algos/callsig.c) */
    int me;                        /* this rank's local index */
    bool cma;           /* every local rank can read every other's memory with
                           process_vm_readv (probed at creation, the same on every rank) */
    const int32_t *pids; /* [nranks]: each rank's process, for tutti__cma_read */
    const char *cma_off; /* when !cma: why, in words ("TUTTI_CMA=off", or who failed to read
                            whom and why); NULL when cma */
    bool cma_refused;    /* !cma because the system refused the probe, not TUTTI_CMA=off */
    bool cma_thp;        /* this rank backs reused send buffers with huge pages before peers
                            read them (TUTTI_CMA_THP, tutti__cma_offer) */
    size_t small_size;  /* bytes past region_size that only the one-barrier small path uses, in
                           two halves it alternates between (reserved by the process group at creation) */
    uint64_t small_seq; /* small-path operations so far: their parity picks the half */
} tutti__window_t;

/* ---- the shm transport (transport/shm.c) ---- */

/*
 * tutti__shm_create builds the node's shared segment for the local ranks (local_ranks[0..n-1],
 * global ranks in increasing order; this rank is local_ranks[my_local]). The lowest local rank
 * creates it as a sealed memfd, which has no name (nothing can stay in /dev/shm, however a rank
 * dies), and hands it over a unix socket to the local ranks that show the token it published
 * through the bootstrap and run as the same user (shm_pass.c). The segment holds nchan channels per ordered pair of local ranks (every
 * local rank must pass the same nchan). On success *out is the transport and, if wins != NULL,
 * wins[s] is slice s's window for s in [0, nchan - 1): TUTTI_SHM_WINDOW bytes per rank when
 * there is one slice, else TUTTI_SHM_WINDOW / nslices rounded down to 4 KiB, at least 64 KiB.
 * Pass wins (or NULL) alike on every local rank. The windows belong to the transport: its
 * destroy frees them.
 */
tutti_status_t tutti__shm_create(int nchan, tutti__bootstrap_t *bs, const int *local_ranks,
                                 int nlocal, int my_local, tutti__transport_t **out,
                                 tutti__window_t **wins);

/*
 * Sleeping until a local peer moves one of this rank's rings (shm only): tutti__shm_nap_begin
 * counts the calling thread among the rank's sleepers and returns its doorbell's count; the
 * caller then looks once more at what it waits for (progress), and calls tutti__shm_nap_end,
 * which sleeps up to timeout_s (0: not at all) unless the doorbell rang since, uncounts the
 * thread, and tells whether the doorbell rang. Any thread's progress that publishes or
 * consumes a chunk of a ring rings the peer's doorbell when someone sleeps on it.
 */
uint32_t tutti__shm_nap_begin(tutti__transport_t *shm);
/* tutti__shm_ring_self rings this rank's own doorbell (when someone sleeps on it): for a thread
 * that completed what another thread of the rank naps waiting for. */
void tutti__shm_ring_self(tutti__transport_t *shm);
bool tutti__shm_nap_end(tutti__transport_t *shm, uint32_t bell, double timeout_s);

/* ---- single copy between local processes (transport/cma.c) ---- */

/*
 * tutti__cma_read copies len bytes at address remote of rank r's process (a window's rank)
 * into dst with process_vm_readv (cross-memory attach: one copy, made by the kernel), going on
 * after partial reads. w->cma must be set. An address the peer cannot back, or a permission
 * the system withdrew since the probe, is TUTTI_ERR_SYSTEM with the text in err (TUTTI__ERRLEN
 * bytes); nothing outside dst[0, len) is written.
 */
tutti_status_t tutti__cma_read(const tutti__window_t *w, int r, uint64_t remote, void *dst,
                               size_t len, char *err);

/* tutti__cma_offer is called by a rank on the buffer its local peers are about to read from it
 * with tutti__cma_read, before it publishes the address: where w->cma_thp is set and the same
 * buffer was offered before, it backs the huge pages at least half inside the buffer with
 * transparent huge pages (transport/cma_source.c), which the kernel pins for the readers at a
 * fraction of the cost of 4 KiB pages. No byte changes, inside the buffer or beside it; best
 * effort, it cannot fail. tutti__cma_collapses counts the process's collapses that worked. */
void tutti__cma_offer(const tutti__window_t *w, const void *buf, size_t len);
uint64_t tutti__cma_collapses(void);

/* tutti__cma_probe tells whether this process can read process pid's memory: it reads the
 * 8-byte value at address addr there and compares it with want; 0 if that worked, else the
 * errno (EBADMSG: read, but another value). The shm transport has every pair of local ranks
 * try once at creation. tutti__cma_explain writes what such an errno means here and how to
 * lift it. */
int tutti__cma_probe(int32_t pid, uint64_t addr, uint64_t want);
void tutti__cma_explain(int err, char *buf, size_t cap);

/* ---- the ofi transport (transport/ofi.c) ---- */

/*
 * tutti__ofi_create opens a libfabric RDM endpoint with tagged messages (provider chosen by
 * libfabric or FI_PROVIDER; on a single-node job the loopback interface is preferred, across
 * nodes the interface whose IPv4 address is ifaddr when the provider lists one: NULL for no
 * preference), exchanges endpoint names through the bootstrap and inserts peers[0..npeers-1]
 * (global ranks) into its address vector. Every one of the size ranks calls it collectively
 * when any rank needs ofi, with the same nchan. At most 65536 ranks (the tag's rank field).
 */
tutti_status_t tutti__ofi_create(int rank, int size, int nchan, tutti__bootstrap_t *bs,
                                 const int *peers, int npeers, bool single_node,
                                 const char *ifaddr, tutti__transport_t **out);

/* ---- one transport per peer (transport/transport.c) ---- */

/* The transports of one rank and which of them serves each peer. */
typedef struct tutti__links {
    tutti__transport_t *shm;      /* NULL when unused */
    tutti__transport_t *ofi;      /* NULL when unused */
    tutti__transport_t **peer_tp; /* [size]: the transport that reaches each rank; NULL for self */
    tutti__window_t **node_wins;  /* [nchan - 1]: shm windows over this node's ranks, one per
                                     slice; NULL when shm does not serve this node (one rank
                                     here, or mode "ofi"). They belong to shm */
    tutti__window_t **wins;       /* node_wins when every rank of the job is on this node, so
                                     a window serves the whole group; else NULL */
} tutti__links_t;

/*
 * tutti__links_open connects this rank (of size, over nodes, through bs) to every other: shm
 * to the ranks of its node and ofi to the rest, or ofi to every peer for mode "ofi"; mode
 * "shm" refuses a job that spans nodes (TUTTI_ERR_INVALID_ARG). Wherever shm serves a node
 * it brings the node's windows. ifaddr (NULL: no preference) is the IPv4 address of the
 * interface ofi should use across nodes. Each choice depends only on allgathered facts, so
 * every rank makes the same collective calls. Collective over the size ranks; on failure l
 * holds what was made, for tutti__links_close.
 */
tutti_status_t tutti__links_open(tutti__links_t *l, int rank, int size, int nchan,
                                 const char *mode, const tutti__nodes_t *nodes,
                                 const char *ifaddr, tutti__bootstrap_t *bs);

/* tutti__links_close destroys the transports (and so the windows) and frees l's arrays. */
void tutti__links_close(tutti__links_t *l);

#endif /* TUTTI_TRANSPORT_H */
