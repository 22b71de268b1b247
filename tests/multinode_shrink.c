/* multinode_shrink.c: one rank of a job across the hosts of scripts/cluster.sh that runs fp32
 * allreduces until tests/multinode.sh (part "shrink") SIGKILLs a rank, then shrinks the
 * communicator with tutti_comm_shrink and checks the one it gets:
 *
 *   multinode_shrink DIR VICTIM [SECOND [DELAY]]
 *
 * DIR is a directory every host sees: each rank writes DIR/pid.R, then DIR/ready.R once the
 * job is set up (after a barrier); the script SIGKILLs rank VICTIM once every rank is ready
 * and writes DIR/fault_at (CLOCK_REALTIME, shared by the hosts) just before. SECOND, when
 * given, is a rank that SIGKILLs itself from a thread DELAY seconds (default 0.05) after its
 * own allreduce failed, that is while the shrink runs: it takes part in nothing after its
 * shrink returns, so the survivors' first collective on the new communicator fails if it was
 * left in, and they shrink again (3 shrinks at most, as tests/check_shrink.c).
 *
 * On the last communicator a survivor checks: an allgather of the old ranks equals the ranks
 * not killed, ascending; its new rank is its index there; int32 and fp32 allreduces of 1000 and
 * 1 << 18 elements, element i being (old rank + 1) * (i + 1), are exact (integers below 2^24,
 * exact in any order of summation). Then it prints
 *
 *   verdict ok rank R: shrunk to N ranks in T s ...
 *
 * or "verdict bad rank R: REASON", destroys the new communicator(s), the newest first, then the
 * old one, and exits 0 on ok, 1 on bad, 2 on setup errors. Every wait is bounded: the
 * allreduces before the kill go on for 40 s at most, and tutti's own waits end within
 * TUTTI_TIMEOUT (the script sets 20).
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "multinode_files.h"
#include "tutti.h"

#define COUNT_PRE 4096
#define COUNT_SMALL 1000
#define COUNT_LARGE (1u << 18)
#define MAX_SHRINKS 3

static double fault_at(const char *dir)
{
    char p[4096];
    double at = 0;
    snprintf(p, sizeof p, "%s/fault_at", dir);
    FILE *f = fopen(p, "r");
    if (f == NULL)
        return 0;
    if (fscanf(f, "%lf", &at) != 1)
        at = 0;
    fclose(f);
    return at;
}

static double second_delay;

static void *self_kill(void *arg)
{
    (void)arg;
    usleep((useconds_t)(second_delay * 1e6));
    raise(SIGKILL);
    return NULL;
}

/* check runs the final checks on c; returns TUTTI_OK, a collective's error (a member died:
 * shrink again), or -1000 with why filled in (a wrong result: bad). */
static int check(tutti_comm_t *c, int old_rank, const int32_t *want, int nwant, char *why,
                 size_t whylen)
{
    int n = tutti_comm_size(c), me = tutti_comm_rank(c);
    int32_t mine = old_rank, *all = calloc((size_t)(n > 0 ? n : 1), sizeof *all);
    if (all == NULL) {
        snprintf(why, whylen, "out of memory");
        return -1000;
    }
    tutti_status_t st = tutti_allgather(&mine, all, 1, TUTTI_INT32, c, NULL);
    if (st != TUTTI_OK) {
        free(all);
        return st;
    }
    char got[256] = "", exp[256] = "";
    for (int i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d", i ? "," : "", all[i]);
    for (int i = 0; i < nwant; i++)
        snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%d", i ? "," : "", want[i]);
    int bad = n != nwant || strcmp(got, exp) != 0;
    free(all);
    if (bad) {
        snprintf(why, whylen, "an allgather of the old ranks on the shrunk communicator gives "
                 "[%s]; the ranks not killed are [%s]", got, exp);
        return -1000;
    }
    if (me < 0 || me >= nwant || want[me] != old_rank) {
        snprintf(why, whylen, "old rank %d is new rank %d of %d; expected new rank = its index "
                 "in [%s]", old_rank, me, n, exp);
        return -1000;
    }
    int64_t weight = 0; /* sum over the survivors of (old rank + 1) */
    for (int i = 0; i < nwant; i++)
        weight += want[i] + 1;
    int32_t *a = malloc(COUNT_LARGE * sizeof *a), *b = malloc(COUNT_LARGE * sizeof *b);
    float *x = malloc(COUNT_LARGE * sizeof *x), *y = malloc(COUNT_LARGE * sizeof *y);
    if (a == NULL || b == NULL || x == NULL || y == NULL) {
        snprintf(why, whylen, "out of memory");
        st = -1000;
        goto out;
    }
    static const size_t counts[2] = {COUNT_SMALL, COUNT_LARGE};
    for (int k = 0; k < 2; k++) {
        size_t cnt = counts[k];
        for (size_t i = 0; i < cnt; i++) {
            a[i] = (int32_t)((old_rank + 1) * (int64_t)(i + 1));
            x[i] = (float)a[i];
            b[i] = -1;
            y[i] = -1;
        }
        st = tutti_allreduce(a, b, cnt, TUTTI_INT32, TUTTI_SUM, c, NULL);
        if (st != TUTTI_OK)
            goto out;
        for (size_t i = 0; i < cnt; i++)
            if (b[i] != (int32_t)(weight * (int64_t)(i + 1))) {
                snprintf(why, whylen, "int32 allreduce of %zu: element %zu is %d, expected %lld",
                         cnt, i, b[i], (long long)(weight * (int64_t)(i + 1)));
                st = -1000;
                goto out;
            }
        st = tutti_allreduce(x, y, cnt, TUTTI_FLOAT32, TUTTI_SUM, c, NULL);
        if (st != TUTTI_OK)
            goto out;
        for (size_t i = 0; i < cnt; i++)
            if (y[i] != (float)(weight * (int64_t)(i + 1))) {
                snprintf(why, whylen, "fp32 allreduce of %zu: element %zu is %.9g, expected %lld",
                         cnt, i, (double)y[i], (long long)(weight * (int64_t)(i + 1)));
                st = -1000;
                goto out;
            }
    }
out:
    free(a);
    free(b);
    free(x);
    free(y);
    return st;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: multinode_shrink DIR VICTIM [SECOND [DELAY]]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *dir = argv[1];
    int victim = atoi(argv[2]), second = argc > 3 ? atoi(argv[3]) : -1;
    second_delay = argc > 4 ? atof(argv[4]) : 0.05;
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_OK) {
        printf("verdict bad: init: %s\n", tutti_last_error());
        return 2;
    }
    int rank = tutti_comm_rank(comm), size = tutti_comm_size(comm);
    if (victim < 0 || victim >= size || second >= size || second == victim || size > 64) {
        printf("verdict bad rank %d: victims %d and %d for %d ranks\n", rank, victim, second,
               size);
        return 2;
    }
    char buf[4096];
    snprintf(buf, sizeof buf, "%d", (int)getpid());
    mn_touch(dir, "pid", rank, buf);
    float *s = malloc(COUNT_PRE * sizeof *s), *r = malloc(COUNT_PRE * sizeof *r);
    for (int i = 0; s != NULL && i < COUNT_PRE; i++)
        s[i] = 1.0f;
    if (s == NULL || r == NULL || (st = tutti_barrier(comm, NULL)) != TUTTI_OK) {
        printf("verdict bad rank %d: setup: %s\n", rank, tutti_comm_last_error(comm));
        return 2;
    }
    mn_touch(dir, "ready", rank, "1");

    /* The stream of allreduces, each checked, until the kill breaks one. */
    const double t0 = mn_now_real();
    unsigned calls = 0;
    for (;; calls++) {
        st = tutti_allreduce(s, r, COUNT_PRE, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
        if (st != TUTTI_OK)
            break;
        for (int i = 0; i < COUNT_PRE; i++)
            if (r[i] != (float)size) {
                printf("verdict bad rank %d: allreduce #%u before the kill returned TUTTI_OK with "
                       "element %d = %g, expected %d\n", rank, calls, i, (double)r[i], size);
                return 1;
            }
        if (mn_now_real() - t0 > 40) {
            printf("verdict bad rank %d: allreduces went on for 40 s: rank %d was not killed, "
                   "or its death not seen\n", rank, victim);
            return 1;
        }
    }
    const double seen = mn_now_real();
    char first_err[1024];
    snprintf(first_err, sizeof first_err, "%s", tutti_comm_last_error(comm));
    if (rank == victim) {
        printf("verdict bad rank %d: the victim's allreduce failed before it was killed: %s\n",
               rank, first_err);
        return 1;
    }
    double at = 0;
    for (int i = 0; i < 100 && (at = fault_at(dir)) == 0; i++)
        usleep(20000); /* the script writes it just before the kill */

    pthread_t th;
    if (rank == second && pthread_create(&th, NULL, self_kill, NULL) != 0)
        raise(SIGKILL);

    /* The ranks that must be left: all but the killed, ascending. */
    int32_t want[64];
    int nwant = 0;
    for (int q = 0; q < size; q++)
        if (q != victim && q != second)
            want[nwant++] = q;

    tutti_comm_t *cur = comm, *olds[1 + MAX_SHRINKS] = {comm};
    int nold = 1, bad = 0, nshrinks = 0;
    char why[1536] = "";
    const double ts0 = mn_now_real();
    double shrink_end = ts0;
    for (;;) {
        tutti_comm_t *nc = NULL;
        double ts = mn_now_real();
        st = tutti_comm_shrink(cur, NULL, 0, &nc);
        shrink_end = mn_now_real();
        if (rank == second) /* it dies now, from its thread, and takes part in nothing more */
            for (;;)
                pause();
        if (st == TUTTI_ERR_PEER_FAILED && second >= 0 &&
            strstr(tutti_last_error(), "has gone on") != NULL) {
            /* docs/shrink.md's limit: a death at the very end of a creation can end it on the
             * others and fail it here; this rank is then out and says so (the script allows
             * one such rank). */
            printf("verdict out rank %d: %s\n", rank, tutti_last_error());
            mn_touch(dir, "out", rank, "1");
            for (int i = nold - 1; i >= 0; i--)
                tutti_comm_destroy(olds[i]);
            return 0;
        }
        if (st != TUTTI_OK) {
            bad = 1;
            snprintf(why, sizeof why, "shrink #%d failed after %.3f s: %d (%s): %s",
                     nshrinks + 1, shrink_end - ts, st, tutti_strerror(st), tutti_last_error());
            break;
        }
        nshrinks++;
        fprintf(stderr, "rank %d: shrink #%d took %.3f s: now rank %d of %d\n", rank, nshrinks,
                shrink_end - ts, tutti_comm_rank(nc), tutti_comm_size(nc));
        cur = nc;
        olds[nold++] = nc;
        /* Fewer ranks than expected: a rank that is out (above) says so in a file, soon. */
        for (int i = 0; i < 250 && tutti_comm_size(nc) < nwant; i++) {
            int k = 0;
            for (int j = 0; j < nwant; j++) {
                char p[4200];
                snprintf(p, sizeof p, "%s/out.%d", dir, want[j]);
                if (access(p, F_OK) != 0)
                    want[k++] = want[j];
            }
            nwant = k;
            if (tutti_comm_size(nc) < nwant)
                usleep(20000);
        }
        int rc = check(nc, rank, want, nwant, why, sizeof why);
        if (rc == -1000) {
            bad = 1;
            break;
        }
        if (rc == TUTTI_OK)
            break;
        if (second < 0 || nshrinks == MAX_SHRINKS) {
            bad = 1;
            snprintf(why, sizeof why, "a collective on the communicator of shrink #%d failed: "
                     "%d (%s): %s", nshrinks, rc, tutti_strerror(rc), tutti_comm_last_error(nc));
            break;
        }
        fprintf(stderr, "rank %d: the communicator of shrink #%d failed (%s): shrinking again\n",
                rank, nshrinks, tutti_comm_last_error(nc));
    }
    if (bad)
        printf("verdict bad rank %d: %s\n", rank, why);
    else
        printf("verdict ok rank %d: shrunk to %d ranks in %.3f s (%d shrink%s; now rank %d; "
               "the kill seen %.2f s after it, %u allreduces before it: %s)\n",
               rank, tutti_comm_size(cur), shrink_end - ts0, nshrinks, nshrinks > 1 ? "s" : "",
               tutti_comm_rank(cur), at > 0 ? seen - at : -1.0, calls, first_err);

    /* The newest first; the failed ones return at once. */
    for (int i = nold - 1; i >= 0; i--) {
        double d0 = mn_now_real();
        st = tutti_comm_destroy(olds[i]);
        if (mn_now_real() - d0 > 10) {
            printf("verdict bad rank %d: tutti_comm_destroy of communicator %d took %.1f s\n",
                   rank, i, mn_now_real() - d0);
            bad = 1;
        }
        if (i == nold - 1 && i > 0 && !bad && st != TUTTI_OK) {
            printf("verdict bad rank %d: destroying the working shrunk communicator: %s\n", rank,
                   tutti_last_error());
            bad = 1;
        }
    }
    free(s);
    free(r);
    return bad;
}
