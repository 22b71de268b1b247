/* cpu.c: sets of cores, where the calling thread runs, and moving it to a core without taking
 * away the cores it may use. */
#include <sched.h>
#include <stdio.h>

#include "common.h"

_Static_assert(CPU_SETSIZE <= TUTTI__CPUSET_WORDS * 64, "a tutti__cpuset_t holds a cpu_set_t");

int tutti__cpuset_count(const tutti__cpuset_t *s)
{
    int n = 0;
    for (int i = 0; i < TUTTI__CPUSET_WORDS; i++)
        n += __builtin_popcountll(s->w[i]);
    return n;
}

int tutti__cpuset_next(const tutti__cpuset_t *s, int from)
{
    for (int c = from < 0 ? 0 : from; c < TUTTI__CPUSET_MAX; c++)
        if (tutti__cpuset_has(s, c))
            return c;
    return -1;
}

bool tutti__cpuset_self(tutti__cpuset_t *s)
{
    memset(s, 0, sizeof *s);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return false;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            tutti__cpuset_add(s, c);
    return true;
}

int tutti__cpu_now(void)
{
    /* glibc (2.35 on) reads this from the thread's rseq area: a load, no system call. */
    return sched_getcpu();
}

/* -1: not looked up yet on this thread; 0 or 1: tutti__thread_movable's answer. */
static __thread int movable = -1;

bool tutti__thread_movable(bool refresh)
{
    if (movable < 0 || refresh) {
        tutti__cpuset_t s;
        movable = tutti__cpuset_self(&s) && tutti__cpuset_count(&s) > 1;
    }
    return movable == 1;
}

bool tutti__thread_move(int core, bool keep)
{
    movable = -1;
    cpu_set_t old, one;
    if (core < 0 || core >= CPU_SETSIZE || sched_getaffinity(0, sizeof old, &old) != 0 ||
        !CPU_ISSET(core, &old))
        return false;
    CPU_ZERO(&one);
    CPU_SET(core, &one);
    /* The kernel moves the calling thread before sched_setaffinity returns. Giving the old set
     * back leaves it there (nothing moves a running thread without a reason), while threads it
     * creates later still inherit every core it had: a user's compute pool started after this
     * is not squeezed onto one core. */
    if (sched_setaffinity(0, sizeof one, &one) != 0)
        return false;
    if (!keep)
        sched_setaffinity(0, sizeof old, &old);
    return true;
}

/* Why half the L2: per round a rank writes its share into the window and the others read it;
 * while that share is still in the writer's L2 the readers take the lines from that cache, not
 * from memory. On the development machine (a Zen 4 guest, 1 MiB L2 per core) this matters when
 * the two cores do not share an L3 (the guest's cores move between host cores from hour to
 * hour): 2-rank alltoall then ran 1.5-2.2x faster with 256-512 KiB per round than with the
 * 4 MiB regions; with a shared L3 the rounds cost nothing (docs/performance.md). */
size_t tutti__round_bytes(void)
{
    static size_t cached; /* threads racing here store the same value */
    size_t got = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (got != 0)
        return got;
    size_t l2 = 0;
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index2/size", "r");
    if (f != NULL) {
        unsigned long v;
        char unit = 0;
        if (fscanf(f, "%lu%c", &v, &unit) >= 1)
            l2 = (size_t)v * (unit == 'K' ? 1024u : unit == 'M' ? 1024u * 1024u : 1u);
        fclose(f);
    }
    size_t r = l2 > 0 ? l2 / 2 : (size_t)512 << 10;
    r = r < ((size_t)64 << 10) ? (size_t)64 << 10 : r > ((size_t)1 << 20) ? (size_t)1 << 20 : r;
    __atomic_store_n(&cached, r, __ATOMIC_RELAXED);
    return r;
}
