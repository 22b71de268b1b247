/* barrier_dissemination.c: dissemination barrier.
 *
 * In round k of ceil(log2 n), rank r sends an empty message to r + 2^k and waits for one from
 * r - 2^k; after the last round every rank has heard, directly or through others, from every
 * rank. Cost: ceil(log2 n) rounds of zero-byte messages, no root, for any n (not only powers of
 * two): the barrier for ranks on several nodes.
 */
#include "algos.h"
#include "patterns/tree.h"

static tutti_status_t run(tutti__coll_t *c)
{
    char none = 0; /* zero-byte messages still need a valid address */
    for (int k = 0; k < tutti__diss_rounds(c->size); k++)
        TUTTI__CHECK(tutti__sendrecv(c, tutti__diss_to(c->rank, c->size, k), &none, 0,
                                     tutti__diss_from(c->rank, c->size, k), &none, 0));
    return TUTTI_OK;
}

const tutti__algo_t tutti__barrier_dissemination = {
    .name = "dissemination",
    .run = run,
    .desc = "dissemination barrier: ceil(log2 n) rounds of empty messages; across nodes",
};
