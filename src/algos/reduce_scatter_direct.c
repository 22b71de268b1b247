/* reduce_scatter_direct.c: one-node reduce-scatter through the shm window.
 *
 * The window region of each rank is cut into n slots, one per block. Per round, each rank
 * copies the next segment of every block j of its input into slot j of its region; barrier;
 * rank r reduces slot r over all n regions in rank order (one kernel call, AVG divides) straight
 * into recvbuf; barrier (before the regions are reused). Cost: 2 barriers per round and one
 * copy of the input; the reduction is spread evenly and no message is sent: wins at every size
 * when every rank is on one node.
 */
#include "algos.h"
#include "patterns/chunk.h"

static tutti_status_t run(tutti__coll_t *c)
{
    const int n = c->size, rank = c->rank;
    const size_t es = c->esize, rc = c->count;
    tutti__window_t *w;
    size_t slot;
    TUTTI__CHECK(tutti__direct_slots(c, 0, "ring", &w, &slot));
    const size_t per = slot / es; /* elements of a block per round */
    const void **srcs = tutti__coll_scratch(c, (size_t)n * sizeof *srcs);
    if (srcs == NULL)
        return TUTTI_ERR_NO_MEMORY;
    const char *in = c->sendbuf; /* n * rc elements; in place: recvbuf holds them */
    char *out = c->recvbuf;

    for (size_t off = 0; off < rc; off += per) {
        const size_t m = tutti__min_size(per, rc - off);
        double t0 = tutti__phase_begin(c);
        for (int j = 0; j < n; j++)
            memcpy(w->regions[rank] + (size_t)j * slot, in + ((size_t)j * rc + off) * es, m * es);
        tutti__phase_end(c, "copy in", -1, (size_t)n * m * es, t0);
        TUTTI__CHECK(tutti__win_barrier(c));
        /* In place, this overwrites block 0 at [off, off+m): already copied in, and later
         * rounds read only higher offsets. */
        for (int i = 0; i < n; i++)
            srcs[i] = w->regions[i] + (size_t)rank * slot;
        t0 = tutti__phase_begin(c);
        tutti__reduce(out + off * es, srcs, n, m, c->dtype, c->op, n);
        tutti__phase_end(c, "reduce", -1, m * es, t0);
        TUTTI__CHECK(tutti__win_barrier(c));
    }
    return TUTTI_OK;
}

const tutti__algo_t tutti__reduce_scatter_direct = {
    .name = "direct",
    .run = run,
    .needs = TUTTI__NEEDS_WINDOW,
    .desc = "shm window: each rank reduces its block over all ranks' copies, 2 barriers per "
            "round; one node only, any size",
};
