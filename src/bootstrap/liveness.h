/* liveness.h: the liveness mesh, a TCP connection between every pair of ranks that later turns a
 * dead peer into an error. */
#ifndef TUTTI_BOOTSTRAP_LIVENESS_H
#define TUTTI_BOOTSTRAP_LIVENESS_H

#include "oob.h"

typedef struct tutti__liveness tutti__liveness_t;

/*
 * tutti__live_create opens a TCP connection to every other rank (addresses exchanged through bs;
 * ip is the local address to listen on and publish). The kernel closes these when a process
 * dies, however it dies, so a closed connection without a goodbye means a dead peer. extra is
 * how many more descriptors the rank will open later (ofi's connections, made on first use):
 * a rank whose limit of open files leaves no room for them fails here, on every rank at once.
 */
tutti_status_t tutti__live_create(tutti__bootstrap_t *bs, const char *ip, int extra,
                                  tutti__liveness_t **out);

/*
 * tutti__live_check polls every connection without blocking. Returns TUTTI_OK, or
 * TUTTI_ERR_PEER_FAILED with *dead set to the lowest rank whose connection closed without a
 * goodbye. Safe to call often; a syscall each call, so callers rate-limit it.
 */
tutti_status_t tutti__live_check(tutti__liveness_t *l, int *dead);

/* tutti__live_check_now is tutti__live_check that waits for another thread's poll (or the
 * heartbeat thread's send) to end and then reads every connection itself, where that poll
 * would otherwise only report the other's result: for checks that must see what is there. */
tutti_status_t tutti__live_check_now(tutti__liveness_t *l, int *dead);

/* tutti__live_left tells whether rank has said goodbye (destroyed its communicator). */
bool tutti__live_left(const tutti__liveness_t *l, int rank);

/* tutti__live_dead tells whether rank's connection closed without a goodbye (it died), as
 * found by the last tutti__live_check. */
bool tutti__live_dead(const tutti__liveness_t *l, int rank);

/* tutti__live_pid is rank's process id, as it announced it. */
int tutti__live_pid(const tutti__liveness_t *l, int rank);

/*
 * tutti__live_goodbye sends a goodbye to every peer and, if wait is true, waits until every peer
 * has said goodbye or died, or until deadline; returns TUTTI_ERR_TIMEOUT naming the peers that
 * did neither.
 */
tutti_status_t tutti__live_goodbye(tutti__liveness_t *l, bool wait, double deadline);

/* tutti__live_beat starts a thread that sends a heartbeat to every peer each period_s seconds
 * until destroy (nothing for one rank), so that peers can tell a rank that stopped running
 * (SIGSTOP, a debugger, a frozen host) from one that is only busy. */
tutti_status_t tutti__live_beat(tutti__liveness_t *l, double period_s);

/* tutti__live_stalled tells whether this process may have been stopped (SIGSTOP, a debugger)
 * or frozen lately: 0 when its heartbeat thread ran on time and has not found a gap in the last
 * 2 s, else about how long the gap was (seconds). Two coarse clock reads: cheap enough for the
 * end of every call. */
double tutti__live_stalled(const tutti__liveness_t *l);

/* tutti__live_silent tells whether a peer from rank `from` up that neither died nor left has
 * sent nothing (no heartbeat) for more than limit_s seconds, as found by the last
 * tutti__live_check: *rank is the lowest such rank and *silent_s how long (from = *rank + 1
 * finds the next one). Always false before tutti__live_beat. */
bool tutti__live_silent(tutti__liveness_t *l, double limit_s, int from, int *rank,
                        double *silent_s);

/* A peer that sent nothing for this long was unreachable or stopped, not merely busy: its
 * heartbeats come every 0.25 s at most. */
#define TUTTI__LIVE_SILENCE_S 1.0

/* tutti__live_resumed is when rank was last heard again after a silence of more than
 * TUTTI__LIVE_SILENCE_S (a link down and up, a stop and continue), 0.0 if never: what it sent
 * before, over other connections, may still be on its way. */
double tutti__live_resumed(const tutti__liveness_t *l, int rank);

/* tutti__live_left_grace is how long data rank sent before it left (its goodbye) may still take
 * to arrive: a second; 30 s when it was silent lately (after a link down and up, its data comes
 * when TCP resends it, seconds after the goodbye that came on another connection). */
double tutti__live_left_grace(const tutti__liveness_t *l, int rank);

/* tutti__live_troubled tells whether a peer that neither died nor left is silent now, or was
 * heard again after a silence at `since` or later (*rank: the lowest such). */
bool tutti__live_troubled(tutti__liveness_t *l, double since, int *rank);

/* tutti__live_notify_failed tells every peer that this rank's communicator failed with st in
 * its call seq (best effort: a peer whose buffer is full does not get it); relayed: this rank
 * only passes on a failure that another rank found; blame: the other rank of a mismatch, or -1. */
void tutti__live_notify_failed(tutti__liveness_t *l, tutti_status_t st, uint64_t seq,
                               bool relayed, int blame);

/* tutti__live_failed tells whether a peer said its communicator failed (tutti__live_notify_failed,
 * read by tutti__live_check): *rank is the lowest such rank that found its failure itself, or
 * the lowest that passed one on where no other notice has come; *st and *seq its failure. */
bool tutti__live_failed(const tutti__liveness_t *l, int *rank, tutti_status_t *st, uint64_t *seq);
/* tutti__live_told tells whether rank sent a failure notice of its own communicator. */
bool tutti__live_told(const tutti__liveness_t *l, int rank);
/* tutti__live_blame is the rank that rank's notice named (the other of its mismatch, or the rank
 * it found dead or silent), or -1 (no notice, or none named). */
int tutti__live_blame(const tutti__liveness_t *l, int rank);
/* tutti__live_failed_upto is tutti__live_failed among the notices of failures in calls up to
 * upto (ranks' call numbers differ: a reduce's leaves may run far ahead of its root); *blame
 * (if not NULL) is the other rank of its mismatch, or -1. */
bool tutti__live_failed_upto(const tutti__liveness_t *l, uint64_t upto, int *rank,
                             tutti_status_t *st, uint64_t *seq, int *blame);

/* ---- mail: small records between ranks over the mesh, while their communicator cannot carry
 * them (tutti_comm_shrink agrees on the survivors so) ---- */

#define TUTTI__LIVE_MAIL_KINDS 4

/* The kinds in use: tutti_comm_shrink's views and decisions (shrink.c), and a member's report
 * that its part of a tutti_comm_split failed (split.c). */
enum { TUTTI__MAIL_SHRINK_VIEW = 0, TUTTI__MAIL_SHRINK_DECIDE = 1, TUTTI__MAIL_SPLIT_FAILED = 2 };

/* tutti__live_mail_send sends rank a record of kind (0 .. TUTTI__LIVE_MAIL_KINDS - 1) and len
 * bytes (at most tutti__live_mail_cap), all of it, waiting for room until deadline: TUTTI_OK,
 * TUTTI_ERR_PEER_FAILED (the link is closed or broke) or TUTTI_ERR_TIMEOUT. */
tutti_status_t tutti__live_mail_send(tutti__liveness_t *l, int rank, int kind, const void *buf,
                                     size_t len, double deadline);

/* tutti__live_mail_read copies rank's last record of kind into buf (at most cap bytes, the
 * length in *len) and returns how many of that kind rank has sent (0: none, nothing copied).
 * Records arrive while something reads the links (tutti__live_wait, the checks). */
uint64_t tutti__live_mail_read(tutti__liveness_t *l, int rank, int kind, void *buf, size_t cap,
                               size_t *len);

/* tutti__live_mail_cap is the longest record a peer may send: 1024 + 4 bytes per rank. */
size_t tutti__live_mail_cap(const tutti__liveness_t *l);

/* tutti__live_wait reads every link for up to ms milliseconds (the heartbeat waits meanwhile:
 * keep ms short). */
void tutti__live_wait(tutti__liveness_t *l, int ms);

/* tutti__live_destroy closes every connection and frees l (NULL is fine). */
void tutti__live_destroy(tutti__liveness_t *l);

#endif /* TUTTI_BOOTSTRAP_LIVENESS_H */
