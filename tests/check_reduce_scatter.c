/* check_reduce_scatter.c: reduce_scatter with every algorithm, dtype, op, block size and layout
 * (out of place, TUTTI_IN_PLACE, misaligned) on shm and ofi at 1 to 8 ranks, each block
 * compared bit for bit with its exact reference. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_matrix.h"

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

static const cm_family_t family = {
    .name = "reduce_scatter",
    .body = {[CM_REDUCE_SCATTER] = case_reduce_scatter},
};

CM_FAMILY_MAIN(family)
