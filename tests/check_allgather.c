/* check_allgather.c: allgather and allgatherv with every algorithm, block size and layout (out of
 * place, TUTTI_IN_PLACE, misaligned; uneven counts with zeros, packed or reversed with gaps) on
 * shm and ofi at 1 to 8 ranks, plus 1 MiB blocks at 2 and 3: every byte of the result and nothing
 * outside it. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_matrix.h"

static void case_allgather(ctx_t *c, const cm_case_t *k)
{
    tutti_dtype_t dt = k->dt;
    size_t n = k->n; /* per rank */
    int mode = k->mode;
    size_t es = tutti_dtype_size(dt), bytes = n * es, soff, roff, P = (size_t)c->size;
    cr_offsets(mode, es, &soff, &roff);
    tbuf_t S, R;
    tb_make(&S, bytes, soff);
    tb_make(&R, bytes * P, roff);
    char *exp = malloc(bytes * P + 1);
    for (int r = 0; r < c->size; r++)
        cr_fill_bytes(exp + (size_t)r * bytes, bytes, (uint64_t)r, c->ncase);
    memcpy(S.p, exp + (size_t)c->rank * bytes, bytes);
    const void *sb = S.p;
    if (mode == M_INPLACE) {
        memcpy(R.p + (size_t)c->rank * bytes, S.p, bytes);
        sb = TUTTI_IN_PLACE;
    }
    cr_describe(c, "allgather", dt, -1, n, mode, NULL);
    tutti_status_t st = tutti_allgather(sb, R.p, n, dt, c->comm, cr_wk(c));
    if (cr_fin(c, st, true) == 0)
        cr_check_out(c, &R, exp, n * P, sb, &S, exp + (size_t)c->rank * bytes, n, es);
    tb_free(&S);
    tb_free(&R);
    free(exp);
}

static void case_allgatherv(ctx_t *c, const cm_case_t *k)
{
    tutti_dtype_t dt = k->dt;
    int base = k->base, mode = k->mode;
    size_t mult = k->mult;
    bool packed = k->packed;
    int P = c->size;
    size_t es = tutti_dtype_size(dt), counts[TH_MAX_RANKS], displs[TH_MAX_RANKS];
    for (int r = 0; r < P; r++)
        counts[r] = cr_vcount(base, mult, r, -1);
    size_t tot = cr_layout(P, counts, packed, displs);
    size_t mine = counts[c->rank];
    tbuf_t S, R;
    tb_make(&S, mine * es, 0);
    tb_make(&R, tot * es, 0);
    char *exp = malloc(tot * es + 1);
    memset(exp, CR_FILL_BYTE, tot * es);
    for (int r = 0; r < P; r++)
        cr_fill_bytes(exp + displs[r] * es, counts[r] * es, (uint64_t)r, c->ncase);
    memcpy(S.p, exp + displs[c->rank] * es, mine * es);
    const void *sb = S.p;
    if (mode == M_INPLACE) {
        memcpy(R.p + displs[c->rank] * es, S.p, mine * es);
        sb = TUTTI_IN_PLACE;
    }
    char extra[64];
    snprintf(extra, sizeof extra, "base=%d mult=%zu displs=%s", base, mult,
             packed ? "NULL" : "reversed+gaps");
    cr_describe(c, "allgatherv", dt, -1, tot, mode, extra);
    tutti_status_t st = tutti_allgatherv(sb, mine, R.p, counts, packed ? NULL : displs, dt, c->comm,
                                         cr_wk(c));
    if (cr_fin(c, st, true) == 0)
        cr_check_out(c, &R, exp, tot, sb, &S, NULL, 0, es);
    tb_free(&S);
    tb_free(&R);
    free(exp);
}

static const cm_family_t family = {
    .name = "allgather",
    .body = {[CM_ALLGATHER] = case_allgather, [CM_ALLGATHERV] = case_allgatherv},
};

CM_FAMILY_MAIN(family)
