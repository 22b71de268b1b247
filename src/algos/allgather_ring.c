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

static size_t block_len(const tutti__coll_t *c, int b)
{
    return c->counts == NULL ? c->count : c->counts[b];
}

static size_t block_off(const tutti__coll_t *c, int b)
{
    return c->counts == NULL ? (size_t)b * c->count : c->displs[b];
}

static tutti_status_t run(tutti__coll_t *c)
{
    const int n = c->size, rank = c->rank;
    const int right = tutti__ring_right(rank, n), left = tutti__ring_left(rank, n);
    const size_t es = c->esize;
    char *out = c->recvbuf;

    char *own = out + block_off(c, rank) * es;
    if ((const char *)c->sendbuf != own)
        memcpy(own, c->sendbuf, block_len(c, rank) * es);

    for (int k = 0; k < n - 1; k++) {
        int sb = tutti__ring_ag_block(rank, n, k), rb = tutti__ring_ag_block(left, n, k);
        TUTTI__CHECK(tutti__sendrecv(c, right, out + block_off(c, sb) * es, block_len(c, sb) * es,
                                     left, out + block_off(c, rb) * es, block_len(c, rb) * es));
    }
    return TUTTI_OK;
}

const tutti__algo_t tutti__allgather_ring = {
    .name = "ring",
    .run = run,
    .needs_window = false,
    .desc = "ring allgather(v): n-1 neighbour steps, bandwidth-optimal; for large blocks "
            "across nodes",
};
