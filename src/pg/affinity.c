/* affinity.c: this rank's share of the node's thread placement: its workers' cores
 * (CCL_WORKER_AFFINITY, oneCCL's meaning, only cores this process may use), its calling
 * thread's core, and whether its waits must yield at once (placement.c works them out). */
#include <ctype.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"

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

/* worker_list fills workers[0..nlocal*nworkers) from CCL_WORKER_AFFINITY's list v, after
 * checking that this rank's entries are cores it may use (the other ranks check theirs). */
static tutti_status_t worker_list(const char *v, const tutti__nodes_t *nodes, int nworkers,
                                  int *workers)
{
    int list[CPU_SETSIZE], ok[CPU_SETSIZE], m = 0; /* on the stack (8 KiB): no shared scratch */
    const tutti__cpuset_t *mine = &nodes->local_cpus[nodes->local_rank];
    for (int c = tutti__cpuset_next(mine, 0); c >= 0 && m < CPU_SETSIZE;
         c = tutti__cpuset_next(mine, c + 1))
        ok[m++] = c;
    if (m == 0)
        return TUTTI_OK; /* the system would not say which cores: leave the workers unpinned */
    char okt[256];
    tutti__format_ranks(okt, sizeof okt, ok, m < 32 ? m : 32, m);
    int n = parse_list(v, list, CPU_SETSIZE), local_size = nodes->local_size;
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
        int c = list[nodes->local_rank * nworkers + i];
        if (!in(ok, m, c))
            return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                    "CCL_WORKER_AFFINITY names core %d for local rank %d, but this "
                                    "process may only run on cores %s (taskset or cgroup cpuset)",
                                    c, nodes->local_rank, okt);
    }
    memcpy(workers, list, (size_t)n * sizeof *workers);
    return TUTTI_OK;
}

tutti_status_t tutti__threads_plan(const tutti__nodes_t *nodes, int nworkers, bool workers_spin,
                                   tutti__threads_t *out)
{
    int nl = nodes->local_size, me = nodes->local_rank;
    const char *v = tutti__env_get("CCL_WORKER_AFFINITY");
    bool automatic = strcmp(v, "auto") == 0;
    int *caller = malloc((size_t)nl * sizeof *caller);
    int *workers = malloc((size_t)nl * (size_t)nworkers * sizeof *workers);
    bool *over = malloc((size_t)nl * sizeof *over);
    tutti_status_t st = TUTTI_OK;
    if (caller == NULL || workers == NULL || over == NULL) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory placing %d local ranks", nl);
        goto done;
    }
    for (int j = 0; j < nl * nworkers; j++)
        workers[j] = -1;
    if (!automatic && strcmp(v, "none") != 0)
        TUTTI__CHECK_GOTO(worker_list(v, nodes, nworkers, workers), st, done);
    if (!tutti__place(nl, nodes->local_cpus, nworkers, workers_spin, automatic, caller, workers,
                      over)) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory placing %d local ranks", nl);
        goto done;
    }
    out->caller = caller[me];
    out->oversubscribed = over[me];
    out->node_oversubscribed = false;
    for (int j = 0; j < nl; j++)
        out->node_oversubscribed |= over[j];
    for (int i = 0; i < nworkers; i++)
        out->workers[i] = workers[me * nworkers + i];
done:
    free(caller);
    free(workers);
    free(over);
    return st;
}
