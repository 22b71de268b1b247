/* ofi_cancel.c: withdrawing requests from the libfabric transport (the vtable's cancel and
 * cancel_chan): cancel the pieces libfabric holds and wait, bounded, for them to come back, hand
 * the tag counters back when the stream stays in step, and give the endpoint up when libfabric
 * would not give a piece back in time. */
#include <stdio.h>

#include "ofi_impl.h"

/* break_transport gives the endpoint up and fails every request still open: the price of
 * keeping a cancel's promise (libfabric touches no buffer of a withdrawn request) when libfabric
 * would not give a piece back in time (rxm cannot cancel a send whose receiver never posts).
 * It is not closed: libfabric 1.17's rxm crashed in fi_close with such pieces held after a
 * link cut (SIGSEGV, alltoall over hier, 512 KiB pieces: the link-cut trial of
 * tests/multinode.sh faults). Nothing progresses it again (with manual progress only this
 * transport's own calls move data, and a broken one makes none), and at destroy it is
 * abandoned rather than closed (tutti__ofi_close). A provider with automatic progress would
 * write into withdrawn buffers by itself: its endpoint is closed as before. */
static void break_transport(struct ofi *t, const tutti__req_t *req)
{
    tutti__tp_errf(&t->base, TUTTI_ERR_TRANSPORT,
                   "ofi (%s): a cancelled %zu-byte %s rank %d (%s channel) was still held by "
                   "libfabric after %.0f s, so the endpoint was given up: every operation of "
                   "this communicator over ofi fails from now on; destroy it",
                   t->prov, req->len, req->kind == TUTTI__REQ_SEND ? "send to" : "receive from",
                   req->peer, tutti__ofi_chan_name(req->chan), CANCEL_WAIT_S);
    char txt[TUTTI__ERRLEN];
    TUTTI__LOG(TUTTI__LOG_WARN, "%s", tutti__tp_err(&t->base, txt));
    t->broken = true;
    if (t->info->domain_attr->data_progress == FI_PROGRESS_AUTO) {
        /* A provider that moves data by itself would still write into withdrawn buffers:
         * only closing stops it. */
        fi_close(&t->ep->fid);
        t->ep = NULL;
    }
    while (t->inflight) {
        struct op *op = t->inflight;
        tutti__ofi_inflight_del(t, op);
        if (op->req != NULL && !op->req->done)
            tutti__ofi_finish(t, op->req, TUTTI_ERR_TRANSPORT);
        /* (not put back: libfabric may still hold its context) */
    }
    t->busy[0] = t->busy[1] = 0;
    while (t->pend_head)
        tutti__ofi_finish(t, t->pend_head, TUTTI_ERR_TRANSPORT);
}

/*
 * cancel_locked: req's pieces that libfabric holds are cancelled and waited for (reading the
 * completion queue, which also moves every other request on), pieces not yet posted are
 * dropped. If every piece had completed with its data, req completed first. Otherwise it is
 * withdrawn, and its stream stays in step only if none of its pieces moved data and it was the
 * last request posted there: then its counters are handed back, for the next request to use.
 */
static tutti_status_t cancel_locked(struct ofi *t, tutti__req_t *req)
{
    if (t->broken)
        return req->done ? TUTTI_OK : TUTTI_ERR_TRANSPORT; /* broken: every request is done */
    if (req->done)
        return TUTTI_OK;
    struct reqst *st = st_of(req);
    tutti__ofi_pend_del(t, req);
    st->cancelling = 1;
    for (struct op *op = t->inflight; op; op = op->next)
        if (op->req == req)
            fi_cancel(&t->ep->fid, &op->ctx);
    double deadline = tutti__now() + CANCEL_WAIT_S;
    unsigned spins = 0;
    while (st->inflight > 0) {
        tutti_status_t d = tutti__ofi_drain(t);
        if (st->inflight == 0)
            break;
        if (d < 0 || tutti__now() > deadline) {
            break_transport(t, req);
            return TUTTI_ERR_TRANSPORT;
        }
        if (++spins > 64)
            tutti__sleep_us(50);
    }
    if (st->failed != 0) {
        tutti__ofi_finish(t, req, st->failed);
        return TUTTI_OK;
    }
    if (!st->bad && st->ndone == st->nchunks) {
        tutti__ofi_finish(t, req, TUTTI_OK);
        return TUTTI_OK;
    }
    size_t sidx = ((size_t)req->peer * (size_t)t->nchan + (size_t)req->chan) * 2 +
                  (size_t)req->kind;
    tutti_status_t rc = TUTTI_OK;
    if (st->ndone == 0 && !st->bad && t->ctr[sidx] == st->base + st->nchunks) {
        t->ctr[sidx] = st->base;
    } else {
        t->broken_stream[sidx] = 1;
        rc = tutti__tp_errf(&t->base, TUTTI_ERR_TRANSPORT,
                            "ofi (%s): a %zu-byte %s rank %d (%s channel) was cancelled %s; "
                            "that stream is out of step from now on",
                            t->prov, req->len,
                            req->kind == TUTTI__REQ_SEND ? "send to" : "receive from",
                            req->peer, tutti__ofi_chan_name(req->chan),
                            st->ndone > 0 || st->bad ? "after part of it had moved"
                                                       : "behind later requests");
    }
    tutti__ofi_finish(t, req, TUTTI_ERR_ABORTED);
    return rc;
}

tutti_status_t tutti__ofi_cancel(tutti__transport_t *tp, tutti__req_t *req)
{
    struct ofi *t = (struct ofi *)tp;
    pthread_mutex_lock(&t->lock);
    tutti_status_t rc = cancel_locked(t, req);
    pthread_mutex_unlock(&t->lock);
    return rc;
}

/* first_on finds a request of channel chan that libfabric holds or that waits to be posted. */
static tutti__req_t *first_on(struct ofi *t, int chan)
{
    for (struct op *op = t->inflight; op; op = op->next)
        if (op->req != NULL && op->req->chan == chan && !op->req->done)
            return op->req;
    for (tutti__req_t *r = t->pend_head; r; r = r->next)
        if (r->chan == chan)
            return r;
    return NULL;
}

tutti_status_t tutti__ofi_cancel_chan(tutti__transport_t *tp, int chan)
{
    struct ofi *t = (struct ofi *)tp;
    tutti_status_t rc = TUTTI_OK;
    pthread_mutex_lock(&t->lock);
    tutti__req_t *req;
    /* Each cancel takes its request off both lists (or breaks the transport, emptying them). */
    while (!t->broken && (req = first_on(t, chan)) != NULL) {
        tutti_status_t st = cancel_locked(t, req);
        rc = rc < 0 ? rc : st;
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}
