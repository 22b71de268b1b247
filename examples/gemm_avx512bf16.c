/* gemm_avx512bf16.c: the AVX512_BF16 kernel of gemm_bf16 (compiled alone with -mavx512bf16;
 * called only where cpuid says the CPU has it).
 *
 * Algorithm: C is cut into tiles of up to 8 rows x 32 columns held in 16 ZMM accumulators. For
 * each pair of k, the tile's 32 columns of packed B (two ZMM loads, 16 pairs each) meet each
 * row's broadcast A pair in one VDPBF16PS per row and vector: 16 lanes x 2 products. No
 * horizontal sums and no transposes in the inner loop; a column panel of B (k/2 x 128 bytes,
 * 32 KiB at k = 512) stays in L1/L2 while the row tiles stream past it. Cost: m * np * k / 32
 * VDPBF16PS; the 16 independent accumulators cover the instruction's latency. Row and column
 * tails use the same code with fewer rows and masked stores. */
#include "gemm_bf16.h"

#include <immintrin.h>
#include <string.h>

/* A's pair (k, k + 1) of row r as one 32-bit lane pattern; for an odd k the pair is (k, 0), so
 * nothing past the row is read. */
static inline __m512i a_pair(const bf16_t *a, int k, int kmax)
{
    uint32_t v;
    if (k + 1 < kmax)
        memcpy(&v, a + k, sizeof v);
    else
        v = a[k];
    return _mm512_set1_epi32((int)v);
}

static inline __attribute__((always_inline)) void tile(int mr, int nv, const bf16_t *a, int lda,
                                                        const gemm_packed_t *p, int j0, float *c,
                                                        int ldc, int accumulate)
{
    __m512 acc[8][2];
    int n = p->n, k = p->k;
    int rem = n - j0;
    __mmask16 m0 = rem >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << rem) - 1u);
    __mmask16 m1 = rem >= 32 ? (__mmask16)0xffff
                   : rem > 16 ? (__mmask16)((1u << (rem - 16)) - 1u)
                              : (__mmask16)0;
    for (int r = 0; r < mr; r++) {
        float *cr = c + (size_t)r * ldc + j0;
        acc[r][0] = accumulate ? _mm512_maskz_loadu_ps(m0, cr) : _mm512_setzero_ps();
        if (nv > 1)
            acc[r][1] = accumulate ? _mm512_maskz_loadu_ps(m1, cr + 16) : _mm512_setzero_ps();
    }
    const bf16_t *b = p->data + (size_t)j0 * 2;
    size_t brow = (size_t)p->np * 2;
    int kfull = k & ~1;
    for (int kk = 0; kk < kfull; kk += 2, b += brow) {
        __m512i b0 = _mm512_load_si512((const void *)b);
        __m512i b1 = nv > 1 ? _mm512_load_si512((const void *)(b + 32)) : b0;
        for (int r = 0; r < mr; r++) {
            uint32_t v;
            memcpy(&v, a + (size_t)r * lda + kk, sizeof v);
            __m512i ar = _mm512_set1_epi32((int)v);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)ar, (__m512bh)b0);
            if (nv > 1)
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)ar, (__m512bh)b1);
        }
    }
    if (k & 1) {
        __m512i b0 = _mm512_load_si512((const void *)b);
        __m512i b1 = nv > 1 ? _mm512_load_si512((const void *)(b + 32)) : b0;
        for (int r = 0; r < mr; r++) {
            __m512i ar = a_pair(a + (size_t)r * lda, kfull, k);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)ar, (__m512bh)b0);
            if (nv > 1)
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)ar, (__m512bh)b1);
        }
    }
    for (int r = 0; r < mr; r++) {
        float *cr = c + (size_t)r * ldc + j0;
        _mm512_mask_storeu_ps(cr, m0, acc[r][0]);
        if (nv > 1)
            _mm512_mask_storeu_ps(cr + 16, m1, acc[r][1]);
    }
}

/* Each row count gets its own copy of tile() with mr a constant, so the accumulators live in
 * registers. */
#define TILE_CASES(nv)                                                                         \
    switch (mr) {                                                                              \
    case 8: tile(8, nv, ai, lda, p, j0, ci, ldc, accumulate); break;                        \
    case 7: tile(7, nv, ai, lda, p, j0, ci, ldc, accumulate); break;                        \
    case 6: tile(6, nv, ai, lda, p, j0, ci, ldc, accumulate); break;                        \
    case 5: tile(5, nv, ai, lda, p, j0, ci, ldc, accumulate); break;                        \
    case 4: tile(4, nv, ai, lda, p, j0, ci, ldc, accumulate); break;                        \
    case 3: tile(3, nv, ai, lda, p, j0, ci, ldc, accumulate); break;                        \
    case 2: tile(2, nv, ai, lda, p, j0, ci, ldc, accumulate); break;                        \
    default: tile(1, nv, ai, lda, p, j0, ci, ldc, accumulate); break;                       \
    }

void gemm_bf16_avx512bf16(int m, const bf16_t *a, int lda, const gemm_packed_t *p, float *c,
                          int ldc, int accumulate)
{
    if (p->n <= 0 || m <= 0)
        return;
    for (int j0 = 0; j0 < p->n; j0 += 32) {
        int two = p->n - j0 > 16; /* the second vector holds at least one real column */
        for (int i0 = 0; i0 < m; i0 += 8) {
            int mr = m - i0 < 8 ? m - i0 : 8;
            const bf16_t *ai = a + (size_t)i0 * lda;
            float *ci = c + (size_t)i0 * ldc;
            if (two) {
                TILE_CASES(2)
            } else {
                TILE_CASES(1)
            }
        }
    }
}
