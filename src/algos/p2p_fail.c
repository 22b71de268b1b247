/* p2p_fail.c: how point-to-point operations end other than by completing: withdrawing what an
 * op has posted without leaving a peer's stream out of step (or failing the peer when it would
 * be), failed, dead and departed peers, deadlines and abort. */
#include <stdio.h>
#include <stdlib.h>

#include "p2p_impl.h"

/* How often the liveness mesh is asked (as for collectives). */
#define LIVE_PERIOD 0.05
/* How long a dead peer's ops wait for what it sent before it died, once nothing more comes. */
#define DEAD_GRACE_S 0.25

bool tutti__p2p_cancel(tutti__p2p_t *e, int peer, tutti__req_t *req)
{
    tutti__transport_t *tp = e->peers[peer].tp;
    if (tp->ops->cancel(tp, req) == TUTTI_OK)
        return true;
    tutti__p2p_break(e, peer, TUTTI_ERR_TRANSPORT, "%s", TUTTI__TP_ERR(tp));
    return false;
}

static void peer_fail(tutti__p2p_t *e, int peer, tutti_status_t status, bool fail_any,
                      const char *fmt, va_list ap)
{
    tutti__p2p_peer_t *q = &e->peers[peer];
    if (q->broken)
        return;
    q->broken = true;
    q->broken_status = status;
    vsnprintf(q->why, sizeof q->why, fmt, ap);
    e->gen++;
    if (fail_any) {
        e->any_fail_gen = e->gen;
        e->last_broken = peer;
    }
    e->sweep = true;
    if (q->env_posted) {
        q->tp->ops->cancel(q->tp, &q->env_req); /* nothing more is read from it either way */
        q->env_posted = false;
    }
    TUTTI__LOG(TUTTI__LOG_INFO, "rank %d: point-to-point with rank %d ends: %s", e->rank, peer,
               q->why);
}

void tutti__p2p_break(tutti__p2p_t *e, int peer, tutti_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    peer_fail(e, peer, status, true, fmt, ap);
    va_end(ap);
}

static void peer_left(tutti__p2p_t *e, int peer, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void peer_left(tutti__p2p_t *e, int peer, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    peer_fail(e, peer, TUTTI_ERR_PEER_FAILED, false, fmt, ap);
    va_end(ap);
}

static void add_withdrawn(tutti__p2p_t *e, int p, uint64_t seq)
{
    tutti__p2p_peer_t *q = &e->peers[p];
    if (q->nwithdrawn == q->capwithdrawn) {
        int cap = q->capwithdrawn ? 2 * q->capwithdrawn : 4;
        uint64_t *w = realloc(q->withdrawn, (size_t)cap * sizeof *w);
        if (w == NULL) {
            tutti__p2p_break(e, p, TUTTI_ERR_NO_MEMORY,
                             "out of memory to remember a send to rank %d that was withdrawn", p);
            return;
        }
        q->withdrawn = w;
        q->capwithdrawn = cap;
    }
    q->withdrawn[q->nwithdrawn++] = seq;
    tutti__p2p_listen(e, p); /* for the CTS that may still come, to answer it */
}

/*
 * withdraw takes back everything op has posted and leaves its peer's streams in step, or fails
 * the peer where they cannot be: a receive that cleared an RTS but will not take its data (or
 * the rest of it), a send whose envelope went out but whose payload did not. A send withdrawn
 * before its announcement went out never existed for the peer (message numbers may skip); one
 * announced but not yet cleared is remembered, so that its CTS, if it comes, is answered
 * "withdrawn". It returns true when the op had in fact finished: its last requests were posted
 * and all completed (an ofi cancel waits for a transfer in progress, which may end meanwhile),
 * so that the message went out, or came in, whole.
 */
static bool withdraw(tutti__p2p_t *e, tutti__p2p_op_t *op)
{
    int p = op->mpeer;
    bool sent[3] = {false, false, false};
    for (int i = 0; i < 3; i++) {
        if (!op->posted[i])
            continue;
        if (!tutti__p2p_req_done(&op->req[i]))
            tutti__p2p_cancel(e, p, &op->req[i]);
        sent[i] = tutti__p2p_req_done(&op->req[i]) && op->req[i].status == TUTTI_OK;
    }
    /* as check_reqs (p2p_progress.c) would have found at the next progress */
    if (op->state == S_EAGER || op->state == S_DATA || op->state == R_PAYLOAD) {
        bool whole = true;
        for (int i = 0; i < 3; i++)
            whole = whole && (!op->posted[i] || sent[i]);
        if (whole)
            return true;
    }
    bool ok = p >= 0 && !e->peers[p].broken && !e->closing;
    /* a send whose envelope never went out: the peer never saw it, so never counts it matched */
    if ((op->state == S_EAGER || op->state == S_RTS) && !sent[0] && p >= 0)
        e->peers[p].unsent++;
    switch (op->state) {
    case R_POSTED: tutti__p2p_unpost(e, op); break;
    case R_ARRIVING: /* its message drains into the entry, which then goes */
        if (op->ux != NULL) /* NULL: the message failed on the way in, its entry is gone */
            op->ux->op = NULL;
        op->ux = NULL;
        break;
    case R_CTS:
        tutti__p2p_unwait(e, op);
        if (ok)
            tutti__p2p_break(e, p, TUTTI_ERR_TRANSPORT,
                             "a receive here cleared rank %d's message %llu for sending and then "
                             "ended without its data (%s), so the data that follows has no "
                             "place: nothing more is exchanged with rank %d",
                             p, (unsigned long long)op->mseq, op->err, p);
        break;
    case R_PAYLOAD: /* the data header came; its payload, taken back, would follow anyway */
        if (ok && op->posted[2] && !sent[2])
            tutti__p2p_break(e, p, TUTTI_ERR_TRANSPORT,
                             "a receive here ended (%s) while rank %d's message %llu was "
                             "arriving, so the rest of that message has no place: nothing more "
                             "is exchanged with rank %d",
                             op->err, p, (unsigned long long)op->mseq, p);
        break;
    case S_EAGER:
        if (ok && sent[0] && op->posted[2] && !sent[2])
            tutti__p2p_break(e, p, TUTTI_ERR_TRANSPORT,
                             "a send to rank %d was withdrawn (%s) after its envelope had gone "
                             "out but before its data, so rank %d would take what follows for "
                             "it: nothing more is exchanged with it",
                             p, op->err, p);
        break;
    case S_RTS:
        tutti__p2p_unwait(e, op);
        if (ok && sent[0])
            add_withdrawn(e, p, op->mseq);
        break;
    case S_DATA:
        if (!op->posted[1] || !ok)
            break;
        if (!sent[1])
            tutti__p2p_ctrl_send(e, p, TUTTI__P2P_DATA, TUTTI__P2P_WITHDRAWN, op->mseq);
        else if (!sent[2])
            tutti__p2p_break(e, p, TUTTI_ERR_TRANSPORT,
                             "a send to rank %d was withdrawn (%s) after its data header had "
                             "gone out but before its data: nothing more is exchanged with it",
                             p, op->err);
        break;
    default: break;
    }
    return false;
}

void tutti__p2p_fail(tutti__p2p_t *e, tutti__p2p_op_t *op, tutti_status_t status,
                     const char *fmt, ...)
{
    char what[160], detail[TUTTI__ERRLEN];
    tutti__p2p_describe(op, what, sizeof what);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    /* set first: withdraw's texts quote it */
    snprintf(op->err, TUTTI__ERRLEN, "rank %d: %s: %s", e->rank, what, detail);
    if (withdraw(e, op)) { /* it finished after all: the deadline, or the failure, came late */
        op->err[0] = '\0';
        if (op->kind == TUTTI__P2P_RECV && op->posted[2]) /* its payload came */
            e->peers[op->mpeer].nrx++;
        TUTTI__LOG(TUTTI__LOG_DEBUG, "rank %d: %s finished as it was withdrawn (%s)", e->rank,
                   what, detail);
        tutti__p2p_complete(e, op, TUTTI_OK);
        return;
    }
    tutti__p2p_complete(e, op, status);
}

bool tutti__p2p_no_sender(const tutti__p2p_t *e)
{
    /* failed ones only: a rank that left may have sent what is still unread (in its ring, its
     * endpoint's buffers), which fail_orphaned_any gives the grace to arrive */
    for (int p = 0; p < e->size; p++)
        if (p != e->rank && !e->peers[p].broken)
            return false;
    return true;
}

void tutti__p2p_sweep(tutti__p2p_t *e)
{
    while (e->sweep) {
        e->sweep = false;
        tutti__p2p_op_t *next;
        for (tutti__p2p_op_t *op = e->live; op; op = next) {
            next = op->next; /* failing op takes only op off the list */
            int p = op->mpeer;
            if (p >= 0 && e->peers[p].broken) {
                tutti__p2p_fail(e, op, e->peers[p].broken_status, "%s", e->peers[p].why);
            } else if (p < 0 && op->state == R_POSTED && op->gen < e->any_fail_gen) {
                const tutti__p2p_peer_t *q = &e->peers[e->last_broken];
                tutti__p2p_fail(e, op, q->broken_status,
                                "rank %d failed while this receive from any rank waited, so "
                                "the message it waits for may never come: %s",
                                e->last_broken, q->why);
            } else if (p < 0 && op->state == R_POSTED && tutti__p2p_no_sender(e)) {
                tutti__p2p_fail(e, op, TUTTI_ERR_PEER_FAILED,
                                "every other rank has failed while it waited");
            }
        }
        tutti__p2p_unexp_t *un;
        for (tutti__p2p_unexp_t *u = e->ux; u; u = un) {
            un = u->next;
            tutti__p2p_peer_t *q = &e->peers[u->peer];
            /* An eager message that has arrived whole is still good; the rest cannot finish. */
            if (!q->broken || (u->kind == TUTTI__P2P_EAGER && !u->arriving))
                continue;
            if (u->arriving && !tutti__p2p_req_done(&u->req))
                q->tp->ops->cancel(q->tp, &u->req);
            if (u->op != NULL) /* not reached: its op failed with the peer above */
                u->op->ux = NULL;
            tutti__p2p_ux_free(e, u);
        }
        for (tutti__p2p_ctrl_t **kp = &e->ctrl; *kp;) {
            tutti__p2p_ctrl_t *k = *kp;
            tutti__p2p_peer_t *q = &e->peers[k->peer];
            if (!q->broken) {
                kp = &k->next;
                continue;
            }
            if (!tutti__p2p_req_done(&k->req))
                q->tp->ops->cancel(q->tp, &k->req);
            *kp = k->next;
            free(k);
        }
        for (int p = 0; p < e->size; p++)
            if (e->peers[p].broken)
                e->peers[p].nwithdrawn = 0;
    }
}

/* engine_owes tells whether the engine itself still has business with peer p: a withdrawn
 * send's CTS to answer, a control message to it not yet gone, a payload from it still coming
 * into an engine buffer. Its death must end those too, or the engine stays busy for good. */
static bool engine_owes(const tutti__p2p_t *e, int p)
{
    if (e->peers[p].nwithdrawn > 0)
        return true;
    for (const tutti__p2p_ctrl_t *k = e->ctrl; k; k = k->next)
        if (k->peer == p)
            return true;
    for (const tutti__p2p_unexp_t *u = e->ux; u; u = u->next)
        if (u->peer == p && u->arriving)
            return true;
    return false;
}

_Static_assert(TUTTI__P2P_WINDOW == 128 && TUTTI__P2P_CREDIT_EVERY == 16,
               "waiting_for's text names the flow-control window (128) and what never waits "
               "(112)");

/* waiting_for says, for a timeout's text, what op was still waiting for. */
static const char *waiting_for(const tutti__p2p_op_t *op)
{
    switch (op->state) {
    case R_POSTED: return "no matching message arrived (same source and tag)";
    case R_ARRIVING:
    case R_PAYLOAD: return "its data did not finish arriving";
    case R_CTS: return "the sender did not send the data after this receive cleared it";
    case S_EAGER: return "the receiver did not take the message (it posted no matching receive, "
                         "or is stuck)";
    /* the receive matched it and cleared it for sending: what is missing is its taking the data */
    case S_DATA: return "the receiver cleared the message for sending but did not take its data "
                        "(its receive failed or timed out meanwhile, or it is stuck)";
    case S_RTS:
        if (op->len <= TUTTI__P2P_EAGER_MAX) /* flagged TUTTI__P2P_SYNC: flow control */
            return "the receiver posted no matching receive (over ofi a send waits to be "
                   "matched once more than 128 messages to that rank are not reported matched, "
                   "its flow control: the receiver is far behind, or ranks send over 112 "
                   "messages to each other before they receive)";
        return "the receiver posted no matching receive";
    default: return "it did not finish";
    }
}

/* A receive from any rank names no peer, so no departed peer fails it: once every other rank
 * has failed or left (its last data given the grace to arrive), nothing can match it. */
static void fail_orphaned_any(tutti__p2p_t *e, double now)
{
    if (e->sweep)
        return; /* a peer just failed: the sweep tells such receives so, and why */
    for (int p = 0; p < e->size; p++) {
        const tutti__p2p_peer_t *q = &e->peers[p];
        if (p == e->rank || q->broken)
            continue;
        const bool died = tutti__live_dead(e->net->live, p);
        if ((!died && !tutti__live_left(e->net->live, p)) || q->left_seen == 0.0 ||
            now - q->left_seen <= (died ? DEAD_GRACE_S : tutti__live_left_grace(e->net->live, p)))
            return;
    }
    tutti__p2p_op_t *next;
    for (tutti__p2p_op_t *op = e->live; op; op = next) {
        next = op->next;
        if (op->mpeer < 0 && op->state == R_POSTED)
            tutti__p2p_fail(e, op, TUTTI_ERR_PEER_FAILED,
                            "every other rank has failed or left (destroyed its communicator) "
                            "while this receive from any rank waited, so nothing can match it");
    }
}

/* fail_silent breaks every peer that has operations open with this rank and has sent no
 * heartbeat for TUTTI_UNRESPONSIVE (tutti__net_unresponsive), as the collectives fail their
 * call: it is stopped (SIGSTOP, a debugger) or frozen, or cut off, and the error says so before
 * the operations' own deadline would only have said "timed out". */
static void fail_silent(tutti__p2p_t *e)
{
    tutti__net_t *net = e->net;
    double limit = tutti__net_unresponsive(net), silent = 0;
    int p = -1, dead = -1;
    if (!tutti__live_silent(net->live, limit, 0, &p, &silent))
        return;
    /* Read every connection first: what came while this rank was stopped is waiting there. */
    (void)tutti__live_check_now(net->live, &dead);
    p = -1;
    while (tutti__live_silent(net->live, limit, p + 1, &p, &silent)) {
        tutti__p2p_peer_t *q = &e->peers[p];
        if (p == e->rank || q->broken || q->nops == 0)
            continue;
        double self = tutti__live_stalled(net->live);
        char mine[160] = "";
        if (self > 0)
            snprintf(mine, sizeof mine, " (this rank itself did not run for about %.1f s: "
                     "stopped or frozen, which may be why)", self);
        tutti__p2p_break(e, p, TUTTI_ERR_PEER_FAILED,
                         "rank %d (pid %d) is unresponsive: no heartbeat for %.1f s (limit "
                         "%.1f s, TUTTI_UNRESPONSIVE): stopped (SIGSTOP, a debugger), frozen, or "
                         "cut off%s",
                         p, tutti__live_pid(net->live, p), silent, limit, mine);
    }
}

void tutti__p2p_slow_checks(tutti__p2p_t *e, double now)
{
    tutti__net_t *net = e->net;
    if (__atomic_load_n(net->aborted, __ATOMIC_ACQUIRE)) {
        e->closing = true;
        while (e->live != NULL)
            tutti__p2p_fail(e, e->live, TUTTI_ERR_ABORTED,
                            "aborted (tutti_comm_abort) while it was in progress");
        return;
    }
    if (net->live != NULL && now >= e->next_live) {
        e->next_live = now + LIVE_PERIOD;
        int dead = -1;
        (void)tutti__live_check(net->live, &dead);
        /* A rank that died or left may have sent, before it went, what this rank has not read
         * yet (its ring, its endpoint's buffers: a program that exits right after its last
         * send returned, without destroying its communicator, lost that message): its ops fail
         * only once nothing more has come from it for a grace, counted again from each
         * receive posted for it (p2p.c). Sends to it fail at once (post_send). */
        for (int p = 0; p < e->size; p++) {
            tutti__p2p_peer_t *q = &e->peers[p];
            if (p == e->rank || q->broken)
                continue;
            const bool died = tutti__live_dead(net->live, p);
            if (!died && !tutti__live_left(net->live, p))
                continue;
            if (died && q->dead_gen == 0)
                q->dead_gen = ++e->gen;
            if (q->left_seen == 0.0 || q->nrx != q->nrx_seen) { /* its data still comes */
                q->left_seen = now;
                q->nrx_seen = q->nrx;
            } else if ((q->nops > 0 || e->nany > 0 || engine_owes(e, p)) && died &&
                       now - q->left_seen > DEAD_GRACE_S) {
                /* Receives from any rank posted before its death was seen may have waited for
                 * its message and fail with it; those posted since never did. */
                const uint64_t any_before = e->any_fail_gen;
                tutti__p2p_break(e, p, TUTTI_ERR_PEER_FAILED,
                                 "rank %d (pid %d) died or lost its connection", p,
                                 tutti__live_pid(net->live, p));
                e->any_fail_gen = any_before > q->dead_gen ? any_before : q->dead_gen;
            } else if (q->nops > 0 && !died &&
                       now - q->left_seen > tutti__live_left_grace(net->live, p)) {
                peer_left(e, p,
                          "rank %d destroyed its communicator while this rank still had "
                          "point-to-point operations with it: a rank must finish its sends and "
                          "receives before it destroys the communicator",
                          p);
            }
        }
        fail_orphaned_any(e, now);
        fail_silent(e);
    }
    if (now < e->next_deadline)
        return;
    double earliest = 1e300; /* of the ops that stay */
    tutti__p2p_op_t *next;
    for (tutti__p2p_op_t *op = e->live; op; op = next) {
        next = op->next;
        if (now < op->deadline) {
            earliest = op->deadline < earliest ? op->deadline : earliest;
            continue;
        }
        double t = op->timeout_s > 0 ? op->timeout_s : tutti__net_timeout(net);
        tutti__p2p_fail(e, op, TUTTI_ERR_TIMEOUT,
                        "timed out after %g s: %s; the peer may be stuck or slower than the "
                        "timeout (raise %s if the job is only slow)",
                        t, waiting_for(op),
                        tutti__timeout_hint(net, op->timeout_s));
    }
    e->next_deadline = earliest;
}

tutti__p2p_op_t *tutti__p2p_fail_all(tutti__p2p_t *e, tutti_status_t status, const char *why)
{
    e->closing = true;
    while (e->live != NULL)
        tutti__p2p_fail(e, e->live, status, "%s", why);
    tutti__p2p_sweep(e);
    tutti__p2p_op_t *done = e->done; /* with those that had ended before, first */
    e->done = e->done_last = NULL;
    return done;
}

tutti__p2p_op_t *tutti__p2p_fail_op(tutti__p2p_t *e, tutti__p2p_op_t *op, tutti_status_t status,
                                    const char *why)
{
    if (op->state != OP_DONE)
        tutti__p2p_fail(e, op, status, "%s", why);
    tutti__p2p_sweep(e);
    tutti__p2p_op_t *done = e->done;
    e->done = e->done_last = NULL;
    return done;
}
