/* bcast_direct.c: one-node broadcast through the shm window, pipelined through the two halves
 * of the root's region.
 *
 * The buffer goes in chunks of up to half a region. At step k the root copies chunk k into half
 * k % 2 of its region while every other rank copies chunk k - 1 out of the other half; a barrier
 * ends each step. The root writes a half again two steps after it filled it, once every reader
 * has passed the barrier that ended its copy-out. A buffer of one chunk takes the two steps and
 * two barriers an unpipelined copy-in, copy-out would; a long one keeps the root and the
 * readers copying at the same time, so it takes about one copy's time, not two.
 *
 * Cost: chunks + 1 barriers (one per half region), one copy in by the root and one copy out by
 * each reader, no messages: wins at every size when every rank is on one node (the readers'
 * copies run in parallel; a single copy by process_vm_readv lost to it, see select.c).
 */
#include "algos.h"
#include "patterns/chunk.h"

static tutti_status_t run(tutti__coll_t *c)
{
    const size_t es = c->esize;
    tutti__window_t *w;
    TUTTI__CHECK(tutti__direct_window(c, &w));
    /* Half a region, 64-byte aligned where the region allows (TUTTI_SHM_WINDOW is at least 64
     * bytes, so a half holds at least 4 elements of 8 bytes). */
    size_t half = w->region_size / 2;
    half = half >= 64 ? half & ~(size_t)63 : half;
    const size_t per = half / es;
    if (per == 0)
        return tutti__decline(c, TUTTI_ERR_NOT_SUPPORTED,
                              "bcast (direct): the shm window (%zu bytes per rank) cannot hold "
                              "two elements; raise TUTTI_SHM_WINDOW or use the tree algorithm",
                              w->region_size);
    const size_t nchunks = tutti__div_up(c->count, per);
    char *buf = c->recvbuf;
    const bool root = c->rank == c->root;

    for (size_t k = 0; k <= nchunks; k++) {
        if (root && k < nchunks)
            memcpy(w->regions[c->rank] + (k & 1) * half, buf + k * per * es,
                   tutti__min_size(per, c->count - k * per) * es);
        if (!root && k > 0)
            memcpy(buf + (k - 1) * per * es, w->regions[c->root] + ((k - 1) & 1) * half,
                   tutti__min_size(per, c->count - (k - 1) * per) * es);
        TUTTI__CHECK(tutti__win_barrier(c));
    }
    return TUTTI_OK;
}

const tutti__algo_t tutti__bcast_direct = {
    .name = "direct",
    .run = run,
    .needs = TUTTI__NEEDS_WINDOW,
    .desc = "shm window: the root copies each half-region chunk in while the others copy the "
            "previous one out, a barrier per chunk; one node only, any size",
};
