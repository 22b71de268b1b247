/* store_server.c: the rendezvous store's server: rank 0 serves a small key-value store over TCP
 * from a thread of its own, answering every client from one poll() loop. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sock.h"
#include "store.h"
#include "wire.h"

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
    uint8_t hdr[TUTTI__WIRE_HDR];
    size_t hgot;
    uint32_t type, a, b;
    uint8_t *body;    /* the request body being read */
    size_t bneed, bgot;
    uint8_t *out;     /* the reply being written */
    size_t olen, ooff;
} conn_t;

struct tutti__store_server {
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
};
typedef struct tutti__store_server server_t;

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

/* reply queues one reply on c (sent as the socket allows); on no memory the client is dropped. */
static void reply(conn_t *c, uint32_t type, const void *body, uint32_t blen)
{
    free(c->out);
    c->out = malloc(TUTTI__WIRE_HDR + (size_t)blen);
    c->olen = c->ooff = 0;
    if (c->out == NULL) {
        c->drop = true;
        return;
    }
    tutti__wire_put_hdr(c->out, type, 0, blen);
    if (blen)
        memcpy(c->out + TUTTI__WIRE_HDR, body, blen);
    c->olen = TUTTI__WIRE_HDR + (size_t)blen;
}

static void reply_error(conn_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reply_error(conn_t *c, const char *fmt, ...)
{
    char text[TUTTI__WIRE_ERRTEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    reply(c, TUTTI__REP_ERROR, text, (uint32_t)strlen(text));
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
    if (c->type != TUTTI__REQ_HELLO && c->rank < 0) {
        reply_error(c, "a client sent a request before its hello (not a tutti rank?)");
        free(body);
        return;
    }
    switch (c->type) {
    case TUTTI__REQ_HELLO: {
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
                reply(c, TUTTI__REP_OK, NULL, 0);
            }
        }
        break;
    }
    case TUTTI__REQ_SET: {
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
            reply(c, TUTTI__REP_OK, NULL, 0);
        break;
    }
    case TUTTI__REQ_GET: {
        char key[TUTTI__WIRE_KEY_MAX + 1];
        memcpy(key, body, c->a);
        key[c->a] = '\0';
        entry_t *e = lookup(sv, key);
        if (e)
            reply(c, TUTTI__REP_VALUE, e->val, e->vlen);
        else
            reply(c, TUTTI__REP_NOTFOUND, NULL, 0);
        break;
    }
    case TUTTI__REQ_CLOSE:
        mark_done(sv, c);
        break;
    }
    free(body);
}

/* on_header checks a complete header and prepares to read the body; false drops the client. */
static bool on_header(conn_t *c)
{
    uint32_t w[4];
    tutti__wire_get_hdr(c->hdr, w);
    c->type = w[1];
    c->a = w[2];
    c->b = w[3];
    if (w[0] != TUTTI__WIRE_MAGIC) {
        reply_error(c, "a client spoke another protocol (not a tutti rank, or another version)");
        return false;
    }
    switch (c->type) {
    case TUTTI__REQ_HELLO:
    case TUTTI__REQ_CLOSE:
        c->bneed = 0;
        break;
    case TUTTI__REQ_SET:
    case TUTTI__REQ_GET:
        if (c->a == 0 || c->a > TUTTI__WIRE_KEY_MAX) {
            reply_error(c, "a key of %u bytes is outside 1..%d", c->a, TUTTI__WIRE_KEY_MAX);
            return false;
        }
        if (c->type == TUTTI__REQ_SET && c->b > TUTTI__WIRE_VAL_MAX) {
            reply_error(c, "a value of %u bytes is over the store's limit of %u", c->b, TUTTI__WIRE_VAL_MAX);
            return false;
        }
        c->bneed = c->a + (c->type == TUTTI__REQ_SET ? (size_t)c->b : 0);
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
        if (c->hgot < TUTTI__WIRE_HDR)
            n = recv(c->fd, c->hdr + c->hgot, TUTTI__WIRE_HDR - c->hgot, 0);
        else
            n = recv(c->fd, c->body + c->bgot, c->bneed - c->bgot, 0);
        if (n == 0)
            return false;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        if (c->hgot < TUTTI__WIRE_HDR) {
            c->hgot += (size_t)n;
            if (c->hgot < TUTTI__WIRE_HDR)
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
        tutti__sock_nodelay(fd);
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

tutti_status_t tutti__store_server_start(int port, int size, double deadline, server_t **out)
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

int tutti__store_server_port(const server_t *sv) { return sv->port; }

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

