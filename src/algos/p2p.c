/* p2p.c: point-to-point send and recv, one message of count * esize bytes to or from peer
 * c->root on the P2P channel (the primitives choose it, and carry c->tag, for these calls). */
#include "algos.h"

static tutti_status_t run_send(tutti__coll_t *c)
{
    return tutti__send(c, c->root, c->sendbuf, c->count * c->esize);
}

static tutti_status_t run_recv(tutti__coll_t *c)
{
    return tutti__recv(c, c->root, c->recvbuf, c->count * c->esize);
}

const tutti__algo_t tutti__p2p_send = {
    .name = "send",
    .run = run_send,
    .desc = "one message to a peer, matched in posting order",
};

const tutti__algo_t tutti__p2p_recv = {
    .name = "recv",
    .run = run_recv,
    .desc = "one message from a peer, matched in posting order",
};
