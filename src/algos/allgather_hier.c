/* allgather_hier.c: hierarchical allgather for a group that spans nodes of L ranks each.
 *
 * First between nodes: local rank j gathers the blocks of rail j (local rank j of every node)
 * with a ring allgather among that rail, straight into their places in recvbuf; the L rails run
 * at once, so every node sends its L blocks across once, each by its own rank. Then within the
 * node, per segment of the window: every rank copies the pieces of its rail's N blocks into its
 * region; barrier; every rank copies the other rails' pieces out of their regions into place;
 * barrier. Cost: N-1 network steps of one block (against the flat ring's NL-1 steps, L-1 of
 * every L of them over the network with uneven hops), plus two copies of (L-1)/L of the result
 * in shared memory. Wins across nodes of several ranks at every size; moves bytes only, so the
 * result is the flat algorithms' bit for bit. allgatherv runs the flat ring (its blocks differ
 * in size, so rails would carry unequal loads).
 */
#include "algos.h"
#include "patterns/chunk.h"

static tutti_status_t run(tutti__coll_t *c)
{
    if (c->counts != NULL)
        return tutti__allgather_ring.run(c);
    const tutti__topo_t *t = &c->net->topo;
    const int N = t->nnodes, L = t->local_size, li = t->local_rank;
    const size_t es = c->esize, cnt = c->count;
    char *out = c->recvbuf;
    if (cnt == 0)
        return TUTTI_OK;
    tutti__coll_t loc;
    tutti__window_t *w;
    size_t seg;
    tutti__hier_node(c, &loc);
    TUTTI__CHECK(tutti__hier_window(c, &loc, (size_t)N, "ring", &w, &seg));

    /* Between nodes: rail li's blocks into their places (an allgatherv whose displacements are
     * the members' ranks). */
    const int *rail = t->rails + (size_t)li * (size_t)N;
    size_t *lay = tutti__coll_aux(c, 2 * (size_t)N * sizeof *lay);
    if (lay == NULL)
        return TUTTI_ERR_NO_MEMORY;
    for (int k = 0; k < N; k++) {
        lay[k] = cnt;
        lay[N + k] = (size_t)rail[k] * cnt;
    }
    tutti__coll_t sub;
    tutti__hier_group(c, rail, N, t->node, &sub);
    sub.counts = lay;
    sub.displs = lay + N;
    TUTTI__CHECK(tutti__allgather_ring.run(&sub));
    if (w == NULL)
        return TUTTI_OK;

    /* Within the node: each region carries one piece of each of its rail's N blocks. */
    const size_t piece = seg / (size_t)N;
    for (size_t a = 0; a < cnt; a += piece) {
        const size_t n = tutti__min_size(piece, cnt - a);
        for (int k = 0; k < N; k++)
            memcpy(w->regions[li] + (size_t)k * n * es, out + ((size_t)rail[k] * cnt + a) * es,
                   n * es);
        TUTTI__CHECK(tutti__win_barrier(&loc));
        for (int j = 0; j < L; j++) {
            if (j == li)
                continue;
            const int *rj = t->rails + (size_t)j * (size_t)N;
            for (int k = 0; k < N; k++)
                memcpy(out + ((size_t)rj[k] * cnt + a) * es, w->regions[j] + (size_t)k * n * es,
                       n * es);
        }
        TUTTI__CHECK(tutti__win_barrier(&loc));
    }
    return TUTTI_OK;
}

const tutti__algo_t tutti__allgather_hier = {
    .name = "hier",
    .run = run,
    .needs = TUTTI__NEEDS_NODES | TUTTI__NEEDS_UNIFORM,
    .desc = "ring allgather between nodes, one rail per local rank, then node-local allgather "
            "over shm; for groups that span nodes of equal size (allgatherv: ring)",
};
