/* tutti-bench.c: an osu-style benchmark of tutti's collectives, one row per message size, with
 * an optional bit-exact check of every result (-c); rank 0 prints, every rank measures. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "tutti.h"

/* Each size runs at most this long (measured on the warm-up), so large sizes get fewer
 * iterations instead of making the whole run take minutes. */
#define TIME_BUDGET_S 1.0
#define ALIGN 64

static const char *const coll_names[TUTTI_COLL_COUNT] = {
    [TUTTI_COLL_ALLREDUCE] = "allreduce", [TUTTI_COLL_ALLGATHER] = "allgather",
    [TUTTI_COLL_ALLTOALL] = "alltoall",   [TUTTI_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [TUTTI_COLL_BCAST] = "bcast",         [TUTTI_COLL_REDUCE] = "reduce",
    [TUTTI_COLL_BARRIER] = "barrier",
};

typedef struct opts {
    tutti_coll_t coll;
    size_t min_bytes, max_bytes;
    unsigned long factor;
    long iters, warmup;
    tutti_dtype_t dtype;
    tutti_op_t op;
    const char *algo; /* NULL: auto */
    bool check;
} opts_t;

typedef struct bench {
    opts_t o;
    tutti_comm_t *comm;
    int rank, size;
    size_t esize;
    /* Buffers sized for the largest message; sendbuf doubles as bcast's buffer. */
    void *sendbuf, *recvbuf;
    void *expect;   /* -c: the correct result (recv layout; bcast: buffer layout) */
    void *sendcopy; /* -c: pristine input, to check that the collective left it alone */
    size_t send_cap, recv_cap;
} bench_t;

static int g_rank = -1;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tutti-bench COLL [-b MIN] [-e MAX] [-f FACTOR] [-i ITERS] [-x WARMUP]\n"
            "                        [-d DTYPE] [-o OP] [-a ALGO] [-c]\n"
            "  COLL       allreduce, allgather, alltoall, reduce_scatter, bcast, reduce, barrier\n"
            "  -b MIN     smallest per-rank message in bytes, K/M/G suffixes allowed (default 8)\n"
            "  -e MAX     largest per-rank message in bytes (default 4M)\n"
            "  -f FACTOR  size multiplier from one row to the next (default 2)\n"
            "  -i ITERS   timed iterations per size (default 100; fewer where one size would\n"
            "             take over %.0f s, judged on the warm-up)\n"
            "  -x WARMUP  untimed iterations per size (default 10)\n"
            "  -d DTYPE   int8 uint8 int32 int64 fp16 bf16 fp32 fp64 (default fp32)\n"
            "  -o OP      sum prod min max avg band bor bxor (default sum)\n"
            "  -a ALGO    algorithm override, oneCCL syntax: \"ring\" or \"tree:0-16384;ring:16385-max\"\n"
            "  -c         check every result bit for bit (avg: within 1 ulp) and exit 1 on the\n"
            "             first wrong element\n"
            "Launch with mpirun.mpich, mpirun.openmpi, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT.\n",
            TIME_BUDGET_S);
}

static void die_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "tutti-bench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "; see tutti-bench -h\n");
    exit(2);
}

/* fail reports a tutti error with the library's own explanation and exits; peers then see this
 * rank gone and fail too (tutti's waits have deadlines), so nothing hangs. */
static void fail(tutti_comm_t *comm, tutti_status_t st, const char *what)
{
    const char *text = comm ? tutti_comm_last_error(comm) : "";
    if (text == NULL || *text == '\0')
        text = tutti_last_error();
    fprintf(stderr, "tutti-bench: rank %d: %s failed: %s%s%s\n", g_rank, what, tutti_strerror(st),
            *text ? ": " : "", text);
    exit(1);
}

#define CHECK(comm, call, what)                                                                \
    do {                                                                                       \
        tutti_status_t st_ = (call);                                                           \
        if (st_ != TUTTI_OK)                                                                   \
            fail((comm), st_, (what));                                                         \
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
    *o = (opts_t){.coll = TUTTI_COLL_COUNT, .min_bytes = 8, .max_bytes = 4u << 20, .factor = 2,
                  .iters = 100, .warmup = 10, .dtype = TUTTI_FLOAT32, .op = TUTTI_SUM};
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
            for (d = 0; d < TUTTI_DTYPE_COUNT; d++)
                if (strcasecmp(optarg, tutti_dtype_name((tutti_dtype_t)d)) == 0)
                    break;
            if (d == TUTTI_DTYPE_COUNT)
                die_usage("-d \"%s\": unknown dtype", optarg);
            o->dtype = (tutti_dtype_t)d;
            break;
        }
        case 'o': {
            int p;
            for (p = 0; p < TUTTI_OP_COUNT; p++)
                if (strcasecmp(optarg, tutti_op_name((tutti_op_t)p)) == 0)
                    break;
            if (p == TUTTI_OP_COUNT)
                die_usage("-o \"%s\": unknown op", optarg);
            o->op = (tutti_op_t)p;
            break;
        }
        case 'a': o->algo = optarg; break;
        case 'c': o->check = true; break;
        case 'h': usage(stdout); exit(0);
        default: fprintf(stderr, "tutti-bench: see tutti-bench -h\n"); exit(2);
        }
    }
    if (optind != argc - 1)
        die_usage("%s", optind >= argc ? "name one collective" : "name exactly one collective");
    for (int k = 0; k < TUTTI_COLL_COUNT; k++)
        if (strcmp(argv[optind], coll_names[k]) == 0)
            o->coll = (tutti_coll_t)k;
    if (o->coll == TUTTI_COLL_COUNT)
        die_usage("unknown collective \"%s\"", argv[optind]);
    if (o->min_bytes > o->max_bytes)
        die_usage("%s", "-b must not exceed -e");
}

/* ---- element access: small integers are exact in every dtype, which makes -c bit-exact --- */

static bool is_float(tutti_dtype_t dt)
{
    return dt == TUTTI_FLOAT16 || dt == TUTTI_BFLOAT16 || dt == TUTTI_FLOAT32 ||
           dt == TUTTI_FLOAT64;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; inputs here are never NaN */
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* f32_to_f16 handles what the bench stores: zero and normal halves (|x| in [2^-14, 65504]),
 * rounded to nearest even. */
static uint16_t f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a < 0x38800000u)
        return sign;
    uint32_t r = a - 0x38000000u; /* rebias exponent 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

static float f16_to_f32(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    int m = h & 0x3ff;
    float v;
    if (e == 0)
        v = ldexpf((float)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000u) ? -v : v;
}

/* put stores value v (an integer, or for avg a quotient) as element i of buf. Integer types
 * keep the low bits, which is the wrap-around that tutti's integer SUM and PROD promise. */
static void put(void *buf, size_t i, tutti_dtype_t dt, int64_t iv, double fv)
{
    switch (dt) {
    case TUTTI_INT8: ((int8_t *)buf)[i] = (int8_t)(uint8_t)(uint64_t)iv; break;
    case TUTTI_UINT8: ((uint8_t *)buf)[i] = (uint8_t)(uint64_t)iv; break;
    case TUTTI_INT32: ((int32_t *)buf)[i] = (int32_t)(uint32_t)(uint64_t)iv; break;
    case TUTTI_INT64: ((int64_t *)buf)[i] = iv; break;
    case TUTTI_FLOAT16: ((uint16_t *)buf)[i] = f32_to_f16((float)fv); break;
    case TUTTI_BFLOAT16: ((uint16_t *)buf)[i] = f32_to_bf16((float)fv); break;
    case TUTTI_FLOAT32: ((float *)buf)[i] = (float)fv; break;
    case TUTTI_FLOAT64: ((double *)buf)[i] = fv; break;
    default: break;
    }
}

static double get(const void *buf, size_t i, tutti_dtype_t dt)
{
    switch (dt) {
    case TUTTI_INT8: return ((const int8_t *)buf)[i];
    case TUTTI_UINT8: return ((const uint8_t *)buf)[i];
    case TUTTI_INT32: return ((const int32_t *)buf)[i];
    case TUTTI_INT64: return (double)((const int64_t *)buf)[i];
    case TUTTI_FLOAT16: return f16_to_f32(((const uint16_t *)buf)[i]);
    case TUTTI_BFLOAT16: return bf16_to_f32(((const uint16_t *)buf)[i]);
    case TUTTI_FLOAT32: return ((const float *)buf)[i];
    case TUTTI_FLOAT64: return ((const double *)buf)[i];
    default: return 0.0;
    }
}

/* Largest magnitude up to which every integer is exact in dt and no integer type wraps: a sum
 * of n inputs stays within it, whatever the order in which an algorithm adds them. */
static int64_t exact_limit(tutti_dtype_t dt)
{
    switch (dt) {
    case TUTTI_INT8: return 127;
    case TUTTI_UINT8: return 255;
    case TUTTI_INT32: return INT64_C(1) << 24;
    case TUTTI_INT64: return INT64_C(1) << 40;
    case TUTTI_FLOAT16: return 2048;
    case TUTTI_BFLOAT16: return 256;
    case TUTTI_FLOAT32: return INT64_C(1) << 24;
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

/* gen is rank r's input at element index i of its send buffer. The values keep every partial
 * result of the op exact (sums bounded by exact_limit, products of +-1 and one 2, avg inputs
 * whose sum is a multiple of n), so any correct algorithm gives the same bits. */
static int64_t gen(const bench_t *b, int r, size_t i)
{
    tutti_dtype_t dt = b->o.dtype;
    int n = b->size;
    bool unsig = dt == TUTTI_UINT8;
    uint64_t x = mix(((uint64_t)i << 16) ^ (uint64_t)r);
    int64_t lim = exact_limit(dt);
    int64_t h;
    switch (b->o.op) {
    case TUTTI_BAND: case TUTTI_BOR: case TUTTI_BXOR:
        return (int64_t)x;
    case TUTTI_PROD: {
        int64_t mag = (size_t)r == i % (size_t)n ? 2 : 1;
        if (unsig)
            return mag + (int64_t)(x & 1) * 2; /* 1..4; uint8 products wrap, still exact */
        return (x & 1) ? -mag : mag;
    }
    case TUTTI_AVG: {
        /* every rank adds base, rank 0 adds n*k too: the sum n*(base+k) divides exactly */
        h = lim / (2 * (int64_t)n);
        if (h < 1)
            h = 1;
        uint64_t y = mix(i ^ 0x5bd1e995ull);
        int64_t base = (int64_t)(y % (uint64_t)(2 * h + 1)) - h;
        int64_t k = (int64_t)((y >> 32) % (uint64_t)(2 * h + 1)) - h;
        return base + (r == 0 ? (int64_t)n * k : 0);
    }
    case TUTTI_MIN: case TUTTI_MAX:
        h = lim < 1000 ? lim : 1000;
        break;
    default: /* SUM */
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

/* expected_at stores op over ranks of gen(r, i) as element j of dst. */
static void expected_at(const bench_t *b, void *dst, size_t j, size_t i)
{
    tutti_op_t op = b->o.op;
    int n = b->size;
    int64_t v0 = gen(b, 0, i);
    uint64_t acc = (uint64_t)v0; /* integers: two's complement wrap, as tutti's */
    double facc = (double)v0;
    for (int r = 1; r < n; r++) {
        int64_t v = gen(b, r, i);
        switch (op) {
        case TUTTI_SUM: case TUTTI_AVG: acc += (uint64_t)v; facc += (double)v; break;
        case TUTTI_PROD: acc *= (uint64_t)v; facc *= (double)v; break;
        case TUTTI_MIN: if (v < (int64_t)acc) acc = (uint64_t)v; if ((double)v < facc) facc = (double)v; break;
        case TUTTI_MAX: if (v > (int64_t)acc) acc = (uint64_t)v; if ((double)v > facc) facc = (double)v; break;
        case TUTTI_BAND: acc &= (uint64_t)v; break;
        case TUTTI_BOR: acc |= (uint64_t)v; break;
        case TUTTI_BXOR: acc ^= (uint64_t)v; break;
        default: break;
        }
    }
    if (op == TUTTI_AVG)
        facc /= n;
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
        fprintf(stderr, "tutti-bench: rank %d: cannot allocate %zu bytes; lower -e\n", g_rank, sz);
        exit(1);
    }
    memset(p, 0, sz); /* touch every page before anything is timed */
    return p;
}

/* Element counts of one call at per-rank size count: what each rank sends and receives. */
static void counts(const bench_t *b, size_t count, size_t *nsend, size_t *nrecv)
{
    size_t n = (size_t)b->size;
    switch (b->o.coll) {
    case TUTTI_COLL_ALLGATHER: *nsend = count; *nrecv = n * count; break;
    case TUTTI_COLL_ALLTOALL: *nsend = n * count; *nrecv = n * count; break;
    case TUTTI_COLL_REDUCE_SCATTER: *nsend = n * count; *nrecv = count; break;
    case TUTTI_COLL_BCAST: *nsend = count; *nrecv = 0; break;
    case TUTTI_COLL_BARRIER: *nsend = 0; *nrecv = 0; break;
    default: *nsend = count; *nrecv = count; break;
    }
}

/* fill writes this rank's inputs for per-rank count and, with -c, the expected result. */
static void fill(bench_t *b, size_t count)
{
    size_t nsend, nrecv;
    counts(b, count, &nsend, &nrecv);
    tutti_dtype_t dt = b->o.dtype;
    bool bcast = b->o.coll == TUTTI_COLL_BCAST;
    for (size_t i = 0; i < nsend; i++) {
        int64_t v = gen(b, bcast ? 0 : b->rank, i);
        put(b->sendbuf, i, dt, v, (double)v);
    }
    if (!b->o.check)
        return;
    memcpy(b->sendcopy, b->sendbuf, nsend * b->esize);
    size_t n = (size_t)b->size, r = (size_t)b->rank;
    switch (b->o.coll) {
    case TUTTI_COLL_ALLREDUCE: case TUTTI_COLL_REDUCE:
        for (size_t i = 0; i < count; i++)
            expected_at(b, b->expect, i, i);
        break;
    case TUTTI_COLL_REDUCE_SCATTER:
        for (size_t i = 0; i < count; i++)
            expected_at(b, b->expect, i, r * count + i);
        break;
    case TUTTI_COLL_ALLGATHER:
        for (size_t s = 0; s < n; s++)
            for (size_t i = 0; i < count; i++) {
                int64_t v = gen(b, (int)s, i);
                put(b->expect, s * count + i, dt, v, (double)v);
            }
        break;
    case TUTTI_COLL_ALLTOALL:
        for (size_t s = 0; s < n; s++)
            for (size_t i = 0; i < count; i++) {
                int64_t v = gen(b, (int)s, r * count + i);
                put(b->expect, s * count + i, dt, v, (double)v);
            }
        break;
    case TUTTI_COLL_BCAST: memcpy(b->expect, b->sendbuf, count * b->esize); break;
    default: break;
    }
}

/* ---- one call and its check -------------------------------------------------------------- */

static void run_once(bench_t *b, size_t count)
{
    tutti_comm_t *c = b->comm;
    tutti_dtype_t dt = b->o.dtype;
    switch (b->o.coll) {
    case TUTTI_COLL_ALLREDUCE:
        CHECK(c, tutti_allreduce(b->sendbuf, b->recvbuf, count, dt, b->o.op, c, NULL), "tutti_allreduce");
        break;
    case TUTTI_COLL_ALLGATHER:
        CHECK(c, tutti_allgather(b->sendbuf, b->recvbuf, count, dt, c, NULL), "tutti_allgather");
        break;
    case TUTTI_COLL_ALLTOALL:
        CHECK(c, tutti_alltoall(b->sendbuf, b->recvbuf, count, dt, c, NULL), "tutti_alltoall");
        break;
    case TUTTI_COLL_REDUCE_SCATTER:
        CHECK(c, tutti_reduce_scatter(b->sendbuf, b->recvbuf, count, dt, b->o.op, c, NULL),
              "tutti_reduce_scatter");
        break;
    case TUTTI_COLL_BCAST:
        CHECK(c, tutti_broadcast(b->sendbuf, count, dt, 0, c, NULL), "tutti_broadcast");
        break;
    case TUTTI_COLL_REDUCE:
        CHECK(c, tutti_reduce(b->sendbuf, b->recvbuf, count, dt, b->o.op, 0, c, NULL), "tutti_reduce");
        break;
    default: CHECK(c, tutti_barrier(c, NULL), "tutti_barrier"); break;
    }
}

/* poison fills what a call must overwrite with a pattern no correct result equals everywhere,
 * so that a call which leaves the output alone fails the check. */
static void poison(bench_t *b, size_t count)
{
    size_t nsend, nrecv;
    counts(b, count, &nsend, &nrecv);
    if (b->o.coll == TUTTI_COLL_BCAST) {
        if (b->rank != 0)
            memset(b->sendbuf, 0xa5, count * b->esize);
    } else if (b->o.coll != TUTTI_COLL_REDUCE || b->rank == 0) {
        memset(b->recvbuf, 0xa5, nrecv * b->esize);
    }
}

typedef struct mismatch {
    bool found;
    long iter;
    const char *buf; /* "result" or "input" */
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

/* compare records the first element where got differs from want (bitwise; avg within 1 ulp of
 * the dtype, since a kernel may multiply by 1/n instead of dividing). */
static void compare(const bench_t *b, const void *got, const void *want, size_t nelem,
                    bool tolerant, long iter, const char *what, mismatch_t *mm)
{
    if (mm->found || nelem == 0 || memcmp(got, want, nelem * b->esize) == 0)
        return;
    tutti_dtype_t dt = b->o.dtype;
    double eps = dt == TUTTI_BFLOAT16 ? 0x1p-8 : dt == TUTTI_FLOAT16 ? 0x1p-11
               : dt == TUTTI_FLOAT32 ? 0x1p-24 : 0x1p-53;
    for (size_t i = 0; i < nelem; i++) {
        if (bits(got, i, b->esize) == bits(want, i, b->esize))
            continue;
        double g = get(got, i, dt), w = get(want, i, dt);
        if (tolerant && fabs(g - w) <= 2 * eps * fabs(w))
            continue;
        *mm = (mismatch_t){true, iter, what, i, g, w, bits(got, i, b->esize), bits(want, i, b->esize)};
        return;
    }
}

static void check_result(bench_t *b, size_t count, long iter, mismatch_t *mm)
{
    size_t nsend, nrecv;
    counts(b, count, &nsend, &nrecv);
    bool tol = b->o.op == TUTTI_AVG && is_float(b->o.dtype);
    switch (b->o.coll) {
    case TUTTI_COLL_BARRIER: return;
    case TUTTI_COLL_BCAST: compare(b, b->sendbuf, b->expect, count, false, iter, "buffer", mm); return;
    case TUTTI_COLL_REDUCE:
        if (b->rank != 0)
            break;
        /* fallthrough */
    default: compare(b, b->recvbuf, b->expect, nrecv, tol, iter, "result", mm); break;
    }
    compare(b, b->sendbuf, b->sendcopy, nsend, false, iter, "input (sendbuf changed)", mm);
}

/* ---- statistics -------------------------------------------------------------------------- */

static double reduce_f64(bench_t *b, double v, tutti_op_t op)
{
    double out = 0.0;
    CHECK(b->comm, tutti_allreduce(&v, &out, 1, TUTTI_FLOAT64, op, b->comm, NULL),
          "tutti_allreduce of the timings");
    return out;
}

/* busbw_factor: nccl-tests' bus-bandwidth factors, so rows compare with theirs. */
static double busbw_factor(tutti_coll_t coll, int n)
{
    switch (coll) {
    case TUTTI_COLL_ALLREDUCE: return 2.0 * (n - 1) / n;
    case TUTTI_COLL_ALLGATHER: case TUTTI_COLL_REDUCE_SCATTER: case TUTTI_COLL_ALLTOALL:
        return (double)(n - 1) / n;
    case TUTTI_COLL_BCAST: case TUTTI_COLL_REDUCE: return 1.0;
    default: return 0.0;
    }
}

/* algbw_bytes: the bytes algbw divides by time, nccl-tests' "size": the whole buffer each rank
 * ends up with (allgather), starts with (reduce_scatter) or exchanges (alltoall). */
static double algbw_bytes(const bench_t *b, size_t bytes)
{
    switch (b->o.coll) {
    case TUTTI_COLL_ALLGATHER: case TUTTI_COLL_REDUCE_SCATTER: case TUTTI_COLL_ALLTOALL:
        return (double)bytes * b->size;
    default: return (double)bytes;
    }
}

static const char *size_convention(tutti_coll_t coll)
{
    switch (coll) {
    case TUTTI_COLL_ALLGATHER:
        return "size = bytes each rank sends (receives n*size); algbw = n*size/time";
    case TUTTI_COLL_REDUCE_SCATTER:
        return "size = bytes each rank receives (sends n*size); algbw = n*size/time";
    case TUTTI_COLL_ALLTOALL:
        return "size = bytes each rank sends to each peer (n*size in all); algbw = n*size/time";
    case TUTTI_COLL_BARRIER: return "size = 0 (no data); algbw = 0";
    default: return "size = bytes of each rank's buffer; algbw = size/time";
    }
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
    printf("# tutti %s  tutti-bench %s  dtype %s  op %s  ranks %d  nodes %d  transport %s  "
           "algorithm %s\n",
           tutti_version(), coll_names[b->o.coll], tutti_dtype_name(b->o.dtype),
           tutti_op_name(b->o.op), b->size, tutti_comm_node_count(b->comm),
           *transports ? transports : "none", b->o.algo ? b->o.algo : "auto");
    printf("# %s; busbw = algbw * %s (nccl-tests)\n", size_convention(b->o.coll),
           b->o.coll == TUTTI_COLL_ALLREDUCE                                   ? "2(n-1)/n"
           : b->o.coll == TUTTI_COLL_BCAST || b->o.coll == TUTTI_COLL_REDUCE   ? "1"
           : b->o.coll == TUTTI_COLL_BARRIER                                   ? "0"
                                                                               : "(n-1)/n");
    printf("# us per call: each rank's mean over iters, then avg/min/max over ranks; GBps = 1e9 "
           "bytes/s%s\n",
           b->o.check ? "; -c: every result checked" : "");
    printf("%12s %12s %12s %12s %8s %12s %12s\n", "size", "avg_us", "min_us", "max_us", "iters",
           "algbw_GBps", "busbw_GBps");
    fflush(stdout);
}

/* bench_size times one size and prints its row; returns false if -c found a wrong element. */
static bool bench_size(bench_t *b, size_t count)
{
    size_t bytes = count * b->esize;
    fill(b, count);
    if (b->o.check)
        poison(b, count);
    CHECK(b->comm, tutti_barrier(b->comm, NULL), "tutti_barrier before warm-up");

    double t0 = now_s();
    for (long i = 0; i < b->o.warmup; i++)
        run_once(b, count);
    double warm = b->o.warmup > 0 ? (now_s() - t0) / (double)b->o.warmup : 0.0;

    /* Every rank must run the same number of iterations: agree on the slowest warm-up. */
    long iters = b->o.iters;
    if (b->o.warmup > 0) {
        double slowest = reduce_f64(b, warm, TUTTI_MAX);
        if (slowest * (double)iters > TIME_BUDGET_S) {
            iters = (long)(TIME_BUDGET_S / slowest);
            if (iters < 1)
                iters = 1;
        }
    }

    mismatch_t mm = {0};
    double total = 0.0;
    CHECK(b->comm, tutti_barrier(b->comm, NULL), "tutti_barrier before timing");
    if (!b->o.check) {
        t0 = now_s();
        for (long i = 0; i < iters; i++)
            run_once(b, count);
        total = now_s() - t0;
    } else {
        if (b->o.warmup > 0)
            check_result(b, count, -1, &mm); /* the warm-up's last result */
        for (long i = 0; i < iters; i++) {
            poison(b, count);
            t0 = now_s();
            run_once(b, count);
            total += now_s() - t0;
            check_result(b, count, i, &mm);
        }
    }
    double per = total / (double)iters;
    double avg = reduce_f64(b, per, TUTTI_SUM) / b->size;
    double mn = reduce_f64(b, per, TUTTI_MIN);
    double mx = reduce_f64(b, per, TUTTI_MAX);

    bool ok = true;
    if (b->o.check) {
        if (mm.found) {
            char when[48];
            if (mm.iter < 0)
                snprintf(when, sizeof when, "after the warm-up");
            else
                snprintf(when, sizeof when, "timed iteration %ld", mm.iter);
            fprintf(stderr,
                    "tutti-bench: rank %d: %s %s %s of %zu bytes, %s: %s element %zu is %.17g "
                    "(bits 0x%0*" PRIx64 "), expected %.17g (bits 0x%0*" PRIx64 ")\n",
                    b->rank, coll_names[b->o.coll], tutti_dtype_name(b->o.dtype),
                    tutti_op_name(b->o.op), bytes, when, mm.buf, mm.index, mm.got,
                    (int)(2 * b->esize), mm.got_bits, mm.want, (int)(2 * b->esize), mm.want_bits);
        }
        ok = reduce_f64(b, mm.found ? 1.0 : 0.0, TUTTI_MAX) == 0.0;
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
    b.esize = tutti_dtype_size(b.o.dtype);

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
    counts(&b, max_count, &nsend, &nrecv);
    b.send_cap = nsend * b.esize;
    b.recv_cap = nrecv * b.esize;
    b.sendbuf = alloc(b.send_cap);
    b.recvbuf = alloc(b.recv_cap);
    if (b.o.check) {
        b.expect = alloc(b.o.coll == TUTTI_COLL_BCAST ? b.send_cap : b.recv_cap);
        b.sendcopy = alloc(b.send_cap);
    }

    if (b.rank == 0)
        print_header(&b);

    bool ok = true;
    if (b.o.coll == TUTTI_COLL_BARRIER) {
        ok = bench_size(&b, 0);
    } else {
        size_t last = 0;
        for (size_t bytes = b.o.min_bytes; bytes <= b.o.max_bytes;) {
            size_t count = bytes / b.esize;
            if (count > 0 && count != last) { /* sizes below or between elements round down */
                ok = bench_size(&b, count); /* every rank agrees on ok: stop together */
                if (!ok)
                    break;
            }
            last = count;
            if (bytes > b.o.max_bytes / b.o.factor)
                break;
            bytes = bytes ? bytes * b.o.factor : 1;
        }
    }

    CHECK(b.comm, tutti_comm_destroy(b.comm), "tutti_comm_destroy");
    free(b.sendbuf);
    free(b.recvbuf);
    free(b.expect);
    free(b.sendcopy);
    if (!ok) {
        if (b.rank == 0)
            fprintf(stderr, "tutti-bench: -c found wrong results (see the messages above)\n");
        return 1;
    }
    return 0;
}
