/* bench_common.h: what tutti-bench.c, mpi-bench.c and ccl-bench.cpp share (flags, sizes, 16-bit
 * floats, the -c value patterns, bandwidth conventions, header and row printing), over plain ints in
 * tutti's enum order so that neither tutti's, MPI's nor oneCCL's types appear here; the includer
 * defines BENCH_PROG and bench_abort. It compiles as C11 and as C++17 (g++). */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

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

#include "../src/common/parse_size.h" /* the library's own parser of "64K", "16M" */

#ifndef BENCH_PROG
#error "define BENCH_PROG (the program's name for messages) before including bench_common.h"
#endif

/* Without -i, each size runs at most this long (measured on the warm-up), so large sizes get
 * fewer iterations instead of making the whole run take minutes; an explicit -i is run in full
 * (the header says which applies). */
#define TIME_BUDGET_S 1.0
#define ALIGN 64

/* Collectives, dtypes and ops in the order (and spelling) of tutti.h's enums, so that the flags
 * mean the same in both benches; tutti-bench.c checks the order at compile time. */
enum { C_ALLREDUCE, C_ALLGATHER, C_ALLTOALL, C_REDUCE_SCATTER, C_BCAST, C_REDUCE, C_BARRIER, C_COUNT };
static const char *const coll_names[C_COUNT] = {
    "allreduce", "allgather", "alltoall", "reduce_scatter", "bcast", "reduce", "barrier",
};
enum { D_INT8, D_UINT8, D_INT32, D_INT64, D_FP16, D_BF16, D_FP32, D_FP64, D_COUNT };
static const char *const dtype_names[D_COUNT] = {
    "int8", "uint8", "int32", "int64", "fp16", "bf16", "fp32", "fp64",
};
enum { O_SUM, O_PROD, O_MIN, O_MAX, O_AVG, O_BAND, O_BOR, O_BXOR, O_COUNT };
static const char *const op_names[O_COUNT] = {
    "sum", "prod", "min", "max", "avg", "band", "bor", "bxor",
};

typedef struct opts {
    int coll, dtype, op; /* C_*, D_*, O_* */
    size_t min_bytes, max_bytes;
    unsigned long factor;
    long iters, warmup;
    bool iters_given; /* -i was given: run exactly that many, whatever the time budget */
    const char *algo; /* -a; NULL: auto */
    bool check;
} opts_t;

static int g_rank = -1;

/* bench_abort ends the run after a message: each bench defines it (exit, or abort the MPI job). */
static void bench_abort(void);

static void die_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, BENCH_PROG ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "; see " BENCH_PROG " -h\n");
    exit(2);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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

static int lookup(const char *s, const char *const *names, int count)
{
    int k;
    for (k = 0; k < count; k++)
        if (strcasecmp(s, names[k]) == 0)
            break;
    return k;
}

/* parse_args reads the flags both benches take; a_refusal, if not NULL, is the die_usage format
 * that rejects -a (a bench whose library picks its own algorithms). */
static void parse_args(int argc, char **argv, opts_t *o, void (*usage)(FILE *), const char *a_refusal)
{
    /* designators in declaration order: ccl-bench.cpp includes this file as C++ */
    *o = (opts_t){.coll = C_COUNT, .dtype = D_FP32, .op = O_SUM, .min_bytes = 8,
                  .max_bytes = 4u << 20, .factor = 2, .iters = 100, .warmup = 10};
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0) { /* what users type first */
            usage(stdout);
            exit(0);
        }
    int c;
    while ((c = getopt(argc, argv, "b:e:f:i:x:d:o:a:ch")) != -1) {
        switch (c) {
        case 'b':
            if (!tutti__parse_size(optarg, &o->min_bytes))
                die_usage("-b \"%s\" is not a size like 8, 64K, 4M", optarg);
            break;
        case 'e':
            if (!tutti__parse_size(optarg, &o->max_bytes))
                die_usage("-e \"%s\" is not a size like 8, 64K, 4M", optarg);
            break;
        case 'f': o->factor = (unsigned long)parse_long(optarg, 2, "-f \"%s\": need an integer >= 2"); break;
        case 'i':
            o->iters = parse_long(optarg, 1, "-i \"%s\": need an integer >= 1");
            o->iters_given = true;
            break;
        case 'x': o->warmup = parse_long(optarg, 0, "-x \"%s\": need an integer >= 0"); break;
        case 'd':
            o->dtype = lookup(optarg, dtype_names, D_COUNT);
            if (o->dtype == D_COUNT)
                die_usage("-d \"%s\": unknown dtype", optarg);
            break;
        case 'o':
            o->op = lookup(optarg, op_names, O_COUNT);
            if (o->op == O_COUNT)
                die_usage("-o \"%s\": unknown op", optarg);
            break;
        case 'a':
            if (a_refusal != NULL)
                die_usage(a_refusal, optarg);
            o->algo = optarg;
            break;
        case 'c': o->check = true; break;
        case 'h': usage(stdout); exit(0);
        default: fprintf(stderr, BENCH_PROG ": see " BENCH_PROG " -h\n"); exit(2);
        }
    }
    if (optind != argc - 1)
        die_usage("%s", optind >= argc ? "name one collective" : "name exactly one collective");
    for (int k = 0; k < C_COUNT; k++)
        if (strcmp(argv[optind], coll_names[k]) == 0)
            o->coll = k;
    if (o->coll == C_COUNT)
        die_usage("unknown collective \"%s\"", argv[optind]);
    if (o->min_bytes > o->max_bytes)
        die_usage("%s", "-b must not exceed -e");
}

/* ---- element access: small integers are exact in every dtype, which makes -c bit-exact --- */

static bool is_float(int dt)
{
    return dt == D_FP16 || dt == D_BF16 || dt == D_FP32 || dt == D_FP64;
}

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

/* put stores value v (an integer, or for avg a quotient) as element i of buf. Integer types
 * keep the low bits, which is the wrap-around that integer SUM and PROD promise. */
static void put(void *buf, size_t i, int dt, int64_t iv, double fv)
{
    switch (dt) {
    case D_INT8: ((int8_t *)buf)[i] = (int8_t)(uint8_t)(uint64_t)iv; break;
    case D_UINT8: ((uint8_t *)buf)[i] = (uint8_t)(uint64_t)iv; break;
    case D_INT32: ((int32_t *)buf)[i] = (int32_t)(uint32_t)(uint64_t)iv; break;
    case D_INT64: ((int64_t *)buf)[i] = iv; break;
    case D_FP16: ((uint16_t *)buf)[i] = f32_to_f16((float)fv); break;
    case D_BF16: ((uint16_t *)buf)[i] = f32_to_bf16((float)fv); break;
    case D_FP32: ((float *)buf)[i] = (float)fv; break;
    case D_FP64: ((double *)buf)[i] = fv; break;
    default: break;
    }
}

static double get(const void *buf, size_t i, int dt)
{
    switch (dt) {
    case D_INT8: return ((const int8_t *)buf)[i];
    case D_UINT8: return ((const uint8_t *)buf)[i];
    case D_INT32: return ((const int32_t *)buf)[i];
    case D_INT64: return (double)((const int64_t *)buf)[i];
    case D_FP16: return f16_to_f32(((const uint16_t *)buf)[i]);
    case D_BF16: return bf16_to_f32(((const uint16_t *)buf)[i]);
    case D_FP32: return ((const float *)buf)[i];
    case D_FP64: return ((const double *)buf)[i];
    default: return 0.0;
    }
}

/* Largest magnitude up to which every integer is exact in dt and no integer type wraps: a sum
 * of n inputs stays within it, whatever the order in which an algorithm adds them. */
static int64_t exact_limit(int dt)
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

/* gen is rank r of n's input at element index i of its send buffer. The values keep every
 * partial result of the op exact (sums bounded by exact_limit, products of +-1 and one 2, avg
 * inputs whose sum is a multiple of n), so any correct algorithm gives the same bits. */
static int64_t gen(const opts_t *o, int n, int r, size_t i)
{
    int dt = o->dtype;
    bool unsig = dt == D_UINT8;
    uint64_t x = mix(((uint64_t)i << 16) ^ (uint64_t)r);
    int64_t lim = exact_limit(dt);
    int64_t h;
    switch (o->op) {
    case O_BAND: case O_BOR: case O_BXOR:
        return (int64_t)x;
    case O_PROD: {
        int64_t mag = (size_t)r == i % (size_t)n ? 2 : 1;
        if (unsig)
            return mag + (int64_t)(x & 1) * 2; /* 1..4; uint8 products wrap, still exact */
        return (x & 1) ? -mag : mag;
    }
    case O_AVG: {
        /* every rank adds base, rank 0 adds n*k too: the sum n*(base+k) divides exactly */
        h = lim / (2 * (int64_t)n);
        if (h < 1)
            h = 1;
        uint64_t y = mix(i ^ 0x5bd1e995ull);
        int64_t base = (int64_t)(y % (uint64_t)(2 * h + 1)) - h;
        int64_t k = (int64_t)((y >> 32) % (uint64_t)(2 * h + 1)) - h;
        return base + (r == 0 ? (int64_t)n * k : 0);
    }
    case O_MIN: case O_MAX:
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

/* expected_at stores op over n ranks of gen(r, i) as element j of dst. */
static void expected_at(const opts_t *o, int n, void *dst, size_t j, size_t i)
{
    int op = o->op;
    int64_t v0 = gen(o, n, 0, i);
    uint64_t acc = (uint64_t)v0; /* integers: two's complement wrap */
    double facc = (double)v0;
    for (int r = 1; r < n; r++) {
        int64_t v = gen(o, n, r, i);
        switch (op) {
        case O_SUM: case O_AVG: acc += (uint64_t)v; facc += (double)v; break;
        case O_PROD: acc *= (uint64_t)v; facc *= (double)v; break;
        case O_MIN: if (v < (int64_t)acc) acc = (uint64_t)v; if ((double)v < facc) facc = (double)v; break;
        case O_MAX: if (v > (int64_t)acc) acc = (uint64_t)v; if ((double)v > facc) facc = (double)v; break;
        case O_BAND: acc &= (uint64_t)v; break;
        case O_BOR: acc |= (uint64_t)v; break;
        case O_BXOR: acc ^= (uint64_t)v; break;
        default: break;
        }
    }
    if (op == O_AVG)
        facc /= n;
    put(dst, j, o->dtype, (int64_t)acc, facc);
}

/* ---- buffers ------------------------------------------------------------------------------ */

static void *alloc(size_t bytes)
{
    /* Rounded up to ALIGN; a size within ALIGN of SIZE_MAX would wrap to a tiny buffer. */
    size_t sz = bytes > SIZE_MAX - ALIGN ? 0 : (bytes + ALIGN - 1) / ALIGN * ALIGN;
    if (sz == 0 && bytes > 0) {
        fprintf(stderr, BENCH_PROG ": rank %d: cannot allocate %zu bytes; lower -e\n", g_rank,
                bytes);
        bench_abort();
    }
    if (sz == 0)
        sz = ALIGN;
    void *p = aligned_alloc(ALIGN, sz);
    if (p == NULL) {
        fprintf(stderr, BENCH_PROG ": rank %d: cannot allocate %zu bytes; lower -e\n", g_rank, sz);
        bench_abort();
    }
    memset(p, 0, sz); /* touch every page before anything is timed */
    return p;
}

/* Element counts of one call at per-rank size count on n ranks: what each rank sends and
 * receives. */
static void counts(int coll, int n_ranks, size_t count, size_t *nsend, size_t *nrecv)
{
    size_t n = (size_t)n_ranks;
    switch (coll) {
    case C_ALLGATHER: *nsend = count; *nrecv = n * count; break;
    case C_ALLTOALL: *nsend = n * count; *nrecv = n * count; break;
    case C_REDUCE_SCATTER: *nsend = n * count; *nrecv = count; break;
    case C_BCAST: *nsend = count; *nrecv = 0; break;
    case C_BARRIER: *nsend = 0; *nrecv = 0; break;
    default: *nsend = count; *nrecv = count; break;
    }
}

/* The buffers of one bench, sized for the largest message; sendbuf doubles as bcast's buffer. */
typedef struct bufs {
    void *sendbuf, *recvbuf;
    void *expect;   /* -c: the correct result (recv layout; bcast: buffer layout) */
    void *sendcopy; /* -c: pristine input, to check that the collective left it alone */
} bufs_t;

/* fill writes rank's inputs for per-rank count and, with -c, the expected result. */
static void fill(const opts_t *o, int n_ranks, int rank, size_t esize, bufs_t *bf, size_t count)
{
    size_t nsend, nrecv;
    counts(o->coll, n_ranks, count, &nsend, &nrecv);
    int dt = o->dtype;
    bool bcast = o->coll == C_BCAST;
    for (size_t i = 0; i < nsend; i++) {
        int64_t v = gen(o, n_ranks, bcast ? 0 : rank, i);
        put(bf->sendbuf, i, dt, v, (double)v);
    }
    if (!o->check)
        return;
    memcpy(bf->sendcopy, bf->sendbuf, nsend * esize);
    size_t n = (size_t)n_ranks, r = (size_t)rank;
    switch (o->coll) {
    case C_ALLREDUCE: case C_REDUCE:
        for (size_t i = 0; i < count; i++)
            expected_at(o, n_ranks, bf->expect, i, i);
        break;
    case C_REDUCE_SCATTER:
        for (size_t i = 0; i < count; i++)
            expected_at(o, n_ranks, bf->expect, i, r * count + i);
        break;
    case C_ALLGATHER:
        for (size_t s = 0; s < n; s++)
            for (size_t i = 0; i < count; i++) {
                int64_t v = gen(o, n_ranks, (int)s, i);
                put(bf->expect, s * count + i, dt, v, (double)v);
            }
        break;
    case C_ALLTOALL:
        for (size_t s = 0; s < n; s++)
            for (size_t i = 0; i < count; i++) {
                int64_t v = gen(o, n_ranks, (int)s, r * count + i);
                put(bf->expect, s * count + i, dt, v, (double)v);
            }
        break;
    case C_BCAST: memcpy(bf->expect, bf->sendbuf, count * esize); break;
    default: break;
    }
}

/* poison fills what a call must overwrite with a pattern no correct result equals everywhere,
 * so that a call which leaves the output alone fails the check. */
static void poison(int coll, int n_ranks, int rank, size_t esize, bufs_t *bf, size_t count)
{
    size_t nsend, nrecv;
    counts(coll, n_ranks, count, &nsend, &nrecv);
    if (coll == C_BCAST) {
        if (rank != 0)
            memset(bf->sendbuf, 0xa5, count * esize);
    } else if (coll != C_REDUCE || rank == 0) {
        memset(bf->recvbuf, 0xa5, nrecv * esize);
    }
}

/* ---- the check ---------------------------------------------------------------------------- */

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

/* compare records the first element where got differs from want (bitwise; tolerant: within 1 ulp
 * of the dtype, since an avg kernel may multiply by 1/n instead of dividing). */
static void compare(int dt, size_t esize, const void *got, const void *want, size_t nelem,
                    bool tolerant, long iter, const char *what, mismatch_t *mm)
{
    if (mm->found || nelem == 0 || memcmp(got, want, nelem * esize) == 0)
        return;
    double eps = dt == D_BF16 ? 0x1p-8 : dt == D_FP16 ? 0x1p-11 : dt == D_FP32 ? 0x1p-24 : 0x1p-53;
    for (size_t i = 0; i < nelem; i++) {
        if (bits(got, i, esize) == bits(want, i, esize))
            continue;
        double g = get(got, i, dt), w = get(want, i, dt);
        if (tolerant && fabs(g - w) <= 2 * eps * fabs(w))
            continue;
        *mm = (mismatch_t){true, iter, what, i, g, w, bits(got, i, esize), bits(want, i, esize)};
        return;
    }
}

/* check_result checks one call's output and that its input is untouched. */
static void check_result(const opts_t *o, int n_ranks, int rank, size_t esize, const bufs_t *bf,
                         size_t count, long iter, mismatch_t *mm)
{
    size_t nsend, nrecv;
    counts(o->coll, n_ranks, count, &nsend, &nrecv);
    bool tol = o->op == O_AVG && is_float(o->dtype);
    int dt = o->dtype;
    switch (o->coll) {
    case C_BARRIER: return;
    case C_BCAST: compare(dt, esize, bf->sendbuf, bf->expect, count, false, iter, "buffer", mm); return;
    case C_REDUCE:
        if (rank != 0)
            break;
        /* fallthrough */
    default: compare(dt, esize, bf->recvbuf, bf->expect, nrecv, tol, iter, "result", mm); break;
    }
    compare(dt, esize, bf->sendbuf, bf->sendcopy, nsend, false, iter, "input (sendbuf changed)", mm);
}

/* report_mismatch prints this rank's first wrong element; call is the collective's name. */
static void report_mismatch(const opts_t *o, int rank, size_t esize, const char *call, size_t bytes,
                            const mismatch_t *mm)
{
    char when[48];
    if (mm->iter < 0)
        snprintf(when, sizeof when, "after the warm-up");
    else
        snprintf(when, sizeof when, "timed iteration %ld", mm->iter);
    fprintf(stderr,
            BENCH_PROG ": rank %d: %s %s %s of %zu bytes, %s: %s element %zu is %.17g "
            "(bits 0x%0*" PRIx64 "), expected %.17g (bits 0x%0*" PRIx64 ")\n",
            rank, call, dtype_names[o->dtype], op_names[o->op], bytes, when, mm->buf, mm->index,
            mm->got, (int)(2 * esize), mm->got_bits, mm->want, (int)(2 * esize), mm->want_bits);
}

/* ---- timing and output -------------------------------------------------------------------- */

/* budget_iters: fewer than iters where iters calls at the slowest rank's warm-up time per call
 * would take over TIME_BUDGET_S; at least one. */
static long budget_iters(long iters, double slowest)
{
    if (slowest * (double)iters > TIME_BUDGET_S) {
        iters = (long)(TIME_BUDGET_S / slowest);
        if (iters < 1)
            iters = 1;
    }
    return iters;
}

/* busbw_factor: nccl-tests' bus-bandwidth factors, so rows compare with theirs. */
static double busbw_factor(int coll, int n)
{
    switch (coll) {
    case C_ALLREDUCE: return 2.0 * (n - 1) / n;
    case C_ALLGATHER: case C_REDUCE_SCATTER: case C_ALLTOALL: return (double)(n - 1) / n;
    case C_BCAST: case C_REDUCE: return 1.0;
    default: return 0.0;
    }
}

/* algbw_bytes: the bytes algbw divides by time, nccl-tests' "size": the whole buffer each rank
 * ends up with (allgather), starts with (reduce_scatter) or exchanges (alltoall). */
static double algbw_bytes(int coll, int n, size_t bytes)
{
    switch (coll) {
    case C_ALLGATHER: case C_REDUCE_SCATTER: case C_ALLTOALL: return (double)bytes * n;
    default: return (double)bytes;
    }
}

static const char *size_convention(int coll)
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

/* print_conventions prints the header's lines after the first: units and column names. */
static void print_conventions(const opts_t *o)
{
    printf("# %s; busbw = algbw * %s (nccl-tests)\n", size_convention(o->coll),
           o->coll == C_ALLREDUCE                       ? "2(n-1)/n"
           : o->coll == C_BCAST || o->coll == C_REDUCE  ? "1"
           : o->coll == C_BARRIER                       ? "0"
                                                        : "(n-1)/n");
    printf("# us per call: each rank's mean over iters, then avg/min/max over ranks; GBps = 1e9 "
           "bytes/s%s\n",
           o->check ? "; -c: every result checked" : "");
    if (o->iters_given)
        printf("# iterations: %ld per size, as -i asked\n", o->iters);
    else
        printf("# iterations: %ld per size (the default), fewer where a size would take over "
               "%.0f s (judged on the warm-up; -i N runs exactly N)\n",
               o->iters, TIME_BUDGET_S);
    printf("%12s %12s %12s %12s %8s %12s %12s\n", "size", "avg_us", "min_us", "max_us", "iters",
           "algbw_GBps", "busbw_GBps");
    fflush(stdout);
}

/* print_row prints one size's row (times in seconds). */
static void print_row(const opts_t *o, int n, size_t bytes, double avg, double mn, double mx,
                      long iters, bool ok)
{
    double algbw = avg > 0 ? algbw_bytes(o->coll, n, bytes) / avg / 1e9 : 0.0;
    printf("%12zu %12.2f %12.2f %12.2f %8ld %12.3f %12.3f%s\n", bytes, avg * 1e6, mn * 1e6,
           mx * 1e6, iters, algbw, algbw * busbw_factor(o->coll, n), ok ? "" : "  WRONG");
    fflush(stdout);
}

/* What bench_size needs from the library under test; ctx is the bench's own state. */
typedef struct hooks {
    void (*run_once)(void *ctx, size_t count);       /* one call of the collective */
    void (*barrier)(void *ctx, bool before_timing);  /* false: before the warm-up */
    double (*reduce_f64)(void *ctx, double v, int op); /* over all ranks; O_SUM, O_MIN or O_MAX */
    const char *const *call_names;                   /* per C_*, for -c's messages */
} hooks_t;

/* bench_size times one size (per-rank count elements) and rank 0 prints its row; returns false
 * if -c found a wrong element on any rank, which every rank agrees on. */
static bool bench_size(const hooks_t *h, void *ctx, const opts_t *o, int n, int rank, size_t esize,
                       bufs_t *bf, size_t count)
{
    size_t bytes = count * esize;
    fill(o, n, rank, esize, bf, count);
    if (o->check)
        poison(o->coll, n, rank, esize, bf, count);
    h->barrier(ctx, false);

    double t0 = now_s();
    for (long i = 0; i < o->warmup; i++)
        h->run_once(ctx, count);
    double warm = o->warmup > 0 ? (now_s() - t0) / (double)o->warmup : 0.0;

    /* Every rank must run the same number of iterations: agree on the slowest warm-up. */
    long iters = o->iters;
    if (o->warmup > 0 && !o->iters_given)
        iters = budget_iters(iters, h->reduce_f64(ctx, warm, O_MAX));

    mismatch_t mm = {0};
    double total = 0.0;
    h->barrier(ctx, true);
    if (!o->check) {
        t0 = now_s();
        for (long i = 0; i < iters; i++)
            h->run_once(ctx, count);
        total = now_s() - t0;
    } else {
        if (o->warmup > 0) /* the warm-up's last result */
            check_result(o, n, rank, esize, bf, count, -1, &mm);
        for (long i = 0; i < iters; i++) {
            poison(o->coll, n, rank, esize, bf, count);
            t0 = now_s();
            h->run_once(ctx, count);
            total += now_s() - t0;
            check_result(o, n, rank, esize, bf, count, i, &mm);
        }
    }
    double per = total / (double)iters;
    double avg = h->reduce_f64(ctx, per, O_SUM) / n;
    double mn = h->reduce_f64(ctx, per, O_MIN);
    double mx = h->reduce_f64(ctx, per, O_MAX);

    bool ok = true;
    if (o->check) {
        if (mm.found)
            report_mismatch(o, rank, esize, h->call_names[o->coll], bytes, &mm);
        ok = h->reduce_f64(ctx, mm.found ? 1.0 : 0.0, O_MAX) == 0.0;
    }
    if (rank == 0)
        print_row(o, n, bytes, avg, mn, mx, iters, ok);
    return ok;
}

/* run_sizes runs bench_size for each per-rank size from -b to -e (barrier: once, with count 0)
 * and stops at the first false, which it returns; every rank agrees on it. */
static bool run_sizes(const hooks_t *h, void *ctx, const opts_t *o, int n, int rank, size_t esize,
                      bufs_t *bf)
{
    if (o->coll == C_BARRIER)
        return bench_size(h, ctx, o, n, rank, esize, bf, 0);
    bool ok = true;
    size_t last = 0;
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes;) {
        size_t count = bytes / esize;
        if (count > 0 && count != last) { /* sizes below or between elements round down */
            ok = bench_size(h, ctx, o, n, rank, esize, bf, count);
            if (!ok)
                break;
        }
        last = count;
        if (bytes > o->max_bytes / o->factor)
            break;
        bytes = bytes ? bytes * o->factor : 1;
    }
    return ok;
}

#endif
