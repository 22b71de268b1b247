/* nodes.c: node discovery (which ranks share a node, and so shared memory) and the address this
 * rank is reached at. */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "discover.h"

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

tutti_status_t tutti__nodes_discover(tutti__bootstrap_t *bs, tutti__nodes_t *n)
{
    int size = bs->size, rank = bs->rank;
    memset(n, 0, sizeof *n);
    node_info_t mine, *all = calloc((size_t)size, sizeof *all);
    n->node_of = calloc((size_t)size, sizeof(int));
    n->local_ranks = calloc((size_t)size, sizeof(int));
    if (all == NULL || n->node_of == NULL || n->local_ranks == NULL) {
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
        n->node_of[r] = -1;
        for (int q = 0; q < r; q++)
            if (same_node(&all[q], &all[r])) {
                n->node_of[r] = n->node_of[q];
                break;
            }
        if (n->node_of[r] < 0)
            n->node_of[r] = n->nnodes++;
    }
    for (int r = 0; r < size; r++)
        if (n->node_of[r] == n->node_of[rank]) {
            if (r == rank)
                n->local_rank = n->local_size;
            n->local_ranks[n->local_size++] = r;
        }
    n->ncpus = mine.ncpus;
    free(all);
    return TUTTI_OK;
}

void tutti__nodes_free(tutti__nodes_t *n)
{
    free(n->node_of);
    free(n->local_ranks);
    n->node_of = n->local_ranks = NULL;
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
