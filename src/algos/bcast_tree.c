/* bcast_tree.c: binomial-tree broadcast from c->root, segmented and pipelined.
 *
 * A rank receives each segment of SEG_BYTES from its parent straight into the buffer and
 * forwards it to its children, largest subtree first, while the next segment is already on its
 * way in. Cost: ceil(log2 n) steps plus one per extra segment; the root sends log2 n copies.
 * Wins for small and medium messages; for large ones the pipelining hides most of the depth.
 * Over ofi, one call in TUTTI__FLOW_EVERY also has each child answer its parent with an empty
 * message (algos.h).
 */
#include "algos.h"
#include "patterns/tree.h"

#define SEG_BYTES ((size_t)256 << 10)

static tutti_status_t run(tutti__coll_t *c)
{
    const int n = c->size, rank = c->rank;
    const int parent = tutti__tree_parent(rank, c->root, n);
    int kids[TUTTI__TREE_MAX_CHILDREN];
    const int nk = tutti__tree_children(rank, c->root, n, kids);
    const size_t es = c->esize, seg = SEG_BYTES / es ? SEG_BYTES / es : 1;
    const size_t nseg = tutti__div_up(c->count, seg);
    char *buf = c->recvbuf;
    if (c->count == 0)
        return TUTTI_OK;

    /* Two sets of sends in flight: segment s goes out while segment s-1's may still be. */
    tutti__req_t rreq[2], sreq[2][TUTTI__TREE_MAX_CHILDREN];
    bool sending[2] = {false, false};
    if (parent >= 0)
        TUTTI__CHECK(tutti__irecv(c, parent, buf, tutti__min_size(seg, c->count) * es, &rreq[0]));
    for (size_t s = 0; s < nseg; s++) {
        const int b = (int)(s & 1);
        const size_t off = s * seg, m = tutti__min_size(seg, c->count - off);
        if (parent >= 0) {
            TUTTI__CHECK(tutti__waitall(c, &rreq[b], 1));
            if (s + 1 < nseg)
                TUTTI__CHECK(tutti__irecv(c, parent, buf + (off + m) * es,
                                          tutti__min_size(seg, c->count - off - m) * es,
                                          &rreq[b ^ 1]));
        }
        if (sending[b]) {
            TUTTI__CHECK(tutti__waitall(c, sreq[b], nk));
            sending[b] = false;
        }
        for (int i = nk - 1; i >= 0; i--)
            TUTTI__CHECK(tutti__isend(c, kids[i], buf + off * es, m * es, &sreq[b][i]));
        sending[b] = nk > 0;
    }
    /* Flow control (algos.h): every segment is in, so answer the parent now, before this rank
     * waits for its own children's answers: the edges do not chain. */
    tutti__req_t ack, back[TUTTI__TREE_MAX_CHILDREN];
    const bool answer = parent >= 0 && tutti__flow_edge(c, parent);
    if (answer)
        TUTTI__CHECK(tutti__isend(c, parent, NULL, 0, &ack));
    int nback = 0;
    for (int i = 0; i < nk; i++)
        if (tutti__flow_edge(c, kids[i]))
            TUTTI__CHECK(tutti__irecv(c, kids[i], NULL, 0, &back[nback++]));
    for (int b = 0; b < 2; b++)
        if (sending[b])
            TUTTI__CHECK(tutti__waitall(c, sreq[b], nk));
    if (nback > 0)
        TUTTI__CHECK(tutti__waitall(c, back, nback));
    if (answer)
        TUTTI__CHECK(tutti__waitall(c, &ack, 1));
    return TUTTI_OK;
}

const tutti__algo_t tutti__bcast_tree = {
    .name = "tree",
    .run = run,
    .desc = "binomial-tree broadcast in pipelined 256 KiB segments: ceil(log2 n) steps; the "
            "default for any size",
};
