/* store_impl.h: the rendezvous store server's private parts: the protocol core (store_proto.c:
 * the key-value table and one client connection's state machine, no sockets) that the server's
 * poll loop (store_server.c) and the fuzzing harness (tests/fuzz/) drive. */
#ifndef TUTTI_BOOTSTRAP_STORE_IMPL_H
#define TUTTI_BOOTSTRAP_STORE_IMPL_H

#include "auth.h"
#include "wire.h"

typedef struct tutti__kv tutti__kv_t;

/* One client connection. Until its hello passes (rank < 0) it holds no allocation the client
 * chose: its hello body has a fixed place here. */
typedef struct tutti__sconn {
    int fd;
    int rank;           /* -1 until its hello passes */
    bool drop;          /* protocol error or refusal: close once the reply has gone */
    bool peer_local;    /* it connected from an address of this host */
    double since;       /* when it was accepted (unauthenticated ones have an idle deadline) */
    uint8_t ns[TUTTI__AUTH_NONCE]; /* the nonce of the challenge it was sent */
    uint8_t hdr[TUTTI__WIRE_HDR];
    size_t hgot;
    uint32_t type, a, b;
    uint8_t hello[TUTTI__WIRE_HELLO_BODY];
    uint8_t *body;      /* the request body being read (hello's, or an allocated one) */
    size_t bneed, bgot;
    uint8_t *out;       /* the reply being written */
    size_t olen, ooff;
} tutti__sconn_t;

/* The store's state: who the job is, its table, which ranks are in and which are done. */
typedef struct tutti__store_core {
    int size, port;
    tutti__auth_t auth;
    tutti__kv_t *kv;
    unsigned char *done;   /* per rank: sent CLOSE, or hung up after its hello */
    unsigned char *joined; /* per rank: a connection holds it now */
    int ndone;
    int nadmitted;         /* ranks whose hello passed */
    unsigned refused;      /* refused hellos, for rate-limited logging */
    unsigned unauthed;     /* hellos refused for a missing or wrong proof of the job's secret;
                              atomic, read as unproven is */
    unsigned unproven;     /* clients of this host that hung up before their hello (a rank that
                              could not confirm the store is its job's); atomic: rank 0's
                              creation reads it from another thread */
    bool warned_remote;    /* logged that a rank joined without proof */
    bool doomed;           /* the rendezvous can no longer end (store_proto.c's doom) */
    double doomed_at;      /* when, tutti__now() clock */
} tutti__store_core_t;

/* tutti__store_core_init prepares k for a job of size ranks (port for messages); false when out
 * of memory. tutti__store_core_free frees what it holds. */
bool tutti__store_core_init(tutti__store_core_t *k, int size, int port, const tutti__auth_t *auth);
void tutti__store_core_free(tutti__store_core_t *k);

/* tutti__store_conn_open starts c on fd: it queues the challenge in c->out. False when no
 * random nonce could be had (c then holds nothing). */
bool tutti__store_conn_open(tutti__store_core_t *k, tutti__sconn_t *c, int fd, bool peer_local,
                            double now);

/* tutti__store_conn_want tells where the next bytes from the client go (*p, at most *n); *n is
 * 0 while a reply is pending or the connection is to be dropped. */
void tutti__store_conn_want(const tutti__sconn_t *c, uint8_t **p, size_t *n);

/* tutti__store_conn_got takes n bytes just read into the place conn_want gave, and acts on a
 * request once it is complete (its reply goes to c->out). */
void tutti__store_conn_got(tutti__store_core_t *k, tutti__sconn_t *c, size_t n);

/* tutti__store_conn_sent records that n bytes of c's reply went out; the reply is freed once
 * all did. */
void tutti__store_conn_sent(tutti__sconn_t *c, size_t n);

/* tutti__store_conn_close frees what c holds (not its fd) and, if it was a rank, counts that
 * rank done: a rank that hung up needs the store no more. */
void tutti__store_conn_close(tutti__store_core_t *k, tutti__sconn_t *c);

#endif /* TUTTI_BOOTSTRAP_STORE_IMPL_H */
