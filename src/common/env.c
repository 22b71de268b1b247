/* env.c: the one table of environment variables tutti reads, with defaults and help text. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#include "common.h"
#include "parse_size.h"

/* The help texts are the documentation, in Markdown: docs/configuration.md's table is generated
 * from them and tests/check_env.c fails when the two differ. A range written "(lo..hi)" is
 * probed by that test through a one-rank communicator, so write one only for a knob that
 * communicator creation reads. */
const tutti__env_knob_t tutti__env_knobs[] = {
    {"TUTTI_TIMEOUT", "300",
     "seconds any wait may take before it fails with `TUTTI_ERR_TIMEOUT`, from 0.001 to 1e9; "
     "`tutti_comm_config_t.timeout_s` overrides it"},
    {"TUTTI_UNRESPONSIVE", NULL,
     "seconds a peer may send no heartbeat before a wait fails with `TUTTI_ERR_PEER_FAILED` "
     "naming it unresponsive (stopped by SIGSTOP or a debugger, or frozen); unset: 3 s less "
     "than the timeout, at least half of it"},
    {"TUTTI_FAULT_TAG_XOR", "0",
     "fault injection, for tests: XOR this value (0..4294967295) into the fingerprint that "
     "this rank's collective messages carry, as if it had posted another call; its peers must "
     "fail the call with `TUTTI_ERR_MISMATCH`"},
    {"TUTTI_FAULT_LIVE_ACCEPT_MS", "0",
     "fault injection, for tests: this rank takes the connections of its liveness mesh this "
     "many milliseconds (0..10000) late, as a rank descheduled on a busy node would"},
    {"TUTTI_TRACE", NULL,
     "a file name: every rank writes a Chrome trace-event (Perfetto) JSON file of its "
     "collectives and their phases there when the communicator is destroyed; `%r` becomes the "
     "rank, `%p` the process id; communicators after a job's first add `.comm<k>-<id>`; "
     "clocks are aligned to rank 0's at creation (docs/tracing.md); any rank setting it turns "
     "recording on for all (ranks without it use the lowest such rank's value)"},
    {"TUTTI_TRACE_EVENTS", "1000000",
     "events kept per worker slice of a traced communicator (1000..100000000); later ones are "
     "counted as dropped in the file"},
    {"TUTTI_REPORT", "0",
     "`1` (0..1): rank 0 prints the straggler report (who posted each kind of collective last, "
     "and how long the others waited) to stderr at `tutti_comm_destroy`; any rank setting it "
     "turns recording on for all; `tutti_comm_report` gives it on demand"},
    {"TUTTI_REPORT_CALLS", "65536",
     "collectives (16..10000000) whose post times each rank keeps for the report (the latest)"},
    {"TUTTI_TRANSPORT", "auto",
     "`auto`: shm between ranks of a node, ofi across nodes; `ofi`: libfabric for every peer; "
     "`shm`: shared memory only (an error if the group spans nodes); "
     "`tutti_comm_config_t.transport` overrides it"},
    {"MASTER_ADDR", "127.0.0.1",
     "host of rank 0's rendezvous store, which listens on that address only (a host name that "
     "resolves to a loopback address other than `localhost`'s: on every interface); a job of one "
     "rank serves no store; under srun, unset, the step's first node when it spans several"},
    {"MASTER_PORT", "29500",
     "TCP port of rank 0's rendezvous store (under torchrun, whose agent serves its own store "
     "there, tutti's listens on the next odd port: see `TUTTI_STORE_PORT`); unset, a port of "
     "the job's own where the launcher names the job: under srun see `SLURM_JOB_ID`; under Open "
     "MPI 30000 + a hash of its job id (`OMPI_MCA_ess_base_jobid`, else `PMIX_NAMESPACE`) mod "
     "2000; under MPICH's Hydra 30000 + a hash of the `--control-port` (mpiexec's "
     "host:port) of the Hydra proxy the ranks descend from mod 2000, the same on every node "
     "(without it, and with every rank on one node, the proxy's pid); else 29500"},
    {"TUTTI_STORE_PORT", NULL,
     "TCP port of rank 0's rendezvous store, the same on every rank; unset: `MASTER_PORT`, or "
     "the next odd port above it where `TORCHELASTIC_USE_AGENT_STORE` is `True` (a C program "
     "under torchrun; odd, since Linux hands even ports to outgoing connections first)"},
    {"TORCHELASTIC_USE_AGENT_STORE", NULL,
     "set by torchrun: `True` when its agent serves a store at `MASTER_ADDR:MASTER_PORT`, so "
     "that tutti's own store moves to the next odd port"},
    {"TUTTI_JOB_TOKEN", NULL,
     "the job's secret, the same on every rank (16 characters or more; `tutti_job_token()` makes "
     "one): each rank proves it to the rendezvous store, and the store proves it back, without "
     "sending it; `tutti_comm_config_t.job_token` overrides it. Unset: Open MPI's per-job key, "
     "else a secret rank 0 leaves for the ranks of its host in a file only its user can read "
     "(docs/security.md)"},
    {"XDG_RUNTIME_DIR", NULL,
     "where rank 0 leaves that file (`$XDG_RUNTIME_DIR/tutti/`); unset, or not this user's (`su`): `/tmp/tutti-<uid>/`"},
    {"OMPI_MCA_orte_precondition_transports", NULL,
     "Open MPI's per-job random key: the job's secret when `TUTTI_JOB_TOKEN` is unset"},
    {"OMPI_MCA_ess_base_jobid", NULL,
     "Open MPI's job id: part of the job's identity at the rendezvous (another job is refused), "
     "and of the store's port when `MASTER_PORT` is unset"},
    {"PMIX_NAMESPACE", NULL,
     "the job's PMIx name (Open MPI 5): the store's port under Open MPI when "
     "`OMPI_MCA_ess_base_jobid` is unset and `MASTER_PORT` too (see `MASTER_PORT`)"},
    {"SLURM_JOB_ID", NULL,
     "Slurm's job id: part of the job's identity at the rendezvous; under srun with "
     "`MASTER_PORT` unset, the store's port is 20000 + 10 x (job id mod 1000) + step id mod 10"},
    {"SLURM_STEP_ID", NULL,
     "Slurm's step id: part of the job's identity at the rendezvous, and of the store's port "
     "under srun"},
    {"GROUP_RANK", NULL,
     "set by torchrun (its node's index): with `TORCHELASTIC_RUN_ID`, the sign that `RANK` and "
     "`WORLD_SIZE` come from torchrun inside an mpirun, not from a shell (else a `RANK` that "
     "disagrees with `PMI_RANK` or `OMPI_COMM_WORLD_RANK` is warned about)"},
    {"TORCHELASTIC_RUN_ID", NULL,
     "torchrun's run id (`--rdzv-id`; its default `none` is ignored): part of the job's identity "
     "at the rendezvous"},
    {"RANK", NULL,
     "rank of this process (torchrun); `LOCAL_RANK` is ignored, tutti finds the nodes itself"},
    {"WORLD_SIZE", NULL, "number of ranks (torchrun)"},
    {"PMI_RANK", NULL, "rank (MPICH Hydra, Intel MPI)"},
    {"PMI_SIZE", NULL, "number of ranks (MPICH Hydra, Intel MPI)"},
    {"PMI_JOBID", NULL,
     "set by srun's PMI-2 (`--mpi=pmi2`) to `<job>.<step>`: where it matches `SLURM_JOB_ID` and "
     "`SLURM_STEP_ID` and `PMI_RANK`/`PMI_SIZE` are the step's, the job is a Slurm step (its "
     "port and first node), not an mpiexec's"},
    {"MPI_LOCALNRANKS", NULL,
     "ranks on this node (MPICH Hydra, Intel MPI): when it equals `PMI_SIZE`, `MASTER_PORT` is "
     "unset and the Hydra proxy shows no `--control-port`, the store's port is derived from the "
     "proxy's pid (see `MASTER_PORT`)"},
    {"OMPI_COMM_WORLD_RANK", NULL, "rank (Open MPI)"},
    {"OMPI_COMM_WORLD_SIZE", NULL, "number of ranks (Open MPI)"},
    {"SLURM_PROCID", NULL,
     "rank (a task of a Slurm `srun` step); above 0 without `SLURM_STEP_NUM_TASKS` it is refused"},
    {"SLURM_STEP_NUM_TASKS", NULL,
     "number of ranks (a Slurm `srun` step; a batch script or an `salloc` shell has none, and "
     "a program run there without srun is a single rank)"},
    {"SLURM_NTASKS", NULL,
     "read only to warn that a program run without srun in an allocation of several tasks is a "
     "single rank"},
    {"SLURM_STEP_NUM_NODES", NULL,
     "nodes of the srun step: more than one, and `MASTER_ADDR` unset, puts the store on the "
     "first node of `SLURM_STEP_NODELIST`"},
    {"SLURM_STEP_NODELIST", NULL, "the srun step's nodes, as a Slurm host list (`node[01-04]`)"},
    {"CCL_ALLREDUCE", NULL, "allreduce algorithm override, e.g. `tree:0-16384;ring:16385-max`"},
    {"CCL_ALLGATHER", NULL, "allgather(v) algorithm override"},
    {"CCL_ALLTOALL", NULL, "alltoall(v) algorithm override"},
    {"CCL_REDUCE_SCATTER", NULL, "reduce_scatter algorithm override"},
    {"CCL_BCAST", NULL, "broadcast algorithm override"},
    {"CCL_REDUCE", NULL, "reduce algorithm override"},
    {"CCL_BARRIER", NULL, "barrier algorithm override"},
    {"CCL_BF16", NULL,
     "bf16 reduction kernel: `scalar`, `avx2`, `avx512f` or `avx512bf` (AVX512_BF16); unset: the "
     "fastest this CPU runs; one the CPU lacks fails communicator creation"},
    {"CCL_FP16", NULL,
     "fp16 reduction kernel: `scalar`, `f16c` (AVX2+F16C; `avx2` names the same), `avx512f` or `avx512fp16` "
     "(AVX512_FP16); unset: the fastest this CPU runs; one the CPU lacks fails communicator "
     "creation"},
    {"CCL_LOG_LEVEL", "warn",
     "`none`, `error`, `warn`, `info`, `debug` or `trace`; messages go to stderr (`none`: not even errors, which every call also returns); read once per process, "
     "when the first communicator is created"},
    {"CCL_WORKER_COUNT", "1",
     "worker threads per rank that run the collectives (1..16); "
     "`tutti_comm_config_t.worker_count` overrides it"},
    {"CCL_WORKER_AFFINITY", "auto",
     "cores for the workers: `auto` (allowed cores that no local rank's calling thread was "
     "given, from the last one down; where none is left, the rank's own calling thread's core, "
     "never another rank's), `none`, or a list like `3,4,5-7` with local ranks x workers "
     "entries, entry i for local worker i"},
    {"CCL_WORKER_WAIT", "1", "`1`: idle workers sleep until work arrives; `0`: they spin"},
    {"TUTTI_BUSY_CORE_NAP", "1",
     "`1`: a wait in a thread bound to one core, whose yields keep handing the core to a busy "
     "thread of its own scheduling group (a DataLoader worker, another program in the same "
     "session or container), naps instead of yielding (docs/placement.md, Waits); `0`: its "
     "waits yield as they did before, which suits a rank whose core its own DataLoader workers "
     "keep fully busy (the yielded time is theirs; napping cost a step there a few percent); "
     "for the whole process, read at each communicator creation"},
    {"TUTTI_CALLER_AFFINITY", "auto",
     "the thread that creates a communicator, when the launcher lets it run on several cores: "
     "`move` (onto a core of its own, keeping every core it may use, and again when a wait finds "
     "it sharing a core with a peer), `pin` (pinned to that core: its later threads inherit the "
     "one core), `none` (never touched), `auto` (`pin` where the node's busy threads outnumber "
     "its cores and its ranks run in different scheduling groups, as under MPICH's mpirun; "
     "`move` elsewhere)"},
    {"TUTTI_INLINE_MAX", NULL,
     "bytes (`4K` and the like too) up to which an asynchronous collective posted on an idle "
     "communicator runs in the caller's thread, which then waits there until the peers join "
     "(a program that posts one and then waits for a peer that joins only after it may stall "
     "until the timeout); unset: never, every asynchronous post returns at once (a blocking "
     "call on an idle communicator always runs in the caller's thread; asynchronous send/recv "
     "never do); `0`: everything runs on the workers, blocking calls too; "
     "`tutti_comm_config_t.inline_max` overrides it (there `0` keeps this variable, and `-1` "
     "runs no asynchronous post inline while blocking calls still may)"},
    {"TUTTI_SHM_SLOT", "65536",
     "bytes per slot of a shared-memory channel (pipelining unit; `64K` and the like too)"},
    {"TUTTI_SHM_SLOTS", "8", "slots per shared-memory channel"},
    {"TUTTI_SHM_WINDOW", "4194304",
     "bytes per rank of the shared window the direct algorithms use (split between the slices "
     "when `CCL_WORKER_COUNT` > 1; `16M` and the like too)"},
    {"TUTTI_OFI_CHUNK", "1073741824",
     "largest piece of one ofi message in bytes, 4096 to 1 GiB (`64M` and the like too; the "
     "ranks use the smallest any of them asks for): a larger message travels as several "
     "tagged messages, up to 8 of them in flight; lower it only for a provider that "
     "mishandles large messages"},
    {"TUTTI_CMA", "auto",
     "single copy between the ranks of a node with `process_vm_readv`, where the algorithms "
     "choose it: `auto` (where every pair of local ranks may, probed at creation; where one may "
     "not, a warning says why), `off` (never, silently)"},
    {"TUTTI_CMA_THP", "auto",
     "where single copy runs, a send buffer that local peers read a second time is backed with "
     "transparent huge pages first (`madvise(MADV_COLLAPSE)`, Linux 6.1+; the 2 MiB pages at "
     "least half inside it; no byte changes), which the kernel pins for the readers far faster "
     "than 4 KiB pages; again where it was mapped anew at the same address (seen by "
     "`PAGEMAP_SCAN`, Linux 6.7+; else every 256th send): `auto` (so, unless THP is `never` in "
     "sysfs), `off` (buffers stay as the program made them)"},
    {"FI_PROVIDER", NULL, "libfabric provider for the ofi transport (libfabric's own variable)"},
    {"TUTTI_SOCKET_IFNAME", NULL,
     "network interface for the rendezvous store's connections, the liveness mesh and ofi "
     "across nodes, in NCCL_SOCKET_IFNAME's syntax: name prefixes \"eth,ib\", \"=eth0\" for "
     "exact names, \"^lo,docker\" to exclude; unset: the interface that reaches MASTER_ADDR "
     "(loopback on one node)"},
};
const size_t tutti__env_knob_count = sizeof tutti__env_knobs / sizeof tutti__env_knobs[0];

static const tutti__env_knob_t *find(const char *name)
{
    for (size_t i = 0; i < tutti__env_knob_count; i++)
        if (strcmp(tutti__env_knobs[i].name, name) == 0)
            return &tutti__env_knobs[i];
    return NULL;
}

const char *tutti__env_get(const char *name)
{
    const tutti__env_knob_t *k = find(name);
    assert(k != NULL && "every variable tutti reads belongs in env.c's table");
    const char *v = getenv(name);
    if (v != NULL && *v != '\0')
        return v;
    return k ? k->deflt : NULL;
}

tutti_status_t tutti__env_long(const char *name, long lo, long hi, long *out)
{
    const char *v = tutti__env_get(name);
    if (v == NULL)
        return TUTTI_OK;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "%s=\"%s\" is not an integer in [%ld, %ld]; fix or unset it", name,
                                v, lo, hi);
    *out = x;
    return TUTTI_OK;
}

tutti_status_t tutti__env_bytes(const char *name, long lo, long hi, long *out)
{
    const char *v = tutti__env_get(name);
    if (v == NULL)
        return TUTTI_OK;
    size_t x = 0;
    if (!tutti__parse_size(v, &x) || x < (size_t)lo || x > (size_t)hi)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "%s=\"%s\" is not a byte count in [%ld, %ld] (digits, then K, M "
                                "or G if you like: 64K, 16M); fix or unset it",
                                name, v, lo, hi);
    *out = (long)x;
    return TUTTI_OK;
}

tutti_status_t tutti__env_double(const char *name, double lo, double hi, double *out)
{
    const char *v = tutti__env_get(name);
    if (v == NULL)
        return TUTTI_OK;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    /* errno is ERANGE for a value too small to hold as a normal double (1e-320): refused too.
     * !(x >= lo && x <= hi) also refuses NaN. Decimal only: strtod would also take hex
     * ("0x10" as 16 s), "infinity" and leading blanks, none of which a user means. */
    if (errno != 0 || end == v || *end != '\0' || strspn(v, "0123456789.eE+-") != strlen(v) ||
        !(x >= lo && x <= hi))
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "%s=\"%s\" is not a number of seconds from %g to %g; fix or unset "
                                "it",
                                name, v, lo, hi);
    *out = x;
    return TUTTI_OK;
}
