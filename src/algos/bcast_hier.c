/* bcast_hier.c: hierarchical broadcast for a group that spans nodes.
 *
 * One leader per node (the root on its own node, local index 0 elsewhere) receives the buffer
 * through a binomial-tree broadcast among the leaders, pipelined in segments; then, per segment
 * of the window, the leader copies it into its region, barrier, the node's other ranks copy it
 * out, barrier. Cost: ceil(log2 N) network steps plus the pipeline's fill, each node receiving
 * the buffer across once (the flat tree sends it to every rank of a node separately), and two
 * copies in shared memory. Moves bytes only: the flat algorithms' result bit for bit.
 */
#include "algos.h"
#include "patterns/chunk.h"

static tutti_status_t run(tutti__coll_t *c)
{
    const tutti__topo_t *t = &c->net->topo;
    const int N = t->nnodes, li = t->local_rank, rnode = t->node_of[c->root];
    const size_t es = c->esize;
    char *buf = c->recvbuf;
    if (c->count == 0)
        return TUTTI_OK;
    tutti__coll_t loc;
    tutti__window_t *w;
    size_t seg;
    tutti__hier_node(c, &loc);
    TUTTI__CHECK(tutti__hier_window(c, &loc, 1, "tree", &w, &seg));

    /* The leaders, in node order: every rank computes the same list. */
    int *leaders = tutti__coll_aux(c, (size_t)N * sizeof(int));
    if (leaders == NULL)
        return TUTTI_ERR_NO_MEMORY;
    for (int k = 0; k < N; k++)
        leaders[k] = k == rnode ? c->root : t->members[t->node_off[k]];
    const int leader = t->lidx[leaders[t->node]]; /* local index of this node's leader */
    if (li == leader) {
        tutti__coll_t sub;
        tutti__hier_group(c, leaders, N, t->node, &sub);
        sub.root = rnode;
        TUTTI__CHECK(tutti__bcast_tree.run(&sub));
    }
    if (w == NULL)
        return TUTTI_OK;
    for (size_t a = 0; a < c->count; a += seg) {
        const size_t n = tutti__min_size(seg, c->count - a);
        if (li == leader)
            memcpy(w->regions[leader], buf + a * es, n * es);
        TUTTI__CHECK(tutti__win_barrier(&loc));
        if (li != leader)
            memcpy(buf + a * es, w->regions[leader], n * es);
        TUTTI__CHECK(tutti__win_barrier(&loc));
    }
    return TUTTI_OK;
}

const tutti__algo_t tutti__bcast_hier = {
    .name = "hier",
    .run = run,
    .needs = TUTTI__NEEDS_NODES,
    .desc = "binomial-tree broadcast among one leader per node, then node-local broadcast over "
            "shm; for groups that span nodes",
};
