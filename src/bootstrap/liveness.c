/* liveness.c: the liveness mesh, one TCP connection between every pair of ranks that carries a
 * goodbye (so that a connection closed without one means a dead peer; it says how many calls
 * the rank had posted, so that a peer waiting in a later one fails at once), heartbeats (so that
 * a peer that stops answering, stopped or frozen, is found too) and failure notices (a rank
 * whose communicator failed tells every peer which call failed and why). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../common/sha256.h"
#include "liveness.h"
#include "sock.h"

#define BYE 'G'     /* a goodbye: BYE_REC bytes follow, how many collective calls the sender
                        had numbered (tutti__live_note_call), so that a peer waiting in a later
                        call knows at once that it will not come */
#define BYE_REC 8
#define HELLO_MAGIC 0x54544c33u /* "TTL3": goodbyes carry a count of calls */
#define REC_LEN 96              /* one rank's published record: "ip port pid nonce" */
#define LIST_MAX 16
#define BEAT 'H'     /* a heartbeat: the sender's process still runs */
#define FAIL 'F'     /* a failure notice: FAIL_REC bytes follow (status, sequence number, the
                        other rank of a mismatch plus one, 0: none) */
#define FAIL_REC 13
#define FAIL_RELAYED 0x80u /* in a notice's status byte: the sender only passes a failure on */
#define MAIL 'M'     /* a mail record (tutti__live_mail_send): kind, length (4 bytes), payload */
#define MAIL_HDR 5
#define ASK 'Q'      /* a waiter's question (tutti__live_ask): ASK_REC bytes follow, the call
                        number it waits in */
#define ASK_REC 8
#define ANSWER 'A'   /* the answer: ANS_REC bytes follow: the call number, the state
                        (TUTTI__LIVE_POSTED, _NOT_YET, _GONE), and for a posted call its
                        descriptor's count and info words */
#define ANS_REC 25

enum { PEER_ALIVE = 0, PEER_LEFT = 1, PEER_DEAD = 2 };

typedef struct peer {
    int fd;              /* -1: self, or closed */
    int pid;
    unsigned char state; /* PEER_*; read without the lock by tutti__live_left */
    bool bye_sent;
    uint64_t bye_calls;  /* its goodbye's count of calls; read after state (PEER_LEFT) */
    double heard;        /* when a byte from it was last read (tutti__live_silent) */
    double empty_at;     /* when a look at its link last found nothing to read */
    double resumed;      /* when it was heard again after a silence (tutti__live_resumed) */
    unsigned char rec_left, rec[FAIL_REC]; /* a failure notice being read */
    int fail_status;     /* its communicator's failure, from its notice; 0: none */
    uint64_t fail_seq;
    bool fail_relayed;   /* that failure only passed another rank's on */
    int fail_blame;      /* the other rank of its mismatch; -1: none */
    /* Mail (tutti__live_mail_*): the record being read, then the last one of each kind. */
    bool in_mail;
    int mhgot;           /* header bytes read */
    unsigned char mhdr[MAIL_HDR];
    unsigned char *mbuf; /* the payload being read (mail_cap bytes) */
    size_t mneed, mgot;
    unsigned char *box[TUTTI__LIVE_MAIL_KINDS];
    size_t box_len[TUTTI__LIVE_MAIL_KINDS];
    uint64_t box_gen[TUTTI__LIVE_MAIL_KINDS];
    /* A question or an answer about a call (ASK, ANSWER) being read, then its last answer. */
    unsigned char fix_kind, fix_left, fix[ANS_REC];
    int ans_state;       /* TUTTI__LIVE_*; 0: none yet */
    uint64_t ans_seq, ans_count, ans_info;
} peer_t;

struct tutti__liveness {
    int rank, size;
    size_t mail_cap;  /* the longest mail payload a peer may send */
    peer_t *peers;
    struct pollfd *pfd;
    int *pfd_rank;
    pthread_mutex_t mu;
    int lowest_dead;  /* -1 while none; read without the lock when the lock is busy */
    bool forked;      /* this is a fork()ed child's copy: the connections belong to the parent */
    pthread_t beat;   /* the heartbeat thread (tutti__live_beat), when beat_on */
    /* beat_on: read by the heartbeat thread and by waits on any thread: atomic (beating()) */
    bool beat_on, beat_stop;
    double beat_period;
    int64_t beat_at_ms;    /* CLOCK_MONOTONIC_COARSE of the last heartbeat sent (atomic) */
    int64_t stalled_at_ms; /* when the heartbeat thread last woke far too late (atomic; 0) */
    pthread_mutex_t beat_mu;
    pthread_cond_t beat_cv;
    struct tutti__liveness *next; /* in the registry that fork() walks */
    tutti__live_calls_t calls;    /* this rank's posted calls (tutti__live_note_call) */
    bool bye_made;                /* bye holds this rank's goodbye record (made once, so that a
                                     retried one says the same) */
    unsigned char bye[1 + BYE_REC];
};

/* beating: whether the heartbeat thread runs (set and cleared on the creating thread, read on
 * any) */
static inline bool beating(const tutti__liveness_t *l)
{
    return __atomic_load_n(&l->beat_on, __ATOMIC_ACQUIRE);
}

/* ---- fork: a child must not keep the parent's connections open ------------------------------ */

/* A child that inherits the sockets (a data-loader worker, say) would keep them open after the
 * parent dies, and the peers would never see the parent go; so every child closes its copies.
 * CLOEXEC covers exec(); these handlers cover plain fork(). */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static tutti__liveness_t *reg_head;

static void atfork_prepare(void) { pthread_mutex_lock(&reg_mu); }
static void atfork_parent(void) { pthread_mutex_unlock(&reg_mu); }

static void atfork_child(void)
{
    for (tutti__liveness_t *l = reg_head; l; l = l->next) {
        l->forked = true;
        for (int r = 0; r < l->size; r++)
            if (l->peers[r].fd >= 0) {
                close(l->peers[r].fd);
                l->peers[r].fd = -1;
            }
    }
    pthread_mutex_unlock(&reg_mu);
}

static void reg_init(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

static void reg_add(tutti__liveness_t *l)
{
    pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_mu);
    l->next = reg_head;
    reg_head = l;
    pthread_mutex_unlock(&reg_mu);
}

static void reg_remove(tutti__liveness_t *l)
{
    pthread_mutex_lock(&reg_mu);
    for (tutti__liveness_t **p = &reg_head; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
}

/* ---- helpers -------------------------------------------------------------------------------- */

static bool unconnected(const peer_t *p) { return p->fd < 0; }
static bool still_alive(const peer_t *p) { return p->state == PEER_ALIVE; }

/* list_peers writes the ranks from `from` up, this one excepted, whose peer want() picks, into
 * buf (for messages); returns how many there are. */
static int list_peers(const tutti__liveness_t *l, int from, bool (*want)(const peer_t *),
                      char *buf, size_t cap)
{
    int listed[LIST_MAX] = {0}, n = 0;
    for (int r = from; r < l->size; r++)
        if (r != l->rank && want(&l->peers[r]) && n++ < LIST_MAX)
            listed[n - 1] = r;
    tutti__format_ranks(buf, cap, listed, n < LIST_MAX ? n : LIST_MAX, n);
    return n;
}

static void set_keepalive(int fd)
{
    /* A peer whose host vanishes sends no FIN. Keepalive would turn an idle connection's
     * silence into an error in ~25 s, but heartbeats keep unacknowledged data in flight on
     * these, so TCP's retransmissions decide instead (many minutes; docs/shrink.md, Limits). */
    int one = 1, idle = 10, intvl = 5, cnt = 3;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

static int resolve(const char *ip, int port, struct sockaddr_storage *sa, socklen_t *len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE},
                    *ai = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(ip, ps, &hints, &ai);
    if (rc != 0)
        return rc;
    memcpy(sa, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* make_nonce is what a peer must present to be taken for one: 64 random bits, published only
 * through the (authenticated) bootstrap. */
static uint64_t make_nonce(void)
{
    uint64_t x;
    if (tutti__random(&x, sizeof x))
        return x;
    double t = tutti__now(); /* no random bytes: still unique, if guessable */
    x = (uint64_t)(t * 1e9) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&t;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* fds_available tells whether n more descriptors can be open at once (0), or why not (EMFILE,
 * ENFILE), by duplicating fd n times: a rank at its limit says so before the mesh is built,
 * while its peers can still be told, instead of failing halfway and leaving them to wait. */
static int fds_available(int fd, int n)
{
    int *got = malloc((size_t)(n > 0 ? n : 1) * sizeof *got), k = 0, err = 0;
    if (got == NULL)
        return 0; /* the mesh itself then finds out */
    for (; k < n; k++)
        if ((got[k] = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
            err = errno;
            break;
        }
    while (k > 0)
        close(got[--k]);
    free(got);
    return err == EMFILE || err == ENFILE ? err : 0;
}

/* connect_by connects a non-blocking socket to sa before deadline, retrying a refusal (the peer
 * listens before it publishes, so that is rare); returns the fd or -1 with *err set (ECANCELED:
 * the creation was cancelled, *why the status to fail with, the text the cancel's). */
static int connect_by(const struct sockaddr_storage *sa, socklen_t salen, tutti__bootstrap_t *bs,
                      int *err, tutti_status_t *why)
{
    double deadline = bs->deadline;
    for (;;) {
        int fd = tutti__sock_connect((const struct sockaddr *)sa, salen, deadline, err);
        if (fd >= 0 || *err != ECONNREFUSED || tutti__sock_ms_until(deadline, 20) == 0)
            return fd;
        if ((*why = tutti__bs_cancelled(bs)) < 0) {
            *err = ECANCELED;
            return -1;
        }
        tutti__sleep_us((unsigned)tutti__sock_ms_until(deadline, 20) * 1000u);
    }
}

/* send_whole sends the len bytes at b on fd without waiting for room to begin; a record cut
 * in two would garble the stream (the peer would read the next record's bytes as its tail), so
 * the rest of a partial send goes out within a second, or the link is shut (the peer then
 * counts this rank dead, which a rank that cannot be written to for a second nearly is). A
 * full buffer drops the record: a peer that has not read for so long is stopped, and the bytes
 * would not help it. Caller holds l->mu, so that no connection is closed (and its descriptor
 * reused) meanwhile, and no other record lands inside this one. */
static void send_whole(int fd, const void *b, size_t len)
{
    ssize_t n = send(fd, b, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0 && (size_t)n < len &&
        tutti__sock_send(fd, (const char *)b + n, len - (size_t)n, tutti__now() + 1.0) != 0)
        shutdown(fd, SHUT_RDWR);
}

static void put64(unsigned char *b, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)(v >> (8 * k));
}

static uint64_t get64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--)
        v = v << 8 | b[k];
    return v;
}

/* answer tells p which call this rank posted as number seq, from the ring its process group
 * writes (tutti__live_note_call). Caller holds l->mu (it reads p's link). */
static void answer(const tutti__liveness_t *l, peer_t *p, uint64_t seq)
{
    const tutti__live_calls_t *k = &l->calls;
    const uint64_t *slot = k->slot[seq & (TUTTI__LIVE_CALLS - 1)];
    unsigned char rec[1 + ANS_REC] = {ANSWER};
    put64(rec + 1, seq);
    uint64_t t1 = __atomic_load_n(&slot[0], __ATOMIC_ACQUIRE);
    uint64_t count = __atomic_load_n(&slot[1], __ATOMIC_ACQUIRE);
    uint64_t info = __atomic_load_n(&slot[2], __ATOMIC_ACQUIRE);
    uint64_t t2 = __atomic_load_n(&slot[0], __ATOMIC_ACQUIRE);
    uint64_t next = __atomic_load_n(&k->next, __ATOMIC_ACQUIRE);
    if (seq != UINT64_MAX && t1 == seq + 1 && t2 == t1) {
        rec[9] = TUTTI__LIVE_POSTED;
        put64(rec + 10, count);
        put64(rec + 18, info);
    } else if (next <= seq) {
        rec[9] = TUTTI__LIVE_NOT_YET;
    } else {
        rec[9] = TUTTI__LIVE_GONE; /* rewritten by a later number (or being rewritten now) */
    }
    if (p->fd >= 0)
        send_whole(p->fd, rec, sizeof rec);
}

/* fix_len is how many bytes follow a record's kind byte, for the kinds fix_byte reads. */
static int fix_len(unsigned char kind)
{
    return kind == ASK ? ASK_REC : kind == BYE ? BYE_REC : ANS_REC;
}

/* fix_byte takes the next byte of a goodbye, a question or an answer from p; false when the
 * record is malformed (then nothing after it on that stream can be read). */
static bool fix_byte(const tutti__liveness_t *l, peer_t *p, unsigned char b)
{
    const int len = fix_len(p->fix_kind);
    p->fix[len - p->fix_left--] = b;
    if (p->fix_left > 0)
        return true;
    if (p->fix_kind == BYE) {
        /* The count first, then the state that publishes it (tutti__live_left_calls). A second
         * goodbye, or one from a rank found dead, changes nothing. */
        if (p->state == PEER_ALIVE) {
            p->bye_calls = get64(p->fix);
            __atomic_store_n(&p->state, PEER_LEFT, __ATOMIC_RELEASE);
        }
        return true;
    }
    if (p->fix_kind == ASK) {
        answer(l, p, get64(p->fix));
        return true;
    }
    int state = p->fix[8];
    if (state < TUTTI__LIVE_POSTED || state > TUTTI__LIVE_GONE)
        return false;
    p->ans_seq = get64(p->fix);
    p->ans_count = state == TUTTI__LIVE_POSTED ? get64(p->fix + 9) : 0;
    p->ans_info = state == TUTTI__LIVE_POSTED ? get64(p->fix + 17) : 0;
    p->ans_state = state;
    return true;
}

/* mail_byte takes the next byte of a mail record from p; false when the record is malformed
 * (then nothing after it on that stream can be read). */
static bool mail_byte(const tutti__liveness_t *l, peer_t *p, unsigned char b)
{
    if (p->mhgot < MAIL_HDR) {
        p->mhdr[p->mhgot++] = b;
        if (p->mhgot < MAIL_HDR)
            return true;
        uint32_t len = (uint32_t)p->mhdr[1] | (uint32_t)p->mhdr[2] << 8 |
                       (uint32_t)p->mhdr[3] << 16 | (uint32_t)p->mhdr[4] << 24;
        if (p->mhdr[0] >= TUTTI__LIVE_MAIL_KINDS || len > l->mail_cap)
            return false;
        if (p->mbuf == NULL && (p->mbuf = malloc(l->mail_cap)) == NULL)
            return false;
        p->mneed = len;
        p->mgot = 0;
        if (len > 0)
            return true;
    } else {
        p->mbuf[p->mgot++] = b;
        if (p->mgot < p->mneed)
            return true;
    }
    /* Whole: it becomes its kind's last record (the buffers swap; nothing is copied). */
    int k = p->mhdr[0];
    unsigned char *prev = p->box[k];
    p->box[k] = p->mbuf;
    p->mbuf = prev;
    p->box_len[k] = p->mneed;
    p->box_gen[k]++;
    p->in_mail = false;
    return true;
}

/* take reads n bytes that p sent: goodbyes, heartbeats, failure notices and mail; false when
 * they do not parse. */
static bool take(const tutti__liveness_t *l, peer_t *p, const unsigned char *b, size_t n)
{
    /* A silence is seen only by reads that found nothing: the link is read only inside waits,
     * so a long gap between reads (compute between steps) is no silence of the peer's. */
    double now = tutti__now(), before, empty;
    __atomic_load(&p->heard, &before, __ATOMIC_RELAXED);
    __atomic_load(&p->empty_at, &empty, __ATOMIC_RELAXED);
    if (beating(l) && before > 0 && empty - before > TUTTI__LIVE_SILENCE_S)
        __atomic_store(&p->resumed, &now, __ATOMIC_RELAXED);
    __atomic_store(&p->heard, &now, __ATOMIC_RELAXED);
    for (size_t i = 0; i < n; i++) {
        if (p->in_mail) {
            if (!mail_byte(l, p, b[i]))
                return false;
        } else if (p->fix_left > 0) {
            if (!fix_byte(l, p, b[i]))
                return false;
        } else if (p->rec_left > 0) {
            p->rec[FAIL_REC - p->rec_left--] = b[i];
            if (p->rec_left == 0 && p->fail_status == 0) {
                uint64_t seq = 0;
                for (int k = 8; k >= 1; k--)
                    seq = seq << 8 | p->rec[k];
                p->fail_seq = seq;
                p->fail_relayed = (p->rec[0] & FAIL_RELAYED) != 0;
                uint32_t b1 = 0;
                for (int k = 12; k >= 9; k--)
                    b1 = b1 << 8 | p->rec[k];
                p->fail_blame = b1 >= 1 && b1 <= INT32_MAX ? (int)(b1 - 1) : -1;
                int code = p->rec[0] & ~FAIL_RELAYED;
                __atomic_store_n(&p->fail_status, code ? -code : -1, __ATOMIC_RELEASE);
            }
        } else if (b[i] == FAIL) {
            p->rec_left = FAIL_REC;
        } else if (b[i] == MAIL) {
            p->in_mail = true;
            p->mhgot = 0;
        } else if (b[i] == ASK || b[i] == ANSWER || b[i] == BYE) {
            p->fix_kind = b[i];
            p->fix_left = (unsigned char)fix_len(b[i]);
        }
    }
    return true;
}

/* drain reads what peer r has sent (non-blocking) and updates its state. Caller holds l->mu. */
static void drain(tutti__liveness_t *l, int r)
{
    peer_t *p = &l->peers[r];
    while (p->fd >= 0) {
        char buf[256];
        ssize_t n = recv(p->fd, buf, sizeof buf, 0);
        bool garbled = false;
        if (n > 0 && !(garbled = !take(l, p, (const unsigned char *)buf, (size_t)n)))
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            double now = tutti__now();
            __atomic_store(&p->empty_at, &now, __ATOMIC_RELAXED);
            return;
        }
        if (n < 0 && errno == EINTR)
            continue;
        /* EOF or a reset: fine after a goodbye, death without one. A stream that does not parse
         * cannot be read on: the peer runs another tutti, or is broken; taken for dead. */
        int err = errno;
        close(p->fd);
        p->fd = -1;
        if (garbled)
            TUTTI__LOG(TUTTI__LOG_WARN, "rank %d: rank %d (pid %d) sent a malformed record on "
                       "its liveness link; it is taken for dead (do all ranks run the same "
                       "tutti?)", l->rank, r, p->pid);
        if (p->state == PEER_ALIVE || garbled) {
            __atomic_store_n(&p->state, PEER_DEAD, __ATOMIC_RELEASE);
            TUTTI__LOG(TUTTI__LOG_INFO, "rank %d: rank %d (pid %d) closed its liveness link "
                       "without a goodbye (%s)", l->rank, r, p->pid,
                       garbled ? "malformed record" : n == 0 ? "end of stream" : strerror(err));
            int low = __atomic_load_n(&l->lowest_dead, __ATOMIC_RELAXED);
            if (low < 0 || r < low)
                __atomic_store_n(&l->lowest_dead, r, __ATOMIC_RELEASE);
        }
    }
}

/* poll_peers polls the open connections for up to ms and drains the readable ones; with
 * want_out, connections whose goodbye is unsent also wait for room to send. Holds l->mu. */
static void poll_peers(tutti__liveness_t *l, int ms, bool want_out)
{
    int n = 0;
    for (int r = 0; r < l->size; r++)
        if (l->peers[r].fd >= 0) {
            l->pfd[n] = (struct pollfd){.fd = l->peers[r].fd, .events = POLLIN};
            if (want_out && !l->peers[r].bye_sent)
                l->pfd[n].events |= POLLOUT;
            l->pfd_rank[n++] = r;
        }
    if (n == 0) {
        if (ms > 0)
            tutti__sleep_us((unsigned)ms * 1000u);
        return;
    }
    int ready = poll(l->pfd, (nfds_t)n, ms);
    if (ready < 0)
        return;
    double now = tutti__now();
    for (int i = 0; i < n; i++) {
        if (ready > 0 && (l->pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
            drain(l, l->pfd_rank[i]);
        else /* looked, and found nothing: a silence is seen only this way (take) */
            __atomic_store(&l->peers[l->pfd_rank[i]].empty_at, &now, __ATOMIC_RELAXED);
    }
}

/* send_byes sends the goodbye to every peer that has not had it. It carries the number of
 * calls this rank numbered, read once: the process group numbers no more once its end began.
 * Holds l->mu. */
static void send_byes(tutti__liveness_t *l)
{
    if (!l->bye_made) {
        l->bye[0] = BYE;
        put64(l->bye + 1, __atomic_load_n(&l->calls.next, __ATOMIC_ACQUIRE));
        l->bye_made = true;
    }
    for (int r = 0; r < l->size; r++) {
        peer_t *p = &l->peers[r];
        if (p->fd < 0 || p->bye_sent)
            continue;
        ssize_t n = send(p->fd, l->bye, sizeof l->bye, MSG_NOSIGNAL | MSG_DONTWAIT);
        /* EAGAIN: retried by the wait; any other error: the peer is gone, nothing to tell. A
         * part sent is finished as send_whole finishes a record (or the link is shut). */
        if (n > 0 && (size_t)n < sizeof l->bye &&
            tutti__sock_send(p->fd, (const char *)l->bye + n, sizeof l->bye - (size_t)n,
                             tutti__now() + 1.0) != 0)
            shutdown(p->fd, SHUT_RDWR);
        if (n > 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            p->bye_sent = true;
    }
}

/* ---- creation ------------------------------------------------------------------------------- */

typedef struct pending {
    int fd;
    size_t got;
    uint32_t hello[4]; /* magic, rank, nonce (high, low) */
} pending_t;

/* take_hello reads what has come of p's hello (its socket does not block): false while it is
 * incomplete; true once it ended, p's fd then either a peer's (*have counts it) or closed. */
static bool take_hello(tutti__liveness_t *l, pending_t *p, uint64_t nonce, int *have)
{
    ssize_t n = recv(p->fd, (char *)p->hello + p->got, sizeof p->hello - p->got, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return false;
    bool ok = n > 0;
    if (ok)
        p->got += (size_t)n;
    if (ok && p->got < sizeof p->hello)
        return false;
    int r = ok ? (int)ntohl(p->hello[1]) : -1;
    uint64_t got = (uint64_t)ntohl(p->hello[2]) << 32 | ntohl(p->hello[3]);
    if (ok && (ntohl(p->hello[0]) != HELLO_MAGIC || got != nonce || r <= l->rank ||
               r >= l->size || l->peers[r].fd >= 0)) {
        TUTTI__LOG(TUTTI__LOG_WARN, "rank %d: dropped a stray connection on the liveness port "
                   "(claimed rank %d)", l->rank, r);
        ok = false;
    }
    if (ok) {
        l->peers[r].fd = p->fd;
        (*have)++;
    } else {
        close(p->fd);
    }
    p->fd = -1;
    return true;
}

/* compact drops the ended entries of pend (fd -1); returns how many are left. */
static int compact(pending_t *pend, int npend)
{
    int k = 0;
    for (int i = 0; i < npend; i++)
        if (pend[i].fd >= 0)
            pend[k++] = pend[i];
    return k;
}

/* accept_higher takes the higher ranks' connections. Strangers may connect too (any local user,
 * or the network across nodes): at most expect + 8 connections wait for their hello at once.
 * A peer sends its hello at once, so before one of them is dropped to make room, every waiting
 * one's hello is read, and of those still silent the oldest goes: a peer queued behind a flood
 * of silent connections was dropped unread, and the job failed at its timeout. */
static tutti_status_t accept_higher(tutti__liveness_t *l, int lfd, uint64_t nonce,
                                    tutti__bootstrap_t *bs, double start)
{
    double deadline = bs->deadline;
    int expect = l->size - 1 - l->rank, have = 0;
    pending_t *pend = calloc((size_t)expect + 8, sizeof *pend);
    struct pollfd *pfd = calloc((size_t)expect + 9, sizeof *pfd);
    int npend = 0, cap = expect + 8;
    tutti_status_t st = TUTTI_OK;
    if (pend == NULL || pfd == NULL) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "rank %d: out of memory for the liveness mesh",
                              l->rank);
        goto out;
    }
    long late_ms = 0; /* fault injection: a rank descheduled before it accepts */
    if ((st = tutti__env_long("TUTTI_FAULT_LIVE_ACCEPT_MS", 0, 10000, &late_ms)) < 0)
        goto out;
    if (late_ms > 0)
        tutti__sleep_us((unsigned)late_ms * 1000u);
    while (have < expect) {
        int ms = tutti__sock_ms_until(deadline, 200);
        if ((st = tutti__bs_cancelled(bs)) < 0)
            goto out;
        if (ms == 0) {
            char list[256];
            list_peers(l, l->rank + 1, unconnected, list, sizeof list);
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "bootstrap: rank %d waited %.3g s for rank(s) %s (of %d) to open "
                                  "their liveness connections; they never did: a rank died or is "
                                  "stuck, or a firewall blocks TCP between the hosts",
                                  l->rank, tutti__now() - start, list, l->size);
            goto out;
        }
        pfd[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < npend; i++)
            pfd[i + 1] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
        if (poll(pfd, (nfds_t)npend + 1, ms) <= 0)
            continue;
        for (int i = 0; i < npend; i++)
            if (pfd[i + 1].revents)
                (void)take_hello(l, &pend[i], nonce, &have);
        npend = compact(pend, npend);
        while (have < expect) {
            int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0)
                break;
            if (npend == cap) {
                for (int i = 0; i < npend; i++)
                    (void)take_hello(l, &pend[i], nonce, &have);
                npend = compact(pend, npend);
            }
            if (npend == cap) { /* the oldest silent one makes room (else the oldest) */
                int v = 0;
                while (v < npend && pend[v].got > 0)
                    v++;
                if (v == npend)
                    v = 0;
                close(pend[v].fd);
                memmove(pend + v, pend + v + 1, (size_t)(npend - 1 - v) * sizeof *pend);
                npend--;
            }
            pend[npend++] = (pending_t){.fd = fd};
            /* a peer's hello is often there already: read it before more strangers come */
            if (take_hello(l, &pend[npend - 1], nonce, &have))
                npend--;
        }
    }
out:
    for (int i = 0; i < npend; i++)
        close(pend[i].fd);
    free(pend);
    free(pfd);
    return st;
}

tutti_status_t tutti__live_create(tutti__bootstrap_t *bs, const char *ip, int extra,
                                  tutti__liveness_t **out)
{
    *out = NULL;
    double start = tutti__now();
    int size = bs->size, rank = bs->rank, lfd = -1;
    char *recs = NULL;
    tutti_status_t st = TUTTI_OK;
    tutti__liveness_t *l = calloc(1, sizeof *l);
    if (l == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "rank %d: out of memory", rank);
    l->rank = rank;
    l->size = size;
    l->mail_cap = 1024 + 4 * (size_t)size;
    l->lowest_dead = -1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->beat_mu, NULL);
    pthread_cond_init(&l->beat_cv, NULL);
    l->peers = calloc((size_t)size, sizeof *l->peers);
    l->pfd = calloc((size_t)size, sizeof *l->pfd);
    l->pfd_rank = calloc((size_t)size, sizeof *l->pfd_rank);
    recs = calloc((size_t)size, REC_LEN);
    if (l->peers == NULL || l->pfd == NULL || l->pfd_rank == NULL || recs == NULL) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "rank %d: out of memory for the liveness "
                              "mesh of %d ranks", rank, size);
        goto fail;
    }
    for (int r = 0; r < size; r++)
        l->peers[r].fd = -1;

    /* Listen before publishing: a peer may connect the moment it reads our record. */
    struct sockaddr_storage sa;
    socklen_t salen;
    int rc = resolve(ip, 0, &sa, &salen);
    if (rc != 0) {
        st = tutti__set_error(TUTTI_ERR_BOOTSTRAP, "rank %d: \"%s\" is not an IP address to "
                              "listen on for the liveness mesh: %s", rank, ip, gai_strerror(rc));
        goto fail;
    }
    lfd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int ferr = lfd < 0 && (errno == EMFILE || errno == ENFILE) ? errno : 0;
    if (ferr == 0 && (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, salen) < 0 ||
                      listen(lfd, 4096) < 0 || getsockname(lfd, (struct sockaddr *)&sa, &salen) < 0)) {
        st = tutti__set_error(TUTTI_ERR_BOOTSTRAP, "rank %d cannot listen on %s for the liveness "
                              "mesh: %s", rank, ip, strerror(errno));
        goto fail;
    }
    if (ferr == 0) {
        /* A soft limit below the hard one is raised first: a job of a thousand ranks needs as
         * many descriptors on every rank, past the usual soft limit of 1024. */
        unsigned long long open_now;
        struct rlimit rl;
        int more = size - 1 + (extra > 0 ? extra : 0);
        (void)tutti__fds_make_room((unsigned long long)more, "the liveness mesh", &open_now, &rl);
        ferr = fds_available(lfd, more);
    }
    int port = ntohs(sa.ss_family == AF_INET ? ((struct sockaddr_in *)&sa)->sin_port
                                             : ((struct sockaddr_in6 *)&sa)->sin6_port);
    uint64_t nonce = make_nonce();
    char mine[REC_LEN] = {0};
    if (ferr != 0) { /* the peers learn it from the record, and fail now, not at the deadline */
        struct rlimit rl = {0};
        getrlimit(RLIMIT_NOFILE, &rl);
        snprintf(mine, sizeof mine, "! %d %llu %d", ferr, (unsigned long long)rl.rlim_cur,
                 size - 1 + (extra > 0 ? extra : 0));
    } else
        snprintf(mine, sizeof mine, "%s %d %d %llu", ip, port, (int)getpid(),
                 (unsigned long long)nonce);
    TUTTI__CHECK_GOTO(tutti__bs_allgather(bs, mine, REC_LEN, recs), st, fail);

    char pip[REC_LEN];
    int pport;
    unsigned long long pnonce;
    for (int r = 0; r < size; r++) {
        const char *rec = recs + (size_t)r * REC_LEN;
        unsigned long long lim;
        int err, need;
        if (memchr(rec, '\0', REC_LEN) != NULL && sscanf(rec, "! %d %llu %d", &err, &lim, &need) == 3) {
            st = tutti__set_error(TUTTI_ERR_SYSTEM,
                                  "rank %d cannot open the %d more descriptors that its liveness "
                                  "mesh and ofi connections need (%s): its limit of open files "
                                  "(RLIMIT_NOFILE, ulimit -n) is %llu: raise it%s",
                                  r, need, strerror(err), lim, r == rank ? "" : " on that rank");
            goto fail;
        }
        if (memchr(rec, '\0', REC_LEN) == NULL ||
            sscanf(rec, "%95s %d %d %llu", pip, &pport, &l->peers[r].pid, &pnonce) != 4) {
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP, "bootstrap: rank %d got a garbled "
                                  "liveness address from rank %d: do all ranks run the same "
                                  "tutti?", rank, r);
            goto fail;
        }
    }

    /* Connect down, accept up: every pair gets one connection and nobody waits in a cycle,
     * because a connect completes in the peer's backlog before it calls accept. */
    for (int r = 0; r < rank; r++) {
        const char *rec = recs + (size_t)r * REC_LEN;
        sscanf(rec, "%95s %d %*d %llu", pip, &pport, &pnonce);
        struct sockaddr_storage pa;
        socklen_t palen;
        int err = 0;
        if ((rc = resolve(pip, pport, &pa, &palen)) != 0) {
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP, "bootstrap: rank %d published \"%s\", not "
                                  "an address: %s", r, pip, gai_strerror(rc));
            goto fail;
        }
        tutti_status_t why = TUTTI_OK;
        int fd = connect_by(&pa, palen, bs, &err, &why);
        uint32_t hello[4] = {htonl(HELLO_MAGIC), htonl((uint32_t)rank),
                             htonl((uint32_t)(pnonce >> 32)), htonl((uint32_t)pnonce)};
        if (fd >= 0 && (err = tutti__sock_send(fd, hello, sizeof hello, bs->deadline)) != 0) {
            close(fd);
            fd = -1;
        }
        if (fd < 0 && err == ECANCELED && why < 0) {
            st = why; /* the text is the cancel's */
            goto fail;
        }
        if (fd < 0) {
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "bootstrap: rank %d could not open its liveness connection to "
                                  "rank %d at %s:%d (%s): rank %d died, a firewall blocks TCP "
                                  "between the hosts, or rank %d published an address this rank "
                                  "cannot reach (is TUTTI_SOCKET_IFNAME the same on every rank?)",
                                  rank, r, pip, pport, strerror(err), r, r);
            goto fail;
        }
        l->peers[r].fd = fd;
    }
    TUTTI__CHECK_GOTO(accept_higher(l, lfd, nonce, bs, start), st, fail);
    close(lfd);
    lfd = -1;
    for (int r = 0; r < size; r++) {
        l->peers[r].heard = tutti__now();
        if (l->peers[r].fd >= 0)
            set_keepalive(l->peers[r].fd);
    }
    free(recs);
    reg_add(l);
    *out = l;
    return TUTTI_OK;
fail:
    if (lfd >= 0)
        close(lfd);
    free(recs);
    if (l->peers)
        for (int r = 0; r < size; r++)
            if (l->peers[r].fd >= 0)
                close(l->peers[r].fd);
    free(l->peers);
    free(l->pfd);
    free(l->pfd_rank);
    pthread_mutex_destroy(&l->mu);
    pthread_mutex_destroy(&l->beat_mu);
    pthread_cond_destroy(&l->beat_cv);
    free(l);
    return st;
}

/* ---- use ------------------------------------------------------------------------------------ */

static tutti_status_t report_dead(const tutti__liveness_t *l, int *dead)
{
    int low = __atomic_load_n(&l->lowest_dead, __ATOMIC_ACQUIRE);
    if (low < 0)
        return TUTTI_OK;
    *dead = low;
    return tutti__set_error(TUTTI_ERR_PEER_FAILED,
                            "rank %d (pid %d) closed its connection to rank %d without a goodbye: "
                            "it died or was killed", low, l->peers[low].pid, l->rank);
}

tutti_status_t tutti__live_check(tutti__liveness_t *l, int *dead)
{
    if (l == NULL || l->forked)
        return TUTTI_OK;
    /* Several threads may check at once; one polling is enough, the others report its result. */
    if (pthread_mutex_trylock(&l->mu) == 0) {
        poll_peers(l, 0, false);
        pthread_mutex_unlock(&l->mu);
    }
    return report_dead(l, dead);
}

tutti_status_t tutti__live_check_now(tutti__liveness_t *l, int *dead)
{
    if (l == NULL || l->forked)
        return TUTTI_OK;
    pthread_mutex_lock(&l->mu);
    poll_peers(l, 0, false);
    pthread_mutex_unlock(&l->mu);
    return report_dead(l, dead);
}

bool tutti__live_left(const tutti__liveness_t *l, int rank)
{
    if (l == NULL || rank < 0 || rank >= l->size)
        return false;
    return __atomic_load_n(&l->peers[rank].state, __ATOMIC_ACQUIRE) == PEER_LEFT;
}

uint64_t tutti__live_left_calls(const tutti__liveness_t *l, int rank)
{
    if (!tutti__live_left(l, rank)) /* an acquire: bye_calls was written before it */
        return UINT64_MAX;
    return l->peers[rank].bye_calls;
}

bool tutti__live_dead(const tutti__liveness_t *l, int rank)
{
    if (l == NULL || rank < 0 || rank >= l->size)
        return false;
    return __atomic_load_n(&l->peers[rank].state, __ATOMIC_ACQUIRE) == PEER_DEAD;
}

int tutti__live_pid(const tutti__liveness_t *l, int rank)
{
    if (l == NULL || rank < 0 || rank >= l->size)
        return -1;
    return l->peers[rank].pid;
}

tutti_status_t tutti__live_goodbye(tutti__liveness_t *l, bool wait, double deadline)
{
    if (l == NULL || l->forked)
        return TUTTI_OK;
    double start = tutti__now();
    tutti_status_t st = TUTTI_OK;
    pthread_mutex_lock(&l->mu);
    send_byes(l);
    /* Read what peers sent, so that closing later sends them a FIN rather than a reset. */
    poll_peers(l, 0, false);
    while (wait) {
        bool pending = false;
        for (int r = 0; r < l->size; r++) {
            peer_t *p = &l->peers[r];
            if (r != l->rank && (p->state == PEER_ALIVE || (p->fd >= 0 && !p->bye_sent)))
                pending = true;
        }
        if (!pending)
            break;
        int ms = tutti__sock_ms_until(deadline, 100);
        if (ms == 0) {
            char list[256];
            int n = list_peers(l, 0, still_alive, list, sizeof list);
            st = tutti__set_error(TUTTI_ERR_TIMEOUT,
                                  "rank %d waited %.3g s for rank(s) %s (of %d) to destroy the "
                                  "communicator too; they neither did nor died: every rank must "
                                  "call tutti_comm_destroy, with its communicators in the same "
                                  "order as the others (a rank waiting in the destroy of another "
                                  "one waits for this), or raise TUTTI_TIMEOUT if they are only "
                                  "slow",
                                  l->rank, tutti__now() - start, n ? list : "?", l->size);
            break;
        }
        poll_peers(l, ms, true);
        send_byes(l);
    }
    pthread_mutex_unlock(&l->mu);
    return st;
}

/* ---- heartbeats and failure notices -------------------------------------------------------- */

/* send_all sends the len bytes at b to every connected peer, without waiting: a full buffer
 * means a peer that has not read for a long time (stopped), which the bytes would not help.
 * Holds l->mu, so that no connection is closed (and its descriptor reused) meanwhile. */
static void send_all(tutti__liveness_t *l, const void *b, size_t len)
{
    for (int r = 0; r < l->size; r++)
        if (l->peers[r].fd >= 0)
            send_whole(l->peers[r].fd, b, len);
}

static int64_t coarse_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A heartbeat later than this after the one before means the process did not run meanwhile:
 * two periods, well below the silence after which peers call it unresponsive (4 periods or
 * more: create.c), so that a stop they noticed is always noticed here too. */
static int64_t stall_ms(const tutti__liveness_t *l)
{
    return (int64_t)(l->beat_period * 2000) + 20;
}

static void *beat_main(void *arg)
{
    tutti__liveness_t *l = arg;
    const char beat = BEAT;
    pthread_mutex_lock(&l->beat_mu);
    __atomic_store_n(&l->beat_at_ms, coarse_ms(), __ATOMIC_RELAXED);
    while (!l->beat_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + l->beat_period;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&l->beat_cv, &l->beat_mu, &ts);
        if (l->beat_stop)
            break;
        int64_t now = coarse_ms();
        if (now - __atomic_load_n(&l->beat_at_ms, __ATOMIC_RELAXED) > stall_ms(l))
            __atomic_store_n(&l->stalled_at_ms, now, __ATOMIC_RELAXED);
        __atomic_store_n(&l->beat_at_ms, now, __ATOMIC_RELAXED);
        pthread_mutex_lock(&l->mu);
        send_all(l, &beat, 1);
        /* and read what came: a peer's waiter may ask which call this rank posted while this
         * rank computes, outside any wait of its own (answer) */
        poll_peers(l, 0, false);
        pthread_mutex_unlock(&l->mu);
    }
    pthread_mutex_unlock(&l->beat_mu);
    return NULL;
}

tutti_status_t tutti__live_beat(tutti__liveness_t *l, double period_s)
{
    if (l == NULL || l->size < 2)
        return TUTTI_OK;
    l->beat_period = period_s;
    l->beat_at_ms = coarse_ms();
    /* on before the thread starts, so that its first reads see it (TSan saw the store race the
     * thread's first take()) */
    __atomic_store_n(&l->beat_on, true, __ATOMIC_RELEASE);
    int rc = pthread_create(&l->beat, NULL, beat_main, l);
    char why[512];
    if (rc != 0) {
        __atomic_store_n(&l->beat_on, false, __ATOMIC_RELEASE);
        return tutti__set_error(TUTTI_ERR_SYSTEM, "rank %d cannot start its heartbeat thread: %s",
                                l->rank, tutti__thread_fail_why(rc, why, sizeof why));
    }
    pthread_setname_np(l->beat, "tutti-beat");
    return TUTTI_OK;
}

double tutti__live_stalled(const tutti__liveness_t *l)
{
    if (l == NULL || !beating(l))
        return 0;
    int64_t now = coarse_ms(), beat = __atomic_load_n(&l->beat_at_ms, __ATOMIC_RELAXED);
    if (__builtin_expect(now - beat <= stall_ms(l), 1) &&
        now - __atomic_load_n(&l->stalled_at_ms, __ATOMIC_RELAXED) > 2000)
        return 0;
    return (double)(now - beat > stall_ms(l) ? now - beat : stall_ms(l)) / 1000.0;
}

static void beat_stop(tutti__liveness_t *l)
{
    if (!beating(l) || l->forked)
        return;
    pthread_mutex_lock(&l->beat_mu);
    l->beat_stop = true;
    pthread_cond_broadcast(&l->beat_cv);
    pthread_mutex_unlock(&l->beat_mu);
    pthread_join(l->beat, NULL);
    __atomic_store_n(&l->beat_on, false, __ATOMIC_RELEASE);
}

bool tutti__live_silent(tutti__liveness_t *l, double limit_s, int from, int *rank,
                        double *silent_s)
{
    if (l == NULL || l->forked || !beating(l) || !(limit_s > 0))
        return false;
    double now = tutti__now();
    for (int r = from < 0 ? 0 : from; r < l->size; r++) {
        const peer_t *p = &l->peers[r];
        if (r == l->rank || __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != PEER_ALIVE)
            continue;
        double heard;
        __atomic_load(&p->heard, &heard, __ATOMIC_RELAXED);
        double s = now - heard;
        if (s > limit_s) {
            *rank = r;
            *silent_s = s;
            return true;
        }
    }
    return false;
}

double tutti__live_resumed(const tutti__liveness_t *l, int rank)
{
    if (l == NULL || rank < 0 || rank >= l->size)
        return 0.0;
    double t;
    __atomic_load(&l->peers[rank].resumed, &t, __ATOMIC_RELAXED);
    return t;
}

double tutti__live_left_grace(const tutti__liveness_t *l, int rank)
{
    const double after_silence = 30.0;
    double resumed = tutti__live_resumed(l, rank);
    return resumed > 0 && resumed > tutti__now() - after_silence ? after_silence : 1.0;
}

bool tutti__live_troubled(tutti__liveness_t *l, double since, int *rank)
{
    if (l == NULL || l->forked || !beating(l))
        return false;
    for (int r = 0; r < l->size; r++) {
        const peer_t *p = &l->peers[r];
        if (r == l->rank || __atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != PEER_ALIVE)
            continue;
        double heard, empty, resumed;
        __atomic_load(&p->heard, &heard, __ATOMIC_RELAXED);
        __atomic_load(&p->empty_at, &empty, __ATOMIC_RELAXED);
        __atomic_load(&p->resumed, &resumed, __ATOMIC_RELAXED);
        if (empty - heard > TUTTI__LIVE_SILENCE_S || (resumed > 0 && resumed >= since)) {
            *rank = r;
            return true;
        }
    }
    return false;
}

void tutti__live_notify_failed(tutti__liveness_t *l, tutti_status_t st, uint64_t seq,
                               bool relayed, int blame)
{
    if (l == NULL || l->forked)
        return;
    unsigned char rec[1 + FAIL_REC] = {
        FAIL, (unsigned char)((-(int)st & 0x7f) | (relayed ? FAIL_RELAYED : 0))};
    for (int k = 0; k < 8; k++)
        rec[2 + k] = (unsigned char)(seq >> (8 * k));
    uint32_t b1 = blame >= 0 ? (uint32_t)blame + 1u : 0u;
    for (int k = 0; k < 4; k++)
        rec[10 + k] = (unsigned char)(b1 >> (8 * k));
    pthread_mutex_lock(&l->mu);
    send_all(l, rec, sizeof rec);
    pthread_mutex_unlock(&l->mu);
}

bool tutti__live_failed_upto(const tutti__liveness_t *l, uint64_t upto, int *rank,
                             tutti_status_t *st, uint64_t *seq, int *blame)
{
    if (l == NULL)
        return false;
    int found = -1;
    for (int r = 0; r < l->size; r++) {
        int f = __atomic_load_n(&l->peers[r].fail_status, __ATOMIC_ACQUIRE);
        if (f == 0 || l->peers[r].fail_seq > upto)
            continue;
        /* The rank that found the failure, where its notice has come, not one that passed it on
         * (fail_relayed was written before fail_status was released). */
        if (found < 0 || (l->peers[found].fail_relayed && !l->peers[r].fail_relayed))
            found = r;
    }
    if (found < 0)
        return false;
    *rank = found;
    *st = (tutti_status_t)__atomic_load_n(&l->peers[found].fail_status, __ATOMIC_ACQUIRE);
    *seq = l->peers[found].fail_seq;
    if (blame != NULL) /* what a peer wrote: a rank of this communicator, or none */
        *blame = l->peers[found].fail_blame < l->size ? l->peers[found].fail_blame : -1;
    return true;
}

bool tutti__live_told(const tutti__liveness_t *l, int rank)
{
    return l != NULL && rank >= 0 && rank < l->size &&
           __atomic_load_n(&l->peers[rank].fail_status, __ATOMIC_ACQUIRE) != 0;
}

int tutti__live_blame(const tutti__liveness_t *l, int rank)
{
    if (!tutti__live_told(l, rank))
        return -1;
    int b = l->peers[rank].fail_blame; /* written before fail_status was released */
    return b >= 0 && b < l->size ? b : -1;
}

bool tutti__live_failed(const tutti__liveness_t *l, int *rank, tutti_status_t *st, uint64_t *seq)
{
    return tutti__live_failed_upto(l, UINT64_MAX, rank, st, seq, NULL);
}

/* ---- calls ---- */

tutti__live_calls_t *tutti__live_calls(tutti__liveness_t *l) { return l != NULL ? &l->calls : NULL; }

void tutti__live_ask(tutti__liveness_t *l, int rank, uint64_t seq)
{
    if (l == NULL || l->forked || rank < 0 || rank >= l->size || rank == l->rank)
        return;
    unsigned char rec[1 + ASK_REC] = {ASK};
    put64(rec + 1, seq);
    pthread_mutex_lock(&l->mu);
    if (l->peers[rank].fd >= 0)
        send_whole(l->peers[rank].fd, rec, sizeof rec);
    pthread_mutex_unlock(&l->mu);
}

int tutti__live_answer(tutti__liveness_t *l, int rank, uint64_t seq, uint64_t *count,
                       uint64_t *info)
{
    if (l == NULL || rank < 0 || rank >= l->size || rank == l->rank)
        return TUTTI__LIVE_NO_ANSWER;
    pthread_mutex_lock(&l->mu);
    const peer_t *p = &l->peers[rank];
    int state = p->ans_state != 0 && p->ans_seq == seq ? p->ans_state : TUTTI__LIVE_NO_ANSWER;
    *count = p->ans_count;
    *info = p->ans_info;
    pthread_mutex_unlock(&l->mu);
    return state;
}

/* ---- mail ------------------------------------------------------------------------------------ */

tutti_status_t tutti__live_mail_send(tutti__liveness_t *l, int rank, int kind, const void *buf,
                                     size_t len, double deadline)
{
    if (rank < 0 || rank >= l->size || rank == l->rank || kind < 0 ||
        kind >= TUTTI__LIVE_MAIL_KINDS || len > l->mail_cap)
        return tutti__set_error(TUTTI_ERR_INTERNAL,
                                "liveness mail of kind %d, %zu bytes (at most %zu), to rank %d of "
                                "%d: bad arguments",
                                kind, len, l->mail_cap, rank, l->size);
    unsigned char hdr[1 + MAIL_HDR] = {MAIL, (unsigned char)kind, (unsigned char)len,
                                       (unsigned char)(len >> 8), (unsigned char)(len >> 16),
                                       (unsigned char)(len >> 24)};
    struct iovec iov[2] = {{hdr, sizeof hdr}, {(void *)buf, len}};
    int err = ENOTCONN;
    /* Under the lock, whole: a heartbeat or notice must not land inside the record. */
    pthread_mutex_lock(&l->mu);
    peer_t *p = &l->peers[rank];
    if (p->fd >= 0 && !l->forked) {
        err = tutti__sock_sendv(p->fd, iov, len > 0 ? 2 : 1, deadline);
        if (err != 0) /* a part may have gone: what follows would be read as its tail */
            shutdown(p->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&l->mu);
    if (err == 0)
        return TUTTI_OK;
    return tutti__set_error(err == ETIMEDOUT ? TUTTI_ERR_TIMEOUT : TUTTI_ERR_PEER_FAILED,
                            "rank %d could not send %zu bytes to rank %d over the liveness link: "
                            "%s",
                            l->rank, len, rank,
                            err == ENOTCONN ? "the link is closed (that rank died or left)"
                                            : strerror(err));
}

uint64_t tutti__live_mail_read(tutti__liveness_t *l, int rank, int kind, void *buf, size_t cap,
                               size_t *len)
{
    *len = 0;
    if (rank < 0 || rank >= l->size || kind < 0 || kind >= TUTTI__LIVE_MAIL_KINDS)
        return 0;
    pthread_mutex_lock(&l->mu);
    const peer_t *p = &l->peers[rank];
    uint64_t gen = p->box_gen[kind];
    if (gen > 0 && cap > 0) {
        *len = p->box_len[kind] < cap ? p->box_len[kind] : cap;
        memcpy(buf, p->box[kind], *len);
    }
    pthread_mutex_unlock(&l->mu);
    return gen;
}

void tutti__live_wait(tutti__liveness_t *l, int ms)
{
    if (l->forked)
        return;
    pthread_mutex_lock(&l->mu);
    poll_peers(l, ms, false);
    pthread_mutex_unlock(&l->mu);
}

size_t tutti__live_mail_cap(const tutti__liveness_t *l) { return l->mail_cap; }

void tutti__live_destroy(tutti__liveness_t *l)
{
    if (l == NULL)
        return;
    beat_stop(l);
    reg_remove(l);
    if (!l->forked) {
        pthread_mutex_lock(&l->mu);
        poll_peers(l, 0, false); /* empty our buffers: a close then sends FIN, not a reset */
        for (int r = 0; r < l->size; r++)
            if (l->peers[r].fd >= 0)
                close(l->peers[r].fd);
        pthread_mutex_unlock(&l->mu);
        pthread_mutex_destroy(&l->mu);
    }
    pthread_mutex_destroy(&l->beat_mu);
    pthread_cond_destroy(&l->beat_cv);
    for (int r = 0; r < l->size; r++) {
        free(l->peers[r].mbuf);
        for (int k = 0; k < TUTTI__LIVE_MAIL_KINDS; k++)
            free(l->peers[r].box[k]);
    }
    free(l->peers);
    free(l->pfd);
    free(l->pfd_rank);
    free(l);
}
