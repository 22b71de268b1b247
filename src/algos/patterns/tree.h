/* tree.h: pure peer arithmetic of the binomial tree (parent and children relative to a root) and
 * of the dissemination barrier, testable without a network. */
#ifndef TUTTI_PATTERNS_TREE_H
#define TUTTI_PATTERNS_TREE_H

#include "chunk.h"

/* A binomial tree over n <= INT_MAX ranks has at most this many children per rank. */
#define TUTTI__TREE_MAX_CHILDREN 31

/*
 * The binomial tree numbers ranks relative to the root: v = (rank - root) mod n. The parent of
 * v is v with its lowest set bit cleared; the children of v are v + 2^j for every 2^j below
 * v's lowest set bit (every 2^j < n for the root) with v + 2^j < n. Depth: ceil(log2 n).
 */
static inline int tutti__tree_vrank(int rank, int root, int n) { return tutti__mod((long)rank - root, n); }

/* tutti__tree_parent is rank's parent in the tree rooted at root, or -1 for the root. */
static inline int tutti__tree_parent(int rank, int root, int n)
{
    int v = tutti__tree_vrank(rank, root, n);
    if (v == 0)
        return -1;
    return tutti__mod((long)(v & (v - 1)) + root, n);
}

/*
 * tutti__tree_children stores rank's children (at most TUTTI__TREE_MAX_CHILDREN) in kids and
 * returns their number. Child i heads a subtree of 2^i ranks (the last one may be cut short by
 * n): smallest first, the order in which partial results arrive in a reduce; a broadcast
 * serves them in reverse, the deepest subtree first.
 */
static inline int tutti__tree_children(int rank, int root, int n, int *kids)
{
    long v = tutti__tree_vrank(rank, root, n);
    int cnt = 0;
    for (long mask = 1; mask < n; mask <<= 1) {
        if (v & mask)
            break;
        if (v + mask < n)
            kids[cnt++] = tutti__mod(v + mask + root, n);
    }
    return cnt;
}

/* The dissemination barrier runs ceil(log2 n) rounds; in round k a rank signals rank + 2^k and
 * waits for rank - 2^k. After round k each rank has heard, directly or not, from the 2^(k+1) - 1
 * ranks before it. */
static inline int tutti__diss_rounds(int n)
{
    int k = 0;
    while ((1L << k) < n)
        k++;
    return k;
}

static inline int tutti__diss_to(int rank, int n, int k) { return tutti__mod((long)rank + (1L << k), n); }
static inline int tutti__diss_from(int rank, int n, int k) { return tutti__mod((long)rank - (1L << k), n); }

#endif /* TUTTI_PATTERNS_TREE_H */
