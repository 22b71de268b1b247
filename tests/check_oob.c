/* check_oob.c: communicators bootstrapped through a caller's key-value store (tutti_comm_init
 * with a tutti_oob_t), as a framework's own store would carry them: a store made of files in a
 * directory shared by the ranks, no MASTER_PORT involved. */
#include <check.h>
#include "check_main.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "tutti.h"

/* ---- a directory-backed store: put writes key files atomically, get polls for them ---- */

typedef struct dir_store {
    char dir[128];
    int fail_puts; /* nonzero: every put fails, to test the error path */
    int puts, gets;
} dir_store_t;

static void key_path(const dir_store_t *s, const char *key, char *out, size_t cap)
{
    char flat[256];
    size_t i = 0;
    for (; key[i] != '\0' && i + 1 < sizeof flat; i++)
        flat[i] = key[i] == '/' ? '_' : key[i];
    flat[i] = '\0';
    snprintf(out, cap, "%s/%s", s->dir, flat);
}

static int dir_put(void *ctx, const char *key, const void *value, size_t len)
{
    dir_store_t *s = ctx;
    s->puts++;
    if (s->fail_puts)
        return -1;
    char path[512], tmp[520];
    key_path(s, key, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (f == NULL)
        return -1;
    size_t w = fwrite(value, 1, len, f);
    fclose(f);
    if (w != len || rename(tmp, path) != 0)
        return -1;
    return 0;
}

static int dir_get(void *ctx, const char *key, void *buf, size_t cap, size_t *len, double timeout_s)
{
    dir_store_t *s = ctx;
    s->gets++;
    char path[512];
    key_path(s, key, path, sizeof path);
    double end = th_now() + timeout_s;
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f != NULL) {
            struct stat st;
            fstat(fileno(f), &st);
            *len = (size_t)st.st_size;
            size_t want = *len < cap ? *len : cap;
            size_t r = fread(buf, 1, want, f);
            fclose(f);
            return r == want ? 0 : -1;
        }
        if (errno != ENOENT)
            return -1;
        if (th_now() >= end)
            return 1;
        usleep(500);
    }
}

static char store_dir[128];

static void make_store_dir(void)
{
    snprintf(store_dir, sizeof store_dir, "/tmp/tutti-oob-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(store_dir));
}

static void remove_store_dir(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", store_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static tutti_oob_t oob_of(dir_store_t *s)
{
    snprintf(s->dir, sizeof s->dir, "%s", store_dir);
    return (tutti_oob_t){.ctx = s, .put = dir_put, .get = dir_get};
}

/* ---- ranks ---- */

/* A full job over the caller's store: collectives give exact results, and MASTER_PORT is
 * pointed at a port nobody serves, so any use of the TCP store would fail. */
static int oob_job(int rank, int size, void *arg)
{
    (void)arg;
    setenv("MASTER_PORT", "1", 1);
    dir_store_t s = {0};
    tutti_oob_t oob = oob_of(&s);
    tutti_comm_config_t cfg = TUTTI_COMM_CONFIG_INIT;
    cfg.timeout_s = 20;
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init(rank, size, &oob, &cfg, &comm);
    if (st != TUTTI_OK)
        return th_fail("tutti_comm_init: %s: %s", tutti_strerror(st), tutti_last_error());
    if (s.puts == 0 || (size > 1 && s.gets == 0))
        return th_fail("the caller's store was not used (%d puts, %d gets)", s.puts, s.gets);
    if (tutti_comm_rank(comm) != rank || tutti_comm_size(comm) != size)
        return th_fail("rank/size %d/%d, want %d/%d", tutti_comm_rank(comm), tutti_comm_size(comm),
                       rank, size);
    enum { N = 1031 };
    int32_t in[N], out[N];
    for (int i = 0; i < N; i++)
        in[i] = rank * 1000 + i;
    st = tutti_allreduce(in, out, N, TUTTI_INT32, TUTTI_SUM, comm, NULL);
    if (st != TUTTI_OK)
        return th_fail("allreduce: %s: %s", tutti_strerror(st), tutti_comm_last_error(comm));
    for (int i = 0; i < N; i++) {
        int32_t want = 1000 * size * (size - 1) / 2 + size * i;
        if (out[i] != want)
            return th_fail("allreduce[%d] = %d, want %d", i, out[i], want);
    }
    int32_t all[8];
    st = tutti_allgather(&in[0], all, 1, TUTTI_INT32, comm, NULL);
    if (st != TUTTI_OK)
        return th_fail("allgather: %s: %s", tutti_strerror(st), tutti_comm_last_error(comm));
    for (int r = 0; r < size; r++)
        if (all[r] != r * 1000)
            return th_fail("allgather[%d] = %d", r, all[r]);
    st = tutti_comm_destroy(comm);
    if (st != TUTTI_OK)
        return th_fail("destroy: %s: %s", tutti_strerror(st), tutti_last_error());
    return 0;
}

/* A rank that never arrives: the others fail after the config's timeout, naming it. */
static int oob_missing(int rank, int size, void *arg)
{
    (void)arg;
    dir_store_t s = {0};
    tutti_oob_t oob = oob_of(&s);
    tutti_comm_config_t cfg = TUTTI_COMM_CONFIG_INIT;
    cfg.timeout_s = 2;
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init(rank, size, &oob, &cfg, &comm);
    double took = th_now() - t0;
    if (st != TUTTI_ERR_BOOTSTRAP)
        return th_fail("init without rank %d: got %s, want TUTTI_ERR_BOOTSTRAP", size - 1,
                       tutti_strerror(st));
    if (comm != NULL)
        return th_fail("a failed init left *comm set");
    if (!th_mentions_rank(tutti_last_error(), size - 1))
        return th_fail("the error does not name the missing rank %d: %s", size - 1,
                       tutti_last_error());
    if (took > 10)
        return th_fail("init took %.1f s to fail with a 2 s timeout", took);
    return 0;
}

/* A store whose put fails: init fails at once with a bootstrap error that says so. */
static int oob_failing_store(int rank, int size, void *arg)
{
    (void)arg;
    dir_store_t s = {.fail_puts = 1};
    tutti_oob_t oob = oob_of(&s);
    tutti_comm_config_t cfg = TUTTI_COMM_CONFIG_INIT;
    cfg.timeout_s = 30;
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init(rank, size, &oob, &cfg, &comm);
    if (st != TUTTI_ERR_BOOTSTRAP || comm != NULL)
        return th_fail("init over a failing store: got %s, want TUTTI_ERR_BOOTSTRAP",
                       tutti_strerror(st));
    if (th_now() - t0 > 5)
        return th_fail("a failing store took %.1f s to report (the timeout is 30 s)",
                       th_now() - t0);
    if (strlen(tutti_last_error()) == 0)
        return th_fail("no error text");
    return 0;
}

/* Rank 1 refuses its own config (a worker count out of range): it says so in the store, and the
 * others stop waiting for it at once with its reason, not at their 30 s timeout. */
static int oob_refused(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    dir_store_t s = {0};
    tutti_oob_t oob = oob_of(&s);
    tutti_comm_config_t cfg = TUTTI_COMM_CONFIG_INIT;
    cfg.timeout_s = 30;
    if (rank == 1)
        cfg.worker_count = 99;
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init(rank, size, &oob, &cfg, &comm);
    double took = th_now() - t0;
    if (comm != NULL)
        return th_fail("init succeeded beside a rank that refused its config");
    if (rank == 1)
        return st == TUTTI_ERR_INVALID_ARG && strstr(tutti_last_error(), "worker_count")
                   ? 0 : th_fail("rank 1: %s: %s", tutti_strerror(st), tutti_last_error());
    if (st != TUTTI_ERR_PEER_FAILED || !strstr(tutti_last_error(), "rank 1 could not create") ||
        !strstr(tutti_last_error(), "worker_count is 99"))
        return th_fail("got %s: %s", tutti_strerror(st), tutti_last_error());
    if (took > 10)
        return th_fail("took %.1f s to hear of rank 1's refusal (timeout 30 s)", took);
    return 0;
}

START_TEST(test_oob_refused)
{
    make_store_dir();
    ck_assert_msg(th_run(3, NULL, 60, oob_refused, NULL) == 0, "rank 1's refusal not relayed");
    remove_store_dir();
}
END_TEST

START_TEST(test_oob_job)
{
    static const int sizes[] = {1, 2, 3};
    static const char *const tps[] = {"shm", "ofi"};
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 3; i++) {
            make_store_dir();
            ck_assert_msg(th_run(sizes[i], tps[t], 60, oob_job, NULL) == 0,
                          "%d ranks over %s bootstrapped by the caller's store failed", sizes[i],
                          tps[t]);
            remove_store_dir();
        }
}
END_TEST

START_TEST(test_oob_missing_rank)
{
    make_store_dir();
    th_opts_t o = TH_OPTS_INIT;
    o.nstart = 2;
    o.timeout_s = 30;
    ck_assert_msg(th_run_opts(3, &o, oob_missing, NULL) == 0, "missing rank not reported");
    remove_store_dir();
}
END_TEST

START_TEST(test_oob_failing_store)
{
    make_store_dir();
    ck_assert_msg(th_run(2, NULL, 30, oob_failing_store, NULL) == 0, "failing store not reported");
    remove_store_dir();
}
END_TEST

START_TEST(test_oob_bad_args)
{
    dir_store_t s = {0};
    tutti_oob_t oob = {.ctx = &s, .put = dir_put, .get = dir_get}, half = {.ctx = &s, .put = dir_put};
    tutti_comm_t *comm = (tutti_comm_t *)&s;
    ck_assert_int_eq(tutti_comm_init(0, 1, NULL, NULL, &comm), TUTTI_ERR_INVALID_ARG);
    ck_assert_ptr_null(comm);
    ck_assert_int_eq(tutti_comm_init(0, 1, &half, NULL, &comm), TUTTI_ERR_INVALID_ARG);
    ck_assert_int_eq(tutti_comm_init(2, 2, &oob, NULL, &comm), TUTTI_ERR_INVALID_ARG);
    ck_assert_int_eq(tutti_comm_init(-1, 2, &oob, NULL, &comm), TUTTI_ERR_INVALID_ARG);
    ck_assert_int_eq(tutti_comm_init(0, 0, &oob, NULL, &comm), TUTTI_ERR_INVALID_ARG);
    ck_assert_int_eq(tutti_comm_init(0, 1, &oob, NULL, NULL), TUTTI_ERR_INVALID_ARG);
    ck_assert_msg(strstr(tutti_last_error(), "NULL") != NULL, "text: %s", tutti_last_error());
    tutti_comm_config_t bad = {.struct_size = 1};
    ck_assert_int_eq(tutti_comm_init(0, 1, &oob, &bad, &comm), TUTTI_ERR_INVALID_ARG);
    ck_assert_msg(strstr(tutti_last_error(), "TUTTI_COMM_CONFIG_INIT") != NULL, "text: %s",
                  tutti_last_error());
}
END_TEST

static Suite *oob_suite(void)
{
    Suite *s = suite_create("oob");
    TCase *tc = tcase_create("oob");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_oob_job);
    tcase_add_test(tc, test_oob_missing_rank);
    tcase_add_test(tc, test_oob_refused);
    tcase_add_test(tc, test_oob_failing_store);
    tcase_add_test(tc, test_oob_bad_args);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(oob_suite)
