/* allreduce_tree.c: binomial-tree allreduce, a tree reduce to rank 0 then a tree broadcast.
 *
 * Both halves are segmented and pipelined (reduce_tree.c, bcast_tree.c); rank 0 computes every
 * element's final value (dividing once for AVG) and the broadcast copies it, so every rank ends
 * with the same bits. Cost: 2 ceil(log2 n) steps plus the pipeline's fill; rank 0 receives and
 * sends log2 n times the data. Wins for small messages and many ranks or nodes, where latency,
 * not bandwidth, is the cost; the ring wins for large messages.
 */
#include "algos.h"

static tutti_status_t run(tutti__coll_t *c)
{
    tutti__coll_t sub = *c; /* shares c->err, so failure texts land where the caller reads */
    sub.top = tutti__top(c);
    sub.root = 0;
    TUTTI__CHECK(tutti__reduce_tree.run(&sub));
    sub.sendbuf = sub.recvbuf;
    return tutti__bcast_tree.run(&sub);
}

const tutti__algo_t tutti__allreduce_tree = {
    .name = "tree",
    .run = run,
    .desc = "binomial-tree reduce to rank 0 + binomial-tree broadcast: 2 log2 n steps; for "
            "small messages and many nodes",
};
