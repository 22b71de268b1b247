/* allreduce_ring.c: ring allreduce, a ring reduce-scatter followed by a ring allgather.
 *
 * The buffer is cut into segments of n chunks (at most CHUNK_BYTES each, so scratch stays
 * bounded; the first count % n chunks of a segment are one element longer). For each segment,
 * n-1 steps send a partial chunk to the right neighbour and reduce the chunk arriving from the
 * left into recvbuf; after them rank r holds the final chunk r, computed by r alone, so every
 * rank ends with the same bits. n-1 more steps pass the finished chunks around the ring.
 * Cost: 2(n-1) steps per segment, each rank sends and receives 2(n-1)/n of the buffer, the
 * bandwidth optimum; the step count makes it lose to the tree for small messages, and to the
 * direct algorithm on one node where every rank can read every other's memory.
 * The receive of step k+1 is posted before the reduction of step k, into a second scratch
 * chunk, so that the transport moves data while the CPU reduces.
 */
#include "algos.h"
#include "patterns/ring.h"

#define CHUNK_BYTES ((size_t)1 << 20)

static tutti_status_t run(tutti__coll_t *c)
{
    const int n = c->size, rank = c->rank;
    const int right = tutti__ring_right(rank, n), left = tutti__ring_left(rank, n);
    const size_t es = c->esize;
    const size_t chunk_max = CHUNK_BYTES / es ? CHUNK_BYTES / es : 1;
    const size_t seg_max = chunk_max * (size_t)n;
    const char *in = c->sendbuf;
    char *out = c->recvbuf;
    if (c->count == 0)
        return TUTTI_OK;

    /* Two receive chunks; a chunk of any segment is at most ceil(segment / n) elements. */
    size_t rchunk = tutti__div_up(tutti__min_size(c->count, seg_max), (size_t)n) * es;
    char *scratch = tutti__coll_scratch(c, 2 * rchunk);
    if (scratch == NULL)
        return TUTTI_ERR_NO_MEMORY;
    char *rbuf[2] = {scratch, scratch + rchunk};

    for (size_t base = 0; base < c->count; base += seg_max) {
        const size_t m = tutti__min_size(seg_max, c->count - base);
#define OFF(b) ((base + tutti__split_off(m, n, (b))) * es)
#define LEN(b) (tutti__split_len(m, n, (b)))

        /* Reduce-scatter. Every chunk but rank-1 is received exactly once and reduced with the
         * untouched input into recvbuf, so no copy of sendbuf is needed (in place or not);
         * chunk rank-1 leaves from the input at step 0 and returns finished in the allgather. */
        tutti__req_t req[2]; /* [0] receive, [1] send */
        int sb = tutti__ring_rs_block(rank, n, 0), rb = tutti__ring_rs_block(left, n, 0);
        TUTTI__CHECK(tutti__irecv(c, left, rbuf[0], LEN(rb) * es, &req[0]));
        TUTTI__CHECK(tutti__isend(c, right, in + OFF(sb), LEN(sb) * es, &req[1]));
        for (int k = 0; k < n - 1; k++) {
            TUTTI__CHECK(tutti__waitall(c, req, 2));
            rb = tutti__ring_rs_block(left, n, k);
            const bool last = k == n - 2;
            if (!last) {
                int nrb = tutti__ring_rs_block(left, n, k + 1);
                TUTTI__CHECK(tutti__irecv(c, left, rbuf[(k + 1) & 1], LEN(nrb) * es, &req[0]));
            }
            const void *srcs[2] = {in + OFF(rb), rbuf[k & 1]};
            double t0 = tutti__phase_begin(c);
            tutti__reduce(out + OFF(rb), srcs, 2, LEN(rb), c->dtype, c->op,
                          last ? tutti__avg_div(c) : 0);
            tutti__phase_end(c, "reduce", c->group ? c->group[left] : left, LEN(rb) * es, t0);
            if (!last) /* the chunk just reduced is the one to send next */
                TUTTI__CHECK(tutti__isend(c, right, out + OFF(rb), LEN(rb) * es, &req[1]));
        }

        /* Allgather of the finished chunks, straight into recvbuf. */
        for (int k = 0; k < n - 1; k++) {
            sb = tutti__ring_ag_block(rank, n, k);
            rb = tutti__ring_ag_block(left, n, k);
            TUTTI__CHECK(tutti__sendrecv(c, right, out + OFF(sb), LEN(sb) * es, left,
                                         out + OFF(rb), LEN(rb) * es));
        }
#undef OFF
#undef LEN
    }
    return TUTTI_OK;
}

const tutti__algo_t tutti__allreduce_ring = {
    .name = "ring",
    .run = run,
    .desc = "ring reduce-scatter + ring allgather in 1 MiB chunks: bandwidth-optimal, "
            "2(n-1) steps; for large messages across nodes",
};
