/* check_mismatch.c: ranks that post different collectives fail, every one of them, with
 * TUTTI_ERR_MISMATCH and a text that names both calls, on the direct (window) paths and on the
 * message paths, and never return TUTTI_OK with wrong data: allreduce 1000 vs 500 elements,
 * SUM vs MAX, fp32 vs int32, allreduce vs barrier, flagged lines vs a barrier, a mismatched
 * broadcast followed by correct allreduces, the ring's length mismatch (shm and ofi), alltoallv
 * pair counts that disagree (direct, cma, and the message path), fingerprints that differ only
 * above the 10 bits an ofi tag holds (TUTTI_FAULT_TAG_XOR; ofi and shm), allreduce_coalesced
 * whose buffers split one total differently, an empty call on one rank only (the text says
 * what numbers that differ mean), and a waiting rank
 * told of the mismatch by a rank that then exits at once. The communicator is failed
 * afterwards: the next call returns TUTTI_ERR_COMM_FAILED. */
#include <check.h>
#include "check_main.h"
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "tutti.h"

typedef struct mcase {
    const char *name;
    const char *tp;       /* TUTTI_TRANSPORT */
    const char *env;      /* one more NAME=VALUE, or NULL */
    int nranks;
    int odd;              /* the rank that posts the other call */
    int kind;             /* what differs, see post() */
    const char *want[3];  /* what the text must hold: [0] the call of the others, [1] the odd
                             rank's, [2] more that every rank's must (NULL: nothing) */
    int own_only;         /* 1, message paths: a rank that read the other call's message knows
                             only its own call fully (the other's by length and fingerprint);
                             2: only rank 0 (the receiver of the odd block) holds want[1] */
    int odd_may_pass;     /* the odd rank's own call was whole (an alltoallv sender over
                             messages cannot see that its receiver expects another length): it
                             may return TUTTI_OK, and its next calls must fail */
    int stays;            /* > 0 (1 + a rank): every other rank exits the moment it has its
                             error, without destroying the communicator, as a program may on
                             any error; this rank must still be told of the mismatch, not of a
                             death */
    int late;             /* > 0 (1 + a rank): that rank posts its call 0.3 s after the others,
                             who have met the mismatch by then */
} mcase_t;

enum { COUNT, OP, DTYPE, VS_BARRIER, LL_VS_BARRIER, BCAST_ROOT, SEQ_SKIP, VCOUNTS, WIN_VS_MSG,
       TAG_HIGH, EMPTY_THEN_WIN, COALESCED, COALESCED_NBUFS };

static const mcase_t cases[] = {
    {"allreduce 1000 vs 500", "shm", NULL, 2, 1, COUNT, {"1000 fp32", "500 fp32"}, 0, 0, 0, 0},
    {"allreduce sum vs max", "shm", NULL, 2, 1, OP, {"sum", "max"}, 0, 0, 0, 0},
    {"allreduce fp32 vs int32", "shm", NULL, 2, 1, DTYPE, {"fp32", "int32"}, 0, 0, 0, 0},
    {"allreduce vs barrier", "shm", NULL, 2, 1, VS_BARRIER, {"allreduce", "barrier"}, 0, 0, 0, 0},
    {"allreduce lines vs barrier", "shm", NULL, 2, 1, LL_VS_BARRIER, {"of 8 fp32", "of 64 fp32"}, 0, 0, 0, 0},
    {"bcast root, then allreduces", "shm", NULL, 2, 1, BCAST_ROOT, {"root 0", "root 1"}, 0, 0, 0, 0},
    {"allreduce 1000 vs 500, 3 ranks", "shm", NULL, 3, 2, COUNT, {"1000 fp32", "500 fp32"}, 0, 0, 0, 0},
    /* Rank 0 comes late and reads rank 1's failure word first: rank 1 found the mismatch with
     * rank 2, and rank 0 must still name rank 2 and its call (CI once saw it name neither) */
    {"allreduce 1000 vs 500, 3 ranks, rank 0 late", "shm", NULL, 3, 2, COUNT,
     {"1000 fp32", "500 fp32"}, 0, 0, 0, 1 + 0},
    {"a skipped empty call", "shm", NULL, 2, 1, SEQ_SKIP, {"#1 ", "#2 ", "0 elements"}, 0, 0, 0, 0},
    /* The others' call goes by messages (the ring), the odd rank's empty one meets no one and
     * its next one waits in the window: both waited out the timeout, each for a call the other
     * was not in, until a message wait looked for a peer already in a later window call. */
    {"an empty call, then a window call", "shm", "CCL_ALLREDUCE=ring:1024-max", 2, 1,
     EMPTY_THEN_WIN, {"1000 fp32", "8 fp32"}, 1, 0, 0, 0},
    {"an empty call, then a window call, 3 ranks", "shm", "CCL_ALLREDUCE=ring:1024-max", 3, 2,
     EMPTY_THEN_WIN, {"1000 fp32", "8 fp32"}, 1, 0, 0, 0},
    /* alltoallv: the odd rank sends 3 elements to rank 0, which expects 5 (window paths
     * compare each pair's counts; the message path compares lengths) */
    {"alltoallv counts (direct)", "shm", NULL, 2, 1, VCOUNTS, {"alltoallv", "sends 3 elements"}, 2, 0, 0, 0},
    {"alltoallv counts (cma)", "shm", "CCL_ALLTOALL=cma", 2, 1, VCOUNTS,
     {"alltoallv", "sends 3 elements"}, 2, 0, 0, 0},
    {"alltoallv counts (pairwise, ofi)", "ofi", NULL, 2, 1, VCOUNTS, {"alltoallv", NULL}, 1, 1, 0, 0},
    /* the odd rank alone sets the ring for allreduce (a per-rank CCL_ALLREDUCE): the others
     * wait in the window, it waits for messages */
    {"direct vs ring (per-rank setting)", "shm", NULL, 2, 1, WIN_VS_MSG, {"(direct)", "(ring)"}, 1, 0, 0, 0},
    {"direct vs ring, 3 ranks", "shm", NULL, 3, 2, WIN_VS_MSG, {"(direct)", "(ring)"}, 1, 0, 0, 0},
    {"ring 1000 vs 500 (shm)", "shm", "CCL_ALLREDUCE=ring", 2, 1, COUNT, {"1000 fp32", "500 fp32"}, 1, 0, 0, 0},
    {"ring 1000 vs 500 (ofi)", "ofi", "CCL_ALLREDUCE=ring", 2, 1, COUNT, {"1000 fp32", "500 fp32"}, 1, 0, 0, 0},
    /* 3 ranks over messages: rank 1 never meets the odd rank's call; it learns of the
     * mismatch from a notice, which names the pair that differs */
    {"ring 1000 vs 500, 3 ranks (ofi)", "ofi", "CCL_ALLREDUCE=ring", 3, 2, COUNT,
     {"1000 fp32", "500 fp32"}, 1, 0, 0, 0},
    {"ring 1000 vs 500, 3 ranks (shm)", "shm", "CCL_ALLREDUCE=ring", 3, 2, COUNT,
     {"1000 fp32", "500 fp32"}, 1, 0, 0, 0},
    /* Rank 1 waits for rank 0's second message in the ring; rank 0 found the mismatch (with
     * rank 2) and exits at once: its notice and the end of its connections come together, and
     * rank 1 must report the mismatch, the cause, not the exit */
    {"ring, 3 ranks, the finder exits at once (shm)", "shm", "CCL_ALLREDUCE=ring", 3, 2, COUNT,
     {"1000 fp32", "500 fp32"}, 1, 0, 1 + 1, 0},
    {"ring, 3 ranks, the finder exits at once (ofi)", "ofi", "CCL_ALLREDUCE=ring", 3, 2, COUNT,
     {"1000 fp32", "500 fp32"}, 1, 0, 1 + 1, 0},
    {"tree sum vs max (ofi)", "ofi", "CCL_ALLREDUCE=tree", 2, 1, OP, {"sum", "max"}, 1, 0, 0, 0},
    /* The odd rank's messages carry a fingerprint that differs from the others' only above its
     * low 10 bits (TUTTI_FAULT_TAG_XOR=0x400), which is all that fits in an ofi tag: only a
     * transport that compares the whole 32 bits (ofi's CQ data, shm's header) can tell. */
    {"fingerprint differs above bit 9 (ring, ofi)", "ofi", "CCL_ALLREDUCE=ring", 2, 1, TAG_HIGH,
     {"expected tag", NULL}, 0, 0, 0, 0},
    {"fingerprint differs above bit 9 (ring, shm)", "shm", "CCL_ALLREDUCE=ring", 2, 1, TAG_HIGH,
     {"fingerprint", NULL}, 0, 0, 0, 0},
    /* allreduce_coalesced whose buffers split the same total differently ({4, 4} against
     * {2, 6}; {4, 4} against {8}): only the total was compared, and each rank's buffers were
     * reduced against the other's, OK on both */
    {"coalesced layouts (direct)", "shm", NULL, 2, 1, COALESCED,
     {"allreduce_coalesced", "split the total alike"}, 0, 0, 0, 0},
    {"coalesced buffer counts (direct)", "shm", NULL, 2, 1, COALESCED_NBUFS,
     {"allreduce_coalesced", "split the total alike"}, 0, 0, 0, 0},
    {"coalesced layouts (ring, ofi)", "ofi", "CCL_ALLREDUCE=ring", 2, 1, COALESCED,
     {"allreduce_coalesced", NULL}, 1, 0, 0, 0},
};

/* post runs the call rank posts in case mc; returns its status. */
static tutti_status_t post(const mcase_t *mc, int rank, tutti_comm_t *comm, float *x, float *y)
{
    const int odd = rank == mc->odd;
    switch (mc->kind) {
    case COUNT:
        return tutti_allreduce(x, y, odd ? 500 : 1000, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
    case OP:
        return tutti_allreduce(x, y, 8, TUTTI_FLOAT32, odd ? TUTTI_MAX : TUTTI_SUM, comm, NULL);
    case DTYPE:
        return tutti_allreduce(x, y, 1000, odd ? TUTTI_INT32 : TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
    case VS_BARRIER:
        return odd ? tutti_barrier(comm, NULL)
                   : tutti_allreduce(x, y, 1000, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
    case LL_VS_BARRIER: /* 32 bytes go as flagged lines, 256 through the small area's barrier */
        return tutti_allreduce(x, y, odd ? 64 : 8, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
    case BCAST_ROOT:
        return tutti_broadcast(y, 1000, TUTTI_FLOAT32, odd ? 1 : 0, comm, NULL);
    case SEQ_SKIP:
        /* The odd rank posts an empty allreduce first (it runs nowhere, but takes number 1),
         * then the real one, number 2, against the others' number 1. */
        if (odd && tutti_allreduce(x, y, 0, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL) != TUTTI_OK)
            return TUTTI_ERR_INTERNAL;
        return tutti_allreduce(x, y, 1000, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
    case EMPTY_THEN_WIN:
        if (odd && tutti_allreduce(x, y, 0, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL) != TUTTI_OK)
            return TUTTI_ERR_INTERNAL;
        return tutti_allreduce(x, y, odd ? 8 : 1000, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
    case WIN_VS_MSG:
        if (odd && tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLREDUCE, "ring") != TUTTI_OK)
            return TUTTI_ERR_INTERNAL;
        return tutti_allreduce(x, y, 1000, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
    case TAG_HIGH: /* the fingerprint was changed at creation (body) */
        return tutti_allreduce(x, y, 1000, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
    case COALESCED:
    case COALESCED_NBUFS: {
        const void *sb[2] = {x, x + 100};
        void *rb[2] = {y, y + 100};
        size_t c[2] = {4, 4};
        if (odd && mc->kind == COALESCED)
            c[0] = 2, c[1] = 6;
        if (odd && mc->kind == COALESCED_NBUFS)
            c[0] = 8;
        return tutti_allreduce_coalesced(sb, rb, c, odd && mc->kind == COALESCED_NBUFS ? 1 : 2,
                                         TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
    }
    case VCOUNTS: {
        size_t sc[2] = {5, 5}, sd[2] = {0, 8}, rc[2] = {5, 5}, rd[2] = {0, 8};
        if (odd)
            sc[0] = 3;
        return tutti_alltoallv(x, sc, sd, y, rc, rd, TUTTI_FLOAT32, comm, NULL);
    }
    }
    return TUTTI_ERR_INTERNAL;
}

static int body(int rank, int size, void *arg)
{
    const mcase_t *mc = arg;
    tutti_comm_t *comm = NULL;
    if (mc->kind == TAG_HIGH && rank == mc->odd)
        setenv("TUTTI_FAULT_TAG_XOR", "1024", 1);
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_OK)
        return th_fail("tutti_comm_init_env: %s", tutti_last_error());
    float *x = malloc(1000 * sizeof *x), *y = malloc(1000 * sizeof *y);
    for (int i = 0; i < 1000; i++)
        x[i] = y[i] = (float)(rank + 1);
    /* #0: everyone starts in step (but a fingerprint changed for all calls would fail the
     * barrier too, over messages) */
    st = mc->kind == TAG_HIGH ? TUTTI_OK : tutti_barrier(comm, NULL);
    /* A rank still finishing the barrier when the others have gone on and met the mismatch
     * may get their notice there: the communicator fails as a whole, at once (the same rule as
     * NCCL's asynchronous errors), and the error must say so. */
    const int early = st == TUTTI_ERR_MISMATCH && rank != mc->odd;
    if (st != TUTTI_OK && !early)
        return th_fail("barrier: %s", tutti_comm_last_error(comm));
    if (mc->late > 0 && rank == mc->late - 1)
        usleep(300 * 1000);
    double t0 = th_now();
    if (!early)
        st = post(mc, rank, comm, x, y);
    double dt = th_now() - t0;
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", tutti_comm_last_error(comm));
    int bad = 0;
    if (st == TUTTI_OK && mc->odd_may_pass && rank == mc->odd) {
        fprintf(stderr, "[%s] rank %d: its own call was whole and returned OK\n", mc->name, rank);
        for (int k = 0; k < 3; k++) {
            float one = 1, sum = 0;
            st = tutti_allreduce(&one, &sum, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
            if (st == TUTTI_OK)
                bad = th_fail("%s: allreduce %d after the peer's mismatch returned OK", mc->name, k);
        }
        tutti_comm_destroy(comm);
        free(x);
        free(y);
        return bad;
    }
    if (st != TUTTI_ERR_MISMATCH)
        bad = th_fail("%s: expected TUTTI_ERR_MISMATCH, got %d (%s) after %.2f s: %s", mc->name,
                      st, tutti_strerror(st), dt, msg);
    /* The rank that differs is always named, and this rank's own call; a rank that was not
     * part of the pair that met names the pair it was told about. */
    if (!th_mentions_rank(msg, mc->odd))
        bad = th_fail("%s: the text does not name rank %d: \"%s\"", mc->name, mc->odd, msg);
    for (int i = 0; i < 3 && !early; i++)
        if (mc->want[i] != NULL &&
            (!mc->own_only || (mc->own_only == 1 ? i == (rank == mc->odd) : i == 0 || rank == 0)) &&
            strstr(msg, mc->want[i]) == NULL)
            bad = th_fail("%s: the text does not hold \"%s\": \"%s\"", mc->name, mc->want[i], msg);
    /* The rank that compared both calls says that only their algorithms differ. */
    if (mc->kind == WIN_VS_MSG && strncmp(msg, "mismatched collectives:", 23) == 0 &&
        strstr(msg, "only the algorithms differ") == NULL)
        bad = th_fail("%s: the text does not say only the algorithms differ: \"%s\"", mc->name,
                      msg);
    if (dt > 10)
        bad = th_fail("%s: found after %.1f s, not before the timeout", mc->name, dt);
    fprintf(stderr, "[%s] rank %d: %.3f s%s: %s\n", mc->name, rank, dt,
            early ? " (in the barrier before)" : "", msg);
    if (mc->stays > 0 && rank != mc->stays - 1) {
        fflush(NULL);
        _exit(bad ? 1 : 0);
    }
    /* Nothing later may succeed on stale state: the three correct allreduces after a bad
     * broadcast (which used to return OK with every element wrong) now fail at once. */
    for (int k = 0; k < 3; k++) {
        float one = 1, sum = 0;
        st = tutti_allreduce(&one, &sum, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
        if (st != TUTTI_ERR_COMM_FAILED)
            bad = th_fail("%s: allreduce %d after the mismatch: expected TUTTI_ERR_COMM_FAILED, "
                          "got %d (%s), sum %g", mc->name, k, st, tutti_strerror(st), sum);
    }
    tutti_comm_destroy(comm);
    free(x);
    free(y);
    (void)size;
    return bad;
}

START_TEST(test_mismatch)
{
    const mcase_t *mc = &cases[_i];
    char before[256][256];
    int nbefore = th_shm_snapshot(before, 256);
    th_opts_t o = TH_OPTS_INIT;
    o.transport = mc->tp;
    o.timeout_s = 40;
    o.rank_timeout_s = 20;
    o.env[0] = mc->env;
    ck_assert_msg(th_run_opts(mc->nranks, &o, body, (void *)mc) == 0, "%s on %s: see stderr",
                  mc->name, mc->tp);
    ck_assert_int_eq(th_shm_new(before, nbefore), 0);
}
END_TEST

/* The failure's ERROR line on stderr, and none with CCL_LOG_LEVEL=none (a program that reports
 * the calls' errors itself: the status and text are all it gets). _i: 0 default, 1 none. */
static int log_body(int rank, int size, void *arg)
{
    (void)size;
    const bool quiet = arg != NULL;
    if (quiet)
        setenv("CCL_LOG_LEVEL", "none", 1);
    else
        unsetenv("CCL_LOG_LEVEL");
    char path[] = "/tmp/tutti-logXXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return th_fail("mkstemp: %s", strerror(errno));
    unlink(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    float x[8] = {0}, y[8];
    if (st == TUTTI_OK)
        st = tutti_allreduce(x, y, rank == 1 ? 4 : 8, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char text[8192] = "";
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    text[n > 0 ? n : 0] = '\0';
    int bad = 0;
    if (st != TUTTI_ERR_MISMATCH)
        bad = th_fail("log %s: expected TUTTI_ERR_MISMATCH, got %s: %s", quiet ? "none" : "default",
                      tutti_strerror(st), tutti_last_error());
    const bool logged = strstr(text, " ERROR: ") != NULL;
    if (quiet && logged)
        bad = th_fail("CCL_LOG_LEVEL=none, yet stderr has: %s", text);
    if (!quiet && !logged)
        bad = th_fail("the default level logged no ERROR line for the mismatch: \"%s\"", text);
    if (comm != NULL)
        tutti_comm_destroy(comm);
    return bad;
}

START_TEST(test_log_level)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 40;
    ck_assert_msg(th_run_opts(2, &o, log_body, _i ? (void *)1 : NULL) == 0, "see stderr");
}
END_TEST

static Suite *mismatch_suite(void)
{
    Suite *s = suite_create("mismatch");
    TCase *tc = tcase_create("mismatch");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_mismatch, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_loop_test(tc, test_log_level, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(mismatch_suite)
