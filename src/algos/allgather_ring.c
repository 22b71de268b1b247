/* allgather_ring.c: ring allgather (and allgatherv), each block passed once around the ring.
 *
 * Rank r puts its block in place, then at step k (n-1 steps) sends block r-k to the right
 * neighbour and receives block r-k-1 from the left straight into recvbuf, to forward it at the
 * next step. Cost: n-1 steps, each rank sends and receives (n-1)/n of the result: bandwidth
 * optimal and only neighbour traffic; wins for large blocks across nodes, loses to the direct
 * algorithm on one node. Blocks of different sizes (v) and of zero bytes pass the same way.
 */
#include "algos.h"
#include "patterns/ring.h"

static tutti_status_t run(tutti__coll_t *c)
{
    const int n = c->size, rank = c->rank;
    const int right = tutti__ring_right(rank, n), left = tutti__ring_left(rank, n);
    const size_t es = c->esize;
    char *out = c->recvbuf;

    char *own = out + tutti__rdispl(c, rank) * es;
    if ((const char *)c->sendbuf != own)
        memcpy(own, c->sendbuf, tutti__rcount(c, rank) * es);

    for (int k = 0; k < n - 1; k++) {
        int sb = tutti__ring_ag_block(rank, n, k), rb = tutti__ring_ag_block(left, n, k);
        TUTTI__CHECK(tutti__sendrecv(c, right, out + tutti__rdispl(c, sb) * es, tutti__rcount(c, sb) * es,
                                     left, out + tutti__rdispl(c, rb) * es, tutti__rcount(c, rb) * es));
    }
    return TUTTI_OK;
}

const tutti__algo_t tutti__allgather_ring = {
    .name = "ring",
    .run = run,
    .desc = "ring allgather(v): n-1 neighbour steps, bandwidth-optimal; for large blocks "
            "across nodes",
};
