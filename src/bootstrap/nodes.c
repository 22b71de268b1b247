/* nodes.c: node discovery (which ranks share a node, and so shared memory) and the address this
 * rank is reached at. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/fnv.h"
#include "discover.h"

/* Ranks share memory when they share a host, a boot, and the same /dev/shm file system (not
 * the mount namespace: `ip netns exec` gives every process its own, over the same /dev/shm).
 * Ranks in different network namespaces count as different nodes: that is how the multi-host
 * tests run several "hosts" on one machine. So do ranks in different PID namespaces (a
 * container per rank with the host's network and IPC): shared memory between ranks rests on
 * process ids (who holds the segment's socket, whether a peer lives, single copy), which mean
 * other processes there. */
typedef struct node_info {
    char host[64];
    char boot_id[40];
    uint64_t shm_dev;
    uint32_t netns, pidns; /* namespaces' inode numbers: the kernel's fit 32 bits */
    int32_t pid;
    uint32_t sched_group; /* which scheduling group the kernel runs this process in (a hash) */
    tutti__cpuset_t cpus; /* the cores this process may run on; empty: it could not tell */
} node_info_t;
_Static_assert(sizeof(node_info_t) <= 256, "a node record fits the small stores callers bring");

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

/* hash_file mixes path's lines of up to 4 KiB (when keep is not NULL: those that contain it)
 * into h. */
static uint32_t hash_file(uint32_t h, const char *path, const char *keep)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (keep == NULL || strstr(line, keep) != NULL)
            h = tutti__fnv32_str(h, line);
    if (f != NULL)
        fclose(f);
    return h;
}

/*
 * sched_group names the group the kernel's fair scheduler runs this process in: its autogroup
 * (one per session, when the kernel uses them) and its cpu cgroup. Ranks of one group share a
 * run queue, so sched_yield hands the core to another rank; across groups it hands it to no
 * one (the yielding group runs on), and a rank that waits for another on its core must sleep
 * instead. MPICH's Hydra starts every rank in a session of its own.
 */
static uint32_t sched_group(void)
{
    uint32_t h = TUTTI__FNV32_INIT;
    FILE *f = fopen("/proc/sys/kernel/sched_autogroup_enabled", "r");
    int on = 0;
    if (f != NULL) {
        if (fscanf(f, "%d", &on) != 1)
            on = 0;
        fclose(f);
    }
    if (on)
        h = hash_file(h, "/proc/self/autogroup", NULL);
    /* cgroup v1's cpu controller ("N:cpu,cpuacct:/path") and the v2 hierarchy ("0::/path") */
    h = hash_file(h, "/proc/self/cgroup", ":cpu");
    return hash_file(h, "/proc/self/cgroup", "0::");
}

static void read_node_info(node_info_t *ni)
{
    memset(ni, 0, sizeof *ni);
    gethostname(ni->host, sizeof ni->host - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    int err = f == NULL ? errno : 0;
    if (f != NULL) {
        if (fgets(ni->boot_id, sizeof ni->boot_id, f) == NULL)
            ni->boot_id[0] = '\0';
        /* What joining the node takes next is two descriptors at once (the shared segment's
         * hand-over: a unix socket and the segment's memfd, shm_pass.c): a rank that has not
         * two to spare says so here, while every rank can still be told, rather than failing
         * there with the others left to wait. */
        int spare = fcntl(fileno(f), F_DUPFD_CLOEXEC, 0);
        if (spare < 0 && (errno == EMFILE || errno == ENFILE))
            err = errno;
        if (spare >= 0)
            close(spare);
        fclose(f);
    }
    if (err == EMFILE || err == ENFILE) {
        /* Without it this rank would seem to be on a node of its own (a wrong placement, and
         * "the ranks span 2 nodes" on shm), or fail on joining it: "!" marks the record, and
         * every rank fails. */
        struct rlimit rl = {0};
        getrlimit(RLIMIT_NOFILE, &rl);
        snprintf(ni->boot_id, sizeof ni->boot_id, "!%d %llu", err,
                 (unsigned long long)rl.rlim_cur);
    }
    ni->netns = (uint32_t)inode_of("/proc/self/ns/net");
    ni->shm_dev = device_of("/dev/shm");
    ni->pidns = (uint32_t)inode_of("/proc/self/ns/pid");
    ni->pid = (int32_t)getpid();
    ni->sched_group = sched_group();
    tutti__cpuset_self(&ni->cpus); /* empty when the system does not say */
}

/* same_host: one host, boot, network namespace and /dev/shm; same_node: and one PID namespace
 * too. */
static bool same_host(const node_info_t *a, const node_info_t *b)
{
    return strcmp(a->host, b->host) == 0 && strcmp(a->boot_id, b->boot_id) == 0 &&
           a->netns == b->netns && a->shm_dev == b->shm_dev;
}

static bool same_node(const node_info_t *a, const node_info_t *b)
{
    return same_host(a, b) && a->pidns == b->pidns;
}

/* Ranks that would share a node but for their PID namespaces: said once per process, since
 * they then talk through ofi (TCP), far slower than shared memory. */
static void warn_pidns(const node_info_t *all, int size, int rank)
{
    static int warned;
    for (int r = 0; r < size; r++) {
        if (!same_host(&all[rank], &all[r]) || all[rank].pidns == all[r].pidns)
            continue;
        if (__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED) == 0)
            TUTTI__LOG(TUTTI__LOG_WARN,
                       "rank %d shares this host and /dev/shm with rank %d, but not its PID "
                       "namespace (a container each?): shared memory between them rests on "
                       "process ids, so they talk through ofi (TCP on this host) instead; run "
                       "them in one PID namespace (docker --pid=host, or one container) for "
                       "shared memory", rank, r);
        return;
    }
}

tutti_status_t tutti__nodes_discover(tutti__bootstrap_t *bs, tutti__nodes_t *n)
{
    int size = bs->size, rank = bs->rank;
    memset(n, 0, sizeof *n);
    node_info_t mine, *all = calloc((size_t)size, sizeof *all);
    n->node_of = calloc((size_t)size, sizeof(int));
    n->local_ranks = calloc((size_t)size, sizeof(int));
    n->local_cpus = calloc((size_t)size, sizeof *n->local_cpus);
    if (all == NULL || n->node_of == NULL || n->local_ranks == NULL || n->local_cpus == NULL) {
        free(all);
        return tutti__set_error(TUTTI_ERR_NO_MEMORY, "bootstrap: out of memory for %d ranks", size);
    }
    read_node_info(&mine);
    tutti_status_t st = tutti__bs_allgather(bs, &mine, sizeof mine, all);
    if (st < 0) {
        free(all);
        return st;
    }
    for (int r = 0; r < size; r++) { /* other processes wrote these: terminate their strings */
        all[r].host[sizeof all[r].host - 1] = '\0';
        all[r].boot_id[sizeof all[r].boot_id - 1] = '\0';
    }
    for (int r = 0; r < size; r++) {
        int err = 0;
        unsigned long long lim = 0;
        if (all[r].boot_id[0] != '!' || sscanf(all[r].boot_id + 1, "%d %llu", &err, &lim) != 2)
            continue;
        free(all);
        return tutti__set_error(TUTTI_ERR_SYSTEM,
                                "rank %d cannot open the files it needs to find and join its "
                                "node (%s): its limit of open files (RLIMIT_NOFILE, ulimit -n) "
                                "is %llu: raise it%s",
                                r, strerror(err), lim, r == rank ? "" : " on that rank");
    }
    for (int r = 0; r < size; r++) {
        n->node_of[r] = -1;
        for (int q = 0; q < r; q++)
            if (same_node(&all[q], &all[r])) {
                n->node_of[r] = n->node_of[q];
                break;
            }
        if (n->node_of[r] < 0)
            n->node_of[r] = n->nnodes++;
    }
    warn_pidns(all, size, rank);
    n->one_sched_group = true;
    for (int r = 0; r < size; r++)
        if (n->node_of[r] == n->node_of[rank]) {
            if (r == rank)
                n->local_rank = n->local_size;
            /* Another process wrote this set: whatever it holds is only a set of core
             * numbers, and an empty one (unknown) makes the placement leave that rank's threads
             * where the system puts them. */
            n->local_cpus[n->local_size] = all[r].cpus;
            n->one_sched_group &= all[r].sched_group == mine.sched_group;
            n->local_ranks[n->local_size++] = r;
        }
    n->ncpus = tutti__cpuset_count(&mine.cpus);
    if (n->ncpus == 0)
        n->ncpus = 1;
    free(all);
    return TUTTI_OK;
}

void tutti__nodes_free(tutti__nodes_t *n)
{
    free(n->node_of);
    free(n->local_ranks);
    free(n->local_cpus);
    n->node_of = n->local_ranks = NULL;
    n->local_cpus = NULL;
}

tutti_status_t tutti__local_ip(int nnodes, const tutti__store_t *store, char ip[64],
                               char ifname[TUTTI__IFNAME_LEN])
{
    const char *spec = tutti__env_get("TUTTI_SOCKET_IFNAME");
    if (spec != NULL)
        return tutti__iface_pick(spec, ip, ifname);
    /* One node: loopback, the only safe choice on a machine whose other interfaces may lead
     * nowhere. */
    snprintf(ip, 64, "127.0.0.1");
    if (nnodes > 1 && store != NULL) {
        snprintf(ip, 64, "%s", tutti__store_local_ip(store));
    } else if (nnodes > 1) {
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
    /* Several nodes but the route says loopback (MASTER_ADDR unset under a caller's store, or
     * pointing at this host by a loopback name): peers could not reach that, so take the first
     * interface that is up and not loopback, if there is one. */
    if (nnodes > 1 && strncmp(ip, "127.", 4) == 0) {
        tutti__saved_error_t saved; /* none found is not an error: loopback stays */
        tutti__save_error(&saved);
        tutti_status_t st = tutti__iface_pick("^lo", ip, ifname);
        tutti__restore_error(&saved, TUTTI_OK);
        if (st == TUTTI_OK)
            return TUTTI_OK;
    }
    tutti__iface_of(ip, ifname);
    return TUTTI_OK;
}
