/* discover.h: who this process is in the job (rank and size from the launcher's variables) and
 * where the ranks run (which share a node, how many cores this one has, which address peers
 * reach it at). */
#ifndef TUTTI_BOOTSTRAP_DISCOVER_H
#define TUTTI_BOOTSTRAP_DISCOVER_H

#include "oob.h"
#include "store.h"

/* tutti__launcher_rank reads the rank and size from the first launcher whose variables are set
 * (RANK/WORLD_SIZE, PMI_RANK/PMI_SIZE, OMPI_COMM_WORLD_RANK/SIZE, SLURM_PROCID/SLURM_NTASKS;
 * none: rank 0 of 1). *how names the variables read, for messages. A pair that does not make
 * 0 <= rank < size is TUTTI_ERR_BOOTSTRAP naming both values. */
tutti_status_t tutti__launcher_rank(int *rank, int *size, const char **how);

/* Where the ranks of a job run. */
typedef struct tutti__nodes {
    int nnodes;         /* nodes, numbered by their lowest rank */
    int *node_of;       /* [size]: node of each rank */
    int local_rank;     /* this rank's index on its node */
    int local_size;     /* ranks on this node */
    int *local_ranks;   /* [local_size]: global ranks on this node, increasing */
    int ncpus;          /* cores this process may run on */
    tutti__cpuset_t *local_cpus; /* [local_size]: the cores each local rank may run on, as it
                                    reported them (empty: it could not tell) */
    bool one_sched_group; /* every local rank runs in the kernel's same scheduling group
                             (autogroup and cpu cgroup), so sched_yield can hand a core from one
                             to another */
} tutti__nodes_t;

/* tutti__nodes_discover allgathers each rank's host, boot, network namespace, /dev/shm,
 * allowed cores and scheduling group through bs (collective over bs's ranks) and fills n; ranks share a node when all four are
 * the same. Free with tutti__nodes_free, also after a failure. */
tutti_status_t tutti__nodes_discover(tutti__bootstrap_t *bs, tutti__nodes_t *n);
void tutti__nodes_free(tutti__nodes_t *n);

/* tutti__local_ip writes the IPv4 address peers reach this rank at: loopback when the job has
 * one node, else the address this rank reached store from (store NULL: the one that routes to
 * MASTER_ADDR). */
void tutti__local_ip(int nnodes, const tutti__store_t *store, char ip[64]);

#endif /* TUTTI_BOOTSTRAP_DISCOVER_H */
