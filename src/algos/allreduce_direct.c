/* allreduce_direct.c: one-node allreduce through the shm window, every rank reducing a slice.
 *
 * Per segment of up to region_size bytes: each rank copies its input into its own region (from
 * 1 MiB on, only the slices that the others reduce); barrier; rank r reduces slice r (1/n of
 * the segment) over all n ranks' copies in rank order (from 1 MiB on its own straight from its
 * input), in one kernel call, into its own region; barrier; every rank copies all n slices
 * out; barrier (the regions are then free for reuse). The result is the correctly rounded
 * reduction in rank order, the same bits on every rank. Cost: 3 barriers per segment, each
 * rank reads n slices of 1/n and copies the buffer twice ((2n-1)/n times from 1 MiB on): no
 * message passing at all, so it wins at every size when every rank is on one node. Small
 * messages (n * bytes <= SMALL_BYTES) skip the slices: every
 * rank copies its input into the window's small area (two halves, alternating per operation),
 * and after a single barrier reduces the whole buffer over all ranks' copies itself, in the
 * same order with the same kernel, so the bits still agree (latency is all that counts there;
 * one barrier instead of three). The smallest (bytes <= LL_BYTES) need no barrier at all: the
 * inputs go out as flagged lines (tutti__ll_write) and each rank reduces line by line as the
 * others' lines arrive, one cache-line hand-off per call; past a few lines the per-line kernel
 * calls cost more than the barrier saves. reduce_direct.c runs the same steps with only its
 * root copying out.
 */
#include "algos.h"
#include "patterns/chunk.h"

#define SMALL_BYTES ((size_t)16 << 10)
#define LL_BYTES ((size_t)128)
#define IN_PLACE_MIN ((size_t)1 << 20)
_Static_assert(LL_BYTES / 56 * 64 + 64 <= TUTTI__WIN_SMALL_LL, "LL data fits");

tutti_status_t tutti__direct_reduce(tutti__coll_t *c, int root)
{
    const int n = c->size, rank = c->rank;
    const bool copy_out = root < 0 || root == rank;
    const size_t es = c->esize;
    tutti__window_t *w;
    TUTTI__CHECK(tutti__direct_window(c, &w));
    const void **srcs = tutti__coll_scratch(c, (size_t)n * sizeof *srcs);
    if (srcs == NULL)
        return TUTTI_ERR_NO_MEMORY;
    /* A segment: a region, or less where a rank's share of the cache is smaller (net.h). */
    const size_t rb = c->net->round_bytes;
    const size_t seg = (rb >= es && rb < w->region_size ? rb : w->region_size) / es;
    const char *in = c->sendbuf;
    char *out = c->recvbuf;

    const size_t bytes = c->count * es;
    if (w->small_size > 0 && bytes <= LL_BYTES) {
        /* No barrier at all: each rank writes its input as flagged lines into its small area
         * and reads the others' lines as they come (tutti__win_small_begin says why nobody
         * overwrites lines still to be read). */
        uint64_t tag;
        size_t off = tutti__win_small_begin(c, w, &tag);
        tutti__ll_write(w->regions[rank] + off, in, bytes, tag);
        /* Line by line, straight from the others' lines: no copies. Each line holds whole
         * elements (TUTTI__LL_DATA is a multiple of every element size). */
        const size_t per = TUTTI__LL_DATA / es;
        for (size_t i = 0, o = off; i < c->count; i += per, o += 64) {
            for (int r = 0; r < n; r++) {
                if (r != rank)
                    TUTTI__CHECK(tutti__ll_wait(c, r, o, tag));
                srcs[r] = r == rank ? in + i * es : w->regions[r] + o;
            }
            if (copy_out)
                tutti__reduce(out + i * es, srcs, n, tutti__min_size(per, c->count - i), c->dtype,
                              c->op, n);
        }
        return TUTTI_OK;
    }
    if (w->small_size > 0 && bytes * (size_t)n <= SMALL_BYTES && bytes <= TUTTI__WIN_SMALL_RAW) {
        /* One barrier: the data goes to the small area, whose halves alternate, so no barrier
         * is needed after the reads. */
        uint64_t tag;
        size_t off = tutti__win_small_begin(c, w, &tag) + TUTTI__WIN_SMALL_LL;
        memcpy(w->regions[rank] + off, in, bytes);
        TUTTI__CHECK(tutti__win_barrier(c));
        if (copy_out) {
            for (int i = 0; i < n; i++)
                srcs[i] = w->regions[i] + off;
            tutti__reduce(out, srcs, n, c->count, c->dtype, c->op, n);
        }
        return TUTTI_OK;
    }
    if (c->count <= seg && c->count * es * (size_t)n <= SMALL_BYTES) {
        memcpy(w->regions[rank], in, c->count * es);
        TUTTI__CHECK(tutti__win_barrier(c));
        if (copy_out) {
            for (int i = 0; i < n; i++)
                srcs[i] = w->regions[i];
            tutti__reduce(out, srcs, n, c->count, c->dtype, c->op, n);
        }
        return tutti__win_barrier(c); /* before any rank overwrites its region again */
    }

    /* From IN_PLACE_MIN bytes on, only the slices the others reduce go to the window: this rank
     * reads its own slice of its input in place (the same values in the same order: the same
     * bits), a copy of 1/n of the buffer saved. Below, the copy is cheaper than reading the
     * input where it lies: measured (bench/ab, 2 ranks, Open MPI's launch, 6-10 launches each)
     * 1.31-1.45x slower in place from 64 to 512 KiB, 0.65x at 1 MiB, 0.90-0.96x from 2 to
     * 32 MiB. */
    const bool own_in_place = bytes >= IN_PLACE_MIN;
    for (size_t base = 0; base < c->count; base += seg) {
        const size_t m = tutti__min_size(seg, c->count - base);
        double t0 = tutti__phase_begin(c);
        for (int s = 0; s < n; s++) {
            const size_t o = tutti__split_off(m, n, s) * es;
            if (s != rank || !own_in_place)
                memcpy(w->regions[rank] + o, in + base * es + o, tutti__split_len(m, n, s) * es);
        }
        tutti__phase_end(c, "copy in", -1, m * es, t0);
        TUTTI__CHECK(tutti__win_barrier(c));

        const size_t so = tutti__split_off(m, n, rank) * es;
        for (int i = 0; i < n; i++)
            srcs[i] = i == rank && own_in_place ? in + base * es + so : w->regions[i] + so;
        t0 = tutti__phase_begin(c);
        tutti__reduce(w->regions[rank] + so, srcs, n, tutti__split_len(m, n, rank), c->dtype,
                      c->op, n);
        tutti__phase_end(c, "reduce", -1, tutti__split_len(m, n, rank) * es, t0);
        TUTTI__CHECK(tutti__win_barrier(c));

        t0 = tutti__phase_begin(c);
        for (int s = 0; s < n && copy_out; s++) {
            size_t o = tutti__split_off(m, n, s) * es;
            memcpy(out + base * es + o, w->regions[s] + o, tutti__split_len(m, n, s) * es);
        }
        tutti__phase_end(c, "copy out", -1, copy_out ? m * es : 0, t0);
        TUTTI__CHECK(tutti__win_barrier(c));
    }
    return TUTTI_OK;
}

static tutti_status_t run(tutti__coll_t *c) { return tutti__direct_reduce(c, -1); }

const tutti__algo_t tutti__allreduce_direct = {
    .name = "direct",
    .run = run,
    .needs = TUTTI__NEEDS_WINDOW,
    .desc = "shm window: each rank reduces 1/n of the buffer over all ranks' copies, 3 "
            "barriers per 4 MiB; one node only, any size",
};
