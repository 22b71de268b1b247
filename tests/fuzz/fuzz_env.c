/* fuzz_env.c: fuzzes the parsers of what users write: the environment's knobs (integers,
 * seconds, byte sizes, worker affinity lists, launcher ranks, job tokens and launcher ids) and
 * the algorithm overrides (CCL_<COLL> / tutti_comm_set_algorithm specs), on a one-rank
 * communicator made once. Whatever the text, a parser accepts it with a value in range or
 * refuses it with a message that names what was wrong, and the communicator stays usable. */
#include <string.h>

#include "../../src/pg/comm.h"
#include "fuzz.h"

static tutti_comm_t *comm;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    setenv("CCL_LOG_LEVEL", "error", 1); /* refusals are the point here, not news */
    tutti__log_init();
    static const char *const unset[] = {"RANK", "WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                                        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                        "SLURM_PROCID", "SLURM_NTASKS", "TUTTI_JOB_TOKEN"};
    for (size_t i = 0; i < sizeof unset / sizeof unset[0]; i++)
        unsetenv(unset[i]);
    if (tutti_comm_init_env(NULL, &comm) != TUTTI_OK) {
        fprintf(stderr, "fuzz_env: cannot make a one-rank communicator: %s\n", tutti_last_error());
        abort();
    }
    return 0;
}

static bool named(const char *name)
{
    return strstr(tutti__tls_error(), name) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char v[300];
    size_t n = size - 1 < sizeof v - 1 ? size - 1 : sizeof v - 1;
    memcpy(v, data + 1, n);
    v[n] = '\0';
    uint8_t what = data[0];
    tutti_status_t st;
    switch (what % 9) {
    case 0: { /* an integer knob */
        long x = -7;
        setenv("CCL_WORKER_COUNT", v, 1);
        st = tutti__env_long("CCL_WORKER_COUNT", 1, 16, &x);
        FUZZ_ASSERT(st == TUTTI_OK ? (x >= 1 && x <= 16) || (v[0] == '\0' && x == 1)
                                   : st == TUTTI_ERR_INVALID_ARG && named("CCL_WORKER_COUNT"));
        unsetenv("CCL_WORKER_COUNT");
        break;
    }
    case 1: { /* seconds */
        double t = -1;
        setenv("TUTTI_TIMEOUT", v, 1);
        st = tutti__env_double("TUTTI_TIMEOUT", 1e-3, 1e9, &t);
        FUZZ_ASSERT(st == TUTTI_OK ? t >= 1e-3 && t <= 1e9
                                   : st == TUTTI_ERR_INVALID_ARG && named("TUTTI_TIMEOUT"));
        unsetenv("TUTTI_TIMEOUT");
        break;
    }
    case 2: { /* byte sizes */
        size_t x = 77;
        if (!tutti__parse_size(v, &x))
            FUZZ_ASSERT(x == 77);
        break;
    }
    case 3: { /* worker affinity lists, placed on a node of 1 to 4 ranks that may all use the
               * cores this process may */
        tutti__cpuset_t sets[4];
        tutti__cpuset_self(&sets[0]);
        tutti__nodes_t nodes = {.nnodes = 1, .local_rank = 0, .local_size = 1 + (what >> 6),
                                .ncpus = 1, .local_cpus = sets, .one_sched_group = true};
        for (int r = 1; r < nodes.local_size; r++)
            sets[r] = sets[0];
        setenv("CCL_WORKER_AFFINITY", v, 1);
        int nw = 1 + (what >> 4) % 4;
        tutti__threads_t th;
        st = tutti__threads_plan(&nodes, nw, true, &th);
        if (st == TUTTI_OK) {
            bool known = tutti__cpuset_count(&sets[0]) > 0;
            FUZZ_ASSERT(th.caller == -1 || (known && tutti__cpuset_has(&sets[0], th.caller)));
            for (int i = 0; i < nw; i++)
                FUZZ_ASSERT(th.workers[i] == -1 ||
                            (known && tutti__cpuset_has(&sets[0], th.workers[i])));
        } else {
            FUZZ_ASSERT(named("CCL_WORKER_AFFINITY"));
        }
        unsetenv("CCL_WORKER_AFFINITY");
        break;
    }
    case 4: { /* launcher ranks */
        char *sep = strchr(v, ' ');
        if (sep != NULL)
            *sep = '\0';
        setenv("RANK", v, 1);
        setenv("WORLD_SIZE", sep ? sep + 1 : "2", 1);
        int rank = -5, sz = -5;
        const char *how = NULL;
        st = tutti__launcher_rank(&rank, &sz, &how);
        FUZZ_ASSERT(st == TUTTI_OK ? rank >= 0 && rank < sz && how != NULL
                                   : named("RANK") && named("WORLD_SIZE"));
        unsetenv("RANK");
        unsetenv("WORLD_SIZE");
        break;
    }
    case 5: { /* job tokens and launcher ids */
        setenv(what & 16 ? "TUTTI_JOB_TOKEN" : "SLURM_JOB_ID", v, 1);
        tutti__auth_t a;
        st = tutti__auth_from_env(what & 32 ? v : NULL, &a);
        if (st == TUTTI_OK)
            FUZZ_ASSERT(a.mode == TUTTI__AUTH_SECRET ? a.have_key : a.mode == TUTTI__AUTH_HOST);
        else
            FUZZ_ASSERT(st == TUTTI_ERR_INVALID_ARG && strlen(v) < 16);
        unsetenv("TUTTI_JOB_TOKEN");
        unsetenv("SLURM_JOB_ID");
        break;
    }
    default: { /* algorithm overrides, then what the communicator answers */
        tutti_coll_t coll = (tutti_coll_t)((what >> 4) % TUTTI_COLL_COUNT);
        st = tutti_comm_set_algorithm(comm, coll, v);
        FUZZ_ASSERT(st == TUTTI_OK || st == TUTTI_ERR_INVALID_ARG);
        for (size_t b = 0; b < 4; b++)
            FUZZ_ASSERT(tutti_comm_algorithm(comm, coll, b << (8 * b)) != NULL);
        int x = 3, y = 0;
        FUZZ_ASSERT(tutti_allreduce(&x, &y, 1, TUTTI_INT32, TUTTI_SUM, comm, NULL) == TUTTI_OK &&
                    y == 3);
        break;
    }
    }
    return 0;
}
