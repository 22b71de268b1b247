/* check_pidns.c: ranks of one host that run in different PID namespaces (a container per rank
 * with the host's network and /dev/shm, `unshare --pid`): they cannot tell whether each other's
 * process lives or read its memory by process id, so they must not meet over shared memory.
 * Every collective between them stays exact, and the job says why it crosses them over ofi;
 * without a token, which is how such ranks prove they are one job, the refusal says so.
 * Needs CAP_SYS_ADMIN (root) for unshare(CLONE_NEWPID): skipped without it. */
#include <check.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_main.h"
#include "harness.h"
#include "tutti.h"

static int work(int rank, int size)
{
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_OK)
        return th_fail("init: %s: %s", tutti_strerror(st), tutti_last_error());
    int rc = 0;
    /* Small and large: the large ones take the window and single-copy paths between local ranks. */
    static const size_t counts[] = {1, 1000, 1u << 20};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0] && rc == 0; k++) {
        size_t n = counts[k];
        int64_t *a = malloc(n * sizeof *a), *g = malloc(n * (size_t)size * sizeof *g);
        for (size_t i = 0; i < n; i++)
            a[i] = (int64_t)(rank + 1) * (int64_t)(i + 1);
        st = tutti_allreduce(a, a, n, TUTTI_INT64, TUTTI_SUM, comm, NULL);
        for (size_t i = 0; st == TUTTI_OK && i < n; i++)
            if (a[i] != (int64_t)size * (size + 1) / 2 * (int64_t)(i + 1)) {
                rc = th_fail("allreduce of %zu: element %zu is %lld", n, i, (long long)a[i]);
                break;
            }
        for (size_t i = 0; i < n; i++)
            a[i] = rank * 1000003 + (int64_t)i;
        if (st == TUTTI_OK)
            st = tutti_allgather(a, g, n, TUTTI_INT64, comm, NULL);
        for (int r = 0; st == TUTTI_OK && rc == 0 && r < size; r++)
            for (size_t i = 0; i < n; i++)
                if (g[(size_t)r * n + i] != r * 1000003 + (int64_t)i) {
                    rc = th_fail("allgather of %zu: rank %d's element %zu is %lld", n, r, i,
                                 (long long)g[(size_t)r * n + i]);
                    break;
                }
        if (st != TUTTI_OK)
            rc = th_fail("%zu elements: %s: %s", n, tutti_strerror(st), tutti_comm_last_error(comm));
        free(a);
        free(g);
    }
    st = tutti_comm_destroy(comm);
    if (st != TUTTI_OK)
        rc = th_fail("destroy: %s: %s", tutti_strerror(st), tutti_last_error());
    return rc;
}

/* Without a token: the rank in another namespace cannot prove it belongs to rank 0's job by
 * process ids, and is told so, and to set a token; rank 0 gives up at its deadline. */
static int refused(int rank, int size)
{
    (void)size;
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st == TUTTI_OK) {
        tutti_comm_destroy(comm);
        return th_fail("joined without a token across PID namespaces");
    }
    if (rank % 2 == 1 && (strstr(tutti_last_error(), "PID namespace") == NULL ||
                          strstr(tutti_last_error(), "TUTTI_JOB_TOKEN") == NULL))
        return th_fail("the refusal should name the PID namespaces and the token: %s",
                       tutti_last_error());
    /* rank 0 waited for it to its deadline and blamed the launch ("check that all ranks were
     * started with the same WORLD_SIZE/MASTER_ADDR/MASTER_PORT"): it must point there too */
    if (rank == 0 && (strstr(tutti_last_error(), "PID namespace") == NULL ||
                      strstr(tutti_last_error(), "TUTTI_JOB_TOKEN") == NULL))
        return th_fail("rank 0's error should point to the ranks that hung up and the token: %s",
                       tutti_last_error());
    return 0;
}

/* Odd ranks run in a PID namespace of their own, with a /proc of their own: the process that
 * joins the job is the first (pid 1) of a fresh namespace, as in a container. */
static int pidns_rank(int rank, int size, void *arg)
{
    int (*fn)(int, int) = arg != NULL ? refused : work;
    if (rank % 2 == 0)
        return fn(rank, size);
    if (unshare(CLONE_NEWPID | CLONE_NEWNS) != 0)
        return th_fail("unshare(CLONE_NEWPID | CLONE_NEWNS): %s", strerror(errno));
    pid_t child = fork();
    if (child < 0)
        return th_fail("fork: %s", strerror(errno));
    if (child == 0) {
        /* a /proc of its own, as a container has: the other ranks' processes are not in it */
        if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
            _exit(th_fail("mounting a /proc of its own: %s", strerror(errno)));
        _exit(fn(rank, size));
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : th_fail("died by signal %d", WTERMSIG(status));
}

START_TEST(test_pidns)
{
    if (unshare(0) != 0 || geteuid() != 0) {
        fprintf(stderr, "check_pidns: not root: skipped (unshare(CLONE_NEWPID) needs it)\n");
        return;
    }
    th_opts_t o = TH_OPTS_INIT;
    /* Process ids cannot prove across namespaces that the ranks are one job (the host's secret
     * file names rank 0 by its pid): a container per rank needs a token, as the error says. */
    o.env[0] = "TUTTI_JOB_TOKEN=check-pidns-0123456789abcdef";
    for (int n = 2; n <= 3; n++)
        ck_assert_msg(th_run_opts(n, &o, pidns_rank, NULL) == 0, "%d ranks: see stderr", n);
    o.env[0] = "TUTTI_TIMEOUT=3";
    ck_assert_msg(th_run_opts(2, &o, pidns_rank, "refused") == 0, "no token: see stderr");
}
END_TEST

TH_CHECK_MAIN_ONE("pidns", "pidns", 240, test_pidns)
