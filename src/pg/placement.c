/* placement.c: where one node's busy threads go (each local rank's calling thread, and its
 * workers under CCL_WORKER_AFFINITY=auto) and which ranks must yield in their waits, worked out
 * alike on every local rank from the sets of cores the ranks reported at bootstrap. Pure
 * arithmetic: no system call, so that tests can give it any layout. */
#include <stdlib.h>

#include "comm.h"

typedef struct order {
    int rank, ncores;
} order_t;

static int by_cores(const void *a, const void *b)
{
    const order_t *x = a, *y = b;
    if (x->ncores != y->ncores)
        return x->ncores < y->ncores ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* least picks the core of s with the smallest load[] (ties: the lowest core, or the highest
 * when high); skip[] > 0 excludes a core when skip is not NULL. -1 when none is left. */
static int least(const tutti__cpuset_t *s, const int *load, const int *skip, bool high)
{
    int best = -1;
    for (int c = tutti__cpuset_next(s, 0); c >= 0; c = tutti__cpuset_next(s, c + 1)) {
        if (skip != NULL && skip[c] > 0)
            continue;
        if (best < 0 || load[c] < load[best] || (high && load[c] == load[best]))
            best = c;
    }
    return best;
}

bool tutti__place(int nlocal, const tutti__cpuset_t *sets, int nworkers, bool workers_spin,
                  bool auto_workers, int *caller, int *workers, bool *over)
{
    /* Loads per core; 8 KiB, on the heap: creation may run on a small thread stack. */
    int *mains = calloc(2 * TUTTI__CPUSET_MAX, sizeof *mains);
    order_t *ord = malloc((size_t)nlocal * sizeof *ord);
    if (mains == NULL || ord == NULL) {
        free(mains);
        free(ord);
        return false;
    }
    int *wload = mains + TUTTI__CPUSET_MAX;
    tutti__cpuset_t all = {{0}};
    for (int r = 0; r < nlocal; r++) {
        ord[r] = (order_t){r, tutti__cpuset_count(&sets[r])};
        for (int i = 0; i < TUTTI__CPUSET_WORDS; i++)
            all.w[i] |= sets[r].w[i];
    }
    /* Calling threads first, the ranks with the fewest cores first: a rank bound to one core
     * takes that core before an unbound rank could pick it. Each takes its least used core, so
     * unbound ranks spread over their cores (and share evenly when they must). */
    qsort(ord, (size_t)nlocal, sizeof *ord, by_cores);
    for (int k = 0; k < nlocal; k++) {
        int r = ord[k].rank;
        caller[r] = least(&sets[r], mains, NULL, false);
        if (caller[r] >= 0)
            mains[caller[r]]++;
    }
    /* A rank placed early may have taken the only core of a later one while it had a free
     * core of its own: move sharing callers to free cores of their sets while any is left
     * (each move fills one more core, so this ends). */
    for (bool moved = true; moved;) {
        moved = false;
        for (int r = 0; r < nlocal; r++) {
            if (caller[r] < 0 || mains[caller[r]] < 2)
                continue;
            int c = least(&sets[r], mains, NULL, false);
            if (c >= 0 && mains[c] == 0) {
                mains[caller[r]]--;
                mains[c]++;
                caller[r] = c;
                moved = true;
            }
        }
    }
    /* Workers: cores no calling thread was given, the least used, from the highest down (the
     * low cores stay with the callers, as oneCCL does); where none is left, the rank's own
     * caller's core: a worker must never take the core of another rank's calling thread, which
     * spins in every blocking collective. */
    if (auto_workers)
        for (int r = 0; r < nlocal; r++)
            for (int i = 0; i < nworkers; i++) {
                int c = least(&sets[r], wload, mains, true);
                workers[r * nworkers + i] = c >= 0 ? c : caller[r];
                if (c >= 0)
                    wload[c]++;
            }
    /* Busy threads: every calling thread (it spins in blocking collectives), and the workers
     * when they spin while idle (CCL_WORKER_WAIT=0); a sleeping worker runs only while its
     * caller waits for it or computes, and is not counted. A rank must yield at once when one
     * of its busy threads shares its core with another, or when the node's ranks have more
     * busy threads than cores between them; a rank whose cores are unknown yields unless it
     * is alone. */
    int *busy = wload; /* reused: the worker loads are not needed any more */
    for (int c = 0; c < TUTTI__CPUSET_MAX; c++)
        busy[c] = mains[c];
    int nbusy = nlocal, spare = tutti__cpuset_count(&all);
    if (workers_spin)
        for (int j = 0; j < nlocal * nworkers; j++) {
            nbusy++;
            if (workers[j] >= 0 && workers[j] < TUTTI__CPUSET_MAX)
                busy[workers[j]]++;
        }
    for (int r = 0; r < nlocal; r++) {
        bool o = nbusy > spare || caller[r] < 0 || busy[caller[r]] > 1;
        for (int i = 0; workers_spin && i < nworkers; i++) {
            int c = workers[r * nworkers + i];
            o |= c < 0 || (c < TUTTI__CPUSET_MAX && busy[c] > 1);
        }
        over[r] = o && nbusy > 1;
    }
    free(mains);
    free(ord);
    return true;
}
