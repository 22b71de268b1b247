/* reduce_scatter_hier.c: hierarchical reduce-scatter for a group that spans nodes of L ranks
 * each, rank q ending with block q of the reduction.
 *
 * Per segment (the same element range of every block, as much as the window holds): every
 * rank copies its pieces of all blocks into its region; barrier; local rank j reduces, over the
 * node's regions in local order, the pieces of the blocks that rail j (local rank j of every
 * node) owns, into a buffer of its own in rail order: a node-local reduce-scatter. Rail j then
 * runs a ring reduce-scatter among its N members on those N pieces, each member's piece
 * landing in its recvbuf; barrier before the regions are reused. Cost: one copy and one read
 * per local rank of the input in shared memory, and the ring's (N-1)/N of one node-partial
 * input per rail across nodes: every node sends each reduced byte across once, spread over its
 * L ranks, in N-1 network steps instead of NL-1. Results: node partials in local order,
 * combined in the ring's order between nodes; equal to the flat ring's bits where the sum is
 * exact in any order, else within the bound of docs/multinode.md; AVG divides once, at the
 * end, by the whole group's size.
 */
#include "algos.h"
#include "patterns/chunk.h"

static tutti_status_t run(tutti__coll_t *c)
{
    const tutti__topo_t *t = &c->net->topo;
    const int N = t->nnodes, L = t->local_size, li = t->local_rank, P = c->size;
    const size_t es = c->esize, cnt = c->count;
    const char *in = c->sendbuf; /* P * cnt elements; in place, recvbuf holds them */
    char *out = c->recvbuf;
    if (cnt == 0)
        return TUTTI_OK;
    tutti__coll_t loc;
    tutti__window_t *w;
    size_t seg;
    tutti__hier_node(c, &loc);
    TUTTI__CHECK(tutti__hier_window(c, &loc, (size_t)P, "ring", &w, &seg));
    if (w == NULL) /* every node has L > 1 ranks here (NEEDS_UNIFORM and NEEDS_NODES) */
        return tutti__decline(c, TUTTI_ERR_INTERNAL, "%s (hier): no node window", c->name);

    const size_t piece = seg / (size_t)P;
    const int *rail = t->rails + (size_t)li * (size_t)N;
    /* The parts, then (64-byte aligned) the kernel's source pointers. */
    const size_t pbytes = ((size_t)N * tutti__min_size(piece, cnt) * es + 63) & ~(size_t)63;
    char *part = tutti__coll_aux(c, pbytes + (size_t)L * sizeof(void *));
    if (part == NULL)
        return TUTTI_ERR_NO_MEMORY;
    const void **srcs = (const void **)(void *)(part + pbytes);
    for (size_t a = 0; a < cnt; a += piece) {
        const size_t n = tutti__min_size(piece, cnt - a);
        /* In place, recvbuf's first cnt elements are block 0, whose pieces past this segment
         * are still to be read: the ring writes only [a, a + n), read just now. */
        for (int q = 0; q < P; q++)
            memcpy(w->regions[li] + (size_t)q * n * es, in + ((size_t)q * cnt + a) * es, n * es);
        TUTTI__CHECK(tutti__win_barrier(&loc));
        for (int k = 0; k < N; k++) {
            for (int r = 0; r < L; r++)
                srcs[r] = w->regions[r] + (size_t)rail[k] * n * es;
            tutti__reduce(part + (size_t)k * n * es, srcs, L, n, c->dtype, c->op, 0);
        }
        tutti__coll_t sub;
        tutti__hier_group(c, rail, N, t->node, &sub);
        sub.sendbuf = part;
        sub.recvbuf = out + a * es;
        sub.count = n;
        TUTTI__CHECK(tutti__reduce_scatter_ring.run(&sub));
        TUTTI__CHECK(tutti__win_barrier(&loc));
    }
    return TUTTI_OK;
}

const tutti__algo_t tutti__reduce_scatter_hier = {
    .name = "hier",
    .run = run,
    .needs = TUTTI__NEEDS_NODES | TUTTI__NEEDS_UNIFORM,
    .desc = "node-local reduce-scatter over shm into one part per rail, ring reduce-scatter of "
            "each part between nodes; for groups that span nodes of equal size",
};
