/* launcher.c: the rank and size that a launcher (torchrun, MPICH's or Intel MPI's Hydra, Open MPI,
 * Slurm) gave this process through its environment, and the store port of a job that such a
 * launcher names (a Slurm step's address too). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/fnv.h"
#include "discover.h"

/* env_int reads a decimal integer, blanks around it allowed (as strtol allows them before). */
static bool env_int(const char *name, long *out)
{
    const char *v = tutti__env_get(name);
    if (v == NULL)
        return false;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    while (end != v && isspace((unsigned char)*end))
        end++;
    if (*end != '\0' || end == v || errno != 0)
        return false;
    *out = x;
    return true;
}

/* set_raw tells whether name is in the environment at all, empty included (tutti__env_get
 * reads an empty value as unset). */
static bool set_raw(const char *name) { return getenv(name) != NULL; }

#define MAX_SIZE (1L << 20)

static const char slurm_how[] = "SLURM_PROCID/SLURM_STEP_NUM_TASKS";

/* srun_pmi: PMI_RANK/PMI_SIZE (rank r of s) are srun's own (--mpi=pmi2, or a cluster whose
 * MpiDefault is pmi2), not an mpiexec's inside the step: srun sets PMI_JOBID to
 * "<job>.<step>", and its PMI numbers are the step's. Such a job is a Slurm step: its port and
 * first node come from Slurm (under PMI's name it met on 29500 at 127.0.0.1). */
static bool srun_pmi(long r, long s)
{
    long pr = -1, ps = -1;
    const char *id = tutti__env_get("PMI_JOBID"), *job = tutti__env_get("SLURM_JOB_ID"),
               *step = tutti__env_get("SLURM_STEP_ID");
    char want[64];
    if (id == NULL || job == NULL || step == NULL || !env_int("SLURM_PROCID", &pr) ||
        !env_int("SLURM_STEP_NUM_TASKS", &ps) || pr != r || ps != s)
        return false;
    snprintf(want, sizeof want, "%s.%s", job, step);
    return strcmp(id, want) == 0;
}

/* Launchers in the order of the design card: torchrun, MPICH/Intel MPI, Open MPI, Slurm. The
 * first set wins (torchrun inside mpirun or srun, mpirun inside an sbatch script), but the two
 * MPI launchers' variables must agree where both are set: one of them leaked in from an outer
 * launcher (mpirun.mpich -n 1 around mpirun.openmpi -n 2 gave every rank PMI_RANK=0,
 * PMI_SIZE=1), and trusting either silently could make each rank a job of its own. Slurm's
 * size is the step's (SLURM_STEP_NUM_TASKS, which only srun sets): a batch script or an salloc
 * shell also has SLURM_PROCID=0 and SLURM_NTASKS, and a program run there without srun is one
 * process, not rank 0 of a job whose other ranks never start. */
tutti_status_t tutti__launcher_rank(int *rank, int *size, const char **how)
{
    static const char *const pairs[][3] = {
        {"RANK", "WORLD_SIZE", "RANK/WORLD_SIZE"},
        {"PMI_RANK", "PMI_SIZE", "PMI_RANK/PMI_SIZE"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK/SIZE"},
        {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", slurm_how},
    };
    int empty = -1; /* a pair set with both halves empty */
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        if (i == 3 && !set_raw("SLURM_STEP_NUM_TASKS"))
            continue; /* not a task of an srun step */
        long r = 0, s = 0;
        bool hr = env_int(pairs[i][0], &r), hs = env_int(pairs[i][1], &s);
        if (!hr && !hs && tutti__env_get(pairs[i][0]) == NULL && tutti__env_get(pairs[i][1]) == NULL) {
            /* Both empty (a template whose values expanded to nothing) counts as unset where
             * another launcher's variables say where this rank is; alone, it is refused below:
             * every rank would run as a job of its own. */
            if (empty < 0 && set_raw(pairs[i][0]) && set_raw(pairs[i][1]))
                empty = (int)i;
            continue;
        }
        if (!hr || !hs || s < 1 || s > MAX_SIZE || r < 0 || r >= s)
            return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                    "bootstrap: %s=\"%s\" and %s=\"%s\" do not make a valid rank and "
                                    "size (need integers with 0 <= rank < size <= %ld); fix the "
                                    "launcher's environment",
                                    pairs[i][0], tutti__env_get(pairs[i][0]) ? tutti__env_get(pairs[i][0]) : "",
                                    pairs[i][1], tutti__env_get(pairs[i][1]) ? tutti__env_get(pairs[i][1]) : "",
                                    MAX_SIZE);
        long r2 = 0, s2 = 0;
        /* RANK/WORLD_SIZE beside a launcher that says otherwise (an MPI's, or a Slurm step's
         * with its task count), and no sign of torchrun (which sets them from its agent inside
         * an mpirun or a step): set by hand or left in the shell (srun passes the environment
         * on), they give every rank the same numbers. Warned, not refused: a launcher of one's
         * own may set them on purpose. */
        bool mpi = false; /* an MPI launcher's pair is set: Slurm's are the step's around it */
        for (size_t j = 1; i == 0 && j <= 3 && tutti__env_get("TORCHELASTIC_RUN_ID") == NULL &&
                           tutti__env_get("GROUP_RANK") == NULL;
             j++) {
            bool both = env_int(pairs[j][0], &r2) && env_int(pairs[j][1], &s2);
            mpi = mpi || (j <= 2 && both);
            if (both && (r2 != r || s2 != s) && !(j == 3 && mpi)) {
                TUTTI__LOG(TUTTI__LOG_WARN,
                           "RANK=%ld and WORLD_SIZE=%ld are set, but %s say rank %ld of %ld: "
                           "RANK/WORLD_SIZE win, so every rank of this %s may take the same "
                           "rank; if they were left in the shell, unset them",
                           r, s, pairs[j][2], r2, s2, j == 3 ? "srun" : "mpirun");
                break;
            }
        }
        if (i == 1 || i == 2) {
            /* The other MPI launcher's pair, where any of it is set, must be whole and agree. */
            const char *const *o = pairs[3 - i];
            bool some = tutti__env_get(o[0]) != NULL || tutti__env_get(o[1]) != NULL;
            if (some && (!env_int(o[0], &r2) || !env_int(o[1], &s2)))
                return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                        "bootstrap: %s say rank %ld of %ld, and beside them "
                                        "%s=\"%s\" and %s=\"%s\" are set but not a rank and "
                                        "size: a leftover of another launcher; unset them",
                                        pairs[i][2], r, s, o[0],
                                        getenv(o[0]) ? getenv(o[0]) : "(unset)", o[1],
                                        getenv(o[1]) ? getenv(o[1]) : "(unset)");
            if (some && (r2 != r || s2 != s))
                return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                        "bootstrap: two launchers' variables disagree: %s say rank "
                                        "%ld of %ld, %s say rank %ld of %ld: one set leaked in from "
                                        "an outer launcher (an mpirun inside another); unset the "
                                        "outer one's, or set RANK and WORLD_SIZE, which win",
                                        pairs[i][2], r, s, o[2], r2, s2);
        }
        *rank = (int)r;
        *size = (int)s;
        *how = pairs[i][2];
        if (i == 1 && srun_pmi(r, s))
            *how = slurm_how;
        return TUTTI_OK;
    }
    if (empty >= 0)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "bootstrap: %s and %s are set but empty, and no other launcher "
                                "says where this process is: every process would run as a job of "
                                "its own; give them values, or unset them for a single process",
                                pairs[empty][0], pairs[empty][1]);
    /* A batch script or an salloc shell is task 0: a higher SLURM_PROCID without a step's
     * task count was set by something else, and a job of one would be wrong for every rank. */
    long task = 0;
    if (set_raw("SLURM_PROCID") && (!env_int("SLURM_PROCID", &task) || task != 0))
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "bootstrap: SLURM_PROCID=\"%s\" is set but SLURM_STEP_NUM_TASKS "
                                "is not, so this is no task of an srun step (a batch script's or "
                                "an salloc shell's own is 0); start the ranks with srun, or set "
                                "RANK and WORLD_SIZE",
                                getenv("SLURM_PROCID"));
    *rank = 0;
    *size = 1;
    *how = "no launcher variables: a single rank";
    long tasks = 0;
    if (env_int("SLURM_NTASKS", &tasks) && tasks > 1)
        TUTTI__LOG(TUTTI__LOG_WARN,
                   "SLURM_NTASKS=%ld, but this process is not a task of an srun step (no "
                   "SLURM_STEP_NUM_TASKS: a batch script or an salloc shell), so it runs as a "
                   "single rank; start the ranks with srun",
                   tasks);
    return TUTTI_OK;
}

bool tutti__launcher_is_slurm(const char *how) { return how == slurm_how; }

bool tutti__hostlist_first(const char *list, char *out, size_t cap)
{
    size_t n = 0, first = 0; /* first: where the bracket's first number starts in out */
    bool in = false, took = false; /* inside [...]; the bracket's first host is copied */
    for (const char *p = list; *p != '\0' && (in || *p != ','); p++) {
        char ch = *p;
        if (ch == '[') {
            if (in || n == 0) /* a host's name does not start with its number range */
                return false;
            in = true;
            took = false;
            first = n;
            continue;
        }
        if (in && took && !(isdigit((unsigned char)ch) || ch == '-' || ch == ',' || ch == ']'))
            return false;
        if (ch == ']') {
            if (!in || !took)
                return false;
            in = false;
            continue;
        }
        if (in) {
            if (took)
                continue; /* past the bracket's first item, which ends at its '-' or ',' */
            if (ch < '0' || ch > '9')
                return false;
        } else if (isspace((unsigned char)ch))
            return false;
        if (n + 1 >= cap)
            return false;
        out[n++] = ch;
        if (in && (p[1] == '-' || p[1] == ',' || p[1] == ']'))
            took = true;
        if (in && p[1] == '-') { /* a range: its end must be a number, not before its start */
            out[n] = '\0';
            char *end;
            errno = 0;
            unsigned long lo = strtoul(out + first, NULL, 10), hi = strtoul(p + 2, &end, 10);
            if (!isdigit((unsigned char)p[2]) || end == p + 2 || errno != 0 || hi < lo)
                return false;
        }
    }
    out[n] = '\0';
    return !in && n > 0;
}

tutti_status_t tutti__slurm_store(char *addr, size_t cap, long *port)
{
    long job = 0, step = 0, nodes = 1;
    if (!env_int("SLURM_JOB_ID", &job) || job < 0)
        job = 0;
    if (!env_int("SLURM_STEP_ID", &step) || step < 0)
        step = 0;
    /* Jobs that share a node, and steps of one job that run at once, get different ports:
     * 1000 jobs in a row and 10 steps of each before two meet. Below Linux's ephemeral range. */
    *port = 20000 + (job % 1000) * 10 + step % 10;
    if (addr == NULL)
        return TUTTI_OK;
    addr[0] = '\0';
    if (set_raw("SLURM_STEP_NUM_NODES") &&
        (!env_int("SLURM_STEP_NUM_NODES", &nodes) || nodes < 1 || nodes > MAX_SIZE))
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "bootstrap: SLURM_STEP_NUM_NODES=\"%s\" is not a node count (1 "
                                "to %ld), so the step's first node, where it meets, is unknown: "
                                "fix it, or set MASTER_ADDR to rank 0's host",
                                getenv("SLURM_STEP_NUM_NODES"), MAX_SIZE);
    if (nodes > 1) {
        const char *list = tutti__env_get("SLURM_STEP_NODELIST");
        if (list == NULL || !tutti__hostlist_first(list, addr, cap))
            return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                    "bootstrap: a Slurm step on %ld nodes, and its node list "
                                    "SLURM_STEP_NODELIST=\"%s\" does not name a first node: set "
                                    "MASTER_ADDR to rank 0's host",
                                    nodes, list ? list : "");
    }
    return TUTTI_OK;
}

/* The Hydra proxy (MPICH's hydra_pmi_proxy, Intel MPI's pmi_proxy) above this process: every
 * rank that one mpiexec starts on a node descends from the same one, through whatever wrapper
 * (a shell script, timeout) sits between. 0 if none within a few generations, or /proc hides
 * them (another PID namespace). */
static long hydra_proxy_pid(void)
{
    long pid = (long)getppid();
    for (int depth = 0; depth < 8 && pid > 1; depth++) {
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            return 0;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        /* "pid (comm) state ppid ...": comm may hold spaces and parentheses; it ends at the
         * last ')'. */
        char *open = strchr(buf, '('), *close = strrchr(buf, ')');
        if (open == NULL || close == NULL || close < open)
            return 0;
        *close = '\0';
        const char *comm = open + 1;
        if (strcmp(comm, "hydra_pmi_proxy") == 0 || strcmp(comm, "pmi_proxy") == 0)
            return pid;
        long parent = 0;
        char state;
        if (sscanf(close + 1, " %c %ld", &state, &parent) != 2)
            return 0;
        pid = parent;
    }
    return 0;
}

/* control_port writes the value of the --control-port argument of process pid (a Hydra
 * proxy's: its mpiexec's host:port); false if it has none. */
static bool control_port(long pid, char *out, size_t cap)
{
    char path[64], args[4096];
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    size_t n = fread(args, 1, sizeof args - 1, f);
    fclose(f);
    args[n] = '\0';
    /* NUL-separated arguments: "--control-port" then its value */
    for (size_t i = 0; i < n; i += strlen(args + i) + 1)
        if (strcmp(args + i, "--control-port") == 0) {
            size_t v = i + strlen(args + i) + 1;
            if (v >= n || args[v] == '\0' || strlen(args + v) >= cap)
                return false;
            snprintf(out, cap, "%s", args + v);
            return true;
        }
    return false;
}

/* name_hash spreads a launcher's job name over the port range alike on every rank. */
static unsigned long name_hash(const char *s) { return tutti__fnv32_str(TUTTI__FNV32_INIT, s); }

bool tutti__hydra_job(char *out, size_t cap)
{
    long proxy;
    /* Only for a rank that Hydra numbered: RANK/WORLD_SIZE win over PMI_* (torchrun inside
     * mpirun, a rank started by hand beside others under an mpiexec), and such a job's ranks
     * need not share an mpiexec. */
    return tutti__env_get("RANK") == NULL && tutti__env_get("WORLD_SIZE") == NULL &&
           (tutti__env_get("PMI_RANK") != NULL || tutti__env_get("PMI_SIZE") != NULL) &&
           (proxy = hydra_proxy_pid()) != 0 && control_port(proxy, out, cap);
}

bool tutti__launcher_port(const char *how, long *port, const char **what)
{
    if (tutti__launcher_is_slurm(how)) {
        *what = "SLURM_JOB_ID and SLURM_STEP_ID";
        return tutti__slurm_store(NULL, 0, port) == TUTTI_OK;
    }
    if (strcmp(how, "OMPI_COMM_WORLD_RANK/SIZE") == 0) {
        const char *id = tutti__env_get("OMPI_MCA_ess_base_jobid");
        *what = "Open MPI's job id OMPI_MCA_ess_base_jobid";
        if (id == NULL || id[0] == '\0') {
            id = tutti__env_get("PMIX_NAMESPACE"); /* Open MPI 5 (PRRTE) */
            *what = "Open MPI's job name PMIX_NAMESPACE";
        }
        if (id == NULL || id[0] == '\0')
            return false;
        *port = TUTTI__JOB_PORT_BASE + (long)(name_hash(id) % TUTTI__JOB_PORTS);
        return true;
    }
    if (strcmp(how, "PMI_RANK/PMI_SIZE") == 0) {
        /* Hydra names no job in the ranks' environment, but its proxy does: every proxy of one
         * mpiexec, on every node, is told mpiexec's own address (--control-port host:port). */
        long proxy = hydra_proxy_pid(), local = 0, size = 0;
        char ctl[256];
        if (proxy != 0 && control_port(proxy, ctl, sizeof ctl)) {
            *what = "the address of Hydra's mpiexec, which its proxies are given";
            *port = TUTTI__JOB_PORT_BASE + (long)(name_hash(ctl) % TUTTI__JOB_PORTS);
            return true;
        }
        /* Else, on one node, the proxy itself; across nodes each has its own. */
        if (proxy == 0 || !env_int("MPI_LOCALNRANKS", &local) || !env_int("PMI_SIZE", &size) ||
            local != size)
            return false;
        *what = "the pid of Hydra's proxy, whose ranks all run on this node";
        *port = TUTTI__JOB_PORT_BASE + proxy % TUTTI__JOB_PORTS;
        return true;
    }
    return false;
}
