/* affinity.c: which cores the worker threads run on (CCL_WORKER_AFFINITY, oneCCL's meaning),
 * taken only from the cores this process is allowed to use (taskset, cgroup cpusets). */
#include <ctype.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"

/* allowed lists the cores sched_getaffinity grants, increasing; returns their number. */
static int allowed(int *out, int cap)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 0;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < cap; c++)
        if (CPU_ISSET(c, &set))
            out[n++] = c;
    return n;
}

static bool in(const int *a, int n, int x)
{
    for (int i = 0; i < n; i++)
        if (a[i] == x)
            return true;
    return false;
}

/* parse_list reads "3,4,5-7" into out; returns the count, or -1 if malformed. */
static int parse_list(const char *s, int *out, int cap)
{
    int n = 0;
    while (*s != '\0') {
        char *end;
        if (!isdigit((unsigned char)*s))
            return -1;
        long lo = strtol(s, &end, 10), hi = lo;
        s = end;
        if (*s == '-') {
            if (!isdigit((unsigned char)s[1]))
                return -1;
            hi = strtol(s + 1, &end, 10);
            s = end;
        }
        if (lo < 0 || hi < lo || hi >= CPU_SETSIZE)
            return -1;
        for (long c = lo; c <= hi; c++) {
            if (n == cap)
                return -1;
            out[n++] = (int)c;
        }
        if (*s == ',' && isdigit((unsigned char)s[1]))
            s++; /* a comma must lead to another entry: "3," and "3,,4" are refused */
        else if (*s != '\0')
            return -1;
    }
    return n;
}

tutti_status_t tutti__worker_cpus(int local_rank, int local_size, int nworkers, int *cpus)
{
    /* On the stack (8 KiB): two threads may create communicators at once. */
    int ok[CPU_SETSIZE], list[CPU_SETSIZE];
    int m = allowed(ok, CPU_SETSIZE);
    const char *v = tutti__env_get("CCL_WORKER_AFFINITY");
    if (strcmp(v, "none") == 0 || m == 0) {
        for (int i = 0; i < nworkers; i++)
            cpus[i] = -1;
        return TUTTI_OK;
    }
    if (strcmp(v, "auto") == 0) {
        /* From the last allowed core down, as oneCCL does, so that the low cores stay with the
         * callers; when workers outnumber cores they share, round robin. */
        for (int i = 0; i < nworkers; i++)
            cpus[i] = ok[m - 1 - (local_rank * nworkers + i) % m];
        return TUTTI_OK;
    }
    char okt[256];
    tutti__format_ranks(okt, sizeof okt, ok, m < 32 ? m : 32, m);
    int n = parse_list(v, list, CPU_SETSIZE);
    if (n < 0)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "CCL_WORKER_AFFINITY=\"%s\" is not auto, none, or a list of cores "
                                "like \"3,4,5-7\"",
                                v);
    if (n != local_size * nworkers)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "CCL_WORKER_AFFINITY=\"%s\" lists %d core(s), but %d local rank(s) "
                                "x %d worker(s) need %d (entry i is for local worker i)",
                                v, n, local_size, nworkers, local_size * nworkers);
    for (int i = 0; i < nworkers; i++) {
        int c = list[local_rank * nworkers + i];
        if (!in(ok, m, c))
            return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                    "CCL_WORKER_AFFINITY names core %d for local rank %d, but this "
                                    "process may only run on cores %s (taskset or cgroup cpuset)",
                                    c, local_rank, okt);
        cpus[i] = c;
    }
    return TUTTI_OK;
}
