/* bcast_cma.c: one-node broadcast by single copy: every rank reads the root's buffer straight
 * out of the root's memory.
 *
 * The root writes its buffer's address in the first word of its window region; barrier; every
 * other rank reads the whole buffer with process_vm_readv (cross-memory attach); a last barrier
 * keeps the root's buffer unchanged until all reads are done, and tells every rank if any
 * rank's read failed.
 *
 * Cost: 2 barriers and one system call per rank; the n-1 readers copy at once, each byte once
 * (by the kernel), where the direct algorithm has the root copy into the window first and pays
 * a barrier pair per window's worth. The kernel pins the root's pages one by one, so from
 * 4 KiB pages each reader moves less per second than memcpy (a buffer broadcast again is
 * backed with huge pages first: tutti__cma_offer); it wins only where the direct algorithm's extra
 * copy and barriers cost more (select.c holds the measurement).
 */
#include "algos.h"

static tutti_status_t run(tutti__coll_t *c)
{
    tutti__window_t *w;
    TUTTI__CHECK(tutti__cma_window(c, 1, &w));
    if (c->rank == c->root) {
        tutti__cma_offer(w, c->recvbuf, c->count * c->esize);
        *(uint64_t *)(void *)w->regions[c->rank] = (uint64_t)(uintptr_t)c->recvbuf;
    }
    TUTTI__CHECK(tutti__win_barrier(c));
    tutti_status_t st = TUTTI_OK;
    if (c->rank != c->root && c->count > 0)
        st = tutti__cma_get(c, w, c->root, *(const uint64_t *)(const void *)w->regions[c->root],
                            c->recvbuf, c->count * c->esize);
    return tutti__cma_finish(c, st);
}

const tutti__algo_t tutti__bcast_cma = {
    .name = "cma",
    .run = run,
    .needs = TUTTI__NEEDS_WINDOW | TUTTI__NEEDS_CMA,
    .desc = "single copy: every rank reads the root's buffer with process_vm_readv, 2 "
            "barriers; one node only, where the system allows it",
};
