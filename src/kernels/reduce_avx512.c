/* reduce_avx512.c: AVX-512F/BW/VL reduction kernels for fp32, fp64, bf16 (rounded with integer
 * arithmetic, exact for every input) and fp16 (VCVTPH2PS / VCVTPS2PH, round to nearest even);
 * integers stay scalar. Built with -mavx512f -mavx512bw -mavx512vl, run only where detected. */
#define BF16_ROUND(acc) bf16_round_int(acc)
#include "reduce_avx512_body.h"

void tutti__reduce_avx512f(void *dst, const void *const *srcs, int nsrc, size_t n,
                           tutti_dtype_t dt, tutti_op_t op, int avg_div)
{
    if (n == 0 || nsrc <= 0)
        return;
#define R32(DT, OP) run32(DT, OP, dst, srcs, nsrc, n, avg_div)
#define F32(OP) R32(TUTTI_FLOAT32, OP)
#define BF(OP) R32(TUTTI_BFLOAT16, OP)
#define F16(OP) R32(TUTTI_FLOAT16, OP)
#define F64(OP) run64(OP, dst, srcs, nsrc, n, avg_div)
    switch (dt) {
    case TUTTI_FLOAT32: DISPATCH_OPS(F32); break;
    case TUTTI_BFLOAT16: DISPATCH_OPS(BF); break;
    case TUTTI_FLOAT16: DISPATCH_OPS(F16); break;
    case TUTTI_FLOAT64: DISPATCH_OPS(F64); break;
    default: tutti__reduce_scalar(dst, srcs, nsrc, n, dt, op, avg_div); break;
    }
}
