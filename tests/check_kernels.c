/* check_kernels.c: tutti__reduce for every dtype and op against a straightforward reference
 * (1 to 16 sources, 0 to 257 elements, misaligned and aliased pointers), every SIMD variant
 * this CPU runs against the scalar kernel bit for bit (NaN payloads, ties, denormals), the
 * CCL_BF16 / CCL_FP16 overrides, and the bf16 / fp16 conversions (ties to even, NaN, Inf,
 * subnormals, every fp16 value). */
#include <check.h>
#include "check_main.h"
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/kernels/kernels.h"
#include "harness.h"

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static bool is_float(tutti_dtype_t dt) { return dt >= TUTTI_FLOAT16 && dt <= TUTTI_FLOAT64; }

static bool op_ok(tutti_op_t op, tutti_dtype_t dt)
{
    if (op == TUTTI_AVG)
        return is_float(dt);
    if (op == TUTTI_BAND || op == TUTTI_BOR || op == TUTTI_BXOR)
        return !is_float(dt);
    return true;
}

/* ---- inputs ---------------------------------------------------------------------------------- */

/* A float with a mix of moderate values, any bit pattern, and the special ones. */
static float rnd_f32(void)
{
    uint64_t r = rnd();
    unsigned kind = (unsigned)(r % 100);
    if (kind < 70) { /* moderate: exponent within 2^-8 .. 2^8 */
        uint32_t e = 127u - 8u + (uint32_t)((r >> 8) % 17u);
        return f32_of((uint32_t)((r >> 32) & 0x807fffffu) | (e << 23));
    }
    if (kind < 95)
        return f32_of((uint32_t)(r >> 32));
    static const uint32_t sp[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                  0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x3f800000u, 0xbf800000u};
    return f32_of(sp[(r >> 8) % (sizeof sp / sizeof sp[0])]);
}

static double rnd_f64(void)
{
    uint64_t r = rnd();
    unsigned kind = (unsigned)(r % 100);
    if (kind < 70) {
        uint64_t e = 1023u - 10u + (r >> 8) % 21u;
        uint64_t u = (rnd() & 0x800fffffffffffffull) | (e << 52);
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    if (kind < 95) {
        uint64_t u = rnd();
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    return (double)rnd_f32();
}

static uint16_t rnd_half(bool bf)
{
    uint64_t r = rnd();
    unsigned kind = (unsigned)(r % 100);
    if (kind < 70) { /* moderate: keep the exponent near 1 so that sums mean something */
        if (bf) {
            uint16_t e = (uint16_t)(127u - 6u + (r >> 8) % 13u);
            return (uint16_t)(((r >> 24) & 0x807fu) | (uint16_t)(e << 7));
        }
        uint16_t e = (uint16_t)(15u - 6u + (r >> 8) % 13u);
        return (uint16_t)(((r >> 24) & 0x83ffu) | (uint16_t)(e << 10));
    }
    if (kind < 95)
        return (uint16_t)(r >> 24);
    static const uint16_t spb[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x0001, 0x807f, 0x7f7f};
    static const uint16_t sph[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x0001, 0x83ff, 0x7bff};
    return bf ? spb[(r >> 8) % 8] : sph[(r >> 8) % 8];
}

static void fill(void *p, tutti_dtype_t dt, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *q = (char *)p + i * tutti_dtype_size(dt);
        switch (dt) {
        case TUTTI_FLOAT32: {
            float f = rnd_f32();
            memcpy(q, &f, 4);
            break;
        }
        case TUTTI_FLOAT64: {
            double d = rnd_f64();
            memcpy(q, &d, 8);
            break;
        }
        case TUTTI_FLOAT16:
        case TUTTI_BFLOAT16: {
            uint16_t h = rnd_half(dt == TUTTI_BFLOAT16);
            memcpy(q, &h, 2);
            break;
        }
        default: {
            uint64_t r = rnd();
            memcpy(q, &r, tutti_dtype_size(dt));
        }
        }
    }
}

/* ---- reference ------------------------------------------------------------------------------- */

static int64_t load_int(const void *p, tutti_dtype_t dt)
{
    switch (dt) {
    case TUTTI_INT8: return *(const int8_t *)p;
    case TUTTI_UINT8: return *(const uint8_t *)p;
    case TUTTI_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    default: {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

#define FMIN_(a, b) (isnan(a) ? (a) : isnan(b) ? (b) : (b) < (a) ? (b) : (a))
#define FMAX_(a, b) (isnan(a) ? (a) : isnan(b) ? (b) : (b) > (a) ? (b) : (a))

/* ref_one computes element i: sources combined in order, bf16 / fp16 in float and rounded once. */
static void ref_one(void *out, const void *const *srcs, int nsrc, size_t i, tutti_dtype_t dt,
                    tutti_op_t op, int avg_div)
{
    size_t es = tutti_dtype_size(dt);
    if (!is_float(dt)) {
        int64_t acc = load_int((const char *)srcs[0] + i * es, dt);
        for (int k = 1; k < nsrc; k++) {
            int64_t v = load_int((const char *)srcs[k] + i * es, dt);
            switch (op) {
            case TUTTI_SUM: acc = (int64_t)((uint64_t)acc + (uint64_t)v); break;
            case TUTTI_PROD: acc = (int64_t)((uint64_t)acc * (uint64_t)v); break;
            case TUTTI_MIN: acc = v < acc ? v : acc; break;
            case TUTTI_MAX: acc = v > acc ? v : acc; break;
            case TUTTI_BAND: acc &= v; break;
            case TUTTI_BOR: acc |= v; break;
            case TUTTI_BXOR: acc ^= v; break;
            default: break;
            }
        }
        memcpy(out, &acc, es); /* little endian: the low bytes */
        return;
    }
    if (dt == TUTTI_FLOAT64) {
        double acc;
        memcpy(&acc, (const char *)srcs[0] + i * 8, 8);
        for (int k = 1; k < nsrc; k++) {
            double v;
            memcpy(&v, (const char *)srcs[k] + i * 8, 8);
            switch (op) {
            case TUTTI_SUM:
            case TUTTI_AVG: acc = acc + v; break;
            case TUTTI_PROD: acc = acc * v; break;
            case TUTTI_MIN: acc = FMIN_(acc, v); break;
            case TUTTI_MAX: acc = FMAX_(acc, v); break;
            default: break;
            }
        }
        if (op == TUTTI_AVG && avg_div > 0)
            acc = acc / (double)avg_div;
        memcpy(out, &acc, 8);
        return;
    }
    float acc = 0;
    for (int k = 0; k < nsrc; k++) {
        const char *q = (const char *)srcs[k] + i * es;
        float v;
        if (dt == TUTTI_FLOAT32) {
            memcpy(&v, q, 4);
        } else {
            uint16_t h;
            memcpy(&h, q, 2);
            v = (float)(dt == TUTTI_FLOAT16 ? th_from_f16(h) : th_from_bf16(h));
        }
        if (k == 0) {
            acc = v;
            continue;
        }
        switch (op) {
        case TUTTI_SUM:
        case TUTTI_AVG: acc = acc + v; break;
        case TUTTI_PROD: acc = acc * v; break;
        case TUTTI_MIN: acc = FMIN_(acc, v); break;
        case TUTTI_MAX: acc = FMAX_(acc, v); break;
        default: break;
        }
    }
    if (op == TUTTI_AVG && avg_div > 0)
        acc = acc / (float)avg_div;
    if (dt == TUTTI_FLOAT32) {
        memcpy(out, &acc, 4);
    } else {
        uint16_t h = dt == TUTTI_FLOAT16 ? th_to_f16(acc) : th_to_bf16(acc);
        memcpy(out, &h, 2);
    }
}

static bool elem_is_nan(const void *p, tutti_dtype_t dt)
{
    switch (dt) {
    case TUTTI_FLOAT32: {
        float f;
        memcpy(&f, p, 4);
        return isnan(f);
    }
    case TUTTI_FLOAT64: {
        double d;
        memcpy(&d, p, 8);
        return isnan(d);
    }
    case TUTTI_FLOAT16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
    }
    case TUTTI_BFLOAT16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu);
    }
    default: return false;
    }
}

/* ---- tutti__reduce --------------------------------------------------------------------------- */

#define MAXN 257
#define PAD 32

/* one_case runs tutti__reduce once and compares; returns the number of failures (and prints). */
static int one_case(tutti_dtype_t dt, tutti_op_t op, int nsrc, size_t n, int alias, int avg_div)
{
    size_t es = tutti_dtype_size(dt), bytes = n * es;
    static unsigned char mem[17][MAXN * 8 + 2 * PAD + 8], orig[17][MAXN * 8];
    const void *srcs[16];
    unsigned char *sp[16];
    for (int k = 0; k < nsrc; k++) {
        sp[k] = mem[k] + PAD + rnd() % 8; /* misaligned */
        fill(sp[k], dt, n);
        memcpy(orig[k], sp[k], bytes);
        srcs[k] = sp[k];
    }
    /* alias: -1 separate dst; otherwise dst is srcs[alias] */
    unsigned char *dst;
    unsigned char *dmem = mem[16];
    if (alias < 0) {
        memset(dmem, 0x5a, sizeof mem[16]);
        dst = dmem + PAD + rnd() % 8;
    } else {
        dst = sp[alias];
    }
    unsigned char expect[MAXN * 8];
    const void *osrcs[16];
    for (int k = 0; k < nsrc; k++)
        osrcs[k] = orig[k];
    for (size_t i = 0; i < n; i++)
        ref_one(expect + i * es, osrcs, nsrc, i, dt, op, avg_div);

    tutti__reduce(dst, srcs, nsrc, n, dt, op, avg_div);

    char what[160], dname[24] = "separate";
    if (alias >= 0)
        snprintf(dname, sizeof dname, "srcs[%d]", alias);
    snprintf(what, sizeof what, "tutti__reduce dtype=%s op=%s nsrc=%d count=%zu dst=%s avg_div=%d",
             tutti_dtype_name(dt), tutti_op_name(op), nsrc, n, dname, avg_div);
    int bad = 0;
    for (size_t i = 0; i < n && bad < 3; i++) {
        const unsigned char *e = expect + i * es, *g = dst + i * es;
        if (memcmp(e, g, es) == 0)
            continue;
        if (elem_is_nan(e, dt) && elem_is_nan(g, dt))
            continue;
        char he[20], hg[20], hs[16][20];
        for (int k = 0; k < nsrc; k++)
            th_hex(hs[k], orig[k] + i * es, es);
        char srcl[400] = "";
        for (int k = 0; k < nsrc && k < 16; k++) {
            strncat(srcl, hs[k], sizeof srcl - strlen(srcl) - 1);
            strncat(srcl, " ", sizeof srcl - strlen(srcl) - 1);
        }
        fprintf(stderr, "%s: index %zu: expected %s got %s (inputs %s)\n", what, i,
                th_hex(he, e, es), th_hex(hg, g, es), srcl);
        bad++;
    }
    for (int k = 0; k < nsrc; k++)
        if (sp[k] != dst && memcmp(sp[k], orig[k], bytes) != 0) {
            fprintf(stderr, "%s: source %d was written\n", what, k);
            bad++;
        }
    if (alias < 0) {
        for (unsigned char *q = dmem; q < dst; q++)
            if (*q != 0x5a) {
                fprintf(stderr, "%s: wrote before dst\n", what);
                bad++;
                break;
            }
        for (unsigned char *q = dst + bytes; q < dmem + sizeof mem[16]; q++)
            if (*q != 0x5a) {
                fprintf(stderr, "%s: wrote past the end of dst (byte %zu after)\n", what,
                        (size_t)(q - dst - bytes));
                bad++;
                break;
            }
    }
    return bad;
}

START_TEST(test_reduce)
{
    static const size_t sample[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33,
                                    63, 64, 65, 127, 128, 129, 255, 256, 257};
    tutti_dtype_t dt = (tutti_dtype_t)_i;
    int fails = 0, cases = 0;
    for (int op = 0; op < TUTTI_OP_COUNT; op++) {
        if (!op_ok((tutti_op_t)op, dt))
            continue;
        for (int nsrc = 1; nsrc <= 16; nsrc++) {
            bool all = nsrc <= 3 || nsrc == 16;
            size_t nl = all ? MAXN + 1 : sizeof sample / sizeof sample[0];
            for (size_t li = 0; li < nl; li++) {
                size_t n = all ? li : sample[li];
                int alias = (int)(rnd() % 4) - 1; /* separate, srcs[0], srcs[mid], srcs[last] */
                if (alias == 1)
                    alias = nsrc / 2;
                else if (alias == 2)
                    alias = nsrc - 1;
                static const int divs[] = {0, 1, 3, 7, -1};
                int avg_div = 0;
                if (op == TUTTI_AVG) {
                    avg_div = divs[li % 5];
                    if (avg_div < 0)
                        avg_div = nsrc;
                }
                cases++;
                fails += one_case(dt, (tutti_op_t)op, nsrc, n, alias, avg_div);
                if (fails > 20)
                    ck_abort_msg("tutti__reduce %s: too many failures (see stderr)",
                                 tutti_dtype_name(dt));
            }
        }
    }
    ck_assert_msg(fails == 0, "tutti__reduce %s: %d of %d cases failed (see stderr)",
                  tutti_dtype_name(dt), fails, cases);
}
END_TEST

/* ---- the reference converters against known values --------------------------------------------- */

START_TEST(test_reference_converters)
{
    /* a self-check of the test's own converters, so that the comparisons below mean something */
    ck_assert_uint_eq(th_to_f16(1.0), 0x3c00);
    ck_assert_uint_eq(th_to_f16(-2.0), 0xc000);
    ck_assert_uint_eq(th_to_f16(65504.0), 0x7bff);
    ck_assert_uint_eq(th_to_f16(65520.0), 0x7c00);
    ck_assert_uint_eq(th_to_f16(65519.0), 0x7bff);
    ck_assert_uint_eq(th_to_f16(ldexp(1, -24)), 0x0001);
    ck_assert_uint_eq(th_to_f16(ldexp(1, -25)), 0x0000);       /* tie: to even (zero) */
    ck_assert_uint_eq(th_to_f16(3 * ldexp(1, -25)), 0x0002);   /* tie between 1 and 2: 2 */
    ck_assert_uint_eq(th_to_f16(ldexp(1, -14)), 0x0400);
    ck_assert_uint_eq(th_to_f16(1.0 + ldexp(1, -11)), 0x3c00); /* tie: down to even */
    ck_assert_uint_eq(th_to_f16(1.0 + 3 * ldexp(1, -11)), 0x3c02);
    ck_assert_uint_eq(th_to_bf16(1.0), 0x3f80);
    ck_assert_uint_eq(th_to_bf16(1.0 + ldexp(1, -8)), 0x3f80);
    ck_assert_uint_eq(th_to_bf16(1.0 + 3 * ldexp(1, -8)), 0x3f82);
    ck_assert_uint_eq(th_to_bf16(-INFINITY), 0xff80);
    ck_assert_uint_eq(th_to_bf16(ldexp(1, -133)), 0x0001);
    ck_assert_uint_eq(th_to_bf16((double)3.4028234663852886e38), 0x7f80); /* FLT_MAX rounds up */
    ck_assert(th_from_f16(0x7bff) == 65504.0);
    ck_assert(th_from_f16(0x0001) == ldexp(1, -24));
    ck_assert(th_from_bf16(0xc040) == -3.0);
    ck_assert(isnan(th_from_f16(0x7e00)) && isnan(th_from_bf16(0x7fc1)));
}
END_TEST

/* ---- bf16 ---------------------------------------------------------------------------------- */

static bool bf16_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu); }
static bool f16_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); }

/* check_to_bf16 compares the library's narrowing of f with the reference; 1 on a mismatch. */
static int check_to_bf16(float f, const char *why)
{
    uint16_t got = tutti__f32_to_bf16(f);
    if (isnan(f)) {
        uint16_t sign = (uint16_t)((bits_f32(f) >> 16) & 0x8000u);
        if (!bf16_nan(got) || !(got & 0x40u) || (got & 0x8000u) != sign) {
            fprintf(stderr, "tutti__f32_to_bf16(NaN 0x%08x) = 0x%04x: not a quiet NaN of the same "
                            "sign (%s)\n", bits_f32(f), got, why);
            return 1;
        }
        return 0;
    }
    uint16_t want = th_to_bf16((double)f);
    if (got != want) {
        fprintf(stderr, "tutti__f32_to_bf16(0x%08x = %a) = 0x%04x, expected 0x%04x (%s)\n",
                bits_f32(f), (double)f, got, want, why);
        return 1;
    }
    return 0;
}

START_TEST(test_bf16)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536 && bad < 20; h++) {
        float f = tutti__bf16_to_f32((uint16_t)h);
        double want = th_from_bf16((uint16_t)h);
        if (bf16_nan((uint16_t)h)) {
            if (!isnan(f))
                bad += fprintf(stderr, "bf16 0x%04x: NaN widened to %a\n", h, (double)f) > 0;
        } else if (bits_f32(f) != bits_f32((float)want)) {
            bad += fprintf(stderr, "bf16 0x%04x widened to %a, expected %a\n", h, (double)f, want) > 0;
        } else if (tutti__f32_to_bf16(f) != h) {
            bad += fprintf(stderr, "bf16 0x%04x does not round-trip: 0x%04x\n", h,
                           tutti__f32_to_bf16(f)) > 0;
        }
        bad += check_to_bf16(f, "a bf16 value");
        /* between h and the next value up in magnitude: the exact tie and either side of it */
        if ((h & 0x7f80u) != 0x7f80u) {
            uint32_t u = h << 16;
            uint16_t even = (h & 1u) ? (uint16_t)(h + 1) : (uint16_t)h;
            uint16_t tie = tutti__f32_to_bf16(f32_of(u | 0x8000u));
            if (tie != even)
                bad += fprintf(stderr, "bf16 tie 0x%08x -> 0x%04x, expected 0x%04x (even)\n",
                               u | 0x8000u, tie, even) > 0;
            bad += check_to_bf16(f32_of(u | 0x8000u), "tie");
            bad += check_to_bf16(f32_of(u | 0x8001u), "just above the tie");
            bad += check_to_bf16(f32_of(u | 0x7fffu), "just below the tie");
            bad += check_to_bf16(f32_of(u | 0x0001u), "just above a value");
        }
    }
    /* signalling NaNs come out quiet */
    static const uint32_t snan[] = {0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7f810000u};
    for (size_t i = 0; i < sizeof snan / sizeof snan[0]; i++)
        bad += check_to_bf16(f32_of(snan[i]), "signalling NaN");
    if (tutti__f32_to_bf16(INFINITY) != 0x7f80 || tutti__f32_to_bf16(-INFINITY) != 0xff80)
        bad += fprintf(stderr, "bf16 of +-Inf: 0x%04x 0x%04x\n", tutti__f32_to_bf16(INFINITY),
                       tutti__f32_to_bf16(-INFINITY)) > 0;
    /* every float subnormal's neighbourhood and a few million random floats */
    for (uint32_t m = 0; m < 0x800000u && bad < 20; m += 97)
        bad += check_to_bf16(f32_of(m), "subnormal") + check_to_bf16(f32_of(m | 0x80000000u), "subnormal");
    for (int i = 0; i < 2000000 && bad < 20; i++)
        bad += check_to_bf16(f32_of((uint32_t)rnd()), "random");
    ck_assert_msg(bad == 0, "bf16 conversions: %d failures (see stderr)", bad);
}
END_TEST

/* ---- fp16 ---------------------------------------------------------------------------------- */

static int check_to_f16(float f, const char *why)
{
    uint16_t got = tutti__f32_to_f16(f);
    if (isnan(f)) {
        uint16_t sign = (uint16_t)((bits_f32(f) >> 16) & 0x8000u);
        if (!f16_nan(got) || !(got & 0x200u) || (got & 0x8000u) != sign) {
            fprintf(stderr, "tutti__f32_to_f16(NaN 0x%08x) = 0x%04x: not a quiet NaN of the same "
                            "sign (%s)\n", bits_f32(f), got, why);
            return 1;
        }
        return 0;
    }
    uint16_t want = th_to_f16((double)f);
    if (got != want) {
        fprintf(stderr, "tutti__f32_to_f16(0x%08x = %a) = 0x%04x, expected 0x%04x (%s)\n",
                bits_f32(f), (double)f, got, want, why);
        return 1;
    }
    return 0;
}

START_TEST(test_f16)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536 && bad < 20; h++) {
        float f = tutti__f16_to_f32((uint16_t)h);
        double want = th_from_f16((uint16_t)h);
        if (f16_nan((uint16_t)h)) {
            if (!isnan(f) || !(bits_f32(f) & 0x00400000u) ||
                (bits_f32(f) >> 31) != (h >> 15))
                bad += fprintf(stderr, "fp16 NaN 0x%04x widened to 0x%08x: not a quiet NaN of the "
                                       "same sign\n", h, bits_f32(f)) > 0;
            uint16_t back = tutti__f32_to_f16(f);
            if (!f16_nan(back) || !(back & 0x200u) || (back & 0x8000u) != (h & 0x8000u))
                bad += fprintf(stderr, "fp16 NaN 0x%04x came back as 0x%04x\n", h, back) > 0;
            continue;
        }
        if ((double)f != want || !signbit(f) != !signbit(want)) {
            bad += fprintf(stderr, "fp16 0x%04x widened to %a, expected %a\n", h, (double)f, want) > 0;
            continue;
        }
        if (tutti__f32_to_f16(f) != h)
            bad += fprintf(stderr, "fp16 0x%04x does not round-trip through float: 0x%04x\n", h,
                           tutti__f32_to_f16(f)) > 0;
        /* the tie with the next value up in magnitude, and either side of it */
        if ((h & 0x7c00u) != 0x7c00u) {
            double next = (h & 0x7fffu) == 0x7bffu ? 65536.0 * (h & 0x8000u ? -1 : 1)
                                                   : th_from_f16((uint16_t)(h + 1));
            float mid = (float)((want + next) / 2); /* exact: fp16 ties need 12 bits */
            uint16_t even = (h & 1u) ? (uint16_t)(h + 1) : (uint16_t)h;
            uint16_t tie = tutti__f32_to_f16(mid);
            if (tie != even)
                bad += fprintf(stderr, "fp16 tie %a -> 0x%04x, expected 0x%04x (even)\n",
                               (double)mid, tie, even) > 0;
            bad += check_to_f16(mid, "tie");
            bad += check_to_f16(nextafterf(mid, 0.0f), "just below the tie");
            bad += check_to_f16(nextafterf(mid, mid * 2), "just above the tie");
        }
    }
    static const uint32_t snan[] = {0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7f802000u};
    for (size_t i = 0; i < sizeof snan / sizeof snan[0]; i++)
        bad += check_to_f16(f32_of(snan[i]), "signalling NaN");
    static const float spot[] = {65504.0f, 65519.99f, 65520.0f, 1e6f, -1e6f, 3.4e38f,
                                 5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, 8.940697e-08f,
                                 6.1035156e-05f, 6.1035152e-05f, 1e-45f, -0.0f, 0.0f};
    for (size_t i = 0; i < sizeof spot / sizeof spot[0]; i++)
        bad += check_to_f16(spot[i], "edge");
    if (tutti__f32_to_f16(INFINITY) != 0x7c00 || tutti__f32_to_f16(-INFINITY) != 0xfc00)
        bad += fprintf(stderr, "fp16 of +-Inf: 0x%04x 0x%04x\n", tutti__f32_to_f16(INFINITY),
                       tutti__f32_to_f16(-INFINITY)) > 0;
    /* floats around the fp16 range, and a few million random ones */
    for (int i = 0; i < 2000000 && bad < 20; i++) {
        uint32_t u = (uint32_t)rnd();
        uint32_t e = 127u - 30u + (u >> 3) % 50u; /* 2^-30 .. 2^19 */
        bad += check_to_f16(f32_of((u & 0x807fffffu) | (e << 23)), "near the range");
        bad += check_to_f16(f32_of((uint32_t)rnd()), "random");
    }
    ck_assert_msg(bad == 0, "fp16 conversions: %d failures (see stderr)", bad);
}
END_TEST

/* ---- SIMD variants against the scalar kernel, bit for bit ------------------------------------ */

/* A value that makes the rounding hard: tiny ones (products and averages go denormal), and
 * pairs whose fp32 sum is an exact bf16 / fp16 tie (src0 = the tie cut below the rounding
 * point, src1 = the power of two that completes it). */
static void inject_hard(unsigned char *const *sp, int nsrc, tutti_dtype_t dt, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rnd();
        unsigned kind = (unsigned)(r % 16);
        if (dt == TUTTI_BFLOAT16 || dt == TUTTI_FLOAT16) {
            bool bf = dt == TUTTI_BFLOAT16;
            if (kind < 3 && nsrc >= 2) { /* exact tie of src0 + src1 */
                uint32_t e = 127u - 4u + (uint32_t)((r >> 8) % 9u), s = (uint32_t)(r >> 20) & 1u;
                uint32_t mbits = (uint32_t)(r >> 24);
                uint16_t a, b;
                if (bf) {
                    a = (uint16_t)((s << 15) | (e << 7) | (mbits & 0x7fu));
                    b = (uint16_t)((s << 15) | ((e - 8u) << 7));
                } else {
                    uint32_t he = e - 112u; /* fp16 exponent field */
                    a = (uint16_t)((s << 15) | (he << 10) | (mbits & 0x3ffu));
                    b = (uint16_t)((s << 15) | ((he - 11u) << 10));
                }
                memcpy(sp[0] + i * 2, &a, 2);
                memcpy(sp[1] + i * 2, &b, 2);
            } else if (kind < 6) { /* tiny: exponent near the bottom of the range */
                for (int k = 0; k < nsrc; k++) {
                    uint64_t q = rnd();
                    uint16_t h = bf ? (uint16_t)((q & 0x807fu) | ((uint16_t)(1u + q % 70u) << 7))
                                    : (uint16_t)((q & 0x83ffu) |
                                                 ((uint16_t)((q >> 16) % 8u) << 10));
                    memcpy(sp[k] + i * 2, &h, 2);
                }
            }
        } else if (dt == TUTTI_FLOAT32 && kind < 3) {
            for (int k = 0; k < nsrc; k++) {
                uint64_t q = rnd();
                uint32_t u = (uint32_t)(q & 0x80ffffffu) | ((uint32_t)(q >> 32) % 40u) << 23;
                memcpy(sp[k] + i * 4, &u, 4);
            }
        }
    }
}

/* A NaN with a payload of its own (some signalling), so that which NaN wins shows. */
static void inject_nans(unsigned char *const *sp, int nsrc, tutti_dtype_t dt, size_t n)
{
    size_t es = tutti_dtype_size(dt);
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < nsrc; k++) {
            uint64_t r = rnd();
            if (r % 10 != 0)
                continue;
            uint64_t pay = (r >> 8) | 1u, sign = (r >> 4) & 1u;
            switch (dt) {
            case TUTTI_FLOAT32: {
                uint32_t u = (uint32_t)(sign << 31) | 0x7f800000u | (uint32_t)(pay & 0x7fffffu);
                memcpy(sp[k] + i * es, &u, 4);
                break;
            }
            case TUTTI_FLOAT64: {
                uint64_t u = sign << 63 | 0x7ff0000000000000ull | (pay & 0xfffffffffffffull);
                memcpy(sp[k] + i * es, &u, 8);
                break;
            }
            case TUTTI_BFLOAT16: {
                uint16_t m = (pay & 0x7fu) ? (uint16_t)(pay & 0x7fu) : 1u;
                uint16_t h = (uint16_t)(sign << 15 | 0x7f80u | m);
                memcpy(sp[k] + i * es, &h, 2);
                break;
            }
            case TUTTI_FLOAT16: {
                uint16_t m = (pay & 0x3ffu) ? (uint16_t)(pay & 0x3ffu) : 1u;
                uint16_t h = (uint16_t)(sign << 15 | 0x7c00u | m);
                memcpy(sp[k] + i * es, &h, 2);
                break;
            }
            default: break;
            }
        }
}

/* variant_case runs variant v and the scalar kernel on the same inputs (odd byte offsets,
 * dst separate or one of the sources) and compares every byte; returns the failures. */
static int variant_case(const tutti__kvariant_t *v, tutti_dtype_t dt, tutti_op_t op, int nsrc,
                        size_t n, int avg_div)
{
    size_t es = tutti_dtype_size(dt), bytes = n * es;
    static unsigned char mem[17][MAXN * 8 + 2 * PAD + 8], orig[16][MAXN * 8],
        want[MAXN * 8 + 2 * PAD];
    unsigned char *sp[16];
    const void *srcs[16], *osrcs[16];
    for (int k = 0; k < nsrc; k++) {
        sp[k] = mem[k] + PAD + rnd() % 8;
        fill(sp[k], dt, n);
    }
    inject_hard(sp, nsrc, dt, n);
    if (rnd() % 2)
        inject_nans(sp, nsrc, dt, n);
    for (int k = 0; k < nsrc; k++) {
        memcpy(orig[k], sp[k], bytes);
        srcs[k] = sp[k];
        osrcs[k] = orig[k];
    }
    tutti__reduce_scalar(want, osrcs, nsrc, n, dt, op, avg_div);
    int alias = (int)(rnd() % (unsigned)(nsrc + 1)) - 1;
    unsigned char *dmem = mem[16], *dst;
    if (alias < 0) {
        memset(dmem, 0x5a, sizeof mem[16]);
        dst = dmem + PAD + rnd() % 8;
    } else {
        dst = sp[alias];
    }
    v->fn(dst, srcs, nsrc, n, dt, op, avg_div);
    int bad = 0;
    for (size_t i = 0; i < n && bad < 3; i++) {
        if (memcmp(want + i * es, dst + i * es, es) == 0)
            continue;
        char hw[20], hg[20], hs[20], srcl[400] = "";
        for (int k = 0; k < nsrc; k++) {
            strncat(srcl, th_hex(hs, orig[k] + i * es, es), sizeof srcl - strlen(srcl) - 1);
            strncat(srcl, " ", sizeof srcl - strlen(srcl) - 1);
        }
        fprintf(stderr, "variant %s dtype=%s op=%s nsrc=%d count=%zu avg_div=%d dst=%d: index %zu: "
                        "scalar %s, %s %s (inputs %s)\n", v->name, tutti_dtype_name(dt),
                tutti_op_name(op), nsrc, n, avg_div, alias, i, th_hex(hw, want + i * es, es),
                v->name, th_hex(hg, dst + i * es, es), srcl);
        bad++;
    }
    for (int k = 0; k < nsrc; k++)
        if (sp[k] != dst && memcmp(sp[k], orig[k], bytes) != 0)
            bad += fprintf(stderr, "variant %s: source %d was written\n", v->name, k) > 0;
    if (alias < 0) {
        for (unsigned char *q = dmem; q < dst; q++)
            if (*q != 0x5a) {
                bad += fprintf(stderr, "variant %s %s n=%zu: wrote before dst\n", v->name,
                               tutti_dtype_name(dt), n) > 0;
                break;
            }
        for (unsigned char *q = dst + bytes; q < dmem + sizeof mem[16]; q++)
            if (*q != 0x5a) {
                bad += fprintf(stderr, "variant %s %s n=%zu: wrote past dst\n", v->name,
                               tutti_dtype_name(dt), n) > 0;
                break;
            }
    }
    return bad;
}

START_TEST(test_variants)
{
    tutti_dtype_t dt = (tutti_dtype_t)_i;
    const tutti__kvariant_t *vs = tutti__kernel_variants();
    int fails = 0, tested = 0;
    for (int vi = 1; vi < TUTTI__KV_COUNT; vi++) {
        if (!vs[vi].available) {
            fprintf(stderr, "# variant %s not available here: skipped\n", vs[vi].name);
            continue;
        }
        tested++;
        for (int op = 0; op < TUTTI_OP_COUNT && fails < 10; op++) {
            if (!op_ok((tutti_op_t)op, dt))
                continue;
            for (int nsrc = 1; nsrc <= 16 && fails < 10; nsrc++) {
                bool all = nsrc <= 3 || nsrc == 8 || nsrc == 16;
                for (size_t n = 0; n <= MAXN && fails < 10; n += all ? 1 : 1 + rnd() % 23) {
                    int avg_div = op == TUTTI_AVG ? (int)(rnd() % 8) : 0;
                    fails += variant_case(&vs[vi], dt, (tutti_op_t)op, nsrc, n, avg_div);
                }
            }
        }
    }
    ck_assert_msg(fails == 0, "%s: SIMD variants differ from the scalar kernel: %d (see stderr)",
                  tutti_dtype_name(dt), fails);
    (void)tested;
}
END_TEST

/* The NaN rule: the first NaN in source order wins, made quiet, in every variant. */
START_TEST(test_nan_rule)
{
    const tutti__kvariant_t *vs = tutti__kernel_variants();
    static const tutti_op_t ops[] = {TUTTI_SUM, TUTTI_PROD, TUTTI_MIN, TUTTI_MAX, TUTTI_AVG};
    int bad = 0;
    for (int vi = 0; vi < TUTTI__KV_COUNT; vi++) {
        if (!vs[vi].available)
            continue;
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
            /* fp32: 1.0, sNaN(0x7f800123), -qNaN(0xffc00456), 2.0 -> quiet 0x7fc00123 */
            uint32_t a[40], b[40], c[40], d[40], out[40];
            for (int i = 0; i < 40; i++) {
                a[i] = 0x3f800000u;
                b[i] = i % 2 ? 0x7f800123u : 0x40000000u;
                c[i] = 0xffc00456u;
                d[i] = 0x40000000u;
            }
            const void *s4[4] = {a, b, c, d};
            vs[vi].fn(out, s4, 4, 40, TUTTI_FLOAT32, ops[o], 3);
            for (int i = 0; i < 40; i++) {
                uint32_t want = i % 2 ? 0x7fc00123u : 0xffc00456u;
                if (out[i] != want && bad < 10)
                    bad += fprintf(stderr, "%s fp32 %s: element %d is 0x%08x, want 0x%08x\n",
                                   vs[vi].name, tutti_op_name(ops[o]), i, out[i], want) > 0;
            }
            /* bf16: sNaN 0x7f81 then qNaN 0xffc5 -> 0x7fc1 */
            uint16_t ha[40], hb[40], hc[40], ho[40];
            for (int i = 0; i < 40; i++) {
                ha[i] = 0x3f80;
                hb[i] = 0x7f81;
                hc[i] = 0xffc5;
            }
            const void *h3[3] = {ha, hb, hc};
            vs[vi].fn(ho, h3, 3, 40, TUTTI_BFLOAT16, ops[o], 3);
            for (int i = 0; i < 40; i++)
                if (ho[i] != 0x7fc1 && bad < 10)
                    bad += fprintf(stderr, "%s bf16 %s: element %d is 0x%04x, want 0x7fc1\n",
                                   vs[vi].name, tutti_op_name(ops[o]), i, ho[i]) > 0;
        }
    }
    ck_assert_msg(bad == 0, "NaN rule broken (see stderr)");
}
END_TEST

/* CCL_BF16 / CCL_FP16 force a variant; a missing or unknown one is an error, never SIGILL.
 * Each case runs in a child of its own, since the choice is made once per process. */
static int env_child(const char *bf, const char *fp, tutti_status_t want_st, const char *want_bf,
                     const char *want_fp)
{
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        if (bf)
            setenv("CCL_BF16", bf, 1);
        if (fp)
            setenv("CCL_FP16", fp, 1);
        tutti_status_t st = tutti__kernels_reinit();
        int rc = 0;
        if (st != want_st) {
            fprintf(stderr, "CCL_BF16=%s CCL_FP16=%s: init gave %d, want %d (%s)\n", bf ? bf : "-",
                    fp ? fp : "-", (int)st, (int)want_st, tutti_last_error());
            rc = 1;
        }
        if (st != TUTTI_OK && (strstr(tutti_last_error(), bf ? "CCL_BF16" : "CCL_FP16") == NULL)) {
            fprintf(stderr, "error text does not name the variable: %s\n", tutti_last_error());
            rc = 1;
        }
        if (want_bf && strcmp(tutti__kernel_variant(TUTTI_BFLOAT16), want_bf) != 0) {
            fprintf(stderr, "bf16 variant %s, want %s\n", tutti__kernel_variant(TUTTI_BFLOAT16),
                    want_bf);
            rc = 1;
        }
        if (want_fp && strcmp(tutti__kernel_variant(TUTTI_FLOAT16), want_fp) != 0) {
            fprintf(stderr, "fp16 variant %s, want %s\n", tutti__kernel_variant(TUTTI_FLOAT16),
                    want_fp);
            rc = 1;
        }
        /* whatever happened, reducing still works (with the automatic choice after an error) */
        uint16_t a[33], b[33], o[33];
        for (int i = 0; i < 33; i++)
            a[i] = b[i] = 0x3f80; /* 1.0 in bf16 */
        const void *s[2] = {a, b};
        tutti__reduce(o, s, 2, 33, TUTTI_BFLOAT16, TUTTI_SUM, 0);
        for (int i = 0; i < 33; i++)
            if (o[i] != 0x4000)
                rc = 1;
        if (st != TUTTI_OK)
            fprintf(stderr, "# as expected: %s\n", tutti_last_error());
        _exit(rc);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "child for CCL_BF16=%s CCL_FP16=%s failed (status 0x%x)\n", bf ? bf : "-",
                fp ? fp : "-", status);
        return 1;
    }
    return 0;
}

START_TEST(test_env)
{
    const tutti__kvariant_t *vs = tutti__kernel_variants();
    int bad = 0;
    bad += env_child("scalar", "scalar", TUTTI_OK, "scalar", "scalar");
    bad += env_child(NULL, "nonsense", TUTTI_ERR_INVALID_ARG, NULL, NULL);
    bad += env_child("avx512", NULL, TUTTI_ERR_INVALID_ARG, NULL, NULL);
    /* AVX512_FP16: chosen where the CPU has it, refused elsewhere */
    bool fp16ok = vs[TUTTI__KV_AVX512FP16].available;
    bad += env_child(NULL, "avx512fp16", fp16ok ? TUTTI_OK : TUTTI_ERR_INVALID_ARG, NULL,
                     fp16ok ? "avx512fp16" : NULL);
    static const struct { const char *bf, *fp; int kv; const char *name; } cases[] = {
        {"avx2", "f16c", TUTTI__KV_AVX2, "f16c"},
        {"avx512f", "avx512f", TUTTI__KV_AVX512F, "avx512f"},
        {"avx512bf", NULL, TUTTI__KV_AVX512BF, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bool ok = vs[cases[i].kv].available;
        bad += env_child(cases[i].bf, NULL, ok ? TUTTI_OK : TUTTI_ERR_INVALID_ARG,
                         ok ? vs[cases[i].kv].name : NULL, NULL);
        if (cases[i].fp)
            bad += env_child(NULL, cases[i].fp, ok ? TUTTI_OK : TUTTI_ERR_INVALID_ARG, NULL,
                             ok ? cases[i].name : NULL);
    }
    ck_assert_msg(bad == 0, "kernel overrides: %d failures (see stderr)", bad);
}
END_TEST

static Suite *kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("reduce");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_reduce, 0, TUTTI_DTYPE_COUNT);
    suite_add_tcase(s, tc);
    tc = tcase_create("variants");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_variants, 0, TUTTI_DTYPE_COUNT);
    tcase_add_test(tc, test_nan_rule);
    tcase_add_test(tc, test_env);
    suite_add_tcase(s, tc);
    tc = tcase_create("convert");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_reference_converters);
    tcase_add_test(tc, test_bf16);
    tcase_add_test(tc, test_f16);
    suite_add_tcase(s, tc);
    return s;
}

TH_CHECK_MAIN(kernels_suite)
