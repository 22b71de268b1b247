/* bcast_direct.c: one-node broadcast through the shm window.
 *
 * Per segment of up to region_size bytes: the root copies it into its region; barrier; every
 * other rank copies it out; barrier (before the root overwrites the region). Cost: 2 barriers
 * per segment, one copy in and n-1 copies out that run in parallel, no messages: wins at every
 * size when every rank is on one node.
 */
#include "algos.h"
#include "patterns/chunk.h"

static tutti_status_t run(tutti__coll_t *c)
{
    const int rank = c->rank;
    const size_t es = c->esize;
    tutti__window_t *w;
    TUTTI__CHECK(tutti__direct_window(c, &w));
    const size_t seg = w->region_size / es;
    char *buf = c->recvbuf;
    const char *region = w->regions[c->root];

    for (size_t base = 0; base < c->count; base += seg) {
        const size_t bytes = tutti__min_size(seg, c->count - base) * es;
        if (rank == c->root)
            memcpy(w->regions[rank], buf + base * es, bytes);
        TUTTI__CHECK(tutti__win_barrier(c));
        if (rank != c->root)
            memcpy(buf + base * es, region, bytes);
        TUTTI__CHECK(tutti__win_barrier(c));
    }
    return TUTTI_OK;
}

const tutti__algo_t tutti__bcast_direct = {
    .name = "direct",
    .run = run,
    .needs = TUTTI__NEEDS_WINDOW,
    .desc = "shm window: the root copies in, all others copy out, 2 barriers per 4 MiB; one "
            "node only, any size",
};
