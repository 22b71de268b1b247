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
 * wrap around. The op must suit the dtype (checked by the caller).
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

#endif /* TUTTI_KERNELS_H */
