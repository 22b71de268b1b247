/* check_create.c: creating communicators: from several threads of one process at once (a race
 * shows under ThreadSanitizer, which scripts/test.sh runs this suite under), worker affinity
 * lists that must be refused (a trailing or doubled comma), and what loading the library leaves
 * of the process's signal handlers (libfabric's PSM dependency takes them). */
#include <check.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "tutti.h"

/* ---- an in-memory out-of-band store for single-rank communicators ---- */

enum { MAX_KEYS = 64, MAX_VAL = 256 };

typedef struct mem_store {
    int n;
    char key[MAX_KEYS][128];
    unsigned char val[MAX_KEYS][MAX_VAL];
    size_t len[MAX_KEYS];
} mem_store_t;

static int mem_put(void *ctx, const char *key, const void *value, size_t len)
{
    mem_store_t *s = ctx;
    if (s->n == MAX_KEYS || len > MAX_VAL || strlen(key) >= sizeof s->key[0])
        return -1;
    snprintf(s->key[s->n], sizeof s->key[0], "%s", key);
    memcpy(s->val[s->n], value, len);
    s->len[s->n++] = len;
    return 0;
}

static int mem_get(void *ctx, const char *key, void *buf, size_t cap, size_t *len,
                   double timeout_s)
{
    (void)timeout_s; /* one rank: nothing else will ever put a key */
    mem_store_t *s = ctx;
    for (int i = s->n - 1; i >= 0; i--)
        if (strcmp(s->key[i], key) == 0) {
            *len = s->len[i];
            memcpy(buf, s->val[i], s->len[i] < cap ? s->len[i] : cap);
            return 0;
        }
    return 1;
}

/* first_core is the lowest core this process may run on (-1 if unknown). */
static int first_core(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            return c;
    return -1;
}

/* create_one makes a single-rank communicator over a store of its own, runs an allreduce on
 * it and destroys it; returns 0 when all of that worked. */
static int create_one(void)
{
    mem_store_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return 1;
    tutti_oob_t oob = {.ctx = s, .put = mem_put, .get = mem_get};
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init(0, 1, &oob, NULL, &comm);
    free(s);
    if (st != TUTTI_OK) {
        fprintf(stderr, "tutti_comm_init: %s: %s\n", tutti_strerror(st), tutti_last_error());
        return 1;
    }
    int in = 7, out = 0;
    st = tutti_allreduce(&in, &out, 1, TUTTI_INT32, TUTTI_SUM, comm, NULL);
    int bad = st != TUTTI_OK || out != 7;
    if (bad)
        fprintf(stderr, "allreduce: %s, %d (want 7): %s\n", tutti_strerror(st), out,
                tutti_comm_last_error(comm));
    bad |= tutti_comm_destroy(comm) != TUTTI_OK;
    return bad;
}

/* ---- two threads creating communicators at once ---- */

enum { THREADS = 2, ROUNDS = 4 };

static void *creator(void *arg)
{
    int *bad = arg;
    for (int i = 0; i < ROUNDS; i++)
        *bad |= create_one();
    return NULL;
}

/* Creation reads the worker affinity (an explicit list, so that its parsing runs too) and the
 * log level; done by two threads at once, every shared thing it touches must be guarded. */
START_TEST(test_threads_create)
{
    char list[16];
    int core = first_core();
    ck_assert_int_ge(core, 0);
    snprintf(list, sizeof list, "%d", core);
    setenv("CCL_WORKER_AFFINITY", list, 1);
    setenv("CCL_LOG_LEVEL", "warn", 1);
    pthread_t t[THREADS];
    int bad[THREADS] = {0};
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, creator, &bad[i]), 0);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        ck_assert_msg(bad[i] == 0, "thread %d: creating communicators failed (see stderr)", i);
    }
}
END_TEST

/* ---- affinity lists ---- */

static tutti_status_t create_with_affinity(const char *list)
{
    setenv("CCL_WORKER_AFFINITY", list, 1);
    mem_store_t *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    tutti_oob_t oob = {.ctx = s, .put = mem_put, .get = mem_get};
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init(0, 1, &oob, NULL, &comm);
    free(s);
    if (st == TUTTI_OK)
        ck_assert_int_eq(tutti_comm_destroy(comm), TUTTI_OK);
    else
        ck_assert_ptr_null(comm);
    return st;
}

START_TEST(test_affinity_commas)
{
    int core = first_core();
    ck_assert_int_ge(core, 0);
    char ok[16], bad[4][24];
    snprintf(ok, sizeof ok, "%d", core);
    snprintf(bad[0], sizeof bad[0], "%d,", core);
    snprintf(bad[1], sizeof bad[1], ",%d", core);
    snprintf(bad[2], sizeof bad[2], "%d,,", core);
    snprintf(bad[3], sizeof bad[3], "%d-%d,", core, core);
    /* The same core alone is a valid list for 1 rank x 1 worker. */
    ck_assert_msg(create_with_affinity(ok) == TUTTI_OK, "CCL_WORKER_AFFINITY=%s: %s", ok,
                  tutti_last_error());
    for (int i = 0; i < 4; i++) {
        tutti_status_t st = create_with_affinity(bad[i]);
        ck_assert_msg(st == TUTTI_ERR_INVALID_ARG, "CCL_WORKER_AFFINITY=\"%s\": got %s, want "
                      "TUTTI_ERR_INVALID_ARG", bad[i], tutti_strerror(st));
        ck_assert_msg(strstr(tutti_last_error(), "CCL_WORKER_AFFINITY") != NULL &&
                          strstr(tutti_last_error(), bad[i]) != NULL,
                      "the message should name the variable and its value: %s",
                      tutti_last_error());
    }
}
END_TEST

/* Loading libtutti (and so libfabric, and on Debian libinfinipath) must leave the signals as a
 * program had them: no handler of libinfinipath's or libpsm's (which write a *.btr file and
 * exit(1) instead of dying of the signal). (That a program then dies of SIGTERM is checked on
 * tutti-bench by check_bench_cli.sh: Check's runner has SIGTERM and SIGINT handlers of its own.) */
START_TEST(test_signals_left_alone)
{
    ck_assert(tutti_version() != NULL); /* the library is loaded (and linked: see meson) */
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction a;
        if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &a) != 0)
            continue;
        void *h = (a.sa_flags & SA_SIGINFO) ? (void *)a.sa_sigaction : (void *)a.sa_handler;
        Dl_info info;
        if (h == (void *)SIG_DFL || h == (void *)SIG_IGN || dladdr(h, &info) == 0 ||
            info.dli_fname == NULL)
            continue;
        ck_assert_msg(strstr(info.dli_fname, "libinfinipath") == NULL &&
                          strstr(info.dli_fname, "libpsm") == NULL,
                      "signal %d (%s) is handled by %s", sig, strsignal(sig), info.dli_fname);
    }
}
END_TEST

static Suite *create_suite(void)
{
    Suite *s = suite_create("create");
    TCase *tc = tcase_create("create");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_threads_create);
    tcase_add_test(tc, test_affinity_commas);
    tcase_add_test(tc, test_signals_left_alone);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(create_suite)
