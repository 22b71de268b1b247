/* store_client.c: the rendezvous store's client: every rank (rank 0 too, which also starts the
 * server) connects, says hello, and stores and looks up keys through a tutti_oob_t. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../common/sha256.h"
#include "discover.h"
#include "sock.h"
#include "store.h"
#include "wire.h"

struct tutti__store {
    int rank, size;
    int fd;
    int port;
    double deadline;
    char addr[256];
    char local_ip[INET_ADDRSTRLEN];
    tutti__auth_t auth;
    bool remote;        /* a HOST job's store found on another host by a handshake that had to
                           let its connection go to tell (handshake) */
    double no_secret_at; /* when a store on this host was first found without its secret file */
    bool own_store;     /* that store said it serves this job, whose launcher names it */
    bool rival;         /* rank 0 telling the store that holds its port of itself (tell_holder) */
    bool told;          /* that store answered that it was told */
    bool reconnect;     /* a silent listener is left after SILENT_S and reached again (open) */
    bool silent_warned; /* that was said once */
    uint8_t mixer[32];  /* keys travel as HMAC(mixer, key) */
    pthread_mutex_t mu; /* one request at a time on fd */
    tutti__store_server_t *srv; /* rank 0 only */
};

/* How long a rank goes on looking for a store's secret file on its host before it takes the
 * store for another job's (a creation right after another on the same port meets the old
 * store for the moment rank 0 takes to close it). */
#define NO_SECRET_GRACE_S 5.0

/* How long a rank goes on after such a store has gone and nothing listens on the port. Its own
 * job's previous store is followed by rank 0's next one within moments; another job's ended
 * with its rendezvous, and this job's rank 0, which found the port taken, has failed ("address
 * already in use") and will not come. Under a launcher that leaves the other ranks running
 * (MPICH's), waiting to the deadline (TUTTI_TIMEOUT, 300 s by default) was a hang. */
#define FOREIGN_GONE_S 20.0
/* A listener silent this long after accepting is left, and the port connected to again */
#define SILENT_S 3.0

/* io_deadline bounds one request: the server answers at once, so only a hung or vanished
 * rank 0 takes long; the store's own deadline applies, but never less than 10 s. */
static double io_deadline(const tutti__store_t *s)
{
    double d = tutti__now() + 10.0;
    return s->deadline > d ? s->deadline : d;
}

static tutti_status_t io_fail(tutti__store_t *s, const char *what, int err)
{
    return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                            "rank %d lost the rendezvous store at %s:%d while %s (%s): rank 0 "
                            "exited, failed, or stopped serving at its deadline",
                            s->rank, s->addr, s->port, what,
                            err == ETIMEDOUT ? "timed out" : strerror(err));
}

static tutti_status_t send_iov(tutti__store_t *s, struct iovec *iov, int niov, double deadline)
{
    int err = tutti__sock_sendv(s->fd, iov, niov, deadline);
    return err == 0 ? TUTTI_OK : io_fail(s, "sending a request", err);
}

/* recv_all reads len bytes into buf (NULL: discard them). */
static tutti_status_t recv_all(tutti__store_t *s, void *buf, size_t len, double deadline)
{
    int err = tutti__sock_recv(s->fd, buf, len, deadline);
    return err == 0 ? TUTTI_OK : io_fail(s, "waiting for a reply", err);
}

/* printable replaces what is not printable ASCII in a text another process sent, before it goes
 * into a message. */
static void printable(char *t)
{
    for (; *t; t++)
        if (*t < 0x20 || *t > 0x7e)
            *t = '?';
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
    uint8_t hdr[TUTTI__WIRE_HDR];
    tutti__wire_put_hdr(hdr, type, a, b);
    struct iovec iov[3] = {{hdr, TUTTI__WIRE_HDR}, {(void *)key, key ? a : 0}, {(void *)val, val ? b : 0}};
    TUTTI__CHECK(send_iov(s, iov, 3, deadline));
    uint32_t w[4];
    TUTTI__CHECK(recv_all(s, hdr, TUTTI__WIRE_HDR, deadline));
    tutti__wire_get_hdr(hdr, w);
    if (w[0] != TUTTI__WIRE_MAGIC || w[1] < TUTTI__REP_OK || w[1] > TUTTI__REP_ERROR || w[3] > TUTTI__WIRE_VAL_MAX)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "rank %d got a garbled reply from the rendezvous store at %s:%d: "
                                "is MASTER_PORT a tutti store (and the same tutti version)?",
                                s->rank, s->addr, s->port);
    *rtype = w[1];
    if (w[1] == TUTTI__REP_ERROR) {
        char text[TUTTI__WIRE_ERRTEXT_MAX];
        size_t n = w[3] < sizeof text - 1 ? w[3] : sizeof text - 1;
        TUTTI__CHECK(recv_all(s, text, n, deadline));
        TUTTI__CHECK(recv_all(s, NULL, w[3] - n, deadline));
        text[n] = '\0';
        printable(text);
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
    if (k == 0 || k > TUTTI__WIRE_KEY_MAX) {
        tutti__set_error(TUTTI_ERR_BOOTSTRAP, "rank %d: store key \"%.40s...\" has %zu bytes; "
                         "keys have 1 to %d (a bug in tutti)", s->rank, key, k, TUTTI__WIRE_KEY_MAX);
        return -1;
    }
    return 0;
}

/* wire_key is the name key travels under: HMAC(mixer, key), the first 16 bytes in hex. */
#define WIRE_KEY_LEN 32
static void wire_key(const tutti__store_t *s, const char *key, char out[WIRE_KEY_LEN + 1])
{
    uint8_t h[32];
    tutti__hmac(s->mixer, sizeof s->mixer, key, strlen(key), h);
    tutti__hex(h, WIRE_KEY_LEN / 2, out);
}

static int oob_put(void *ctx, const char *key_, const void *value, size_t len)
{
    tutti__store_t *s = ctx;
    const char *shown = key_;
    char key[WIRE_KEY_LEN + 1];
    if (check_key(s, key_) < 0)
        return -1;
    wire_key(s, key_, key);
    if (len > TUTTI__WIRE_VAL_MAX) {
        tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                         "rank %d cannot store %zu bytes under \"%s\": the rendezvous store "
                         "takes values of up to %u bytes", s->rank, len, shown, TUTTI__WIRE_VAL_MAX);
        return -1;
    }
    uint32_t rt = 0;
    pthread_mutex_lock(&s->mu);
    tutti_status_t st = rpc(s, TUTTI__REQ_SET, (uint32_t)strlen(key), (uint32_t)len, key, value, &rt,
                            NULL, 0, NULL);
    pthread_mutex_unlock(&s->mu);
    if (st == TUTTI_OK && rt != TUTTI__REP_OK)
        st = tutti__set_error(TUTTI_ERR_BOOTSTRAP, "rank %d: the rendezvous store answered a "
                              "store request with reply %u", s->rank, rt);
    return st == TUTTI_OK ? 0 : -1;
}

/* The store answers a missing key at once; the client polls, quickly at first (most keys
 * arrive within milliseconds), backing off to 20 ms so that many waiting ranks do not flood
 * rank 0. */
static int oob_get(void *ctx, const char *key_, void *buf, size_t cap, size_t *len, double timeout_s)
{
    tutti__store_t *s = ctx;
    char key[WIRE_KEY_LEN + 1];
    if (check_key(s, key_) < 0)
        return -1;
    wire_key(s, key_, key);
    double end = tutti__now() + (timeout_s > 0 ? timeout_s : 0);
    unsigned pause_us = 1000;
    for (;;) {
        uint32_t rt = 0;
        size_t vlen = 0;
        pthread_mutex_lock(&s->mu);
        tutti_status_t st = rpc(s, TUTTI__REQ_GET, (uint32_t)strlen(key), 0, key, NULL, &rt, buf, cap,
                                &vlen);
        pthread_mutex_unlock(&s->mu);
        if (st != TUTTI_OK)
            return -1;
        if (rt == TUTTI__REP_VALUE) {
            *len = vlen;
            return 0;
        }
        if (rt != TUTTI__REP_NOTFOUND) {
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
static int try_connect(const char *addr, int port, const struct sockaddr_in *src, double deadline,
                       char *why, size_t whylen, bool *fatal)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(addr, ps, &hints, &res);
    if (rc != 0) {
        /* A name with IPv6 addresses only says "not known" for IPv4: say why it is refused. */
        struct addrinfo h6 = {.ai_family = AF_INET6, .ai_socktype = SOCK_STREAM}, *r6 = NULL;
        bool v6 = strchr(addr, ':') != NULL ||
                  (rc != EAI_AGAIN && getaddrinfo(addr, ps, &h6, &r6) == 0);
        if (r6 != NULL)
            freeaddrinfo(r6);
        snprintf(why, whylen, "cannot resolve \"%s\" to an IPv4 address: %s%s", addr,
                 gai_strerror(rc), v6 ? " (an IPv6 address, or a name with only IPv6 ones: tutti's "
                 "rendezvous and liveness mesh use IPv4 only; give rank 0's IPv4 address or a "
                 "name that has one)" : "");
        *fatal = rc != EAI_AGAIN; /* a name that does not exist will not start to */
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        /* Bound one attempt, so that a lost SYN is retried rather than waited out; but give
         * the last one time to learn its fate, which is what the message says. */
        double now = tutti__now(), d = now + 2.0;
        d = d < deadline ? d : deadline;
        int err = 0;
        fd = tutti__sock_connect_from(ai->ai_addr, ai->ai_addrlen, (const struct sockaddr *)src,
                                      src ? sizeof *src : 0, d > now + 0.1 ? d : now + 0.1, &err);
        if (fd < 0)
            snprintf(why, whylen, "%s", strerror(err));
        if (fd < 0 && (err == EMFILE || err == ENFILE)) {
            /* No socket to try with: that does not pass by waiting (the process holds its
             * descriptors until it fails). */
            struct rlimit rl = {0, 0};
            getrlimit(RLIMIT_NOFILE, &rl);
            snprintf(why, whylen, "%s: it cannot open a socket; its limit of open files "
                     "(RLIMIT_NOFILE, ulimit -n) is %llu: raise it", strerror(err),
                     (unsigned long long)rl.rlim_cur);
            *fatal = true;
            break;
        }
        if (fd < 0 && err == EINVAL && src != NULL) {
            /* A source address that cannot reach this destination at all (a loopback one,
             * towards another host): that does not pass by waiting either. */
            char sip[INET_ADDRSTRLEN] = "?";
            inet_ntop(AF_INET, &src->sin_addr, sip, sizeof sip);
            snprintf(why, whylen, "%s: the address TUTTI_SOCKET_IFNAME chose, %s, cannot reach "
                     "it%s: choose an interface that reaches rank 0's host (e.g. "
                     "TUTTI_SOCKET_IFNAME=^lo)", strerror(err), sip,
                     strncmp(sip, "127.", 4) == 0 ? " (a loopback address reaches only this host)"
                                                  : "");
            *fatal = true;
            break;
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

/* The last store this process joined (addr, port): a store without this job's secret file met at
 * the same place later is most likely that one's, its rendezvous ending. */
static pthread_mutex_t joined_mu = PTHREAD_MUTEX_INITIALIZER;
static char joined_addr[256];
static int joined_port = -1;

static void note_joined(const char *addr, int port)
{
    pthread_mutex_lock(&joined_mu);
    snprintf(joined_addr, sizeof joined_addr, "%s", addr);
    joined_port = port;
    pthread_mutex_unlock(&joined_mu);
}

static bool joined_before(const char *addr, int port)
{
    pthread_mutex_lock(&joined_mu);
    bool same = joined_port == port && strcmp(joined_addr, addr) == 0;
    pthread_mutex_unlock(&joined_mu);
    return same;
}

/* another_job asks the store on s->fd, whose challenge was read, whether it serves this rank's
 * job (HELLO with TUTTI__WIRE_ASK_JOB; it admits no one): 1, with the error set, when it answers
 * that it serves another (the launchers' job ids differ); 0 when it answers that the job ids
 * match (this job's store where the launcher names the job; without launcher ids it cannot
 * tell); -1 when the question failed or the answer is another (a store of an older tutti). */
static int another_job(tutti__store_t *s, double deadline)
{
    uint8_t hdr[TUTTI__WIRE_HDR], body[TUTTI__WIRE_HELLO_BODY];
    uint32_t w[4];
    memset(body, 0, sizeof body);
    tutti__wire_put32(body + TUTTI__WIRE_HELLO_FLAGS, TUTTI__WIRE_ASK_JOB);
    memcpy(body + TUTTI__WIRE_HELLO_JOB, s->auth.job, TUTTI__AUTH_JOB);
    tutti__wire_put_hdr(hdr, TUTTI__REQ_HELLO, (uint32_t)s->rank, (uint32_t)s->size);
    struct iovec iov[2] = {{hdr, sizeof hdr}, {body, sizeof body}};
    double d = tutti__now() + 2.0 < deadline ? tutti__now() + 2.0 : deadline;
    if (tutti__sock_sendv(s->fd, iov, 2, d) != 0 ||
        tutti__sock_recv(s->fd, hdr, sizeof hdr, d) != 0)
        return -1;
    tutti__wire_get_hdr(hdr, w);
    char text[TUTTI__WIRE_ERRTEXT_MAX];
    if (w[0] != TUTTI__WIRE_MAGIC || w[1] != TUTTI__REP_ERROR || w[3] == 0 ||
        w[3] >= sizeof text || tutti__sock_recv(s->fd, text, w[3], d) != 0)
        return -1;
    text[w[3]] = '\0';
    if (strcmp(text, TUTTI__WIRE_SAME_JOB) == 0)
        return 0;
    if (strstr(text, "serves another job") == NULL)
        return -1; /* an older store's refusal of a hello without proof, say */
    printable(text);
    tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                     "rank %d found no secret of its job for the rendezvous store at %s:%d, and "
                     "that store says: %s",
                     s->rank, s->addr, s->port, text);
    return 1;
}

/* handshake answers the store's challenge on s->fd (wire.h). *retry is set when the store hung
 * up without a reason, as it does to a client it dropped to make room under a flood: the
 * caller may connect again. */
static tutti_status_t handshake(tutti__store_t *s, double deadline, bool *retry)
{
    *retry = false;
    uint8_t hdr[TUTTI__WIRE_HDR], ns[TUTTI__AUTH_NONCE];
    uint32_t w[4];
    /* rank 0's store sends the challenge as it accepts; a listener that stays silent for
     * seconds is most likely another program on MASTER_PORT (or a stopped rank 0). Say so early,
     * and keep waiting: rank 0 may be held in a debugger. A rank that joins (tutti__store_open)
     * connects again instead, until its deadline: a connection can also land, as a store
     * stops, where nobody will answer it (a creation right after another on the same port
     * waited out its deadline so, once in the tests' runs), and the next one reaches the
     * store that serves. */
    double start = tutti__now(), first = start + 10.0 < deadline ? start + 10.0 : deadline;
    if (s->reconnect && start + SILENT_S < first)
        first = start + SILENT_S;
    int err = tutti__sock_recv(s->fd, hdr, sizeof hdr, first);
    if (err == ETIMEDOUT && s->reconnect && first < deadline) {
        if (!s->silent_warned)
            TUTTI__LOG(TUTTI__LOG_WARN, "rank %d: what listens at %s:%d accepted the connection "
                       "but said nothing for %.0f s; a tutti store speaks at once: is that port "
                       "(MASTER_PORT?) another program's, or is the store's process stopped? "
                       "Connecting again until the deadline.",
                       s->rank, s->addr, s->port, first - start);
        s->silent_warned = true;
        *retry = true;
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "what listens there accepted the connection but sent no tutti "
                                "challenge in %.1f s, however often connected: another program "
                                "holds that port (MASTER_PORT? give the job another), or the "
                                "store's process is stopped or out of file descriptors",
                                first - start);
    }
    if (err == ETIMEDOUT && first < deadline) {
        TUTTI__LOG(TUTTI__LOG_WARN, "rank %d: what listens at %s:%d accepted the connection but "
                   "has said nothing for %.0f s; a tutti store speaks at once: is that port "
                   "(MASTER_PORT?) another program's, or is the store's process stopped? Waiting "
                   "until the deadline.",
                   s->rank, s->addr, s->port, first - start);
        err = tutti__sock_recv(s->fd, hdr, sizeof hdr, deadline);
    }
    /* (A second is long for a store's first word; a shorter deadline is just too short.) */
    if (err == ETIMEDOUT && (deadline - start >= 1.0 || s->silent_warned))
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "rank %d: what listens at %s:%d accepted the connection but sent "
                                "no tutti challenge in %.1f s: another program holds that port "
                                "(MASTER_PORT? give the job another), or the store's process is "
                                "stopped or out of file descriptors",
                                s->rank, s->addr, s->port, tutti__now() - start);
    if (err == 0) {
        tutti__wire_get_hdr(hdr, w);
        if (w[0] != TUTTI__WIRE_MAGIC || w[1] != TUTTI__REP_CHALLENGE || w[3] != sizeof ns)
            return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                    "rank %d: what answers at %s:%d is not a tutti rendezvous "
                                    "store of this version: is MASTER_PORT another program's "
                                    "port, or do the ranks run different tutti versions?",
                                    s->rank, s->addr, s->port);
        err = tutti__sock_recv(s->fd, ns, sizeof ns, deadline);
    }
    if (err != 0) {
        *retry = err == ECONNRESET || err == EPIPE;
        return io_fail(s, "waiting for the store's challenge", err);
    }
    uint32_t sflags = w[2];
    tutti__auth_t *a = &s->auth;
    if ((sflags & TUTTI__WIRE_STRICT) && a->mode != TUTTI__AUTH_SECRET)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "rank %d: the rendezvous store at %s:%d admits only ranks that "
                                "hold the job's secret (rank 0 has TUTTI_JOB_TOKEN, a token in "
                                "its config, or runs under Open MPI), and this rank has none: "
                                "give every rank the same TUTTI_JOB_TOKEN",
                                s->rank, s->addr, s->port);
    if (!(sflags & TUTTI__WIRE_STRICT) && a->mode == TUTTI__AUTH_SECRET)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "rank %d has the job's secret (%s), but the rendezvous store at "
                                "%s:%d was started without one: give every rank the same "
                                "TUTTI_JOB_TOKEN (or none), or this port belongs to another job",
                                s->rank, a->source, s->addr, s->port);
    if (!a->have_key && !s->remote) {
        /* A HOST job: a rank on the store's host proves the secret rank 0 left in its file;
         * one on another host cannot read that file and joins without proof. */
        struct sockaddr_in peer;
        socklen_t pl = sizeof peer;
        char ip[INET_ADDRSTRLEN];
        if (getpeername(s->fd, (struct sockaddr *)&peer, &pl) != 0 ||
            inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip) == NULL)
            return tutti__set_error(TUTTI_ERR_BOOTSTRAP, "rank %d: getpeername on the store's "
                                    "connection: %s", s->rank, strerror(errno));
        /* Telling where the store is and reading the file take a descriptor each, one at a
         * time. A rank at its RLIMIT_NOFILE whose connection holds the last one lets the
         * connection go (the store drops a client that leaves before its hello), finds out,
         * and connects again: it must join to tell the others why it is about to fail. */
        int spare = fcntl(s->fd, F_DUPFD_CLOEXEC, 0);
        bool starved = spare < 0 && (errno == EMFILE || errno == ENFILE);
        if (spare >= 0)
            close(spare);
        if (starved) {
            close(s->fd);
            s->fd = -1;
        }
        if (tutti__addr_local((struct sockaddr *)&peer, pl, true)) {
            bool absent = false;
            tutti_status_t st = tutti__secret_file_read(ip, s->port, s->rank, a, &absent);
            if (st != TUTTI_OK) {
                /* No file yet may be a store of the same ranks' previous creation, still
                 * saying goodbye to the others (it removed its file once all had joined), or
                 * this one just before it writes its own: look again for a while. Another
                 * job's store stays without it: fail then. */
                double now = tutti__now();
                if (absent && s->no_secret_at == 0.0)
                    s->no_secret_at = now;
                *retry = absent && now - s->no_secret_at < NO_SECRET_GRACE_S;
                if (absent && s->fd >= 0) {
                    /* Where the launchers name their jobs, the store can tell at once. */
                    char keep[TUTTI__ERRLEN];
                    snprintf(keep, sizeof keep, "%s", tutti__tls_error());
                    int other = another_job(s, deadline);
                    if (other == 1) {
                        *retry = false;
                        return TUTTI_ERR_BOOTSTRAP;
                    }
                    /* the same launcher id: this job's own store, saying goodbye */
                    if (other == 0 && s->auth.launcher_id)
                        s->own_store = true;
                    snprintf(tutti__tls_error(), TUTTI__ERRLEN, "%s", keep);
                }
                return st;
            }
        } else
            s->remote = true;
        if (starved) {
            *retry = true;
            return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                    "rank %d let the store's connection go to read the job's "
                                    "secret at its limit of open files",
                                    s->rank);
        }
    }
    uint8_t body[TUTTI__WIRE_HELLO_BODY], *nc = body + TUTTI__WIRE_HELLO_NONCE;
    uint32_t flags = a->have_key ? TUTTI__WIRE_PROOF : 0;
    if (s->rival)
        flags |= TUTTI__WIRE_RIVAL; /* with the key tell_holder read from the holder's file */
    /* a rival names its pid where a rank names its rank (the store's message shows it) */
    const uint32_t who = s->rival ? (uint32_t)getpid() : (uint32_t)s->rank;
    memset(body, 0, sizeof body);
    tutti__wire_put32(body + TUTTI__WIRE_HELLO_FLAGS, flags);
    memcpy(body + TUTTI__WIRE_HELLO_JOB, a->job, TUTTI__AUTH_JOB);
    if (!tutti__random(nc, TUTTI__AUTH_NONCE))
        return tutti__set_error(TUTTI_ERR_SYSTEM, "rank %d: getrandom: %s", s->rank,
                                strerror(errno));
    if (a->have_key)
        tutti__auth_client_mac(a->key, ns, nc, who, (uint32_t)s->size, a->job, flags,
                               body + TUTTI__WIRE_HELLO_MAC);
    uint8_t mac[32];
    uint32_t rt = 0;
    tutti__wire_put_hdr(hdr, TUTTI__REQ_HELLO, who, (uint32_t)s->size);
    struct iovec iov[2] = {{hdr, sizeof hdr}, {body, sizeof body}};
    err = tutti__sock_sendv(s->fd, iov, 2, deadline);
    if (err != 0) {
        *retry = err == ECONNRESET || err == EPIPE;
        return io_fail(s, "saying hello", err);
    }
    err = tutti__sock_recv(s->fd, hdr, sizeof hdr, deadline);
    if (err != 0) {
        *retry = err == ECONNRESET || err == EPIPE;
        return io_fail(s, "waiting for the store's answer to hello", err);
    }
    tutti__wire_get_hdr(hdr, w);
    rt = w[1];
    if (w[0] != TUTTI__WIRE_MAGIC || (rt != TUTTI__REP_OK && rt != TUTTI__REP_ERROR) ||
        (rt == TUTTI__REP_OK && w[3] != sizeof mac) || w[3] > TUTTI__WIRE_VAL_MAX)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "rank %d got a garbled answer to hello from the rendezvous store "
                                "at %s:%d (reply %u of %u bytes)",
                                s->rank, s->addr, s->port, rt, w[3]);
    if (rt == TUTTI__REP_ERROR) {
        char text[TUTTI__WIRE_ERRTEXT_MAX];
        size_t n = w[3] < sizeof text - 1 ? w[3] : sizeof text - 1;
        if (tutti__sock_recv(s->fd, text, n, deadline) != 0)
            n = 0;
        text[n] = '\0';
        printable(text);
        s->told = s->rival && strcmp(text, TUTTI__WIRE_TOLD) == 0;
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP, "rank %d, rendezvous store at %s:%d: %s",
                                s->rank, s->addr, s->port, text);
    }
    TUTTI__CHECK(recv_all(s, mac, sizeof mac, deadline));
    if (a->have_key) {
        uint8_t want[32];
        tutti__auth_server_mac(a->key, ns, nc, (uint32_t)s->rank, (uint32_t)s->size, a->job,
                               want);
        if (!tutti__ct_equal(want, mac, sizeof mac))
            return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                    "rank %d: the rendezvous store at %s:%d did not prove that it "
                                    "holds the job's secret (%s): another program poses as rank "
                                    "0; refusing to use it",
                                    s->rank, s->addr, s->port, a->source);
    }
    tutti__auth_key_mixer(a, s->mixer);
    return TUTTI_OK;
}

static tutti__store_t *store_new(int rank, int size, const char *addr, int port,
                                 const tutti__auth_t *auth, double deadline)
{
    tutti__store_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->rank = rank;
    s->size = size;
    s->fd = -1;
    s->port = port;
    s->deadline = deadline;
    s->auth = *auth;
    snprintf(s->addr, sizeof s->addr, "%s", addr);
    pthread_mutex_init(&s->mu, NULL);
    return s;
}

static void store_free(tutti__store_t *s)
{
    if (s->fd >= 0)
        close(s->fd);
    tutti__store_server_stop(s->srv, true);
    pthread_mutex_destroy(&s->mu);
    memset(&s->auth, 0, sizeof s->auth);
    free(s);
}

static void note_local_ip(tutti__store_t *s)
{
    struct sockaddr_in me;
    socklen_t ml = sizeof me;
    if (getsockname(s->fd, (struct sockaddr *)&me, &ml) < 0 || me.sin_family != AF_INET ||
        inet_ntop(AF_INET, &me.sin_addr, s->local_ip, sizeof s->local_ip) == NULL)
        snprintf(s->local_ip, sizeof s->local_ip, "127.0.0.1");
}

static tutti_status_t check_args(int rank, int size, const char *addr, int port,
                                 const tutti__auth_t *auth)
{
    if (size < 1 || rank < 0 || rank >= size || port < (rank == 0 ? 0 : 1) || port > 65535 ||
        addr == NULL || strlen(addr) >= 256 || auth == NULL)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "rendezvous store: rank %d of %d at %s:%d is not a valid setting "
                                "(0 <= rank < size, 1 <= port <= 65535; 0 for rank 0 only)",
                                rank, size, addr ? addr : "(null)", port);
    return TUTTI_OK;
}

tutti_status_t tutti__store_open_fd(int fd, int rank, int size, const char *addr, int port,
                                    const tutti__auth_t *auth, double deadline,
                                    tutti__store_t **out)
{
    *out = NULL;
    tutti_status_t st = check_args(rank, size, addr, port, auth);
    tutti__store_t *s = st == TUTTI_OK ? store_new(rank, size, addr, port, auth, deadline) : NULL;
    if (s == NULL) {
        close(fd);
        return st < 0 ? st : tutti__set_error(TUTTI_ERR_NO_MEMORY, "rank %d: out of memory", rank);
    }
    s->fd = fd;
    bool retry;
    st = handshake(s, deadline, &retry);
    if (st != TUTTI_OK) {
        store_free(s);
        return st;
    }
    note_local_ip(s);
    *out = s;
    return TUTTI_OK;
}

/* bind_address is where rank 0 serves: the address MASTER_ADDR names, so that the store is
 * reachable only on that interface (loopback for 127.0.0.1). One exception: a host name (not
 * "localhost") that resolves to a loopback address, as Debian's /etc/hosts maps the machine's
 * own name, is served on every interface, since other hosts reach that name at another address.
 * name_ip gets the address, in dotted form, that the ranks of this host resolve addr to. */
static tutti_status_t bind_address(const char *addr, int port, struct sockaddr_in *sa,
                                   char name_ip[INET_ADDRSTRLEN])
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(addr, NULL, &hints, &res);
    if (rc != 0)
        return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                "rank 0 cannot resolve MASTER_ADDR \"%s\" to an IPv4 address to "
                                "serve the rendezvous store there: %s; set MASTER_ADDR to rank 0's "
                                "host name or IPv4 address%s",
                                addr, gai_strerror(rc),
                                strchr(addr, ':') ? " (tutti's rendezvous and liveness mesh use "
                                                    "IPv4 only)" : "");
    *sa = *(struct sockaddr_in *)res->ai_addr;
    freeaddrinfo(res);
    inet_ntop(AF_INET, &sa->sin_addr, name_ip, INET_ADDRSTRLEN);
    struct in_addr num;
    bool numeric = inet_pton(AF_INET, addr, &num) == 1;
    if (!numeric && strcmp(addr, "localhost") != 0 && (ntohl(sa->sin_addr.s_addr) >> 24) == 127)
        sa->sin_addr.s_addr = htonl(INADDR_ANY);
    sa->sin_port = htons((uint16_t)port);
    return TUTTI_OK;
}

/* addr_is_local: whether addr (a name or IPv4 address) is one of this host's. */
static bool addr_is_local(const char *addr)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(addr, NULL, &hints, &res) != 0)
        return false;
    bool local = false;
    for (const struct addrinfo *p = res; p != NULL && !local; p = p->ai_next)
        local = tutti__addr_local(p->ai_addr, p->ai_addrlen, false);
    freeaddrinfo(res);
    return local;
}

/* tell_holder: rank 0 (s0) of a job without a secret of its own could not serve its store,
 * since a live store holds the port. Where this rank can read that store's secret file (a job it
 * cannot be told apart from: its user's, started from the same terminal or script, or the same
 * launcher's job), the two jobs' other ranks may join either store and form mixed groups that
 * compute without a word: it tells that store (HELLO with TUTTI__WIRE_RIVAL), which then fails
 * every rank of its rendezvous, saying why. Another job's store, another program, or none is
 * left alone. Adds what it did to this rank's error text; keeps it otherwise. */
static void tell_holder(const tutti__store_t *s0, const char *addr, const char *name_ip,
                        int port, double deadline)
{
    tutti__saved_error_t saved;
    tutti__save_error(&saved);
    tutti__auth_t a = s0->auth;
    a.have_key = false;
    memset(a.key, 0, sizeof a.key);
    /* Only a store whose secret file this rank can read is told: look before connecting, so
     * that another program, or another job's store, is not even reached. The key read proves
     * the hello (a.have_key: the handshake reads no file again). */
    bool absent = false;
    if (tutti__secret_file_read(name_ip, port, 0, &a, &absent) != TUTTI_OK) {
        memset(&a, 0, sizeof a);
        tutti__restore_error(&saved, TUTTI_OK);
        return;
    }
    double d = tutti__now() + 2.0 < deadline ? tutti__now() + 2.0 : deadline;
    tutti__store_t *s = store_new(0, s0->size, addr, port, &a, d);
    memset(&a, 0, sizeof a);
    bool told = false;
    if (s != NULL) {
        char why[256];
        bool fatal = false, retry = false;
        s->rival = true;
        s->fd = try_connect(addr, port, NULL, d, why, sizeof why, &fatal);
        if (s->fd >= 0 && handshake(s, d, &retry) != TUTTI_OK)
            told = s->told;
        store_free(s);
    }
    tutti__restore_error(&saved, TUTTI_OK);
    if (told) {
        size_t n = strlen(tutti__tls_error());
        snprintf(tutti__tls_error() + n, TUTTI__ERRLEN - n,
                 ". The store there is of a job that this rank cannot tell from its own (this "
                 "rank could read its secret file: this user's, from the same terminal or script, "
                 "or the same launcher's job): two jobs share this MASTER_PORT, or one job gave "
                 "rank 0 twice, and a rank of either may have joined the other's; that job was "
                 "told, and fails too rather than mix them");
    }
}

tutti_status_t tutti__store_open(int rank, int size, const char *addr, int port,
                                 const tutti__auth_t *auth, double deadline,
                                 tutti__store_t **out)
{
    *out = NULL;
    TUTTI__CHECK(check_args(rank, size, addr, port, auth));
    tutti__store_t *s = store_new(rank, size, addr, port, auth, deadline);
    if (s == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "rank %d: out of memory", rank);
    tutti_status_t st = TUTTI_OK;
    if (rank == 0) {
        if (s->auth.mode == TUTTI__AUTH_HOST) { /* rank 0 makes a job's secret that has none */
            if (!tutti__random(s->auth.key, sizeof s->auth.key)) {
                st = tutti__set_error(TUTTI_ERR_SYSTEM, "rank 0: getrandom: %s", strerror(errno));
                goto fail;
            }
            s->auth.have_key = true;
        }
        struct sockaddr_in sa;
        char name_ip[INET_ADDRSTRLEN];
        TUTTI__CHECK_GOTO(bind_address(addr, port, &sa, name_ip), st, fail);
        bool in_use = false;
        st = tutti__store_server_start(&sa, name_ip, size, &s->auth, deadline, &s->srv, &in_use);
        if (st != TUTTI_OK) {
            if (in_use && s->auth.mode == TUTTI__AUTH_HOST)
                tell_holder(s, addr, name_ip, port, deadline);
            goto fail;
        }
        port = s->port = tutti__store_server_port(s->srv);
    }

    /* TUTTI_SOCKET_IFNAME: connect from that interface's address, as the liveness mesh and ofi
     * will use it. */
    struct sockaddr_in src = {.sin_family = AF_INET}, *srcp = NULL;
    const char *spec = tutti__env_get("TUTTI_SOCKET_IFNAME");
    char src_ip[64] = "", src_if[TUTTI__IFNAME_LEN] = "";
    if (spec != NULL) {
        TUTTI__CHECK_GOTO(tutti__iface_pick(spec, src_ip, src_if), st, fail);
        inet_pton(AF_INET, src_ip, &src.sin_addr);
        srcp = &src;
    }

    double start = tutti__now();
    char why[256] = "connection refused";
    unsigned pause_ms = 20;
    bool told = false;
    /* A HOST job's rank on rank 0's host: a secret directory rank 0 cannot use made rank 0
     * fail before its store served; so it fails here too, in rank 0's words. */
    const bool host_dir = rank != 0 && s->auth.mode == TUTTI__AUTH_HOST && addr_is_local(addr);
    /* A store without this job's secret file answered here; unless it said it is this job's
     * (a launcher's id) or this process joined a store here before (its own job's previous
     * creation, saying goodbye: its rank 0 may come to the next one much later), the rank gives
     * up FOREIGN_GONE_S after, once nothing listens. */
    bool seen = false;
    const bool joined_here = joined_before(addr, port);
    for (;;) {
        bool fatal = false, retry = false;
        s->fd = try_connect(addr, port, srcp, deadline, why, sizeof why, &fatal);
        const bool reached = s->fd >= 0;
        if (s->fd < 0 && !fatal && host_dir && tutti__secret_dir_check() != TUTTI_OK) {
            char dir_err[TUTTI__ERRLEN];
            snprintf(dir_err, sizeof dir_err, "%s", tutti__tls_error());
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "rank %d finds no rendezvous store at %s:%d, and rank 0, on "
                                  "this host, cannot have started it if its secret directory is "
                                  "this rank's: %s",
                                  rank, addr, port, dir_err);
            goto fail;
        }
        if (s->fd >= 0) {
            tutti__sock_nodelay(s->fd);
            s->reconnect = true;
            st = handshake(s, deadline, &retry);
            if (st == TUTTI_OK)
                break;
            close(s->fd);
            s->fd = -1;
            if (!retry)
                goto fail;
            snprintf(why, sizeof why, "%s", tutti__tls_error());
            seen = s->no_secret_at != 0.0 && !s->own_store && !joined_here;
        }
        lowercase_first(why);
        if (fatal) {
            bool nofile = strstr(why, "RLIMIT_NOFILE") != NULL;
            bool ifname = strstr(why, "TUTTI_SOCKET_IFNAME") != NULL;
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "rank %d could not reach the rendezvous store at %s:%d (%s)%s",
                                  rank, addr, port, why,
                                  nofile || ifname ? "" : ": set MASTER_ADDR to rank 0's host "
                                                          "name or address");
            goto fail;
        }
        double left = deadline - tutti__now();
        if (!reached && seen && (left <= 0 || tutti__now() - s->no_secret_at >= FOREIGN_GONE_S)) {
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "rank %d finds no store of its job at %s:%d: %.0f s ago a "
                                  "store answered there for which this rank found no secret file "
                                  "of its job (another job's), and now nothing listens there: "
                                  "that other job most likely held the port when this job's rank "
                                  "0 started, and rank 0 failed (\"address already in use\"); "
                                  "give each job a MASTER_PORT of its own, or TUTTI_JOB_TOKEN",
                                  rank, addr, port, tutti__now() - s->no_secret_at);
            goto fail;
        }
        if (left <= 0) {
            char hint[256] = "is rank 0 running, and are MASTER_ADDR/MASTER_PORT the same on "
                             "every rank?";
            if (srcp != NULL)
                snprintf(hint, sizeof hint, "does interface %s (%s), which TUTTI_SOCKET_IFNAME=%s "
                         "chose, reach MASTER_ADDR? Is rank 0 running?", src_if, src_ip, spec);
            st = tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                  "rank %d could not reach the rendezvous store at %s:%d within "
                                  "%.3g s (%s): %s",
                                  rank, addr, port, deadline - start, why, hint);
            goto fail;
        }
        if (!told && tutti__now() - start >= 30.0) {
            /* The deadline may be minutes away (TUTTI_TIMEOUT, 300 s by default): say once
             * why this rank is quiet, since a rank 0 that died before it served is the usual
             * cause, and a launcher that leaves the other ranks running says nothing. */
            told = true;
            TUTTI__LOG(TUTTI__LOG_WARN,
                       "rank %d has tried for 30 s to reach the rendezvous store at %s:%d (%s); "
                       "trying for %.0f s more: is rank 0 running?",
                       rank, addr, port, why, left);
        }
        /* Refused is normal while rank 0 starts; retry at a pace that costs rank 0 nothing. */
        tutti__sleep_us((unsigned)((left * 1000.0 < pause_ms ? left * 1000.0 : pause_ms) * 1000.0));
        pause_ms = pause_ms < 50 ? pause_ms + 10 : 50;
    }
    note_local_ip(s);
    note_joined(addr, port);
    TUTTI__LOG(TUTTI__LOG_DEBUG, "rank %d: joined the rendezvous store at %s:%d from %s (%s)",
               rank, addr, port, s->local_ip,
               s->auth.have_key ? "proved the job's secret" : "without proof, from another host");
    *out = s;
    return TUTTI_OK;
fail:
    store_free(s);
    return st;
}

tutti_status_t tutti__store_doomed(void *ctx)
{
    tutti__store_t *s = ctx;
    char keep[TUTTI__ERRLEN], text[TUTTI__WIRE_ERRTEXT_MAX + 5];
    snprintf(keep, sizeof keep, "%s", tutti__tls_error()); /* a failed ask changes nothing */
    uint32_t rt = 0;
    size_t vlen = 0;
    const char *key = TUTTI__STORE_DOOMED_KEY;
    pthread_mutex_lock(&s->mu);
    tutti_status_t st = rpc(s, TUTTI__REQ_GET, (uint32_t)strlen(key), 0, key, NULL, &rt, text,
                            sizeof text - 1, &vlen);
    pthread_mutex_unlock(&s->mu);
    if (st != TUTTI_OK || rt != TUTTI__REP_VALUE || vlen < 4) {
        snprintf(tutti__tls_error(), TUTTI__ERRLEN, "%s", keep);
        return TUTTI_OK;
    }
    /* The store is rank 0's, but its value is read as untrusted as any other: a known status
     * or "a peer failed", and the text as far as it goes. */
    uint32_t neg = tutti__wire_get32((const uint8_t *)text);
    tutti_status_t why = tutti__wire_relayed_status(neg);
    if (vlen > sizeof text - 1)
        vlen = sizeof text - 1;
    tutti__wire_printable(text + 4, (const uint8_t *)text + 4, vlen - 4);
    return tutti__set_error(why, "bootstrap: rank %d stopped waiting: %s", s->rank, text + 4);
}

tutti_oob_t tutti__store_oob(tutti__store_t *s)
{
    return (tutti_oob_t){.ctx = s, .put = oob_put, .get = oob_get};
}

const char *tutti__store_local_ip(const tutti__store_t *s) { return s->local_ip; }

int tutti__store_port(const tutti__store_t *s) { return s->port; }

bool tutti__store_secret(const tutti__store_t *s, uint8_t key[TUTTI__AUTH_KEY])
{
    if (s->auth.mode != TUTTI__AUTH_SECRET)
        return false;
    memcpy(key, s->auth.key, TUTTI__AUTH_KEY);
    return true;
}

static void close_store(tutti__store_t *s, bool now, tutti_status_t failed)
{
    if (s == NULL)
        return;
    /* Close often runs on an error path: keep the caller's error text. */
    tutti__saved_error_t saved;
    tutti__save_error(&saved);
    /* CLOSE and FAIL have no reply: after either the server owes this rank nothing. A rank
     * whose creation failed says so, with its error's text, which the server records as the
     * end of the rendezvous: the others' waits ask for that, and fail in a second, saying why,
     * instead of at their timeout (or at theirs naming this rank, when its hang-up was all
     * they had). */
    uint8_t hdr[TUTTI__WIRE_HDR];
    const char *text = tutti__tls_error();
    size_t tlen = failed < 0 ? strnlen(text, TUTTI__WIRE_ERRTEXT_MAX) : 0;
    if (failed < 0)
        tutti__wire_put_hdr(hdr, TUTTI__REQ_FAIL, (uint32_t)-failed, (uint32_t)tlen);
    else
        tutti__wire_put_hdr(hdr, TUTTI__REQ_CLOSE, 0, 0);
    struct iovec iov[2] = {{hdr, TUTTI__WIRE_HDR}, {(void *)text, tlen}};
    pthread_mutex_lock(&s->mu);
    double d = tutti__now() + 1.0;
    if (s->fd >= 0 && send_iov(s, iov, tlen ? 2 : 1, d) != TUTTI_OK)
        TUTTI__LOG(TUTTI__LOG_DEBUG, "rank %d: closing the store: %s", s->rank,
                   tutti__tls_error());
    pthread_mutex_unlock(&s->mu);
    close(s->fd);
    s->fd = -1;
    /* Rank 0 serves until every rank has closed (or the deadline passes). */
    tutti__store_server_stop(s->srv, now);
    s->srv = NULL;
    store_free(s);
    tutti__restore_error(&saved, TUTTI_OK);
}

void tutti__store_close(tutti__store_t *s) { close_store(s, false, TUTTI_OK); }

void tutti__store_linger(tutti__store_t *s, double seconds)
{
    tutti__store_server_linger(s->srv, seconds);
}

unsigned tutti__store_unauthed(const tutti__store_t *s)
{
    return tutti__store_server_unauthed(s->srv);
}

unsigned tutti__store_unproven(const tutti__store_t *s)
{
    return tutti__store_server_unproven(s->srv);
}

void tutti__store_close_now(tutti__store_t *s) { close_store(s, true, TUTTI_OK); }

void tutti__store_close_failed(tutti__store_t *s, tutti_status_t st)
{
    close_store(s, false, st < 0 ? st : TUTTI_ERR_INTERNAL);
}
