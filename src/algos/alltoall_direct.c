/* alltoall_direct.c: one-node alltoall (and alltoallv) through the shm window.
 *
 * Each half of a rank's region holds a small header and n slots, slot j for the data going to
 * rank j; rounds alternate between the halves. Per round, each rank writes the next piece of
 * its block for every peer j into slot j, and in the header whether any of its blocks has more
 * after this round; barrier; every rank copies the piece in slot `rank` of every region into
 * place and reads all headers. Rounds go on while any rank has more, so v-counts that no single
 * rank knows in full still give every rank the same number of barriers; exhausted blocks move
 * zero bytes; a last barrier frees the regions for the next call. Cost: rounds + 1 barriers (a
 * round moves up to net->round_bytes per rank, so that the window stays in the cache), every
 * byte copied twice, no messages: wins at every size on one node. Small blocks of a plain
 * alltoall (up to LL_BYTES, n of them fitting half the small area) skip the barriers: they go
 * as flagged lines, one hand-off per peer. An output of TUTTI__STREAM_MIN bytes or more is
 * written with streaming stores (kernels/copy.c): nothing reads it before the call ends.
 * alltoallv publishes each pair's count with the first round: a receiver that expects another
 * count fails the call (TUTTI_ERR_MISMATCH) before it copies anything.
 */
#include "algos.h"
#include "patterns/chunk.h"

#define HEADER 64 /* one cache line: the "more to come" flag */
#define LL_BYTES ((size_t)1 << 10) /* alltoall blocks up to this go as flagged lines */

/* head_bytes is a half region's header: the flag line, and for alltoallv what this rank sends to
 * each rank, rounded to lines. */
static size_t head_bytes(int n, bool v)
{
    return HEADER + (v ? ((size_t)n * sizeof(uint64_t) + 63) & ~(size_t)63 : 0);
}

bool tutti__alltoall_direct_room(size_t region_size, int n)
{
    return region_size / 2 >= head_bytes(n, true) + 16 * (size_t)n;
}

static tutti_status_t run(tutti__coll_t *c)
{
    const int n = c->size, rank = c->rank;
    const size_t es = c->esize;
    tutti__window_t *w;
    size_t slot;
    /* alltoallv: after the flag line, what this rank sends to each rank, for the receivers to
     * compare with what they expect (the sender's count is what it writes into the slot). */
    const bool v = c->counts != NULL;
    const size_t head = head_bytes(n, v);
    /* The slots of one half of the region (below): direct_slots cuts what is left after the
     * other half and this half's header. */
    tutti__window_t *x = tutti__coll_window(c);
    TUTTI__CHECK(tutti__direct_slots(c, head + (x ? x->region_size - x->region_size / 2 : 0),
                                     "pairwise", &w, &slot));
    const size_t per = slot / es; /* elements of a block per round */
    const char *in = c->sendbuf;
    char *out = c->recvbuf;

    TUTTI__CHECK(tutti__alltoall_begin(c, &in));

    const size_t block = c->count * es, span = tutti__ll_span(block);
    if (c->counts == NULL && w->small_size > 0 && block <= LL_BYTES &&
        (size_t)n * span <= TUTTI__WIN_SMALL_LL) {
        /* Small blocks (every rank knows every block's size: not alltoallv) go as flagged
         * lines, the block for rank j at slot j of the writer's small area: no barrier. */
        uint64_t tag;
        size_t off = tutti__win_small_begin(c, w, &tag);
        for (int j = 0; j < n; j++)
            if (j != rank)
                tutti__ll_write(w->regions[rank] + off + (size_t)j * span,
                                in + tutti__sdispl(c, j) * es, block, tag);
        for (int i = 0; i < n; i++)
            if (i != rank)
                TUTTI__CHECK(tutti__ll_copy(c, i, off + (size_t)rank * span,
                                            out + tutti__rdispl(c, i) * es, block, tag));
        return TUTTI_OK;
    }

    /* Round k uses half k % 2 of every region: a rank that passed round k's barrier knows that
     * every rank has finished reading round k - 1 (each read it before writing round k), so
     * round k + 1 may overwrite that half at once: one barrier per round instead of two. */
    const size_t half = w->region_size / 2;
    const size_t total = tutti__rtotal(c) * es; /* an output this large is written streaming */
    for (size_t off = 0, k = 0;; off += per, k++) {
        const size_t h = (k & 1) * half;
        char *mine = w->regions[rank] + h;
        uint64_t more = 0;
        double t0 = tutti__phase_begin(c);
        for (int j = 0; j < n; j++) {
            if (j == rank)
                continue;
            size_t bytes = tutti__piece(tutti__scount(c, j), off, per) * es;
            if (bytes > 0) /* an empty block may have no buffer (NULL): no memcpy from it */
                memcpy(mine + head + (size_t)j * slot, in + (tutti__sdispl(c, j) + off) * es,
                       bytes);
            more |= tutti__scount(c, j) > off + per;
        }
        memcpy(mine, &more, sizeof more);
        tutti__phase_end(c, "copy in", -1, 0, t0);
        for (int j = 0; v && off == 0 && j < n; j++) {
            uint64_t sc = tutti__scount(c, j);
            memcpy(mine + HEADER + (size_t)j * sizeof sc, &sc, sizeof sc);
        }
        TUTTI__CHECK(tutti__win_barrier(c));
        for (int i = 0; v && off == 0 && i < n; i++) {
            uint64_t theirs;
            memcpy(&theirs, w->regions[i] + HEADER + (size_t)rank * sizeof theirs, sizeof theirs);
            if (i != rank && theirs != tutti__rcount(c, i))
                return tutti__count_mismatch(c, i, theirs);
        }

        more = 0;
        t0 = tutti__phase_begin(c);
        for (int i = 0; i < n; i++) {
            uint64_t theirs;
            memcpy(&theirs, w->regions[i] + h, sizeof theirs);
            more |= theirs;
            size_t bytes = i != rank ? tutti__piece(tutti__rcount(c, i), off, per) * es : 0;
            if (bytes > 0)
                tutti__copy_out(out + (tutti__rdispl(c, i) + off) * es,
                                w->regions[i] + h + head + (size_t)rank * slot, bytes, total);
        }
        tutti__phase_end(c, "copy out", -1, 0, t0);
        if (!more) /* the last round's half is free only once every rank has read it */
            return tutti__win_barrier(c);
    }
}

const tutti__algo_t tutti__alltoall_direct = {
    .name = "direct",
    .run = run,
    .needs = TUTTI__NEEDS_WINDOW,
    .desc = "shm window: every rank writes a slot per peer and reads its slot from every "
            "region, 2 barriers per round; one node only, any size",
};
