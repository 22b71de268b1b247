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
 * 0 <= rank < size, or PMI_* and OMPI_COMM_WORLD_* that disagree, is TUTTI_ERR_BOOTSTRAP naming
 * the values. */
tutti_status_t tutti__launcher_rank(int *rank, int *size, const char **how);

/* tutti__launcher_is_slurm tells whether how (from tutti__launcher_rank) says the rank came from
 * a Slurm step (srun). */
bool tutti__launcher_is_slurm(const char *how);

/* tutti__slurm_store writes where a Slurm step's store goes when MASTER_ADDR and MASTER_PORT
 * are unset: port 20000 + 10 x (SLURM_JOB_ID mod 1000) + SLURM_STEP_ID mod 10, so that jobs
 * sharing a node, and steps of a job that run at once, do not meet on one port; addr the first
 * node of SLURM_STEP_NODELIST when the step spans several nodes (rank 0's under srun's block
 * and cyclic distributions), else "" (the default, loopback); addr NULL: the port only. A
 * list it cannot read is TUTTI_ERR_BOOTSTRAP saying to set MASTER_ADDR. */
tutti_status_t tutti__slurm_store(char *addr, size_t cap, long *port);

/* tutti__hydra_job writes the address of the mpiexec that started this process through a
 * Hydra proxy (its --control-port, the same for every rank of the job on every node, another
 * for every other mpiexec): the job's name where Hydra gives none; false when this is no
 * Hydra rank, or RANK/WORLD_SIZE number it instead. */
bool tutti__hydra_job(char *out, size_t cap);

/* tutti__launcher_port writes a store port of the job's own, for a job whose launcher names it
 * and whose user set no MASTER_PORT, so that two jobs of one node do not meet on 29500: a Slurm
 * step's (tutti__slurm_store); TUTTI__JOB_PORT_BASE + a hash of Open MPI's job id
 * (OMPI_MCA_ess_base_jobid, or PMIX_NAMESPACE) mod TUTTI__JOB_PORTS; for Hydra (MPICH; Intel
 * MPI's is untried), whose ranks carry no job id, the base + a hash of the --control-port
 * (mpiexec's host:port) of the Hydra proxy they descend from, the same on every node; failing
 * that, when all ranks run on this node (MPI_LOCALNRANKS equals PMI_SIZE), the base + the
 * proxy's pid.
 * *what names the source, for messages. false: no such port (the caller's default stands). The
 * range lies between Slurm's ports (20000-29999) and Linux's ephemeral ones (from 32768). */
#define TUTTI__JOB_PORT_BASE 30000
#define TUTTI__JOB_PORTS 2000
bool tutti__launcher_port(const char *how, long *port, const char **what);

/* tutti__hostlist_first writes the first host of a Slurm host list ("node[07-09,12],gpu1" gives
 * "node07"; "rack[1-2]-n[3-4]" gives "rack1-n3"); false for one it cannot read or that does not
 * fit cap. */
bool tutti__hostlist_first(const char *list, char *out, size_t cap);

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

#define TUTTI__IFNAME_LEN 32

/*
 * tutti__local_ip writes the IPv4 address peers reach this rank at (the liveness mesh listens
 * there, sub-communicators' stores are published there, ofi uses its interface across nodes)
 * and the name of its interface: the first interface TUTTI_SOCKET_IFNAME matches when that is
 * set (an error naming the interfaces there are when none does); else loopback when the job
 * has one node; else the address this rank reached store from, which is on the interface that
 * routes to rank 0 (store NULL: the one that routes to MASTER_ADDR; if that is loopback, the
 * first interface that is not). So a host with several interfaces, only one of which reaches
 * the others, needs no setting.
 */
tutti_status_t tutti__local_ip(int nnodes, const tutti__store_t *store, char ip[64],
                               char ifname[TUTTI__IFNAME_LEN]);

/* ---- interfaces (ifaces.c) ---- */

/* tutti__ifname_match tells whether interface name matches spec, in NCCL_SOCKET_IFNAME's
 * syntax: a comma-separated list of name prefixes ("eth,ib"); a leading '^' excludes them
 * instead ("^lo,docker"); a '=' first (after any '^') compares whole names ("=eth0",
 * "^=lo"). */
bool tutti__ifname_match(const char *spec, const char *name);

/* tutti__iface_pick writes the IPv4 address and name of the first interface that is up, has
 * an IPv4 address and matches spec (in the order the system lists them, loopback last); none
 * is TUTTI_ERR_INVALID_ARG naming the interfaces there are. */
tutti_status_t tutti__iface_pick(const char *spec, char ip[64], char name[TUTTI__IFNAME_LEN]);

/* tutti__iface_of writes the name of the interface that holds IPv4 address ip ("?": none). */
void tutti__iface_of(const char *ip, char name[TUTTI__IFNAME_LEN]);

#endif /* TUTTI_BOOTSTRAP_DISCOVER_H */
