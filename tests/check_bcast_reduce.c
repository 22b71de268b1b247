/* check_bcast_reduce.c: the rooted collectives, reduce and broadcast, with every algorithm,
 * dtype (every op for reduce), size, layout and root in turn (every root for small broadcasts) on
 * shm and ofi at 1 to 8 ranks: the root's result bit for bit, and away from the root a receive
 * buffer that is NULL or left as it was. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_matrix.h"

static void case_reduce(ctx_t *c, const cm_case_t *k)
{
    tutti_dtype_t dt = k->dt;
    tutti_op_t op = (tutti_op_t)k->op;
    size_t n = k->n;
    int mode = k->mode, root = k->root;
    size_t es = tutti_dtype_size(dt), bytes = n * es, soff, roff;
    unsigned long salt = c->ncase * 131u;
    bool at_root = c->rank == root;
    cr_offsets(mode, es, &soff, &roff);
    tbuf_t S, R;
    tb_make(&S, bytes, soff);
    tb_make(&R, bytes, roff);
    char *exp = malloc(bytes + 1), *orig = malloc(bytes + 1);
    cr_gen_red(S.p, dt, op, c->rank, 0, n, salt);
    memcpy(orig, S.p, bytes);
    cr_ref_red(exp, dt, op, c->size, 0, n, salt);
    const void *sb = S.p;
    void *rb = R.p;
    bool null_recv = false;
    if (mode == M_INPLACE && at_root) {
        memcpy(R.p, S.p, bytes);
        sb = TUTTI_IN_PLACE;
    } else if (mode == M_INPLACE) {
        rb = NULL; /* in place only means something at the root */
        null_recv = true;
    } else if (mode == M_SAME) {
        memcpy(R.p, S.p, bytes);
        sb = R.p;
    } else if (!at_root && c->ncase % 2) {
        rb = NULL;
        null_recv = true;
    }
    char extra[64];
    snprintf(extra, sizeof extra, "root=%d%s", root, null_recv ? " recvbuf=NULL" : "");
    cr_describe(c, "reduce", dt, op, n, mode, extra);
    tutti_status_t st = tutti_reduce(sb, rb, n, dt, op, root, c->comm, cr_wk(c));
    if (cr_fin(c, st, true) == 0) {
        if (at_root)
            cr_cmp(c, "recvbuf at root", exp, R.p, n, es);
        else if (rb != NULL && mode != M_SAME) {
            /* recvbuf is ignored away from the root: it must stay as it was */
            memset(exp, CR_FILL_BYTE, bytes);
            cr_cmp(c, "recvbuf away from the root was written", exp, R.p, n, es);
        }
        tb_guards(c, &R, "recvbuf");
        if (sb == S.p) {
            cr_cmp(c, "sendbuf changed", orig, S.p, n, es);
            tb_guards(c, &S, "sendbuf");
        }
    }
    tb_free(&S);
    tb_free(&R);
    free(exp);
    free(orig);
}

static void case_bcast(ctx_t *c, const cm_case_t *k)
{
    tutti_dtype_t dt = k->dt;
    size_t n = k->n;
    int mode = k->mode, root = k->root;
    size_t es = tutti_dtype_size(dt), bytes = n * es, soff, roff;
    cr_offsets(mode, es, &soff, &roff);
    tbuf_t B;
    tb_make(&B, bytes, c->rank % 2 ? roff : soff);
    char *exp = malloc(bytes + 1);
    cr_fill_bytes(exp, bytes, (uint64_t)root, c->ncase);
    if (c->rank == root)
        memcpy(B.p, exp, bytes);
    char extra[32];
    snprintf(extra, sizeof extra, "root=%d", root);
    cr_describe(c, "bcast", dt, -1, n, mode, extra);
    tutti_status_t st = tutti_broadcast(B.p, n, dt, root, c->comm, cr_wk(c));
    if (cr_fin(c, st, true) == 0) {
        cr_cmp(c, "buf", exp, B.p, n, es);
        tb_guards(c, &B, "buf");
    }
    tb_free(&B);
    free(exp);
}

static const cm_family_t family = {
    .name = "bcast_reduce",
    .body = {[CM_REDUCE] = case_reduce, [CM_BCAST] = case_bcast},
};

CM_FAMILY_MAIN(family)
