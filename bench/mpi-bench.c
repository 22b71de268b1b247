/* mpi-bench.c: tutti-bench's twin over MPI's collectives (built once against MPICH, once against
 * Open MPI), with the same flags, the same rows and the same -c check, so that the numbers of the
 * peers line up with tutti's column by column. bf16 and fp16, which MPI has no type for, travel as
 * MPI_UINT16_T and are reduced by a user-defined MPI_Op (fp32 arithmetic, rounded to nearest even)
 * — what an application that needs them on MPI has to do. Known peer bug, documented, not worked
 * around: MPICH 4.0.2 reduces MPI_UINT8_T with MIN and MAX as if the bytes were signed (-c fails
 * there: 179 loses to 111 under MAX); Open MPI 4.1.4 gets them right. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <mpi.h>

/* Each size runs at most this long (measured on the warm-up), as in tutti-bench. */
#define TIME_BUDGET_S 1.0
#define ALIGN 64

typedef enum coll {
    C_ALLREDUCE, C_ALLGATHER, C_ALLTOALL, C_REDUCE_SCATTER, C_BCAST, C_REDUCE, C_BARRIER, C_COUNT
} coll_t;
static const char *const coll_names[C_COUNT] = {
    "allreduce", "allgather", "alltoall", "reduce_scatter", "bcast", "reduce", "barrier",
};
static const char *const coll_mpi[C_COUNT] = {
    "MPI_Allreduce", "MPI_Allgather", "MPI_Alltoall", "MPI_Reduce_scatter_block",
    "MPI_Bcast",     "MPI_Reduce",    "MPI_Barrier",
};

/* dtypes in tutti's order and spelling, so that -d means the same in both benches */
typedef enum dtype { D_INT8, D_UINT8, D_INT32, D_INT64, D_FP16, D_BF16, D_FP32, D_FP64, D_COUNT } dtype_t;
static const char *const dtype_names[D_COUNT] = {
    "int8", "uint8", "int32", "int64", "fp16", "bf16", "fp32", "fp64",
};
static const size_t dtype_sizes[D_COUNT] = {1, 1, 4, 8, 2, 2, 4, 8};

typedef enum op { O_SUM, O_PROD, O_MIN, O_MAX, O_AVG, O_BAND, O_BOR, O_BXOR, O_COUNT } op_t;
static const char *const op_names[O_COUNT] = {
    "sum", "prod", "min", "max", "avg", "band", "bor", "bxor",
};

typedef struct opts {
    coll_t coll;
    size_t min_bytes, max_bytes;
    unsigned long factor;
    long iters, warmup;
    dtype_t dtype;
    op_t op;
    bool check;
} opts_t;

typedef struct bench {
    opts_t o;
    int rank, size;
    size_t esize;
    MPI_Datatype mdt;
    MPI_Op mop;
    bool user_op; /* mop was created here (fp16/bf16) */
    void *sendbuf, *recvbuf;
    void *expect, *sendcopy;
} bench_t;

static int g_rank = -1;

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
            "  -i ITERS   timed iterations per size (default 100; fewer where one size would\n"
            "             take over %.0f s, judged on the warm-up)\n"
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

/* die_usage runs before MPI_Init on every rank alike, so plain exit is safe. */
static void die_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "mpi-bench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "; see mpi-bench -h\n");
    exit(2);
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool parse_bytes(const char *s, size_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno != 0)
        return false;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: return false;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0' || (shift && x > (SIZE_MAX >> shift)))
        return false;
    *out = (size_t)(x << shift);
    return true;
}

static long parse_long(const char *s, long lo, const char *flag)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || x < lo)
        die_usage(flag, s);
    return x;
}

static void parse_args(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.coll = C_COUNT, .min_bytes = 8, .max_bytes = 4u << 20, .factor = 2,
                  .iters = 100, .warmup = 10, .dtype = D_FP32, .op = O_SUM};
    int c;
    while ((c = getopt(argc, argv, "b:e:f:i:x:d:o:a:ch")) != -1) {
        switch (c) {
        case 'b':
            if (!parse_bytes(optarg, &o->min_bytes))
                die_usage("-b \"%s\" is not a size like 8, 64K, 4M", optarg);
            break;
        case 'e':
            if (!parse_bytes(optarg, &o->max_bytes))
                die_usage("-e \"%s\" is not a size like 8, 64K, 4M", optarg);
            break;
        case 'f': o->factor = (unsigned long)parse_long(optarg, 2, "-f \"%s\": need an integer >= 2"); break;
        case 'i': o->iters = parse_long(optarg, 1, "-i \"%s\": need an integer >= 1"); break;
        case 'x': o->warmup = parse_long(optarg, 0, "-x \"%s\": need an integer >= 0"); break;
        case 'd': {
            int d;
            for (d = 0; d < D_COUNT; d++)
                if (strcasecmp(optarg, dtype_names[d]) == 0)
                    break;
            if (d == D_COUNT)
                die_usage("-d \"%s\": unknown dtype", optarg);
            o->dtype = (dtype_t)d;
            break;
        }
        case 'o': {
            int p;
            for (p = 0; p < O_COUNT; p++)
                if (strcasecmp(optarg, op_names[p]) == 0)
                    break;
            if (p == O_COUNT)
                die_usage("-o \"%s\": unknown op", optarg);
            o->op = (op_t)p;
            break;
        }
        case 'a':
            die_usage("-a \"%s\": MPI picks its own algorithms; set MPICH's MPIR_CVAR_<COLL>_INTRA_ALGORITHM "
                      "or Open MPI's --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_<coll>_algorithm N "
                      "instead",
                      optarg);
            break;
        case 'c': o->check = true; break;
        case 'h': usage(stdout); exit(0);
        default: fprintf(stderr, "mpi-bench: see mpi-bench -h\n"); exit(2);
        }
    }
    if (optind != argc - 1)
        die_usage("%s", optind >= argc ? "name one collective" : "name exactly one collective");
    for (int k = 0; k < C_COUNT; k++)
        if (strcmp(argv[optind], coll_names[k]) == 0)
            o->coll = (coll_t)k;
    if (o->coll == C_COUNT)
        die_usage("unknown collective \"%s\"", argv[optind]);
    if (o->min_bytes > o->max_bytes)
        die_usage("%s", "-b must not exceed -e");
}

static bool reduces(coll_t c)
{
    return c == C_ALLREDUCE || c == C_REDUCE_SCATTER || c == C_REDUCE;
}

static bool is_float(dtype_t dt)
{
    return dt == D_FP16 || dt == D_BF16 || dt == D_FP32 || dt == D_FP64;
}

/* ---- 16-bit floats: MPI has neither, so they are converted by hand ------------------------ */

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* NaN stays a (quiet) NaN */
    u += 0x7fffu + ((u >> 16) & 1u);          /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* GCC 12 converts _Float16 on x86-64 with correct rounding (in software without AVX512_FP16). */
static uint16_t f32_to_f16(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

static float f16_to_f32(uint16_t u)
{
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}

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
    dtype_t dt = b->o.dtype;
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
    op_t op = b->o.op;
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

/* ---- element access and the expected results (the same values as tutti-bench's) --------- */

static void put(void *buf, size_t i, dtype_t dt, int64_t iv, double fv)
{
    switch (dt) {
    case D_INT8: ((int8_t *)buf)[i] = (int8_t)(uint8_t)(uint64_t)iv; break;
    case D_UINT8: ((uint8_t *)buf)[i] = (uint8_t)(uint64_t)iv; break;
    case D_INT32: ((int32_t *)buf)[i] = (int32_t)(uint32_t)(uint64_t)iv; break;
    case D_INT64: ((int64_t *)buf)[i] = iv; break;
    case D_FP16: ((uint16_t *)buf)[i] = f32_to_f16((float)fv); break;
    case D_BF16: ((uint16_t *)buf)[i] = f32_to_bf16((float)fv); break;
    case D_FP32: ((float *)buf)[i] = (float)fv; break;
    default: ((double *)buf)[i] = fv; break;
    }
}

static double get(const void *buf, size_t i, dtype_t dt)
{
    switch (dt) {
    case D_INT8: return ((const int8_t *)buf)[i];
    case D_UINT8: return ((const uint8_t *)buf)[i];
    case D_INT32: return ((const int32_t *)buf)[i];
    case D_INT64: return (double)((const int64_t *)buf)[i];
    case D_FP16: return f16_to_f32(((const uint16_t *)buf)[i]);
    case D_BF16: return bf16_to_f32(((const uint16_t *)buf)[i]);
    case D_FP32: return ((const float *)buf)[i];
    default: return ((const double *)buf)[i];
    }
}

/* Largest magnitude up to which every integer is exact in dt and no integer type wraps. */
static int64_t exact_limit(dtype_t dt)
{
    switch (dt) {
    case D_INT8: return 127;
    case D_UINT8: return 255;
    case D_INT32: return INT64_C(1) << 24;
    case D_INT64: return INT64_C(1) << 40;
    case D_FP16: return 2048;
    case D_BF16: return 256;
    case D_FP32: return INT64_C(1) << 24;
    default: return INT64_C(1) << 40;
    }
}

static uint64_t mix(uint64_t x) /* splitmix64's finalizer */
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* gen is rank r's input at element i: values that keep every partial result exact, so any
 * correct algorithm gives the same bits (see tutti-bench.c; avg is not offered here). */
static int64_t gen(const bench_t *b, int r, size_t i)
{
    dtype_t dt = b->o.dtype;
    int n = b->size;
    bool unsig = dt == D_UINT8;
    uint64_t x = mix(((uint64_t)i << 16) ^ (uint64_t)r);
    int64_t lim = exact_limit(dt);
    int64_t h;
    switch (b->o.op) {
    case O_BAND: case O_BOR: case O_BXOR:
        return (int64_t)x;
    case O_PROD: {
        int64_t mag = (size_t)r == i % (size_t)n ? 2 : 1;
        if (unsig)
            return mag + (int64_t)(x & 1) * 2;
        return (x & 1) ? -mag : mag;
    }
    case O_MIN: case O_MAX:
        h = lim < 1000 ? lim : 1000;
        break;
    default:
        h = lim / n;
        if (h < 1)
            h = 1;
        if (h > 1000000)
            h = 1000000;
        break;
    }
    if (unsig)
        return (int64_t)(x % (uint64_t)(h + 1));
    return (int64_t)(x % (uint64_t)(2 * h + 1)) - h;
}

static void expected_at(const bench_t *b, void *dst, size_t j, size_t i)
{
    op_t op = b->o.op;
    int64_t v0 = gen(b, 0, i);
    uint64_t acc = (uint64_t)v0;
    double facc = (double)v0;
    for (int r = 1; r < b->size; r++) {
        int64_t v = gen(b, r, i);
        switch (op) {
        case O_SUM: acc += (uint64_t)v; facc += (double)v; break;
        case O_PROD: acc *= (uint64_t)v; facc *= (double)v; break;
        case O_MIN: if (v < (int64_t)acc) acc = (uint64_t)v; if ((double)v < facc) facc = (double)v; break;
        case O_MAX: if (v > (int64_t)acc) acc = (uint64_t)v; if ((double)v > facc) facc = (double)v; break;
        case O_BAND: acc &= (uint64_t)v; break;
        case O_BOR: acc |= (uint64_t)v; break;
        case O_BXOR: acc ^= (uint64_t)v; break;
        default: break;
        }
    }
    put(dst, j, b->o.dtype, (int64_t)acc, facc);
}

/* ---- buffers ------------------------------------------------------------------------------ */

static void *alloc(size_t bytes)
{
    size_t sz = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    if (sz == 0)
        sz = ALIGN;
    void *p = aligned_alloc(ALIGN, sz);
    if (p == NULL) {
        fprintf(stderr, "mpi-bench: rank %d: cannot allocate %zu bytes; lower -e\n", g_rank, sz);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(p, 0, sz); /* touch every page before anything is timed */
    return p;
}

static void counts(const bench_t *b, size_t count, size_t *nsend, size_t *nrecv)
{
    size_t n = (size_t)b->size;
    switch (b->o.coll) {
    case C_ALLGATHER: *nsend = count; *nrecv = n * count; break;
    case C_ALLTOALL: *nsend = n * count; *nrecv = n * count; break;
    case C_REDUCE_SCATTER: *nsend = n * count; *nrecv = count; break;
    case C_BCAST: *nsend = count; *nrecv = 0; break;
    case C_BARRIER: *nsend = 0; *nrecv = 0; break;
    default: *nsend = count; *nrecv = count; break;
    }
}

static void fill(bench_t *b, size_t count)
{
    size_t nsend, nrecv;
    counts(b, count, &nsend, &nrecv);
    dtype_t dt = b->o.dtype;
    bool bcast = b->o.coll == C_BCAST;
    for (size_t i = 0; i < nsend; i++) {
        int64_t v = gen(b, bcast ? 0 : b->rank, i);
        put(b->sendbuf, i, dt, v, (double)v);
    }
    if (!b->o.check)
        return;
    memcpy(b->sendcopy, b->sendbuf, nsend * b->esize);
    size_t n = (size_t)b->size, r = (size_t)b->rank;
    switch (b->o.coll) {
    case C_ALLREDUCE: case C_REDUCE:
        for (size_t i = 0; i < count; i++)
            expected_at(b, b->expect, i, i);
        break;
    case C_REDUCE_SCATTER:
        for (size_t i = 0; i < count; i++)
            expected_at(b, b->expect, i, r * count + i);
        break;
    case C_ALLGATHER:
        for (size_t s = 0; s < n; s++)
            for (size_t i = 0; i < count; i++) {
                int64_t v = gen(b, (int)s, i);
                put(b->expect, s * count + i, dt, v, (double)v);
            }
        break;
    case C_ALLTOALL:
        for (size_t s = 0; s < n; s++)
            for (size_t i = 0; i < count; i++) {
                int64_t v = gen(b, (int)s, r * count + i);
                put(b->expect, s * count + i, dt, v, (double)v);
            }
        break;
    case C_BCAST: memcpy(b->expect, b->sendbuf, count * b->esize); break;
    default: break;
    }
}

/* ---- one call and its check -------------------------------------------------------------- */

static void run_once(bench_t *b, size_t count)
{
    int c = (int)count; /* main checked that every count fits an int */
    MPI_Comm w = MPI_COMM_WORLD;
    switch (b->o.coll) {
    case C_ALLREDUCE:
        CHECK(MPI_Allreduce(b->sendbuf, b->recvbuf, c, b->mdt, b->mop, w), "MPI_Allreduce");
        break;
    case C_ALLGATHER:
        CHECK(MPI_Allgather(b->sendbuf, c, b->mdt, b->recvbuf, c, b->mdt, w), "MPI_Allgather");
        break;
    case C_ALLTOALL:
        CHECK(MPI_Alltoall(b->sendbuf, c, b->mdt, b->recvbuf, c, b->mdt, w), "MPI_Alltoall");
        break;
    case C_REDUCE_SCATTER:
        CHECK(MPI_Reduce_scatter_block(b->sendbuf, b->recvbuf, c, b->mdt, b->mop, w),
              "MPI_Reduce_scatter_block");
        break;
    case C_BCAST: CHECK(MPI_Bcast(b->sendbuf, c, b->mdt, 0, w), "MPI_Bcast"); break;
    case C_REDUCE:
        CHECK(MPI_Reduce(b->sendbuf, b->recvbuf, c, b->mdt, b->mop, 0, w), "MPI_Reduce");
        break;
    default: CHECK(MPI_Barrier(w), "MPI_Barrier"); break;
    }
}

static void poison(bench_t *b, size_t count)
{
    size_t nsend, nrecv;
    counts(b, count, &nsend, &nrecv);
    if (b->o.coll == C_BCAST) {
        if (b->rank != 0)
            memset(b->sendbuf, 0xa5, count * b->esize);
    } else if (b->o.coll != C_REDUCE || b->rank == 0) {
        memset(b->recvbuf, 0xa5, nrecv * b->esize);
    }
}

typedef struct mismatch {
    bool found;
    long iter;
    const char *buf;
    size_t index;
    double got, want;
    uint64_t got_bits, want_bits;
} mismatch_t;

static uint64_t bits(const void *buf, size_t i, size_t esize)
{
    uint64_t u = 0;
    memcpy(&u, (const char *)buf + i * esize, esize);
    return u;
}

static void compare(const bench_t *b, const void *got, const void *want, size_t nelem, long iter,
                    const char *what, mismatch_t *mm)
{
    if (mm->found || nelem == 0 || memcmp(got, want, nelem * b->esize) == 0)
        return;
    for (size_t i = 0; i < nelem; i++) {
        if (bits(got, i, b->esize) == bits(want, i, b->esize))
            continue;
        *mm = (mismatch_t){true, iter, what, i, get(got, i, b->o.dtype), get(want, i, b->o.dtype),
                           bits(got, i, b->esize), bits(want, i, b->esize)};
        return;
    }
}

static void check_result(bench_t *b, size_t count, long iter, mismatch_t *mm)
{
    size_t nsend, nrecv;
    counts(b, count, &nsend, &nrecv);
    switch (b->o.coll) {
    case C_BARRIER: return;
    case C_BCAST: compare(b, b->sendbuf, b->expect, count, iter, "buffer", mm); return;
    case C_REDUCE:
        if (b->rank != 0)
            break;
        /* fallthrough */
    default: compare(b, b->recvbuf, b->expect, nrecv, iter, "result", mm); break;
    }
    compare(b, b->sendbuf, b->sendcopy, nsend, iter, "input (sendbuf changed)", mm);
}

/* ---- statistics and output (tutti-bench's conventions) ---------------------------------- */

static double reduce_f64(double v, MPI_Op op)
{
    double out = 0.0;
    CHECK(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, op, MPI_COMM_WORLD), "MPI_Allreduce of the timings");
    return out;
}

static double busbw_factor(coll_t coll, int n)
{
    switch (coll) {
    case C_ALLREDUCE: return 2.0 * (n - 1) / n;
    case C_ALLGATHER: case C_REDUCE_SCATTER: case C_ALLTOALL: return (double)(n - 1) / n;
    case C_BCAST: case C_REDUCE: return 1.0;
    default: return 0.0;
    }
}

static double algbw_bytes(const bench_t *b, size_t bytes)
{
    switch (b->o.coll) {
    case C_ALLGATHER: case C_REDUCE_SCATTER: case C_ALLTOALL: return (double)bytes * b->size;
    default: return (double)bytes;
    }
}

static const char *size_convention(coll_t coll)
{
    switch (coll) {
    case C_ALLGATHER: return "size = bytes each rank sends (receives n*size); algbw = n*size/time";
    case C_REDUCE_SCATTER: return "size = bytes each rank receives (sends n*size); algbw = n*size/time";
    case C_ALLTOALL:
        return "size = bytes each rank sends to each peer (n*size in all); algbw = n*size/time";
    case C_BARRIER: return "size = 0 (no data); algbw = 0";
    default: return "size = bytes of each rank's buffer; algbw = size/time";
    }
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
    printf("# %s; busbw = algbw * %s (nccl-tests)\n", size_convention(b->o.coll),
           b->o.coll == C_ALLREDUCE                           ? "2(n-1)/n"
           : b->o.coll == C_BCAST || b->o.coll == C_REDUCE    ? "1"
           : b->o.coll == C_BARRIER                           ? "0"
                                                              : "(n-1)/n");
    printf("# us per call: each rank's mean over iters, then avg/min/max over ranks; GBps = 1e9 "
           "bytes/s%s\n",
           b->o.check ? "; -c: every result checked" : "");
    printf("%12s %12s %12s %12s %8s %12s %12s\n", "size", "avg_us", "min_us", "max_us", "iters",
           "algbw_GBps", "busbw_GBps");
    fflush(stdout);
}

static bool bench_size(bench_t *b, size_t count)
{
    size_t bytes = count * b->esize;
    fill(b, count);
    if (b->o.check)
        poison(b, count);
    CHECK(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier before warm-up");

    double t0 = now_s();
    for (long i = 0; i < b->o.warmup; i++)
        run_once(b, count);
    double warm = b->o.warmup > 0 ? (now_s() - t0) / (double)b->o.warmup : 0.0;

    long iters = b->o.iters;
    if (b->o.warmup > 0) {
        double slowest = reduce_f64(warm, MPI_MAX);
        if (slowest * (double)iters > TIME_BUDGET_S) {
            iters = (long)(TIME_BUDGET_S / slowest);
            if (iters < 1)
                iters = 1;
        }
    }

    mismatch_t mm = {0};
    double total = 0.0;
    CHECK(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier before timing");
    if (!b->o.check) {
        t0 = now_s();
        for (long i = 0; i < iters; i++)
            run_once(b, count);
        total = now_s() - t0;
    } else {
        if (b->o.warmup > 0)
            check_result(b, count, -1, &mm);
        for (long i = 0; i < iters; i++) {
            poison(b, count);
            t0 = now_s();
            run_once(b, count);
            total += now_s() - t0;
            check_result(b, count, i, &mm);
        }
    }
    double per = total / (double)iters;
    double avg = reduce_f64(per, MPI_SUM) / b->size;
    double mn = reduce_f64(per, MPI_MIN);
    double mx = reduce_f64(per, MPI_MAX);

    bool ok = true;
    if (b->o.check) {
        if (mm.found) {
            char when[48];
            if (mm.iter < 0)
                snprintf(when, sizeof when, "after the warm-up");
            else
                snprintf(when, sizeof when, "timed iteration %ld", mm.iter);
            fprintf(stderr,
                    "mpi-bench: rank %d: %s %s %s of %zu bytes, %s: %s element %zu is %.17g "
                    "(bits 0x%0*" PRIx64 "), expected %.17g (bits 0x%0*" PRIx64 ")\n",
                    b->rank, coll_mpi[b->o.coll], dtype_names[b->o.dtype], op_names[b->o.op],
                    bytes, when, mm.buf, mm.index, mm.got, (int)(2 * b->esize), mm.got_bits,
                    mm.want, (int)(2 * b->esize), mm.want_bits);
        }
        ok = reduce_f64(mm.found ? 1.0 : 0.0, MPI_MAX) == 0.0;
    }
    if (b->rank == 0) {
        double algbw = avg > 0 ? algbw_bytes(b, bytes) / avg / 1e9 : 0.0;
        printf("%12zu %12.2f %12.2f %12.2f %8ld %12.3f %12.3f%s\n", bytes, avg * 1e6, mn * 1e6,
               mx * 1e6, iters, algbw, algbw * busbw_factor(b->o.coll, b->size),
               ok ? "" : "  WRONG");
        fflush(stdout);
    }
    return ok;
}

int main(int argc, char **argv)
{
    bench_t b = {0};
    parse_args(argc, argv, &b.o);
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
    counts(&b, max_count, &nsend, &nrecv);
    if (b.o.coll != C_BARRIER && (max_count > (size_t)INT_MAX || nsend > SIZE_MAX / b.esize / n)) {
        if (b.rank == 0)
            fprintf(stderr, "mpi-bench: -e %zu is too large (MPI counts are int: at most %d "
                            "elements per call)\n", b.o.max_bytes, INT_MAX);
        MPI_Finalize();
        return 2;
    }
    b.sendbuf = alloc(nsend * b.esize);
    b.recvbuf = alloc(nrecv * b.esize);
    if (b.o.check) {
        b.expect = alloc((b.o.coll == C_BCAST ? nsend : nrecv) * b.esize);
        b.sendcopy = alloc(nsend * b.esize);
    }

    int nodes = node_count();
    if (b.rank == 0)
        print_header(&b, nodes);

    bool ok = true;
    if (b.o.coll == C_BARRIER) {
        ok = bench_size(&b, 0);
    } else {
        size_t last = 0;
        for (size_t bytes = b.o.min_bytes; bytes <= b.o.max_bytes;) {
            size_t count = bytes / b.esize;
            if (count > 0 && count != last) {
                ok = bench_size(&b, count);
                if (!ok)
                    break;
            }
            last = count;
            if (bytes > b.o.max_bytes / b.o.factor)
                break;
            bytes = bytes ? bytes * b.o.factor : 1;
        }
    }

    if (b.user_op)
        MPI_Op_free(&b.mop);
    free(b.sendbuf);
    free(b.recvbuf);
    free(b.expect);
    free(b.sendcopy);
    MPI_Finalize();
    if (!ok) {
        if (b.rank == 0)
            fprintf(stderr, "mpi-bench: -c found wrong results (see the messages above)\n");
        return 1;
    }
    return 0;
}
