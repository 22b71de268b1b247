/* kernels-bench.c: the bandwidth of each reduction kernel variant this CPU runs (fp32, bf16,
 * fp16; 2 and 8 sources; 64 KiB buffers that stay in cache and 64 MiB ones that do not), next
 * to memcpy on the same buffers. GB/s counts bytes read plus bytes written; each row is the
 * median of several timed runs. Usage: kernels-bench [runs] (default 7). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/kernels/kernels.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define MAXSRC 8
#define MAXRUNS 31

/* time_median runs the body `reps` times per sample, `runs` samples; returns the median
 * seconds of one body run. */
#define TIME_MEDIAN(result, runs, reps, body)                                                  \
    do {                                                                                       \
        double t_[MAXRUNS];                                                                    \
        for (int r_ = 0; r_ < (runs); r_++) {                                                  \
            double t0_ = now();                                                                \
            for (int k_ = 0; k_ < (reps); k_++) {                                              \
                body;                                                                          \
            }                                                                                  \
            t_[r_] = (now() - t0_) / (reps);                                                   \
        }                                                                                      \
        qsort(t_, (size_t)(runs), sizeof t_[0], cmp_double);                                   \
        (result) = t_[(runs) / 2];                                                             \
    } while (0)

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 7;
    if (runs < 1 || runs > MAXRUNS)
        runs = 7;
    static const size_t sizes[] = {64u << 10, 64u << 20};
    static const tutti_dtype_t dts[] = {TUTTI_FLOAT32, TUTTI_BFLOAT16, TUTTI_FLOAT16};
    static const int nsrcs[] = {2, 8};
    const tutti__kvariant_t *vs = tutti__kernel_variants();

    size_t maxb = sizes[1];
    unsigned char *buf[MAXSRC + 1];
    for (int k = 0; k <= MAXSRC; k++) {
        buf[k] = aligned_alloc(64, maxb);
        if (buf[k] == NULL) {
            fprintf(stderr, "kernels-bench: out of memory for %zu-byte buffers\n", maxb);
            return 1;
        }
        /* ordinary numbers near 1 in every format: no NaN slow path, no overflow in 8 sums */
        uint16_t *h = (uint16_t *)(void *)buf[k];
        for (size_t i = 0; i < maxb / 2; i++)
            h[i] = (uint16_t)(i % 2 ? 0x3c00 + (i * 7 + (size_t)k) % 256 : 0x3f80 + (i * 13) % 64);
    }
    unsigned char *dst = buf[MAXSRC];
    const void *srcs[MAXSRC];

    printf("%-9s %-5s %4s %10s %8s\n", "variant", "dtype", "nsrc", "bytes", "GB/s");
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t bytes = sizes[si];
        int reps = bytes < (1u << 20) ? 2000 : 1;
        double t;
        TIME_MEDIAN(t, runs, reps, memcpy(dst, buf[0], bytes); __asm__ volatile("" ::: "memory"));
        printf("%-9s %-5s %4s %10zu %8.2f\n", "memcpy", "-", "-", bytes,
               2.0 * (double)bytes / t / 1e9);
        fflush(stdout);
        for (int vi = 0; vi < TUTTI__KV_COUNT; vi++) {
            if (!vs[vi].available)
                continue;
            for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
                tutti_dtype_t dt = dts[di];
                size_t count = bytes / tutti_dtype_size(dt);
                for (size_t ni = 0; ni < sizeof nsrcs / sizeof nsrcs[0]; ni++) {
                    int nsrc = nsrcs[ni];
                    for (int k = 0; k < nsrc; k++)
                        srcs[k] = buf[k];
                    int r = reps / (nsrc / 2) > 0 ? reps / (nsrc / 2) : 1;
                    if (vi == TUTTI__KV_SCALAR && r > 1)
                        r = r / 8 + 1;
                    TIME_MEDIAN(t, runs, r,
                                vs[vi].fn(dst, srcs, nsrc, count, dt, TUTTI_SUM, 0));
                    printf("%-9s %-5s %4d %10zu %8.2f\n", vs[vi].name, tutti_dtype_name(dt), nsrc,
                           bytes, (double)(nsrc + 1) * (double)bytes / t / 1e9);
                    fflush(stdout);
                }
            }
        }
    }
    for (int k = 0; k <= MAXSRC; k++)
        free(buf[k]);
    return 0;
}
