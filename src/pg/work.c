/* work.c: work handles: completion (status, waking waiters, the callback), wait with a
 * timeout, test, status, error text, completion callback, free. Completion is a futex word, so
 * a waiter sleeps instead of spinning against the worker that runs its operation. */
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"

static void futex_wake_all(int *addr)
{
    syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

void tutti__work_release(tutti_work_t *w)
{
    if (__atomic_sub_fetch(&w->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        free(w->owned);
        free(w);
    }
}

/* The communicator whose completion callback this thread runs, if any, and the engine that
 * completed the operation: the thread is then the one that completes that engine's operations
 * (a worker for collectives, the p2p engine's driver for sends and receives), so a wait there
 * for another of them would wait for itself. */
static _Thread_local const tutti_comm_t *in_callback;
static _Thread_local bool in_callback_p2p;

bool tutti__work_in_callback(const tutti_comm_t *comm, bool p2p)
{
    return in_callback != NULL && in_callback == comm && in_callback_p2p == p2p;
}

/* run_callback runs w's callback marked as one (where it runs does not change what it may do:
 * the worker's thread or the setter's, the rules are the same on every rank). */
static void run_callback(tutti_work_t *w)
{
    const tutti_comm_t *outer = in_callback;
    bool outer_p2p = in_callback_p2p;
    in_callback = w->comm;
    in_callback_p2p = w->p2p;
    w->cb(w, w->cb_arg);
    in_callback = outer;
    in_callback_p2p = outer_p2p;
}

void tutti__work_complete(tutti_work_t *w, tutti_status_t st)
{
    w->status = st;
    /* The callback is claimed before the handle is published done: a thread that saw it done
     * (its wait returned) and then set a callback must find it claimed, and run it at once
     * itself as the header says, not have it run later on this thread. */
    int cb = __atomic_exchange_n(&w->cb_state, 2, __ATOMIC_ACQ_REL);
    if (__atomic_exchange_n(&w->state, TUTTI__WORK_DONE, __ATOMIC_ACQ_REL) == TUTTI__WORK_SLEEPERS)
        futex_wake_all(&w->state);
    if (cb == 1)
        run_callback(w);
}

static bool done(const tutti_work_t *w)
{
    return __atomic_load_n(&w->state, __ATOMIC_ACQUIRE) == TUTTI__WORK_DONE;
}

TUTTI_API tutti_status_t tutti_work_wait(tutti_work_t *w, double timeout_s)
{
    if (w == NULL)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG, "tutti_work_wait: work is NULL");
    if (timeout_s != timeout_s)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "tutti_work_wait: timeout_s is NaN: pass seconds, or a negative "
                                "number to wait up to the operation's own deadline");
    if (tutti__work_in_callback(w->comm, w->p2p) && !done(w))
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "tutti_work_wait: a completion callback waits for another "
                                "operation of its own communicator, which cannot complete while "
                                "the callback runs on the thread that completes it; post it in "
                                "the callback, and wait for it outside");
    double deadline = timeout_s < 0 ? -1.0 : tutti__now() + timeout_s;
    /* Spin briefly, then yield for a while: operations often end within microseconds, a sleep
     * costs several to wake from, and yielding hands the core to the worker doing the work.
     * Not where yields hand a bound core to a busy thread of the caller's own group until the
     * next tick (time.c): the futex below wakes the caller as soon as the work is done. */
    for (int i = 0; i < 200 && !done(w); i++)
        tutti__cpu_relax();
    double t0 = tutti__now();
    while (!done(w) && !tutti__yields_lost() && tutti__now() - t0 < 200e-6 &&
           (deadline < 0 || tutti__now() < deadline))
        tutti__yield(w->oversubscribed);
    while (!done(w)) {
        double left = deadline < 0 ? 1.0 : deadline - tutti__now();
        if (left <= 0)
            return TUTTI_IN_PROGRESS;
        if (left > 1.0)
            left = 1.0; /* re-check now and then; the operation's own deadline ends it */
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        int expected = TUTTI__WORK_PENDING;
        /* Announce the sleeper first; if the operation completed meanwhile, the CAS fails. */
        if (__atomic_compare_exchange_n(&w->state, &expected, TUTTI__WORK_SLEEPERS, false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
            expected == TUTTI__WORK_SLEEPERS)
            syscall(SYS_futex, &w->state, FUTEX_WAIT_PRIVATE, TUTTI__WORK_SLEEPERS, &ts, NULL, 0);
    }
    if (w->status < 0)
        snprintf(tutti__tls_error(), TUTTI__ERRLEN, "%s", w->error);
    return w->status;
}

TUTTI_API tutti_status_t tutti_work_test(tutti_work_t *w, int *is_done)
{
    if (w == NULL || is_done == NULL)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG, "tutti_work_test: work or done is NULL");
    *is_done = done(w);
    return *is_done ? w->status : TUTTI_IN_PROGRESS;
}

TUTTI_API tutti_status_t tutti_work_status(const tutti_work_t *w)
{
    if (w == NULL)
        return TUTTI_ERR_INVALID_ARG;
    return done(w) ? w->status : TUTTI_IN_PROGRESS;
}

TUTTI_API const char *tutti_work_error(const tutti_work_t *w)
{
    return w != NULL && done(w) ? w->error : "";
}

TUTTI_API int tutti_work_source(const tutti_work_t *w)
{
    return w != NULL && done(w) && w->status == TUTTI_OK ? w->source : -1;
}

TUTTI_API tutti_status_t tutti_work_on_complete(tutti_work_t *w,
                                                void (*fn)(tutti_work_t *work, void *arg),
                                                void *arg)
{
    if (w == NULL || fn == NULL)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG, "tutti_work_on_complete: work or fn is NULL");
    /* cb_state alone cannot tell "completed with its callback" from "completed without one". */
    if (__atomic_exchange_n(&w->cb_taken, 1, __ATOMIC_ACQ_REL) != 0)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "tutti_work_on_complete: the handle has a callback already");
    w->cb = fn;
    w->cb_arg = arg;
    int expected = 0;
    /* Whoever moves cb_state last runs the callback: completion (2) or this call (1). */
    if (!__atomic_compare_exchange_n(&w->cb_state, &expected, 1, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        /* completed already; the completing thread may be between claiming the callback and
         * publishing the handle done (two stores apart): the callback sees it done */
        while (!done(w))
            tutti__yield(w->oversubscribed);
        run_callback(w);
    }
    return TUTTI_OK;
}

TUTTI_API void tutti_work_free(tutti_work_t *w)
{
    if (w == NULL)
        return;
    tutti_work_wait(w, -1.0);
    tutti__work_release(w);
}
