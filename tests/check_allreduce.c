/* check_allreduce.c: allreduce with every algorithm, dtype, op, size and buffer layout on shm and
 * ofi at 1 to 8 ranks (and several MiB at 2 and 3), compared bit for bit with an exact reference;
 * several allreduces in flight at once with a blocking broadcast behind them; and the CCL_ALLREDUCE
 * override, good and bad. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_matrix.h"

static void case_allreduce(ctx_t *c, const cm_case_t *k)
{
    tutti_dtype_t dt = k->dt;
    tutti_op_t op = (tutti_op_t)k->op;
    size_t n = k->n;
    int mode = k->mode;
    size_t es = tutti_dtype_size(dt), bytes = n * es, soff, roff;
    unsigned long salt = c->ncase * 131u;
    cr_offsets(mode, es, &soff, &roff);
    tbuf_t S, R;
    tb_make(&S, bytes, soff);
    tb_make(&R, bytes, roff);
    char *exp = malloc(bytes + 1), *orig = malloc(bytes + 1);
    cr_gen_red(S.p, dt, op, c->rank, 0, n, salt);
    memcpy(orig, S.p, bytes);
    cr_ref_red(exp, dt, op, c->size, 0, n, salt);
    const void *sb = S.p;
    if (mode == M_INPLACE || mode == M_SAME) {
        memcpy(R.p, S.p, bytes);
        sb = mode == M_INPLACE ? TUTTI_IN_PLACE : R.p;
    }
    cr_describe(c, "allreduce", dt, op, n, mode, NULL);
    tutti_status_t st = tutti_allreduce(sb, R.p, n, dt, op, c->comm, cr_wk(c));
    if (cr_fin(c, st, true) == 0)
        cr_check_out(c, &R, exp, n, sb, &S, orig, n, es);
    tb_free(&S);
    tb_free(&R);
    free(exp);
    free(orig);
}

/* ---- several operations in flight ------------------------------------------------------------ */

/* Post several collectives before waiting for any (the queue must run them in posting order on
 * every rank), put a blocking one behind them, wait in reverse order, and free one handle without
 * waiting (which must complete it first). */
static void run_pipelined(ctx_t *c, const cm_case_t *k0)
{
    (void)k0;
    static const struct {
        tutti_dtype_t dt;
        tutti_op_t op;
        size_t n;
    } k_[] = {
        {TUTTI_FLOAT32, TUTTI_SUM, 1031}, {TUTTI_INT32, TUTTI_BXOR, 7},  {TUTTI_BFLOAT16, TUTTI_AVG, 4099},
        {TUTTI_INT8, TUTTI_PROD, 65537},  {TUTTI_FLOAT64, TUTTI_MAX, 1}, {TUTTI_FLOAT16, TUTTI_SUM, 300},
    };
    enum { K = sizeof k_ / sizeof k_[0] };
    char *S[K], *R[K], *E[K];
    tutti_work_t *w[K];
    unsigned long salt = c->ncase * 977u; /* the walk counted this stage as one case */
    c->algo = "(as set last)";
    uint64_t seq0 = tutti_comm_seq(c->comm);
    for (int k = 0; k < K; k++) {
        size_t bytes = k_[k].n * tutti_dtype_size(k_[k].dt);
        S[k] = malloc(bytes);
        R[k] = malloc(bytes);
        E[k] = malloc(bytes);
        memset(R[k], CR_FILL_BYTE, bytes);
        cr_gen_red(S[k], k_[k].dt, k_[k].op, c->rank, 0, k_[k].n, salt + (unsigned)k);
        cr_ref_red(E[k], k_[k].dt, k_[k].op, c->size, 0, k_[k].n, salt + (unsigned)k);
        w[k] = NULL;
    }
    for (int k = 0; k < K && !c->fatal; k++) {
        cr_describe(c, "allreduce (in flight)", k_[k].dt, k_[k].op, k_[k].n, M_OOP, NULL);
        tutti_status_t st = tutti_allreduce(S[k], R[k], k_[k].n, k_[k].dt, k_[k].op, c->comm, &w[k]);
        if (st != TUTTI_OK || w[k] == NULL) {
            cr_report(c, "post %d returned %d (%s), handle %p: %s", k, st, tutti_strerror(st),
                      (void *)w[k], tutti_comm_last_error(c->comm));
            c->fatal = true;
        }
    }
    /* a blocking broadcast behind them */
    size_t bn = 5000;
    char *B = malloc(bn), *BE = malloc(bn);
    cr_fill_bytes(BE, bn, 4242, salt);
    if (c->rank == c->size - 1)
        memcpy(B, BE, bn);
    else
        memset(B, CR_FILL_BYTE, bn);
    cr_describe(c, "bcast (behind allreduces in flight)", TUTTI_UINT8, -1, bn, M_OOP, NULL);
    if (!c->fatal) {
        tutti_status_t st = tutti_broadcast(B, bn, TUTTI_UINT8, c->size - 1, c->comm, NULL);
        if (st != TUTTI_OK) {
            cr_report(c, "returned %d (%s): %s", st, tutti_strerror(st), tutti_comm_last_error(c->comm));
            c->fatal = true;
        } else {
            cr_cmp(c, "buf", BE, B, bn, 1);
        }
    }
    if (!c->fatal && tutti_comm_seq(c->comm) != seq0 + K + 1)
        cr_report(c, "tutti_comm_seq went from %llu to %llu over %d posts",
                  (unsigned long long)seq0, (unsigned long long)tutti_comm_seq(c->comm), K + 1);
    for (int k = K - 1; k >= 0; k--) {
        if (w[k] == NULL)
            continue;
        cr_describe(c, "allreduce (in flight)", k_[k].dt, k_[k].op, k_[k].n, M_OOP, NULL);
        tutti_status_t st = TUTTI_OK;
        if (k == 0) {
            tutti_work_free(w[k]); /* completes it first */
        } else {
            st = tutti_work_wait(w[k], -1.0);
            if (st != TUTTI_OK)
                cr_report(c, "handle %d finished with %d (%s): %s", k, st, tutti_strerror(st),
                          tutti_work_error(w[k]));
            else if (tutti_work_status(w[k]) != TUTTI_OK)
                cr_report(c, "handle %d: wait said OK, tutti_work_status %d", k, tutti_work_status(w[k]));
            tutti_work_free(w[k]);
        }
        if (st == TUTTI_OK)
            cr_cmp(c, "recvbuf", E[k], R[k], k_[k].n, tutti_dtype_size(k_[k].dt));
    }
    for (int k = 0; k < K; k++) {
        free(S[k]);
        free(R[k]);
        free(E[k]);
    }
    free(B);
    free(BE);
    c->algo = NULL;
}

/* ---- the CCL_ALLREDUCE override ------------------------------------------------------------------ */

static int override_rank(int rank, int size, void *arg)
{
    (void)arg;
    ctx_t c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    c.size = size;
    c.tp = "shm";
    tutti_status_t st = tutti_comm_init_env(NULL, &c.comm);
    if (st != TUTTI_OK)
        return th_fail("CCL_ALLREDUCE=\"%s\": tutti_comm_init_env: %d (%s): %s",
                       getenv("CCL_ALLREDUCE"), st, tutti_strerror(st), tutti_last_error());
    static const struct {
        size_t bytes;
        const char *algo;
    } want_a[] = {{0, "tree"}, {100, "tree"}, {16384, "tree"}, {16385, "ring"}, {100000, "ring"}};
    cr_describe(&c, "allreduce", TUTTI_FLOAT32, TUTTI_SUM, 0, M_OOP,
                "CCL_ALLREDUCE=\"tree:0-16384;ring:16385-max\"");
    for (size_t k = 0; k < sizeof want_a / sizeof want_a[0]; k++) {
        const char *a = tutti_comm_algorithm(c.comm, TUTTI_COLL_ALLREDUCE, want_a[k].bytes);
        if (a == NULL || strcmp(a, want_a[k].algo) != 0)
            cr_report(&c, "tutti_comm_algorithm(%zu bytes) = %s, expected %s", want_a[k].bytes,
                      a ? a : "(NULL)", want_a[k].algo);
    }
    c.algo = "env";
    c.ncase++;
    case_allreduce(&c, &(cm_case_t){.dt = TUTTI_FLOAT32, .op = TUTTI_SUM, .n = 25, .mode = M_OOP});
    c.ncase++;
    if (!c.fatal)
        case_allreduce(&c,
                       &(cm_case_t){.dt = TUTTI_FLOAT32, .op = TUTTI_SUM, .n = 25000, .mode = M_OOP});
    /* a spec with ranges through the API */
    cr_describe(&c, "allreduce", TUTTI_FLOAT32, TUTTI_SUM, 0, -1, "set \"ring:0-1023;tree:1024-max\"");
    st = tutti_comm_set_algorithm(c.comm, TUTTI_COLL_ALLREDUCE, "ring:0-1023;tree:1024-max");
    if (st != TUTTI_OK) {
        cr_report(&c, "returned %d (%s): %s", st, tutti_strerror(st), tutti_comm_last_error(c.comm));
    } else {
        const char *a1 = tutti_comm_algorithm(c.comm, TUTTI_COLL_ALLREDUCE, 1023);
        const char *a2 = tutti_comm_algorithm(c.comm, TUTTI_COLL_ALLREDUCE, 1024);
        if (a1 == NULL || strcmp(a1, "ring") || a2 == NULL || strcmp(a2, "tree"))
            cr_report(&c, "tutti_comm_algorithm: 1023 bytes -> %s, 1024 -> %s", a1 ? a1 : "(NULL)",
                      a2 ? a2 : "(NULL)");
    }
    if (!c.fatal)
        case_allreduce(&c, &(cm_case_t){.dt = TUTTI_INT32, .op = TUTTI_SUM, .n = 1000, .mode = M_OOP});
    st = tutti_comm_destroy(c.comm);
    if (st != TUTTI_OK)
        cr_report(&c, "tutti_comm_destroy: %d (%s)", st, tutti_strerror(st));
    return c.errors ? 1 : 0;
}

static int bogus_override_rank(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    (void)arg;
    tutti_comm_t *comm = NULL;
    double t0 = th_now();
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st == TUTTI_OK) {
        tutti_comm_destroy(comm);
        return th_fail("CCL_ALLREDUCE=bogus: tutti_comm_init_env succeeded; expected "
                       "TUTTI_ERR_INVALID_ARG");
    }
    int bad = 0;
    const char *msg = tutti_last_error();
    if (st != TUTTI_ERR_INVALID_ARG)
        bad = th_fail("CCL_ALLREDUCE=bogus: expected TUTTI_ERR_INVALID_ARG, got %d (%s): %s", st,
                      tutti_strerror(st), msg);
    if (!cm_names_all(msg, TUTTI_COLL_ALLREDUCE, false) || strstr(msg, "bogus") == NULL)
        bad = th_fail("CCL_ALLREDUCE=bogus: the error should name the value and list ring, tree, "
                      "direct: \"%s\"", msg);
    if (th_now() - t0 > 4.0)
        bad = th_fail("CCL_ALLREDUCE=bogus: failing took %.1f s", th_now() - t0);
    return bad;
}

START_TEST(test_env_override)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 40;
    o.env[0] = "CCL_ALLREDUCE=tree:0-16384;ring:16385-max";
    ck_assert_msg(th_run_opts(2, &o, override_rank, NULL) == 0, "CCL_ALLREDUCE override failed");
}
END_TEST

START_TEST(test_env_bogus)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 20;
    o.rank_timeout_s = 5;
    o.env[0] = "CCL_ALLREDUCE=bogus";
    ck_assert_msg(th_run_opts(2, &o, bogus_override_rank, NULL) == 0,
                  "CCL_ALLREDUCE=bogus was not refused properly");
}
END_TEST

static void add_env_tcases(Suite *s)
{
    TCase *tc = tcase_create("env_override");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_env_override);
    tcase_add_test(tc, test_env_bogus);
    suite_add_tcase(s, tc);
}

static const cm_family_t family = {
    .name = "allreduce",
    .body = {[CM_ALLREDUCE] = case_allreduce, [CM_PIPELINED] = run_pipelined},
    .add_tcases = add_env_tcases,
};

CM_FAMILY_MAIN(family)
