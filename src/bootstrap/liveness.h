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

/* tutti__live_left_calls is how many collective calls rank had numbered (tutti__live_note_call)
 * when it said goodbye, UINT64_MAX while it has not: a call of that number or later is one it
 * never posted, so nothing of it will come. */
uint64_t tutti__live_left_calls(const tutti__liveness_t *l, int rank);

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

/* ---- calls: which collective this rank posted as each call number, for a peer's waiter ----
 *
 * A receive on a message path that never meets a message never compares fingerprints: two ranks
 * that posted different calls with the same number (another root, say) could each wait for the
 * other until the timeout. So a waiter that has waited a while asks the peer over the mesh which
 * call it posted with that number (tutti__live_ask); the peer's mesh answers from the ring below,
 * which the peer's process group writes as it numbers each call (tutti__live_note_call), and the
 * waiter compares the answer with its own call (prims.c). */

#define TUTTI__LIVE_CALLS 64 /* call numbers remembered (a power of two) */

typedef struct tutti__live_calls {
    /* per number modulo TUTTI__LIVE_CALLS: seq + 1 (0: none, or being rewritten), then the
     * call's descriptor (count and info words, as callsig.c makes them) */
    uint64_t slot[TUTTI__LIVE_CALLS][3];
    uint64_t next; /* the highest number noted + 1 (atomic) */
} tutti__live_calls_t;

/* tutti__live_calls is l's ring of posted calls (owned by l, freed with it), for
 * tutti__live_note_call; NULL for NULL. */
tutti__live_calls_t *tutti__live_calls(tutti__liveness_t *l);

/* tutti__live_note_call records that this rank posted call seq with descriptor (count, info).
 * One writer at a time (the process group numbers calls under its exec lock); any thread may
 * read meanwhile: the slot is cleared first and its number written last, each store a release,
 * so a reader that finds the same number before and after the descriptor has a whole one. Four
 * stores: the only cost per call. */
static inline void tutti__live_note_call(tutti__live_calls_t *k, uint64_t seq, uint64_t count,
                                         uint64_t info)
{
    if (k == NULL)
        return;
    uint64_t *s = k->slot[seq & (TUTTI__LIVE_CALLS - 1)];
    __atomic_store_n(&s[0], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s[1], count, __ATOMIC_RELEASE);
    __atomic_store_n(&s[2], info, __ATOMIC_RELEASE);
    __atomic_store_n(&s[0], seq + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&k->next, seq + 1, __ATOMIC_RELEASE);
}

/* What a peer answered about one of its call numbers (tutti__live_answer). */
enum { TUTTI__LIVE_NO_ANSWER = 0, TUTTI__LIVE_POSTED = 1, TUTTI__LIVE_NOT_YET = 2,
       TUTTI__LIVE_GONE = 3 };

/* tutti__live_ask asks rank which call it posted as number seq. Best effort: nothing goes when
 * the link is closed or its buffer full (ask again later). The answer comes back while something
 * reads the links (the checks of a wait, the heartbeat thread), and rank's own links are read
 * the same way, by its waits or its heartbeat thread, so it answers while it computes too. */
void tutti__live_ask(tutti__liveness_t *l, int rank, uint64_t seq);

/* tutti__live_answer is rank's last answer about call seq: TUTTI__LIVE_POSTED with *count and
 * *info (its descriptor of that call), TUTTI__LIVE_NOT_YET (it has not numbered seq yet: late,
 * or a call short), TUTTI__LIVE_GONE (too far behind it to tell), or TUTTI__LIVE_NO_ANSWER (none
 * about seq has come). What a peer wrote: *count and *info are only words to compare. */
int tutti__live_answer(tutti__liveness_t *l, int rank, uint64_t seq, uint64_t *count,
                       uint64_t *info);

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
