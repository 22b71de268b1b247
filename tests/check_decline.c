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

/* Chosen automatically on that window, the alltoall is not the direct one (which would only
 * decline) but one that runs: every block right, at 1 and at 5000 elements. */
static int auto_rank(int rank, int size, void *arg)
{
    (void)arg;
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    int rc = 0;
    for (size_t n = 1; n <= 5000 && rc == 0; n += 4999) {
        int32_t *send = malloc(n * (size_t)size * 4), *recv = malloc(n * (size_t)size * 4);
        for (size_t i = 0; i < n * (size_t)size; i++)
            send[i] = (int32_t)(rank * 1000000 + (int)i);
        const char *algo = tutti_comm_algorithm(comm, TUTTI_COLL_ALLTOALL, n * 4);
        tutti_status_t st = tutti_alltoall(send, recv, n, TUTTI_INT32, comm, NULL);
        if (st != TUTTI_OK)
            rc = th_fail("alltoall of %zu (%s) on a 64-byte window: %s: %s", n, algo,
                         tutti_strerror(st), tutti_comm_last_error(comm));
        for (int j = 0; rc == 0 && j < size; j++)
            for (size_t i = 0; i < n; i++)
                if (recv[(size_t)j * n + i] != (int32_t)(j * 1000000 + rank * (int)n + (int)i)) {
                    rc = th_fail("alltoall of %zu (%s): block %d [%zu] = %d", n, algo, j, i,
                                 (int)recv[(size_t)j * n + i]);
                    break;
                }
        free(send);
        free(recv);
    }
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_auto_small_window)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.env[0] = "TUTTI_SHM_WINDOW=64";
    for (int size = 2; size <= 3; size++)
        ck_assert_msg(th_run_opts(size, &o, auto_rank, NULL) == 0, "%d ranks: see stderr", size);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("decline");
    TCase *tc = tcase_create("decline");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_decline);
    tcase_add_test(tc, test_auto_small_window);
    suite_add_tcase(s, tc);
    return th_check_run(s);
}
