/* check_cma.c: the single-copy algorithms (alltoall_cma.c, allgather_cma.c, bcast_cma.c over
 * process_vm_readv): exact results at 2 to 4 ranks for plain and v layouts, in place and out,
 * empty and odd-sized blocks; the fallback when single copy is off (TUTTI_CMA=off) or when
 * ptrace rules forbid it (found by the probe at creation: every rank drops CAP_SYS_PTRACE and
 * makes itself non-dumpable); and a read the kernel refuses in the middle of a call, which must
 * fail on every rank, alike, without a hang; where the defaults pick single copy (select.c's
 * ranges, at 2 and 3 ranks), exact with no override; alltoallv's choice block by block
 * (small blocks through the window, large ones read), exact in every mix and seen from outside
 * once reads are refused; and a send buffer read a second time backed with huge pages first
 * (TUTTI_CMA_THP), its bytes unchanged. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"
#include "tutti.h"

/* What block i of rank src's data for rank dst holds: every element tells where it came from. */
static int32_t val(int src, int dst, size_t i)
{
    return (int32_t)(((uint32_t)src * 1000003u + (uint32_t)dst * 10007u + (uint32_t)i * 7u) &
                     0x7fffffffu);
}

/* drop_ptrace takes CAP_SYS_PTRACE out of this process's effective set (root has it, and it
 * lets process_vm_readv past every rule). */
static void drop_ptrace(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) == 0) {
        d[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
        syscall(SYS_capset, &h, d);
    }
}

static tutti_comm_t *init(void)
{
    tutti_comm_t *comm = NULL;
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK) {
        th_fail("init: %s", tutti_last_error());
        return NULL;
    }
    return comm;
}

/* use sets coll's algorithm, reporting a failure. */
static int use(tutti_comm_t *comm, tutti_coll_t coll, const char *algo)
{
    tutti_status_t st = tutti_comm_set_algorithm(comm, coll, algo);
    if (st != TUTTI_OK)
        return th_fail("set_algorithm(%d, %s): %s: %s", (int)coll, algo, tutti_strerror(st),
                       tutti_comm_last_error(comm));
    return 0;
}

/* ---- every layout, exact --------------------------------------------------------------------- */

static const size_t sizes[] = {0, 1, 7, 1031, 65537, (1u << 20) + 3};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static int alltoall_case(tutti_comm_t *comm, int rank, int n, size_t count, bool in_place)
{
    int32_t *s = malloc((size_t)n * count * 4 + 4), *r = malloc((size_t)n * count * 4 + 4);
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < count; i++)
            s[(size_t)j * count + i] = val(rank, j, i);
    memset(r, 0xa5, (size_t)n * count * 4);
    if (in_place)
        memcpy(r, s, (size_t)n * count * 4);
    tutti_status_t st = tutti_alltoall(in_place ? TUTTI_IN_PLACE : s, r, count, TUTTI_INT32, comm,
                                       NULL);
    int rc = st == TUTTI_OK ? 0
                            : th_fail("alltoall %zu: %s: %s", count, tutti_strerror(st),
                                      tutti_comm_last_error(comm));
    for (int j = 0; j < n && rc == 0; j++)
        for (size_t i = 0; i < count && rc == 0; i++)
            if (r[(size_t)j * count + i] != val(j, rank, i))
                rc = th_fail("alltoall %zu%s: block %d [%zu] = %d, want %d", count,
                             in_place ? " in place" : "", j, i, r[(size_t)j * count + i],
                             val(j, rank, i));
    free(s);
    free(r);
    return rc;
}

/* alltoallv with counts that differ per pair (some empty), gaps between blocks. */
static int alltoallv_case(tutti_comm_t *comm, int rank, int n, size_t scale)
{
    size_t sc[8], sd[8], rcn[8], rd[8], so = 0, ro = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = ((size_t)(rank * 3 + j * 5) % 4) * scale; /* what rank sends to j */
        rcn[j] = ((size_t)(j * 3 + rank * 5) % 4) * scale; /* what j sends to rank */
        sd[j] = so;
        so += sc[j] + 3;
        rd[j] = ro;
        ro += rcn[j] + 5;
    }
    int32_t *s = malloc(so * 4 + 4), *r = malloc(ro * 4 + 4);
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < sc[j]; i++)
            s[sd[j] + i] = val(rank, j, i);
    memset(r, 0xa5, ro * 4);
    tutti_status_t st = tutti_alltoallv(s, sc, sd, r, rcn, rd, TUTTI_INT32, comm, NULL);
    int rc = st == TUTTI_OK ? 0
                            : th_fail("alltoallv x%zu: %s: %s", scale, tutti_strerror(st),
                                      tutti_comm_last_error(comm));
    for (int j = 0; j < n && rc == 0; j++) {
        for (size_t i = 0; i < rcn[j] && rc == 0; i++)
            if (r[rd[j] + i] != val(j, rank, i))
                rc = th_fail("alltoallv x%zu: from %d [%zu] = %d, want %d", scale, j, i,
                             r[rd[j] + i], val(j, rank, i));
        if (rc == 0 && r[rd[j] + rcn[j]] != (int32_t)0xa5a5a5a5)
            rc = th_fail("alltoallv x%zu: the gap after rank %d's block was written", scale, j);
    }
    free(s);
    free(r);
    return rc;
}

static int allgather_case(tutti_comm_t *comm, int rank, int n, size_t count, bool in_place)
{
    int32_t *s = malloc(count * 4 + 4), *r = malloc((size_t)n * count * 4 + 4);
    for (size_t i = 0; i < count; i++)
        s[i] = val(rank, 0, i);
    memset(r, 0xa5, (size_t)n * count * 4);
    if (in_place)
        memcpy(r + (size_t)rank * count, s, count * 4);
    tutti_status_t st = tutti_allgather(in_place ? TUTTI_IN_PLACE : s, r, count, TUTTI_INT32, comm,
                                        NULL);
    int rc = st == TUTTI_OK ? 0
                            : th_fail("allgather %zu: %s: %s", count, tutti_strerror(st),
                                      tutti_comm_last_error(comm));
    for (int j = 0; j < n && rc == 0; j++)
        for (size_t i = 0; i < count && rc == 0; i++)
            if (r[(size_t)j * count + i] != val(j, 0, i))
                rc = th_fail("allgather %zu%s: block %d [%zu] = %d", count,
                             in_place ? " in place" : "", j, i, r[(size_t)j * count + i]);
    free(s);
    free(r);
    return rc;
}

static int allgatherv_case(tutti_comm_t *comm, int rank, int n, size_t scale)
{
    size_t cn[8], d[8], off = 0;
    for (int j = 0; j < n; j++) {
        cn[j] = (size_t)((j * 7) % 3) * scale; /* rank 0's block is empty */
        d[j] = off;
        off += cn[j] + 2;
    }
    int32_t *s = malloc(cn[rank] * 4 + 4), *r = malloc(off * 4 + 4);
    for (size_t i = 0; i < cn[rank]; i++)
        s[i] = val(rank, 1, i);
    memset(r, 0xa5, off * 4);
    tutti_status_t st = tutti_allgatherv(s, cn[rank], r, cn, d, TUTTI_INT32, comm, NULL);
    int rc = st == TUTTI_OK ? 0
                            : th_fail("allgatherv x%zu: %s: %s", scale, tutti_strerror(st),
                                      tutti_comm_last_error(comm));
    for (int j = 0; j < n && rc == 0; j++) {
        for (size_t i = 0; i < cn[j] && rc == 0; i++)
            if (r[d[j] + i] != val(j, 1, i))
                rc = th_fail("allgatherv x%zu: from %d [%zu] = %d", scale, j, i, r[d[j] + i]);
        if (rc == 0 && r[d[j] + cn[j]] != (int32_t)0xa5a5a5a5)
            rc = th_fail("allgatherv x%zu: the gap after rank %d's block was written", scale, j);
    }
    free(s);
    free(r);
    return rc;
}

static int bcast_case(tutti_comm_t *comm, int rank, int n, size_t count, int root)
{
    (void)n;
    int32_t *b = malloc(count * 4 + 4);
    for (size_t i = 0; i < count; i++)
        b[i] = rank == root ? val(root, 2, i) : -1;
    tutti_status_t st = tutti_broadcast(b, count, TUTTI_INT32, root, comm, NULL);
    int rc = st == TUTTI_OK ? 0
                            : th_fail("bcast %zu from %d: %s: %s", count, root, tutti_strerror(st),
                                      tutti_comm_last_error(comm));
    for (size_t i = 0; i < count && rc == 0; i++)
        if (b[i] != val(root, 2, i))
            rc = th_fail("bcast %zu from %d: [%zu] = %d", count, root, i, b[i]);
    free(b);
    return rc;
}

/* all_cases runs every layout with the algorithm algo on all three collectives. */
static int all_cases(tutti_comm_t *comm, int rank, int n, const char *algo)
{
    int rc = use(comm, TUTTI_COLL_ALLTOALL, algo) | use(comm, TUTTI_COLL_ALLGATHER, algo) |
             use(comm, TUTTI_COLL_BCAST, algo);
    for (size_t k = 0; k < NSIZES && rc == 0; k++) {
        rc |= alltoall_case(comm, rank, n, sizes[k], false);
        rc |= alltoall_case(comm, rank, n, sizes[k], true);
        rc |= allgather_case(comm, rank, n, sizes[k], false);
        rc |= allgather_case(comm, rank, n, sizes[k], true);
        rc |= bcast_case(comm, rank, n, sizes[k], 0);
        rc |= bcast_case(comm, rank, n, sizes[k], n - 1);
        if (sizes[k] > 0) {
            rc |= alltoallv_case(comm, rank, n, sizes[k]);
            rc |= allgatherv_case(comm, rank, n, sizes[k]);
        }
    }
    return rc;
}

static int exact_rank(int rank, int size, void *arg)
{
    (void)arg;
    tutti_comm_t *comm = init();
    if (comm == NULL)
        return 1;
    int rc = 0;
    if (tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLTOALL, "cma") != TUTTI_OK) {
        /* This machine forbids it (a container's ptrace rules): the fallback tests cover it. */
        if (rank == 0)
            fprintf(stderr, "check_cma: single copy is off here (%s); exact not run\n",
                    tutti_comm_last_error(comm));
    } else {
        rc = all_cases(comm, rank, size, "cma");
    }
    tutti_comm_destroy(comm);
    return rc;
}

/* on_shm runs fn on n ranks over shm with a 240 s deadline and, unless NULL, one variable set. */
static int on_shm(int n, const char *env, th_fn fn, void *arg)
{
    th_opts_t o = TH_OPTS_INIT;
    o.transport = "shm";
    o.timeout_s = 240;
    o.env[0] = env;
    return th_run_opts(n, &o, fn, arg);
}

START_TEST(test_exact)
{
    for (int n = 2; n <= 4; n++)
        ck_assert_msg(on_shm(n, NULL, exact_rank, NULL) == 0, "%d ranks", n);
    /* several workers: broadcast is cut into slices, each with its own window */
    ck_assert(on_shm(3, "CCL_WORKER_COUNT=3", exact_rank, NULL) == 0);
}
END_TEST

/* ---- the defaults: single copy where select.c's ranges put it, exact -------------------------- */

typedef struct pick {
    tutti_coll_t coll;
    size_t bytes;
    const char *two, *more; /* the default at 2 ranks, at more, where single copy is allowed */
} pick_t;

static const pick_t picks[] = {
    {TUTTI_COLL_ALLTOALL, 16u << 10, "direct", "direct"},
    {TUTTI_COLL_ALLTOALL, 64u << 10, "cma", "direct"},
    {TUTTI_COLL_ALLTOALL, 256u << 10, "cma", "cma"},
    {TUTTI_COLL_ALLTOALL, (size_t)1 << 34, "cma", "cma"},
    {TUTTI_COLL_ALLGATHER, 16u << 10, "direct", "direct"},
    {TUTTI_COLL_ALLGATHER, 64u << 10, "cma", "cma"},
    {TUTTI_COLL_ALLGATHER, (32u << 20) - 1, "cma", "cma"},
    {TUTTI_COLL_ALLGATHER, 32u << 20, "cma", "direct"},
    {TUTTI_COLL_BCAST, 16u << 10, "direct", "direct"},
    {TUTTI_COLL_BCAST, 64u << 10, "cma", "direct"},
    {TUTTI_COLL_BCAST, (2u << 20) - 1, "cma", "direct"},
    {TUTTI_COLL_BCAST, 2u << 20, "cma", "cma"},
    {TUTTI_COLL_BCAST, (32u << 20) - 1, "cma", "cma"},
    {TUTTI_COLL_BCAST, 32u << 20, "direct", "direct"},
};

/* Each rank checks every default pick, then runs, with no override, one call of each
 * collective at a size single copy gets by default (where it is allowed), exact; only then
 * does it learn whether single copy is allowed here (an override naming it fails if not). */
static int defaults_rank(int rank, int size, void *arg)
{
    (void)arg;
    tutti_comm_t *comm = init();
    if (comm == NULL)
        return 1;
    const char *got[sizeof picks / sizeof picks[0]];
    for (size_t k = 0; k < sizeof picks / sizeof picks[0]; k++)
        got[k] = tutti_comm_algorithm(comm, picks[k].coll, picks[k].bytes);
    int rc = alltoall_case(comm, rank, size, (256u << 10) / 4, false) |
             alltoall_case(comm, rank, size, (1u << 20) / 4 + 5, true) |
             allgather_case(comm, rank, size, (64u << 10) / 4, false) |
             allgather_case(comm, rank, size, (1u << 20) / 4 + 3, true) |
             bcast_case(comm, rank, size, (1u << 20) / 4, size - 1) |
             bcast_case(comm, rank, size, (4u << 20) / 4 + 1, 0);
    const bool allowed = tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLTOALL, "cma") == TUTTI_OK;
    for (size_t k = 0; k < sizeof picks / sizeof picks[0]; k++) {
        const char *want = !allowed ? "direct" : size == 2 ? picks[k].two : picks[k].more;
        if (got[k] == NULL || strcmp(got[k], want) != 0)
            rc = th_fail("%d ranks, coll %d at %zu bytes: default %s, want %s (single copy %s)",
                         size, (int)picks[k].coll, picks[k].bytes, got[k] ? got[k] : "(NULL)",
                         want, allowed ? "allowed" : "not allowed");
    }
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_defaults)
{
    for (int n = 2; n <= 3; n++)
        ck_assert_msg(on_shm(n, NULL, defaults_rank, NULL) == 0, "%d ranks", n);
    /* not allowed: the same picks must all be direct */
    ck_assert(on_shm(2, "TUTTI_CMA=off", defaults_rank, NULL) == 0);
}
END_TEST

/* ---- single copy off: refused by name, never chosen, the others still exact ---------------------- */

/* What creation wrote to stderr (log lines), caught in a temporary file. */
static char created_log[4096];

static tutti_comm_t *init_caught(void)
{
    fflush(stderr);
    int saved = dup(2);
    FILE *f = tmpfile();
    if (saved < 0 || f == NULL)
        return NULL;
    dup2(fileno(f), 2);
    tutti_comm_t *comm = init();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    size_t n = fread(created_log, 1, sizeof created_log - 1, f);
    created_log[n] = '\0';
    fclose(f);
    return comm;
}

static int off_rank(int rank, int size, void *arg)
{
    const char *why = arg;
    bool ptrace = strcmp(why, "ptrace") == 0;
    if (ptrace) {
        drop_ptrace();
        prctl(PR_SET_DUMPABLE, 0);
    }
    tutti_comm_t *comm = init_caught();
    if (comm == NULL)
        return th_fail("%s: creation failed: %s", why, created_log);
    int rc = 0;
    /* Said once, by the node's first rank, with the cause; not when the user turned it off. */
    bool warned = strstr(created_log, "single copy (process_vm_readv) between the ranks of this "
                                      "node is off") != NULL;
    if (warned != (ptrace && rank == 0) ||
        (warned && strstr(created_log, "ptrace rules forbid it") == NULL))
        rc = th_fail("%s: rank %d %s warned that single copy is off: \"%s\"", why, rank,
                     warned ? "" : "not", created_log);
    /* A forced single-copy algorithm is refused, saying why single copy is off. */
    const char *cause = ptrace ? "Operation not permitted" : "TUTTI_CMA=off";
    static const tutti_coll_t colls[] = {TUTTI_COLL_ALLTOALL, TUTTI_COLL_ALLGATHER,
                                         TUTTI_COLL_BCAST};
    for (int k = 0; k < 3; k++) {
        tutti_status_t st = tutti_comm_set_algorithm(comm, colls[k], "cma");
        if (st != TUTTI_ERR_INVALID_ARG || strstr(tutti_comm_last_error(comm), cause) == NULL ||
            strstr(tutti_comm_last_error(comm), "process_vm_readv") == NULL)
            rc = th_fail("%s: set_algorithm cma gave %s: %s", why, tutti_strerror(st),
                         tutti_comm_last_error(comm));
        static const size_t probe[] = {8, 1u << 20, 64u << 20, (size_t)1 << 34};
        for (size_t p = 0; p < sizeof probe / sizeof probe[0]; p++) {
            const char *a = tutti_comm_algorithm(comm, colls[k], probe[p]);
            if (a == NULL || strcmp(a, "cma") == 0)
                rc = th_fail("%s: %zu bytes would run %s", why, probe[p], a ? a : "(NULL)");
        }
    }
    if (rc == 0)
        rc = all_cases(comm, rank, size, "direct");
    tutti_comm_destroy(comm);
    return rc;
}

/* Where single copy works, or there is no one to copy from (one rank), creation says nothing
 * at the default log level (a one-rank job warned that single copy was off, for no reason). */
static int quiet_rank(int rank, int size, void *arg)
{
    (void)arg;
    tutti_comm_t *comm = init_caught();
    if (comm == NULL)
        return th_fail("creation failed: %s", created_log);
    tutti_comm_destroy(comm);
    if (created_log[0] != '\0')
        return th_fail("rank %d of %d: creation printed \"%s\"", rank, size, created_log);
    return 0;
}

START_TEST(test_quiet)
{
    for (int n = 1; n <= 2; n++)
        ck_assert_msg(on_shm(n, NULL, quiet_rank, NULL) == 0, "%d rank(s)", n);
}
END_TEST

START_TEST(test_off)
{
    ck_assert(on_shm(3, "TUTTI_CMA=off", off_rank, "TUTTI_CMA=off") == 0);
}
END_TEST

START_TEST(test_ptrace_refused)
{
    ck_assert(on_shm(2, NULL, off_rank, "ptrace") == 0);
}
END_TEST

/* arg: "NAME=value", a value the variable does not take: creation refuses it, naming it. */
static int bad_knob_rank(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    const char *set = arg;
    char name[32];
    snprintf(name, sizeof name, "%.*s=", (int)(strchr(set, '=') - set), set);
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (st != TUTTI_ERR_INVALID_ARG || strstr(tutti_last_error(), name) == NULL)
        return th_fail("%s: %s: %s", set, tutti_strerror(st), tutti_last_error());
    return 0;
}

START_TEST(test_bad_knob)
{
    static const char *const bad[] = {"TUTTI_CMA=sometimes", "TUTTI_CMA_THP=yes"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        th_opts_t o = TH_OPTS_INIT;
        o.transport = "shm";
        o.env[0] = bad[i];
        ck_assert_msg(th_run_opts(2, &o, bad_knob_rank, (void *)bad[i]) == 0, "%s", bad[i]);
    }
}
END_TEST

/* ---- huge pages for a send buffer read again (TUTTI_CMA_THP, transport/cma_source.c) ---------- */

#define HUGE_PAGE ((size_t)2 << 20)
#define THP_BLOCK ((size_t)3 << 20) /* bytes per alltoall block: 6 MiB per rank at 2 ranks */

/* huge_kb returns the AnonHugePages (kB) of the mapping that holds p, from /proc/self/smaps; -1
 * where it cannot be read. */
static long huge_kb(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (f == NULL)
        return -1;
    char line[512];
    bool in = false;
    long kb = -1;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb;
}

/* huge_map returns bytes of fresh anonymous memory whose start is 2 MiB-aligned, populated (by
 * the caller's writes) with whatever pages the system gives: its own mapping, so that the
 * mapping's AnonHugePages is this buffer's. */
static void *huge_map(size_t bytes)
{
    char *m = mmap(NULL, bytes + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    char *a = (char *)(((uintptr_t)m + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (a > m)
        munmap(m, (size_t)(a - m));
    munmap(a + bytes, (size_t)(m + HUGE_PAGE - a)); /* the rest of the extra */
    return a;
}

/* Whether this kernel collapses a populated range into huge pages (Linux 6.1+, THP built in,
 * not disabled for this process): the test has nothing to check where it does not. */
static bool kernel_collapses(void)
{
    char *b = huge_map(HUGE_PAGE);
    if (b == NULL)
        return false;
    memset(b, 1, HUGE_PAGE);
    bool ok = madvise(b, HUGE_PAGE, 25 /* MADV_COLLAPSE */) == 0 && huge_kb(b) >= 2048;
    munmap(b, HUGE_PAGE);
    return ok;
}

/* Every rank sends from one buffer of its own mapping three times by single copy. With
 * TUTTI_CMA_THP on ("auto": 3 MiB per peer, the buffer 2 MiB-aligned; "half": 1 MiB per peer
 * at 2 ranks, starting 512 KiB into a huge page, so that no huge page lies wholly inside it and
 * the first is three quarters inside), the first send leaves its pages as they were (a buffer
 * used once would pay the collapse for nothing) and the second has huge pages back the buffer
 * before the peers read it; with it off, never. The results are exact each time, and the
 * sender's bytes unchanged. Where the system already backs fresh memory with huge pages (THP
 * "always") only that is checked. */
static int thp_rank(int rank, int n, void *arg)
{
    bool on = strcmp(arg, "off") != 0, half = strcmp(arg, "half") == 0;
    tutti_comm_t *comm = init();
    if (comm == NULL)
        return 1;
    int rc = use(comm, TUTTI_COLL_ALLTOALL, "cma");
    size_t count = (half ? (size_t)1 << 20 : THP_BLOCK) / 4, total = (size_t)n * count;
    size_t skip = half ? (size_t)512 << 10 : 0, mapped = skip + total * 4;
    char *m = huge_map(mapped);
    int32_t *s = m != NULL ? (int32_t *)(void *)(m + skip) : NULL, *r = malloc(total * 4);
    if (s == NULL || r == NULL)
        rc = th_fail("no memory for %zu bytes", total * 4);
    for (size_t k = 0; rc == 0 && k < total; k++)
        s[k] = val(rank, (int)(k / count), k % count);
    long before = rc == 0 ? huge_kb(s) : -1;
    if (rc == 0 && before < 0)
        rc = th_fail("cannot read this buffer's mapping in /proc/self/smaps");
    for (int call = 1; call <= 3 && rc == 0; call++) {
        memset(r, 0xa5, total * 4);
        tutti_status_t st = tutti_alltoall(s, r, count, TUTTI_INT32, comm, NULL);
        if (st != TUTTI_OK) {
            rc = th_fail("alltoall #%d: %s: %s", call, tutti_strerror(st),
                         tutti_comm_last_error(comm));
            break;
        }
        for (size_t k = 0; k < total && rc == 0; k++) {
            int j = (int)(k / count);
            if (r[k] != val(j, rank, k % count))
                rc = th_fail("alltoall #%d: block %d [%zu] = %d, want %d", call, j, k % count,
                             r[k], val(j, rank, k % count));
            else if (s[k] != val(rank, j, k % count))
                rc = th_fail("alltoall #%d changed the send buffer at [%zu]", call, k);
        }
        /* on: at least one of its 2 MiB pages (a collapse may find no free huge page for one
         * or another on a crowded machine) */
        long kb = huge_kb(s);
        bool good = on && call >= 2 ? kb >= 2048 && kb <= (long)(mapped / 1024) : kb == before;
        if (rc == 0 && before == 0 && !good)
            rc = th_fail("TUTTI_CMA_THP=%s: after send #%d the buffer has %ld kB in huge pages, "
                         "want %s",
                         (const char *)arg, call, kb,
                         on && call >= 2 ? "2048 or more" : "none");
    }
    if (rank == 0 && before > 0)
        fprintf(stderr, "check_cma: fresh memory is already in huge pages here (THP \"always\"): "
                        "only the results are checked\n");
    if (m != NULL)
        munmap(m, mapped);
    free(r);
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_thp)
{
    if (!kernel_collapses()) {
        fprintf(stderr, "check_cma: this kernel does not collapse memory into huge pages "
                        "(MADV_COLLAPSE): test_thp not run\n");
        return;
    }
    ck_assert(on_shm(2, NULL, thp_rank, "auto") == 0);
    ck_assert(on_shm(2, NULL, thp_rank, "half") == 0);
    ck_assert(on_shm(3, "TUTTI_CMA_THP=off", thp_rank, "off") == 0);
}
END_TEST

/* Whether this kernel answers PAGEMAP_SCAN (Linux 6.7), by which tutti tells a buffer mapped anew
 * at an address it collapsed before: without it the remap test has nothing to check. */
static bool kernel_scans(void)
{
    struct {
        uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
        uint64_t inverted, mask, anyof, ret;
    } a;
    uint64_t region[3];
    static char page[4096] __attribute__((aligned(4096)));
    page[0] = 1;
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.start = (uintptr_t)page;
    a.end = a.start + sizeof page;
    a.vec = (uintptr_t)region;
    a.vec_len = 1;
    a.mask = a.ret = (uint64_t)1 << 6;
    bool ok = ioctl(fd, _IOWR('f', 16, a), &a) >= 0;
    close(fd);
    return ok;
}

/* alltoall_checked sends s to r by single copy and checks both (the harness's values). */
static int alltoall_checked(tutti_comm_t *comm, int32_t *s, int32_t *r, size_t count, int rank,
                            int n, const char *what)
{
    size_t total = (size_t)n * count;
    memset(r, 0xa5, total * 4);
    tutti_status_t st = tutti_alltoall(s, r, count, TUTTI_INT32, comm, NULL);
    if (st != TUTTI_OK)
        return th_fail("%s: %s: %s", what, tutti_strerror(st), tutti_comm_last_error(comm));
    for (size_t k = 0; k < total; k++) {
        int j = (int)(k / count);
        if (r[k] != val(j, rank, k % count))
            return th_fail("%s: block %d [%zu] = %d, want %d", what, j, k % count, r[k],
                           val(j, rank, k % count));
        if (s[k] != val(rank, j, k % count))
            return th_fail("%s changed the send buffer at [%zu]", what, k);
    }
    return 0;
}

/* fill writes rank's send buffer: total values, blocks of count. */
static void fill(int32_t *s, size_t total, size_t count, int rank)
{
    for (size_t k = 0; k < total; k++)
        s[k] = val(rank, (int)(k / count), k % count);
}

/* remap_at maps fresh memory over the buffer at p (MAP_FIXED: the old pages go in the same
 * call, so no other thread can take the address between) and fills it as rank's send buffer:
 * what a free and a new allocation of the same size at the same place leave. NULL on failure,
 * with th_fail's message. */
static int32_t *remap_at(void *p, size_t bytes, int rank, size_t count)
{
    void *m = mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                   -1, 0);
    if (m == MAP_FAILED) {
        th_fail("could not map the buffer anew: %s", strerror(errno));
        return NULL;
    }
    fill(m, bytes / 4, count, rank);
    return m;
}

/* sends sends s by single copy `calls` times, each result checked, then (where fresh memory
 * comes in 4 KiB pages: fresh_small) wants s in huge pages, else fails with what and why. */
static int sends(tutti_comm_t *comm, int32_t *s, int32_t *r, size_t count, int rank, int n,
                 int calls, bool fresh_small, const char *what, const char *why)
{
    int rc = 0;
    for (int call = 1; call <= calls && rc == 0; call++)
        rc = alltoall_checked(comm, s, r, count, rank, n, what);
    if (rc == 0 && fresh_small && huge_kb(s) < 2048)
        rc = th_fail("%s: not in huge pages after %d sends (%ld kB)%s", what, calls, huge_kb(s),
                     why);
    return rc;
}

/* A send buffer unmapped and mapped anew at the same address (as glibc does with every large
 * allocation freed and made again, torch's tensors among them) is 4 KiB pages again: tutti must
 * see it and collapse it again on its second send, not take it for the one it collapsed. One
 * mapped anew for every call is collapsed now and then, not every call (each collapse costs
 * more than a copy): of the 10 calls below, at least one and at most four find it collapsed.
 * With gap (edge_rank), the buffer's first huge page lies half in an unmapped gap (glibc's large
 * chunks are not 2 MiB-aligned, and the page below one may be unmapped or another mapping):
 * that end page can never be collapsed, and must not make the buffer look mapped anew at every
 * send; sent 12 times in place, then mapped anew, it is in huge pages again after two sends. */
static int remap_test(int rank, int n, bool gap)
{
    tutti_comm_t *comm = init();
    if (comm == NULL)
        return 1;
    int rc = use(comm, TUTTI_COLL_ALLTOALL, "cma");
    size_t count = THP_BLOCK / 4, total = (size_t)n * count, bytes = total * 4;
    size_t half = gap ? HUGE_PAGE / 2 : 0;
    char *m = huge_map(bytes + half);
    int32_t *s = NULL, *r = malloc(bytes);
    if (m == NULL || r == NULL)
        rc = th_fail("no memory for %zu bytes", bytes);
    else {
        if (half > 0)
            munmap(m, half); /* the gap below */
        s = (int32_t *)(void *)(m + half);
        fill(s, total, count, rank);
    }
    bool fresh_small = rc == 0 && huge_kb(s) == 0; /* else THP "always": nothing to tell */
    if (rc == 0)
        rc = sends(comm, s, r, count, rank, n, gap ? 12 : 2, fresh_small, "first mapping", "");
    if (rc == 0 && (s = remap_at(s, bytes, rank, count)) == NULL)
        rc = 1;
    if (rc == 0)
        rc = sends(comm, s, r, count, rank, n, 2, fresh_small, "mapped anew",
                   gap ? ": its end page in the gap made every send look like a new mapping, "
                         "and collapses backed off"
                       : ": taken for the old one");
    /* mapped anew for every call */
    int collapsed = 0;
    for (int call = 1; call <= 10 && rc == 0 && !gap; call++) {
        if ((s = remap_at(s, bytes, rank, count)) == NULL)
            rc = 1;
        else
            rc = alltoall_checked(comm, s, r, count, rank, n, "a mapping per call");
        collapsed += rc == 0 && huge_kb(s) >= 2048;
    }
    if (rc == 0 && !gap && fresh_small && (collapsed < 1 || collapsed > 4))
        rc = th_fail("a buffer mapped anew for each of 10 calls was collapsed in %d of them, "
                     "want 1 to 4 (%s)",
                     collapsed, collapsed < 1 ? "never again" : "no backing off");
    if (s != NULL)
        munmap(s, bytes);
    free(r);
    tutti_comm_destroy(comm);
    return rc;
}

static int remap_rank(int rank, int n, void *arg)
{
    (void)arg;
    return remap_test(rank, n, false);
}

static int edge_rank(int rank, int n, void *arg)
{
    (void)arg;
    return remap_test(rank, n, true);
}

START_TEST(test_thp_remap)
{
    if (!kernel_collapses() || !kernel_scans()) {
        fprintf(stderr, "check_cma: this kernel does not collapse memory into huge pages "
                        "(MADV_COLLAPSE) or scan page tables (PAGEMAP_SCAN): test_thp_remap "
                        "not run\n");
        return;
    }
    ck_assert(on_shm(2, NULL, remap_rank, NULL) == 0);
    ck_assert(on_shm(3, NULL, remap_rank, NULL) == 0);
    ck_assert(on_shm(2, NULL, edge_rank, NULL) == 0);
}
END_TEST

/* ---- alltoallv: single copy or the window, block by block -------------------------------------- */

/* Block sizes (int32 elements) on both sides of single copy's thresholds (64 KiB at 2 ranks,
 * 256 KiB at more) and far from them. vcount is symmetric in its ranks, so that in place (a
 * block to j as long as the one from j) works too. */
static const size_t vsizes[] = {0, 1, 1000, 16383, 16384, 65535, 65536, 300001};

static size_t vcount(int src, int dst, int shape)
{
    int a = src < dst ? src : dst, b = src < dst ? dst : src;
    return vsizes[(size_t)(a * 3 + b * 5 + shape) % (sizeof vsizes / sizeof vsizes[0])];
}

/* mixed_case runs one alltoallv whose pairs' blocks come from count(src, dst, shape), with a
 * gap of 5 elements after every block, in place or not, and checks every element and gap;
 * or, where fails, that the call failed and left the communicator failed. */
static int mixed_case(tutti_comm_t *comm, int rank, int n, int shape, bool in_place,
                      size_t (*count)(int src, int dst, int shape), bool fails)
{
    size_t sc[8], sd[8], rcn[8], rd[8], so = 0, ro = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = count(rank, j, shape), rcn[j] = count(j, rank, shape);
        sd[j] = so, rd[j] = ro;
        so += sc[j] + 5, ro += rcn[j] + 5;
    }
    int32_t *s = malloc(so * 4 + 4), *r = malloc(ro * 4 + 4);
    memset(r, 0xa5, ro * 4);
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < sc[j]; i++)
            (in_place ? r : s)[(in_place ? rd : sd)[j] + i] = val(rank, j, i);
    tutti_status_t st = tutti_alltoallv(in_place ? TUTTI_IN_PLACE : s, sc, sd, r, rcn, rd,
                                        TUTTI_INT32, comm, NULL);
    int rc = 0;
    if (fails && st == TUTTI_OK)
        rc = th_fail("alltoallv shape %d: an alltoallv that reads from the non-dumpable rank 1 "
                     "succeeded", shape);
    else if (fails && tutti_barrier(comm, NULL) != TUTTI_ERR_COMM_FAILED)
        rc = th_fail("alltoallv shape %d failed (%s), but the communicator is not failed", shape,
                     tutti_comm_last_error(comm));
    else if (st != TUTTI_OK && !fails)
        rc = th_fail("alltoallv shape %d%s: %s: %s", shape, in_place ? " in place" : "",
                     tutti_strerror(st), tutti_comm_last_error(comm));
    for (int j = 0; j < n && rc == 0 && !fails; j++) {
        for (size_t i = 0; i < rcn[j] && rc == 0; i++)
            if (r[rd[j] + i] != val(j, rank, i))
                rc = th_fail("alltoallv shape %d%s: block of %zu from %d [%zu] = %d, want %d",
                             shape, in_place ? " in place" : "", rcn[j], j, i, r[rd[j] + i],
                             val(j, rank, i));
        for (size_t g = 0; g < 5 && rc == 0; g++)
            if (r[rd[j] + rcn[j] + g] != (int32_t)0xa5a5a5a5)
                rc = th_fail("alltoallv shape %d: the gap after rank %d's block was written",
                             shape, j);
    }
    free(s);
    free(r);
    return rc;
}

/* With no override, alltoallv runs single copy where it is allowed (select.c), which sends
 * each block below the plain alltoall's threshold through the window and reads the rest:
 * every mix of the two, in place and not, exact; in a small window (TUTTI_SHM_WINDOW) the small
 * blocks that do not fit are read too. */
static int mixed_rank(int rank, int size, void *arg)
{
    (void)arg;
    tutti_comm_t *comm = init();
    if (comm == NULL)
        return 1;
    int rc = 0;
    for (int shape = 0; shape < 8 && rc == 0; shape++)
        rc = mixed_case(comm, rank, size, shape, false, vcount, false) |
             mixed_case(comm, rank, size, shape, true, vcount, false);
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_alltoallv_mixed)
{
    for (int n = 2; n <= 4; n++)
        ck_assert_msg(on_shm(n, NULL, mixed_rank, NULL) == 0, "%d ranks", n);
    ck_assert_msg(on_shm(3, "TUTTI_SHM_WINDOW=4096", mixed_rank, NULL) == 0, "small window");
    ck_assert_msg(on_shm(2, "TUTTI_CMA=off", mixed_rank, NULL) == 0, "single copy off");
}
END_TEST

/* Which way each block went, seen from outside: once reads from rank 1 are refused (as in
 * refused_rank), an alltoallv whose blocks all lie below single copy's threshold still works
 * (they went through the window), and one where rank 1 sends a block above it fails on every
 * rank. In a window too small for them (arg "small"), the small blocks are read, and fail. */
static size_t small_count(int src, int dst, int shape)
{
    (void)shape;
    return src == dst ? 70000 : 1500 + (size_t)(src + dst); /* own blocks are never read */
}

static size_t large_count(int src, int dst, int shape)
{
    return src == 1 && dst == 0 ? 70000 : small_count(src, dst, shape);
}

static int route_rank(int rank, int size, void *arg)
{
    const bool small_window = arg != NULL;
    tutti_comm_t *comm = init();
    if (comm == NULL)
        return 1;
    if (tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLTOALL, "cma") != TUTTI_OK ||
        tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLTOALL, "auto") != TUTTI_OK) {
        if (rank == 0)
            fprintf(stderr, "check_cma: single copy is off here; route not run\n");
        tutti_comm_destroy(comm);
        return 0;
    }
    drop_ptrace();
    if (rank == 1)
        prctl(PR_SET_DUMPABLE, 0);
    int rc = 0;
    if (tutti_barrier(comm, NULL) != TUTTI_OK) /* every rank has dropped it */
        rc = th_fail("barrier: %s", tutti_comm_last_error(comm));
    if (rc == 0 && !small_window)
        rc = mixed_case(comm, rank, size, 0, false, small_count, false);
    if (rc == 0)
        rc = mixed_case(comm, rank, size, 1, false, small_window ? small_count : large_count,
                        true);
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_alltoallv_route)
{
    for (int n = 2; n <= 3; n++) {
        ck_assert_msg(on_shm(n, NULL, route_rank, NULL) == 0, "%d ranks", n);
        ck_assert_msg(on_shm(n, "TUTTI_SHM_WINDOW=4096", route_rank, "small") == 0,
                      "%d ranks, small window", n);
    }
}
END_TEST

/* ---- a read the kernel refuses in the middle of a call --------------------------------------- */

/* After creation (single copy probed and on) every rank drops CAP_SYS_PTRACE and rank 1 turns
 * non-dumpable: reads from rank 1 now fail with EPERM. Every rank must return an error from the
 * same call (rank 1 too, though its own reads worked), then find the communicator failed. A
 * reader names the read, the fix and rank 1, and rank 1 names the read and the fix; a rank may
 * instead pass on a reader's failure, when that one failed while this one still waited at the
 * call's first barrier (a relay names the failed rank and its call, whose own text says the
 * rest). */
static int refused_rank(int rank, int size, void *arg)
{
    const char *coll = arg;
    tutti_comm_t *comm = init();
    if (comm == NULL)
        return 1;
    if (tutti_comm_set_algorithm(comm, TUTTI_COLL_ALLTOALL, "cma") != TUTTI_OK ||
        tutti_comm_set_algorithm(comm, TUTTI_COLL_BCAST, "cma") != TUTTI_OK) {
        if (rank == 0)
            fprintf(stderr, "check_cma: single copy is off here; refused not run\n");
        tutti_comm_destroy(comm);
        return 0;
    }
    drop_ptrace();
    if (rank == 1)
        prctl(PR_SET_DUMPABLE, 0);
    tutti_barrier(comm, NULL); /* every rank has dropped it */
    int rc = 0;
    size_t count = 4096;
    int32_t *s = calloc((size_t)size * count, 4), *r = calloc((size_t)size * count, 4);
    tutti_status_t st = strcmp(coll, "alltoall") == 0
                            ? tutti_alltoall(s, r, count, TUTTI_INT32, comm, NULL)
                            : tutti_broadcast(s, count, TUTTI_INT32, 1, comm, NULL);
    const char *text = tutti_comm_last_error(comm);
    bool relayed = false;
    for (int r = 0; r < size; r += 2) { /* the readers: 0, and 2 at 3 ranks */
        char relay[96];
        snprintf(relay, sizeof relay, "rank %d's communicator failed (%s) in its call #1 while", r,
                 tutti_strerror(TUTTI_ERR_SYSTEM));
        relayed |= r != rank && strstr(text, relay) != NULL;
    }
    if (relayed)
        fprintf(stderr, "[rank %d] relayed the other reader's failure: %s\n", rank, text);
    if (st == TUTTI_OK)
        rc = th_fail("%s read from a non-dumpable rank 1 succeeded", coll);
    else if (relayed)
        ;
    else if (strstr(text, "process_vm_readv") == NULL || strstr(text, "TUTTI_CMA=off") == NULL)
        rc = th_fail("%s failed (%s) with a text that names neither the call nor the fix: %s", coll,
                     tutti_strerror(st), text);
    if (rank != 1 && !relayed && strstr(text, "rank 1") == NULL)
        rc = th_fail("rank %d's text does not name rank 1: %s", rank, text);
    st = tutti_barrier(comm, NULL);
    if (st != TUTTI_ERR_COMM_FAILED)
        rc = th_fail("after the failed %s, barrier gave %s, want TUTTI_ERR_COMM_FAILED", coll,
                     tutti_strerror(st));
    free(s);
    free(r);
    tutti_comm_destroy(comm);
    return rc;
}

START_TEST(test_read_refused)
{
    for (int n = 2; n <= 3; n++) {
        th_opts_t o = TH_OPTS_INIT;
        o.transport = "shm";
        ck_assert_msg(th_run_opts(n, &o, refused_rank, "alltoall") == 0, "alltoall, %d ranks", n);
        ck_assert_msg(th_run_opts(n, &o, refused_rank, "bcast") == 0, "bcast, %d ranks", n);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cma");
    TCase *tc = tcase_create("cma");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_exact);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_quiet);
    tcase_add_test(tc, test_off);
    tcase_add_test(tc, test_ptrace_refused);
    tcase_add_test(tc, test_bad_knob);
    tcase_add_test(tc, test_read_refused);
    tcase_add_test(tc, test_alltoallv_mixed);
    tcase_add_test(tc, test_alltoallv_route);
    tcase_add_test(tc, test_thp);
    tcase_add_test(tc, test_thp_remap);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
