/* mpi-bench.c: tutti-bench's twin over MPI's collectives (built once against MPICH, once against
 * Open MPI), with the same flags, the same rows and the same -c check, so that the numbers of the
 * peers line up with tutti's column by column. bf16 and fp16, which MPI has no type for, travel as
 * MPI_UINT16_T and are reduced by a user-defined MPI_Op (fp32 arithmetic, rounded to nearest even)
 * — what an application that needs them on MPI has to do. Known peer bug, documented, not worked
 * around: MPICH 4.0.2 reduces MPI_UINT8_T with MIN and MAX as if the bytes were signed (-c fails
 * there: 179 loses to 111 under MAX); Open MPI 4.1.4 gets them right. */
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#define BENCH_PROG "mpi-bench"
#include "bench_common.h"

static const char *const coll_mpi[C_COUNT] = {
    "MPI_Allreduce", "MPI_Allgather", "MPI_Alltoall", "MPI_Reduce_scatter_block",
    "MPI_Bcast",     "MPI_Reduce",    "MPI_Barrier",
};

/* bytes per element of bench_common.h's D_* */
static const size_t dtype_sizes[D_COUNT] = {1, 1, 4, 8, 2, 2, 4, 8};

typedef struct bench {
    opts_t o;
    int rank, size;
    size_t esize;
    MPI_Datatype mdt;
    MPI_Op mop;
    bool user_op; /* mop was created here (fp16/bf16) */
    bufs_t bf;
} bench_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpi-bench COLL [-b MIN] [-e MAX] [-f FACTOR] [-i ITERS] [-x WARMUP]\n"
            "                      [-d DTYPE] [-o OP] [-c]\n"
            "  COLL       allreduce, allgather, alltoall, reduce_scatter, bcast, reduce, barrier\n"
            "             (MPI_Allreduce, MPI_Allgather, MPI_Alltoall, MPI_Reduce_scatter_block,\n"
            "             MPI_Bcast, MPI_Reduce to rank 0, MPI_Barrier)\n"
            "  -b MIN     smallest per-rank message in bytes, K/M/G suffixes allowed (default 8)\n"
            "  -e MAX     largest per-rank message in bytes (default 4M)\n"
            "  -f FACTOR  size multiplier from one row to the next (default 2)\n"
            "  -i ITERS   timed iterations per size, run in full (default: 100, fewer where\n"
            "             one size would take over %.0f s, judged on the warm-up)\n"
            "  -x WARMUP  untimed iterations per size (default 10)\n"
            "  -d DTYPE   int8 uint8 int32 int64 fp16 bf16 fp32 fp64 (default fp32); MPI has no\n"
            "             fp16/bf16 type: those go as MPI_UINT16_T with a user-defined MPI_Op\n"
            "  -o OP      sum prod min max band bor bxor (default sum; MPI has no avg; band/bor/bxor\n"
            "             on integer dtypes only, as MPI defines them)\n"
            "  -c         check every result bit for bit and exit 1 on the first wrong element\n"
            "The same rows as tutti-bench. Launch with the launcher of the MPI it was built with:\n"
            "  mpirun.mpich -n 2 mpi-bench-mpich allreduce\n"
            "  mpirun.openmpi --allow-run-as-root --oversubscribe -n 2 mpi-bench-openmpi allreduce\n"
            "MPI picks its own algorithms: tune them with MPICH's MPIR_CVAR_* variables or Open MPI's\n"
            "--mca coll_tuned_* parameters (tutti-bench's -a has no equivalent here).\n",
            TIME_BUDGET_S);
}

/* fail reports an MPI error in MPI's words and aborts the job, so the other ranks do not hang. */
static void fail(int err, const char *what)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(err, text, &len);
    fprintf(stderr, "mpi-bench: rank %d: %s failed: %s\n", g_rank, what, text);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

#define CHECK(call, what)                                                                      \
    do {                                                                                       \
        int err_ = (call);                                                                     \
        if (err_ != MPI_SUCCESS)                                                               \
            fail(err_, (what));                                                                \
    } while (0)

static void bench_abort(void)
{
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static bool reduces(int c)
{
    return c == C_ALLREDUCE || c == C_REDUCE_SCATTER || c == C_REDUCE;
}

/* ---- 16-bit floats: MPI has neither, so they are reduced by hand -------------------------- */

/* The user-defined ops: inout[i] = in[i] op inout[i], computed in fp32 and rounded once, as a
 * reduction kernel would. MPI calls them with its own chunk lengths. */
#define HALF_OP(name, to_f32, from_f32, expr)                                                  \
    static void name(void *in, void *inout, int *len, MPI_Datatype *dt)                        \
    {                                                                                          \
        (void)dt;                                                                              \
        const uint16_t *a = in;                                                                \
        uint16_t *b = inout;                                                                   \
        for (int i = 0; i < *len; i++) {                                                       \
            float x = to_f32(a[i]), y = to_f32(b[i]);                                          \
            b[i] = from_f32(expr);                                                             \
        }                                                                                      \
    }
HALF_OP(bf16_sum, bf16_to_f32, f32_to_bf16, x + y)
HALF_OP(bf16_prod, bf16_to_f32, f32_to_bf16, x * y)
HALF_OP(bf16_min, bf16_to_f32, f32_to_bf16, y < x ? y : x)
HALF_OP(bf16_max, bf16_to_f32, f32_to_bf16, y > x ? y : x)
HALF_OP(f16_sum, f16_to_f32, f32_to_f16, x + y)
HALF_OP(f16_prod, f16_to_f32, f32_to_f16, x * y)
HALF_OP(f16_min, f16_to_f32, f32_to_f16, y < x ? y : x)
HALF_OP(f16_max, f16_to_f32, f32_to_f16, y > x ? y : x)

/* setup_types picks the MPI datatype and op for -d/-o; false (with a message) where MPI cannot
 * express them. */
static bool setup_types(bench_t *b, char *why, size_t whylen)
{
    int dt = b->o.dtype;
    switch (dt) {
    case D_INT8: b->mdt = MPI_INT8_T; break;
    case D_UINT8: b->mdt = MPI_UINT8_T; break;
    case D_INT32: b->mdt = MPI_INT32_T; break;
    case D_INT64: b->mdt = MPI_INT64_T; break;
    case D_FP16: case D_BF16: b->mdt = MPI_UINT16_T; break;
    case D_FP32: b->mdt = MPI_FLOAT; break;
    default: b->mdt = MPI_DOUBLE; break;
    }
    b->mop = MPI_OP_NULL;
    if (!reduces(b->o.coll))
        return true;
    int op = b->o.op;
    if (op == O_AVG) {
        snprintf(why, whylen, "MPI has no avg op (an application reduces with MPI_SUM and divides)");
        return false;
    }
    if (is_float(dt) && (op == O_BAND || op == O_BOR || op == O_BXOR)) {
        snprintf(why, whylen, "MPI defines %s on integer types only, not on %s",
                 op_names[op], dtype_names[dt]);
        return false;
    }
    if (dt == D_FP16 || dt == D_BF16) {
        static MPI_User_function *const fns[2][4] = {
            {f16_sum, f16_prod, f16_min, f16_max},
            {bf16_sum, bf16_prod, bf16_min, bf16_max},
        };
        CHECK(MPI_Op_create(fns[dt == D_BF16][op], 1, &b->mop), "MPI_Op_create");
        b->user_op = true;
        return true;
    }
    /* a switch, not a table: MPI's handles are not constant expressions in every MPI */
    switch (op) {
    case O_SUM: b->mop = MPI_SUM; break;
    case O_PROD: b->mop = MPI_PROD; break;
    case O_MIN: b->mop = MPI_MIN; break;
    case O_MAX: b->mop = MPI_MAX; break;
    case O_BAND: b->mop = MPI_BAND; break;
    case O_BOR: b->mop = MPI_BOR; break;
    default: b->mop = MPI_BXOR; break;
    }
    return true;
}

/* ---- one call ---------------------------------------------------------------------------- */

static void run_once(void *ctx, size_t count)
{
    bench_t *b = ctx;
    int c = (int)count; /* main checked that every count fits an int */
    MPI_Comm w = MPI_COMM_WORLD;
    switch (b->o.coll) {
    case C_ALLREDUCE:
        CHECK(MPI_Allreduce(b->bf.sendbuf, b->bf.recvbuf, c, b->mdt, b->mop, w), "MPI_Allreduce");
        break;
    case C_ALLGATHER:
        CHECK(MPI_Allgather(b->bf.sendbuf, c, b->mdt, b->bf.recvbuf, c, b->mdt, w), "MPI_Allgather");
        break;
    case C_ALLTOALL:
        CHECK(MPI_Alltoall(b->bf.sendbuf, c, b->mdt, b->bf.recvbuf, c, b->mdt, w), "MPI_Alltoall");
        break;
    case C_REDUCE_SCATTER:
        CHECK(MPI_Reduce_scatter_block(b->bf.sendbuf, b->bf.recvbuf, c, b->mdt, b->mop, w),
              "MPI_Reduce_scatter_block");
        break;
    case C_BCAST: CHECK(MPI_Bcast(b->bf.sendbuf, c, b->mdt, 0, w), "MPI_Bcast"); break;
    case C_REDUCE:
        CHECK(MPI_Reduce(b->bf.sendbuf, b->bf.recvbuf, c, b->mdt, b->mop, 0, w), "MPI_Reduce");
        break;
    default: CHECK(MPI_Barrier(w), "MPI_Barrier"); break;
    }
}

/* ---- statistics and output (tutti-bench's conventions) ---------------------------------- */

static double reduce_f64(double v, MPI_Op op)
{
    double out = 0.0;
    CHECK(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, op, MPI_COMM_WORLD), "MPI_Allreduce of the timings");
    return out;
}

/* library_name turns MPI_Get_library_version's banner into "MPICH 4.0.2" or "Open MPI 4.1.4". */
static void library_name(char *out, size_t outlen)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    MPI_Get_library_version(v, &len);
    const char *p;
    char ver[64] = "";
    if (strncmp(v, "MPICH Version:", 14) == 0) {
        sscanf(v + 14, " %63s", ver);
        snprintf(out, outlen, "MPICH %s", ver);
    } else if ((p = strstr(v, "Open MPI v")) != NULL) {
        sscanf(p + 10, "%63[^, \n]", ver);
        snprintf(out, outlen, "Open MPI %s", ver);
    } else {
        snprintf(out, outlen, "%.*s", (int)strcspn(v, "\n"), v);
    }
}

/* node_count counts the shared-memory domains (nodes) the ranks are on. */
static int node_count(void)
{
    MPI_Comm local;
    int lrank = 0;
    CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_free(&local);
    int leader = lrank == 0, nodes = 0;
    CHECK(MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    return nodes;
}

static void print_header(const bench_t *b, int nodes)
{
    char lib[128];
    library_name(lib, sizeof lib);
    printf("# %s  mpi-bench %s (%s)  dtype %s  op %s  ranks %d  nodes %d  transport MPI's own  "
           "algorithm MPI's choice\n",
           lib, coll_names[b->o.coll], coll_mpi[b->o.coll], dtype_names[b->o.dtype],
           op_names[b->o.op], b->size, nodes);
    if (b->user_op)
        printf("# MPI has no %s type: sent as MPI_UINT16_T, reduced by a user-defined MPI_Op "
               "(fp32 arithmetic, rounded to nearest even)\n",
               dtype_names[b->o.dtype]);
    else if (b->o.dtype == D_FP16 || b->o.dtype == D_BF16)
        printf("# MPI has no %s type: moved as MPI_UINT16_T (no arithmetic needed)\n",
               dtype_names[b->o.dtype]);
    print_conventions(&b->o);
}

static void hook_barrier(void *ctx, bool before_timing)
{
    (void)ctx;
    CHECK(MPI_Barrier(MPI_COMM_WORLD),
          before_timing ? "MPI_Barrier before timing" : "MPI_Barrier before warm-up");
}

static double hook_reduce_f64(void *ctx, double v, int op)
{
    (void)ctx;
    return reduce_f64(v, op == O_SUM ? MPI_SUM : op == O_MIN ? MPI_MIN : MPI_MAX);
}

int main(int argc, char **argv)
{
    bench_t b = {0};
    parse_args(argc, argv, &b.o, usage,
               "-a \"%s\": MPI picks its own algorithms; set MPICH's MPIR_CVAR_<COLL>_INTRA_ALGORITHM "
               "or Open MPI's --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_<coll>_algorithm N "
               "instead");
    b.esize = dtype_sizes[b.o.dtype];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b.size);
    g_rank = b.rank;
    /* errors come back to CHECK, which names the call before aborting the job */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    char why[160];
    if (!setup_types(&b, why, sizeof why)) {
        if (b.rank == 0) {
            printf("# %s: cannot run %s %s %s: %s\n", "mpi-bench", coll_names[b.o.coll],
                   dtype_names[b.o.dtype], op_names[b.o.op], why);
            fprintf(stderr, "mpi-bench: %s\n", why);
        }
        MPI_Finalize();
        return 2;
    }

    size_t n = (size_t)b.size;
    size_t max_count = b.o.max_bytes / b.esize;
    size_t nsend, nrecv;
    counts(b.o.coll, b.size, max_count, &nsend, &nrecv);
    if (b.o.coll != C_BARRIER && (max_count > (size_t)INT_MAX || nsend > SIZE_MAX / b.esize / n)) {
        if (b.rank == 0)
            fprintf(stderr, "mpi-bench: -e %zu is too large (MPI counts are int: at most %d "
                            "elements per call)\n", b.o.max_bytes, INT_MAX);
        MPI_Finalize();
        return 2;
    }
    b.bf.sendbuf = alloc(nsend * b.esize);
    b.bf.recvbuf = alloc(nrecv * b.esize);
    if (b.o.check) {
        b.bf.expect = alloc((b.o.coll == C_BCAST ? nsend : nrecv) * b.esize);
        b.bf.sendcopy = alloc(nsend * b.esize);
    }

    int nodes = node_count();
    if (b.rank == 0)
        print_header(&b, nodes);

    static const hooks_t hooks = {run_once, hook_barrier, hook_reduce_f64, coll_mpi};
    bool ok = run_sizes(&hooks, &b, &b.o, b.size, b.rank, b.esize, &b.bf);

    if (b.user_op)
        MPI_Op_free(&b.mop);
    free(b.bf.sendbuf);
    free(b.bf.recvbuf);
    free(b.bf.expect);
    free(b.bf.sendcopy);
    MPI_Finalize();
    if (!ok) {
        if (b.rank == 0)
            fprintf(stderr, "mpi-bench: -c found wrong results (see the messages above)\n");
        return 1;
    }
    return 0;
}
