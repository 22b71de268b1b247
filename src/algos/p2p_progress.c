/* p2p_progress.c: the point-to-point engine's progress (transports, arrivals, requests that
 * ended, the slow checks, withdrawing envelope receives nothing needs) and its life (creation
 * and destruction). */
#include <stdio.h>
#include <stdlib.h>

#include "p2p_impl.h"

#define SLOW_PERIOD 1e-3 /* deadlines and abort are checked at most this often */

/* ---- progress ------------------------------------------------------------------------------- */

/* check_reqs ends op once every request it posted is done (true); a failed one fails its
 * peer. */
static bool check_reqs(tutti__p2p_t *e, tutti__p2p_op_t *op)
{
    for (int i = 0; i < 3; i++) {
        if (!op->posted[i])
            continue;
        if (!tutti__p2p_req_done(&op->req[i]))
            return false;
        if (op->kind == TUTTI__P2P_RECV && i == 2) /* its payload came */
            e->peers[op->mpeer].nrx++;
        if (op->req[i].status < 0) {
            tutti__transport_t *tp = e->peers[op->mpeer].tp;
            tutti__p2p_break(e, op->mpeer, op->req[i].status, "%s", TUTTI__TP_ERR(tp));
            return false;
        }
    }
    tutti__p2p_complete(e, op, TUTTI_OK);
    return true;
}

/* check_flight ends the ops in flight whose requests are all done: of each peer's sends and
 * receives the oldest TUTTI__P2P_FLIGHT_WINDOW still open, or every one when next_full has
 * come (p2p_impl.h). A full look at n ops costs about 0.1 us each in cache misses, so with
 * thousands in flight it comes at most every 1 ms + n us (10% of a core at most). */
static void check_flight(tutti__p2p_t *e, double now)
{
    const bool full = now >= e->next_full;
    bool deep = false;
    for (int p = 0; p < e->size && e->nflight > 0; p++)
        for (int k = 0; k < 2; k++) {
            int open = 0;
            tutti__p2p_op_t *next;
            for (tutti__p2p_op_t *op = e->peers[p].flight[k]; op != NULL; op = next) {
                next = op->fnext;
                if (!check_reqs(e, op) && ++open >= TUTTI__P2P_FLIGHT_WINDOW && !full &&
                    next != NULL) {
                    deep = true;
                    break;
                }
            }
        }
    e->look_deep = deep;
    if (full)
        e->next_full = now + 1e-3 + 1e-6 * e->nflight;
}

bool tutti__p2p_take_env(tutti__p2p_t *e, int p)
{
    tutti__p2p_peer_t *q = &e->peers[p];
    if (!q->env_posted || !tutti__p2p_req_done(&q->env_req))
        return false;
    if (q->env_req.status == TUTTI_OK) {
        tutti__p2p_arrive(e, p);
    } else {
        q->env_posted = false;
        tutti__p2p_break(e, p, q->env_req.status, "%s", TUTTI__TP_ERR(q->tp));
    }
    return true;
}

/* arrivals reads every envelope, eager payload (when look: something finished) and control
 * message that has come or gone. The payloads still arriving are the latest entries (each
 * follows its envelope), behind thousands that came whole and wait for their receive: looked
 * for from the newest back. */
static void arrivals(tutti__p2p_t *e, bool look)
{
    for (int p = 0; p < e->size; p++)
        (void)tutti__p2p_take_env(e, p);
    tutti__p2p_unexp_t *up;
    int left = look ? e->nux_arriving : 0;
    for (tutti__p2p_unexp_t *u = e->ux_last; u != NULL && left > 0; u = up) {
        up = u->prev;
        if (!u->arriving)
            continue;
        left--;
        if (!tutti__p2p_req_done(&u->req))
            continue;
        u->arriving = false;
        e->nux_arriving--;
        e->peers[u->peer].nrx++;
        if (u->req.status < 0) {
            /* The message is lost with its payload: dropped here, since the sweep keeps an eager
             * entry that is no longer arriving as one that came whole, which a later receive
             * would take. A receive already bound to it fails with the peer in the sweep. */
            tutti__p2p_break(e, u->peer, u->req.status, "%s", TUTTI__TP_ERR(e->peers[u->peer].tp));
            if (u->op != NULL)
                u->op->ux = NULL;
            tutti__p2p_ux_free(e, u);
        } else if (u->op != NULL) {
            tutti__p2p_op_t *op = u->op;
            op->ux = NULL;
            memcpy(op->buf, u->data, u->len);
            tutti__p2p_ux_free(e, u);
            tutti__p2p_complete(e, op, TUTTI_OK);
        } else if (u->matched) {
            tutti__p2p_ux_free(e, u);
        }
    }
    for (tutti__p2p_ctrl_t **kp = &e->ctrl; *kp;) {
        tutti__p2p_ctrl_t *k = *kp;
        if (!tutti__p2p_req_done(&k->req)) {
            kp = &k->next;
            continue;
        }
        if (k->req.status < 0)
            tutti__p2p_break(e, k->peer, k->req.status, "%s", TUTTI__TP_ERR(e->peers[k->peer].tp));
        *kp = k->next;
        free(k);
    }
}

/* trim withdraws the envelope receives nothing needs any more, so that an idle engine has no
 * request on the channel; one that had completed meanwhile is read like any other. */
static void trim(tutti__p2p_t *e)
{
    for (int p = 0; p < e->size; p++) {
        tutti__p2p_peer_t *q = &e->peers[p];
        if (!q->env_posted || tutti__p2p_need_env(e, p))
            continue;
        if (!tutti__p2p_cancel(e, p, &q->env_req)) {
            q->env_posted = false;
            continue;
        }
        if (q->env_req.status == TUTTI_OK) {
            tutti__p2p_arrive(e, p);
        } else {
            q->env_posted = false;
            if (q->env_req.status != TUTTI_ERR_ABORTED) /* it failed before the cancel */
                tutti__p2p_break(e, p, q->env_req.status, "%s", TUTTI__TP_ERR(q->tp));
        }
    }
}

tutti__p2p_op_t *tutti__p2p_progress(tutti__p2p_t *e)
{
    tutti__transport_t *tps[2] = {e->net->links.shm, e->net->links.ofi};
    for (int i = 0; i < 2; i++) {
        if (tps[i] == NULL || tps[i]->ops->progress(tps[i]) == TUTTI_OK)
            continue;
        for (int p = 0; p < e->size; p++) /* the transport itself failed */
            if (e->peers[p].tp == tps[i])
                tutti__p2p_break(e, p, TUTTI_ERR_TRANSPORT, "%s", TUTTI__TP_ERR(tps[i]));
    }
    /* Read before anything is looked at: a request that finishes later is seen next time. */
    uint64_t finished = 0;
    for (int i = 0; i < 2; i++)
        if (tps[i] != NULL)
            finished += __atomic_load_n(&tps[i]->nfinished, __ATOMIC_ACQUIRE);
    bool look = e->look || finished != e->finished_seen;
    e->look = false;
    e->finished_seen = finished;
    arrivals(e, look);
    double now = tutti__now();
    if (look || e->look || e->look_deep)
        check_flight(e, now);
    if (now >= e->next_slow) {
        e->next_slow = now + SLOW_PERIOD;
        tutti__p2p_slow_checks(e, now);
    }
    tutti__p2p_sweep(e);
    trim(e);
    tutti__p2p_sweep(e);
    tutti__p2p_op_t *done = e->done;
    e->done = e->done_last = NULL;
    return done;
}

bool tutti__p2p_nap_begin(tutti__p2p_t *e, uint32_t *bell)
{
    if (e == NULL || e->net->links.shm == NULL)
        return false;
    *bell = tutti__shm_nap_begin(e->net->links.shm);
    return true;
}

void tutti__p2p_wake_nappers(tutti__p2p_t *e)
{
    if (e != NULL && e->net->links.shm != NULL)
        tutti__shm_ring_self(e->net->links.shm);
}

void tutti__p2p_nap_end(tutti__p2p_t *e, uint32_t bell, double timeout_s)
{
    tutti__shm_nap_end(e->net->links.shm, bell, timeout_s);
}

bool tutti__p2p_has_ops(const tutti__p2p_t *e) { return e->live != NULL; }

bool tutti__p2p_busy(const tutti__p2p_t *e)
{
    if (e->live != NULL || e->ctrl != NULL)
        return true;
    for (int p = 0; p < e->size; p++)
        if (e->peers[p].env_posted)
            return true;
    return e->nux_arriving > 0;
}

/* ---- life ----------------------------------------------------------------------------------- */

tutti_status_t tutti__p2p_create(tutti__net_t *net, tutti__p2p_t **out)
{
    tutti__p2p_t *e = calloc(1, sizeof *e);
    if (e != NULL)
        e->peers = calloc((size_t)net->size, sizeof *e->peers);
    if (e == NULL || e->peers == NULL) {
        free(e);
        return tutti__set_error(TUTTI_ERR_NO_MEMORY,
                                "out of memory for the point-to-point engine of %d ranks",
                                net->size);
    }
    e->net = net;
    e->rank = net->rank;
    e->size = net->size;
    e->last_broken = -1;
    for (int p = 0; p < e->size; p++) {
        e->peers[p].tp = net->links.peer_tp[p];
        if (p != e->rank && e->peers[p].tp == NULL) {
            e->peers[p].broken = true;
            e->peers[p].broken_status = TUTTI_ERR_INTERNAL;
            snprintf(e->peers[p].why, sizeof e->peers[p].why, "no transport reaches rank %d", p);
        }
    }
    *out = e;
    return TUTTI_OK;
}

void tutti__p2p_destroy(tutti__p2p_t *e)
{
    if (e == NULL)
        return;
    for (int p = 0; p < e->size; p++) {
        tutti__p2p_peer_t *q = &e->peers[p];
        if (q->env_posted)
            q->tp->ops->cancel(q->tp, &q->env_req);
        free(q->withdrawn);
    }
    while (e->ux) {
        tutti__p2p_unexp_t *u = e->ux;
        if (u->arriving)
            e->peers[u->peer].tp->ops->cancel(e->peers[u->peer].tp, &u->req);
        tutti__p2p_ux_free(e, u);
    }
    while (e->ctrl) {
        tutti__p2p_ctrl_t *k = e->ctrl;
        e->ctrl = k->next;
        if (!tutti__p2p_req_done(&k->req))
            e->peers[k->peer].tp->ops->cancel(e->peers[k->peer].tp, &k->req);
        free(k);
    }
    free(e->peers);
    free(e);
}
