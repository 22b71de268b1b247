/* gemm_bf16.c: packing, the scalar bf16 GEMM kernel and the run-time choice of kernel (cpuid,
 * xgetbv, and Linux's arch_prctl for AMX) for the training example; the AVX512_BF16 kernel is in
 * gemm_avx512bf16.c and the AMX one in gemm_amx.c, the only files compiled with -mavx512* or
 * -mamx-* flags, so the program runs on any x86-64 (and elsewhere). */
#include "gemm_bf16.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

int gemm_packed_alloc(gemm_packed_t *p, int k, int n)
{
    p->k = k;
    p->n = n;
    p->np = (n + 15) / 16 * 16;
    size_t elems = (size_t)((k + 1) / 2) * (size_t)p->np * 2;
    size_t bytes = (elems * sizeof(bf16_t) + 63) / 64 * 64;
    p->data = aligned_alloc(64, bytes > 0 ? bytes : 64);
    if (p->data == NULL)
        return -1;
    memset(p->data, 0, bytes > 0 ? bytes : 64);
    return 0;
}

void gemm_packed_free(gemm_packed_t *p)
{
    free(p->data);
    p->data = NULL;
}

/* The padding (odd k's last half-pair, columns n..np-1) was zeroed at allocation and is never
 * written, so it stays zero: the kernels multiply it by real A values and must add exact 0. */
void gemm_pack_bf16(gemm_packed_t *p, const bf16_t *src, int ld, int trans)
{
    size_t row = (size_t)p->np * 2;
    for (int k = 0; k < p->k; k++) {
        bf16_t *d = p->data + (size_t)(k / 2) * row + (k & 1);
        if (!trans) {
            const bf16_t *s = src + (size_t)k * ld;
            for (int n = 0; n < p->n; n++)
                d[2 * n] = s[n];
        } else {
            for (int n = 0; n < p->n; n++)
                d[2 * n] = src[(size_t)n * ld + k];
        }
    }
}

void gemm_pack_f32(gemm_packed_t *p, const float *src, int ld, int trans)
{
    size_t row = (size_t)p->np * 2;
    for (int k = 0; k < p->k; k++) {
        bf16_t *d = p->data + (size_t)(k / 2) * row + (k & 1);
        if (!trans) {
            const float *s = src + (size_t)k * ld;
            for (int n = 0; n < p->n; n++)
                d[2 * n] = bf16_from_f32(s[n]);
        } else {
            for (int n = 0; n < p->n; n++)
                d[2 * n] = bf16_from_f32(src[(size_t)n * ld + k]);
        }
    }
}

/* Blocks of 32 x 32 keep both the rows read and the rows written in L1. */
void transpose_bf16(bf16_t *dst, int ldd, const bf16_t *src, int lds, int r, int c)
{
    for (int i0 = 0; i0 < r; i0 += 32)
        for (int j0 = 0; j0 < c; j0 += 32) {
            int i1 = i0 + 32 < r ? i0 + 32 : r, j1 = j0 + 32 < c ? j0 + 32 : c;
            for (int i = i0; i < i1; i++)
                for (int j = j0; j < j1; j++)
                    dst[(size_t)j * ldd + i] = src[(size_t)i * lds + j];
        }
}

/* One row of C at a time: a pair of A's row is broadcast against a packed row of pairs, the
 * same order of operations as one VDPBF16PS lane (even k, then odd k, into the lane's sum). */
void gemm_bf16_scalar(int m, const bf16_t *a, int lda, const gemm_packed_t *p, float *c, int ldc,
                      int accumulate)
{
    int n = p->n, k = p->k;
    size_t row = (size_t)p->np * 2;
    for (int i = 0; i < m; i++) {
        const bf16_t *ai = a + (size_t)i * lda;
        float *ci = c + (size_t)i * ldc;
        if (!accumulate)
            for (int j = 0; j < n; j++)
                ci[j] = 0.0f;
        for (int kk = 0; kk < k; kk += 2) {
            float a0 = bf16_to_f32(ai[kk]);
            float a1 = kk + 1 < k ? bf16_to_f32(ai[kk + 1]) : 0.0f;
            const bf16_t *b = p->data + (size_t)(kk / 2) * row;
            for (int j = 0; j < n; j++) {
                float s = ci[j] + a0 * bf16_to_f32(b[2 * j]);
                ci[j] = s + a1 * bf16_to_f32(b[2 * j + 1]);
            }
        }
    }
}

#ifndef GEMM_HAVE_AVX512BF16
/* Not built (no compiler support or not x86-64): never available, so never called. */
void gemm_bf16_avx512bf16(int m, const bf16_t *a, int lda, const gemm_packed_t *p, float *c,
                          int ldc, int accumulate)
{
    gemm_bf16_scalar(m, a, lda, p, c, ldc, accumulate);
}
#endif

#ifndef GEMM_HAVE_AMX
/* Not built (no compiler support or not x86-64): never available, so never called. */
void gemm_bf16_amx(int m, const bf16_t *a, int lda, const gemm_packed_t *p, float *c, int ldc,
                   int accumulate)
{
    gemm_bf16_scalar(m, a, lda, p, c, ldc, accumulate);
}
#endif

#if (defined(GEMM_HAVE_AVX512BF16) || defined(GEMM_HAVE_AMX)) &&                                   \
    (defined(__x86_64__) || defined(__i386__))
/* xgetbv by opcode-free inline asm, so that this file needs no -mxsave. */
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* cpuid leaf 1 ECX bit 27: the OS set CR4.OSXSAVE, so xgetbv may be executed. */
static int cpu_has_osxsave(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27));
}
#endif

#if defined(GEMM_HAVE_AVX512BF16) && (defined(__x86_64__) || defined(__i386__))
/* AVX512_BF16 needs the CPU's flags (leaf 7.0 EBX: F bit 16, BW bit 30, VL bit 31; leaf 7.1 EAX:
 * AVX512_BF16 bit 5) and the OS's leave to use the ZMM state (XCR0 bits 1, 2, 5, 6, 7). */
static int cpu_has_avx512bf16(void)
{
    unsigned a, b, c, d;
    if (!cpu_has_osxsave())
        return 0;
    if ((xgetbv0() & 0xe6u) != 0xe6u)
        return 0;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    if (!(b & (1u << 16)) || !(b & (1u << 30)) || !(b & (1u << 31)))
        return 0;
    if (a < 1)
        return 0;
    __cpuid_count(7, 1, a, b, c, d);
    return (a >> 5) & 1u;
}
#else
static int cpu_has_avx512bf16(void)
{
    return 0;
}
#endif

#if defined(GEMM_HAVE_AMX) && (defined(__x86_64__) || defined(__i386__))
/* AMX needs the CPU's flags (leaf 7.0 EDX: AMX-BF16 bit 22, AMX-TILE bit 24), the OS's support
 * of the tile state (XCR0 bits 17 XTILECFG and 18 XTILEDATA) and, on Linux, which keeps the 8 KiB
 * of tile data off by default, the process's permission (arch_prctl ARCH_REQ_XCOMP_PERM for
 * XFEATURE_XTILEDATA): without it the first tile instruction raises SIGILL. The permission is
 * the process's, for all its threads; asking again is harmless. */
static int cpu_has_amx(void)
{
    unsigned a, b, c, d;
    if (!cpu_has_osxsave())
        return 0;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    if (!(d & (1u << 22)) || !(d & (1u << 24)))
        return 0;
    if ((xgetbv0() & 0x60000u) != 0x60000u)
        return 0;
#ifdef __linux__
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return 0; /* a kernel older than 5.16, or the tile state refused: no AMX */
#endif
    return 1;
}
#else
static int cpu_has_amx(void)
{
    return 0;
}
#endif

static const char *const variant_names[GEMM_VARIANT_COUNT] = {"scalar", "avx512bf16", "amx"};

const char *gemm_variant_name(gemm_variant_t v)
{
    return (unsigned)v < GEMM_VARIANT_COUNT ? variant_names[v] : "unknown";
}

/* The answers are cached: cpuid is slow under a hypervisor, and the AMX check asks the kernel
 * once. Two threads asking first at once both compute the same answer. */
int gemm_variant_available(gemm_variant_t v)
{
    static int bf16 = -1, amx = -1; /* atomics: threads may ask first at once */
    int *cache = v == GEMM_AVX512BF16 ? &bf16 : v == GEMM_AMX ? &amx : NULL;
    if (v == GEMM_SCALAR)
        return 1;
    if (cache == NULL)
        return 0;
    int known = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (known < 0) {
        known = v == GEMM_AMX ? cpu_has_amx() : cpu_has_avx512bf16();
        __atomic_store_n(cache, known, __ATOMIC_RELAXED);
    }
    return known;
}

gemm_variant_t gemm_best_variant(void)
{
    if (gemm_variant_available(GEMM_AMX))
        return GEMM_AMX;
    return gemm_variant_available(GEMM_AVX512BF16) ? GEMM_AVX512BF16 : GEMM_SCALAR;
}

int gemm_variant_parse(const char *name, gemm_variant_t *v, const char **why)
{
    if (strcmp(name, "auto") == 0) {
        *v = gemm_best_variant();
        return 0;
    }
    for (int i = 0; i < GEMM_VARIANT_COUNT; i++)
        if (strcmp(name, variant_names[i]) == 0) {
            if (!gemm_variant_available((gemm_variant_t)i)) {
                *why = i == GEMM_AMX
                           ? "this CPU (or the OS, or this build) cannot run it; it needs a CPU "
                             "with AMX-TILE and AMX-BF16 (Sapphire Rapids or later), a kernel "
                             "that enables the tile state (Linux 5.16 or later) and a compiler "
                             "with -mamx-bf16"
                           : "this CPU (or the OS, or this build) cannot run it; the CPU needs "
                             "AVX512_BF16 with AVX-512F/BW/VL";
                return -1;
            }
            *v = (gemm_variant_t)i;
            return 0;
        }
    *why = "unknown kernel; use auto, scalar, avx512bf16 or amx";
    return -1;
}

void gemm_bf16(gemm_variant_t v, int m, const bf16_t *a, int lda, const gemm_packed_t *p,
               float *c, int ldc, int accumulate)
{
    if (v == GEMM_AMX)
        gemm_bf16_amx(m, a, lda, p, c, ldc, accumulate);
    else if (v == GEMM_AVX512BF16)
        gemm_bf16_avx512bf16(m, a, lda, p, c, ldc, accumulate);
    else
        gemm_bf16_scalar(m, a, lda, p, c, ldc, accumulate);
}
