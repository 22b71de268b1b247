/* layout.c: the checks of a v-collective's layout (allgatherv's and alltoallv's counts and
 * displacements), pure functions of the arrays so that they can be fuzzed alone. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

typedef struct block {
    size_t lo, hi; /* elements [lo, hi) */
    int r;
} block_t;

static int by_start(const void *a, const void *b)
{
    const block_t *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

tutti_status_t tutti__layout_disjoint(const char *what, const size_t *counts, const size_t *displs,
                                      int n, char *why, size_t cap)
{
    if (displs == NULL)
        return TUTTI_OK; /* packed */
    /* Blocks in rank order, each after the last (the usual layout): one pass. */
    size_t end = 0;
    int r = 0;
    for (; r < n; r++) {
        if (counts[r] == 0)
            continue;
        if (displs[r] < end)
            break;
        end = displs[r] + counts[r];
    }
    if (r == n)
        return TUTTI_OK;
    block_t *b = malloc((size_t)n * sizeof *b);
    if (b == NULL) {
        snprintf(why, cap, "out of memory checking the %s layout", what);
        return TUTTI_ERR_NO_MEMORY;
    }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (counts[i] > 0)
            b[m++] = (block_t){displs[i], displs[i] + counts[i], i};
    qsort(b, (size_t)m, sizeof *b, by_start);
    tutti_status_t st = TUTTI_OK;
    for (int i = 1; i < m && st == TUTTI_OK; i++)
        if (b[i].lo < b[i - 1].hi) {
            snprintf(why, cap, "%s: the blocks of ranks %d and %d overlap (elements %zu..%zu and "
                     "%zu..%zu): each rank's block must have elements of its own",
                     what, b[i - 1].r, b[i].r, b[i - 1].lo, b[i - 1].hi - 1, b[i].lo, b[i].hi - 1);
            st = TUTTI_ERR_INVALID_ARG;
        }
    free(b);
    return st;
}
