/* check_mismatch_msg.c: ranks that post the same collective with different roots on a message
 * algorithm (tree reduce, over ofi and over shm) fail with TUTTI_ERR_MISMATCH, not after the
 * timeout: each receive waits for a message the other rank never sends, so no fingerprint ever
 * meets another, and only a waiter that asks the peer which call it posted (over the liveness
 * mesh) can tell. At 3 ranks, a rank outside the pair whose own call needed nothing from it may
 * return TUTTI_OK, and its next call must fail with the mismatch. A correct program whose rank
 * is merely late (2 s, past the time a waiter first asks) still succeeds, with exact sums, and
 * so does a tree allreduce (its reduce to rank 0 has a root of its own) with a late rank. The
 * ranks run with TUTTI_TIMEOUT=60 under a harness deadline of 40 s: waiting out the timeout
 * fails the test. */
#include <check.h>
#include "check_main.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "tutti.h"

#define N 1000

typedef struct rcase {
    const char *name;
    const char *tp;  /* TUTTI_TRANSPORT */
    int nranks;
    int late;        /* 0: rank 1 posts root 1, the others root 0 (a mismatch); 1: every rank
                        posts the same root, rank 1 2 s late, then rank 0 1 s late */
} rcase_t;

static const rcase_t cases[] = {
    {"reduce root 0 vs 1 (ofi)", "ofi", 2, 0},
    {"reduce root 0 vs 1 (shm, tree)", "shm", 2, 0},
    {"reduce root 0 vs 1, 3 ranks (ofi)", "ofi", 3, 0},
    {"reduce root 0 vs 1, 3 ranks (shm, tree)", "shm", 3, 0},
    {"same roots, a late rank (ofi)", "ofi", 2, 1},
    {"same roots, a late rank (shm, tree)", "shm", 2, 1},
    {"same roots, a late rank, 3 ranks (ofi)", "ofi", 3, 1},
    {"same roots, a late rank, 3 ranks (shm, tree)", "shm", 3, 1},
};

static int late_body(const rcase_t *rc, int rank, int size, tutti_comm_t *comm, float *x, float *y)
{
    int bad = 0;
    /* rank 1 comes 2 s late to a reduce to root 0, then rank 0 1 s late to one to root 1 */
    for (int k = 0; k < 2 && !bad; k++) {
        const int root = k, sleeper = 1 - k;
        for (int i = 0; i < N; i++) {
            x[i] = (float)(rank + 1);
            y[i] = -1;
        }
        if (rank == sleeper)
            usleep(k == 0 ? 2000000 : 1000000);
        double t0 = th_now();
        tutti_status_t st = tutti_reduce(x, y, N, TUTTI_FLOAT32, TUTTI_SUM, root, comm, NULL);
        if (st != TUTTI_OK) {
            bad = th_fail("%s: reduce %d (root %d) after %.2f s: %s: %s", rc->name, k, root,
                          th_now() - t0, tutti_strerror(st), tutti_comm_last_error(comm));
            break;
        }
        const float want = (float)(size * (size + 1) / 2);
        for (int i = 0; rank == root && i < N && !bad; i++)
            if (y[i] != want)
                bad = th_fail("%s: reduce %d: y[%d] = %g, expected %g", rc->name, k, i, y[i],
                              want);
    }
    /* and the tree allreduce, whose reduce to rank 0 runs with a root of its own, with the last
     * rank 1 s late */
    float one = 1, sum = 0;
    if (!bad && rank == size - 1)
        usleep(1000000);
    tutti_status_t st = bad ? TUTTI_OK
                            : tutti_allreduce(&one, &sum, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
    if (st != TUTTI_OK || (!bad && sum != (float)size))
        bad = th_fail("%s: the allreduce after: %s, sum %g: %s", rc->name, tutti_strerror(st), sum,
                      tutti_comm_last_error(comm));
    return bad;
}

static int body(int rank, int size, void *arg)
{
    const rcase_t *rc = arg;
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_OK)
        return th_fail("tutti_comm_init_env: %s", tutti_last_error());
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    int bad = 0;
    const char *algo = tutti_comm_algorithm(comm, TUTTI_COLL_REDUCE, N * sizeof(float));
    if (algo == NULL || strcmp(algo, "tree") != 0)
        bad = th_fail("%s: reduce of %zu bytes runs %s, not tree", rc->name, N * sizeof(float),
                      algo ? algo : "(null)");
    if (!bad && tutti_barrier(comm, NULL) != TUTTI_OK)
        bad = th_fail("barrier: %s", tutti_comm_last_error(comm));
    if (!bad && rc->late)
        bad = late_body(rc, rank, size, comm, x, y);
    else if (!bad) {
        for (int i = 0; i < N; i++)
            x[i] = y[i] = (float)(rank + 1);
        const int root = rank == 1 ? 1 : 0;
        double t0 = th_now();
        st = tutti_reduce(x, y, N, TUTTI_FLOAT32, TUTTI_SUM, root, comm, NULL);
        double dt = th_now() - t0;
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", tutti_comm_last_error(comm));
        const char *where = "reduce";
        /* Ranks 0 and 1 wait for each other; a third may have needed nothing from them. */
        if (st == TUTTI_OK && rank >= 2) {
            float one = 1, sum = 0;
            where = "the allreduce after its reduce";
            t0 = th_now();
            st = tutti_allreduce(&one, &sum, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
            dt = th_now() - t0;
            snprintf(msg, sizeof msg, "%s", tutti_comm_last_error(comm));
        }
        if (st != TUTTI_ERR_MISMATCH)
            bad = th_fail("%s: %s: expected TUTTI_ERR_MISMATCH, got %d (%s) after %.2f s: %s",
                          rc->name, where, st, tutti_strerror(st), dt, msg);
        /* Ranks 0 and 1 name another rank: at 2 ranks each other; at 3 the rank that found a
         * difference with it, or that told it of one (rank 2 may find one first, from a
         * message of the reduce reaching its next call, when it runs slowly); a third rank's
         * may name only the rank that told it. */
        else if (strstr(msg, "mismatched collectives") == NULL ||
                 (rank < 2 && !th_mentions_rank(msg, 1 - rank) &&
                  !(size > 2 && th_mentions_rank(msg, 2))))
            bad = th_fail("%s: the text does not name the mismatch and the other rank: \"%s\"",
                          rc->name, msg);
        /* This rank's own call is named, root and all. */
        else if (rank < 2 && strstr(msg, rank == 1 ? "root 1" : "root 0") == NULL)
            bad = th_fail("%s: the text does not name this rank's root: \"%s\"", rc->name, msg);
        fprintf(stderr, "[%s] rank %d: %s: %.3f s: %s\n", rc->name, rank, where, dt, msg);
        float one = 1, sum = 0;
        st = tutti_allreduce(&one, &sum, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
        if (st != TUTTI_ERR_COMM_FAILED)
            bad = th_fail("%s: a call after the mismatch: expected TUTTI_ERR_COMM_FAILED, got %d "
                          "(%s)", rc->name, st, tutti_strerror(st));
    }
    tutti_comm_destroy(comm);
    free(x);
    free(y);
    return bad;
}

START_TEST(test_roots)
{
    const rcase_t *rc = &cases[_i];
    th_opts_t o = TH_OPTS_INIT;
    o.transport = rc->tp;
    o.timeout_s = 40;
    o.rank_timeout_s = 60;
    o.env[0] = "CCL_REDUCE=tree"; /* ofi's default already; shm's must be told */
    o.env[1] = "CCL_ALLREDUCE=tree";
    ck_assert_msg(th_run_opts(rc->nranks, &o, body, (void *)rc) == 0, "%s: see stderr",
                  rc->name);
}
END_TEST

static Suite *roots_suite(void)
{
    Suite *s = suite_create("mismatch_msg");
    TCase *tc = tcase_create("roots");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_roots, 0, (int)(sizeof cases / sizeof cases[0]));
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(roots_suite)
