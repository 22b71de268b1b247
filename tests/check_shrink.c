/* check_shrink.c: tutti_comm_shrink. A rank SIGKILLed in a stream of allreduces (rank 0, whose
 * store dies with it, or another), over shm and over ofi: the others shrink and get a
 * communicator of exactly the survivors, renumbered in order, whose allreduce and allgather
 * results are exact. A second rank killed while the shrink runs (the coordinator among them):
 * the survivors still end with exactly the ones alive. An excluded rank is left out and told
 * so; bad exclude lists are refused and lose nothing; a rank stopped through the others' shrink
 * is told it is out when it resumes, never left with a communicator of its own. */
#include <check.h>
#include "check_main.h"
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "tutti.h"

typedef struct scase {
    const char *tp;
    int nranks;
    int victim;          /* killed by the harness once every rank is ready */
    int second;          /* killed while its shrink runs, after second_after_s; -1: none */
    double second_after_s;
} scase_t;

static const scase_t cases[] = {
    {"shm", 4, 1, -1, 0},   {"shm", 4, 0, -1, 0},    {"ofi", 4, 1, -1, 0},
    {"ofi", 4, 0, -1, 0},   {"shm", 4, 1, 2, 0.0},   {"shm", 4, 1, 2, 0.05},
    {"shm", 4, 1, 0, 0.02}, {"ofi", 4, 2, 0, 0.05},  {"ofi", 4, 1, 3, 0.2},
    {"shm", 3, 2, -1, 0},
};

#define COUNT_SMALL 1000
#define COUNT_LARGE (1u << 18)

static int count_bits(uint64_t m)
{
    return __builtin_popcountll(m);
}

static void *killer(void *arg)
{
    const scase_t *sc = arg;
    usleep((useconds_t)(sc->second_after_s * 1e6));
    th_kill_rank(sc->second);
    return NULL;
}

/* check_comm runs an int32 and an fp32 allreduce and an allgather of old ranks on c; returns
 * TUTTI_OK, the error of a collective (a member died), or -1000 after printing a wrong result. */
static int check_comm(tutti_comm_t *c, int old_rank, uint64_t dead)
{
    int n = tutti_comm_size(c), me = tutti_comm_rank(c);
    /* The survivors, as this rank knows them now: the ranks not killed yet. */
    int32_t *all = calloc((size_t)n, sizeof *all);
    int32_t mine = old_rank;
    tutti_status_t st = tutti_allgather(&mine, all, 1, TUTTI_INT32, c, NULL);
    if (st != TUTTI_OK) {
        free(all);
        return st;
    }
    int64_t weight = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && all[i] <= all[i - 1]) {
            th_fail("allgather of old ranks: rank %d holds %d after %d: not in order", i, all[i],
                    all[i - 1]);
            free(all);
            return -1000;
        }
        if (dead >> all[i] & 1) {
            int r = all[i];
            free(all);
            th_fail("the shrunk communicator holds old rank %d, which was killed before the "
                    "shrink began", r);
            return -1000;
        }
        weight += all[i] + 1;
    }
    if (all[me] != old_rank) {
        th_fail("new rank %d holds old rank %d, expected %d", me, all[me], old_rank);
        free(all);
        return -1000;
    }
    free(all);
    int32_t *a = malloc(COUNT_SMALL * sizeof *a), *b = malloc(COUNT_SMALL * sizeof *b);
    float *x = malloc(COUNT_LARGE * sizeof *x), *y = malloc(COUNT_LARGE * sizeof *y);
    for (int i = 0; i < COUNT_SMALL; i++)
        a[i] = (old_rank + 1) * (i + 1);
    for (unsigned i = 0; i < COUNT_LARGE; i++)
        x[i] = (float)((old_rank + 1) * (int)(i % 1000 + 1));
    int bad = 0;
    st = tutti_allreduce(a, b, COUNT_SMALL, TUTTI_INT32, TUTTI_SUM, c, NULL);
    for (int i = 0; st == TUTTI_OK && i < COUNT_SMALL && !bad; i++)
        if (b[i] != (int32_t)(weight * (i + 1)))
            bad = th_fail("int32 allreduce: element %d is %d, expected %lld", i, b[i],
                          (long long)(weight * (i + 1)));
    if (st == TUTTI_OK && !bad)
        st = tutti_allreduce(x, y, COUNT_LARGE, TUTTI_FLOAT32, TUTTI_SUM, c, NULL);
    for (unsigned i = 0; st == TUTTI_OK && i < COUNT_LARGE && !bad; i++)
        if (y[i] != (float)(weight * (int)(i % 1000 + 1)))
            bad = th_fail("fp32 allreduce of %u: element %u is %.9g, expected %lld", COUNT_LARGE,
                          i, y[i], (long long)(weight * (int)(i % 1000 + 1)));
    free(a);
    free(b);
    free(x);
    free(y);
    return bad ? -1000 : st;
}

static int kill_body(int rank, int size, void *arg)
{
    const scase_t *sc = arg;
    th_shared_t *sh = th_shared();
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_OK)
        return th_fail("init: %d (%s): %s", st, tutti_strerror(st), tutti_last_error());
    float *s = malloc(4096 * sizeof *s), *r = malloc(4096 * sizeof *r);
    for (int i = 0; i < 4096; i++)
        s[i] = 1.0f;
    if ((st = tutti_barrier(comm, NULL)) != TUTTI_OK)
        return th_fail("barrier: %s", tutti_comm_last_error(comm));
    th_ready();
    double t0 = th_now();
    while ((st = tutti_allreduce(s, r, 4096, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL)) == TUTTI_OK)
        if (th_now() - t0 > 30)
            return th_fail("allreduces went on for 30 s after the kill");
    if (rank == sc->victim)
        return th_fail("the victim's allreduce failed before it was killed: %s",
                       tutti_comm_last_error(comm));
    uint64_t dead_before = sh->killed_mask;
    pthread_t th;
    if (rank == sc->second)
        pthread_create(&th, NULL, killer, (void *)sc);
    /* Shrink until a communicator of the living works: a rank dying in the middle of one shrink
     * may leave it in the next communicator, whose collectives then fail. */
    tutti_comm_t *cur = comm;
    int bad = 0, nshrinks = 0;
    for (;;) {
        tutti_comm_t *nc = NULL;
        double ts = th_now();
        st = tutti_comm_shrink(cur, NULL, 0, &nc);
        if (st == TUTTI_ERR_PEER_FAILED && strstr(tutti_last_error(), "has gone on") != NULL &&
            sc->second >= 0) {
            /* docs/shrink.md's limit: a death at the very end of a creation can end it on some
             * members and fail it here; this rank is then out, and says so, rather than
             * running a communicator apart from theirs. */
            fprintf(stderr, "[%s %d ranks, kill %d then %d] rank %d is out: %s\n", sc->tp, size,
                    sc->victim, sc->second, rank, tutti_last_error());
            sh->slots[rank] = 2;
            __atomic_add_fetch(&sh->counter, 1, __ATOMIC_SEQ_CST);
            tutti_comm_destroy(cur);
            free(s);
            free(r);
            return 0;
        }
        if (st != TUTTI_OK) {
            bad = th_fail("shrink #%d: %d (%s): %s", nshrinks + 1, st, tutti_strerror(st),
                          tutti_last_error());
            break;
        }
        nshrinks++;
        fprintf(stderr, "[%s %d ranks, kill %d then %d] rank %d: shrink #%d took %.3f s: now "
                "rank %d of %d\n", sc->tp, size, sc->victim, sc->second, rank, nshrinks,
                th_now() - ts, tutti_comm_rank(nc), tutti_comm_size(nc));
        if (rank == sc->second) /* it dies here, and uses nothing more */
            for (;;)
                pause();
        /* The failed one goes at once (it returns at once), while slower survivors may still
         * be finishing their part of the new one: that must not disturb them. */
        tutti_comm_destroy(cur);
        cur = nc;
        int rc = check_comm(nc, rank, dead_before);
        if (rc == -1000) {
            bad = 1;
            break;
        }
        if (rc == TUTTI_OK)
            break;
        if (nshrinks == 3 || sc->second < 0) {
            bad = th_fail("the communicator after shrink #%d failed: %d (%s): %s", nshrinks, rc,
                          tutti_strerror(rc), tutti_comm_last_error(nc));
            break;
        }
    }
    if (!bad) {
        /* Every rank still alive has its outcome before the count: in it, or out (above). */
        sh->slots[rank] = 1;
        __atomic_add_fetch(&sh->counter, 1, __ATOMIC_SEQ_CST);
        double t0 = th_now();
        while (__atomic_load_n(&sh->counter, __ATOMIC_SEQ_CST) <
                   size - count_bits(sh->killed_mask) && th_now() - t0 < 20)
            usleep(1000);
        uint64_t dead = sh->killed_mask;
        for (int q = 0; q < size; q++)
            if (sh->slots[q] == 2)
                dead |= (uint64_t)1 << q; /* out: as good as dead to the others */
        int want = size - count_bits(dead);
        if (tutti_comm_size(cur) != want)
            bad = th_fail("the last communicator has %d ranks; %d are alive and in",
                          tutti_comm_size(cur), want);
        int below = 0;
        for (int q = 0; q < rank; q++)
            below += !(dead >> q & 1);
        if (tutti_comm_rank(cur) != below)
            bad = th_fail("rank %d became rank %d; %d living ranks are below it", rank,
                          tutti_comm_rank(cur), below);
    }
    st = tutti_comm_destroy(cur);
    if (!bad && st != TUTTI_OK)
        bad = th_fail("destroying the working communicator: %s", tutti_last_error());
    free(s);
    free(r);
    return bad;
}

START_TEST(test_kill_and_shrink)
{
    const scase_t *sc = &cases[_i];
    th_opts_t o = TH_OPTS_INIT;
    o.transport = sc->tp;
    o.timeout_s = 60;
    o.rank_timeout_s = 20;
    o.kill_rank = sc->victim;
    o.kill_after_s = 0.2;
    o.kill_after_ready = 1;
    int rc = th_run_opts(sc->nranks, &o, kill_body, (void *)sc);
    ck_assert_msg(rc == 0, "%s, %d ranks, rank %d killed, then rank %d during the shrink: see "
                  "stderr", sc->tp, sc->nranks, sc->victim, sc->second);
}
END_TEST

typedef struct xcase {
    const char *tp;
    int out;        /* the rank the others exclude; it calls without excluding anything */
    int late_ms;    /* it calls this late (after the others have their new communicator) */
} xcase_t;

static const xcase_t xcases[] = {
    {"shm", 3, 0}, {"ofi", 3, 0}, {"shm", 0, 0}, {"ofi", 0, 0}, {"shm", 3, 1500},
};

/* Nobody dies: the others exclude rank `out`, which calls without excluding anything (rank 0,
 * the lowest, would otherwise take itself for the coordinator), at once or late, and is told
 * that it was left out. Bad lists first, on the odd ranks only: refused, they change nothing
 * (the later shrink still meets the ranks that made none), and the communicator still works. */
static int exclude_body(int rank, int size, void *arg)
{
    const xcase_t *xc = arg;
    tutti_comm_t *comm = NULL, *nc = (tutti_comm_t *)&rank;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    int bad = 0;
    const int self[1] = {rank}, out[1] = {size}, twice[2] = {3, 3}, neg[1] = {-1};
    struct {
        const int *list;
        int n;
        const char *what;
    } refused[] = {{self, 1, "itself"}, {out, 1, "out of range"}, {neg, 1, "negative"},
                   {NULL, 1, "NULL with 1"}, {twice, 2, "twice"}, {self, -1, "count -1"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0] && rank % 2 == 1; i++) {
        st = tutti_comm_shrink(comm, refused[i].list, refused[i].n, &nc);
        if (st != TUTTI_ERR_INVALID_ARG || nc != NULL)
            bad = th_fail("shrink excluding %s: %d (%s), newcomm %p; expected "
                          "TUTTI_ERR_INVALID_ARG and NULL", refused[i].what, st,
                          tutti_strerror(st), (void *)nc);
        else if (strstr(tutti_last_error(), "tutti_comm_shrink") == NULL)
            bad = th_fail("shrink excluding %s: the error does not name the call: %s",
                          refused[i].what, tutti_last_error());
        nc = (tutti_comm_t *)&rank;
    }
    if (rank % 2 == 1 && tutti_comm_shrink(comm, NULL, 0, NULL) != TUTTI_ERR_INVALID_ARG)
        bad = th_fail("shrink with newcomm NULL was not refused");
    if ((st = tutti_barrier(comm, NULL)) != TUTTI_OK)
        return th_fail("a barrier after the refused shrinks: %d: %s", st,
                       tutti_comm_last_error(comm));
    /* Every rank out of the barrier before any shrinks: a shrink ends the old communicator at
     * once, and a peer still inside its last collective would fail there. */
    __atomic_add_fetch(&th_shared()->counter, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&th_shared()->counter, __ATOMIC_SEQ_CST) < size)
        usleep(1000);
    const int out1[1] = {xc->out};
    if (rank == xc->out && xc->late_ms > 0)
        usleep((useconds_t)xc->late_ms * 1000);
    st = tutti_comm_shrink(comm, rank == xc->out ? NULL : out1, rank == xc->out ? 0 : 1, &nc);
    if (rank == xc->out) {
        if (st != TUTTI_ERR_PEER_FAILED || nc != NULL ||
            strstr(tutti_last_error(), "out of the shrunk communicator") == NULL)
            bad = th_fail("the excluded rank: %d (%s): %s; expected TUTTI_ERR_PEER_FAILED "
                          "saying it was left out", st, tutti_strerror(st), tutti_last_error());
    } else if (st != TUTTI_OK) {
        bad = th_fail("shrink excluding rank %d: %d (%s): %s", xc->out, st, tutti_strerror(st),
                      tutti_last_error());
    } else {
        int want = rank - (rank > xc->out);
        if (tutti_comm_size(nc) != 3 || tutti_comm_rank(nc) != want)
            bad = th_fail("rank %d of %d after excluding rank %d; expected rank %d of 3",
                          tutti_comm_rank(nc), tutti_comm_size(nc), xc->out, want);
        int rc = check_comm(nc, rank, 1u << xc->out);
        if (rc != TUTTI_OK && rc != -1000)
            bad = th_fail("collectives after excluding rank %d: %d: %s", xc->out, rc,
                          tutti_comm_last_error(nc));
        bad |= rc != TUTTI_OK;
        if (tutti_comm_destroy(nc) != TUTTI_OK)
            bad = th_fail("destroy the shrunk communicator: %s", tutti_last_error());
    }
    if (tutti_allreduce(&rank, &rank, 1, TUTTI_INT32, TUTTI_SUM, comm, NULL) == TUTTI_OK)
        bad = th_fail("the shrunk communicator still ran an allreduce");
    tutti_comm_destroy(comm);
    return bad;
}

START_TEST(test_exclude)
{
    const xcase_t *xc = &xcases[_i];
    th_opts_t o = TH_OPTS_INIT;
    o.transport = xc->tp;
    o.timeout_s = 60;
    o.rank_timeout_s = 20;
    ck_assert_msg(th_run_opts(4, &o, exclude_body, (void *)xc) == 0,
                  "rank %d excluded over %s (calling %d ms late): see stderr", xc->out, xc->tp,
                  xc->late_ms);
}
END_TEST

/* Rank 2 is stopped (SIGSTOP) through the others' shrink, which gives up at the timeout (5 s);
 * then (_i == 0) they shrink again excluding it and go on with a communicator of two, or
 * (_i == 1) they give up and destroy the old communicator, or (_i == 2) they give up, rank 0
 * (the coordinator) is killed and rank 1 destroys the old communicator. Only then is rank 2
 * resumed, and its shrink, the call the others gave up on, must fail: it found them all gone
 * and made a communicator of one of its own, a second job beside theirs. (_i == 3) The same
 * with the coordinator, rank 0, stopped: the others mail it their views, give up and leave;
 * resumed, it must fail too, not count them gone and go on alone. */
static int stopped_body(int rank, int size, void *arg)
{
    int variant = *(const int *)arg;
    bool again = variant == 0;
    int victim = variant == 3 ? 0 : 2, first = victim == 0 ? 1 : 0; /* first: lowest other */
    th_shared_t *sh = th_shared();
    tutti_comm_t *comm = NULL, *nc = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    int bad = 0;
    if ((st = tutti_barrier(comm, NULL)) != TUTTI_OK)
        return th_fail("barrier: %s", tutti_comm_last_error(comm));
    __atomic_add_fetch(&sh->counter, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&sh->counter, __ATOMIC_SEQ_CST) < size)
        usleep(1000);
    if (rank == victim) {
        raise(SIGSTOP);
        st = tutti_comm_shrink(comm, NULL, 0, &nc);
        tutti_status_t want = victim == 0 ? TUTTI_ERR_TIMEOUT : TUTTI_ERR_PEER_FAILED;
        if (st != want || nc != NULL)
            bad = th_fail("the rank stopped through the others' shrink: %d (%s), %s; expected "
                          "%s: %s", st, tutti_strerror(st),
                          nc != NULL ? "a communicator of its own" : "no communicator",
                          tutti_strerror(want), tutti_last_error());
        if (nc != NULL)
            tutti_comm_destroy(nc);
        tutti_comm_destroy(comm);
        __atomic_store_n(&sh->slots[1], 1, __ATOMIC_RELEASE);
        return bad;
    }
    /* the victim is stopped once /proc says so */
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/stat", sh->pids[victim]);
    for (int k = 0; k < 5000; k++) {
        FILE *f = fopen(path, "r");
        char *close_paren = f != NULL && fgets(line, sizeof line, f) ? strrchr(line, ')') : NULL;
        if (f != NULL)
            fclose(f);
        if (close_paren != NULL && close_paren[2] == 'T')
            break;
        usleep(1000);
    }
    /* The coordinator (rank 0) calls last, so that rank 1 gives up first: its leaving must not
     * read as having gone on without rank 0 (which then sent rank 2 no note). */
    if (rank == 0)
        usleep(300000);
    st = tutti_comm_shrink(comm, NULL, 0, &nc);
    if (st != TUTTI_ERR_TIMEOUT)
        bad = th_fail("shrink with rank %d stopped: %d (%s): %s; expected TUTTI_ERR_TIMEOUT",
                      victim, st, tutti_strerror(st), tutti_last_error());
    if (variant == 2 && rank == 0) { /* to be killed, its note mailed */
        __atomic_store_n(&sh->slots[2], 1 + bad, __ATOMIC_RELEASE);
        for (;;)
            pause();
    }
    if (variant == 2) {
        if (th_await_slot(2, 30) != 0 || sh->slots[2] != 1)
            bad = 1;
        th_kill_rank(0);
    }
    if (again) {
        const int out[1] = {2};
        if ((st = tutti_comm_shrink(comm, out, 1, &nc)) != TUTTI_OK)
            bad = th_fail("shrink excluding rank 2: %d (%s): %s", st, tutti_strerror(st),
                          tutti_last_error());
        else if (tutti_comm_size(nc) != 2 || tutti_comm_rank(nc) != rank)
            bad = th_fail("rank %d of %d after excluding rank 2", tutti_comm_rank(nc),
                          tutti_comm_size(nc));
    }
    tutti_comm_destroy(comm);
    if (rank == (variant == 2 ? 1 : first))
        kill(sh->pids[victim], SIGCONT);
    if (th_await_slot(1, 30) != 0)
        bad = 1;
    if (nc != NULL) {
        int32_t x = 1;
        if ((st = tutti_allreduce(&x, &x, 1, TUTTI_INT32, TUTTI_SUM, nc, NULL)) != TUTTI_OK ||
            x != 2)
            bad = th_fail("allreduce on the communicator of two: %d, sum %d: %s", st, x,
                          tutti_comm_last_error(nc));
        tutti_comm_destroy(nc);
    }
    return bad;
}

START_TEST(test_stopped)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 60;
    o.rank_timeout_s = 5;
    int variant = _i;
    static const char *const how[] = {"the others shrink again without it", "the others give up",
                                      "the others give up, the coordinator is killed",
                                      "the coordinator stopped, the others give up"};
    ck_assert_msg(th_run_opts(3, &o, stopped_body, &variant) == 0,
                  "a rank stopped through a shrink (%s): see stderr", how[_i]);
}
END_TEST

static Suite *shrink_suite(void)
{
    Suite *s = suite_create("shrink");
    TCase *tc = tcase_create("kill");
    tcase_set_timeout(tc, 70);
    tcase_add_loop_test(tc, test_kill_and_shrink, 0, (int)(sizeof cases / sizeof cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("exclude");
    tcase_set_timeout(tc, 70);
    tcase_add_loop_test(tc, test_exclude, 0, (int)(sizeof xcases / sizeof xcases[0]));
    tcase_add_loop_test(tc, test_stopped, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(shrink_suite)
