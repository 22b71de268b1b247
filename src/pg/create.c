/* create.c: making a communicator: rank and node discovery, the transports and windows that the
 * algorithms' network context holds, the overrides, the liveness mesh and the workers; from
 * the environment (tutti_comm_init_env) or over a caller's store (tutti_comm_init). */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/fnv.h"
#include "../common/sha256.h"
#include "comm.h"
#include "observe.h"

void tutti__comm_free(tutti_comm_t *c)
{
    if (c == NULL)
        return;
    tutti__comm_unregister(c);
    tutti__exec_stop(c, TUTTI_ERR_ABORTED, "the communicator was destroyed first");
    tutti__p2p_close(c, TUTTI_ERR_ABORTED, "the communicator was destroyed first");
    tutti__obs_free(c);
    for (int i = 0; c->net.slices != NULL && i < c->nslices; i++) {
        free(c->net.slices[i].scratch);
        free(c->net.slices[i].aux);
    }
    free(c->net.slices);
    tutti__links_close(&c->net.links);
    tutti__topo_free(&c->net.topo);
    tutti__live_destroy(c->net.live);
    tutti__nodes_free(&c->nodes);
    pthread_mutex_destroy(&c->err_lock);
    c->magic = 0;
    memset(c->secret, 0, sizeof c->secret);
    free(c);
}

/* reserve_small keeps the tail of every region of w (2 x TUTTI__WIN_SMALL_HALF bytes) for the
 * small paths of the direct algorithms, shrinking region_size; a window too small to spare it
 * is left as it is (small_size stays 0, and those paths are not taken). */
static void reserve_small(tutti__window_t *w)
{
    size_t s = 2 * TUTTI__WIN_SMALL_HALF;
    if (w->region_size >= 8 * s) {
        w->region_size -= s;
        w->small_size = s;
    }
}

/* A node whose ranks cannot use single copy moves large alltoalls, allgathers and broadcasts
 * through two copies: said once per process, by the node's first rank, unless the user turned
 * it off (a container's default profile blocks it, and nothing else would tell). */
static void warn_single_copy_off(const tutti_comm_t *c)
{
    static int warned;
    const tutti__window_t *w = c->net.links.wins != NULL ? c->net.links.wins[0] : NULL;
    if (w == NULL || !w->cma_refused || c->nodes.local_rank != 0 ||
        __atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED) != 0)
        return;
    TUTTI__LOG(TUTTI__LOG_WARN,
               "single copy (process_vm_readv) between the ranks of this node is off, so large "
               "alltoalls, allgathers and broadcasts copy twice, through shared memory: %s; "
               "TUTTI_CMA=off says it is meant and hides this",
               w->cma_off);
}

/* The plan is worked out alike on every local rank from the node's exchanged cpusets, but
 * also from settings each rank reads for itself (CCL_WORKER_WAIT, CCL_WORKER_AFFINITY); where
 * those differ between ranks, node_oversubscribed could too, and with it the algorithm that
 * every rank must choose alike (the window's round size, TUTTI__NEEDS_CORES). Any rank's
 * oversubscription counts for its whole node. */
static tutti_status_t agree_oversubscribed(tutti_comm_t *c, tutti__bootstrap_t *bs)
{
    uint8_t mine = c->threads.node_oversubscribed, *all = calloc((size_t)c->size, 1);
    if (all == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory for %d ranks", c->size);
    tutti_status_t st = tutti__bs_allgather(bs, &mine, 1, all);
    for (int r = 0; st == TUTTI_OK && r < c->size; r++)
        if (c->nodes.node_of[r] == c->nodes.node_of[c->rank] && all[r] != 0)
            c->threads.node_oversubscribed = true;
    free(all);
    return st;
}

/*
 * place_caller moves the calling thread onto the core the placement gave it, when the launcher
 * left it free to run on several (torchrun, a plain env launch, MPICH's mpirun without
 * -bind-to): otherwise the kernel often leaves two ranks that have just talked over sockets on
 * one core, and every blocking collective then costs a context switch per hand-off.
 *
 * By default ("move") the thread gets back every core it had, so it is placed, not pinned:
 * threads it creates later inherit its allowed cores, and a thread pool started after
 * init_process_group (PyTorch's intra-op threads, OpenMP) would otherwise all be squeezed onto
 * this one core. Waits keep the placement up (colocate.c). "pin" leaves it pinned, for
 * programs whose calling thread starts no compute threads; "none" never touches it. Only the
 * first communicator a thread makes places it: a later one has its own local rank numbers,
 * which need not match the node's.
 *
 * "auto" (the default) is "move", except where the node is oversubscribed and its ranks run in
 * different scheduling groups (MPICH's Hydra gives each rank a session, so an autogroup): there
 * waits sleep on futex doorbells (prims.c), and each wake-up lets the kernel pull the woken
 * rank onto its waker's core, so unpinned ranks pile up and the placement is lost. 4 ranks on
 * 2 cores under `mpirun.mpich`, allreduce, bench/ab of move against pin (10 launches each,
 * alternated, 2026-11-27): 8 B 8.7 [4.0-23.7] against 4.1 [3.7-15.6] us, 512 B 13.5 [4.3-49.7]
 * against 5.7 [4.1-9.1], 32 KiB 67 [20-197] against 40 [18-58]; a second run 0.33-0.45x the
 * time. Under a plain env launch (one group: waits yield) pinning gained nothing (0.89-1.25x),
 * and there it would cost a later thread pool its cores. Oversubscribed, a rank has no more
 * than a core's share to give such a pool anyway.
 */
static void place_caller(tutti_comm_t *c)
{
    static __thread bool placed;
    const char *mode = c->cfg.caller_affinity;
    if (strcmp(mode, "auto") == 0)
        mode = c->threads.node_oversubscribed && !c->nodes.one_sched_group ? "pin" : "move";
    const tutti__cpuset_t *mine = &c->nodes.local_cpus[c->nodes.local_rank];
    c->net.may_move = strcmp(mode, "move") == 0;
    if (strcmp(mode, "none") == 0 || c->threads.caller < 0 || tutti__cpuset_count(mine) <= 1 ||
        placed)
        return;
    if (tutti__thread_move(c->threads.caller, strcmp(mode, "pin") == 0)) {
        placed = true;
        TUTTI__LOG(TUTTI__LOG_INFO, "rank %d: calling thread %s core %d (TUTTI_CALLER_AFFINITY=%s)",
                   c->rank, strcmp(mode, "pin") == 0 ? "pinned to" : "moved to",
                   c->threads.caller, c->cfg.caller_affinity);
    }
}

/* agree_node_seg sets topo.node_seg to the region bytes of the smallest window among the nodes
 * of several ranks (0 when one of them has none), from an exchange over bs: the hierarchical
 * algorithms cut their segments alike on every node. Collective over bs's ranks; only for a
 * group that spans nodes. */
static tutti_status_t agree_node_seg(tutti_comm_t *c, tutti__bootstrap_t *bs)
{
    tutti__topo_t *t = &c->net.topo;
    uint64_t mine = UINT64_MAX, *all = calloc((size_t)c->size, sizeof *all);
    if (all == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
    if (t->local_size > 1)
        mine = c->net.links.node_wins ? c->net.links.node_wins[0]->region_size : 0;
    tutti_status_t st = tutti__bs_allgather(bs, &mine, sizeof mine, all);
    uint64_t lo = UINT64_MAX;
    for (int r = 0; st == TUTTI_OK && r < c->size; r++)
        lo = all[r] < lo ? all[r] : lo;
    free(all);
    t->node_seg = lo == UINT64_MAX ? 0 : (size_t)lo;
    return st;
}

/* What every rank must have alike, compared at creation before anything is built on it:
 * - the worker count: every rank runs one collective channel per worker slice, and a peer's
 *   channels must be there to be met (ranks given different CCL_WORKER_COUNT failed inside the
 *   shared segment's setup, reported as a bug in tutti, and across nodes not at all);
 * - whether every peer goes over ofi (TUTTI_TRANSPORT=ofi) or the node's over shared memory
 *   (auto, shm): the two sides of a pair waited for each other on different transports until
 *   the timeout, and the text blamed a rank that never arrived;
 * - each CCL_<COLL> override: ranks on different algorithms for one call waited out the
 *   timeout (a window against messages), or some returned OK while the others failed, or failed
 *   "mismatched collectives" over two calls that looked alike.
 * Overrides are compared by a hash of their text: equal meanings spelt differently are refused
 * too, which costs the user one edit. */
typedef struct agreed {
    int32_t workers;
    int32_t all_ofi;
    uint64_t algo[TUTTI_COLL_COUNT]; /* 0: unset */
} agreed_t;

/* text_hash: never 0, which stands for unset. */
static uint64_t text_hash(const char *s) { return tutti__fnv64_str(TUTTI__FNV64_INIT, s) | 1u; }

/* override_text describes what rank q has for coll's variable, for the text of a disagreement:
 * this rank knows its own value, and the others' only as unset, as its own, or as another. */
static const char *override_text(const agreed_t *all, int q, int me, int coll, char *buf,
                                 size_t cap)
{
    const char *v = tutti__env_get(tutti__override_env((tutti_coll_t)coll));
    if (all[q].algo[coll] == 0)
        snprintf(buf, cap, "has it unset");
    else if (all[q].algo[coll] == all[me].algo[coll] && v != NULL)
        snprintf(buf, cap, "has \"%.100s\"", v);
    else
        snprintf(buf, cap, "has it set%s", all[me].algo[coll] != 0 ? " to another value" : "");
    return buf;
}

static tutti_status_t agree_settings(tutti_comm_t *c, tutti__bootstrap_t *bs)
{
    agreed_t mine = {.workers = c->nslices, .all_ofi = strcmp(c->cfg.transport, "ofi") == 0};
    for (int k = 0; k < TUTTI_COLL_COUNT; k++) {
        const char *v = tutti__env_get(tutti__override_env((tutti_coll_t)k));
        mine.algo[k] = v != NULL ? text_hash(v) : 0;
    }
    agreed_t *all = calloc((size_t)c->size, sizeof *all);
    if (all == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory for %d ranks", c->size);
    tutti_status_t st = tutti__bs_allgather(bs, &mine, sizeof mine, all);
    /* Every rank compares with rank 0 and names the first rank that differs: the same text on
     * all of them, but for each rank's own value. */
    for (int r = 1; st == TUTTI_OK && r < c->size; r++) {
        if (all[r].workers != all[0].workers) {
            st = tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                  "the ranks disagree on their worker threads: rank 0 has %d, "
                                  "rank %d has %d (CCL_WORKER_COUNT, or tutti_comm_config_t's "
                                  "worker_count): give every rank the same",
                                  (int)all[0].workers, r, (int)all[r].workers);
            break;
        }
        if (all[r].all_ofi != all[0].all_ofi) {
            const int q = all[0].all_ofi ? 0 : r, o = q == 0 ? r : 0;
            st = tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                  "the ranks disagree on the transport: rank %d has ofi (every "
                                  "peer over libfabric), rank %d auto or shm (the ranks of its "
                                  "node over shared memory), so neither would meet the other "
                                  "(TUTTI_TRANSPORT, or tutti_comm_config_t's transport): give "
                                  "every rank the same",
                                  q, o);
            break;
        }
        for (int k = 0; k < TUTTI_COLL_COUNT && st == TUTTI_OK; k++) {
            if (all[r].algo[k] == all[0].algo[k])
                continue;
            char t0[128], tr[128];
            st = tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                  "the ranks disagree on %s: rank 0 %s, rank %d %s; ranks on "
                                  "different algorithms for one call would wait for each other "
                                  "until the timeout: give every rank the same algorithm "
                                  "override, or none",
                                  tutti__override_env((tutti_coll_t)k),
                                  override_text(all, 0, c->rank, k, t0, sizeof t0), r,
                                  override_text(all, r, c->rank, k, tr, sizeof tr));
        }
    }
    free(all);
    return st;
}

static tutti_status_t start_workers(tutti_comm_t *c)
{
    return tutti__exec_create(c, c->threads.workers, c->cfg.worker_sleep, c->cfg.inline_max);
}

tutti_status_t tutti__comm_create(int rank, int size, tutti__bootstrap_t *bs, tutti__store_t *store,
                                  const tutti__config_t *cfg, const tutti_comm_t *parent,
                                  tutti_comm_t **out)
{
    tutti_status_t st;
    tutti_comm_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
    c->magic = TUTTI__COMM_MAGIC;
    c->rank = rank;
    c->size = size;
    c->cfg = *cfg;
    c->nslices = (int)cfg->workers;
    pthread_mutex_init(&c->err_lock, NULL);
    c->net = (tutti__net_t){
        .rank = rank,
        .size = size,
        .nchan = 1 + c->nslices, /* user send/recv, and one collective channel per slice */
        .timeout_s = cfg->timeout,
        .timeout_given = cfg->timeout_given,
        .aborted = &c->aborted,
    };
    c->net.slices = calloc((size_t)c->nslices, sizeof *c->net.slices);
    if (c->net.slices == NULL) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    if (parent == NULL && size > 1) /* a split's child runs on its parent's slices */
        TUTTI__CHECK_GOTO(agree_settings(c, bs), st, fail);
    TUTTI__CHECK_GOTO(tutti__nodes_discover(bs, &c->nodes), st, fail);
    /* Where the threads go, and whether waits must give the core away at once: from the cores
     * every local rank may use, not only this one's (two ranks bound to a core each are not
     * oversubscribed). A split's child runs on its parent's threads. */
    if (parent != NULL) {
        c->threads = parent->threads;
        c->net.may_move = parent->net.may_move;
    } else {
        TUTTI__CHECK_GOTO(tutti__threads_plan(&c->nodes, c->nslices, !cfg->worker_sleep,
                                              &c->threads),
                          st, fail);
        /* After the agreement: "auto" pins only where the whole node is oversubscribed. */
        TUTTI__CHECK_GOTO(agree_oversubscribed(c, bs), st, fail);
        place_caller(c);
        TUTTI__LOG(TUTTI__LOG_INFO,
                   "rank %d: %d rank(s) on this node, %d core(s) this one may use; %s "
                   "oversubscribed (the node: %s), so waits %s; calling thread's core %d, first "
                   "worker's %d (-1: not pinned)",
                   rank, c->nodes.local_size, c->nodes.ncpus,
                   c->threads.oversubscribed ? "is" : "not",
                   c->threads.node_oversubscribed ? "yes" : "no",
                   c->threads.oversubscribed ? "yield the core at once" : "spin first",
                   c->threads.caller, c->nslices > 0 ? c->threads.workers[0] : -1);
    }
    c->net.oversubscribed = c->threads.oversubscribed;
    c->net.round_bytes = c->threads.node_oversubscribed ? 0 : tutti__round_bytes();
    c->net.sleep_waits = !c->nodes.one_sched_group;
    /* The interface: the liveness mesh listens on it and ofi crosses nodes through it. */
    char ifname[TUTTI__IFNAME_LEN];
    TUTTI__CHECK_GOTO(tutti__local_ip(c->nodes.nnodes, store, c->ip, ifname), st, fail);
    TUTTI__CHECK_GOTO(tutti__links_open(&c->net.links, rank, size, c->net.nchan, cfg->transport,
                                        &c->nodes, c->nodes.nnodes > 1 ? c->ip : NULL, bs),
                      st, fail);
    for (int s = 0; c->net.links.node_wins != NULL && s < c->nslices; s++)
        reserve_small(c->net.links.node_wins[s]);
    warn_single_copy_off(c);
    TUTTI__CHECK_GOTO(tutti__topo_init(&c->net.topo, rank, size, &c->nodes), st, fail);
    if (c->nodes.nnodes > 1)
        TUTTI__CHECK_GOTO(agree_node_seg(c, bs), st, fail);
    c->net.caps = tutti__topo_caps(&c->net.topo, &c->net.links) |
                  (c->threads.node_oversubscribed ? 0u : (unsigned)TUTTI__NEEDS_CORES);
    /* Overrides are checked once the transports are known: "direct" needs the window. */
    TUTTI__CHECK_GOTO(tutti__override_init(c), st, fail);
    c->has_secret = store != NULL && tutti__store_secret(store, c->secret);
    /* ofi connects to a peer on first use, one or two sockets (both sides may connect at once,
     * tcp;ofi_rxm), plus a few for the provider: room for them is checked now, when every rank
     * can still be told, not in the middle of a call. */
    int ofi_peers = 0;
    for (int r = 0; r < size; r++)
        ofi_peers += c->net.links.ofi != NULL && c->net.links.peer_tp[r] == c->net.links.ofi;
    TUTTI__CHECK_GOTO(tutti__live_create(bs, c->ip, ofi_peers > 0 ? ofi_peers + 4 : 0,
                                         &c->net.live),
                      st, fail);
    c->calls = tutti__live_calls(c->net.live);
    /* Heartbeats at least four per unresponsive limit (prims.c), and at least every 250 ms. */
    TUTTI__CHECK_GOTO(tutti__env_double("TUTTI_UNRESPONSIVE", TUTTI__TIMEOUT_MIN, TUTTI__TIMEOUT_MAX,
                                        &c->net.unresp_s),
                      st, fail);
    long tag_xor = 0;
    TUTTI__CHECK_GOTO(tutti__env_long("TUTTI_FAULT_TAG_XOR", 0, (long)UINT32_MAX, &tag_xor), st,
                      fail);
    c->net.tag_xor = (uint32_t)tag_xor;
    double lim = c->net.unresp_s > 0 ? c->net.unresp_s
                 : cfg->timeout - 3.0 > cfg->timeout / 2 ? cfg->timeout - 3.0 : cfg->timeout / 2;
    TUTTI__CHECK_GOTO(tutti__live_beat(c->net.live, lim / 4 < 0.25 ? lim / 4 : 0.25), st, fail);
    TUTTI__CHECK_GOTO(start_workers(c), st, fail);
    TUTTI__CHECK_GOTO(tutti__p2p_open(c), st, fail);
    if (!tutti__comm_register(c)) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    TUTTI__CHECK_GOTO(tutti__obs_open(c, bs), st, fail);
    TUTTI__LOG(TUTTI__LOG_INFO,
               "rank %d/%d: %d node(s) with %d to %d rank(s) each, %d on this one; shm %s, "
               "ofi %s; interface "
               "%s (%s%s); hierarchical algorithms %s",
               rank, size, c->nodes.nnodes, c->net.topo.ppn_min, c->net.topo.ppn_max,
               c->nodes.local_size, c->net.links.shm ? "yes" : "no",
               c->net.links.ofi ? "yes" : "no", ifname, c->ip,
               tutti__env_get("TUTTI_SOCKET_IFNAME") ? ", TUTTI_SOCKET_IFNAME"
               : c->nodes.nnodes > 1                 ? ", the one that reaches MASTER_ADDR"
                                                     : "",
               c->net.caps & TUTTI__NEEDS_NODES ? "on" : "off");
    *out = c;
    return TUTTI_OK;
fail:
    tutti__comm_free(c);
    return st;
}

/* init_solo makes the communicator of a job of one rank: it needs no rendezvous, so it serves
 * no store and takes no port (many single-rank programs may run at once). */
static tutti_status_t init_solo(const tutti__config_t *cfg, tutti_comm_t **comm)
{
    tutti__solo_t *solo = tutti__solo_new();
    if (solo == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
    tutti__bootstrap_t bs = {.rank = 0, .size = 1, .deadline = tutti__now() + cfg->timeout,
                             .oob = tutti__solo_oob(solo), .where = "a one-rank job's own store"};
    tutti_status_t st = tutti__comm_create(0, 1, &bs, NULL, cfg, NULL, comm);
    tutti__solo_free(solo);
    return st;
}

/* set: the variable is in the environment, not empty (tutti__env_get gives defaults). */
static bool set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0';
}

/* store_port: where rank 0's rendezvous store listens. TUTTI_STORE_PORT if set, else
 * MASTER_PORT; with neither, a port of the job's own where the launcher names the job
 * (tutti__launcher_port: Slurm, Open MPI, Hydra's mpiexec), else 29500. But
 * torchrun's agent already serves torch's own store at MASTER_PORT (and says so with
 * TORCHELASTIC_USE_AGENT_STORE), so a C program under torchrun would find its port taken on
 * rank 0's host: tutti then takes the next odd port above it, alike on every rank. Odd,
 * because Linux gives connect()'s local ports even numbers first (and bind(0)'s, which is how
 * torchrun picks MASTER_PORT when not told, odd ones): the even port after an automatic
 * MASTER_PORT was found held by some process's outgoing connection on a busy machine. *given
 * is the port the user gave (MASTER_PORT where the agent moved it, else *port). */
static tutti_status_t store_port(const char *how, long *port, long *given)
{
    const char *what = NULL;
    if (set("TUTTI_STORE_PORT"))
        TUTTI__CHECK(tutti__env_long("TUTTI_STORE_PORT", 1, 65535, port));
    else if (!set("MASTER_PORT") && tutti__launcher_port(how, port, &what))
        TUTTI__LOG(TUTTI__LOG_INFO, "MASTER_PORT is unset: the store takes port %ld, the job's "
                   "own (from %s)", *port, what);
    else
        TUTTI__CHECK(tutti__env_long("MASTER_PORT", 1, 65535, port));
    *given = *port;
    const char *agent = tutti__env_get("TORCHELASTIC_USE_AGENT_STORE");
    if (!set("TUTTI_STORE_PORT") && agent != NULL &&
        (strcmp(agent, "True") == 0 || strcmp(agent, "true") == 0 || strcmp(agent, "1") == 0)) {
        long next = *port + (*port % 2 == 0 ? 1 : 2);
        if (next > 65535)
            return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                    "torchrun's agent store holds MASTER_PORT %ld and tutti's "
                                    "store takes the next odd port, past 65535: set "
                                    "TUTTI_STORE_PORT to a free port",
                                    *port);
        *port = next;
    }
    return TUTTI_OK;
}

/* report_own tells the other ranks, through the store, why this rank refused its settings,
 * then returns that refusal, saying at once what it does. A rank but 0 waits for the store at
 * most REPORT_WAIT_S (or its timeout, if shorter): where every rank has the same bad setting it
 * meets rank 0 at once, and where rank 0 never comes it must not sit out a 300 s timeout to say
 * what it knew at the start. Rank 0 serves the news as long to ranks that come late (its store
 * would stop 2 s after a failure), and stops once every rank has had it. */
#define REPORT_WAIT_S 30.0
static tutti_status_t report_own(const tutti_comm_config_t *config, int rank, int size,
                                 const char *addr, long port, tutti__auth_t *auth,
                                 const tutti__saved_error_t *own_text, tutti_status_t own)
{
    double timeout = 300.0;
    tutti__env_double("TUTTI_TIMEOUT", TUTTI__TIMEOUT_MIN, TUTTI__TIMEOUT_MAX, &timeout);
    if (config != NULL &&
        config->struct_size >= offsetof(tutti_comm_config_t, timeout_s) + sizeof(double) &&
        config->timeout_s >= TUTTI__TIMEOUT_MIN && config->timeout_s <= TUTTI__TIMEOUT_MAX)
        timeout = config->timeout_s;
    if (timeout > REPORT_WAIT_S)
        timeout = REPORT_WAIT_S;
    TUTTI__LOG(TUTTI__LOG_WARN, "rank %d of %d: %s; telling the other ranks through the "
               "rendezvous store at %s:%ld (for at most %.0f s) before failing", rank, size,
               own_text->text, addr, port, timeout);
    tutti__store_t *store = NULL;
    tutti_status_t st = tutti__store_open(rank, size, addr, (int)port, auth,
                                          tutti__now() + timeout, &store);
    memset(auth, 0, sizeof *auth);
    if (st == TUTTI_OK) {
        tutti__store_linger(store, timeout);
        tutti__restore_error(own_text, own);
        tutti__set_error(own, "rank %d refused its own settings: %s", rank, own_text->text);
        tutti__store_close_failed(store, own); /* rank 0 serves the news until all have it */
    }
    return tutti__restore_error(own_text, own);
}

TUTTI_API tutti_status_t tutti_comm_init_env(const tutti_comm_config_t *config, tutti_comm_t **comm)
{
    tutti__tls_error()[0] = '\0';
    if (comm == NULL)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG, "tutti_comm_init_env: comm is NULL");
    *comm = NULL;
    tutti__log_init();
    /* A rank that refuses its own settings (a forced kernel this CPU lacks, a bad CCL_* or
     * TUTTI_* value) still meets the others, if it can tell where, to say so: else they waited
     * out their timeout, then named it as never arrived (or, this rank 0, found no store). */
    tutti__config_t cfg;
    tutti_status_t own = tutti__kernels_init();
    if (own == TUTTI_OK)
        own = tutti__config_read(config, &cfg);
    tutti__saved_error_t own_text;
    tutti__save_error(&own_text);
    const char *how;
    int rank, size;
    TUTTI__CHECK(tutti__launcher_rank(&rank, &size, &how));
    tutti__auth_t auth; /* read even for one rank: a bad token is an error whatever the size */
    TUTTI__CHECK(tutti__auth_from_env(tutti__config_token(config), &auth));
    if (own < 0 && size == 1) {
        memset(&auth, 0, sizeof auth);
        return tutti__restore_error(&own_text, own);
    }
    if (size == 1) {
        memset(&auth, 0, sizeof auth);
        TUTTI__LOG(TUTTI__LOG_INFO, "rank 0 of 1 (%s): no rendezvous", how);
        return init_solo(&cfg, comm);
    }
    const char *addr = tutti__env_get("MASTER_ADDR");
    char slurm_addr[256] = "";
    if (tutti__launcher_is_slurm(how) && !set("MASTER_ADDR")) {
        /* srun gives no rendezvous address: a step across nodes meets on its first node. */
        long unused;
        TUTTI__CHECK(tutti__slurm_store(slurm_addr, sizeof slurm_addr, &unused));
        if (slurm_addr[0] != '\0')
            addr = slurm_addr;
    }
    if (strcmp(addr, "0.0.0.0") == 0) {
        /* "Any address" names no host to meet at. torch's stores take it for this host (connect
         * to 0.0.0.0 reaches the local host); so does tutti, whose store listens on the address
         * it is given: a store on 0.0.0.0 named its secret file for an address no rank's
         * connection comes from, and the ranks of its host were refused. */
        TUTTI__LOG(TUTTI__LOG_INFO, "MASTER_ADDR=0.0.0.0 is taken as 127.0.0.1: this host only "
                   "(across nodes, set it to rank 0's host)");
        addr = "127.0.0.1";
    }
    long port = 29500, given = 29500;
    TUTTI__CHECK(store_port(how, &port, &given));
    if (own < 0)
        return report_own(config, rank, size, addr, port, &auth, &own_text, own);
    TUTTI__LOG(TUTTI__LOG_INFO, "rank %d of %d (%s), rendezvous at %s:%ld (secret: %s)", rank,
               size, how, addr, port, auth.source);
    double deadline = tutti__now() + cfg.timeout;
    tutti__store_t *store = NULL;
    tutti_status_t st = tutti__store_open(rank, size, addr, (int)port, &auth, deadline, &store);
    memset(&auth, 0, sizeof auth);
    bool unreached = st < 0 && strstr(tutti__tls_error(), "could not reach") != NULL;
    if (st < 0 && port != given) /* the port in the error is not the one the user gave */
        tutti__append_error("; under torchrun tutti's store uses port %ld, the next odd port "
                            "after MASTER_PORT %ld (which torchrun's agent store holds): another "
                            "job may hold port %ld (one started with MASTER_PORT=%ld?); set "
                            "TUTTI_STORE_PORT to a free port",
                            port, given, port, port);
    /* The usual cause across nodes: a launcher that passed no MASTER_ADDR. (A Slurm step
     * knows whether it spans nodes, and has its first node's name then.) */
    bool loopback = strncmp(addr, "127.", 4) == 0 || strcmp(addr, "localhost") == 0;
    if (unreached && rank != 0 && !set("MASTER_ADDR") && !tutti__launcher_is_slurm(how))
        tutti__append_error("; MASTER_ADDR was not set, so %s was used, which reaches rank 0's "
                            "store only from its own host: set MASTER_ADDR to rank 0's host for a "
                            "job across nodes",
                            addr);
    else if (unreached && rank != 0 && loopback)
        tutti__append_error("; if the ranks run on several hosts: MASTER_ADDR=%s reaches rank 0's "
                            "store only from its own host, set it to rank 0's host name or "
                            "address", tutti__env_get("MASTER_ADDR"));
    else if (unreached && slurm_addr[0] != '\0')
        tutti__append_error("; %s is the first node of SLURM_STEP_NODELIST, where rank 0 runs "
                            "under srun's block and cyclic distributions: with another, set "
                            "MASTER_ADDR to rank 0's host",
                            addr);
    if (st < 0)
        return st;
    char where[128];
    snprintf(where, sizeof where, "the rendezvous store at %s:%ld", addr, port);
    tutti__bootstrap_t bs = {.rank = rank, .size = size, .deadline = deadline,
                             .oob = tutti__store_oob(store), .where = where,
                             .cancelled = tutti__store_doomed, .cancel_ctx = store};
    st = tutti__comm_create(rank, size, &bs, store, &cfg, NULL, comm);
    if (st < 0) {
        /* A failure met outside the store's waits (a peer that left, whose own wait learned
         * that the rendezvous was failed, e.g. by a second rank 0): say what the store says. */
        tutti__saved_error_t mine;
        tutti__save_error(&mine);
        if (tutti__store_doomed(store) < 0) {
            char doom[TUTTI__ERRLEN];
            snprintf(doom, sizeof doom, "%s", tutti__tls_error());
            tutti__restore_error(&mine, st);
            if (strstr(mine.text, doom) == NULL)
                tutti__append_error("; meanwhile the rendezvous was failed: %s", doom);
        }
    }
    /* Ranks on this host that would not trust the store (another PID namespace or container,
     * where they cannot tell it is their job's) hang up before their hello, and say why
     * themselves; rank 0 waited for them to its deadline and blamed the launch. */
    unsigned unproven = st == TUTTI_ERR_BOOTSTRAP && rank == 0 ? tutti__store_unproven(store) : 0;
    if (unproven > 0 && strstr(tutti__tls_error(), "never arrived") != NULL)
        tutti__append_error("; meanwhile %u connection(s) from this host reached the store and "
                            "hung up before saying which rank they were: ranks that could not "
                            "confirm it is their job's give up so (in another PID namespace or "
                            "container they cannot tell; their own errors say why): if so, set "
                            "TUTTI_JOB_TOKEN to the same random value for every rank",
                            unproven);
    /* A rank given another TUTTI_JOB_TOKEN (or none where the others have one) is refused and
     * says so itself, at once; the ones waiting for it blamed the launch. */
    unsigned unauthed = st == TUTTI_ERR_BOOTSTRAP && rank == 0 ? tutti__store_unauthed(store) : 0;
    if (unauthed > 0 && strstr(tutti__tls_error(), "never arrived") != NULL)
        tutti__append_error("; meanwhile the store refused %u client(s) that did not prove this "
                            "job's secret: a TUTTI_JOB_TOKEN that differs between the ranks (or "
                            "is set on some only), or another job's ranks on this port",
                            unauthed);
    /* A failure is recorded in the store, rank 0's too: the others' waits ask for it and fail
     * at once with its text. (Rank 0's plain close left its server serving them until the
     * deadline, and they reported rank 0 as never arrived.) */
    if (st < 0)
        tutti__store_close_failed(store, st);
    else
        tutti__store_close(store); /* keeps a failure's text */
    if (st == TUTTI_OK)
        tutti__tls_error()[0] = '\0';
    return st;
}

TUTTI_API tutti_status_t tutti_job_token(char *buf, size_t len)
{
    uint8_t bits[(TUTTI_JOB_TOKEN_LEN - 1) / 2];
    if (buf == NULL || len < TUTTI_JOB_TOKEN_LEN)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "tutti_job_token: buf %p of %zu bytes: give at least "
                                "TUTTI_JOB_TOKEN_LEN (%d)",
                                (void *)buf, len, TUTTI_JOB_TOKEN_LEN);
    if (!tutti__random(bits, sizeof bits))
        return tutti__set_error(TUTTI_ERR_SYSTEM, "tutti_job_token: getrandom: %s",
                                strerror(errno));
    tutti__hex(bits, sizeof bits, buf);
    memset(bits, 0, sizeof bits);
    return TUTTI_OK;
}

TUTTI_API tutti_status_t tutti_comm_init(int rank, int size, const tutti_oob_t *oob,
                                         const tutti_comm_config_t *config, tutti_comm_t **comm)
{
    tutti__tls_error()[0] = '\0';
    if (comm == NULL)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG, "tutti_comm_init: comm is NULL");
    *comm = NULL;
    if (size < 1 || rank < 0 || rank >= size)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "tutti_comm_init: rank %d and size %d: need 0 <= rank < size", rank,
                                size);
    if (oob == NULL || oob->put == NULL || oob->get == NULL)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "tutti_comm_init: the out-of-band store (oob, oob->put, oob->get) "
                                "must not be NULL");
    tutti__log_init();
    /* A rank that fails, its own settings refused too, says so in the caller's store: the
     * others, waiting for its keys, stop at once with its reason (else at their timeout,
     * naming it as never arrived). */
    tutti__bootstrap_t bs = {.rank = rank, .size = size, .oob = *oob,
                             .where = "the caller's out-of-band store", .fail_keys = true};
    tutti__config_t cfg;
    tutti_status_t st = tutti__kernels_init();
    if (st == TUTTI_OK)
        st = tutti__config_read(config, &cfg);
    if (st == TUTTI_OK) {
        bs.deadline = tutti__now() + cfg.timeout;
        st = tutti__comm_create(rank, size, &bs, NULL, &cfg, NULL, comm);
    }
    tutti__bs_report(&bs, st);
    return st;
}
