/* kernels.h: the reduction kernels, which know neither algorithms nor transports. */
#ifndef TUTTI_KERNELS_H
#define TUTTI_KERNELS_H

#include "../common/common.h"

/*
 * tutti__reduce sets dst[i] = op(srcs[0][i], srcs[1][i], ..., srcs[nsrc-1][i]) for i < count,
 * combining sources in that order. dst may be any of the sources (same index only). bf16 and
 * fp16 accumulate in fp32 and round once, to nearest even. For TUTTI_AVG the sum is divided by
 * avg_div when avg_div > 0 (before that rounding) and left a plain sum when avg_div == 0; other
 * ops ignore avg_div. With nsrc == 1 it copies (or, for AVG, divides). Integer SUM and PROD
 * wrap around. The op must suit the dtype (checked by the caller). It runs the variant that
 * tutti__kernels_init chose for dt (choosing on first use if nobody called it).
 */
void tutti__reduce(void *dst, const void *const *srcs, int nsrc, size_t count, tutti_dtype_t dt,
                   tutti_op_t op, int avg_div);

/* tutti__reduce2 is the two-operand in-place form the ring uses: dst = op(dst, src). */
static inline void tutti__reduce2(void *dst, const void *src, size_t count, tutti_dtype_t dt,
                                  tutti_op_t op, int avg_div)
{
    const void *srcs[2] = {dst, src};
    tutti__reduce(dst, srcs, 2, count, dt, op, avg_div);
}

/*
 * tutti__copy_stream copies like memcpy (no overlap) with non-temporal stores (copy.c): for
 * destinations much larger than the caches that nothing reads soon. tutti__copy_out picks it
 * or memcpy by the size of the whole output the copy is part of (total): streamed from
 * TUTTI__STREAM_MIN bytes on.
 */
void tutti__copy_stream(void *dst, const void *src, size_t bytes);
#define TUTTI__STREAM_MIN ((size_t)16 << 20)
static inline void tutti__copy_out(void *dst, const void *src, size_t bytes, size_t total)
{
    if (total >= TUTTI__STREAM_MIN)
        tutti__copy_stream(dst, src, bytes);
    else
        memcpy(dst, src, bytes);
}

/* ---- variants, chosen once per process (kernels.c) -------------------------------------- */

/*
 * Every variant computes exactly what tutti__reduce_scalar computes, bit for bit. NaN rule
 * (all float ops): the result is the first NaN met when the sources are combined in order,
 * made quiet (sign and payload kept); a NaN that the arithmetic itself creates (Inf - Inf,
 * 0 * Inf) is the CPU's default NaN. bf16 and fp16 NaNs narrow keeping sign and top payload.
 */
typedef void (*tutti__reduce_fn_t)(void *dst, const void *const *srcs, int nsrc, size_t count,
                                   tutti_dtype_t dt, tutti_op_t op, int avg_div);

typedef enum tutti__kv {
    TUTTI__KV_SCALAR = 0, /* portable C */
    TUTTI__KV_AVX2,       /* AVX2 + F16C ("f16c" in CCL_FP16) */
    TUTTI__KV_AVX512F,    /* AVX-512F/BW/VL; bf16 rounded with integer arithmetic */
    TUTTI__KV_AVX512BF,   /* AVX-512 plus AVX512_BF16 (VCVTNE2PS2BF16) for bf16 */
    TUTTI__KV_AVX512FP16, /* AVX-512 plus AVX512_FP16 for fp16 (native where exact) */
    TUTTI__KV_COUNT
} tutti__kv_t;

typedef struct tutti__kvariant {
    const char *name;       /* "scalar", "avx2", "avx512f", "avx512bf", "avx512fp16" */
    tutti__reduce_fn_t fn;  /* NULL where this build lacks the variant */
    bool available;         /* built, and this CPU and OS run it */
} tutti__kvariant_t;

/* tutti__kernel_variants returns the TUTTI__KV_COUNT variants with their availability on this
 * machine (detected on first use; cpuid plus xgetbv for the OS's register state). Tests and
 * benchmarks call a variant's fn directly; only available ones may be called. */
const tutti__kvariant_t *tutti__kernel_variants(void);

/* tutti__kernels_init detects the CPU and picks one variant per dtype, once per process:
 * the fastest available, or the one CCL_BF16 (scalar|avx2|avx512f|avx512bf) and CCL_FP16
 * (scalar|f16c|avx512f|avx512fp16) force. A forced variant that this CPU or build lacks, or an
 * unknown name, is TUTTI_ERR_INVALID_ARG with a message; tutti__reduce then uses the automatic
 * choice, so nothing ever runs an instruction the CPU lacks. Thread-safe; cheap after the first
 * call. */
tutti_status_t tutti__kernels_init(void);

/* tutti__kernels_reinit forgets the choice and makes it again from the current environment;
 * for tests only (not thread-safe against concurrent tutti__reduce calls). */
tutti_status_t tutti__kernels_reinit(void);

/* tutti__kernel_variant names the variant tutti__reduce uses for dt (after init). */
const char *tutti__kernel_variant(tutti_dtype_t dt);

/* The variants themselves (the SIMD ones exist only in x86-64 builds; avx512fp16 only where the
 * compiler takes -mavx512fp16). Each hands dtypes and ops it does not vectorize (the integers)
 * to tutti__reduce_scalar; avx512bf and avx512fp16 hand every other float dtype to avx512f. */
void tutti__reduce_scalar(void *dst, const void *const *srcs, int nsrc, size_t count,
                          tutti_dtype_t dt, tutti_op_t op, int avg_div);
void tutti__reduce_avx2(void *dst, const void *const *srcs, int nsrc, size_t count,
                        tutti_dtype_t dt, tutti_op_t op, int avg_div);
void tutti__reduce_avx512f(void *dst, const void *const *srcs, int nsrc, size_t count,
                           tutti_dtype_t dt, tutti_op_t op, int avg_div);
void tutti__reduce_avx512bf(void *dst, const void *const *srcs, int nsrc, size_t count,
                            tutti_dtype_t dt, tutti_op_t op, int avg_div);
void tutti__reduce_avx512fp16(void *dst, const void *const *srcs, int nsrc, size_t count,
                              tutti_dtype_t dt, tutti_op_t op, int avg_div);

/* tutti__kern_nan_f32 / _f64 compute element i the slow, canonical way (the NaN rule above),
 * before any rounding to bf16 / fp16; SIMD variants call them for lanes whose result is NaN,
 * so that every variant picks the same NaN. dt is the stored type (fp32, bf16, fp16, fp64). */
float tutti__kern_nan_f32(const void *const *srcs, int nsrc, size_t i, tutti_dtype_t dt,
                          tutti_op_t op, int avg_div);
double tutti__kern_nan_f64(const void *const *srcs, int nsrc, size_t i, tutti_op_t op, int avg_div);

/* Above this many output bytes, SIMD variants store with non-temporal stores (the result
 * would not fit in cache anyway; it saves the read-for-ownership traffic) and fence after. */
#define TUTTI__KERN_NT_BYTES ((size_t)4 << 20)

#endif /* TUTTI_KERNELS_H */
