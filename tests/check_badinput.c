/* check_badinput.c: bad input gets a clear error and changes nothing: bad arguments to every
 * call, dead or destroyed communicators, a forked child's inherited one, and bootstraps that
 * cannot succeed. */
#include <arpa/inet.h>
#include <errno.h>
#include <check.h>
#include "check_main.h"
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tutti.h"

/* ---- status texts and names (no communicator) -------------------------------------------------- */

START_TEST(test_strerror)
{
    static const struct {
        int code;
        const char *text;
    } codes[] = {
#define X_(name, value, text) {value, text},
        TUTTI_STATUS_MAP(X_)
#undef X_
    };
    const char *unknown = tutti_strerror((tutti_status_t)12345);
    ck_assert_msg(unknown != NULL && unknown[0] != '\0', "tutti_strerror(12345) is empty");
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *t = tutti_strerror((tutti_status_t)codes[i].code);
        ck_assert_msg(t != NULL && strcmp(t, codes[i].text) == 0,
                      "tutti_strerror(%d) = \"%s\", expected \"%s\"", codes[i].code,
                      t ? t : "(NULL)", codes[i].text);
        ck_assert_msg(strcmp(t, unknown) != 0, "tutti_strerror(%d) reads like an unknown code",
                      codes[i].code);
    }
    static const int others[] = {2, 3, -13, -100, 1000000, -2147483647};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        const char *t = tutti_strerror((tutti_status_t)others[i]);
        ck_assert_msg(t != NULL && t[0] != '\0', "tutti_strerror(%d) is empty", others[i]);
    }
}
END_TEST

START_TEST(test_names)
{
    static const char *const dn[] = {"int8", "uint8", "int32", "int64", "fp16", "bf16", "fp32", "fp64"};
    static const size_t ds[] = {1, 1, 4, 8, 2, 2, 4, 8};
    for (int d = 0; d < TUTTI_DTYPE_COUNT; d++) {
        ck_assert_str_eq(tutti_dtype_name((tutti_dtype_t)d), dn[d]);
        ck_assert_uint_eq(tutti_dtype_size((tutti_dtype_t)d), ds[d]);
    }
    ck_assert_str_eq(tutti_dtype_name((tutti_dtype_t)99), "unknown");
    ck_assert_str_eq(tutti_dtype_name((tutti_dtype_t)-1), "unknown");
    ck_assert_uint_eq(tutti_dtype_size((tutti_dtype_t)99), 0);
    ck_assert_uint_eq(tutti_dtype_size((tutti_dtype_t)-1), 0);
    static const char *const on[] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};
    for (int o = 0; o < TUTTI_OP_COUNT; o++)
        ck_assert_str_eq(tutti_op_name((tutti_op_t)o), on[o]);
    ck_assert_str_eq(tutti_op_name((tutti_op_t)99), "unknown");
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", TUTTI_VERSION_MAJOR, TUTTI_VERSION_MINOR, TUTTI_VERSION_PATCH);
    ck_assert_str_eq(tutti_version(), v);
}
END_TEST

/* ---- bad arguments on a healthy communicator --------------------------------------------------- */

#define NB 64 /* bytes of every test buffer */

typedef struct bctx {
    tutti_comm_t *comm;
    int rank, size;
    unsigned char S[NB], R[NB], snapS[NB], snapR[NB];
    tutti_work_t *w;
    uint64_t seq0;
    int bad;
} bctx_t;

static void arm(bctx_t *c)
{
    for (int i = 0; i < NB; i++) {
        c->S[i] = (unsigned char)(i * 7 + 1);
        c->R[i] = (unsigned char)(0xa0 ^ i);
    }
    memcpy(c->snapS, c->S, NB);
    memcpy(c->snapR, c->R, NB);
    c->w = NULL;
    c->seq0 = tutti_comm_seq(c->comm);
}

/* expect checks one failing call: the status, the error texts, and that nothing changed. */
static void expect(bctx_t *c, const char *what, tutti_status_t got, tutti_status_t want, bool comm_ok)
{
    if (got != want) {
        c->bad = th_fail("%s: expected %d (%s), got %d (%s)", what, want, tutti_strerror(want), got,
                         tutti_strerror(got));
        return;
    }
    const char *t = tutti_last_error();
    if (t == NULL || t[0] == '\0')
        c->bad = th_fail("%s: returned %s but tutti_last_error() is empty", what, tutti_strerror(got));
    if (comm_ok) {
        const char *ct = tutti_comm_last_error(c->comm);
        if (ct == NULL || ct[0] == '\0')
            c->bad = th_fail("%s: returned %s but tutti_comm_last_error() is empty", what,
                             tutti_strerror(got));
        if (tutti_comm_seq(c->comm) != c->seq0)
            c->bad = th_fail("%s: the failed call moved tutti_comm_seq from %llu to %llu", what,
                             (unsigned long long)c->seq0,
                             (unsigned long long)tutti_comm_seq(c->comm));
    }
    if (memcmp(c->R, c->snapR, NB) != 0)
        c->bad = th_fail("%s: the failed call wrote the output buffer", what);
    if (memcmp(c->S, c->snapS, NB) != 0)
        c->bad = th_fail("%s: the failed call wrote the input buffer", what);
    if (c->w != NULL)
        c->bad = th_fail("%s: the failed call stored a work handle", what);
}

/* BAD(want, call): arm the buffers, make the call (which may use c->S, c->R, &c->w), check. */
#define BAD(want, call)                                                                            \
    do {                                                                                           \
        arm(c);                                                                                    \
        expect(c, #call, (call), (want), true);                                                    \
    } while (0)

#define INV TUTTI_ERR_INVALID_ARG

static void bad_collectives(bctx_t *c)
{
    tutti_comm_t *comm = c->comm;
    const size_t huge = SIZE_MAX / 2;
    const int P = c->size;
    size_t counts[TH_MAX_RANKS], displs[TH_MAX_RANKS];
    for (int r = 0; r < P; r++) {
        counts[r] = 1;
        displs[r] = (size_t)r;
    }

    /* allreduce */
    BAD(INV, tutti_allreduce(NULL, c->R, 4, TUTTI_FLOAT32, TUTTI_SUM, comm, &c->w));
    BAD(INV, tutti_allreduce(c->S, NULL, 4, TUTTI_FLOAT32, TUTTI_SUM, comm, &c->w));
    BAD(INV, tutti_allreduce(TUTTI_IN_PLACE, NULL, 4, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL));
    BAD(INV, tutti_allreduce(c->S, c->R, huge, TUTTI_FLOAT32, TUTTI_SUM, comm, &c->w));
    BAD(INV, tutti_allreduce(c->S, c->R, SIZE_MAX / 8 + 1, TUTTI_FLOAT64, TUTTI_SUM, comm, NULL));
    BAD(INV, tutti_allreduce(c->S, c->R, 4, (tutti_dtype_t)99, TUTTI_SUM, comm, &c->w));
    BAD(INV, tutti_allreduce(c->S, c->R, 4, (tutti_dtype_t)-1, TUTTI_SUM, comm, &c->w));
    BAD(INV, tutti_allreduce(c->S, c->R, 4, TUTTI_DTYPE_COUNT, TUTTI_SUM, comm, &c->w));
    BAD(INV, tutti_allreduce(c->S, c->R, 4, TUTTI_FLOAT32, (tutti_op_t)99, comm, &c->w));
    BAD(INV, tutti_allreduce(c->S, c->R, 4, TUTTI_FLOAT32, TUTTI_OP_COUNT, comm, NULL));
    BAD(INV, tutti_allreduce(c->S, c->R, 4, TUTTI_FLOAT32, TUTTI_BAND, comm, &c->w));
    BAD(INV, tutti_allreduce(c->S, c->R, 4, TUTTI_BFLOAT16, TUTTI_BXOR, comm, &c->w));
    BAD(INV, tutti_allreduce(c->S, c->R, 4, TUTTI_INT32, TUTTI_AVG, comm, &c->w));
    BAD(INV, tutti_allreduce(c->S, c->R, 4, TUTTI_UINT8, TUTTI_AVG, comm, NULL));

    /* reduce_scatter */
    BAD(INV, tutti_reduce_scatter(NULL, c->R, 2, TUTTI_INT32, TUTTI_SUM, comm, &c->w));
    BAD(INV, tutti_reduce_scatter(c->S, NULL, 2, TUTTI_INT32, TUTTI_SUM, comm, &c->w));
    BAD(INV, tutti_reduce_scatter(c->S, c->R, huge, TUTTI_FLOAT32, TUTTI_SUM, comm, &c->w));
    BAD(INV, tutti_reduce_scatter(c->S, c->R, SIZE_MAX / 8 + 1, TUTTI_FLOAT64, TUTTI_SUM, comm,
                                  &c->w));
    if (P > 1) /* fits one rank's block, not the whole input */
        BAD(INV, tutti_reduce_scatter(c->S, c->R, SIZE_MAX / 2 / (size_t)P + 1, TUTTI_INT8,
                                      TUTTI_SUM, comm, &c->w));
    BAD(INV, tutti_reduce_scatter(c->S, c->R, 2, TUTTI_INT32, TUTTI_AVG, comm, &c->w));
    BAD(INV, tutti_reduce_scatter(c->S, c->R, 2, TUTTI_FLOAT64, TUTTI_BOR, comm, &c->w));
    BAD(INV, tutti_reduce_scatter(c->S, c->R, 2, (tutti_dtype_t)99, TUTTI_SUM, comm, &c->w));

    /* reduce */
    BAD(INV, tutti_reduce(NULL, c->R, 4, TUTTI_FLOAT32, TUTTI_SUM, 0, comm, &c->w));
    if (c->rank == 0)
        BAD(INV, tutti_reduce(c->S, NULL, 4, TUTTI_FLOAT32, TUTTI_SUM, 0, comm, &c->w));
    BAD(INV, tutti_reduce(c->S, c->R, 4, TUTTI_FLOAT32, TUTTI_SUM, -1, comm, &c->w));
    BAD(INV, tutti_reduce(c->S, c->R, 4, TUTTI_FLOAT32, TUTTI_SUM, P, comm, &c->w));
    BAD(INV, tutti_reduce(c->S, c->R, huge, TUTTI_FLOAT32, TUTTI_SUM, 0, comm, &c->w));
    BAD(INV, tutti_reduce(c->S, c->R, 4, TUTTI_FLOAT32, TUTTI_BXOR, 0, comm, &c->w));
    BAD(INV, tutti_reduce(c->S, c->R, 4, TUTTI_INT64, TUTTI_AVG, 0, comm, &c->w));
    BAD(INV, tutti_reduce(c->S, c->R, 4, TUTTI_INT64, (tutti_op_t)99, 0, comm, &c->w));

    /* broadcast */
    BAD(INV, tutti_broadcast(NULL, 4, TUTTI_FLOAT32, 0, comm, &c->w));
    BAD(INV, tutti_broadcast(c->R, 4, TUTTI_FLOAT32, -1, comm, &c->w));
    BAD(INV, tutti_broadcast(c->R, 4, TUTTI_FLOAT32, P, comm, &c->w));
    BAD(INV, tutti_broadcast(c->R, huge, TUTTI_FLOAT32, 0, comm, &c->w));
    BAD(INV, tutti_broadcast(c->R, 4, (tutti_dtype_t)99, 0, comm, &c->w));

    /* allgather, allgatherv */
    BAD(INV, tutti_allgather(NULL, c->R, 2, TUTTI_INT32, comm, &c->w));
    BAD(INV, tutti_allgather(c->S, NULL, 2, TUTTI_INT32, comm, &c->w));
    BAD(INV, tutti_allgather(c->S, c->R, huge, TUTTI_FLOAT32, comm, &c->w));
    BAD(INV, tutti_allgather(c->S, c->R, SIZE_MAX / 8 + 1, TUTTI_FLOAT64, comm, &c->w));
    if (P > 1)
        BAD(INV, tutti_allgather(c->S, c->R, SIZE_MAX / 2 / (size_t)P + 1, TUTTI_INT8, comm, &c->w));
    if (P > 1)
        BAD(INV, tutti_alltoall(c->S, c->R, SIZE_MAX / 2 / (size_t)P + 1, TUTTI_INT8, comm, &c->w));
    BAD(INV, tutti_allgather(c->S, c->R, 2, (tutti_dtype_t)99, comm, &c->w));
    if (c->rank > 0) { /* sendbuf == recvbuf: the start of recvbuf receives rank 0's block (a
                        * single-copy allgather gave the peers rank 0's block for this rank's) */
        BAD(INV, tutti_allgather(c->R, c->R, 2, TUTTI_INT32, comm, &c->w));
        if (strstr(tutti_last_error(), "TUTTI_IN_PLACE") == NULL)
            c->bad = th_fail("allgather with sendbuf == recvbuf: the error does not say what in "
                             "place is: \"%s\"", tutti_last_error());
        BAD(INV, tutti_allgatherv(c->R, 1, c->R, counts, displs, TUTTI_INT32, comm, &c->w));
    }
    BAD(INV, tutti_allgatherv(c->S, 1, c->R, NULL, NULL, TUTTI_INT32, comm, &c->w));
    BAD(INV, tutti_allgatherv(c->S, 2, c->R, counts, NULL, TUTTI_INT32, comm, &c->w));
    BAD(INV, tutti_allgatherv(NULL, 1, c->R, counts, NULL, TUTTI_INT32, comm, &c->w));
    BAD(INV, tutti_allgatherv(c->S, 1, NULL, counts, displs, TUTTI_INT32, comm, &c->w));
    BAD(INV, tutti_allgatherv(c->S, 1, c->R, counts, NULL, (tutti_dtype_t)99, comm, &c->w));
    {
        size_t hc[TH_MAX_RANKS];
        for (int r = 0; r < P; r++)
            hc[r] = huge;
        BAD(INV, tutti_allgatherv(c->S, huge, c->R, hc, NULL, TUTTI_FLOAT32, comm, &c->w));
    }
    if (P > 1) { /* receive blocks that share elements: the last rank's on the first's */
        size_t oc[TH_MAX_RANKS], od[TH_MAX_RANKS];
        for (int r = 0; r < P; r++)
            oc[r] = 2, od[r] = 2 * (size_t)r;
        od[P - 1] = 1;
        BAD(INV, tutti_allgatherv(c->S, 2, c->R, oc, od, TUTTI_INT8, comm, &c->w));
        BAD(INV, tutti_alltoallv(c->S, oc, NULL, c->R, oc, od, TUTTI_INT8, comm, &c->w));
    }

    /* alltoall, alltoallv */
    BAD(INV, tutti_alltoall(NULL, c->R, 2, TUTTI_INT32, comm, &c->w));
    BAD(INV, tutti_alltoall(c->S, NULL, 2, TUTTI_INT32, comm, &c->w));
    BAD(INV, tutti_alltoall(c->S, c->R, huge, TUTTI_FLOAT32, comm, &c->w));
    BAD(INV, tutti_alltoall(c->S, c->R, 2, (tutti_dtype_t)99, comm, &c->w));
    BAD(INV, tutti_alltoallv(c->S, NULL, NULL, c->R, counts, NULL, TUTTI_INT32, comm, &c->w));
    BAD(INV, tutti_alltoallv(c->S, counts, NULL, c->R, NULL, NULL, TUTTI_INT32, comm, &c->w));
    BAD(INV, tutti_alltoallv(NULL, counts, NULL, c->R, counts, NULL, TUTTI_INT32, comm, &c->w));
    BAD(INV, tutti_alltoallv(c->S, counts, NULL, NULL, counts, NULL, TUTTI_INT32, comm, &c->w));
    BAD(INV, tutti_alltoallv(c->S, counts, NULL, c->R, counts, NULL, (tutti_dtype_t)99, comm,
                             &c->w));
    {
        /* The block a rank sends itself must be as long as the one it receives from itself: a
         * longer receive count once read past the send block (issue 15: SIGSEGV in memcpy).
         * Both ways, with layouts that are otherwise fine. */
        size_t sc[TH_MAX_RANKS], rc[TH_MAX_RANKS];
        for (int r = 0; r < P; r++)
            sc[r] = rc[r] = 1;
        rc[c->rank] = 4;
        BAD(INV, tutti_alltoallv(c->S, sc, NULL, c->R, rc, NULL, TUTTI_INT32, comm, &c->w));
        BAD(INV, tutti_alltoallv(c->S, rc, NULL, c->R, sc, NULL, TUTTI_INT32, comm, NULL));
        arm(c);
        expect(c, "alltoallv with an unequal own block",
               tutti_alltoallv(c->S, sc, NULL, c->R, rc, NULL, TUTTI_INT32, comm, &c->w), INV,
               true);
        if (strstr(tutti_last_error(), "sendcounts") == NULL ||
            !th_mentions_number(tutti_last_error(), 4))
            c->bad = th_fail("alltoallv with an unequal own block: the error names neither the "
                             "counts nor their values: \"%s\"", tutti_last_error());
    }

    /* TUTTI_IN_PLACE where memory is needed: a receive buffer, or both buffers (the library
     * wrote through address 1 and the process died) */
    void *const ip = (void *)TUTTI_IN_PLACE;
    BAD(INV, tutti_allreduce(c->S, ip, 4, TUTTI_FLOAT32, TUTTI_SUM, comm, &c->w));
    BAD(INV, tutti_allreduce(ip, ip, 4, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL));
    BAD(INV, tutti_allgather(c->S, ip, 1, TUTTI_FLOAT32, comm, &c->w));
    BAD(INV, tutti_allgather(ip, ip, 1, TUTTI_FLOAT32, comm, NULL));
    BAD(INV, tutti_allgatherv(c->S, 1, ip, counts, displs, TUTTI_FLOAT32, comm, &c->w));
    BAD(INV, tutti_alltoall(c->S, ip, 1, TUTTI_FLOAT32, comm, &c->w));
    BAD(INV, tutti_alltoallv(ip, counts, displs, ip, counts, displs, TUTTI_FLOAT32, comm, NULL));
    BAD(INV, tutti_reduce_scatter(c->S, ip, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, &c->w));
    BAD(INV, tutti_reduce(c->S, ip, 4, TUTTI_FLOAT32, TUTTI_SUM, c->rank, comm, &c->w));
    BAD(INV, tutti_broadcast(ip, 1, TUTTI_INT8, 0, comm, &c->w));
    {
        const void *sbufs[1] = {c->S};
        void *rbufs[1] = {ip};
        size_t n1[1] = {4};
        BAD(INV, tutti_allreduce_coalesced(sbufs, rbufs, n1, 1, TUTTI_FLOAT32, TUTTI_SUM, comm,
                                           &c->w));
    }
    {
        /* receive buffers that overlap where one has a send buffer of its own: the later's
         * result overwrote part of the earlier's (in place, one input, one result: allowed) */
        const void *sbufs[3] = {c->S, c->S + 16, TUTTI_IN_PLACE};
        void *rbufs[3] = {c->R + 8, c->R, c->R + 48};
        size_t n3[3] = {2, 8, 2}; /* rbufs[1], bytes 0-31, holds rbufs[0], bytes 8-15 */
        BAD(INV, tutti_allreduce_coalesced(sbufs, rbufs, n3, 3, TUTTI_FLOAT32, TUTTI_SUM, comm,
                                           &c->w));
        rbufs[0] = c->R + 24; /* bytes 24-31: the end of rbufs[1] */
        BAD(INV, tutti_allreduce_coalesced(sbufs, rbufs, n3, 3, TUTTI_FLOAT32, TUTTI_SUM, comm,
                                           &c->w));
    }
    if (P > 1) {
        BAD(INV, tutti_send(ip, 1, TUTTI_INT8, (c->rank + 1) % P, 0, comm, &c->w));
        BAD(INV, tutti_recv(ip, 1, TUTTI_INT8, (c->rank + 1) % P, 0, comm, &c->w));
    }

    /* send / recv */
    BAD(INV, tutti_send(NULL, 4, TUTTI_INT8, 0, 0, comm, &c->w));
    BAD(INV, tutti_recv(NULL, 4, TUTTI_INT8, 0, 0, comm, &c->w));
    BAD(INV, tutti_send(c->S, 4, TUTTI_INT8, -1, 0, comm, &c->w));
    BAD(INV, tutti_send(c->S, 4, TUTTI_INT8, P, 0, comm, &c->w));
    BAD(INV, tutti_recv(c->R, 4, TUTTI_INT8, -1, 0, comm, &c->w));
    BAD(INV, tutti_recv(c->R, 4, TUTTI_INT8, P, 0, comm, &c->w));
    BAD(INV, tutti_send(c->S, 4, TUTTI_INT8, 0, -1, comm, &c->w));
    BAD(INV, tutti_send(c->S, 4, TUTTI_INT8, 0, INT_MIN, comm, &c->w));
    BAD(INV, tutti_recv(c->R, 4, TUTTI_INT8, 0, -1, comm, &c->w));
    BAD(INV, tutti_recv(c->R, 4, TUTTI_INT8, TUTTI_ANY_SOURCE, INT_MIN, comm, &c->w));
    /* any source is for receives only; -3 is no rank; a job of one rank has no other sender */
    BAD(INV, tutti_send(c->S, 4, TUTTI_INT8, TUTTI_ANY_SOURCE, 0, comm, &c->w));
    BAD(INV, tutti_recv(c->R, 4, TUTTI_INT8, -3, 0, comm, &c->w));
    if (P == 1)
        BAD(INV, tutti_recv(c->R, 4, TUTTI_INT8, TUTTI_ANY_SOURCE, 0, comm, &c->w));
    /* and they say so (the send to any source said "peer -2 is out of range"; a receive from
     * this rank, "sending to oneself") */
    if (tutti_send(c->S, 4, TUTTI_INT8, TUTTI_ANY_SOURCE, 0, comm, NULL) != INV ||
        strstr(tutti_last_error(), "TUTTI_ANY_SOURCE is for receives") == NULL)
        c->bad = th_fail("a send to TUTTI_ANY_SOURCE: \"%s\"", tutti_last_error());
    if (tutti_recv(c->R, 4, TUTTI_INT8, c->rank, 0, comm, NULL) != INV ||
        strstr(tutti_last_error(), "receiving from oneself") == NULL)
        c->bad = th_fail("a receive from this rank: \"%s\"", tutti_last_error());
    BAD(INV, tutti_send(c->S, huge, TUTTI_FLOAT32, 0, 0, comm, &c->w));
    BAD(INV, tutti_recv(c->R, 4, (tutti_dtype_t)99, 0, 0, comm, &c->w));

    /* algorithm overrides */
    BAD(INV, tutti_comm_set_algorithm(comm, (tutti_coll_t)99, "ring"));
    BAD(INV, tutti_comm_set_algorithm(comm, TUTTI_COLL_COUNT, "ring"));
    BAD(INV, tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLREDUCE, "ring:10-5"));
    BAD(INV, tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLREDUCE, "ring:0-"));
    BAD(INV, tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLREDUCE, "ring;tree")); /* tree: dead */
    BAD(INV, tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLREDUCE, "tree:0-100;ring:50-max"));
    if (tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLREDUCE, "tree:0-100;ring:200-max") !=
            TUTTI_OK ||
        tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLREDUCE, "auto") != TUTTI_OK)
        c->bad = th_fail("ranges with a gap were refused: %s", tutti_comm_last_error(comm));
    BAD(INV, tutti_comm_set_algorithm(comm, TUTTI_COLL_BCAST, "ring")); /* ring is not a bcast */
    if (tutti_comm_algorithm(comm, (tutti_coll_t)99, 8) != NULL)
        c->bad = th_fail("tutti_comm_algorithm(coll 99) is not NULL");
}

static void bad_work_calls(bctx_t *c)
{
    int done = 7;
    tutti_status_t st = tutti_work_wait(NULL, 0);
    if (st >= 0)
        c->bad = th_fail("tutti_work_wait(NULL) returned %d, expected an error", st);
    st = tutti_work_test(NULL, &done);
    if (st >= 0)
        c->bad = th_fail("tutti_work_test(NULL) returned %d, expected an error", st);
    st = tutti_work_status(NULL);
    if (st >= 0)
        c->bad = th_fail("tutti_work_status(NULL) returned %d, expected an error", st);
    if (tutti_work_error(NULL) == NULL)
        c->bad = th_fail("tutti_work_error(NULL) returned NULL");
    /* A NaN timeout once made tutti_work_wait spin until the operation ended: it is refused,
     * and the operation goes on. The peers post the barrier only once that wait has returned
     * (or after 10 s, which the old spin would have waited out), so it is still running. */
    tutti_work_t *w = NULL;
    if (c->size > 1 && c->rank == 0) {
        st = tutti_barrier(c->comm, &w);
        if (st != TUTTI_OK) {
            c->bad = th_fail("barrier post: %d (%s)", st, tutti_comm_last_error(c->comm));
        } else {
            double t0 = th_now();
            st = tutti_work_wait(w, (double)NAN);
            if (st != TUTTI_ERR_INVALID_ARG || strstr(tutti_last_error(), "NaN") == NULL)
                c->bad = th_fail("tutti_work_wait(w, NaN) returned %d (%s), expected "
                                 "TUTTI_ERR_INVALID_ARG naming NaN", st, tutti_last_error());
            if (th_now() - t0 > 5)
                c->bad = th_fail("tutti_work_wait(w, NaN) took %.2f s", th_now() - t0);
            __atomic_store_n(&th_shared()->slots[0], 1, __ATOMIC_RELEASE);
            st = tutti_work_wait(w, -1.0);
            if (st != TUTTI_OK)
                c->bad = th_fail("the barrier after wait(NaN): %d (%s)", st, tutti_work_error(w));
            tutti_work_free(w);
        }
    } else if (c->size > 1) {
        for (double t0 = th_now();
             __atomic_load_n(&th_shared()->slots[0], __ATOMIC_ACQUIRE) == 0 && th_now() - t0 < 10;)
            usleep(1000);
        st = tutti_barrier(c->comm, NULL);
        if (st != TUTTI_OK)
            c->bad = th_fail("barrier: %d (%s)", st, tutti_comm_last_error(c->comm));
    }
    static const double bad_timeouts[] = {0.0, -1.0, 1e-300, 1e-4, 2e9, (double)INFINITY,
                                          (double)NAN};
    for (size_t i = 0; i < sizeof bad_timeouts / sizeof bad_timeouts[0]; i++) {
        st = tutti_comm_set_timeout(c->comm, bad_timeouts[i]);
        if (st != TUTTI_ERR_INVALID_ARG)
            c->bad = th_fail("tutti_comm_set_timeout(%g) returned %d, expected INVALID_ARG",
                             bad_timeouts[i], st);
    }
    tutti_work_free(NULL);
    st = tutti_comm_init_env(NULL, NULL);
    if (st != TUTTI_ERR_INVALID_ARG)
        c->bad = th_fail("tutti_comm_init_env(NULL, NULL) returned %d, expected INVALID_ARG", st);
}

/* calls on comm, which is NULL or destroyed: all TUTTI_ERR_INVALID_COMM, nothing touched */
static void dead_handle_calls(bctx_t *c, tutti_comm_t *comm, const char *which)
{
    const tutti_status_t IC = TUTTI_ERR_INVALID_COMM;
    size_t counts[TH_MAX_RANKS];
    for (int r = 0; r < TH_MAX_RANKS; r++)
        counts[r] = 1;
#define CALL(x)                                                                                    \
    do {                                                                                           \
        arm(c);                                                                                    \
        tutti_status_t st_ = (x);                                                                  \
        char what[200];                                                                            \
        snprintf(what, sizeof what, "%s on a %s communicator", #x, which);                         \
        expect(c, what, st_, IC, false);                                                           \
    } while (0)
    CALL(tutti_allreduce(c->S, c->R, 4, TUTTI_FLOAT32, TUTTI_SUM, comm, &c->w));
    CALL(tutti_allgather(c->S, c->R, 1, TUTTI_FLOAT32, comm, &c->w));
    CALL(tutti_allgatherv(c->S, 1, c->R, counts, NULL, TUTTI_FLOAT32, comm, &c->w));
    CALL(tutti_alltoall(c->S, c->R, 1, TUTTI_FLOAT32, comm, &c->w));
    CALL(tutti_alltoallv(c->S, counts, NULL, c->R, counts, NULL, TUTTI_FLOAT32, comm, &c->w));
    CALL(tutti_reduce_scatter(c->S, c->R, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, &c->w));
    CALL(tutti_broadcast(c->R, 4, TUTTI_FLOAT32, 0, comm, &c->w));
    CALL(tutti_reduce(c->S, c->R, 4, TUTTI_FLOAT32, TUTTI_SUM, 0, comm, &c->w));
    CALL(tutti_barrier(comm, &c->w));
    CALL(tutti_send(c->S, 4, TUTTI_INT8, 0, 0, comm, &c->w));
    CALL(tutti_recv(c->R, 4, TUTTI_INT8, 0, 0, comm, &c->w));
    CALL(tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLREDUCE, "ring"));
    CALL(tutti_comm_destroy(comm));
#undef CALL
    if (tutti_comm_rank(comm) != -1 || tutti_comm_size(comm) != -1 ||
        tutti_comm_local_rank(comm) != -1 || tutti_comm_local_size(comm) != -1 ||
        tutti_comm_node_count(comm) != -1)
        c->bad = th_fail("getters on a %s communicator do not all return -1", which);
    if (tutti_comm_transport(comm, 0) != NULL)
        c->bad = th_fail("tutti_comm_transport on a %s communicator is not NULL", which);
    if (tutti_comm_algorithm(comm, TUTTI_COLL_ALLREDUCE, 8) != NULL)
        c->bad = th_fail("tutti_comm_algorithm on a %s communicator is not NULL", which);
    const char *t = tutti_comm_last_error(comm);
    if (t == NULL || t[0] != '\0')
        c->bad = th_fail("tutti_comm_last_error on a %s communicator is \"%s\", expected \"\"",
                         which, t ? t : "(NULL)");
}

static int bad_args_rank(int rank, int size, void *arg)
{
    (void)arg;
    bctx_t cx, *c = &cx;
    memset(c, 0, sizeof *c);
    c->rank = rank;
    c->size = size;
    tutti_status_t st = tutti_comm_init_env(NULL, &c->comm);
    if (st != TUTTI_OK)
        return th_fail("tutti_comm_init_env: %d (%s): %s", st, tutti_strerror(st), tutti_last_error());
    bad_collectives(c);
    bad_work_calls(c);

    /* count 0 with NULL buffers is no error, and the communicator still works after all that */
    arm(c);
    st = tutti_allreduce(NULL, NULL, 0, TUTTI_FLOAT32, TUTTI_SUM, c->comm, NULL);
    if (st != TUTTI_OK)
        c->bad = th_fail("allreduce of 0 elements with NULL buffers: %d (%s): %s", st,
                         tutti_strerror(st), tutti_comm_last_error(c->comm));
    arm(c);
    st = tutti_allreduce(c->S, c->R, 4, TUTTI_INT32, TUTTI_SUM, c->comm, NULL);
    int32_t want[4];
    for (int i = 0; i < 4; i++) {
        int32_t s;
        memcpy(&s, c->S + 4 * i, 4);
        want[i] = (int32_t)((uint32_t)s * (uint32_t)size);
    }
    if (st != TUTTI_OK)
        c->bad = th_fail("a good allreduce after bad calls: %d (%s): %s", st, tutti_strerror(st),
                         tutti_comm_last_error(c->comm));
    else if (memcmp(c->R, want, sizeof want) != 0)
        c->bad = th_fail("a good allreduce after bad calls gave a wrong result");
    if (tutti_comm_seq(c->comm) != c->seq0 + 1)
        c->bad = th_fail("tutti_comm_seq %llu after the good allreduce, expected %llu",
                         (unsigned long long)tutti_comm_seq(c->comm),
                         (unsigned long long)c->seq0 + 1);

    tutti_comm_t *dead = c->comm;
    st = tutti_comm_destroy(dead);
    if (st != TUTTI_OK)
        c->bad = th_fail("tutti_comm_destroy: %d (%s): %s", st, tutti_strerror(st), tutti_last_error());
    dead_handle_calls(c, dead, "destroyed");
    dead_handle_calls(c, NULL, "NULL");
    return c->bad;
}

START_TEST(test_bad_args)
{
    static const char *const tps[] = {"shm", "ofi"};
    int rc = th_run(_i == 0 ? 1 : 2, tps[_i % 2], 40, bad_args_rank, NULL);
    ck_assert_msg(rc == 0, "bad arguments (%d ranks, %s): see stderr", _i == 0 ? 1 : 2, tps[_i % 2]);
}
END_TEST

/* ---- a communicator whose peer died --------------------------------------------------------- */

static int failed_comm_rank(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    bctx_t cx, *c = &cx;
    memset(c, 0, sizeof *c);
    c->rank = rank;
    tutti_status_t st = tutti_comm_init_env(NULL, &c->comm);
    if (st != TUTTI_OK)
        return th_fail("tutti_comm_init_env: %d (%s): %s", st, tutti_strerror(st), tutti_last_error());
    st = tutti_barrier(c->comm, NULL);
    if (st != TUTTI_OK)
        return th_fail("barrier: %d (%s): %s", st, tutti_strerror(st), tutti_comm_last_error(c->comm));
    if (rank == 1) {
        usleep(300000);
        _exit(0); /* dies without destroying: its connections close without a goodbye */
    }
    double t0 = th_now();
    for (;;) {
        arm(c);
        st = tutti_allreduce(c->S, c->R, 4, TUTTI_FLOAT32, TUTTI_SUM, c->comm, NULL);
        if (st != TUTTI_OK)
            break;
        if (th_now() - t0 > 15)
            return th_fail("allreduce kept succeeding 15 s after rank 1 left");
    }
    if (st != TUTTI_ERR_PEER_FAILED)
        c->bad = th_fail("allreduce with rank 1 dead: expected TUTTI_ERR_PEER_FAILED, got %d (%s): %s",
                         st, tutti_strerror(st), tutti_comm_last_error(c->comm));
    if (th_now() - t0 > 10)
        c->bad = th_fail("noticing the dead peer took %.1f s", th_now() - t0);
    /* from now on: TUTTI_ERR_COMM_FAILED, at once, touching nothing */
    double t1 = th_now();
    arm(c);
    expect(c, "allreduce on a failed communicator",
           tutti_allreduce(c->S, c->R, 4, TUTTI_FLOAT32, TUTTI_SUM, c->comm, &c->w),
           TUTTI_ERR_COMM_FAILED, false);
    arm(c);
    expect(c, "broadcast on a failed communicator",
           tutti_broadcast(c->R, 4, TUTTI_FLOAT32, 0, c->comm, &c->w), TUTTI_ERR_COMM_FAILED, false);
    arm(c);
    expect(c, "barrier on a failed communicator", tutti_barrier(c->comm, &c->w),
           TUTTI_ERR_COMM_FAILED, false);
    arm(c);
    expect(c, "send on a failed communicator", tutti_send(c->S, 4, TUTTI_INT8, 1, 0, c->comm, &c->w),
           TUTTI_ERR_COMM_FAILED, false);
    const char *t = tutti_comm_last_error(c->comm);
    if (t == NULL || t[0] == '\0')
        c->bad = th_fail("tutti_comm_last_error on the failed communicator is empty");
    if (th_now() - t1 > 10) /* at once, in fact: the point is not the 60 s timeout */
        c->bad = th_fail("calls on the failed communicator took %.1f s", th_now() - t1);
    t1 = th_now();
    st = tutti_comm_destroy(c->comm);
    if (th_now() - t1 > 10)
        c->bad = th_fail("tutti_comm_destroy on the failed communicator took %.1f s (returned %d)",
                         th_now() - t1, st);
    return c->bad;
}

START_TEST(test_failed_comm)
{
    static const char *const tps[] = {"shm", "ofi"};
    th_opts_t o = TH_OPTS_INIT;
    o.transport = tps[_i];
    o.timeout_s = 40;
    o.rank_timeout_s = 30;
    ck_assert_msg(th_run_opts(2, &o, failed_comm_rank, NULL) == 0,
                  "failed communicator on %s: see stderr", tps[_i]);
}
END_TEST

/* ---- a child of fork() and its parent's communicator ----------------------------------------- */

/* The child inherits the handle but none of the worker threads, and its calls would join the
 * parent's on the wire (a false mismatch, or the parent's buffer overwritten): every call the
 * child makes with it is refused at once, saying why, destroy included (it used to hang there);
 * the parents go on as if nothing happened; a child may still create a communicator of its own. */
static int forked_rank(int rank, int size, void *arg)
{
    (void)arg;
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK)
        return th_fail("tutti_comm_init_env: %s", tutti_last_error());
    float x = 1, y = 0;
    if (tutti_allreduce(&x, &y, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL) != TUTTI_OK || y != size)
        return th_fail("allreduce before the fork: %s", tutti_comm_last_error(comm));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int bad = 0;
        double t0 = th_now();
        float cx = 5, cy = -1;
        tutti_status_t st = tutti_allreduce(&cx, &cy, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
        if (st != TUTTI_ERR_INVALID_COMM || strstr(tutti_last_error(), "fork") == NULL)
            bad = th_fail("child of rank %d: allreduce on the parent's communicator: expected "
                          "TUTTI_ERR_INVALID_COMM naming the fork, got %d: %s",
                          rank, st, tutti_last_error());
        if (cy != -1)
            bad = th_fail("child of rank %d: the refused allreduce wrote its output", rank);
        tutti_work_t *w = NULL;
        st = tutti_allreduce(&cx, &cy, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, &w);
        if (st != TUTTI_ERR_INVALID_COMM || w != NULL)
            bad = th_fail("child of rank %d: async allreduce: expected TUTTI_ERR_INVALID_COMM, got %d",
                          rank, st);
        st = tutti_comm_destroy(comm);
        if (st != TUTTI_ERR_INVALID_COMM || strstr(tutti_last_error(), "fork") == NULL)
            bad = th_fail("child of rank %d: destroy of the parent's communicator: expected "
                          "TUTTI_ERR_INVALID_COMM naming the fork, got %d: %s",
                          rank, st, tutti_last_error());
        if (th_now() - t0 > 5)
            bad = th_fail("child of rank %d: the refusals took %.1f s", rank, th_now() - t0);
        fflush(NULL);
        _exit(bad ? 1 : 0);
    }
    int bad = 0;
    if (pid < 0)
        return th_fail("fork: %s", strerror(errno));
    int ws = 0;
    if (waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        bad = th_fail("rank %d: its child failed (status 0x%x): see above", rank, ws);
    for (int k = 0; k < 3; k++) {
        x = (float)(rank + 1);
        y = 0;
        tutti_status_t st = tutti_allreduce(&x, &y, 1, TUTTI_FLOAT32, TUTTI_SUM, comm, NULL);
        if (st != TUTTI_OK || y != (float)(size * (size + 1) / 2))
            bad = th_fail("rank %d: allreduce %d after the child: %d, %g: %s", rank, k, st, y,
                          tutti_comm_last_error(comm));
    }
    if (tutti_comm_destroy(comm) != TUTTI_OK)
        bad = th_fail("rank %d: destroy: %s", rank, tutti_last_error());
    return bad;
}

START_TEST(test_forked_child)
{
    static const char *const tps[] = {"shm", "ofi"};
    th_opts_t o = TH_OPTS_INIT;
    o.transport = tps[_i];
    o.timeout_s = 40;
    o.rank_timeout_s = 20;
    ck_assert_msg(th_run_opts(2, &o, forked_rank, NULL) == 0,
                  "a forked child and the parent's communicator (%s): see stderr", tps[_i]);
}
END_TEST

/* ---- bootstraps that cannot succeed -------------------------------------------------------- */

static int port_in_use_rank(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    /* under torchrun (its agent's store on MASTER_PORT) tutti's store takes the next odd port:
     * that one in use must be named, with TUTTI_STORE_PORT, not MASTER_PORT alone */
    bool agent = arg != NULL;
    int port = atoi(getenv("MASTER_PORT"));
    if (agent) {
        setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
        port += port % 2 == 0 ? 1 : 2;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons((uint16_t)port);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0)
        return th_fail("could not occupy port %d for the test", port);
    setenv("WORLD_SIZE", "2", 1);
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    double dt = th_now() - t0;
    close(fd);
    int bad = 0;
    const char *msg = tutti_last_error();
    if (st != TUTTI_ERR_BOOTSTRAP)
        bad = th_fail("MASTER_PORT=%d in use: expected TUTTI_ERR_BOOTSTRAP, got %d (%s): %s", port,
                      st, tutti_strerror(st), msg);
    if (st == TUTTI_OK)
        tutti_comm_destroy(comm);
    if (!th_mentions_number(msg, (unsigned long long)port))
        bad = th_fail("port %d in use: the error does not name the port: \"%s\"", port, msg);
    if (agent && strstr(msg, "TUTTI_STORE_PORT") == NULL)
        bad = th_fail("port %d in use under torchrun: the error does not say that it was derived "
                      "from MASTER_PORT, or name TUTTI_STORE_PORT: \"%s\"", port, msg);
    if (dt > 5)
        bad = th_fail("MASTER_PORT=%d in use: failing took %.1f s", port, dt);
    return bad;
}

START_TEST(test_port_in_use)
{
    th_opts_t o = TH_OPTS_INIT;
    o.timeout_s = 20;
    o.rank_timeout_s = 3;
    static int agent = 1;
    ck_assert_msg(th_run_opts(1, &o, port_in_use_rank, _i ? &agent : NULL) == 0,
                  "port in use%s: see stderr", _i ? " (torchrun's next odd port)" : "");
}
END_TEST

static int missing_rank_rank(int rank, int size, void *arg)
{
    bool early = *(const bool *)arg;
    if (early && rank == 1)
        setenv("TUTTI_TIMEOUT", "1", 1); /* rank 1 gives up first; rank 0 has 15 s */
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    double dt = th_now() - t0;
    int bad = 0;
    const char *msg = tutti_last_error();
    if (st != TUTTI_ERR_BOOTSTRAP)
        bad = th_fail("rank %d of %d, rank 2 never started: expected TUTTI_ERR_BOOTSTRAP, got %d "
                      "(%s): %s", rank, size, st, tutti_strerror(st), msg);
    if (st == TUTTI_OK)
        tutti_comm_destroy(comm);
    if (!th_mentions_rank(msg, 2))
        bad = th_fail("rank 2 never started: the error does not name rank 2: \"%s\"", msg);
    if (dt > 8)
        bad = th_fail("rank 2 never started, rank %d's TUTTI_TIMEOUT=%s: failing took %.1f s",
                      rank, getenv("TUTTI_TIMEOUT"), dt);
    return bad;
}

/* Rank 2 never starts: every rank fails with TUTTI_ERR_BOOTSTRAP naming it, those that wait
 * longest included, whose rendezvous ends when the first rank to give up tells the store why
 * (cases 2, 3: rank 1's timeout is 1 s, rank 0's 15 s; before, its hang-up alone ended it,
 * and rank 0 said only that rank 1 had hung up). */
START_TEST(test_missing_rank)
{
    static const char *const tps[] = {"shm", "ofi"};
    bool early = _i >= 2;
    th_opts_t o = TH_OPTS_INIT;
    o.transport = tps[_i % 2];
    o.timeout_s = 25;
    o.rank_timeout_s = early ? 15 : 2;
    o.nstart = 2;
    ck_assert_msg(th_run_opts(3, &o, missing_rank_rank, &early) == 0,
                  "a rank that never arrives (%s%s): see stderr", tps[_i % 2],
                  early ? ", rank 1 gives up first" : "");
}
END_TEST

/* A rank whose launcher passed no MASTER_ADDR (mpiexec -f hosts across nodes) tries 127.0.0.1;
 * when nothing answers there, the error says that the address was a default. */
START_TEST(test_master_addr_unset)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0); /* a port nobody listens on: bound, not listening */
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ck_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    char port[16];
    snprintf(port, sizeof port, "%d", ntohs(a.sin_port));
    unsetenv("MASTER_ADDR");
    setenv("MASTER_PORT", port, 1);
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("TUTTI_TIMEOUT", "1", 1);
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    close(fd);
    ck_assert_msg(st == TUTTI_ERR_BOOTSTRAP, "got %d: %s", st, tutti_last_error());
    ck_assert_msg(strstr(tutti_last_error(), "MASTER_ADDR was not set") != NULL,
                  "the error does not say MASTER_ADDR was a default: %s", tutti_last_error());
    setenv("MASTER_ADDR", "127.0.0.1", 1); /* set, the hint must not appear */
    st = tutti_comm_init_env(NULL, &comm);
    ck_assert_msg(st == TUTTI_ERR_BOOTSTRAP && strstr(tutti_last_error(), "was not set") == NULL,
                  "got %d: %s", st, tutti_last_error());
}
END_TEST

/* Rank 1 started with another WORLD_SIZE: the store refuses it at once, and the ranks already
 * waiting learn from the store that the rendezvous cannot end (TUTTI_ERR_BOOTSTRAP, naming the
 * cause; it was TUTTI_ERR_PEER_FAILED, which says a peer failed and invites a shrink) instead of
 * waiting for their timeout (60 s here, past the harness's 40 s). */
static int size_differs_rank(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    if (rank == 1)
        setenv("WORLD_SIZE", "2", 1);
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    const char *msg = tutti_last_error();
    int bad = 0;
    tutti_status_t want = TUTTI_ERR_BOOTSTRAP; /* a launch's mistake: no peer failed */
    if (st != want)
        bad = th_fail("rank %d, rank 1 with WORLD_SIZE=2: expected %s, got %d (%s): %s", rank,
                      tutti_strerror(want), st, tutti_strerror(st), msg);
    else if (strstr(msg, "WORLD_SIZE differs") == NULL)
        bad = th_fail("rank %d, rank 1 with WORLD_SIZE=2: the error does not say why: \"%s\"",
                      rank, msg);
    if (st == TUTTI_OK)
        tutti_comm_destroy(comm);
    return bad;
}

START_TEST(test_size_differs)
{
    th_opts_t o = TH_OPTS_INIT;
    o.timeout_s = 25;
    o.rank_timeout_s = 60;
    ck_assert_msg(th_run_opts(3, &o, size_differs_rank, NULL) == 0,
                  "a rank with another WORLD_SIZE: see stderr");
}
END_TEST

typedef struct envcase {
    const char *env;  /* NAME=VALUE */
    const char *what;
    tutti_status_t want, also; /* accepted statuses */
    const char *mention;       /* the error text must contain this */
} envcase_t;

static const envcase_t env_cases[] = {
    {"TUTTI_TRANSPORT=bogus", "TUTTI_TRANSPORT=bogus", TUTTI_ERR_INVALID_ARG,
     TUTTI_ERR_INVALID_ARG, "bogus"},
    {"TUTTI_TIMEOUT=abc", "TUTTI_TIMEOUT=abc", TUTTI_ERR_INVALID_ARG, TUTTI_ERR_INVALID_ARG,
     "TUTTI_TIMEOUT"},
    /* timeouts no wait could meet, or none at all (issue 15: 1e-300 was accepted) */
    {"TUTTI_TIMEOUT=1e-300", "TUTTI_TIMEOUT=1e-300", TUTTI_ERR_INVALID_ARG,
     TUTTI_ERR_INVALID_ARG, "TUTTI_TIMEOUT"},
    {"TUTTI_TIMEOUT=0.0001", "TUTTI_TIMEOUT=0.0001", TUTTI_ERR_INVALID_ARG,
     TUTTI_ERR_INVALID_ARG, "TUTTI_TIMEOUT"},
    {"TUTTI_TIMEOUT=nan", "TUTTI_TIMEOUT=nan", TUTTI_ERR_INVALID_ARG, TUTTI_ERR_INVALID_ARG,
     "TUTTI_TIMEOUT"},
    /* decimal only: strtod took "0x10" as 16 s (a hostile probe) */
    {"TUTTI_TIMEOUT=0x10", "TUTTI_TIMEOUT=0x10", TUTTI_ERR_INVALID_ARG, TUTTI_ERR_INVALID_ARG,
     "TUTTI_TIMEOUT"},
    {"TUTTI_TIMEOUT= 10", "TUTTI_TIMEOUT= 10", TUTTI_ERR_INVALID_ARG, TUTTI_ERR_INVALID_ARG,
     "TUTTI_TIMEOUT"},
    {"TUTTI_TIMEOUT=inf", "TUTTI_TIMEOUT=inf", TUTTI_ERR_INVALID_ARG, TUTTI_ERR_INVALID_ARG,
     "TUTTI_TIMEOUT"},
    {"TUTTI_TIMEOUT=1e-320", "TUTTI_TIMEOUT=1e-320", TUTTI_ERR_INVALID_ARG,
     TUTTI_ERR_INVALID_ARG, "TUTTI_TIMEOUT"},
    /* byte counts: K, M, G are taken (check_workers sets TUTTI_SHM_WINDOW=64K); others not */
    {"TUTTI_SHM_WINDOW=4X", "TUTTI_SHM_WINDOW=4X", TUTTI_ERR_INVALID_ARG, TUTTI_ERR_INVALID_ARG,
     "not a byte count"},
    {"TUTTI_SHM_WINDOW=-1M", "TUTTI_SHM_WINDOW=-1M", TUTTI_ERR_INVALID_ARG,
     TUTTI_ERR_INVALID_ARG, "TUTTI_SHM_WINDOW"},
    {"TUTTI_SHM_SLOT=1G", "TUTTI_SHM_SLOT=1G (over 64 MiB)", TUTTI_ERR_INVALID_ARG,
     TUTTI_ERR_INVALID_ARG, "TUTTI_SHM_SLOT"},
    /* a job token too short to be a secret */
    {"TUTTI_JOB_TOKEN=abc", "TUTTI_JOB_TOKEN=abc", TUTTI_ERR_INVALID_ARG, TUTTI_ERR_INVALID_ARG,
     "TUTTI_JOB_TOKEN"},
    /* a trace whose directory does not exist: refused at creation, not lost at destroy */
    {"TUTTI_TRACE=/nonexistent-tutti-dir/trace.%r.json", "TUTTI_TRACE into a missing directory",
     TUTTI_ERR_INVALID_ARG, TUTTI_ERR_INVALID_ARG, "nonexistent-tutti-dir"},
    /* rank discovery: a bad launcher environment is a bootstrap failure (or a bad argument) */
    {"RANK=5", "RANK=5 with WORLD_SIZE=2", TUTTI_ERR_BOOTSTRAP, TUTTI_ERR_INVALID_ARG, "RANK"},
    {"RANK=-1", "RANK=-1", TUTTI_ERR_BOOTSTRAP, TUTTI_ERR_INVALID_ARG, "RANK"},
    {"WORLD_SIZE=0", "WORLD_SIZE=0", TUTTI_ERR_BOOTSTRAP, TUTTI_ERR_INVALID_ARG, "WORLD_SIZE"},
    {"RANK=x", "RANK=x", TUTTI_ERR_BOOTSTRAP, TUTTI_ERR_INVALID_ARG, "RANK"},
    /* an IPv6 rendezvous address: refused at once, saying IPv4 is what it takes (2 ranks) */
    {"MASTER_ADDR=fd77::1", "MASTER_ADDR=fd77::1", TUTTI_ERR_BOOTSTRAP, TUTTI_ERR_BOOTSTRAP,
     "IPv4 only"},
};
#define NENV ((int)(sizeof env_cases / sizeof env_cases[0]))

static int init_must_fail_rank(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    const envcase_t *ec = arg;
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    double dt = th_now() - t0;
    int bad = 0;
    const char *msg = tutti_last_error();
    if (st == TUTTI_OK) {
        tutti_comm_destroy(comm);
        return th_fail("%s: tutti_comm_init_env succeeded", ec->what);
    }
    if (st != ec->want && st != ec->also)
        bad = th_fail("%s: expected %s, got %d (%s): %s", ec->what, tutti_strerror(ec->want), st,
                      tutti_strerror(st), msg);
    if (msg == NULL || strstr(msg, ec->mention) == NULL)
        bad = th_fail("%s: tutti_last_error does not mention %s: \"%s\"", ec->what, ec->mention,
                      msg ? msg : "(NULL)");
    if (dt > 5)
        bad = th_fail("%s: failing took %.1f s", ec->what, dt);
    return bad;
}

START_TEST(test_bad_env)
{
    const envcase_t *ec = &env_cases[_i];
    th_opts_t o = TH_OPTS_INIT;
    o.timeout_s = 20;
    o.rank_timeout_s = 3;
    o.env[0] = ec->env;
    const bool v6 = strncmp(ec->env, "MASTER_ADDR=", 12) == 0;
    int n = strcmp(ec->env, "RANK=5") == 0 || v6 ? 2 : 1;
    if (n == 2 && !v6)
        o.nstart = 1;
    ck_assert_msg(th_run_opts(n, &o, init_must_fail_rank, (void *)ec) == 0, "%s: see stderr",
                  ec->what);
}
END_TEST

/* One rank refuses its own settings (case 0: rank 1's CCL_WORKER_COUNT=99; case 1: rank 0's
 * TUTTI_TRANSPORT=bogus; case 2: the same, rank 2 starting 4 s late, after the 2 s a failed
 * store waits for latecomers): it fails with its own error, and the others, told through the
 * store, fail within seconds naming it and its reason, not at their 30 s timeout as a rank
 * "never arrived" (or, rank 0's refusal, with no store to reach). Case 3: every rank has the
 * bad setting: each fails with its own error within seconds. */
typedef struct refused {
    int who; /* the rank that refuses; -1: every rank */
    bool late;
} refused_t;

static int refused_rank(int rank, int size, void *arg)
{
    (void)size;
    const refused_t *rc = arg;
    int who = rc->who;
    const char *var = who == 1 ? "CCL_WORKER_COUNT" : "TUTTI_TRANSPORT";
    if (rank == who || who < 0)
        setenv(var, who == 1 ? "99" : "bogus", 1);
    if (rc->late && rank == 2)
        usleep(4000000);
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    double dt = th_now() - t0;
    const char *msg = tutti_last_error();
    if (st == TUTTI_OK) {
        tutti_comm_destroy(comm);
        return th_fail("rank %d: init succeeded beside rank %d's bad %s", rank, who, var);
    }
    char want[64];
    snprintf(want, sizeof want, "rank %d refused its own settings", who);
    if (rank == who || who < 0 ? st != TUTTI_ERR_INVALID_ARG || strstr(msg, var) == NULL
                    : st != TUTTI_ERR_PEER_FAILED || strstr(msg, want) == NULL ||
                          strstr(msg, var) == NULL)
        return th_fail("rank %d, rank %d with a bad %s: got %s: %s", rank, who, var,
                       tutti_strerror(st), msg);
    if (dt > 10)
        return th_fail("rank %d took %.1f s to fail (TUTTI_TIMEOUT 30 s)", rank, dt);
    return 0;
}

START_TEST(test_refused_settings)
{
    th_opts_t o = TH_OPTS_INIT;
    o.timeout_s = 40;
    o.rank_timeout_s = 30;
    static const refused_t cases[] = {{1, false}, {0, false}, {0, true}, {-1, false}};
    ck_assert_msg(th_run_opts(3, &o, refused_rank, (void *)&cases[_i]) == 0,
                  "case %d, rank %d's refusal of its settings: see stderr", _i, cases[_i].who);
}
END_TEST

static int bad_config_rank(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    (void)arg;
    int bad = 0;
    tutti_comm_config_t cfg = TUTTI_COMM_CONFIG_INIT;
    cfg.transport = "bogus";
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(&cfg, &comm);
    if (st != TUTTI_ERR_INVALID_ARG)
        bad = th_fail("config.transport=\"bogus\": expected TUTTI_ERR_INVALID_ARG, got %d (%s): %s",
                      st, tutti_strerror(st), tutti_last_error());
    else if (strstr(tutti_last_error(), "bogus") == NULL)
        bad = th_fail("config.transport=\"bogus\": the error does not name the value: \"%s\"",
                      tutti_last_error());
    if (st == TUTTI_OK)
        tutti_comm_destroy(comm);
    static const double bad_timeouts[] = {1e-300, 1e-4, 2e9, (double)INFINITY, (double)NAN};
    for (size_t i = 0; i < sizeof bad_timeouts / sizeof bad_timeouts[0]; i++) {
        tutti_comm_config_t tc = TUTTI_COMM_CONFIG_INIT;
        tc.timeout_s = bad_timeouts[i];
        comm = NULL;
        st = tutti_comm_init_env(&tc, &comm);
        if (st != TUTTI_ERR_INVALID_ARG || strstr(tutti_last_error(), "timeout_s") == NULL)
            bad = th_fail("config.timeout_s=%g: expected TUTTI_ERR_INVALID_ARG naming timeout_s, "
                          "got %d (%s): %s", bad_timeouts[i], st, tutti_strerror(st),
                          tutti_last_error());
        if (st == TUTTI_OK)
            tutti_comm_destroy(comm);
    }
    tutti_comm_config_t tk = TUTTI_COMM_CONFIG_INIT;
    tk.job_token = "too-short";
    comm = NULL;
    st = tutti_comm_init_env(&tk, &comm);
    if (st != TUTTI_ERR_INVALID_ARG || strstr(tutti_last_error(), "job_token") == NULL)
        bad = th_fail("config.job_token of 9 characters: expected TUTTI_ERR_INVALID_ARG naming "
                      "job_token, got %d (%s): %s", st, tutti_strerror(st), tutti_last_error());
    if (st == TUTTI_OK)
        tutti_comm_destroy(comm);
    return bad;
}

START_TEST(test_bad_config)
{
    ck_assert_msg(th_run(1, NULL, 20, bad_config_rank, NULL) == 0, "bad config: see stderr");
}
END_TEST

static Suite *badinput_suite(void)
{
    Suite *s = suite_create("badinput");
    TCase *tc = tcase_create("static");
    tcase_add_test(tc, test_strerror);
    tcase_add_test(tc, test_names);
    suite_add_tcase(s, tc);

    tc = tcase_create("args");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_bad_args, 0, 3); /* 1 rank shm, 2 ranks ofi, 2 ranks shm */
    suite_add_tcase(s, tc);

    tc = tcase_create("failed_comm");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_failed_comm, 0, 2);
    suite_add_tcase(s, tc);

    tc = tcase_create("bootstrap");
    tcase_set_timeout(tc, 40);
    tcase_add_loop_test(tc, test_forked_child, 0, 2);
    tcase_add_loop_test(tc, test_port_in_use, 0, 2);
    tcase_add_loop_test(tc, test_missing_rank, 0, 4);
    tcase_add_test(tc, test_master_addr_unset);
    tcase_add_test(tc, test_size_differs);
    tcase_add_loop_test(tc, test_bad_env, 0, NENV);
    tcase_add_test(tc, test_bad_config);
    tcase_add_loop_test(tc, test_refused_settings, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(badinput_suite)
