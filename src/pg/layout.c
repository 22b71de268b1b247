/* layout.c: the checks of a v-collective's layout (allgatherv's and alltoallv's counts and
 * displacements), pure functions of the arrays so that they can be fuzzed alone. */
#include <stdint.h>
#include <stdio.h>

#include "comm.h"

tutti_status_t tutti__layout_span(const char *what, const size_t *counts, const size_t *displs,
                                  int n, size_t esize, size_t *span, char *why, size_t cap)
{
    if (counts == NULL) {
        snprintf(why, cap, "%s is NULL", what);
        return TUTTI_ERR_INVALID_ARG;
    }
    size_t end = 0, sum = 0;
    for (int r = 0; r < n; r++) {
        size_t d = displs ? displs[r] : sum;
        if (counts[r] > SIZE_MAX - d || SIZE_MAX - sum < counts[r]) {
            snprintf(why, cap, "%s[%d] = %zu overflows (displacement %zu)", what, r, counts[r], d);
            return TUTTI_ERR_INVALID_ARG;
        }
        sum += counts[r];
        if (counts[r] && d + counts[r] > end)
            end = d + counts[r];
    }
    /* No object can exceed PTRDIFF_MAX bytes, so a larger span is a wrong layout, not a
     * buffer. */
    if (end != 0 && esize > PTRDIFF_MAX / end) {
        snprintf(why, cap, "%s reach element %zu of %zu bytes, beyond the address space", what,
                 end, esize);
        return TUTTI_ERR_INVALID_ARG;
    }
    *span = end * esize;
    return TUTTI_OK;
}

tutti_status_t tutti__layout_own(const size_t *sendcounts, const size_t *recvcounts, int me,
                                 char *why, size_t cap)
{
    if (sendcounts[me] != recvcounts[me]) {
        snprintf(why, cap, "sendcounts[%d] = %zu but recvcounts[%d] = %zu: this rank's block to "
                 "itself must have one size (it is copied from the one to the other)",
                 me, sendcounts[me], me, recvcounts[me]);
        return TUTTI_ERR_INVALID_ARG;
    }
    return TUTTI_OK;
}
