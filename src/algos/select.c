/* select.c: the algorithm tables, and the choice per call: an override's range when one holds
 * the call's size, else the default by message size, rank count and topology. */
#include "algos.h"

static const tutti__algo_t *const allreduce_algos[] = {&tutti__allreduce_direct, &tutti__allreduce_ring,
                                                       &tutti__allreduce_tree,
                                                       &tutti__allreduce_hier,
                                                       &tutti__allreduce_rhd, NULL};
static const tutti__algo_t *const allgather_algos[] = {&tutti__allgather_direct, &tutti__allgather_ring,
                                                       &tutti__allgather_cma, &tutti__allgather_hier,
                                                       NULL};
static const tutti__algo_t *const alltoall_algos[] = {&tutti__alltoall_direct,
                                                      &tutti__alltoall_pairwise,
                                                      &tutti__alltoall_cma, &tutti__alltoall_hier,
                                                      NULL};
static const tutti__algo_t *const reduce_scatter_algos[] = {&tutti__reduce_scatter_direct,
                                                            &tutti__reduce_scatter_ring,
                                                            &tutti__reduce_scatter_hier, NULL};
static const tutti__algo_t *const bcast_algos[] = {&tutti__bcast_direct, &tutti__bcast_tree,
                                                   &tutti__bcast_cma, &tutti__bcast_hier, NULL};
static const tutti__algo_t *const reduce_algos[] = {&tutti__reduce_direct, &tutti__reduce_tree, NULL};
static const tutti__algo_t *const barrier_algos[] = {&tutti__barrier_direct,
                                                     &tutti__barrier_dissemination, NULL};

static const struct {
    const char *name; /* for messages */
    const tutti__algo_t *const *algos;
} colls[TUTTI_COLL_COUNT] = {
    [TUTTI_COLL_ALLREDUCE] = {"allreduce", allreduce_algos},
    [TUTTI_COLL_ALLGATHER] = {"allgather", allgather_algos},
    [TUTTI_COLL_ALLTOALL] = {"alltoall", alltoall_algos},
    [TUTTI_COLL_REDUCE_SCATTER] = {"reduce_scatter", reduce_scatter_algos},
    [TUTTI_COLL_BCAST] = {"bcast", bcast_algos},
    [TUTTI_COLL_REDUCE] = {"reduce", reduce_algos},
    [TUTTI_COLL_BARRIER] = {"barrier", barrier_algos},
};

const tutti__algo_t *const *tutti__algos_for(tutti_coll_t coll)
{
    return (unsigned)coll < TUTTI_COLL_COUNT ? colls[coll].algos : NULL;
}

const char *tutti__coll_name(tutti_coll_t coll)
{
    return (unsigned)coll < TUTTI_COLL_COUNT ? colls[coll].name : "?";
}

const tutti__algo_t *tutti__algo_find(tutti_coll_t coll, const char *name, size_t len)
{
    for (const tutti__algo_t *const *a = colls[coll].algos; *a != NULL; a++)
        if (strlen((*a)->name) == len && strncmp((*a)->name, name, len) == 0)
            return *a;
    return NULL;
}

/*
 * Single copy (the cma algorithms: process_vm_readv) is taken from these sizes on, where every
 * pair of local ranks may use it. SIZE_MAX: never by default; an override still can.
 *
 * Set by measurement on the development machine (2-core AMD EPYC Zen 4 KVM guest, Linux 6.18),
 * 2026-11-24, which other jobs shared (load 4-10): tutti-bench, plain env launch, -a direct
 * against -a cma, launches alternated, median [min] avg_us of 6-10 launches each:
 *   alltoall, 2 ranks:  1 MiB 162 [102] vs 326 [168]; 4 MiB 1654 [1052] vs 1050 [784];
 *                       64 MiB 32028 [27380] vs 38031 [25571]; a rerun: 64 MiB min 29471
 *                       vs 52787, and direct's min lower at every size from 256 KiB
 *   alltoall, 4 ranks:  min lower for direct at every size from 256 KiB (64 MiB 83909 vs
 *                       234769)
 *   allgather, 2 ranks: direct ahead at every size from 256 KiB (64 MiB 59534 [41221] vs
 *                       69847 [57600]); 4 ranks: direct 2-4x ahead
 *   bcast, 2 ranks (direct pipelined, bcast_direct.c): 1 MiB 532 [238] vs 837 [390]; 16 MiB
 *                       9438 [7882] vs 12520 [10635]; 64 MiB 39356 [29110] vs 49750 [36628]
 *   bcast, 4 ranks:     direct ahead from 1 MiB (64 MiB 55972 [33344] vs 96463 [73626])
 * Why: the kernel pins the source 4 KiB page by page and copies 7-15 GB/s (process_vm_readv of
 * 1-64 MiB in one process here), where memcpy moves about 60 GB/s within the caches and 20 GB/s
 * from memory: two copies through the L3-resident window beat one through the kernel.
 */
#define CMA_ALLTOALL_MIN SIZE_MAX
#define CMA_ALLGATHER_MIN SIZE_MAX
#define CMA_BCAST_MIN SIZE_MAX

static bool cma_from(bool cma, size_t bytes, size_t min)
{
    return cma && min != SIZE_MAX && bytes >= min;
}

/*
 * Allreduce at 2 ranks with cores of their own takes the ring (over shm's slots) instead of the
 * window from RING2_MIN to RING2_MAX bytes. The window's 3 barriers per segment leave nothing to
 * overlap, so its speed follows how close the guest's two cores are: on the development machine
 * (2-core Zen 4 KVM guest) 1 MiB took 47-66 us in some hours and 115-120 us in others, with
 * the same launcher and binding. The ring hands 64 KiB slots along, each reader behind the
 * writer, and stays at 48-69 us in both. Measured 2026-11-25, tutti-bench, env launch and
 * Open MPI's, launches alternated (us, direct vs ring):
 *   slow hours:  64 KiB 6.7 vs 5.6; 1 MiB 115-120 vs 67-70; 4 MiB 461 vs 276-286;
 *                16 MiB 2055-2152 vs 1473-1505; 64 MiB 9574-9728 vs 8309-8319
 *   fast hours:  16 KiB 1.14-1.86 vs 0.99-1.03; 256 KiB 13-17 vs 12-14; 1 MiB 47-66 vs 48-69;
 *                4 MiB 190-206 vs 210-224; 16 MiB 1268-1384 vs 1419-1587; 64 MiB 6161-6772
 *                vs 7741-7817
 * So the ring to 16 MiB (at worst 12% behind, up to 1.7x ahead), the window above. At 4 ranks
 * on 2 cores the window wins at every size (fewer hand-offs, each a context switch there).
 */
#define RING2_MIN ((size_t)16 << 10)
#define RING2_MAX ((size_t)16 << 20)

/* The latency of one network step, in bytes of transfer time (alpha / beta): 64 KiB is about
 * 25 us at 20 Gbit/s or 5 us at 100 Gbit/s. Only the order of magnitude matters here. */
#define LAT_BYTES ((double)(64 << 10))

/* From this many bytes per rank, the ring's steps each move a whole chunk (allreduce_ring.c's
 * 1 MiB) and its transfers overlap its reductions, while rhd's halving steps are store and
 * forward: 4 namespace hosts x 1 rank, tbf at 4 Gbit/s (the link, not the 2 cores, the limit:
 * plain TCP reaches 90% there), 2026-11-27, two alternated launches each, ms, ring vs rhd:
 * 1 MiB 3.8-4.1 vs 3.3-3.5, 4 MiB 14.4-17.0 vs 19.5-20.3, 16 MiB 58-65 vs 98-100, 64 MiB
 * 228-241 vs 396-399 (ring's busbw 84% of the line rate, rhd's 51%); at 10 Gbit/s, where the
 * cores are the limit, the two were within 25% of each other either way from 4 MiB. The same
 * at 4 Gbit/s under MPICH's and Open MPI's mpirun: 16 MiB 56-65 vs 94-103, 64 MiB 218-254 vs
 * 386-406. The cost model below misses this (it counts rhd's steps once, not per segment, and
 * no overlap). */
#define RING_STEP_MIN ((size_t)1 << 20)

const tutti__algo_t *tutti__allreduce_flat(int n, size_t bytes)
{
    if (bytes <= TUTTI__TREE_MAX || n <= 2)
        return bytes <= TUTTI__TREE_MAX ? &tutti__allreduce_tree : &tutti__allreduce_ring;
    if (bytes / (size_t)n >= RING_STEP_MIN)
        return &tutti__allreduce_ring;
    int k = 0, p2 = 1;
    while (p2 * 2 <= n)
        p2 *= 2, k++;
    /* Time in units of one byte's transfer: the ring takes 2(n-1) steps and sends
     * 2(n-1)/n of the buffer; recursive halving/doubling 2k steps and 2(p2-1)/p2 of it, plus
     * two steps with the whole buffer when it folds n down to p2. */
    const double b = (double)bytes;
    double ring = 2.0 * (n - 1) * LAT_BYTES + 2.0 * (n - 1) / n * b;
    double rhd = 2.0 * k * LAT_BYTES + 2.0 * (p2 - 1) / p2 * b;
    if (p2 != n)
        rhd += 2.0 * (LAT_BYTES + b);
    return rhd < ring ? &tutti__allreduce_rhd : &tutti__allreduce_ring;
}

/* hier's alltoall aggregates a node's blocks into one message per node pair, which pays while
 * message counts dominate; from blocks of this size the network is busy anyway, and its two
 * extra copies through the window and its one message at a time per rail cost more than they
 * save: 2 namespace hosts x 2 ranks, 2026-11-27, two alternated launches each, ms, hier vs
 * pairwise: 4 Gbit/s 256 KiB 2.4-2.7 vs 2.1, 2 MiB 25-28 vs 19-21, 16 MiB 225-231 vs 158-164
 * (Open MPI 188 there); 10 Gbit/s 1 MiB 7.0-7.1 vs 3.9-6.0, 16 MiB 92-98 vs 72-99; hier still
 * ahead at 64 KiB (0.4-0.8 vs 0.9-1.1). Those ran under the env launch; at 4 Gbit/s under
 * MPICH's mpirun 2 MiB 24.5-25.1 vs 18.5-19.8, 16 MiB 228-231 vs 154-157, under Open MPI's
 * 27-30 vs 19-20 and 197-225 vs 157-163; at 256 KiB the two are even (MPICH 2.10-2.13 vs
 * 2.06-2.07; Open MPI 2.18-2.27 vs 2.31-2.59, hier ahead there). */
#define HIER_ALLTOALL_MAX ((size_t)256 << 10)

/* Defaults. One node over shm: the direct algorithms touch each byte the fewest times and need
 * no hand-offs between neighbours (single copy from the sizes above, where it is on). Across
 * nodes, where some node has several ranks: the
 * hierarchical algorithms, which keep node-local traffic in shared memory and send each byte
 * across once per node (the ones that split traffic into equal rails need equal nodes).
 * Otherwise: a tree for latency-bound sizes, a ring or recursive halving/doubling once
 * bandwidth dominates (tutti__allreduce_flat). */
const tutti__algo_t *tutti__select(const tutti__algo_override_t *ov, unsigned caps, int n,
                                   tutti_coll_t coll, size_t bytes)
{
    for (int i = 0; i < ov->n; i++)
        if (bytes >= ov->r[i].lo && bytes <= ov->r[i].hi)
            return ov->r[i].algo;
    const bool win = caps & TUTTI__NEEDS_WINDOW, nodes = caps & TUTTI__NEEDS_NODES;
    const bool even = nodes && (caps & TUTTI__NEEDS_UNIFORM), cma = caps & TUTTI__NEEDS_CMA;
    switch (coll) {
    case TUTTI_COLL_ALLREDUCE:
        if (win && n == 2 && (caps & TUTTI__NEEDS_CORES) && bytes >= RING2_MIN &&
            bytes <= RING2_MAX)
            return &tutti__allreduce_ring;
        return win ? &tutti__allreduce_direct
                   : nodes ? &tutti__allreduce_hier : tutti__allreduce_flat(n, bytes);
    case TUTTI_COLL_ALLGATHER:
        return win && cma_from(cma, bytes, CMA_ALLGATHER_MIN) ? &tutti__allgather_cma
               : win  ? &tutti__allgather_direct
               : even ? &tutti__allgather_hier
                      : &tutti__allgather_ring;
    case TUTTI_COLL_ALLTOALL:
        return win && cma_from(cma, bytes, CMA_ALLTOALL_MIN) ? &tutti__alltoall_cma
               : win                               ? &tutti__alltoall_direct
               : even && bytes < HIER_ALLTOALL_MAX ? &tutti__alltoall_hier
                                                   : &tutti__alltoall_pairwise;
    case TUTTI_COLL_REDUCE_SCATTER:
        return win    ? &tutti__reduce_scatter_direct
               : even ? &tutti__reduce_scatter_hier : &tutti__reduce_scatter_ring;
    case TUTTI_COLL_BCAST:
        return win && cma_from(cma, bytes, CMA_BCAST_MIN) ? &tutti__bcast_cma
               : win   ? &tutti__bcast_direct
               : nodes ? &tutti__bcast_hier
                       : &tutti__bcast_tree;
    case TUTTI_COLL_REDUCE: return win ? &tutti__reduce_direct : &tutti__reduce_tree;
    case TUTTI_COLL_BARRIER: return win ? &tutti__barrier_direct : &tutti__barrier_dissemination;
    default: return NULL;
    }
}

size_t tutti__coll_bytes(const tutti__coll_t *c)
{
    if (c->counts == NULL)
        return c->count * c->esize;
    /* alltoallv's counts differ from rank to rank, and every rank must pick the same
     * algorithm: its choice ignores the size (it is made as for 0 bytes). */
    if (c->kind == TUTTI_COLL_ALLTOALL)
        return 0;
    size_t mx = 0;
    for (int r = 0; r < c->size; r++)
        if (c->counts[r] > mx)
            mx = c->counts[r];
    return mx * c->esize;
}
