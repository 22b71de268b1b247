/* alltoall_hier.c: hierarchical alltoall for a group that spans nodes of L ranks each, with
 * node-aggregated messages.
 *
 * Per segment (the same element range of every block, as much as the window holds): every
 * rank copies its pieces of all P blocks into its region; barrier. Rank (node k, local j) takes
 * the pieces meant for itself from every region of its node; then, with each other node k' in
 * turn (pairwise exchange over rail j, step s pairing k with k+s and k-s), it packs the L pieces
 * that the ranks of its node send to (k', j) into one message and receives the L pieces that
 * the ranks of k' send to it, unpacking them into place; barrier before the regions are
 * reused. Cost: N-1 messages of L blocks per rank instead of NL-1 messages of one block (the
 * per-message cost across the network falls L-fold), and two copies of the buffer in shared
 * memory. Wins across nodes for small and medium blocks, where message counts dominate. Moves
 * bytes only: the result is the flat algorithms' bit for bit. alltoallv runs the flat pairwise
 * exchange (its blocks differ in size from rank to rank).
 */
#include "algos.h"
#include "patterns/chunk.h"
#include "patterns/ring.h"

static tutti_status_t run(tutti__coll_t *c)
{
    if (c->counts != NULL)
        return tutti__alltoall_pairwise.run(c);
    const tutti__topo_t *t = &c->net->topo;
    const int N = t->nnodes, L = t->local_size, li = t->local_rank, P = c->size;
    const int me = c->net->rank;
    const size_t es = c->esize, cnt = c->count;
    const char *in = c->sendbuf;
    char *out = c->recvbuf;
    if (cnt == 0)
        return TUTTI_OK;
    tutti__coll_t loc;
    tutti__window_t *w;
    size_t seg;
    tutti__hier_node(c, &loc);
    TUTTI__CHECK(tutti__hier_window(c, &loc, (size_t)P, "pairwise", &w, &seg));
    if (w == NULL) /* every node has L > 1 ranks here (NEEDS_UNIFORM and NEEDS_NODES) */
        return tutti__decline(c, TUTTI_ERR_INTERNAL, "%s (hier): no node window", c->name);

    const size_t piece = seg / (size_t)P, pmax = tutti__min_size(piece, cnt);
    const int *mine = t->members + t->node_off[t->node]; /* this node's ranks, local order */
    char *sbuf = tutti__coll_aux(c, 2 * (size_t)L * pmax * es);
    if (sbuf == NULL)
        return TUTTI_ERR_NO_MEMORY;
    char *rbuf = sbuf + (size_t)L * pmax * es;
    for (size_t a = 0; a < cnt; a += piece) {
        const size_t n = tutti__min_size(piece, cnt - a), pb = n * es;
        /* In place, the pieces of this segment are all in the window before any is written. */
        for (int q = 0; q < P; q++)
            memcpy(w->regions[li] + (size_t)q * pb, in + ((size_t)q * cnt + a) * es, pb);
        TUTTI__CHECK(tutti__win_barrier(&loc));
        for (int i = 0; i < L; i++)
            memcpy(out + ((size_t)mine[i] * cnt + a) * es, w->regions[i] + (size_t)me * pb, pb);
        for (int s = 1; s < N; s++) {
            const int kt = tutti__pairwise_to(t->node, N, s), kf = tutti__pairwise_from(t->node, N, s);
            const int to = t->rails[(size_t)li * (size_t)N + (size_t)kt];
            const int from = t->rails[(size_t)li * (size_t)N + (size_t)kf];
            for (int i = 0; i < L; i++)
                memcpy(sbuf + (size_t)i * pb, w->regions[i] + (size_t)to * pb, pb);
            TUTTI__CHECK(tutti__sendrecv(c, to, sbuf, (size_t)L * pb, from, rbuf, (size_t)L * pb));
            const int *theirs = t->members + t->node_off[kf];
            for (int i = 0; i < L; i++)
                memcpy(out + ((size_t)theirs[i] * cnt + a) * es, rbuf + (size_t)i * pb, pb);
        }
        TUTTI__CHECK(tutti__win_barrier(&loc));
    }
    return TUTTI_OK;
}

const tutti__algo_t tutti__alltoall_hier = {
    .name = "hier",
    .run = run,
    .needs = TUTTI__NEEDS_NODES | TUTTI__NEEDS_UNIFORM,
    .desc = "node-aggregated alltoall: node-local exchange over shm, one message of L blocks per "
            "pair of nodes and rail; for groups that span nodes of equal size (alltoallv: "
            "pairwise)",
};
