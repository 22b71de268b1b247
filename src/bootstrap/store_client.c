/* store_client.c: the rendezvous store's client: every rank (rank 0 too, which also starts the
 * server) connects, says hello, and stores and looks up keys through a tutti_oob_t. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
    pthread_mutex_t mu; /* one request at a time on fd */
    tutti__store_server_t *srv; /* rank 0 only */
};

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

static int oob_put(void *ctx, const char *key, const void *value, size_t len)
{
    tutti__store_t *s = ctx;
    if (check_key(s, key) < 0)
        return -1;
    if (len > TUTTI__WIRE_VAL_MAX) {
        tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                         "rank %d cannot store %zu bytes under \"%s\": the rendezvous store "
                         "takes values of up to %u bytes", s->rank, len, key, TUTTI__WIRE_VAL_MAX);
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
        snprintf(why, whylen, "cannot resolve \"%s\": %s", addr, gai_strerror(rc));
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
        TUTTI__CHECK_GOTO(tutti__store_server_start(port, size, deadline, &s->srv), st, fail);
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
    for (;;) {
        bool fatal = false;
        s->fd = try_connect(addr, port, srcp, deadline, why, sizeof why, &fatal);
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
        /* Refused is normal while rank 0 starts; retry at a pace that costs rank 0 nothing. */
        tutti__sleep_us((unsigned)((left * 1000.0 < pause_ms ? left * 1000.0 : pause_ms) * 1000.0));
        pause_ms = pause_ms < 50 ? pause_ms + 10 : 50;
    }
    tutti__sock_nodelay(s->fd);
    struct sockaddr_in me;
    socklen_t ml = sizeof me;
    if (getsockname(s->fd, (struct sockaddr *)&me, &ml) < 0 ||
        inet_ntop(AF_INET, &me.sin_addr, s->local_ip, sizeof s->local_ip) == NULL)
        snprintf(s->local_ip, sizeof s->local_ip, "127.0.0.1");

    uint32_t rt = 0;
    TUTTI__CHECK_GOTO(rpc(s, TUTTI__REQ_HELLO, (uint32_t)rank, (uint32_t)size, NULL, NULL, &rt, NULL, 0,
                          NULL),
                      st, fail);
    if (rt != TUTTI__REP_OK) {
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
    tutti__store_server_stop(s->srv, true);
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
    tutti__saved_error_t saved;
    tutti__save_error(&saved);
    /* CLOSE has no reply: after it the server owes this rank nothing. */
    uint8_t hdr[TUTTI__WIRE_HDR];
    tutti__wire_put_hdr(hdr, TUTTI__REQ_CLOSE, 0, 0);
    struct iovec iov = {hdr, TUTTI__WIRE_HDR};
    pthread_mutex_lock(&s->mu);
    double d = tutti__now() + 1.0;
    if (send_iov(s, &iov, 1, d) != TUTTI_OK)
        TUTTI__LOG(TUTTI__LOG_DEBUG, "rank %d: closing the store: %s", s->rank,
                   tutti__tls_error());
    pthread_mutex_unlock(&s->mu);
    close(s->fd);
    /* Rank 0 serves until every rank has closed (or the deadline passes). */
    tutti__store_server_stop(s->srv, false);
    pthread_mutex_destroy(&s->mu);
    free(s);
    tutti__restore_error(&saved, TUTTI_OK);
}
