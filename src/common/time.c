/* time.c: the monotonic clock, the backoff that every wait loop uses, and sleeping on a word
 * until another thread or process changes it (futex). */
#include <linux/futex.h>
#include <sched.h>
#include <sys/prctl.h>
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
    b->naps = 0;
    b->nap = NULL;
    b->nap_arg = NULL;
}

static double waited_at(tutti__backoff_t *b, double now)
{
    if (b->start == 0.0 || b->moved_seen != tutti__moved) {
        b->start = now;
        b->moved_seen = tutti__moved;
        b->naps = 0;
    }
    return now - b->start;
}

double tutti__backoff_waited(tutti__backoff_t *b) { return waited_at(b, tutti__now()); }

/*
 * A waiter bound to one core that shares it with a busy thread of its own scheduling group (a
 * DataLoader worker forked by a bound rank, another program in the same session, container or
 * cgroup) gives that thread the core at almost every yield, and gets it back only at the next
 * tick, milliseconds later; every hand-off of a large message then costs that long (Open MPI's
 * binding, three busy processes in the launching session: a 64 MiB allreduce 1.3-1.5 s, a
 * 64 MiB send 3.5 s, where Gloo took 0.17 and 0.09 s). A waiter that sleeps instead is woken
 * ahead of the busy thread as soon as its sleep ends.
 *
 * So: a yield that came back SLOW_YIELD_S late, when this thread had run for less than
 * SLOW_YIELD_CPU_S since its previous slow yield (itself under SLOW_YIELD_WINDOW_S ago), makes
 * its waits stop yielding for a hold that starts at CONTENDED_HOLD_MIN_S and doubles, up to
 * CONTENDED_HOLD_MAX_S, each time the busy thread is found again soon after a hold ended.
 * Meanwhile a wait spins CONTENDED_SPIN_S (a hand-off between two running ranks takes
 * microseconds, and spinning keeps the core), then naps, CONTENDED_NAP_US and doubling to 16
 * times that (4 times for a poller) until data moves: a nap of a fixed 50 us turned tight
 * ping-pongs into ping-pongs of naps (64 B allreduce 0.4 -> 16 us) and cost wake-ups. A busy
 * thread of another group (another user's session) also takes the core at a yield now and
 * then, but only once this thread's group has had its share, milliseconds of CPU time: there
 * yields mostly stay (sleeping cost 1.2-4x in versions without that condition). Left alone
 * too: a thread that may run on other cores (the kernel moves it off the busy one), and
 * ranks that outnumber cores, whose yields hand the core to the very rank they wait for.
 * Where the busy threads are the rank's own DataLoader workers, its yields gave them time they
 * used: napping costs a step there a few percent, and TUTTI_BUSY_CORE_NAP=0 turns it off.
 */
#define SLOW_YIELD_S 250e-6
#define SLOW_YIELD_CPU_S 200e-6
#define CONTENDED_SPIN_S 10e-6
#define CONTENDED_NAP_US 25u
#define CONTENDED_HOLD_MIN_S 0.02
#define CONTENDED_HOLD_MAX_S 1.0
static _Thread_local double contended_until, contended_hold;
/* This thread's CPU time and clock at its last slow yield (0 before one: no window holds
 * it). A slow yield counts as the busy thread found again only within SLOW_YIELD_WINDOW_S of
 * the last: a thread that mostly sleeps (the p2p progress thread, an idle worker) runs little
 * CPU between two unrelated slow yields minutes apart. */
static _Thread_local double cpu_at_slow, at_slow;
#define SLOW_YIELD_WINDOW_S 0.05

static double thread_cpu_s(void)
{
    struct timespec ts = {0, 0};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool tutti__busy_core_naps = true;

static void yield_core(bool oversubscribed, double now)
{
    sched_yield();
    double after = tutti__now();
    if (after - now <= SLOW_YIELD_S || oversubscribed ||
        !__atomic_load_n(&tutti__busy_core_naps, __ATOMIC_RELAXED))
        return;
    double cpu = thread_cpu_s();
    if (after - at_slow < SLOW_YIELD_WINDOW_S && cpu - cpu_at_slow < SLOW_YIELD_CPU_S &&
        !tutti__thread_movable(true)) {
        /* Found again soon after the last hold ended: the busy thread is still there. */
        double hold = after < contended_until + contended_hold ? contended_hold * 2
                                                               : CONTENDED_HOLD_MIN_S;
        contended_hold = hold < CONTENDED_HOLD_MAX_S ? hold : CONTENDED_HOLD_MAX_S;
        contended_until = after + contended_hold;
    }
    cpu_at_slow = cpu;
    at_slow = after;
}

void tutti__yield(bool oversubscribed) { yield_core(oversubscribed, tutti__now()); }

bool tutti__yields_lost(void)
{
    return tutti__now() < contended_until &&
           __atomic_load_n(&tutti__busy_core_naps, __ATOMIC_RELAXED);
}

/* contended_sleep sleeps us, or until b's doorbell rings (tutti__backoff_pause_on), with a timer
 * slack of 1 us rather than the thread's own (usually 50 us; restored after): the nap stands in
 * for a yield, and the slack would triple a short one. A slack that cannot be read, or is
 * already that small, is left alone. */
static void contended_sleep(const tutti__backoff_t *b, unsigned us)
{
    int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    bool set = slack > 1000 && prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0) == 0;
    if (b->nap != NULL)
        b->nap(b->nap_arg, us * 1e-6);
    else
        tutti__sleep_us(us);
    if (set)
        prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
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
    double now = tutti__now();
    double waited = waited_at(b, now);
    /* Up to 50 ms, mostly yield: the peer is probably about to come. Past that, only sleep:
     * a yield costs as much as a short sleep's wake-up when nothing else wants the core, and
     * fifteen of them per sleep kept an idle waiter at a tenth of a core. */
    if (waited < 0.05 || b->keep_polling) {
        if (!b->oversubscribed && now < contended_until &&
            __atomic_load_n(&tutti__busy_core_naps, __ATOMIC_RELAXED)) {
            /* Spin a little (a yield is what loses the core), then nap, longer each time:
             * short hand-offs cost no sleep, and a long wait few wake-ups. A poller whose data
             * moves only while it polls naps at most 100 us. */
            unsigned most = b->keep_polling ? 2u : 4u;
            if (waited < CONTENDED_SPIN_S)
                tutti__cpu_relax();
            else
                contended_sleep(b, CONTENDED_NAP_US << (b->naps < most ? b->naps++ : most));
        } else if (waited < 0.002 || (it & 15u) != 0)
            yield_core(b->oversubscribed, now);
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
