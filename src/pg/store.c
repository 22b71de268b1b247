/* store.c: the TCP rendezvous store: rank 0 serves a small key-value store from a thread, and
 * every rank (rank 0 too) talks to it as a client through a tutti_oob_t. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bootstrap.h"

/*
 * Wire format: every message is a header of four big-endian u32 {magic, type, a, b} followed by
 * a body. Requests: HELLO (a = rank, b = size), SET (a = key length, b = value length; key then
 * value), GET (a = key length; key), CLOSE (no reply). Replies: OK, VALUE (b = length; value),
 * NOTFOUND, ERROR (b = length; text). One request is in flight per client, so the server reads
 * a client only once its previous reply has gone out.
 */
#define MAGIC 0x54545331u /* "TTS1" */
#define HDR 16
#define KEY_MAX 256
#define VAL_MAX (1u << 20)
#define ERRTEXT_MAX 512

enum { REQ_HELLO = 1, REQ_SET, REQ_GET, REQ_CLOSE };
enum { REP_OK = 100, REP_VALUE, REP_NOTFOUND, REP_ERROR };

/* ---- server (rank 0) ------------------------------------------------------------------------ */

typedef struct entry {
    struct entry *next;
    char *key; /* NUL-terminated */
    void *val;
    uint32_t vlen;
} entry_t;

typedef struct conn {
    int fd;
    int rank;         /* -1 until HELLO */
    bool drop;        /* protocol error: close once the reply has gone */
    uint8_t hdr[HDR];
    size_t hgot;
    uint32_t type, a, b;
    uint8_t *body;    /* the request body being read */
    size_t bneed, bgot;
    uint8_t *out;     /* the reply being written */
    size_t olen, ooff;
} conn_t;

typedef struct server {
    int lfd, efd;
    int port, size;
    double deadline;
    conn_t *conns;
    size_t nconns, cap;
    entry_t **tab;
    size_t nbuckets, nentries;
    unsigned char *done; /* per rank: sent CLOSE, or hung up after HELLO */
    int ndone;
    pthread_t thr;
} server_t;

static uint64_t hash(const char *k)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *k; k++)
        h = (h ^ (uint8_t)*k) * 1099511628211ull;
    return h;
}

static entry_t *lookup(server_t *sv, const char *key)
{
    for (entry_t *e = sv->tab[hash(key) % sv->nbuckets]; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

/* Keys grow with ranks * rounds; doubling keeps lookups O(1) as a job of thousands of ranks
 * piles them up. */
static void maybe_grow(server_t *sv)
{
    if (sv->nentries < sv->nbuckets * 2)
        return;
    size_t nb = sv->nbuckets * 4;
    entry_t **t = calloc(nb, sizeof *t);
    if (t == NULL)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < sv->nbuckets; i++)
        for (entry_t *e = sv->tab[i], *n; e; e = n) {
            n = e->next;
            size_t j = hash(e->key) % nb;
            e->next = t[j];
            t[j] = e;
        }
    free(sv->tab);
    sv->tab = t;
    sv->nbuckets = nb;
}

/* set takes ownership of key and val; false when out of memory. */
static bool set(server_t *sv, char *key, void *val, uint32_t vlen)
{
    entry_t *e = lookup(sv, key);
    if (e != NULL) {
        free(key);
        free(e->val);
        e->val = val;
        e->vlen = vlen;
        return true;
    }
    if ((e = malloc(sizeof *e)) == NULL)
        return false;
    size_t i = hash(key) % sv->nbuckets;
    *e = (entry_t){.next = sv->tab[i], .key = key, .val = val, .vlen = vlen};
    sv->tab[i] = e;
    sv->nentries++;
    maybe_grow(sv);
    return true;
}

static void put_hdr(uint8_t *p, uint32_t type, uint32_t a, uint32_t b)
{
    uint32_t w[4] = {htonl(MAGIC), htonl(type), htonl(a), htonl(b)};
    memcpy(p, w, HDR);
}

static void get_hdr(const uint8_t *p, uint32_t w[4])
{
    memcpy(w, p, HDR);
    for (int i = 0; i < 4; i++)
        w[i] = ntohl(w[i]);
}

/* reply queues one reply on c (sent as the socket allows); on no memory the client is dropped. */
static void reply(conn_t *c, uint32_t type, const void *body, uint32_t blen)
{
    free(c->out);
    c->out = malloc(HDR + (size_t)blen);
    c->olen = c->ooff = 0;
    if (c->out == NULL) {
        c->drop = true;
        return;
    }
    put_hdr(c->out, type, 0, blen);
    if (blen)
        memcpy(c->out + HDR, body, blen);
    c->olen = HDR + (size_t)blen;
}

static void reply_error(conn_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reply_error(conn_t *c, const char *fmt, ...)
{
    char text[ERRTEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    reply(c, REP_ERROR, text, (uint32_t)strlen(text));
    c->drop = true;
    TUTTI__LOG(TUTTI__LOG_WARN, "rendezvous store: %s", text);
}

static void mark_done(server_t *sv, conn_t *c)
{
    if (c->rank >= 0 && !sv->done[c->rank]) {
        sv->done[c->rank] = 1;
        sv->ndone++;
    }
}

/* handle acts on one complete request of c (its body in c->body, owned by handle). */
static void handle(server_t *sv, conn_t *c)
{
    uint8_t *body = c->body;
    c->body = NULL;
    if (c->type != REQ_HELLO && c->rank < 0) {
        reply_error(c, "a client sent a request before its hello (not a tutti rank?)");
        free(body);
        return;
    }
    switch (c->type) {
    case REQ_HELLO: {
        int r = (int)c->a, n = (int)c->b;
        if (c->rank >= 0)
            reply_error(c, "rank %d said hello twice", c->rank);
        else if (n != sv->size)
            reply_error(c,
                        "the rendezvous store on port %d serves a job of %d ranks, but rank %d "
                        "was started with a world size of %d: two jobs share this port, or "
                        "WORLD_SIZE differs between ranks",
                        sv->port, sv->size, r, n);
        else if (r < 0 || r >= sv->size)
            reply_error(c, "rank %d is out of range for a job of %d ranks", r, sv->size);
        else if (sv->done[r])
            reply_error(c, "rank %d already connected to the rendezvous store on port %d: two "
                           "processes were given the same rank", r, sv->port);
        else {
            bool dup = false;
            for (size_t i = 0; i < sv->nconns; i++)
                dup |= sv->conns[i].rank == r;
            if (dup)
                reply_error(c, "rank %d already connected to the rendezvous store on port %d: "
                               "two processes were given the same rank", r, sv->port);
            else {
                c->rank = r;
                reply(c, REP_OK, NULL, 0);
            }
        }
        break;
    }
    case REQ_SET: {
        char *key = malloc(c->a + 1);
        void *val = malloc(c->b ? c->b : 1);
        if (key == NULL || val == NULL) {
            free(key);
            free(val);
            reply_error(c, "rank 0 ran out of memory storing a value of %u bytes", c->b);
            break;
        }
        memcpy(key, body, c->a);
        key[c->a] = '\0';
        memcpy(val, body + c->a, c->b);
        if (!set(sv, key, val, c->b)) {
            free(key);
            free(val);
            reply_error(c, "rank 0 ran out of memory storing a value of %u bytes", c->b);
        } else
            reply(c, REP_OK, NULL, 0);
        break;
    }
    case REQ_GET: {
        char key[KEY_MAX + 1];
        memcpy(key, body, c->a);
        key[c->a] = '\0';
        entry_t *e = lookup(sv, key);
        if (e)
            reply(c, REP_VALUE, e->val, e->vlen);
        else
            reply(c, REP_NOTFOUND, NULL, 0);
        break;
    }
    case REQ_CLOSE:
        mark_done(sv, c);
        break;
    }
    free(body);
}

/* on_header checks a complete header and prepares to read the body; false drops the client. */
static bool on_header(conn_t *c)
{
    uint32_t w[4];
    get_hdr(c->hdr, w);
    c->type = w[1];
    c->a = w[2];
    c->b = w[3];
    if (w[0] != MAGIC) {
        reply_error(c, "a client spoke another protocol (not a tutti rank, or another version)");
        return false;
    }
    switch (c->type) {
    case REQ_HELLO:
    case REQ_CLOSE:
        c->bneed = 0;
        break;
    case REQ_SET:
    case REQ_GET:
        if (c->a == 0 || c->a > KEY_MAX) {
            reply_error(c, "a key of %u bytes is outside 1..%d", c->a, KEY_MAX);
            return false;
        }
        if (c->type == REQ_SET && c->b > VAL_MAX) {
            reply_error(c, "a value of %u bytes is over the store's limit of %u", c->b, VAL_MAX);
            return false;
        }
        c->bneed = c->a + (c->type == REQ_SET ? (size_t)c->b : 0);
        break;
    default:
        reply_error(c, "unknown request %u", c->type);
        return false;
    }
    c->bgot = 0;
    if (c->bneed && (c->body = malloc(c->bneed)) == NULL) {
        reply_error(c, "rank 0 ran out of memory reading a request of %zu bytes", c->bneed);
        return false;
    }
    return true;
}

/* on_readable reads what c has sent and handles each complete request; false: hung up. */
static bool on_readable(server_t *sv, conn_t *c)
{
    while (c->olen == 0 && !c->drop) {
        ssize_t n;
        if (c->hgot < HDR)
            n = recv(c->fd, c->hdr + c->hgot, HDR - c->hgot, 0);
        else
            n = recv(c->fd, c->body + c->bgot, c->bneed - c->bgot, 0);
        if (n == 0)
            return false;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        if (c->hgot < HDR) {
            c->hgot += (size_t)n;
            if (c->hgot < HDR)
                continue;
            if (!on_header(c))
                return true; /* the error reply goes out, then the client is dropped */
        } else
            c->bgot += (size_t)n;
        if (c->bgot == c->bneed) {
            c->hgot = 0;
            handle(sv, c);
        }
    }
    return true;
}

/* on_writable sends what it can of c's reply; false: the client is gone or to be dropped. */
static bool on_writable(conn_t *c)
{
    while (c->ooff < c->olen) {
        ssize_t n = send(c->fd, c->out + c->ooff, c->olen - c->ooff, MSG_NOSIGNAL);
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        c->ooff += (size_t)n;
    }
    free(c->out);
    c->out = NULL;
    c->olen = c->ooff = 0;
    return !c->drop;
}

static void conn_free(conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->body);
    free(c->out);
    c->fd = -1;
    c->body = NULL;
    c->out = NULL;
}

static void accept_all(server_t *sv)
{
    for (;;) {
        int fd = accept4(sv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN, or a connection that died in the backlog */
        if (sv->nconns == sv->cap) {
            size_t cap = sv->cap ? sv->cap * 2 : 16;
            conn_t *cs = realloc(sv->conns, cap * sizeof *cs);
            if (cs == NULL) {
                close(fd);
                return;
            }
            sv->conns = cs;
            sv->cap = cap;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        sv->conns[sv->nconns++] = (conn_t){.fd = fd, .rank = -1};
    }
}

/* in_use tells whether a rank that said hello has neither closed nor hung up. */
static bool in_use(const server_t *sv)
{
    for (size_t i = 0; i < sv->nconns; i++)
        if (sv->conns[i].rank >= 0 && !sv->done[sv->conns[i].rank])
            return true;
    return false;
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
    while (sv->ndone < sv->size) {
        double now = tutti__now();
        if (now >= sv->deadline && (now >= sv->deadline + GRACE_S || !in_use(sv))) {
            TUTTI__LOG(TUTTI__LOG_INFO,
                       "rendezvous store on port %d: deadline passed with %d of %d ranks done; "
                       "stopping", sv->port, sv->ndone, sv->size);
            break;
        }
        double left = (now < sv->deadline ? sv->deadline : sv->deadline + GRACE_S) - now;
        if (pcap < sv->nconns + 2) {
            pcap = sv->nconns + 16;
            struct pollfd *p = realloc(pfd, pcap * sizeof *p);
            if (p == NULL) {
                TUTTI__LOG(TUTTI__LOG_ERROR, "rendezvous store: out of memory; stopping");
                break;
            }
            pfd = p;
        }
        pfd[0] = (struct pollfd){.fd = sv->lfd, .events = POLLIN};
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
            conn_t *c = &sv->conns[i];
            short re = pfd[i + 2].revents;
            if (!re)
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
            if (!ok) {
                mark_done(sv, c); /* a rank that hung up needs the store no more */
                conn_free(c);
            }
        }
        size_t k = 0;
        for (size_t i = 0; i < sv->nconns; i++)
            if (sv->conns[i].fd >= 0)
                sv->conns[k++] = sv->conns[i];
        sv->nconns = k;
        if (pfd[0].revents)
            accept_all(sv);
    }
    free(pfd);
    for (size_t i = 0; i < sv->nconns; i++)
        conn_free(&sv->conns[i]);
    sv->nconns = 0;
    close(sv->lfd);
    sv->lfd = -1;
    return NULL;
}

static void server_free(server_t *sv)
{
    if (sv == NULL)
        return;
    for (size_t i = 0; i < sv->nconns; i++)
        conn_free(&sv->conns[i]);
    free(sv->conns);
    if (sv->tab)
        for (size_t i = 0; i < sv->nbuckets; i++)
            for (entry_t *e = sv->tab[i], *n; e; e = n) {
                n = e->next;
                free(e->key);
                free(e->val);
                free(e);
            }
    free(sv->tab);
    free(sv->done);
    if (sv->lfd >= 0)
        close(sv->lfd);
    if (sv->efd >= 0)
        close(sv->efd);
    free(sv);
}

static tutti_status_t server_start(int port, int size, double deadline, server_t **out)
{
    server_t *sv = calloc(1, sizeof *sv);
    if (sv == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "rank 0: out of memory for the store");
    sv->lfd = sv->efd = -1;
    sv->port = port;
    sv->size = size;
    sv->deadline = deadline;
    sv->nbuckets = 64;
    sv->tab = calloc(sv->nbuckets, sizeof *sv->tab);
    sv->done = calloc((size_t)size, 1);
    if (sv->tab == NULL || sv->done == NULL) {
        server_free(sv);
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "rank 0: out of memory for the store");
    }
    tutti_status_t st;
    sv->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sv->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (sv->lfd < 0 || sv->efd < 0) {
        st = tutti__set_error(TUTTI_ERR_SYSTEM,
                              "rank 0 cannot create the rendezvous store's socket: %s",
                              strerror(errno));
        goto fail;
    }
    /* SO_REUSEADDR lets a quick rerun bind while the last run's connections sit in TIME_WAIT;
     * a live listener on the port still makes bind fail, as it should. */
    int one = 1;
    setsockopt(sv->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(sv->lfd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        if (errno == EADDRINUSE)
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "rank 0 cannot serve the rendezvous store on port %d: address "
                                  "already in use (another job or a previous run holds it); set "
                                  "MASTER_PORT to a free port", port);
        else
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "rank 0 cannot serve the rendezvous store on port %d: %s; set "
                                  "MASTER_PORT to a free port", port, strerror(errno));
        goto fail;
    }
    if (port == 0) { /* an ephemeral port (sub-communicators): report the one we got */
        socklen_t sl = sizeof sa;
        getsockname(sv->lfd, (struct sockaddr *)&sa, &sl);
        sv->port = ntohs(sa.sin_port);
    }
    if (listen(sv->lfd, 4096) < 0) {
        st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                              "rank 0 cannot listen on port %d for the rendezvous store: %s",
                              port, strerror(errno));
        goto fail;
    }
    int rc = pthread_create(&sv->thr, NULL, serve, sv);
    if (rc != 0) {
        st = tutti__set_error(TUTTI_ERR_SYSTEM,
                              "rank 0 cannot start the rendezvous store's thread: %s",
                              strerror(rc));
        goto fail;
    }
    *out = sv;
    return TUTTI_OK;
fail:
    server_free(sv);
    return st;
}

/* server_stop joins the thread (after waking it if now is set) and frees everything. */
static void server_stop(server_t *sv, bool now)
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

/* ---- client (every rank) -------------------------------------------------------------------- */

struct tutti__store {
    int rank, size;
    int fd;
    int port;
    double deadline;
    char addr[256];
    char local_ip[INET_ADDRSTRLEN];
    pthread_mutex_t mu; /* one request at a time on fd */
    server_t *srv;      /* rank 0 only */
};

/* io_deadline bounds one request: the server answers at once, so only a hung or vanished
 * rank 0 takes long; the store's own deadline applies, but never less than 10 s. */
static double io_deadline(const tutti__store_t *s)
{
    double d = tutti__now() + 10.0;
    return s->deadline > d ? s->deadline : d;
}

static int wait_fd(int fd, short ev, double deadline)
{
    for (;;) {
        double left = deadline - tutti__now();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = ev};
        int n = poll(&p, 1, left > 1.0 ? 1000 : (int)(left * 1000.0) + 1);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

static tutti_status_t io_fail(tutti__store_t *s, const char *what, int err)
{
    return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                            "rank %d lost the rendezvous store at %s:%d while %s (%s): rank 0 "
                            "exited, failed, or stopped serving at its deadline",
                            s->rank, s->addr, s->port, what, err ? strerror(err) : "timed out");
}

static tutti_status_t send_iov(tutti__store_t *s, struct iovec *iov, int niov, double deadline)
{
    while (niov > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
        ssize_t n = sendmsg(s->fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return io_fail(s, "sending a request", errno);
            int w = wait_fd(s->fd, POLLOUT, deadline);
            if (w <= 0)
                return io_fail(s, "sending a request", w < 0 ? errno : 0);
            continue;
        }
        while (niov > 0 && (size_t)n >= iov->iov_len) {
            n -= (ssize_t)iov->iov_len;
            iov++;
            niov--;
        }
        if (niov > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
    return TUTTI_OK;
}

/* recv_all reads len bytes into buf (NULL: discard them). */
static tutti_status_t recv_all(tutti__store_t *s, void *buf, size_t len, double deadline)
{
    char sink[4096];
    while (len > 0) {
        void *p = buf ? buf : sink;
        size_t want = buf ? len : (len < sizeof sink ? len : sizeof sink);
        ssize_t n = recv(s->fd, p, want, 0);
        if (n == 0)
            return io_fail(s, "waiting for a reply", ECONNRESET);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return io_fail(s, "waiting for a reply", errno);
            int w = wait_fd(s->fd, POLLIN, deadline);
            if (w <= 0)
                return io_fail(s, "waiting for a reply", w < 0 ? errno : 0);
            continue;
        }
        len -= (size_t)n;
        if (buf)
            buf = (char *)buf + n;
    }
    return TUTTI_OK;
}

/*
 * rpc sends one request and reads its reply: *rtype gets the reply's type; a VALUE's first
 * cap bytes go to buf and its full length to *vlen. An ERROR reply becomes TUTTI_ERR_BOOTSTRAP
 * with the server's text. Callers hold s->mu.
 */
static tutti_status_t rpc(tutti__store_t *s, uint32_t type, uint32_t a, uint32_t b,
                          const void *key, const void *val, uint32_t *rtype, void *buf, size_t cap,
                          size_t *vlen)
{
    double deadline = io_deadline(s);
    uint8_t hdr[HDR];
    put_hdr(hdr, type, a, b);
    struct iovec iov[3] = {{hdr, HDR}, {(void *)key, key ? a : 0}, {(void *)val, val ? b : 0}};
    TUTTI__CHECK(send_iov(s, iov, 3, deadline));
    uint32_t w[4];
    TUTTI__CHECK(recv_all(s, hdr, HDR, deadline));
    get_hdr(hdr, w);
    if (w[0] != MAGIC || w[1] < REP_OK || w[1] > REP_ERROR || w[3] > VAL_MAX)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "rank %d got a garbled reply from the rendezvous store at %s:%d: "
                                "is MASTER_PORT a tutti store (and the same tutti version)?",
                                s->rank, s->addr, s->port);
    *rtype = w[1];
    if (w[1] == REP_ERROR) {
        char text[ERRTEXT_MAX];
        size_t n = w[3] < sizeof text - 1 ? w[3] : sizeof text - 1;
        TUTTI__CHECK(recv_all(s, text, n, deadline));
        TUTTI__CHECK(recv_all(s, NULL, w[3] - n, deadline));
        text[n] = '\0';
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP, "rank %d, rendezvous store at %s:%d: %s",
                                s->rank, s->addr, s->port, text);
    }
    size_t n = w[3] < cap ? w[3] : cap;
    if (vlen)
        *vlen = w[3];
    TUTTI__CHECK(recv_all(s, buf, n, deadline));
    return recv_all(s, NULL, w[3] - n, deadline);
}

static int check_key(tutti__store_t *s, const char *key)
{
    size_t k = strlen(key);
    if (k == 0 || k > KEY_MAX) {
        tutti__set_error(TUTTI_ERR_BOOTSTRAP, "rank %d: store key \"%.40s...\" has %zu bytes; "
                         "keys have 1 to %d (a bug in tutti)", s->rank, key, k, KEY_MAX);
        return -1;
    }
    return 0;
}

static int oob_put(void *ctx, const char *key, const void *value, size_t len)
{
    tutti__store_t *s = ctx;
    if (check_key(s, key) < 0)
        return -1;
    if (len > VAL_MAX) {
        tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                         "rank %d cannot store %zu bytes under \"%s\": the rendezvous store "
                         "takes values of up to %u bytes", s->rank, len, key, VAL_MAX);
        return -1;
    }
    uint32_t rt = 0;
    pthread_mutex_lock(&s->mu);
    tutti_status_t st = rpc(s, REQ_SET, (uint32_t)strlen(key), (uint32_t)len, key, value, &rt,
                            NULL, 0, NULL);
    pthread_mutex_unlock(&s->mu);
    if (st == TUTTI_OK && rt != REP_OK)
        st = tutti__set_error(TUTTI_ERR_BOOTSTRAP, "rank %d: the rendezvous store answered a "
                              "store request with reply %u", s->rank, rt);
    return st == TUTTI_OK ? 0 : -1;
}

/* The store answers a missing key at once; the client polls, quickly at first (most keys
 * arrive within milliseconds), backing off to 20 ms so that many waiting ranks do not flood
 * rank 0. */
static int oob_get(void *ctx, const char *key, void *buf, size_t cap, size_t *len, double timeout_s)
{
    tutti__store_t *s = ctx;
    if (check_key(s, key) < 0)
        return -1;
    double end = tutti__now() + (timeout_s > 0 ? timeout_s : 0);
    unsigned pause_us = 1000;
    for (;;) {
        uint32_t rt = 0;
        size_t vlen = 0;
        pthread_mutex_lock(&s->mu);
        tutti_status_t st = rpc(s, REQ_GET, (uint32_t)strlen(key), 0, key, NULL, &rt, buf, cap,
                                &vlen);
        pthread_mutex_unlock(&s->mu);
        if (st != TUTTI_OK)
            return -1;
        if (rt == REP_VALUE) {
            *len = vlen;
            return 0;
        }
        if (rt != REP_NOTFOUND) {
            tutti__set_error(TUTTI_ERR_BOOTSTRAP, "rank %d: the rendezvous store answered a "
                             "lookup with reply %u", s->rank, rt);
            return -1;
        }
        double left = end - tutti__now();
        if (left <= 0)
            return 1;
        unsigned us = pause_us;
        if ((double)us > left * 1e6)
            us = (unsigned)(left * 1e6) + 1;
        tutti__sleep_us(us);
        pause_us = pause_us * 2 > 20000 ? 20000 : pause_us * 2;
    }
}

/* try_connect makes one attempt at every address of addr:port; returns a connected fd, or -1
 * with *why set to the last failure. */
static int try_connect(const char *addr, int port, double deadline, char *why, size_t whylen,
                       bool *fatal)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(addr, ps, &hints, &res);
    if (rc != 0) {
        snprintf(why, whylen, "cannot resolve \"%s\": %s", addr, gai_strerror(rc));
        *fatal = rc != EAI_AGAIN; /* a name that does not exist will not start to */
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            snprintf(why, whylen, "socket: %s", strerror(errno));
            break;
        }
        int err = 0;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
            err = errno;
            if (err == EINPROGRESS) {
                /* Bound one attempt, so that a lost SYN is retried rather than waited out; but
                 * give the last one time to learn its fate, which is what the message says. */
                double now = tutti__now(), d = now + 2.0;
                d = d < deadline ? d : deadline;
                int w = wait_fd(fd, POLLOUT, d > now + 0.1 ? d : now + 0.1);
                socklen_t el = sizeof err;
                if (w > 0)
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                else
                    err = w < 0 ? errno : ETIMEDOUT;
            }
        }
        if (err != 0) {
            snprintf(why, whylen, "%s", strerror(err));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

static void lowercase_first(char *s)
{
    if (s[0] >= 'A' && s[0] <= 'Z')
        s[0] = (char)(s[0] - 'A' + 'a');
}

tutti_status_t tutti__store_open(int rank, int size, const char *addr, int port, double deadline,
                                 tutti__store_t **out)
{
    *out = NULL;
    if (size < 1 || rank < 0 || rank >= size || port < (rank == 0 ? 0 : 1) || port > 65535 ||
        addr == NULL || strlen(addr) >= 256)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "rendezvous store: rank %d of %d at %s:%d is not a valid setting "
                                "(0 <= rank < size, 1 <= port <= 65535; 0 for rank 0 only)",
                                rank, size, addr ? addr : "(null)", port);
    tutti__store_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "rank %d: out of memory", rank);
    s->rank = rank;
    s->size = size;
    s->fd = -1;
    s->port = port;
    s->deadline = deadline;
    snprintf(s->addr, sizeof s->addr, "%s", addr);
    pthread_mutex_init(&s->mu, NULL);
    tutti_status_t st = TUTTI_OK;
    if (rank == 0) {
        TUTTI__CHECK_GOTO(server_start(port, size, deadline, &s->srv), st, fail);
        port = s->port = s->srv->port;
    }

    double start = tutti__now();
    char why[256] = "connection refused";
    unsigned pause_ms = 20;
    for (;;) {
        bool fatal = false;
        s->fd = try_connect(addr, port, deadline, why, sizeof why, &fatal);
        if (s->fd >= 0)
            break;
        lowercase_first(why);
        if (fatal) {
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "rank %d could not reach the rendezvous store at %s:%d (%s): "
                                  "set MASTER_ADDR to rank 0's host name or address",
                                  rank, addr, port, why);
            goto fail;
        }
        double left = deadline - tutti__now();
        if (left <= 0) {
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "rank %d could not reach the rendezvous store at %s:%d within "
                                  "%.3g s (%s): is rank 0 running, and are MASTER_ADDR/MASTER_PORT "
                                  "the same on every rank?",
                                  rank, addr, port, deadline - start, why);
            goto fail;
        }
        /* Refused is normal while rank 0 starts; retry at a pace that costs rank 0 nothing. */
        tutti__sleep_us((unsigned)((left * 1000.0 < pause_ms ? left * 1000.0 : pause_ms) * 1000.0));
        pause_ms = pause_ms < 50 ? pause_ms + 10 : 50;
    }
    int one = 1;
    setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in me;
    socklen_t ml = sizeof me;
    if (getsockname(s->fd, (struct sockaddr *)&me, &ml) < 0 ||
        inet_ntop(AF_INET, &me.sin_addr, s->local_ip, sizeof s->local_ip) == NULL)
        snprintf(s->local_ip, sizeof s->local_ip, "127.0.0.1");

    uint32_t rt = 0;
    TUTTI__CHECK_GOTO(rpc(s, REQ_HELLO, (uint32_t)rank, (uint32_t)size, NULL, NULL, &rt, NULL, 0,
                          NULL),
                      st, fail);
    if (rt != REP_OK) {
        st = tutti__set_error(TUTTI_ERR_BOOTSTRAP, "rank %d: the rendezvous store at %s:%d "
                              "answered hello with reply %u", rank, addr, port, rt);
        goto fail;
    }
    TUTTI__LOG(TUTTI__LOG_DEBUG, "rank %d: connected to the rendezvous store at %s:%d from %s",
               rank, addr, port, s->local_ip);
    *out = s;
    return TUTTI_OK;
fail:
    if (s->fd >= 0)
        close(s->fd);
    server_stop(s->srv, true);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return st;
}

tutti_oob_t tutti__store_oob(tutti__store_t *s)
{
    return (tutti_oob_t){.ctx = s, .put = oob_put, .get = oob_get};
}

const char *tutti__store_local_ip(const tutti__store_t *s) { return s->local_ip; }

int tutti__store_port(const tutti__store_t *s) { return s->port; }

void tutti__store_close(tutti__store_t *s)
{
    if (s == NULL)
        return;
    /* Close often runs on an error path: keep the caller's error text. */
    char saved[TUTTI__ERRLEN];
    memcpy(saved, tutti__tls_error(), TUTTI__ERRLEN);
    /* CLOSE has no reply: after it the server owes this rank nothing. */
    uint8_t hdr[HDR];
    put_hdr(hdr, REQ_CLOSE, 0, 0);
    struct iovec iov = {hdr, HDR};
    pthread_mutex_lock(&s->mu);
    double d = tutti__now() + 1.0;
    if (send_iov(s, &iov, 1, d) != TUTTI_OK)
        TUTTI__LOG(TUTTI__LOG_DEBUG, "rank %d: closing the store: %s", s->rank,
                   tutti__tls_error());
    pthread_mutex_unlock(&s->mu);
    close(s->fd);
    /* Rank 0 serves until every rank has closed (or the deadline passes). */
    server_stop(s->srv, false);
    pthread_mutex_destroy(&s->mu);
    free(s);
    memcpy(tutti__tls_error(), saved, TUTTI__ERRLEN);
}
