/* check_decline.c: a call that its algorithm declines before touching anything (here the direct
 * alltoall, forced onto a shm window too small for one element per rank) fails alone, blocking
 * or with a handle, and the communicator goes on working: only failures of a call that ran
 * mark it failed. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "harness.h"
#include "tutti.h"

static int decline_rank(int rank, int size, void *arg)
{
    (void)arg;
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_OK)
        return th_fail("init: %s: %s", tutti_strerror(st), tutti_last_error());
    int rc = 0;
    int32_t send[8], recv[8];
    for (int i = 0; i < size; i++)
        send[i] = rank * 100 + i;

    /* blocking: refused with advice, on every rank alike */
    st = tutti_alltoall(send, recv, 1, TUTTI_INT32, comm, NULL);
    if (st != TUTTI_ERR_NOT_SUPPORTED)
        rc = th_fail("direct alltoall on a 64-byte window: got %s, want TUTTI_ERR_NOT_SUPPORTED",
                     tutti_strerror(st));
    else if (strstr(tutti_comm_last_error(comm), "TUTTI_SHM_WINDOW") == NULL)
        rc = th_fail("the refusal should say what to change: %s", tutti_comm_last_error(comm));

    /* with a handle: the same, through the work's status */
    tutti_work_t *w = NULL;
    st = tutti_alltoall(send, recv, 1, TUTTI_INT32, comm, &w);
    if (st == TUTTI_OK)
        st = tutti_work_wait(w, 30.0);
    tutti_work_free(w);
    if (st != TUTTI_ERR_NOT_SUPPORTED)
        rc = th_fail("direct alltoall with a handle: got %s, want TUTTI_ERR_NOT_SUPPORTED",
                     tutti_strerror(st));

    /* the communicator still works, exactly */
    int64_t mine = rank + 1, sum = 0;
    st = tutti_allreduce(&mine, &sum, 1, TUTTI_INT64, TUTTI_SUM, comm, NULL);
    if (st != TUTTI_OK || sum != (int64_t)size * (size + 1) / 2)
        rc = th_fail("allreduce after the declined calls: %s, sum %lld (want %lld): %s",
                     tutti_strerror(st), (long long)sum, (long long)size * (size + 1) / 2,
                     tutti_comm_last_error(comm));
    /* and the pairwise alltoall, which fits any window, gives the right blocks */
    st = tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLTOALL, "pairwise");
    if (st == TUTTI_OK)
        st = tutti_alltoall(send, recv, 1, TUTTI_INT32, comm, NULL);
    for (int i = 0; st == TUTTI_OK && i < size; i++)
        if (recv[i] != i * 100 + rank) {
            rc = th_fail("pairwise alltoall: block %d holds %d, want %d", i, (int)recv[i],
                         i * 100 + rank);
            break;
        }
    if (st != TUTTI_OK)
        rc = th_fail("pairwise alltoall: %s: %s", tutti_strerror(st), tutti_comm_last_error(comm));
    st = tutti_comm_destroy(comm);
    if (st != TUTTI_OK)
        rc = th_fail("destroy: %s: %s", tutti_strerror(st), tutti_last_error());
    return rc;
}

START_TEST(test_decline)
{
    static const int sizes[] = {2, 3};
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.env[0] = "TUTTI_SHM_WINDOW=64"; /* a region of 64 bytes: the alltoall's header alone */
    o.env[1] = "CCL_ALLTOALL=direct";
    for (int i = 0; i < 2; i++)
        ck_assert_msg(th_run_opts(sizes[i], &o, decline_rank, NULL) == 0, "%d ranks: see stderr",
                      sizes[i]);
}
END_TEST

TH_CHECK_MAIN_ONE("decline", "decline", 120, test_decline)
