/* prims.c: the primitives algorithms run on, over the network context only: point-to-point
 * through the transport that serves a peer, the wait loop (deadline, abort and dead-peer checks,
 * backoff), the window barrier, flagged lines and scratch. A failing primitive writes its text
 * and returns its status; the executor decides what that means for the communicator. */
#include <stdio.h>
#include <stdlib.h>

#include "algos.h"
#include "patterns/chunk.h"

/* How often a waiting rank asks the liveness mesh whether a peer died: often enough that a
 * death becomes an error well within a second, rarely enough to cost nothing. */
#define LIVE_CHECK_PERIOD 0.05

/* describe writes "allreduce #12 (ring, 4096 bytes of fp32)" for error texts. */
static int describe(const tutti__coll_t *c, char *buf, size_t cap)
{
    return snprintf(buf, cap, "%s #%llu (%s, %zu bytes of %s)", c->name,
                    (unsigned long long)c->seq, c->algo ? c->algo->name : "-",
                    c->count * c->esize, tutti_dtype_name(c->dtype));
}

tutti_status_t tutti__coll_fail(tutti__coll_t *c, tutti_status_t st, const char *fmt, ...)
{
    char what[256];
    describe(c, what, sizeof what);
    char detail[TUTTI__ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    snprintf(c->err, TUTTI__ERRLEN, "rank %d: %s: %s", c->net->rank, what, detail);
    return st;
}

/* the many failures of this file, by a short name */
#define fail tutti__coll_fail

tutti_status_t tutti__decline(tutti__coll_t *c, tutti_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, TUTTI__ERRLEN, fmt, ap);
    va_end(ap);
    c->declined = true;
    return st;
}

/*
 * abandon withdraws everything the failing call c still has posted, since all of it lives on
 * its algorithm's stack, which is about to go: first reqs[0..n) (the failing wait's own; every
 * one was posted), then whatever else c's channel holds (an algorithm that pipelines keeps
 * requests in flight outside the wait). Only c's slice posts on c's channel, so nothing of
 * another call is touched. A stream a cancel breaks does not matter here: the executor fails
 * the communicator for any error of a run.
 */
static void abandon(tutti__coll_t *c, tutti__req_t *reqs, int n)
{
    for (int i = 0; i < n; i++) {
        tutti__transport_t *tp = c->net->links.peer_tp[reqs[i].peer];
        if (!__atomic_load_n(&reqs[i].done, __ATOMIC_ACQUIRE) && tp != NULL)
            tp->ops->cancel(tp, &reqs[i]);
    }
    tutti__transport_t *tps[2] = {c->net->links.shm, c->net->links.ofi};
    for (int i = 0; i < 2; i++)
        if (tps[i] != NULL)
            tps[i]->ops->cancel_chan(tps[i], TUTTI__CHAN_COLL + c->slice);
}

/* global maps member index i of c's group to its communicator rank. */
static inline int global(const tutti__coll_t *c, int i) { return c->group ? c->group[i] : i; }

static tutti_status_t check_time(tutti__coll_t *c, const int *missing, int nmissing);

static tutti_status_t post(tutti__coll_t *c, int kind, int member, const void *buf, size_t bytes,
                           tutti__req_t *req)
{
    /* A rank that never has to wait sees a peer's failure only when it waits: a reduce's root on
     * a message path, whose leaves run calls ahead of it (up to TUTTI__FLOW_EVERY a level of
     * the tree: algos.h), works through that backlog first. Every 1024 posts it looks at the
     * peers as a wait would (notices, silence, abort; a dead rank fails only a wait that needs
     * it). */
    if (__builtin_expect((++c->net->slices[c->slice].posts & 1023u) == 0, 0)) {
        tutti_status_t st = check_time(c, NULL, 0);
        if (st < 0) {
            abandon(c, NULL, 0);
            return st;
        }
    }
    const int peer = global(c, member);
    tutti__transport_t *tp = c->net->links.peer_tp[peer];
    memset(req, 0, offsetof(tutti__req_t, priv));
    req->kind = kind;
    req->chan = TUTTI__CHAN_COLL + c->slice;
    /* The transports compare it: a message of another call fails. */
    req->tag = (uint32_t)c->fp ^ c->net->tag_xor;
    req->peer = peer;
    req->buf = (char *)buf;
    req->len = bytes;
    if (tp == NULL)
        return fail(c, TUTTI_ERR_INTERNAL, "no transport reaches rank %d", peer);
    tutti_status_t st = tp->ops->post(tp, req);
    if (st < 0)
        abandon(c, NULL, 0);
    if (st < 0)
        return fail(c, st, "%s could not post a %s of %zu bytes %s rank %d: %s", tp->ops->name,
                    kind == TUTTI__REQ_SEND ? "send" : "receive", bytes,
                    kind == TUTTI__REQ_SEND ? "to" : "from", peer, TUTTI__TP_ERR(tp));
    return TUTTI_OK;
}

bool tutti__flow_edge(const tutti__coll_t *c, int member)
{
    const tutti__links_t *l = &c->net->links;
    return c->flow && l->ofi != NULL && l->peer_tp[global(c, member)] == l->ofi;
}

tutti_status_t tutti__isend(tutti__coll_t *c, int peer, const void *buf, size_t bytes,
                            tutti__req_t *req)
{
    return post(c, TUTTI__REQ_SEND, peer, buf, bytes, req);
}

tutti_status_t tutti__irecv(tutti__coll_t *c, int peer, void *buf, size_t bytes, tutti__req_t *req)
{
    return post(c, TUTTI__REQ_RECV, peer, buf, bytes, req);
}

static tutti_status_t progress_all(tutti__coll_t *c)
{
    tutti__transport_t *tps[2] = {c->net->links.shm, c->net->links.ofi};
    for (int i = 0; i < 2; i++) {
        if (tps[i] == NULL)
            continue;
        tutti_status_t st = tps[i]->ops->progress(tps[i]);
        if (st < 0)
            return fail(c, st, "%s transport failed: %s", tps[i]->ops->name, TUTTI__TP_ERR(tps[i]));
    }
    return TUTTI_OK;
}

/* name_rank appends "r (pid p)", or "r (pid p, s s)" for s >= 0, to a list of k names so far
 * (up to SILENT_SHOW: the caller counts the rest). */
enum { SILENT_SHOW = 8 };
static void name_rank(char *buf, size_t cap, size_t *len, int k, int r, int pid, double s)
{
    if (k >= SILENT_SHOW || *len >= cap)
        return;
    *len += (size_t)snprintf(buf + *len, cap - *len, s >= 0 ? "%s%d (pid %d, %.1f s)"
                                                            : "%s%d (pid %d)",
                             k ? ", " : "", r, pid, s);
}

/* fail_silent fails c naming every silent peer (first is the lowest). Peers silent on other
 * nodes only may be cut off (a link or their host down, which looks the same from both sides)
 * as well as stopped; a silent peer on this node has stopped or frozen. */
static tutti_status_t __attribute__((noinline, cold))
fail_silent(tutti__coll_t *c, int first, double silent, double limit)
{
    tutti__net_t *net = c->net;
    const int *node_of = net->topo.node_of;
    /* The unresponsive ranks (first, the lowest, then the others past the limit), and as silent
     * too those silent for half of it: peers cut off with them fell silent at the same moment,
     * but their last heartbeats came up to a beat apart, so one may still be short of the limit
     * (a host's link cut named one of its two ranks). */
    int n = 0, na = 0, r = first;
    bool local = false;
    char list[400] = "", also[240] = "";
    size_t len = 0, alen = 0;
    double s = silent;
    for (int q = 0;; q = r + 1) {
        bool more = tutti__live_silent(net->live, limit / 2, q, &r, &s);
        if (q <= first && (!more || r >= first))
            r = first, s = silent; /* its turn, as the caller found it */
        else if (!more)
            break;
        bool past = r == first || s > limit;
        local |= past && (node_of == NULL || node_of[r] == net->topo.node);
        name_rank(past ? list : also, past ? sizeof list : sizeof also, past ? &len : &alen,
                  past ? n++ : na++, r, tutti__live_pid(net->live, r), past ? -1 : s);
    }
    if (n > SILENT_SHOW && len < sizeof list)
        snprintf(list + len, sizeof list - len, " and %d more", n - SILENT_SHOW);
    if (na > SILENT_SHOW && alen < sizeof also)
        snprintf(also + alen, sizeof also - alen, " and %d more", na - SILENT_SHOW);
    char too[300] = "";
    if (na > 0)
        snprintf(too, sizeof too, "; silent too: rank%s %s", na > 1 ? "s" : "", also);
    /* A rank that was itself stopped hears nobody for that long: say so. */
    double self = tutti__live_stalled(net->live);
    char mine[160] = "";
    if (self > 0)
        snprintf(mine, sizeof mine, " (this rank itself did not run for about %.1f s: stopped "
                 "or frozen, which may be why)", self);
    tutti__top(c)->blame = first;
    return fail(c, TUTTI_ERR_PEER_FAILED,
                "rank%s %s %s unresponsive: no heartbeat for %.1f s (limit %.1f s, "
                "TUTTI_UNRESPONSIVE): %s%s%s; the communicator is now failed: destroy it and "
                "create a new one",
                n > 1 ? "s" : "", list, n > 1 ? "are" : "is", silent, limit,
                local ? "stopped (SIGSTOP, a debugger) or frozen"
                      : "unreachable from this node (a link or host down), or stopped (SIGSTOP, "
                        "a debugger) or frozen",
                mine, too);
}

/* check_notices fails c when a peer's communicator failed (its notice came over the liveness
 * mesh). */
static tutti_status_t check_notices(tutti__coll_t *c)
{
    tutti__net_t *net = c->net;
    int r = -1;
    tutti_status_t st;
    uint64_t seq;
    int blame = -1;
    if (__builtin_expect(tutti__live_failed_upto(net->live, UINT64_MAX, &r, &st, &seq, &blame),
                         0)) {
        /* A finder whose call, in the window, differs from this one: this rank found the
         * mismatch too, and names both calls, as it would have had it looked first. */
        tutti_status_t own = st == TUTTI_ERR_MISMATCH ? tutti__win_check_msg(c, r) : TUTTI_OK;
        if (own != TUTTI_OK)
            return own;
        tutti__top(c)->relayed = true; /* this rank's failure only passes r's on */
        tutti__top(c)->blame = blame;  /* and the rank r named, for those it tells */
        char mine[200];
        tutti__calldesc_t d = tutti__sig_desc(c);
        tutti__sig_describe(mine, sizeof mine, &d);
        char with[96] = ""; /* the other rank of the pair, or the rank r found dead or silent */
        if (blame >= 0 && blame != r && st == TUTTI_ERR_MISMATCH)
            snprintf(with, sizeof with, " with rank %d", blame);
        else
            tutti__blame_note(with, sizeof with, blame, r, net->rank);
        if (st == TUTTI_ERR_MISMATCH)
            return fail(c, TUTTI_ERR_MISMATCH,
                        "rank %d found mismatched collectives%s at its call #%llu (its error "
                        "names both calls) while rank %d posted %s; the communicator is now "
                        "failed: destroy it and create a new one",
                        r, with, (unsigned long long)seq, net->rank, mine);
        return fail(c, TUTTI_ERR_PEER_FAILED,
                    "rank %d's communicator failed (%s%s) in its call #%llu while this rank "
                    "waited in %s; the communicator is now failed: destroy it and create a new "
                    "one",
                    r, tutti_strerror(st), with, (unsigned long long)seq, mine);
    }
    return TUTTI_OK;
}

/* check_peers fails c when a peer's communicator failed (check_notices) or a peer has sent no
 * heartbeat for too long (stopped or frozen). */
static tutti_status_t check_peers(tutti__coll_t *c)
{
    TUTTI__CHECK(check_notices(c));
    tutti__net_t *net = c->net;
    int r = -1;
    double silent = 0, limit = tutti__net_unresponsive(net);
    if (__builtin_expect(tutti__live_silent(net->live, limit, 0, &r, &silent), 0)) {
        /* Read every connection before blaming anyone: a rank that was itself stopped finds
         * its peers' heartbeats, notices and goodbyes waiting there, and another thread's poll
         * may have been the last look (a probe's resumed rank named its healthy peers). */
        int dead = -1;
        (void)tutti__live_check_now(net->live, &dead);
        TUTTI__CHECK(check_notices(c));
        if (tutti__live_silent(net->live, limit, 0, &r, &silent))
            return fail_silent(c, r, silent, limit);
    }
    return TUTTI_OK;
}

/* How long a wait that still needs a dead rank's data gives it to arrive. */
#define DEAD_GRACE_S 0.25

/*
 * dead_needed returns the rank, found dead (its connections closed without a goodbye), that
 * fails c's wait for missing[0..nmissing), or -1. A program may exit right after its last call
 * returned, without destroying its communicator, with what it sent this rank still in a ring
 * or the endpoint, unread (an alltoall's block over ofi: 1 run in 6 failed "died" on a peer
 * whose call had returned OK): so only a wait that still lacks a dead rank's data fails,
 * DEAD_GRACE_S after a wait of the call first needed it (what had come by then is read in
 * that time: the wait drives progress before each check); a later wait that needs it fails. Each missing rank
 * is asked, not only the lowest dead one (which this wait may not need while it needs another);
 * a list cut short at 64 may hide it: then lowest, the lowest dead rank, counts.
 */
static int dead_needed(tutti__coll_t *c, int lowest, const int *missing, int nmissing, double now)
{
    int found = nmissing >= 64 ? lowest : -1;
    for (int i = 0; i < nmissing && found < 0; i++)
        if (tutti__live_dead(c->net->live, missing[i])) /* communicator ranks, as the mesh's */
            found = missing[i];
    if (found < 0)
        return -1;
    if (c->dead_seen == 0.0)
        c->dead_seen = now;
    return now - c->dead_seen > DEAD_GRACE_S ? found : -1;
}

/* check_time runs the slow checks of a wait: the deadline and the liveness mesh. missing[] are
 * the ranks the wait still needs, for the message. */
static tutti_status_t check_time(tutti__coll_t *c, const int *missing, int nmissing)
{
    tutti__net_t *net = c->net;
    tutti__slice_t *sl = &net->slices[c->slice];
    double now = tutti__now();
    if (__atomic_load_n(net->aborted, __ATOMIC_ACQUIRE))
        return fail(c, TUTTI_ERR_ABORTED, "aborted (tutti_comm_abort or destroy) while waiting");
    if (now >= sl->next_live_check) {
        sl->next_live_check = now + LIVE_CHECK_PERIOD;
        int dead = -1;
        if (tutti__live_check(net->live, &dead) < 0) {
            /* A mismatch names the cause, and so does the notice of a rank whose call failed
             * before it ended (its error found a third rank dead or silent, say): its exit, as
             * a program may exit on any error, is only the consequence. The notice came on the
             * same stream before the end, so it has been read by now. */
            int r;
            tutti_status_t nst;
            uint64_t seq;
            if ((tutti__live_failed(net->live, &r, &nst, &seq) && nst == TUTTI_ERR_MISMATCH) ||
                tutti__live_told(net->live, dead))
                return check_notices(c);
            const int gone = dead_needed(c, dead, missing, nmissing, now);
            if (gone >= 0) {
                tutti__top(c)->blame = gone;
                return fail(c, TUTTI_ERR_PEER_FAILED,
                            "rank %d (pid %d) died or lost its connection; the communicator is "
                            "now failed: destroy it and create a new one",
                            gone, tutti__live_pid(net->live, gone));
            }
        }
        TUTTI__CHECK(check_peers(c));
    }
    /* A peer that destroyed its communicator will never come. Data it sent before it left gets
     * a moment to arrive; then this fails now, not at the deadline. A peer that left before it
     * numbered this call sent nothing for it: that fails at once (a rank that raised between
     * two steps, while its peers wait in the next). */
    for (int i = 0; i < nmissing; i++) {
        const uint64_t posted = tutti__live_left_calls(net->live, missing[i]);
        if (posted <= c->seq) { /* UINT64_MAX while it has not left */
            /* A rank whose call failed leaves too; its notice, read before its goodbye on the
             * same link, says why (a third rank died, say). */
            TUTTI__CHECK(check_notices(c));
            tutti__top(c)->blame = missing[i];
            return fail(c, TUTTI_ERR_PEER_FAILED,
                        "rank %d destroyed its communicator after %llu call(s), without posting "
                        "this one (#%llu): it failed or exited (its own output says why), or it "
                        "finished without this call (every rank must post the same "
                        "collectives, in the same order, before it destroys the communicator)",
                        missing[i], (unsigned long long)posted, (unsigned long long)c->seq);
        }
    }
    for (int i = 0; i < nmissing; i++) {
        if (!tutti__live_left(net->live, missing[i]))
            continue;
        if (c->left_seen == 0.0 || c->left_rank != missing[i]) {
            c->left_seen = now;
            c->left_rank = missing[i];
        } else if (now - c->left_seen > tutti__live_left_grace(net->live, missing[i])) {
            tutti__top(c)->blame = missing[i]; /* this rank's notice names it to the others */
            return fail(c, TUTTI_ERR_PEER_FAILED,
                        "rank %d destroyed its communicator while this rank still waited for it "
                        "here, so it will not join this call: it failed or exited (its own "
                        "output says why), or it finished without this call (every rank must "
                        "post the same collectives, in the same order, before it destroys the "
                        "communicator)",
                        missing[i]);
        }
        break;
    }
    if (c->deadline == 0.0)
        c->deadline = now + tutti__coll_timeout(c);
    if (now < c->deadline)
        return TUTTI_OK;
    /* A rank waited for on several channels is named once. */
    int named[64], nnamed = 0;
    for (int i = 0; i < nmissing && nnamed < (int)(sizeof named / sizeof named[0]); i++) {
        bool seen = false;
        for (int j = 0; j < nnamed && !seen; j++)
            seen = named[j] == missing[i];
        if (!seen)
            named[nnamed++] = missing[i];
    }
    char list[512];
    tutti__format_ranks(list, sizeof list, named, nnamed, nnamed);
    bool left = false;
    for (int i = 0; i < nmissing; i++)
        left |= tutti__live_left(net->live, missing[i]);
    return fail(c, TUTTI_ERR_TIMEOUT,
                "timed out after %g s waiting for rank(s) %s%s; a peer may be stuck, slower "
                "than the timeout, or in a different collective: raise %s if the job is only "
                "slow",
                tutti__coll_timeout(c), list,
                left ? " (some had already destroyed the communicator)" : "",
                tutti__timeout_hint(net, c->timeout_s));
}

/* A wait that steps aside where yielding may not reach the peer still yields this many times
 * first: across scheduling groups a yield does pass the core when the yielding group has run
 * longer than the other (cheaper than a sleep and a wake-up), and the doorbell bounds the rest. */
#define YIELDS_FIRST 8u

/* How long a wait that sleeps on a doorbell sleeps at most before it looks again (a doorbell
 * that no one rings, such as a transport's, costs no more than this). */
#define DOORBELL_SLEEP_S 200e-6
/* ... and once the wait is long (TUTTI__LONG_WAIT_S): a rung doorbell wakes the sleeper at once
 * whatever this is, so only an unrung one's wake-ups, a waiter's whole idle cost, grow. */
#define DOORBELL_LONG_SLEEP_S 1e-3

/*
 * pause_for is one pause of a wait for rank peer (ready(arg) tells whether what it waits for
 * has come). A few spins into a wait, and now and then after, it asks whether the thread of
 * peer runs on this core: if so, spinning only keeps it from running, and the wait steps aside
 * from then on (colocate.c may also move one of the two). Stepping aside yields the core, or
 * where yielding cannot reach the peer (net->sleep_waits) sleeps on the peer's doorbell. The
 * naps that stand in for yields beside a busy thread (time.c) sleep on that doorbell too.
 */
typedef struct peer_nap {
    tutti__coll_t *c;
    int peer;
    bool (*ready)(const void *);
    const void *arg;
} peer_nap_t;

static void nap_on_peer(void *p, double timeout_s)
{
    const peer_nap_t *n = p;
    tutti__colo_sleep(n->c, n->peer, n->ready, n->arg, timeout_s);
}

static void pause_for(tutti__coll_t *c, tutti__backoff_t *b, unsigned it, int peer,
                      bool (*ready)(const void *), const void *arg)
{
    if (tutti__backoff_spinning(b)) {
        if ((it & 31u) == 4u && tutti__colo_shared(c, peer))
            tutti__backoff_step_aside(b);
        else if (b->iter < TUTTI__SPIN_ITERS) {
            tutti__backoff_pause(b); /* a spin: no nap to set up */
            return;
        }
    }
    if (c->net->sleep_waits && b->oversubscribed && b->iter >= YIELDS_FIRST) {
        b->iter++;
        bool long_wait = tutti__backoff_waited(b) >= TUTTI__LONG_WAIT_S && !b->keep_polling;
        tutti__colo_sleep(c, peer, ready, arg,
                          long_wait ? DOORBELL_LONG_SLEEP_S : DOORBELL_SLEEP_S);
        return;
    }
    /* A nap beside a busy thread (time.c) ends as soon as the peer rings. */
    peer_nap_t n = {c, peer, ready, arg};
    tutti__backoff_pause_on(b, nap_on_peer, &n);
}

typedef struct reqs_ready {
    tutti__coll_t *c;
    tutti__req_t *reqs;
    int n;
    int peer; /* the rank whose doorbell the waiter sleeps on */
} reqs_ready_t;

/* peer_reqs_done is the sleep's condition in a message wait: every request with the peer whose
 * doorbell the waiter sleeps on is done (as in a barrier, that peer's doorbell says nothing of
 * the others'), or progress failed. */
static bool peer_reqs_done(const void *p)
{
    const reqs_ready_t *q = p;
    if (progress_all(q->c) < 0)
        return true; /* the wait loop reports it */
    for (int i = 0; i < q->n; i++)
        if (q->reqs[i].peer == q->peer && !__atomic_load_n(&q->reqs[i].done, __ATOMIC_ACQUIRE))
            return false;
    return true;
}

/* peer_died tells whether a peer whose transport connection broke died, or said first that its
 * communicator had failed (*notice): the liveness mesh knows for sure, and its connection closes
 * with the transport's, so it gets a moment (on this failure path only) to say so; the error
 * then names the cause, not only the symptom (a peer that failed tears its endpoints down, and
 * a rank far ahead of it, a leaf of a reduce, sees the broken connection before the notice). */
static bool __attribute__((cold)) peer_died(tutti__coll_t *c, int peer, bool *notice)
{
    const double until = tutti__now() + 0.5;
    int dead = -1, r;
    tutti_status_t st;
    uint64_t seq;
    *notice = false;
    for (;;) {
        (void)tutti__live_check(c->net->live, &dead);
        if (tutti__live_failed(c->net->live, &r, &st, &seq)) {
            *notice = true;
            return false;
        }
        if (tutti__live_dead(c->net->live, peer))
            return true;
        if (tutti__now() >= until)
            return false;
        tutti__sleep_us(10000);
    }
}

tutti_status_t tutti__resumed_check(tutti__coll_t *c)
{
    tutti__net_t *net = c->net;
    double gap = tutti__live_stalled(net->live);
    if (__builtin_expect(gap == 0, 1))
        return TUTTI_OK;
    int dead = -1, r = -1;
    tutti_status_t st;
    uint64_t seq;
    (void)tutti__live_check_now(net->live, &dead);
    if (!tutti__live_failed_upto(net->live, c->seq, &r, &st, &seq, NULL))
        return TUTTI_OK;
    tutti__top(c)->relayed = true;
    return fail(c, TUTTI_ERR_PEER_FAILED,
                "this rank did not run for about %.1f s (stopped: SIGSTOP, a debugger, or "
                "frozen), and meanwhile rank %d's communicator failed (%s) in its call #%llu, so "
                "this call is not reported complete; the communicator is now failed: destroy it "
                "and create a new one",
                gap, r, tutti_strerror(st), (unsigned long long)seq);
}

/* peer_pending tells whether a request with peer is still not done. */
static bool peer_pending(const tutti__req_t *reqs, int n, int peer)
{
    for (int i = 0; i < n; i++)
        if (reqs[i].peer == peer && !__atomic_load_n(&reqs[i].done, __ATOMIC_ACQUIRE))
            return true;
    return false;
}

/* How long a missing peer must stay in a later window call, while this wait still lacks its
 * data, before the calls are taken to differ. */
#define AHEAD_GRACE_S 1.0

/* How long a message wait goes before it looks whether a missing peer is in a window call. */
#define MSG_VS_WINDOW_S 0.2

/* How long a message wait goes before it asks the peers it still lacks which call they posted
 * with this number, and how often it asks again while it waits. */
#define ASK_AFTER_S 0.5
#define ASK_EVERY_S 1.0

/*
 * ask_missing compares c with what the peers in missing[0..nm) said they posted as c's number
 * (their answers over the liveness mesh), and asks them (again) once c->next_ask has passed. A
 * receive that never meets a message compares nothing: two ranks that posted different calls
 * with one number (another root, a broadcast against a reduce) may each wait for the other's
 * message, and neither sends. A peer that answers with another call fails this one with
 * TUTTI_ERR_MISMATCH naming both (the executor then tells every peer); a peer that has not
 * numbered it yet is only late, and one that numbered the same call is in it (waiting for
 * another rank, say): this wait goes on.
 */
static tutti_status_t __attribute__((noinline, cold))
ask_missing(tutti__coll_t *c, const int *missing, int nm)
{
    tutti__liveness_t *live = c->net->live;
    /* The whole call's: a part may run with a root of its own (the tree allreduce's reduce to
     * rank 0), which the ring and the peer's answer do not know. */
    tutti__coll_t *top = tutti__top(c);
    const tutti__calldesc_t md = tutti__sig_desc(top);
    for (int i = 0; c->next_ask != 0.0 && i < nm; i++) { /* answers come only once asked */
        uint64_t count, info;
        if (tutti__live_answer(live, missing[i], md.seq, &count, &info) == TUTTI__LIVE_POSTED &&
            (count != md.count || info != md.info)) {
            const tutti__calldesc_t d = {md.seq, count, info, 0};
            return tutti__sig_mismatch(top, missing[i], &d,
                                       "(as it answered this rank, which waited for its "
                                       "message, over the liveness mesh)");
        }
    }
    /* c's, not this wait's: a call of many steps waits many times, and asked at each. */
    const double now = tutti__now();
    if (now < c->next_ask)
        return TUTTI_OK;
    c->next_ask = now + ASK_EVERY_S;
    for (int i = 0; i < nm; i++) {
        bool asked = false;
        for (int j = 0; j < i && !asked; j++)
            asked = missing[j] == missing[i];
        if (!asked)
            tutti__live_ask(live, missing[i], md.seq);
    }
    return TUTTI_OK;
}

static tutti_status_t wait_reqs(tutti__coll_t *c, tutti__req_t *reqs, int n)
{
    tutti__backoff_t b;
    tutti__backoff_init(&b, c->net->oversubscribed);
    if (c->net->links.ofi != NULL)
        tutti__backoff_keep_polling(&b); /* its pieces count as moved only once whole */
    reqs_ready_t rr = {c, reqs, n, -1};
    double ahead_since = 0.0; /* when a missing peer was first seen in a later call */
    for (unsigned it = 0;; it++) {
        TUTTI__CHECK(progress_all(c));
        tutti__colo_ring(c); /* what progress moved may be what a sleeping peer waits for */
        int pending = 0, first = -1;
        for (int i = 0; i < n; i++) {
            if (!__atomic_load_n(&reqs[i].done, __ATOMIC_ACQUIRE)) {
                if (pending++ == 0)
                    first = reqs[i].peer;
                continue;
            }
            if (reqs[i].status < 0) {
                tutti__transport_t *tp = c->net->links.peer_tp[reqs[i].peer];
                if (reqs[i].status == TUTTI_ERR_MISMATCH)
                    return tutti__sig_mismatch(c, reqs[i].peer, NULL, TUTTI__TP_ERR(tp));
                bool notice;
                if (peer_died(c, reqs[i].peer, &notice)) {
                    tutti__top(c)->blame = reqs[i].peer;
                    return fail(c, TUTTI_ERR_PEER_FAILED,
                                "rank %d (pid %d) died or lost its connection (the %s %s it "
                                "failed: %s); the communicator is now failed: destroy it and "
                                "create a new one",
                                reqs[i].peer, tutti__live_pid(c->net->live, reqs[i].peer),
                                tp->ops->name,
                                reqs[i].kind == TUTTI__REQ_SEND ? "send to" : "receive from",
                                TUTTI__TP_ERR(tp));
                }
                if (notice)
                    return check_peers(c);
                return fail(c, reqs[i].status,
                            "%s %s rank %d failed: %s; the communicator is now failed: destroy "
                            "it and create a new one",
                            tp->ops->name,
                            reqs[i].kind == TUTTI__REQ_SEND ? "send to" : "receive from",
                            reqs[i].peer, TUTTI__TP_ERR(tp));
            }
        }
        if (pending == 0)
            return TUTTI_OK;
        /* The clock is cheap but not free: read it every 64 spins, and on every round once the
         * backoff has started yielding or sleeping. */
        if ((it & 63u) == 63u || !tutti__backoff_spinning(&b)) {
            int missing[64], nm = 0;
            for (int i = 0; i < n && nm < 64; i++)
                if (!__atomic_load_n(&reqs[i].done, __ATOMIC_ACQUIRE))
                    missing[nm++] = reqs[i].peer;
            TUTTI__CHECK(check_time(c, missing, nm));
            const double waited = tutti__now() - (c->deadline - tutti__coll_timeout(c));
            /* After a while, a peer that never sends may have posted another call with this
             * number: ask it. */
            if (waited > ASK_AFTER_S)
                TUTTI__CHECK(ask_missing(c, missing, nm));
            /* After a while, a peer that never sends may be waiting in a window call of this
             * number: another algorithm, a mismatch that neither side would see otherwise
             * before the timeout. */
            if (waited > MSG_VS_WINDOW_S)
                for (int i = 0; i < nm; i++) {
                    TUTTI__CHECK(tutti__win_check_msg(c, missing[i]));
                    tutti__calldesc_t d;
                    if (tutti__win_peer_ahead(c, missing[i], &d)) {
                        /* What it sent before it went on is in the rings, but another thread
                         * of this rank may hold the lane (progress only tries its lock), or
                         * be descheduled holding it: a while, not one look. */
                        if (ahead_since == 0.0)
                            ahead_since = tutti__now();
                        else if (tutti__now() - ahead_since > AHEAD_GRACE_S &&
                                 peer_pending(reqs, n, missing[i]))
                            return tutti__sig_mismatch(
                                c, missing[i], &d,
                                "(it went on to that call without sending what this rank's "
                                "call waits for from it: was its call empty, 0 elements?)");
                    }
                }
        }
        rr.peer = first;
        pause_for(c, &b, it, first, peer_reqs_done, &rr);
    }
}

static tutti_status_t waitall(tutti__coll_t *c, tutti__req_t *reqs, int n)
{
    tutti_status_t st = wait_reqs(c, reqs, n);
    if (__builtin_expect(st < 0, 0))
        abandon(c, reqs, n);
    return st;
}

tutti_status_t tutti__waitall(tutti__coll_t *c, tutti__req_t *reqs, int n)
{
    double t0 = tutti__phase_begin(c);
    tutti_status_t st = waitall(c, reqs, n);
    tutti__phase_end(c, "wait", n == 1 ? reqs[0].peer : -1, 0, t0);
    return st;
}

/* The phases of a trace name the peer by its rank in the communicator, the way peer_tp does. */
tutti_status_t tutti__send(tutti__coll_t *c, int peer, const void *buf, size_t bytes)
{
    double t0 = tutti__phase_begin(c);
    tutti__req_t req;
    TUTTI__CHECK(tutti__isend(c, peer, buf, bytes, &req));
    tutti_status_t st = waitall(c, &req, 1);
    tutti__phase_end(c, "send", global(c, peer), bytes, t0);
    return st;
}

tutti_status_t tutti__recv(tutti__coll_t *c, int peer, void *buf, size_t bytes)
{
    double t0 = tutti__phase_begin(c);
    tutti__req_t req;
    TUTTI__CHECK(tutti__irecv(c, peer, buf, bytes, &req));
    tutti_status_t st = waitall(c, &req, 1);
    tutti__phase_end(c, "recv", global(c, peer), bytes, t0);
    return st;
}

tutti_status_t tutti__sendrecv(tutti__coll_t *c, int speer, const void *sbuf, size_t sbytes,
                               int rpeer, void *rbuf, size_t rbytes)
{
    double t0 = tutti__phase_begin(c);
    tutti__req_t req[2];
    TUTTI__CHECK(tutti__irecv(c, rpeer, rbuf, rbytes, &req[0]));
    TUTTI__CHECK(tutti__isend(c, speer, sbuf, sbytes, &req[1]));
    tutti_status_t st = waitall(c, req, 2);
    /* One event: the send's peer and bytes (the receive's come from the rank before). */
    tutti__phase_end(c, "sendrecv", global(c, speer), sbytes + rbytes, t0);
    return st;
}

tutti_status_t tutti__direct_slots(tutti__coll_t *c, size_t head, const char *alt,
                                   tutti__window_t **w, size_t *slot)
{
    const int n = c->size;
    tutti__window_t *x = tutti__coll_window(c);
    size_t s = x && x->region_size > head ? (x->region_size - head) / (size_t)n : 0;
    /* The n slots a rank fills per round stay within its share of the cache (net.h). */
    const size_t cap = c->net->round_bytes / (size_t)n;
    if (cap >= 64 && cap >= c->esize && s > cap)
        s = cap;
    s = s >= 64 ? s & ~(size_t)63 : s;
    *w = x;
    *slot = s;
    if (x == NULL || x->nranks != n || s / c->esize == 0)
        return tutti__decline(c, TUTTI_ERR_NOT_SUPPORTED,
                              "%s (direct): the shm window (%zu bytes per rank, %zu of them for "
                              "this algorithm's headers) cannot hold one element per rank on "
                              "rank %d; raise TUTTI_SHM_WINDOW or use the %s algorithm",
                              c->name, x ? x->region_size : 0, head, c->rank, alt);
    return TUTTI_OK;
}

typedef struct epoch_ready {
    const tutti__window_t *w;
    uint64_t e;
    int r; /* peer_arrived: the window rank whose doorbell the waiter sleeps on */
} epoch_ready_t;

/* A barrier's value: the call's number on the window in the high half, its step in the call
 * below. Peers are at most one window call apart, so the difference, read as signed, orders
 * any two values (the 32-bit call number may wrap). */
#define STEP_FAILED ((uint64_t)1 << 31)
static inline bool reached(uint64_t flag, uint64_t e)
{
    return (int64_t)((flag & ~STEP_FAILED) - e) >= 0;
}

/* peer_arrived is the sleep's condition in a barrier: the rank whose doorbell the waiter
 * sleeps on has arrived. Not "all have": that rank rings only as it arrives, so a waiter still
 * asleep on it when it was not the last would sleep out its whole timeout, however soon the
 * others came (each rings its own doorbell, not that one). */
static bool peer_arrived(const void *p)
{
    const epoch_ready_t *q = p;
    return reached(__atomic_load_n(q->w->flags[q->r], __ATOMIC_ACQUIRE), q->e);
}

static bool all_arrived(const void *p)
{
    const epoch_ready_t *q = p;
    for (int r = 0; r < q->w->nranks; r++)
        if (!reached(__atomic_load_n(q->w->flags[r], __ATOMIC_ACQUIRE), q->e))
            return false;
    return true;
}

/* barrier is tutti__win_barrier; failed marks this rank's step with STEP_FAILED (its single-copy
 * reads failed), and *failed_rank (when not NULL) is then the lowest rank whose step at this
 * barrier carried it, or -1. */
static tutti_status_t barrier(tutti__coll_t *c, bool failed, int *failed_rank)
{
    tutti__window_t *w = tutti__coll_window(c);
    tutti__win_begin(c, w);
    if (__builtin_expect(c->bstep + 1 >= STEP_FAILED, 0))
        return fail(c, TUTTI_ERR_NOT_SUPPORTED, "more than 2^31 window barriers in one call: "
                    "raise TUTTI_SHM_WINDOW");
    const uint64_t e = (c->wcall << 32) | ++c->bstep;
    __atomic_store_n(w->flags[c->rank], e | (failed ? STEP_FAILED : 0), __ATOMIC_RELEASE);
    tutti__colo_ring(c);
    epoch_ready_t er = {w, e, -1};
    tutti__backoff_t b;
    tutti__backoff_init(&b, c->net->oversubscribed);
    /* A rank that has already moved on to the next barrier (or the next call) still counts as
     * arrived here. */
    for (unsigned it = 0;; it++) {
        int missing[64], nm = 0, first = -1;
        for (int r = 0; r < w->nranks; r++)
            if (!reached(__atomic_load_n(w->flags[r], __ATOMIC_ACQUIRE), e) && nm < 64) {
                if (nm == 0)
                    first = r;
                missing[nm++] = global(c, r);
            }
        if (nm == 0)
            break;
        if ((it & 63u) == 63u || !tutti__backoff_spinning(&b)) {
            tutti_status_t st = TUTTI_OK;
            for (int r = 0; st == TUTTI_OK && r < w->nranks; r++)
                if (r != c->rank)
                    st = tutti__win_check(c, w, r, false);
            for (int r = 0; st == TUTTI_OK && r < w->nranks; r++)
                if (r != c->rank)
                    st = tutti__win_peer_failed(c, w, r, false);
            if (st == TUTTI_OK)
                st = check_time(c, missing, nm);
            /* The last missing peer may have arrived, and failed right after (a single-copy read
             * that it marked failed here), between the scan above and these checks: then the
             * barrier is complete, and what follows it tells why, naming that rank's failure. */
            if (st != TUTTI_OK && !all_arrived(&er))
                return st;
        }
        er.r = first;
        pause_for(c, &b, it, missing[0], peer_arrived, &er);
    }
    /* Every peer has reached this barrier: its call words are on the line just read. The first
     * barrier of a call checks that every peer runs this call, before anyone reads a region. */
    bool failed_peer = false;
    for (int r = 0; r < w->nranks; r++)
        if (r != c->rank) {
            if (!c->verified)
                TUTTI__CHECK(tutti__win_check(c, w, r, true));
            failed_peer |= __atomic_load_n(&w->calls[r][2], __ATOMIC_ACQUIRE) != 0;
        }
    c->verified = true;
    /* (tutti__cma_finish's barrier reports a peer that failed there itself, naming why.) */
    for (int r = 0; __builtin_expect(failed_peer, 0) && failed_rank == NULL && r < w->nranks; r++)
        if (r != c->rank)
            TUTTI__CHECK(tutti__win_peer_failed(c, w, r, true));
    for (int r = 0; failed_rank != NULL && r < w->nranks; r++) {
        uint64_t f = __atomic_load_n(w->flags[r], __ATOMIC_ACQUIRE);
        if ((f & STEP_FAILED) && (f & ~STEP_FAILED) == e) {
            *failed_rank = r;
            break;
        }
    }
    return TUTTI_OK;
}

tutti_status_t tutti__win_barrier(tutti__coll_t *c)
{
    double t0 = tutti__phase_begin(c);
    tutti_status_t st = barrier(c, false, NULL);
    tutti__phase_end(c, "window barrier", -1, 0, t0);
    return st;
}

tutti_status_t tutti__cma_window(tutti__coll_t *c, size_t words, tutti__window_t **w)
{
    TUTTI__CHECK(tutti__direct_window(c, w));
    if (!(*w)->cma || (*w)->pids == NULL)
        return tutti__decline(c, TUTTI_ERR_NOT_SUPPORTED,
                              "%s (cma): single copy (process_vm_readv) is off on this node "
                              "(TUTTI_CMA=off, or ptrace rules forbid it): use the direct "
                              "algorithm",
                              c->name);
    if (words > (*w)->region_size / sizeof(uint64_t))
        return tutti__decline(c, TUTTI_ERR_NOT_SUPPORTED,
                              "%s (cma): the shm window (%zu bytes per rank) cannot hold %zu "
                              "addresses; raise TUTTI_SHM_WINDOW or use the direct algorithm",
                              c->name, (*w)->region_size, words);
    return TUTTI_OK;
}

tutti_status_t tutti__cma_get(tutti__coll_t *c, tutti__window_t *w, int r, uint64_t remote,
                             void *dst, size_t len)
{
    char why[TUTTI__ERRLEN];
    tutti_status_t st = tutti__cma_read(w, r, remote, dst, len, why);
    return st < 0 ? fail(c, st, "%s", why) : TUTTI_OK;
}

tutti_status_t tutti__cma_finish(tutti__coll_t *c, tutti_status_t mine)
{
    int failed = -1;
    TUTTI__CHECK(barrier(c, mine < 0, &failed));
    if (mine < 0)
        return mine; /* its own text is in c->err */
    if (failed >= 0)
        return fail(c, TUTTI_ERR_SYSTEM,
                    "rank %d could not read with process_vm_readv (its error says why); set "
                    "TUTTI_CMA=off to copy through shared memory instead",
                    failed);
    return TUTTI_OK;
}

void tutti__ll_write(char *dst, const void *src, size_t bytes, uint64_t tag)
{
    const char *s = src;
    for (size_t i = 0, done = 0; i < tutti__ll_lines(bytes); i++, done += TUTTI__LL_DATA, dst += 64) {
        if (done < bytes)
            memcpy(dst, s + done, tutti__min_size(TUTTI__LL_DATA, bytes - done));
        __atomic_store_n((uint64_t *)(void *)(dst + TUTTI__LL_DATA), tag, __ATOMIC_RELEASE);
    }
}

typedef struct line_ready {
    const uint64_t *t;
    uint64_t tag;
} line_ready_t;

static bool line_here(const void *p)
{
    const line_ready_t *q = p;
    return __atomic_load_n(q->t, __ATOMIC_ACQUIRE) == q->tag;
}

tutti_status_t tutti__ll_wait(tutti__coll_t *c, int r, size_t off, uint64_t tag)
{
    const uint64_t *t = (const uint64_t *)(const void *)(tutti__coll_window(c)->regions[r] + off +
                                                         TUTTI__LL_DATA);
    if (__atomic_load_n(t, __ATOMIC_ACQUIRE) == tag)
        return TUTTI_OK;
    tutti__colo_ring(c); /* this rank wrote its lines before it waits for others' */
    line_ready_t lr = {t, tag};
    tutti__backoff_t b;
    tutti__backoff_init(&b, c->net->oversubscribed);
    const int g = global(c, r);
    for (unsigned it = 1; __atomic_load_n(t, __ATOMIC_ACQUIRE) != tag; it++) {
        if ((it & 63u) == 0 || !tutti__backoff_spinning(&b)) {
            TUTTI__CHECK(tutti__win_check(c, tutti__coll_window(c), r, false));
            TUTTI__CHECK(tutti__win_peer_failed(c, tutti__coll_window(c), r, false));
            TUTTI__CHECK(check_time(c, &g, 1));
        }
        pause_for(c, &b, it, g, line_here, &lr);
    }
    return TUTTI_OK;
}

tutti_status_t tutti__ll_copy(tutti__coll_t *c, int r, size_t off, void *dst, size_t bytes,
                              uint64_t tag)
{
    const char *src = tutti__coll_window(c)->regions[r] + off;
    char *d = dst;
    /* Line by line: the loads of lines that are already there run ahead while the first one
     * is fetched, so a rank's lines cost about one hand-off together. */
    for (size_t i = 0, done = 0; i < tutti__ll_lines(bytes); i++, done += TUTTI__LL_DATA,
                off += 64, src += 64) {
        TUTTI__CHECK(tutti__ll_wait(c, r, off, tag));
        if (done < bytes)
            memcpy(d + done, src, tutti__min_size(TUTTI__LL_DATA, bytes - done));
    }
    return TUTTI_OK;
}

/* grow returns *buf, grown to at least bytes (page multiples, 64-byte aligned). */
static void *grow(tutti__coll_t *c, void **buf, size_t *size, size_t bytes)
{
    if (bytes <= *size && *buf != NULL)
        return *buf;
    if (bytes == 0)
        bytes = 1; /* callers take NULL for out of memory */
    size_t sz = (bytes + 4095) & ~(size_t)4095;
    void *p = NULL;
    if (posix_memalign(&p, 64, sz) != 0) {
        fail(c, TUTTI_ERR_NO_MEMORY, "out of memory for %zu bytes of scratch", sz);
        return NULL;
    }
    free(*buf);
    *buf = p;
    *size = sz;
    return p;
}

void *tutti__coll_scratch(tutti__coll_t *c, size_t bytes)
{
    tutti__slice_t *sl = &c->net->slices[c->slice];
    return grow(c, &sl->scratch, &sl->scratch_size, bytes);
}

void *tutti__coll_aux(tutti__coll_t *c, size_t bytes)
{
    tutti__slice_t *sl = &c->net->slices[c->slice];
    return grow(c, &sl->aux, &sl->aux_size, bytes);
}
