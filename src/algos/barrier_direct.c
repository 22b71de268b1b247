/* barrier_direct.c: one-node barrier, a single barrier on the shm window's epoch flags.
 * Cost: one flag write per rank and a scan of n flags; no messages, so it beats any message
 * pattern when every rank is on one node. */
#include "algos.h"

static tutti_status_t run(tutti__coll_t *c)
{
    tutti__window_t *w;
    TUTTI__CHECK(tutti__direct_window(c, &w));
    return tutti__win_barrier(c);
}

const tutti__algo_t tutti__barrier_direct = {
    .name = "direct",
    .run = run,
    .needs = TUTTI__NEEDS_WINDOW,
    .desc = "shm window epoch flags: one barrier, no messages; one node only",
};
