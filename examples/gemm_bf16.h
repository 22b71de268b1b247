/* gemm_bf16.h: the bf16 matrix multiply of the training example: C (fp32) = A (bf16) x B (bf16,
 * packed), products accumulated in fp32, with a scalar kernel, an AVX512_BF16 (VDPBF16PS) one and
 * an AMX (TDPBF16PS) one chosen at run time. */
#ifndef GEMM_BF16_H
#define GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>

/* A bf16 number: the upper 16 bits of an fp32 (sign, 8 exponent bits, 7 mantissa bits). */
typedef uint16_t bf16_t;

/* bf16_from_f32 rounds to nearest even; a NaN stays a (quiet) NaN. */
static inline bf16_t bf16_from_f32(float f)
{
    union {
        float f;
        uint32_t u;
    } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u)
        return (bf16_t)((v.u >> 16) | 0x40u);
    v.u += 0x7fffu + ((v.u >> 16) & 1u);
    return (bf16_t)(v.u >> 16);
}

/* bf16_to_f32 is exact. */
static inline float bf16_to_f32(bf16_t h)
{
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)h << 16};
    return v.f;
}

/*
 * The B operand in the layout VDPBF16PS wants ("VNNI" packing): pairs of consecutive k for one
 * column n sit next to each other, rows of pairs padded to np = n rounded up to 16 columns, k
 * padded to an even count with zeros. Element (k, n) lives at data[(k / 2) * np * 2 + n * 2 +
 * k % 2]. A kernel then multiplies one broadcast pair of A by 16 columns at once and never needs a
 * horizontal sum.
 */
typedef struct gemm_packed {
    int k, n;     /* logical shape of B: k rows (the contraction), n columns */
    int np;       /* n rounded up to a multiple of 16 */
    bf16_t *data; /* (k + 1) / 2 * np * 2 elements, 64-byte aligned */
} gemm_packed_t;

/* gemm_packed_alloc sizes p for a k x n B (data zeroed). @return 0, or -1 out of memory. */
int gemm_packed_alloc(gemm_packed_t *p, int k, int n);
/* gemm_packed_free frees p's data (p itself is the caller's). */
void gemm_packed_free(gemm_packed_t *p);

/*
 * Pack B into p (allocated for k x n). trans == 0: B(k, n) = src[k * ld + n] (row-major k x n);
 * trans == 1: B(k, n) = src[n * ld + k] (B is given as its transpose, n x k: a Linear layer's
 * weight [out][in] used as in x out). The f32 variant rounds to bf16 to nearest even.
 */
void gemm_pack_bf16(gemm_packed_t *p, const bf16_t *src, int ld, int trans);
void gemm_pack_f32(gemm_packed_t *p, const float *src, int ld, int trans);

/* transpose_bf16 writes dst[j * ldd + i] = src[i * lds + j] for an r x c src. */
void transpose_bf16(bf16_t *dst, int ldd, const bf16_t *src, int lds, int r, int c);

/* The kernels. */
typedef enum gemm_variant {
    GEMM_SCALAR = 0,  /* portable C, fp32 accumulation of exact bf16 products */
    GEMM_AVX512BF16,  /* VDPBF16PS (AVX512_BF16 with AVX-512F/BW/VL) */
    GEMM_AMX,         /* TDPBF16PS on 16 x 16 tiles (AMX-TILE, AMX-BF16, the OS's leave) */
    GEMM_VARIANT_COUNT
} gemm_variant_t;

/* gemm_variant_name: "scalar", "avx512bf16", "amx". */
const char *gemm_variant_name(gemm_variant_t v);
/* gemm_variant_available: 1 when this CPU and OS run v (cpuid and xgetbv), and it was built. For
 * AMX the first call also asks Linux for the tile data state (arch_prctl), which the process
 * must hold before its first tile instruction. */
int gemm_variant_available(gemm_variant_t v);
/* gemm_best_variant: the fastest available variant (amx, then avx512bf16, then scalar). */
gemm_variant_t gemm_best_variant(void);
/* gemm_variant_parse: "auto" (the best), or a name. @return 0, or -1 unknown or unavailable,
 * with why in *why (a static text). */
int gemm_variant_parse(const char *name, gemm_variant_t *v, const char **why);

/*
 * gemm_bf16: C[i][j] (= or +=) sum over k of A[i][k] * B(k, j), for i < m, j < p->n, k < p->k.
 * A is row-major bf16 with leading dimension lda (>= p->k); C is row-major fp32, ldc >= p->n.
 * Products of two bf16 are exact in fp32; the sum is accumulated in fp32 (in the AVX-512 kernel,
 * two products per VDPBF16PS; in the AMX one, pairs of products per TDPBF16PS step, 32 k per
 * instruction; both flush denormals). accumulate != 0 adds to C. The variant must be available
 * (gemm_variant_available).
 */
void gemm_bf16(gemm_variant_t v, int m, const bf16_t *a, int lda, const gemm_packed_t *p,
               float *c, int ldc, int accumulate);

/* The per-variant kernels behind gemm_bf16 (same contract). */
void gemm_bf16_scalar(int m, const bf16_t *a, int lda, const gemm_packed_t *p, float *c, int ldc,
                      int accumulate);
void gemm_bf16_avx512bf16(int m, const bf16_t *a, int lda, const gemm_packed_t *p, float *c,
                          int ldc, int accumulate);
void gemm_bf16_amx(int m, const bf16_t *a, int lda, const gemm_packed_t *p, float *c, int ldc,
                   int accumulate);

#endif /* GEMM_BF16_H */
