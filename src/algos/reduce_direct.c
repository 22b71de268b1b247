/* reduce_direct.c: one-node reduce through the shm window, every rank reducing a slice.
 *
 * Per segment of up to region_size bytes: each rank copies its input into its own region;
 * barrier; rank r reduces slice r over all n regions in rank order (one kernel call; AVG
 * divides there) into its own region; barrier; the root copies every slice into recvbuf;
 * barrier (before the regions are reused). Cost: 3 barriers per segment and no messages; the
 * reduction work is spread over all ranks instead of piling up at the root as in a tree. Wins
 * at every size when every rank is on one node. Small messages (n * bytes <= SMALL_BYTES) let
 * the root reduce the whole buffer itself, saving a barrier.
 */
#include "algos.h"

static tutti_status_t run(tutti__coll_t *c) { return tutti__direct_reduce(c, c->root); }

const tutti__algo_t tutti__reduce_direct = {
    .name = "direct",
    .run = run,
    .needs = TUTTI__NEEDS_WINDOW,
    .desc = "shm window: each rank reduces 1/n of the buffer, the root gathers the slices; one "
            "node only, any size",
};
