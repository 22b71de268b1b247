/* tutti-bench.c: an osu-style benchmark of tutti's collectives, one row per message size, with
 * an optional bit-exact check of every result (-c); rank 0 prints, every rank measures. */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tutti.h"

#define BENCH_PROG "tutti-bench"
#include "bench_common.h"

/* bench_common.h's C_*, D_* and O_* follow tutti.h's enums, so values pass straight through. */
#define SAME(a, b) ((int)(a) == (int)(b)) /* ints: the enums' types differ */
_Static_assert(SAME(C_ALLREDUCE, TUTTI_COLL_ALLREDUCE) && SAME(C_ALLGATHER, TUTTI_COLL_ALLGATHER) &&
                   SAME(C_ALLTOALL, TUTTI_COLL_ALLTOALL) &&
                   SAME(C_REDUCE_SCATTER, TUTTI_COLL_REDUCE_SCATTER) &&
                   SAME(C_BCAST, TUTTI_COLL_BCAST) &&
                   SAME(C_REDUCE, TUTTI_COLL_REDUCE) && SAME(C_BARRIER, TUTTI_COLL_BARRIER) &&
                   SAME(C_COUNT, TUTTI_COLL_COUNT),
               "bench_common.h's collectives are not in tutti.h's order");
_Static_assert(SAME(D_INT8, TUTTI_INT8) && SAME(D_UINT8, TUTTI_UINT8) && SAME(D_INT32, TUTTI_INT32) &&
                   SAME(D_INT64, TUTTI_INT64) && SAME(D_FP16, TUTTI_FLOAT16) &&
                   SAME(D_BF16, TUTTI_BFLOAT16) && SAME(D_FP32, TUTTI_FLOAT32) &&
                   SAME(D_FP64, TUTTI_FLOAT64) && SAME(D_COUNT, TUTTI_DTYPE_COUNT),
               "bench_common.h's dtypes are not in tutti.h's order");
_Static_assert(SAME(O_SUM, TUTTI_SUM) && SAME(O_PROD, TUTTI_PROD) && SAME(O_MIN, TUTTI_MIN) &&
                   SAME(O_MAX, TUTTI_MAX) && SAME(O_AVG, TUTTI_AVG) && SAME(O_BAND, TUTTI_BAND) &&
                   SAME(O_BOR, TUTTI_BOR) && SAME(O_BXOR, TUTTI_BXOR) && SAME(O_COUNT, TUTTI_OP_COUNT),
               "bench_common.h's ops are not in tutti.h's order");
#undef SAME

typedef struct bench {
    opts_t o;
    tutti_comm_t *comm;
    int rank, size;
    size_t esize;
    bufs_t bf;
    size_t send_cap, recv_cap;
} bench_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tutti-bench COLL [-b MIN] [-e MAX] [-f FACTOR] [-i ITERS] [-x WARMUP]\n"
            "                        [-d DTYPE] [-o OP] [-a ALGO] [-c]\n"
            "  COLL       allreduce, allgather, alltoall, reduce_scatter, bcast, reduce, barrier\n"
            "  -b MIN     smallest per-rank message in bytes, K/M/G suffixes allowed (default 8)\n"
            "  -e MAX     largest per-rank message in bytes (default 4M)\n"
            "  -f FACTOR  size multiplier from one row to the next (default 2)\n"
            "  -i ITERS   timed iterations per size, run in full (default: 100, fewer where\n"
            "             one size would take over %.0f s, judged on the warm-up)\n"
            "  -x WARMUP  untimed iterations per size (default 10)\n"
            "  -d DTYPE   int8 uint8 int32 int64 fp16 bf16 fp32 fp64 (default fp32)\n"
            "  -o OP      sum prod min max avg band bor bxor (default sum)\n"
            "  -a ALGO    algorithm override, oneCCL syntax: \"ring\" or \"tree:0-16384;ring:16385-max\"\n"
            "  -c         check every result bit for bit (avg: within 1 ulp) and exit 1 on the\n"
            "             first wrong element\n"
            "Launch with mpirun.mpich, mpirun.openmpi, torchrun --no-python, srun, or\n"
            "RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT.\n",
            TIME_BUDGET_S);
}

static void bench_abort(void)
{
    exit(1);
}

/* fail reports a tutti error with the library's own explanation and exits; peers then see this
 * rank gone and fail too (tutti's waits have deadlines), so nothing hangs. */
static void fail(tutti_comm_t *comm, tutti_status_t st, const char *what)
{
    const char *text = comm ? tutti_comm_last_error(comm) : "";
    if (text == NULL || *text == '\0')
        text = tutti_last_error();
    if (g_rank >= 0)
        fprintf(stderr, "tutti-bench: rank %d: ", g_rank);
    else /* before the communicator: the launcher's rank, where it gave one */
        fprintf(stderr, "tutti-bench: %s%s%s", getenv("RANK") ? "RANK " : "",
                getenv("RANK") ? getenv("RANK") : "", getenv("RANK") ? ": " : "");
    fprintf(stderr, "%s failed: %s%s%s\n", what, tutti_strerror(st), *text ? ": " : "", text);
    exit(1);
}

#define CHECK(comm, call, what)                                                                \
    do {                                                                                       \
        tutti_status_t st_ = (call);                                                           \
        if (st_ != TUTTI_OK)                                                                   \
            fail((comm), st_, (what));                                                         \
    } while (0)

/* ---- one call ---------------------------------------------------------------------------- */

static void run_once(void *ctx, size_t count)
{
    bench_t *b = ctx;
    tutti_comm_t *c = b->comm;
    tutti_dtype_t dt = b->o.dtype;
    switch (b->o.coll) {
    case TUTTI_COLL_ALLREDUCE:
        CHECK(c, tutti_allreduce(b->bf.sendbuf, b->bf.recvbuf, count, dt, b->o.op, c, NULL), "tutti_allreduce");
        break;
    case TUTTI_COLL_ALLGATHER:
        CHECK(c, tutti_allgather(b->bf.sendbuf, b->bf.recvbuf, count, dt, c, NULL), "tutti_allgather");
        break;
    case TUTTI_COLL_ALLTOALL:
        CHECK(c, tutti_alltoall(b->bf.sendbuf, b->bf.recvbuf, count, dt, c, NULL), "tutti_alltoall");
        break;
    case TUTTI_COLL_REDUCE_SCATTER:
        CHECK(c, tutti_reduce_scatter(b->bf.sendbuf, b->bf.recvbuf, count, dt, b->o.op, c, NULL),
              "tutti_reduce_scatter");
        break;
    case TUTTI_COLL_BCAST:
        CHECK(c, tutti_broadcast(b->bf.sendbuf, count, dt, 0, c, NULL), "tutti_broadcast");
        break;
    case TUTTI_COLL_REDUCE:
        CHECK(c, tutti_reduce(b->bf.sendbuf, b->bf.recvbuf, count, dt, b->o.op, 0, c, NULL), "tutti_reduce");
        break;
    default: CHECK(c, tutti_barrier(c, NULL), "tutti_barrier"); break;
    }
}

/* ---- statistics -------------------------------------------------------------------------- */

/* reduce_f64: op (O_SUM, O_MIN or O_MAX, tutti's values) of v over all ranks. */
static double reduce_f64(void *ctx, double v, int op)
{
    bench_t *b = ctx;
    double out = 0.0;
    CHECK(b->comm, tutti_allreduce(&v, &out, 1, TUTTI_FLOAT64, op, b->comm, NULL),
          "tutti_allreduce of the timings");
    return out;
}

static void print_header(const bench_t *b)
{
    char transports[64] = "";
    if (b->size == 1) {
        snprintf(transports, sizeof transports, "self");
    } else {
        for (int p = 0; p < b->size; p++) {
            const char *t = p == b->rank ? NULL : tutti_comm_transport(b->comm, p);
            if (t == NULL || strstr(transports, t) != NULL)
                continue;
            size_t len = strlen(transports);
            snprintf(transports + len, sizeof transports - len, "%s%s", len ? "+" : "", t);
        }
    }
    /* What the smallest and the largest size run (an override, or the automatic choice). */
    const char *lo = tutti_comm_algorithm(b->comm, b->o.coll, b->o.min_bytes);
    const char *hi = tutti_comm_algorithm(b->comm, b->o.coll, b->o.max_bytes);
    printf("# tutti %s  tutti-bench %s  dtype %s  op %s  ranks %d  nodes %d  transport %s  "
           "algorithm %s (%s at -b, %s at -e)\n",
           tutti_version(), coll_names[b->o.coll], tutti_dtype_name(b->o.dtype),
           tutti_op_name(b->o.op), b->size, tutti_comm_node_count(b->comm),
           *transports ? transports : "none", b->o.algo ? b->o.algo : "auto", lo ? lo : "?",
           hi ? hi : "?");
    print_conventions(&b->o);
}

static void hook_barrier(void *ctx, bool before_timing)
{
    bench_t *b = ctx;
    CHECK(b->comm, tutti_barrier(b->comm, NULL),
          before_timing ? "tutti_barrier before timing" : "tutti_barrier before warm-up");
}

int main(int argc, char **argv)
{
    bench_t b = {0};
    parse_args(argc, argv, &b.o, usage, NULL);
    b.esize = tutti_dtype_size(b.o.dtype);
    if (b.o.coll != TUTTI_COLL_BARRIER && b.o.max_bytes / b.esize == 0) {
        /* every size rounds down to whole elements: this range would measure nothing */
        fprintf(stderr, "tutti-bench: -e %zu holds no whole %s element (%zu bytes): raise -e\n",
                b.o.max_bytes, tutti_dtype_name(b.o.dtype), b.esize);
        return 2;
    }

    CHECK(NULL, tutti_comm_init_env(NULL, &b.comm), "tutti_comm_init_env");
    b.rank = tutti_comm_rank(b.comm);
    b.size = tutti_comm_size(b.comm);
    g_rank = b.rank;
    if (b.o.algo != NULL)
        CHECK(b.comm, tutti_comm_set_algorithm(b.comm, b.o.coll, b.o.algo), "tutti_comm_set_algorithm");

    size_t n = (size_t)b.size;
    size_t max_count = b.o.max_bytes / b.esize;
    if (b.o.coll != TUTTI_COLL_BARRIER && max_count > SIZE_MAX / n / b.esize) {
        fprintf(stderr, "tutti-bench: -e %zu is too large for %d ranks\n", b.o.max_bytes, b.size);
        return 2;
    }
    size_t nsend, nrecv;
    counts(b.o.coll, b.size, max_count, &nsend, &nrecv);
    b.send_cap = nsend * b.esize;
    b.recv_cap = nrecv * b.esize;
    b.bf.sendbuf = alloc(b.send_cap);
    b.bf.recvbuf = alloc(b.recv_cap);
    if (b.o.check) {
        b.bf.expect = alloc(b.o.coll == TUTTI_COLL_BCAST ? b.send_cap : b.recv_cap);
        b.bf.sendcopy = alloc(b.send_cap);
    }

    if (b.rank == 0)
        print_header(&b);

    static const hooks_t hooks = {run_once, hook_barrier, reduce_f64, coll_names};
    bool ok = run_sizes(&hooks, &b, &b.o, b.size, b.rank, b.esize, &b.bf); /* all ranks agree */

    CHECK(b.comm, tutti_comm_destroy(b.comm), "tutti_comm_destroy");
    free(b.bf.sendbuf);
    free(b.bf.recvbuf);
    free(b.bf.expect);
    free(b.bf.sendcopy);
    if (!ok) {
        if (b.rank == 0)
            fprintf(stderr, "tutti-bench: -c found wrong results (see the messages above)\n");
        return 1;
    }
    return 0;
}
