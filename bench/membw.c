/* membw.c: the memory bandwidth of this machine as a collective sees it: memcpy from one buffer
 * to another by 1, then by T threads at once (each its own buffers; default T = the cores this
 * process may run on), for buffers far larger than the caches (64 MiB) and for ones that stay
 * in the L2 (256 KiB). GB/s counts bytes read plus bytes written, summed over the threads; each
 * figure is the median of 7 timed passes. Usage: membw [threads] [MiB]. docs/performance.md quotes it. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

enum { PASSES = 7 };

typedef struct job {
    size_t bytes;
    int reps;
    pthread_barrier_t *start;
    double secs[PASSES]; /* per pass: seconds for reps copies */
    int failed;
} job_t;

static void *copier(void *p)
{
    job_t *j = p;
    char *src = malloc(j->bytes), *dst = malloc(j->bytes);
    if (src == NULL || dst == NULL) {
        j->failed = 1;
        pthread_barrier_wait(j->start);
        for (int i = 0; i < PASSES; i++)
            pthread_barrier_wait(j->start);
        free(src);
        free(dst);
        return NULL;
    }
    memset(src, 1, j->bytes); /* touch every page before timing */
    memset(dst, 2, j->bytes);
    pthread_barrier_wait(j->start);
    for (int i = 0; i < PASSES; i++) {
        pthread_barrier_wait(j->start); /* the threads copy at the same time */
        double t0 = now();
        for (int r = 0; r < j->reps; r++) {
            memcpy(dst, src, j->bytes);
            __asm__ volatile("" : : "r"(dst) : "memory");
        }
        j->secs[i] = now() - t0;
    }
    free(src);
    free(dst);
    return NULL;
}

/* run: T threads copying `bytes` each, reps copies per pass; prints and returns GB/s. */
static double run(int threads, size_t bytes, int reps)
{
    pthread_t tid[64];
    job_t jobs[64];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (int t = 0; t < threads; t++) {
        jobs[t] = (job_t){.bytes = bytes, .reps = reps, .start = &start};
        if (pthread_create(&tid[t], NULL, copier, &jobs[t]) != 0) {
            fprintf(stderr, "membw: cannot start thread %d\n", t);
            exit(1);
        }
    }
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&start);
    double gbps[PASSES];
    for (int i = 0; i < PASSES; i++) {
        double slowest = 0;
        for (int t = 0; t < threads; t++) {
            if (jobs[t].failed) {
                fprintf(stderr, "membw: out of memory for %zu-byte buffers\n", bytes);
                exit(1);
            }
            slowest = jobs[t].secs[i] > slowest ? jobs[t].secs[i] : slowest;
        }
        gbps[i] = 2.0 * (double)bytes * reps * threads / slowest / 1e9;
    }
    qsort(gbps, PASSES, sizeof gbps[0], cmp_double);
    printf("memcpy %8zu KiB x %d thread%s: %6.1f GB/s (read + write, all threads)\n", bytes >> 10,
           threads, threads > 1 ? "s" : " ", gbps[PASSES / 2]);
    return gbps[PASSES / 2];
}

int main(int argc, char **argv)
{
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    int threads = argc > 1 ? atoi(argv[1]) : cores;
    long mib = argc > 2 ? atol(argv[2]) : 64;
    if (threads < 1 || threads > 64 || mib < 1 || mib > 4096) {
        fprintf(stderr, "usage: membw [threads 1..64] [MiB 1..4096]\n");
        return 2;
    }
    printf("# membw: memcpy bandwidth, median of %d passes, %d core(s) available\n", PASSES, cores);
    size_t big = (size_t)mib << 20, small = (size_t)256 << 10;
    run(1, big, 4);
    if (threads > 1)
        run(threads, big, 4);
    run(1, small, 2000);
    if (threads > 1)
        run(threads, small, 2000);
    return 0;
}
