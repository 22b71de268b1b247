/* check_placement.c: where a node's busy threads go and when waits yield (pg/placement.c,
 * affinity.c): layouts given by hand (unbound, bound per core, bound together, oversubscribed,
 * spinning workers, explicit lists, unknown sets) and thousands of random ones; the wait's
 * answer to a peer on its own core (algos/colocate.c) on a window made by hand; and, on 2 ranks,
 * what communicator creation does with the calling thread (TUTTI_CALLER_AFFINITY, its auto
 * default pinning it for 3 ranks on 2 cores in sessions of their own) and with
 * ranks that a launcher bound to a core each; sleeping on a rank's doorbell, alone and with
 * ranks in sessions of their own on one core; a wait bound beside a busy thread (common/time.c). */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "harness.h"
#include "pg/comm.h"

/* ---- the plan, pure ---------------------------------------------------------------------- */

static tutti__cpuset_t set_of(const char *list) /* "0-3" or "0,2" or "" */
{
    tutti__cpuset_t s = {{0}};
    while (*list != '\0') {
        char *end;
        long lo = strtol(list, &end, 10), hi = lo;
        if (*end == '-')
            hi = strtol(end + 1, &end, 10);
        for (long c = lo; c <= hi; c++)
            tutti__cpuset_add(&s, (int)c);
        list = *end == ',' ? end + 1 : end;
    }
    return s;
}

typedef struct layout {
    int n, nw;
    bool spin, automatic;
    tutti__cpuset_t sets[8];
    int caller[8], workers[8 * 4];
    bool over[8];
} layout_t;

static void plan(layout_t *L, const char *const *sets)
{
    for (int r = 0; r < L->n; r++)
        L->sets[r] = set_of(sets[r]);
    ck_assert(tutti__place(L->n, L->sets, L->nw, L->spin, L->automatic, L->caller, L->workers,
                           L->over));
}

START_TEST(test_unbound_two_cores)
{
    /* torchrun / env / MPICH without binding: both ranks may use both cores. */
    layout_t L = {.n = 2, .nw = 1, .automatic = true};
    plan(&L, (const char *[]){"0-1", "0-1"});
    ck_assert_int_eq(L.caller[0], 0);
    ck_assert_int_eq(L.caller[1], 1);
    /* no core is free of a caller: each worker joins its own rank's caller, never the other's */
    ck_assert_int_eq(L.workers[0], 0);
    ck_assert_int_eq(L.workers[1], 1);
    ck_assert_msg(!L.over[0] && !L.over[1], "2 callers on 2 cores must not yield at once");
}
END_TEST

START_TEST(test_bound_per_core)
{
    /* Open MPI's default, MPICH -bind-to core: one core each. The old rule (local ranks >
     * this process's cores) called this oversubscribed. */
    layout_t L = {.n = 2, .nw = 1, .automatic = true};
    plan(&L, (const char *[]){"1", "0"});
    ck_assert_int_eq(L.caller[0], 1);
    ck_assert_int_eq(L.caller[1], 0);
    ck_assert_int_eq(L.workers[0], 1);
    ck_assert_int_eq(L.workers[1], 0);
    ck_assert(!L.over[0] && !L.over[1]);
}
END_TEST

START_TEST(test_bound_together)
{
    layout_t L = {.n = 2, .nw = 1, .automatic = true};
    plan(&L, (const char *[]){"0", "0"});
    ck_assert_int_eq(L.caller[0], 0);
    ck_assert_int_eq(L.caller[1], 0);
    ck_assert_msg(L.over[0] && L.over[1], "two ranks bound to one core must yield");
    /* one bound pair, one free rank on two cores: only the pair yields */
    layout_t M = {.n = 3, .nw = 1, .automatic = true};
    plan(&M, (const char *[]){"0-3", "0", "0"});
    ck_assert_int_eq(M.caller[1], 0);
    ck_assert_int_eq(M.caller[2], 0);
    ck_assert_int_eq(M.caller[0], 1);
    ck_assert(!M.over[0] && M.over[1] && M.over[2]);
}
END_TEST

START_TEST(test_four_on_two)
{
    layout_t L = {.n = 4, .nw = 1, .automatic = true};
    plan(&L, (const char *[]){"0-1", "0-1", "0-1", "0-1"});
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(L.caller[r], r % 2);
        ck_assert_int_eq(L.workers[r], L.caller[r]);
        ck_assert_msg(L.over[r], "4 callers on 2 cores: rank %d must yield", r);
    }
}
END_TEST

START_TEST(test_spare_cores)
{
    /* 2 ranks on 4 cores: callers low, workers from the top, all distinct */
    layout_t L = {.n = 2, .nw = 1, .automatic = true};
    plan(&L, (const char *[]){"0-3", "0-3"});
    ck_assert_int_eq(L.caller[0], 0);
    ck_assert_int_eq(L.caller[1], 1);
    ck_assert_int_eq(L.workers[0], 3);
    ck_assert_int_eq(L.workers[1], 2);
    ck_assert(!L.over[0] && !L.over[1]);
    /* bound first: a rank with one core takes it before an unbound rank could */
    layout_t M = {.n = 2, .nw = 1, .automatic = true};
    plan(&M, (const char *[]){"0-1", "0"});
    ck_assert_int_eq(M.caller[1], 0);
    ck_assert_int_eq(M.caller[0], 1);
    ck_assert(!M.over[0] && !M.over[1]);
}
END_TEST

START_TEST(test_spinning_workers)
{
    /* CCL_WORKER_WAIT=0: workers count as busy */
    layout_t L = {.n = 2, .nw = 1, .spin = true, .automatic = true};
    plan(&L, (const char *[]){"0-1", "0-1"});
    ck_assert_msg(L.over[0] && L.over[1], "2 callers + 2 spinning workers on 2 cores");
    layout_t M = {.n = 2, .nw = 1, .spin = true, .automatic = true};
    plan(&M, (const char *[]){"0-3", "0-3"});
    ck_assert(!M.over[0] && !M.over[1]);
    /* an explicit list that puts rank 1's spinning worker on rank 0's caller */
    layout_t E = {.n = 2, .nw = 1, .spin = true, .automatic = false, .workers = {3, 0}};
    plan(&E, (const char *[]){"0-3", "0-3"});
    ck_assert_int_eq(E.workers[1], 0); /* given lists are kept */
    ck_assert(E.over[0] && E.over[1]);
    /* unpinned spinning workers (CCL_WORKER_AFFINITY=none) yield */
    layout_t N = {.n = 2, .nw = 1, .spin = true, .automatic = false, .workers = {-1, -1}};
    plan(&N, (const char *[]){"0-3", "0-3"});
    ck_assert(N.over[0] && N.over[1]);
}
END_TEST

START_TEST(test_unknown_sets)
{
    layout_t L = {.n = 2, .nw = 1, .automatic = true};
    plan(&L, (const char *[]){"", "0-1"});
    ck_assert_int_eq(L.caller[0], -1);
    ck_assert_int_eq(L.workers[0], -1);
    ck_assert_msg(L.over[0], "a rank that cannot tell its cores yields");
    layout_t A = {.n = 1, .nw = 1, .automatic = true};
    plan(&A, (const char *[]){""});
    ck_assert_msg(!A.over[0], "a rank alone never yields at once");
}
END_TEST

/* Random layouts: every rule that must hold whatever the launcher did. */
START_TEST(test_random_layouts)
{
    for (uint64_t seed = 1; seed <= 5000; seed++) {
        layout_t L = {.n = 1 + (int)(th_hash64(seed, 1, 0) % 8),
                      .nw = 1 + (int)(th_hash64(seed, 2, 0) % 4),
                      .spin = th_hash64(seed, 3, 0) & 1,
                      .automatic = true};
        int ncores = 1 + (int)(th_hash64(seed, 4, 0) % 12);
        for (int r = 0; r < L.n; r++) {
            uint64_t bits = th_hash64(seed, 5, (uint64_t)r) & ((1ull << ncores) - 1);
            if (th_hash64(seed, 6, (uint64_t)r) % 3 == 0)
                bits = (1ull << ncores) - 1; /* unbound */
            if (bits == 0)
                bits = 1ull << (th_hash64(seed, 7, (uint64_t)r) % (uint64_t)ncores);
            L.sets[r].w[0] = bits;
        }
        ck_assert(tutti__place(L.n, L.sets, L.nw, L.spin, true, L.caller, L.workers, L.over));
        int mains[64] = {0}, busy[64] = {0}, nbusy = L.n;
        uint64_t all = 0;
        for (int r = 0; r < L.n; r++) {
            all |= L.sets[r].w[0];
            ck_assert_msg(tutti__cpuset_has(&L.sets[r], L.caller[r]),
                          "seed %llu: rank %d's caller on core %d outside its set",
                          (unsigned long long)seed, r, L.caller[r]);
            mains[L.caller[r]]++;
            busy[L.caller[r]]++;
        }
        for (int r = 0; r < L.n; r++)
            for (int i = 0; i < L.nw; i++) {
                int c = L.workers[r * L.nw + i];
                ck_assert(tutti__cpuset_has(&L.sets[r], c));
                /* never on another rank's caller's core */
                ck_assert_msg(mains[c] == 0 || c == L.caller[r],
                              "seed %llu: rank %d's worker %d on core %d, another rank's caller",
                              (unsigned long long)seed, r, i, c);
                if (L.spin) {
                    busy[c]++;
                    nbusy++;
                }
            }
        int ncov = __builtin_popcountll(all);
        for (int r = 0; r < L.n; r++) {
            bool shared = busy[L.caller[r]] > 1;
            for (int i = 0; L.spin && i < L.nw; i++)
                shared |= busy[L.workers[r * L.nw + i]] > 1;
            bool want = (shared || nbusy > ncov) && nbusy > 1;
            ck_assert_msg(L.over[r] == want, "seed %llu: rank %d over %d, want %d",
                          (unsigned long long)seed, r, L.over[r], want);
        }
        /* callers spread: no core holds two callers while a core of that rank's set is empty
         * of callers (two unbound ranks never get one core) */
        for (int r = 0; r < L.n; r++)
            if (mains[L.caller[r]] > 1)
                for (int c = 0; c < ncores; c++)
                    ck_assert_msg(!tutti__cpuset_has(&L.sets[r], c) || mains[c] > 0,
                                  "seed %llu: rank %d shares core %d while core %d is free",
                                  (unsigned long long)seed, r, L.caller[r], c);
    }
}
END_TEST

/* ---- a wait that finds its peer on its own core (colocate.c) ------------------------------- */

typedef struct fake {
    tutti__net_t net;
    tutti__slice_t slices[1];
    tutti__window_t win, *wins[1];
    char *regions[2];
    volatile uint64_t *flags[2];
    volatile uint32_t *notes[2];
    volatile uint64_t flagmem[2][8];
    tutti__coll_t c;
    char err[TUTTI__ERRLEN];
} fake_t;

static void fake_init(fake_t *f, int rank, bool may_move)
{
    memset(f, 0, sizeof *f);
    for (int r = 0; r < 2; r++) {
        f->flags[r] = &f->flagmem[r][0];
        f->notes[r] = (volatile uint32_t *)&f->flagmem[r][1];
    }
    f->win = (tutti__window_t){.nranks = 2, .regions = f->regions,
                               .flags = (volatile uint64_t **)f->flags,
                               .notes = (volatile uint32_t **)f->notes};
    f->wins[0] = &f->win;
    f->net = (tutti__net_t){.rank = rank, .size = 2, .nchan = 2, .slices = f->slices,
                            .may_move = may_move};
    f->net.links.wins = f->wins;
    f->c = (tutti__coll_t){.net = &f->net, .rank = rank, .size = 2, .slice = 0, .err = f->err};
}

static int two_cores(int *a, int *b)
{
    cpu_set_t s;
    sched_getaffinity(0, sizeof s, &s);
    *a = *b = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &s)) {
            if (*a < 0)
                *a = c;
            else if (*b < 0)
                *b = c;
        }
    return *b >= 0;
}

static void pin_to(int c)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(c, &s);
    ck_assert(sched_setaffinity(0, sizeof s, &s) == 0);
}

START_TEST(test_colocated_wait)
{
    int a, b;
    if (!two_cores(&a, &b)) {
        fprintf(stderr, "check_placement: one core only, colocated_wait not run\n");
        return;
    }
    cpu_set_t before;
    sched_getaffinity(0, sizeof before, &before);

    fake_t f;
    /* Rank 1 waits on rank 0, whose word says it runs on this core: step aside and move. */
    fake_init(&f, 1, true);
    tutti__thread_move(a, false);
    int here = sched_getcpu();
    *f.notes[0] = (uint32_t)(here + 1) | (1u << 31);
    ck_assert(tutti__colo_shared(&f.c, 0));
    int now = sched_getcpu();
    ck_assert_msg(now != here, "rank 1 shared core %d with rank 0 and stayed there", here);
    ck_assert_uint_eq(*f.notes[1] & ~(1u << 31), (uint32_t)now + 1);
    cpu_set_t after;
    sched_getaffinity(0, sizeof after, &after);
    ck_assert_msg(CPU_EQUAL(&before, &after), "the move narrowed the thread's allowed cores");
    /* Moved once: within the rate limit it steps aside again but does not move (what it
     * decided, not where the kernel runs the thread, which a busy machine may change). */
    double moved_at = f.slices[0].next_move;
    ck_assert(moved_at > 0);
    *f.notes[0] = (uint32_t)(now + 1) | (1u << 31);
    ck_assert(tutti__colo_shared(&f.c, 0));
    ck_assert_msg(f.slices[0].next_move == moved_at, "moved again within the rate limit");

    /* Rank 0 with a movable rank 1 on its core: its peer's turn to move. */
    fake_init(&f, 0, true);
    here = sched_getcpu();
    *f.notes[1] = (uint32_t)(here + 1) | (1u << 31);
    ck_assert(tutti__colo_shared(&f.c, 1));
    ck_assert_msg(f.slices[0].next_move == 0, "rank 0 moved when its peer could");
    /* ... but when rank 1 cannot move (bound), rank 0 does. */
    fake_init(&f, 0, true);
    *f.notes[1] = (uint32_t)(here + 1);
    ck_assert(tutti__colo_shared(&f.c, 1));
    ck_assert_int_ne(sched_getcpu(), here);

    /* A peer elsewhere: nothing to do. */
    fake_init(&f, 1, true);
    here = sched_getcpu();
    *f.notes[0] = (uint32_t)((here == a ? b : a) + 1);
    ck_assert(!tutti__colo_shared(&f.c, 0));
    ck_assert(f.slices[0].next_move == 0);
    /* An unknown peer (word 0), or a peer that is this rank, is never shared. */
    *f.notes[0] = 0;
    ck_assert(!tutti__colo_shared(&f.c, 0));
    ck_assert(!tutti__colo_shared(&f.c, 1));

    /* may_move false (TUTTI_CALLER_AFFINITY=pin or none): step aside, never move. */
    fake_init(&f, 1, false);
    here = sched_getcpu();
    *f.notes[0] = (uint32_t)(here + 1) | (1u << 31);
    ck_assert(tutti__colo_shared(&f.c, 0));
    ck_assert_msg(f.slices[0].next_move == 0, "a thread that may not move moved");
    ck_assert_msg((*f.notes[1] & (1u << 31)) == 0, "a thread that may not move says it may");

    /* A thread pinned to one core never moves, and says so. */
    pin_to(a);
    fake_init(&f, 1, true);
    *f.notes[0] = (uint32_t)(a + 1) | (1u << 31);
    ck_assert(tutti__colo_shared(&f.c, 0));
    ck_assert_int_eq(sched_getcpu(), a);
    ck_assert_uint_eq(*f.notes[1], (uint32_t)a + 1);
    sched_setaffinity(0, sizeof before, &before);
    ck_assert(tutti__thread_movable(true));
}
END_TEST

/* A thread asleep on rank 0's doorbell wakes when rank 0 rings it (the sleep's own timeout is
 * far beyond the test's: a lost wake-up fails the test by its timeout); a ring with nobody
 * asleep does nothing; a sleeper whose wait is already over does not sleep. */
typedef struct sleeper {
    fake_t *f;
    volatile int flag, woke, checked;
} sleeper_t;

static bool flag_set(const void *p) { return __atomic_load_n(&((const sleeper_t *)p)->flag, __ATOMIC_ACQUIRE); }

/* flag_set that notes when it found the flag clear: the sleeper has then counted itself in and
 * will wait on the bell it read, so a ring after this is heard (a ring after the mere count-in
 * could meet a sleeper that then found the flag set, skipped its wait and counted out: nobody
 * to ring, and the test's count of rings came up short) */
static bool flag_set_noting(const void *p)
{
    sleeper_t *s = (sleeper_t *)p;
    bool set = flag_set(s);
    if (!set)
        __atomic_store_n(&s->checked, 1, __ATOMIC_RELEASE);
    return set;
}

static void *sleep_on_rank0(void *p)
{
    sleeper_t *s = p;
    while (!flag_set(s))
        tutti__colo_sleep(&s->f->c, 0, flag_set_noting, s, 1000.0);
    __atomic_store_n(&s->woke, 1, __ATOMIC_RELEASE);
    return NULL;
}

START_TEST(test_doorbell)
{
    fake_t waiter, ringer;
    fake_init(&waiter, 1, false);
    fake_init(&ringer, 0, false);
    /* one window seen by both "ranks": the ringer's notes are the waiter's */
    ringer.net.links.wins = waiter.net.links.wins;
    ringer.net.sleep_waits = waiter.net.sleep_waits = true;
    sleeper_t s = {.f = &waiter};
    /* Already over: returns at once whatever the timeout. */
    s.flag = 1;
    tutti__colo_sleep(&waiter.c, 0, flag_set, &s, 1000.0);
    ck_assert_uint_eq(waiter.notes[0][1], 0); /* it counted itself out again */
    s.flag = 0;
    tutti__colo_ring(&ringer.c); /* nobody asleep: nothing rung */
    ck_assert_uint_eq(waiter.notes[0][2], 0);
    pthread_t t;
    ck_assert(pthread_create(&t, NULL, sleep_on_rank0, &s) == 0);
    while (__atomic_load_n(&s.checked, __ATOMIC_ACQUIRE) == 0)
        sched_yield(); /* until it sleeps (or is about to) */
    __atomic_store_n(&s.flag, 1, __ATOMIC_RELEASE);
    tutti__colo_ring(&ringer.c);
    pthread_join(t, NULL);
    ck_assert(s.woke);
    ck_assert_uint_ge(waiter.notes[0][2], 1);
    ck_assert_uint_eq(waiter.notes[0][1], 0);
    /* Ranks of one scheduling group: only the naps beside a busy thread (time.c) sleep on the
     * doorbell, and the ring looks at the sleepers with a plain load; it wakes them all the
     * same. With the naps off there is nobody to ring for. */
    ringer.net.sleep_waits = waiter.net.sleep_waits = false;
    uint32_t rung = waiter.notes[0][2];
    s.flag = 0;
    s.woke = 0;
    s.checked = 0;
    ck_assert(pthread_create(&t, NULL, sleep_on_rank0, &s) == 0);
    while (__atomic_load_n(&s.checked, __ATOMIC_ACQUIRE) == 0)
        sched_yield();
    __atomic_store_n(&s.flag, 1, __ATOMIC_RELEASE);
    tutti__colo_ring(&ringer.c);
    pthread_join(t, NULL);
    ck_assert(s.woke);
    ck_assert_uint_eq(waiter.notes[0][2], rung + 1);
    tutti__busy_core_naps = false;
    waiter.notes[0][1] = 1; /* as if one slept: with naps off and one group, no ring */
    tutti__colo_ring(&ringer.c);
    tutti__busy_core_naps = true;
    waiter.notes[0][1] = 0;
    ck_assert_uint_eq(waiter.notes[0][2], rung + 1);
}
END_TEST

/* ---- creation on 2 ranks --------------------------------------------------------------------- */

static bool same_set(const cpu_set_t *x, const cpu_set_t *y) { return CPU_EQUAL(x, y); }

static void *report_affinity(void *p)
{
    sched_getaffinity(0, sizeof(cpu_set_t), p);
    return NULL;
}

/* create makes a communicator from the environment and reports the cores the calling thread
 * may use after it (*after) and those a thread made right after inherits (*child); 0 or a
 * failure. */
static int create(tutti_comm_t **comm, cpu_set_t *after, cpu_set_t *child)
{
    *comm = NULL;
    if (tutti_comm_init_env(NULL, comm) != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    sched_getaffinity(0, sizeof *after, after);
    pthread_t t;
    pthread_create(&t, NULL, report_affinity, child);
    pthread_join(t, NULL);
    return 0;
}

/* what TUTTI_CALLER_AFFINITY=auto does: pin where the node is oversubscribed and its ranks
 * run in different scheduling groups, move elsewhere */
static const char *auto_mode(const tutti_comm_t *comm)
{
    return comm->threads.node_oversubscribed && !comm->nodes.one_sched_group ? "pin" : "move";
}

/* arg: "auto", "move", "pin" or "none" (TUTTI_CALLER_AFFINITY, set by the harness) */
static int caller_rank(int rank, int size, void *arg)
{
    const char *mode = arg;
    cpu_set_t before, after, child;
    sched_getaffinity(0, sizeof before, &before);
    tutti_comm_t *comm;
    if (create(&comm, &after, &child) != 0)
        return 1;
    int rc = 0;
    if (strcmp(mode, "auto") == 0)
        mode = auto_mode(comm);
    int core = comm->threads.caller;
    int cores[2] = {-1, -1};
    tutti_allgather(&core, cores, 1, TUTTI_INT32, comm, NULL);
    if (CPU_COUNT(&before) >= 2 && cores[0] == cores[1])
        rc = th_fail("both ranks' calling threads were given core %d", cores[0]);
    if (comm->threads.workers[0] == cores[1 - rank] && cores[0] != cores[1])
        rc = th_fail("worker on core %d, the other rank's caller's", comm->threads.workers[0]);
    if (comm->net.oversubscribed && CPU_COUNT(&before) >= size)
        rc = th_fail("2 ranks on %d cores called oversubscribed", CPU_COUNT(&before));
    if (strcmp(mode, "pin") == 0 && CPU_COUNT(&before) >= 2) {
        if (CPU_COUNT(&after) != 1 || !CPU_ISSET(core, &after))
            rc = th_fail("pin: the calling thread may run on %d cores, want core %d only",
                         CPU_COUNT(&after), core);
        if (!same_set(&child, &after))
            rc = th_fail("pin: a thread made afterwards did not inherit the pinning");
        if (comm->net.may_move)
            rc = th_fail("pin: waits may move the thread");
    } else {
        if (!same_set(&before, &after) || !same_set(&before, &child))
            rc = th_fail("%s: creation changed the cores the thread (or a later one) may use",
                         mode);
        if (comm->net.may_move != (strcmp(mode, "move") == 0))
            rc = th_fail("%s: may_move is %d", mode, comm->net.may_move);
    }
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_caller_modes)
{
    static const char *const modes[] = {"move", "pin", "none", "auto"};
    for (int i = 0; i < 4; i++) {
        char env[64];
        snprintf(env, sizeof env, "TUTTI_CALLER_AFFINITY=%s", modes[i]);
        th_opts_t o = TH_OPTS_INIT;
        o.transport = "shm";
        o.env[0] = env;
        ck_assert_msg(th_run_opts(2, &o, caller_rank, (void *)modes[i]) == 0, "mode %s",
                      modes[i]);
    }
}
END_TEST

static int bad_mode_rank(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    (void)arg;
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_ERR_INVALID_ARG || strstr(tutti_last_error(), "TUTTI_CALLER_AFFINITY") == NULL)
        return th_fail("TUTTI_CALLER_AFFINITY=sideways: got %s: %s", tutti_strerror(st),
                       tutti_last_error());
    return 0;
}

START_TEST(test_caller_bad)
{
    th_opts_t o = TH_OPTS_INIT;
    o.env[0] = "TUTTI_CALLER_AFFINITY=sideways";
    ck_assert(th_run_opts(2, &o, bad_mode_rank, NULL) == 0);
}
END_TEST

/* Each rank binds itself to a core of its own before it starts, as mpirun -bind-to core and
 * Open MPI do: not oversubscribed, the worker on its own rank's core, the caller left alone. */
static int bound_rank(int rank, int size, void *arg)
{
    (void)size;
    const int *cores = arg;
    pin_to(cores[rank]);
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    int rc = 0;
    if (comm->net.oversubscribed)
        rc = th_fail("ranks bound to cores %d and %d were called oversubscribed", cores[0],
                     cores[1]);
    if (comm->threads.caller != cores[rank] || tutti_comm_worker_cpu(comm, 0) != cores[rank])
        rc = th_fail("caller on %d, worker on %d; want both on core %d", comm->threads.caller,
                     tutti_comm_worker_cpu(comm, 0), cores[rank]);
    /* and the collectives work */
    int x = rank + 1, sum = 0;
    if (tutti_allreduce(&x, &sum, 1, TUTTI_INT32, TUTTI_SUM, comm, NULL) != TUTTI_OK || sum != 3)
        rc = th_fail("allreduce gave %d", sum);
    tutti_comm_destroy(comm);
    return rc;
}

static int bound_shared_rank(int rank, int size, void *arg)
{
    (void)size;
    const int *cores = arg;
    pin_to(cores[0]);
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    int rc = 0;
    if (!comm->net.oversubscribed)
        rc = th_fail("two ranks bound to core %d were not called oversubscribed", cores[0]);
    float x = (float)rank, y = 0;
    for (int i = 0; i < 200 && rc == 0; i++)
        if (tutti_allreduce(&x, &y, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL) != TUTTI_OK ||
            y != 1.0f)
            rc = th_fail("allreduce %d gave %g", i, (double)y);
    tutti_comm_destroy(comm);
    return rc;
}

/* Ranks each in a session of its own (as MPICH's Hydra starts them), all on one core: with
 * autogroup on, sched_yield cannot hand the core from one to another, so waits sleep on
 * doorbells; every collective and algorithm (flagged lines, barriers, transport messages)
 * must still give exact results. */
static int autogroup_on(void)
{
    FILE *f = fopen("/proc/sys/kernel/sched_autogroup_enabled", "r");
    int on = 0;
    if (f != NULL) {
        if (fscanf(f, "%d", &on) != 1)
            on = 0;
        fclose(f);
    }
    return on;
}

static int session_rank(int rank, int size, void *arg)
{
    const int *core = arg;
    if (setsid() < 0)
        return th_fail("setsid failed");
    pin_to(*core);
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    int rc = 0;
    if (comm->net.sleep_waits != (autogroup_on() == 1))
        rc = th_fail("sleep_waits %d with autogroup %d", comm->net.sleep_waits, autogroup_on());
    if (!comm->net.oversubscribed)
        rc = th_fail("%d ranks on one core not oversubscribed", size);
    static const char *const algos[] = {"direct", "ring", "tree"};
    for (int a = 0; a < 3 && rc == 0; a++) {
        if (tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLREDUCE, algos[a]) != TUTTI_OK)
            return th_fail("set %s: %s", algos[a], tutti_comm_last_error(comm));
        for (size_t n = 1; n <= (1u << 18) && rc == 0; n *= 64) {
            int32_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
            for (size_t i = 0; i < n; i++)
                x[i] = (int32_t)(i % 1000) * (rank + 1);
            for (int it = 0; it < 20 && rc == 0; it++) {
                if (tutti_allreduce(x, y, n, TUTTI_INT32, TUTTI_SUM, comm, NULL) != TUTTI_OK)
                    rc = th_fail("allreduce %s: %s", algos[a], tutti_comm_last_error(comm));
                for (size_t i = 0; i < n && rc == 0; i++)
                    if (y[i] != (int32_t)(i % 1000) * size * (size + 1) / 2)
                        rc = th_fail("allreduce %s of %zu: [%zu] = %d", algos[a], n, i, y[i]);
            }
            free(x);
            free(y);
        }
    }
    int32_t mine[3] = {rank, rank * 10, rank * 100}, all[3 * 8];
    if (rc == 0 && (tutti_allgather(mine, all, 3, TUTTI_INT32, comm, NULL) != TUTTI_OK ||
                    tutti_barrier(comm, NULL) != TUTTI_OK))
        rc = th_fail("allgather or barrier: %s", tutti_comm_last_error(comm));
    for (int r = 0; r < size && rc == 0; r++)
        if (all[3 * r] != r || all[3 * r + 2] != r * 100)
            rc = th_fail("allgather: rank %d's block is %d %d", r, all[3 * r], all[3 * r + 2]);
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_own_sessions)
{
    int cores[2];
    two_cores(&cores[0], &cores[1]);
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 150;
    ck_assert(th_run_opts(3, &o, session_rank, &cores[0]) == 0);
}
END_TEST

/* auto_rank: 3 ranks allowed the same 2 cores (as a cpuset would), each in a session of its
 * own when arg[2] is set (as MPICH's Hydra starts them): the node is oversubscribed, and
 * TUTTI_CALLER_AFFINITY's default pins the calling thread exactly where the ranks' scheduling
 * groups differ (autogroup on and own sessions), and only moves it elsewhere. */
static int auto_rank(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    const int *a = arg;
    if (a[2] && setsid() < 0)
        return th_fail("setsid failed");
    cpu_set_t two, after, child;
    CPU_ZERO(&two);
    CPU_SET(a[0], &two);
    CPU_SET(a[1], &two);
    if (sched_setaffinity(0, sizeof two, &two) != 0)
        return th_fail("sched_setaffinity to cores %d,%d failed", a[0], a[1]);
    tutti_comm_t *comm;
    if (create(&comm, &after, &child) != 0)
        return 1;
    int rc = 0;
    const bool groups_differ = a[2] && autogroup_on() == 1;
    if (!comm->threads.node_oversubscribed)
        rc = th_fail("3 ranks on 2 cores: node not oversubscribed");
    if (comm->nodes.one_sched_group == groups_differ)
        rc = th_fail("one_sched_group %d, own sessions %d, autogroup %d",
                     comm->nodes.one_sched_group, a[2], autogroup_on());
    if (groups_differ) {
        if (CPU_COUNT(&after) != 1 || !CPU_ISSET(comm->threads.caller, &after))
            rc = th_fail("auto, own groups: the calling thread may run on %d cores, want "
                         "core %d only",
                         CPU_COUNT(&after), comm->threads.caller);
        if (!same_set(&child, &after))
            rc = th_fail("auto, own groups: a later thread did not inherit the pinning");
        if (comm->net.may_move)
            rc = th_fail("auto, own groups: waits may move the pinned thread");
    } else {
        if (!same_set(&after, &two) || !same_set(&child, &two))
            rc = th_fail("auto, one group: creation changed the cores the thread (or a later "
                         "one) may use");
        if (!comm->net.may_move)
            rc = th_fail("auto, one group: may_move is 0");
    }
    /* and the job still runs: every rank's sum, exact */
    int32_t x = rank + 1, y = 0;
    if (rc == 0 && (tutti_allreduce(&x, &y, 1, TUTTI_INT32, TUTTI_SUM, comm, NULL) != TUTTI_OK ||
                    y != size * (size + 1) / 2))
        rc = th_fail("allreduce: %d (%s)", y, tutti_comm_last_error(comm));
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_auto_pins)
{
    int a[3];
    if (!two_cores(&a[0], &a[1])) {
        fprintf(stderr, "check_placement: one core only, auto_pins not run\n");
        return;
    }
    for (a[2] = 0; a[2] <= 1; a[2]++) {
        th_opts_t o = TH_OPTS_INIT;
        o.transport = "shm";
        o.timeout_s = 120;
        ck_assert_msg(th_run_opts(3, &o, auto_rank, a) == 0, "own sessions %d", a[2]);
    }
}
END_TEST

START_TEST(test_bound_ranks)
{
    int cores[2];
    if (!two_cores(&cores[0], &cores[1])) {
        fprintf(stderr, "check_placement: one core only, bound_ranks not run\n");
        return;
    }
    ck_assert(th_run(2, "shm", 60, bound_rank, cores) == 0);
    ck_assert(th_run(2, "shm", 60, bound_shared_rank, cores) == 0);
}
END_TEST

/* CCL_WORKER_WAIT differs between the two ranks: a rank whose workers spin counts its node
 * oversubscribed on two cores, the other not; both must still choose every algorithm alike
 * (the node's oversubscription is agreed at creation), or every 16 KiB - 16 MiB allreduce fails
 * with TUTTI_ERR_MISMATCH (one rank on the ring, the other on the window). */
static int worker_wait_rank(int rank, int size, void *arg)
{
    (void)arg;
    setenv("CCL_WORKER_WAIT", rank == 0 ? "0" : "1", 1);
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    int rc = 0;
    for (size_t n = 1; n <= ((size_t)1 << 22) && rc == 0; n *= 4) {
        int32_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        for (size_t i = 0; i < n; i++)
            x[i] = (int32_t)(i % 977) * (rank + 1);
        tutti_status_t st = tutti_allreduce(x, y, n, TUTTI_INT32, TUTTI_SUM, comm, NULL);
        if (st != TUTTI_OK)
            rc = th_fail("allreduce of %zu (%s here): %s: %s", n,
                         tutti_comm_algorithm(comm, TUTTI_COLL_ALLREDUCE, n * 4),
                         tutti_strerror(st), tutti_comm_last_error(comm));
        for (size_t i = 0; i < n && rc == 0; i++)
            if (y[i] != (int32_t)(i % 977) * size * (size + 1) / 2)
                rc = th_fail("allreduce of %zu: [%zu] = %d", n, i, y[i]);
        free(x);
        free(y);
    }
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_worker_wait_per_rank)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 90;
    ck_assert(th_run_opts(2, &o, worker_wait_rank, NULL) == 0);
}
END_TEST

/* ---- a wait bound to a core that a busy thread shares (common/time.c) -------------------- */

typedef struct hog {
    int core;
    int stop;
} hog_t;

static void *hog_run(void *p)
{
    hog_t *h = p;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(h->core, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
    double end = tutti__now() + 30.0; /* a bound, should the test fail before it stops us */
    while (!__atomic_load_n(&h->stop, __ATOMIC_RELAXED) && tutti__now() < end)
        tutti__cpu_relax();
    return NULL;
}

static long voluntary_switches(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_nvcsw;
}

/* A nap's doorbell stand-in: counts the naps handed to it and keeps the longest timeout. */
typedef struct nap_count {
    int naps;
    double longest;
} nap_count_t;

static void count_nap(void *p, double timeout_s)
{
    nap_count_t *n = p;
    n->naps++;
    if (timeout_s > n->longest)
        n->longest = timeout_s;
    tutti__sleep_us((unsigned)(timeout_s * 1e6));
}

/* wait_40ms makes the first 40 ms of a wait's pauses; the voluntary context switches in them.
 * With n, the naps go through count_nap. */
static long wait_40ms(int *pauses, nap_count_t *n)
{
    tutti__backoff_t b;
    tutti__backoff_init(&b, false);
    long vol0 = voluntary_switches();
    *pauses = 0;
    while (tutti__backoff_waited(&b) < 0.04 || b.iter <= TUTTI__SPIN_ITERS) {
        tutti__backoff_pause_on(&b, n != NULL ? count_nap : NULL, n);
        ++*pauses;
    }
    *pauses -= (int)TUTTI__SPIN_ITERS;
    return voluntary_switches() - vol0;
}

/* A waiter bound to the core of a busy thread of its own process (one scheduling group) must
 * sleep rather than yield: each yield hands the busy thread the core until the next tick, and
 * each chunk of a large message waited that long. A yield leaves the thread's count of
 * voluntary context switches alone, a sleep adds one: in the first 40 ms of a wait the old
 * schedule made about 10 pauses and slept in none of them (after 2 ms it sleeps in one pause
 * of sixteen). */
START_TEST(test_busy_core_wait)
{
    cpu_set_t before;
    sched_getaffinity(0, sizeof before, &before);
    hog_t h = {.core = sched_getcpu()};
    pin_to(h.core);
    pthread_t t;
    ck_assert(pthread_create(&t, NULL, hog_run, &h) == 0);
    tutti__sleep_us(20000); /* the hog is running on the core */
    int pauses;
    long slept = wait_40ms(&pauses, NULL);
    /* The naps sleep on a doorbell where the wait names one (the peer's, in a collective; the
     * rings', in point-to-point), never longer than a plain nap would. */
    nap_count_t nc = {0, 0.0};
    int pauses_bell;
    long slept_bell = wait_40ms(&pauses_bell, &nc);
    /* TUTTI_BUSY_CORE_NAP=0: the same wait only yields, as before. */
    tutti__busy_core_naps = false;
    int pauses_off;
    nap_count_t nc_off = {0, 0.0};
    long slept_off = wait_40ms(&pauses_off, &nc_off);
    tutti__busy_core_naps = true;
    __atomic_store_n(&h.stop, 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    sched_setaffinity(0, sizeof before, &before);
    fprintf(stderr, "check_placement: bound beside a busy thread, 40 ms of a wait: %d pauses, "
                    "%ld slept\n", pauses, slept);
    /* Ratios, not counts: on a loaded machine each nap may wait for the busy thread's slice. */
    ck_assert_msg(slept >= 3 && slept * 3 >= pauses,
                  "a wait bound beside a busy thread slept in %ld of its %d pauses in 40 ms: it "
                  "yields its core away a slice at a time",
                  slept, pauses);
    fprintf(stderr, "check_placement: the same with TUTTI_BUSY_CORE_NAP=0: %d pauses, %ld slept\n",
            pauses_off, slept_off);
    fprintf(stderr, "check_placement: with a doorbell: %d pauses, %ld slept, %d naps on it "
                    "(longest %.0f us)\n",
            pauses_bell, slept_bell, nc.naps, nc.longest * 1e6);
    ck_assert_msg(nc.naps >= 3 && nc.naps * 3 >= pauses_bell && nc.longest <= 400e-6,
                  "a wait beside a busy thread made %d of its %d pauses on its doorbell, the "
                  "longest %.0f us",
                  nc.naps, pauses_bell, nc.longest * 1e6);
    ck_assert_msg(nc_off.naps == 0, "with naps off, a wait still napped on its doorbell");
    ck_assert_msg(slept_off <= pauses_off / 8 + 1,
                  "with naps off, a wait beside a busy thread still slept in %ld of its %d pauses",
                  slept_off, pauses_off);
}
END_TEST

/* ---- the rings' doorbell (transport/shm.c) ------------------------------------------------- */

/* Rank 0 naps on its rings' doorbell: with nothing moving, the nap runs out unrung; then rank 1
 * sends, and the envelope it pushes rings rank 0 awake long before the nap's 60 s would end
 * (a lost ring fails the test by the harness's deadline). Nobody is counted asleep after. */
static int ring_bell_rank(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    tutti__transport_t *shm = comm->net.links.shm;
    volatile long *asleep = &th_shared()->slots[0];
    int rc = 0;
    int32_t v = 0xbe11;
    if (shm == NULL)
        rc = th_fail("no shm transport between the two ranks");
    else if (rank == 0) {
        uint32_t bell = tutti__shm_nap_begin(shm);
        if (tutti__shm_nap_end(shm, bell, 0.02))
            rc = th_fail("the doorbell rang with nothing moved");
        bell = tutti__shm_nap_begin(shm);
        __atomic_store_n(asleep, 1, __ATOMIC_RELEASE);
        if (!tutti__shm_nap_end(shm, bell, 60.0))
            rc = th_fail("rank 1's send did not ring rank 0's doorbell");
        int32_t got = 0;
        tutti_status_t st = tutti_recv(&got, 1, TUTTI_INT32, 1, 7, comm, NULL);
        if (st != TUTTI_OK || got != v)
            rc = th_fail("recv: %s, got %#x", tutti_strerror(st), (unsigned)got);
    } else {
        double end = tutti__now() + 30;
        while (!__atomic_load_n(asleep, __ATOMIC_ACQUIRE) && tutti__now() < end)
            tutti__sleep_us(1000);
        tutti__sleep_us(20000); /* rank 0 is in its nap by now, or about to be */
        tutti_status_t st = tutti_send(&v, 1, TUTTI_INT32, 0, 7, comm, NULL);
        if (st != TUTTI_OK)
            rc = th_fail("send: %s: %s", tutti_strerror(st), tutti_last_error());
    }
    tutti_barrier(comm, NULL);
    if (shm != NULL) {
        uint32_t bell = tutti__shm_nap_begin(shm);
        tutti__shm_nap_end(shm, bell, 0);
    }
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_ring_bell)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 90;
    ck_assert(th_run_opts(2, &o, ring_bell_rank, NULL) == 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("placement");
    TCase *tp = tcase_create("plan");
    tcase_add_test(tp, test_unbound_two_cores);
    tcase_add_test(tp, test_bound_per_core);
    tcase_add_test(tp, test_bound_together);
    tcase_add_test(tp, test_four_on_two);
    tcase_add_test(tp, test_spare_cores);
    tcase_add_test(tp, test_spinning_workers);
    tcase_add_test(tp, test_unknown_sets);
    tcase_add_test(tp, test_random_layouts);
    suite_add_tcase(s, tp);
    TCase *tw = tcase_create("wait");
    tcase_add_test(tw, test_colocated_wait);
    tcase_add_test(tw, test_doorbell);
    tcase_add_test(tw, test_busy_core_wait);
    tcase_add_test(tw, test_ring_bell);
    suite_add_tcase(s, tw);
    TCase *tc = tcase_create("create");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_caller_modes);
    tcase_add_test(tc, test_caller_bad);
    tcase_add_test(tc, test_bound_ranks);
    tcase_add_test(tc, test_own_sessions);
    tcase_add_test(tc, test_auto_pins);
    tcase_add_test(tc, test_worker_wait_per_rank);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
