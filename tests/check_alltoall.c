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

/* alltoallv over the direct algorithm whose own blocks are many rounds longer than every block
 * sent to a peer, and one whose own block is empty while the peers' blocks take many rounds:
 * the rounds follow the peers' blocks only, and every block must still arrive whole. Counts in
 * MiB so that they cross many rounds whatever the cache size. (A version that copied the own
 * block a piece per round, tried and not kept, failed here with its tail copy removed.) */
/* own_count: the elements rank from sends to rank to in shape 0 (own block 3 Mi + rank,
 * peer blocks 1000 + 7 (from + to)) or shape 1 (own block empty, peer blocks 1.5 Mi + from + to) */
static size_t own_count(int shape, int from, int to)
{
    if (from == to)
        return shape ? 0 : ((size_t)3 << 20) + (size_t)from;
    return shape ? ((size_t)3 << 19) + (size_t)(from + to) : 1000 + 7 * (size_t)(from + to);
}

/* own_value: element e of the block from rank from to rank to */
static uint32_t own_value(int from, int to, size_t e)
{
    return (uint32_t)((uint32_t)from * 1000003u + (uint32_t)to * 7919u + e);
}

static int own_longest_rank(int rank, int size, void *arg)
{
    (void)arg;
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK)
        return th_fail("init: %s", tutti_last_error());
    int rc = 0;
    if (tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLTOALL, "direct") != TUTTI_OK) {
        rc = th_fail("direct: %s", tutti_comm_last_error(comm));
        goto out;
    }
    for (int shape = 0; shape < 2 && rc == 0; shape++) {
        size_t sc[TH_MAX_RANKS], rcv[TH_MAX_RANKS], st = 0, rt = 0;
        for (int j = 0; j < size; j++) {
            st += sc[j] = own_count(shape, rank, j);
            rt += rcv[j] = own_count(shape, j, rank);
        }
        uint32_t *in = malloc((st + 1) * sizeof *in), *out = malloc((rt + 1) * sizeof *out);
        if (in == NULL || out == NULL) {
            free(in);
            free(out);
            rc = th_fail("no memory");
            break;
        }
        size_t k = 0;
        for (int j = 0; j < size; j++)
            for (size_t e = 0; e < sc[j]; e++)
                in[k++] = own_value(rank, j, e);
        memset(out, 0xa5, rt * sizeof *out);
        tutti_status_t s = tutti_alltoallv(in, sc, NULL, out, rcv, NULL, TUTTI_INT32, comm, NULL);
        if (s != TUTTI_OK)
            rc = th_fail("shape %d: %s: %s", shape, tutti_strerror(s), tutti_comm_last_error(comm));
        k = 0;
        for (int i = 0; rc == 0 && i < size; i++)
            for (size_t e = 0; rc == 0 && e < rcv[i]; e++, k++)
                if (out[k] != own_value(i, rank, e))
                    rc = th_fail("shape %d: element %zu of the block from rank %d is %u, want %u",
                                 shape, e, i, out[k], own_value(i, rank, e));
        free(in);
        free(out);
    }
out:
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_own_longest)
{
    ck_assert_msg(th_run(2, "shm", 120, own_longest_rank, NULL) == 0, "2 ranks");
    ck_assert_msg(th_run(3, "shm", 120, own_longest_rank, NULL) == 0, "3 ranks");
}
END_TEST

int main(void)
{
    Suite *s = cm_suite(&family);
    TCase *tc = tcase_create("own_block_longest");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_own_longest);
    suite_add_tcase(s, tc);
    return th_check_run(s);
}
