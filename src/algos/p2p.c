/* p2p.c: the point-to-point engine's data path: posting sends and receives, reading each peer's
 * stream one envelope at a time, and matching messages to receives as MPI does (by source and
 * tag, in posting order, non-overtaking per pair and tag but for withdrawn sends: p2p.h). The
 * protocol is described in p2p.h; progress and the engine's life are p2p_progress.c's, failures
 * p2p_fail.c's. */
#include <stdio.h>
#include <stdlib.h>

#include "p2p_impl.h"

int tutti__p2p_describe(const tutti__p2p_op_t *op, char *buf, size_t cap)
{
    bool send = op->kind == TUTTI__P2P_SEND;
    if (!send && op->peer == TUTTI_ANY_SOURCE)
        return snprintf(buf, cap, "recv #%llu (%zu bytes, tag %d) from any rank",
                        (unsigned long long)op->seq, op->len, op->tag);
    return snprintf(buf, cap, "%s #%llu (%zu bytes, tag %d) %s rank %d", send ? "send" : "recv",
                    (unsigned long long)op->seq, op->len, op->tag, send ? "to" : "from",
                    op->peer);
}

/* ---- lists ---------------------------------------------------------------------------------- */

/* fly puts op, whose state is now S_EAGER, S_DATA or R_PAYLOAD, on its peer's list in flight
 * (p2p_impl.h); it lands when it completes (tutti__p2p_complete). */
static void fly(tutti__p2p_t *e, tutti__p2p_op_t *op)
{
    if (op->in_flight)
        return;
    tutti__p2p_peer_t *q = &e->peers[op->mpeer];
    const int k = op->kind;
    op->in_flight = true;
    op->fnext = NULL;
    op->fprev = q->flight_last[k];
    if (q->flight_last[k])
        q->flight_last[k]->fnext = op;
    else
        q->flight[k] = op;
    q->flight_last[k] = op;
    e->nflight++;
}

static void land(tutti__p2p_t *e, tutti__p2p_op_t *op)
{
    if (!op->in_flight)
        return;
    tutti__p2p_peer_t *q = &e->peers[op->mpeer];
    const int k = op->kind;
    if (op->fprev)
        op->fprev->fnext = op->fnext;
    else
        q->flight[k] = op->fnext;
    if (op->fnext)
        op->fnext->fprev = op->fprev;
    else
        q->flight_last[k] = op->fprev;
    op->fprev = op->fnext = NULL;
    op->in_flight = false;
    e->nflight--;
}

void tutti__p2p_complete(tutti__p2p_t *e, tutti__p2p_op_t *op, tutti_status_t st)
{
    land(e, op);
    if (op->prev)
        op->prev->next = op->next;
    else
        e->live = op->next;
    if (op->next)
        op->next->prev = op->prev;
    if (op->mpeer >= 0)
        e->peers[op->mpeer].nops--;
    op->state = OP_DONE;
    op->status = st;
    if (op->async) {
        op->done_next = NULL;
        if (e->done_last)
            e->done_last->done_next = op;
        else
            e->done = op;
        e->done_last = op;
    }
    /* The last touch: a blocking caller may return (and its op go) as soon as it sees this. */
    __atomic_store_n(&op->done, 1, __ATOMIC_RELEASE);
}

void tutti__p2p_unpost(tutti__p2p_t *e, tutti__p2p_op_t *op)
{
    if (op->pprev)
        op->pprev->pnext = op->pnext;
    else
        e->posted = op->pnext;
    if (op->pnext)
        op->pnext->pprev = op->pprev;
    else
        e->posted_last = op->pprev;
    op->pprev = op->pnext = NULL;
    if (op->peer == TUTTI_ANY_SOURCE)
        e->nany--;
    else
        e->peers[op->peer].nposted--;
    op->state = 0;
}

/* enlist puts receive op among the unmatched ones, in posting order (a receive put back after
 * its matched send was withdrawn goes before those posted after it). */
static void enlist(tutti__p2p_t *e, tutti__p2p_op_t *op)
{
    tutti__p2p_op_t *at = NULL; /* the first one posted after op; NULL: op is the last */
    if (e->posted_last != NULL && e->posted_last->pno > op->pno)
        for (at = e->posted; at->pno < op->pno; at = at->pnext)
            ;
    op->pnext = at;
    op->pprev = at != NULL ? at->pprev : e->posted_last;
    if (op->pprev)
        op->pprev->pnext = op;
    else
        e->posted = op;
    if (at)
        at->pprev = op;
    else
        e->posted_last = op;
    op->state = R_POSTED;
    if (op->peer == TUTTI_ANY_SOURCE) {
        e->nany++;
        for (int r = 0; r < e->size; r++)
            tutti__p2p_listen(e, r);
    } else {
        e->peers[op->peer].nposted++;
        tutti__p2p_listen(e, op->peer);
    }
}

static void wait_on(tutti__p2p_t *e, tutti__p2p_op_t *op)
{
    tutti__p2p_peer_t *q = &e->peers[op->mpeer];
    const int k = op->kind;
    op->wnext = NULL;
    if (q->wait_last[k])
        q->wait_last[k]->wnext = op;
    else
        q->wait[k] = op;
    q->wait_last[k] = op;
    q->nwait++;
}

void tutti__p2p_unwait(tutti__p2p_t *e, tutti__p2p_op_t *op)
{
    tutti__p2p_peer_t *q = &e->peers[op->mpeer];
    const int k = op->kind;
    tutti__p2p_op_t *prev = NULL;
    for (tutti__p2p_op_t *w = q->wait[k]; w; prev = w, w = w->wnext)
        if (w == op) {
            if (prev)
                prev->wnext = op->wnext;
            else
                q->wait[k] = op->wnext;
            if (q->wait_last[k] == op)
                q->wait_last[k] = prev;
            q->nwait--;
            break;
        }
    op->wnext = NULL;
}

void tutti__p2p_ux_free(tutti__p2p_t *e, tutti__p2p_unexp_t *u)
{
    if (u->arriving)
        e->nux_arriving--;
    if (u->prev)
        u->prev->next = u->next;
    else
        e->ux = u->next;
    if (u->next)
        u->next->prev = u->prev;
    else
        e->ux_last = u->prev;
    free(u->data);
    free(u);
}

/* ---- posting to the transport ---------------------------------------------------------------- */

/* post_req posts one message of the P2P channel to or from peer p; a refusal fails the peer
 * (the stream is out of step) and returns false. */
static bool post_req(tutti__p2p_t *e, int p, tutti__req_t *req, int kind, void *buf, size_t len)
{
    tutti__transport_t *tp = e->peers[p].tp;
    e->look = true; /* it may be done at once */
    memset(req, 0, offsetof(tutti__req_t, priv));
    req->kind = kind;
    req->chan = TUTTI__CHAN_P2P;
    req->peer = p;
    req->buf = buf;
    req->len = len;
    tutti_status_t st = tp->ops->post(tp, req);
    if (st < 0) {
        tutti__p2p_break(e, p, st, "%s", TUTTI__TP_ERR(tp));
        return false;
    }
    return true;
}

static bool post_op_req(tutti__p2p_t *e, tutti__p2p_op_t *op, int i, int kind, void *buf,
                        size_t len)
{
    bool ok = post_req(e, op->mpeer, &op->req[i], kind, buf, len);
    if (!ok) { /* refused: counts as posted and failed, so that no one takes the op as whole */
        op->req[i].status = TUTTI_ERR_TRANSPORT;
        __atomic_store_n(&op->req[i].done, 1, __ATOMIC_RELEASE);
    }
    op->posted[i] = true;
    return ok;
}

/* flow_link tells whether messages to and from q are under flow control (p2p.h): over ofi. */
static bool flow_link(const tutti__p2p_t *e, const tutti__p2p_peer_t *q)
{
    return q->tp != NULL && q->tp == e->net->links.ofi;
}

/* unreported is how many of the messages sent to q it has not said it matched. */
static uint64_t unreported(const tutti__p2p_peer_t *q)
{
    return q->tx_seq - q->unsent - q->acked;
}

bool tutti__p2p_need_env(const tutti__p2p_t *e, int p)
{
    const tutti__p2p_peer_t *q = &e->peers[p];
    return p != e->rank && !q->broken &&
           (q->nposted > 0 || q->nwait > 0 || e->nany > 0 || q->nwithdrawn > 0);
}

void tutti__p2p_listen(tutti__p2p_t *e, int p)
{
    tutti__p2p_peer_t *q = &e->peers[p];
    if (q->env_posted || !tutti__p2p_need_env(e, p))
        return;
    q->env_posted = post_req(e, p, &q->env_req, TUTTI__REQ_RECV, &q->env_in, sizeof q->env_in);
}

static void env_init(tutti__p2p_env_t *env, int kind, int flags, int tag, size_t len, uint64_t seq)
{
    memset(env, 0, sizeof *env);
    env->kind = (uint16_t)kind;
    env->flags = (uint16_t)flags;
    env->tag = tag;
    env->len = len;
    env->seq = seq;
}

/* seal finishes env for p: it carries how many of p's messages this rank has matched (flow
 * control, p2p.h), which p now will have been told. */
static void seal(tutti__p2p_t *e, tutti__p2p_env_t *env, int p)
{
    tutti__p2p_peer_t *q = &e->peers[p];
    env->ack = q->nmatched;
    q->credited = q->nmatched;
    tutti__p2p_env_seal(env, e->rank, p);
}

void tutti__p2p_ctrl_send(tutti__p2p_t *e, int peer, int kind, int flags, uint64_t seq)
{
    if (e->peers[peer].broken)
        return;
    tutti__p2p_ctrl_t *k = calloc(1, sizeof *k);
    if (k == NULL) {
        tutti__p2p_break(e, peer, TUTTI_ERR_NO_MEMORY,
                         "out of memory for a control message to rank %d", peer);
        return;
    }
    env_init(&k->env, kind, flags, 0, 0, seq);
    seal(e, &k->env, peer);
    k->peer = peer;
    if (!post_req(e, peer, &k->req, TUTTI__REQ_SEND, &k->env, sizeof k->env)) {
        free(k);
        return;
    }
    k->next = e->ctrl;
    e->ctrl = k;
}

/* ---- sends ---------------------------------------------------------------------------------- */

/* catch_up reads the envelopes p has sent this rank that are here, before a send to p decides
 * that it must wait: p's counts of matches come behind its own messages, and nothing listens
 * to p for them otherwise (an envelope receive kept posted for them kept the progress thread
 * busy while the receiver lagged, or for good where it never received); a send that waited on
 * a count not read yet (two ranks in rounds of sends, then receives, at the next round's first
 * send) would wait for nothing, or for each other. An envelope receive left posted goes at the
 * next progress's trim, if nothing else needs it. */
static void catch_up(tutti__p2p_t *e, int p)
{
    tutti__p2p_peer_t *q = &e->peers[p];
    /* bounded: what p may have sent unread is its own window and its control messages */
    for (int i = 0; i < 4 * TUTTI__P2P_WINDOW && !q->broken; i++) {
        if (!q->env_posted &&
            !(q->env_posted = post_req(e, p, &q->env_req, TUTTI__REQ_RECV, &q->env_in,
                                       sizeof q->env_in)))
            return;
        if (q->tp->ops->progress(q->tp) != TUTTI_OK) {
            tutti__p2p_break(e, p, TUTTI_ERR_TRANSPORT, "%s", TUTTI__TP_ERR(q->tp));
            return;
        }
        if (!tutti__p2p_take_env(e, p))
            return;
    }
}

static void post_send(tutti__p2p_t *e, tutti__p2p_op_t *op)
{
    int p = op->peer;
    tutti__p2p_peer_t *q = &e->peers[p];
    op->mpeer = p;
    q->nops++;
    if (q->broken) {
        tutti__p2p_fail(e, op, q->broken_status, "%s", q->why);
        return;
    }
    /* Not broken yet while what it sent before it died may still be read (p2p_fail.c), but
     * nothing sent to it now can arrive. */
    if (tutti__live_dead(e->net->live, p)) {
        tutti__p2p_fail(e, op, TUTTI_ERR_PEER_FAILED,
                        "rank %d (pid %d) died or lost its connection", p,
                        tutti__live_pid(e->net->live, p));
        return;
    }
    /* Flow control (p2p.h): past the window, a message of any length waits to be matched. */
    const bool flow = flow_link(e, q);
    if (flow && unreported(q) + 1 > TUTTI__P2P_WINDOW) {
        catch_up(e, p);
        if (q->broken) { /* what it read, or reading, failed the peer */
            tutti__p2p_fail(e, op, q->broken_status, "%s", q->why);
            return;
        }
    }
    op->mseq = ++q->tx_seq;
    tutti__p2p_env_t *env = &op->env[0];
    const bool sync = flow && unreported(q) > TUTTI__P2P_WINDOW;
    if (op->len > TUTTI__P2P_EAGER_MAX || sync) { /* announce it; the data goes once matched */
        env_init(env, TUTTI__P2P_RTS, op->len > TUTTI__P2P_EAGER_MAX ? 0 : TUTTI__P2P_SYNC,
                 op->tag, op->len, op->mseq);
        seal(e, env, p);
        op->state = S_RTS;
        wait_on(e, op);
        post_op_req(e, op, 0, TUTTI__REQ_SEND, env, sizeof *env);
        tutti__p2p_listen(e, p);
        return;
    }
    bool inl = op->len <= TUTTI__P2P_INLINE;
    env_init(env, TUTTI__P2P_EAGER, 0, op->tag, op->len, op->mseq);
    if (inl && op->len > 0)
        memcpy(env->data, op->buf, op->len);
    seal(e, env, p);
    op->state = S_EAGER;
    fly(e, op);
    if (post_op_req(e, op, 0, TUTTI__REQ_SEND, env, sizeof *env) && !inl)
        post_op_req(e, op, 2, TUTTI__REQ_SEND, op->buf, op->len);
}

/* ---- receives ------------------------------------------------------------------------------- */

/* matched counts a message from p that a receive here took (or refused on its length); where
 * flow control holds (p2p.h) and TUTTI__P2P_CREDIT_EVERY of them went untold (no envelope to p
 * carried the count), or p, by the numbers of its messages here, is near its window by the
 * count it was told while what is really unmatched is not (so that telling it helps), a
 * CREDIT tells it. */
static void matched(tutti__p2p_t *e, int p)
{
    tutti__p2p_peer_t *q = &e->peers[p];
    q->nmatched++;
    const uint64_t near = TUTTI__P2P_WINDOW - TUTTI__P2P_CREDIT_EVERY;
    if (flow_link(e, q) &&
        (q->nmatched - q->credited >= TUTTI__P2P_CREDIT_EVERY ||
         (q->rx_seq - q->credited > near && q->rx_seq - q->nmatched <= near)))
        tutti__p2p_ctrl_send(e, p, TUTTI__P2P_CREDIT, 0, 0);
}

/* mismatch fails receive op, whose message (len bytes, tag) from p differs in length. */
static void mismatch(tutti__p2p_t *e, tutti__p2p_op_t *op, int p, int tag, size_t len)
{
    tutti__p2p_fail(e, op, TUTTI_ERR_INVALID_ARG,
                    "the message rank %d sent with tag %d has %zu bytes, but this receive "
                    "expects %zu: receive it with the sender's count and dtype. The message was "
                    "dropped (the next receive meets the next message) and the communicator "
                    "stays usable",
                    p, tag, len, op->len);
}

/* send_cts clears op's matched RTS for sending and waits for the DATA. */
static void send_cts(tutti__p2p_t *e, tutti__p2p_op_t *op)
{
    op->state = R_CTS;
    env_init(&op->env[0], TUTTI__P2P_CTS, 0, 0, 0, op->mseq);
    seal(e, &op->env[0], op->mpeer);
    wait_on(e, op);
    if (post_op_req(e, op, 0, TUTTI__REQ_SEND, &op->env[0], sizeof op->env[0]))
        tutti__p2p_listen(e, op->mpeer);
}

/* bind_source makes p the source of receive op (matched now). */
static void bind_source(tutti__p2p_t *e, tutti__p2p_op_t *op, int p)
{
    op->source = p;
    if (op->mpeer < 0) { /* from any source: bound only now */
        op->mpeer = p;
        e->peers[p].nops++;
    }
}

/* take gives receive op the unexpected entry u it matched. */
static void take(tutti__p2p_t *e, tutti__p2p_op_t *op, tutti__p2p_unexp_t *u)
{
    int p = u->peer;
    u->matched = true;
    bind_source(e, op, p);
    matched(e, p);
    if (u->len != op->len) {
        mismatch(e, op, p, u->tag, u->len);
        if (u->kind == TUTTI__P2P_RTS)
            tutti__p2p_ctrl_send(e, p, TUTTI__P2P_CTS, TUTTI__P2P_REFUSED, u->seq);
        if (!u->arriving) /* else it drains, and goes when it has arrived */
            tutti__p2p_ux_free(e, u);
        return;
    }
    if (u->kind == TUTTI__P2P_RTS) {
        op->mseq = u->seq;
        tutti__p2p_ux_free(e, u);
        send_cts(e, op);
    } else if (u->arriving) {
        op->ux = u;
        u->op = op;
        op->state = R_ARRIVING;
    } else {
        if (u->len > 0)
            memcpy(op->buf, u->data, u->len);
        tutti__p2p_ux_free(e, u);
        tutti__p2p_complete(e, op, TUTTI_OK);
    }
}

/* take_waiting gives receive op the first message that came unmatched and matches it, if
 * any. */
static bool take_waiting(tutti__p2p_t *e, tutti__p2p_op_t *op)
{
    for (tutti__p2p_unexp_t *u = e->ux; u; u = u->next)
        if (!u->matched && (op->peer == TUTTI_ANY_SOURCE || u->peer == op->peer) &&
            u->tag == op->tag) {
            take(e, op, u);
            return true;
        }
    return false;
}

static void post_recv(tutti__p2p_t *e, tutti__p2p_op_t *op)
{
    int p = op->peer;
    if (p != TUTTI_ANY_SOURCE) {
        op->mpeer = p;
        e->peers[p].nops++;
    }
    /* A message that arrived whole before its sender failed is still good. */
    if (take_waiting(e, op))
        return;
    if (p != TUTTI_ANY_SOURCE && e->peers[p].broken) {
        tutti__p2p_fail(e, op, e->peers[p].broken_status, "%s", e->peers[p].why);
        return;
    }
    if (p == TUTTI_ANY_SOURCE && tutti__p2p_no_sender(e)) {
        tutti__p2p_fail(e, op, TUTTI_ERR_PEER_FAILED,
                        "no other rank can send to it: every one has failed");
        return;
    }
    /* A rank that left may still have sent this message, unread as nothing listened to it: its
     * grace for data to arrive counts from this post (p2p_fail.c), not from when it left. */
    for (int q = 0; q < e->size; q++)
        if (q != e->rank && (p == TUTTI_ANY_SOURCE || q == p) && !e->peers[q].broken)
            e->peers[q].left_seen = 0.0;
    enlist(e, op);
}

void tutti__p2p_post(tutti__p2p_t *e, tutti__p2p_op_t *op)
{
    op->status = TUTTI_OK;
    op->source = -1;
    op->done = 0;
    op->done_next = NULL;
    op->state = 0;
    op->mpeer = -1;
    op->mseq = 0;
    op->gen = e->gen;
    op->pno = ++e->nposts;
    op->pprev = op->pnext = op->wnext = NULL;
    op->ux = NULL;
    op->fprev = op->fnext = NULL;
    op->in_flight = false;
    op->posted[0] = op->posted[1] = op->posted[2] = false;
    op->err[0] = '\0';
    op->deadline = tutti__now() + (op->timeout_s > 0 ? op->timeout_s : tutti__net_timeout(e->net));
    if (op->deadline < e->next_deadline)
        e->next_deadline = op->deadline;
    op->prev = NULL;
    op->next = e->live;
    if (e->live)
        e->live->prev = op;
    e->live = op;
    if (op->kind == TUTTI__P2P_SEND)
        post_send(e, op);
    else
        post_recv(e, op);
    tutti__p2p_sweep(e);
}

/* ---- arrivals ------------------------------------------------------------------------------- */

/* consume_rest disposes of a message whose receive failed on its length: an eager payload is
 * drained into an engine buffer, an RTS refused. */
static void consume_rest(tutti__p2p_t *e, int p, const tutti__p2p_env_t *env)
{
    if (env->kind == TUTTI__P2P_RTS) {
        tutti__p2p_ctrl_send(e, p, TUTTI__P2P_CTS, TUTTI__P2P_REFUSED, env->seq);
        return;
    }
    if (env->len <= TUTTI__P2P_INLINE)
        return;
    tutti__p2p_unexp_t *u = calloc(1, sizeof *u);
    char *data = malloc(env->len);
    if (u == NULL || data == NULL) {
        free(u);
        free(data);
        tutti__p2p_break(e, p, TUTTI_ERR_NO_MEMORY,
                         "out of memory for the %llu bytes of a message from rank %d",
                         (unsigned long long)env->len, p);
        return;
    }
    *u = (tutti__p2p_unexp_t){.peer = p, .kind = env->kind, .tag = env->tag, .len = env->len,
                              .seq = env->seq, .data = data, .matched = true};
    u->arriving = post_req(e, p, &u->req, TUTTI__REQ_RECV, data, env->len);
    e->nux_arriving += u->arriving;
    if (!u->arriving) {
        free(data);
        free(u);
        return;
    }
    u->prev = e->ux_last;
    if (e->ux_last)
        e->ux_last->next = u;
    else
        e->ux = u;
    e->ux_last = u;
}

/* arrive_msg handles an EAGER or RTS envelope from p: to the earliest posted receive that it
 * matches, else into the unexpected list. */
static void arrive_msg(tutti__p2p_t *e, int p, const tutti__p2p_env_t *env)
{
    tutti__p2p_op_t *op = e->posted;
    while (op && !((op->peer == p || op->peer == TUTTI_ANY_SOURCE) && op->tag == env->tag))
        op = op->pnext;
    if (op != NULL) {
        tutti__p2p_unpost(e, op);
        bind_source(e, op, p);
        matched(e, p);
        if (env->len != op->len) {
            mismatch(e, op, p, env->tag, env->len);
            consume_rest(e, p, env);
        } else if (env->kind == TUTTI__P2P_RTS) {
            op->mseq = env->seq;
            send_cts(e, op);
        } else if (env->len <= TUTTI__P2P_INLINE) {
            if (env->len > 0)
                memcpy(op->buf, env->data, env->len);
            tutti__p2p_complete(e, op, TUTTI_OK);
        } else {
            op->state = R_PAYLOAD;
            fly(e, op);
            post_op_req(e, op, 2, TUTTI__REQ_RECV, op->buf, op->len);
        }
        return;
    }
    tutti__p2p_unexp_t *u = calloc(1, sizeof *u);
    char *data = env->kind == TUTTI__P2P_EAGER && env->len > 0 ? malloc(env->len) : NULL;
    if (u == NULL || (data == NULL && env->kind == TUTTI__P2P_EAGER && env->len > 0)) {
        free(u);
        free(data);
        tutti__p2p_break(e, p, TUTTI_ERR_NO_MEMORY,
                         "out of memory for a message of %llu bytes from rank %d that no receive "
                         "has matched yet",
                         (unsigned long long)env->len, p);
        return;
    }
    *u = (tutti__p2p_unexp_t){.peer = p, .kind = env->kind, .tag = env->tag, .len = env->len,
                              .seq = env->seq, .data = data};
    if (data != NULL && env->len <= TUTTI__P2P_INLINE) {
        memcpy(data, env->data, env->len);
    } else if (data != NULL) {
        u->arriving = post_req(e, p, &u->req, TUTTI__REQ_RECV, data, env->len);
        e->nux_arriving += u->arriving;
        if (!u->arriving) {
            free(data);
            free(u);
            return;
        }
    }
    u->prev = e->ux_last;
    if (e->ux_last)
        e->ux_last->next = u;
    else
        e->ux = u;
    e->ux_last = u;
}

static tutti__p2p_op_t *find_wait(tutti__p2p_peer_t *q, int kind, int state, uint64_t seq)
{
    for (tutti__p2p_op_t *op = q->wait[kind]; op; op = op->wnext)
        if (op->state == state && op->mseq == seq)
            return op;
    return NULL;
}

static void arrive_cts(tutti__p2p_t *e, int p, const tutti__p2p_env_t *env)
{
    tutti__p2p_peer_t *q = &e->peers[p];
    tutti__p2p_op_t *op = find_wait(q, TUTTI__P2P_SEND, S_RTS, env->seq);
    if (op == NULL) {
        for (int i = 0; i < q->nwithdrawn; i++)
            if (q->withdrawn[i] == env->seq) { /* that send failed here: say so, in its place */
                q->withdrawn[i] = q->withdrawn[--q->nwithdrawn];
                if (!(env->flags & TUTTI__P2P_REFUSED))
                    tutti__p2p_ctrl_send(e, p, TUTTI__P2P_DATA, TUTTI__P2P_WITHDRAWN, env->seq);
                return;
            }
        tutti__p2p_break(e, p, TUTTI_ERR_TRANSPORT,
                         "rank %d cleared message %llu for sending, which this rank never "
                         "announced to it: the two streams are out of step, so nothing more is "
                         "exchanged with rank %d",
                         p, (unsigned long long)env->seq, p);
        return;
    }
    tutti__p2p_unwait(e, op);
    op->state = S_DATA;
    fly(e, op);
    if (env->flags & TUTTI__P2P_REFUSED) /* the receive failed on the length: nothing to send */
        return;
    env_init(&op->env[1], TUTTI__P2P_DATA, 0, 0, op->len, op->mseq);
    seal(e, &op->env[1], p);
    if (post_op_req(e, op, 1, TUTTI__REQ_SEND, &op->env[1], sizeof op->env[1]))
        post_op_req(e, op, 2, TUTTI__REQ_SEND, op->buf, op->len);
}

/* repost: the send that receive op matched (and cleared) was withdrawn by its sender p before
 * its data went (it failed or timed out there). A withdrawn send never existed (MPI's cancel),
 * so op waits again, in its place among the receives posted, for the next message that matches
 * it (a retry of that send included) until its own deadline. A message that a receive posted
 * after op took meanwhile stays taken. */
static void repost(tutti__p2p_t *e, tutti__p2p_op_t *op, int p)
{
    /* The sender has its CTS (it answered), so a cancel finds the send done; one that does not
     * leaves the request in the transport's hands, not to be reused: the old failure, then. */
    if (op->posted[0] && !tutti__p2p_req_done(&op->req[0]))
        tutti__p2p_cancel(e, p, &op->req[0]);
    if (op->posted[0] && (!tutti__p2p_req_done(&op->req[0]) ||
                          op->req[0].status != TUTTI_OK || e->peers[p].broken)) {
        op->state = 0;
        tutti__p2p_fail(e, op, TUTTI_ERR_PEER_FAILED,
                        "rank %d withdrew its send of this message (it failed or timed out "
                        "there) after this receive had matched it",
                        p);
        return;
    }
    op->posted[0] = false;
    op->mseq = 0;
    op->state = 0;
    op->source = -1;
    if (op->peer == TUTTI_ANY_SOURCE) { /* bound to p only by the match */
        e->peers[p].nops--;
        op->mpeer = -1;
    }
    TUTTI__LOG(TUTTI__LOG_DEBUG, "rank %d: rank %d withdrew the send that a receive (tag %d) "
               "had matched: the receive waits for the next message", e->rank, p, op->tag);
    if (take_waiting(e, op))
        return;
    enlist(e, op);
    if (op->peer == TUTTI_ANY_SOURCE && op->gen < e->any_fail_gen)
        e->sweep = true; /* a peer failed while it was matched: it fails as one posted before */
}

static void arrive_data(tutti__p2p_t *e, int p, const tutti__p2p_env_t *env)
{
    tutti__p2p_op_t *op = find_wait(&e->peers[p], TUTTI__P2P_RECV, R_CTS, env->seq);
    if (op == NULL || (!(env->flags & TUTTI__P2P_WITHDRAWN) && env->len != op->len)) {
        tutti__p2p_break(e, p, TUTTI_ERR_TRANSPORT,
                         "rank %d sent %llu bytes of data for message %llu, which no receive here "
                         "waits for with that length: the streams are out of step, so nothing "
                         "more is exchanged with rank %d",
                         p, (unsigned long long)env->len, (unsigned long long)env->seq, p);
        return;
    }
    tutti__p2p_unwait(e, op);
    if (env->flags & TUTTI__P2P_WITHDRAWN) {
        repost(e, op, p);
        return;
    }
    op->state = R_PAYLOAD;
    fly(e, op);
    post_op_req(e, op, 2, TUTTI__REQ_RECV, op->buf, op->len);
}

void tutti__p2p_arrive(tutti__p2p_t *e, int p)
{
    tutti__p2p_peer_t *q = &e->peers[p];
    tutti__p2p_env_t env = q->env_in;
    q->env_posted = false;
    q->nrx++;
    e->look = true;
    char why[400];
    if (tutti__p2p_env_check(&env, p, e->rank, why, sizeof why) < 0) {
        tutti__p2p_break(e, p, TUTTI_ERR_TRANSPORT,
                         "rank %d sent a point-to-point envelope that cannot be trusted (%s), so "
                         "nothing more is taken from it",
                         p, why);
        return;
    }
    /* p's count of this rank's messages that it matched: never more than were sent (an older
     * count, come late, says nothing new). */
    if (env.ack > q->tx_seq) {
        tutti__p2p_break(e, p, TUTTI_ERR_TRANSPORT,
                         "rank %d said it matched %llu of this rank's messages, of %llu sent: "
                         "the streams are out of step, so nothing more is exchanged with rank %d",
                         p, (unsigned long long)env.ack, (unsigned long long)q->tx_seq, p);
        return;
    }
    if (env.ack > q->acked)
        q->acked = env.ack;
    switch (env.kind) {
    case TUTTI__P2P_CREDIT: break;
    case TUTTI__P2P_EAGER:
    case TUTTI__P2P_RTS:
        if (env.seq <= q->rx_seq) {
            tutti__p2p_break(e, p, TUTTI_ERR_TRANSPORT,
                             "rank %d's message number %llu came after number %llu: its stream "
                             "is out of step, so nothing more is taken from it",
                             p, (unsigned long long)env.seq, (unsigned long long)q->rx_seq);
            return;
        }
        q->rx_seq = env.seq;
        arrive_msg(e, p, &env);
        break;
    case TUTTI__P2P_CTS: arrive_cts(e, p, &env); break;
    default: arrive_data(e, p, &env); break;
    }
    tutti__p2p_listen(e, p);
}
