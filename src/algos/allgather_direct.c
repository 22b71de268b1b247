/* allgather_direct.c: one-node allgather (and allgatherv) through the shm window.
 *
 * Per round, each rank copies the next segment (up to region_size bytes) of its block into its
 * region; barrier; every rank copies every other rank's segment into place; barrier (before
 * the regions are reused). Blocks of different sizes simply run out at different rounds; the
 * round count follows the largest block, which every rank knows. Cost: 2 barriers per round,
 * one copy in and n-1 copies out per rank, no messages: wins at every size on one node.
 * Blocks up to LL_BYTES skip the barriers: each rank writes its block as flagged lines into the
 * window's small area and copies the others' as their lines arrive (one hand-off per peer).
 */
#include "algos.h"
#include "patterns/chunk.h"

/* Blocks up to this size go as flagged lines through the small area (it must fit a half). */
#define LL_BYTES ((size_t)1 << 10)
#define OWN_CHUNK ((size_t)64 << 10) /* copy-in granule: well inside L2 */
_Static_assert(LL_BYTES / 56 * 64 + 64 <= TUTTI__WIN_SMALL_LL, "LL blocks fit");

static tutti_status_t run(tutti__coll_t *c)
{
    const int n = c->size, rank = c->rank;
    const size_t es = c->esize;
    tutti__window_t *w;
    TUTTI__CHECK(tutti__direct_window(c, &w));
    const size_t seg = w->region_size / es;
    const char *in = c->sendbuf;
    char *out = c->recvbuf;

    size_t longest = 0;
    for (int i = 0; i < n; i++)
        longest = tutti__rcount(c, i) > longest ? tutti__rcount(c, i) : longest;
    char *own = out + tutti__rdispl(c, rank) * es;

    if (w->small_size > 0 && longest * es <= LL_BYTES) {
        if (in != own)
            memcpy(own, in, tutti__rcount(c, rank) * es);
        /* Small blocks go as flagged lines: no barrier, one hand-off per peer. */
        uint64_t tag;
        size_t off = tutti__win_small_begin(c, w, &tag);
        tutti__ll_write(w->regions[rank] + off, in, tutti__rcount(c, rank) * es, tag);
        for (int i = 0; i < n; i++)
            if (i != rank)
                TUTTI__CHECK(tutti__ll_copy(c, i, off, out + tutti__rdispl(c, i) * es,
                                            tutti__rcount(c, i) * es, tag));
        return TUTTI_OK;
    }

    for (size_t off = 0; off < longest; off += seg) {
        /* The own block goes to the region and to its place in recvbuf in one pass over the
         * input: each chunk is copied on from the region while it is still in this core's
         * cache, so a large input is read from memory once, not twice. */
        const size_t mine = tutti__piece(tutti__rcount(c, rank), off, seg) * es;
        for (size_t done = 0; done < mine; done += OWN_CHUNK) {
            size_t m = tutti__min_size(OWN_CHUNK, mine - done);
            memcpy(w->regions[rank] + done, in + off * es + done, m);
            if (in != own)
                memcpy(own + off * es + done, w->regions[rank] + done, m);
        }
        TUTTI__CHECK(tutti__win_barrier(c));
        for (int i = 0; i < n; i++)
            if (i != rank)
                memcpy(out + (tutti__rdispl(c, i) + off) * es, w->regions[i],
                       tutti__piece(tutti__rcount(c, i), off, seg) * es);
        TUTTI__CHECK(tutti__win_barrier(c));
    }
    return TUTTI_OK;
}

const tutti__algo_t tutti__allgather_direct = {
    .name = "direct",
    .run = run,
    .needs = TUTTI__NEEDS_WINDOW,
    .desc = "shm window: every rank copies its block in and all others out, 2 barriers per "
            "4 MiB; one node only, any size",
};
