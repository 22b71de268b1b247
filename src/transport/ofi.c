/* ofi.c: the libfabric transport's data path: one RDM endpoint per communicator, carrying every
 * message as tagged sends and receives whose tags make each message of a pair of ranks unique;
 * the endpoint is made in ofi_create.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "ofi_impl.h"


/* chan_name says which stream a channel is, for messages ("send/recv", "collective slice 2"). */
const char *tutti__ofi_chan_name(int chan)
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

void tutti__ofi_op_put(struct ofi *t, struct op *op)
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

void tutti__ofi_inflight_del(struct ofi *t, struct op *op)
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

void tutti__ofi_pend_del(struct ofi *t, tutti__req_t *req)
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
void tutti__ofi_finish(struct ofi *t, tutti__req_t *req, tutti_status_t status)
{
    tutti__ofi_pend_del(t, req);
    const int chan = req->chan;
    req->status = status;
    __atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
    tutti__tp_finished(&t->base, chan);
}

/* fail ends req with status. Pieces not yet posted never will be; pieces libfabric holds are
 * cancelled, and req is finished only once all of them have come back (complete_ok and
 * complete_err count them), since until then libfabric may still write its buffer. */
static void fail(struct ofi *t, tutti__req_t *req, tutti_status_t status)
{
    struct reqst *st = st_of(req);
    tutti__ofi_pend_del(t, req);
    if (st->inflight == 0) {
        tutti__ofi_finish(t, req, status);
        return;
    }
    if (st->failed != 0)
        return; /* failing already; its pieces are cancelled */
    st->failed = status;
    for (struct op *op = t->inflight; op; op = op->next)
        if (op->req == req)
            fi_cancel(&t->ep->fid, &op->ctx);
}

/* piece_back counts one of req's pieces come back while req fails or is being cancelled, and
 * finishes a failing request whose last piece this was. True when req was in such a state. */
static bool piece_back(struct ofi *t, tutti__req_t *req, bool moved, bool bad)
{
    struct reqst *st = st_of(req);
    if (!st->cancelling && st->failed == 0)
        return false;
    st->ndone += moved;
    st->bad |= bad;
    if (!st->cancelling && st->inflight == 0)
        tutti__ofi_finish(t, req, st->failed);
    return true;
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
            ret = t->cq_data ? fi_tsenddata(t->ep, buf, n, NULL, req->tag, t->addrs[req->peer],
                                            tag, &op->ctx)
                             : fi_tsend(t->ep, buf, n, NULL, t->addrs[req->peer], tag, &op->ctx);
        } else {
            uint64_t tag = make_tag(t, req->chan, req->peer, req->tag, st->base + st->posted);
            uint64_t ignore = (uint64_t)UTAG_MASK << t->cbits;
            ret = fi_trecv(t->ep, buf, n, NULL, FI_ADDR_UNSPEC, tag, ignore, &op->ctx);
        }
        if (ret != 0) {
            tutti__ofi_op_put(t, op);
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
    tutti__tp_errf(&t->base, TUTTI_ERR_TRANSPORT,
                   "ofi (%s): posting a %zu-byte %s %s rank %d failed: %s; the provider may be "
                   "out of resources or the endpoint broken",
                   t->prov, req->len, req->kind == TUTTI__REQ_SEND ? "send to" : "receive from",
                   tutti__ofi_chan_name(req->chan), req->peer, fi_strerror(-ret));
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
            tutti__ofi_pend_del(t, req);
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
    tutti__ofi_inflight_del(t, op);
    t->busy[op->kind]--;
    tutti__ofi_op_put(t, op);
    tutti__note_moved();
    if (req == NULL)
        return;
    struct reqst *st = st_of(req);
    st->inflight--;
    bool short_recv = req->kind == TUTTI__REQ_RECV && e->len != want;
    if (piece_back(t, req, !short_recv, short_recv))
        return;
    st->ndone++;
    if (req->kind == TUTTI__REQ_RECV) {
        /* The whole tag where the sender sent it as CQ data, else its low bits in the tag. */
        const bool whole = (e->flags & FI_REMOTE_CQ_DATA) != 0;
        const uint32_t mask = whole ? UINT32_MAX : UTAG_MASK;
        uint32_t got_tag = whole ? (uint32_t)e->data : (uint32_t)(e->tag >> t->cbits) & UTAG_MASK;
        if (e->len != want) {
            tutti__tp_errf(&t->base, TUTTI_ERR_MISMATCH,
                           "ofi (%s): a receive of %zu bytes from rank %d (%s channel) got a "
                           "message of %zu bytes: the sizes differ, sender and receiver must "
                           "post the same length",
                           t->prov, want, req->peer, tutti__ofi_chan_name(req->chan), e->len);
            fail(t, req, TUTTI_ERR_MISMATCH);
            return;
        }
        if (got_tag != (req->tag & mask)) {
            tutti__tp_errf(&t->base, TUTTI_ERR_MISMATCH,
                           "ofi (%s): a receive from rank %d (%s channel) expected tag %u but "
                           "the matching message has tag %u (%d bits compared): sender "
                           "and receiver disagree on the order or tags of their messages",
                           t->prov, req->peer, tutti__ofi_chan_name(req->chan),
                           req->tag & mask, got_tag, whole ? 32 : UTAG_BITS);
            fail(t, req, TUTTI_ERR_MISMATCH);
            return;
        }
    }
    req->off += want;
    if (st->ndone == st->nchunks)
        tutti__ofi_finish(t, req, TUTTI_OK);
}

static void complete_err(struct ofi *t, const struct fi_cq_err_entry *e)
{
    struct op *op = e->op_context;
    char pbuf[256] = "";
    const char *ptxt = fi_cq_strerror(t->cq, e->prov_errno, e->err_data, pbuf, sizeof pbuf);
    if (ptxt == NULL || *ptxt == '\0')
        ptxt = "no details";
    if (op == NULL) { /* not tied to an operation (some providers report connection errors so) */
        tutti__tp_errf(&t->base, TUTTI_ERR_TRANSPORT,
                       "ofi (%s): completion queue error without an operation: %s (%s)",
                       t->prov, fi_strerror(e->err), ptxt);
        char txt[TUTTI__ERRLEN];
        TUTTI__LOG(TUTTI__LOG_WARN, "%s", tutti__tp_err(&t->base, txt));
        return;
    }
    tutti__req_t *req = op->req;
    size_t want = op->len;
    tutti__ofi_inflight_del(t, op);
    t->busy[op->kind]--;
    tutti__ofi_op_put(t, op);
    if (req == NULL)
        return;
    st_of(req)->inflight--;
    int err0 = e->err < 0 ? -e->err : e->err;
    if (piece_back(t, req, false, err0 != FI_ECANCELED))
        return;
    tutti_status_t status;
    const char *dir = req->kind == TUTTI__REQ_SEND ? "send to" : "receive from";
    int err = e->err < 0 ? -e->err : e->err; /* shm reports some errors negated */
    if (err == FI_ETRUNC) {
        /* olen is the excess, where the provider reports it (rxm does not). */
        char sent[64] = "more";
        if (e->olen > 0)
            snprintf(sent, sizeof sent, "%zu bytes", want + e->olen);
        status = tutti__tp_errf(&t->base, TUTTI_ERR_MISMATCH,
                                "ofi (%s): a receive of %zu bytes from rank %d (%s channel) was "
                                "truncated: the sender sent %s; the sizes differ, sender and "
                                "receiver must post the same length",
                                t->prov, want, req->peer, tutti__ofi_chan_name(req->chan), sent);
    } else if (err == FI_ECANCELED) {
        /* Pieces we cancel come back through piece_back; rxm cancels receives itself when
         * the connection to their peer breaks, i.e. the peer died. */
        status = tutti__tp_errf(&t->base, TUTTI_ERR_PEER_FAILED,
                                "ofi (%s): a %zu-byte %s rank %d (%s channel) was cancelled by "
                                "the provider; the connection to that rank probably broke",
                                t->prov, req->len, dir, req->peer,
                                tutti__ofi_chan_name(req->chan));
    } else {
        status = classify(err);
        tutti__tp_errf(&t->base, status,
                       "ofi (%s): a %zu-byte %s rank %d (%s channel) failed: %s (provider: %s)%s",
                       t->prov, req->len, dir, req->peer, tutti__ofi_chan_name(req->chan),
                       fi_strerror(err), ptxt,
                       status == TUTTI_ERR_PEER_FAILED
                             ? "; the peer probably died or its host is unreachable"
                             : "");
    }
    fail(t, req, status);
}

/* drain reads the completion queue until it is empty. */
tutti_status_t tutti__ofi_drain(struct ofi *t)
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
                return tutti__tp_errf(&t->base, TUTTI_ERR_TRANSPORT,
                                      "ofi (%s): fi_cq_readerr failed: %s", t->prov,
                                      fi_strerror((int)-r));
        } else {
            return tutti__tp_errf(&t->base, TUTTI_ERR_TRANSPORT,
                                  "ofi (%s): fi_cq_read failed: %s; the endpoint is broken, "
                                  "destroy the communicator",
                                  t->prov, fi_strerror((int)-n));
        }
    }
}

static tutti_status_t progress_locked(struct ofi *t)
{
    tutti_status_t st = tutti__ofi_drain(t);
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
        return tutti__tp_errf(tp, TUTTI_ERR_INTERNAL,
                              "ofi: bad request (peer %d of %d, channel %d, kind %d, %zu bytes "
                              "at %p)",
                              req->peer, t->size, req->chan, req->kind, req->len,
                              (void *)req->buf);
    if (t->addrs[req->peer] == FI_ADDR_NOTAVAIL)
        return tutti__tp_errf(tp, TUTTI_ERR_INTERNAL,
                              "ofi: rank %d is not among the peers this ofi transport was "
                              "created for",
                              req->peer);
    size_t nchunks = req->len == 0 ? 1 : (req->len - 1) / t->chunk + 1;
    if (nchunks > ((size_t)1 << (t->cbits - 1)))
        return tutti__tp_errf(tp, TUTTI_ERR_NOT_SUPPORTED,
                              "ofi (%s): a %zu-byte message needs %zu pieces of at most %zu "
                              "bytes, more than the tag counter can tell apart",
                              t->prov, req->len, nchunks, t->chunk);

    pthread_mutex_lock(&t->lock);
    size_t sidx = ((size_t)req->peer * (size_t)t->nchan + (size_t)req->chan) * 2 +
                  (size_t)req->kind;
    if (t->broken || t->broken_stream[sidx]) {
        tutti_status_t rc = tutti__tp_errf(
            tp, TUTTI_ERR_TRANSPORT,
            "ofi (%s): cannot post a %s rank %d (%s channel): %s", t->prov,
            req->kind == TUTTI__REQ_SEND ? "send to" : "receive from", req->peer,
            tutti__ofi_chan_name(req->chan),
            t->broken ? "the endpoint was given up after a cancel that libfabric could not finish; "
                        "destroy the communicator"
                      : "a cancelled request left that stream out of step; destroy the "
                        "communicator");
        pthread_mutex_unlock(&t->lock);
        return rc;
    }
    uint32_t *ctr = &t->ctr[sidx];
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
    tutti_status_t st = t->broken ? TUTTI_ERR_TRANSPORT : progress_locked(t);
    pthread_mutex_unlock(&t->lock);
    return st;
}

/* Transports given up by break_transport (ofi_cancel.c) whose endpoint is still open: never
 * closed, since libfabric 1.17's rxm crashed closing one that held pieces after a link cut,
 * and never freed, since libfabric may hold pointers into them. Reachable from here, so that
 * leak checkers do not report them; one per communicator that lost its network mid-call. */
static struct ofi *abandoned;
static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;

void tutti__ofi_close(struct ofi *t)
{
    if (t->broken && t->ep != NULL) {
        TUTTI__LOG(TUTTI__LOG_INFO, "ofi (%s): the endpoint given up after a cancel is left "
                   "open (its memory and sockets stay until the process exits)", t->prov);
        pthread_mutex_lock(&abandoned_lock);
        t->abandoned_next = abandoned;
        abandoned = t;
        pthread_mutex_unlock(&abandoned_lock);
        return;
    }
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
    free(t->broken_stream);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static void ofi_destroy(tutti__transport_t *tp)
{
    struct ofi *t = (struct ofi *)tp;
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->lock);
    for (struct op *op = t->inflight; op && t->ep; op = op->next)
        fi_cancel(&t->ep->fid, &op->ctx);
    pthread_mutex_unlock(&t->lock);
    tutti__ofi_close(t);
}

const tutti__transport_ops_t tutti__ofi_ops = {
    .name = "ofi",
    .post = ofi_post,
    .progress = ofi_progress,
    .cancel = tutti__ofi_cancel,
    .cancel_chan = tutti__ofi_cancel_chan,
    .destroy = ofi_destroy,
};
