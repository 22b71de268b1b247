/* time.c: the monotonic clock, the backoff that every wait loop uses, and sleeping on a word
 * until another thread or process changes it (futex). */
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

double tutti__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tutti__sleep_us(unsigned us)
{
    struct timespec ts = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000L};
    nanosleep(&ts, NULL);
}

_Thread_local uint64_t tutti__moved;

void tutti__backoff_init(tutti__backoff_t *b, bool oversubscribed)
{
    b->iter = 0;
    b->start = 0.0; /* tutti__backoff_waited starts the clock, and reads tutti__moved, then */
    b->oversubscribed = oversubscribed;
    b->keep_polling = false;
}

double tutti__backoff_waited(tutti__backoff_t *b)
{
    double now = tutti__now();
    if (b->start == 0.0 || b->moved_seen != tutti__moved) {
        b->start = now;
        b->moved_seen = tutti__moved;
    }
    return now - b->start;
}

/* Spinning wins while the peer runs on another core (sub-microsecond hand-offs); once the wait
 * is long, or when ranks outnumber cores, the waiter must give its core away or it delays the
 * very peer it waits for. */
void tutti__backoff_pause(tutti__backoff_t *b)
{
    unsigned it = b->iter++;
    if (!b->oversubscribed && it < TUTTI__SPIN_ITERS) {
        tutti__cpu_relax();
        return;
    }
    double waited = tutti__backoff_waited(b);
    if (waited < 0.002) {
        sched_yield();
        return;
    }
    /* Up to 50 ms, mostly yield: the peer is probably about to come. Past that, only sleep:
     * a yield costs as much as a short sleep's wake-up when nothing else wants the core, and
     * fifteen of them per sleep kept an idle waiter at a tenth of a core. */
    if (waited < 0.05 || b->keep_polling) {
        if ((it & 15u) != 0)
            sched_yield();
        else
            tutti__sleep_us(waited < 0.05 ? 20u : 200u);
        return;
    }
    tutti__sleep_us(waited < TUTTI__LONG_WAIT_S ? 200u : 1000u);
}

/* Not FUTEX_PRIVATE: the word may live in a segment other processes map. */
void tutti__futex_wait(volatile uint32_t *word, uint32_t expect, double timeout_s)
{
    struct timespec ts = {.tv_sec = (time_t)timeout_s,
                          .tv_nsec = (long)((timeout_s - (double)(time_t)timeout_s) * 1e9)};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expect, &ts, NULL, 0);
}

void tutti__futex_wake(volatile uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}
