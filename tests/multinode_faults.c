/* multinode_faults.c: one rank of a job across the hosts of scripts/cluster.sh that runs a
 * stream of one collective family, checking every result exactly, until a fault that
 * tests/multinode.sh (part "faults") injects from outside: a SIGKILL or SIGSTOP of a rank, or a
 * cut of a host's link. Each rank then says on stdout whether what it saw is right:
 *
 *   multinode_faults FAMILY COUNT DIR CAUSE VICTIMS
 *
 * FAMILY: allreduce, allgather, alltoall, reduce_scatter, bcast, reduce or barrier; COUNT
 * elements per rank (fp32). DIR is a directory every host sees (the hosts share the machine's
 * file system): each rank writes DIR/pid.R and, once the job is set up, DIR/ready.R; the script
 * writes DIR/fault_at (CLOCK_REALTIME, which all hosts share) just before the fault, and each
 * rank that got its error writes DIR/done.R (the script continues a stopped rank once the
 * others are done). CAUSE is what the error must say: "died", "unresponsive" or
 * "unreachable"; VICTIMS the ranks it must name (comma-separated; a rank in it is a victim and
 * only reports what it got, unless CAUSE is "unreachable": then every rank is a survivor and
 * must name a rank of the list that is not on its own side, given as "A|B": ranks on side A
 * name one of B and the other way round).
 *
 * A survivor prints "verdict ok rank R: ..." when its call failed with TUTTI_ERR_PEER_FAILED
 * within 10 s of the fault (TUTTI_TIMEOUT=20), its text names the cause (or says that a peer's
 * communicator failed, which a peer's notice reports) and every call before the fault returned
 * the exact result; else "verdict bad rank R: ...". A call that returns TUTTI_OK with a wrong
 * result prints "verdict bad ... wrong result". Exit 0 on ok, 1 on bad, 2 on setup errors.
 *
 *   multinode_faults lastsend DIR
 *
 * Rank 0's last act is an eager send to the first rank of host 1, then the end of its
 * communicator with the timeout lowered to 1 s (as tutti_torch ends a group in 2 s); the script
 * cuts host 1's link once every rank wrote DIR/ready.R, writes DIR/go, and restores the link
 * seconds later. The receiver prints "verdict ok" when the message arrived whole: before, rank
 * 0 ended 1 s after the send, and the message, still on its way, was lost.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "multinode_files.h"
#include "tutti.h"

#define NFAM 7
static const char *const fams[NFAM] = {"allreduce", "allgather", "alltoall", "reduce_scatter",
                                       "bcast", "reduce", "barrier"};

/* val is rank r's input element i of call k: small integers, exact in any summation order. */
static float val(int r, size_t i, unsigned k) { return (float)((r + 1) * 3 + (int)((i + k) % 5)); }

/* one runs call k and checks its result; TUTTI_ERR_INTERNAL: a wrong result reported as OK. */
static tutti_status_t one(int fam, tutti_comm_t *comm, int rank, int size, size_t n, float *x,
                          float *y, unsigned k, char *why, size_t whylen)
{
    for (size_t i = 0; i < n * (size_t)size; i++)
        x[i] = val(rank, i, k);
    tutti_status_t st;
    switch (fam) {
    case 0: st = tutti_allreduce(x, y, n, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL); break;
    case 1: st = tutti_allgather(x, y, n, TUTTI_FLOAT32, comm, NULL); break;
    case 2: st = tutti_alltoall(x, y, n, TUTTI_FLOAT32, comm, NULL); break;
    case 3: st = tutti_reduce_scatter(x, y, n, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL); break;
    case 4:
        memcpy(y, x, n * sizeof *y);
        st = tutti_broadcast(y, n, TUTTI_FLOAT32, 0, comm, NULL);
        break;
    case 5: st = tutti_reduce(x, y, n, TUTTI_FLOAT32, TUTTI_SUM, 0, comm, NULL); break;
    default: st = tutti_barrier(comm, NULL); break;
    }
    if (st != TUTTI_OK || fam == 6 || (fam == 5 && rank != 0))
        return st;
    size_t len = fam == 1 || fam == 2 ? n * (size_t)size : n;
    for (size_t j = 0; j < len; j++) {
        float want = 0;
        size_t blk = j / n, i = j % n;
        switch (fam) {
        case 0: case 5:
            for (int r = 0; r < size; r++) want += val(r, i, k);
            break;
        case 1: want = val((int)blk, i, k); break;                        /* rank blk's block */
        case 2: want = val((int)blk, (size_t)rank * n + i, k); break;     /* its block for me */
        case 3:
            for (int r = 0; r < size; r++) want += val(r, (size_t)rank * n + i, k);
            break;
        case 4: want = val(0, i, k); break;
        }
        if (y[j] != want) {
            snprintf(why, whylen, "%s #%u returned TUTTI_OK with element %zu = %g, expected %g",
                     fams[fam], k, j, (double)y[j], (double)want);
            return TUTTI_ERR_INTERNAL;
        }
    }
    return TUTTI_OK;
}

/* in_list tells whether rank r is among the comma-separated ranks of s (up to '|' or the end). */
static int in_list(const char *s, int r)
{
    while (*s && *s != '|') {
        char *e;
        long v = strtol(s, &e, 10);
        if (e == s)
            return 0;
        if (v == r)
            return 1;
        s = *e == ',' ? e + 1 : e;
    }
    return 0;
}

/* names_one tells whether text names a rank of the list s. */
static int names_one(const char *text, const char *s, int size)
{
    for (int r = 0; r < size; r++)
        if (in_list(s, r) && th_mentions_rank(text, r))
            return 1;
    return 0;
}

/* names_all tells whether text names every rank of the list s: by th_mentions_rank, or as an
 * entry "R (pid" of a list of silent ranks ("ranks 2 (pid 11), 3 (pid 12)"). */
static int names_all(const char *text, const char *s, int size)
{
    for (int r = 0; r < size; r++) {
        if (!in_list(s, r) || th_mentions_rank(text, r))
            continue;
        char pat[32];
        int found = 0, len = snprintf(pat, sizeof pat, "%d (pid ", r);
        for (const char *p = text; !found && (p = strstr(p, pat)) != NULL; p += len)
            found = p > text && p[-1] == ' ';
        if (!found)
            return 0;
    }
    return 1;
}

static int last_send(const char *dir)
{
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK) {
        printf("verdict bad: init: %s\n", tutti_last_error());
        return 2;
    }
    int rank = tutti_comm_rank(comm), size = tutti_comm_size(comm), peer = size / 2;
    unsigned char b[1024];
    memset(b, 1, sizeof b);
    tutti_status_t st = TUTTI_OK; /* a first message: the two are connected before the cut */
    if (rank == 0)
        st = tutti_send(b, sizeof b, TUTTI_UINT8, peer, 1, comm, NULL);
    else if (rank == peer)
        st = tutti_recv(b, sizeof b, TUTTI_UINT8, 0, 1, comm, NULL);
    if (st != TUTTI_OK) {
        printf("verdict bad rank %d: setup: %s\n", rank, tutti_comm_last_error(comm));
        return 2;
    }
    mn_touch(dir, "ready", rank, "1");
    int rc = 0;
    if (rank == 0) {
        char go[4096];
        snprintf(go, sizeof go, "%s/go", dir);
        for (int i = 0; i < 600 && access(go, F_OK) != 0; i++)
            usleep(50000);
        for (size_t i = 0; i < sizeof b; i++)
            b[i] = (unsigned char)(i * 7 + 3);
        st = tutti_send(b, sizeof b, TUTTI_UINT8, peer, 2, comm, NULL);
        printf("verdict %s rank 0: the send returned %d\n", st == TUTTI_OK ? "ok" : "bad", st);
        rc = st != TUTTI_OK;
        tutti_comm_set_timeout(comm, 1.0);
    } else if (rank == peer) {
        memset(b, 0, sizeof b);
        st = tutti_recv(b, sizeof b, TUTTI_UINT8, 0, 2, comm, NULL);
        size_t bad = 0;
        for (size_t i = 0; st == TUTTI_OK && i < sizeof b; i++)
            bad += b[i] != (unsigned char)(i * 7 + 3);
        if (st == TUTTI_OK && bad == 0)
            printf("verdict ok rank %d: the message arrived whole\n", rank);
        else
            printf("verdict bad rank %d: %d (%s), %zu bytes wrong\n", rank, st,
                   st == TUTTI_OK ? "" : tutti_comm_last_error(comm), bad);
        rc = st != TUTTI_OK || bad != 0;
    }
    tutti_comm_destroy(comm);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "lastsend") == 0)
        return last_send(argv[2]);
    if (argc != 6) {
        fprintf(stderr, "usage: multinode_faults FAMILY COUNT DIR died|unresponsive|unreachable VICTIMS\n");
        return 2;
    }
    int fam = 0;
    while (fam < NFAM && strcmp(fams[fam], argv[1]) != 0)
        fam++;
    size_t n = strtoul(argv[2], NULL, 10);
    const char *dir = argv[3], *cause = argv[4], *victims = argv[5];
    if (fam == NFAM || n == 0)
        return 2;
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_OK) {
        printf("verdict bad: init: %s\n", tutti_last_error());
        return 2;
    }
    int rank = tutti_comm_rank(comm), size = tutti_comm_size(comm);
    char buf[8192];
    snprintf(buf, sizeof buf, "%d", (int)getpid());
    mn_touch(dir, "pid", rank, buf);
    float *x = malloc(n * (size_t)size * sizeof *x), *y = malloc(n * (size_t)size * sizeof *y);
    if (x == NULL || y == NULL || tutti_barrier(comm, NULL) != TUTTI_OK) {
        printf("verdict bad rank %d: setup: %s\n", rank, tutti_comm_last_error(comm));
        return 2;
    }
    mn_touch(dir, "ready", rank, "1");

    const int cut = strcmp(cause, "unreachable") == 0;
    const char *bar = strchr(victims, '|');
    /* a cut: ranks of side A must name one of side B and the other way round */
    const int victim = !cut && in_list(victims, rank);
    const char *others = !cut ? victims : in_list(victims, rank) ? bar + 1 : victims;
    const double t0 = mn_now_real();
    unsigned k = 0;
    char why[512] = "";
    for (;; k++) {
        st = one(fam, comm, rank, size, n, x, y, k, why, sizeof why);
        if (st == TUTTI_ERR_INTERNAL) {
            printf("verdict bad rank %d: wrong result: %s\n", rank, why);
            fflush(stdout);
            mn_touch(dir, "done", rank, "wrong");
            return 1;
        }
        if (st != TUTTI_OK)
            break;
        if (mn_now_real() - t0 > 40) {
            printf("verdict bad rank %d: %s went on for 40 s: the fault was not seen\n", rank,
                   fams[fam]);
            return 1;
        }
    }
    double seen = mn_now_real();
    snprintf(buf, sizeof buf, "%s", tutti_comm_last_error(comm));
    mn_touch(dir, "done", rank, "1");
    double at = 0;
    char p[4096];
    snprintf(p, sizeof p, "%s/fault_at", dir);
    for (int i = 0; i < 100 && at == 0; i++) { /* the script writes it just before the fault */
        FILE *f = fopen(p, "r");
        if (f == NULL || fscanf(f, "%lf", &at) != 1)
            at = 0;
        if (f)
            fclose(f);
        if (at == 0)
            usleep(20000);
    }
    double lag = at > 0 ? seen - at : -1;
    /* 10 s, or 8 s past a longer TUTTI_UNRESPONSIVE */
    const char *ur = getenv("TUTTI_UNRESPONSIVE");
    const double lag_max = ur != NULL && atof(ur) > 2 ? 8 + atof(ur) : 10;
    int bad = 0;
    char verdict[256] = "";
    if (victim) {
        snprintf(verdict, sizeof verdict, "the victim, continued");
    } else if (st != TUTTI_ERR_PEER_FAILED) {
        bad = 1;
        snprintf(verdict, sizeof verdict, "expected TUTTI_ERR_PEER_FAILED, got %s",
                 tutti_strerror(st));
    } else if (at == 0 || lag > lag_max) {
        bad = 1;
        snprintf(verdict, sizeof verdict, "the error came %.1f s after the fault (limit %.0f s)",
                 lag, lag_max);
    } else if (strstr(buf, "communicator failed (") == NULL &&
               (strstr(buf, cause) == NULL || !names_one(buf, others, size))) {
        bad = 1;
        snprintf(verdict, sizeof verdict, "the error does not say that rank(s) %.*s %s",
                 (int)(bar && others == victims ? bar - victims : (long)strlen(others)), others,
                 cause);
    } else if (cut && strstr(buf, "unresponsive") != NULL && !names_all(buf, others, size)) {
        /* the ranks behind a cut link fell silent together: each must be named (one was left
         * out when its last heartbeat had come a beat after the other's) */
        bad = 1;
        snprintf(verdict, sizeof verdict, "the error does not name every rank of %.*s",
                 (int)(bar && others == victims ? bar - victims : (long)strlen(others)), others);
    }
    printf("verdict %s rank %d: %s after %u calls, %.2f s after the fault%s%s: %s\n",
           bad ? "bad" : "ok", rank, tutti_strerror(st), k, lag, *verdict ? ": " : "", verdict,
           buf);
    fflush(stdout);
    double d0 = mn_now_real();
    tutti_comm_destroy(comm);
    if (mn_now_real() - d0 > 10) {
        printf("verdict bad rank %d: tutti_comm_destroy took %.1f s\n", rank, mn_now_real() - d0);
        bad = 1;
    }
    free(x);
    free(y);
    return bad;
}
