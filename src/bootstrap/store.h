/* store.h: the TCP rendezvous store: rank 0 serves it (store_server.c), every rank, rank 0 too,
 * is its client (store_client.c) and reaches it through a tutti_oob_t once it has proven that
 * it belongs to the job (auth.h, wire.h). */
#ifndef TUTTI_BOOTSTRAP_STORE_H
#define TUTTI_BOOTSTRAP_STORE_H

#include <netinet/in.h>

#include "../common/common.h"
#include "auth.h"

/* ---- the client (every rank) ---- */

typedef struct tutti__store tutti__store_t;

/*
 * tutti__store_open starts the rendezvous: rank 0 serves a key-value store on addr:port (bound
 * to that address only; port 0 for one the kernel picks; a port in use is TUTTI_ERR_BOOTSTRAP
 * naming the port and what to do), and every rank, rank 0 included, connects to it as a client,
 * retrying until deadline (absolute, tutti__now() clock), and proves that it belongs to the job
 * as auth says (a HOST job's rank 0 makes the secret: auth is copied). A refusal by the store
 * (another job, a wrong secret, a rank taken) fails at once, with the store's reason. On error
 * the text is in tutti_last_error().
 */
tutti_status_t tutti__store_open(int rank, int size, const char *addr, int port,
                                 const tutti__auth_t *auth, double deadline,
                                 tutti__store_t **out);

/* tutti__store_open_fd is tutti__store_open's handshake over fd, a stream already connected to
 * a store (addr and port name it in messages); fd is the store's from then on, closed by
 * tutti__store_close or on failure. For tests and fuzzing: no server, no retries. */
tutti_status_t tutti__store_open_fd(int fd, int rank, int size, const char *addr, int port,
                                    const tutti__auth_t *auth, double deadline,
                                    tutti__store_t **out);

/* tutti__store_oob returns the store as a tutti_oob_t (valid until tutti__store_close). Its
 * keys travel hashed with the job's key mixer (auth.h): another job's keys never meet them. */
tutti_oob_t tutti__store_oob(tutti__store_t *s);

/* tutti__store_doomed (ctx: the tutti__store_t) asks the store whether the rendezvous can no
 * longer end (a rank's creation failed, a rank hung up before its close, or one was started
 * with another world size): the status to fail with, and the store's reason in the thread's
 * error text, if so; TUTTI_OK if not (or if the store could not be asked). A
 * tutti__bootstrap_t's cancelled hook. */
tutti_status_t tutti__store_doomed(void *ctx);

/* tutti__store_port is the store's port; rank 0 may open with port 0 for an ephemeral one. */
int tutti__store_port(const tutti__store_t *s);

/* tutti__store_local_ip is the IPv4 address (dotted) this rank used to reach the store. */
const char *tutti__store_local_ip(const tutti__store_t *s);

/* tutti__store_secret copies the job's secret into key when every rank of the job holds it
 * (a SECRET job) and returns true; false otherwise. */
bool tutti__store_secret(const tutti__store_t *s, uint8_t key[TUTTI__AUTH_KEY]);

/* tutti__store_linger (rank 0: its server; others: nothing) sets how long the store, once the
 * rendezvous cannot end, still waits for ranks that have not come, so that they learn why
 * (default 2 s; the deadline still bounds it). */
void tutti__store_linger(tutti__store_t *s, double seconds);

/* tutti__store_unproven (rank 0: its server's count, tutti__store_server_unproven; others: 0):
 * for rank 0's error when ranks never arrived. */
unsigned tutti__store_unproven(const tutti__store_t *s);
/* tutti__store_unauthed (rank 0: tutti__store_server_unauthed; others: 0): the same, for the
 * clients refused for their proof of the job's secret. */
unsigned tutti__store_unauthed(const tutti__store_t *s);

/* tutti__store_close disconnects; on rank 0 it also stops the server once every rank has
 * called tutti__store_close (or the deadline given to open has passed). It keeps the calling
 * thread's last-error text as it was (it often runs on an error path). */
void tutti__store_close(tutti__store_t *s);

/* tutti__store_close_now is tutti__store_close that stops rank 0's server at once, without
 * waiting for the other ranks: for a creation that failed (a rank died and will never close). */
void tutti__store_close_now(tutti__store_t *s);

/* tutti__store_close_failed is tutti__store_close for a rank whose creation failed with st (its
 * text the thread's last error): the server records it as the end of the rendezvous, and the
 * ranks still waiting fail at once, with st when it is TUTTI_ERR_BOOTSTRAP or TUTTI_ERR_TIMEOUT
 * (their rendezvous failed as this rank's did), else TUTTI_ERR_PEER_FAILED, quoting the text. */
void tutti__store_close_failed(tutti__store_t *s, tutti_status_t st);

/* ---- the server (rank 0's client starts and stops it) ---- */

typedef struct tutti__store_server tutti__store_server_t;

/* tutti__store_server_start listens on bind_to (port 0: one the kernel picks) and serves a job
 * of size ranks, authenticated as auth says, from a thread until every rank has closed, or
 * deadline (plus a short grace while a rank still asks) has passed. A HOST job's secret file is
 * written (named after name_ip and the port) before anyone can connect, and removed when the
 * server stops. *in_use tells, on failure, that a listener held the port (EADDRINUSE). */
tutti_status_t tutti__store_server_start(const struct sockaddr_in *bind_to, const char *name_ip,
                                         int size, const tutti__auth_t *auth, double deadline,
                                         tutti__store_server_t **out, bool *in_use);

/* tutti__store_server_linger: see tutti__store_linger. */
void tutti__store_server_linger(tutti__store_server_t *sv, double seconds);

/* tutti__store_server_port is the port the server listens on. */
int tutti__store_server_port(const tutti__store_server_t *sv);

/* tutti__store_server_unproven counts the clients of this host that hung up before their hello
 * (0 for NULL). */
unsigned tutti__store_server_unproven(const tutti__store_server_t *sv);
/* tutti__store_server_unauthed counts the hellos refused for a missing or wrong proof of the
 * job's secret (0 for NULL). */
unsigned tutti__store_server_unauthed(const tutti__store_server_t *sv);

/* tutti__store_server_stop waits for the server's thread to end (stopping it at once when now
 * is true) and frees sv (NULL is fine). */
void tutti__store_server_stop(tutti__store_server_t *sv, bool now);

/* ---- a one-rank job's store (solo.c) ---- */

typedef struct tutti__solo tutti__solo_t;

/* tutti__solo_new makes an in-process key-value store for a job of one rank, which needs no
 * server and no port; NULL when out of memory. tutti__solo_oob is its tutti_oob_t. */
tutti__solo_t *tutti__solo_new(void);
tutti_oob_t tutti__solo_oob(tutti__solo_t *s);
void tutti__solo_free(tutti__solo_t *s);

#endif /* TUTTI_BOOTSTRAP_STORE_H */
