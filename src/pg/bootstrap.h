/* bootstrap.h: out-of-band exchange while a communicator is created (the TCP store served by
 * rank 0, or the caller's key-value store), collective helpers over it, and the liveness mesh
 * that later turns a dead peer into an error. */
#ifndef TUTTI_BOOTSTRAP_H
#define TUTTI_BOOTSTRAP_H

#include "../common/common.h"

/* ---- the TCP store (store.c) ---- */

typedef struct tutti__store tutti__store_t;

/*
 * tutti__store_open starts the rendezvous: rank 0 serves a key-value store on port (all IPv4
 * interfaces; a port in use is TUTTI_ERR_BOOTSTRAP naming the port and what to do), and every
 * rank, rank 0 included, connects to addr:port as a client, retrying until deadline (absolute,
 * tutti__now() clock). On error the text is in tutti_last_error().
 */
tutti_status_t tutti__store_open(int rank, int size, const char *addr, int port, double deadline,
                                 tutti__store_t **out);

/* tutti__store_oob returns the store as a tutti_oob_t (valid until tutti__store_close). */
tutti_oob_t tutti__store_oob(tutti__store_t *s);

/* tutti__store_port is the store's port; rank 0 may open with port 0 for an ephemeral one. */
int tutti__store_port(const tutti__store_t *s);

/* tutti__store_local_ip is the IPv4 address (dotted) this rank used to reach the store. */
const char *tutti__store_local_ip(const tutti__store_t *s);

/* tutti__store_close disconnects; on rank 0 it also stops the server once every rank has
 * called tutti__store_close (or the deadline given to open has passed). */
void tutti__store_close(tutti__store_t *s);

/* ---- collectives over the out-of-band store (bootstrap.c) ---- */

typedef struct tutti__bootstrap {
    int rank, size;
    double deadline;    /* absolute, tutti__now() clock */
    tutti_oob_t oob;
    unsigned round;     /* allgather rounds so far; the same on every rank */
    const char *where;  /* for messages: "the TCP store at 127.0.0.1:29500", "the caller's store" */
} tutti__bootstrap_t;

/* tutti__bs_put stores a value under a key; keys are unique per communicator creation. */
tutti_status_t tutti__bs_put(tutti__bootstrap_t *bs, const char *key, const void *val, size_t len);

/* tutti__bs_get waits until bs->deadline for key and copies exactly len bytes (a value of another
 * length is TUTTI_ERR_BOOTSTRAP). */
tutti_status_t tutti__bs_get(tutti__bootstrap_t *bs, const char *key, void *val, size_t len);

/*
 * tutti__bs_allgather: every rank contributes len bytes; all[] receives size * len bytes in rank
 * order. A rank missing at the deadline is TUTTI_ERR_BOOTSTRAP whose text names the missing
 * ranks.
 */
tutti_status_t tutti__bs_allgather(tutti__bootstrap_t *bs, const void *mine, size_t len, void *all);

/* tutti__bs_group_barrier: the n ranks in ranks[] (all calling with the same list and name)
 * wait for each other; name makes the keys unique. */
tutti_status_t tutti__bs_group_barrier(tutti__bootstrap_t *bs, const char *name, const int *ranks,
                                       int n);

/* ---- liveness mesh (liveness.c) ---- */

typedef struct tutti__liveness tutti__liveness_t;

/*
 * tutti__live_create opens a TCP connection to every other rank (addresses exchanged through bs;
 * ip is the local address to listen on and publish). The kernel closes these when a process
 * dies, however it dies, so a closed connection without a goodbye means a dead peer.
 */
tutti_status_t tutti__live_create(tutti__bootstrap_t *bs, const char *ip, tutti__liveness_t **out);

/*
 * tutti__live_check polls every connection without blocking. Returns TUTTI_OK, or
 * TUTTI_ERR_PEER_FAILED with *dead set to the lowest rank whose connection closed without a
 * goodbye. Safe to call often; a syscall each call, so callers rate-limit it.
 */
tutti_status_t tutti__live_check(tutti__liveness_t *l, int *dead);

/* tutti__live_left tells whether rank has said goodbye (destroyed its communicator). */
bool tutti__live_left(const tutti__liveness_t *l, int rank);

/* tutti__live_pid is rank's process id, as it announced it. */
int tutti__live_pid(const tutti__liveness_t *l, int rank);

/*
 * tutti__live_goodbye sends a goodbye to every peer and, if wait is true, waits until every peer
 * has said goodbye or died, or until deadline; returns TUTTI_ERR_TIMEOUT naming the peers that
 * did neither.
 */
tutti_status_t tutti__live_goodbye(tutti__liveness_t *l, bool wait, double deadline);

/* tutti__live_destroy closes every connection and frees l (NULL is fine). */
void tutti__live_destroy(tutti__liveness_t *l);

#endif /* TUTTI_BOOTSTRAP_H */
