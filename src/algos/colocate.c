/* colocate.c: what a wait does when the thread it waits for runs on its own core: step aside at
 * once (spinning there only delays the peer), and move one of the two threads to a core no
 * other busy thread of the node is on, when the process group allows it.
 *
 * Launchers that do not bind (torchrun, a plain env launch, MPICH's mpirun without -bind-to)
 * leave placement to the kernel, which often puts two ranks that have just talked over sockets
 * on one core and leaves them there while both spin: an 8-byte allreduce then takes
 * microseconds instead of a tenth of one. Every rank's thread of each slice writes the core it
 * runs on into its word of the slice's window (tutti__window_t.where: a word in its own flag
 * line, written only when it changes); a waiter compares the word of the rank it waits for
 * with its own core. Of two threads that share a core, the one of the higher rank moves (or
 * the other, when it cannot): a thread moves only when it may run on more than one core, so a
 * thread a launcher, the user or CCL_WORKER_AFFINITY pinned stays where it is.
 */
#include "algos.h"

/* A thread is moved at most this often: a move costs some tens of microseconds, and on a
 * loaded machine the kernel may undo it. */
#define MOVE_PERIOD_S 0.05
/* The word: 0 unknown, else (core + 1), with MOVABLE when the writer may be moved. */
#define MOVABLE (1u << 31)

static tutti__window_t *window(const tutti__coll_t *c)
{
    tutti__window_t *w = c->net->links.wins ? c->net->links.wins[c->slice] : NULL;
    return w != NULL && w->where != NULL && w->nranks == c->size ? w : NULL;
}

/* note writes this thread's core (cpu) into its word of window w, if it changed. */
static void note(const tutti__coll_t *c, tutti__window_t *w, int cpu)
{
    uint32_t v = cpu < 0 ? 0
                         : (uint32_t)(cpu + 1) |
                               (c->net->may_move && tutti__thread_movable(false) ? MOVABLE : 0);
    if (__atomic_load_n(w->where[c->rank], __ATOMIC_RELAXED) != v)
        __atomic_store_n(w->where[c->rank], v, __ATOMIC_RELAXED);
}

void tutti__colo_note(const tutti__coll_t *c)
{
    tutti__window_t *w = window(c);
    if (w != NULL)
        note(c, w, tutti__cpu_now());
}

/* free_core is a core this thread may run on that no word of another rank's thread (in any
 * slice) or of this rank's other slices names; -1 when there is none. */
static int free_core(const tutti__coll_t *c)
{
    tutti__cpuset_t s;
    if (!tutti__cpuset_self(&s))
        return -1;
    const tutti__net_t *net = c->net;
    for (int k = 0; k < net->nchan - 1; k++) {
        tutti__window_t *w = net->links.wins[k];
        for (int r = 0; w != NULL && w->where != NULL && r < w->nranks; r++) {
            if (r == c->rank && k == c->slice)
                continue;
            uint32_t v = __atomic_load_n(w->where[r], __ATOMIC_RELAXED) & ~MOVABLE;
            if (v > 0 && tutti__cpuset_has(&s, (int)v - 1))
                s.w[(v - 1) / 64] &= ~((uint64_t)1 << ((v - 1) % 64));
        }
    }
    return tutti__cpuset_next(&s, 0);
}

bool tutti__colo_shared(tutti__coll_t *c, int r)
{
    tutti__window_t *w = window(c);
    if (w == NULL || r < 0 || r >= c->size || r == c->rank)
        return false;
    int cpu = tutti__cpu_now();
    uint32_t theirs = __atomic_load_n(w->where[r], __ATOMIC_RELAXED);
    note(c, w, cpu); /* so that the peer, once it runs, sees this thread here too */
    if (cpu < 0 || (theirs & ~MOVABLE) != (uint32_t)cpu + 1)
        return false;
    /* One of the two moves: the higher rank, unless only this one can. */
    tutti__slice_t *sl = &c->net->slices[c->slice];
    bool my_turn = c->rank > r || !(theirs & MOVABLE);
    double now;
    if (c->net->may_move && tutti__thread_movable(false) && my_turn &&
        (now = tutti__now()) >= sl->next_move) {
        sl->next_move = now + MOVE_PERIOD_S;
        int to = tutti__thread_movable(true) ? free_core(c) : -1; /* pinned since? */
        if (to >= 0 && to != cpu && tutti__thread_move(to, false))
            TUTTI__LOG(TUTTI__LOG_DEBUG,
                       "rank %d: its thread shared core %d with rank %d's; moved it to core %d",
                       c->rank, cpu, r, to);
        note(c, w, tutti__cpu_now());
    }
    return true;
}
