/* alltoall_cma.c: one-node alltoall (and alltoallv) by single copy: each rank reads its block
 * straight out of every other rank's send buffer.
 *
 * Each rank writes, in the first words of its window region, the address of its send buffer
 * (alltoallv: and, for each rank, where its block is and how long); barrier; rank r reads the
 * block for it from every other rank's buffer with process_vm_readv (cross-memory attach) into
 * place in its receive buffer; a last barrier keeps every send buffer alive until all reads are
 * done, and tells every rank if any rank's reads failed. In place, the input is first copied to
 * scratch (tutti__alltoall_begin), which is then what the others read.
 *
 * Cost: 2 barriers and n-1 system calls per rank; each byte crosses once, copied by the kernel,
 * against twice (into the window, out of it) for the direct algorithm and a barrier pair per
 * window's worth. The kernel pins the source page by page, so from 4 KiB pages a single copy
 * moves less per second than memcpy does (a send buffer used again is backed with huge pages
 * first: tutti__cma_offer); it wins only where the direct algorithm's second copy and extra
 * barriers cost more than that (select.c holds the measurement, and every rank of a plain
 * alltoall picks it alike from the block size).
 *
 * alltoallv's blocks differ in size, and no rank knows the others', so the choice is made per
 * block instead, by its sender, who publishes it: a block smaller than single copy's threshold
 * for a plain alltoall (tutti__cma_alltoall_min) is copied into the sender's region, after the
 * header, while the region has room, and its receiver copies it out; a larger one is read by
 * single copy. Every pair thus moves its block as the plain alltoall of that block size would,
 * in one round: 2 barriers, whatever the mix (the default for alltoallv where single copy is
 * allowed; the direct algorithm otherwise).
 */
#include "algos.h"

enum { ADDR, FIRST_PEER }; /* words of a rank's header in its region; alltoallv: then 2 per rank */
#define IN_WINDOW (UINT64_C(1) << 63) /* a block's place is an offset into its sender's region */

/* publish_v writes in this rank's header, for each rank j, where its block for j is (a
 * displacement in in, or IN_WINDOW | the offset in this rank's region it copied it to, past the
 * head bytes of the header) and its count; it offers the single-copy blocks' span to
 * tutti__cma_offer. */
static void publish_v(tutti__coll_t *c, tutti__window_t *w, const char *in, size_t head)
{
    const int n = c->size, rank = c->rank;
    const size_t es = c->esize, small = tutti__cma_alltoall_min(n);
    uint64_t *mine = (uint64_t *)(void *)w->regions[rank];
    size_t used = head, lo = SIZE_MAX, hi = 0, sum = 0;
    for (int j = 0; j < n; j++) {
        size_t d = tutti__sdispl(c, j), k = tutti__scount(c, j), bytes = k * es;
        size_t lines = (bytes + 63) & ~(size_t)63; /* the next block starts on a line */
        uint64_t where = d;
        if (j != rank && k > 0 && bytes < small && used <= w->region_size &&
            lines <= w->region_size - used) {
            memcpy(w->regions[rank] + used, in + d * es, bytes);
            where = IN_WINDOW | used;
            used += lines;
        } else if (j != rank && k > 0) {
            lo = d < lo ? d : lo;
            hi = d + k > hi ? d + k : hi;
            sum += k;
        }
        mine[FIRST_PEER + 2 * j] = where;
        mine[FIRST_PEER + 2 * j + 1] = k;
    }
    /* offered as one span only where the blocks fill most of it (a collapse makes every page
     * of the span resident, the gaps between blocks too) */
    if (hi > lo && sum >= (hi - lo) / 4 * 3)
        tutti__cma_offer(w, in + lo * es, (hi - lo) * es);
}

/* read_v takes the block from rank i, as its sender published it. An offset into i's region
 * comes from another process: it is used only inside that region's data, past the header. */
static tutti_status_t read_v(tutti__coll_t *c, tutti__window_t *w, int i, char *out, size_t head,
                             size_t total)
{
    const size_t es = c->esize, bytes = tutti__rcount(c, i) * es;
    const uint64_t *theirs = (const uint64_t *)(const void *)w->regions[i];
    uint64_t where = theirs[FIRST_PEER + 2 * c->rank];
    char *dst = out + tutti__rdispl(c, i) * es;
    if (!(where & IN_WINDOW))
        return tutti__cma_get(c, w, i, theirs[ADDR] + where * es, dst, bytes);
    uint64_t off = where & ~IN_WINDOW;
    if (off < head || off > w->region_size || bytes > w->region_size - off)
        return tutti__coll_fail(c, TUTTI_ERR_TRANSPORT,
                                "rank %d's window says its block for this rank lies at offset "
                                "%llu of its %zu-byte region, where %zu bytes do not fit: its "
                                "shared memory was overwritten",
                                c->group ? c->group[i] : i, (unsigned long long)off,
                                w->region_size, bytes);
    tutti__copy_out(dst, w->regions[i] + off, bytes, total);
    return TUTTI_OK;
}

static tutti_status_t run(tutti__coll_t *c)
{
    const int n = c->size, rank = c->rank;
    const size_t es = c->esize;
    const bool v = c->counts != NULL;
    const size_t words = FIRST_PEER + (v ? 2 * (size_t)n : 0);
    const size_t head = (words * sizeof(uint64_t) + 63) & ~(size_t)63;
    tutti__window_t *w;
    TUTTI__CHECK(tutti__cma_window(c, words, &w));
    const char *in = c->sendbuf;
    char *out = c->recvbuf;
    TUTTI__CHECK(tutti__alltoall_begin(c, &in)); /* in place: in is now a copy */

    uint64_t *mine = (uint64_t *)(void *)w->regions[rank];
    mine[ADDR] = (uint64_t)(uintptr_t)in;
    if (v)
        publish_v(c, w, in, head);
    else if (c->count > 0) /* what the others read of in: all of it but this rank's block */
        tutti__cma_offer(w, in, (size_t)n * c->count * es);
    TUTTI__CHECK(tutti__win_barrier(c));
    /* A block of another length than the sender's would be read past its end, or short: fail
     * before reading (the peers learn it from this rank's failure, in the last barrier). */
    for (int i = 0; v && i < n; i++) {
        const uint64_t *head_i = (const uint64_t *)(const void *)w->regions[i];
        uint64_t theirs = head_i[FIRST_PEER + 2 * rank + 1];
        if (i != rank && theirs != tutti__rcount(c, i))
            return tutti__count_mismatch(c, i, theirs);
    }

    /* The others' words are only addresses and offsets into their own memory: the kernel
     * checks each read, and the length read is this rank's own count. */
    tutti_status_t st = TUTTI_OK;
    const size_t total = tutti__rtotal(c) * es;
    for (int k = 1; k < n && st == TUTTI_OK; k++) {
        int i = (rank + k) % n; /* staggered, so that no rank is read by all at once */
        size_t bytes = tutti__rcount(c, i) * es;
        if (bytes == 0)
            continue;
        if (v) {
            st = read_v(c, w, i, out, head, total);
            continue;
        }
        const uint64_t *theirs = (const uint64_t *)(const void *)w->regions[i];
        st = tutti__cma_get(c, w, i, theirs[ADDR] + (uint64_t)rank * c->count * es,
                            out + tutti__rdispl(c, i) * es, bytes);
    }
    return tutti__cma_finish(c, st);
}

const tutti__algo_t tutti__alltoall_cma = {
    .name = "cma",
    .run = run,
    .needs = TUTTI__NEEDS_WINDOW | TUTTI__NEEDS_CMA,
    .desc = "single copy: every rank reads its block from each peer's send buffer with "
            "process_vm_readv, 2 barriers (alltoallv: blocks below the plain alltoall's "
            "threshold through the window); one node only, where the system allows it",
};
