/* check_stress.c: thousands of back-to-back collectives of mixed kinds and sizes, with ranks
 * stalling at different moments, every result checked exactly. The small-message paths reuse
 * their shared-memory areas without a closing barrier (two halves, flagged lines), so a rank
 * racing ahead while another is still reading is exactly what this provokes; the sizes also
 * cross from the flagged-line paths to the barrier paths and to the sliced large path. Then
 * the rooted collectives' flow control over ofi (test_flow). */
#include <check.h>
#include "check_main.h"
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "tutti.h"

enum { ITERS = 2500, MAXC = 1 << 17 };

/* Element counts (int32): 1 line, 2 lines, a few lines, past each small threshold, and one
 * large enough to be sliced across two workers. */
static const size_t counts[] = {1, 2, 14, 15, 29, 32, 100, 300, 1000, 1100, 5000, MAXC};
enum { NCOUNTS = sizeof counts / sizeof counts[0] };

static int32_t val(int rank, size_t i, int iter) { return (int32_t)((rank + 1) * 1000003 + (int)i * 7 + iter); }

/* Some rank stalls now and then, for a different time each time: the others run ahead. */
static void jitter(int rank, int size, int iter)
{
    unsigned h = (unsigned)iter * 2654435761u;
    if ((int)(h % (unsigned)size) != rank || (h >> 8) % 4 != 0)
        return;
    if ((h >> 12) % 2 == 0) {
        sched_yield();
    } else {
        struct timespec ts = {0, (long)((h >> 16) % 50) * 1000L};
        nanosleep(&ts, NULL);
    }
}

/* finish waits for a call posted with a handle (wk set) and frees it; st is the post's. Call it
 * after the post, not around it: an argument's order of evaluation is unspecified. */
static tutti_status_t finish(tutti_status_t st, tutti_work_t *wk)
{
    if (st == TUTTI_OK && wk != NULL)
        st = tutti_work_wait(wk, 60.0);
    tutti_work_free(wk);
    return st;
}

static int run_rank(int rank, int size, void *arg)
{
    (void)arg;
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    int32_t *in = malloc((size_t)MAXC * (size_t)size * sizeof *in);
    int32_t *out = malloc((size_t)MAXC * (size_t)size * sizeof *out);
    if (in == NULL || out == NULL) {
        tutti_comm_abort(comm); /* the others fail at once instead of at their deadline */
        tutti_comm_destroy(comm);
        return th_fail("out of memory");
    }
    int rc = 0;
    for (int it = 0; it < ITERS && rc == 0; it++) {
        size_t n = counts[((unsigned)it * 7u + (unsigned)it / 13u) % NCOUNTS];
        if (n == MAXC && it % 5 != 0)
            n = 3; /* the large one only now and then: it is slow */
        int kind = it % 5;
        tutti_work_t *wk = NULL;
        tutti_work_t **wp = it % 3 == 1 ? &wk : NULL; /* every third call with a handle */
        jitter(rank, size, it);
        switch (kind) {
        case 0: /* allreduce, out of place */
        case 1: /* allreduce, in place */
            for (size_t i = 0; i < n; i++)
                (kind ? out : in)[i] = val(rank, i, it);
            st = tutti_allreduce(kind ? TUTTI_IN_PLACE : in, out, n, TUTTI_INT32, TUTTI_SUM, comm,
                                 wp);
            st = finish(st, wk);
            for (size_t i = 0; st == TUTTI_OK && i < n && rc == 0; i++) {
                int64_t want = 0;
                for (int r = 0; r < size; r++)
                    want += val(r, i, it);
                if (out[i] != (int32_t)want)
                    rc = th_fail("iter %d allreduce%s of %zu: [%zu] = %d, want %d", it,
                                 kind ? " in place" : "", n, i, out[i], (int32_t)want);
            }
            break;
        case 2: /* allgather */
            for (size_t i = 0; i < n; i++)
                in[i] = val(rank, i, it);
            st = tutti_allgather(in, out, n, TUTTI_INT32, comm, wp);
            st = finish(st, wk);
            for (int r = 0; st == TUTTI_OK && r < size && rc == 0; r++)
                for (size_t i = 0; i < n && rc == 0; i++)
                    if (out[(size_t)r * n + i] != val(r, i, it))
                        rc = th_fail("iter %d allgather of %zu: block %d [%zu] = %d, want %d", it,
                                     n, r, i, out[(size_t)r * n + i], val(r, i, it));
            break;
        case 3: /* alltoall: block j of rank r holds val(r * size + j, ...) */
            for (int j = 0; j < size; j++)
                for (size_t i = 0; i < n; i++)
                    in[(size_t)j * n + i] = val(rank * size + j, i, it);
            st = tutti_alltoall(in, out, n, TUTTI_INT32, comm, wp);
            st = finish(st, wk);
            for (int r = 0; st == TUTTI_OK && r < size && rc == 0; r++)
                for (size_t i = 0; i < n && rc == 0; i++)
                    if (out[(size_t)r * n + i] != val(r * size + rank, i, it))
                        rc = th_fail("iter %d alltoall of %zu: block %d [%zu] = %d, want %d", it,
                                     n, r, i, out[(size_t)r * n + i], val(r * size + rank, i, it));
            break;
        default: /* barrier every other time, else broadcast from a moving root */
            if (it % 10 == 4) {
                st = tutti_barrier(comm, NULL);
                break;
            }
            for (size_t i = 0; i < n; i++)
                out[i] = rank == it % size ? val(rank, i, it) : -1;
            st = tutti_broadcast(out, n, TUTTI_INT32, it % size, comm, wp);
            st = finish(st, wk);
            for (size_t i = 0; st == TUTTI_OK && i < n && rc == 0; i++)
                if (out[i] != val(it % size, i, it))
                    rc = th_fail("iter %d broadcast of %zu from %d: [%zu] = %d, want %d", it, n,
                                 it % size, i, out[i], val(it % size, i, it));
            break;
        }
        if (st != TUTTI_OK && rc == 0)
            rc = th_fail("iter %d kind %d count %zu: %s", it, kind, n, tutti_last_error());
    }
    free(in);
    free(out);
    if (tutti_comm_destroy(comm) != TUTTI_OK && rc == 0)
        rc = th_fail("destroy: %s", tutti_last_error());
    return rc;
}

START_TEST(test_stress)
{
    for (int n = 2; n <= 4; n++) {
        th_opts_t o = TH_OPTS_INIT;
        o.transport = "shm";
        o.timeout_s = 200;
        o.env[0] = "CCL_WORKER_COUNT=2";
        ck_assert_msg(th_run_opts(n, &o, run_rank, NULL) == 0, "%d ranks", n);
        /* everything on the worker threads, none in the caller */
        o.env[1] = "TUTTI_INLINE_MAX=0";
        ck_assert_msg(th_run_opts(n, &o, run_rank, NULL) == 0, "%d ranks, TUTTI_INLINE_MAX=0", n);
    }
}
END_TEST

/*
 * Flow control (algos.h): over ofi a broadcast's root never waits for its leaves and a reduce's
 * leaves never wait for their root, and the provider keeps whatever comes early. The side
 * that could not go on (a broadcast's leaves, a reduce's root) sleeps first; the other side
 * must still stay within TUTTI__FLOW_EVERY (64) calls a tree level of it, all the while
 * (before: all FLOW_CALLS calls at once, gigabytes held by a leaf), also where an empty call of
 * the same kind comes before each (which meets no one: flagged, it had let every other call
 * go unchecked). Every result is checked exactly.
 */
enum { FLOW_CALLS = 3000, FLOW_LEAD = 64 + 1 };

typedef struct flow_case {
    int reduce; /* else broadcast */
    int empties; /* an empty call of the same kind before each */
} flow_case_t;

static int flow_rank(int rank, int size, void *arg)
{
    const flow_case_t *fc = arg;
    const bool reduce = fc->reduce;
    th_shared_t *sh = th_shared();
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    /* Two barriers, so that the empty calls take the even numbers, where blocks of 64 numbers
     * begin (flagging the first call of each block let an empty one take every flag). */
    for (int b = 0; b < 2; b++)
        if (tutti_barrier(comm, NULL) != TUTTI_OK)
            return th_fail("barrier: %s", tutti_comm_last_error(comm));
    int depth = 0; /* of the binomial tree rooted at 0: the most set bits of a rank below size */
    for (int v = 1; v < size; v++)
        if (__builtin_popcount((unsigned)v) > depth)
            depth = __builtin_popcount((unsigned)v);
    const long bound = (long)depth * FLOW_LEAD;
    const bool waits = reduce ? rank == 0 : rank != 0; /* the side the other could outrun */
    if (waits)
        usleep(500000);
    int rc = 0;
    long worst = 0;
    for (int k = 0; k < FLOW_CALLS && rc == 0; k++) {
        int32_t x[3], y[3] = {0, 0, 0};
        tutti_status_t st = TUTTI_OK;
        for (int i = 0; i < 3; i++)
            x[i] = val(reduce ? rank : 0, (size_t)i, k);
        if (reduce) {
            if (fc->empties)
                st = tutti_reduce(x, y, 0, TUTTI_INT32, TUTTI_SUM, 0, comm, NULL);
            if (st == TUTTI_OK)
                st = tutti_reduce(x, y, 3, TUTTI_INT32, TUTTI_SUM, 0, comm, NULL);
        } else {
            if (rank == 0)
                memcpy(y, x, sizeof y);
            if (fc->empties)
                st = tutti_broadcast(y, 0, TUTTI_INT32, 0, comm, NULL);
            if (st == TUTTI_OK)
                st = tutti_broadcast(y, 3, TUTTI_INT32, 0, comm, NULL);
        }
        if (st != TUTTI_OK)
            return th_fail("%s #%d: %s", reduce ? "reduce" : "broadcast", k,
                           tutti_comm_last_error(comm));
        for (int i = 0; i < 3 && (!reduce || rank == 0); i++) {
            int64_t want = val(0, (size_t)i, k);
            if (reduce)
                for (int r = 1; r < size; r++)
                    want += val(r, (size_t)i, k);
            if (y[i] != (int32_t)want)
                rc = th_fail("%s #%d: [%d] = %d, want %d", reduce ? "reduce" : "broadcast", k, i,
                             y[i], (int32_t)want);
        }
        __atomic_store_n(&sh->slots[rank], (long)k + 1, __ATOMIC_RELEASE);
        for (int r = 0; waits && r < size; r++) {
            long lead = __atomic_load_n(&sh->slots[r], __ATOMIC_ACQUIRE) - k;
            if (r != rank && lead > worst)
                worst = lead;
        }
    }
    if (rc == 0 && worst > bound)
        rc = th_fail("a %s ran up to %ld calls ahead of rank %d (at most %ld over %d tree "
                     "level%s%s): nothing held it back",
                     reduce ? "reduce's leaf" : "broadcast's root",
                     worst, rank, bound, depth, depth > 1 ? "s" : "",
                     fc->empties ? ", an empty call before each" : "");
    if (tutti_comm_destroy(comm) != TUTTI_OK && rc == 0)
        rc = th_fail("destroy: %s", tutti_last_error());
    return rc;
}

START_TEST(test_flow)
{
    for (int reduce = 0; reduce < 2; reduce++)
        for (int empties = 0; empties < 2; empties++)
            for (int n = 2; n <= 4; n++) {
                flow_case_t fc = {reduce, empties};
                th_opts_t o = TH_OPTS_INIT;
                o.transport = "ofi";
                o.timeout_s = 120;
                ck_assert_msg(th_run_opts(n, &o, flow_rank, &fc) == 0, "%s%s, %d ranks",
                              reduce ? "reduce" : "broadcast",
                              empties ? " with an empty call before each" : "", n);
            }
}
END_TEST

static Suite *stress_suite(void)
{
    Suite *s = suite_create("stress");
    TCase *tc = tcase_create("mixed");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_stress);
    suite_add_tcase(s, tc);
    tc = tcase_create("flow");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_flow);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(stress_suite)
