/* comm.c: the communicator's life cycle: creation from the environment or a caller's store
 * (rank discovery, node discovery, transports, liveness mesh), the registry of live handles,
 * accessors, error texts, and destruction. */
#include <arpa/inet.h>
#include <limits.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"

/* ---- registry of live communicators: lets every call reject a destroyed or bogus handle ---- */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static const tutti_comm_t **reg;
static size_t reg_n, reg_cap;

static bool reg_add(const tutti_comm_t *c)
{
    pthread_mutex_lock(&reg_lock);
    if (reg_n == reg_cap) {
        size_t cap = reg_cap ? reg_cap * 2 : 8;
        const tutti_comm_t **r = realloc(reg, cap * sizeof *r);
        if (r == NULL) {
            pthread_mutex_unlock(&reg_lock);
            return false;
        }
        reg = r;
        reg_cap = cap;
    }
    reg[reg_n++] = c;
    pthread_mutex_unlock(&reg_lock);
    return true;
}

static void reg_remove(const tutti_comm_t *c)
{
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < reg_n; i++)
        if (reg[i] == c) {
            reg[i] = reg[--reg_n];
            break;
        }
    pthread_mutex_unlock(&reg_lock);
}

bool tutti__comm_valid(const tutti_comm_t *c)
{
    if (c == NULL)
        return false;
    bool found = false;
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < reg_n && !found; i++)
        found = reg[i] == c;
    pthread_mutex_unlock(&reg_lock);
    return found && c->magic == TUTTI__COMM_MAGIC;
}

/* ---- errors ---- */

tutti_status_t tutti__comm_fail(tutti_comm_t *c, tutti_status_t status, const char *msg)
{
    pthread_mutex_lock(&c->err_lock);
    if (c->failed == TUTTI_OK) {
        snprintf(c->failed_msg, sizeof c->failed_msg, "%s", msg);
        __atomic_store_n(&c->failed, status, __ATOMIC_RELEASE);
        TUTTI__LOG(TUTTI__LOG_ERROR, "%s", msg); /* msg names the rank already */
    }
    snprintf(c->last_error, sizeof c->last_error, "%s", msg);
    pthread_mutex_unlock(&c->err_lock);
    snprintf(tutti__tls_error(), TUTTI__ERRLEN, "%s", msg);
    return status;
}

tutti_status_t tutti__comm_error(tutti_comm_t *c, tutti_status_t status, const char *fmt, ...)
{
    char msg[TUTTI__ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&c->err_lock);
    snprintf(c->last_error, sizeof c->last_error, "%s", msg);
    pthread_mutex_unlock(&c->err_lock);
    snprintf(tutti__tls_error(), TUTTI__ERRLEN, "%s", msg);
    return status;
}

/* ---- rank discovery ---- */

static bool env_int(const char *name, long *out)
{
    const char *v = tutti__env_get(name);
    if (v == NULL)
        return false;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end != '\0' || end == v)
        return false;
    *out = x;
    return true;
}

/* Launchers in the order of the design card: torchrun, MPICH/Intel MPI, Open MPI, Slurm. */
static tutti_status_t discover_rank(int *rank, int *size, const char **how)
{
    static const char *const pairs[][3] = {
        {"RANK", "WORLD_SIZE", "RANK/WORLD_SIZE"},
        {"PMI_RANK", "PMI_SIZE", "PMI_RANK/PMI_SIZE"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK/SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_PROCID/SLURM_NTASKS"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        long r = 0, s = 0;
        bool hr = env_int(pairs[i][0], &r), hs = env_int(pairs[i][1], &s);
        if (!hr && !hs && tutti__env_get(pairs[i][0]) == NULL && tutti__env_get(pairs[i][1]) == NULL)
            continue;
        if (!hr || !hs || s < 1 || s > (1 << 20) || r < 0 || r >= s)
            return tutti__set_error(TUTTI_ERR_BOOTSTRAP,
                                    "bootstrap: %s=\"%s\" and %s=\"%s\" do not make a valid rank and "
                                    "size (need 0 <= rank < size); fix the launcher's environment",
                                    pairs[i][0], tutti__env_get(pairs[i][0]) ? tutti__env_get(pairs[i][0]) : "",
                                    pairs[i][1], tutti__env_get(pairs[i][1]) ? tutti__env_get(pairs[i][1]) : "");
        *rank = (int)r;
        *size = (int)s;
        *how = pairs[i][2];
        return TUTTI_OK;
    }
    *rank = 0;
    *size = 1;
    *how = "no launcher variables: a single rank";
    return TUTTI_OK;
}

/* ---- node discovery ---- */

/* Ranks share memory when they share a host, a boot, and the same /dev/shm file system (not
 * the mount namespace: `ip netns exec` gives every process its own, over the same /dev/shm).
 * Ranks in different network namespaces count as different nodes: that is how the multi-host
 * tests run several "hosts" on one machine. */
typedef struct node_info {
    char host[64];
    char boot_id[40];
    uint64_t netns, shm_dev;
    int32_t pid;
    int32_t ncpus; /* cores this process may run on */
} node_info_t;

static uint64_t inode_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static uint64_t device_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_dev : 0;
}

static void read_node_info(node_info_t *ni)
{
    memset(ni, 0, sizeof *ni);
    gethostname(ni->host, sizeof ni->host - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        if (fgets(ni->boot_id, sizeof ni->boot_id, f) == NULL)
            ni->boot_id[0] = '\0';
        fclose(f);
    }
    ni->netns = inode_of("/proc/self/ns/net");
    ni->shm_dev = device_of("/dev/shm");
    ni->pid = (int32_t)getpid();
    cpu_set_t set;
    ni->ncpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

static bool same_node(const node_info_t *a, const node_info_t *b)
{
    return strcmp(a->host, b->host) == 0 && strcmp(a->boot_id, b->boot_id) == 0 &&
           a->netns == b->netns && a->shm_dev == b->shm_dev;
}

static tutti_status_t find_nodes(tutti_comm_t *c, tutti__bootstrap_t *bs, int *ncpus)
{
    node_info_t mine, *all = calloc((size_t)c->size, sizeof *all);
    c->node_of = calloc((size_t)c->size, sizeof(int));
    c->local_ranks = calloc((size_t)c->size, sizeof(int));
    if (all == NULL || c->node_of == NULL || c->local_ranks == NULL) {
        free(all);
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "bootstrap: out of memory for %d ranks", c->size);
    }
    read_node_info(&mine);
    tutti_status_t st = tutti__bs_allgather(bs, &mine, sizeof mine, all);
    if (st < 0) {
        free(all);
        return st;
    }
    c->nnodes = 0;
    for (int r = 0; r < c->size; r++) {
        c->node_of[r] = -1;
        for (int q = 0; q < r; q++)
            if (same_node(&all[q], &all[r])) {
                c->node_of[r] = c->node_of[q];
                break;
            }
        if (c->node_of[r] < 0)
            c->node_of[r] = c->nnodes++;
    }
    c->local_size = 0;
    for (int r = 0; r < c->size; r++)
        if (c->node_of[r] == c->node_of[c->rank]) {
            if (r == c->rank)
                c->local_rank = c->local_size;
            c->local_ranks[c->local_size++] = r;
        }
    *ncpus = mine.ncpus;
    free(all);
    return TUTTI_OK;
}

/* The address other ranks reach this one at: loopback on one node (the only safe choice on a
 * machine whose other interfaces lead nowhere), else the one that routes to MASTER_ADDR. */
static void pick_local_ip(tutti_comm_t *c, tutti__store_t *store, char ip[64])
{
    snprintf(ip, 64, "127.0.0.1");
    if (c->nnodes == 1)
        return;
    if (store != NULL) {
        snprintf(ip, 64, "%s", tutti__store_local_ip(store));
        return;
    }
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai = NULL;
    if (getaddrinfo(tutti__env_get("MASTER_ADDR"), "9", &hints, &ai) == 0 && ai != NULL) {
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa;
        socklen_t len = sizeof sa;
        /* connect() on UDP sends nothing: it only asks the kernel for the route. */
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
            inet_ntop(AF_INET, &sa.sin_addr, ip, 64);
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
    }
}

/* ---- creation ---- */

static tutti_status_t read_config(const tutti_comm_config_t *cfg, tutti__config_t *out)
{
    double t = 300.0;
    long workers = 1, worker_wait = 1, inline_max = 65536;
    TUTTI__CHECK(tutti__env_long("CCL_WORKER_COUNT", 1, 16, &workers));
    TUTTI__CHECK(tutti__env_long("TUTTI_INLINE_MAX", 0, LONG_MAX, &inline_max));
    TUTTI__CHECK(tutti__env_long("CCL_WORKER_WAIT", 0, 1, &worker_wait));
    TUTTI__CHECK(tutti__env_double("TUTTI_TIMEOUT", &t));
    const char *transport = tutti__env_get("TUTTI_TRANSPORT");
    if (cfg != NULL) {
        if (cfg->struct_size < offsetof(tutti_comm_config_t, timeout_s) + sizeof(double))
            return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                    "tutti_comm_config_t.struct_size is %zu: initialize the "
                                    "config with TUTTI_COMM_CONFIG_INIT",
                                    cfg->struct_size);
        if (cfg->timeout_s > 0)
            t = cfg->timeout_s;
        if (cfg->struct_size >= offsetof(tutti_comm_config_t, transport) + sizeof(char *) &&
            cfg->transport != NULL)
            transport = cfg->transport;
        if (cfg->struct_size >= offsetof(tutti_comm_config_t, worker_count) + sizeof(int) &&
            cfg->worker_count != 0) {
            if (cfg->worker_count < 1 || cfg->worker_count > 16)
                return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                        "tutti_comm_config_t.worker_count is %d: use 1..16, or 0 "
                                        "for CCL_WORKER_COUNT",
                                        cfg->worker_count);
            workers = cfg->worker_count;
        }
        if (cfg->struct_size >= offsetof(tutti_comm_config_t, inline_max) + sizeof(long) &&
            cfg->inline_max != 0) {
            if (cfg->inline_max < -1)
                return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                        "tutti_comm_config_t.inline_max is %ld: use a byte count, "
                                        "0 for TUTTI_INLINE_MAX, or -1 for never",
                                        cfg->inline_max);
            inline_max = cfg->inline_max; /* -1: no asynchronous post inline, blocking calls may */
        }
    }
    if (strcmp(transport, "auto") != 0 && strcmp(transport, "shm") != 0 &&
        strcmp(transport, "ofi") != 0)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "unknown transport \"%s\" (TUTTI_TRANSPORT or config): valid are "
                                "auto, shm, ofi",
                                transport);
    /* Keep a static copy: sub-communicators inherit it after the caller's string is gone. */
    const char *mode = strcmp(transport, "shm") == 0 ? "shm" : strcmp(transport, "ofi") == 0 ? "ofi" : "auto";
    *out = (tutti__config_t){t, mode, workers, worker_wait != 0, inline_max};
    return TUTTI_OK;
}

static void set_log_level(void)
{
    static const char *const names[] = {"error", "warn", "info", "debug", "trace"};
    const char *v = tutti__env_get("CCL_LOG_LEVEL");
    for (int i = 0; v != NULL && i < 5; i++)
        if (strcmp(v, names[i]) == 0)
            tutti__log_level = i;
}

static void comm_free(tutti_comm_t *c)
{
    if (c == NULL)
        return;
    tutti__exec_stop(c, TUTTI_ERR_ABORTED, "the communicator was destroyed first");
    for (int i = 0; c->slices != NULL && i < c->nslices; i++)
        free(c->slices[i].scratch);
    free(c->slices);
    if (c->shm != NULL)
        c->shm->ops->destroy(c->shm);
    if (c->ofi != NULL)
        c->ofi->ops->destroy(c->ofi);
    tutti__live_destroy(c->live);
    free(c->peer_tp);
    free(c->wins); /* the windows themselves belong to the shm transport */
    free(c->node_of);
    free(c->local_ranks);
    pthread_mutex_destroy(&c->err_lock);
    c->magic = 0;
    free(c);
}

static tutti_status_t connect_transports(tutti_comm_t *c, tutti__bootstrap_t *bs, const char *mode)
{
    bool use_ofi = strcmp(mode, "ofi") == 0;
    if (strcmp(mode, "shm") == 0 && c->nnodes > 1)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "TUTTI_TRANSPORT=shm but the ranks span %d nodes: shared memory only "
                                "reaches ranks of one node; use auto or ofi",
                                c->nnodes);
    c->peer_tp = calloc((size_t)c->size, sizeof *c->peer_tp);
    if (c->peer_tp == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
    /* Each decision below depends only on allgathered facts, so every rank makes the same
     * collective calls in the same order. */
    if (!use_ofi && (c->local_size > 1 || c->nnodes == 1)) {
        TUTTI__CHECK(tutti__shm_create(c, bs, c->local_ranks, c->local_size, c->local_rank, &c->shm,
                                       c->nnodes == 1 ? c->wins : NULL));
        for (int i = 0; i < c->local_size; i++)
            if (c->local_ranks[i] != c->rank)
                c->peer_tp[c->local_ranks[i]] = c->shm;
    }
    if ((use_ofi && c->size > 1) || c->nnodes > 1) {
        int *peers = malloc((size_t)c->size * sizeof(int)), n = 0;
        if (peers == NULL)
            return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
        for (int r = 0; r < c->size; r++)
            if (r != c->rank && c->peer_tp[r] == NULL)
                peers[n++] = r;
        tutti_status_t st = tutti__ofi_create(c, bs, peers, n, c->nnodes == 1, &c->ofi);
        if (st == TUTTI_OK)
            for (int i = 0; i < n; i++)
                c->peer_tp[peers[i]] = c->ofi;
        free(peers);
        TUTTI__CHECK(st);
    }
    return TUTTI_OK;
}

static tutti_status_t start_workers(tutti_comm_t *c)
{
    int cpus[16];
    TUTTI__CHECK(tutti__worker_cpus(c->local_rank, c->local_size, c->nslices, cpus));
    return tutti__exec_create(c, cpus, c->cfg.worker_sleep, c->cfg.inline_max);
}

tutti_status_t tutti__comm_create(int rank, int size, tutti__bootstrap_t *bs, tutti__store_t *store,
                                  const tutti__config_t *cfg, tutti_comm_t **out)
{
    tutti_status_t st;
    int ncpus = 1;
    char ip[64];
    tutti_comm_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
    c->magic = TUTTI__COMM_MAGIC;
    c->rank = rank;
    c->size = size;
    c->timeout_s = cfg->timeout;
    c->cfg = *cfg;
    c->nslices = (int)cfg->workers;
    c->nchan = 1 + c->nslices; /* user send/recv, and one collective channel per slice */
    pthread_mutex_init(&c->err_lock, NULL);
    c->slices = calloc((size_t)c->nslices, sizeof *c->slices);
    c->wins = calloc((size_t)c->nslices, sizeof *c->wins);
    if (c->slices == NULL || c->wins == NULL) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    TUTTI__CHECK_GOTO(find_nodes(c, bs, &ncpus), st, fail);
    /* More busy threads than cores means that waits must give the core away at once. Sleeping
     * workers do not count (a caller waiting on its worker sleeps too); spinning ones do. */
    c->oversubscribed = c->local_size * (1 + (cfg->worker_sleep ? 0 : c->nslices)) > ncpus;
    TUTTI__CHECK_GOTO(connect_transports(c, bs, cfg->transport), st, fail);
    if (c->wins[0] == NULL) { /* no shared window: the direct algorithms are not offered */
        free(c->wins);
        c->wins = NULL;
    }
    for (int s = 0; c->wins != NULL && s < c->nslices; s++)
        tutti__win_reserve_small(c->wins[s]);
    /* Overrides are checked once the transports are known: "direct" needs the window. */
    TUTTI__CHECK_GOTO(tutti__select_init(c), st, fail);
    pick_local_ip(c, store, ip);
    snprintf(c->ip, sizeof c->ip, "%s", ip);
    TUTTI__CHECK_GOTO(tutti__live_create(bs, ip, &c->live), st, fail);
    TUTTI__CHECK_GOTO(start_workers(c), st, fail);
    if (!reg_add(c)) {
        st = tutti__set_error(TUTTI_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    TUTTI__LOG(TUTTI__LOG_INFO, "rank %d/%d: %d node(s), %d local rank(s), shm %s, ofi %s", rank,
               size, c->nnodes, c->local_size, c->shm ? "yes" : "no", c->ofi ? "yes" : "no");
    *out = c;
    return TUTTI_OK;
fail:
    comm_free(c);
    return st;
}

TUTTI_API tutti_status_t tutti_comm_init_env(const tutti_comm_config_t *config, tutti_comm_t **comm)
{
    tutti__tls_error()[0] = '\0';
    if (comm == NULL)
        return tutti__set_error(TUTTI_ERR_INVALID_ARG, "tutti_comm_init_env: comm is NULL");
    *comm = NULL;
    set_log_level();
    TUTTI__CHECK(tutti__kernels_init()); /* a forced kernel this CPU lacks fails here */
    tutti__config_t cfg;
    const char *how;
    int rank, size;
    TUTTI__CHECK(read_config(config, &cfg));
    TUTTI__CHECK(discover_rank(&rank, &size, &how));
    const char *addr = tutti__env_get("MASTER_ADDR");
    long port = 29500;
    tutti_status_t st = tutti__env_long("MASTER_PORT", 1, 65535, &port);
    if (st < 0)
        return st;
    TUTTI__LOG(TUTTI__LOG_INFO, "rank %d of %d (%s), rendezvous at %s:%ld", rank, size, how, addr,
               port);
    double deadline = tutti__now() + cfg.timeout;
    tutti__store_t *store = NULL;
    TUTTI__CHECK(tutti__store_open(rank, size, addr, (int)port, deadline, &store));
    char where[128];
    snprintf(where, sizeof where, "the rendezvous store at %s:%ld", addr, port);
    tutti__bootstrap_t bs = {.rank = rank, .size = size, .deadline = deadline,
                             .oob = tutti__store_oob(store), .where = where};
    st = tutti__comm_create(rank, size, &bs, store, &cfg, comm);
    /* Keep the failure text: closing the store must not overwrite it. */
    char saved[TUTTI__ERRLEN];
    snprintf(saved, sizeof saved, "%s", tutti__tls_error());
    tutti__store_close(store);
    snprintf(tutti__tls_error(), TUTTI__ERRLEN, "%s", st < 0 ? saved : "");
    return st;
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
    set_log_level();
    TUTTI__CHECK(tutti__kernels_init());
    tutti__config_t cfg;
    TUTTI__CHECK(read_config(config, &cfg));
    tutti__bootstrap_t bs = {.rank = rank, .size = size, .deadline = tutti__now() + cfg.timeout,
                             .oob = *oob, .where = "the caller's out-of-band store"};
    return tutti__comm_create(rank, size, &bs, NULL, &cfg, comm);
}

TUTTI_API tutti_status_t tutti_comm_destroy(tutti_comm_t *comm)
{
    if (!tutti__comm_valid(comm))
        return tutti__set_error(TUTTI_ERR_INVALID_COMM,
                                "tutti_comm_destroy: %p is not a live communicator (NULL, already "
                                "destroyed, or never created)",
                                (void *)comm);
    reg_remove(comm);
    /* Queued operations fail; the running one ends first (it fails fast if the communicator
     * has failed or was aborted). */
    tutti__exec_stop(comm, TUTTI_ERR_ABORTED,
                     "tutti_comm_destroy was called while it was still queued");
    /* A healthy communicator waits for its peers: a peer may still be reading this rank's shared
     * memory or receiving its last message. A failed one has nothing left to protect. */
    bool wait = comm->failed == TUTTI_OK;
    tutti_status_t st = tutti__live_goodbye(comm->live, wait, tutti__now() + tutti__comm_timeout(comm));
    comm_free(comm);
    return st;
}

TUTTI_API tutti_status_t tutti_comm_abort(tutti_comm_t *comm)
{
    if (!tutti__comm_valid(comm))
        return tutti__set_error(TUTTI_ERR_INVALID_COMM,
                                "tutti_comm_abort: %p is not a live communicator", (void *)comm);
    char msg[128];
    snprintf(msg, sizeof msg, "rank %d: tutti_comm_abort was called", comm->rank);
    tutti__comm_fail(comm, TUTTI_ERR_ABORTED, msg);
    return TUTTI_OK;
}

TUTTI_API tutti_status_t tutti_comm_set_timeout(tutti_comm_t *comm, double timeout_s)
{
    if (!tutti__comm_valid(comm))
        return tutti__set_error(TUTTI_ERR_INVALID_COMM,
                                "tutti_comm_set_timeout: %p is not a live communicator",
                                (void *)comm);
    if (!(timeout_s > 0))
        return tutti__set_error(TUTTI_ERR_INVALID_ARG,
                                "tutti_comm_set_timeout: the timeout is %g s: give a positive "
                                "number of seconds",
                                timeout_s);
    __atomic_store(&comm->timeout_s, &timeout_s, __ATOMIC_RELAXED);
    return TUTTI_OK;
}

/* ---- accessors ---- */

#define GETTER(name, expr)                                                                     \
    TUTTI_API int tutti_comm_##name(const tutti_comm_t *c) { return tutti__comm_valid(c) ? (expr) : -1; }
GETTER(rank, c->rank)
GETTER(size, c->size)
GETTER(local_rank, c->local_rank)
GETTER(local_size, c->local_size)
GETTER(node_count, c->nnodes)
GETTER(worker_count, c->nslices)
#undef GETTER

TUTTI_API uint64_t tutti_comm_seq(const tutti_comm_t *c) { return tutti__comm_valid(c) ? __atomic_load_n(&c->seq, __ATOMIC_RELAXED) : 0; }

TUTTI_API const char *tutti_comm_transport(const tutti_comm_t *c, int peer)
{
    if (!tutti__comm_valid(c) || peer < 0 || peer >= c->size)
        return NULL;
    if (peer == c->rank)
        return "self";
    return c->peer_tp[peer] ? c->peer_tp[peer]->ops->name : NULL;
}

TUTTI_API int tutti_comm_worker_cpu(const tutti_comm_t *c, int worker)
{
    return tutti__comm_valid(c) ? tutti__exec_worker_cpu(c, worker) : -1;
}

TUTTI_API const char *tutti_comm_last_error(const tutti_comm_t *c)
{
    return tutti__comm_valid(c) ? c->last_error : "";
}
