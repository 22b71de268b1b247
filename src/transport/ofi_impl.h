/* ofi_impl.h: the libfabric transport's private types and tag layout, shared by its data path
 * (ofi.c), its cancel (ofi_cancel.c) and its creation (ofi_create.c). */
#ifndef TUTTI_TRANSPORT_OFI_IMPL_H
#define TUTTI_TRANSPORT_OFI_IMPL_H

#include <pthread.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "transport.h"

#define OFI_API_VERSION FI_VERSION(1, 9)

/*
 * The 64-bit tag, from the top: channel (5 bits), source rank (16 bits), the low 10 bits of the
 * caller's tag, and a per-(peer, channel, direction) message counter (up to 32 bits; the top bit
 * of the 64 is unused). Both sides post
 * their messages of one stream in the same order, so their counters agree and every message in
 * flight has a tag of its own: matching needs no help from the provider's ordering. A provider
 * with fewer tag bits (mem_tag_format) gets a narrower counter; the counter then wraps sooner,
 * which is harmless as long as fewer than 2^bits messages of one stream are in flight at once.
 * The caller's tag is ignored for matching and checked on arrival instead, so that a tag
 * mismatch fails the receive with a message rather than leaving it unmatched until the timeout.
 * Where the provider offers remote CQ data (tcp, sockets, shm, verbs;ofi_rxm, efa do), each
 * send also carries the caller's whole 32-bit tag (a collective's fingerprint) as CQ data and
 * the receive compares all 32 bits; else only the 10 in the tag.
 */
#define CHAN_BITS 5
#define RANK_BITS 16
#define UTAG_BITS 10
#define HI_BITS (CHAN_BITS + RANK_BITS + UTAG_BITS) /* above the counter */
#define UTAG_MASK ((1u << UTAG_BITS) - 1u)
#define MIN_CTR_BITS 16

/* Largest piece one tagged message carries (TUTTI_OFI_CHUNK may ask for less). Providers
 * advertise max_msg_size, but some that claim 2^64 mishandle lengths past 2^31; 1 GiB pieces
 * already amortize per-message costs. */
#ifndef TUTTI__OFI_MAX_CHUNK
#define TUTTI__OFI_MAX_CHUNK ((size_t)1 << 30)
#endif

#define WINDOW 8     /* pieces of one split message in flight at once */
#define CQ_BATCH 16  /* completions read per fi_cq_read */
#define EAGAIN_TRIES 4 /* progress-and-retry rounds in post() before leaving a request pending */
#define SLAB_OPS 64
#define CANCEL_WAIT_S 1.0 /* how long a cancel waits for libfabric to give its pieces back */
#define REC_SIZE 512 /* bytes per rank in the endpoint-name exchange */
#define REC_MAGIC 0x6f666931u /* "ofi1" */
#define REC_FAILED 0x6f666958u /* "ofiX": this rank could not open its endpoint; name[] says why */

/* One operation posted to libfabric: one tagged message, or one piece of a split one. The
 * fi_context2 comes first, so the op_context libfabric hands back is the op itself. */
struct op {
    struct fi_context2 ctx;
    tutti__req_t *req;   /* NULL once the request failed and this op was orphaned */
    size_t len;          /* bytes this op carries */
    int kind;            /* TUTTI__REQ_SEND or TUTTI__REQ_RECV */
    struct op *prev, *next; /* in-flight list (doubly linked), or free list (next only) */
};

struct slab {
    struct slab *next;
    struct op ops[SLAB_OPS];
};

/* A request's state, kept in its priv bytes. A request that fails, or is being cancelled,
 * stays not done until every piece libfabric holds has come back (completed or cancelled), so
 * that no buffer is written after done is set. */
struct reqst {
    uint32_t base;     /* counter of the first piece */
    uint32_t nchunks;  /* pieces in all (1 unless the message is split) */
    uint32_t posted;   /* pieces handed to libfabric */
    uint32_t ndone;    /* pieces completed with their data */
    uint32_t inflight; /* posted - come back */
    uint32_t pending;  /* on the pending list (pieces left to post) */
    int32_t failed;    /* the status it fails with once its pieces are back; 0: none */
    uint8_t cancelling; /* ofi_cancel waits for its pieces */
    uint8_t bad;       /* a piece came back with an error other than "cancelled" */
};
_Static_assert(sizeof(struct reqst) <= sizeof(((tutti__req_t *)0)->priv), "priv too small");

struct ofi {
    tutti__transport_t base; /* first: the transport API sees only this */
    pthread_mutex_t lock;    /* post, progress and destroy may come from several threads */
    int rank, size;
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
    fi_addr_t *addrs;  /* by global rank; FI_ADDR_NOTAVAIL for ranks not in peers[] */
    int nchan;         /* channels, fixed at creation */
    uint32_t *ctr;     /* [rank][chan][kind]: next counter value of each stream */
    uint8_t *broken_stream; /* [rank][chan][kind]: a cancel left the stream out of step */
    bool broken;       /* the endpoint was given up to keep a cancel's promise: nothing works */
    struct ofi *abandoned_next; /* broken ones, kept until the process exits (ofi.c) */
    unsigned cbits;    /* counter bits in the tag */
    bool cq_data;      /* sends carry the caller's whole 32-bit tag as remote CQ data, so a
                          receive compares all of it, not only the UTAG_BITS in the tag */
    uint32_t cmask;
    size_t chunk;      /* largest piece, the same on every rank */
    size_t cap[2];     /* ops in flight allowed per kind (tx_attr/rx_attr size); 0: no limit */
    size_t busy[2];    /* ops in flight per kind */
    struct op *inflight, *freeops;
    struct slab *slabs;
    tutti__req_t *pend_head, *pend_tail; /* requests with pieces left to post, via req->next */
    char prov[64];
};

static inline struct reqst *st_of(tutti__req_t *req) { return (struct reqst *)(void *)req->priv; }

/* The ofi transport's operations (ofi.c). */
extern const tutti__transport_ops_t tutti__ofi_ops;

/* The data path's pieces that cancel uses (ofi.c), all with t->lock held: tutti__ofi_finish
 * sets req's final status and hands it back (it must not be touched after); tutti__ofi_drain
 * reads the completion queue until it is empty; tutti__ofi_pend_del takes req off the pending
 * list; tutti__ofi_inflight_del and tutti__ofi_op_put take an op off the in-flight list and
 * return it to the pool; tutti__ofi_chan_name names a channel for messages. */
void tutti__ofi_finish(struct ofi *t, tutti__req_t *req, tutti_status_t status);
tutti_status_t tutti__ofi_drain(struct ofi *t);
void tutti__ofi_pend_del(struct ofi *t, tutti__req_t *req);
void tutti__ofi_inflight_del(struct ofi *t, struct op *op);
void tutti__ofi_op_put(struct ofi *t, struct op *op);
const char *tutti__ofi_chan_name(int chan);

/* tutti__ofi_cancel and tutti__ofi_cancel_chan are the vtable's cancel and cancel_chan
 * (ofi_cancel.c; see transport.h). */
tutti_status_t tutti__ofi_cancel(tutti__transport_t *tp, tutti__req_t *req);
tutti_status_t tutti__ofi_cancel_chan(tutti__transport_t *tp, int chan);

/* tutti__ofi_close closes whatever of t is open, endpoint first, and frees t. Closing the
 * endpoint discards its outstanding operations, so nothing waits for peers (dead or alive). */
void tutti__ofi_close(struct ofi *t);

#endif /* TUTTI_TRANSPORT_OFI_IMPL_H */
