/* dtype.c: element types and operations: sizes, names, which op applies to which type, and
 * the fp16 conversions (bf16 ones are inline in common.h). */
#include "common.h"

static const struct {
    const char *name;
    size_t size;
    bool is_float;
} dtypes[TUTTI_DTYPE_COUNT] = {
    [TUTTI_INT8] = {"int8", 1, false},       [TUTTI_UINT8] = {"uint8", 1, false},
    [TUTTI_INT32] = {"int32", 4, false},     [TUTTI_INT64] = {"int64", 8, false},
    [TUTTI_FLOAT16] = {"fp16", 2, true},     [TUTTI_BFLOAT16] = {"bf16", 2, true},
    [TUTTI_FLOAT32] = {"fp32", 4, true},     [TUTTI_FLOAT64] = {"fp64", 8, true},
};

static const char *const op_names[TUTTI_OP_COUNT] = {
    [TUTTI_SUM] = "sum", [TUTTI_PROD] = "prod", [TUTTI_MIN] = "min",   [TUTTI_MAX] = "max",
    [TUTTI_AVG] = "avg", [TUTTI_BAND] = "band", [TUTTI_BOR] = "bor",   [TUTTI_BXOR] = "bxor",
};

bool tutti__dtype_valid(tutti_dtype_t dt) { return (unsigned)dt < TUTTI_DTYPE_COUNT; }
bool tutti__op_valid(tutti_op_t op) { return (unsigned)op < TUTTI_OP_COUNT; }
bool tutti__dtype_is_float(tutti_dtype_t dt) { return tutti__dtype_valid(dt) && dtypes[dt].is_float; }

bool tutti__op_supported(tutti_op_t op, tutti_dtype_t dt)
{
    if (!tutti__op_valid(op) || !tutti__dtype_valid(dt))
        return false;
    if (op == TUTTI_AVG)
        return dtypes[dt].is_float;
    if (op == TUTTI_BAND || op == TUTTI_BOR || op == TUTTI_BXOR)
        return !dtypes[dt].is_float;
    return true;
}

TUTTI_API size_t tutti_dtype_size(tutti_dtype_t dt) { return tutti__dtype_valid(dt) ? dtypes[dt].size : 0; }

TUTTI_API const char *tutti_dtype_name(tutti_dtype_t dt)
{
    return tutti__dtype_valid(dt) ? dtypes[dt].name : "unknown";
}

TUTTI_API const char *tutti_op_name(tutti_op_t op) { return tutti__op_valid(op) ? op_names[op] : "unknown"; }

float tutti__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u);
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        u = sign;
    } else { /* subnormal half: normalize */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while ((man & 0x400u) == 0);
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t tutti__f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, keep top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* rounds to >= 65520: overflow to Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal half */
        uint32_t r = a - 0x38000000u; /* rebias exponent 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a < 0x33000000u) /* below half the smallest subnormal: rounds to zero */
        return sign;
    /* subnormal half: shift the full mantissa into place and round to nearest even */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}
