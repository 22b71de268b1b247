/* check_accuracy.c: accuracy of bf16 allreduce at 2..8 ranks on random data. The direct
 * algorithm must equal round-to-nearest-even of the fp32 sum taken in rank order, bit for bit;
 * ring and tree round partial sums to bf16 on the way, and are held to the bound derived below;
 * every algorithm must give the same bits on every rank. */
#include <check.h>
#include "check_main.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tutti.h"

enum { N = 50021 }; /* odd, so chunks and slices split unevenly */

/* Positive inputs in [0.5, 2): every partial sum lies between an input and the total, so each
 * rounding to bf16 on the way errs by at most half an ulp of the total. Ring adds n-1 times,
 * rounding each time; the binomial tree rounds once per internal node, at most n-1 times. So
 * both stay within (n-1)/2 ulps of the exact sum; direct rounds once (1/2 ulp). */
static uint16_t input(int rank, size_t i, int positive)
{
    uint64_t h = th_hash64((uint64_t)rank, i, 77);
    double u = (double)(h >> 11) / 9007199254740992.0; /* [0, 1) */
    double v = positive ? 0.5 + 1.5 * u : (u - 0.5) * 64.0;
    return th_to_bf16(v);
}

static double ulp_bf16(double x)
{
    int e;
    frexp(fabs(x), &e); /* x = m * 2^e, m in [0.5, 1) */
    return ldexp(1.0, e - 8); /* 8 significant bits */
}

static int check_rank(int rank, int size, void *arg)
{
    const char *const *algos = arg;
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_OK)
        return th_fail("init: %s: %s", tutti_strerror(st), tutti_last_error());
    uint16_t *in = malloc(N * 2), *out = malloc(N * 2), *all = malloc((size_t)size * N * 2);
    int rc = 0;
    for (int positive = 1; positive >= 0; positive--) {
        for (size_t i = 0; i < N; i++)
            in[i] = input(rank, i, positive);
        for (int a = 0; algos[a] != NULL; a++) {
            if (tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLREDUCE, algos[a]) != TUTTI_OK)
                return th_fail("set %s: %s", algos[a], tutti_comm_last_error(comm));
            st = tutti_allreduce(in, out, N, TUTTI_BFLOAT16, TUTTI_SUM, comm, NULL);
            if (st != TUTTI_OK)
                return th_fail("%s: %s: %s", algos[a], tutti_strerror(st), tutti_comm_last_error(comm));
            /* the same bits on every rank */
            st = tutti_allgather(out, all, N, TUTTI_BFLOAT16, comm, NULL);
            if (st != TUTTI_OK)
                return th_fail("allgather: %s", tutti_strerror(st));
            for (int r = 1; r < size; r++)
                if (memcmp(all, all + (size_t)r * N, N * 2) != 0)
                    rc = th_fail("%s: rank %d's result differs from rank 0's", algos[a], r);
            double worst = 0;
            size_t worst_i = 0;
            for (size_t i = 0; i < N; i++) {
                double exact = 0;
                float f32 = 0;
                for (int r = 0; r < size; r++) {
                    exact += th_from_bf16(input(r, i, positive));
                    f32 += (float)th_from_bf16(input(r, i, positive));
                }
                if (strcmp(algos[a], "direct") == 0 && out[i] != th_to_bf16((double)f32)) {
                    rc = th_fail("direct [%zu]: 0x%04x, want RNE(fp32 sum in rank order) 0x%04x", i,
                                 out[i], th_to_bf16((double)f32));
                    break;
                }
                if (positive) {
                    double err = fabs(th_from_bf16(out[i]) - exact) / ulp_bf16(exact);
                    if (err > worst) {
                        worst = err;
                        worst_i = i;
                    }
                }
            }
            if (positive) {
                double bound = strcmp(algos[a], "direct") == 0 ? 0.5 : 0.5 * (size - 1);
                if (rank == 0)
                    fprintf(stderr, "# bf16 allreduce %s, %d ranks: max error %.3f ulp (bound %.1f)\n",
                            algos[a], size, worst, bound);
                if (worst > bound + 1e-9)
                    rc = th_fail("%s: error %.3f ulp at [%zu] exceeds the bound %.1f", algos[a], worst,
                                 worst_i, bound);
            }
        }
    }
    free(in);
    free(out);
    free(all);
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_accuracy)
{
    static const char *const shm_algos[] = {"direct", "ring", "tree", NULL};
    static const char *const ofi_algos[] = {"ring", "tree", NULL};
    for (int n = 2; n <= 8; n++)
        ck_assert_msg(th_run(n, "shm", 120, check_rank, (void *)shm_algos) == 0, "%d ranks, shm", n);
    ck_assert_msg(th_run(3, "ofi", 120, check_rank, (void *)ofi_algos) == 0, "3 ranks, ofi");
}
END_TEST

TH_CHECK_MAIN_ONE("accuracy", "bf16", 400, test_accuracy)
