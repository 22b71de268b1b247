/* fuzz_layout.c: fuzzes the v-collectives' layout checks (src/pg/layout.c): whatever counts and
 * displacements come in, an accepted layout fits the span the check computed, without an
 * overflow on the way, the disjointness check refuses exactly the layouts whose blocks share
 * an element, and the own-block check accepts exactly equal counts. */
#include <string.h>

#include "../../src/pg/comm.h"
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    setenv("CCL_LOG_LEVEL", "error", 1); /* refusals are the point here, not news */
    tutti__log_init();
    return 0;
}

/* take reads the next 8 bytes as a size_t; a few small values are far likelier to matter, so
 * the input's first byte of each picks a small number, a large one, or raw bits. */
static size_t take(const uint8_t **p, size_t *left)
{
    uint8_t raw[9] = {0};
    size_t n = *left < 9 ? *left : 9;
    memcpy(raw, *p, n);
    *p += n;
    *left -= n;
    size_t v;
    memcpy(&v, raw + 1, sizeof v);
    switch (raw[0] & 3) {
    case 0: return raw[1];
    case 1: return SIZE_MAX - raw[1];
    case 2: return (size_t)1 << (raw[1] & 63);
    default: return v;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int n = 1 + data[0] % 64;
    size_t esize = (size_t)1 << (data[1] & 3);
    bool packed = data[1] & 4;
    const uint8_t *p = data + 2;
    size_t left = size - 2;
    size_t counts[64], displs[64], counts2[64];
    for (int r = 0; r < n; r++) {
        counts[r] = take(&p, &left);
        displs[r] = take(&p, &left);
        counts2[r] = take(&p, &left);
    }
    char why[256];
    size_t span = 12345;
    tutti_status_t st = tutti__layout_span("counts", counts, packed ? NULL : displs, n, esize,
                                           &span, why, sizeof why);
    FUZZ_ASSERT(st == TUTTI_OK || st == TUTTI_ERR_INVALID_ARG);
    if (st == TUTTI_OK) {
        FUZZ_ASSERT(span <= PTRDIFF_MAX);
        FUZZ_ASSERT(span % esize == 0);
        size_t sum = 0;
        for (int r = 0; r < n; r++) {
            size_t d = packed ? sum : displs[r];
            /* what copy_layout (coll.c) and the algorithms compute must not wrap */
            FUZZ_ASSERT(counts[r] <= SIZE_MAX - d);
            if (counts[r] > 0)
                FUZZ_ASSERT(d + counts[r] <= span / esize);
            FUZZ_ASSERT(counts[r] <= SIZE_MAX - sum);
            sum += counts[r];
        }
        /* disjointness, against the obvious quadratic check */
        st = tutti__layout_disjoint("counts", counts, packed ? NULL : displs, n, why, sizeof why);
        FUZZ_ASSERT(st == TUTTI_OK || st == TUTTI_ERR_INVALID_ARG);
        bool overlap = false;
        for (int i = 0; i < n && !packed; i++)
            for (int j = i + 1; j < n; j++)
                overlap |= counts[i] > 0 && counts[j] > 0 && displs[i] < displs[j] + counts[j] &&
                           displs[j] < displs[i] + counts[i];
        FUZZ_ASSERT((st == TUTTI_ERR_INVALID_ARG) == overlap);
    } else {
        FUZZ_ASSERT(span == 12345); /* a refused layout leaves the output alone */
        FUZZ_ASSERT(memchr(why, '\0', sizeof why) != NULL && why[0] != '\0');
    }
    int me = data[1] >> 3;
    if (me < n) {
        st = tutti__layout_own(counts, counts2, me, why, sizeof why);
        FUZZ_ASSERT((st == TUTTI_OK) == (counts[me] == counts2[me]));
    }
    return 0;
}
