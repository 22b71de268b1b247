/* alltoall_cma.c: one-node alltoall (and alltoallv) by single copy: each rank reads its block
 * straight out of every other rank's send buffer.
 *
 * Each rank writes, in the first words of its window region, the address of its send buffer
 * (alltoallv: and its send displacements, one word per rank); barrier; rank r reads the block
 * for it from every other rank's buffer with process_vm_readv (cross-memory attach) into place
 * in its receive buffer; a last barrier keeps every send buffer alive until all reads are done,
 * and tells every rank if any rank's reads failed. In place, the input is first copied to
 * scratch (tutti__alltoall_begin), which is then what the others read.
 *
 * Cost: 2 barriers and n-1 system calls per rank; each byte crosses once, copied by the kernel,
 * against twice (into the window, out of it) for the direct algorithm and a barrier pair per
 * window's worth. The kernel pins the source page by page, so from 4 KiB pages a single copy
 * moves less per second than memcpy does (a send buffer used again is backed with huge pages
 * first: tutti__cma_offer); it wins only where the direct algorithm's second copy and extra
 * barriers cost more than that (select.c holds the measurement). Every rank must pick it alike:
 * alltoallv only by override, since its size is not the same on every rank.
 */
#include "algos.h"

enum { ADDR, FIRST_DISPL }; /* words of a rank's header in its region */

static tutti_status_t run(tutti__coll_t *c)
{
    const int n = c->size, rank = c->rank;
    const size_t es = c->esize;
    const bool v = c->counts != NULL;
    tutti__window_t *w;
    /* v: n displacements, then n counts (what this rank sends to each rank) */
    TUTTI__CHECK(tutti__cma_window(c, FIRST_DISPL + (v ? 2 * (size_t)n : 0), &w));
    const char *in = c->sendbuf;
    char *out = c->recvbuf;
    TUTTI__CHECK(tutti__alltoall_begin(c, &in)); /* in place: in is now a copy */

    /* What the others read of in: all of it but this rank's block; of an alltoallv's buffer,
     * its blocks, offered as one span only where they fill most of it (a collapse makes every
     * page of the span resident, the gaps between blocks too). */
    size_t lo = v ? SIZE_MAX : 0, hi = v ? 0 : (size_t)n * c->count, sum = 0;
    for (int j = 0; v && j < n; j++) {
        size_t d = tutti__sdispl(c, j), k = tutti__scount(c, j);
        if (j == rank || k == 0)
            continue;
        lo = d < lo ? d : lo;
        hi = d + k > hi ? d + k : hi;
        sum += k;
    }
    if (hi > lo && (!v || sum >= (hi - lo) / 4 * 3))
        tutti__cma_offer(w, in + lo * es, (hi - lo) * es);
    uint64_t *mine = (uint64_t *)(void *)w->regions[rank];
    mine[ADDR] = (uint64_t)(uintptr_t)in;
    for (int j = 0; v && j < n; j++) {
        mine[FIRST_DISPL + j] = tutti__sdispl(c, j);
        mine[FIRST_DISPL + n + j] = tutti__scount(c, j);
    }
    TUTTI__CHECK(tutti__win_barrier(c));
    /* A block of another length than the sender's would be read past its end, or short: fail
     * before reading (the peers learn it from this rank's failure, in the last barrier). */
    for (int i = 0; v && i < n; i++) {
        uint64_t theirs = ((const uint64_t *)(const void *)w->regions[i])[FIRST_DISPL + n + rank];
        if (i != rank && theirs != tutti__rcount(c, i))
            return tutti__count_mismatch(c, i, theirs);
    }

    /* The others' words are only addresses and offsets into their own memory: the kernel
     * checks each read, and the length read is this rank's own count. */
    tutti_status_t st = TUTTI_OK;
    for (int k = 1; k < n && st == TUTTI_OK; k++) {
        int i = (rank + k) % n; /* staggered, so that no rank is read by all at once */
        const uint64_t *theirs = (const uint64_t *)(const void *)w->regions[i];
        size_t bytes = tutti__rcount(c, i) * es;
        if (bytes == 0)
            continue;
        uint64_t displ = v ? theirs[FIRST_DISPL + rank] : (uint64_t)rank * c->count;
        st = tutti__cma_get(c, w, i, theirs[ADDR] + displ * es, out + tutti__rdispl(c, i) * es,
                            bytes);
    }
    return tutti__cma_finish(c, st);
}

const tutti__algo_t tutti__alltoall_cma = {
    .name = "cma",
    .run = run,
    .needs = TUTTI__NEEDS_WINDOW | TUTTI__NEEDS_CMA,
    .desc = "single copy: every rank reads its block from each peer's send buffer with "
            "process_vm_readv, 2 barriers; one node only, where the system allows it",
};
