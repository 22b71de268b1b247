/* check_reduce_scatter.c: reduce_scatter with every algorithm, dtype, op, block size and layout
 * (out of place, TUTTI_IN_PLACE, misaligned) on shm and ofi at 1 to 8 ranks, each block
 * compared bit for bit with its exact reference; and NCCL's in-place form (recvbuf the rank's
 * own block of sendbuf). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_matrix.h"
#include "harness.h"

static void case_reduce_scatter(ctx_t *c, const cm_case_t *k)
{
    tutti_dtype_t dt = k->dt;
    tutti_op_t op = (tutti_op_t)k->op;
    size_t rc = k->n; /* per rank */
    int mode = k->mode;
    size_t es = tutti_dtype_size(dt), tot = rc * (size_t)c->size, soff, roff;
    unsigned long salt = c->ncase * 131u;
    cr_offsets(mode, es, &soff, &roff);
    tbuf_t S, R;
    tb_make(&S, tot * es, soff);
    tb_make(&R, (mode == M_INPLACE ? tot : rc) * es, roff);
    char *exp = malloc(rc * es + 1), *orig = malloc(tot * es + 1);
    cr_gen_red(S.p, dt, op, c->rank, 0, tot, salt);
    memcpy(orig, S.p, tot * es);
    cr_ref_red(exp, dt, op, c->size, (size_t)c->rank * rc, rc, salt);
    const void *sb = S.p;
    if (mode == M_INPLACE) {
        memcpy(R.p, S.p, tot * es);
        sb = TUTTI_IN_PLACE;
    }
    cr_describe(c, "reduce_scatter", dt, op, rc, mode, NULL);
    tutti_status_t st = tutti_reduce_scatter(sb, R.p, rc, dt, op, c->comm, cr_wk(c));
    if (cr_fin(c, st, true) == 0)
        cr_check_out(c, &R, exp, rc, sb, &S, orig, tot, es);
    tb_free(&S);
    tb_free(&R);
    free(exp);
    free(orig);
}

/* NCCL's in-place form, recvbuf = sendbuf + rank * recvcount, on every rank alike: rank 0's is
 * tutti's own in-place form (the same pointer), the others' a block inside the input. Each
 * rank gets its block of the sum; blocking and with a handle, sizes for every algorithm. */
static int own_block_rank(int rank, int size, void *arg)
{
    (void)arg;
    tutti_comm_t *comm;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_OK)
        return th_fail("tutti_comm_init_env: %d (%s): %s", st, tutti_strerror(st),
                       tutti_last_error());
    static const size_t counts[] = {1, 1000, 300000};
    int bad = 0;
    for (size_t i = 0; i < sizeof counts / sizeof counts[0] && !bad; i++)
        for (int async = 0; async < 2 && !bad; async++) {
            size_t rc = counts[i], tot = rc * (size_t)size;
            int32_t *buf = malloc(tot * sizeof *buf);
            for (size_t j = 0; j < tot; j++)
                buf[j] = (int32_t)(rank * 1000 + (int)(j % 977));
            tutti_work_t *w = NULL;
            st = tutti_reduce_scatter(buf, buf + (size_t)rank * rc, rc, TUTTI_INT32, TUTTI_SUM,
                                      comm, async ? &w : NULL);
            if (st == TUTTI_OK && async)
                st = tutti_work_wait(w, 30.0);
            if (w != NULL)
                tutti_work_free(w);
            if (st != TUTTI_OK) {
                bad = th_fail("reduce_scatter in NCCL's in-place form, %zu per rank%s: %d (%s): %s",
                              rc, async ? " (async)" : "", st, tutti_strerror(st),
                              tutti_comm_last_error(comm));
                free(buf);
                break;
            }
            for (size_t j = 0; j < rc && !bad; j++) {
                size_t g = (size_t)rank * rc + j;
                int32_t want = (int32_t)(1000 * size * (size - 1) / 2 + size * (int)(g % 977));
                if (buf[g] != want)
                    bad = th_fail("reduce_scatter in NCCL's in-place form, %zu per rank: element "
                                  "%zu is %d, expected %d", rc, j, (int)buf[g], (int)want);
            }
            free(buf);
        }
    tutti_comm_destroy(comm);
    return bad;
}

START_TEST(test_own_block)
{
    static const char *const tps[] = {"shm", "ofi"};
    static const int ranks[] = {3, 2};
    ck_assert_msg(th_run(ranks[_i], tps[_i], 60, own_block_rank, NULL) == 0,
                  "reduce_scatter in NCCL's in-place form (%d ranks, %s): see stderr", ranks[_i],
                  tps[_i]);
}
END_TEST

static void add_tcases(Suite *s)
{
    TCase *tc = tcase_create("own_block");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_own_block, 0, 2);
    suite_add_tcase(s, tc);
}

static const cm_family_t family = {
    .name = "reduce_scatter",
    .body = {[CM_REDUCE_SCATTER] = case_reduce_scatter},
    .add_tcases = add_tcases,
};

CM_FAMILY_MAIN(family)
