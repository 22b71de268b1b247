/* check_alltoall.c: alltoall and alltoallv with every algorithm, block size and layout (out of
 * place, sendbuf == recvbuf, misaligned; uneven counts with zeros, packed or reversed with gaps) on
 * shm and ofi at 1 to 8 ranks: every byte of the result and nothing outside it. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_matrix.h"

static void case_alltoall(ctx_t *c, const cm_case_t *k)
{
    tutti_dtype_t dt = k->dt;
    size_t n = k->n; /* per peer */
    int mode = k->mode;
    size_t es = tutti_dtype_size(dt), bytes = n * es, soff, roff, P = (size_t)c->size;
    cr_offsets(mode, es, &soff, &roff);
    tbuf_t S, R;
    tb_make(&S, bytes * P, soff);
    tb_make(&R, bytes * P, roff);
    char *exp = malloc(bytes * P + 1), *orig = malloc(bytes * P + 1);
    for (int j = 0; j < c->size; j++) {
        cr_fill_bytes(S.p + (size_t)j * bytes, bytes, (uint64_t)c->rank * TH_MAX_RANKS + (uint64_t)j,
                      c->ncase);
        cr_fill_bytes(exp + (size_t)j * bytes, bytes, (uint64_t)j * TH_MAX_RANKS + (uint64_t)c->rank,
                      c->ncase);
    }
    memcpy(orig, S.p, bytes * P);
    const void *sb = S.p;
    if (mode == M_SAME) {
        memcpy(R.p, S.p, bytes * P);
        sb = R.p;
    }
    cr_describe(c, "alltoall", dt, -1, n, mode, NULL);
    tutti_status_t st = tutti_alltoall(sb, R.p, n, dt, c->comm, cr_wk(c));
    if (cr_fin(c, st, true) == 0)
        cr_check_out(c, &R, exp, n * P, sb, &S, orig, n * P, es);
    tb_free(&S);
    tb_free(&R);
    free(exp);
    free(orig);
}

static void case_alltoallv(ctx_t *c, const cm_case_t *k)
{
    tutti_dtype_t dt = k->dt;
    int base = k->base, mode = k->mode;
    size_t mult = k->mult;
    bool packed = k->packed;
    int P = c->size, me = c->rank;
    size_t es = tutti_dtype_size(dt);
    size_t sc[TH_MAX_RANKS], rc[TH_MAX_RANKS], sd[TH_MAX_RANKS], rd[TH_MAX_RANKS];
    bool same = mode == M_SAME;
    /* in place needs what goes to j and what comes from j to have one size */
    for (int j = 0; j < P; j++) {
        sc[j] = same ? cr_vcount(base, mult, me + j, -1) : cr_vcount(base, mult, me, j);
        rc[j] = same ? cr_vcount(base, mult, j + me, -1) : cr_vcount(base, mult, j, me);
    }
    size_t stot = cr_layout(P, sc, packed, sd), rtot = cr_layout(P, rc, packed, rd);
    tbuf_t S, R;
    tb_make(&S, stot * es, 0);
    tb_make(&R, rtot * es, 0);
    char *exp = malloc(rtot * es + 1), *orig = malloc(stot * es + 1);
    memset(exp, CR_FILL_BYTE, rtot * es);
    for (int j = 0; j < P; j++) {
        cr_fill_bytes(S.p + sd[j] * es, sc[j] * es, (uint64_t)me * TH_MAX_RANKS + (uint64_t)j, c->ncase);
        cr_fill_bytes(exp + rd[j] * es, rc[j] * es, (uint64_t)j * TH_MAX_RANKS + (uint64_t)me, c->ncase);
    }
    memcpy(orig, S.p, stot * es);
    const void *sb = S.p;
    if (same) {
        memcpy(R.p, S.p, stot * es); /* same counts and layout on both sides */
        sb = R.p;
    }
    char extra[64];
    snprintf(extra, sizeof extra, "base=%d mult=%zu displs=%s", base, mult,
             packed ? "NULL" : "reversed+gaps");
    cr_describe(c, "alltoallv", dt, -1, rtot, mode, extra);
    tutti_status_t st = tutti_alltoallv(sb, sc, packed ? NULL : sd, R.p, rc, packed ? NULL : rd, dt,
                                        c->comm, cr_wk(c));
    if (cr_fin(c, st, true) == 0)
        cr_check_out(c, &R, exp, rtot, sb, &S, orig, stot, es);
    tb_free(&S);
    tb_free(&R);
    free(exp);
    free(orig);
}

static const cm_family_t family = {
    .name = "alltoall",
    .body = {[CM_ALLTOALL] = case_alltoall, [CM_ALLTOALLV] = case_alltoallv},
};

CM_FAMILY_MAIN(family)
