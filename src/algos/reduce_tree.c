/* reduce_tree.c: binomial-tree reduce to c->root, segmented and pipelined.
 *
 * Each rank combines its input with its children's partial results (one kernel call over all
 * of them, smallest subtree first, the same order every time) and sends the result to its
 * parent; the root's lands in recvbuf, and for AVG the root divides there, once. Segments of
 * SEG_BYTES flow up the tree one behind the other: a rank receives segment s+1 from its
 * children while it reduces segment s and its parent takes it. Cost: ceil(log2 n) steps plus
 * one per extra segment, the root receiving log2 n times the data: wins for small messages
 * and many ranks, where the ring's 2(n-1) steps dominate. Over ofi, one call in
 * TUTTI__FLOW_EVERY also answers each child with an empty message (algos.h). Non-roots
 * accumulate in scratch (their recvbuf may be NULL); leaves send straight from their input.
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
    const size_t sb = tutti__min_size(seg, c->count) * es; /* bytes of the largest segment */
    const size_t nseg = tutti__div_up(c->count, seg);
    const char *in = c->sendbuf;
    if (c->count == 0)
        return TUTTI_OK;

    /* Scratch: two sets of nk receive segments (double buffering), and for an inner rank two
     * accumulators, since its send of segment s-1 may still be reading the other one. */
    char *rbuf[2][TUTTI__TREE_MAX_CHILDREN], *acc[2] = {NULL, NULL};
    size_t need = 2 * (size_t)nk * sb + (parent >= 0 && nk > 0 ? 2 * sb : 0);
    if (need > 0) {
        char *p = tutti__coll_scratch(c, need);
        if (p == NULL)
            return TUTTI_ERR_NO_MEMORY;
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < nk; i++, p += sb)
                rbuf[b][i] = p;
        if (parent >= 0 && nk > 0)
            acc[0] = p, acc[1] = p + sb;
    }

    tutti__req_t rreq[2][TUTTI__TREE_MAX_CHILDREN], sreq[2];
    bool sending[2] = {false, false};
    for (int i = 0; i < nk; i++)
        TUTTI__CHECK(tutti__irecv(c, kids[i], rbuf[0][i], tutti__min_size(seg, c->count) * es,
                                  &rreq[0][i]));
    for (size_t s = 0; s < nseg; s++) {
        const int b = (int)(s & 1);
        const size_t off = s * seg, m = tutti__min_size(seg, c->count - off);
        if (nk > 0)
            TUTTI__CHECK(tutti__waitall(c, rreq[b], nk));
        if (s + 1 < nseg) {
            size_t nm = tutti__min_size(seg, c->count - off - m);
            for (int i = 0; i < nk; i++)
                TUTTI__CHECK(tutti__irecv(c, kids[i], rbuf[b ^ 1][i], nm * es, &rreq[b ^ 1][i]));
        }
        if (sending[b]) { /* segment s-2 left from acc[b] */
            TUTTI__CHECK(tutti__waitall(c, &sreq[b], 1));
            sending[b] = false;
        }

        const void *src = in + off * es;
        if (nk > 0) {
            const void *srcs[1 + TUTTI__TREE_MAX_CHILDREN];
            srcs[0] = src;
            for (int i = 0; i < nk; i++)
                srcs[1 + i] = rbuf[b][i];
            char *dst = parent < 0 ? (char *)c->recvbuf + off * es : acc[b];
            tutti__reduce(dst, srcs, 1 + nk, m, c->dtype, c->op, parent < 0 ? tutti__avg_div(c) : 0);
            src = dst;
        }
        if (parent >= 0) {
            TUTTI__CHECK(tutti__isend(c, parent, src, m * es, &sreq[b]));
            sending[b] = true;
        }
    }
    /* Flow control (algos.h): every segment from the children is in, so answer them now,
     * before this rank waits for its own parent's answer: the edges do not chain. */
    tutti__req_t ack[TUTTI__TREE_MAX_CHILDREN], back;
    int nack = 0;
    for (int i = 0; i < nk; i++)
        if (tutti__flow_edge(c, kids[i]))
            TUTTI__CHECK(tutti__isend(c, kids[i], NULL, 0, &ack[nack++]));
    const bool wait_back = parent >= 0 && tutti__flow_edge(c, parent);
    if (wait_back)
        TUTTI__CHECK(tutti__irecv(c, parent, NULL, 0, &back));
    for (int b = 0; b < 2; b++)
        if (sending[b])
            TUTTI__CHECK(tutti__waitall(c, &sreq[b], 1));
    if (wait_back)
        TUTTI__CHECK(tutti__waitall(c, &back, 1));
    if (nack > 0)
        TUTTI__CHECK(tutti__waitall(c, ack, nack));
    return TUTTI_OK;
}

const tutti__algo_t tutti__reduce_tree = {
    .name = "tree",
    .run = run,
    .desc = "binomial-tree reduce in pipelined 256 KiB segments: ceil(log2 n) steps; for "
            "small and medium messages",
};
