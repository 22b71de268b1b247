/* ofi.c: the libfabric transport: one RDM endpoint per communicator, carrying every message as
 * tagged sends and receives whose tags make each message of a pair of ranks unique. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

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
 */
#define CHAN_BITS 5
#define RANK_BITS 16
#define UTAG_BITS 10
#define HI_BITS (CHAN_BITS + RANK_BITS + UTAG_BITS) /* above the counter */
#define UTAG_MASK ((1u << UTAG_BITS) - 1u)
#define MIN_CTR_BITS 16

/* Largest piece one tagged message carries. Providers advertise max_msg_size, but some that
 * claim 2^64 mishandle lengths past 2^31; 1 GiB pieces already amortize per-message costs.
 * Tests define TUTTI__OFI_MAX_CHUNK small to exercise the splitting. */
#ifndef TUTTI__OFI_MAX_CHUNK
#define TUTTI__OFI_MAX_CHUNK ((size_t)1 << 30)
#endif

#define WINDOW 8     /* pieces of one split message in flight at once */
#define CQ_BATCH 16  /* completions read per fi_cq_read */
#define EAGAIN_TRIES 4 /* progress-and-retry rounds in post() before leaving a request pending */
#define SLAB_OPS 64
#define REC_SIZE 512 /* bytes per rank in the endpoint-name exchange */
#define REC_MAGIC 0x6f666931u /* "ofi1" */

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

/* A request's state, kept in its priv bytes. */
struct reqst {
    uint32_t base;     /* counter of the first piece */
    uint32_t nchunks;  /* pieces in all (1 unless the message is split) */
    uint32_t posted;   /* pieces handed to libfabric */
    uint32_t ndone;    /* pieces completed */
    uint32_t inflight; /* posted - completed */
    uint32_t pending;  /* on the pending list (pieces left to post) */
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
    unsigned cbits;    /* counter bits in the tag */
    uint32_t cmask;
    size_t chunk;      /* largest piece, the same on every rank */
    size_t cap[2];     /* ops in flight allowed per kind (tx_attr/rx_attr size); 0: no limit */
    size_t busy[2];    /* ops in flight per kind */
    struct op *inflight, *freeops;
    struct slab *slabs;
    tutti__req_t *pend_head, *pend_tail; /* requests with pieces left to post, via req->next */
    char prov[64];
};

static const tutti__transport_ops_t ofi_ops;

static inline struct reqst *st_of(tutti__req_t *req) { return (struct reqst *)(void *)req->priv; }

/* chan_name says which stream a channel is, for messages ("send/recv", "collective slice 2"). */
static const char *chan_name(int chan)
{
    static const char *const names[] = {
        "send/recv",           "collective slice 0",  "collective slice 1",
        "collective slice 2",  "collective slice 3",  "collective slice 4",
        "collective slice 5",  "collective slice 6",  "collective slice 7",
        "collective slice 8",  "collective slice 9",  "collective slice 10",
        "collective slice 11", "collective slice 12", "collective slice 13",
        "collective slice 14", "collective slice 15",
    };
    return chan >= 0 && chan < (int)(sizeof names / sizeof names[0]) ? names[chan] : "collective";
}

/* ---- ops: a pool, so that posting a message does not call malloc ---------------------------- */

static struct op *op_get(struct ofi *t)
{
    if (t->freeops == NULL) {
        struct slab *s = calloc(1, sizeof *s);
        if (s == NULL)
            return NULL;
        s->next = t->slabs;
        t->slabs = s;
        for (int i = 0; i < SLAB_OPS; i++) {
            s->ops[i].next = t->freeops;
            t->freeops = &s->ops[i];
        }
    }
    struct op *op = t->freeops;
    t->freeops = op->next;
    return op;
}

static void op_put(struct ofi *t, struct op *op)
{
    op->req = NULL;
    op->next = t->freeops;
    t->freeops = op;
}

static void inflight_add(struct ofi *t, struct op *op)
{
    op->prev = NULL;
    op->next = t->inflight;
    if (t->inflight)
        t->inflight->prev = op;
    t->inflight = op;
}

static void inflight_del(struct ofi *t, struct op *op)
{
    if (op->prev)
        op->prev->next = op->next;
    else
        t->inflight = op->next;
    if (op->next)
        op->next->prev = op->prev;
}

/* ---- the pending list: requests with pieces not yet handed to libfabric -------------------- */

static void pend_add(struct ofi *t, tutti__req_t *req)
{
    if (st_of(req)->pending)
        return;
    st_of(req)->pending = 1;
    req->next = NULL;
    if (t->pend_tail)
        t->pend_tail->next = req;
    else
        t->pend_head = req;
    t->pend_tail = req;
}

static void pend_del(struct ofi *t, tutti__req_t *req)
{
    if (!st_of(req)->pending)
        return;
    st_of(req)->pending = 0;
    tutti__req_t *prev = NULL;
    for (tutti__req_t *r = t->pend_head; r; prev = r, r = r->next) {
        if (r != req)
            continue;
        if (prev)
            prev->next = r->next;
        else
            t->pend_head = r->next;
        if (t->pend_tail == r)
            t->pend_tail = prev;
        break;
    }
    req->next = NULL;
}

/* ---- requests ----------------------------------------------------------------------------- */

static uint64_t make_tag(const struct ofi *t, int chan, int src, uint32_t utag, uint32_t ctr)
{
    unsigned c = t->cbits;
    return ((uint64_t)chan << (c + UTAG_BITS + RANK_BITS)) |
           ((uint64_t)src << (c + UTAG_BITS)) | ((uint64_t)(utag & UTAG_MASK) << c) |
           (uint64_t)(ctr & t->cmask);
}

/* finish sets the request's final status and hands it back to its owner; the request must not
 * be touched after this. */
static void finish(struct ofi *t, tutti__req_t *req, tutti_status_t status)
{
    pend_del(t, req);
    req->status = status;
    __atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
}

/* fail ends req with status: pieces still in flight are orphaned (their completions are
 * dropped) and cancelled, pieces not yet posted are never posted. */
static void fail(struct ofi *t, tutti__req_t *req, tutti_status_t status)
{
    if (st_of(req)->inflight > 0) {
        for (struct op *op = t->inflight; op; op = op->next) {
            if (op->req != req)
                continue;
            op->req = NULL;
            fi_cancel(&t->ep->fid, &op->ctx);
        }
    }
    finish(t, req, status);
}

static bool full(const struct ofi *t, int kind)
{
    return t->cap[kind] != 0 && t->busy[kind] >= t->cap[kind];
}

/* post_pieces hands req's next pieces to libfabric, at most WINDOW of them in flight, and no
 * more operations of one kind than the provider's queue holds (some providers, shm among them,
 * fail rather than say -FI_EAGAIN past that). Returns 0 (pieces left over wait on the pending
 * list), -FI_EAGAIN when the provider's queue is full, or another negative libfabric error.
 * Never reads the completion queue, so req cannot finish under it. */
static int post_pieces(struct ofi *t, tutti__req_t *req)
{
    struct reqst *st = st_of(req);
    while (st->posted < st->nchunks && st->inflight < WINDOW && !full(t, req->kind)) {
        size_t off = (size_t)st->posted * t->chunk;
        size_t n = req->len - off < t->chunk ? req->len - off : t->chunk;
        char *buf = off ? req->buf + off : req->buf; /* buf may be NULL when len is 0 */
        struct op *op = op_get(t);
        if (op == NULL)
            return -FI_ENOMEM;
        op->req = req;
        op->len = n;
        op->kind = req->kind;
        ssize_t ret;
        if (req->kind == TUTTI__REQ_SEND) {
            uint64_t tag = make_tag(t, req->chan, t->rank, req->tag, st->base + st->posted);
            ret = fi_tsend(t->ep, buf, n, NULL, t->addrs[req->peer], tag, &op->ctx);
        } else {
            uint64_t tag = make_tag(t, req->chan, req->peer, req->tag, st->base + st->posted);
            uint64_t ignore = (uint64_t)UTAG_MASK << t->cbits;
            ret = fi_trecv(t->ep, buf, n, NULL, FI_ADDR_UNSPEC, tag, ignore, &op->ctx);
        }
        if (ret != 0) {
            op_put(t, op);
            /* shm says -FI_ENOMEM when its pool of receive entries, which unexpected messages
             * share, runs dry: like -FI_EAGAIN, it clears as completions are read. */
            return ret == -FI_ENOMEM ? -FI_EAGAIN : (int)ret;
        }
        inflight_add(t, op);
        t->busy[req->kind]++;
        st->posted++;
        st->inflight++;
    }
    return 0;
}

static void post_failed(struct ofi *t, tutti__req_t *req, int ret)
{
    tutti__fmt_error(t->base.err, TUTTI_ERR_TRANSPORT,
                     "ofi (%s): posting a %zu-byte %s %s rank %d failed: %s; the provider may be "
                     "out of resources or the endpoint broken",
                     t->prov, req->len, req->kind == TUTTI__REQ_SEND ? "send to" : "receive from",
                     chan_name(req->chan), req->peer, fi_strerror(-ret));
}

/* retry_pending posts what it can of every pending request, oldest first. */
static void retry_pending(struct ofi *t)
{
    tutti__req_t *next;
    for (tutti__req_t *req = t->pend_head; req; req = next) {
        next = req->next;
        if (full(t, req->kind)) {
            if (full(t, TUTTI__REQ_SEND) && full(t, TUTTI__REQ_RECV))
                break;
            continue;
        }
        int ret = post_pieces(t, req);
        if (ret == 0 && st_of(req)->posted == st_of(req)->nchunks) {
            pend_del(t, req);
        } else if (ret != 0 && ret != -FI_EAGAIN) {
            post_failed(t, req, ret);
            fail(t, req, TUTTI_ERR_TRANSPORT);
        }
    }
}

/* ---- completions -------------------------------------------------------------------------- */

static tutti_status_t classify(int err)
{
    switch (err) {
    case FI_ECONNRESET:
    case FI_ECONNREFUSED:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_ETIMEDOUT:
    case EPIPE: /* libfabric has no FI_EPIPE; its codes are errno values */
    case FI_EHOSTDOWN:
    case FI_ESHUTDOWN:
        return TUTTI_ERR_PEER_FAILED;
    default:
        return TUTTI_ERR_TRANSPORT;
    }
}

static void complete_ok(struct ofi *t, struct op *op, const struct fi_cq_tagged_entry *e)
{
    tutti__req_t *req = op->req;
    size_t want = op->len;
    inflight_del(t, op);
    t->busy[op->kind]--;
    op_put(t, op);
    if (req == NULL) /* a piece of a request that failed earlier */
        return;
    struct reqst *st = st_of(req);
    st->inflight--;
    st->ndone++;
    if (req->kind == TUTTI__REQ_RECV) {
        uint32_t got_tag = (uint32_t)(e->tag >> t->cbits) & UTAG_MASK;
        if (e->len != want) {
            tutti__fmt_error(t->base.err, TUTTI_ERR_INTERNAL,
                             "ofi (%s): a receive of %zu bytes from rank %d (%s channel) got a "
                             "message of %zu bytes: the sizes differ, sender and receiver must "
                             "post the same length (a bug in the caller)",
                             t->prov, want, req->peer, chan_name(req->chan), e->len);
            fail(t, req, TUTTI_ERR_INTERNAL);
            return;
        }
        if (got_tag != (req->tag & UTAG_MASK)) {
            tutti__fmt_error(t->base.err, TUTTI_ERR_INTERNAL,
                             "ofi (%s): a receive from rank %d (%s channel) expected tag %u but "
                             "the matching message has tag %u (low %d bits compared): sender "
                             "and receiver disagree on the order or tags of their messages",
                             t->prov, req->peer, chan_name(req->chan), req->tag & UTAG_MASK,
                             got_tag, UTAG_BITS);
            fail(t, req, TUTTI_ERR_INTERNAL);
            return;
        }
    }
    req->off += want;
    if (st->ndone == st->nchunks)
        finish(t, req, TUTTI_OK);
}

static void complete_err(struct ofi *t, const struct fi_cq_err_entry *e)
{
    struct op *op = e->op_context;
    char pbuf[256] = "";
    const char *ptxt = fi_cq_strerror(t->cq, e->prov_errno, e->err_data, pbuf, sizeof pbuf);
    if (ptxt == NULL || *ptxt == '\0')
        ptxt = "no details";
    if (op == NULL) { /* not tied to an operation (some providers report connection errors so) */
        tutti__fmt_error(t->base.err, TUTTI_ERR_TRANSPORT,
                         "ofi (%s): completion queue error without an operation: %s (%s)",
                         t->prov, fi_strerror(e->err), ptxt);
        TUTTI__LOG(TUTTI__LOG_WARN, "%s", t->base.err);
        return;
    }
    tutti__req_t *req = op->req;
    size_t want = op->len;
    inflight_del(t, op);
    t->busy[op->kind]--;
    op_put(t, op);
    if (req == NULL) /* orphaned or cancelled piece of a request that already failed */
        return;
    st_of(req)->inflight--;
    tutti_status_t status;
    const char *dir = req->kind == TUTTI__REQ_SEND ? "send to" : "receive from";
    int err = e->err < 0 ? -e->err : e->err; /* shm reports some errors negated */
    if (err == FI_ETRUNC) {
        /* olen is the excess, where the provider reports it (rxm does not). */
        char sent[64] = "more";
        if (e->olen > 0)
            snprintf(sent, sizeof sent, "%zu bytes", want + e->olen);
        status = tutti__fmt_error(t->base.err, TUTTI_ERR_INTERNAL,
                                  "ofi (%s): a receive of %zu bytes from rank %d (%s channel) was "
                                  "truncated: the sender sent %s; the sizes differ, sender and "
                                  "receiver must post the same length (a bug in the caller)",
                                  t->prov, want, req->peer, chan_name(req->chan), sent);
    } else if (err == FI_ECANCELED) {
        /* Only orphans are cancelled by us, and their completions never get here; rxm cancels
         * receives itself when the connection to their peer breaks, i.e. the peer died. */
        status = tutti__fmt_error(t->base.err, TUTTI_ERR_PEER_FAILED,
                                  "ofi (%s): a %zu-byte %s rank %d (%s channel) was cancelled by "
                                  "the provider; the connection to that rank probably broke",
                                  t->prov, req->len, dir, req->peer, chan_name(req->chan));
    } else {
        status = classify(err);
        tutti__fmt_error(t->base.err, status,
                         "ofi (%s): a %zu-byte %s rank %d (%s channel) failed: %s (provider: %s)%s",
                         t->prov, req->len, dir, req->peer, chan_name(req->chan),
                         fi_strerror(err), ptxt,
                         status == TUTTI_ERR_PEER_FAILED
                             ? "; the peer probably died or its host is unreachable"
                             : "");
    }
    fail(t, req, status);
}

/* drain reads the completion queue until it is empty. */
static tutti_status_t drain(struct ofi *t)
{
    struct fi_cq_tagged_entry ent[CQ_BATCH];
    for (;;) {
        ssize_t n = fi_cq_read(t->cq, ent, CQ_BATCH);
        if (n > 0) {
            for (ssize_t i = 0; i < n; i++)
                complete_ok(t, ent[i].op_context, &ent[i]);
            if (n < CQ_BATCH)
                return TUTTI_OK;
        } else if (n == -FI_EAGAIN) {
            return TUTTI_OK;
        } else if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry e;
            memset(&e, 0, sizeof e);
            ssize_t r = fi_cq_readerr(t->cq, &e, 0);
            if (r == 1)
                complete_err(t, &e);
            else if (r != -FI_EAGAIN)
                return tutti__fmt_error(t->base.err, TUTTI_ERR_TRANSPORT,
                                        "ofi (%s): fi_cq_readerr failed: %s", t->prov,
                                        fi_strerror((int)-r));
        } else {
            return tutti__fmt_error(t->base.err, TUTTI_ERR_TRANSPORT,
                                    "ofi (%s): fi_cq_read failed: %s; the endpoint is broken, "
                                    "destroy the communicator",
                                    t->prov, fi_strerror((int)-n));
        }
    }
}

static tutti_status_t progress_locked(struct ofi *t)
{
    tutti_status_t st = drain(t);
    if (t->pend_head)
        retry_pending(t);
    return st;
}

/* ---- the transport ops -------------------------------------------------------------------- */

static tutti_status_t ofi_post(tutti__transport_t *tp, tutti__req_t *req)
{
    struct ofi *t = (struct ofi *)tp;
    if (req->peer < 0 || req->peer >= t->size || req->chan < 0 ||
        req->chan >= t->nchan ||
        (req->kind != TUTTI__REQ_SEND && req->kind != TUTTI__REQ_RECV) ||
        (req->len > 0 && req->buf == NULL))
        return tutti__fmt_error(tp->err, TUTTI_ERR_INTERNAL,
                                "ofi: bad request (peer %d of %d, channel %d, kind %d, %zu bytes "
                                "at %p)",
                                req->peer, t->size, req->chan, req->kind, req->len,
                                (void *)req->buf);
    if (t->addrs[req->peer] == FI_ADDR_NOTAVAIL)
        return tutti__fmt_error(tp->err, TUTTI_ERR_INTERNAL,
                                "ofi: rank %d is not among the peers this ofi transport was "
                                "created for",
                                req->peer);
    size_t nchunks = req->len == 0 ? 1 : (req->len - 1) / t->chunk + 1;
    if (nchunks > ((size_t)1 << (t->cbits - 1)))
        return tutti__fmt_error(tp->err, TUTTI_ERR_NOT_SUPPORTED,
                                "ofi (%s): a %zu-byte message needs %zu pieces of at most %zu "
                                "bytes, more than the tag counter can tell apart",
                                t->prov, req->len, nchunks, t->chunk);

    pthread_mutex_lock(&t->lock);
    uint32_t *ctr = &t->ctr[((size_t)req->peer * (size_t)t->nchan + (size_t)req->chan) * 2 +
                            (size_t)req->kind];
    struct reqst *st = st_of(req);
    memset(st, 0, sizeof *st);
    st->base = *ctr;
    st->nchunks = (uint32_t)nchunks;
    *ctr += (uint32_t)nchunks;
    req->next = NULL;
    req->off = 0;
    req->status = TUTTI_OK;
    req->done = 0;

    tutti_status_t rc = TUTTI_OK;
    int ret = post_pieces(t, req);
    if (ret != 0 && ret != -FI_EAGAIN) {
        post_failed(t, req, ret);
        if (st->posted == 0) { /* nothing went out: undo, the caller sees the error now */
            *ctr -= (uint32_t)nchunks;
            req->status = TUTTI_ERR_TRANSPORT;
            req->done = 1;
            rc = ret == -FI_ENOMEM ? TUTTI_ERR_NO_MEMORY : TUTTI_ERR_TRANSPORT;
        } else {
            fail(t, req, TUTTI_ERR_TRANSPORT);
        }
    } else if (st->posted < st->nchunks) {
        pend_add(t, req);
        /* A full queue usually drains as soon as completions are read; req may finish in here,
         * so it is not looked at again. */
        for (int i = 0; ret == -FI_EAGAIN && i < EAGAIN_TRIES && t->pend_head; i++)
            progress_locked(t);
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}

/* ofi_progress only tries the lock: a thread that holds it is posting or reading completions,
 * and reading completions finishes every request whose completion arrived, whoever posted it
 * (one completion queue serves every channel). A waiter that finds the lock taken returns and
 * calls again; the completion it waits for is either consumed by the holder (done is set) or
 * still queued for its next call, so none is lost. With one thread per slice on few cores this
 * avoids sleeping on the mutex behind a thread that is doing our work anyway. */
static tutti_status_t ofi_progress(tutti__transport_t *tp)
{
    struct ofi *t = (struct ofi *)tp;
    if (pthread_mutex_trylock(&t->lock) != 0)
        return TUTTI_OK;
    tutti_status_t st = progress_locked(t);
    pthread_mutex_unlock(&t->lock);
    return st;
}

/* close_all closes whatever is open, endpoint first, and frees t. Closing the endpoint discards
 * its outstanding operations, so nothing waits for peers (dead or alive). */
static void close_all(struct ofi *t)
{
    if (t->ep)
        fi_close(&t->ep->fid);
    if (t->av)
        fi_close(&t->av->fid);
    if (t->cq)
        fi_close(&t->cq->fid);
    if (t->domain)
        fi_close(&t->domain->fid);
    if (t->fabric)
        fi_close(&t->fabric->fid);
    if (t->info)
        fi_freeinfo(t->info);
    while (t->slabs) {
        struct slab *s = t->slabs;
        t->slabs = s->next;
        free(s);
    }
    free(t->addrs);
    free(t->ctr);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static void ofi_destroy(tutti__transport_t *tp)
{
    struct ofi *t = (struct ofi *)tp;
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->lock);
    for (struct op *op = t->inflight; op; op = op->next)
        fi_cancel(&t->ep->fid, &op->ctx);
    pthread_mutex_unlock(&t->lock);
    close_all(t);
}

static const tutti__transport_ops_t ofi_ops = {
    .name = "ofi",
    .post = ofi_post,
    .progress = ofi_progress,
    .destroy = ofi_destroy,
};

/* ---- creation ----------------------------------------------------------------------------- */

enum { ADDR_OTHER, ADDR_V4_LOOPBACK, ADDR_V4_LINKLOCAL, ADDR_V4, ADDR_V6_LOCAL, ADDR_V6 };

/* addr_class sorts an info's source address: loopback and link-local addresses only reach
 * this host or this link. ADDR_OTHER: not an IP socket address (efa, psm, shm, ...). */
static int addr_class(const struct fi_info *fi)
{
    if (fi->src_addr == NULL || fi->src_addrlen < sizeof(sa_family_t))
        return ADDR_OTHER;
    if (fi->addr_format != FI_SOCKADDR && fi->addr_format != FI_SOCKADDR_IN &&
        fi->addr_format != FI_SOCKADDR_IN6)
        return ADDR_OTHER;
    sa_family_t fam;
    memcpy(&fam, (const char *)fi->src_addr + offsetof(struct sockaddr, sa_family), sizeof fam);
    if (fam == AF_INET && fi->src_addrlen >= sizeof(struct sockaddr_in)) {
        struct sockaddr_in in;
        memcpy(&in, fi->src_addr, sizeof in);
        uint32_t a = ntohl(in.sin_addr.s_addr);
        if ((a >> 24) == 127)
            return ADDR_V4_LOOPBACK;
        if ((a >> 16) == 0xa9fe) /* 169.254/16 */
            return ADDR_V4_LINKLOCAL;
        return ADDR_V4;
    }
    if (fam == AF_INET6 && fi->src_addrlen >= sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        memcpy(&in6, fi->src_addr, sizeof in6);
        if (IN6_IS_ADDR_LOOPBACK(&in6.sin6_addr) || IN6_IS_ADDR_LINKLOCAL(&in6.sin6_addr))
            return ADDR_V6_LOCAL;
        return ADDR_V6;
    }
    return ADDR_OTHER;
}

/* core_is tells whether the provider's core (the part before any ';') is name. */
static bool core_is(const struct fi_info *fi, const char *name)
{
    const char *p = fi->fabric_attr && fi->fabric_attr->prov_name ? fi->fabric_attr->prov_name : "";
    size_t n = strlen(name);
    return strncmp(p, name, n) == 0 && (p[n] == '\0' || p[n] == ';');
}

static const char *prov_of(const struct fi_info *fi)
{
    return fi->fabric_attr && fi->fabric_attr->prov_name ? fi->fabric_attr->prov_name : "?";
}

/*
 * choose picks one of libfabric's infos. One node: the IPv4 loopback interface (the tcp provider
 * lists one info per interface, and only loopback is sure to work inside one host). Several
 * nodes: libfabric lists the best provider first; within that provider, an IPv4 interface that
 * leaves the host, then any address that does (IPv6, or a non-IP fabric such as efa). The
 * shared-memory providers cannot span nodes, so they are skipped unless FI_PROVIDER asked.
 */
static struct fi_info *choose(struct fi_info *list, bool single_node, bool prov_forced)
{
    struct fi_info *first = NULL;
    for (struct fi_info *fi = list; fi; fi = fi->next) {
        if (!single_node && !prov_forced && (core_is(fi, "shm") || core_is(fi, "sm2")))
            continue;
        if (first == NULL)
            first = fi;
        if (single_node && addr_class(fi) == ADDR_V4_LOOPBACK)
            return fi;
    }
    if (single_node || first == NULL)
        return first;
    const char *prov = prov_of(first);
    struct fi_info *fallback = NULL;
    for (struct fi_info *fi = first; fi; fi = fi->next) {
        if (strcmp(prov_of(fi), prov) != 0)
            continue;
        int c = addr_class(fi);
        if (c == ADDR_V4)
            return fi;
        if (fallback == NULL && (c == ADDR_OTHER || c == ADDR_V6))
            fallback = fi;
    }
    return fallback ? fallback : first;
}

/* The record each rank publishes: its endpoint name and what the others must agree on. */
struct rec {
    uint32_t magic;
    uint32_t namelen;
    uint64_t chunk;
    uint32_t tagbits;
    uint32_t pad;
    char prov[64];
    unsigned char name[REC_SIZE - 88];
};
_Static_assert(sizeof(struct rec) == REC_SIZE, "record size");

#define FI_CHECK(call, what)                                                                   \
    do {                                                                                       \
        int r_ = (int)(call);                                                                  \
        if (r_ != 0) {                                                                         \
            st = tutti__set_error(TUTTI_ERR_TRANSPORT,                                         \
                                  "ofi: %s failed with provider %s (fabric %s): %s; check "    \
                                  "`fi_info -l`, or choose another provider with "             \
                                  "FI_PROVIDER=tcp",                                           \
                                  what, t->prov, t->info->fabric_attr->name, fi_strerror(-r_)); \
            goto fail;                                                                         \
        }                                                                                      \
    } while (0)

tutti_status_t tutti__ofi_create(int rank, int size, int nchan, tutti__bootstrap_t *bs,
                                 const int *peers, int npeers, bool single_node,
                                 tutti__transport_t **out)
{
    tutti_status_t st = TUTTI_OK;
    struct fi_info *hints = NULL, *list = NULL;
    struct rec *all = NULL;
    *out = NULL;

    if (size > (1 << RANK_BITS))
        return tutti__set_error(TUTTI_ERR_NOT_SUPPORTED,
                                "ofi: %d ranks, but the libfabric transport tells at most %d ranks "
                                "apart (%d bits of the message tag); split the job into "
                                "communicators of at most %d ranks",
                                size, 1 << RANK_BITS, RANK_BITS, 1 << RANK_BITS);
    if (nchan < 2 || nchan > (1 << CHAN_BITS) || nchan > TUTTI__CHAN_MAX)
        return tutti__set_error(TUTTI_ERR_INTERNAL,
                                "ofi: %d channels asked for; the transport takes 2 to %d",
                                nchan, TUTTI__CHAN_MAX < (1 << CHAN_BITS)
                                                 ? TUTTI__CHAN_MAX : 1 << CHAN_BITS);
    struct ofi *t = calloc(1, sizeof *t);
    if (t == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "ofi: out of memory creating the transport");
    pthread_mutex_init(&t->lock, NULL);
    t->base.ops = &ofi_ops;
    t->rank = rank;
    t->size = size;
    t->nchan = nchan;
    t->addrs = malloc((size_t)t->size * sizeof *t->addrs);
    t->ctr = calloc((size_t)t->size * (size_t)t->nchan * 2, sizeof *t->ctr);
    all = calloc((size_t)t->size, sizeof *all);
    if (t->addrs == NULL || t->ctr == NULL || all == NULL) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "ofi: out of memory for %d ranks", t->size);
        goto fail;
    }
    for (int r = 0; r < t->size; r++)
        t->addrs[r] = FI_ADDR_NOTAVAIL;

    /* What we ask of a provider: reliable datagrams with tagged messages; contexts that live in
     * our requests; no local memory registration (we pass no descriptors); we serialize calls. */
    hints = fi_allocinfo();
    if (hints == NULL) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "ofi: fi_allocinfo failed");
        goto fail;
    }
    hints->caps = FI_TAGGED;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    const char *forced = tutti__env_get("FI_PROVIDER");
    int ret = fi_getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list);
    if (ret != 0 || list == NULL) {
        st = tutti__set_error(TUTTI_ERR_TRANSPORT,
                              "ofi: fi_getinfo found no provider with tagged reliable-datagram "
                              "endpoints (FI_PROVIDER=%s): %s; check `fi_info -l` and `fi_info -c "
                              "FI_TAGGED -t FI_EP_RDM`, or set FI_PROVIDER=tcp",
                              forced ? forced : "unset", fi_strerror(-ret));
        goto fail;
    }
    struct fi_info *fi = choose(list, single_node, forced != NULL);
    if (fi == NULL) {
        st = tutti__set_error(TUTTI_ERR_TRANSPORT,
                              "ofi: libfabric offers only shared-memory providers, which cannot "
                              "reach other nodes; set FI_PROVIDER (e.g. tcp, verbs, efa) to a "
                              "network provider, see `fi_info -l`");
        goto fail;
    }
    t->info = fi_dupinfo(fi);
    if (t->info == NULL) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "ofi: fi_dupinfo failed");
        goto fail;
    }
    snprintf(t->prov, sizeof t->prov, "%s", prov_of(t->info));

    uint64_t fmt = t->info->ep_attr->mem_tag_format;
    unsigned tagbits = fmt ? 64u - (unsigned)__builtin_clzll(fmt) : 64u;
    size_t chunk = TUTTI__OFI_MAX_CHUNK;
    if (t->info->ep_attr->max_msg_size > 0 && t->info->ep_attr->max_msg_size < chunk)
        chunk = t->info->ep_attr->max_msg_size;
    /* Receives get half the receive queue: providers such as shm hold unexpected messages in
     * the same pool, and a pool full of posted receives stalls the message that would match
     * one of them behind an unexpected one. */
    t->cap[TUTTI__REQ_SEND] = t->info->tx_attr ? t->info->tx_attr->size : 0;
    t->cap[TUTTI__REQ_RECV] = t->info->rx_attr ? (t->info->rx_attr->size + 1) / 2 : 0;
    TUTTI__LOG(TUTTI__LOG_INFO,
               "ofi: provider %s, fabric %s, domain %s, %u tag bits, pieces of at most %zu bytes",
               t->prov, t->info->fabric_attr->name ? t->info->fabric_attr->name : "?",
               t->info->domain_attr->name ? t->info->domain_attr->name : "?", tagbits, chunk);

    FI_CHECK(fi_fabric(t->info->fabric_attr, &t->fabric, NULL), "fi_fabric");
    FI_CHECK(fi_domain(t->fabric, t->info, &t->domain, NULL), "fi_domain");
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE};
    FI_CHECK(fi_cq_open(t->domain, &cq_attr, &t->cq, NULL), "fi_cq_open");
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = (size_t)t->size};
    FI_CHECK(fi_av_open(t->domain, &av_attr, &t->av, NULL), "fi_av_open");
    FI_CHECK(fi_endpoint(t->domain, t->info, &t->ep, NULL), "fi_endpoint");
    FI_CHECK(fi_ep_bind(t->ep, &t->cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind (cq)");
    FI_CHECK(fi_ep_bind(t->ep, &t->av->fid, 0), "fi_ep_bind (av)");
    FI_CHECK(fi_enable(t->ep), "fi_enable");

    struct rec mine;
    memset(&mine, 0, sizeof mine);
    mine.magic = REC_MAGIC;
    mine.chunk = chunk;
    mine.tagbits = tagbits;
    snprintf(mine.prov, sizeof mine.prov, "%s", t->prov);
    size_t namelen = sizeof mine.name;
    FI_CHECK(fi_getname(&t->ep->fid, mine.name, &namelen), "fi_getname");
    mine.namelen = (uint32_t)namelen;
    TUTTI__CHECK_GOTO(tutti__bs_allgather(bs, &mine, sizeof mine, all), st, fail);

    /* Every rank must speak the same provider and split messages alike. */
    for (int r = 0; r < t->size; r++) {
        if (all[r].magic != REC_MAGIC || all[r].namelen > sizeof all[r].name) {
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "ofi: rank %d published a malformed endpoint record; are all "
                                  "ranks running the same tutti?",
                                  r);
            goto fail;
        }
        all[r].prov[sizeof all[r].prov - 1] = '\0';
        if (strcmp(all[r].prov, t->prov) != 0) {
            st = tutti__set_error(TUTTI_ERR_TRANSPORT,
                                  "ofi: rank %d chose provider %s but rank %d chose %s; set "
                                  "FI_PROVIDER to one provider for every rank",
                                  t->rank, t->prov, r, all[r].prov);
            goto fail;
        }
        if (all[r].chunk < chunk)
            chunk = all[r].chunk;
        if (all[r].tagbits < tagbits)
            tagbits = all[r].tagbits;
    }
    if (tagbits < HI_BITS + MIN_CTR_BITS) {
        st = tutti__set_error(TUTTI_ERR_NOT_SUPPORTED,
                              "ofi: provider %s matches only %u tag bits; tutti needs %d; choose "
                              "another provider with FI_PROVIDER",
                              t->prov, tagbits, HI_BITS + MIN_CTR_BITS);
        goto fail;
    }
    t->cbits = tagbits - HI_BITS > 32 ? 32 : tagbits - HI_BITS;
    t->cmask = t->cbits == 32 ? UINT32_MAX : (1u << t->cbits) - 1u;
    t->chunk = chunk ? chunk : 1;

    for (int i = 0; i < npeers; i++) {
        int p = peers[i];
        if (p < 0 || p >= t->size) {
            st = tutti__set_error(TUTTI_ERR_INTERNAL, "ofi: peer %d out of range (%d ranks)", p,
                                  t->size);
            goto fail;
        }
        if (t->addrs[p] != FI_ADDR_NOTAVAIL)
            continue;
        ret = fi_av_insert(t->av, all[p].name, 1, &t->addrs[p], 0, NULL);
        if (ret != 1) {
            st = tutti__set_error(TUTTI_ERR_TRANSPORT,
                                  "ofi: fi_av_insert of rank %d's address failed with provider "
                                  "%s: %s; check that every rank can reach the others on fabric "
                                  "%s, or set FI_PROVIDER",
                                  p, t->prov, ret < 0 ? fi_strerror(-ret) : "not inserted",
                                  t->info->fabric_attr->name);
            t->addrs[p] = FI_ADDR_NOTAVAIL;
            goto fail;
        }
    }

    free(all);
    fi_freeinfo(list);
    fi_freeinfo(hints);
    *out = &t->base;
    return TUTTI_OK;

fail:
    TUTTI__LOG(TUTTI__LOG_DEBUG, "ofi: create failed: %s", tutti__tls_error());
    free(all);
    if (list)
        fi_freeinfo(list);
    if (hints)
        fi_freeinfo(hints);
    close_all(t);
    return st;
}
