/* allgather_cma.c: one-node allgather (and allgatherv) by single copy: each rank reads every
 * other rank's block straight out of its send buffer.
 *
 * Each rank writes the address of its block in the first word of its window region; barrier;
 * every rank reads each other rank's block with process_vm_readv (cross-memory attach) into
 * place in its receive buffer and copies its own; a last barrier keeps every block alive until
 * all reads are done, and tells every rank if any rank's reads failed. In place, a rank's block
 * already sits in its receive buffer, apart from the blocks it writes.
 *
 * Cost: 2 barriers and n-1 system calls per rank; each byte crosses once (copied by the
 * kernel), against twice and a barrier pair per window's worth for the direct algorithm. The
 * kernel pins the source page by page, so from 4 KiB pages a single copy moves less per
 * second than memcpy (a send buffer used again is backed with huge pages first:
 * tutti__cma_offer); it wins only where the direct algorithm's second copy and barriers cost
 * more (select.c holds the measurement).
 */
#include "algos.h"

static tutti_status_t run(tutti__coll_t *c)
{
    const int n = c->size, rank = c->rank;
    const size_t es = c->esize;
    tutti__window_t *w;
    TUTTI__CHECK(tutti__cma_window(c, 1, &w));
    char *out = c->recvbuf, *own = out + tutti__rdispl(c, rank) * es;

    tutti__cma_offer(w, c->sendbuf, tutti__rcount(c, rank) * es);
    *(uint64_t *)(void *)w->regions[rank] = (uint64_t)(uintptr_t)c->sendbuf;
    TUTTI__CHECK(tutti__win_barrier(c));
    if ((const void *)own != c->sendbuf && tutti__rcount(c, rank) > 0)
        memcpy(own, c->sendbuf, tutti__rcount(c, rank) * es);
    tutti_status_t st = TUTTI_OK;
    for (int k = 1; k < n && st == TUTTI_OK; k++) {
        int i = (rank + k) % n; /* staggered, so that no rank is read by all at once */
        size_t bytes = tutti__rcount(c, i) * es;
        if (bytes > 0)
            st = tutti__cma_get(c, w, i, *(const uint64_t *)(const void *)w->regions[i],
                                out + tutti__rdispl(c, i) * es, bytes);
    }
    return tutti__cma_finish(c, st);
}

const tutti__algo_t tutti__allgather_cma = {
    .name = "cma",
    .run = run,
    .needs = TUTTI__NEEDS_WINDOW | TUTTI__NEEDS_CMA,
    .desc = "single copy: every rank reads each peer's block from its send buffer with "
            "process_vm_readv, 2 barriers; one node only, where the system allows it",
};
