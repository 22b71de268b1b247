/* reduce_scalar.c: portable reduction kernels for every dtype and op, written in blocks so
 * that the compiler can vectorize them; the reference the SIMD variants must match bit for bit.
 *
 * Which NaN comes out is fixed here, not left to the compiler: for + and * x86 returns the
 * first operand's NaN, but the compiler may swap the operands of a commutative operation, so
 * a plain `acc + v` could pick either of two NaNs. Each block is therefore computed the fast
 * way and every lane that came out NaN is recomputed by tutti__kern_nan_f32/_f64, which walks
 * the sources in order and returns the first NaN it meets, made quiet. The SIMD variants do
 * the same, so all of them agree on NaN payloads too. */
#include <math.h>

#include "kernels.h"

#define BLOCK 256

/* Callers may pass buffers at any byte offset (a tensor slice, a packed message), so elements
 * are read and written through types that promise no alignment. */
typedef int8_t i8_u __attribute__((aligned(1), may_alias));
typedef uint8_t u8_u __attribute__((aligned(1), may_alias));
typedef int32_t i32_u __attribute__((aligned(1), may_alias));
typedef int64_t i64_u __attribute__((aligned(1), may_alias));
typedef uint16_t u16_u __attribute__((aligned(1), may_alias));
typedef float f32_u __attribute__((aligned(1), may_alias));
typedef double f64_u __attribute__((aligned(1), may_alias));

/* Integer arithmetic goes through the unsigned type so that overflow wraps instead of being
 * undefined. */
#define ISUM(a, b, U) ((__typeof__(a))((U)(a) + (U)(b)))
#define IPROD(a, b, U) ((__typeof__(a))((U)(a) * (U)(b)))
#define MINV(a, b) ((b) < (a) ? (b) : (a))
#define MAXV(a, b) ((b) > (a) ? (b) : (a))
/* Floating min/max propagate NaN, whichever side it is on. */
#define FMINV(a, b) (isnan(a) ? (a) : isnan(b) ? (b) : MINV(a, b))
#define FMAXV(a, b) (isnan(a) ? (a) : isnan(b) ? (b) : MAXV(a, b))

#define INT_KERNEL(NAME, T, TU, U)                                                                 \
    static void NAME(void *dst, const void *const *srcs, int nsrc, size_t n, tutti_op_t op)    \
    {                                                                                          \
        T acc[BLOCK];                                                                          \
        for (size_t b = 0; b < n; b += BLOCK) {                                                \
            size_t m = n - b < BLOCK ? n - b : BLOCK;                                          \
            const TU *s0 = (const TU *)srcs[0] + b;                                              \
            for (size_t i = 0; i < m; i++)                                                     \
                acc[i] = s0[i];                                                                \
            for (int k = 1; k < nsrc; k++) {                                                   \
                const TU *s = (const TU *)srcs[k] + b;                                           \
                switch (op) {                                                                  \
                case TUTTI_SUM: for (size_t i = 0; i < m; i++) acc[i] = ISUM(acc[i], s[i], U); break; \
                case TUTTI_PROD: for (size_t i = 0; i < m; i++) acc[i] = IPROD(acc[i], s[i], U); break; \
                case TUTTI_MIN: for (size_t i = 0; i < m; i++) acc[i] = MINV(acc[i], s[i]); break; \
                case TUTTI_MAX: for (size_t i = 0; i < m; i++) acc[i] = MAXV(acc[i], s[i]); break; \
                case TUTTI_BAND: for (size_t i = 0; i < m; i++) acc[i] &= s[i]; break;         \
                case TUTTI_BOR: for (size_t i = 0; i < m; i++) acc[i] |= s[i]; break;          \
                case TUTTI_BXOR: for (size_t i = 0; i < m; i++) acc[i] ^= s[i]; break;         \
                default: break;                                                                \
                }                                                                              \
            }                                                                                  \
            memcpy((char *)dst + b * sizeof(T), acc, m * sizeof(T));                                               \
        }                                                                                      \
    }

INT_KERNEL(reduce_i8, int8_t, i8_u, uint8_t)
INT_KERNEL(reduce_u8, uint8_t, u8_u, uint8_t)
INT_KERNEL(reduce_i32, int32_t, i32_u, uint32_t)
INT_KERNEL(reduce_i64, int64_t, i64_u, uint64_t)

/* Floating types: ACC is the accumulation type, LOAD/STORE convert to and from it, so bf16
 * and fp16 accumulate in fp32 and round once at the store. */
#define FLOAT_KERNEL(NAME, T, TU, ACC, LOAD, STORE, NANFIX)                                        \
    static void NAME(TU *dst, const void *const *srcs, int nsrc, size_t n, tutti_op_t op,      \
                     int avg_div)                                                              \
    {                                                                                          \
        ACC acc[BLOCK];                                                                        \
        for (size_t b = 0; b < n; b += BLOCK) {                                                \
            size_t m = n - b < BLOCK ? n - b : BLOCK;                                          \
            const TU *s0 = (const TU *)srcs[0] + b;                                              \
            for (size_t i = 0; i < m; i++)                                                     \
                acc[i] = LOAD(s0[i]);                                                          \
            for (int k = 1; k < nsrc; k++) {                                                   \
                const TU *s = (const TU *)srcs[k] + b;                                           \
                switch (op) {                                                                  \
                case TUTTI_SUM:                                                                \
                case TUTTI_AVG: for (size_t i = 0; i < m; i++) acc[i] += LOAD(s[i]); break;    \
                case TUTTI_PROD: for (size_t i = 0; i < m; i++) acc[i] *= LOAD(s[i]); break;   \
                case TUTTI_MIN: for (size_t i = 0; i < m; i++) acc[i] = FMINV(acc[i], LOAD(s[i])); break; \
                case TUTTI_MAX: for (size_t i = 0; i < m; i++) acc[i] = FMAXV(acc[i], LOAD(s[i])); break; \
                default: break;                                                                \
                }                                                                              \
            }                                                                                  \
            if (op == TUTTI_AVG && avg_div > 0) {                                              \
                ACC d = (ACC)avg_div;                                                          \
                for (size_t i = 0; i < m; i++)                                                 \
                    acc[i] /= d;                                                               \
            }                                                                                  \
            for (size_t i = 0; i < m; i++)                                                     \
                if (isnan(acc[i]))                                                             \
                    acc[i] = NANFIX;                                                           \
            for (size_t i = 0; i < m; i++)                                                     \
                dst[b + i] = STORE(acc[i]);                                                    \
        }                                                                                      \
    }

#define ID(x) (x)
#define NAN32(DT) tutti__kern_nan_f32(srcs, nsrc, b + i, DT, op, avg_div)
#define NAN64 tutti__kern_nan_f64(srcs, nsrc, b + i, op, avg_div)
FLOAT_KERNEL(reduce_f32, float, f32_u, float, ID, ID, NAN32(TUTTI_FLOAT32))
FLOAT_KERNEL(reduce_f64, double, f64_u, double, ID, ID, NAN64)
FLOAT_KERNEL(reduce_bf16, uint16_t, u16_u, float, tutti__bf16_to_f32, tutti__f32_to_bf16,
             NAN32(TUTTI_BFLOAT16))
FLOAT_KERNEL(reduce_f16, uint16_t, u16_u, float, tutti__f16_to_f32, tutti__f32_to_f16,
             NAN32(TUTTI_FLOAT16))

static float load32(const void *p, size_t i, tutti_dtype_t dt)
{
    switch (dt) {
    case TUTTI_BFLOAT16: return tutti__bf16_to_f32(((const u16_u *)p)[i]);
    case TUTTI_FLOAT16: return tutti__f16_to_f32(((const u16_u *)p)[i]);
    default: return ((const f32_u *)p)[i];
    }
}

static float quiet32(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u |= 0x00400000u;
    memcpy(&x, &u, 4);
    return x;
}

static double quiet64(double x)
{
    uint64_t u;
    memcpy(&u, &x, 8);
    u |= 0x0008000000000000ull;
    memcpy(&x, &u, 8);
    return x;
}

/* The canonical element: the first NaN met, in source order, decides; a NaN that an
 * operation creates is met at that step. Neither operand of any operation here is a NaN, so
 * the compiler's operand order cannot matter. */
#define CANON(ACC, LOADK, QUIET)                                                               \
    do {                                                                                       \
        ACC acc = LOADK(0);                                                                    \
        if (isnan(acc))                                                                        \
            return QUIET(acc);                                                                 \
        for (int k = 1; k < nsrc; k++) {                                                       \
            ACC v = LOADK(k);                                                                  \
            if (isnan(v))                                                                      \
                return QUIET(v);                                                               \
            switch (op) {                                                                      \
            case TUTTI_SUM:                                                                    \
            case TUTTI_AVG: acc = acc + v; break;                                              \
            case TUTTI_PROD: acc = acc * v; break;                                             \
            case TUTTI_MIN: acc = MINV(acc, v); break;                                         \
            case TUTTI_MAX: acc = MAXV(acc, v); break;                                         \
            default: break;                                                                    \
            }                                                                                  \
            if (isnan(acc))                                                                    \
                return QUIET(acc);                                                             \
        }                                                                                      \
        if (op == TUTTI_AVG && avg_div > 0)                                                    \
            acc /= (ACC)avg_div;                                                               \
        return acc;                                                                            \
    } while (0)

float tutti__kern_nan_f32(const void *const *srcs, int nsrc, size_t i, tutti_dtype_t dt,
                          tutti_op_t op, int avg_div)
{
#define LOAD32K(k) load32(srcs[k], i, dt)
    CANON(float, LOAD32K, quiet32);
}

double tutti__kern_nan_f64(const void *const *srcs, int nsrc, size_t i, tutti_op_t op, int avg_div)
{
#define LOAD64K(k) (((const f64_u *)srcs[k])[i])
    CANON(double, LOAD64K, quiet64);
}

void tutti__reduce_scalar(void *dst, const void *const *srcs, int nsrc, size_t count,
                          tutti_dtype_t dt, tutti_op_t op, int avg_div)
{
    if (count == 0 || nsrc <= 0)
        return;
    switch (dt) {
    case TUTTI_INT8: reduce_i8(dst, srcs, nsrc, count, op); break;
    case TUTTI_UINT8: reduce_u8(dst, srcs, nsrc, count, op); break;
    case TUTTI_INT32: reduce_i32(dst, srcs, nsrc, count, op); break;
    case TUTTI_INT64: reduce_i64(dst, srcs, nsrc, count, op); break;
    case TUTTI_FLOAT16: reduce_f16(dst, srcs, nsrc, count, op, avg_div); break;
    case TUTTI_BFLOAT16: reduce_bf16(dst, srcs, nsrc, count, op, avg_div); break;
    case TUTTI_FLOAT32: reduce_f32(dst, srcs, nsrc, count, op, avg_div); break;
    case TUTTI_FLOAT64: reduce_f64(dst, srcs, nsrc, count, op, avg_div); break;
    default: break;
    }
}
