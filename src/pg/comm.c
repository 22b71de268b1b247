/* comm.c: the communicator as a handle: the registry of live handles (every call rejects a
 * destroyed or bogus one), its error texts and the one way to mark it failed, destroy, abort,
 * and the accessors. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"
#include "observe.h"

/* ---- registry of live communicators: lets every call reject a destroyed or bogus handle ---- */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static const tutti_comm_t **reg;
static size_t reg_n, reg_cap;
/* A child of fork() has the parent's handles but none of its worker threads, and its calls
 * would join the parent's (a mismatch, or data the parent never sent): the child's registry
 * starts empty, and the inherited handles are kept aside only to say why they are refused. */
static size_t reg_forked;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void reg_prepare(void) { pthread_mutex_lock(&reg_lock); }
static void reg_parent(void) { pthread_mutex_unlock(&reg_lock); }
static void reg_child(void)
{
    reg_forked = reg_n; /* reg[0 .. reg_forked) are the parent's */
    reg_n = 0;
    pthread_mutex_unlock(&reg_lock);
}
static void reg_init(void) { pthread_atfork(reg_prepare, reg_parent, reg_child); }

bool tutti__comm_register(const tutti_comm_t *c)
{
    pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_lock);
    reg_forked = 0; /* the child's first own communicator: the parent's are forgotten */
    if (reg_n == reg_cap) {
        size_t cap = reg_cap ? reg_cap * 2 : 8;
        const tutti_comm_t **r = realloc(reg, cap * sizeof *r);
        if (r == NULL) {
            pthread_mutex_unlock(&reg_lock);
            return false;
        }
        reg = r;
        reg_cap = cap;
    }
    reg[reg_n++] = c;
    pthread_mutex_unlock(&reg_lock);
    return true;
}

void tutti__comm_unregister(const tutti_comm_t *c)
{
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < reg_n; i++)
        if (reg[i] == c) {
            reg[i] = reg[--reg_n];
            break;
        }
    pthread_mutex_unlock(&reg_lock);
}

bool tutti__comm_valid(const tutti_comm_t *c)
{
    if (c == NULL)
        return false;
    bool found = false;
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < reg_n && !found; i++)
        found = reg[i] == c;
    pthread_mutex_unlock(&reg_lock);
    return found && c->magic == TUTTI__COMM_MAGIC;
}

const char *tutti__comm_why_not(const tutti_comm_t *c)
{
    bool inherited = false;
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < reg_forked && !inherited; i++)
        inherited = reg[i] == c;
    pthread_mutex_unlock(&reg_lock);
    return inherited ? " (it was created before this process was forked: a child of fork() "
                       "cannot use or destroy its parent's communicators; it may create its own)"
                     : "";
}

/* ---- errors ---- */

static tutti_status_t fail_at(tutti_comm_t *c, tutti_status_t status, const char *msg, int level,
                              bool abort)
{
    pthread_mutex_lock(&c->err_lock);
    /* aborted before failed: a reader that sees failed (acquire) then reads aborted sees it set,
     * so an abort never reads as an earlier failure (COMM_FAILED) */
    if (abort)
        __atomic_store_n(&c->aborted, 1, __ATOMIC_RELEASE);
    if (c->failed == TUTTI_OK) {
        snprintf(c->failed_msg, sizeof c->failed_msg, "%s", msg);
        __atomic_store_n(&c->failed, status, __ATOMIC_RELEASE);
        TUTTI__LOG(level, "%s", msg); /* msg names the rank already */
    }
    snprintf(c->last_error, sizeof c->last_error, "%s", msg);
    pthread_mutex_unlock(&c->err_lock);
    snprintf(tutti__tls_error(), TUTTI__ERRLEN, "%s", msg);
    return status;
}

tutti_status_t tutti__comm_fail(tutti_comm_t *c, tutti_status_t status, const char *msg)
{
    return fail_at(c, status, msg, TUTTI__LOG_ERROR, false);
}

tutti_status_t tutti__comm_end(tutti_comm_t *c, tutti_status_t status, const char *msg)
{
    /* Whatever failed first: a failure leaves sends and receives open (p2p.md), an end asked
     * for ends them too. */
    return fail_at(c, status, msg, TUTTI__LOG_INFO, true);
}

tutti_status_t tutti__comm_error(tutti_comm_t *c, tutti_status_t status, const char *fmt, ...)
{
    char msg[TUTTI__ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&c->err_lock);
    snprintf(c->last_error, sizeof c->last_error, "%s", msg);
    pthread_mutex_unlock(&c->err_lock);
    snprintf(tutti__tls_error(), TUTTI__ERRLEN, "%s", msg);
    return status;
}


/* How long a destroy goes on waiting, past its timeout, for a peer that was silent lately. */
#define TROUBLED_WAIT_S 60.0

/* goodbye_troubled is the rest of a healthy destroy whose wait for the peers' goodbyes timed
 * out (a timeout lowered for the end, as tutti_torch's 2 s). If a peer that has not ended is
 * silent (no heartbeat: a link down, or a stopped process), or was heard again only while this
 * rank waited, what this rank sent it last may not have reached it (an eager send completes
 * when it is queued, and TCP resends only after its backoff), and ending now would lose it. So
 * the wait goes on, polling the transport, until that peer too has ended (or died), up to the
 * timeout the communicator was created with, at most TROUBLED_WAIT_S; its receive waits as
 * long for data after this rank's goodbye (p2p_fail.c). Peers that only run late, and beat,
 * are not waited for. */
static tutti_status_t goodbye_troubled(tutti_comm_t *comm, double began)
{
    int r;
    if (!tutti__live_troubled(comm->net.live, began - TUTTI__LIVE_SILENCE_S, &r))
        return TUTTI_ERR_TIMEOUT; /* its error names the late ranks */
    double until =
        began + (comm->cfg.timeout < TROUBLED_WAIT_S ? comm->cfg.timeout : TROUBLED_WAIT_S);
    if (until <= tutti__now())
        return TUTTI_ERR_TIMEOUT;
    TUTTI__LOG(TUTTI__LOG_WARN,
               "rank %d: the end of the communicator waits for rank %d, which was silent (a link "
               "down, or a stopped process?), so that what this rank sent it last is not lost: "
               "up to %.0f s more",
               comm->rank, r, until - tutti__now());
    tutti_status_t st = TUTTI_ERR_TIMEOUT;
    while (st == TUTTI_ERR_TIMEOUT && tutti__now() < until) {
        tutti__transport_t *ofi = comm->net.links.ofi;
        if (ofi != NULL)
            (void)ofi->ops->progress(ofi);
        double next = tutti__now() + 0.01;
        st = tutti__live_goodbye(comm->net.live, true, next < until ? next : until);
    }
    if (st == TUTTI_ERR_TIMEOUT)
        st = tutti__set_error(TUTTI_ERR_TIMEOUT,
                              "rank %d waited %.3g s for its peers to destroy the communicator "
                              "too; rank %d was silent for a while (a link down, a host gone, or "
                              "a stopped process): what this rank sent it last may not have "
                              "reached it",
                              comm->rank, tutti__now() - began, r);
    return st;
}

TUTTI_API tutti_status_t tutti_comm_destroy(tutti_comm_t *comm)
{
    if (!tutti__comm_valid(comm))
        return tutti__set_error(TUTTI_ERR_INVALID_COMM,
                                "tutti_comm_destroy: %p is not a live communicator (NULL, already "
                                "destroyed, or never created)%s",
                                (void *)comm, tutti__comm_why_not(comm));
    /* The straggler report, while the communicator still works. */
    tutti__obs_report_final(comm);
    tutti__comm_unregister(comm);
    /* Queued operations fail; the running one ends first (it fails fast if the communicator
     * has failed or was aborted). */
    tutti__exec_stop(comm, TUTTI_ERR_ABORTED,
                     "tutti_comm_destroy was called while it was still queued");
    tutti__p2p_close(comm, TUTTI_ERR_ABORTED,
                     "tutti_comm_destroy was called while it was still in progress");
    tutti__obs_write(comm); /* no worker records any more */
    /* A healthy communicator waits for its peers: a peer may still be reading this rank's shared
     * memory or receiving its last message. A failed one has nothing left to protect. */
    bool wait = comm->failed == TUTTI_OK;
    double now = tutti__now();
    tutti_status_t st =
        tutti__live_goodbye(comm->net.live, wait, now + tutti__net_timeout(&comm->net));
    if (wait && st == TUTTI_ERR_TIMEOUT)
        st = goodbye_troubled(comm, now);
    tutti__comm_free(comm);
    return st;
}

TUTTI_API tutti_status_t tutti_comm_abort(tutti_comm_t *comm)
{
    if (!tutti__comm_valid(comm))
        return tutti__set_error(TUTTI_ERR_INVALID_COMM,
                                "tutti_comm_abort: %p is not a live communicator%s", (void *)comm,
                                tutti__comm_why_not(comm));
    char msg[128];
    snprintf(msg, sizeof msg, "rank %d: tutti_comm_abort was called", comm->rank);
    tutti__comm_end(comm, TUTTI_ERR_ABORTED, msg); /* the caller knows: not logged as an error */
    return TUTTI_OK;
}

TUTTI_API tutti_status_t tutti_comm_set_timeout(tutti_comm_t *comm, double timeout_s)
{
    if (!tutti__comm_valid(comm))
        return tutti__set_error(TUTTI_ERR_INVALID_COMM,
                                "tutti_comm_set_timeout: %p is not a live communicator%s",
                                (void *)comm, tutti__comm_why_not(comm));
    if (!(timeout_s >= TUTTI__TIMEOUT_MIN && timeout_s <= TUTTI__TIMEOUT_MAX))
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "tutti_comm_set_timeout: the timeout is %g s: give seconds from "
                                "%g to %g",
                                timeout_s, TUTTI__TIMEOUT_MIN, TUTTI__TIMEOUT_MAX);
    __atomic_store(&comm->net.timeout_s, &timeout_s, __ATOMIC_RELAXED);
    __atomic_store_n(&comm->net.timeout_given, true, __ATOMIC_RELAXED);
    return TUTTI_OK;
}

/* The calling thread's timeout for the operations it posts (tutti_set_call_timeout); 0: each
 * communicator's own. */
static __thread double call_timeout;

TUTTI_API tutti_status_t tutti_set_call_timeout(double timeout_s, double *previous)
{
    if (timeout_s != 0.0 && !(timeout_s >= TUTTI__TIMEOUT_MIN && timeout_s <= TUTTI__TIMEOUT_MAX))
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "tutti_set_call_timeout: the timeout is %g s: give seconds from "
                                "%g to %g, or 0 for each communicator's own",
                                timeout_s, TUTTI__TIMEOUT_MIN, TUTTI__TIMEOUT_MAX);
    if (previous != NULL)
        *previous = call_timeout;
    call_timeout = timeout_s;
    return TUTTI_OK;
}

double tutti__call_timeout(void)
{
    return call_timeout;
}

/* ---- accessors ---- */

#define GETTER(name, expr)                                                                     \
    TUTTI_API int tutti_comm_##name(const tutti_comm_t *c) { return tutti__comm_valid(c) ? (expr) : -1; }
GETTER(rank, c->rank)
GETTER(size, c->size)
GETTER(local_rank, c->nodes.local_rank)
GETTER(local_size, c->nodes.local_size)
GETTER(node_count, c->nodes.nnodes)
GETTER(worker_count, c->nslices)
#undef GETTER

TUTTI_API uint64_t tutti_comm_seq(const tutti_comm_t *c) { return tutti__comm_valid(c) ? __atomic_load_n(&c->seq, __ATOMIC_RELAXED) : 0; }

TUTTI_API const char *tutti_comm_transport(const tutti_comm_t *c, int peer)
{
    if (!tutti__comm_valid(c) || peer < 0 || peer >= c->size)
        return NULL;
    if (peer == c->rank)
        return "self";
    tutti__transport_t *tp = c->net.links.peer_tp[peer];
    return tp ? tp->ops->name : NULL;
}

TUTTI_API int tutti_comm_worker_cpu(const tutti_comm_t *c, int worker)
{
    return tutti__comm_valid(c) ? tutti__exec_worker_cpu(c, worker) : -1;
}

TUTTI_API const char *tutti_comm_last_error(const tutti_comm_t *c)
{
    /* a copy: workers and the progress thread rewrite the text under the lock meanwhile */
    static _Thread_local char copy[TUTTI__ERRLEN];
    if (!tutti__comm_valid(c))
        return "";
    pthread_mutex_t *lock = (pthread_mutex_t *)&c->err_lock;
    pthread_mutex_lock(lock);
    snprintf(copy, sizeof copy, "%s", c->last_error);
    pthread_mutex_unlock(lock);
    return copy;
}

