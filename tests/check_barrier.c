/* check_barrier.c: the barrier algorithms on shm and ofi at 1 to 8 ranks, four rounds each,
 * blocking or with a work handle: a barrier is right if no rank leaves round k before every rank
 * has counted itself in it (a counter on a page every rank shares). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_matrix.h"

/* barrier_round: count this rank in, pass a barrier, check that everyone was counted, and pass a
 * second barrier so that nobody counts itself into the next round early. */
static void barrier_round(ctx_t *c, const cm_case_t *k)
{
    (void)k;
    th_shared_t *sh = th_shared();
    __atomic_fetch_add(&sh->counter, 1, __ATOMIC_SEQ_CST);
    c->barrier_rounds++;
    cr_describe(c, "barrier", TUTTI_INT8, -1, 0, -1, NULL);
    if (cr_fin(c, tutti_barrier(c->comm, cr_wk(c)), true))
        return;
    long seen = __atomic_load_n(&sh->counter, __ATOMIC_SEQ_CST);
    if (seen != c->barrier_rounds * c->size)
        cr_report(c, "round %ld: left the barrier having seen %ld arrivals, expected %ld",
                  c->barrier_rounds, seen, c->barrier_rounds * c->size);
    cr_fin(c, tutti_barrier(c->comm, cr_wk(c)), true);
}

static const cm_family_t family = {
    .name = "barrier",
    .body = {[CM_BARRIER] = barrier_round},
};

CM_FAMILY_MAIN(family)
