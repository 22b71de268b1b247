/* check_workers.c: the worker threads and the asynchronous ABI: pinning per
 * CCL_WORKER_AFFINITY (read back from /proc), posting order, overlap of the caller's work with a
 * running collective, completion callbacks, abort, and several threads posting at once. */
#include <check.h>
#include "check_main.h"
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tutti.h"

static tutti_comm_t *init_or_fail(void)
{
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_OK) {
        th_fail("init: %s: %s", tutti_strerror(st), tutti_last_error());
        return NULL;
    }
    return comm;
}

/* worker_affinity reads the allowed cores of this process's thread named name from /proc:
 * returns the single core it is pinned to, -2 if it may run on several, -1 if not found. */
static int worker_affinity(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return -1;
    struct dirent *e;
    int found = -1;
    while ((e = readdir(d)) != NULL && found == -1) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fgets(comm, sizeof comm, f) == NULL)
            comm[0] = '\0';
        fclose(f);
        comm[strcspn(comm, "\n")] = '\0';
        if (strcmp(comm, name) != 0)
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        f = fopen(path, "r");
        char line[256];
        while (f != NULL && fgets(line, sizeof line, f) != NULL)
            if (strncmp(line, "Cpus_allowed_list:", 18) == 0) {
                char *v = line + 18;
                while (*v == ' ' || *v == '\t')
                    v++;
                v[strcspn(v, "\n")] = '\0';
                found = strpbrk(v, ",-") != NULL ? -2 : atoi(v);
            }
        if (f != NULL)
            fclose(f);
    }
    closedir(d);
    return found;
}

static int allowed_count(void)
{
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    return CPU_COUNT(&set);
}

/* ---- affinity ---- */

static int affinity_auto(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    tutti_comm_t *comm = init_or_fail();
    if (comm == NULL)
        return 1;
    int rc = 0;
    if (tutti_comm_worker_count(comm) != 1)
        rc = th_fail("worker count %d, want 1 (default)", tutti_comm_worker_count(comm));
    int cpu = tutti_comm_worker_cpu(comm, 0);
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    if (cpu < 0 || !CPU_ISSET(cpu, &set))
        rc = th_fail("auto affinity gave core %d, not an allowed one", cpu);
    int seen = worker_affinity("tutti-w0");
    if (seen != cpu)
        rc = th_fail("worker thread tutti-w0 runs on %d per /proc, the library says %d", seen, cpu);
    /* distinct cores for the two local ranks' workers, where there are enough cores */
    int all[2] = {-1, -1};
    int mine = cpu;
    tutti_allgather(&mine, all, 1, TUTTI_INT32, comm, NULL);
    if (allowed_count() >= 2 && all[0] == all[1])
        rc = th_fail("both ranks' workers are on core %d", all[0]);
    (void)rank;
    tutti_comm_destroy(comm);
    return rc;
}

static int affinity_list(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    tutti_comm_t *comm = init_or_fail();
    if (comm == NULL)
        return 1;
    int want = rank == 0 ? 1 : 0; /* CCL_WORKER_AFFINITY=1,0 */
    int rc = 0;
    if (tutti_comm_worker_cpu(comm, 0) != want)
        rc = th_fail("worker 0 on core %d, want %d", tutti_comm_worker_cpu(comm, 0), want);
    if (worker_affinity("tutti-w0") != want)
        rc = th_fail("/proc says tutti-w0 runs on %d, want %d", worker_affinity("tutti-w0"), want);
    tutti_comm_destroy(comm);
    return rc;
}

static int affinity_bad(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    const char *needle = arg;
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_ERR_INVALID_ARG)
        return th_fail("bad CCL_WORKER_AFFINITY: got %s, want TUTTI_ERR_INVALID_ARG",
                       tutti_strerror(st));
    if (strstr(tutti_last_error(), needle) == NULL)
        return th_fail("message lacks \"%s\": %s", needle, tutti_last_error());
    return 0;
}

START_TEST(test_affinity)
{
    ck_assert(th_run(2, "shm", 60, affinity_auto, NULL) == 0);
    if (allowed_count() >= 2) {
        th_opts_t o = TH_OPTS_INIT;
        o.env[0] = "CCL_WORKER_AFFINITY=1,0";
        ck_assert(th_run_opts(2, &o, affinity_list, NULL) == 0);
    }
    th_opts_t o = TH_OPTS_INIT;
    o.rank_timeout_s = 5;
    o.env[0] = "CCL_WORKER_AFFINITY=0,0"; /* 1 rank x 1 worker needs 1 entry */
    ck_assert(th_run_opts(1, &o, affinity_bad, "need 1") == 0);
    o.env[0] = "CCL_WORKER_AFFINITY=0";
    o.env[1] = "CCL_WORKER_COUNT=2"; /* 1 rank x 2 workers need 2 */
    ck_assert(th_run_opts(1, &o, affinity_bad, "need 2") == 0);
    o.env[0] = "CCL_WORKER_AFFINITY=1000,1001";
    ck_assert(th_run_opts(1, &o, affinity_bad, "may only run on cores") == 0);
    o.env[0] = "CCL_WORKER_AFFINITY=1-x";
    ck_assert(th_run_opts(1, &o, affinity_bad, "not auto") == 0);
}
END_TEST

/* ---- asynchronous execution ---- */

enum { BIG = 2 << 20, NOPS = 16 };

typedef struct cb_rec {
    int calls;
    int on_worker, in_setter;
    tutti_status_t status;
} cb_rec_t;

/* set around a tutti_work_on_complete: a callback set on a handle already done runs at once,
 * in the setter's thread (a rank descheduled between its post and the set meets that) */
static __thread int setting;

static void on_done(tutti_work_t *w, void *arg)
{
    cb_rec_t *r = arg;
    char name[32] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    r->on_worker = strncmp(name, "tutti-w", 7) == 0;
    r->in_setter = setting;
    r->status = tutti_work_status(w);
    __atomic_add_fetch(&r->calls, 1, __ATOMIC_RELEASE); /* publishes the two fields above */
}

/* waits_in_callback is a callback that waits for a later operation of its own communicator (the
 * header forbids it): it hung for good, past every deadline; now the wait is refused. */
typedef struct later {
    tutti_comm_t *comm;
    tutti_work_t *b;
    tutti_status_t st, blocking_st;
    char blocking_msg[256];
    int calls, on_worker;
} later_t;

static void waits_in_callback(tutti_work_t *w, void *arg)
{
    (void)w;
    later_t *l = arg;
    char name[32] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    l->on_worker = strncmp(name, "tutti-w", 7) == 0;
    l->st = tutti_work_wait(l->b, -1);
    /* a blocking call is a wait too: refused before it is posted (it was posted, its wait
     * refused with no text, and the call ran later: the ranks' calls then differed), and
     * always, also where the communicator is idle by then (a callback set after both
     * operations ended runs in the caller's thread: the call ran there, on that rank alone,
     * and the next calls failed; seen in CI) */
    float one = 1, sum = 0;
    l->blocking_st = tutti_allreduce(&one, &sum, 1, TUTTI_FLOAT32, TUTTI_SUM, l->comm, NULL);
    snprintf(l->blocking_msg, sizeof l->blocking_msg, "%s", tutti_last_error());
    __atomic_add_fetch(&l->calls, 1, __ATOMIC_RELEASE);
}

static int async_rank(int rank, int size, void *arg)
{
    (void)arg;
    tutti_comm_t *comm = init_or_fail();
    if (comm == NULL)
        return 1;
    int rc = 0;
    /* Overlap: a large allreduce runs on the worker while the caller computes. */
    float *big = malloc(BIG * sizeof(float));
    for (size_t i = 0; i < BIG; i++)
        big[i] = (float)((rank + 1) * (int)(i % 7));
    tutti_work_t *w = NULL;
    uint64_t seq0 = tutti_comm_seq(comm);
    tutti_status_t st = tutti_allreduce(big, big, BIG, TUTTI_FLOAT32, TUTTI_SUM, comm, &w);
    if (st != TUTTI_OK || w == NULL)
        return th_fail("post: %s", tutti_strerror(st));
    cb_rec_t rec = {0};
    setting = 1;
    tutti_work_on_complete(w, on_done, &rec);
    setting = 0;
    if (tutti_work_on_complete(w, on_done, &rec) != TUTTI_ERR_INVALID_ARG)
        rc = th_fail("a second callback was accepted");
    double acc = 0; /* the caller's own work, meanwhile */
    for (int i = 1; i < 3000000; i++)
        acc += 1.0 / ((double)i * i);
    if (tutti_comm_seq(comm) != seq0 + 1)
        rc = th_fail("seq %llu after one post from %llu", (unsigned long long)tutti_comm_seq(comm),
                     (unsigned long long)seq0);
    st = tutti_work_wait(w, -1);
    if (st != TUTTI_OK)
        rc = th_fail("wait: %s: %s", tutti_strerror(st), tutti_work_error(w));
    float tri = (float)(size * (size + 1) / 2);
    for (size_t i = 0; i < BIG; i++)
        if (big[i] != tri * (float)(int)(i % 7)) {
            rc = th_fail("allreduce[%zu] = %g, want %g", i, big[i], tri * (float)(int)(i % 7));
            break;
        }
    if (acc < 1.6449 || acc > 1.645)
        rc = th_fail("the caller's computation is wrong: %f", acc);
    /* The callback runs right after the handle is marked done: on a worker that a busy
     * machine (TSan) may not schedule at once, so wait for it without a time to meet. */
    for (double t1 = th_now(); __atomic_load_n(&rec.calls, __ATOMIC_ACQUIRE) == 0 &&
                               th_now() - t1 < 20;)
        usleep(1000);
    if (rec.calls != 1 || !(rec.on_worker || rec.in_setter) || rec.status != TUTTI_OK)
        rc = th_fail("callback: %d call(s), on a worker: %d, in the setter: %d, status %d",
                     rec.calls, rec.on_worker, rec.in_setter, rec.status);
    tutti_work_free(w);

    /* A callback that waits for a later operation of the same communicator is refused; rank 1
     * comes late, so that the first operation is still queued when its callback is set. */
    if (rank == 1)
        usleep(300000);
    tutti_work_t *a = NULL;
    later_t l = {.comm = comm};
    st = tutti_allreduce(TUTTI_IN_PLACE, big, BIG, TUTTI_FLOAT32, TUTTI_SUM, comm, &a);
    if (st == TUTTI_OK)
        st = tutti_allreduce(TUTTI_IN_PLACE, big, BIG, TUTTI_FLOAT32, TUTTI_SUM, comm, &l.b);
    if (st != TUTTI_OK)
        return th_fail("post: %s", tutti_strerror(st));
    tutti_work_on_complete(a, waits_in_callback, &l);
    if ((st = tutti_work_wait(l.b, 30)) != TUTTI_OK || (st = tutti_work_wait(a, 30)) != TUTTI_OK)
        rc = th_fail("the two operations: %s", tutti_strerror(st));
    for (double t1 = th_now(); __atomic_load_n(&l.calls, __ATOMIC_ACQUIRE) == 0 &&
                               th_now() - t1 < 20;)
        usleep(1000);
    /* done already (the callback came after both, in this thread) is fine too: only a hang is
     * not; on the worker the later operation is still queued, and the wait is refused */
    if (l.calls != 1 || (l.st != TUTTI_ERR_INVALID_ARG && (l.st != TUTTI_OK || l.on_worker)))
        rc = th_fail("a wait in a callback: %d call(s), status %d, on a worker: %d", l.calls, l.st,
                     l.on_worker);
    if (l.blocking_st != TUTTI_ERR_INVALID_ARG || !strstr(l.blocking_msg, "callback"))
        rc = th_fail("a blocking call in a callback: %d: \"%s\"", l.blocking_st, l.blocking_msg);
    tutti_work_free(a);
    tutti_work_free(l.b);

    /* Order: many operations in flight at once, each on its own buffer, completed in order. */
    int32_t *bufs = malloc(NOPS * 1000 * sizeof(int32_t));
    tutti_work_t *ws[NOPS];
    for (int k = 0; k < NOPS; k++) {
        for (int i = 0; i < 1000; i++)
            bufs[k * 1000 + i] = k + rank + i;
        /* odd k: large enough to be queued; even k: small, may run inline */
        size_t n = k % 2 ? 1000 : 10;
        st = tutti_allreduce(TUTTI_IN_PLACE, bufs + k * 1000, n, TUTTI_INT32, TUTTI_MAX, comm,
                             &ws[k]);
        if (st != TUTTI_OK)
            return th_fail("post %d: %s", k, tutti_strerror(st));
    }
    for (int k = NOPS - 1; k >= 0; k--) {
        if ((st = tutti_work_wait(ws[k], 30)) != TUTTI_OK)
            rc = th_fail("op %d: %s", k, tutti_strerror(st));
        size_t n = k % 2 ? 1000 : 10;
        for (size_t i = 0; i < n; i++)
            if (bufs[k * 1000 + i] != k + size - 1 + (int)i) {
                rc = th_fail("op %d [%zu] = %d", k, i, bufs[k * 1000 + i]);
                break;
            }
        tutti_work_free(ws[k]);
    }
    /* Coalesced: three buffers of different sizes (one empty, one in place) in one operation. */
    {
        double a[5], b[3000], out_a[5];
        for (int i = 0; i < 5; i++)
            a[i] = rank + i;
        for (int i = 0; i < 3000; i++)
            b[i] = rank * i;
        const void *sends[3] = {a, NULL, TUTTI_IN_PLACE};
        void *recvs[3] = {out_a, NULL, b};
        size_t counts[3] = {5, 0, 3000};
        uint64_t s0 = tutti_comm_seq(comm);
        st = tutti_allreduce_coalesced(sends, recvs, counts, 3, TUTTI_FLOAT64, TUTTI_SUM, comm, &w);
        a[0] = -1000; /* the inputs were copied at the post */
        if (st != TUTTI_OK || (st = tutti_work_wait(w, 30)) != TUTTI_OK)
            rc = th_fail("coalesced: %s: %s", tutti_strerror(st), tutti_comm_last_error(comm));
        tutti_work_free(w);
        if (tutti_comm_seq(comm) != s0 + 1)
            rc = th_fail("coalesced took %llu sequence numbers",
                         (unsigned long long)(tutti_comm_seq(comm) - s0));
        double tri = size * (size - 1) / 2.0;
        for (int i = 0; i < 5; i++)
            if (out_a[i] != tri + size * i)
                rc = th_fail("coalesced a[%d] = %g", i, out_a[i]);
        for (int i = 0; i < 3000; i++)
            if (b[i] != tri * i) {
                rc = th_fail("coalesced b[%d] = %g, want %g", i, b[i], tri * i);
                break;
            }
        /* In place, buffers that share elements (views of one storage, as torch may pass): an
         * element has one input and gets one result, however many entries hold it. */
        for (int i = 0; i < 3000; i++)
            b[i] = rank + i;
        void *views[3] = {b, b + 1000, b + 500};
        size_t vcounts[3] = {2000, 1000, 100}; /* the second and third lie inside the first */
        st = tutti_allreduce_coalesced(NULL, views, vcounts, 3, TUTTI_FLOAT64, TUTTI_SUM, comm,
                                       NULL);
        if (st != TUTTI_OK)
            rc = th_fail("coalesced, in place over shared elements: %s: %s", tutti_strerror(st),
                         tutti_comm_last_error(comm));
        for (int i = 0; i < 3000 && st == TUTTI_OK; i++) {
            double want = i < 2000 ? tri + size * (double)i : rank + i;
            if (b[i] != want) {
                rc = th_fail("coalesced over shared elements: b[%d] = %g, want %g", i, b[i], want);
                break;
            }
        }
    }
    /* A callback set after completion runs at once, in this thread. */
    st = tutti_barrier(comm, &w);
    tutti_work_wait(w, -1);
    cb_rec_t late = {0};
    tutti_work_on_complete(w, on_done, &late);
    if (late.calls != 1 || late.on_worker)
        rc = th_fail("late callback: %d call(s), on a worker: %d", late.calls, late.on_worker);
    if (tutti_work_on_complete(w, on_done, &late) != TUTTI_ERR_INVALID_ARG || late.calls != 1)
        rc = th_fail("a second callback on a completed handle was accepted (%d calls)",
                     late.calls);
    tutti_work_free(w);
    free(bufs);
    free(big);
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_async)
{
    static const char *const tps[] = {"shm", "ofi"};
    for (int t = 0; t < 2; t++) {
        th_opts_t o = TH_OPTS_INIT;
        o.transport = tps[t];
        o.timeout_s = 120;
        o.env[0] = "TUTTI_INLINE_MAX=4096";
        ck_assert_msg(th_run_opts(2, &o, async_rank, NULL) == 0, "async over %s", tps[t]);
        o.env[1] = "CCL_WORKER_WAIT=0";
        ck_assert_msg(th_run_opts(3, &o, async_rank, NULL) == 0, "async (spinning workers) over %s",
                      tps[t]);
        /* three workers: the 8 MiB allreduce is cut into three slices on their own channels */
        o.env[1] = "CCL_WORKER_COUNT=3";
        ck_assert_msg(th_run_opts(3, &o, async_rank, NULL) == 0, "async (3 workers) over %s",
                      tps[t]);
    }
}
END_TEST

/* A callback set on a handle whose wait has returned runs at once, in the setter's thread, as
 * the header says: completion published the handle done before it claimed the callback, so a
 * setter that came between saw it done and then had its callback run later, on the worker. */
typedef struct sync_cb {
    int calls, on_setter;
} sync_cb_t;

static __thread int in_set;

static void sync_done(tutti_work_t *w, void *arg)
{
    (void)w;
    sync_cb_t *r = arg;
    r->on_setter = in_set;
    __atomic_add_fetch(&r->calls, 1, __ATOMIC_RELEASE);
}

static int late_callback_rank(int rank, int size, void *arg)
{
    (void)size, (void)arg;
    tutti_comm_t *comm = init_or_fail();
    if (comm == NULL)
        return 1;
    int rc = 0;
    for (int i = 0; i < 3000 && rc == 0; i++) {
        int32_t v = rank + i;
        tutti_work_t *w = NULL;
        tutti_status_t st = tutti_allreduce(TUTTI_IN_PLACE, &v, 1, TUTTI_INT32, TUTTI_MAX, comm, &w);
        if (st != TUTTI_OK || (st = tutti_work_wait(w, 30)) != TUTTI_OK)
            rc = th_fail("op %d: %s", i, tutti_strerror(st));
        sync_cb_t r = {0, 0};
        in_set = 1;
        tutti_work_on_complete(w, sync_done, &r);
        in_set = 0;
        if (__atomic_load_n(&r.calls, __ATOMIC_ACQUIRE) != 1 || !r.on_setter)
            rc = th_fail("op %d: a callback set after its wait returned: %d call(s) by then, in "
                         "the setter: %d",
                         i, r.calls, r.on_setter);
        tutti_work_free(w);
    }
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_late_callback)
{
    static const char *const tps[] = {"shm", "ofi"};
    th_opts_t o = TH_OPTS_INIT;
    o.transport = tps[_i];
    o.timeout_s = 120;
    o.env[0] = "CCL_WORKER_WAIT=0"; /* spinning workers: completion at once after the data */
    ck_assert_msg(th_run_opts(2, &o, late_callback_rank, NULL) == 0, "over %s: see stderr",
                  tps[_i]);
}
END_TEST

/* tutti_comm_set_algorithm from one thread, tutti_comm_last_error from another, while a third
 * posts and asks which algorithm applies ("any call may come from any thread"): the override was written with no lock while
 * posts read it under the executor's (a data race ThreadSanitizer names; a torn override could
 * pick no algorithm). One rank, so that the ranks' choices cannot differ. */
static void *set_algos(void *p)
{
    tutti_comm_t *comm = p;
    for (int i = 0; i < 2000; i++)
        if (tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLREDUCE,
                                     i % 2 ? "ring:0-1023;tree:1024-max" : "auto") != TUTTI_OK)
            return (void *)1;
    return NULL;
}

/* reads the communicator's last error while the poster makes new ones (it was returned as the
 * text itself, rewritten meanwhile under a lock the reader did not take) */
static void *read_errors(void *p)
{
    tutti_comm_t *comm = p;
    size_t n = 0;
    for (int i = 0; i < 2000; i++)
        n += strlen(tutti_comm_last_error(comm));
    return (void *)(n > 0 ? NULL : (void *)1);
}

static int set_algo_rank(int rank, int size, void *arg)
{
    (void)rank, (void)size, (void)arg;
    tutti_comm_t *comm = init_or_fail();
    if (comm == NULL)
        return 1;
    int32_t x = 0;
    tutti_allreduce(&x, &x, 1, (tutti_dtype_t)99, TUTTI_SUM, comm, NULL); /* an error to read */
    pthread_t t, r;
    pthread_create(&t, NULL, set_algos, comm);
    pthread_create(&r, NULL, read_errors, comm);
    int rc = 0;
    for (int i = 0; i < 2000 && rc == 0; i++) {
        int32_t v = i, out = -1;
        tutti_work_t *w = NULL;
        if (tutti_allreduce(&v, &out, 1, TUTTI_INT32, TUTTI_SUM, comm, i % 2 ? &w : NULL) !=
                TUTTI_OK ||
            (w != NULL && tutti_work_wait(w, 30) != TUTTI_OK) || out != i)
            rc = th_fail("allreduce %d beside tutti_comm_set_algorithm: %s (%d)", i,
                         tutti_comm_last_error(comm), out);
        tutti_work_free(w);
        if (tutti_comm_algorithm(comm, TUTTI_COLL_ALLREDUCE, (size_t)i) == NULL)
            rc = th_fail("tutti_comm_algorithm named no algorithm");
        if (tutti_allreduce(&x, &x, 1, (tutti_dtype_t)(99 + i % 2), TUTTI_SUM, comm, NULL) !=
            TUTTI_ERR_INVALID_ARG)
            rc = th_fail("an unknown dtype was taken");
    }
    void *trc = NULL, *rrc = NULL;
    pthread_join(t, &trc);
    pthread_join(r, &rrc);
    if (trc != NULL)
        rc = th_fail("tutti_comm_set_algorithm failed: %s", tutti_last_error());
    if (rrc != NULL)
        rc = th_fail("tutti_comm_last_error was empty throughout, after an error");
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_set_algorithm_threads)
{
    th_opts_t o = TH_OPTS_INIT;
    ck_assert(th_run_opts(1, &o, set_algo_rank, NULL) == 0);
}
END_TEST

/* ---- abort ---- */

static int abort_rank(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    tutti_comm_t *comm = init_or_fail();
    if (comm == NULL)
        return 1;
    int rc = 0;
    float x[4] = {1, 2, 3, 4};
    if (tutti_allreduce(x, x, 4, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL) != TUTTI_OK)
        rc = th_fail("first allreduce failed");
    if (rank == 0) {
        /* rank 0 posts an allreduce rank 1 never joins, then aborts: it must fail fast */
        tutti_work_t *w;
        tutti_allreduce(x, x, 4, TUTTI_FLOAT32, TUTTI_SUM, comm, &w);
        usleep(100000);
        double t0 = th_now();
        tutti_comm_abort(comm);
        tutti_status_t st = tutti_work_wait(w, 10);
        if (st != TUTTI_ERR_ABORTED)
            rc = th_fail("pending op after abort: %s", tutti_strerror(st));
        if (th_now() - t0 > 2)
            rc = th_fail("abort took %.1f s to end the pending op", th_now() - t0);
        tutti_work_free(w);
        st = tutti_allreduce(x, x, 4, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
        if (st != TUTTI_ERR_ABORTED)
            rc = th_fail("op after abort: %s", tutti_strerror(st));
    }
    /* rank 1 stays until rank 0 is done: its leaving would end rank 0's pending op by itself
     * (PEER_FAILED a second after its goodbye, where rank 0 was descheduled that long) */
    th_shared_t *sh = th_shared();
    if (rank == 0) {
        __atomic_store_n(&sh->slots[0], 1, __ATOMIC_RELEASE);
        if (th_await_slot(1, 60) != 0) /* and rank 0 stays until rank 1 has posted */
            rc = 1;
    } else if (th_await_slot(0, 60) != 0) {
        rc = 1;
        __atomic_store_n(&sh->slots[1], 1, __ATOMIC_RELEASE); /* rank 0 need not wait then */
    } else {
        /* Rank 1 now posts the call rank 0 aborted. Rank 0 had put all its data in the window
         * before it gave up, so this call found everything and returned OK, while rank 0's
         * returned ABORTED: the ranks disagreed on whether it happened. It must fail here too,
         * by what rank 0 left in the window, not by its destroy (it has not destroyed yet). */
        double t0 = th_now();
        tutti_status_t st = tutti_allreduce(x, x, 4, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
        if (st == TUTTI_OK)
            rc = th_fail("the call rank 0 aborted returned OK here: %g %g %g %g", x[0], x[1],
                         x[2], x[3]);
        else if (th_now() - t0 > 10)
            rc = th_fail("the call rank 0 aborted failed here only after %.1f s: %s",
                         th_now() - t0, tutti_comm_last_error(comm));
        fprintf(stderr, "[abort] rank 1, the call rank 0 aborted: %s after %.2f s: %s\n",
                tutti_strerror(st), th_now() - t0, tutti_comm_last_error(comm));
        __atomic_store_n(&sh->slots[1], 1, __ATOMIC_RELEASE);
    }
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_abort)
{
    th_opts_t o = TH_OPTS_INIT;
    o.rank_timeout_s = 30;
    o.env[0] = "TUTTI_INLINE_MAX=0";
    ck_assert(th_run_opts(2, &o, abort_rank, NULL) == 0);
}
END_TEST

/* ---- several threads posting on several communicators ---- */

typedef struct thread_arg {
    tutti_comm_t *comm;
    int rank, size, rc;
} thread_arg_t;

static void *poster(void *p)
{
    thread_arg_t *a = p;
    for (int it = 0; it < 200; it++) {
        int64_t v = a->rank + it, out = 0;
        if (tutti_allreduce(&v, &out, 1, TUTTI_INT64, TUTTI_SUM, a->comm, NULL) != TUTTI_OK ||
            out != (int64_t)a->size * it + a->size * (a->size - 1) / 2) {
            a->rc = 1;
            break;
        }
    }
    return NULL;
}

static int threads_rank(int rank, int size, void *arg)
{
    (void)arg;
    /* Two communicators, each driven by its own thread: they must not interfere. */
    tutti_comm_t *c1 = init_or_fail();
    if (c1 == NULL)
        return 1;
    setenv("MASTER_PORT", getenv("TH_PORT2"), 1);
    tutti_comm_t *c2 = init_or_fail();
    if (c2 == NULL)
        return 1;
    thread_arg_t a[2] = {{c1, rank, size, 0}, {c2, rank, size, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, poster, &a[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    tutti_comm_destroy(c1);
    tutti_comm_destroy(c2);
    return a[0].rc || a[1].rc ? th_fail("a thread's allreduce went wrong") : 0;
}

START_TEST(test_threads)
{
    th_opts_t o = TH_OPTS_INIT;
    char port2[32];
    int port = th_free_port();
    ck_assert_msg(port > 0, "no free TCP port for the second communicator");
    snprintf(port2, sizeof port2, "TH_PORT2=%d", port);
    o.env[0] = port2;
    ck_assert(th_run_opts(2, &o, threads_rank, NULL) == 0);
}
END_TEST

/* Three threads of each rank make identical blocking allreduces on one communicator: any
 * interleaving matches, as long as every rank runs its calls in the order they were numbered.
 * A blocking call that took its number outside the executor's lock could run ahead of one
 * numbered before it and not yet queued (2 of 10 such runs failed with a false mismatch). */
typedef struct same_calls {
    tutti_comm_t *comm;
    int size;
    int rc;
} same_calls_t;

static void *same_calls(void *p)
{
    same_calls_t *a = p;
    for (int i = 0; i < 1500 && a->rc == 0; i++) {
        float x[7] = {1, 1, 1, 1, 1, 1, 1};
        tutti_status_t st = tutti_allreduce(x, x, 7, TUTTI_FLOAT32, TUTTI_SUM, a->comm, NULL);
        if (st != TUTTI_OK)
            a->rc = th_fail("allreduce %d of a thread: %s", i, tutti_comm_last_error(a->comm));
        else if (x[0] != (float)a->size)
            a->rc = th_fail("allreduce %d of a thread gave %g", i, (double)x[0]);
    }
    return NULL;
}

static int thread_order_rank(int rank, int size, void *arg)
{
    (void)rank;
    (void)arg;
    tutti_comm_t *comm = init_or_fail();
    if (comm == NULL)
        return 1;
    same_calls_t a[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        a[i] = (same_calls_t){comm, size, 0};
        pthread_create(&t[i], NULL, same_calls, &a[i]);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    tutti_comm_destroy(comm);
    return a[0].rc || a[1].rc || a[2].rc;
}

START_TEST(test_thread_order)
{
    ck_assert(th_run(2, "shm", 120, thread_order_rank, NULL) == 0);
}
END_TEST

/* Posting never waits for the peers where the caller asked for a handle: an asynchronous
 * receive whose sender only sends once the post has returned (run in the caller's thread, the
 * post would wait for that send for ever), a small asynchronous allreduce posted before a
 * blocking send that its peer receives first (the default), and, with
 * tutti_comm_config_t.inline_max = -1 (never), a small asynchronous allreduce that the other
 * rank only joins once this one's post has returned. (Collectives of one communicator still run one after the other, in posting order;
 * sends and receives run apart from them: check_p2p.) */
static int nonblocking_rank(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    th_shared_t *sh = th_shared();
    tutti_comm_config_t cfg = TUTTI_COMM_CONFIG_INIT; /* inline_max 0: TUTTI_INLINE_MAX */
    cfg.timeout_s = 20;
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(&cfg, &comm) != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    int rc = 0;
    int32_t v = 7;
    if (rank == 0) {
        tutti_work_t *r = NULL;
        int done = 1;
        v = -1;
        if (tutti_recv(&v, 1, TUTTI_INT32, 1, 5, comm, &r) != TUTTI_OK)
            rc = th_fail("recv post: %s", tutti_last_error());
        else if (tutti_work_test(r, &done), done)
            rc = th_fail("the receive ended before its send was posted");
        __atomic_store_n(&sh->slots[0], 1, __ATOMIC_RELEASE);
        if (rc == 0 && tutti_work_wait(r, 20) != TUTTI_OK)
            rc = th_fail("recv: %s", tutti_last_error());
        if (rc == 0 && v != 7)
            rc = th_fail("received %d, want 7", v);
        tutti_work_free(r);
    } else {
        while (__atomic_load_n(&sh->slots[0], __ATOMIC_ACQUIRE) == 0)
            usleep(1000);
        if (tutti_send(&v, 1, TUTTI_INT32, 0, 5, comm, NULL) != TUTTI_OK)
            rc = th_fail("send: %s", tutti_last_error());
    }

    /* The default (TUTTI_INLINE_MAX unset): a small asynchronous allreduce posted before a
     * blocking send whose receiver posts its allreduce only after the receive, legal in MPI.
     * A post that waited in the caller's thread for the peer would stall both until the
     * timeout. */
    float y = (float)rank + 1;
    tutti_work_t *ay = NULL;
    int32_t token = 11;
    if (rc == 0 && rank == 0) {
        if (tutti_allreduce(TUTTI_IN_PLACE, &y, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, &ay) !=
            TUTTI_OK)
            rc = th_fail("allreduce post before the send: %s", tutti_last_error());
        else if (tutti_send(&token, 1, TUTTI_INT32, 1, 6, comm, NULL) != TUTTI_OK)
            rc = th_fail("send after the allreduce post: %s", tutti_last_error());
    } else if (rc == 0) {
        token = 0;
        if (tutti_recv(&token, 1, TUTTI_INT32, 0, 6, comm, NULL) != TUTTI_OK || token != 11)
            rc = th_fail("recv before the allreduce (got %d): %s", (int)token,
                         tutti_last_error());
        else if (tutti_allreduce(TUTTI_IN_PLACE, &y, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, &ay) !=
                 TUTTI_OK)
            rc = th_fail("allreduce post after the recv: %s", tutti_last_error());
    }
    if (rc == 0 && tutti_work_wait(ay, 20) != TUTTI_OK)
        rc = th_fail("allreduce around the send: %s", tutti_last_error());
    if (rc == 0 && y != 3.0f)
        rc = th_fail("allreduce around the send gave %g, want 3", (double)y);
    tutti_work_free(ay);

    if (tutti_comm_destroy(comm) != TUTTI_OK && rc == 0)
        rc = th_fail("destroy: %s", tutti_last_error());
    cfg.inline_max = -1; /* never */
    if (rc == 0 && tutti_comm_init_env(&cfg, &comm) != TUTTI_OK)
        return th_fail("init with inline_max -1: %s", tutti_last_error());

    float x = (float)rank + 1;
    tutti_work_t *a = NULL;
    if (rc == 0 && rank == 1) /* joins only after rank 0's post returned */
        while (__atomic_load_n(&sh->counter, __ATOMIC_ACQUIRE) == 0)
            usleep(1000);
    if (rc == 0 && tutti_allreduce(TUTTI_IN_PLACE, &x, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, &a) !=
                       TUTTI_OK)
        rc = th_fail("allreduce post: %s", tutti_last_error());
    if (rc == 0 && rank == 0) {
        int done = 1;
        tutti_work_test(a, &done);
        if (done)
            rc = th_fail("the allreduce ended before rank 1 joined it");
        __atomic_store_n(&sh->counter, 1, __ATOMIC_RELEASE);
    }
    if (rc == 0 && tutti_work_wait(a, 20) != TUTTI_OK)
        rc = th_fail("allreduce: %s", tutti_last_error());
    if (rc == 0 && x != 3.0f)
        rc = th_fail("allreduce gave %g, want 3", (double)x);
    tutti_work_free(a);
    /* -1 keeps blocking calls in the caller's thread (the torch backend's synchronous ops) */
    if (rc == 0 && tutti_allreduce(TUTTI_IN_PLACE, &x, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL) !=
                       TUTTI_OK)
        rc = th_fail("blocking allreduce with inline_max -1: %s", tutti_last_error());
    if (rc == 0 && x != 6.0f)
        rc = th_fail("blocking allreduce gave %g, want 6", (double)x);

    if (tutti_comm_destroy(comm) != TUTTI_OK && rc == 0)
        rc = th_fail("destroy: %s", tutti_last_error());
    /* A bad config is refused on every rank that has it; each first tells the others through
     * the store (check_badinput test_refused_settings), so all of them learn it at once. */
    cfg.inline_max = -2;
    tutti_comm_t *bad = NULL;
    double t0 = th_now();
    if (rc == 0 && (tutti_comm_init_env(&cfg, &bad) != TUTTI_ERR_INVALID_ARG ||
                    strstr(tutti_last_error(), "inline_max") == NULL))
        rc = th_fail("inline_max -2 was not refused: %s", tutti_last_error());
    if (rc == 0 && th_now() - t0 > 10)
        rc = th_fail("inline_max -2 took %.1f s to refuse", th_now() - t0);
    return rc;
}

START_TEST(test_nonblocking)
{
    ck_assert(th_run(2, "shm", 60, nonblocking_rank, NULL) == 0);
    ck_assert(th_run(2, "ofi", 60, nonblocking_rank, NULL) == 0);
}
END_TEST

/* An asynchronous post of a call with nothing to move returns at once when nothing may run in
 * the caller's thread (TUTTI_INLINE_MAX=0, or tutti_comm_config_t.inline_max = -1), even where the
 * call must still meet the peers (a barrier, v-collectives whose counts are all 0): rank 1 joins
 * only after all of rank 0's posts have returned, so a post that blocked until the peers joined
 * would never return. Issue 15 saw such a post block. */
static int zero_post_rank(int rank, int size, void *arg)
{
    (void)size;
    th_shared_t *sh = th_shared();
    tutti_comm_config_t cfg = TUTTI_COMM_CONFIG_INIT;
    cfg.timeout_s = 20;
    cfg.inline_max = arg != NULL ? -1 : 0; /* 0: TUTTI_INLINE_MAX, which the harness sets to 0 */
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(&cfg, &comm) != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    int rc = 0;
    size_t zero[2] = {0, 0};
    enum { NPOST = 7 };
    tutti_work_t *w[NPOST] = {NULL};
    if (rank == 1) {
        double t0 = th_now();
        while (__atomic_load_n(&sh->counter, __ATOMIC_ACQUIRE) == 0 && th_now() - t0 < 8)
            usleep(1000);
        if (__atomic_load_n(&sh->counter, __ATOMIC_ACQUIRE) == 0)
            rc = th_fail("rank 0's asynchronous 0-byte posts did not all return within 8 s");
    }
    tutti_status_t st[NPOST];
    double t0 = th_now();
    st[0] = tutti_barrier(comm, &w[0]);
    st[1] = tutti_allgatherv(NULL, 0, NULL, zero, NULL, TUTTI_FLOAT32, comm, &w[1]);
    st[2] = tutti_alltoallv(NULL, zero, NULL, NULL, zero, NULL, TUTTI_FLOAT32, comm, &w[2]);
    st[3] = tutti_allreduce(NULL, NULL, 0, TUTTI_FLOAT32, TUTTI_SUM, comm, &w[3]);
    st[4] = tutti_broadcast(NULL, 0, TUTTI_FLOAT32, 1, comm, &w[4]);
    st[5] = tutti_reduce_scatter(NULL, NULL, 0, TUTTI_FLOAT32, TUTTI_SUM, comm, &w[5]);
    st[6] = tutti_barrier(comm, &w[6]);
    double posted = th_now() - t0;
    if (rank == 0) {
        int done = 1;
        tutti_work_test(w[6], &done);
        if (done && rc == 0)
            rc = th_fail("the last barrier ended before rank 1 posted anything");
        __atomic_store_n(&sh->counter, 1, __ATOMIC_RELEASE);
        if (posted > 2.0 && rc == 0)
            rc = th_fail("seven asynchronous 0-byte posts took %.2f s", posted);
    }
    for (int i = 0; i < NPOST; i++) {
        if (st[i] != TUTTI_OK) {
            rc = th_fail("post %d: %d (%s)", i, st[i], tutti_comm_last_error(comm));
            continue;
        }
        tutti_status_t ws = tutti_work_wait(w[i], 20);
        if (ws != TUTTI_OK && rc == 0)
            rc = th_fail("operation %d: %d (%s)", i, ws, tutti_work_error(w[i]));
        tutti_work_free(w[i]);
    }
    if (tutti_comm_destroy(comm) != TUTTI_OK && rc == 0)
        rc = th_fail("destroy: %s", tutti_last_error());
    return rc;
}

/* Ranks given different worker counts: every rank is told so, as a bad argument naming the
 * setting, at creation (it failed inside the shared segment's setup, reported as a bug). */
static int count_mismatch_rank(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    setenv("CCL_WORKER_COUNT", rank == 1 ? "2" : "1", 1);
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st == TUTTI_OK) {
        tutti_comm_destroy(comm);
        return th_fail("created with CCL_WORKER_COUNT 1 and 2 on different ranks");
    }
    if (st != TUTTI_ERR_INVALID_ARG || strstr(tutti_last_error(), "CCL_WORKER_COUNT") == NULL ||
        strstr(tutti_last_error(), "rank 1 has 2") == NULL)
        return th_fail("want invalid argument naming CCL_WORKER_COUNT and rank 1: %s: %s",
                       tutti_strerror(st), tutti_last_error());
    return 0;
}

START_TEST(test_count_mismatch)
{
    static const char *const tps[] = {"shm", "ofi"};
    th_opts_t o = TH_OPTS_INIT;
    o.transport = tps[_i];
    o.timeout_s = 60;
    ck_assert_msg(th_run_opts(3, &o, count_mismatch_rank, NULL) == 0, "%s: see stderr", tps[_i]);
}
END_TEST

/* Ranks given different transports or algorithm overrides: every rank is told at creation,
 * naming the setting (they waited for each other until the timeout, blamed on a rank that
 * "never arrived", or some returned OK from a call the others failed). Where the settings mean
 * the same (auto and shm on one node), creation goes on. */
typedef struct setting_case {
    const char *var;
    const char *per_rank[3]; /* the value for ranks 0-2 (NULL: unset) */
    const char *want[2];     /* what the text must hold (NULL: creation must succeed) */
} setting_case_t;

static const setting_case_t setting_cases[] = {
    {"TUTTI_TRANSPORT", {"shm", "ofi", "shm"}, {"TUTTI_TRANSPORT", "rank 1 has ofi"}},
    {"CCL_BCAST", {"tree", "tree", "direct"}, {"CCL_BCAST", "rank 2"}},
    {"CCL_ALLREDUCE", {NULL, "ring", NULL}, {"CCL_ALLREDUCE", "rank 0 has it unset"}},
    {"TUTTI_TRANSPORT", {"auto", "shm", "auto"}, {NULL, NULL}},
    {"CCL_ALLTOALL", {"pairwise", "pairwise", "pairwise"}, {NULL, NULL}},
};

static int setting_mismatch_rank(int rank, int size, void *arg)
{
    (void)size;
    const setting_case_t *sc = arg;
    if (sc->per_rank[rank] != NULL)
        setenv(sc->var, sc->per_rank[rank], 1);
    else
        unsetenv(sc->var);
    setenv("TUTTI_TIMEOUT", "30", 1);
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    double dt = th_now() - t0;
    if (sc->want[0] == NULL) {
        if (st != TUTTI_OK)
            return th_fail("%s alike in meaning: creation failed: %s: %s", sc->var,
                           tutti_strerror(st), tutti_last_error());
        float x = 1, y = 0;
        int rc = 0;
        if (tutti_allreduce(&x, &y, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL) != TUTTI_OK || y != 3)
            rc = th_fail("%s: allreduce: %g: %s", sc->var, y, tutti_comm_last_error(comm));
        tutti_comm_destroy(comm);
        return rc;
    }
    if (st == TUTTI_OK) {
        tutti_comm_destroy(comm);
        return th_fail("created with %s differing between the ranks", sc->var);
    }
    int rc = 0;
    for (int i = 0; i < 2; i++)
        if (sc->want[i] != NULL && strstr(tutti_last_error(), sc->want[i]) == NULL)
            rc = th_fail("%s differs: the text does not hold \"%s\": %s: %s", sc->var,
                         sc->want[i], tutti_strerror(st), tutti_last_error());
    if (st != TUTTI_ERR_INVALID_ARG)
        rc = th_fail("%s differs: want invalid argument, got %s: %s", sc->var,
                     tutti_strerror(st), tutti_last_error());
    if (dt > 15) /* the creation timeout is 30 s: it was told, not timed out */
        rc = th_fail("%s differs: told after %.1f s", sc->var, dt);
    return rc;
}

START_TEST(test_setting_mismatch)
{
    th_opts_t o = TH_OPTS_INIT;
    o.timeout_s = 60;
    ck_assert_msg(th_run_opts(3, &o, setting_mismatch_rank, (void *)&setting_cases[_i]) == 0,
                  "case %d (%s): see stderr", _i, setting_cases[_i].var);
}
END_TEST

/* init_limited creates a one-rank communicator in a child process after limit(arg) (false: it
 * could not set its limit); 0 when creation failed with a system error naming want and not
 * unwanted (NULL: anything). The child's text goes to msg, for the assertion. */
static int init_limited(bool (*limit)(size_t), size_t arg, const char *want, const char *unwanted,
                        char *msg, size_t cap)
{
    int pp[2];
    ck_assert_int_eq(pipe(pp), 0);
    pid_t child = fork();
    if (child == 0) {
        alarm(30);
        close(pp[0]);
        unsetenv("RANK");
        unsetenv("WORLD_SIZE");
        setenv("TUTTI_SHM_WINDOW", "64K", 1); /* small mappings: a limit meets the threads */
        if (!limit(arg))
            _exit(2);
        tutti_comm_t *comm = NULL;
        tutti_status_t st = tutti_comm_init_env(NULL, &comm);
        char text[1200];
        snprintf(text, sizeof text, "%s: %s", tutti_strerror(st), tutti_last_error());
        ssize_t n = write(pp[1], text, strlen(text));
        (void)n;
        _exit(st == TUTTI_ERR_SYSTEM && strstr(text, want) != NULL &&
                      (unwanted == NULL || strstr(text, unwanted) == NULL)
                  ? 0
                  : 1);
    }
    close(pp[1]);
    ssize_t n = read(pp[0], msg, cap - 1);
    msg[n > 0 ? n : 0] = '\0';
    close(pp[0]);
    int status = 0;
    waitpid(child, &status, 0);
    fprintf(stderr, "[limits] %s\n", msg);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* root is not held to RLIMIT_NPROC: run as nobody, allowed one task, this one */
static bool one_task(size_t unused)
{
    (void)unused;
    struct rlimit one = {1, 1};
    return setgid(65534) == 0 && setuid(65534) == 0 && setrlimit(RLIMIT_NPROC, &one) == 0;
}

/* what is mapped now and half a thread's stack (stack bytes) more */
static bool half_a_stack(size_t stack)
{
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL || fscanf(f, "%llu", &pages) != 1)
        return false;
    fclose(f);
    struct rlimit as = {pages * (unsigned long long)sysconf(_SC_PAGESIZE) + stack / 2,
                        RLIM_INFINITY};
    return setrlimit(RLIMIT_AS, &as) == 0;
}

/* A user at its limit of processes and threads (ulimit -u, which counts all of its jobs):
 * creation fails with that limit named, not with advice to lower a count that is already 1. */
START_TEST(test_nproc)
{
    if (geteuid() != 0) {
        fprintf(stderr, "test_nproc: not root: skipped (it runs a rank as another user)\n");
        return;
    }
    char msg[1200];
    ck_assert_msg(init_limited(one_task, 0, "ulimit -u: 1", NULL, msg, sizeof msg) == 0, "%s",
                  msg);
}
END_TEST

/* An address-space limit (ulimit -v) with no room for a worker's stack: the error names that
 * limit, not the limit of processes (which it blamed, "ulimit -u: 96364", far from reached). */
START_TEST(test_address_space)
{
#if !defined(__has_feature)
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) ||                            \
    __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    fprintf(stderr, "test_address_space: a sanitizer's runtime maps memory of its own: skipped\n");
    return;
#endif
    /* a new thread's stack as glibc sizes it (ulimit -s; 2 MiB when that is unlimited) */
    size_t stack = 0;
    pthread_attr_t attr;
    ck_assert_int_eq(pthread_attr_init(&attr), 0);
    ck_assert_int_eq(pthread_attr_getstacksize(&attr, &stack), 0);
    pthread_attr_destroy(&attr);
    if (stack < (1u << 20)) {
        fprintf(stderr, "test_address_space: thread stacks of %zu KiB: skipped\n", stack >> 10);
        return;
    }
    char msg[1200];
    ck_assert_msg(init_limited(half_a_stack, stack, "ulimit -v", "ulimit -u", msg, sizeof msg) == 0,
                  "%s", msg);
}
END_TEST

START_TEST(test_zero_byte_posts)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = _i % 2 ? "ofi" : "shm";
    o.timeout_s = 40;
    o.env[0] = "TUTTI_INLINE_MAX=0";
    ck_assert(th_run_opts(2, &o, zero_post_rank, _i < 2 ? NULL : (void *)1) == 0);
}
END_TEST

static Suite *workers_suite(void)
{
    Suite *s = suite_create("workers");
    TCase *tc = tcase_create("workers");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_affinity);
    tcase_add_test(tc, test_async);
    tcase_add_loop_test(tc, test_late_callback, 0, 2); /* shm, ofi */
    tcase_add_test(tc, test_abort);
    tcase_add_test(tc, test_set_algorithm_threads);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_thread_order);
    tcase_add_test(tc, test_nonblocking);
    tcase_add_loop_test(tc, test_count_mismatch, 0, 2); /* shm, ofi */
    tcase_add_loop_test(tc, test_setting_mismatch, 0,
                        (int)(sizeof setting_cases / sizeof setting_cases[0]));
    tcase_add_test(tc, test_nproc);
    tcase_add_test(tc, test_address_space);
    tcase_add_loop_test(tc, test_zero_byte_posts, 0, 4); /* {env 0, config -1} x {shm, ofi} */
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(workers_suite)
