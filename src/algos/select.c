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
 * Single copy (the cma algorithms: process_vm_readv) is taken for bytes in [lo, hi) of the
 * range below for its rank count, where every pair of local ranks may use it (elsewhere, or
 * with TUTTI_CMA=off, the direct algorithms run). The direct algorithms copy twice, through a
 * window sized for the L2, with a barrier per round; that is fastest only while the writer's
 * lines reach the reader cheaply. On the development machine (2-core AMD EPYC Zen 4 KVM guest,
 * Linux 6.18) the host moves the guest's cores from hour to hour and within a launch: a
 * 64 MiB alltoall at 2 ranks went from 19 to 47 ms per call in the middle of one run
 * (TUTTI_TRACE), and a 256 KiB one ran at 167 us for a whole unbound launch against 41 in a
 * good one. The kernel's single copy is slower at its best (it pins the source page by page)
 * but barely moves with the host's state.
 *
 * Measured 2026-11-27, tutti-bench, plain env launch (torchrun style, no binding) unless said,
 * -a direct against -a cma, launches alternated, median [min-max] avg_us of 6-8 launches;
 * bytes are per block (alltoall), per rank (allgather), the buffer (bcast):
 *   alltoall, 2 ranks:  16 KiB 4 [3-14] vs 4 [4-5]; 64 KiB 15 [13-48] vs 11 [9-13];
 *                       256 KiB 164 [52-176] vs 62 [50-88]; 2 MiB 1567 [278-1709] vs 319
 *                       [262-1367]; 16 MiB 12551 [4730-13726] vs 5629 [5177-6456]; 128 MiB
 *                       101527 [37023-109129] vs 50271 [44520-57275]; bound by taskset,
 *                       128 MiB 44312 [39561-89005] vs 46251 [41423-52110]
 *   alltoall, 4 ranks:  64 KiB 65 [52-196] vs 89 [71-94]; 256 KiB 740 vs 254; 1 MiB 2321 vs
 *                       1713; 16 MiB 31144 vs 28991; 64 MiB 144159 vs 105244
 *   allgather, 2 ranks: 16 KiB 4 [2-13] vs 6 [5-6]; 64 KiB 26 [8-51] vs 12 [10-14]; 2 MiB
 *                       1366 vs 287; 128 MiB 77055 [60980-83157] vs 58808 [51209-64627]
 *   allgather, 4 ranks: 64 KiB 157 vs 100; 1 MiB 2129 vs 1085; 4 MiB 6959 vs 7231; 16 MiB
 *                       19365 vs 31715; 64 MiB 85696 vs 113895
 *   bcast, 2 ranks:     64 KiB 11 vs 8; 1 MiB 113 [100-615] vs 103 [84-111]; 4 MiB 173
 *                       [161-1792] vs 444 [337-652]; 64 MiB 7862 vs 15820 (the pipelined
 *                       direct broadcast, bcast_direct.c, keeps the window busy both ways)
 *   bcast, 4 ranks:     direct ahead at every size from 64 KiB (64 MiB 15115 vs 23753)
 * The same hour, the build before against this one (direct against these ranges), bench/ab -r 6
 * under MPICH's, Open MPI's and the env launch, 2 ranks, B/A of the medians: alltoall 64 KiB
 * 0.67-0.77, 256 KiB 0.84-1.15, 1-64 MiB 1.04-1.38 (the host was kind by then: direct's
 * medians at its best, its maxima still 2.3-3x its minima, single copy's within 1.3x);
 * allgather 64-256 KiB 0.73-0.83, 1-64 MiB 0.81-1.23; bcast 64 KiB-1 MiB 0.57-0.88,
 * 4-16 MiB 0.96-1.09. So single copy gives up 1.1-1.4x from 1 MiB in the hours when the cores
 * are close (up to 1.6x: a 4 MiB alltoall on 2026-11-25, 600-623 us against 373-395) and
 * gains 2-2.5x in the others, with no bimodal launches: the ranges take it.
 *
 * Since single copy reads a reused send buffer from huge pages (cma_source.c), measured again
 * 2026-11-30, -a direct against -a cma, launches alternated, median [min-max] avg_us of 4-5
 * launches, the cores near (bench/corelat 178 ns), where direct is at its best:
 *   bcast, 2 ranks:     MPICH's mpirun 4 MiB 485 vs 343, 8 MiB 872 vs 686, 16 MiB 1534 vs
 *                       1365, 32 MiB 2958 vs 3158, 64 MiB 7334 vs 11353; Open MPI's the same
 *                       within 7% (16 MiB 1523 vs 1389, 32 MiB 3057 vs 3258); env launch 1 MiB
 *                       124 vs 85
 *   bcast, 4 ranks:     env launch 1 MiB 225 [209-267] vs 291 [279-445], 2 MiB 482 vs 434,
 *                       4 MiB 871 vs 596, 16 MiB 3490 vs 2508, 32 MiB 9720 vs 9242, 64 MiB
 *                       19645 vs 22223; MPICH's 256 KiB-1 MiB within 2%, 4 MiB 1092 vs 682,
 *                       64 MiB 20287 vs 19917
 *   allgather, 4 ranks: MPICH's 1 MiB 832 vs 767, 4 MiB 3466 vs 2648, 16 MiB 21510 vs 19603,
 *                       64 MiB 85097 vs 92938; env launch 2 MiB 1737 vs 1401, 16 MiB 22492 vs
 *                       21414, 32 MiB 45651 vs 48671
 *   Open MPI's mpirun (--oversubscribe), 4 ranks: bcast 1 MiB 212 vs 328, 2 MiB 496 vs 321,
 *                       4 MiB 903 vs 597, 16 MiB 3227 vs 2427, 32 MiB 8627 vs 8662, 64 MiB 19180
 *                       vs 19595; allgather 1 MiB 1032 vs 922, 4 MiB 3348 vs 2712, 16 MiB 23702
 *                       vs 20486, 64 MiB 97009 vs 102195
 * So broadcast takes single copy below 32 MiB at 2 ranks and from 2 MiB to below 32 MiB at more,
 * allgather below 32 MiB per rank at more ranks (at 2 ranks broadcast and at more ranks allgather
 * stopped at 4 MiB; broadcast at more ranks never took it). Around 32-64 MiB the two are about
 * even (4 ranks: 32 MiB 1.05x for cma, 64 MiB 0.88x under the env launch and 1.02x under MPICH's).
 */
typedef struct cma_range {
    size_t lo, hi; /* single copy for lo <= bytes < hi; lo == hi: never */
} cma_range_t;

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
static const cma_range_t cma_alltoall[2] = {{64 * KIB, SIZE_MAX}, {256 * KIB, SIZE_MAX}};
static const cma_range_t cma_allgather[2] = {{64 * KIB, SIZE_MAX}, {64 * KIB, 32 * MIB}};
static const cma_range_t cma_bcast[2] = {{64 * KIB, 32 * MIB}, {2 * MIB, 32 * MIB}};

/* r[0] holds for 2 ranks, r[1] for more. */
static bool cma_for(bool cma, const cma_range_t r[2], int n, size_t bytes)
{
    const cma_range_t *x = &r[n > 2];
    return cma && bytes >= x->lo && bytes < x->hi;
}

size_t tutti__cma_alltoall_min(int n)
{
    return cma_alltoall[n > 2].lo;
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
                                   tutti_coll_t coll, size_t bytes, bool v)
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
        return win && cma_for(cma, cma_allgather, n, bytes) ? &tutti__allgather_cma
               : win  ? &tutti__allgather_direct
               : even ? &tutti__allgather_hier
                      : &tutti__allgather_ring;
    case TUTTI_COLL_ALLTOALL:
        /* alltoallv: single copy chooses block by block, as the plain alltoall would */
        if (v && win && cma && (caps & TUTTI__NEEDS_ROOM))
            return &tutti__alltoall_cma;
        return win && cma_for(cma, cma_alltoall, n, bytes) ? &tutti__alltoall_cma
               : win && (caps & TUTTI__NEEDS_ROOM)  ? &tutti__alltoall_direct
               : even && bytes < HIER_ALLTOALL_MAX ? &tutti__alltoall_hier
                                                   : &tutti__alltoall_pairwise;
    case TUTTI_COLL_REDUCE_SCATTER:
        return win    ? &tutti__reduce_scatter_direct
               : even ? &tutti__reduce_scatter_hier : &tutti__reduce_scatter_ring;
    case TUTTI_COLL_BCAST:
        return win && cma_for(cma, cma_bcast, n, bytes) ? &tutti__bcast_cma
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
     * algorithm: its choice ignores the size (it is made as for 0 bytes; single copy then
     * chooses block by block, alltoall_cma.c). */
    if (c->kind == TUTTI_COLL_ALLTOALL)
        return 0;
    size_t mx = 0;
    for (int r = 0; r < c->size; r++)
        if (c->counts[r] > mx)
            mx = c->counts[r];
    return mx * c->esize;
}
