/* reduce_avx512_body.h: the AVX-512 reduction loops, included by reduce_avx512.c and
 * reduce_avx512bf.c, which differ only in how fp32 is rounded to bf16 (BF16_ROUND). */
#ifndef TUTTI_REDUCE_AVX512_BODY_H
#define TUTTI_REDUCE_AVX512_BODY_H

#include <immintrin.h>

#include "kernels.h"

#define AI static inline __attribute__((always_inline))

/* Integer rounding of fp32 to bf16, to nearest even, exactly as tutti__f32_to_bf16 does:
 * NaN keeps sign and top payload and is made quiet; Inf and overflow come out Inf. */
AI __m256i bf16_round_int(__m512 acc)
{
    __m512i u = _mm512_castps_si512(acc);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(hi, _mm512_set1_epi32(1))));
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmp_ps_mask(acc, acc, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

/* ld32 loads 16 elements of dt at p as fp32 (only the lanes in m when !full). */
AI __m512 ld32(tutti_dtype_t dt, const char *p, __mmask16 m, bool full)
{
    switch (dt) {
    case TUTTI_FLOAT32:
        return full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
    case TUTTI_BFLOAT16: {
        __m256i h = full ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(m, p);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    default: { /* fp16 */
        __m256i h = full ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(m, p);
        return _mm512_cvtph_ps(h);
    }
    }
}

/* st32 stores 16 fp32 lanes as dt: mode 0 plain, 1 masked by m, 2 non-temporal (aligned). */
AI void st32(tutti_dtype_t dt, char *p, __m512 acc, __mmask16 m, int mode)
{
    if (dt == TUTTI_FLOAT32) {
        if (mode == 0)
            _mm512_storeu_ps(p, acc);
        else if (mode == 1)
            _mm512_mask_storeu_ps(p, m, acc);
        else
            _mm512_stream_ps((float *)(void *)p, acc);
        return;
    }
    __m256i h = dt == TUTTI_BFLOAT16
                    ? BF16_ROUND(acc)
                    : _mm512_cvtps_ph(acc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (mode == 0)
        _mm256_storeu_si256((__m256i *)(void *)p, h);
    else if (mode == 1)
        _mm256_mask_storeu_epi16(p, m, h);
    else
        _mm256_stream_si256((__m256i *)(void *)p, h);
}

/* combine applies op with the accumulator as the left operand, as the scalar kernel does;
 * min/max keep a NaN in either operand so that the NaN pass below finds the lane. */
AI __m512 combine32(tutti_op_t op, __m512 acc, __m512 v)
{
    switch (op) {
    case TUTTI_PROD: return _mm512_mul_ps(acc, v);
    case TUTTI_MIN: /* min_ps(v, acc) = v < acc ? v : acc, the scalar's MINV(acc, v) */
        return _mm512_mask_mov_ps(_mm512_min_ps(v, acc), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
    case TUTTI_MAX:
        return _mm512_mask_mov_ps(_mm512_max_ps(v, acc), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
    default: return _mm512_add_ps(acc, v);
    }
}

AI __m512d combine64(tutti_op_t op, __m512d acc, __m512d v)
{
    switch (op) {
    case TUTTI_PROD: return _mm512_mul_pd(acc, v);
    case TUTTI_MIN:
        return _mm512_mask_mov_pd(_mm512_min_pd(v, acc), _mm512_cmp_pd_mask(v, v, _CMP_UNORD_Q), v);
    case TUTTI_MAX:
        return _mm512_mask_mov_pd(_mm512_max_pd(v, acc), _mm512_cmp_pd_mask(v, v, _CMP_UNORD_Q), v);
    default: return _mm512_add_pd(acc, v);
    }
}

/* Lanes whose result is NaN are recomputed the canonical way (kernels.h's NaN rule). */
static __attribute__((noinline)) __m512 fix32(__m512 acc, __mmask16 nan, const void *const *srcs,
                                              int nsrc, size_t i, tutti_dtype_t dt, tutti_op_t op,
                                              int avg_div)
{
    float t[16];
    _mm512_storeu_ps(t, acc);
    for (int j = 0; j < 16; j++)
        if (nan & (1u << j))
            t[j] = tutti__kern_nan_f32(srcs, nsrc, i + (size_t)j, dt, op, avg_div);
    return _mm512_loadu_ps(t);
}

static __attribute__((noinline)) __m512d fix64(__m512d acc, __mmask8 nan, const void *const *srcs,
                                               int nsrc, size_t i, tutti_op_t op, int avg_div)
{
    double t[8];
    _mm512_storeu_pd(t, acc);
    for (int j = 0; j < 8; j++)
        if (nan & (1u << j))
            t[j] = tutti__kern_nan_f64(srcs, nsrc, i + (size_t)j, op, avg_div);
    return _mm512_loadu_pd(t);
}

/* vec32 reduces elements i .. i+15 (the lanes of m) of all sources into fp32 lanes. */
AI __m512 vec32(tutti_dtype_t dt, tutti_op_t op, const void *const *srcs, int nsrc, size_t i,
                __mmask16 m, bool full, int avg_div)
{
    size_t off = i * (dt == TUTTI_FLOAT32 ? 4 : 2);
    __m512 acc = ld32(dt, (const char *)srcs[0] + off, m, full);
    for (int k = 1; k < nsrc; k++)
        acc = combine32(op, acc, ld32(dt, (const char *)srcs[k] + off, m, full));
    if (op == TUTTI_AVG && avg_div > 0)
        acc = _mm512_div_ps(acc, _mm512_set1_ps((float)avg_div));
    __mmask16 nan = _mm512_cmp_ps_mask(acc, acc, _CMP_UNORD_Q) & m;
    if (__builtin_expect(nan != 0, 0))
        acc = fix32(acc, nan, srcs, nsrc, i, dt, op, avg_div);
    return acc;
}

AI __m512d vec64(tutti_op_t op, const void *const *srcs, int nsrc, size_t i, __mmask8 m, bool full,
                 int avg_div)
{
    const char *p = (const char *)srcs[0] + i * 8;
    __m512d acc = full ? _mm512_loadu_pd(p) : _mm512_maskz_loadu_pd(m, p);
    for (int k = 1; k < nsrc; k++) {
        p = (const char *)srcs[k] + i * 8;
        acc = combine64(op, acc, full ? _mm512_loadu_pd(p) : _mm512_maskz_loadu_pd(m, p));
    }
    if (op == TUTTI_AVG && avg_div > 0)
        acc = _mm512_div_pd(acc, _mm512_set1_pd((double)avg_div));
    __mmask8 nan = _mm512_cmp_pd_mask(acc, acc, _CMP_UNORD_Q) & m;
    if (__builtin_expect(nan != 0, 0))
        acc = fix64(acc, nan, srcs, nsrc, i, op, avg_div);
    return acc;
}

/* run32: fp32, bf16 or fp16. Large outputs go out with non-temporal stores once dst is aligned
 * (a masked head gets it there), then a fence, so that whoever is told "done" next sees them. */
AI void run32(tutti_dtype_t dt, tutti_op_t op, void *dstv, const void *const *srcs, int nsrc,
              size_t n, int avg_div)
{
    char *dst = dstv;
    size_t es = dt == TUTTI_FLOAT32 ? 4 : 2, align = 16 * es, i = 0;
    bool nt = n * es >= TUTTI__KERN_NT_BYTES && (uintptr_t)dst % es == 0;
    if (nt) {
        size_t head = ((align - (uintptr_t)dst % align) % align) / es;
        if (head) {
            __mmask16 m = (__mmask16)((1u << head) - 1);
            st32(dt, dst, vec32(dt, op, srcs, nsrc, 0, m, false, avg_div), m, 1);
            i = head;
        }
    }
    for (; i + 16 <= n; i += 16)
        st32(dt, dst + i * es, vec32(dt, op, srcs, nsrc, i, 0xffff, true, avg_div), 0xffff,
             nt ? 2 : 0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        st32(dt, dst + i * es, vec32(dt, op, srcs, nsrc, i, m, false, avg_div), m, 1);
    }
    if (nt)
        _mm_sfence();
}

AI void run64(tutti_op_t op, void *dstv, const void *const *srcs, int nsrc, size_t n, int avg_div)
{
    char *dst = dstv;
    size_t i = 0;
    bool nt = n * 8 >= TUTTI__KERN_NT_BYTES && (uintptr_t)dst % 8 == 0;
    if (nt) {
        size_t head = ((64 - (uintptr_t)dst % 64) % 64) / 8;
        if (head) {
            __mmask8 m = (__mmask8)((1u << head) - 1);
            _mm512_mask_storeu_pd(dst, m, vec64(op, srcs, nsrc, 0, m, false, avg_div));
            i = head;
        }
    }
    for (; i + 8 <= n; i += 8) {
        __m512d r = vec64(op, srcs, nsrc, i, 0xff, true, avg_div);
        if (nt)
            _mm512_stream_pd((double *)(void *)(dst + i * 8), r);
        else
            _mm512_storeu_pd(dst + i * 8, r);
    }
    if (i < n) {
        __mmask8 m = (__mmask8)((1u << (n - i)) - 1);
        _mm512_mask_storeu_pd(dst + i * 8, m, vec64(op, srcs, nsrc, i, m, false, avg_div));
    }
    if (nt)
        _mm_sfence();
}

/* One specialised loop per (dtype, op): the switch is outside the loops. */
#define DISPATCH_OPS(CALL)                                                                     \
    switch (op) {                                                                              \
    case TUTTI_SUM: CALL(TUTTI_SUM); break;                                                    \
    case TUTTI_PROD: CALL(TUTTI_PROD); break;                                                  \
    case TUTTI_MIN: CALL(TUTTI_MIN); break;                                                    \
    case TUTTI_MAX: CALL(TUTTI_MAX); break;                                                    \
    case TUTTI_AVG: CALL(TUTTI_AVG); break;                                                    \
    default: tutti__reduce_scalar(dst, srcs, nsrc, n, dt, op, avg_div); break;                \
    }

#endif /* TUTTI_REDUCE_AVX512_BODY_H */
