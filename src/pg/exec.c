/* exec.c: how posted operations run: the communicator's queue, its worker threads (pinned,
 * sleeping or spinning when idle), the inline path for small operations on an idle
 * communicator, cutting large ones into slices, and the one place that decides, from how a
 * run ended, that the communicator has failed. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "../algos/patterns/chunk.h"
#include "comm.h"
#include "observe.h"

/* How long a worker that has just finished an operation watches for the next one before it
 * sleeps (CCL_WORKER_WAIT=1). */
#define LINGER_S 200e-6

struct tutti__exec {
    pthread_mutex_t lock;
    pthread_cond_t cv;       /* a new head, the inline path finished, or stop */
    tutti_work_t *head, *tail;
    uint64_t gen;            /* bumped whenever head changes: each worker passes each item once */
    bool busy_inline;        /* the caller is running an operation itself */
    bool stop;
    bool sleep;              /* CCL_WORKER_WAIT=1: idle workers sleep */
    long inline_max; /* 0: nothing inline; -1: only blocking calls */
    int nworkers;
    pthread_t *threads;
    int *cpus;
    tutti_comm_t *comm;
};

typedef struct worker_arg {
    tutti__exec_t *e;
    int index;
} worker_arg_t;

/* slice_of cuts element-wise operations into nsplit nearly equal element ranges. */
static void slice_of(const tutti_work_t *w, int s, tutti__coll_t *c)
{
    *c = w->coll;
    c->slice = s;
    if (w->nsplit == 1)
        return;
    size_t boff = tutti__split_off(c->count, w->nsplit, s) * c->esize;
    c->count = tutti__split_len(c->count, w->nsplit, s);
    c->sendbuf = (const char *)c->sendbuf + boff;
    if (c->recvbuf != NULL)
        c->recvbuf = (char *)c->recvbuf + boff;
}

/* coll_local runs the single-rank case of a collective (a copy, or nothing). */
static void coll_local(tutti__coll_t *c)
{
    const char *src = c->sendbuf;
    char *dst = c->recvbuf;
    size_t bytes = c->count * c->esize;
    switch (c->kind) {
    case TUTTI_COLL_ALLGATHER:
    case TUTTI_COLL_ALLTOALL:
        if (c->counts != NULL) {
            bytes = c->counts[0] * c->esize;
            dst += c->displs[0] * c->esize;
            if (c->sdispls != NULL)
                src += c->sdispls[0] * c->esize;
        }
        break;
    case TUTTI_COLL_BCAST:
    case TUTTI_COLL_BARRIER: return;
    default: break;
    }
    if (bytes > 0 && src != dst && dst != NULL)
        memmove(dst, src, bytes);
}

/* run_coll runs one numbered call c (or one slice of it) in the calling thread, its error
 * text into c->err (TUTTI__ERRLEN bytes); a trivial one is only a local copy, if that. */
static tutti_status_t run_coll(tutti_comm_t *comm, tutti__coll_t *c, bool trivial)
{
    c->err[0] = '\0';
    c->relayed = false;
    c->blame = -1;
    tutti_status_t failed = __atomic_load_n(&comm->failed, __ATOMIC_ACQUIRE);
    if (failed != TUTTI_OK) {
        c->declined = true; /* nothing was run: the failure is not a new one */
        pthread_mutex_lock(&comm->err_lock);
        bool aborted = __atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE);
        snprintf(c->err, TUTTI__ERRLEN, "%s #%llu was not run: the communicator %s earlier: %s",
                 c->name, (unsigned long long)c->seq,
                 failed == TUTTI_ERR_ABORTED ? "was aborted"
                 : aborted                   ? "failed, and was aborted,"
                                             : "failed",
                 comm->failed_msg);
        pthread_mutex_unlock(&comm->err_lock);
        return aborted ? TUTTI_ERR_ABORTED : TUTTI_ERR_COMM_FAILED;
    }
    if (trivial) {
        if (comm->size == 1)
            coll_local(c);
        return TUTTI_OK;
    }
    c->deadline = 0.0; /* from the start (its first wait), not from the post */
    c->next_ask = 0.0;
    c->dead_seen = 0.0;
    tutti__colo_note(c);
    tutti_status_t st = c->algo->run(c);
    tutti__colo_ring(c); /* its last writes may be what a sleeping peer waits for */
    /* Over ofi a rank that was stopped may find every message there when it resumes, after its
     * peers reported the call failed (shm's windows carry their failure words instead). */
    if (st == TUTTI_OK && comm->net.links.ofi != NULL)
        st = tutti__resumed_check(c);
    return st;
}

/*
 * settle records the failure st of a run of c, whose text is in c->err: it fails the
 * communicator (first failure wins), unless c was declined before anything was posted or
 * written, or never ran, which leaves every peer as it was: then it is only recorded as comm's
 * and the thread's last error. Returns st.
 */
static tutti_status_t settle(tutti_comm_t *comm, tutti__coll_t *c, tutti_status_t st)
{
    if (c->declined)
        return tutti__comm_error(comm, st, "%s", c->err);
    /* Peers on this node learn it from the windows: a wait for this rank fails, and one that
     * was stopped cannot complete the call with data this rank had already written. So too for
     * a call an abort (or a shrink) ended midway, although the end itself failed the
     * communicator first: a peer that came to it later found all of this rank's data there and
     * returned OK, where this rank returned ABORTED. Only where the abort is the communicator's
     * first failure: an earlier one's word, the truer cause, stays. */
    tutti_status_t failed = __atomic_load_n(&comm->failed, __ATOMIC_ACQUIRE);
    if (failed == TUTTI_OK || (st == TUTTI_ERR_ABORTED && failed == TUTTI_ERR_ABORTED)) {
        tutti__win_describe(c); /* a late peer with another call can name both */
        tutti__win_fail(&comm->net, st, c->seq, c->relayed);
        /* and every peer, by message */
        tutti__live_notify_failed(comm->net.live, st, c->seq, c->relayed, c->blame);
    }
    return tutti__comm_fail(comm, st, c->err);
}

/* run_slice runs slice s of w in the calling thread; the first failing slice's text is w's. */
static tutti_status_t run_slice(tutti__exec_t *e, tutti_work_t *w, int s)
{
    tutti__coll_t c;
    char err[TUTTI__ERRLEN]; /* no initializer: that would clear all 1 KiB on every call */
    slice_of(w, s, &c);
    c.err = err;
    double t0 = w->comm->obs != NULL ? tutti__now() : 0;
    tutti_status_t st = run_coll(w->comm, &c, w->trivial);
    if (w->comm->obs != NULL)
        tutti__obs_coll(w->comm, &c, t0, st);
    if (st < 0) {
        settle(w->comm, &c, st);
        pthread_mutex_lock(&e->lock);
        if (w->status == TUTTI_OK) {
            w->status = st;
            snprintf(w->error, sizeof w->error, "%s", err);
        }
        pthread_mutex_unlock(&e->lock);
    }
    return st;
}

/* pop_locked removes the finished head and lets every worker see the next one. */
static tutti_work_t *pop_locked(tutti__exec_t *e)
{
    tutti_work_t *w = e->head;
    __atomic_store_n(&e->head, w->next, __ATOMIC_RELEASE);
    if (e->head == NULL)
        e->tail = NULL;
    __atomic_add_fetch(&e->gen, 1, __ATOMIC_RELEASE); /* spinning workers read it unlocked */
    pthread_cond_broadcast(&e->cv);
    return w;
}

static void finish(tutti_work_t *w)
{
    if (w->post_fn != NULL && w->status == TUTTI_OK)
        w->post_fn(w);
    tutti__work_complete(w, w->status);
    tutti__work_release(w); /* the executor's reference */
}

static void *worker_main(void *p)
{
    worker_arg_t a = *(worker_arg_t *)p;
    free(p);
    tutti__trace_tid = 1 + a.index; /* this thread's track in a trace */
    tutti__exec_t *e = a.e;
    uint64_t seen = 0;
    double idle_since = 0; /* when the last operation ended; 0: long ago */
    tutti__backoff_t b;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        if (e->head != NULL && e->gen != seen &&
            !__atomic_load_n(&e->busy_inline, __ATOMIC_SEQ_CST)) {
            tutti_work_t *w = e->head;
            seen = e->gen;
            pthread_mutex_unlock(&e->lock);
            if (a.index < w->nsplit)
                run_slice(e, w, a.index);
            pthread_mutex_lock(&e->lock);
            if (--w->left == 0) {
                pop_locked(e);
                pthread_mutex_unlock(&e->lock);
                finish(w);
                pthread_mutex_lock(&e->lock);
            }
            idle_since = tutti__now();
            continue;
        }
        if (e->head != NULL && e->gen != seen) {
            /* Queued work, but the caller runs an operation itself: release_inline wakes the
             * workers when it ends (spinning here would take the core it may need). */
            pthread_cond_wait(&e->cv, &e->lock);
            continue;
        }
        if (e->stop && e->head == NULL)
            break;
        if (e->sleep && tutti__now() - idle_since > LINGER_S) {
            pthread_cond_wait(&e->cv, &e->lock);
            continue;
        }
        /* CCL_WORKER_WAIT=0, or just after an operation (the next one often follows within
         * microseconds, and a sleeping worker takes several to wake): watch the queue without
         * holding the lock, yielding the core when threads outnumber cores. */
        uint64_t g = e->gen;
        pthread_mutex_unlock(&e->lock);
        tutti__backoff_init(&b, e->comm->net.oversubscribed);
        tutti__backoff_keep_polling(&b); /* told to spin: it must see new work at once */
        while (__atomic_load_n(&e->gen, __ATOMIC_ACQUIRE) == g &&
               !__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE) &&
               __atomic_load_n(&e->head, __ATOMIC_ACQUIRE) == NULL &&
               (!e->sleep || tutti__now() - idle_since <= LINGER_S))
            tutti__backoff_pause(&b);
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* number gives c its sequence number and its algorithm. Every caller holds the exec lock (posts
 * and the blocking fast path alike, so that numbers follow the queue's order); the counters
 * are atomic all the same, for readers outside it (tutti_comm_seq). */
static void number(tutti_comm_t *comm, tutti__coll_t *c, size_t bytes, int nsplit)
{
    c->seq = __atomic_fetch_add(&comm->seq, 1, __ATOMIC_RELAXED);
    c->timeout_s = tutti__call_timeout(); /* the poster's thread: number runs there */
    c->trace = comm->obs != NULL ? comm->obs->trace : NULL;
    c->posted = comm->obs != NULL ? tutti__now() : 0;
    c->call_bytes = bytes;
    if (c->algo == NULL)
        c->algo = tutti__select(&comm->algo[c->kind], comm->net.caps, comm->size, c->kind, bytes,
                                c->counts != NULL);
    tutti__sig_make(c, nsplit);
    /* Every TUTTI__FLOW_EVERY-th broadcast, and reduce, that runs with peers (not an empty
     * one, which meets no one) holds its senders back (algos.h): counted from the calls
     * alone, so every rank flags the same ones. */
    c->flow = false;
    if ((c->kind == TUTTI_COLL_BCAST || c->kind == TUTTI_COLL_REDUCE) && bytes > 0 &&
        comm->size > 1)
        c->flow = comm->flow_calls[c->kind == TUTTI_COLL_REDUCE]++ % TUTTI__FLOW_EVERY == 0;
    /* for a peer's waiter that asks which call this rank posted with this number (prims.c) */
    tutti__live_note_call(comm->calls, c->seq, c->sig_count, tutti__sig_desc(c).info);
}

/* The inline path is claimed with a CAS, so that a blocking call can take it without the exec
 * lock; workers leave the queue alone while it is held. */
static bool claim_inline(tutti__exec_t *e)
{
    bool expected = false;
    return __atomic_compare_exchange_n(&e->busy_inline, &expected, true, false, __ATOMIC_SEQ_CST,
                                       __ATOMIC_RELAXED);
}

/* release_inline hands the queue back. A worker that saw the claim with work queued waits on
 * the condition variable: clear, then look at the queue (both sequentially consistent, as the
 * enqueue's store of head and the worker's load of the claim are), so that either this sees
 * the queued work and wakes the workers, or the worker sees the claim gone. */
static void release_inline(tutti__exec_t *e)
{
    __atomic_store_n(&e->busy_inline, false, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&e->head, __ATOMIC_SEQ_CST) != NULL) {
        pthread_mutex_lock(&e->lock);
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->lock);
    }
}

/* split_count: how many slices w runs as. Element-wise collectives of at least SPLIT_MIN
 * bytes per slice are cut across the workers; everything else runs whole on slice 0. */
#define SPLIT_MIN ((size_t)256 << 10)
static int split_count(const tutti_comm_t *comm, const tutti__coll_t *c, size_t bytes)
{
    int n = comm->nslices;
    if (n <= 1 || comm->net.nchan - 1 < n)
        return 1;
    if (c->kind != TUTTI_COLL_ALLREDUCE && c->kind != TUTTI_COLL_BCAST &&
        c->kind != TUTTI_COLL_REDUCE)
        return 1;
    size_t k = bytes / SPLIT_MIN;
    if (k < 2)
        return 1;
    return k < (size_t)n ? (int)k : n;
}

void tutti__exec_submit(tutti_comm_t *comm, tutti_work_t *w, size_t bytes, bool trivial,
                        bool blocking)
{
    tutti__exec_t *e = comm->exec;
    tutti__coll_t *c = &w->coll;
    w->comm = comm;
    w->oversubscribed = comm->net.oversubscribed;
    w->state = TUTTI__WORK_PENDING;
    w->status = TUTTI_OK;
    w->error[0] = '\0';
    __atomic_add_fetch(&w->refs, 1, __ATOMIC_RELAXED); /* the executor's */
    w->trivial = trivial;
    w->nsplit = trivial ? 1 : split_count(comm, c, bytes);
    pthread_mutex_lock(&e->lock);
    number(comm, c, bytes, w->nsplit);
    /* The caller may run the operation itself when nothing is queued or running: the order is
     * kept, and two thread hand-offs are saved. A blocking caller would only sleep meanwhile,
     * so it always may (unless TUTTI_INLINE_MAX=0 sends everything to the workers); an
     * asynchronous post does only for small operations, which end before it could overlap. */
    bool may_inline = trivial || (blocking && e->inline_max != 0) ||
                      (e->inline_max > 0 && bytes <= (size_t)e->inline_max);
    if (e->head == NULL && may_inline && w->nsplit == 1 && claim_inline(e)) {
        pthread_mutex_unlock(&e->lock);
        run_slice(e, w, 0);
        release_inline(e);
        finish(w);
        return;
    }
    w->left = e->nworkers;
    w->next = NULL;
    if (e->tail != NULL)
        e->tail->next = w;
    else
        __atomic_store_n(&e->head, w, __ATOMIC_SEQ_CST); /* see release_inline */
    e->tail = w;
    if (e->head == w)
        __atomic_add_fetch(&e->gen, 1, __ATOMIC_RELEASE); /* spinning workers read it unlocked */
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->lock);
}

bool tutti__exec_run_blocking(tutti_comm_t *comm, tutti__coll_t *c, size_t bytes, bool trivial,
                              tutti_status_t *status)
{
    tutti__exec_t *e = comm->exec;
    if (e->inline_max == 0 || (!trivial && split_count(comm, c, bytes) > 1))
        return false;
    if (__atomic_load_n(&e->head, __ATOMIC_ACQUIRE) != NULL || !claim_inline(e))
        return false;
    /* Numbered under the lock, as tutti__exec_submit numbers and queues: a post from another
     * thread numbered before this one is then seen queued here, and goes first. (Numbered
     * outside it, this call could take the next number and run ahead of one numbered but not
     * yet queued, and the ranks would run the two in different orders: a false mismatch.) */
    pthread_mutex_lock(&e->lock);
    if (__atomic_load_n(&e->head, __ATOMIC_SEQ_CST) != NULL) { /* queued meanwhile: it goes first */
        pthread_mutex_unlock(&e->lock);
        release_inline(e);
        return false;
    }
    number(comm, c, bytes, 1);
    pthread_mutex_unlock(&e->lock);
    char err[TUTTI__ERRLEN];
    c->slice = 0;
    c->err = err;
    tutti_status_t st = run_coll(comm, c, trivial);
    if (comm->obs != NULL)
        tutti__obs_coll(comm, c, c->posted, st);
    release_inline(e);
    *status = st < 0 ? settle(comm, c, st) : st;
    return true;
}

tutti_status_t tutti__exec_create(tutti_comm_t *comm, const int *cpus, bool sleep,
                                  long inline_max)
{
    tutti__exec_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
    e->comm = comm;
    e->sleep = sleep;
    e->inline_max = inline_max;
    e->nworkers = comm->nslices;
    e->threads = calloc((size_t)e->nworkers, sizeof *e->threads);
    e->cpus = calloc((size_t)e->nworkers, sizeof *e->cpus);
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cv, NULL);
    comm->exec = e;
    if (e->threads == NULL || e->cpus == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
    memcpy(e->cpus, cpus, (size_t)e->nworkers * sizeof *cpus);
    for (int i = 0; i < e->nworkers; i++) {
        worker_arg_t *a = malloc(sizeof *a);
        int rc = a == NULL ? ENOMEM : 0;
        if (a != NULL) {
            /* Pinned and named before it runs, so that nothing ever sees it elsewhere. */
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            if (cpus[i] >= 0) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(cpus[i], &set);
                pthread_attr_setaffinity_np(&attr, sizeof set, &set);
            }
            *a = (worker_arg_t){e, i};
            rc = pthread_create(&e->threads[i], &attr, worker_main, a);
            pthread_attr_destroy(&attr);
            if (rc != 0) {
                free(a);
            } else {
                char name[16];
                snprintf(name, sizeof name, "tutti-w%d", i);
                pthread_setname_np(e->threads[i], name);
            }
        }
        if (rc != 0) {
            e->nworkers = i; /* only these are joined */
            char why[512];
            return tutti__set_error(TUTTI_ERR_SYSTEM, "cannot start worker thread %d: %s%s", i,
                                    tutti__thread_fail_why(rc, why, sizeof why),
                                    rc == EAGAIN ? "" : "; lower CCL_WORKER_COUNT");
        }
    }
    return TUTTI_OK;
}

void tutti__exec_stop(tutti_comm_t *comm, tutti_status_t status, const char *msg)
{
    tutti__exec_t *e = comm->exec;
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->lock);
    /* Queued operations after the running one never start: fail them now. */
    tutti_work_t *rest = e->head ? e->head->next : NULL;
    if (e->head != NULL) {
        e->head->next = NULL;
        e->tail = e->head;
    }
    __atomic_store_n(&e->stop, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->lock);
    while (rest != NULL) {
        tutti_work_t *w = rest;
        rest = w->next;
        w->status = status;
        snprintf(w->error, sizeof w->error, "%s #%llu was not run: %s", w->coll.name,
                 (unsigned long long)w->coll.seq, msg);
        finish(w);
    }
    for (int i = 0; i < e->nworkers; i++)
        pthread_join(e->threads[i], NULL);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->cv);
    free(e->threads);
    free(e->cpus);
    free(e);
    comm->exec = NULL;
}

void tutti__exec_set_override(tutti_comm_t *comm, tutti_coll_t coll,
                              const tutti__algo_override_t *ov)
{
    tutti__exec_t *e = comm->exec;
    if (e != NULL)
        pthread_mutex_lock(&e->lock);
    comm->algo[coll] = *ov;
    if (e != NULL)
        pthread_mutex_unlock(&e->lock);
}

tutti__algo_override_t tutti__exec_get_override(const tutti_comm_t *comm, tutti_coll_t coll)
{
    tutti__exec_t *e = comm->exec;
    if (e != NULL)
        pthread_mutex_lock(&e->lock);
    tutti__algo_override_t ov = comm->algo[coll];
    if (e != NULL)
        pthread_mutex_unlock(&e->lock);
    return ov;
}

int tutti__exec_worker_cpu(const tutti_comm_t *comm, int i)
{
    const tutti__exec_t *e = comm->exec;
    return e != NULL && i >= 0 && i < e->nworkers ? e->cpus[i] : -1;
}
