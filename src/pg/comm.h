/* comm.h: the communicator's internal state and the work handle, shared by the files of the
 * process group (src/pg/), the top layer: it includes every layer below and none includes it. */
#ifndef TUTTI_COMM_H
#define TUTTI_COMM_H

#include <pthread.h>
#include <sys/types.h>

#include "../algos/algos.h"
#include "../algos/p2p.h"
#include "../bootstrap/bootstrap.h"
#include "../common/common.h"
#include "../transport/transport.h"

#define TUTTI__COMM_MAGIC 0x74757474u /* "tutt" */

/* Timeouts a communicator accepts, in seconds: below a millisecond every wait would fail before
 * a peer could answer; above 1e9 (32 years) is a mistake, and infinities and NaN are refused. */
#define TUTTI__TIMEOUT_MIN 1e-3
#define TUTTI__TIMEOUT_MAX 1e9

typedef struct tutti__exec tutti__exec_t;
typedef struct tutti__p2p_pg tutti__p2p_pg_t;
typedef struct tutti__obs tutti__obs_t;

/* This rank's part of the node's placement. */
typedef struct tutti__threads {
    int caller;          /* the core for the calling thread; -1: none known */
    int workers[16];     /* the core of each worker; -1: not pinned */
    bool oversubscribed; /* waits yield at once */
    bool node_oversubscribed; /* some local rank's waits yield at once: the same on every local
                                 rank (each computes every rank's placement) */
} tutti__threads_t;

/* How a communicator was asked for (config.c); sub-communicators inherit it. */
typedef struct tutti__config {
    double timeout;
    bool timeout_given;    /* the config gave it (not TUTTI_TIMEOUT or the default) */
    const char *transport; /* "auto", "shm" or "ofi" (a static string) */
    long workers;
    bool worker_sleep;     /* CCL_WORKER_WAIT=1: idle workers sleep */
    long inline_max;       /* TUTTI_INLINE_MAX or the config's (-1: blocking calls only) */
    const char *caller_affinity; /* TUTTI_CALLER_AFFINITY: "auto", "move", "pin" or "none" (static) */
} tutti__config_t;

struct tutti_comm {
    uint32_t magic;
    tutti__config_t cfg;
    char ip[64];        /* the address peers reach this rank at (liveness mesh, sub-stores) */
    int rank, size;
    tutti__nodes_t nodes; /* which ranks share this node */
    tutti__threads_t threads; /* where this rank's threads go (a split child keeps its parent's) */
    tutti__net_t net;     /* what the algorithms run on: transports, windows, slices, liveness */

    uint64_t seq;              /* collectives posted so far (atomic) */
    uint64_t flow_calls[2];    /* broadcasts [0] and reduces [1] with data so far, for flow
                                  control (exec.c's number) */
    tutti__live_calls_t *calls; /* the ring of posted calls in net.live (tutti__live_note_call) */
    uint64_t p2p_seq;          /* send/recv calls so far, for messages (atomic) */
    uint32_t shrinks;          /* tutti_comm_shrink calls so far (atomic; shrink.c) */
    tutti__p2p_pg_t *p2p;      /* the point-to-point engine and its progress thread (p2p.c) */
    pthread_mutex_t err_lock;  /* guards failed, failed_msg and last_error */
    volatile tutti_status_t failed; /* TUTTI_OK, or the error that broke the communicator */
    volatile int aborted;      /* tutti_comm_abort or tutti_comm_shrink was called, whatever
                                  failed before (atomic): open operations end, sends and
                                  receives too, and later calls fail with TUTTI_ERR_ABORTED */
    char failed_msg[TUTTI__ERRLEN];
    char last_error[TUTTI__ERRLEN];
    tutti__algo_override_t algo[TUTTI_COLL_COUNT]; /* algo_override.c */
    int nslices;               /* worker threads; also the most slices an operation is cut into */
    tutti__exec_t *exec;       /* the queue and the workers (exec.c) */
    tutti__obs_t *obs;         /* TUTTI_TRACE / TUTTI_REPORT recording (observe.c); NULL: off */
    uint64_t splits;           /* tutti_comm_split calls so far: the same on every rank */
    bool has_secret;           /* every rank holds secret (a SECRET job's, or derived from it): */
    uint8_t secret[TUTTI__AUTH_KEY]; /* sub-communicators' stores derive theirs from it */
};

/* The state a work handle passes through (a futex word): SLEEPERS is PENDING with a waiter
 * asleep on it, so that completion makes the wake-up system call only when someone sleeps. */
enum { TUTTI__WORK_PENDING = 0, TUTTI__WORK_DONE = 1, TUTTI__WORK_SLEEPERS = 2 };

struct tutti_work {
    struct tutti_work *next; /* the communicator's queue (exec lock) */
    tutti_comm_t *comm;      /* not owned; the handle may outlive it (then it is complete) */
    tutti__coll_t coll;
    int nsplit;              /* slices it runs as: 1 = whole, on slice 0 */
    bool trivial;            /* nothing to communicate: a single rank's copy, or 0 bytes */
    bool p2p;                /* a send or receive (the p2p engine completes it, not a worker) */
    bool oversubscribed;     /* the communicator's, for the waits (the handle may outlive it) */
    int left;                /* workers that have yet to pass it (exec lock) */
    int state;               /* TUTTI__WORK_PENDING, then TUTTI__WORK_DONE (atomic; futex) */
    int refs;                /* the caller's and the executor's (atomic); freed at 0 */
    int cb_state;            /* 0 none, 1 set, 2 completion has passed (atomic) */
    int cb_taken;            /* a callback was ever given (atomic): a second one is refused */
    void (*cb)(tutti_work_t *, void *);
    void *cb_arg;
    tutti_status_t status;
    int source;              /* a receive's sender once it completed, else -1 */
    void *owned;             /* memory the operation needs (copied layouts, packed data) */
    void (*post_fn)(tutti_work_t *); /* run on success before completion (unpacking) */
    char error[TUTTI__ERRLEN];
};

/* tutti__work_in_callback tells whether this thread runs a completion callback of comm's, for an
 * operation of the p2p engine (p2p) or of the workers (work.c). */
bool tutti__work_in_callback(const tutti_comm_t *comm, bool p2p);

/* ---- execution (exec.c) ---- */

/* tutti__exec_create starts comm->nslices worker threads, pinned to cpus[i] (-1: not pinned),
 * sleeping when idle if sleep is true, else spinning. */
tutti_status_t tutti__exec_create(tutti_comm_t *comm, const int *cpus, bool sleep,
                                  long inline_max);

/* tutti__exec_submit runs w: at once in the calling thread when nothing else is queued or
 * running and w is small (bytes <= inline_max) or the caller blocks on it anyway (blocking,
 * unless inline_max is 0; -1 lets only blocking calls), else through the queue to the workers. It assigns the sequence
 * number. w->refs must count the caller's reference; submit adds the executor's. */
void tutti__exec_submit(tutti_comm_t *comm, tutti_work_t *w, size_t bytes, bool trivial,
                        bool blocking);

/* tutti__exec_run_blocking runs c in the calling thread, as a blocking call, when the
 * communicator is idle (nothing queued or running) and c would not be sliced, without a work
 * handle: *status is its outcome (errors recorded as comm's and the thread's last error) and
 * it returns true. It returns false, having done nothing, when c must go through the queue.
 *
 * The executor is the one place that decides a communicator has failed: a call that ran and
 * returned an error fails it (tutti__comm_fail), whatever the error, unless the algorithm
 * declined the call before touching anything (tutti__decline); a declined call, and one not
 * run because the communicator had failed already, are recorded as errors only. */
bool tutti__exec_run_blocking(tutti_comm_t *comm, tutti__coll_t *c, size_t bytes, bool trivial,
                              tutti_status_t *status);

/* tutti__exec_stop fails every queued operation with status and msg, waits for the running
 * one to end (it fails fast once comm is marked failed or aborted), and joins the workers. */
void tutti__exec_stop(tutti_comm_t *comm, tutti_status_t status, const char *msg);

/* tutti__exec_set_override sets coll's algorithm override under the lock that numbering reads
 * it under (tutti_comm_set_algorithm may come from any thread while another posts). */
void tutti__exec_set_override(tutti_comm_t *comm, tutti_coll_t coll,
                              const tutti__algo_override_t *ov);

/* tutti__exec_get_override is a copy of coll's override, read under that lock. */
tutti__algo_override_t tutti__exec_get_override(const tutti_comm_t *comm, tutti_coll_t coll);

/* tutti__exec_worker_cpu is the core worker i is pinned to, or -1. */
int tutti__exec_worker_cpu(const tutti_comm_t *comm, int i);

/* ---- work handles (work.c) ---- */

/* tutti__work_complete publishes w's outcome st, wakes whoever waits on w and runs its
 * callback, once. */
void tutti__work_complete(tutti_work_t *w, tutti_status_t st);

/* tutti__work_release drops one reference to w, freeing it at zero. */
void tutti__work_release(tutti_work_t *w);

/* ---- point-to-point (p2p.c) ---- */

/* tutti__p2p_open gives comm its point-to-point state (the engine itself comes with the first
 * send or receive). */
tutti_status_t tutti__p2p_open(tutti_comm_t *comm);

/* tutti__p2p_submit runs a checked send or receive (kind TUTTI__P2P_SEND or _RECV, len bytes,
 * peer a rank or TUTTI_ANY_SOURCE, tag >= 0) in comm's engine, apart from the collectives'
 * queue: with work NULL it returns once the op is done (driving the engine in this thread),
 * else it stores a handle the progress thread completes. Failures are recorded as comm's and
 * the thread's last error; they never fail the communicator. */
tutti_status_t tutti__p2p_submit(tutti_comm_t *comm, int kind, void *buf, size_t len, int peer,
                                 int tag, tutti_work_t **work);

/* tutti__p2p_close ends every open send and receive of comm with status and why, stops the
 * progress thread and frees the engine (destroy, and a half-made communicator). */
void tutti__p2p_close(tutti_comm_t *comm, tutti_status_t status, const char *why);

/* ---- thread placement (placement.c, affinity.c) ---- */

/*
 * tutti__place works out one node's placement from the cores each of its nlocal ranks may use
 * (sets[r]; empty: unknown): caller[r], the core for local rank r's calling thread (-1: none
 * known); with auto_workers, workers[r * nworkers + i], the core for its worker i (otherwise
 * workers holds the given cores, -1 for unpinned, and is only read); over[r], whether rank r's
 * waits must yield at once because one of its busy threads shares a core with another busy
 * thread of the node (workers count as busy only when workers_spin), or the node's busy threads
 * outnumber its cores. Calling threads go to distinct cores where there are enough, bound
 * ranks first; automatic workers take cores no calling thread has, else their own caller's,
 * never another rank's caller's. The same inputs give the same result on every rank. False
 * only when out of memory.
 */
bool tutti__place(int nlocal, const tutti__cpuset_t *sets, int nworkers, bool workers_spin,
                  bool auto_workers, int *caller, int *workers, bool *over);


/* tutti__threads_plan reads CCL_WORKER_AFFINITY ("auto", "none" or a list with an entry per
 * local worker, each checked against this rank's allowed cores) and places this node's threads
 * with tutti__place. A bad list is TUTTI_ERR_INVALID_ARG naming the variable. */
tutti_status_t tutti__threads_plan(const tutti__nodes_t *nodes, int nworkers, bool workers_spin,
                                   tutti__threads_t *out);

/* tutti__comm_cma tells whether comm's ranks, all on this node, can read each other's memory
 * (single copy: the cma algorithms can run). */
static inline bool tutti__comm_cma(const tutti_comm_t *comm)
{
    return comm->net.links.wins != NULL && comm->net.links.wins[0]->cma;
}

/* ---- the handle: registry and errors (comm.c) ---- */

/* tutti__comm_register adds comm to the registry of live handles; false when out of memory. */
bool tutti__comm_register(const tutti_comm_t *comm);
/* tutti__comm_unregister takes comm out of the registry (if it is there). */
void tutti__comm_unregister(const tutti_comm_t *comm);

/* tutti__call_timeout is the calling thread's tutti_set_call_timeout (0: none), which the
 * operations it posts take as theirs. */
double tutti__call_timeout(void);

/* tutti__comm_valid tells whether comm is a live communicator (in the registry). */
bool tutti__comm_valid(const tutti_comm_t *comm);

/* tutti__comm_why_not is "" or, for a handle a child of fork() inherited, a text (starting with
 * a space) that says so, for the error of a call tutti__comm_valid refused. */
const char *tutti__comm_why_not(const tutti_comm_t *comm);

/* tutti__comm_child_auth is the secret of a store that a communicator made from parent
 * (split.c, shrink.c) serves: derived from the parent's, with label and salt, when every rank
 * holds one (the salt alone tells nothing to whoever sees it pass), else the salt itself, which
 * then travels as safely as the parent's own traffic. */
void tutti__comm_child_auth(const tutti_comm_t *parent, const char *label,
                            const uint8_t salt[TUTTI__AUTH_KEY], tutti__auth_t *a);

/* tutti__comm_fail marks comm failed with status and message (first failure wins) and copies
 * the message into the thread's and the communicator's last-error text. Returns status. */
tutti_status_t tutti__comm_fail(tutti_comm_t *comm, tutti_status_t status, const char *msg);
/* tutti__comm_end is tutti__comm_fail for an end the caller asked for (a shrink, an abort):
 * logged as information, not as an error. */
tutti_status_t tutti__comm_end(tutti_comm_t *comm, tutti_status_t status, const char *msg);

/* tutti__comm_error records a non-fatal error (bad input) as comm's and the thread's last
 * error. Returns status. */
tutti_status_t tutti__comm_error(tutti_comm_t *comm, tutti_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- configuration (config.c) ---- */

/* tutti__config_read reads the environment and the caller's config (NULL: none) into out; a bad
 * value is TUTTI_ERR_INVALID_ARG naming the variable or field. */
tutti_status_t tutti__config_read(const tutti_comm_config_t *config, tutti__config_t *out);

/* tutti__config_token is the caller's job_token (NULL when config is NULL, too old to have the
 * field, or has none); it is used during creation only, never kept. */
const char *tutti__config_token(const tutti_comm_config_t *config);

/* ---- creation (create.c) ---- */

/* tutti__comm_create builds a communicator of size ranks over the bootstrap bs (store: the TCP
 * store bs runs on, or NULL for a caller's store); collective over those ranks. A split's child
 * (parent not NULL) keeps its parent's thread placement; a communicator made from scratch
 * places this node's threads (affinity.c) and, per TUTTI_CALLER_AFFINITY, the calling thread. */
tutti_status_t tutti__comm_create(int rank, int size, tutti__bootstrap_t *bs, tutti__store_t *store,
                                  const tutti__config_t *cfg, const tutti_comm_t *parent,
                                  tutti_comm_t **out);

/* tutti__comm_free stops comm's workers and frees everything it holds (also a half-made one). */
void tutti__comm_free(tutti_comm_t *comm);

/* ---- v-collectives' layouts (layout.c) ---- */

/* tutti__layout_span checks n counts (what names them in the text) with displacements displs
 * (NULL: packed in rank order) for elements of esize bytes: no block end overflows, and the
 * layout spans at most PTRDIFF_MAX bytes, which go to *span. TUTTI_ERR_INVALID_ARG with the
 * reason in why (cap bytes) otherwise. */
tutti_status_t tutti__layout_span(const char *what, const size_t *counts, const size_t *displs,
                                  int n, size_t esize, size_t *span, char *why, size_t cap);

/* tutti__layout_disjoint checks that no two ranks' non-empty blocks of a receive layout share
 * an element (they would land on each other in an order that depends on arrival); displs
 * NULL is packed. Call after tutti__layout_span accepted the layout. */
tutti_status_t tutti__layout_disjoint(const char *what, const size_t *counts, const size_t *displs,
                                      int n, char *why, size_t cap);

/* tutti__layout_own checks that rank me sends itself as many elements as it receives from
 * itself (alltoallv copies that block locally); TUTTI_ERR_INVALID_ARG with why otherwise. */
tutti_status_t tutti__layout_own(const size_t *sendcounts, const size_t *recvcounts, int me,
                                 char *why, size_t cap);

/* ---- algorithm overrides (algo_override.c) ---- */

/* tutti__override_init parses the CCL_<COLL> variables into comm->algo (at creation, once the
 * transports are known: "direct" needs the window). */
tutti_status_t tutti__override_init(tutti_comm_t *comm);
/* tutti__override_env is coll's variable: "CCL_ALLREDUCE", ... */
const char *tutti__override_env(tutti_coll_t coll);

#endif /* TUTTI_COMM_H */
