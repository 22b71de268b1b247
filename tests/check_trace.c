/* check_trace.c: TUTTI_TRACE and the straggler report. Every rank of a traced job writes its
 * file at destroy (%r is the rank; a second communicator adds .comm1), with one event per
 * collective, the algorithms' phases, and its clock error; bench/tutti-trace merges the files
 * into one valid timeline. A rank that sleeps before most allreduces is the one the report
 * names as last, by about the sleep, and the others' waits show it; without TUTTI_REPORT or
 * TUTTI_TRACE the report is refused; a wrong TUTTI_REPORT on one rank fails every rank at once. */
#include <check.h>
#include "check_main.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "tutti.h"

#define ALLREDUCES 8
/* the straggler's sleep: long enough that no stall of the other ranks (TSan, a busy machine)
 * makes one of them last instead */
#define SLEEP_US 200000

static char dir[256];

static int traced(int rank, int size, void *arg)
{
    (void)arg;
    tutti_comm_t *comm = NULL, *half = NULL;
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    int rc = 0;
    static float x[1 << 18], y[1 << 18], a[3 * 1024], b[3 * 1024];
    for (int i = 0; i < ALLREDUCES; i++) {
        size_t n = i < 5 ? 2 : (size_t)1 << 18; /* 8 bytes, then 1 MiB */
        if (tutti_allreduce(x, y, n, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL) != TUTTI_OK)
            rc = th_fail("allreduce: %s", tutti_comm_last_error(comm));
    }
    if (tutti_alltoall(a, b, 1024, TUTTI_FLOAT32, comm, NULL) != TUTTI_OK)
        rc = th_fail("alltoall: %s", tutti_comm_last_error(comm));
    /* two sub-communicators, {0, 2} and {1}: each writes its own files, named apart from the
     * world's and from each other's */
    if (tutti_comm_split(comm, rank % 2, rank, &half) != TUTTI_OK ||
        tutti_allreduce(x, y, 4, TUTTI_FLOAT32, TUTTI_SUM, half, NULL) != TUTTI_OK)
        rc = th_fail("split: %s", tutti_comm_last_error(comm));
    tutti_comm_destroy(half);
    /* Broadcasts still queued or running when the communicator is destroyed: the workers stop
     * before the file is written (ThreadSanitizer watches this in scripts/test.sh). */
    tutti_work_t *w[6] = {NULL};
    for (int i = 0; i < 6; i++)
        if (tutti_broadcast(x, 1 << 18, TUTTI_FLOAT32, 0, comm, &w[i]) != TUTTI_OK)
            rc = th_fail("broadcast: %s", tutti_comm_last_error(comm));
    tutti_comm_destroy(comm);
    for (int i = 0; i < 6; i++)
        if (w[i] != NULL) {
            tutti_work_wait(w[i], 60);
            tutti_work_free(w[i]);
        }
    (void)size;
    return rc;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s != NULL && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s != NULL)
        s[n] = '\0';
    fclose(f);
    return s;
}

static int count(const char *s, const char *what)
{
    int k = 0;
    for (const char *p = s; (p = strstr(p, what)) != NULL; p++)
        k++;
    return k;
}

START_TEST(test_trace)
{
    /* shm, ofi, and shm with everything on two worker threads (slices on their own tracks) */
    static const char *const tps[] = {"shm", "ofi", "shm"};
    const char *tp = tps[_i];
    snprintf(dir, sizeof dir, "/tmp/tutti-check-trace-%d-%d", (int)getpid(), _i);
    char cmd[1024], env[320], path[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(env, sizeof env, "TUTTI_TRACE=%s/trace.%%r.json", dir);
    /* A symlink of another user at rank 1's path (as one may plant in /tmp) is replaced, and
     * the file it points to is left as it was: the trace is written under a fresh name and
     * renamed. (A link of this user's own, or root's, as /dev/stdout, is written through.) */
    char victim[420], link[420];
    snprintf(victim, sizeof victim, "%s-victim", dir);
    snprintf(link, sizeof link, "%s/trace.1.json", dir);
    snprintf(cmd, sizeof cmd, "echo precious > %s && ln -s %s %s", victim, victim, link);
    ck_assert_int_eq(system(cmd), 0);
    const bool planted = geteuid() == 0 && lchown(link, 65534, 65534) == 0; /* nobody's */
    if (!planted) {
        fprintf(stderr, "check_trace: not root: no other user's symlink planted\n");
        unlink(link);
    }
    th_opts_t o = TH_OPTS_INIT;
    o.transport = tp;
    o.timeout_s = 120;
    o.env[0] = env;
    if (_i == 2) {
        o.env[1] = "CCL_WORKER_COUNT=2";
        o.env[2] = "TUTTI_INLINE_MAX=0";
    }
    ck_assert_msg(th_run_opts(3, &o, traced, NULL) == 0, "traced job over %s: see stderr", tp);
    /* one event per slice: on two workers each 1 MiB allreduce runs as two */
    const int want = _i == 2 ? 5 + 2 * (ALLREDUCES - 5) : ALLREDUCES;
    for (int r = 0; r < 3; r++) {
        snprintf(path, sizeof path, "%s/trace.%d.json", dir, r);
        char *s = slurp(path);
        ck_assert_msg(s != NULL, "rank %d wrote no %s", r, path);
        char pid[32];
        snprintf(pid, sizeof pid, "\"pid\":%d,", r);
        ck_assert_msg(count(s, pid) >= ALLREDUCES + 1, "%s: too few events of rank %d", path, r);
        /* the creation's broadcast, ALLREDUCES allreduces, an alltoall (and the split's own) */
        ck_assert_msg(count(s, "\"name\":\"allreduce\",\"cat\":\"collective\"") == want,
                      "%s: %d allreduce events, want %d", path,
                      count(s, "\"name\":\"allreduce\",\"cat\":\"collective\""), want);
        ck_assert_msg(count(s, "\"name\":\"alltoall\",\"cat\":\"collective\"") == 1,
                      "%s: no alltoall event", path);
        ck_assert_msg(count(s, "\"cat\":\"phase\"") > 0, "%s: no phase events", path);
        /* Viewers drop negative times and take thread ids as unique across processes. */
        ck_assert_msg(strstr(s, "\"ts\":-") == NULL, "%s: an event before time zero", path);
        char tid[32];
        snprintf(tid, sizeof tid, "\"tid\":%d", (r + 1) * 1000); /* (r + 1) * 100000 + 0..64 */
        ck_assert_msg(count(s, "\"tid\":") == count(s, tid),
                      "%s: thread ids outside rank %d's range %d00..", path, r, (r + 1) * 1000);
        ck_assert_msg(strstr(s, "\"clock_error_us\":") != NULL, "%s: no clock error", path);
        ck_assert_msg(strstr(s, "\"algorithm\":") != NULL && strstr(s, "\"transport\":") != NULL,
                      "%s: collectives without algorithm or transport", path);
        /* on the workers, the 1 MiB allreduces are cut in two: a slice on each worker's track */
        ck_assert_msg(_i != 2 || (strstr(s, "\"name\":\"worker 0\"") != NULL &&
                                  strstr(s, "\"name\":\"worker 1\"") != NULL),
                      "%s: no events on the workers' tracks", path);
        free(s);
    }
    char *v = slurp(victim);
    unlink(victim);
    ck_assert_msg(v != NULL && strcmp(v, "precious\n") == 0,
                  "the trace was written through another user's symlink at %s into %s", link,
                  victim);
    free(v);
    struct stat sb;
    ck_assert_msg(lstat(link, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0777) == 0644,
                  "%s is not a file of mode 0644", link);
    /* The sub-communicators: {0, 2} as ranks 0 and 1, {1} as rank 0: three files, each with its
     * one allreduce, named trace.R.json.comm1-ID (two IDs). */
    snprintf(cmd, sizeof cmd,
             "test $(ls %s | grep -c '^trace\\.[01]\\.json\\.comm1-[0-9a-f]\\{8\\}$') = 3 && "
             "test $(ls %s | sed -n 's/.*comm1-//p' | sort -u | wc -l) = 2 && "
             "test $(cat %s/*.comm1-* | grep -o '\"name\":\"allreduce\",\"cat\":\"collective\"' "
             "| wc -l) = 3",
             dir, dir, dir);
    ck_assert_msg(system(cmd) == 0, "the sub-communicators' traces are missing or wrong: %s", cmd);
    /* The merge tool takes the three files and writes one timeline that parses; given two of
     * them it refuses. */
    snprintf(cmd, sizeof cmd,
             "python3 %s/bench/tutti-trace merge -o %s/merged.json %s/trace.0.json "
             "%s/trace.1.json %s/trace.2.json && python3 -c 'import json,sys; "
             "d=json.load(open(sys.argv[1])); assert d[\"metadata\"][\"ranks\"]==[0,1,2]; "
             "assert sum(e.get(\"name\")==\"allreduce\" for e in d[\"traceEvents\"])==%d' "
             "%s/merged.json",
             TH_SRCDIR, dir, dir, dir, dir, 3 * want, dir);
    ck_assert_msg(system(cmd) == 0, "tutti-trace merge over %s failed: %s", tp, cmd);
    snprintf(cmd, sizeof cmd,
             "python3 %s/bench/tutti-trace merge -o %s/m2.json %s/trace.0.json %s/trace.1.json "
             "2>/dev/null",
             TH_SRCDIR, dir, dir, dir);
    ck_assert_msg(system(cmd) != 0, "tutti-trace merged 2 of 3 ranks' files without --partial");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static int straggler(int rank, int size, void *arg)
{
    (void)arg;
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    int rc = 0;
    float x[2] = {1, 2}, y[2];
    th_shared_t *sh = th_shared();
    long posts = 0; /* the other ranks' posts this rank has waited for */
    for (int i = 0; i < 10; i++) {
        /* 8 of the 10: the last rank comes SLEEP_US after the others are at the call (a sleep
         * alone lost its lead where another rank was descheduled as long) */
        if (i % 5 != 0 && rank != size - 1)
            __atomic_add_fetch(&sh->counter, 1, __ATOMIC_RELEASE);
        if (i % 5 != 0 && rank == size - 1) {
            posts += size - 1;
            while (__atomic_load_n(&sh->counter, __ATOMIC_ACQUIRE) < posts)
                usleep(1000);
            usleep(SLEEP_US);
        }
        if (tutti_allreduce(x, y, 2, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL) != TUTTI_OK)
            rc = th_fail("allreduce: %s", tutti_comm_last_error(comm));
    }
    static char text[16384];
    tutti_status_t st = tutti_comm_report(comm, text, sizeof text);
    if (st != TUTTI_OK)
        rc = th_fail("tutti_comm_report: %s: %s", tutti_strerror(st), tutti_comm_last_error(comm));
    else if (rank != 0 && text[0] != '\0')
        rc = th_fail("rank %d got a report: only rank 0 should", rank);
    else if (rank == 0) {
        fprintf(stderr, "%s", text);
        const char *g = strstr(text, "allreduce <= 4 KiB: 10 calls\n  last: rank ");
        int who = -1, times = 0;
        double lag = 0, p99 = 0;
        if (g == NULL ||
            sscanf(g, "allreduce <= 4 KiB: 10 calls\n  last: rank %d %d times (%lf/%lf)", &who,
                   &times, &lag, &p99) != 4)
            rc = th_fail("the report has no allreduce line of 10 calls:\n%s", text);
        else if (who != size - 1 || times < 8 || lag < SLEEP_US / 2)
            rc = th_fail("the report names rank %d last %d times, trailing by %.1f us: want rank "
                         "%d at least 8 times by about %d us:\n%s",
                         who, times, lag, size - 1, SLEEP_US, text);
        const char *w = g != NULL ? strstr(g, "  wait: rank 0 ") : NULL;
        double w0 = 0;
        if (w == NULL || sscanf(w, "  wait: rank 0 %lf/", &w0) != 1 || w0 < SLEEP_US / 2)
            rc = th_fail("rank 0's median wait is not about the sleep:\n%s", text);
    }
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_report)
{
    static const char *const tps[] = {"shm", "ofi"};
    th_opts_t o = TH_OPTS_INIT;
    o.transport = tps[_i];
    o.timeout_s = 120;
    o.env[0] = "TUTTI_REPORT=1";
    ck_assert_msg(th_run_opts(3, &o, straggler, NULL) == 0, "report over %s: see stderr",
                  tps[_i]);
}
END_TEST

static int unrecorded(int rank, int size, void *arg)
{
    (void)arg, (void)size, (void)rank;
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    char text[64];
    int rc = 0;
    tutti_status_t st = tutti_comm_report(comm, text, sizeof text);
    if (st != TUTTI_ERR_NOT_SUPPORTED || strstr(tutti_comm_last_error(comm), "TUTTI_REPORT") == NULL)
        rc = th_fail("a report without recording: %s (%s)", tutti_strerror(st),
                     tutti_comm_last_error(comm));
    if (tutti_comm_report(comm, NULL, 10) != TUTTI_ERR_INVALID_ARG)
        rc = th_fail("a report into NULL was not refused");
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_report_off)
{
    ck_assert(th_run(2, "shm", 60, unrecorded, NULL) == 0);
}
END_TEST

/* A rank whose TUTTI_REPORT is wrong fails creation, and so does every other rank, at once,
 * naming it (not after waiting for it until the timeout). */
static int bad_setting(int rank, int size, void *arg)
{
    (void)arg, (void)size;
    if (rank == 1)
        setenv("TUTTI_REPORT", "2", 1);
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    double dt = th_now() - t0;
    if (st == TUTTI_OK) {
        tutti_comm_destroy(comm);
        return th_fail("creation passed with TUTTI_REPORT=2 on rank 1");
    }
    if (st != TUTTI_ERR_INVALID_ARG || strstr(tutti_last_error(), "TUTTI_REPORT") == NULL ||
        (rank != 1 && !th_mentions_rank(tutti_last_error(), 1)) || dt > 10)
        return th_fail("after %.1f s: %s: %s", dt, tutti_strerror(st), tutti_last_error());
    return 0;
}

START_TEST(test_bad_setting)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 60;
    o.env[0] = "TUTTI_TIMEOUT=40";
    ck_assert(th_run_opts(3, &o, bad_setting, NULL) == 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("trace");
    tcase_set_timeout(tc, 400);
    tcase_add_loop_test(tc, test_trace, 0, 3);
    tcase_add_loop_test(tc, test_report, 0, 2);
    tcase_add_test(tc, test_report_off);
    tcase_add_test(tc, test_bad_setting);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(suite)
