/* colocate.c: what a wait does when the thread it waits for runs on its own core: step aside at
 * once (spinning there only delays the peer), and move one of the two threads to a core no
 * other busy thread of the node is on, when the process group allows it.
 *
 * Launchers that do not bind (torchrun, a plain env launch, MPICH's mpirun without -bind-to)
 * leave placement to the kernel, which often puts two ranks that have just talked over sockets
 * on one core and leaves them there while both spin: an 8-byte allreduce then takes
 * microseconds instead of a tenth of one. Every rank's thread of each slice writes the core it
 * runs on into its notes in the slice's window (tutti__window_t.notes: words in its own flag
 * line, written only when they change); a waiter compares the core of the rank it waits for
 * with its own. Of two threads that share a core, the one of the higher rank moves (or the
 * other, when it cannot): a thread moves only when it may run on more than one core, so a
 * thread a launcher, the user or CCL_WORKER_AFFINITY pinned stays where it is.
 *
 * Stepping aside means sched_yield while the ranks share the kernel's scheduling group. Across
 * groups (MPICH's Hydra starts each rank in a session of its own, and with autogroup each
 * session is a group), sched_yield only reorders the yielding group, which goes on running
 * until its slice ends: a rank waiting for another on its core lost milliseconds per hand-off.
 * There a waiter sleeps on the doorbell of the rank it waits for (a futex word in that rank's
 * notes, after counting itself in its sleepers), and every rank rings its own doorbell when it
 * has published something and someone sleeps: as it starts to wait, and as a call ends.
 */
#include "algos.h"

/* A thread is moved at most this often: a move costs some tens of microseconds, and on a
 * loaded machine the kernel may undo it. */
#define MOVE_PERIOD_S 0.05
/* notes[r][0]: 0 unknown, else (core + 1), with MOVABLE when the writer may be moved;
 * notes[r][1]: threads asleep on rank r's doorbell; notes[r][2]: the doorbell. */
#define MOVABLE (1u << 31)

static tutti__window_t *window(const tutti__coll_t *c)
{
    tutti__window_t *w = c->net->links.wins ? c->net->links.wins[c->slice] : NULL;
    return w != NULL && w->notes != NULL && w->nranks == c->size ? w : NULL;
}

/* note writes this thread's core (cpu) into its word of window w, if it changed. */
static void note(const tutti__coll_t *c, tutti__window_t *w, int cpu)
{
    uint32_t v = cpu < 0 ? 0
                         : (uint32_t)(cpu + 1) |
                               (c->net->may_move && tutti__thread_movable(false) ? MOVABLE : 0);
    if (__atomic_load_n(w->notes[c->rank], __ATOMIC_RELAXED) != v)
        __atomic_store_n(w->notes[c->rank], v, __ATOMIC_RELAXED);
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
        for (int r = 0; w != NULL && w->notes != NULL && r < w->nranks; r++) {
            if (r == c->rank && k == c->slice)
                continue;
            uint32_t v = __atomic_load_n(w->notes[r], __ATOMIC_RELAXED) & ~MOVABLE;
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
    uint32_t theirs = __atomic_load_n(w->notes[r], __ATOMIC_RELAXED);
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

void tutti__colo_ring(const tutti__coll_t *c)
{
    bool naps = __atomic_load_n(&tutti__busy_core_naps, __ATOMIC_RELAXED);
    if (!c->net->sleep_waits && !naps)
        return;
    tutti__window_t *w = window(c);
    if (w == NULL)
        return;
    volatile uint32_t *mine = w->notes[c->rank];
    /* The look at the sleepers is a read-modify-write, as a sleeper's count of itself is: in
     * the two's order on the count, either this one comes later and sees the sleeper, or the
     * sleeper's comes later, reads from it, and so sees what this rank published before (a
     * fence would do too, but ThreadSanitizer does not model fences). Where only the naps
     * beside a busy thread sleep (time.c; ranks of one scheduling group), a plain load: the
     * locked instruction would wait for this rank's stores to leave, on the fast path of
     * every call, and a wake-up it misses costs no more than the nap, at most 400 us. */
    if (c->net->sleep_waits ? __atomic_fetch_add(&mine[1], 0, __ATOMIC_SEQ_CST) == 0
                            : __atomic_load_n(&mine[1], __ATOMIC_RELAXED) == 0)
        return;
    __atomic_add_fetch(&mine[2], 1, __ATOMIC_SEQ_CST);
    tutti__futex_wake(&mine[2]);
}

void tutti__colo_sleep(const tutti__coll_t *c, int r, bool (*ready)(const void *),
                       const void *arg, double timeout_s)
{
    tutti__window_t *w = window(c);
    if (w == NULL || r < 0 || r >= c->size || r == c->rank) {
        tutti__sleep_us((unsigned)(timeout_s * 1e6));
        return;
    }
    volatile uint32_t *theirs = w->notes[r];
    __atomic_add_fetch(&theirs[1], 1, __ATOMIC_SEQ_CST);
    uint32_t bell = __atomic_load_n(&theirs[2], __ATOMIC_SEQ_CST);
    if (ready == NULL || !ready(arg))
        tutti__futex_wait(&theirs[2], bell, timeout_s);
    __atomic_sub_fetch(&theirs[1], 1, __ATOMIC_SEQ_CST);
}
