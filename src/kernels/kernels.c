/* kernels.c: picks the reduction kernel variant for each dtype once per process, from what the
 * CPU and OS support (cpuid, xgetbv) and the CCL_BF16 / CCL_FP16 overrides. */
#include <pthread.h>
#include <strings.h>

#include "kernels.h"

#if defined(__x86_64__) && defined(TUTTI_KV_X86)
#include <cpuid.h>
#define HAVE_X86_VARIANTS 1
#else
#define HAVE_X86_VARIANTS 0
#endif
/* The AVX512_FP16 variant needs a compiler that takes -mavx512fp16 (gcc 12, clang 14). */
#if HAVE_X86_VARIANTS && defined(TUTTI_KV_FP16)
#define HAVE_FP16_VARIANT 1
#else
#define HAVE_FP16_VARIANT 0
#endif

static tutti__kvariant_t variants[TUTTI__KV_COUNT] = {
    [TUTTI__KV_SCALAR] = {"scalar", tutti__reduce_scalar, true},
#if HAVE_X86_VARIANTS
    [TUTTI__KV_AVX2] = {"avx2", tutti__reduce_avx2, false},
    [TUTTI__KV_AVX512F] = {"avx512f", tutti__reduce_avx512f, false},
    [TUTTI__KV_AVX512BF] = {"avx512bf", tutti__reduce_avx512bf, false},
#else
    [TUTTI__KV_AVX2] = {"avx2", NULL, false},
    [TUTTI__KV_AVX512F] = {"avx512f", NULL, false},
    [TUTTI__KV_AVX512BF] = {"avx512bf", NULL, false},
#endif
#if HAVE_FP16_VARIANT
    [TUTTI__KV_AVX512FP16] = {"avx512fp16", tutti__reduce_avx512fp16, false},
#else
    [TUTTI__KV_AVX512FP16] = {"avx512fp16", NULL, false},
#endif
};

/* Whether the CPU and OS run AVX512_FP16, built or not, so that an override can say why it
 * fails. */
static bool cpu_avx512fp16;

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t choose_lock = PTHREAD_MUTEX_INITIALIZER;
static int chosen_ready; /* read with acquire in the hot path */
static tutti__kv_t chosen[TUTTI_DTYPE_COUNT];
static tutti_status_t chosen_status;
static char chosen_err[TUTTI__ERRLEN];

#if HAVE_X86_VARIANTS
/* xgetbv by opcode-free inline asm, so this file needs no -mxsave; only valid when OSXSAVE. */
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static void detect(void)
{
#if HAVE_X86_VARIANTS
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    bool osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!osxsave || !avx)
        return;
    uint64_t xcr0 = xgetbv0();
    bool os_avx = (xcr0 & 0x6) == 0x6;           /* SSE and AVX state */
    bool os_avx512 = (xcr0 & 0xe6) == 0xe6;      /* plus opmask, ZMM0-15 upper, ZMM16-31 */
    unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0, x;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, x, b7, c7, d7);
        unsigned b71, c71, d71;
        __cpuid_count(7, 1, a71, b71, c71, d71);
        (void)b71, (void)c71, (void)d71;
    }
    (void)x, (void)c7;
    bool avx2 = b7 & (1u << 5), avx512f = b7 & (1u << 16), avx512bw = b7 & (1u << 30),
         avx512vl = b7 & (1u << 31), avx512bf16 = a71 & (1u << 5), avx512fp16 = d7 & (1u << 23);
    variants[TUTTI__KV_AVX2].available = os_avx && avx2 && f16c;
    variants[TUTTI__KV_AVX512F].available =
        variants[TUTTI__KV_AVX2].available && os_avx512 && avx512f && avx512bw && avx512vl;
    variants[TUTTI__KV_AVX512BF].available = variants[TUTTI__KV_AVX512F].available && avx512bf16;
    cpu_avx512fp16 = variants[TUTTI__KV_AVX512F].available && avx512fp16;
    variants[TUTTI__KV_AVX512FP16].available =
        variants[TUTTI__KV_AVX512FP16].fn != NULL && cpu_avx512fp16;
#endif
}

const tutti__kvariant_t *tutti__kernel_variants(void)
{
    pthread_once(&detect_once, detect);
    return variants;
}

/* best is the fastest general variant; avx512bf and avx512fp16 differ from avx512f in one dtype
 * each, so choose() takes them for that dtype alone, naming the code that really runs. */
static tutti__kv_t best(void)
{
    for (int v = TUTTI__KV_AVX512F; v > 0; v--)
        if (variants[v].available)
            return (tutti__kv_t)v;
    return TUTTI__KV_SCALAR;
}

/* parse_override reads var (one of names[], which map to kv[]) into *out; unset leaves *out
 * alone. */
static tutti_status_t parse_override(const char *var, const char *const *names, const int *kv,
                                     int n, tutti__kv_t *out, char *err)
{
    const char *v = tutti__env_get(var);
    if (v == NULL)
        return TUTTI_OK;
    char usable[128] = "", all[128] = "";
    for (int i = 0; i < n; i++) {
        strncat(all, i ? ", " : "", sizeof all - strlen(all) - 1);
        strncat(all, names[i], sizeof all - strlen(all) - 1);
        if (variants[kv[i]].available) {
            strncat(usable, usable[0] ? ", " : "", sizeof usable - strlen(usable) - 1);
            strncat(usable, names[i], sizeof usable - strlen(usable) - 1);
        }
    }
    for (int i = 0; i < n; i++) {
        if (strcasecmp(v, names[i]) != 0)
            continue;
        if (variants[kv[i]].available) {
            *out = (tutti__kv_t)kv[i];
            return TUTTI_OK;
        }
        const char *why;
        if (kv[i] == TUTTI__KV_AVX512FP16 && variants[kv[i]].fn == NULL)
            why = cpu_avx512fp16 ? "this CPU has AVX512_FP16 but tutti was built without that "
                                   "variant (the compiler lacks -mavx512fp16, or not x86-64)"
                                 : "this CPU lacks AVX512_FP16 (and tutti was built without that "
                                   "variant)";
        else if (kv[i] == TUTTI__KV_AVX512FP16)
            why = "this CPU lacks AVX512_FP16 (cpuid leaf 7 EDX bit 23), or AVX-512F/BW/VL, or the "
                  "OS does not enable the AVX-512 register state";
        else if (variants[kv[i]].fn == NULL)
            why = "tutti is built without it on this architecture";
        else
            why = "this CPU or OS lacks the instructions";
        return tutti__fmt_error(err, TUTTI_ERR_INVALID_ARG,
                                "%s=%s forces a reduction kernel this machine cannot run: %s; unset "
                                "%s or use one of: %s", var, v, why, var, usable);
    }
    return tutti__fmt_error(err, TUTTI_ERR_INVALID_ARG,
                            "%s=\"%s\" is not a reduction kernel variant; use one of: %s (usable "
                            "here: %s)", var, v, all, usable);
}

static void choose(void)
{
    pthread_once(&detect_once, detect);
    tutti__kv_t auto_kv = best();
    for (int dt = 0; dt < TUTTI_DTYPE_COUNT; dt++)
        chosen[dt] = auto_kv;
    if (variants[TUTTI__KV_AVX512BF].available)
        chosen[TUTTI_BFLOAT16] = TUTTI__KV_AVX512BF;
    if (variants[TUTTI__KV_AVX512FP16].available)
        chosen[TUTTI_FLOAT16] = TUTTI__KV_AVX512FP16;
    chosen_status = TUTTI_OK;
    chosen_err[0] = '\0';

    static const char *const bf_names[] = {"scalar", "avx2", "avx512f", "avx512bf"};
    static const int bf_kv[] = {TUTTI__KV_SCALAR, TUTTI__KV_AVX2, TUTTI__KV_AVX512F,
                                TUTTI__KV_AVX512BF};
    static const char *const fp_names[] = {"scalar", "f16c", "avx2", "avx512f", "avx512fp16"};
    static const int fp_kv[] = {TUTTI__KV_SCALAR, TUTTI__KV_AVX2, TUTTI__KV_AVX2,
                                TUTTI__KV_AVX512F, TUTTI__KV_AVX512FP16};
    tutti__kv_t kv = chosen[TUTTI_BFLOAT16];
    tutti_status_t st = parse_override("CCL_BF16", bf_names, bf_kv, 4, &kv, chosen_err);
    if (st == TUTTI_OK) {
        chosen[TUTTI_BFLOAT16] = kv;
        kv = chosen[TUTTI_FLOAT16];
        st = parse_override("CCL_FP16", fp_names, fp_kv, 5, &kv, chosen_err);
        if (st == TUTTI_OK)
            chosen[TUTTI_FLOAT16] = kv;
    }
    chosen_status = st; /* every tutti__kernels_init returns it: no log line to repeat it */
    TUTTI__LOG(TUTTI__LOG_INFO, "reduction kernels: bf16 %s, fp16 %s, fp32 %s",
               variants[chosen[TUTTI_BFLOAT16]].name, variants[chosen[TUTTI_FLOAT16]].name,
               variants[chosen[TUTTI_FLOAT32]].name);
    __atomic_store_n(&chosen_ready, 1, __ATOMIC_RELEASE);
}

tutti_status_t tutti__kernels_init(void)
{
    if (!__atomic_load_n(&chosen_ready, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&choose_lock);
        if (!chosen_ready)
            choose();
        pthread_mutex_unlock(&choose_lock);
    }
    if (chosen_status != TUTTI_OK)
        return tutti__set_error(chosen_status, "%s", chosen_err);
    return TUTTI_OK;
}

tutti_status_t tutti__kernels_reinit(void)
{
    pthread_mutex_lock(&choose_lock);
    __atomic_store_n(&chosen_ready, 0, __ATOMIC_RELEASE);
    choose();
    pthread_mutex_unlock(&choose_lock);
    return tutti__kernels_init();
}

const char *tutti__kernel_variant(tutti_dtype_t dt)
{
    (void)tutti__kernels_init();
    if (!tutti__dtype_valid(dt))
        return "unknown";
    if (dt == TUTTI_FLOAT16 && chosen[dt] == TUTTI__KV_AVX2)
        return "f16c"; /* oneCCL's name for it */
    return variants[chosen[dt]].name;
}

void tutti__reduce(void *dst, const void *const *srcs, int nsrc, size_t count, tutti_dtype_t dt,
                   tutti_op_t op, int avg_div)
{
    if (__builtin_expect(!__atomic_load_n(&chosen_ready, __ATOMIC_ACQUIRE), 0))
        (void)tutti__kernels_init(); /* a bad override keeps the automatic choice */
    if ((unsigned)dt >= TUTTI_DTYPE_COUNT)
        return;
    variants[chosen[dt]].fn(dst, srcs, nsrc, count, dt, op, avg_div);
}
