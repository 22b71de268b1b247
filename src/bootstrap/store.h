/* store.h: the TCP rendezvous store: rank 0 serves it (store_server.c), every rank, rank 0 too,
 * is its client (store_client.c) and reaches it through a tutti_oob_t. */
#ifndef TUTTI_BOOTSTRAP_STORE_H
#define TUTTI_BOOTSTRAP_STORE_H

#include "../common/common.h"

/* ---- the client (every rank) ---- */

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
 * called tutti__store_close (or the deadline given to open has passed). It keeps the calling
 * thread's last-error text as it was (it often runs on an error path). */
void tutti__store_close(tutti__store_t *s);

/* ---- the server (rank 0's client starts and stops it) ---- */

typedef struct tutti__store_server tutti__store_server_t;

/* tutti__store_server_start listens on port (0: one the kernel picks) on every IPv4 interface
 * and serves a job of size ranks from a thread until every rank has closed, or deadline (plus
 * a short grace while a rank still asks) has passed. */
tutti_status_t tutti__store_server_start(int port, int size, double deadline,
                                         tutti__store_server_t **out);

/* tutti__store_server_port is the port the server listens on. */
int tutti__store_server_port(const tutti__store_server_t *sv);

/* tutti__store_server_stop waits for the server's thread to end (stopping it at once when now
 * is true) and frees sv (NULL is fine). */
void tutti__store_server_stop(tutti__store_server_t *sv, bool now);

#endif /* TUTTI_BOOTSTRAP_STORE_H */
