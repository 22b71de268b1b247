/* reduce_avx512bf.c: the bf16 reduction kernel with AVX512_BF16's VCVTNEPS2BF16 for the
 * rounding (to nearest even; NaN quieted keeping sign and top payload, as the scalar kernel
 * does). That instruction treats fp32 denormal inputs as zero whatever MXCSR says, so a vector
 * holding a denormal sum is rounded with integer arithmetic instead (exact, rare). Every other
 * dtype is the avx512f variant's. Built with -mavx512f -mavx512bw -mavx512vl -mavx512bf16. */
#include <immintrin.h>

#include "kernels.h"

static inline __attribute__((always_inline)) __m256i bf16_round_bf(__m512 acc);
#define BF16_ROUND(acc) bf16_round_bf(acc)
#include "reduce_avx512_body.h"

static inline __attribute__((always_inline)) __m256i bf16_round_bf(__m512 acc)
{
    /* |x| - 1 < 0x7fffff (unsigned) holds exactly for the nonzero denormals */
    __m512i a = _mm512_and_si512(_mm512_castps_si512(acc), _mm512_set1_epi32(0x7fffffff));
    __mmask16 den = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(a, _mm512_set1_epi32(1)),
                                            _mm512_set1_epi32(0x007fffff));
    if (__builtin_expect(den != 0, 0))
        return bf16_round_int(acc);
    return (__m256i)_mm512_cvtneps_pbh(acc);
}

void tutti__reduce_avx512bf(void *dst, const void *const *srcs, int nsrc, size_t n,
                            tutti_dtype_t dt, tutti_op_t op, int avg_div)
{
    if (dt != TUTTI_BFLOAT16) {
        tutti__reduce_avx512f(dst, srcs, nsrc, n, dt, op, avg_div);
        return;
    }
    if (n == 0 || nsrc <= 0)
        return;
#define BF(OP) run32(TUTTI_BFLOAT16, OP, dst, srcs, nsrc, n, avg_div)
    DISPATCH_OPS(BF);
}
