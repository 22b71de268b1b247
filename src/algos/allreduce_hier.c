/* allreduce_hier.c: hierarchical allreduce for a group that spans nodes ("2D", as NCCL and
 * oneCCL call it; MPICH's multi-leader, Open MPI's HAN), node-local steps over the node's shm
 * window and steps between nodes over the flat ring or tree.
 *
 * Large messages, per segment of the window: every rank copies its input into its region;
 * barrier; with m = the fewest ranks on a node, local rank j < m reduces part j (1/m of the
 * segment) over the node's regions in local order, in one kernel call, into its own region:
 * a node-local reduce-scatter. Local rank j then runs an allreduce of its part with local rank j
 * of every other node (rail j), in place in the window: the tree for small parts, else the ring
 * or, over many nodes, recursive halving/doubling (tutti__allreduce_flat). Barrier; every rank copies the m finished parts out; barrier. The m rails run at
 * once, each node sending every byte across once, spread over m ranks; a node with a single
 * rank works on its own buffer, without a window.
 * Small messages (up to SMALL_BYTES): one leader per node (local index 0) reduces the node's
 * inputs from the window, the leaders run a tree allreduce, and the leader's result goes back
 * through its region: 3 barriers and 2 ceil(log2 nodes) messages, against the flat tree's
 * 2 ceil(log2 ranks) messages, some through the network twice.
 * Cost (large, N nodes of L ranks): per byte, two copies and one read per local rank in shared
 * memory plus the ring's 2(N-1)/N across nodes; 2(N-1) network steps (2 log2 N by recursive
 * halving/doubling) instead of the flat ring's 2(NL-1). Wins across nodes at every size when some node has several ranks.
 * Results: each element's value is computed once (node partials in local order, combined in
 * the order the rail's ring or tree gives) and copied to every rank, so all ranks hold the same
 * bits; they equal the flat algorithms' bits wherever the sum is exact in any order (integers,
 * min, max, exactly representable sums) and are otherwise within the usual bound of a
 * reduction in another order (docs/multinode.md). AVG sums across the node and divides
 * once, at the last step between nodes, by the whole group's size.
 */
#include "algos.h"
#include "patterns/chunk.h"

#define SMALL_BYTES ((size_t)64 << 10)

/* rail_allreduce runs part (count elements, in place) among rail j, by the flat algorithm
 * select.c picks for that many nodes and bytes (every member of the rail has the same count,
 * so all choose alike). */
static tutti_status_t rail_allreduce(tutti__coll_t *c, int j, void *part, size_t count)
{
    const tutti__topo_t *t = &c->net->topo;
    tutti__coll_t sub;
    tutti__hier_group(c, t->rails + (size_t)j * (size_t)t->nnodes, t->nnodes, t->node, &sub);
    sub.sendbuf = sub.recvbuf = part;
    sub.count = count;
    return tutti__allreduce_flat(t->nnodes, count * c->esize)->run(&sub);
}

/* node_sum reduces n elements at byte offset off of every region of w into dst (local order;
 * AVG stays a sum until the last step between nodes). */
static void node_sum(tutti__coll_t *c, tutti__window_t *w, const void **srcs, size_t off,
                     void *dst, size_t n)
{
    for (int r = 0; r < w->nranks; r++)
        srcs[r] = w->regions[r] + off;
    tutti__reduce(dst, srcs, w->nranks, n, c->dtype, c->op, 0);
}

static tutti_status_t small(tutti__coll_t *c, tutti__coll_t *loc, tutti__window_t *w,
                            const void **srcs)
{
    const tutti__topo_t *t = &c->net->topo;
    const size_t bytes = c->count * c->esize;
    const int li = t->local_rank;
    char *out = c->recvbuf;
    if (w != NULL) {
        memcpy(w->regions[li], c->sendbuf, bytes);
        TUTTI__CHECK(tutti__win_barrier(loc));
        if (li == 0)
            node_sum(c, w, srcs, 0, out, c->count);
    } else if (c->sendbuf != out) {
        memcpy(out, c->sendbuf, bytes);
    }
    if (li == 0)
        TUTTI__CHECK(rail_allreduce(c, 0, out, c->count));
    if (w == NULL)
        return TUTTI_OK;
    /* Only the leader read the regions, so it may overwrite its own now. */
    if (li == 0)
        memcpy(w->regions[0], out, bytes);
    TUTTI__CHECK(tutti__win_barrier(loc));
    if (li != 0)
        memcpy(out, w->regions[0], bytes);
    return tutti__win_barrier(loc); /* before anyone writes its region again */
}

static tutti_status_t large(tutti__coll_t *c, tutti__coll_t *loc, tutti__window_t *w,
                            const void **srcs, size_t seg)
{
    const tutti__topo_t *t = &c->net->topo;
    const int li = t->local_rank, m = t->ppn_min;
    const size_t es = c->esize;
    const char *in = c->sendbuf;
    char *out = c->recvbuf;
    for (size_t base = 0; base < c->count; base += seg) {
        const size_t n = tutti__min_size(seg, c->count - base);
        if (w != NULL) {
            memcpy(w->regions[li], in + base * es, n * es);
            TUTTI__CHECK(tutti__win_barrier(loc));
        }
        if (li < m) {
            const size_t po = tutti__split_off(n, m, li), pl = tutti__split_len(n, m, li);
            char *part = out + (base + po) * es; /* a node of one rank works in place */
            if (w != NULL) {
                part = w->regions[li] + po * es;
                node_sum(c, w, srcs, po * es, part, pl);
            } else if (in != out) {
                memcpy(part, in + (base + po) * es, pl * es);
            }
            if (pl > 0)
                TUTTI__CHECK(rail_allreduce(c, li, part, pl));
        }
        if (w != NULL) {
            TUTTI__CHECK(tutti__win_barrier(loc));
            for (int j = 0; j < m; j++) {
                size_t o = tutti__split_off(n, m, j) * es;
                memcpy(out + base * es + o, w->regions[j] + o, tutti__split_len(n, m, j) * es);
            }
            TUTTI__CHECK(tutti__win_barrier(loc));
        }
    }
    return TUTTI_OK;
}

static tutti_status_t run(tutti__coll_t *c)
{
    if (c->count == 0)
        return TUTTI_OK;
    tutti__coll_t loc;
    tutti__window_t *w;
    size_t seg;
    tutti__hier_node(c, &loc);
    TUTTI__CHECK(tutti__hier_window(c, &loc, (size_t)c->net->topo.ppn_min, "ring", &w, &seg));
    const void **srcs = tutti__coll_aux(c, (size_t)c->net->topo.local_size * sizeof *srcs);
    if (srcs == NULL)
        return TUTTI_ERR_NO_MEMORY;
    if (c->count * c->esize <= SMALL_BYTES && c->count <= seg)
        return small(c, &loc, w, srcs);
    return large(c, &loc, w, srcs, seg);
}

const tutti__algo_t tutti__allreduce_hier = {
    .name = "hier",
    .run = run,
    .needs = TUTTI__NEEDS_NODES,
    .desc = "node-local reduce-scatter over shm, allreduce of each part between nodes (ring, or "
            "tree for small parts; one rail per local rank), node-local allgather; small "
            "messages through one leader per node; for groups that span nodes",
};
