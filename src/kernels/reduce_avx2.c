/* reduce_avx2.c: AVX2 + F16C reduction kernels for fp32, fp64, bf16 (integer rounding, exact)
 * and fp16 (VCVTPH2PS / VCVTPS2PH, round to nearest even), 8 (fp64: 4) lanes at a time; a tail
 * shorter than a vector goes through a small zeroed buffer. Integers stay scalar. Built with
 * -mavx2 -mf16c, run only where detected. */
#include <immintrin.h>

#include "kernels.h"

#define AI static inline __attribute__((always_inline))

AI __m128i bf16_round(__m256 acc)
{
    __m256i u = _mm256_castps_si256(acc);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                                     _mm256_and_si256(hi, _mm256_set1_epi32(1))));
    r = _mm256_srli_epi32(r, 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(acc, acc, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    /* every lane is <= 0xffff, so unsigned saturation packs exactly */
    __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    return _mm256_castsi256_si128(p);
}

/* ld32 loads 8 elements of dt at p as fp32; a tail (rem < 8) is copied to a zeroed buffer. */
AI __m256 ld32(tutti_dtype_t dt, const char *p, size_t rem)
{
    size_t es = dt == TUTTI_FLOAT32 ? 4 : 2;
    unsigned char t[32] = {0};
    if (rem < 8) {
        memcpy(t, p, rem * es);
        p = (const char *)t;
    }
    if (dt == TUTTI_FLOAT32)
        return _mm256_loadu_ps((const float *)(const void *)p);
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    if (dt == TUTTI_BFLOAT16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

AI void st32(tutti_dtype_t dt, char *p, __m256 acc, size_t rem, bool nt)
{
    size_t es = dt == TUTTI_FLOAT32 ? 4 : 2;
    unsigned char t[32];
    char *q = rem < 8 ? (char *)t : p;
    if (dt == TUTTI_FLOAT32) {
        if (nt && rem >= 8)
            _mm256_stream_ps((float *)(void *)q, acc);
        else
            _mm256_storeu_ps((float *)(void *)q, acc);
    } else {
        __m128i h = dt == TUTTI_BFLOAT16
                        ? bf16_round(acc)
                        : _mm256_cvtps_ph(acc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (nt && rem >= 8)
            _mm_stream_si128((__m128i *)(void *)q, h);
        else
            _mm_storeu_si128((__m128i *)(void *)q, h);
    }
    if (rem < 8)
        memcpy(p, t, rem * es);
}

AI __m256 combine32(tutti_op_t op, __m256 acc, __m256 v)
{
    switch (op) {
    case TUTTI_PROD: return _mm256_mul_ps(acc, v);
    case TUTTI_MIN: /* min_ps(v, acc) = v < acc ? v : acc; a NaN v is kept for the NaN pass */
        return _mm256_blendv_ps(_mm256_min_ps(v, acc), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    case TUTTI_MAX:
        return _mm256_blendv_ps(_mm256_max_ps(v, acc), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    default: return _mm256_add_ps(acc, v);
    }
}

AI __m256d combine64(tutti_op_t op, __m256d acc, __m256d v)
{
    switch (op) {
    case TUTTI_PROD: return _mm256_mul_pd(acc, v);
    case TUTTI_MIN:
        return _mm256_blendv_pd(_mm256_min_pd(v, acc), v, _mm256_cmp_pd(v, v, _CMP_UNORD_Q));
    case TUTTI_MAX:
        return _mm256_blendv_pd(_mm256_max_pd(v, acc), v, _mm256_cmp_pd(v, v, _CMP_UNORD_Q));
    default: return _mm256_add_pd(acc, v);
    }
}

static __attribute__((noinline)) __m256 fix32(__m256 acc, unsigned nan, const void *const *srcs,
                                              int nsrc, size_t i, tutti_dtype_t dt, tutti_op_t op,
                                              int avg_div)
{
    float t[8];
    _mm256_storeu_ps(t, acc);
    for (int j = 0; j < 8; j++)
        if (nan & (1u << j))
            t[j] = tutti__kern_nan_f32(srcs, nsrc, i + (size_t)j, dt, op, avg_div);
    return _mm256_loadu_ps(t);
}

static __attribute__((noinline)) __m256d fix64(__m256d acc, unsigned nan, const void *const *srcs,
                                               int nsrc, size_t i, tutti_op_t op, int avg_div)
{
    double t[4];
    _mm256_storeu_pd(t, acc);
    for (int j = 0; j < 4; j++)
        if (nan & (1u << j))
            t[j] = tutti__kern_nan_f64(srcs, nsrc, i + (size_t)j, op, avg_div);
    return _mm256_loadu_pd(t);
}

AI void run32(tutti_dtype_t dt, tutti_op_t op, void *dstv, const void *const *srcs, int nsrc,
              size_t n, int avg_div)
{
    char *dst = dstv;
    size_t es = dt == TUTTI_FLOAT32 ? 4 : 2;
    bool nt = n * es >= TUTTI__KERN_NT_BYTES && (uintptr_t)dst % (8 * es) == 0;
    for (size_t i = 0; i < n; i += 8) {
        size_t rem = n - i < 8 ? n - i : 8, off = i * es;
        __m256 acc = ld32(dt, (const char *)srcs[0] + off, rem);
        for (int k = 1; k < nsrc; k++)
            acc = combine32(op, acc, ld32(dt, (const char *)srcs[k] + off, rem));
        if (op == TUTTI_AVG && avg_div > 0)
            acc = _mm256_div_ps(acc, _mm256_set1_ps((float)avg_div));
        unsigned nan = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(acc, acc, _CMP_UNORD_Q)) &
                       ((1u << rem) - 1);
        if (__builtin_expect(nan != 0, 0))
            acc = fix32(acc, nan, srcs, nsrc, i, dt, op, avg_div);
        st32(dt, dst + off, acc, rem, nt);
    }
    if (nt)
        _mm_sfence();
}

AI __m256d ld64(const char *p, size_t rem)
{
    double t[4] = {0, 0, 0, 0};
    if (rem < 4) {
        memcpy(t, p, rem * 8);
        return _mm256_loadu_pd(t);
    }
    return _mm256_loadu_pd((const double *)(const void *)p);
}

AI void run64(tutti_op_t op, void *dstv, const void *const *srcs, int nsrc, size_t n, int avg_div)
{
    char *dst = dstv;
    bool nt = n * 8 >= TUTTI__KERN_NT_BYTES && (uintptr_t)dst % 32 == 0;
    for (size_t i = 0; i < n; i += 4) {
        size_t rem = n - i < 4 ? n - i : 4;
        __m256d acc = ld64((const char *)srcs[0] + i * 8, rem);
        for (int k = 1; k < nsrc; k++)
            acc = combine64(op, acc, ld64((const char *)srcs[k] + i * 8, rem));
        if (op == TUTTI_AVG && avg_div > 0)
            acc = _mm256_div_pd(acc, _mm256_set1_pd((double)avg_div));
        unsigned nan = (unsigned)_mm256_movemask_pd(_mm256_cmp_pd(acc, acc, _CMP_UNORD_Q)) &
                       ((1u << rem) - 1);
        if (__builtin_expect(nan != 0, 0))
            acc = fix64(acc, nan, srcs, nsrc, i, op, avg_div);
        if (rem < 4) {
            double t[4];
            _mm256_storeu_pd(t, acc);
            memcpy(dst + i * 8, t, rem * 8);
        } else if (nt) {
            _mm256_stream_pd((double *)(void *)(dst + i * 8), acc);
        } else {
            _mm256_storeu_pd((double *)(void *)(dst + i * 8), acc);
        }
    }
    if (nt)
        _mm_sfence();
}

#define DISPATCH_OPS(CALL)                                                                     \
    switch (op) {                                                                              \
    case TUTTI_SUM: CALL(TUTTI_SUM); break;                                                    \
    case TUTTI_PROD: CALL(TUTTI_PROD); break;                                                  \
    case TUTTI_MIN: CALL(TUTTI_MIN); break;                                                    \
    case TUTTI_MAX: CALL(TUTTI_MAX); break;                                                    \
    case TUTTI_AVG: CALL(TUTTI_AVG); break;                                                    \
    default: tutti__reduce_scalar(dst, srcs, nsrc, n, dt, op, avg_div); break;                \
    }

void tutti__reduce_avx2(void *dst, const void *const *srcs, int nsrc, size_t n, tutti_dtype_t dt,
                        tutti_op_t op, int avg_div)
{
    if (n == 0 || nsrc <= 0)
        return;
#define F32(OP) run32(TUTTI_FLOAT32, OP, dst, srcs, nsrc, n, avg_div)
#define BF(OP) run32(TUTTI_BFLOAT16, OP, dst, srcs, nsrc, n, avg_div)
#define F16(OP) run32(TUTTI_FLOAT16, OP, dst, srcs, nsrc, n, avg_div)
#define F64(OP) run64(OP, dst, srcs, nsrc, n, avg_div)
    switch (dt) {
    case TUTTI_FLOAT32: DISPATCH_OPS(F32); break;
    case TUTTI_BFLOAT16: DISPATCH_OPS(BF); break;
    case TUTTI_FLOAT16: DISPATCH_OPS(F16); break;
    case TUTTI_FLOAT64: DISPATCH_OPS(F64); break;
    default: tutti__reduce_scalar(dst, srcs, nsrc, n, dt, op, avg_div); break;
    }
}
