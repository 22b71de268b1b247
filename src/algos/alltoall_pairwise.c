/* alltoall_pairwise.c: pairwise-exchange alltoall (and alltoallv).
 *
 * The own block is copied locally; then at step k (n-1 steps) rank r sends its block for
 * r+k and receives the block from r-k, so each step pairs every rank with exactly one sender
 * and one receiver and no link is oversubscribed. Cost: n-1 steps, each rank sends and
 * receives (n-1)/n of its buffer once: the bandwidth optimum, and the algorithm for any size
 * across nodes (a log-step algorithm would only win for tiny blocks). In place, the input is
 * first copied to scratch so that received blocks cannot overwrite blocks still to be sent.
 */
#include "algos.h"
#include "patterns/ring.h"

tutti_status_t tutti__alltoall_begin(tutti__coll_t *c, const char **in)
{
    const int n = c->size, rank = c->rank;
    const size_t es = c->esize;
    char *out = c->recvbuf;
    if ((const void *)*in == (const void *)out) {
        /* In place, a received block could land on one not yet sent: work from a copy. */
        size_t extent = 0; /* elements up to the end of the furthest send block */
        for (int j = 0; j < n; j++)
            if (tutti__scount(c, j) > 0 && tutti__sdispl(c, j) + tutti__scount(c, j) > extent)
                extent = tutti__sdispl(c, j) + tutti__scount(c, j);
        if (extent > 0) {
            char *copy = tutti__coll_scratch(c, extent * es);
            if (copy == NULL)
                return TUTTI_ERR_NO_MEMORY;
            memcpy(copy, *in, extent * es);
            *in = copy;
        }
    }
    if (tutti__rcount(c, rank) > 0)
        tutti__copy_out(out + tutti__rdispl(c, rank) * es, *in + tutti__sdispl(c, rank) * es,
                        tutti__rcount(c, rank) * es, tutti__rtotal(c) * es);
    return TUTTI_OK;
}

static tutti_status_t run(tutti__coll_t *c)
{
    const int n = c->size, rank = c->rank;
    const size_t es = c->esize;
    const char *in = c->sendbuf;
    char *out = c->recvbuf;

    TUTTI__CHECK(tutti__alltoall_begin(c, &in));
    for (int k = 1; k < n; k++) {
        int to = tutti__pairwise_to(rank, n, k), from = tutti__pairwise_from(rank, n, k);
        TUTTI__CHECK(tutti__sendrecv(c, to, in + tutti__sdispl(c, to) * es, tutti__scount(c, to) * es, from,
                                     out + tutti__rdispl(c, from) * es, tutti__rcount(c, from) * es));
    }
    return TUTTI_OK;
}

const tutti__algo_t tutti__alltoall_pairwise = {
    .name = "pairwise",
    .run = run,
    .desc = "pairwise exchange alltoall(v): n-1 steps, one partner each way per step; any "
            "size, across nodes",
};
