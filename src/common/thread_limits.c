/* thread_limits.c: why a thread could not start, in words a user can act on: pthread_create's
 * EAGAIN is the user's limit of processes and threads, the system's, or an address-space limit
 * (ulimit -v) too small for one more thread's stack, and each asks for a different fix. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common.h"

/* mapped_bytes is this process's virtual size now; 0 if /proc cannot say. */
static unsigned long long mapped_bytes(void)
{
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return 0;
    if (fscanf(f, "%llu", &pages) != 1)
        pages = 0;
    fclose(f);
    return pages * (unsigned long long)sysconf(_SC_PAGESIZE);
}

/* stack_bytes is the stack a new thread gets by default (ulimit -s, as glibc takes it). */
static unsigned long long stack_bytes(void)
{
    pthread_attr_t a;
    size_t size = 8u << 20;
    if (pthread_attr_init(&a) == 0) {
        (void)pthread_attr_getstacksize(&a, &size);
        pthread_attr_destroy(&a);
    }
    return size;
}

const char *tutti__thread_fail_why(int rc, char *buf, size_t cap)
{
    if (rc != EAGAIN) {
        snprintf(buf, cap, "%s", strerror(rc));
        return buf;
    }
    struct rlimit as = {RLIM_INFINITY, RLIM_INFINITY};
    getrlimit(RLIMIT_AS, &as);
    unsigned long long mapped = mapped_bytes(), stack = stack_bytes();
    if (as.rlim_cur != RLIM_INFINITY && mapped + stack > (unsigned long long)as.rlim_cur) {
        snprintf(buf, cap,
                 "%s: its address-space limit (RLIMIT_AS, ulimit -v: %llu KiB) leaves no room "
                 "for another thread's stack of %llu KiB beside the %llu KiB mapped: raise "
                 "ulimit -v, or lower the stack size (ulimit -s)",
                 strerror(rc), (unsigned long long)as.rlim_cur >> 10, stack >> 10, mapped >> 10);
        return buf;
    }
    struct rlimit np = {RLIM_INFINITY, RLIM_INFINITY};
    getrlimit(RLIMIT_NPROC, &np);
    char lim[32] = "unlimited";
    if (np.rlim_cur != RLIM_INFINITY)
        snprintf(lim, sizeof lim, "%llu", (unsigned long long)np.rlim_cur);
    snprintf(buf, cap,
             "%s: this user's limit of processes and threads (RLIMIT_NPROC, ulimit -u: %s, "
             "counting every job of the user) or the system's (/proc/sys/kernel/threads-max, a "
             "cgroup's pids.max) is reached: raise it, or run fewer threads (CCL_WORKER_COUNT, "
             "OMP_NUM_THREADS)",
             strerror(rc), lim);
    return buf;
}
