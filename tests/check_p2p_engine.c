/* check_p2p_engine.c: the point-to-point engine alone, several "ranks" in one process over an
 * in-memory transport (exact-length messages, FIFO per ordered pair, like shm and ofi): MPI
 * matching (tags out of order, non-overtaking, any source), eager, inline and rendezvous
 * messages, length mismatches that leave the stream in step, envelopes a peer should never have
 * sent (each breaks that peer alone, with a clear text, and nothing crashes), a send withdrawn
 * before its receive was posted, deadlines, abort, and an engine that holds no request once
 * nothing needs one. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/algos/p2p.h"
#include "check_main.h"

/* ---- an in-memory transport ----------------------------------------------------------------- */

#define MAXR 4

typedef struct msg {
    struct msg *next;
    tutti__req_t *sreq; /* its send, done only once it is received (sends_wait) */
    size_t len;
    unsigned char bytes[];
} msg_t;

typedef struct wire {
    msg_t *head, *tail;         /* sent, not yet received */
    tutti__req_t *rq, *rq_last; /* receives posted, not yet matched */
} wire_t;

static wire_t wires[MAXR][MAXR]; /* [from][to] */
static int posted_recvs[MAXR];   /* receives each rank has posted and not seen end */

typedef struct fake {
    tutti__transport_t base;
    int rank;
} fake_t;

static fake_t *J_tp(int rank); /* rank's transport, in the job below */

static void done_req(tutti__transport_t *tp, tutti__req_t *r, tutti_status_t st)
{
    const int chan = r->chan;
    r->status = st;
    __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
    tutti__tp_finished(tp, chan);
}

/* A message of hold_len bytes (0: none) is kept off the wire until release_held: one that is
 * late. */
static size_t hold_len;
static msg_t *held;
static int held_from, held_to;

static msg_t *push_bytes(int from, int to, const void *p, size_t len)
{
    msg_t *m = malloc(sizeof *m + len);
    ck_assert(m != NULL);
    m->next = NULL;
    m->sreq = NULL;
    m->len = len;
    if (len)
        memcpy(m->bytes, p, len);
    if (hold_len != 0 && len == hold_len && held == NULL) {
        held = m;
        held_from = from;
        held_to = to;
        return m;
    }
    wire_t *w = &wires[from][to];
    if (w->tail)
        w->tail->next = m;
    else
        w->head = m;
    w->tail = m;
    return m;
}

static void release_held(void)
{
    msg_t *m = held;
    held = NULL;
    hold_len = 0;
    if (m == NULL)
        return;
    wire_t *w = &wires[held_from][held_to];
    if (w->tail)
        w->tail->next = m;
    else
        w->head = m;
    w->tail = m;
}

/* A post of a send (receive) of exactly refuse_send (refuse_recv) bytes is refused, as shm
 * refuses sends after one was withdrawn half written and ofi posts on an endpoint given up. */
static size_t refuse_send, refuse_recv;

/* When set, a send is done only once its message is received, as a send that waits for room in
 * a ring the receiver drains (shm), or for the receiver (ofi): sends stay in flight. */
static bool sends_wait;

static tutti_status_t fake_post(tutti__transport_t *tp, tutti__req_t *r)
{
    fake_t *f = (fake_t *)tp;
    ck_assert_int_eq(r->chan, TUTTI__CHAN_P2P);
    if ((r->kind == TUTTI__REQ_SEND && refuse_send != 0 && r->len == refuse_send) ||
        (r->kind == TUTTI__REQ_RECV && refuse_recv != 0 && r->len == refuse_recv)) {
        snprintf(tp->err, TUTTI__ERRLEN, "fake: post of %zu bytes refused", r->len);
        return TUTTI_ERR_TRANSPORT;
    }
    r->done = 0;
    r->status = TUTTI_OK;
    r->next = NULL;
    if (r->kind == TUTTI__REQ_SEND) {
        msg_t *m = push_bytes(f->rank, r->peer, r->buf, r->len);
        if (sends_wait)
            m->sreq = r;
        else
            done_req(tp, r, TUTTI_OK);
        return TUTTI_OK;
    }
    wire_t *w = &wires[r->peer][f->rank];
    if (w->rq_last)
        w->rq_last->next = r;
    else
        w->rq = r;
    w->rq_last = r;
    posted_recvs[f->rank]++;
    return TUTTI_OK;
}

static tutti_status_t fake_progress(tutti__transport_t *tp)
{
    fake_t *f = (fake_t *)tp;
    for (int from = 0; from < MAXR; from++) {
        wire_t *w = &wires[from][f->rank];
        while (w->head && w->rq) {
            msg_t *m = w->head;
            tutti__req_t *r = w->rq;
            w->head = m->next;
            if (!w->head)
                w->tail = NULL;
            w->rq = r->next;
            if (!w->rq)
                w->rq_last = NULL;
            posted_recvs[f->rank]--;
            if (m->len != r->len) {
                snprintf(tp->err, TUTTI__ERRLEN, "fake: %zu-byte message for a %zu-byte receive",
                         m->len, r->len);
                done_req(tp, r, TUTTI_ERR_INTERNAL);
            } else {
                if (m->len)
                    memcpy(r->buf, m->bytes, m->len);
                done_req(tp, r, TUTTI_OK);
            }
            if (m->sreq != NULL)
                done_req(&J_tp(from)->base, m->sreq, TUTTI_OK);
            free(m);
        }
    }
    return TUTTI_OK;
}

static tutti_status_t fake_progress(tutti__transport_t *tp);

/* When set, a cancel first lets the held message onto the wire and delivers what it can: a
 * transfer that ends while the cancel waits for it (ofi's cancel cannot stop one in flight). */
static bool cancel_delivers;

static tutti_status_t fake_cancel(tutti__transport_t *tp, tutti__req_t *r)
{
    fake_t *f = (fake_t *)tp;
    if (!r->done && cancel_delivers) {
        release_held();
        fake_progress(tp);
    }
    if (r->done)
        return TUTTI_OK;
    if (r->kind == TUTTI__REQ_SEND) { /* sends_wait: its message stays, as one that went */
        for (msg_t *m = wires[f->rank][r->peer].head; m; m = m->next)
            if (m->sreq == r) {
                m->sreq = NULL;
                done_req(tp, r, TUTTI_OK);
                return TUTTI_OK;
            }
    }
    wire_t *w = &wires[r->peer][f->rank];
    tutti__req_t *prev = NULL;
    for (tutti__req_t *q = w->rq; q; prev = q, q = q->next)
        if (q == r) {
            if (prev)
                prev->next = q->next;
            else
                w->rq = q->next;
            if (w->rq_last == q)
                w->rq_last = prev;
            posted_recvs[f->rank]--;
            done_req(tp, r, TUTTI_ERR_ABORTED);
            return TUTTI_OK;
        }
    ck_abort_msg("fake: cancel of a request that is neither done nor posted");
    return TUTTI_ERR_INTERNAL;
}

static tutti_status_t fake_cancel_chan(tutti__transport_t *tp, int chan)
{
    (void)tp, (void)chan;
    return TUTTI_OK;
}

static void fake_destroy(tutti__transport_t *tp) { (void)tp; }

static const tutti__transport_ops_t fake_ops = {
    .name = "fake", .post = fake_post, .progress = fake_progress, .cancel = fake_cancel,
    .cancel_chan = fake_cancel_chan, .destroy = fake_destroy,
};

/* ---- a job of n engines ------------------------------------------------------------------- */

typedef struct job {
    int n;
    fake_t tp[MAXR];
    tutti__transport_t *peer_tp[MAXR][MAXR];
    tutti__net_t net[MAXR];
    int aborted[MAXR];
    tutti__p2p_t *e[MAXR];
} job_t;

static job_t J;

static fake_t *J_tp(int rank) { return &J.tp[rank]; }

static void job_start(int n, double timeout)
{
    memset(&J, 0, sizeof J);
    memset(wires, 0, sizeof wires);
    hold_len = 0;
    held = NULL;
    cancel_delivers = false;
    sends_wait = false;
    refuse_send = refuse_recv = 0;
    memset(posted_recvs, 0, sizeof posted_recvs);
    J.n = n;
    for (int r = 0; r < n; r++) {
        J.tp[r].base.ops = &fake_ops;
        J.tp[r].rank = r;
        for (int p = 0; p < n; p++)
            J.peer_tp[r][p] = p == r ? NULL : &J.tp[r].base;
        J.net[r] = (tutti__net_t){.rank = r, .size = n, .nchan = 2, .timeout_s = timeout,
                                  .aborted = &J.aborted[r]};
        J.net[r].links.peer_tp = J.peer_tp[r];
        J.net[r].links.shm = &J.tp[r].base;
        ck_assert_int_eq(tutti__p2p_create(&J.net[r], &J.e[r]), TUTTI_OK);
    }
}

static void job_end(void)
{
    for (int r = 0; r < J.n; r++) {
        tutti__p2p_fail_all(J.e[r], TUTTI_ERR_ABORTED, "test over");
        tutti__p2p_destroy(J.e[r]);
    }
    for (int a = 0; a < MAXR; a++)
        for (int b = 0; b < MAXR; b++)
            while (wires[a][b].head) {
                msg_t *m = wires[a][b].head;
                wires[a][b].head = m->next;
                free(m);
            }
}

typedef struct top {
    tutti__p2p_op_t op;
    char err[TUTTI__ERRLEN];
    unsigned char *buf;
} top_t;

static top_t *post(int rank, int kind, int peer, int tag, size_t len, unsigned char fill)
{
    top_t *t = calloc(1, sizeof *t);
    t->buf = malloc(len ? len : 1);
    memset(t->buf, kind == TUTTI__P2P_SEND ? fill : 0xee, len ? len : 1);
    t->op.kind = kind;
    t->op.peer = peer;
    t->op.tag = tag;
    t->op.buf = t->buf;
    t->op.len = len;
    t->op.err = t->err;
    t->op.async = true;
    tutti__p2p_post(J.e[rank], &t->op);
    return t;
}

static void top_free(top_t *t)
{
    free(t->buf);
    free(t);
}

/* run progresses every engine until all ops in ts are done (or 45 s pass: a hang guard, under
 * the tcase's 60 s so that its text comes first; under ThreadSanitizer on a slow host
 * test_many_open took over 5 s, ci41). It checks them in order, from the first not yet seen
 * done (a count of every one each round was itself quadratic with thousands of ops). */
static void run(top_t **ts, int nts)
{
    double t0 = tutti__now();
    for (int first = 0;;) {
        for (int r = 0; r < J.n; r++)
            tutti__p2p_progress(J.e[r]);
        while (first < nts && __atomic_load_n(&ts[first]->op.done, __ATOMIC_ACQUIRE))
            first++;
        if (first == nts)
            return;
        if (tutti__now() - t0 >= 45) {
            int open = 0;
            for (int i = 0; i < nts; i++)
                open += !__atomic_load_n(&ts[i]->op.done, __ATOMIC_ACQUIRE);
            ck_abort_msg("%d ops still open after 45 s", open);
        }
    }
}

static void expect_data(const top_t *t, unsigned char fill)
{
    for (size_t i = 0; i < t->op.len; i++)
        ck_assert_msg(t->buf[i] == fill, "byte %zu of %zu is 0x%02x, not 0x%02x", i, t->op.len,
                      t->buf[i], fill);
}

static void expect_idle(void)
{
    for (int r = 0; r < J.n; r++) {
        tutti__p2p_progress(J.e[r]);
        ck_assert_msg(!tutti__p2p_busy(J.e[r]), "engine %d still busy with nothing open", r);
        ck_assert_msg(posted_recvs[r] == 0, "rank %d still has %d receives posted", r,
                      posted_recvs[r]);
    }
}

/* ---- matching --------------------------------------------------------------------------- */

/* Sizes that take every path: inline, eager with a payload, rendezvous. */
static const size_t sizes[] = {0, 8, TUTTI__P2P_INLINE, TUTTI__P2P_INLINE + 1, 1000,
                               TUTTI__P2P_EAGER_MAX, TUTTI__P2P_EAGER_MAX + 1, 200000};
#define NSIZES (int)(sizeof sizes / sizeof sizes[0])

/* Sends with tags 1, 2, 3 received as 3, 1, 2, in both posting orders. */
START_TEST(test_tags_out_of_order)
{
    size_t len = sizes[_i % NSIZES];
    bool recv_first = _i >= NSIZES;
    job_start(2, 30);
    top_t *s[3], *r[3];
    static const int rtags[3] = {3, 1, 2};
    if (recv_first)
        for (int k = 0; k < 3; k++)
            r[k] = post(0, TUTTI__P2P_RECV, 1, rtags[k], len, 0);
    for (int k = 0; k < 3; k++)
        s[k] = post(1, TUTTI__P2P_SEND, 0, k + 1, len, (unsigned char)(0x10 + k + 1));
    if (!recv_first)
        for (int k = 0; k < 3; k++)
            r[k] = post(0, TUTTI__P2P_RECV, 1, rtags[k], len, 0);
    top_t *all[6] = {s[0], s[1], s[2], r[0], r[1], r[2]};
    run(all, 6);
    for (int k = 0; k < 3; k++) {
        ck_assert_msg(s[k]->op.status == TUTTI_OK, "send %d: %s", k, s[k]->err);
        ck_assert_msg(r[k]->op.status == TUTTI_OK, "recv %d: %s", k, r[k]->err);
        ck_assert_int_eq(r[k]->op.source, 1);
        expect_data(r[k], (unsigned char)(0x10 + rtags[k]));
    }
    expect_idle();
    for (int k = 0; k < 6; k++)
        top_free(all[k]);
    job_end();
}
END_TEST

/* Five messages of one tag arrive in the order they were sent, whatever their sizes. */
START_TEST(test_non_overtaking)
{
    job_start(2, 30);
    enum { K = 6 };
    static const size_t lens[K] = {200000, 8, 1000, 0, 40000, 17};
    top_t *s[K], *r[K];
    for (int k = 0; k < K; k++)
        s[k] = post(1, TUTTI__P2P_SEND, 0, 5, lens[k], (unsigned char)(k + 1));
    for (int k = 0; k < K; k++)
        r[k] = post(0, TUTTI__P2P_RECV, 1, 5, lens[k], 0);
    top_t *all[2 * K];
    for (int k = 0; k < K; k++)
        all[k] = s[k], all[K + k] = r[k];
    run(all, 2 * K);
    for (int k = 0; k < K; k++) {
        ck_assert_msg(r[k]->op.status == TUTTI_OK, "recv %d: %s", k, r[k]->err);
        expect_data(r[k], (unsigned char)(k + 1));
    }
    expect_idle();
    for (int k = 0; k < 2 * K; k++)
        top_free(all[k]);
    job_end();
}
END_TEST

/* Ranks 1..3 send two messages each with tag 9 (and one with tag 8 that no receive takes);
 * rank 0 receives six from any source: each message exactly once, the source right, and a
 * rank's two messages in order. */
START_TEST(test_any_source)
{
    job_start(4, 30);
    top_t *s[9], *r[6];
    int ns = 0;
    for (int p = 1; p < 4; p++) {
        s[ns++] = post(p, TUTTI__P2P_SEND, 0, 8, 64, 0x80);
        for (int k = 0; k < 2; k++) /* byte = 16 * rank + k; sizes: eager, rendezvous */
            s[ns++] = post(p, TUTTI__P2P_SEND, 0, 9, k ? 100000 : 100,
                           (unsigned char)(16 * p + k));
    }
    int seen[4][2] = {{0}};
    for (int i = 0; i < 6; i++) {
        size_t len = 0;
        /* post one at a time: the length depends on which message comes */
        r[i] = post(0, TUTTI__P2P_RECV, TUTTI_ANY_SOURCE, 9, 100, 0);
        run(&r[i], 1);
        if (r[i]->op.status != TUTTI_OK) { /* a 100000-byte message met the 100-byte receive */
            ck_assert_int_eq(r[i]->op.status, TUTTI_ERR_INVALID_ARG);
            ck_assert_msg(strstr(r[i]->err, "100000") != NULL, "%s", r[i]->err);
            int src = r[i]->op.source;
            ck_assert_msg(src >= 1 && src <= 3, "source %d", src);
            seen[src][1]++;
            continue;
        }
        (void)len;
        int src = r[i]->op.source;
        ck_assert_msg(src >= 1 && src <= 3, "source %d", src);
        ck_assert_msg(seen[src][1] == 0, "rank %d's second message came before its first", src);
        expect_data(r[i], (unsigned char)(16 * src));
        seen[src][0]++;
    }
    for (int p = 1; p < 4; p++)
        ck_assert_msg(seen[p][0] == 1 && seen[p][1] == 1, "rank %d: %d first, %d second", p,
                      seen[p][0], seen[p][1]);
    run(s, ns);
    for (int i = 0; i < ns; i++)
        ck_assert_msg(s[i]->op.status == TUTTI_OK, "send %d: %s", i, s[i]->err);
    /* the tag-8 messages wait, unexpected, for receives that name them */
    for (int p = 1; p < 4; p++) {
        top_t *t = post(0, TUTTI__P2P_RECV, p, 8, 64, 0);
        run(&t, 1);
        ck_assert_msg(t->op.status == TUTTI_OK, "%s", t->err);
        expect_data(t, 0x80);
        top_free(t);
    }
    expect_idle();
    for (int i = 0; i < ns; i++)
        top_free(s[i]);
    for (int i = 0; i < 6; i++)
        top_free(r[i]);
    job_end();
}
END_TEST

/* A receive whose length differs fails, naming both lengths, the peer and the tag; the
 * message is consumed and the next one meets the next receive; the sender completes. */
START_TEST(test_length_mismatch)
{
    size_t len = sizes[_i];
    size_t other = len + 3;
    job_start(2, 30);
    top_t *s1 = post(1, TUTTI__P2P_SEND, 0, 4, len, 0x41);
    top_t *s2 = post(1, TUTTI__P2P_SEND, 0, 4, len, 0x42);
    top_t *r1 = post(0, TUTTI__P2P_RECV, 1, 4, other, 0);
    top_t *r2 = post(0, TUTTI__P2P_RECV, 1, 4, len, 0);
    top_t *all[4] = {s1, s2, r1, r2};
    run(all, 4);
    ck_assert_int_eq(r1->op.status, TUTTI_ERR_INVALID_ARG);
    char a[32], b[32];
    snprintf(a, sizeof a, "%zu bytes", len);
    snprintf(b, sizeof b, "expects %zu", other);
    ck_assert_msg(strstr(r1->err, a) && strstr(r1->err, b) && strstr(r1->err, "rank 1") &&
                      strstr(r1->err, "tag 4"),
                  "the text does not name both lengths, the peer and the tag: %s", r1->err);
    for (size_t i = 0; i < other; i++)
        ck_assert_msg(r1->buf[i] == 0xee, "the failed receive's buffer was written at %zu", i);
    ck_assert_msg(r2->op.status == TUTTI_OK, "%s", r2->err);
    expect_data(r2, 0x42);
    ck_assert_msg(s1->op.status == TUTTI_OK && s2->op.status == TUTTI_OK, "%s / %s", s1->err,
                  s2->err);
    expect_idle();
    for (int k = 0; k < 4; k++)
        top_free(all[k]);
    job_end();
}
END_TEST

/* ---- envelopes that must not be trusted ------------------------------------------------ */

static tutti__p2p_env_t good_env(int kind, int tag, uint64_t len, uint64_t seq, int from, int to)
{
    tutti__p2p_env_t e;
    memset(&e, 0, sizeof e);
    e.kind = (uint16_t)kind;
    e.tag = tag;
    e.len = len;
    e.seq = seq;
    tutti__p2p_env_seal(&e, from, to);
    return e;
}

START_TEST(test_env_check)
{
    char why[400];
    tutti__p2p_env_t e = good_env(TUTTI__P2P_EAGER, 7, 100, 1, 1, 0);
    ck_assert_int_eq(tutti__p2p_env_check(&e, 1, 0, why, sizeof why), TUTTI_OK);
    /* sealed for another pair of ranks */
    ck_assert_int_eq(tutti__p2p_env_check(&e, 2, 0, why, sizeof why), TUTTI_ERR_TRANSPORT);
    ck_assert_msg(strstr(why, "check word") != NULL, "%s", why);
    /* every single bit flipped in the header is caught */
    for (size_t byte = 0; byte < offsetof(tutti__p2p_env_t, data); byte++)
        for (int bit = 0; bit < 8; bit++) {
            tutti__p2p_env_t x = e;
            ((unsigned char *)&x)[byte] ^= (unsigned char)(1u << bit);
            ck_assert_msg(tutti__p2p_env_check(&x, 1, 0, why, sizeof why) == TUTTI_ERR_TRANSPORT,
                          "a flipped bit %d of byte %zu passed", bit, byte);
        }
    /* flow control's request to send (p2p.h): any length, only with its flag */
    tutti__p2p_env_t sync = good_env(TUTTI__P2P_RTS, 1, 64, 1, 1, 0), sync0;
    sync.flags = TUTTI__P2P_SYNC;
    tutti__p2p_env_seal(&sync, 1, 0);
    ck_assert_int_eq(tutti__p2p_env_check(&sync, 1, 0, why, sizeof why), TUTTI_OK);
    sync0 = sync;
    sync0.len = 0;
    tutti__p2p_env_seal(&sync0, 1, 0);
    ck_assert_int_eq(tutti__p2p_env_check(&sync0, 1, 0, why, sizeof why), TUTTI_OK);
    tutti__p2p_env_t sync_odd = sync;
    sync_odd.flags = TUTTI__P2P_SYNC | 2;
    tutti__p2p_env_seal(&sync_odd, 1, 0);
    /* and its credit: a count, nothing else */
    tutti__p2p_env_t credit = good_env(TUTTI__P2P_CREDIT, 0, 0, 0, 1, 0), credit0;
    credit.ack = 16;
    tutti__p2p_env_seal(&credit, 1, 0);
    ck_assert_int_eq(tutti__p2p_env_check(&credit, 1, 0, why, sizeof why), TUTTI_OK);
    credit0 = credit;
    credit0.ack = 0;
    tutti__p2p_env_seal(&credit0, 1, 0);
    tutti__p2p_env_t credit_seq = credit, credit_tag = credit, credit_len = credit;
    credit_seq.seq = 3;
    tutti__p2p_env_seal(&credit_seq, 1, 0);
    credit_tag.tag = 3;
    tutti__p2p_env_seal(&credit_tag, 1, 0);
    credit_len.len = 8;
    tutti__p2p_env_seal(&credit_len, 1, 0);
    tutti__p2p_env_t acked = good_env(TUTTI__P2P_EAGER, 1, 8, 1, 1, 0);
    acked.ack = 7; /* any kind carries the count, under the check word */
    tutti__p2p_env_seal(&acked, 1, 0);
    ck_assert_int_eq(tutti__p2p_env_check(&acked, 1, 0, why, sizeof why), TUTTI_OK);
    acked.ack = 8;
    ck_assert_int_eq(tutti__p2p_env_check(&acked, 1, 0, why, sizeof why), TUTTI_ERR_TRANSPORT);
    struct {
        tutti__p2p_env_t env;
        const char *says;
    } bad[] = {
        {sync_odd, "request to send"},
        {credit0, "credit"},
        {credit_seq, "credit"},
        {credit_tag, "credit"},
        {credit_len, "credit"},
        {good_env(9, 0, 0, 1, 1, 0), "kind is 9"},
        {good_env(TUTTI__P2P_EAGER, 1, TUTTI__P2P_EAGER_MAX + 1, 1, 1, 0), "eager"},
        {good_env(TUTTI__P2P_EAGER, -5, 8, 1, 1, 0), "tag -5"},
        {good_env(TUTTI__P2P_RTS, 1, 64, 1, 1, 0), "request to send"},
        {good_env(TUTTI__P2P_RTS, 1, (uint64_t)1 << 63, 1, 1, 0), "request to send"},
        {good_env(TUTTI__P2P_CTS, 0, 5, 1, 1, 0), "clear-to-send"},
        {good_env(TUTTI__P2P_DATA, 3, 5, 1, 1, 0), "data header"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        ck_assert_msg(tutti__p2p_env_check(&bad[i].env, 1, 0, why, sizeof why) ==
                          TUTTI_ERR_TRANSPORT,
                      "bad envelope %zu passed", i);
        ck_assert_msg(strstr(why, bad[i].says) != NULL, "envelope %zu: \"%s\" lacks \"%s\"", i,
                      why, bad[i].says);
    }
    tutti__p2p_env_t m = e;
    m.magic ^= 0xffu;
    ck_assert_int_eq(tutti__p2p_env_check(&m, 1, 0, why, sizeof why), TUTTI_ERR_TRANSPORT);
    ck_assert_msg(strstr(why, "magic") != NULL, "%s", why);
}
END_TEST

/* Rank 1 puts on the wire what a broken or hostile peer could: the receive from it fails with a
 * text naming it and what was wrong, later receives from it fail at once, nothing is allocated
 * for a length the envelope claims, and rank 2's messages to rank 0 still arrive. */
START_TEST(test_hostile_envelope)
{
    job_start(3, 30);
    tutti__p2p_env_t junk;
    const char *says;
    switch (_i) {
    case 0: /* not an envelope at all */
        memset(&junk, 0x5a, sizeof junk);
        says = "magic";
        break;
    case 1: /* a torn one */
        junk = good_env(TUTTI__P2P_EAGER, 1, 8, 1, 1, 0);
        junk.len = 9;
        says = "check word";
        break;
    case 2: /* a well-made eager envelope claiming 1 TiB */
        junk = good_env(TUTTI__P2P_EAGER, 1, (uint64_t)1 << 40, 1, 1, 0);
        says = "eager";
        break;
    case 3: /* message numbers going back: a good message numbered 5, then one numbered 4 */
        {
            tutti__p2p_env_t first = good_env(TUTTI__P2P_EAGER, 1, 8, 5, 1, 0);
            memset(first.data, 0x55, 8);
            push_bytes(1, 0, &first, sizeof first);
        }
        junk = good_env(TUTTI__P2P_EAGER, 1, 0, 4, 1, 0);
        says = "out of step";
        break;
    case 4: /* a clear-to-send for nothing rank 0 announced */
        junk = good_env(TUTTI__P2P_CTS, 0, 0, 77, 1, 0);
        says = "never announced";
        break;
    default: /* data for no receive */
        junk = good_env(TUTTI__P2P_DATA, 0, 100, 77, 1, 0);
        says = "no receive here waits";
        break;
    }
    push_bytes(1, 0, &junk, sizeof junk);
    top_t *r = post(0, TUTTI__P2P_RECV, 1, 1, 8, 0);
    top_t *ok_send = post(2, TUTTI__P2P_SEND, 0, 1, 8, 0x22);
    top_t *ok_recv = post(0, TUTTI__P2P_RECV, 2, 1, 8, 0);
    top_t *all[3] = {r, ok_send, ok_recv};
    run(all, 3);
    if (_i == 3) { /* the good message first; the next receive meets the bad one */
        ck_assert_msg(r->op.status == TUTTI_OK, "%s", r->err);
        expect_data(r, 0x55);
        top_free(r);
        r = all[0] = post(0, TUTTI__P2P_RECV, 1, 1, 8, 0);
        run(&r, 1);
    }
    ck_assert_int_eq(r->op.status, TUTTI_ERR_TRANSPORT);
    ck_assert_msg(strstr(r->err, "rank 1") && strstr(r->err, says), "text \"%s\" lacks \"%s\"",
                  r->err, says);
    ck_assert_msg(ok_recv->op.status == TUTTI_OK, "rank 2's message: %s", ok_recv->err);
    expect_data(ok_recv, 0x22);
    top_t *again = post(0, TUTTI__P2P_RECV, 1, 1, 8, 0);
    run(&again, 1);
    ck_assert_int_eq(again->op.status, TUTTI_ERR_TRANSPORT);
    ck_assert_msg(strstr(again->err, "rank 1") != NULL, "%s", again->err);
    top_free(again);
    for (int k = 0; k < 3; k++)
        top_free(all[k]);
    job_end();
}
END_TEST

/* Rank 1's eager message to rank 0 arrives as an envelope nothing has matched yet, and its
 * payload fails on the way in (here: one byte short, which the transport refuses). The message
 * is lost: a receive for it, posted afterwards, naming rank 1 (_i == 0) or any rank (_i == 1),
 * must fail, not complete with a buffer that never got the bytes; one posted while the payload
 * was still on its way (_i == 2, 3), and so bound to the message, fails too (it crashed the
 * engine once); and nothing is left behind. */
START_TEST(test_failed_payload)
{
    bool early = _i >= 2;
    job_start(2, 30);
    top_t *other = post(0, TUTTI__P2P_RECV, 1, 2, 8, 0); /* so that rank 0 listens to rank 1 */
    tutti__p2p_env_t env = good_env(TUTTI__P2P_EAGER, 1, 1000, 1, 1, 0);
    push_bytes(1, 0, &env, sizeof env);
    unsigned char payload[999];
    memset(payload, 0x33, sizeof payload);
    hold_len = early ? sizeof payload : 0;
    push_bytes(1, 0, payload, sizeof payload);
    top_t *r = NULL;
    if (early) {
        for (int k = 0; k < 10; k++) /* the envelope arrives; its payload's receive is posted */
            tutti__p2p_progress(J.e[0]);
        r = post(0, TUTTI__P2P_RECV, _i == 2 ? 1 : TUTTI_ANY_SOURCE, 1, 1000, 0);
        release_held();
    }
    run(&other, 1);
    ck_assert_int_eq(other->op.status, TUTTI_ERR_INTERNAL); /* the fake's status for it */
    ck_assert_msg(strstr(other->err, "999-byte message") != NULL, "%s", other->err);
    if (!early)
        r = post(0, TUTTI__P2P_RECV, _i == 0 ? 1 : TUTTI_ANY_SOURCE, 1, 1000, 0);
    run(&r, 1);
    ck_assert_msg(r->op.status != TUTTI_OK,
                  "a receive took the message whose payload failed, as if it had arrived");
    for (size_t i = 0; i < 1000; i++)
        ck_assert_msg(r->buf[i] == 0xee, "the failed receive's buffer was written at %zu", i);
    expect_idle();
    top_free(other);
    top_free(r);
    job_end();
}
END_TEST

/* ---- ends other than success ------------------------------------------------------------- */

/* A receive nobody sends to fails at its deadline and leaves nothing posted; a rendezvous send
 * nobody receives fails at its deadline, and the receive that comes after all and matches its
 * announcement is not failed by its withdrawal (it failed "rank 1 withdrew its send",
 * TUTTI_ERR_PEER_FAILED, for a live rank) but waits on, as if that send had never been, and
 * takes the sender's retry; meanwhile an eager message between them arrives intact. From rank 1
 * and, matched by its announcement only, from any rank. */
START_TEST(test_deadlines)
{
    const int from = _i == 0 ? 1 : TUTTI_ANY_SOURCE;
    job_start(2, 0.3);
    double t0 = tutti__now(); /* each op's deadline counts from its post */
    top_t *r = post(0, TUTTI__P2P_RECV, 1, 1, 8, 0);
    top_t *s = post(1, TUTTI__P2P_SEND, 0, 2, 100000, 0x33);
    top_t *both[2] = {r, s};
    run(both, 2);
    double dt = tutti__now() - t0;
    ck_assert_int_eq(r->op.status, TUTTI_ERR_TIMEOUT);
    ck_assert_int_eq(s->op.status, TUTTI_ERR_TIMEOUT);
    ck_assert_msg(dt >= 0.25 && dt < 3, "the deadline of 0.3 s came after %.2f s", dt);
    ck_assert_msg(strstr(r->err, "timed out") && strstr(r->err, "rank 1"), "%s", r->err);
    ck_assert_msg(strstr(s->err, "timed out") && strstr(s->err, "rank 0"), "%s", s->err);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(r->buf[i] == 0xee, "the timed-out receive's buffer was written");
    /* rank 0 holds nothing; rank 1 listens to rank 0 for the CTS it must answer "withdrawn" */
    tutti__p2p_progress(J.e[0]);
    ck_assert_msg(!tutti__p2p_busy(J.e[0]) && posted_recvs[0] == 0, "rank 0 is still busy");
    ck_assert_msg(posted_recvs[1] == 1, "rank 1 has %d receives posted, not 1", posted_recvs[1]);
    J.net[0].timeout_s = J.net[1].timeout_s = 30;
    top_t *e1 = post(1, TUTTI__P2P_SEND, 0, 3, 100, 0x44);
    top_t *late = post(0, TUTTI__P2P_RECV, from, 2, 100000, 0);
    top_t *e2 = post(0, TUTTI__P2P_RECV, 1, 3, 100, 0);
    top_t *two[2] = {e1, e2};
    run(two, 2);
    ck_assert_msg(e2->op.status == TUTTI_OK, "%s", e2->err);
    expect_data(e2, 0x44);
    for (int k = 0; k < 20; k++) { /* the withdrawal comes and goes */
        tutti__p2p_progress(J.e[0]);
        tutti__p2p_progress(J.e[1]);
    }
    ck_assert_msg(!__atomic_load_n(&late->op.done, __ATOMIC_ACQUIRE),
                  "the receive that matched a withdrawn send ended: %d: %s", late->op.status,
                  late->err);
    ck_assert_msg(posted_recvs[0] == 1, "rank 0 listens to rank 1 with %d receives, not 1",
                  posted_recvs[0]);
    top_t *retry = post(1, TUTTI__P2P_SEND, 0, 2, 100000, 0x66);
    top_t *last[2] = {retry, late};
    run(last, 2);
    ck_assert_msg(retry->op.status == TUTTI_OK && late->op.status == TUTTI_OK,
                  "the retry: %s / %s", retry->err, late->err);
    ck_assert_int_eq(late->op.source, 1);
    expect_data(late, 0x66);
    expect_idle();
    top_free(r);
    top_free(s);
    top_free(e1);
    top_free(e2);
    top_free(late);
    top_free(retry);
    job_end();
}
END_TEST

/* An aborted communicator fails every open op with TUTTI_ERR_ABORTED at the next progress. */
START_TEST(test_abort)
{
    job_start(2, 30);
    top_t *ts[4] = {post(0, TUTTI__P2P_RECV, 1, 1, 8, 0),
                    post(0, TUTTI__P2P_RECV, TUTTI_ANY_SOURCE, 2, 8, 0),
                    post(0, TUTTI__P2P_SEND, 1, 3, 100000, 1),
                    post(1, TUTTI__P2P_RECV, 0, 9, 8, 0)};
    J.aborted[0] = 1;
    J.aborted[1] = 1;
    double t0 = tutti__now();
    run(ts, 4);
    ck_assert_msg(tutti__now() - t0 < 1, "abort took %.2f s", tutti__now() - t0);
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(ts[k]->op.status, TUTTI_ERR_ABORTED);
        ck_assert_msg(strstr(ts[k]->err, "aborted") != NULL, "%s", ts[k]->err);
        top_free(ts[k]);
    }
    expect_idle();
    job_end();
}
END_TEST

/* A receive whose data header has come but whose payload is late meets its deadline: the rest
 * of the message would still come and be read as what rank 1 sends next, so rank 0 stops
 * exchanging with rank 1, saying why (before, the next receive from rank 1 met the payload
 * instead of an envelope and failed with a text about lengths); the sender's own send had
 * completed, and nothing stays posted. */
START_TEST(test_late_payload)
{
    job_start(2, 0.3);
    hold_len = 200000;
    top_t *s = post(1, TUTTI__P2P_SEND, 0, 1, 200000, 0x44);
    top_t *r = post(0, TUTTI__P2P_RECV, 1, 1, 200000, 0);
    top_t *both[2] = {s, r};
    run(both, 2);
    ck_assert_msg(s->op.status == TUTTI_OK, "%s", s->err);
    ck_assert_int_eq(r->op.status, TUTTI_ERR_TIMEOUT);
    release_held();
    top_t *s2 = post(1, TUTTI__P2P_SEND, 0, 2, 8, 0x55);
    top_t *r2 = post(0, TUTTI__P2P_RECV, 1, 2, 8, 0);
    top_t *next[2] = {s2, r2};
    run(next, 2);
    ck_assert_int_eq(r2->op.status, TUTTI_ERR_TRANSPORT);
    ck_assert_msg(strstr(r2->err, "was arriving") != NULL && strstr(r2->err, "rank 1") != NULL,
                  "the next receive from rank 1 does not say why it cannot be: %s", r2->err);
    top_free(s);
    top_free(r);
    top_free(s2);
    top_free(r2);
    job_end();
}
END_TEST

/* The same late payload, but it lands while the deadline's cancel waits for it (as an ofi
 * cancel waits for a transfer in flight): the receive has its data whole and succeeds (it
 * reported the timeout with the message in its buffer), and the pair goes on. */
START_TEST(test_finished_on_withdraw)
{
    job_start(2, 0.3);
    hold_len = 200000;
    cancel_delivers = true;
    top_t *s = post(1, TUTTI__P2P_SEND, 0, 1, 200000, 0x44);
    top_t *r = post(0, TUTTI__P2P_RECV, 1, 1, 200000, 0);
    top_t *both[2] = {s, r};
    double t0 = tutti__now();
    run(both, 2);
    ck_assert_msg(tutti__now() - t0 >= 0.25, "the receive ended before its deadline");
    ck_assert_msg(s->op.status == TUTTI_OK, "%s", s->err);
    ck_assert_msg(r->op.status == TUTTI_OK, "the receive whose data came during its cancel: "
                  "%d: %s", r->op.status, r->err);
    ck_assert_int_eq(r->op.source, 1);
    expect_data(r, 0x44);
    cancel_delivers = false;
    J.net[0].timeout_s = J.net[1].timeout_s = 30;
    top_t *s2 = post(1, TUTTI__P2P_SEND, 0, 2, 100000, 0x55);
    top_t *r2 = post(0, TUTTI__P2P_RECV, 1, 2, 100000, 0);
    top_t *next[2] = {s2, r2};
    run(next, 2);
    ck_assert_msg(s2->op.status == TUTTI_OK && r2->op.status == TUTTI_OK, "the next message: "
                  "%s / %s", s2->err, r2->err);
    expect_data(r2, 0x55);
    expect_idle();
    top_free(s);
    top_free(r);
    top_free(s2);
    top_free(r2);
    job_end();
}
END_TEST

/* A post the transport refuses fails its op with the transport's text, whatever was posted
 * before it: an inline send's envelope, an eager send's payload, a rendezvous send's data after
 * its CTS, a receive's payload (each reported success once: a request never posted counted as
 * one that had completed). */
START_TEST(test_refused_post)
{
    job_start(2, 30);
    static const size_t lens[] = {8, 1000, 100000, 1000};
    const size_t len = lens[_i];
    top_t *r = post(0, TUTTI__P2P_RECV, 1, 1, len, 0);
    if (_i == 0)
        refuse_send = sizeof(tutti__p2p_env_t);
    else if (_i < 3)
        refuse_send = len;
    else
        refuse_recv = len;
    top_t *s = post(1, TUTTI__P2P_SEND, 0, 1, len, 0x11);
    top_t *t = _i < 3 ? s : r; /* the op whose post is refused */
    run(&t, 1);
    ck_assert_msg(t->op.status == TUTTI_ERR_TRANSPORT, "case %d: %d: %s", _i, t->op.status,
                  t->err);
    ck_assert_msg(strstr(t->err, "refused") != NULL, "case %d: %s", _i, t->err);
    top_free(s);
    job_end(); /* before r's buffer goes: its receive may still be posted */
    top_free(r);
}
END_TEST

/* stale_rts leaves a 100000-byte send of rank 1's, tag 2, announced to rank 0 and withdrawn at
 * its deadline (its RTS waits at rank 0, unexpected). */
static top_t *stale_rts(void)
{
    J.net[1].timeout_s = 0.05;
    top_t *s = post(1, TUTTI__P2P_SEND, 0, 2, 100000, 0x33);
    J.net[1].timeout_s = 30;
    for (int i = 0; i < 5; i++) {
        tutti__p2p_progress(J.e[1]);
        tutti__p2p_progress(J.e[0]);
    }
    run(&s, 1);
    ck_assert_int_eq(s->op.status, TUTTI_ERR_TIMEOUT);
    return s;
}

/* A receive put back after its send was withdrawn keeps its place before a receive posted
 * after it: the retry goes to the first, the next message to the second. From rank 1 and from
 * any rank. */
START_TEST(test_repost_order)
{
    job_start(2, 30);
    top_t *s = stale_rts();
    top_t *r1 = post(0, TUTTI__P2P_RECV, _i ? TUTTI_ANY_SOURCE : 1, 2, 100000, 0);
    tutti__p2p_progress(J.e[0]); /* r1 takes the stale RTS, clears it */
    top_t *r2 = post(0, TUTTI__P2P_RECV, 1, 2, 100000, 0);
    for (int i = 0; i < 5; i++) { /* the withdrawal comes */
        tutti__p2p_progress(J.e[1]);
        tutti__p2p_progress(J.e[0]);
    }
    ck_assert_msg(!r1->op.done && !r2->op.done, "a receive ended: %s %s", r1->err, r2->err);
    top_t *m1 = post(1, TUTTI__P2P_SEND, 0, 2, 100000, 0x66);
    top_t *a[2] = {m1, r1};
    run(a, 2);
    ck_assert_msg(r1->op.status == TUTTI_OK, "%s", r1->err);
    expect_data(r1, 0x66);
    ck_assert_msg(!r2->op.done, "the later receive took the retry");
    top_t *m2 = post(1, TUTTI__P2P_SEND, 0, 2, 100000, 0x77);
    top_t *b[2] = {m2, r2};
    run(b, 2);
    ck_assert_msg(r2->op.status == TUTTI_OK, "%s", r2->err);
    expect_data(r2, 0x77);
    expect_idle();
    top_free(s);
    top_free(r1);
    top_free(r2);
    top_free(m1);
    top_free(m2);
    job_end();
}
END_TEST

/* A receive from any rank put back after its send was withdrawn takes what another rank sent
 * meanwhile; and one of whose peers failed while it was matched fails at once, as any receive
 * from any rank that waited through a failure (it stayed open until some later sweep). */
START_TEST(test_repost_any)
{
    job_start(3, 30);
    top_t *s = stale_rts();
    top_t *r1 = post(0, TUTTI__P2P_RECV, TUTTI_ANY_SOURCE, 2, 100000, 0);
    tutti__p2p_progress(J.e[0]);
    top_t *s2 = NULL, *l2 = NULL;
    if (_i == 0) {
        s2 = post(2, TUTTI__P2P_SEND, 0, 2, 100000, 0x22);
        for (int i = 0; i < 3; i++) /* rank 2's RTS lands at rank 0, unmatched */
            tutti__p2p_progress(J.e[0]);
    } else { /* rank 2 sends an envelope that cannot be trusted: rank 0 ends with it */
        l2 = post(0, TUTTI__P2P_RECV, 2, 99, 8, 0);
        tutti__p2p_env_t junk;
        memset(&junk, 0x5a, sizeof junk);
        push_bytes(2, 0, &junk, sizeof junk);
        run(&l2, 1);
        ck_assert_int_eq(l2->op.status, TUTTI_ERR_TRANSPORT);
        ck_assert_msg(!r1->op.done, "the matched receive from any rank ended: %s", r1->err);
    }
    for (int i = 0; i < 5; i++) {
        tutti__p2p_progress(J.e[1]);
        tutti__p2p_progress(J.e[0]);
    }
    if (_i == 0) {
        top_t *a[2] = {s2, r1};
        run(a, 2);
        ck_assert_msg(r1->op.status == TUTTI_OK, "%s", r1->err);
        ck_assert_int_eq(r1->op.source, 2);
        expect_data(r1, 0x22);
        expect_idle();
    } else {
        ck_assert_msg(r1->op.done, "the receive from any rank put back after rank 2 failed is "
                      "still open");
        ck_assert_int_eq(r1->op.status, TUTTI_ERR_TRANSPORT);
        ck_assert_msg(strstr(r1->err, "rank 2 failed") != NULL, "%s", r1->err);
    }
    top_free(s);
    job_end();
    top_free(r1);
    if (s2)
        top_free(s2);
    if (l2)
        top_free(l2);
}
END_TEST

/* Thousands of sends posted before any receive, then the receives (MPI's "post every send,
 * then every receive"), 64-byte messages (an eager payload each) and, over a link under flow
 * control (as ofi: past 128 unreported, each waits to be matched), announced ones: every one
 * arrives, in order. Progress walked every open op and unexpected entry, and an answer to a
 * waiting send walked every other one: 20000 each way took 55 s over shm and did not finish in
 * 60 s over ofi (run() gives up after 5 s). */
START_TEST(test_many_open)
{
    enum { K = 20000, LEN = 64 };
    job_start(2, 60);
    sends_wait = true;
    if (_i == 1)
        for (int r = 0; r < 2; r++)
            J.net[r].links.ofi = &J.tp[r].base;
    top_t **all = malloc(2 * K * sizeof *all);
    for (int k = 0; k < K; k++)
        all[k] = post(1, TUTTI__P2P_SEND, 0, 5, LEN, (unsigned char)k);
    for (int k = 0; k < K; k++)
        all[K + k] = post(0, TUTTI__P2P_RECV, 1, 5, LEN, 0);
    run(all, 2 * K);
    for (int k = 0; k < K; k++) {
        ck_assert_msg(all[k]->op.status == TUTTI_OK, "send %d: %s", k, all[k]->err);
        ck_assert_msg(all[K + k]->op.status == TUTTI_OK, "recv %d: %s", k, all[K + k]->err);
        expect_data(all[K + k], (unsigned char)k);
    }
    expect_idle();
    for (int k = 0; k < 2 * K; k++)
        top_free(all[k]);
    free(all);
    job_end();
}
END_TEST

/* rounds progresses every engine, round after round, until the ops in ts are done; returns
 * how many rounds that took (a count, not a time: it does not depend on the machine). */
static int rounds(top_t **ts, int nts)
{
    for (int n = 1; n <= 100000; n++) {
        for (int r = 0; r < J.n; r++)
            tutti__p2p_progress(J.e[r]);
        int open = 0;
        for (int i = 0; i < nts; i++)
            open += !__atomic_load_n(&ts[i]->op.done, __ATOMIC_ACQUIRE);
        if (open == 0)
            return n;
    }
    ck_abort_msg("ops still open after 100000 rounds of progress");
    return -1;
}

/* 128 sends stuck towards rank 2 (which never receives) do not slow rank 0's exchange with rank
 * 1: each pair of messages, either way, of every kind (inline, eager, rendezvous), takes as many
 * rounds of progress as with nothing stuck. With one list of ops in flight for every peer, the
 * stuck ones filled the window it looks at, and every other op waited for the next full look
 * (1 ms: 1000 times slower, a helper measured). */
START_TEST(test_stuck_stream)
{
    static const size_t lens[] = {8, 1000, 100000};
    int most[2] = {0, 0};
    for (int stuck = 0; stuck < 2; stuck++) {
        job_start(3, 60);
        sends_wait = true;
        top_t *held[128];
        for (int k = 0; k < (stuck ? 128 : 0); k++)
            held[k] = post(0, TUTTI__P2P_SEND, 2, 7, 1000, 1);
        for (int it = 0; it < 30; it++) {
            const size_t len = lens[it % 3];
            const int from = it % 2; /* 0 -> 1, then 1 -> 0 */
            top_t *r = post(1 - from, TUTTI__P2P_RECV, from, 5, len, 0);
            top_t *s = post(from, TUTTI__P2P_SEND, 1 - from, 5, len, (unsigned char)it);
            top_t *both[2] = {r, s};
            int n = rounds(both, 2);
            ck_assert_msg(r->op.status == TUTTI_OK && s->op.status == TUTTI_OK, "%s / %s",
                          r->err, s->err);
            expect_data(r, (unsigned char)it);
            most[stuck] = n > most[stuck] ? n : most[stuck];
            top_free(r);
            top_free(s);
        }
        job_end();
        for (int k = 0; k < (stuck ? 128 : 0); k++)
            top_free(held[k]);
    }
    ck_assert_msg(most[1] <= most[0] + 2, "with 128 sends stuck towards another rank a pair took "
                  "up to %d rounds of progress, against %d with none", most[1], most[0]);
}
END_TEST

static Suite *engine_suite(void)
{
    Suite *s = suite_create("p2p_engine");
    TCase *tc = tcase_create("matching");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_tags_out_of_order, 0, 2 * NSIZES);
    tcase_add_test(tc, test_non_overtaking);
    tcase_add_test(tc, test_any_source);
    tcase_add_loop_test(tc, test_many_open, 0, 2);
    tcase_add_test(tc, test_stuck_stream);
    tcase_add_loop_test(tc, test_length_mismatch, 0, NSIZES);
    suite_add_tcase(s, tc);
    tc = tcase_create("hostile");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_env_check);
    tcase_add_loop_test(tc, test_hostile_envelope, 0, 6);
    tcase_add_loop_test(tc, test_failed_payload, 0, 4);
    suite_add_tcase(s, tc);
    tc = tcase_create("ends");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_deadlines, 0, 2);
    tcase_add_test(tc, test_abort);
    tcase_add_test(tc, test_late_payload);
    tcase_add_test(tc, test_finished_on_withdraw);
    tcase_add_loop_test(tc, test_refused_post, 0, 4);
    tcase_add_loop_test(tc, test_repost_order, 0, 2);
    tcase_add_loop_test(tc, test_repost_any, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(engine_suite)
