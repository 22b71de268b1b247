/* allreduce_rhd.c: recursive-halving reduce-scatter + recursive-doubling allgather allreduce
 * (Rabenseifner's algorithm, MPICH's choice for long messages).
 *
 * With p2 the largest power of two <= n and rem = n - p2: first the lowest 2 rem ranks pair up,
 * the even one sending its buffer to the odd one, which reduces (even's data first) and goes on
 * in its place; p2 ranks remain. Reduce-scatter by halving: in step i (partner = rank with bit
 * k-1-i flipped, k = log2 p2), each sends the half of its current block range that the partner
 * keeps and reduces the half it keeps with the partner's copy (lower rank's data first); after
 * k steps rank j holds the final block j, computed by it alone (AVG divides at that last step).
 * Allgather by doubling: k steps exchange the finished ranges with the same partners in the
 * opposite order; then the odd ranks of the first 2 rem pairs hand the result to their even
 * partners. Every element is computed once and copied, so every rank ends with the same bits.
 * The buffer goes through in segments of SEG_BYTES, so scratch stays bounded.
 * Cost: 2 log2 p2 steps (+2 when n is not a power of two) and 2 (p2-1)/p2 of the buffer sent
 * per rank: the ring's bandwidth in log2 n steps instead of 2(n-1). Wins across many nodes,
 * where the ring's 2(n-1) latencies per call dominate; with few nodes and a non-power of two,
 * the folding's extra whole-buffer transfers make the ring better.
 */
#include "algos.h"
#include "patterns/chunk.h"

#define SEG_BYTES ((size_t)8 << 20)

/* block_off is where block b of p2 blocks of m elements starts (b may be p2: the end). */
static size_t block_off(size_t m, int p2, int b) { return tutti__split_off(m, p2, b); }

static tutti_status_t segment(tutti__coll_t *c, char *buf, size_t m, int p2, int rem, char *tmp)
{
    const int rank = c->rank;
    const size_t es = c->esize;
    /* Fold: ranks < 2 rem pair up; the odd one of each pair goes on as "virtual" rank r / 2,
     * ranks from 2 rem on as r - rem. */
    int vr;
    if (rank < 2 * rem) {
        if (rank % 2 == 0) {
            TUTTI__CHECK(tutti__send(c, rank + 1, buf, m * es));
            vr = -1;
        } else {
            TUTTI__CHECK(tutti__recv(c, rank - 1, tmp, m * es));
            const void *srcs[2] = {tmp, buf};
            tutti__reduce(buf, srcs, 2, m, c->dtype, c->op, p2 == 1 ? tutti__avg_div(c) : 0);
            vr = rank / 2;
        }
    } else {
        vr = rank - rem;
    }
#define REAL(v) ((v) < rem ? 2 * (v) + 1 : (v) + rem)
    if (vr >= 0 && p2 > 1) {
        int lo = 0, hi = p2; /* the block range this rank still works on */
        for (int mask = p2 >> 1; mask > 0; mask >>= 1) {
            const int peer = REAL(vr ^ mask), mid = lo + (hi - lo) / 2;
            const bool low = (vr & mask) == 0;
            const int klo = low ? lo : mid, khi = low ? mid : hi; /* kept */
            const int slo = low ? mid : lo, shi = low ? hi : mid; /* sent */
            const size_t ko = block_off(m, p2, klo), kn = block_off(m, p2, khi) - ko;
            const size_t so = block_off(m, p2, slo), sn = block_off(m, p2, shi) - so;
            TUTTI__CHECK(tutti__sendrecv(c, peer, buf + so * es, sn * es, peer, tmp, kn * es));
            const void *srcs[2] = {low ? (const void *)(buf + ko * es) : tmp,
                                   low ? (const void *)tmp : buf + ko * es};
            tutti__reduce(buf + ko * es, srcs, 2, kn, c->dtype, c->op,
                          mask == 1 ? tutti__avg_div(c) : 0);
            lo = klo;
            hi = khi;
        }
        /* Allgather: the finished range doubles each step. */
        for (int mask = 1; mask < p2; mask <<= 1) {
            const int peer = REAL(vr ^ mask);
            const int plo = lo ^ mask, phi = plo + (hi - lo); /* the partner's range */
            const size_t o = block_off(m, p2, lo), n = block_off(m, p2, hi) - o;
            const size_t po = block_off(m, p2, plo), pn = block_off(m, p2, phi) - po;
            TUTTI__CHECK(tutti__sendrecv(c, peer, buf + o * es, n * es, peer, buf + po * es,
                                         pn * es));
            lo = lo < plo ? lo : plo;
            hi = lo + 2 * mask;
        }
    }
#undef REAL
    /* Unfold: the even rank of each folded pair gets the result from its partner. */
    if (rank < 2 * rem) {
        if (rank % 2 == 1)
            TUTTI__CHECK(tutti__send(c, rank - 1, buf, m * es));
        else
            TUTTI__CHECK(tutti__recv(c, rank + 1, buf, m * es));
    }
    return TUTTI_OK;
}

static tutti_status_t run(tutti__coll_t *c)
{
    const int n = c->size;
    const size_t es = c->esize, seg = SEG_BYTES / es ? SEG_BYTES / es : 1;
    if (c->count == 0)
        return TUTTI_OK;
    int p2 = 1;
    while (p2 * 2 <= n)
        p2 *= 2;
    const int rem = n - p2;
    char *out = c->recvbuf;
    if (c->sendbuf != out)
        memcpy(out, c->sendbuf, c->count * es);
    /* Scratch: a whole segment for the fold, at most half of one (plus a block) after. */
    char *tmp = tutti__coll_scratch(c, tutti__min_size(seg, c->count) * es);
    if (tmp == NULL)
        return TUTTI_ERR_NO_MEMORY;
    for (size_t base = 0; base < c->count; base += seg)
        TUTTI__CHECK(segment(c, out + base * es, tutti__min_size(seg, c->count - base), p2, rem,
                             tmp));
    return TUTTI_OK;
}

const tutti__algo_t tutti__allreduce_rhd = {
    .name = "rhd",
    .run = run,
    .desc = "recursive-halving reduce-scatter + recursive-doubling allgather (Rabenseifner): "
            "2 log2 n steps at the ring's bandwidth; for large messages over many nodes",
};
