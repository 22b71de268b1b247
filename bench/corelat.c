/* corelat.c: how far apart two cores are, as a collective's hand-offs see it: the round trip of
 * one cache line bounced between a thread on each (default the first two cores this process may
 * use), in ns, the median of 7 passes of 20,000 round trips. On the development machine (a
 * 2-core KVM guest) it reads about 100 ns while the host runs the two virtual cores near each
 * other and about 420 ns while it runs them apart, which it does from one minute to the next;
 * an 8-byte allreduce then goes from 0.12 to 0.35 us. bench/launch-matrix prints it before each
 * launch so that a slow launch can be told from a slow library. Usage: corelat [cpuA cpuB]. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { TRIPS = 20000, PASSES = 7 };

static _Alignas(64) volatile uint64_t ball;
static int cpu_b;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

/* The other side answers every odd value with the next even one. */
static void *answer(void *arg)
{
    (void)arg;
    if (pin(cpu_b) != 0)
        return (void *)1;
    for (uint64_t i = 1; i <= (uint64_t)TRIPS * PASSES; i++) {
        while (ball != 2 * i - 1)
            ;
        ball = 2 * i;
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int cpu_a = -1;
    cpu_b = -1;
    if (argc == 3) {
        cpu_a = atoi(argv[1]);
        cpu_b = atoi(argv[2]);
    } else {
        cpu_set_t s;
        if (sched_getaffinity(0, sizeof s, &s) != 0)
            return perror("corelat: sched_getaffinity"), 2;
        for (int c = 0; c < CPU_SETSIZE && cpu_b < 0; c++)
            if (CPU_ISSET(c, &s)) {
                if (cpu_a < 0)
                    cpu_a = c;
                else
                    cpu_b = c;
            }
    }
    if (cpu_a < 0 || cpu_b < 0 || cpu_a == cpu_b) {
        fprintf(stderr, "corelat: needs two different cores (usage: corelat [cpuA cpuB])\n");
        return 2;
    }
    if (pin(cpu_a) != 0) {
        fprintf(stderr, "corelat: cannot run on core %d\n", cpu_a);
        return 2;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, answer, NULL) != 0)
        return perror("corelat: pthread_create"), 2;
    double ns[PASSES];
    uint64_t v = 0;
    for (int p = 0; p < PASSES; p++) {
        double t0 = now();
        for (int i = 0; i < TRIPS; i++) {
            ball = ++v; /* odd */
            while (ball != v + 1)
                ;
            v++;
        }
        ns[p] = (now() - t0) * 1e9 / TRIPS;
    }
    void *bad = NULL;
    pthread_join(t, &bad);
    if (bad != NULL) {
        fprintf(stderr, "corelat: cannot run on core %d\n", cpu_b);
        return 2;
    }
    qsort(ns, PASSES, sizeof ns[0], cmp_double);
    printf("%.0f\n", ns[PASSES / 2]);
    return 0;
}
