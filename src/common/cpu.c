/* cpu.c: sets of cores, where the calling thread runs, and moving it to a core without taking
 * away the cores it may use. */
#include <sched.h>

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
