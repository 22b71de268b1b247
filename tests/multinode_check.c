/* multinode_check.c: the hierarchical algorithms against the flat ones, run as one job across
 * the hosts of scripts/cluster.sh (tests/multinode.sh launches it); TAP on rank 0's stdout.
 *
 * Each case runs a collective twice on the same inputs, once with "hier" and once with the flat
 * algorithm (ring, pairwise or tree), and checks, on every rank:
 *   - inputs whose reduction is exact in any order (small integers, in every dtype): both
 *     results equal the expected values bit for bit;
 *   - random floats: the hierarchical result is the same bits on every rank, and within the
 *     bound of docs/multinode.md of the flat one: |hier - flat| <= 2 (P-1) u sum|x| per
 *     element, u the dtype's unit roundoff (each result is within (P-1) u sum|x| of the exact
 *     sum, one rounding per combining step);
 *   - collectives that only move bytes (allgather, alltoall, bcast from every root): equal bit
 *     for bit;
 * with sizes from one element to several window segments, in place and not. Rank 0 reports
 * each case once every rank has voted. Whether "hier" is offered at all is checked against
 * the placement (several nodes, some with several ranks; equal nodes for the ones that split
 * traffic into rails).
 *
 *   multinode_check              the cases above
 *   multinode_check --die R      rank R exits in the middle of a run of hierarchical
 *                                allreduces; every other rank must fail with an error naming
 *                                it (exit 0), not hang and not succeed
 */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tutti.h"

static tutti_comm_t *comm;
static int rank, size, ntest, nfail;

static void die(const char *what, tutti_status_t st)
{
    fprintf(stderr, "multinode_check: rank %d: %s: %s: %s\n", rank, what, tutti_strerror(st),
            comm ? tutti_comm_last_error(comm) : tutti_last_error());
    exit(2);
}

#define CALL(what, call)                                                                       \
    do {                                                                                       \
        tutti_status_t st_ = (call);                                                           \
        if (st_ != TUTTI_OK)                                                                   \
            die(what, st_);                                                                    \
    } while (0)

/* ---- values ------------------------------------------------------------------------------ */

static uint64_t rng_state;
static uint64_t rng(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return rng_state >> 11;
}
static void seed(int r, int salt) { rng_state = 0x9e3779b97f4a7c15ull * (uint64_t)(r + 1) + (uint64_t)salt; }

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even (no NaNs here) */
    return (uint16_t)(u >> 16);
}

static double get(const void *buf, size_t i, tutti_dtype_t dt)
{
    switch (dt) {
    case TUTTI_FLOAT32: return ((const float *)buf)[i];
    case TUTTI_FLOAT64: return ((const double *)buf)[i];
    case TUTTI_INT32: return ((const int32_t *)buf)[i];
    case TUTTI_BFLOAT16: {
        uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    default: abort();
    }
}

static void put(void *buf, size_t i, tutti_dtype_t dt, double v)
{
    switch (dt) {
    case TUTTI_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case TUTTI_FLOAT64: ((double *)buf)[i] = v; break;
    case TUTTI_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case TUTTI_BFLOAT16: ((uint16_t *)buf)[i] = to_bf16((float)v); break;
    default: abort();
    }
}

/* small integer value of rank r at element i: sums over up to 64 ranks stay exact in bf16 */
static double exact_val(int r, size_t i) { return (double)((int)((i * 7 + (size_t)r * 13) % 9) - 4); }

static double unit_roundoff(tutti_dtype_t dt)
{
    return dt == TUTTI_BFLOAT16 ? 0x1p-8 : dt == TUTTI_FLOAT32 ? 0x1p-24 : dt == TUTTI_FLOAT64 ? 0x1p-53 : 0;
}

static void *xalloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 1) != 0)
        die("out of memory", TUTTI_ERR_NO_MEMORY);
    memset(p, 0xa5, n);
    return p;
}

static uint64_t hash(const void *buf, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const unsigned char *)buf)[i]) * 1099511628211ull;
    return h;
}

/* ---- reporting --------------------------------------------------------------------------- */

static void use(tutti_coll_t coll, const char *algo)
{
    CALL(algo, tutti_comm_set_algorithm(comm, coll, algo));
}

/* The checks' own traffic (votes, sums of |x|, hashes) runs flat, so that a broken
 * hierarchical algorithm cannot hide its failure in them. */
static void flat_allreduce(const void *in, void *out, size_t n, tutti_dtype_t dt, tutti_op_t op)
{
    use(TUTTI_COLL_ALLREDUCE, "tree");
    CALL("flat allreduce", tutti_allreduce(in, out, n, dt, op, comm, NULL));
    use(TUTTI_COLL_ALLREDUCE, "auto");
}

static void flat_allgather(const void *in, void *out, size_t n, tutti_dtype_t dt)
{
    use(TUTTI_COLL_ALLGATHER, "ring");
    CALL("flat allgather", tutti_allgather(in, out, n, dt, comm, NULL));
    use(TUTTI_COLL_ALLGATHER, "auto");
}

/* report: every rank votes; rank 0 prints the TAP line. Failures were described on stderr by
 * the rank that found them. */
static void report(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(int ok, const char *fmt, ...)
{
    int32_t mine = ok, all = 0;
    flat_allreduce(&mine, &all, 1, TUTTI_INT32, TUTTI_MIN);
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    ntest++;
    if (!all)
        nfail++;
    if (rank == 0) {
        printf("%s %d - %s\n", all ? "ok" : "not ok", ntest, what);
        fflush(stdout);
    }
}

/* ---- cases ------------------------------------------------------------------------------- */

/* reduction (allreduce or reduce_scatter) of count elements per rank (per block for
 * reduce_scatter), exact or random inputs, hier against flat. */
static void check_reduction_algo(const char *algo, tutti_coll_t coll, tutti_dtype_t dt,
                                 tutti_op_t op, size_t count, bool exact, bool in_place)
{
    const bool rs = coll == TUTTI_COLL_REDUCE_SCATTER;
    const size_t es = tutti_dtype_size(dt), nin = rs ? count * (size_t)size : count;
    char *in = xalloc(nin * es), *out[2] = {xalloc(nin * es), xalloc(nin * es)};
    double *sumabs = calloc(nin, sizeof *sumabs), *absx = calloc(nin, sizeof *absx);
    seed(rank, (int)count);
    for (size_t i = 0; i < nin; i++) {
        double v = exact ? exact_val(rank, i) : (double)(int64_t)(rng() % 2000001 - 1000000) * 1e-6;
        put(in, i, dt, v);
        absx[i] = fabs(get(in, i, dt));
    }
    /* sum of |x| over ranks, in fp64: the scale of the rounding bound */
    if (!exact)
        flat_allreduce(absx, sumabs, nin, TUTTI_FLOAT64, TUTTI_SUM);
    const char *algos[2] = {algo, "ring"};
    for (int a = 0; a < 2; a++) {
        use(coll, algos[a]);
        char *o = out[a];
        const void *s = in;
        if (in_place) {
            memcpy(o, in, nin * es);
            s = TUTTI_IN_PLACE;
        }
        if (rs)
            CALL(algos[a], tutti_reduce_scatter(s, o, count, dt, op, comm, NULL));
        else
            CALL(algos[a], tutti_allreduce(s, o, count, dt, op, comm, NULL));
    }
    use(coll, "auto");
    int ok = 1;
    const size_t nout = count, base = rs ? (size_t)rank * count : 0;
    for (size_t i = 0; i < nout && ok; i++) {
        double h = get(out[0], i, dt), f = get(out[1], i, dt);
        if (exact) {
            double want = 0;
            for (int r = 0; r < size; r++)
                want = op == TUTTI_MAX ? (r ? fmax(want, exact_val(r, base + i)) : exact_val(r, base + i))
                                       : want + exact_val(r, base + i);
            if (op == TUTTI_AVG)
                want /= size;
            uint64_t hb = 0, fb = 0, wb = 0;
            char wbuf[8];
            put(wbuf, 0, dt, want);
            memcpy(&hb, out[0] + i * es, es);
            memcpy(&fb, out[1] + i * es, es);
            memcpy(&wb, wbuf, es);
            if (hb != wb || fb != wb) {
                fprintf(stderr, "rank %d: element %zu: hier %.17g, flat %.17g, want %.17g\n", rank,
                        i, h, f, want);
                ok = 0;
            }
        } else {
            double bound = 2.0 * (size - 1) * unit_roundoff(dt) * sumabs[base + i] * 1.0001;
            if (!(fabs(h - f) <= bound)) {
                fprintf(stderr, "rank %d: element %zu: hier %.17g, flat %.17g differ by %.3g > "
                        "bound %.3g\n", rank, i, h, f, fabs(h - f), bound);
                ok = 0;
            }
        }
    }
    /* the hierarchical result is the same bits on every rank (for reduce_scatter, the gathered
     * blocks are compared through their hashes' agreement with an allgather of the blocks) */
    uint64_t mine = hash(out[0], nout * es), *all = calloc((size_t)size, sizeof *all);
    if (!rs) {
        flat_allgather(&mine, all, 1, TUTTI_INT64);
        for (int r = 0; r < size; r++)
            if (all[r] != mine) {
                fprintf(stderr, "rank %d: hier result differs from rank %d's\n", rank, r);
                ok = 0;
            }
    }
    report(ok, "%s %s vs ring: %s %s %zu elements%s, %s inputs", rs ? "reduce_scatter" : "allreduce",
           algo, tutti_dtype_name(dt), tutti_op_name(op), count, in_place ? " in place" : "",
           exact ? "exact" : "random");
    free(all);
    free(in);
    free(out[0]);
    free(out[1]);
    free(sumabs);
    free(absx);
}

static void check_reduction(tutti_coll_t coll, tutti_dtype_t dt, tutti_op_t op, size_t count,
                            bool exact, bool in_place)
{
    check_reduction_algo("hier", coll, dt, op, count, exact, in_place);
}

/* allgather / alltoall of random bytes: hier == flat bit for bit */
static void check_movement(tutti_coll_t coll, size_t count, bool in_place)
{
    const size_t n = count * (size_t)size; /* elements in recvbuf (and alltoall's sendbuf) */
    const size_t nin = coll == TUTTI_COLL_ALLGATHER ? count : n;
    uint32_t *in = xalloc(nin * 4), *out[2] = {xalloc(n * 4), xalloc(n * 4)};
    seed(rank, (int)count + 7);
    for (size_t i = 0; i < nin; i++)
        in[i] = (uint32_t)rng();
    const char *algos[2] = {"hier", coll == TUTTI_COLL_ALLGATHER ? "ring" : "pairwise"};
    for (int a = 0; a < 2; a++) {
        use(coll, algos[a]);
        const void *s = in;
        if (in_place) {
            s = TUTTI_IN_PLACE;
            memcpy(coll == TUTTI_COLL_ALLGATHER ? out[a] + (size_t)rank * count : out[a], in, nin * 4);
        }
        if (coll == TUTTI_COLL_ALLGATHER)
            CALL(algos[a], tutti_allgather(s, out[a], count, TUTTI_FLOAT32, comm, NULL));
        else
            CALL(algos[a], tutti_alltoall(s, out[a], count, TUTTI_FLOAT32, comm, NULL));
    }
    use(coll, "auto");
    int ok = memcmp(out[0], out[1], n * 4) == 0;
    /* and both are what the inputs say: block r of an allgather is rank r's input */
    if (ok && coll == TUTTI_COLL_ALLGATHER) {
        ok = memcmp(out[0] + (size_t)rank * count, in, count * 4) == 0;
    }
    if (!ok)
        fprintf(stderr, "rank %d: %s hier and flat differ\n", rank,
                coll == TUTTI_COLL_ALLGATHER ? "allgather" : "alltoall");
    report(ok, "%s hier vs %s: %zu elements per rank%s, random bits",
           coll == TUTTI_COLL_ALLGATHER ? "allgather" : "alltoall", algos[1], count,
           in_place ? " in place" : "");
    free(in);
    free(out[0]);
    free(out[1]);
}

static void check_bcast(size_t count)
{
    uint32_t *buf[2] = {xalloc(count * 4), xalloc(count * 4)}, *want = xalloc(count * 4);
    int ok = 1;
    for (int root = 0; root < size; root++) {
        seed(root, (int)count + 11);
        for (size_t i = 0; i < count; i++)
            want[i] = (uint32_t)rng();
        const char *algos[2] = {"hier", "tree"};
        for (int a = 0; a < 2; a++) {
            use(TUTTI_COLL_BCAST, algos[a]);
            if (rank == root)
                memcpy(buf[a], want, count * 4);
            else
                memset(buf[a], 0x5a, count * 4);
            CALL(algos[a], tutti_broadcast(buf[a], count, TUTTI_FLOAT32, root, comm, NULL));
        }
        if (memcmp(buf[0], want, count * 4) != 0 || memcmp(buf[1], want, count * 4) != 0) {
            fprintf(stderr, "rank %d: bcast from %d: wrong data\n", rank, root);
            ok = 0;
        }
    }
    use(TUTTI_COLL_BCAST, "auto");
    report(ok, "bcast hier vs tree from every root: %zu elements", count);
    free(buf[0]);
    free(buf[1]);
    free(want);
}

/* offered: where "hier" may be named, against what the placement says */
static void check_offered(void)
{
    int32_t ls = tutti_comm_local_size(comm), lo = 0, hi = 0;
    flat_allreduce(&ls, &lo, 1, TUTTI_INT32, TUTTI_MIN);
    flat_allreduce(&ls, &hi, 1, TUTTI_INT32, TUTTI_MAX);
    const bool nodes = tutti_comm_node_count(comm) > 1 && hi > 1, even = nodes && lo == hi;
    const struct {
        tutti_coll_t coll;
        bool want;
    } cases[] = {{TUTTI_COLL_ALLREDUCE, nodes}, {TUTTI_COLL_BCAST, nodes},
                 {TUTTI_COLL_ALLGATHER, even},  {TUTTI_COLL_ALLTOALL, even},
                 {TUTTI_COLL_REDUCE_SCATTER, even}};
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tutti_status_t st = tutti_comm_set_algorithm(comm, cases[i].coll, "hier");
        if ((st == TUTTI_OK) != cases[i].want) {
            fprintf(stderr, "rank %d: collective %d: hier %s but should %s (%d nodes, %d..%d "
                    "ranks per node): %s\n", rank, (int)cases[i].coll,
                    st == TUTTI_OK ? "accepted" : "refused", cases[i].want ? "be" : "not be",
                    tutti_comm_node_count(comm), lo, hi, tutti_comm_last_error(comm));
            ok = 0;
        }
        if (st == TUTTI_ERR_INVALID_ARG && strstr(tutti_comm_last_error(comm), "needs") == NULL)
            ok = 0; /* the refusal says what it needs */
        use(cases[i].coll, "auto");
        /* alltoall aggregates only blocks under 256 KiB by default (select.c): above, pairwise */
        const bool a2a = cases[i].coll == TUTTI_COLL_ALLTOALL;
        const char *dflt = tutti_comm_algorithm(comm, cases[i].coll, a2a ? 64 << 10 : 1 << 20);
        const char *big = tutti_comm_algorithm(comm, cases[i].coll, 1 << 20);
        if (a2a && strcmp(big, "pairwise") != 0) {
            fprintf(stderr, "rank %d: alltoall of 1 MiB blocks: the default is %s, not pairwise\n",
                    rank, big);
            ok = 0;
        }
        if ((strcmp(dflt, "hier") == 0) != cases[i].want) {
            fprintf(stderr, "rank %d: collective %d: the default is %s\n", rank,
                    (int)cases[i].coll, dflt);
            ok = 0;
        }
    }
    report(ok, "hier offered and chosen by default exactly where the placement allows "
           "(%d nodes, %d..%d ranks per node)", tutti_comm_node_count(comm), lo, hi);
    if (!nodes) {
        if (rank == 0)
            printf("# no node has several ranks here: nothing hierarchical to compare\n");
        tutti_comm_destroy(comm);
        printf("1..%d\n", ntest);
        exit(nfail ? 1 : 0);
    }
}

static int die_test(int victim)
{
    double x[1024] = {0}, y[1024];
    use(TUTTI_COLL_ALLREDUCE, "hier");
    for (int it = 0; it < 1000; it++) {
        if (it == 20 && rank == victim) {
            fprintf(stderr, "rank %d: exiting on purpose in the middle of the run\n", rank);
            _exit(3);
        }
        tutti_status_t st = tutti_allreduce(x, y, it % 2 ? 1024 : 8, TUTTI_FLOAT64, TUTTI_SUM, comm,
                                            NULL);
        if (st != TUTTI_OK) {
            const char *e = tutti_comm_last_error(comm);
            char want[32];
            snprintf(want, sizeof want, "rank %d", victim);
            printf("rank %d: allreduce #%d failed as it should: %s: %s\n", rank, it,
                   tutti_strerror(st), e);
            /* the error names the dead rank, or a rank that failed because of it */
            return st == TUTTI_ERR_PEER_FAILED || st == TUTTI_ERR_TIMEOUT || strstr(e, want) ? 0 : 1;
        }
    }
    fprintf(stderr, "rank %d: every allreduce succeeded although rank %d died\n", rank, victim);
    return 1;
}

int main(int argc, char **argv)
{
    CALL("tutti_comm_init_env", tutti_comm_init_env(NULL, &comm));
    rank = tutti_comm_rank(comm);
    size = tutti_comm_size(comm);
    if (argc == 3 && strcmp(argv[1], "--die") == 0)
        return die_test(atoi(argv[2]));
    if (argc != 1) {
        fprintf(stderr, "usage: multinode_check [--die RANK]\n");
        return 2;
    }
    if (rank == 0)
        printf("# %d ranks on %d nodes\n", size, tutti_comm_node_count(comm));
    /* recursive halving/doubling over the whole group (folding when size is no power of two),
     * the flat algorithm that rails of many nodes use */
    static const size_t rcounts[] = {1, 4099, 300007, 2500001};
    for (size_t k = 0; k < sizeof rcounts / sizeof rcounts[0]; k++) {
        check_reduction_algo("rhd", TUTTI_COLL_ALLREDUCE, TUTTI_FLOAT32, TUTTI_SUM, rcounts[k], true, k % 2);
        check_reduction_algo("rhd", TUTTI_COLL_ALLREDUCE, TUTTI_BFLOAT16, TUTTI_SUM, rcounts[k], false, false);
    }
    check_reduction_algo("rhd", TUTTI_COLL_ALLREDUCE, TUTTI_FLOAT64, TUTTI_AVG, 1001, true, false);
    check_offered();
    static const size_t counts[] = {1, 13, 4099, 70001, 300007};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        size_t n = counts[k];
        check_reduction(TUTTI_COLL_ALLREDUCE, TUTTI_FLOAT32, TUTTI_SUM, n, true, k % 2);
        check_reduction(TUTTI_COLL_ALLREDUCE, TUTTI_BFLOAT16, TUTTI_SUM, n, true, false);
        check_reduction(TUTTI_COLL_ALLREDUCE, TUTTI_INT32, TUTTI_MAX, n, true, false);
        check_reduction(TUTTI_COLL_ALLREDUCE, TUTTI_FLOAT32, TUTTI_SUM, n, false, false);
        check_reduction(TUTTI_COLL_ALLREDUCE, TUTTI_BFLOAT16, TUTTI_SUM, n, false, k % 2);
    }
    check_reduction(TUTTI_COLL_ALLREDUCE, TUTTI_FLOAT64, TUTTI_AVG, 4096, true, false);
    check_reduction(TUTTI_COLL_ALLREDUCE, TUTTI_FLOAT64, TUTTI_SUM, 300007, false, true);
    int32_t ls = tutti_comm_local_size(comm), lo = 0, hi = 0;
    flat_allreduce(&ls, &lo, 1, TUTTI_INT32, TUTTI_MIN);
    flat_allreduce(&ls, &hi, 1, TUTTI_INT32, TUTTI_MAX);
    if (lo == hi) { /* the rail algorithms: nodes of equal size */
        static const size_t per[] = {1, 5, 3001, 60013};
        for (size_t k = 0; k < sizeof per / sizeof per[0]; k++) {
            check_reduction(TUTTI_COLL_REDUCE_SCATTER, TUTTI_FLOAT32, TUTTI_SUM, per[k], true, k % 2);
            check_reduction(TUTTI_COLL_REDUCE_SCATTER, TUTTI_BFLOAT16, TUTTI_SUM, per[k], false, false);
            check_movement(TUTTI_COLL_ALLGATHER, per[k], k % 2);
            check_movement(TUTTI_COLL_ALLTOALL, per[k], k % 2);
        }
        check_reduction(TUTTI_COLL_REDUCE_SCATTER, TUTTI_FLOAT64, TUTTI_AVG, 1000, true, false);
    }
    check_bcast(1);
    check_bcast(100003);
    CALL("tutti_comm_destroy", tutti_comm_destroy(comm));
    comm = NULL;
    if (rank == 0)
        printf("1..%d\n", ntest);
    return nfail ? 1 : 0;
}
