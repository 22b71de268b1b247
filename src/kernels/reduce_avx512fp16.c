/* reduce_avx512fp16.c: the fp16 reduction kernel with AVX512_FP16, bit-identical to the scalar
 * kernel; every other dtype is the avx512f variant's. Built with -mavx512f -mavx512bw -mavx512vl
 * -mavx512fp16, run only where cpuid says AVX512_FP16 and the OS keeps the AVX-512 state.
 *
 * The scalar kernel accumulates fp16 in fp32 and rounds once, so native fp16 arithmetic (32
 * lanes, no conversions) is used only where it rounds to the same bits:
 *  - MIN / MAX, any number of sources: the result is one of the inputs, nothing is rounded;
 *  - SUM (and AVG without a divisor) of two sources: the fp32 sum of two fp16 values may be
 *    inexact, but double rounding through a format with p' >= 2p + 2 bits (24 >= 2*11 + 2) is
 *    innocuous for addition, so RNE16(RNE32(a + b)) == RNE16(a + b), which VADDPH computes;
 *  - PROD of two sources: the product of two 11-bit significands fits fp32 exactly.
 * FP16 arithmetic never flushes denormals (MXCSR.DAZ/FTZ do not apply to it), as scalar does not.
 * Everything else (three or more sources, AVG with a divisor) accumulates in fp32 lanes exactly
 * as scalar does, converting with VCVTPH2PSX / VCVTPS2PHX {rn-sae}. Lanes whose result is NaN
 * are recomputed by tutti__kern_nan_f32 (kernels.h's NaN rule) in both paths. */
#include <immintrin.h>

#include "kernels.h"

#define AI static inline __attribute__((always_inline))

/* ---- native fp16: 32 lanes ------------------------------------------------------------------ */

AI __m512h ld16(const char *p, __mmask32 m, bool full)
{
    return full ? _mm512_loadu_ph(p) : _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, p));
}

/* combine16 is combine32 of reduce_avx512_body.h in fp16: the accumulator is the left operand,
 * and min/max keep a NaN of either operand so that the NaN pass finds the lane. */
AI __m512h combine16(tutti_op_t op, __m512h acc, __m512h v)
{
    switch (op) {
    case TUTTI_PROD: return _mm512_mul_ph(acc, v);
    case TUTTI_MIN: /* VMINPH(v, acc) = v < acc ? v : acc, the scalar's MINV(acc, v) */
        return _mm512_mask_blend_ph(_mm512_cmp_ph_mask(v, v, _CMP_UNORD_Q), _mm512_min_ph(v, acc),
                                    v);
    case TUTTI_MAX:
        return _mm512_mask_blend_ph(_mm512_cmp_ph_mask(v, v, _CMP_UNORD_Q), _mm512_max_ph(v, acc),
                                    v);
    default: return _mm512_add_ph(acc, v);
    }
}

static __attribute__((noinline)) __m512h fix16(__m512h acc, __mmask32 nan, const void *const *srcs,
                                               int nsrc, size_t i, tutti_op_t op, int avg_div)
{
    uint16_t t[32];
    _mm512_storeu_si512(t, _mm512_castph_si512(acc));
    for (int j = 0; j < 32; j++)
        if (nan & (1u << j))
            t[j] = tutti__f32_to_f16(
                tutti__kern_nan_f32(srcs, nsrc, i + (size_t)j, TUTTI_FLOAT16, op, avg_div));
    return _mm512_castsi512_ph(_mm512_loadu_si512(t));
}

/* vec16 reduces elements i .. i+31 (the lanes of m) natively; see the top of the file for when. */
AI __m512i vec16(tutti_op_t op, const void *const *srcs, int nsrc, size_t i, __mmask32 m,
                 bool full, int avg_div)
{
    __m512h acc = ld16((const char *)srcs[0] + i * 2, m, full);
    for (int k = 1; k < nsrc; k++)
        acc = combine16(op, acc, ld16((const char *)srcs[k] + i * 2, m, full));
    __mmask32 nan = _mm512_cmp_ph_mask(acc, acc, _CMP_UNORD_Q) & m;
    if (__builtin_expect(nan != 0, 0))
        acc = fix16(acc, nan, srcs, nsrc, i, op, avg_div);
    return _mm512_castph_si512(acc);
}

/* ---- fp32 accumulation: two halves of 16 lanes ----------------------------------------------- */

AI __m512 ld32(const char *p, __mmask16 m, bool full)
{
    __m256h h = full ? _mm256_loadu_ph(p) : _mm256_castsi256_ph(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_cvtxph_ps(h); /* exact; a signalling NaN comes out quiet, as in scalar */
}

AI __m512 combine32(tutti_op_t op, __m512 acc, __m512 v)
{
    switch (op) {
    case TUTTI_PROD: return _mm512_mul_ps(acc, v);
    case TUTTI_MIN:
        return _mm512_mask_mov_ps(_mm512_min_ps(v, acc), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
    case TUTTI_MAX:
        return _mm512_mask_mov_ps(_mm512_max_ps(v, acc), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
    default: return _mm512_add_ps(acc, v);
    }
}

static __attribute__((noinline)) __m512 fix32(__m512 acc, __mmask16 nan, const void *const *srcs,
                                              int nsrc, size_t i, tutti_op_t op, int avg_div)
{
    float t[16];
    _mm512_storeu_ps(t, acc);
    for (int j = 0; j < 16; j++)
        if (nan & (1u << j))
            t[j] = tutti__kern_nan_f32(srcs, nsrc, i + (size_t)j, TUTTI_FLOAT16, op, avg_div);
    return _mm512_loadu_ps(t);
}

/* half32 reduces elements i .. i+15 in fp32 and rounds once, to nearest even (NaN narrows
 * keeping sign and top payload, made quiet, as tutti__f32_to_f16 does). */
AI __m256i half32(tutti_op_t op, const void *const *srcs, int nsrc, size_t i, __mmask16 m,
                  bool full, int avg_div)
{
    __m512 acc = ld32((const char *)srcs[0] + i * 2, m, full);
    for (int k = 1; k < nsrc; k++)
        acc = combine32(op, acc, ld32((const char *)srcs[k] + i * 2, m, full));
    if (op == TUTTI_AVG && avg_div > 0)
        acc = _mm512_div_ps(acc, _mm512_set1_ps((float)avg_div));
    __mmask16 nan = _mm512_cmp_ps_mask(acc, acc, _CMP_UNORD_Q) & m;
    if (__builtin_expect(nan != 0, 0))
        acc = fix32(acc, nan, srcs, nsrc, i, op, avg_div);
    return _mm256_castph_si256(
        _mm512_cvtx_roundps_ph(acc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

AI __m512i vec32(tutti_op_t op, const void *const *srcs, int nsrc, size_t i, __mmask32 m,
                 bool full, int avg_div)
{
    __m256i lo = half32(op, srcs, nsrc, i, (__mmask16)m, full, avg_div);
    __m256i hi = half32(op, srcs, nsrc, i + 16, (__mmask16)(m >> 16), full, avg_div);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* ---- the loop -------------------------------------------------------------------------------- */

AI __m512i vec(bool native, tutti_op_t op, const void *const *srcs, int nsrc, size_t i,
               __mmask32 m, bool full, int avg_div)
{
    if (native)
        return vec16(op, srcs, nsrc, i, m, full, avg_div);
    if (!full && (m >> 16) == 0) /* a short tail: skip the empty upper half */
        return _mm512_castsi256_si512(half32(op, srcs, nsrc, i, (__mmask16)m, false, avg_div));
    return vec32(op, srcs, nsrc, i, m, full, avg_div);
}

/* run: 32 elements per step. Large outputs go out with non-temporal stores once dst is aligned
 * (a masked head gets it there), then a fence, as the other variants do. */
AI void run(bool native, tutti_op_t op, void *dstv, const void *const *srcs, int nsrc, size_t n,
            int avg_div)
{
    char *dst = dstv;
    size_t i = 0;
    bool nt = n * 2 >= TUTTI__KERN_NT_BYTES && (uintptr_t)dst % 2 == 0;
    if (nt) {
        size_t head = ((64 - (uintptr_t)dst % 64) % 64) / 2;
        if (head) {
            __mmask32 m = (__mmask32)((1u << head) - 1);
            _mm512_mask_storeu_epi16(dst, m, vec(native, op, srcs, nsrc, 0, m, false, avg_div));
            i = head;
        }
    }
    for (; i + 32 <= n; i += 32) {
        __m512i r = vec(native, op, srcs, nsrc, i, 0xffffffffu, true, avg_div);
        if (nt)
            _mm512_stream_si512((__m512i *)(void *)(dst + i * 2), r);
        else
            _mm512_storeu_si512(dst + i * 2, r);
    }
    if (i < n) {
        __mmask32 m = (__mmask32)((1u << (n - i)) - 1);
        _mm512_mask_storeu_epi16(dst + i * 2, m, vec(native, op, srcs, nsrc, i, m, false, avg_div));
    }
    if (nt)
        _mm_sfence();
}

void tutti__reduce_avx512fp16(void *dst, const void *const *srcs, int nsrc, size_t n,
                              tutti_dtype_t dt, tutti_op_t op, int avg_div)
{
    if (dt != TUTTI_FLOAT16) {
        tutti__reduce_avx512f(dst, srcs, nsrc, n, dt, op, avg_div);
        return;
    }
    if (n == 0 || nsrc <= 0)
        return;
    bool two = nsrc <= 2;
    switch (op) {
    case TUTTI_MIN: run(true, TUTTI_MIN, dst, srcs, nsrc, n, avg_div); break;
    case TUTTI_MAX: run(true, TUTTI_MAX, dst, srcs, nsrc, n, avg_div); break;
    case TUTTI_SUM:
        if (two)
            run(true, TUTTI_SUM, dst, srcs, nsrc, n, avg_div);
        else
            run(false, TUTTI_SUM, dst, srcs, nsrc, n, avg_div);
        break;
    case TUTTI_PROD:
        if (two)
            run(true, TUTTI_PROD, dst, srcs, nsrc, n, avg_div);
        else
            run(false, TUTTI_PROD, dst, srcs, nsrc, n, avg_div);
        break;
    case TUTTI_AVG: /* without a divisor AVG is SUM */
        if (two && avg_div <= 0)
            run(true, TUTTI_SUM, dst, srcs, nsrc, n, avg_div);
        else
            run(false, TUTTI_AVG, dst, srcs, nsrc, n, avg_div);
        break;
    default: tutti__reduce_scalar(dst, srcs, nsrc, n, dt, op, avg_div); break;
    }
}
