/* store_server.c: the rendezvous store's server: rank 0 serves the protocol of store_proto.c over
 * TCP from a thread of its own, answering every client from one poll() loop, with a bounded
 * number of clients still in their handshake, each with an idle deadline. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sock.h"
#include "store.h"
#include "store_impl.h"

/* Clients that have not passed their hello: at most PENDING_MAX at once (the oldest makes
 * room for a new one: a rank's handshake takes a round trip, a stranger's never ends), each
 * dropped PENDING_S after it connected. */
#define PENDING_MAX 64
#define PENDING_S 10.0
/* When accept() finds no file descriptor left and no stranger to drop, the listening socket
 * rests this long (the connection waits in the backlog) instead of being polled in a spin. */
#define ACCEPT_REST_S 0.1
/* An unauthenticated client this old has stalled: a rank's handshake takes milliseconds. */
#define STALE_S 1.0

struct tutti__store_server {
    int lfd, efd;
    double deadline;
    double rest_until;   /* the listening socket is not polled before this */
    int linger_ms;       /* a doomed store waits this long for ranks still to come (atomic) */
    bool warned_fds;
    tutti__store_core_t core;
    tutti__sconn_t *conns;
    size_t nconns, cap, npending;
    char secret_path[640]; /* a HOST job's secret file, removed when the server stops */
    pthread_t thr;
};
typedef struct tutti__store_server server_t;

static void conn_free(server_t *sv, tutti__sconn_t *c)
{
    if (c->fd < 0)
        return;
    if (c->rank < 0)
        sv->npending--;
    if (c->drop) {
        /* Read what the refused client sent after its header: closing with unread input
         * would reset the connection, and the client could lose the refusal's reason. */
        char sink[4096];
        for (int i = 0; i < 16 && recv(c->fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++)
            ;
    }
    tutti__store_conn_close(&sv->core, c);
    close(c->fd);
    c->fd = -1;
}

/* on_readable reads what c has sent and acts on each complete request; false: hung up. */
static bool on_readable(server_t *sv, tutti__sconn_t *c)
{
    for (;;) {
        uint8_t *p;
        size_t want;
        tutti__store_conn_want(c, &p, &want);
        if (want == 0)
            return true;
        bool was_pending = c->rank < 0;
        ssize_t n = recv(c->fd, p, want, 0);
        if (n == 0)
            return false;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        tutti__store_conn_got(&sv->core, c, (size_t)n);
        if (was_pending && c->rank >= 0)
            sv->npending--;
    }
}

/* on_writable sends what it can of c's reply; false: the client is gone or to be dropped. */
static bool on_writable(tutti__sconn_t *c)
{
    while (c->olen > 0) {
        ssize_t n = send(c->fd, c->out + c->ooff, c->olen - c->ooff, MSG_NOSIGNAL);
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        tutti__store_conn_sent(c, (size_t)n);
    }
    return !c->drop;
}

/* drop_oldest_pending closes the unauthenticated client that connected first, if it connected
 * at least min_age seconds before now; false if none. */
static bool drop_oldest_pending(server_t *sv, double now, double min_age)
{
    tutti__sconn_t *old = NULL;
    for (size_t i = 0; i < sv->nconns; i++)
        if (sv->conns[i].fd >= 0 && sv->conns[i].rank < 0 &&
            now - sv->conns[i].since >= min_age &&
            (old == NULL || sv->conns[i].since < old->since))
            old = &sv->conns[i];
    if (old == NULL)
        return false;
    conn_free(sv, old);
    return true;
}

static void accept_all(server_t *sv, double now)
{
    for (;;) {
        if (sv->npending >= PENDING_MAX)
            drop_oldest_pending(sv, now, 0.0);
        if (sv->nconns == sv->cap) {
            size_t cap = sv->cap ? sv->cap * 2 : 16;
            tutti__sconn_t *cs = realloc(sv->conns, cap * sizeof *cs);
            if (cs == NULL)
                return;
            sv->conns = cs;
            sv->cap = cap;
        }
        struct sockaddr_in peer;
        socklen_t plen = sizeof peer;
        int fd = accept4(sv->lfd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EINTR || e == ECONNABORTED || e == EPROTO)
                continue;
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
                /* No descriptor for the next client: make room by dropping a stranger that has
                 * idled, or rest (the listening socket stays readable, and polling it now would
                 * spin). Not a fresh one: accept fails so with an empty backlog too, and a rank
                 * dropped in the middle of its handshake comes back, to be dropped again. */
                if (drop_oldest_pending(sv, now, STALE_S))
                    continue;
                sv->rest_until = now + ACCEPT_REST_S;
                if (!sv->warned_fds) {
                    sv->warned_fds = true;
                    TUTTI__LOG(TUTTI__LOG_WARN,
                               "rendezvous store on port %d cannot accept a client: %s; retrying "
                               "every %g s (raise the open-file limit, ulimit -n)",
                               sv->core.port, strerror(e), ACCEPT_REST_S);
                }
            }
            return; /* EAGAIN: the backlog is empty */
        }
        /* A client from this host must prove the secret whatever the job; so must one whose
         * place cannot be told. */
        bool local = tutti__addr_local((struct sockaddr *)&peer, plen, true);
        tutti__sconn_t *c = &sv->conns[sv->nconns];
        if (!tutti__store_conn_open(&sv->core, c, fd, local, now)) {
            close(fd);
            continue;
        }
        tutti__sock_nodelay(fd);
        sv->nconns++;
        sv->npending++;
    }
}

/* in_use tells whether a rank that said hello has neither closed nor hung up. */
static bool in_use(const server_t *sv)
{
    for (size_t i = 0; i < sv->nconns; i++)
        if (sv->conns[i].rank >= 0 && !sv->core.done[sv->conns[i].rank])
            return true;
    return false;
}

/* expire drops the clients whose handshake has outlived PENDING_S; returns the time left to
 * the next such deadline (a large number when none is pending). */
static double expire(server_t *sv, double now)
{
    double next = 1e9;
    for (size_t i = 0; i < sv->nconns; i++) {
        tutti__sconn_t *c = &sv->conns[i];
        if (c->fd < 0 || c->rank >= 0)
            continue;
        if (now - c->since >= PENDING_S)
            conn_free(sv, c);
        else if (c->since + PENDING_S - now < next)
            next = c->since + PENDING_S - now;
    }
    return next;
}

static void compact(server_t *sv)
{
    size_t k = 0;
    for (size_t i = 0; i < sv->nconns; i++)
        if (sv->conns[i].fd >= 0)
            sv->conns[k++] = sv->conns[i];
    sv->nconns = k;
}

/*
 * The server answers every client from one poll() loop, so a slow or stuck client delays no
 * one. It stops when every rank has closed (or hung up), or when told to. Past the deadline it
 * stops as soon as no connected rank still uses it: the ranks' deadlines are close to rank 0's,
 * and their last look for a missing rank (to name it) comes right at it; GRACE_S bounds that.
 * On the way out it closes every connection, so that a rank still asking learns at once.
 */
#define GRACE_S 2.0
static void *serve(void *arg)
{
    server_t *sv = arg;
    struct pollfd *pfd = NULL;
    size_t pcap = 0;
    while (sv->core.ndone < sv->core.size) {
        double now = tutti__now();
        /* Doomed: the ranks still connected learn why and close; one that never came would
         * keep the store (and rank 0's tutti__store_close) waiting for its deadline. A rank
         * that starts late gets GRACE_S (or what tutti__store_linger set) to come and learn
         * it too. */
        double linger = __atomic_load_n(&sv->linger_ms, __ATOMIC_RELAXED) / 1000.0;
        if (sv->core.doomed && !in_use(sv) && now >= sv->core.doomed_at + linger) {
            TUTTI__LOG(TUTTI__LOG_INFO,
                       "rendezvous store on port %d: the rendezvous cannot end and no rank still "
                       "uses the store; stopping",
                       sv->core.port);
            break;
        }
        if (now >= sv->deadline && (now >= sv->deadline + GRACE_S || !in_use(sv))) {
            TUTTI__LOG(TUTTI__LOG_INFO,
                       "rendezvous store on port %d: deadline passed with %d of %d ranks done; "
                       "stopping", sv->core.port, sv->core.ndone, sv->core.size);
            break;
        }
        double left = (now < sv->deadline ? sv->deadline : sv->deadline + GRACE_S) - now;
        double next = expire(sv, now);
        compact(sv);
        if (next < left)
            left = next;
        bool resting = now < sv->rest_until;
        if (resting && sv->rest_until - now < left)
            left = sv->rest_until - now;
        if (pcap < sv->nconns + 2) {
            pcap = sv->nconns + 16;
            struct pollfd *p = realloc(pfd, pcap * sizeof *p);
            if (p == NULL) {
                TUTTI__LOG(TUTTI__LOG_ERROR, "rendezvous store: out of memory; stopping");
                break;
            }
            pfd = p;
        }
        /* A negative fd is skipped by poll: the listening socket while it rests. */
        pfd[0] = (struct pollfd){.fd = resting ? -1 : sv->lfd, .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = sv->efd, .events = POLLIN};
        for (size_t i = 0; i < sv->nconns; i++)
            pfd[i + 2] = (struct pollfd){.fd = sv->conns[i].fd,
                                         .events = sv->conns[i].olen ? POLLOUT : POLLIN};
        int ms = left > 1.0 ? 1000 : (int)(left * 1000.0) + 1;
        int n = poll(pfd, sv->nconns + 2, ms);
        if (n < 0 && errno != EINTR) {
            TUTTI__LOG(TUTTI__LOG_ERROR, "rendezvous store: poll failed: %s", strerror(errno));
            break;
        }
        if (n <= 0)
            continue;
        if (pfd[1].revents)
            break;
        size_t nc = sv->nconns;
        for (size_t i = 0; i < nc; i++) {
            tutti__sconn_t *c = &sv->conns[i];
            short re = pfd[i + 2].revents;
            if (!re || c->fd < 0)
                continue;
            bool ok = true;
            if (c->olen)
                ok = on_writable(c);
            else
                ok = on_readable(sv, c);
            /* A reply produced just now usually fits the socket buffer: send it at once. */
            if (ok && c->olen)
                ok = on_writable(c);
            if (ok && c->drop && c->olen == 0)
                ok = false;
            if (!ok && c->rank < 0 && !c->drop && c->peer_local)
                __atomic_add_fetch(&sv->core.unproven, 1, __ATOMIC_RELAXED);
            if (!ok)
                conn_free(sv, c);
        }
        compact(sv);
        /* Every rank is in and one is done with the store (its creation complete, or failed):
         * nobody needs the secret file any more, so a kill of rank 0 from now on leaves
         * nothing behind. Not at the last rank's hello: until a rank is done, a second rank 0
         * of the same session (another job on this port, whose ranks may have joined this one)
         * can still read it and tell this store (TUTTI__WIRE_RIVAL); and a rank's next
         * creation on this port comes only after it closed, so it still finds no file here.
         * Nor while a rank has yet to join: one that failed early serves the news to the late
         * ones, which must prove the secret to hear it. */
        if (sv->core.nadmitted == sv->core.size && sv->core.ndone > 0 &&
            sv->secret_path[0] != '\0') {
            tutti__secret_file_remove(sv->secret_path);
            sv->secret_path[0] = '\0';
        }
        if (pfd[0].revents)
            accept_all(sv, tutti__now());
    }
    free(pfd);
    for (size_t i = 0; i < sv->nconns; i++)
        conn_free(sv, &sv->conns[i]);
    sv->nconns = 0;
    tutti__secret_file_remove(sv->secret_path); /* before the port is free for another store */
    sv->secret_path[0] = '\0';
    close(sv->lfd);
    sv->lfd = -1;
    return NULL;
}

static void server_free(server_t *sv)
{
    if (sv == NULL)
        return;
    for (size_t i = 0; i < sv->nconns; i++)
        conn_free(sv, &sv->conns[i]);
    free(sv->conns);
    tutti__secret_file_remove(sv->secret_path);
    tutti__store_core_free(&sv->core);
    if (sv->lfd >= 0)
        close(sv->lfd);
    if (sv->efd >= 0)
        close(sv->efd);
    free(sv);
}

/* fd_room makes sure rank 0 may serve the store: a connection from each rank, the listening
 * socket, its wake-up descriptor and a few more; else the job fails now, naming the limit, and
 * not at its timeout with ranks that "never arrived" (a store at its limit evicted its own
 * ranks' connections to make room). What comes after the store (the liveness mesh) checks its
 * own room, and a shortfall there reaches every rank through the store at once: a limit that
 * let the store serve but not the mesh as well (2 ranks, ulimit -n 40) failed rank 0 alone
 * here, and the others waited out their timeout for a store that never came. */
static tutti_status_t fd_room(int size)
{
    unsigned long long open_now = 0, more = (unsigned long long)size + 8;
    struct rlimit rl;
    if (tutti__fds_make_room(more, "the rendezvous store of a job", &open_now, &rl))
        return TUTTI_OK;
    return tutti__set_error(TUTTI_ERR_SYSTEM,
                            "rank 0 cannot serve the rendezvous store for %d ranks: it needs "
                            "about %llu open files (%llu open now, %llu for the store, %llu to "
                            "spare), and its limit (ulimit -n) is %llu, hard limit %llu: raise "
                            "it to %llu or more",
                            size, open_now + more + TUTTI__FDS_HEADROOM, open_now, more,
                            TUTTI__FDS_HEADROOM, (unsigned long long)rl.rlim_cur,
                            (unsigned long long)rl.rlim_max,
                            open_now + more + TUTTI__FDS_HEADROOM);
}

tutti_status_t tutti__store_server_start(const struct sockaddr_in *bind_to, const char *name_ip,
                                         int size, const tutti__auth_t *auth, double deadline,
                                         server_t **out, bool *in_use)
{
    *in_use = false;
    TUTTI__CHECK(fd_room(size));
    int port = ntohs(bind_to->sin_port);
    server_t *sv = calloc(1, sizeof *sv);
    if (sv == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "rank 0: out of memory for the store");
    sv->lfd = sv->efd = -1;
    sv->deadline = deadline;
    sv->linger_ms = (int)(GRACE_S * 1000.0);
    if (!tutti__store_core_init(&sv->core, size, port, auth)) {
        server_free(sv);
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "rank 0: out of memory for the store");
    }
    tutti_status_t st;
    char where[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &bind_to->sin_addr, where, sizeof where);
    sv->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sv->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (sv->lfd < 0 || sv->efd < 0) {
        st = tutti__set_error(TUTTI_ERR_SYSTEM,
                              "rank 0 cannot create the rendezvous store's socket: %s",
                              strerror(errno));
        goto fail;
    }
    /* SO_REUSEADDR lets a quick rerun bind while the last run's connections sit in TIME_WAIT;
     * a live listener on the port still makes bind fail, as it should. But two sockets that
     * both set it may bind one port while neither listens yet (two jobs' rank 0s starting at
     * once): the loser finds out only at listen, and must not have touched the winner's
     * secret file before that. */
    int one = 1;
    setsockopt(sv->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc = bind(sv->lfd, (const struct sockaddr *)bind_to, sizeof *bind_to);
    if (rc == 0)
        rc = listen(sv->lfd, 4096);
    if (rc < 0) {
        *in_use = errno == EADDRINUSE;
        if (errno == EADDRINUSE)
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "rank 0 cannot serve the rendezvous store on %s port %d: address "
                                  "already in use (another job or a previous run holds it, or a "
                                  "second process of this job was given rank 0); set MASTER_PORT "
                                  "(or TUTTI_STORE_PORT) to a free port", where, port);
        else if (errno == EADDRNOTAVAIL)
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "rank 0 cannot serve the rendezvous store on %s: that is not an "
                                  "address of this host; set MASTER_ADDR to rank 0's host", where);
        else
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "rank 0 cannot serve the rendezvous store on %s port %d: %s; set "
                                  "MASTER_PORT (or TUTTI_STORE_PORT) to a free port", where, port,
                                  strerror(errno));
        goto fail;
    }
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    if (getsockname(sv->lfd, (struct sockaddr *)&sa, &sl) == 0)
        sv->core.port = port = ntohs(sa.sin_port); /* port 0: the one the kernel picked */
    /* A HOST job's secret is on disk before the store says anything: a rank that connects now
     * waits in the backlog until the serving thread, started below, sends its challenge, and
     * reads the file only after that. */
    if (auth->mode == TUTTI__AUTH_HOST)
        TUTTI__CHECK_GOTO(tutti__secret_file_write(name_ip, port, auth, sv->secret_path,
                                                   sizeof sv->secret_path),
                          st, fail);
    rc = pthread_create(&sv->thr, NULL, serve, sv);
    if (rc != 0) {
        char why[512];
        st = tutti__set_error(TUTTI_ERR_SYSTEM,
                              "rank 0 cannot start the rendezvous store's thread: %s",
                              tutti__thread_fail_why(rc, why, sizeof why));
        goto fail;
    }
    *out = sv;
    return TUTTI_OK;
fail:
    server_free(sv);
    return st;
}

int tutti__store_server_port(const server_t *sv) { return sv->core.port; }

unsigned tutti__store_server_unauthed(const server_t *sv)
{
    return sv != NULL ? __atomic_load_n(&sv->core.unauthed, __ATOMIC_RELAXED) : 0;
}

unsigned tutti__store_server_unproven(const server_t *sv)
{
    return sv != NULL ? __atomic_load_n(&sv->core.unproven, __ATOMIC_RELAXED) : 0;
}

void tutti__store_server_linger(server_t *sv, double seconds)
{
    if (sv != NULL)
        __atomic_store_n(&sv->linger_ms, (int)(seconds * 1000.0), __ATOMIC_RELAXED);
}

void tutti__store_server_stop(server_t *sv, bool now)
{
    if (sv == NULL)
        return;
    if (now) {
        uint64_t one = 1;
        ssize_t n = write(sv->efd, &one, sizeof one);
        (void)n;
    }
    pthread_join(sv->thr, NULL);
    server_free(sv);
}
