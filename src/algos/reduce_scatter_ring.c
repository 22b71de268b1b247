/* reduce_scatter_ring.c: ring reduce-scatter, rank r ending with block r of the reduction.
 *
 * Each block (recvcount elements) is cut into segments of at most CHUNK_BYTES; for each
 * segment offset, n-1 steps send a partial chunk (that segment of one block) to the right
 * neighbour and reduce the chunk arriving from the left with the own input. Partial results
 * travel in scratch; the last step reduces block r's chunk straight into recvbuf (AVG divides
 * there, once). Cost: n-1 steps per segment, each rank sends (n-1)/n of the input: bandwidth
 * optimal; wins for large blocks across nodes. The receive of step k+1 is posted before the
 * reduction of step k.
 */
#include "algos.h"
#include "patterns/ring.h"

#define CHUNK_BYTES ((size_t)1 << 20)

static tutti_status_t run(tutti__coll_t *c)
{
    const int n = c->size, rank = c->rank;
    const int right = tutti__ring_right(rank, n), left = tutti__ring_left(rank, n);
    const size_t es = c->esize, rc = c->count;
    const size_t seg_max = CHUNK_BYTES / es ? CHUNK_BYTES / es : 1;
    const char *in = c->sendbuf; /* n * rc elements; in place: recvbuf holds them */
    char *out = c->recvbuf;
    if (c->count == 0)
        return TUTTI_OK;

    /* Two chunks in which partial results arrive, get reduced and leave again. */
    size_t cb = tutti__min_size(rc, seg_max) * es;
    char *scratch = tutti__coll_scratch(c, 2 * cb);
    if (scratch == NULL)
        return TUTTI_ERR_NO_MEMORY;
    char *buf[2] = {scratch, scratch + cb};

    for (size_t off = 0; off < rc; off += seg_max) {
        const size_t m = tutti__min_size(seg_max, rc - off), bytes = m * es;
#define CHUNK(b) (in + ((size_t)(b) * rc + off) * es)
        /* Writing recvbuf[off..off+m) at the last step is safe in place: that is block 0's
         * chunk at this offset, already consumed, and later segments read higher offsets. */
        tutti__req_t req[2]; /* [0] receive, [1] send */
        TUTTI__CHECK(tutti__irecv(c, left, buf[0], bytes, &req[0]));
        TUTTI__CHECK(tutti__isend(c, right, CHUNK(tutti__ring_rs_block(rank, n, 0)), bytes, &req[1]));
        for (int k = 0; k < n - 1; k++) {
            TUTTI__CHECK(tutti__waitall(c, req, 2));
            const int rb = tutti__ring_rs_block(left, n, k);
            const void *srcs[2] = {CHUNK(rb), buf[k & 1]};
            if (k == n - 2) { /* rb == rank: the final value */
                tutti__reduce(out + off * es, srcs, 2, m, c->dtype, c->op, tutti__avg_div(c));
                break;
            }
            TUTTI__CHECK(tutti__irecv(c, left, buf[(k + 1) & 1], bytes, &req[0]));
            tutti__reduce(buf[k & 1], srcs, 2, m, c->dtype, c->op, 0);
            TUTTI__CHECK(tutti__isend(c, right, buf[k & 1], bytes, &req[1]));
        }
#undef CHUNK
    }
    return TUTTI_OK;
}

const tutti__algo_t tutti__reduce_scatter_ring = {
    .name = "ring",
    .run = run,
    .desc = "ring reduce-scatter in 1 MiB chunks: bandwidth-optimal, n-1 steps; for large "
            "blocks across nodes",
};
