/* p2p.c: point-to-point for the process group: sends and receives run in the communicator's
 * point-to-point engine (algos/p2p.c), apart from the queue of collectives and from each other;
 * a blocking call drives the engine in the caller's thread, an asynchronous one gets a work
 * handle that a progress thread (started at the first asynchronous post) completes. */
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"

struct tutti__p2p_pg {
    pthread_mutex_t lock;  /* every call into the engine */
    tutti__p2p_t *eng;     /* made at the first send or receive */
    pthread_mutex_t tlock; /* the progress thread's start, kick and stop */
    pthread_cond_t cv;
    pthread_t thread;
    bool started, stop, kick;
};

/* An asynchronous op and its handle in one block: tutti__work_release frees it as a handle. */
typedef struct p2p_work {
    tutti_work_t w; /* first */
    tutti__p2p_op_t op;
} p2p_work_t;

tutti_status_t tutti__p2p_open(tutti_comm_t *comm)
{
    tutti__p2p_pg_t *pg = calloc(1, sizeof *pg);
    if (pg == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
    pthread_mutex_init(&pg->lock, NULL);
    pthread_mutex_init(&pg->tlock, NULL);
    pthread_cond_init(&pg->cv, NULL);
    comm->p2p = pg;
    return TUTTI_OK;
}

/* finish completes the handles of the asynchronous ops the engine handed back (outside its
 * lock: a completion callback may post again). */
static void finish(tutti_comm_t *comm, tutti__p2p_op_t *op)
{
    while (op != NULL) {
        tutti__p2p_op_t *next = op->done_next;
        p2p_work_t *pw = (p2p_work_t *)((char *)op - offsetof(p2p_work_t, op));
        pw->w.source = op->status == TUTTI_OK && op->kind == TUTTI__P2P_RECV ? op->source : -1;
        if (op->status < 0)
            tutti__comm_error(comm, op->status, "%s", pw->w.error);
        tutti__work_complete(&pw->w, op->status);
        tutti__work_release(&pw->w); /* the engine's reference */
        op = next;
    }
}

/* backoff_init starts a wait of the engine's: over ofi it keeps polling (a piece in flight
 * moves only while someone polls, and counts as moved only once whole). */
static void backoff_init(const tutti_comm_t *comm, tutti__backoff_t *b)
{
    tutti__backoff_init(b, comm->net.oversubscribed);
    if (comm->net.links.ofi != NULL)
        tutti__backoff_keep_polling(b);
}

/* engine_progress runs the engine (the caller holds pg->lock) and, when it moved something,
 * wakes this rank's threads napping on their rings' doorbell: an op of theirs may have ended
 * (that doorbell hears only the peers otherwise). */
static tutti__p2p_op_t *engine_progress(tutti__p2p_pg_t *pg)
{
    uint64_t moved = tutti__moved;
    tutti__p2p_op_t *done = tutti__p2p_progress(pg->eng);
    if (tutti__moved != moved)
        tutti__p2p_wake_nappers(pg->eng);
    return done;
}

/* A nap of an engine's wait (the sleeps that stand in for yields beside a busy thread: time.c)
 * ends as soon as a peer on this node moves one of this rank's rings. */
typedef struct eng_nap {
    tutti_comm_t *comm;
    const int *done; /* the blocking op's done flag; NULL for the progress thread */
} eng_nap_t;

static void nap_on_rings(void *p, double timeout_s)
{
    const eng_nap_t *n = p;
    tutti__p2p_pg_t *pg = n->comm->p2p;
    uint32_t bell;
    if (!tutti__p2p_nap_begin(pg->eng, &bell)) {
        tutti__sleep_us((unsigned)(timeout_s * 1e6));
        return;
    }
    /* Once more, now that a peer that moves a ring rings: what it moved before is seen here.
     * Another thread in the engine (the lock taken) leaves the nap to the doorbell. */
    uint64_t moved = tutti__moved;
    tutti__p2p_op_t *done = NULL;
    if (pthread_mutex_trylock(&pg->lock) == 0) {
        done = engine_progress(pg);
        pthread_mutex_unlock(&pg->lock);
    }
    bool go_on = done != NULL || tutti__moved != moved ||
                 (n->done != NULL && __atomic_load_n(n->done, __ATOMIC_ACQUIRE));
    tutti__p2p_nap_end(pg->eng, bell, go_on ? 0.0 : timeout_s);
    finish(n->comm, done);
}

/* progress_thread drives the engine while it has anything open: it spins briefly, then yields,
 * then sleeps longer the longer nothing ends or moves (tutti__backoff: over shm, a receive that
 * waits for seconds costs about 3% of a core); with nothing open it sleeps until the next
 * asynchronous post. */
static void *progress_thread(void *arg)
{
    tutti_comm_t *comm = arg;
    tutti__p2p_pg_t *pg = comm->p2p;
    tutti__backoff_t b;
    backoff_init(comm, &b);
    for (;;) {
        pthread_mutex_lock(&pg->lock);
        tutti__p2p_op_t *done = engine_progress(pg);
        bool busy = tutti__p2p_busy(pg->eng);
        pthread_mutex_unlock(&pg->lock);
        if (done != NULL) {
            finish(comm, done);
            backoff_init(comm, &b);
        }
        pthread_mutex_lock(&pg->tlock);
        if (!busy)
            while (!pg->stop && !pg->kick)
                pthread_cond_wait(&pg->cv, &pg->tlock);
        bool stop = pg->stop;
        if (pg->kick || !busy) {
            pg->kick = false;
            backoff_init(comm, &b);
        }
        pthread_mutex_unlock(&pg->tlock);
        if (stop)
            return NULL;
        if (busy) {
            eng_nap_t n = {comm, NULL};
            tutti__backoff_pause_on(&b, nap_on_rings, &n);
        }
    }
}

/* kick wakes the progress thread for a new asynchronous op, starting it the first time. */
static tutti_status_t kick(tutti_comm_t *comm)
{
    tutti__p2p_pg_t *pg = comm->p2p;
    tutti_status_t st = TUTTI_OK;
    pthread_mutex_lock(&pg->tlock);
    pg->kick = true;
    if (!pg->started && !pg->stop) {
        int rc = pthread_create(&pg->thread, NULL, progress_thread, comm);
        if (rc == 0) {
            pg->started = true;
            char name[16];
            snprintf(name, sizeof name, "tutti-p2p");
            pthread_setname_np(pg->thread, name);
        } else {
            char why[512];
            st = tutti__comm_error(comm, TUTTI_ERR_SYSTEM,
                                   "cannot start the point-to-point progress thread: %s",
                                   tutti__thread_fail_why(rc, why, sizeof why));
        }
    }
    pthread_cond_signal(&pg->cv);
    pthread_mutex_unlock(&pg->tlock);
    return st;
}

/* How many rounds of progress a blocking call drives itself for what the engine has left over
 * when no op is open, before it hands the rest to the progress thread. */
#define LEFTOVER_ROUNDS 16

tutti_status_t tutti__p2p_submit(tutti_comm_t *comm, int kind, void *buf, size_t len, int peer,
                                 int tag, tutti_work_t **work)
{
    tutti__p2p_pg_t *pg = comm->p2p;
    pthread_mutex_lock(&pg->lock);
    if (pg->eng == NULL) {
        tutti_status_t st = tutti__p2p_create(&comm->net, &pg->eng);
        if (st < 0) {
            pthread_mutex_unlock(&pg->lock);
            return tutti__comm_error(comm, st, "%s", tutti_last_error());
        }
    }
    uint64_t seq = __atomic_fetch_add(&comm->p2p_seq, 1, __ATOMIC_RELAXED);
    if (work == NULL) {
        /* Blocking: the caller drives the engine itself until its op is done (the progress
         * thread, if there is one, may do some of it), never waiting behind anything queued. */
        char err[TUTTI__ERRLEN];
        tutti__p2p_op_t op = {.kind = kind, .peer = peer, .tag = tag, .buf = buf, .len = len,
                              .seq = seq, .err = err, .async = false,
                              .timeout_s = tutti__call_timeout()};
        tutti__p2p_post(pg->eng, &op);
        tutti__p2p_op_t *done = engine_progress(pg);
        pthread_mutex_unlock(&pg->lock);
        finish(comm, done);
        tutti__backoff_t b;
        backoff_init(comm, &b);
        bool busy = true;
        while (!__atomic_load_n(&op.done, __ATOMIC_ACQUIRE)) {
            if (pthread_mutex_trylock(&pg->lock) == 0) {
                done = engine_progress(pg);
                busy = tutti__p2p_busy(pg->eng);
                pthread_mutex_unlock(&pg->lock);
                finish(comm, done);
                if (__atomic_load_n(&op.done, __ATOMIC_ACQUIRE))
                    break;
            }
            eng_nap_t n = {comm, &op.done};
            tutti__backoff_pause_on(&b, nap_on_rings, &n);
        }
        /* Work of the engine's own left over (answering for a send that failed, draining a
         * message whose receive failed) must not wait for the next call: hand it to the
         * progress thread. A plain send or receive leaves at most a control message of flow
         * control's (a credit, over ofi), which mostly goes within a few rounds of progress:
         * driven here, where no op is open, rather than by a thread started for it. */
        for (int i = 0; busy && i < LEFTOVER_ROUNDS; i++) {
            pthread_mutex_lock(&pg->lock);
            const bool ops = tutti__p2p_has_ops(pg->eng);
            done = ops ? NULL : engine_progress(pg);
            busy = tutti__p2p_busy(pg->eng);
            pthread_mutex_unlock(&pg->lock);
            finish(comm, done);
            if (ops)
                break;
        }
        if (busy)
            kick(comm);
        if (op.status < 0)
            return tutti__comm_error(comm, op.status, "%s", err);
        return TUTTI_OK;
    }
    p2p_work_t *pw = calloc(1, sizeof *pw);
    if (pw == NULL) {
        pthread_mutex_unlock(&pg->lock);
        return tutti__comm_error(comm, TUTTI_ERR_NO_MEMORY,
                                 "tutti_%s: out of memory for the work handle",
                                 kind == TUTTI__P2P_SEND ? "send" : "recv");
    }
    tutti_work_t *w = &pw->w;
    w->comm = comm;
    w->oversubscribed = comm->net.oversubscribed;
    w->refs = 2; /* the caller's and the engine's */
    w->state = TUTTI__WORK_PENDING;
    w->status = TUTTI_OK;
    w->source = -1;
    w->coll.name = kind == TUTTI__P2P_SEND ? "send" : "recv";
    w->p2p = true;
    w->coll.seq = seq;
    pw->op = (tutti__p2p_op_t){.kind = kind, .peer = peer, .tag = tag, .buf = buf, .len = len,
                               .seq = seq, .err = w->error, .async = true,
                               .timeout_s = tutti__call_timeout()};
    tutti__p2p_post(pg->eng, &pw->op);
    /* A small send, or a receive whose message is here already, often ends right away. */
    tutti__p2p_op_t *done = tutti__p2p_progress(pg->eng);
    pthread_mutex_unlock(&pg->lock);
    *work = w;
    finish(comm, done);
    if (kick(comm) < 0) {
        /* Without the thread the op would only move while the caller blocks elsewhere: it
         * fails (withdrawn, so the peer's streams stay in step), the rest of point to point
         * goes on, and the next asynchronous post tries to start the thread again. */
        char msg[TUTTI__ERRLEN];
        snprintf(msg, sizeof msg, "%s", tutti_last_error());
        pthread_mutex_lock(&pg->lock);
        done = tutti__p2p_fail_op(pg->eng, &pw->op, TUTTI_ERR_SYSTEM, msg);
        pthread_mutex_unlock(&pg->lock);
        finish(comm, done);
    }
    return TUTTI_OK;
}

void tutti__p2p_close(tutti_comm_t *comm, tutti_status_t status, const char *why)
{
    tutti__p2p_pg_t *pg = comm->p2p;
    if (pg == NULL)
        return;
    if (pg->eng != NULL) {
        pthread_mutex_lock(&pg->lock);
        tutti__p2p_op_t *done = tutti__p2p_fail_all(pg->eng, status, why);
        pthread_mutex_unlock(&pg->lock);
        finish(comm, done);
    }
    pthread_mutex_lock(&pg->tlock);
    pg->stop = true;
    pthread_cond_signal(&pg->cv);
    bool started = pg->started;
    pthread_mutex_unlock(&pg->tlock);
    if (started)
        pthread_join(pg->thread, NULL);
    tutti__p2p_destroy(pg->eng);
    pthread_mutex_destroy(&pg->lock);
    pthread_mutex_destroy(&pg->tlock);
    pthread_cond_destroy(&pg->cv);
    free(pg);
    comm->p2p = NULL;
}
