/* kernels_verify.c: every reduction kernel variant this CPU runs against tutti__reduce_scalar,
 * bit for bit, as a plain program (no Check, no libfabric) so that it builds with one gcc
 * command on any x86-64 machine (scripts/verify-kernels.sh) and runs as a meson unit test.
 *
 * Inputs: every dtype and op, 1..16 sources, lengths 0..257 and a few whose output passes the
 * non-temporal threshold, sources and dst at any byte offset or dst aliasing a source, values
 * mixing moderate ones, denormals, values near overflow, Inf, NaNs with many payloads (quiet
 * and signalling, both signs) and sums that land exactly on a bf16 / fp16 rounding tie; plus
 * every fp16 and bf16 value alone, and operand pairs (a sample, or with --full all 2^32 fp16
 * pairs, which is what the native fp16 arithmetic of avx512fp16 must get right).
 * Prints the variants found and "kernels_verify: N passed, M failed"; exits 1 on any failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/kernels/kernels.h"

#define MAXN 257
#define LARGE_BYTES (TUTTI__KERN_NT_BYTES + 4096) /* past the non-temporal threshold */
#define BUFBYTES (LARGE_BYTES + 512)

static long passed, failed, printed;
static const tutti__kvariant_t *vs;
static int tested[TUTTI__KV_COUNT], ntested; /* the variants compared with scalar */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545f4914f6cdd1dull;
}

static bool is_float(tutti_dtype_t dt) { return dt >= TUTTI_FLOAT16; }

static bool op_ok(tutti_op_t op, tutti_dtype_t dt)
{
    if (op == TUTTI_AVG)
        return is_float(dt);
    if (op >= TUTTI_BAND)
        return !is_float(dt);
    return true;
}

/* ---- values ---------------------------------------------------------------------------------- */

/* Float formats described by their fields, so that one generator serves all four. */
typedef struct fmt {
    int ebits, mbits; /* exponent and stored mantissa bits */
} fmt_t;

static fmt_t fmt_of(tutti_dtype_t dt)
{
    switch (dt) {
    case TUTTI_FLOAT16: return (fmt_t){5, 10};
    case TUTTI_BFLOAT16: return (fmt_t){8, 7};
    case TUTTI_FLOAT32: return (fmt_t){8, 23};
    default: return (fmt_t){11, 52};
    }
}

static uint64_t mk(fmt_t f, uint64_t sign, uint64_t exp, uint64_t man)
{
    return sign << (f.ebits + f.mbits) | exp << f.mbits | (man & ((1ull << f.mbits) - 1));
}

/* gen_float returns the bits of one value of format f. */
static uint64_t gen_float(fmt_t f)
{
    uint64_t r = rnd(), s = rnd() & 1, man = rnd();
    uint64_t emax = (1ull << f.ebits) - 1, bias = emax >> 1;
    unsigned kind = (unsigned)(r % 100);
    r >>= 8;
    if (kind < 50) /* moderate, so that sums and products mean something */
        return mk(f, s, bias - 6 + r % 13, man);
    if (kind < 58) /* denormal (sometimes zero) */
        return mk(f, s, 0, r % 4 ? man : 0);
    if (kind < 64) /* tiny normal: products of several go denormal */
        return mk(f, s, 1 + r % 4, man);
    if (kind < 70) /* near overflow */
        return mk(f, s, emax - 1 - r % 3, man);
    if (kind < 78) /* any bits at all */
        return man & ((2ull << (f.ebits + f.mbits)) - 1);
    if (kind < 90) { /* the special ones */
        switch (r % 8) {
        case 0: return mk(f, s, 0, 0);               /* +-0 */
        case 1: return mk(f, s, emax, 0);            /* +-Inf */
        case 2: return mk(f, s, emax - 1, ~0ull);    /* +-max */
        case 3: return mk(f, s, 0, 1);               /* smallest denormal */
        case 4: return mk(f, s, 0, ~0ull);           /* largest denormal */
        case 5: return mk(f, s, 1, 0);               /* smallest normal */
        case 6: return mk(f, s, bias, 0);            /* +-1 */
        default: return mk(f, s, bias, 1);           /* 1 + ulp */
        }
    }
    /* NaN: quiet or signalling, payload small, large or random */
    uint64_t qbit = 1ull << (f.mbits - 1), pay;
    switch (r % 4) {
    case 0: pay = 1; break;
    case 1: pay = qbit - 1; break;
    case 2: pay = 0; break;
    default: pay = man & (qbit - 1); break;
    }
    bool quiet = (r >> 4) & 1;
    if (!quiet && pay == 0)
        pay = 1 + (man >> 40) % (qbit - 1); /* a signalling NaN needs some payload */
    return mk(f, s, emax, (quiet ? qbit : 0) | pay);
}

static void put(void *p, size_t i, size_t es, uint64_t v) { memcpy((char *)p + i * es, &v, es); }

/* gen_tie writes, at element i, a value a and (second source) half an ulp of a with the same
 * sign, so that the fp32 sum lies exactly on a rounding tie of the stored format (fp32 and
 * fp64: on a tie of that format's own addition); the other sources are zeros (ones for PROD). */
static void gen_tie(tutti_dtype_t dt, tutti_op_t op, void *const *sp, int nsrc, size_t i)
{
    fmt_t f = fmt_of(dt);
    size_t es = tutti_dtype_size(dt);
    uint64_t emax = (1ull << f.ebits) - 1, bias = emax >> 1;
    int p = f.mbits + 1; /* significand bits */
    uint64_t s = rnd() & 1;
    /* a's exponent field E in 2 .. emax - 2; half an ulp is 2^(E - bias - p) */
    uint64_t e = 2 + rnd() % (emax - 3);
    uint64_t a = mk(f, s, e, rnd()), h;
    int64_t he = (int64_t)e - p; /* exponent field of the half ulp if normal */
    if (he >= 1)
        h = mk(f, s, (uint64_t)he, 0);
    else /* denormal: 2^(E - bias - p) = m * 2^(1 - bias - mbits) */
        h = mk(f, s, 0, 1ull << (e - 2));
    if (nsrc == 1) {
        put(sp[0], i, es, a);
        return;
    }
    put(sp[0], i, es, a);
    put(sp[1], i, es, h);
    for (int k = 2; k < nsrc; k++)
        put(sp[k], i, es, op == TUTTI_PROD ? mk(f, 0, bias, 0) : mk(f, rnd() & 1, 0, 0));
}

/* fill writes n elements of every source; flavour 0 mixed, 1 NaN-heavy, 2 ties, 3 denormals. */
static void fill(tutti_dtype_t dt, tutti_op_t op, void *const *sp, int nsrc, size_t n,
                 int flavour)
{
    size_t es = tutti_dtype_size(dt);
    if (!is_float(dt)) {
        for (int k = 0; k < nsrc; k++)
            for (size_t i = 0; i < n; i++) {
                uint64_t r = rnd();
                /* mostly small for PROD, else the product is 0 after a few sources */
                put(sp[k], i, es, op == TUTTI_PROD && r % 4 ? (r >> 8) % 5 - 2 : r >> 3);
            }
        return;
    }
    fmt_t f = fmt_of(dt);
    for (size_t i = 0; i < n; i++) {
        if (flavour == 2 && rnd() % 2) {
            gen_tie(dt, op, sp, nsrc, i);
            continue;
        }
        for (int k = 0; k < nsrc; k++) {
            uint64_t v = gen_float(f);
            if (flavour == 1 && rnd() % 6 == 0) /* a NaN of its own */
                v = mk(f, rnd() & 1, (1ull << f.ebits) - 1, 1 + rnd() % ((1ull << f.mbits) - 1));
            else if (flavour == 3 && rnd() % 2)
                v = mk(f, rnd() & 1, rnd() % 2, rnd());
            put(sp[k], i, es, v);
        }
    }
}

/* ---- one case ------------------------------------------------------------------------------- */

static unsigned char *pool[18]; /* 16 sources, dst, the scalar result */

static const char *hex(char *buf, const void *p, size_t es)
{
    uint64_t v = 0;
    memcpy(&v, p, es);
    snprintf(buf, 24, "0x%0*llx", (int)es * 2, (unsigned long long)v);
    return buf;
}

static void record(bool ok) { ok ? passed++ : failed++; }

/* run_case fills the sources, computes the scalar result, and checks every tested variant on
 * the same inputs: same bytes, nothing written outside dst, no source written. */
static void run_case(tutti_dtype_t dt, tutti_op_t op, int nsrc, size_t n, int avg_div,
                     int flavour)
{
    size_t es = tutti_dtype_size(dt), bytes = n * es;
    unsigned char *sp[16];
    const void *srcs[16], *osrcs[16];
    for (int k = 0; k < nsrc; k++) {
        uint64_t r = rnd();
        sp[k] = pool[k] + 64 + (r % 3 ? r % 64 : es * (r % 8)); /* any byte offset */
    }
    /* long inputs repeat a random 4096-element pattern: generating every value costs more
     * than all the kernels together */
    size_t nfill = n < 4096 ? n : 4096;
    fill(dt, op, (void *const *)sp, nsrc, nfill, flavour);
    for (int k = 0; k < nsrc; k++)
        for (size_t i = nfill; i < n; i += nfill)
            memcpy(sp[k] + i * es, sp[k], (n - i < nfill ? n - i : nfill) * es);
    static unsigned char *copies[16];
    for (int k = 0; k < nsrc; k++) {
        if (copies[k] == NULL && (copies[k] = malloc(BUFBYTES)) == NULL) {
            fprintf(stderr, "kernels_verify: out of memory\n");
            exit(1);
        }
        memcpy(copies[k], sp[k], bytes);
        osrcs[k] = copies[k];
    }
    unsigned char *want = pool[17];
    tutti__reduce_scalar(want, osrcs, nsrc, n, dt, op, avg_div);
    for (int t = 0; t < ntested; t++) {
        const tutti__kvariant_t *v = &vs[tested[t]];
        for (int k = 0; k < nsrc; k++) {
            memcpy(sp[k], copies[k], bytes);
            srcs[k] = sp[k];
        }
        int alias = (int)(rnd() % (unsigned)(nsrc + 2)) - 2; /* below 0: dst of its own */
        unsigned char *dst;
        size_t doff = 64 + (rnd() % 2 ? rnd() % 64 : 0);
        if (alias < 0) {
            memset(pool[16], 0xa5, doff + bytes + 64);
            dst = pool[16] + doff;
        } else {
            dst = sp[alias];
        }
        v->fn(dst, srcs, nsrc, n, dt, op, avg_div);
        bool ok = true;
        for (size_t i = 0; i < n; i++) {
            if (memcmp(want + i * es, dst + i * es, es) == 0)
                continue;
            ok = false;
            if (printed++ < 20) {
                char a[24], b[24], c[24];
                fprintf(stderr, "FAIL %s %s %s nsrc=%d n=%zu avg_div=%d dst=%s: [%zu] scalar %s, "
                                "%s %s; inputs", v->name, tutti_dtype_name(dt), tutti_op_name(op),
                        nsrc, n, avg_div, alias < 0 ? "own" : "a source", i,
                        hex(a, want + i * es, es), v->name, hex(b, dst + i * es, es));
                for (int k = 0; k < nsrc; k++)
                    fprintf(stderr, " %s", hex(c, copies[k] + i * es, es));
                fprintf(stderr, "\n");
            }
            break;
        }
        if (alias < 0) {
            bool guard = true;
            for (size_t j = 0; j < doff; j++)
                guard = guard && pool[16][j] == 0xa5;
            for (size_t j = doff + bytes; j < doff + bytes + 64; j++)
                guard = guard && pool[16][j] == 0xa5;
            if (!guard && printed++ < 20)
                fprintf(stderr, "FAIL %s %s %s nsrc=%d n=%zu: wrote outside dst\n", v->name,
                        tutti_dtype_name(dt), tutti_op_name(op), nsrc, n);
            ok = ok && guard;
        }
        for (int k = 0; k < nsrc; k++)
            if (k != alias && memcmp(sp[k], copies[k], bytes) != 0) {
                ok = false;
                if (printed++ < 20)
                    fprintf(stderr, "FAIL %s %s %s nsrc=%d n=%zu: source %d was written\n",
                            v->name, tutti_dtype_name(dt), tutti_op_name(op), nsrc, n, k);
            }
        record(ok);
    }
}

/* ---- exhaustive-style tables for the 16-bit formats ------------------------------------------ */

/* check_table compares every variant with scalar on count elements of the given sources. */
static bool check_table(const char *what, tutti_dtype_t dt, tutti_op_t op, int nsrc,
                        const void *const *srcs, size_t count, int avg_div, uint16_t *want,
                        uint16_t *got, int t)
{
    const tutti__kvariant_t *v = &vs[tested[t]];
    v->fn(got, srcs, nsrc, count, dt, op, avg_div);
    for (size_t i = 0; i < count; i++) {
        if (want[i] == got[i])
            continue;
        if (printed++ < 20) {
            fprintf(stderr, "FAIL %s %s %s %s avg_div=%d: [%zu] scalar 0x%04x, %s 0x%04x; inputs",
                    what, v->name, tutti_dtype_name(dt), tutti_op_name(op), avg_div, i, want[i],
                    v->name, got[i]);
            for (int k = 0; k < nsrc; k++)
                fprintf(stderr, " 0x%04x", ((const uint16_t *)srcs[k])[i]);
            fprintf(stderr, "\n");
        }
        return false;
    }
    return true;
}

static const tutti_op_t float_ops[] = {TUTTI_SUM, TUTTI_PROD, TUTTI_MIN, TUTTI_MAX, TUTTI_AVG};

/* every_value: one source holding all 65536 values (the nsrc == 1 copy / divide path). */
static void every_value(tutti_dtype_t dt, uint16_t *a, uint16_t *want, uint16_t *got)
{
    for (uint32_t j = 0; j < 65536; j++)
        a[j] = (uint16_t)j;
    const void *s[1] = {a};
    for (size_t o = 0; o < 5; o++)
        for (int d = 0; d < (float_ops[o] == TUTTI_AVG ? 4 : 1); d++) {
            tutti__reduce_scalar(want, s, 1, 65536, dt, float_ops[o], d);
            for (int t = 0; t < ntested; t++)
                record(check_table("every value", dt, float_ops[o], 1, s, 65536, d, want, got, t));
        }
}

#define NPAIROPS 6
static const int pair_divs[NPAIROPS] = {0, 0, 0, 0, 0, 3};
static const tutti_op_t pair_ops[NPAIROPS] = {TUTTI_SUM, TUTTI_PROD, TUTTI_MIN, TUTTI_MAX,
                                              TUTTI_AVG, TUTTI_AVG};

/* pairs_part checks a = first, first + step, ... against every b; bad[o][t] counts failures. */
static void pairs_part(tutti_dtype_t dt, uint32_t first, uint32_t step, int (*bad)[TUTTI__KV_COUNT])
{
    uint16_t *a = malloc(4 * 65536 * sizeof(uint16_t));
    if (a == NULL) {
        fprintf(stderr, "kernels_verify: out of memory\n");
        exit(1);
    }
    uint16_t *b = a + 65536, *want = b + 65536, *got = want + 65536;
    for (uint32_t j = 0; j < 65536; j++)
        b[j] = (uint16_t)j;
    const void *s[2] = {a, b};
    for (size_t o = 0; o < NPAIROPS; o++)
        for (uint32_t x = first; x < 65536; x += step) {
            for (uint32_t j = 0; j < 65536; j++)
                a[j] = (uint16_t)x;
            tutti__reduce_scalar(want, s, 2, 65536, dt, pair_ops[o], pair_divs[o]);
            for (int t = 0; t < ntested; t++)
                if (bad[o][t] == 0 &&
                    !check_table("pairs", dt, pair_ops[o], 2, s, 65536, pair_divs[o], want, got, t))
                    __atomic_add_fetch(&bad[o][t], 1, __ATOMIC_RELAXED);
        }
    free(a);
}

/* pairs: a (every 97th value, or with full every value) against every b; since a and b range
 * over the same values, both orders are covered. full splits the a values among one child
 * process per CPU (fork: no thread library needed), counting failures in shared memory. */
static void pairs(tutti_dtype_t dt, bool full)
{
    int (*bad)[TUTTI__KV_COUNT] = mmap(NULL, sizeof(int[NPAIROPS][TUTTI__KV_COUNT]),
                                       PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (bad == MAP_FAILED) {
        fprintf(stderr, "kernels_verify: mmap: out of memory\n");
        exit(1);
    }
    if (!full) {
        pairs_part(dt, 0, 97, bad);
    } else {
        long np = sysconf(_SC_NPROCESSORS_ONLN);
        int nproc = np < 1 ? 1 : np > 64 ? 64 : (int)np, started = 0;
        fflush(stdout);
        fflush(stderr);
        for (int c = 0; c < nproc; c++) {
            pid_t pid = fork();
            if (pid == 0) {
                pairs_part(dt, (uint32_t)c, (uint32_t)nproc, bad);
                _exit(0);
            }
            if (pid < 0) { /* do this share here instead */
                pairs_part(dt, (uint32_t)c, (uint32_t)nproc, bad);
                continue;
            }
            started++;
        }
        for (int c = 0; c < started; c++) {
            int status;
            if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "FAIL pairs: a child process died (status 0x%x)\n", status);
                bad[0][0]++;
            }
        }
    }
    for (size_t o = 0; o < NPAIROPS; o++)
        for (int t = 0; t < ntested; t++)
            record(bad[o][t] == 0);
    munmap(bad, sizeof(int[NPAIROPS][TUTTI__KV_COUNT]));
}

/* ---- the overrides --------------------------------------------------------------------------- */

/* CCL_FP16=avx512fp16 works exactly where the variant is available and is an error naming the
 * variable elsewhere; unset, fp16 takes avx512fp16 where available. */
static void check_choice(void)
{
    bool have = vs[TUTTI__KV_AVX512FP16].available;
    unsetenv("CCL_FP16");
    unsetenv("CCL_BF16");
    tutti_status_t st = tutti__kernels_reinit();
    printf("automatic choice: fp16 %s, bf16 %s, fp32 %s, fp64 %s, int32 %s\n",
           tutti__kernel_variant(TUTTI_FLOAT16), tutti__kernel_variant(TUTTI_BFLOAT16),
           tutti__kernel_variant(TUTTI_FLOAT32), tutti__kernel_variant(TUTTI_FLOAT64),
           tutti__kernel_variant(TUTTI_INT32));
    bool ok = st == TUTTI_OK && (!have || strcmp(tutti__kernel_variant(TUTTI_FLOAT16),
                                                 "avx512fp16") == 0);
    if (!ok && printed++ < 20)
        fprintf(stderr, "FAIL automatic fp16 choice is %s (init %d)\n",
                tutti__kernel_variant(TUTTI_FLOAT16), (int)st);
    record(ok);

    setenv("CCL_FP16", "avx512fp16", 1);
    st = tutti__kernels_reinit();
    if (have) {
        ok = st == TUTTI_OK && strcmp(tutti__kernel_variant(TUTTI_FLOAT16), "avx512fp16") == 0;
        printf("CCL_FP16=avx512fp16: fp16 uses %s\n", tutti__kernel_variant(TUTTI_FLOAT16));
    } else {
        ok = st == TUTTI_ERR_INVALID_ARG && strstr(tutti_last_error(), "CCL_FP16") != NULL;
        printf("CCL_FP16=avx512fp16 here: %s\n", tutti_last_error());
    }
    if (!ok && printed++ < 20)
        fprintf(stderr, "FAIL CCL_FP16=avx512fp16 gave status %d (%s)\n", (int)st,
                tutti_last_error());
    record(ok);
    /* whatever was chosen, tutti__reduce gives the scalar result */
    uint16_t x[40], y[40], out[40], ref[40];
    for (int i = 0; i < 40; i++) {
        x[i] = (uint16_t)(0x3c00 + i * 7);
        y[i] = (uint16_t)(0x1400 + i * 13);
    }
    const void *s[2] = {x, y};
    tutti__reduce(out, s, 2, 40, TUTTI_FLOAT16, TUTTI_SUM, 0);
    tutti__reduce_scalar(ref, s, 2, 40, TUTTI_FLOAT16, TUTTI_SUM, 0);
    record(memcmp(out, ref, sizeof out) == 0);
    unsetenv("CCL_FP16");
    (void)tutti__kernels_reinit();
}

int main(int argc, char **argv)
{
    bool full = argc > 1 && strcmp(argv[1], "--full") == 0;
    if (argc > 1 && !full) {
        fprintf(stderr, "usage: %s [--full]  (--full: all 2^32 fp16 operand pairs; minutes)\n",
                argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* in order with the library's warnings on stderr */
    vs = tutti__kernel_variants();
    for (int v = 0; v < TUTTI__KV_COUNT; v++) {
        const char *state = v == TUTTI__KV_SCALAR ? "the reference"
                            : vs[v].available     ? "available: tested"
                            : vs[v].fn == NULL    ? "not built (this compiler or architecture)"
                                                  : "built, but this CPU or OS lacks it: skipped";
        printf("variant %-10s %s\n", vs[v].name, state);
        if (v != TUTTI__KV_SCALAR && vs[v].available)
            tested[ntested++] = v;
    }
    for (int k = 0; k < 18; k++)
        if ((pool[k] = aligned_alloc(64, BUFBYTES)) == NULL) {
            fprintf(stderr, "kernels_verify: out of memory\n");
            return 1;
        }

    check_choice();
    for (int dt = 0; dt < TUTTI_DTYPE_COUNT; dt++)
        for (int op = 0; op < TUTTI_OP_COUNT; op++) {
            if (!op_ok((tutti_op_t)op, (tutti_dtype_t)dt))
                continue;
            for (int nsrc = 1; nsrc <= 16; nsrc++) {
                bool every = nsrc <= 3 || nsrc == 8 || nsrc == 16;
                for (size_t n = 0; n <= MAXN; n += every ? 1 : 1 + rnd() % 19) {
                    int avg_div = 0, flavour = (int)(rnd() % 4);
                    if (op == TUTTI_AVG) /* 0: a plain sum; powers of two keep ties ties */
                        avg_div = flavour == 2 ? 1 << (rnd() % 3) : (int)(rnd() % 9);
                    run_case((tutti_dtype_t)dt, (tutti_op_t)op, nsrc, n, avg_div, flavour);
                }
            }
            /* large: past the non-temporal threshold, odd lengths, any offsets */
            for (int nsrc = 2; nsrc <= 5; nsrc += 3) {
                size_t n = LARGE_BYTES / tutti_dtype_size((tutti_dtype_t)dt) - rnd() % 64;
                run_case((tutti_dtype_t)dt, (tutti_op_t)op, nsrc, n, op == TUTTI_AVG ? 3 : 0,
                         (int)(rnd() % 4));
            }
        }
    if (ntested > 0) {
        uint16_t *a = malloc(3 * 65536 * sizeof(uint16_t));
        if (a == NULL)
            return 1;
        every_value(TUTTI_FLOAT16, a, a + 65536, a + 2 * 65536);
        every_value(TUTTI_BFLOAT16, a, a + 65536, a + 2 * 65536);
        free(a);
        pairs(TUTTI_FLOAT16, full);
        pairs(TUTTI_BFLOAT16, false);
    }
    printf("tested against scalar:");
    for (int t = 0; t < ntested; t++)
        printf(" %s", vs[tested[t]].name);
    printf("%s%s\n", ntested ? "" : " none (no SIMD variant runs here)",
           full ? " (all fp16 pairs)" : " (fp16 pairs sampled; --full for all)");
    printf("kernels_verify: %ld passed, %ld failed\n", passed, failed);
    return failed ? 1 : 0;
}
